//! Passes over a manifest — `plan`, `apply`, and each pass of `reconcile` — recorded in the
//! deployment log.

use std::path::PathBuf;
use std::sync::Arc;

use super::confirm::{self, ConfirmMode};
use super::progress::Progress;
use super::render;
use super::{ApplyArgs, CliError, Exit, ManifestArgs, OutputFormat, executor, interactive, load};
use crate::engine::executor::Executor;
use crate::engine::manifest::parent_dir;
use crate::engine::plan::{Plan, Planned};
use crate::engine::run::{Engine, Observers, RunOptions, new_run_id};
use crate::history::recorder::{Drift, Mode, Recorder};
use crate::history::store::{SqliteLog, StateLock};
use crate::history::{History, MemoryLog, Unrecorded};
use crate::pass::recover;
use crate::stop::{Cancel, Stop};

/// The state directory: `--state-dir`, else `.deployster` beside the (first) manifest.
pub(super) fn state_dir(files: &[PathBuf], explicit: Option<&std::path::Path>) -> PathBuf {
    match explicit {
        Some(dir) => dir.to_path_buf(),
        None => parent_dir(files.first().map_or(std::path::Path::new("manifest.yaml"), PathBuf::as_path))
            .join(".deployster"),
    }
}

/// The deployment log, locked when the caller changes things.
pub(super) struct State {
    pub log: Arc<dyn History>,
    exclusive: bool,
    _lock: Option<StateLock>,
}

impl State {
    /// Opens the state directory; `exclusive` takes its lock (apply, reconcile) — a plan only
    /// reads and appends, so it may run beside them. A plan in a directory it cannot write
    /// still plans, reading what the log holds (drift needs it), and says it is not recorded.
    pub(super) fn open(args: &ManifestArgs, exclusive: bool, progress: &Progress) -> Result<State, CliError> {
        let dir = state_dir(&args.files, args.state_dir.as_deref());
        if exclusive {
            let lock = StateLock::acquire(&dir)?;
            return Ok(State { log: Arc::new(SqliteLog::open(&dir)?), exclusive, _lock: Some(lock) });
        }
        let log: Arc<dyn History> = match SqliteLog::open(&dir) {
            Ok(log) => Arc::new(log),
            Err(cannot_write) => {
                progress.note(&format!("warning: this plan will not be recorded: {cannot_write}"));
                let reads: Arc<dyn History> = match SqliteLog::open_for_reading(&dir) {
                    Ok(log) => Arc::new(log),
                    Err(_) => Arc::new(MemoryLog::new()),
                };
                Arc::new(Unrecorded(reads))
            }
        };
        Ok(State { log, exclusive, _lock: None })
    }
}

/// What a pass did.
pub(super) struct Pass {
    pub exit: Exit,
    pub run_id: String,
    pub drifts: Vec<Drift>,
    /// Whether any resource was applied.
    pub changed: bool,
}

/// SIGINT, SIGTERM and SIGHUP stop running programs (their whole process groups, their
/// containers) and start no new ones, instead of leaving them running without deployster.
fn stop_on_signals(progress: Arc<Progress>) -> Result<Stop, CliError> {
    let stop =
        Stop::on_signals(Cancel::AtOnce).map_err(|e| CliError::Refused(format!("cannot watch for signals: {e}")))?;
    let requested = stop.clone();
    tokio::spawn(async move {
        requested.requested.cancelled().await;
        let signal = requested.signal().unwrap_or("a signal");
        progress.note(&format!("interrupted by {signal}: stopping running programs and starting no new ones"));
    });
    Ok(stop)
}

/// What the log says of a run stopped from outside.
pub(super) fn interruption(stop: &Stop) -> Option<String> {
    stop.now.is_cancelled().then(|| {
        format!(
            "interrupted by {}: running programs were stopped and no new ones started",
            stop.signal().unwrap_or("a stop request")
        )
    })
}

/// The exit code of a plan that cannot be applied: 2 when every failure is the manifest's
/// fault (a config that does not render or match its schema), 1 otherwise.
fn plan_exit(plan: &Plan) -> Exit {
    if plan.is_applicable() {
        return Exit::Ok;
    }
    let invalid_input = plan.entries.iter().all(|e| match &e.planned {
        Planned::Failed(error) => error.is_invalid_input(),
        _ => true,
    });
    if invalid_input { Exit::Invalid } else { Exit::Failed }
}

fn say_drifts(progress: &Progress, drifts: &[Drift]) {
    for d in drifts {
        progress.say(&format!("Drift: {} was VALID at its last observation and is {} now.", d.resource, d.now));
    }
}

/// One pass. `confirm: None` plans only.
pub(super) async fn pass(
    args: &ManifestArgs,
    confirm: Option<ConfirmMode>,
    progress: &Arc<Progress>,
    state: &State,
    executor: Arc<dyn Executor>,
    stop: &Stop,
) -> Result<Pass, CliError> {
    let manifest = Arc::new(load(args)?);
    let run_id = new_run_id();
    let mode = if confirm.is_some() { Mode::Apply } else { Mode::Plan };
    if state.exclusive {
        for recovered in recover(state.log.as_ref(), executor.as_ref(), &run_id).await? {
            progress.note(&format!("note: {}", recovered.describe()));
        }
    }
    let names: Vec<String> = manifest.resources.iter().map(|r| r.name.clone()).collect();
    let recorder = Arc::new(Recorder::new(state.log.clone(), &run_id, &manifest.revision, mode, &names)?);
    recorder.start();
    let mut options =
        RunOptions { verbose: args.verbose, timeout: args.timeout, run_id: run_id.clone(), ..RunOptions::default() };
    if let Some(n) = args.parallelism {
        options.parallelism = usize::from(n);
    }
    let observers = Arc::new(Observers(vec![progress.clone(), recorder.clone()]));
    let prepared = match Engine::new(manifest.clone(), executor, options)
        .with_observer(observers)
        .with_cancellation(stop.now.child_token())
        .prepare()
        .await
    {
        Ok(prepared) => prepared,
        Err(e) => {
            match interruption(stop) {
                Some(why) => recorder.interrupted(&why),
                None => recorder.abort(&e.to_string()),
            }
            return Err(e.into());
        }
    };
    let plan = prepared.plan().await;
    progress.clear();
    recorder.planned(&plan);
    let drifts = recorder.drifts();
    let format = args.output;
    let mut pass = Pass { exit: plan_exit(&plan), run_id, drifts: drifts.clone(), changed: false };
    let finish_without_applying = |status: &str, exit: Exit| {
        if format == OutputFormat::Json {
            render::print_json(&render::document(&plan, None, status, &manifest.revision, &drifts));
        }
        if exit != Exit::Ok {
            render::print_plan_failures(&plan);
        }
        warn_if_unrecorded(progress, &recorder);
        exit
    };
    if format == OutputFormat::Text {
        render::print_plan(&plan);
        say_drifts(progress, &drifts);
    }
    let Some(confirm) = confirm else {
        pass.exit = finish_without_applying("planned", pass.exit);
        return Ok(pass);
    };
    if !plan.is_applicable() {
        match interruption(stop) {
            Some(why) => recorder.interrupted(&why),
            None => recorder.finish(false, Some("the plan has failures")),
        }
        pass.exit = finish_without_applying("failed", pass.exit);
        progress.note("nothing was applied: the plan has failures");
        return Ok(pass);
    }
    if !plan.has_changes() {
        recorder.finish(true, None);
        progress.say(&format!("Nothing to do: all {} resources are VALID.", plan.entries.len()));
        pass.exit = finish_without_applying("unchanged", Exit::Ok);
        return Ok(pass);
    }
    if confirm != ConfirmMode::No && !interactive() {
        recorder.declined("no terminal to confirm on");
        return Err(CliError::Refused(format!(
            "manifest {}: refusing to apply without confirmation: there is no terminal to ask on \
             (--confirm {}); pass --yes (or --confirm no) to apply without asking",
            plan.manifest,
            confirm.name()
        )));
    }
    if confirm == ConfirmMode::Once && !confirm::ask(progress, "Apply these changes?") {
        recorder.declined("declined by the user");
        progress.say("Apply cancelled; nothing was changed.");
        pass.exit = finish_without_applying("declined", Exit::Failed);
        return Ok(pass);
    }
    let approver = confirm::Prompting::new(confirm, progress.clone());
    progress.start_executing(render::name_width(plan.entries.iter().map(|e| e.name.as_str())));
    let report = prepared.apply(&plan, &approver).await?;
    progress.clear();
    let message = (!report.succeeded()).then(|| {
        let c = report.counts();
        format!("{} failed, {} blocked, {} declined or cancelled", c.failed, c.blocked, c.declined)
    });
    match interruption(stop) {
        Some(why) => recorder.interrupted(&why),
        None => recorder.finish(report.succeeded(), message.as_deref()),
    }
    match format {
        OutputFormat::Text => render::print_report(&report),
        OutputFormat::Json => {
            let status = if report.succeeded() { "applied" } else { "failed" };
            render::print_json(&render::document(&plan, Some(&report), status, &manifest.revision, &drifts));
            render::print_report_failures(&report);
        }
    }
    warn_if_unrecorded(progress, &recorder);
    pass.changed = report.counts().applied > 0;
    pass.exit = if report.succeeded() { Exit::Ok } else { Exit::Failed };
    Ok(pass)
}

fn warn_if_unrecorded(progress: &Progress, recorder: &Recorder) {
    if let Some(failure) = recorder.failure() {
        progress.note(&format!("warning: this run is not fully recorded in the deployment log: {failure}"));
    }
}

pub(super) async fn plan(args: ManifestArgs) -> Result<Exit, CliError> {
    let progress = Progress::new(args.output);
    let state = State::open(&args, false, &progress)?;
    let stop = stop_on_signals(progress.clone())?;
    Ok(pass(&args, None, &progress, &state, executor(&args)?, &stop).await?.exit)
}

pub(super) async fn apply(args: ApplyArgs) -> Result<Exit, CliError> {
    let confirm = if args.yes { ConfirmMode::No } else { args.confirm };
    let progress = Progress::new(args.manifest.output);
    let state = State::open(&args.manifest, true, &progress)?;
    let stop = stop_on_signals(progress.clone())?;
    Ok(pass(&args.manifest, Some(confirm), &progress, &state, executor(&args.manifest)?, &stop).await?.exit)
}
