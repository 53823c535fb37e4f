//! The Pod executor: each invocation of an image type (init, state, an action, delete) is a
//! short-lived Pod in the namespace, and what its program printed comes back whole and verified.
//!
//! One invocation: resolve the image to a digest and its entrypoint ([`super::registry`]); put
//! the request in an immutable Secret; create the Pod ([`super::spec`]) and hand the Secret to
//! it (owner reference); watch the Pod until its program starts, failing fast on what will not
//! get better (an image that cannot be pulled, a Pod that cannot be scheduled or started);
//! follow its log — re-opened from the last line read whenever the stream ends early — taking
//! stdout frames and stderr lines as they come; once the Pod has ended, hold the frames against
//! the helper's record ([`crate::pod_helper::frames`]); delete the Pod and the Secret.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::api::{api_error, delete_and_wait, is_not_found, pod_error};
use super::log::LogFollower;
use super::progress::{PodProgress, ended, observed, progress};
use super::registry::{Credentials, ImageRun, Registry, read_docker_config};
use super::runner::{self, Runners};
pub use super::settings::{PodScope, PodSettings};
use super::spec::{self, OWNER_LABEL, PlugSource, PodInvocation, PodPlug};
use crate::engine::executor::init_cache::{InitAnswers, InitKey};
use crate::engine::executor::process::BUILTIN_SUBCOMMAND;
use crate::engine::executor::{ExecError, Executor, Exit, Invocation, Outcome};
use crate::engine::typeref::TypeRef;
use crate::pod_helper::entry::HelperCommand;

/// The label that names an invocation's run: what [`Executor::stop_run`] selects by.
pub const RUN_LABEL: &str = "deployster.io/run-id";
/// The value of [`OWNER_LABEL`] on every Pod and Secret of this executor.
pub use super::spec::OWNER_VALUE;
/// The largest request a Secret carries (a Secret holds at most 1 MiB).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024 - 4096;
/// The user a type's program runs as when its image names no numeric non-root user.
pub const DEFAULT_UID: i64 = 65532;

/// What the Pods of every pass share: the client, how Pods are made and watched, what the
/// registry said of each image, init answers, and the Pod names used. A pass runs its Pods
/// through a [`PodExecutor`] made for its scope ([`PodRuntime::for_pass`]).
pub struct PodRuntime {
    client: Client,
    settings: PodSettings,
    registry: Registry,
    init_cache: InitAnswers,
    /// What a pass knows of its namespace (credentials), read on its first invocation.
    passes: Mutex<lru::LruCache<String, Arc<Credentials>>>,
    /// How many times each (pass, resource, phase) ran: a Pod name is never reused.
    attempts: Mutex<lru::LruCache<(String, String, String), u32>>,
    /// The warm runners, when [`PodSettings::runner_idle`] says to use them.
    runners: Runners,
}

/// Runs one pass's image types (and, in a cluster, its file built-ins) as Pods of its scope.
pub struct PodExecutor {
    runtime: Arc<PodRuntime>,
    scope: Arc<PodScope>,
    /// Whether [`Executor::preflight`] checks that the scope's namespace can be reached (the
    /// CLI's; the controller has just swept the namespace when a pass starts).
    check_access: bool,
}

impl PodExecutor {
    /// Also checks, before the run, that the scope's namespace can be reached.
    pub fn checking_access(mut self) -> PodExecutor {
        self.check_access = true;
        self
    }
}

impl PodRuntime {
    pub fn new(client: Client, settings: PodSettings) -> Arc<PodRuntime> {
        PodRuntime::counting_runners(client, settings, runner::RunnerMetrics::default())
    }

    /// [`PodRuntime::new`], counting its runners in `metrics` (the controller's).
    pub fn counting_runners(client: Client, settings: PodSettings, metrics: runner::RunnerMetrics) -> Arc<PodRuntime> {
        let registry = Registry::new(&settings.insecure_registries, &settings.registry_endpoints);
        let kept = |n| NonZeroUsize::new(n).expect("non-zero");
        Arc::new(PodRuntime {
            client,
            settings,
            registry,
            init_cache: InitAnswers::default(),
            passes: Mutex::new(lru::LruCache::new(kept(1024))),
            attempts: Mutex::new(lru::LruCache::new(kept(65536))),
            runners: Runners::counting(metrics),
        })
    }

    /// Deletes the warm runners this process started or used; how many.
    pub async fn reap_runners(&self) -> usize {
        self.runners.reap(&self.client, &|_, _| false).await
    }

    /// As [`PodRuntime::reap_runners`], but for the runners of Manifests that
    /// `elsewhere(namespace, manifest)` says another replica reconciles now: theirs to use.
    pub async fn reap_runners_but(&self, elsewhere: &(dyn Fn(&str, &str) -> bool + Send + Sync)) -> usize {
        self.runners.reap(&self.client, elsewhere).await
    }

    /// Deletes the runners of namespace `namespace` whose labels include `selector` (a
    /// Manifest's, once it is gone); how many.
    pub async fn delete_runners(&self, namespace: &str, selector: &str) -> Result<usize, ExecError> {
        self.runners.delete_matching(&self.pods(namespace), selector).await
    }

    /// Why runners are not used in namespace `namespace` for ServiceAccount `account`, once:
    /// what the one event of it says.
    pub fn untold_runner_refusal(&self, namespace: &str, account: Option<&str>) -> Option<String> {
        self.runners.untold_refusal(namespace, account)
    }

    /// The executor of a pass whose Pods run in `scope`.
    pub fn for_pass(self: &Arc<Self>, scope: PodScope) -> PodExecutor {
        PodExecutor { runtime: self.clone(), scope: Arc::new(scope), check_access: false }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn secrets(&self, namespace: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Stops and deletes every Pod (and request Secret) of Deployster's in `namespace` whose
    /// labels include `selector` (`key=value,…`), waiting until the Pods are gone: what a
    /// crashed process or an earlier leader left running. How many running Pods it stopped.
    pub async fn sweep(&self, namespace: &str, selector: &str) -> Result<usize, ExecError> {
        let selector = format!("{OWNER_LABEL}={OWNER_VALUE},{selector}");
        let listed = ListParams::default().labels(&selector);
        let pods = self.pods(namespace).list(&listed).await.map_err(|e| api_error("listing Pods", e))?;
        // A Pod that ended runs nothing: deleted, not waited for. One that may still run its
        // program (even one being deleted, within its grace period) is waited for — but a live
        // runner, which serves passes to come: what an earlier pass started in it has lost its
        // exec, and so its stdin, and stops on its own; the runner refuses to start the same
        // resource again until it has (`__pod-serve`'s lock).
        let (ended, live): (Vec<Pod>, Vec<Pod>) = pods.items.into_iter().partition(ended);
        let is_runner = |p: &Pod| p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(runner::RUNNER_LABEL));
        let live: Vec<Pod> = live.into_iter().filter(|p| !is_runner(p)).collect();
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
                .map_err(|why| pod_error(why.reason(), format!("the image pull secret `{name}`: {why}")))?;
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
            entry: HelperCommand {
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
        if let Some(idle) = self.settings.runner_idle
            && self.runners.refusal(&pod_invocation).is_none()
        {
            let mut runner = pod_invocation.clone();
            runner.name = runner::runner_name(&runner);
            runner.labels.remove(RUN_LABEL);
            let pods = self.pods(namespace);
            if let Some((exit, stdout, stderr)) =
                self.runners.invoke(&pods, &runner, invocation, &self.settings, idle).await?
            {
                return Ok(Outcome { exit, stdout, stderr, elapsed: started.elapsed() });
            }
        }
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
                    PodProgress::Waiting => {}
                    PodProgress::Started | PodProgress::Ended => break,
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

impl PodRuntime {
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
        delete_and_wait(&self.pods(namespace), name, grace).await
    }
}

impl PodRuntime {
    /// Runs a call to built-in `name` (one that [`TypeRef::is_file_builtin`]) in a Pod of
    /// the helper's image, which is deployster: `deployster __type NAME ARGS`, on the plug it
    /// must stay within ([`crate::builtins::confined`]).
    async fn run_builtin(&self, name: &str, invocation: &Invocation, scope: &PodScope) -> Result<Outcome, ExecError> {
        crate::builtins::confined(&invocation.stdin)
            .map_err(|why| pod_error("OutsidePlug", format!("builtin/{name}: {why}")))?;
        // A ServiceAccount that does not exist fails here, as for an image.
        self.credentials(&invocation.labels.run_id, scope).await?;
        let helper = ImageRun {
            pinned: self.settings.helper_image.clone(),
            entrypoint: vec![spec::HELPER_BINARY.into(), BUILTIN_SUBCOMMAND.into(), name.into()],
            cmd: Vec::new(),
            // Set explicitly (the image's own user), so that a claim's volume is made writable.
            non_root_uid: None,
        };
        self.run(invocation, &helper, scope).await
    }
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

#[async_trait]
impl Executor for PodExecutor {
    async fn preflight(&self, _programs: &[TypeRef]) -> Result<(), ExecError> {
        if !self.check_access {
            return Ok(());
        }
        let namespace = &self.scope.namespace;
        self.runtime.pods(namespace).list(&ListParams::default().limit(1)).await.map(|_| ()).map_err(|e| {
            ExecError::Unavailable(format!("cannot list Pods in namespace `{namespace}` of the cluster: {e}"))
        })
    }

    /// Deletes every Pod of run `run_id` in this pass's namespace and waits until they are gone.
    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        self.runtime.sweep(&self.scope.namespace, &format!("{RUN_LABEL}={}", label_value(run_id))).await
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let image = match &invocation.program {
            TypeRef::Image(image) => image,
            TypeRef::Builtin(name) if invocation.program.is_file_builtin() => {
                let name = name.clone();
                return self.runtime.run_builtin(&name, &invocation, &self.scope).await;
            }
            other => return Err(ExecError::Unavailable(format!("the Pod executor cannot run {other}"))),
        };
        let (runtime, scope) = (&self.runtime, &self.scope);
        let pass = invocation.labels.run_id.clone();
        let credentials = runtime.credentials(&pass, scope).await?;
        let reference = image.to_string();
        let resolved = runtime
            .registry
            .resolve(&reference, &pass, &credentials)
            .await
            .map_err(|e| ExecError::Pod { reason: e.reason(), message: format!("image `{reference}`: {e}") })?;
        let cache_key = (invocation.labels.phase == "init").then(|| {
            InitKey::of(&[resolved.pinned.as_bytes()], invocation.entrypoint.as_deref(), &invocation.args, &invocation)
        });
        runtime.init_cache.get_or_run(cache_key, runtime.run(&invocation, &resolved, scope)).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::crd::PodOptions;

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
        let settings = PodSettings { create_retries: 2, ..PodSettings::new("helper:1") };
        let executor = PodRuntime::new(client, settings);
        let invocation = PodInvocation {
            namespace: "team-a".into(),
            name: "dst-x".into(),
            image: "r/x@sha256:0".into(),
            helper_image: "helper:1".into(),
            entry: HelperCommand {
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
