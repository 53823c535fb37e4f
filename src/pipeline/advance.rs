//! One step forward: read the log, record what ended, start what is due, and return — the
//! unit of work of a Pipeline's reconcile (which looks again when a step's Manifest changes),
//! and of `pipeline run`'s drive (which looks again when the steps it runs here end).
//!
//! Where a started step stands is its [`Steps`]' answer: the CLI runs steps here
//! ([`super::here`]), the controller sets a Manifest's vars and reads its Ready condition. A
//! step its runner knows nothing of (the process that started it died) is recorded as
//! interrupted and started again: applying a manifest is idempotent.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::drive::{Driver, Job};
use super::progress::{Progress, Scheduled, StepDecision, target_of};
use super::spec::Work;
use super::{PipelineError, StepError};
use crate::history::Event;

/// How many of a step's newest entries are looked at for its run's start.
const STARTS_LOOKED_AT: usize = 64;

/// Where a started step stands.
#[derive(Debug, Clone, PartialEq)]
pub enum StepState {
    /// Still under way.
    Running,
    Succeeded,
    /// Failed, and why.
    Failed(String),
    /// Its runner knows nothing of it: whatever started it is gone.
    Lost,
}

/// What runs steps for [`Driver::advance`].
#[async_trait]
pub trait Steps: Send + Sync {
    /// Starts `job`: `Ok` with what its `step-started` entry records (what [`Steps::state`]
    /// is given back) once it is under way, `Err` with why it could not start.
    async fn start(&self, job: &Job) -> Result<Value, StepError>;

    /// Where `job`, started with `started` at `since` (ms since the epoch), stands now.
    async fn state(&self, job: &Job, started: &Value, since: i64) -> StepState;
}

/// What one advance left.
#[derive(Debug)]
pub struct Advanced {
    pub progress: Progress,
    /// Steps that wait, and for what.
    pub waiting: Vec<Scheduled>,
    /// Steps that failed in this advance: (revision, step, why).
    pub failed: Vec<(String, String, String)>,
    /// Steps under way when it returned.
    pub running: usize,
}

impl Driver<'_> {
    /// One step forward: records the steps that ended since the last advance, then starts the
    /// steps that are due (and passes the bakes whose time has come) — none once cancelled.
    pub async fn advance(&self, steps: &dyn Steps) -> Result<Advanced, PipelineError> {
        self.advance_from(super::drive::read(self.pipeline, self.log.as_ref())?, steps).await
    }

    /// As [`Driver::advance`], from `progress` as the log now stands (read once by the caller).
    pub async fn advance_from(&self, mut progress: Progress, steps: &dyn Steps) -> Result<Advanced, PipelineError> {
        self.introduce(&mut progress)?;
        let mut failed = Vec::new();
        let mut running = self.record_ended(&mut progress, steps, &mut failed).await?;
        while !self.cancel.is_cancelled() {
            let starts = self.skip_all(&mut progress)?;
            let mut bakes_passed = false;
            for start in &starts {
                let (revision, s) = (&start.revision, start.step);
                let step_id = self.pipeline.steps[s].id.clone();
                let Some(job) = self.job(&progress, revision, s) else {
                    // A bake whose time has come: passed as it starts.
                    debug_assert!(matches!(self.pipeline.steps[s].work, Work::Wait(_)));
                    self.mark_starts(&mut progress, revision, s)?;
                    (self.say)(&format!("{revision} {step_id}: succeeded"));
                    self.ended(&mut progress, revision, s, Ok(()))?;
                    bakes_passed = true;
                    continue;
                };
                (self.say)(&format!("{revision} {step_id}: applying {}", job.manifest.display()));
                match steps.start(&job).await {
                    Ok(detail) => {
                        self.mark_starts_with(&mut progress, revision, s, detail)?;
                        running += 1;
                    }
                    Err(why) => {
                        let why = why.to_string();
                        self.mark_starts(&mut progress, revision, s)?;
                        (self.say)(&format!("{revision} {step_id}: failed: {why}"));
                        failed.push((revision.clone(), step_id, why.clone()));
                        self.ended(&mut progress, revision, s, Err(why))?;
                    }
                }
            }
            // Steps started now end later; a bake passed may let others start now.
            if !bakes_passed {
                break;
            }
        }
        self.finish(&mut progress)?;
        let waiting = progress
            .schedule(self.pipeline, (self.now)())
            .into_iter()
            .filter(|s| matches!(s.decision, StepDecision::Wait(_) | StepDecision::Approval { .. }))
            .collect();
        Ok(Advanced { progress, waiting, failed, running })
    }

    /// Asks `steps` where each running step stands and records those that ended; how many run
    /// on. Once cancelled, a step that failed is recorded as interrupted (a later drive runs
    /// it again).
    async fn record_ended(
        &self,
        progress: &mut Progress,
        steps: &dyn Steps,
        failed: &mut Vec<(String, String, String)>,
    ) -> Result<usize, PipelineError> {
        let under_way: Vec<(String, usize)> = progress
            .revisions
            .iter()
            .filter(|r| r.is_live())
            .flat_map(|r| r.running.ones().map(|s| (r.revision.clone(), s)))
            .collect();
        let mut running = 0;
        for (revision, s) in under_way {
            let step_id = self.pipeline.steps[s].id.clone();
            let target = target_of(&step_id);
            // This run's start: the newest `step-started` of the step for this revision.
            let started = self
                .log
                .recent(&target, STARTS_LOOKED_AT)?
                .into_iter()
                .find(|e| e.target == target && e.revision == revision && e.event == Event::StepStarted);
            // None found: `Steps::state` is given nothing, and a runner that needs what the
            // start recorded answers Lost (the step is started again).
            let (detail, since) = started.map_or((json!({}), (self.now)()), |e| (e.detail, e.at));
            let state = match self.job(progress, &revision, s) {
                Some(job) => steps.state(&job, &detail, since).await,
                // A bake is passed as it starts: one left running was cut short.
                None => StepState::Lost,
            };
            match state {
                StepState::Running => running += 1,
                StepState::Lost => {
                    (self.say)(&format!("{revision} {step_id}: its drive ended before it did; running it again"));
                    let entry = self.entry(progress, &revision, target, Event::StepInterrupted, json!({}));
                    self.append(progress, vec![entry])?;
                }
                StepState::Failed(why) if self.cancel.is_cancelled() => {
                    (self.say)(&format!("{revision} {step_id}: interrupted: {why}"));
                    let detail = json!({"message": why});
                    let entry = self.entry(progress, &revision, target, Event::StepInterrupted, detail);
                    self.append(progress, vec![entry])?;
                }
                StepState::Succeeded => {
                    (self.say)(&format!("{revision} {step_id}: succeeded"));
                    self.ended(progress, &revision, s, Ok(()))?;
                }
                StepState::Failed(why) => {
                    (self.say)(&format!("{revision} {step_id}: failed: {why}"));
                    failed.push((revision.clone(), step_id, why.clone()));
                    self.ended(progress, &revision, s, Err(why))?;
                }
            }
        }
        Ok(running)
    }

    /// Records that step `s` of `revision` ended so, and the markers of the nodes it ended.
    fn ended(
        &self,
        progress: &mut Progress,
        revision: &str,
        s: usize,
        result: Result<(), String>,
    ) -> Result<(), PipelineError> {
        let step = &self.pipeline.steps[s];
        let (event, detail) = match &result {
            Ok(()) => (Event::StepSucceeded, json!({})),
            Err(why) => (Event::StepFailed, json!({"message": why})),
        };
        let entry = self.entry(progress, revision, target_of(&step.id), event, detail);
        self.append(progress, vec![entry])?;
        self.mark_ends(progress, revision, s, result.err())
    }
}
