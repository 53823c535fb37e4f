//! A Pipeline's steps in a cluster: a step sets the vars of a Manifest of the Pipeline's
//! namespace (a JSON merge patch of `spec.vars`: the revision's, `pipeline`, the target's) and
//! its result is that Manifest's `Ready` condition at the generation the patch made. The
//! Manifest's own reconcile applies it, as its ServiceAccount — a Pipeline only says what and
//! when.

use std::time::Duration;

use async_trait::async_trait;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::crd::Manifest;
use crate::pipeline::drive::{Job, StepRunner};

/// The field manager of the vars a step sets.
pub const FIELD_MANAGER: &str = "deployster-pipeline";

pub struct ManifestSteps {
    pub client: Client,
    pub namespace: String,
    /// How long a step waits for its Manifest to be Ready.
    pub timeout: Duration,
    /// How often it looks.
    pub poll: Duration,
    /// Stops waiting: the step is recorded as interrupted, and run again by the next drive.
    pub cancel: CancellationToken,
}

/// What a Manifest's status says of the generation a step made.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Ready,
    Failed(String),
    Pending,
}

/// The Manifest's answer for `generation`: its `Ready` condition, once it was observed at that
/// generation (or later). A Manifest awaiting approval of its plan is still pending.
pub fn outcome(manifest: &Manifest, generation: i64) -> Outcome {
    let Some(ready) = manifest.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready")) else {
        return Outcome::Pending;
    };
    if ready.observed_generation.is_none_or(|g| g < generation) {
        return Outcome::Pending;
    }
    match (ready.status.as_str(), ready.reason.as_str()) {
        ("True", _) => Outcome::Ready,
        ("False", "AwaitingApproval") => Outcome::Pending,
        ("False", reason) => Outcome::Failed(format!("{reason}: {}", ready.message)),
        _ => Outcome::Pending,
    }
}

#[async_trait]
impl StepRunner for ManifestSteps {
    async fn run(&self, job: Job) -> Result<(), String> {
        let name = job.manifest.to_string_lossy().into_owned();
        let shown = format!("Manifest {}/{name}", self.namespace);
        let api: Api<Manifest> = Api::namespaced(self.client.clone(), &self.namespace);
        let patch = json!({"spec": {"vars": job.vars}});
        let patched = api
            .patch(&name, &PatchParams::apply(FIELD_MANAGER), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("{shown}: cannot set its vars for revision {}: {e}", job.revision))?;
        let generation = patched.metadata.generation.unwrap_or_default();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut manifest = patched;
        loop {
            match outcome(&manifest, generation) {
                Outcome::Ready => return Ok(()),
                Outcome::Failed(why) => return Err(format!("{shown} (generation {generation}): {why}")),
                Outcome::Pending => {}
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(format!("{shown}: stopped waiting for it (the controller is stopping)")),
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(format!(
                        "{shown} was not Ready at generation {generation} within {}",
                        humantime::format_duration(self.timeout)
                    ));
                }
                _ = tokio::time::sleep(self.poll) => {}
            }
            manifest = api.get(&name).await.map_err(|e| format!("{shown}: cannot read it: {e}"))?;
        }
    }
}
