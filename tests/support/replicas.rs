//! Replicas of `deployster controller` as local processes against one API server, and how to
//! tell that two never worked on one object at once: the fixture type's lock (an action that
//! finds another copy of itself running logs `overlap`) and the runs in `status.history`.

use std::path::Path;

use serde_json::Value;

use super::cluster::{Cluster, ControllerProcess};

/// A slow resource of the fixture type: every pass runs its action (it never becomes VALID),
/// which holds a lock on `lock` while it runs and logs there when it finds another copy running.
pub fn slow_manifest(name: &str, dir: &Path, action_ms: u64) -> String {
    format!(
        r#"apiVersion: deployster.io/v1alpha1
kind: Manifest
metadata: {{name: {name}}}
spec:
  interval: 2s
  retryInterval: 1s
  resources:
    work:
      type: {fixture}
      config:
        lock: {dir}/lock
        marker: {dir}/marker
        action_sleep_ms: {action_ms}
        stays_stale: true
"#,
        fixture = super::fixture().display(),
        dir = dir.display()
    )
}

/// Action runs seen by the lock: (pid, "started" | "finished" | "overlap", ms).
pub fn lock_log(dir: &Path) -> Vec<(u32, String, u128)> {
    let text = std::fs::read_to_string(dir.join("lock.log")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].to_string(), f[2].parse().unwrap())
        })
        .collect()
}

/// How many actions started (took the lock).
pub fn starts(dir: &Path) -> usize {
    lock_log(dir).iter().filter(|(_, what, _)| what == "started").count()
}

/// The parent of process `pid`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()
}

/// The pid of an action running now under `controller` (its child), if any.
pub fn running_action(dir: &Path, controller: &ControllerProcess) -> Option<u32> {
    lock_log(dir).into_iter().rev().find_map(|(pid, what, _)| {
        let under = parent_of(pid) == Some(controller.child.id());
        (what == "started" && under).then_some(pid)
    })
}

pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

/// In `status.history`, no run starts while another is open: two replicas never ran passes on
/// the object at once.
pub fn assert_runs_never_interleave(history: &[Value]) {
    let mut open: Option<String> = None;
    for entry in history.iter().filter(|e| e["target"] == "manifest") {
        let id = entry["id"].as_str().unwrap().to_string();
        match entry["event"].as_str().unwrap() {
            "run-started" => {
                assert!(open.is_none(), "run {id} started while run {open:?} was open: {history:#?}");
                open = Some(id);
            }
            "run-finished-successfully" | "run-failed" | "run-interrupted" if open.as_ref() == Some(&id) => open = None,
            _ => {}
        }
    }
}

pub fn replica(cluster: &Cluster, dir: &Path, name: &str, lease_duration: &str) -> ControllerProcess {
    replica_with(cluster, dir, name, lease_duration, &[])
}

/// A replica under leader election (or, with `--shards` in `extra`, sharding) for the
/// cluster's namespace, its Leases there, running local programs.
pub fn replica_with(
    cluster: &Cluster,
    dir: &Path,
    name: &str,
    lease_duration: &str,
    extra: &[&str],
) -> ControllerProcess {
    replica_env(cluster, dir, name, lease_duration, extra, &[])
}

/// As [`replica_with`], with more environment (`KUBECONFIG`, `LD_PRELOAD`…).
pub fn replica_env(
    cluster: &Cluster,
    dir: &Path,
    name: &str,
    lease_duration: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> ControllerProcess {
    let mut args = vec![
        "--namespace",
        &cluster.namespace,
        "--leader-elect",
        "--lease-namespace",
        &cluster.namespace,
        "--lease-duration",
        lease_duration,
        "--allow-local-programs",
        "--history-limit",
        "1000",
    ];
    args.extend_from_slice(extra);
    ControllerProcess::start_env(cluster, dir, name, &args, env)
}
