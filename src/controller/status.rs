//! The status a pass writes, as a pure function of the previous status and what the pass
//! observed. No I/O, and `now` is an argument, so every transition is unit-tested.
//!
//! Status is built from what ran — states read, actions applied — never from intentions: a
//! resource a plan found STALE is STALE until an apply made it VALID.

use super::reasons::{ConditionType, Reason};
use crate::engine::mask::Mask;
use serde_json::{Value, json};

use crate::crd::{APPROVE_ANNOTATION, Condition, ManifestStatus, PendingPlan, ResourceStatus};
use crate::engine::plan::{Plan, Removal, RemovalEntry, Report, ResourceEntry, Standing, action_names};
use crate::engine::protocol::StateResponse;
use crate::history::recorder::Drift;
use crate::history::{Entry, format_time};

/// A resource's state above this many bytes of JSON is replaced by a note of its size.
pub const STATE_LIMIT: usize = 4 * 1024;
/// Messages are cut to this many bytes.
pub const MESSAGE_LIMIT: usize = 1024;
/// The whole status stays below this many bytes of JSON, whatever happens.
pub const STATUS_LIMIT: usize = 256 * 1024;
/// Consecutive passes correcting drift on one resource that mean something fights over it.
pub const THRASHING_STREAK: u32 = 3;

/// What a pass observed: the only input the status is built from.
#[derive(Debug, Clone)]
pub enum Observed {
    /// The manifest cannot be reconciled until its spec changes (no retry).
    Invalid { reason: &'static str, message: String },
    /// Nothing could be read or run (a plug is unavailable, init failed); retried.
    NotRun { reason: &'static str, message: String },
    /// States were read but the plan has failures, so nothing was applied; retried.
    Unapplied(Plan),
    /// The plan was applied.
    Applied(Report),
    /// `spec.approval: Manual`: the plan awaits approval; nothing was applied.
    AwaitingApproval { plan: Plan, pending: PendingPlan },
    /// `spec.suspend`: nothing ran.
    Suspended,
    /// The deletion guard refused the plan: it deletes more than the Manifest allows without
    /// acknowledgement. Nothing was deleted or applied.
    Guarded { plan: Plan, message: String },
}

/// Everything [`next_status`] needs about one pass.
#[derive(Debug, Clone)]
pub struct PassResult {
    /// The run id of a pass that ran (none: it ran nothing).
    pub run_id: Option<String>,
    pub generation: Option<i64>,
    pub revision: String,
    pub observed: Observed,
    /// Resources found drifted during the pass.
    pub drifts: Vec<Drift>,
    /// The deployment log after the pass, oldest first (already bounded).
    pub history: Vec<Entry>,
    pub now_ms: i64,
    /// The approved plan this pass applied (`spec.approval: Manual`).
    pub approved_plan: Option<String>,
    /// When each resource's state is next read (adaptive drift checks).
    pub next_checks: std::collections::BTreeMap<String, std::time::SystemTime>,
    /// Why the outputs failed (reason, message), when the resources are applied but the
    /// outputs could not be rendered or written: the object is not Ready until they are.
    pub outputs_failed: Option<(&'static str, String)>,
    /// Why changes to its objects are not watched (read on the interval only), if they are not.
    pub unwatched: Option<String>,
    /// Resources another writer keeps changing back: corrected again and again after a watch
    /// saw them changed.
    pub fights: Vec<FoughtResource>,
    /// What became of the resources that left the spec.
    pub removals: Vec<RemovalEntry>,
}

/// A resource corrected again and again (`checks::FREE_CORRECTIONS` times in a row or more).
#[derive(Debug, Clone, PartialEq)]
pub struct FoughtResource {
    pub resource: String,
    pub corrections: usize,
    /// What its last correction did (fields, and from whom it took them), if the plan said.
    pub detail: Option<String>,
}

impl FoughtResource {
    /// What `Thrashing` says of it, with the remedy.
    pub fn describe(&self) -> String {
        let detail = self.detail.as_ref().map_or(String::new(), |d| format!(" (last: {d})"));
        format!(
            "{} was corrected {} times in a row: another writer keeps changing it back{detail}; corrections now wait \
             longer each time, up to the interval. Stop declaring what it changes, or leave those fields to it \
             (builtin/kubernetes: `ignore: [<field>]`)",
            self.resource, self.corrections
        )
    }
}

impl PassResult {
    /// Whether the pass left everything VALID.
    pub fn succeeded(&self) -> bool {
        matches!(&self.observed, Observed::Applied(report) if report.succeeded())
            && self.failed_removals().next().is_none()
    }

    /// The resources that left the spec and could not be deleted, with why (masked).
    pub fn failed_removals(&self) -> impl Iterator<Item = (&str, String)> {
        self.removals.iter().filter_map(|r| match &r.removal {
            Removal::Failed(error) => Some((r.name.as_str(), error.headline())),
            _ => None,
        })
    }

    /// The pass in one word, for logs and the `result` label of metrics.
    pub fn result(&self) -> &'static str {
        match &self.observed {
            Observed::Invalid { .. } => "invalid",
            Observed::Suspended => "suspended",
            Observed::AwaitingApproval { .. } => "awaiting-approval",
            Observed::Guarded { .. } => "guarded",
            _ if self.succeeded() => "succeeded",
            _ => "failed",
        }
    }
}

/// Cuts `text` to [`MESSAGE_LIMIT`] bytes (on a character boundary).
pub fn cut(text: &str) -> String {
    crate::history::cut_to(text, MESSAGE_LIMIT)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// The next status.
pub fn next_status(old: &ManifestStatus, pass: &PassResult) -> ManifestStatus {
    let now = format_time(pass.now_ms);
    let mut status = old.clone();
    // A pass that ended runs nothing: progress written while it ran (or by one that crashed)
    // goes — written as empty rather than left out, so that any way of applying clears it.
    status.progress = old.progress.as_ref().map(|_| String::new());
    for r in &mut status.resources {
        r.progress = None;
    }
    status.observed_generation = pass.generation;
    status.revision = Some(pass.revision.clone());
    status.last_reconcile_time = Some(now.clone());
    if let Some(run_id) = &pass.run_id {
        status.last_run_id = Some(run_id.clone());
    }
    if !matches!(pass.observed, Observed::Invalid { .. } | Observed::Suspended) {
        status.last_attempted_revision = Some(pass.revision.clone());
    }
    if pass.succeeded() {
        status.last_applied_revision = Some(pass.revision.clone());
    }
    if let Some(resources) = observed_resources(&pass.observed) {
        status.resources = merge_resources(&old.resources, resources, pass, &now);
        for r in &mut status.resources {
            r.next_check = pass
                .next_checks
                .get(r.name.as_str())
                .map(|at| humantime::format_rfc3339_seconds(*at).to_string().into());
        }
        let valid = status.resources.iter().filter(|r| r.status == "VALID").count();
        status.resources_summary = Some(format!("{valid}/{}", status.resources.len()));
    }
    if pass.approved_plan.is_some() {
        status.last_approved_plan = pass.approved_plan.clone();
    }
    match &pass.observed {
        Observed::AwaitingApproval { pending, .. } => status.pending_plan = Some(pending.clone()),
        Observed::Applied(_) | Observed::Unapplied(_) => status.pending_plan = None,
        _ => {}
    }
    status.consecutive_failures = match &pass.observed {
        _ if pass.succeeded() && pass.outputs_failed.is_none() => 0,
        Observed::AwaitingApproval { .. } | Observed::Guarded { .. } => 0,
        Observed::Invalid { .. } | Observed::Suspended => old.consecutive_failures,
        _ => old.consecutive_failures.saturating_add(1),
    };
    status.history = history_from(&pass.history);
    let mut wanted = conditions(&status, pass);
    note_unwatched(&mut wanted, pass.unwatched.as_deref());
    status.conditions = wanted.into_iter().map(|c| transition(&old.conditions, c, pass.generation, &now)).collect();
    bound(&mut status);
    status
}

/// What the pass observed of each resource, from its report or, when nothing was applied, its
/// plan (`None`: the pass observed none).
fn observed_entries(observed: &Observed) -> Option<(&[ResourceEntry], &Mask)> {
    match observed {
        Observed::Applied(report) => Some((report.entries(), report.mask())),
        Observed::Unapplied(plan) | Observed::AwaitingApproval { plan, .. } | Observed::Guarded { plan, .. } => {
            Some((&plan.entries, &plan.mask))
        }
        Observed::Invalid { .. } | Observed::NotRun { .. } | Observed::Suspended => None,
    }
}

/// Resource statuses as the pass observed them (`None`: the pass observed none).
fn observed_resources(observed: &Observed) -> Option<Vec<ResourceStatus>> {
    let (entries, mask) = observed_entries(observed)?;
    Some(entries.iter().map(|e| resource_status(e, mask)).collect())
}

fn resource_status(e: &ResourceEntry, mask: &Mask) -> ResourceStatus {
    let status = match &e.standing {
        Standing::Valid { .. } => "VALID",
        // Never started: it stands as it was, waiting for the next pass.
        Standing::Declined | Standing::Cancelled => "PENDING",
        other => other.label(),
    };
    let mut r = ResourceStatus {
        name: e.name.as_str().into(),
        type_: e.type_name.as_str().into(),
        status: status.into(),
        state: e.standing.state().map(|s| cap_state(&mask.value(s))),
        ..ResourceStatus::default()
    };
    r.message = match &e.standing {
        Standing::Valid { applied: Some(ran), .. } => Some(format!("applied: {}", action_names(ran))),
        Standing::Valid { applied: None, .. } => None,
        Standing::NeedsActions { actions, .. } => {
            let names: Vec<&str> = actions.iter().map(|a| a.name.as_str()).collect();
            Some(format!("needs: {} (not applied: the plan has failures)", names.join(", ")))
        }
        Standing::Pending { waiting_on, found, .. } => {
            let deps: Vec<&str> = waiting_on.iter().map(|w| w.resource.as_str()).collect();
            let found = match found.as_deref() {
                Some(StateResponse::NeedsActions { status, actions, .. }) => {
                    let names: Vec<&str> = actions.iter().map(|a| a.name.as_str()).collect();
                    format!(" (found {status} before their actions: needs {})", names.join(", "))
                }
                Some(StateResponse::Valid { .. }) => " (found VALID before their actions)".into(),
                None => String::new(),
            };
            Some(format!("waiting on {}{found}", deps.join(", ")))
        }
        Standing::Failed(error) => Some(cut(&mask.text(&error.to_string()))),
        Standing::Blocked { by } => {
            r.blocked_by = Some(by.as_str().into());
            Some(format!("blocked: {by} failed"))
        }
        Standing::Declined => Some("declined".into()),
        Standing::Cancelled => Some("cancelled before it could start".into()),
    };
    r
}

/// Keeps each resource's `lastTransitionTime` unless its status changed, and counts drift
/// corrections in a row.
fn merge_resources(
    old: &[ResourceStatus],
    new: Vec<ResourceStatus>,
    pass: &PassResult,
    now: &str,
) -> Vec<ResourceStatus> {
    let old: std::collections::HashMap<&str, &ResourceStatus> = old.iter().map(|o| (o.name.as_str(), o)).collect();
    let drifts: std::collections::HashSet<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
    new.into_iter()
        .map(|mut r| {
            let previous = old.get(r.name.as_str()).copied();
            r.last_transition_time = match previous {
                Some(p) if p.status == r.status => p.last_transition_time.clone(),
                _ => Some(now.into()),
            };
            // Found as it was: the message of its last change still says what happened.
            if let Some(p) = previous.filter(|p| p.status == r.status && r.message.is_none()) {
                r.message = p.message.clone();
            }
            let drifted = drifts.contains(r.name.as_str());
            let corrected = drifted && r.status == "VALID";
            r.drift_streak = if corrected { previous.map_or(0, |p| p.drift_streak) + 1 } else { 0 };
            if r.drift_streak >= THRASHING_STREAK {
                r.message = Some(format!(
                    "Thrashing: corrected for drift on {} consecutive passes; something else changes it",
                    r.drift_streak
                ));
            }
            if let Some(fight) = pass.fights.iter().find(|f| f.resource == r.name) {
                r.message = Some(format!("Thrashing: {}", fight.describe()));
            }
            r
        })
        .collect()
}

fn cap_state(state: &Value) -> Value {
    let size = state.to_string().len();
    if size <= STATE_LIMIT { state.clone() } else { json!({"truncated": true, "bytes": size}) }
}

/// What the Ready message says, at its end, of objects whose changes are not watched.
pub const UNWATCHED_NOTE: &str = " (changes to its objects are read on the interval only: ";

/// Ends the Ready message with why changes to its objects are not watched — or without it,
/// once they are (a message kept from an earlier pass may carry it).
fn note_unwatched(wanted: &mut [Wanted], unwatched: Option<&str>) {
    let Some(ready) = wanted.iter_mut().find(|c| c.0 == ConditionType::Ready.as_str()) else { return };
    if let Some(at) = ready.3.find(UNWATCHED_NOTE) {
        ready.3.truncate(at);
    }
    if let Some(why) = unwatched {
        ready.3 = format!("{}{UNWATCHED_NOTE}{why})", ready.3);
    }
}

/// A condition as wanted now: type, status, reason, message.
pub(super) type Wanted = (&'static str, &'static str, String, String);

fn conditions(status: &ManifestStatus, pass: &PassResult) -> Vec<Wanted> {
    let not_stalled =
        (ConditionType::Stalled.as_str(), "False", Reason::Progressing.as_str().to_string(), String::new());
    if let (true, Some((reason, message))) = (pass.succeeded(), &pass.outputs_failed) {
        return vec![
            (ConditionType::Ready.as_str(), "False", reason.to_string(), message.clone()),
            (
                ConditionType::Reconciling.as_str(),
                "True",
                Reason::RetryingAfterFailure.as_str().into(),
                message.clone(),
            ),
            not_stalled,
        ];
    }
    match &pass.observed {
        Observed::Invalid { reason, message } => vec![
            (ConditionType::Ready.as_str(), "False", reason.to_string(), message.clone()),
            (ConditionType::Reconciling.as_str(), "False", reason.to_string(), "waiting for the spec to change".into()),
            (ConditionType::Stalled.as_str(), "True", reason.to_string(), message.clone()),
        ],
        Observed::Suspended => {
            let ready = status.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str()).map_or(
                (
                    ConditionType::Ready.as_str(),
                    "Unknown",
                    Reason::Suspended.as_str().to_string(),
                    "suspended before its first pass".to_string(),
                ),
                |c| (ConditionType::Ready.as_str(), condition_status(&c.status), c.reason.clone(), c.message.clone()),
            );
            vec![
                ready,
                (
                    ConditionType::Reconciling.as_str(),
                    "False",
                    Reason::Suspended.as_str().into(),
                    "spec.suspend is true".into(),
                ),
                not_stalled,
            ]
        }
        Observed::AwaitingApproval { pending, .. } => {
            let message = format!(
                "plan {} ({} to change) awaits approval: annotate {APPROVE_ANNOTATION}={}",
                pending.id,
                pending.changes.len(),
                pending.id
            );
            vec![
                (ConditionType::Ready.as_str(), "False", Reason::AwaitingApproval.as_str().into(), message.clone()),
                (ConditionType::Reconciling.as_str(), "False", Reason::AwaitingApproval.as_str().into(), message),
                not_stalled,
            ]
        }
        Observed::Guarded { message, .. } => vec![
            (ConditionType::Ready.as_str(), "False", Reason::DeletionGuarded.as_str().into(), message.clone()),
            (ConditionType::Reconciling.as_str(), "False", Reason::DeletionGuarded.as_str().into(), message.clone()),
            not_stalled,
        ],
        Observed::NotRun { reason, message } => vec![
            (ConditionType::Ready.as_str(), "False", reason.to_string(), message.clone()),
            (
                ConditionType::Reconciling.as_str(),
                "True",
                Reason::RetryingAfterFailure.as_str().into(),
                message.clone(),
            ),
            not_stalled,
        ],
        Observed::Unapplied(_) | Observed::Applied(_) if pass.succeeded() => {
            let (reason, message) = success(status, pass);
            vec![
                (ConditionType::Ready.as_str(), "True", reason, message),
                (ConditionType::Reconciling.as_str(), "False", Reason::Succeeded.as_str().into(), String::new()),
                not_stalled,
            ]
        }
        Observed::Unapplied(_) | Observed::Applied(_) => {
            let (reason, message) = failure(status, pass);
            vec![
                (ConditionType::Ready.as_str(), "False", reason.to_string(), message.clone()),
                (ConditionType::Reconciling.as_str(), "True", Reason::RetryingAfterFailure.as_str().into(), message),
                not_stalled,
            ]
        }
    }
}

fn condition_status(status: &str) -> &'static str {
    match status {
        "True" => "True",
        "False" => "False",
        _ => "Unknown",
    }
}

fn success(status: &ManifestStatus, pass: &PassResult) -> (String, String) {
    let total = status.resources.len();
    let applied = match &pass.observed {
        Observed::Applied(report) => report.counts().applied,
        _ => 0,
    };
    // A pass that found everything as it was keeps the reason the last change gave (but a
    // resource that stopped thrashing is news).
    let quiet = applied == 0 && pass.drifts.is_empty();
    if let Some(ready) =
        status.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str() && c.status == "True")
        && quiet
        && ready.reason != Reason::Thrashing.as_str()
    {
        return (ready.reason.clone(), ready.message.clone());
    }
    if let Some(fight) = pass.fights.first() {
        return (Reason::Thrashing.as_str().into(), fight.describe());
    }
    if let Some(thrashing) = status.resources.iter().find(|r| r.drift_streak >= THRASHING_STREAK) {
        let message = format!(
            "{} was corrected for drift on {} consecutive passes: something else changes it",
            thrashing.name, thrashing.drift_streak
        );
        return (Reason::Thrashing.as_str().into(), message);
    }
    if !pass.drifts.is_empty() {
        let names: Vec<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
        return (
            Reason::DriftCorrected.as_str().into(),
            format!("drift corrected in {}; all {total} resources VALID", names.join(", ")),
        );
    }
    let applied = match &pass.observed {
        Observed::Applied(report) => report.counts().applied,
        _ => 0,
    };
    if applied > 0 {
        (Reason::Applied.as_str().into(), format!("applied {applied}; all {total} resources VALID"))
    } else {
        (Reason::UpToDate.as_str().into(), format!("all {total} resources VALID"))
    }
}

/// Why the manifest is not Ready, naming the root causes: the resources that failed, not the
/// ones merely waiting on them.
fn failure(status: &ManifestStatus, pass: &PassResult) -> (&'static str, String) {
    // A removal that failed stopped the pass before anything declared was applied: it is
    // the cause.
    let removals: Vec<String> = pass
        .failed_removals()
        .map(|(name, why)| format!("removing {name} (no longer declared): {why}; kept and retried"))
        .collect();
    if !removals.is_empty() {
        return (Reason::RemovalFailed.as_str(), cut(&removals.join("; ")));
    }
    let roots: Vec<&ResourceStatus> = status.resources.iter().filter(|r| r.status == "FAILED").collect();
    let reason = observed_entries(&pass.observed)
        .and_then(|(entries, _)| {
            entries
                .iter()
                .find_map(|e| if let Standing::Failed(error) = &e.standing { Some(error.reason()) } else { None })
        })
        .unwrap_or(match &pass.observed {
            Observed::Applied(_) => Reason::NotApplied.as_str(),
            Observed::Unapplied(_) => Reason::PlanFailed.as_str(),
            _ => Reason::Failed.as_str(),
        });
    // Each root's failure in its own words (the server's refusal, the type's error line), not
    // only the phase: `kubectl wait`, Argo CD and Flux show this message and nothing else.
    let headlines: std::collections::HashMap<&str, String> = observed_entries(&pass.observed)
        .into_iter()
        .flat_map(|(entries, mask)| {
            entries.iter().filter_map(move |e| match &e.standing {
                Standing::Failed(error) => Some((e.name.as_str(), mask.text(&error.headline()))),
                _ => None,
            })
        })
        .collect();
    let mut parts: Vec<String> = roots
        .iter()
        .map(|r| {
            let why = match headlines.get(r.name.as_str()) {
                Some(headline) => headline.as_str(),
                None => first_line(r.message.as_deref().unwrap_or("failed")),
            };
            format!("waiting on {}: {why}", r.name)
        })
        .collect();
    let blocked = status.resources.iter().filter(|r| r.status == "BLOCKED").count();
    if blocked > 0 {
        parts.push(format!("{blocked} blocked"));
    }
    if parts.is_empty() {
        parts.push("some resources were not applied".into());
    }
    (reason, cut(&parts.join("; ")))
}

/// The condition with `lastTransitionTime` moved only when its status flips.
pub(super) fn transition(
    old: &[Condition],
    (type_, status, reason, message): Wanted,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let last_transition_time = match old.iter().find(|c| c.type_ == type_) {
        Some(previous) if previous.status == status => previous.last_transition_time.clone(),
        _ => now.to_string(),
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason,
        message: cut(&message),
        last_transition_time,
        observed_generation: generation,
    }
}

/// Whether writing `new` over `old` would change anything but `lastReconcileTime` and
/// `lastRunId`: a pass that found everything as it was writes nothing (no churn on the object,
/// no noise in its history).
pub fn changed(old: &ManifestStatus, new: &ManifestStatus) -> bool {
    let mut new = new.clone();
    new.last_reconcile_time = old.last_reconcile_time.clone();
    new.last_run_id = old.last_run_id.clone();
    // Nor the next checks alone: they move on every pass.
    let was: std::collections::HashMap<&str, &Option<compact_str::CompactString>> =
        old.resources.iter().map(|o| (o.name.as_str(), &o.next_check)).collect();
    for r in &mut new.resources {
        r.next_check = was.get(r.name.as_str()).and_then(|c| (*c).clone());
    }
    &new != old
}

mod kept;
pub use kept::{bound, history_entries, history_from};

#[cfg(test)]
mod tests;
