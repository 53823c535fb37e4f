//! A Pipeline that does not deserialize (it does not match the CRD's Rust types), as a Manifest
//! that does not ([`crate::controller::malformed`]): Ready False and Stalled with the reason on
//! its status, a Warning event, and nothing driven until the object changes.

use std::sync::Arc;

use kube::Api;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::{conditions, counted, reconcile};
use crate::controller::context::Context;
use crate::controller::error::PipelineReconcileError;
use crate::controller::reasons::{ConditionType, EventAction, Reason};
use crate::controller::report;
use crate::crd::pipeline::{Pipeline, PipelineStatus};

/// The reason a malformed Pipeline's conditions and event give.
pub const MALFORMED: &str = Reason::MalformedObject.as_str();

/// Reconciles what the watch read: a Pipeline, or what failed to deserialize as one.
pub async fn reconcile_guarded(
    object: Arc<DeserializeGuard<Pipeline>>,
    ctx: Arc<Context>,
) -> Result<Action, PipelineReconcileError> {
    match &object.0 {
        Ok(pipeline) => reconcile(Arc::new(pipeline.clone()), ctx).await,
        Err(invalid) => {
            let meta = &invalid.metadata;
            let (namespace, name) =
                (meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
            if ctx.ownership.owns(namespace, name) {
                malformed(&ctx, invalid).await?;
                counted(&ctx, Some(Reason::MalformedObject));
            }
            Ok(Action::await_change())
        }
    }
}

/// Says on the object that it does not deserialize: its status (built as for a first
/// reconcile: what it had is unreadable too) and a Warning event.
async fn malformed(ctx: &Context, invalid: &InvalidObject) -> Result<(), PipelineReconcileError> {
    let (Some(name), Some(namespace)) = (invalid.metadata.name.clone(), invalid.metadata.namespace.clone()) else {
        return Ok(());
    };
    let message = format!("the Pipeline does not match its schema: {}", invalid.error);
    tracing::warn!(%namespace, %name, error = %invalid.error, "malformed Pipeline");
    let generation = invalid.metadata.generation;
    let old = PipelineStatus::default();
    let ready = (ConditionType::Ready.as_str(), "False", MALFORMED.to_string(), message.clone());
    let new = PipelineStatus {
        observed_generation: generation,
        conditions: conditions(&old, generation, (ctx.clock)(), ready, true),
        ..Default::default()
    };
    let api: Api<Pipeline> = Api::namespaced(ctx.client.clone(), &namespace);
    report::write_status_to(&ctx.ownership, &api, &namespace, &name, &new, report::STATUS_WRITE_PATIENCE).await?;
    let reference = report::reference_to::<Pipeline>(&invalid.metadata);
    report::publish_to(ctx, &reference, EventType::Warning, MALFORMED, EventAction::Validate.as_str(), &message).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Settings;
    use crate::engine::executor::Executor;
    use k8s_openapi::api::events::v1::Event as KubeEvent;

    /// A Pipeline the controller cannot read is Stalled with the reason, gets a Warning event,
    /// and is counted as invalid; nothing else is done until it changes.
    #[tokio::test]
    async fn a_malformed_pipeline_is_stalled_with_the_reason_and_an_event() {
        let mut stored = Pipeline::new("broken", Default::default());
        stored.metadata.namespace = Some("default".into());
        let client = kube_fake_client::ClientBuilder::new()
            .with_resource::<Pipeline>()
            .with_status_subresource::<Pipeline>()
            .with_object(stored)
            .build()
            .await
            .unwrap();
        let executor: Arc<dyn Executor> =
            Arc::new(crate::engine::executor::fake::FakeExecutor::new(|_| Default::default()));
        let mut ctx = Context::new(client.clone(), executor, Settings::default());
        ctx.clock = Box::new(|| 1_700_000_000_000);
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
        assert_eq!(condition("Ready").reason, MALFORMED);
        assert!(condition("Ready").message.contains("spec.revision: expected a string"), "{status:?}");
        assert_eq!(status.observed_generation, Some(4));
        let events = Api::<KubeEvent>::namespaced(client, "default").list(&Default::default()).await.unwrap();
        assert!(events.items.iter().any(|e| e.reason.as_deref() == Some(MALFORMED)));
    }
}
