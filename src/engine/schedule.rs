//! Adaptive drift checks: how often each resource's state is read by a continuous loop (the
//! controller, `deployster reconcile`).
//!
//! A resource found VALID on [`STEADY_AFTER`] checks in a row is checked half as often, and so
//! on, up to the maximum interval; drift (it had to be applied) or a change (it renders to
//! another config) puts it back to the base interval. Between its checks a resource whose
//! config renders as it did is taken as VALID with the state it was last read with: its state
//! action does not run (see [`super::context::RunOptions::assume_valid`]). Pure: the clock is
//! passed in.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::plan::{ResourceEntry, Standing};

/// VALID checks in a row after which a resource's interval doubles.
pub const STEADY_AFTER: u32 = 3;

/// A pass this early — a resource's current interval divided by `EARLY` — still checks it:
/// loops may spread their passes by starting them up to that much early, never late, so that
/// no resource goes unread for longer than its interval.
pub const EARLY: u32 = 10;

/// A pass that reads any state also reads those due within the base interval divided by
/// `GATHER`: one pass per interval rather than one per resource whose checks drifted apart (a
/// change a watch saw, a failure, reads one resource out of turn).
pub const GATHER: u32 = 2;

/// What a resource was last read as, to be taken for granted until its next check. Kept small —
/// a controller keeps one for every resource of every Manifest: a digest of the config it
/// rendered to (if it renders to another, it is read anyway) and its state as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assumed {
    config: [u8; 16],
    state: Box<str>,
}

impl Assumed {
    pub fn new(config: &Value, state: &Value) -> Self {
        Self { config: digest(config), state: state.to_string().into_boxed_str() }
    }

    /// Whether `config` is the config it was read with.
    pub fn renders_as(&self, config: &Value) -> bool {
        self.config == digest(config)
    }

    /// The state it was read with.
    pub fn state(&self) -> Value {
        serde_json::from_str(&self.state).expect("a state kept as JSON reads back")
    }
}

/// The first 128 bits of the SHA-256 of `config`'s JSON (keys in their rendered order).
fn digest(config: &Value) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(config.to_string().as_bytes());
    hash[..16].try_into().expect("16 of 32 bytes")
}

/// Resources whose state need not be read now, by name — for the manifest revision they were
/// read at: a pass of another revision (an edited manifest, another type or plug) reads all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assumptions {
    pub revision: String,
    pub resources: HashMap<String, Assumed>,
}

impl Assumptions {
    /// What resource `name` is taken for in a pass of `revision`, if anything.
    pub fn get(&self, revision: &str, name: &str) -> Option<&Assumed> {
        self.resources.get(name).filter(|_| self.revision == revision)
    }

    /// Whether a pass of `revision` took `entry` for VALID without reading its state.
    pub fn took(&self, revision: &str, entry: &ResourceEntry) -> bool {
        let valid = matches!(entry.standing, Standing::Valid { applied: None, .. });
        valid && self.get(revision, &entry.name).zip(entry.config.as_ref()).is_some_and(|(a, c)| a.renders_as(c))
    }

    pub fn len(&self) -> usize {
        self.resources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }
}

pub type AssumeValid = Arc<Assumptions>;

#[derive(Debug, Clone, PartialEq)]
struct Tracked {
    seen: Assumed,
    /// VALID checks in a row with this config.
    streak: u32,
    next: SystemTime,
}

/// Each resource's next check.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: Duration,
    max_interval: Duration,
    /// The manifest revision the resources were read at.
    revision: String,
    resources: HashMap<String, Tracked>,
    /// Every resource of the last pass recorded, tracked or not.
    names: Vec<String>,
}

impl Schedule {
    /// Checks every `interval` at first, at most every `max_interval` (never less than
    /// `interval`) once steady.
    pub fn new(interval: Duration, max_interval: Duration) -> Self {
        Self {
            interval,
            max_interval: max_interval.max(interval),
            revision: String::new(),
            resources: HashMap::new(),
            names: Vec::new(),
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn max_interval(&self) -> Duration {
        self.max_interval
    }

    /// The interval after `streak` VALID checks in a row: doubled every [`STEADY_AFTER`].
    pub fn interval_after(&self, streak: u32) -> Duration {
        let doublings = (streak / STEADY_AFTER).min(16);
        self.interval.saturating_mul(1 << doublings).min(self.max_interval)
    }

    /// The resources that need no check at `now` (nor within a tenth of their interval: see
    /// [`EARLY`]) — nor, when the pass reads any state, within half the base interval (see
    /// [`GATHER`]).
    pub fn not_due(&self, now: SystemTime) -> AssumeValid {
        let due = |t: &Tracked| t.next <= now + self.interval_after(t.streak) / EARLY;
        let untracked = self.names.iter().any(|name| !self.resources.contains_key(name));
        let reading = untracked || self.resources.values().any(due);
        let gathered = |t: &Tracked| reading && t.next <= now + self.interval / GATHER;
        Arc::new(Assumptions {
            revision: self.revision.clone(),
            resources: self
                .resources
                .iter()
                .filter(|(_, t)| !due(t) && !gathered(t))
                .map(|(name, t)| (name.clone(), t.seen.clone()))
                .collect(),
        })
    }

    /// Takes in a pass of manifest `revision` that ran at `now` with `assumed` (from
    /// [`Schedule::not_due`]) and ended with `entries`. A resource that was read and found VALID
    /// as it was extends its streak; one that had to be applied, or renders to another config,
    /// starts again; one taken for granted keeps its time; any other (failed, pending, not
    /// reached) is checked next pass. Another revision starts everything again.
    pub fn record(&mut self, now: SystemTime, revision: &str, assumed: &Assumptions, entries: &[ResourceEntry]) {
        if self.revision != revision {
            self.revision = revision.to_string();
            self.resources.clear();
        }
        self.names = entries.iter().map(|e| e.name.clone()).collect();
        let mut kept = HashMap::with_capacity(entries.len());
        for entry in entries {
            let (Standing::Valid { state, applied }, Some(config)) = (&entry.standing, &entry.config) else { continue };
            let previous = self.resources.remove(&entry.name);
            let config = digest(config);
            let taken = applied.is_none() && assumed.get(revision, &entry.name).is_some_and(|a| a.config == config);
            if taken && let Some(previous) = previous {
                kept.insert(entry.name.clone(), previous);
                continue;
            }
            let streak = match (&previous, applied) {
                (Some(p), None) if p.seen.config == config => p.streak + 1,
                // First seen, drifted (applied), or changed: from the start.
                _ => 0,
            };
            let seen = Assumed { config, state: state.to_string().into_boxed_str() };
            kept.insert(entry.name.clone(), Tracked { seen, streak, next: now + self.interval_after(streak) });
        }
        self.resources = kept;
    }

    /// Has resource `name` read on the next pass (something saw it change): it is no longer
    /// taken for granted, and its interval starts again.
    pub fn forget(&mut self, name: &str) {
        self.resources.remove(name);
    }

    /// When resource `name` is next read, if it is tracked (else: on the next pass).
    pub fn next_check(&self, name: &str) -> Option<SystemTime> {
        self.resources.get(name).map(|t| t.next)
    }

    /// The earliest next check of any tracked resource.
    pub fn next_due(&self) -> Option<SystemTime> {
        self.resources.values().map(|t| t.next).min()
    }

    /// When the next pass should run after one that ended at `now`: at the earliest next
    /// check, at the latest one base interval on (a resource that is not tracked — failed, new —
    /// is checked every interval).
    pub fn next_pass(&self, now: SystemTime, untracked: bool) -> Duration {
        let base = self.interval;
        if untracked {
            return base;
        }
        self.next_due().map_or(base, |due| due.duration_since(now).unwrap_or(Duration::ZERO).min(self.max_interval))
    }

    /// Takes in a pass of `revision` that ran at `now` with `assumed`: `entries` when it applied
    /// (see [`Schedule::record`]); `None` when it did not (failed, awaiting approval, …), and
    /// then every state is read next time. Returns how long until the next pass
    /// ([`Schedule::next_pass`]).
    pub fn after_pass(
        &mut self,
        now: SystemTime,
        revision: &str,
        assumed: &Assumptions,
        entries: Option<&[ResourceEntry]>,
    ) -> Duration {
        match entries {
            Some(entries) => self.record(now, revision, assumed, entries),
            None => self.resources.clear(),
        }
        let entries = entries.unwrap_or_default();
        let untracked = entries.is_empty() || !entries.iter().all(|e| self.resources.contains_key(&e.name));
        self.next_pass(now, untracked)
    }
}

/// A budget of invocations per second, spread evenly: a token bucket holding at most one
/// second's worth. Pure: the clock is passed in.
#[derive(Debug, Clone)]
pub struct Budget {
    per_second: f64,
    tokens: f64,
    last: Option<std::time::Instant>,
}

impl Budget {
    pub fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second.max(1));
        Self { per_second, tokens: per_second, last: None }
    }

    /// Takes one invocation's token at `now`: how long the caller must wait before it may run.
    /// Tokens are taken in order, so waiting callers are spaced `1 / per_second` apart.
    pub fn take(&mut self, now: std::time::Instant) -> Duration {
        if let Some(last) = self.last {
            let earned = now.saturating_duration_since(last).as_secs_f64() * self.per_second;
            self.tokens = (self.tokens + earned).min(self.per_second);
        }
        self.last = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.tokens / self.per_second) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::plan::Ran;
    use serde_json::json;

    fn entry(name: &str, config: Value, state: Value, applied: bool) -> ResourceEntry {
        ResourceEntry {
            name: name.into(),
            type_name: "builtin/file".into(),
            standing: Standing::Valid {
                state,
                applied: applied.then(|| vec![Ran { action: "write".into(), results: vec![] }]),
            },
            elapsed: Duration::ZERO,
            config: Some(config),
        }
    }

    const MIN: Duration = Duration::from_secs(60);

    /// Runs passes the way a loop would: at each pass, reads what is due, records it.
    fn pass(schedule: &mut Schedule, now: SystemTime, entries: impl Fn(&Assumptions) -> Vec<ResourceEntry>) {
        let assumed = schedule.not_due(now);
        let found = entries(&assumed);
        schedule.record(now, "r1", &assumed, &found);
    }

    #[test]
    fn steady_resources_back_off_to_the_maximum_and_are_assumed_in_between() {
        let mut s = Schedule::new(MIN, 4 * MIN);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut now = t0;
        let mut intervals = Vec::new();
        for _ in 0..10 {
            assert!(s.not_due(now).is_empty(), "due at {now:?}");
            pass(&mut s, now, |_| vec![entry("a", json!({"p": 1}), json!({"s": 1}), false)]);
            let next = s.next_check("a").unwrap();
            intervals.push(next.duration_since(now).unwrap());
            // In between, it is assumed VALID with its last state.
            let halfway = now + next.duration_since(now).unwrap() / 2;
            let assumed = Assumed::new(&json!({"p": 1}), &json!({"s": 1}));
            assert_eq!(s.not_due(halfway).get("r1", "a"), Some(&assumed));
            assert_eq!(s.not_due(halfway).get("r2", "a"), None, "not for another revision");
            now = next;
        }
        let m = |n: u32| MIN * n;
        assert_eq!(intervals, [m(1), m(1), m(1), m(2), m(2), m(2), m(4), m(4), m(4), m(4)]);
    }

    #[test]
    fn drift_or_a_change_resets_the_interval() {
        let mut s = Schedule::new(MIN, 4 * MIN);
        let mut now = SystemTime::UNIX_EPOCH;
        for _ in 0..7 {
            now = s.next_due().unwrap_or(now);
            pass(&mut s, now, |_| {
                vec![entry("a", json!(1), json!("s"), false), entry("b", json!(1), json!("s"), false)]
            });
        }
        assert_eq!(s.next_check("a").unwrap().duration_since(now).unwrap(), 4 * MIN);
        now = s.next_due().unwrap();
        // a drifted (had to be applied); b renders to another config now.
        pass(&mut s, now, |_| vec![entry("a", json!(1), json!("s"), true), entry("b", json!(2), json!("s"), false)]);
        assert_eq!(s.next_check("a").unwrap().duration_since(now).unwrap(), MIN);
        assert_eq!(s.next_check("b").unwrap().duration_since(now).unwrap(), MIN);
    }

    /// A resource read out of turn (a watch saw it change) is read again with the others at
    /// their next check, not in a pass of its own: one pass per interval.
    #[test]
    fn a_resource_read_out_of_turn_joins_the_others_at_their_next_check() {
        let mut s = Schedule::new(MIN, 4 * MIN);
        let t0 = SystemTime::UNIX_EPOCH;
        let both =
            |_: &Assumptions| vec![entry("a", json!(1), json!("s"), false), entry("b", json!(1), json!("s"), false)];
        pass(&mut s, t0, both);
        let t1 = t0 + Duration::from_secs(10);
        s.forget("b");
        let assumed = s.not_due(t1);
        assert!(assumed.get("r1", "a").is_some(), "a keeps its schedule: {assumed:?}");
        assert!(assumed.get("r1", "b").is_none(), "b is read");
        s.record(t1, "r1", &assumed, &both(&assumed));
        assert_eq!((s.next_check("a"), s.next_check("b")), (Some(t0 + MIN), Some(t1 + MIN)));
        // A pass that reads nothing gathers nothing: 20 s before a's check, both are assumed.
        assert_eq!(s.not_due(t0 + MIN - Duration::from_secs(20)).len(), 2);
        // At a's check, b (due 10 s after) is read with it; then they are in step again.
        let at = s.next_due().unwrap();
        let assumed = s.not_due(at);
        assert!(assumed.is_empty(), "b is gathered with a: {assumed:?}");
        s.record(at, "r1", &assumed, &both(&assumed));
        assert_eq!(s.next_check("a"), Some(at + MIN));
        assert_eq!(s.next_check("b"), s.next_check("a"));
        // What is due more than half an interval later is not: b read out of turn 20 s on,
        // when a is due in 40 s.
        s.forget("b");
        let assumed = s.not_due(at + Duration::from_secs(20));
        assert!(assumed.get("r1", "a").is_some() && assumed.get("r1", "b").is_none(), "{assumed:?}");
    }

    #[test]
    fn assumed_resources_keep_their_time_and_failed_ones_are_checked_next_pass() {
        let mut s = Schedule::new(MIN, 4 * MIN);
        let t0 = SystemTime::UNIX_EPOCH;
        pass(&mut s, t0, |_| vec![entry("a", json!(1), json!("s"), false), entry("b", json!(1), json!("s"), false)]);
        let later = t0 + MIN / 2;
        let assumed = s.not_due(later);
        assert_eq!(assumed.len(), 2);
        let mut failed = entry("b", json!(1), json!("s"), false);
        failed.standing = Standing::Blocked { by: "x".into() };
        s.record(later, "r1", &assumed, &[entry("a", json!(1), json!("s"), false), failed]);
        assert_eq!(s.next_check("a"), Some(t0 + MIN), "taken for granted: its check stays where it was");
        assert_eq!(s.next_check("b"), None);
        assert!(s.not_due(later).get("r1", "b").is_none());
        assert_eq!(s.next_pass(later, true), MIN);
        assert_eq!(s.next_pass(later, false), MIN / 2);
        // A pass of another revision read everything afresh: from the start.
        s.record(later, "r2", &s.not_due(later), &[entry("a", json!(1), json!("s"), false)]);
        assert_eq!(s.next_check("a"), Some(later + MIN));
        assert!(s.not_due(later).get("r1", "a").is_none());
    }

    /// Loops spread passes by starting them early, never late: a pass up to a tenth of a
    /// resource's interval early checks it, so that none goes unread for longer.
    #[test]
    fn a_pass_a_little_early_checks_what_is_due_and_an_earlier_one_does_not() {
        let mut s = Schedule::new(MIN, 4 * MIN);
        let t0 = SystemTime::UNIX_EPOCH;
        let mut now = t0;
        for _ in 0..7 {
            pass(&mut s, now, |_| vec![entry("a", json!(1), json!("s"), false)]);
            now = s.next_check("a").unwrap();
        }
        let last = s.next_check("a").unwrap();
        pass(&mut s, last, |_| vec![entry("a", json!(1), json!("s"), false)]);
        let due = s.next_check("a").unwrap();
        assert_eq!(due.duration_since(last).unwrap(), 4 * MIN, "steady: every 4 minutes");
        // 4 minutes' interval: up to 24 s early still checks it.
        assert!(s.not_due(due - Duration::from_secs(24)).get("r1", "a").is_none());
        assert!(s.not_due(due - Duration::from_secs(25)).get("r1", "a").is_some());
        // While the interval is one minute: 6 s.
        let mut fresh = Schedule::new(MIN, 4 * MIN);
        pass(&mut fresh, t0, |_| vec![entry("a", json!(1), json!("s"), false)]);
        assert!(fresh.not_due(t0 + MIN - Duration::from_secs(6)).get("r1", "a").is_none());
        assert!(fresh.not_due(t0 + MIN - Duration::from_secs(7)).get("r1", "a").is_some());
    }

    #[test]
    fn the_budget_spreads_invocations_evenly_after_a_burst() {
        let mut b = Budget::new(10);
        let t0 = std::time::Instant::now();
        let waits: Vec<Duration> = (0..13).map(|_| b.take(t0)).collect();
        assert!(waits[..10].iter().all(|w| w.is_zero()), "one second's worth at once: {waits:?}");
        let ms = |w: Duration| (w.as_secs_f64() * 1000.0).round() as u64;
        assert_eq!(waits[10..].iter().map(|w| ms(*w)).collect::<Vec<_>>(), [100, 200, 300]);
        // After a quiet second the bucket is full again, never fuller.
        let later = t0 + Duration::from_secs(5);
        let waits: Vec<u64> = (0..11).map(|_| ms(b.take(later))).collect();
        assert_eq!(waits[..10], [0; 10]);
        assert_eq!(waits[10], 100);
    }
}
