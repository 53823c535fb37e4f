//! What every kind's `controllers()` uses alike: the scopes it watches, an `Api` of a scope,
//! whether its CRD is installed, a watch through `DeserializeGuard` that feeds its store, and
//! how its controller's results are logged. Each kind's folder (`manifest`, `pipelines`,
//! `previews`) starts its own controllers with these; `controller::run` joins them.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::api::ListParams;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use super::stream;

/// The controllers of one kind, one per scope, to be run together.
pub type Controllers = Vec<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// What every kind's controllers start from: the client, the scopes watched, the shared
/// context, and the signal to stop taking work.
pub struct Start {
    pub client: Client,
    pub scopes: Vec<Option<String>>,
    pub ctx: Arc<Context>,
    /// Cancelled on the first SIGTERM: the controllers stop starting reconciles.
    pub stopping: CancellationToken,
}

/// What one watch covers: a namespace, or all of them.
pub fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    if namespaces.is_empty() { vec![None] } else { namespaces.iter().cloned().map(Some).collect() }
}

pub fn scope_name(scope: &Option<String>) -> String {
    scope.as_ref().map_or_else(|| "all namespaces".into(), |ns| format!("namespace `{ns}`"))
}

/// An `Api` of the `K`s in `scope`: one namespace, or all of them.
pub fn scoped<K>(client: &Client, scope: &Option<String>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// How a kind's CRD is named, for [`listable`]: `what` is said when it cannot be watched, with
/// how to install it (`deployster crd <kind>`).
pub struct Crd {
    pub what: &'static str,
    pub name: &'static str,
    pub kind: &'static str,
}

/// Whether the objects of `api` can be listed in `scope`: `None` when their CRD is not
/// installed (said once, with how to install it), `Some(false)` when they cannot be listed
/// there (said).
pub async fn listable<K>(api: &Api<K>, scope: &Option<String>, crd: &Crd) -> Option<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Crd { what, name, kind } = crd;
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Some(true),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(
                "{what}: their CRD ({name}) is not installed; install it: deployster crd {kind} | kubectl apply -f -"
            );
            None
        }
        Err(e) => {
            tracing::warn!(scope = %scope_name(scope), error = %e, "{what} here: they cannot be listed");
            Some(false)
        }
    }
}

/// A stream of the `K`s a watch of `scope` applied.
pub type GuardedStream<K> = Pin<Box<dyn Stream<Item = Result<DeserializeGuard<K>, watcher::Error>> + Send>>;

/// A watch of the `K`s in `scope` through `DeserializeGuard` (one that does not deserialize
/// becomes an error on that object, never a stalled watch), reflected into the store it
/// returns, each object passed on once the store holds it.
pub fn guarded<K>(client: &Client, scope: &Option<String>) -> (Store<DeserializeGuard<K>>, GuardedStream<K>)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug + Send + Sync,
    K: 'static,
{
    let api: Api<DeserializeGuard<K>> = scoped(client, scope);
    let (reader, writer) = reflector::store();
    let scope = scope_name(scope);
    let stream = watcher(api, watcher::Config::default()).default_backoff().reflect(writer).inspect(move |event| {
        if let Err(e) = event {
            tracing::warn!(%scope, kind = K::kind(&()).as_ref(), error = %e, "a watch failed; retrying with backoff");
        }
    });
    (reader, Box::pin(stream::applied_once_stored(stream)))
}

/// Logs one result of a kind's controller (what `for_each` is given): a reconcile that failed
/// (its error policy said more); a watch's own error is said by the watch.
pub fn said<K, E>(
    kind: &'static str,
    result: Result<(ObjectRef<K>, Action), ControllerError<E, watcher::Error>>,
) -> futures::future::Ready<()>
where
    K: Resource,
    E: std::error::Error,
{
    match result {
        Ok((object, _)) => tracing::debug!(kind, object = %object.name, "reconciled"),
        Err(ControllerError::QueueError(_)) => {}
        Err(e) => tracing::warn!(kind, error = %e, "a reconcile failed"),
    }
    futures::future::ready(())
}
