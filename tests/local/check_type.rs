//! `deployster check-type`: the fixture type passes every check in its good mode, and each way
//! of breaking the protocol fails the check that names it.

use crate::support;
use std::os::unix::fs::PermissionsExt;

use crate::support::{Run, Workspace};
use serde_json::Value;

fn check(ws: &Workspace, type_ref: &str, extra: &[&str]) -> Run {
    ws.run(&[&["check-type", type_ref, "--output", "json"], extra].concat())
}

/// The findings of `run` as (id, level).
fn levels(run: &Run) -> Vec<(String, String)> {
    let doc = run.json();
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap().to_string(), f["level"].as_str().unwrap().to_string()))
        .collect()
}

fn failed(run: &Run) -> Vec<String> {
    levels(run).into_iter().filter(|(_, l)| l == "fail").map(|(id, _)| id).collect()
}

fn finding(run: &Run, id: &str) -> Value {
    let doc = run.json();
    doc["findings"].as_array().unwrap().iter().find(|f| f["id"] == id).cloned().unwrap_or(Value::Null)
}

#[test]
fn the_fixture_type_conforms_on_the_process_executor() {
    let ws = Workspace::new();
    ws.write("good.yaml", &format!("marker: {}/m\n", ws.root()));
    ws.write("bad.yaml", "exit: 3\n");
    let run = check(&ws, "./fixture", &["--config", "good.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let doc = run.json();
    assert_eq!(doc["conforms"], true);
    let passed: Vec<String> = levels(&run).into_iter().filter(|(_, l)| l == "pass").map(|(id, _)| id).collect();
    for id in ["P001", "P002", "P003", "P004", "P011", "P012", "P013", "P014", "P015", "P016", "P017", "P030", "P031"] {
        assert!(passed.contains(&id.to_string()), "{id} passed: {passed:?}");
    }
    assert!(doc["calls"].as_array().unwrap().iter().any(|c| c["phase"] == "action:create"), "time per call");
    // Text: a line per check, a verdict.
    let text = ws.run(&["check-type", "./fixture", "--config", "good.yaml"]);
    assert!(
        text.stdout.contains("PASS P014 state is VALID after the actions (convergence) [good.yaml]"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("./fixture conforms:"), "{}", text.stdout);
    // Before running them, it says the actions are run for real.
    assert!(
        text.stderr.starts_with("note: check-type runs ./fixture's actions for real with each --config (1 of them)"),
        "{}",
        text.stderr
    );
}

#[test]
fn each_broken_init_fails_its_check() {
    for (reply, expected) in [
        ("not json at all", "P002"),
        ("starting up\n{\"state_action\": {\"args\": [\"state\"]}}\n", "P031"),
        ("{\"label\": \"no state action\"}", "P003"),
        ("{\"state_action\": {}}", "P004"),
        ("{\"state_action\": {\"args\": [\"state\"]}, \"config_schema\": {\"type\": 12}}", "P005"),
        ("{\"state_action\": {\"args\": [\"state\"]}, \"identity\": \"/name\"}", "P003"),
        ("{\"state_action\": {\"args\": [\"state\"]}, \"identity\": [\"name\"]}", "P004"),
        (
            "{\"state_action\": {\"args\": [\"state\"]}, \"config_schema\": {\"type\": \"object\", \"properties\": {\"a\": {}}}, \"identity\": [\"/b\"]}",
            "P006",
        ),
    ] {
        let ws = Workspace::new();
        ws.init_response("check-type", reply);
        let run = check(&ws, "./fixture", &[]);
        assert_eq!(run.code, 1, "{reply}: {}", run.all());
        assert!(failed(&run).contains(&expected.to_string()), "{reply}: {expected} should fail: {:?}", levels(&run));
        assert!(!finding(&run, expected)["message"].as_str().unwrap().is_empty(), "says why");
    }
}

#[test]
fn each_broken_state_or_action_fails_its_check() {
    for (config, expected) in support::BROKEN_TYPE_CASES {
        let ws = Workspace::new();
        ws.write("case.yaml", &format!("marker: {}/m\n{config}\n", ws.root()));
        let run = check(&ws, "./fixture", &["--config", "case.yaml"]);
        assert_eq!(run.code, 1, "{config}: {}", run.all());
        assert_eq!(failed(&run), [expected.to_string()], "{config}: {:?}", levels(&run));
    }
}

#[test]
fn a_planned_state_the_actions_keep_passes_and_none_is_a_warning() {
    let ws = Workspace::new();
    let marker = format!("{}/m", ws.root());
    ws.write("kept.yaml", &format!("marker: {marker}\nplanned: {{content: created, marker: {{$unknown: true}}}}\n"));
    ws.write("none.yaml", &format!("marker: {marker}2\n"));
    let run = check(&ws, "./fixture", &["--config", "kept.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(finding(&run, "P018")["level"], "pass", "{}", run.all());
    let run = check(&ws, "./fixture", &["--config", "none.yaml"]);
    assert_eq!(run.code, 0, "a warning only: {}", run.all());
    let said = finding(&run, "P018");
    assert_eq!(said["level"], "warn", "{}", run.all());
    assert!(said["message"].as_str().unwrap().contains("no `planned_state`"), "{said}");
}

#[test]
fn an_action_that_fails_when_run_again_is_a_warning() {
    let ws = Workspace::new();
    ws.write("case.yaml", &format!("marker: {}/m\nnot_reentrant: true\n", ws.root()));
    let run = check(&ws, "./fixture", &["--config", "case.yaml"]);
    assert_eq!(run.code, 0, "a warning, not a failure: {}", run.all());
    let p016 = finding(&run, "P016");
    assert_eq!(p016["level"], "warn", "{p016}");
    assert!(p016["message"].as_str().unwrap().contains("exists already"), "{p016}");
}

#[test]
fn a_bad_config_must_fail_and_slow_calls_are_flagged() {
    let ws = Workspace::new();
    ws.write("bad.yaml", "exit: 0\n");
    ws.write("loud.yaml", "exit: 2\n");
    let run = check(&ws, "./fixture", &["--bad-config", "bad.yaml", "--bad-config", "loud.yaml"]);
    assert_eq!(run.code, 1, "{}", run.all());
    let doc = run.json();
    let p020: Vec<&Value> = doc["findings"].as_array().unwrap().iter().filter(|f| f["id"] == "P020").collect();
    assert_eq!(p020[0]["level"], "fail", "state exited 0 for a bad config: {p020:?}");
    assert_eq!(p020[1]["level"], "pass", "exit 2 with a message on stderr: {p020:?}");

    ws.write("slow.yaml", &format!("marker: {}/m\nsleep_ms: 300\n", ws.root()));
    let run = check(&ws, "./fixture", &["--config", "slow.yaml", "--slow", "100ms"]);
    assert_eq!(run.code, 0, "slow is a warning: {}", run.all());
    assert_eq!(finding(&run, "P030")["level"], "warn");
}

#[test]
fn a_bad_config_the_schema_refuses_is_deployster_s_to_refuse() {
    // The fixture's state exits 0 for `exit: 0`; here its schema refuses that config, so the type
    // is never asked about it (P020 passes and says why) — as `apply` refuses it before state.
    let ws = Workspace::new();
    let schema = r#"{"type": "object", "properties": {"exit": {"type": "integer", "minimum": 1}}}"#;
    ws.init_response("check-type", &format!(r#"{{"config_schema": {schema}, "state_action": {{"args": ["state"]}}}}"#));
    ws.write("bad.yaml", "exit: 0\n");
    ws.write("loud.yaml", "exit: 2\n");
    let run = check(&ws, "./fixture", &["--bad-config", "bad.yaml", "--bad-config", "loud.yaml"]);
    let doc = run.json();
    let p020: Vec<&Value> = doc["findings"].as_array().unwrap().iter().filter(|f| f["id"] == "P020").collect();
    assert_eq!(p020.len(), 2, "{p020:?}");
    assert_eq!((&p020[0]["level"], &p020[0]["case"]), (&"pass".into(), &"bad.yaml".into()), "{p020:?}");
    let message = p020[0]["message"].as_str().unwrap();
    assert!(message.contains("config_schema refuses it") && message.contains("minimum of 1"), "{message}");
    assert!(
        !doc["calls"].as_array().unwrap().iter().any(|c| c["phase"] == "state" && c["case"] == "bad.yaml"),
        "{doc}"
    );
    // A bad config the schema accepts still goes to the type, which must refuse it itself.
    assert_eq!(p020[1]["level"], "pass", "exit 2 with a message on stderr: {p020:?}");
    assert!(p020[1]["message"].as_str().unwrap().is_empty(), "{p020:?}");
    assert_eq!(run.code, 0, "{}", run.all());
}

#[test]
fn a_missing_hanging_or_crashing_type_and_a_bad_config_file_are_reported() {
    let ws = Workspace::new();
    let run = check(&ws, "./nope", &[]);
    assert_eq!(run.code, 1);
    assert!(finding(&run, "P001")["message"].as_str().unwrap().contains("not found"), "{}", run.all());

    for (name, script, needle) in [
        ("hangs", "#!/bin/sh\nsleep 60\n", "timed out after 1s"),
        ("crashes", "#!/bin/sh\nkill -SEGV $$\n", "killed by signal 11"),
    ] {
        let path = ws.write(name, script);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let run = check(&ws, &format!("./{name}"), &["--timeout", "1s"]);
        assert_eq!(run.code, 1, "{}", run.all());
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "--timeout is respected");
        let message = finding(&run, "P001")["message"].as_str().unwrap().to_string();
        assert!(message.contains(needle), "{name}: {message}");
    }

    ws.write("broken.yaml", "a: [unclosed\n");
    let run = ws.run(&["check-type", "./fixture", "--config", "broken.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("config broken.yaml: not YAML or JSON"), "{}", run.all());
}

/// `check-type TYPE` lists the keys a resource of the type may configure, from the
/// `config_schema` its init answers with: each with its type, whether it is required, and
/// what it is; in JSON too.
#[test]
fn check_type_lists_the_type_s_config_keys() {
    let ws = Workspace::new();
    let text = ws.run(&["check-type", "builtin/file"]);
    assert_eq!(text.code, 0, "{}", text.all());
    assert!(text.stdout.contains("config keys (from its config_schema):"), "{}", text.stdout);
    assert!(text.stdout.contains("\n  path (string, required): where it is"), "{}", text.stdout);
    assert!(text.stdout.contains("\n  mode (string (pattern)): octal permission bits"), "{}", text.stdout);
    let json = check(&ws, "builtin/kubernetes", &[]).json();
    let keys: Vec<&str> = json["config_keys"].as_array().unwrap().iter().filter_map(|k| k["path"].as_str()).collect();
    assert!(keys.contains(&"object") && keys.contains(&"ignore"), "{keys:?}");
    let object = json["config_keys"].as_array().unwrap().iter().find(|k| k["path"] == "object").unwrap();
    assert_eq!(object["type"], "object", "{object}");
    let file = check(&ws, "builtin/file", &[]).json();
    let path = file["config_keys"].as_array().unwrap().iter().find(|k| k["path"] == "path").cloned().unwrap();
    assert_eq!((&path["type"], &path["required"]), (&Value::from("string"), &Value::from(true)), "{path}");
}
