//! The deployment log through the CLI: what runs append, crashes, locking, `history` and the
//! `reconcile` loop.

use crate::support;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::{Run, Workspace};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

fn two_files() -> String {
    support::dir_and_file("vars: { greeting: hello }", "greeting.txt", r"{{ greeting }}\n", "")
}

fn history(ws: &Workspace, extra: &[&str]) -> Value {
    let run = ws.run(&[&["history", "--output", "json", "--limit", "1000"], extra].concat());
    assert_eq!(run.code, 0, "{}", run.all());
    run.json()
}

/// `(target, event)` of one run's entries, oldest first.
fn run_events(log: &Value, run_id: &str) -> Vec<(String, String)> {
    let mut events: Vec<(String, String)> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["id"] == run_id)
        .map(|e| (e["target"].as_str().unwrap().to_string(), e["event"].as_str().unwrap().to_string()))
        .collect();
    events.reverse();
    events
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(t, e)| (t.to_string(), e.to_string())).collect()
}

fn apply_json(ws: &Workspace, extra: &[&str]) -> (Run, Value) {
    let run = ws.apply(&[&["--output", "json"], extra].concat());
    let doc = run.json();
    (run, doc)
}

#[test]
fn runs_append_what_they_did_with_their_revision() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let (first, doc) = apply_json(&ws, &[]);
    assert_eq!(first.code, 0, "{}", first.all());
    let (run1, revision) = (doc["run_id"].as_str().unwrap().to_string(), doc["revision"].clone());
    let log = history(&ws, &[]);
    assert_eq!(
        run_events(&log, &run1),
        pairs(&[
            ("manifest", "run-started"),
            ("resource/dir", "resource-missing"),
            ("resource/file", "resource-missing"),
            ("resource/dir/action/create", "action-started"),
            // Into the inventory with the intent, before the action runs.
            ("resource/dir", "resource-inventoried"),
            ("resource/dir/action/create", "action-finished-successfully"),
            ("resource/dir", "resource-applied"),
            ("resource/file", "resource-missing"),
            ("resource/file/action/write", "action-started"),
            ("resource/file", "resource-inventoried"),
            ("resource/file/action/write", "action-finished-successfully"),
            ("resource/file", "resource-applied"),
            ("manifest", "run-finished-successfully"),
        ])
    );
    assert!(log["events"].as_array().unwrap().iter().all(|e| e["revision"] == revision));
    assert_eq!(log["latest_applied"]["id"], run1.as_str());

    // A no-op run: observed VALID, same revision.
    let (_, doc) = apply_json(&ws, &[]);
    let run2 = doc["run_id"].as_str().unwrap().to_string();
    assert_eq!(doc["revision"], revision, "same input, same revision");
    assert_eq!(
        run_events(&history(&ws, &[]), &run2),
        pairs(&[
            ("manifest", "run-started"),
            ("resource/dir", "resource-valid"),
            ("resource/file", "resource-valid"),
            ("manifest", "run-finished-successfully"),
        ])
    );

    // Drift: the file was VALID, now MISSING.
    std::fs::remove_file(ws.path("out/greeting.txt")).unwrap();
    let (run, doc) = apply_json(&ws, &[]);
    assert_eq!(doc["drift"], serde_json::json!([{"resource": "file", "now": "MISSING"}]), "{}", run.all());
    let events = run_events(&history(&ws, &[]), doc["run_id"].as_str().unwrap());
    assert!(events.contains(&("resource/file".into(), "drift-detected".into())), "{events:?}");
    assert!(events.contains(&("resource/file".into(), "resource-applied".into())), "{events:?}");

    // A different input is a different revision.
    let (_, doc) = apply_json(&ws, &["--var", "greeting=bonjour"]);
    assert_ne!(doc["revision"], revision);
    assert_eq!(ws.read("out/greeting.txt"), "bonjour\n");
}

const SECRET_FILE: &str = r#"
vars: { greeting: hello, token: s3cr3t-t0ken }
sensitive: [token]
resources:
  file: { type: builtin/file, config: { path: out.txt, content: "{{ greeting }} {{ token }}\n" } }
"#;

/// Changing a variable is a change the user made, not drift: the plan says what changed (the
/// sensitive value masked), the log records `change-detected`, and nothing reports drift. An
/// edit made outside Deployster, with the same inputs, is drift.
#[test]
fn a_changed_variable_is_a_change_and_an_edit_from_outside_is_drift() {
    let ws = Workspace::new();
    ws.manifest(SECRET_FILE);
    assert_eq!(ws.apply(&[]).code, 0);

    let plan = ws.run(&["plan", "-f", "manifest.yaml", "--var", "greeting=bonjour"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(!plan.stdout.contains("Drift"), "a variable change is not drift:\n{}", plan.all());
    assert!(
        plan.stdout.contains(
            "Changed since file was last VALID (STALE now):\n    config.content: \"hello ***\\n\" → \"bonjour ***\\n\""
        ),
        "the plan shows what changed, the sensitive value masked:\n{}",
        plan.all()
    );
    assert!(!plan.all().contains("s3cr3t"), "{}", plan.all());

    let (run, doc) = apply_json(&ws, &["--var", "greeting=bonjour"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(doc["drift"], serde_json::json!([]), "{}", run.all());
    assert_eq!(doc["changes"][0]["resource"], "file");
    assert_eq!(doc["changes"][0]["differences"][0]["path"], "config.content");
    // Logged once, by the plan that first saw it (plans are recorded too).
    let events: Vec<String> = history(&ws, &[])["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == "resource/file")
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events.iter().filter(|e| *e == "change-detected").count(), 1, "{events:?}");
    assert!(!events.iter().any(|e| e == "drift-detected"), "{events:?}");

    // Only the sensitive value changes: a change, named by its field (a keyed fingerprint of
    // each masked value tells it; the key stays in the state directory, out of the log).
    let (_, doc) = apply_json(&ws, &["--var", "greeting=bonjour", "--var", "token=n3w-t0ken"]);
    assert_eq!(
        doc["changes"][0]["differences"],
        serde_json::json!([{"path": "config.content", "was": "***", "now": "***"}])
    );
    let key = std::fs::read(ws.path(".deployster/fingerprint.key")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.path(".deployster/fingerprint.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let log = ws.run(&["history", "--output", "json", "--limit", "1000"]);
    assert!(!log.stdout.contains(&hex[..16]), "the key is not in the log");
    assert!(log.stdout.contains("\"sensitive\""), "the log keeps fingerprints: {}", log.stdout);
    assert_eq!(ws.read("out.txt"), "bonjour n3w-t0ken\n");

    // The same inputs, edited outside: drift.
    ws.write("out.txt", "tampered\n");
    let (_, doc) = apply_json(&ws, &["--var", "greeting=bonjour", "--var", "token=n3w-t0ken"]);
    assert_eq!(doc["drift"], serde_json::json!([{"resource": "file", "now": "STALE"}]));
    assert_eq!(doc["changes"], serde_json::json!([]));
    let log = ws.run(&["history", "--output", "json", "--limit", "1000"]);
    for secret in ["s3cr3t-t0ken", "n3w-t0ken"] {
        assert!(!log.stdout.contains(secret), "the log never keeps a sensitive value:\n{}", log.stdout);
    }
}

#[test]
fn a_sensitive_name_that_is_not_a_variable_is_refused() {
    let ws = Workspace::new();
    ws.manifest("sensitive: [nope]\nresources:\n  f: { type: builtin/file, config: { path: a, content: b } }\n");
    let run = ws.run(&["plan", "-f", "manifest.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("sensitive: `nope` is not a variable"), "{}", run.all());
}

#[test]
fn a_failed_run_is_recorded_and_queried_as_the_latest_failure() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  broken: { type: ./fixture, config: { action_exit: 3 } }\n  after: { type: ./fixture, dependencies: { b: broken } }\n",
    );
    let (run, doc) = apply_json(&ws, &[]);
    assert_eq!(run.code, 1, "{}", run.all());
    let run_id = doc["run_id"].as_str().unwrap();
    let log = history(&ws, &[]);
    let events = run_events(&log, run_id);
    for expected in [
        ("resource/broken/action/create", "action-failed"),
        ("resource/broken", "resource-failed"),
        ("resource/after", "resource-blocked"),
        ("manifest", "run-failed"),
    ] {
        assert!(events.contains(&(expected.0.into(), expected.1.into())), "missing {expected:?} in {events:?}");
    }
    assert_eq!(log["latest_failed"]["id"], run_id);
    assert_eq!(log["latest_applied"], Value::Null);
    let broken = history(&ws, &["--resource", "broken"]);
    assert_eq!(broken["latest_failed"]["id"], run_id);
    assert!(
        broken["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["target"].as_str().unwrap().starts_with("resource/broken"))
    );
    let message = broken["latest_failed"]["detail"]["message"].as_str().unwrap();
    assert!(message.contains("exit code 3"), "{message}");
}

#[test]
fn plans_are_recorded_but_are_not_deployments() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let plan = ws.plan(&["--output", "json"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    let log = history(&ws, &[]);
    let events = run_events(&log, plan.json()["run_id"].as_str().unwrap());
    assert_eq!(
        events,
        pairs(&[
            ("manifest", "plan-started"),
            ("resource/dir", "resource-missing"),
            ("resource/file", "resource-missing"),
            ("manifest", "plan-finished"),
        ])
    );
    assert_eq!(log["latest_applied"], Value::Null);
    assert_eq!(log["in_progress"], serde_json::json!([]));
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn action_started(ws: &Workspace) -> bool {
    history(ws, &[])["events"].as_array().unwrap().iter().any(|e| e["event"] == "action-started")
}

const SLOW: &str = "resources:\n  slow: { type: ./fixture, config: { action_sleep_ms: 2500 } }\n";

#[test]
fn a_run_killed_mid_apply_is_reported_by_the_next_which_converges() {
    let ws = Workspace::new();
    ws.manifest(SLOW);
    let mut child = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    wait_until("the action's intent to be recorded", Duration::from_secs(30), || action_started(&ws));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();

    let log = history(&ws, &[]);
    assert_eq!(log["in_progress"].as_array().unwrap().len(), 1, "the killed run is in progress: {log}");
    let crashed = log["in_progress"][0]["id"].as_str().unwrap().to_string();
    let revision = log["in_progress"][0]["revision"].to_string();
    let slow = history(&ws, &["--resource", "slow"]);
    assert_eq!(slow["in_progress"][0]["target"], "resource/slow/action/create", "its intent has no result");

    let next = ws.apply(&[]);
    assert_eq!(next.code, 0, "{}", next.all());
    let note = format!("note: run {crashed} (revision {revision}, started ");
    assert!(next.stderr.contains(&note), "{}", next.all());
    assert!(
        next.stderr.contains("it had started resource/slow/action/create without recording a result"),
        "{}",
        next.all()
    );
    assert!(ws.exists("slow.marker"), "the next run converged");

    let log = history(&ws, &[]);
    assert_eq!(log["in_progress"], serde_json::json!([]));
    let closed: Vec<&str> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["id"] == crashed.as_str())
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(closed.contains(&"run-interrupted") && closed.contains(&"action-interrupted"), "{closed:?}");
}

#[test]
fn a_second_apply_on_the_same_state_dir_is_refused_while_plan_still_works() {
    let ws = Workspace::new();
    ws.manifest(SLOW);
    let first = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    wait_until("the first apply to start its action", Duration::from_secs(30), || action_started(&ws));
    let second = ws.apply(&[]);
    assert_eq!(second.code, 2, "refused to run (README: exit codes):\n{}", second.all());
    assert!(second.stderr.contains("is in use by another deployster run (pid "), "{}", second.all());
    assert!(second.stderr.contains(&format!("pid {} since", first.id())), "{}", second.all());
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "a plan reads and appends beside a running apply:\n{}", plan.all());
    let output = first.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn history_without_a_log_says_so() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let run = ws.run(&["history"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("No deployment log in"), "{}", run.all());
    assert!(!ws.exists(".deployster"), "reading history creates nothing");
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
}

#[test]
fn reconcile_corrects_drift_within_an_interval_and_stops_cleanly_on_sigterm() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    // Fixed checks: every second (adaptive checks have a test of their own).
    let child = ws.spawn(&["reconcile", "-f", "manifest.yaml", "--interval", "1s", "--max-interval", "1s"]);
    let file = ws.path("out/greeting.txt");
    // Until the first pass has ended, removing the file would race its check after the action.
    wait_until("the first pass to apply and end", Duration::from_secs(30), || {
        file.exists() && ws.run(&["history", "--output", "json"]).stdout.contains("run-finished-successfully")
    });
    std::fs::remove_file(&file).unwrap();
    let removed = Instant::now();
    wait_until("the drift to be corrected", Duration::from_secs(30), || file.exists());
    assert!(removed.elapsed() < Duration::from_secs(5), "corrected only after {:?}", removed.elapsed());
    signal(&child, Signal::SIGTERM);
    let stopped = Instant::now();
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(stopped.elapsed() < Duration::from_secs(10), "took {:?} to stop", stopped.elapsed());
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("drift detected in file; applied changes."), "{stdout}");
    assert!(stdout.contains("Pass 1 (run "), "{stdout}");
    assert!(stderr.contains("stopping after the running pass"), "{stderr}");
    let log = history(&ws, &[]);
    assert!(log["events"].as_array().unwrap().iter().any(|e| e["event"] == "drift-detected"));
    assert_eq!(log["in_progress"], serde_json::json!([]), "every pass recorded its end");
}

/// `history` shows the newest events only: it says how many, and how to see more, when there
/// may be more.
#[test]
fn history_says_when_it_shows_only_the_newest_events() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    assert_eq!(ws.apply(&[]).code, 0);
    let all = ws.run(&["history"]);
    assert!(all.stdout.contains("Recent events (newest first):"), "{}", all.all());
    let cut = ws.run(&["history", "--limit", "2"]);
    assert!(cut.stdout.contains("The 2 most recent events, newest first (--limit N shows more):"), "{}", cut.all());
}

/// A type's `init` answers once per resource for the whole loop, not once per pass: what can
/// change its answer (the program, the request, the resource's environment) is the same from
/// pass to pass; the run id each pass gives the program is not part of it.
#[test]
fn reconcile_runs_init_once_per_resource_not_once_per_pass() {
    let ws = Workspace::new();
    std::fs::write(ws.path("a.marker"), "made").unwrap();
    std::fs::write(ws.path("b.marker"), "made").unwrap();
    std::fs::write(ws.path("fixture-init.log"), "").unwrap();
    ws.manifest(
        "resources:\n  a: { type: ./fixture, config: { marker: a.marker, log: \"$WS/calls.log\" } }\n  \
         b: { type: ./fixture, config: { marker: b.marker, log: \"$WS/calls.log\" } }\n",
    );
    let child = ws.spawn(&["reconcile", "-f", "manifest.yaml", "--interval", "1s", "--max-interval", "1s"]);
    let calls = |phase: &str| {
        let file = if phase == "init" { "fixture-init.log" } else { "calls.log" };
        let log = std::fs::read_to_string(ws.path(file)).unwrap_or_default();
        log.lines().filter(|l| l.split(' ').nth(1) == Some(phase)).count()
    };
    wait_until("four passes' state reads", Duration::from_secs(60), || calls("state") >= 8);
    signal(&child, Signal::SIGTERM);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(calls("init"), 2, "one init per resource over {} state reads", calls("state"));
}

#[test]
fn reconcile_checks_steady_resources_less_often_and_still_corrects_drift_within_four_intervals() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let child = ws.spawn(&["reconcile", "-f", "manifest.yaml", "--interval", "1s"]);
    let file = ws.path("out/greeting.txt");
    // Steady: 3 checks a second apart, 3 two seconds apart, then every 4 seconds (4 × 1s).
    let reads = || {
        let log = history(&ws, &[]);
        let events = log["events"].as_array().unwrap().clone();
        events.iter().filter(|e| e["target"] == "resource/file" && e["event"] == "resource-valid").count()
    };
    wait_until("the checks to back off", Duration::from_secs(60), || reads() >= 7);
    std::fs::remove_file(&file).unwrap();
    let removed = Instant::now();
    wait_until("the drift to be corrected", Duration::from_secs(30), || file.exists());
    let took = removed.elapsed();
    // `file` is read every second again; `dir` stays steady and is not read on those passes.
    std::thread::sleep(Duration::from_millis(2500));
    signal(&child, Signal::SIGTERM);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(took < Duration::from_secs(4) + Duration::from_millis(1500), "corrected only after {took:?}\n{stdout}");
    assert!(stdout.contains("Next pass in 2s.") && stdout.contains("Next pass in 4s."), "{stdout}");
    assert!(
        stdout.contains("drift detected in file; applied changes. Next pass in 1s."),
        "back to the interval: {stdout}"
    );
    assert!(stdout.contains("no drift (1 not due for a check); no changes. Next pass in 1s."), "{stdout}");
}

/// An edit of the manifest or of its variable files starts a pass at once, however long the
/// interval — a new auto var file too, and the fix of a manifest that did not load.
#[test]
fn reconcile_passes_at_once_when_the_manifest_or_its_variables_change() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let child = ws.spawn(&["reconcile", "-f", "manifest.yaml", "--interval", "1h"]);
    let greeting = || std::fs::read_to_string(ws.path("out/greeting.txt")).unwrap_or_default();
    let wait_for = |text: &str| {
        let what = format!("a pass writing {text:?}");
        wait_until(&what, Duration::from_secs(15), || greeting() == format!("{text}\n"));
    };
    wait_for("hello");
    ws.manifest(&two_files().replace("greeting: hello", "greeting: bonjour"));
    wait_for("bonjour");
    ws.write("vars.auto.yaml", "greeting: hola\n");
    wait_for("hola");
    std::fs::remove_file(ws.path("vars.auto.yaml")).unwrap();
    ws.manifest("resources: [not, a, map");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(greeting(), "hola\n", "a manifest that does not load changes nothing");
    ws.manifest(&two_files().replace("greeting: hello", "greeting: ciao"));
    wait_for("ciao");
    signal(&child, Signal::SIGTERM);
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "the last pass succeeded\n{stdout}{stderr}");
    // The auto var file's removal and the broken manifest written right after it are one
    // change, or two when the loop sees them apart (a busy machine): each starts a pass.
    let changes = stdout.matches("The manifest changed: passing now.").count();
    assert!(changes == 4 || changes == 5, "{stdout}");
    assert!(stderr.contains(&format!("error: pass {changes}:")), "the broken manifest's pass failed: {stderr}");
    let (last, after) = (format!("Pass {} ", changes + 1), format!("Pass {} ", changes + 2));
    assert!(stdout.contains(&last) && !stdout.contains(&after), "one pass per change: {stdout}");
}

/// An edit inside a plug (a file, or a directory's tree) starts a pass at once too.
#[test]
fn reconcile_passes_at_once_when_a_plug_s_files_change() {
    let ws = Workspace::new();
    ws.write("secrets/nested/creds.json", "{}");
    ws.init_response(
        "user",
        r#"{"state_action": {"args": ["state"]}, "plugs": {"creds": {"container_path": "/creds"}}}"#,
    );
    ws.manifest("plugs:\n  creds: { path: ./secrets, read_only: true }\nresources:\n  user: { type: ./fixture, config: { record: $WS/user.jsonl } }\n");
    let child = ws.spawn(&["reconcile", "-f", "manifest.yaml", "--interval", "1h"]);
    let states = || ws.recorded("user.jsonl").iter().filter(|r| r["phase"] == "state").count();
    wait_until("the first pass", Duration::from_secs(15), || states() > 0);
    std::thread::sleep(Duration::from_millis(1500));
    let first = states();
    ws.write("secrets/nested/creds.json", "{\"rotated\": true}");
    wait_until("a pass after the plug's file changed", Duration::from_secs(15), || states() > first);
    signal(&child, Signal::SIGTERM);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.matches("A plug's files changed: passing now, reading every state afresh.").count(),
        1,
        "{stdout}"
    );
    assert!(!stdout.contains("The manifest changed"), "{stdout}");
}

#[test]
fn reconcile_refuses_a_max_interval_below_the_interval_and_a_zero_budget() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let run = ws.run(&["reconcile", "-f", "manifest.yaml", "--interval", "30s", "--max-interval", "10s"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("--max-interval 10s must not be shorter than --interval 30s"), "{}", run.all());
    let run = ws.run(&["reconcile", "-f", "manifest.yaml", "--max-invocations-per-second", "0"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("--max-invocations-per-second"), "{}", run.all());
    assert!(!ws.exists("out"), "nothing ran");
}

#[test]
fn a_second_signal_cancels_the_running_action_cleanly() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  slow: { type: ./fixture, config: { action_sleep_ms: 60000 } }\n");
    let child = ws.spawn(&["reconcile", "-f", "manifest.yaml", "--interval", "1s"]);
    wait_until("the action to start", Duration::from_secs(30), || action_started(&ws));
    signal(&child, Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, Signal::SIGINT);
    let stopped = Instant::now();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stopped.elapsed() < Duration::from_secs(15), "took {:?} to stop", stopped.elapsed());
    assert_eq!(output.status.code(), Some(1), "the pass failed: its action was cancelled\n{stderr}");
    assert!(stderr.contains("stopping now: cancelling the running actions"), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");
    let log = history(&ws, &[]);
    assert_eq!(log["in_progress"], serde_json::json!([]), "the cancelled run still recorded its end");
    assert!(log["events"].as_array().unwrap().iter().any(|e| e["event"] == "action-failed"));
}

/// Runs deployster in `ws` as a user who cannot write there: `nobody` when the tests run as
/// root (root ignores file modes), else the current user with the workspace made read-only.
fn run_without_write_access(ws: &Workspace, args: &[&str]) -> Run {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    for entry in walk(ws.dir.path()) {
        let mode = if entry.is_dir() { 0o555 } else { 0o444 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut command = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(support::deployster());
        c
    } else {
        std::process::Command::new(support::deployster())
    };
    let output = command.args(args).current_dir(ws.dir.path()).stdin(std::process::Stdio::null()).output().unwrap();
    for entry in walk(ws.dir.path()) {
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            all.extend(walk(&path));
        } else if !path.is_symlink() {
            all.push(path);
        }
    }
    all
}

#[test]
fn history_and_plan_read_a_log_they_cannot_write() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    assert_eq!(ws.apply(&[]).code, 0);
    let before = history(&ws, &[])["events"].as_array().unwrap().len();

    let read = run_without_write_access(&ws, &["history", "--output", "json", "--limit", "1000"]);
    assert_eq!(read.code, 0, "{}", read.all());
    assert_eq!(read.json()["events"].as_array().unwrap().len(), before, "history reads everything");
    assert!(read.json()["latest_applied"].is_object(), "{}", read.stdout);

    std::fs::write(ws.path("out/greeting.txt"), "tampered\n").unwrap();
    let plan = run_without_write_access(&ws, &["plan"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stderr.contains("warning: this plan will not be recorded"), "{}", plan.all());
    assert!(plan.stdout.contains("Drift: file was VALID"), "drift is still told from the log:\n{}", plan.all());
    assert_eq!(history(&ws, &[])["events"].as_array().unwrap().len(), before, "nothing was written");
}

/// `deployster … | head -1`: the reader leaves after one line. Output ends quietly; the
/// running action is not cut short, and the exit code is the run's.
#[test]
fn a_reader_that_goes_away_ends_output_not_the_run() {
    use std::io::{BufRead, BufReader};
    let ws = Workspace::new();
    ws.manifest("resources:\n  slow: { type: ./fixture, config: { action_sleep_ms: 1500 } }\n");
    let mut apply = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    let mut first = String::new();
    BufReader::new(apply.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    // The pipe's read end is dropped here: every later write fails with EPIPE.
    let output = apply.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(ws.exists("slow.marker"), "the action ran to its end");

    // More history than a pipe holds (64 KiB), so that the reader's leaving is noticed.
    let log = deployster::history::store::SqliteLog::open(&ws.path(".deployster")).unwrap();
    let entries: Vec<deployster::history::Entry> = (0..3000)
        .map(|i| deployster::history::Entry {
            id: format!("run-{i}"),
            target: "resource/slow".into(),
            revision: "0123456789ab".into(),
            event: deployster::history::Event::ResourceValid,
            at: 1_700_000_000_000 + i,
            detail: serde_json::json!({}),
        })
        .collect();
    deployster::history::History::append(&log, &entries).unwrap();
    let mut history = ws.spawn(&["history", "--limit", "5000"]);
    let mut line = String::new();
    BufReader::new(history.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let output = history.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("panicked"));
}

/// `deployster apply` with `state_dir` as its state directory, run with a tmpfs mounted (with
/// `options`) at `mount` in a mount namespace of the test's own (`unshare`): its exit status and
/// stderr.
fn apply_on_tmpfs(
    ws: &Workspace,
    mount: &std::path::Path,
    options: &str,
    state_dir: &str,
) -> (std::process::Output, String) {
    let script = format!(r#"mount -t tmpfs -o {options} tmpfs "$1" && shift && exec "$@""#);
    let output = std::process::Command::new("unshare")
        .args(["--map-root-user", "--mount", "sh", "-c", &script, "sh", mount.to_str().unwrap()])
        .arg(support::deployster())
        .args(["apply", "-f", "manifest.yaml", "--yes", "--state-dir", state_dir])
        .current_dir(ws.dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare (util-linux) runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("unshare:") && !stderr.contains("mount:"), "could not set up the tmpfs: {stderr}");
    (output, stderr)
}

/// A state directory that is full when an action is about to run: the action's intent cannot
/// be written, so the action does not run, and the error names the log and the cause. The
/// directory is a small tmpfs in a mount namespace of the test's own (`unshare`).
#[test]
fn a_full_state_directory_stops_the_pass_before_the_action() {
    let ws = Workspace::new();
    let state = ws.path("state");
    std::fs::create_dir(&state).unwrap();
    ws.manifest("resources:\n  work: { type: ./fixture, config: { fill_disk: $WS/state/filler, marker: $WS/done } }\n");
    let (output, stderr) = apply_on_tmpfs(&ws, &state, "size=1m", state.to_str().unwrap());
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let expected = format!("the deployment log at {}/log.sqlite", state.display());
    assert!(stderr.contains("resource `work` failed in action create"), "{stderr}");
    assert!(stderr.contains("its intent could not be recorded before it ran, so it did not run"), "{stderr}");
    assert!(stderr.contains(&expected) && stderr.contains("full"), "names the log and the cause: {stderr}");
    assert!(!ws.exists("done"), "the action did not run");
}

/// A state directory that cannot be used is the command line's fault: exit 2, naming the
/// directory (not a file inside it) and why — a file, a path under a file, a read-only file
/// system, a log a newer deployster wrote.
#[test]
fn a_state_directory_that_cannot_be_used_is_refused_with_exit_2() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  work: { type: ./fixture, config: { marker: $WS/done } }\n");
    ws.write("afile", "");
    for (dir, why) in [
        ("afile", "the state directory afile cannot be used: it is a file, not a directory"),
        ("afile/sub", "the state directory afile/sub cannot be used: a part of its path is a file, not a directory"),
    ] {
        let run = ws.apply(&["--state-dir", dir]);
        assert_eq!(run.code, 2, "{dir}: {}", run.all());
        assert!(run.stderr.contains(why), "{dir}: {}", run.stderr);
        assert!(!run.stderr.contains("/lock"), "names the directory, not the lock file: {}", run.stderr);
    }
    // A read-only file system (a tmpfs mounted read-only in a mount namespace of the test's own:
    // root writes through mere permissions).
    let state = ws.path("ro");
    std::fs::create_dir(&state).unwrap();
    let (output, stderr) = apply_on_tmpfs(&ws, &state, "ro", "ro/state");
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the state directory ro/state cannot be used: it is on a read-only file system"),
        "{stderr}"
    );
    assert!(!ws.exists("done"), "nothing ran");

    assert_eq!(ws.apply(&["--state-dir", "newer"]).code, 0);
    let log = rusqlite::Connection::open(ws.path("newer/log.sqlite")).unwrap();
    log.pragma_update(None, "user_version", 99).unwrap();
    drop(log);
    for run in
        [ws.apply(&["--state-dir", "newer"]), ws.run(&["history", "-f", "manifest.yaml", "--state-dir", "newer"])]
    {
        assert_eq!(run.code, 2, "{}", run.all());
        assert!(
            run.stderr.contains(
                "the state directory newer cannot be used: its log was written by a newer deployster (schema 99"
            ),
            "{}",
            run.stderr
        );
    }
}

/// The state directory fills while an action runs, after its intent was recorded: the action
/// succeeds, but the run's end cannot be recorded — and such a run does not exit 0.
#[test]
fn a_run_whose_end_could_not_be_recorded_does_not_exit_0() {
    let ws = Workspace::new();
    let state = ws.path("state");
    std::fs::create_dir(&state).unwrap();
    ws.manifest(
        "resources:\n  work: { type: ./fixture, config: { action_fill_disk: $WS/state/filler, marker: $WS/done } }\n",
    );
    let (output, stderr) = apply_on_tmpfs(&ws, &state, "size=1m", state.to_str().unwrap());
    assert!(ws.exists("done"), "the action ran: {stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("this run is not fully recorded in the deployment log"), "{stderr}");
    assert!(stderr.contains("full"), "says why: {stderr}");
}

/// Revisions are numbered per state directory; `history` lists them, tells one, and compares
/// two — sensitive values masked; a revision that does not exist is an error.
#[test]
fn revisions_are_numbered_listed_told_and_compared() {
    let ws = Workspace::new();
    ws.manifest(SECRET_FILE);
    let (_, first) = apply_json(&ws, &[]);
    assert_eq!(first["revision"], 1, "{first}");
    let (_, again) = apply_json(&ws, &[]);
    assert_eq!(again["revision"], 1, "the same content keeps its number");
    let (_, second) = apply_json(&ws, &["--var", "greeting=bonjour"]);
    assert_eq!(second["revision"], 2);
    assert_eq!(ws.run(&["plan", "-f", "manifest.yaml", "--var", "greeting=hola"]).code, 0);
    let (_, back) = apply_json(&ws, &[]);
    assert_eq!((back["revision"].clone(), back["hash"].clone()), (serde_json::json!(4), first["hash"].clone()));

    let list = ws.run(&["history", "--revisions", "--output", "json"]);
    assert_eq!(list.code, 0, "{}", list.all());
    let rows: Vec<(i64, String)> = list
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["revision"].as_i64().unwrap(), r["outcome"].as_str().unwrap().to_string()))
        .collect();
    let expected = [(4, "applied"), (3, "planned"), (2, "applied"), (1, "applied")];
    assert_eq!(rows, expected.map(|(n, o)| (n, o.to_string())));
    assert_eq!(list.json()[3]["hash"], first["hash"]);

    let told = ws.run(&["history", "--revision", "2"]);
    assert_eq!(told.code, 0, "{}", told.all());
    assert!(told.stdout.starts_with("Revision 2 (hash "), "{}", told.stdout);
    assert!(told.stdout.contains("): applied\n"), "{}", told.stdout);
    assert!(told.stdout.contains("  file  resource-applied"), "{}", told.stdout);

    let diff = ws.run(&["history", "--diff", "1", "2"]);
    assert_eq!(diff.code, 0, "{}", diff.all());
    assert_eq!(diff.stdout, "file:\n    config.content: \"hello ***\\n\" → \"bonjour ***\\n\"\n");
    let same = ws.run(&["history", "--diff", "1", "4"]);
    assert!(same.stdout.contains("no recorded config differs"), "{}", same.all());
    let json = ws.run(&["history", "--diff", "2", "1", "--output", "json"]).json();
    assert_eq!(json["resources"][0]["differences"][0]["now"], "hello ***\n");

    for args in [&["--diff", "1", "9"][..], &["--revision", "0"][..]] {
        let run = ws.run(&[&["history"], args].concat());
        assert_eq!(run.code, 2, "{}", run.all());
        assert!(run.stderr.contains("this log has revisions 1 to 4"), "{}", run.all());
    }
    let log = ws.run(&["history", "--limit", "1000", "--output", "json"]);
    assert!(!log.stdout.contains("s3cr3t"), "{}", log.stdout);

    // A resource only one of the two revisions recorded: each of its values, against nothing.
    ws.manifest(&format!("{SECRET_FILE}  more: {{ type: builtin/file, config: {{ path: more.txt, content: x }} }}\n"));
    let (_, added) = apply_json(&ws, &[]);
    assert_eq!(added["revision"], 5, "{added}");
    let diff = ws.run(&["history", "--diff", "4", "5"]);
    assert_eq!(
        diff.stdout,
        "more:\n    type: (absent) → \"builtin/file\"\n    config.path: (absent) → \"more.txt\"\n    config.content: (absent) → \"x\"\n",
        "{}",
        diff.all()
    );
    let json = ws.run(&["history", "--diff", "5", "4", "--output", "json"]).json();
    assert_eq!(
        json["resources"][0]["differences"][0],
        serde_json::json!({"path": "type", "was": "builtin/file", "now": null})
    );
}

/// `history --run ID`: one run's events, oldest first — the id a plan, an apply and every
/// program (`DEPLOYSTER_RUN_ID`) see; an id that is not a UUID, or names no run, is refused.
#[test]
fn one_run_s_events_are_shown_by_its_id() {
    let ws = Workspace::new();
    ws.manifest(&two_files());
    let (first, doc) = apply_json(&ws, &[]);
    assert_eq!(first.code, 0, "{}", first.all());
    let run = doc["run_id"].as_str().unwrap().to_string();
    let (again, _) = apply_json(&ws, &[]);
    assert_eq!(again.code, 0, "{}", again.all());

    let text = ws.run(&["history", "-f", "manifest.yaml", "--run", &run]);
    assert_eq!(text.code, 0, "{}", text.all());
    assert!(text.stdout.starts_with(&format!("Run {run} (revision 1), oldest first:")), "{}", text.all());
    let lines: Vec<&str> = text.stdout.lines().skip(1).collect();
    assert!(lines.first().is_some_and(|l| l.contains("run-started")), "{}", text.stdout);
    assert!(lines.last().is_some_and(|l| l.contains("run-finished-successfully")), "{}", text.stdout);
    assert!(lines.iter().all(|l| l.contains(&run)), "only that run: {}", text.stdout);
    let json = ws.run(&["history", "-f", "manifest.yaml", "--run", &run.to_uppercase(), "--output", "json"]);
    assert_eq!(json.code, 0, "an id in capitals is the same id: {}", json.all());
    let events = json.json()["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), lines.len(), "{}", json.all());

    let refused = ws.run(&["history", "-f", "manifest.yaml", "--run", "last-tuesday"]);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(refused.stderr.contains("a run id is a UUID"), "{}", refused.all());
    let none = ws.run(&["history", "-f", "manifest.yaml", "--run", "01a250c3-a6cd-7167-a5d8-faa90b0ebd19"]);
    assert_eq!(none.code, 2, "{}", none.all());
    assert!(
        none.stderr.contains("no run 01a250c3-a6cd-7167-a5d8-faa90b0ebd19 in the deployment log"),
        "{}",
        none.all()
    );
}
