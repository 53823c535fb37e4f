//! The loop that keeps this replica a member of its group and its shards in line with
//! [`assign::decide`]: every `retry_period`, renew the member Lease, read the group's Leases
//! (one list), decide, act.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::assign::{self, Member, Reading, ShardLease};
use super::{GROUP_LABEL, ROLE_LABEL, SETTINGS_ANNOTATION, ShardSettings, Shards};
use crate::controller::error::StartError;
use crate::controller::metrics::Metrics;

/// What a leader without sharding counts as, among the members of a group.
const LEADER_SETTINGS: &str = "one leader, no shards";

/// The running membership; [`Membership::leave`] ends it.
pub struct Membership {
    pub shards: Arc<Shards>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Membership {
    /// Joins the group: the member Lease is written here, so that a Lease that cannot be
    /// written at all (its namespace does not exist, no rights) is an error at start-up. Shard
    /// terms are children of `shutdown`; a shard handed over waits up to `grace` for its passes.
    pub async fn join(
        client: Client,
        settings: ShardSettings,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        grace: Duration,
    ) -> Result<Self, StartError> {
        metrics.set_shards_owned(0);
        let shards = Arc::new(Shards::new(client, settings, metrics));
        let mut campaign = ShardCampaign {
            shards: shards.clone(),
            observed: HashMap::new(),
            renewed_at: None,
            member: None,
            shutdown,
            grace,
            handovers: JoinSet::new(),
            waiting: None,
        };
        campaign.renew_member().await.map_err(|e| {
            let settings = campaign.shards.settings();
            match e {
                kube::Error::Api(status) if status.code == 404 => {
                    StartError::LeaseNamespace(settings.namespace.clone())
                }
                e => StartError::Lease {
                    lease: format!("{}/{}", settings.namespace, settings.member_lease()),
                    source: Box::new(e),
                },
            }
        })?;
        campaign.renewed_at = Some(Instant::now());
        let stop = CancellationToken::new();
        let task = tokio::spawn(campaign.run(stop.clone()));
        Ok(Self { shards, stop, task })
    }

    /// Leaves the group: every shard released (call once no pass runs any more), the member
    /// Lease released, so that the others take over at once.
    pub async fn leave(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// When a member joined, as [`Member::joined`] orders it. A Lease without times (written by hand)
/// counts as the oldest, as a leader Lease does.
fn joined(lease: &Lease) -> (i64, i64) {
    let created = lease.metadata.creation_timestamp.as_ref().map_or(i64::MIN, |t| t.0.as_second());
    let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.as_ref()).map_or(i64::MIN, |t| t.0.as_microsecond());
    (created, acquired)
}

/// A reference to `lease` as the owner of another Lease of its namespace.
fn owned_by(lease: &Lease) -> OwnerReference {
    OwnerReference {
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        name: lease.name_any(),
        uid: lease.uid().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

struct ShardCampaign {
    shards: Arc<Shards>,
    /// Each Lease of the group by name: its resourceVersion when we last saw it change, and
    /// when that was by our clock; a Lease gone counts as a change.
    observed: HashMap<String, Observation>,
    /// When our member Lease was last renewed.
    renewed_at: Option<Instant>,
    /// Our member Lease, as the owner of the shard Leases we take.
    member: Option<OwnerReference>,
    shutdown: CancellationToken,
    grace: Duration,
    handovers: JoinSet<()>,
    /// Why this replica takes nothing, as last said.
    waiting: Option<String>,
}

struct Observation {
    version: String,
    changed: Instant,
    /// The Lease as last seen (kept when it is gone, for its holder).
    lease: Lease,
    gone: bool,
}

impl ShardCampaign {
    fn settings(&self) -> &ShardSettings {
        self.shards.settings()
    }

    async fn run(mut self, stop: CancellationToken) {
        let settings = self.settings().clone();
        tracing::info!(
            group = %settings.group, identity = %settings.identity, settings = %settings.fingerprint(),
            "joined the shard group"
        );
        loop {
            self.tick().await;
            tokio::select! {
                _ = tokio::time::sleep(settings.retry_period()) => {}
                _ = stop.cancelled() => break,
            }
        }
        self.handovers.shutdown().await;
        self.leave().await;
    }

    /// One round: renew, read, decide, act.
    async fn tick(&mut self) {
        let settings = self.settings().clone();
        // A member that went unrenewed this long (cut off, or its process paused) may have had
        // its shards taken: it stops everything before anything else.
        if self.renewed_at.is_some_and(|at| at.elapsed() >= settings.renew_deadline()) {
            self.shards.drop_all(&format!("could not renew membership for {:?}", settings.renew_deadline()));
            self.renewed_at = None;
        }
        let budget = match self.renewed_at {
            Some(at) => settings.renew_deadline().saturating_sub(at.elapsed()),
            None => settings.renew_deadline() / 2,
        }
        .max(Duration::from_millis(50));
        let read = tokio::time::timeout(budget, async {
            self.renew_member().await?;
            self.renewed_at = Some(Instant::now());
            let selector = format!("{GROUP_LABEL}={}", settings.group);
            let mut leases = self.shards.api.list(&ListParams::default().labels(&selector)).await?.items;
            // A leader of the same name (replicas without sharding, as before an upgrade to it)
            // reconciles everything: it is waited for as a member with other settings.
            leases.extend(self.shards.api.get_opt(&settings.group).await?);
            Ok(leases)
        })
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service("the Lease requests timed out".into())));
        let leases = match read {
            Ok(leases) => leases,
            Err(error) => {
                tracing::warn!(%error, "could not renew membership or read the shard group; retrying");
                return;
            }
        };
        while self.handovers.try_join_next().is_some() {}
        let reading = self.observe(leases);
        let held = self.shards.indices();
        let decision = assign::decide(&settings.identity, &settings.fingerprint(), &held, settings.count, &reading);
        self.shards.metrics.shard_members.set(i64::from(decision.members));
        self.say_waiting(decision.waiting.clone());
        for shard in &decision.drop {
            self.shards.drop_shard(*shard, "its Lease names another holder, or is gone");
        }
        for shard in decision.release {
            self.hand_over(shard);
        }
        for shard in decision.take {
            self.take(shard, &reading).await;
        }
        if held.contains(&0) {
            self.sweep_members().await;
        }
    }

    fn say_waiting(&mut self, waiting: Option<String>) {
        if waiting != self.waiting {
            match &waiting {
                Some(why) => tracing::error!(reason = %why, "this replica reconciles nothing"),
                None if self.waiting.is_some() => tracing::info!("the shard settings agree again: taking shards"),
                None => {}
            }
            self.shards.metrics.shard_settings_waiting.set(i64::from(waiting.is_some()));
            self.waiting = waiting;
        }
    }

    /// Updates what we saw change, and turns the Leases into a [`Reading`].
    fn observe(&mut self, leases: Vec<Lease>) -> Reading {
        let seen: std::collections::HashSet<String> = leases.iter().map(|l| l.name_any()).collect();
        for lease in leases {
            let version = lease.resource_version().unwrap_or_default();
            match self.observed.get_mut(&lease.name_any()) {
                Some(o) if o.version == version && !o.gone => {}
                _ => {
                    let observation = Observation { version, changed: Instant::now(), lease, gone: false };
                    self.observed.insert(observation.lease.name_any(), observation);
                }
            }
        }
        let duration = self.settings().duration;
        for (name, observation) in &mut self.observed {
            if !seen.contains(name) && !observation.gone {
                (observation.gone, observation.changed) = (true, Instant::now());
            }
        }
        // Gone for a lease duration: forgotten.
        self.observed.retain(|_, o| !(o.gone && o.changed.elapsed() > duration * 2));
        self.reading()
    }

    fn reading(&self) -> Reading {
        let settings = self.settings();
        let duration = settings.duration;
        let mut reading = Reading::default();
        for (name, o) in &self.observed {
            let role = if *name == settings.group {
                Some("leader")
            } else {
                o.lease.labels().get(ROLE_LABEL).map(String::as_str)
            };
            let holder = o.lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty());
            let quiet = o.changed.elapsed() >= duration;
            match role {
                Some("member") => reading.members.push(Member {
                    alive: holder.is_some() && !quiet,
                    identity: holder.unwrap_or_default(),
                    settings: o.lease.annotations().get(SETTINGS_ANNOTATION).cloned().unwrap_or_default(),
                    joined: joined(&o.lease),
                }),
                // Older than any member: while it lives, no shard is taken.
                Some("leader") => reading.members.push(Member {
                    alive: holder.is_some() && !quiet,
                    identity: holder.unwrap_or_default(),
                    settings: LEADER_SETTINGS.into(),
                    joined: (i64::MIN, i64::MIN),
                }),
                Some("shard") => {
                    let index = name.rsplit('-').next().and_then(|n| n.parse::<u32>().ok());
                    if let Some(index) = index.filter(|i| *i < settings.count && *name == settings.shard_lease(*i)) {
                        let holder = holder.filter(|_| !o.gone);
                        reading.shards.push(ShardLease { index, holder, quiet, gone: o.gone });
                    }
                }
                _ => {}
            }
        }
        reading
    }

    fn labelled(&self, name: String, role: &str) -> ObjectMeta {
        let settings = self.settings();
        ObjectMeta {
            name: Some(name),
            namespace: Some(settings.namespace.clone()),
            labels: Some(BTreeMap::from([
                (GROUP_LABEL.to_string(), settings.group.clone()),
                (ROLE_LABEL.to_string(), role.to_string()),
            ])),
            annotations: Some(BTreeMap::from([(SETTINGS_ANNOTATION.to_string(), settings.fingerprint())])),
            // A member Lease goes with its replica's Pod; a shard Lease with the member Lease of
            // the replica that took it last (the garbage collector removes the group's Leases
            // once its replicas are gone, as with `helm uninstall`).
            owner_references: match role {
                "member" => settings.owner.clone().map(|o| vec![o]),
                _ => self.member.clone().map(|o| vec![o]),
            },
            ..ObjectMeta::default()
        }
    }

    /// Writes our member Lease: created if missing, else replaced (it is ours alone).
    async fn renew_member(&mut self) -> Result<(), kube::Error> {
        let settings = self.settings().clone();
        let name = settings.member_lease();
        let spec = |acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(settings.identity.clone()),
            lease_duration_seconds: Some(settings.duration.as_secs() as i32),
            acquire_time: acquired.or_else(|| Some(now())),
            renew_time: Some(now()),
            ..LeaseSpec::default()
        };
        match self.shards.api.get_opt(&name).await? {
            None => {
                let lease = Lease { metadata: self.labelled(name, "member"), spec: Some(spec(None)) };
                self.shards.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let fresh = self.labelled(name.clone(), "member");
                let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
                lease.metadata.labels = fresh.labels;
                lease.metadata.annotations = fresh.annotations;
                lease.spec = Some(spec(acquired));
                self.shards.api.replace(&name, &PostParams::default(), &lease).await
            }
        }
        .map(|lease| self.member = Some(owned_by(&lease)))
    }

    /// Tries to take a free shard: a write guarded by the version we read it at.
    async fn take(&mut self, shard: u32, reading: &Reading) {
        let settings = self.settings().clone();
        let name = settings.shard_lease(shard);
        let mut lease = match self.observed.get(&name).filter(|o| !o.gone) {
            Some(o) => o.lease.clone(),
            None => Lease { metadata: self.labelled(name.clone(), "shard"), spec: None },
        };
        let fresh = self.labelled(name.clone(), "shard");
        lease.metadata.labels = fresh.labels;
        lease.metadata.annotations = fresh.annotations;
        lease.metadata.owner_references = fresh.owner_references;
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(settings.identity.clone());
        spec.acquire_time = Some(now());
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(settings.duration.as_secs() as i32);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        let previous = reading.shards.iter().find(|s| s.index == shard).and_then(|s| s.holder.clone());
        let written = if lease.metadata.resource_version.is_some() {
            self.shards.api.replace(&name, &PostParams::default(), &lease).await
        } else {
            self.shards.api.create(&PostParams::default(), &lease).await
        };
        match written {
            Ok(_) => {
                let from = previous.unwrap_or_else(|| "nobody".into());
                tracing::info!(shard, lease = %name, %from, "took a shard");
                self.shards.hold(shard, self.shutdown.child_token());
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(shard, "another replica took the shard first");
            }
            Err(error) => tracing::warn!(shard, %error, "could not take a shard; retrying"),
        }
    }

    /// Hands a shard over in the background: its passes end, then its Lease is released.
    fn hand_over(&mut self, shard: u32) {
        if self.shards.draining(shard) {
            return;
        }
        let (shards, grace) = (self.shards.clone(), self.grace);
        tracing::info!(shard, "handing a shard over: no new passes, the running ones may finish");
        self.handovers.spawn(async move {
            shards.drain(shard, grace).await;
            match release(&shards, shard).await {
                Ok(()) => tracing::info!(shard, "handed a shard over"),
                Err(error) => tracing::warn!(shard, %error, "could not release a shard; it is dropped and expires"),
            }
            shards.drop_shard_quietly(shard);
        });
    }

    /// Leaves the group: every shard's passes ended (the controllers drained them), each
    /// Lease released, then the member Lease.
    async fn leave(&mut self) {
        let held = self.shards.indices();
        for shard in held {
            if let Err(error) = release(&self.shards, shard).await {
                tracing::warn!(shard, %error, "could not release a shard; it expires on its own");
            }
            self.shards.drop_shard_quietly(shard);
        }
        let name = self.settings().member_lease();
        let released = async {
            let Some(mut lease) = self.shards.api.get_opt(&name).await? else { return Ok(()) };
            lease.spec.get_or_insert_with(LeaseSpec::default).holder_identity = None;
            self.shards.api.replace(&name, &PostParams::default(), &lease).await.map(drop)
        };
        match released.await {
            Ok(()) => tracing::info!("left the shard group: every shard released"),
            Err(error) => tracing::warn!(%error, "could not release the member Lease; it expires on its own"),
        }
        self.shards.metrics.set_shards_owned(0);
    }

    /// One member's duty (the holder of shard 0): member Leases released or unrenewed for three
    /// lease durations are deleted, so that replicas gone (a scale-down, a crash) leave no
    /// Lease behind. (Long dead by then: a member is live only while its Lease changes within a
    /// lease duration; one that comes back writes its Lease again.)
    async fn sweep_members(&mut self) {
        let limit = self.settings().duration * 3;
        let stale: Vec<String> = self
            .observed
            .iter()
            .filter(|(_, o)| !o.gone && o.lease.labels().get(ROLE_LABEL).map(String::as_str) == Some("member"))
            .filter(|(_, o)| o.changed.elapsed() > limit)
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if name == self.settings().member_lease() {
                continue;
            }
            match self.shards.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(lease = %name, "deleted the member Lease of a replica long gone"),
                Err(error) => tracing::debug!(lease = %name, %error, "could not delete a stale member Lease"),
            }
        }
    }
}

/// Clears a shard Lease's holder, if it still names us (a write guarded by its version).
async fn release(shards: &Shards, shard: u32) -> Result<(), kube::Error> {
    let name = shards.settings.shard_lease(shard);
    let Some(mut lease) = shards.api.get_opt(&name).await? else { return Ok(()) };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(shards.settings.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.renew_time = Some(now());
    shards.api.replace(&name, &PostParams::default(), &lease).await.map(drop)
}
