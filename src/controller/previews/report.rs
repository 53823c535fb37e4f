//! Report: a preview's answer in its status, through the one fenced writer — fenced by the
//! term of the Manifest it is for (the replica that reconciles that Manifest plans it) — and
//! when to look again.

use std::time::Duration;

use kube::runtime::controller::Action;

use super::Answer;
use super::expire::ttl;
use crate::controller::context::Context;
use crate::controller::error::StatusWriteError;
use crate::controller::reasons::{ConditionType, PreviewPhase};
use crate::controller::report::{STATUS_WRITE_PATIENCE, StatusWriter};
use crate::crd::Condition;
use crate::crd::preview::{ManifestPreview, PreviewStatus};
use crate::history::format_time;

/// How often a queued preview asks again for a slot.
pub const QUEUED_RETRY: Duration = Duration::from_millis(500);

/// The status `answer` makes, at `now`, for generation `generation`.
pub fn status(answer: Answer, generation: Option<i64>, now: i64) -> PreviewStatus {
    let done = matches!(answer.phase, PreviewPhase::Planned | PreviewPhase::Failed);
    let ready = Condition {
        type_: ConditionType::Ready.as_str().into(),
        status: match answer.phase {
            PreviewPhase::Planned => "True",
            PreviewPhase::Failed => "False",
            PreviewPhase::Queued | PreviewPhase::Planning => "Unknown",
        }
        .into(),
        reason: answer.reason.as_str().into(),
        message: answer.message.clone().or_else(|| answer.plan.as_ref().map(|p| p.summary.clone())).unwrap_or_default(),
        last_transition_time: format_time(now),
        observed_generation: generation,
    };
    PreviewStatus {
        conditions: vec![ready],
        phase: Some(answer.phase.as_str().into()),
        reason: Some(answer.reason.as_str().into()),
        message: answer.message,
        plan: answer.plan,
        observed_generation: generation,
        finished_at: done.then(|| format_time(now)),
    }
}

/// Writes `answer` into the preview's status, and says when to look again: once its TTL has
/// passed for an answer that is done, soon for one that waits.
pub async fn report(
    obj: &ManifestPreview,
    ctx: &Context,
    answer: Answer,
    now: i64,
) -> Result<Action, StatusWriteError> {
    let done = matches!(answer.phase, PreviewPhase::Planned | PreviewPhase::Failed);
    let status = status(answer, obj.metadata.generation, now);
    let writer = StatusWriter::<ManifestPreview>::new(ctx, &obj.metadata).fenced_by(&obj.spec.manifest);
    match writer.write(&status, STATUS_WRITE_PATIENCE).await {
        Ok(()) => {}
        // Deleted meanwhile (abandoned): nothing to keep.
        Err(StatusWriteError::Kube(kube::Error::Api(e))) if e.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e),
    }
    Ok(if done { Action::requeue(ttl(obj)) } else { Action::requeue(QUEUED_RETRY) })
}
