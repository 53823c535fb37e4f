//! A pass's executor stack, assembled in one place for every front end from its
//! [`ExecutorPlan`] (plain data: [`plan`]): one [`route::Router`] by kind of type over
//! `builtin/kubernetes`, the built-ins answered in this process, programs and images (on the
//! Docker engine, or as Pods of the pass's scope with, in a cluster, the file built-ins), within
//! a budget of checks, under an outermost layer (the controller's metering).
//!
//! What passes share (clients, caches, the budget) is built once, as [`PassExecutors`]; what is
//! a pass's own (its namespace, ServiceAccount, owner) is data its executor is built with
//! ([`PassExecutors::for_pass`]). The CLI makes one pass executor, of its fixed scope; the
//! controller one per pass, of its Manifest's. A scope's lifecycle (begin a pass, forget a
//! Manifest, shut down) is asked of [`PassExecutors`] too, whatever runs the types.

pub mod plan;
pub mod route;

use std::sync::Arc;

#[cfg(feature = "kube")]
use crate::builtins::kubernetes::KubeObjects;
use crate::engine::executor::Executor;
use crate::engine::executor::budget::SharedBudget;
#[cfg(feature = "kube")]
use crate::pod::executor::PodRuntime;
#[cfg(feature = "kube")]
pub use plan::Acting;
use plan::Images;
pub use plan::{Builtins, Connection, ExecutorPlan, ImagePlan, PlanError};
use route::Router;

/// Where a pass acts in a cluster: its namespace, ServiceAccount, owner and Pod options.
#[cfg(feature = "kube")]
pub use crate::pod::executor::PodScope as PassScope;

/// Where a pass acts in a cluster: nowhere, in a build without the kube feature.
#[cfg(not(feature = "kube"))]
#[derive(Debug, Clone, Default)]
pub struct PassScope;

/// A wrapper around each pass's whole stack (the controller counts and times invocations).
pub type Layer = Arc<dyn Fn(Arc<dyn Executor>) -> Arc<dyn Executor> + Send + Sync>;

/// What makes each pass's executor.
pub enum PassExecutors {
    /// The same executor for every pass, whatever its scope (tests, benchmarks).
    Fixed(Arc<dyn Executor>),
    /// Assembled per pass from what the passes share ([`ExecutorPlan::assemble`]).
    Assembled(Box<Shared>),
}

/// What the passes' executors share: each entry of their router but the pass's own, the budget
/// and the layer.
pub struct Shared {
    /// `builtin/kubernetes`, of which each pass takes one acting as its identity.
    #[cfg(feature = "kube")]
    kubernetes: Arc<KubeObjects>,
    /// Built-ins answered in this process, unless they run as programs.
    in_process: Option<Arc<dyn Executor>>,
    programs: Arc<dyn Executor>,
    images: Images,
    local_programs: bool,
    /// The budget of checks of a continuous loop: each pass's executor goes under it.
    budget: Option<SharedBudget>,
    layer: Option<Layer>,
}

impl From<Arc<dyn Executor>> for PassExecutors {
    fn from(executor: Arc<dyn Executor>) -> Self {
        PassExecutors::Fixed(executor)
    }
}

impl PassExecutors {
    /// The same, each pass's stack under `layer` (outermost).
    pub fn under(mut self, layer: Layer) -> PassExecutors {
        if let PassExecutors::Assembled(shared) = &mut self {
            shared.layer = Some(layer);
        }
        self
    }

    /// The executor of a pass acting in `scope`.
    pub fn for_pass(&self, scope: &PassScope) -> Arc<dyn Executor> {
        let shared = match self {
            PassExecutors::Fixed(executor) => return executor.clone(),
            PassExecutors::Assembled(shared) => shared,
        };
        let (images, builtins_with_images): (Option<Arc<dyn Executor>>, bool) = match &shared.images {
            Images::None => (None, false),
            Images::Here(executor) => (Some(executor.clone()), false),
            #[cfg(feature = "kube")]
            Images::Pods { runtime, builtins_too, check_access } => {
                let pods = runtime.for_pass(scope.clone());
                let pods = if *check_access { pods.checking_access() } else { pods };
                (Some(Arc::new(pods)), *builtins_too)
            }
        };
        let router = Router {
            kubernetes: kubernetes_for_pass(shared, scope),
            in_process: shared.in_process.clone(),
            programs: shared.programs.clone(),
            images,
            local_programs: shared.local_programs,
            builtins_with_images,
        };
        let stack: Arc<dyn Executor> = match &shared.budget {
            Some(budget) => Arc::new(budget.over(Arc::new(router))),
            None => Arc::new(router),
        };
        match &shared.layer {
            Some(layer) => layer(stack),
            None => stack,
        }
    }

    /// What runs the passes' Pods, when they run as Pods.
    #[cfg(feature = "kube")]
    fn pods(&self) -> Option<&Arc<PodRuntime>> {
        match self {
            PassExecutors::Assembled(shared) => match &shared.images {
                Images::Pods { runtime, .. } => Some(runtime),
                _ => None,
            },
            PassExecutors::Fixed(_) => None,
        }
    }

    /// The front end stopping: deletes the warm runners its passes used, but those of the
    /// Manifests `elsewhere` says another replica reconciles now (it uses them). How many,
    /// where any could run.
    pub async fn shut_down(&self, elsewhere: &(dyn Fn(&str, &str) -> bool + Send + Sync)) -> Option<usize> {
        #[cfg(feature = "kube")]
        return Some(self.pods()?.reap_runners_but(elsewhere).await);
        #[cfg(not(feature = "kube"))]
        {
            let _ = elsewhere;
            None
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
}

/// `builtin/kubernetes` acting as the pass's ServiceAccount (where it impersonates; else as
/// the kubeconfig's user), never as the controller.
#[cfg(feature = "kube")]
fn kubernetes_for_pass(shared: &Shared, scope: &PassScope) -> Option<Arc<dyn Executor>> {
    Some(Arc::new(shared.kubernetes.for_pass(&scope.namespace, scope.service_account.as_deref())))
}

/// `builtin/kubernetes`, in a build without the kube feature: none (its program says why).
#[cfg(not(feature = "kube"))]
fn kubernetes_for_pass(_: &Shared, _: &PassScope) -> Option<Arc<dyn Executor>> {
    None
}

#[cfg(all(test, feature = "kube"))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::builtins::kubernetes::tests::{call, forbidding_api_server};
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
        let client = kube::Client::try_from(config.clone()).unwrap();
        let connection = Connection { config, client, runners: Default::default() };
        let plan = ExecutorPlan {
            kubernetes: Acting::ServiceAccounts,
            local_programs: false,
            reads_per_second: Some(100),
            ..ExecutorPlan::new(ImagePlan::None)
        };
        let executors = plan.assemble(Some(connection)).unwrap().under(Arc::new(move |inner| {
            counted.fetch_add(1, Ordering::SeqCst);
            inner
        }));
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
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubeconfig");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: 'http://{address}'}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
        );
        std::fs::write(&file, kubeconfig).unwrap();
        let user = crate::client::Kubeconfig { file: Some(file), context: None };
        let plan = ExecutorPlan { kubernetes: Acting::User(user), ..ExecutorPlan::new(ImagePlan::None) };
        let executors = plan.assemble(None).unwrap();
        let said = refusal(&executors, "team", Some("deployer")).await;
        assert!(said.contains(r#"User "system:anonymous""#), "no impersonation: {said}");
    }

    /// Pods and impersonation are made with the front end's connection: a plan that needs one
    /// and has none says what needed it.
    #[test]
    fn a_plan_that_needs_the_cluster_says_so_without_a_connection() {
        let plan = ExecutorPlan { kubernetes: Acting::ServiceAccounts, ..ExecutorPlan::new(ImagePlan::None) };
        let Err(error) = plan.assemble(None) else { panic!("assembled without a connection") };
        assert_eq!(
            error.to_string(),
            "builtin/kubernetes acting as ServiceAccounts needs a connection to the cluster, and none was given"
        );
        let settings = Box::new(crate::pod::executor::PodSettings::new("helper"));
        let pods = ImagePlan::Pods { settings, builtins_too: false, check_access: true };
        let Err(error) = ExecutorPlan::new(pods).assemble(None) else { panic!("assembled without a connection") };
        assert!(error.to_string().starts_with("running image types as Pods needs a connection"), "{error}");
    }
}
