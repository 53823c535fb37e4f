//! Where every revision stands, from the pipeline's log alone, and what to do next: the seed's
//! frontier (`next`, `after`, `seen`), *new*, *ready* and *doable*, with batches, gates and
//! concurrency. Pure: entries in, decisions out; `now` is given.

use std::collections::{HashMap, HashSet, VecDeque};

use fixedbitset::FixedBitSet;
use serde_json::{Map, Value};

use super::spec::{Concurrency, Pipeline, Work};
use crate::history::{Entry, Event};

/// The log's target for a step id (`stage/group/target/step`) or any other node.
pub fn target_of(id: &str) -> String {
    if id.is_empty() { "pipeline".into() } else { format!("pipeline/{id}") }
}

/// How a revision ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevisionEnded {
    Through,
    Failed { step: String, message: String },
    Superseded { by: String },
}

/// One revision's progress.
#[derive(Debug, Clone)]
pub struct RevisionProgress {
    pub revision: String,
    /// The deployment id, made when it was registered.
    pub id: String,
    pub registered_at: i64,
    /// The vars it was registered with (`version`).
    pub vars: Map<String, Value>,
    /// Steps succeeded or skipped.
    pub done: FixedBitSet,
    /// Steps started and not ended.
    pub running: FixedBitSet,
    /// When each step succeeded or was skipped.
    pub succeeded_at: HashMap<usize, i64>,
    /// Steps skipped: done, but nothing deployed.
    pub skipped: FixedBitSet,
    pub ended: Option<RevisionEnded>,
    /// Markers (not steps' entries) already written (`pipeline/staging` + `stage-started`), so
    /// none is written twice.
    pub markers: HashSet<(String, Event)>,
}

impl RevisionProgress {
    pub fn is_live(&self) -> bool {
        self.ended.is_none()
    }

    /// Whether it has done anything yet.
    pub fn under_way(&self) -> bool {
        self.done.count_ones(..) > 0 || self.running.count_ones(..) > 0
    }
}

/// Everything the log says of a pipeline, indexed.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Each run of a revision, in the order they were registered: oldest first. A revision
    /// registered again once its run ended (a rollback) is a new run.
    pub revisions: Vec<RevisionProgress>,
    /// A revision's newest run.
    by_revision: HashMap<String, usize>,
    /// A run by its deployment id.
    by_id: HashMap<String, usize>,
    /// The steps the pipeline holds, as recorded (`step-introduced`, not since withdrawn).
    pub introduced: HashSet<String>,
    /// Whether any step was ever introduced: the first drive of a pipeline introduces every
    /// step with nothing under way.
    pub held_before: bool,
    /// (stage or group, deployment id).
    pub approvals: HashSet<(String, String)>,
    /// (stage, deployment id) → artifacts registered.
    pub artifacts: HashMap<(String, String), HashSet<String>>,
}

/// What to do with a step of a revision now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDecision {
    /// Start it (and, first, stop these older revisions: `Supersede`).
    Start { supersedes: Vec<String> },
    /// Record it skipped, with why.
    Skip(String),
    /// Not yet: what it waits for.
    Wait(String),
    /// Not until someone approves the gate before `gate` (a group's id) for `revision`.
    Approval { gate: String, revision: String },
    /// It is running.
    Running,
}

impl StepDecision {
    /// What a step that waits waits for, as said; an approval with how to give it, which the
    /// front end says (`how(revision, gate)`: the CLI's command, the controller's annotation).
    pub fn waits_for(&self, how: &dyn Fn(&str, &str) -> String) -> Option<String> {
        match self {
            StepDecision::Wait(why) => Some(why.clone()),
            StepDecision::Approval { gate, revision } => Some(format!("approval of {gate} ({})", how(revision, gate))),
            StepDecision::Start { .. } | StepDecision::Skip(_) | StepDecision::Running => None,
        }
    }
}

/// A decision for one step of one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    pub revision: String,
    pub step: usize,
    pub decision: StepDecision,
}

impl Progress {
    /// The progress `entries` (oldest first) record for `pipeline`.
    pub fn from_entries(pipeline: &Pipeline, entries: &[Entry]) -> Progress {
        let mut progress = Progress::default();
        for entry in entries {
            progress.record(pipeline, entry);
        }
        progress
    }

    /// The newest run of `revision`.
    pub fn revision(&self, revision: &str) -> Option<&RevisionProgress> {
        self.by_revision.get(revision).map(|&r| &self.revisions[r])
    }

    /// Takes in one entry, as the log has it.
    pub fn record(&mut self, pipeline: &Pipeline, entry: &Entry) {
        let steps = pipeline.steps.len();
        if entry.event == Event::RevisionRegistered {
            if !self.by_id.contains_key(&entry.id) {
                self.by_revision.insert(entry.revision.clone(), self.revisions.len());
                self.by_id.insert(entry.id.clone(), self.revisions.len());
                self.revisions.push(RevisionProgress {
                    revision: entry.revision.clone(),
                    id: entry.id.clone(),
                    registered_at: entry.at,
                    vars: entry.detail.get("vars").and_then(Value::as_object).cloned().unwrap_or_default(),
                    done: FixedBitSet::with_capacity(steps),
                    running: FixedBitSet::with_capacity(steps),
                    succeeded_at: HashMap::new(),
                    skipped: FixedBitSet::with_capacity(steps),
                    ended: None,
                    markers: HashSet::new(),
                });
            }
            return;
        }
        let id = entry.target.strip_prefix("pipeline/").unwrap_or_default();
        match entry.event {
            Event::StepIntroduced => {
                self.introduced.insert(id.to_string());
                self.held_before = true;
                return;
            }
            Event::StepWithdrawn => {
                self.introduced.remove(id);
                return;
            }
            Event::Approved => {
                self.approvals.insert((id.to_string(), entry.id.clone()));
                return;
            }
            Event::ArtifactRegistered => {
                let artifact = entry.detail["artifact"].as_str().unwrap_or_default().to_string();
                self.artifacts.entry((id.to_string(), entry.id.clone())).or_default().insert(artifact);
                return;
            }
            _ => {}
        }
        let Some(&r) = self.by_id.get(&entry.id) else { return };
        let progress = &mut self.revisions[r];
        let step = pipeline.step(id);
        if step.is_none() {
            progress.markers.insert((entry.target.clone(), entry.event));
        }
        match (entry.event, step) {
            (Event::StepStarted, Some(s)) => progress.running.insert(s),
            (Event::StepSucceeded | Event::StepSkipped, Some(s)) => {
                progress.running.set(s, false);
                progress.done.insert(s);
                progress.succeeded_at.insert(s, entry.at);
                progress.skipped.set(s, entry.event == Event::StepSkipped);
            }
            (Event::StepFailed, Some(s)) => {
                progress.running.set(s, false);
                let message = entry.detail["message"].as_str().unwrap_or("failed").to_string();
                progress.ended = Some(RevisionEnded::Failed { step: pipeline.steps[s].id.clone(), message });
            }
            (Event::StepInterrupted, Some(s)) => progress.running.set(s, false),
            (Event::PipelineFinishedSuccessfully, _) => progress.ended = Some(RevisionEnded::Through),
            (Event::PipelineFailed, _) if progress.ended.is_none() => {
                let message = entry.detail["message"].as_str().unwrap_or("failed").to_string();
                progress.ended = Some(RevisionEnded::Failed { step: String::new(), message });
            }
            (Event::RevisionSuperseded, _) => {
                let by = entry.detail["by"].as_str().unwrap_or_default().to_string();
                progress.ended = Some(RevisionEnded::Superseded { by });
            }
            _ => {}
        }
    }

    /// The seed's frontier of revision `r`: flooding from the roots through what is done, the
    /// steps reached that are not done. `seen` keeps each step once.
    pub fn frontier(&self, pipeline: &Pipeline, r: usize) -> Vec<usize> {
        let done = &self.revisions[r].done;
        let mut seen = FixedBitSet::with_capacity(pipeline.steps.len());
        let mut queue: VecDeque<usize> = VecDeque::new();
        for &root in &pipeline.roots {
            seen.insert(root);
            queue.push_back(root);
        }
        let mut frontier = Vec::new();
        while let Some(a) = queue.pop_front() {
            if !done.contains(a) {
                frontier.push(a);
                continue;
            }
            for &b in &pipeline.steps[a].next {
                if !seen.put(b) {
                    queue.push_back(b);
                }
            }
        }
        frontier
    }

    /// What to do now with every step on every live revision's frontier, oldest revision
    /// first (older revisions take batch precedence).
    pub fn schedule(&self, pipeline: &Pipeline, now: i64) -> Vec<Scheduled> {
        let mut scheduled = Vec::new();
        // Steps started in this round count against batches, queues and `maxParallel`.
        let mut starting: Vec<(usize, usize)> = Vec::new();
        for (r, progress) in self.revisions.iter().enumerate() {
            if !progress.is_live() {
                continue;
            }
            let frontier = self.frontier(pipeline, r);
            let mut later = FixedBitSet::with_capacity(pipeline.steps.len());
            for &f in &frontier {
                later.union_with(&pipeline.after[f]);
            }
            for &a in &frontier {
                // Not ready: another step on the frontier leads to it (the seed's coalescing).
                if later.contains(a) {
                    continue;
                }
                let decision = self.decide(pipeline, r, a, now, &starting);
                if matches!(decision, StepDecision::Start { .. }) {
                    starting.push((r, a));
                }
                scheduled.push(Scheduled { revision: progress.revision.clone(), step: a, decision });
            }
        }
        scheduled
    }

    fn decide(&self, pipeline: &Pipeline, r: usize, a: usize, now: i64, starting: &[(usize, usize)]) -> StepDecision {
        let progress = &self.revisions[r];
        let step = &pipeline.steps[a];
        if progress.running.contains(a) {
            return StepDecision::Running;
        }
        // A step the revision has gone past (a step after it done or started) was added behind
        // it: run now, new code would run first deep in the pipeline, after later steps ran
        // without it (the deployment-log document's cases 010 and 011 once its successor ran).
        // One it has not reached runs, added while it was under way or not (case 011): the
        // revision goes through it on its way, as every later one will.
        if !pipeline.after[a].is_disjoint(&progress.done) || !pipeline.after[a].is_disjoint(&progress.running) {
            return StepDecision::Skip("introduced-after".into());
        }
        let stage = &pipeline.stages[step.stage];
        let group = &stage.groups[step.group];
        let first_of_target = step.previous.iter().all(|&p| pipeline.steps[p].target != step.target);
        let first_of_group = step
            .previous
            .iter()
            .all(|&p| pipeline.steps[p].group != step.group || pipeline.steps[p].stage != step.stage);
        if first_of_target && first_of_group && !stage.requires.is_empty() && step.group == 0 {
            let have = self.artifacts.get(&(stage.name.clone(), progress.id.clone()));
            let missing: Vec<&str> =
                stage.requires.iter().filter(|a| !have.is_some_and(|h| h.contains(*a))).map(String::as_str).collect();
            if !missing.is_empty() {
                return StepDecision::Wait(format!("artifacts not yet registered: {}", missing.join(", ")));
            }
        }
        if first_of_target && group.approval && !self.approvals.contains(&(group.id.clone(), progress.id.clone())) {
            return StepDecision::Approval { gate: group.id.clone(), revision: progress.revision.clone() };
        }
        if let Some((window, until)) = stage.windows.iter().find_map(|w| w.holds(now).map(|until| (w, until))) {
            return StepDecision::Wait(format!(
                "the deny window {} to end at {}",
                window.said,
                crate::history::format_time(until)
            ));
        }
        if let Some(why) = self.held_by_batch(pipeline, r, a, starting) {
            return StepDecision::Wait(why);
        }
        if pipeline.concurrency == Concurrency::Queue {
            let before = self.revisions[..r].iter().find(|o| o.is_live() && !o.done.contains(a));
            if let Some(older) = before {
                return StepDecision::Wait(format!("revision {} first (concurrency: Queue)", older.revision));
            }
        }
        if let (true, Some(max)) = (first_of_target, group.max_parallel) {
            let busy = self.busy_targets(pipeline, r, step.stage, step.group, starting);
            if busy >= max {
                return StepDecision::Wait(format!("{busy} of {} at once (maxParallel {max})", group.id));
            }
        }
        if let Work::Wait(duration) = &pipeline.steps[a].work {
            let since = step.previous.iter().filter_map(|p| progress.succeeded_at.get(p)).max().copied().unwrap_or(now);
            let until = since + duration.as_millis() as i64;
            if now < until {
                return StepDecision::Wait(format!(
                    "{} until {}",
                    step.id.rsplit('/').next().unwrap_or_default(),
                    crate::history::format_time(until)
                ));
            }
        }
        let supersedes =
            if pipeline.concurrency == Concurrency::Supersede && !self.stage_started(pipeline, r, step.stage) {
                self.revisions[..r]
                    .iter()
                    .filter(|o| o.is_live() && !stage.steps.iter().all(|&s| o.done.contains(s)))
                    .map(|o| o.revision.clone())
                    .collect()
            } else {
                Vec::new()
            };
        StepDecision::Start { supersedes }
    }

    fn stage_started(&self, pipeline: &Pipeline, r: usize, stage: usize) -> bool {
        let progress = &self.revisions[r];
        pipeline.stages[stage].steps.iter().any(|&s| progress.done.contains(s) || progress.running.contains(s))
    }

    /// Why a batch keeps `a` from starting for revision `r`: another live revision is inside
    /// it (started a step of its `from`, not through every step of its `to`).
    fn held_by_batch(&self, pipeline: &Pipeline, r: usize, a: usize, starting: &[(usize, usize)]) -> Option<String> {
        for batch in pipeline.batches.iter().filter(|b| b.from.contains(&a)) {
            for (o, other) in self.revisions.iter().enumerate() {
                if o == r || !other.is_live() {
                    continue;
                }
                let entered = batch
                    .from
                    .iter()
                    .any(|&s| other.done.contains(s) || other.running.contains(s) || starting.contains(&(o, s)));
                let through = batch.to.iter().all(|&s| other.done.contains(s));
                if entered && !through {
                    return Some(format!("batch {} holds revision {}", batch.said, other.revision));
                }
            }
        }
        None
    }

    /// How many targets of a group revision `r` has under way (started, not through).
    fn busy_targets(
        &self,
        pipeline: &Pipeline,
        r: usize,
        stage: usize,
        group: usize,
        starting: &[(usize, usize)],
    ) -> usize {
        let progress = &self.revisions[r];
        let steps = &pipeline.stages[stage].groups[group].steps;
        let mut targets: HashMap<usize, (bool, bool)> = HashMap::new();
        for &s in steps {
            let entry = targets.entry(pipeline.steps[s].target).or_insert((false, true));
            entry.0 |= progress.done.contains(s) || progress.running.contains(s) || starting.contains(&(r, s));
            entry.1 &= progress.done.contains(s);
        }
        targets.values().filter(|(started, through)| *started && !*through).count()
    }
}
