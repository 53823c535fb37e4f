//! A Manifest that does not deserialize (it does not match the CRD's Rust types): Stalled on
//! the object with the reason, by the same status function as every pass, and a Warning event.

use kube::runtime::events::EventType;

use crate::controller::context::Context;
use crate::controller::reasons::{EventAction, Reason};
use crate::controller::report::{self, STATUS_WRITE_PATIENCE, StatusWriter};
use crate::controller::status;
use crate::crd::Manifest;

/// A Manifest that does not deserialize: say so on the object (status and an event).
pub(super) async fn malformed(ctx: &Context, invalid: &kube::core::error_boundary::InvalidObject) {
    let (Some(name), Some(namespace)) = (invalid.metadata.name.clone(), invalid.metadata.namespace.clone()) else {
        return;
    };
    let message = format!("the Manifest does not match its schema: {}", invalid.error);
    tracing::warn!(%namespace, %name, error = %invalid.error, "malformed Manifest");
    // What it had is unreadable too: the status is built as for a first pass.
    let result = status::PassResult {
        run_id: None,
        generation: invalid.metadata.generation,
        revision: String::new(),
        observed: status::Observed::Invalid { reason: Reason::MalformedObject.as_str(), message: message.clone() },
        drifts: Vec::new(),
        history: Vec::new(),
        now_ms: (ctx.clock)(),
        approved_plan: None,
        next_checks: Default::default(),
        outputs_failed: None,
        unwatched: None,
        fights: Vec::new(),
        removals: Vec::new(),
    };
    let new = status::next_status(&crate::crd::ManifestStatus::default(), &result);
    let writer = StatusWriter::<Manifest>::new(ctx, &invalid.metadata);
    if let Err(e) = writer.write(&new, STATUS_WRITE_PATIENCE).await {
        tracing::warn!(error = %e, "could not record a malformed Manifest's status");
    }
    let reference = report::reference_to::<Manifest>(&invalid.metadata);
    report::publish_to(
        ctx,
        &reference,
        EventType::Warning,
        Reason::MalformedObject.as_str(),
        EventAction::Validate.as_str(),
        &message,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::events::v1::Event as KubeEvent;

    /// An object the controller cannot read is Stalled with the reason — by the same status
    /// function as every pass — and gets a Warning event.
    #[tokio::test]
    async fn a_malformed_object_is_stalled_with_the_reason_and_an_event() {
        let spec: crate::crd::ManifestSpec = serde_norway::from_str("resources: {}").unwrap();
        let mut stored = Manifest::new("broken", spec);
        stored.metadata.namespace = Some("default".into());
        let (client, ctx) = crate::controller::context::on_fake_api(stored).await;
        let metadata = kube::api::ObjectMeta {
            name: Some("broken".into()),
            namespace: Some("default".into()),
            generation: Some(3),
            ..Default::default()
        };
        let invalid =
            kube::core::error_boundary::InvalidObject { error: "spec.interval: expected a string".into(), metadata };
        malformed(&ctx, &invalid).await;

        let api: kube::Api<Manifest> = kube::Api::namespaced(client.clone(), "default");
        let status = api.get("broken").await.unwrap().status.expect("a status was written");
        let condition = |t: &str| status.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
        assert_eq!((condition("Stalled").status.as_str(), condition("Ready").status.as_str()), ("True", "False"));
        assert_eq!(condition("Ready").reason, "MalformedObject");
        assert!(condition("Ready").message.contains("spec.interval: expected a string"), "{status:?}");
        assert_eq!(status.observed_generation, Some(3));
        let events = kube::Api::<KubeEvent>::namespaced(client, "default").list(&Default::default()).await.unwrap();
        assert!(events.items.iter().any(|e| e.reason.as_deref() == Some("MalformedObject")));
    }
}
