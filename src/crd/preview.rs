//! The `ManifestPreview` custom resource (`deployster.io/v1alpha1`): a proposed spec for a
//! Manifest of its namespace (one that exists, or not yet), planned by the controller against
//! live state as the proposal's ServiceAccount, and nothing applied. Whoever creates one needs
//! the right to create previews in the namespace and nothing else: the answer is the plan, in
//! the status, sensitive values masked, no state. `crds/preview.yaml` is generated from these
//! types by `deployster crd preview`; a test fails when it differs.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ManifestSpec;

/// A proposed spec, planned and not applied. Deleted by the controller `ttlSecondsAfterFinished`
/// after its plan was written.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "deployster.io",
    version = "v1alpha1",
    kind = "ManifestPreview",
    plural = "manifestpreviews",
    shortname = "dmp",
    category = "deployster",
    namespaced,
    status = "PreviewStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A proposed spec for a Manifest, planned against live state; nothing is applied.",
    printcolumn(name = "Manifest", type_ = "string", json_path = ".spec.manifest"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Changes", type_ = "string", json_path = ".status.plan.summary"),
    printcolumn(name = "Plan", type_ = "string", json_path = ".status.plan.id", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PreviewSpec {
    /// The Manifest of this namespace the proposal is for (it need not exist).
    pub manifest: String,
    /// The proposed spec, as the Manifest's `spec` would hold it.
    pub proposed: ManifestSpec,
    /// How long the preview is kept once planned [default: 3600, at most 86400].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub ttl_seconds_after_finished: Option<u32>,
}

/// What the controller found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewStatus {
    /// `Queued`, `Planning`, `Planned` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why it failed, or waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A stable word for the failure (`ManifestInvalid`, `TooLarge`, `ServiceAccountMissing`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PreviewPlan>,
    /// The generation planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RFC 3339: when the plan (or the failure) was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// `Ready`: True once planned, False when it failed, Unknown while it waits — what Flux's
    /// health (kstatus) and the chart's Argo CD health check read.
    #[serde(default)]
    pub conditions: Vec<super::Condition>,
}

/// The plan of a proposal: what applying it would do, resource by resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewPlan {
    /// The plan's digest: the same resources, states, configs and actions, the same id.
    pub id: String,
    /// The proposal's revision (its content and variables).
    pub revision: String,
    /// Whether applying it would change anything.
    pub changes: bool,
    /// `3 to apply, 1 pending, 2 valid, 1 to delete`.
    pub summary: String,
    #[serde(default)]
    pub resources: Vec<PreviewResource>,
    /// Resources the Manifest holds that the proposal no longer declares.
    #[serde(default)]
    pub removals: Vec<PreviewResource>,
    /// Resources found drifted on the way (VALID at their last observation, not now, with the
    /// same inputs).
    #[serde(default)]
    pub drift: Vec<String>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One resource in a preview's plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewResource {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    /// VALID, STALE, MISSING, PENDING, FAILED, BLOCKED; DELETE, FORGOTTEN… for removals.
    pub status: String,
    /// `name: description`, sensitive values masked.
    #[serde(default)]
    pub actions: Vec<String>,
    /// `path: was → now` since it was last VALID, sensitive values masked.
    #[serde(default)]
    pub differences: Vec<String>,
    /// Config values unknown until a dependency is applied: `path = expression`.
    #[serde(default)]
    pub unknown: Vec<String>,
    /// A pending resource read with its dependencies as found: what it was found to be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// Why it failed or is left in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The CRD as YAML, as `deployster crd preview` prints it and `crds/preview.yaml` holds it.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let header = "# Generated by `deployster crd preview`; do not edit. Regenerate: deployster crd preview > crds/preview.yaml\n";
    format!("{header}{}", serde_norway::to_string(&ManifestPreview::crd()).expect("the CRD serializes"))
}
