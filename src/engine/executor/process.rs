//! Runs local programs and the built-in types as child processes.
//!
//! Each program runs in its own process group so that a timeout or cancellation stops whatever
//! it started too. Output is captured up to a limit and streamed line by line to the
//! invocation's sink. Plugs are passed as host paths (in the request, and as
//! `DEPLOYSTER_PLUG_<NAME>` variables); read-only cannot be enforced on a local process. The
//! environment is PATH, HOME and the invocation's own variables only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::init_cache::{InitAnswers, InitKey};
use super::output::Capture;
use super::{
    DEFAULT_OUTPUT_LIMIT, ExecError, Executor, Exit, Invocation, LineSink, Outcome, RUN_ID_ENV, Stream, check_workdir,
};
use crate::engine::typeref::TypeRef;

/// The hidden sub-command of the deployster binary that runs a built-in type.
pub const BUILTIN_SUBCOMMAND: &str = "__type";
/// The hidden sub-command of the deployster binary that kills what deployster started when it
/// dies (see [`reap`]).
pub const REAPER_SUBCOMMAND: &str = "__reaper";

/// `deployster __reaper`: one per executor, reading from a pipe that only the deployster that
/// started it holds. Each line registers (`+PGID`) or forgets (`-PGID`) a program's process
/// group. At the end of input — deployster ended, however it ended, `kill -9` included — it
/// kills every group still registered: the programs and everything they started. Stop signals
/// meant for deployster's terminal or service do not stop it (its own process group, those
/// signals blocked), so it outlives deployster just long enough to do that.
pub fn reap(input: impl std::io::BufRead) -> i32 {
    let mut held = nix::sys::signal::SigSet::empty();
    for signal in [Signal::SIGHUP, Signal::SIGINT, Signal::SIGTERM, Signal::SIGPIPE] {
        held.add(signal);
    }
    let _ = held.thread_block();
    // Each running program's group, and the run it belongs to ("+PGID RUN", "-PGID").
    let mut groups = std::collections::HashMap::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        let (head, run) = line.split_once(' ').unwrap_or((&line, ""));
        match (head.get(..1), head.get(1..).and_then(|n| n.parse::<i32>().ok())) {
            (Some("+"), Some(group)) => groups.insert(group, run.to_string()),
            (Some("-"), Some(group)) => groups.remove(&group),
            _ => None,
        };
    }
    for group in groups.keys() {
        let _ = killpg(Pid::from_raw(*group), Signal::SIGKILL);
    }
    // What those programs started and detached (setsid, a double fork) left their groups but
    // kept the run in its environment: found and stopped too, until none is left (a process
    // may fork between a scan and its kill).
    let runs: std::collections::HashSet<&String> = groups.values().filter(|r| !r.is_empty()).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let found: Vec<(i32, i32)> = runs.iter().flat_map(|run| processes_of_run(run)).collect();
        let others: Vec<i32> =
            found.into_iter().map(|(pid, _)| pid).filter(|&pid| pid != std::process::id() as i32).collect();
        if others.is_empty() {
            break;
        }
        for pid in others {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    0
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
    /// Programs are registered with a `deployster __reaper` so that they die with deployster;
    /// the executor's own unit tests, which have no deployster binary, go without.
    reaper: bool,
    /// Successful `init` outcomes: a reconcile loop or the controller does not re-run `init`
    /// on every pass — until the program file changes.
    init_cache: Arc<InitAnswers>,
    /// Programs started so far (cached inits are not started).
    started: Arc<std::sync::atomic::AtomicU64>,
}

impl ProcessExecutor {
    pub fn new(builtin_program: PathBuf) -> Self {
        Self {
            builtin_program,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            kill_grace: Duration::from_secs(5),
            init_cache: Arc::default(),
            started: Default::default(),
            spawner: Arc::default(),
            reaper: true,
        }
    }

    #[cfg(test)]
    fn without_reaper(mut self) -> Self {
        self.reaper = false;
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
                Ok((program, invocation.args.clone()))
            }
            TypeRef::Image(image) => {
                Err(ExecError::Unavailable(format!("the process executor cannot run Docker image `{image}`")))
            }
        }
    }

    async fn spawn(&self, invocation: &Invocation) -> Result<Child, ExecError> {
        let (program, args) = self.command_line(invocation)?;
        let mut command = Command::new(&program);
        // A program sees PATH, HOME, what deployster tells it and its plugs — never deployster's
        // own environment (credentials, tokens).
        command.env_clear();
        for (name, default) in [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/")] {
            command.env(name, std::env::var_os(name).unwrap_or_else(|| default.into()));
        }
        command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        check_workdir(invocation)?;
        if let Some(dir) = &invocation.workdir {
            command.current_dir(dir);
        }
        for mount in &invocation.mounts {
            command.env(plug_env_name(&mount.name), &mount.host_path);
        }
        command.envs(invocation.env.iter().map(|(k, v)| (k, v)));
        let reaper = self.reaper.then_some(self.builtin_program.as_path());
        // The run's id, as descendants inherit it (no spaces: it is a UUID or a label).
        let run = invocation.env.iter().find(|(k, _)| k == RUN_ID_ENV).map_or("", |(_, v)| v.as_str());
        let run = if run.contains(char::is_whitespace) { "" } else { run };
        self.spawner.get_or_init(|| Spawner::start(reaper)).spawn(command, run).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound if program.is_file() => {
                ExecError::InterpreterMissing { program: program.display().to_string(), what: missing_runner(&program) }
            }
            std::io::ErrorKind::NotFound => ExecError::NotFound(program.display().to_string()),
            _ => ExecError::Spawn { program: program.display().to_string(), source },
        })
    }

    /// Ends a program whose time is up or whose run was cancelled: SIGTERM to its whole process
    /// group, then SIGKILL to the group after the grace period. Its output is still read (and
    /// shown) meanwhile, so that a program cleaning up can say so — and is not killed by a closed
    /// pipe before it has. `work` finishes when the program has ended and its pipes are closed.
    async fn stop<F: Future>(&self, pid: Option<u32>, work: std::pin::Pin<&mut F>) {
        let Some(pid) = pid else { return };
        let group = Pid::from_raw(pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let mut work = work;
        if tokio::time::timeout(self.kill_grace, work.as_mut()).await.is_err() {
            let _ = killpg(group, Signal::SIGKILL);
            // Whatever left the group may hold the pipes open: not waited for long.
            let _ = tokio::time::timeout(Duration::from_secs(1), work).await;
        }
    }
}

/// Starts programs and registers each one's process group with the executor's reaper (see
/// [`reap`]) as soon as it is started, in the order the groups come and go.
struct Spawner {
    /// The reaper's input (none: programs are not registered), or why it could not be started.
    reaper: std::sync::Mutex<Result<Option<std::process::ChildStdin>, String>>,
}

impl Spawner {
    /// `reaper`: the deployster binary to run `__reaper` from; without, programs are not
    /// registered.
    fn start(reaper: Option<&Path>) -> Spawner {
        let reaper = reaper.map(|program| {
            use std::os::unix::process::CommandExt;
            std::process::Command::new(program)
                .arg(REAPER_SUBCOMMAND)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .process_group(0)
                .spawn()
                .map_err(|e| format!("cannot start {} {REAPER_SUBCOMMAND}: {e}", program.display()))
                .and_then(|mut child| child.stdin.take().ok_or_else(|| "the reaper has no input".to_string()))
        });
        Spawner { reaper: std::sync::Mutex::new(reaper.transpose()) }
    }

    /// Starts `command` and registers its group, with the run it belongs to (`run`, from its
    /// environment), with the reaper.
    fn spawn(&self, mut command: Command, run: &str) -> std::io::Result<Child> {
        let mut reaper = self.reaper.lock().expect("reaper lock");
        let pipe = reaper.as_mut().map_err(|why| std::io::Error::other(why.clone()))?;
        let child = command.spawn()?;
        if let (Some(pipe), Some(pid)) = (pipe, child.id()) {
            let _ = writeln!(pipe, "+{pid} {run}");
        }
        Ok(child)
    }

    fn forget(&self, pid: Option<u32>) {
        if let (Ok(Some(pipe)), Some(pid)) = (&mut *self.reaper.lock().expect("reaper lock"), pid) {
            let _ = writeln!(pipe, "-{pid}");
        }
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
        let key = (invocation.labels.phase == "init").then(|| self.init_key(&invocation)).flatten();
        self.init_cache.get_or_run(key, self.run(invocation)).await
    }
}

impl ProcessExecutor {
    /// The cache key of an init invocation: the program file as it is now (path, size and
    /// modification time: a rebuilt or replaced program is run again) and the invocation;
    /// `None` when the program cannot be looked at (the run then says why).
    fn init_key(&self, invocation: &Invocation) -> Option<InitKey> {
        let (program, args) = self.command_line(invocation).ok()?;
        let metadata = std::fs::metadata(&program).ok()?;
        let modified = metadata.modified().ok().and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok());
        let program = [
            program.as_os_str().as_encoded_bytes(),
            &metadata.len().to_le_bytes(),
            &modified.map_or(u128::MAX, |m| m.as_nanos()).to_le_bytes(),
        ];
        // The command line as run (a built-in's subcommand included), not as asked.
        Some(InitKey::of(&program, None, &args, invocation))
    }

    /// How many programs this executor (and its clones) started.
    pub fn programs_started(&self) -> u64 {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn run(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let started = Instant::now();
        let mut child = self.spawn(&invocation).await?;
        self.started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = child.id();
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
        // Set once the program has exited and its output is still held open after
        // PIPE_GRACE: by something it started that runs on (`daemon &`).
        let held = CancellationToken::new();
        let read = CancellationToken::new();
        let result = {
            let work = async {
                let reading = async {
                    let outputs = tokio::join!(
                        write,
                        capture(stdout, Stream::Stdout, sink.clone(), limit, &held),
                        capture(stderr, Stream::Stderr, sink.clone(), limit, &held)
                    );
                    read.cancel();
                    outputs
                };
                let waiting = async {
                    let status = child.wait().await;
                    tokio::select! {
                        _ = read.cancelled() => {}
                        _ = tokio::time::sleep(PIPE_GRACE) => held.cancel(),
                    }
                    status
                };
                let ((_, out, err), status) = tokio::join!(reading, waiting);
                let (out, mut err) = (out?, err?);
                if held.is_cancelled() {
                    let note = format!(
                        "deployster: the program exited, but a process it started still holds its output open; not \
                         waiting for it (gave it {PIPE_GRACE:?}). Redirect a background process's output, or wait for it."
                    );
                    tracing::warn!(resource = %invocation.labels.resource, phase = %invocation.labels.phase, "{note}");
                    err.extend_from_slice(format!("\n{note}\n").as_bytes());
                }
                Ok::<_, ExecError>((out, err, status?))
            };
            let mut work = std::pin::pin!(work);
            let stopped = tokio::select! {
                r = work.as_mut() => Ok(r),
                _ = tokio::time::sleep(invocation.timeout) => Err(ExecError::TimedOut(invocation.timeout)),
                _ = invocation.cancel.cancelled() => Err(ExecError::Cancelled),
            };
            match stopped {
                Ok(finished) => finished,
                Err(e) => {
                    self.stop(pid, work).await;
                    Err(e)
                }
            }
        };
        if result.is_err() {
            // Stopped already, or failed on its own (its output, say): ended either way, then
            // reaped, then anything it left in its group goes too.
            self.stop(pid, std::pin::pin!(child.wait())).await;
            let _ = child.wait().await;
            if let Some(pid) = pid {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
        if let Some(spawner) = self.spawner.get() {
            spawner.forget(pid);
        }
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
            Err(e) => Err(e),
        }
    }
}

/// How long, once a program has exited, its output may stay open before deployster stops
/// reading it: what it printed is in the pipe by then; only a process it left running can
/// hold the pipe longer.
pub const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Reads a stream to its end through a [`Capture`] — or until `held` (the program exited and
/// something else keeps the stream open), with what was read by then.
async fn capture(
    stream: Option<impl AsyncRead + Unpin>,
    which: Stream,
    sink: Option<LineSink>,
    limit: usize,
    held: &CancellationToken,
) -> Result<Vec<u8>, ExecError> {
    let Some(mut stream) = stream else { return Ok(Vec::new()) };
    let mut capture = Capture::new(which, limit, sink);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            n = stream.read(&mut chunk) => n?,
            _ = held.cancelled() => 0,
        };
        if n == 0 {
            return Ok(capture.finish());
        }
        capture.push(&chunk[..n])?;
    }
}

/// What runs `program` when it exists yet cannot be started ("not found"): the interpreter its
/// `#!` line names, or else the dynamic loader a binary was linked for.
fn missing_runner(program: &Path) -> String {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let read = std::fs::File::open(program).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    let head = &head[..read];
    match head.strip_prefix(b"#!") {
        Some(line) => {
            let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
            let interpreter = String::from_utf8_lossy(line).split_whitespace().next().unwrap_or_default().to_string();
            format!("its interpreter `{interpreter}` (named on its `#!` line)")
        }
        None => "the dynamic loader it was linked for (a binary built for another system?)".to_string(),
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
            .without_reaper()
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
            cluster: None,
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

    /// At the time limit the program's group gets SIGTERM: one that cleans up and exits is let
    /// go, and what it says while cleaning up is still read; one that ignores SIGTERM gets
    /// SIGKILL once the grace period is over.
    #[tokio::test]
    async fn sigterm_first_then_sigkill_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let note = dir.path().join("note");
        let polite = format!(
            "trap 'echo cleaning up; echo cleaned > {}; exit 0' TERM; while :; do sleep 0.05; done",
            note.display()
        );
        let mut inv = invocation(shell(&polite, dir.path()));
        inv.timeout = Duration::from_millis(300);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        inv.sink = Some(Arc::new(move |_, l| seen.lock().unwrap().push(l.to_string())));
        let err = executor().with_kill_grace(Duration::from_secs(3)).invoke(inv).await.unwrap_err();
        assert!(matches!(err, ExecError::TimedOut(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&note).unwrap(), "cleaned\n", "SIGTERM came first");
        assert!(lines.lock().unwrap().contains(&"cleaning up".to_string()), "{lines:?}");

        let stubborn = dir.path().join("stubborn");
        std::fs::create_dir(&stubborn).unwrap();
        let ignores = format!("trap 'echo ignored >> {}' TERM; while :; do sleep 0.05; done", note.display());
        let mut inv = invocation(shell(&ignores, &stubborn));
        inv.timeout = Duration::from_millis(300);
        let started = Instant::now();
        let err = executor().with_kill_grace(Duration::from_millis(700)).invoke(inv).await.unwrap_err();
        assert!(matches!(err, ExecError::TimedOut(_)), "{err}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(1000), "SIGKILL only after the grace period: {took:?}");
        assert!(took < Duration::from_secs(5), "and then at once: {took:?}");
        assert!(std::fs::read_to_string(&note).unwrap().contains("ignored"), "it was asked first");
    }

    /// `init` runs once per program file, command line and request for the executor's life:
    /// a reconcile loop does not re-run it on every pass. A changed program, another request
    /// or a failed init runs again.
    #[tokio::test]
    async fn a_successful_init_is_run_once_until_the_program_changes() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let body = format!("echo run >> {}; cat > /dev/null; echo '{{}}'", count.display());
        let prog = shell(&body, dir.path());
        let executor = executor();
        let init = |stdin: &[u8]| {
            let mut inv = invocation(prog.clone());
            inv.labels.phase = "init".into();
            inv.stdin = stdin.to_vec();
            inv
        };
        let runs = || std::fs::read_to_string(&count).unwrap_or_default().lines().count();
        for _ in 0..3 {
            executor.invoke(init(b"{\"name\": \"a\"}")).await.unwrap();
        }
        assert_eq!(runs(), 1, "cached");
        assert_eq!(executor.programs_started(), 1);
        executor.invoke(init(b"{\"name\": \"b\"}")).await.unwrap();
        assert_eq!(runs(), 2, "another request runs");
        let mut state = invocation(prog.clone());
        state.labels.phase = "state".into();
        executor.invoke(state.clone()).await.unwrap();
        executor.invoke(state).await.unwrap();
        assert_eq!(runs(), 4, "only init is cached");
        shell(&format!("{body} # rebuilt"), dir.path());
        executor.invoke(init(b"{\"name\": \"a\"}")).await.unwrap();
        assert_eq!(runs(), 5, "a changed program is run again");

        std::fs::create_dir(dir.path().join("f")).unwrap();
        let failing = shell(&format!("echo run >> {}; exit 3", count.display()), &dir.path().join("f"));
        for _ in 0..2 {
            let mut inv = invocation(failing.clone());
            inv.labels.phase = "init".into();
            executor.invoke(inv).await.unwrap();
        }
        assert_eq!(runs(), 7, "a failed init is not kept");
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

    /// A program that exits leaving a background process on its output is not waited for
    /// beyond a short grace: its own output is kept, and the user is told why.
    #[tokio::test]
    async fn a_program_that_exits_leaving_its_output_held_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let program = shell("echo started; sleep 8 & echo done", dir.path());
        let started = Instant::now();
        let outcome = executor().invoke(invocation(program)).await.unwrap();
        assert!(started.elapsed() < PIPE_GRACE + Duration::from_secs(3), "waited {:?}", started.elapsed());
        assert_eq!(outcome.exit, Exit::Code(0));
        assert_eq!(String::from_utf8_lossy(&outcome.stdout), "started\ndone\n");
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        assert!(stderr.contains("a process it started still holds its output open; not waiting for it"), "{stderr}");
        // A program whose output closes with it is not told anything.
        let quiet =
            executor().invoke(invocation(shell("sleep 8 >/dev/null 2>&1 & echo done", dir.path()))).await.unwrap();
        assert!(quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
    }

    #[tokio::test]
    async fn a_program_whose_interpreter_is_missing_says_so() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("t.sh");
        std::fs::write(&program, "#!/no/such/interpreter -e\necho hi\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = executor().invoke(invocation(program.clone())).await.unwrap_err();
        assert_eq!(err.reason(), "InterpreterNotFound");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot start {}: its interpreter `/no/such/interpreter` (named on its `#!` line) is not installed",
                program.display()
            )
        );
    }
}
