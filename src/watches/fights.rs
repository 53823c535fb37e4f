//! A resource another writer keeps changing back: corrected at once a few times in a row, then
//! after a growing wait, so that Deployster and the other writer do not take turns as fast as
//! the API server lets them. The controller and `deployster reconcile` wait alike.

use std::time::Duration;

/// Intervals without a correction after which a resource's streak starts again.
pub const QUIET: u32 = 2;

/// Corrections in a row made at once; after them each waits longer.
pub const FREE_CORRECTIONS: usize = 3;

/// The wait before the first correction past [`FREE_CORRECTIONS`], doubled for each after it,
/// up to the Manifest's interval.
pub const FIRST_WAIT: Duration = Duration::from_secs(10);

/// How long to wait before correcting a resource corrected `corrections` times in a row: at
/// once at first, then growing, never longer than `interval`.
pub fn correction_delay(corrections: usize, interval: Duration) -> Duration {
    match corrections.checked_sub(FREE_CORRECTIONS) {
        None => Duration::ZERO,
        Some(past) => FIRST_WAIT.saturating_mul(1 << past.min(16)).min(interval),
    }
}
