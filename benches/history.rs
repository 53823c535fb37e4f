//! Deployment log benchmark; prints figures, asserts nothing. `cargo bench --bench history`.
//!
//! Appends 1,000,000 entries (to the next whole run) to the SQLite log in realistic runs (one durable transaction per
//! run: run-started, resources observed and applied, the run's end) and reports appends per
//! second (target ≥ 20k/s), then the median latency of every query (target < 20 ms each).

use std::time::{Duration, Instant};

use deployster::history::store::SqliteLog;
use deployster::history::{Entry, Event, History, in_progress, latest_applied, latest_failed, target};
use serde_json::json;

const TOTAL: usize = 1_000_000;
const RESOURCES: usize = 100;

/// A small deterministic generator, so that every run of the benchmark writes the same log.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % below
    }
}

fn run_entries(run: usize, rng: &mut Lcg) -> Vec<Entry> {
    let id = format!("run-{run:07}");
    let revision = format!("{:012x}", run / 10);
    let at = 1_700_000_000_000 + run as i64 * 60_000;
    let entry = |target: String, event: Event| Entry {
        id: id.clone(),
        target,
        revision: revision.clone(),
        event,
        at,
        detail: json!({"duration_ms": 12}),
    };
    let mut entries = vec![entry(target::MANIFEST.into(), Event::RunStarted)];
    let mut failed = false;
    for _ in 0..8 {
        let name = format!("r{}", rng.next(RESOURCES));
        let resource = target::resource(&name);
        if rng.next(4) > 0 {
            entries.push(entry(resource, Event::ResourceValid));
            continue;
        }
        let action = target::action(&name, "update");
        entries.push(entry(resource.clone(), Event::ResourceStale));
        entries.push(entry(action.clone(), Event::ActionStarted));
        if rng.next(20) == 0 {
            failed = true;
            entries.push(entry(action, Event::ActionFailed));
            entries.push(entry(resource, Event::ResourceFailed));
        } else {
            entries.push(entry(action, Event::ActionFinishedSuccessfully));
            entries.push(entry(resource, Event::ResourceApplied));
        }
    }
    let end = if failed { Event::RunFailed } else { Event::RunFinishedSuccessfully };
    entries.push(entry(target::MANIFEST.into(), end));
    entries
}

fn median_of(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..25)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = SqliteLog::open(dir.path()).expect("open log");
    let mut rng = Lcg(42);
    let (mut written, mut runs) = (0, 0);
    let started = Instant::now();
    while written < TOTAL {
        let entries = run_entries(runs, &mut rng);
        log.append(&entries).expect("append");
        written += entries.len();
        runs += 1;
    }
    let elapsed = started.elapsed();
    // One run left open, as a crash leaves it.
    let crashed = Entry {
        id: "run-crashed".into(),
        target: target::action("r7", "update"),
        revision: "ffffffffffff".into(),
        event: Event::ActionStarted,
        at: 0,
        detail: json!({}),
    };
    let opened = Entry { target: target::MANIFEST.into(), event: Event::RunStarted, ..crashed.clone() };
    log.append(&[opened, crashed]).expect("append the crashed run");
    let size = std::fs::metadata(log.path()).map(|m| m.len()).unwrap_or(0);
    println!("append: {written} entries in {runs} runs (one transaction each, synchronous=FULL)");
    println!("  time                                 {:.2} s", elapsed.as_secs_f64());
    println!("  appends per second                   {:.0}   (target ≥ 20000)", written as f64 / elapsed.as_secs_f64());
    println!("  database size                        {:.1} MiB", size as f64 / (1024.0 * 1024.0));
    println!("queries on {} entries, median of 25 (target < 20 ms each):", written + 2);
    type Query<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let queries: Vec<Query> = vec![
        ("latest applied revision (manifest)", Box::new(|| assert!(latest_applied(&log, None).unwrap().is_some()))),
        (
            "latest applied revision (resource)",
            Box::new(|| assert!(latest_applied(&log, Some("r42")).unwrap().is_some())),
        ),
        ("latest failed revision (manifest)", Box::new(|| assert!(latest_failed(&log, None).unwrap().is_some()))),
        (
            "latest failed revision (resource)",
            Box::new(|| assert!(latest_failed(&log, Some("r42")).unwrap().is_some())),
        ),
        ("in progress (manifest)", Box::new(|| assert_eq!(in_progress(&log, None).unwrap().len(), 1))),
        ("in progress (resource)", Box::new(|| assert_eq!(in_progress(&log, Some("r7")).unwrap().len(), 1))),
        ("last 50 events", Box::new(|| assert_eq!(log.recent("", 50).unwrap().len(), 50))),
        ("last 50 events of a resource", Box::new(|| assert_eq!(log.recent("resource/r42", 50).unwrap().len(), 50))),
        (
            "last 50 events of an unknown resource",
            Box::new(|| assert!(log.recent("resource/nope", 50).unwrap().is_empty())),
        ),
    ];
    for (name, query) in &queries {
        let latency = median_of(query);
        println!("  {name:<38} {:.3} ms", latency.as_secs_f64() * 1000.0);
    }
}
