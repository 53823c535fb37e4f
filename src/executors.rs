//! A pass's executor stack, assembled in one place for every front end: built-ins and local
//! programs beside deployster, `builtin/kubernetes` over them, images on the Docker engine or
//! as Pods of the pass's scope (with, in a cluster, the file built-ins), within a budget of
//! checks, under an outermost layer (the controller's metering).
//!
//! What passes share (clients, caches, the budget) is built once, as [`PassExecutors`]; what is
//! a pass's own (its namespace, ServiceAccount, owner) is data its executor is built with
//! ([`PassExecutors::for_pass`]). The CLI makes one pass executor, of its fixed scope; the
//! controller one per pass, of its Manifest's.

use std::sync::Arc;

#[cfg(feature = "kube")]
use crate::builtins::kubernetes::KubeObjects;
use crate::engine::executor::budget::SharedBudget;
use crate::engine::executor::{Dispatch, Executor};
#[cfg(feature = "kube")]
use crate::pod::executor::PodRuntime;

/// Where a pass acts in a cluster: its namespace, ServiceAccount, owner and Pod options.
#[cfg(feature = "kube")]
pub use crate::pod::executor::PodScope as PassScope;

/// Where a pass acts in a cluster: nowhere, in a build without the kube feature.
#[cfg(not(feature = "kube"))]
#[derive(Debug, Clone, Default)]
pub struct PassScope;

/// Where the passes' image types run.
pub enum Images {
    /// Nowhere: this build or configuration has none.
    None,
    /// On one executor for every pass (the Docker engine).
    Here(Arc<dyn Executor>),
    /// As Pods of each pass's scope, the file built-ins' state and actions too when
    /// `builtins_too` (a controller in a cluster: its own files are no user's).
    #[cfg(feature = "kube")]
    Pods {
        runtime: Arc<PodRuntime>,
        builtins_too: bool,
        /// Whether a pass checks that its namespace can be reached before it starts (the CLI's;
        /// the controller has just swept the namespace when a pass starts).
        check_access: bool,
    },
}

/// Built-ins answered here and local programs; with the kube feature, `builtin/kubernetes`
/// over them, acting as each pass's ServiceAccount where it impersonates.
#[cfg(feature = "kube")]
pub type Local = Arc<KubeObjects>;
/// Built-ins answered here and local programs.
#[cfg(not(feature = "kube"))]
pub type Local = Arc<dyn Executor>;

/// A wrapper around each pass's whole stack (the controller counts and times invocations).
pub type Layer = Arc<dyn Fn(Arc<dyn Executor>) -> Arc<dyn Executor> + Send + Sync>;

/// What makes each pass's executor.
pub enum PassExecutors {
    /// The same executor for every pass, whatever its scope (tests, benchmarks).
    Fixed(Arc<dyn Executor>),
    /// Assembled per pass from what the passes share.
    Assembled {
        local: Local,
        images: Images,
        /// Whether local program paths may run (the controller refuses them by default).
        local_programs: bool,
        /// The budget of checks of a continuous loop: each pass's executor goes under it.
        budget: Option<SharedBudget>,
        layer: Option<Layer>,
    },
}

impl From<Arc<dyn Executor>> for PassExecutors {
    fn from(executor: Arc<dyn Executor>) -> Self {
        PassExecutors::Fixed(executor)
    }
}

impl PassExecutors {
    /// Local programs and built-ins as `local` runs them, images on `images`, every program
    /// allowed, no budget, no layer: the CLI's, before [`PassExecutors::within`].
    pub fn new(local: Local, images: Images) -> PassExecutors {
        PassExecutors::Assembled { local, images, local_programs: true, budget: None, layer: None }
    }

    /// The same, each pass's executor within `budget` (shared by them all).
    pub fn within(mut self, shared: SharedBudget) -> PassExecutors {
        if let PassExecutors::Assembled { budget, .. } = &mut self {
            *budget = Some(shared);
        }
        self
    }

    /// The executor of a pass acting in `scope`.
    pub fn for_pass(&self, scope: &PassScope) -> Arc<dyn Executor> {
        let (local, images, local_programs, budget, layer) = match self {
            PassExecutors::Fixed(executor) => return executor.clone(),
            PassExecutors::Assembled { local, images, local_programs, budget, layer } => {
                (local, images, local_programs, budget, layer)
            }
        };
        let (images, builtins_with_images): (Option<Arc<dyn Executor>>, bool) = match images {
            Images::None => (None, false),
            Images::Here(executor) => (Some(executor.clone()), false),
            #[cfg(feature = "kube")]
            Images::Pods { runtime, builtins_too, check_access } => {
                let pods = runtime.for_pass(scope.clone());
                let pods = if *check_access { pods.checking_access() } else { pods };
                (Some(Arc::new(pods)), *builtins_too)
            }
        };
        let dispatch = Dispatch {
            local: local_for_pass(local, scope),
            images,
            local_programs: *local_programs,
            builtins_with_images,
        };
        let stack: Arc<dyn Executor> = match budget {
            Some(budget) => Arc::new(budget.over(Arc::new(dispatch))),
            None => Arc::new(dispatch),
        };
        match layer {
            Some(layer) => layer(stack),
            None => stack,
        }
    }

    /// What runs the passes' Pods, when they run as Pods.
    #[cfg(feature = "kube")]
    fn pods(&self) -> Option<&Arc<PodRuntime>> {
        match self {
            PassExecutors::Assembled { images: Images::Pods { runtime, .. }, .. } => Some(runtime),
            _ => None,
        }
    }
}

/// A scope's lifecycle, behind the executors: what a front end asks of them around its passes,
/// whatever runs the types (nothing to do where no Pods run).
#[cfg(feature = "kube")]
impl PassExecutors {
    /// Before a pass of the Manifest `selector` names, in `namespace`: stops the Pods earlier
    /// passes of it left running (a controller that crashed or lost its lease), so that an
    /// action never runs twice at once. How many it stopped.
    pub async fn begin_pass(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<usize, crate::engine::executor::ExecError> {
        match self.pods() {
            Some(pods) => pods.sweep(namespace, selector).await,
            None => Ok(0),
        }
    }

    /// After a pass: why image types of `namespace` (as `account`) run as a Pod per invocation
    /// rather than in warm runners — said once per namespace and account.
    pub fn untold_refusal(&self, namespace: &str, account: Option<&str>) -> Option<String> {
        self.pods()?.untold_runner_refusal(namespace, account)
    }

    /// A Manifest gone: deletes the warm runners of its passes. How many.
    pub async fn forget(&self, namespace: &str, selector: &str) -> Result<usize, crate::engine::executor::ExecError> {
        match self.pods() {
            Some(pods) => pods.delete_runners(namespace, selector).await,
            None => Ok(0),
        }
    }

    /// The front end stopping: deletes the warm runners its passes used, but those of the
    /// Manifests `elsewhere` says another replica reconciles now (it uses them). How many,
    /// where any could run.
    pub async fn shut_down(&self, elsewhere: &(dyn Fn(&str, &str) -> bool + Send + Sync)) -> Option<usize> {
        Some(self.pods()?.reap_runners_but(elsewhere).await)
    }
}

/// `builtin/kubernetes` acting as the pass's ServiceAccount (where it impersonates; else as
/// the kubeconfig's user), never as the controller.
#[cfg(feature = "kube")]
fn local_for_pass(local: &Local, scope: &PassScope) -> Arc<dyn Executor> {
    Arc::new(local.for_pass(&scope.namespace, scope.service_account.as_deref()))
}

#[cfg(not(feature = "kube"))]
fn local_for_pass(local: &Local, _: &PassScope) -> Arc<dyn Executor> {
    local.clone()
}

#[cfg(all(test, feature = "kube"))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::builtins::kubernetes::tests::{call, forbidding_api_server};
    use crate::engine::executor::fake::FakeExecutor;

    fn others() -> Arc<dyn Executor> {
        Arc::new(FakeExecutor::new(|_| unreachable!("no other type")))
    }

    /// What a `builtin/kubernetes` state read through `executors` for a pass of `scope` was
    /// refused with: the server names the user it was made as.
    async fn refusal(executors: &PassExecutors, namespace: &str, account: Option<&str>) -> String {
        let mut scope = PassScope::new(namespace);
        scope.service_account = account.map(str::to_string);
        let config = json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}});
        let outcome = executors.for_pass(&scope).invoke(call("state", config)).await.unwrap();
        assert!(!outcome.exit.success());
        String::from_utf8_lossy(&outcome.stderr).into_owned()
    }

    /// The controller's stack: each pass acts as its own scope's ServiceAccount (the
    /// namespace's `default` when it names none), within the budget, under the layer.
    #[tokio::test]
    async fn a_pass_s_stack_acts_as_its_scope_s_service_account() {
        crate::client::install_crypto();
        let address = forbidding_api_server().await;
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let layered = Arc::new(AtomicUsize::new(0));
        let counted = layered.clone();
        let executors = PassExecutors::Assembled {
            local: Arc::new(KubeObjects::impersonating(others(), config)),
            images: Images::None,
            local_programs: false,
            budget: Some(SharedBudget::new(100)),
            layer: Some(Arc::new(move |inner| {
                counted.fetch_add(1, Ordering::SeqCst);
                inner
            })),
        };
        let said = refusal(&executors, "team", Some("deployer")).await;
        assert!(said.contains(r#"User "system:serviceaccount:team:deployer""#), "{said}");
        let said = refusal(&executors, "other", None).await;
        assert!(said.contains(r#"User "system:serviceaccount:other:default""#), "{said}");
        assert_eq!(layered.load(Ordering::SeqCst), 2, "each pass's stack goes under the layer");
    }

    /// The CLI's stack acts as whoever runs it, whatever ServiceAccount its scope names.
    #[tokio::test]
    async fn the_cli_s_stack_acts_as_its_user() {
        crate::client::install_crypto();
        let address = forbidding_api_server().await;
        let client = kube::Client::try_from(kube::Config::new(format!("http://{address}").parse().unwrap())).unwrap();
        let executors = PassExecutors::new(Arc::new(KubeObjects::with_client(others(), client)), Images::None);
        let said = refusal(&executors, "team", Some("deployer")).await;
        assert!(said.contains(r#"User "system:anonymous""#), "no impersonation: {said}");
    }
}
