//! The Kubernetes controller: Manifest custom resources reconciled continuously.
//!
//! [`run`] is the only place that builds the kube `Controller`: it checks that the CRD is
//! installed, watches Manifests and Pipelines through a `DeserializeGuard` (a malformed object becomes an
//! error on that object, never a stalled watch), and shuts down gracefully. Each object is
//! reconciled by [`manifest::reconcile`], named steps whose middle is pure and whose status is a
//! pure function ([`status::next_status`]) of what ran.

pub mod approval;
pub mod checks;
pub mod config;
pub mod context;
pub mod error;
pub mod inputs;
mod malformed;
pub mod manifest;
pub mod metrics;
pub mod outputs;
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
pub mod watches;

use reasons::ConditionType;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use inputs::Source;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, ObjectMeta};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::Predicate;
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::crd::Manifest;
use crate::executors::{Connection, ExecutorPlan};
use crate::stop::{Cancel, Stop};
pub use config::{LeaderElection, OwnPod, RunConfig, Settings};
pub use context::{Context, ManifestCache};
pub use error::{PipelineReconcileError, StartError};
pub use manifest::Next;
use metrics::{ApiMeteringLayer, MeteredExecutor, Metrics};
use readiness::Readiness;
use replicas::ownership::{self, Ownership};

/// What one watch covers: a namespace, or all of them.
fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    if namespaces.is_empty() { vec![None] } else { namespaces.iter().cloned().map(Some).collect() }
}

fn scope_name(scope: &Option<String>) -> String {
    scope.as_ref().map_or_else(|| "all namespaces".into(), |ns| format!("namespace `{ns}`"))
}

/// Lists Manifests once in every scope: fails with a hint when the CRD is not installed
/// (404) or the controller's RBAC does not cover a namespace (403).
pub async fn check_access(client: &Client, namespaces: &[String]) -> Result<(), StartError> {
    for scope in scopes(namespaces) {
        let api: Api<Manifest> = scoped(client, &scope);
        match api.list(&ListParams::default().limit(1)).await {
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

/// Keeps an object in the watch cache lean — the cache holds every Manifest for the
/// controller's life, and each reconcile reads the object afresh (one GET) — by dropping the
/// managed fields (server-side apply bookkeeping), the status history and each resource's
/// state: most of a Manifest's memory (`cargo bench --bench controller`). What is kept: the spec,
/// the conditions (the readiness metrics count them) and each resource's status line.
pub fn prune_for_cache(manifest: &mut Manifest) {
    manifest.managed_fields_mut().clear();
    if let Some(status) = &mut manifest.status {
        status.history = Vec::new();
        for resource in &mut status.resources {
            resource.state = None;
        }
    }
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(mut config: RunConfig, plan: ExecutorPlan) -> Result<(), StartError> {
    // First what can fail at once: the admin port, the API server, access, the lease.
    let listener = tokio::net::TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|source| StartError::MetricsAddr { addr: config.metrics_addr, source })?;
    let metrics = Arc::new(Metrics::new());
    let scopes = scopes(&config.namespaces);
    let readiness = Arc::new(Readiness::new(scopes.len()));
    let kube_config = crate::client::Kubeconfig::default().load().await?;
    let url = kube_config.cluster_url.to_string();
    let default_namespace = kube_config.default_namespace.clone();
    let layer = ApiMeteringLayer { metrics: metrics.clone(), readiness: readiness.clone() };
    // builtin/kubernetes acts as each Manifest's ServiceAccount: its clients are made from
    // this configuration, with no metering (their rights are the ServiceAccount's).
    let acting_config = kube_config.clone();
    // Watches of what Manifests apply read as each Manifest's ServiceAccount too.
    let watches = watches::Watches::new(kube_config.clone(), &metrics);
    let client = connect_metered(kube_config, layer)?;
    check_access(&client, &config.namespaces).await.map_err(|e| e.unreachable_at(&url))?;
    // The first SIGINT/SIGTERM/SIGHUP stops starting passes; running ones may finish for the
    // grace period (or until a second signal), then their actions are cancelled.
    let stop = Stop::on_signals(Cancel::After(config.shutdown_grace)).map_err(StartError::Signals)?;
    let shutdown = stop.now.clone();
    let (ownership, departure) =
        ownership::share_work(&client, &config, default_namespace, &metrics, &shutdown).await?;

    if plan.runs_pods() {
        // A Manifest's plugs are then its Pods' volumes.
        config.settings.plugs = inputs::Plugs::Volumes;
    }
    let connection = Connection { config: acting_config, client: client.clone(), runners: metrics.runners.clone() };
    let metered = metrics.clone();
    let executors = plan
        .assemble(Some(connection))?
        .under(Arc::new(move |inner| Arc::new(MeteredExecutor { inner, metrics: metered.clone() })));
    let mut ctx = Context::new(client.clone(), executors, config.settings.clone());
    ctx.shutdown = shutdown.clone();
    ctx.ownership = ownership;
    ctx.metrics = metrics.clone();
    ctx.workers = Semaphore::new(usize::from(config.concurrency.max(1)));
    ctx.watches = watches;
    let watches: Vec<_> =
        scopes.iter().enumerate().map(|(i, scope)| watch(&client, scope, readiness.clone(), i)).collect();
    let stores: Vec<Store<DeserializeGuard<Manifest>>> = watches.iter().map(|(cache, _)| cache.store.clone()).collect();
    ctx.manifests = watches.iter().map(|(cache, _)| cache.clone()).collect();
    let ctx = Arc::new(ctx);
    let stopping = stop.requested.clone();
    tokio::spawn(log_stop(stop));

    let owner = ctx.ownership.clone();
    let refresh = Arc::new(move |m: &Metrics| {
        m.set_manifests(&ready_counts(&stores));
        m.set_manifests_owned(owned_count(&stores, &owner));
    });
    let admin = tokio::spawn(server::serve(listener, metrics, readiness, refresh));
    tracing::info!(namespaces = ?config.namespaces, addr = %config.metrics_addr, "watching Manifests");
    let controllers = watches.into_iter().zip(&scopes).map(|((ManifestCache { store, .. }, manifests), scope)| {
        let secrets = input_changes::<Secret>(&client, scope);
        let config_maps = input_changes::<ConfigMap>(&client, scope);
        let (readers_of_secret, readers_of_config_map, gained_store) = (store.clone(), store.clone(), store.clone());
        Controller::for_stream(manifests, store)
            // Concurrency is bounded by `ctx.workers`, so that waiting work can be counted.
            .with_config(ControllerConfig::default())
            .trigger_backoff(stream::NoPause)
            .watches_stream(secrets, move |s| readers(&readers_of_secret, Source::Secret, &s.metadata))
            .watches_stream(config_maps, move |c| readers(&readers_of_config_map, Source::ConfigMap, &c.metadata))
            .reconcile_on(ownership::gained_objects(ctx.ownership.clone(), gained_store))
            .reconcile_on(woken(&ctx, scope))
            .graceful_shutdown_on(stopping.clone().cancelled_owned())
            .run(manifest::reconcile_guarded, manifest::error_policy, ctx.clone())
            .for_each(|result| async move {
                match result {
                    Ok((object, _)) => tracing::debug!(object = %object.name, "reconciled"),
                    // A watch's error: the watch said so itself, and retries.
                    Err(ControllerError::QueueError(_)) => {}
                    Err(e) => tracing::warn!(error = %e, "reconcile failed"),
                }
            })
    });
    let mut others = pipelines_of(&client, &scopes, &ctx, &stopping).await;
    others.extend(previews::controllers(&client, &scopes, &ctx, &stopping).await);
    futures::future::join(futures::future::join_all(controllers), futures::future::join_all(others)).await;
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

/// The controllers of one kind of object, one per scope, to be run together.
pub(crate) type Controllers = Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;

/// Whether the objects of `api` can be listed in `scope`: `None` when their CRD (`crd`) is not
/// installed — `what` is then said once, with how to install it (`deployster crd <kind>`) —
/// and `Some(false)` when they cannot be listed there (said).
pub(crate) async fn listable<K>(api: &Api<K>, scope: &Option<String>, what: &str, crd: &str, kind: &str) -> Option<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Some(true),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(
                "{what}: their CRD ({crd}) is not installed; install it: deployster crd {kind} | kubectl apply -f -"
            );
            None
        }
        Err(e) => {
            tracing::warn!(scope = %scope_name(scope), error = %e, "{what} here: they cannot be listed");
            Some(false)
        }
    }
}

/// A controller of Pipelines for each scope, when their CRD is installed (without it the
/// controller runs Manifests only, and says so).
async fn pipelines_of(
    client: &Client,
    scopes: &[Option<String>],
    ctx: &Arc<Context>,
    stopping: &CancellationToken,
) -> Controllers {
    use crate::crd::pipeline::Pipeline;
    let mut controllers: Controllers = Vec::new();
    for scope in scopes {
        let api: Api<DeserializeGuard<Pipeline>> = scoped(client, scope);
        match listable(&api, scope, "Pipelines are not driven", "pipelines.deployster.io", "pipeline").await {
            None => return Vec::new(),
            Some(false) => continue,
            Some(true) => {}
        }
        let (reader, writer) = reflector::store();
        let scope_named = scope_name(scope);
        let stream = watcher(api, watcher::Config::default()).default_backoff().reflect(writer).inspect(move |event| {
            if let Err(e) = event {
                tracing::warn!(scope = %scope_named, error = %e, "the watch of Pipelines failed; retrying with backoff");
            }
        });
        let stream = stream::applied_once_stored(stream)
            // Its own status writes start nothing; a spec edit or an approval does.
            .predicate_filter(predicates::generation.combine(predicates::annotations), Default::default());
        let gained = ownership::gained_objects(ctx.ownership.clone(), reader.clone());
        let cache = ctx.manifests.iter().find(|cache| cache.scope == *scope);
        let woken = cache.map(|cache| pipelines::woken_by(&cache.changes, reader.clone()));
        let controller = Controller::for_stream(stream, reader)
            .trigger_backoff(stream::NoPause)
            .reconcile_on(gained)
            .reconcile_on(futures::stream::iter(woken).flatten())
            .graceful_shutdown_on(stopping.clone().cancelled_owned())
            .run(pipelines::malformed::reconcile_guarded, pipeline_error_policy, ctx.clone())
            .for_each(|result| async move {
                match result {
                    Ok((object, _)) => tracing::debug!(pipeline = %object.name, "reconciled"),
                    Err(ControllerError::QueueError(_)) => {}
                    Err(e) => tracing::warn!(error = %e, "a Pipeline's reconcile failed"),
                }
            });
        controllers.push(Box::pin(controller));
    }
    controllers
}

fn pipeline_error_policy(
    object: Arc<DeserializeGuard<crate::crd::pipeline::Pipeline>>,
    error: &PipelineReconcileError,
    ctx: Arc<Context>,
) -> Action {
    pipelines::counted_error(&ctx);
    tracing::warn!(pipeline = %object.name_any(), reason = error.reason(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

type ManifestStream = std::pin::Pin<Box<dyn Stream<Item = Result<DeserializeGuard<Manifest>, watcher::Error>> + Send>>;

/// One watch of Manifests in `scope`, feeding a lean cache and telling readiness when it synced.
fn watch(
    client: &Client,
    scope: &Option<String>,
    readiness: Arc<Readiness>,
    index: usize,
) -> (ManifestCache, ManifestStream) {
    let api: Api<DeserializeGuard<Manifest>> = scoped(client, scope);
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    let (changes_tx, _) = tokio::sync::broadcast::channel(1024);
    let changes = changes_tx.clone();
    let cache_scope = scope.clone();
    let scope = scope_name(scope);
    // The watch cache holds every Manifest for the controller's life: keep it lean.
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(move |event| match event {
            Ok(watcher::Event::InitDone) => readiness.synced(index),
            Err(e) => tracing::warn!(%scope, error = %e, "the watch of Manifests failed; retrying with backoff"),
            Ok(_) => {}
        })
        .modify(|guard: &mut DeserializeGuard<Manifest>| {
            if let Ok(manifest) = &mut guard.0 {
                prune_for_cache(manifest)
            }
        })
        .reflect(writer)
        // After `reflect`: the listing, or the change, is in the store by now.
        .inspect(move |event| match event {
            Ok(watcher::Event::InitDone) => {
                synced_tx.send_replace(true);
            }
            Ok(watcher::Event::Apply(manifest)) => {
                // None listening (no Pipelines here) is fine.
                let _ = changes_tx.send(manifest.meta().namespace.clone().unwrap_or_default());
            }
            _ => {}
        });
    let stream = stream::applied_once_stored(stream)
        // What the controller writes itself (the status, progress, the finalizer) starts no
        // pass: a failing Manifest's pass would otherwise start the next at once, and so on;
        // a finalizer taken off is put back by the next pass. A spec edit (generation), an
        // approval (annotation) and a deletion do.
        .predicate_filter(
            predicates::generation.combine(predicates::annotations).combine(being_deleted),
            Default::default(),
        );
    (ManifestCache { scope: cache_scope, store: reader, synced, changes }, Box::pin(stream))
}

/// A predicate that changes when the object's deletion is asked for.
fn being_deleted(obj: &DeserializeGuard<Manifest>) -> Option<u64> {
    Some(u64::from(obj.meta().deletion_timestamp.is_some()))
}

/// An `Api` of the `K`s in `scope`: one namespace, or all of them.
pub(crate) fn scoped<K>(client: &Client, scope: &Option<String>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Changes to the `K`s (Secrets, ConfigMaps) in `scope`: a metadata-only watch, so that their
/// data is never held here, and each version once (a watch that restarts sends every object
/// again).
fn input_changes<K>(
    client: &Client,
    scope: &Option<String>,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    // An `Api` of `PartialObjectMeta` asks for metadata only.
    let api: Api<PartialObjectMeta<K>> = scoped(client, scope);
    let scope = scope_name(scope);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(move |event| {
            if let Err(e) = event {
                tracing::warn!(%scope, kind = K::kind(&()).as_ref(), error = %e, "the watch of inputs failed; retrying with backoff");
            }
        })
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default())
}

/// The Manifests in `scope` whose objects a watch saw changed, each with the changed resource
/// marked due for a check: at once, or — a resource another writer keeps changing back — after
/// a growing wait ([`checks::correction_delay`]).
fn woken(
    ctx: &Arc<Context>,
    scope: &Option<String>,
) -> impl Stream<Item = ObjectRef<DeserializeGuard<Manifest>>> + Send + use<> {
    let (ctx, scope) = (ctx.clone(), scope.clone());
    let (later, waited) = tokio::sync::mpsc::unbounded_channel();
    let now = ctx.watches.changes().filter_map(move |change| {
        let (namespace, name) = change.manifest().unwrap_or_default();
        let in_scope = !name.is_empty() && scope.as_ref().is_none_or(|ns| ns == namespace);
        let mut at_once = None;
        if in_scope {
            let wait = ctx.checks.mark_due(&change.uid, &change.resource, change.seen);
            let manifest = ObjectRef::new(name).within(namespace);
            tracing::debug!(namespace, manifest = name, resource = %change.resource, ?wait, "an object of it changed: its pass reads it");
            if wait.is_zero() {
                at_once = Some(manifest);
            } else {
                let later = later.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = later.send(manifest);
                });
            }
        }
        futures::future::ready(at_once)
    });
    let waited = futures::stream::unfold(waited, |mut waited| async move { Some((waited.recv().await?, waited)) });
    futures::stream::select(now, waited)
}

/// The Manifests in `store` that read the `source` object of `meta` (its plugs, `varsFrom`).
fn readers(
    store: &Store<DeserializeGuard<Manifest>>,
    source: Source,
    meta: &ObjectMeta,
) -> Vec<ObjectRef<DeserializeGuard<Manifest>>> {
    let Some(name) = meta.name.as_deref() else { return Vec::new() };
    store
        .state()
        .iter()
        .filter(|guard| guard.0.as_ref().is_ok_and(|m| inputs::reads(m, source, meta.namespace.as_deref(), name)))
        .map(|guard| ObjectRef::from_obj(&**guard))
        .collect()
}

/// Manifests in the caches this replica reconciles now.
fn owned_count(stores: &[Store<DeserializeGuard<Manifest>>], ownership: &Ownership) -> i64 {
    let owned = stores.iter().flat_map(Store::state).filter(|object| {
        let meta = object.meta();
        ownership.owns(meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
    });
    owned.count() as i64
}

/// Manifests in the caches by the status of their Ready condition.
/// Manifests by namespace and Ready status: each namespace with a Manifest has all three
/// statuses, 0 or not, so that a rule over `ready="False"` has a series to read.
fn ready_counts(stores: &[Store<DeserializeGuard<Manifest>>]) -> Vec<(String, &'static str, i64)> {
    let mut counts: std::collections::BTreeMap<String, [i64; 3]> = std::collections::BTreeMap::new();
    for object in stores.iter().flat_map(Store::state) {
        let ready = object.0.as_ref().ok().and_then(|m| m.status.as_ref()).and_then(|s| {
            s.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str()).map(|c| c.status.as_str())
        });
        let slot = match ready {
            Some("True") => 0,
            Some("False") => 1,
            _ => 2,
        };
        counts.entry(object.namespace().unwrap_or_default()).or_default()[slot] += 1;
    }
    counts
        .into_iter()
        .flat_map(|(namespace, [t, f, u])| {
            [("True", t), ("False", f), ("Unknown", u)].map(|(ready, n)| (namespace.clone(), ready, n))
        })
        .collect()
}

async fn log_stop(stop: Stop) {
    stop.requested.cancelled().await;
    tracing::info!(signal = stop.signal().unwrap_or_default(), "shutting down: running passes may finish");
    stop.now.cancelled().await;
    tracing::warn!("cancelling the actions still running");
}
