//! The CLI's executors: its [`ExecutorPlan`] filled from the command line — built-ins,
//! `builtin/kubernetes` as the kubeconfig's user, images on Docker or as Pods of the CLI's one
//! scope — and assembled ([`crate::executors`]) for the command's one pass.

use std::sync::{Arc, Mutex};

use super::{CliError, ImageArgs};
#[cfg(feature = "docker")]
use super::{DockerArgs, PullArg};
#[cfg(feature = "kube")]
use super::{ExecutorArg, PodArgs};
use crate::engine::executor::Executor;
use crate::executors::{Builtins, Connection, ExecutorPlan, ImagePlan, PassExecutors, PassScope};

/// Chooses how built-in types run: `in-process` (the default) or `process` (each call a
/// `deployster __type` program, as before — for comparing the two).
pub const BUILTINS_ENV: &str = "DEPLOYSTER_BUILTINS";

/// The executors a command assembled, kept until it ends ([`Session::end`]): none of the warm
/// runners its Pods ran in outlives it.
#[derive(Default)]
pub(crate) struct Session {
    assembled: Mutex<Vec<PassExecutors>>,
}

impl Session {
    /// The executor of the command's pass: local programs as processes, built-ins in this
    /// process, `builtin/kubernetes` with the kubeconfig's user, images as Docker containers
    /// (connected to only when a manifest uses one) or as Pods (`--executor pod`); within
    /// `reads_per_second` when given (a continuous loop).
    pub(crate) async fn executor(
        &self,
        args: &ImageArgs,
        reads_per_second: Option<u32>,
    ) -> Result<Arc<dyn Executor>, CliError> {
        let (mut plan, scope, connection) = plan(args).await?;
        plan.reads_per_second = reads_per_second;
        let executors = assemble(plan, connection)?;
        let executor = executors.for_pass(&scope);
        self.assembled.lock().expect("session lock").push(executors);
        Ok(executor)
    }

    /// The command done: deletes the warm runners its passes started (`--runner-idle`).
    pub(crate) async fn end(self) {
        let assembled = self.assembled.into_inner().expect("session lock");
        for executors in assembled {
            executors.shut_down(&|_, _| false).await;
        }
    }
}

/// An executor with no cluster of its own choosing (the current kubeconfig's) and `images`,
/// for a command that starts no Pod.
pub(crate) fn executor_with(images: ImagePlan) -> Result<Arc<dyn Executor>, CliError> {
    Ok(assemble(ExecutorPlan { builtins: builtins()?, ..ExecutorPlan::new(images) }, None)?
        .for_pass(&PassScope::default()))
}

fn assemble(plan: ExecutorPlan, connection: Option<Connection>) -> Result<PassExecutors, CliError> {
    plan.assemble(connection).map_err(|e| CliError::Refused(e.to_string()))
}

/// Built-ins in this process unless [`BUILTINS_ENV`] says `process`.
pub(crate) fn builtins() -> Result<Builtins, CliError> {
    match std::env::var(BUILTINS_ENV).as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("in-process") => Ok(Builtins::InProcess),
        Ok("process") => Ok(Builtins::Programs),
        _ => Err(CliError::Refused(format!("{BUILTINS_ENV} must be `in-process` or `process`"))),
    }
}

/// The plan of the command line, the one scope the CLI acts in, and its connection to the
/// cluster when its Pods need one.
async fn plan(args: &ImageArgs) -> Result<(ExecutorPlan, PassScope, Option<Connection>), CliError> {
    #[cfg(feature = "kube")]
    if args.pods.executor == ExecutorArg::Pod {
        let (images, scope, connection) = pods(&args.pods).await?;
        return Ok((with_user(ExecutorPlan::new(images), args)?, scope, Some(connection)));
    }
    #[cfg(feature = "docker")]
    let images = docker(&args.docker);
    #[cfg(not(feature = "docker"))]
    let images = ImagePlan::None;
    Ok((with_user(ExecutorPlan::new(images), args)?, PassScope::default(), None))
}

/// `plan` with the built-ins [`BUILTINS_ENV`] says and `builtin/kubernetes` acting as the
/// user of `--kubeconfig` and `--context`.
fn with_user(plan: ExecutorPlan, args: &ImageArgs) -> Result<ExecutorPlan, CliError> {
    #[cfg(feature = "kube")]
    let plan = ExecutorPlan {
        kubernetes: crate::executors::Acting::User(crate::client::Kubeconfig {
            file: args.pods.kubeconfig.clone(),
            context: args.pods.context.clone(),
        }),
        ..plan
    };
    #[cfg(not(feature = "kube"))]
    let _ = args;
    Ok(ExecutorPlan { builtins: builtins()?, ..plan })
}

/// Pods of the current kubeconfig's cluster, in `--namespace` or the kubeconfig's: the
/// CLI's one scope, for every run it makes. A laptop's built-ins act on the laptop: only
/// images run as Pods.
#[cfg(feature = "kube")]
async fn pods(args: &PodArgs) -> Result<(ImagePlan, PassScope, Connection), CliError> {
    let cluster =
        |e: &dyn std::fmt::Display| CliError::Refused(format!("--executor pod: cannot reach the cluster: {e}"));
    let kubeconfig = crate::client::Kubeconfig { file: args.kubeconfig.clone(), context: args.context.clone() };
    let config = kubeconfig.load().await.map_err(|e| cluster(&e))?;
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = crate::client::connect(config.clone()).map_err(|e| cluster(&e))?;
    let mut scope = PassScope::new(namespace);
    scope.service_account = args.service_account.clone();
    let secrets = args.image_pull_secrets.iter().map(|name| crate::crd::LocalRef { name: name.clone() });
    scope.options.image_pull_secrets = secrets.collect();
    scope.options.node_selector = args.node_selector.iter().cloned().collect();
    let settings = Box::new(args.making.settings());
    let images = ImagePlan::Pods { settings, builtins_too: false, check_access: true };
    Ok((images, scope, Connection { config, client, runners: Default::default() }))
}

/// Containers of this machine's Docker engine, as `--pull` and `--container-network` say.
#[cfg(feature = "docker")]
pub(crate) fn docker(args: &DockerArgs) -> ImagePlan {
    use crate::engine::executor::docker::PullPolicy;
    let pull = match args.pull {
        PullArg::IfNotPresent => PullPolicy::IfNotPresent,
        PullArg::Always => PullPolicy::Always,
        PullArg::Never => PullPolicy::Never,
    };
    ImagePlan::Docker { pull, network: args.container_network.clone() }
}
