//! Why a write decided under this replica's term may not be made: the fence that leader
//! election and shards put before every status write.

/// A write the fence refused, or could not decide on.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// This replica no longer leads.
    #[error("not written: {0}")]
    NotLeader(String),
    /// The object's shard is no longer this replica's.
    #[error("not written: {0}")]
    NotOwner(String),
    /// The Lease could not be read.
    #[error("Kubernetes API: {0}")]
    Lease(#[from] kube::Error),
}

impl FenceError {
    pub fn reason(&self) -> &'static str {
        match self {
            FenceError::NotLeader(_) => "NotLeader",
            FenceError::NotOwner(_) => "ShardMoved",
            FenceError::Lease(_) => "KubernetesApi",
        }
    }
}
