//! End to end against a real API server: runs when `DEPLOYSTER_E2E_KUBECONFIG` names a
//! kubeconfig (`.ci/run` starts `../shared/apiserver/`; kind or k3d work too), and skips with a
//! printed reason otherwise. See the README.
#![cfg(feature = "kube")]

use crate::support;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::cluster::{
    ApiServer, Cluster, ControllerProcess, api_requests, assert_api_calls_are_listed, wait_for,
};
use crate::support::replicas::{
    alive, assert_runs_never_interleave, lock_log, replica, running_action, slow_manifest, starts,
};
use serde_json::{Value, json};

fn leads(controller: &ControllerProcess) -> bool {
    controller.metric("deployster_leader") == Some(1.0)
}

/// Installs the CRD, starts `deployster controller` (built-in types, acting on this machine's
/// filesystem) for a fresh namespace, applies `examples/k8s/builtins.yaml`'s Manifest with plugs from a
/// Secret and a ConfigMap, waits for Ready, causes drift and waits for its correction and
/// event, then deletes the Manifest and waits for its resources to be deleted and the object
/// to go. Along the way: health, readiness, the documented metrics, and API calls only from the
/// RBAC list.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_manifest_is_applied_kept_and_deleted_by_the_controller() {
    let cluster = Cluster::new("lifecycle");
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("demo");
    let controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    wait_for("readiness", Duration::from_secs(30), || controller.http("/readyz").is_some_and(|(code, _)| code == 200));
    assert_eq!(controller.http("/healthz").map(|(code, _)| code), Some(200));

    cluster.must(&cluster.ns(&["create", "secret", "generic", "db", "--from-literal=password=s3cret"]));
    cluster.must(&cluster.ns(&["create", "configmap", "settings", "--from-literal=level=debug"]));
    // The example, with its files in this test's directory, a short interval, and plugs.
    let plugs = "    db: {secret: {name: db}}\n    settings: {configMap: {name: settings}}\n";
    let example = support::builtins_example_on_this_machine(&base, plugs).replace("interval: 1m", "interval: 3s");
    cluster.apply_yaml(&example);

    wait_for("the Manifest to be Ready", Duration::from_secs(120), || cluster.condition("demo", "Ready") == "True");
    let app = base.join("app.json");
    assert!(app.exists());
    let status = cluster.get(&["manifest", "demo"]).unwrap()["status"].clone();
    assert_eq!(status["resourcesSummary"], "2/2", "{status:#}");

    // `deployster graph --manifest` draws the object with the status the controller wrote.
    let graph = Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args(["graph", "--manifest", "demo", "-n", &cluster.namespace, "--format", "dot"])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .unwrap();
    let dot = String::from_utf8_lossy(&graph.stdout);
    assert!(graph.status.success(), "{dot}{}", String::from_utf8_lossy(&graph.stderr));
    assert!(dot.contains(&format!("digraph \"{}/demo\"", cluster.namespace)), "{dot}");
    assert!(dot.contains("label=\"data_dir\\nbuiltin/directory\\nVALID\""), "{dot}");
    assert!(dot.contains("\"data_dir\" -> \"app_config\" [label=\"dir\"];"), "{dot}");
    let missing = Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args(["graph", "--manifest", "nope", "-n", &cluster.namespace])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nope does not exist"));

    std::fs::remove_file(&app).unwrap();
    wait_for("the drift to be corrected", Duration::from_secs(60), || app.exists());
    wait_for("the DriftCorrected event", Duration::from_secs(30), || {
        cluster.event_reasons("demo").iter().any(|r| r == "DriftCorrected")
    });

    // The documented series, after real reconciles.
    let at_least = |series: &str, n: f64| {
        let value = controller.metric(series);
        assert!(value.is_some_and(|v| v >= n), "{series} = {value:?}, expected at least {n}");
    };
    at_least(r#"deployster_reconciles_total{result="succeeded"}"#, 2.0);
    at_least("deployster_reconcile_duration_seconds_count", 2.0);
    at_least("deployster_drift_corrections_total", 1.0);
    at_least(&format!(r#"deployster_manifests{{namespace="{}",ready="True"}}"#, cluster.namespace), 1.0);
    at_least(r#"deployster_executor_invocations_total{phase="init",result="succeeded"}"#, 2.0);
    at_least(r#"deployster_executor_invocations_total{phase="state",result="succeeded"}"#, 4.0);
    at_least(r#"deployster_executor_invocations_total{phase="action",result="succeeded"}"#, 3.0);
    at_least(r#"deployster_executor_invocation_duration_seconds_count{phase="action"}"#, 3.0);
    assert_eq!(controller.metric("deployster_work_queue_depth"), Some(0.0));
    assert_eq!(controller.metric("deployster_leader"), Some(1.0), "without election a replica always leads");

    cluster.must(&cluster.ns(&["delete", "manifest", "demo", "--wait=false"]));
    wait_for("the Manifest to go", Duration::from_secs(120), || cluster.get(&["manifest", "demo"]).is_none());
    assert!(!base.exists(), "deletionPolicy: Delete removed what the Manifest created");
    at_least(r#"deployster_reconciles_total{result="deleted"}"#, 1.0);
    let calls = api_requests(&controller);
    for used in [("get", "", "secrets"), ("get", "", "configmaps"), ("patch", "deployster.io", "manifests/status")] {
        let key = (used.0.to_string(), used.1.to_string(), used.2.to_string());
        assert!(calls.contains_key(&key), "{used:?} was used: {calls:?}");
    }
    assert_api_calls_are_listed(&controller);
    let log = controller.log_text();
    assert!(log.contains("pass finished"), "{log}");
    assert!(!log.contains('\x1b'), "no colour codes in a log written to a file: {log}");
}

/// Two replicas: exactly one reconciles; the other takes over within the lease duration after
/// the first is killed with SIGKILL in the middle of an action, and never runs the action while
/// the first one's still runs.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn of_two_replicas_one_reconciles_and_the_other_takes_over_after_a_sigkill() {
    let cluster = Cluster::new("takeover");
    let work = tempfile::tempdir().unwrap();
    let mut first = replica(&cluster, work.path(), "first", "4s");
    wait_for("the first replica to lead", Duration::from_secs(30), || leads(&first));
    let second = replica(&cluster, work.path(), "second", "4s");
    wait_for("the second replica to be ready", Duration::from_secs(30), || {
        second.http("/readyz").is_some_and(|(code, _)| code == 200)
    });

    cluster.apply_yaml(&slow_manifest("slow", work.path(), 1500));
    wait_for("two actions under the first replica", Duration::from_secs(60), || starts(work.path()) >= 2);
    assert!(!leads(&second));
    assert_eq!(second.metric(r#"deployster_executor_invocations_total{phase="action",result="failed"}"#), None);
    assert!(
        second.http("/metrics").unwrap().1.lines().all(|l| !l.starts_with("deployster_reconciles_total")),
        "the standby reconciled nothing"
    );

    let mut victim = None;
    wait_for("an action running under the first replica", Duration::from_secs(60), || {
        victim = running_action(work.path(), &first);
        victim.is_some()
    });
    first.kill();
    let killed = Instant::now();
    wait_for("the second replica to take over", Duration::from_secs(30), || leads(&second));
    let takeover = killed.elapsed();
    // The lease is 4 s; the standby needs one more attempt (4/7 s) and our polling to see it.
    assert!(takeover <= Duration::from_secs(6), "took over after {takeover:?}");
    let before = starts(work.path());
    wait_for("actions under the second replica", Duration::from_secs(60), || starts(work.path()) >= before + 2);

    let log = lock_log(work.path());
    assert!(log.iter().all(|(_, what, _)| what != "overlap"), "an action ran twice at once: {log:?}");
    assert_runs_never_interleave(&cluster.history("slow"));
    let history = cluster.history("slow");
    assert!(
        history.iter().any(|e| e["event"] == "run-interrupted"),
        "the killed replica's pass is recorded as interrupted: {history:#?}"
    );
    assert_api_calls_are_listed(&second);
}

/// A leader whose lease is taken from it in the middle of an action cancels the action at once
/// and writes no status after the steal (its writes are fenced by the lease); the replica that
/// leads next records the pass as interrupted, and no replica starts the action again before
/// it is gone.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_leader_that_loses_its_lease_mid_pass_cancels_its_actions() {
    let cluster = Cluster::new("lease-lost");
    let work = tempfile::tempdir().unwrap();
    let first = replica(&cluster, work.path(), "first", "6s");
    wait_for("the first replica to lead", Duration::from_secs(30), || leads(&first));
    let second = replica(&cluster, work.path(), "second", "6s");
    cluster.apply_yaml(&slow_manifest("long", work.path(), 60_000));
    let mut action = None;
    wait_for("the long action to run", Duration::from_secs(60), || {
        action = running_action(work.path(), &first);
        action.is_some()
    });
    let action = action.unwrap();

    // Someone else holds the lease now (as after a partition that outlasted the lease).
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = format!(r#"{{"spec":{{"holderIdentity":"intruder","renewTime":"{now:.6}"}}}}"#);
    cluster.must(&cluster.ns(&["patch", "lease", "deployster-controller", "--type", "merge", "-p", &patch]));
    let stolen = Instant::now();
    let version = || cluster.get(&["manifest", "long"]).unwrap()["metadata"]["resourceVersion"].clone();
    // A write already on its way when the Lease was patched may land just after.
    std::thread::sleep(Duration::from_millis(500));
    let after_steal = version();
    wait_for("the action to be cancelled", Duration::from_secs(6), || !alive(action));
    let cancelled = stolen.elapsed();
    // Counted now: the next leader's first pass records the interruption and starts the action
    // again at once, so a count taken once the history shows the interruption may include it.
    let before = starts(work.path());
    assert!(cancelled < Duration::from_secs(6), "cancelled after {cancelled:?}, beyond the lease duration");
    assert!(!leads(&first));
    // The intruder's lease (6 s) has not expired: no replica may write, and the old leader's
    // interrupted pass — its progress, its end — writes nothing.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(stolen.elapsed()));
    assert_eq!(version(), after_steal, "the Manifest was written after the lease was stolen");
    assert!(first.log_text().contains("not written: "), "the refused write is logged: {}", first.log_text());
    wait_for("the pass to be recorded as interrupted", Duration::from_secs(30), || {
        cluster.history("long").iter().any(|e| e["event"] == "run-interrupted")
    });

    // The intruder never renews: once its lease expires, a replica takes over and runs the
    // action again — never while the cancelled one ran.
    wait_for("the action to run again", Duration::from_secs(60), || starts(work.path()) > before);
    let log = lock_log(work.path());
    assert!(log.iter().all(|(_, what, _)| what != "overlap"), "an action ran twice at once: {log:?}");
    assert!(leads(&first) || leads(&second));
    assert_runs_never_interleave(&cluster.history("long"));
    // The new leader says so once its pass (the action run again) is over.
    wait_for("the Interrupted event", Duration::from_secs(90), || {
        cluster.event_reasons("long").iter().any(|r| r == "Interrupted")
    });
}

/// The API server goes away mid-run: the controller turns not ready, says so, keeps running and
/// retrying; when the server is back it is ready again, leads again and reconciles new objects.
#[ignore = "needs API servers of its own: DEPLOYSTER_E2E_APISERVER=../shared/apiserver cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn the_controller_rides_out_an_api_server_outage() {
    let server = ApiServer::start("outage");
    let cluster = Cluster::on(server.kubeconfig.clone(), "outage");
    let work = tempfile::tempdir().unwrap();
    let mut controller = replica(&cluster, work.path(), "controller", "4s");
    let ready = |c: &ControllerProcess| c.http("/readyz").is_some_and(|(code, _)| code == 200);
    wait_for("readiness", Duration::from_secs(30), || ready(&controller));
    let before = work.path().join("before");
    cluster.apply_yaml(&format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: before}}\nspec:\n  resources:\n    d: {{type: builtin/directory, config: {{path: {}}}}}\n",
        before.display()
    ));
    wait_for("the first Manifest to be Ready", Duration::from_secs(60), || {
        cluster.condition("before", "Ready") == "True"
    });

    server.stop();
    wait_for("readiness to turn false", Duration::from_secs(30), || !ready(&controller));
    let (code, body) = controller.http("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("unreachable"), "{body}");
    std::thread::sleep(Duration::from_secs(5));
    assert!(controller.child.try_wait().unwrap().is_none(), "the controller did not exit on an outage");
    assert_eq!(controller.http("/healthz").map(|(code, _)| code), Some(200), "alive, only not ready");
    let log = controller.log_text();
    assert!(log.contains("the Kubernetes API server is unreachable"), "{log}");
    assert!(log.contains("lost the leader lease"), "{log}");

    server.restart();
    wait_for("readiness again", Duration::from_secs(60), || ready(&controller));
    wait_for("leadership again", Duration::from_secs(30), || leads(&controller));
    let after = work.path().join("after");
    cluster.apply_yaml(&format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: after}}\nspec:\n  resources:\n    d: {{type: builtin/directory, config: {{path: {}}}}}\n",
        after.display()
    ));
    wait_for("a Manifest created after the outage to be Ready", Duration::from_secs(90), || {
        cluster.condition("after", "Ready") == "True"
    });
    assert!(after.is_dir());
    controller.kill();
}

/// The API server goes away in the middle of a pass (an action running) and comes back: the
/// action finishes, the pass's record waits for the server rather than being lost, and the
/// history says the pass finished — not that it was interrupted — with the action run once.
#[ignore = "needs API servers of its own: DEPLOYSTER_E2E_APISERVER=../shared/apiserver cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_pass_running_through_an_api_server_outage_is_recorded_when_it_returns() {
    let server = ApiServer::start("midpass");
    let cluster = Cluster::on(server.kubeconfig.clone(), "midpass");
    let work = tempfile::tempdir().unwrap();
    let args = ["--namespace", &cluster.namespace, "--allow-local-programs"];
    let controller = ControllerProcess::start(&cluster, work.path(), "controller", &args);
    let manifest = slow_manifest("midpass", work.path(), 8000).replace("        stays_stale: true\n", "");
    cluster.apply_yaml(&manifest);
    wait_for("the action to run", Duration::from_secs(60), || starts(work.path()) == 1);

    server.stop();
    let finished = |dir: &Path| lock_log(dir).iter().any(|(_, what, _)| what == "finished");
    wait_for("the action to finish while the server is away", Duration::from_secs(30), || finished(work.path()));
    // The pass ends and tries to write its record to a server that is not there.
    std::thread::sleep(Duration::from_secs(3));
    server.restart();

    wait_for("the Manifest to be Ready", Duration::from_secs(90), || cluster.condition("midpass", "Ready") == "True");
    let history = cluster.history("midpass");
    let events: Vec<&str> =
        history.iter().filter(|e| e["target"] == "manifest").filter_map(|e| e["event"].as_str()).collect();
    assert!(events.contains(&"run-finished-successfully"), "the pass is recorded as it ended: {history:#?}");
    assert!(!events.contains(&"run-interrupted"), "not as interrupted: {history:#?}");
    assert_eq!(starts(work.path()), 1, "the action ran once: {:?}", lock_log(work.path()));
    let log = controller.log_text();
    assert!(log.contains("the status could not be written; retrying"), "said while waiting: {log}");
}

/// A leader stopped with SIGTERM finishes, releases the Lease, and the standby takes over at
/// once — not a lease duration later.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_leader_stopped_with_sigterm_hands_over_at_once() {
    let cluster = Cluster::new("handover");
    let work = tempfile::tempdir().unwrap();
    let first = replica(&cluster, work.path(), "first", "30s");
    wait_for("the first replica to lead", Duration::from_secs(30), || leads(&first));
    let second = replica(&cluster, work.path(), "second", "30s");
    wait_for("the second replica to be ready", Duration::from_secs(30), || {
        second.http("/readyz").is_some_and(|(code, _)| code == 200)
    });
    let stopped = Instant::now();
    let _ = Command::new("kill").args(["-TERM", &first.child.id().to_string()]).status();
    wait_for("the second replica to take over", Duration::from_secs(15), || leads(&second));
    let handover = stopped.elapsed();
    assert!(handover < Duration::from_secs(10), "took {handover:?}; the lease is 30 s");
    assert!(first.log_text().contains("released the leader lease"), "{}", first.log_text());
}

/// `spec.approval: Manual` end to end: the controller records its plan and waits
/// (`kubectl get dm` says AwaitingApproval), `deployster approve` shows the plan and approves
/// it, and the controller applies exactly it.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_manual_manifest_waits_for_deployster_approve() {
    let cluster = Cluster::new("approval");
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("gated");
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    let example = support::builtins_example_on_this_machine(&base, "")
        .replace("interval: 1m", "interval: 3s")
        .replace("\n  deletionPolicy: Delete", "\n  approval: Manual\n  deletionPolicy: Delete");
    cluster.apply_yaml(&example);

    wait_for("the plan to await approval", Duration::from_secs(60), || {
        cluster.kubectl(&cluster.ns(&["get", "dm", "demo"])).1.contains("AwaitingApproval")
    });
    let pending = cluster.get(&["manifest", "demo"]).unwrap()["status"]["pendingPlan"].clone();
    let id = pending["id"].as_str().expect("a pending plan id").to_string();
    // The file in the directory not made yet is planned too: the plan approved is all of it.
    let mut changes: Vec<String> = pending["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{} {} {}", c["name"].as_str().unwrap(), c["status"].as_str().unwrap(), c["actions"]))
        .collect();
    changes.sort();
    assert_eq!(changes, [r#"app_config MISSING ["write"]"#, r#"data_dir MISSING ["create"]"#], "{pending:#}");
    std::thread::sleep(Duration::from_secs(4));
    assert!(!base.exists(), "nothing is applied before approval");
    assert_eq!(cluster.get(&["manifest", "demo"]).unwrap()["status"]["pendingPlan"]["id"], id.as_str());

    let approve = |extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_deployster"))
            .args([&["approve", "demo", "-n", &cluster.namespace][..], extra].concat())
            .env("KUBECONFIG", &cluster.kubeconfig)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.code(), text)
    };
    let (code, text) = approve(&["--plan", "0123456789ab"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("plan 0123456789ab is not the one awaiting approval"), "{text}");
    let (code, text) = approve(&[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("Plan {id} of {}/demo", cluster.namespace)), "{text}");
    assert!(text.contains("MISSING   data_dir  create"), "{text}");
    assert!(text.contains("MISSING   app_config  write"), "{text}");

    wait_for("the approved plan to be applied", Duration::from_secs(60), || {
        cluster.condition("demo", "Ready") == "True"
    });
    assert!(base.join("app.json").exists());
    let status = cluster.get(&["manifest", "demo"]).unwrap()["status"].clone();
    assert!(status["pendingPlan"].is_null(), "{status:#}");
    assert!(cluster.event_reasons("demo").iter().any(|r| r == "AwaitingApproval"));
    let (code, text) = approve(&[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("has no plan awaiting approval"), "{text}");
}

/// A change to a Secret or ConfigMap a Manifest reads starts a pass at once, however long its
/// interval: a Secret created after the Manifest, a new value in it, a changed ConfigMap. A
/// Secret it does not read starts nothing.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_changed_secret_or_config_map_starts_a_pass_at_once() {
    let cluster = Cluster::new("inputs");
    let work = tempfile::tempdir().unwrap();
    let conf = work.path().join("conf.txt");
    let controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    let passes = || controller.metric("deployster_reconcile_duration_seconds_count").unwrap_or_default();
    // `kubectl create`, or a `kubectl replace` of the whole object (its data changed).
    let put = |verb: &str, kind: &str, name: &str, literal: &str| {
        let literal = format!("--from-literal={literal}");
        let mut args = vec!["create"];
        args.extend(kind.split(' '));
        args.extend([name, &literal, "--dry-run=client", "-o", "yaml"]);
        let yaml = cluster.must(&cluster.ns(&args));
        let file = work.path().join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        cluster.must(&cluster.ns(&[verb, "-f", file.to_str().unwrap()]));
    };
    let revision = || cluster.get(&["manifest", "app"]).unwrap()["status"]["revision"].clone();

    put("create", "configmap", "settings", "level=debug");
    // An hour between passes and between retries: only a watched change starts one here.
    cluster.apply_yaml(&format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: app}}\nspec:\n  interval: 1h\n  retryInterval: 1h\n  varsFrom:\n    - secretRef: {{name: db}}\n  plugs:\n    settings: {{configMap: {{name: settings}}, readOnly: true}}\n  resources:\n    conf: {{type: builtin/file, config: {{path: \"{}\", content: \"password={{{{ password }}}}\"}}}}\n",
        conf.display()
    ));
    wait_for("the missing Secret to be reported", Duration::from_secs(60), || {
        cluster.condition("app", "Ready") == "False"
    });
    assert!(!conf.exists());

    put("create", "secret generic", "db", "password=one");
    wait_for("a pass once the Secret exists", Duration::from_secs(30), || {
        std::fs::read_to_string(&conf).is_ok_and(|text| text == "password=one")
    });
    wait_for("Ready", Duration::from_secs(30), || cluster.condition("app", "Ready") == "True");

    put("replace", "secret generic", "db", "password=two");
    wait_for("a pass with the new value", Duration::from_secs(30), || {
        std::fs::read_to_string(&conf).is_ok_and(|text| text == "password=two")
    });

    let before = revision();
    put("replace", "configmap", "settings", "level=info");
    wait_for("a pass of the new revision", Duration::from_secs(30), || revision() != before);

    wait_for("the passes to settle", Duration::from_secs(30), || {
        controller.metric("deployster_work_queue_depth") == Some(0.0)
    });
    std::thread::sleep(Duration::from_secs(2));
    let settled = passes();
    put("create", "secret generic", "unrelated", "x=y");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(passes(), settled, "a Secret no Manifest reads starts no pass");
    assert_api_calls_are_listed(&controller);
}

/// `spec.outputs`: a Secret owned by the Manifest, created after the first successful pass,
/// updated when a value changes, gone with the Manifest; a Secret of that name that the
/// Manifest does not own is left alone, and said so.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn outputs_go_to_a_secret_the_manifest_owns() {
    let cluster = Cluster::new("outputs");
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("out");
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    let manifest = |env: &str, secret: &str| {
        format!(
            "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: site}}\nspec:\n  interval: 3s\n  deletionPolicy: Delete\n  vars: {{env: {env}}}\n  resources:\n    dir: {{type: builtin/directory, config: {{path: \"{}\"}}}}\n  outputs:\n    secretName: {secret}\n    values:\n      path: \"{{{{ resources.dir.state.path }}}}\"\n      env: \"{{{{ env }}}}\"\n",
            base.display()
        )
    };
    let secret = |name: &str| cluster.get(&["secret", name]);
    let decoded = |value: &Value, key: &str| {
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(value.clone()).unwrap();
        String::from_utf8(secret.data.unwrap_or_default().remove(key).map(|b| b.0).unwrap_or_default()).unwrap()
    };

    cluster.apply_yaml(&manifest("staging", "site-outputs"));
    wait_for("the outputs Secret", Duration::from_secs(60), || secret("site-outputs").is_some());
    let written = secret("site-outputs").unwrap();
    assert_eq!(decoded(&written, "path"), base.display().to_string());
    assert_eq!(decoded(&written, "env"), "staging");
    let uid = cluster.get(&["manifest", "site"]).unwrap()["metadata"]["uid"].clone();
    assert_eq!(written["metadata"]["ownerReferences"][0]["uid"], uid, "owned by the Manifest");
    let version = written["metadata"]["resourceVersion"].clone();
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(secret("site-outputs").unwrap()["metadata"]["resourceVersion"], version, "not rewritten unchanged");

    cluster.apply_yaml(&manifest("production", "site-outputs"));
    wait_for("the outputs to be updated", Duration::from_secs(60), || {
        secret("site-outputs").is_some_and(|s| decoded(&s, "env") == "production")
    });

    // A Secret someone else owns is not overwritten.
    cluster.must(&cluster.ns(&["create", "secret", "generic", "theirs", "--from-literal=keep=me"]));
    cluster.apply_yaml(&manifest("production", "theirs"));
    wait_for("the refusal", Duration::from_secs(60), || {
        cluster.event_reasons("site").iter().any(|r| r == "OutputsNotWritten")
    });
    assert_eq!(decoded(&secret("theirs").unwrap(), "keep"), "me");
    // Outputs that cannot be written or rendered keep the object from Ready, saying why.
    let ready = || {
        let manifest = cluster.get(&["manifest", "site"]).unwrap_or_default();
        let conditions = manifest["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let ready = conditions.into_iter().find(|c| c["type"] == "Ready").unwrap_or_default();
        (ready["status"].as_str().unwrap_or("").to_string(), ready["reason"].as_str().unwrap_or("").to_string())
    };
    wait_for("Ready=False (OutputsNotWritten)", Duration::from_secs(60), || {
        ready() == ("False".to_string(), "OutputsNotWritten".to_string())
    });
    cluster.apply_yaml(&manifest("production", "site-outputs").replace("state.path", "state.nope"));
    wait_for("Ready=False (OutputsFailed)", Duration::from_secs(60), || {
        ready() == ("False".to_string(), "OutputsFailed".to_string())
    });
    cluster.apply_yaml(&manifest("production", "site-outputs"));
    wait_for("Ready again once the outputs render", Duration::from_secs(60), || ready().0 == "True");

    // Foreground deletion (as `kubectl delete --cascade=foreground` and Argo CD's pruning ask),
    // with a dependent that blocks its owner's deletion and is held by a finalizer of the
    // test's own: the garbage collector deletes the dependents, the controller runs the
    // deletion and lets go, and the Manifest stays until its last blocking dependent is gone.
    let uid = cluster.get(&["manifest", "site"]).unwrap()["metadata"]["uid"].clone();
    let owner = json!({"apiVersion": "deployster.io/v1alpha1", "kind": "Manifest", "name": "site", "uid": uid, "blockOwnerDeletion": true});
    cluster.apply_yaml(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "ownerReferences": [owner], "finalizers": ["deployster.test/hold"]}})
            .to_string(),
    );
    cluster.must(&cluster.ns(&["delete", "manifest", "site", "--cascade=foreground", "--wait=false"]));
    let finalizers = || {
        let manifest = cluster.get(&["manifest", "site"]).unwrap_or_default();
        let list = manifest["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
        list.iter().filter_map(|f| f.as_str().map(String::from)).collect::<Vec<_>>()
    };
    wait_for("the controller to run the deletion and let go", Duration::from_secs(60), || {
        finalizers() == ["foregroundDeletion"]
    });
    assert!(!base.exists(), "deletionPolicy: Delete ran the deletion");
    wait_for("the owned Secret to be deleted first", Duration::from_secs(60), || secret("site-outputs").is_none());
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(finalizers(), ["foregroundDeletion"], "held by its blocking dependent, and left alone meanwhile");
    let patch = r#"{"metadata":{"finalizers":null}}"#;
    cluster.must(&cluster.ns(&["patch", "configmap", "held", "--type", "merge", "-p", patch]));
    wait_for("the Manifest to go once its dependent has", Duration::from_secs(60), || {
        cluster.get(&["manifest", "site"]).is_none()
    });
    assert!(secret("theirs").is_some(), "what it does not own stays");
}

/// A Manifest whose template would build gigabytes fails on the render budget, naming the
/// resource and the path, and the controller's memory stays near where it was: one Manifest's
/// author cannot take the memory every other Manifest's reconciliation needs.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_template_too_large_to_build_cannot_take_the_controller_s_memory() {
    let cluster = Cluster::new("budget");
    let work = tempfile::tempdir().unwrap();
    let controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    let peak_kib = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", controller.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    let manifest = |name: &str, content: &str| {
        format!(
            "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 1h\n  resources:\n    big_file: {{type: builtin/file, config: {{path: \"{}/{name}\", content: {}}}}}\n",
            work.path().display(),
            serde_json::to_string(content).unwrap()
        )
    };
    cluster.apply_yaml(&manifest("small", "hello"));
    wait_for("the small Manifest to be Ready", Duration::from_secs(60), || {
        cluster.condition("small", "Ready") == "True"
    });
    let baseline = peak_kib();
    let attacks = [
        "{% for i in range(1000) %}{{ 'a' * 1000000 }}{% endfor %}",
        "{% set s = 'a' * 10000000 %}{% set s = s ~ s %}{% set s = s ~ s %}{% set s = s ~ s %}{{ s }}",
        "{% set l = range(100000)|list %}{% set l = l + l %}{% set l = l + l %}{% set l = l + l %}{{ l|join(',') }}",
    ];
    for (i, attack) in attacks.iter().enumerate() {
        cluster.apply_yaml(&manifest(&format!("big-{i}"), attack));
    }
    for i in 0..attacks.len() {
        let name = format!("big-{i}");
        wait_for("the budget to stop the render", Duration::from_secs(60), || {
            cluster.get(&["manifest", &name]).is_some_and(|m| {
                let conditions = m["status"]["conditions"].as_array().cloned().unwrap_or_default();
                conditions.iter().any(|c| {
                    let message = c["message"].as_str().unwrap_or("");
                    c["type"] == "Ready"
                        && c["status"] == "False"
                        && message.contains("big_file")
                        && message.contains("config.content")
                        && message.contains("more than 16 MiB")
                })
            })
        });
    }
    let peak = peak_kib();
    eprintln!("controller peak RSS: {} MiB before, {} MiB after", baseline >> 10, peak >> 10);
    // Three renders may run at once, each within its 16 MiB budget (the templates alone would
    // take gigabytes).
    assert!(peak < baseline + 128 * 1024, "peak {peak} KiB against {baseline} KiB before the templates");
}

/// The chart's Argo CD health check, on the statuses the controller really writes: Ready →
/// Healthy, a failing pass → Degraded, an invalid spec (Stalled) → Degraded, suspended and
/// awaiting approval → Suspended. With `DEPLOYSTER_CAPTURE_HEALTH_FIXTURES=DIR` the objects are
/// also written there (tests/gitops/ holds them, checked without a cluster by tests/local/gitops.rs).
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn argo_cd_health_reads_the_statuses_the_controller_writes() {
    let cluster = Cluster::new("health");
    let work = tempfile::tempdir().unwrap();
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    let manifest = |name: &str, extra: &str, resources: &str| {
        format!(
            "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 1h\n{extra}  resources:\n{resources}"
        )
    };
    let dir = |name: &str| {
        format!("    d: {{type: builtin/directory, config: {{path: \"{}/{name}\"}}}}\n", work.path().display())
    };
    let cases = [
        ("ready", manifest("ready", "", &dir("ready")), "Healthy", "resources VALID"),
        (
            "failing",
            manifest("failing", "", "    f: {type: builtin/file, config: {path: /proc/nope/x, content: x}}\n"),
            "Degraded",
            "action write failed",
        ),
        (
            "invalid",
            manifest(
                "invalid",
                "",
                "    f: {type: builtin/file, dependencies: {x: nothere}, config: {path: /tmp/x}}\n",
            ),
            "Degraded",
            "nothere",
        ),
        ("suspended", manifest("suspended", "  suspend: true\n", &dir("suspended")), "Suspended", "spec.suspend"),
        ("approval", manifest("approval", "  approval: Manual\n", &dir("approval")), "Suspended", "awaits approval"),
    ];
    for (_, yaml, _, _) in &cases {
        cluster.apply_yaml(yaml);
    }
    let capture = std::env::var_os("DEPLOYSTER_CAPTURE_HEALTH_FIXTURES").map(std::path::PathBuf::from);
    for (name, _, status, needle) in cases {
        let mut seen = (String::new(), String::new());
        wait_for(&format!("{name} to be {status}"), Duration::from_secs(60), || {
            let Some(object) = cluster.get(&["manifest", name]) else { return false };
            if object["status"]["conditions"].is_null() {
                return false;
            }
            seen = support::argocd_health(&object);
            if seen.0 == status
                && let Some(dir) = &capture
            {
                let text = serde_json::to_string_pretty(&object).unwrap();
                std::fs::write(dir.join(format!("{name}.json")), text + "\n").unwrap();
            }
            seen.0 == status
        });
        assert!(seen.1.contains(needle), "{name}: {seen:?}");
    }
}

/// While an action reports progress, `status.resources[].progress` and `kubectl get dm`
/// show it; progress alone writes the status at most once per 5 s; the pass's own write clears
/// it.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_running_action_s_progress_shows_in_the_status_and_kubectl_get() {
    let cluster = Cluster::new("progress");
    let work = tempfile::tempdir().unwrap();
    let controller = ControllerProcess::start(
        &cluster,
        work.path(),
        "controller",
        &["--namespace", &cluster.namespace, "--allow-local-programs"],
    );
    cluster.apply_yaml(&format!(
        r#"apiVersion: deployster.io/v1alpha1
kind: Manifest
metadata: {{name: slow}}
spec:
  interval: 10m
  resources:
    work:
      type: {fixture}
      config: {{marker: {dir}/marker, progress_steps: 12, step_ms: 1000}}
"#,
        fixture = support::fixture().display(),
        dir = work.path().display()
    ));
    let (mut percents, mut table_rows) = (Vec::new(), Vec::new());
    wait_for("the slow action to be applied", Duration::from_secs(90), || {
        let status = cluster.get(&["manifest", "slow"]).map(|m| m["status"].clone()).unwrap_or_default();
        let work = status["resources"].as_array().and_then(|r| r.iter().find(|r| r["name"] == "work")).cloned();
        if let Some(progress) = work.map(|w| w["progress"].clone()).filter(|p| !p.is_null()) {
            assert_eq!(progress["action"], "create", "{status:#}");
            assert!(progress["startedAt"].is_string(), "{status:#}");
            if let Some(p) = progress["percent"].as_f64()
                && percents.last() != Some(&p)
            {
                percents.push(p);
            }
            let (_, table) = cluster.kubectl(&cluster.ns(&["get", "dm", "slow"]));
            table_rows.push(table);
        }
        std::thread::sleep(Duration::from_millis(200));
        status["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    });
    assert!(!percents.is_empty(), "progress was written while the action ran");
    assert!(percents.iter().all(|p| *p > 0.0 && *p <= 100.0), "{percents:?}");
    // Twelve reports over twelve seconds, but at most one write per 5 s.
    assert!(percents.len() <= 3, "progress written at most once per 5 s: {percents:?}");
    assert!(table_rows.iter().any(|t| t.contains("PROGRESS") && t.contains("work/create")), "{table_rows:#?}");
    let status = cluster.get(&["manifest", "slow"]).unwrap()["status"].clone();
    assert_eq!(status["progress"], "", "cleared when the pass ended: {status:#}");
    assert!(status["resources"][0]["progress"].is_null(), "{status:#}");
    let patches: f64 = api_requests(&controller)
        .iter()
        .filter(|((verb, _, resource), _)| verb.eq_ignore_ascii_case("patch") && resource == "manifests/status")
        .map(|(_, n)| n)
        .sum();
    // The intent, at most three progress writes, the pass's own: never one per report.
    assert!((2.0..=6.0).contains(&patches), "{patches} status writes");
}

/// A cluster without the controller's CRDs: the controller says which is missing and how to
/// install it — the Manifest's stops it, the Pipeline's and the ManifestPreview's are said once
/// and the rest runs — and kube's own warning of an error answer it cannot parse ("Unsuccessful
/// data error parse: 404 page not found") is not shown with them.
#[ignore = "needs API servers of its own: DEPLOYSTER_E2E_APISERVER=../shared/apiserver cargo test --test apiserver e2e_controller:: -- --include-ignored"]
#[test]
fn a_missing_crd_is_said_with_its_cure_and_no_parse_warning() {
    let server = ApiServer::start("nocrd");
    let work = tempfile::tempdir().unwrap();
    let start = |log: &Path| {
        Command::new(support::deployster())
            .args(["controller", "--metrics-addr", &format!("127.0.0.1:{}", crate::support::cluster::free_port())])
            .env("KUBECONFIG", &server.kubeconfig)
            .env_remove("DEPLOYSTER_LOG")
            .stdin(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap()
    };
    let first = work.path().join("first.log");
    let status = start(&first).wait().unwrap();
    let said = std::fs::read_to_string(&first).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("the Manifest CRD is not installed") && said.contains("deployster crd | kubectl apply -f -"),
        "{said}"
    );
    assert!(!said.contains("Unsuccessful data error parse"), "{said}");

    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl").args(args).env("KUBECONFIG", &server.kubeconfig).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/manifest.yaml");
    kubectl(&["apply", "-f", crd.to_str().unwrap()]);
    kubectl(&["wait", "--for", "condition=established", "--timeout=60s", "crd/manifests.deployster.io"]);
    let second = work.path().join("second.log");
    let mut controller = start(&second);
    let log = || std::fs::read_to_string(&second).unwrap_or_default();
    wait_for("the missing CRDs said", Duration::from_secs(30), || {
        log().contains("Pipelines are not driven") && log().contains("ManifestPreviews are not planned")
    });
    let said = log();
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(said.contains("deployster crd pipeline | kubectl apply -f -"), "{said}");
    assert!(said.contains("deployster crd preview | kubectl apply -f -"), "{said}");
    assert!(!said.contains("Unsuccessful data error parse"), "{said}");
}
