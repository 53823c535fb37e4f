//! The variables a manifest was applied with, kept with each successful apply, so that a plan
//! made with others (a workspace planned without its `--var`s) says which differ instead of
//! quietly re-pointing what that apply made.

use serde_json::{Map, Value, json};

use crate::engine::validate::ValidatedManifest;
use crate::history::{Event, History, HistoryError, target};

/// What a successful apply keeps of `manifest`'s variables: each one's value as shown, or for
/// a sensitive one only its keyed fingerprint (nothing without a key).
pub(crate) fn kept(manifest: &ValidatedManifest) -> Value {
    let vars = manifest.vars.iter().map(|(name, value)| {
        let kept = match manifest.sensitive.contains(name) {
            true => manifest
                .mask
                .fingerprint(value)
                .map_or_else(|| json!({"sensitive": true}), |f| json!({"sensitive": true, "fingerprint": f})),
            false => json!({"value": manifest.mask.value(value)}),
        };
        (name.clone(), kept)
    });
    json!({"manifest": manifest.inventory_key(), "variables": vars.collect::<Map<_, _>>()})
}

/// A revision, and the variables it was applied with, as [`kept`] keeps them.
type Applied = (String, Map<String, Value>);

/// The variables of `manifest`'s latest successful apply, when the log's latest is its own.
fn applied(log: &dyn History, manifest: &ValidatedManifest) -> Result<Option<Applied>, HistoryError> {
    let Some(entry) = log.latest(target::MANIFEST, &[Event::RunFinishedSuccessfully])? else { return Ok(None) };
    let ours = entry.detail.get("manifest").and_then(Value::as_str) == Some(&manifest.inventory_key());
    match entry.detail.get("variables").and_then(Value::as_object) {
        Some(vars) if ours => Ok(Some((entry.revision, vars.clone()))),
        _ => Ok(None),
    }
}

/// A note for the plan when the variables differ from those of the last successful apply:
/// each differing one, as it was and as it is now (a sensitive one by name only).
/// `now`: what [`kept`] keeps of the manifest's variables today.
pub(crate) fn changed(
    log: &dyn History,
    manifest: &ValidatedManifest,
    now: &Value,
) -> Result<Option<String>, HistoryError> {
    let Some((revision, was)) = applied(log, manifest)? else { return Ok(None) };
    let now = now["variables"].as_object().cloned().unwrap_or_default();
    let mut differing = Vec::new();
    for (name, before) in &was {
        let Some(after) = now.get(name) else { continue };
        match (before.get("value"), after.get("value")) {
            (Some(b), Some(a)) if a != b => {
                differing.push((name, format!("{name} = {b} (now {a})"), format!("{name}={}", shell(b))))
            }
            (None, None)
                if before.get("fingerprint").is_some() && before.get("fingerprint") != after.get("fingerprint") =>
            {
                differing.push((name, format!("{name} (sensitive) differs"), format!("{name}=…")))
            }
            _ => {}
        }
    }
    if differing.is_empty() {
        return Ok(None);
    }
    let listed: Vec<&str> = differing.iter().map(|(_, d, _)| d.as_str()).collect();
    let flags: Vec<String> = differing.iter().map(|(_, _, f)| format!("--var {f}")).collect();
    Ok(Some(format!(
        "the last successful apply (revision {revision}) had other variables: {}. This plan changes what it made to \
         follow them; to keep it as applied, give them as they were ({})",
        listed.join(", "),
        flags.join(" ")
    )))
}

/// A value as `--var` takes it.
fn shell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
