//! Deletion: `Orphan` lets go at once; `Delete` deletes the resources whose types can,
//! dependents first, and keeps the finalizer while anything failed.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;

use super::fetch::{FINALIZER, prepare, set_finalizer};
use super::inputs::{self, ManifestInputError};
use super::report::{self, ReportError};
use super::run::{MANIFEST_LABEL, PassRequest, memory_log, pod_scope, run_pass};
use super::validate::MANIFEST_FILE;
use super::{ManifestContext, Next};
use crate::controller::context::Context;
use crate::controller::reasons::{EventAction, Reason};
use crate::controller::report::publish;
use crate::crd::{DeletionPolicy, Manifest};
use crate::engine::PrepareError;
use crate::engine::events::ApproveAll;
use crate::engine::schedule::AssumeValid;
use crate::history::inventory::{inventory, predates};
use crate::history::{HistoryError, MemoryLog};
use crate::pass::{Ended, Inventory, Mode, PassError};

/// Deletes `obj` as its deletion policy says.
pub async fn cleanup(obj: &Manifest, ctx: &ManifestContext, term: &CancellationToken) -> Result<Next, DeleteError> {
    // Its delete actions' deletions wake nothing.
    ctx.watches.forget(&obj.namespace().unwrap_or_default(), &obj.name_any());
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Next::AwaitChange);
    }
    if obj.spec.deletion_policy == DeletionPolicy::Delete {
        if let Err(problem) = delete_resources(obj, ctx, term).await {
            return Ok(report::not_deleted(obj, ctx, problem.to_string()).await?);
        }
        let (reason, action) = (Reason::ResourcesDeleted.as_str(), EventAction::Delete.as_str());
        publish(ctx, obj, EventType::Normal, reason, action, "every resource that could be deleted was").await;
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
    let (manifest, _) = prepare(&ctx.client, &held, &ctx.settings).await?;
    let assumed = AssumeValid::default();
    let request = PassRequest {
        manifest: Arc::new(manifest),
        mode: Mode::Delete,
        inventory: Inventory::Off,
        log,
        observers: Vec::new(),
        approver: &ApproveAll,
        assume_valid: &assumed,
        scope: pod_scope(obj),
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
    if predates(log, MANIFEST_FILE)? {
        return Ok(Some(obj.clone()));
    }
    let held = inventory(log, MANIFEST_FILE)?;
    if held.is_empty() {
        return Ok(None);
    }
    let mut holding = obj.clone();
    holding.spec.resources = held;
    holding.spec.outputs = None;
    holding.spec.moved.clear();
    Ok(Some(holding))
}
