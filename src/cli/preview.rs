//! `deployster preview NAME -n NS -f proposed.yaml`: a proposed Manifest planned by the
//! controller in the cluster (a ManifestPreview), waited for and printed — as text, JSON, or
//! Markdown for a pull request's comment. Exits as `plan --detailed-exitcode`: 0 nothing to
//! do, 2 changes pending, 1 any error.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use std::path::PathBuf;

use clap::Args;

use super::render::{print_json, snake_keys};
use super::{CliError, ExitKind};
use crate::crd::Manifest;
use crate::crd::preview::{ManifestPreview, PreviewSpec, PreviewStatus};

/// `deployster preview`.
#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// The Manifest the proposal is for (it need not exist yet).
    pub name: String,
    /// Its namespace [default: the kubeconfig's].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The proposed Manifest object (YAML or JSON): its `spec` is planned.
    #[arg(short, long, value_name = "FILE")]
    pub file: PathBuf,
    #[arg(short, long, value_enum, default_value_t = PreviewFormat::Text)]
    pub output: PreviewFormat,
    /// How long to wait for the controller's plan.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// How long the controller keeps the preview once planned [default: 1h]; with --keep.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,
    /// Leave the preview in the cluster (`kubectl get manifestpreviews`) instead of deleting it
    /// once printed.
    #[arg(long)]
    pub keep: bool,
}

/// How `deployster preview` prints the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreviewFormat {
    Text,
    Json,
    /// For a pull request's comment.
    Markdown,
}

/// How often the preview's status is read while it is planned.
const POLL: Duration = Duration::from_millis(250);

pub(super) async fn preview(args: PreviewArgs) -> Result<ExitKind, CliError> {
    match run(&args).await {
        Ok(kind) => Ok(kind),
        Err(error) => {
            errln!("error: {error}");
            Ok(ExitKind::Failed)
        }
    }
}

async fn run(args: &PreviewArgs) -> Result<ExitKind, CliError> {
    let file = args.file.display().to_string();
    let read = std::fs::read_to_string(&args.file).map_err(|e| CliError::Refused(format!("{file}: {e}")))?;
    let proposed: Manifest = serde_norway::from_str(&read)
        .map_err(|e| CliError::Refused(format!("{file}: not a Manifest object (apiVersion, kind, spec): {e}")))?;
    let client = super::approve::cluster_client().await?;
    let namespace = args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let api: Api<ManifestPreview> = Api::namespaced(client, &namespace);
    let preview = ManifestPreview {
        metadata: ObjectMeta { generate_name: Some(format!("{}-", args.name)), ..ObjectMeta::default() },
        spec: PreviewSpec {
            manifest: args.name.clone(),
            proposed: proposed.spec,
            ttl_seconds_after_finished: args.ttl.map(|t| t.as_secs().clamp(1, 86400) as u32),
        },
        status: None,
    };
    let asked = format!("a preview of manifest {namespace}/{}", args.name);
    let created = api.create(&PostParams::default(), &preview).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 404 => CliError::Refused(format!(
            "{asked}: the ManifestPreview CRD is not installed: deployster crd preview | kubectl apply -f -"
        )),
        kube::Error::Api(s) if s.code == 403 => {
            CliError::Refused(format!("{asked}: not allowed to create ManifestPreviews in {namespace}: {}", s.message))
        }
        kube::Error::Api(s) => CliError::Refused(format!("{asked}: refused: {}", s.message)),
        e => super::approve::api_error(&asked, e),
    })?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let answered = wait(&api, &name, args.timeout).await;
    if !args.keep {
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    let status = answered.map_err(|why| CliError::Refused(format!("preview {namespace}/{name}: {why}")))?;
    let qualified = format!("{namespace}/{}", args.name);
    match args.output {
        PreviewFormat::Json => {
            let status = serde_json::to_value(&status).expect("statuses serialize");
            print_json(&serde_json::json!({"preview": name, "manifest": qualified, "status": snake_keys(status)}))
        }
        PreviewFormat::Markdown => outln!("{}", markdown(&qualified, &status)),
        PreviewFormat::Text => outln!("{}", text(&qualified, &status)),
    }
    Ok(match &status.plan {
        // A plan with failed or blocked resources is an error, as it is for `plan`.
        Some(plan) if plan.resources.iter().any(|r| matches!(r.status.as_str(), "FAILED" | "BLOCKED")) => {
            ExitKind::Failed
        }
        Some(plan) if status.phase.as_deref() == Some("Planned") => {
            if plan.changes {
                ExitKind::ChangesPending
            } else {
                ExitKind::Ok
            }
        }
        _ => ExitKind::Failed,
    })
}

/// The preview's status once planned (or failed); an error if it is not in `timeout`.
async fn wait(api: &Api<ManifestPreview>, name: &str, timeout: Duration) -> Result<PreviewStatus, String> {
    let started = Instant::now();
    loop {
        let found = api.get_opt(name).await.map_err(|e| format!("cannot read it: {e}"))?;
        let Some(found) = found else { return Err("it was deleted before it was planned".into()) };
        if let Some(status) = found.status.filter(|s| matches!(s.phase.as_deref(), Some("Planned" | "Failed"))) {
            return Ok(status);
        }
        if started.elapsed() >= timeout {
            let humane = humantime::format_duration(timeout);
            return Err(format!(
                "not planned within {humane} (is the controller running, and watching this namespace?)"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The plan for a terminal.
fn text(manifest: &str, status: &PreviewStatus) -> String {
    let Some(plan) = status.plan.as_ref().filter(|_| status.phase.as_deref() == Some("Planned")) else {
        return failure(manifest, status);
    };
    let mut out = format!("Preview of {manifest} (plan {}, revision {}):\n", plan.id, plan.revision);
    for r in plan.resources.iter().chain(&plan.removals) {
        out.push_str(&format!("  {:<9} {}  {}\n", r.status, r.name, r.type_));
        for line in lines_of(r) {
            out.push_str(&format!("              {line}\n"));
        }
    }
    for d in &plan.drift {
        out.push_str(&format!("Drift: {d}\n"));
    }
    for n in &plan.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&format!("Plan: {}.", plan.summary));
    out
}

fn failure(manifest: &str, status: &PreviewStatus) -> String {
    format!(
        "Preview of {manifest} failed ({}): {}",
        status.reason.as_deref().unwrap_or("unknown"),
        status.message.as_deref().unwrap_or("no reason given")
    )
}

/// What is said under a resource: its actions, what changed, what it was found to be, what is
/// unknown, why it failed.
fn lines_of(r: &crate::crd::preview::PreviewResource) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    if let Some(found) = &r.found {
        lines.push(format!("read with its dependencies as found: {found}"));
    }
    lines.extend(r.actions.iter().map(|a| format!("→ {a}")));
    lines.extend(r.differences.iter().map(|d| format!("changed: {d}")));
    lines.extend(r.unknown.iter().map(|u| format!("unknown until its dependencies are applied: {u}")));
    lines.extend(r.message.iter().cloned());
    lines
}

/// The plan as a pull request's comment.
pub fn markdown(manifest: &str, status: &PreviewStatus) -> String {
    let Some(plan) = status.plan.as_ref().filter(|_| status.phase.as_deref() == Some("Planned")) else {
        return format!("### ❌ Deployster preview of `{manifest}`\n\n{}\n", escape(&failure(manifest, status)));
    };
    let headline = if plan.changes { "changes pending" } else { "no changes" };
    let mut out = format!(
        "### Deployster preview of `{manifest}`: {headline}\n\n**{}** — plan `{}`, revision `{}`\n\n",
        plan.summary, plan.id, plan.revision
    );
    out.push_str("| | resource | type | what applying does |\n|---|---|---|---|\n");
    for r in plan.resources.iter().chain(&plan.removals) {
        let marker = match r.status.as_str() {
            "MISSING" => "+",
            "STALE" => "~",
            "DELETE" => "-",
            "PENDING" => "?",
            "FAILED" | "BLOCKED" => "!",
            _ => " ",
        };
        let what = lines_of(r).iter().map(|l| escape(l)).collect::<Vec<_>>().join("<br>");
        out.push_str(&format!("| `{marker}` {} | `{}` | `{}` | {what} |\n", r.status, r.name, r.type_));
    }
    for d in &plan.drift {
        out.push_str(&format!("\n> **Drift:** {}", escape(d)));
    }
    for n in &plan.notes {
        out.push_str(&format!("\n> **Note:** {}", escape(n)));
    }
    if plan.changes {
        let (namespace, name) = manifest.split_once('/').unwrap_or(("default", manifest));
        out.push_str(&format!(
            "\n\nOnce merged (with `approval: Manual`): `deployster approve {name} -n {namespace} --plan {}` applies \
             exactly this plan, or nothing if the controller's plan differs by then.",
            plan.id
        ));
    }
    out.push('\n');
    out
}

/// Text safe in a Markdown table cell.
fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', "<br>").replace('<', "&lt;").replace("&lt;br>", "<br>")
}
