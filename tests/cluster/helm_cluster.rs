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

use crate::support;
use std::path::Path;
use std::time::Duration;

use crate::support::cluster::{Cluster, rfc3339_now, wait_for};
use crate::support::helm::{chart, helm, run_helm};
use crate::support::pod_objects::{
    assert_nothing_left, claim, host_volume, manifest, on_cluster, wait_until_a_pod_runs,
};
use crate::support::pods::PodEnv;
use crate::support::replicas::assert_runs_never_interleave;
use serde_json::Value;

/// The chart's values: the controller image from the cluster's registry, watching the test's
/// namespace, reading image configs where a Pod reaches the registry.
fn values(image: &str, namespace: &str, registry: &str, registry_in_pods: &str, extra: &str) -> String {
    let (repository, tag) = image.rsplit_once(':').unwrap();
    format!(
        r#"
image: {{repository: "{repository}", tag: "{tag}", pullPolicy: Always}}
watchNamespaces: [{namespace}]
leaderElection: {{leaseDuration: 8s}}
shutdownGrace: 2s
logLevel: info,deployster=debug
pods: {{registryEndpoints: {{"{registry}": "http://{registry_in_pods}"}}}}
{extra}"#
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

/// Waits (up to 2 minutes) for `count` controller Pods other than those in `not` to run and be
/// ready; their names. Fails with the Pods' states and the logs of their controller containers.
fn wait_for_controllers(cluster: &Cluster, count: usize, not: &[String]) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let ready: Vec<String> = controller_pods(cluster)
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| !not.contains(name) && cluster.get(&["pod", name]).is_some_and(|p| ready(&p)))
            .collect();
        if ready.len() >= count {
            return ready;
        }
        if std::time::Instant::now() > deadline {
            let (_, pods) = cluster.kubectl(&cluster.ns(&["get", "pods", "-o", "wide"]));
            let (_, logs) =
                cluster.kubectl(&cluster.ns(&["logs", "-l", "app.kubernetes.io/name=deployster", "--tail", "30"]));
            panic!("not {count} ready controller Pods (other than {not:?}) after 2 minutes:\n{pods}\n{logs}");
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

impl<'a> Release<'a> {
    /// `helm install`s the chart into the test's namespace as release `<name>-<pid>`, with
    /// [`values`] and `extra`.
    fn install(helm: &'a Path, cluster: &'a Cluster, env: &PodEnv, name: &str, extra: &str) -> Self {
        let ns = cluster.namespace.as_str();
        let values_file = tempfile::NamedTempFile::new().unwrap();
        let text = values(&env.helper, ns, &env.registry, &env.registry_in_pods, extra);
        std::fs::write(values_file.path(), text).unwrap();
        let kube = ["--kubeconfig", cluster.kubeconfig.as_str(), "--namespace", ns];
        let release = Release { helm, name: format!("{name}-{}", std::process::id()), kube, installed: true };
        let (chart, values) = (chart(), values_file.path().to_str().unwrap());
        let install = ["install", release.name.as_str(), chart.to_str().unwrap(), "--values", values];
        let (ok, out, err) = run_helm(helm, &[&install[..], &kube[..]].concat());
        assert!(ok, "helm install: {out}{err}");
        release
    }

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
    let out = std::process::Command::new(root.join("examples/k8s/push.sh"))
        .arg(registry)
        .env("PROFILE", crate::support::docker::static_profile())
        .output()
        .unwrap();
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
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster helm_cluster:: -- --include-ignored"]
#[test]
fn the_chart_installed_by_helm_runs_the_k8s_example_in_pods_and_uninstalls_cleanly() {
    let _serial = support::cluster::one_at_a_time();
    let helm = helm();
    let (env, cluster) = on_cluster("helm-pods");
    let dir = claim(&cluster);
    let mut release = Release::install(&helm, &cluster, env, "pods", "");
    let first = wait_for_controllers(&cluster, 1, &[]).remove(0);
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
    let second = wait_for_controllers(&cluster, 1, std::slice::from_ref(&first)).remove(0);
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

/// The live runner Pods (a Manifest has one per identity: its type's `init` without plugs, the
/// rest with them), each owned by its Manifest: name and uid.
fn runners(cluster: &Cluster) -> std::collections::BTreeMap<String, String> {
    let list = cluster.get(&["pods", "-l", "deployster.io/runner"]).unwrap_or_default();
    let live = list["items"].as_array().into_iter().flatten().filter(|p| p["metadata"]["deletionTimestamp"].is_null());
    live.map(|pod| {
        let owners = pod["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
        assert!(owners.iter().any(|o| o["kind"] == "Manifest"), "a runner is owned by its Manifest: {pod:#}");
        let (name, uid) = (&pod["metadata"]["name"], &pod["metadata"]["uid"]);
        (name.as_str().unwrap().to_string(), uid.as_str().unwrap().to_string())
    })
    .collect()
}

/// The Pod each Manifest's status names as its reconciler (a replica's identity is
/// `<hostname>_<random>`, its hostname its Pod's name), and when it wrote it.
fn reconciling_pods(cluster: &Cluster) -> std::collections::BTreeMap<String, (String, String)> {
    let by_identity = cluster.reconcilers();
    by_identity
        .into_iter()
        .map(|(m, (replica, at))| (m, (replica.split('_').next().unwrap().to_string(), at)))
        .collect()
}

/// `replicas: 2` with `sharding.enabled`: the two Pods share six Manifests of an image type run
/// by warm runners. Scaled to three, the shards that move take their runners with them (the same
/// runner Pods, adopted, none started twice); a rolling restart replaces every replica while
/// actions run, and no action ever runs twice at once (each Manifest's lock and its history); the
/// chart's RBAC suffices; `helm uninstall` leaves no Lease of the shard group behind.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster helm_cluster:: -- --include-ignored"]
#[test]
fn the_chart_installed_sharded_shares_the_manifests_and_their_runners_across_a_rolling_restart() {
    let _serial = support::cluster::one_at_a_time();
    let helm = helm();
    let (env, cluster) = on_cluster("helm-shards");
    let ns = cluster.namespace.as_str();
    let dir = claim(&cluster);
    let sharded = "replicas: 2\nsharding: {enabled: true, shards: 4}\n";
    let mut release = Release::install(&helm, &cluster, env, "shards", sharded);
    let first = wait_for_controllers(&cluster, 2, &[]);
    let witness = Witness { cluster: &cluster, pod: first[0].clone().into() };

    // Six Manifests whose action (1.5 s, every pass: it never becomes VALID) holds a lock of its
    // Manifest's own, and logs `overlap` there if it ever finds another copy of itself running.
    // Names picked so that each of the four shards has one at least: every replica has work.
    let shard = |name: &str| deployster::controller::replicas::shards::assign::shard_of(ns, name, 4);
    let mut names: Vec<String> = Vec::new();
    for candidate in (0..).map(|i| format!("shared-{i}")) {
        let covered: std::collections::BTreeSet<u32> = names.iter().map(|n| shard(n)).collect();
        // A second Manifest of a shard only while the rest still leaves room for those uncovered.
        if !covered.contains(&shard(&candidate)) || 6 - names.len() > 4 - covered.len() {
            names.push(candidate);
        }
        if names.len() == 6 {
            break;
        }
    }
    let fixture = &env.fixture_plugs;
    for name in &names {
        cluster.apply_yaml(&manifest(
            name,
            "  retryInterval: 2s\n",
            &format!(
                "    work: {{type: {fixture}, config: {{marker: /rw/{name}.marker, lock: /rw/{name}.lock, \
                 action_sleep_ms: 1500, stays_stale: true}}}}\n"
            ),
        ));
    }
    let pods_named = |expected: &[String]| {
        let by = reconciling_pods(&cluster);
        names.iter().all(|m| by.get(m).is_some_and(|(pod, _)| expected.contains(pod)))
            && expected.iter().all(|p| by.values().any(|(pod, _)| pod == p))
    };
    wait_for("both replicas to reconcile their share", Duration::from_secs(240), || {
        let ran = |name: &String| {
            let history = cluster.history(name);
            history.iter().any(|e| e["event"].as_str().is_some_and(|e| e.starts_with("run-f")))
        };
        // Every Manifest ran a pass through to its end: its runners are started.
        pods_named(&first) && names.iter().all(ran)
    });
    let before = runners(&cluster);

    // A third replica: shards move to it, each with its Manifests' runners.
    let deployment = format!("deployment/{}-deployster", release.name);
    cluster.must(&cluster.ns(&["scale", &deployment, "--replicas=3"]));
    let third = wait_for_controllers(&cluster, 1, &first).remove(0);
    let three: Vec<String> = first.iter().cloned().chain([third.clone()]).collect();
    wait_for("the third replica to reconcile a share", Duration::from_secs(120), || pods_named(&three));
    let moved: Vec<String> =
        reconciling_pods(&cluster).into_iter().filter(|(_, (pod, _))| *pod == third).map(|(m, _)| m).collect();
    assert!(!moved.is_empty());
    let after = runners(&cluster);
    assert_eq!(after, before, "Manifests that moved ({moved:?}) kept their runners: the same Pods, adopted");

    // A rolling restart replaces the three replicas one by one, under load.
    cluster.must(&cluster.ns(&["rollout", "restart", &deployment]));
    let (ok, out) = cluster.kubectl(&cluster.ns(&["rollout", "status", &deployment, "--timeout=240s"]));
    assert!(ok, "the rolling restart did not finish: {out}");
    let replaced = wait_for_controllers(&cluster, 3, &three);
    witness.pod.replace(replaced[0].clone());
    let restarted = rfc3339_now();
    wait_for("the new replicas to reconcile everything", Duration::from_secs(120), || {
        let by = reconciling_pods(&cluster);
        pods_named(&replaced) && names.iter().all(|m| by[m].1 > restarted)
    });
    for name in &names {
        let log = std::fs::read_to_string(dir.join(format!("{name}.lock.log"))).unwrap_or_default();
        assert!(log.contains(" started ") && !log.contains("overlap"), "{name}'s action ran twice at once:\n{log}");
        assert_runs_never_interleave(&cluster.history(name));
    }
    for pod in &replaced {
        let refused = refused_requests(&cluster, pod);
        assert!(refused.is_empty(), "the chart's RBAC lacks what a sharded replica asked for: {refused:?}");
    }
    // The shard group's Leases: four shard Leases and the members'. A replaced replica's member
    // Lease goes with its Pod (the garbage collector) or is swept by the holder of shard 0.
    let leases = || {
        let list =
            cluster.get(&["leases.coordination.k8s.io", "-l", "deployster.io/shard-group=deployster-controller"]);
        list.unwrap_or_default()["items"].as_array().map_or(0, Vec::len)
    };
    wait_for("four shard Leases and three member Leases", Duration::from_secs(60), || leases() == 4 + 3);

    for name in &names {
        cluster.must(&cluster.ns(&["delete", "manifest", name, "--wait=false"]));
    }
    for name in &names {
        wait_for("the Manifests to go", Duration::from_secs(120), || cluster.get(&["manifest", name]).is_none());
    }
    assert_nothing_left(&cluster);
    let (ok, out) = release.uninstall();
    assert!(ok, "helm uninstall: {out}");
    wait_for("the controller's Pods to go", Duration::from_secs(60), || controller_pods(&cluster).is_empty());
    // Member Leases are owned by their Pods, shard Leases by the member Lease of their last
    // holder: the garbage collector removes the whole group.
    wait_for("the garbage collector to remove the shard group's Leases", Duration::from_secs(90), || leases() == 0);
}
