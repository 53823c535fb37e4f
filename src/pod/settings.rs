//! What the Pods of one pass are made with (its [`PodScope`]: namespace, ServiceAccount,
//! owner, options) and how every Pod is made and watched ([`PodSettings`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::crd::PodOptions;
use crate::engine::executor::DEFAULT_OUTPUT_LIMIT;

/// Where and as whom the Pods of one pass run ([`super::executor::PodRuntime::for_pass`]): for the controller, its Manifest's namespace,
/// `spec.serviceAccountName` and `spec.pod`, and the Manifest as their owner.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodScope {
    pub namespace: String,
    /// The ServiceAccount the Pods run as; the namespace's `default` when `None`.
    pub service_account: Option<String>,
    /// The object that owns every Pod and Secret (they go with it), when there is one.
    pub owner: Option<OwnerReference>,
    /// Resources, node selection, the user, pull secrets besides the ServiceAccount's.
    pub options: PodOptions,
    /// Labels for every Pod and Secret besides Deployster's own (the controller's name the
    /// Manifest, so that [`PodExecutor::sweep`] finds what an earlier pass of it left).
    pub labels: BTreeMap<String, String>,
}

impl PodScope {
    pub fn new(namespace: impl Into<String>) -> PodScope {
        PodScope { namespace: namespace.into(), ..PodScope::default() }
    }
}

/// How the Pods are made and watched.
#[derive(Debug, Clone)]
pub struct PodSettings {
    /// The image that carries the helper (the controller's own).
    pub helper_image: String,
    /// Registries (`host:port`) spoken to over plain HTTP besides loopback ones.
    pub insecure_registries: Vec<String>,
    /// Registries whose image configs are read at another endpoint than their name.
    pub registry_endpoints: Vec<super::registry::Endpoint>,
    /// A Pod the scheduler cannot place fails after this long, with the scheduler's message.
    pub schedule_timeout: Duration,
    /// An image the node cannot pull fails after this long, naming the image.
    pub pull_timeout: Duration,
    /// A scheduled Pod whose program has not started (a volume that cannot mount) fails after
    /// this long.
    pub start_timeout: Duration,
    /// Between SIGTERM and SIGKILL for a Pod stopped before it ended.
    pub kill_grace: Duration,
    /// Each captured stream's bound.
    pub output_limit: usize,
    /// Quota refusals at create are retried this many times, with backoff.
    pub create_retries: u32,
    /// Image types run in warm runners ([`super::runner`]) that end after this long unused;
    /// `None`: a Pod per invocation.
    pub runner_idle: Option<Duration>,
}

impl PodSettings {
    /// The defaults, with the helper from `helper_image`.
    pub fn new(helper_image: impl Into<String>) -> PodSettings {
        PodSettings {
            helper_image: helper_image.into(),
            insecure_registries: Vec::new(),
            registry_endpoints: Vec::new(),
            schedule_timeout: Duration::from_secs(300),
            pull_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(300),
            kill_grace: Duration::from_secs(5),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            create_retries: 4,
            runner_idle: None,
        }
    }
}
