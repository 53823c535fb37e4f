//! Executors run one invocation of a resource program and report what it did.
//!
//! This is the side-effect seam of the engine: the coordinator builds [`Invocation`]s, an
//! [`Executor`] runs them. [`process::ProcessExecutor`] runs local programs and the built-in
//! types; [`fake::FakeExecutor`] answers from a script for unit tests. Which executor answers which
//! kind of type is decided above the engine, in `crate::executors::route`.

pub mod budget;
#[cfg(feature = "docker")]
pub mod docker;
pub mod fake;
pub(crate) mod init_cache;
pub mod output;
pub mod process;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::typeref::TypeRef;

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives output lines as the program prints them (without the trailing newline).
pub type LineSink = Arc<dyn Fn(Stream, &str) + Send + Sync>;

/// A host path handed to the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub name: String,
    pub host_path: PathBuf,
    /// The path inside a container (executors that run containers mount it there).
    pub container_path: String,
    pub writable: bool,
    /// A plug that is an object of the cluster (`host_path` is then empty): only executors
    /// that run Pods can mount it.
    pub cluster: Option<super::validate::ClusterPlug>,
}

/// Refuses an invocation with a plug of the cluster: for executors that mount host paths.
pub fn host_mounts_only(invocation: &Invocation) -> Result<(), ExecError> {
    match invocation.mounts.iter().find_map(|m| Some((&m.name, m.cluster.as_ref()?))) {
        Some((name, cluster)) => Err(ExecError::Unavailable(format!(
            "plug `{name}` is {} of the cluster: only resource types run as Pods (`--executor pod`) can \
             have it",
            cluster.describe()
        ))),
        None => Ok(()),
    }
}

/// What an invocation is, for labels, logs and container names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationLabels {
    pub manifest: String,
    pub resource: String,
    /// `init`, `state` or `action:<name>`.
    pub phase: String,
    pub run_id: String,
    /// The names the manifest's `moved` says the resource had before: what it owned under
    /// them is its own (`builtin/kubernetes`' owner annotation).
    pub formerly: Vec<String>,
}

/// One run of a resource program.
#[derive(Clone)]
pub struct Invocation {
    pub program: TypeRef,
    /// Overrides the program's default entrypoint.
    pub entrypoint: Option<String>,
    pub args: Vec<String>,
    /// Written to the program's stdin, which is then closed.
    pub stdin: Vec<u8>,
    pub mounts: Vec<Mount>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Working directory for local programs (the manifest's directory).
    pub workdir: Option<PathBuf>,
    pub timeout: Duration,
    pub labels: InvocationLabels,
    /// Streams output lines while the program runs; output is captured either way.
    pub sink: Option<LineSink>,
    pub cancel: CancellationToken,
}

impl Invocation {
    /// An invocation of `program` with no arguments, input, mounts or environment, stopped after
    /// `timeout`: what callers fill in the rest of (`Invocation { args, ..Invocation::new(..) }`).
    pub fn new(program: TypeRef, timeout: Duration) -> Self {
        Self {
            program,
            entrypoint: None,
            args: Vec::new(),
            stdin: Vec::new(),
            mounts: Vec::new(),
            env: Vec::new(),
            workdir: None,
            timeout,
            labels: InvocationLabels::default(),
            sink: None,
            cancel: CancellationToken::new(),
        }
    }
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print stdin: it carries the rendered config, which may hold credentials.
        f.debug_struct("Invocation")
            .field("program", &self.program)
            .field("entrypoint", &self.entrypoint)
            .field("args", &self.args)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// How a program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// A built-in answered inside deployster, and failed: no process ran, so there is no exit
    /// code to show; stderr says why.
    Failed,
}

impl Exit {
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
            Exit::Failed => f.write_str("failed"),
        }
    }
}

/// What a finished program did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub exit: Exit,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
}

/// Why a program could not be run to completion.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("program not found: {0}")]
    NotFound(String),
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    /// The program exists, but what should run it does not: a `#!` interpreter, or the dynamic
    /// loader a binary was linked for.
    #[error("cannot start {program}: {what} is not installed")]
    InterpreterMissing { program: String, what: String },
    #[error("timed out after {0:?} and was killed")]
    TimedOut(Duration),
    #[error("printed more than {limit} bytes on {stream} and was stopped")]
    OutputTooLarge { limit: usize, stream: &'static str },
    #[error("cancelled")]
    Cancelled,
    #[error("{0}")]
    Unavailable(String),
    #[error("image `{image}`: {message}")]
    Image { image: String, message: String },
    #[error("Docker could not {step} the container: {message}")]
    Container { step: &'static str, message: String },
    #[error(
        "Docker could not start the network sandbox that containers share: {0} (`--container-network bridge` gives \
         each container a network of its own instead)"
    )]
    Sandbox(String),
    /// A Pod that ran (or could not run) the program, in Kubernetes' words.
    #[error("{message}")]
    Pod { reason: &'static str, message: String },
    #[error("i/o error while running the program: {0}")]
    Io(#[from] std::io::Error),
}

impl ExecError {
    pub fn reason(&self) -> &'static str {
        match self {
            ExecError::NotFound(_) => "ProgramNotFound",
            ExecError::Spawn { .. } => "SpawnFailed",
            ExecError::InterpreterMissing { .. } => "InterpreterNotFound",
            ExecError::TimedOut(_) => "TimedOut",
            ExecError::OutputTooLarge { .. } => "OutputTooLarge",
            ExecError::Cancelled => "Cancelled",
            ExecError::Unavailable(_) => "ExecutorUnavailable",
            ExecError::Image { .. } => "ImageUnavailable",
            ExecError::Container { .. } => "ContainerFailed",
            ExecError::Sandbox(_) => "SandboxFailed",
            ExecError::Pod { reason, .. } => reason,
            ExecError::Io(_) => "ExecutorIo",
        }
    }
}

/// Runs invocations. Implementations share no mutable state with the coordinator.
#[async_trait]
pub trait Executor: Send + Sync {
    /// Called once before a run's first invocation with the resource types it will use, so that
    /// an unreachable backend is one clear error instead of one per resource.
    async fn preflight(&self, _programs: &[TypeRef]) -> Result<(), ExecError> {
        Ok(())
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError>;

    /// Whether running `invocation` starts a program (a process, a container) rather than being
    /// answered in this process: what a budget of invocations counts.
    fn starts_program(&self, _invocation: &Invocation) -> bool {
        true
    }

    /// Stops whatever run `run_id` still has running here — called for a run that was
    /// interrupted (killed, crashed) before its next run reads any state, so that no action
    /// ever runs twice at once — and waits until it is gone. How many it stopped.
    async fn stop_run(&self, _run_id: &str) -> Result<usize, ExecError> {
        Ok(0)
    }
}

/// An invocation's working directory must exist (local programs start in it).
pub fn check_workdir(invocation: &Invocation) -> Result<(), ExecError> {
    match &invocation.workdir {
        Some(dir) if !dir.is_dir() => {
            Err(ExecError::Unavailable(format!("working directory {} does not exist", dir.display())))
        }
        _ => Ok(()),
    }
}

/// The run an invocation belongs to, in every program's environment: how a process executor's
/// [`Executor::stop_run`] finds what an interrupted run left running, descendants included. Not
/// part of what an init answer depends on ([`init_cache`]).
pub const RUN_ID_ENV: &str = "DEPLOYSTER_RUN_ID";

/// Default bound on each captured stream.
pub const DEFAULT_OUTPUT_LIMIT: usize = 8 * 1024 * 1024;
