//! Resource types run as Pods (`--executor pod`) on a cluster whose Pods really run:
//! `DEPLOYSTER_E2E_CLUSTER` names the kubeconfig `../shared/cluster/up.sh` printed (its
//! `cluster.env` beside it names the registry). The test type and the helper's image (the
//! controller's, from `image/build.sh`) are built here and pushed to that registry. Without the
//! variable these tests are listed as ignored, with the command that runs them.
#![cfg(all(feature = "docker", feature = "kube"))]

use crate::support;
use std::time::{Duration, Instant};

use crate::support::cluster::Cluster;
use crate::support::pod_objects::{
    PLUGS, apply_dependent_pair, assert_nothing_left, claim, drift_put_back, left, on_cluster,
};
use crate::support::pods::PodEnv;
use crate::support::{Run, Workspace};
use deployster::pod::executor::PodSettings;

/// deployster `args` with `--executor pod` in the test's namespace.
fn run(env: &PodEnv, cluster: &Cluster, ws: &Workspace, args: &[&str]) -> Run {
    let pods = ["--executor", "pod", "--namespace", &cluster.namespace, "--helper-image", &env.helper];
    ws.run_with_env(&[args, &pods[..]].concat(), &[("KUBECONFIG", &env.kubeconfig)])
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster pods:: -- --include-ignored"]
#[test]
fn image_types_run_as_pods_read_state_and_converge() {
    let (env, cluster) = on_cluster("pods-converge");
    let dir = claim(&cluster);
    let ws = apply_dependent_pair(env, &dir, |ws, args| run(env, &cluster, ws, args));
    let planned = run(env, &cluster, &ws, &["plan", "-f", "manifest.yaml", "--output", "json"]);
    assert_eq!(planned.code, 0, "{}", planned.all());
    assert!(!planned.stdout.contains("MISSING"), "both are VALID now:\n{}", planned.stdout);
    drift_put_back(&dir, &ws, |ws, args| run(env, &cluster, ws, args));
    assert_nothing_left(&cluster);
}

/// `reconcile` with an image type: one init Pod for the whole loop, then one state Pod per
/// pass — not an init Pod on every pass besides (the run id each pass gives is no part of what
/// init is asked).
#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster pods:: -- --include-ignored"]
#[test]
fn reconcile_starts_one_init_pod_for_the_loop_and_one_state_pod_per_pass() {
    let (env, cluster) = on_cluster("pods-init-once");
    let dir = claim(&cluster);
    std::fs::write(dir.join("steady.marker"), "made").unwrap();
    let ws = Workspace::new();
    ws.manifest(&format!(
        "{PLUGS}resources:\n  steady: {{type: {}, config: {{marker: /rw/steady.marker, record: /rw/steady.jsonl}}}}\n",
        env.fixture_plugs
    ));
    let pods = ["--executor", "pod", "--namespace", &cluster.namespace, "--helper-image", &env.helper];
    let args =
        [&["reconcile", "-f", "manifest.yaml", "--interval", "1s", "--max-interval", "1s"][..], &pods[..]].concat();
    let child = ws.spawn_with_env(&args, &[("KUBECONFIG", &env.kubeconfig)]);
    let states = || std::fs::read_to_string(dir.join("steady.jsonl")).unwrap_or_default().lines().count();
    support::cluster::wait_for("three passes' state reads", Duration::from_secs(120), || states() >= 3);
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let scheduled = cluster.get(&["events", "--field-selector", "reason=Scheduled"]).unwrap();
    let pods = scheduled["items"].as_array().unwrap().len();
    assert_eq!(pods, states() + 1, "one init Pod and one Pod per state read ({} state reads)", states());
    assert_nothing_left(&cluster);
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster pods:: -- --include-ignored"]
#[test]
fn bad_inputs_fail_clearly_and_leave_nothing() {
    let (env, cluster) = on_cluster("pods-bad-inputs");
    claim(&cluster);
    let ws = Workspace::new();
    let apply = |manifest: String| {
        ws.manifest(&manifest);
        let out = run(env, &cluster, &ws, &["apply", "-f", "manifest.yaml", "--yes"]);
        assert_ne!(out.code, 0, "{}", out.all());
        out.all()
    };
    // An image that does not exist: the registry's answer, at once.
    let missing = format!("{}/deployster/no-such-type:1", env.registry);
    let started = Instant::now();
    let text = apply(format!("resources:\n  missing_image: {{type: \"{missing}\"}}\n"));
    assert!(started.elapsed() < Duration::from_secs(60), "failing took {:?}", started.elapsed());
    assert!(text.contains(&missing) && text.contains("the registry has no such image"), "names the image:\n{text}");
    // Programs that fail, or print what is not the protocol's.
    let text = apply(format!(
        "resources:\n  not_json: {{type: {f}, config: {{raw: \"this is not JSON\"}}}}\n  failing: {{type: {f}, config: {{exit: 3}}}}\n",
        f = env.fixture
    ));
    assert!(text.contains("not_json") && text.contains("is not a JSON object"), "stdout not JSON:\n{text}");
    assert!(text.contains("failing") && text.contains("exit code 3"), "a failing state:\n{text}");
    assert!(text.contains("state: failing with exit code 3 as configured"), "its stderr:\n{text}");
    // A type whose state program exits at once, printing nothing, without reading its request.
    let text = apply(format!("resources:\n  eager: {{type: {}}}\n", env.fixture_eager));
    assert!(
        text.contains("eager") && text.contains("state: invalid response: printed nothing on stdout"),
        "exits without reading:\n{text}"
    );
    // Output past the limit (8 MiB a stream), on stdout or without end on stderr: stopped.
    let started = Instant::now();
    let text = apply(format!(
        "resources:\n  big: {{type: {f}, config: {{spew_bytes: 9000000}}}}\n  noisy: {{type: {f}, config: {{stderr_forever: true}}}}\n",
        f = env.fixture
    ));
    assert!(text.contains("printed more than 8388608 bytes on stdout"), "{text}");
    assert!(text.contains("printed more than 8388608 bytes on stderr"), "{text}");
    eprintln!("output past the limit was stopped after {:?}", started.elapsed());
    // A plug naming a Secret that does not exist: refused before any Pod.
    let text = apply(format!(
        "plugs:\n  rw: {{persistentVolumeClaim: {{claimName: data}}}}\n  ro: {{secret: {{name: no-such-secret}}}}\nresources:\n  no_secret: {{type: {}}}\n",
        env.fixture_plugs
    ));
    assert!(text.contains("the Secret `no-such-secret` does not exist in namespace"), "{text}");
    // A ServiceAccount that does not exist.
    ws.manifest(&format!("resources:\n  a: {{type: {}}}\n", env.fixture));
    let out = run(env, &cluster, &ws, &["plan", "-f", "manifest.yaml", "--service-account", "nobody"]);
    assert!(out.all().contains("the ServiceAccount `nobody` does not exist"), "{}", out.all());
    // A node that never takes the Pod: failed after the schedule timeout, saying so.
    let started = Instant::now();
    let selector = ["--node-selector", "deployster.io/no-such=node", "--schedule-timeout", "5s"];
    let out = run(env, &cluster, &ws, &[&["plan", "-f", "manifest.yaml"][..], &selector[..]].concat());
    assert_ne!(out.code, 0, "{}", out.all());
    let text = out.all();
    assert!(text.contains("resource `a`: init failed: no node took the Pod within 5s:"), "{text}");
    assert!(text.contains("nodes are available"), "with the scheduler's message: {text}");
    assert!(started.elapsed() < Duration::from_secs(60), "failing took {:?}", started.elapsed());
    assert_nothing_left(&cluster);
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster pods:: -- --include-ignored"]
#[test]
fn a_timed_out_action_s_pod_is_gone_before_the_run_ends() {
    let (env, cluster) = on_cluster("pods-timeout");
    let dir = claim(&cluster);
    let ws = Workspace::new();
    ws.manifest(&format!(
        r#"{PLUGS}resources:
  timed:
    type: {plugs}
    config: {{marker: /rw/timed.marker, action_sleep_ms: 60000, on_term: /rw/timed.cleaned}}
"#,
        plugs = env.fixture_plugs
    ));
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 1;
    // The limit counts from the Pod's creation: long enough for the program to start under CI's load.
    let out = run(env, &cluster, &ws, &["apply", "-f", "manifest.yaml", "--yes", "--action-timeout", "10s"]);
    assert_eq!(out.code, 1, "{}", out.all());
    assert!(out.all().contains("timed out after 10s"), "{}", out.all());
    assert!(left(&cluster).iter().all(|o| !o.starts_with("pod/")), "the Pod was gone when apply returned");
    assert_nothing_left(&cluster);

    // The Pod was deleted with a grace period (5 s): its program got SIGTERM first, cleaned up
    // and exited; a SIGKILL, if the runtime sent one at all, came no sooner than the grace.
    let signals = node_signals(&env.node_docker, since, "dst-timed-");
    if signals.is_empty() {
        // No signal at all: the program was not running yet when its time ran out (its Pod
        // still starting), so there was nothing to stop.
        eprintln!("the action's program had not started when its time ran out: no signal to check");
        return;
    }
    let (first_term, first_kill) = (
        signals.iter().find(|(_, signal)| *signal == 15).map(|(at, _)| *at),
        signals.iter().find(|(_, signal)| *signal == 9).map(|(at, _)| *at),
    );
    let first_term = first_term.unwrap_or_else(|| panic!("the action's program never got SIGTERM: {signals:?}"));
    assert!(first_kill.is_none_or(|kill| kill >= first_term), "SIGKILL before SIGTERM: {signals:?}");
    let grace = PodSettings::new("").kill_grace;
    assert!(
        first_kill.is_none_or(|kill| kill - first_term >= grace.as_nanos() - 500_000_000),
        "SIGKILL came before the grace period ({grace:?}) was over: {signals:?}"
    );
    assert!(dir.join("timed.cleaned").exists(), "the program had the grace period but did not clean up: {signals:?}");
}

/// The signals (nanoseconds, number) the node's container runtime sent to the program
/// container of Pods whose names start with `prefix`, since `since` (Unix seconds).
fn node_signals(node_docker: &str, since: u64, prefix: &str) -> Vec<(u128, u32)> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 1;
    let out = std::process::Command::new("docker")
        .args(["-H", node_docker, "events", "--filter", "event=kill"])
        .args(["--since", &since.to_string(), "--until", &now.to_string()])
        .args(["--format", "{{.TimeNano}} {{.Actor.Attributes.name}} {{.Actor.Attributes.signal}}"])
        .output()
        .expect("docker events on the node");
    assert!(out.status.success(), "docker events: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (at, name, signal) = (fields.next()?, fields.next()?, fields.next()?);
            if !(name.starts_with(prefix) && name.ends_with("_main")) {
                return None;
            }
            Some((at.parse().ok()?, signal.parse().ok()?))
        })
        .collect()
}

#[ignore = "needs a cluster whose Pods run: DEPLOYSTER_E2E_CLUSTER=<kubeconfig ../shared/cluster/up.sh prints> cargo test --test cluster pods:: -- --include-ignored"]
#[test]
fn a_pod_deleted_by_hand_mid_action_fails_the_action_saying_so() {
    let (env, cluster) = on_cluster("pods-deleted");
    let dir = claim(&cluster);
    let ws = Workspace::new();
    ws.manifest(&format!(
        "{PLUGS}resources:\n  slow:\n    type: {}\n    config: {{marker: /rw/slow.marker, action_sleep_ms: 60000}}\n",
        env.fixture_plugs
    ));
    let pods = ["--executor", "pod", "--namespace", &cluster.namespace, "--helper-image", &env.helper];
    let args = [&["apply", "-f", "manifest.yaml", "--yes"][..], &pods[..]].concat();
    let child = ws.spawn_with_env(&args, &[("KUBECONFIG", &env.kubeconfig)]);
    // The action's Pod: the one whose program line ends in `act create`, once it runs (a
    // Pod's phase lags the kubelet's start of it; the program sleeps a minute).
    let until = Instant::now() + Duration::from_secs(90);
    let action_pod = loop {
        assert!(Instant::now() < until, "the action's Pod did not start");
        std::thread::sleep(Duration::from_secs(1));
        let Some(list) = cluster.get(&["pods", "-l", "deployster.io/owner"]) else { continue };
        let action = list["items"].as_array().unwrap().iter().find(|p| {
            let containers = p["spec"]["containers"].as_array().cloned().unwrap_or_default();
            let main = containers.iter().find(|c| c["name"] == "main");
            let command = main.and_then(|c| c["command"].as_array().cloned()).unwrap_or_default();
            command.ends_with(&["act".into(), "create".into()]) && p["status"]["phase"] == "Running"
        });
        if let Some(pod) = action {
            break pod["metadata"]["name"].as_str().unwrap().to_string();
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    cluster.must(&cluster.ns(&["delete", "pod", &action_pod, "--wait=false"]));
    let out = Run::from(child.wait_with_output().unwrap());
    assert_eq!(out.code, 1, "{}", out.all());
    assert!(out.all().contains("was deleted by someone else"), "{}", out.all());
    assert!(!dir.join("slow.marker").exists(), "the action did not finish");
    assert_nothing_left(&cluster);
}
