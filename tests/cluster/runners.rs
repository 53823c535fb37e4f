//! Warm runners (issue 37) on a cluster whose Pods really run (`DEPLOYSTER_E2E_CLUSTER`, as in
//! `tests/cluster/pods.rs`): the CLI's `--executor pod --runner-idle …` serves every invocation of an
//! image type through one runner Pod, exec'd into, and deletes it when it exits. Without the
//! variable these tests are listed as ignored, with the command that runs them.
#![cfg(all(feature = "docker", feature = "kube"))]

use std::time::{Duration, Instant};

use crate::support::cluster::{Cluster, wait_for};
use crate::support::pod_objects::{
    PLUGS, apply_dependent_pair, assert_nothing_left, claim, drift_put_back, on_cluster,
};
use crate::support::pods::PodEnv;
use crate::support::{Run, Workspace};

/// The args that run image types in runners in the test's namespace.
fn runner_args<'a>(env: &'a PodEnv, cluster: &'a Cluster) -> Vec<&'a str> {
    let ns = cluster.namespace.as_str();
    vec!["--executor", "pod", "--namespace", ns, "--helper-image", &env.helper, "--runner-idle", "5m"]
}

/// deployster `args` with image types in runners, as the kubeconfig's user.
fn run(env: &PodEnv, cluster: &Cluster, ws: &Workspace, args: &[&str]) -> Run {
    ws.run_with_env(&[args, &runner_args(env, cluster)[..]].concat(), &[("KUBECONFIG", &env.kubeconfig)])
}

/// How many Pods the scheduler placed in the test's namespace so far.
fn pods_scheduled(cluster: &Cluster) -> usize {
    scheduled(cluster).len()
}

/// The names of the Pods the scheduler placed in the test's namespace so far.
fn scheduled(cluster: &Cluster) -> Vec<String> {
    let scheduled = cluster.get(&["events", "--field-selector", "reason=Scheduled"]).unwrap();
    let items = scheduled["items"].as_array().cloned().unwrap_or_default();
    items.iter().map(|e| e["involvedObject"]["name"].as_str().unwrap_or("").to_string()).collect()
}

/// The runner Pods of the test's namespace that mount the claim: their names.
fn runners_with_the_claim(cluster: &Cluster) -> Vec<String> {
    let pods = cluster.get(&["pods", "-l", "deployster.io/runner"]).unwrap_or_default();
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    let with_claim = |p: &&serde_json::Value| {
        p["spec"]["volumes"].as_array().into_iter().flatten().any(|v| v["persistentVolumeClaim"].is_object())
    };
    items.iter().filter(with_claim).map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string()).collect()
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster runners:: -- --include-ignored"]
#[test]
fn every_invocation_of_a_type_is_served_by_one_runner_which_the_cli_deletes() {
    let (env, cluster) = on_cluster("runners-converge");
    let dir = claim(&cluster);
    let ws = apply_dependent_pair(env, &dir, |ws, args| run(env, &cluster, ws, args));
    // Two resources' state, create and state again: one Pod, the runner with the plugs. The
    // type's init, which names the plugs, ran in a runner without them.
    assert_eq!(pods_scheduled(&cluster), 2, "one runner for init, one for the rest: {:?}", scheduled(&cluster));
    // The CLI deleted its runner when it exited.
    assert_nothing_left(&cluster);

    // Drift put back, by a second CLI run: its own runner.
    drift_put_back(&dir, &ws, |ws, args| run(env, &cluster, ws, args));
    assert_eq!(pods_scheduled(&cluster), 4, "the same two runners a run: {:?}", scheduled(&cluster));
    assert_nothing_left(&cluster);
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster runners:: -- --include-ignored"]
#[test]
fn bad_programs_in_a_runner_fail_clearly_and_the_runner_serves_on() {
    let (env, cluster) = on_cluster("runners-bad-inputs");
    let dir = claim(&cluster);
    let ws = Workspace::new();
    let apply = |manifest: String, extra: &[&str]| {
        ws.manifest(&manifest);
        let out = run(env, &cluster, &ws, &[&["apply", "-f", "manifest.yaml", "--yes"][..], extra].concat());
        assert_ne!(out.code, 0, "{}", out.all());
        out.all()
    };
    // Programs that fail, print what is not the protocol's, or exit at once without reading.
    let text = apply(
        format!(
            "resources:\n  not_json: {{type: {f}, config: {{raw: \"this is not JSON\"}}}}\n  failing: {{type: {f}, config: {{exit: 3}}}}\n  eager: {{type: {e}}}\n",
            f = env.fixture,
            e = env.fixture_eager
        ),
        &[],
    );
    assert!(text.contains("not_json") && text.contains("is not a JSON object"), "stdout not JSON:\n{text}");
    assert!(text.contains("failing") && text.contains("exit code 3"), "a failing state:\n{text}");
    assert!(text.contains("state: failing with exit code 3 as configured"), "its stderr:\n{text}");
    assert!(text.contains("eager") && text.contains("state: invalid response: printed nothing on stdout"), "{text}");
    // Output past the limit (8 MiB a stream), on stdout or without end on stderr: stopped.
    let text = apply(
        format!(
            "resources:\n  big: {{type: {f}, config: {{spew_bytes: 9000000}}}}\n  noisy: {{type: {f}, config: {{stderr_forever: true}}}}\n",
            f = env.fixture
        ),
        &[],
    );
    assert!(text.contains("printed more than 8388608 bytes on stdout"), "{text}");
    assert!(text.contains("printed more than 8388608 bytes on stderr"), "{text}");
    // A program that leaves a daemon behind: stopped with the invocation, before it could
    // write; the runner serves the next invocation.
    ws.manifest(&format!(
        "{PLUGS}resources:\n  forks:\n    type: {}\n    config: {{marker: /rw/forks.marker, daemon: /rw/daemon.lock, daemon_ms: 8000}}\n",
        env.fixture_plugs
    ));
    let out = run(env, &cluster, &ws, &["apply", "-f", "manifest.yaml", "--yes"]);
    assert_eq!(out.code, 0, "{}", out.all());
    std::thread::sleep(Duration::from_secs(10));
    let daemon = std::fs::read_to_string(dir.join("daemon.lock.log")).unwrap_or_default();
    assert!(daemon.contains("started"), "the daemon ran: {daemon:?}");
    assert!(!daemon.contains("finished"), "the daemon outlived its invocation: {daemon:?}");
    // A program that ignores SIGTERM, timed out: killed after the grace; nothing of it runs on.
    // `forks` stays declared: removed, it would be deleted (what leaves a manifest is).
    ws.manifest(&format!(
        "{PLUGS}resources:\n  forks:\n    type: {f}\n    config: {{marker: /rw/forks.marker, daemon: /rw/daemon.lock, daemon_ms: 8000}}\n  stubborn:\n    type: {f}\n    config: {{marker: /rw/stubborn.marker, action_sleep_ms: 20000, ignore_term: true}}\n",
        f = env.fixture_plugs
    ));
    let started = Instant::now();
    let out = run(env, &cluster, &ws, &["apply", "-f", "manifest.yaml", "--yes", "--action-timeout", "3s"]);
    let took = started.elapsed();
    assert_eq!(out.code, 1, "{}", out.all());
    assert!(out.all().contains("timed out after 3s"), "{}", out.all());
    std::thread::sleep(Duration::from_secs(20));
    assert!(!dir.join("stubborn.marker").exists(), "the program ran on after its timeout ({took:?})");
    assert_nothing_left(&cluster);
}

/// A runner deleted by hand, then one evicted (the Eviction API, as `kubectl drain` uses), each
/// while it runs an action: the action fails as interrupted, naming the runner, the resource
/// and the phase; nothing of it finishes; the next run starts a fresh runner.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster runners:: -- --include-ignored"]
#[test]
fn a_runner_deleted_or_evicted_mid_action_fails_the_action_as_interrupted() {
    let (env, cluster) = on_cluster("runners-deleted");
    let dir = claim(&cluster);
    let ws = Workspace::new();
    ws.manifest(&format!(
        "{PLUGS}resources:\n  slow:\n    type: {}\n    config: {{marker: /rw/slow.marker, action_sleep_ms: 60000, record: /rw/slow.jsonl}}\n",
        env.fixture_plugs
    ));
    let args = [&["apply", "-f", "manifest.yaml", "--yes"][..], &runner_args(env, &cluster)[..]].concat();
    // The action runs once the record holds init, state and the action's start.
    let actions = || {
        let text = std::fs::read_to_string(dir.join("slow.jsonl")).unwrap_or_default();
        text.lines().filter(|l| l.contains("action:create")).count()
    };
    for (round, how) in ["deleted", "evicted"].into_iter().enumerate() {
        let child = ws.spawn_with_env(&args, &[("KUBECONFIG", &env.kubeconfig)]);
        wait_for("the action to start in the runner", Duration::from_secs(90), || actions() > round);
        std::thread::sleep(Duration::from_secs(1));
        // The runner with the plugs: the action's (the type's init ran in another).
        let name = runners_with_the_claim(&cluster).into_iter().next().expect("a runner");
        if how == "deleted" {
            cluster.must(&cluster.ns(&["delete", "pod", &name, "--wait=false"]));
        } else {
            cluster.evict(&name);
        }
        let out = Run::from(child.wait_with_output().unwrap());
        assert_eq!(out.code, 1, "{how}: {}", out.all());
        assert!(out.all().contains("resource `slow` failed in action create"), "{how}: {}", out.all());
        assert!(out.all().contains("was interrupted"), "{how}: {}", out.all());
        assert!(out.all().contains(&format!("runner {name} was deleted")), "{how}: names the runner: {}", out.all());
        assert!(!dir.join("slow.marker").exists(), "{how}: the action did not finish");
        assert_nothing_left(&cluster);
    }
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster runners:: -- --include-ignored"]
#[test]
fn without_the_right_to_exec_invocations_run_as_pods_saying_why_once() {
    let (env, cluster) = on_cluster("runners-no-exec");
    let dir = claim(&cluster);
    // What the Pod executor needs, but not `pods/exec`.
    cluster.service_account(
        "no-exec",
        "get,list,watch,create,delete,patch",
        "pods,pods/log,secrets,serviceaccounts,persistentvolumeclaims",
    );
    let ws = Workspace::new();
    let kubeconfig = cluster.token_kubeconfig("no-exec", ws.dir.path());
    ws.manifest(&format!(
        "{PLUGS}resources:\n  a: {{type: {}, config: {{marker: /rw/a.marker}}}}\n  b: {{type: {}, config: {{marker: /rw/b.marker}}}}\n",
        env.fixture_plugs, env.fixture_plugs
    ));
    let args = [&["apply", "-f", "manifest.yaml", "--yes"][..], &runner_args(env, &cluster)[..]].concat();
    let out = ws.run_with_env(&args, &[("KUBECONFIG", kubeconfig.to_str().unwrap())]);
    let text = out.all();
    assert_eq!(out.code, 0, "{text}");
    assert!(dir.join("a.marker").exists() && dir.join("b.marker").exists());
    let said = text.matches("runners refused").count();
    assert_eq!(said, 1, "said once: {text}");
    assert!(text.contains("403 Forbidden") && text.contains("pods/exec"), "{text}");
    // The runner it may not exec into, then a Pod per invocation: each resource's state,
    // create and state again, and the type's init.
    let placed = scheduled(&cluster);
    assert_eq!(placed.iter().filter(|p| p.starts_with("dsr-")).count(), 1, "one runner: {placed:?}");
    assert!(placed.iter().filter(|p| p.starts_with("dst-")).count() >= 7, "a Pod per invocation: {placed:?}");
    assert_nothing_left(&cluster);
}

/// A runner unused for its idle time ends by itself; the next invocation finds it gone (or
/// retiring) and starts another — `reconcile` whose interval is longer than the idle time
/// reads state on every pass, each in a fresh runner, and never fails for it.
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster runners:: -- --include-ignored"]
#[test]
fn a_runner_ends_when_idle_and_the_next_invocation_starts_another() {
    let (env, cluster) = on_cluster("runners-idle");
    let dir = claim(&cluster);
    std::fs::write(dir.join("steady.marker"), "made").unwrap();
    let ws = Workspace::new();
    ws.manifest(&format!(
        "{PLUGS}resources:\n  steady: {{type: {}, config: {{marker: /rw/steady.marker, record: /rw/steady.jsonl}}}}\n",
        env.fixture_plugs
    ));
    let pods = ["--executor", "pod", "--namespace", &cluster.namespace, "--helper-image", &env.helper];
    let args = [
        &["reconcile", "-f", "manifest.yaml", "--interval", "6s", "--max-interval", "6s", "--runner-idle", "2s"][..],
        &pods[..],
    ]
    .concat();
    let child = ws.spawn_with_env(&args, &[("KUBECONFIG", &env.kubeconfig)]);
    let states = || std::fs::read_to_string(dir.join("steady.jsonl")).unwrap_or_default().lines().count();
    wait_for("three passes' state reads", Duration::from_secs(150), || states() >= 3);
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let output = Run::from(child.wait_with_output().unwrap());
    assert_eq!(output.code, 0, "{}", output.all());
    assert!(!output.all().contains("failed"), "no pass failed for a runner that ended: {}", output.all());
    let placed = scheduled(&cluster);
    let runners = placed.iter().filter(|p| p.starts_with("dsr-")).count();
    assert_eq!(runners, placed.len(), "only runners: {placed:?}");
    assert!(runners >= 3, "a runner for init, then a fresh one on each pass: {placed:?}");
    assert_nothing_left(&cluster);
}
