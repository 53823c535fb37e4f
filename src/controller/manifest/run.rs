//! Run (I/O): the engine's pass over the Manifest — in its namespace, as its ServiceAccount,
//! under this replica's term for it — with the status journal writing progress meanwhile.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::ManifestContext;
use super::journal::StatusJournal;
use super::validate::Intervals;
use crate::controller::approval::{DeletionGuard, ManualApproval};
use crate::controller::context::Context;
use crate::controller::reasons::{EventAction, Reason};
use crate::controller::report::{StatusWriter, publish};
use crate::controller::status::history_entries;
use crate::crd::{DeletionPolicy, Manifest, ManifestStatus};
use crate::engine::context::{RunOptions, new_run_id};
use crate::engine::events::{ApproveAll, Approver, Observer};
use crate::engine::schedule::AssumeValid;
use crate::engine::validate::ValidatedManifest;
use crate::history::MemoryLog;
use crate::pass::{Inventory, Mode, Pass, PassError, Passed};

/// Why the pass could not run to its end (a pass that ran and failed is no error: the status
/// says what failed).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Pass(#[from] PassError),
}

impl RunError {
    pub fn reason(&self) -> &'static str {
        match self {
            RunError::Pass(e) => e.reason(),
        }
    }
}

/// What a pass ran with, which the steps after it read.
pub struct RanWith {
    /// Its deployment log (the object's history, and what the pass added).
    pub log: Arc<MemoryLog>,
    /// What wrote the pass's progress, and writes its outcome: the reconcile's one writer.
    pub writer: Arc<StatusWriter<Manifest>>,
    /// The approval the spec asks for, if it does.
    pub manual: Option<ManualApproval>,
    /// The resources not due for a check, assumed VALID.
    pub assumed: AssumeValid,
    /// Why the deletion guard refused the plan, if it did.
    pub guarded: Option<String>,
}

/// Plans (reading the state of the resources due for a check), applies what the approval
/// lets, and records; progress is written while it runs.
pub async fn engine_pass(
    obj: &Manifest,
    ctx: &ManifestContext,
    old: &ManifestStatus,
    manifest: ValidatedManifest,
    intervals: Intervals,
    term: &CancellationToken,
) -> Result<(Passed, RanWith), RunError> {
    let log = memory_log(ctx, old);
    let writer = Arc::new(StatusWriter::new(ctx, &obj.metadata));
    let journal = Arc::new(StatusJournal::new(writer.clone(), obj, old, &log));
    let manifest = Arc::new(manifest);
    let manual = ManualApproval::of(obj, &manifest, (ctx.clock)());
    let approver: &dyn Approver = manual.as_ref().map_or(&ApproveAll, |m| m as &dyn Approver);
    let guard = DeletionGuard::of(obj, &manifest, approver);
    let assumed = ctx.checks.not_due(obj, intervals, system_now(ctx));
    let observers = vec![journal.clone() as Arc<dyn Observer>];
    let stop_writing = CancellationToken::new();
    let inventory = match obj.spec.removal() {
        DeletionPolicy::Delete => Inventory::Keep,
        DeletionPolicy::Orphan => Inventory::Orphan,
    };
    let request = PassRequest {
        manifest,
        mode: Mode::Apply,
        inventory,
        log: log.clone(),
        observers,
        approver: &guard,
        assume_valid: &assumed,
        scope: pod_scope(obj),
    };
    let run = async {
        let passed = run_pass(ctx, obj, request, term).await;
        stop_writing.cancel();
        passed
    };
    // Progress is written while the pass runs, its last write done before the pass's own.
    let (passed, ()) = tokio::join!(run, journal.keep_writing(&stop_writing));
    let passed = passed?;
    for recovered in &passed.recovered {
        let note = recovered.describe();
        publish(ctx, obj, EventType::Warning, Reason::Interrupted.as_str(), EventAction::Reconcile.as_str(), &note)
            .await;
    }
    let guarded = guard.tripped();
    Ok((passed, RanWith { log, writer, manual, assumed, guarded }))
}

/// The controller's clock as a time.
pub fn system_now(ctx: &Context) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from((ctx.clock)()).unwrap_or(0))
}

/// The object's history as a deployment log for one pass.
pub fn memory_log(ctx: &Context, old: &ManifestStatus) -> Arc<MemoryLog> {
    Arc::new(MemoryLog::from_entries(history_entries(old), Some(ctx.settings.history_limit)))
}

/// What a pass is asked to do: the manifest, applied or deleted, recorded in `log` and told
/// to `observers`, approved by `approver`, with the resources in `assume_valid` not read.
pub struct PassRequest<'a> {
    pub manifest: Arc<ValidatedManifest>,
    pub mode: Mode,
    /// What the pass does with the Manifest's inventory.
    pub inventory: Inventory,
    pub log: Arc<MemoryLog>,
    pub observers: Vec<Arc<dyn Observer>>,
    pub approver: &'a dyn Approver,
    pub assume_valid: &'a AssumeValid,
    /// Where and as whom its image types' Pods run ([`pod_scope`] for a Manifest's own passes).
    pub scope: crate::pod::executor::PodScope,
}

/// The pass `request` asks for, stopped when `term` ends.
pub async fn run_pass(
    ctx: &Context,
    obj: &Manifest,
    request: PassRequest<'_>,
    term: &CancellationToken,
) -> Result<Passed, PassError> {
    let PassRequest { manifest, mode, inventory, log, observers, approver, assume_valid, scope } = request;
    let settings = &ctx.settings;
    let run_id = new_run_id();
    // The reconcile's span (controller::run) has a slot for it: every log line of the pass says it.
    tracing::Span::current().record("run_id", run_id.as_str());
    // Image types' Pods run in the Manifest's namespace, as its ServiceAccount, owned by it —
    // once nothing an earlier pass of it started still runs (the Pods its labels select): an
    // action never runs twice at once.
    let selector = scope.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let swept = ctx
        .executors
        .begin_pass(&scope.namespace, &selector)
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
    let executor = ctx.executors.for_pass(&scope);
    let options = RunOptions {
        parallelism: settings.parallelism,
        timeouts: settings.timeouts,
        run_id,
        verbose: false,
        assume_valid: assume_valid.clone(),
        replace: Vec::new(),
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
        inventory,
    };
    let passed = pass.run().await;
    if let Some(why) = ctx.executors.untold_refusal(&scope.namespace, scope.service_account.as_deref()) {
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
