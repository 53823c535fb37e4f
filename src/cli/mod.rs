//! The command line: `deployster plan|apply`, and the hidden `__type` sub-command that runs the
//! built-in resource types.

/// `println!` that ends quietly on a closed pipe (see `output`).
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::output::out(format_args!($($arg)*)) };
}

/// `eprintln!` that ends quietly on a closed pipe.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::output::err(format_args!($($arg)*)) };
}

mod apply;
#[cfg(feature = "kube")]
mod approve;
mod args;
mod check_type;
mod confirm;
mod graph;
mod history;
mod output;
mod pipeline;
mod progress;
mod reconcile;
mod render;

use std::io::IsTerminal;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::engine::executor::Executor;
use crate::engine::executor::process::{BUILTIN_SUBCOMMAND, ProcessExecutor};
use crate::engine::validate::ValidatedManifest;
use crate::engine::{InputError, PrepareError, load_validated};
use crate::executors::{Images, Local, PassExecutors, PassScope};
use crate::history::HistoryError;

pub use args::*;
pub use confirm::ConfirmMode;

/// Deployster: plan and apply a manifest of resources.
#[derive(Debug, Parser)]
#[command(name = "deployster", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what apply would do, without running any action.
    Plan(PlanArgs),
    /// Plan, ask for confirmation, then run the actions that bring resources to VALID.
    Apply(ApplyArgs),
    /// Apply again and again: correct drift every interval until stopped (SIGINT/SIGTERM/SIGHUP).
    Reconcile(ReconcileArgs),
    /// What the deployment log says: latest applied, failed and in-progress revisions, and
    /// recent events.
    History(HistoryArgs),
    /// The manifest's outputs as the latest successful apply recorded them.
    Outputs(OutputsArgs),
    /// The dependency graph, each resource coloured by its latest status (Mermaid, DOT or SVG).
    Graph(GraphArgs),
    /// Drive revisions through a pipeline of stages, groups and targets (start, run, approve,
    /// status, history).
    Pipeline(pipeline::PipelineArgs),
    /// Run a resource type (program, built-in or image) through the protocol's conformance
    /// checks; exit 0 only if it conforms.
    CheckType(CheckTypeArgs),
    /// Print a CustomResourceDefinition: Manifest's, or Pipeline's (`deployster crd | kubectl
    /// apply -f -`).
    #[cfg(feature = "kube")]
    Crd {
        #[arg(value_enum, default_value = "manifest")]
        kind: CrdKind,
    },
    /// Run the Kubernetes controller: reconcile Manifest objects continuously.
    #[cfg(feature = "kube")]
    Controller(ControllerArgs),
    /// Show a Manifest's plan awaiting approval (`spec.approval: Manual`) and approve it.
    #[cfg(feature = "kube")]
    Approve(ApproveArgs),
    /// Run a built-in resource type (used by the engine itself).
    #[command(name = BUILTIN_SUBCOMMAND, hide = true)]
    BuiltinType {
        name: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Parses the command line. `--var` and `--var-file` are interleaved in the order given,
/// which clap's derive alone does not record.
pub fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some((_, sub)) = matches.subcommand() {
        let args = match &mut cli.command {
            Command::Plan(plan) => Some(&mut plan.manifest),
            Command::Apply(apply) => Some(&mut apply.manifest),
            Command::Reconcile(reconcile) => Some(&mut reconcile.manifest),
            Command::Graph(graph) => Some(&mut graph.manifest),
            _ => None,
        };
        if let Some(args) = args {
            args.var_sources = args.ordered_var_sources(sub);
            args.files_given = sub.value_source("files") == Some(clap::parser::ValueSource::CommandLine);
        }
    }
    cli
}

/// How a command ended; main maps it to the documented exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// 0: everything is (or would be) as the manifest says.
    Ok,
    /// 1: some resource failed (or the user declined).
    Failed,
    /// 2: the manifest or the command line is invalid, or the run was refused.
    Invalid,
}

impl ExitKind {
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Ok => 0,
            ExitKind::Failed => 1,
            ExitKind::Invalid => 2,
        }
    }

    /// `Ok` when `succeeded`, else `Failed`.
    pub fn of(succeeded: bool) -> ExitKind {
        if succeeded { ExitKind::Ok } else { ExitKind::Failed }
    }
}

/// Errors that end a command before it could report per resource.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    NotApplicable(#[from] crate::engine::run::NotApplicable),
    #[error("{0}")]
    Refused(String),
    #[error("cannot find the deployster executable (needed to run built-in types): {0}")]
    SelfExe(std::io::Error),
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
    #[error(transparent)]
    Pass(#[from] crate::pass::PassError),
    #[error(transparent)]
    SavedPlan(#[from] crate::engine::saved::SavedPlanError),
    #[cfg(feature = "kube")]
    #[error(transparent)]
    Controller(#[from] crate::controller::Error),
}

impl CliError {
    pub fn exit(&self) -> ExitKind {
        match self {
            // Another run holds the state directory: refused, as the README promises (2).
            CliError::Input(_)
            | CliError::Refused(_)
            | CliError::SavedPlan(_)
            | CliError::History(HistoryError::Locked { .. } | HistoryError::Unusable { .. }) => ExitKind::Invalid,
            CliError::Prepare(e) if e.is_invalid_input() => ExitKind::Invalid,
            #[cfg(feature = "kube")]
            CliError::Controller(_) => ExitKind::Failed,
            CliError::Prepare(_)
            | CliError::NotApplicable(_)
            | CliError::SelfExe(_)
            | CliError::History(_)
            | CliError::Pass(_) => ExitKind::Failed,
        }
    }
}

/// Runs a parsed command.
pub async fn run(cli: Cli) -> Result<ExitKind, CliError> {
    match cli.command {
        Command::Plan(args) => apply::plan(args).await,
        Command::Apply(args) => apply::apply(args).await,
        Command::Reconcile(args) => reconcile::reconcile(args).await,
        Command::History(args) => history::history(args),
        Command::Outputs(args) => history::outputs(args),
        Command::Graph(args) => graph::graph(args).await,
        Command::Pipeline(args) => pipeline::pipeline(args).await,
        Command::CheckType(args) => check_type::check_type(args).await,
        #[cfg(feature = "kube")]
        Command::Crd { kind } => {
            let yaml = match kind {
                CrdKind::Manifest => crate::crd::crd_yaml(),
                CrdKind::Pipeline => crate::crd::pipeline::crd_yaml(),
            };
            outln!("{}", yaml.trim_end());
            Ok(ExitKind::Ok)
        }
        #[cfg(feature = "kube")]
        Command::Controller(args) => controller(args).await,
        #[cfg(feature = "kube")]
        Command::Approve(args) => approve::approve(args).await,
        Command::BuiltinType { name, args } => {
            let code = crate::builtins::main(&name, &args);
            Ok(ExitKind::of(code == 0))
        }
    }
}

/// The custom resources `deployster crd` prints.
#[cfg(feature = "kube")]
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CrdKind {
    Manifest,
    Pipeline,
}

/// The executor of the CLI's pass: local programs as processes, built-ins in this process,
/// `builtin/kubernetes` with the kubeconfig's user, images as Docker containers (connected to
/// only when a manifest uses one) or as Pods (`--executor pod`).
pub(super) async fn executor(args: &ImageArgs) -> Result<Arc<dyn Executor>, CliError> {
    let (executors, scope) = pass_executors(args).await?;
    Ok(executors.for_pass(&scope))
}

/// What makes the CLI's pass executor ([`executor`]), and the one scope it acts in.
pub(super) async fn pass_executors(args: &ImageArgs) -> Result<(PassExecutors, PassScope), CliError> {
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
fn executor_with(images: Images) -> Result<Arc<dyn Executor>, CliError> {
    Ok(PassExecutors::new(local(Cluster::default())?, images).for_pass(&PassScope::default()))
}

/// Chooses how built-in types run: `in-process` (the default) or `process` (each call a
/// `deployster __type` program, as before — for comparing the two).
pub const BUILTINS_ENV: &str = "DEPLOYSTER_BUILTINS";

/// Local programs as processes; built-ins in this process unless [`BUILTINS_ENV`] says
/// `process`.
fn local_executor() -> Result<Arc<dyn Executor>, CliError> {
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
    Ok((Images::Pods { runtime, builtins_too: false, check_access: true }, scope))
}

#[cfg(feature = "docker")]
fn docker_executor(args: &DockerArgs) -> Arc<dyn Executor> {
    use crate::engine::executor::docker::{DockerExecutor, PullPolicy};
    let pull = match args.pull {
        PullArg::IfNotPresent => PullPolicy::IfNotPresent,
        PullArg::Always => PullPolicy::Always,
        PullArg::Never => PullPolicy::Never,
    };
    Arc::new(DockerExecutor::new(pull).with_network(args.container_network.clone()))
}

fn load(args: &ManifestArgs) -> Result<ValidatedManifest, CliError> {
    let manifest = load_validated(&args.files, &args.var_sources)?;
    // Said once: `reconcile` loads the manifest again on every pass.
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        let texts: Vec<String> = manifest.files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
        let declared: Vec<String> = manifest.vars.keys().cloned().collect();
        for (name, closest) in crate::engine::vars::unread_assignments(&args.var_sources, &texts, &declared) {
            let hint = closest.map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
            errln!(
                "warning: --var {name}: {} never names a variable `{name}`; it changes nothing{hint}",
                manifest.name
            );
        }
    });
    Ok(manifest)
}

/// Whether the user can be asked a question.
fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

#[cfg(feature = "kube")]
async fn controller(args: ControllerArgs) -> Result<ExitKind, CliError> {
    use crate::controller::{Executors, ImageRunner, LeaderElection, OwnPod, RunConfig, Settings};
    let images = match args.executor {
        #[cfg(feature = "docker")]
        ExecutorArg::Docker => ImageRunner::Here(docker_executor(&args.docker)),
        #[cfg(not(feature = "docker"))]
        ExecutorArg::Docker => ImageRunner::None,
        ExecutorArg::Pod => ImageRunner::Pods(Box::new(args.making.settings())),
    };
    let executors = Executors { local: local_executor()?, images, reads_per_second: args.budget.per_second() };
    let defaults = Settings::default();
    let settings = Settings {
        allow_local_programs: args.allow_local_programs,
        history_limit: args.history_limit,
        pipeline_step_timeout: args.pipeline_step_timeout,
        plug_root: args.plug_dir.unwrap_or(defaults.plug_root),
        parallelism: usize::from(args.parallelism),
        timeouts: args.timeouts.timeouts(),
        plugs: defaults.plugs,
    };
    let leader_election = args.leader_elect.then_some(LeaderElection {
        lease_name: args.lease_name,
        lease_namespace: args.lease_namespace,
        lease_duration: args.lease_duration,
        pod: args.pod_name.zip(args.pod_uid).map(|(name, uid)| OwnPod { name, uid }),
    });
    let config = RunConfig {
        namespaces: args.namespaces,
        concurrency: args.concurrency,
        shutdown_grace: args.shutdown_grace,
        metrics_addr: args.metrics_addr,
        leader_election,
        settings,
    };
    crate::controller::run(config, executors).await?;
    Ok(ExitKind::Ok)
}

#[cfg(test)]
mod tests {
    /// clap's own checks of every command (unique names and flags, valid requirements), which
    /// otherwise fail only when that command runs.
    #[test]
    fn every_command_s_arguments_are_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
