//! One watch: the metadata of the labelled objects of one kind in one namespace, as one
//! ServiceAccount, until it is stopped. A restarted watch (the API server restarted, or the
//! watch expired: 410 Gone) lists again, and only what changed meanwhile wakes a Manifest.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ObjectMeta};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use super::VerdictLabels;
use super::judge::{self, Seen, Verdict};
use super::{WatchKey, WatchShared, selector};
use crate::builtins::kubernetes::written::{object_key, written};

/// Failures in a row after which a watch starts again from a listing.
const RESTART_AFTER_FAILURES: u32 = 3;

/// What is kept of each object between events.
struct LastSeen {
    seen: Seen,
    owner: Option<(String, String)>,
}

pub(super) async fn watch(
    api: Api<PartialObjectMeta<DynamicObject>>,
    key: WatchKey,
    shared: Arc<WatchShared>,
    stop: CancellationToken,
) {
    let config = watcher::Config::default().labels(&selector());
    let mut known: HashMap<String, LastSeen> = HashMap::new();
    // The names listed since the watch (re)started, until its listing is done.
    let mut listed: Option<HashSet<String>> = None;
    let tell = |meta: &ObjectMeta, verdict: Verdict| {
        let word = match verdict {
            Verdict::Unchanged => return,
            Verdict::Ours => "ours",
            Verdict::Changed => "changed",
        };
        shared.metrics.events.get_or_create(&VerdictLabels { verdict: word }).inc();
        if verdict == Verdict::Changed {
            shared.wake(&key, meta.name.as_deref().unwrap_or_default(), judge::owner(meta));
        }
    };
    loop {
        // A watch that keeps failing from where it was (a server restarted with its watch cache
        // gone may answer a resumed watch with a bare Status that no retry gets past) starts
        // again from a listing, which tells what changed meanwhile.
        let mut events = Box::pin(watcher(api.clone(), config.clone()).default_backoff());
        let mut failures = 0;
        while failures < RESTART_AFTER_FAILURES {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                event = events.next() => event,
            };
            failures = if matches!(event, Some(Err(_))) { failures + 1 } else { 0 };
            match event {
                None => return,
                Some(Ok(watcher::Event::Init)) => listed = Some(HashSet::new()),
                Some(Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object))) => {
                    let meta = &object.metadata;
                    let name = meta.name.clone().unwrap_or_default();
                    let listing = listed.as_mut().map(|listed| listed.insert(name.clone())).is_some();
                    // First seen: as this process's last write of it left it, if it wrote it
                    // (a change between that write and this listing is a change).
                    let before =
                        known.get(&name).map(|k| k.seen.clone()).or_else(|| written().last(&object_of(&key, meta)));
                    let verdict = if !judge::changed(before.as_ref(), meta, listing) {
                        Verdict::Unchanged
                    } else if by_us(&key, meta).await {
                        Verdict::Ours
                    } else {
                        Verdict::Changed
                    };
                    tell(meta, verdict);
                    known.insert(name, LastSeen { seen: Seen::of(meta), owner: judge::owner(meta) });
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    // What the listing no longer holds was deleted while the watch was down.
                    let Some(listed) = listed.take() else { continue };
                    let gone: Vec<String> = known.keys().filter(|name| !listed.contains(*name)).cloned().collect();
                    for name in gone {
                        let owner = known.remove(&name).and_then(|k| k.owner);
                        shared.metrics.events.get_or_create(&VerdictLabels { verdict: "changed" }).inc();
                        shared.wake(&key, &name, owner);
                    }
                }
                Some(Ok(watcher::Event::Delete(object))) => {
                    let meta = &object.metadata;
                    known.remove(meta.name.as_deref().unwrap_or_default());
                    tell(meta, Verdict::Changed);
                }
                Some(Err(e)) => {
                    tracing::warn!(watch = ?key, error = %e, "a watch of managed objects failed; retrying with backoff");
                }
            }
        }
        listed = None;
        tracing::info!(watch = ?key, "a watch of managed objects failed {RESTART_AFTER_FAILURES} times in a row: listing again");
    }
}

/// Whether `meta` is as an apply of this process left it: its `resourceVersion` is one an
/// apply returned ([`written`]).
async fn by_us(key: &WatchKey, meta: &ObjectMeta) -> bool {
    let Some(version) = meta.resource_version.as_deref() else { return false };
    written().by_us(&object_of(key, meta), version).await
}

/// How [`written`] names the object of `meta`.
fn object_of(key: &WatchKey, meta: &ObjectMeta) -> String {
    object_key(&key.api_version, &key.kind, meta.namespace.as_deref(), meta.name.as_deref().unwrap_or_default())
}
