//! Report (I/O): what a reconcile of a Pipeline found, told — its events, then its status
//! through the one fenced writer — and counted.

use kube::api::ObjectMeta;
use kube::runtime::controller::Action;

use super::PipelineContext;
use super::observe::Findings;
use crate::controller::context::Context;
use crate::controller::error::StatusWriteError;
use crate::controller::metrics::ResultLabels;
use crate::controller::reasons::Reason;
use crate::controller::report::{STATUS_WRITE_PATIENCE, StatusWriter, publish_to, reference_to};
use crate::crd::pipeline::Pipeline;

/// Publishes what `found` tells on the object `meta` describes, writes its status, counts the
/// reconcile by the Ready reason it left; says when to look again.
pub async fn report(meta: &ObjectMeta, ctx: &PipelineContext, found: Findings) -> Result<Action, StatusWriteError> {
    let reference = reference_to::<Pipeline>(meta);
    for (type_, reason, note) in &found.events {
        publish_to(ctx, &reference, *type_, reason.as_str(), found.action.as_str(), note).await;
    }
    StatusWriter::<Pipeline>::new(ctx, meta).write(&found.status, STATUS_WRITE_PATIENCE).await?;
    if found.through_now {
        ctx.metrics.pipeline_revisions_through.inc();
    }
    counted(ctx, found.status.conditions.first().and_then(|ready| Reason::parse(&ready.reason)));
    Ok(found.next)
}

/// Counts a reconcile by the Ready reason it left (`None`: a reason not the controller's own).
fn counted(ctx: &Context, ready: Option<Reason>) {
    count(
        ctx,
        match ready {
            Some(Reason::Through) => "through",
            Some(Reason::Progressing) => "progressing",
            Some(Reason::StepFailed) => "failed",
            Some(Reason::Superseded) => "superseded",
            Some(Reason::Interrupted) => "interrupted",
            Some(Reason::NotRegistered) => "not_registered",
            Some(Reason::InvalidPipeline | Reason::MalformedObject) => "invalid",
            Some(Reason::ManifestMissing) => "manifest_missing",
            _ => "other",
        },
    )
}

/// Counts a reconcile that failed (retried by the error policy).
pub fn counted_error(ctx: &Context) {
    count(ctx, "error")
}

fn count(ctx: &Context, result: &'static str) {
    ctx.metrics.pipeline_reconciles.get_or_create(&ResultLabels { result }).inc();
}
