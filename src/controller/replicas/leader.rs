//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas exactly one
//! reconciles.
//!
//! Every write is a get + replace guarded by the Lease's resourceVersion (a lost race is a 409,
//! never two holders). Whether another holder's lease has expired is judged by this replica's
//! own clock — how long the Lease has gone *unchanged since we saw it change* — never by
//! comparing `renewTime` with our clock, so clock skew between nodes cannot hand the lease to
//! two replicas (as client-go does).
//!
//! A leader that cannot renew for [`LeaseConfig::renew_deadline`] (two thirds of the lease
//! duration) steps down on its own: its term's token is cancelled, which stops starting passes
//! and cancels the running ones, well before another replica may take the lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fence::FenceError;
use crate::controller::error::StartError;
use crate::controller::metrics::Metrics;

/// Which Lease, held by whom, for how long.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// Unique per process: `<hostname>_<random>`.
    pub identity: String,
    pub duration: Duration,
    /// The replica's own Pod, when it runs in one: the Lease it writes is owned by that Pod,
    /// so that the Lease goes with the last replica (`helm uninstall` leaves nothing behind)
    /// — a leader that writes it after its Pod was deleted only makes it the garbage
    /// collector's at once.
    pub owner: Option<OwnerReference>,
}

impl LeaseConfig {
    /// A leader that has not renewed for this long steps down.
    pub fn renew_deadline(&self) -> Duration {
        self.duration.mul_f64(2.0 / 3.0)
    }

    /// Time between attempts to acquire or renew.
    pub fn retry_period(&self) -> Duration {
        (self.duration / 7).max(Duration::from_millis(100))
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// Whether this replica may reconcile now. A *term* is one uninterrupted stretch of leadership;
/// its token is cancelled when it ends.
pub struct Leadership {
    term: watch::Sender<Option<CancellationToken>>,
    /// Under election: the Lease that every write is fenced by ([`Leadership::confirm`]).
    fence: Option<Fence>,
}

/// The Lease as fencing reads it: who must hold it for this replica's writes to go ahead.
struct Fence {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl Leadership {
    /// Without election: one term for the process's whole life, ended only by `shutdown`.
    pub fn always(shutdown: &CancellationToken) -> Arc<Self> {
        Arc::new(Self { term: watch::Sender::new(Some(shutdown.clone())), fence: None })
    }

    fn following(fence: Fence) -> Arc<Self> {
        Arc::new(Self { term: watch::Sender::new(None), fence: Some(fence) })
    }

    /// The current term's token, or `None` when another replica leads.
    pub fn term(&self) -> Option<CancellationToken> {
        self.term.borrow().clone()
    }

    /// Whether a write decided under this replica's leadership may still be made: it still
    /// leads and, under election, the Lease still names it — read afresh, so that a lease taken
    /// from it (a forced steal, a partition that outlasted the lease) stops its writes at once,
    /// not at its next renewal. A replica that finds the Lease held by another steps down. (The
    /// read and the write are two requests: a steal between them, within milliseconds, is the
    /// one window left, as with any lease-fenced writer of Kubernetes objects.)
    pub async fn confirm(&self) -> Result<(), FenceError> {
        if self.term().is_none() {
            return Err(FenceError::NotLeader("another replica leads".into()));
        }
        let Some(fence) = &self.fence else { return Ok(()) };
        let lease = fence.api.get_opt(&fence.name).await?;
        let holder = lease.and_then(|l| l.spec?.holder_identity).unwrap_or_default();
        if holder == fence.identity {
            return Ok(());
        }
        tracing::warn!(%holder, "the leader lease is held by another: this replica's writes stop here");
        self.step_down();
        let holder = if holder.is_empty() { "nobody".to_string() } else { holder };
        Err(FenceError::NotLeader(format!("the leader lease is now held by {holder}")))
    }

    /// Under election, this replica's identity in the Lease.
    pub fn identity(&self) -> Option<String> {
        self.fence.as_ref().map(|f| f.identity.clone())
    }

    /// Yields each time this replica becomes the leader (not for a term it already had).
    pub fn gained(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.term.subscribe(), |mut rx| async move {
            loop {
                rx.changed().await.ok()?;
                if rx.borrow_and_update().is_some() {
                    return Some(((), rx));
                }
            }
        })
    }

    fn lead(&self, term: CancellationToken) {
        self.term.send_replace(Some(term));
    }

    /// Ends the term: running passes are cancelled.
    fn step_down(&self) {
        if let Some(term) = self.term.send_replace(None) {
            term.cancel();
        }
    }
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease (acquired or renewed).
    Held,
    /// Someone else does.
    HeldBy(String),
}

struct LeaseLock {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The Lease's resourceVersion when we last saw it change, and when that was.
    observed: Option<(String, Instant)>,
    /// The same for the member Leases of sharded replicas of this Lease's name, by name.
    members: std::collections::HashMap<String, (String, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl LeaseLock {
    fn observe(&mut self, lease: &Lease) {
        let version = lease.resource_version().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != version) {
            self.observed = Some((version, Instant::now()));
        }
    }

    /// How long the Lease has gone unchanged, as far as we know.
    fn unchanged_for(&self) -> Duration {
        self.observed.as_ref().map_or(Duration::ZERO, |(_, at)| at.elapsed())
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let lease = self.api.get_opt(&self.config.name).await?;
        let held =
            lease.as_ref().and_then(|l| l.spec.as_ref()?.holder_identity.as_deref()) == Some(&self.config.identity);
        // Sharded replicas of this name reconcile their shards: a leader would reconcile the
        // same objects. It waits until they are gone (a way back from sharding).
        if !held && let Some(sharded) = self.live_shard_members().await? {
            return Ok(Attempt::HeldBy(sharded));
        }
        match lease {
            None => self.create().await,
            Some(lease) => match self.claim(lease) {
                Ok(claimed) => self.write(&claimed).await,
                Err(holder) => Ok(Attempt::HeldBy(holder)),
            },
        }
    }

    /// The sharded replicas of a group of this Lease's name that are live — their member Lease
    /// changed within a lease duration, by our clock — if any.
    async fn live_shard_members(&mut self) -> Result<Option<String>, kube::Error> {
        use super::shards::{GROUP_LABEL, ROLE_LABEL};
        let selector = format!("{GROUP_LABEL}={},{ROLE_LABEL}=member", self.config.name);
        let members = self.api.list(&kube::api::ListParams::default().labels(&selector)).await?.items;
        let mut live = Vec::new();
        for member in members {
            let version = member.resource_version().unwrap_or_default();
            let entry = self.members.entry(member.name_any()).or_insert_with(|| (version.clone(), Instant::now()));
            if entry.0 != version {
                *entry = (version, Instant::now());
            }
            let holder = member.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty());
            if let Some(holder) = holder.filter(|_| entry.1.elapsed() <= self.config.duration) {
                live.push(holder);
            }
        }
        Ok((!live.is_empty()).then(|| format!("sharded replicas ({}), until they are gone", live.join(", "))))
    }

    /// The Lease as we would write it to hold it (renewed, or taken over once expired), or the
    /// holder who keeps it. The claim keeps the resourceVersion it was read at.
    fn claim(&mut self, mut lease: Lease) -> Result<Lease, String> {
        self.observe(&lease);
        let me = self.config.identity.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != me {
            let held_for =
                spec.lease_duration_seconds.map_or(self.config.duration, |s| Duration::from_secs(s.max(1) as u64));
            if !holder.is_empty() && self.unchanged_for() <= held_for {
                return Err(holder);
            }
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(self.config.duration_seconds());
        if let Some(owner) = &self.config.owner {
            lease.metadata.owner_references = Some(vec![owner.clone()]);
        }
        Ok(lease)
    }

    /// Replaces the Lease, guarded by the resourceVersion the claim was read at: whoever wrote
    /// in between wins, and we learn of it as a conflict.
    async fn write(&mut self, claimed: &Lease) -> Result<Attempt, kube::Error> {
        match self.api.replace(&self.config.name, &PostParams::default(), claimed).await {
            Ok(replaced) => {
                self.observe(&replaced);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy("another replica".into())),
            Err(e) => Err(e),
        }
    }

    async fn create(&mut self) -> Result<Attempt, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                owner_references: self.config.owner.clone().map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.duration_seconds()),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.observe(&created);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy("another replica".into())),
            Err(e) => Err(e),
        }
    }

    /// Hands the lease back (holder cleared, duration 1 s) so that a standby takes over at once.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else { return Ok(()) };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        self.api.replace(&self.config.name, &PostParams::default(), &lease).await.map(drop)
    }
}

/// The running election; [`Elector::release`] ends it.
pub struct Elector {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Elector {
    /// Stops campaigning and hands the lease back. Call once nothing runs any more.
    pub async fn release(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Starts the election. The first attempt is made here, so that a Lease that cannot be
/// written at all (its namespace does not exist) is an error at start-up, not a retry loop.
/// Terms are children of `shutdown`.
pub async fn elect(
    client: Client,
    config: LeaseConfig,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(Arc<Leadership>, Elector), StartError> {
    let mut lock = LeaseLock {
        api: Api::namespaced(client, &config.namespace),
        config,
        observed: None,
        members: Default::default(),
    };
    let first = lock.try_acquire_or_renew().await.map_err(|e| match e {
        kube::Error::Api(status) if status.code == 404 => StartError::LeaseNamespace(lock.config.namespace.clone()),
        e => {
            StartError::Lease { lease: format!("{}/{}", lock.config.namespace, lock.config.name), source: Box::new(e) }
        }
    })?;
    let fence = Fence { api: lock.api.clone(), name: lock.config.name.clone(), identity: lock.config.identity.clone() };
    let leadership = Leadership::following(fence);
    let stop = CancellationToken::new();
    let campaign = Campaign { lock, leadership: leadership.clone(), metrics, shutdown, renewed_at: None };
    let task = tokio::spawn(campaign.run(first, stop.clone()));
    Ok((leadership, Elector { stop, task }))
}

struct Campaign {
    lock: LeaseLock,
    leadership: Arc<Leadership>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    /// When we last renewed, while we lead.
    renewed_at: Option<Instant>,
}

impl Campaign {
    async fn run(mut self, first: Attempt, stop: CancellationToken) {
        let lease = format!("{}/{}", self.lock.config.namespace, self.lock.config.name);
        tracing::info!(%lease, identity = %self.lock.config.identity, "leader election started");
        self.settle(Ok(first));
        loop {
            let pause = match self.renewed_at {
                Some(at) => {
                    self.lock.config.retry_period().min(self.lock.config.renew_deadline().saturating_sub(at.elapsed()))
                }
                None => self.lock.config.retry_period(),
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => break,
            }
            // A leader's attempt may take only what is left of its deadline.
            let budget = match self.renewed_at {
                Some(at) => self.lock.config.renew_deadline().saturating_sub(at.elapsed()),
                None => self.lock.config.renew_deadline() / 2,
            };
            let attempt = tokio::time::timeout(budget.max(Duration::from_millis(50)), self.lock.try_acquire_or_renew())
                .await
                .unwrap_or_else(|_| Err(kube::Error::Service("the Lease request timed out".into())));
            self.settle(attempt.map_err(|e| e.to_string()));
        }
        if self.renewed_at.take().is_some() {
            self.leadership.step_down();
            match self.lock.release().await {
                Ok(()) => tracing::info!(%lease, "released the leader lease"),
                Err(e) => {
                    tracing::warn!(%lease, error = %e, "could not release the leader lease; it expires on its own")
                }
            }
        }
        self.metrics.leader.set(0);
    }

    /// Acts on one attempt's result.
    fn settle(&mut self, attempt: Result<Attempt, String>) {
        let deadline = self.lock.config.renew_deadline();
        match (attempt, self.renewed_at) {
            // Held and not leading: newly, or again after a write's fence found the Lease taken
            // and stepped down.
            (Ok(Attempt::Held), renewed) if renewed.is_none() || self.leadership.term().is_none() => {
                tracing::info!(identity = %self.lock.config.identity, "became the leader: reconciling");
                self.renewed_at = Some(Instant::now());
                self.leadership.lead(self.shutdown.child_token());
                self.metrics.leader.set(1);
            }
            (Ok(Attempt::Held), _) => self.renewed_at = Some(Instant::now()),
            (Ok(Attempt::HeldBy(holder)), Some(_)) => self.lose(&format!("the lease is now held by {holder}")),
            (Ok(Attempt::HeldBy(holder)), None) => tracing::debug!(%holder, "another replica leads; standing by"),
            (Err(error), Some(at)) if at.elapsed() >= deadline => {
                self.lose(&format!("could not renew the lease for {deadline:?}: {error}"))
            }
            (Err(error), _) => tracing::warn!(%error, "could not acquire or renew the leader lease; retrying"),
        }
    }

    fn lose(&mut self, why: &str) {
        tracing::warn!(reason = why, "lost the leader lease: cancelling running passes, starting no new ones");
        self.renewed_at = None;
        self.leadership.step_down();
        self.metrics.leader.set(0);
    }
}

/// `<hostname>_<random>`: unique per process, readable in `kubectl get lease -o yaml`.
pub fn identity() -> String {
    let host = nix::unistd::gethostname().ok().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}_{}", &random[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn terms_start_and_end_with_leadership() {
        let shutdown = CancellationToken::new();
        let leadership = Leadership { term: watch::Sender::new(None), fence: None };
        let mut gained = Box::pin(leadership.gained());
        assert!(leadership.term().is_none(), "a follower has no term");
        leadership.lead(shutdown.child_token());
        assert!(gained.next().await.is_some());
        let term = leadership.term().expect("a leader has a term");
        leadership.step_down();
        assert!(term.is_cancelled(), "stepping down cancels the term's passes");
        assert!(leadership.term().is_none());
        leadership.lead(shutdown.child_token());
        assert!(gained.next().await.is_some(), "each new term is announced");
        shutdown.cancel();
        assert!(leadership.term().unwrap().is_cancelled(), "terms are children of shutdown");
    }

    /// A write is fenced by the Lease as it is now: a steal the campaign has not yet noticed
    /// refuses it and ends the term.
    #[tokio::test]
    async fn writes_are_fenced_by_the_lease_as_it_is_now() {
        let client = kube_fake_client::ClientBuilder::new().build().await.unwrap();
        let mut me = lock(&client, "me").await;
        assert_eq!(me.try_acquire_or_renew().await.unwrap(), Attempt::Held);
        let fence = Fence { api: me.api.clone(), name: "deployster".into(), identity: "me".into() };
        let leadership = Leadership { term: watch::Sender::new(None), fence: Some(fence) };
        assert!(matches!(leadership.confirm().await, Err(FenceError::NotLeader(_))), "no term, no write");
        leadership.lead(CancellationToken::new());
        let term = leadership.term().unwrap();
        leadership.confirm().await.expect("the Lease names this replica");

        let mut lease = me.api.get("deployster").await.unwrap();
        lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
        me.api.replace("deployster", &PostParams::default(), &lease).await.unwrap();
        match leadership.confirm().await {
            Err(FenceError::NotLeader(why)) => assert_eq!(why, "the leader lease is now held by intruder"),
            other => panic!("{other:?}"),
        }
        assert!(term.is_cancelled() && leadership.term().is_none(), "the fence ended the term");
    }

    fn pod(name: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ..OwnerReference::default()
        }
    }

    async fn lock(client: &kube::Client, identity: &str) -> LeaseLock {
        let config = LeaseConfig {
            name: "deployster".into(),
            namespace: "default".into(),
            identity: identity.into(),
            duration: Duration::from_secs(1),
            owner: Some(pod(identity)),
        };
        LeaseLock {
            api: Api::namespaced(client.clone(), "default"),
            config,
            observed: None,
            members: Default::default(),
        }
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_takeover_only_once_the_lease_went_unrenewed() {
        let client = kube_fake_client::ClientBuilder::new().build().await.unwrap();
        let (mut a, mut b, mut c) = (lock(&client, "a").await, lock(&client, "b").await, lock(&client, "c").await);
        assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::Held, "the first creates the Lease");
        let created: Lease = Api::namespaced(client.clone(), "default").get("deployster").await.unwrap();
        assert_eq!(created.metadata.owner_references, Some(vec![pod("a")]), "owned by its creator's Pod");
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::HeldBy("a".into()));
        assert_eq!(c.try_acquire_or_renew().await.unwrap(), Attempt::HeldBy("a".into()));
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::Held, "renewed");
            assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::HeldBy("a".into()), "renewals keep it");
            assert_eq!(c.try_acquire_or_renew().await.unwrap(), Attempt::HeldBy("a".into()));
        }
        // `a` stops renewing: after the lease duration without a change, one takes over. `c`
        // read the Lease just before `b` wrote it: its claim conflicts.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let api: Api<Lease> = Api::namespaced(client.clone(), "default");
        let stale_claim = c.claim(api.get("deployster").await.unwrap()).expect("expired for c too");
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::Held);
        assert_eq!(c.write(&stale_claim).await.unwrap(), Attempt::HeldBy("another replica".into()));
        let lease: Lease = Api::namespaced(client.clone(), "default").get("deployster").await.unwrap();
        assert_eq!(lease.metadata.owner_references, Some(vec![pod("b")]), "owned by the holder's Pod");
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::HeldBy("b".into()), "the old leader lost it");
        // Released: a standby takes over at once.
        c.release().await.unwrap();
        assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::HeldBy("b".into()), "only the holder releases");
        b.release().await.unwrap();
        assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::Held);
    }

    /// A replica without sharding started while sharded replicas of the same name live (a way
    /// back from sharding) takes no leadership until they are gone: both would reconcile.
    #[tokio::test]
    async fn no_leader_while_sharded_replicas_of_the_same_name_live() {
        let client = kube_fake_client::ClientBuilder::new().build().await.unwrap();
        let api: Api<Lease> = Api::namespaced(client.clone(), "default");
        let member = Lease {
            metadata: ObjectMeta {
                name: Some("deployster-member-abc".into()),
                labels: Some(
                    [("deployster.io/shard-group", "deployster"), ("deployster.io/shard-role", "member")]
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec { holder_identity: Some("sharded_1".into()), ..LeaseSpec::default() }),
        };
        api.create(&PostParams::default(), &member).await.unwrap();
        let mut me = lock(&client, "me").await;
        match me.try_acquire_or_renew().await.unwrap() {
            Attempt::HeldBy(why) => assert_eq!(why, "sharded replicas (sharded_1), until they are gone"),
            other => panic!("{other:?}"),
        }
        // Released, as a sharded replica leaving does: nobody to wait for.
        let mut released = api.get("deployster-member-abc").await.unwrap();
        released.spec.as_mut().unwrap().holder_identity = None;
        api.replace("deployster-member-abc", &PostParams::default(), &released).await.unwrap();
        assert_eq!(me.try_acquire_or_renew().await.unwrap(), Attempt::Held);
    }

    /// Kubernetes refuses to create an object in a namespace that does not exist (404, from its
    /// NamespaceLifecycle admission). The test API server of `.ci/run` accepts it instead, so
    /// this case is held here, on the in-memory API answering as Kubernetes does.
    #[tokio::test]
    async fn a_lease_namespace_that_does_not_exist_is_an_error_at_start_up() {
        use kube_fake_client::{Error as FakeError, interceptor};
        let refuse = interceptor::Funcs::new().create(|c| {
            Err(FakeError::NotFound { kind: "namespaces".into(), name: c.namespace.into(), namespace: String::new() })
        });
        let client = kube_fake_client::ClientBuilder::new().with_interceptor_funcs(refuse).build().await.unwrap();
        let config = LeaseConfig {
            name: "deployster".into(),
            namespace: "missing".into(),
            identity: identity(),
            duration: Duration::from_secs(15),
            owner: None,
        };
        let Err(error) = elect(client, config, Arc::new(Metrics::new()), CancellationToken::new()).await else {
            panic!("elected in a namespace that does not exist");
        };
        assert_eq!(error.reason(), "LeaseNamespaceMissing");
        assert!(error.to_string().contains("namespace `missing` does not exist"), "{error}");
    }

    #[test]
    fn the_deadline_leaves_time_to_stop_before_the_lease_expires() {
        let config = LeaseConfig {
            name: "l".into(),
            namespace: "n".into(),
            identity: identity(),
            duration: Duration::from_secs(15),
            owner: None,
        };
        assert_eq!(config.renew_deadline(), Duration::from_secs(10));
        assert!(config.retry_period() * 4 <= config.renew_deadline(), "several renewals fit in the deadline");
        assert!(config.identity.contains('_'));
        assert_ne!(identity(), identity(), "identities are unique per process");
    }
}
