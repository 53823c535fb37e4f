//! `deployster check-type TYPE`: the conformance checks of `engine::conformance`, as a report.

use std::path::PathBuf;

use serde_json::Value;

use super::render::print_json;
use super::{CheckTypeArgs, CliError, ExitKind, OutputFormat, executor_with};
use crate::builtins::reference::{SchemaKey, schema_keys};
use crate::engine::conformance::{self, CheckOptions, Level};
#[cfg(not(feature = "docker"))]
use crate::executors::ImagePlan;

/// Reads a config file (YAML or JSON): (its path as given, the value).
fn read_config(path: &PathBuf) -> Result<(String, Value), CliError> {
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| CliError::Refused(format!("config {shown}: cannot read it: {e}")))?;
    let value: Value = serde_norway::from_str(&text)
        .map_err(|e| CliError::Refused(format!("config {shown}: not YAML or JSON: {e}")))?;
    Ok((shown, value))
}

pub(super) async fn check_type(args: CheckTypeArgs) -> Result<ExitKind, CliError> {
    let configs = args.configs.iter().map(read_config).collect::<Result<Vec<_>, _>>()?;
    let bad_configs = args.bad_configs.iter().map(read_config).collect::<Result<Vec<_>, _>>()?;
    let scratch = tempfile_dir()?;
    let options = CheckOptions {
        timeout: args.timeout,
        slow: args.slow,
        configs,
        bad_configs,
        workspace: std::env::current_dir().map_err(|e| CliError::Refused(format!("no current directory: {e}")))?,
        scratch: scratch.clone(),
    };
    #[cfg(feature = "docker")]
    let images = super::executors::docker(&args.docker);
    #[cfg(not(feature = "docker"))]
    let images = ImagePlan::None;
    let executor = executor_with(images)?;
    if !options.configs.is_empty() {
        // Converging on a config runs the type's actions for real: said before they run.
        errln!(
            "note: check-type runs {}'s actions for real with each --config ({} of them): what they create, change \
             or delete on this machine or its services is done; give configs that point at something disposable",
            args.type_ref,
            options.configs.len()
        );
    }
    let report = conformance::check(executor.as_ref(), &args.type_ref, &options).await;
    let _ = std::fs::remove_dir_all(&scratch);
    match args.output {
        OutputFormat::Json => {
            let mut doc = serde_json::to_value(&report).expect("reports serialize");
            doc["conforms"] = Value::Bool(report.conforms());
            doc["config_keys"] = serde_json::to_value(config_keys(&report)).expect("keys serialize");
            print_json(&doc);
        }
        OutputFormat::Text => {
            outln!("check-type {}", report.type_name);
            for f in &report.findings {
                let level = match f.level {
                    Level::Pass => "PASS",
                    Level::Warn => "WARN",
                    Level::Fail => "FAIL",
                };
                let case = f.case.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default();
                let message = if f.message.is_empty() { String::new() } else { format!(": {}", f.message) };
                outln!("  {level} {} {}{case}{message}", f.id, f.title);
            }
            let keys = config_keys(&report);
            match (&report.config_schema, keys.is_empty()) {
                (None, _) => outln!("config keys: none declared (no config_schema)"),
                (Some(_), true) => outln!("config keys: none (its config_schema declares no properties)"),
                (Some(_), false) => outln!("config keys (from its config_schema):"),
            }
            for key in &keys {
                let required = if key.required { ", required" } else { "" };
                let what = if key.what.is_empty() { String::new() } else { format!(": {}", key.what) };
                outln!("  {} ({}{required}){what}", key.path, key.type_);
            }
            for call in &report.calls {
                let case = call.case.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default();
                outln!("  call {}{case}: {} ms", call.phase, call.elapsed_ms);
            }
            let verdict = if report.conforms() { "conforms" } else { "does not conform" };
            outln!(
                "{} {verdict}: {} passed, {} warnings, {} failed (see docs/check-type.md)",
                report.type_name,
                report.count(Level::Pass),
                report.count(Level::Warn),
                report.count(Level::Fail)
            );
        }
    }
    Ok(ExitKind::of(report.conforms()))
}

/// The keys the type's `config_schema` declares, two levels deep (an object's keys, a list's
/// items' keys): what a resource of it may configure.
fn config_keys(report: &conformance::ConformanceReport) -> Vec<SchemaKey> {
    report.config_schema.as_ref().map(|schema| schema_keys(schema, "", 1)).unwrap_or_default()
}

/// A fresh scratch directory for the plugs a type asks for.
fn tempfile_dir() -> Result<PathBuf, CliError> {
    let dir = std::env::temp_dir().join(format!("deployster-check-type-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|e| CliError::Refused(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}
