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
#[cfg(feature = "kube")]
mod controller;
mod executors;
mod graph;
mod history;
mod output;
mod pipeline;
#[cfg(feature = "kube")]
mod preview;
mod progress;
mod reconcile;
pub mod reference;
mod render;
mod style;
mod values;
mod watched;

use std::io::IsTerminal;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::engine::executor::process::BUILTIN_SUBCOMMAND;
use crate::engine::validate::ValidatedManifest;
use crate::engine::vars::VarSource;
use crate::engine::{InputError, PrepareError, load_validated};
use crate::history::HistoryError;

pub use args::*;
pub use confirm::ConfirmMode;
pub use executors::BUILTINS_ENV;
use executors::{Session, executor_with};
pub use style::ColorWhen;

/// Every command's exit code, said once (`deployster --help`, and the book's CLI reference).
pub const EXIT_CODES: &str = "\
Exit codes, for every command:
  0  done, or nothing to do
  1  it failed: a resource failed, the run was interrupted, you declined the prompt, or
     something it needs (the cluster, the Docker daemon, a registry) could not be reached
  2  refused before anything was done: the manifest, a variable, the command line or a plan
     file is wrong, the state directory is locked, or there is nothing to approve
  `plan --detailed-exitcode` and `preview`: 0 nothing to do, 2 changes pending, 1 any error";

/// Deployster: plan and apply a manifest of resources.
#[derive(Debug, Parser)]
#[command(name = "deployster", version, about, propagate_version = true, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour and `+ ~ -` markers: `auto` on a terminal (without `NO_COLOR`), never in a pipe
    /// or with `--output json`.
    #[arg(long, global = true, value_enum, default_value_t = style::ColorWhen::Auto, value_name = "WHEN")]
    pub color: style::ColorWhen,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what apply would do, without running any action.
    Plan(PlanArgs),
    /// Plan, ask for confirmation, then run the actions that bring resources to VALID.
    Apply(ApplyArgs),
    /// Delete everything the manifest declares or the deployment log's inventory holds for
    /// it, dependents first, once shown and confirmed.
    Destroy(DestroyArgs),
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
    /// Print a CustomResourceDefinition: Manifest's, Pipeline's or ManifestPreview's
    /// (`deployster crd preview | kubectl apply -f -`).
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
    /// Plan a proposed Manifest in the cluster, apply nothing, print the plan (for a pull
    /// request); exits 0 nothing to do, 2 changes pending, 1 any error.
    #[cfg(feature = "kube")]
    Preview(preview::PreviewArgs),
    /// Print a shell completion script (`deployster completions bash >
    /// ~/.local/share/bash-completion/completions/deployster`; zsh: into a directory of `$fpath`
    /// as `_deployster`; fish: `~/.config/fish/completions/deployster.fish`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (`deployster man | man -l -`), or write one per command into a
    /// directory (`--out-dir`).
    Man {
        /// Write one page per command (`deployster.1`, `deployster-plan.1`, …) into this directory.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
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
    let args: Vec<String> = std::env::args().collect();
    if let Some(error) = single_dash(&args) {
        error.exit();
    }
    let matches = Cli::command().try_get_matches_from(&args).unwrap_or_else(|e| foreign_flag(e).exit());
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    style::init(cli.color, wants_json(&matches));
    if let Some((_, sub)) = matches.subcommand() {
        let args = match &mut cli.command {
            Command::Plan(plan) => Some(&mut plan.manifest),
            Command::Apply(apply) => Some(&mut apply.manifest),
            Command::Destroy(destroy) => Some(&mut destroy.manifest),
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
    /// 2 for `plan --detailed-exitcode`: the plan has changes to apply (there, every error is 1).
    ChangesPending,
}

impl ExitKind {
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Ok => 0,
            ExitKind::Failed => 1,
            ExitKind::Invalid | ExitKind::ChangesPending => 2,
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
    /// What the command needs could not be reached (the cluster, the Docker daemon): it failed,
    /// as a resource whose service is down fails.
    #[error("{0}")]
    Unreachable(String),
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
    Controller(#[from] crate::controller::StartError),
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
            | CliError::Unreachable(_)
            | CliError::NotApplicable(_)
            | CliError::SelfExe(_)
            | CliError::History(_)
            | CliError::Pass(_) => ExitKind::Failed,
        }
    }
}

/// Runs a parsed command.
pub async fn run(cli: Cli) -> Result<ExitKind, CliError> {
    let session = Session::default();
    let result = run_command(cli, &session).await;
    session.end().await;
    result
}

async fn run_command(cli: Cli, session: &Session) -> Result<ExitKind, CliError> {
    match cli.command {
        Command::Plan(args) => apply::plan(args, session).await,
        Command::Apply(args) => apply::apply(args, session).await,
        Command::Destroy(args) => apply::destroy(args, session).await,
        Command::Reconcile(args) => reconcile::reconcile(args, session).await,
        Command::History(args) => history::history(args),
        Command::Outputs(args) => history::outputs(args),
        Command::Graph(args) => graph::graph(args, session).await,
        Command::Pipeline(args) => pipeline::pipeline(args, session).await,
        Command::CheckType(args) => check_type::check_type(args).await,
        #[cfg(feature = "kube")]
        Command::Crd { kind } => {
            let yaml = match kind {
                CrdKind::Manifest => crate::crd::crd_yaml(),
                CrdKind::Pipeline => crate::crd::pipeline::crd_yaml(),
                CrdKind::Preview => crate::crd::preview::crd_yaml(),
            };
            outln!("{}", yaml.trim_end());
            Ok(ExitKind::Ok)
        }
        #[cfg(feature = "kube")]
        Command::Controller(args) => controller::controller(args).await,
        #[cfg(feature = "kube")]
        Command::Approve(args) => approve::approve(args).await,
        #[cfg(feature = "kube")]
        Command::Preview(args) => preview::preview(args).await,
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "deployster", &mut out);
            outln!("{}", String::from_utf8_lossy(&out).trim_end());
            Ok(ExitKind::Ok)
        }
        Command::Man { out_dir } => man(out_dir.as_deref()),
        Command::BuiltinType { name, args } => {
            let code = crate::builtins::main(&name, &args);
            Ok(ExitKind::of(code == 0))
        }
    }
}

fn man(out_dir: Option<&std::path::Path>) -> Result<ExitKind, CliError> {
    let failed = |e: std::io::Error| CliError::Refused(format!("man: {e}"));
    match out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(failed)?;
            clap_mangen::generate_to(Cli::command(), dir).map_err(failed)?;
            outln!("Man pages written to {}.", dir.display());
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut out).map_err(failed)?;
            outln!("{}", String::from_utf8_lossy(&out).trim_end());
        }
    }
    Ok(ExitKind::Ok)
}

/// Whether the command (at any depth: `pipeline status --output json`) prints JSON.
fn wants_json(matches: &clap::ArgMatches) -> bool {
    let here = matches.try_get_one::<OutputFormat>("output").ok().flatten() == Some(&OutputFormat::Json);
    here || matches.subcommand().is_some_and(|(_, sub)| wants_json(sub))
}

/// Flags the tools our users know taught them, and what deployster has instead.
const FOREIGN_FLAGS: &[(&str, &str)] = &[
    ("--auto-approve", "`--yes` (as Terraform's `-auto-approve`)"),
    ("--dry-run", "`deployster plan`, which runs no action"),
    ("--force", "`--yes` to apply without asking"),
];

/// clap's error for an unknown argument, or, for a flag another tool taught, ours named.
fn foreign_flag(error: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return error;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else { return error };
    let flag = arg.split('=').next().unwrap_or_default();
    match FOREIGN_FLAGS.iter().find(|(theirs, _)| *theirs == flag) {
        Some((_, ours)) => Cli::command()
            .error(ErrorKind::UnknownArgument, format!("unexpected argument '{arg}': deployster's is {ours}")),
        None => error,
    }
}

/// A long flag written with one dash, as Terraform writes its own (`-var`, `-auto-approve`):
/// clap would read `-v -a -r`. Said with the flag deployster has: the command's own flag of
/// that name (`--var`), or the one [`FOREIGN_FLAGS`] names.
fn single_dash(args: &[String]) -> Option<clap::Error> {
    let cli = Cli::command();
    let mut command = &cli;
    for arg in args.iter().skip(1).take_while(|a| *a != "--") {
        if let Some(sub) = command.find_subcommand(arg) {
            command = sub;
            continue;
        }
        let Some(word) = arg.strip_prefix('-').filter(|w| !w.starts_with('-') && w.len() > 1) else { continue };
        let word = word.split('=').next().unwrap_or_default();
        let ours = match FOREIGN_FLAGS.iter().find(|(theirs, _)| theirs.strip_prefix("--") == Some(word)) {
            Some((_, ours)) => ours.to_string(),
            None if command.get_arguments().any(|a| a.get_long() == Some(word)) => format!("`--{word}`"),
            None => continue,
        };
        let message = format!("unexpected argument '{arg}': deployster's long flags take two dashes: {ours}");
        return Some(cli.clone().error(clap::error::ErrorKind::UnknownArgument, message));
    }
    None
}

/// The custom resources `deployster crd` prints.
#[cfg(feature = "kube")]
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CrdKind {
    Manifest,
    Pipeline,
    /// ManifestPreview: a proposed spec planned in the cluster (`deployster preview`).
    Preview,
}

fn load(args: &ManifestArgs) -> Result<ValidatedManifest, CliError> {
    let manifest = load_validated(&args.files, &args.var_sources)?;
    if !args.var_sources.iter().any(|s| matches!(s, VarSource::Assignment { .. } | VarSource::Sensitive { .. })) {
        return Ok(manifest);
    }
    // A `--var` the manifest never names would change nothing, silently: refused, as Terraform
    // refuses a value for an undeclared variable (a var file's extra keys are allowed).
    let texts: Vec<String> = manifest.files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
    let declared: Vec<String> = manifest.vars.keys().cloned().collect();
    let unread = crate::engine::vars::unread_assignments(&args.var_sources, &texts, &declared);
    if !unread.is_empty() {
        let names: Vec<String> = unread.iter().map(|(name, hint)| format!("`{name}`{hint}")).collect();
        let flags: Vec<String> = unread.iter().map(|(name, _)| format!("--var {name}")).collect();
        return Err(CliError::Input(
            crate::engine::vars::VarsError {
                origin: flags.join(", "),
                message: format!(
                    "manifest {} never names {} {}: it would change nothing, so nothing was done",
                    manifest.name,
                    if unread.len() == 1 { "a variable" } else { "the variables" },
                    names.join(", ")
                ),
            }
            .into(),
        ));
    }
    Ok(manifest)
}

/// Whether the user can be asked a question.
fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
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
