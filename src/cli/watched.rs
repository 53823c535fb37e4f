//! `deployster reconcile`'s watches of the Kubernetes objects its manifest applied, as the
//! controller's: a change someone else makes starts the next pass at once (the changed
//! resource read, the others on their schedule), Deployster's own writes start nothing, and a
//! resource changed back again and again waits longer each time, up to `--interval`.

#[cfg(feature = "kube")]
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
#[cfg(feature = "kube")]
use std::time::Instant;

use crate::pass::Passed;

/// A change the next pass should read: its resource, and how long to wait first.
pub(super) struct ServerChange {
    pub resource: String,
    pub wait: Duration,
}

#[cfg(feature = "kube")]
pub(super) struct Watched {
    kubeconfig: crate::client::Kubeconfig,
    /// Made with the first pass that declares a Kubernetes object, with the kubeconfig's
    /// namespace (where objects without one go).
    watches: Option<(Watches, futures::stream::BoxStream<'static, Woken>, String)>,
    /// Why nothing is watched, once said.
    told: bool,
    /// Resources a change woke, not read yet.
    woken: BTreeSet<String>,
    /// Corrections in a row after a change, and when the last was.
    streaks: HashMap<String, (usize, Instant)>,
    interval: Duration,
}

#[cfg(feature = "kube")]
use crate::watches::{Subject, Watches, Woken, declared};

#[cfg(feature = "kube")]
impl Watched {
    pub(super) fn new(kubeconfig: crate::client::Kubeconfig, interval: Duration) -> Self {
        Watched { kubeconfig, watches: None, told: false, woken: BTreeSet::new(), streaks: HashMap::new(), interval }
    }

    /// Watches what `passed` applied; returns what to say when its objects cannot be watched.
    pub(super) async fn after_pass(&mut self, passed: &Passed) -> Option<String> {
        let entries = passed.report()?.entries();
        self.count_corrections(passed);
        let objects = declared(entries);
        if objects.is_empty() && self.watches.is_none() {
            return None;
        }
        if self.watches.is_none() {
            let config = match self.kubeconfig.load().await {
                Ok(config) => config,
                Err(e) => return self.tell(&e.to_string()),
            };
            let namespace = config.default_namespace.clone();
            let client = match crate::client::connect(config) {
                Ok(client) => client,
                Err(e) => return self.tell(&e.to_string()),
            };
            let watches = Watches::as_user(client);
            let changes = Box::pin(watches.changes());
            self.watches = Some((watches, changes, namespace));
        }
        let (watches, _, namespace) = self.watches.as_ref().expect("made above");
        let subject = Subject {
            owner: crate::builtins::kubernetes::owner_prefix(&passed.manifest.name, false),
            uid: String::new(),
            namespace: namespace.clone(),
            account: None,
        };
        let watching = watches.register_subject(&subject, &objects).await;
        match (watching.newly_refused, watching.refused) {
            (true, Some(why)) => self.tell(&why),
            _ => None,
        }
    }

    fn tell(&mut self, why: &str) -> Option<String> {
        let first = !self.told;
        self.told = true;
        first.then(|| format!("changes to its Kubernetes objects are read on the interval only: {why}"))
    }

    /// Counts the corrections of resources a change woke (a fight, when they go on).
    fn count_corrections(&mut self, passed: &Passed) {
        let quiet = self.interval.saturating_mul(crate::watches::fights::QUIET);
        for drift in &passed.drifts {
            if self.woken.contains(&drift.resource) {
                let streak = self.streaks.entry(drift.resource.clone()).or_insert((0, Instant::now()));
                let corrections = if streak.1.elapsed() > quiet { 1 } else { streak.0 + 1 };
                *streak = (corrections, Instant::now());
            }
        }
        self.woken.clear();
        self.streaks.retain(|_, (_, last)| last.elapsed() <= quiet);
    }

    /// The next change to a watched object (never, while nothing is watched).
    pub(super) async fn next(&mut self) -> ServerChange {
        use futures::StreamExt;
        let Some((_, changes, _)) = &mut self.watches else { return std::future::pending().await };
        let Some(change) = changes.next().await else { return std::future::pending().await };
        let corrections = self.streaks.get(&change.resource).map_or(0, |(n, _)| *n);
        self.woken.insert(change.resource.clone());
        let wait = crate::watches::fights::correction_delay(corrections, self.interval);
        ServerChange { resource: change.resource, wait }
    }

    /// Whether `resource` is being fought over: corrected this many times in a row.
    pub(super) fn corrections(&self, resource: &str) -> usize {
        self.streaks.get(resource).map_or(0, |(n, _)| *n)
    }
}

/// Without Kubernetes, nothing is watched.
#[cfg(not(feature = "kube"))]
pub(super) struct Watched;

#[cfg(not(feature = "kube"))]
impl Watched {
    pub(super) fn new(_: (), _: Duration) -> Self {
        Watched
    }

    pub(super) async fn after_pass(&mut self, _: &Passed) -> Option<String> {
        None
    }

    pub(super) async fn next(&mut self) -> ServerChange {
        std::future::pending().await
    }

    pub(super) fn corrections(&self, _: &str) -> usize {
        0
    }
}
