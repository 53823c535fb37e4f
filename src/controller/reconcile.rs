//! One reconcile of one Manifest: fetch (I/O) → validate (pure) → plan and apply (the engine)
//! → status (pure, then one server-side apply) → events. Deletion takes its own path.

use super::reasons::{ConditionType, EventAction, Reason};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::approval::ManualApproval;
use super::context::Context;
use super::error::Error;
use super::inputs::{self, ManifestInputError};
use super::journal::StatusJournal;
use super::outputs::{OutputsTarget, Written};
use super::report::{STATUS_WRITE_PATIENCE, publish_to, write_status_to};
use super::status::{self, Observed, PassResult, changed, history_entries, next_status};
use crate::crd::APPROVE_ANNOTATION;
use crate::crd::{DeletionPolicy, Manifest, ManifestStatus};
use crate::engine::PrepareError;
use crate::engine::context::{RunOptions, new_run_id};
use crate::engine::events::{ApproveAll, Approver, Observer};
use crate::engine::plan::{Standing, action_names};
use crate::engine::schedule::AssumeValid;
use crate::engine::validate::ValidatedManifest;
use crate::history::MemoryLog;
use crate::pass::{Ended, Mode, Pass, PassError, Passed};

/// The finalizer that lets the controller clean up before an object goes.
pub const FINALIZER: &str = "deployster.io/cleanup";

/// What the controller should do next with the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Requeue(Duration),
    /// Nothing until the object changes (invalid, suspended, or gone).
    AwaitChange,
}

fn api(ctx: &Context, obj: &Manifest) -> Api<Manifest> {
    Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default())
}

/// Reconciles one Manifest.
pub async fn reconcile(obj: &Manifest, ctx: &Context) -> Result<Next, Error> {
    // Passes run under this replica's term for the object (its leadership, or its shard):
    // losing it cancels them; a shard is not handed over while the ticket lives.
    let Some(ticket) = ctx.ownership.begin(&obj.namespace().unwrap_or_default(), &obj.name_any()) else {
        return Ok(Next::AwaitChange);
    };
    let term = ticket.term.clone();
    if obj.meta().deletion_timestamp.is_some() {
        return cleanup(obj, ctx, &term).await;
    }
    let updated;
    let obj = if obj.finalizers().iter().any(|f| f == FINALIZER) {
        obj
    } else {
        // Go on with the object as the patch left it, not as it was.
        updated = set_finalizer(obj, ctx, true).await?;
        &updated
    };
    let old = obj.status.clone().unwrap_or_default();
    if obj.spec.suspend {
        finish_unrun(obj, ctx, &old, Observed::Suspended).await?;
        return Ok(Next::AwaitChange);
    }
    let (intervals, outputs) = match inputs::intervals(obj).and_then(|i| Ok((i, OutputsTarget::of(obj)?))) {
        Ok(checked) => checked,
        Err(e) => return invalid(obj, ctx, &old, e).await,
    };
    let (interval, retry) = (intervals.check, intervals.retry);
    let settings = &ctx.settings;
    let (manifest, inputs) = match inputs::prepare(&ctx.client, obj, settings).await {
        Ok(prepared) => prepared,
        Err(e) if e.is_invalid() => return invalid(obj, ctx, &old, e).await,
        Err(e) if e.is_unavailable() => {
            let (reason, message) = (e.reason(), e.to_string());
            publish(ctx, obj, EventType::Warning, reason, EventAction::Fetch.as_str(), &message).await;
            let observed = Observed::NotRun { reason, message };
            let new = finish_unrun(obj, ctx, &old, observed).await?;
            return Ok(Next::Requeue(backoff(retry, new.consecutive_failures, interval)));
        }
        Err(e) => return Err(e.into()),
    };
    // The deployment log names the pass's revision as the status does.
    let manifest = ValidatedManifest { revision: inputs::revision(obj, &inputs), ..manifest };
    let (new, next_pass) = pass(obj, ctx, &old, manifest, outputs, intervals, &term).await?;
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
) -> Result<Next, Error> {
    let (reason, message) = (error.reason(), error.to_string());
    let observed = Observed::Invalid { reason, message: message.clone() };
    let new = finish_unrun(obj, ctx, old, observed).await?;
    if status::changed(old, &new) {
        publish(ctx, obj, EventType::Warning, reason, EventAction::Validate.as_str(), &message).await;
    }
    Ok(Next::AwaitChange)
}

/// The engine pass: plan (reading the state of the resources due for a check), apply, record,
/// and write what was observed. Also returns when the next pass is due.
async fn pass(
    obj: &Manifest,
    ctx: &Context,
    old: &ManifestStatus,
    manifest: ValidatedManifest,
    outputs: Option<OutputsTarget>,
    intervals: inputs::Intervals,
    term: &CancellationToken,
) -> Result<(ManifestStatus, Duration), Error> {
    let log = memory_log(ctx, old);
    let journal = Arc::new(StatusJournal::new(api(ctx, obj), ctx, obj, old, &log));
    let manifest = Arc::new(manifest);
    let manual = ManualApproval::of(obj, &manifest, (ctx.clock)());
    let approver: &dyn Approver = manual.as_ref().map_or(&ApproveAll, |m| m as &dyn Approver);
    let assumed = ctx.checks.not_due(obj, intervals, system_now(ctx));
    let observers = vec![journal.clone() as Arc<dyn Observer>];
    let stop_writing = CancellationToken::new();
    let run = async {
        let passed = run_pass(ctx, obj, manifest, Mode::Apply, log.clone(), observers, approver, term, &assumed).await;
        stop_writing.cancel();
        passed
    };
    // Progress is written while the pass runs, its last write done before the pass's own.
    let (passed, ()) = tokio::join!(run, journal.keep_writing(&stop_writing));
    let passed = passed?;
    let revision = passed.manifest.revision.clone();
    for recovered in &passed.recovered {
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::Interrupted.as_str(),
            EventAction::Reconcile.as_str(),
            &recovered.describe(),
        )
        .await;
    }
    let observed = match passed.ended {
        Ended::NotPrepared(e) if e.is_invalid_input() => {
            Observed::Invalid { reason: e.reason(), message: e.to_string() }
        }
        Ended::NotPrepared(e) => Observed::NotRun { reason: e.reason(), message: e.to_string() },
        Ended::Applied { report, .. } => Observed::Applied(report),
        Ended::Declined { plan, .. } => match manual.as_ref().and_then(ManualApproval::asked) {
            Some(pending) => Observed::AwaitingApproval { plan, pending },
            None => Observed::Unapplied(plan),
        },
        Ended::NotApplicable(plan)
        | Ended::Planned(plan)
        | Ended::Refused { plan, .. }
        | Ended::PlanChanged { plan, .. }
        | Ended::Deleted { plan, .. } => Observed::Unapplied(plan),
    };
    let entries = if let Observed::Applied(report) = &observed { Some(report.entries()) } else { None };
    let next = ctx.checks.record(obj, system_now(ctx), &revision, &assumed, entries);
    let drifts = passed.drifts;
    let still_awaiting = matches!(&observed, Observed::AwaitingApproval { pending, .. }
        if old.pending_plan.as_ref().is_some_and(|p| p.id == pending.id));
    let unchanged = matches!(&observed, Observed::Applied(r) if r.succeeded() && r.counts().applied == 0);
    let no_op =
        (still_awaiting || unchanged && drifts.is_empty()) && old.revision.as_deref() == Some(revision.as_str());
    // A pass that found everything as it was adds nothing worth keeping to the history.
    let history = if no_op { history_entries(old) } else { log.entries() };
    let mut events = pass_events(&observed, &drifts);
    let mask = &passed.manifest.mask;
    // Outputs that fail keep the object from Ready: a consumer of the outputs Secret would
    // otherwise read stale values while the object says all is well.
    let outputs_failed = match (&passed.outputs, &outputs) {
        (Some(Ok(values)), Some(target)) => match super::outputs::write(ctx, obj, target, values).await {
            Ok(Written::Unchanged) => None,
            Ok(written) => {
                let verb = if written == Written::Created { "created" } else { "updated" };
                events.push((
                    EventType::Normal,
                    Reason::OutputsWritten.as_str(),
                    format!("outputs {verb}: {}", target.describe()),
                ));
                None
            }
            Err(e) => Some((Reason::OutputsNotWritten.as_str(), mask.text(&e.to_string()))),
        },
        (Some(Err(why)), _) => {
            Some((Reason::OutputsFailed.as_str(), format!("the outputs could not be rendered: {}", mask.text(why))))
        }
        _ => None,
    };
    if let Some((reason, message)) = &outputs_failed {
        events.push((EventType::Warning, reason, message.clone()));
    }
    if let Observed::AwaitingApproval { pending, .. } = &observed
        && !still_awaiting
    {
        let changes: Vec<String> =
            pending.changes.iter().map(|c| format!("{} ({}: {})", c.name, c.status, c.actions.join(", "))).collect();
        let note = format!(
            "plan {} awaits approval ({APPROVE_ANNOTATION}={}): {}",
            pending.id,
            pending.id,
            changes.join("; ")
        );
        events.push((EventType::Normal, Reason::AwaitingApproval.as_str(), note));
    }
    if let Some(why) = manual.as_ref().and_then(ManualApproval::ignored) {
        events.push((EventType::Warning, Reason::ApprovalIgnored.as_str(), why));
    }
    if let Some(why) = passed.interrupted {
        tracing::warn!(reason = %why, "pass interrupted");
        events.push((EventType::Warning, Reason::Interrupted.as_str(), why));
    }
    // An approved plan was applied when the pass applied after asking the approval.
    let approved_plan = match (&observed, &manual) {
        (Observed::Applied(_), Some(manual)) => manual.asked().map(|p| p.id),
        _ => None,
    };
    let result = PassResult {
        generation: obj.meta().generation,
        revision,
        observed,
        drifts,
        history,
        now_ms: (ctx.clock)(),
        approved_plan,
        next_checks: next.by_resource,
        outputs_failed,
    };
    // The status as the journal last wrote it, if it did, is what the object now holds.
    let written = journal.last_written().await;
    let new = finish(obj, ctx, written.as_ref().unwrap_or(old), result).await?;
    for (type_, reason, note) in events {
        publish(ctx, obj, type_, reason, EventAction::Reconcile.as_str(), &note).await;
    }
    if let Some(thrashing) = new
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str() && c.reason == Reason::Thrashing.as_str())
        && status::changed(old, &new)
    {
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::Thrashing.as_str(),
            EventAction::Reconcile.as_str(),
            &thrashing.message,
        )
        .await;
    }
    Ok((new, next.next_pass))
}

/// The controller's clock as a time.
fn system_now(ctx: &Context) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from((ctx.clock)()).unwrap_or(0))
}

/// The object's history as a deployment log for one pass.
fn memory_log(ctx: &Context, old: &ManifestStatus) -> Arc<MemoryLog> {
    Arc::new(MemoryLog::from_entries(history_entries(old), Some(ctx.settings.history_limit)))
}

/// A pass that changes things, approved as a whole by `approver`, stopped when `term` ends.
#[allow(clippy::too_many_arguments)]
async fn run_pass(
    ctx: &Context,
    obj: &Manifest,
    manifest: Arc<ValidatedManifest>,
    mode: Mode,
    log: Arc<MemoryLog>,
    observers: Vec<Arc<dyn Observer>>,
    approver: &dyn Approver,
    term: &CancellationToken,
    assume_valid: &AssumeValid,
) -> Result<Passed, PassError> {
    let settings = &ctx.settings;
    let run_id = new_run_id();
    // The reconcile's span (controller::run) has a slot for it: every log line of the pass says it.
    tracing::Span::current().record("run_id", run_id.as_str());
    // Image types' Pods run in the Manifest's namespace, as its ServiceAccount, owned by it —
    // once nothing an earlier pass of it started still runs: an action never runs twice at once.
    let scope = pod_scope(obj);
    if let Some(pods) = ctx.executors.pods() {
        let selector = format!("{MANIFEST_LABEL}={}", obj.uid().unwrap_or_default());
        let swept = pods
            .sweep(&scope.namespace, &selector)
            .await
            .map_err(|source| PassError::Recovery { run: "an earlier pass of this Manifest".into(), source })?;
        if swept > 0 {
            let note = format!(
                "stopped {swept} Pod(s) an earlier pass left running (a controller that crashed or lost its \
                 lease); an action among them is recorded as interrupted"
            );
            tracing::warn!("{note}");
            publish(ctx, obj, EventType::Warning, Reason::PodsStopped.as_str(), EventAction::Reconcile.as_str(), &note)
                .await;
        }
    }
    let executor = ctx.executors.for_pass(&scope);
    let options = RunOptions {
        parallelism: settings.parallelism,
        timeouts: settings.timeouts,
        run_id,
        verbose: false,
        assume_valid: assume_valid.clone(),
    };
    let why = || interruption(ctx);
    let pass = Pass {
        manifest,
        executor,
        log,
        mode,
        options,
        observers,
        approver,
        cancel: term.child_token(),
        cancelled_because: &why,
        recover: true,
        expected: None,
        recheck: false,
    };
    let passed = pass.run().await;
    if let Some(pods) = ctx.executors.pods()
        && let Some(why) = pods.untold_runner_refusal(&scope.namespace, scope.service_account.as_deref())
    {
        let note = format!("image types run as a Pod per invocation here: {why}");
        publish(
            ctx,
            obj,
            EventType::Warning,
            Reason::RunnersUnavailable.as_str(),
            EventAction::Reconcile.as_str(),
            &note,
        )
        .await;
    }
    passed
}

/// The label that names the Manifest (its uid) on the Pods and Secrets of its passes.
pub const MANIFEST_LABEL: &str = "deployster.io/manifest-uid";

/// Where and as whom the Pods of `obj`'s image types run.
///
/// They are owned by the Manifest, so that they go with it — except once it is being deleted.
/// A Manifest deleted with foreground propagation has the garbage collector delete every object
/// it owns, and so would the Pods of its own delete actions, created after that began: those
/// carry only the Manifest's label, are deleted once read as every Pod is, and the finalizer
/// holds the Manifest (and its next pass sweeps them) until its delete actions have run.
pub fn pod_scope(obj: &Manifest) -> crate::pod::executor::PodScope {
    let deleting = obj.metadata.deletion_timestamp.is_some();
    crate::pod::executor::PodScope {
        namespace: obj.namespace().unwrap_or_default(),
        service_account: obj.spec.service_account_name.clone(),
        owner: obj.controller_owner_ref(&()).filter(|_| !deleting),
        options: obj.spec.pod.clone().unwrap_or_default(),
        labels: [(MANIFEST_LABEL.to_string(), obj.uid().unwrap_or_default())].into(),
    }
}

/// Why a pass's term ended under it.
fn interruption(ctx: &Context) -> String {
    let cause = if ctx.shutdown.is_cancelled() {
        "the controller is shutting down"
    } else {
        "this replica lost the leader lease"
    };
    format!(
        "the pass was interrupted: {cause}; its running actions were cancelled and the next pass reads every state afresh"
    )
}

/// The events a pass deserves: applied, drift corrected, action failed.
fn pass_events(
    observed: &Observed,
    drifts: &[crate::history::recorder::Drift],
) -> Vec<(EventType, &'static str, String)> {
    let mut events = Vec::new();
    let Observed::Applied(report) = observed else { return events };
    let drifted: Vec<String> = drifts.iter().map(|d| format!("{} ({})", d.resource, d.now)).collect();
    if !drifted.is_empty() {
        let (type_, reason, verb) = if report.succeeded() {
            (EventType::Normal, Reason::DriftCorrected.as_str(), "corrected")
        } else {
            (EventType::Warning, Reason::DriftDetected.as_str(), "not corrected: the pass failed")
        };
        events.push((type_, reason, format!("drift in {}; {verb}", drifted.join(", "))));
    }
    let drifted_names: std::collections::HashSet<&str> = drifts.iter().map(|d| d.resource.as_str()).collect();
    let applied: Vec<String> = report
        .entries()
        .iter()
        .filter_map(|e| match &e.standing {
            Standing::Valid { applied: Some(ran), .. } if !drifted_names.contains(e.name.as_str()) => {
                Some(format!("{} ({})", e.name, action_names(ran)))
            }
            _ => None,
        })
        .collect();
    if !applied.is_empty() {
        events.push((EventType::Normal, Reason::Applied.as_str(), format!("applied {}", applied.join(", "))));
    }
    for e in report.entries() {
        if let Standing::Failed(error) = &e.standing {
            events.push((EventType::Warning, error.reason(), format!("{}: {error}", e.name)));
        }
    }
    events
}

/// Builds the next status from what was observed and writes it if anything changed.
async fn finish(
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
async fn finish_unrun(
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

/// Adds or removes the finalizer (merge patch guarded by the resourceVersion); returns the
/// object as patched.
async fn set_finalizer(obj: &Manifest, ctx: &Context, present: bool) -> Result<Manifest, Error> {
    let mut finalizers: Vec<String> = obj.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
    if present {
        finalizers.push(FINALIZER.to_string());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    Ok(api(ctx, obj).patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?)
}

/// Deletion: `Orphan` lets go at once; `Delete` deletes the resources whose types can,
/// dependents first, and keeps the finalizer while anything failed.
async fn cleanup(obj: &Manifest, ctx: &Context, term: &CancellationToken) -> Result<Next, Error> {
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
    if let Some(pods) = ctx.executors.pods() {
        let selector = format!("{MANIFEST_LABEL}={}", obj.uid().unwrap_or_default());
        if let Err(e) = pods.delete_runners(&obj.namespace().unwrap_or_default(), &selector).await {
            tracing::warn!(error = %e, "could not delete the Manifest's runners; they end when idle");
        }
    }
    let _ = std::fs::remove_dir_all(inputs::object_dir(&ctx.settings.plug_root, obj));
    ctx.checks.forget(obj);
    set_finalizer(obj, ctx, false).await?;
    ctx.metrics.reconciled("deleted");
    Ok(Next::AwaitChange)
}

/// Why a deletion could not be completed.
#[derive(Debug, thiserror::Error)]
enum DeleteError {
    #[error(transparent)]
    Input(#[from] ManifestInputError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    NotPrepared(#[from] PrepareError),
    #[error("could not delete: {}", .0.join("; "))]
    Problems(Vec<String>),
}

async fn delete_resources(obj: &Manifest, ctx: &Context, term: &CancellationToken) -> Result<(), DeleteError> {
    let settings = &ctx.settings;
    let (manifest, _) = inputs::prepare(&ctx.client, obj, settings).await?;
    let log = memory_log(ctx, &obj.status.clone().unwrap_or_default());
    let passed = run_pass(
        ctx,
        obj,
        Arc::new(manifest),
        Mode::Delete,
        log,
        Vec::new(),
        &ApproveAll,
        term,
        &AssumeValid::default(),
    )
    .await?;
    match passed.ended {
        Ended::Deleted { report, .. } if report.succeeded() => Ok(()),
        Ended::Deleted { report, .. } => Err(DeleteError::Problems(report.problems())),
        Ended::NotPrepared(e) => Err(e.into()),
        // A delete pass ends deleted or not prepared; anything else left everything in place.
        _ => Err(DeleteError::Problems(vec!["the delete pass ended without deleting anything".into()])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::jitter;

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
