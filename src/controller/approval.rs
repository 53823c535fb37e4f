//! `spec.approval: Manual`: a pass that would change something records its plan in
//! `status.pendingPlan` instead, and applies it only once the annotation `deployster.io/approve`
//! names the plan's id — and only if the plan made in that pass is still the same plan (the
//! rule of saved plans: what was known must be what is found).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use kube::ResourceExt;

use crate::crd::{ALLOW_DELETES_ANNOTATION, APPROVE_ANNOTATION, Approval, Manifest, PendingPlan, PlannedChange};
use crate::engine::events::{Approver, Decision};
use crate::engine::plan::{Plan, Removal, Standing};
use crate::engine::protocol::{Action, StateResponse, Status};
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
    /// one. Its id is the digest of what it knew — the id a preview of the same spec showed —
    /// unless that plan was applied on approval before: the same change planned again then
    /// gets an id of its own (the digest and when it was first recorded), so that it needs a
    /// new approval, and the approval left on the object approves nothing.
    fn pending_for(&self, plan: &Plan) -> PendingPlan {
        let digest = plan_digest(plan, &self.manifest);
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
                    // Foreseen VALID after its dependencies' actions: no change of its own.
                    _ if matches!(e.standing.foreseen(), Some(StateResponse::Valid { .. })) => return None,
                    Standing::NeedsActions { actions, .. } => actions.iter().map(|a| a.name.clone()).collect(),
                    Standing::Pending { found, .. } => match found.as_deref() {
                        Some(StateResponse::NeedsActions { actions, .. }) => {
                            actions.iter().map(|a| a.name.clone()).collect()
                        }
                        _ => Vec::new(),
                    },
                    _ => return None,
                };
                Some(PlannedChange { name: e.name.clone(), status: e.standing.label().into(), actions })
            })
            .chain(plan.removals.iter().filter(|r| r.removal.is_change()).map(|r| PlannedChange {
                name: r.name.clone(),
                status: r.removal.label().into(),
                actions: if r.removal == Removal::ToDelete { vec!["delete".into()] } else { Vec::new() },
            }))
            .collect();
        let id = match self.used.as_deref() == Some(digest.as_str()) {
            false => digest.clone(),
            true => content_hash(&serde_json::json!({"digest": digest, "created_at": created_at})),
        };
        PendingPlan { id, digest, revision: self.manifest.revision.clone(), created_at, changes }
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
                "plan {id} awaits approval: kubectl annotate manifest.deployster.io {} {APPROVE_ANNOTATION}={id} --overwrite (or deployster approve)",
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

/// The deletion guard: a pass that would delete more than `spec.maxDeletionPercent` of what
/// the Manifest holds (or all of it) is refused — nothing deleted, nothing applied — until
/// `deployster.io/allow-deletes` names the revision; then `inner` decides as usual.
pub struct DeletionGuard<'a> {
    inner: &'a dyn Approver,
    percent: u8,
    /// Whether the annotation acknowledges this revision's deletions.
    allowed: bool,
    manifest: Arc<ValidatedManifest>,
    tripped: Mutex<Option<String>>,
}

/// The share of its resources a Manifest may delete in one pass without acknowledgement.
pub const DEFAULT_DELETION_PERCENT: u8 = 50;

impl<'a> DeletionGuard<'a> {
    pub fn of(obj: &Manifest, manifest: &Arc<ValidatedManifest>, inner: &'a dyn Approver) -> Self {
        let allowed = obj.annotations().get(ALLOW_DELETES_ANNOTATION) == Some(&manifest.revision);
        DeletionGuard {
            inner,
            percent: obj.spec.max_deletion_percent.unwrap_or(DEFAULT_DELETION_PERCENT),
            allowed,
            manifest: manifest.clone(),
            tripped: Mutex::default(),
        }
    }

    /// What the guard said, when it refused the plan.
    pub fn tripped(&self) -> Option<String> {
        self.tripped.lock().expect("guard lock").clone()
    }

    fn refusal(&self, plan: &Plan, deleting: usize) -> String {
        let names: Vec<String> = plan.deleting().map(|r| format!("{} ({})", r.name, r.type_name)).collect();
        let name = self.manifest.name.rsplit('/').next().unwrap_or_default();
        let revision = &self.manifest.revision;
        format!(
            "would delete {deleting} of the {} resources it holds, more than maxDeletionPercent ({}%) allows: {}; \
             nothing was deleted or applied. If that is meant: kubectl annotate manifest.deployster.io {name} \
             {ALLOW_DELETES_ANNOTATION}={revision} --overwrite",
            plan.held,
            self.percent,
            names.join(", ")
        )
    }
}

#[async_trait]
impl Approver for DeletionGuard<'_> {
    async fn approve_plan(&self, plan: &Plan) -> Decision {
        match plan.deletions_beyond(self.percent).filter(|_| !self.allowed) {
            Some(deleting) => {
                let why = self.refusal(plan, deleting);
                *self.tripped.lock().expect("guard lock") = Some(why.clone());
                Decision::Refuse(why)
            }
            None => self.inner.approve_plan(plan).await,
        }
    }

    async fn approve_resource(&self, resource: &str, status: Status, actions: &[Action]) -> bool {
        self.inner.approve_resource(resource, status, actions).await
    }

    async fn approve_action(&self, resource: &str, action: &Action) -> bool {
        self.inner.approve_action(resource, action).await
    }
}

/// The digest of what `plan` (of `manifest`) knew, as a reviewer names it: whatever the
/// Manifest's generation, so that a preview of a spec (planned before it was merged) and the
/// controller's plan of the merged spec are one id when they know the same.
pub fn plan_digest(plan: &Plan, manifest: &ValidatedManifest) -> String {
    let mut saved = SavedPlan::new(plan, manifest, &[]);
    saved.revision = super::manifest::inputs::content_of(&saved.revision).to_string();
    saved.digest()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::events::ApproveAll;
    use crate::engine::plan::RemovalEntry;

    fn plan(deleting: usize, held: usize) -> Plan {
        let removals = (0..deleting)
            .map(|i| RemovalEntry {
                name: format!("r{i}"),
                type_name: "builtin/kubernetes".into(),
                removal: Removal::ToDelete,
            })
            .collect();
        Plan {
            manifest: "team/app".into(),
            run_id: "r".into(),
            entries: Vec::new(),
            removals,
            held,
            notes: Vec::new(),
            warnings: Vec::new(),
            replacements: Vec::new(),
            mask: Default::default(),
        }
    }

    fn object(spec: &str, allowed: Option<&str>) -> (Manifest, Arc<ValidatedManifest>) {
        let mut obj = Manifest::new("app", serde_norway::from_str(spec).unwrap());
        if let Some(revision) = allowed {
            obj.metadata.annotations = Some([(ALLOW_DELETES_ANNOTATION.to_string(), revision.to_string())].into());
        }
        let loaded = crate::engine::manifest::LoadedManifest::from_spec("manifest", Default::default());
        let mut manifest = crate::engine::validate::validate_kept(&loaded, Default::default()).unwrap();
        (manifest.name, manifest.revision) = ("team/app".into(), "4-abc".into());
        (obj, Arc::new(manifest))
    }

    /// More than the share deletes nothing without the annotation naming this revision; all of
    /// it, never; within the share, the inner approver decides.
    #[tokio::test]
    async fn the_guard_refuses_beyond_its_share_until_the_revision_is_acknowledged() {
        let (obj, manifest) = object("resources: {}\nmaxDeletionPercent: 25\n", None);
        let guard = DeletionGuard::of(&obj, &manifest, &ApproveAll);
        assert_eq!(guard.approve_plan(&plan(1, 4)).await, Decision::Apply, "25 % is within");
        assert!(guard.tripped().is_none());
        let Decision::Refuse(why) = guard.approve_plan(&plan(2, 4)).await else { panic!("refused") };
        assert!(why.contains("would delete 2 of the 4") && why.contains("r0 (builtin/kubernetes), r1"), "{why}");
        assert!(why.contains("kubectl annotate manifest.deployster.io app deployster.io/allow-deletes=4-abc"), "{why}");
        assert_eq!(guard.tripped(), Some(why));

        let (obj, manifest) = object("resources: {}\nmaxDeletionPercent: 100\n", Some("3-old"));
        let guard = DeletionGuard::of(&obj, &manifest, &ApproveAll);
        assert!(matches!(guard.approve_plan(&plan(3, 3)).await, Decision::Refuse(_)), "everything, whatever the share");
        let (obj, manifest) = object("resources: {}\n", Some("4-abc"));
        let guard = DeletionGuard::of(&obj, &manifest, &ApproveAll);
        assert_eq!(guard.approve_plan(&plan(3, 3)).await, Decision::Apply, "acknowledged");
        assert!(guard.tripped().is_none());
    }

    /// With `approval: Manual`, the pending plan lists what it would delete: a reviewer
    /// approves the deletions too.
    #[tokio::test]
    async fn a_pending_plan_lists_its_deletions() {
        let (obj, manifest) = object("resources: {}\napproval: Manual\n", None);
        let manual = ManualApproval::of(&obj, &manifest, 0).expect("manual");
        assert!(matches!(manual.approve_plan(&plan(1, 4)).await, Decision::Decline(_)));
        let changes = manual.asked().unwrap().changes;
        assert_eq!(
            changes,
            [PlannedChange { name: "r0".into(), status: "DELETE".into(), actions: vec!["delete".into()] }]
        );
    }

    /// One id for a plan, wherever it is said: the pending plan's id is the digest a preview of
    /// the same spec shows, and either route approves it; once applied, the same change planned
    /// again gets an id of its own, which the approval left on the object does not approve.
    #[tokio::test]
    async fn a_plan_s_id_is_its_digest_until_it_was_applied_once() {
        let spec = "resources: {}\napproval: Manual\n";
        let (mut obj, manifest) = object(spec, None);
        let digest = plan_digest(&plan(1, 4), &manifest);
        let manual = ManualApproval::of(&obj, &manifest, 0).expect("manual");
        let Decision::Decline(why) = manual.approve_plan(&plan(1, 4)).await else { panic!("asked first") };
        let pending = manual.asked().unwrap();
        assert_eq!((pending.id.as_str(), pending.digest.as_str()), (digest.as_str(), digest.as_str()));
        assert!(why.contains(&format!("{APPROVE_ANNOTATION}={digest} --overwrite")), "{why}");

        // Approved by the previewed id: applied.
        obj.metadata.annotations = Some([(APPROVE_ANNOTATION.to_string(), digest.clone())].into());
        let manual = ManualApproval::of(&obj, &manifest, 0).unwrap();
        assert_eq!(manual.approve_plan(&plan(1, 4)).await, Decision::Apply);

        // Applied: the same change again, the annotation still there, waits under a new id.
        obj.status =
            Some(crate::crd::ManifestStatus { last_approved_plan: Some(digest.clone()), ..Default::default() });
        let manual = ManualApproval::of(&obj, &manifest, 60_000).unwrap();
        assert!(matches!(manual.approve_plan(&plan(1, 4)).await, Decision::Decline(_)), "used once");
        let again = manual.asked().unwrap();
        assert_ne!(again.id, digest, "a new id for the same change planned again");
        assert_eq!(again.digest, digest);
    }
}
