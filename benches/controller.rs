//! Controller benchmark; prints figures, asserts nothing. `cargo bench --bench controller`.
//!
//! 1,000 Manifest objects × 5 built-in resources on the in-memory Kubernetes API, all VALID:
//! one full drift-check pass (every object reconciled, concurrency 4). Prints wall time, the
//! controller's own CPU time against its executor processes' CPU time, and resident memory.
//! Targets: ≤ 50 MiB RSS excluding executor processes; a pass bounded by executor time, not
//! controller overhead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deployster::controller::reconcile::{Next, reconcile};
use deployster::controller::{Context, Settings};
use deployster::crd::{Manifest, ManifestSpec};
use deployster::engine::executor::process::ProcessExecutor;
use deployster::engine::executor::{Dispatch, Executor};
use futures::StreamExt;
use kube::Api;
use kube_fake_client::ClientBuilder;
use nix::sys::resource::{UsageWho, getrusage};

const OBJECTS: usize = 1_000;
const CONCURRENCY: usize = 4;

fn spec(dir: &std::path::Path, i: usize) -> ManifestSpec {
    let yaml = format!(
        r#"
resources:
  dir: {{ type: builtin/directory, config: {{ path: "{base}/m{i}" }} }}
  a: {{ type: builtin/file, dependencies: {{ d: dir }}, config: {{ path: "{{{{ d.state.path }}}}/a", content: a }} }}
  b: {{ type: builtin/file, dependencies: {{ d: dir }}, config: {{ path: "{{{{ d.state.path }}}}/b", content: b }} }}
  c: {{ type: builtin/file, dependencies: {{ d: dir }}, config: {{ path: "{{{{ d.state.path }}}}/c", content: c }} }}
  e: {{ type: builtin/file, dependencies: {{ d: dir }}, config: {{ path: "{{{{ d.state.path }}}}/e", content: e }} }}
"#,
        base = dir.display()
    );
    serde_norway::from_str(&yaml).expect("a valid spec")
}

/// A memory figure (`VmRSS:`, `VmHWM:`) of a process (`self` or a pid), in KiB.
fn status_kib(process: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

fn cpu(who: UsageWho) -> Duration {
    let usage = getrusage(who).expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000);
    t(usage.user_time()) + t(usage.system_time())
}

/// One pass over every object. Like the controller's watch cache, it keeps every object it
/// fetched (typed, pruned as the cache prunes) until the pass ends, so that their memory counts
/// as the controller's.
async fn pass(api: &Api<Manifest>, ctx: &Context, names: &[String]) -> (usize, Vec<Arc<Manifest>>) {
    let results: Vec<(bool, Arc<Manifest>)> = futures::stream::iter(names)
        .map(|name| async move {
            let mut obj = api.get(name).await.expect("get");
            deployster::controller::prune_for_cache(&mut obj);
            let obj = Arc::new(obj);
            let next = reconcile(&obj, ctx).await.expect("reconcile");
            (matches!(next, Next::Requeue(d) if d >= Duration::from_secs(240)), obj)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let ready = results.iter().filter(|(ready, _)| *ready).count();
    (ready, results.into_iter().map(|(_, obj)| obj).collect())
}

/// The API server: the in-memory one, seeded with the benchmark's objects, served over HTTP on
/// loopback from its own process — so that the controller's process holds only the controller.
fn serve_api(dir: &str, port_file: &str) {
    use http_body_util::{BodyExt, Full};
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let mut builder = ClientBuilder::new().with_resource::<Manifest>().with_status_subresource::<Manifest>();
        for i in 0..OBJECTS {
            let mut obj = Manifest::new(&format!("m{i}"), spec(std::path::Path::new(dir), i));
            obj.metadata.namespace = Some("default".into());
            obj.metadata.finalizers = Some(vec![deployster::controller::reconcile::FINALIZER.into()]);
            builder = builder.with_object(obj);
        }
        let client = builder.build().await.expect("fake client");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        std::fs::write(port_file, listener.local_addr().expect("address").port().to_string()).expect("port file");
        loop {
            let (stream, _) = listener.accept().await.expect("accept");
            let client = client.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let client = client.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let bytes = body.collect().await?.to_bytes();
                        let request = http::Request::from_parts(parts, kube::client::Body::from(bytes.to_vec()));
                        let response = match client.send(request).await {
                            Ok(response) => {
                                let (parts, body) = response.into_parts();
                                let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                                http::Response::from_parts(parts, Full::new(bytes))
                            }
                            Err(e) => {
                                let mut response = http::Response::new(Full::new(e.to_string().into()));
                                *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                                response
                            }
                        };
                        Ok::<_, hyper::Error>(response)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
}

/// Starts the API server process; returns it and a client connected to it.
async fn start_api(dir: &std::path::Path) -> (std::process::Child, kube::Client) {
    let port_file = dir.join("api.port");
    let child = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .env("DEPLOYSTER_BENCH_SERVE", &port_file)
        .env("DEPLOYSTER_BENCH_DIR", dir)
        .spawn()
        .expect("start the API server");
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(&port_file) {
            break port;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().expect("a URL"));
    (child, deployster::controller::connect(config).expect("client"))
}

fn main() {
    if let (Ok(port_file), Ok(dir)) = (std::env::var("DEPLOYSTER_BENCH_SERVE"), std::env::var("DEPLOYSTER_BENCH_DIR")) {
        return serve_api(&dir, &port_file);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let rss_start = status_kib("self", "VmRSS:");
    runtime.block_on(async {
        let (mut api_server, client) = start_api(dir.path()).await;
        let names: Vec<String> = (0..OBJECTS).map(|i| format!("m{i}")).collect();
        let local = Arc::new(ProcessExecutor::new(env!("CARGO_BIN_EXE_deployster").into()));
        let processes = local.clone();
        let executor: Arc<dyn Executor> = Arc::new(Dispatch { local, images: None, local_programs: false });
        let settings = Settings { plug_root: dir.path().join("plugs"), parallelism: 5, ..Settings::default() };
        let ctx = Context::new(client.clone(), executor, settings);
        let api: Api<Manifest> = Api::namespaced(client, "default");

        let started = Instant::now();
        let (ready, _) = pass(&api, &ctx, &names).await;
        println!("first pass (creates everything): {:.1} s, {ready}/{OBJECTS} Ready", started.elapsed().as_secs_f64());

        let (rss_before, self_before, children_before) = (status_kib("self", "VmRSS:"), cpu(UsageWho::RUSAGE_SELF), cpu(UsageWho::RUSAGE_CHILDREN));
        let started_before = processes.programs_started();
        let started = Instant::now();
        let (ready, store) = pass(&api, &ctx, &names).await;
        let wall = started.elapsed();
        let rss_after = status_kib("self", "VmRSS:");
        let controller_cpu = cpu(UsageWho::RUSAGE_SELF) - self_before;
        let executor_cpu = cpu(UsageWho::RUSAGE_CHILDREN) - children_before;
        let invocations = processes.programs_started() - started_before;
        println!("drift-check pass: {OBJECTS} Manifests × 5 built-in resources, all VALID, concurrency {CONCURRENCY}");
        println!("  objects Ready after the pass          {ready}/{OBJECTS}");
        println!("  wall time                             {:.2} s ({:.1} objects/s)", wall.as_secs_f64(), OBJECTS as f64 / wall.as_secs_f64());
        println!("  programs started                      {invocations} (state per resource; init answers are cached)");
        println!("  executor processes' CPU               {:.2} s", executor_cpu.as_secs_f64());
        println!("  controller's own CPU                  {:.2} s ({:.0}% of the executors')", controller_cpu.as_secs_f64(),
            100.0 * controller_cpu.as_secs_f64() / executor_cpu.as_secs_f64().max(f64::EPSILON));
        println!("  controller CPU per object             {:.2} ms", controller_cpu.as_secs_f64() * 1000.0 / OBJECTS as f64);
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!("  controller RSS at start / before / after the pass / peak  {:.1} / {:.1} / {:.1} / {:.1} MiB   (target ≤ 50 MiB)",
            mib(rss_start), mib(rss_before), mib(rss_after), mib(status_kib("self", "VmHWM:")));
        let bytes: usize = store.iter().map(|obj| serde_json::to_vec(obj.as_ref()).map_or(0, |v| v.len())).sum();
        println!("  objects as JSON                       {:.1} MiB ({:.1} KiB each)", bytes as f64 / 1048576.0, bytes as f64 / 1024.0 / store.len() as f64);
        println!("  (the controller's process holds its {} objects, as its watch cache would; the API server runs in", store.len());
        println!("   its own process — {:.1} MiB — and executors are child processes, counted in neither)", mib(status_kib(&api_server.id().to_string(), "VmRSS:")));
        let _ = api_server.kill();
        let _ = api_server.wait();
    });
}
