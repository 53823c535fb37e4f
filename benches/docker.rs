//! Docker executor benchmarks; prints figures, asserts nothing. `cargo bench --bench docker`.
//!
//! * Per-invocation time of the Docker executor against `docker run --rm -i IMAGE` for the same
//!   image and input: 50 state invocations each, interleaved so that drift in the daemon's speed
//!   affects both alike. Target: ours ≤ 0.8× the CLI's median.
//! * Throughput: how many containers per second the engine sustains with parallelism 4
//!   (init + state of 40 resources of an image type).

#[path = "../tests/support/docker.rs"]
mod docker_support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deployster::engine::executor::docker::{DockerExecutor, PullPolicy};
use deployster::engine::executor::{Executor, Invocation, InvocationLabels};
use deployster::engine::load_validated;
use deployster::engine::run::{Engine, RunOptions};
use deployster::engine::typeref::{ImageRef, TypeRef};
use docker_support::FIXTURE_IMAGE;

const RUNS: usize = 50;
const REQUEST: &str = r#"{"name":"bench","type":"deployster/fixture:test","version":"0","verbose":false,"workspace":"/","config":{"respond":{"status":"VALID","state":{}}},"dependencies":{},"plugs":{}}"#;

fn main() {
    let Some(env) = docker_support::env() else {
        eprintln!("Docker is not reachable: nothing to measure");
        return;
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

fn per_invocation(env: &docker_support::DockerEnv) {
    let executor = DockerExecutor::new(PullPolicy::Never);
    // Connect (and check the image) outside the measurement, as a run does once.
    let warm = env.block_on(executor.invoke(state_invocation())).expect("warm-up invocation");
    assert!(warm.exit.success() && !warm.stdout.is_empty());
    docker_cli();
    let (mut ours, mut cli) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let started = Instant::now();
        let outcome = env.block_on(executor.invoke(state_invocation())).expect("invocation");
        assert!(outcome.exit.success());
        ours.push(started.elapsed());
        cli.push(docker_cli());
    }
    let (ours, cli) = (median(ours), median(cli));
    println!("per invocation: {RUNS} state invocations of {FIXTURE_IMAGE} each, interleaved");
    println!("  Docker executor (bollard), median   {}", ms(ours));
    println!("  docker run --rm -i, median          {}", ms(cli));
    println!("  ratio                               {:.2}x   (target ≤ 0.8x)", ours.as_secs_f64() / cli.as_secs_f64());
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
