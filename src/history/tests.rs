//! The queries' semantics, checked on both stores with the same crafted log.

use serde_json::json;

use super::*;

pub(crate) fn entry(id: &str, target: &str, revision: &str, event: Event, at: i64) -> Entry {
    Entry { id: id.into(), target: target.into(), revision: revision.into(), event, at, detail: json!({}) }
}

/// Run r1 (revision A) applied `a`; run r2 (B) failed on `a` and blocked `b`; run r3 (C)
/// crashed while `b`'s action ran; a plan (C) finished.
pub(crate) fn crafted() -> Vec<Entry> {
    use Event::*;
    let a = target::resource("a");
    let b = target::resource("b");
    vec![
        entry("r1", target::MANIFEST, "A", RunStarted, 1),
        entry("r1", &a, "A", ResourceMissing, 2),
        entry("r1", &target::action("a", "create"), "A", ActionStarted, 3),
        entry("r1", &target::action("a", "create"), "A", ActionFinishedSuccessfully, 4),
        entry("r1", &a, "A", ResourceApplied, 5),
        entry("r1", target::MANIFEST, "A", RunFinishedSuccessfully, 6),
        entry("r2", target::MANIFEST, "B", RunStarted, 7),
        entry("r2", &a, "B", ResourceStale, 8),
        entry("r2", &target::action("a", "fix"), "B", ActionStarted, 9),
        entry("r2", &target::action("a", "fix"), "B", ActionFailed, 10),
        entry("r2", &a, "B", ResourceFailed, 11),
        entry("r2", &b, "B", ResourceBlocked, 12),
        entry("r2", target::MANIFEST, "B", RunFailed, 13),
        entry("r3", target::MANIFEST, "C", RunStarted, 14),
        entry("r3", &a, "C", ResourceValid, 15),
        entry("r3", &target::action("b", "create"), "C", ActionStarted, 16),
        entry("p1", target::MANIFEST, "C", PlanStarted, 17),
        entry("p1", target::MANIFEST, "C", PlanFinished, 18),
    ]
}

fn revision(entry: Option<Entry>) -> Option<String> {
    entry.map(|e| e.revision)
}

fn ids(entries: &[Entry]) -> Vec<(&str, &str)> {
    entries.iter().map(|e| (e.id.as_str(), e.target.as_str())).collect()
}

/// Every query, on a log holding [`crafted`].
pub(crate) fn check_queries(log: &dyn History) {
    assert_eq!(revision(latest_applied(log, None).unwrap()), Some("A".into()));
    assert_eq!(revision(latest_failed(log, None).unwrap()), Some("B".into()));
    assert_eq!(revision(latest_applied(log, Some("a")).unwrap()), Some("C".into()), "found VALID by r3");
    assert_eq!(revision(latest_failed(log, Some("a")).unwrap()), Some("B".into()));
    assert_eq!(latest_applied(log, Some("b")).unwrap(), None);

    assert_eq!(ids(&in_progress(log, None).unwrap()), [("r3", "manifest")], "the crashed run, not the plan");
    assert_eq!(ids(&in_progress(log, Some("b")).unwrap()), [("r3", "resource/b/action/create")]);
    assert!(in_progress(log, Some("a")).unwrap().is_empty(), "a's actions all ended");

    let recent: Vec<i64> = log.recent("", 3).unwrap().iter().map(|e| e.at).collect();
    assert_eq!(recent, [18, 17, 16], "newest first");
    let of_a: Vec<i64> = log.recent("resource/a", 100).unwrap().iter().map(|e| e.at).collect();
    assert_eq!(of_a, [15, 11, 10, 9, 8, 5, 4, 3, 2], "a and its actions, not b");
    assert!(log.recent("resource/ab", 10).unwrap().is_empty());
    // Each resource's newest entry among these events, oldest first: one per target.
    let each = log.latest_each("resource/", &[Event::ResourceApplied, Event::ResourceValid, Event::ResourceBlocked]);
    let each: Vec<(String, i64)> = each.unwrap().into_iter().map(|e| (e.target, e.at)).collect();
    assert_eq!(each, [("resource/b".to_string(), 12), ("resource/a".to_string(), 15)]);
    assert!(log.latest_each("resource/", &[Event::ResourceDeclined]).unwrap().is_empty());

    // A later run closes what the crash left open.
    log.append(&[
        entry("r3", target::MANIFEST, "C", Event::RunInterrupted, 19),
        entry("r3", &target::action("b", "create"), "C", Event::ActionInterrupted, 19),
    ])
    .unwrap();
    assert!(in_progress(log, None).unwrap().is_empty());
    assert!(in_progress(log, Some("b")).unwrap().is_empty());
    assert_eq!(revision(latest_applied(log, None).unwrap()), Some("A".into()), "an interruption is no success");
}

#[test]
fn memory_log_answers_the_queries() {
    let log = MemoryLog::new();
    log.append(&crafted()).unwrap();
    check_queries(&log);
}

#[test]
fn a_bounded_memory_log_keeps_the_newest_entries() {
    let log = MemoryLog::bounded(5);
    log.append(&crafted()).unwrap();
    let kept: Vec<i64> = log.entries().iter().map(|e| e.at).collect();
    assert_eq!(kept, [14, 15, 16, 17, 18]);
}

/// A bounded log (a Manifest's status) keeps what the inventory stands on beyond its bound:
/// each resource's newest inventory entry that holds it — not one that let it go, nor one
/// superseded.
#[test]
fn a_bounded_memory_log_keeps_what_the_inventory_stands_on() {
    let entry = |target: &str, event: Event, at: i64| Entry {
        id: "r".into(),
        target: target.into(),
        revision: "1".into(),
        event,
        at,
        detail: serde_json::json!({"manifest": "m", "declaration": {"type": "builtin/file"}}),
    };
    let log = MemoryLog::bounded(2);
    log.append(&[
        entry("resource/a", Event::ResourceInventoried, 1),
        entry("resource/b", Event::ResourceInventoried, 2),
        entry("resource/gone", Event::ResourceInventoried, 3),
        entry("resource/b", Event::ResourceInventoried, 4),
        entry("resource/gone", Event::ResourceDeleted, 5),
    ])
    .unwrap();
    log.append(&(6..10).map(|at| entry("manifest", Event::RunStarted, at)).collect::<Vec<_>>()).unwrap();
    let kept: Vec<i64> = log.entries().iter().map(|e| e.at).collect();
    assert_eq!(kept, [1, 4, 8, 9], "a and b's newest, then the newest 2");
    let held = crate::history::inventory::inventory(&log, "m").unwrap();
    assert_eq!(held.keys().collect::<Vec<_>>(), ["a", "b"]);
}

/// A cut text, ellipsis included, is never longer than the limit: the API server refuses an
/// event's note of more than 1024 bytes.
#[test]
fn a_cut_text_fits_its_limit() {
    let long = "é".repeat(600);
    let cut = cut_to(&long, 1024);
    assert!(cut.len() <= 1024 && cut.ends_with('…'), "{} bytes", cut.len());
    assert_eq!(cut_to("short", 1024), "short");
}

#[test]
fn event_names_round_trip_and_pair_up() {
    for &event in <Event as strum::VariantArray>::VARIANTS {
        assert_eq!(Event::parse(event.as_str()), Some(event));
        assert_eq!(serde_json::to_value(event).unwrap(), event.as_str());
        for closer in event.closed_by() {
            assert_eq!(closer.closes(), Some(event));
        }
    }
    assert_eq!(Event::parse("nonsense"), None);
}

#[test]
fn prefixes_select_whole_path_segments() {
    assert!(selects("resource/a", "resource/a"));
    assert!(selects("resource/a", "resource/a/action/x"));
    assert!(!selects("resource/a", "resource/ab"));
    assert!(selects("resource/a/action/", "resource/a/action/x"));
    assert!(selects("", "manifest"));
}
