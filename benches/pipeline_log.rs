//! A Pipeline's log in ConfigMaps, on a real API server; prints figures
//! (`DEPLOYSTER_BENCH_CHUNK_BYTES` to try another size of ConfigMap).
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig> cargo bench --bench pipeline_log` (`../shared/apiserver/up.sh`
//! prints one; without it the benchmark stops and says so).
//!
//! 100,000 entries (`DEPLOYSTER_BENCH_ENTRIES` to change), as the pipeline benchmark's log has,
//! written to a Pipeline's ConfigMaps in appends of 1,000. Reports:
//! - the ConfigMaps they fill;
//! - one step's append (two entries: started, succeeded) into a newest ConfigMap that is nearly
//!   empty, and into one that is nearly full (an append replaces the whole newest ConfigMap);
//! - the time to read the whole log, as a controller does once when it starts or becomes
//!   leader, and the memory that takes;
//! - the check a reconcile makes that its kept copy is current (a metadata list);
//! - compaction: 1,000 revisions through 50 stages × 20 targets, compacted as the controller
//!   does, the compacted log read anew, and `pipeline status` on it.

use std::time::{Duration, Instant};

use deployster::controller::pipelines::log::{CHUNK_BYTES, ConfigMapLog, Logs};
use deployster::crd::pipeline::Pipeline;
use deployster::history::{Entry, Event, History};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt, ResourceExt};
use serde_json::json;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn entry(i: usize) -> Entry {
    let revision = format!("1.0.{}", i / 4001);
    let event = if i % 2 == 0 { Event::StepStarted } else { Event::StepSucceeded };
    Entry {
        id: format!("run-{}", i / 4001),
        target: format!("pipeline/s{}/all/t{}/deploy", (i / 40) % 50, (i / 2) % 20),
        revision,
        event,
        at: 1_700_000_000_000 + i as i64,
        detail: json!({}),
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Times `appends` appends of one step's two entries, from entry number `from`.
async fn steps(log: &ConfigMapLog, from: usize, appends: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for k in 0..appends {
        let started = Instant::now();
        log.append(&[entry(from + 2 * k), entry(from + 2 * k + 1)]).expect("append");
        log.flush().await.expect("flush");
        times.push(started.elapsed());
    }
    times
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Ok(path) = std::env::var("DEPLOYSTER_E2E_KUBECONFIG") else {
        eprintln!(
            "pipeline_log: needs a Kubernetes API: set DEPLOYSTER_E2E_KUBECONFIG to a kubeconfig \
             (../shared/apiserver/up.sh prints one)"
        );
        std::process::exit(2);
    };
    let entries: usize = std::env::var("DEPLOYSTER_BENCH_ENTRIES").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("kubeconfig");
    let client = deployster::client::connect(config).expect("client");

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let apply = PatchParams::apply("deployster-bench").force();
    crds.patch("pipelines.deployster.io", &apply, &Patch::Apply(Pipeline::crd())).await.expect("install the CRD");
    let namespace = format!("bench-pipeline-log-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.expect("create the namespace");
    let pipelines: Api<Pipeline> = Api::namespaced(client.clone(), &namespace);
    let object: Pipeline = serde_json::from_value(json!({
        "apiVersion": "deployster.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "bench"},
        "spec": {"revision": "1", "stages": [{"name": "s", "targets": [{"name": "t", "manifest": "app"}], "steps": ["deploy"]}]}
    }))
    .unwrap();
    let mut created = Err(None);
    for _ in 0..50 {
        match pipelines.create(&PostParams::default(), &object).await {
            Ok(made) => {
                created = Ok(made);
                break;
            }
            // The CRD is not served yet.
            Err(e) => {
                created = Err(Some(e));
                tokio::time::sleep(Duration::from_millis(200)).await
            }
        }
    }
    let object = created.unwrap_or_else(|e| panic!("create the Pipeline: {e:?}"));

    let chunk_bytes: usize =
        std::env::var("DEPLOYSTER_BENCH_CHUNK_BYTES").ok().and_then(|n| n.parse().ok()).unwrap_or(CHUNK_BYTES);
    let log = ConfigMapLog::open(client.clone(), &object).await.expect("open").with_chunk_bytes(chunk_bytes);
    println!("A Pipeline's log in ConfigMaps ({} KiB each), on the API server of {path}", chunk_bytes / 1024);
    // A reconcile's appends are written by one flush (here: each step's two entries).
    let empty = steps(&log, 0, 20).await;
    let started = Instant::now();
    let batch = 1000;
    let mut at = 40;
    while at < entries {
        let chunk: Vec<Entry> = (at..(at + batch).min(entries)).map(entry).collect();
        log.append(&chunk).expect("append");
        log.flush().await.expect("flush");
        at += chunk.len();
    }
    let seeding = started.elapsed();
    let (selector, config_maps, count) = log.where_kept();
    println!("  {count} entries written in {seeding:.1?} (appends of {batch}); {config_maps} ConfigMaps");
    // The newest ConfigMap filled to nearly full (room for the steps timed), in one append.
    let config_maps_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let newest_bytes = || async {
        let list = config_maps_api.list(&ListParams::default().labels(&selector)).await.expect("list").items;
        list.iter()
            .max_by_key(|c| c.name_any().rsplit('-').next().and_then(|n| n.parse::<u32>().ok()))
            .and_then(|c| c.data.as_ref()?.get("entries").map(String::len))
            .unwrap_or(0)
    };
    let entry_bytes = serde_json::to_string(&entry(at)).unwrap().len() + 1;
    let room = chunk_bytes.saturating_sub(newest_bytes().await) / entry_bytes;
    let filler: Vec<Entry> = (at..at + room.saturating_sub(60)).map(entry).collect();
    log.append(&filler).expect("append");
    log.flush().await.expect("flush");
    at += filler.len();
    let newest = newest_bytes().await;
    let full = steps(&log, at, 20).await;
    println!(
        "  one step's append (2 entries), newest ConfigMap nearly empty: median {:.1?}, worst {:.1?}",
        median(empty.clone()),
        empty.iter().max().unwrap()
    );
    println!(
        "  one step's append, newest ConfigMap holding {} KiB: median {:.1?}, worst {:.1?} (each rewrites it whole)",
        newest / 1024,
        median(full.clone()),
        full.iter().max().unwrap()
    );

    let rss_before = status_kib("VmRSS:");
    let started = Instant::now();
    let read = ConfigMapLog::open(client.clone(), &object).await.expect("read the log");
    let reading = started.elapsed();
    let rss_after = status_kib("VmRSS:");
    let (_, config_maps, count) = read.where_kept();
    assert_eq!(count, log.where_kept().2, "read back whole");
    println!(
        "  the whole log read anew ({count} entries, {config_maps} ConfigMaps): {reading:.1?}; RSS {:.1} → {:.1} MiB, peak {:.1} MiB",
        mib(rss_before),
        mib(rss_after),
        mib(status_kib("VmHWM:"))
    );
    drop(read);
    let logs = Logs::default();
    logs.get(client.clone(), &object).await.expect("read");
    let checks: Vec<Duration> = {
        let mut times = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            logs.get(client.clone(), &object).await.expect("check");
            times.push(started.elapsed());
        }
        times
    };
    println!(
        "  a reconcile's check that its kept copy is current (two metadata reads by name): median {:.1?}, worst {:.1?}",
        median(checks.clone()),
        checks.iter().max().unwrap()
    );
    compaction(&client, &pipelines).await;
    namespaces.delete(&namespace, &DeleteParams::default()).await.expect("delete the namespace");
}

/// 1,000 revisions through a pipeline of 50 stages × 20 targets, compacted as the controller
/// does (whenever the log is past a few ConfigMaps' worth), then written as the one base
/// ConfigMap a compaction leaves and read anew.
async fn compaction(client: &kube::Client, pipelines: &Api<Pipeline>) {
    use deployster::controller::pipelines::log::{BASE_BYTES, COMPACT_AT};
    use deployster::pipeline::compact::compact;
    use deployster::pipeline::spec::{Files, PipelineSpec, compile};
    let (stages, targets, revisions) = (50, 20, 1000);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("app.yaml"), "resources: {}\n").expect("write");
    let mut yaml = String::from("revision: \"{{ version }}\"\nstages:\n");
    for s in 0..stages {
        let names: Vec<String> = (0..targets).map(|t| format!("{{name: t{t}, manifest: app.yaml}}")).collect();
        yaml.push_str(&format!("  - {{name: s{s}, targets: [{}], steps: [deploy]}}\n", names.join(", ")));
    }
    let spec: PipelineSpec = serde_norway::from_str(&yaml).expect("spec");
    let pipeline = compile("bench", &spec, &Files::new(dir.path())).expect("compile");
    let mut at = 0i64;
    let mut through = |n: usize| -> Vec<Entry> {
        let mut out = Vec::new();
        let mut entry = |target: String, event| {
            at += 1;
            out.push(Entry {
                id: format!("run-{n}"),
                target,
                revision: format!("1.0.{n}"),
                event,
                at,
                detail: json!({}),
            })
        };
        entry("pipeline".into(), Event::RevisionRegistered);
        entry("pipeline".into(), Event::PipelineStarted);
        for s in 0..stages {
            entry(format!("pipeline/s{s}"), Event::StageStarted);
            entry(format!("pipeline/s{s}/all"), Event::GroupStarted);
            for t in 0..targets {
                let target = format!("pipeline/s{s}/all/t{t}");
                entry(target.clone(), Event::TargetStarted);
                entry(format!("{target}/deploy"), Event::StepStarted);
                entry(format!("{target}/deploy"), Event::StepSucceeded);
                entry(target, Event::TargetFinishedSuccessfully);
            }
            entry(format!("pipeline/s{s}/all"), Event::GroupFinishedSuccessfully);
            entry(format!("pipeline/s{s}"), Event::StageFinishedSuccessfully);
        }
        entry("pipeline".into(), Event::PipelineFinishedSuccessfully);
        out
    };
    let bytes = |entries: &[Entry]| entries.iter().map(|e| serde_json::to_string(e).unwrap().len() + 1).sum::<usize>();
    let (mut log, mut written, mut compactions, mut spent, mut largest) = (Vec::new(), 0usize, 0, Duration::ZERO, 0);
    for n in 0..revisions {
        let run = through(n);
        written += run.len();
        log.extend(run);
        let size = bytes(&log);
        largest = largest.max(size);
        if size > COMPACT_AT as usize * CHUNK_BYTES {
            let started = Instant::now();
            log = compact(&pipeline, &log);
            spent += started.elapsed();
            compactions += 1;
        }
    }
    let kept = bytes(&log);
    println!(
        "Compaction: {revisions} revisions through {stages} stages x {targets} targets, {written} entries written"
    );
    println!(
        "  {compactions} compactions, {:.1?} each on average; the log never held more than {} KiB; \
         compacted it holds {} entries, {} KiB (one ConfigMap holds {} KiB)",
        spent / compactions.max(1),
        largest / 1024,
        log.len(),
        kept / 1024,
        BASE_BYTES / 1024
    );
    let object: Pipeline = serde_json::from_value(json!({
        "apiVersion": "deployster.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "compacted"},
        "spec": {"revision": "1", "stages": [{"name": "s", "targets": [{"name": "t", "manifest": "app"}], "steps": ["deploy"]}]}
    }))
    .unwrap();
    let object = pipelines.create(&PostParams::default(), &object).await.expect("create the Pipeline");
    let written = ConfigMapLog::open(client.clone(), &object).await.expect("open").with_chunk_bytes(BASE_BYTES);
    written.append(&log).expect("append");
    written.flush().await.expect("flush");
    let started = Instant::now();
    let read = ConfigMapLog::open(client.clone(), &object).await.expect("read the log");
    let reading = started.elapsed();
    let (_, config_maps, count) = read.where_kept();
    println!("  the compacted log read anew ({count} entries, {config_maps} ConfigMap): {reading:.1?} (target 200 ms)");
    let full = deployster::pipeline::progress::Progress::from_entries(&pipeline, &log);
    let status = deployster::pipeline::query::status(&pipeline, &full, at, &|_, _| String::new());
    let answered = status.nodes.iter().filter(|n| n.latest_through.as_deref() == Some("1.0.999")).count();
    println!("  `pipeline status` on it: {answered} of {} nodes answer latest through 1.0.999", status.nodes.len());
}
