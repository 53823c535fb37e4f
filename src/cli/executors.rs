//! The CLI's executors: its one pass's stack ([`crate::executors`]) made from the command
//! line — local programs, built-ins, `builtin/kubernetes` with the kubeconfig, images on
//! Docker or as Pods of the CLI's one scope.

use std::sync::Arc;

use super::{CliError, ImageArgs};
#[cfg(feature = "docker")]
use super::{DockerArgs, PullArg};
#[cfg(feature = "kube")]
use super::{ExecutorArg, PodArgs};
use crate::engine::executor::Executor;
use crate::engine::executor::process::ProcessExecutor;
use crate::executors::{Images, Local, PassExecutors, PassScope};

/// The executor of the CLI's pass: local programs as processes, built-ins in this process,
/// `builtin/kubernetes` with the kubeconfig's user, images as Docker containers (connected to
/// only when a manifest uses one) or as Pods (`--executor pod`).
pub(crate) async fn executor(args: &ImageArgs) -> Result<Arc<dyn Executor>, CliError> {
    let (executors, scope) = pass_executors(args).await?;
    Ok(executors.for_pass(&scope))
}

/// What makes the CLI's pass executor ([`executor`]), and the one scope it acts in.
pub(crate) async fn pass_executors(args: &ImageArgs) -> Result<(PassExecutors, PassScope), CliError> {
    #[cfg(feature = "kube")]
    let cluster = crate::client::Kubeconfig { file: args.pods.kubeconfig.clone(), context: args.pods.context.clone() };
    #[cfg(not(feature = "kube"))]
    let cluster = ();
    let (images, scope) = images(args).await?;
    Ok((PassExecutors::new(local(cluster)?, images), scope))
}

#[cfg(feature = "kube")]
type Cluster = crate::client::Kubeconfig;
#[cfg(not(feature = "kube"))]
type Cluster = ();

/// Local programs and built-ins ([`local_executor`]), with `builtin/kubernetes` acting with
/// `cluster`, connected to on its first call.
fn local(cluster: Cluster) -> Result<Local, CliError> {
    let local = local_executor()?;
    #[cfg(feature = "kube")]
    return Ok(Arc::new(crate::builtins::kubernetes::KubeObjects::new(local, cluster)));
    #[cfg(not(feature = "kube"))]
    {
        let () = cluster;
        Ok(local)
    }
}

/// An executor with no cluster of its own choosing (the current kubeconfig's) and `images`.
pub(crate) fn executor_with(images: Images) -> Result<Arc<dyn Executor>, CliError> {
    Ok(PassExecutors::new(local(Cluster::default())?, images).for_pass(&PassScope::default()))
}

/// Chooses how built-in types run: `in-process` (the default) or `process` (each call a
/// `deployster __type` program, as before — for comparing the two).
pub const BUILTINS_ENV: &str = "DEPLOYSTER_BUILTINS";

/// Local programs as processes; built-ins in this process unless [`BUILTINS_ENV`] says
/// `process`.
pub(crate) fn local_executor() -> Result<Arc<dyn Executor>, CliError> {
    let me = std::env::current_exe().map_err(CliError::SelfExe)?;
    let programs: Arc<dyn Executor> = Arc::new(ProcessExecutor::new(me));
    match std::env::var(BUILTINS_ENV).as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("in-process") => {
            Ok(Arc::new(crate::builtins::InProcess::new(programs)))
        }
        Ok("process") => Ok(programs),
        _ => Err(CliError::Refused(format!("{BUILTINS_ENV} must be `in-process` or `process`"))),
    }
}

/// Where the CLI's images run, and the scope of its Pods when they run as Pods.
async fn images(args: &ImageArgs) -> Result<(Images, PassScope), CliError> {
    #[cfg(feature = "kube")]
    if args.pods.executor == ExecutorArg::Pod {
        return pods(&args.pods).await;
    }
    #[cfg(feature = "docker")]
    return Ok((Images::Here(docker_executor(&args.docker)), PassScope::default()));
    #[cfg(not(feature = "docker"))]
    {
        let _ = args;
        Ok((Images::None, PassScope::default()))
    }
}

/// Pods of the current kubeconfig's cluster, in `--namespace` or the kubeconfig's: the
/// CLI's one scope, for every run it makes.
#[cfg(feature = "kube")]
async fn pods(args: &PodArgs) -> Result<(Images, PassScope), CliError> {
    use crate::pod::executor::PodRuntime;
    let cluster =
        |e: &dyn std::fmt::Display| CliError::Refused(format!("--executor pod: cannot reach the cluster: {e}"));
    let kubeconfig = crate::client::Kubeconfig { file: args.kubeconfig.clone(), context: args.context.clone() };
    let config = kubeconfig.load().await.map_err(|e| cluster(&e))?;
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = crate::client::connect(config).map_err(|e| cluster(&e))?;
    let settings = args.making.settings();
    let mut scope = PassScope::new(namespace);
    scope.service_account = args.service_account.clone();
    let secrets = args.image_pull_secrets.iter().map(|name| crate::crd::LocalRef { name: name.clone() });
    scope.options.image_pull_secrets = secrets.collect();
    scope.options.node_selector = args.node_selector.iter().cloned().collect();
    // A laptop's built-ins act on the laptop: only images run as Pods.
    let runtime = PodRuntime::new(client, settings);
    let _ = RUNNERS.set(runtime.clone());
    Ok((Images::Pods { runtime, builtins_too: false, check_access: true }, scope))
}

/// The CLI's Pods, whose runners it deletes when it is done ([`reap_runners`]).
#[cfg(feature = "kube")]
static RUNNERS: std::sync::OnceLock<Arc<crate::pod::executor::PodRuntime>> = std::sync::OnceLock::new();

/// Deletes the runners this CLI started (`--runner-idle`): none outlives it.
pub(crate) async fn reap_runners() {
    #[cfg(feature = "kube")]
    if let Some(runtime) = RUNNERS.get() {
        runtime.reap_runners().await;
    }
}

#[cfg(feature = "docker")]
pub(crate) fn docker_executor(args: &DockerArgs) -> Arc<dyn Executor> {
    use crate::engine::executor::docker::{DockerExecutor, PullPolicy};
    let pull = match args.pull {
        PullArg::IfNotPresent => PullPolicy::IfNotPresent,
        PullArg::Always => PullPolicy::Always,
        PullArg::Never => PullPolicy::Never,
    };
    Arc::new(DockerExecutor::new(pull).with_network(args.container_network.clone()))
}
