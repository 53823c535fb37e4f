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
//! **Never two at once:** an invocation holds an exclusive lock on a file named after its
//! resource (in `--locks DIR`) while it runs, holding the invocation's id. A second invocation
//! of the same resource in the runner — a controller restarted mid-action, a new leader — is
//! refused at once, naming the invocation that runs, rather than overlapping it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::entry::{Program, emit, run_program};
use super::frames::{Record, record_line};

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

/// Runs the helper with `args` (after the subcommand); what the process exits with.
pub fn main(args: &[String]) -> i32 {
    let locks = match args {
        [] => PathBuf::from(DEFAULT_LOCKS),
        [flag, dir] if flag == "--locks" => PathBuf::from(dir),
        _ => {
            let _ = writeln!(std::io::stderr(), "usage: deployster {SERVE_SUBCOMMAND} [--locks DIR]");
            return 2;
        }
    };
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => {
            let code = runtime.block_on(serve(&locks));
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
    let _held = match hold(locks, &header) {
        Ok(held) => held,
        Err(why) => return refuse(&header.nonce, &why),
    };
    // The caller keeps stdin open while it waits; its end is the invocation's cancellation.
    let cancelled = async move {
        let mut rest = [0u8; 512];
        while matches!(stdin.read(&mut rest).await, Ok(n) if n > 0) {}
    };
    let program =
        Program { nonce: &header.nonce, argv: &header.program, env: header.env.clone(), request, group: true };
    match run_program(program, cancelled).await {
        Ok(ran) => {
            emit(record_line(&ran.record(&header.nonce)).as_bytes());
            ran.exit_code()
        }
        Err(e) => refuse(&header.nonce, &e.to_string()),
    }
}

/// The lock of `header`'s resource, held (with the invocation's id in it) while it runs.
fn hold(locks: &Path, header: &ServeHeader) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    use nix::fcntl::{Flock, FlockArg};
    let name = hex::encode(&Sha256::digest(header.resource.as_bytes())[..12]);
    let path = locks.join(format!("deployster-{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut held) => {
            held.set_len(0)
                .and_then(|()| held.write_all(header.invocation.as_bytes()))
                .map_err(|e| format!("cannot write the lock {}: {e}", path.display()))?;
            Ok(held)
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let running = std::fs::read_to_string(&path).unwrap_or_default();
            Err(format!(
                "another invocation of resource `{}` is running in this runner ({running}); refusing to overlap it",
                header.resource
            ))
        }
        Err((_, e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// Leaves a record saying why the invocation was not run; exits 125.
fn refuse(nonce: &str, why: &str) -> i32 {
    emit(format!("deployster {SERVE_SUBCOMMAND}: {why}\n").as_bytes());
    let record = Record { error: Some(why.to_string()), ..Record::of(nonce, b"", 0) };
    emit(record_line(&record).as_bytes());
    125
}
