//! Ctrl-C (SIGINT) stops the programs deployster started, whole process groups included,
//! instead of leaving them running.

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

#[test]
fn interrupting_a_run_stops_its_programs() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  stuck: { type: ./fixture, config: { hang: true } }\n");
    let child = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    let program = format!("{}/fixture", ws.root());
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_mentioning(&program).is_empty() {
        assert!(Instant::now() < deadline, "the resource program never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let started = Instant::now();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(started.elapsed() < Duration::from_secs(15), "deployster took {:?} to stop", started.elapsed());
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted: stopping running programs"), "{stderr}");
    assert!(stderr.contains("resource `stuck` failed in state") && stderr.contains("cancelled"), "{stderr}");
    assert!(processes_mentioning(&program).is_empty(), "the resource program outlived the interrupt");
}
