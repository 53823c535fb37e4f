//! How the controller was asked to run: its settings, leader election or shards. Plain data,
//! filled by `deployster controller`'s flags, as is what runs resource types
//! ([`crate::executors::ExecutorPlan`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How the controller runs passes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Local program types (`./x`, `/x`) run code of the Manifest author's choosing inside the
    /// controller; refused unless set.
    pub allow_local_programs: bool,
    /// How many deployment-log entries each object keeps in `status.history`.
    pub history_limit: usize,
    /// How long a Pipeline's step waits for its Manifest to be Ready.
    pub pipeline_step_timeout: Duration,
    /// Where plugs are materialized (one directory per object).
    pub plug_root: PathBuf,
    /// Programs run at once within one pass.
    pub parallelism: usize,
    /// How long program invocations may run.
    pub timeouts: crate::engine::context::Timeouts,
    /// What a Manifest's plugs become: files, or volumes of the Pods that image types run as.
    pub plugs: Plugs,
    /// Fingerprints sensitive values in the statuses' logs (`--fingerprint-key-file`).
    pub fingerprint_key: Option<crate::engine::mask::FingerprintKey>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allow_local_programs: false,
            history_limit: 50,
            pipeline_step_timeout: Duration::from_secs(30 * 60),
            plug_root: std::env::temp_dir().join("deployster-controller"),
            parallelism: 4,
            timeouts: crate::engine::context::Timeouts::default(),
            plugs: Plugs::Files,
            fingerprint_key: None,
        }
    }
}

/// Leader election, when more than one replica may run.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub lease_name: String,
    /// Default: the namespace of the controller's own kubeconfig context or pod.
    pub lease_namespace: Option<String>,
    pub lease_duration: Duration,
    /// Instead of one leader, replicas share the objects over this many shards: the Leases
    /// are `<lease_name>-member-<id>` and `<lease_name>-shard-<n>`.
    pub shards: Option<u32>,
    /// The Pod this controller runs in, when it does.
    pub pod: Option<OwnPod>,
}

/// The controller's own Pod (the chart passes it through the downward API).
#[derive(Debug, Clone)]
pub struct OwnPod {
    pub name: String,
    pub uid: String,
}

impl OwnPod {
    pub(super) fn owner_reference(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }
}

/// How `deployster controller` was asked to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Watch these namespaces; all when empty.
    pub namespaces: Vec<String>,
    /// Objects reconciled at once.
    pub concurrency: u16,
    /// After SIGTERM, how long running passes may go on before their actions are cancelled.
    pub shutdown_grace: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    pub leader_election: Option<LeaderElection>,
    pub settings: Settings,
}

/// What a Manifest's plugs become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugs {
    /// Files the controller writes for the types that run beside it (built-ins, local
    /// programs, Docker containers). A PersistentVolumeClaim cannot be one.
    Files,
    /// Volumes of the Pods that image types run as: the controller reads the Secrets and
    /// ConfigMaps (for the revision's hash, and to say at once when one is missing) but writes
    /// nothing of them anywhere.
    Volumes,
}

/// This machine's name (the Pod's, in a cluster): the replica's identity in events and metrics.
pub fn hostname() -> Option<String> {
    nix::unistd::gethostname().ok().map(|h| h.to_string_lossy().into_owned())
}
