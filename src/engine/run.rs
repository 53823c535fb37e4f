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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::config::Known;
use super::context::{Context, RunOptions};
use super::error::{Cause, Phase, ResourceError};
use super::events::{Approver, NoObserver, Observer, RunEvent};
use super::executor::Executor;
use super::init::{PrepareError, ResourceType, init_all};
use super::plan::{Outcome, Plan, PlanEntry, Planned, Report, ReportEntry, pending};
use super::protocol::{Action, StateResponse, Status};
use super::resource::{self, Stop};
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
        let ctx = Context {
            permits: Semaphore::new(self.options.parallelism.max(1)),
            manifest: self.manifest,
            options: self.options,
            executor: self.executor,
            observer: self.observer,
            cancel: self.cancel,
        };
        let types = init_all(&ctx).await?;
        Ok(Prepared { ctx, types })
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
    pub(crate) ctx: Context,
    pub(crate) types: Vec<ResourceType>,
}

/// What the coordinator knows about one resource.
enum Slot {
    Waiting,
    Running(Instant),
    Done(Settled, Duration),
}

enum Settled {
    Valid {
        known: Arc<Known>,
        applied: Option<Vec<String>>,
    },
    /// Plan only: the resource needs these actions.
    NeedsActions(PlannedActions),
    Failed(ResourceError),
    Declined,
    Blocked {
        by: String,
    },
}

impl Settled {
    fn label(&self) -> &'static str {
        match self {
            Settled::Valid { applied: None, .. } => "VALID",
            Settled::Valid { applied: Some(_), .. } => "APPLIED",
            Settled::NeedsActions(p) if p.status == Status::Missing => "MISSING",
            Settled::NeedsActions(_) => "STALE",
            Settled::Failed(_) => "FAILED",
            Settled::Declined => "DECLINED",
            Settled::Blocked { .. } => "BLOCKED",
        }
    }

    fn message(&self) -> Option<String> {
        match self {
            Settled::Failed(e) => Some(e.to_string()),
            Settled::Blocked { by } => Some(format!("blocked by {by}")),
            Settled::NeedsActions(p) => Some(p.actions.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")),
            Settled::Valid { applied: Some(actions), .. } => Some(actions.join(", ")),
            Settled::Valid { applied: None, .. } | Settled::Declined => None,
        }
    }
}

#[derive(Clone)]
struct PlannedActions {
    config: Value,
    status: Status,
    stale_state: Option<Value>,
    actions: Vec<Action>,
}

type Task<'a> = Pin<Box<dyn Future<Output = (usize, Settled)> + Send + 'a>>;

impl Prepared {
    /// Reads the state of every resource it can without running any action. Resources waiting
    /// on a dependency that is not VALID are pending, with the inputs they cannot know yet.
    pub async fn plan(&self) -> Plan {
        let n = self.ctx.manifest.resources.len();
        let slots = self.drive((0..n).map(|_| Slot::Waiting).collect(), vec![None; n], None).await;
        let labels: Vec<&'static str> =
            slots.iter().map(|s| if let Slot::Done(settled, _) = s { settled.label() } else { "PENDING" }).collect();
        let entries = slots.into_iter().enumerate().map(|(i, slot)| self.plan_entry(i, slot, &labels)).collect();
        Plan { manifest: self.ctx.manifest.name.clone(), run_id: self.ctx.options.run_id.clone(), entries }
    }

    fn plan_entry(&self, i: usize, slot: Slot, labels: &[&'static str]) -> PlanEntry {
        let resource = &self.ctx.manifest.resources[i];
        let (planned, config, elapsed) = match slot {
            Slot::Done(Settled::Valid { known, .. }, d) => {
                (Planned::Valid { state: known.state.clone() }, Some(known.config.clone()), d)
            }
            Slot::Done(Settled::NeedsActions(p), d) => (
                Planned::NeedsActions { status: p.status, stale_state: p.stale_state, actions: p.actions },
                Some(p.config),
                d,
            ),
            Slot::Done(Settled::Failed(e), d) => (Planned::Failed(e), None, d),
            Slot::Done(Settled::Blocked { by }, d) => (Planned::Blocked { by }, None, d),
            Slot::Done(Settled::Declined, d) => unreachable!("plan never asks for approval ({d:?})"),
            Slot::Waiting | Slot::Running(_) => (pending(&self.ctx.manifest, i, labels), None, Duration::ZERO),
        };
        PlanEntry { name: resource.name.clone(), type_name: resource.type_name.clone(), planned, elapsed, config }
    }

    /// Applies a plan made by this `Prepared`: runs the actions of STALE/MISSING resources and
    /// resolves pending ones once their dependencies are VALID. A failure blocks its
    /// dependents; independent branches carry on.
    pub async fn apply(&self, plan: &Plan, approver: &dyn Approver) -> Result<Report, NotApplicable> {
        let manifest = &self.ctx.manifest;
        let refuse = |message: String| NotApplicable { manifest: manifest.name.clone(), message };
        if plan.entries.len() != manifest.resources.len()
            || plan.entries.iter().zip(&manifest.resources).any(|(e, r)| e.name != r.name)
        {
            return Err(refuse("the plan was made for a different manifest".into()));
        }
        if !plan.is_applicable() {
            let c = plan.counts();
            return Err(refuse(format!("the plan has {} failed and {} blocked resources", c.failed, c.blocked)));
        }
        let mut slots = Vec::with_capacity(plan.entries.len());
        let mut planned = Vec::with_capacity(plan.entries.len());
        for entry in &plan.entries {
            let (slot, p) = match (&entry.planned, &entry.config) {
                (Planned::Valid { state }, Some(config)) => {
                    let known = Arc::new(Known { config: config.clone(), state: state.clone() });
                    (Slot::Done(Settled::Valid { known, applied: None }, entry.elapsed), None)
                }
                (Planned::NeedsActions { status, stale_state, actions }, Some(config)) => {
                    let p = PlannedActions {
                        config: config.clone(),
                        status: *status,
                        stale_state: stale_state.clone(),
                        actions: actions.clone(),
                    };
                    (Slot::Waiting, Some(p))
                }
                _ => (Slot::Waiting, None),
            };
            slots.push(slot);
            planned.push(p);
        }
        let slots = self.drive(slots, planned, Some(approver)).await;
        let entries = slots.into_iter().zip(&manifest.resources).map(|(slot, r)| report_entry(r, slot)).collect();
        Ok(Report::new(manifest.name.clone(), self.ctx.options.run_id.clone(), entries))
    }

    /// The coordinator loop. With an approver it applies; without, it only reads state.
    async fn drive(
        &self,
        mut slots: Vec<Slot>,
        planned: Vec<Option<PlannedActions>>,
        approver: Option<&dyn Approver>,
    ) -> Vec<Slot> {
        let graph = &self.ctx.manifest.graph;
        let mut known: Vec<Option<Arc<Known>>> = slots
            .iter()
            .map(|s| match s {
                Slot::Done(Settled::Valid { known, .. }, _) => Some(known.clone()),
                _ => None,
            })
            .collect();
        let mut running: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
        for &i in graph.topological() {
            if is_ready(&slots[i], &known, graph.dependencies(i)) {
                running.push(self.start(i, &mut slots, &known, &planned, approver));
            }
        }
        while let Some((i, settled)) = running.next().await {
            let Slot::Running(started) = slots[i] else { unreachable!("only running resources settle") };
            let elapsed = started.elapsed();
            self.emit_settled(i, &settled, elapsed);
            match &settled {
                Settled::Valid { known: k, .. } => {
                    known[i] = Some(k.clone());
                    slots[i] = Slot::Done(settled, elapsed);
                    for &d in graph.dependents(i) {
                        if !self.ctx.cancel.is_cancelled() && is_ready(&slots[d], &known, graph.dependencies(d)) {
                            running.push(self.start(d, &mut slots, &known, &planned, approver));
                        }
                    }
                }
                Settled::Failed(_) | Settled::Declined => {
                    slots[i] = Slot::Done(settled, elapsed);
                    self.block_dependents(i, &mut slots);
                }
                _ => slots[i] = Slot::Done(settled, elapsed),
            }
        }
        slots
    }

    fn start<'a>(
        &'a self,
        i: usize,
        slots: &mut [Slot],
        known: &[Option<Arc<Known>>],
        planned: &[Option<PlannedActions>],
        approver: Option<&'a dyn Approver>,
    ) -> Task<'a> {
        slots[i] = Slot::Running(Instant::now());
        let known = known.to_vec();
        let planned = planned[i].clone();
        Box::pin(async move { (i, self.work(i, &known, planned, approver).await) })
    }

    /// Everything done for one resource in one task: resolve (unless the plan already did),
    /// then, when applying, run its actions.
    async fn work(
        &self,
        i: usize,
        known: &[Option<Arc<Known>>],
        planned: Option<PlannedActions>,
        approver: Option<&dyn Approver>,
    ) -> Settled {
        let planned = match planned {
            Some(p) => p,
            None => match resource::resolve(&self.ctx, i, known, &self.types).await {
                Err(e) => return Settled::Failed(e),
                Ok(r) => match r.response {
                    StateResponse::Valid { state } => {
                        return Settled::Valid { known: Arc::new(Known { config: r.config, state }), applied: None };
                    }
                    StateResponse::NeedsActions { status, stale_state, actions } => {
                        PlannedActions { config: r.config, status, stale_state, actions }
                    }
                },
            },
        };
        if self.ctx.manifest.resources[i].readonly {
            let actions = planned.actions.iter().map(|a| a.name.clone()).collect();
            return Settled::Failed(ResourceError::new(
                Phase::State,
                Cause::Readonly { status: planned.status, actions },
            ));
        }
        let Some(approver) = approver else { return Settled::NeedsActions(planned) };
        let PlannedActions { config, status, stale_state, actions } = planned;
        match resource::apply_actions(
            &self.ctx,
            i,
            config.clone(),
            status,
            stale_state,
            &actions,
            known,
            &self.types,
            approver,
        )
        .await
        {
            Ok((state, ran)) => Settled::Valid { known: Arc::new(Known { config, state }), applied: Some(ran) },
            Err(Stop::Failed(e)) => Settled::Failed(e),
            Err(Stop::Declined) => Settled::Declined,
        }
    }

    /// Marks everything waiting downstream of `root` as blocked by it.
    fn block_dependents(&self, root: usize, slots: &mut [Slot]) {
        let name = &self.ctx.manifest.resources[root].name;
        for d in self.ctx.manifest.graph.transitive_dependents(root) {
            if matches!(slots[d], Slot::Waiting) {
                let settled = Settled::Blocked { by: name.clone() };
                self.emit_settled(d, &settled, Duration::ZERO);
                slots[d] = Slot::Done(settled, Duration::ZERO);
            }
        }
    }

    fn emit_settled(&self, i: usize, settled: &Settled, elapsed: Duration) {
        self.ctx.emit(RunEvent::Settled {
            resource: self.ctx.manifest.resources[i].name.clone(),
            label: settled.label(),
            elapsed,
            message: settled.message(),
        });
    }
}

/// A resource starts once, when it is waiting and every dependency is VALID.
fn is_ready(slot: &Slot, known: &[Option<Arc<Known>>], dependencies: &[usize]) -> bool {
    matches!(slot, Slot::Waiting) && dependencies.iter().all(|&d| known[d].is_some())
}

fn report_entry(resource: &super::validate::Resource, slot: Slot) -> ReportEntry {
    let (outcome, elapsed) = match slot {
        Slot::Done(Settled::Valid { known, applied: None }, d) => {
            (Outcome::Unchanged { state: known.state.clone() }, d)
        }
        Slot::Done(Settled::Valid { known, applied: Some(actions) }, d) => {
            (Outcome::Applied { state: known.state.clone(), actions }, d)
        }
        Slot::Done(Settled::Failed(e), d) => (Outcome::Failed(e), d),
        Slot::Done(Settled::Declined, d) => (Outcome::Declined, d),
        Slot::Done(Settled::Blocked { by }, d) => (Outcome::Blocked { by }, d),
        Slot::Done(Settled::NeedsActions(_), _) => unreachable!("apply never leaves actions unrun"),
        // Only when the run was cancelled before the resource could start.
        Slot::Waiting | Slot::Running(_) => (Outcome::Cancelled, Duration::ZERO),
    };
    ReportEntry { name: resource.name.clone(), type_name: resource.type_name.clone(), outcome, elapsed }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
