//! Requests to stop from outside — SIGINT (Ctrl-C), SIGTERM (`kill`, `timeout`, a CI job's
//! cancellation, Kubernetes), SIGHUP (a closed terminal or SSH session) — handled alike by
//! every command, so that no signal kills deployster with programs still running.
//!
//! The first signal asks to stop: start nothing new. Running work is then cancelled — its
//! programs' process groups stopped, its containers removed — right away, after a grace
//! period, or on a second signal, as the command chooses.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// When running work is cancelled after the first signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// At once (`plan`, `apply`).
    AtOnce,
    /// After this long, or on a second signal (the controller: running passes may finish).
    After(Duration),
    /// Only on a second signal (`reconcile`: the running pass may finish).
    OnSecondSignal,
}

/// The state of stop requests.
#[derive(Clone)]
pub struct Stop {
    /// Cancelled on the first signal: start nothing new.
    pub requested: CancellationToken,
    /// Cancelled when running work must stop (see [`Cancel`]).
    pub now: CancellationToken,
    first: Arc<OnceLock<&'static str>>,
}

impl Stop {
    /// Watches SIGINT, SIGTERM and SIGHUP from now on.
    pub fn on_signals(cancel: Cancel) -> std::io::Result<Stop> {
        let stop = Stop::never();
        let kinds = [
            (SignalKind::interrupt(), "SIGINT"),
            (SignalKind::terminate(), "SIGTERM"),
            (SignalKind::hangup(), "SIGHUP"),
        ];
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (kind, name) in kinds {
            let mut stream = signal(kind)?;
            let tx = tx.clone();
            tokio::spawn(async move { while stream.recv().await.is_some() && tx.send(name).is_ok() {} });
        }
        let handle = stop.clone();
        tokio::spawn(async move {
            let Some(name) = rx.recv().await else { return };
            let _ = handle.first.set(name);
            handle.requested.cancel();
            match cancel {
                Cancel::AtOnce => {}
                Cancel::After(grace) => {
                    let _ = tokio::time::timeout(grace, rx.recv()).await;
                }
                Cancel::OnSecondSignal => {
                    rx.recv().await;
                }
            }
            handle.now.cancel();
        });
        Ok(stop)
    }

    /// Stop requests that never come (tests, library use).
    pub fn never() -> Stop {
        Stop { requested: CancellationToken::new(), now: CancellationToken::new(), first: Arc::default() }
    }

    /// The first signal received, if any.
    pub fn signal(&self) -> Option<&'static str> {
        self.first.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{Signal, raise};

    /// One test for all: signals are process-wide.
    #[tokio::test]
    async fn the_first_signal_asks_and_the_second_cancels() {
        let stop = Stop::on_signals(Cancel::OnSecondSignal).unwrap();
        let at_once = Stop::on_signals(Cancel::AtOnce).unwrap();
        assert!(!stop.requested.is_cancelled() && stop.signal().is_none());
        raise(Signal::SIGHUP).unwrap();
        tokio::time::timeout(Duration::from_secs(5), stop.requested.cancelled()).await.expect("asked to stop");
        tokio::time::timeout(Duration::from_secs(5), at_once.now.cancelled()).await.expect("cancelled at once");
        assert_eq!(stop.signal(), Some("SIGHUP"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!stop.now.is_cancelled(), "running work goes on until a second signal");
        raise(Signal::SIGTERM).unwrap();
        tokio::time::timeout(Duration::from_secs(5), stop.now.cancelled()).await.expect("cancelled");
        assert_eq!(stop.signal(), Some("SIGHUP"), "the first signal is the one told");
    }
}
