//! SIGINT (Ctrl-C), SIGTERM and SIGHUP stop the programs deployster started, whole process
//! groups included, instead of leaving them running, and the run is recorded as interrupted.

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::Workspace;

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

/// Starts `apply` on a resource whose state action hangs, and waits for the program to run.
fn apply_stuck(ws: &Workspace) -> (std::process::Child, String) {
    ws.manifest("resources:\n  stuck: { type: ./fixture, config: { hang: true } }\n");
    let child = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    let program = format!("{}/fixture", ws.root());
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_mentioning(&program).is_empty() {
        assert!(Instant::now() < deadline, "the resource program never started");
        std::thread::sleep(Duration::from_millis(50));
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
        assert!(started.elapsed() < Duration::from_secs(15), "{name}: took {:?} to stop", started.elapsed());
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(&format!("interrupted by {name}: stopping running programs")), "{stderr}");
        assert!(stderr.contains("resource `stuck` failed in state") && stderr.contains("cancelled"), "{stderr}");
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
