//! `deployster reconcile`: the continuous loop without Kubernetes. Each pass plans and applies
//! what drifted, recorded in the deployment log; the first SIGINT/SIGTERM/SIGHUP stops the loop after
//! the running pass, a second one cancels the running actions cleanly.

use std::time::{Duration, SystemTime};

use super::apply::{Saved, State, Summary, pass, stop_on_signals};
use super::confirm::ConfirmMode;
use super::progress::Progress;
use super::{CliError, Exit, ReconcileArgs, executor};
use crate::engine::schedule::Schedule;
use crate::stop::Cancel;

fn summary(n: u64, pass: &Summary, assumed: usize, next: Duration) -> String {
    let drift: Vec<&str> = pass.drifts.iter().map(|d| d.resource.as_str()).collect();
    let outcome = match (pass.exit, pass.changed) {
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
            Ok(p) => {
                let wait = schedule.after_pass(SystemTime::now(), &p.revision, &assumed, p.entries.as_deref());
                let taken = p.entries.iter().flatten().filter(|e| assumed.took(&p.revision, e)).count();
                progress.say(&summary(n, &p, taken, wait));
                last = p.exit;
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
            _ = stop.requested.cancelled() => break,
        }
    }
    Ok(last)
}
