//! Which objects this replica may reconcile now: all of them while it leads (or runs alone),
//! or those of the shards it holds. Passes start, and status writes are fenced, through here.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::fence::FenceError;
use super::leader::Leadership;
use super::shards::{PassTicket, ShardStatus, Shards};
use crate::controller::error::StartError;

/// How this replica shares the work.
pub enum Ownership {
    /// Every object, while it leads (always, without election).
    Leader(Arc<Leadership>),
    /// The objects of the shards it holds.
    Shards(Arc<Shards>),
}

/// What became this replica's to reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gain {
    All,
    Shard(u32),
}

impl Ownership {
    /// Without election: one term for the process's whole life.
    pub fn always(shutdown: &CancellationToken) -> Self {
        Self::Leader(Leadership::always(shutdown))
    }

    /// A pass on `namespace/name` may start now, under the returned term.
    pub fn begin(&self, namespace: &str, name: &str) -> Option<PassTicket> {
        match self {
            Self::Leader(leadership) => leadership.term().map(PassTicket::of_term),
            Self::Shards(shards) => shards.begin(namespace, name),
        }
    }

    /// Whether `namespace/name` is another replica's now (its shard was handed over or taken):
    /// what this replica made for it (a warm runner) is left to that replica.
    pub fn elsewhere(&self, namespace: &str, name: &str) -> bool {
        match self {
            Self::Leader(_) => false,
            Self::Shards(shards) => !shards.holds(namespace, name),
        }
    }

    /// Whether this replica reconciles `namespace/name` now.
    pub fn owns(&self, namespace: &str, name: &str) -> bool {
        match self {
            Self::Leader(leadership) => leadership.term().is_some(),
            Self::Shards(shards) => shards.owns(namespace, name),
        }
    }

    /// Whether a write decided for `namespace/name` may still be made; what `status.shard` is
    /// then (nothing without sharding).
    pub async fn confirm(&self, namespace: &str, name: &str) -> Result<Option<ShardStatus>, FenceError> {
        match self {
            Self::Leader(leadership) => leadership.confirm().await.map(|()| self.shard_status(namespace, name)),
            Self::Shards(shards) => shards.confirm(namespace, name).await.map(Some),
        }
    }

    /// What `status.shard` says when this replica writes `namespace/name`'s status.
    pub fn shard_status(&self, namespace: &str, name: &str) -> Option<ShardStatus> {
        match self {
            Self::Leader(leadership) => {
                leadership.identity().map(|replica| ShardStatus { replica, index: None, count: None })
            }
            Self::Shards(shards) => Some(shards.status_of(shards.shard_of(namespace, name))),
        }
    }

    /// Yields what becomes this replica's: everything on each new term, or a shard taken.
    pub fn gained(&self) -> std::pin::Pin<Box<dyn Stream<Item = Gain> + Send>> {
        match self {
            Self::Leader(leadership) => leadership.gained().map(|()| Gain::All).boxed(),
            Self::Shards(shards) => shards.gained().map(Gain::Shard).boxed(),
        }
    }

    /// Whether `gain` covers `namespace/name`.
    pub fn covers(&self, gain: Gain, namespace: &str, name: &str) -> bool {
        match (gain, self) {
            (Gain::All, _) => true,
            (Gain::Shard(shard), Self::Shards(shards)) => shards.shard_of(namespace, name) == shard,
            (Gain::Shard(_), Self::Leader(_)) => false,
        }
    }
}

/// What a replica hands back when it stops.
pub enum Departure {
    /// Nothing: it ran alone.
    Alone,
    Leader(super::leader::Elector),
    Member(super::shards::Membership),
}

impl Departure {
    /// Call once no pass runs any more: the lease, or every shard, goes back at once.
    pub async fn leave(self) {
        match self {
            Self::Alone => {}
            Self::Leader(elector) => elector.release().await,
            Self::Member(membership) => membership.leave().await,
        }
    }
}

/// The objects in `store` that each gain makes this replica's: what `reconcile_on` is given.
pub fn gained_objects<K>(
    ownership: Arc<Ownership>,
    store: kube::runtime::reflector::Store<K>,
) -> impl Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    ownership.gained().flat_map(move |gain| {
        let covered: Vec<_> = store
            .state()
            .iter()
            .filter(|object| {
                let meta = object.meta();
                ownership.covers(
                    gain,
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                )
            })
            .map(|object| kube::runtime::reflector::ObjectRef::from_obj(&**object))
            .collect();
        futures::stream::iter(covered)
    })
}

/// Who reconciles what: this replica alone, the leader of several, or each its shards.
pub(in crate::controller) async fn share_work(
    client: &kube::Client,
    config: &crate::controller::config::RunConfig,
    default_namespace: String,
    metrics: &Arc<crate::controller::metrics::Metrics>,
    shutdown: &CancellationToken,
) -> Result<(Arc<Ownership>, Departure), StartError> {
    let Some(election) = &config.leader_election else {
        metrics.set_replica(&crate::controller::config::hostname().unwrap_or_default());
        metrics.leader.set(1);
        return Ok((Arc::new(Ownership::always(shutdown)), Departure::Alone));
    };
    let namespace = election.lease_namespace.clone().unwrap_or(default_namespace);
    let owner = election.pod.as_ref().map(crate::controller::config::OwnPod::owner_reference);
    if let Some(count) = election.shards {
        let settings = super::shards::ShardSettings {
            count,
            group: election.lease_name.clone(),
            namespace,
            duration: election.lease_duration,
            watched: config.namespaces.clone(),
            identity: super::leader::identity(),
            owner,
        };
        metrics.set_replica(&settings.identity);
        let membership = super::shards::Membership::join(
            client.clone(),
            settings,
            metrics.clone(),
            shutdown.clone(),
            config.shutdown_grace,
        )
        .await?;
        return Ok((Arc::new(Ownership::Shards(membership.shards.clone())), Departure::Member(membership)));
    }
    let lease = super::leader::LeaseConfig {
        name: election.lease_name.clone(),
        namespace,
        identity: super::leader::identity(),
        duration: election.lease_duration,
        owner,
    };
    metrics.set_replica(&lease.identity);
    let (leadership, elector) = super::leader::elect(client.clone(), lease, metrics.clone(), shutdown.clone()).await?;
    Ok((Arc::new(Ownership::Leader(leadership)), Departure::Leader(elector)))
}
