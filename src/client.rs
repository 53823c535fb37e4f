//! Making Kubernetes clients, in one place for every part that talks to a cluster (the CLI's
//! `--executor pod`, `builtin/kubernetes`, the controller, `deployster approve`): which cluster
//! (a kubeconfig and context, or the in-cluster configuration), as whom (impersonating a
//! ServiceAccount), and over which TLS crypto provider.

/// The TLS crypto provider (ring) for this process, once: the registry client and the
/// Kubernetes clients share it. Chosen here rather than left to rustls's crate features: when a
/// build enables both of its providers (another crate in the build may ask for aws-lc-rs),
/// rustls cannot choose and panics on the first connection.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Which cluster: a kubeconfig file and context, each else the usual default.
#[derive(Debug, Clone, Default)]
pub struct Kubeconfig {
    /// [default: KUBECONFIG, then ~/.kube/config, then in-cluster configuration]
    pub file: Option<std::path::PathBuf>,
    /// [default: the kubeconfig's current context]
    pub context: Option<String>,
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no cluster to talk to (KUBECONFIG, ~/.kube/config or in-cluster configuration): {0}")]
    NoCluster(#[source] kube::config::InferConfigError),
    #[error("cannot read the kubeconfig{}: {source}", shown(file))]
    Unreadable { file: Option<std::path::PathBuf>, source: kube::config::KubeconfigError },
    #[error("cannot use {} of the kubeconfig: {source}", context.as_ref().map_or("the current context".into(), |c| format!("context `{c}`")))]
    Unusable { context: Option<String>, source: kube::config::KubeconfigError },
    #[error("cannot make a client: {0}")]
    Connect(#[source] kube::Error),
}

fn shown(file: &Option<std::path::PathBuf>) -> String {
    file.as_ref().map(|f| format!(" {}", f.display())).unwrap_or_default()
}

impl ClientError {
    /// For condition and event reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ClientError::NoCluster(_) => "NoCluster",
            ClientError::Unreadable { .. } => "KubeconfigUnreadable",
            ClientError::Unusable { .. } => "KubeconfigUnusable",
            ClientError::Connect(_) => "ClientUnavailable",
        }
    }
}

impl Kubeconfig {
    pub async fn load(&self) -> Result<kube::Config, ClientError> {
        let Kubeconfig { file, context } = self;
        if file.is_none() && context.is_none() {
            return kube::Config::infer().await.map_err(ClientError::NoCluster);
        }
        let unreadable = |source| ClientError::Unreadable { file: file.clone(), source };
        let read = match file {
            Some(file) => kube::config::Kubeconfig::read_from(file).map_err(unreadable),
            None => kube::config::Kubeconfig::read().map_err(unreadable),
        }?;
        let options = kube::config::KubeConfigOptions { context: context.clone(), ..Default::default() };
        kube::Config::from_custom_kubeconfig(read, &options)
            .await
            .map_err(|source| ClientError::Unusable { context: context.clone(), source })
    }
}

/// A client for `config`. (The controller builds its own, metered, after [`install_crypto`].)
pub fn connect(config: kube::Config) -> Result<kube::Client, ClientError> {
    install_crypto();
    kube::Client::try_from(config).map_err(ClientError::Connect)
}

/// `config`, acting as ServiceAccount `account` of `namespace`: the API server authorizes each
/// request as that account (and its groups) once it has checked that `config`'s user may
/// `impersonate` it.
pub fn acting_as(config: &kube::Config, namespace: &str, account: &str) -> kube::Config {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{account}"));
    config.auth_info.impersonate_groups = None;
    config.default_namespace = namespace.to_string();
    config
}
