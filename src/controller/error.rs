//! Why a reconcile could not finish. Failures of the manifest itself (invalid, a resource
//! failing) are not errors: they are recorded in the status. These are the controller's own
//! troubles, retried by the error policy.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot write plug files: {0}")]
    PlugFiles(std::io::Error),
    #[error("the status write kept conflicting after {0} attempts")]
    StatusConflict(usize),
    #[error(
        "the Manifest CRD is not installed (manifests.deployster.io); install it: deployster crd | kubectl apply -f -"
    )]
    CrdMissing,
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesApi",
            Error::PlugFiles(_) => "PlugFiles",
            Error::StatusConflict(_) => "StatusConflict",
            Error::CrdMissing => "CrdMissing",
        }
    }
}
