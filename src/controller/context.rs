//! What every kind's reconcile shares: the client, the executors, the settings, the clock, the
//! replica's ownership and its metrics. What only one kind keeps (a Manifest's checks and
//! watches, a Pipeline's logs, the previews' slots) is that kind's own context's.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder as EventRecorder, Reporter};
use tokio_util::sync::CancellationToken;

use super::config::{Settings, hostname};
use super::metrics::Metrics;
use super::replicas::ownership::Ownership;
use crate::executors::PassExecutors;

/// The field manager of what the controller writes (status, events).
pub const FIELD_MANAGER: &str = "deployster-controller";

/// Everything every reconcile needs. `clock` and `jitter` are injectable so tests are exact.
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
        }
    }
}

/// Up to a tenth earlier, so that thousands of objects created together do not pulse together
/// — never later, so that no check comes after its time (a pass that early still checks what
/// is due: [`EARLY`](crate::engine::schedule::EARLY)).
pub fn jitter(d: Duration) -> Duration {
    d.mul_f64(1.0 - fastrand::f64() / f64::from(crate::engine::schedule::EARLY))
}

/// What the controller's unit tests start from: an in-memory API holding `stored` (with its
/// kind's status subresource), and a context on it whose clock stands still.
#[cfg(test)]
pub(crate) async fn on_fake_api<K>(stored: K) -> (Client, Context)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    K: Clone + Default + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let client = kube_fake_client::ClientBuilder::new()
        .with_resource::<K>()
        .with_status_subresource::<K>()
        .with_object(stored)
        .build()
        .await
        .expect("the in-memory API starts");
    let executor: Arc<dyn crate::engine::executor::Executor> =
        Arc::new(crate::engine::executor::fake::FakeExecutor::new(|_| Default::default()));
    let mut ctx = Context::new(client.clone(), executor, Settings::default());
    ctx.clock = Box::new(|| 1_700_000_000_000);
    (client, ctx)
}
