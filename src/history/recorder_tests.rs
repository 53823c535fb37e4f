//! The recorder's tests.

use super::*;
use crate::history::MemoryLog;
use crate::history::tests::{crafted, entry};
use std::time::Duration;

fn events(log: &MemoryLog) -> Vec<(String, Event)> {
    log.entries().into_iter().map(|e| (e.target, e.event)).collect()
}

/// A log whose appends are counted, take `delay`, and fail once `full` is set (a full disk,
/// a broken file).
#[derive(Default)]
struct TestLog {
    inner: MemoryLog,
    appends: std::sync::atomic::AtomicUsize,
    full: std::sync::atomic::AtomicBool,
    delay: Duration,
}

impl History for TestLog {
    fn append(&self, entries: &[Entry]) -> Result<(), HistoryError> {
        self.appends.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(self.delay);
        if self.full.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(HistoryError::Store {
                path: "/state/log.sqlite".into(),
                message: "database or disk is full".into(),
            });
        }
        self.inner.append(entries)
    }
    fn latest(&self, target: &str, events: &[Event]) -> Result<Option<Entry>, HistoryError> {
        self.inner.latest(target, events)
    }
    fn open(&self, prefix: &str) -> Result<Vec<Entry>, HistoryError> {
        self.inner.open(prefix)
    }
    fn recent(&self, prefix: &str, limit: usize) -> Result<Vec<Entry>, HistoryError> {
        self.inner.recent(prefix, limit)
    }
}

/// Intents reached together by the tasks of one pass — futures polled by one thread, as
/// the engine drives them — are written together while the disk is busy.
#[tokio::test]
async fn intents_of_actions_starting_at_once_share_a_transaction() {
    let log = Arc::new(TestLog { delay: Duration::from_millis(50), ..TestLog::default() });
    let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    let recorder = Recorder::new(log.clone(), "r1", "REV", Mode::Apply, &names).unwrap();
    let (recorder, written_to) = (&recorder, &log);
    let intents = names.iter().map(|name| async move {
        recorder.on_intent(name, "create").await.expect("the intent is recorded");
        // Back from `on_intent`: the intent is in the log, whoever wrote it.
        let written = written_to.inner.entries();
        assert!(written.iter().any(|e| e.target == target::action(name, "create")), "{name}");
    });
    futures::future::join_all(intents).await;
    let mut targets: Vec<String> = log.inner.entries().into_iter().map(|e| e.target).collect();
    targets.sort();
    let expected: Vec<String> = names.iter().map(|n| target::action(n, "create")).collect();
    assert_eq!(targets, expected, "each intent written exactly once");
    let appends = log.appends.load(std::sync::atomic::Ordering::SeqCst);
    assert!(appends < names.len(), "{appends} transactions for {} intents", names.len());
}

#[tokio::test]
async fn an_intent_that_cannot_be_written_is_an_error() {
    let log = Arc::new(TestLog::default());
    let recorder = Recorder::new(log.clone(), "r1", "REV", Mode::Apply, &["a".into()]).unwrap();
    recorder.on_event(&RunEvent::Started);
    log.full.store(true, std::sync::atomic::Ordering::SeqCst);
    let err = recorder.on_intent("a", "create").await.unwrap_err();
    assert!(err.to_string().contains("/state/log.sqlite: database or disk is full"), "{err}");
    assert_eq!(
        recorder.failure().as_deref(),
        Some("the deployment log at /state/log.sqlite: database or disk is full")
    );
}

#[tokio::test]
async fn an_apply_is_recorded_with_its_intents_durable_before_the_action() {
    let log = Arc::new(MemoryLog::new());
    let recorder = Recorder::new(log.clone(), "r1", "REV", Mode::Apply, &["a".into()]).unwrap();
    recorder.on_event(&RunEvent::Started);
    recorder.on_event(&found("a", Status::Missing, false, json!({"p": 1})));
    recorder.on_intent("a", "create").await.expect("the intent is recorded");
    assert_eq!(
        events(&log).last(),
        Some(&("resource/a/action/create".to_string(), Event::ActionStarted)),
        "the intent is written before the action runs, with what was buffered before it"
    );
    assert_eq!(log.entries().len(), 3);
    recorder.on_event(&RunEvent::ActionFinished {
        resource: "a".into(),
        action: "create".into(),
        elapsed: Duration::from_millis(5),
        error: None,
        results: vec![],
    });
    recorder.on_event(&found("a", Status::Valid, true, json!({"p": 1})));
    recorder.on_event(&RunEvent::Settled {
        resource: "a".into(),
        label: "APPLIED",
        elapsed: Duration::from_millis(9),
        message: Some("create".into()),
    });
    assert_eq!(log.entries().len(), 3, "observations wait for the next durable point");
    recorder.on_event(&RunEvent::Ended(Ending::Succeeded));
    let expected = [
        ("manifest", Event::RunStarted),
        ("resource/a", Event::ResourceMissing),
        ("resource/a/action/create", Event::ActionStarted),
        ("resource/a/action/create", Event::ActionFinishedSuccessfully),
        ("resource/a", Event::ResourceApplied),
        ("manifest", Event::RunFinishedSuccessfully),
    ];
    let expected: Vec<(String, Event)> = expected.iter().map(|(t, e)| (t.to_string(), *e)).collect();
    assert_eq!(events(&log), expected);
    assert!(log.entries().iter().all(|e| e.id == "r1" && e.revision == "REV"));
    assert_eq!(log.entries()[3].detail["duration_ms"], 5);
    let applied = &log.entries()[4];
    assert_eq!(applied.detail["inputs"]["config"], json!({"p": 1}), "applied with the inputs it was read for");
}

fn inputs(config: Value) -> Inputs {
    let digest = crate::engine::validate::content_hash(&json!({"type": "t", "config": config}));
    Inputs { type_name: "t".into(), config, digest, sensitive: Default::default() }
}

fn found(resource: &str, status: Status, verify: bool, config: Value) -> RunEvent {
    RunEvent::StateFound {
        resource: resource.into(),
        status,
        verify,
        inputs: inputs(config),
        identity: Default::default(),
    }
}

fn observed(resource: &str, event: Event, config: Value) -> Entry {
    Entry { detail: json!({"inputs": inputs(config)}), ..entry("r0", &target::resource(resource), "A", event, 1) }
}

#[test]
fn drift_is_a_resource_valid_at_its_last_observation_and_not_now_with_the_same_inputs() {
    let log = Arc::new(MemoryLog::new());
    log.append(&[
        observed("was_valid", Event::ResourceValid, json!({"p": 1})),
        observed("was_applied", Event::ResourceApplied, json!({"p": 1})),
        observed("was_stale", Event::ResourceStale, json!({"p": 1})),
    ])
    .unwrap();
    let names: Vec<String> = ["was_valid", "was_applied", "was_stale", "new"].iter().map(|s| s.to_string()).collect();
    let recorder = Recorder::new(log.clone(), "r1", "B", Mode::Plan, &names).unwrap();
    for name in &names {
        recorder.on_event(&found(name, Status::Stale, false, json!({"p": 1})));
    }
    let drifted: Vec<String> = recorder.drifts().into_iter().map(|d| d.resource).collect();
    assert_eq!(drifted, ["was_valid", "was_applied"]);
    assert!(recorder.changes().is_empty(), "{:?}", recorder.changes());
    recorder.on_event(&RunEvent::Ended(Ending::Failed("x".into())));
    let drift_entries = log.entries().into_iter().filter(|e| e.event == Event::DriftDetected).count();
    assert_eq!(drift_entries, 2);
}

#[test]
fn a_resource_stale_because_its_inputs_changed_is_a_change_not_drift() {
    let log = Arc::new(MemoryLog::new());
    log.append(&[
        observed("edited", Event::ResourceApplied, json!({"path": "/a", "mode": 420})),
        observed("failed_before", Event::ResourceValid, json!({"n": 1})),
        entry("r1", "resource/failed_before", "A", Event::ResourceStale, 2),
        // An older log: no inputs kept, so the revision tells.
        entry("r0", "resource/legacy_same", "B", Event::ResourceValid, 1),
        entry("r0", "resource/legacy_other", "A", Event::ResourceValid, 1),
    ])
    .unwrap();
    let names: Vec<String> =
        ["edited", "failed_before", "legacy_same", "legacy_other"].iter().map(|s| s.to_string()).collect();
    let recorder = Recorder::new(log.clone(), "r2", "B", Mode::Apply, &names).unwrap();
    recorder.on_event(&found("edited", Status::Stale, false, json!({"path": "/b", "mode": 420, "new": true})));
    recorder.on_event(&found("failed_before", Status::Stale, false, json!({"n": 2})));
    recorder.on_event(&found("legacy_same", Status::Stale, false, json!({})));
    recorder.on_event(&found("legacy_other", Status::Missing, false, json!({})));
    let drifted: Vec<String> = recorder.drifts().into_iter().map(|d| d.resource).collect();
    assert_eq!(drifted, ["legacy_same"]);
    let changes = recorder.changes();
    let summary: Vec<(&str, bool, Vec<&str>)> = changes
        .iter()
        .map(|c| (c.resource.as_str(), c.was_valid, c.differences.iter().map(|d| d.path.as_str()).collect()))
        .collect();
    assert_eq!(
        summary,
        [
            ("edited", true, vec!["config.path", "config.new"]),
            ("failed_before", false, vec!["config.n"]),
            ("legacy_other", true, vec!["revision"]),
        ]
    );
    assert_eq!(changes[0].differences[0].was, Some(json!("/a")));
    assert_eq!(changes[0].differences[1].was, None);
    recorder.on_event(&RunEvent::Ended(Ending::Succeeded));
    let logged: Vec<(String, Event)> =
        events(&log).into_iter().filter(|(_, e)| matches!(e, Event::ChangeDetected | Event::DriftDetected)).collect();
    assert_eq!(
        logged,
        [
            ("resource/edited".to_string(), Event::ChangeDetected),
            ("resource/legacy_same".to_string(), Event::DriftDetected),
            ("resource/legacy_other".to_string(), Event::ChangeDetected),
        ],
        "a resource that was not VALID before neither drifted nor changed from VALID"
    );
}

#[test]
fn a_change_only_in_a_sensitive_value_shows_masked() {
    let was = Inputs { digest: "111".into(), ..inputs(json!({"password": "***"})) };
    let now = Inputs { digest: "222".into(), ..inputs(json!({"password": "***"})) };
    let differences = was.differences(&now);
    assert_eq!(differences.len(), 1);
    assert_eq!((differences[0].path.as_str(), &differences[0].now), ("config", &Some(json!("***"))));
}

#[test]
fn interrupted_runs_and_their_intents_are_closed_and_reported() {
    let log = MemoryLog::new();
    log.append(&crafted()).unwrap();
    let found = close_interrupted(&log, "r4").unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].run.id.as_str(), found[0].run.revision.as_str()), ("r3", "C"));
    assert_eq!(found[0].actions[0].target, "resource/b/action/create");
    assert!(in_progress(&log, None).unwrap().is_empty());
    assert!(close_interrupted(&log, "r5").unwrap().is_empty(), "nothing is closed twice");
    let closing = log.latest("manifest", &[Event::RunInterrupted]).unwrap().unwrap();
    assert_eq!(closing.detail["interrupted_by"], "r4");
}

#[test]
fn long_messages_are_cut() {
    assert_eq!(cut("short"), "short");
    let long = "é".repeat(2000);
    let cut_text = cut(&long);
    assert!(cut_text.len() <= DETAIL_MESSAGE_LIMIT + "…".len() && cut_text.ends_with('…'));
}
