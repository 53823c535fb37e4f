//! Warm runners (issue 37): an image type's invocations served by a long-lived Pod rather than a
//! Pod each.
//!
//! A runner is a Pod made as an invocation's is ([`spec::runner_pod`]: the same namespace,
//! ServiceAccount without its token, `restricted` security context, plugs and `spec.pod`
//! options, owned by the Manifest) whose type's container holds, idle, until unused for the
//! idle time. Each invocation is an exec through the API server (`pods/exec`, as `kubectl exec`
//! does) of the helper's [`crate::pod_helper::serve`] mode, which runs the image's entrypoint afresh with
//! the request on its stdin and answers with the same frames and record as a Pod's log does —
//! so the output is verified the same way ([`LogFollower::take_served`]).
//!
//! Exec, rather than a port the runner listens on: it needs no network path from the
//! controller to Pods (none under a default-deny NetworkPolicy, none from a CLI outside the
//! cluster), no listener, certificate or token inside the user's image, and the API server
//! authorizes each call (`pods/exec` in the namespace).
//!
//! One runner serves one identity: its name is a digest of everything its Pod is made of
//! (namespace, ServiceAccount, owner, image digest, plugs, options), so a new digest of the
//! type, another Manifest or another ServiceAccount gets another runner, and a new leader finds
//! the runner the last one used by name. A runner that retired (idle), ended, was evicted or
//! deleted is replaced on its next use; the invocation it was serving when it went is failed
//! as interrupted. Where the cluster refuses what runners need — the exec (403), or the runner
//! Pod (an admission policy) — its invocations run as a Pod each, and the refusal is told once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, AttachedProcess, ListParams, PostParams};
use kube::{Api, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::api::{api_error, delete_and_wait, is_not_found, pod_error};
use super::log::LogFollower;
use super::progress::{PodProgress, ended, observed, progress};
use super::settings::PodSettings;
use super::spec::{self, OWNER_LABEL, OWNER_VALUE, PodInvocation};
use crate::engine::executor::{ExecError, Exit, Invocation};
use crate::pod_helper::entry::STOP_GRACE;
use crate::pod_helper::serve::{RETIRING, ServeHeader, ServeMode};

/// How long the controller's runners stay unused before they end, unless told otherwise.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// The label every runner Pod carries (its value: the runner's identity digest). The sweep of
/// a pass leaves a live runner alone; an invocation's own Pods never carry it.
pub const RUNNER_LABEL: &str = "deployster.io/runner";

/// The runner's name for the invocation Pod `invocation` would be: the same for the same
/// identity, another for anything that differs.
pub fn runner_name(invocation: &PodInvocation) -> String {
    let identity = serde_json::json!({
        "namespace": invocation.namespace,
        "serviceAccount": invocation.service_account,
        "owner": invocation.owner.as_ref().map(|o| &o.uid),
        "image": invocation.image,
        "helper": invocation.helper_image,
        "plugs": invocation.plugs.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>(),
        "options": invocation.options,
        "user": invocation.run_as_user,
    });
    let digest = hex::encode(&Sha256::digest(identity.to_string().as_bytes())[..10]);
    let image = invocation.image.split('@').next().unwrap_or_default();
    let readable: String = image
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split(':')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(30)
        .collect();
    let readable = readable.trim_matches('-');
    if readable.is_empty() { format!("dsr-{digest}") } else { format!("dsr-{readable}-{digest}") }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunnerLabels {
    pub runner: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabels {
    /// `first`, `ended` (it retired idle, crashed or was evicted), `deleted`, `retiring`.
    pub reason: String,
}

/// The runners' figures, registered by the controller.
#[derive(Clone, Default)]
pub struct RunnerMetrics {
    /// Runners this process started or used that it has not seen go.
    pub alive: Gauge,
    /// Invocations each runner served for this process.
    pub served: Family<RunnerLabels, Counter>,
    /// Runner Pods this process created, by why.
    pub starts: Family<StartLabels, Counter>,
}

/// What this process knows of its runners.
#[derive(Default)]
pub struct Runners {
    /// One start of a runner at a time, by name.
    starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The runners (namespace, name) this process started or used: reaped when it is done.
    used: Mutex<HashSet<(String, String)>>,
    /// Scopes (namespace, ServiceAccount) whose cluster refused runners: why, and whether the
    /// refusal was told yet.
    refused: Mutex<HashMap<(String, String), (String, bool)>>,
    pub metrics: RunnerMetrics,
}

/// How an attempt in a runner went when it did not give the invocation's end.
enum Served {
    Ended(Exit, Vec<u8>, Vec<u8>),
    /// The runner retired or was gone before the invocation began: ask a new one.
    Replace {
        uid: String,
        why: &'static str,
    },
    /// Another invocation of the resource still runs there (a controller restarted mid-action).
    Overlap(String),
    /// The cluster refuses runners here: a Pod per invocation from now on.
    Refused(String),
    /// The exec failed with the runner still there: the same runner again.
    Again,
}

fn scope_key(invocation: &PodInvocation) -> (String, String) {
    (invocation.namespace.clone(), invocation.service_account.clone().unwrap_or_else(|| "default".into()))
}

impl Runners {
    /// Runners whose figures go to `metrics`.
    pub fn counting(metrics: RunnerMetrics) -> Runners {
        Runners { metrics, ..Runners::default() }
    }

    /// Deletes the runners of `pods`' namespace whose labels include `selector`; how many.
    pub async fn delete_matching(&self, pods: &Api<Pod>, selector: &str) -> Result<usize, ExecError> {
        let selector = format!("{OWNER_LABEL}={OWNER_VALUE},{RUNNER_LABEL},{selector}");
        let found = pods
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| api_error("listing runners", e))?;
        let mut deleted = 0;
        for runner in found.items {
            let (Some(name), Some(namespace)) = (runner.metadata.name, runner.metadata.namespace) else { continue };
            match pods.delete(&name, &kube::api::DeleteParams::background()).await {
                Err(e) if !is_not_found(&e) => return Err(api_error("deleting a runner", e)),
                _ => deleted += 1,
            }
            self.forget(namespace, name);
        }
        Ok(deleted)
    }

    /// Why runners are not used for `invocation`'s scope, if they are not.
    pub fn refusal(&self, invocation: &PodInvocation) -> Option<String> {
        self.refused.lock().expect("refused lock").get(&scope_key(invocation)).map(|(why, _)| why.clone())
    }

    /// Why runners are not used for the scope of namespace and ServiceAccount, the first time
    /// this is asked after the refusal (what the one event says); `None` after that.
    pub fn untold_refusal(&self, namespace: &str, service_account: Option<&str>) -> Option<String> {
        let key = (namespace.to_string(), service_account.unwrap_or("default").to_string());
        let mut refused = self.refused.lock().expect("refused lock");
        let (why, told) = refused.get_mut(&key)?;
        (!std::mem::replace(told, true)).then(|| why.clone())
    }

    /// Runs the scope's invocations as a Pod each from now on, saying why once; the runner the
    /// cluster would not let it use is deleted. Under the runner's gate, so that an invocation
    /// that began beside this one never finds the runner going and makes it again.
    async fn refuse(&self, pods: &Api<Pod>, invocation: &PodInvocation, why: String) {
        let gate = self.gate(&invocation.name);
        let _starting = gate.lock().await;
        let first = {
            let mut refused = self.refused.lock().expect("refused lock");
            let first = !refused.contains_key(&scope_key(invocation));
            refused.entry(scope_key(invocation)).or_insert((why.clone(), false));
            first
        };
        if first {
            tracing::warn!(namespace = %invocation.namespace, "runners refused; a Pod per invocation from now on: {why}");
        }
        if self.used.lock().expect("used lock").contains(&(invocation.namespace.clone(), invocation.name.clone())) {
            let _ = pods.delete(&invocation.name, &kube::api::DeleteParams::background()).await;
            self.note_gone(invocation);
        }
    }

    /// Runs `invocation` in its runner (`pod` is the Pod it would otherwise run as, named for
    /// its runner); `None` when the cluster refuses runners here (run it as a Pod instead).
    pub async fn invoke(
        &self,
        pods: &Api<Pod>,
        pod: &PodInvocation,
        invocation: &Invocation,
        settings: &PodSettings,
        idle: Duration,
    ) -> Result<Option<(Exit, Vec<u8>, Vec<u8>)>, ExecError> {
        let mut replace = None;
        let mut overlapped = false;
        for _ in 0..4 {
            let uid = match self.ready(pods, pod, settings, idle, replace.take()).await? {
                Ok(uid) => uid,
                Err(why) => {
                    self.refuse(pods, pod, why).await;
                    return Ok(None);
                }
            };
            match self.attempt(pods, pod, &uid, invocation, settings).await? {
                Served::Ended(exit, stdout, stderr) => {
                    self.metrics.served.get_or_create(&RunnerLabels { runner: pod.name.clone() }).inc();
                    return Ok(Some((exit, stdout, stderr)));
                }
                Served::Replace { uid, why } => replace = Some((uid, why)),
                Served::Again => {}
                Served::Overlap(running) if !overlapped => {
                    // What an earlier leader or a crashed process started: its exec is gone, so
                    // it is being stopped; wait for it, once, rather than run beside it.
                    tracing::warn!(runner = %pod.name, "waiting for an earlier invocation to stop: {running}");
                    overlapped = true;
                    let resource = resource_of(invocation);
                    self.wait_stopped(pods, &pod.name, &resource, STOP_GRACE + Duration::from_secs(10)).await;
                }
                Served::Overlap(running) => {
                    return Err(pod_error(
                        "Overlap",
                        format!("runner {}: {running}; it did not stop within {:?}", pod.name, STOP_GRACE),
                    ));
                }
                Served::Refused(why) => {
                    self.refuse(pods, pod, why).await;
                    return Ok(None);
                }
            }
        }
        Err(pod_error(
            "RunnerUnavailable",
            format!("runner {} could not be started or reached after 4 tries", pod.name),
        ))
    }

    fn gate(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.starting.lock().expect("starting lock").entry(name.to_string()).or_default().clone()
    }

    /// The runner, running: found, or (re)made. `replace`: the runner of this uid retired or
    /// went, and is replaced unless someone did already. The uid; `Err` when the cluster
    /// refuses the runner Pod (not a quota, which a Pod per invocation would meet too).
    async fn ready(
        &self,
        pods: &Api<Pod>,
        invocation: &PodInvocation,
        settings: &PodSettings,
        idle: Duration,
        replace: Option<(String, &'static str)>,
    ) -> Result<Result<String, String>, ExecError> {
        let name = &invocation.name;
        let gate = self.gate(name);
        let _starting = gate.lock().await;
        // Refused while this invocation waited at the gate: a Pod per invocation, as for the one refused.
        if let Some(why) = self.refusal(invocation) {
            return Ok(Err(why));
        }
        let mut reason = "first";
        if let Some(found) = pods.get_opt(name).await.map_err(|e| api_error("reading the runner Pod", e))? {
            let uid = found.metadata.uid.clone().unwrap_or_default();
            let retired = replace.as_ref().filter(|(gone, _)| *gone == uid).map(|(_, why)| *why);
            let deleting = found.metadata.deletion_timestamp.is_some();
            if !deleting && !ended(&found) && retired.is_none() {
                if running(&found) {
                    self.note_used(invocation);
                    return Ok(Ok(uid));
                }
                // Made by another pass or process, and still starting.
                return self.started(pods, invocation, settings).await.map(Ok);
            }
            reason = retired.unwrap_or(if deleting { "deleted" } else { "ended" });
            delete_and_wait(pods, name, Duration::ZERO).await;
            self.note_gone(invocation);
        } else if self.used.lock().expect("used lock").contains(&(invocation.namespace.clone(), name.clone())) {
            reason = "deleted";
            self.note_gone(invocation);
        }
        let mut runner = spec::runner_pod(invocation, idle);
        runner
            .metadata
            .labels
            .get_or_insert_default()
            .insert(RUNNER_LABEL.into(), name.trim_start_matches("dsr-").into());
        match pods.create(&PostParams::default(), &runner).await {
            Ok(_) => {
                tracing::info!(runner = %name, reason, "started a runner");
                self.metrics.starts.get_or_create(&StartLabels { reason: reason.into() }).inc();
            }
            // Another process made it a moment ago: it is the one.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains("exceeded quota") => {
                return Err(pod_error(
                    "QuotaExceeded",
                    format!("the namespace's quota refused runner {name}: {}", status.message),
                ));
            }
            Err(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
                return Ok(Err(format!(
                    "the cluster refused the runner Pod {name}: {} ({})",
                    status.message, status.code
                )));
            }
            Err(e) => return Err(api_error("creating the runner Pod", e)),
        }
        self.started(pods, invocation, settings).await.map(Ok)
    }

    /// Waits until the runner's holding process runs; its uid.
    async fn started(
        &self,
        pods: &Api<Pod>,
        invocation: &PodInvocation,
        settings: &PodSettings,
    ) -> Result<String, ExecError> {
        let name = &invocation.name;
        let mut watch = kube::runtime::watcher::watch_object(pods.clone(), name).boxed();
        let since = Instant::now();
        loop {
            let pod = observed(watch.next().await, name)?;
            match progress(settings, &pod, since.elapsed())? {
                PodProgress::Waiting => continue,
                PodProgress::Started if running(&pod) => {
                    self.note_used(invocation);
                    return Ok(pod.metadata.uid.unwrap_or_default());
                }
                PodProgress::Started | PodProgress::Ended => {
                    return Err(pod_error(
                        "RunnerEnded",
                        format!(
                            "runner {name} ended as it started: {}",
                            serde_json::to_string(&pod.status).unwrap_or_default()
                        ),
                    ));
                }
            }
        }
    }

    fn note_used(&self, invocation: &PodInvocation) {
        if self.used.lock().expect("used lock").insert((invocation.namespace.clone(), invocation.name.clone())) {
            let _ = self.metrics.alive.inc();
        }
    }

    fn note_gone(&self, invocation: &PodInvocation) {
        self.forget(invocation.namespace.clone(), invocation.name.clone());
    }

    /// Runner `name` of `namespace` is gone: no longer alive, and its series of invocations
    /// served is dropped (a runner's name is never used again once its Pod is gone, so the
    /// series would only pile up in `/metrics` of a long-running controller).
    fn forget(&self, namespace: String, name: String) {
        if self.used.lock().expect("used lock").remove(&(namespace, name.clone())) {
            let _ = self.metrics.alive.dec();
        }
        self.metrics.served.remove(&RunnerLabels { runner: name });
    }

    /// One try of `invocation` in runner `runner` (of `uid`), from the exec to the record.
    async fn attempt(
        &self,
        pods: &Api<Pod>,
        runner: &PodInvocation,
        uid: &str,
        invocation: &Invocation,
        settings: &PodSettings,
    ) -> Result<Served, ExecError> {
        let name = runner.name.as_str();
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let labels = &invocation.labels;
        let header = ServeHeader {
            nonce: nonce.clone(),
            // The image's entrypoint and command, or an action's.
            program: runner.entry.program.clone(),
            env: invocation.env.iter().cloned().collect(),
            request_bytes: invocation.stdin.len() as u64,
            resource: resource_of(invocation),
            invocation: format!("run {} {}", labels.run_id, labels.phase),
        };
        let params = AttachParams::default().container("main").stdin(true).stdout(true).stderr(true);
        let mut attached = match pods.exec(name, spec::runner_command(&ServeMode::Invocation), &params).await {
            Ok(attached) => attached,
            Err(kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(code)))
                if code == http::StatusCode::FORBIDDEN =>
            {
                return Ok(Served::Refused(format!(
                    "the API server refused the exec into runner {name} (403 Forbidden): the controller needs \
                     `create` and `get` on `pods/exec` in namespace `{}`",
                    runner.namespace
                )));
            }
            // Gone or not running: a new runner. Else (the API server or the kubelet failed to
            // answer) the same one again: other invocations may be running in it.
            Err(e) => return Ok(self.after_failed_exec(pods, name, uid, &e.to_string()).await),
        };
        let mut stdin = attached.stdin().expect("asked for stdin");
        let written = async {
            stdin.write_all(&header.with_request(&invocation.stdin)).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            return Ok(self.after_failed_exec(pods, name, uid, &format!("the runner took no request: {e}")).await);
        }
        let mut follower = LogFollower::new(&nonce, settings.output_limit, invocation);
        let mut lines = tokio::io::BufReader::new(attached.stdout().expect("asked for stdout")).lines();
        let diagnostics = drain(attached.stderr().expect("asked for stderr"));
        let stopped = {
            let read = async {
                while let Some(line) = lines.next_line().await.map_err(ExecError::Io)? {
                    if follower.take_served(&line)? {
                        return Ok(true);
                    }
                }
                Ok::<bool, ExecError>(follower.has_record())
            };
            tokio::select! {
                read = read => read.map_err(Some),
                () = tokio::time::sleep(invocation.timeout) => Err(Some(ExecError::TimedOut(invocation.timeout))),
                () = invocation.cancel.cancelled() => Err(Some(ExecError::Cancelled)),
            }
        };
        match stopped {
            Ok(true) => {
                drop(stdin);
                finish(attached).await;
                let (record, exit, stdout, stderr) = follower.finish_served()?;
                match record.error.as_deref() {
                    Some(error) if error.starts_with(RETIRING) => {
                        Ok(Served::Replace { uid: uid.into(), why: "retiring" })
                    }
                    Some(error) if error.contains("refusing to overlap") => Ok(Served::Overlap(error.to_string())),
                    _ => Ok(Served::Ended(exit, stdout, stderr)),
                }
            }
            // Ended before the runner started the program (it retired or went as the exec
            // arrived): nothing ran, so another runner may be asked.
            Ok(false) | Err(Some(ExecError::Io(_))) if !follower.begun() => {
                attached.abort();
                Ok(self.after_failed_exec(pods, name, uid, "the exec ended before the program began").await)
            }
            stopped => {
                // Cancelled, timed out, failed reading, or the stream ended without the record:
                // the end of stdin stops the program inside the runner; nothing of it may run
                // on once this returns.
                drop(stdin);
                attached.abort();
                let resource = resource_of(invocation);
                let lost = self.lost(pods, name, uid).await;
                if lost.is_none() {
                    self.wait_stopped(pods, name, &resource, STOP_GRACE + Duration::from_secs(10)).await;
                }
                match (stopped, lost) {
                    (Err(Some(why)), _) => Err(why),
                    (_, Some(lost)) => Err(pod_error(
                        "RunnerLost",
                        format!("runner {name} {lost} while it ran this invocation: the invocation was interrupted"),
                    )),
                    _ => {
                        let said = String::from_utf8_lossy(&diagnostics.await.unwrap_or_default()).trim().to_string();
                        let why = format!("the exec into runner {name} ended before the record ({said})");
                        Err(pod_error("RunnerLost", format!("{why}: the invocation was interrupted")))
                    }
                }
            }
        }
    }

    /// After an exec that did not start the invocation: replace the runner if it is gone or
    /// going, else try it again.
    async fn after_failed_exec(&self, pods: &Api<Pod>, name: &str, uid: &str, why: &str) -> Served {
        match self.lost(pods, name, uid).await {
            Some(lost) => {
                tracing::info!(runner = name, "the runner {lost}; replacing it ({why})");
                let why = if lost.starts_with("was deleted") { "deleted" } else { "ended" };
                Served::Replace { uid: uid.into(), why }
            }
            None => {
                tracing::warn!(runner = name, "the exec into the runner failed; trying again: {why}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                Served::Again
            }
        }
    }

    /// What became of runner `name` (of `uid`) if it is gone or going.
    async fn lost(&self, pods: &Api<Pod>, name: &str, uid: &str) -> Option<String> {
        match pods.get_opt(name).await {
            Ok(None) => Some("was deleted".into()),
            Ok(Some(pod)) if pod.metadata.uid.as_deref() != Some(uid) => Some("was deleted".into()),
            Ok(Some(pod)) if pod.metadata.deletion_timestamp.is_some() => Some("was deleted".into()),
            Ok(Some(pod)) if ended(&pod) => {
                let status = pod.status.unwrap_or_default();
                Some(format!("ended ({})", status.reason.or(status.phase).unwrap_or_default()))
            }
            _ => None,
        }
    }

    /// Waits up to `within` until no invocation of `resource` runs in runner `name`.
    async fn wait_stopped(&self, pods: &Api<Pod>, name: &str, resource: &str, within: Duration) {
        let mode = ServeMode::WaitFor { resource: resource.into(), within };
        let params = AttachParams::default().container("main").stdout(true).stderr(true);
        let waited = async {
            let mut attached = pods.exec(name, spec::runner_command(&mode), &params).await.ok()?;
            let status = attached.take_status()?;
            let said = drain(attached.stderr()?);
            let status = status.await;
            Some((status, said.await.unwrap_or_default()))
        };
        match tokio::time::timeout(within + Duration::from_secs(10), waited).await {
            Ok(Some((Some(status), said))) if status.status.as_deref() != Some("Success") => {
                tracing::warn!(runner = name, "{}", String::from_utf8_lossy(&said).trim());
            }
            Ok(_) => {}
            Err(_) => tracing::warn!(runner = name, "no answer on whether `{resource}` still runs"),
        }
    }

    /// Deletes every runner this process started or used (the CLI's, when it exits).
    ///
    /// `elsewhere(namespace, manifest)`: the Manifest is now another replica's (sharding), so its
    /// runner is left to that replica (which uses it, or lets it idle out) and only forgotten here.
    pub async fn reap(&self, client: &kube::Client, elsewhere: &(dyn Fn(&str, &str) -> bool + Send + Sync)) -> usize {
        let used: Vec<(String, String)> = self.used.lock().expect("used lock").drain().collect();
        let mut reaped = 0;
        for (namespace, name) in used {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            if let Ok(Some(pod)) = pods.get_opt(&name).await
                && pod.owner_references().iter().any(|o| o.kind == "Manifest" && elsewhere(&namespace, &o.name))
            {
                let _ = self.metrics.alive.dec();
                self.metrics.served.remove(&RunnerLabels { runner: name });
                continue;
            }
            reaped += 1;
            match pods.delete(&name, &kube::api::DeleteParams::background()).await {
                Err(e) if !is_not_found(&e) => tracing::warn!(runner = %name, "could not delete the runner: {e}"),
                _ => {
                    let _ = self.metrics.alive.dec();
                    self.metrics.served.remove(&RunnerLabels { runner: name });
                }
            }
        }
        reaped
    }
}

/// What names an invocation's resource in a runner: one invocation of it at a time.
fn resource_of(invocation: &Invocation) -> String {
    format!("{}/{}", invocation.labels.manifest, invocation.labels.resource)
}

fn running(pod: &Pod) -> bool {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    statuses.into_iter().flatten().any(|c| c.name == "main" && c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// Reads `stream` to its end in the background (so that the exec never blocks on it); at most
/// 4 KiB of it.
fn drain(mut stream: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> tokio::task::JoinHandle<Vec<u8>> {
    tokio::spawn(async move {
        let (mut kept, mut chunk) = (Vec::new(), [0u8; 1024]);
        while let Ok(n @ 1..) = stream.read(&mut chunk).await {
            if kept.len() < 4096 {
                kept.extend_from_slice(&chunk[..n]);
            }
        }
        kept
    })
}

/// Ends an exec whose answer has been read.
async fn finish(attached: AttachedProcess) {
    if tokio::time::timeout(Duration::from_secs(5), attached.join()).await.is_err() {
        tracing::debug!("an exec into a runner did not close within 5 s");
    }
}

#[cfg(test)]
mod tests;
