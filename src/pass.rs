//! A recorded pass over a manifest, shared by every front end (the CLI's `plan`, `apply`,
//! `reconcile`, and the controller).
//!
//! So far: recovery, the first step of every pass that changes things.

use crate::engine::executor::{ExecError, Executor};
use crate::history::recorder::{Interrupted, close_interrupted};
use crate::history::{History, HistoryError, in_progress};

/// A run that never recorded its end, found and dealt with by [`recover`].
#[derive(Debug, Clone)]
pub struct Recovered {
    pub interrupted: Interrupted,
    /// Programs or containers of that run that were still running, and were stopped.
    pub stopped: usize,
}

impl Recovered {
    /// What to tell the user.
    pub fn describe(&self) -> String {
        let run = &self.interrupted.run;
        let mut text = format!(
            "run {} (revision {}, started {}) was interrupted before it recorded its end",
            run.id,
            run.revision,
            crate::history::format_time(run.at)
        );
        if !self.interrupted.actions.is_empty() {
            let intents: Vec<&str> = self.interrupted.actions.iter().map(|a| a.target.as_str()).collect();
            text.push_str(&format!("; it had started {} without recording a result", intents.join(", ")));
        }
        if self.stopped > 0 {
            text.push_str(&format!("; {} of its programs were still running and were stopped", self.stopped));
        }
        text.push_str(". States are read afresh: nothing is repeated blindly.");
        text
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Log(#[from] HistoryError),
    #[error("cannot stop what the interrupted run {run} left running: {source}; nothing was started")]
    Stop { run: String, source: ExecError },
}

impl RecoveryError {
    pub fn reason(&self) -> &'static str {
        match self {
            RecoveryError::Log(e) => e.reason(),
            RecoveryError::Stop { .. } => "RecoveryFailed",
        }
    }
}

/// Before a run that changes things reads any state: each run the log shows as started and
/// never ended is stopped — whatever of it still runs here is killed and waited for, so that
/// no action ever runs twice at once — and only then recorded as interrupted, by `by_run`.
/// Call while no other run can be alive (the CLI holds the state lock; a controller holds the
/// object and its lease).
pub async fn recover(
    log: &dyn History,
    executor: &dyn Executor,
    by_run: &str,
) -> Result<Vec<Recovered>, RecoveryError> {
    let mut stopped = Vec::new();
    for run in in_progress(log, None)? {
        let n =
            executor.stop_run(&run.id).await.map_err(|source| RecoveryError::Stop { run: run.id.clone(), source })?;
        stopped.push((run.id, n));
    }
    Ok(close_interrupted(log, by_run)?
        .into_iter()
        .map(|interrupted| {
            let stopped = stopped.iter().find(|(id, _)| *id == interrupted.run.id).map_or(0, |(_, n)| *n);
            Recovered { interrupted, stopped }
        })
        .collect())
}
