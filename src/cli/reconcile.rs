//! `deployster reconcile`: the continuous loop without Kubernetes. Each pass plans and applies
//! what drifted, recorded in the deployment log; the first SIGINT/SIGTERM/SIGHUP stops the loop after
//! the running pass, a second one cancels the running actions cleanly.

use super::apply::{Saved, State, Summary, pass, stop_on_signals};
use super::confirm::ConfirmMode;
use super::progress::Progress;
use super::{CliError, Exit, ReconcileArgs, executor};
use crate::stop::Cancel;

fn summary(n: u64, pass: &Summary) -> String {
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
    let stop = stop_on_signals(progress.clone(), Cancel::OnSecondSignal)?;
    let mut last = Exit::Ok;
    for n in 1.. {
        let saved = Saved::default();
        let result =
            pass(&args.manifest, Some(ConfirmMode::No), saved, &progress, &state, executor.clone(), &stop).await;
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
        if stop.requested.is_cancelled() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            _ = stop.requested.cancelled() => break,
        }
    }
    Ok(last)
}
