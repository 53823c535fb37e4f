//! Driving revisions through a pipeline: read the log, decide ([`Progress::schedule`]), do the
//! work, record it — and nothing else. Every decision is made from the log, so a drive that
//! ended anywhere (a crash, `kill -9`) is resumed by the next from what the log holds: a step
//! recorded as succeeded is never run again; one started without a result is recorded as
//! interrupted and run again (applying a manifest is idempotent).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::progress::{Progress, Scheduled, StepDecision, target_of};
use super::spec::{Pipeline, Work};
use super::{PipelineError, StepError};
use crate::history::{Entry, Event, History};

/// One step's work: apply `manifest` with `vars` — the revision's, `pipeline` (`revision`,
/// `stage`, `group`, `target`, `step`), then the target's — keeping its deployment log in
/// `state_dir`.
#[derive(Debug, Clone)]
pub struct Job {
    /// `stage/group/target/step`.
    pub step: String,
    pub revision: String,
    pub manifest: PathBuf,
    pub vars: Map<String, Value>,
    pub state_dir: PathBuf,
}

/// What applies a step's manifest: the CLI's recorded pass, or a test's stand-in.
#[async_trait]
pub trait StepRunner: Send + Sync {
    /// `Err` says why the step failed.
    async fn run(&self, job: Job) -> Result<(), StepError>;
}

/// A drive's result.
#[derive(Debug)]
pub struct Driven {
    pub progress: Progress,
    /// Steps that wait, and for what.
    pub waiting: Vec<Scheduled>,
    /// Steps that failed in this drive: (revision, step, why).
    pub failed: Vec<(String, String, String)>,
    /// The drive was cancelled: what ran was recorded as interrupted, and nothing more started.
    pub interrupted: bool,
}

pub struct Driver<'a> {
    pub pipeline: &'a Pipeline,
    pub log: Arc<dyn History>,
    /// What runs steps here, for [`Driver::drive`]; none where steps run elsewhere (a Pipeline's
    /// reconcile [`advance`](Driver::advance)s with steps of its own).
    pub runner: Option<Arc<dyn StepRunner>>,
    /// Milliseconds since the epoch (injected: tests move time on).
    pub now: &'a (dyn Fn() -> i64 + Sync),
    /// Where each step's own state directory goes (`steps/<stage>/<group>/<target>/<step>`).
    pub state_dir: PathBuf,
    /// Where progress is said.
    pub say: &'a (dyn Fn(&str) + Sync),
    /// Cancelled to stop: running steps are stopped by their runner and recorded as
    /// interrupted (a later drive runs them again), and none is started.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// The pipeline's progress as its log records it.
pub fn read(pipeline: &Pipeline, log: &dyn History) -> Result<Progress, PipelineError> {
    let mut entries = log.recent("pipeline", usize::MAX)?;
    entries.reverse();
    Ok(Progress::from_entries(pipeline, &entries))
}

impl Driver<'_> {
    pub(super) fn entry(
        &self,
        progress: &Progress,
        revision: &str,
        target: String,
        event: Event,
        detail: Value,
    ) -> Entry {
        let id = progress.revision(revision).map(|r| r.id.clone()).unwrap_or_default();
        Entry { id, target, revision: revision.to_string(), event, at: (self.now)(), detail }
    }

    pub(super) fn append(&self, progress: &mut Progress, entries: Vec<Entry>) -> Result<(), PipelineError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.log.append(&entries)?;
        for entry in &entries {
            progress.record(self.pipeline, entry);
        }
        Ok(())
    }

    /// Registers `revision` with `vars` (the seed's "artifact registered"). A revision whose
    /// run ended (through, failed, superseded) is registered again as a new run: a rollback
    /// to it, or a retry. `false` when a run of it is in flight.
    pub fn register(&self, revision: &str, vars: &Map<String, Value>) -> Result<bool, PipelineError> {
        self.register_in(&mut read(self.pipeline, self.log.as_ref())?, revision, vars)
    }

    /// As [`Driver::register`], on `progress` as the log now stands (read once by the caller).
    pub fn register_in(
        &self,
        progress: &mut Progress,
        revision: &str,
        vars: &Map<String, Value>,
    ) -> Result<bool, PipelineError> {
        if progress.revision(revision).is_some_and(|r| r.is_live()) {
            return Ok(false);
        }
        let entry = Entry {
            id: uuid::Uuid::now_v7().to_string(),
            target: target_of(""),
            revision: revision.to_string(),
            event: Event::RevisionRegistered,
            at: (self.now)(),
            detail: json!({"vars": vars}),
        };
        self.append(progress, vec![entry])?;
        Ok(true)
    }

    /// Registers an artifact a stage requires.
    pub fn register_artifact(&self, revision: &str, stage: &str, artifact: &str) -> Result<(), PipelineError> {
        self.register_artifact_in(&mut read(self.pipeline, self.log.as_ref())?, revision, stage, artifact)
    }

    /// As [`Driver::register_artifact`], on `progress` as the log now stands.
    pub fn register_artifact_in(
        &self,
        progress: &mut Progress,
        revision: &str,
        stage: &str,
        artifact: &str,
    ) -> Result<(), PipelineError> {
        if progress.revision(revision).is_none() {
            return Err(PipelineError::Refused(format!("revision {revision} is not registered")));
        }
        let Some(s) = self.pipeline.stages.iter().find(|s| s.name == stage) else {
            return Err(PipelineError::Refused(format!("there is no stage `{stage}`")));
        };
        if !s.requires.iter().any(|a| a == artifact) {
            return Err(PipelineError::Refused(format!(
                "stage `{stage}` requires no artifact `{artifact}` (it requires: {})",
                s.requires.join(", ")
            )));
        }
        let entry =
            self.entry(progress, revision, target_of(stage), Event::ArtifactRegistered, json!({"artifact": artifact}));
        self.append(progress, vec![entry])
    }

    /// The progress the next drive acts on, recording nothing: read from the log, then what a
    /// drive records before it starts any manifest — the steps the pipeline document introduces
    /// or withdraws, skips, older runs superseded, and the bakes whose time has come. `approve`
    /// and `status` answer from it, so that they, and `run`, see one frontier.
    pub fn settled(&self) -> Result<Progress, PipelineError> {
        self.settle(read(self.pipeline, self.log.as_ref())?)
    }

    /// `progress` as [`Driver::settled`] has it, recording nothing.
    pub fn settle(&self, mut progress: Progress) -> Result<Progress, PipelineError> {
        let in_memory = Driver {
            pipeline: self.pipeline,
            log: Arc::new(crate::history::MemoryLog::new()),
            runner: self.runner.clone(),
            now: self.now,
            state_dir: self.state_dir.clone(),
            say: &|_| {},
            cancel: self.cancel.clone(),
        };
        in_memory.introduce(&mut progress)?;
        loop {
            let starts = in_memory.skip_all(&mut progress)?;
            let due: Vec<&Scheduled> =
                starts.iter().filter(|s| matches!(self.pipeline.steps[s.step].work, Work::Wait(_))).collect();
            if due.is_empty() {
                in_memory.finish(&mut progress)?;
                return Ok(progress);
            }
            for start in due {
                in_memory.mark_starts(&mut progress, &start.revision, start.step)?;
                let step = &self.pipeline.steps[start.step].id;
                let entry =
                    in_memory.entry(&progress, &start.revision, target_of(step), Event::StepSucceeded, json!({}));
                in_memory.append(&mut progress, vec![entry])?;
                in_memory.mark_ends(&mut progress, &start.revision, start.step, None)?;
            }
        }
    }

    /// Approves the gate before `gate` (`stage/group`, or a stage) for `revision`: refused
    /// unless a step of that revision waits for it in the [`Driver::settled`] progress.
    pub fn approve(&self, revision: &str, gate: &str) -> Result<(), PipelineError> {
        self.approve_in(&mut read(self.pipeline, self.log.as_ref())?, revision, gate)
    }

    /// As [`Driver::approve`], on `progress` as the log now stands; the approval is recorded in
    /// it too.
    pub fn approve_in(&self, progress: &mut Progress, revision: &str, gate: &str) -> Result<(), PipelineError> {
        let settled = self.settle(progress.clone())?;
        let group = self
            .pipeline
            .stages
            .iter()
            .flat_map(|s| &s.groups)
            .find(|g| g.id == gate || (g.approval && g.id.split_once('/').map(|(s, _)| s) == Some(gate)));
        let Some(group) = group else {
            let asking: Vec<&str> = self
                .pipeline
                .stages
                .iter()
                .flat_map(|s| &s.groups)
                .filter(|g| g.approval)
                .map(|g| g.id.as_str())
                .collect();
            return Err(PipelineError::Refused(format!(
                "pipeline {} has no group or stage `{gate}` that asks for approval{}; {}",
                self.pipeline.name,
                crate::engine::suggest::hint(gate, asking.iter().copied()),
                if asking.is_empty() {
                    "none of its groups does".to_string()
                } else {
                    format!("those that do: {}", asking.join(", "))
                }
            )));
        };
        let schedule = settled.schedule(self.pipeline, (self.now)());
        let waiting = schedule.iter().any(|s| {
            s.revision == revision
                && group.steps.contains(&s.step)
                && matches!(&s.decision, StepDecision::Approval { gate, .. } if *gate == group.id)
        });
        if !waiting {
            // What the revision is doing instead: a step running, a bake or a window waited for.
            let doing: Vec<String> = schedule
                .iter()
                .filter(|s| s.revision == revision)
                .filter_map(|s| {
                    let id = &self.pipeline.steps[s.step].id;
                    match &s.decision {
                        StepDecision::Running => Some(format!("{id} is running")),
                        decision => decision
                            .waits_for(&|r, g| format!("`deployster pipeline approve --revision {r} {g}`"))
                            .map(|why| format!("{id} waits for {why}")),
                    }
                })
                .collect();
            let now = match settled.revision(revision) {
                None => " (no such revision is registered)".to_string(),
                Some(_) if !group.approval => format!(": group `{}` does not ask for approval", group.id),
                Some(r) if group.steps.iter().all(|s| r.done.contains(*s)) => {
                    format!(": revision {revision} is through `{}` already", group.id)
                }
                Some(_) if doing.is_empty() => {
                    format!(
                        ": revision {revision} has no step waiting or running (`deployster pipeline status` tells where it is)"
                    )
                }
                Some(_) => format!(
                    " yet: {}; approval at `{}` becomes possible once the steps before it are through",
                    doing.join("; "),
                    group.id
                ),
            };
            return Err(PipelineError::Refused(format!(
                "nothing of revision {revision} waits for approval at `{gate}`{now}"
            )));
        }
        let entry = self.entry(&settled, revision, target_of(&group.id), Event::Approved, json!({}));
        self.append(progress, vec![entry])
    }

    /// Records the steps to skip until none is left; then the steps to start, the older runs
    /// each supersedes recorded as superseded.
    pub(super) fn skip_all(&self, progress: &mut Progress) -> Result<Vec<Scheduled>, PipelineError> {
        loop {
            let scheduled = progress.schedule(self.pipeline, (self.now)());
            let mut acted = false;
            let mut starts = Vec::new();
            for item in scheduled {
                match &item.decision {
                    StepDecision::Skip(reason) => {
                        let step = &self.pipeline.steps[item.step];
                        (self.say)(&format!("{} {}: skipped ({reason})", item.revision, step.id));
                        let entry = self.entry(
                            progress,
                            &item.revision,
                            target_of(&step.id),
                            Event::StepSkipped,
                            json!({"reason": reason}),
                        );
                        self.append(progress, vec![entry])?;
                        self.mark_ends(progress, &item.revision, item.step, None)?;
                        acted = true;
                    }
                    StepDecision::Start { supersedes } => {
                        self.supersede(progress, &item.revision, supersedes)?;
                        starts.push(item);
                    }
                    StepDecision::Wait(_) | StepDecision::Approval { .. } | StepDecision::Running => {}
                }
            }
            if !acted {
                // A revision superseded just now starts nothing.
                starts.retain(|s| progress.revision(&s.revision).is_some_and(|r| r.is_live()));
                return Ok(starts);
            }
        }
    }

    /// The job of one step of `revision`: apply its manifest; `None` for a timed gate (a bake),
    /// whose time has come when it is due.
    pub(super) fn job(&self, progress: &Progress, revision: &str, s: usize) -> Option<Job> {
        let step = &self.pipeline.steps[s];
        let Work::Apply(manifest) = &step.work else { return None };
        // The revision's vars, then where the step is (`pipeline.target`), then the target's own.
        let mut vars = progress.revision(revision).map(|r| r.vars.clone()).unwrap_or_default();
        let stage = &self.pipeline.stages[step.stage];
        vars.insert(
            "pipeline".into(),
            json!({
                "revision": revision,
                "stage": stage.name,
                "group": stage.groups[step.group].id.rsplit('/').next(),
                "target": self.pipeline.targets[step.target].name,
                "step": step.id.rsplit('/').next(),
            }),
        );
        vars.extend(self.pipeline.targets[step.target].vars.clone());
        Some(Job {
            step: step.id.clone(),
            revision: revision.to_string(),
            manifest: manifest.clone(),
            vars,
            state_dir: self.state_dir.join("steps").join(&step.id),
        })
    }

    /// Steps the pipeline holds for the first time (or again): recorded, with the runs already
    /// under way (each runs it unless it has gone past it); and steps it no longer holds,
    /// recorded as withdrawn, so that one added back is introduced anew.
    pub(super) fn introduce(&self, progress: &mut Progress) -> Result<(), PipelineError> {
        // The first drive of a pipeline introduces every step: nothing was under way before it.
        let under_way: Vec<String> = match progress.held_before {
            false => Vec::new(),
            true => progress.revisions.iter().filter(|r| r.is_live() && r.under_way()).map(|r| r.id.clone()).collect(),
        };
        let marker = |id: &str, event, detail| Entry {
            id: String::new(),
            target: target_of(id),
            revision: String::new(),
            event,
            at: (self.now)(),
            detail,
        };
        let mut withdrawn: Vec<&String> =
            progress.introduced.iter().filter(|id| self.pipeline.step(id).is_none()).collect();
        withdrawn.sort();
        let mut entries: Vec<Entry> =
            withdrawn.into_iter().map(|id| marker(id, Event::StepWithdrawn, json!({}))).collect();
        let new = self.pipeline.steps.iter().filter(|s| !progress.introduced.contains(&s.id));
        entries.extend(new.map(|s| marker(&s.id, Event::StepIntroduced, json!({"underWay": under_way}))));
        self.append(progress, entries)
    }

    pub(super) fn supersede(&self, progress: &mut Progress, by: &str, older: &[String]) -> Result<(), PipelineError> {
        for revision in older {
            if progress.revision(revision).is_some_and(|r| r.is_live()) {
                (self.say)(&format!("{revision}: superseded by {by}"));
                let entry = self.entry(progress, revision, target_of(""), Event::RevisionSuperseded, json!({"by": by}));
                self.append(progress, vec![entry])?;
            }
        }
        Ok(())
    }

    /// The nodes a step is in, widest first: pipeline, stage, group, target.
    fn nodes(&self, s: usize) -> [(String, [Event; 3]); 4] {
        let step = &self.pipeline.steps[s];
        let group = &self.pipeline.stages[step.stage].groups[step.group];
        let stage = &self.pipeline.stages[step.stage];
        use Event::*;
        [
            (target_of(""), [PipelineStarted, PipelineFinishedSuccessfully, PipelineFailed]),
            (target_of(&stage.name), [StageStarted, StageFinishedSuccessfully, StageFailed]),
            (target_of(&group.id), [GroupStarted, GroupFinishedSuccessfully, GroupFailed]),
            (
                target_of(&self.pipeline.targets[step.target].id),
                [TargetStarted, TargetFinishedSuccessfully, TargetFailed],
            ),
        ]
    }

    /// `*-started` markers for the nodes a step starts first, then `step-started`.
    pub(super) fn mark_starts(&self, progress: &mut Progress, revision: &str, s: usize) -> Result<(), PipelineError> {
        self.mark_starts_with(progress, revision, s, json!({}))
    }

    /// As [`Driver::mark_starts`], the `step-started` entry with `detail` (what its runner needs to
    /// find it again).
    pub(super) fn mark_starts_with(
        &self,
        progress: &mut Progress,
        revision: &str,
        s: usize,
        detail: Value,
    ) -> Result<(), PipelineError> {
        let mut entries = Vec::new();
        let markers = progress.revision(revision).map(|r| r.markers.clone()).unwrap_or_default();
        for (target, [started, ..]) in self.nodes(s) {
            if !markers.contains(&(target.clone(), started)) {
                entries.push(self.entry(progress, revision, target, started, json!({})));
            }
        }
        entries.push(self.entry(progress, revision, target_of(&self.pipeline.steps[s].id), Event::StepStarted, detail));
        self.append(progress, entries)
    }

    /// After a step ended: `*-failed` markers for every node it is in, or `*-finished-
    /// successfully` for each node now wholly through, narrowest first.
    pub(super) fn mark_ends(
        &self,
        progress: &mut Progress,
        revision: &str,
        s: usize,
        failure: Option<String>,
    ) -> Result<(), PipelineError> {
        let Some(done) = progress.revision(revision).map(|r| r.done.clone()) else { return Ok(()) };
        let step = &self.pipeline.steps[s];
        let mut entries = Vec::new();
        for (depth, (target, [_, through, failed])) in self.nodes(s).into_iter().enumerate().rev() {
            if let Some(why) = &failure {
                entries.push(self.entry(progress, revision, target, failed, json!({"message": why, "step": step.id})));
                continue;
            }
            let within = |t: &super::spec::Step| match depth {
                0 => true,
                1 => t.stage == step.stage,
                2 => t.stage == step.stage && t.group == step.group,
                _ => t.target == step.target,
            };
            let whole =
                self.pipeline.steps.iter().enumerate().filter(|(_, t)| within(t)).all(|(i, _)| done.contains(i));
            if !whole {
                break;
            }
            entries.push(self.entry(progress, revision, target, through, json!({})));
        }
        self.append(progress, entries)
    }

    /// Revisions through every step whose `pipeline-finished-successfully` is not written
    /// (an empty stage, a drive that ended between the two).
    pub(super) fn finish(&self, progress: &mut Progress) -> Result<(), PipelineError> {
        let through: Vec<String> = progress
            .revisions
            .iter()
            .filter(|r| r.is_live() && (0..self.pipeline.steps.len()).all(|s| r.done.contains(s)))
            .map(|r| r.revision.clone())
            .collect();
        for revision in through {
            let entry = self.entry(progress, &revision, target_of(""), Event::PipelineFinishedSuccessfully, json!({}));
            self.append(progress, vec![entry])?;
        }
        Ok(())
    }
}
