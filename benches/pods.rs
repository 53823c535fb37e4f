//! Pod executor benchmark on a cluster whose Pods really run; prints figures, asserts nothing.
//! `DEPLOYSTER_E2E_CLUSTER=<kubeconfig of ../shared/cluster/up.sh> cargo bench --bench pods`
//!
//! * Per invocation: a state read of the fixture type as a Pod, from the Secret's and the Pod's
//!   creation to the verified result, 30 times in a row. Targets: median ≤ 1.5 s, p95 ≤ 3 s
//!   Beside it, as many bare one-shot Pods one after another: what the cluster itself takes.
//! * A state read whose program takes 2 s, 10 times: what is left of the Pod's cost around a
//!   program that outlives the kubelet's relist.
//! * 20 independent invocations at once, against 20 bare one-shot Pods at once: target within
//!   1.3× (the cluster's own cost, which grows with the number of Pods, is not ours).
//! * Bare Pods shaped as ours (a first container whose `postStart` hook holds the second) and
//!   with an init container instead (as ours were): what the shape itself costs.
//! * This process's CPU time per invocation (user + system), which is the controller's cost.
//! * The same state read in a warm runner (issue 37), 30 times: targets median ≤ 150 ms,
//!   p95 ≤ 400 ms; 20 at once in the runner against 20 bare Pods; and steady drift checks of
//!   10 Manifests × 5 resources every 30 s for `DEPLOYSTER_BENCH_STEADY_MINUTES` (default 10):
//!   the Pods created (the runners) against the state reads (a Pod each without runners).

// `pods` reaches `docker` as `super::docker`, as in the tests' `support`.
#[path = "../tests/support/docker.rs"]
mod docker;
#[path = "../tests/support/pods.rs"]
mod pods;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deployster::engine::executor::{Executor, Invocation, InvocationLabels};
use deployster::engine::typeref::{ImageRef, TypeRef};
use deployster::pod::executor::{PodRuntime, PodScope, PodSettings};

const RUNS: usize = 30;
const PARALLEL: usize = 20;
const SLOW_RUNS: usize = 10;
const SLOW_MS: u64 = 2000;

fn main() {
    let Some(env) = pods::env() else {
        eprintln!("no cluster (DEPLOYSTER_E2E_CLUSTER): nothing to measure");
        return;
    };
    let namespace = format!("bench-pods-{}", std::process::id());
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl").args(["--kubeconfig", &env.kubeconfig]).args(args).output().expect("kubectl");
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    kubectl(&["create", "namespace", &namespace]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        deployster::client::install_crypto();
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&env.kubeconfig).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("kubeconfig");
        let client = kube::Client::try_from(config).expect("client");
        let runtime = PodRuntime::new(client.clone(), PodSettings::new(&env.helper));
        let executor = Arc::new(runtime.for_pass(PodScope::new(&namespace)));
        let image = TypeRef::Image(ImageRef::parse(&env.fixture).expect("reference"));
        let taking = |n: usize, sleep_ms: u64| Invocation {
            args: vec!["state".into()],
            stdin: format!(
                r#"{{"name":"r{n}","type":"fixture","version":"0","verbose":false,"workspace":"/","config":{{"sleep_ms":{sleep_ms},"respond":{{"status":"VALID","state":{{}}}}}},"dependencies":{{}},"plugs":{{}}}}"#
            )
            .into_bytes(),
            labels: InvocationLabels {
                resource: format!("r{n}"),
                phase: "state".into(),
                run_id: "bench".into(),
                ..InvocationLabels::default()
            },
            ..Invocation::new(image.clone(), Duration::from_secs(120))
        };
        let invocation = |n: usize| taking(n, 0);
        // The pass's first invocation resolves the image's tag; not counted.
        executor.invoke(invocation(0)).await.expect("warm-up");
        let cpu_before = cpu_time();
        let mut times = Vec::new();
        for n in 0..RUNS {
            let started = Instant::now();
            let outcome = executor.invoke(invocation(n)).await.expect("invocation");
            assert!(outcome.exit.success(), "{outcome:?}");
            times.push(started.elapsed());
        }
        let cpu = cpu_time() - cpu_before;
        times.sort();
        let median = times[RUNS / 2];
        let p95 = times[(RUNS * 95).div_ceil(100) - 1];
        println!(
            "pod invocation, create to verified result: median {} p95 {} (targets 1500 ms, 3000 ms), min {} max {}",
            ms(median),
            ms(p95),
            ms(times[0]),
            ms(times[RUNS - 1])
        );
        println!("controller CPU per invocation: {} (user + system of this process)", ms(cpu / RUNS as u32));
        // A program that runs past the kubelet's relist: its end is told by its record in the
        // log, not by the Pod's status (a relist later) or the followed log's end (a second on).
        let mut slow = Vec::new();
        for n in 0..SLOW_RUNS {
            let started = Instant::now();
            let outcome = executor.invoke(taking(200 + n, SLOW_MS)).await.expect("invocation");
            assert!(outcome.exit.success(), "{outcome:?}");
            slow.push(started.elapsed());
        }
        slow.sort();
        println!(
            "pod invocation whose program takes {SLOW_MS} ms: median {} min {} max {} (the program's own time included)",
            ms(slow[SLOW_RUNS / 2]),
            ms(slow[0]),
            ms(slow[SLOW_RUNS - 1])
        );
        // A bare Pod's time is mostly the kubelet's: it sees a container end at its next relist
        // (once a second), so one Pod alone says little; as many as ours, one after another.
        let mut bare = Vec::new();
        for n in 0..RUNS {
            bare.push(bare_pods(&client, &namespace, &format!("one-{n}"), 1, Shape::Bare).await);
        }
        bare.sort();
        let bare_one = bare[RUNS / 2];
        let bare_many = bare_pods(&client, &namespace, "many", PARALLEL, Shape::Bare).await;
        println!(
            "bare one-shot Pods (busybox, one container) on this cluster: one at a time median {} p95 {} min {} max {}; \
             {PARALLEL} at once {} = {:.2}x the median",
            ms(bare_one),
            ms(bare[(RUNS * 95).div_ceil(100) - 1]),
            ms(bare[0]),
            ms(bare[RUNS - 1]),
            ms(bare_many),
            bare_many.as_secs_f64() / bare_one.as_secs_f64()
        );
        println!("ours against a bare Pod, one at a time: {:.2}x the median", median.as_secs_f64() / bare_one.as_secs_f64());
        // What a Pod of ours has that a bare one does not: the helper's container before the
        // type's, held by a postStart hook; and the init container it replaced.
        for (shape, what) in [
            (Shape::Hooked, "with a first container whose postStart hook holds the second (as ours)"),
            (Shape::Init, "with one init container (as ours were)"),
        ] {
            let one = bare_pods(&client, &namespace, &format!("{shape:?}-one").to_lowercase(), 1, shape).await;
            let many =
                bare_pods(&client, &namespace, &format!("{shape:?}-many").to_lowercase(), PARALLEL, shape).await;
            println!("bare one-shot Pods {what}: one {}, {PARALLEL} at once {}", ms(one), ms(many));
        }
        let started = Instant::now();
        let all = futures::future::join_all((0..PARALLEL).map(|n| executor.invoke(invocation(100 + n)))).await;
        let parallel = started.elapsed();
        assert!(all.iter().all(|o| o.as_ref().is_ok_and(|o| o.exit.success())), "{all:?}");
        println!(
            "{PARALLEL} independent invocations at once: {} = {:.2}x one; {:.2}x as long as {PARALLEL} bare Pods (target 1.3x)",
            ms(parallel),
            parallel.as_secs_f64() / median.as_secs_f64(),
            parallel.as_secs_f64() / bare_many.as_secs_f64()
        );

        // The same in warm runners (issue 37): one runner Pod serves every invocation of the
        // type in the scope, through `pods/exec`.
        let mut settings = PodSettings::new(&env.helper);
        settings.runner_idle = Some(Duration::from_secs(600));
        let warm = PodRuntime::new(client.clone(), settings);
        let runner = Arc::new(warm.for_pass(PodScope::new(&namespace)));
        let started = Instant::now();
        runner.invoke(invocation(0)).await.expect("the runner's first invocation");
        println!("runner: first invocation, the runner's start included: {}", ms(started.elapsed()));
        let cpu_before = cpu_time();
        let mut warm_times = Vec::new();
        for n in 0..RUNS {
            let started = Instant::now();
            let outcome = runner.invoke(invocation(n)).await.expect("invocation");
            assert!(outcome.exit.success(), "{outcome:?}");
            warm_times.push(started.elapsed());
        }
        let warm_cpu = cpu_time() - cpu_before;
        warm_times.sort();
        let (warm_median, warm_p95) = (warm_times[RUNS / 2], warm_times[(RUNS * 95).div_ceil(100) - 1]);
        println!(
            "runner invocation, exec to verified result: median {} p95 {} (targets 150 ms, 400 ms), min {} max {}; \
             {:.1}x faster than a Pod each (median)",
            ms(warm_median),
            ms(warm_p95),
            ms(warm_times[0]),
            ms(warm_times[RUNS - 1]),
            median.as_secs_f64() / warm_median.as_secs_f64()
        );
        println!("controller CPU per runner invocation: {}", ms(warm_cpu / RUNS as u32));
        let started = Instant::now();
        let all = futures::future::join_all((0..PARALLEL).map(|n| runner.invoke(invocation(100 + n)))).await;
        let warm_parallel = started.elapsed();
        assert!(all.iter().all(|o| o.as_ref().is_ok_and(|o| o.exit.success())), "{all:?}");
        println!(
            "{PARALLEL} independent invocations at once in the runner: {} = {:.2}x as long as {PARALLEL} bare Pods \
             (target 1.3x)",
            ms(warm_parallel),
            warm_parallel.as_secs_f64() / bare_many.as_secs_f64()
        );
        steady_drift_checks(&client, &env.helper, &image, &namespace, &kubectl).await;
    });
    kubectl(&["delete", "namespace", &namespace, "--wait=false"]);
}

/// Manifests, resources each and the interval of the steady drift checks.
const MANIFESTS: usize = 10;
const RESOURCES: usize = 5;
const INTERVAL: Duration = Duration::from_secs(30);

/// Steady drift checks in runners: every [`INTERVAL`], a state read of each of [`RESOURCES`]
/// resources of each of [`MANIFESTS`] Manifests (each its own ServiceAccount, so its own
/// runner), for `DEPLOYSTER_BENCH_STEADY_MINUTES` (default 10); the Pods the cluster scheduled
/// meanwhile, against the invocations (each of which is a Pod without runners).
async fn steady_drift_checks(
    client: &kube::Client,
    helper: &str,
    image: &TypeRef,
    namespace: &str,
    kubectl: &dyn Fn(&[&str]),
) {
    use k8s_openapi::api::core::v1::Event;
    let minutes: u64 = std::env::var("DEPLOYSTER_BENCH_STEADY_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(10);
    let mut settings = PodSettings::new(helper);
    settings.runner_idle = Some(Duration::from_secs(600));
    let runtime = PodRuntime::new(client.clone(), settings);
    let executors: Vec<_> = (0..MANIFESTS)
        .map(|m| {
            let account = format!("manifest-{m}");
            kubectl(&["-n", namespace, "create", "serviceaccount", &account]);
            let mut scope = PodScope::new(namespace);
            scope.service_account = Some(account);
            Arc::new(runtime.for_pass(scope))
        })
        .collect();
    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), namespace);
    let scheduled = || async {
        let list = events.list(&kube::api::ListParams::default().fields("reason=Scheduled")).await.expect("events");
        list.items.len()
    };
    let before = scheduled().await;
    let started = Instant::now();
    let (mut invocations, mut rounds, mut slowest) = (0usize, 0usize, Duration::ZERO);
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        let round = Instant::now();
        let reads = executors.iter().enumerate().flat_map(|(m, executor)| {
            (0..RESOURCES).map(move |r| {
                let executor = executor.clone();
                let invocation = Invocation {
                    args: vec!["state".into()],
                    stdin: format!(
                        r#"{{"name":"r{r}","type":"fixture","version":"0","verbose":false,"workspace":"/","config":{{"respond":{{"status":"VALID","state":{{}}}}}},"dependencies":{{}},"plugs":{{}}}}"#
                    )
                    .into_bytes(),
                    labels: InvocationLabels {
                        manifest: format!("m{m}"),
                        resource: format!("r{r}"),
                        phase: "state".into(),
                        run_id: format!("steady-{m}"),
                        ..InvocationLabels::default()
                    },
                    ..Invocation::new(image.clone(), Duration::from_secs(120))
                };
                async move { executor.invoke(invocation).await }
            })
        });
        let all = futures::future::join_all(reads).await;
        assert!(all.iter().all(|o| o.as_ref().is_ok_and(|o| o.exit.success())), "{all:?}");
        invocations += all.len();
        rounds += 1;
        slowest = slowest.max(round.elapsed());
        tokio::time::sleep(INTERVAL.saturating_sub(round.elapsed())).await;
    }
    let pods = scheduled().await - before;
    println!(
        "steady drift checks for {minutes} min ({MANIFESTS} Manifests x {RESOURCES} resources every {}s, {rounds} \
         rounds, slowest round {}): {invocations} state reads, {pods} Pods created (the runners) — a Pod each \
         would have been {invocations}",
        INTERVAL.as_secs(),
        ms(slowest)
    );
    runtime.reap_runners().await;
}

/// What a bare Pod is made of.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// One container.
    Bare,
    /// An init container, then one container.
    Init,
    /// Two containers, the first with a `postStart` hook (the kubelet starts the second after it).
    Hooked,
}

/// How long `n` bare one-shot Pods created at once take to end: what the cluster itself costs.
async fn bare_pods(client: &kube::Client, namespace: &str, tag: &str, n: usize, shape: Shape) -> Duration {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{ListParams, PostParams};
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    for i in 0..n {
        let container = |name: &str| {
            serde_json::json!({"name": name, "image": "busybox:latest", "imagePullPolicy": "Never",
                "command": ["sh", "-c", "echo hi"]})
        };
        let mut pod = serde_json::json!({
            "metadata": {"name": format!("bare-{tag}-{i}"), "labels": {"bench": tag}},
            "spec": {"restartPolicy": "Never", "containers": [container("main")]}
        });
        match shape {
            Shape::Bare => {}
            Shape::Init => pod["spec"]["initContainers"] = serde_json::json!([container("init")]),
            Shape::Hooked => {
                let mut first = container("first");
                first["lifecycle"] = serde_json::json!({"postStart": {"exec": {"command": ["true"]}}});
                pod["spec"]["containers"] = serde_json::json!([first, container("main")]);
            }
        }
        let pod: Pod = serde_json::from_value(pod).expect("pod");
        pods.create(&PostParams::default(), &pod).await.expect("create a bare Pod");
    }
    loop {
        let list = pods.list(&ListParams::default().labels(&format!("bench={tag}"))).await.expect("list");
        let done = list
            .items
            .iter()
            .filter(|p| matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            .count();
        if done == n {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// User and system CPU time of this process so far.
fn cpu_time() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(usage.user_time()) + tv(usage.system_time())
}
