//! Observe (pure): what a reconcile of a Pipeline found, as its status, its events and when to
//! look again — after an advance, for a spec that does not compile, and for an object that
//! does not deserialize. No I/O here.

use std::time::Duration;

use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::advance::Advance;
use super::compile::{Compiled, Uncompiled};
use crate::controller::reasons::{ConditionType, EventAction, Reason};
use crate::controller::status::{Wanted, transition};
use crate::crd::pipeline::{APPROVE_ANNOTATION, LogStatus, PipelineStatus};
use crate::history::format_time;
use crate::pipeline::progress::{Progress, RevisionEnded};
use crate::pipeline::query::status;

/// An event a reconcile of a Pipeline deserves: its type, reason and note.
pub type PipelineEvent = (EventType, Reason, String);

/// Bounds of the status: nodes, revisions and frontier steps shown.
const NODES_SHOWN: usize = 100;
const REVISIONS_SHOWN: usize = 10;
const FRONTIER_SHOWN: usize = 50;

/// How often a Pipeline whose targets or tests name a Manifest not there looks again.
const MISSING_RECHECK: Duration = Duration::from_secs(10);

/// What a reconcile of a Pipeline found: what its status says, what to tell, when to look again.
pub struct Findings {
    pub status: PipelineStatus,
    pub events: Vec<PipelineEvent>,
    /// What the controller was doing, as the events say.
    pub action: EventAction,
    /// The spec's revision went through every stage in this reconcile.
    pub through_now: bool,
    pub next: Action,
}

/// The status after an advance (the log's answers, bounded), the events of what was recorded
/// and what failed, and when to look again: soon while a revision is live (a bake's time, a
/// step's timeout; a change of a step's Manifest wakes it sooner), else when it changes.
pub fn observe(
    compiled: &Compiled,
    advance: &Advance,
    mut events: Vec<PipelineEvent>,
    old: &PipelineStatus,
    generation: Option<i64>,
    now: i64,
    poll: Duration,
) -> Findings {
    let (progress, revision) = (&advance.advanced.progress, &compiled.revision);
    for (failed_revision, step, why) in &advance.advanced.failed {
        let note = format!("revision {failed_revision}, step {step}: {why}");
        events.push((EventType::Warning, Reason::StepFailed, note));
    }
    let through_now = through(progress, revision) && !through_in(old, revision);
    if through_now {
        events.push((EventType::Normal, Reason::RevisionThrough, format!("revision {revision} is through")));
    }
    let status = next_status(compiled, advance, old, generation, now);
    let live = progress.revisions.iter().any(|r| r.is_live());
    let next = if live { Action::requeue(poll.max(Duration::from_secs(1)) * 5) } else { Action::await_change() };
    Findings { status, events, action: EventAction::Drive, through_now, next }
}

/// A spec that does not compile. A Manifest not there (yet) is waited for: creating it is the
/// fix, not a new spec, and it is said once, not on every look. Anything else wrong only a
/// change of the spec can fix (Stalled).
pub fn uncompiled(error: &Uncompiled, old: &PipelineStatus, generation: Option<i64>, now: i64) -> Findings {
    let missing = error.is_missing_manifest();
    let reason = if missing { Reason::ManifestMissing } else { Reason::InvalidPipeline };
    let message = error.to_string();
    let mut status = old.clone();
    status.observed_generation = generation;
    let ready = (ConditionType::Ready.as_str(), "False", reason.as_str().into(), message.clone());
    status.conditions = conditions(old, generation, now, ready, !missing);
    let said = old
        .conditions
        .iter()
        .any(|c| c.type_ == ConditionType::Ready.as_str() && c.reason == reason.as_str() && c.message == message);
    let events = if missing && said { Vec::new() } else { vec![(EventType::Warning, reason, message)] };
    let next = if missing { Action::requeue(MISSING_RECHECK) } else { Action::await_change() };
    Findings { status, events, action: EventAction::Drive, through_now: false, next }
}

/// An object that does not deserialize (it does not match the CRD's Rust types): Stalled with
/// the reason, its status built as for a first reconcile (what it had is unreadable too), a
/// Warning event, and nothing driven until it changes.
pub fn malformed(invalid: &InvalidObject, now: i64) -> Findings {
    let message = format!("the Pipeline does not match its schema: {}", invalid.error);
    let generation = invalid.metadata.generation;
    let reason = Reason::MalformedObject;
    let ready = (ConditionType::Ready.as_str(), "False", reason.as_str().to_string(), message.clone());
    let status = PipelineStatus {
        observed_generation: generation,
        conditions: conditions(&PipelineStatus::default(), generation, now, ready, true),
        ..Default::default()
    };
    let events = vec![(EventType::Warning, reason, message)];
    Findings { status, events, action: EventAction::Validate, through_now: false, next: Action::await_change() }
}

/// How a Pipeline's gate is approved: a line of its approval annotation.
fn how_to_approve(revision: &str, gate: &str) -> String {
    format!("the line `{revision} {gate}` in the Pipeline's annotation {APPROVE_ANNOTATION}")
}

fn through(progress: &Progress, revision: &str) -> bool {
    progress.revision(revision).is_some_and(|r| r.ended == Some(RevisionEnded::Through))
}

fn through_in(status: &PipelineStatus, revision: &str) -> bool {
    status.revisions.iter().any(|r| r.revision == revision && r.status == "through")
}

/// The status: the log's answers, bounded, and the conditions for the spec's revision.
fn next_status(
    compiled: &Compiled,
    advance: &Advance,
    old: &PipelineStatus,
    generation: Option<i64>,
    now: i64,
) -> PipelineStatus {
    let (pipeline, revision, progress) = (&compiled.pipeline, &compiled.revision, &advance.advanced.progress);
    let (selector, config_maps, entries) = advance.kept.clone();
    let all = status(pipeline, progress, now, &how_to_approve);
    let mut omitted = Vec::new();
    let mut bounded = |what: &str, items: usize, shown: usize| {
        if items > shown {
            omitted.push(format!("{} {what}", items - shown));
        }
    };
    bounded("nodes", all.nodes.len(), NODES_SHOWN);
    bounded("revisions", all.revisions.len(), REVISIONS_SHOWN);
    bounded("frontier steps", all.frontier.len(), FRONTIER_SHOWN);
    let latest_through = all.nodes.first().and_then(|n| n.latest_through.clone());
    let ready = ready(compiled, advance);
    let newest_revisions = all.revisions.len().saturating_sub(REVISIONS_SHOWN);
    PipelineStatus {
        observed_generation: generation,
        conditions: conditions(old, generation, now, ready, false),
        revision: Some(revision.to_string()),
        latest_through,
        revisions: all.revisions[newest_revisions..].to_vec(),
        nodes: all.nodes.into_iter().take(NODES_SHOWN).collect(),
        frontier: all.frontier.into_iter().take(FRONTIER_SHOWN).collect(),
        omitted: (!omitted.is_empty()).then(|| {
            format!(
                "{}: the whole log is in the ConfigMaps `kubectl get configmaps -l {selector}` lists",
                omitted.join(", ")
            )
        }),
        log: Some(LogStatus { selector, config_maps, entries }),
        // Written by the status write, as the replica that makes it.
        shard: None,
    }
}

/// `Ready` for the spec's revision: through, failed, superseded, in progress (and what it
/// waits for), or not registered.
fn ready(compiled: &Compiled, advance: &Advance) -> Wanted {
    let (pipeline, revision) = (&compiled.pipeline, &compiled.revision);
    let ready = ConditionType::Ready.as_str();
    match advance.advanced.progress.revision(revision) {
        Some(r) => match &r.ended {
            Some(RevisionEnded::Through) => {
                (ready, "True", Reason::Through.as_str().into(), format!("revision {revision} is through every stage"))
            }
            Some(RevisionEnded::Failed { step, message }) => (
                ready,
                "False",
                Reason::StepFailed.as_str().into(),
                format!("revision {revision} failed at {step}: {message}"),
            ),
            Some(RevisionEnded::Superseded { by }) => (
                ready,
                "False",
                Reason::Superseded.as_str().into(),
                format!("revision {revision} was superseded by {by}"),
            ),
            None => {
                let waiting = advance.advanced.waiting.iter().find(|s| s.revision == r.revision);
                let message = match waiting.and_then(|s| s.decision.waits_for(&how_to_approve).map(|w| (s.step, w))) {
                    Some((step, waits)) => format!("{} waits for {waits}", pipeline.steps[step].id),
                    None => format!("revision {revision} is in progress"),
                };
                (ready, "False", Reason::Progressing.as_str().into(), message)
            }
        },
        None => {
            (ready, "Unknown", Reason::NotRegistered.as_str().into(), format!("revision {revision} is not registered"))
        }
    }
}

/// `Ready` as wanted, and `Stalled` (an invalid pipeline waits for its spec to change).
fn conditions(
    old: &PipelineStatus,
    generation: Option<i64>,
    now: i64,
    ready: Wanted,
    stalled: bool,
) -> Vec<crate::crd::Condition> {
    let now = format_time(now);
    let stall: Wanted = match stalled {
        true => (ConditionType::Stalled.as_str(), "True", ready.2.clone(), ready.3.clone()),
        false => (ConditionType::Stalled.as_str(), "False", Reason::Progressing.as_str().into(), String::new()),
    };
    [ready, stall].into_iter().map(|wanted| transition(&old.conditions, wanted, generation, &now)).collect()
}
