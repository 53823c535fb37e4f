//! Messages on an action's stdout (seed 004): progress, results and errors, read while the
//! action runs and kept out of the output shown.

use std::os::unix::fs::PermissionsExt;

use crate::support::Workspace;

/// A type whose `create` action behaves by resource name; MISSING until it succeeded once.
fn messaging_type(ws: &Workspace) {
    let script = ws.write(
        "talker",
        r#"#!/bin/sh
dir="$(dirname "$0")"
case "$1" in
  "") echo '{"state_action": {"args": ["state"]}}' ;;
  state) if [ -e "$dir/$DEPLOYSTER_RESOURCE.done" ]; then echo '{"status": "VALID", "state": {}}';
         else echo '{"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]}'; fi ;;
  create)
    case "$DEPLOYSTER_RESOURCE" in
      good)
        echo "starting"
        echo "[AGENT_MESSAGE] 10.0 [AGENT_MESSAGE_END]"
        sleep 1.1 # progress lines are throttled to one a second
        echo "[AGENT_MESSAGE] +40"
        echo "[AGENT_MESSAGE]"
        echo '{"progress": 100, "result": [{"key": "url", "value": "http://x"}],'
        echo '}'
        echo "[AGENT_MESSAGE_END]"
        echo "done" ;;
      quiet_failure)
        echo '[AGENT_MESSAGE] {"error": 42, "errorMsg": "disk full"} [AGENT_MESSAGE_END]'
        exit 3 ;;
      loud_failure)
        echo '[AGENT_MESSAGE] {"errorMsg": "not this one"} [AGENT_MESSAGE_END]'
        echo "stderr says why" >&2
        exit 3 ;;
      garbage) echo "[AGENT_MESSAGE] not json [AGENT_MESSAGE_END]" ;;
      backwards) echo "[AGENT_MESSAGE] 60 [AGENT_MESSAGE_END]"; echo "[AGENT_MESSAGE] 20 [AGENT_MESSAGE_END]" ;;
      unterminated) echo "[AGENT_MESSAGE]"; echo '{"progress": 5' ;;
      stalls) echo "[AGENT_MESSAGE] 10 [AGENT_MESSAGE_END]"; sleep 20 ;;
      slow) for i in 1 2 3 4 5 6; do echo "[AGENT_MESSAGE] +10"; sleep 0.4; done ;;
    esac
    case "$DEPLOYSTER_RESOURCE" in good|slow) touch "$dir/$DEPLOYSTER_RESOURCE.done" ;; esac
    exit 0 ;;
esac
"#,
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn progress_and_results_are_read_and_kept_out_of_the_output() {
    let ws = Workspace::new();
    messaging_type(&ws);
    ws.manifest("resources:\n  good: { type: ./talker }\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(
        run.stdout.contains("good/create | starting") && run.stdout.contains("good/create | done"),
        "{}",
        run.all()
    );
    assert!(!run.all().contains("AGENT_MESSAGE"), "messages are not output:\n{}", run.all());
    for percent in ["10%", "50%", "100%"] {
        assert!(run.stderr.contains(&format!("good: action create {percent}")), "{percent}:\n{}", run.all());
    }
    assert!(run.stdout.contains("good/create result: url = http://x"), "{}", run.all());
    let log = ws.run(&["history", "--output", "json", "--limit", "100"]).json();
    let finished = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "action-finished-successfully")
        .expect("the action's result is recorded");
    assert_eq!(finished["detail"]["result"], serde_json::json!([{"key": "url", "value": "http://x"}]));
    let text = ws.run(&["history", "--resource", "good"]);
    assert!(text.stdout.contains("action-finished-successfully  result: url=http://x"), "{}", text.stdout);
}

#[test]
fn json_output_carries_each_action_s_results() {
    let ws = Workspace::new();
    messaging_type(&ws);
    ws.manifest("resources:\n  good: { type: ./talker }\n");
    let run = ws.apply(&["--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let doc = run.json();
    let good = doc["result"].as_array().unwrap().iter().find(|e| e["name"] == "good").expect("good in the result");
    assert_eq!(good["actions"], serde_json::json!(["create"]));
    assert_eq!(
        good["results"],
        serde_json::json!([{"action": "create", "result": [{"key": "url", "value": "http://x"}]}])
    );
    // Progress goes to stderr, one line per change, never into the JSON document.
    assert!(run.stderr.contains("good: action create 100%"), "{}", run.all());
}

#[test]
fn a_failed_action_says_stderr_first_then_its_last_message() {
    let ws = Workspace::new();
    messaging_type(&ws);
    ws.manifest("resources:\n  quiet_failure: { type: ./talker }\n  loud_failure: { type: ./talker }\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("disk full (error 42)"), "{}", run.all());
    assert!(run.stderr.contains("stderr says why") && !run.stderr.contains("not this one"), "{}", run.all());
}

#[test]
fn messages_that_break_the_format_fail_the_action_clearly() {
    for (resource, why) in [
        ("garbage", "a message that is neither a number nor a JSON object"),
        ("backwards", "progress went backwards, to 20"),
        ("unterminated", "a message without [AGENT_MESSAGE_END]"),
    ] {
        let ws = Workspace::new();
        messaging_type(&ws);
        ws.manifest(&format!("resources:\n  {resource}: {{ type: ./talker }}\n"));
        let run = ws.apply(&[]);
        assert_eq!(run.code, 1, "{resource}: {}", run.all());
        let expected = format!("its [AGENT_MESSAGE] output is invalid: {why}");
        assert!(run.stderr.contains(&format!("resource `{resource}` failed in action create")), "{}", run.all());
        assert!(run.stderr.contains(&expected), "{resource}: {}", run.all());
    }
}

/// The progress timeout stops an action that reported progress once and then stalled, not one
/// that is slow but keeps reporting.
#[test]
fn a_stalled_action_is_stopped_and_a_slow_one_is_not() {
    let ws = Workspace::new();
    messaging_type(&ws);
    ws.manifest(
        "resources:\n  stalls: { type: ./talker, timeouts: { progress: 1s } }\n  slow: { type: ./talker, timeouts: { progress: 1s } }\n",
    );
    let started = std::time::Instant::now();
    let run = ws.apply(&[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr.contains("resource `stalls` failed in action create")
            && run.stderr.contains("reported no progress for 1s and was stopped"),
        "{}",
        run.all()
    );
    assert!(ws.exists("slow.done"), "a slow action that keeps reporting runs to its end:\n{}", run.all());
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "the stalled action was not left to its sleep");
}

/// A type that declares `progress_timeout` in its init: an action silent from its start for
/// that long is stopped (without it, the limit counts from the first progress message); a
/// `progress_timeout` that is not a duration fails init, naming it.
#[test]
fn an_action_silent_from_its_start_is_stopped_when_its_type_says_it_reports_progress() {
    let ws = Workspace::new();
    let init = |resource: &str, timeout: &str| {
        std::fs::create_dir_all(ws.path("fixture-init")).unwrap();
        ws.write(
            &format!("fixture-init/{resource}.json"),
            &format!(r#"{{"state_action": {{"args": ["state"]}}, "progress_timeout": {timeout}}}"#),
        );
    };
    init("silent", "\"1s\"");
    ws.manifest(&format!(
        "resources:\n  silent: {{ type: ./fixture, config: {{ marker: {}/m, action_sleep_ms: 20000 }} }}\n",
        ws.root()
    ));
    let started = std::time::Instant::now();
    let run = ws.apply(&[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr.contains("reported no progress in its first 1s (its type's init declares progress_timeout)"),
        "{}",
        run.all()
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "not left to its sleep: {}", run.all());

    init("silent", "\"soon\"");
    let run = ws.plan(&[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("`progress_timeout`: `soon` is not a duration such as 90s or 30m"), "{}", run.all());
}
