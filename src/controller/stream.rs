//! The objects a reflected watch applied, each only once the store it feeds holds it.
//!
//! A watch (re)lists: `Init`, the objects one by one (`InitApply`), then `InitDone`, where the
//! reflector swaps the new list into its store. Passing each listed object on as it comes (as
//! `applied_objects` does) lets the controller ask for one its store does not hold yet: kube's
//! runner then reports "not found in local store" and drops the request, and an object
//! created while the API server was away (seen after an outage on a real one) waits for its
//! next change. Here the listed objects are passed on at `InitDone`, after the swap.

use futures::{Stream, StreamExt, future, stream};
use kube::runtime::watcher::{Error, Event};

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
}
