//! Pipeline scheduling benchmark; prints figures. `cargo bench --bench pipeline`.
//!
//! A pipeline of 50 stages × 20 targets × 2 steps (2,000 steps) and a log of 100,000 entries:
//! revisions that went through it, then revisions in flight at ever smaller depths. Reports the time
//! to read the log from SQLite and index it (what a drive does once), the time of one
//! scheduling step (the frontier of every live revision and a decision for each step on it;
//! goal: well under 100 ms), and the memory the index takes.
//!
//! `DEPLOYSTER_BENCH_QUICK=1` (what `.ci/run` runs) holds the scheduling step to a loose bound
//! (500 ms, 5× the goal): only a real regression fails.

use std::time::{Duration, Instant};

use deployster::history::store::SqliteLog;
use deployster::history::{Entry, Event, History};
use deployster::pipeline::drive::read;
use deployster::pipeline::progress::{Progress, target_of};
use deployster::pipeline::spec::{Files, Pipeline, PipelineSpec, compile};
use serde_json::json;

const STAGES: usize = 50;
const TARGETS: usize = 20;
const ENTRIES: usize = 100_000;

fn pipeline(dir: &std::path::Path) -> Pipeline {
    std::fs::write(dir.join("app.yaml"), "resources: {}\n").unwrap();
    let mut yaml = String::from("revision: \"{{ version }}\"\nconcurrency: Queue\nstages:\n");
    for s in 0..STAGES {
        yaml.push_str(&format!(
            "  - name: s{s}\n    steps: [deploy, test]\n    tests: {{test: {{manifest: app.yaml}}}}\n    targets:\n"
        ));
        for t in 0..TARGETS {
            yaml.push_str(&format!("      - {{name: t{t}, manifest: app.yaml}}\n"));
        }
    }
    let spec: PipelineSpec = serde_norway::from_str(&yaml).unwrap();
    compile("bench", &spec, &Files::new(dir)).unwrap()
}

/// Revisions through the pipeline, in order, until there are `ENTRIES` entries; the last
/// three stop at different depths.
fn log_entries(pipeline: &Pipeline) -> Vec<Entry> {
    let steps = pipeline.steps.len();
    let per_revision = 1 + 2 * steps;
    let through = ENTRIES / per_revision - 2;
    let mut entries = Vec::with_capacity(ENTRIES + per_revision);
    let mut at = 1_700_000_000_000i64;
    let mut revision = 0;
    while entries.len() < ENTRIES {
        let name = format!("1.0.{revision}");
        let id = format!("run-{revision}");
        let mut entry = |target: String, event: Event| {
            at += 1;
            Entry { id: id.clone(), target, revision: name.clone(), event, at, detail: json!({}) }
        };
        entries.push(entry(target_of(""), Event::RevisionRegistered));
        let depth = if revision < through { steps } else { steps / (2 + revision - through) };
        for step in &pipeline.steps[..depth] {
            entries.push(entry(target_of(&step.id), Event::StepStarted));
            entries.push(entry(target_of(&step.id), Event::StepSucceeded));
        }
        if depth == steps {
            entries.push(entry(target_of(""), Event::PipelineFinishedSuccessfully));
        }
        revision += 1;
    }
    entries
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let quick = std::env::var("DEPLOYSTER_BENCH_QUICK").is_ok_and(|v| v == "1");
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let pipeline = pipeline(dir.path());
    println!(
        "pipeline: {STAGES} stages × {TARGETS} targets × 2 steps = {} steps, compiled in {:.0} ms",
        pipeline.steps.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let entries = log_entries(&pipeline);
    let log = SqliteLog::open(dir.path()).unwrap();
    for chunk in entries.chunks(5_000) {
        log.append(chunk).unwrap();
    }
    println!("log: {} entries", entries.len());

    let rss_before = status_kib("VmRSS:");
    let started = Instant::now();
    let progress = Progress::from_entries(&pipeline, &entries);
    let indexing = started.elapsed();
    let rss_after = status_kib("VmRSS:");
    let reads: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(read(&pipeline, &log).unwrap());
            started.elapsed()
        })
        .collect();
    let live = progress.revisions.iter().filter(|r| r.is_live()).count();
    println!(
        "read the log from SQLite and index it (once per drive): median {:.0} ms; indexing alone {:.0} ms",
        median(reads).as_secs_f64() * 1e3,
        indexing.as_secs_f64() * 1e3
    );

    let times: Vec<Duration> = (0..50)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(progress.schedule(&pipeline, 1_800_000_000_000));
            started.elapsed()
        })
        .collect();
    let scheduled = progress.schedule(&pipeline, 1_800_000_000_000);
    let step = median(times.clone());
    let worst = times.iter().max().copied().unwrap_or_default();
    println!(
        "one scheduling step ({} revisions, {live} live, {} steps on their frontiers): median {:.2} ms, worst {:.2} ms   (goal: well under 100 ms)",
        progress.revisions.len(),
        scheduled.len(),
        step.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3
    );
    println!(
        "memory: RSS {:.1} MiB before indexing, {:.1} MiB with the index; peak {:.1} MiB (with the entries and SQLite reads)",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        status_kib("VmHWM:") as f64 / 1024.0
    );
    assert!(!scheduled.is_empty(), "the live revisions have work on their frontiers");
    if quick {
        assert!(step < Duration::from_millis(500), "a scheduling step took {step:?}: a regression");
    }
}
