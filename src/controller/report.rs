//! How the controller reports on its objects, of every kind alike: the status, through the one
//! fenced writer ([`StatusWriter`]), and events.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::core::object::HasStatus;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Api, Resource};
use serde_json::json;

use super::context::Context;
use super::error::StatusWriteError;
use super::replicas::fence::FenceError;
use super::replicas::ownership::Ownership;
use super::status::cut;

/// The field manager of every status write.
pub use super::context::FIELD_MANAGER;

/// The one writer of an object's status, for every kind: fenced by this replica's term (a
/// replica that lost the lease, or the object's shard, writes nothing more), applied
/// server-side under one field manager, one write at a time. It knows the status it last
/// wrote (what the object holds now), and writes nothing when asked for that again.
pub struct StatusWriter<K: HasStatus> {
    /// The kind's API, answering as any object: what a status write answers is not read back
    /// as `K`, whose spec may not deserialize (a malformed object's status is written too).
    api: Api<DynamicObject>,
    ownership: Arc<Ownership>,
    namespace: String,
    name: String,
    /// The name whose term fences the write: the object's own, or (a preview) its Manifest's.
    fenced_by: String,
    last: tokio::sync::Mutex<Option<K::Status>>,
}

impl<K> StatusWriter<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + HasStatus,
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::Status: serde::Serialize + Clone + PartialEq,
{
    /// The writer of the status of the object `meta` describes (one read, or one that did not
    /// deserialize).
    pub fn new(ctx: &Context, meta: &ObjectMeta) -> Self {
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        Self {
            api: Api::namespaced_with(ctx.client.clone(), &namespace, &ApiResource::erase::<K>(&())),
            ownership: ctx.ownership.clone(),
            fenced_by: name.clone(),
            namespace,
            name,
            last: Default::default(),
        }
    }

    /// Fenced by the term for `name` of the same namespace rather than the object's own.
    pub fn fenced_by(mut self, name: &str) -> Self {
        self.fenced_by = name.to_string();
        self
    }

    /// Writes `status`, retrying conflicts, and an API server that does not answer for up to
    /// `patience`.
    pub async fn write(&self, status: &K::Status, patience: Duration) -> Result<(), StatusWriteError> {
        self.write_with(|| status.clone(), patience).await
    }

    /// Writes the status `build` makes once the write before it is done — unless it is the
    /// status last written: actions that start together record their intents in one or two
    /// writes, not one each.
    pub async fn write_with(
        &self,
        build: impl FnOnce() -> K::Status,
        patience: Duration,
    ) -> Result<(), StatusWriteError> {
        let mut last = self.last.lock().await;
        let status = build();
        if last.as_ref() == Some(&status) {
            return Ok(());
        }
        self.apply(&status, patience).await?;
        *last = Some(status);
        Ok(())
    }

    /// The status it last wrote, if it wrote one.
    pub async fn last(&self) -> Option<K::Status> {
        self.last.lock().await.clone()
    }

    /// The write itself: confirmed by the fence, then applied server-side (`status.shard`
    /// saying who wrote it); conflicts and an API server away are tried again.
    async fn apply(&self, status: &K::Status, patience: Duration) -> Result<(), StatusWriteError> {
        const ATTEMPTS: usize = 5;
        let status = serde_json::to_value(status).expect("a status is plain data");
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let (started, mut conflicts, mut unanswered) = (tokio::time::Instant::now(), 0, 0u32);
        loop {
            let written = match self.ownership.confirm(&self.namespace, &self.fenced_by).await {
                Ok(shard) => {
                    let mut status = status.clone();
                    // Who wrote it, always as it is now (a status copied forward may name another).
                    if let Some(fields) = status.as_object_mut() {
                        match shard {
                            Some(shard) => fields.insert("shard".into(), json!(shard)),
                            None => fields.remove("shard"),
                        };
                    }
                    let patch = json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
                    self.api
                        .patch_status(&self.name, &params, &Patch::Apply(&patch))
                        .await
                        .map_err(StatusWriteError::Kube)
                }
                // A Lease that cannot be read now is waited for as the API server is.
                Err(FenceError::Lease(e)) => Err(StatusWriteError::Kube(e)),
                Err(fenced) => Err(StatusWriteError::Fence(fenced)),
            };
            match written {
                Ok(_) => return Ok(()),
                Err(StatusWriteError::Kube(kube::Error::Api(status))) if status.code == 409 => {
                    conflicts += 1;
                    if conflicts == ATTEMPTS {
                        return Err(StatusWriteError::Conflict(ATTEMPTS));
                    }
                    tracing::debug!(attempt = conflicts, "status write conflicted; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * conflicts as u64)).await;
                }
                // A pass's record is its only memory: an API server that is away (restarting, or a
                // connection cut) is waited for, for a while, rather than losing what the pass did.
                Err(StatusWriteError::Kube(e)) if unanswered_for_now(&e) && started.elapsed() < patience => {
                    unanswered += 1;
                    let wait = Duration::from_millis(250 * 2u64.pow(unanswered.min(5))).min(Duration::from_secs(5));
                    tracing::warn!(error = %e, retry_in = ?wait, "the status could not be written; retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// How long a status write that records a pass waits for an API server that does not answer.
pub const STATUS_WRITE_PATIENCE: Duration = Duration::from_secs(60);

/// A request that got no answer (no connection, a timeout) or one saying "not now" (429, 502,
/// 503, 504 — not a 500, which refuses the request itself): trying again later may succeed.
fn unanswered_for_now(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 429 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Publishes an event on `obj`; a failure to publish is logged, never fatal.
pub async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    publish_to(ctx, &obj.object_ref(&()), type_, reason, action, note).await;
}

/// A reference to the object of kind `K` that `metadata` describes (one read, or one that did
/// not deserialize), for its events.
pub fn reference_to<K: kube::Resource<DynamicType = ()>>(
    metadata: &kube::api::ObjectMeta,
) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(K::api_version(&()).into()),
        kind: Some(K::kind(&()).into()),
        name: metadata.name.clone(),
        namespace: metadata.namespace.clone(),
        uid: metadata.uid.clone(),
        ..Default::default()
    }
}

/// Publishes an event on the object `reference` names (its note cut to 1 KiB); a failure to
/// publish is logged, never fatal.
pub async fn publish_to(
    ctx: &Context,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let event = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(cut(note)),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.events.publish(&event, reference).await {
        tracing::warn!(error = %e, reason, "could not publish an event");
    }
}
