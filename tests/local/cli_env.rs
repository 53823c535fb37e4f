//! What a program finds in its environment: Deployster's own variables, the manifest's and the
//! resource's `env` — and nothing of the environment deployster itself runs in.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use crate::support::Workspace;

/// A type that records its environment per phase (`<resource>.<phase>.env`), MISSING until its
/// `create` action ran.
fn recording_type(ws: &Workspace) {
    let script = ws.write(
        "recorder",
        r#"#!/bin/sh
env > "$(dirname "$0")/$DEPLOYSTER_RESOURCE.$DEPLOYSTER_PHASE.env"
case "$1" in
  "") echo '{"state_action": {"args": ["state"]}}' ;;
  state) if [ -e "$(dirname "$0")/$DEPLOYSTER_RESOURCE.done" ]; then echo '{"status": "VALID", "state": {}}';
         else echo '{"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]}'; fi ;;
  create) touch "$(dirname "$0")/$DEPLOYSTER_RESOURCE.done" ;;
esac
"#,
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn recorded(ws: &Workspace, file: &str) -> BTreeMap<String, String> {
    ws.read(file).lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn programs_get_deployster_variables_and_env_entries_but_not_deployster_s_environment() {
    let ws = Workspace::new();
    recording_type(&ws);
    ws.manifest(
        "vars: { region: eu-west-1 }\nenv: { REGION: \"{{ region }}\", LEVEL: info }\nresources:\n  app: { type: ./recorder, env: { LEVEL: debug } }\n",
    );
    let run = ws.run_with_env(&["apply", "-f", "manifest.yaml", "--yes"], &[("LEAKY_TOKEN", "s3cr3t")]);
    assert_eq!(run.code, 0, "{}", run.all());
    for phase in ["init", "state", "action", "verify"] {
        let env = recorded(&ws, &format!("app.{phase}.env"));
        assert_eq!(env.get("DEPLOYSTER_MANIFEST").map(String::as_str), Some("manifest.yaml"), "{phase}: {env:?}");
        assert_eq!(env.get("DEPLOYSTER_RESOURCE").map(String::as_str), Some("app"));
        assert_eq!(env.get("DEPLOYSTER_PHASE").map(String::as_str), Some(phase));
        assert!(env.get("DEPLOYSTER_RUN_ID").is_some_and(|id| id.len() == 36), "{phase}: {env:?}");
        assert_eq!(env.get("DEPLOYSTER_ACTION").map(String::as_str), (phase == "action").then_some("create"));
        assert_eq!(env.get("REGION").map(String::as_str), Some("eu-west-1"), "manifest env, rendered");
        assert_eq!(env.get("LEVEL").map(String::as_str), Some("debug"), "the resource's env wins");
        assert!(env.contains_key("PATH") && env.contains_key("HOME"), "{env:?}");
        assert!(!env.contains_key("LEAKY_TOKEN"), "{phase}: deployster's environment leaked: {env:?}");
    }
}

#[test]
fn env_entries_deployster_owns_or_cannot_render_are_refused() {
    let ws = Workspace::new();
    recording_type(&ws);
    let cases = [
        ("env: { DEPLOYSTER_RUN_ID: x }\n", "env `DEPLOYSTER_RUN_ID`: `DEPLOYSTER_*` names are reserved"),
        ("env: { \"BAD-NAME\": x }\n", "env `BAD-NAME`: not an environment variable name"),
        ("env: { X: \"{{ resources.app.state }}\" }\n", "env values may use variables only"),
    ];
    for (env, expected) in cases {
        ws.manifest(&format!("{env}resources:\n  app: {{ type: ./recorder }}\n"));
        let run = ws.apply(&[]);
        assert_eq!(run.code, 2, "{env}: {}", run.all());
        assert!(run.stderr.contains("resource `app`") && run.stderr.contains(expected), "{env}: {}", run.all());
        assert!(!ws.exists("app.done"), "nothing ran");
    }
}
