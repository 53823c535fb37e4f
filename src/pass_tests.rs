//! The recorded pass against the in-memory executor and log: what each front end relies on —
//! plan only, apply, decline, cancellation mid-action, recovery of an interrupted run, delete —
//! and what the deployment log says of each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::engine::events::ApproveAll;
use crate::engine::executor::fake::{FakeCall, FakeExecutor, FakeReply};
use crate::engine::manifest::{LoadedManifest, parse_document};
use crate::engine::protocol::{Action, Status};
use crate::engine::validate::validate;
use crate::history::{Entry, Event, MemoryLog};

const TWO: &str = "resources:\n  a: { type: builtin/file }\n  b: { type: builtin/file, dependencies: { up: a } }\n";

fn manifest(yaml: &str) -> Arc<ValidatedManifest> {
    let spec = parse_document(yaml, false).unwrap();
    Arc::new(validate(&LoadedManifest::from_spec("/ws/m.yaml", spec), Default::default()).unwrap())
}

/// Resources MISSING until `create` ran; `delete` makes them MISSING again. `action_delay`
/// slows every action down.
fn world(action_delay: Duration) -> Arc<FakeExecutor> {
    world_of(Arc::default(), action_delay)
}

/// [`world`], with the list of created resources shared: a test may change it behind the pass.
fn world_of(created: Arc<Mutex<Vec<String>>>, action_delay: Duration) -> Arc<FakeExecutor> {
    Arc::new(FakeExecutor::new(move |call: &FakeCall| {
        let mut created = created.lock().unwrap();
        match call.phase.as_str() {
            "init" => {
                FakeReply::json(json!({"state_action": {"args": ["state"]}, "delete_action": {"args": ["delete"]}}))
            }
            "state" if created.contains(&call.resource) => {
                FakeReply::json(json!({"status": "VALID", "state": {"id": call.resource}}))
            }
            "state" => {
                FakeReply::json(json!({"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]}))
            }
            "action:create" => {
                created.push(call.resource.clone());
                FakeReply { delay: action_delay, ..FakeReply::default() }
            }
            _ => {
                created.retain(|r| *r != call.resource);
                FakeReply::default()
            }
        }
    }))
}

fn pass<'a>(
    yaml: &str,
    fake: &Arc<FakeExecutor>,
    log: &Arc<MemoryLog>,
    mode: Mode,
    approver: &'a dyn Approver,
    cancel: CancellationToken,
) -> Pass<'a> {
    Pass {
        manifest: manifest(yaml),
        executor: fake.clone(),
        log: log.clone(),
        mode,
        options: RunOptions { parallelism: 2, ..RunOptions::default() },
        observers: Vec::new(),
        approver,
        cancel,
        cancelled_because: &|| "interrupted by SIGTERM".to_string(),
        recover: mode != Mode::Plan,
        expected: None,
        recheck: false,
        inventory: crate::pass::Inventory::Off,
    }
}

/// The manifest-level events of the log, oldest first.
fn runs(log: &MemoryLog) -> Vec<(String, Event)> {
    log.entries().into_iter().filter(|e| e.target == "manifest").map(|e| (e.id, e.event)).collect()
}

fn actions_run(fake: &FakeExecutor) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|c| c.phase.starts_with("action"))
        .map(|c| format!("{}/{}", c.resource, c.phase))
        .collect()
}

#[tokio::test]
async fn a_plan_runs_no_action_and_is_recorded_as_a_plan() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let passed = pass(TWO, &fake, &log, Mode::Plan, &ApproveAll, CancellationToken::new()).run().await.unwrap();
    let Ended::Planned(plan) = &passed.ended else { panic!("{:?}", passed.ended) };
    assert_eq!(plan.entries.iter().map(|e| e.standing.label()).collect::<Vec<_>>(), ["MISSING", "PENDING"]);
    assert!(actions_run(&fake).is_empty());
    assert_eq!(runs(&log).iter().map(|(_, e)| *e).collect::<Vec<_>>(), [Event::PlanStarted, Event::PlanFinished]);
    let pending = log.entries().into_iter().find(|e| e.event == Event::ResourcePending).expect("b is pending");
    assert_eq!(pending.detail["waiting_on"], json!(["a"]));
}

#[tokio::test]
async fn an_apply_records_each_intent_before_its_action_and_its_end() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let passed = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new()).run().await.unwrap();
    let Ended::Applied { report, .. } = &passed.ended else { panic!("{:?}", passed.ended) };
    assert!(report.succeeded() && passed.succeeded() && passed.interrupted.is_none());
    assert_eq!(actions_run(&fake), ["a/action:create", "b/action:create"]);
    let events: Vec<(String, Event)> = log.entries().into_iter().map(|e| (e.target, e.event)).collect();
    let intent = events.iter().position(|e| *e == ("resource/a/action/create".into(), Event::ActionStarted));
    let result =
        events.iter().position(|e| *e == ("resource/a/action/create".into(), Event::ActionFinishedSuccessfully));
    assert!(intent.unwrap() < result.unwrap(), "{events:?}");
    assert_eq!(runs(&log).last().unwrap().1, Event::RunFinishedSuccessfully);

    let again = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new()).run().await.unwrap();
    assert!(matches!(&again.ended, Ended::Applied { plan, .. } if !plan.has_changes()), "{:?}", again.ended);
}

/// Declines the plan; would fail the test if asked about a resource or an action.
struct Declines(&'static str);

#[async_trait]
impl Approver for Declines {
    async fn approve_plan(&self, _: &Plan) -> Decision {
        Decision::Decline(self.0.into())
    }
    async fn approve_resource(&self, _: &str, _: Status, _: &[Action]) -> bool {
        panic!("a declined plan asks about no resource")
    }
    async fn approve_action(&self, _: &str, _: &Action) -> bool {
        panic!("a declined plan asks about no action")
    }
}

#[tokio::test]
async fn a_declined_plan_changes_nothing_and_says_why_in_the_log() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let approver = Declines("declined by the user");
    let passed = pass(TWO, &fake, &log, Mode::Apply, &approver, CancellationToken::new()).run().await.unwrap();
    assert!(
        matches!(&passed.ended, Ended::Declined { why, .. } if why == "declined by the user"),
        "{:?}",
        passed.ended
    );
    assert!(actions_run(&fake).is_empty());
    let end = log.latest("manifest", &[Event::RunDeclined]).unwrap().expect("recorded as declined");
    assert_eq!(end.detail["message"], "declined by the user");
}

#[tokio::test]
async fn a_pass_cancelled_mid_action_stops_it_and_is_recorded_as_interrupted() {
    let (fake, log) = (world(Duration::from_secs(30)), Arc::new(MemoryLog::new()));
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.cancel();
    });
    let started = std::time::Instant::now();
    let passed = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, cancel).run().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "the 30 s action was stopped");
    assert_eq!(passed.interrupted.as_deref(), Some("interrupted by SIGTERM"));
    assert_eq!(actions_run(&fake), ["a/action:create"], "b never started");
    let end = log.latest("manifest", &[Event::RunInterrupted]).unwrap().expect("recorded as interrupted");
    assert_eq!(end.detail["message"], "interrupted by SIGTERM");
    assert!(crate::history::in_progress(log.as_ref(), None).unwrap().is_empty(), "the run is closed");
}

/// A fake that also says what it was asked to stop.
struct Stops {
    fake: Arc<FakeExecutor>,
    stopped: Mutex<Vec<String>>,
}

#[async_trait]
impl Executor for Stops {
    async fn invoke(
        &self,
        invocation: crate::engine::executor::Invocation,
    ) -> Result<crate::engine::executor::Outcome, ExecError> {
        self.fake.invoke(invocation).await
    }
    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        self.stopped.lock().unwrap().push(run_id.to_string());
        Ok(2)
    }
}

#[tokio::test]
async fn an_interrupted_run_is_stopped_then_closed_then_reported_before_anything_is_read() {
    let log = Arc::new(MemoryLog::new());
    let open = |target: &str, event| Entry {
        id: "crashed".into(),
        target: target.into(),
        revision: "OLD".into(),
        event,
        at: 1,
        detail: json!({}),
    };
    log.append(&[open("manifest", Event::RunStarted), open("resource/a/action/create", Event::ActionStarted)]).unwrap();
    let executor = Arc::new(Stops { fake: world(Duration::ZERO), stopped: Mutex::default() });
    let mut p = pass(TWO, &executor.fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    p.executor = executor.clone();
    let passed = p.run().await.unwrap();
    assert_eq!(*executor.stopped.lock().unwrap(), ["crashed"], "what the crashed run left was stopped");
    assert_eq!(passed.recovered.len(), 1);
    let text = passed.recovered[0].describe();
    assert!(text.contains("run crashed (revision OLD") && text.contains("resource/a/action/create"), "{text}");
    assert!(text.contains("2 of its programs were still running and were stopped"), "{text}");
    let closed = log.latest("manifest", &[Event::RunInterrupted]).unwrap().unwrap();
    assert_eq!(
        (closed.id.as_str(), closed.detail["interrupted_by"].as_str()),
        ("crashed", Some(passed.run_id.as_str()))
    );
    assert!(passed.succeeded(), "and the new run converged");
}

#[tokio::test]
async fn a_delete_pass_deletes_dependents_first_and_records_itself() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new()).run().await.unwrap();
    let passed = pass(TWO, &fake, &log, Mode::Delete, &ApproveAll, CancellationToken::new()).run().await.unwrap();
    let Ended::Deleted { report, .. } = &passed.ended else { panic!("{:?}", passed.ended) };
    assert!(report.succeeded(), "{report:?}");
    let deletes: Vec<String> = actions_run(&fake).into_iter().filter(|a| a.ends_with("delete")).collect();
    assert_eq!(deletes, ["b/action:delete", "a/action:delete"]);
    let intents =
        log.entries().into_iter().filter(|e| e.target.ends_with("/action/delete") && e.event == Event::ActionStarted);
    assert_eq!(intents.count(), 2, "each delete's intent is recorded before it runs");
    assert_eq!(runs(&log).last().unwrap().1, Event::RunFinishedSuccessfully);
}

#[tokio::test]
async fn a_saved_plan_is_applied_only_while_what_it_knew_holds() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let planned = pass(TWO, &fake, &log, Mode::Plan, &ApproveAll, CancellationToken::new()).run().await.unwrap();
    let Ended::Planned(plan) = &planned.ended else { panic!("{:?}", planned.ended) };
    let saved = SavedPlan::new(plan, &manifest(TWO), &[]);
    assert_eq!(saved.resources[1].status, "PENDING");

    let mut apply = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    apply.expected = Some(saved.clone());
    let passed = apply.run().await.unwrap();
    assert!(matches!(&passed.ended, Ended::Applied { .. }) && passed.succeeded(), "{:?}", passed.ended);

    // Applied since: `a` is VALID now, not MISSING as the plan knew it. Nothing runs.
    let before = fake.calls().len();
    let mut again = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    again.expected = Some(saved);
    let passed = again.run().await.unwrap();
    let Ended::PlanChanged { differences, .. } = &passed.ended else { panic!("{:?}", passed.ended) };
    assert_eq!(differences, &["resource `a`: MISSING when planned, VALID now"]);
    assert!(fake.calls()[before..].iter().all(|c| !c.phase.starts_with("action")));
    assert_eq!(runs(&log).last().unwrap().1, Event::RunFailed);
}

/// Approves the plan after changing the world behind the pass's back, as an operator might
/// while a prompt waits.
struct MeddlesThenApproves(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Approver for MeddlesThenApproves {
    async fn approve_plan(&self, _: &Plan) -> Decision {
        self.0.lock().unwrap().push("a".into());
        Decision::Apply
    }
    async fn approve_resource(&self, _: &str, _: Status, _: &[Action]) -> bool {
        true
    }
    async fn approve_action(&self, _: &str, _: &Action) -> bool {
        true
    }
}

#[tokio::test]
async fn with_recheck_a_state_changed_during_approval_stops_the_apply() {
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let (fake, log) = (world_of(created.clone(), Duration::ZERO), Arc::new(MemoryLog::new()));
    let approver = MeddlesThenApproves(created.clone());
    let mut apply = pass(TWO, &fake, &log, Mode::Apply, &approver, CancellationToken::new());
    apply.recheck = true;
    let passed = apply.run().await.unwrap();
    let Ended::PlanChanged { differences, .. } = &passed.ended else { panic!("{:?}", passed.ended) };
    assert_eq!(differences, &["resource `a`: MISSING when planned, VALID now"]);
    assert!(actions_run(&fake).is_empty(), "nothing ran: {:?}", actions_run(&fake));

    // Without recheck, the same approver's plan is applied as it was shown.
    created.lock().unwrap().clear();
    let passed = pass(TWO, &fake, &log, Mode::Apply, &approver, CancellationToken::new()).run().await.unwrap();
    assert!(matches!(&passed.ended, Ended::Applied { .. }), "{:?}", passed.ended);
}

/// A removal that cannot be planned (a removed resource depends on one neither declared nor
/// held) changes nothing: not even what the manifest declares anew.
#[tokio::test]
async fn a_removal_that_cannot_be_planned_changes_nothing() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let declaration = json!({"type": "builtin/file", "dependencies": {"up": "gone"}, "config": {}});
    log.append(&[Entry {
        id: "r0".into(),
        target: "resource/orphan".into(),
        revision: "0".into(),
        event: Event::ResourceInventoried,
        at: 1,
        detail: json!({"manifest": "m.yaml", "declaration": declaration}),
    }])
    .unwrap();
    let mut apply = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    apply.inventory = Inventory::Keep;
    let passed = apply.run().await.unwrap();
    let Ended::NotPrepared(e) = &passed.ended else { panic!("{:?}", passed.ended) };
    assert_eq!(e.reason(), "RemovalNotPlanned");
    assert!(e.to_string().contains("orphan") && e.to_string().contains("gone"), "{e}");
    assert!(actions_run(&fake).is_empty(), "nothing applied");
    assert_eq!(runs(&log).last().unwrap().1, Event::RunFailed);
}

/// Resources join the inventory with their first action's intent, and a destroy pass deletes
/// what it holds, dependents first, leaving it empty.
#[tokio::test]
async fn the_inventory_is_kept_by_applies_and_emptied_by_a_destroy() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let mut apply = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    apply.inventory = Inventory::Keep;
    assert!(apply.run().await.unwrap().succeeded());
    let held = crate::history::inventory::inventory(log.as_ref(), "m.yaml").unwrap();
    assert_eq!(held.keys().collect::<Vec<_>>(), ["a", "b"]);

    let mut destroy = pass(TWO, &fake, &log, Mode::Delete, &ApproveAll, CancellationToken::new());
    destroy.inventory = Inventory::Destroy;
    let passed = destroy.run().await.unwrap();
    let Ended::Deleted { report, .. } = &passed.ended else { panic!("{:?}", passed.ended) };
    assert!(report.succeeded(), "{:?}", report.problems());
    let deletes: Vec<String> = actions_run(&fake).into_iter().filter(|a| a.ends_with("action:delete")).collect();
    assert_eq!(deletes, ["b/action:delete", "a/action:delete"]);
    assert!(crate::history::inventory::inventory(log.as_ref(), "m.yaml").unwrap().is_empty());
    let end = log.entries().into_iter().rfind(|e| e.target == "manifest").unwrap();
    assert_eq!((end.event, end.detail["destroyed"].clone()), (Event::RunFinishedSuccessfully, json!(true)));
}

/// `Inventory::Orphan` (a Manifest's `removalPolicy: Orphan`): what leaves the manifest is
/// forgotten without a look — its type not even inited — and leaves the inventory.
#[tokio::test]
async fn an_orphaning_pass_forgets_what_left_without_running_it() {
    let (fake, log) = (world(Duration::ZERO), Arc::new(MemoryLog::new()));
    let mut apply = pass(TWO, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    apply.inventory = Inventory::Orphan;
    assert!(apply.run().await.unwrap().succeeded());
    let calls_before = fake.calls().len();

    let only_a = "resources:\n  a: { type: builtin/file }\n";
    let mut apply = pass(only_a, &fake, &log, Mode::Apply, &ApproveAll, CancellationToken::new());
    apply.inventory = Inventory::Orphan;
    let passed = apply.run().await.unwrap();
    assert!(passed.succeeded());
    let Ended::Applied { removed: Some(removed), plan, .. } = &passed.ended else { panic!("{:?}", passed.ended) };
    assert_eq!(removed.entries.len(), 1);
    assert_eq!((removed.entries[0].name.as_str(), removed.entries[0].removal.label()), ("b", "FORGOTTEN"));
    assert!(removed.entries[0].removal.message().unwrap().contains("removalPolicy is Orphan"));
    assert_eq!(plan.removals.len(), 1, "shown in the plan");
    let touched_b = fake.calls().iter().skip(calls_before).any(|c| c.resource == "b");
    assert!(!touched_b, "b was neither inited nor read: {:?}", fake.calls());
    let held = crate::history::inventory::inventory(log.as_ref(), "m.yaml").unwrap();
    assert_eq!(held.keys().collect::<Vec<_>>(), ["a"]);
    let forgotten = log.entries().into_iter().rfind(|e| e.target == "resource/b").unwrap();
    assert_eq!(forgotten.event, Event::ResourceForgotten);
}

/// A resource the plan takes for VALID without reading it (a controller's steady resource
/// between its checks) is held as one read VALID is: a Manifest upgraded to a version that
/// keeps the inventory holds it before its next check.
#[test]
fn what_a_plan_takes_for_valid_is_held() {
    use crate::engine::events::Ending;
    use crate::engine::plan::{ResourceEntry, Standing};
    let log = Arc::new(MemoryLog::new());
    let keeper = Keeper::new(log.clone(), &manifest(TWO), "r1", "1", Mode::Apply).unwrap();
    let entry = |name: &str, standing| ResourceEntry {
        name: name.into(),
        type_name: "builtin/file".into(),
        standing,
        elapsed: Duration::ZERO,
        config: None,
    };
    let plan = Plan {
        manifest: "m.yaml".into(),
        run_id: "r1".into(),
        entries: vec![entry("a", Standing::Valid { state: json!({}), applied: None }), entry("b", Standing::Declined)],
        removals: Vec::new(),
        held: 0,
        notes: Vec::new(),
        warnings: Vec::new(),
        replacements: Vec::new(),
        mask: Default::default(),
    };
    keeper.on_planned(&plan, &[], &[]);
    keeper.on_event(&RunEvent::Ended(Ending::Succeeded));
    let held = crate::history::inventory::inventory(log.as_ref(), "m.yaml").unwrap();
    assert_eq!(held.keys().collect::<Vec<_>>(), ["a"]);
}
