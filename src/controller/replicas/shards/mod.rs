//! Sharding: of several replicas, each reconciles a disjoint share of the objects, and an
//! object's share moves to another replica only after the old one stopped working on it.
//!
//! Replicas coordinate only through `coordination.k8s.io/v1` Leases of one *group* (labelled
//! [`GROUP_LABEL`]): a **member** Lease per replica, renewed like a leader's, and a **shard**
//! Lease per shard, naming its holder and written only when a shard moves. An object's shard is
//! a fixed hash of `namespace/name` ([`assign::shard_of`]). Every write of a shard Lease is a
//! replace guarded by the resourceVersion it was read at, so of two replicas taking one shard,
//! one wins. What to take and hand over is decided by [`assign::decide`], a pure function.
//!
//! Never two at once:
//! - a replica hands a shard over by *releasing* its Lease (no holder), and only after the
//!   passes it ran on the shard ended (finished, or cancelled once `shutdownGrace` passed);
//! - a replica that cannot renew its membership for two thirds of a lease duration stops every
//!   pass on its shards, and another takes them only after the member Lease went unchanged for a
//!   whole lease duration by *its own* clock (never by comparing timestamps: clocks may be skewed);
//! - every status write is fenced by the shard's Lease read afresh ([`Shards::confirm`]).

pub mod assign;
mod campaign;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, Client};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::fence::FenceError;
use crate::controller::metrics::Metrics;
pub use campaign::Membership;

/// The label every Lease of a group carries; its value is the group's name (`--lease-name`).
pub const GROUP_LABEL: &str = "deployster.io/shard-group";
/// `member` or `shard`.
pub const ROLE_LABEL: &str = "deployster.io/shard-role";
/// The settings a member or a shard's holder runs with ([`ShardSettings::fingerprint`]).
pub const SETTINGS_ANNOTATION: &str = "deployster.io/shard-settings";

/// How this replica takes part in its group.
#[derive(Debug, Clone)]
pub struct ShardSettings {
    /// Shards in the group: objects are spread over this many.
    pub count: u32,
    /// The group's name: its Leases are `<group>-member-<id>` and `<group>-shard-<n>`.
    pub group: String,
    /// Where the Leases live.
    pub namespace: String,
    pub duration: Duration,
    /// The namespaces watched (all when empty): replicas that watch different ones must not
    /// share objects.
    pub watched: Vec<String>,
    /// Unique per process: `<hostname>_<random>`.
    pub identity: String,
    /// The replica's own Pod: its member Lease goes with it. (Shard Leases are owned by no Pod:
    /// they must outlive a holder's Pod until another takes them.)
    pub owner: Option<OwnerReference>,
}

impl ShardSettings {
    /// What two replicas of one group must agree on.
    pub fn fingerprint(&self) -> String {
        let watched = if self.watched.is_empty() { "*".to_string() } else { self.watched.join(",") };
        format!("shards={},lease={}s,namespaces={watched}", self.count, self.duration.as_secs())
    }

    pub fn member_lease(&self) -> String {
        let id: String = self.identity.rsplit('_').next().unwrap_or_default().chars().take(16).collect();
        format!("{}-member-{}", self.group, id.to_ascii_lowercase())
    }

    pub fn shard_lease(&self, index: u32) -> String {
        format!("{}-shard-{index}", self.group)
    }

    /// A member that has not renewed for this long stops its passes.
    pub fn renew_deadline(&self) -> Duration {
        self.duration.mul_f64(2.0 / 3.0)
    }

    /// Time between readings of the group.
    pub fn retry_period(&self) -> Duration {
        (self.duration / 7).max(Duration::from_millis(100))
    }
}

/// What status writes say of the object's reconciler (`status.shard`).
pub use crate::crd::ShardStatus;

/// Passes running on one shard, so that its hand-over can wait for them.
#[derive(Default)]
struct Running {
    count: AtomicUsize,
    idle: Notify,
}

impl Running {
    async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// A pass allowed to run: its term is cancelled when the shard goes; while it lives, the shard
/// is not handed over.
pub struct PassTicket {
    pub term: CancellationToken,
    running: Option<Arc<Running>>,
}

impl PassTicket {
    /// Under leader election (or none): the term alone.
    pub fn of_term(term: CancellationToken) -> Self {
        Self { term, running: None }
    }
}

impl Drop for PassTicket {
    fn drop(&mut self) {
        if let Some(running) = &self.running
            && running.count.fetch_sub(1, Ordering::SeqCst) == 1
        {
            running.idle.notify_waiters();
        }
    }
}

/// A shard this replica holds.
struct Held {
    term: CancellationToken,
    /// Being handed over: no new pass starts.
    draining: bool,
    running: Arc<Running>,
}

/// This replica's shards: which it holds, the passes running on each, the fence.
pub struct Shards {
    settings: ShardSettings,
    api: Api<Lease>,
    held: Mutex<BTreeMap<u32, Held>>,
    gained: broadcast::Sender<u32>,
    metrics: Arc<Metrics>,
}

impl Shards {
    fn new(client: Client, settings: ShardSettings, metrics: Arc<Metrics>) -> Self {
        let api = Api::namespaced(client, &settings.namespace);
        Self { settings, api, held: Mutex::default(), gained: broadcast::channel(1024).0, metrics }
    }

    /// Shards of `settings` of which this replica holds `held` already, as after a campaign:
    /// for tests of what the fence does to writes.
    #[cfg(test)]
    pub(crate) fn holding(client: Client, settings: ShardSettings, held: &[u32]) -> Arc<Self> {
        let shards = Arc::new(Self::new(client, settings, Arc::new(Metrics::new())));
        for &shard in held {
            shards.hold(shard, CancellationToken::new());
        }
        shards
    }

    pub fn settings(&self) -> &ShardSettings {
        &self.settings
    }

    pub fn shard_of(&self, namespace: &str, name: &str) -> u32 {
        assign::shard_of(namespace, name, self.settings.count)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Held>> {
        self.held.lock().expect("the shard map is never poisoned")
    }

    /// A pass on `namespace/name` may start: its shard is held here and not being handed over.
    pub fn begin(&self, namespace: &str, name: &str) -> Option<PassTicket> {
        let shard = self.shard_of(namespace, name);
        let held = self.held();
        let Held { term, draining: false, running } = held.get(&shard)? else { return None };
        if term.is_cancelled() {
            return None;
        }
        running.count.fetch_add(1, Ordering::SeqCst);
        Some(PassTicket { term: term.clone(), running: Some(running.clone()) })
    }

    /// Whether the shard of `namespace/name` is held here, working or not.
    pub fn holds(&self, namespace: &str, name: &str) -> bool {
        self.held().contains_key(&self.shard_of(namespace, name))
    }

    /// Whether this replica reconciles `namespace/name` now (to count what it owns).
    pub fn owns(&self, namespace: &str, name: &str) -> bool {
        let shard = self.shard_of(namespace, name);
        self.held().get(&shard).is_some_and(|h| !h.draining && !h.term.is_cancelled())
    }

    /// Whether a write decided for `namespace/name` may still be made: its shard is held here
    /// and its Lease, read afresh, still names this replica. A Lease that names another stops
    /// the shard's passes at once.
    pub async fn confirm(&self, namespace: &str, name: &str) -> Result<ShardStatus, FenceError> {
        let shard = self.shard_of(namespace, name);
        let lease_name = self.settings.shard_lease(shard);
        if self.held().get(&shard).is_none_or(|h| h.term.is_cancelled()) {
            return Err(FenceError::NotOwner(format!("shard {shard} ({lease_name}) is no longer this replica's")));
        }
        let lease = self.api.get_opt(&lease_name).await?;
        let holder = lease.and_then(|l| l.spec?.holder_identity).unwrap_or_default();
        if holder == self.settings.identity {
            return Ok(self.status_of(shard));
        }
        let holder = if holder.is_empty() { "nobody".to_string() } else { holder };
        self.drop_shard(shard, &format!("its Lease {lease_name} is now held by {holder}"));
        Err(FenceError::NotOwner(format!("shard {shard}'s Lease {lease_name} is now held by {holder}")))
    }

    pub fn status_of(&self, shard: u32) -> ShardStatus {
        ShardStatus { replica: self.settings.identity.clone(), index: Some(shard), count: Some(self.settings.count) }
    }

    /// Stops the shard's passes at once and forgets it (its Lease is another's, or unreachable).
    fn drop_shard(&self, shard: u32, why: &str) {
        if let Some(held) = self.held().remove(&shard) {
            tracing::warn!(shard, reason = why, "lost a shard: cancelling its passes");
            held.term.cancel();
        }
        self.count_owned();
    }

    /// Forgets a shard whose passes have ended and whose Lease was released.
    fn drop_shard_quietly(&self, shard: u32) {
        if let Some(held) = self.held().remove(&shard) {
            held.term.cancel();
        }
        self.count_owned();
    }

    fn drop_all(&self, why: &str) {
        let dropped = std::mem::take(&mut *self.held());
        if !dropped.is_empty() {
            tracing::warn!(shards = dropped.len(), reason = why, "lost every shard: cancelling their passes");
        }
        for held in dropped.into_values() {
            held.term.cancel();
        }
        self.count_owned();
    }

    /// Records a shard just taken, and tells the controllers to reconcile its objects.
    fn hold(&self, shard: u32, term: CancellationToken) {
        self.held().insert(shard, Held { term, draining: false, running: Default::default() });
        self.count_owned();
        let _ = self.gained.send(shard);
    }

    /// Stops starting passes on `shard` and waits for the running ones: up to `grace`, then
    /// they are cancelled and waited for. The shard stays held (its Lease is not yet released).
    async fn drain(&self, shard: u32, grace: Duration) {
        let Some((term, running)) = self.held().get_mut(&shard).map(|h| {
            h.draining = true;
            (h.term.clone(), h.running.clone())
        }) else {
            return;
        };
        self.count_owned();
        if tokio::time::timeout(grace, running.wait_idle()).await.is_err() {
            tracing::warn!(shard, ?grace, "passes on a shard being handed over still run: cancelling them");
            term.cancel();
            running.wait_idle().await;
        }
    }

    fn draining(&self, shard: u32) -> bool {
        self.held().get(&shard).is_some_and(|h| h.draining)
    }

    fn indices(&self) -> std::collections::BTreeSet<u32> {
        self.held().keys().copied().collect()
    }

    fn count_owned(&self) {
        let owned = self.held().values().filter(|h| !h.draining).count();
        self.metrics.set_shards_owned(owned as i64);
    }

    /// Yields each shard as this replica takes it.
    pub fn gained(&self) -> impl Stream<Item = u32> + Send + 'static {
        futures::stream::unfold(self.gained.subscribe(), |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(shard) => return Some((shard, rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::PostParams;

    fn settings(identity: &str, count: u32) -> ShardSettings {
        ShardSettings {
            count,
            group: "deployster".into(),
            namespace: "default".into(),
            duration: Duration::from_secs(2),
            watched: Vec::new(),
            identity: identity.into(),
            owner: None,
        }
    }

    async fn client() -> Client {
        kube_fake_client::ClientBuilder::new().build().await.unwrap()
    }

    /// The namespace/name of some object in `shard` of `count`.
    fn object_in(shard: u32, count: u32) -> String {
        (0..).map(|i| format!("m-{i}")).find(|name| assign::shard_of("default", name, count) == shard).unwrap()
    }

    #[tokio::test]
    async fn a_shard_handed_over_starts_no_pass_and_waits_for_the_running_ones() {
        let shards = Shards::new(client().await, settings("me", 2), Arc::new(Metrics::new()));
        let (mine, other) = (object_in(0, 2), object_in(1, 2));
        assert!(shards.begin("default", &mine).is_none(), "a shard not held starts nothing");
        shards.hold(0, CancellationToken::new());
        let ticket = shards.begin("default", &mine).expect("a held shard's objects may run");
        assert!(shards.begin("default", &other).is_none());
        assert!(shards.owns("default", &mine) && !shards.owns("default", &other));

        let shards = Arc::new(shards);
        let drain = tokio::spawn({
            let shards = shards.clone();
            async move { shards.drain(0, Duration::from_secs(30)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!drain.is_finished(), "the hand-over waits for the running pass");
        assert!(shards.begin("default", &mine).is_none(), "no new pass on a shard being handed over");
        assert!(!ticket.term.is_cancelled(), "within the grace, the running pass goes on");
        drop(ticket);
        tokio::time::timeout(Duration::from_secs(5), drain).await.expect("drained once the pass ended").unwrap();
    }

    #[tokio::test]
    async fn a_pass_outliving_the_grace_is_cancelled_before_the_hand_over() {
        let shards = Arc::new(Shards::new(client().await, settings("me", 1), Arc::new(Metrics::new())));
        shards.hold(0, CancellationToken::new());
        let ticket = shards.begin("default", "anything").unwrap();
        let term = ticket.term.clone();
        let pass = tokio::spawn(async move {
            term.cancelled().await;
            drop(ticket);
        });
        tokio::time::timeout(Duration::from_secs(5), shards.drain(0, Duration::from_millis(200)))
            .await
            .expect("the pass, cancelled, ends");
        pass.await.unwrap();
    }

    /// A write is fenced by the shard's Lease as it is now: one naming another refuses it, and
    /// stops the shard's passes.
    #[tokio::test]
    async fn writes_are_fenced_by_the_shard_lease_as_it_is_now() {
        let client = client().await;
        let shards = Shards::new(client.clone(), settings("me", 1), Arc::new(Metrics::new()));
        let api: Api<Lease> = Api::namespaced(client, "default");
        let lease = |holder: &str| Lease {
            metadata: kube::api::ObjectMeta { name: Some("deployster-shard-0".into()), ..Default::default() },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(holder.into()),
                ..Default::default()
            }),
        };
        api.create(&PostParams::default(), &lease("me")).await.unwrap();
        assert!(matches!(shards.confirm("default", "x").await, Err(FenceError::NotOwner(_))), "not held: no write");
        shards.hold(0, CancellationToken::new());
        let term = shards.begin("default", "x").unwrap().term.clone();
        let status = shards.confirm("default", "x").await.expect("the Lease names this replica");
        assert_eq!((status.replica.as_str(), status.index, status.count), ("me", Some(0), Some(1)));

        let mut edited = api.get("deployster-shard-0").await.unwrap();
        edited.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
        api.replace("deployster-shard-0", &PostParams::default(), &edited).await.unwrap();
        match shards.confirm("default", "x").await {
            Err(FenceError::NotOwner(why)) => {
                assert_eq!(why, "shard 0's Lease deployster-shard-0 is now held by intruder")
            }
            other => panic!("{other:?}"),
        }
        assert!(term.is_cancelled() && shards.begin("default", "x").is_none(), "the fence ended the shard");
    }
}
