//! The controller running image types as Pods (`--executor pod`, the chart's default) on a
//! cluster whose Pods really run: `DEPLOYSTER_E2E_CLUSTER` names the kubeconfig
//! `../shared/cluster/up.sh` printed (see tests/cluster/pods.rs for the images it builds and pushes).
//! The controller runs as a process of this machine against that cluster; the chart's own
//! installation of it is tests/cluster/helm_cluster.rs.
//!
//! A deleted Pod disappears once its kubelet has cleaned it up (a 1.20 kubelet checks on a
//! 10 s batch), so "nothing left" is waited for.
#![cfg(all(feature = "docker", feature = "kube"))]

use crate::support;
use std::path::Path;
use std::time::Duration;

use crate::support::cluster::{Cluster, ControllerProcess, assert_api_calls_are_listed, wait_for};
use crate::support::pod_objects::{
    assert_nothing_left, claim, dependent_pair, host_volume, manifest, on_cluster, wait_until_a_pod_runs,
};
use crate::support::pods::PodEnv;

/// `deployster controller` for the test's namespace, running image types in warm runners (the
/// default).
fn controller(env: &PodEnv, cluster: &Cluster, dir: &Path, name: &str) -> ControllerProcess {
    controller_with(env, cluster, dir, name, &[])
}

/// [`controller`] with `extra` arguments.
fn controller_with(env: &PodEnv, cluster: &Cluster, dir: &Path, name: &str, extra: &[&str]) -> ControllerProcess {
    let args = ["--namespace", &cluster.namespace, "--executor", "pod", "--helper-image", &env.helper];
    let args = [&args[..], extra].concat();
    let controller = ControllerProcess::start(cluster, dir, name, &args);
    wait_for("the controller's readiness", Duration::from_secs(30), || {
        controller.http("/readyz").is_some_and(|(code, _)| code == 200)
    });
    controller
}

fn status(cluster: &Cluster, name: &str) -> serde_json::Value {
    cluster.get(&["manifest", name]).map(|m| m["status"].clone()).unwrap_or_default()
}

/// The Ready condition's reason and message.
fn not_ready_because(cluster: &Cluster, name: &str) -> Option<(String, String)> {
    let status = status(cluster, name);
    let ready = status["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
    (ready["status"] == "False")
        .then(|| (ready["reason"].as_str().unwrap_or("").into(), ready["message"].as_str().unwrap_or("").into()))
}

/// The status line of resource `resource`.
fn resource_message(cluster: &Cluster, name: &str, resource: &str) -> String {
    let status = status(cluster, name);
    let found = status["resources"].as_array().into_iter().flatten().find(|r| r["name"] == resource);
    found.map(|r| format!("{} {}", r["status"], r["message"])).unwrap_or_default()
}

/// A Manifest of image types is applied in Pods of its namespace — its ServiceAccount, its
/// Secret and PersistentVolumeClaim plugs, `spec.pod` — kept (drift corrected), reports failing
/// actions, missing images and ServiceAccounts on the object, is deleted with its delete
/// actions run in Pods, and leaves no Pod or Secret behind; every API call is in the RBAC list.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster controller_pods:: -- --include-ignored"]
#[test]
fn the_controller_runs_image_types_as_pods_and_leaves_nothing() {
    let (env, cluster) = on_cluster("ctl-pods");
    let dir = claim(&cluster);
    let work = tempfile::tempdir().unwrap();
    cluster.apply_yaml("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: deployer}\n");
    let mut controller = controller(env, &cluster, work.path(), "controller");
    let fixture = &env.fixture_plugs;
    cluster.apply_yaml(&manifest(
        "app",
        "  serviceAccountName: deployer\n  deletionPolicy: Delete\n  pod: {resources: {limits: {memory: 64Mi}}}\n",
        &dependent_pair(fixture),
    ));
    wait_for("app to be Ready", Duration::from_secs(120), || cluster.condition("app", "Ready") == "True");
    assert_eq!(std::fs::read_to_string(dir.join("first.marker")).unwrap(), "hello");
    assert_eq!(std::fs::read_to_string(dir.join("second.marker")).unwrap(), "hello-2", "a dependency's state read");
    assert_eq!(status(&cluster, "app")["resourcesSummary"], "2/2");

    // Drift, corrected by a later pass in a Pod.
    std::fs::remove_file(dir.join("first.marker")).unwrap();
    wait_for("the drift to be corrected", Duration::from_secs(60), || dir.join("first.marker").exists());
    wait_for("the DriftCorrected event", Duration::from_secs(30), || {
        cluster.event_reasons("app").iter().any(|r| r == "DriftCorrected")
    });

    // A controller that stops deletes the runners it used, though their Manifest stays; the
    // next one starts its own.
    let runners = || {
        let pods = cluster.get(&["pods", "-l", "deployster.io/runner"]).unwrap_or_default();
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        items.iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).count()
    };
    assert!(runners() >= 1, "app's runners run");
    assert_eq!(controller.terminate(), Some(0), "{}", controller.log_text());
    assert_eq!(runners(), 0, "the stopped controller deleted its runners");
    assert!(cluster.get(&["manifest", "app"]).is_some(), "the Manifest stays");
    let controller = controller_with(env, &cluster, work.path(), "controller-2", &[]);
    std::fs::remove_file(dir.join("first.marker")).unwrap();
    wait_for("the next controller to correct drift", Duration::from_secs(90), || dir.join("first.marker").exists());

    // A failing action, an image that does not exist, a ServiceAccount that does not exist:
    // each on its object, with the reason.
    cluster.apply_yaml(&manifest(
        "broken",
        "",
        &format!("    fails: {{type: {fixture}, config: {{marker: /rw/never.marker, action_exit: 3}}}}\n"),
    ));
    let missing_image = format!("{}/deployster/does-not-exist:1", env.registry);
    cluster.apply_yaml(&manifest("no-image", "", &format!("    x: {{type: {missing_image}}}\n")));
    cluster.apply_yaml(&manifest(
        "no-account",
        "  serviceAccountName: nobody\n",
        &format!("    x: {{type: {fixture}, config: {{marker: /rw/x.marker}}}}\n"),
    ));
    // Not Ready is also what a pass in progress says: wait for the failing resource's own line.
    wait_for("the failures on their objects", Duration::from_secs(90), || {
        resource_message(&cluster, "broken", "fails").starts_with("\"FAILED\"")
            && ["no-image", "no-account"].iter().all(|m| not_ready_because(&cluster, m).is_some())
    });
    let fails = resource_message(&cluster, "broken", "fails");
    assert!(fails.contains("exit") && fails.contains('3'), "the failing action's exit: {fails}");
    assert!(fails.contains("failing with exit code 3 as configured"), "its stderr: {fails}");
    let (_, message) = not_ready_because(&cluster, "no-image").unwrap();
    assert!(
        message.contains("deployster/does-not-exist:1") && message.contains("the registry has no such image"),
        "the image and the registry's answer: {message}"
    );
    let (_, message) = not_ready_because(&cluster, "no-account").unwrap();
    assert!(message.contains("the ServiceAccount `nobody` does not exist"), "{message}");
    for broken in ["broken", "no-image", "no-account"] {
        cluster.must(&cluster.ns(&["delete", "manifest", broken, "--wait=false"]));
    }

    // Deleted with deletionPolicy: Delete: the delete actions run in Pods, dependents first.
    cluster.must(&cluster.ns(&["delete", "manifest", "app", "--wait=false"]));
    wait_for("app to go", Duration::from_secs(120), || cluster.get(&["manifest", "app"]).is_none());
    assert!(!dir.join("first.marker").exists() && !dir.join("second.marker").exists(), "the delete actions ran");
    for gone in ["broken", "no-image", "no-account"] {
        wait_for("the broken Manifests to go", Duration::from_secs(60), || cluster.get(&["manifest", gone]).is_none());
    }
    assert_nothing_left(&cluster);
    // Every invocation ran in a warm runner, counted.
    let first_starts = controller.metric("deployster_runner_starts_total{reason=\"first\"}").unwrap_or(0.0);
    assert!(first_starts >= 1.0, "runners started: {:?}", controller.http("/metrics"));
    assert_eq!(controller.metric("deployster_runner_alive"), Some(0.0), "none left alive once the Manifests went");
    assert_api_calls_are_listed(&controller);
    let calls = support::cluster::api_requests(&controller);
    let used = [("create", "", "pods"), ("get", "", "pods/exec"), ("get", "", "serviceaccounts"), ("list", "", "pods")];
    for used in used {
        let key = (used.0.to_string(), used.1.to_string(), used.2.to_string());
        assert!(calls.contains_key(&key), "{used:?} was used: {calls:?}");
    }
}

/// The controller is killed (SIGKILL) while an action runs in a Pod of its own; the next
/// controller stops that Pod before anything starts the action again — the action holds a lock
/// on a file of the claim and logs `overlap` when it finds it taken — records the pass
/// interrupted, and converges.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster controller_pods:: -- --include-ignored"]
#[test]
fn a_controller_killed_mid_action_never_runs_it_twice_at_once() {
    killed_mid_action("ctl-pods-crash", &["--runner-idle", "0"]);
}

/// The same in a warm runner: the killed controller's exec ends, and with it the action's
/// stdin, which stops it; the runner refuses to start the resource again until it has, and the
/// next controller waits for that.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster controller_pods:: -- --include-ignored"]
#[test]
fn a_controller_killed_mid_action_in_a_runner_never_runs_it_twice_at_once() {
    killed_mid_action("ctl-runner-crash", &[]);
}

fn killed_mid_action(test: &str, extra: &[&str]) {
    let in_pods = !extra.is_empty();
    let (env, cluster) = on_cluster(test);
    let dir = claim(&cluster);
    let work = tempfile::tempdir().unwrap();
    let mut first = controller_with(env, &cluster, work.path(), "first", extra);
    cluster.apply_yaml(&manifest(
        "slow",
        "",
        &format!(
            "    slow: {{type: {}, config: {{marker: /rw/slow.marker, lock: /rw/lock, action_sleep_ms: 20000}}}}\n",
            env.fixture_plugs
        ),
    ));
    let lock_log = dir.join("lock.log");
    let started = || std::fs::read_to_string(&lock_log).unwrap_or_default().matches(" started ").count();
    wait_for("the action to start in its Pod", Duration::from_secs(90), || started() == 1);
    wait_until_a_pod_runs(&cluster);
    first.kill();
    let second = controller_with(env, &cluster, work.path(), "second", extra);
    wait_for("slow to be Ready", Duration::from_secs(120), || cluster.condition("slow", "Ready") == "True");
    let log = std::fs::read_to_string(&lock_log).unwrap();
    assert!(!log.contains("overlap"), "the action ran twice at once:\n{log}");
    assert_eq!(started(), 2, "the interrupted action ran again, once:\n{log}");
    assert!(dir.join("slow.marker").exists());
    let reasons = cluster.event_reasons("slow");
    assert_eq!(reasons.iter().any(|r| r == "PodsStopped"), in_pods, "the earlier Pod was stopped: {reasons:?}");
    let history = cluster.history("slow");
    assert!(
        history.iter().any(|e| e["event"].as_str().is_some_and(|e| e.contains("interrupted"))),
        "the interrupted pass is recorded: {history:#?}"
    );
    cluster.must(&cluster.ns(&["delete", "manifest", "slow", "--wait=false"]));
    wait_for("slow to go", Duration::from_secs(60), || cluster.get(&["manifest", "slow"]).is_none());
    assert_nothing_left(&cluster);
    drop(second);
}

/// `examples/k8s/builtins.yaml` as a cluster user applies it (with a short interval), kept by a
/// controller that runs Pods: the built-ins' state and actions run in Pods of the namespace on
/// the claim plugged as `files` — the directory and the file appear on the volume, with the mode
/// asked for; drift is corrected; the deletion removes them. What cannot work in a cluster is
/// refused before anything runs, naming the resource and the cause: a file built-in given no
/// claim, `builtin/package`, a path outside the claim.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster controller_pods:: -- --include-ignored"]
#[test]
fn built_in_types_act_in_pods_on_their_claim() {
    use std::os::unix::fs::PermissionsExt;
    let (env, cluster) = on_cluster("ctl-builtins");
    // The example's claim names no storage class; this cluster has no provisioner.
    let volume = host_volume(&cluster, "demo-files", "");
    let work = tempfile::tempdir().unwrap();
    let controller = controller(env, &cluster, work.path(), "controller");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/k8s/builtins.yaml")).unwrap();
    cluster.apply_yaml(&example.replace("interval: 1m", "interval: 3s"));
    wait_for("demo to be Ready", Duration::from_secs(120), || cluster.condition("demo", "Ready") == "True");
    let app = volume.join("demo/app.json");
    assert_eq!(std::fs::read_to_string(&app).unwrap(), "{\"env\": \"staging\"}\n");
    let mode = std::fs::metadata(volume.join("demo")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    let controller_side = work.path().join("controller-plugs").join(&cluster.namespace).join("demo");
    assert!(!controller_side.join("demo").exists(), "nothing written beside the controller");
    let resources = status(&cluster, "demo")["resources"].clone();
    let app_config = resources.as_array().unwrap().iter().find(|r| r["name"] == "app_config").unwrap();
    assert_eq!(app_config["state"]["path"], "/files/demo/app.json", "the path in its Pod: {app_config:#}");

    std::fs::remove_file(&app).unwrap();
    wait_for("the drift to be corrected", Duration::from_secs(60), || app.exists());
    wait_for("the DriftCorrected event", Duration::from_secs(30), || {
        cluster.event_reasons("demo").iter().any(|r| r == "DriftCorrected")
    });

    // What a cluster cannot do: each refused on its object, naming the resource and the cause.
    let builtin = |name: &str, plugs: &str, resource: &str| {
        format!(
            "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 3s\n\
             {plugs}  resources:\n    {resource}\n"
        )
    };
    let claim = "  plugs: {files: {persistentVolumeClaim: {claimName: demo-files}}}\n";
    cluster.apply_yaml(&builtin("no-claim", "", "f: {type: builtin/file, config: {path: a, content: x}}"));
    let package = "p: {type: builtin/package, config: {service: s, home: h, version: v1, package: p-1.0.0.x.cronus}}";
    cluster.apply_yaml(&builtin("package", claim, package));
    cluster.apply_yaml(&builtin("outside", claim, "f: {type: builtin/file, config: {path: /etc/escape, content: x}}"));
    wait_for("the refusals on their objects", Duration::from_secs(60), || {
        ["no-claim", "package"].iter().all(|m| not_ready_because(&cluster, m).is_some())
            && resource_message(&cluster, "outside", "f").starts_with("\"FAILED\"")
    });
    let (reason, message) = not_ready_because(&cluster, "no-claim").unwrap();
    assert_eq!(reason, "InvalidManifest", "{message}");
    assert!(
        message.contains("resource `f` (builtin/file) needs a plug `files` naming a PersistentVolumeClaim"),
        "{message}"
    );
    let (reason, message) = not_ready_because(&cluster, "package").unwrap();
    assert_eq!(reason, "InvalidManifest", "{message}");
    assert!(message.contains("resource `p` (builtin/package) cannot be used here"), "{message}");
    let outside = resource_message(&cluster, "outside", "f");
    assert!(outside.contains("config.path `/etc/escape` is outside its `files` plug"), "{outside}");
    for refused in ["no-claim", "package", "outside"] {
        cluster.must(&cluster.ns(&["delete", "manifest", refused, "--wait=false"]));
    }

    cluster.must(&cluster.ns(&["delete", "manifest", "demo", "--wait=false"]));
    wait_for("demo to go", Duration::from_secs(120), || cluster.get(&["manifest", "demo"]).is_none());
    assert!(!volume.join("demo").exists(), "the delete actions ran in Pods");
    for gone in ["no-claim", "package", "outside"] {
        wait_for("the refused Manifests to go", Duration::from_secs(60), || cluster.get(&["manifest", gone]).is_none());
    }
    assert_nothing_left(&cluster);
    // Every invocation ran in a warm runner, counted.
    let first_starts = controller.metric("deployster_runner_starts_total{reason=\"first\"}").unwrap_or(0.0);
    assert!(first_starts >= 1.0, "runners started: {:?}", controller.http("/metrics"));
    assert_eq!(controller.metric("deployster_runner_alive"), Some(0.0), "none left alive once the Manifests went");
    assert_api_calls_are_listed(&controller);
}

/// An admission policy that refuses runner Pods: the Manifest's image types run as a Pod each
/// instead, it converges all the same, and one `RunnersUnavailable` event says why.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster controller_pods:: -- --include-ignored"]
#[test]
fn runner_pods_refused_by_admission_fall_back_to_a_pod_each_said_once() {
    let (env, cluster) = on_cluster("ctl-runner-refused");
    let dir = claim(&cluster);
    let work = tempfile::tempdir().unwrap();
    let policy = "long-running Pods are not allowed here (policy R-1)";
    let _webhook = support::webhook::Webhook::register(&cluster, "pods", move |request| {
        request["object"]["metadata"]["labels"].get("deployster.io/runner").map(|_| policy.to_string())
    });
    let controller = controller(env, &cluster, work.path(), "controller");
    cluster.apply_yaml(&manifest("app", "", &dependent_pair(&env.fixture_plugs)));
    wait_for("app to be Ready", Duration::from_secs(120), || cluster.condition("app", "Ready") == "True");
    assert_eq!(std::fs::read_to_string(dir.join("second.marker")).unwrap(), "hello-2");
    // Drift corrected on a later pass, still as Pods.
    std::fs::remove_file(dir.join("first.marker")).unwrap();
    wait_for("the drift to be corrected", Duration::from_secs(60), || dir.join("first.marker").exists());
    let reasons = cluster.event_reasons("app");
    assert_eq!(reasons.iter().filter(|r| *r == "RunnersUnavailable").count(), 1, "said once: {reasons:?}");
    let events = cluster.get(&["events.events.k8s.io"]).unwrap();
    let said: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "RunnersUnavailable")
        .filter_map(|e| e["note"].as_str())
        .collect();
    assert!(said.iter().all(|n| n.contains(policy)), "in the policy's words: {said:?}");
    assert_eq!(controller.metric("deployster_runner_alive").unwrap_or(0.0), 0.0);
    cluster.must(&cluster.ns(&["delete", "manifest", "app", "--wait=false"]));
    wait_for("app to go", Duration::from_secs(60), || cluster.get(&["manifest", "app"]).is_none());
    assert_nothing_left(&cluster);
}

/// A preview of a Manifest of image types is planned in the cluster — their states read in
/// warm runners as the Manifest's ServiceAccount — and applies nothing: before the Manifest
/// exists, and once it is applied (nothing to do).
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster controller_pods:: -- --include-ignored"]
#[test]
fn a_preview_reads_image_types_in_runners_and_applies_nothing() {
    let (env, cluster) = on_cluster("ctl-preview");
    let dir = claim(&cluster);
    let work = tempfile::tempdir().unwrap();
    cluster.apply_yaml("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: deployer}\n");
    let controller = controller(env, &cluster, work.path(), "controller");
    let spec = manifest("app", "  serviceAccountName: deployer\n", &dependent_pair(&env.fixture_plugs));
    let file = work.path().join("app.yaml");
    std::fs::write(&file, &spec).unwrap();
    let preview = || {
        let output = std::process::Command::new(support::deployster())
            .args(["preview", "app", "-n", &cluster.namespace, "-f", file.to_str().unwrap(), "--timeout", "3m"])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.code().unwrap_or(-1), said)
    };
    let (code, said) = preview();
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("MISSING   first"), "first's state was read: {said}");
    assert!(!dir.join("first.marker").exists(), "nothing applied");
    assert!(cluster.get(&["manifest", "app"]).is_none());

    cluster.apply_yaml(&spec);
    wait_for("app to be Ready", Duration::from_secs(120), || cluster.condition("app", "Ready") == "True");
    let (code, said) = preview();
    assert_eq!(code, 0, "nothing to do: {said}");
    assert!(said.contains("VALID     first") && said.contains("VALID     second"), "{said}");
    assert_api_calls_are_listed(&controller);
}
