//! Complete plans against the in-memory executor: a directory STALE by its mode, and a file in
//! it that a plan reads with the directory's state as found.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::engine::context::RunOptions;
use crate::engine::error::Cause;
use crate::engine::events::ApproveAll;
use crate::engine::executor::fake::{FakeCall, FakeExecutor, FakeReply};
use crate::engine::manifest::{LoadedManifest, parse_document};
use crate::engine::plan::Standing;
use crate::engine::protocol::StateResponse;
use crate::engine::run::{Engine, Prepared};
use crate::engine::validate::validate;

/// What `dir`'s type plans when it is MISSING.
#[derive(Clone, Copy, PartialEq)]
enum Plans {
    Nothing,
    /// `{path, mode}` as configured, and an `id` not known until it exists.
    AsConfigured,
    /// A path it does not create.
    Wrongly,
}

/// `dir`: VALID when its mode is the config's, else STALE (`chmod`), reporting `{path, mode}`;
/// MISSING without one; its `chmod` moves it to `/elsewhere` when `moves`. `file`: VALID when
/// the content at its path is the config's, else STALE or MISSING (`write`), and a failed read
/// while `live` holds `unreadable`. `live` holds `dir` and each file.
fn world(live: &Arc<Mutex<HashMap<String, Value>>>, moves: bool) -> Arc<FakeExecutor> {
    planning(live, moves, Plans::Nothing)
}

fn planning(live: &Arc<Mutex<HashMap<String, Value>>>, moves: bool, plans: Plans) -> Arc<FakeExecutor> {
    let live = live.clone();
    Arc::new(FakeExecutor::new(move |call: &FakeCall| {
        let config = &call.request["config"];
        let mut live = live.lock().unwrap();
        match (call.resource.as_str(), call.phase.as_str()) {
            (_, "init") => FakeReply::json(json!({"state_action": {"args": ["state"]}})),
            ("dir", "state") => {
                let Some(found) = live.get("dir").cloned() else {
                    let mut reply = json!({"status": "MISSING", "actions": [{"name": "mkdir", "args": ["act"]}]});
                    let unknown = json!({"$unknown": true});
                    match plans {
                        Plans::Nothing => {}
                        Plans::AsConfigured => {
                            reply["planned_state"] =
                                json!({"path": config["path"], "mode": config["mode"], "id": unknown})
                        }
                        Plans::Wrongly => {
                            reply["planned_state"] = json!({"path": "/planned", "mode": config["mode"], "id": unknown})
                        }
                    }
                    return FakeReply::json(reply);
                };
                match found["mode"] == config["mode"] {
                    true => FakeReply::json(json!({"status": "VALID", "state": found})),
                    false => FakeReply::json(
                        json!({"status": "STALE", "staleState": found, "actions": [{"name": "chmod", "args": ["act"]}]}),
                    ),
                }
            }
            ("dir", _) => {
                let path = if moves { json!("/elsewhere") } else { config["path"].clone() };
                live.insert("dir".into(), json!({"path": path, "mode": config["mode"], "id": 7}));
                FakeReply::default()
            }
            (_, "state") if live.contains_key("unreadable") => FakeReply::fail(1, "permission denied"),
            (_, "state") => {
                let path = config["path"].as_str().unwrap();
                let write = json!([{"name": "write", "args": ["act"]}]);
                match live.get(path) {
                    Some(content) if *content == config["content"] => {
                        FakeReply::json(json!({"status": "VALID", "state": {"path": path}}))
                    }
                    Some(content) => FakeReply::json(
                        json!({"status": "STALE", "staleState": {"path": path, "content": content}, "actions": write}),
                    ),
                    None => FakeReply::json(json!({"status": "MISSING", "actions": write})),
                }
            }
            _ => {
                live.insert(config["path"].as_str().unwrap().into(), config["content"].clone());
                FakeReply::default()
            }
        }
    }))
}

const MANIFEST: &str = r#"
resources:
  dir: { type: builtin/directory, config: { path: /d, mode: "0755" } }
  file:
    type: builtin/file
    dependencies: { dir: dir }
    config: { path: "{{ dir.state.path }}/app.json", content: "{{ dir.state.mode }} app" }
"#;

fn live(dir_mode: &str, file: Option<&str>) -> Arc<Mutex<HashMap<String, Value>>> {
    let mut live = HashMap::from([("dir".to_string(), json!({"path": "/d", "mode": dir_mode}))]);
    if let Some(content) = file {
        live.insert("/d/app.json".into(), json!(content));
    }
    Arc::new(Mutex::new(live))
}

async fn prepared(yaml: &str, fake: &Arc<FakeExecutor>) -> Prepared {
    let spec = parse_document(yaml, false).unwrap();
    let manifest = Arc::new(validate(&LoadedManifest::from_spec("/ws/m.yaml", spec), Default::default()).unwrap());
    Engine::new(manifest, fake.clone(), RunOptions::default()).prepare().await.unwrap()
}

fn actions_run(fake: &FakeExecutor) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|c| c.phase.starts_with("action"))
        .map(|c| format!("{} {}", c.resource, c.phase))
        .collect()
}

#[tokio::test]
async fn a_resource_waiting_on_a_stale_dependency_is_read_with_its_state_as_found() {
    let live = live("0700", Some("tampered"));
    let fake = world(&live, false);
    let prepared = prepared(MANIFEST, &fake).await;
    let plan = prepared.plan().await;
    assert!(actions_run(&fake).is_empty(), "a plan runs no action");
    let Standing::Pending { waiting_on, unknown_inputs, found: Some(found) } = &plan.entries[1].standing else {
        panic!("{:?}", plan.entries[1].standing)
    };
    assert_eq!(waiting_on[0].resource, "dir");
    assert_eq!(waiting_on[0].status, "STALE");
    let StateResponse::NeedsActions { actions, stale_state, .. } = found.as_ref() else { panic!("{found:?}") };
    assert_eq!(actions[0].name, "write", "the file's drift is shown");
    assert_eq!(stale_state.as_ref().unwrap()["content"], "tampered");
    // Its path reads the directory's path, which is the directory's config: known. Its content
    // reads the mode, which the directory's chmod changes.
    let unknown: Vec<&str> = unknown_inputs.iter().map(|u| u.path.as_str()).collect();
    assert_eq!(unknown, ["config.content"]);
    let file_read = fake.calls().into_iter().find(|c| c.resource == "file" && c.phase == "state").unwrap();
    assert_eq!(file_read.request["config"]["path"], "/d/app.json");
    assert_eq!(file_read.request["dependencies"]["dir"]["state"]["mode"], "0700");

    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(actions_run(&fake), ["dir action:chmod", "file action:write"]);
    assert_eq!(live.lock().unwrap()["/d/app.json"], "0755 app");
}

#[tokio::test]
async fn apply_runs_no_action_the_plan_did_not_show() {
    // The file reads only the directory's path, equal to its config: the plan takes it as kept,
    // and finds the file VALID. The directory's chmod moves it all the same.
    let yaml = MANIFEST.replace("{{ dir.state.mode }} app", "app");
    let live = live("0700", Some("app"));
    let fake = world(&live, true);
    let prepared = prepared(&yaml, &fake).await;
    let plan = prepared.plan().await;
    let Standing::Pending { unknown_inputs, found: Some(found), .. } = &plan.entries[1].standing else { panic!() };
    assert!(unknown_inputs.is_empty(), "{unknown_inputs:?}");
    assert!(matches!(found.as_ref(), StateResponse::Valid { .. }), "{found:?}");

    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    assert_eq!(actions_run(&fake), ["dir action:chmod"], "nothing is written at the new path");
    assert!(!live.lock().unwrap().contains_key("/elsewhere/app.json"));
    let Standing::Failed(error) = &report.entries()[1].standing else { panic!("{:?}", report.entries()[1]) };
    assert_eq!(error.reason(), "NotInPlan");
    assert!(matches!(error.cause, Cause::NotInPlan { .. }));
    let message = error.to_string();
    assert!(message.contains("read before dir's actions, it was VALID, with no action"), "{message}");
    assert!(message.contains("it needs write"), "{message}");
    assert!(message.contains(r#"config.path: "/d/app.json" → "/elsewhere/app.json""#), "{message}");
    assert!(message.contains("make a new plan"), "{message}");
}

#[tokio::test]
async fn apply_runs_what_the_plan_showed_as_possibly_changing() {
    // The content reads the mode, which the plan marks unknown: a write at apply was shown.
    let live = live("0700", Some("0700 app"));
    let fake = world(&live, false);
    let prepared = prepared(MANIFEST, &fake).await;
    let plan = prepared.plan().await;
    let Standing::Pending { unknown_inputs, found: Some(found), .. } = &plan.entries[1].standing else { panic!() };
    assert!(matches!(found.as_ref(), StateResponse::Valid { .. }), "{found:?}");
    assert_eq!(unknown_inputs.len(), 1);
    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(actions_run(&fake), ["dir action:chmod", "file action:write"]);
}

#[tokio::test]
async fn what_waits_on_a_missing_dependency_is_not_read() {
    let live = Arc::new(Mutex::new(HashMap::new()));
    let fake = world(&live, false);
    let plan = prepared(MANIFEST, &fake).await.plan().await;
    let Standing::Pending { unknown_inputs, found: None, .. } = &plan.entries[1].standing else { panic!() };
    let unknown: Vec<&str> = unknown_inputs.iter().map(|u| u.path.as_str()).collect();
    assert_eq!(unknown, ["config.path", "config.content"]);
    assert!(!fake.calls().iter().any(|c| c.resource == "file" && c.phase == "state"));
}

#[tokio::test]
async fn a_read_that_fails_before_the_dependency_s_actions_is_a_note_not_a_failure() {
    let live = live("0700", None);
    live.lock().unwrap().insert("unreadable".into(), json!(true));
    let fake = world(&live, false);
    let plan = prepared(MANIFEST, &fake).await.plan().await;
    assert!(plan.is_applicable(), "{:?}", plan.entries);
    let Standing::Pending { unknown_inputs, found: None, .. } = &plan.entries[1].standing else { panic!() };
    assert_eq!(unknown_inputs.len(), 2, "not read: whatever it reads of dir is unknown");
    let note = plan.notes.iter().find(|n| n.contains("file could not be read before its dependencies' actions"));
    assert!(note.is_some_and(|n| n.contains("permission denied")), "{:?}", plan.notes);
}

#[tokio::test]
async fn a_dependent_of_a_missing_resource_is_planned_over_its_planned_state() {
    let live = Arc::new(Mutex::new(HashMap::new()));
    let fake = planning(&live, false, Plans::AsConfigured);
    let prepared = prepared(MANIFEST, &fake).await;
    let plan = prepared.plan().await;
    assert!(actions_run(&fake).is_empty(), "a plan runs no action");
    let file = &plan.entries[1].standing;
    let Some(StateResponse::NeedsActions { status, actions, .. }) = file.foreseen() else { panic!("{file:?}") };
    assert_eq!(
        (*status, actions[0].name.as_str(), file.label()),
        (crate::engine::protocol::Status::Missing, "write", "MISSING")
    );
    let read = fake.calls().into_iter().find(|c| c.resource == "file" && c.phase == "state").unwrap();
    assert_eq!(read.request["config"], json!({"path": "/d/app.json", "content": "0755 app"}));
    let c = plan.counts();
    assert_eq!((c.to_apply, c.pending), (2, 0), "the summary counts what applying runs");

    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(actions_run(&fake), ["dir action:mkdir", "file action:write"]);
    assert_eq!(live.lock().unwrap()["/d/app.json"], "0755 app");
}

#[tokio::test]
async fn a_dependent_reading_a_value_not_known_until_apply_waits_and_says_which() {
    let yaml = MANIFEST.replace("{{ dir.state.mode }} app", "id {{ dir.state.id }}");
    let live = Arc::new(Mutex::new(HashMap::new()));
    let fake = planning(&live, false, Plans::AsConfigured);
    let prepared = prepared(&yaml, &fake).await;
    let plan = prepared.plan().await;
    let file = &plan.entries[1].standing;
    let Standing::Pending { unknown_inputs, found: None, waiting_on } = file else { panic!("{file:?}") };
    assert_eq!(file.label(), "PENDING");
    assert_eq!(waiting_on[0].status, "MISSING");
    // Its path reads the planned path, known; only the content waits.
    let unknown: Vec<(&str, &str)> = unknown_inputs.iter().map(|u| (u.path.as_str(), u.expression.as_str())).collect();
    assert_eq!(unknown, [("config.content", "id {{ dir.state.id }}")]);
    assert!(!fake.calls().iter().any(|c| c.resource == "file" && c.phase == "state"), "not read with an unknown");
    assert_eq!((plan.counts().to_apply, plan.counts().pending), (1, 1));
    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(live.lock().unwrap()["/d/app.json"], "id 7");
}

#[tokio::test]
async fn a_state_unlike_the_planned_one_fails_and_its_dependents_are_not_run() {
    let live = Arc::new(Mutex::new(HashMap::new()));
    let fake = planning(&live, false, Plans::Wrongly);
    let prepared = prepared(MANIFEST, &fake).await;
    let plan = prepared.plan().await;
    let read = fake.calls().into_iter().find(|c| c.resource == "file" && c.phase == "state").unwrap();
    assert_eq!(read.request["config"]["path"], "/planned/app.json", "planned over what the type said");
    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    let Standing::Failed(error) = &report.entries()[0].standing else { panic!("{:?}", report.entries()[0]) };
    assert_eq!(error.reason(), "NotAsPlanned");
    let message = error.to_string();
    assert!(message.contains(r#"state.path: "/planned" → "/d""#), "{message}");
    assert!(!message.contains("state.id"), "a value planned unknown may become anything: {message}");
    assert!(matches!(report.entries()[1].standing, Standing::Blocked { .. }), "{:?}", report.entries()[1]);
    assert_eq!(actions_run(&fake), ["dir action:mkdir"], "nothing written where the plan said");
}

#[tokio::test]
async fn a_typo_in_a_dependent_s_config_fails_before_anything_runs() {
    let yaml = MANIFEST.replace("content: ", "contents: ");
    let live: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let fake = Arc::new(FakeExecutor::new(move |call: &FakeCall| match call.phase.as_str() {
        "init" => FakeReply::json(json!({
            "state_action": {"args": ["state"]},
            "config_schema": {"type": "object", "additionalProperties": false, "required": ["path"],
                              "properties": {"path": {"type": "string", "pattern": "^/"}, "content": {"type": "string"}, "mode": {"type": "string"}}}
        })),
        _ => FakeReply::json(json!({"status": "MISSING", "actions": [{"name": "x", "args": ["x"]}]})),
    }));
    let spec = parse_document(&yaml, false).unwrap();
    let manifest = Arc::new(validate(&LoadedManifest::from_spec("/ws/m.yaml", spec), Default::default()).unwrap());
    let Err(error) = Engine::new(manifest, fake.clone(), RunOptions::default()).prepare().await else {
        panic!("prepared")
    };
    let message = error.to_string();
    assert!(message.contains("resource `file`"), "{message}");
    assert!(message.contains("(`contents`: did you mean `content`?)"), "{message}");
    assert!(!message.contains("config.path"), "the path is not known yet, so matches its pattern: {message}");
    assert!(fake.calls().iter().all(|c| c.phase == "init"), "nothing but init ran");
    assert!(live.lock().unwrap().is_empty());
}
