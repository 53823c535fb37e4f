//! The protocol as JSON Schema (`docs/protocol/*.schema.json`): generated from the Rust types,
//! kept current, and true of real messages — the requests deployster sends and the replies the
//! built-in types print validate against them.

use crate::support;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::Workspace;
use serde_json::{Value, json};

fn schema_path(stem: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/protocol/{stem}.schema.json"))
}

fn validator(stem: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(schema_path(stem)).unwrap_or_else(|e| panic!("{stem}: {e}"));
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap_or_else(|e| panic!("{stem}: {e}"))
}

fn assert_valid(stem: &str, message: &Value) {
    let errors: Vec<String> =
        validator(stem).iter_errors(message).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{stem}: {errors:#?}\n{message:#}");
}

#[test]
fn the_published_schemas_are_generated_from_the_types() {
    for (stem, schema) in deployster::engine::protocol::schemas() {
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        let path = schema_path(stem);
        if std::env::var_os("DEPLOYSTER_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{} is not current: DEPLOYSTER_BLESS=1 cargo test --test local protocol_schemas::",
            path.display()
        );
    }
    let names: Vec<String> = std::fs::read_dir(schema_path("x").parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), deployster::engine::protocol::schemas().len(), "no stale schema files: {names:?}");
}

/// Runs built-in type `name` with `args` on `request`; its reply.
fn builtin(name: &str, args: &[&str], request: &Value) -> Value {
    let mut child = Command::new(support::deployster())
        .args([&["__type", name][..], args].concat())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
}

#[test]
fn real_requests_and_replies_validate() {
    let ws = Workspace::new();
    // The fixture type, behind a script that keeps every request it is given, by phase.
    let tee = ws.write(
        "tee",
        "#!/bin/sh\ndir=\"$(dirname \"$0\")\"\ninput=\"$(cat)\"\nprintf '%s\\n' \"$input\" >> \"$dir/${1:-init}.jsonl\"\nprintf '%s' \"$input\" | exec \"$dir/fixture\" \"$@\"\n",
    );
    std::fs::set_permissions(&tee, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    ws.manifest("resources:\n  base: { type: ./tee }\n  user: { type: ./tee, dependencies: { b: base }, config: { from: \"{{ b.state.marker }}\" } }\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    for (file, stem) in
        [("init.jsonl", "init-request"), ("state.jsonl", "state-request"), ("act.jsonl", "action-request")]
    {
        let seen = ws.recorded(file);
        assert!(!seen.is_empty(), "no request in {file}");
        for request in &seen {
            assert_valid(stem, request);
        }
    }

    let request = json!({"name": "d", "type": "builtin/directory", "version": "0", "verbose": false,
                         "workspace": ws.root(), "config": {"path": "d"}, "dependencies": {}, "plugs": {}});
    for kind in ["directory", "file", "package"] {
        assert_valid("init-reply", &builtin(kind, &[], &request));
    }
    assert_valid("state-reply", &builtin("directory", &["state"], &request));
    std::fs::create_dir(ws.path("d")).unwrap();
    assert_valid("state-reply", &builtin("directory", &["state"], &request));
}

#[test]
fn replies_that_break_the_protocol_do_not_validate() {
    for (stem, bad) in [
        ("init-reply", json!({"label": "no state action"})),
        ("init-reply", json!({"state_action": {"args": "state"}})),
        ("state-reply", json!({"status": "FINE"})),
        ("state-reply", json!({"status": "MISSING", "actions": [{"description": "no name"}]})),
    ] {
        assert!(!validator(stem).is_valid(&bad), "{stem} accepted {bad}");
    }
}
