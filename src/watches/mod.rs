//! Watches of the objects Manifests apply: a change made by someone else starts the Manifest's
//! pass at once, instead of at its next interval.
//!
//! - **Whose rights.** A watch is a read, done as the Manifest's ServiceAccount (by
//!   impersonation, as its passes act): creating a Manifest grants nothing. A watch the server
//!   refuses (403: the account may not `list`/`watch` that kind) is not retried for
//!   [`RETRY_REFUSED`]; its Manifests fall back to their interval, and are told once.
//! - **Cost.** Metadata only, of objects labelled [`MANAGED_LABEL`]; one watch per
//!   (ServiceAccount, namespace, kind), shared by every Manifest that needs it, started with
//!   the first and stopped with the last.
//! - **Which pass.** An event names its Manifest and resource by the object's owner annotation
//!   ([`judge::owner`]); one that no registered Manifest declares (another's, or left over)
//!   wakes nothing. Deployster's own writes wake nothing: an event is its own write when its
//!   `resourceVersion` is one an apply of this process returned
//!   ([`crate::builtins::kubernetes::written`]).
//!
//! [`Watches::register`] is called after each pass that applied, with what it declared;
//! [`Watches::forget`] when a Manifest goes (or goes to another replica).

pub mod declared;
pub mod fights;
pub mod judge;
mod task;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::discovery::Scope;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::builtins::kubernetes::MANAGED_LABEL;
use crate::crd::Manifest;
pub use declared::{Declared, declared};

/// How long a refused watch is not asked for again.
pub const RETRY_REFUSED: Duration = Duration::from_secs(300);

/// How long the first listing that checks a new watch's rights may take before the watch is
/// started anyway (it then retries with backoff on its own).
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Whose objects: what their owner annotation starts with (`namespace/name` of a Manifest,
/// the file name of a CLI manifest).
type ManifestKey = String;

/// Who watches, for whom: a Manifest as its ServiceAccount, or the CLI's manifest as its user.
#[derive(Debug, Clone)]
pub struct Subject {
    /// What its objects' owner annotation starts with ([`ManifestKey`]).
    pub owner: String,
    pub uid: String,
    /// Where its objects without a namespace go.
    pub namespace: String,
    /// The ServiceAccount (of `namespace`) it acts as; none: the watches' own client's user.
    pub account: Option<String>,
}

impl Subject {
    /// A Manifest, acting as its ServiceAccount (else its namespace's `default`).
    pub fn manifest(obj: &Manifest) -> Self {
        let namespace = obj.namespace().unwrap_or_default();
        Subject {
            owner: format!("{namespace}/{}", obj.name_any()),
            uid: obj.uid().unwrap_or_default(),
            account: Some(obj.spec.service_account_name.clone().unwrap_or_else(|| "default".into())),
            namespace,
        }
    }
}

/// What one watch covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchKey {
    /// The ServiceAccount it acts as: `namespace/name`.
    pub identity: String,
    /// None: a kind that is not namespaced.
    pub namespace: Option<String>,
    pub api_version: String,
    pub kind: String,
}

impl WatchKey {
    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} in namespace {ns}", self.kind),
            None => self.kind.clone(),
        }
    }
}

/// A change to a managed object, for its Manifest's pass.
#[derive(Debug, Clone)]
pub struct Woken {
    /// Its [`Subject::owner`].
    pub owner: String,
    pub uid: String,
    pub resource: String,
    /// When the watch saw it.
    pub seen: Instant,
}

/// What [`Watches::register`] found for a Manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watching {
    /// Why some of its objects are not watched (their changes are read on the interval).
    pub refused: Option<String>,
    /// Whether that is news to this Manifest (tell it once).
    pub newly_refused: bool,
}

struct Watch {
    users: BTreeSet<ManifestKey>,
    /// Running: stops it. None: refused.
    stop: Option<CancellationToken>,
    /// Why the server refused it, and when.
    refused: Option<(String, Instant)>,
}

struct Registration {
    uid: String,
    /// (watch, object name, resource).
    objects: BTreeSet<(WatchKey, String, String)>,
    refused_told: bool,
}

#[derive(Default)]
struct WatchBook {
    watches: HashMap<WatchKey, Watch>,
    manifests: HashMap<ManifestKey, Registration>,
    clients: HashMap<String, kube::Client>,
    kinds: HashMap<GroupVersionKind, (ApiResource, Scope)>,
}

/// What the watch tasks share with the registry.
struct WatchShared {
    state: Mutex<WatchBook>,
    woken: broadcast::Sender<Woken>,
    metrics: WatchMetrics,
}

/// The watches' figures: how many are open, and what their events were judged.
#[derive(Debug, Clone, Default)]
pub struct WatchMetrics {
    pub open: Gauge,
    pub events: Family<VerdictLabels, Counter>,
}

/// A watch event's verdict, as a metric label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: &'static str,
}

/// The registry of watches (see the module's documentation).
#[derive(Clone)]
pub struct Watches {
    /// The configuration clients acting as a ServiceAccount are made from.
    config: Option<kube::Config>,
    /// The client of subjects that act as their user (the CLI's). Neither: nothing is watched
    /// (a context without a cluster).
    user: Option<kube::Client>,
    shared: Arc<WatchShared>,
}

impl Woken {
    /// The Manifest (namespace, name) it is for, when its owner is one.
    pub fn manifest(&self) -> Option<(&str, &str)> {
        self.owner.split_once('/')
    }
}

impl Default for Watches {
    fn default() -> Self {
        Self::disabled()
    }
}

impl Watches {
    /// Watches acting as each Manifest's ServiceAccount, by impersonation from `config`.
    pub fn new(config: kube::Config, metrics: WatchMetrics) -> Self {
        let mut watches = Self::disabled();
        watches.config = Some(config);
        Arc::get_mut(&mut watches.shared).expect("not shared yet").metrics = metrics;
        watches
    }

    /// Watches nothing.
    pub fn disabled() -> Self {
        let (woken, _) = broadcast::channel(4096);
        let shared = WatchShared { state: Mutex::default(), woken, metrics: WatchMetrics::default() };
        Self { config: None, user: None, shared: Arc::new(shared) }
    }

    /// Watches acting as the user of `client` (the CLI's kubeconfig).
    pub fn as_user(client: kube::Client) -> Self {
        Self { user: Some(client), ..Self::disabled() }
    }

    /// The changes that wake Manifests, as they come.
    pub fn changes(&self) -> impl Stream<Item = Woken> + Send + use<> {
        use broadcast::error::RecvError;
        futures::stream::unfold(self.shared.woken.subscribe(), |mut woken| async move {
            loop {
                match woken.recv().await {
                    Ok(change) => return Some((change, woken)),
                    // Missed: their Manifests are read on their interval.
                    Err(RecvError::Lagged(n)) => tracing::warn!(missed = n, "changes to managed objects were missed"),
                    Err(RecvError::Closed) => return None,
                }
            }
        })
    }

    /// Watches what `obj`'s pass declared (and no longer what it does not), as its
    /// ServiceAccount.
    pub async fn register(&self, obj: &Manifest, objects: &[Declared]) -> Watching {
        self.register_subject(&Subject::manifest(obj), objects).await
    }

    /// Watches what `subject` declared (and no longer what it does not), as it acts.
    pub async fn register_subject(&self, subject: &Subject, objects: &[Declared]) -> Watching {
        let namespace = subject.namespace.clone();
        let (client, identity) = match (&subject.account, &self.config, &self.user) {
            (Some(account), Some(config), _) => {
                let identity = format!("{namespace}/{account}");
                match self.client(config, &namespace, account, &identity) {
                    Ok(client) => (client, identity),
                    Err(why) => return self.refused_all(subject, why),
                }
            }
            (_, _, Some(user)) => (user.clone(), "user".to_string()),
            _ => return Watching::default(),
        };
        let mut wanted = BTreeSet::new();
        let mut served = HashMap::new();
        for object in objects {
            let Some((resource, scope)) = self.kind(&client, &object.api_version, &object.kind).await else { continue };
            let key = WatchKey {
                identity: identity.clone(),
                namespace: match scope {
                    Scope::Namespaced => Some(object.namespace.clone().unwrap_or_else(|| namespace.clone())),
                    Scope::Cluster => None,
                },
                api_version: object.api_version.clone(),
                kind: object.kind.clone(),
            };
            wanted.insert((key.clone(), object.name.clone(), object.resource.clone()));
            served.insert(key, resource);
        }
        let to_start: Vec<(WatchKey, ApiResource)> = {
            let state = self.shared.state.lock().expect("watches lock");
            served
                .into_iter()
                .filter(|(key, _)| match state.watches.get(key) {
                    None => true,
                    Some(watch) => watch.refused.as_ref().is_some_and(|(_, at)| at.elapsed() >= RETRY_REFUSED),
                })
                .collect()
        };
        let (mut checked, mut apis) = (Vec::new(), HashMap::new());
        for (key, resource) in to_start {
            let api = api(&client, &key, &resource);
            checked.push((key.clone(), self.check(&api, &key).await));
            apis.insert(key, api);
        }
        let (watching, launch) = self.settle(subject, wanted, checked);
        // Started once `subject` is registered, so that what their first listing finds changed
        // wakes it (a watch started before could list before the registration: no one woken).
        for (key, stop) in launch {
            let Some(api) = apis.remove(&key) else { continue };
            tokio::spawn(task::watch(api, key, self.shared.clone(), stop));
        }
        watching
    }

    /// Takes in the watches checked for `subject` and what it declares now; returns the
    /// watches to start now that it is registered.
    fn settle(
        &self,
        subject: &Subject,
        objects: BTreeSet<(WatchKey, String, String)>,
        checked: Vec<(WatchKey, Watch)>,
    ) -> (Watching, Vec<(WatchKey, CancellationToken)>) {
        let manifest = subject.owner.clone();
        let mut state = self.shared.state.lock().expect("watches lock");
        let mut launch = Vec::new();
        for (key, watch) in checked {
            let stop = watch.stop.clone();
            match state.watches.get_mut(&key) {
                // Another registration started it meanwhile.
                Some(running) if running.stop.is_some() => {
                    if let Some(stop) = stop {
                        stop.cancel();
                    }
                    continue;
                }
                Some(refused) => {
                    refused.stop = watch.stop;
                    refused.refused = watch.refused;
                }
                None => {
                    state.watches.insert(key.clone(), watch);
                }
            }
            if let Some(stop) = stop {
                launch.push((key, stop));
            }
        }
        let keys: BTreeSet<WatchKey> = objects.iter().map(|(key, ..)| key.clone()).collect();
        let before = state.manifests.remove(&manifest);
        let refused_told = before.as_ref().is_some_and(|r| r.refused_told);
        if let Some(before) = before {
            let dropped: BTreeSet<WatchKey> =
                before.objects.into_iter().map(|(key, ..)| key).filter(|key| !keys.contains(key)).collect();
            release(&mut state, &manifest, dropped);
        }
        let mut refused = Vec::new();
        for key in &keys {
            // Stopped since it was found running (its last other user went): the next
            // registration starts it again.
            let Some(watch) = state.watches.get_mut(key) else { continue };
            watch.users.insert(manifest.clone());
            if let Some((why, _)) = &watch.refused {
                refused.push(format!("{}: {why}", key.describe()));
            }
        }
        let refused = (!refused.is_empty()).then(|| refused.join("; "));
        let newly_refused = refused.is_some() && !refused_told;
        let registration = Registration { uid: subject.uid.clone(), objects, refused_told: refused.is_some() };
        state.manifests.insert(manifest, registration);
        self.count(&state);
        (Watching { refused, newly_refused }, launch)
    }

    /// A Manifest none of whose objects can be watched (its ServiceAccount's client failed).
    fn refused_all(&self, subject: &Subject, why: String) -> Watching {
        let manifest = subject.owner.clone();
        let mut state = self.shared.state.lock().expect("watches lock");
        let told = state.manifests.get(&manifest).is_some_and(|r| r.refused_told);
        self.forget_locked(&mut state, &manifest);
        let registration = Registration { uid: subject.uid.clone(), objects: BTreeSet::new(), refused_told: true };
        state.manifests.insert(manifest, registration);
        Watching { refused: Some(why), newly_refused: !told }
    }

    /// Why `obj`'s objects are not watched, as its last registration found (a pass that did
    /// not apply keeps what the last one registered).
    pub fn refused(&self, obj: &Manifest) -> Option<String> {
        let manifest = Subject::manifest(obj).owner;
        let state = self.shared.state.lock().expect("watches lock");
        let registration = state.manifests.get(&manifest)?;
        let keys: BTreeSet<&WatchKey> = registration.objects.iter().map(|(key, ..)| key).collect();
        let refused: Vec<String> = keys
            .into_iter()
            .filter_map(|key| Some(format!("{}: {}", key.describe(), state.watches.get(key)?.refused.as_ref()?.0)))
            .collect();
        (!refused.is_empty()).then(|| refused.join("; "))
    }

    /// Stops watching for Manifest `namespace/name` (deleted, or another replica's now).
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut state = self.shared.state.lock().expect("watches lock");
        self.forget_locked(&mut state, &format!("{namespace}/{name}"));
    }

    fn forget_locked(&self, state: &mut WatchBook, manifest: &ManifestKey) {
        if let Some(registration) = state.manifests.remove(manifest) {
            let keys = registration.objects.into_iter().map(|(key, ..)| key).collect();
            release(state, manifest, keys);
            self.count(state);
        }
    }

    fn count(&self, state: &WatchBook) {
        self.shared.metrics.open.set(state.watches.values().filter(|w| w.stop.is_some()).count() as i64);
    }

    /// The client acting as ServiceAccount `identity`, made once.
    fn client(
        &self,
        config: &kube::Config,
        namespace: &str,
        account: &str,
        identity: &str,
    ) -> Result<kube::Client, String> {
        let mut state = self.shared.state.lock().expect("watches lock");
        if let Some(client) = state.clients.get(identity) {
            return Ok(client.clone());
        }
        let client = crate::client::connect(crate::client::acting_as(config, namespace, account))
            .map_err(|e| format!("acting as ServiceAccount {identity}: {e}"))?;
        state.clients.insert(identity.to_string(), client.clone());
        Ok(client)
    }

    /// Where the server serves a kind, and its scope: asked once per kind.
    async fn kind(&self, client: &kube::Client, api_version: &str, kind: &str) -> Option<(ApiResource, Scope)> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        if let Some(found) = self.shared.state.lock().expect("watches lock").kinds.get(&gvk) {
            return Some(found.clone());
        }
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, capabilities)) => {
                let found = (resource, capabilities.scope);
                self.shared.state.lock().expect("watches lock").kinds.insert(gvk, found.clone());
                Some(found)
            }
            Err(e) => {
                tracing::debug!(%api_version, %kind, error = %e, "a kind to watch was not found");
                None
            }
        }
    }

    /// The watch of `key`, to be started ([`Self::settle`]) unless the server refuses its
    /// listing (403).
    async fn check(&self, api: &Api<PartialObjectMeta<DynamicObject>>, key: &WatchKey) -> Watch {
        let params = ListParams::default().labels(&selector()).limit(1);
        match tokio::time::timeout(CHECK_TIMEOUT, api.list(&params)).await {
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                tracing::info!(watch = ?key, message = %status.message, "a watch of managed objects is refused: their changes are read on the interval");
                return Watch { users: BTreeSet::new(), stop: None, refused: Some((status.message, Instant::now())) };
            }
            _ => {}
        }
        Watch { users: BTreeSet::new(), stop: Some(CancellationToken::new()), refused: None }
    }
}

/// `deployster.io/managed=true`.
fn selector() -> String {
    format!("{MANAGED_LABEL}=true")
}

/// An `Api` of `PartialObjectMeta` asks for metadata only.
fn api(client: &kube::Client, key: &WatchKey, resource: &ApiResource) -> Api<PartialObjectMeta<DynamicObject>> {
    match &key.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Takes `manifest` off the users of `keys`; a watch none uses any more stops.
fn release(state: &mut WatchBook, manifest: &ManifestKey, keys: BTreeSet<WatchKey>) {
    for key in keys {
        let Some(watch) = state.watches.get_mut(&key) else { continue };
        watch.users.remove(manifest);
        if watch.users.is_empty() {
            if let Some(stop) = &watch.stop {
                stop.cancel();
            }
            state.watches.remove(&key);
        }
    }
}

impl WatchShared {
    /// Wakes the Manifest an object's owner annotation names, if it declares the object.
    fn wake(&self, key: &WatchKey, object: &str, owner: Option<(String, String)>) {
        let Some((owner, resource)) = owner else { return };
        let uid = {
            let state = self.state.lock().expect("watches lock");
            let Some(registration) = state.manifests.get(&owner) else { return };
            if !registration.objects.contains(&(key.clone(), object.to_string(), resource.clone())) {
                return;
            }
            registration.uid.clone()
        };
        // None listening (no controller running) is fine.
        let _ = self.woken.send(Woken { owner, uid, resource, seen: Instant::now() });
    }
}

#[cfg(test)]
mod tests;
