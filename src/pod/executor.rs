//! The Pod executor: each invocation of an image type (init, state, an action, delete) is a
//! short-lived Pod in the namespace, and what its program printed comes back whole and verified.
//!
//! One invocation: resolve the image to a digest and its entrypoint ([`super::registry`]); put
//! the request in an immutable Secret; create the Pod ([`super::spec`]) and hand the Secret to
//! it (owner reference); watch the Pod until its program starts, failing fast on what will not
//! get better (an image that cannot be pulled, a Pod that cannot be scheduled or started);
//! follow its log — re-opened from the last line read whenever the stream ends early — taking
//! stdout frames and stderr lines as they come; once the Pod has ended, hold the frames against
//! the helper's record ([`super::frames`]); delete the Pod and the Secret.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::entry::Entry;
use super::frames::{self, FrameError, Split};
use super::registry::{Credentials, ImageRun, Registry, read_docker_config};
use super::spec::{self, OWNER_LABEL, PlugSource, PodInvocation, PodPlug};
use crate::crd::PodOptions;
use crate::engine::executor::init_cache::{InitAnswers, InitKey};
use crate::engine::executor::output::Capture;
use crate::engine::executor::process::BUILTIN_SUBCOMMAND;
use crate::engine::executor::{DEFAULT_OUTPUT_LIMIT, ExecError, Executor, Exit, Invocation, Outcome, Stream};
use crate::engine::typeref::TypeRef;

/// The label that names an invocation's run: what [`Executor::stop_run`] selects by.
pub const RUN_LABEL: &str = "deployster.io/run-id";
/// The value of [`OWNER_LABEL`] on every Pod and Secret of this executor.
pub const OWNER_VALUE: &str = "deployster";
/// The largest request a Secret carries (a Secret holds at most 1 MiB).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024 - 4096;
/// The user a type's program runs as when its image names no numeric non-root user.
pub const DEFAULT_UID: i64 = 65532;

/// Where and as whom the Pods of one pass run: for the controller, its Manifest's namespace,
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
    /// The scope of a pass that was given none ([`PodExecutor::enter`]): the CLI's one
    /// namespace. `None` in the controller, where each pass runs in its Manifest's.
    pub scope: Option<PodScope>,
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
}

impl PodSettings {
    /// Pods in `namespace` unless a pass is given its own scope.
    pub fn new(namespace: impl Into<String>, helper_image: impl Into<String>) -> PodSettings {
        PodSettings { scope: Some(PodScope::new(namespace)), ..PodSettings::scoped_per_pass(helper_image) }
    }

    /// Every pass must be given its scope ([`PodExecutor::enter`]).
    pub fn scoped_per_pass(helper_image: impl Into<String>) -> PodSettings {
        PodSettings {
            scope: None,
            helper_image: helper_image.into(),
            insecure_registries: Vec::new(),
            registry_endpoints: Vec::new(),
            schedule_timeout: Duration::from_secs(300),
            pull_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(300),
            kill_grace: Duration::from_secs(5),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            create_retries: 4,
        }
    }
}

/// Runs image types as Pods.
pub struct PodExecutor {
    client: Client,
    settings: PodSettings,
    registry: Registry,
    init_cache: InitAnswers,
    /// What a pass knows of its namespace (credentials), read on its first invocation.
    passes: Mutex<lru::LruCache<String, Arc<Credentials>>>,
    /// The scopes of the passes running now, by run id.
    scopes: Mutex<std::collections::HashMap<String, Arc<PodScope>>>,
    /// How many times each (pass, resource, phase) ran: a Pod name is never reused.
    attempts: Mutex<lru::LruCache<(String, String, String), u32>>,
}

/// Why a Pod failed, as a reason and a sentence.
fn pod_error(reason: &'static str, message: impl Into<String>) -> ExecError {
    ExecError::Pod { reason, message: message.into() }
}

fn api_error(step: &str, error: kube::Error) -> ExecError {
    let message = match &error {
        kube::Error::Api(status) => format!("{step}: {} ({})", status.message, status.code),
        other => format!("{step}: {other}"),
    };
    pod_error("KubernetesApi", message)
}

impl PodExecutor {
    pub fn new(client: Client, settings: PodSettings) -> PodExecutor {
        let registry = Registry::new(&settings.insecure_registries, &settings.registry_endpoints);
        let kept = |n| NonZeroUsize::new(n).expect("non-zero");
        PodExecutor {
            client,
            settings,
            registry,
            init_cache: InitAnswers::default(),
            passes: Mutex::new(lru::LruCache::new(kept(1024))),
            scopes: Mutex::default(),
            attempts: Mutex::new(lru::LruCache::new(kept(65536))),
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn secrets(&self, namespace: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Runs the Pods of pass `run_id` in `scope` until the guard is dropped.
    pub fn enter(self: &Arc<Self>, run_id: &str, scope: PodScope) -> ScopeGuard {
        self.scopes.lock().expect("scopes lock").insert(run_id.to_string(), Arc::new(scope));
        ScopeGuard { executor: self.clone(), run_id: run_id.to_string() }
    }

    /// Stops and deletes every Pod (and request Secret) of Deployster's in `namespace` whose
    /// labels include `selector` (`key=value,…`), waiting until the Pods are gone: what a
    /// crashed process or an earlier leader left running. How many running Pods it stopped.
    pub async fn sweep(&self, namespace: &str, selector: &str) -> Result<usize, ExecError> {
        let selector = format!("{OWNER_LABEL}={OWNER_VALUE},{selector}");
        let listed = ListParams::default().labels(&selector);
        let pods = self.pods(namespace).list(&listed).await.map_err(|e| api_error("listing Pods", e))?;
        // A Pod that ended runs nothing: deleted, not waited for. One that may still run its
        // program (even one being deleted, within its grace period) is waited for.
        let (ended, live): (Vec<Pod>, Vec<Pod>) = pods.items.into_iter().partition(ended);
        let stopping = live.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
        let grace = self.settings.kill_grace;
        let names = |pods: Vec<Pod>| pods.into_iter().filter_map(|p| p.metadata.name).collect::<Vec<String>>();
        let live = names(live);
        futures::future::join_all(live.iter().map(|name| self.delete_and_wait(namespace, name, grace))).await;
        for name in names(ended.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()) {
            match self.pods(namespace).delete(&name, &DeleteParams::background()).await {
                Err(e) if !is_not_found(&e) => return Err(api_error("deleting an ended Pod", e)),
                _ => {}
            }
        }
        // One by one: fewer rights than a collection's deletion, and no answer body to read.
        let secrets = self.secrets(namespace);
        let requests = secrets.list_metadata(&listed).await.map_err(|e| api_error("listing request Secrets", e))?;
        for name in requests.items.into_iter().filter_map(|s| s.metadata.name) {
            match secrets.delete(&name, &DeleteParams::background()).await {
                Err(e) if !is_not_found(&e) => return Err(api_error("deleting a request Secret", e)),
                _ => {}
            }
        }
        Ok(stopping)
    }

    /// Where the Pods of pass `run_id` run.
    fn scope(&self, run_id: &str) -> Result<Arc<PodScope>, ExecError> {
        if let Some(scope) = self.scopes.lock().expect("scopes lock").get(run_id) {
            return Ok(scope.clone());
        }
        match &self.settings.scope {
            Some(scope) => Ok(Arc::new(scope.clone())),
            None => Err(ExecError::Unavailable(format!(
                "pass {run_id} was given no namespace to run its Pods in (a bug: the controller enters each pass)"
            ))),
        }
    }

    /// The pass's registry credentials: from the ServiceAccount's pull secrets and the
    /// configured ones. A ServiceAccount that does not exist fails here, before any Pod.
    async fn credentials(&self, pass: &str, scope: &PodScope) -> Result<Arc<Credentials>, ExecError> {
        if let Some(known) = self.passes.lock().expect("passes lock").get(pass) {
            return Ok(known.clone());
        }
        let namespace = &scope.namespace;
        let account = scope.service_account.as_deref().unwrap_or("default");
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let mut names: Vec<String> = scope.options.image_pull_secrets.iter().map(|r| r.name.clone()).collect();
        match accounts.get_opt(account).await.map_err(|e| api_error("reading the ServiceAccount", e))? {
            Some(found) => names.extend(found.image_pull_secrets.unwrap_or_default().into_iter().map(|r| r.name)),
            None => {
                return Err(pod_error(
                    "ServiceAccountNotFound",
                    format!("the ServiceAccount `{account}` does not exist in namespace `{namespace}`"),
                ));
            }
        }
        let mut credentials = Credentials::new();
        for name in names {
            let secret = self
                .secrets(namespace)
                .get_opt(&name)
                .await
                .map_err(|e| api_error("reading an image pull secret", e))?
                .ok_or_else(|| {
                    pod_error(
                        "PullSecretNotFound",
                        format!("the image pull secret `{name}` does not exist in `{namespace}`"),
                    )
                })?;
            let data = secret.data.unwrap_or_default();
            let Some(config) = data.get(".dockerconfigjson").or_else(|| data.get(".dockercfg")) else { continue };
            read_docker_config(&config.0, &mut credentials)
                .map_err(|why| pod_error("PullSecretInvalid", format!("the image pull secret `{name}`: {why}")))?;
        }
        let credentials = Arc::new(credentials);
        self.passes.lock().expect("passes lock").put(pass.to_string(), credentials.clone());
        Ok(credentials)
    }

    /// The plugs of `invocation` as the Pod mounts them: objects of the namespace, each
    /// checked to be there (a Pod whose volume cannot mount would only wait).
    async fn plugs(&self, invocation: &Invocation, namespace: &str) -> Result<Vec<PodPlug>, ExecError> {
        let mut plugs = Vec::new();
        for mount in &invocation.mounts {
            let Some(source) = &mount.cluster else {
                return Err(pod_error(
                    "PlugUnavailable",
                    format!(
                        "plug `{}` is a path on this machine ({}), which a Pod cannot mount: name a Secret, a ConfigMap \
                         or a PersistentVolumeClaim of namespace `{namespace}` instead",
                        mount.name,
                        mount.host_path.display(),
                    ),
                ));
            };
            let client = self.client.clone();
            let keys = |data: Option<Vec<String>>| data.unwrap_or_default();
            let found: Option<Vec<String>> = match source {
                PlugSource::Secret { name, .. } => Api::<Secret>::namespaced(client, namespace)
                    .get_opt(name)
                    .await
                    .map(|s| s.map(|s| keys(s.data.map(|d| d.into_keys().collect())))),
                PlugSource::ConfigMap { name, .. } => Api::<ConfigMap>::namespaced(client, namespace)
                    .get_opt(name)
                    .await
                    .map(|c| c.map(|c| keys(c.data.map(|d| d.into_keys().collect())))),
                PlugSource::Claim { name } => Api::<PersistentVolumeClaim>::namespaced(client, namespace)
                    .get_opt(name)
                    .await
                    .map(|c| c.map(|_| Vec::new())),
            }
            .map_err(|e| api_error(&format!("reading plug `{}`", mount.name), e))?;
            let refuse = |why: String| pod_error("PlugUnavailable", format!("plug `{}`: {why}", mount.name));
            let Some(present) = found else {
                return Err(refuse(format!("{} does not exist in namespace `{namespace}`", source.describe())));
            };
            if let PlugSource::Secret { key: Some(key), .. } | PlugSource::ConfigMap { key: Some(key), .. } = source
                && !present.contains(key)
            {
                return Err(refuse(format!("{} has no key `{key}`", source.describe())));
            }
            plugs.push(PodPlug {
                name: mount.name.clone(),
                container_path: mount.container_path.clone(),
                source: source.clone(),
            });
        }
        Ok(plugs)
    }

    /// A Pod name this executor has not used: the invocation's, with the number of times the
    /// same resource and phase already ran in this pass.
    fn next_name(&self, invocation: &Invocation) -> String {
        let labels = &invocation.labels;
        let key = (labels.run_id.clone(), labels.resource.clone(), labels.phase.clone());
        let mut attempts = self.attempts.lock().expect("attempts lock");
        let attempt = attempts.get(&key).map_or(0, |n| n + 1);
        attempts.put(key, attempt);
        spec::pod_name(&labels.run_id, &labels.resource, &labels.phase, attempt)
    }

    /// Runs `invocation` in a Pod, from creating it to deleting it.
    async fn run(&self, invocation: &Invocation, image: &ImageRun, scope: &PodScope) -> Result<Outcome, ExecError> {
        if invocation.stdin.len() > MAX_REQUEST_BYTES {
            return Err(pod_error(
                "RequestTooLarge",
                format!(
                    "the request is {} bytes; a Pod's request travels in a Secret, which holds at most {} bytes",
                    invocation.stdin.len(),
                    MAX_REQUEST_BYTES
                ),
            ));
        }
        let namespace = scope.namespace.as_str();
        let plugs = self.plugs(invocation, namespace).await?;
        let started = Instant::now();
        let name = self.next_name(invocation);
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let mut labels = scope.labels.clone();
        labels.extend([
            (OWNER_LABEL.to_string(), OWNER_VALUE.to_string()),
            (RUN_LABEL.to_string(), label_value(&invocation.labels.run_id)),
        ]);
        let pod_invocation = PodInvocation {
            namespace: namespace.to_string(),
            name: name.clone(),
            image: image.pinned.clone(),
            helper_image: self.settings.helper_image.clone(),
            entry: Entry {
                nonce: nonce.clone(),
                request: spec::request_path(),
                termination_log: "/dev/termination-log".into(),
                program: image.program(invocation.entrypoint.as_deref(), &invocation.args),
                done: None,
            },
            service_account: scope.service_account.clone(),
            plugs,
            deadline: invocation.timeout,
            labels,
            owner: scope.owner.clone(),
            run_as_user: scope.options.run_as_user.or(image.non_root_uid.is_none().then_some(DEFAULT_UID)),
            options: scope.options.clone(),
        };
        let secret_name = format!("{name}-request");
        let created = self.create(&pod_invocation, &secret_name, &invocation.stdin, &invocation.env).await;
        let result = match created {
            Ok(()) => {
                let mut work = std::pin::pin!(self.follow(namespace, &name, &nonce, invocation));
                let stopped = tokio::select! {
                    result = work.as_mut() => Ok(result),
                    () = tokio::time::sleep(invocation.timeout) => Err(ExecError::TimedOut(invocation.timeout)),
                    () = invocation.cancel.cancelled() => Err(ExecError::Cancelled),
                };
                match stopped {
                    Ok(result) => result,
                    Err(why) => {
                        // The program gets SIGTERM (the helper forwards it) and the grace to end;
                        // nothing of this invocation may run on once this returns.
                        self.delete_and_wait(namespace, &name, self.settings.kill_grace).await;
                        Err(why)
                    }
                }
            }
            Err(e) => Err(e),
        };
        self.delete(namespace, &name, &secret_name).await;
        result.map(|(exit, stdout, stderr)| Outcome { exit, stdout, stderr, elapsed: started.elapsed() })
    }

    /// Creates the request's Secret, the Pod, and makes the Pod the Secret's owner (so that
    /// the Secret goes with the Pod even if this process does not live to delete it).
    async fn create(
        &self,
        invocation: &PodInvocation,
        secret_name: &str,
        request: &[u8],
        env: &[(String, String)],
    ) -> Result<(), ExecError> {
        let (pods, secrets) = (self.pods(&invocation.namespace), self.secrets(&invocation.namespace));
        let mut secret = spec::request_secret(invocation, secret_name, OwnerReference::default(), request, env);
        secret.metadata.owner_references = invocation.owner.clone().map(|o| vec![o]);
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| api_error("creating the request's Secret", e))?;
        let pod = spec::pod(invocation, secret_name);
        let mut delay = Duration::from_millis(500);
        let mut retries = 0;
        let created = loop {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(created) => break created,
                Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains("exceeded quota") => {
                    if retries >= self.settings.create_retries {
                        let _ = secrets.delete(secret_name, &DeleteParams::default()).await;
                        return Err(pod_error(
                            "QuotaExceeded",
                            format!("the namespace's quota refused the Pod {} times: {}", retries + 1, status.message),
                        ));
                    }
                    tracing::info!(pod = %invocation.name, "quota refused the Pod; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    retries += 1;
                }
                Err(e) => {
                    let _ = secrets.delete(secret_name, &DeleteParams::default()).await;
                    return Err(api_error("creating the Pod", e));
                }
            }
        };
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: invocation.name.clone(),
            uid: created.metadata.uid.unwrap_or_default(),
            ..OwnerReference::default()
        };
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        // Not fatal: the Secret is deleted with the Pod below in any case.
        if let Err(e) = secrets.patch(secret_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::warn!(secret = secret_name, "could not hand the request's Secret to its Pod: {e}");
        }
        Ok(())
    }

    /// Waits for the Pod's program to start, then follows its log until the Pod has ended;
    /// the exit, stdout (verified) and stderr.
    async fn follow(
        &self,
        namespace: &str,
        name: &str,
        nonce: &str,
        invocation: &Invocation,
    ) -> Result<(Exit, Vec<u8>, Vec<u8>), ExecError> {
        let pods = self.pods(namespace);
        let mut watch = kube::runtime::watcher::watch_object(pods.clone(), name).boxed();
        let created = Instant::now();
        let mut pod: Option<Pod> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        // Until the program runs: the log API has nothing of it to give.
        loop {
            if let Some(current) = &pod {
                match progress(&self.settings, current, created.elapsed())? {
                    Progress::Waiting => {}
                    Progress::Started | Progress::Ended => break,
                }
            }
            tokio::select! {
                event = watch.next() => pod = Some(observed(event, name)?),
                _ = tick.tick() => {}
            }
        }
        let mut log = LogFollower::new(nonce, self.settings.output_limit, invocation);
        loop {
            let done = pod.as_ref().is_some_and(ended);
            if log.read(&pods, name, !done).await? {
                // The log told of the program's end before the watch: the Pod as it is now, so
                // that a deletion by someone else (whose SIGTERM ended the program) is seen.
                let now = pods.get_opt(name).await.map_err(|e| api_error("reading the Pod", e))?;
                pod = Some(now.ok_or_else(|| {
                    pod_error("PodDeleted", format!("the Pod {name} was deleted by someone else while its program ran"))
                })?);
                break;
            }
            if done {
                break;
            }
            // The stream ended with the Pod running (a restarted kubelet or API server, a log
            // rotated under it): go on from where it stopped once the Pod changes or soon.
            // The watch says when it ended; no read of the Pod per turn.
            tokio::select! {
                event = watch.next() => pod = Some(observed(event, name)?),
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
        let pod = pod.expect("the loop ends on a Pod");
        // The runtime copies a container's output into its log on its own, and may not have
        // copied all of it when the Pod is seen ended (seen under load on a real kubelet: the
        // record named a frame the log did not hold yet). The record says what there is: read
        // again, briefly, until the log holds it all.
        for wait in [100, 250, 500, 1000, 2000] {
            if !log.still_arriving(&pod) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(wait)).await;
            log.read(&pods, name, false).await?;
        }
        log.finish(&pod, name)
    }
}

/// Where the Pod is on its way to running its program; an error for what will not get
/// better.
fn progress(settings: &PodSettings, pod: &Pod, waited: Duration) -> Result<Progress, ExecError> {
    if ended(pod) {
        return Ok(Progress::Ended);
    }
    let status = pod.status.clone().unwrap_or_default();
    let main = status.container_statuses.as_ref().and_then(|s| s.iter().find(|c| c.name == "main"));
    if let Some(state) = main.and_then(|c| c.state.as_ref())
        && (state.running.is_some() || state.terminated.is_some())
    {
        return Ok(Progress::Started);
    }
    let helper = status.container_statuses.as_ref().and_then(|s| s.iter().find(|c| c.name == "helper"));
    for (container, which) in [(helper, "the helper image"), (main, "the type's image")] {
        let Some(container) = container else { continue };
        let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        let reason = waiting.reason.as_deref().unwrap_or("");
        let message = waiting.message.as_deref().unwrap_or("");
        let image = container.image.as_str();
        match reason {
            "ErrImagePull" | "ImagePullBackOff" if waited >= settings.pull_timeout => {
                return Err(pod_error(
                    "ImagePullFailed",
                    format!(
                        "the node could not pull {which} `{image}` within {:?}: {reason}: {message}",
                        settings.pull_timeout
                    ),
                ));
            }
            "InvalidImageName" | "ErrImageNeverPull" => {
                return Err(pod_error("ImagePullFailed", format!("{which} `{image}`: {reason}: {message}")));
            }
            "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
                return Err(pod_error("ContainerNotStarted", format!("{which} `{image}`: {reason}: {message}")));
            }
            _ => {}
        }
    }
    // The helper holds until the type's container is done: ended before that one started, it
    // failed (its copy, or its `postStart` hook, after which the kubelet kills it).
    if let Some(helper) = helper
        && let Some(done) = helper.state.as_ref().and_then(|s| s.terminated.as_ref())
    {
        return Err(pod_error(
            "HelperFailed",
            format!(
                "the helper's container (`{}`) ended with code {} before the type's started: {} {}",
                helper.image,
                done.exit_code,
                done.reason.as_deref().unwrap_or(""),
                done.message.as_deref().unwrap_or("")
            ),
        ));
    }
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    if let Some(condition) = unschedulable {
        if waited >= settings.schedule_timeout {
            return Err(pod_error(
                "Unschedulable",
                format!(
                    "no node took the Pod within {:?}: {}",
                    settings.schedule_timeout,
                    condition.message.as_deref().unwrap_or("the scheduler gave no reason")
                ),
            ));
        }
        return Ok(Progress::Waiting);
    }
    let scheduled = status.conditions.iter().flatten().any(|c| c.type_ == "PodScheduled" && c.status == "True");
    if scheduled && waited >= settings.start_timeout {
        let why = [helper, main]
            .into_iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
            .map(|w| format!("{}: {}", w.reason.as_deref().unwrap_or(""), w.message.as_deref().unwrap_or("")))
            .next()
            .unwrap_or_else(|| "no reason given (a volume that cannot mount shows in the Pod's events)".into());
        return Err(pod_error(
            "ContainerNotStarted",
            format!("the Pod was scheduled but its program had not started after {:?}: {why}", settings.start_timeout),
        ));
    }
    if !scheduled && waited >= settings.schedule_timeout {
        return Err(pod_error(
            "Unschedulable",
            format!("the Pod was not scheduled within {:?}", settings.schedule_timeout),
        ));
    }
    Ok(Progress::Waiting)
}

impl PodExecutor {
    /// Deletes the Pod and the request's Secret, trying again for a while when the API server
    /// fails to answer: nothing of an invocation is left behind.
    async fn delete(&self, namespace: &str, name: &str, secret_name: &str) {
        let background = DeleteParams::background();
        for attempt in 0..5u32 {
            let pod = self.pods(namespace).delete(name, &background).await.map(|_| ());
            let secret = self.secrets(namespace).delete(secret_name, &background).await.map(|_| ());
            let failed: Vec<kube::Error> =
                [pod, secret].into_iter().filter_map(Result::err).filter(|e| !is_not_found(e)).collect();
            if failed.is_empty() {
                return;
            }
            tracing::warn!(pod = name, attempt, "could not delete the Pod or its request's Secret: {failed:?}");
            tokio::time::sleep(Duration::from_millis(200) * 2u32.pow(attempt)).await;
        }
    }

    /// Deletes the Pod with `grace` for its program to end, and waits until it is gone.
    async fn delete_and_wait(&self, namespace: &str, name: &str, grace: Duration) {
        let params = DeleteParams { grace_period_seconds: Some(grace.as_secs() as u32), ..DeleteParams::background() };
        match self.pods(namespace).delete(name, &params).await {
            Err(e) if is_not_found(&e) => return,
            Err(e) => tracing::warn!(pod = name, "could not delete the Pod: {e}"),
            Ok(_) => {}
        }
        let gone = async {
            let mut watch = kube::runtime::watcher::watch_object(self.pods(namespace), name).boxed();
            while let Some(event) = watch.next().await {
                if matches!(event, Ok(None)) {
                    return;
                }
            }
        };
        if tokio::time::timeout(grace + Duration::from_secs(60), gone).await.is_err() {
            tracing::warn!(
                pod = name,
                "the Pod was still there {:?} after its deletion",
                grace + Duration::from_secs(60)
            );
        }
    }
}

impl PodExecutor {
    /// Runs a call to built-in `name` (one that [`TypeRef::is_file_builtin`]) in a Pod of
    /// the helper's image, which is deployster: `deployster __type NAME ARGS`, on the plug it
    /// must stay within ([`crate::builtins::confined`]).
    async fn run_builtin(&self, name: &str, invocation: &Invocation) -> Result<Outcome, ExecError> {
        crate::builtins::confined(&invocation.stdin)
            .map_err(|why| pod_error("OutsidePlug", format!("builtin/{name}: {why}")))?;
        let pass = invocation.labels.run_id.clone();
        let scope = self.scope(&pass)?;
        // A ServiceAccount that does not exist fails here, as for an image.
        self.credentials(&pass, &scope).await?;
        let helper = ImageRun {
            pinned: self.settings.helper_image.clone(),
            entrypoint: vec![spec::HELPER_BINARY.into(), BUILTIN_SUBCOMMAND.into(), name.into()],
            cmd: Vec::new(),
            // Set explicitly (the image's own user), so that a claim's volume is made writable.
            non_root_uid: None,
        };
        self.run(invocation, &helper, &scope).await
    }
}

/// Forgets a pass's scope when dropped.
pub struct ScopeGuard {
    executor: Arc<PodExecutor>,
    run_id: String,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        self.executor.scopes.lock().expect("scopes lock").remove(&self.run_id);
    }
}

/// Where a Pod is.
enum Progress {
    Waiting,
    Started,
    Ended,
}

/// The Pod has ended, or the type's container has: the helper's ends a moment later (when its
/// program could not mark itself done, only with the Pod's deletion), and is not waited for.
fn ended(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        || status
            .container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == "main" && c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// A label value: the text when it is one, else its digest.
fn label_value(text: &str) -> String {
    let valid = text.len() <= 63
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && text.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && text.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    if valid {
        return text.to_string();
    }
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(text.as_bytes())[..16])
}

/// The Pod a watch event shows; an error when the Pod is gone or the watch failed.
fn observed(event: Option<Result<Option<Pod>, kube::runtime::watcher::Error>>, name: &str) -> Result<Pod, ExecError> {
    match event {
        Some(Ok(Some(pod))) => Ok(pod),
        Some(Ok(None)) | None => {
            Err(pod_error("PodDeleted", format!("the Pod {name} was deleted by someone else before its program ended")))
        }
        Some(Err(e)) => Err(pod_error("KubernetesApi", format!("watching the Pod {name}: {e}"))),
    }
}

/// `at` down to its whole second: where a re-opened log starts. The API takes `sinceTime` in
/// whole seconds and kube rounds to the *nearest* one, which would lose what the program printed
/// in the second half of that second; the lines before `at` that the earlier second brings back
/// are skipped by their timestamps.
fn whole_second(at: Timestamp) -> Timestamp {
    use k8s_openapi::jiff::{RoundMode, TimestampRound, Unit};
    at.round(TimestampRound::new().smallest(Unit::Second).mode(RoundMode::Floor)).expect("seconds divide a day")
}

/// Reads a Pod's log as it grows: frames to stdout, other lines to stderr, each line once.
struct LogFollower<'a> {
    nonce: &'a str,
    /// Each stream's bound.
    limit: usize,
    split: Split,
    stdout: Capture,
    stderr: Capture,
    /// Frames handed to `stdout` so far (in order).
    delivered: u64,
    /// The last line's timestamp, and how many lines carried it: where a re-opened log goes on.
    since: Option<Timestamp>,
    at_since: usize,
}

impl<'a> LogFollower<'a> {
    fn new(nonce: &'a str, limit: usize, invocation: &Invocation) -> Self {
        LogFollower {
            nonce,
            limit,
            split: Split::default(),
            stdout: Capture::new(Stream::Stdout, limit, invocation.sink.clone()),
            stderr: Capture::new(Stream::Stderr, limit, invocation.sink.clone()),
            delivered: 0,
            since: None,
            at_since: 0,
        }
    }

    /// Reads the log from where it was left until the stream ends, or until the program's
    /// record has come and the output read verifies against it: whether it has.
    async fn read(&mut self, pods: &Api<Pod>, name: &str, follow: bool) -> Result<bool, ExecError> {
        let params = self.params(follow);
        let stream = match pods.log_stream(name, &params).await {
            Ok(stream) => stream,
            // The container is not there to read yet (or any more): the next read tells.
            Err(kube::Error::Api(status)) if status.code == 400 => return Ok(false),
            Err(e) => return Err(api_error("reading the Pod's log", e)),
        };
        let mut lines = stream.lines();
        let mut skip_at_since = self.at_since;
        while let Some(line) =
            lines.try_next().await.map_err(|e| pod_error("KubernetesApi", format!("reading the Pod's log: {e}")))?
        {
            let (stamp, text) =
                match line.split_once(' ').and_then(|(t, rest)| Some((t.parse::<Timestamp>().ok()?, rest))) {
                    Some(parsed) => parsed,
                    None => (self.since.unwrap_or_default(), line.as_str()),
                };
            match self.since {
                Some(since) if stamp < since => continue,
                Some(since) if stamp == since && skip_at_since > 0 => {
                    skip_at_since -= 1;
                    continue;
                }
                Some(since) if stamp == since => self.at_since += 1,
                _ => (self.since, self.at_since) = (Some(stamp), 1),
            }
            self.take(text)?;
            if self.complete() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the log has given the program's record and all the output it names: the program
    /// has ended (the record is the helper's last line), which the log tells before the
    /// kubelet's next relist and before a followed log's stream ends (each up to a second on).
    fn complete(&self) -> bool {
        self.split.record.is_some() && frames::reassemble(&self.split, "", self.nonce).is_ok()
    }

    /// What the next read asks for: the main container's log, with timestamps, from the
    /// start of the last line's second.
    fn params(&self, follow: bool) -> LogParams {
        LogParams {
            container: Some("main".into()),
            follow,
            timestamps: true,
            since_time: self.since.map(whole_second),
            ..LogParams::default()
        }
    }

    fn take(&mut self, line: &str) -> Result<(), ExecError> {
        let framed = self.split.take(line, self.nonce).map_err(|e| pod_error("OutputUnverified", e.to_string()))?;
        if !framed {
            self.stderr.push(line.as_bytes())?;
            self.stderr.push(b"\n")?;
            return Ok(());
        }
        while let Some(chunk) = self.split.chunks.get(&self.delivered) {
            self.stdout.push(chunk)?;
            self.delivered += 1;
        }
        Ok(())
    }

    /// Whether the ended Pod's record names output (or, without a termination message, the
    /// record itself) that the log has not given yet, within the bound: what a runtime that
    /// copies a container's output behind its exit has still to write.
    fn still_arriving(&self, pod: &Pod) -> bool {
        match frames::reassemble(&self.split, &termination_message(pod), self.nonce) {
            Err(FrameError::Lost { bytes, .. }) => bytes <= self.limit as u64,
            Err(FrameError::Record(_)) => self.split.record.is_none(),
            _ => false,
        }
    }

    /// The program's exit, its verified stdout and its stderr, once the Pod has ended.
    fn finish(self, pod: &Pod, name: &str) -> Result<(Exit, Vec<u8>, Vec<u8>), ExecError> {
        let status = pod.status.clone().unwrap_or_default();
        let main: Option<&ContainerStatus> =
            status.container_statuses.as_ref().and_then(|s| s.iter().find(|c| c.name == "main"));
        let terminated = main.and_then(|c| c.state.as_ref()).and_then(|s| s.terminated.clone());
        let termination = termination_message(pod);
        let _ = self.stdout.finish();
        let mut stderr = self.stderr.finish();
        // Kubernetes' own word on why the Pod or its container ended, when it is not the program's.
        let failed = status.phase.as_deref() == Some("Failed");
        let pod_reason = status.reason.clone().filter(|r| failed && !r.is_empty());
        let container_reason =
            terminated.as_ref().and_then(|t| t.reason.clone()).filter(|r| r != "Completed" && r != "Error");
        let verified = frames::reassemble(&self.split, &termination, self.nonce);
        let (record, stdout) = match verified {
            Ok(read) => read,
            // The record says the program printed past the bound: that is the failure, whatever
            // part of it the log kept (a runtime rotates a large log).
            Err(FrameError::Lost { bytes, .. }) if bytes > self.limit as u64 => {
                return Err(ExecError::OutputTooLarge { limit: self.limit, stream: "stdout" });
            }
            Err(e) => {
                let (reason, why) = match (&pod_reason, &container_reason) {
                    (Some(reason), _) => (reason.clone(), status.message.clone().unwrap_or_default()),
                    (None, Some(reason)) => {
                        (reason.clone(), format!("exit code {}", terminated.as_ref().map_or(0, |t| t.exit_code)))
                    }
                    (None, None) => {
                        let unverified = matches!(e, FrameError::Lost { .. } | FrameError::Digest | FrameError::Nonce);
                        let reason = if unverified { "OutputUnverified" } else { "NoRecord" };
                        return Err(pod_error(
                            reason,
                            format!("the Pod {name} ended ({}) but {e}", status.phase.as_deref().unwrap_or("?")),
                        ));
                    }
                };
                return Err(pod_error(
                    static_reason(&reason),
                    format!("the Pod {name} ended before its program did: {reason}: {why}"),
                ));
            }
        };
        if let Some(error) = &record.error {
            stderr.extend_from_slice(
                format!("deployster: the program could not be run in its Pod: {error}\n").as_bytes(),
            );
        }
        if let Some(reason) = container_reason.or(pod_reason) {
            stderr.extend_from_slice(format!("deployster: Kubernetes ended the container: {reason}\n").as_bytes());
        }
        let exit = match (record.code, record.signal) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Code(127),
        };
        // This executor deletes its Pods only once it stopped following them.
        if pod.metadata.deletion_timestamp.is_some() {
            return Err(pod_error(
                "PodDeleted",
                format!("the Pod {name} was deleted by someone else while its program ran (it ended with {exit})"),
            ));
        }
        Ok((exit, stdout, stderr))
    }
}

/// The termination message of the Pod's `main` container: the helper's record, when it could
/// write it.
fn termination_message(pod: &Pod) -> String {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let main = statuses.and_then(|s| s.iter().find(|c| c.name == "main"));
    let terminated = main.and_then(|c| c.state.as_ref()).and_then(|s| s.terminated.as_ref());
    terminated.and_then(|t| t.message.clone()).unwrap_or_default()
}

/// The reasons Kubernetes gives for a Pod or container that ended early, as the executor's.
fn static_reason(reason: &str) -> &'static str {
    match reason {
        "OOMKilled" => "OOMKilled",
        "Evicted" => "Evicted",
        "DeadlineExceeded" => "DeadlineExceeded",
        "ContainerCannotRun" | "StartError" => "ContainerNotStarted",
        _ => "PodFailed",
    }
}

#[async_trait]
impl Executor for PodExecutor {
    async fn preflight(&self, _programs: &[TypeRef]) -> Result<(), ExecError> {
        // The controller's passes each have their own namespace, checked on their first Pod.
        let Some(PodScope { namespace, .. }) = &self.settings.scope else { return Ok(()) };
        self.pods(namespace).list(&ListParams::default().limit(1)).await.map(|_| ()).map_err(|e| {
            ExecError::Unavailable(format!("cannot list Pods in namespace `{namespace}` of the cluster: {e}"))
        })
    }

    /// Deletes every Pod of run `run_id` and waits until they are gone.
    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        // Only the controller's executor has no scope for a run it was not given: a run of an
        // earlier controller process or leader. The controller sweeps every Pod of a Manifest's
        // earlier passes before the next starts (`controller::reconcile`), so none is left.
        let Ok(scope) = self.scope(run_id) else { return Ok(0) };
        self.sweep(&scope.namespace, &format!("{RUN_LABEL}={}", label_value(run_id))).await
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let image = match &invocation.program {
            TypeRef::Image(image) => image,
            TypeRef::Builtin(name) if invocation.program.is_file_builtin() => {
                let name = name.clone();
                return self.run_builtin(&name, &invocation).await;
            }
            other => return Err(ExecError::Unavailable(format!("the Pod executor cannot run {other}"))),
        };
        let pass = invocation.labels.run_id.clone();
        let scope = self.scope(&pass)?;
        let credentials = self.credentials(&pass, &scope).await?;
        let reference = image.to_string();
        let resolved = self
            .registry
            .resolve(&reference, &pass, &credentials)
            .await
            .map_err(|message| ExecError::Image { image: reference.clone(), message })?;
        let cache_key = (invocation.labels.phase == "init").then(|| {
            InitKey::of(&[resolved.pinned.as_bytes()], invocation.entrypoint.as_deref(), &invocation.args, &invocation)
        });
        self.init_cache.get_or_run(cache_key, self.run(&invocation, &resolved, &scope)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "dst-x"}, "status": status})).unwrap()
    }

    fn settings() -> PodSettings {
        PodSettings::new("team-a", "helper:1")
    }

    fn waiting(reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!({"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "main", "image": "r/type@sha256:1", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]})
    }

    fn failure(result: Result<Progress, ExecError>) -> (String, String) {
        match result {
            Err(e) => (e.reason().to_string(), e.to_string()),
            Ok(_) => panic!("expected a failure"),
        }
    }

    #[test]
    fn what_will_not_get_better_fails_and_names_its_cause() {
        let s = settings();
        let pull = pod(waiting("ImagePullBackOff", "manifest unknown"));
        assert!(matches!(progress(&s, &pull, Duration::from_secs(10)), Ok(Progress::Waiting)), "pulls get a minute");
        let (reason, text) = failure(progress(&s, &pull, Duration::from_secs(61)));
        assert_eq!(reason, "ImagePullFailed");
        assert!(text.contains("`r/type@sha256:1`") && text.contains("manifest unknown"), "{text}");
        let config = pod(waiting("CreateContainerConfigError", "secret \"db\" not found"));
        let (reason, text) = failure(progress(&s, &config, Duration::ZERO));
        assert_eq!(reason, "ContainerNotStarted");
        assert!(text.contains("secret \"db\" not found"), "{text}");
        let mounting = pod(waiting("ContainerCreating", ""));
        assert!(
            matches!(progress(&s, &mounting, Duration::from_secs(200)), Ok(Progress::Waiting)),
            "a slow pull is not a failure"
        );
        let (reason, _) = failure(progress(&s, &mounting, Duration::from_secs(301)));
        assert_eq!(reason, "ContainerNotStarted");
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available: node selector"}]}));
        assert!(matches!(progress(&s, &unschedulable, Duration::from_secs(200)), Ok(Progress::Waiting)));
        let (reason, text) = failure(progress(&s, &unschedulable, Duration::from_secs(301)));
        assert_eq!(reason, "Unschedulable");
        assert!(text.contains("0/1 nodes are available: node selector"), "{text}");
        let running = serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]});
        assert!(matches!(progress(&s, &pod(running), Duration::ZERO), Ok(Progress::Started)));
        assert!(matches!(
            progress(&s, &pod(serde_json::json!({"phase": "Failed"})), Duration::ZERO),
            Ok(Progress::Ended)
        ));
    }

    fn follower<'a>(invocation: &Invocation, nonce: &'a str, log: &str) -> LogFollower<'a> {
        let mut follower = LogFollower::new(nonce, 1 << 20, invocation);
        for line in log.lines() {
            follower.take(line).unwrap();
        }
        follower
    }

    /// An ended Pod whose record names output the log has not given yet is read again (the
    /// runtime copies output behind the container's exit); a complete log, a record past the
    /// bound (rotated away: no waiting brings it back), or a Pod with no record at all is not.
    #[test]
    fn output_the_record_names_but_the_log_lacks_is_still_arriving() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let mut record = frames::Record::of("n1", b"{\"status\": \"VALID\"}\n", 1);
        record.code = Some(1);
        let message = serde_json::to_string(&record).unwrap();
        let ended = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "message": message}}}]}));
        let mut log = follower(&invocation, "n1", "");
        assert!(log.still_arriving(&ended), "the record names a frame the log has not given");
        log.take(frames::frame("n1", 0, b"{\"status\": \"VALID\"}\n").trim_end()).unwrap();
        assert!(!log.still_arriving(&ended), "all there");
        assert!(log.finish(&ended, "dst-x").is_ok());

        let mut huge = frames::Record::of("n1", &[b'x'; 4096], 4);
        huge.code = Some(0);
        let rotated = pod(serde_json::json!({"phase": "Succeeded", "containerStatuses": [{"name": "main",
            "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "message": serde_json::to_string(&huge).unwrap()}}}]}));
        assert!(!LogFollower::new("n1", 1024, &invocation).still_arriving(&rotated), "past the bound");
        let no_record = pod(serde_json::json!({"phase": "Failed", "reason": "Evicted"}));
        assert!(follower(&invocation, "n1", "").still_arriving(&no_record), "the record may be in the log yet");
        let mut silent = frames::Record::of("n1", b"", 0);
        silent.code = Some(1);
        let logged = frames::record_line(&silent);
        assert!(!follower(&invocation, "n1", &logged).still_arriving(&no_record), "the logged record is all");
    }

    /// The log's record ends the wait for a running Pod only once the output it names is all
    /// there and verifies; another invocation's record, or a frame short, does not.
    #[test]
    fn the_log_s_record_with_all_its_output_is_the_program_s_end() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let (first, second) = (b"{\"status\": ".as_slice(), b"\"VALID\"}\n".as_slice());
        let mut record = frames::Record::of("n1", &[first, second].concat(), 2);
        record.code = Some(0);
        let mut log = follower(&invocation, "n1", &frames::frame("n1", 0, first));
        assert!(!log.complete(), "no record yet");
        let mut foreign = record.clone();
        foreign.nonce = "n0".into();
        log.take(frames::record_line(&foreign).trim_end()).unwrap();
        assert!(!log.complete(), "another invocation's record");
        log.take(frames::record_line(&record).trim_end()).unwrap();
        assert!(!log.complete(), "the record names a frame the log has not given");
        log.take(frames::frame("n1", 1, second).trim_end()).unwrap();
        assert!(log.complete());
        let running = pod(serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}));
        let (exit, stdout, _) = log.finish(&running, "dst-x").unwrap();
        assert_eq!((exit, stdout), (Exit::Code(0), b"{\"status\": \"VALID\"}\n".to_vec()));
    }

    #[test]
    fn kubernetes_reasons_for_an_early_end_are_the_failure() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let evicted = pod(serde_json::json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory."}));
        let err = follower(&invocation, "n1", "").finish(&evicted, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "Evicted");
        assert!(err.to_string().contains("low on resource: memory"), "{err}");
        let oom = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}));
        let err = follower(&invocation, "n1", "").finish(&oom, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "OOMKilled");
        let mut record = frames::Record::of("n1", &[b'x'; 2048], 2);
        record.code = Some(0);
        let part = format!("{}{}", frames::frame("n1", 0, &[b'x'; 1024]), frames::record_line(&record));
        let mut small = LogFollower::new("n1", 1500, &invocation);
        for line in part.lines() {
            small.take(line).unwrap();
        }
        let done = pod(serde_json::json!({"phase": "Succeeded"}));
        let err = small.finish(&done, "dst-x").unwrap_err();
        assert!(matches!(err, ExecError::OutputTooLarge { limit: 1500, stream: "stdout" }), "past the bound: {err}");
        let silent = pod(serde_json::json!({"phase": "Failed"}));
        let err = follower(&invocation, "n1", "Container main starting").finish(&silent, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "NoRecord", "placeholder log lines are never taken as output: {err}");
    }

    #[test]
    fn stdout_stderr_and_the_exit_come_back_from_the_log() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let mut record = frames::Record::of("n1", b"{\"status\": \"VALID\"}\n", 1);
        record.code = Some(0);
        let log = format!(
            "checking\n{}{}",
            frames::frame("n1", 0, b"{\"status\": \"VALID\"}\n"),
            frames::record_line(&record)
        );
        let done = pod(serde_json::json!({"phase": "Succeeded"}));
        let (exit, stdout, stderr) = follower(&invocation, "n1", &log).finish(&done, "dst-x").unwrap();
        assert_eq!(
            (exit, &stdout[..], &stderr[..]),
            (Exit::Code(0), &b"{\"status\": \"VALID\"}\n"[..], &b"checking\n"[..])
        );
        let mut deleted = done.clone();
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
        let err = follower(&invocation, "n1", &log).finish(&deleted, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "PodDeleted");
    }

    #[test]
    fn a_re_opened_log_starts_at_the_whole_second_before_the_last_line() {
        let last: Timestamp = "2026-11-27T02:35:56.868005508Z".parse().unwrap();
        assert_eq!(whole_second(last), "2026-11-27T02:35:56Z".parse::<Timestamp>().unwrap());
        assert_eq!(whole_second(whole_second(last)), whole_second(last));
        // The follower's next read, after a line of that late in the second: kube rounds
        // `sinceTime` to the nearest second, and given the whole one it keeps it.
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let mut follower = follower(&invocation, "n1", "");
        follower.since = Some(last);
        let params = follower.params(true);
        let request = kube::core::Request::new("/api/v1/namespaces/ns/pods").logs("p", &params).unwrap();
        assert!(request.uri().to_string().contains("sinceTime=2026-11-27T02%3A35%3A56Z"), "{}", request.uri());
    }

    #[test]
    fn label_values_are_valid_or_digested() {
        assert_eq!(label_value("0193a1b2-run"), "0193a1b2-run");
        let digested = label_value("a/b:c");
        assert_eq!(digested.len(), 32);
        assert_eq!(digested, label_value("a/b:c"));
        assert_eq!(label_value(&"x".repeat(64)).len(), 32);
    }

    /// A client whose API server refuses every Pod as a namespace quota does; how many Pods
    /// were asked for is counted.
    fn quota_refusing_client() -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let creates = Arc::new(AtomicUsize::new(0));
        let seen = creates.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let path = request.uri().path().to_string();
                let (code, body) = match request.method().as_str() {
                    "POST" if path.ends_with("/pods") => {
                        seen.fetch_add(1, Ordering::SeqCst);
                        let message = "pods \"dst-x\" is forbidden: exceeded quota: pods, requested: pods=1, used: \
                                       pods=10, limited: pods=10";
                        (
                            403,
                            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": message, "reason": "Forbidden", "code": 403}),
                        )
                    }
                    "POST" => {
                        (201, serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))
                    }
                    _ => (200, serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
                };
                let body = kube::client::Body::from(serde_json::to_vec(&body).expect("json"));
                Ok::<_, std::convert::Infallible>(http::Response::builder().status(code).body(body).expect("response"))
            }
        });
        (Client::new(service, "team-a"), creates)
    }

    #[tokio::test]
    async fn a_quota_refusal_is_retried_with_backoff_then_fails_with_the_quota_s_words() {
        let (client, creates) = quota_refusing_client();
        let settings = PodSettings { create_retries: 2, ..settings() };
        let executor = PodExecutor::new(client, settings);
        let invocation = PodInvocation {
            namespace: "team-a".into(),
            name: "dst-x".into(),
            image: "r/x@sha256:0".into(),
            helper_image: "helper:1".into(),
            entry: Entry {
                nonce: "n".into(),
                request: spec::request_path(),
                termination_log: "/t".into(),
                program: vec!["/x".into()],
                done: None,
            },
            service_account: None,
            plugs: Vec::new(),
            deadline: Duration::from_secs(10),
            labels: BTreeMap::new(),
            owner: None,
            run_as_user: None,
            options: PodOptions::default(),
        };
        let started = Instant::now();
        let err = executor.create(&invocation, "dst-x-request", b"{}", &[]).await.unwrap_err();
        assert_eq!(err.reason(), "QuotaExceeded");
        assert!(
            err.to_string().contains("refused the Pod 3 times: pods \"dst-x\" is forbidden: exceeded quota"),
            "{err}"
        );
        assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 3, "two retries");
        assert!(started.elapsed() >= Duration::from_millis(1500), "with backoff: {:?}", started.elapsed());
    }
}
