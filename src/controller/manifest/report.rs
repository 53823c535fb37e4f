//! Report (I/O): the status, built by the pure status function from what was observed and
//! written when it changed, then the events.

use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::super::context::Context;
use super::super::error::Error;
use super::super::reasons::{ConditionType, EventAction, Reason};
use super::super::report::{STATUS_WRITE_PATIENCE, publish_to, write_status_to};
use super::super::status::{self, Observed, PassResult, changed, history_entries, next_status};
use super::api;
use super::observe::PassEvent;
use crate::crd::{Manifest, ManifestStatus};

/// Publishes a pass's events, in order, then Thrashing when the status just said so.
pub async fn pass_events(
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

/// Builds the next status from what was observed and writes it if anything changed.
pub async fn finish(
    obj: &Manifest,
    ctx: &Context,
    old: &ManifestStatus,
    result: PassResult,
) -> Result<ManifestStatus, Error> {
    ctx.metrics.observe_pass(&result);
    log_pass(&result);
    let mut new = next_status(old, &result);
    // The replica that reconciles it now: a shard that moved is written even by a pass that
    // found everything as it was, so that `status.shard` never names a replica gone.
    new.shard = ctx.ownership.shard_status(&obj.namespace().unwrap_or_default(), &obj.name_any());
    if changed(old, &new) {
        write_status(ctx, obj, &new).await?;
    }
    Ok(new)
}

/// Records a pass that ran nothing (suspended, invalid, an input missing, a failed deletion):
/// the revision and the history stay as they were.
pub async fn finish_unrun(
    obj: &Manifest,
    ctx: &Context,
    old: &ManifestStatus,
    observed: Observed,
) -> Result<ManifestStatus, Error> {
    let result = PassResult {
        generation: obj.meta().generation,
        revision: old.revision.clone().unwrap_or_default(),
        observed,
        drifts: Vec::new(),
        history: history_entries(old),
        now_ms: (ctx.clock)(),
        approved_plan: None,
        next_checks: Default::default(),
        outputs_failed: None,
    };
    finish(obj, ctx, old, result).await
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

/// Server-side apply of the whole status under one field manager, retried on conflicts.
pub async fn write_status(ctx: &Context, obj: &Manifest, status: &ManifestStatus) -> Result<(), Error> {
    let namespace = obj.namespace().unwrap_or_default();
    write_status_to(&ctx.ownership, &api(ctx, obj), &namespace, &obj.name_any(), status, STATUS_WRITE_PATIENCE).await
}

/// Publishes an event on `obj`; a failure to publish is logged, never fatal.
pub async fn publish(ctx: &Context, obj: &Manifest, type_: EventType, reason: &str, action: &str, note: &str) {
    publish_to(ctx, &obj.object_ref(&()), type_, reason, action, note).await;
}
