//! `deployster __pod-serve`, the runner's side of an invocation served by a warm runner (issue
//! 37), as the exec into a runner would start it: a header line and the request on stdin, kept
//! open; frames, stderr lines and the record on stdout. Run here as a local process — the
//! runner Pod and the exec that starts it are not built yet.
#![cfg(feature = "kube")]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deployster::pod::frames::{Record, split};
use deployster::pod::serve::{SERVE_SUBCOMMAND, ServeHeader};

/// An invocation of `script` (run by `/bin/sh -c`) for `resource`, its stdin left open.
fn start(locks: &std::path::Path, resource: &str, invocation: &str, script: &str, request: &[u8]) -> Child {
    let header = ServeHeader {
        nonce: format!("n-{invocation}"),
        program: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: [("GREETING".to_string(), "hi".to_string())].into(),
        request_bytes: request.len() as u64,
        resource: resource.into(),
        invocation: invocation.into(),
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args([SERVE_SUBCOMMAND, "--locks", locks.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(&header.with_request(request)).unwrap();
    child.stdin.as_mut().unwrap().flush().unwrap();
    child
}

/// Reads the invocation's stdout until its first line holding `needle`.
fn wait_for_line(child: &mut Child, needle: &str) -> String {
    let mut out = BufReader::new(child.stdout.as_mut().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "ended before {needle:?}: {seen}");
        seen.push_str(&line);
        if line.contains(needle) {
            return seen;
        }
    }
}

/// What the invocation printed, split, with its record and exit code.
fn finish(child: Child, nonce: &str) -> (Vec<u8>, Vec<String>, Record, i32) {
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8(output.stdout).unwrap();
    let parts = split(&log, nonce).unwrap();
    let record: Record =
        serde_json::from_str(parts.record.as_deref().unwrap_or_else(|| panic!("no record: {log}"))).unwrap();
    (parts.chunks.into_values().flatten().collect(), parts.stderr, record, output.status.code().unwrap_or(-1))
}

/// Whether process `pid` has ended (gone, or a zombie waiting for its reaper).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn an_invocation_gets_its_request_and_environment_and_ends_with_a_verified_record() {
    let locks = tempfile::tempdir().unwrap();
    let mut child = start(locks.path(), "ns/m/r", "a", "cat; echo \"$GREETING\"; echo oops >&2; exit 3", b"hello\n");
    // Kept open while it runs, as the caller of an exec does: its end would cancel.
    let _open = child.stdin.take();
    let (stdout, stderr, record, code) = finish(child, "n-a");
    assert_eq!(stdout, b"hello\nhi\n");
    assert_eq!(stderr, ["oops"]);
    assert_eq!((record.code, record.signal, record.error), (Some(3), None, None));
    assert_eq!(record.stdout_bytes, 9);
    assert_eq!(code, 3, "exits as the program did");
}

/// The caller's end of stdin is the cancellation: SIGTERM to the program's group, SIGKILL after
/// the grace for one that ignores it; nothing of it is left running.
#[test]
fn closing_stdin_stops_the_program_and_everything_it_started() {
    let locks = tempfile::tempdir().unwrap();
    let script = "trap '' TERM; sleep 60 & echo \"child $!\"; wait";
    let mut child = start(locks.path(), "ns/m/r", "b", script, b"");
    let seen = wait_for_line(&mut child, "@@deployster n-b 0 ");
    let frame = seen.lines().find(|l| l.starts_with("@@deployster n-b 0 ")).unwrap();
    let printed = split(frame, "n-b").unwrap().chunks.into_values().flatten().collect::<Vec<u8>>();
    let sleeper: u32 = String::from_utf8(printed).unwrap().trim().trim_start_matches("child ").parse().unwrap();
    let stopped = Instant::now();
    drop(child.stdin.take());
    let (_, _, record, code) = finish(child, "n-b");
    let took = stopped.elapsed();
    assert_eq!(record.signal, Some(9), "it ignored SIGTERM, so SIGKILL: {record:?}");
    assert_eq!(code, 128 + 9);
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(15), "SIGKILL after the grace: {took:?}");
    assert!(ended(sleeper), "what it started is stopped too");
}

/// A program that starts a daemon and exits: the invocation ends, and the daemon with it — a
/// runner serves many invocations, none may leave a process behind.
#[test]
fn a_daemon_left_behind_is_stopped_with_the_invocation() {
    let locks = tempfile::tempdir().unwrap();
    let mut child = start(locks.path(), "ns/m/r", "c", "sleep 60 & echo $!", b"");
    let _open = child.stdin.take();
    let started = Instant::now();
    let (stdout, _, record, code) = finish(child, "n-c");
    assert!(started.elapsed() < Duration::from_secs(10), "ended after the pipe grace: {:?}", started.elapsed());
    assert_eq!((record.code, code), (Some(0), 0));
    let daemon: u32 = String::from_utf8(stdout).unwrap().trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !ended(daemon) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ended(daemon), "the daemon {daemon} was stopped");
}

/// Never two at once: a second invocation of the same resource, while the first runs, is
/// refused at once and names the one that runs; another resource runs beside it.
#[test]
fn a_second_invocation_of_a_running_resource_is_refused_naming_the_first() {
    let locks = tempfile::tempdir().unwrap();
    let mut first = start(locks.path(), "ns/m/r", "run-1/action:create", "echo started; sleep 60", b"");
    wait_for_line(&mut first, "@@deployster n-run-1/action:create 0 ");
    let second = start(locks.path(), "ns/m/r", "run-2/state", "echo should not run", b"");
    let (stdout, stderr, record, code) = finish(second, "n-run-2/state");
    assert!(stdout.is_empty(), "it did not run");
    assert_eq!(code, 125);
    let why = record.error.unwrap();
    assert!(why.contains("another invocation of resource `ns/m/r` is running in this runner"), "{why}");
    assert!(why.contains("run-1/action:create"), "names the one that runs: {why}");
    assert!(stderr.iter().any(|l| l.contains(&why)), "{stderr:?}");
    let mut other = start(locks.path(), "ns/m/other", "run-2/other", "echo fine", b"");
    let _open = other.stdin.take();
    assert_eq!(finish(other, "n-run-2/other").0, b"fine\n", "another resource runs beside it");
    drop(first.stdin.take());
    assert_eq!(finish(first, "n-run-1/action:create").2.signal, Some(15), "stopped by SIGTERM");
    let mut again = start(locks.path(), "ns/m/r", "run-3/state", "echo again", b"");
    let _open_again = again.stdin.take();
    assert_eq!(finish(again, "n-run-3/state").0, b"again\n", "free once the first has ended");
}

#[test]
fn a_header_that_is_not_an_invocation_is_refused_with_a_record() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_deployster"))
        .arg(SERVE_SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(b"not json\n").unwrap();
    drop(child.stdin.take());
    let (_, stderr, record, code) = finish(child, "");
    assert_eq!(code, 125);
    assert!(record.error.as_deref().unwrap().starts_with("the header is not an invocation"), "{record:?}");
    assert!(stderr.iter().any(|l| l.contains("deployster __pod-serve: the header is not an invocation")));
}
