//! A Pipeline's steps in a cluster: a step sets the vars of a Manifest of the Pipeline's
//! namespace (a JSON merge patch of `spec.vars`: the revision's, `pipeline`, the target's) and
//! its result is that Manifest's `Ready` condition at the generation the patch made. The
//! Manifest's own reconcile applies it, as its ServiceAccount — a Pipeline only says what and
//! when.
//!
//! The Manifest's other vars stay. The ones a step set are named in the annotation
//! [`VARS_ANNOTATION`], so that the next step removes those it no longer sets (a var dropped
//! from the revision or the target does not linger), and a var it sets replaces the old value
//! whole rather than merging into it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Map, Value, json};

use crate::controller::manifest::ManifestCache;
use crate::controller::metrics::{Metrics, ResultLabels};
use crate::controller::reasons::{ConditionType, Reason};
use crate::crd::Manifest;
use crate::pipeline::StepError;
use crate::pipeline::advance::{StepState, Steps};
use crate::pipeline::drive::Job;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;

/// The field manager of the vars a step sets.
pub const FIELD_MANAGER: &str = "deployster-pipeline";

/// On a Manifest: the names of the vars the last step set (a JSON list).
pub const VARS_ANNOTATION: &str = "deployster.io/pipeline-vars";

/// How many times a step reads the Manifest again when someone changed it between its read
/// and its patch.
const CONFLICT_RETRIES: usize = 5;

/// The merge patch that makes `manifest`'s vars hold `vars`: each replaces the value there
/// whole; the vars the last step set ([`VARS_ANNOTATION`]) and this one does not are removed;
/// the rest stay. The patch carries the Manifest's `resourceVersion`: it applies to what was
/// read, or is refused.
pub fn vars_patch(manifest: &Manifest, vars: &Map<String, Value>) -> Value {
    let current = &manifest.spec.vars;
    let set_before: Vec<String> = manifest
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VARS_ANNOTATION))
        .and_then(|names| serde_json::from_str(names).ok())
        .unwrap_or_default();
    let mut patch: Map<String, Value> =
        set_before.into_iter().filter(|name| !vars.contains_key(name)).map(|name| (name, Value::Null)).collect();
    for (name, value) in vars {
        patch.insert(name.clone(), replacing(current.get(name), value));
    }
    let names: Vec<&String> = vars.keys().collect();
    json!({
        "metadata": {
            "resourceVersion": manifest.metadata.resource_version,
            "annotations": {VARS_ANNOTATION: serde_json::to_string(&names).expect("names serialize")},
        },
        "spec": {"vars": patch},
    })
}

/// The merge patch turning `old` into `new`: objects key by key (what `new` lacks removed),
/// anything else `new` itself.
fn replacing(old: Option<&Value>, new: &Value) -> Value {
    match (old, new) {
        (Some(Value::Object(old)), Value::Object(new)) => {
            let mut patch: Map<String, Value> =
                old.keys().filter(|k| !new.contains_key(*k)).map(|k| (k.clone(), Value::Null)).collect();
            for (k, v) in new {
                patch.insert(k.clone(), replacing(old.get(k), v));
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

pub struct ManifestSteps {
    pub client: Client,
    pub namespace: String,
    /// How long a step waits for its Manifest to be Ready.
    pub timeout: Duration,
    pub metrics: Arc<Metrics>,
    /// The controller's watch cache of the namespace's Manifests: where a step's Manifest is
    /// read once it synced (the API is asked before).
    pub cache: Option<ManifestCache>,
    /// The reconcile's time, in ms since the epoch.
    pub now: i64,
}

#[derive(Debug, PartialEq)]
pub enum StepOutcome {
    Ready,
    Failed(String),
    Pending,
}

/// The Manifest's answer for `generation`: its `Ready` condition, once it was observed at that
/// generation (or later). A Manifest awaiting approval of its plan is still pending.
pub fn outcome(manifest: &Manifest, generation: i64) -> StepOutcome {
    let Some(ready) =
        manifest.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str()))
    else {
        return StepOutcome::Pending;
    };
    if ready.observed_generation.is_none_or(|g| g < generation) {
        return StepOutcome::Pending;
    }
    match (ready.status.as_str(), ready.reason.as_str()) {
        ("True", _) => StepOutcome::Ready,
        ("False", reason) if Reason::parse(reason) == Some(Reason::AwaitingApproval) => StepOutcome::Pending,
        ("False", reason) => StepOutcome::Failed(format!("{reason}: {}", ready.message)),
        _ => StepOutcome::Pending,
    }
}

#[async_trait]
impl Steps for ManifestSteps {
    /// Sets the step's vars on its Manifest: the step is under way once the Manifest has them,
    /// at the generation recorded in its `step-started` entry.
    async fn start(&self, job: &Job) -> Result<Value, StepError> {
        let name = job.manifest.to_string_lossy().into_owned();
        let shown = format!("Manifest {}/{name}", self.namespace);
        let api: Api<Manifest> = Api::namespaced(self.client.clone(), &self.namespace);
        let cannot = |e: kube::Error| StepError::Vars {
            manifest: shown.clone(),
            revision: job.revision.clone(),
            why: e.to_string(),
        };
        let mut attempt = 0;
        let patched = loop {
            let current = api.get(&name).await.map_err(cannot)?;
            let patch = vars_patch(&current, &job.vars);
            match api.patch(&name, &PatchParams::apply(FIELD_MANAGER), &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < CONFLICT_RETRIES => attempt += 1,
                result => break result.map_err(cannot)?,
            }
        };
        Ok(json!({"manifest": name, "generation": patched.metadata.generation.unwrap_or_default()}))
    }

    /// The Manifest's answer at the generation the step set: read from the watch cache (a
    /// change of it wakes the Pipeline), never waited for.
    async fn state(&self, job: &Job, started: &Value, since: i64) -> StepState {
        // Started by a controller that recorded no generation: set the vars again.
        let Some(generation) = started.get("generation").and_then(Value::as_i64) else { return StepState::Lost };
        let name = job.manifest.to_string_lossy().into_owned();
        let shown = format!("Manifest {}/{name}", self.namespace);
        let state = match self.read(&name).await {
            // Not answered now: looked at again at the next reconcile.
            Err(e) => {
                tracing::warn!("{shown}: cannot read it: {e}");
                return StepState::Running;
            }
            Ok(None) => StepState::Failed(format!("{shown} is gone")),
            Ok(Some(manifest)) => match outcome(&manifest, generation) {
                StepOutcome::Ready => StepState::Succeeded,
                StepOutcome::Failed(why) => StepState::Failed(format!("{shown} (generation {generation}): {why}")),
                StepOutcome::Pending if self.now - since >= self.timeout.as_millis() as i64 => {
                    StepState::Failed(format!(
                        "{shown} was not Ready at generation {generation} within {}",
                        humantime::format_duration(self.timeout)
                    ))
                }
                StepOutcome::Pending => return StepState::Running,
            },
        };
        let counted = if state == StepState::Succeeded { "succeeded" } else { "failed" };
        self.metrics.pipeline_steps.get_or_create(&ResultLabels { result: counted }).inc();
        self.metrics.pipeline_step_duration.observe((self.now - since).max(0) as f64 / 1000.0);
        state
    }
}

impl ManifestSteps {
    /// The Manifest `name` of the namespace, as the watch cache holds it once synced.
    async fn read(&self, name: &str) -> Result<Option<Manifest>, kube::Error> {
        if let Some(cache) = self.cache.as_ref().filter(|c| *c.synced.borrow()) {
            let key = ObjectRef::<DeserializeGuard<Manifest>>::new(name).within(&self.namespace);
            return Ok(cache.store.get(&key).and_then(|guard| guard.0.as_ref().ok().cloned()));
        }
        Api::<Manifest>::namespaced(self.client.clone(), &self.namespace).get_opt(name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, ManifestStatus};

    fn manifest(status: &str, reason: &str, observed: i64) -> Manifest {
        let ready = Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: "why".into(),
            observed_generation: Some(observed),
            ..Default::default()
        };
        let mut m = Manifest::new("app", Default::default());
        m.status = Some(ManifestStatus { conditions: vec![ready], ..Default::default() });
        m
    }

    #[test]
    fn a_step_s_result_is_the_manifest_s_ready_condition_at_its_generation() {
        assert_eq!(outcome(&manifest("True", "Applied", 3), 3), StepOutcome::Ready);
        assert_eq!(
            outcome(&manifest("True", "Applied", 2), 3),
            StepOutcome::Pending,
            "an older generation says nothing"
        );
        assert_eq!(
            outcome(&manifest("False", "ProgramFailed", 3), 3),
            StepOutcome::Failed("ProgramFailed: why".into())
        );
        assert_eq!(outcome(&manifest("False", "AwaitingApproval", 3), 3), StepOutcome::Pending);
        assert_eq!(outcome(&manifest("Unknown", "Suspended", 4), 3), StepOutcome::Pending);
        assert_eq!(outcome(&Manifest::new("app", Default::default()), 1), StepOutcome::Pending);
    }

    #[test]
    fn a_step_s_vars_replace_what_the_last_step_set_and_keep_the_manifest_s_own() {
        let mut m = Manifest::new("app", Default::default());
        m.metadata.resource_version = Some("41".into());
        let vars = |v: serde_json::Value| v.as_object().unwrap().clone();
        m.spec.vars = serde_json::from_value(serde_json::json!({
            "dir": "/srv", "version": "none", "channel": "beta", "limits": {"cpu": 1, "memory": 2}
        }))
        .unwrap();
        // The first step: nothing set before, so nothing removed; an object replaces key by key.
        let first =
            vars_patch(&m, &vars(serde_json::json!({"version": "1.0", "channel": "beta", "limits": {"cpu": 2}})));
        assert_eq!(
            first,
            serde_json::json!({
                "metadata": {"resourceVersion": "41", "annotations": {VARS_ANNOTATION: "[\"version\",\"channel\",\"limits\"]"}},
                "spec": {"vars": {"version": "1.0", "channel": "beta", "limits": {"cpu": 2, "memory": null}}}
            })
        );
        // The next step no longer sets `channel` or `limits`: both go, `dir` (never set) stays.
        m.metadata.annotations =
            Some([(VARS_ANNOTATION.to_string(), "[\"version\",\"channel\",\"limits\"]".to_string())].into());
        let next = vars_patch(&m, &vars(serde_json::json!({"version": "2.0"})));
        assert_eq!(next["spec"]["vars"], serde_json::json!({"version": "2.0", "channel": null, "limits": null}));
        assert_eq!(next["metadata"]["annotations"][VARS_ANNOTATION], "[\"version\"]");
        // An annotation that is not a list of names (edited by hand) removes nothing.
        m.metadata.annotations = Some([(VARS_ANNOTATION.to_string(), "channel".to_string())].into());
        assert_eq!(
            vars_patch(&m, &vars(serde_json::json!({"version": "3.0"})))["spec"]["vars"],
            serde_json::json!({"version": "3.0"})
        );
    }
}
