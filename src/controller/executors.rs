//! A pass's executors, assembled in one place: built-ins and local programs beside the
//! controller, `builtin/kubernetes` as the Manifest's ServiceAccount, images on the node's
//! Docker engine or as Pods of the pass's scope (with the file built-ins), within the one global
//! budget of checks, counted. What passes share (clients, caches, the budget) is built once;
//! what is a pass's own (its namespace, ServiceAccount, owner) is data its executor is built
//! with ([`PassExecutors::for_pass`]).

use std::sync::Arc;

use super::metrics::{MeteredExecutor, Metrics};
use crate::engine::executor::budget::SharedBudget;
use crate::engine::executor::{Dispatch, Executor};
use crate::kubernetes::KubeObjects;
use crate::pod::executor::{PodRuntime, PodScope};

impl From<Arc<dyn Executor>> for PassExecutors {
    fn from(executor: Arc<dyn Executor>) -> Self {
        PassExecutors::Fixed(executor)
    }
}

/// Where the passes' image types run.
pub enum PassImages {
    /// Nowhere: this build or configuration has none.
    None,
    /// On one executor for every pass (the node's Docker engine).
    Here(Arc<dyn Executor>),
    /// As Pods of each pass's scope.
    Pods(Arc<PodRuntime>),
}

/// What makes each pass's executor.
pub enum PassExecutors {
    /// The same executor for every pass, whatever its scope (tests, benchmarks).
    Fixed(Arc<dyn Executor>),
    /// Assembled per pass from what the passes share.
    Assembled {
        /// `builtin/kubernetes`, over the built-ins and local programs.
        objects: Arc<KubeObjects>,
        images: PassImages,
        /// Whether local program paths may run (`--allow-local-programs`).
        local_programs: bool,
        /// The global budget of checks: each pass's executor goes under it.
        budget: SharedBudget,
        metrics: Arc<Metrics>,
    },
}

impl PassExecutors {
    /// The executor of a pass whose Pods run in `scope`.
    pub fn for_pass(&self, scope: &PodScope) -> Arc<dyn Executor> {
        let (objects, images, local_programs, budget, metrics) = match self {
            PassExecutors::Fixed(executor) => return executor.clone(),
            PassExecutors::Assembled { objects, images, local_programs, budget, metrics } => {
                (objects, images, local_programs, budget, metrics)
            }
        };
        let (images, builtins_with_images): (Option<Arc<dyn Executor>>, bool) = match images {
            PassImages::None => (None, false),
            PassImages::Here(executor) => (Some(executor.clone()), false),
            // In a cluster the file built-ins act in Pods too, on their `files` plug.
            PassImages::Pods(runtime) => (Some(Arc::new(runtime.for_pass(scope.clone()))), true),
        };
        // builtin/kubernetes acts as the Manifest's ServiceAccount, never as the controller.
        let local = Arc::new(objects.for_pass(&scope.namespace, scope.service_account.as_deref()));
        let dispatch = Dispatch { local, images, local_programs: *local_programs, builtins_with_images };
        Arc::new(MeteredExecutor { inner: Arc::new(budget.over(Arc::new(dispatch))), metrics: metrics.clone() })
    }

    /// What runs the passes' Pods, when they run as Pods: it sweeps what earlier passes left.
    pub fn pods(&self) -> Option<&Arc<PodRuntime>> {
        match self {
            PassExecutors::Assembled { images: PassImages::Pods(runtime), .. } => Some(runtime),
            _ => None,
        }
    }
}
