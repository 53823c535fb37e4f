//! `deployster __pod-serve`: one invocation inside a warm runner (issue 37), the runner's side.
//!
//! A runner is a long-lived Pod holding a type's image; each invocation is this helper, started
//! in the type's container through the API server (`pods/exec`, as `kubectl exec` does), that
//! runs the image's entrypoint afresh as a process with the request on its stdin — the same
//! contract as a Pod per invocation ([`super::entry`]), and the same output: the program's
//! stderr as lines, its stdout as frames, then the [`Record`] line ([`super::frames`]).
//!
//! What differs is how the invocation arrives and ends. An exec's stdin cannot be half-closed
//! (closing it ends the whole stream, output included), so the helper reads a header line
//! ([`ServeHeader`], JSON) and then exactly `request_bytes` of request from it, and the caller
//! keeps it open while the program runs. Its end — the caller cancelled, timed out, or went
//! away — stops the program: SIGTERM to its process group, SIGKILL after
//! [`super::entry::STOP_GRACE`]. The program runs in a process group of its own, killed once it
//! has exited, so that nothing it started outlives the invocation in the runner.
//!
//! The runner's container itself runs [`ServeMode::Hold`]: it holds the container until no
//! invocation began or ended for the idle time, then takes the runner's lock (which every
//! invocation holds shared) exclusively, marks the runner retired — an invocation that comes
//! after is refused with [`RETIRING`], and the executor starts another runner — and ends, and
//! with it the Pod. An invocation whose exec arrives as the Pod ends may get no refusal at all,
//! so the helper says when it starts the program ([`super::frames::begun_line`]): an exec that
//! ended before that line ran nothing, and the executor asks another runner.
//! [`ServeMode::WaitFor`] tells the executor that a cancelled invocation has stopped.
//!
//! **Never two at once:** an invocation holds an exclusive lock on a file named after its
//! resource (in `--locks DIR`) while it runs, holding the invocation's id. A second invocation
//! of the same resource in the runner — a controller restarted mid-action, a new leader — is
//! refused at once, naming the invocation that runs, rather than overlapping it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::entry::{Program, emit, run_program};
use super::frames::{Record, begun_line, record_line};
use super::{LockError, UsageError};

/// The subcommand an exec into a runner runs.
pub const SERVE_SUBCOMMAND: &str = "__pod-serve";

/// Where the locks are kept unless `--locks DIR` says otherwise.
pub const DEFAULT_LOCKS: &str = "/tmp";

/// The longest header line read: a header holds the program line and its environment.
const HEADER_LIMIT: usize = 1 << 20;

/// What an invocation's caller sends first, as one JSON line; `request_bytes` of request follow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeHeader {
    /// Marks this invocation's frames and record.
    pub nonce: String,
    /// The program and its arguments: the image's entrypoint and command, or an action's.
    pub program: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    pub request_bytes: u64,
    /// The resource (`namespace/manifest/resource`): one invocation of it at a time.
    pub resource: String,
    /// This invocation (the run id and phase), named to one that finds it running.
    pub invocation: String,
}

impl ServeHeader {
    /// What the caller writes on the exec's stdin, and then keeps open.
    pub fn with_request(&self, request: &[u8]) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).expect("headers serialize");
        bytes.push(b'\n');
        bytes.extend_from_slice(request);
        bytes
    }
}

/// What the helper was asked to do (its arguments after the subcommand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeMode {
    /// Serve one invocation read from stdin.
    Invocation,
    /// The runner container's own process: hold the container until it has been idle for
    /// `idle` (no invocation began or ended), or SIGTERM; then create `done` (the helper's
    /// container holds until it exists, so that the Pod ends) and exit.
    Hold { idle: Duration, done: PathBuf },
    /// Wait up to `within` for no invocation of `resource` to run: what the executor asks
    /// after it cancelled one, so that none runs on once it returns.
    WaitFor { resource: String, within: Duration },
}

/// The helper's arguments for `mode` with its locks in `locks` (after the subcommand).
pub fn args(mode: &ServeMode, locks: &Path) -> Vec<String> {
    let mut args = vec!["--locks".to_string(), locks.display().to_string()];
    match mode {
        ServeMode::Invocation => {}
        ServeMode::Hold { idle, done } => args.extend([
            "--hold".into(),
            "--idle".into(),
            idle.as_secs().to_string(),
            "--done".into(),
            done.display().to_string(),
        ]),
        ServeMode::WaitFor { resource, within } => {
            args.extend(["--wait-for".into(), resource.clone(), "--within".into(), within.as_secs().to_string()])
        }
    }
    args
}

/// Reads [`args`] back: the mode and where the locks are.
pub fn parse(args: &[String]) -> Result<(ServeMode, PathBuf), UsageError> {
    let mut options = std::collections::BTreeMap::new();
    let mut hold = false;
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--hold" => hold = true,
            "--locks" | "--idle" | "--done" | "--wait-for" | "--within" => {
                let value = rest.next().ok_or_else(|| UsageError::NoValue(flag.clone()))?;
                options.insert(flag.as_str(), value.clone());
            }
            other => return Err(UsageError::Unknown(other.to_string())),
        }
    }
    let seconds = |name: &str| -> Result<Duration, UsageError> {
        let value = options.get(name).ok_or_else(|| UsageError::Missing(name.to_string()))?;
        let not_seconds = || UsageError::NotSeconds { flag: name.to_string(), value: value.clone() };
        value.parse().map(Duration::from_secs).map_err(|_| not_seconds())
    };
    let locks = options.get("--locks").map_or_else(|| PathBuf::from(DEFAULT_LOCKS), PathBuf::from);
    let mode = match (hold, options.get("--wait-for")) {
        (true, None) => ServeMode::Hold {
            idle: seconds("--idle")?,
            done: options.get("--done").map(PathBuf::from).ok_or_else(|| UsageError::Missing("--done".into()))?,
        },
        (false, Some(resource)) => ServeMode::WaitFor { resource: resource.clone(), within: seconds("--within")? },
        (false, None) => ServeMode::Invocation,
        (true, Some(_)) => return Err(UsageError::Exclusive("--hold", "--wait-for")),
    };
    Ok((mode, locks))
}

/// Runs the helper with `args` (after the subcommand); what the process exits with.
pub fn main(args: &[String]) -> i32 {
    let (mode, locks) = match parse(args) {
        Ok(parsed) => parsed,
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "deployster {SERVE_SUBCOMMAND}: {why}\nusage: deployster {SERVE_SUBCOMMAND} [--locks DIR] \
                 [--hold --idle SECS --done FILE | --wait-for RESOURCE --within SECS]"
            );
            return 2;
        }
    };
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => {
            let code = match mode {
                ServeMode::Invocation => runtime.block_on(serve(&locks)),
                ServeMode::Hold { idle, done } => runtime.block_on(hold_runner(&locks, idle, &done)),
                ServeMode::WaitFor { resource, within } => runtime.block_on(wait_for(&locks, &resource, within)),
            };
            // Its read of stdin, which the caller may still hold open, is not waited for.
            runtime.shutdown_background();
            code
        }
        Err(e) => refuse("", &format!("cannot start: {e}")),
    }
}

async fn serve(locks: &Path) -> i32 {
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let read = (&mut stdin).take(HEADER_LIMIT as u64).read_until(b'\n', &mut line).await;
    let header: ServeHeader = match read.map(|_| serde_json::from_slice(&line)) {
        Ok(Ok(header)) => header,
        Ok(Err(e)) => return refuse("", &format!("the header is not an invocation: {e}")),
        Err(e) => return refuse("", &format!("cannot read the header: {e}")),
    };
    if header.program.is_empty() {
        return refuse(&header.nonce, "the header names no program");
    }
    let mut request = vec![0u8; header.request_bytes as usize];
    if let Err(e) = stdin.read_exact(&mut request).await {
        return refuse(&header.nonce, &format!("the request ended early: {e}"));
    }
    // Shared with every other invocation; the runner's idle end takes it exclusively.
    let runner = match enter(locks) {
        Ok(runner) => runner,
        Err(why) => return refuse(&header.nonce, &why.to_string()),
    };
    let _held = match hold(locks, &header) {
        Ok(held) => held,
        Err(why) => return refuse(&header.nonce, &why.to_string()),
    };
    // From here the program may run: until this line, the caller may ask another runner.
    emit(begun_line(&header.nonce).as_bytes());
    // The caller keeps stdin open while it waits; its end is the invocation's cancellation.
    let cancelled = async move {
        let mut rest = [0u8; 512];
        while matches!(stdin.read(&mut rest).await, Ok(n) if n > 0) {}
    };
    let program =
        Program { nonce: &header.nonce, argv: &header.program, env: header.env.clone(), request, group: true };
    let ran = run_program(program, cancelled).await;
    // Its end counts as use too: a long action does not leave its runner idle.
    let _ = runner.set_modified(SystemTime::now());
    match ran {
        Ok(ran) => {
            emit(record_line(&ran.record(&header.nonce)).as_bytes());
            ran.exit_code()
        }
        Err(e) => refuse(&header.nonce, &e.to_string()),
    }
}

/// What a refusal says when the runner is ending for want of use: the executor starts another
/// and asks it instead.
pub const RETIRING: &str = "the runner is retiring";

/// The runner's lock (whose time of change is its last use) and the file that says it retired.
fn runner_files(locks: &Path) -> (PathBuf, PathBuf) {
    (locks.join("deployster-runner.lock"), locks.join("deployster-runner.retired"))
}

/// Takes the runner's lock shared for one invocation and marks the runner used; refuses once
/// the runner is retiring.
fn enter(locks: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, LockError> {
    use nix::fcntl::{Flock, FlockArg};
    let (path, retired) = runner_files(locks);
    let file = open_lock(&path)?;
    let held = match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(held) => held,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Err(LockError::Retiring),
        Err((_, source)) => return Err(LockError::Lock { path, source }),
    };
    if retired.exists() {
        return Err(LockError::Retiring);
    }
    held.set_modified(SystemTime::now()).map_err(|source| LockError::Mark { path, source })?;
    Ok(held)
}

fn open_lock(path: &Path) -> Result<std::fs::File, LockError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| LockError::Open { path: path.to_path_buf(), source })
}

/// The runner's own process: holds until idle for `idle` or SIGTERM, then creates `done`.
async fn hold_runner(locks: &Path, idle: Duration, done: &Path) -> i32 {
    use nix::fcntl::{Flock, FlockArg};
    let (path, retired) = runner_files(locks);
    // Made now: a runner no invocation reached is idle from its start.
    if let Err(why) = open_lock(&path).and_then(|f| {
        f.set_modified(SystemTime::now()).map_err(|source| LockError::Mark { path: path.clone(), source })
    }) {
        let _ = writeln!(std::io::stderr(), "deployster {SERVE_SUBCOMMAND}: {why}");
        return 1;
    }
    let _ = writeln!(std::io::stdout(), "runner holding; ends after {}s without an invocation", idle.as_secs());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let tick = (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    let unused_for = || {
        let changed = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap_or_else(|_| SystemTime::now());
        SystemTime::now().duration_since(changed).unwrap_or_default()
    };
    loop {
        let terminated = async {
            match term.as_mut() {
                Some(term) => drop(term.recv().await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = terminated => break,
            () = tokio::time::sleep(tick) => {}
        }
        if unused_for() < idle {
            continue;
        }
        // No invocation holds the lock shared: none runs, and none may begin from here on.
        let Ok(file) = open_lock(&path) else { continue };
        if let Ok(_held) = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            && unused_for() >= idle
        {
            let _ = std::fs::write(&retired, b"");
            let _ = writeln!(std::io::stdout(), "runner retiring: no invocation for {}s", idle.as_secs());
            break;
        }
    }
    let _ = std::fs::write(done, b"");
    0
}

/// Waits up to `within` for no invocation of `resource` to hold its lock: 0 once none does,
/// 1 (naming the one that runs) if one still did.
async fn wait_for(locks: &Path, resource: &str, within: Duration) -> i32 {
    use nix::fcntl::{Flock, FlockArg};
    let path = resource_lock(locks, resource);
    let started = std::time::Instant::now();
    loop {
        let Ok(file) = open_lock(&path) else { return 0 };
        if Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok() {
            return 0;
        }
        if started.elapsed() >= within {
            let running = std::fs::read_to_string(&path).unwrap_or_default();
            let _ = writeln!(
                std::io::stderr(),
                "deployster {SERVE_SUBCOMMAND}: invocation {running} of `{resource}` still runs after {}s",
                within.as_secs()
            );
            return 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The file an invocation of `resource` holds locked while it runs.
fn resource_lock(locks: &Path, resource: &str) -> PathBuf {
    let name = hex::encode(&Sha256::digest(resource.as_bytes())[..12]);
    locks.join(format!("deployster-{name}.lock"))
}

/// The lock of `header`'s resource, held (with the invocation's id in it) while it runs.
fn hold(locks: &Path, header: &ServeHeader) -> Result<nix::fcntl::Flock<std::fs::File>, LockError> {
    use nix::fcntl::{Flock, FlockArg};
    let path = resource_lock(locks, &header.resource);
    let file = open_lock(&path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut held) => {
            held.set_len(0)
                .and_then(|()| held.write_all(header.invocation.as_bytes()))
                .map_err(|source| LockError::Write { path: path.clone(), source })?;
            Ok(held)
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let running = std::fs::read_to_string(&path).unwrap_or_default();
            Err(LockError::Overlap { resource: header.resource.clone(), running })
        }
        Err((_, source)) => Err(LockError::Lock { path, source }),
    }
}

/// Leaves a record saying why the invocation was not run; exits 125.
fn refuse(nonce: &str, why: &str) -> i32 {
    emit(format!("deployster {SERVE_SUBCOMMAND}: {why}\n").as_bytes());
    let record = Record { error: Some(why.to_string()), ..Record::of(nonce, b"", 0) };
    emit(record_line(&record).as_bytes());
    125
}
