//! What a plan found and what an apply did.
//!
//! [`Plan`] is produced by [`crate::engine::run::Prepared::plan`] without running any action;
//! [`Report`] only by [`crate::engine::run::Prepared::apply`], from executed results. Both hold
//! [`ResourceEntry`]s: one [`Standing`] per resource, whatever the stage.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use super::error::ResourceError;
use super::mask::Mask;
use super::protocol::{Action, StateResponse, Status};
use super::validate::ValidatedManifest;

/// A line a type asked to show the user (its init or state reply's `warnings`), masked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeWarning {
    pub resource: String,
    pub phase: super::error::Phase,
    pub message: String,
}

/// How many warnings one run keeps, whatever its types say.
pub const RUN_WARNINGS_KEPT: usize = 100;

/// A resource that was VALID at its previous observation (in the deployment log) and is not now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub resource: String,
    pub now: Status,
}

/// A resource STALE or MISSING now whose inputs differ from those it was last VALID with: the
/// configuration changed (a change to apply), which is not drift.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub resource: String,
    pub now: Status,
    /// Whether it was VALID at its last observation (otherwise it was already not).
    pub was_valid: bool,
    pub differences: Vec<Difference>,
}

/// What a resource's state was read for: its type and rendered config (sensitive values
/// masked), and a digest of the unmasked inputs — the same digest, the same inputs. As the
/// deployment log keeps it: `{type, config, digest}`, and `sensitive`: each masked value's
/// keyed fingerprint by its path, when the log has a key ([`Mask::fingerprint`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Inputs {
    #[serde(rename = "type")]
    pub type_name: String,
    pub config: Value,
    pub digest: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sensitive: BTreeMap<String, String>,
}

impl Inputs {
    pub fn new(manifest: &ValidatedManifest, i: usize, config: &Value) -> Inputs {
        let type_name = manifest.resources[i].type_name.clone();
        let digest = manifest.mask.digest(&json!({"type": type_name, "config": config}));
        let shown = manifest.mask.value(config);
        let mut sensitive = BTreeMap::new();
        fingerprints(&manifest.mask, "config", config, &shown, &mut sensitive);
        Inputs { type_name, config: shown, digest, sensitive }
    }

    /// As the deployment log kept it, if it did.
    pub fn from_json(value: &Value) -> Option<Inputs> {
        serde::Deserialize::deserialize(value).ok()
    }

    /// Where `self` (before) and `now` differ: the type, and each config value by its path —
    /// a sensitive one too, masked, when both sides were fingerprinted with the same key.
    /// Otherwise a change only in sensitive values shows as `config` changed, masked.
    pub fn differences(&self, now: &Inputs) -> Vec<Difference> {
        let mut found = Vec::new();
        if self.type_name != now.type_name {
            found.push(Difference {
                path: "type".into(),
                was: Some(json!(self.type_name)),
                now: Some(json!(now.type_name)),
            });
        }
        diff_values("config", Some(&self.config), Some(&now.config), &mut found);
        let key = |f: &String| f.split(':').next().map(str::to_string);
        let keys: BTreeSet<_> = self.sensitive.values().chain(now.sensitive.values()).map(key).collect();
        if !self.sensitive.is_empty() && !now.sensitive.is_empty() && keys.len() == 1 {
            for path in self.sensitive.keys().chain(now.sensitive.keys()).collect::<BTreeSet<_>>() {
                let (was, is) = (self.sensitive.get(path), now.sensitive.get(path));
                if was != is && !found.iter().any(|d| d.path == *path) {
                    let masked = |f: Option<&String>| f.map(|_| json!("***"));
                    found.push(Difference { path: path.clone(), was: masked(was), now: masked(is) });
                }
            }
        }
        if found.is_empty() && self.digest != now.digest {
            found.push(Difference { path: "config".into(), was: Some(json!("***")), now: Some(json!("***")) });
        }
        found
    }
}

/// The keyed fingerprint of each value of `raw` that masking changed (`shown`), by its path.
fn fingerprints(mask: &Mask, path: &str, raw: &Value, shown: &Value, into: &mut BTreeMap<String, String>) {
    match (raw, shown) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                if let Some(masked) = b.get(key) {
                    fingerprints(mask, &format!("{path}.{key}"), value, masked, into);
                }
            }
        }
        (a, b) if a != b => {
            if let Some(fingerprint) = mask.fingerprint(a) {
                into.insert(path.to_string(), fingerprint);
            }
        }
        _ => {}
    }
}

/// One value that differs between two inputs; `None`: absent on that side.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Difference {
    pub path: String,
    pub was: Option<Value>,
    pub now: Option<Value>,
}

fn diff_values(path: &str, was: Option<&Value>, now: Option<&Value>, found: &mut Vec<Difference>) {
    match (was, now) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                diff_values(&format!("{path}.{key}"), a.get(key), b.get(key), found);
            }
        }
        (a, b) if a != b => found.push(Difference { path: path.to_string(), was: a.cloned(), now: b.cloned() }),
        _ => {}
    }
}

/// A dependency a pending resource waits on, and how it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub resource: String,
    /// `STALE`, `MISSING` or `PENDING`.
    pub status: String,
}

/// A config value that cannot be known until a dependency is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownInput {
    /// Path inside the config, e.g. `config.path`.
    pub path: String,
    /// The template that reads the unknown value.
    pub expression: String,
}

/// Where one resource stands: what a plan found, what an apply did — one shape for both, and
/// for the coordinator in between.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// VALID, with its state; `applied` lists the actions this run ran to make it so.
    Valid {
        state: Value,
        applied: Option<Vec<Ran>>,
    },
    /// STALE or MISSING, and the actions that would make it VALID (a plan's finding), with
    /// the state its type plans it to have after them, if it said.
    NeedsActions {
        status: Status,
        stale_state: Option<Value>,
        planned_state: Option<Value>,
        actions: Vec<Action>,
    },
    /// Waiting on a dependency that is not VALID yet (and, during a run, not reached yet).
    /// A plan reads it anyway where its dependencies' states are known as found (a STALE
    /// dependency's state before its actions): `found` is what its state action said then, and
    /// `unknown_inputs` only what those actions may still change.
    Pending {
        waiting_on: Vec<Waiting>,
        unknown_inputs: Vec<UnknownInput>,
        found: Option<Box<StateResponse>>,
    },
    Failed(ResourceError),
    /// A dependency (`by`, the root cause) failed or was declined.
    Blocked {
        by: String,
    },
    /// The user declined its actions.
    Declined,
    /// The run was cancelled before the resource could start.
    Cancelled,
}

impl Standing {
    /// Not looked at yet.
    pub(crate) fn unread() -> Standing {
        Standing::Pending { waiting_on: Vec::new(), unknown_inputs: Vec::new(), found: None }
    }

    /// What a plan foresees of a resource waiting on its dependencies' actions: read over
    /// their planned states (or their states as found) with nothing it reads still unknown,
    /// what it was found to be then is what applying finds — or applying runs nothing on it.
    pub fn foreseen(&self) -> Option<&StateResponse> {
        match self {
            Standing::Pending { found: Some(found), unknown_inputs, .. } if unknown_inputs.is_empty() => Some(found),
            _ => None,
        }
    }

    /// Whether the plan knows it will be created: read while it waits, with values still
    /// unknown, and found MISSING (see `state_with_unknowns`).
    pub fn to_be_created(&self) -> bool {
        matches!(self, Standing::Pending { found: Some(found), .. } if found.status() == Status::Missing)
    }

    /// The word shown for this resource.
    pub fn label(&self) -> &'static str {
        if self.to_be_created() {
            return "MISSING";
        }
        if let Some(found) = self.foreseen() {
            return match found.status() {
                Status::Valid => "VALID",
                Status::Stale => "STALE",
                Status::Missing => "MISSING",
            };
        }
        match self {
            Standing::Valid { applied: None, .. } => "VALID",
            Standing::Valid { applied: Some(_), .. } => "APPLIED",
            Standing::NeedsActions { status: Status::Missing, .. } => "MISSING",
            Standing::NeedsActions { .. } => "STALE",
            Standing::Pending { .. } => "PENDING",
            Standing::Failed(_) => "FAILED",
            Standing::Blocked { .. } => "BLOCKED",
            Standing::Declined => "DECLINED",
            Standing::Cancelled => "CANCELLED",
        }
    }

    /// The state of a VALID resource.
    pub fn state(&self) -> Option<&Value> {
        match self {
            Standing::Valid { state, .. } => Some(state),
            _ => None,
        }
    }

    /// A line of detail for progress and the log.
    pub fn message(&self) -> Option<String> {
        match self {
            Standing::Failed(e) => Some(e.to_string()),
            Standing::Blocked { by } => Some(format!("blocked by {by}")),
            Standing::NeedsActions { actions, .. } => {
                Some(actions.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", "))
            }
            Standing::Valid { applied: Some(ran), .. } => Some(action_names(ran)),
            _ => None,
        }
    }
}

/// An action a run ran, with the result pairs it reported in its messages (sensitive values
/// masked).
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    pub action: String,
    pub results: Vec<(String, String)>,
}

/// The names of the actions `ran`, joined for a line of text.
pub fn action_names(ran: &[Ran]) -> String {
    ran.iter().map(|r| r.action.as_str()).collect::<Vec<_>>().join(", ")
}

/// One resource in a plan or a report.
#[derive(Debug, Clone)]
pub struct ResourceEntry {
    pub name: String,
    pub type_name: String,
    pub standing: Standing,
    pub elapsed: Duration,
    /// The rendered config the state action saw; kept for apply, never shown (it may hold
    /// values of variables, which carry credentials).
    pub(crate) config: Option<Value>,
}

/// What became of one resource — or, planned, what will.
#[derive(Debug, Clone, PartialEq)]
pub enum Removal {
    /// Planned: its delete action will run.
    ToDelete,
    /// Its delete action ran and it is MISSING now.
    Deleted,
    /// It did not exist.
    Absent,
    /// Left in place and still held (in the inventory): deleted by a later run once it can be.
    Kept {
        reason: String,
    },
    /// Left in place for good, and no longer held: its type cannot delete it, it is `readonly`,
    /// or a resource left so depends on it.
    Forgotten {
        reason: String,
    },
    Failed(ResourceError),
    /// Renamed in the manifest (`moved`): held under its new name from now on, nothing deleted.
    Moved {
        to: String,
    },
}

impl Removal {
    pub fn label(&self) -> &'static str {
        match self {
            Removal::ToDelete => "DELETE",
            Removal::Deleted => "DELETED",
            Removal::Absent => "ABSENT",
            Removal::Kept { .. } => "KEPT",
            Removal::Forgotten { .. } => "FORGOTTEN",
            Removal::Failed(_) => "FAILED",
            Removal::Moved { .. } => "MOVED",
        }
    }

    /// Why it is left in place, or how it failed.
    pub fn message(&self) -> Option<String> {
        match self {
            Removal::Kept { reason } | Removal::Forgotten { reason } => Some(reason.clone()),
            Removal::Failed(e) => Some(e.to_string()),
            Removal::Moved { to } => Some(format!("moved to {to}")),
            _ => None,
        }
    }

    /// Whether a run changes anything for it: runs its delete action, or lets it go.
    pub fn is_change(&self) -> bool {
        matches!(self, Removal::ToDelete | Removal::Forgotten { .. } | Removal::Absent | Removal::Moved { .. })
    }
}

#[derive(Debug, Clone)]
pub struct RemovalEntry {
    pub name: String,
    pub type_name: String,
    pub removal: Removal,
}

/// The result of planning a manifest.
#[derive(Debug, Clone)]
pub struct Plan {
    pub manifest: String,
    pub run_id: String,
    pub entries: Vec<ResourceEntry>,
    /// The resources that left the manifest (its inventory holds them, it no longer declares
    /// them), dependents first, and what applying does to each.
    pub removals: Vec<RemovalEntry>,
    /// How many resources the manifest's inventory held when the plan was made.
    pub held: usize,
    /// What a reader of the plan should not miss (a removal that looks like a rename).
    pub notes: Vec<String>,
    /// Hides sensitive values in what is shown of it (states).
    pub mask: Mask,
    /// What the types warned of while it was made (their init and state replies).
    pub warnings: Vec<TypeWarning>,
    /// Declared resources whose identity moved: each old one is among the removals, deleted
    /// first; the new one is created by the entry's actions.
    pub replacements: Vec<Replacement>,
}

/// A resource whose identity fields moved from those the inventory holds: "must be replaced".
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    pub name: String,
    pub type_name: String,
    pub moved: Vec<super::identity::Moved>,
}

impl Replacement {
    /// `path: "/srv/a" → "/srv/b"`, each field moved.
    pub fn describe(&self) -> String {
        let moved: Vec<String> = self.moved.iter().map(|m| format!("{}: {} → {}", m.field, m.was, m.now)).collect();
        moved.join(", ")
    }
}

/// How many entries of a plan or report stand each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub valid: usize,
    pub to_apply: usize,
    pub pending: usize,
    pub applied: usize,
    pub failed: usize,
    pub blocked: usize,
    /// Declined or cancelled.
    pub declined: usize,
}

fn counts(entries: &[ResourceEntry]) -> Counts {
    let mut c = Counts::default();
    for e in entries {
        match e.standing.foreseen() {
            Some(StateResponse::Valid { .. }) => c.valid += 1,
            Some(StateResponse::NeedsActions { .. }) => c.to_apply += 1,
            None => {}
        }
        if e.standing.foreseen().is_some() {
            continue;
        }
        if e.standing.to_be_created() {
            c.to_apply += 1;
            continue;
        }
        match e.standing {
            Standing::Valid { applied: None, .. } => c.valid += 1,
            Standing::Valid { applied: Some(_), .. } => c.applied += 1,
            Standing::NeedsActions { .. } => c.to_apply += 1,
            Standing::Pending { .. } => c.pending += 1,
            Standing::Failed(_) => c.failed += 1,
            Standing::Blocked { .. } => c.blocked += 1,
            Standing::Declined | Standing::Cancelled => c.declined += 1,
        }
    }
    c
}

impl Plan {
    /// The replacement of resource `name`, when its identity moved.
    pub fn replacement(&self, name: &str) -> Option<&Replacement> {
        self.replacements.iter().find(|r| r.name == name)
    }

    pub fn counts(&self) -> Counts {
        counts(&self.entries)
    }

    /// Whether applying would do anything.
    pub fn has_changes(&self) -> bool {
        let c = self.counts();
        c.to_apply + c.pending > 0 || self.removals.iter().any(|r| r.removal.is_change())
    }

    /// How many resources applying deletes, when that is more than half of what the
    /// inventory holds (every resource, say, when a manifest was emptied or renamed by
    /// mistake): such a deletion is asked for louder, and never taken as approved by default.
    pub fn mass_deletion(&self) -> Option<usize> {
        self.deletions_beyond(50)
    }

    /// How many resources applying deletes, when that is more than `percent` of what the
    /// inventory holds — or all of it, whatever `percent` says.
    pub fn deletions_beyond(&self, percent: u8) -> Option<usize> {
        let deleting = self.deleting().count();
        let beyond = deleting * 100 > usize::from(percent) * self.held || deleting >= self.held;
        (deleting > 0 && beyond).then_some(deleting)
    }

    /// The removals that run a delete action.
    pub fn deleting(&self) -> impl Iterator<Item = &RemovalEntry> {
        self.removals.iter().filter(|r| r.removal == Removal::ToDelete)
    }

    /// Whether the plan is sound enough to apply: nothing failed or blocked.
    pub fn is_applicable(&self) -> bool {
        let c = self.counts();
        c.failed + c.blocked == 0
    }
}

/// The result of applying a plan. Built only by the engine from executed results: its fields
/// are private, so that nothing else can fabricate one (the controller's status is built from
/// reports only).
#[derive(Debug, Clone)]
pub struct Report {
    manifest: String,
    run_id: String,
    entries: Vec<ResourceEntry>,
    mask: Mask,
    warnings: Vec<TypeWarning>,
}

impl Report {
    pub(crate) fn new(manifest: String, run_id: String, entries: Vec<ResourceEntry>, mask: Mask) -> Self {
        Self { manifest, run_id, entries, mask, warnings: Vec::new() }
    }

    pub(crate) fn with_warnings(self, warnings: Vec<TypeWarning>) -> Self {
        Self { warnings, ..self }
    }

    /// What the types warned of while it was applied (states read again, after actions).
    pub fn warnings(&self) -> &[TypeWarning] {
        &self.warnings
    }

    /// Nothing of `plan` applied: what needed actions was cancelled before it started.
    pub(crate) fn untouched(plan: &Plan) -> Self {
        let mut entries = plan.entries.clone();
        for e in entries.iter_mut().filter(|e| !matches!(e.standing, Standing::Valid { .. })) {
            e.standing = Standing::Cancelled;
        }
        Self::new(plan.manifest.clone(), plan.run_id.clone(), entries, plan.mask.clone())
    }

    /// Hides sensitive values in what is shown of it (states).
    pub fn mask(&self) -> &Mask {
        &self.mask
    }

    pub fn manifest(&self) -> &str {
        &self.manifest
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn entries(&self) -> &[ResourceEntry] {
        &self.entries
    }

    pub fn counts(&self) -> Counts {
        counts(&self.entries)
    }

    /// Whether every resource ended VALID.
    pub fn succeeded(&self) -> bool {
        self.entries.iter().all(|e| matches!(e.standing, Standing::Valid { .. }))
    }
}
