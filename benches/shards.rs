//! Sharding benchmark (issue 38) on a real API server; prints figures, asserts nothing.
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig of ../shared/apiserver/up.sh> cargo bench --bench shards`
//!
//! 2,000 Manifests (`DEPLOYSTER_BENCH_OBJECTS`) of one built-in resource each (a directory on
//! this machine), `interval: 1s` (and `maxInterval: 1s`): far more passes are due than the
//! replicas can run, so what each run measures is capacity. For 1, 2 and 3 replicas (local
//! processes, `--leader-elect --shards 30`, the release binary): once the shards are spread and
//! a warm-up passed, passes per minute over a window (`DEPLOYSTER_BENCH_WINDOW_SECS`, default
//! 60), the sum of every replica's `deployster_reconciles_total`; and where the CPU went in that
//! window: the replicas, the API server, etcd. This machine has 2 cores for all of them, so
//! this is done twice: with the replicas as they are (the machine is the limit), and with each
//! in a cgroup of its own limited to `DEPLOYSTER_BENCH_REPLICA_MILLICORES` (default 250), as a
//! Pod's CPU limit would on a node of its own — the case sharding is for.
//!
//! Then, at `interval: 30s` (room to spare), kill -9 of one replica of three: how long until
//! every Manifest it reconciled has been reconciled by another (its `status.shard.replica`).
//! (That no Manifest is reconciled by two at once is checked by `tests/apiserver/e2e_shards.rs`.)

#[allow(dead_code)] // the tests' helpers: this bench uses a few
#[path = "../tests/support/cluster.rs"]
mod cluster;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster::{Cluster, ControllerProcess, wait_for};

const SHARDS: &str = "30";

fn deployster() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_deployster"))
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    if std::env::var("DEPLOYSTER_E2E_KUBECONFIG").is_err() {
        eprintln!("no API server (DEPLOYSTER_E2E_KUBECONFIG): nothing to measure");
        return;
    }
    let objects = env_number("DEPLOYSTER_BENCH_OBJECTS", 2000) as usize;
    let window = Duration::from_secs(env_number("DEPLOYSTER_BENCH_WINDOW_SECS", 60));
    let cap = env_number("DEPLOYSTER_BENCH_REPLICA_MILLICORES", 250) as f64 / 1000.0;
    let cluster = Cluster::new("bench-shards");
    let work = tempfile::tempdir().unwrap();
    let files = work.path().join("files");
    let created = Instant::now();
    apply_manifests(&cluster, &files, objects, "1s");
    eprintln!("{objects} Manifests created in {:?}", created.elapsed());

    for (round, limit) in [("as they are", None), ("each limited as by a Pod's CPU limit", Some(cap))] {
        let mut rates = Vec::new();
        for count in 1..=3 {
            let tag = format!("{}{count}", if limit.is_some() { "capped" } else { "free" });
            let Some(replicas) = start(&cluster, work.path(), &tag, count, objects, limit) else { break };
            let (passes, seconds, cpu) = measure(&replicas, window);
            let per_minute = passes / seconds * 60.0;
            rates.push(per_minute);
            let limit = limit.map_or(String::new(), |cores| format!(", {:.0} millicores each", cores * 1000.0));
            println!(
                "{round}: {count} replica(s){limit}: {per_minute:.0} passes/min ({:.2}x one replica's) over {seconds:.0} s; \
                 CPU used in the window: replicas {:.0}%, kube-apiserver {:.0}%, etcd {:.0}% (of 200%)",
                per_minute / rates[0],
                cpu[0] * 100.0,
                cpu[1] * 100.0,
                cpu[2] * 100.0
            );
            stop(replicas, &tag);
        }
    }

    // Failover, with room to spare: an interval of 30 s asks for a fraction of what the
    // replicas can run, as in a cluster that is not overloaded.
    apply_manifests(&cluster, &files, objects, "30s");
    let replicas = start(&cluster, work.path(), "failover", 3, objects, None).expect("replicas without limits start");
    kill_one_of_three(&cluster, replicas);
}

/// `objects` Manifests of one built-in directory each, in batches of 200 per `kubectl apply`.
fn apply_manifests(cluster: &Cluster, files: &std::path::Path, objects: usize, interval: &str) {
    for batch in (0..objects).collect::<Vec<_>>().chunks(200) {
        let documents: Vec<String> = batch
            .iter()
            .map(|i| {
                format!(
                    "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: m-{i}}}\nspec:\n  interval: {interval}\n  maxInterval: {interval}\n  \
                     resources:\n    dir:\n      type: builtin/directory\n      config: {{path: \"{}/m-{i}\"}}\n",
                    files.display()
                )
            })
            .collect();
        cluster.apply_yaml(&documents.join("---\n"));
    }
}

fn replica(cluster: &Cluster, dir: &std::path::Path, name: &str) -> ControllerProcess {
    let args = [
        "--namespace",
        &cluster.namespace,
        "--leader-elect",
        "--lease-namespace",
        &cluster.namespace,
        "--lease-duration",
        "10s",
        "--shards",
        SHARDS,
        "--concurrency",
        "16",
    ];
    ControllerProcess::start(cluster, dir, name, &args)
}

/// `count` replicas, each limited to `limit` cores if given, once they hold every shard and
/// every Manifest; `None` when they cannot be limited here (it says why).
fn start(
    cluster: &Cluster,
    dir: &std::path::Path,
    tag: &str,
    count: usize,
    objects: usize,
    limit: Option<f64>,
) -> Option<Vec<ControllerProcess>> {
    let replicas: Vec<ControllerProcess> = (0..count).map(|i| replica(cluster, dir, &format!("{tag}-{i}"))).collect();
    if let Some(cores) = limit {
        for (i, replica) in replicas.iter().enumerate() {
            if let Err(why) = limit_cpu(replica.child.id(), &format!("{tag}-{i}"), cores) {
                eprintln!("cannot limit the replicas' CPU here ({why}): the limited round is not run");
                stop(replicas, tag);
                return None;
            }
        }
    }
    let shards: f64 = SHARDS.parse().unwrap();
    wait_for("the shards spread over the replicas", Duration::from_secs(120), || {
        let held: Vec<f64> = replicas.iter().map(|r| sum_of(r, "deployster_shard_owned{")).collect();
        held.iter().sum::<f64>() == shards && held.iter().all(|h| *h >= (shards / count as f64).floor())
    });
    wait_for("every Manifest owned", Duration::from_secs(120), || {
        replicas.iter().map(|r| sum_of(r, "deployster_manifests_owned{")).sum::<f64>() == objects as f64
    });
    // A warm-up: the first passes of each (finalizers, first statuses) are not what is measured.
    std::thread::sleep(Duration::from_secs(20));
    Some(replicas)
}

/// Puts process `pid` into a cgroup of its own (`name`) limited to `cores` of CPU, as a Pod's
/// CPU limit does: cgroup v1's `cpu` controller, or v2.
fn limit_cpu(pid: u32, name: &str, cores: f64) -> Result<(), String> {
    let quota = (cores * 100_000.0) as u64;
    let write =
        |path: PathBuf, value: String| std::fs::write(&path, value).map_err(|e| format!("{}: {e}", path.display()));
    let v1 = std::path::Path::new("/sys/fs/cgroup/cpu");
    let (dir, settings) = if v1.join("cpu.cfs_quota_us").exists() {
        let dir = v1.join(format!("deployster-bench-{name}"));
        let settings =
            vec![(dir.join("cpu.cfs_period_us"), "100000".into()), (dir.join("cpu.cfs_quota_us"), quota.to_string())];
        (dir, settings)
    } else {
        let dir = std::path::Path::new("/sys/fs/cgroup").join(format!("deployster-bench-{name}"));
        let settings = vec![(dir.join("cpu.max"), format!("{quota} 100000"))];
        (dir, settings)
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (path, value) in settings {
        write(path, value)?;
    }
    write(dir.join("cgroup.procs"), pid.to_string())
}

/// Removes the cgroups [`limit_cpu`] made for the replicas tagged `tag` (once they are gone).
fn remove_limits(tag: &str) {
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"] {
        for i in 0..3 {
            let _ = std::fs::remove_dir(std::path::Path::new(root).join(format!("deployster-bench-{tag}-{i}")));
        }
    }
}

/// The sum of the samples whose line starts with `prefix`.
fn sum_of(controller: &ControllerProcess, prefix: &str) -> f64 {
    let Some((_, body)) = controller.http("/metrics") else { return 0.0 };
    body.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

fn passes(replicas: &[ControllerProcess]) -> f64 {
    replicas.iter().map(|r| sum_of(r, "deployster_reconciles_total{")).sum()
}

/// Passes over `window`, its seconds, and the CPU used in it (cores) by the replicas, the API
/// server and etcd.
fn measure(replicas: &[ControllerProcess], window: Duration) -> (f64, f64, [f64; 3]) {
    let pids = |name: &str| -> Vec<u32> {
        let out = std::process::Command::new("pgrep").args(["-x", name]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
    };
    let groups = [replicas.iter().map(|r| r.child.id()).collect::<Vec<_>>(), pids("kube-apiserver"), pids("etcd")];
    let cpu = |group: &Vec<u32>| group.iter().map(|pid| cpu_seconds(*pid)).sum::<f64>();
    let (before, cpu_before, started) = (passes(replicas), groups.each_ref().map(cpu), Instant::now());
    std::thread::sleep(window);
    let (after, cpu_after, seconds) = (passes(replicas), groups.each_ref().map(cpu), started.elapsed().as_secs_f64());
    let used = [0, 1, 2].map(|i| (cpu_after[i] - cpu_before[i]) / seconds);
    (after - before, seconds, used)
}

/// User + system CPU seconds of process `pid` (from /proc; 0 when it is gone).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command: state is field 0; utime and stime are fields 11 and 12; 100 ticks/s.
    (ticks(11) + ticks(12)) / 100.0
}

fn stop(replicas: Vec<ControllerProcess>, tag: &str) {
    for mut replica in replicas {
        replica.terminate();
    }
    remove_limits(tag);
}

fn kill_one_of_three(cluster: &Cluster, mut replicas: Vec<ControllerProcess>) {
    let identity = |r: &ControllerProcess| {
        let (_, body) = r.http("/metrics").unwrap_or_default();
        body.lines()
            .find_map(|l| Some(l.strip_prefix("deployster_shard_owned{replica=\"")?.split('"').next()?.to_string()))
            .unwrap_or_default()
    };
    let victim = identity(&replicas[1]);
    let theirs: Vec<String> =
        cluster.reconcilers().into_iter().filter(|(_, (r, _))| *r == victim).map(|(name, _)| name).collect();
    let mut victim_process = replicas.remove(1);
    victim_process.kill();
    let killed = Instant::now();
    // A status naming another replica was written by it after the kill: the victim held the
    // shard until then.
    wait_for("the killed replica's Manifests reconciled by another", Duration::from_secs(300), || {
        let now = cluster.reconcilers();
        theirs.iter().all(|name| now.get(name).is_some_and(|(r, _)| *r != victim))
    });
    println!(
        "kill -9 of one replica of three (lease 10 s, interval 30 s): its {} Manifests all reconciled by another {:.1} s later",
        theirs.len(),
        killed.elapsed().as_secs_f64()
    );
    stop(replicas, "failover");
}
