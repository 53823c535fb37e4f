//! SIGINT (Ctrl-C), SIGTERM and SIGHUP stop the programs deployster started, whole process
//! groups included, instead of leaving them running, and the run is recorded as interrupted.

use std::time::{Duration, Instant};

use crate::support::Workspace;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// Starts `apply` on a resource whose state action hangs, and waits for that state action
/// (not `init`, which comes first) to run.
fn apply_stuck(ws: &Workspace) -> (std::process::Child, String) {
    ws.manifest("resources:\n  stuck: { type: ./fixture, config: { hang: true } }\n");
    let child = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    let program = format!("{}/fixture", ws.root());
    let in_state = format!("{program}\0state");
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_mentioning(&in_state).is_empty() {
        assert!(Instant::now() < deadline, "the resource's state action never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, program)
}

/// Ctrl-C, `kill`, `timeout`, a CI job's cancellation and a closed terminal all stop a run the
/// same way: its programs are stopped, it says so, and the log records the run as interrupted.
#[test]
fn sigint_sigterm_and_sighup_stop_a_run_and_its_programs() {
    for (signal, name) in [(Signal::SIGINT, "SIGINT"), (Signal::SIGTERM, "SIGTERM"), (Signal::SIGHUP, "SIGHUP")] {
        let ws = Workspace::new();
        let (child, program) = apply_stuck(&ws);
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let started = Instant::now();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // SIGTERM stops the program at once; the 5 s grace before SIGKILL is for programs that
        // ignore it, which the fixture does not.
        assert!(started.elapsed() < Duration::from_secs(3), "{name}: took {:?} to stop", started.elapsed());
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(&format!("interrupted by {name}: stopping running programs")), "{stderr}");
        assert!(stderr.contains("resource `stuck` failed in state") && stderr.contains("cancelled"), "{stderr}");
        // It ends as what it was: interrupted, not failed.
        assert!(stderr.contains("nothing was applied: interrupted while planning"), "{stderr}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains("Apply failed"), "{name}: {stderr}");
        assert!(processes_mentioning(&program).is_empty(), "{name}: the resource program outlived the signal");

        let history = ws.run(&["history", "--output", "json"]);
        let log = history.json();
        assert_eq!(log["in_progress"], serde_json::json!([]), "{name}: nothing left in progress: {log}");
        let ended = log["events"].as_array().unwrap().iter().find(|e| e["target"] == "manifest").cloned();
        let ended = ended.expect("the run's end is recorded");
        assert_eq!(ended["event"], "run-interrupted", "{name}: {ended}");
        assert!(ended["detail"]["message"].as_str().unwrap().contains(&format!("interrupted by {name}")), "{ended}");
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

/// `<pid> <what> <ms>` lines of the fixture's lock log.
fn lock_log(ws: &Workspace) -> Vec<(u32, String)> {
    std::fs::read_to_string(ws.path("lock.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].to_string())
        })
        .collect()
}

/// A worker an action detached (setsid: its own session and group) dies with deployster too,
/// within a second of `kill -9` — found by the run in its environment — not only at the next run.
#[test]
fn after_kill_9_a_detached_worker_dies_with_deployster() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  work: { type: ./fixture, config: { lock: $WS/lock, lock_in_child: true, detach_child: true, action_sleep_ms: 20000, marker: $WS/done } }\n",
    );
    for round in 0..3 {
        let before = lock_log(&ws).len();
        let mut apply = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let worker = loop {
            if let Some((pid, _)) = lock_log(&ws)[before..].iter().find(|(_, w)| w == "started") {
                break *pid;
            }
            assert!(Instant::now() < deadline, "round {round}: the action never started");
            std::thread::sleep(Duration::from_millis(10));
        };
        let session = std::fs::read_to_string(format!("/proc/{worker}/stat")).unwrap();
        let fields: Vec<&str> = session.rsplit(')').next().unwrap().split_whitespace().collect();
        assert_eq!(fields[3], worker.to_string(), "round {round}: the worker leads a session of its own");
        kill(Pid::from_raw(apply.id() as i32), Signal::SIGKILL).unwrap();
        let killed = Instant::now();
        apply.wait().unwrap();
        while !ended(worker) {
            assert!(
                killed.elapsed() < Duration::from_secs(1),
                "round {round}: the detached worker outlived deployster"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// `kill -9` of deployster in the middle of an action, twenty times at random moments: the
/// action's program dies with deployster within a second, and so does what it started itself
/// (here a child holding the action's lock); the next run also stops anything of the killed
/// run before it reads any state — so no action ever runs twice at once, and no killed
/// action completes after its run died.
#[test]
fn after_kill_9_no_action_outlives_deployster_or_overlaps_the_next_run() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  work: { type: ./fixture, config: { lock: $WS/lock, lock_in_child: true, action_sleep_ms: 1500, marker: $WS/done } }\n",
    );
    let mut killed_workers = Vec::new();
    for round in 0..20 {
        let _ = std::fs::remove_file(ws.path("done"));
        let before = lock_log(&ws).len();
        let mut apply = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let worker = loop {
            let log = lock_log(&ws);
            assert!(log.iter().all(|(_, w)| w != "overlap"), "round {round}: an action ran twice at once: {log:?}");
            if let Some((pid, _)) = log[before..].iter().find(|(_, w)| w == "started") {
                break *pid;
            }
            assert!(Instant::now() < deadline, "round {round}: the action never started");
            std::thread::sleep(Duration::from_millis(10));
        };
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..1200)));
        kill(Pid::from_raw(apply.id() as i32), Signal::SIGKILL).unwrap();
        let killed = Instant::now();
        apply.wait().unwrap();
        let program = format!("{}/fixture", ws.root());
        // The program (found by its path) and its worker (by the pid it logged).
        while processes_mentioning(&program).iter().any(|pid| !ended(*pid)) || !ended(worker) {
            assert!(
                killed.elapsed() < Duration::from_secs(1),
                "round {round}: the action's program or its worker {worker} outlived deployster by a second"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        if !lock_log(&ws).iter().any(|(pid, w)| *pid == worker && w == "finished") {
            killed_workers.push(worker);
        }
    }
    let last = ws.apply(&[]);
    assert_eq!(last.code, 0, "{}", last.all());
    assert!(last.stderr.contains("was interrupted before it recorded its end"), "{}", last.all());
    let log = lock_log(&ws);
    assert!(log.iter().all(|(_, w)| w != "overlap"), "an action ran twice at once: {log:?}");
    assert!(!killed_workers.is_empty(), "some kills landed mid-action");
    for pid in &killed_workers {
        assert!(ended(*pid), "the killed run's worker {pid} was stopped");
        assert!(!log.iter().any(|(p, w)| p == pid && w == "finished"), "a killed action completed later: {log:?}");
    }
}
