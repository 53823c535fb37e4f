//! The Kubernetes controller: Manifests, Pipelines and ManifestPreviews reconciled continuously.
//!
//! [`run`] is the one place things start: the start-up checks (the admin port, the API server,
//! the CRD and the controller's rights, the lease), the shared [`Context`], the admin server,
//! and each kind's controllers joined. Every kind has the same shape — its folder's `mod.rs`
//! holds `controllers()` (its watches through `DeserializeGuard`, its triggers), `reconcile()`
//! of named steps and `error_policy()` — and keeps its own state; what they share is in
//! [`kinds`] and [`Context`].

pub mod approval;
pub mod config;
pub mod context;
pub mod error;
pub mod kinds;
pub mod manifest;
pub mod metrics;
pub mod pipelines;
pub mod previews;
pub mod rbac;
pub mod readiness;
pub mod reasons;
pub mod replicas;
pub mod report;
pub mod server;
pub mod status;
mod stream;

use std::sync::Arc;

use kube::api::ListParams;
use kube::{Api, Client};

use crate::crd::Manifest;
use crate::executors::{Connection, ExecutorPlan};
use crate::stop::{Cancel, Stop};
pub use config::{LeaderElection, OwnPod, RunConfig, Settings};
pub use context::Context;
pub use error::StartError;
use kinds::{Start, scope_name, scoped};
use metrics::{ApiMeteringLayer, MeteredExecutor, Metrics};
use readiness::Readiness;
use replicas::ownership;

/// Lists Manifests once in every scope: fails with a hint when the CRD is not installed
/// (404) or the controller's RBAC does not cover a namespace (403). Their metadata only: a
/// Manifest that does not deserialize is reported on itself once the watch reads it, never a
/// reason not to start.
pub async fn check_access(client: &Client, namespaces: &[String]) -> Result<(), StartError> {
    for scope in kinds::scopes(namespaces) {
        let api: Api<Manifest> = scoped(client, &scope);
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(StartError::CrdMissing),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Err(StartError::Forbidden { scope: scope_name(&scope), message: status.message.clone() });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Fails with a hint when the CRD is not installed (listing Manifests answers 404).
pub async fn check_crd(client: &Client) -> Result<(), StartError> {
    check_access(client, &[]).await
}

/// A client whose every request is counted and tells readiness whether the API answers.
pub fn connect_metered(config: kube::Config, layer: ApiMeteringLayer) -> Result<Client, StartError> {
    crate::client::install_crypto();
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(mut config: RunConfig, plan: ExecutorPlan) -> Result<(), StartError> {
    // First what can fail at once: the admin port, the API server, access, the lease.
    let listener = tokio::net::TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|source| StartError::MetricsAddr { addr: config.metrics_addr, source })?;
    let metrics = Arc::new(Metrics::new());
    let scopes = kinds::scopes(&config.namespaces);
    let readiness = Arc::new(Readiness::new(scopes.len()));
    let kube_config = crate::client::Kubeconfig::default().load().await?;
    let url = kube_config.cluster_url.to_string();
    let default_namespace = kube_config.default_namespace.clone();
    let layer = ApiMeteringLayer { metrics: metrics.clone(), readiness: readiness.clone() };
    // builtin/kubernetes acts as each Manifest's ServiceAccount, and so do the watches of what
    // Manifests apply: their clients are made from this configuration, with no metering.
    let acting_config = kube_config.clone();
    let client = connect_metered(kube_config, layer)?;
    check_access(&client, &config.namespaces).await.map_err(|e| e.unreachable_at(&url))?;
    // The first SIGINT/SIGTERM/SIGHUP stops starting passes; running ones may finish for the
    // grace period (or until a second signal), then their actions are cancelled.
    let stop = Stop::on_signals(Cancel::After(config.shutdown_grace)).map_err(StartError::Signals)?;
    let (ownership, departure) =
        ownership::share_work(&client, &config, default_namespace, &metrics, &stop.now).await?;

    if plan.runs_pods() {
        // A Manifest's plugs are then its Pods' volumes.
        config.settings.plugs = config::Plugs::Volumes;
    }
    let connection =
        Connection { config: acting_config.clone(), client: client.clone(), runners: metrics.runners.clone() };
    let metered = metrics.clone();
    let executors = plan
        .assemble(Some(connection))?
        .under(Arc::new(move |inner| Arc::new(MeteredExecutor { inner, metrics: metered.clone() })));
    let mut ctx = Context::new(client.clone(), executors, config.settings.clone());
    ctx.shutdown = stop.now.clone();
    ctx.ownership = ownership;
    ctx.metrics = metrics.clone();
    let ctx = Arc::new(ctx);
    let start = Start { client, scopes, ctx: ctx.clone(), stopping: stop.requested.clone() };
    tokio::spawn(log_stop(stop));

    let own = manifest::Own {
        watches: crate::watches::Watches::new(acting_config, metrics.watches.clone()),
        concurrency: config.concurrency,
        readiness: readiness.clone(),
    };
    let (manifests, caches) = manifest::controllers(&start, own);
    let refresh = manifest::counts(&caches, ctx.ownership.clone());
    let admin = tokio::spawn(server::serve(listener, metrics, readiness, refresh));
    tracing::info!(namespaces = ?config.namespaces, addr = %config.metrics_addr, "watching Manifests");
    let pipelines = pipelines::controllers(&start, &caches).await;
    let previews = previews::controllers(&start).await;
    futures::future::join_all(manifests.into_iter().chain(pipelines).chain(previews)).await;

    // A controller that stops (an upgrade, `helm uninstall`) leaves no runner behind; the next
    // leader starts its own as they are needed.
    // Under sharding, not those of Manifests handed over to another replica: it uses them.
    let ownership = ctx.ownership.clone();
    let reaped = ctx.executors.shut_down(&move |namespace, manifest| ownership.elsewhere(namespace, manifest)).await;
    if let Some(reaped) = reaped {
        tracing::info!(reaped, "deleted the warm runners this replica used");
    }
    departure.leave().await;
    admin.abort();
    tracing::info!("stopped");
    Ok(())
}

async fn log_stop(stop: Stop) {
    stop.requested.cancelled().await;
    tracing::info!(signal = stop.signal().unwrap_or_default(), "shutting down: running passes may finish");
    stop.now.cancelled().await;
    tracing::warn!("cancelling the actions still running");
}
