//! One recorded pass over a manifest, for every front end: the CLI's `plan`, `apply` and each
//! pass of `reconcile`, and the controller's reconcile and deletion.
//!
//! ```text
//! recover   runs that change things: stop what interrupted runs left, record them interrupted
//! started   the deployment log's Recorder is an observer like the others: it records from events
//! prepare   init every resource
//! plan      read every state it can; observers see the plan and the drift
//! decide    failures, nothing to do, or the approver: apply, decline, refuse
//! apply     (or delete) in dependency order; each action's intent durable first, or it does not run
//! ended     succeeded, failed, declined — or interrupted, when the cancellation stopped the pass
//! ```
//!
//! Front ends bring their observers (progress; the status journal), their approver (prompts;
//! approve all) and their cancellation, and turn the [`Passed`] into output, status and exit
//! codes. Nothing here prints; every way out of a pass records its end.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::engine::PrepareError;
use crate::engine::config::render_outputs;
use crate::engine::context::RunOptions;
use crate::engine::delete::{DeleteReport, delete};
pub use crate::engine::events::Mode;
use crate::engine::events::{Approver, Decision, Ending, Observer, Observers, RunEvent};
use crate::engine::executor::{ExecError, Executor};
use crate::engine::plan::{Change, Drift, Plan, Removal, Report};
use crate::engine::prune;
use crate::engine::run::Engine;
use crate::engine::saved::SavedPlan;
use crate::engine::validate::ValidatedManifest;
use crate::history::inventory::{Keeper, identities, inventory, predates};
use crate::history::recorder::{Interrupted, Recorder, close_interrupted};
use crate::history::{History, HistoryError, in_progress};

/// A pass to run: what, with what, watched by whom, approved by whom.
pub struct Pass<'a> {
    pub manifest: Arc<ValidatedManifest>,
    pub executor: Arc<dyn Executor>,
    pub log: Arc<dyn History>,
    pub mode: Mode,
    pub options: RunOptions,
    /// Beside the deployment log's recorder: progress, a status journal.
    pub observers: Vec<Arc<dyn Observer>>,
    pub approver: &'a dyn Approver,
    /// Cancelled to stop the pass: running programs are stopped, none are started.
    pub cancel: CancellationToken,
    /// Why the pass was cancelled, for the log (asked only when it was).
    pub cancelled_because: &'a (dyn Fn() -> String + Sync),
    /// Deal with interrupted runs first ([`recover`]): for passes that change things, which
    /// hold their state exclusively.
    pub recover: bool,
    /// Apply only if the plan made now is this saved one ([`SavedPlan::differences`]).
    pub expected: Option<SavedPlan>,
    /// Once the plan is approved, read every state again and apply only if the plan still
    /// holds: for approvers that may take long (a person at a prompt).
    pub recheck: bool,
    /// Whether the pass keeps the manifest's inventory and removes what left it.
    pub inventory: Inventory,
}

/// What a pass does with the manifest's inventory ([`crate::history::inventory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inventory {
    /// Neither kept nor read: only the declared resources count (a delete pass deletes them).
    Off,
    /// Kept in the log; what it holds and the manifest no longer declares is removed.
    Keep,
    /// Kept in the log; what it holds and the manifest no longer declares is left in place
    /// and forgotten (a Manifest's `removalPolicy: Orphan`): nothing of it is inited or read.
    Orphan,
    /// Everything held or declared is removed (`destroy`; with [`Mode::Plan`], planned only).
    Destroy,
}

/// How a pass ended.
#[derive(Debug)]
pub enum Ended {
    /// Init failed, or the executor cannot run these types: nothing was read.
    NotPrepared(PrepareError),
    /// [`Mode::Plan`]: planned; nothing ran.
    Planned(Plan),
    /// The plan has failed or blocked resources: nothing was applied.
    NotApplicable(Plan),
    Declined {
        plan: Plan,
        why: String,
    },
    /// The plan made now is not the plan that was approved (saved, or shown at a prompt):
    /// nothing was applied.
    PlanChanged {
        plan: Plan,
        differences: Vec<String>,
    },
    /// No decision could be had (say, no terminal to confirm on): nothing was applied.
    Refused {
        plan: Plan,
        why: String,
    },
    /// Applied, or nothing to apply when the plan has no changes (everything was VALID).
    Applied {
        plan: Plan,
        report: Report,
        /// What became of the resources that left the manifest (deleted first).
        removed: Option<DeleteReport>,
    },
    Deleted {
        plan: Plan,
        report: DeleteReport,
    },
}

impl Ended {
    /// What the types warned of in this pass: while it planned, and while it applied.
    pub fn warnings(&self) -> Vec<crate::engine::plan::TypeWarning> {
        match self {
            Ended::NotPrepared(_) => Vec::new(),
            Ended::Applied { plan, report, .. } => plan.warnings.iter().chain(report.warnings()).cloned().collect(),
            Ended::Planned(plan)
            | Ended::NotApplicable(plan)
            | Ended::Declined { plan, .. }
            | Ended::PlanChanged { plan, .. }
            | Ended::Refused { plan, .. }
            | Ended::Deleted { plan, .. } => plan.warnings.clone(),
        }
    }
}

/// What a pass did.
#[derive(Debug)]
pub struct Passed {
    /// The manifest it ran.
    pub manifest: Arc<ValidatedManifest>,
    pub run_id: String,
    /// How the log names this revision: its number in a state directory's log.
    pub revision: String,
    pub recovered: Vec<Recovered>,
    /// Resources VALID at their last observation in the log and not now, with the same inputs.
    pub drifts: Vec<Drift>,
    /// Resources not VALID now whose inputs changed since they were last VALID.
    pub changes: Vec<Change>,
    /// The manifest's outputs (unmasked), when it declares some and the pass left everything
    /// VALID; or why they could not be rendered.
    pub outputs: Option<Result<serde_json::Value, String>>,
    pub ended: Ended,
    /// Set when the cancellation stopped the pass (recorded as interrupted), with why.
    pub interrupted: Option<String>,
    /// The first failure to write the deployment log, when the pass is not fully recorded.
    pub unrecorded: Option<String>,
}

impl Passed {
    /// What an applying pass did to each resource.
    pub fn report(&self) -> Option<&Report> {
        match &self.ended {
            Ended::Applied { report, .. } => Some(report),
            _ => None,
        }
    }

    /// Whether the pass left (or, planning, found) every resource VALID.
    pub fn succeeded(&self) -> bool {
        match &self.ended {
            Ended::Planned(plan) => plan.is_applicable(),
            Ended::Applied { report, removed, .. } => {
                report.succeeded() && removed.as_ref().is_none_or(DeleteReport::succeeded)
            }
            Ended::Deleted { report, .. } => report.succeeded(),
            _ => false,
        }
    }
}

/// Why a pass read and ran nothing.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Log(#[from] HistoryError),
    #[error("cannot stop what the interrupted run {run} left running: {source}; nothing was started")]
    Recovery { run: String, source: ExecError },
}

impl PassError {
    pub fn reason(&self) -> &'static str {
        match self {
            PassError::Log(e) => e.reason(),
            PassError::Recovery { .. } => "RecoveryFailed",
        }
    }
}

impl Pass<'_> {
    /// Runs the pass. An error means nothing was read or run: recovery failed, or the log
    /// cannot be read for drift.
    pub async fn run(self) -> Result<Passed, PassError> {
        let run_id = self.options.run_id.clone();
        let recovered = match self.recover {
            true => recover(self.log.as_ref(), self.executor.as_ref(), &run_id).await?,
            false => Vec::new(),
        };
        let revision = self.log.revision_of(&self.manifest.revision)?;
        let key = self.manifest.inventory_key();
        let mut held = match self.inventory {
            Inventory::Off => Default::default(),
            _ => inventory(self.log.as_ref(), &key)?,
        };
        if self.inventory == Inventory::Destroy && predates(self.log.as_ref(), &key)? {
            // Applied before the inventory was kept: what the manifest declares.
            held = self.manifest.source.spec.resources.clone();
        }
        let moves = match self.inventory {
            Inventory::Off => Ok(Vec::new()),
            // Validated already: every move resolves.
            _ => prune::make_moves(&mut held, &self.manifest.source.spec.moves().unwrap_or_default()),
        };
        let mut identities = match self.inventory {
            Inventory::Off => Default::default(),
            _ => identities(self.log.as_ref(), &key)?,
        };
        for (old, new) in moves.iter().flatten() {
            if let Some(identity) = identities.remove(old) {
                identities.insert(new.clone(), identity);
            }
        }
        let mut names: Vec<String> = self.manifest.resources.iter().map(|r| r.name.clone()).collect();
        names.extend(held.keys().filter(|n| self.manifest.index_of(n).is_none()).cloned());
        let mut recorder = Recorder::new(self.log.clone(), &run_id, &revision, self.mode, &names)?;
        for (old, new) in moves.iter().flatten() {
            recorder.inherit(new, old)?;
        }
        let kept = variables::kept(&self.manifest);
        let varied = match self.inventory {
            Inventory::Off => None,
            _ if held.is_empty() => None,
            _ => variables::changed(self.log.as_ref(), &self.manifest, &kept)?,
        };
        recorder.variables = Some(kept);
        let recorder = Arc::new(recorder);
        let mut observers: Vec<Arc<dyn Observer>> = vec![recorder.clone()];
        let keeper = match self.inventory {
            Inventory::Off => None,
            _ => Some(Arc::new(Keeper::new(self.log.clone(), &self.manifest, &run_id, &revision, self.mode)?)),
        };
        observers.extend(keeper.iter().map(|k| k.clone() as Arc<dyn Observer>));
        observers.extend(self.observers.iter().cloned());
        let observers = Arc::new(Observers(observers));
        for r in &recovered {
            observers.on_event(&RunEvent::Recovered { description: r.describe() });
        }
        observers.on_event(&RunEvent::Started);
        let books = Books { recorder: recorder.clone(), keeper, held, identities, moves, varied };
        let ended = self.plan_and_decide(observers.clone(), &books).await;
        let mut ending = ended.ending();
        let outputs = match &ended {
            Ended::Applied { report, .. } if report.succeeded() => {
                render_outputs(&self.manifest, report.entries()).map_err(|e| e.to_string()).transpose()
            }
            _ => None,
        };
        if let Some(outputs) = &outputs {
            let shown = outputs.as_ref().map(|v| self.manifest.mask.value(v)).map_err(|e| self.manifest.mask.text(e));
            observers.on_event(&RunEvent::Outputs(shown));
            if let Err(why) = outputs {
                ending = Ending::Failed(format!("the outputs could not be rendered: {why}"));
            }
        }
        let interrupted = self.cancel.is_cancelled().then(|| (self.cancelled_because)());
        let ending = interrupted.clone().map_or(ending, Ending::Interrupted);
        observers.on_event(&RunEvent::Ended(ending));
        Ok(Passed {
            manifest: self.manifest.clone(),
            run_id,
            revision,
            recovered,
            drifts: recorder.drifts(),
            changes: recorder.changes(),
            outputs,
            ended,
            interrupted,
            unrecorded: recorder.failure(),
        })
    }

    fn engine(&self, manifest: Arc<ValidatedManifest>, observers: &Arc<Observers>) -> Engine {
        Engine::new(manifest, self.executor.clone(), self.options.clone())
            .with_observer(observers.clone())
            .with_cancellation(self.cancel.clone())
    }

    async fn plan_and_decide(&self, observers: Arc<Observers>, books: &Books) -> Ended {
        if self.inventory == Inventory::Destroy {
            return self.destroy(observers, books).await;
        }
        let prepared = match self.engine(self.manifest.clone(), &observers).prepare().await {
            Ok(prepared) => prepared,
            Err(e) => return Ended::NotPrepared(e),
        };
        let mut plan = prepared.plan().await;
        if self.mode != Mode::Delete {
            plan.replacements = replacements(&prepared, &plan, books);
        }
        let leaving = match self.mode {
            Mode::Delete => None,
            _ => match self.plan_removal(books, &observers, &plan.replacements).await {
                Ok(leaving) => leaving,
                Err(e) => return Ended::NotPrepared(e),
            },
        };
        plan.removals = leaving.as_ref().map(Leaving::entries).unwrap_or_default();
        plan.held = books.held.len();
        plan.notes.extend(renames(&self.manifest, &books.held, &plan.removals));
        plan.notes.extend(books.varied.clone());
        let recorder = &books.recorder;
        observers.on_planned(&plan, &recorder.drifts(), &recorder.changes());
        match self.mode {
            Mode::Plan => return Ended::Planned(plan),
            Mode::Delete => {
                // Refused only for a plan another `Prepared` made: never this one.
                return match delete(&prepared, &plan).await {
                    Ok(report) => Ended::Deleted { plan, report },
                    Err(_) => Ended::NotApplicable(plan),
                };
            }
            Mode::Apply if !plan.is_applicable() => return Ended::NotApplicable(plan),
            Mode::Apply => {}
        }
        if let Some(expected) = &self.expected {
            let differences = expected.differences(&plan, &self.manifest);
            if !differences.is_empty() {
                return Ended::PlanChanged { plan, differences };
            }
        }
        let decision = if plan.has_changes() { self.approver.approve_plan(&plan).await } else { Decision::Apply };
        match decision {
            Decision::Apply => {}
            Decision::Decline(why) => return Ended::Declined { plan, why },
            Decision::Refuse(why) => return Ended::Refused { plan, why },
        }
        let (plan, leaving) = if self.recheck && plan.has_changes() {
            let mut again = prepared.plan().await;
            again.replacements = replacements(&prepared, &again, books);
            let leaving = match self.plan_removal(books, &observers, &again.replacements).await {
                Ok(leaving) => leaving,
                Err(e) => return Ended::NotPrepared(e),
            };
            again.removals = leaving.as_ref().map(Leaving::entries).unwrap_or_default();
            again.held = books.held.len();
            let differences = SavedPlan::new(&plan, &self.manifest, &[]).differences(&again, &self.manifest);
            if !differences.is_empty() {
                return Ended::PlanChanged { plan: again, differences };
            }
            (again, leaving)
        } else {
            (plan, leaving)
        };
        // What left goes first: a resource renamed without `moved` is deleted, then created
        // anew (created first, it could be the very thing the delete then removes).
        let removed = match &leaving {
            Some(leaving) => match self.remove(books, leaving, &observers).await {
                Ok(report) => Some(report),
                Err(e) => return Ended::NotPrepared(e),
            },
            None => None,
        };
        if removed.as_ref().is_some_and(|r| !r.succeeded()) || self.cancel.is_cancelled() {
            // Nothing more is changed once a removal failed: the declared resources wait.
            let report = Report::untouched(&plan);
            return Ended::Applied { plan, report, removed };
        }
        // A deletion may have taken what a declared resource was found to have (a resource
        // renamed without `moved`: the same file, deleted): their states are read again.
        let deleted = removed.as_ref().is_some_and(|r| r.entries.iter().any(|e| e.removal == Removal::Deleted));
        let plan = match deleted {
            true => Plan {
                removals: plan.removals.clone(),
                held: plan.held,
                notes: plan.notes.clone(),
                warnings: plan.warnings.clone(),
                replacements: plan.replacements.clone(),
                ..prepared.plan().await
            },
            false => plan,
        };
        match prepared.apply(&plan, self.approver).await {
            Ok(report) => Ended::Applied { plan, report, removed },
            Err(_) => Ended::NotApplicable(plan),
        }
    }
}

impl Ended {
    /// How the deployment log records this end.
    fn ending(&self) -> Ending {
        match self {
            Ended::NotPrepared(e) => Ending::Failed(e.to_string()),
            Ended::Planned(_) => Ending::Planned,
            Ended::NotApplicable(_) => Ending::Failed("the plan has failures".into()),
            Ended::Declined { why, .. } | Ended::Refused { why, .. } => Ending::Declined(why.clone()),
            Ended::PlanChanged { differences, .. } => {
                Ending::Failed(format!("the plan no longer holds, nothing was applied: {}", differences.join("; ")))
            }
            Ended::Applied { removed: Some(removed), .. } if !removed.succeeded() => {
                Ending::Failed(format!("removing what left the manifest: {}", removed.problems().join("; ")))
            }
            Ended::Applied { report, .. } if !report.succeeded() => {
                let c = report.counts();
                Ending::Failed(format!(
                    "{} failed, {} blocked, {} declined or cancelled",
                    c.failed, c.blocked, c.declined
                ))
            }
            Ended::Deleted { report, .. } if !report.succeeded() => Ending::Failed(report.problems().join("; ")),
            Ended::Applied { .. } | Ended::Deleted { .. } => Ending::Succeeded,
        }
    }
}

/// A run that never recorded its end, found and dealt with by [`recover`].
#[derive(Debug, Clone)]
pub struct Recovered {
    pub interrupted: Interrupted,
    /// Programs or containers of that run that were still running, and were stopped.
    pub stopped: usize,
}

impl Recovered {
    /// What to tell the user.
    pub fn describe(&self) -> String {
        let run = &self.interrupted.run;
        let mut text = format!(
            "run {} (revision {}, started {}) was interrupted before it recorded its end",
            run.id,
            run.revision,
            crate::history::format_time(run.at)
        );
        if !self.interrupted.actions.is_empty() {
            let intents: Vec<&str> = self.interrupted.actions.iter().map(|a| a.target.as_str()).collect();
            text.push_str(&format!("; it had started {} without recording a result", intents.join(", ")));
        }
        if self.stopped > 0 {
            text.push_str(&format!("; {} of its programs were still running and were stopped", self.stopped));
        }
        text.push_str(". States are read afresh: nothing is repeated blindly.");
        text
    }
}

/// Before a run that changes things reads any state: each run the log shows as started and
/// never ended is stopped — whatever of it still runs here is killed and waited for, so that
/// no action ever runs twice at once — and only then recorded as interrupted, by `by_run`.
/// Call while no other run can be alive (the CLI holds the state lock; a controller holds the
/// object and its lease).
pub async fn recover(log: &dyn History, executor: &dyn Executor, by_run: &str) -> Result<Vec<Recovered>, PassError> {
    let mut stopped = Vec::new();
    for run in in_progress(log, None)? {
        let n =
            executor.stop_run(&run.id).await.map_err(|source| PassError::Recovery { run: run.id.clone(), source })?;
        stopped.push((run.id, n));
    }
    Ok(close_interrupted(log, by_run)?
        .into_iter()
        .map(|interrupted| {
            let stopped = stopped.iter().find(|(id, _)| *id == interrupted.run.id).map_or(0, |(_, n)| *n);
            Recovered { interrupted, stopped }
        })
        .collect())
}

mod removal;
mod variables;
use removal::{Books, Leaving, renames, replacements};

#[cfg(test)]
#[path = "pass_tests.rs"]
mod tests;
