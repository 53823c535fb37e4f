//! Pipelines in a cluster: each `Pipeline` object is driven as `deployster pipeline run` drives
//! a file — the same compiled pipeline, progress computed from its log alone, the same driver
//! — with three differences. Its log is a set of ConfigMaps it owns ([`log`]); a step sets the
//! vars of a Manifest of its namespace and waits for it to be Ready ([`steps`]); and what the
//! CLI takes as arguments comes from the object: the revision is `spec.revision` over
//! `spec.vars` (a new one is registered when it changes), approvals are lines of the
//! `deployster.io/approve` annotation. Its status is a bounded view of what the log says.
//!
//! One reconcile is named steps: [`compile`] (the spec against the namespace's Manifests),
//! [`record`] (the log read once; the revision, artifacts and approvals recorded),
//! [`advance`] (one step forward, the log written), [`observe`] (pure: the status, the events,
//! when to look again) and [`report`] (the events, then the status through the fenced writer).
//! What only Pipelines keep — their logs, the Manifest caches they read — is
//! [`PipelineContext`]'s.

pub mod advance;
pub mod compile;
pub mod log;
pub mod observe;
pub mod record;
pub mod report;
pub mod steps;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::Predicate;
use kube::runtime::{Controller, WatchStreamExt, predicates};
use kube::{Api, Resource, ResourceExt};

use super::context::Context;
use super::error::StatusWriteError;
use super::kinds::{Controllers, Crd, Start, guarded, listable, said, scoped};
use super::manifest::ManifestCache;
use super::replicas::ownership;
use super::stream::NoPause;
use crate::crd::pipeline::Pipeline;
use advance::AdvanceError;
use compile::Uncompiled;
use log::Logs;
use record::RecordError;

/// What a Pipeline's reconcile has: the shared context, and what only Pipelines keep.
pub struct PipelineContext {
    shared: Arc<Context>,
    /// Their logs, as this replica last read or wrote them.
    pub logs: Logs,
    /// A live revision's Pipeline is looked at again every five of these (besides the wakes
    /// its Manifests' changes give): a bake's time, a step's timeout.
    pub poll: Duration,
    /// The watch caches of Manifests, by scope (a namespace, or all): where a Pipeline finds
    /// its targets' Manifests. None covering a namespace, or not synced yet: the API is asked.
    pub manifests: Vec<ManifestCache>,
}

impl PipelineContext {
    /// With no Manifest cache (the API is asked) and the default poll.
    pub fn new(shared: impl Into<Arc<Context>>) -> Self {
        Self { shared: shared.into(), logs: Logs::default(), poll: Duration::from_secs(2), manifests: Vec::new() }
    }

    /// The cache of Manifests that covers `namespace`, if one does.
    pub fn cache_of(&self, namespace: &str) -> Option<&ManifestCache> {
        self.manifests.iter().find(|cache| cache.scope.as_deref().is_none_or(|s| s == namespace))
    }
}

impl Deref for PipelineContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

const PIPELINES: Crd = Crd { what: "Pipelines are not driven", name: "pipelines.deployster.io", kind: "pipeline" };

/// A controller of Pipelines for each scope, when their CRD is installed (without it the
/// controller runs Manifests only, and says so). A change of a Manifest (`caches`) wakes the
/// Pipelines of its namespace that are not through.
pub async fn controllers(start: &Start, caches: &[ManifestCache]) -> Controllers {
    let mut ctx = PipelineContext::new(start.ctx.clone());
    ctx.manifests = caches.to_vec();
    let ctx = Arc::new(ctx);
    let mut controllers: Controllers = Vec::new();
    for scope in &start.scopes {
        let api: Api<DeserializeGuard<Pipeline>> = scoped(&start.client, scope);
        match listable(&api, scope, &PIPELINES).await {
            None => return Vec::new(),
            Some(false) => continue,
            Some(true) => {}
        }
        let (store, pipelines) = guarded::<Pipeline>(&start.client, scope);
        // Its own status writes start nothing; a spec edit or an approval does.
        let pipelines =
            pipelines.predicate_filter(predicates::generation.combine(predicates::annotations), Default::default());
        let gained = ownership::gained_objects(ctx.ownership.clone(), store.clone());
        let woken =
            caches.iter().find(|cache| cache.scope == *scope).map(|cache| woken_by(&cache.changes, store.clone()));
        let controller = Controller::for_stream(pipelines, store)
            .trigger_backoff(NoPause)
            .reconcile_on(gained)
            .reconcile_on(futures::stream::iter(woken).flatten())
            .graceful_shutdown_on(start.stopping.clone().cancelled_owned())
            .run(reconcile_guarded, error_policy, ctx.clone())
            .for_each(|result| said("Pipeline", result));
        controllers.push(Box::pin(controller));
    }
    controllers
}

/// Why a Pipeline's reconcile could not finish: the error of the step that failed, retried by
/// [`error_policy`]. A step that fails is no error: the Pipeline's status and log record it.
#[derive(Debug, thiserror::Error)]
pub enum PipelineReconcileError {
    #[error(transparent)]
    Compile(Uncompiled),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Advance(#[from] AdvanceError),
    #[error(transparent)]
    Report(#[from] StatusWriteError),
}

impl PipelineReconcileError {
    pub fn reason(&self) -> &'static str {
        match self {
            PipelineReconcileError::Compile(_) => "KubernetesApi",
            PipelineReconcileError::Record(e) => e.reason(),
            PipelineReconcileError::Advance(e) => e.reason(),
            PipelineReconcileError::Report(e) => e.reason(),
        }
    }
}

/// Reconciles one Pipeline: compile, record, advance, observe, report.
pub async fn reconcile(object: &Pipeline, ctx: &PipelineContext) -> Result<Action, PipelineReconcileError> {
    // At debug level, so that a reconcile that never ends (a request without an answer) shows.
    tracing::debug!(pipeline = %object.name_any(), "reconcile started");
    let Some(ticket) = ctx.ownership.begin(&object.namespace().unwrap_or_default(), &object.name_any()) else {
        return Ok(Action::await_change());
    };
    if object.metadata.deletion_timestamp.is_some() {
        // Its log goes with it (owner references); the Manifests it set vars on stay.
        return Ok(Action::await_change());
    }
    let (old, now, generation) = (object.status.clone().unwrap_or_default(), (ctx.clock)(), object.metadata.generation);
    let compiled = match compile::compile(object, ctx).await {
        Ok(compiled) => compiled,
        Err(e @ Uncompiled::Unlisted { .. }) => return Err(PipelineReconcileError::Compile(e)),
        Err(e) => {
            return Ok(report::report(&object.metadata, ctx, observe::uncompiled(&e, &old, generation, now)).await?);
        }
    };
    let recorded = record::record(object, ctx, &compiled).await.inspect_err(|_| ctx.logs.forget(object))?;
    let (events, term) = (recorded.events, ticket.term.clone());
    let advance = advance::advance(object, ctx, &compiled, (recorded.log, recorded.progress), term, now).await?;
    let found = observe::observe(&compiled, &advance, events, &old, generation, now, ctx.poll);
    Ok(report::report(&object.metadata, ctx, found).await?)
}

/// Reconciles what the watch read: a Pipeline, or what failed to deserialize as one (Stalled
/// with the reason on its status, and a Warning event).
pub async fn reconcile_guarded(
    object: Arc<DeserializeGuard<Pipeline>>,
    ctx: Arc<PipelineContext>,
) -> Result<Action, PipelineReconcileError> {
    match &object.0 {
        Ok(pipeline) => reconcile(pipeline, &ctx).await,
        Err(invalid) => {
            let meta = &invalid.metadata;
            let (namespace, name) =
                (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
            if !ctx.ownership.owns(namespace, name) || meta.name.is_none() || meta.namespace.is_none() {
                return Ok(Action::await_change());
            }
            tracing::warn!(%namespace, %name, error = %invalid.error, "malformed Pipeline");
            Ok(report::report(meta, &ctx, observe::malformed(invalid, (ctx.clock)())).await?)
        }
    }
}

/// A reconcile that failed is retried in 5 s.
pub fn error_policy(
    object: Arc<DeserializeGuard<Pipeline>>,
    error: &PipelineReconcileError,
    ctx: Arc<PipelineContext>,
) -> Action {
    report::counted_error(&ctx);
    tracing::warn!(pipeline = %object.name_any(), reason = error.reason(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// The Pipelines to reconcile as the Manifests of a namespace change (a step's Manifest answered,
/// or may have): those of the namespace not through, as the Pipeline watch holds them.
fn woken_by(
    changes: &tokio::sync::broadcast::Sender<String>,
    pipelines: Store<DeserializeGuard<Pipeline>>,
) -> impl futures::Stream<Item = ObjectRef<DeserializeGuard<Pipeline>>> + Send + use<> {
    use tokio::sync::broadcast::error::RecvError;
    let namespaces = futures::stream::unfold(changes.subscribe(), |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(namespace) => return Some((namespace, changes)),
                // Some changes missed: the next wakes them as well (and each Pipeline looks
                // again on its own while a revision is live).
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    namespaces.flat_map(move |namespace| {
        let woken: Vec<ObjectRef<DeserializeGuard<Pipeline>>> = pipelines
            .state()
            .iter()
            .filter(|guard| guard.meta().namespace.as_deref() == Some(namespace.as_str()))
            // One that does not deserialize waits for its own change, not for its Manifests'.
            .filter(|guard| {
                guard.0.as_ref().is_ok_and(|p| {
                    let ready = p.status.as_ref().and_then(|s| s.conditions.first());
                    ready.is_none_or(|ready| ready.status != "True")
                })
            })
            .map(|guard| ObjectRef::from_obj(&**guard))
            .collect();
        futures::stream::iter(woken)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::events::v1::Event as KubeEvent;
    use kube::core::error_boundary::InvalidObject;

    /// A Pipeline the controller cannot read is Stalled with the reason, gets a Warning event,
    /// and is counted as invalid; nothing else is done until it changes.
    #[tokio::test]
    async fn a_malformed_pipeline_is_stalled_with_the_reason_and_an_event() {
        let mut stored = Pipeline::new("broken", Default::default());
        stored.metadata.namespace = Some("default".into());
        let (client, ctx) = crate::controller::context::on_fake_api(stored).await;
        let ctx = PipelineContext::new(ctx);
        let metadata = kube::api::ObjectMeta {
            name: Some("broken".into()),
            namespace: Some("default".into()),
            generation: Some(4),
            ..Default::default()
        };
        let invalid = InvalidObject { error: "spec.revision: expected a string".into(), metadata };
        let guard = Arc::new(DeserializeGuard::<Pipeline>(Err(invalid)));
        let action = reconcile_guarded(guard, Arc::new(ctx)).await.unwrap();
        assert_eq!(action, Action::await_change());

        let api: Api<Pipeline> = Api::namespaced(client.clone(), "default");
        let status = api.get("broken").await.unwrap().status.expect("a status was written");
        let condition = |t: &str| status.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
        assert_eq!((condition("Stalled").status.as_str(), condition("Ready").status.as_str()), ("True", "False"));
        assert_eq!(condition("Ready").reason, "MalformedObject");
        assert!(condition("Ready").message.contains("spec.revision: expected a string"), "{status:?}");
        assert_eq!(status.observed_generation, Some(4));
        let events = Api::<KubeEvent>::namespaced(client, "default").list(&Default::default()).await.unwrap();
        assert!(events.items.iter().any(|e| e.reason.as_deref() == Some("MalformedObject")));
    }
}
