//! ManifestPreviews: a proposed spec for a Manifest, planned against live state as the
//! proposal's ServiceAccount — states read, Kubernetes objects dry-run, image types' states read
//! in their runners — and nothing applied. The Manifest's own deployment log (its status) is
//! read for drift, changes and what leaves it; nothing is written back to it.
//!
//! A reconcile is named steps: [`expire`] (a preview kept past its TTL is deleted),
//! [`plan::bound`] (its size, and how many plan at once in the namespace: the slots),
//! [`plan::plan`] (the pass; `Planning` is written as it starts) and [`report`] (the status,
//! through the fenced writer). What the plan becomes in the status is pure ([`summary::of`]).
//! What only previews keep — the slots — is [`PreviewContext`]'s.

pub mod expire;
pub mod plan;
pub mod report;
pub mod slots;
pub mod summary;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::{Controller, WatchStreamExt, predicates};
use kube::{Api, ResourceExt};

use super::context::Context;
use super::error::StatusWriteError;
use super::kinds::{Controllers, Crd, Start, guarded, listable, said, scoped};
use super::reasons::{EventAction, PreviewPhase, PreviewReason};
use super::report::{STATUS_WRITE_PATIENCE, StatusWriter, publish_to, reference_to};
use crate::crd::preview::{ManifestPreview, PreviewPlan};

/// Previews planned at once in one namespace; the rest wait, `Queued`.
pub const PLANNING_PER_NAMESPACE: usize = 4;

/// What a preview's reconcile has: the shared context, and what only previews keep.
pub struct PreviewContext {
    shared: Arc<Context>,
    /// ManifestPreviews planning now, by namespace.
    pub slots: slots::Slots,
}

impl PreviewContext {
    pub fn new(shared: impl Into<Arc<Context>>) -> Self {
        Self { shared: shared.into(), slots: Default::default() }
    }
}

impl Deref for PreviewContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

const PREVIEWS: Crd =
    Crd { what: "ManifestPreviews are not planned", name: "manifestpreviews.deployster.io", kind: "preview" };

/// A controller of ManifestPreviews for each scope, when their CRD is installed (without it,
/// previews are not planned, said once).
pub async fn controllers(start: &Start) -> Controllers {
    let ctx = Arc::new(PreviewContext::new(start.ctx.clone()));
    let mut controllers: Controllers = Vec::new();
    for scope in &start.scopes {
        let api: Api<DeserializeGuard<ManifestPreview>> = scoped(&start.client, scope);
        match listable(&api, scope, &PREVIEWS).await {
            None => return Vec::new(),
            Some(false) => continue,
            Some(true) => {}
        }
        let (store, previews) = guarded::<ManifestPreview>(&start.client, scope);
        // Its own status writes start nothing (a reconcile requeues itself while it waits);
        // a new proposal (generation) does.
        let previews = previews.predicate_filter(predicates::generation, Default::default());
        let controller = Controller::for_stream(previews, store)
            .graceful_shutdown_on(start.stopping.clone().cancelled_owned())
            .run(reconcile_guarded, error_policy, ctx.clone())
            .for_each(|result| said("ManifestPreview", result));
        controllers.push(Box::pin(controller));
    }
    controllers
}

/// Why a reconcile of a preview could not finish (a plan that failed is no error: the status
/// says why).
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("cannot reach the API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Report(#[from] StatusWriteError),
}

impl PreviewError {
    pub fn reason(&self) -> &'static str {
        match self {
            PreviewError::Kube(_) => "KubernetesApi",
            PreviewError::Report(e) => e.reason(),
        }
    }
}

/// The status a preview ends with, or waits with: the controller's answer.
pub struct Answer {
    pub phase: PreviewPhase,
    pub reason: PreviewReason,
    pub message: Option<String>,
    pub plan: Option<PreviewPlan>,
}

impl Answer {
    pub fn failed(reason: PreviewReason, message: String) -> Answer {
        Answer { phase: PreviewPhase::Failed, reason, message: Some(message), plan: None }
    }

    fn waiting(phase: PreviewPhase, reason: PreviewReason, message: String) -> Answer {
        Answer { phase, reason, message: Some(message), plan: None }
    }
}

/// One reconcile of a preview: expire, bound, plan, report.
pub async fn reconcile(obj: &ManifestPreview, ctx: &PreviewContext) -> Result<Action, PreviewError> {
    let (now, namespace) = ((ctx.clock)(), obj.namespace().unwrap_or_default());
    if !ctx.ownership.owns(&namespace, &obj.spec.manifest) {
        // Planned by the replica that reconciles its Manifest; asked again in a while.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    if let Some(action) = expire::expire(obj, ctx, now).await? {
        return Ok(action);
    }
    if let Err(answer) = plan::bound(obj) {
        return Ok(report::report(obj, ctx, *answer, now).await?);
    }
    let phase = obj.status.as_ref().and_then(|s| s.phase.as_deref()).and_then(PreviewPhase::parse);
    let Some(_slot) = ctx.slots.take(&namespace, PLANNING_PER_NAMESPACE) else {
        let message = format!(
            "{PLANNING_PER_NAMESPACE} previews are being planned in namespace {namespace} (at most \
             {PLANNING_PER_NAMESPACE} at once); this one waits for a slot"
        );
        if phase != Some(PreviewPhase::Queued) {
            report::report(
                obj,
                ctx,
                Answer::waiting(PreviewPhase::Queued, PreviewReason::TooManyPreviews, message),
                now,
            )
            .await?;
        }
        return Ok(Action::requeue(report::QUEUED_RETRY));
    };
    let planning = format!("planning the proposal for Manifest {namespace}/{}", obj.spec.manifest);
    report::report(obj, ctx, Answer::waiting(PreviewPhase::Planning, PreviewReason::Planning, planning), now).await?;
    let mut answer = plan::plan(obj, ctx).await?;
    if phase == Some(PreviewPhase::Queued) && answer.message.is_none() {
        answer.message = Some(format!(
            "planned after waiting for a slot (at most {PLANNING_PER_NAMESPACE} previews are planned at once in a namespace)"
        ));
    }
    Ok(report::report(obj, ctx, answer, (ctx.clock)()).await?)
}

/// Reconciles what the watch read: a preview, or what failed to deserialize as one (Failed
/// with the reason on its status, and a Warning event; nothing is planned until it changes).
pub async fn reconcile_guarded(
    object: Arc<DeserializeGuard<ManifestPreview>>,
    ctx: Arc<PreviewContext>,
) -> Result<Action, PreviewError> {
    match &object.0 {
        Ok(preview) => reconcile(preview, &ctx).await,
        Err(invalid) => malformed(&ctx, invalid).await,
    }
}

/// A preview that does not deserialize: said on the object, by the replica whose shard its own
/// name falls in (its Manifest's name cannot be read).
async fn malformed(ctx: &PreviewContext, invalid: &InvalidObject) -> Result<Action, PreviewError> {
    let meta = &invalid.metadata;
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Ok(Action::await_change());
    };
    if !ctx.ownership.owns(namespace, name) {
        return Ok(Action::await_change());
    }
    let message = format!("the ManifestPreview does not match its schema: {}", invalid.error);
    tracing::warn!(%namespace, %name, error = %invalid.error, "malformed ManifestPreview");
    let reason = PreviewReason::MalformedObject;
    let reference = reference_to::<ManifestPreview>(meta);
    let action = EventAction::Validate.as_str();
    publish_to(ctx, &reference, EventType::Warning, reason.as_str(), action, &message).await;
    let status = report::status(Answer::failed(reason, message), meta.generation, (ctx.clock)());
    StatusWriter::<ManifestPreview>::new(ctx, meta).write(&status, STATUS_WRITE_PATIENCE).await?;
    Ok(Action::await_change())
}

/// The requeue after an error: soon, as the error is the API's.
pub fn error_policy(
    object: Arc<DeserializeGuard<ManifestPreview>>,
    error: &PreviewError,
    _: Arc<PreviewContext>,
) -> Action {
    tracing::warn!(preview = %object.name_any(), reason = error.reason(), error = %error, "a preview's reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::replicas::fence::FenceError;
    use crate::controller::replicas::ownership::Ownership;
    use crate::controller::replicas::shards::{ShardSettings, Shards};
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use kube::api::PostParams;

    /// A preview's status is written as its Manifest's shard allows: by the replica that holds
    /// that shard (not the shard the preview's own name falls in), and never once the shard's
    /// Lease names another — the fence every kind's status goes through.
    #[tokio::test]
    async fn a_replica_that_lost_the_shard_of_its_manifest_writes_no_status() {
        use crate::controller::replicas::shards::assign::shard_of;
        let shard = shard_of("default", "app", 2);
        // A preview whose own name falls in the other shard, which this replica does not hold.
        let name = (0..).map(|i| format!("pr-{i}")).find(|n| shard_of("default", n, 2) != shard).unwrap();
        let mut stored = ManifestPreview::new(&name, Default::default());
        stored.metadata.namespace = Some("default".into());
        stored.metadata.generation = Some(1);
        stored.spec.manifest = "app".into();
        let (client, mut ctx) = crate::controller::context::on_fake_api(stored.clone()).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        let lease_name = format!("deployster-shard-{shard}");
        let lease = Lease {
            metadata: kube::api::ObjectMeta { name: Some(lease_name.clone()), ..Default::default() },
            spec: Some(LeaseSpec { holder_identity: Some("me".into()), ..Default::default() }),
        };
        leases.create(&PostParams::default(), &lease).await.unwrap();
        let settings = ShardSettings {
            count: 2,
            group: "deployster".into(),
            namespace: "default".into(),
            duration: Duration::from_secs(2),
            watched: Vec::new(),
            identity: "me".into(),
            owner: None,
        };
        let shards = Shards::holding(client.clone(), settings, &[shard]);
        ctx.ownership = Arc::new(Ownership::Shards(shards));
        let ctx = PreviewContext::new(ctx);
        let previews: Api<ManifestPreview> = Api::namespaced(client.clone(), "default");
        let phase = || async { previews.get(&name).await.unwrap().status.and_then(|s| s.phase) };

        let failed = Answer::failed(PreviewReason::ProposalTooLarge, "too large".into());
        report::report(&stored, &ctx, failed, 1).await.expect("the holder of its Manifest's shard writes");
        assert_eq!(phase().await.as_deref(), Some("Failed"));

        let mut taken = leases.get(&lease_name).await.unwrap();
        taken.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
        leases.replace(&lease_name, &PostParams::default(), &taken).await.unwrap();
        let queued = Answer::waiting(PreviewPhase::Queued, PreviewReason::TooManyPreviews, "waits".into());
        match report::report(&stored, &ctx, queued, 2).await {
            Err(StatusWriteError::Fence(FenceError::NotOwner(why))) => assert!(why.contains("intruder"), "{why}"),
            other => panic!("the write was not fenced: {other:?}"),
        }
        assert_eq!(phase().await.as_deref(), Some("Failed"), "nothing written once the shard is another's");
    }
}
