//! Steps run here, by `pipeline run`'s [`super::drive::StepRunner`]: started steps wait until
//! the drive runs them (each batch at once), and their results wait for the next advance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::advance::{StepState, Steps};
use super::drive::{Driven, Driver, Job, StepRunner};
use super::{PipelineError, StepError};

/// Steps this process runs.
pub struct Here {
    runner: Arc<dyn StepRunner>,
    /// Started, not yet run.
    started: Mutex<Vec<Job>>,
    /// Ended, not yet told: by (revision, step).
    ended: Mutex<HashMap<(String, String), Result<(), StepError>>>,
}

impl Here {
    pub fn new(runner: Arc<dyn StepRunner>) -> Self {
        Self { runner, started: Mutex::default(), ended: Mutex::default() }
    }

    /// Runs the steps started since the last call, all at once, and keeps their results.
    pub async fn run_started(&self) {
        let jobs = std::mem::take(&mut *self.started.lock().expect("started lock"));
        let keys: Vec<(String, String)> = jobs.iter().map(|j| (j.revision.clone(), j.step.clone())).collect();
        let results = futures::future::join_all(jobs.into_iter().map(|job| self.runner.run(job))).await;
        // Kept before anyone is told (the next advance asks): nothing ends unrecorded.
        self.ended.lock().expect("ended lock").extend(keys.into_iter().zip(results));
    }
}

#[async_trait]
impl Steps for Here {
    async fn start(&self, job: &Job) -> Result<Value, StepError> {
        self.started.lock().expect("started lock").push(job.clone());
        Ok(json!({}))
    }

    async fn state(&self, job: &Job, _: &Value, _: i64) -> StepState {
        let key = (job.revision.clone(), job.step.clone());
        if let Some(result) = self.ended.lock().expect("ended lock").remove(&key) {
            return match result {
                Ok(()) => StepState::Succeeded,
                Err(why) => StepState::Failed(why.to_string()),
            };
        }
        let started = self.started.lock().expect("started lock");
        if started.iter().any(|j| j.revision == job.revision && j.step == job.step) {
            StepState::Running
        } else {
            StepState::Lost
        }
    }
}

impl Driver<'_> {
    /// Drives every live revision until each is through, failed, or waiting: advances, runs the
    /// steps it started (here, each batch at once), and advances again once they all ended.
    pub async fn drive(&self) -> Result<Driven, PipelineError> {
        let Some(runner) = &self.runner else {
            return Err(PipelineError::Refused("nothing here runs this pipeline's steps".into()));
        };
        let here = Here::new(runner.clone());
        let mut failed = Vec::new();
        loop {
            let advanced = self.advance(&here).await?;
            failed.extend(advanced.failed);
            if advanced.running == 0 {
                let interrupted = self.cancel.is_cancelled();
                let waiting = if interrupted { Vec::new() } else { advanced.waiting };
                return Ok(Driven { progress: advanced.progress, waiting, failed, interrupted });
            }
            here.run_started().await;
        }
    }
}
