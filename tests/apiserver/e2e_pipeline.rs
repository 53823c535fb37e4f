//! A `Pipeline` object driven by the controller, end to end against a real API server (runs
//! when `DEPLOYSTER_E2E_KUBECONFIG` names a kubeconfig; `.ci/run` starts `../shared/apiserver/`):
//! its steps set the vars of Manifests of built-in types, which the same controller applies.
#![cfg(feature = "kube")]

use crate::support;
use std::path::Path;
use std::time::Duration;

use crate::support::cluster::{Cluster, ControllerProcess, assert_api_calls_are_listed, wait_for};
use serde_json::Value;

/// The Pipeline of `examples/pipeline/k8s.yaml` over Manifests of files in `dir`: four Manifests of the built-in `file`
/// type (each writes `<dir>/<its name>.txt` with the version), and the Pipeline `release`.
fn example(dir: &Path) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apiserver/fixtures/pipeline-files.yaml");
    std::fs::read_to_string(path).unwrap().replace("/tmp/deployster-pipeline-demo", dir.to_str().unwrap())
}

/// The example's Pipeline alone.
fn pipeline_document() -> String {
    let example = example(Path::new("/unused"));
    example.split("\n---\n").find(|d| d.contains("kind: Pipeline")).unwrap().to_string()
}

/// A Manifest of the built-in `file` type writing `<dir>/<name>.txt` with the version.
fn app(name: &str, dir: &Path) -> String {
    let example = example(dir);
    let document = example.split("\n---\n").find(|d| d.contains("name: app-stg}")).unwrap();
    document.replace("app-stg", name)
}

fn pipeline(cluster: &Cluster, name: &str) -> Value {
    cluster.get(&["pipeline", name]).unwrap_or(Value::Null)
}

fn ready(cluster: &Cluster, name: &str) -> (String, String, String) {
    let object = pipeline(cluster, name);
    let ready =
        object["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned();
    let field = |k: &str| ready.as_ref().and_then(|r| r[k].as_str()).unwrap_or_default().to_string();
    (field("status"), field("reason"), field("message"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Every entry of the Pipeline's log, from its ConfigMaps.
fn log_entries(cluster: &Cluster, name: &str) -> Vec<Value> {
    let selector = pipeline(cluster, name)["status"]["log"]["selector"].as_str().unwrap_or_default().to_string();
    let list = cluster.get(&["configmaps", "-l", &selector]).unwrap();
    let mut items: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|c| {
        c["metadata"]["name"].as_str().unwrap_or_default().rsplit('-').next().unwrap().parse::<u32>().unwrap()
    });
    items
        .iter()
        .flat_map(|c| {
            c["data"]["entries"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect()
}

fn count(entries: &[Value], revision: &str, target: &str, event: &str) -> usize {
    entries.iter().filter(|e| e["revision"] == revision && e["target"] == target && e["event"] == event).count()
}

/// Two revisions through staging (a deploy and a smoke test) and prod (a one-box, then an
/// approval by annotation, then the fleet); a restart of the controller between them resumes
/// from the log in ConfigMaps without running a succeeded step again; an approval that names
/// nothing waiting is refused with an event.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[test]
fn a_pipeline_takes_revisions_through_its_stages() {
    let cluster = Cluster::new("pipeline");
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let args = ["--namespace", cluster.namespace.as_str()];
    let mut controller = ControllerProcess::start(&cluster, work.path(), "controller", &args);
    // Revision 1.0 has a var 2.0 drops: a step removes from a Manifest what it set before.
    let example = example(&out).replace(r#"vars: {version: "1.0"}"#, r#"vars: {version: "1.0", channel: beta}"#);
    assert!(example.contains("channel: beta"));
    cluster.apply_yaml(&example);

    wait_for("revision 1.0 to wait for approval of prod/fleet", Duration::from_secs(120), || {
        let (_, reason, message) = ready(&cluster, "release");
        reason == "Progressing" && message.contains("approval of prod/fleet")
    });
    assert_eq!(read(&out.join("app-stg.txt")), "1.0");
    assert_eq!(read(&out.join("smoke-stg.txt")), "1.0", "the test ran, with the revision's vars");
    assert_eq!(read(&out.join("app-prod-a.txt")), "1.0");
    assert_ne!(read(&out.join("app-prod-b.txt")), "1.0", "the fleet waits for its approval");
    let manifest = cluster.get(&["manifest", "app-prod-a"]).unwrap();
    assert_eq!(manifest["spec"]["vars"]["pipeline"]["stage"], "prod", "{manifest:#}");
    assert_eq!(manifest["spec"]["vars"]["dir"], out.to_str().unwrap(), "the Manifest's own vars are kept");
    assert_eq!(manifest["spec"]["vars"]["channel"], "beta", "{manifest:#}");
    let status = pipeline(&cluster, "release")["status"].clone();
    let step = status["frontier"].as_array().unwrap().iter().find(|s| s["step"] == "prod/fleet/prod-b/deploy").cloned();
    assert!(step.is_some_and(|s| s["waitsFor"].as_str().unwrap().contains("approval")), "{status:#}");
    let (health, message) = support::argocd_health(&pipeline(&cluster, "release"));
    assert_eq!(health, "Progressing", "Argo CD's view: {message}");
    assert!(message.contains("approval of prod/fleet"), "{message}");

    // An approval nothing waits for: refused, said in an event, and nothing recorded.
    cluster.must(&cluster.ns(&["annotate", "pipeline", "release", "deployster.io/approve=9.9 prod/fleet"]));
    wait_for("the ApprovalRefused event", Duration::from_secs(30), || {
        cluster.event_reasons("release").iter().any(|r| r == "ApprovalRefused")
    });
    cluster.must(&cluster.ns(&[
        "annotate",
        "--overwrite",
        "pipeline",
        "release",
        "deployster.io/approve=1.0 prod/fleet",
    ]));
    wait_for("revision 1.0 to be through", Duration::from_secs(120), || ready(&cluster, "release").1 == "Through");
    assert_eq!(read(&out.join("app-prod-b.txt")), "1.0");
    let status = pipeline(&cluster, "release")["status"].clone();
    assert_eq!(status["latestThrough"], "1.0", "{status:#}");
    let prod_b =
        status["nodes"].as_array().unwrap().iter().find(|n| n["node"] == "prod/fleet/prod-b").cloned().unwrap();
    assert_eq!(prod_b["current"], "1.0", "{status:#}");
    assert!(cluster.event_reasons("release").iter().any(|r| r == "RevisionThrough"));
    assert_eq!(support::argocd_health(&pipeline(&cluster, "release")).0, "Healthy");

    // Revision 2.0: through staging and the one-box, then the controller is killed and
    // started again; it goes on from the log.
    let patch = r#"{"spec":{"vars":{"version":"2.0","channel":null}}}"#;
    cluster.must(&cluster.ns(&["patch", "pipeline", "release", "--type", "merge", "-p", patch]));
    wait_for("revision 2.0 to wait for approval", Duration::from_secs(120), || {
        let (_, reason, message) = ready(&cluster, "release");
        pipeline(&cluster, "release")["status"]["revision"] == "2.0"
            && reason == "Progressing"
            && message.contains("approval of prod/fleet")
    });
    assert_eq!(read(&out.join("app-prod-a.txt")), "2.0");
    let vars = cluster.get(&["manifest", "app-prod-a"]).unwrap()["spec"]["vars"].clone();
    assert!(vars.get("channel").is_none(), "the var 2.0 no longer sets is gone: {vars:#}");
    assert_eq!(vars["dir"], out.to_str().unwrap(), "the Manifest's own vars are kept: {vars:#}");
    controller.kill();
    let mut controller = ControllerProcess::start(&cluster, work.path(), "controller-again", &args);
    let approve = "deployster.io/approve=2.0 prod/fleet";
    cluster.must(&cluster.ns(&["annotate", "--overwrite", "pipeline", "release", approve]));
    let through = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("revision 2.0 to be through", Duration::from_secs(120), || {
            let (status, reason, message) = ready(&cluster, "release");
            status == "True" && reason == "Through" && message.contains("2.0")
        })
    }));
    if let Err(timed_out) = through {
        // Seen once in CI, under load, and not since: the restarted controller logged no
        // reconcile of the Pipeline at all. What the Pipeline and its events said then:
        let status = pipeline(&cluster, "release")["status"].clone();
        eprintln!("--- the Pipeline's status: {status:#}\n--- its events: {:?}", cluster.event_reasons("release"));
        std::panic::resume_unwind(timed_out);
    }
    assert_eq!(read(&out.join("app-prod-b.txt")), "2.0");
    let entries = log_entries(&cluster, "release");
    for step in
        ["staging/all/stg/deploy", "staging/all/stg/test", "prod/onebox/prod-a/deploy", "prod/fleet/prod-b/deploy"]
    {
        for revision in ["1.0", "2.0"] {
            let target = format!("pipeline/{step}");
            assert_eq!(count(&entries, revision, &target, "step-started"), 1, "{revision} {step}: {entries:#?}");
            assert_eq!(count(&entries, revision, &target, "step-succeeded"), 1, "{revision} {step}");
        }
    }
    assert_eq!(count(&entries, "9.9", "pipeline/prod/fleet", "approved"), 0);
    let log = pipeline(&cluster, "release")["status"]["log"].clone();
    assert_eq!(log["entries"].as_u64(), Some(entries.len() as u64), "{log}");
    // This controller ran revision 2.0's last step (the fleet's deploy) and saw it through.
    let metric = |series: &str| controller.metric(series).unwrap_or_default();
    assert_eq!(metric(r#"deployster_pipeline_steps_total{result="succeeded"}"#), 1.0);
    assert_eq!(metric(r#"deployster_pipeline_steps_total{result="failed"}"#), 0.0);
    assert_eq!(metric("deployster_pipeline_revisions_through_total"), 1.0);
    assert!(metric(r#"deployster_pipeline_reconciles_total{result="through"}"#) >= 1.0);
    assert_eq!(metric("deployster_pipeline_step_duration_seconds_count"), 1.0);
    assert_api_calls_are_listed(&controller);
    controller.kill();
}

/// Bad input: a target naming no Manifest, and a cycle, are invalid (said on the object); a
/// step whose Manifest fails stops its revision, with the Manifest's reason.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[test]
fn a_bad_pipeline_is_reported_and_a_failed_step_stops_its_revision() {
    let cluster = Cluster::new("pipeline-bad");
    let work = tempfile::tempdir().unwrap();
    let args = ["--namespace", cluster.namespace.as_str()];
    let controller = ControllerProcess::start(&cluster, work.path(), "controller", &args);
    // A file where its directory should be: applying the Manifest fails.
    let blocker = work.path().join("blocker");
    std::fs::write(&blocker, "").unwrap();
    cluster.apply_yaml(&app("broken", &blocker));
    let missing = pipeline_document()
        .replace("name: release", "name: missing")
        .replace("app-{{ pipeline.target }}", "nope")
        .replace("smoke-{{ pipeline.target }}", "nope");
    cluster.apply_yaml(&missing);
    let cycle = r#"apiVersion: deployster.io/v1alpha1
kind: Pipeline
metadata: {name: cycle}
spec:
  revision: "1"
  stages:
    - {name: a, after: [b], targets: [{name: t, manifest: broken}], steps: [deploy]}
    - {name: b, after: [a], targets: [{name: u, manifest: broken}], steps: [deploy]}
"#;
    cluster.apply_yaml(cycle);
    let failing = r#"apiVersion: deployster.io/v1alpha1
kind: Pipeline
metadata: {name: failing}
spec:
  revision: "v{{ build }}"
  vars: {build: 1}
  stages:
    - {name: only, targets: [{name: t, manifest: broken}], steps: [deploy]}
"#;
    cluster.apply_yaml(failing);
    // A stage that requires an artifact waits for it; registered by annotation, it goes on.
    let needs = failing
        .replace("name: failing", "name: needs")
        .replace("steps: [deploy]}", "steps: [deploy], requires: [amd64]}");
    cluster.apply_yaml(&needs);

    wait_for("the invalid pipelines to say why", Duration::from_secs(60), || {
        ready(&cluster, "missing").1 == "ManifestMissing" && ready(&cluster, "cycle").1 == "InvalidPipeline"
    });
    let (_, _, message) = ready(&cluster, "missing");
    assert!(message.contains("stage `staging`, target `stg`") && message.contains("there is no Manifest"), "{message}");
    assert!(message.contains(&format!("{}/nope", cluster.namespace)), "{message}");
    // A Manifest not there is waited for (not Stalled: creating it is the fix), and once
    // created the pipeline runs.
    assert_eq!(support::argocd_health(&pipeline(&cluster, "missing")).0, "Progressing");
    assert!(cluster.event_reasons("missing").iter().any(|r| r == "ManifestMissing"));
    cluster.apply_yaml(&app("nope", work.path()));
    wait_for("the pipeline to run once its Manifest is there", Duration::from_secs(120), || {
        let (_, reason, message) = ready(&cluster, "missing");
        reason == "Progressing" && message.contains("approval of prod/fleet")
    });
    assert_eq!(read(&work.path().join("nope.txt")), "1.0");
    let (_, _, message) = ready(&cluster, "cycle");
    assert!(message.contains("the stages form a cycle: a → b → a"), "{message}");
    assert!(cluster.event_reasons("cycle").iter().any(|r| r == "InvalidPipeline"));
    assert_eq!(support::argocd_health(&pipeline(&cluster, "cycle")).0, "Degraded");

    wait_for("the stage to wait for its artifact", Duration::from_secs(60), || {
        ready(&cluster, "needs").2.contains("artifacts not yet registered: amd64")
    });
    let register = "deployster.io/register=v1 only amd64, v1 nope amd64";
    cluster.must(&cluster.ns(&["annotate", "pipeline", "needs", register]));
    wait_for("the registered artifact to let it run", Duration::from_secs(120), || {
        ready(&cluster, "needs").1 == "StepFailed"
    });
    let reasons = cluster.event_reasons("needs");
    assert!(
        reasons.iter().any(|r| r == "ArtifactRegistered") && reasons.iter().any(|r| r == "RegisterRefused"),
        "{reasons:?}"
    );

    wait_for("the failed step to stop its revision", Duration::from_secs(120), || {
        ready(&cluster, "failing").1 == "StepFailed"
    });
    let (status, _, message) = ready(&cluster, "failing");
    assert_eq!(status, "False");
    assert!(message.contains("revision v1 failed at only/all/t/deploy"), "{message}");
    assert!(message.contains(&format!("Manifest {}/broken", cluster.namespace)), "{message}");
    assert!(cluster.event_reasons("failing").iter().any(|r| r == "StepFailed"));
    assert_eq!(support::argocd_health(&pipeline(&cluster, "failing")), ("Degraded".into(), message));
    // Two failed steps (`failing`'s and `needs`'), three succeeded (`missing`'s, once `nope`
    // was there); reconciles of invalid ones.
    let metric = |series: &str| controller.metric(series).unwrap_or_default();
    assert_eq!(metric(r#"deployster_pipeline_steps_total{result="failed"}"#), 2.0);
    assert_eq!(metric(r#"deployster_pipeline_steps_total{result="succeeded"}"#), 3.0);
    assert!(metric(r#"deployster_pipeline_reconciles_total{result="invalid"}"#) >= 1.0);
    assert!(metric(r#"deployster_pipeline_reconciles_total{result="manifest_missing"}"#) >= 1.0);
    assert!(metric(r#"deployster_pipeline_reconciles_total{result="failed"}"#) >= 2.0);
}

/// The metrics that count the requests of [`pipeline_object`]'s clients (in this test process).
fn metered() -> &'static std::sync::Arc<deployster::controller::metrics::Metrics> {
    static METRICS: std::sync::OnceLock<std::sync::Arc<deployster::controller::metrics::Metrics>> =
        std::sync::OnceLock::new();
    METRICS.get_or_init(|| std::sync::Arc::new(deployster::controller::metrics::Metrics::new()))
}

/// The example Pipeline, made as `name`, and a client of the cluster as the controller uses one:
/// each request counted in [`metered`]'s metrics.
async fn pipeline_object(cluster: &Cluster, name: &str) -> (kube::Client, deployster::crd::pipeline::Pipeline) {
    use deployster::controller::metrics::ApiMeteringLayer;
    use deployster::controller::readiness::Readiness;
    cluster.apply_yaml(&pipeline_document().replace("name: release", &format!("name: {name}")));
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    // The object as the controller's watch has it: read by the test, not counted.
    let reader = deployster::client::connect(config.clone()).unwrap();
    let api: kube::Api<deployster::crd::pipeline::Pipeline> = kube::Api::namespaced(reader, &cluster.namespace);
    let object = api.get(name).await.unwrap();
    let layer = ApiMeteringLayer { metrics: metered().clone(), readiness: std::sync::Arc::new(Readiness::new(1)) };
    (deployster::controller::connect_metered(config, layer).unwrap(), object)
}

/// The log in ConfigMaps, through the library: entries fill ConfigMaps in order and read back
/// whole; a writer whose view is stale is refused and nothing of its append is kept; the
/// kept logs notice another writer and read anew.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[tokio::test(flavor = "multi_thread")]
async fn the_log_fills_config_maps_in_order_and_refuses_a_stale_writer() {
    use deployster::controller::pipelines::log::{ConfigMapLog, Logs};
    use deployster::history::{Entry, Event, History};
    let cluster = Cluster::new("pipeline-log");
    let (client, object) = pipeline_object(&cluster, "logged").await;

    let log = ConfigMapLog::open(client.clone(), &object).await.unwrap().with_chunk_bytes(2048);
    let stale = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    let logs = Logs::default();
    let kept = logs.get(client.clone(), &object).await.unwrap();
    let entry = |i: usize| Entry {
        id: "run".into(),
        target: format!("pipeline/staging/all/stg/step-{i}"),
        revision: "1.0".into(),
        event: Event::StepSucceeded,
        at: i as i64,
        detail: serde_json::json!({"i": i}),
    };
    let written: Vec<Entry> = (0..60).map(entry).collect();
    for chunk in written.chunks(3) {
        append(&log, chunk).await.unwrap();
    }
    let (selector, config_maps, entries) = log.where_kept();
    assert!(config_maps >= 4, "{config_maps} ConfigMaps of at most 2 KiB each");
    assert_eq!(entries, 60);
    let listed = cluster.get(&["configmaps", "-l", &selector]).unwrap();
    let owners = listed["items"][0]["metadata"]["ownerReferences"][0].clone();
    assert_eq!((owners["kind"].as_str(), owners["name"].as_str()), (Some("Pipeline"), Some("logged")), "{owners}");

    let read = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    let mut back = read.recent("", usize::MAX).unwrap();
    back.reverse();
    assert_eq!(back, written, "read back whole and in order");

    let refused = append(&stale, &[entry(99)]).await.unwrap_err().to_string();
    assert!(refused.contains("another writer changed the log"), "{refused}");
    let read = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    assert_eq!(read.recent("", usize::MAX).unwrap().len(), 60, "nothing of the stale append was kept");

    // The kept log was opened before the 60 were written: it is read anew.
    let again = logs.get(client.clone(), &object).await.unwrap();
    assert!(!std::sync::Arc::ptr_eq(&kept, &again));
    assert_eq!(again.recent("", usize::MAX).unwrap().len(), 60);
    let same = logs.get(client.clone(), &object).await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&again, &same), "unchanged, it is kept");
    // Another writer starts a new ConfigMap, leaving the newest as it was: read anew all the same.
    let (_, before, _) = log.where_kept();
    let mut large = entry(60);
    large.detail = serde_json::json!({"text": "x".repeat(2048)});
    append(&log, std::slice::from_ref(&large)).await.unwrap();
    assert_eq!(log.where_kept().1, before + 1, "a new ConfigMap");
    let fresh = logs.get(client, &object).await.unwrap();
    assert!(!std::sync::Arc::ptr_eq(&same, &fresh));
    assert_eq!(fresh.recent("", 1).unwrap(), [large]);
}

/// Past a few ConfigMaps the log is compacted into one, marked as its base: read anew it is
/// the compacted log, the ConfigMaps before it are gone, and appends go on after it.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[tokio::test(flavor = "multi_thread")]
async fn a_long_log_is_compacted_into_one_config_map_and_read_back_as_such() {
    use deployster::controller::pipelines::log::{BASE_ANNOTATION, ConfigMapLog};
    use deployster::history::{Entry, Event, History};
    let cluster = Cluster::new("pipeline-compact");
    let (client, object) = pipeline_object(&cluster, "compacted").await;
    let pipeline = one_stage("compacted");

    // 100 runs through, each registered, its deploy and its markers.
    let run = |n: usize| -> Vec<Entry> {
        let entry = |target: &str, event| Entry {
            id: format!("run-{n}"),
            target: target.into(),
            revision: format!("1.0.{n}"),
            event,
            at: n as i64,
            detail: serde_json::json!({}),
        };
        vec![
            entry("pipeline", Event::RevisionRegistered),
            entry("pipeline", Event::PipelineStarted),
            entry("pipeline/staging/all/stg/deploy", Event::StepStarted),
            entry("pipeline/staging/all/stg/deploy", Event::StepSucceeded),
            entry("pipeline/staging", Event::StageFinishedSuccessfully),
            entry("pipeline", Event::PipelineFinishedSuccessfully),
        ]
    };
    let log = ConfigMapLog::open(client.clone(), &object).await.unwrap().with_chunk_bytes(4096);
    for n in 0..100 {
        append(&log, &run(n)).await.unwrap();
        if n == 0 {
            assert!(!log.compact(&pipeline).await.unwrap(), "one ConfigMap: nothing to compact");
        }
    }
    let (selector, before, _) = log.where_kept();
    assert!(before > 4, "{before} ConfigMaps");
    // A second writer, current until the compaction, with room in the newest ConfigMap.
    let stale = ConfigMapLog::open(client.clone(), &object).await.unwrap().with_chunk_bytes(1 << 20);
    assert!(log.compact(&pipeline).await.unwrap());
    let (_, after, entries) = log.where_kept();
    // The newest run answers every question; its step's start says nothing any more.
    assert_eq!((after, entries), (1, 5));
    let listed = cluster.get(&["configmaps", "-l", &selector]).unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["metadata"]["annotations"][BASE_ANNOTATION], "1", "a base of one ConfigMap");

    // A writer whose view is from before the compaction cannot append where no one reads.
    let refused = append(&stale, &run(500)).await.unwrap_err().to_string();
    assert!(refused.contains("another writer changed the log"), "{refused}");
    let read = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    let mut back = read.recent("", usize::MAX).unwrap();
    back.reverse();
    let answering: Vec<Entry> = run(99).into_iter().filter(|e| e.event != Event::StepStarted).collect();
    assert_eq!(back, answering);
    // Appends go on after the base, which stays the base.
    append(&log, &run(100)).await.unwrap();
    let read = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    assert_eq!(read.where_kept().2, 11);
    let listed = cluster.get(&["configmaps", "-l", &selector]).unwrap();
    assert!(listed["items"].as_array().unwrap().iter().any(|c| c["metadata"]["annotations"][BASE_ANNOTATION] == "1"));
    // What the log asked of the server, the compaction's deletions among it, is what the
    // controller's RBAC (and the chart) grants.
    let calls = support::cluster::api_requests_in(&metered().encode());
    assert!(calls.contains_key(&("delete".into(), "".into(), "configmaps".into())), "{calls:?}");
    support::cluster::assert_listed(&calls);
}

/// A compiled pipeline `name` of one stage, `staging`, of one target, `stg`, deployed.
fn one_stage(name: &str) -> deployster::pipeline::spec::Pipeline {
    use deployster::pipeline::spec::{Files, PipelineSpec, compile};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.yaml"), "resources: {}\n").unwrap();
    let spec: PipelineSpec = serde_norway::from_str(
        "revision: \"{{ version }}\"\nstages:\n  - {name: staging, targets: [{name: stg, manifest: app.yaml}], steps: [deploy]}\n",
    )
    .unwrap();
    compile(name, &spec, &Files::new(dir.path())).unwrap()
}

/// A live run keeps all its entries through a compaction: when they fill more than one
/// ConfigMap, the base spans several, its last written last and marked with their number; read
/// anew it is the compacted log. The parts of a compaction cut short (no last ConfigMap) are
/// skipped by readers, and appends go on past them.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_too_large_for_one_config_map_is_compacted_into_several() {
    use deployster::controller::pipelines::log::{BASE_ANNOTATION, ConfigMapLog, PART_ANNOTATION};
    use deployster::history::{Entry, Event, History};
    use kube::ResourceExt;
    let cluster = Cluster::new("pipeline-parts");
    let (client, object) = pipeline_object(&cluster, "parted").await;
    let pipeline = one_stage("parted");
    let entry = |run: &str, target: &str, event, i: usize| Entry {
        id: run.into(),
        target: target.into(),
        revision: run.into(),
        event,
        at: i as i64,
        detail: serde_json::json!({"i": i, "pad": "x".repeat(200)}),
    };
    let log = ConfigMapLog::open(client.clone(), &object).await.unwrap().with_chunk_bytes(2048).with_base_bytes(4096);
    let deploy = "pipeline/staging/all/stg/deploy";
    // A run that ended, then a live one whose 60 attempts at its step (about 17 KiB) all stay.
    append(&log, &[entry("old", "pipeline", Event::RevisionRegistered, 0)]).await.unwrap();
    append(&log, &[entry("old", deploy, Event::StepStarted, 0)]).await.unwrap();
    append(&log, &[entry("old", "pipeline", Event::PipelineFinishedSuccessfully, 1)]).await.unwrap();
    append(&log, &[entry("live", "pipeline", Event::RevisionRegistered, 2)]).await.unwrap();
    for i in 0..60 {
        append(&log, &[entry("live", deploy, Event::StepStarted, 3 + i)]).await.unwrap();
    }
    let before = log.recent("", usize::MAX).unwrap();
    assert!(log.compact(&pipeline).await.unwrap());
    let (selector, parts, count) = log.where_kept();
    assert!(parts >= 4, "{parts} ConfigMaps of at most 4 KiB");
    assert_eq!(count, 61 + 2, "the live run whole, and the ended run's registration and end");
    let listed = cluster.get(&["configmaps", "-l", &selector]).unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len() as u32, parts, "nothing from before the compaction: {listed}");
    let bases: Vec<&serde_json::Value> =
        items.iter().filter(|c| c["metadata"]["annotations"][BASE_ANNOTATION].is_string()).collect();
    assert_eq!(bases.len(), 1);
    assert_eq!(bases[0]["metadata"]["annotations"][BASE_ANNOTATION], parts.to_string().as_str());
    let head = bases[0]["metadata"]["name"].as_str().unwrap().to_string();
    let head_index = head.rsplit('-').next().unwrap().to_string();
    let of_head = items.iter().filter(|c| c["metadata"]["annotations"][PART_ANNOTATION] == head_index.as_str());
    assert_eq!(of_head.count() as u32, parts - 1, "{listed}");
    let compacted = log.recent("", usize::MAX).unwrap();
    assert_eq!(before.len() - compacted.len(), 1, "the ended run's step start goes");
    let read = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    assert_eq!(read.recent("", usize::MAX).unwrap(), compacted, "read anew, the compacted log");

    // A compaction cut short: a part of a base that was never written.
    let orphan = format!("parted-log-{}", head_index.parse::<u32>().unwrap() + 5);
    cluster.apply_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {orphan}\n  labels: {{deployster.io/pipeline-log: {uid}}}\n  \
         annotations: {{{PART_ANNOTATION}: \"999\"}}\ndata:\n  entries: |\n    {line}\n",
        uid = object.uid().unwrap(),
        line = serde_json::to_string(&entry("ghost", deploy, Event::StepStarted, 999)).unwrap(),
    ));
    let read = ConfigMapLog::open(client.clone(), &object).await.unwrap().with_chunk_bytes(2048);
    assert_eq!(read.recent("", usize::MAX).unwrap(), compacted, "the unfinished base's part is skipped");
    let after = entry("live", deploy, Event::StepSucceeded, 100);
    append(&read, std::slice::from_ref(&after)).await.unwrap();
    let again = ConfigMapLog::open(client.clone(), &object).await.unwrap();
    assert_eq!(again.recent("", 1).unwrap(), [after], "appended past it");
    assert_eq!(again.where_kept().2, compacted.len() as u64 + 1);
}

/// Sharded replicas drive a Pipeline too: the replica holding the Pipeline's shard runs its
/// steps, each Manifest is applied by the replica holding its own shard, and the revision goes
/// through, its status naming the replica that wrote it.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[test]
fn sharded_replicas_take_a_pipeline_s_revision_through() {
    let cluster = Cluster::new("pipeline-shards");
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let ns = cluster.namespace.as_str();
    let args =
        ["--namespace", ns, "--leader-elect", "--lease-namespace", ns, "--lease-duration", "4s", "--shards", "4"];
    let replicas: Vec<ControllerProcess> =
        ["a", "b"].iter().map(|name| ControllerProcess::start(&cluster, work.path(), name, &args)).collect();
    let owned = |r: &ControllerProcess| {
        let (_, body) = r.http("/metrics").unwrap_or_default();
        body.lines().any(|l| l.starts_with("deployster_shard_owned{") && l.ends_with(" 2"))
    };
    wait_for("2 shards on each replica", Duration::from_secs(30), || replicas.iter().all(owned));
    cluster.apply_yaml(&example(&out));
    wait_for("revision 1.0 to wait for approval of prod/fleet", Duration::from_secs(120), || {
        ready(&cluster, "release").2.contains("approval of prod/fleet")
    });
    cluster.must(&cluster.ns(&["annotate", "pipeline", "release", "deployster.io/approve=1.0 prod/fleet"]));
    wait_for("revision 1.0 to be through", Duration::from_secs(120), || ready(&cluster, "release").1 == "Through");
    assert_eq!(read(&out.join("app-prod-b.txt")), "1.0");
    let replica = pipeline(&cluster, "release")["status"]["shard"]["replica"].as_str().unwrap_or_default().to_string();
    assert!(!replica.is_empty(), "the Pipeline's status names its replica");
    let manifests = cluster.get(&["manifests"]).unwrap();
    let writers: std::collections::BTreeSet<String> = manifests["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["status"]["shard"]["replica"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(writers.iter().all(|w| !w.is_empty()), "every Manifest's status names its replica: {writers:?}");
    eprintln!("the Pipeline on {replica}; its Manifests on {writers:?}");
}

/// Issue 51: a Pipeline reconcile takes one step forward and returns, so its status shows a
/// step as it starts — while its Manifest waits for a person's approval of its plan — and as
/// it ends once the Manifest is Ready, woken by the Manifest's change (no polling of it).
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_pipeline:: -- --include-ignored"]
#[test]
fn a_pipeline_s_status_shows_each_step_as_it_starts_and_ends() {
    let cluster = Cluster::new("pipeline-steps");
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let args = ["--namespace", cluster.namespace.as_str()];
    let controller = ControllerProcess::start(&cluster, work.path(), "controller", &args);
    let manual = app("app-one", &out).replace("  retryInterval: 5s\n", "  retryInterval: 5s\n  approval: Manual\n");
    assert!(manual.contains("approval: Manual"), "{manual}");
    let pipeline_yaml = r#"
apiVersion: deployster.io/v1alpha1
kind: Pipeline
metadata: {name: one}
spec:
  revision: "{{ version }}"
  vars: {version: "1.0"}
  stages:
    - {name: only, targets: [{name: one, manifest: app-one}], steps: [deploy]}
"#;
    cluster.apply_yaml(&format!("{manual}\n---\n{pipeline_yaml}"));

    // Started: the Manifest has the revision's vars and waits for approval; the Pipeline's
    // status already says the step runs.
    let step = "only/all/one/deploy";
    wait_for("the step to show as running", Duration::from_secs(90), || {
        let status = pipeline(&cluster, "one")["status"].clone();
        status["frontier"].as_array().is_some_and(|f| f.iter().any(|s| s["step"] == step && s["status"] == "running"))
    });
    let manifest = cluster.get(&["manifest", "app-one"]).unwrap();
    assert_eq!(manifest["spec"]["vars"]["version"], "1.0", "{manifest:#}");
    wait_for("the Manifest to await approval", Duration::from_secs(60), || {
        cluster.get(&["manifest", "app-one"]).unwrap()["status"]["pendingPlan"]["id"].is_string()
    });
    assert_ne!(ready(&cluster, "one").1, "Through");
    assert_ne!(read(&out.join("app-one.txt")), "1.0", "nothing applied before the approval");
    let entries = log_entries(&cluster, "one");
    assert_eq!(count(&entries, "1.0", &format!("pipeline/{step}"), "step-started"), 1, "{entries:#?}");
    assert_eq!(count(&entries, "1.0", &format!("pipeline/{step}"), "step-succeeded"), 0);

    // Approved: the Manifest applies and is Ready; the step ends, and the revision is through.
    let plan =
        cluster.get(&["manifest", "app-one"]).unwrap()["status"]["pendingPlan"]["id"].as_str().unwrap().to_string();
    cluster.must(&cluster.ns(&["annotate", "manifest", "app-one", &format!("deployster.io/approve={plan}")]));
    wait_for("revision 1.0 to be through", Duration::from_secs(90), || ready(&cluster, "one").1 == "Through");
    assert_eq!(read(&out.join("app-one.txt")), "1.0");
    let entries = log_entries(&cluster, "one");
    assert_eq!(count(&entries, "1.0", &format!("pipeline/{step}"), "step-succeeded"), 1, "{entries:#?}");
    assert_api_calls_are_listed(&controller);
}

/// Appends to a Pipeline's log and writes it, as a reconcile does.
async fn append(
    log: &deployster::controller::pipelines::log::ConfigMapLog,
    entries: &[deployster::history::Entry],
) -> Result<(), deployster::history::HistoryError> {
    deployster::history::History::append(log, entries)?;
    log.flush().await
}
