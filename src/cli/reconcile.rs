//! `deployster reconcile`: the continuous loop without Kubernetes. Each pass plans and applies
//! what drifted, recorded in the deployment log; an edit of the manifest or its variable files
//! starts a pass at once; the first SIGINT/SIGTERM/SIGHUP stops the loop after the running pass,
//! a second one cancels the running actions cleanly.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::apply::{Saved, State, pass, stop_on_signals};
use super::confirm::ConfirmMode;
use super::progress::Progress;
use super::{CliError, Exit, ManifestArgs, ReconcileArgs, executor};
use crate::engine::manifest::parent_dir;
use crate::engine::plan::Report;
use crate::engine::schedule::Schedule;
use crate::engine::vars::{VarSource, auto_var_files};
use crate::pass::Passed;
use crate::stop::Cancel;

/// How often the manifest's files are looked at between passes.
const EDITS_POLL: Duration = Duration::from_secs(1);

/// The files a pass reads the manifest from (`-f`, `--var-file`, the auto var files beside each
/// manifest), each with its modification time and size — `None` when it is missing. Any
/// difference, a file added or removed included, is an edit.
fn edits_fingerprint(args: &ManifestArgs) -> Vec<(PathBuf, Option<(SystemTime, u64)>)> {
    let mut files = args.files.clone();
    files.extend(args.var_sources.iter().filter_map(|s| match s {
        VarSource::File(path) => Some(path.clone()),
        _ => None,
    }));
    let mut dirs: Vec<PathBuf> = args.files.iter().map(|f| parent_dir(f)).collect();
    dirs.sort();
    dirs.dedup();
    files.extend(dirs.iter().flat_map(|dir| auto_var_files(dir)));
    files
        .into_iter()
        .map(|path| {
            let seen = std::fs::metadata(&path).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
            (path, seen)
        })
        .collect()
}

/// Returns once the manifest's files differ from `seen`.
async fn edited(args: &ManifestArgs, seen: &[(PathBuf, Option<(SystemTime, u64)>)]) {
    loop {
        tokio::time::sleep(EDITS_POLL).await;
        if edits_fingerprint(args) != seen {
            return;
        }
    }
}

fn summary(n: u64, exit: Exit, pass: &Passed, assumed: usize, next: Duration) -> String {
    let drift: Vec<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
    let outcome = match (exit, pass.report().is_some_and(|r| r.counts().applied > 0)) {
        (Exit::Ok, true) => "applied changes",
        (Exit::Ok, false) => "no changes",
        _ => "failed",
    };
    let found =
        if drift.is_empty() { "no drift".to_string() } else { format!("drift detected in {}", drift.join(", ")) };
    let checked = match assumed {
        0 => String::new(),
        n => format!(" ({n} not due for a check)"),
    };
    let next = humantime::format_duration(Duration::from_secs(next.as_secs().max(1)));
    format!("Pass {n} (run {}): {found}{checked}; {outcome}. Next pass in {next}.", pass.run_id)
}

pub(super) async fn reconcile(args: ReconcileArgs) -> Result<Exit, CliError> {
    let max_interval = args.max_interval.unwrap_or(args.interval.saturating_mul(4));
    if max_interval < args.interval {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        return Err(CliError::Refused(format!(
            "--max-interval {} must not be shorter than --interval {}",
            show(max_interval),
            show(args.interval)
        )));
    }
    let progress = Progress::new(args.manifest.output);
    let state = State::open(&args.manifest, true, &progress)?;
    let executor = args.budget.wrap(executor(&args.manifest)?);
    let stop = stop_on_signals(progress.clone(), Cancel::OnSecondSignal)?;
    let mut schedule = Schedule::new(args.interval, max_interval);
    let mut last = Exit::Ok;
    for n in 1.. {
        let saved = Saved::default();
        // Taken before the pass reads them: an edit made while it runs starts the next one.
        let seen = edits_fingerprint(&args.manifest);
        let assumed = schedule.not_due(SystemTime::now());
        let result = pass(
            &args.manifest,
            Some(ConfirmMode::No),
            saved,
            &progress,
            &state,
            executor.clone(),
            &stop,
            assumed.clone(),
        )
        .await;
        let wait = match result {
            Ok((exit, p)) => {
                let (revision, entries) = (&p.manifest.revision, p.report().map(Report::entries));
                let wait = schedule.after_pass(SystemTime::now(), revision, &assumed, entries);
                let taken = entries.into_iter().flatten().filter(|e| assumed.took(revision, e)).count();
                progress.say(&summary(n, exit, &p, taken, wait));
                last = exit;
                wait
            }
            // The manifest may be mid-edit: say so and try again next interval.
            Err(e) => {
                progress.note(&format!("error: pass {n}: {e}"));
                last = e.exit();
                args.interval
            }
        };
        if stop.requested.is_cancelled() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = edited(&args.manifest, &seen) => progress.say("The manifest changed: passing now."),
            _ = stop.requested.cancelled() => break,
        }
    }
    Ok(last)
}
