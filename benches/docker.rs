//! Docker executor benchmarks; prints figures, asserts nothing. `cargo bench --bench docker`.
//!
//! * Per-invocation time of the Docker executor against `docker run --rm -i IMAGE` for the same
//!   image and input: 50 state invocations each, interleaved so that drift in the daemon's speed
//!   affects both alike. Target: ours ≤ 0.8× the CLI's median. Ours runs with its default
//!   network (containers join one sandbox's network namespace) and, for comparison, with
//!   `bridge` (a network stack per container, as `docker run` does).
//! * Throughput: how many containers per second the engine sustains with parallelism 4
//!   (init + state of 40 resources of an image type).

#[path = "../tests/support/docker.rs"]
mod docker_support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deployster::engine::context::RunOptions;
use deployster::engine::executor::docker::{ContainerNetwork, DockerExecutor, PullPolicy};
use deployster::engine::executor::{Executor, Invocation, InvocationLabels};
use deployster::engine::load_validated;
use deployster::engine::run::Engine;
use deployster::engine::typeref::{ImageRef, TypeRef};
use docker_support::FIXTURE_IMAGE;

const RUNS: usize = 50;
const REQUEST: &str = r#"{"name":"bench","type":"deployster/fixture:test","version":"0","verbose":false,"workspace":"/","config":{"respond":{"status":"VALID","state":{}}},"dependencies":{},"plugs":{}}"#;

fn main() {
    let env = match docker_support::try_env() {
        Ok(env) => env,
        Err(why) => {
            eprintln!("Docker is not reachable ({why}): nothing to measure");
            return;
        }
    };
    per_invocation(env);
    throughput(env);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn state_invocation() -> Invocation {
    Invocation {
        program: TypeRef::Image(ImageRef::parse(FIXTURE_IMAGE).expect("valid reference")),
        entrypoint: None,
        args: vec!["state".into()],
        stdin: REQUEST.as_bytes().to_vec(),
        mounts: vec![],
        env: vec![],
        workdir: None,
        timeout: Duration::from_secs(60),
        labels: InvocationLabels { phase: "state".into(), run_id: "bench".into(), ..InvocationLabels::default() },
        sink: None,
        cancel: Default::default(),
    }
}

fn docker_cli() -> Duration {
    let started = Instant::now();
    let mut child = Command::new("docker")
        .args(["run", "--rm", "-i", FIXTURE_IMAGE, "state"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the docker CLI");
    child.stdin.take().expect("stdin").write_all(REQUEST.as_bytes()).expect("write the request");
    let output = child.wait_with_output().expect("wait for docker run");
    assert!(output.status.success(), "docker run failed: {}", String::from_utf8_lossy(&output.stderr));
    started.elapsed()
}

fn timed(env: &docker_support::DockerEnv, executor: &DockerExecutor) -> Duration {
    let started = Instant::now();
    let outcome = env.block_on(executor.invoke(state_invocation())).expect("invocation");
    assert!(outcome.exit.success() && !outcome.stdout.is_empty());
    started.elapsed()
}

fn per_invocation(env: &docker_support::DockerEnv) {
    let shared = DockerExecutor::new(PullPolicy::Never);
    let bridge = DockerExecutor::new(PullPolicy::Never).with_network(ContainerNetwork::Mode("bridge".into()));
    // Connect, check the image and start the sandbox outside the measurement, as a run does once.
    timed(env, &shared);
    timed(env, &bridge);
    docker_cli();
    let (mut ours, mut ours_bridge, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        ours.push(timed(env, &shared));
        cli.push(docker_cli());
        ours_bridge.push(timed(env, &bridge));
    }
    let (ours, ours_bridge, cli) = (median(ours), median(ours_bridge), median(cli));
    let ratio = |d: Duration| d.as_secs_f64() / cli.as_secs_f64();
    println!("per invocation: {RUNS} state invocations of {FIXTURE_IMAGE} each, interleaved");
    println!("  Docker executor, shared network, median     {}", ms(ours));
    println!("  Docker executor, network bridge, median      {}", ms(ours_bridge));
    println!("  docker run --rm -i, median                   {}", ms(cli));
    println!("  ratio (default: shared network)              {:.2}x   (target ≤ 0.8x)", ratio(ours));
    println!("  ratio (bridge: a network per container)      {:.2}x", ratio(ours_bridge));
}

fn throughput(env: &docker_support::DockerEnv) {
    const RESOURCES: usize = 40;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut yaml = String::from("resources:\n");
    for i in 0..RESOURCES {
        yaml.push_str(&format!(
            "  r{i}: {{ type: \"{FIXTURE_IMAGE}\", config: {{ respond: {{ status: VALID, state: {{}} }} }} }}\n"
        ));
    }
    let path = dir.path().join("manifest.yaml");
    std::fs::write(&path, yaml).expect("write manifest");
    let manifest = Arc::new(load_validated(&[path], &[]).expect("valid manifest"));
    let executor = Arc::new(DockerExecutor::new(PullPolicy::Never));
    let options = RunOptions { parallelism: 4, ..RunOptions::default() };
    let started = Instant::now();
    env.block_on(async {
        let prepared = Engine::new(manifest, executor, options).prepare().await.expect("init");
        let plan = prepared.plan().await;
        assert_eq!(plan.counts().valid, RESOURCES);
    });
    let wall = started.elapsed();
    let containers = RESOURCES * 2;
    println!("throughput: {RESOURCES} resources (init + state = {containers} containers), parallelism 4");
    println!("  wall time                           {}", ms(wall));
    println!("  containers per second               {:.1}", containers as f64 / wall.as_secs_f64());
}
