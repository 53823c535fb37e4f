//! A pipeline as written: a file's whole content, or a `Pipeline` object's spec. Checked and
//! compiled by [`super::spec`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The document: a file's whole content, or a `Pipeline` object's spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PipelineSpec {
    /// What names a revision: a template over the vars (`"{{ version }}"`).
    pub revision: String,
    /// The revision's vars: defaults under `--var` for a file; a `Pipeline` object's current
    /// revision, whose change registers a new one.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    #[schemars(schema_with = "crate::pipeline::document::free_form_object")]
    pub vars: IndexMap<String, Value>,
    pub stages: Vec<StageSpec>,
    /// Atomic ranges `[from, to]`: `stage/step` (on each target of the stage) or a step's id.
    #[serde(default)]
    pub batches: Vec<Vec<String>>,
    #[serde(default)]
    pub concurrency: Concurrency,
}

/// What a newer revision does to an older one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Concurrency {
    /// Entering a stage, a newer revision stops the older ones that have not finished it.
    #[default]
    Supersede,
    /// Revisions go through each step in the order they were registered.
    Queue,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StageSpec {
    pub name: String,
    /// The stages this one comes after [default: the stage listed before it; `[]`: none].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
    /// The stage's targets (one wave), or those its groups name.
    #[serde(default)]
    pub targets: Vec<TargetSpec>,
    /// Waves, in order: each starts when the one before it is through.
    #[serde(default)]
    pub groups: Vec<GroupSpec>,
    /// What each target goes through, in order: `deploy`, a test, a timed gate.
    pub steps: Vec<String>,
    #[serde(default)]
    pub tests: BTreeMap<String, TestSpec>,
    /// A step's name and how long it waits (`bake: 30m`), `approval` (`true`, or the
    /// groups that wait for one) and `windows` (`[{deny: <cron>, duration: 2h}]`).
    #[serde(default)]
    #[schemars(schema_with = "crate::pipeline::document::free_form_object")]
    pub gates: BTreeMap<String, Value>,
    /// Artifacts that must be registered for a revision before the stage starts.
    #[serde(default)]
    pub requires: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetSpec {
    pub name: String,
    /// The manifest applied by its `deploy` step: a file beside the pipeline's; for a
    /// `Pipeline` object, a Manifest of its namespace (`app-{{ pipeline.target }}`: a template
    /// over `pipeline.stage` and `pipeline.target`).
    pub manifest: PathBuf,
    #[serde(default)]
    #[schemars(schema_with = "crate::pipeline::document::free_form_object")]
    pub vars: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupSpec {
    pub name: String,
    /// Targets of the stage's `targets`, by name, or written here.
    pub targets: Vec<GroupTarget>,
    /// How many of its targets go at once [default: all].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(schema_with = "crate::pipeline::document::any_value")]
pub enum GroupTarget {
    Named(String),
    Written(TargetSpec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TestSpec {
    /// The manifest whose apply is the check, on each target (as a target's `manifest`).
    pub manifest: PathBuf,
}

/// Any JSON object, kept as written.
pub(crate) fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Any JSON value (a target's name, or a target written out), checked when compiled.
pub(crate) fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}
