//! `spec.approval: Manual`: a pass that would change something records its plan in
//! `status.pendingPlan` instead, and applies it only once the annotation `deployster.io/approve`
//! names the plan's id — and only if the plan made in that pass is still the same plan (the
//! rule of saved plans: what was known must be what is found).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::crd::{APPROVE_ANNOTATION, Approval, Manifest, PendingPlan, PlannedChange};
use crate::engine::events::{Approver, Decision};
use crate::engine::plan::{Plan, Standing};
use crate::engine::protocol::{Action, Status};
use crate::engine::saved::SavedPlan;
use crate::engine::validate::{ValidatedManifest, content_hash};
use crate::history::format_time;

/// Approves a plan when the object's annotation approves it (or when approval is automatic),
/// and keeps, for the status, the plan it was asked about.
pub struct ManualApproval {
    manifest: Arc<ValidatedManifest>,
    /// The plan pending before this pass.
    pending: Option<PendingPlan>,
    /// What `deployster.io/approve` says.
    approved: Option<String>,
    /// The plan last applied on approval: its approval is used.
    used: Option<String>,
    now_ms: i64,
    asked: Mutex<Option<PendingPlan>>,
}

impl ManualApproval {
    /// `None` when the object's approval is automatic.
    pub fn of(obj: &Manifest, manifest: &Arc<ValidatedManifest>, now_ms: i64) -> Option<ManualApproval> {
        (obj.spec.approval == Approval::Manual).then(|| ManualApproval {
            manifest: manifest.clone(),
            pending: obj.status.as_ref().and_then(|s| s.pending_plan.clone()),
            approved: obj.metadata.annotations.as_ref().and_then(|a| a.get(APPROVE_ANNOTATION).cloned()),
            used: obj.status.as_ref().and_then(|s| s.last_approved_plan.clone()),
            now_ms,
            asked: Mutex::default(),
        })
    }

    /// The plan the pass asked about (recorded as pending when it was not approved).
    pub fn asked(&self) -> Option<PendingPlan> {
        self.asked.lock().expect("approval lock").clone()
    }

    /// An approval that names no pending plan: what to tell the user, if anything.
    pub fn ignored(&self) -> Option<String> {
        let approved = self.approved.as_ref()?;
        let pending = self.pending.as_ref().map(|p| p.id.as_str());
        let asked = self.asked();
        let asked = asked.as_ref().map(|p| p.id.as_str());
        if pending == Some(approved.as_str()) || asked == Some(approved.as_str()) {
            return None;
        }
        // An approval of a plan applied before (the annotation stays) is not news.
        if (pending.is_none() && asked.is_none()) || self.used.as_ref() == Some(approved) {
            return None;
        }
        Some(format!(
            "{APPROVE_ANNOTATION}={approved} names no plan awaiting approval (awaiting: {}); nothing was applied",
            asked.or(pending).unwrap_or("none")
        ))
    }

    /// The pending plan for `plan`: the one already pending when it knew the same, else a new
    /// one, whose id also depends on when it was first recorded — so that the same change,
    /// planned again after it was applied, needs a new approval.
    fn pending_for(&self, plan: &Plan) -> PendingPlan {
        let digest = SavedPlan::new(plan, &self.manifest, &[]).digest();
        let reusable = |p: &&PendingPlan| p.digest == digest && Some(&p.id) != self.used.as_ref();
        if let Some(pending) = self.pending.as_ref().filter(reusable) {
            return pending.clone();
        }
        let created_at = format_time(self.now_ms);
        let changes = plan
            .entries
            .iter()
            .filter_map(|e| {
                let actions = match &e.standing {
                    Standing::NeedsActions { actions, .. } => actions.iter().map(|a| a.name.clone()).collect(),
                    Standing::Pending { .. } => Vec::new(),
                    _ => return None,
                };
                Some(PlannedChange { name: e.name.clone(), status: e.standing.label().into(), actions })
            })
            .collect();
        PendingPlan {
            id: content_hash(&serde_json::json!({"digest": digest, "created_at": created_at})),
            digest,
            revision: self.manifest.revision.clone(),
            created_at,
            changes,
        }
    }
}

#[async_trait]
impl Approver for ManualApproval {
    async fn approve_plan(&self, plan: &Plan) -> Decision {
        let pending = self.pending_for(plan);
        let id = pending.id.clone();
        *self.asked.lock().expect("approval lock") = Some(pending);
        if self.approved.as_deref() == Some(id.as_str()) && self.used.as_deref() != Some(id.as_str()) {
            Decision::Apply
        } else {
            Decision::Decline(format!(
                "plan {id} awaits approval: kubectl annotate manifest.deployster.io {} {APPROVE_ANNOTATION}={id} (or deployster approve)",
                self.manifest.name.rsplit('/').next().unwrap_or_default()
            ))
        }
    }

    async fn approve_resource(&self, _: &str, _: Status, _: &[Action]) -> bool {
        true
    }

    async fn approve_action(&self, _: &str, _: &Action) -> bool {
        true
    }
}
