//! The objects a reflected watch applied, each only once the store it feeds holds it.
//!
//! A watch (re)lists: `Init`, the objects one by one (`InitApply`), then `InitDone`, where the
//! reflector swaps the new list into its store. Passing each listed object on as it comes (as
//! `applied_objects` does) lets the controller ask for one its store does not hold yet: kube's
//! runner then reports "not found in local store" and drops the request, and an object
//! created while the API server was away (seen after an outage on a real one) waits for its
//! next change. Here the listed objects are passed on at `InitDone`, after the swap.
//!
//! And the controllers' own backoff on those watches: none ([`NoPause`]).

use std::time::Duration;

use futures::{Stream, StreamExt, future, stream};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{Error, Event};

/// The backoff of a controller's triggers: none. Each watch that feeds a controller retries with
/// a backoff of its own; kube's default here (up to 30 s, reset after 2 min without an error)
/// pauses every trigger of the controller on any watch's error — so after an API server
/// restart, while the watches of Manifests and of inputs failed and retried, a change to a
/// managed object (a wake), an approval or a Manifest's edit waited up to 30 s.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPause;

impl Iterator for NoPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoPause {
    fn reset(&mut self) {}
}

/// The objects `events` (downstream of the store's `reflect`) applied: each change as it
/// comes, a list's objects once the list is whole in the store.
pub fn applied_once_stored<K: Send + 'static>(
    events: impl Stream<Item = Result<Event<K>, Error>> + Send + 'static,
) -> impl Stream<Item = Result<K, Error>> + Send + 'static {
    events
        .scan(Vec::new(), |listed: &mut Vec<K>, event| {
            let out: Vec<Result<K, Error>> = match event {
                Ok(Event::Apply(object)) => vec![Ok(object)],
                Ok(Event::Delete(_)) => Vec::new(),
                Ok(Event::Init) => {
                    listed.clear();
                    Vec::new()
                }
                Ok(Event::InitApply(object)) => {
                    listed.push(object);
                    Vec::new()
                }
                Ok(Event::InitDone) => std::mem::take(listed).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            future::ready(Some(stream::iter(out)))
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_list_s_objects_come_once_it_is_whole_and_changes_as_they_come() {
        let events = stream::iter([
            Ok(Event::Init),
            Ok(Event::InitApply("before")),
            Ok(Event::InitApply("after")),
            Ok(Event::InitDone),
            Ok(Event::Apply("edited")),
            Ok(Event::Delete("gone")),
            Ok(Event::Init),
            Ok(Event::InitApply("relisted")),
        ]);
        let seen: Vec<_> = applied_once_stored(events).map(Result::unwrap).collect().await;
        assert_eq!(seen, ["before", "after", "edited"], "a list cut short gives nothing of itself");
    }

    /// As kube's controller wraps its triggers: errors of one watch hold back nothing.
    #[tokio::test(start_paused = true)]
    async fn errors_of_a_trigger_pause_no_trigger() {
        use kube::runtime::utils::StreamBackoff;
        let failing = || stream::iter((0..8).map(|_| Err(Error::NoResourceVersion)).chain([Ok("woken")]));
        let started = tokio::time::Instant::now();
        let seen: Vec<_> = StreamBackoff::new(failing(), NoPause).filter_map(|r| future::ready(r.ok())).collect().await;
        assert_eq!((seen, started.elapsed()), (vec!["woken"], Duration::ZERO));
        // kube's default, for contrast: the same errors hold the wake back for a minute and more.
        let started = tokio::time::Instant::now();
        let default = kube::runtime::watcher::DefaultBackoff::default();
        let _: Vec<_> = StreamBackoff::new(failing(), default).collect().await;
        assert!(started.elapsed() > Duration::from_secs(60), "{:?}", started.elapsed());
    }
}
