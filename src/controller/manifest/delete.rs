//! Deletion: `Orphan` lets go at once; `Delete` deletes the resources whose types can,
//! dependents first, and keeps the finalizer while anything failed.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;

use super::super::context::Context;
use super::super::inputs::{self, ManifestInputError};
use super::super::reasons::{EventAction, Reason};
use super::super::status::Observed;
use super::fetch::{FINALIZER, set_finalizer};
use super::report::{ReportError, finish_unrun, publish};
use super::run::{MANIFEST_LABEL, PassRequest, memory_log, run_pass};
use super::{Next, backoff};
use crate::crd::{DeletionPolicy, Manifest};
use crate::engine::PrepareError;
use crate::engine::events::ApproveAll;
use crate::engine::schedule::AssumeValid;
use crate::history::inventory::{inventory, predates};
use crate::history::{HistoryError, MemoryLog};
use crate::pass::{Ended, Inventory, Mode, PassError};

/// Deletes `obj` as its deletion policy says.
pub async fn cleanup(obj: &Manifest, ctx: &Context, term: &CancellationToken) -> Result<Next, DeleteError> {
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Next::AwaitChange);
    }
    if obj.spec.deletion_policy == DeletionPolicy::Delete {
        let retry = inputs::intervals(obj).map_or(Duration::from_secs(30), |i| i.retry);
        if let Err(problem) = delete_resources(obj, ctx, term).await {
            let problem = problem.to_string();
            publish(
                ctx,
                obj,
                EventType::Warning,
                Reason::DeleteFailed.as_str(),
                EventAction::Delete.as_str(),
                &problem,
            )
            .await;
            let old = obj.status.clone().unwrap_or_default();
            let observed = Observed::NotRun { reason: Reason::DeleteFailed.as_str(), message: problem };
            let new = finish_unrun(obj, ctx, &old, observed).await?;
            return Ok(Next::Requeue(backoff(retry, new.consecutive_failures, Duration::from_secs(300))));
        }
        publish(
            ctx,
            obj,
            EventType::Normal,
            Reason::ResourcesDeleted.as_str(),
            EventAction::Delete.as_str(),
            "every resource that could be deleted was",
        )
        .await;
    }
    // Its runners (those of its delete actions have no owner to go with).
    let selector = format!("{MANIFEST_LABEL}={}", obj.uid().unwrap_or_default());
    if let Err(e) = ctx.executors.forget(&obj.namespace().unwrap_or_default(), &selector).await {
        tracing::warn!(error = %e, "could not delete the Manifest's runners; they end when idle");
    }
    let _ = std::fs::remove_dir_all(inputs::object_dir(&ctx.settings.plug_root, obj));
    ctx.checks.forget(obj);
    set_finalizer(obj, ctx, false).await.map_err(DeleteError::Finalizer)?;
    ctx.metrics.reconciled("deleted");
    Ok(Next::AwaitChange)
}

/// Why a deletion's outcome could not be recorded, or the object let go.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("removing the finalizer: {0}")]
    Finalizer(kube::Error),
}

impl DeleteError {
    pub fn reason(&self) -> &'static str {
        match self {
            DeleteError::Report(e) => e.reason(),
            DeleteError::Finalizer(_) => "KubernetesApi",
        }
    }
}

/// Why the resources could not all be deleted: told in an event and the status, and retried.
#[derive(Debug, thiserror::Error)]
enum NotDeleted {
    #[error(transparent)]
    Input(#[from] ManifestInputError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error("reading what it holds: {0}")]
    Log(#[from] HistoryError),
    #[error(transparent)]
    NotPrepared(#[from] PrepareError),
    #[error("could not delete: {}", .0.join("; "))]
    Problems(Vec<String>),
}

async fn delete_resources(obj: &Manifest, ctx: &Context, term: &CancellationToken) -> Result<(), NotDeleted> {
    let log = memory_log(ctx, &obj.status.clone().unwrap_or_default());
    let Some(held) = holding(obj, &log)? else { return Ok(()) };
    let (manifest, _) = inputs::prepare(&ctx.client, &held, &ctx.settings).await?;
    let assumed = AssumeValid::default();
    let request = PassRequest {
        manifest: Arc::new(manifest),
        mode: Mode::Delete,
        inventory: Inventory::Off,
        log,
        observers: Vec::new(),
        approver: &ApproveAll,
        assume_valid: &assumed,
        scope: super::run::pod_scope(obj),
    };
    let passed = run_pass(ctx, obj, request, term).await?;
    match passed.ended {
        Ended::Deleted { report, .. } if report.succeeded() => Ok(()),
        Ended::Deleted { report, .. } => Err(NotDeleted::Problems(report.problems())),
        Ended::NotPrepared(e) => Err(e.into()),
        // A delete pass ends deleted or not prepared; anything else left everything in place.
        _ => Err(NotDeleted::Problems(vec!["the delete pass ended without deleting anything".into()])),
    }
}

/// `obj` declaring what its inventory holds instead of what its spec declares: what deleting it
/// deletes. A resource that never got applied (its image missing, its config invalid) is not
/// held, so it neither blocks the deletion nor is deleted; one removed from the spec and not
/// deleted yet is. `None`: nothing is held.
///
/// A log kept before the inventory existed (resources found VALID, nothing inventoried) holds
/// what the spec declares.
fn holding(obj: &Manifest, log: &MemoryLog) -> Result<Option<Manifest>, HistoryError> {
    if predates(log, inputs::MANIFEST_FILE)? {
        return Ok(Some(obj.clone()));
    }
    let held = inventory(log, inputs::MANIFEST_FILE)?;
    if held.is_empty() {
        return Ok(None);
    }
    let mut holding = obj.clone();
    holding.spec.resources = held;
    holding.spec.outputs = None;
    holding.spec.moved.clear();
    Ok(Some(holding))
}
