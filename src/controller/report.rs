//! How the controller reports on its objects (Manifests and Pipelines alike): the status,
//! written server-side under one field manager and fenced by the leader lease, and events.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use serde_json::json;

use super::context::Context;
use super::error::StatusWriteError;
use super::replicas::fence::FenceError;
use super::status::cut;

/// The field manager of every status write.
pub use super::context::FIELD_MANAGER;

/// The one way a status is written: fenced by the leader lease (a replica that lost it writes
/// nothing more), then applied server-side; an API server that does not answer is tried again
/// for up to `patience`.
pub(super) async fn write_status_to<K>(
    ownership: &super::replicas::ownership::Ownership,
    api: &Api<K>,
    namespace: &str,
    name: &str,
    status: &impl serde::Serialize,
    patience: Duration,
) -> Result<(), StatusWriteError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    const ATTEMPTS: usize = 5;
    let status = serde_json::to_value(status).expect("a status is plain data");
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let (started, mut conflicts, mut unanswered) = (tokio::time::Instant::now(), 0, 0u32);
    loop {
        let written = match ownership.confirm(namespace, name).await {
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
                api.patch_status(name, &params, &Patch::Apply(&patch)).await.map_err(StatusWriteError::Kube)
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

/// How long a status write that records a pass waits for an API server that does not answer.
pub(super) const STATUS_WRITE_PATIENCE: Duration = Duration::from_secs(60);

/// A request that got no answer (no connection, a timeout) or one saying "not now" (429, 502,
/// 503, 504 — not a 500, which refuses the request itself): trying again later may succeed.
fn unanswered_for_now(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 429 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Publishes an event on the object `reference` names (its note cut to 1 KiB).
/// A reference to the object of kind `K` that `metadata` describes (one read, or one that did
/// not deserialize), for its events.
pub(super) fn reference_to<K: kube::Resource<DynamicType = ()>>(
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

pub(super) async fn publish_to(
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
