//! `builtin/kubernetes` at scale; prints figures.
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig of ../shared/apiserver/up.sh> cargo bench --bench kubernetes`
//!
//! 1,000 ConfigMaps (`DEPLOYSTER_BENCH_OBJECTS` to change) as the resources of one manifest, in
//! a fresh namespace, through the engine (parallelism 16): applied once, then a drift-check
//! pass with nothing changed (a plan: every state read). Figures: wall time of each, and the
//! API requests per object of the check, counted on the client. Target (issue 24): the check
//! costs no dry run when nothing changed — one GET per object, discovery once per kind.

use std::sync::Arc;
use std::time::Instant;

use deployster::builtins::kubernetes::KubeObjects;
use deployster::controller::metrics::{ApiMeteringLayer, Metrics};
use deployster::controller::readiness::Readiness;
use deployster::engine::context::RunOptions;
use deployster::engine::events::ApproveAll;
use deployster::engine::load_validated;
use deployster::engine::run::Engine;

fn main() {
    let Ok(kubeconfig) = std::env::var("DEPLOYSTER_E2E_KUBECONFIG") else {
        eprintln!("no API server (DEPLOYSTER_E2E_KUBECONFIG): nothing to measure");
        return;
    };
    let objects: usize = std::env::var("DEPLOYSTER_BENCH_OBJECTS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000);
    let namespace = format!("bench-kube-{}", std::process::id());
    let created = std::process::Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "create", "namespace", &namespace])
        .output()
        .expect("kubectl");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.yaml");
    let mut yaml = String::from("resources:\n");
    for i in 0..objects {
        yaml.push_str(&format!(
            "  cm{i}:\n    type: builtin/kubernetes\n    config:\n      object: {{apiVersion: v1, kind: ConfigMap, \
             metadata: {{name: cm{i}, namespace: {namespace}, labels: {{app: bench}}}}, data: {{n: \"{i}\"}}}}\n"
        ));
    }
    std::fs::write(&path, yaml).unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let metrics = Arc::new(Metrics::new());
        let layer = ApiMeteringLayer { metrics: metrics.clone(), readiness: Arc::new(Readiness::new(1)) };
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        deployster::client::install_crypto();
        let client = kube::client::ClientBuilder::try_from(config).unwrap().with_layer(&layer).build();
        let executor = Arc::new(KubeObjects::with_client(client));
        let manifest = Arc::new(load_validated(std::slice::from_ref(&path), &[]).expect("valid manifest"));
        let options = || RunOptions { parallelism: 16, ..RunOptions::default() };

        let started = Instant::now();
        let prepared = Engine::new(manifest.clone(), executor.clone(), options()).prepare().await.expect("init");
        let plan = prepared.plan().await;
        let report = prepared.apply(&plan, &ApproveAll).await.expect("applicable");
        assert!(report.succeeded(), "every object applied");
        let applied = started.elapsed();
        let after_apply = requests(&metrics);

        let started = Instant::now();
        let prepared = Engine::new(manifest, executor, options()).prepare().await.expect("init");
        let plan = prepared.plan().await;
        let checked = started.elapsed();
        assert_eq!(plan.counts().valid, objects, "nothing changed: every object VALID");
        let check_requests = requests(&metrics) - after_apply;
        println!(
            "{objects} ConfigMaps: apply {:.2} s ({:.1} API requests per object); \
             drift check with nothing changed {:.2} s = {:.2} ms per object, {:.2} API requests per object",
            applied.as_secs_f64(),
            after_apply / objects as f64,
            checked.as_secs_f64(),
            checked.as_secs_f64() * 1000.0 / objects as f64,
            check_requests / objects as f64,
        );
    });
    let _ = std::process::Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "delete", "namespace", &namespace, "--wait=false"])
        .output();
}

/// Every request the client made so far.
fn requests(metrics: &Metrics) -> f64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("deployster_kube_api_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
