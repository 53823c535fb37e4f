//! Observe (pure): what a pass did, as the status and the events will tell it — from the
//! pass's ending, the approval asked, and the status the object had. No I/O here.

use std::collections::{BTreeMap, HashSet};

use kube::runtime::events::EventType;

use super::super::approval::ManualApproval;
use super::super::reasons::Reason;
use super::super::status::{Observed, history_entries};
use crate::crd::{APPROVE_ANNOTATION, ManifestStatus};
use crate::engine::plan::{Plan, Standing, action_names};
use crate::history::Entry;
use crate::history::recorder::Drift;
use crate::pass::Ended;

/// An event the pass deserves: its type, reason and note.
pub type PassEvent = (EventType, &'static str, String);

/// What a pass did, ready for the status and the events.
pub struct ObservedPass {
    pub observed: Observed,
    pub drifts: Vec<Drift>,
    /// The history the status keeps: the log's entries, or the old ones for a pass that found
    /// everything as it was.
    pub history: Vec<Entry>,
    /// The plan applied after its approval was asked, if one was.
    pub approved_plan: Option<String>,
    /// Events of what the pass did to the resources (told first).
    pub done: Vec<PassEvent>,
    /// Events of the approval and of an interruption (told after the outputs').
    pub asked: Vec<PassEvent>,
    /// What each drifted resource's actions did, as the plan said (masked).
    pub drift_details: BTreeMap<String, String>,
}

/// What the pass that ended as `ended` observed, as a status and events tell it.
pub fn observe(
    ended: Ended,
    drifts: Vec<Drift>,
    interrupted: Option<String>,
    manual: Option<&ManualApproval>,
    old: &ManifestStatus,
    revision: &str,
    log_entries: impl FnOnce() -> Vec<Entry>,
) -> ObservedPass {
    let mut details = BTreeMap::new();
    let observed = match ended {
        Ended::NotPrepared(e) if e.is_invalid_input() => {
            Observed::Invalid { reason: e.reason(), message: e.to_string() }
        }
        Ended::NotPrepared(e) => Observed::NotRun { reason: e.reason(), message: e.to_string() },
        Ended::Applied { report, plan, .. } => {
            details = drift_details(&plan, &drifts);
            Observed::Applied(report)
        }
        Ended::Declined { plan, .. } => match manual.and_then(ManualApproval::asked) {
            Some(pending) => Observed::AwaitingApproval { plan, pending },
            None => Observed::Unapplied(plan),
        },
        Ended::NotApplicable(plan)
        | Ended::Planned(plan)
        | Ended::Refused { plan, .. }
        | Ended::PlanChanged { plan, .. }
        | Ended::Deleted { plan, .. } => Observed::Unapplied(plan),
    };
    let still_awaiting = matches!(&observed, Observed::AwaitingApproval { pending, .. }
        if old.pending_plan.as_ref().is_some_and(|p| p.id == pending.id));
    let unchanged = matches!(&observed, Observed::Applied(r) if r.succeeded() && r.counts().applied == 0);
    let no_op = (still_awaiting || unchanged && drifts.is_empty()) && old.revision.as_deref() == Some(revision);
    // A pass that found everything as it was adds nothing worth keeping to the history.
    let history = if no_op { history_entries(old) } else { log_entries() };
    let done = pass_events(&observed, &drifts, &details);
    let mut asked = Vec::new();
    if let Observed::AwaitingApproval { pending, .. } = &observed
        && !still_awaiting
    {
        let changes: Vec<String> =
            pending.changes.iter().map(|c| format!("{} ({}: {})", c.name, c.status, c.actions.join(", "))).collect();
        let note = format!(
            "plan {} awaits approval ({APPROVE_ANNOTATION}={}): {}",
            pending.id,
            pending.id,
            changes.join("; ")
        );
        asked.push((EventType::Normal, Reason::AwaitingApproval.as_str(), note));
    }
    if let Some(why) = manual.and_then(ManualApproval::ignored) {
        asked.push((EventType::Warning, Reason::ApprovalIgnored.as_str(), why));
    }
    if let Some(why) = interrupted {
        tracing::warn!(reason = %why, "pass interrupted");
        asked.push((EventType::Warning, Reason::Interrupted.as_str(), why));
    }
    // An approved plan was applied when the pass applied after asking the approval.
    let approved_plan = match (&observed, manual) {
        (Observed::Applied(_), Some(manual)) => manual.asked().map(|p| p.id),
        _ => None,
    };
    ObservedPass { observed, drifts, history, approved_plan, done, asked, drift_details: details }
}

/// What the plan said each drifted resource's actions would do (for `builtin/kubernetes`, the
/// fields, and the managers it takes them back from), masked.
fn drift_details(plan: &Plan, drifts: &[Drift]) -> BTreeMap<String, String> {
    let drifted: HashSet<&str> = drifts.iter().map(|d| d.resource.as_str()).collect();
    plan.entries
        .iter()
        .filter(|e| drifted.contains(e.name.as_str()))
        .filter_map(|e| match &e.standing {
            Standing::NeedsActions { actions, .. } => {
                let said: Vec<&str> =
                    actions.iter().map(|a| a.description.as_str()).filter(|d| !d.is_empty()).collect();
                (!said.is_empty()).then(|| (e.name.clone(), plan.mask.text(&said.join("; "))))
            }
            _ => None,
        })
        .collect()
}

/// The events a pass deserves: applied, drift corrected (saying what changed), action failed.
fn pass_events(observed: &Observed, drifts: &[Drift], details: &BTreeMap<String, String>) -> Vec<PassEvent> {
    let mut events = Vec::new();
    let Observed::Applied(report) = observed else { return events };
    let drifted: Vec<String> = drifts
        .iter()
        .map(|d| match details.get(&d.resource) {
            Some(detail) => format!("{} ({}: {detail})", d.resource, d.now),
            None => format!("{} ({})", d.resource, d.now),
        })
        .collect();
    if !drifted.is_empty() {
        let (type_, reason, verb) = if report.succeeded() {
            (EventType::Normal, Reason::DriftCorrected.as_str(), "corrected")
        } else {
            (EventType::Warning, Reason::DriftDetected.as_str(), "not corrected: the pass failed")
        };
        events.push((type_, reason, format!("drift in {}; {verb}", drifted.join(", "))));
    }
    let drifted_names: HashSet<&str> = drifts.iter().map(|d| d.resource.as_str()).collect();
    let applied: Vec<String> = report
        .entries()
        .iter()
        .filter_map(|e| match &e.standing {
            Standing::Valid { applied: Some(ran), .. } if !drifted_names.contains(e.name.as_str()) => {
                Some(format!("{} ({})", e.name, action_names(ran)))
            }
            _ => None,
        })
        .collect();
    if !applied.is_empty() {
        events.push((EventType::Normal, Reason::Applied.as_str(), format!("applied {}", applied.join(", "))));
    }
    for e in report.entries() {
        if let Standing::Failed(error) = &e.standing {
            events.push((EventType::Warning, error.reason(), format!("{}: {error}", e.name)));
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::mask::Mask;
    use crate::engine::plan::ResourceEntry;
    use crate::engine::protocol::{Action, Status};
    use serde_json::json;
    use std::time::Duration;

    fn stale(name: &str, description: &str) -> ResourceEntry {
        let action: Action =
            serde_json::from_value(json!({"name": "apply", "description": description, "args": ["apply"]})).unwrap();
        ResourceEntry {
            name: name.into(),
            type_name: "builtin/kubernetes".into(),
            standing: Standing::NeedsActions { status: Status::Stale, stale_state: None, actions: vec![action] },
            elapsed: Duration::ZERO,
            config: None,
        }
    }

    /// The DriftCorrected event says what changed and from whom it was taken back, as the plan
    /// said it, with sensitive values masked.
    #[test]
    fn a_drift_s_event_names_its_fields_and_managers_masked() {
        let plan = Plan {
            manifest: "team/app".into(),
            run_id: "r".into(),
            removals: Vec::new(),
            held: 0,
            notes: Vec::new(),
            entries: vec![
                stale(
                    "settings",
                    "Update ConfigMap team/settings: data.token: \"hunter22\" → \"s3cret-token\"; takes back .data.token \
                     from kubectl-patch (changed by hand)",
                ),
                stale("other", "Update ConfigMap team/other: data.a: \"1\" → \"2\""),
            ],
            mask: Mask::of([json!("s3cret-token")].iter()),
        };
        let drifts = vec![Drift { resource: "settings".into(), now: Status::Stale }];
        let details = drift_details(&plan, &drifts);
        assert_eq!(details.len(), 1, "only the drifted resource: {details:?}");
        let said = &details["settings"];
        assert!(said.contains("data.token") && said.contains("from kubectl-patch"), "{said}");
        assert!(!said.contains("s3cret-token"), "masked: {said}");
    }
}
