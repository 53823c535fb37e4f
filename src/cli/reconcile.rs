//! `deployster reconcile`: the continuous loop without Kubernetes. Each pass plans and applies
//! what drifted, recorded in the deployment log; an edit of the manifest, its variable files or
//! its plugs' files starts a pass at once; the first SIGINT/SIGTERM/SIGHUP stops the loop after the running pass,
//! a second one cancels the running actions cleanly.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::apply::{Saved, State, pass, stop_on_signals};
use super::confirm::ConfirmMode;
use super::progress::ProgressView;
use super::watched::Watched;
use super::{CliError, ExitKind, ManifestArgs, ReconcileArgs, Session};
use crate::engine::manifest::parent_dir;
use crate::engine::plan::Report;
use crate::engine::schedule::Schedule;
use crate::engine::vars::{VarSource, auto_var_files};
use crate::pass::Passed;
use crate::stop::Cancel;

/// How often the manifest's files are looked at between passes.
const EDITS_POLL: Duration = Duration::from_secs(1);

/// Files looked at, each with its modification time and size (`None`: missing).
type Fingerprint = Vec<(PathBuf, Option<(SystemTime, u64)>)>;

/// Entries of one plug directory looked at, at most: a larger tree is watched in part.
const PLUG_ENTRIES: usize = 10_000;

/// The files a pass reads the manifest from (`-f`, `--var-file`, the auto var files beside each
/// manifest), each with its modification time and size — `None` when it is missing. Any
/// difference, a file added or removed included, is an edit.
fn edits_fingerprint(args: &ManifestArgs) -> Fingerprint {
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

/// The plugs' files (a plug is a file or a directory tree), as [`edits_fingerprint`] has them.
fn plugs_fingerprint(plugs: &[PathBuf]) -> Fingerprint {
    fn look(path: &std::path::Path, into: &mut Fingerprint, budget: &mut usize) {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let metadata = std::fs::symlink_metadata(path).ok();
        into.push((path.to_path_buf(), metadata.as_ref().and_then(|m| Some((m.modified().ok()?, m.len())))));
        if metadata.is_some_and(|m| m.is_dir())
            && let Ok(entries) = std::fs::read_dir(path)
        {
            let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            children.sort();
            children.iter().for_each(|child| look(child, into, budget));
        }
    }
    let mut found = Vec::new();
    for plug in plugs {
        look(plug, &mut found, &mut PLUG_ENTRIES.clone());
    }
    found
}

/// What changed between passes.
enum Edit {
    Manifest,
    Plug,
}

/// Returns once the manifest's files or its plugs' differ from what was seen.
async fn edited(args: &ManifestArgs, seen: &Fingerprint, plugs: &[PathBuf], plugs_seen: &Fingerprint) -> Edit {
    loop {
        tokio::time::sleep(EDITS_POLL).await;
        if edits_fingerprint(args) != *seen {
            return Edit::Manifest;
        }
        if plugs_fingerprint(plugs) != *plugs_seen {
            return Edit::Plug;
        }
    }
}

fn summary(n: u64, exit: ExitKind, pass: &Passed, assumed: usize, next: Duration) -> String {
    let drift: Vec<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
    let outcome = match (exit, pass.report().is_some_and(|r| r.counts().applied > 0)) {
        (ExitKind::Ok, true) => "applied changes",
        (ExitKind::Ok, false) => "no changes",
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

pub(super) async fn reconcile(args: ReconcileArgs, session: &Session) -> Result<ExitKind, CliError> {
    let max_interval = args.max_interval.unwrap_or(args.interval.saturating_mul(4));
    if max_interval < args.interval {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        return Err(CliError::Refused(format!(
            "--max-interval {} must not be shorter than --interval {}",
            show(max_interval),
            show(args.interval)
        )));
    }
    let progress = ProgressView::new(args.manifest.output);
    let state = State::open(&args.manifest, true, &progress)?;
    let executor = session.executor(&args.manifest.images, Some(args.budget.per_second())).await?;
    let stop = stop_on_signals(progress.clone(), Cancel::OnSecondSignal)?;
    let mut schedule = Schedule::new(args.interval, max_interval);
    #[cfg(feature = "kube")]
    let kubeconfig = crate::client::Kubeconfig {
        file: args.manifest.images.pods.kubeconfig.clone(),
        context: args.manifest.images.pods.context.clone(),
    };
    #[cfg(not(feature = "kube"))]
    let kubeconfig = ();
    let mut watched = Watched::new(kubeconfig, args.interval);
    let mut last = ExitKind::Ok;
    // The plugs of the manifest as last loaded (their files are watched like the manifest's).
    let mut plugs: Vec<PathBuf> = Vec::new();
    for n in 1.. {
        let saved = Saved::default();
        // Taken before the pass reads them: an edit made while it runs starts the next one.
        let seen = edits_fingerprint(&args.manifest);
        let mut plugs_seen = plugs_fingerprint(&plugs);
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
                let loaded: Vec<PathBuf> = p.manifest.plugs.values().map(|plug| plug.path.clone()).collect();
                if loaded != plugs {
                    plugs = loaded;
                    plugs_seen = plugs_fingerprint(&plugs);
                }
                let (revision, entries) = (&p.manifest.revision, p.report().map(Report::entries));
                let wait = schedule.after_pass(SystemTime::now(), revision, &assumed, entries);
                let taken = entries.into_iter().flatten().filter(|e| assumed.took(revision, e)).count();
                progress.say(&summary(n, exit, &p, taken, wait));
                if let Some(note) = watched.after_pass(&p).await {
                    progress.note(&note);
                }
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
            edit = edited(&args.manifest, &seen, &plugs, &plugs_seen) => match edit {
                Edit::Manifest => progress.say("The manifest changed: passing now."),
                Edit::Plug => {
                    // Nothing in a config says what a plug holds: every state is read afresh.
                    schedule = Schedule::new(args.interval, max_interval);
                    progress.say("A plug's files changed: passing now, reading every state afresh.");
                }
            },
            change = watched.next() => {
                schedule.forget(&change.resource);
                if change.wait.is_zero() {
                    progress.say(&format!("`{}` was changed on the server: passing now.", change.resource));
                } else {
                    progress.say(&format!(
                        "`{}` was changed on the server again, after {} corrections in a row: something else keeps \
                         changing it (stop declaring what it changes, or `ignore:` those fields); passing in {}.",
                        change.resource,
                        watched.corrections(&change.resource),
                        humantime::format_duration(change.wait)
                    ));
                    tokio::select! {
                        _ = tokio::time::sleep(change.wait) => {}
                        _ = stop.requested.cancelled() => break,
                    }
                }
            },
            _ = stop.requested.cancelled() => break,
        }
    }
    Ok(last)
}
