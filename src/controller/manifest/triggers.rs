//! What starts a Manifest's reconcile besides its own changes: a change of a Secret or
//! ConfigMap it reads, a change someone made to an object it applied (seen by the watches of
//! what Manifests apply), and this replica gaining it. And the watch of Manifests itself, which
//! feeds a lean cache the Pipelines read too.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::api::ObjectMeta;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::Predicate;
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::ManifestContext;
use super::inputs::{self, Source};
use crate::controller::kinds::{GuardedStream, scope_name, scoped};
use crate::controller::readiness::Readiness;
use crate::controller::stream;
use crate::crd::Manifest;

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

/// One watch of Manifests in `scope`, feeding a lean cache and telling readiness when it synced.
pub(super) fn watch(
    client: &Client,
    scope: &Option<String>,
    readiness: Arc<Readiness>,
    index: usize,
) -> (ManifestCache, GuardedStream<Manifest>) {
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

/// Changes to the `K`s (Secrets, ConfigMaps) in `scope`: a metadata-only watch, so that their
/// data is never held here, and each version once (a watch that restarts sends every object
/// again).
pub(super) fn input_changes<K>(
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
/// a growing wait ([`crate::watches::fights::correction_delay`]).
pub(super) fn woken(
    ctx: &Arc<ManifestContext>,
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
pub(super) fn readers(
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
pub(super) fn owned_count(
    caches: &[ManifestCache],
    ownership: &crate::controller::replicas::ownership::Ownership,
) -> i64 {
    let owned = caches.iter().flat_map(|c| c.store.state()).filter(|object| {
        let meta = object.meta();
        ownership.owns(meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
    });
    owned.count() as i64
}

/// Manifests by namespace and Ready status: each namespace with a Manifest has all three
/// statuses, 0 or not, so that a rule over `ready="False"` has a series to read.
pub(super) fn ready_counts(caches: &[ManifestCache]) -> Vec<(String, &'static str, i64)> {
    use crate::controller::reasons::ConditionType;
    let mut counts: std::collections::BTreeMap<String, [i64; 3]> = std::collections::BTreeMap::new();
    for object in caches.iter().flat_map(|c| c.store.state()) {
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
