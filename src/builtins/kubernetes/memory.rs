//! What the type's calls remember between them: what dry runs confirmed, and an object just
//! read or applied, so that the calls of one change read the server once.
//!
//! A pass that finds an object missing or drifted calls `state`, then `apply`, then `state`
//! again. Each would read the object (and `apply` reads it to see whose it is): three GETs and
//! a PATCH where `kubectl apply --server-side` makes the PATCH alone. Instead `apply` takes
//! what the `state` call before it read, and the `state` after takes what the apply returned —
//! the server's own answer. Each is taken once, by that next call only, and only within
//! [`FRESH_FOR`]; any other call goes to the server and drops what was kept (a delete, a
//! wait), so a change made meanwhile (what a watch saw) is never answered from here.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;
use serde_json::Value;

/// How long an object read or applied may stand for the server's answer to the next call.
pub const FRESH_FOR: Duration = Duration::from_secs(2);

/// How many objects' findings (and fresh reads) are remembered.
const KEPT: usize = 4096;

/// Which call a fresh object is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeptFor {
    /// Read by `state`: for the `apply` that follows it.
    Apply,
    /// Returned by `apply`: for the `state` that follows it.
    State,
}

struct Fresh {
    at: Instant,
    for_: KeptFor,
    /// `None`: it does not exist.
    object: Option<Value>,
}

/// What a dry run found: the fields it would change, as said, and the object as it would leave
/// it (planned), when it said.
pub(super) type Confirmed = (Vec<String>, Option<Value>);

pub(super) struct Memory {
    /// The fields a dry run found changed, and the object as it would leave it (planned), by
    /// the object's identity and `resourceVersion` and the digest of what was applied: so a
    /// drift that persists costs no dry run per check.
    pub(super) confirmed: Mutex<LruCache<String, Confirmed>>,
    fresh: Mutex<LruCache<String, Fresh>>,
}

impl Default for Memory {
    fn default() -> Self {
        let kept = NonZeroUsize::new(KEPT).expect("not zero");
        Self { confirmed: Mutex::new(LruCache::new(kept)), fresh: Mutex::new(LruCache::new(kept)) }
    }
}

impl Memory {
    /// Keeps `object` as `key` stands now (`None`: missing), for the call `for_`; drops what
    /// is no longer fresh, so that no more is held than a few seconds' calls.
    pub(super) fn keep(&self, key: &str, for_: KeptFor, object: Option<Value>) {
        let mut fresh = self.fresh.lock().expect("memory lock");
        while fresh.peek_lru().is_some_and(|(_, oldest)| oldest.at.elapsed() > FRESH_FOR) {
            fresh.pop_lru();
        }
        fresh.put(key.to_string(), Fresh { at: Instant::now(), for_, object });
    }

    /// Drops what was kept of `key`: a call read the server afresh, or changed the object.
    pub(super) fn forget(&self, key: &str) {
        self.fresh.lock().expect("memory lock").pop(key);
    }

    /// What `key` was kept as for call `by`, if within [`FRESH_FOR`]; taken, so that it answers
    /// one call. `None`: ask the server.
    pub(super) fn take(&self, key: &str, by: KeptFor) -> Option<Option<Value>> {
        let fresh = self.fresh.lock().expect("memory lock").pop(key)?;
        (fresh.for_ == by && fresh.at.elapsed() <= FRESH_FOR).then_some(fresh.object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fresh_object_answers_the_next_call_it_is_for_once() {
        let memory = Memory::default();
        memory.keep("k", KeptFor::Apply, Some(json!({"a": 1})));
        assert_eq!(memory.take("k", KeptFor::State), None, "kept for an apply, not a state");
        assert_eq!(memory.take("k", KeptFor::Apply), None, "a call it was not for dropped it");
        memory.keep("k", KeptFor::Apply, Some(json!({"a": 1})));
        assert_eq!(memory.take("k", KeptFor::Apply), Some(Some(json!({"a": 1}))));
        memory.keep("k", KeptFor::State, None);
        assert_eq!(memory.take("k", KeptFor::State), Some(None), "missing, as kept");
        assert_eq!(memory.take("k", KeptFor::State), None, "once");
        memory.keep("k", KeptFor::State, Some(json!(1)));
        memory.forget("k");
        assert_eq!(memory.take("k", KeptFor::State), None, "a call between (a delete) read the server");
    }

    #[test]
    fn what_is_older_than_fresh_for_is_asked_again_and_not_held() {
        let memory = Memory::default();
        let age = |key: &str| memory.fresh.lock().unwrap().get_mut(key).unwrap().at -= FRESH_FOR * 2;
        memory.keep("k", KeptFor::State, Some(json!(1)));
        age("k");
        assert_eq!(memory.take("k", KeptFor::State), None);
        memory.keep("old", KeptFor::State, Some(json!(1)));
        age("old");
        memory.keep("new", KeptFor::State, Some(json!(2)));
        assert_eq!(memory.fresh.lock().unwrap().len(), 1, "what went stale was dropped");
    }
}
