//! ManifestPreviews: a proposed spec for a Manifest, planned against live state as the
//! proposal's ServiceAccount — states read, Kubernetes objects dry-run, image types' states read
//! in their runners — and nothing applied. The Manifest's own deployment log (its status) is
//! read for drift, changes and what leaves it; nothing is written back to it.
//!
//! A reconcile is named steps: [`expire`] (a preview kept past its TTL is deleted), [`bound`]
//! (its size, how many plan at once in the namespace), [`plan`] (the pass), [`write`] (the
//! status). What the plan becomes in the status is pure ([`summary::of`]).

pub mod slots;
pub mod summary;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::context::Context;
use super::inputs;
use super::manifest::run::{PassRequest, memory_log, run_pass};
use super::reasons::{ConditionType, PreviewPhase, PreviewReason};
use crate::crd::preview::{ManifestPreview, PreviewPlan, PreviewStatus};
use crate::crd::{Condition, Manifest, ManifestSpec};
use crate::engine::events::ApproveAll;
use crate::engine::schedule::AssumeValid;
use crate::engine::validate::ValidatedManifest;
use crate::history::format_time;
use crate::pass::{Ended, Inventory, Mode};

/// The largest proposal planned (its spec as JSON); a larger one fails, said so.
pub const MAX_PROPOSAL_BYTES: usize = 256 * 1024;
/// Previews planned at once in one namespace; the rest wait, `Queued`.
pub const PLANNING_PER_NAMESPACE: usize = 4;
/// How long a preview is kept once planned, unless its spec says.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// How often a queued preview asks again for a slot.
const QUEUED_RETRY: Duration = Duration::from_millis(500);

/// Why a reconcile of a preview could not finish (a plan that failed is no error: the status
/// says why).
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("cannot reach the API: {0}")]
    Kube(#[from] kube::Error),
}

/// The status a preview ends with, or waits with: the controller's answer.
struct Answer {
    phase: PreviewPhase,
    reason: PreviewReason,
    message: Option<String>,
    plan: Option<PreviewPlan>,
}

impl Answer {
    fn failed(reason: PreviewReason, message: String) -> Answer {
        Answer { phase: PreviewPhase::Failed, reason, message: Some(message), plan: None }
    }
}

/// One reconcile of a preview.
pub async fn reconcile(obj: Arc<ManifestPreview>, ctx: Arc<Context>) -> Result<Action, PreviewError> {
    let now = (ctx.clock)();
    let namespace = obj.namespace().unwrap_or_default();
    if !ctx.ownership.owns(&namespace, &obj.spec.manifest) {
        // Planned by the replica that reconciles its Manifest; asked again in a while.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    if let Some(action) = expire(&obj, &ctx, now).await? {
        return Ok(action);
    }
    if let Err(outcome) = bound(&obj) {
        return write(&obj, &ctx, *outcome, now).await;
    }
    let Some(_slot) = ctx.previews.take(&namespace, PLANNING_PER_NAMESPACE) else {
        let message = format!(
            "{PLANNING_PER_NAMESPACE} previews are being planned in namespace {namespace} (at most \
             {PLANNING_PER_NAMESPACE} at once); this one waits for a slot"
        );
        let queued = Answer {
            phase: PreviewPhase::Queued,
            reason: PreviewReason::TooManyPreviews,
            message: Some(message),
            plan: None,
        };
        if obj.status.as_ref().and_then(|s| s.phase.as_deref()) != Some(PreviewPhase::Queued.as_str()) {
            write(&obj, &ctx, queued, now).await?;
        }
        return Ok(Action::requeue(QUEUED_RETRY));
    };
    let mut outcome = plan(&obj, &ctx).await?;
    let waited = obj.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(PreviewPhase::Queued.as_str());
    if waited && outcome.message.is_none() {
        outcome.message = Some(format!(
            "planned after waiting for a slot (at most {PLANNING_PER_NAMESPACE} previews are planned at once in a namespace)"
        ));
    }
    write(&obj, &ctx, outcome, (ctx.clock)()).await
}

/// The requeue after an error: soon, as the error is the API's.
pub fn error_policy(obj: Arc<ManifestPreview>, error: &PreviewError, _: Arc<Context>) -> Action {
    tracing::warn!(preview = %obj.name_any(), error = %error, "a preview's reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// How long `obj` is kept once planned.
fn ttl(obj: &ManifestPreview) -> Duration {
    obj.spec.ttl_seconds_after_finished.map_or(DEFAULT_TTL, |s| Duration::from_secs(u64::from(s)))
}

/// A preview planned for this generation: deleted once its TTL passed, else looked at again
/// then. `None`: it is to be planned.
async fn expire(obj: &ManifestPreview, ctx: &Context, now: i64) -> Result<Option<Action>, PreviewError> {
    let Some(status) = &obj.status else { return Ok(None) };
    let finished = matches!(status.phase.as_deref(), Some(p) if p == PreviewPhase::Planned.as_str() || p == PreviewPhase::Failed.as_str());
    if !finished || status.observed_generation != obj.meta().generation {
        return Ok(None);
    }
    let at = status.finished_at.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
    let at_ms = at.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(now, |d| d.as_millis() as i64);
    let left = (at_ms + ttl(obj).as_millis() as i64) - now;
    if left > 0 {
        return Ok(Some(Action::requeue(Duration::from_millis(left as u64))));
    }
    let api: Api<ManifestPreview> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    match api.delete(&obj.name_any(), &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Some(Action::await_change()))
}

/// A proposal over [`MAX_PROPOSAL_BYTES`] is not planned.
fn bound(obj: &ManifestPreview) -> Result<(), Box<Answer>> {
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
async fn plan(obj: &ManifestPreview, ctx: &Context) -> Result<Answer, PreviewError> {
    let namespace = obj.namespace().unwrap_or_default();
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
    let prepared = inputs::prepare(&ctx.client, &proposed, &settings).await;
    let _ = std::fs::remove_dir_all(&settings.plug_root);
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

/// The label that names the preview (its uid) on the Pods of its plan.
pub const PREVIEW_LABEL: &str = "deployster.io/preview-uid";

/// Writes `outcome` into the preview's status (a merge patch), and says when to look again.
async fn write(obj: &ManifestPreview, ctx: &Context, outcome: Answer, now: i64) -> Result<Action, PreviewError> {
    let done = matches!(outcome.phase, PreviewPhase::Planned | PreviewPhase::Failed);
    let ready = Condition {
        type_: ConditionType::Ready.as_str().into(),
        status: match outcome.phase {
            PreviewPhase::Planned => "True",
            PreviewPhase::Failed => "False",
            PreviewPhase::Queued | PreviewPhase::Planning => "Unknown",
        }
        .into(),
        reason: outcome.reason.as_str().into(),
        message: outcome
            .message
            .clone()
            .or_else(|| outcome.plan.as_ref().map(|p| p.summary.clone()))
            .unwrap_or_default(),
        last_transition_time: format_time(now),
        observed_generation: obj.meta().generation,
    };
    let status = PreviewStatus {
        conditions: vec![ready],
        phase: Some(outcome.phase.as_str().into()),
        reason: Some(outcome.reason.as_str().into()),
        message: outcome.message,
        plan: outcome.plan,
        observed_generation: obj.meta().generation,
        finished_at: done.then(|| format_time(now)),
    };
    let api: Api<ManifestPreview> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    // A merge patch: what this outcome lacks is cleared (an earlier plan, an earlier message).
    let mut written = serde_json::to_value(&status).expect("statuses serialize");
    for key in ["message", "plan", "finishedAt"] {
        written.as_object_mut().expect("an object").entry(key).or_insert(serde_json::Value::Null);
    }
    let patch = serde_json::json!({"status": written});
    match api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {}
        // Deleted meanwhile (abandoned): nothing to keep.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    }
    Ok(if done { Action::requeue(ttl(obj)) } else { Action::requeue(QUEUED_RETRY) })
}

/// A controller of ManifestPreviews for each scope, when their CRD is installed (without it,
/// previews are not planned, said once).
pub async fn controllers(
    client: &kube::Client,
    scopes: &[Option<String>],
    ctx: &Arc<Context>,
    stopping: &CancellationToken,
) -> super::Controllers {
    use futures::StreamExt;
    use kube::runtime::{Controller, watcher};
    let mut controllers: super::Controllers = Vec::new();
    for scope in scopes {
        let api: Api<ManifestPreview> = super::scoped(client, scope);
        let what = "ManifestPreviews are not planned";
        match super::listable(&api, scope, what, "manifestpreviews.deployster.io", "preview").await {
            None => return Vec::new(),
            Some(false) => continue,
            Some(true) => {}
        }
        let controller = Controller::new(api, watcher::Config::default())
            .graceful_shutdown_on(stopping.clone().cancelled_owned())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|result| async move {
                if let Ok((object, _)) = result {
                    tracing::debug!(preview = %object.name, "reconciled");
                }
            });
        controllers.push(Box::pin(controller));
    }
    controllers
}
