//! The chart installed by `helm install` on a cluster whose Pods really run
//! (`DEPLOYSTER_E2E_CLUSTER`, the kubeconfig `../shared/cluster/up.sh` printed): the controller
//! runs as a Pod of the chart's Deployment, from the image `image/build.sh` builds, pushed to the
//! cluster's registry, and runs image types as Pods of the Manifest's namespace.
//!
//! It runs as a user's would: in-cluster configuration, its own ServiceAccount's token, the
//! chart's RBAC and nothing else; every API request it makes is answered, none refused. The
//! one setting this cluster needs is the chart's general `pods.registryEndpoints`: image
//! names say `127.0.0.1:<port>` (what the node pulls from), which inside the controller's Pod
//! is the Pod's own loopback, so the controller reads image configs at `REGISTRY_IN_PODS`.
#![cfg(all(feature = "docker", feature = "kube"))]

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::cluster::{Cluster, wait_for};
use support::helm::{chart, helm, run_helm};
use support::pod_objects::{assert_nothing_left, claim, host_volume, manifest, on_cluster, wait_until_a_pod_runs};

/// The chart's values: the controller image from the cluster's registry, watching the test's
/// namespace, reading image configs where a Pod reaches the registry.
fn values(image: &str, namespace: &str, registry: &str, registry_in_pods: &str) -> String {
    let (repository, tag) = image.rsplit_once(':').unwrap();
    format!(
        r#"
image: {{repository: "{repository}", tag: "{tag}", pullPolicy: Always}}
watchNamespaces: [{namespace}]
leaderElection: {{leaseDuration: 8s}}
shutdownGrace: 2s
logLevel: info,deployster=debug
pods: {{registryEndpoints: {{"{registry}": "http://{registry_in_pods}"}}}}
"#
    )
}

/// The controller's API requests that were refused (403), from its `/metrics` read through
/// the API server's proxy to Pod `pod`: `verb group/resource` each.
fn refused_requests(cluster: &Cluster, pod: &str) -> Vec<String> {
    let path = format!("/api/v1/namespaces/{}/pods/{pod}:8080/proxy/metrics", cluster.namespace);
    let metrics = cluster.must(&["get", "--raw", &path]);
    let label = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\"")).map(|i| i + name.len() + 2)?;
        Some(line[start..].split('"').next()?.to_string())
    };
    let requests: Vec<&str> =
        metrics.lines().filter(|l| l.starts_with("deployster_kube_api_requests_total{")).collect();
    assert!(!requests.is_empty(), "the controller counts its API requests:\n{metrics}");
    requests
        .iter()
        .filter(|l| label(l, "code").as_deref() == Some("403"))
        .map(|l| {
            format!("{} {}/{}", label(l, "verb").unwrap(), label(l, "group").unwrap(), label(l, "resource").unwrap())
        })
        .collect()
}

/// Name and `status.phase` of the controller's Pods, the deleted ones aside.
fn controller_pods(cluster: &Cluster) -> Vec<(String, String)> {
    let list = cluster.get(&["pods", "-l", "app.kubernetes.io/name=deployster"]).unwrap_or_default();
    let pods = list["items"].as_array().cloned().unwrap_or_default();
    pods.iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap_or_default().to_string();
            (name, p["status"]["phase"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Waits (up to 2 minutes) for one controller Pod other than `not` to run and be ready; its
/// name. Fails with the Pods' states and the logs of their controller containers.
fn wait_for_controller(cluster: &Cluster, not: Option<&str>) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let candidates = controller_pods(cluster).into_iter().filter(|(n, _)| Some(n.as_str()) != not);
        if let Some((name, _)) =
            candidates.into_iter().find(|(name, _)| cluster.get(&["pod", name]).is_some_and(|p| ready(&p)))
        {
            return name;
        }
        if std::time::Instant::now() > deadline {
            let (_, pods) = cluster.kubectl(&cluster.ns(&["get", "pods", "-o", "wide"]));
            let (_, logs) =
                cluster.kubectl(&cluster.ns(&["logs", "-l", "app.kubernetes.io/name=deployster", "--tail", "30"]));
            panic!("no ready controller Pod (other than {not:?}) after 2 minutes:\n{pods}\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// SIGKILLs the controller container of Pod `pod` on the node's Docker daemon `host` (the
/// kubelet's dockershim names it `k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`).
fn kill_container(host: &str, pod: &str) {
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker").args(["-H", host]).args(args).output().expect("run docker");
        assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let id = docker(&["ps", "--quiet", "--filter", &format!("name=k8s_controller_{pod}_")]);
    assert!(!id.is_empty() && !id.contains('\n'), "one running controller container of {pod}: {id:?}");
    docker(&["kill", "--signal", "KILL", &id]);
}

/// A Helm release, uninstalled when dropped (a failed test must not leave its controller
/// running: it would keep the namespace's Manifests' finalizers).
struct Release<'a> {
    helm: &'a Path,
    name: String,
    kube: [&'a str; 4],
    installed: bool,
}

impl Release<'_> {
    fn uninstall(&mut self) -> (bool, String) {
        self.installed = false;
        let (ok, out, err) =
            run_helm(self.helm, &[&["uninstall", self.name.as_str(), "--wait"], &self.kube[..]].concat());
        (ok, format!("{out}{err}"))
    }
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if self.installed {
            let _ = self.uninstall();
        }
    }
}

/// `examples/k8s/push.sh`, pushing to the cluster's registry, applied as a cluster user would.
fn apply_the_example(cluster: &Cluster, registry: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("examples/k8s/push.sh")).arg(registry).output().unwrap();
    assert!(out.status.success(), "examples/k8s/push.sh: {}", String::from_utf8_lossy(&out.stderr));
    let example = String::from_utf8(out.stdout).unwrap();
    assert!(example.contains(&format!("type: {registry}/deployster/file:local")), "{example}");
    cluster.apply_yaml(&example);
}

/// What a failure shows of the controller's Pod `pod`: its log (and its previous container's,
/// with its restarts), the namespace's events and Pods — taken before the release goes.
struct Witness<'a> {
    cluster: &'a Cluster,
    pod: std::cell::RefCell<String>,
}

impl Drop for Witness<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let (cluster, pod) = (self.cluster, self.pod.borrow());
        let say = |what: &str, args: &[&str]| eprintln!("--- {what}:\n{}", cluster.kubectl(&cluster.ns(args)).1);
        say("the controller's log", &["logs", &pod, "--tail", "120"]);
        say("its previous container's log", &["logs", &pod, "--previous", "--tail", "40"]);
        let restarts = "jsonpath={.status.containerStatuses[*].restartCount} {.status.containerStatuses[*].lastState}";
        say("its restarts and last state", &["get", "pod", &pod, "-o", restarts]);
        say("the events", &["get", "events", "--sort-by=.lastTimestamp"]);
        say("the Pods", &["get", "pods", "-o", "wide"]);
    }
}

/// `helm install` runs the controller as a Pod that applies `examples/k8s/` (image types in
/// Pods, a claim plugged in, a dependency's state read, delete actions run); its Pod killed
/// mid-action, the Deployment's next Pod never runs the action twice at once and converges;
/// `helm uninstall` leaves nothing behind.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test helm_cluster -- --include-ignored"]
#[test]
fn the_chart_installed_by_helm_runs_the_k8s_example_in_pods_and_uninstalls_cleanly() {
    let helm = helm();
    let (env, cluster) = on_cluster("helm-pods");
    let ns = cluster.namespace.as_str();
    let dir = claim(&cluster);
    let values_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(values_file.path(), values(&env.helper, ns, &env.registry, &env.registry_in_pods)).unwrap();
    let kube = ["--kubeconfig", cluster.kubeconfig.as_str(), "--namespace", ns];
    let mut release = Release { helm: &helm, name: format!("pods-{}", std::process::id()), kube, installed: true };
    let chart = chart();
    let values = values_file.path().to_str().unwrap();
    let (ok, out, err) = run_helm(
        &helm,
        &[&["install", &release.name, chart.to_str().unwrap(), "--values", values], &kube[..]].concat(),
    );
    assert!(ok, "helm install: {out}{err}");
    let first = wait_for_controller(&cluster, None);
    let witness = Witness { cluster: &cluster, pod: first.clone().into() };

    // The example's claim names no storage class; the cluster has no provisioner.
    let files = host_volume(&cluster, "demo-files", "");
    apply_the_example(&cluster, &env.registry);
    // And an object of builtin/kubernetes, which the controller applies as the Manifest's own
    // ServiceAccount (impersonation, the one right the chart gives it for this).
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    cluster.apply_yaml(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {name: objects}\nspec:\n  \
         deletionPolicy: Delete\n  serviceAccountName: deployer\n  resources:\n    cm:\n      type: builtin/kubernetes\n      \
         config: {object: {apiVersion: v1, kind: ConfigMap, metadata: {name: made-as-deployer}, data: {a: b}}}\n",
    );
    // Four minutes: generous for the first passes in Pods on a loaded 2-core machine. (The
    // controller's restarts that once made this necessary were the test cluster's bridge changing
    // its MAC address under the controller's Pod; `support::pods` pins it now.)
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    while cluster.condition("demo", "Ready") != "True" {
        if std::time::Instant::now() > deadline {
            let status = cluster.get(&["manifest", "demo"]).map(|m| m["status"].clone());
            panic!("the example was not Ready after 4 minutes: {status:#?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for("the builtin/kubernetes Manifest to be Ready", Duration::from_secs(60), || {
        cluster.condition("objects", "Ready") == "True"
    });
    assert!(cluster.get(&["configmap", "made-as-deployer"]).is_some(), "applied as the Manifest's ServiceAccount");
    let app = files.join("demo-staging/app.json");
    assert_eq!(
        std::fs::read_to_string(&app).unwrap(),
        "{\"env\": \"staging\"}\n",
        "written through a dependency's state"
    );

    // A Pipeline takes a revision to a Manifest of builtin/kubernetes: its log in ConfigMaps, the
    // step patching the Manifest's vars, all under the chart's RBAC.
    cluster.apply_yaml(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {name: staged}\nspec:\n  \
         deletionPolicy: Delete\n  serviceAccountName: deployer\n  vars: {version: none}\n  resources:\n    cm:\n      \
         type: builtin/kubernetes\n      config: {object: {apiVersion: v1, kind: ConfigMap, metadata: {name: staged}, \
         data: {version: \"{{ version }}\"}}}\n---\napiVersion: deployster.io/v1alpha1\nkind: Pipeline\n\
         metadata: {name: ship}\nspec:\n  revision: \"{{ version }}\"\n  vars: {version: \"2.0\"}\n  stages:\n    \
         - {name: only, targets: [{name: t, manifest: staged}], steps: [deploy]}\n",
    );
    wait_for("the Pipeline's revision to be through", Duration::from_secs(120), || {
        let pipeline = cluster.get(&["pipeline", "ship"]).unwrap_or_default();
        pipeline["status"]["latestThrough"] == "2.0"
    });
    let staged = cluster.get(&["configmap", "staged"]).expect("the step's Manifest applied");
    assert_eq!(staged["data"]["version"], "2.0", "the revision's vars reached the object");

    // Everything it did so far, under the chart's RBAC alone, was allowed.
    let refused = refused_requests(&cluster, &first);
    assert!(refused.is_empty(), "the chart's RBAC lacks what the controller asked for: {refused:?}");

    // The controller's Pod is killed in the middle of a long action: its process by SIGKILL, as
    // a crash would, and the Pod deleted at once, as with a node lost; the Deployment's next Pod
    // takes the lease, finds the action's Pod and stops it before anything starts the action
    // again. (The process is killed through the node's Docker daemon first: a force-deleted
    // Pod's containers are stopped by the kubelet only on its next sync.)
    let fixture = &env.fixture_plugs;
    cluster.apply_yaml(&manifest(
        "slow",
        "",
        &format!("    slow: {{type: {fixture}, config: {{marker: /rw/slow.marker, lock: /rw/lock, action_sleep_ms: 20000}}}}\n"),
    ));
    let lock_log = dir.join("lock.log");
    let started = || std::fs::read_to_string(&lock_log).unwrap_or_default().matches(" started ").count();
    wait_for("the action to start in its Pod", Duration::from_secs(90), || started() == 1);
    wait_until_a_pod_runs(&cluster);
    kill_container(&env.node_docker, &first);
    cluster.must(&cluster.ns(&["delete", "pod", &first, "--grace-period=0", "--force"]));
    let second = wait_for_controller(&cluster, Some(&first));
    witness.pod.replace(second.clone());
    wait_for("slow to be Ready", Duration::from_secs(180), || cluster.condition("slow", "Ready") == "True");
    let log = std::fs::read_to_string(&lock_log).unwrap();
    assert!(!log.contains("overlap"), "the action ran twice at once:\n{log}");
    assert_eq!(started(), 2, "the interrupted action ran again, once:\n{log}");
    assert!(dir.join("slow.marker").exists());
    let history = cluster.history("slow");
    assert!(
        history.iter().any(|e| e["event"].as_str().is_some_and(|e| e.contains("interrupted") || e.contains("cancel"))),
        "the interrupted pass is recorded: {history:#?}"
    );

    // Deleted, the example runs its delete actions in Pods of the new controller.
    cluster.must(&cluster.ns(&["delete", "pipeline", "ship", "--wait=false"]));
    for name in ["demo", "slow", "objects", "staged"] {
        cluster.must(&cluster.ns(&["delete", "manifest", name, "--wait=false"]));
    }
    for name in ["demo", "slow", "objects", "staged"] {
        wait_for("the Manifests to go", Duration::from_secs(120), || cluster.get(&["manifest", name]).is_none());
    }
    assert!(!app.exists() && !files.join("demo-staging").exists(), "the delete actions did not run");
    assert!(cluster.get(&["configmap", "made-as-deployer"]).is_none(), "deletionPolicy: Delete, as deployer");
    assert!(cluster.get(&["configmap", "staged"]).is_none(), "deletionPolicy: Delete, as deployer");
    assert_nothing_left(&cluster);
    let refused = refused_requests(&cluster, &second);
    assert!(refused.is_empty(), "the chart's RBAC lacks what the controller asked for: {refused:?}");

    let (ok, out) = release.uninstall();
    assert!(ok, "helm uninstall: {out}");
    wait_for("the controller's Pods to go", Duration::from_secs(60), || controller_pods(&cluster).is_empty());
    let (ok, rest) = cluster.kubectl(&cluster.ns(&[
        "get",
        "deployments.apps,replicasets.apps,serviceaccounts,services,roles.rbac.authorization.k8s.io,\
         rolebindings.rbac.authorization.k8s.io,leases.coordination.k8s.io",
        "-l",
        &format!("app.kubernetes.io/instance={}", release.name),
        "-o",
        "name",
    ]));
    assert!(ok, "{rest}");
    assert_eq!(rest.trim(), "", "the release's objects are gone");
    // The Lease is the controller's, owned by the leader's Pod: Kubernetes' garbage collector
    // removes it once that Pod is gone.
    wait_for("the garbage collector to remove the leader-election Lease", Duration::from_secs(90), || {
        cluster.get(&["leases.coordination.k8s.io", "deployster-controller"]).is_none()
    });
    let (ok, everywhere) =
        cluster.kubectl(&["get", "pods,secrets", "--all-namespaces", "-l", "deployster.io/owner", "-o", "name"]);
    assert!(ok && everywhere.trim().is_empty(), "nothing of Deployster's in any namespace: {everywhere}");
}
