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

impl Kubeconfig {
    pub async fn load(&self) -> Result<kube::Config, String> {
        let Kubeconfig { file, context } = self;
        if file.is_none() && context.is_none() {
            return kube::Config::infer().await.map_err(|e| {
                format!("no cluster to talk to (KUBECONFIG, ~/.kube/config or in-cluster configuration): {e}")
            });
        }
        let read = match file {
            Some(file) => kube::config::Kubeconfig::read_from(file)
                .map_err(|e| format!("cannot read the kubeconfig {}: {e}", file.display())),
            None => kube::config::Kubeconfig::read().map_err(|e| format!("cannot read the kubeconfig: {e}")),
        }?;
        let options = kube::config::KubeConfigOptions { context: context.clone(), ..Default::default() };
        kube::Config::from_custom_kubeconfig(read, &options).await.map_err(|e| match context {
            Some(context) => format!("cannot use context `{context}` of the kubeconfig: {e}"),
            None => format!("cannot use the kubeconfig: {e}"),
        })
    }
}

/// A client for `config`. (The controller builds its own, metered, after [`install_crypto`].)
pub fn connect(config: kube::Config) -> Result<kube::Client, kube::Error> {
    install_crypto();
    kube::Client::try_from(config)
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
