//! What every reconcile shares: the client, the executors, the settings, the caches.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::DeserializeGuard;
use kube::runtime::events::{Recorder as EventRecorder, Reporter};
use kube::runtime::reflector::Store;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::checks;
use super::config::{Settings, hostname};
use super::metrics::Metrics;
use super::pipelines::log::Pipelines;
use super::replicas::ownership::Ownership;
use super::watches::Watches;
use crate::crd::Manifest;
use crate::executors::PassExecutors;

/// The field manager of what the controller writes (status, events).
pub const FIELD_MANAGER: &str = "deployster-controller";

/// Everything a reconcile needs. `clock` and `jitter` are injectable so tests are exact.
pub struct Context {
    pub client: Client,
    /// What makes each pass's executor, from its scope.
    pub executors: PassExecutors,
    pub events: EventRecorder,
    pub settings: Settings,
    /// Milliseconds since the Unix epoch.
    pub clock: Box<dyn Fn() -> i64 + Send + Sync>,
    pub jitter: Box<dyn Fn(Duration) -> Duration + Send + Sync>,
    /// Cancelled to stop running actions (on shutdown, after a grace period).
    pub shutdown: CancellationToken,
    /// What this replica may reconcile; passes run under its term for the object.
    pub ownership: Arc<Ownership>,
    pub metrics: Arc<Metrics>,
    /// Reconciles run at once (`--concurrency`); those waiting are the work queue's depth.
    pub workers: Semaphore,
    /// When each object's resources are next read (adaptive drift checks).
    pub checks: checks::Checks,
    /// Pipelines' logs and step settings.
    pub pipelines: Pipelines,
    /// The watch caches of Manifests, by scope (a namespace, or all): where a Pipeline finds the
    /// names of its targets' Manifests. None covering a namespace, or not synced yet: the API
    /// is asked.
    pub manifests: Vec<ManifestCache>,
    /// Watches of the objects Manifests applied: a change starts a pass.
    pub watches: Watches,
    /// ManifestPreviews planning now, by namespace.
    pub previews: super::previews::slots::Slots,
}

/// One watch cache of Manifests, and whether it has synced.
///
/// Synced is told by a flag of its own, read without waiting: `Store::wait_until_ready` keeps
/// one waiter only (kube's `DelayedInit`), and the `Controller` reading the same store waits on
/// it too, so a reconcile awaiting it could wait forever (a Pipeline reconcile hung so in CI).
#[derive(Clone)]
pub struct ManifestCache {
    /// A namespace, or None for all of them.
    pub scope: Option<String>,
    pub store: Store<DeserializeGuard<Manifest>>,
    /// True once the watch's first listing is in the store.
    pub synced: tokio::sync::watch::Receiver<bool>,
    /// The namespace of each Manifest that changed (its status too), once the store has it:
    /// what wakes the Pipelines whose steps wait for it.
    pub changes: tokio::sync::broadcast::Sender<String>,
}

impl Context {
    /// `executors`: an `Arc<dyn Executor>` for the same executor in every pass.
    pub fn new(client: Client, executors: impl Into<PassExecutors>, settings: Settings) -> Self {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: hostname() };
        let shutdown = CancellationToken::new();
        Self {
            events: EventRecorder::new(client.clone(), reporter),
            client,
            executors: executors.into(),
            settings,
            clock: Box::new(crate::history::now_ms),
            jitter: Box::new(jitter),
            ownership: Arc::new(Ownership::always(&shutdown)),
            shutdown,
            metrics: Arc::new(Metrics::new()),
            workers: Semaphore::new(Semaphore::MAX_PERMITS),
            checks: Default::default(),
            pipelines: Pipelines::default(),
            manifests: Vec::new(),
            watches: Watches::disabled(),
            previews: Default::default(),
        }
    }
}

/// Up to a tenth earlier, so that thousands of objects created together do not pulse together
/// — never later, so that no check comes after its time (a pass that early still checks what
/// is due: [`EARLY`](crate::engine::schedule::EARLY)).
pub fn jitter(d: Duration) -> Duration {
    d.mul_f64(1.0 - fastrand::f64() / f64::from(crate::engine::schedule::EARLY))
}
