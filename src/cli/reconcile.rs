//! `deployster reconcile`: the continuous loop without Kubernetes. Each pass plans and applies
//! what drifted, recorded in the deployment log; the first SIGINT/SIGTERM stops the loop after
//! the running pass, a second one cancels the running actions cleanly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::apply::{Pass, State, pass};
use super::confirm::ConfirmMode;
use super::progress::Progress;
use super::{CliError, Exit, ReconcileArgs, executor};

/// Stop requests: the first asks the loop to end after the current pass, the second cancels it.
struct Stop {
    requested: AtomicBool,
    wake: Notify,
    cancel: CancellationToken,
}

fn watch_signals(progress: Arc<Progress>) -> Result<Arc<Stop>, CliError> {
    let stop =
        Arc::new(Stop { requested: AtomicBool::new(false), wake: Notify::new(), cancel: CancellationToken::new() });
    let signal_error = |e: std::io::Error| CliError::Refused(format!("cannot watch for signals: {e}"));
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_error)?;
    let handle = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            if handle.requested.swap(true, Ordering::SeqCst) {
                progress.note("stopping now: cancelling the running actions");
                handle.cancel.cancel();
            } else {
                progress.note("stopping after the running pass (signal again to cancel its actions)");
                handle.wake.notify_one();
            }
        }
    });
    Ok(stop)
}

fn summary(n: u64, pass: &Pass) -> String {
    let drift: Vec<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
    let outcome = match (pass.exit, pass.changed) {
        (Exit::Ok, true) => "applied changes",
        (Exit::Ok, false) => "no changes",
        _ => "failed",
    };
    if drift.is_empty() {
        format!("Pass {n} (run {}): no drift; {outcome}.", pass.run_id)
    } else {
        format!("Pass {n} (run {}): drift detected in {}; {outcome}.", pass.run_id, drift.join(", "))
    }
}

pub(super) async fn reconcile(args: ReconcileArgs) -> Result<Exit, CliError> {
    let progress = Progress::new(args.manifest.output);
    let state = State::open(&args.manifest, true, &progress)?;
    let executor = executor(&args.manifest)?;
    let stop = watch_signals(progress.clone())?;
    let mut last = Exit::Ok;
    for n in 1.. {
        let result =
            pass(&args.manifest, Some(ConfirmMode::No), &progress, &state, executor.clone(), stop.cancel.child_token())
                .await;
        match result {
            Ok(p) => {
                progress.say(&summary(n, &p));
                last = p.exit;
            }
            // The manifest may be mid-edit: say so and try again next interval.
            Err(e) => {
                progress.note(&format!("error: pass {n}: {e}"));
                last = e.exit();
            }
        }
        if stop.requested.load(Ordering::SeqCst) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            _ = stop.wake.notified() => break,
        }
    }
    Ok(last)
}
