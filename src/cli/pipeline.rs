//! `deployster pipeline start|run|approve|register|status|history`: a front end over the
//! pipeline's log ([`crate::pipeline`]), whose steps are recorded passes over manifests.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clap::{Args, Subcommand};
use serde_json::{Map, Value};

use super::render::{print_json, snake_keys};
use super::{CliError, ExitKind, OutputFormat, Session};
use crate::engine::context::RunOptions;
use crate::engine::events::ApproveAll;
use crate::engine::executor::Executor;
use crate::engine::plan::Standing;
use crate::engine::vars::VarSource;
use crate::history::store::{SqliteLog, StateLock};
use crate::history::{History, HistoryError};
use crate::pass::{Ended, Mode, Pass, Passed};
use crate::pipeline::drive::{Driven, Driver, Job, StepRunner};
use crate::pipeline::query::status;
use crate::pipeline::spec::{Pipeline, load};
use crate::pipeline::{PipelineError, StepError};

#[derive(Debug, Args)]
pub struct PipelineArgs {
    #[command(subcommand)]
    pub command: PipelineCommand,
}

#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Register a revision: it enters the pipeline (driven by `run`).
    Start(VarsArgs),
    /// Register a revision when vars are given, then drive every revision in flight until each
    /// is through, failed, or waiting on a gate (exit 0; 1 when a step failed; 2 for an
    /// invalid pipeline). A later `run` goes on from the log; `--wait` follows them to the end.
    Run(Box<RunArgs>),
    /// Approve the gate before a group (`stage/group`, or a stage) for a revision waiting there.
    Approve {
        #[command(flatten)]
        file: FileArgs,
        /// The revision to let through (as `pipeline status` lists it).
        #[arg(long)]
        revision: String,
        /// `stage/group`, or `stage` for a stage's approval.
        gate: String,
    },
    /// Register an artifact a stage requires (`requires: [amd64]`) for a revision.
    Register {
        #[command(flatten)]
        file: FileArgs,
        /// The revision the artifact is of.
        #[arg(long)]
        revision: String,
        /// The stage that requires it.
        stage: String,
        /// The artifact, as the stage's `requires` names it.
        artifact: String,
    },
    /// For the pipeline and every stage, group and target: latest revision through, latest
    /// failed, in progress; each revision; what every step on the frontier waits for.
    Status(FileArgs),
    /// The pipeline's log, newest first.
    History {
        #[command(flatten)]
        file: FileArgs,
        /// How many entries.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
}

#[derive(Debug, Args)]
pub struct FileArgs {
    /// The pipeline file.
    #[arg(short = 'f', long = "file", value_name = "PIPELINE", default_value = "pipeline.yaml")]
    pub file: PathBuf,
    /// Where the pipeline's log and its steps' logs live [default:
    /// .deployster/pipelines/<file name> beside the pipeline].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct VarsArgs {
    #[command(flatten)]
    pub file: FileArgs,
    /// A var of the revision (`version=1.4.3`); they reach every target's and test's manifest.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = VarSource::parse_assignment)]
    pub vars: Vec<VarSource>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub vars: VarsArgs,
    /// Where the steps' image types run (`--executor docker|pod`), as for `apply`.
    #[command(flatten)]
    pub images: super::ImageArgs,
    /// Follow every revision in flight to its end — through bakes and windows, and approvals
    /// given meanwhile (`pipeline approve` from another shell) — saying what each waits for as
    /// it starts waiting; exit 0 once all are through, 1 if a step failed.
    #[arg(long)]
    pub wait: bool,
    /// With `--wait`: stop waiting after this long (`30m`; exit 1) [default: no limit].
    #[arg(long, requires = "wait", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,
}

/// How often `run --wait` drives again: a bake's end or an approval is acted on within it.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl FileArgs {
    fn state_dir(&self, pipeline: &Pipeline) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| {
            crate::engine::manifest::parent_dir(&self.file).join(".deployster").join("pipelines").join(&pipeline.name)
        })
    }
}

impl From<PipelineError> for CliError {
    fn from(error: PipelineError) -> Self {
        match error {
            PipelineError::History(e) => CliError::History(e),
            other => CliError::Refused(other.to_string()),
        }
    }
}

/// The revision's vars: `--var` assignments, a dotted key setting a nested value, as a
/// manifest's are resolved.
fn vars_of(pipeline: &Pipeline, sources: &[VarSource]) -> Result<Map<String, Value>, CliError> {
    crate::engine::vars::resolve(&pipeline.vars, &[], sources, &[])
        .map_err(|e| CliError::Refused(format!("{}: {}", e.origin, e.message)))
}

pub(super) async fn pipeline(args: PipelineArgs, session: &Session) -> Result<ExitKind, CliError> {
    match args.command {
        PipelineCommand::Start(args) => start(&args),
        PipelineCommand::Run(args) => run(&args, session).await,
        PipelineCommand::Approve { file, revision, gate } => approve(&file, &revision, &gate),
        PipelineCommand::Register { file, revision, stage, artifact } => register(&file, &revision, &stage, &artifact),
        PipelineCommand::Status(file) => show_status(&file),
        PipelineCommand::History { file, limit } => history(&file, limit),
    }
}

/// A pipeline and its log, open for what a command does: what changes the log holds the
/// state directory (two drives would both start the same step).
struct Opened {
    pipeline: Pipeline,
    dir: PathBuf,
    log: Arc<dyn History>,
    _lock: Option<StateLock>,
}

impl Opened {
    fn writing(file: &FileArgs) -> Result<Opened, CliError> {
        let pipeline = load(&file.file)?;
        let dir = file.state_dir(&pipeline);
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Refused(format!("cannot make the state directory {}: {e}", dir.display())))?;
        let lock = StateLock::acquire(&dir)?;
        let log: Arc<dyn History> = Arc::new(SqliteLog::open(&dir)?);
        Ok(Opened { pipeline, dir, log, _lock: Some(lock) })
    }

    fn reading(file: &FileArgs) -> Result<Opened, CliError> {
        let pipeline = load(&file.file)?;
        let dir = file.state_dir(&pipeline);
        let log: Arc<dyn History> = match dir.join(crate::history::store::DATABASE).exists() {
            true => Arc::new(SqliteLog::open_for_reading(&dir)?),
            // Never run: nothing registered yet.
            false => Arc::new(crate::history::MemoryLog::new()),
        };
        Ok(Opened { pipeline, dir, log, _lock: None })
    }

    fn driver<'a>(&'a self, executor: Arc<dyn Executor>, stop: &crate::stop::Stop) -> Driver<'a> {
        Driver {
            pipeline: &self.pipeline,
            log: self.log.clone(),
            runner: Some(Arc::new(Passes { executor, cancel: stop.now.clone() })),
            now: &crate::history::now_ms,
            state_dir: self.dir.clone(),
            say: &say,
            cancel: stop.now.clone(),
        }
    }
}

/// SIGINT, SIGTERM, SIGHUP: the running steps' programs are stopped, and nothing more starts.
fn stop_on_signals() -> Result<crate::stop::Stop, CliError> {
    crate::stop::Stop::on_signals(crate::stop::Cancel::AtOnce)
        .map_err(|e| CliError::Refused(format!("cannot watch for signals: {e}")))
}

fn say(line: &str) {
    errln!("{line}");
}

/// The executor of a command that runs no step: it reaches no Docker engine and no cluster.
fn offline() -> Result<Arc<dyn Executor>, CliError> {
    super::executor_with(crate::executors::ImagePlan::None)
}

fn start(args: &VarsArgs) -> Result<ExitKind, CliError> {
    let opened = Opened::writing(&args.file)?;
    let vars = vars_of(&opened.pipeline, &args.vars)?;
    let revision = opened.pipeline.revision_of(&vars)?;
    match opened.driver(offline()?, &stop_on_signals()?).register(&revision, &vars)? {
        true => outln!(
            "Revision {revision} registered: `deployster pipeline run -f {}` drives it.",
            args.file.file.display()
        ),
        false => outln!("Revision {revision} is in flight already."),
    }
    Ok(ExitKind::Ok)
}

async fn run(args: &RunArgs, session: &Session) -> Result<ExitKind, CliError> {
    let file = &args.vars.file;
    let stop = stop_on_signals()?;
    // Docker and the cluster are reached when a step needs one.
    let executor = session.executor(&args.images, None).await?;
    let started = std::time::Instant::now();
    let how = how_to_approve(&file.file);
    let mut told = std::collections::HashSet::new();
    let mut registering = !args.vars.vars.is_empty();
    let mut first = true;
    loop {
        // Opened anew each round: the state directory is free between them, for `approve`.
        // A later round that finds it held (an `approve` or `register` at that moment) waits
        // for the next; the first says so, as any command does.
        let opened = match Opened::writing(file) {
            Err(CliError::History(HistoryError::Locked { .. }))
                if !first && args.timeout.is_none_or(|limit| started.elapsed() < limit) =>
            {
                tokio::time::sleep(WAIT_POLL).await;
                continue;
            }
            opened => opened?,
        };
        first = false;
        let driver = opened.driver(executor.clone(), &stop);
        if std::mem::take(&mut registering) {
            let vars = vars_of(&opened.pipeline, &args.vars.vars)?;
            let revision = opened.pipeline.revision_of(&vars)?;
            if driver.register(&revision, &vars)? {
                say(&format!("revision {revision} registered"));
            }
        }
        let driven = driver.drive().await?;
        let live = driven.progress.revisions.iter().any(|r| r.is_live());
        if !args.wait || driven.interrupted || !driven.failed.is_empty() || !live {
            show_driven(&opened.pipeline, &driven, file);
            if driven.interrupted {
                errln!(
                    "interrupted by {}: the running steps were stopped and recorded as interrupted; `pipeline run` runs them again",
                    stop.signal().unwrap_or("a signal")
                );
            }
            return Ok(ExitKind::of(driven.failed.is_empty() && !driven.interrupted));
        }
        for waiting in &driven.waiting {
            if let Some(why) = waiting.decision.waits_for(&how) {
                let line = format!("{} {} waits for {why}", waiting.revision, opened.pipeline.steps[waiting.step].id);
                if told.insert(line.clone()) {
                    say(&line);
                }
            }
        }
        if let Some(limit) = args.timeout
            && started.elapsed() >= limit
        {
            show_driven(&opened.pipeline, &driven, file);
            errln!(
                "error: pipeline {}: still in flight after --timeout {}: `pipeline run --wait` goes on from here",
                opened.pipeline.name,
                humantime::format_duration(limit)
            );
            return Ok(ExitKind::Failed);
        }
        drop(driver);
        drop(opened);
        tokio::select! {
            () = tokio::time::sleep(WAIT_POLL) => {}
            () = stop.requested.cancelled() => {
                errln!("interrupted by {} while waiting: nothing was running", stop.signal().unwrap_or("a signal"));
                return Ok(ExitKind::Failed);
            }
        }
    }
}

fn approve(file: &FileArgs, revision: &str, gate: &str) -> Result<ExitKind, CliError> {
    let opened = Opened::writing(file)?;
    opened.driver(offline()?, &stop_on_signals()?).approve(revision, gate)?;
    outln!("Approved {gate} for revision {revision}: `deployster pipeline run -f {}` goes on.", file.file.display());
    Ok(ExitKind::Ok)
}

fn register(file: &FileArgs, revision: &str, stage: &str, artifact: &str) -> Result<ExitKind, CliError> {
    let opened = Opened::writing(file)?;
    opened.driver(offline()?, &stop_on_signals()?).register_artifact(revision, stage, artifact)?;
    outln!("Artifact {artifact} registered for stage {stage}, revision {revision}.");
    Ok(ExitKind::Ok)
}

fn show_status(file: &FileArgs) -> Result<ExitKind, CliError> {
    let opened = Opened::reading(file)?;
    // What the next `run` would act on: `approve` asks the same.
    let progress = opened.driver(offline()?, &stop_on_signals()?).settled()?;
    let status = status(&opened.pipeline, &progress, crate::history::now_ms(), &how_to_approve(&file.file));
    match file.output {
        OutputFormat::Json => print_json(&snake_keys(serde_json::to_value(&status).expect("status serializes"))),
        OutputFormat::Text => print_status(&status),
    }
    Ok(ExitKind::Ok)
}

fn history(file: &FileArgs, limit: usize) -> Result<ExitKind, CliError> {
    let entries = Opened::reading(file)?.log.recent("pipeline", limit)?;
    match file.output {
        OutputFormat::Json => print_json(&serde_json::to_value(&entries).expect("entries serialize")),
        OutputFormat::Text => {
            for e in &entries {
                let detail = match e.detail.as_object().is_some_and(|d| !d.is_empty()) {
                    true => e.detail.to_string(),
                    false => String::new(),
                };
                let at = crate::history::format_time(e.at);
                outln!("{at}  {:<10} {:<32} {} {detail}", e.revision, e.event, e.target);
            }
        }
    }
    Ok(ExitKind::Ok)
}

/// How the CLI approves: the command, with the pipeline file as it was given, to paste.
fn how_to_approve(file: &std::path::Path) -> impl Fn(&str, &str) -> String {
    let file = file.display().to_string();
    move |revision, gate| format!("`deployster pipeline approve -f {file} --revision {revision} {gate}`")
}

fn show_driven(pipeline: &Pipeline, driven: &Driven, file: &FileArgs) {
    let how = how_to_approve(&file.file);
    if file.output == OutputFormat::Json {
        let status = status(pipeline, &driven.progress, crate::history::now_ms(), &how);
        print_json(&snake_keys(serde_json::to_value(&status).expect("status serializes")));
        return;
    }
    let runs = crate::pipeline::query::run_numbers(&driven.progress);
    for (revision, run) in driven.progress.revisions.iter().zip(runs) {
        let state = match &revision.ended {
            Some(crate::pipeline::progress::RevisionEnded::Through) => "through".to_string(),
            Some(crate::pipeline::progress::RevisionEnded::Failed { step, .. }) => format!("failed at {step}"),
            Some(crate::pipeline::progress::RevisionEnded::Superseded { by }) => format!("superseded by {by}"),
            None => "in progress".to_string(),
        };
        outln!("Revision {}: {state}", crate::pipeline::query::run_name(&revision.revision, run));
    }
    for waiting in &driven.waiting {
        if let Some(why) = waiting.decision.waits_for(&how) {
            outln!("  {} {} waits for {why}", waiting.revision, pipeline.steps[waiting.step].id);
        }
    }
    for (revision, step, why) in &driven.failed {
        errln!("error: pipeline {}: revision {revision}: step {step} failed: {why}", pipeline.name);
    }
}

fn print_status(status: &crate::pipeline::query::PipelineOverview) {
    outln!("Pipeline {}", status.pipeline);
    for r in &status.revisions {
        outln!(
            "  revision {:<12} {}{}",
            crate::pipeline::query::run_name(&r.revision, r.run),
            r.status,
            r.detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default()
        );
    }
    outln!("{:<36} {:<14} {:<14} {:<14} IN PROGRESS", "NODE", "THROUGH", "FAILED", "CURRENT");
    for n in &status.nodes {
        let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        outln!(
            "{:<36} {:<14} {:<14} {:<14} {}",
            n.node,
            or_dash(&n.latest_through),
            or_dash(&n.latest_failed),
            or_dash(&n.current),
            n.in_progress.join(", ")
        );
    }
    if !status.frontier.is_empty() {
        outln!("Frontier:");
        for f in &status.frontier {
            outln!(
                "  {} {} {}{}",
                f.revision,
                f.step,
                f.status,
                f.waits_for.as_ref().map(|w| format!(": {w}")).unwrap_or_default()
            );
        }
    }
}

/// Each step a recorded pass over its manifest, in the step's own state directory, approved
/// by the pipeline (the pipeline is the approval).
struct Passes {
    executor: Arc<dyn Executor>,
    cancel: tokio_util::sync::CancellationToken,
}

#[async_trait]
impl StepRunner for Passes {
    async fn run(&self, job: Job) -> Result<(), StepError> {
        let shown = job.manifest.display().to_string();
        let state = |what: String, e: &dyn std::fmt::Display| StepError::State { what, why: e.to_string() };
        let dir = job.state_dir.display();
        std::fs::create_dir_all(&job.state_dir).map_err(|e| state(format!("cannot make {dir}"), &e))?;
        let vars_file = job.state_dir.join("vars.json");
        std::fs::write(&vars_file, Value::Object(job.vars.clone()).to_string())
            .map_err(|e| state(format!("cannot write {}", vars_file.display()), &e))?;
        let _lock = StateLock::acquire(&job.state_dir).map_err(|e| state(format!("the state directory {dir}"), &e))?;
        let log = SqliteLog::open(&job.state_dir).map_err(|e| state(format!("the state directory {dir}"), &e))?;
        let log: Arc<dyn History> = Arc::new(log);
        let failed = |why: String| StepError::Manifest { manifest: shown.clone(), why };
        let manifest =
            crate::engine::load_validated(std::slice::from_ref(&job.manifest), &[VarSource::File(vars_file)])
                .map_err(|e| failed(format!(" does not load: {e}")))?;
        let why = || "the pipeline's drive was stopped by a signal".to_string();
        let passed = Pass {
            manifest: Arc::new(manifest),
            executor: self.executor.clone(),
            log,
            mode: Mode::Apply,
            options: RunOptions::default(),
            observers: Vec::new(),
            approver: &ApproveAll,
            cancel: self.cancel.child_token(),
            cancelled_because: &why,
            recover: true,
            expected: None,
            recheck: false,
            inventory: crate::pass::Inventory::Off,
        }
        .run()
        .await
        .map_err(|e| failed(format!(": {e}")))?;
        if let Some(why) = &passed.interrupted {
            return Err(failed(format!(": {why}")));
        }
        match passed.succeeded() {
            true => Ok(()),
            false => Err(failed(format!(": {}", failures(&passed)))),
        }
    }
}

/// What failed in a pass, each resource with its phase and cause.
fn failures(passed: &Passed) -> String {
    let entries = match &passed.ended {
        Ended::NotPrepared(e) => return e.to_string(),
        Ended::Applied { report, .. } => report.entries(),
        Ended::NotApplicable(plan) | Ended::Planned(plan) => &plan.entries,
        Ended::Declined { why, .. } | Ended::Refused { why, .. } => return why.clone(),
        Ended::PlanChanged { differences, .. } => return differences.join("; "),
        Ended::Deleted { .. } => return "deleted".into(),
    };
    let said: Vec<String> = entries
        .iter()
        .filter_map(|e| match &e.standing {
            Standing::Failed(error) => Some(format!("resource `{}` failed in {}: {error}", e.name, error.phase)),
            _ => None,
        })
        .collect();
    if said.is_empty() { "failed".into() } else { said.join("; ") }
}
