//! One reconcile of one Manifest, as named steps:
//!
//! 1. [`fetch`] (I/O): the finalizer set, the inputs read, the manifest validated with them;
//! 2. [`validate`] (pure): what only a change of the spec can fix;
//! 3. [`run`] (I/O): the engine's pass, its progress written as it goes;
//! 4. [`observe`] (pure): what the pass did, as the status and the events will say it;
//! 5. [`report`] (I/O): the outputs written, then the status, then the events.
//!
//! Deletion takes its own path ([`delete`]). What the controller does next comes back as
//! [`Next`]; each step that can fail has its own error type, and [`ManifestError`] is one of
//! them.

pub mod delete;
pub mod fetch;
mod journal;
pub mod observe;
pub mod report;
pub mod run;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::Context;
use super::inputs::ManifestInputError;
use super::metrics::Timer;
use super::outputs::{OutputsTarget, Written};
use super::reasons::{ConditionType, EventAction, Reason};
use super::status::{self, Observed, PassResult};
use crate::crd::{Manifest, ManifestStatus};
use crate::engine::validate::ValidatedManifest;
use crate::pass::Passed;
use delete::DeleteError;
pub use fetch::FINALIZER;
use fetch::FetchError;
use observe::PassEvent;
use report::{ReportError, finish, finish_unrun, publish};
use run::RunError;

/// What the controller should do next with the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Requeue(Duration),
    /// Nothing until the object changes (invalid, suspended, or gone).
    AwaitChange,
}

/// Why a Manifest's reconcile could not finish: the error of the step that failed. Retried by
/// [`error_policy`]. Failures of the manifest itself (invalid, a resource failing) are not
/// errors: they are recorded in the status.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Delete(#[from] DeleteError),
}

impl ManifestError {
    pub fn reason(&self) -> &'static str {
        match self {
            ManifestError::Fetch(e) => e.reason(),
            ManifestError::Run(e) => e.reason(),
            ManifestError::Report(e) => e.reason(),
            ManifestError::Delete(e) => e.reason(),
        }
    }
}

pub(super) fn api(ctx: &Context, obj: &Manifest) -> Api<Manifest> {
    Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default())
}

/// Reconciles one Manifest.
pub async fn reconcile(obj: &Manifest, ctx: &Context) -> Result<Next, ManifestError> {
    // Passes run under this replica's term for the object (its leadership, or its shard):
    // losing it cancels them; a shard is not handed over while the ticket lives.
    let Some(ticket) = ctx.ownership.begin(&obj.namespace().unwrap_or_default(), &obj.name_any()) else {
        return Ok(Next::AwaitChange);
    };
    let term = ticket.term.clone();
    if obj.meta().deletion_timestamp.is_some() {
        // Its delete actions' deletions wake nothing.
        ctx.watches.forget(&obj.namespace().unwrap_or_default(), &obj.name_any());
        return Ok(delete::cleanup(obj, ctx, &term).await?);
    }
    // Go on with the object as the patch left it, not as it was.
    let updated = fetch::with_finalizer(obj, ctx).await?;
    let obj = updated.as_ref().unwrap_or(obj);
    let old = obj.status.clone().unwrap_or_default();
    if obj.spec.suspend {
        finish_unrun(obj, ctx, &old, Observed::Suspended).await?;
        return Ok(Next::AwaitChange);
    }
    let checked = match validate::check(obj) {
        Ok(checked) => checked,
        Err(e) => return Ok(invalid(obj, ctx, &old, e).await?),
    };
    let (interval, retry) = (checked.intervals.check, checked.intervals.retry);
    let manifest = match fetch::inputs(ctx, obj).await {
        Ok(manifest) => manifest,
        Err(e) if e.is_invalid() => return Ok(invalid(obj, ctx, &old, e).await?),
        Err(e) if e.is_unavailable() => {
            let (reason, message) = (e.reason(), e.to_string());
            publish(ctx, obj, EventType::Warning, reason, EventAction::Fetch.as_str(), &message).await;
            let observed = Observed::NotRun { reason, message };
            let new = finish_unrun(obj, ctx, &old, observed).await?;
            return Ok(Next::Requeue(backoff(retry, new.consecutive_failures, interval)));
        }
        Err(e) => return Err(FetchError::Inputs(e).into()),
    };
    let (new, next_pass) = pass(obj, ctx, &old, manifest, checked, &term).await?;
    Ok(match new.conditions.iter().find(|c| c.type_ == ConditionType::Stalled.as_str()) {
        Some(c) if c.status == "True" => Next::AwaitChange,
        _ if new.consecutive_failures == 0 => Next::Requeue((ctx.jitter)(next_pass)),
        _ => Next::Requeue(backoff(retry, new.consecutive_failures, interval)),
    })
}

/// `retry × 2^(failures − 1)`, at most `interval`.
pub fn backoff(retry: Duration, failures: u32, interval: Duration) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    retry.saturating_mul(factor).min(interval.max(retry))
}

/// A spec only a change can fix: Stalled, with why, and not retried.
async fn invalid(
    obj: &Manifest,
    ctx: &Context,
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

/// The engine pass and what came of it: run it, observe what it did, write the outputs, and
/// report. Also returns when the next pass is due.
async fn pass(
    obj: &Manifest,
    ctx: &Context,
    old: &ManifestStatus,
    manifest: ValidatedManifest,
    checked: validate::Checked,
    term: &CancellationToken,
) -> Result<(ManifestStatus, Duration), ManifestError> {
    let ran = run::engine_pass(obj, ctx, old, manifest, checked.intervals, term).await?;
    let Passed { manifest, ended, drifts, interrupted, outputs, .. } = ran.passed;
    let revision = manifest.revision.clone();
    let log = ran.log.clone();
    let asked = observe::Asked { manual: ran.manual.as_ref(), guarded: ran.guarded.clone() };
    let seen = observe::observe(ended, drifts, interrupted, asked, old, &revision, || log.entries());
    let mut events = seen.done;
    let entries = if let Observed::Applied(report) = &seen.observed { Some(report.entries()) } else { None };
    let next = ctx.checks.record(obj, run::system_now(ctx), &revision, &ran.assumed, entries);
    next.corrected_after.iter().for_each(|after| ctx.metrics.drift_corrected_seconds.observe(after.as_secs_f64()));
    // What it applied is watched from now on (a pass that did not apply keeps what was).
    let unwatched = match entries {
        Some(entries) => {
            let watching = ctx.watches.register(obj, &super::watches::declared(entries)).await;
            if let (true, Some(why)) = (watching.newly_refused, &watching.refused) {
                events.push((EventType::Warning, Reason::WatchRefused.as_str(), watch_refusal(why)));
            }
            watching.refused
        }
        None => ctx.watches.refused(obj),
    };
    let outputs_failed = write_outputs(ctx, obj, &manifest, outputs, checked.outputs.as_ref(), &mut events).await;
    events.extend(seen.asked);
    let result = PassResult {
        generation: obj.meta().generation,
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
        fights: next
            .fights
            .into_iter()
            .map(|f| status::FoughtResource {
                detail: seen.drift_details.get(&f.resource).cloned(),
                resource: f.resource,
                corrections: f.corrections,
            })
            .collect(),
    };
    let new = finish(obj, ctx, &ran.writer, old, result).await?;
    report::pass_events(ctx, obj, old, &new, events).await;
    Ok((new, next.next_pass))
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
        (Some(Ok(values)), Some(target)) => match super::outputs::write(ctx, obj, target, values).await {
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

/// Reconciles what the watch read: a Manifest (read anew: the cache's copy is pruned), or
/// what failed to deserialize as one.
pub async fn reconcile_guarded(
    object: Arc<DeserializeGuard<Manifest>>,
    ctx: Arc<Context>,
) -> Result<Action, ManifestError> {
    let meta = match &object.0 {
        Ok(manifest) => &manifest.metadata,
        Err(invalid) => &invalid.metadata,
    };
    let (namespace, name) = (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
    if !ctx.ownership.owns(namespace, name) {
        // Another replica's (it leads, or holds the shard); gaining it reconciles it again.
        ctx.watches.forget(namespace, name);
        return Ok(Action::await_change());
    }
    // Not `name`: JSON logs give each span a `name` key of its own ("reconcile").
    let span = tracing::info_span!("reconcile", namespace, manifest = name, run_id = tracing::field::Empty,);
    async {
        ctx.metrics.work_queue_depth.inc();
        let permit = ctx.workers.acquire().await;
        ctx.metrics.work_queue_depth.dec();
        let _permit = permit.expect("the worker semaphore is never closed");
        let _timer = Timer::start(&ctx.metrics);
        match &object.0 {
            Ok(cached) => {
                // The pass reads the object as it is now. Gone since: nothing to do.
                let Some(manifest) = fetch::current(&ctx, cached).await? else {
                    ctx.watches.forget(namespace, name);
                    return Ok(Action::await_change());
                };
                Ok(match reconcile(&manifest, &ctx).await? {
                    Next::Requeue(after) => Action::requeue(after),
                    Next::AwaitChange => Action::await_change(),
                })
            }
            Err(invalid) => {
                super::malformed::malformed(&ctx, invalid).await;
                ctx.metrics.reconciled("invalid");
                Ok(Action::await_change())
            }
        }
    }
    .instrument(span)
    .await
}

/// A reconcile that failed is retried in 30 s.
pub fn error_policy(object: Arc<DeserializeGuard<Manifest>>, error: &ManifestError, ctx: Arc<Context>) -> Action {
    let name = object.0.as_ref().map(|m| m.name_any()).unwrap_or_default();
    ctx.metrics.reconciled("error");
    tracing::warn!(object = %name, reason = error.reason(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::jitter;
    use run::{MANIFEST_LABEL, pod_scope};

    #[test]
    fn jitter_brings_a_pass_forward_by_up_to_a_tenth_and_never_delays_it() {
        let d = Duration::from_secs(1200);
        let samples: Vec<Duration> = (0..2000).map(|_| jitter(d)).collect();
        assert!(samples.iter().all(|s| *s <= d && *s >= d.mul_f64(0.9)), "{samples:?}");
        assert!(samples.iter().any(|s| *s < d.mul_f64(0.92)) && samples.iter().any(|s| *s > d.mul_f64(0.98)));
    }

    #[test]
    fn retries_double_up_to_the_interval() {
        let (retry, interval) = (Duration::from_secs(30), Duration::from_secs(300));
        let waits: Vec<u64> = (1..=6).map(|n| backoff(retry, n, interval).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 300, 300]);
        assert_eq!(backoff(retry, 3, Duration::from_secs(10)), retry, "never below the retry interval");
    }

    #[test]
    fn pods_are_owned_by_their_manifest_until_it_is_being_deleted() {
        let mut obj = Manifest::new("app", serde_norway::from_str("resources: {}\n").unwrap());
        obj.metadata.namespace = Some("team".into());
        obj.metadata.uid = Some("u1".into());
        let scope = pod_scope(&obj);
        assert_eq!(scope.owner.map(|o| o.uid), Some("u1".to_string()));
        assert_eq!(scope.labels.get(MANIFEST_LABEL).map(String::as_str), Some("u1"));

        // Foreground deletion would have the garbage collector delete its delete actions' Pods.
        obj.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let scope = pod_scope(&obj);
        assert_eq!(scope.owner, None);
        assert_eq!(scope.labels.get(MANIFEST_LABEL).map(String::as_str), Some("u1"), "still swept by label");
        assert_eq!(scope.namespace, "team");
    }
}
