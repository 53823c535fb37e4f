//! Drift corrected in seconds (issue 52), on a real API server; prints figures, asserts nothing.
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig of ../shared/apiserver/up.sh> cargo bench --bench watches`
//!
//! `DEPLOYSTER_BENCH_MANIFESTS` (default 100) Manifests of 4 `builtin/kubernetes` objects each
//! (a ServiceAccount, a ConfigMap, a headless Service — the test server's range of Service IPs
//! holds fewer than 2,000 — and a Deployment at 0 replicas), in one namespace,
//! acting as one ServiceAccount, `interval: DEPLOYSTER_BENCH_INTERVAL` (default `1m`, so that
//! the idle window below sees every Manifest's interval pass), the controller at the chart's
//! default concurrency (4). It measures:
//!
//! 1. **Converging**: from one `kubectl apply` of the Manifests to all Ready, and the
//!    controller's peak RSS; against `kubectl apply --server-side` of the same objects.
//! 2. **Edits**: 5 ConfigMaps patched and 5 Deployments scaled, one at a time, each until it is
//!    as declared again (polled with `kubectl get`, about 0.1 s apart): median and worst.
//! 3. **Idle**: a minute after, over `DEPLOYSTER_BENCH_WINDOW_SECS` (default 120), the API server's requests
//!    per minute (`apiserver_request_total`, every client: the controller, its ServiceAccounts'
//!    impersonated requests, and the control plane's own) and the controller's RSS — with the
//!    watches, then with `list`/`watch` taken from the ServiceAccount and the controller
//!    restarted: the interval alone, as before watches.

#[allow(dead_code)] // the tests' helpers: this bench uses a few
#[path = "../tests/support/cluster.rs"]
mod cluster;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster::{Cluster, ControllerProcess, wait_for};

/// The binary the controller processes run (`cluster.rs` asks its parent for it).
fn deployster() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_deployster"))
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn objects(i: usize) -> [String; 4] {
    [
        format!("{{apiVersion: v1, kind: ServiceAccount, metadata: {{name: app-{i}}}}}"),
        format!("{{apiVersion: v1, kind: ConfigMap, metadata: {{name: settings-{i}}}, data: {{level: info}}}}"),
        format!(
            "{{apiVersion: v1, kind: Service, metadata: {{name: web-{i}}}, spec: {{clusterIP: None, selector: {{app: web-{i}}}, ports: [{{port: 80, protocol: TCP}}]}}}}"
        ),
        format!(
            "{{apiVersion: apps/v1, kind: Deployment, metadata: {{name: web-{i}}}, spec: {{replicas: 0, selector: {{matchLabels: {{app: web-{i}}}}}, \
             template: {{metadata: {{labels: {{app: web-{i}}}}}, spec: {{containers: [{{name: web, image: registry.invalid/web:1}}]}}}}}}}}"
        ),
    ]
}

fn manifests(n: usize, interval: &str) -> String {
    let names = ["account", "settings", "service", "web"];
    (0..n)
        .map(|i| {
            let resources: String = names
                .iter()
                .zip(objects(i))
                .map(|(name, object)| format!("    {name}:\n      type: builtin/kubernetes\n      config: {{object: {object}}}\n"))
                .collect();
            format!(
                "---\napiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: m-{i}}}\nspec:\n  interval: {interval}\n  \
                 serviceAccountName: deployer\n  resources:\n{resources}"
            )
        })
        .collect()
}

fn ready_count(cluster: &Cluster) -> usize {
    let Some(list) = cluster.get(&["manifests"]) else { return 0 };
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let ready = |m: &serde_json::Value| {
        m["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    };
    items.iter().filter(|m| ready(m)).count()
}

fn kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(field)?.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `apiserver_request_total` summed by verb.
fn requests(cluster: &Cluster) -> BTreeMap<String, f64> {
    let (ok, text) = cluster.kubectl(&["get", "--raw", "/metrics"]);
    assert!(ok, "the API server's metrics: {text}");
    let mut by_verb = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        let verb = labels.split("verb=\"").nth(1).and_then(|v| v.split('"').next()).unwrap_or("?");
        *by_verb.entry(verb.to_string()).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    by_verb
}

fn controller(cluster: &Cluster, dir: &std::path::Path, name: &str) -> ControllerProcess {
    ControllerProcess::start(cluster, dir, name, &["--namespace", &cluster.namespace, "--concurrency", "4"])
}

fn grant(cluster: &Cluster, verbs: &str) {
    let resources = "serviceaccounts,configmaps,services,deployments.apps";
    let role = cluster.must(&cluster.ns(&[
        "create",
        "role",
        "deployer",
        "--verb",
        verbs,
        "--resource",
        resources,
        "--dry-run=client",
        "-o",
        "yaml",
    ]));
    cluster.apply_yaml(&role);
}

fn main() {
    if std::env::var("DEPLOYSTER_E2E_KUBECONFIG").is_err() {
        eprintln!("no API server (DEPLOYSTER_E2E_KUBECONFIG): nothing to measure");
        return;
    }
    let n = env_number("DEPLOYSTER_BENCH_MANIFESTS", 100) as usize;
    let window = Duration::from_secs(env_number("DEPLOYSTER_BENCH_WINDOW_SECS", 120));
    let interval = std::env::var("DEPLOYSTER_BENCH_INTERVAL").unwrap_or_else(|_| "1m".into());
    let cluster = Cluster::new("bench-watches");
    let work = tempfile::tempdir().unwrap();
    cluster.service_account(
        "deployer",
        "get,list,watch,create,patch,delete",
        "serviceaccounts,configmaps,services,deployments.apps",
    );

    // 1. Converging, against kubectl apply --server-side of the same objects.
    let plain = format!("{}-plain", cluster.namespace);
    cluster.must(&["create", "namespace", &plain]);
    let documents: String = (0..n).flat_map(objects).map(|o| format!("---\n{o}\n")).collect();
    let file = work.path().join("objects.yaml");
    std::fs::write(&file, documents).unwrap();
    let started = Instant::now();
    cluster.must(&["apply", "--server-side", "-n", &plain, "-f", file.to_str().unwrap()]);
    let kubectl_took = started.elapsed();
    cluster.must(&["delete", "namespace", &plain, "--wait=false"]);

    let running = controller(&cluster, work.path(), "watching");
    wait_for("the controller to be ready", Duration::from_secs(60), || {
        running.http("/readyz").is_some_and(|(code, _)| code == 200)
    });
    let file = work.path().join("manifests.yaml");
    std::fs::write(&file, manifests(n, &interval)).unwrap();
    let started = Instant::now();
    cluster.must(&cluster.ns(&["apply", "-f", file.to_str().unwrap()]));
    wait_for("every Manifest to be Ready", Duration::from_secs(60 * 30), || ready_count(&cluster) == n);
    let converged = started.elapsed();
    println!(
        "converge: {n} Manifests x 4 objects Ready in {:.1} s; kubectl apply --server-side of the {} objects: {:.1} s ({:.1}x); \
         controller peak RSS {:.0} MiB",
        converged.as_secs_f64(),
        4 * n,
        kubectl_took.as_secs_f64(),
        converged.as_secs_f64() / kubectl_took.as_secs_f64(),
        mib(kib(running.child.id(), "VmHWM:"))
    );
    wait_for("the watches to open", Duration::from_secs(60), || running.metric("deployster_watch_open") == Some(4.0));

    // 2. Edits, one at a time.
    let mut took = Vec::new();
    for k in 0..10 {
        let i = (k * 7919) % n;
        let started = Instant::now();
        let settings = format!("settings-{i}");
        let web = format!("web-{i}");
        if k % 2 == 0 {
            let patch = r#"{"data":{"level":"debug"}}"#;
            cluster.must(&cluster.ns(&["patch", "configmap", &settings, "--type", "merge", "-p", patch]));
            wait_for("the ConfigMap corrected", Duration::from_secs(600), || {
                cluster.get(&["configmap", &settings]).is_some_and(|c| c["data"]["level"] == "info")
            });
        } else {
            cluster.must(&cluster.ns(&["scale", "deployment", &web, "--replicas", "2"]));
            wait_for("the Deployment corrected", Duration::from_secs(600), || {
                cluster.get(&["deployment", &web]).is_some_and(|d| d["spec"]["replicas"] == 0)
            });
        }
        took.push(started.elapsed().as_secs_f64());
    }
    let mut sorted = took.clone();
    sorted.sort_by(f64::total_cmp);
    let said: Vec<String> = took.iter().map(|t| format!("{t:.2}")).collect();
    println!(
        "edits: 5 ConfigMaps patched, 5 Deployments scaled: corrected after median {:.2} s, worst {:.2} s (each: {})",
        (sorted[4] + sorted[5]) / 2.0,
        sorted[9],
        said.join(" ")
    );

    // 3. Idle, with the watches; then the interval alone.
    let idle = |controller: &ControllerProcess, what: &str| {
        // What creation set off settles first: the token controller's Secrets on new
        // ServiceAccounts, the Deployments' revision annotations (each a change, read once).
        std::thread::sleep(Duration::from_secs(60));
        let before = requests(&cluster);
        let passes = controller.metric(r#"deployster_reconciles_total{result="succeeded"}"#).unwrap_or(0.0);
        std::thread::sleep(window);
        let after = requests(&cluster);
        let passes = controller.metric(r#"deployster_reconciles_total{result="succeeded"}"#).unwrap_or(0.0) - passes;
        let minutes = window.as_secs_f64() / 60.0;
        let per_minute: BTreeMap<&String, f64> =
            after.iter().map(|(verb, n)| (verb, (n - before.get(verb).copied().unwrap_or(0.0)) / minutes)).collect();
        let total: f64 = per_minute.values().sum();
        let verbs: Vec<String> =
            per_minute.iter().filter(|(_, n)| **n >= 0.5).map(|(verb, n)| format!("{verb} {n:.0}")).collect();
        println!(
            "idle, {what}: {total:.0} API requests/min ({}), {:.0} passes/min, controller RSS {:.0} MiB, watches open {}",
            verbs.join(", "),
            passes / minutes,
            mib(kib(controller.child.id(), "VmRSS:")),
            controller.metric("deployster_watch_open").unwrap_or(0.0)
        );
    };
    idle(&running, "with watches");
    drop(running);
    grant(&cluster, "get,create,patch,delete");
    let interval_only = controller(&cluster, work.path(), "interval-only");
    wait_for("the restarted controller to pass every Manifest", Duration::from_secs(600), || {
        interval_only.metric(r#"deployster_reconciles_total{result="succeeded"}"#).unwrap_or(0.0) >= n as f64
    });
    idle(&interval_only, "the interval alone (list/watch not granted)");
}
