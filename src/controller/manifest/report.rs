//! Report (I/O): everything after a pass — the outputs written, what it applied watched, when
//! each resource is next read, the status (built by the pure status function and written
//! when it changed), then the events — and when the next pass is due. Also what a reconcile
//! that ran no pass reports: suspended, invalid, an input missing.

use std::time::Duration;

use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::inputs::ManifestInputError;
use super::observe::{ObservedPass, PassEvent};
use super::outputs::{self, OutputsTarget, Written};
use super::run::{RanWith, system_now};
use super::validate::{Checked, intervals};
use super::{ManifestContext, Next, backoff};
use crate::controller::context::Context;
use crate::controller::error::StatusWriteError;
use crate::controller::reasons::{ConditionType, EventAction, Reason};
use crate::controller::report::{STATUS_WRITE_PATIENCE, StatusWriter, publish};
use crate::controller::status::{self, FoughtResource, Observed, PassResult, changed, history_entries, next_status};
use crate::crd::{Manifest, ManifestStatus};
use crate::engine::validate::ValidatedManifest;

/// Why the outcome of a pass could not be reported (events and outputs that fail are told,
/// not errors).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Status(#[from] StatusWriteError),
}

impl ReportError {
    pub fn reason(&self) -> &'static str {
        match self {
            ReportError::Status(e) => e.reason(),
        }
    }
}

/// Reports the pass `seen` observed: records its checks, watches what it applied, writes its
/// outputs, then the status and the events; says when the next pass is due.
pub async fn pass(
    obj: &Manifest,
    ctx: &ManifestContext,
    old: &ManifestStatus,
    seen: ObservedPass,
    with: RanWith,
    checked: &Checked,
) -> Result<Next, ReportError> {
    let ObservedPass { generation, revision, seen, manifest, outputs, run_id } = seen;
    let mut events = seen.done;
    let entries = if let Observed::Applied(report) = &seen.observed { Some(report.entries()) } else { None };
    let next = ctx.checks.record(obj, system_now(ctx), &revision, &with.assumed, entries);
    next.corrected_after.iter().for_each(|after| ctx.metrics.drift_corrected_seconds.observe(after.as_secs_f64()));
    let unwatched = watch(obj, ctx, entries, &mut events).await;
    let outputs_failed = write_outputs(ctx, obj, &manifest, outputs, checked.outputs.as_ref(), &mut events).await;
    events.extend(seen.asked);
    let fights = next.fights.into_iter().map(|f| FoughtResource {
        detail: seen.drift_details.get(&f.resource).cloned(),
        resource: f.resource,
        corrections: f.corrections,
    });
    let result = PassResult {
        run_id: Some(run_id),
        generation,
        revision,
        observed: seen.observed,
        drifts: seen.drifts,
        history: seen.history,
        now_ms: (ctx.clock)(),
        approved_plan: seen.approved_plan,
        next_checks: next.by_resource,
        outputs_failed,
        unwatched,
        removals: seen.removals,
        fights: fights.collect(),
    };
    let new = finish(obj, ctx, &with.writer, old, result).await?;
    pass_events(ctx, obj, old, &new, events).await;
    let (interval, retry) = (checked.intervals.check, checked.intervals.retry);
    Ok(match new.conditions.iter().find(|c| c.type_ == ConditionType::Stalled.as_str()) {
        Some(c) if c.status == "True" => Next::AwaitChange,
        _ if new.consecutive_failures == 0 => Next::Requeue((ctx.jitter)(next.next_pass)),
        _ => Next::Requeue(backoff(retry, new.consecutive_failures, interval)),
    })
}

/// What the pass applied is watched from now on (a pass that did not apply keeps what was);
/// returns why some of it is not, telling it once in `events`.
async fn watch(
    obj: &Manifest,
    ctx: &ManifestContext,
    entries: Option<&[crate::engine::plan::ResourceEntry]>,
    events: &mut Vec<PassEvent>,
) -> Option<String> {
    let Some(entries) = entries else { return ctx.watches.refused(obj) };
    let watching = ctx.watches.register(obj, &crate::watches::declared(entries)).await;
    if let (true, Some(why)) = (watching.newly_refused, &watching.refused) {
        events.push((EventType::Warning, Reason::WatchRefused.as_str(), watch_refusal(why)));
    }
    watching.refused
}

/// The event of a Manifest whose objects' changes are not watched.
pub fn watch_refusal(why: &str) -> String {
    format!(
        "changes to its objects are read on its interval only, not as they happen: the server refuses \
         to let its ServiceAccount watch them ({why}); grant it `list` and `watch` on their kinds"
    )
}

/// Writes the pass's outputs where the spec says, telling what happened in `events`; returns
/// why they failed, if they did. Outputs that fail keep the object from Ready: a consumer of
/// the outputs Secret would otherwise read stale values while the object says all is well.
async fn write_outputs(
    ctx: &Context,
    obj: &Manifest,
    manifest: &ValidatedManifest,
    outputs: Option<Result<serde_json::Value, String>>,
    target: Option<&OutputsTarget>,
    events: &mut Vec<PassEvent>,
) -> Option<(&'static str, String)> {
    let mask = &manifest.mask;
    let failed = match (&outputs, target) {
        (Some(Ok(values)), Some(target)) => match outputs::write(ctx, obj, target, values).await {
            Ok(Written::Unchanged) => None,
            Ok(written) => {
                let verb = if written == Written::Created { "created" } else { "updated" };
                let note = format!("outputs {verb}: {}", target.describe());
                events.push((EventType::Normal, Reason::OutputsWritten.as_str(), note));
                None
            }
            Err(e) => Some((Reason::OutputsNotWritten.as_str(), mask.text(&e.to_string()))),
        },
        (Some(Err(why)), _) => {
            Some((Reason::OutputsFailed.as_str(), format!("the outputs could not be rendered: {}", mask.text(why))))
        }
        _ => None,
    };
    if let Some((reason, message)) = &failed {
        events.push((EventType::Warning, reason, message.clone()));
    }
    failed
}

/// A suspended Manifest: said in its status, nothing run until it changes.
pub async fn suspended(obj: &Manifest, ctx: &ManifestContext, old: &ManifestStatus) -> Result<Next, ReportError> {
    finish_unrun(obj, ctx, old, Observed::Suspended).await?;
    Ok(Next::AwaitChange)
}

/// A spec only a change can fix: Stalled, with why, and not retried.
pub async fn invalid(
    obj: &Manifest,
    ctx: &ManifestContext,
    old: &ManifestStatus,
    error: ManifestInputError,
) -> Result<Next, ReportError> {
    let (reason, message) = (error.reason(), error.to_string());
    let observed = Observed::Invalid { reason, message: message.clone() };
    let new = finish_unrun(obj, ctx, old, observed).await?;
    if status::changed(old, &new) {
        publish(ctx, obj, EventType::Warning, reason, EventAction::Validate.as_str(), &message).await;
    }
    Ok(Next::AwaitChange)
}

/// An input that is not there (a Secret, a ConfigMap, a key): said, and looked for again
/// after a growing wait.
pub async fn unavailable(
    obj: &Manifest,
    ctx: &ManifestContext,
    old: &ManifestStatus,
    checked: &Checked,
    error: ManifestInputError,
) -> Result<Next, ReportError> {
    let (reason, message) = (error.reason(), error.to_string());
    publish(ctx, obj, EventType::Warning, reason, EventAction::Fetch.as_str(), &message).await;
    let new = finish_unrun(obj, ctx, old, Observed::NotRun { reason, message }).await?;
    let (interval, retry) = (checked.intervals.check, checked.intervals.retry);
    Ok(Next::Requeue(backoff(retry, new.consecutive_failures, interval)))
}

/// A deletion whose resources could not all be deleted: said, and tried again.
pub async fn not_deleted(obj: &Manifest, ctx: &ManifestContext, problem: String) -> Result<Next, ReportError> {
    let retry = intervals(obj).map_or(Duration::from_secs(30), |i| i.retry);
    publish(ctx, obj, EventType::Warning, Reason::DeleteFailed.as_str(), EventAction::Delete.as_str(), &problem).await;
    let old = obj.status.clone().unwrap_or_default();
    let observed = Observed::NotRun { reason: Reason::DeleteFailed.as_str(), message: problem };
    let new = finish_unrun(obj, ctx, &old, observed).await?;
    Ok(Next::Requeue(backoff(retry, new.consecutive_failures, Duration::from_secs(300))))
}

/// Publishes a pass's events, in order, then Thrashing when the status just said so.
async fn pass_events(
    ctx: &Context,
    obj: &Manifest,
    old: &ManifestStatus,
    new: &ManifestStatus,
    events: Vec<PassEvent>,
) {
    for (type_, reason, note) in events {
        publish(ctx, obj, type_, reason, EventAction::Reconcile.as_str(), &note).await;
    }
    if let Some(thrashing) = new
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str() && c.reason == Reason::Thrashing.as_str())
        && status::changed(old, new)
    {
        let note = &thrashing.message;
        publish(ctx, obj, EventType::Warning, Reason::Thrashing.as_str(), EventAction::Reconcile.as_str(), note).await;
    }
}

/// Builds the next status from what was observed and, through `writer`, writes it if anything
/// changed from what the object holds: what `writer` last wrote (the pass's progress), else `old`.
async fn finish(
    obj: &Manifest,
    ctx: &Context,
    writer: &StatusWriter<Manifest>,
    old: &ManifestStatus,
    result: PassResult,
) -> Result<ManifestStatus, ReportError> {
    ctx.metrics.observe_pass(&result);
    log_pass(&result);
    let written = writer.last().await;
    let old = written.as_ref().unwrap_or(old);
    let mut new = next_status(old, &result);
    // The replica that reconciles it now: a shard that moved is written even by a pass that
    // found everything as it was, so that `status.shard` never names a replica gone.
    new.shard = ctx.ownership.shard_status(&obj.namespace().unwrap_or_default(), &obj.name_any());
    if changed(old, &new) {
        writer.write(&new, STATUS_WRITE_PATIENCE).await?;
    }
    Ok(new)
}

/// Records a pass that ran nothing (suspended, invalid, an input missing, a failed deletion):
/// the revision and the history stay as they were.
async fn finish_unrun(
    obj: &Manifest,
    ctx: &ManifestContext,
    old: &ManifestStatus,
    observed: Observed,
) -> Result<ManifestStatus, ReportError> {
    let result = PassResult {
        run_id: None,
        generation: obj.meta().generation,
        revision: old.revision.clone().unwrap_or_default(),
        observed,
        drifts: Vec::new(),
        history: history_entries(old),
        now_ms: (ctx.clock)(),
        approved_plan: None,
        next_checks: Default::default(),
        outputs_failed: None,
        unwatched: ctx.watches.refused(obj),
        fights: Vec::new(),
        removals: Vec::new(),
    };
    finish(obj, ctx, &StatusWriter::new(ctx, &obj.metadata), old, result).await
}

/// One line per pass: at info when it changed, failed or was refused, at debug when it found
/// everything as it was.
fn log_pass(pass: &PassResult) {
    let applied = match &pass.observed {
        Observed::Applied(report) => report.counts().applied,
        _ => 0,
    };
    let drifted: Vec<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
    let message = match &pass.observed {
        Observed::Invalid { message, .. } | Observed::NotRun { message, .. } => Some(message.as_str()),
        _ => None,
    };
    if pass.succeeded() && applied == 0 && drifted.is_empty() {
        tracing::debug!(revision = %pass.revision, "pass finished: everything as declared");
    } else {
        tracing::info!(result = pass.result(), applied, ?drifted, message, revision = %pass.revision, "pass finished");
    }
}
