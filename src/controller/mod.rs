//! The Kubernetes controller: Manifest custom resources reconciled continuously.
//!
//! [`run`] is the only place that builds the kube `Controller`: it checks that the CRD is
//! installed, watches Manifests through a `DeserializeGuard` (a malformed object becomes an
//! error on that object, never a stalled watch), and shuts down gracefully. Each object is
//! reconciled by [`reconcile::reconcile`], a pipeline whose middle is pure and whose status is a
//! pure function ([`status::next_status`]) of what ran.

pub mod error;
pub mod inputs;
pub mod reconcile;
pub mod status;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{EventType, Recorder as EventRecorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::crd::Manifest;
use crate::engine::executor::Executor;
pub use error::Error;
pub use reconcile::Next;

/// How the controller runs passes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Local program types (`./x`, `/x`) run code of the Manifest author's choosing inside the
    /// controller; refused unless set.
    pub allow_local_programs: bool,
    /// How many deployment-log entries each object keeps in `status.history`.
    pub history_limit: usize,
    /// Where plugs are materialized (one directory per object).
    pub plug_root: PathBuf,
    /// Programs run at once within one pass.
    pub parallelism: usize,
    /// Each program invocation is stopped after this long.
    pub timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allow_local_programs: false,
            history_limit: 50,
            plug_root: std::env::temp_dir().join("deployster-controller"),
            parallelism: 4,
            timeout: Duration::from_secs(15 * 60),
        }
    }
}

/// Everything a reconcile needs. `clock` and `jitter` are injectable so tests are exact.
pub struct Context {
    pub client: Client,
    pub executor: Arc<dyn Executor>,
    pub events: EventRecorder,
    pub settings: Settings,
    /// Milliseconds since the Unix epoch.
    pub clock: Box<dyn Fn() -> i64 + Send + Sync>,
    pub jitter: Box<dyn Fn(Duration) -> Duration + Send + Sync>,
    /// Cancelled to stop running actions (on shutdown, after a grace period).
    pub shutdown: CancellationToken,
}

impl Context {
    pub fn new(client: Client, executor: Arc<dyn Executor>, settings: Settings) -> Self {
        let reporter = Reporter { controller: reconcile::FIELD_MANAGER.into(), instance: hostname() };
        Self {
            events: EventRecorder::new(client.clone(), reporter),
            client,
            executor,
            settings,
            clock: Box::new(crate::history::now_ms),
            jitter: Box::new(reconcile::jitter),
            shutdown: CancellationToken::new(),
        }
    }
}

fn hostname() -> Option<String> {
    nix::unistd::gethostname().ok().map(|h| h.to_string_lossy().into_owned())
}

/// How `deployster controller` was asked to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Watch one namespace; all when `None`.
    pub namespace: Option<String>,
    /// Objects reconciled at once.
    pub concurrency: u16,
    /// After SIGTERM, how long running passes may go on before their actions are cancelled.
    pub shutdown_grace: Duration,
    pub settings: Settings,
}

/// Fails with a hint when the CRD is not installed (listing Manifests answers 404).
pub async fn check_crd(client: &Client) -> Result<(), Error> {
    match Api::<Manifest>::all(client.clone()).list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(Error::CrdMissing),
        Err(e) => Err(e.into()),
    }
}

/// A client for `config`. The TLS crypto provider is chosen here rather than left to rustls's
/// crate features: when a build enables both of its providers (another crate in the build may
/// ask for aws-lc-rs), rustls cannot choose and panics on the first connection.
pub fn connect(config: kube::Config) -> Result<Client, Error> {
    // Fails only when a provider is already installed, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(Client::try_from(config)?)
}

/// Drops what a reconcile never reads from an object kept in the watch cache: the managed
/// fields (server-side apply bookkeeping: a tenth of a small Manifest's memory, per
/// `cargo bench --bench controller`).
pub fn prune_for_cache(manifest: &mut Manifest) {
    manifest.managed_fields_mut().clear();
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(config: RunConfig, executor: Arc<dyn Executor>) -> Result<(), Error> {
    let client = connect(kube::Config::infer().await.map_err(kube::Error::InferConfig)?)?;
    check_crd(&client).await?;
    let api: Api<DeserializeGuard<Manifest>> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(Context::new(client, executor, config.settings.clone()));
    let shutdown = shutdown_signal(ctx.shutdown.clone(), config.shutdown_grace);
    tracing::info!(namespace = config.namespace.as_deref().unwrap_or("(all)"), "watching Manifests");
    // The watch cache holds every Manifest for the controller's life: keep it lean.
    let (reader, writer) = reflector::store();
    let manifests = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|guard: &mut DeserializeGuard<Manifest>| {
            if let Ok(manifest) = &mut guard.0 {
                prune_for_cache(manifest)
            }
        })
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(manifests, reader)
        .with_config(ControllerConfig::default().concurrency(config.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile_guarded, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(object = %object.name, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "reconcile failed"),
            }
        })
        .await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on the first SIGTERM/SIGINT (running passes finish); cancels running actions after
/// `grace`, or at once on a second signal.
fn shutdown_signal(
    cancel: CancellationToken,
    grace: Duration,
) -> impl std::future::Future<Output = ()> + Send + Sync + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            tracing::error!("cannot watch for signals");
            return;
        };
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!(?grace, "shutting down: running passes may finish");
        let _ = tx.send(());
        tokio::select! {
            _ = tokio::time::sleep(grace) => {}
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("cancelling the actions still running");
        cancel.cancel();
    });
    async move {
        let _ = rx.await;
    }
}

async fn reconcile_guarded(object: Arc<DeserializeGuard<Manifest>>, ctx: Arc<Context>) -> Result<Action, Error> {
    match &object.0 {
        Ok(manifest) => Ok(match reconcile::reconcile(manifest, &ctx).await? {
            Next::Requeue(after) => Action::requeue(after),
            Next::AwaitChange => Action::await_change(),
        }),
        Err(invalid) => {
            malformed(&ctx, invalid).await;
            Ok(Action::await_change())
        }
    }
}

/// A Manifest that does not deserialize: say so on the object (status and an event).
async fn malformed(ctx: &Context, invalid: &kube::core::error_boundary::InvalidObject) {
    let (Some(name), Some(namespace)) = (invalid.metadata.name.clone(), invalid.metadata.namespace.clone()) else {
        return;
    };
    let message = format!("the Manifest does not match its schema: {}", invalid.error);
    tracing::warn!(%namespace, %name, error = %invalid.error, "malformed Manifest");
    let now = crate::history::format_time((ctx.clock)());
    let condition = |type_: &str, status: &str| {
        json!({"type": type_, "status": status, "reason": "MalformedObject", "message": status::cut(&message),
               "lastTransitionTime": now, "observedGeneration": invalid.metadata.generation})
    };
    let patch = json!({"apiVersion": "deployster.io/v1alpha1", "kind": "Manifest", "status": {
        "observedGeneration": invalid.metadata.generation,
        "conditions": [condition("Ready", "False"), condition("Stalled", "True"), condition("Reconciling", "False")]}});
    let api: Api<Manifest> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams::apply(reconcile::FIELD_MANAGER).force();
    if let Err(e) = api.patch_status(&name, &params, &Patch::Apply(&patch)).await {
        tracing::warn!(error = %e, "could not record a malformed Manifest's status");
    }
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(Manifest::api_version(&()).into()),
        kind: Some(Manifest::kind(&()).into()),
        name: Some(name),
        namespace: Some(namespace),
        uid: invalid.metadata.uid.clone(),
        ..Default::default()
    };
    let event = kube::runtime::events::Event {
        type_: EventType::Warning,
        reason: "MalformedObject".into(),
        note: Some(status::cut(&message)),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.events.publish(&event, &reference).await {
        tracing::warn!(error = %e, "could not publish an event");
    }
}

fn error_policy(object: Arc<DeserializeGuard<Manifest>>, error: &Error, _: Arc<Context>) -> Action {
    let name = object.0.as_ref().map(|m| m.name_any()).unwrap_or_default();
    tracing::warn!(object = %name, reason = error.reason(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}
