//! Plans and reports as text and as JSON.

use std::time::Duration;

use serde_json::{Value, json};

use crate::engine::delete::DeleteReport;
use crate::engine::error::ResourceError;
use crate::engine::mask::Mask;
use crate::engine::plan::{Change, Plan, Removal, RemovalEntry, Report, ResourceEntry, Standing};
use crate::engine::protocol::{Action, StateResponse};
use crate::pass::{Ended, Passed};

/// A duration as people read it, to the millisecond (`<1ms` below it, never `0s`).
pub(super) fn elapsed(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        return "<1ms".into();
    }
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// `1 resource`, `3 resources`.
pub(super) fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// The line printed for a resource: status, name (padded to `width`), detail, time.
pub(super) fn settled_line(label: &str, name: &str, width: usize, detail: &str, took: Option<&str>) -> String {
    let mut line = format!("{} {name:<width$}", super::style::status(label, 9));
    if !detail.is_empty() {
        line.push_str("  ");
        line.push_str(detail);
    }
    if let Some(took) = took {
        line.push_str(&format!("  ({took})"));
    }
    line.trim_end().to_string()
}

/// The width of the name column for these names.
pub(super) fn name_width<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    names.into_iter().map(str::len).max().unwrap_or(0)
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}")).collect::<Vec<_>>().join("\n")
}

pub(super) fn print_plan(plan: &Plan) {
    outln!("Plan for {} (run {}):", plan.manifest, plan.run_id);
    let width = name_width(plan.entries.iter().map(|e| e.name.as_str()));
    for e in &plan.entries {
        let ran = matches!(e.standing, Standing::Valid { .. } | Standing::NeedsActions { .. } | Standing::Failed(_));
        let took = ran.then(|| elapsed(e.elapsed));
        outln!("{}", settled_line(e.standing.label(), &e.name, width, &e.type_name, took.as_deref()));
        if let Some(r) = plan.replacement(&e.name) {
            outln!(
                "              must be replaced ({}): the old one is deleted first, see below",
                plan.mask.text(&r.describe())
            );
        }
        match &e.standing {
            Standing::NeedsActions { actions, planned_state, stale_state, .. } => {
                print_actions(actions);
                print_found_wanted(e, stale_state.as_ref(), &plan.mask);
                print_planned(planned_state.as_ref());
            }
            Standing::Pending { waiting_on, unknown_inputs, found } => {
                let names: Vec<&str> = waiting_on.iter().map(|w| w.resource.as_str()).collect();
                match found.as_deref() {
                    // Foreseen: what applying will find.
                    Some(found) if unknown_inputs.is_empty() => {
                        outln!("              after {}'s actions, as planned", names.join(", "));
                        if let StateResponse::NeedsActions { actions, planned_state, stale_state, .. } = found {
                            print_actions(actions);
                            print_found_wanted(e, stale_state.as_ref(), &plan.mask);
                            print_planned(planned_state.as_ref());
                        }
                    }
                    // It does not exist: created, with what it reads known after apply.
                    Some(found) if e.standing.to_be_created() => {
                        outln!("              after {}'s actions, created as planned", names.join(", "));
                        if let StateResponse::NeedsActions { actions, planned_state, .. } = found {
                            print_actions(actions);
                            print_planned(planned_state.as_ref());
                        }
                        for input in unknown_inputs {
                            outln!("              {} = (known after apply) {}", input.path, input.expression);
                        }
                    }
                    Some(found) => {
                        let deps: Vec<String> =
                            waiting_on.iter().map(|w| format!("{} ({})", w.resource, w.status)).collect();
                        outln!("              waits on {}", deps.join(", "));
                        outln!("              read with {} as found: {}", names.join(", "), found.status());
                        if let StateResponse::NeedsActions { actions, .. } = found {
                            print_actions(actions);
                        }
                        for input in unknown_inputs {
                            outln!(
                                "              may change with their actions: {} = {}",
                                input.path,
                                input.expression
                            );
                        }
                    }
                    None => {
                        let deps: Vec<String> =
                            waiting_on.iter().map(|w| format!("{} ({})", w.resource, w.status)).collect();
                        outln!("              waits on {} for the values it reads:", deps.join(", "));
                        for input in unknown_inputs {
                            outln!("              {} = (known after apply) {}", input.path, input.expression);
                        }
                    }
                }
            }
            Standing::Failed(error) => outln!("{}", indent(&error.to_string(), "              ")),
            Standing::Blocked { by } => outln!("              blocked by {by}"),
            _ => {}
        }
    }
    let replaced = |r: &&RemovalEntry| plan.replacement(&r.name).is_some();
    let (old_ones, gone): (Vec<&RemovalEntry>, Vec<&RemovalEntry>) = plan.removals.iter().partition(replaced);
    if !gone.is_empty() {
        if !plan.entries.is_empty() {
            outln!("No longer declared (the deployment log's inventory holds them):");
        }
        print_removals(&gone.into_iter().cloned().collect::<Vec<_>>());
    }
    if !old_ones.is_empty() {
        outln!(
            "Replaced, their identity changed (the old ones, deleted first with the config they were applied with):"
        );
        print_removals(&old_ones.iter().map(|r| (*r).clone()).collect::<Vec<_>>());
    }
    for note in &plan.notes {
        outln!("note: {note}");
    }
    let c = plan.counts();
    let mut summary = format!("Plan: {} to apply, {} pending, {} valid", c.to_apply, c.pending, c.valid);
    if plan.entries.is_empty() && plan.removals.is_empty() {
        outln!("{NOTHING_HELD}");
        return;
    }
    if plan.entries.is_empty() {
        summary = "Plan".into();
    }
    if c.failed + c.blocked > 0 {
        summary.push_str(&format!(", {} failed, {} blocked", c.failed, c.blocked));
    }
    let kept: Vec<RemovalEntry> = plan.removals.iter().filter(|r| !replaced(r)).cloned().collect();
    let mut removals = removal_counts(&kept);
    if !plan.replacements.is_empty() {
        let sep = if removals.is_empty() { "" } else { ", " };
        removals.push_str(&format!("{sep}{} to replace", plan.replacements.len()));
    }
    if !removals.is_empty() {
        summary.push_str(&format!("{}{removals}", if plan.entries.is_empty() { ": " } else { ", " }));
    }
    outln!("{summary}.");
}

/// For a program's or an image's type that reported its state as found, each config value
/// that state holds otherwise: `path: found → wanted`, sensitive values masked on both sides.
/// (The built-ins say it in their actions' descriptions.)
fn print_found_wanted(entry: &ResourceEntry, found: Option<&Value>, mask: &Mask) {
    let (Some(found), Some(config)) = (found, entry.config.as_ref()) else { return };
    if entry.type_name.starts_with("builtin/") {
        return;
    }
    for (path, found, wanted) in found_wanted(found, config) {
        let masked = mask.value(wanted) != *wanted;
        let found = if masked { json!("***") } else { mask.value(found) };
        let wanted = mask.value(wanted);
        outln!("              {path}: {} → {}", short_value(Some(&found)), short_value(Some(&wanted)));
    }
}

/// Where `found` and `config` both have a value and they differ (a leaf of the config, or one
/// side not an object), by path: `(path, found, wanted)`.
pub(super) fn found_wanted<'a>(found: &'a Value, config: &'a Value) -> Vec<(String, &'a Value, &'a Value)> {
    fn walk<'a>(at: String, found: &'a Value, wanted: &'a Value, out: &mut Vec<(String, &'a Value, &'a Value)>) {
        match (found, wanted) {
            (Value::Object(f), Value::Object(w)) => {
                for (key, value) in w {
                    if let Some(was) = f.get(key) {
                        let at = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                        walk(at, was, value, out);
                    }
                }
            }
            (f, w) if f != w => out.push((at, f, w)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), found, config, &mut out);
    out
}

/// The values a planned state leaves unknown, as Terraform says them.
fn print_planned(planned: Option<&Value>) {
    let unknown = planned.map(|p| crate::engine::protocol::unknown_paths(p, "state")).unwrap_or_default();
    if !unknown.is_empty() {
        outln!("              {} = (known after apply)", unknown.join(", "));
    }
}

fn print_actions(actions: &[Action]) {
    for a in actions {
        let what = if a.description.is_empty() { String::new() } else { format!(": {}", a.description) };
        outln!("              → {}{what}", a.name);
    }
}

/// What becomes (or became) of each resource leaving the manifest, a line each.
pub(super) fn print_removals(removals: &[RemovalEntry]) {
    let width = name_width(removals.iter().map(|e| e.name.as_str()));
    for e in removals {
        outln!("{}", settled_line(e.removal.label(), &e.name, width, &e.type_name, None));
        let detail = match &e.removal {
            Removal::ToDelete => "→ delete (its type's delete action, then its state read: MISSING required)".into(),
            Removal::Absent => "already MISSING: it leaves the inventory".into(),
            Removal::Forgotten { reason } => format!("left in place, forgotten: {reason}"),
            Removal::Kept { reason } => format!("left in place for now: {reason}"),
            Removal::Moved { to } => format!("→ {to} (`moved`): its state and history go with it; nothing is deleted"),
            Removal::Deleted => continue,
            Removal::Failed(error) => error.to_string(),
        };
        outln!("{}", indent(&detail, "              "));
    }
}

/// `2 to delete, 1 forgotten` — what is counted, only.
pub(super) fn removal_counts(removals: &[RemovalEntry]) -> String {
    let count = |label: &str| removals.iter().filter(|e| e.removal.label() == label).count();
    let words = [
        ("MOVED", "moved"),
        ("DELETE", "to delete"),
        ("DELETED", "deleted"),
        ("ABSENT", "already gone"),
        ("FORGOTTEN", "forgotten"),
        ("KEPT", "left for now"),
        ("FAILED", "failed to delete"),
    ];
    let parts: Vec<String> =
        words.iter().filter(|(l, _)| count(l) > 0).map(|(l, word)| format!("{} {word}", count(l))).collect();
    parts.join(", ")
}

fn removals_json(removals: &[RemovalEntry]) -> Vec<Value> {
    removals
        .iter()
        .map(|e| {
            let mut v = json!({"name": e.name, "type": e.type_name, "status": e.removal.label()});
            match &e.removal {
                Removal::Failed(error) => v["error"] = error_json(error),
                other => {
                    if let Some(message) = other.message() {
                        v["message"] = json!(message);
                    }
                }
            }
            v
        })
        .collect()
}

/// What a delete pass (or the removals of an apply) did.
/// Each resource was shown as it settled.
/// What a destroy (or a plan of one) says when the inventory holds nothing of the manifest.
const NOTHING_HELD: &str =
    "Nothing to destroy: the inventory holds nothing of this manifest (no run applied it, or it was destroyed).";

pub(super) fn print_deleted(report: &DeleteReport, verb: &str) {
    if report.entries.is_empty() {
        return;
    }
    let verdict = if report.succeeded() { "complete" } else { "failed" };
    outln!("{verb} {verdict}: {}.", removal_counts(&report.entries));
    for problem in report.problems() {
        errln!("error: manifest {}: {problem}", report.manifest);
    }
}

/// `interrupted`: a signal stopped it (the log says interrupted, and so does this).
pub(super) fn print_report(report: &Report, interrupted: bool) {
    let c = report.counts();
    let verdict = match (report.succeeded(), interrupted) {
        (true, _) => "Apply complete",
        (false, true) => "Apply interrupted",
        (false, false) => "Apply failed",
    };
    outln!(
        "{}: {} applied, {} unchanged, {} failed, {} blocked{}.",
        super::style::bold(verdict),
        c.applied,
        c.valid,
        c.failed,
        c.blocked,
        if c.declined > 0 { format!(", {} declined or cancelled", c.declined) } else { String::new() }
    );
    print_failures(report.manifest(), report.entries());
}

/// Every failure among `entries` (of a plan or a report), in full, on stderr.
pub(super) fn print_failures(manifest: &str, entries: &[ResourceEntry]) {
    for e in entries {
        if let Standing::Failed(error) = &e.standing {
            errln!("error: manifest {manifest}: resource `{}` failed in {}:", e.name, error.phase);
            errln!("{}", indent(&error.to_string(), "  "));
        }
    }
}

fn error_json(error: &ResourceError) -> Value {
    json!({"phase": error.phase.to_string(), "reason": error.reason(), "message": error.to_string()})
}

fn entries_json(entries: &[ResourceEntry], mask: &Mask) -> Vec<Value> {
    entries
        .iter()
        .map(|e| {
            let mut v = json!({"name": e.name, "type": e.type_name, "status": e.standing.label(), "elapsed_ms": e.elapsed.as_millis()});
            match &e.standing {
                Standing::Valid { state, applied } => {
                    v["state"] = mask.value(state);
                    if let Some(ran) = applied {
                        v["actions"] = json!(ran.iter().map(|r| r.action.as_str()).collect::<Vec<_>>());
                        v["results"] = json!(ran
                            .iter()
                            .map(|r| {
                                let pairs: Vec<Value> = r.results.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
                                json!({"action": r.action, "result": pairs})
                            })
                            .collect::<Vec<_>>());
                    }
                }
                Standing::NeedsActions { stale_state, planned_state, actions, .. } => {
                    v["actions"] = json!(actions.iter().map(|a| json!({"name": a.name, "description": a.description})).collect::<Vec<_>>());
                    v["stale_state"] = stale_state.as_ref().map_or(Value::Null, |s| mask.value(s));
                    if let Some(planned) = planned_state {
                        v["planned_state"] = mask.value(planned);
                    }
                }
                Standing::Pending { waiting_on, unknown_inputs, found } => {
                    v["waiting_on"] = json!(waiting_on.iter().map(|w| json!({"resource": w.resource, "status": w.status})).collect::<Vec<_>>());
                    v["unknown_inputs"] = json!(unknown_inputs.iter().map(|u| json!({"path": u.path, "expression": u.expression})).collect::<Vec<_>>());
                    if let Some(found) = found.as_deref() {
                        v["found"] = found_json(found, mask);
                    }
                }
                Standing::Failed(error) => v["error"] = error_json(error),
                Standing::Blocked { by } => v["blocked_by"] = json!(by),
                Standing::Declined | Standing::Cancelled => {}
            }
            v
        })
        .collect()
}

/// What a pending resource was found to be, read with its dependencies as found.
fn found_json(found: &StateResponse, mask: &Mask) -> Value {
    match found {
        StateResponse::Valid { state } => json!({"status": "VALID", "state": mask.value(state)}),
        StateResponse::NeedsActions { status, stale_state, planned_state, actions } => json!({
            "status": status.to_string(),
            "stale_state": stale_state.as_ref().map_or(Value::Null, |s| mask.value(s)),
            "planned_state": planned_state.as_ref().map_or(Value::Null, |s| mask.value(s)),
            "actions": actions.iter().map(|a| json!({"name": a.name, "description": a.description})).collect::<Vec<_>>(),
        }),
    }
}

/// How many differences a change shows before "and N more".
const SHOWN_DIFFERENCES: usize = 10;

/// A value in a difference: JSON, cut to a line's worth.
fn short_value(value: Option<&Value>) -> String {
    value.map_or_else(|| "(absent)".to_string(), |v| crate::history::cut_to(&v.to_string(), 80))
}

/// Why a resource is STALE or MISSING when its inputs changed since it was last VALID: what
/// changed, value by value (sensitive values masked).
pub(super) fn change_text(change: &Change) -> String {
    let mut text = format!("Changed since {} was last VALID ({} now):", change.resource, change.now);
    for d in change.differences.iter().take(SHOWN_DIFFERENCES) {
        text.push_str(&format!("\n    {}: {} → {}", d.path, short_value(d.was.as_ref()), short_value(d.now.as_ref())));
    }
    if change.differences.len() > SHOWN_DIFFERENCES {
        text.push_str(&format!("\n    … and {} more", change.differences.len() - SHOWN_DIFFERENCES));
    }
    text
}

fn change_json(change: &Change) -> Value {
    let differences: Vec<Value> =
        change.differences.iter().map(|d| json!({"path": d.path, "was": d.was, "now": d.now})).collect();
    json!({"resource": change.resource, "now": change.now.to_string(), "was_valid": change.was_valid, "differences": differences})
}

/// The JSON document `--output json` prints: the plan, what the log says of it (drift,
/// changes), and the result when apply ran.
pub(super) fn document(plan: &Plan, report: Option<&Report>, status: &str, passed: &Passed) -> Value {
    let removed = match &passed.ended {
        Ended::Applied { removed: Some(removed), .. } | Ended::Deleted { report: removed, .. } => {
            Some(removals_json(&removed.entries))
        }
        _ => None,
    };
    let drift: Vec<Value> =
        passed.drifts.iter().map(|d| json!({"resource": d.resource, "now": d.now.to_string()})).collect();
    let mut doc = json!({
        "manifest": plan.manifest,
        "run_id": plan.run_id,
        // The number; none where the log could not number it (a plan it may not write).
        "revision": passed.revision.parse::<i64>().ok(),
        "hash": passed.manifest.revision,
        "status": status,
        "drift": drift,
        "changes": passed.changes.iter().map(change_json).collect::<Vec<_>>(),
        "plan": entries_json(&plan.entries, &plan.mask),
    });
    if !plan.removals.is_empty() {
        doc["removals"] = json!(removals_json(&plan.removals));
    }
    if !plan.notes.is_empty() {
        doc["notes"] = json!(plan.notes);
    }
    if !plan.replacements.is_empty() {
        let replacements: Vec<Value> = (plan.replacements.iter())
            .map(|r| json!({"name": r.name, "type": r.type_name, "moved": plan.mask.value(&json!(r.moved))}))
            .collect();
        doc["replacements"] = json!(replacements);
    }
    let warnings: Vec<Value> = passed
        .ended
        .warnings()
        .iter()
        .map(|w| json!({"resource": w.resource, "phase": w.phase.to_string(), "message": w.message}))
        .collect();
    if !warnings.is_empty() {
        doc["warnings"] = json!(warnings);
    }
    if let Some(report) = report {
        doc["result"] = json!(entries_json(report.entries(), report.mask()));
    }
    if let Some(removed) = removed {
        doc["removed"] = json!(removed);
    }
    match &passed.outputs {
        Some(Ok(values)) => doc["outputs"] = plan.mask.value(values),
        Some(Err(why)) => doc["outputs_error"] = json!(plan.mask.text(why)),
        None => {}
    }
    doc
}

pub(super) fn print_json(value: &Value) {
    outln!("{}", serde_json::to_string_pretty(value).expect("JSON values serialize"));
}

/// `value` with every key in snake_case: what the command line prints is snake_case throughout
/// (`run_id`, `latest_through`), while what it shows of a custom resource's status is written
/// camelCase, as Kubernetes objects are. Only for documents whose keys are all field names.
pub(super) fn snake_keys(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(fields.into_iter().map(|(k, v)| (snake(&k), snake_keys(v))).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(snake_keys).collect()),
        other => other,
    }
}

fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
