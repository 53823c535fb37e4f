//! The command line's arguments: what each command accepts, as clap parses it.

use std::path::PathBuf;
use std::time::Duration;

use super::values::*;

use clap::{ArgMatches, Args, CommandFactory, ValueEnum};

use super::confirm::ConfirmMode;
use super::{Cli, apply};

use crate::engine::context::Timeouts;
use crate::engine::vars::VarSource;

/// Options shared by every command that reads a manifest.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Manifest file (YAML or JSON); repeat to merge several.
    #[arg(short = 'f', long = "file", value_name = "MANIFEST", default_value = "manifest.yaml")]
    pub files: Vec<PathBuf>,
    /// Set a variable (`key=value`; a dotted key sets a nested value). Applied in order with
    /// `--var-file`, after the manifest's defaults and auto var files.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = VarSource::parse_assignment)]
    vars: Vec<VarSource>,
    /// Set a sensitive variable (`key=value`), as `--var` does: its value is masked as `***`
    /// wherever it would be shown or kept, never rendered as a template, and not kept in a
    /// saved plan.
    // Parsed after clap, whose errors would show the value.
    #[arg(long = "sensitive-var", value_name = "KEY=VALUE")]
    sensitive_vars: Vec<String>,
    /// Load variables from a YAML or JSON file.
    #[arg(long = "var-file", value_name = "FILE")]
    var_files: Vec<PathBuf>,
    /// `--var` and `--var-file` in command-line order (filled after parsing).
    #[arg(skip)]
    pub var_sources: Vec<VarSource>,
    /// Whether `-f` was given (filled after parsing).
    #[arg(skip)]
    pub files_given: bool,
    /// Send `verbose: true` to resource programs and show their stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// Run at most this many resource programs at once [default: number of CPUs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub parallelism: Option<u16>,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub images: ImageArgs,
}

/// Which deployment log: the state directory, and the workspace in it.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Where the deployment log lives [default: .deployster beside the manifest].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// A named, independent copy of the manifest's resources, with a deployment log of its own
    /// (`--workspace prod --var env=prod`), in `<state dir>/workspaces/NAME`. The workspace
    /// `default` is the state directory itself.
    #[arg(long, value_name = "NAME", env = "DEPLOYSTER_WORKSPACE", value_parser = parse_workspace)]
    pub workspace: Option<String>,
}

impl ManifestArgs {
    /// `--var`, `--sensitive-var` and `--var-file` in the order given on the command line.
    pub(super) fn ordered_var_sources(&self, matches: &ArgMatches) -> Vec<VarSource> {
        let args = self;
        let positions = |id: &str| matches.indices_of(id).map(|i| i.collect::<Vec<_>>()).unwrap_or_default();
        let mut sources: Vec<(usize, VarSource)> =
            positions("vars").into_iter().zip(args.vars.iter().cloned()).collect();
        let sensitive = args.sensitive_vars.iter().map(|text| {
            VarSource::parse_sensitive(text).unwrap_or_else(|why| {
                let error = format!("--sensitive-var (value not shown) {why}");
                Cli::command().error(clap::error::ErrorKind::InvalidValue, error).exit()
            })
        });
        sources.extend(positions("sensitive_vars").into_iter().zip(sensitive));
        sources
            .extend(positions("var_files").into_iter().zip(args.var_files.iter().map(|f| VarSource::File(f.clone()))));
        sources.sort_by_key(|(position, _)| *position);
        sources.into_iter().map(|(_, source)| source).collect()
    }
}

impl StateArgs {
    /// The deployment log's directory for the manifest `files`.
    pub fn dir(&self, files: &[PathBuf]) -> PathBuf {
        let base = apply::state_dir(files, self.state_dir.as_deref());
        match self.named_workspace() {
            Some(name) => base.join("workspaces").join(name),
            None => base,
        }
    }

    /// The workspace, unless it is `default`.
    pub fn named_workspace(&self) -> Option<&str> {
        self.workspace.as_deref().filter(|w| *w != "default")
    }
}

/// Where resource types that are images run.
#[derive(Debug, Args)]
pub struct ImageArgs {
    #[cfg(feature = "docker")]
    #[command(flatten)]
    pub docker: DockerArgs,
    #[cfg(feature = "kube")]
    #[command(flatten)]
    pub pods: PodArgs,
}

/// Where resource types that are images run.
#[cfg(feature = "kube")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorArg {
    /// Containers of this machine's Docker engine.
    Docker,
    /// Pods of the current kubeconfig's cluster.
    Pod,
}

/// How Pods are made and watched (`--executor pod`), by the CLI and the controller alike.
#[cfg(feature = "kube")]
#[derive(Debug, Args)]
pub struct PodMakingArgs {
    /// With `--executor pod`: the image that carries Deployster's helper, copied into each Pod
    /// by its first container [default: deployster/controller:<this version>, the controller's
    /// own].
    #[arg(long, value_name = "IMAGE", env = "DEPLOYSTER_HELPER_IMAGE")]
    pub helper_image: Option<String>,
    /// With `--executor pod`: a registry (`host:port`) to read image configs from over plain
    /// HTTP (registries on loopback always are); repeat for several.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registries: Vec<String>,
    /// With `--executor pod`: read the image configs of registry NAME (as image references
    /// name it, `host:port`) at URL instead — where NAME, which nodes pull from, cannot be
    /// reached from here (a node-local registry, an air-gapped mirror); repeat for several.
    #[arg(long = "registry-endpoint", value_name = "NAME=URL")]
    pub registry_endpoints: Vec<crate::pod::registry::Endpoint>,
    /// With `--executor pod`: a Pod no node takes fails after this long, with the scheduler's
    /// message.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub schedule_timeout: Duration,
    /// With `--executor pod`: run each image type in a warm runner — a Pod that serves its
    /// invocations through `pods/exec` — which ends after DURATION without one; `0`: a Pod
    /// per invocation [default: the controller 10m; the CLI 0, and its runners are deleted
    /// when it exits].
    #[arg(long, value_name = "DURATION", value_parser = parse_idle)]
    pub runner_idle: Option<Duration>,
}

#[cfg(feature = "kube")]
impl PodMakingArgs {
    pub fn settings(&self) -> crate::pod::executor::PodSettings {
        let helper = self.helper_image.clone();
        let helper = helper.unwrap_or_else(|| format!("deployster/controller:{}", env!("CARGO_PKG_VERSION")));
        let mut settings = crate::pod::executor::PodSettings::new(helper);
        settings.insecure_registries = self.insecure_registries.clone();
        settings.registry_endpoints = self.registry_endpoints.clone();
        settings.schedule_timeout = self.schedule_timeout;
        settings.runner_idle = self.runner_idle.filter(|idle| !idle.is_zero());
        settings
    }
}

/// How resource types that are images run as Pods (`--executor pod`).
#[cfg(feature = "kube")]
#[derive(Debug, Args)]
pub struct PodArgs {
    /// Where resource types that are images run: `docker` (this machine's Docker engine) or
    /// `pod` (short-lived Pods of the current kubeconfig's cluster).
    #[arg(long, value_enum, value_name = "KIND", default_value_t = ExecutorArg::Docker)]
    pub executor: ExecutorArg,
    /// With `--executor pod`: the namespace the Pods run in [default: the kubeconfig's].
    #[arg(short, long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// With `--executor pod`: the ServiceAccount the Pods run as [default: the namespace's `default`].
    #[arg(long, value_name = "NAME")]
    pub service_account: Option<String>,
    #[command(flatten)]
    pub making: PodMakingArgs,
    /// With `--executor pod`: an image pull secret of the namespace, besides the
    /// ServiceAccount's; repeat for several.
    #[arg(long = "image-pull-secret", value_name = "NAME")]
    pub image_pull_secrets: Vec<String>,
    /// With `--executor pod`: a label the Pods' node must carry; repeat for several.
    #[arg(long = "node-selector", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub node_selector: Vec<(String, String)>,
    /// The kubeconfig file of the cluster that `--executor pod` and `builtin/kubernetes` use
    /// [default: KUBECONFIG, then ~/.kube/config, then in-cluster configuration].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use [default: its current context].
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// How long programs may run; past it a program gets SIGTERM, then SIGKILL.
#[derive(Debug, Args)]
pub struct TimeoutArgs {
    /// Stop every program invocation after this long (both limits below at once).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with_all = ["action_timeout", "state_timeout"])]
    pub timeout: Option<Duration>,
    /// Stop an action after this long (a resource's `timeouts.action` wins).
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub action_timeout: Duration,
    /// Stop init and state reads after this long (a resource's `timeouts.state` wins).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub state_timeout: Duration,
    /// Stop an action that reported progress and then no increase for this long (a resource's
    /// `timeouts.progress` wins).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub progress_timeout: Duration,
}

impl TimeoutArgs {
    pub fn timeouts(&self) -> Timeouts {
        match self.timeout {
            Some(all) => Timeouts { progress: self.progress_timeout, ..Timeouts::all(all) },
            None => {
                Timeouts { action: self.action_timeout, state: self.state_timeout, progress: self.progress_timeout }
            }
        }
    }
}

/// How resource types that are Docker images run.
#[cfg(feature = "docker")]
#[derive(Debug, Args)]
pub struct DockerArgs {
    /// When to pull the images of resource types that are Docker images.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = PullArg::IfNotPresent)]
    pub pull: PullArg,
    /// The network of resource containers: `shared` joins them all to one sandbox container on
    /// Docker's default network (fast; they share localhost); any other value is a Docker
    /// network mode for each container: `bridge` (a network of its own), `host`, `none`, a
    /// network's name, or `container:<name|id>`.
    #[arg(long, value_name = "MODE", default_value = "shared")]
    pub container_network: crate::engine::executor::docker::ContainerNetwork,
}

/// `--pull`: when images are pulled.
#[cfg(feature = "docker")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PullArg {
    /// Pull only images that are not present locally.
    IfNotPresent,
    /// Pull every image once per run.
    Always,
    /// Never pull; a missing image is an error.
    Never,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// Save the plan to this file, to review it and apply exactly it later with
    /// `deployster apply FILE`. It holds digests, never config values, states or secrets.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Plan `destroy`: what deleting everything the manifest's inventory holds would do.
    #[arg(long)]
    pub destroy: bool,
    /// Exit 0 when there is nothing to do, 2 when the plan has changes to apply (or resources
    /// to delete), 1 on any error (an invalid manifest too), as Terraform's: for CI.
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Plan to delete this resource and create it again (a restart, a fresh copy): its type's
    /// delete action, then the actions its state asks for. Repeat for several.
    #[arg(long, value_name = "RESOURCE")]
    pub replace: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// Do not ask.
    #[arg(short = 'y', long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A plan saved by `plan --out`: apply exactly it, without asking. Every state is read
    /// again first; if anything differs from the plan (a status, a state, an action, the
    /// manifest or its variables), nothing is applied. Its manifest files and variables are
    /// used unless given; sensitive `--var`s must be given again.
    #[arg(value_name = "PLAN")]
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// When to ask before running actions: once after the plan, per resource, per action, or never.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ConfirmMode::Once)]
    pub confirm: ConfirmMode,
    /// Do not ask (same as `--confirm no`).
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// An apply that deletes more than half of the resources the manifest's inventory holds
    /// (removed from the manifest) is refused without asking unless this names how many it
    /// deletes; at a prompt, it is asked for with a warning.
    #[arg(long, value_name = "N")]
    pub allow_deletes: Option<usize>,
    /// Delete this resource and create it again (a restart, a fresh copy): its type's delete
    /// action, then the actions its state asks for. Repeat for several.
    #[arg(long, value_name = "RESOURCE", conflicts_with = "plan")]
    pub replace: Vec<String>,
}

#[cfg(feature = "kube")]
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The Manifest's name.
    pub name: String,
    /// Its namespace [default: the kubeconfig's].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Approve only if this is the plan awaiting approval: its id, or the plan id a preview of
    /// the change showed (`deployster preview`), if the controller's plan is still exactly it.
    #[arg(long, value_name = "ID")]
    pub plan: Option<String>,
}

#[cfg(feature = "kube")]
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Watch only this namespace; repeat for several [default: all namespaces].
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,
    /// How many Manifests are reconciled at once (one object is never reconciled twice at once).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Allow resource types that are local programs (they run code of the Manifest author's
    /// choosing inside the controller).
    #[arg(long)]
    pub allow_local_programs: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// After SIGTERM, how long running passes may finish before their actions are cancelled.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Deployment-log entries kept on each object's status.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub history_limit: usize,
    /// A file of at least 16 secret bytes (the chart's Secret): with it, the statuses' logs keep
    /// a keyed fingerprint of each sensitive value, and a change to one is named by its field.
    #[arg(long, value_name = "FILE", env = "DEPLOYSTER_FINGERPRINT_KEY_FILE")]
    pub fingerprint_key_file: Option<PathBuf>,
    /// How long a Pipeline's step waits for its Manifest to be Ready before it fails.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = humantime::parse_duration)]
    pub pipeline_step_timeout: Duration,
    /// Where plugs are materialized [default: a directory under the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    pub plug_dir: Option<PathBuf>,
    /// Programs run at once within one pass.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallelism: u16,
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    /// Reconcile only while holding a Lease, so that of several replicas exactly one reconciles.
    #[arg(long)]
    pub leader_elect: bool,
    /// The leader election Lease's name.
    #[arg(long, value_name = "NAME", default_value = "deployster-controller", requires = "leader_elect")]
    pub lease_name: String,
    /// The leader election Lease's namespace [default: the controller's own namespace].
    #[arg(long, value_name = "NAMESPACE", requires = "leader_elect")]
    pub lease_namespace: Option<String>,
    /// How long a lease holds without renewal: a new leader takes over this long after the old
    /// one died; a leader that cannot renew for two thirds of it stops its passes.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_lease_duration, requires = "leader_elect")]
    pub lease_duration: Duration,
    /// Instead of one leader, replicas share the Manifests and Pipelines over N shards, each
    /// shard reconciled by one live replica at a time (with `--leader-elect`; its Leases are
    /// `<lease-name>-member-<id>` and `<lease-name>-shard-<n>`). Every replica of a group must
    /// run with the same N, lease duration and namespaces: one that differs takes no shard
    /// until the replicas with the oldest settings are gone.
    #[arg(long, value_name = "N", requires = "leader_elect", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub shards: Option<u32>,
    /// The name of the Pod the controller runs in (with `--pod-uid`; the chart sets both from
    /// the downward API): under `--leader-elect`, the Lease it holds is owned by that Pod, and
    /// goes with it.
    #[arg(long, value_name = "NAME", env = "DEPLOYSTER_POD_NAME", requires = "pod_uid")]
    pub pod_name: Option<String>,
    /// The uid of the Pod the controller runs in (with `--pod-name`).
    #[arg(long, value_name = "UID", env = "DEPLOYSTER_POD_UID", requires = "pod_name")]
    pub pod_uid: Option<String>,
    /// Where resource types that are images run: `pod` (short-lived Pods in each Manifest's
    /// namespace, as its `spec.serviceAccountName`; plugs are their volumes) or `docker` (the
    /// node's Docker engine; plugs are files the controller writes for them).
    #[arg(long, value_enum, value_name = "KIND", default_value_t = ExecutorArg::Pod)]
    pub executor: ExecutorArg,
    #[command(flatten)]
    pub making: PodMakingArgs,
    #[cfg(feature = "docker")]
    #[command(flatten)]
    pub docker: DockerArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The global budget of checks of a continuous loop.
#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// At most this many init and state reads that start a program or a container per second,
    /// spread evenly, so that many resources due at once never stampede (built-ins answered
    /// in-process are not counted; actions are never held back) [default: 100 per core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_invocations_per_second: Option<u32>,
}

impl BudgetArgs {
    /// Reads per second.
    pub fn per_second(&self) -> u32 {
        self.max_invocations_per_second.unwrap_or_else(crate::engine::executor::budget::default_per_second)
    }
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// How often each resource's state is read at first, and again after drift or a change.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub interval: Duration,
    /// A resource found VALID on 3 checks in a row is read half as often, and so on up to this
    /// [default: 4 × --interval]; between its checks it is taken for VALID with the state it was
    /// last read with. Give --interval's value for fixed checks.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_interval: Option<Duration>,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

/// Which deployment log a command reads.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// The manifest whose log to read (its directory holds `.deployster`).
    #[arg(short = 'f', long = "file", value_name = "MANIFEST", default_value = "manifest.yaml")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
}

impl LogArgs {
    pub fn dir(&self) -> PathBuf {
        self.state.dir(&self.files)
    }
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub log: LogArgs,
    /// Only this resource (and its actions).
    #[arg(long, value_name = "NAME")]
    pub resource: Option<String>,
    /// How many recent events to show.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// List every revision: number, content hash, when first seen, outcome.
    #[arg(long, conflicts_with_all = ["revision", "diff", "resource"])]
    pub revisions: bool,
    /// What happened at revision N, resource by resource.
    #[arg(long, value_name = "N", conflicts_with_all = ["diff", "resource"])]
    pub revision: Option<i64>,
    /// How the rendered configs differ between revisions N and M (sensitive values masked).
    #[arg(long, num_args = 2, value_names = ["N", "M"], conflicts_with = "resource")]
    pub diff: Option<Vec<i64>>,
    /// Every event of one run, oldest first: the id plans, applies and the controller's
    /// statuses name, and every program sees as `DEPLOYSTER_RUN_ID` (`LCM_CORRELATIONID` for
    /// packages).
    #[arg(long = "run", value_name = "ID", value_parser = parse_run_id, conflicts_with_all = ["revisions", "revision", "diff", "resource"])]
    pub run: Option<String>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct OutputsArgs {
    /// Only this output.
    pub name: Option<String>,
    /// Its value as it is, for scripts: a string unquoted (strings, numbers and booleans only).
    #[arg(long, requires = "name")]
    pub raw: bool,
    #[command(flatten)]
    pub log: LogArgs,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct GraphArgs {
    #[command(flatten)]
    pub manifest: ManifestArgs,
    /// `mermaid` pastes into GitHub and GitLab markdown; `svg` is drawn without Graphviz.
    #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
    pub format: GraphFormat,
    /// Plan now (running state actions) instead of reading the latest statuses from the log.
    #[arg(long)]
    pub live: bool,
    /// Draw the Manifest custom resource of this name (in the namespace `-n` names, else the
    /// kubeconfig's), with the status the controller wrote, instead of a manifest file.
    #[cfg(feature = "kube")]
    #[arg(long = "manifest", value_name = "NAME", conflicts_with = "live")]
    pub object: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckTypeArgs {
    /// The type: `./program`, `builtin/<name>` or an image reference.
    #[arg(value_name = "TYPE")]
    pub type_ref: String,
    /// A config (YAML or JSON) the type should converge on: state, its actions, state again;
    /// repeat for several cases.
    #[arg(long = "config", value_name = "FILE")]
    pub configs: Vec<PathBuf>,
    /// A config that breaks the type's schema: state must fail with a message on stderr.
    #[arg(long = "bad-config", value_name = "FILE")]
    pub bad_configs: Vec<PathBuf>,
    /// Each invocation's time limit.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Flag calls slower than this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub slow: Duration,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[cfg(feature = "docker")]
    #[command(flatten)]
    pub docker: DockerArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    Mermaid,
    Dot,
    Svg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}
