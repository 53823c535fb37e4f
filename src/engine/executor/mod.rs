//! Executors run one invocation of a resource program and report what it did.
//!
//! This is the side-effect seam of the engine: the coordinator builds [`Invocation`]s, an
//! [`Executor`] runs them. [`process::ProcessExecutor`] runs local programs and the built-in
//! types; [`fake::FakeExecutor`] answers from a script for unit tests. [`Dispatch`] routes by
//! program kind so that a manifest may mix kinds.

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

/// Routes built-in and local programs to one executor and images to another.
pub struct Dispatch {
    pub local: Arc<dyn Executor>,
    /// `None` when this build or configuration has no container executor.
    pub images: Option<Arc<dyn Executor>>,
    /// Whether local program paths may run. The controller refuses them by default: whoever
    /// can create a Manifest must not gain code execution in the controller.
    pub local_programs: bool,
    /// Whether the state and actions of built-ins that act on files run where images do: the
    /// controller's Pods ([`TypeRef::is_file_builtin`]). Their init, the same answer for
    /// every resource, is still answered here.
    pub builtins_with_images: bool,
}

impl Dispatch {
    /// Local programs as `local` says, images on `images`, built-ins beside deployster.
    pub fn new(local: Arc<dyn Executor>, images: Option<Arc<dyn Executor>>) -> Dispatch {
        Dispatch { local, images, local_programs: true, builtins_with_images: false }
    }

    /// The executor of `invocation`'s images, when it is one it runs.
    fn runs_with_images(&self, invocation: &Invocation) -> bool {
        match &invocation.program {
            TypeRef::Image(_) => true,
            builtin => self.builtins_with_images && builtin.is_file_builtin() && !invocation.args.is_empty(),
        }
    }
}

fn no_image_executor(image: &super::typeref::ImageRef) -> ExecError {
    ExecError::Unavailable(format!(
        "Docker executor not available: `{image}` is a Docker image, and this deployster was built \
         without the `docker` feature (use builtin/<name> or a local program path)"
    ))
}

#[async_trait]
impl Executor for Dispatch {
    async fn preflight(&self, programs: &[TypeRef]) -> Result<(), ExecError> {
        let (images, local): (Vec<TypeRef>, Vec<TypeRef>) =
            programs.iter().cloned().partition(|p| matches!(p, TypeRef::Image(_)));
        self.local.preflight(&local).await?;
        let first_image = images.iter().find_map(|p| if let TypeRef::Image(image) = p { Some(image) } else { None });
        match (first_image, &self.images) {
            (None, _) => Ok(()),
            (Some(_), Some(executor)) => executor.preflight(&images).await,
            (Some(image), None) => Err(no_image_executor(image)),
        }
    }

    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        let mut stopped = self.local.stop_run(run_id).await?;
        if let Some(images) = &self.images {
            stopped += images.stop_run(run_id).await?;
        }
        Ok(stopped)
    }

    fn starts_program(&self, invocation: &Invocation) -> bool {
        match (self.runs_with_images(invocation), &self.images) {
            (true, Some(images)) => images.starts_program(invocation),
            (true, None) => false,
            (false, _) => self.local.starts_program(invocation),
        }
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        match (&invocation.program, &self.images) {
            (_, Some(images)) if self.runs_with_images(&invocation) => images.invoke(invocation).await,
            (TypeRef::Image(image), None) => Err(no_image_executor(image)),
            (TypeRef::Local(path), _) if !self.local_programs => Err(ExecError::Unavailable(format!(
                "local programs are refused here ({}); use builtin/<name> or a Docker image",
                path.display()
            ))),
            _ => {
                host_mounts_only(&invocation)?;
                self.local.invoke(invocation).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{FakeExecutor, FakeReply};
    use super::*;

    #[tokio::test]
    async fn without_an_image_executor_images_fail_once_with_a_clear_message() {
        let local = Arc::new(FakeExecutor::new(|_| FakeReply::default()));
        let dispatch = Dispatch::new(local.clone(), None);
        let image = TypeRef::parse("registry.local:5000/acme/vm:1.2", std::path::Path::new("/")).unwrap();
        let err = dispatch.preflight(&[TypeRef::Builtin("file".into()), image]).await.unwrap_err();
        assert_eq!(err.reason(), "ExecutorUnavailable");
        let text = err.to_string();
        assert!(text.contains("`registry.local:5000/acme/vm:1.2` is a Docker image"), "{text}");
        assert!(text.contains("without the `docker` feature"), "{text}");
        assert!(dispatch.preflight(&[TypeRef::Builtin("file".into())]).await.is_ok());
        assert!(local.calls().is_empty());
    }

    #[tokio::test]
    async fn in_a_cluster_file_built_ins_run_where_images_do_but_for_init() {
        let local = Arc::new(FakeExecutor::new(|_| FakeReply::default()));
        let images = Arc::new(FakeExecutor::new(|_| FakeReply::default()));
        let dispatch = Dispatch { builtins_with_images: true, ..Dispatch::new(local.clone(), Some(images.clone())) };
        let call = |name: &str, args: &[&str]| {
            let mut invocation = Invocation::new(TypeRef::Builtin(name.into()), Duration::from_secs(1));
            invocation.args = args.iter().map(|a| a.to_string()).collect();
            invocation
        };
        for (name, args) in [("file", &["state"][..]), ("directory", &["create"]), ("file", &["delete"])] {
            assert!(dispatch.starts_program(&call(name, args)), "{name} {args:?} starts a Pod");
            dispatch.invoke(call(name, args)).await.unwrap();
        }
        for (name, args) in [("file", &[][..]), ("directory", &[]), ("kubernetes", &["state"]), ("package", &["state"])]
        {
            dispatch.invoke(call(name, args)).await.unwrap();
        }
        let args = |calls: Vec<fake::FakeCall>| calls.into_iter().map(|c| c.args.join(" ")).collect::<Vec<_>>();
        assert_eq!(args(images.calls()), ["state", "create", "delete"]);
        assert_eq!(args(local.calls()), ["", "", "state", "state"], "inits, builtin/kubernetes and the rest stay");
        // Beside deployster (the CLI), every built-in stays.
        let beside = Dispatch::new(local.clone(), Some(images.clone()));
        beside.invoke(call("file", &["state"])).await.unwrap();
        assert_eq!(images.calls().len(), 3);
    }

    #[tokio::test]
    async fn local_programs_can_be_refused() {
        let local = Arc::new(FakeExecutor::new(|_| FakeReply::default()));
        let dispatch = Dispatch { local_programs: false, ..Dispatch::new(local.clone(), None) };
        let invocation = |program| Invocation::new(program, Duration::from_secs(1));
        let err = dispatch.invoke(invocation(TypeRef::Local("/bin/evil".into()))).await.unwrap_err();
        assert!(err.to_string().contains("local programs are refused here (/bin/evil)"), "{err}");
        assert!(dispatch.invoke(invocation(TypeRef::Builtin("file".into()))).await.is_ok());
        assert_eq!(local.calls().len(), 1, "only the built-in ran");
    }
}
