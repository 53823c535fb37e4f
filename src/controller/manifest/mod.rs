//! Manifests: each object's spec is a manifest, reconciled on an interval and whenever
//! something it depends on changes. One reconcile is named steps:
//!
//! 1. [`fetch`] (I/O): the object as it is now, the finalizer set, its inputs read;
//! 2. [`validate`] (pure): what only a change of the spec can fix;
//! 3. [`run`] (I/O): the engine's pass, its progress written as it goes;
//! 4. [`observe`] (pure): what the pass did, as the status and the events will say it;
//! 5. [`report`] (I/O): everything after the pass — outputs, watches, checks, status, events.
//!
//! Deletion takes its own path ([`delete`]). What the controller does next comes back as
//! [`Next`]; each step that can fail has its own error type, and [`ManifestError`] is one of
//! them. What only Manifests keep — when each resource is next read ([`checks`]), the watches
//! of what they applied, the bound on passes at once — is [`ManifestContext`]'s.

pub mod checks;
pub mod delete;
pub mod fetch;
pub mod inputs;
pub mod invalid;
mod journal;
mod malformed;
pub mod observe;
pub mod outputs;
pub mod report;
pub mod run;
mod triggers;
pub mod validate;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::context::Context;
use super::kinds::{Controllers, Start, said};
use super::metrics::{Metrics, Timer};
use super::readiness::Readiness;
use super::replicas::ownership::{self, Ownership};
use super::stream::NoPause;
use crate::crd::Manifest;
use crate::watches::Watches;
use delete::DeleteError;
pub use fetch::FINALIZER;
use fetch::FetchError;
use report::ReportError;
use run::RunError;
pub use triggers::{ManifestCache, prune_for_cache};

/// What a Manifest's reconcile has: the shared context, and what only Manifests keep.
pub struct ManifestContext {
    shared: Arc<Context>,
    /// When each object's resources are next read (adaptive drift checks).
    pub checks: checks::Checks,
    /// Watches of the objects Manifests applied: a change starts a pass.
    pub watches: Watches,
    /// Reconciles run at once (`--concurrency`); those waiting are the work queue's depth.
    pub workers: Semaphore,
}

impl ManifestContext {
    /// With no watches of what Manifests apply, and no bound on passes at once.
    pub fn new(shared: impl Into<Arc<Context>>) -> Self {
        let shared = shared.into();
        Self {
            shared,
            checks: Default::default(),
            watches: Watches::disabled(),
            workers: Semaphore::new(Semaphore::MAX_PERMITS),
        }
    }
}

impl Deref for ManifestContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

/// What the Manifests' controllers are started with besides what every kind has.
pub struct Own {
    pub watches: Watches,
    pub concurrency: u16,
    pub readiness: Arc<Readiness>,
}

/// A controller of Manifests for each scope, and the watch caches they fill (the Pipelines read
/// their Manifests there).
pub fn controllers(start: &Start, own: Own) -> (Controllers, Vec<ManifestCache>) {
    let ctx = Arc::new(ManifestContext {
        shared: start.ctx.clone(),
        checks: Default::default(),
        watches: own.watches,
        workers: Semaphore::new(usize::from(own.concurrency.max(1))),
    });
    let client = &start.client;
    let mut controllers: Controllers = Vec::new();
    let mut caches = Vec::new();
    for (index, scope) in start.scopes.iter().enumerate() {
        let (cache, manifests) = triggers::watch(client, scope, own.readiness.clone(), index);
        let secrets = triggers::input_changes::<Secret>(client, scope);
        let config_maps = triggers::input_changes::<ConfigMap>(client, scope);
        let (of_secret, of_config_map, gained) = (cache.store.clone(), cache.store.clone(), cache.store.clone());
        let controller = Controller::for_stream(manifests, cache.store.clone())
            // Concurrency is bounded by `workers`, so that waiting work can be counted.
            .with_config(ControllerConfig::default())
            .trigger_backoff(NoPause)
            .watches_stream(secrets, move |s| triggers::readers(&of_secret, inputs::Source::Secret, &s.metadata))
            .watches_stream(config_maps, move |c| {
                triggers::readers(&of_config_map, inputs::Source::ConfigMap, &c.metadata)
            })
            .reconcile_on(ownership::gained_objects(ctx.ownership.clone(), gained))
            .reconcile_on(triggers::woken(&ctx, scope))
            .graceful_shutdown_on(start.stopping.clone().cancelled_owned())
            .run(reconcile_guarded, error_policy, ctx.clone())
            .for_each(|result| said("Manifest", result));
        controllers.push(Box::pin(controller));
        caches.push(cache);
    }
    (controllers, caches)
}

/// What the admin server refreshes from the caches before each scrape: Manifests by Ready
/// condition, and those this replica reconciles.
pub fn counts(caches: &[ManifestCache], ownership: Arc<Ownership>) -> Arc<dyn Fn(&Metrics) + Send + Sync> {
    let caches = caches.to_vec();
    Arc::new(move |m: &Metrics| {
        m.set_manifests(&triggers::ready_counts(&caches));
        m.set_manifests_owned(triggers::owned_count(&caches, &ownership));
    })
}

/// What the controller should do next with the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Requeue(Duration),
    /// Nothing until the object changes (invalid, suspended, or gone).
    AwaitChange,
}

/// Why a Manifest's reconcile could not finish: the error of the step that failed. Retried by
/// [`error_policy`]. Failures of the manifest itself (invalid, a resource failing) are not
/// errors: they are recorded in the status.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Delete(#[from] DeleteError),
}

impl ManifestError {
    pub fn reason(&self) -> &'static str {
        match self {
            ManifestError::Fetch(e) => e.reason(),
            ManifestError::Run(e) => e.reason(),
            ManifestError::Report(e) => e.reason(),
            ManifestError::Delete(e) => e.reason(),
        }
    }
}

/// Reconciles one Manifest.
pub async fn reconcile(obj: &Manifest, ctx: &ManifestContext) -> Result<Next, ManifestError> {
    // Passes run under this replica's term for the object (its leadership, or its shard):
    // losing it cancels them; a shard is not handed over while the ticket lives.
    let Some(ticket) = ctx.ownership.begin(&obj.namespace().unwrap_or_default(), &obj.name_any()) else {
        return Ok(Next::AwaitChange);
    };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(delete::cleanup(obj, ctx, &ticket.term).await?);
    }
    // Go on with the object as the patch left it, not as it was.
    let updated = fetch::with_finalizer(obj, ctx).await?;
    let obj = updated.as_ref().unwrap_or(obj);
    let old = obj.status.clone().unwrap_or_default();
    if obj.spec.suspend {
        return Ok(report::suspended(obj, ctx, &old).await?);
    }
    let checked = match validate::check(obj) {
        Ok(checked) => checked,
        Err(e) => return Ok(report::invalid(obj, ctx, &old, e.into()).await?),
    };
    let manifest = match fetch::inputs(ctx, obj).await {
        Ok(manifest) => manifest,
        Err(e) if e.is_invalid() => return Ok(report::invalid(obj, ctx, &old, e).await?),
        Err(e) if e.is_unavailable() => return Ok(report::unavailable(obj, ctx, &old, &checked, e).await?),
        Err(e) => return Err(FetchError::Inputs(e).into()),
    };
    let (passed, with) = run::engine_pass(obj, ctx, &old, manifest, checked.intervals, &ticket.term).await?;
    let seen = observe::observe(obj, passed, &with, &old);
    Ok(report::pass(obj, ctx, &old, seen, with, &checked).await?)
}

/// Reconciles what the watch read: a Manifest (read anew: the cache's copy is pruned), or
/// what failed to deserialize as one.
pub async fn reconcile_guarded(
    object: Arc<DeserializeGuard<Manifest>>,
    ctx: Arc<ManifestContext>,
) -> Result<Action, ManifestError> {
    let meta = match &object.0 {
        Ok(manifest) => &manifest.metadata,
        Err(invalid) => &invalid.metadata,
    };
    let (namespace, name) = (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
    if !ctx.ownership.owns(namespace, name) {
        // Another replica's (it leads, or holds the shard); gaining it reconciles it again.
        ctx.watches.forget(namespace, name);
        return Ok(Action::await_change());
    }
    // Not `name`: JSON logs give each span a `name` key of its own ("reconcile").
    let span = tracing::info_span!("reconcile", namespace, manifest = name, run_id = tracing::field::Empty,);
    async {
        ctx.metrics.work_queue_depth.inc();
        let permit = ctx.workers.acquire().await;
        ctx.metrics.work_queue_depth.dec();
        let _permit = permit.expect("the worker semaphore is never closed");
        let _timer = Timer::start(&ctx.metrics);
        match &object.0 {
            Ok(cached) => {
                // The pass reads the object as it is now. Gone since: nothing to do.
                let Some(manifest) = fetch::current(&ctx, cached).await? else {
                    ctx.watches.forget(namespace, name);
                    return Ok(Action::await_change());
                };
                Ok(match reconcile(&manifest, &ctx).await? {
                    Next::Requeue(after) => Action::requeue(after),
                    Next::AwaitChange => Action::await_change(),
                })
            }
            Err(invalid) => {
                malformed::malformed(&ctx, invalid).await;
                ctx.metrics.reconciled("invalid");
                Ok(Action::await_change())
            }
        }
    }
    .instrument(span)
    .await
}

/// A reconcile that failed is retried in 30 s.
pub fn error_policy(
    object: Arc<DeserializeGuard<Manifest>>,
    error: &ManifestError,
    ctx: Arc<ManifestContext>,
) -> Action {
    let name = object.0.as_ref().map(|m| m.name_any()).unwrap_or_default();
    ctx.metrics.reconciled("error");
    tracing::warn!(object = %name, reason = error.reason(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// `retry × 2^(failures − 1)`, at most `interval`.
pub fn backoff(retry: Duration, failures: u32, interval: Duration) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    retry.saturating_mul(factor).min(interval.max(retry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::jitter;
    use run::{MANIFEST_LABEL, pod_scope};

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
