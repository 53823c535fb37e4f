//! The controller's own troubles that are not one kind's: why it could not start
//! ([`StartError`]: a clear message and a non-zero exit), and why a status was not written
//! ([`StatusWriteError`], for every kind). Why one reconcile could not finish is each kind's
//! own error, retried by its error policy.

use std::net::SocketAddr;

/// Why the controller could not start (or go on running as a whole): a clear message and a
/// non-zero exit. Never an object's trouble: those are each kind's errors, retried per object.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot reach the Kubernetes API server at {url}: {source}")]
    Unreachable { url: String, source: Box<kube::Error> },
    #[error(
        "the Manifest CRD is not installed (manifests.deployster.io); install it: deployster crd | kubectl apply -f -"
    )]
    CrdMissing,
    #[error(
        "the controller may not list Manifests in {scope}: {message}. Its RBAC does not cover that namespace: with the \
         Helm chart, list it in watchNamespaces (or leave watchNamespaces empty to watch every namespace)"
    )]
    Forbidden { scope: String, message: String },
    #[error("the leader lease's namespace `{0}` does not exist: create it, or name another with --lease-namespace")]
    LeaseNamespace(String),
    #[error("cannot take part in leader election on Lease {lease}: {source}")]
    Lease { lease: String, source: Box<kube::Error> },
    #[error("cannot serve metrics and health on --metrics-addr {addr}: {source}")]
    MetricsAddr { addr: SocketAddr, source: std::io::Error },
    #[error("cannot watch for signals: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
    #[error("cannot assemble the executors of resource types: {0}")]
    Executors(#[from] crate::executors::PlanError),
}

impl StartError {
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::Kube(_) => "KubernetesApi",
            StartError::Unreachable { .. } => "ApiServerUnreachable",
            StartError::CrdMissing => "CrdMissing",
            StartError::Forbidden { .. } => "Forbidden",
            StartError::LeaseNamespace(_) => "LeaseNamespaceMissing",
            StartError::Lease { .. } => "LeaderElection",
            StartError::MetricsAddr { .. } => "MetricsAddrUnavailable",
            StartError::Signals(_) => "Signals",
            StartError::Client(e) => e.reason(),
            StartError::Executors(_) => "Executors",
        }
    }

    /// At first contact, an error that is not an answer from the API server means it could not
    /// be reached: say where it was looked for.
    pub fn unreachable_at(self, url: &str) -> Self {
        match self {
            StartError::Kube(kube::Error::Api(status)) => StartError::Kube(kube::Error::Api(status)),
            StartError::Kube(source) => StartError::Unreachable { url: url.to_string(), source: Box::new(source) },
            other => other,
        }
    }
}

/// Why a status was not written.
#[derive(Debug, thiserror::Error)]
pub enum StatusWriteError {
    #[error(transparent)]
    Fence(super::replicas::fence::FenceError),
    #[error("the status write kept conflicting after {0} attempts")]
    Conflict(usize),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl StatusWriteError {
    pub fn reason(&self) -> &'static str {
        match self {
            StatusWriteError::Fence(e) => e.reason(),
            StatusWriteError::Conflict(_) => "StatusConflict",
            StatusWriteError::Kube(_) => "KubernetesApi",
        }
    }
}
