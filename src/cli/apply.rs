//! Passes over a manifest — `plan`, `apply`, and each pass of `reconcile` — recorded in the
//! deployment log.

use std::path::PathBuf;
use std::sync::Arc;

use super::confirm::{ConfirmMode, Prompting};
use super::progress::ProgressView;
use super::render;
use super::{ApplyArgs, CliError, DestroyArgs, ExitKind, ManifestArgs, OutputFormat, PlanArgs, Session, load};
use crate::engine::context::RunOptions;
use crate::engine::executor::Executor;
use crate::engine::manifest::parent_dir;
use crate::engine::mask::FingerprintKey;
use crate::engine::plan::{Plan, Report, Standing};
use crate::engine::saved::SavedPlan;
use crate::engine::schedule::AssumeValid;
use crate::history::store::{SqliteLog, StateLock};
use crate::history::{History, MemoryLog, Unrecorded};
use crate::pass::{Ended, Inventory, Mode, Pass, Passed};
use crate::stop::{Cancel, Stop};

/// The state directory: `--state-dir`, else `.deployster` beside the (first) manifest.
pub(super) fn state_dir(files: &[PathBuf], explicit: Option<&std::path::Path>) -> PathBuf {
    match explicit {
        Some(dir) => dir.to_path_buf(),
        None => parent_dir(files.first().map_or(std::path::Path::new("manifest.yaml"), PathBuf::as_path))
            .join(".deployster"),
    }
}

/// The file in a state directory that holds the key of its log's fingerprints of sensitive
/// values: never in the log itself.
pub(super) const FINGERPRINT_KEY_FILE: &str = "fingerprint.key";

/// The deployment log, locked when the caller changes things.
pub(super) struct State {
    pub log: Arc<dyn History>,
    /// Fingerprints the log's sensitive values (`fingerprint.key` in the state directory).
    pub key: Option<FingerprintKey>,
    exclusive: bool,
    _lock: Option<StateLock>,
}

impl State {
    /// Opens the state directory; `exclusive` takes its lock (apply, reconcile) — a plan only
    /// reads and appends, so it may run beside them. A plan in a directory it cannot write
    /// still plans, reading what the log holds (drift needs it), and says it is not recorded.
    pub(super) fn open(args: &ManifestArgs, exclusive: bool, progress: &ProgressView) -> Result<State, CliError> {
        let dir = args.state.dir(&args.files);
        if let Some(workspace) = args.state.named_workspace() {
            progress.note(&format!("workspace {workspace}: deployment log {}", dir.display()));
        }
        let key = || FingerprintKey::load_or_create(&dir.join(FINGERPRINT_KEY_FILE));
        if exclusive {
            let lock = StateLock::acquire(&dir)?;
            let log = Arc::new(SqliteLog::open(&dir)?);
            let key = key().map_err(|e| {
                CliError::Refused(format!("cannot read or make {}: {e}", dir.join(FINGERPRINT_KEY_FILE).display()))
            })?;
            return Ok(State { log, key: Some(key), exclusive, _lock: Some(lock) });
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
        // A plan that cannot make the key compares no sensitive values by field.
        Ok(State { log, key: key().ok(), exclusive, _lock: None })
    }
}

/// SIGINT, SIGTERM and SIGHUP stop running programs (their whole process groups, their
/// containers) and start no new ones, instead of leaving them running without deployster: at
/// once, or (`reconcile`) on a second signal, the running pass finishing after the first.
pub(super) fn stop_on_signals(progress: Arc<ProgressView>, cancel: Cancel) -> Result<Stop, CliError> {
    let stop = Stop::on_signals(cancel).map_err(|e| CliError::Refused(format!("cannot watch for signals: {e}")))?;
    let notes = stop.clone();
    tokio::spawn(async move {
        notes.requested.cancelled().await;
        let signal = notes.signal().unwrap_or("a signal");
        if cancel == Cancel::AtOnce {
            return progress
                .note(&format!("interrupted by {signal}: stopping running programs and starting no new ones"));
        }
        progress.note(&format!("{signal}: stopping after the running pass (signal again to cancel its actions)"));
        notes.now.cancelled().await;
        progress.note("stopping now: cancelling the running actions");
    });
    Ok(stop)
}

/// The exit code of a plan that cannot be applied: 2 when every failure is the manifest's
/// fault (a config that does not render or match its schema), 1 otherwise.
fn plan_exit(plan: &Plan) -> ExitKind {
    if plan.is_applicable() {
        return ExitKind::Ok;
    }
    let invalid_input = plan.entries.iter().all(|e| match &e.standing {
        Standing::Failed(error) => error.is_invalid_input(),
        _ => true,
    });
    if invalid_input { ExitKind::Invalid } else { ExitKind::Failed }
}

/// What a pass does with saved plans, and whether it destroys.
#[derive(Default)]
pub(super) struct Saved {
    /// `plan --out`: where to write the plan.
    pub out: Option<PathBuf>,
    /// `apply PLAN`: the plan to apply.
    pub expected: Option<SavedPlan>,
    /// `destroy`, `plan --destroy`: everything the manifest declares or its inventory holds
    /// is deleted (planned, for a plan).
    pub destroy: bool,
    /// `apply --allow-deletes N`.
    pub allow_deletes: Option<usize>,
    /// `--replace R`: resources deleted and created again.
    pub replace: Vec<String>,
}

/// One pass: `confirm: None` plans only. Returns its exit code and what it did.
#[allow(clippy::too_many_arguments)]
pub(super) async fn pass(
    args: &ManifestArgs,
    confirm: Option<ConfirmMode>,
    saved: Saved,
    progress: &Arc<ProgressView>,
    state: &State,
    executor: Arc<dyn Executor>,
    stop: &Stop,
    assume_valid: AssumeValid,
) -> Result<(ExitKind, Passed), CliError> {
    let manifest = Arc::new(load(args)?);
    if let Some(key) = &state.key {
        manifest.mask.use_fingerprint_key(key.clone());
    }
    let replace = match &saved.expected {
        Some(plan) => plan.replace.clone(),
        None => saved.replace.clone(),
    };
    if let Some(name) = replace.iter().find(|name| manifest.index_of(name).is_none()) {
        let names = manifest.resources.iter().map(|r| r.name.as_str());
        let meant =
            crate::engine::suggest::closest(name, names).map(|m| format!(" (did you mean `{m}`?)")).unwrap_or_default();
        return Err(CliError::Refused(format!(
            "--replace {name}: manifest {} has no resource `{name}`{meant}",
            manifest.name
        )));
    }
    let mut options = RunOptions {
        verbose: args.verbose,
        timeouts: args.timeouts.timeouts(),
        assume_valid,
        replace,
        ..RunOptions::default()
    };
    if let Some(n) = args.parallelism {
        options.parallelism = usize::from(n);
    }
    let approver = Prompting::new(confirm.unwrap_or(ConfirmMode::No), progress.clone(), saved.allow_deletes);
    let why = || {
        let signal = stop.signal().unwrap_or("a stop request");
        format!("interrupted by {signal}: running programs were stopped and no new ones started")
    };
    let passed = Pass {
        manifest: manifest.clone(),
        executor,
        log: state.log.clone(),
        mode: match (confirm.is_some(), saved.destroy) {
            (false, _) => Mode::Plan,
            (true, false) => Mode::Apply,
            (true, true) => Mode::Delete,
        },
        options,
        observers: vec![progress.clone()],
        approver: &approver,
        cancel: stop.now.child_token(),
        cancelled_because: &why,
        recover: state.exclusive,
        expected: saved.expected,
        // A person took their time at the prompt: the states are read again before acting.
        recheck: confirm.is_some_and(|c| c != ConfirmMode::No),
        inventory: if saved.destroy { Inventory::Destroy } else { Inventory::Keep },
    }
    .run()
    .await?;
    progress.clear();
    if let (Some(out), Ended::Planned(plan)) = (&saved.out, &passed.ended) {
        let saved = SavedPlan::new(plan, &manifest, &args.var_sources)
            .replacing(&saved.replace)
            .with_parts(&manifest)
            .in_workspace(args.state.named_workspace());
        save_plan(out, &saved, progress)?;
    }
    let mut exit = show(args.output, progress, &passed)?;
    let empty = |plan: &Plan| plan.entries.is_empty() && plan.removals.is_empty();
    let nothing_held = match &passed.ended {
        Ended::Deleted { plan, .. } | Ended::Planned(plan) => saved.destroy && empty(plan),
        _ => false,
    };
    if nothing_held {
        // A copy of the manifest in another directory has a deployment log of its own.
        let dir = args.state.dir(&args.files);
        progress.note(&format!(
            "the inventory read is the deployment log in {}; a manifest applied from another directory is \
             recorded beside it there (--state-dir names it)",
            dir.display()
        ));
    }
    match (&passed.unrecorded, confirm) {
        // What an apply did must be in the log: one whose end could not be recorded is not a
        // success, whatever it applied (the next run will find it unfinished).
        (Some(failure), Some(_)) => {
            errln!(
                "error: manifest {}: this run is not fully recorded in the deployment log, so the next run will \
                 report it as interrupted: {failure}",
                manifest.name
            );
            exit = ExitKind::Failed;
        }
        (Some(failure), None) => {
            progress.note(&format!("warning: this plan is not fully recorded in the deployment log: {failure}"))
        }
        (None, _) => {}
    }
    Ok((exit, passed))
}

/// Writes a plan file (whole or not at all). A plan that cannot be applied is not saved.
fn save_plan(out: &std::path::Path, plan: &SavedPlan, progress: &ProgressView) -> Result<(), CliError> {
    if plan.resources.iter().any(|r| matches!(r.status.as_str(), "FAILED" | "BLOCKED")) {
        progress.note(&format!("the plan has failures: not saved to {}", out.display()));
        return Ok(());
    }
    let refuse = |e: std::io::Error| CliError::Refused(format!("cannot save the plan to {}: {e}", out.display()));
    let partial = parent_dir(out).join(format!(".deployster-plan-{}.tmp", std::process::id()));
    let written = std::fs::write(&partial, plan.to_json()).and_then(|()| std::fs::rename(&partial, out));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(refuse(e));
    }
    progress.note(&format!(
        "Plan saved to {}: review it, then apply exactly it with `deployster apply {}`.",
        out.display(),
        out.display()
    ));
    Ok(())
}

/// Shows how the pass ended (the plan itself was shown as it was made), and its exit code.
fn show(format: OutputFormat, progress: &ProgressView, passed: &Passed) -> Result<ExitKind, CliError> {
    let json = |plan: &Plan, report: Option<&Report>, status: &str| {
        if format == OutputFormat::Json {
            render::print_json(&render::document(plan, report, status, passed));
        }
    };
    Ok(match &passed.ended {
        Ended::NotPrepared(e) => return Err(CliError::Prepare(e.clone())),
        Ended::Refused { why, .. } => return Err(CliError::Refused(why.clone())),
        Ended::PlanChanged { plan, differences } => {
            json(plan, None, "plan-changed");
            errln!("error: manifest {}: the plan no longer holds; nothing was applied:", plan.manifest);
            for d in differences {
                errln!("  - {d}");
            }
            ExitKind::Failed
        }
        Ended::Planned(plan) => {
            json(plan, None, "planned");
            if !plan.is_applicable() {
                render::print_failures(&plan.manifest, &plan.entries);
            }
            plan_exit(plan)
        }
        Ended::NotApplicable(plan) => {
            json(plan, None, if passed.interrupted.is_some() { "interrupted" } else { "failed" });
            render::print_failures(&plan.manifest, &plan.entries);
            progress.note(match passed.interrupted {
                Some(_) => "nothing was applied: interrupted while planning",
                None => "nothing was applied: the plan has failures",
            });
            plan_exit(plan)
        }
        Ended::Applied { plan, .. } if !plan.has_changes() => {
            progress.say(&match plan.entries.len() {
                1 => "Nothing to do: its one resource is VALID.".to_string(),
                n => format!("Nothing to do: all {n} resources are VALID."),
            });
            json(plan, None, "unchanged");
            ExitKind::Ok
        }
        Ended::Declined { plan, .. } => {
            progress.say("Apply cancelled; nothing was changed.");
            json(plan, None, "declined");
            ExitKind::Failed
        }
        Ended::Applied { plan, report, removed } => {
            if let (OutputFormat::Text, Some(removed)) = (format, removed) {
                render::print_deleted(removed, "Removal");
            }
            let removed_ok = removed.as_ref().is_none_or(|r| r.succeeded());
            match format {
                OutputFormat::Text => render::print_report(report, passed.interrupted.is_some()),
                OutputFormat::Json => {
                    let verdict = match (report.succeeded(), passed.interrupted.is_some()) {
                        (true, _) => "applied",
                        (false, true) => "interrupted",
                        (false, false) => "failed",
                    };
                    json(plan, Some(report), verdict);
                    render::print_failures(report.manifest(), report.entries());
                }
            }
            ExitKind::of(report.succeeded() && removed_ok && !matches!(passed.outputs, Some(Err(_))))
        }
        Ended::Deleted { plan, report } => {
            match format {
                OutputFormat::Text => render::print_deleted(report, "Destroy"),
                OutputFormat::Json => json(plan, None, if report.succeeded() { "destroyed" } else { "failed" }),
            }
            ExitKind::of(report.succeeded())
        }
    })
}

pub(super) async fn plan(args: PlanArgs, session: &Session) -> Result<ExitKind, CliError> {
    let planned = planned(&args, session).await;
    if !args.detailed_exitcode {
        return Ok(planned?.0);
    }
    // Terraform's `-detailed-exitcode`: 0 nothing to do, 2 changes pending, 1 any error.
    Ok(match planned {
        Ok((ExitKind::Ok, passed)) => match &passed.ended {
            Ended::Planned(plan) if plan.has_changes() => ExitKind::ChangesPending,
            _ => ExitKind::Ok,
        },
        Ok(_) => ExitKind::Failed,
        Err(error) => {
            errln!("error: {error}");
            ExitKind::Failed
        }
    })
}

/// The plan `args` ask for, and how the command would exit without `--detailed-exitcode`.
async fn planned(args: &PlanArgs, session: &Session) -> Result<(ExitKind, Passed), CliError> {
    let manifest = &args.manifest;
    let progress = ProgressView::new(manifest.output);
    let state = State::open(manifest, false, &progress)?;
    let stop = stop_on_signals(progress.clone(), Cancel::AtOnce)?;
    if args.destroy && args.out.is_some() {
        return Err(CliError::Refused("plan --destroy --out: a destroy is not saved; run `deployster destroy`".into()));
    }
    let saved =
        Saved { out: args.out.clone(), destroy: args.destroy, replace: args.replace.clone(), ..Saved::default() };
    let executor = session.executor(&manifest.images, None).await?;
    pass(manifest, None, saved, &progress, &state, executor, &stop, Default::default()).await
}

pub(super) async fn apply(mut args: ApplyArgs, session: &Session) -> Result<ExitKind, CliError> {
    let mut confirm = if args.yes { ConfirmMode::No } else { args.confirm };
    let expected = match &args.plan {
        Some(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Refused(format!("plan file {shown}: cannot read it: {e}")))?;
            let saved = SavedPlan::parse(&text, &shown).map_err(|e| match serde_json::from_str::<serde_json::Value>(&text) {
                // Not JSON at all: most likely a manifest, given where a plan goes.
                Err(_) => CliError::Refused(format!(
                    "{e}\n  hint: `deployster apply FILE` applies a plan saved by `plan --out`; to apply a manifest, \
                     name it with -f: deployster apply -f {shown}"
                )),
                Ok(_) => e.into(),
            })?;
            if !args.manifest.files_given {
                args.manifest.files = saved.files.clone();
            }
            args.manifest.var_sources = saved.var_sources(&args.manifest.var_sources, &shown)?;
            // The plan's workspace, whose log it read; another one given is refused.
            match (args.manifest.state.named_workspace(), saved.workspace.as_deref()) {
                (None, Some(planned)) if args.manifest.state.workspace.is_none() => {
                    args.manifest.state.workspace = Some(planned.to_string())
                }
                (given, planned) if given != planned => {
                    return Err(CliError::Refused(format!(
                        "plan file {shown}: it was made in workspace {}, not {}: apply it there",
                        planned.unwrap_or("default"),
                        given.unwrap_or("default")
                    )));
                }
                _ => {}
            }
            // The plan was reviewed when it was saved: applying it is the approval.
            confirm = ConfirmMode::No;
            Some(saved)
        }
        None => None,
    };
    let manifest = &args.manifest;
    let progress = ProgressView::new(manifest.output);
    let state = State::open(manifest, true, &progress)?;
    let stop = stop_on_signals(progress.clone(), Cancel::AtOnce)?;
    let saved =
        Saved { expected, allow_deletes: args.allow_deletes, replace: args.replace.clone(), ..Saved::default() };
    let executor = session.executor(&manifest.images, None).await?;
    Ok(pass(manifest, Some(confirm), saved, &progress, &state, executor, &stop, Default::default()).await?.0)
}

/// `destroy`: everything the manifest declares or its inventory holds, deleted dependents
/// first, once shown and confirmed.
pub(super) async fn destroy(args: DestroyArgs, session: &Session) -> Result<ExitKind, CliError> {
    let manifest = &args.manifest;
    let confirm = if args.yes { ConfirmMode::No } else { ConfirmMode::Once };
    let progress = ProgressView::new(manifest.output);
    let state = State::open(manifest, true, &progress)?;
    let stop = stop_on_signals(progress.clone(), Cancel::AtOnce)?;
    let saved = Saved { destroy: true, ..Saved::default() };
    let executor = session.executor(&manifest.images, None).await?;
    Ok(pass(manifest, Some(confirm), saved, &progress, &state, executor, &stop, Default::default()).await?.0)
}
