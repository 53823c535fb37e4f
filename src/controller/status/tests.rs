use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::engine::error::{Cause, Phase, ResourceError};
use crate::engine::executor::Exit;
use crate::engine::plan::{Ran, ResourceEntry};
use crate::engine::protocol::Status;
use crate::history::{Event, target};

const T0: i64 = 1_700_000_000_000;

fn report(outcomes: Vec<(&str, Standing)>) -> Report {
    report_masked(outcomes, Mask::default())
}

/// A report whose run masks what `mask` holds.
fn report_masked(outcomes: Vec<(&str, Standing)>, mask: Mask) -> Report {
    let entries = outcomes
        .into_iter()
        .map(|(name, standing)| ResourceEntry {
            name: name.into(),
            type_name: "builtin/file".into(),
            standing,
            elapsed: Duration::ZERO,
            config: None,
        })
        .collect();
    Report::new("ns/m".into(), "run".into(), entries, mask)
}

fn pass(observed: Observed, now_ms: i64) -> PassResult {
    PassResult {
        run_id: Some("01a250c3-a6cd-7167-a5d8-faa90b0ebd19".into()),
        generation: Some(3),
        revision: "rev1".into(),
        observed,
        drifts: vec![],
        history: vec![],
        now_ms,
        approved_plan: None,
        next_checks: Default::default(),
        outputs_failed: None,
        unwatched: None,
        fights: Vec::new(),
        removals: Vec::new(),
    }
}

fn applied(name: &str) -> (&str, Standing) {
    (
        name,
        Standing::Valid {
            state: json!({"path": format!("/{name}")}),
            applied: Some(vec![Ran { action: "create".into(), results: vec![] }]),
        },
    )
}

fn unchanged(name: &str) -> (&str, Standing) {
    (name, Standing::Valid { state: json!({"path": format!("/{name}")}), applied: None })
}

fn condition<'a>(status: &'a ManifestStatus, type_: &str) -> &'a Condition {
    status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} in {status:#?}"))
}

fn action_failed() -> ResourceError {
    let outcome = crate::engine::executor::Outcome {
        exit: Exit::Code(1),
        stdout: vec![],
        stderr: b"disk full".to_vec(),
        elapsed: Duration::ZERO,
    };
    ResourceError::exit(Phase::Action("create".into()), &outcome)
}

#[test]
fn a_successful_first_pass_is_ready_with_every_resource_valid() {
    let status =
        next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a"), applied("b")])), T0));
    let ready = condition(&status, "Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Applied"));
    assert_eq!(ready.observed_generation, Some(3));
    assert_eq!(condition(&status, "Reconciling").status, "False");
    assert_eq!(condition(&status, "Stalled").status, "False");
    assert_eq!(status.last_applied_revision.as_deref(), Some("rev1"));
    assert_eq!(status.last_attempted_revision.as_deref(), Some("rev1"));
    assert_eq!(status.last_run_id.as_deref(), Some("01a250c3-a6cd-7167-a5d8-faa90b0ebd19"), "the pass's run");
    assert_eq!(status.observed_generation, Some(3));
    assert_eq!(status.resources_summary.as_deref(), Some("2/2"));
    assert_eq!(status.resources[0].state, Some(json!({"path": "/a"})));
    assert_eq!(status.resources[0].message.as_deref(), Some("applied: create"));
    assert_eq!(status.consecutive_failures, 0);
}

#[test]
fn outputs_that_fail_keep_the_object_from_ready_until_they_render() {
    let ready = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let mut failing = pass(Observed::Applied(report(vec![unchanged("a")])), T0 + 1000);
    failing.outputs_failed =
        Some(("OutputsFailed", "the outputs could not be rendered: outputs.url: undefined".into()));
    let failed = next_status(&ready, &failing);
    let condition_of = |s: &ManifestStatus, t: &str| {
        let c = condition(s, t);
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    assert_eq!(
        condition_of(&failed, "Ready"),
        ("False".into(), "OutputsFailed".into(), "the outputs could not be rendered: outputs.url: undefined".into())
    );
    assert_eq!(condition_of(&failed, "Reconciling").1, "RetryingAfterFailure");
    assert_eq!(condition(&failed, "Stalled").status, "False", "a retry can fix it");
    assert_eq!(failed.consecutive_failures, 1, "retried with the failure backoff");
    assert_eq!(failed.resources[0].status, "VALID", "the resources themselves are applied");
    let rendered = next_status(&failed, &pass(Observed::Applied(report(vec![unchanged("a")])), T0 + 2000));
    assert_eq!(condition(&rendered, "Ready").status, "True", "{rendered:#?}");
    assert_eq!(rendered.consecutive_failures, 0);
}

#[test]
fn a_pass_that_finds_everything_as_it_was_changes_nothing() {
    let checked_at = |ms: u64, at: i64| {
        let mut p = pass(Observed::Applied(report(vec![unchanged("a")])), at);
        p.next_checks.insert("a".into(), std::time::UNIX_EPOCH + Duration::from_millis(ms));
        p
    };
    let first = next_status(&ManifestStatus::default(), &checked_at(T0 as u64 + 300_000, T0));
    assert_eq!(first.resources[0].next_check.as_deref(), Some("2023-11-14T22:18:20Z"));
    // The next check moved on, and nothing else: not worth a write.
    let second = next_status(&first, &checked_at(T0 as u64 + 900_000, T0 + 300_000));
    assert_eq!(second.resources[0].next_check.as_deref(), Some("2023-11-14T22:28:20Z"));
    assert!(!changed(&first, &second), "{first:#?}\n{second:#?}");
    let after_apply = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let quiet = next_status(&after_apply, &pass(Observed::Applied(report(vec![unchanged("a")])), T0 + 300_000));
    assert_eq!(condition(&quiet, "Ready").reason, "Applied", "a quiet pass keeps the last change's reason");
    assert!(!changed(&after_apply, &quiet), "{after_apply:#?}\n{quiet:#?}");
    assert_eq!(quiet.resources[0].message.as_deref(), Some("applied: create"), "the last change's message stays");
    let third = next_status(&first, &pass(Observed::Applied(report(vec![applied("a")])), T0 + 600_000));
    assert!(changed(&first, &third));
    assert_eq!(
        condition(&third, "Ready").last_transition_time,
        condition(&first, "Ready").last_transition_time,
        "Ready stayed True: its transition time does not move"
    );
}

#[test]
fn a_failure_names_the_root_cause_and_counts_for_the_backoff() {
    let outcomes = vec![
        ("data_dir", Standing::Failed(action_failed())),
        ("app", Standing::Blocked { by: "data_dir".into() }),
        ("child", Standing::Blocked { by: "data_dir".into() }),
        unchanged("other"),
    ];
    let ok = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("data_dir")])), T0));
    let failed = next_status(&ok, &pass(Observed::Applied(report(outcomes.clone())), T0 + 1000));
    let ready = condition(&failed, "Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "ActionFailed"));
    assert_eq!(ready.message, "waiting on data_dir: action create failed with exit code 1: disk full; 2 blocked");
    assert_eq!(ready.last_transition_time, format_time(T0 + 1000), "Ready flipped");
    assert_eq!(condition(&failed, "Reconciling").status, "True");
    let app = failed.resources.iter().find(|r| r.name == "child").unwrap();
    assert_eq!(
        (app.status.as_str(), app.blocked_by.as_deref()),
        ("BLOCKED", Some("data_dir")),
        "the root, not the next"
    );
    assert_eq!(failed.last_applied_revision.as_deref(), Some("rev1"), "kept from the last success");
    assert_eq!(failed.consecutive_failures, 1);
    let again = next_status(&failed, &pass(Observed::Applied(report(outcomes)), T0 + 2000));
    assert_eq!(again.consecutive_failures, 2);
    assert_eq!(condition(&again, "Ready").last_transition_time, format_time(T0 + 1000), "no flip, no move");
}

#[test]
fn ready_names_a_built_in_s_refusal_in_its_own_words_bounded_and_masked() {
    // What builtin/kubernetes answers for a 403: no process, so no exit code.
    let refusal = "configmaps \"made\" is forbidden: User \"system:serviceaccount:c2:limited\" cannot patch \
                   resource \"configmaps\" in API group \"\" in the namespace \"c2\" (token s3cr3t)";
    let outcome = crate::engine::executor::Outcome {
        exit: Exit::Failed,
        stdout: b"applying ConfigMap made\n".to_vec(),
        stderr: format!("{refusal}\n").into_bytes(),
        elapsed: Duration::ZERO,
    };
    let mask = Mask::of([json!("s3cr3t")].iter());
    // Masked here even where the engine did not mask it first.
    let error = ResourceError::exit(Phase::Action("apply".into()), &outcome);
    let failed = next_status(
        &ManifestStatus::default(),
        &pass(Observed::Applied(report_masked(vec![("cm", Standing::Failed(error))], mask)), T0),
    );
    let ready = condition(&failed, "Ready");
    let masked = refusal.replace("s3cr3t", "***");
    assert_eq!(ready.message, format!("waiting on cm: action apply failed: {masked}"));
    assert!(!ready.message.contains("exit code"), "{}", ready.message);
    let whole = failed.resources[0].message.as_deref().unwrap();
    assert_eq!(whole, format!("action apply failed: {masked}\n    stdout: applying ConfigMap made"));

    // A 10 KiB error line is cut to the condition's bound, with "…".
    let long = crate::engine::executor::Outcome { stderr: vec![b'x'; 10 * 1024], ..outcome };
    let error = ResourceError::exit(Phase::Action("apply".into()), &long);
    let failed = next_status(
        &ManifestStatus::default(),
        &pass(Observed::Applied(report(vec![("cm", Standing::Failed(error))])), T0),
    );
    let ready = condition(&failed, "Ready");
    assert!(ready.message.starts_with("waiting on cm: action apply failed: xxx"), "{}", ready.message);
    assert!(ready.message.ends_with("x…") && ready.message.len() <= MESSAGE_LIMIT + "…".len(), "{}", ready.message);
}

#[test]
fn an_invalid_manifest_is_stalled_and_keeps_what_was_observed() {
    let ok = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let invalid = Observed::Invalid { reason: "InvalidManifest", message: "dependency cycle: a -> b -> a".into() };
    let stalled = next_status(&ok, &pass(invalid, T0 + 1000));
    assert_eq!(condition(&stalled, "Stalled").status, "True");
    assert_eq!(condition(&stalled, "Ready").message, "dependency cycle: a -> b -> a");
    assert_eq!(condition(&stalled, "Reconciling").status, "False");
    assert_eq!(stalled.resources, ok.resources);
    assert_eq!(stalled.last_attempted_revision, ok.last_attempted_revision, "nothing was attempted");
}

#[test]
fn a_suspended_manifest_keeps_its_readiness() {
    let ok = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let suspended = next_status(&ok, &pass(Observed::Suspended, T0 + 1000));
    assert_eq!(condition(&suspended, "Ready"), condition(&ok, "Ready"));
    assert_eq!(condition(&suspended, "Reconciling").reason, "Suspended");
    assert_eq!(suspended.resources, ok.resources);
}

#[test]
fn drift_corrected_on_consecutive_passes_is_thrashing() {
    let drift = |now: Status| Drift { resource: "a".into(), now };
    let mut status = ManifestStatus::default();
    let mut reasons = Vec::new();
    for i in 0..4 {
        let mut p = pass(Observed::Applied(report(vec![applied("a"), unchanged("b")])), T0 + i * 1000);
        p.drifts = vec![drift(Status::Missing)];
        status = next_status(&status, &p);
        reasons.push(condition(&status, "Ready").reason.clone());
    }
    assert_eq!(reasons, ["DriftCorrected", "DriftCorrected", "Thrashing", "Thrashing"]);
    assert_eq!(status.resources[0].drift_streak, 4);
    assert!(condition(&status, "Ready").message.contains("a was corrected for drift on 4 consecutive passes"));
    let calm = next_status(&status, &pass(Observed::Applied(report(vec![unchanged("a"), unchanged("b")])), T0 + 9000));
    assert_eq!(calm.resources[0].drift_streak, 0);
    assert_eq!(condition(&calm, "Ready").reason, "UpToDate");
    let still = next_status(&calm, &pass(Observed::Applied(report(vec![unchanged("a"), unchanged("b")])), T0 + 10_000));
    assert!(!changed(&calm, &still), "quiet passes change nothing");
}

#[test]
fn huge_states_are_capped() {
    let big = json!({"blob": "x".repeat(10_000)});
    let status = next_status(
        &ManifestStatus::default(),
        &pass(Observed::Applied(report(vec![("a", Standing::Valid { state: big, applied: None })])), T0),
    );
    assert_eq!(status.resources[0].state, Some(json!({"truncated": true, "bytes": 10_011})));
}

#[test]
fn the_status_stays_bounded_whatever_happens() {
    let entry = |i: usize| Entry {
        id: format!("run-{i}"),
        target: target::resource("a"),
        revision: "r".into(),
        event: Event::DriftDetected,
        at: T0,
        detail: json!({"message": "m".repeat(900)}),
    };
    let resources: Vec<(String, Standing)> = (0..400)
        .map(|i| {
            (
                format!("resource_{i}"),
                Standing::Failed(ResourceError::new(Phase::State, Cause::Render("e".repeat(2000)))),
            )
        })
        .collect();
    let mut p = pass(Observed::Applied(report(resources.iter().map(|(n, o)| (n.as_str(), o.clone())).collect())), T0);
    p.history = (0..10_000).map(entry).collect();
    let status = next_status(&ManifestStatus::default(), &p);
    let size = serde_json::to_string(&status).unwrap().len();
    assert!(size <= STATUS_LIMIT, "{size} bytes");
    assert!(status.resources.iter().all(|r| r.message.is_some()), "messages are shortened, not dropped");
}

#[test]
fn history_round_trips_through_the_status() {
    let entries = vec![Entry {
        id: "r1".into(),
        target: target::MANIFEST.into(),
        revision: "abc".into(),
        event: Event::RunStarted,
        at: T0 + 123,
        detail: json!({}),
    }];
    let mut p = pass(Observed::Applied(report(vec![unchanged("a")])), T0);
    p.history = entries.clone();
    let status = next_status(&ManifestStatus::default(), &p);
    assert_eq!(history_entries(&status), entries);
}

#[test]
fn messages_are_cut() {
    assert_eq!(cut("short"), "short");
    assert!(cut(&"é".repeat(2000)).len() <= MESSAGE_LIMIT + "…".len());
}

#[test]
fn progress_left_by_a_pass_that_ran_or_crashed_goes_when_a_pass_ends() {
    let first = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let mut during = first.clone();
    during.progress = Some("a/create 40%".into());
    during.resources[0].progress = Some(crate::crd::ActionProgress {
        action: "create".into(),
        percent: Some(40.0),
        started_at: "2026-11-24T00:00:00Z".into(),
    });
    let not_run = Observed::NotRun { reason: "SecretNotFound", message: "gone".into() };
    for observed in [Observed::Applied(report(vec![unchanged("a")])), not_run] {
        let after = next_status(&during, &pass(observed, T0 + 1000));
        assert_eq!(after.progress.as_deref(), Some(""), "cleared explicitly");
        assert!(after.resources.iter().all(|r| r.progress.is_none()), "{after:#?}");
    }
}

/// The `""` values a status holds where the CRD's schema is not nullable: a real API server's
/// server-side apply turns an applied empty string into `null`, and refuses such a `null`
/// (422 "must be of type string"), so each of these fails the whole status write.
pub(crate) fn empty_strings_refused(schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.is_empty() && schema.get("nullable") != Some(&Value::Bool(true)) => out.push(at.into()),
        Value::Object(fields) => {
            for (key, field) in fields {
                let inner = schema["properties"].get(key).or_else(|| schema.get("additionalProperties"));
                if let Some(inner) = inner.filter(|s| s.is_object()) {
                    empty_strings_refused(inner, field, &format!("{at}.{key}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                empty_strings_refused(&schema["items"], item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Every kind of pass gives a status that a real server's server-side apply accepts: no empty
/// string where the schema refuses `null` (the Ready/Reconciling/Stalled conditions had empty
/// messages, and every status write on Kubernetes 1.20 failed with a 422).
#[test]
fn no_status_sends_an_empty_string_the_server_would_refuse() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(crate::crd::Manifest::crd()).unwrap();
    let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"].clone();
    assert!(schema["properties"]["conditions"].is_object(), "the status schema is where it was: {schema:#}");
    let first = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let mut during = first.clone();
    during.progress = Some("a/create 40%".into());
    let passes = [
        Observed::Applied(report(vec![applied("a"), unchanged("b")])),
        Observed::Applied(report(vec![unchanged("a")])),
        Observed::Applied(report(vec![("a", Standing::Failed(action_failed()))])),
        Observed::Invalid { reason: "InvalidManifest", message: "dependency cycle: a -> b -> a".into() },
        Observed::NotRun { reason: "SecretNotFound", message: "gone".into() },
        Observed::Suspended,
    ];
    for (i, observed) in passes.into_iter().enumerate() {
        for old in [&ManifestStatus::default(), &first, &during] {
            let status = next_status(old, &pass(observed.clone(), T0 + 1000 * i as i64));
            let mut refused = Vec::new();
            empty_strings_refused(&schema, &serde_json::to_value(&status).unwrap(), "status", &mut refused);
            assert!(refused.is_empty(), "pass {i}: {refused:?} in {status:#?}");
        }
    }
    // The check itself: an empty message is what it finds.
    let mut wrong = serde_json::to_value(&first).unwrap();
    wrong["conditions"][0]["message"] = json!("");
    let mut refused = Vec::new();
    empty_strings_refused(&schema, &wrong, "status", &mut refused);
    assert_eq!(refused, ["status.conditions[0].message"]);
}

/// A removal that failed stops the pass: Ready is False with the failure in its own words,
/// though every declared resource is VALID, and the failures count toward the backoff.
#[test]
fn a_failed_removal_keeps_the_object_from_ready_and_names_the_resource() {
    let ready = next_status(&ManifestStatus::default(), &pass(Observed::Applied(report(vec![applied("a")])), T0));
    let mut failing = pass(Observed::Applied(report(vec![unchanged("a")])), T0 + 1000);
    failing.removals = vec![
        RemovalEntry {
            name: "old".into(),
            type_name: "builtin/kubernetes".into(),
            removal: Removal::Failed(action_failed()),
        },
        RemovalEntry {
            name: "under".into(),
            type_name: "builtin/kubernetes".into(),
            removal: Removal::Kept { reason: "old depends on it".into() },
        },
    ];
    let failed = next_status(&ready, &failing);
    let c = condition(&failed, "Ready");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "RemovalFailed"));
    assert!(c.message.starts_with("removing old (no longer declared): ") && c.message.contains("disk full"), "{c:?}");
    assert_eq!(failed.consecutive_failures, 1);
    assert_eq!(failed.last_applied_revision, ready.last_applied_revision);
    assert!(!failing.succeeded());
}

/// The deletion guard: Ready False with its own reason and the message that says what would
/// go and how to allow it; not a failure (no backoff), and the resources as planned.
#[test]
fn a_guarded_plan_says_so_in_ready_and_is_no_failure() {
    let plan = Plan {
        manifest: "ns/m".into(),
        run_id: "r".into(),
        entries: report(vec![unchanged("a")]).entries().to_vec(),
        removals: Vec::new(),
        held: 3,
        notes: Vec::new(),
        warnings: Vec::new(),
        replacements: Vec::new(),
        mask: Mask::default(),
    };
    let message = "would delete 2 of the 3 resources it holds: b, c".to_string();
    let status =
        next_status(&ManifestStatus::default(), &pass(Observed::Guarded { plan, message: message.clone() }, T0));
    let ready = condition(&status, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str(), ready.message.as_str()),
        ("False", "DeletionGuarded", message.as_str())
    );
    assert_eq!(condition(&status, "Reconciling").reason, "DeletionGuarded");
    assert_eq!(condition(&status, "Stalled").status, "False");
    assert_eq!(status.consecutive_failures, 0);
    assert_eq!(status.resources_summary.as_deref(), Some("1/1"));
    assert_eq!(status.last_applied_revision, None);
}

/// Bounding a status drops the oldest history first — but never what the inventory holds.
#[test]
fn bounding_keeps_the_inventory() {
    let mut status = ManifestStatus::default();
    let big = "x".repeat(1024);
    let entry = |target: &str, event: Event, at: i64| Entry {
        id: "r".into(),
        target: target.into(),
        revision: "1".into(),
        event,
        at,
        detail: json!({"manifest": "manifest", "declaration": {"type": "builtin/file", "config": {"text": big}}}),
    };
    let mut entries = vec![entry("resource/kept", Event::ResourceInventoried, 0)];
    entries.extend((1..400).map(|at| entry("manifest", Event::RunStarted, at)));
    status.history = history_from(&entries);
    bound(&mut status);
    let size = serde_json::to_string(&status).unwrap().len();
    assert!(size <= STATUS_LIMIT && status.history.len() < 400, "{size} bytes, {} entries", status.history.len());
    assert_eq!(status.history[0].target, "resource/kept");
    assert_eq!(status.history.last().unwrap().at, entries.last().map(|e| format_time(e.at)).unwrap());
}
