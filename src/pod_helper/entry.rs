//! `deployster __pod-entry`: what runs in a type's Pod, in front of the type's own program.
//!
//! The protocol hands the request on stdin, and a Pod has none to give; the type's image is the
//! user's and cannot be changed. So, as Argo's emissary and Tekton's entrypoint do, a helper
//! container copies this helper into a shared `emptyDir`, and the type's container runs it as
//! its command: it starts the image's own entrypoint with the request (from the invocation's
//! Secret, mounted read-only) on its stdin, passes the program's stderr on line by line, writes
//! its stdout to the log as frames ([`super::frames`]) as it comes, forwards SIGTERM (the Pod's
//! deletion, a timeout) to the program, and once the program has exited leaves the
//! [`Record`] in the termination message and exits as the program did.
//!
//! Everything goes to the log through this process's stdout, in the order it was written: a
//! runtime copies a container's stdout and stderr into the log separately, and the record must
//! come after the last line of the program's stderr, since the executor takes the record's
//! arrival in the log as the program's end (the kubelet tells of it only at its next relist).
//!
//! The helper's container is the Pod's first regular container, not an init container: this
//! kubelet notices an init container's end only at its next relist (about a second later). Its
//! `postStart` hook ([`AWAIT_INSTALL`]) returns once the copy is in place, and the kubelet starts
//! the type's container only after that hook; the helper then holds until the type's container
//! marks itself done ([`HelperCommand::done`]), so that the Pod ends when the program has.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::UsageError;
use super::frames::{FRAME_BYTES, Record, frame, record_line};
// As long as the process executor lets a program's output stay open once it has exited.
use crate::engine::executor::process::PIPE_GRACE;

/// The subcommand the type's container runs.
pub const ENTRY_SUBCOMMAND: &str = "__pod-entry";

/// The key of the invocation's Secret, beside the request, that holds the program's extra
/// environment (a JSON object), which the helper sets: never in the Pod's spec, where anyone
/// who can read Pods would see it.
pub const ENV_KEY: &str = "env";

/// What the executor tells the helper, on its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperCommand {
    /// Marks this invocation's frames and record.
    pub nonce: String,
    /// The request file (a key of the invocation's Secret).
    pub request: PathBuf,
    /// Where the record goes: the container's `terminationMessagePath`.
    pub termination_log: PathBuf,
    /// The program and its arguments: the image's entrypoint and command, or an action's.
    pub program: Vec<String>,
    /// A file created once the record is written: the helper's container holds until it exists.
    pub done: Option<PathBuf>,
}

impl HelperCommand {
    /// The helper's arguments for this entry (after the subcommand).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--nonce".to_string(),
            self.nonce.clone(),
            "--request".into(),
            self.request.display().to_string(),
            "--termination-log".into(),
            self.termination_log.display().to_string(),
        ];
        if let Some(done) = &self.done {
            args.extend(["--done".to_string(), done.display().to_string()]);
        }
        args.push("--".into());
        args.extend(self.program.iter().cloned());
        args
    }

    /// Reads [`HelperCommand::args`] back.
    pub fn parse(args: &[String]) -> Result<HelperCommand, UsageError> {
        let (options, program) = match args.iter().position(|a| a == "--") {
            Some(at) => (&args[..at], args[at + 1..].to_vec()),
            None => return Err(UsageError::NoSeparator),
        };
        let value = |name: &str| {
            let at = options.iter().position(|a| a == name).ok_or_else(|| UsageError::Missing(name.to_string()))?;
            options.get(at + 1).cloned().ok_or_else(|| UsageError::NoValue(name.to_string()))
        };
        if program.is_empty() {
            return Err(UsageError::NoProgram);
        }
        Ok(HelperCommand {
            nonce: value("--nonce")?,
            request: value("--request")?.into(),
            termination_log: value("--termination-log")?.into(),
            program,
            done: options.iter().any(|a| a == "--done").then(|| value("--done")).transpose()?.map(PathBuf::from),
        })
    }
}

/// The helper container's `postStart` hook: `--await-install DIR` returns once `--install DIR`
/// has put the helper in place (the kubelet starts the type's container after it).
pub const AWAIT_INSTALL: &str = "--await-install";
/// How long the hook waits for the copy: a copy of a few tens of MB takes well under a second.
const INSTALL_PATIENCE: Duration = Duration::from_secs(60);

/// Runs the helper with `args` (after the subcommand); what the process exits with.
/// `--install DIR` is the helper container's part: it copies this executable into `DIR` (the
/// shared `emptyDir`; the controller image has no `cp`), then holds until the type's container
/// is done. `--await-install DIR` is that container's `postStart` hook.
pub fn main(args: &[String]) -> i32 {
    match args {
        [flag, dir] if flag == "--install" => return install_and_hold(Path::new(dir)),
        [flag, dir] if flag == AWAIT_INSTALL => return await_install(Path::new(dir)),
        _ => {}
    }
    let entry = match HelperCommand::parse(args) {
        Ok(entry) => entry,
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "deployster {ENTRY_SUBCOMMAND}: {why}");
            return 2;
        }
    };
    let code = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run(&entry)),
        Err(e) => fail(&entry, format!("cannot start: {e}")),
    };
    // The helper's container holds until then.
    if let Some(done) = &entry.done {
        let _ = std::fs::write(done, b"");
    }
    code
}

/// The helper's path in `dir`, and the file the type's container creates once it is done.
pub fn installed(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("deployster"), dir.join("done"))
}

/// Copies this executable into `dir`, then waits for the type's container to be done, or for
/// SIGTERM (the Pod's deletion: as PID 1 the helper would otherwise ignore it).
fn install_and_hold(dir: &Path) -> i32 {
    let (target, done) = installed(dir);
    if let Err(e) = install(&target) {
        let _ =
            writeln!(std::io::stderr(), "deployster {ENTRY_SUBCOMMAND}: cannot install into {}: {e}", dir.display());
        return 1;
    }
    let _ = writeln!(std::io::stdout(), "installed {}", target.display());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "deployster {ENTRY_SUBCOMMAND}: cannot start: {e}");
            return 1;
        }
    };
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(term) => drop(term.recv().await),
                None => std::future::pending().await,
            }
        };
        let finished = async {
            while !done.exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::select! {
            () = terminated => {}
            () = finished => {}
        }
    });
    0
}

/// Copies this executable to `target`, executable by anyone; whole or not at all (a copy under
/// another name, renamed), since the hook takes its existence as the copy's end.
fn install(target: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let partial = target.with_extension("partial");
    std::fs::copy(std::env::current_exe()?, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, target)
}

/// Waits for [`install`] to have put the helper in `dir`; fails after [`INSTALL_PATIENCE`].
fn await_install(dir: &Path) -> i32 {
    let (target, _) = installed(dir);
    let started = std::time::Instant::now();
    while !target.exists() {
        if started.elapsed() > INSTALL_PATIENCE {
            let _ = writeln!(
                std::io::stderr(),
                "deployster {ENTRY_SUBCOMMAND}: the helper was not installed in {} within {INSTALL_PATIENCE:?}",
                dir.display()
            );
            return 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    0
}

/// Leaves a record saying why the program could not be run; exits 127 as a shell would.
fn fail(entry: &HelperCommand, why: String) -> i32 {
    emit(format!("deployster {ENTRY_SUBCOMMAND}: {why}\n").as_bytes());
    let record = Record { error: Some(why), ..Record::of(&entry.nonce, b"", 0) };
    write_record(entry, &record);
    127
}

/// The record, in the termination message and as the log's last line (see
/// [`super::frames::record_line`]); a termination message that cannot be written is left.
fn write_record(entry: &HelperCommand, record: &Record) {
    let text = serde_json::to_string(record).expect("records serialize");
    let _ = std::fs::write(&entry.termination_log, text);
    emit(record_line(record).as_bytes());
}

/// Writes `text` (whole lines) to the log, at once.
pub(super) fn emit(text: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text).and_then(|()| out.flush());
}

/// The longest stderr line passed on whole; a longer one is broken, as runtimes break lines of
/// 16 KiB.
const STDERR_LINE: usize = 8 * 1024;

/// Reads what `from` has into `chunk`: how much, 0 at its end, on an error or once `held`.
async fn read_unless(from: &mut (impl AsyncReadExt + Unpin), chunk: &mut [u8], held: &CancellationToken) -> usize {
    tokio::select! {
        n = from.read(chunk) => n.unwrap_or(0),
        () = held.cancelled() => 0,
    }
}

/// Passes the program's stderr on to the log, whole lines at a time (so that no frame lands
/// inside one), until it ends or `held` (a pipe left open past the program's exit).
async fn relay_stderr(mut stderr: tokio::process::ChildStderr, held: &CancellationToken) {
    let (mut pending, mut chunk) = (Vec::new(), vec![0u8; 4096]);
    loop {
        let n = read_unless(&mut stderr, &mut chunk, held).await;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&chunk[..n]);
        let whole = match pending.iter().rposition(|&b| b == b'\n') {
            Some(last) => last + 1,
            None if pending.len() >= STDERR_LINE => pending.len(),
            None => continue,
        };
        let mut lines: Vec<u8> = pending.drain(..whole).collect();
        if !lines.ends_with(b"\n") {
            lines.push(b'\n');
        }
        emit(&lines);
    }
    if !pending.is_empty() {
        pending.push(b'\n');
        emit(&pending);
    }
}

async fn run(entry: &HelperCommand) -> i32 {
    let request = match std::fs::read(&entry.request) {
        Ok(request) => request,
        Err(e) => return fail(entry, format!("cannot read the request {}: {e}", entry.request.display())),
    };
    // Listened for before the program starts: a SIGTERM in between must not kill the helper
    // (it would leave no record) but reach the program.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    // The program's extra environment, from the Secret beside the request (when there is one).
    let env_file = entry.request.with_file_name(ENV_KEY);
    let env: std::collections::BTreeMap<String, String> = match std::fs::read(&env_file) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(env) => env,
            Err(e) => return fail(entry, format!("the environment {} is not a JSON object: {e}", env_file.display())),
        },
        Err(_) => Default::default(),
    };
    // The Pod's deletion or a timeout: the program gets the signal and may clean up; the Pod's
    // grace period ends it.
    let terminated = async {
        match term.as_mut() {
            Some(term) => drop(term.recv().await),
            None => std::future::pending().await,
        }
    };
    let program = Program { nonce: &entry.nonce, argv: &entry.program, env, request, group: false };
    match run_program(program, terminated).await {
        Ok(ran) => {
            let record = ran.record(&entry.nonce);
            write_record(entry, &record);
            ran.exit_code()
        }
        Err(e) => fail(entry, e.to_string()),
    }
}

/// A program to run, and what it is given.
pub(super) struct Program<'a> {
    pub(super) nonce: &'a str,
    /// The program and its arguments.
    pub(super) argv: &'a [String],
    pub(super) env: std::collections::BTreeMap<String, String>,
    /// Its stdin.
    pub(super) request: Vec<u8>,
    /// Whether it runs in a process group of its own, which a stop ends (SIGTERM, then SIGKILL
    /// after [`STOP_GRACE`]) and which is killed once the program has exited (what it left
    /// running, `daemon &`, goes with it): a warm runner serves many invocations, and none may
    /// leave a process behind. In a Pod of its own the Pod's end does that.
    pub(super) group: bool,
}

/// How long a program in a group of its own has between SIGTERM and SIGKILL when stopped.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a program did: how it ended, and the length, digest and frames of its stdout.
pub(super) struct ProgramEnded {
    status: std::process::ExitStatus,
    sha256: String,
    bytes: u64,
    frames: u64,
}

impl ProgramEnded {
    pub(super) fn record(&self, nonce: &str) -> Record {
        use std::os::unix::process::ExitStatusExt;
        Record {
            nonce: nonce.to_string(),
            code: self.status.code(),
            signal: self.status.signal(),
            stdout_bytes: self.bytes,
            stdout_sha256: self.sha256.clone(),
            frames: self.frames,
            error: None,
        }
    }

    /// What the helper exits with: the program's code, or 128 + its signal, as a shell does.
    pub(super) fn exit_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        self.status.code().unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

/// Runs `program` with its request on stdin, its stdout written as frames and its stderr as
/// lines to this process's stdout, until it has exited; `stop` resolving stops it.
pub(super) async fn run_program(
    program: Program<'_>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<ProgramEnded> {
    let Program { nonce, argv, env, request, group } = program;
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if group {
        command.process_group(0);
    }
    let mut child =
        command.spawn().map_err(|e| std::io::Error::new(e.kind(), format!("cannot start `{}`: {e}", argv[0])))?;
    let pid = child.id().map(|pid| nix::unistd::Pid::from_raw(pid as i32));
    // The group's id is the program's pid; a signal to its negation reaches the whole group.
    let target = pid.map(|pid| if group { nix::unistd::Pid::from_raw(-pid.as_raw()) } else { pid });
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let feed = async move {
        // A program may exit without reading its input: a broken pipe is not a failure.
        let _ = stdin.write_all(&request).await;
    };
    // Once the program has exited, its stdout and stderr may still be held open by something it
    // left running (`daemon &`): read on for a short grace, then stop.
    let (held, read) = (CancellationToken::new(), CancellationToken::new());
    let relay = async {
        let (mut digest, mut bytes, mut frames) = (Sha256::new(), 0u64, 0u64);
        let mut chunk = vec![0u8; FRAME_BYTES];
        loop {
            let n = read_unless(&mut stdout, &mut chunk, &held).await;
            if n == 0 {
                break;
            }
            digest.update(&chunk[..n]);
            bytes += n as u64;
            // Written and flushed as it comes: actions' progress messages show live.
            emit(frame(nonce, frames, &chunk[..n]).as_bytes());
            frames += 1;
        }
        (hex::encode(digest.finalize()), bytes, frames)
    };
    let relays = async {
        let (stdout, ()) = tokio::join!(relay, relay_stderr(stderr, &held));
        read.cancel();
        stdout
    };
    let waited = async {
        let status = child.wait().await;
        tokio::select! {
            () = read.cancelled() => {}
            () = tokio::time::sleep(PIPE_GRACE) => held.cancel(),
        }
        status
    };
    let stopping = async {
        stop.await;
        if let Some(target) = target {
            let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM);
            if group {
                tokio::time::sleep(STOP_GRACE).await;
                let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
            }
        }
        std::future::pending::<()>().await
    };
    let work = async { tokio::join!(feed, relays, waited) };
    let ((), (sha256, bytes, frames), status) = tokio::select! {
        done = work => done,
        () = stopping => unreachable!("pending forever"),
    };
    if let (true, Some(target)) = (group, target) {
        // What the program left running goes with it.
        let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
    }
    let status = status.map_err(|e| std::io::Error::new(e.kind(), format!("lost the program: {e}")))?;
    Ok(ProgramEnded { status, sha256, bytes, frames })
}
