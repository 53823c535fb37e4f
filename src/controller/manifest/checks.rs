//! Adaptive drift checks for the Manifests this replica reconciles: one
//! [`Schedule`](crate::engine::schedule::Schedule) per object, in memory (a restarted controller
//! reads every state once, then backs off again).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use kube::ResourceExt;

use super::validate::Intervals;
use crate::crd::Manifest;
use crate::engine::plan::{ResourceEntry, Standing};
use crate::engine::schedule::{AssumeValid, Schedule};
use crate::watches::fights::{FREE_CORRECTIONS, QUIET, correction_delay};

#[derive(Default)]
pub struct Checks {
    by_object: Mutex<HashMap<String, Schedule>>,
    /// Resources a watch saw changed, by object: read on the next pass to start, which
    /// tells how long their correction took.
    woken: Mutex<HashMap<String, HashMap<String, SeenChange>>>,
    /// Corrections in a row after a watch saw a resource changed, by object: a field another
    /// writer takes back again and again.
    fights: Mutex<HashMap<String, HashMap<String, Streak>>>,
}

/// Corrections of one resource in a row: none apart by more than [`QUIET`] intervals.
#[derive(Debug, Clone, Copy)]
struct Streak {
    corrections: usize,
    last: Instant,
}

/// A resource whose corrections look like a fight with another writer.
#[derive(Debug, Clone, PartialEq)]
pub struct Fight {
    pub resource: String,
    /// Corrections in a row.
    pub corrections: usize,
}

/// A resource a watch saw changed: when first, since a pass last took it.
#[derive(Debug, Clone, Copy, Default)]
struct SeenChange {
    /// Seen before the running pass started: it reads it.
    taken: Option<Instant>,
    /// Seen since: the next pass reads it.
    pending: Option<Instant>,
}

/// When a pass's resources are next read, and when the next pass should run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NextChecks {
    pub by_resource: BTreeMap<String, SystemTime>,
    pub next_pass: Duration,
    /// How long after a watch saw a change each resource it corrected was applied.
    pub corrected_after: Vec<Duration>,
    /// Resources corrected [`FREE_CORRECTIONS`] times in a row or more.
    pub fights: Vec<Fight>,
}

fn key(obj: &Manifest) -> String {
    obj.uid().unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

impl Checks {
    /// The resources of `obj` that need no check at `now` (for the revision they were read
    /// at: a spec edit or a changed Secret reads everything). Other intervals start the object's
    /// schedule again. Resources a watch saw changed are read.
    pub fn not_due(&self, obj: &Manifest, intervals: Intervals, now: SystemTime) -> AssumeValid {
        let mut by_object = self.by_object.lock().expect("checks lock");
        let fresh = || Schedule::new(intervals.check, intervals.max);
        let schedule = by_object.entry(key(obj)).or_insert_with(fresh);
        if schedule.interval() != intervals.check || schedule.max_interval() != intervals.max {
            *schedule = fresh();
        }
        if let Some(woken) = self.woken.lock().expect("checks lock").get_mut(&key(obj)) {
            for (resource, change) in woken.iter_mut() {
                schedule.forget(resource);
                change.taken = change.taken.or(change.pending.take());
            }
        }
        schedule.not_due(now)
    }

    /// Takes in a pass of `obj` that ran at `now`. `entries`: what it ended with, when it
    /// applied; otherwise (failed, awaiting approval, …) every state is read next time.
    pub fn record(
        &self,
        obj: &Manifest,
        now: SystemTime,
        revision: &str,
        assumed: &AssumeValid,
        entries: Option<&[ResourceEntry]>,
    ) -> NextChecks {
        let mut by_object = self.by_object.lock().expect("checks lock");
        let Some(schedule) = by_object.get_mut(&key(obj)) else { return NextChecks::default() };
        let next_pass = schedule.after_pass(now, revision, assumed, entries);
        let mut corrected_after = Vec::new();
        let mut woken = self.woken.lock().expect("checks lock");
        let mut fights = self.fights.lock().expect("checks lock");
        let fought = fights.entry(key(obj)).or_default();
        let quiet = schedule.interval().saturating_mul(QUIET);
        if let Some(changes) = woken.get_mut(&key(obj)) {
            for e in entries.unwrap_or_default() {
                if let Some(seen) = changes.get(&e.name).and_then(|c| c.taken)
                    && matches!(&e.standing, Standing::Valid { applied: Some(_), .. })
                {
                    corrected_after.push(seen.elapsed());
                    let streak =
                        fought.entry(e.name.clone()).or_insert(Streak { corrections: 0, last: Instant::now() });
                    if streak.last.elapsed() > quiet {
                        streak.corrections = 0;
                    }
                    *streak = Streak { corrections: streak.corrections + 1, last: Instant::now() };
                }
            }
            // Those seen while the pass ran are read by the next.
            changes.values_mut().for_each(|change| change.taken = None);
            changes.retain(|_, change| change.pending.is_some());
            changes.keys().for_each(|resource| schedule.forget(resource));
            if changes.is_empty() {
                woken.remove(&key(obj));
            }
        }
        drop(woken);
        fought.retain(|_, streak| streak.last.elapsed() <= quiet);
        let mut fights_now: Vec<Fight> = fought
            .iter()
            .filter(|(_, streak)| streak.corrections >= FREE_CORRECTIONS)
            .map(|(resource, streak)| Fight { resource: resource.clone(), corrections: streak.corrections })
            .collect();
        fights_now.sort_by(|a, b| b.corrections.cmp(&a.corrections).then(a.resource.cmp(&b.resource)));
        if fought.is_empty() {
            fights.remove(&key(obj));
        }
        drop(fights);
        let by_resource = entries
            .unwrap_or_default()
            .iter()
            .filter_map(|e| Some((e.name.clone(), schedule.next_check(&e.name)?)))
            .collect();
        NextChecks { by_resource, next_pass, corrected_after, fights: fights_now }
    }

    /// Has resource `resource` of the object with uid `uid` read on its next pass: a watch saw
    /// it changed at `seen`. Returns how long that pass should wait: long, and longer, for a
    /// resource another writer keeps changing back ([`correction_delay`]).
    pub fn mark_due(&self, uid: &str, resource: &str, seen: Instant) -> Duration {
        let interval = match self.by_object.lock().expect("checks lock").get_mut(uid) {
            Some(schedule) => {
                schedule.forget(resource);
                schedule.interval()
            }
            None => Duration::from_secs(300),
        };
        let fights = self.fights.lock().expect("checks lock");
        let streak = fights.get(uid).and_then(|f| f.get(resource));
        let corrections =
            streak.filter(|s| s.last.elapsed() <= interval.saturating_mul(QUIET)).map_or(0, |s| s.corrections);
        drop(fights);
        let mut woken = self.woken.lock().expect("checks lock");
        let change = woken.entry(uid.to_string()).or_default().entry(resource.to_string()).or_default();
        // A second change before a pass read the first: the first is when it began.
        change.pending = change.pending.or(Some(seen));
        correction_delay(corrections, interval)
    }

    /// Forgets a deleted object.
    pub fn forget(&self, obj: &Manifest) {
        self.by_object.lock().expect("checks lock").remove(&key(obj));
        self.woken.lock().expect("checks lock").remove(&key(obj));
        self.fights.lock().expect("checks lock").remove(&key(obj));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::plan::Ran;
    use serde_json::json;

    fn entry(name: &str, applied: bool) -> ResourceEntry {
        ResourceEntry {
            name: name.into(),
            type_name: "builtin/kubernetes".into(),
            standing: Standing::Valid {
                state: json!({}),
                applied: applied.then(|| vec![Ran { action: "apply".into(), results: vec![] }]),
            },
            elapsed: Duration::ZERO,
            config: Some(json!({})),
        }
    }

    /// A watch saw `settings` changed: the next pass reads it (and only it: `web` keeps its
    /// schedule), and a change seen while a pass runs is read by the pass after it.
    /// Another writer that changes a resource back at once, for ten minutes, at an interval of
    /// five: corrected 3 times at once, then after 10 s, 20 s, … up to the interval.
    #[test]
    fn a_resource_changed_back_again_and_again_is_corrected_after_a_growing_wait() {
        let interval = Duration::from_secs(300);
        let waits: Vec<u64> = (0..10).map(|n| correction_delay(n, interval).as_secs()).collect();
        assert_eq!(waits, [0, 0, 0, 10, 20, 40, 80, 160, 300, 300]);
        let (mut at, mut corrections) = (Duration::ZERO, 0);
        let mut times = Vec::new();
        while at < Duration::from_secs(600) {
            times.push(at.as_secs());
            corrections += 1;
            at += correction_delay(corrections, interval);
        }
        assert_eq!(times, [0, 0, 0, 10, 30, 70, 150, 310], "at most 10 in the first 10 minutes");
        assert_eq!(correction_delay(40, interval), interval, "then one per interval");
    }

    #[test]
    fn a_change_seen_has_its_resource_read_by_the_next_pass_and_timed_when_corrected() {
        let checks = Checks::default();
        let mut obj = Manifest::new("app", serde_norway::from_str("resources: {}\n").unwrap());
        obj.metadata.uid = Some("u1".into());
        let hour = Duration::from_secs(3600);
        let intervals = Intervals { check: hour, retry: hour, max: hour };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let assumed = checks.not_due(&obj, intervals, now);
        checks.record(&obj, now, "r1", &assumed, Some(&[entry("settings", false), entry("web", false)]));
        let later = now + Duration::from_secs(60);
        assert_eq!(checks.not_due(&obj, intervals, later).len(), 2, "both taken for granted");

        checks.mark_due("u1", "settings", Instant::now());
        let assumed = checks.not_due(&obj, intervals, later);
        assert!(assumed.get("r1", "settings").is_none(), "read now");
        assert!(assumed.get("r1", "web").is_some(), "not read: keeps its schedule");
        // Seen again while that pass runs: the pass after it reads it again.
        checks.mark_due("u1", "settings", Instant::now());
        let next = checks.record(&obj, later, "r1", &assumed, Some(&[entry("settings", true), entry("web", false)]));
        assert_eq!(next.corrected_after.len(), 1, "the correction is timed from the change seen");
        let assumed = checks.not_due(&obj, intervals, later);
        assert!(assumed.get("r1", "settings").is_none(), "read again: it changed during the last pass");
        let next = checks.record(&obj, later, "r1", &assumed, Some(&[entry("settings", false), entry("web", false)]));
        assert!(next.corrected_after.is_empty(), "found as declared: nothing corrected");
        assert_eq!(checks.not_due(&obj, intervals, later).len(), 2, "nothing left to read");
    }
}
