//! Bound, then plan: a proposal over the size a preview may have is not planned; one that is
//! is planned as the Manifest it is for would be — its inputs read, its types' states read,
//! Kubernetes objects dry-run — against that Manifest's deployment log, and nothing applied.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Answer, summary};
use crate::controller::context::Context;
use crate::controller::manifest::run::{PassRequest, memory_log, run_pass};
use crate::controller::manifest::{fetch, inputs};
use crate::controller::reasons::{PreviewPhase, PreviewReason};
use crate::crd::preview::ManifestPreview;
use crate::crd::{Manifest, ManifestSpec};
use crate::engine::events::ApproveAll;
use crate::engine::schedule::AssumeValid;
use crate::engine::validate::ValidatedManifest;
use crate::pass::{Ended, Inventory, Mode};

/// The largest proposal planned (its spec as JSON); a larger one fails, said so.
pub const MAX_PROPOSAL_BYTES: usize = 256 * 1024;

/// The label that names the preview (its uid) on the Pods of its plan.
pub const PREVIEW_LABEL: &str = "deployster.io/preview-uid";

/// A proposal over [`MAX_PROPOSAL_BYTES`] is not planned.
pub fn bound(obj: &ManifestPreview) -> Result<(), Box<Answer>> {
    let size = serde_json::to_vec(&obj.spec.proposed).map_or(0, |b| b.len());
    if size > MAX_PROPOSAL_BYTES {
        let message = format!(
            "the proposal is {size} bytes; a preview plans at most {MAX_PROPOSAL_BYTES} bytes of spec: propose less"
        );
        return Err(Box::new(Answer::failed(PreviewReason::ProposalTooLarge, message)));
    }
    Ok(())
}

/// The proposal planned as the Manifest it is for would be, against its deployment log.
pub async fn plan(obj: &ManifestPreview, ctx: &Context) -> Result<Answer, kube::Error> {
    let namespace = obj.namespace().unwrap_or_default();
    tracing::debug!(%namespace, preview = %obj.name_any(), manifest = %obj.spec.manifest, "planning a preview");
    let manifests: Api<Manifest> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = manifests.get_opt(&obj.spec.manifest).await?;
    let old = existing.as_ref().and_then(|m| m.status.clone()).unwrap_or_default();
    if let Some(account) = &obj.spec.proposed.service_account_name {
        let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &namespace);
        if accounts.get_opt(account).await?.is_none() {
            let message = format!(
                "spec.proposed.serviceAccountName: ServiceAccount `{account}` not found in namespace `{namespace}`"
            );
            return Ok(Answer::failed(PreviewReason::ServiceAccountMissing, message));
        }
    }
    let proposed = proposed_manifest(obj, existing.as_ref());
    // Its plug files apart from the Manifest's own.
    let mut settings = ctx.settings.clone();
    settings.plug_root = settings.plug_root.join("previews").join(obj.uid().unwrap_or_default());
    // Its files (plugs, the workspace its programs run in) go once it is planned, whatever came of it.
    let _files = RemovedWhenDropped(settings.plug_root.clone());
    let prepared = fetch::prepare(&ctx.client, &proposed, &settings).await;
    let manifest = match prepared {
        // Its revision as the controller's pass of the merged spec will have it (its content).
        Ok((manifest, inputs)) => {
            Arc::new(ValidatedManifest { revision: inputs::revision(&proposed, &inputs), ..manifest })
        }
        Err(e) => return Ok(Answer::failed(PreviewReason::ProposalInvalid, format!("spec.proposed: {e}"))),
    };
    let assumed = AssumeValid::default();
    let request = PassRequest {
        manifest: manifest.clone(),
        mode: Mode::Plan,
        inventory: Inventory::Keep,
        // The Manifest's log, copied: what the plan records stays here.
        log: memory_log(ctx, &old),
        observers: Vec::new(),
        approver: &ApproveAll,
        assume_valid: &assumed,
        scope: pod_scope(obj),
    };
    let passed = match run_pass(ctx, &proposed, request, &CancellationToken::new()).await {
        Ok(passed) => passed,
        Err(e) => return Ok(Answer::failed(PreviewReason::PlanFailed, e.to_string())),
    };
    Ok(match &passed.ended {
        Ended::Planned(plan) => Answer {
            phase: PreviewPhase::Planned,
            reason: PreviewReason::PlanReady,
            message: None,
            plan: Some(summary::of(plan, &manifest, &passed.drifts, &passed.changes)),
        },
        Ended::NotPrepared(e) => Answer::failed(PreviewReason::PlanFailed, manifest.mask.text(&e.to_string())),
        other => Answer::failed(PreviewReason::PlanFailed, format!("the pass ended unplanned: {other:?}")),
    })
}

/// A directory removed when this is dropped.
struct RemovedWhenDropped(std::path::PathBuf);

impl Drop for RemovedWhenDropped {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Manifest the proposal would make: the existing one's metadata (its name and uid, which
/// its objects' ownership names) with the proposed spec, or a new one of that name.
fn proposed_manifest(obj: &ManifestPreview, existing: Option<&Manifest>) -> Manifest {
    let mut proposed = Manifest::new(&obj.spec.manifest, ManifestSpec::default());
    if let Some(existing) = existing {
        proposed.metadata = existing.metadata.clone();
    }
    proposed.metadata.namespace = obj.namespace();
    proposed.spec = obj.spec.proposed.clone();
    proposed
}

/// Where and as whom the proposal's image types run: as the Manifest's would, but owned by the
/// preview and labelled by its uid, so that the Manifest's own passes and the preview never
/// stop each other's Pods.
fn pod_scope(obj: &ManifestPreview) -> crate::pod::executor::PodScope {
    crate::pod::executor::PodScope {
        namespace: obj.namespace().unwrap_or_default(),
        service_account: obj.spec.proposed.service_account_name.clone(),
        owner: obj.controller_owner_ref(&()),
        options: obj.spec.proposed.pod.clone().unwrap_or_default(),
        labels: [(PREVIEW_LABEL.to_string(), obj.uid().unwrap_or_default())].into(),
    }
}
