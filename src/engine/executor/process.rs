//! Runs local programs and the built-in types as child processes.
//!
//! Each program runs in its own process group so that a timeout or cancellation stops whatever
//! it started too. Output is captured up to a limit and streamed line by line to the
//! invocation's sink. Plugs are passed as host paths (in the request, and as
//! `DEPLOYSTER_PLUG_<NAME>` variables); read-only cannot be enforced on a local process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::output::Capture;
use super::{DEFAULT_OUTPUT_LIMIT, ExecError, Executor, Exit, Invocation, LineSink, Outcome, Stream};
use crate::engine::typeref::TypeRef;

/// The hidden sub-command of the deployster binary that runs a built-in type.
pub const BUILTIN_SUBCOMMAND: &str = "__type";
/// The hidden sub-command that runs a local program under a supervisor that kills the program's
/// whole process group when the deployster that started it dies (see [`supervise`]).
pub const EXEC_SUBCOMMAND: &str = "__exec";
/// The pid of the deployster that started a program, for [`die_with_parent`].
pub const PARENT_ENV: &str = "DEPLOYSTER_PARENT_PID";
/// The run an invocation belongs to, in every program's environment: how [`Executor::stop_run`]
/// finds what an interrupted run left running, descendants included.
pub const RUN_ID_ENV: &str = "DEPLOYSTER_RUN_ID";

/// In a program started by deployster (built-in types, `__exec`): receive `signal` when that
/// deployster dies, however it dies — `kill -9` included. Exits at once if it is already gone.
pub fn die_with_parent(signal: Signal) {
    let Some(parent) = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse::<i32>().ok()) else { return };
    // Set first, then check: a parent that died in between shows as a changed parent pid.
    let armed = nix::sys::prctl::set_pdeathsig(signal).is_ok();
    if !armed || nix::unistd::getppid().as_raw() != parent {
        std::process::exit(125);
    }
}

/// `deployster __exec PROGRAM [ARGS…]`: runs a local program under a small supervisor, the
/// leader of the program's process group. When the deployster that started it dies — even by
/// `kill -9` — the supervisor kills the whole group at once: the program and everything it
/// started. Otherwise it only waits, and ends as the program ended (its exit code, or the
/// signal that killed it), so that deployster sees the program's own status. The signals the
/// executor sends the group to stop it (SIGTERM, then SIGKILL) reach the program directly.
pub fn supervise(argv: &[std::ffi::OsString]) -> i32 {
    use nix::sys::signal::SigSet;
    use nix::sys::signalfd::SignalFd;
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let Some(program) = argv.first() else {
        eprintln!("deployster {EXEC_SUBCOMMAND}: no program given");
        return 2;
    };
    // Blocked here and read from a signalfd: parent death (SIGUSR1), the child's end (SIGCHLD),
    // and the stop signals meant for the program (sent to the group, they reach us too).
    let mut watched = SigSet::empty();
    for signal in [Signal::SIGUSR1, Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        watched.add(signal);
    }
    let Ok(signals) = watched.thread_block().and_then(|()| SignalFd::new(&watched)) else {
        eprintln!("deployster {EXEC_SUBCOMMAND}: cannot watch for signals");
        return 126;
    };
    die_with_parent(Signal::SIGUSR1);
    let child = match spawn_unblocked(program, argv, &watched) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cannot run {}: {e}", program.to_string_lossy());
            return if e == nix::errno::Errno::ENOENT { 127 } else { 126 };
        }
    };
    let parent = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse::<i32>().ok());
    loop {
        let signal = signals.read_signal().ok().flatten().and_then(|info| Signal::try_from(info.ssi_signo as i32).ok());
        match signal {
            Some(Signal::SIGUSR1) if parent.is_some_and(|p| nix::unistd::getppid().as_raw() != p) => {
                // Deployster is gone: so is everything it started.
                let _ = killpg(nix::unistd::getpgrp(), Signal::SIGKILL);
            }
            // A stop meant for the program: it may have come before the program existed (it
            // was sent to the group while we started). Sent twice is harmless; lost is not.
            Some(stop @ (Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP)) => {
                let _ = nix::sys::signal::kill(child, stop);
            }
            _ => {}
        }
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, signal, _)) => return end_by(signal),
            Ok(_) => {}
            Err(_) => return 126,
        }
    }
}

/// Starts the program in this process group, with no signal blocked and `watched` (and SIGPIPE)
/// at their default dispositions — not as this supervisor has them — and without
/// [`PARENT_ENV`].
fn spawn_unblocked(
    program: &std::ffi::OsStr,
    argv: &[std::ffi::OsString],
    watched: &nix::sys::signal::SigSet,
) -> nix::Result<Pid> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |bytes: &[u8]| CString::new(bytes).map_err(|_| nix::errno::Errno::EINVAL);
    let args = argv.iter().map(|a| c(a.as_bytes())).collect::<nix::Result<Vec<_>>>()?;
    let env = std::env::vars_os()
        .filter(|(k, _)| k != PARENT_ENV)
        .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<nix::Result<Vec<_>>>()?;
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF)?;
    attr.set_sigmask(&nix::sys::signal::SigSet::empty())?;
    // SIGPIPE too: the Rust runtime ignores it, and programs expect its default.
    let mut defaults = *watched;
    defaults.add(Signal::SIGPIPE);
    attr.set_sigdefault(&defaults)?;
    posix_spawn(c(program.as_bytes())?.as_c_str(), &PosixSpawnFileActions::init()?, &attr, &args, &env)
}

/// Ends this process by `signal`, as the program ended. We install no handlers, but the Rust
/// runtime does for SIGSEGV and SIGBUS (stack overflows): it resets the default and returns,
/// so a second raise ends the process.
fn end_by(signal: Signal) -> i32 {
    let mut only = nix::sys::signal::SigSet::empty();
    only.add(signal);
    let _ = only.thread_unblock();
    let _ = nix::sys::signal::raise(signal);
    let _ = nix::sys::signal::raise(signal);
    128 + signal as i32
}

/// Runs local programs; `builtin_program` is the deployster executable that carries the
/// built-in types.
#[derive(Clone)]
pub struct ProcessExecutor {
    builtin_program: PathBuf,
    output_limit: usize,
    /// How long a program gets between SIGTERM and SIGKILL when stopped.
    kill_grace: Duration,
    spawner: Arc<OnceLock<Spawner>>,
    /// Local programs run through `deployster __exec` so that they die with deployster; the
    /// executor's own unit tests, which have no deployster binary, run them directly.
    exec_wrapper: bool,
}

impl ProcessExecutor {
    pub fn new(builtin_program: PathBuf) -> Self {
        Self {
            builtin_program,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            kill_grace: Duration::from_secs(5),
            spawner: Arc::default(),
            exec_wrapper: true,
        }
    }

    #[cfg(test)]
    fn without_exec_wrapper(mut self) -> Self {
        self.exec_wrapper = false;
        self
    }

    pub fn with_output_limit(mut self, limit: usize) -> Self {
        self.output_limit = limit;
        self
    }

    pub fn with_kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// The program and arguments to start for an invocation.
    fn command_line(&self, invocation: &Invocation) -> Result<(PathBuf, Vec<String>), ExecError> {
        match &invocation.program {
            TypeRef::Builtin(name) => {
                if let Some(entrypoint) = &invocation.entrypoint {
                    return Err(ExecError::NotFound(format!(
                        "built-in type builtin/{name} has no entrypoint `{entrypoint}`"
                    )));
                }
                let mut args = vec![BUILTIN_SUBCOMMAND.to_string(), name.clone()];
                args.extend(invocation.args.iter().cloned());
                Ok((self.builtin_program.clone(), args))
            }
            TypeRef::Local(path) => {
                let program = match &invocation.entrypoint {
                    // An entrypoint replaces the program; relative ones sit beside it.
                    Some(e) => path.parent().unwrap_or(Path::new("/")).join(e),
                    None => path.clone(),
                };
                if !program.is_file() {
                    return Err(ExecError::NotFound(program.display().to_string()));
                }
                if !self.exec_wrapper {
                    return Ok((program, invocation.args.clone()));
                }
                let mut args = vec![EXEC_SUBCOMMAND.to_string(), program.display().to_string()];
                args.extend(invocation.args.iter().cloned());
                Ok((self.builtin_program.clone(), args))
            }
            TypeRef::Image(image) => {
                Err(ExecError::Unavailable(format!("the process executor cannot run Docker image `{image}`")))
            }
        }
    }

    async fn spawn(&self, invocation: &Invocation) -> Result<Child, ExecError> {
        let (program, args) = self.command_line(invocation)?;
        let mut command = Command::new(&program);
        command.env(PARENT_ENV, std::process::id().to_string());
        command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(dir) = &invocation.workdir {
            if !dir.is_dir() {
                return Err(ExecError::Unavailable(format!("working directory {} does not exist", dir.display())));
            }
            command.current_dir(dir);
        }
        for mount in &invocation.mounts {
            command.env(plug_env_name(&mount.name), &mount.host_path);
        }
        command.envs(invocation.env.iter().map(|(k, v)| (k, v)));
        self.spawner.get_or_init(Spawner::start).spawn(command).await.map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => ExecError::NotFound(program.display().to_string()),
            _ => ExecError::Spawn { program: program.display().to_string(), source },
        })
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL after the grace period.
    async fn stop(&self, child: &mut Child) {
        let Some(pid) = child.id() else { return };
        let group = Pid::from_raw(pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        if tokio::time::timeout(self.kill_grace, child.wait()).await.is_err() {
            let _ = killpg(group, Signal::SIGKILL);
            let _ = child.wait().await;
        } else {
            // The leader is gone; anything it left in its group goes too.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Starts programs from one thread that lives as long as the executor. A program's parent-death
/// signal fires when the *thread* that started it ends, not only the process, and the async
/// runtime's threads may come and go.
struct Spawner {
    requests: std::sync::mpsc::Sender<(Command, tokio::sync::oneshot::Sender<std::io::Result<Child>>)>,
}

impl Spawner {
    /// Must be called inside the runtime: the thread registers children with it.
    fn start() -> Spawner {
        let (requests, incoming) =
            std::sync::mpsc::channel::<(Command, tokio::sync::oneshot::Sender<std::io::Result<Child>>)>();
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("deployster-spawner".into())
            .spawn(move || {
                let _inside = runtime.enter();
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the spawner thread");
        Spawner { requests }
    }

    async fn spawn(&self, command: Command) -> std::io::Result<Child> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let gone = || std::io::Error::other("the spawner thread is gone");
        self.requests.send((command, reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// The processes whose environment says they belong to run `run_id`: (pid, process group).
fn processes_of_run(run_id: &str) -> Vec<(i32, i32)> {
    let marker = format!("{RUN_ID_ENV}={run_id}");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == marker.as_bytes()))
        })
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let group = stat.rsplit(')').next()?.split_whitespace().nth(2)?.parse().ok()?;
            Some((pid, group))
        })
        .collect()
}

/// `DEPLOYSTER_PLUG_<NAME>`: the variable a local program finds a plug's path in.
pub fn plug_env_name(plug: &str) -> String {
    format!("DEPLOYSTER_PLUG_{}", plug.to_ascii_uppercase())
}

#[async_trait]
impl Executor for ProcessExecutor {
    /// Kills every process of the run — its programs' whole process groups, and whatever they
    /// started that kept the run's environment — and waits until they are gone.
    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        let found = processes_of_run(run_id);
        for &(pid, group) in &found {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !processes_of_run(run_id).is_empty() {
            if Instant::now() > deadline {
                return Err(ExecError::Unavailable(format!(
                    "programs of the interrupted run {run_id} are still running after SIGKILL"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(found.len())
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let started = Instant::now();
        let mut child = self.spawn(&invocation).await?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let input = invocation.stdin;
        let write = async move {
            if let Some(mut pipe) = stdin {
                // A program may exit without reading its input; a broken pipe is not our failure.
                let _ = pipe.write_all(&input).await;
            }
        };
        let limit = self.output_limit;
        let sink = invocation.sink;
        let work = async {
            let (_, out, err) = tokio::join!(
                write,
                capture(stdout, Stream::Stdout, sink.clone(), limit),
                capture(stderr, Stream::Stderr, sink.clone(), limit)
            );
            let (out, err) = (out?, err?);
            let status = child.wait().await?;
            Ok::<_, ExecError>((out, err, status))
        };
        let result = tokio::select! {
            r = work => r,
            _ = tokio::time::sleep(invocation.timeout) => Err(ExecError::TimedOut(invocation.timeout)),
            _ = invocation.cancel.cancelled() => Err(ExecError::Cancelled),
        };
        match result {
            Ok((stdout, stderr, status)) => {
                use std::os::unix::process::ExitStatusExt;
                let exit = match (status.code(), status.signal()) {
                    (Some(code), _) => Exit::Code(code),
                    (None, Some(signal)) => Exit::Signal(signal),
                    (None, None) => Exit::Code(-1),
                };
                Ok(Outcome { exit, stdout, stderr, elapsed: started.elapsed() })
            }
            Err(e) => {
                self.stop(&mut child).await;
                Err(e)
            }
        }
    }
}

/// Reads a stream to its end through a [`Capture`].
async fn capture(
    stream: Option<impl AsyncRead + Unpin>,
    which: Stream,
    sink: Option<LineSink>,
    limit: usize,
) -> Result<Vec<u8>, ExecError> {
    let Some(mut stream) = stream else { return Ok(Vec::new()) };
    let mut capture = Capture::new(which, limit, sink);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(capture.finish());
        }
        capture.push(&chunk[..n])?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::executor::Mount;
    use std::sync::{Arc, Mutex};

    fn shell(script: &str, dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("prog.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn invocation(program: PathBuf) -> Invocation {
        Invocation {
            args: vec!["a b".into()],
            stdin: b"{\"hello\": 1}".to_vec(),
            ..Invocation::new(TypeRef::Local(program), Duration::from_secs(10))
        }
    }

    fn executor() -> ProcessExecutor {
        ProcessExecutor::new("/nonexistent/deployster".into())
            .with_kill_grace(Duration::from_millis(200))
            .without_exec_wrapper()
    }

    #[tokio::test]
    async fn passes_stdin_args_env_and_captures_both_streams() {
        let dir = tempfile::tempdir().unwrap();
        let prog = shell(r#"cat; echo "arg=$1"; echo "plug=$DEPLOYSTER_PLUG_CREDS" >&2; exit 3"#, dir.path());
        let mut inv = invocation(prog);
        inv.mounts.push(Mount {
            name: "creds".into(),
            host_path: "/h/c".into(),
            container_path: "/c".into(),
            writable: false,
        });
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        inv.sink = Some(Arc::new(move |s, l| seen.lock().unwrap().push((s, l.to_string()))));
        let out = executor().invoke(inv).await.unwrap();
        assert_eq!(out.exit, Exit::Code(3));
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "{\"hello\": 1}arg=a b\n");
        assert_eq!(String::from_utf8(out.stderr).unwrap(), "plug=/h/c\n");
        let lines = lines.lock().unwrap();
        assert!(lines.contains(&(Stream::Stdout, "{\"hello\": 1}arg=a b".to_string())), "{lines:?}");
        assert!(lines.contains(&(Stream::Stderr, "plug=/h/c".to_string())), "{lines:?}");
    }

    #[tokio::test]
    async fn a_hanging_program_and_its_children_are_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("child-alive");
        let prog = shell(&format!("(sleep 2; touch {}) & sleep 60", marker.display()), dir.path());
        let mut inv = invocation(prog);
        inv.timeout = Duration::from_millis(300);
        let started = Instant::now();
        let err = executor().invoke(inv).await.unwrap_err();
        assert!(matches!(err, ExecError::TimedOut(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!marker.exists(), "the program's child outlived the timeout");
    }

    #[tokio::test]
    async fn output_past_the_limit_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let prog = shell("head -c 100000 /dev/zero", dir.path());
        let err = executor().with_output_limit(1000).invoke(invocation(prog)).await.unwrap_err();
        assert!(matches!(err, ExecError::OutputTooLarge { limit: 1000, stream: "stdout" }), "{err}");
    }

    #[tokio::test]
    async fn cancellation_stops_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let inv = invocation(shell("sleep 60", dir.path()));
        let cancel = inv.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        assert!(matches!(executor().invoke(inv).await.unwrap_err(), ExecError::Cancelled));
    }

    #[tokio::test]
    async fn a_missing_working_directory_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let mut inv = invocation(shell("exit 0", dir.path()));
        inv.workdir = Some(dir.path().join("gone"));
        let err = executor().invoke(inv).await.unwrap_err();
        assert!(
            err.to_string().contains("working directory") && err.to_string().ends_with("/gone does not exist"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_missing_program_or_entrypoint_is_not_found() {
        let err = executor().invoke(invocation("/no/such/program".into())).await.unwrap_err();
        assert!(matches!(&err, ExecError::NotFound(p) if p == "/no/such/program"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let mut inv = invocation(shell("exit 0", dir.path()));
        inv.entrypoint = Some("other.sh".into());
        let err = executor().invoke(inv).await.unwrap_err();
        assert!(matches!(&err, ExecError::NotFound(p) if p.ends_with("/other.sh")), "{err}");
    }
}
