//! What this process wrote: the `resourceVersion` each apply returned, by object, so that a
//! watch tells Deployster's own writes from another writer's exactly.
//!
//! The managed fields cannot tell: their times are to the second, and a write through a
//! subresource (`kubectl scale` on Kubernetes 1.20) records no manager at all, so a scale just
//! after an apply looked like the apply. A `resourceVersion` names one write. An event that
//! comes while an apply of its object is on its way waits for that apply's answer (at most
//! [`PATIENCE`]): the server may tell the watch before it answers the apply.
//!
//! Process-wide, as the writes are: every `builtin/kubernetes` of the process records here,
//! and every watch reads here. Bounded: the newest [`VERSIONS`] writes of the [`OBJECTS`]
//! objects written last.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use lru::LruCache;
use tokio::sync::Notify;

use super::FIELD_MANAGER;

/// How long an event waits for the answer to an apply of its object that is on its way.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How many objects' writes are remembered.
const OBJECTS: usize = 8192;

/// How many of one object's newest writes are remembered (a watch that lags sees several).
const VERSIONS: usize = 4;

/// What is remembered of an object as a write left it or a watch saw it: enough to tell a
/// change, little memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Bumped by the server on a change of the spec (not of the status) for kinds that keep
    /// one; `None` for kinds that do not (ConfigMaps, Secrets, ServiceAccounts).
    generation: Option<i64>,
    /// A digest of the fields Deployster's apply owns (its managed-fields entry): another
    /// writer that changes one of them takes it, so the entry changes; `None`: no such entry.
    owned: Option<u64>,
    resource_version: String,
}

impl Seen {
    /// What `meta` says.
    pub fn of(meta: &ObjectMeta) -> Self {
        let owned = meta.managed_fields.as_deref().unwrap_or_default().iter().find_map(|entry| {
            (entry.manager.as_deref() == Some(FIELD_MANAGER)
                && entry.operation.as_deref() == Some("Apply")
                && entry.subresource.as_deref().unwrap_or_default().is_empty())
            .then(|| {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                entry.fields_v1.as_ref().map(|fields| fields.0.to_string()).hash(&mut hasher);
                hasher.finish()
            })
        });
        Seen {
            generation: meta.generation.filter(|g| *g > 0),
            owned,
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }

    /// Whether `now` differs from this in what Deployster declares: its spec (a new
    /// generation, for kinds with one: a scale through `/scale` on Kubernetes 1.20 records no
    /// manager) or a field its apply owns (taken by the writer that changed it, or removed).
    /// Writes of what it does not declare — a Deployment's status and revision annotation, the
    /// token a ServiceAccount is given on 1.20 — are no change. An object without Deployster's
    /// entry on either side: any write is.
    pub fn changed_to(&self, now: &Seen) -> bool {
        let generation = matches!((self.generation, now.generation), (Some(before), Some(after)) if before != after);
        generation
            || match (self.owned, now.owned) {
                (None, None) => self.resource_version != now.resource_version,
                (before, after) => before != after,
            }
    }
}

/// The writes of this process ([`written`]).
pub struct OwnWrites {
    state: Mutex<WriteBook>,
    /// Told whenever a write ends.
    ended: Notify,
}

#[derive(Debug)]
struct WriteBook {
    versions: LruCache<String, VecDeque<Seen>>,
    /// Writes on their way, by object.
    underway: HashMap<String, usize>,
}

/// One write on its way: [`Writing::wrote`] records its answer; dropping it ends it.
pub struct Writing<'a> {
    written: &'a OwnWrites,
    object: String,
}

/// This process's writes.
pub fn written() -> &'static OwnWrites {
    static WRITTEN: OnceLock<OwnWrites> = OnceLock::new();
    WRITTEN.get_or_init(OwnWrites::default)
}

/// How an object is named here: the same for the apply that writes it and the watch that
/// sees it.
pub fn object_key(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{api_version} {kind} {}/{name}", namespace.unwrap_or_default())
}

impl Default for OwnWrites {
    fn default() -> Self {
        let objects = NonZeroUsize::new(OBJECTS).expect("not zero");
        let state = WriteBook { versions: LruCache::new(objects), underway: HashMap::new() };
        Self { state: Mutex::new(state), ended: Notify::new() }
    }
}

impl OwnWrites {
    /// A write of `object` starts: an event of it waits for its answer.
    pub fn begin(&self, object: &str) -> Writing<'_> {
        *self.state.lock().expect("written lock").underway.entry(object.to_string()).or_default() += 1;
        Writing { written: self, object: object.to_string() }
    }

    /// Whether `version` of `object` is a write of this process. Waits while a write of it is
    /// on its way, for [`PATIENCE`] at most (then: not known to be ours).
    pub async fn by_us(&self, object: &str, version: &str) -> bool {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the check: an end between the two is not missed.
            ended.as_mut().enable();
            {
                let mut state = self.state.lock().expect("written lock");
                if state
                    .versions
                    .get(object)
                    .is_some_and(|versions| versions.iter().any(|v| v.resource_version == version))
                {
                    return true;
                }
                if !state.underway.contains_key(object) {
                    return false;
                }
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return false;
            }
        }
    }

    /// How the newest answered write of `object` left it: what a watch that first sees the
    /// object compares it with, so that a change between the write and the watch's listing
    /// is a change.
    pub fn last(&self, object: &str) -> Option<Seen> {
        self.state.lock().expect("written lock").versions.get(object)?.back().cloned()
    }
}

impl Writing<'_> {
    /// The server's answer: the object is now as `meta` says.
    pub fn wrote(&self, meta: &ObjectMeta) {
        let mut state = self.written.state.lock().expect("written lock");
        let versions = state.versions.get_or_insert_mut(self.object.clone(), VecDeque::new);
        if versions.len() == VERSIONS {
            versions.pop_front();
        }
        versions.push_back(Seen::of(meta));
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut state = self.written.state.lock().expect("written lock");
        if let Some(count) = state.underway.get_mut(&self.object) {
            *count -= 1;
            if *count == 0 {
                state.underway.remove(&self.object);
            }
        }
        drop(state);
        self.written.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: &str) -> ObjectMeta {
        ObjectMeta { resource_version: Some(version.into()), ..Default::default() }
    }

    #[tokio::test]
    async fn a_version_is_ours_only_if_an_apply_of_this_process_answered_it() {
        let written = OwnWrites::default();
        let object = object_key("apps/v1", "Deployment", Some("team"), "web");
        assert!(!written.by_us(&object, "10").await, "nothing written");
        written.begin(&object).wrote(&at("10"));
        assert!(written.by_us(&object, "10").await);
        assert!(!written.by_us(&object, "11").await, "a write after ours (a scale) is another's");
        let other = object_key("apps/v1", "Deployment", Some("other"), "web");
        assert!(!written.by_us(&other, "10").await, "another object's");
        for version in 12..20 {
            written.begin(&object).wrote(&at(&version.to_string()));
        }
        assert!(written.by_us(&object, "19").await);
        assert!(!written.by_us(&object, "10").await, "only the newest are kept");
        assert_eq!(written.last(&object), Some(Seen::of(&at("19"))), "what a first listing compares with");
        assert_eq!(written.last(&other), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_that_comes_before_the_apply_s_answer_waits_for_it() {
        let written: &'static OwnWrites = Box::leak(Box::default());
        let object: &'static str = object_key("v1", "ConfigMap", Some("team"), "settings").leak();
        let writing = written.begin(object);
        let judged = tokio::spawn(written.by_us(object, "7"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!judged.is_finished(), "waits while the apply is on its way");
        writing.wrote(&at("7"));
        drop(writing);
        assert!(judged.await.unwrap(), "the answer came: ours");

        let writing = written.begin(object);
        let judged = tokio::spawn(written.by_us(object, "9"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        writing.wrote(&at("8"));
        drop(writing);
        assert!(!judged.await.unwrap(), "the apply answered another version: the event is another writer's");

        let _stuck = written.begin(object);
        let judged = tokio::spawn(written.by_us(object, "10"));
        tokio::time::sleep(PATIENCE + Duration::from_secs(1)).await;
        assert!(!judged.await.unwrap(), "an apply that never answers is waited for only so long");
    }
}
