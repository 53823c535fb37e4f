//! `deployster __pod-entry`: what runs in a type's Pod, in front of the type's own program.
//!
//! The protocol hands the request on stdin, and a Pod has none to give; the type's image is the
//! user's and cannot be changed. So, as Argo's emissary and Tekton's entrypoint do, an init
//! container copies this helper into a shared `emptyDir`, and the type's container runs it as
//! its command: it starts the image's own entrypoint with the request (from the invocation's
//! Secret, mounted read-only) on its stdin, passes the program's stderr through, writes its
//! stdout to the log as frames ([`super::frames`]) as it comes, forwards SIGTERM (the Pod's
//! deletion, a timeout) to the program, and once the program has exited leaves the
//! [`Record`] in the termination message and exits as the program did.

use std::io::Write as _;
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::frames::{FRAME_BYTES, Record, frame, record_line};
// As long as the process executor lets a program's output stay open once it has exited.
use crate::engine::executor::process::PIPE_GRACE;

/// The subcommand the type's container runs.
pub const ENTRY_SUBCOMMAND: &str = "__pod-entry";

/// What the executor tells the helper, on its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Marks this invocation's frames and record.
    pub nonce: String,
    /// The request file (a key of the invocation's Secret).
    pub request: PathBuf,
    /// Where the record goes: the container's `terminationMessagePath`.
    pub termination_log: PathBuf,
    /// The program and its arguments: the image's entrypoint and command, or an action's.
    pub program: Vec<String>,
}

impl Entry {
    /// The helper's arguments for this entry (after the subcommand).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--nonce".to_string(),
            self.nonce.clone(),
            "--request".into(),
            self.request.display().to_string(),
            "--termination-log".into(),
            self.termination_log.display().to_string(),
            "--".into(),
        ];
        args.extend(self.program.iter().cloned());
        args
    }

    /// Reads [`Entry::args`] back.
    pub fn parse(args: &[String]) -> Result<Entry, String> {
        let (options, program) = match args.iter().position(|a| a == "--") {
            Some(at) => (&args[..at], args[at + 1..].to_vec()),
            None => {
                return Err(
                    "usage: __pod-entry --nonce N --request FILE --termination-log FILE -- PROGRAM [ARGS]".into()
                );
            }
        };
        let value = |name: &str| {
            let at = options.iter().position(|a| a == name).ok_or_else(|| format!("{name} is missing"))?;
            options.get(at + 1).cloned().ok_or_else(|| format!("{name} has no value"))
        };
        if program.is_empty() {
            return Err("no program to run after --".into());
        }
        Ok(Entry {
            nonce: value("--nonce")?,
            request: value("--request")?.into(),
            termination_log: value("--termination-log")?.into(),
            program,
        })
    }
}

/// Runs the helper with `args` (after the subcommand); what the process exits with.
/// `--install DIR` is the init container's part: it copies this executable into `DIR` (the
/// shared `emptyDir`) — the controller image has no `cp`.
pub fn main(args: &[String]) -> i32 {
    if let [flag, dir] = args
        && flag == "--install"
    {
        return match install(std::path::Path::new(dir)) {
            Ok(path) => {
                let _ = writeln!(std::io::stdout(), "installed {}", path.display());
                0
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "deployster {ENTRY_SUBCOMMAND}: cannot install into {dir}: {e}");
                1
            }
        };
    }
    let entry = match Entry::parse(args) {
        Ok(entry) => entry,
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "deployster {ENTRY_SUBCOMMAND}: {why}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&entry, format!("cannot start: {e}")),
    };
    runtime.block_on(run(&entry))
}

/// Copies this executable into `dir` as `deployster`, executable by anyone.
fn install(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let target = dir.join("deployster");
    std::fs::copy(std::env::current_exe()?, &target)?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
    Ok(target)
}

/// Leaves a record saying why the program could not be run; exits 127 as a shell would.
fn fail(entry: &Entry, why: String) -> i32 {
    let _ = writeln!(std::io::stderr(), "deployster {ENTRY_SUBCOMMAND}: {why}");
    let record = Record { error: Some(why), ..Record::of(&entry.nonce, b"", 0) };
    write_record(entry, &record);
    127
}

/// The record, in the termination message and as the log's last line (see
/// [`super::frames::record_line`]); a termination message that cannot be written is left.
fn write_record(entry: &Entry, record: &Record) {
    let text = serde_json::to_string(record).expect("records serialize");
    let _ = std::fs::write(&entry.termination_log, text);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(record_line(record).as_bytes()).and_then(|()| out.flush());
}

async fn run(entry: &Entry) -> i32 {
    let request = match std::fs::read(&entry.request) {
        Ok(request) => request,
        Err(e) => return fail(entry, format!("cannot read the request {}: {e}", entry.request.display())),
    };
    // Listened for before the program starts: a SIGTERM in between must not kill the helper
    // (it would leave no record) but reach the program.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    // The program's extra environment, from the Secret beside the request (when there is one).
    let env_file = entry.request.with_file_name(super::spec::ENV_KEY);
    let env: std::collections::BTreeMap<String, String> = match std::fs::read(&env_file) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(env) => env,
            Err(e) => return fail(entry, format!("the environment {} is not a JSON object: {e}", env_file.display())),
        },
        Err(_) => Default::default(),
    };
    let mut command = tokio::process::Command::new(&entry.program[0]);
    command
        .args(&entry.program[1..])
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return fail(entry, format!("cannot start `{}`: {e}", entry.program[0])),
    };
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let feed = async move {
        // A program may exit without reading its input: a broken pipe is not a failure.
        let _ = stdin.write_all(&request).await;
    };
    // Once the program has exited, its stdout may still be held open by something it left
    // running (`daemon &`): read on for a short grace, then stop.
    let (held, read) = (CancellationToken::new(), CancellationToken::new());
    let relay = async {
        let (mut digest, mut bytes, mut frames) = (Sha256::new(), 0u64, 0u64);
        let mut chunk = vec![0u8; FRAME_BYTES];
        let mut out = std::io::stdout().lock();
        loop {
            let n = tokio::select! {
                n = stdout.read(&mut chunk) => n.unwrap_or(0),
                () = held.cancelled() => 0,
            };
            if n == 0 {
                break;
            }
            digest.update(&chunk[..n]);
            bytes += n as u64;
            // Written and flushed as it comes: actions' progress messages show live.
            let _ = out.write_all(frame(&entry.nonce, frames, &chunk[..n]).as_bytes()).and_then(|()| out.flush());
            frames += 1;
        }
        read.cancel();
        (hex::encode(digest.finalize()), bytes, frames)
    };
    let waited = async {
        let status = child.wait().await;
        tokio::select! {
            () = read.cancelled() => {}
            () = tokio::time::sleep(PIPE_GRACE) => held.cancel(),
        }
        status
    };
    let terminated = async {
        // The Pod's deletion or a timeout: the program gets the signal and may clean up.
        if let Some(term) = term.as_mut() {
            term.recv().await;
            if let Some(pid) = pid {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
            }
        }
        std::future::pending::<()>().await
    };
    let work = async { tokio::join!(feed, relay, waited) };
    let ((), (sha256, bytes, frames), status) = tokio::select! {
        done = work => done,
        () = terminated => unreachable!("pending forever"),
    };
    use std::os::unix::process::ExitStatusExt;
    let status = match status {
        Ok(status) => status,
        Err(e) => return fail(entry, format!("lost the program: {e}")),
    };
    let record = Record {
        nonce: entry.nonce.clone(),
        code: status.code(),
        signal: status.signal(),
        stdout_bytes: bytes,
        stdout_sha256: sha256,
        frames,
        error: None,
    };
    write_record(entry, &record);
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
