//! Drift corrected in seconds (issue 52), on a real API server; prints figures, asserts nothing.
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig of ../shared/apiserver/up.sh> cargo bench --bench watches`
//!
//! `DEPLOYSTER_BENCH_MANIFESTS` (default 100) Manifests of 4 `builtin/kubernetes` objects each
//! (a ServiceAccount, a ConfigMap, a headless Service — the test server's range of Service IPs
//! holds fewer than 2,000 — and a Deployment at 0 replicas), in one namespace,
//! acting as one ServiceAccount, at the default interval (`5m`) until the idle phase, which sets
//! `interval: DEPLOYSTER_BENCH_INTERVAL` (default `1m`, so that its window sees every
//! Manifest's interval pass), the controller at the chart's default concurrency (read from
//! `charts/deployster/values.yaml`; `DEPLOYSTER_BENCH_CONCURRENCY` overrides it). It measures:
//!
//! 1. **Converging**: from one `kubectl apply` of the Manifests to all Ready (as the controller's
//!    watch cache sees them),
//!    the controller's peak RSS and CPU, and the API requests per object by verb and resource
//!    (every client's, the control plane's too); against `kubectl apply --server-side` of the
//!    same objects.
//! 2. **Edits**: 5 ConfigMaps patched and 5 Deployments scaled, one at a time, each until it is
//!    as declared again (polled with `kubectl get`, 0.2 s apart): median and worst.
//! 3. **A fight**, when `DEPLOYSTER_BENCH_FIGHT_SECS` is set (600: the issue's ten minutes):
//!    another writer scales a Deployment back whenever it is corrected; when each correction
//!    came, and when the Manifest said `Thrashing`.
//! 4. **Idle**: a minute after, over `DEPLOYSTER_BENCH_WINDOW_SECS` (default 120), the API server's requests
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

fn kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(field)?.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// CPU seconds process `pid` has used (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's name in parentheses: utime and stime are the 12th and 13th fields.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `apiserver_request_total` summed by verb and resource ("PATCH configmaps").
fn requests(cluster: &Cluster) -> BTreeMap<String, f64> {
    let (ok, text) = cluster.kubectl(&["get", "--raw", "/metrics"]);
    assert!(ok, "the API server's metrics: {text}");
    let label = |labels: &str, name: &str| {
        labels.split(&format!(",{name}=\"")).nth(1).and_then(|v| v.split('"').next()).unwrap_or("").to_string()
    };
    let mut counted = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        let labels = labels.replacen('{', ",", 1);
        let key = format!(
            "{} {}{}",
            label(&labels, "verb"),
            label(&labels, "resource"),
            match label(&labels, "subresource") {
                sub if sub.is_empty() => String::new(),
                sub => format!("/{sub}"),
            }
        ) + if label(&labels, "dry_run").is_empty() { "" } else { " (dry run)" };
        *counted.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    counted
}

/// What was asked between `before` and `after`, each divided by `per`, largest first.
fn asked(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, per: f64) -> (f64, Vec<String>) {
    let mut rows: Vec<(&String, f64)> =
        after.iter().map(|(key, n)| (key, (n - before.get(key).copied().unwrap_or(0.0)) / per)).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total = rows.iter().map(|(_, n)| n).sum();
    (total, rows.iter().filter(|(_, n)| *n >= 0.05).map(|(key, n)| format!("{key} {n:.1}")).collect())
}

/// `--concurrency` as the chart sets it by default, unless `DEPLOYSTER_BENCH_CONCURRENCY` says.
fn concurrency() -> String {
    if let Ok(n) = std::env::var("DEPLOYSTER_BENCH_CONCURRENCY") {
        return n;
    }
    let values = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/deployster/values.yaml");
    let values = std::fs::read_to_string(values).expect("the chart's values");
    let line = values.lines().find_map(|line| line.strip_prefix("concurrency:"));
    line.expect("the chart's values set `concurrency`").trim().to_string()
}

fn controller(cluster: &Cluster, dir: &std::path::Path, name: &str) -> ControllerProcess {
    ControllerProcess::start(cluster, dir, name, &["--namespace", &cluster.namespace, "--concurrency", &concurrency()])
}

/// A Deployment of a Manifest at the default interval (5m) that another writer scales to 2
/// whenever it is back at 0 (an HPA's way), for `window`: when each correction came, and when
/// the Manifest said `Thrashing`.
fn fought(cluster: &Cluster, window: Duration) {
    let object = "{apiVersion: apps/v1, kind: Deployment, metadata: {name: fought}, spec: {replicas: 0, selector: \
                  {matchLabels: {app: fought}}, template: {metadata: {labels: {app: fought}}, spec: {containers: \
                  [{name: web, image: registry.invalid/web:1}]}}}}";
    cluster.apply_yaml(&format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: fight}}\nspec:\n  \
         serviceAccountName: deployer\n  resources:\n    web:\n      type: builtin/kubernetes\n      config: {{object: {object}}}\n"
    ));
    wait_for("the fought Manifest to be Ready", Duration::from_secs(120), || {
        cluster.condition("fight", "Ready") == "True"
    });
    let started = Instant::now();
    let (mut corrections, mut thrashing, mut checked) = (Vec::new(), None, Instant::now());
    // Back at 0 after the writer scaled it: a correction (the first 0 is the Manifest's own).
    let mut scaled = false;
    while started.elapsed() < window {
        if cluster.get(&["deployment", "fought"]).is_some_and(|d| d["spec"]["replicas"] == 0) {
            if scaled {
                corrections.push(started.elapsed().as_secs_f64());
            }
            cluster.must(&cluster.ns(&["scale", "deployment", "fought", "--replicas", "2"]));
            scaled = true;
        }
        if thrashing.is_none() && checked.elapsed() > Duration::from_secs(2) {
            checked = Instant::now();
            let manifest = cluster.get(&["manifest", "fight"]).unwrap_or_default();
            let conditions = manifest["status"]["conditions"].as_array().cloned().unwrap_or_default();
            if conditions.iter().any(|c| c["type"] == "Ready" && c["reason"] == "Thrashing") {
                thrashing = Some(started.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let at: Vec<String> = corrections.iter().map(|t| format!("{t:.0}")).collect();
    let gaps: Vec<String> = corrections.windows(2).skip(9).map(|w| format!("{:.0}", w[1] - w[0])).collect();
    println!(
        "fight: {:.0} s against a writer scaling a Deployment back at once (interval 5m): {} corrections, at {} s; \
         Thrashing said after {}; gaps after the tenth: [{}] s",
        window.as_secs_f64(),
        corrections.len(),
        at.join(" "),
        thrashing.map_or("never".to_string(), |t| format!("{t:.0} s")),
        gaps.join(" ")
    );
    cluster.must(&cluster.ns(&["delete", "manifest", "fight"]));
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
    let mut work = tempfile::tempdir().unwrap();
    // The controllers' logs, kept for a look afterwards when asked.
    work.disable_cleanup(std::env::var_os("DEPLOYSTER_BENCH_KEEP").is_some());
    eprintln!("the controllers' logs: {} (kept with DEPLOYSTER_BENCH_KEEP=1)", work.path().display());
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

    let running = controller(&cluster, work.path(), "watching");
    wait_for("the controller to be ready", Duration::from_secs(60), || {
        running.http("/readyz").is_some_and(|(code, _)| code == 200)
    });
    // At the default interval (5m), as users run them: no interval's check competes with the
    // converging. The idle phase below sets `interval`.
    let file = work.path().join("manifests.yaml");
    std::fs::write(&file, manifests(n, "5m")).unwrap();
    let before = requests(&cluster);
    let cpu_before = cpu_seconds(running.child.id());
    let started = Instant::now();
    cluster.must(&cluster.ns(&["apply", "-f", file.to_str().unwrap()]));
    // Read off the controller's watch cache: a kubectl listing every 200 ms would slow the API
    // server it measures (on two cores), and `kubectl wait` is throttled to a few objects a second.
    wait_for("every Manifest to be Ready", Duration::from_secs(60 * 30), || {
        running.metric(&format!(r#"deployster_manifests{{namespace="{}",ready="True"}}"#, cluster.namespace))
            == Some(n as f64)
    });
    let converged = started.elapsed();
    println!(
        "converge: {n} Manifests x 4 objects Ready in {:.1} s at --concurrency {}; kubectl apply --server-side of the {} objects: {:.1} s ({:.1}x); \
         controller peak RSS {:.0} MiB",
        converged.as_secs_f64(),
        concurrency(),
        4 * n,
        kubectl_took.as_secs_f64(),
        converged.as_secs_f64() / kubectl_took.as_secs_f64(),
        mib(kib(running.child.id(), "VmHWM:"))
    );
    let (total, rows) = asked(&before, &requests(&cluster), 4.0 * n as f64);
    let reconciles: f64 = ["succeeded", "failed"]
        .iter()
        .filter_map(|result| running.metric(&format!("deployster_reconciles_total{{result=\"{result}\"}}")))
        .sum();
    println!(
        "converge: {:.1} reconciles per Manifest, controller CPU {:.1} ms per Manifest; {total:.1} API requests per \
         object (every client): {}",
        reconciles / n as f64,
        (cpu_seconds(running.child.id()) - cpu_before) * 1000.0 / n as f64,
        rows.join(", ")
    );
    let mut own: Vec<((String, String, String), f64)> = cluster::api_requests(&running).into_iter().collect();
    own.sort_by(|a, b| b.1.total_cmp(&a.1));
    let own: Vec<String> = own
        .iter()
        .filter(|(_, count)| *count / n as f64 >= 0.05)
        .map(|((verb, _, resource), count)| format!("{verb} {resource} {:.1}", count / n as f64))
        .collect();
    println!("converge: the controller's own API requests per Manifest (since it started): {}", own.join(", "));
    // Deleted only now: the namespace controller's deletions would have slowed the converging.
    cluster.must(&["delete", "namespace", &plain, "--wait=false"]);
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

    // 3. A field fought over by another writer, when asked.
    let fight = env_number("DEPLOYSTER_BENCH_FIGHT_SECS", 0);
    if fight > 0 {
        fought(&cluster, Duration::from_secs(fight));
    } else {
        println!("fight: not run (DEPLOYSTER_BENCH_FIGHT_SECS=600 runs a 10-minute one)");
    }

    // 4. Idle, with the watches; then the interval alone: at `interval`, so that the window
    // sees every Manifest's check.
    let passed = running.metric(r#"deployster_reconciles_total{result="succeeded"}"#).unwrap_or(0.0);
    std::fs::write(&file, manifests(n, &interval)).unwrap();
    cluster.must(&cluster.ns(&["apply", "-f", file.to_str().unwrap()]));
    wait_for("every Manifest to pass at its new interval", Duration::from_secs(600), || {
        running.metric(r#"deployster_reconciles_total{result="succeeded"}"#).unwrap_or(0.0) >= passed + n as f64
    });
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
        let (total, verbs) = asked(&before, &after, minutes);
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
