//! `deployster __pod-serve`, the runner's side of an invocation served by a warm runner (issue
//! 37), as the exec into a runner would start it: a header line and the request on stdin, kept
//! open; frames, stderr lines and the record on stdout — and the runner's own process
//! (`--hold`), which ends it when idle. Run here as local processes; tests/cluster/runners.rs runs them
//! in runner Pods of a real cluster.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deployster::pod_helper::frames::{Record, split};
use deployster::pod_helper::serve::{SERVE_SUBCOMMAND, ServeHeader};

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
    finish_saying_begun(child, nonce).0
}

/// As [`finish`], and whether the helper said it started the program.
fn finish_saying_begun(child: Child, nonce: &str) -> ((Vec<u8>, Vec<String>, Record, i32), bool) {
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8(output.stdout).unwrap();
    let parts = split(&log, nonce).unwrap();
    let record: Record =
        serde_json::from_str(parts.record.as_deref().unwrap_or_else(|| panic!("no record: {log}"))).unwrap();
    let code = output.status.code().unwrap_or(-1);
    ((parts.chunks.into_values().flatten().collect(), parts.stderr, record, code), parts.begun)
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
    let ((stdout, stderr, record, code), begun) = finish_saying_begun(child, "n-a");
    assert!(begun, "it said it started the program");
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

/// `__pod-serve --hold`, a runner's own process, in `locks`: it ends after `idle` seconds
/// without an invocation, creating `done`.
fn hold(locks: &std::path::Path, idle: u64) -> Child {
    let done = locks.join("done");
    Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args([SERVE_SUBCOMMAND, "--locks", locks.to_str().unwrap(), "--hold", "--idle", &idle.to_string()])
        .args(["--done", done.to_str().unwrap()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits up to `within` for `child` to exit; its code, or `None` if it still runs.
fn exited(child: &mut Child, within: Duration) -> Option<i32> {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A runner unused for its idle time ends (and says so to the helper's container, which then
/// ends the Pod); an invocation that reaches it after that is refused as retiring — what the
/// executor takes as its cue to start another runner — rather than run in a runner going away.
#[test]
fn an_idle_runner_ends_and_refuses_what_comes_after() {
    let locks = tempfile::tempdir().unwrap();
    let mut runner = hold(locks.path(), 1);
    assert_eq!(exited(&mut runner, Duration::from_secs(10)), Some(0), "it ended after its idle time");
    assert!(locks.path().join("done").exists(), "the helper's container is told");
    let late = start(locks.path(), "ns/m/r", "late", "echo should not run", b"");
    let ((stdout, _, record, code), begun) = finish_saying_begun(late, "n-late");
    assert!(stdout.is_empty() && !begun, "it did not run, and said it did not start it");
    assert_eq!(code, 125);
    assert!(record.error.as_deref().unwrap().starts_with(deployster::pod_helper::serve::RETIRING), "{record:?}");
}

/// A runner does not end while an invocation runs, however long it takes, nor until it has
/// been idle for its idle time after the invocation ended.
#[test]
fn a_runner_serving_an_invocation_does_not_retire() {
    let locks = tempfile::tempdir().unwrap();
    let mut runner = hold(locks.path(), 1);
    let mut busy = start(locks.path(), "ns/m/r", "busy", "sleep 3; echo done", b"");
    let _open = busy.stdin.take();
    assert_eq!(exited(&mut runner, Duration::from_millis(2500)), None, "it serves the invocation");
    assert_eq!(finish(busy, "n-busy").0, b"done\n");
    let ended = Instant::now();
    assert_eq!(exited(&mut runner, Duration::from_secs(10)), Some(0));
    assert!(
        ended.elapsed() >= Duration::from_millis(700),
        "idle counts from the invocation's end: {:?}",
        ended.elapsed()
    );
}

/// `--wait-for`: what the executor asks after it cancelled an invocation — whether it still
/// runs, naming it, and once it has stopped, 0.
#[test]
fn wait_for_tells_whether_a_resource_s_invocation_still_runs() {
    let locks = tempfile::tempdir().unwrap();
    let mut running = start(locks.path(), "ns/m/r", "run-1/action:create", "echo up; sleep 60", b"");
    wait_for_line(&mut running, "@@deployster n-run-1/action:create 0 ");
    let wait = |within: &str| {
        Command::new(env!("CARGO_BIN_EXE_deployster"))
            .args([SERVE_SUBCOMMAND, "--locks", locks.path().to_str().unwrap(), "--wait-for", "ns/m/r"])
            .args(["--within", within])
            .output()
            .unwrap()
    };
    let still = wait("1");
    assert_eq!(still.status.code(), Some(1));
    let said = String::from_utf8_lossy(&still.stderr);
    assert!(said.contains("invocation run-1/action:create of `ns/m/r` still runs after 1s"), "{said}");
    drop(running.stdin.take());
    let stopped = Instant::now();
    assert_eq!(wait("30").status.code(), Some(0));
    assert!(stopped.elapsed() < Duration::from_secs(10), "once it stopped: {:?}", stopped.elapsed());
    let _ = finish(running, "n-run-1/action:create");
    let args = Command::new(env!("CARGO_BIN_EXE_deployster")).args([SERVE_SUBCOMMAND, "--hold"]).output().unwrap();
    assert_eq!(args.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&args.stderr).contains("--idle is missing"), "{args:?}");
}
