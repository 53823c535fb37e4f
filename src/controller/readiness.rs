//! Whether the controller can do its job, as `/readyz` tells: what the watches and the API
//! client (through the request meter, [`super::metrics::ApiMeteringLayer`]) report.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Whether the controller can do its job: each watch has listed its Manifests once, and the
/// last request to the API server got an answer.
pub struct Readiness {
    synced: Vec<AtomicBool>,
    /// `UNKNOWN` until the first answer (start-up failures are errors, not flips), then
    /// `REACHABLE` or `UNREACHABLE`.
    api: AtomicU8,
}

const UNKNOWN: u8 = 0;
const REACHABLE: u8 = 1;
const UNREACHABLE: u8 = 2;

impl Readiness {
    /// For `watches` watch caches.
    pub fn new(watches: usize) -> Self {
        Self { synced: (0..watches).map(|_| AtomicBool::new(false)).collect(), api: AtomicU8::new(UNKNOWN) }
    }

    pub fn synced(&self, watch: usize) {
        if !self.synced[watch].swap(true, Ordering::SeqCst) {
            tracing::info!(watch, "watch cache synced");
        }
    }

    /// Records whether a request reached the API server; says so in the log when it flips.
    pub fn api_answered(&self, answered: bool, error: impl FnOnce() -> String) {
        let was = self.api.swap(if answered { REACHABLE } else { UNREACHABLE }, Ordering::SeqCst);
        match (was, answered) {
            (REACHABLE, false) => tracing::warn!(
                error = %error(),
                "the Kubernetes API server is unreachable: not ready; the watches and the lease retry with backoff"
            ),
            (UNREACHABLE, true) => tracing::info!("the Kubernetes API server answers again"),
            _ => {}
        }
    }

    /// Why the controller is not ready, or `None` when it is.
    pub fn problem(&self) -> Option<&'static str> {
        if !self.synced.iter().all(|s| s.load(Ordering::SeqCst)) {
            Some("the watch caches have not synced yet")
        } else if self.api.load(Ordering::SeqCst) == UNREACHABLE {
            Some("the Kubernetes API server is unreachable")
        } else {
            None
        }
    }
}
