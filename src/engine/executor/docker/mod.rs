//! Runs resource types that are Docker images, through the Docker Engine API (bollard) — never
//! the `docker` CLI.
//!
//! One invocation is one container: create (image, entrypoint, args, env, labels, plug mounts),
//! attach stdin/stdout/stderr, start, write the request and close stdin, read the demultiplexed
//! output (bounded), wait for the exit code, remove. A timeout or cancellation kills the
//! container, and it is removed on every path. Containers carry labels naming the manifest,
//! resource, phase, run and owning process, so that the containers of a deployster that crashed
//! are found and removed the next time one connects (never those of a run still alive).
//!
//! By default the containers join one network [`sandbox`] per executor instead of getting a
//! network stack each, which is most of what a container start costs; [`ContainerNetwork`]
//! chooses otherwise.

mod daemon;
pub mod sandbox;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as DockerError;
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount as DockerMount, MountType};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder, StartContainerOptions,
    WaitContainerOptions,
};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;

use super::init_cache::{InitAnswers, InitKey};
use super::output::Capture;
use super::{DEFAULT_OUTPUT_LIMIT, ExecError, Executor, Exit, Invocation, Outcome, Stream};
use crate::engine::typeref::{ImageRef, TypeRef};
use daemon::{describe, pull, remove_container};

pub const LABEL_MANIFEST: &str = "deployster.io/manifest";
pub const LABEL_RESOURCE: &str = "deployster.io/resource";
pub const LABEL_PHASE: &str = "deployster.io/phase";
pub const LABEL_RUN_ID: &str = "deployster.io/run-id";
/// `host/pid/start-time` of the deployster process that created the container.
pub const LABEL_OWNER: &str = "deployster.io/owner";

/// When images are pulled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull only images that are not present locally.
    #[default]
    IfNotPresent,
    /// Pull every image once per run, even if present.
    Always,
    /// Never pull: an image that is not present is an error.
    Never,
}

/// The network of invocation containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ContainerNetwork {
    /// Join the network namespace of one sandbox container per executor: the daemon's default
    /// network, without a network stack per container. Containers share `localhost`.
    #[default]
    Shared,
    /// This Docker network mode for each container: `bridge` (a network stack of its own, the
    /// daemon's default), `host`, `none`, a network's name, or `container:<name|id>`.
    Mode(String),
}

impl FromStr for ContainerNetwork {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" => Err("a network mode cannot be empty (`shared`, `bridge`, `host`, `none`, a network's name, or \
                       `container:<name|id>`)"
                .into()),
            "shared" => Ok(ContainerNetwork::Shared),
            "container:" => Err("`container:` needs the name or ID of a running container".into()),
            mode => Ok(ContainerNetwork::Mode(mode.to_string())),
        }
    }
}

/// The shared network's sandbox container, once asked for.
#[derive(Debug)]
enum Sandbox {
    NotStarted,
    Running(String),
    /// No pause program for the daemon's architecture: containers get networks of their own.
    Unsupported,
}

/// How long connecting to the daemon may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs images as containers. Connects lazily: a run that uses no image never talks to Docker.
pub struct DockerExecutor {
    pull: PullPolicy,
    network: ContainerNetwork,
    sandbox: tokio::sync::Mutex<Sandbox>,
    output_limit: usize,
    owner: String,
    client: OnceCell<Result<Docker, String>>,
    /// Image reference → (image ID, run that last pulled it).
    images: Mutex<HashMap<String, (String, Option<String>)>>,
    /// Successful `init` outcomes: a reconcile loop does not re-run `init` on every pass.
    init_cache: InitAnswers,
    /// Between SIGTERM and SIGKILL for a container stopped before it ended.
    kill_grace: Duration,
}

impl DockerExecutor {
    pub fn new(pull: PullPolicy) -> Self {
        Self {
            pull,
            network: ContainerNetwork::default(),
            sandbox: tokio::sync::Mutex::new(Sandbox::NotStarted),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            owner: this_process_owner(),
            client: OnceCell::new(),
            images: Mutex::default(),
            init_cache: InitAnswers::default(),
            kill_grace: Duration::from_secs(5),
        }
    }

    pub fn with_kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    pub fn with_output_limit(mut self, limit: usize) -> Self {
        self.output_limit = limit;
        self
    }

    pub fn with_network(mut self, network: ContainerNetwork) -> Self {
        self.network = network;
        self
    }

    /// The ID of the running network sandbox, if one was started.
    pub async fn sandbox_id(&self) -> Option<String> {
        match &*self.sandbox.lock().await {
            Sandbox::Running(id) => Some(id.clone()),
            Sandbox::NotStarted | Sandbox::Unsupported => None,
        }
    }

    /// The network mode of the next container: the sandbox's (started on first use) when the
    /// network is shared; `None` leaves the daemon's default.
    async fn network_mode(&self, docker: &Docker) -> Result<Option<String>, ExecError> {
        if let ContainerNetwork::Mode(mode) = &self.network {
            return Ok(Some(mode.clone()));
        }
        let mut state = self.sandbox.lock().await;
        if let Sandbox::NotStarted = *state {
            *state = start_sandbox(docker, &self.owner).await?;
        }
        Ok(match &*state {
            Sandbox::Running(id) => Some(format!("container:{id}")),
            Sandbox::NotStarted | Sandbox::Unsupported => None,
        })
    }

    /// After a container failed to start in the sandbox `mode`: whether the sandbox is gone (a
    /// daemon restart, someone removed it), in which case it is forgotten so that the next
    /// container starts a new one.
    async fn sandbox_was_lost(&self, docker: &Docker, mode: Option<&str>) -> bool {
        let Some(id) = mode.and_then(|m| m.strip_prefix("container:")) else {
            return false;
        };
        let mut state = self.sandbox.lock().await;
        match &*state {
            Sandbox::Running(current) if current == id => {
                if sandbox::is_running(docker, id).await {
                    return false;
                }
                tracing::warn!(sandbox = id, "the network sandbox container is gone; starting another");
                remove_container(docker, id).await;
                *state = Sandbox::NotStarted;
                true
            }
            // Replaced meanwhile by another invocation that found it gone.
            _ => self.network == ContainerNetwork::Shared,
        }
    }

    /// The `deployster.io/owner` label value of containers this process creates.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The connected client; the first call connects, negotiates the API version and removes
    /// orphaned containers.
    async fn client(&self) -> Result<&Docker, ExecError> {
        let connected = self
            .client
            .get_or_init(|| async {
                let host = docker_host();
                let unreachable = |why: String| format!("cannot reach the Docker daemon at {host}: {why}");
                let docker = Docker::connect_with_defaults().map_err(|e| unreachable(describe(&e)))?;
                let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version())
                    .await
                    .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}")))?
                    .map_err(|e| unreachable(describe(&e)))?;
                match remove_orphans(&docker).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(removed = n, "removed containers orphaned by a deployster that died"),
                    Err(e) => tracing::warn!(error = %describe(&e), "could not look for orphaned containers"),
                }
                Ok(docker)
            })
            .await;
        connected.as_ref().map_err(|message| ExecError::Unavailable(message.clone()))
    }

    /// Makes sure `image` is present according to the pull policy; returns its ID.
    async fn ensure_image(&self, docker: &Docker, image: &ImageRef, run_id: &str) -> Result<String, ExecError> {
        let reference = image.to_string();
        if let Some((id, pulled_by)) = self.images.lock().expect("images lock").get(&reference)
            && (self.pull != PullPolicy::Always || pulled_by.as_deref() == Some(run_id))
        {
            return Ok(id.clone());
        }
        let image_error = |message: String| ExecError::Image { image: reference.clone(), message };
        let present = match docker.inspect_image(&reference).await {
            Ok(inspect) => inspect.id,
            Err(DockerError::DockerResponseServerError { status_code: 404, .. }) => None,
            Err(e) => return Err(image_error(describe(&e))),
        };
        let mut pulled = None;
        let id = match (present, self.pull) {
            (Some(id), PullPolicy::IfNotPresent | PullPolicy::Never) => id,
            (None, PullPolicy::Never) => {
                return Err(image_error("not present locally, and the pull policy `never` forbids pulling it".into()));
            }
            (_, _) => {
                pull(docker, image).await.map_err(|e| image_error(format!("cannot pull it: {e}")))?;
                pulled = Some(run_id.to_string());
                let inspect = docker.inspect_image(&reference).await.map_err(|e| image_error(describe(&e)))?;
                inspect.id.ok_or_else(|| image_error("the daemon reported no image ID".into()))?
            }
        };
        self.images.lock().expect("images lock").insert(reference, (id.clone(), pulled));
        Ok(id)
    }

    fn container_body(&self, image: &str, invocation: &Invocation, network: Option<String>) -> ContainerCreateBody {
        let labels = HashMap::from([
            (LABEL_MANIFEST.to_string(), invocation.labels.manifest.clone()),
            (LABEL_RESOURCE.to_string(), invocation.labels.resource.clone()),
            (LABEL_PHASE.to_string(), invocation.labels.phase.clone()),
            (LABEL_RUN_ID.to_string(), invocation.labels.run_id.clone()),
            (LABEL_OWNER.to_string(), self.owner.clone()),
        ]);
        let mounts = invocation
            .mounts
            .iter()
            .map(|m| DockerMount {
                target: Some(m.container_path.clone()),
                source: Some(m.host_path.display().to_string()),
                typ: Some(MountType::BIND),
                read_only: Some(!m.writable),
                ..DockerMount::default()
            })
            .collect();
        ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: invocation.entrypoint.clone().map(|e| vec![e]),
            // No arguments means the image's own default command.
            cmd: (!invocation.args.is_empty()).then(|| invocation.args.clone()),
            env: Some(invocation.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(false),
            host_config: Some(HostConfig {
                mounts: Some(mounts),
                network_mode: network,
                // Output is captured through the attachment; a daemon-side log would be waste.
                log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        }
    }

    /// Runs one container to completion, removing it on every path.
    async fn run_container(
        &self,
        docker: &Docker,
        image: &str,
        invocation: &Invocation,
        network: Option<String>,
    ) -> Result<Outcome, ExecError> {
        let started = Instant::now();
        let body = self.container_body(image, invocation, network);
        let id = docker
            .create_container(None, body)
            .await
            .map_err(|e| ExecError::Container { step: "create", message: describe(&e) })?
            .id;
        let mut work = std::pin::pin!(self.attach_and_run(docker, &id, invocation));
        let stopped = tokio::select! {
            r = work.as_mut() => Ok(r),
            _ = tokio::time::sleep(invocation.timeout) => Err(ExecError::TimedOut(invocation.timeout)),
            _ = invocation.cancel.cancelled() => Err(ExecError::Cancelled),
        };
        let kill = |signal: &str| {
            docker.kill_container(&id, Some(KillContainerOptionsBuilder::default().signal(signal).build()))
        };
        let result = match stopped {
            Ok(finished) => finished,
            Err(e) => {
                // SIGTERM, its output still read through the grace period, then SIGKILL. (The
                // program is the container's PID 1: it sees SIGTERM only if it handles it.)
                let _ = kill("TERM").await;
                if tokio::time::timeout(self.kill_grace, work.as_mut()).await.is_err() {
                    let _ = kill("KILL").await;
                }
                Err(e)
            }
        };
        if result.is_err() {
            let _ = kill("KILL").await;
        }
        remove_container(docker, &id).await;
        result.map(|(exit, stdout, stderr)| Outcome { exit, stdout, stderr, elapsed: started.elapsed() })
    }

    async fn attach_and_run(
        &self,
        docker: &Docker,
        id: &str,
        invocation: &Invocation,
    ) -> Result<(Exit, Vec<u8>, Vec<u8>), ExecError> {
        let options =
            AttachContainerOptionsBuilder::default().stdin(true).stdout(true).stderr(true).stream(true).build();
        let attached = docker
            .attach_container(id, Some(options))
            .await
            .map_err(|e| ExecError::Container { step: "attach to", message: describe(&e) })?;
        let (mut input, mut output) = (attached.input, attached.output);
        // Written concurrently with start: a request larger than the pipe buffer only drains
        // once the program runs. A program that exits without reading it is not our failure.
        let write = async {
            let _ = input.write_all(&invocation.stdin).await;
            let _ = input.shutdown().await;
        };
        let run = async {
            docker
                .start_container(id, None::<StartContainerOptions>)
                .await
                .map_err(|e| ExecError::Container { step: "start", message: describe(&e) })?;
            let mut stdout = Capture::new(Stream::Stdout, self.output_limit, invocation.sink.clone());
            let mut stderr = Capture::new(Stream::Stderr, self.output_limit, invocation.sink.clone());
            while let Some(item) = output.next().await {
                match item.map_err(|e| ExecError::Container { step: "read the output of", message: describe(&e) })? {
                    LogOutput::StdOut { message } => stdout.push(&message)?,
                    LogOutput::StdErr { message } => stderr.push(&message)?,
                    LogOutput::Console { .. } | LogOutput::StdIn { .. } => {}
                }
            }
            let exit = wait_for_exit(docker, id).await?;
            Ok((exit, stdout.finish(), stderr.finish()))
        };
        // The run decides: once the container exited, a half-close still in flight on the
        // attachment is of no interest (waiting for it cost ~40 ms per invocation).
        tokio::pin!(write, run);
        let mut written = false;
        loop {
            tokio::select! {
                () = &mut write, if !written => written = true,
                result = &mut run => return result,
            }
        }
    }
}

#[async_trait]
impl Executor for DockerExecutor {
    async fn preflight(&self, _programs: &[TypeRef]) -> Result<(), ExecError> {
        self.client().await.map(|_| ())
    }

    /// Removes (force) every container of run `run_id`. Without a reachable daemon there is
    /// nothing this executor could have left running, or could stop.
    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        let Ok(docker) = self.client().await else { return Ok(0) };
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_RUN_ID}={run_id}")])]);
        let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let containers = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| ExecError::Container { step: "list", message: describe(&e) })?;
        for id in containers.iter().filter_map(|c| c.id.as_deref()) {
            remove_container(docker, id).await;
        }
        Ok(containers.len())
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let TypeRef::Image(image) = &invocation.program else {
            return Err(ExecError::Unavailable(format!("the Docker executor cannot run {}", invocation.program)));
        };
        super::host_mounts_only(&invocation)?;
        let docker = self.client().await?;
        let image_id = self.ensure_image(docker, image, &invocation.labels.run_id).await?;
        let cache_key = (invocation.labels.phase == "init").then(|| {
            InitKey::of(&[image_id.as_bytes()], invocation.entrypoint.as_deref(), &invocation.args, &invocation)
        });
        let image = image.to_string();
        self.init_cache
            .get_or_run(cache_key, async {
                let network = self.network_mode(docker).await?;
                match self.run_container(docker, &image, &invocation, network.clone()).await {
                    Err(ExecError::Container { step: "create" | "start", .. })
                        if self.sandbox_was_lost(docker, network.as_deref()).await =>
                    {
                        let network = self.network_mode(docker).await?;
                        self.run_container(docker, &image, &invocation, network).await
                    }
                    result => result,
                }
            })
            .await
    }
}

impl Drop for DockerExecutor {
    /// Removes the network sandbox. Blocking, on a thread and connection of its own: the
    /// runtime this executor ran on may be busy or shutting down.
    fn drop(&mut self) {
        let Sandbox::Running(id) = std::mem::replace(self.sandbox.get_mut(), Sandbox::NotStarted) else {
            return;
        };
        let removal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                let docker = Docker::connect_with_defaults().ok()?;
                tokio::time::timeout(CONNECT_TIMEOUT, remove_container(&docker, &id)).await.ok()
            })
        });
        if !matches!(removal.join(), Ok(Some(()))) {
            tracing::warn!("could not remove the network sandbox container; the next deployster to start will");
        }
    }
}

async fn start_sandbox(docker: &Docker, owner: &str) -> Result<Sandbox, ExecError> {
    let image = sandbox::ensure_image(docker).await.map_err(|e| ExecError::Sandbox(e.to_string()))?;
    let Some(image) = image else {
        tracing::warn!("no network sandbox for this daemon's architecture: each container gets a network of its own");
        return Ok(Sandbox::Unsupported);
    };
    let id = sandbox::start(docker, &image, owner).await.map_err(|e| ExecError::Sandbox(e.to_string()))?;
    tracing::debug!(sandbox = %id, "started the network sandbox");
    Ok(Sandbox::Running(id))
}

/// The exit code, once the container stopped. bollard reports a non-zero code as an error.
async fn wait_for_exit(docker: &Docker, id: &str) -> Result<Exit, ExecError> {
    match docker.wait_container(id, None::<WaitContainerOptions>).next().await {
        Some(Ok(response)) => Ok(Exit::Code(response.status_code as i32)),
        Some(Err(DockerError::DockerContainerWaitError { code, .. })) => Ok(Exit::Code(code as i32)),
        Some(Err(e)) => Err(ExecError::Container { step: "wait for", message: describe(&e) }),
        None => {
            Err(ExecError::Container { step: "wait for", message: "the daemon ended the wait without a status".into() })
        }
    }
}

/// Removes every container carrying our labels whose owning process, on this host, is gone.
/// Containers of other hosts are left alone: their owner may be alive.
pub async fn remove_orphans(docker: &Docker) -> Result<usize, DockerError> {
    let filters = HashMap::from([("label".to_string(), vec![LABEL_OWNER.to_string()])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let mut removed = 0;
    for container in docker.list_containers(Some(options)).await? {
        let owner = container.labels.as_ref().and_then(|l| l.get(LABEL_OWNER)).cloned().unwrap_or_default();
        if let Some(id) = container.id
            && owner_is_gone(&owner)
        {
            remove_container(docker, &id).await;
            removed += 1;
        }
    }
    Ok(removed)
}

fn hostname() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The start time of a process (clock ticks since boot), which tells a live process from a
/// later one that reuses its PID.
fn process_start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; the start time is field 22 overall.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19).map(str::to_string)
}

fn this_process_owner() -> String {
    let pid = std::process::id().to_string();
    let start = process_start_time(&pid).unwrap_or_default();
    format!("{}/{pid}/{start}", hostname())
}

/// Whether the owner recorded on a container is a process of this host that no longer runs.
fn owner_is_gone(owner: &str) -> bool {
    let mut parts = owner.splitn(3, '/');
    let (Some(host), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    host == hostname() && process_start_time(pid).as_deref() != Some(start)
}

/// Where the daemon is expected, for messages.
fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_gone_only_when_its_process_on_this_host_is() {
        let me = this_process_owner();
        assert!(!owner_is_gone(&me), "this process is alive");
        let pid = std::process::id();
        assert!(owner_is_gone(&format!("{}/{pid}/0", hostname())), "same PID, another start time: reused");
        assert!(owner_is_gone(&format!("{}/4194304999/1", hostname())), "no such process");
        assert!(!owner_is_gone("some-other-host/1/1"), "other hosts are not ours to judge");
        assert!(!owner_is_gone("garbage"));
    }
}
