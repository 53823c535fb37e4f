//! Why a reconcile could not finish, or the controller could not start. Failures of the
//! manifest itself (invalid, a resource failing) are not errors: they are recorded in the
//! status. These are the controller's own troubles: retried by the error policy during a run,
//! a clear message and a non-zero exit at start-up.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot reach the Kubernetes API server at {url}: {source}")]
    Unreachable { url: String, source: Box<kube::Error> },
    #[error(transparent)]
    Input(#[from] super::inputs::ManifestInputError),
    #[error("the status write kept conflicting after {0} attempts")]
    StatusConflict(usize),
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
    Pass(#[from] crate::pass::PassError),
    /// A write refused by the lease fence: this replica no longer leads.
    #[error("not written: {0}")]
    NotLeader(String),
    /// A write refused by a shard's lease fence: the object's shard is no longer this replica's.
    #[error("not written: {0}")]
    NotOwner(String),
    #[error(transparent)]
    Pipeline(#[from] crate::pipeline::PipelineError),
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesApi",
            Error::Unreachable { .. } => "ApiServerUnreachable",
            Error::Input(e) => e.reason(),
            Error::StatusConflict(_) => "StatusConflict",
            Error::CrdMissing => "CrdMissing",
            Error::Forbidden { .. } => "Forbidden",
            Error::LeaseNamespace(_) => "LeaseNamespaceMissing",
            Error::Lease { .. } => "LeaderElection",
            Error::NotLeader(_) => "NotLeader",
            Error::NotOwner(_) => "ShardMoved",
            Error::MetricsAddr { .. } => "MetricsAddrUnavailable",
            Error::Signals(_) => "Signals",
            Error::Pass(e) => e.reason(),
            Error::Pipeline(e) => e.reason(),
            Error::Client(e) => e.reason(),
        }
    }

    /// At first contact, an error that is not an answer from the API server means it could not
    /// be reached: say where it was looked for.
    pub fn unreachable_at(self, url: &str) -> Self {
        match self {
            Error::Kube(kube::Error::Api(status)) => Error::Kube(kube::Error::Api(status)),
            Error::Kube(source) => Error::Unreachable { url: url.to_string(), source: Box::new(source) },
            other => other,
        }
    }
}
