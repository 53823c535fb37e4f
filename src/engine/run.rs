//! The coordinator: one loop owns a run's state (which resources are waiting, running, done),
//! starts every resource whose dependencies are VALID, and settles results as they come back.
//! Plan and apply are the same loop; plan never runs an action.
//!
//! ```text
//! Engine::new(manifest, executor, options)
//!     .prepare()      init every resource, check plugs/schemas/typed dependencies
//!     .plan()         read every state it can; the rest is pending
//!     .apply(&plan)   run actions in dependency order, independent branches concurrently
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::as_found;
use super::config::{Knowledge, Known};
use super::context::{RunContext, RunOptions};
use super::error::{Cause, Phase, ResourceError};
use super::events::{Approver, NoObserver, Observer, RunEvent};
use super::executor::Executor;
use super::init::{PrepareError, init_all};
use super::plan::{Plan, Report, ResourceEntry, Standing};
use super::protocol::{StateResponse, Status};
use super::resource::{self, ApplyStopped};
use super::validate::ValidatedManifest;

/// A run that has not started: build it, then [`Engine::prepare`].
pub struct Engine {
    manifest: Arc<ValidatedManifest>,
    executor: Arc<dyn Executor>,
    options: RunOptions,
    observer: Arc<dyn Observer>,
    cancel: CancellationToken,
}

impl Engine {
    pub fn new(manifest: Arc<ValidatedManifest>, executor: Arc<dyn Executor>, options: RunOptions) -> Self {
        Self { manifest, executor, options, observer: Arc::new(NoObserver), cancel: CancellationToken::new() }
    }

    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Cancelling the token stops running programs and starts no new ones.
    pub fn with_cancellation(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Inits every resource and checks what each type needs. Nothing but `init` runs.
    pub async fn prepare(self) -> Result<Prepared, PrepareError> {
        let mut ctx = RunContext {
            permits: Semaphore::new(self.options.parallelism.max(1)),
            types: Vec::new(),
            manifest: self.manifest,
            options: self.options,
            executor: self.executor,
            observer: self.observer,
            cancel: self.cancel,
            warnings: Default::default(),
        };
        ctx.types = init_all(&ctx).await?;
        Ok(Prepared { ctx })
    }
}

/// A plan that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manifest {manifest}: {message}; nothing was applied")]
pub struct NotApplicable {
    pub manifest: String,
    pub message: String,
}

/// Every resource initialized and checked; ready to plan and apply.
pub struct Prepared {
    pub(crate) ctx: RunContext,
}

/// What one round of the coordinator does.
#[derive(Clone, Copy)]
enum Round<'a> {
    /// Reads the state of every resource whose dependencies are VALID.
    Plan,
    /// Reads the state of every resource still unread whose dependencies' states are known as
    /// found (VALID, or STALE before their actions): a plan's second round.
    AsFound,
    /// Runs actions, each approved by the approver.
    Apply(&'a dyn Approver),
}

/// Where the coordinator is with one resource; what the resource is, is its [`ResourceEntry`].
#[derive(Clone, Copy)]
enum Slot {
    Waiting,
    /// Its dependencies are VALID; it starts when a task slot is free.
    Ready,
    Running(Instant),
    Done,
}

impl Prepared {
    /// Reads the state of every resource it can without running any action. Resources waiting
    /// on a dependency that is not VALID are pending: read with their dependencies' states as
    /// found where those are known ([`as_found`]), with the inputs they cannot know yet.
    pub async fn plan(&self) -> Plan {
        let manifest = &self.ctx.manifest;
        let unread = manifest.resources.iter().map(|r| entry(r, Standing::unread(), None)).collect();
        let read = self.drive(unread, Round::Plan).await;
        let waiting: Vec<bool> = read.iter().map(|e| matches!(e.standing, Standing::Pending { .. })).collect();
        let mut entries = match waiting.contains(&true) {
            true => self.drive(read, Round::AsFound).await,
            false => read,
        };
        let mut notes = Vec::new();
        for &i in manifest.graph.topological().iter().filter(|&&i| waiting[i]) {
            let e = &mut entries[i];
            let found = match std::mem::replace(&mut e.standing, Standing::unread()) {
                Standing::Valid { state, .. } => Some(StateResponse::Valid { state }),
                Standing::NeedsActions { status, stale_state, planned_state, actions } => {
                    Some(StateResponse::NeedsActions { status, stale_state, planned_state, actions })
                }
                Standing::Failed(error) => {
                    notes.push(format!(
                        "{} could not be read before its dependencies' actions: {}",
                        e.name,
                        manifest.mask.text(&error.headline())
                    ));
                    None
                }
                _ => None,
            };
            if found.is_none() {
                e.config = None;
            }
            entries[i].standing = as_found::pending(manifest, i, &entries, found);
        }
        Plan {
            manifest: manifest.name.clone(),
            run_id: self.ctx.options.run_id.clone(),
            entries,
            removals: Vec::new(),
            held: 0,
            notes,
            mask: manifest.mask.clone(),
            warnings: self.ctx.take_warnings(),
            replacements: Vec::new(),
        }
    }

    /// Applies a plan made by this `Prepared`: runs the actions of STALE/MISSING resources and
    /// resolves pending ones once their dependencies are VALID. A failure blocks its
    /// dependents; independent branches carry on.
    pub async fn apply(&self, plan: &Plan, approver: &dyn Approver) -> Result<Report, NotApplicable> {
        let manifest = &self.ctx.manifest;
        self.check_made_here(plan)?;
        if !plan.is_applicable() {
            let c = plan.counts();
            let message = format!("the plan has {} failed and {} blocked resources", c.failed, c.blocked);
            return Err(NotApplicable { manifest: manifest.name.clone(), message });
        }
        let mut entries = self.drive(plan.entries.clone(), Round::Apply(approver)).await;
        for e in &mut entries {
            // Only when the run was cancelled before the resource could start.
            if !matches!(
                e.standing,
                Standing::Valid { .. } | Standing::Failed(_) | Standing::Blocked { .. } | Standing::Declined
            ) {
                e.standing = Standing::Cancelled;
            }
        }
        let report =
            Report::new(manifest.name.clone(), self.ctx.options.run_id.clone(), entries, manifest.mask.clone());
        Ok(report.with_warnings(self.ctx.take_warnings()))
    }

    /// Which thing resource `i` is with `config`: its type's identity fields, as shown
    /// (sensitive values masked).
    pub fn identity(&self, i: usize, config: &Value) -> super::identity::IdentityFields {
        super::identity::identity_of(&self.ctx.types[i].init.identity, &self.ctx.manifest.mask.value(config))
    }

    /// Refuses a plan made for another manifest.
    pub(crate) fn check_made_here(&self, plan: &Plan) -> Result<(), NotApplicable> {
        let resources = &self.ctx.manifest.resources;
        if plan.entries.len() == resources.len() && plan.entries.iter().zip(resources).all(|(e, r)| e.name == r.name) {
            return Ok(());
        }
        let message = "the plan was made for a different manifest".into();
        Err(NotApplicable { manifest: self.ctx.manifest.name.clone(), message })
    }

    /// The coordinator loop: reads states, and in [`Round::Apply`] runs actions.
    async fn drive(&self, mut entries: Vec<ResourceEntry>, round: Round<'_>) -> Vec<ResourceEntry> {
        let graph = &self.ctx.manifest.graph;
        let as_found = matches!(round, Round::AsFound);
        let learnt = |e: &ResourceEntry| if as_found { as_found::known(e) } else { known_of(e) };
        let known: Arc<Knowledge> = Arc::new(entries.iter().map(learnt).collect());
        let mut slots: Vec<Slot> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| match as_found {
                true if matches!(e.standing, Standing::Pending { .. }) => Slot::Waiting,
                false if known.of(i).is_none() => Slot::Waiting,
                _ => Slot::Done,
            })
            .collect();
        let mut running = FuturesUnordered::new();
        // Resources whose dependencies are VALID, waiting for a task. Tasks beyond what the
        // parallelism can keep busy would only hold memory (thousands of independent resources
        // are all ready at once).
        let mut ready: VecDeque<usize> = VecDeque::new();
        let tasks = self.ctx.options.parallelism.max(1).saturating_mul(4).max(16);
        for &i in graph.topological() {
            if is_ready(slots[i], &known, graph.dependencies(i)) {
                slots[i] = Slot::Ready;
                ready.push_back(i);
            }
        }
        loop {
            while running.len() < tasks
                && let Some(i) = ready.pop_front()
            {
                slots[i] = Slot::Running(Instant::now());
                let (known, entry) = (known.clone(), entries[i].clone());
                running.push(async move { (i, self.work(i, &known, entry, round).await) });
            }
            let Some((i, (standing, config))) = running.next().await else { break };
            let elapsed = match slots[i] {
                Slot::Running(started) => started.elapsed(),
                _ => Duration::ZERO,
            };
            slots[i] = Slot::Done;
            entries[i] = ResourceEntry { standing, config, elapsed, ..entries[i].clone() };
            if as_found {
                // Read as found: what the plan shows of it is settled by `plan`.
            } else {
                self.emit_settled(&entries[i]);
            }
            if let Some(learnt) = learnt(&entries[i]) {
                known.learn(i, Some(learnt));
                for &d in graph.dependents(i) {
                    if !self.ctx.cancel.is_cancelled() && is_ready(slots[d], &known, graph.dependencies(d)) {
                        slots[d] = Slot::Ready;
                        ready.push_back(d);
                    }
                }
            } else if matches!(entries[i].standing, Standing::Failed(_) | Standing::Declined) && !as_found {
                self.block_dependents(i, &mut slots, &mut entries);
            }
        }
        entries
    }

    /// Everything done for one resource in one task: resolve (unless the plan already did),
    /// then, when applying, run its actions.
    async fn work(
        &self,
        i: usize,
        known: &Knowledge,
        entry: ResourceEntry,
        round: Round<'_>,
    ) -> (Standing, Option<Value>) {
        let (config, status, stale_state, planned_state, actions) = match (entry.standing, entry.config) {
            (Standing::NeedsActions { status, stale_state, planned_state, actions }, Some(config)) => {
                (config, status, stale_state, planned_state, actions)
            }
            // Only the plan takes resources for VALID: once something was applied, whatever
            // depends on it is read.
            (planned, planned_config) => {
                match resource::resolve(&self.ctx, i, known, !matches!(round, Round::Apply(_))).await {
                    Err(e) => return (Standing::Failed(e), None),
                    // Its config reads what the plan cannot know yet: it waits (only a plan's
                    // knowledge holds planned states).
                    Ok(resource::Resolved { response: None, config }) => return (Standing::unread(), Some(config)),
                    Ok(resource::Resolved { response: Some(response), config }) => match response {
                        // To replace (`--replace`): deleted, then created again.
                        StateResponse::Valid { state } if self.replacing(i) => {
                            (config, Status::Stale, Some(state), None, vec![resource::replace_action(&self.ctx, i)])
                        }
                        StateResponse::NeedsActions { status: Status::Stale, stale_state, .. } if self.replacing(i) => {
                            (config, Status::Stale, stale_state, None, vec![resource::replace_action(&self.ctx, i)])
                        }
                        StateResponse::Valid { state } => {
                            return (Standing::Valid { state, applied: None }, Some(config));
                        }
                        StateResponse::NeedsActions { status, stale_state, planned_state, actions } => {
                            // Read by the plan as found, with nothing it read expected to change:
                            // apply runs only what the plan showed.
                            if let (Standing::Pending { found: Some(found), unknown_inputs, waiting_on }, Some(shown)) =
                                (&planned, &planned_config)
                                && unknown_inputs.is_empty()
                                && let Some(error) = as_found::unshown(
                                    &self.ctx.manifest,
                                    i,
                                    (found, shown),
                                    waiting_on,
                                    &config,
                                    &actions,
                                )
                            {
                                return (Standing::Failed(error), Some(config));
                            }
                            (config, status, stale_state, planned_state, actions)
                        }
                    },
                }
            }
        };
        if self.ctx.manifest.resources[i].readonly {
            let names = actions.iter().map(|a| a.name.clone()).collect();
            return (
                Standing::Failed(ResourceError::new(Phase::State, Cause::Readonly { status, actions: names })),
                Some(config),
            );
        }
        let Round::Apply(approver) = round else {
            return (Standing::NeedsActions { status, stale_state, planned_state, actions }, Some(config));
        };
        if !approver.approve_resource(&self.ctx.manifest.resources[i].name, status, &actions).await {
            return (Standing::Declined, Some(config));
        }
        let states = (stale_state, planned_state.as_ref());
        let applied = match self.replacing(i) && actions.first().is_some_and(|a| a.name == resource::REPLACE) {
            true => resource::replace(&self.ctx, i, config.clone(), states.0, known, approver).await,
            false => resource::apply_actions(&self.ctx, i, config.clone(), states, &actions, known, approver).await,
        };
        let standing = match applied {
            Ok((state, ran)) => Standing::Valid { state, applied: Some(ran) },
            Err(ApplyStopped::Failed(e)) => Standing::Failed(e),
            Err(ApplyStopped::Declined) => Standing::Declined,
        };
        (standing, Some(config))
    }

    /// Whether `--replace` names resource `i`.
    fn replacing(&self, i: usize) -> bool {
        self.ctx.options.replace.contains(&self.ctx.manifest.resources[i].name)
    }

    /// Marks everything waiting downstream of `root` as blocked by it.
    fn block_dependents(&self, root: usize, slots: &mut [Slot], entries: &mut [ResourceEntry]) {
        let name = &self.ctx.manifest.resources[root].name;
        for d in self.ctx.manifest.graph.transitive_dependents(root) {
            if matches!(slots[d], Slot::Waiting) {
                slots[d] = Slot::Done;
                entries[d].standing = Standing::Blocked { by: name.clone() };
                entries[d].elapsed = Duration::ZERO;
                self.emit_settled(&entries[d]);
            }
        }
    }

    fn emit_settled(&self, entry: &ResourceEntry) {
        self.ctx.emit(RunEvent::Settled {
            resource: entry.name.clone(),
            label: entry.standing.label(),
            elapsed: entry.elapsed,
            message: entry.standing.message(),
        });
    }
}

fn entry(resource: &super::validate::Resource, standing: Standing, config: Option<Value>) -> ResourceEntry {
    ResourceEntry {
        name: resource.name.clone(),
        type_name: resource.type_name.clone(),
        standing,
        elapsed: Duration::ZERO,
        config,
    }
}

/// What a VALID entry tells its dependents.
pub(crate) fn known_of(entry: &ResourceEntry) -> Option<Arc<Known>> {
    match (&entry.standing, &entry.config) {
        (Standing::Valid { state, .. }, Some(config)) => {
            Some(Arc::new(Known { config: config.clone(), state: state.clone(), planned: false }))
        }
        _ => None,
    }
}

/// A resource starts once, when it is waiting and every dependency is VALID.
fn is_ready(slot: Slot, known: &Knowledge, dependencies: &[usize]) -> bool {
    matches!(slot, Slot::Waiting) && dependencies.iter().all(|&d| known.of(d).is_some())
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
