//! What the tests of Pods share on the cluster: a claim and a Secret to plug, and the check
//! that nothing of Deployster's was left.

use std::path::Path;
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::pods::{PodEnv, env};
use super::{Run, Workspace};

/// The cluster whose Pods really run, with a fresh namespace named after `test`. A test that
/// needs it is `#[ignore]`d with the command that runs it, and fails (never passes) without it.
pub fn on_cluster(test: &str) -> (&'static PodEnv, Cluster) {
    let env = env().unwrap_or_else(|| {
        panic!("this test needs DEPLOYSTER_E2E_CLUSTER: the kubeconfig ../shared/cluster/up.sh prints")
    });
    (env, Cluster::on(env.kubeconfig.clone(), test))
}

/// A PersistentVolume on a host directory this test reads (the test cluster's node is this
/// machine), bound ahead to claim `claim` of the test's namespace — what an operator without a
/// volume provisioner does (the cluster has none); the directory. `class` is the claim's
/// storage class (`""`: a claim that names none, on a cluster with no default class).
pub fn host_volume(cluster: &Cluster, claim: &str, class: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("deployster-pv-{}-{claim}", cluster.namespace));
    std::fs::create_dir_all(&dir).unwrap();
    // Types run as a non-root user.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let pv = format!("pv-{}-{claim}", cluster.namespace);
    cluster.apply_yaml(&format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  hostPath: {{path: {dir}}}
  storageClassName: "{class}"
  claimRef: {{namespace: {ns}, name: {claim}}}
"#,
        dir = dir.display(),
        ns = cluster.namespace
    ));
    dir
}

/// A PersistentVolumeClaim `data` bound to a host directory this test reads, and a Secret
/// `creds`; the directory.
pub fn claim(cluster: &Cluster) -> std::path::PathBuf {
    let dir = host_volume(cluster, "data", "manual");
    let pv = format!("pv-{}-data", cluster.namespace);
    cluster.apply_yaml(&format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  volumeName: {pv}
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData: {{token: s3cret}}
"#
    ));
    dir
}

/// The plugs of the fixture's `plugs` image: the claim and the Secret of [`claim`].
pub const PLUGS: &str =
    "plugs:\n  rw: {persistentVolumeClaim: {claimName: data}}\n  ro: {secret: {name: creds, key: token}}\n";

/// Pods and Secrets of Deployster's left in the test's namespace.
pub fn left(cluster: &Cluster) -> Vec<String> {
    let (ok, text) = cluster.kubectl(&cluster.ns(&["get", "pods,secrets", "-l", "deployster.io/owner", "-o", "name"]));
    assert!(ok, "{text}");
    text.lines().map(str::to_string).collect()
}

/// Waits (up to 30 s) until the kubelet reports one of Deployster's Pods Running: done starting
/// it. A test that kills a controller mid-action waits for this first, because a 1.20 kubelet
/// that gets a Pod's deletion while it still starts the Pod's containers never stops them (they
/// run to their end; later kubelets reworked that path). The next controller waits for such a
/// Pod to be gone all the same — never two at once — but then nothing was interrupted.
pub fn wait_until_a_pod_runs(cluster: &Cluster) {
    super::cluster::wait_for("the kubelet to report the action's Pod Running", Duration::from_secs(30), || {
        let pods = cluster.get(&["pods", "-l", "deployster.io/owner"]).unwrap_or_default();
        pods["items"].as_array().into_iter().flatten().any(|p| p["status"]["phase"] == "Running")
    });
}

/// Waits (up to 60 s) for what was deleted to be gone: a kubelet removes a deleted Pod's object
/// once it has cleaned the Pod up (a 1.20 kubelet checks on a 10 s batch). A Pod still there
/// then must at least have been deleted (`deletionTimestamp` set): a 1.20 kubelet was seen to
/// keep a deleted runner's object, its containers and sandbox gone, for over a minute — the
/// node's business, not something Deployster left.
pub fn assert_nothing_left(cluster: &Cluster) {
    let until = Instant::now() + Duration::from_secs(60);
    while !left(cluster).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
    }
    let (ok, text) = cluster.kubectl(&cluster.ns(&[
        "get",
        "pods,secrets",
        "-l",
        "deployster.io/owner",
        "-o",
        "jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ]));
    assert!(ok, "{text}");
    // "Kind/name" alone, or followed by when its deletion was asked.
    let (being_deleted, undeleted): (Vec<&str>, Vec<&str>) =
        text.lines().filter(|l| !l.trim().is_empty()).partition(|l| l.split_whitespace().nth(1).is_some());
    if !being_deleted.is_empty() {
        eprintln!("deleted, still removed by the kubelet after 60 s: {being_deleted:?}");
    }
    assert_eq!(undeleted, Vec::<&str>::new(), "Pods or Secrets of Deployster's were left");
}

/// A Manifest named `name` whose `resources` (YAML, indented by four) are image types, with the
/// plugs of [`claim`] and a short interval.
pub fn manifest(name: &str, extra_spec: &str, resources: &str) -> String {
    let plugs: String = PLUGS.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 3s\n\
         {extra_spec}{plugs}  resources:\n{resources}"
    )
}

/// Resources `first` and `second` of image `fixture` (the fixture's `plugs` tag), writing
/// markers `first.marker` ("hello") and `second.marker` (first's state read: "hello-2") to the
/// claim.
pub fn dependent_pair(fixture: &str) -> String {
    format!(
        "    first: {{type: {fixture}, config: {{marker: /rw/first.marker, content: hello}}}}\n    \
         second:\n      type: {fixture}\n      config: {{marker: /rw/second.marker, content: \
         \"{{{{ resources.first.state.content }}}}-2\"}}\n"
    )
}

/// Applies, with `run` (deployster in a workspace, its executor's args added), a manifest of
/// `first` and `second` of the fixture's `plugs` image — `first` with an `env`, `second` reading
/// first's state — and checks what they wrote to the claim at `dir`, the program's stderr under
/// `-v` and the env `first` was run with. The workspace, for more runs.
pub fn apply_dependent_pair(env: &PodEnv, dir: &Path, run: impl Fn(&Workspace, &[&str]) -> Run) -> Workspace {
    let ws = Workspace::new();
    ws.manifest(&format!(
        r#"{PLUGS}resources:
  first:
    type: {plugs}
    env: {{GREETING: hi}}
    config: {{marker: /rw/first.marker, content: hello, record: /rw/first.jsonl}}
  second:
    type: {plugs}
    config:
      marker: /rw/second.marker
      content: "{{{{ resources.first.state.content }}}}-2"
"#,
        plugs = env.fixture_plugs
    ));
    let started = Instant::now();
    let applied = run(&ws, &["apply", "-f", "manifest.yaml", "--yes", "-v"]);
    assert_eq!(applied.code, 0, "{}", applied.all());
    eprintln!("apply of two resources took {:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(dir.join("first.marker")).unwrap(), "hello");
    assert_eq!(std::fs::read_to_string(dir.join("second.marker")).unwrap(), "hello-2", "a dependency's state read");
    assert!(applied.all().contains("create: a note on stderr"), "the program's stderr reaches -v:\n{}", applied.all());
    let recorded = std::fs::read_to_string(dir.join("first.jsonl")).unwrap();
    assert!(recorded.lines().count() >= 3, "init, state, action, state of `first`: {recorded}");
    for line in recorded.lines() {
        let names = serde_json::from_str::<serde_json::Value>(line).unwrap()["env_names"].clone();
        assert!(names.as_array().unwrap().contains(&"GREETING".into()), "the resource's env: {recorded}");
    }
    ws
}

/// `first.marker` removed behind Deployster's back (drift), `run`'s apply puts it back.
pub fn drift_put_back(dir: &Path, ws: &Workspace, run: impl Fn(&Workspace, &[&str]) -> Run) {
    std::fs::remove_file(dir.join("first.marker")).unwrap();
    let again = run(ws, &["apply", "-f", "manifest.yaml", "--yes"]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert_eq!(std::fs::read_to_string(dir.join("first.marker")).unwrap(), "hello");
}
