//! The `Manifest` custom resource (`deployster.io/v1alpha1`): the engine's manifest as a
//! Kubernetes object, reconciled by the controller.
//!
//! The spec embeds the engine's [`ResourceSpec`], so the CLI and the controller accept the
//! same resources. Plugs differ: in a cluster they reference a Secret, a ConfigMap or a
//! PersistentVolumeClaim, which the Pods of image types mount (or, without Pods, the controller
//! materializes to files). `crds/manifest.yaml` is generated from these types by
//! `deployster crd`; a test fails when the committed file differs.

use std::collections::BTreeMap;

use compact_str::CompactString;
use indexmap::IndexMap;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::engine::manifest::ResourceSpec;

pub mod pipeline;
pub mod preview;
pub mod reference;

/// The desired state: a manifest, plus how the controller keeps it.
// Each `printcolumn(...)` repeats `type_ = "string"`; clippy reads those macro arguments as
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "deployster.io",
    version = "v1alpha1",
    kind = "Manifest",
    plural = "manifests",
    shortname = "dm",
    category = "deployster",
    namespaced,
    status = "ManifestStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A set of resources Deployster keeps as declared.",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Resources", type_ = "string", json_path = ".status.resourcesSummary"),
    printcolumn(name = "Last Applied", type_ = "string", json_path = ".status.lastAppliedRevision"),
    printcolumn(name = "Progress", type_ = "string", json_path = ".status.progress"),
    printcolumn(name = "Replica", type_ = "string", json_path = ".status.shard.replica", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestSpec {
    /// Variables for expressions, as in a manifest's `vars`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(schema_with = "free_form_object")]
    pub vars: IndexMap<String, Value>,
    /// Plugs, as references to a Secret or a ConfigMap in the same namespace.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub plugs: IndexMap<String, PlugRef>,
    /// Variables read from Secrets in the same namespace — each key a variable (or only `key`)
    /// — after `vars`, in order. They are sensitive: masked wherever shown or kept, never
    /// rendered as templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars_from: Vec<VarsFrom>,
    /// The resources, exactly as in a manifest file.
    pub resources: IndexMap<String, ResourceSpec>,
    /// Variables whose values are secret, as in a manifest's `sensitive`: masked as `***` in the
    /// rendered configs the history keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive: Vec<String>,
    /// How often a Ready manifest is checked for drift (e.g. `5m`).
    #[serde(default = "default_interval")]
    pub interval: String,
    /// Wait after a failure, doubled on each consecutive failure up to `interval`.
    #[serde(default = "default_retry_interval")]
    pub retry_interval: String,
    /// A resource found VALID on several checks in a row is checked less often, up to this
    /// (e.g. `20m`) [default: 4 × `interval`]; drift or a change puts it back to `interval`.
    /// Set it to `interval` for fixed checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_interval: Option<String>,
    /// Stop reconciling; the status is kept as it is.
    #[serde(default)]
    pub suspend: bool,
    /// What happens to the resources when the Manifest is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// What happens to a resource this Manifest applied once it leaves `resources` [default:
    /// as `deletionPolicy`]: `Delete` runs its type's delete action (dependents first, before
    /// anything declared is applied); `Orphan` leaves it in place and forgets it. Either way an
    /// event names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal_policy: Option<DeletionPolicy>,
    /// A pass that would delete more than this share (percent) of the resources the Manifest
    /// holds — and always one that would delete every one, as an emptied spec would — deletes
    /// nothing, and applies nothing, until the annotation `deployster.io/allow-deletes` names
    /// its revision [default: 50].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_deletion_percent: Option<u8>,
    /// Resources renamed in `resources`, `{old: new}`: each is moved, with its state and
    /// history, instead of being deleted and created anew.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub moved: IndexMap<String, String>,
    /// `Automatic`: apply what a pass plans. `Manual`: record the plan in `status.pendingPlan`
    /// and apply it only once the annotation `deployster.io/approve` names its id.
    #[serde(default)]
    pub approval: Approval,
    /// Named values rendered from the resources' state after a pass that left everything
    /// VALID, written to a Secret (or a ConfigMap) owned by this Manifest — never to its
    /// status, events or logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<OutputsSpec>,
    /// The ServiceAccount of this namespace that the Pods of image types run as [default: the
    /// namespace's `default`]: their identity (workload identity, image pull secrets). Its
    /// token is never mounted into them. `builtin/kubernetes` acts as it too, by impersonation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// What the Pods of image types get besides the `restricted` defaults, as far as the
    /// namespace's admission allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodOptions>,
}

/// Settings for the Pods that image types run as (`spec.pod`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodOptions {
    /// Requests and limits of the type's container (`cpu`, `memory`, …: Kubernetes quantities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<PodResources>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<PodToleration>,
    /// The user the type's program runs as [default: the image's user when it is a number
    /// other than 0, else 65532].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// `false` lets a program run as root, where the namespace's admission allows it
    /// [default: true].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Pull secrets of this namespace besides the ServiceAccount's, for the Pods and for
    /// reading the images' configs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalRef>,
}

/// A container's requests and limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PodResources {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

/// A Pod toleration, as Kubernetes spells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodToleration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Exists` or `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// An object of the Manifest's namespace, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalRef {
    pub name: String,
}

/// Where a Manifest's outputs go.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputsSpec {
    /// Name → template, as a manifest's `outputs` (`"{{ resources.db.state.url }}"`).
    #[schemars(schema_with = "free_form_object")]
    pub values: IndexMap<String, Value>,
    /// The Secret to write [default: `<manifest>-outputs`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Write a ConfigMap of this name instead (for values that are not secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
}

fn default_interval() -> String {
    "5m".into()
}

fn default_retry_interval() -> String {
    "30s".into()
}

/// `{type: object, x-kubernetes-preserve-unknown-fields: true}`: free-form, and structural.
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A plug in a cluster: the content of a Secret or a ConfigMap (one key, or every key as a
/// file of a directory), or a PersistentVolumeClaim (writable; for types run as Pods), handed
/// to the resource types that ask for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlugRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<KeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeyRef>,
    /// Mounted writable into the Pods of the types that ask for it (the controller must run
    /// image types as Pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimRef>,
    /// No resource may ask to write to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Regular expressions; when given, only resources whose name matches one get the plug.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// Regular expressions; when given, only resources whose type matches one get the plug.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_types: Vec<String>,
}

/// A source of variables.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VarsFrom {
    pub secret_ref: KeyRef,
}

/// A PersistentVolumeClaim of the Manifest's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRef {
    pub claim_name: String,
}

/// An object in the Manifest's namespace and, optionally, one of its keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KeyRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// What deleting the Manifest does to its resources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Leave every resource in place.
    #[default]
    Orphan,
    /// Delete the resources whose types can (`delete_action`), dependents first.
    Delete,
}

/// Who approves a plan before the controller applies it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Approval {
    /// The controller applies what it plans.
    #[default]
    Automatic,
    /// A person approves each plan that changes something (`deployster approve`).
    Manual,
}

/// The annotation that lets a pass delete more than `spec.maxDeletionPercent` allows: the
/// revision (`status.revision`) whose deletions it acknowledges.
pub const ALLOW_DELETES_ANNOTATION: &str = "deployster.io/allow-deletes";

impl ManifestSpec {
    /// What becomes of a resource removed from the spec.
    pub fn removal(&self) -> DeletionPolicy {
        self.removal_policy.unwrap_or(self.deletion_policy)
    }
}

/// The annotation that approves a pending plan, by its id.
pub const APPROVE_ANNOTATION: &str = "deployster.io/approve";

/// A plan awaiting approval (`spec.approval: Manual`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingPlan {
    /// What `deployster.io/approve` must say to apply it. A plan recorded again with the same
    /// content keeps its id; the same content planned after it was applied gets a new one.
    pub id: String,
    /// A digest of what the plan knew (statuses, states, configs, actions, revision).
    pub digest: String,
    pub revision: String,
    /// RFC 3339.
    pub created_at: String,
    /// The resources it would change, with their actions.
    pub changes: Vec<PlannedChange>,
}

/// One resource a pending plan would change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedChange {
    pub name: String,
    /// STALE, MISSING, or PENDING (waiting on another change).
    pub status: String,
    pub actions: Vec<String>,
}

/// What the controller observed, written with server-side apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `<generation>-<hash>`: the generation, and a short hash of the spec and the content of
    /// the Secrets and ConfigMaps it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    /// The run id of the last pass written here (a pass that finds everything as it was writes
    /// nothing): `deployster history --run ID` shows its events, and its programs saw it as
    /// `DEPLOYSTER_RUN_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub resources: Vec<ResourceStatus>,
    /// `VALID/total`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_summary: Option<String>,
    /// The newest deployment-log entries, oldest first (bounded).
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Failed passes in a row (for the retry backoff).
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The plan awaiting approval (`spec.approval: Manual`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_plan: Option<PendingPlan>,
    /// The id of the last plan applied on approval: an approval is used once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_approved_plan: Option<String>,
    /// While a pass runs actions: `resource/action percent%` of each, for `kubectl get`; empty
    /// once the pass has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// The replica that wrote this status (under leader election or sharding): `kubectl get
    /// manifests -o wide` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardStatus>,
}

/// Which replica reconciles the object, and under sharding which shard it is in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// The replica's identity, as in its Leases: `<hostname>_<random>`.
    pub replica: String,
    /// The object's shard: a fixed hash of `namespace/name`, modulo `count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Shards in the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// A condition, following Kubernetes conventions (read by kstatus-based tools).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    /// Left out when there is nothing to say: a real API server's server-side apply turns an
    /// applied empty string into `null`, which a `type: string` field refuses (422).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One resource of the manifest as last observed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    #[schemars(with = "String")]
    pub name: CompactString,
    #[serde(rename = "type")]
    #[schemars(with = "String")]
    pub type_: CompactString,
    /// VALID, STALE, MISSING, FAILED, BLOCKED or PENDING.
    #[schemars(with = "String")]
    pub status: CompactString,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub last_transition_time: Option<CompactString>,
    /// The state its type reported (size-capped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub state: Option<Value>,
    /// The root failed or invalid resource this one waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    /// Consecutive passes that corrected drift on it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drift_streak: u32,
    /// The action running on it now, while a pass runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ActionProgress>,
    /// When its state is next read (RFC 3339; adaptive drift checks, see `maxInterval`). Kept
    /// up to date whenever the status is written: a pass that found everything as it was
    /// writes nothing, so it may lag until the next change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub next_check: Option<CompactString>,
}

/// An action running now, and how far it says it got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionProgress {
    pub action: String,
    /// The percentage it last reported (agent messages); absent until it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// When it started (RFC 3339).
    pub started_at: String,
}

impl ActionProgress {
    /// `resource/action 40%`, or `resource/action` before any report.
    pub fn describe(&self, resource: &str) -> String {
        match self.percent {
            Some(p) => format!("{resource}/{} {p:.0}%", self.action),
            None => format!("{resource}/{}", self.action),
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A deployment-log entry on the object.
// The watch cache holds up to `--history-limit` of these per object, so the short fields are
// inline strings (no allocation up to 24 bytes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryEntry {
    #[schemars(with = "String")]
    pub id: CompactString,
    #[schemars(with = "String")]
    pub target: CompactString,
    #[schemars(with = "String")]
    pub revision: CompactString,
    #[schemars(with = "String")]
    pub event: CompactString,
    /// RFC 3339.
    #[schemars(with = "String")]
    pub at: CompactString,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub detail: Option<Value>,
}

/// The CRD as YAML, as `deployster crd` prints it and `crds/manifest.yaml` holds it.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let header = "# Generated by `deployster crd`; do not edit. Regenerate: deployster crd > crds/manifest.yaml\n";
    format!("{header}{}", serde_norway::to_string(&Manifest::crd()).expect("the CRD serializes"))
}

#[cfg(test)]
mod tests;
