//! What runs a front end's resource types, as plain data: the CLI fills an [`ExecutorPlan`] from
//! its flags, the controller from its own, and [`ExecutorPlan::assemble`] makes the executors
//! of it — the one place they are made.

use std::sync::Arc;

use crate::engine::executor::Executor;
use crate::engine::executor::budget::SharedBudget;
use crate::engine::executor::process::ProcessExecutor;

/// How a front end's passes run their types.
#[derive(Debug, Clone)]
pub struct ExecutorPlan {
    /// Where built-ins are answered.
    pub builtins: Builtins,
    /// Whether local program paths may run (the controller refuses them by default).
    pub local_programs: bool,
    /// Who `builtin/kubernetes` acts as.
    #[cfg(feature = "kube")]
    pub kubernetes: Acting,
    /// Where image types run.
    pub images: ImagePlan,
    /// Init and state reads that start a program, a container or a Pod, per second, shared by
    /// every pass: a continuous loop's budget. None: no bound (a one-off command).
    pub reads_per_second: Option<u32>,
}

/// Where built-ins (but `builtin/kubernetes`, always answered here) are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtins {
    /// In this process, where they can be (all but `builtin/package`'s scripts).
    InProcess,
    /// Each call a `deployster __type` program (to compare the two).
    Programs,
}

/// Who `builtin/kubernetes` acts as.
#[cfg(feature = "kube")]
#[derive(Debug, Clone)]
pub enum Acting {
    /// The kubeconfig's user, connected to on the first call (a manifest without the type
    /// needs no cluster): the CLI acts as whoever runs it.
    User(crate::client::Kubeconfig),
    /// Each pass's ServiceAccount, impersonated from the front end's [`Connection`]: the
    /// controller never acts with its own rights.
    ServiceAccounts,
}

/// Where image types run.
#[derive(Debug, Clone)]
pub enum ImagePlan {
    /// Nowhere: this build or configuration has none.
    None,
    /// Containers of this machine's Docker engine, connected to when a manifest uses one.
    #[cfg(feature = "docker")]
    Docker {
        pull: crate::engine::executor::docker::PullPolicy,
        network: crate::engine::executor::docker::ContainerNetwork,
    },
    /// Pods of each pass's scope, made with the front end's [`Connection`].
    #[cfg(feature = "kube")]
    Pods {
        settings: Box<crate::pod::executor::PodSettings>,
        /// The file built-ins' state and actions run in the Pods too (a controller in a
        /// cluster: its own files are no user's).
        builtins_too: bool,
        /// A pass checks that its namespace can be reached before it starts (the CLI's; the
        /// controller has just swept the namespace when a pass starts).
        check_access: bool,
    },
}

/// The front end's link to its cluster, which Pods and impersonation are made with.
#[cfg(feature = "kube")]
#[derive(Clone)]
pub struct Connection {
    /// What clients acting as a ServiceAccount are made from (unmetered: their rights are the
    /// ServiceAccount's).
    pub config: kube::Config,
    /// The front end's own client, which makes and watches the Pods.
    pub client: kube::Client,
    /// Where the Pod runtime counts its warm runners (the controller's metrics).
    pub runners: crate::pod::runner::RunnerMetrics,
}

/// No cluster, in a build without the kube feature.
#[cfg(not(feature = "kube"))]
#[derive(Clone)]
pub struct Connection;

/// Why a plan cannot be assembled.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot find deployster's own program, which runs built-ins as programs: {0}")]
    SelfExe(std::io::Error),
    #[error("{what} needs a connection to the cluster, and none was given")]
    NoConnection { what: &'static str },
}

impl ExecutorPlan {
    /// Built-ins in process, every program allowed, `builtin/kubernetes` as the current
    /// kubeconfig's user, images as `images` says, no budget: what a one-off command fills.
    pub fn new(images: ImagePlan) -> ExecutorPlan {
        ExecutorPlan {
            builtins: Builtins::InProcess,
            local_programs: true,
            #[cfg(feature = "kube")]
            kubernetes: Acting::User(crate::client::Kubeconfig::default()),
            images,
            reads_per_second: None,
        }
    }

    /// Whether the passes' image types run as Pods (their plugs are then the Pods' volumes).
    pub fn runs_pods(&self) -> bool {
        #[cfg(feature = "kube")]
        return matches!(self.images, ImagePlan::Pods { .. });
        #[cfg(not(feature = "kube"))]
        false
    }

    /// The executors of this plan, with `connection` where Pods or impersonation need one.
    pub fn assemble(self, connection: Option<Connection>) -> Result<super::PassExecutors, PlanError> {
        let me = std::env::current_exe().map_err(PlanError::SelfExe)?;
        let programs: Arc<dyn Executor> = Arc::new(ProcessExecutor::new(me));
        let in_process: Option<Arc<dyn Executor>> = match self.builtins {
            Builtins::InProcess => Some(Arc::new(crate::builtins::InProcess::new())),
            Builtins::Programs => None,
        };
        let needs = |what| connection.clone().ok_or(PlanError::NoConnection { what });
        #[cfg(feature = "kube")]
        let kubernetes = Arc::new(match self.kubernetes {
            Acting::User(kubeconfig) => crate::builtins::kubernetes::KubeObjects::new(kubeconfig),
            Acting::ServiceAccounts => {
                let connection = needs("builtin/kubernetes acting as ServiceAccounts")?;
                crate::builtins::kubernetes::KubeObjects::impersonating(connection.config)
            }
        });
        let images = match self.images {
            ImagePlan::None => Images::None,
            #[cfg(feature = "docker")]
            ImagePlan::Docker { pull, network } => {
                Images::Here(Arc::new(crate::engine::executor::docker::DockerExecutor::new(pull).with_network(network)))
            }
            #[cfg(feature = "kube")]
            ImagePlan::Pods { settings, builtins_too, check_access } => {
                let connection = needs("running image types as Pods")?;
                let runtime = crate::pod::executor::PodRuntime::counting_runners(
                    connection.client,
                    *settings,
                    connection.runners,
                );
                Images::Pods { runtime, builtins_too, check_access }
            }
        };
        #[cfg(not(feature = "kube"))]
        let _ = needs;
        Ok(super::PassExecutors::Assembled(Box::new(super::Shared {
            #[cfg(feature = "kube")]
            kubernetes,
            in_process,
            programs,
            images,
            local_programs: self.local_programs,
            budget: self.reads_per_second.map(SharedBudget::new),
            layer: None,
        })))
    }
}

/// Where the passes' image types run, once assembled.
pub(super) enum Images {
    /// Nowhere: this build or configuration has none.
    None,
    /// On one executor for every pass (the Docker engine).
    #[cfg_attr(not(feature = "docker"), allow(dead_code))]
    Here(Arc<dyn Executor>),
    /// As Pods of each pass's scope ([`ImagePlan::Pods`]).
    #[cfg(feature = "kube")]
    Pods { runtime: Arc<crate::pod::executor::PodRuntime>, builtins_too: bool, check_access: bool },
}
