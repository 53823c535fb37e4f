//! `deployster __pod-entry`, the helper in front of a type's program in its Pod, run here as a
//! process: the request reaches the program's stdin, its stdout comes back framed and verified
//! against the record, its stderr passes on in whole lines before the record (all of it on the
//! helper's stdout, which keeps the order), SIGTERM reaches it, and a program that cannot start
//! leaves a record saying why.

use crate::support;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deployster::pod_helper::frames::{Record, reassemble, split};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    record: String,
}

fn entry(dir: &std::path::Path, program: &[&str]) -> Command {
    std::fs::write(dir.join("request.json"), r#"{"name": "web", "config": {"n": 1}}"#).unwrap();
    let mut command = Command::new(support::deployster());
    command
        .args(["__pod-entry", "--nonce", "n1", "--request"])
        .arg(dir.join("request.json"))
        .arg("--termination-log")
        .arg(dir.join("termination-log"))
        .arg("--")
        .args(program)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn finish(dir: &std::path::Path, child: std::process::Child) -> Ran {
    let output = child.wait_with_output().unwrap();
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        record: std::fs::read_to_string(dir.join("termination-log")).unwrap_or_default(),
    }
}

impl Ran {
    /// The program's stderr as the log gives it: the lines that are not frames or the record.
    fn stderr_lines(&self) -> Vec<String> {
        split(&self.stdout, "n1").unwrap().stderr
    }
}

fn run(program: &[&str]) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let child = entry(dir.path(), program).spawn().unwrap();
    finish(dir.path(), child)
}

#[test]
fn the_request_reaches_the_program_and_its_stdout_comes_back_whole() {
    let script = "cat; echo; echo progress >&2; head -c 100000 /dev/zero | tr '\\0' 'x'; exit 4";
    let ran = run(&["sh", "-c", script]);
    assert_eq!(ran.code, 4, "{}", ran.stdout);
    assert_eq!(ran.stderr, "", "everything goes to stdout, in order");
    assert_eq!(ran.stderr_lines(), ["progress"], "stderr passes on as it is");
    assert!(ran.stdout.lines().last().unwrap().starts_with("@@deployster-record n1 {"), "the record last");
    let parts = split(&ran.stdout, "n1").unwrap();
    let (record, stdout) = reassemble(&parts, &ran.record, "n1").unwrap();
    let expected = format!("{{\"name\": \"web\", \"config\": {{\"n\": 1}}}}\n{}", "x".repeat(100_000));
    assert_eq!(String::from_utf8(stdout).unwrap(), expected);
    assert_eq!((record.code, record.signal, record.error), (Some(4), None, None));
    assert!(record.frames > 30, "frames as the output came: {}", record.frames);
}

/// The executor takes the record's arrival in the log as the program's end: every line of the
/// program's stderr is there before it, whole, even one the program never ended and one a frame
/// was written in the middle of.
#[test]
fn stderr_comes_in_whole_lines_before_the_record() {
    let script = "printf 'half' >&2; sleep 0.2; echo out; sleep 0.2; printf ' done\\nlast' >&2; echo more";
    let ran = run(&["sh", "-c", script]);
    assert_eq!(ran.code, 0, "{}", ran.stdout);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert!(lines.last().unwrap().starts_with("@@deployster-record n1 {"), "{lines:?}");
    assert_eq!(ran.stderr_lines(), ["half done", "last"]);
    let (_, stdout) = reassemble(&split(&ran.stdout, "n1").unwrap(), &ran.record, "n1").unwrap();
    assert_eq!(stdout, b"out\nmore\n");
    let long = run(&["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' 'e' >&2"]);
    let broken = long.stderr_lines();
    assert_eq!(broken.concat(), "e".repeat(20_000), "an over-long line is broken, never lost");
    assert!(
        broken.iter().all(|l| l.len() <= 8 * 1024 + 4096),
        "{:?}",
        broken.iter().map(String::len).collect::<Vec<_>>()
    );
}

#[test]
fn a_program_that_cannot_start_or_dies_by_a_signal_says_so_in_the_record() {
    let ran = run(&["/no/such/entrypoint"]);
    assert_eq!(ran.code, 127);
    let record: Record = serde_json::from_str(&ran.record).unwrap();
    assert!(record.error.as_deref().is_some_and(|e| e.contains("cannot start `/no/such/entrypoint`")), "{record:?}");
    assert!(ran.stderr_lines().iter().any(|l| l.contains("cannot start")), "{}", ran.stdout);

    let ran = run(&["sh", "-c", "echo partial; kill -KILL $$"]);
    assert_eq!(ran.code, 128 + 9);
    let (record, stdout) = reassemble(&split(&ran.stdout, "n1").unwrap(), &ran.record, "n1").unwrap();
    assert_eq!((record.code, record.signal, stdout), (None, Some(9), b"partial\n".to_vec()));
}

#[test]
fn sigterm_reaches_the_program_which_may_clean_up() {
    let dir = tempfile::tempdir().unwrap();
    let script = "trap 'echo cleaning up >&2; kill $!; exit 3' TERM; sleep 30 >/dev/null 2>&1 & echo ready >&2; wait";
    let mut child = entry(dir.path(), &["sh", "-c", script]).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 6];
    out.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"ready\n");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let started = std::time::Instant::now();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let ran = finish(dir.path(), child);
    assert!(started.elapsed() < Duration::from_secs(10), "the program was not stopped");
    assert_eq!(ran.code, 3, "{rest}");
    assert!(rest.contains("cleaning up"), "{rest}");
    let record: Record = serde_json::from_str(&ran.record).unwrap();
    assert_eq!(record.code, Some(3));
}

#[test]
fn a_bad_command_line_is_a_usage_error() {
    let output = Command::new(support::deployster()).args(["__pod-entry", "--nonce", "n1"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage: __pod-entry"), "{output:?}");
}

/// The helper's container started (`--install DIR`), once its `postStart` hook
/// (`--await-install DIR`) has returned, as the kubelet waits for it.
fn installed_and_holding(dir: &std::path::Path) -> std::process::Child {
    let hold = Command::new(support::deployster())
        .args(["__pod-entry", "--install"])
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let hook = Command::new(support::deployster()).args(["__pod-entry", "--await-install"]).arg(dir).output().unwrap();
    assert_eq!(hook.status.code(), Some(0), "{hook:?}");
    hold
}

/// The process's exit code, once it has exited; fails saying `still` after 10 s.
fn exit_within_10s(child: &mut std::process::Child, still: &str) -> Option<i32> {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "{still}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait().unwrap().code()
}

/// The helper's container: `--install` copies the helper and holds; its `postStart` hook
/// (`--await-install`) returns once the copy is whole; the copy, run as the type's container's
/// entry with `--done`, ends the hold once its program has run.
#[test]
fn the_helper_s_container_installs_the_helper_and_holds_until_the_type_s_container_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let mut hold = installed_and_holding(dir.path());
    let installed = dir.path().join("deployster");
    assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(support::deployster()).unwrap(), "whole");
    std::thread::sleep(Duration::from_millis(300));
    assert!(hold.try_wait().unwrap().is_none(), "the helper holds while the type's container runs");

    let entry = entry(dir.path(), &["true"]);
    let args: Vec<String> = entry.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let at = args.iter().position(|a| a == "--").unwrap();
    let done = dir.path().join("done");
    let ran = Command::new(&installed)
        .args(&args[..at])
        .arg("--done")
        .arg(&done)
        .args(&args[at..])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0), "the copy runs: {ran:?}");
    assert!(done.exists(), "the type's container marked itself done");
    assert_eq!(exit_within_10s(&mut hold, "the helper still holds"), Some(0));
}

/// The Pod deleted before the type's container is done: the helper, PID 1 of its container,
/// ends on SIGTERM rather than wait for the kubelet's SIGKILL.
#[test]
fn the_helper_s_container_ends_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut hold = installed_and_holding(dir.path());
    kill(Pid::from_raw(hold.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(exit_within_10s(&mut hold, "the helper ignored SIGTERM"), Some(0));
}

/// A termination-message file the container may not write (a runtime that gives a non-root
/// container a root-owned 0644 one): the record still comes back, through the log.
#[test]
fn a_termination_message_that_cannot_be_written_still_leaves_the_record_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let command = entry(dir.path(), &["sh", "-c", "echo '{\"status\": \"VALID\"}'"]);
    let args: Vec<String> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let at = args.iter().position(|a| a == "--termination-log").unwrap();
    let mut command = Command::new(support::deployster());
    command.args(&args[..=at]).arg("/proc/version").args(&args[at + 2..]);
    let output = command.output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let (record, read) = reassemble(&split(&stdout, "n1").unwrap(), "", "n1").unwrap();
    assert_eq!((record.code, read), (Some(0), b"{\"status\": \"VALID\"}\n".to_vec()));
}

#[test]
fn the_environment_beside_the_request_reaches_the_program() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("env"), r#"{"GREETING": "hello there", "EMPTY": ""}"#).unwrap();
    let child = entry(dir.path(), &["sh", "-c", "echo \"$GREETING|${EMPTY-unset}\" >&2"]).spawn().unwrap();
    let ran = finish(dir.path(), child);
    assert_eq!((ran.code, ran.stderr_lines()), (0, vec!["hello there|".to_string()]));
    std::fs::write(dir.path().join("env"), "not json").unwrap();
    let child = entry(dir.path(), &["true"]).spawn().unwrap();
    let ran = finish(dir.path(), child);
    assert_eq!(ran.code, 127);
    assert!(ran.record.contains("is not a JSON object"), "{}", ran.record);
}
