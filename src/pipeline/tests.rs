//! The seed's examples and the issue's cases, driven with a stand-in for applying manifests and
//! an injected clock, on an in-memory log.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Map;

use super::PipelineError;
use super::drive::{Driven, Driver, Job, StepRunner, read};
use super::progress::{Progress, StepDecision};
use super::query::status;
use super::spec::{Files, Pipeline, PipelineSpec, compile};
use crate::history::{Event, History, MemoryLog};

/// Applies nothing: records each job, and fails the steps it is told to.
#[derive(Default)]
struct Runner {
    ran: Mutex<Vec<String>>,
    failing: Mutex<HashSet<String>>,
    /// Cancelled while this step runs (a signal), which then ends as stopped.
    stopping: Mutex<Option<(String, tokio_util::sync::CancellationToken)>>,
}

#[async_trait]
impl StepRunner for Runner {
    async fn run(&self, job: Job) -> Result<(), super::StepError> {
        self.ran.lock().unwrap().push(format!("{} {}", job.revision, job.step));
        if let Some((step, cancel)) = self.stopping.lock().unwrap().take_if(|(step, _)| *step == job.step) {
            cancel.cancel();
            return Err(super::StepError::Failed(format!("{step} stopped")));
        }
        if self.failing.lock().unwrap().contains(&job.step) {
            return Err(super::StepError::Failed("the smoke test failed".into()));
        }
        Ok(())
    }
}

impl Runner {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.ran.lock().unwrap())
    }
}

/// A pipeline, its log, a runner and a clock.
struct Fixture {
    dir: tempfile::TempDir,
    pipeline: Pipeline,
    log: Arc<MemoryLog>,
    runner: Arc<Runner>,
    clock: Arc<AtomicI64>,
    cancel: tokio_util::sync::CancellationToken,
}

fn pipeline_in(dir: &Path, yaml: &str) -> Result<Pipeline, String> {
    let spec: PipelineSpec = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
    compile("p", &spec, &Files::new(dir)).map_err(|e| e.to_string())
}

impl Fixture {
    fn new(yaml: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        for file in ["app.yaml", "smoke.yaml"] {
            std::fs::write(dir.path().join(file), "resources: {}\n").unwrap();
        }
        let pipeline = pipeline_in(dir.path(), yaml).unwrap();
        Fixture {
            dir,
            pipeline,
            log: Arc::new(MemoryLog::new()),
            runner: Arc::default(),
            clock: Arc::new(AtomicI64::new(1_000_000)),
            cancel: Default::default(),
        }
    }

    /// The pipeline changed: the same log and runner.
    fn change(&mut self, yaml: &str) {
        self.pipeline = pipeline_in(self.dir.path(), yaml).unwrap();
    }

    fn with_driver<T>(&self, f: impl FnOnce(&Driver) -> T) -> T {
        let clock = self.clock.clone();
        let now = move || clock.load(Ordering::SeqCst);
        let driver = Driver {
            pipeline: &self.pipeline,
            log: self.log.clone(),
            runner: Some(self.runner.clone()),
            now: &now,
            state_dir: self.dir.path().join(".deployster"),
            say: &|_| {},
            cancel: self.cancel.clone(),
        };
        f(&driver)
    }

    fn start(&self, revision: &str) {
        let mut vars = Map::new();
        vars.insert("version".into(), revision.into());
        assert!(self.with_driver(|d| d.register(revision, &vars)).unwrap());
    }

    fn drive(&self) -> Driven {
        self.with_driver(|driver| futures::executor::block_on(driver.drive()).unwrap())
    }

    fn progress(&self) -> Progress {
        read(&self.pipeline, self.log.as_ref()).unwrap()
    }

    fn node(&self, node: &str) -> super::query::NodeStatus {
        let how = |_: &str, _: &str| String::new();
        let status = status(&self.pipeline, &self.progress(), self.clock.load(Ordering::SeqCst), &how);
        status.nodes.into_iter().find(|n| n.node == node).unwrap_or_else(|| panic!("no node {node}"))
    }

    fn events_of(&self, target: &str) -> Vec<(String, Event)> {
        let mut entries = self.log.recent(target, usize::MAX).unwrap();
        entries.reverse();
        entries.into_iter().filter(|e| e.target == target).map(|e| (e.revision, e.event)).collect()
    }

    fn advance(&self, minutes: i64) {
        self.clock.fetch_add(minutes * 60_000, Ordering::SeqCst);
    }
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The seed's simple example: `[build] → [ant-gateway/beta] → [ant-gateway/prod]`, a host each.
const SIMPLE: &str = r#"
revision: "{{ version }}"
stages:
  - {name: build, targets: [{name: builder, manifest: app.yaml}], steps: [deploy]}
  - {name: beta, targets: [{name: antworker002, manifest: app.yaml}], steps: [deploy, test], tests: {test: {manifest: smoke.yaml}}}
  - {name: prod, targets: [{name: antworker001, manifest: app.yaml}], steps: [deploy, test], tests: {test: {manifest: smoke.yaml}}}
"#;

#[test]
fn the_seed_s_simple_pipeline_answers_at_every_granularity() {
    let f = Fixture::new(SIMPLE);
    f.start("v1");
    let driven = f.drive();
    assert!(driven.failed.is_empty() && driven.waiting.is_empty(), "{driven:?}");
    assert_eq!(
        f.runner.take(),
        owned(&[
            "v1 build/all/builder/deploy",
            "v1 beta/all/antworker002/deploy",
            "v1 beta/all/antworker002/test",
            "v1 prod/all/antworker001/deploy",
            "v1 prod/all/antworker001/test"
        ])
    );
    // The markers, as the seed's log shows them.
    assert_eq!(
        f.events_of("pipeline/beta").iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        [Event::StageStarted, Event::StageFinishedSuccessfully]
    );
    assert_eq!(f.events_of("pipeline").last().unwrap().1, Event::PipelineFinishedSuccessfully);

    f.runner.failing.lock().unwrap().insert("prod/all/antworker001/test".into());
    f.start("v2");
    let driven = f.drive();
    assert_eq!(driven.failed, [("v2".into(), "prod/all/antworker001/test".into(), "the smoke test failed".into())]);
    for (node, through, failed) in [
        ("pipeline", "v1", Some("v2")),
        ("beta", "v2", None),
        ("beta/all/antworker002", "v2", None),
        ("prod", "v1", Some("v2")),
        ("prod/all/antworker001", "v1", Some("v2")),
    ] {
        let status = f.node(node);
        assert_eq!(status.latest_through.as_deref(), Some(through), "{node}");
        assert_eq!(status.latest_failed.as_deref(), failed, "{node}");
        assert!(status.in_progress.is_empty(), "{node}");
    }
    // "Current" on a target is its newest successful deploy: v2 deployed to prod, then failed its test.
    assert_eq!(f.node("prod/all/antworker001").current.as_deref(), Some("v2"));
    // A failed revision is over: a later drive runs nothing of it.
    f.runner.take();
    f.drive();
    assert!(f.runner.take().is_empty());

    // Rollback: v1 again, a newer run of an older revision. It goes through every step, and
    // is then what the targets run.
    f.runner.failing.lock().unwrap().clear();
    f.start("v1");
    assert!(!f.with_driver(|d| d.register("v1", &Map::new())).unwrap(), "in flight: not registered twice");
    f.drive();
    assert_eq!(f.runner.take().len(), 5);
    assert_eq!(f.node("prod/all/antworker001").current.as_deref(), Some("v1"));
    assert_eq!(f.node("pipeline").latest_through.as_deref(), Some("v1"));
    assert_eq!(f.node("pipeline").latest_failed.as_deref(), Some("v2"));
}

#[test]
fn in_progress_is_what_started_and_did_not_end() {
    let f = Fixture::new(
        r#"
revision: "{{ version }}"
stages:
  - {name: staging, targets: [{name: stg, manifest: app.yaml}], steps: [deploy, bake], gates: {bake: 30m}}
  - {name: prod, targets: [{name: p1, manifest: app.yaml}], steps: [deploy]}
"#,
    );
    f.start("v1");
    let driven = f.drive();
    assert_eq!(driven.waiting.len(), 1);
    assert!(
        matches!(&driven.waiting[0].decision, StepDecision::Wait(why) if why.starts_with("bake until")),
        "{driven:?}"
    );
    assert_eq!(f.node("pipeline").in_progress, ["v1"]);
    assert_eq!(f.node("staging").in_progress, ["v1"]);
    assert!(f.node("prod").in_progress.is_empty());
    // The bake gate, with an injected clock.
    f.advance(29);
    f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy"]);
    f.advance(1);
    assert!(f.drive().waiting.is_empty());
    assert_eq!(f.runner.take(), ["v1 prod/all/p1/deploy"]);
    assert_eq!(f.node("pipeline").latest_through.as_deref(), Some("v1"));
}

const BATCHED: &str = r#"
revision: "{{ version }}"
concurrency: Queue
stages:
  - name: staging
    targets: [{name: stg, manifest: app.yaml}]
    steps: [deploy, test]
    tests: {test: {manifest: smoke.yaml}}
batches: [[staging/deploy, staging/test]]
"#;

/// (deploy, test) as a batch: v2 may not start `deploy` while `test` still tests v1.
#[test]
fn a_batch_keeps_v2_out_until_v1_is_through_it() {
    let f = Fixture::new(BATCHED);
    f.start("v1");
    f.start("v2");
    let pipeline = &f.pipeline;
    let (deploy, test) =
        (pipeline.step("staging/all/stg/deploy").unwrap(), pipeline.step("staging/all/stg/test").unwrap());
    let mut progress = f.progress();
    // v1 is through deploy, not yet tested.
    let id = progress.revision("v1").unwrap().id.clone();
    let entry = |event, step: &str| crate::history::Entry {
        id: id.clone(),
        target: format!("pipeline/{step}"),
        revision: "v1".into(),
        event,
        at: 1,
        detail: serde_json::json!({}),
    };
    progress.record(pipeline, &entry(Event::StepStarted, "staging/all/stg/deploy"));
    progress.record(pipeline, &entry(Event::StepSucceeded, "staging/all/stg/deploy"));
    let scheduled = progress.schedule(pipeline, 0);
    let of = |revision: &str, step: usize| {
        scheduled.iter().find(|s| s.revision == revision && s.step == step).map(|s| s.decision.clone())
    };
    assert_eq!(of("v1", test), Some(StepDecision::Start { supersedes: vec![] }));
    assert_eq!(
        of("v2", deploy),
        Some(StepDecision::Wait("batch [staging/deploy, staging/test] holds revision v1".into()))
    );

    // Without the batch, v2 would deploy while v1 is tested.
    let unbatched =
        pipeline_in(f.dir.path(), &BATCHED.replace("batches: [[staging/deploy, staging/test]]", "")).unwrap();
    let progress = {
        let mut p = f.progress();
        p.record(&unbatched, &entry(Event::StepStarted, "staging/all/stg/deploy"));
        p.record(&unbatched, &entry(Event::StepSucceeded, "staging/all/stg/deploy"));
        p
    };
    let scheduled = progress.schedule(&unbatched, 0);
    assert!(scheduled.iter().any(|s| s.revision == "v2" && s.decision == StepDecision::Start { supersedes: vec![] }));

    // Driven, the two interleave only at the batch's ends.
    f.drive();
    assert_eq!(
        f.runner.take(),
        [
            "v1 staging/all/stg/deploy",
            "v1 staging/all/stg/test",
            "v2 staging/all/stg/deploy",
            "v2 staging/all/stg/test"
        ]
    );
}

const TWO_STAGES: &str = r#"
revision: "{{ version }}"
stages:
  - {name: staging, targets: [{name: stg, manifest: app.yaml}], steps: [deploy, bake], gates: {bake: 10m}}
  - name: prod
    targets: [{name: prod-a1, manifest: app.yaml}]
    steps: [deploy]
"#;

/// A host added to prod while v1 is in staging: v1 has not reached it, so it deploys it after
/// staging, as every later revision will (the deployment-log document's case 011).
#[test]
fn a_host_added_while_v1_is_under_way_is_reached_by_v1() {
    let mut f = Fixture::new(TWO_STAGES);
    f.start("v1");
    f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy"]);
    f.change(&TWO_STAGES.replace(
        "[{name: prod-a1, manifest: app.yaml}]",
        "[{name: prod-a1, manifest: app.yaml}, {name: prod-a2, manifest: app.yaml}]",
    ));
    f.drive();
    assert_eq!(f.runner.take(), Vec::<String>::new(), "not before staging's bake");
    f.advance(10);
    f.drive();
    assert_eq!(f.runner.take(), ["v1 prod/all/prod-a1/deploy", "v1 prod/all/prod-a2/deploy"]);
    assert_eq!(
        f.events_of("pipeline/prod/all/prod-a2/deploy"),
        [("".into(), Event::StepIntroduced), ("v1".into(), Event::StepStarted), ("v1".into(), Event::StepSucceeded)]
    );
    assert_eq!(f.node("prod/all/prod-a2").current.as_deref(), Some("v1"));
}

/// A host removed from prod and added back while v1 is in staging is introduced anew, and
/// reached by v1 like any host it has not passed.
#[test]
fn a_host_removed_and_added_back_while_v1_is_under_way_is_new_again() {
    let two_hosts = TWO_STAGES.replace(
        "[{name: prod-a1, manifest: app.yaml}]",
        "[{name: prod-a1, manifest: app.yaml}, {name: prod-a2, manifest: app.yaml}]",
    );
    let mut f = Fixture::new(&two_hosts);
    f.drive();
    f.change(TWO_STAGES);
    f.drive();
    f.start("v1");
    f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy"]);
    f.change(&two_hosts);
    f.advance(10);
    f.drive();
    assert_eq!(f.runner.take(), ["v1 prod/all/prod-a1/deploy", "v1 prod/all/prod-a2/deploy"]);
    assert_eq!(
        f.events_of("pipeline/prod/all/prod-a2/deploy"),
        [
            ("".into(), Event::StepIntroduced),
            ("".into(), Event::StepWithdrawn),
            ("".into(), Event::StepIntroduced),
            ("v1".into(), Event::StepStarted),
            ("v1".into(), Event::StepSucceeded)
        ]
    );
}

/// A stage inserted before prod while v1 is in staging: v1 goes through it before prod, as v2
/// does.
#[test]
fn a_stage_inserted_ahead_of_a_revision_under_way_is_run_by_it() {
    let mut f = Fixture::new(TWO_STAGES);
    f.start("v1");
    f.drive();
    f.runner.take();
    let inserted = TWO_STAGES.replace(
        "  - name: prod\n",
        "  - {name: qa, targets: [{name: qa-1, manifest: app.yaml}], steps: [deploy, test], tests: {test: {manifest: smoke.yaml}}}\n  - name: prod\n",
    );
    f.change(&inserted);
    f.advance(10);
    f.drive();
    assert_eq!(f.runner.take(), ["v1 qa/all/qa-1/deploy", "v1 qa/all/qa-1/test", "v1 prod/all/prod-a1/deploy"]);
    f.start("v2");
    f.drive();
    f.advance(10);
    f.drive();
    assert_eq!(
        f.runner.take(),
        ["v2 staging/all/stg/deploy", "v2 qa/all/qa-1/deploy", "v2 qa/all/qa-1/test", "v2 prod/all/prod-a1/deploy"]
    );
    assert_eq!(f.node("qa").latest_through.as_deref(), Some("v2"));
}

const THREE_STAGES: &str = r#"
revision: "{{ version }}"
stages:
  - {name: staging, targets: [{name: stg, manifest: app.yaml}], steps: [deploy]}
  - {name: eu, targets: [{name: eu-1, manifest: app.yaml}], steps: [deploy, bake], gates: {bake: 10m}}
  - {name: us, targets: [{name: us-1, manifest: app.yaml}], steps: [deploy]}
"#;

/// A stage inserted behind v1 (before eu, which v1 has deployed) is skipped by v1: run now, new
/// code would run first deep in the pipeline. A host added ahead of it (in us) is reached; v2
/// goes through both.
#[test]
fn a_step_behind_a_revision_is_skipped_and_one_ahead_is_reached() {
    let mut f = Fixture::new(THREE_STAGES);
    f.start("v1");
    f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy", "v1 eu/all/eu-1/deploy"]);
    let changed = THREE_STAGES
        .replace(
            "  - {name: eu,",
            "  - {name: qa, targets: [{name: qa-1, manifest: app.yaml}], steps: [deploy]}\n  - {name: eu,",
        )
        .replace(
            "[{name: us-1, manifest: app.yaml}]",
            "[{name: us-1, manifest: app.yaml}, {name: us-2, manifest: app.yaml}]",
        );
    f.change(&changed);
    f.advance(10);
    f.drive();
    assert_eq!(f.runner.take(), ["v1 us/all/us-1/deploy", "v1 us/all/us-2/deploy"]);
    assert_eq!(
        f.events_of("pipeline/qa/all/qa-1/deploy"),
        [("".into(), Event::StepIntroduced), ("v1".into(), Event::StepSkipped)]
    );
    let skipped = f.log.recent("pipeline/qa/all/qa-1/deploy", 1).unwrap();
    assert_eq!(skipped[0].detail["reason"], "introduced-after");
    assert_eq!(f.node("qa/all/qa-1").current, None, "a skip is not a deploy");
    f.start("v2");
    f.drive();
    f.advance(10);
    f.drive();
    assert_eq!(
        f.runner.take(),
        [
            "v2 staging/all/stg/deploy",
            "v2 qa/all/qa-1/deploy",
            "v2 eu/all/eu-1/deploy",
            "v2 us/all/us-1/deploy",
            "v2 us/all/us-2/deploy"
        ]
    );
}

#[test]
fn supersede_stops_older_revisions_and_queue_keeps_order() {
    let f = Fixture::new(TWO_STAGES);
    f.start("v1");
    f.drive();
    f.start("v2");
    f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy", "v2 staging/all/stg/deploy"]);
    let progress = f.progress();
    assert_eq!(
        progress.revision("v1").unwrap().ended,
        Some(super::progress::RevisionEnded::Superseded { by: "v2".into() })
    );
    f.advance(10);
    f.drive();
    assert_eq!(f.runner.take(), ["v2 prod/all/prod-a1/deploy"], "v1 goes no further");

    let f = Fixture::new(&TWO_STAGES.replace("stages:", "concurrency: Queue\nstages:"));
    f.start("v1");
    f.start("v2");
    let driven = f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy", "v2 staging/all/stg/deploy"]);
    let waits: Vec<(String, StepDecision)> =
        driven.waiting.iter().map(|w| (w.revision.clone(), w.decision.clone())).collect();
    assert!(
        matches!(&waits[0], (r, StepDecision::Wait(why)) if r == "v1" && why.starts_with("bake until")),
        "{waits:?}"
    );
    assert_eq!(waits[1], ("v2".into(), StepDecision::Wait("revision v1 first (concurrency: Queue)".into())));
    f.advance(10);
    f.drive();
    assert_eq!(f.runner.take(), ["v1 prod/all/prod-a1/deploy", "v2 prod/all/prod-a1/deploy"]);
}

const WAVES: &str = r#"
revision: "{{ version }}"
stages:
  - {name: staging, targets: [{name: stg, manifest: app.yaml}], steps: [deploy]}
  - name: prod
    targets:
      - {name: prod-a1, manifest: app.yaml}
      - {name: prod-a2, manifest: app.yaml}
      - {name: prod-b1, manifest: app.yaml}
      - {name: prod-b2, manifest: app.yaml}
    groups:
      - {name: onebox, targets: [prod-a1], maxParallel: 1}
      - {name: fleet, targets: [prod-a2, prod-b1, prod-b2], maxParallel: 2}
    steps: [deploy]
    gates: {approval: [fleet]}
"#;

/// `approve` and `status` answer from what the next drive acts on: right after the pipeline
/// document changed (a stage inserted before the gate), and once a bake's time is over, without
/// a drive in between to record either; and they record nothing themselves.
#[test]
fn approve_and_status_see_the_frontier_the_next_drive_acts_on() {
    let mut f = Fixture::new(WAVES);
    f.start("v1");
    f.drive();
    f.runner.take();
    f.change(&WAVES.replace(
        "  - name: prod\n",
        "  - {name: qa, targets: [{name: qa-1, manifest: app.yaml}], steps: [deploy]}\n  - name: prod\n",
    ));
    let recorded = f.log.recent("pipeline", usize::MAX).unwrap().len();
    let frontier = f.with_driver(|d| d.settled()).unwrap().schedule(&f.pipeline, f.clock.load(Ordering::SeqCst));
    assert!(
        frontier.iter().any(|s| matches!(&s.decision, StepDecision::Approval { gate, .. } if gate == "prod/fleet")),
        "{frontier:?}"
    );
    assert_eq!(f.log.recent("pipeline", usize::MAX).unwrap().len(), recorded, "settling records nothing");
    f.with_driver(|d| d.approve("v1", "prod/fleet")).expect("approved before any drive saw the new stage");
    f.drive();
    assert_eq!(
        f.runner.take(),
        ["v1 prod/fleet/prod-a2/deploy", "v1 prod/fleet/prod-b1/deploy", "v1 prod/fleet/prod-b2/deploy"]
    );
    assert_eq!(
        f.events_of("pipeline/qa/all/qa-1/deploy"),
        [(String::new(), Event::StepIntroduced), ("v1".to_string(), Event::StepSkipped)],
        "introduced by the drive, not by approve"
    );

    // A bake before the gate: once its time is over, the gate is asked for at once.
    let baked = WAVES.replace(
        "    steps: [deploy]\n    gates: {approval: [fleet]}",
        "    steps: [deploy, bake]\n    gates: {bake: 5m, approval: [fleet]}",
    );
    let f = Fixture::new(&baked);
    f.start("v1");
    f.drive();
    let refused = f.with_driver(|d| d.approve("v1", "prod/fleet")).unwrap_err().to_string();
    // It says what the revision waits for, and when approval becomes possible.
    assert!(
        refused.starts_with("nothing of revision v1 waits for approval at `prod/fleet` yet: prod/onebox/prod-a1/bake waits for bake until "),
        "{refused}"
    );
    assert!(
        refused.ends_with("; approval at `prod/fleet` becomes possible once the steps before it are through"),
        "{refused}"
    );
    f.advance(6);
    f.with_driver(|d| d.approve("v1", "prod/fleet")).expect("the bake is over: the gate waits");
    f.drive();
    let ran = f.runner.take();
    assert!(ran.iter().any(|s| s == "v1 prod/fleet/prod-a2/deploy"), "{ran:?}");
}

#[test]
fn approval_opens_a_group_and_max_parallel_bounds_each_wave() {
    let f = Fixture::new(WAVES);
    f.start("v1");
    let driven = f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy", "v1 prod/onebox/prod-a1/deploy"]);
    let how = |revision: &str, gate: &str| format!("approve {revision} at {gate}");
    let waits: Vec<String> = driven
        .waiting
        .iter()
        .map(|w| w.decision.waits_for(&how).unwrap_or_else(|| format!("{:?}", w.decision)))
        .collect();
    assert_eq!(waits.len(), 3);
    assert!(waits.iter().all(|w| w == "approval of prod/fleet (approve v1 at prod/fleet)"), "{waits:?}");

    // An approval nothing waits for is refused, saying why.
    for (revision, gate, why) in [
        ("v1", "prod/onebox", ": group `prod/onebox` does not ask for approval"),
        ("v9", "prod/fleet", " (no such revision is registered)"),
    ] {
        let refused = f.with_driver(|d| d.approve(revision, gate)).unwrap_err();
        assert!(matches!(refused, PipelineError::Refused(_)), "{refused}");
        assert_eq!(refused.to_string(), format!("nothing of revision {revision} waits for approval at `{gate}`{why}"));
    }
    // A gate that is no group: the closest that asks for approval.
    let refused = f.with_driver(|d| d.approve("v1", "prod/flet")).unwrap_err().to_string();
    assert!(
        refused.ends_with("has no group or stage `prod/flet` that asks for approval (did you mean `prod/fleet`?); those that do: prod/fleet"),
        "{refused}"
    );
    f.with_driver(|d| d.approve("v1", "prod/fleet")).unwrap();
    f.drive();
    // Two at once, then the third.
    assert_eq!(
        f.runner.take(),
        ["v1 prod/fleet/prod-a2/deploy", "v1 prod/fleet/prod-b1/deploy", "v1 prod/fleet/prod-b2/deploy"]
    );
    assert_eq!(f.node("prod/fleet").latest_through.as_deref(), Some("v1"));
}

/// A drive that ended between two steps (kill -9): the next records the one it left running
/// as interrupted and runs it again; the succeeded one is not run again.
#[test]
fn a_drive_that_died_is_resumed_from_the_log() {
    let f = Fixture::new(SIMPLE);
    f.start("v1");
    let progress = f.progress();
    let id = progress.revision("v1").unwrap().id.clone();
    let entry = |event, target: &str| crate::history::Entry {
        id: id.clone(),
        target: target.into(),
        revision: "v1".into(),
        event,
        at: 1,
        detail: serde_json::json!({}),
    };
    f.log
        .append(&[
            entry(Event::PipelineStarted, "pipeline"),
            entry(Event::StepStarted, "pipeline/build/all/builder/deploy"),
            entry(Event::StepSucceeded, "pipeline/build/all/builder/deploy"),
            entry(Event::StepStarted, "pipeline/beta/all/antworker002/deploy"),
        ])
        .unwrap();
    f.drive();
    let ran = f.runner.take();
    assert_eq!(ran[0], "v1 beta/all/antworker002/deploy");
    assert!(!ran.iter().any(|r| r.contains("builder")), "{ran:?}");
    assert_eq!(
        f.events_of("pipeline/beta/all/antworker002/deploy").iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        // (The crafted log has the dead drive's entries before the steps' introduction.)
        [Event::StepStarted, Event::StepIntroduced, Event::StepInterrupted, Event::StepStarted, Event::StepSucceeded]
    );
    assert_eq!(f.node("pipeline").latest_through.as_deref(), Some("v1"));
}

#[test]
fn bad_pipelines_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.yaml"), "resources: {}\n").unwrap();
    std::fs::write(dir.path().join("broken.yaml"), "resources: [not, a, map]\n").unwrap();
    let target = "{name: t, manifest: app.yaml}";
    let cases = [
        (
            format!(
                "revision: x\nstages:\n  - {{name: a, after: [c], targets: [{target}], steps: [deploy]}}\n  - {{name: b, after: [a], targets: [{target}], steps: [deploy]}}\n  - {{name: c, after: [b], targets: [{target}], steps: [deploy]}}\n"
            ),
            "the stages form a cycle: a → b → c → a",
        ),
        (
            format!(
                "revision: x\nstages:\n  - {{name: a, targets: [{target}], steps: [deploy, test], tests: {{test: {{manifest: app.yaml}}}}}}\nbatches: [[a/test, a/deploy]]\n"
            ),
            "batch [a/test, a/deploy] is not a path in the pipeline: `a/deploy` does not come after `a/test`",
        ),
        (
            format!(
                "revision: x\nstages:\n  - {{name: a, targets: [{target}], steps: [deploy]}}\nbatches: [[a/deploy, a/nothing]]\n"
            ),
            "batch [a/deploy, a/nothing]: `a/nothing` is no step",
        ),
        (
            format!(
                "revision: x\nstages:\n  - {{name: a, targets: [{target}], steps: [deploy], gates: {{bake: 30m}}}}\n"
            ),
            "stage `a`: gates names `bake`, which is not one of its steps (deploy)",
        ),
        (
            "revision: x\nstages:\n  - {name: a, targets: [{name: t, manifest: broken.yaml}], steps: [deploy]}\n"
                .into(),
            "stage `a`, target `t`: its manifest",
        ),
        (
            "revision: x\nstages:\n  - {name: a, targets: [{name: t, manifest: missing.yaml}], steps: [deploy]}\n"
                .into(),
            "missing.yaml does not load",
        ),
        (
            format!("revision: x\nstages:\n  - {{name: a, targets: [{target}, {target}], steps: [deploy]}}\n"),
            "stage `a` has two targets named `t`",
        ),
        (
            format!("revision: x\nstages:\n  - {{name: a, targets: [{target}], steps: [deploy, smoke]}}\n"),
            "step `smoke` is neither `deploy`, a test (`tests.smoke`) nor a timed gate",
        ),
        (
            format!("revision: x\nstages:\n  - {{name: a, after: [z], targets: [{target}], steps: [deploy]}}\n"),
            "stage `a` comes after `z`, which is not a stage",
        ),
        (
            format!(
                "revision: x\nstages:\n  - {{name: a, targets: [{target}], steps: [deploy], gates: {{approval: [nope]}}}}\n"
            ),
            "gates.approval names `nope`, which is not a group of the stage",
        ),
    ];
    for (yaml, expected) in cases {
        let error = pipeline_in(dir.path(), &yaml).unwrap_err();
        assert!(error.contains(expected), "{expected:?} not in {error:?}\n{yaml}");
    }
    let pipeline = pipeline_in(
        dir.path(),
        &format!("revision: \"{{{{ version }}}}\"\nstages:\n  - {{name: a, targets: [{target}], steps: [deploy]}}\n"),
    )
    .unwrap();
    let empty = pipeline.revision_of(&Map::new()).unwrap_err().to_string();
    assert!(empty.contains("renders empty"), "{empty}");
    let mut vars = Map::new();
    vars.insert("version".into(), "1.4.3".into());
    assert_eq!(pipeline.revision_of(&vars).unwrap(), "1.4.3");
}

/// The seed's build stage: a stage that requires artifacts starts once each is registered.
#[test]
fn a_stage_waits_for_the_artifacts_it_requires() {
    let f = Fixture::new(
        r#"
revision: "{{ version }}"
stages:
  - {name: build, requires: [amd64, arm64], targets: [{name: b, manifest: app.yaml}], steps: [deploy]}
"#,
    );
    f.start("v1");
    let waits = |driven: Driven| -> Vec<StepDecision> { driven.waiting.into_iter().map(|w| w.decision).collect() };
    assert_eq!(waits(f.drive()), [StepDecision::Wait("artifacts not yet registered: amd64, arm64".into())]);
    f.with_driver(|d| d.register_artifact("v1", "build", "amd64")).unwrap();
    assert_eq!(waits(f.drive()), [StepDecision::Wait("artifacts not yet registered: arm64".into())]);
    let refused = f.with_driver(|d| d.register_artifact("v1", "build", "riscv")).unwrap_err().to_string();
    assert_eq!(refused, "stage `build` requires no artifact `riscv` (it requires: amd64, arm64)");
    let refused = f.with_driver(|d| d.register_artifact("v9", "build", "arm64")).unwrap_err().to_string();
    assert_eq!(refused, "revision v9 is not registered");
    f.with_driver(|d| d.register_artifact("v1", "build", "arm64")).unwrap();
    assert!(f.drive().waiting.is_empty());
    assert_eq!(f.runner.take(), ["v1 build/all/b/deploy"]);
}

/// A deny window (cron, UTC, and a duration): the stage starts nothing inside it.
#[test]
fn a_deny_window_holds_a_stage_until_it_ends() {
    let f = Fixture::new(
        r#"
revision: "{{ version }}"
stages:
  - {name: staging, targets: [{name: stg, manifest: app.yaml}], steps: [deploy]}
  - name: prod
    targets: [{name: p1, manifest: app.yaml}]
    steps: [deploy]
    gates: {windows: [{deny: "0 0 * * *", duration: 1h}, {deny: "0 12 * * *", duration: 30m}]}
"#,
    );
    // The clock starts at 1970-01-01T00:16:40Z: inside the midnight window.
    f.start("v1");
    let driven = f.drive();
    assert_eq!(f.runner.take(), ["v1 staging/all/stg/deploy"], "other stages go on");
    assert_eq!(
        driven.waiting[0].decision,
        StepDecision::Wait("the deny window 0 0 * * * for 1h to end at 1970-01-01T01:00:00.000Z".into())
    );
    f.advance(44);
    assert!(f.drive().waiting.is_empty());
    assert_eq!(f.runner.take(), ["v1 prod/all/p1/deploy"]);

    for (windows, expected) in [
        (r#"[{deny: "not cron", duration: 1h}]"#, "gates.windows: `not cron` is not a cron expression"),
        (r#"[{deny: "0 0 * * *", duration: 0s}]"#, "duration is zero"),
        (
            r#"[{deny: "0 0 * * *"}]"#,
            "gates.windows must be a list of {deny: <cron expression>, duration: <such as 2h>}",
        ),
    ] {
        let yaml = format!(
            "revision: x\nstages:\n  - {{name: a, targets: [{{name: t, manifest: app.yaml}}], steps: [deploy], gates: {{windows: {windows}}}}}\n"
        );
        let error = pipeline_in(f.dir.path(), &yaml).unwrap_err();
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }
}

/// A drive cancelled (SIGINT) while a step runs: the step is recorded as interrupted, nothing
/// else starts, and the next drive runs it again.
#[test]
fn a_cancelled_drive_records_its_step_interrupted_and_the_next_runs_it() {
    let mut f = Fixture::new(SIMPLE);
    f.start("v1");
    *f.runner.stopping.lock().unwrap() = Some(("beta/all/antworker002/deploy".into(), f.cancel.clone()));
    let driven = f.drive();
    assert!(driven.interrupted && driven.failed.is_empty(), "{driven:?}");
    assert_eq!(f.runner.take(), ["v1 build/all/builder/deploy", "v1 beta/all/antworker002/deploy"]);
    assert_eq!(
        f.events_of("pipeline/beta/all/antworker002/deploy").iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        [Event::StepIntroduced, Event::StepStarted, Event::StepInterrupted]
    );
    assert!(f.progress().revision("v1").unwrap().is_live(), "not failed");
    f.cancel = Default::default();
    let driven = f.drive();
    assert!(!driven.interrupted);
    assert_eq!(f.runner.take()[0], "v1 beta/all/antworker002/deploy");
    assert_eq!(f.node("pipeline").latest_through.as_deref(), Some("v1"));
}

/// Compaction keeps what still answers something: read, the compacted log says what the whole
/// one says at every node and on the frontier, the next drives on either do the same, and
/// compacting it again keeps it as it is.
#[test]
fn a_compacted_log_answers_and_drives_as_the_whole_log() {
    let f = Fixture::new(WAVES);
    let how = |_: &str, _: &str| String::new();
    for n in 1..=24 {
        let failing = n % 5 == 0;
        f.runner.failing.lock().unwrap().clone_from(&if failing {
            HashSet::from(["prod/fleet/prod-b1/deploy".to_string()])
        } else {
            HashSet::new()
        });
        // A rollback: v3 again, as a new run.
        let revision = if n == 12 { "v3".to_string() } else { format!("v{n}") };
        f.start(&revision);
        f.drive();
        f.with_driver(|d| d.approve(&revision, "prod/fleet")).unwrap();
        f.drive();
        f.advance(1);
    }
    f.runner.failing.lock().unwrap().clear();
    // Left live: one waiting for its approval.
    f.start("v25");
    f.drive();
    f.runner.take();

    let whole = f.log.entries();
    let compacted = super::compact::compact(&f.pipeline, &whole);
    assert!(compacted.len() * 4 < whole.len(), "{} of {} entries kept", compacted.len(), whole.len());
    let now = f.clock.load(Ordering::SeqCst);
    let answers = |entries: &[crate::history::Entry]| {
        status(&f.pipeline, &Progress::from_entries(&f.pipeline, entries), now, &how)
    };
    let (before, after) = (answers(&whole), answers(&compacted));
    assert_eq!(before.nodes, after.nodes);
    assert_eq!(before.frontier, after.frontier);
    assert!(after.frontier.iter().any(|s| s.revision == "v25"), "{:?}", after.frontier);
    let named = |s: &super::query::PipelineOverview| -> Vec<(String, String)> {
        s.revisions.iter().map(|r| (r.revision.clone(), r.status.clone())).collect()
    };
    let kept = named(&after);
    let mut all = named(&before).into_iter();
    assert!(kept.iter().all(|k| all.any(|r| r == *k)), "the runs kept, in their order: {kept:?}");
    assert!(kept.len() < 10, "{kept:?}");
    assert_eq!(super::compact::compact(&f.pipeline, &compacted), compacted, "nothing more to drop");

    // The next drives, on the whole log and on the compacted one.
    let g = Fixture::new(WAVES);
    g.clock.store(now, Ordering::SeqCst);
    for entry in &compacted {
        g.log.append(std::slice::from_ref(entry)).unwrap();
    }
    for fixture in [&f, &g] {
        fixture.with_driver(|d| d.approve("v25", "prod/fleet")).unwrap();
        fixture.drive();
        fixture.start("v26");
        fixture.drive();
    }
    assert_eq!(f.runner.take(), g.runner.take());
    assert_eq!(answers(&f.log.entries()).nodes, answers(&g.log.entries()).nodes);
    // The revision the newest registration names is not registered again.
    assert!(!g.with_driver(|d| d.register("v26", &Map::new())).unwrap());

    // What a target runs is the newest deploy that succeeded there, from a run that answers
    // nothing else: v2 deployed to prod and failed its test, v3 failed to deploy there.
    let f = Fixture::new(SIMPLE);
    for (revision, failing) in
        [("v1", None), ("v2", Some("prod/all/antworker001/test")), ("v3", Some("prod/all/antworker001/deploy"))]
    {
        f.runner.failing.lock().unwrap().clone_from(&failing.into_iter().map(String::from).collect());
        f.start(revision);
        f.drive();
        f.advance(1);
    }
    let compacted = super::compact::compact(&f.pipeline, &f.log.entries());
    let prod = |entries: &[crate::history::Entry]| {
        let now = f.clock.load(Ordering::SeqCst);
        let nodes = status(&f.pipeline, &Progress::from_entries(&f.pipeline, entries), now, &how).nodes;
        nodes.into_iter().find(|n| n.node == "prod/all/antworker001").unwrap()
    };
    let target = prod(&compacted);
    assert_eq!(
        (target.current.as_deref(), target.latest_through.as_deref(), target.latest_failed.as_deref()),
        (Some("v2"), Some("v1"), Some("v3"))
    );
    assert_eq!(target, prod(&f.log.entries()));
}

/// Steps started elsewhere (as a Pipeline's reconcile starts them): under way until told, each
/// told with what its `step-started` entry recorded.
#[derive(Default)]
struct Elsewhere {
    started: Mutex<Vec<(String, serde_json::Value)>>,
    states: Mutex<std::collections::HashMap<String, super::advance::StepState>>,
    seen: Mutex<Vec<serde_json::Value>>,
}

#[async_trait]
impl super::advance::Steps for Elsewhere {
    async fn start(&self, job: &Job) -> Result<serde_json::Value, super::StepError> {
        let detail = serde_json::json!({"generation": self.started.lock().unwrap().len() + 1});
        self.started.lock().unwrap().push((job.step.clone(), detail.clone()));
        Ok(detail)
    }

    async fn state(&self, job: &Job, started: &serde_json::Value, _: i64) -> super::advance::StepState {
        self.seen.lock().unwrap().push(started.clone());
        self.states.lock().unwrap().get(&job.step).cloned().unwrap_or(super::advance::StepState::Running)
    }
}

/// Issue 51: one advance starts what is due and returns at once; the next records what ended
/// and starts what follows, each as it happens (a reconcile never waits for a step).
#[test]
fn an_advance_starts_what_is_due_and_returns_and_the_next_records_what_ended() {
    use super::advance::StepState;
    let f = Fixture::new(SIMPLE);
    f.start("v1");
    let steps = Elsewhere::default();
    let advance = || f.with_driver(|d| futures::executor::block_on(d.advance(&steps)).unwrap());
    let first = advance();
    assert_eq!(first.running, 1);
    assert_eq!(steps.started.lock().unwrap().len(), 1, "the build step only");
    assert_eq!(f.events_of("pipeline/build/all/builder/deploy").last().unwrap().1, Event::StepStarted);
    assert!(f.runner.take().is_empty(), "nothing ran here");

    // Still under way: recorded as such, nothing more started, the entry's detail given back.
    let again = advance();
    assert_eq!((again.running, steps.started.lock().unwrap().len()), (1, 1));
    assert_eq!(steps.seen.lock().unwrap().last().unwrap(), &serde_json::json!({"generation": 1}));

    steps.states.lock().unwrap().insert("build/all/builder/deploy".into(), StepState::Succeeded);
    let next = advance();
    assert_eq!(f.events_of("pipeline/build/all/builder/deploy").last().unwrap().1, Event::StepSucceeded);
    assert_eq!(f.events_of("pipeline/build").last().unwrap().1, Event::StageFinishedSuccessfully);
    assert_eq!(next.running, 1);
    assert_eq!(steps.started.lock().unwrap().last().unwrap().0, "beta/all/antworker002/deploy");

    // A step whose runner knows nothing of it is interrupted and started again.
    steps.states.lock().unwrap().insert("beta/all/antworker002/deploy".into(), StepState::Lost);
    let lost = advance();
    let events: Vec<Event> = f.events_of("pipeline/beta/all/antworker002/deploy").into_iter().map(|(_, e)| e).collect();
    assert_eq!(events, [Event::StepIntroduced, Event::StepStarted, Event::StepInterrupted, Event::StepStarted]);
    assert_eq!(lost.running, 1);

    steps.states.lock().unwrap().insert("beta/all/antworker002/deploy".into(), StepState::Failed("not Ready".into()));
    let failed = advance();
    assert_eq!(failed.failed, [("v1".into(), "beta/all/antworker002/deploy".into(), "not Ready".into())]);
    assert_eq!(failed.running, 0);
}
