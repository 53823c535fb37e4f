//! Report (I/O): the status, built by the pure status function from what was observed and
//! written when it changed, then the events.

use kube::runtime::events::EventType;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::super::context::Context;
use super::super::error::StatusWriteError;
use super::super::reasons::{ConditionType, EventAction, Reason};
use super::super::replicas::ownership::Ownership;
use super::super::report::{STATUS_WRITE_PATIENCE, publish_to, write_status_to};
use super::super::status::{self, Observed, PassResult, changed, history_entries, next_status};
use super::api;
use super::observe::PassEvent;
use crate::crd::{Manifest, ManifestStatus};

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

/// The one writer of a Manifest's status in a reconcile: the pass's progress (through the
/// journal) while it runs, its outcome after it. Writes go one at a time, and it knows the
/// status it last wrote: what the object holds now.
pub struct StatusWriter {
    api: Api<Manifest>,
    ownership: Arc<Ownership>,
    namespace: String,
    name: String,
    last: tokio::sync::Mutex<Option<ManifestStatus>>,
}

impl StatusWriter {
    pub fn new(ctx: &Context, obj: &Manifest) -> Self {
        Self {
            api: api(ctx, obj),
            ownership: ctx.ownership.clone(),
            namespace: obj.namespace().unwrap_or_default(),
            name: obj.name_any(),
            last: Default::default(),
        }
    }

    /// Writes the status `build` makes once the write before it is done, retrying conflicts
    /// for up to `patience` — unless it is the status last written: actions that start
    /// together record their intents in one or two writes, not one each.
    pub async fn write_with(
        &self,
        build: impl FnOnce() -> ManifestStatus,
        patience: Duration,
    ) -> Result<(), StatusWriteError> {
        let mut last = self.last.lock().await;
        let status = build();
        if last.as_ref() == Some(&status) {
            return Ok(());
        }
        write_status_to(&self.ownership, &self.api, &self.namespace, &self.name, &status, patience).await?;
        *last = Some(status);
        Ok(())
    }

    /// The status it last wrote, if it wrote one.
    pub async fn last(&self) -> Option<ManifestStatus> {
        self.last.lock().await.clone()
    }
}

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

/// Builds the next status from what was observed and, through `writer`, writes it if anything
/// changed from what the object holds: what `writer` last wrote (the pass's progress), else `old`.
pub async fn finish(
    obj: &Manifest,
    ctx: &Context,
    writer: &StatusWriter,
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
        writer.write_with(|| new.clone(), STATUS_WRITE_PATIENCE).await?;
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
) -> Result<ManifestStatus, ReportError> {
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
        unwatched: ctx.watches.refused(obj),
        fights: Vec::new(),
        removals: Vec::new(),
    };
    finish(obj, ctx, &StatusWriter::new(ctx, obj), old, result).await
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

/// Publishes an event on `obj`; a failure to publish is logged, never fatal.
pub async fn publish(ctx: &Context, obj: &Manifest, type_: EventType, reason: &str, action: &str, note: &str) {
    publish_to(ctx, &obj.object_ref(&()), type_, reason, action, note).await;
}
