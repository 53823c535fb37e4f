//! Resource types as Docker images, on this machine's real Docker engine. The images are built
//! by the test setup from static binaries (see `support::docker`). They are `#[ignore]`d, so
//! plain `cargo test` lists them; `-- --include-ignored` runs them, and without Docker they fail.
#![cfg(feature = "docker")]

use crate::support;
use std::collections::HashMap;
use std::time::Duration;

use crate::support::docker::{self, DIRECTORY_IMAGE, DockerEnv, FILE_IMAGE, FIXTURE_IMAGE, FIXTURE_PLUGS_IMAGE};
use crate::support::{Run, Workspace};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::RemoveContainerOptionsBuilder;
use deployster::engine::executor::docker::sandbox::SANDBOX_PHASE;
use deployster::engine::executor::docker::{LABEL_OWNER, LABEL_PHASE, LABEL_RUN_ID};
use serde_json::Value;

/// `apply --yes --output json` with `extra`; returns the run and its run id.
fn apply(ws: &Workspace, extra: &[&str]) -> (Run, String) {
    let run = ws.apply(&[&["--output", "json"], extra].concat());
    let run_id = serde_json::from_str::<serde_json::Value>(&run.stdout)
        .ok()
        .and_then(|doc| doc["run_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no JSON document with a run id:\n{}", run.all()));
    (run, run_id)
}

fn assert_no_containers_left(env: &DockerEnv, run_id: &str) {
    let left = env.containers_with(LABEL_RUN_ID, run_id);
    assert!(left.is_empty(), "containers of run {run_id} were left behind: {left:?}");
}

fn status_of<'a>(doc: &'a serde_json::Value, section: &str, name: &str) -> &'a serde_json::Value {
    let entries = doc[section].as_array().unwrap_or_else(|| panic!("no {section} in {doc}"));
    &entries.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no {name} in {doc}"))["status"]
}

fn builtins_manifest(ws: &Workspace) {
    std::fs::create_dir_all(ws.path("out")).unwrap();
    ws.manifest(&format!(
        r#"
plugs:
  files: {{ path: ./out }}
resources:
  data_dir:
    type: {DIRECTORY_IMAGE}
    config: {{ path: site, mode: "0750" }}
  page:
    type: {FILE_IMAGE}
    dependencies: {{ dir: data_dir }}
    config: {{ path: "{{{{ dir.state.path }}}}/index.html", content: "<h1>hello</h1>\n" }}
"#
    ));
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn builtin_types_in_containers_write_through_a_writable_plug() {
    let env = docker::env();
    let ws = Workspace::new();
    builtins_manifest(&ws);
    let (run, run_id) = apply(&ws, &[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out/site/index.html"), "<h1>hello</h1>\n", "the file appears on the host");
    let doc = run.json();
    assert_eq!(doc["result"][1]["state"]["path"], "/files/site/index.html", "the container sees its own paths");
    assert_no_containers_left(env, &run_id);

    let (again, run_id) = apply(&ws, &[]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert_eq!(again.json()["status"], "unchanged", "a second apply is a no-op");
    assert_no_containers_left(env, &run_id);

    std::fs::remove_file(ws.path("out/site/index.html")).unwrap();
    let (fixed, run_id) = apply(&ws, &[]);
    assert_eq!(fixed.code, 0, "{}", fixed.all());
    let doc = fixed.json();
    assert_eq!(status_of(&doc, "plan", "page"), "MISSING");
    assert_eq!(status_of(&doc, "result", "page"), "APPLIED");
    assert_eq!(ws.read("out/site/index.html"), "<h1>hello</h1>\n", "drift corrected");
    assert_no_containers_left(env, &run_id);
}

/// A workspace with directories `ro` and `rw` declared as plugs of those names (which
/// `FIXTURE_PLUGS_IMAGE` asks for, read-only and writable), and `resources` (YAML, indented).
fn plugs_workspace(resources: &str) -> Workspace {
    let ws = Workspace::new();
    for dir in ["ro", "rw"] {
        std::fs::create_dir_all(ws.path(dir)).unwrap();
    }
    ws.manifest(&format!("plugs:\n  ro: {{ path: ./ro }}\n  rw: {{ path: ./rw }}\nresources:\n{resources}"));
    ws
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn plugs_are_mounted_read_only_unless_writable_was_asked() {
    let env = docker::env();
    let ws = plugs_workspace(&format!(
        r#"  writes_rw: {{ type: "{FIXTURE_PLUGS_IMAGE}", config: {{ marker: /rw/ok.marker, write_file: /rw/written, record: /rw/requests.jsonl }} }}
  writes_ro: {{ type: "{FIXTURE_PLUGS_IMAGE}", config: {{ marker: /rw/ro.marker, write_file: /ro/forbidden }} }}
"#
    ));
    let (run, run_id) = apply(&ws, &[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert_eq!(ws.read("rw/written"), "written by an action\n");
    assert!(ws.exists("rw/ok.marker"));
    assert!(!ws.exists("ro/forbidden"), "a read-only plug was written to");
    assert!(run.stderr.contains("resource `writes_ro` failed in action create"), "{}", run.all());
    assert!(run.stderr.contains("cannot write /ro/forbidden: Read-only file system"), "{}", run.all());
    let recorded = ws.recorded("rw/requests.jsonl");
    let request = &recorded[0]["request"];
    assert_eq!(request["plugs"], serde_json::json!({"ro": "/ro", "rw": "/rw"}), "plugs as the container sees them");
    // Every container is told what it runs for, as a process is.
    let action = recorded.iter().find(|r| r["env"]["DEPLOYSTER_PHASE"] == "action").expect("the action recorded");
    assert_eq!(action["env"]["DEPLOYSTER_RESOURCE"], "writes_rw");
    assert_eq!(action["env"]["DEPLOYSTER_ACTION"], "create");
    assert_eq!(action["env"]["DEPLOYSTER_MANIFEST"], "manifest.yaml");
    assert_eq!(action["env"]["DEPLOYSTER_RUN_ID"], run_id.as_str());
    assert_eq!(request["workspace"], "/", "containers do not see the manifest's directory");
    // Nothing of deployster's own environment (this test's CARGO_* variables among it).
    let names: Vec<&str> = action["env_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(names.contains(&"DEPLOYSTER_RUN_ID"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("CARGO")), "deployster's environment leaked: {names:?}");
    assert_no_containers_left(env, &run_id);
}

/// Seed-004 messages from containers: progress and results read while the container runs, a
/// failure's message from its last message when stderr is empty, a stalled action stopped by
/// the progress timeout — a slow one that keeps reporting is not — and its container removed.
#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn containers_report_progress_results_and_errors_in_messages() {
    let env = docker::env();
    let ws = plugs_workspace(&format!(
        r#"  talks:
    type: "{FIXTURE_PLUGS_IMAGE}"
    timeouts: {{ progress: 2s }}
    config: {{ marker: /rw/talks.marker, progress_steps: 4, step_ms: 900, results: {{ url: "http://db:5432" }} }}
  fails:
    type: "{FIXTURE_PLUGS_IMAGE}"
    config: {{ marker: /rw/fails.marker, quiet: true, action_exit: 4, error_msg: "quota exceeded" }}
  stalls:
    type: "{FIXTURE_PLUGS_IMAGE}"
    timeouts: {{ progress: 2s }}
    config: {{ marker: /rw/stalls.marker, progress_steps: 3, stall_after: 1 }}
"#
    ));
    let (run, run_id) = apply(&ws, &[]);
    assert_eq!(run.code, 1, "{}", run.all());
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let talks = doc["result"].as_array().unwrap().iter().find(|e| e["name"] == "talks").unwrap();
    assert_eq!(talks["status"], "APPLIED", "{}", run.all());
    assert_eq!(
        talks["results"],
        serde_json::json!([{"action": "create", "result": [{"key": "url", "value": "http://db:5432"}]}])
    );
    for percent in ["25%", "100%"] {
        let line = format!("talks: action create (Create /rw/talks.marker) {percent}");
        assert!(run.stderr.contains(&line), "missing {line:?}:\n{}", run.all());
    }
    assert!(!run.all().contains("AGENT_MESSAGE"), "messages are not shown as output:\n{}", run.all());
    assert!(run.stderr.contains("resource `fails` failed in action create"), "{}", run.all());
    assert!(run.stderr.contains("quota exceeded"), "the last message says why:\n{}", run.all());
    assert!(
        run.stderr.contains("resource `stalls` failed in action create")
            && run.stderr.contains("reported no progress for 2s and was stopped"),
        "{}",
        run.all()
    );
    assert!(!ws.exists("rw/stalls.marker"));
    assert_no_containers_left(env, &run_id);
}

/// At the time limit a container gets SIGTERM first: one that handles it cleans up (and what
/// it prints meanwhile is shown); then it is removed.
#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn a_container_past_its_time_limit_gets_sigterm_and_may_clean_up() {
    let env = docker::env();
    let ws = plugs_workspace(&format!(
        "  slow: {{ type: \"{FIXTURE_PLUGS_IMAGE}\", config: {{ marker: /rw/slow.marker, action_sleep_ms: 120000, on_term: /rw/cleaned }} }}\n"
    ));
    let (run, run_id) = apply(&ws, &["--action-timeout", "2s"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("resource `slow` failed in action create"), "{}", run.all());
    assert!(run.stderr.contains("timed out after 2s"), "{}", run.all());
    assert_eq!(ws.read("rw/cleaned"), "cleaned up\n", "SIGTERM reached the program:\n{}", run.all());
    assert!(run.stderr.contains("slow/create | cleaning up after SIGTERM"), "{}", run.all());
    assert_no_containers_left(env, &run_id);
}

/// `check-type` runs an image type through the same checks, in containers: the fixture image
/// conforms (its plugs made in a scratch directory), and a failing action fails P013.
#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn check_type_runs_an_image_through_the_conformance_checks() {
    let env = docker::env();
    let ws = Workspace::new();
    ws.write("good.yaml", "marker: /rw/m\n");
    let run = ws.run(&["check-type", FIXTURE_PLUGS_IMAGE, "--config", "good.yaml", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let mut docs = vec![run.json()];
    assert_eq!(docs[0]["conforms"], true);
    // Each way of breaking state or an action fails the check that names it, in containers too.
    for (config, expected) in support::BROKEN_TYPE_CASES {
        ws.write("case.yaml", &format!("marker: /rw/m\n{config}\n"));
        let run = ws.run(&["check-type", FIXTURE_PLUGS_IMAGE, "--config", "case.yaml", "--output", "json"]);
        assert_eq!(run.code, 1, "{config}: {}", run.all());
        let doc = run.json();
        let failed: Vec<&Value> = doc["findings"].as_array().unwrap().iter().filter(|f| f["level"] == "fail").collect();
        assert_eq!(failed.len(), 1, "{config}: {failed:?}");
        assert_eq!(failed[0]["id"], expected, "{config}: {failed:?}");
        docs.push(doc.clone());
    }
    for doc in docs {
        assert_no_containers_left(env, doc["run_id"].as_str().expect("a run id labels the containers"));
    }
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn actions_may_use_another_image_or_override_the_entrypoint() {
    let env = docker::env();
    let ws = plugs_workspace(&format!(
        r#"  other_image:
    type: "{FIXTURE_PLUGS_IMAGE}"
    config:
      path: /rw/by-other-image
      marker: /rw/by-other-image
      actions: [{{ name: mkdir, description: "runs in the built-in image", image: "{DIRECTORY_IMAGE}", args: [create] }}]
  entrypoint:
    type: "{FIXTURE_PLUGS_IMAGE}"
    config:
      path: /rw/by-entrypoint
      marker: /rw/by-entrypoint
      actions: [{{ name: mkdir, entrypoint: /deployster, args: [__type, directory, create] }}]
"#
    ));
    let (run, run_id) = apply(&ws, &[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(ws.path("rw/by-other-image").is_dir(), "the action ran in the other image");
    assert!(ws.path("rw/by-entrypoint").is_dir(), "the action ran with the overridden entrypoint");
    assert!(run.stderr.contains("other_image/mkdir | created /rw/by-other-image"), "{}", run.all());
    assert_no_containers_left(env, &run_id);
}

/// Applies one fixture resource with `config`; it must fail with every `needle` in stderr, and
/// leave no container behind.
fn assert_one_container_fails(config: &str, extra: &[&str], needles: &[&str]) {
    let env = docker::env();
    let ws = Workspace::new();
    ws.manifest(&format!("resources:\n  it: {{ type: \"{FIXTURE_IMAGE}\", config: {config} }}\n"));
    let started = std::time::Instant::now();
    let (run, run_id) = apply(&ws, extra);
    assert_eq!(run.code, 1, "{}", run.all());
    for needle in needles {
        assert!(run.stderr.contains(needle), "missing {needle:?} in:\n{}", run.all());
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "took {:?}", started.elapsed());
    assert_no_containers_left(env, &run_id);
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn a_hanging_container_is_killed_and_removed_at_the_timeout() {
    assert_one_container_fails(
        "{ hang: true }",
        &["--timeout", "2s"],
        &["resource `it` failed in state", "timed out after 2s and was killed"],
    );
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn oversized_output_fails_cleanly() {
    assert_one_container_fails(
        "{ spew_bytes: 9000000 }",
        &[],
        &["printed more than 8388608 bytes on stdout and was stopped"],
    );
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn a_missing_image_names_the_resource_and_the_image() {
    let _env = docker::env();
    let ws = Workspace::new();
    ws.manifest("resources:\n  ghost: { type: \"deployster/does-not-exist:1.0\" }\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.all().contains("resource `ghost`: init failed: image `deployster/does-not-exist:1.0`: cannot pull it"),
        "{}",
        run.all()
    );

    let run = ws.apply(&["--pull", "never"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.all().contains(
            "image `deployster/does-not-exist:1.0`: not present locally, and the pull policy `never` forbids pulling it"
        ),
        "{}",
        run.all()
    );
}

#[test]
fn an_unreachable_daemon_is_one_clear_error() {
    // Needs no daemon; it runs wherever Docker support is compiled in.
    let ws = Workspace::new();
    ws.manifest(&format!(
        "resources:\n  a: {{ type: \"{FIXTURE_IMAGE}\" }}\n  b: {{ type: \"{FIXTURE_IMAGE}\" }}\n  local: {{ type: builtin/directory, config: {{ path: x }} }}\n"
    ));
    let dead = ws.path("dead.sock");
    let host = format!("unix://{}", dead.display());
    let run = ws.run_with_env(&["apply", "-f", "manifest.yaml", "--yes"], &[("DOCKER_HOST", &host)]);
    assert_eq!(run.code, 1, "{}", run.all());
    let expected =
        format!("manifest manifest.yaml: cannot run its resource types: cannot reach the Docker daemon at {host}");
    assert!(run.stderr.contains(&expected), "{}", run.all());
    assert_eq!(run.stderr.matches("cannot reach the Docker daemon").count(), 1, "{}", run.all());
    assert!(!ws.exists("x"), "nothing ran");
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn containers_orphaned_by_a_dead_deployster_are_removed_at_the_next_start() {
    let env = docker::env();
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let create = |owner: String| {
        let labels =
            HashMap::from([(LABEL_OWNER.to_string(), owner), (LABEL_RUN_ID.to_string(), "orphan-test".into())]);
        let body =
            ContainerCreateBody { image: Some(FIXTURE_IMAGE.into()), labels: Some(labels), ..Default::default() };
        env.block_on(env.docker.create_container(None, body)).expect("create a container").id
    };
    let dead = create(format!("{host}/4194304999/1"));
    // This test process is alive: its containers belong to a run in progress.
    let alive =
        create(deployster::engine::executor::docker::DockerExecutor::new(Default::default()).owner().to_string());

    let ws = Workspace::new();
    ws.manifest(&format!(
        "resources:\n  a: {{ type: \"{FIXTURE_IMAGE}\", config: {{ respond: {{ status: VALID, state: {{}} }} }} }}\n"
    ));
    let run = ws.plan(&[]);
    assert_eq!(run.code, 0, "{}", run.all());

    let left = env.containers_with(LABEL_RUN_ID, "orphan-test");
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    let _ = env.block_on(env.docker.remove_container(&alive, Some(remove)));
    assert!(!left.contains(&dead), "the dead deployster's container was not removed");
    assert!(left.contains(&alive), "a live deployster's container was removed");
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn init_results_are_cached_per_image_and_request() {
    use deployster::engine::executor::Executor;
    use deployster::engine::executor::docker::{DockerExecutor, PullPolicy};

    let env = docker::env();
    let executor = DockerExecutor::new(PullPolicy::Never);
    let run_id = format!("init-cache-{}", std::process::id());
    let init = |stdin: &str| fixture_invocation("init", &[], stdin, &run_id);
    let since = now_secs();
    let first = env.block_on(executor.invoke(init(r#"{"name": "a"}"#))).unwrap();
    let second = env.block_on(executor.invoke(init(r#"{"name": "a"}"#))).unwrap();
    let other = env.block_on(executor.invoke(init(r#"{"name": "b"}"#))).unwrap();
    assert_eq!(first, second, "the cached outcome is the first one");
    assert!(first.exit.success() && other.exit.success());
    let created = containers_created(env, LABEL_RUN_ID, &run_id, since).len();
    assert_eq!(created, 2, "one container for `a` (then cached) and one for `b`");
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// The IDs of the containers labelled `label=value` that the daemon created since `since`
/// (seconds since the epoch).
fn containers_created(env: &DockerEnv, label: &str, value: &str, since: u64) -> Vec<String> {
    use bollard::query_parameters::EventsOptionsBuilder;
    use futures::StreamExt;
    let until = now_secs() + 1;
    let filters = HashMap::from([
        ("type".to_string(), vec!["container".to_string()]),
        ("event".to_string(), vec!["create".to_string()]),
        ("label".to_string(), vec![format!("{label}={value}")]),
    ]);
    let options =
        EventsOptionsBuilder::default().since(&since.to_string()).until(&until.to_string()).filters(&filters).build();
    let events = env.block_on(async { env.docker.events(Some(options)).collect::<Vec<_>>().await });
    events.into_iter().filter_map(|e| e.ok()?.actor?.id).collect()
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn the_docker_example_plans() {
    let _env = docker::env();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/docker/manifest.yaml");
    let ws = Workspace::new();
    let run = ws.run(&["plan", "-f", example.to_str().unwrap(), "--state-dir", &ws.root()]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("data_dir") && run.stdout.contains(DIRECTORY_IMAGE), "{}", run.all());
}

/// A TCP listener where containers on Docker's default network can reach the host (the
/// `bridge` network's gateway), counting the connections it accepts.
struct HostListener {
    address: String,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HostListener {
    fn start(env: &DockerEnv) -> Self {
        let bridge = env.block_on(env.docker.inspect_network("bridge", None)).expect("inspect the bridge network");
        let gateway = bridge
            .ipam
            .and_then(|ipam| ipam.config)
            .and_then(|configs| configs.into_iter().find_map(|c| c.gateway.or_else(|| first_address(c.subnet?))))
            .expect("the bridge network has a gateway or an IPv4 subnet");
        let listener = std::net::TcpListener::bind((gateway.as_str(), 0)).expect("listen on the bridge gateway");
        let address = format!("{gateway}:{}", listener.local_addr().unwrap().port());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stream.is_ok() {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
        HostListener { address, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The first host address of an IPv4 subnet, where Docker puts a bridge's gateway when its
/// configuration names none.
fn first_address(subnet: String) -> Option<String> {
    let base: std::net::Ipv4Addr = subnet.split_once('/')?.0.parse().ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(base) + 1).to_string())
}

/// Plans two probing fixture resources with `extra`; returns their states (netns, hostname,
/// whether they reached `listener`).
fn probe_two(ws: &Workspace, listener: &HostListener, extra: &[&str]) -> (Run, Vec<serde_json::Value>) {
    ws.manifest(&format!(
        "resources:\n  one: {{ type: \"{FIXTURE_IMAGE}\", config: {{ probe: {{ connect: \"{0}\" }} }} }}\n  two: {{ type: \"{FIXTURE_IMAGE}\", config: {{ probe: {{ connect: \"{0}\" }} }} }}\n",
        listener.address
    ));
    let run = ws.plan(&[&["--output", "json"], extra].concat());
    let states = if run.code == 0 {
        let doc = run.json();
        ["one", "two"]
            .iter()
            .map(|name| {
                let entries = doc["plan"].as_array().expect("plan entries");
                entries.iter().find(|e| e["name"] == *name).expect("entry")["state"].clone()
            })
            .collect()
    } else {
        vec![]
    };
    (run, states)
}

fn own_netns() -> String {
    std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string()
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn containers_share_one_sandbox_network_that_reaches_the_docker_network() {
    let env = docker::env();
    let listener = HostListener::start(env);
    let ws = Workspace::new();
    let since = now_secs();
    let (run, states) = probe_two(&ws, &listener, &[]);
    assert_eq!(run.code, 0, "{}", run.all());
    for state in &states {
        assert_eq!(state["connected"], true, "a container reaches the host through the sandbox: {state}");
    }
    assert_eq!(states[0]["netns"], states[1]["netns"], "one network namespace for both: {states:?}");
    assert_ne!(states[0]["netns"], own_netns(), "not the host's network");
    assert!(listener.accepted() >= 2, "the listener saw {} connections", listener.accepted());
    // The sandbox gives its hostname (its short ID) to the containers that join it.
    let hostname = states[0]["hostname"].as_str().unwrap().to_string();
    let created = containers_created(env, LABEL_PHASE, SANDBOX_PHASE, since);
    let sandbox = created.iter().find(|id| id.starts_with(&hostname));
    let sandbox = sandbox.unwrap_or_else(|| panic!("no sandbox {hostname} among those created: {created:?}"));
    let left = env.containers_with(LABEL_PHASE, SANDBOX_PHASE);
    assert!(!left.contains(sandbox), "the run left its sandbox {sandbox} behind");
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn other_network_modes_are_given_to_each_container() {
    let env = docker::env();
    let listener = HostListener::start(env);
    let ws = Workspace::new();
    let (run, states) = probe_two(&ws, &listener, &["--container-network", "bridge"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(states[0]["connected"], true, "{states:?}");
    assert_ne!(states[0]["netns"], states[1]["netns"], "a network each: {states:?}");

    let (run, states) = probe_two(&ws, &listener, &["--container-network", "none"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(states[0]["connected"], false, "no network, no connection: {states:?}");

    let (run, _) = probe_two(&ws, &listener, &["--container-network", "no-such-network-here"]);
    assert_eq!(run.code, 1, "{}", run.all());
    let expected =
        "resource `one`: init failed: Docker could not start the container: network no-such-network-here not found";
    assert!(run.stderr.contains(expected), "{}", run.all());

    let run = ws.plan(&["--container-network", ""]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("a network mode cannot be empty"), "{}", run.all());
}

#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn a_lost_sandbox_is_replaced_and_the_executor_removes_its_own() {
    use deployster::engine::executor::Executor;
    use deployster::engine::executor::docker::{DockerExecutor, PullPolicy};

    let env = docker::env();
    let executor = DockerExecutor::new(PullPolicy::Never);
    let run_id = format!("sandbox-{}", std::process::id());
    let request = r#"{"name": "it", "config": {"respond": {"status": "VALID", "state": {}}}}"#;
    let state = || fixture_invocation("state", &["state"], request, &run_id);
    assert!(env.block_on(executor.invoke(state())).unwrap().exit.success());
    let first = env.block_on(executor.sandbox_id()).expect("a sandbox was started");
    let remove = RemoveContainerOptionsBuilder::default().force(true).build();
    env.block_on(env.docker.remove_container(&first, Some(remove))).expect("remove the sandbox");

    let outcome = env.block_on(executor.invoke(state())).expect("runs in a new sandbox");
    assert!(outcome.exit.success(), "{outcome:?}");
    let second = env.block_on(executor.sandbox_id()).expect("a sandbox runs again");
    assert_ne!(first, second);
    assert!(env.containers_with(LABEL_PHASE, SANDBOX_PHASE).contains(&second));
    drop(executor);
    assert!(!env.containers_with(LABEL_PHASE, SANDBOX_PHASE).contains(&second), "dropping the executor removes it");
}

/// An invocation of the fixture image, as the engine would make it.
fn fixture_invocation(
    phase: &str,
    args: &[&str],
    stdin: &str,
    run_id: &str,
) -> deployster::engine::executor::Invocation {
    use deployster::engine::executor::{Invocation, InvocationLabels};
    use deployster::engine::typeref::{ImageRef, TypeRef};
    Invocation {
        program: TypeRef::Image(ImageRef::parse(FIXTURE_IMAGE).unwrap()),
        entrypoint: None,
        args: args.iter().map(|a| a.to_string()).collect(),
        stdin: stdin.as_bytes().to_vec(),
        mounts: vec![],
        env: vec![],
        workdir: None,
        timeout: std::time::Duration::from_secs(60),
        labels: InvocationLabels { phase: phase.into(), run_id: run_id.into(), ..InvocationLabels::default() },
        sink: None,
        cancel: Default::default(),
    }
}

/// Containers (of any phase, the sandbox included) whose owner is deployster process `pid`.
fn containers_of_process(env: &DockerEnv, pid: u32) -> Vec<String> {
    use bollard::query_parameters::ListContainersOptionsBuilder;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let prefix = format!("{host}/{pid}/");
    let filters = HashMap::from([("label".to_string(), vec![LABEL_OWNER.to_string()])]);
    let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let containers = env.block_on(env.docker.list_containers(Some(options))).expect("list containers");
    containers
        .into_iter()
        .filter(|c| c.labels.as_ref().and_then(|l| l.get(LABEL_OWNER)).is_some_and(|o| o.starts_with(&prefix)))
        .filter_map(|c| c.id)
        .collect()
}

/// SIGTERM (and SIGHUP, SIGINT alike) to an apply whose image type hangs: the container and
/// the network sandbox are removed before deployster exits, and the run is recorded as
/// interrupted.
#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn a_signal_leaves_no_container_and_no_sandbox_behind() {
    let env = docker::env();
    let ws = Workspace::new();
    ws.manifest(&format!("resources:\n  stuck: {{ type: \"{FIXTURE_IMAGE}\", config: {{ hang: true }} }}\n"));
    let child = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    let pid = child.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // The sandbox and the state action's container.
    while containers_of_process(env, pid).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "the hanging container never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    assert_eq!(containers_of_process(env, pid), Vec::<String>::new(), "left behind after SIGTERM");
    let log = ws.run(&["history", "--output", "json"]).json();
    assert_eq!(log["in_progress"], serde_json::json!([]), "{log}");
}

/// `pipeline run` runs a step's image types on Docker, as `apply` does: a stage whose target is
/// the built-in `file` type's image, writing through a plug.
#[ignore = "needs Docker: cargo test --test docker_engine docker:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn a_pipeline_step_runs_image_types_in_containers() {
    let _env = docker::env();
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path("out")).unwrap();
    ws.write(
        "app.yaml",
        &format!(
            r#"
plugs:
  files: {{ path: ./out }}
resources:
  version:
    type: {FILE_IMAGE}
    config: {{ path: "{{{{ pipeline.target }}}}.txt", content: "{{{{ version }}}}" }}
"#
        ),
    );
    ws.write(
        "pipeline.yaml",
        r#"
revision: "{{ version }}"
stages:
  - name: staging
    targets: [{name: stg, manifest: app.yaml}]
    steps: [deploy]
"#,
    );
    let run = ws.run(&["pipeline", "run", "-f", "pipeline.yaml", "--var", "version=1.2", "--pull", "never"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out/stg.txt"), "1.2", "the container wrote through its plug");
    assert!(run.all().contains("staging/all/stg/deploy: succeeded"), "{}", run.all());
}
