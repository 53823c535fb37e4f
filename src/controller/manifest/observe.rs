//! Observe (pure): what a pass did, as the status and the events will tell it — from the
//! pass's ending, the approval asked, and the status the object had. No I/O here.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kube::runtime::events::EventType;

use super::run::RanWith;
use crate::controller::approval::ManualApproval;
use crate::controller::reasons::{ConditionType, Reason};
use crate::controller::status::{Observed, history_entries};
use crate::crd::{APPROVE_ANNOTATION, Manifest, ManifestStatus};
use crate::engine::mask::Mask;
use crate::engine::plan::{Plan, Removal, RemovalEntry, Standing, action_names};
use crate::engine::validate::ValidatedManifest;
use crate::history::Entry;
use crate::history::inventory::marks;
use crate::history::recorder::Drift;
use crate::pass::{Ended, Passed};

/// An event the pass deserves: its type, reason and note.
pub type PassEvent = (EventType, &'static str, String);

/// What a pass of a Manifest did, and what the report does after it: what was seen, and what
/// the pass leaves to write (the outputs it rendered, with the manifest whose mask hides them).
pub struct ObservedPass {
    pub generation: Option<i64>,
    pub revision: String,
    pub seen: SeenPass,
    pub manifest: Arc<ValidatedManifest>,
    pub outputs: Option<Result<serde_json::Value, String>>,
    /// The pass's run id (what `deployster history --run` and the programs' `DEPLOYSTER_RUN_ID` name).
    pub run_id: String,
}

/// What the pass `passed` of `obj`, run `with`, did: what the status and the events will say.
pub fn observe(obj: &Manifest, passed: Passed, with: &RanWith, old: &ManifestStatus) -> ObservedPass {
    let Passed { manifest, ended, drifts, interrupted, outputs, run_id, .. } = passed;
    let revision = manifest.revision.clone();
    let asked = Asked { manual: with.manual.as_ref(), guarded: with.guarded.clone() };
    let seen = ended_as(ended, drifts, interrupted, asked, old, &revision, || with.log.entries());
    ObservedPass { generation: obj.metadata.generation, revision, seen, manifest, outputs, run_id }
}

/// What a pass did, ready for the status and the events.
pub struct SeenPass {
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
    /// What became of the resources that left the spec (masked).
    pub removals: Vec<RemovalEntry>,
}

/// Who was asked about the pass's plan: the approval the spec asks for, and the deletion guard
/// (why it refused the plan, if it did).
pub struct Asked<'a> {
    pub manual: Option<&'a ManualApproval>,
    pub guarded: Option<String>,
}

/// What the pass that ended as `ended` observed, as a status and events tell it.
pub fn ended_as(
    ended: Ended,
    drifts: Vec<Drift>,
    interrupted: Option<String>,
    Asked { manual, guarded }: Asked<'_>,
    old: &ManifestStatus,
    revision: &str,
    log_entries: impl FnOnce() -> Vec<Entry>,
) -> SeenPass {
    let mut details = BTreeMap::new();
    let warnings = ended.warnings();
    let (removals, replaced) = match &ended {
        Ended::Applied { removed: Some(removed), plan, .. } => {
            (masked(&removed.entries, &plan.mask), plan.replacements.iter().map(|r| r.name.clone()).collect())
        }
        _ => (Vec::new(), Vec::new()),
    };
    let observed = match ended {
        Ended::Refused { plan, why } if guarded.is_some() => Observed::Guarded { plan, message: why },
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
    let unchanged =
        matches!(&observed, Observed::Applied(r) if r.succeeded() && r.counts().applied == 0) && removals.is_empty();
    let guarded_before = old.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str()).is_some_and(|c| {
        matches!(&observed, Observed::Guarded { message, .. } if c.reason == Reason::DeletionGuarded.as_str() && c.message.starts_with(message.as_str()))
    });
    let (entries, old_entries) = (log_entries(), history_entries(old));
    // A pass that took resources into the inventory (the first since an upgrade, say) changed
    // what the object must keep, whatever else it found.
    let inventoried = marks(&entries) != marks(&old_entries);
    let no_op = !inventoried
        && (still_awaiting || guarded_before || unchanged && drifts.is_empty())
        && old.revision.as_deref() == Some(revision);
    // A pass that found everything as it was adds nothing worth keeping to the history.
    let history = if no_op { old_entries } else { entries };
    let mut done = removal_events(&removals, &replaced);
    done.extend(pass_events(&observed, &drifts, &details));
    // Said when the pass did or found something, or met a new revision: not again on every
    // check of a steady Manifest.
    if !no_op {
        done.extend(warnings.iter().map(|w| {
            (EventType::Warning, Reason::TypeWarning.as_str(), format!("{} ({}): {}", w.resource, w.phase, w.message))
        }));
    }
    let mut asked = Vec::new();
    if let (Observed::Guarded { message, .. }, false) = (&observed, guarded_before) {
        asked.push((EventType::Warning, Reason::DeletionGuarded.as_str(), message.clone()));
    }
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
    SeenPass { observed, drifts, history, approved_plan, done, asked, drift_details: details, removals }
}

/// `entries` with what they say masked.
fn masked(entries: &[RemovalEntry], mask: &Mask) -> Vec<RemovalEntry> {
    let mut entries = entries.to_vec();
    for e in &mut entries {
        match &mut e.removal {
            Removal::Failed(error) => *error = error.clone().masked(mask),
            Removal::Kept { reason } | Removal::Forgotten { reason } => *reason = mask.text(reason),
            _ => {}
        }
    }
    entries
}

/// An event for each resource that left the spec — or was replaced, its identity changed:
/// deleted, found gone, left in place, moved, or not deleted (a Warning).
fn removal_events(removals: &[RemovalEntry], replaced: &[String]) -> Vec<PassEvent> {
    removals
        .iter()
        .filter_map(|r| {
            let (name, type_name) = (&r.name, &r.type_name);
            let was_replaced = replaced.contains(name);
            Some(match &r.removal {
                Removal::Deleted if was_replaced => (
                    EventType::Normal,
                    Reason::ResourceDeleted.as_str(),
                    format!("deleted the old {name} ({type_name}): replaced, its identity changed"),
                ),
                Removal::Deleted => {
                    (EventType::Normal, Reason::ResourceDeleted.as_str(), format!("deleted {name} ({type_name}): no longer declared"))
                }
                Removal::Absent => (
                    EventType::Normal,
                    Reason::ResourceDeleted.as_str(),
                    format!("{name} ({type_name}), no longer declared, was already gone"),
                ),
                Removal::Forgotten { reason } => (
                    EventType::Normal,
                    Reason::ResourceForgotten.as_str(),
                    format!("{name} ({type_name}), no longer declared, is left in place and forgotten: {reason}"),
                ),
                Removal::Moved { to } => (
                    EventType::Normal,
                    Reason::ResourceMoved.as_str(),
                    format!("{name} is now {to} (moved): its state and history go with it"),
                ),
                Removal::Failed(error) => (
                    EventType::Warning,
                    Reason::RemovalFailed.as_str(),
                    format!("{name} ({type_name}), no longer declared, could not be deleted: {error}; it is kept and retried"),
                ),
                Removal::Kept { .. } | Removal::ToDelete => return None,
            })
        })
        .collect()
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
    use crate::engine::plan::ResourceEntry;
    use crate::engine::protocol::{Action, Status};
    use crate::history::Event;
    use serde_json::json;
    use std::time::Duration;

    fn stale(name: &str, description: &str) -> ResourceEntry {
        let action: Action =
            serde_json::from_value(json!({"name": "apply", "description": description, "args": ["apply"]})).unwrap();
        ResourceEntry {
            name: name.into(),
            type_name: "builtin/kubernetes".into(),
            standing: Standing::NeedsActions {
                status: Status::Stale,
                stale_state: None,
                planned_state: None,
                actions: vec![action],
            },
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
            warnings: Vec::new(),
            replacements: Vec::new(),
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

    fn empty_plan(held: usize) -> Plan {
        Plan {
            manifest: "team/app".into(),
            run_id: "r".into(),
            removals: Vec::new(),
            held,
            notes: Vec::new(),
            warnings: Vec::new(),
            replacements: Vec::new(),
            entries: Vec::new(),
            mask: Mask::of([json!("s3cret")].iter()),
        }
    }

    fn removal(name: &str, removal: Removal) -> RemovalEntry {
        RemovalEntry { name: name.into(), type_name: "builtin/kubernetes".into(), removal }
    }

    /// What left the spec gets an event each, masked: deleted, found gone, forgotten, moved,
    /// and a Warning for a failure.
    #[test]
    fn each_removal_is_an_event() {
        use crate::engine::error::{Cause, Phase, ResourceError};
        let failed = ResourceError::new(
            Phase::Action("delete".into()),
            Cause::Exec { reason: "KubernetesApi", message: "403: token s3cret".into() },
        );
        let removed = crate::engine::delete::DeleteReport {
            manifest: "team/app".into(),
            entries: vec![
                removal("gone", Removal::Deleted),
                removal("absent", Removal::Absent),
                removal("left", Removal::Forgotten { reason: "left in place: removalPolicy is Orphan".into() }),
                removal("old", Removal::Moved { to: "new".into() }),
                removal("refused", Removal::Failed(failed)),
                removal("under", Removal::Kept { reason: "refused depends on it".into() }),
            ],
        };
        let plan = empty_plan(6);
        let report = crate::engine::plan::Report::new("team/app".into(), "r".into(), Vec::new(), plan.mask.clone());
        let ended = Ended::Applied { plan, report, removed: Some(removed) };
        let asked = Asked { manual: None, guarded: None };
        let seen = ended_as(ended, Vec::new(), None, asked, &ManifestStatus::default(), "1-a", Vec::new);
        let said: Vec<(&str, &str)> = seen.done.iter().map(|(_, reason, note)| (*reason, note.as_str())).collect();
        assert_eq!(said.len(), 5, "none for what is kept: {said:#?}");
        assert_eq!(said[0], ("ResourceDeleted", "deleted gone (builtin/kubernetes): no longer declared"));
        assert_eq!(said[1].0, "ResourceDeleted");
        assert!(said[2].0 == "ResourceForgotten" && said[2].1.contains("Orphan"), "{said:?}");
        assert_eq!(said[3], ("ResourceMoved", "old is now new (moved): its state and history go with it"));
        assert!(said[4].0 == "RemovalFailed" && said[4].1.contains("403"), "{said:?}");
        assert!(!said[4].1.contains("s3cret"), "masked: {said:?}");
        assert_eq!(seen.done[4].0, EventType::Warning);
        assert_eq!(seen.removals.len(), 6);
    }

    /// The guard's refusal is observed as such, told once per revision, and a pass that finds
    /// it again adds nothing to the history.
    #[test]
    fn a_guarded_pass_is_told_once() {
        let why = "would delete 2 of the 2 resources it holds".to_string();
        let guarded = |old: &ManifestStatus| {
            let ended = Ended::Refused { plan: empty_plan(2), why: why.clone() };
            let asked = Asked { manual: None, guarded: Some(why.clone()) };
            ended_as(ended, Vec::new(), None, asked, old, "2-b", || vec![entry("manifest", Event::RunDeclined)])
        };
        let first = guarded(&ManifestStatus::default());
        assert!(matches!(&first.observed, Observed::Guarded { message, .. } if *message == why));
        assert_eq!(first.asked.len(), 1);
        assert_eq!(first.asked[0].1, "DeletionGuarded");
        assert_eq!(first.history.len(), 1);
        let mut old = ManifestStatus { revision: Some("2-b".into()), ..ManifestStatus::default() };
        old.conditions.push(crate::crd::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "DeletionGuarded".into(),
            message: why.clone(),
            ..Default::default()
        });
        let again = guarded(&old);
        assert!(again.asked.is_empty(), "told once: {:?}", again.asked);
        assert!(again.history.is_empty(), "nothing new to keep");
    }

    /// A type's warning is a Warning event when the pass did or found something, or met a new
    /// revision — not on every check of a steady Manifest.
    #[test]
    fn a_type_s_warning_is_an_event_once_not_every_check() {
        use crate::engine::error::Phase;
        let warned = |old: &ManifestStatus| {
            let mut plan = empty_plan(0);
            plan.warnings.push(crate::engine::plan::TypeWarning {
                resource: "web".into(),
                phase: Phase::State,
                message: "apps/v1beta1 is deprecated".into(),
            });
            let report = crate::engine::plan::Report::new("team/app".into(), "r".into(), Vec::new(), plan.mask.clone());
            let ended = Ended::Applied { plan, report, removed: None };
            let asked = Asked { manual: None, guarded: None };
            ended_as(ended, Vec::new(), None, asked, old, "1-a", Vec::new).done
        };
        let first = warned(&ManifestStatus::default());
        assert_eq!(first, [(EventType::Warning, "TypeWarning", "web (state): apps/v1beta1 is deprecated".to_string())]);
        let steady = ManifestStatus { revision: Some("1-a".into()), ..ManifestStatus::default() };
        assert!(warned(&steady).is_empty(), "a steady check says nothing again");
    }

    fn entry(target: &str, event: Event) -> Entry {
        Entry { id: "r2".into(), target: target.into(), revision: "1-a".into(), event, at: 1, detail: json!({}) }
    }

    /// A pass that found everything as it was but took resources into the inventory (the first
    /// after an upgrade) keeps its log: the inventory is the object's to keep.
    #[test]
    fn a_pass_that_only_inventoried_keeps_its_log() {
        let plan = empty_plan(0);
        let report = crate::engine::plan::Report::new("team/app".into(), "r".into(), Vec::new(), plan.mask.clone());
        let old = ManifestStatus { revision: Some("1-a".into()), ..ManifestStatus::default() };
        let quiet = |entries: Vec<Entry>| {
            let ended = Ended::Applied { plan: plan.clone(), report: report.clone(), removed: None };
            let asked = Asked { manual: None, guarded: None };
            ended_as(ended, Vec::new(), None, asked, &old, "1-a", move || entries).history
        };
        assert!(quiet(vec![entry("manifest", Event::RunStarted)]).is_empty(), "found as it was: nothing kept");
        let inventoried = vec![entry("manifest", Event::RunStarted), entry("resource/a", Event::ResourceInventoried)];
        assert_eq!(quiet(inventoried).len(), 2);
    }
}
