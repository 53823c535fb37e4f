//! The coordinator against the in-memory executor: scheduling, blocking, approval and the
//! requests resource programs receive — no processes involved.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::json;

use async_trait::async_trait;

use super::*;
use crate::engine::delete::delete;
use crate::engine::events::{ApproveAll, Approver, RunEvent};
use crate::engine::executor::Stream;
use crate::engine::executor::fake::{FakeCall, FakeExecutor, FakeReply};
use crate::engine::manifest::{LoadedManifest, parse_document};
use crate::engine::plan::Ran;
use crate::engine::protocol::{Action, Status};
use crate::engine::validate::validate;

fn manifest(yaml: &str) -> Arc<ValidatedManifest> {
    let spec = parse_document(yaml, false).unwrap();
    Arc::new(validate(&LoadedManifest::from_spec("/ws/m.yaml", spec), Default::default()).unwrap())
}

/// A world of resources that are MISSING until their `create` action ran; `fail` names
/// resources whose action exits 1.
fn world(fail: &'static [&'static str]) -> (Arc<FakeExecutor>, Arc<Mutex<BTreeSet<String>>>) {
    let created: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let seen = created.clone();
    let fake = FakeExecutor::new(move |call: &FakeCall| match call.phase.as_str() {
        "init" => FakeReply::json(json!({"state_action": {"args": ["state"]}})),
        "state" if seen.lock().unwrap().contains(&call.resource) => {
            FakeReply::json(json!({"status": "VALID", "state": {"id": format!("{}-id", call.resource)}}))
        }
        "state" => FakeReply::json(json!({"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]})),
        _ if fail.contains(&call.resource.as_str()) => FakeReply::fail(1, "boom"),
        _ => {
            seen.lock().unwrap().insert(call.resource.clone());
            FakeReply::default()
        }
    });
    (Arc::new(fake), created)
}

const CHAIN: &str = r#"
resources:
  a: { type: builtin/file }
  b: { type: builtin/file, dependencies: { up: a }, config: { from: "{{ up.state.id }}" } }
  c: { type: builtin/file, config: { from: "{{ resources.b.state.id }}" } }
  lone: { type: builtin/file }
"#;

async fn prepared(yaml: &str, fake: &Arc<FakeExecutor>) -> Prepared {
    let options = RunOptions { parallelism: 4, ..RunOptions::default() };
    Engine::new(manifest(yaml), fake.clone(), options).prepare().await.unwrap()
}

fn phases(fake: &FakeExecutor, resource: &str) -> Vec<String> {
    fake.calls().into_iter().filter(|c| c.resource == resource).map(|c| c.phase).collect()
}

#[tokio::test]
async fn plan_reads_what_it_can_and_runs_no_action() {
    let (fake, _) = world(&[]);
    let plan = prepared(CHAIN, &fake).await.plan().await;
    let labels: Vec<&str> = plan.entries.iter().map(|e| e.standing.label()).collect();
    assert_eq!(labels, ["MISSING", "PENDING", "PENDING", "MISSING"]);
    assert!(fake.calls().iter().all(|c| !c.phase.starts_with("action")));
    assert_eq!(phases(&fake, "b"), ["init"], "b waits on a, so its state is not read");
    let Standing::Pending { waiting_on, unknown_inputs, .. } = &plan.entries[2].standing else { panic!() };
    assert_eq!(waiting_on[0].resource, "b");
    assert_eq!(waiting_on[0].status, "PENDING");
    assert_eq!(unknown_inputs[0].path, "config.from");
}

#[tokio::test]
async fn apply_renders_each_resource_with_its_dependencies_fresh_state() {
    let (fake, _) = world(&[]);
    let prepared = prepared(CHAIN, &fake).await;
    let plan = prepared.plan().await;
    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert_eq!(report.counts().applied, 4);
    assert_eq!(phases(&fake, "b"), ["init", "state", "action:create", "state"]);
    let b_state = fake.calls().into_iter().find(|c| c.resource == "b" && c.phase == "state").unwrap();
    assert_eq!(b_state.request["config"], json!({"from": "a-id"}));
    assert_eq!(b_state.request["dependencies"]["up"]["state"], json!({"id": "a-id"}));
    let c_state = fake.calls().into_iter().find(|c| c.resource == "c" && c.phase == "state").unwrap();
    assert_eq!(c_state.request["config"], json!({"from": "b-id"}));
    assert_eq!(c_state.request["dependencies"], json!({}), "implicit dependencies order, but are not aliases");
    let Standing::Valid { state, applied: Some(actions) } = &report.entries()[2].standing else { panic!() };
    assert_eq!(state, &json!({"id": "c-id"}));
    assert_eq!(actions, &[Ran { action: "create".into(), results: vec![] }]);
}

#[tokio::test]
async fn a_failure_blocks_everything_downstream_with_the_root_cause() {
    let (fake, _) = world(&["a"]);
    let prepared = prepared(CHAIN, &fake).await;
    let plan = prepared.plan().await;
    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    let outcomes: Vec<&Standing> = report.entries().iter().map(|e| &e.standing).collect();
    assert!(matches!(outcomes[0], Standing::Failed(e) if e.reason() == "ActionFailed"));
    assert_eq!(outcomes[1], &Standing::Blocked { by: "a".into() });
    assert_eq!(outcomes[2], &Standing::Blocked { by: "a".into() }, "the root, not the next waiting one");
    assert!(matches!(outcomes[3], Standing::Valid { applied: Some(_), .. }), "independent branches carry on");
    assert_eq!(phases(&fake, "c"), ["init"]);
}

struct Decline(&'static str);

#[async_trait]
impl Approver for Decline {
    async fn approve_resource(&self, resource: &str, _: Status, _: &[Action]) -> bool {
        resource != self.0
    }
    async fn approve_action(&self, _: &str, _: &Action) -> bool {
        true
    }
}

#[tokio::test]
async fn declining_a_resource_runs_none_of_its_actions_and_blocks_its_dependents() {
    let (fake, _) = world(&[]);
    let prepared = prepared(CHAIN, &fake).await;
    let plan = prepared.plan().await;
    let report = prepared.apply(&plan, &Decline("a")).await.unwrap();
    assert_eq!(report.entries()[0].standing, Standing::Declined);
    assert_eq!(report.entries()[1].standing, Standing::Blocked { by: "a".into() });
    assert_eq!(phases(&fake, "a"), ["init", "state"]);
    assert!(!report.succeeded());
}

#[tokio::test]
async fn apply_refuses_a_failed_plan_or_one_made_for_another_manifest() {
    let fake = Arc::new(FakeExecutor::new(|call: &FakeCall| match call.phase.as_str() {
        "init" => FakeReply::json(json!({"state_action": {"args": ["state"]}})),
        _ => FakeReply { stdout: "garbage".into(), ..FakeReply::default() },
    }));
    let broken = prepared("resources:\n  x: { type: builtin/file }\n", &fake).await;
    let plan = broken.plan().await;
    let err = broken.apply(&plan, &ApproveAll).await.unwrap_err();
    assert!(err.to_string().contains("1 failed and 0 blocked"), "{err}");

    let (fake, _) = world(&[]);
    let other = prepared("resources:\n  y: { type: builtin/file }\n", &fake).await;
    let err = other.apply(&plan, &ApproveAll).await.unwrap_err();
    assert!(err.to_string().contains("different manifest"), "{err}");
    assert!(fake.calls().iter().all(|c| !c.phase.starts_with("action")));
}

#[derive(Default)]
struct Recorder(Mutex<Vec<RunEvent>>);

impl Observer for Recorder {
    fn on_event(&self, event: &RunEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

#[tokio::test]
async fn observers_see_actions_output_and_every_settlement() {
    let fake = Arc::new(FakeExecutor::new(|call: &FakeCall| match call.phase.as_str() {
        "init" => FakeReply::json(json!({"state_action": {"args": ["state"]}})),
        "state" => FakeReply::json(
            json!({"status": "STALE", "staleState": {"v": 1}, "actions": [{"name": "fix", "args": ["fix"]}]}),
        ),
        _ => FakeReply { stdout: "fixing\n".into(), exit: 0, ..FakeReply::default() },
    }));
    let recorder = Arc::new(Recorder::default());
    let options = RunOptions { parallelism: 1, ..RunOptions::default() };
    let prepared = Engine::new(manifest("resources:\n  x: { type: builtin/file }\n"), fake.clone(), options)
        .with_observer(recorder.clone())
        .prepare()
        .await
        .unwrap();
    let plan = prepared.plan().await;
    let report = prepared.apply(&plan, &ApproveAll).await.unwrap();
    let Standing::Failed(error) = &report.entries()[0].standing else { panic!("{report:?}") };
    assert_eq!(error.to_string(), "still STALE after applying its actions");
    let action = fake.calls().into_iter().find(|c| c.phase == "action:fix").unwrap();
    assert_eq!(action.request["staleState"], json!({"v": 1}));
    let events = recorder.0.lock().unwrap().clone();
    let output = RunEvent::Output {
        resource: "x".into(),
        phase: Phase::Action("fix".into()),
        stream: Stream::Stdout,
        line: "fixing".into(),
    };
    assert!(events.contains(&output), "{events:#?}");
    let settled: Vec<&str> = events
        .iter()
        .filter_map(|e| if let RunEvent::Settled { label, .. } = e { Some(*label) } else { None })
        .collect();
    assert_eq!(settled, ["STALE", "FAILED"]);
    assert!(events.iter().any(|e| matches!(e, RunEvent::StateFound { verify: true, status: Status::Stale, .. })));
}

/// Resources that exist until their delete action ran; `fail` names ones whose delete fails.
fn deletable(fail: &'static [&'static str]) -> Arc<FakeExecutor> {
    let deleted: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    Arc::new(FakeExecutor::new(move |call: &FakeCall| match call.phase.as_str() {
        "init" => FakeReply::json(json!({"state_action": {"args": ["state"]}, "delete_action": {"args": ["delete"]}})),
        "state" if deleted.lock().unwrap().contains(&call.resource) => {
            FakeReply::json(json!({"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]}))
        }
        "state" => FakeReply::json(json!({"status": "VALID", "state": {"id": format!("{}-id", call.resource)}})),
        _ if fail.contains(&call.resource.as_str()) => FakeReply::fail(1, "cannot delete"),
        _ => {
            deleted.lock().unwrap().insert(call.resource.clone());
            FakeReply::default()
        }
    }))
}

#[tokio::test]
async fn delete_runs_in_reverse_dependency_order() {
    use crate::engine::delete::Removal;
    let fake = deletable(&[]);
    let prepared = prepared(CHAIN, &fake).await;
    let plan = prepared.plan().await;
    let report = delete(&prepared, &plan).await.unwrap();
    assert!(report.succeeded(), "{report:?}");
    assert!(report.entries.iter().all(|e| e.removal == Removal::Deleted), "{report:?}");
    let deletes: Vec<String> =
        fake.calls().into_iter().filter(|c| c.phase == "action:delete").map(|c| c.resource).collect();
    let pos = |r: &str| deletes.iter().position(|d| d == r).unwrap();
    assert!(pos("c") < pos("b") && pos("b") < pos("a"), "dependents first: {deletes:?}");
    let b_delete = fake.calls().into_iter().find(|c| c.resource == "b" && c.phase == "action:delete").unwrap();
    assert_eq!(b_delete.request["staleState"], json!({"id": "b-id"}), "the delete sees the state as found");
}

#[tokio::test]
async fn a_failed_delete_keeps_what_it_depends_on() {
    use crate::engine::delete::Removal;
    let fake = deletable(&["c"]);
    let prepared = prepared(CHAIN, &fake).await;
    let plan = prepared.plan().await;
    let report = delete(&prepared, &plan).await.unwrap();
    let removal = |name: &str| report.entries.iter().find(|e| e.name == name).unwrap().removal.clone();
    assert!(matches!(removal("c"), Removal::Failed(_)));
    assert_eq!(removal("b"), Removal::Kept { reason: "c depends on it and was not deleted".into() });
    assert_eq!(removal("a"), Removal::Kept { reason: "c depends on it and was not deleted".into() }, "transitively");
    assert_eq!(removal("lone"), Removal::Deleted);
    assert!(!report.succeeded());
    assert_eq!(report.problems().len(), 1);
}
