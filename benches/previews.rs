//! ManifestPreviews on a real API server and on a cluster whose Pods run; prints figures.
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig of ../shared/apiserver/up.sh> \
//!  DEPLOYSTER_E2E_CLUSTER=<kubeconfig of ../shared/cluster/up.sh> cargo bench --bench previews`
//! (either or both: each measures its own part).
//!
//! On the API server: a controller (this build's binary) watches a fresh namespace holding the
//! Manifest `app` of 4 ConfigMaps (`builtin/kubernetes`) and `steady` of 10. Figures: how long
//! `deployster preview` takes to answer for a proposal changing one of `app`'s (median of 5, one
//! at a time; target ≤ 5 s), how long 20 previews asked at once take, and how long the controller
//! takes to correct a drifted ConfigMap of `steady` alone and while those 20 previews are planned
//! (median of 5 each; target: at most 1.5× slower).
//!
//! On the cluster: the same `app` with 2 image types beside its 4 ConfigMaps (the test fixture,
//! run in runners by `--executor pod`, writing to a claim): how long a preview takes to answer
//! once the Manifest is applied (median of 5; target ≤ 5 s). A preview's Pods are its own (so
//! that neither it nor the Manifest sweeps the other's): its runners start for it, cold.

// `pods` reaches `docker` as `super::docker`, as in the tests' `support`.
#[path = "../tests/support/docker.rs"]
mod docker;
#[path = "../tests/support/pods.rs"]
mod pods;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn kubectl(kubeconfig: &str, args: &[&str]) -> String {
    let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Manifest `name` of `count` ConfigMaps `<name>-<i>`, the first with data `a: <value>`, and
/// `more` (spec lines, then resources).
fn manifest_with(name: &str, count: usize, value: &str, more: (&str, &str)) -> String {
    let (spec, resources) = more;
    let mut yaml = format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 1h\n  \
         serviceAccountName: deployer\n{spec}  resources:\n{resources}"
    );
    for i in 0..count {
        let data = if i == 0 { value } else { "b" };
        yaml.push_str(&format!(
            "    c{i}:\n      type: builtin/kubernetes\n      config: {{object: {{apiVersion: v1, kind: ConfigMap, \
             metadata: {{name: {name}-{i}}}, data: {{a: {data}}}}}}}\n"
        ));
    }
    yaml
}

fn manifest(name: &str, count: usize, value: &str) -> String {
    manifest_with(name, count, value, ("", ""))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `deployster preview app -f file`, started.
fn preview(kubeconfig: &str, namespace: &str, file: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args(["preview", "app", "-n", namespace, "-f", file.to_str().unwrap(), "--timeout", "120s"])
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("deployster")
}

fn waited(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "changes pending: {}", String::from_utf8_lossy(&out.stderr));
}

/// How long `deployster preview` of `proposed` takes to answer: the median of 5, one at a time.
fn one_at_a_time(kubeconfig: &str, namespace: &str, proposed: &Path) -> Duration {
    median(
        (0..5)
            .map(|_| {
                let started = Instant::now();
                waited(preview(kubeconfig, namespace, proposed));
                started.elapsed()
            })
            .collect(),
    )
}

/// How long the controller takes to put back ConfigMap `steady-<n>`, edited behind its back
/// (each once: one edited again and again is corrected after a growing wait, on purpose).
fn correction(kubeconfig: &str, namespace: &str, n: usize) -> Duration {
    let started = Instant::now();
    let name = format!("steady-{n}");
    let patch = r#"{"data":{"a":"x"}}"#;
    kubectl(kubeconfig, &["-n", namespace, "patch", "configmap", &name, "--type", "merge", "-p", patch]);
    loop {
        let a = kubectl(kubeconfig, &["-n", namespace, "get", "configmap", &name, "-o", "jsonpath={.data.a}"]);
        if a == "b" {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{name} not corrected");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A fresh namespace with the ServiceAccount `deployer` (ConfigMaps, and `rights` more), the
/// controller (this build's binary, with `args`) watching it, and the Manifests of `yaml`
/// applied until `configmaps` ConfigMaps exist. Deleted, controller and namespace, when dropped.
struct Scene {
    kubeconfig: String,
    namespace: String,
    dir: tempfile::TempDir,
    controller: Child,
}

impl Scene {
    fn start(kubeconfig: &str, label: &str, args: &[&str], setup: &str, yaml: &str, configmaps: usize) -> Scene {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        for crd in ["manifest", "pipeline", "preview"] {
            kubectl(kubeconfig, &["apply", "-f", root.join(format!("crds/{crd}.yaml")).to_str().unwrap()]);
        }
        let namespace = format!("bench-previews-{label}-{}", std::process::id());
        kubectl(kubeconfig, &["create", "namespace", &namespace]);
        let account = format!("{namespace}:deployer");
        for args in [
            &["create", "serviceaccount", "deployer"][..],
            &["create", "role", "deployer", "--verb", "get,list,watch,create,patch,delete", "--resource", "configmaps"],
            &["create", "rolebinding", "deployer", "--role", "deployer", "--serviceaccount", &account],
        ] {
            kubectl(kubeconfig, &[&["-n", namespace.as_str()], args].concat());
        }
        let dir = tempfile::tempdir().unwrap();
        if !setup.is_empty() {
            let file = dir.path().join("setup.yaml");
            std::fs::write(&file, setup).unwrap();
            kubectl(kubeconfig, &["-n", &namespace, "apply", "-f", file.to_str().unwrap()]);
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let controller = Command::new(env!("CARGO_BIN_EXE_deployster"))
            .args(["controller", "--namespace", &namespace, "--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--plug-dir", dir.path().join("plugs").to_str().unwrap()])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
            .spawn()
            .expect("the controller");
        let scene = Scene { kubeconfig: kubeconfig.into(), namespace, dir, controller };
        let applied = scene.file("app.yaml", yaml);
        kubectl(kubeconfig, &["-n", &scene.namespace, "apply", "-f", applied.to_str().unwrap()]);
        let started = Instant::now();
        while kubectl(kubeconfig, &["-n", &scene.namespace, "get", "configmap", "-o", "name"])
            .lines()
            .filter(|l| !l.ends_with("/kube-root-ca.crt"))
            .count()
            < configmaps
        {
            let log = std::fs::read_to_string(scene.dir.path().join("controller.log")).unwrap_or_default();
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "the Manifest was not applied; the controller said:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        scene
    }

    /// A file of the scene's directory holding `text`.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = self.controller.kill();
        let _ = self.controller.wait();
        kubectl(&self.kubeconfig, &["delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

/// On the API server alone: one preview, 20 at once, and the drift correction beside them.
fn on_api_server(kubeconfig: &str) {
    let yaml = manifest("app", 4, "b") + "---\n" + &manifest("steady", 10, "b");
    let scene = Scene::start(kubeconfig, "api", &[], "", &yaml, 14);
    let namespace = scene.namespace.as_str();
    let proposed = scene.file("proposed.yaml", &manifest("app", 4, "z"));
    let one = one_at_a_time(kubeconfig, namespace, &proposed);
    println!("one preview answered in {:.2} s (median of 5; target ≤ 5 s)", one.as_secs_f64());

    // Its watches are up once its first pass is recorded: give it that.
    std::thread::sleep(Duration::from_secs(2));
    let alone: Vec<Duration> = (0..5).map(|n| correction(kubeconfig, namespace, n)).collect();
    let alone = median(alone);
    let started = Instant::now();
    let many: Vec<Child> = (0..20).map(|_| preview(kubeconfig, namespace, &proposed)).collect();
    let busy: Vec<Duration> = (5..10).map(|n| correction(kubeconfig, namespace, n)).collect();
    many.into_iter().for_each(waited);
    let all = started.elapsed();
    let busy = median(busy);
    println!("20 previews at once all answered in {:.2} s", all.as_secs_f64());
    println!(
        "a drift correction of the Manifest: {:.0} ms alone, {:.0} ms while 20 previews are planned: {:.2}× (target ≤ 1.5×)",
        alone.as_secs_f64() * 1000.0,
        busy.as_secs_f64() * 1000.0,
        busy.as_secs_f64() / alone.as_secs_f64()
    );
}

/// On the cluster whose Pods run: 4 ConfigMaps and 2 image types in warm runners.
fn on_cluster(env: &pods::PodEnv) {
    let kubeconfig = env.kubeconfig.as_str();
    // What the fixture's `plugs` profile asks for: a claim (on a host directory: the cluster
    // has no provisioner) and a Secret.
    let data = tempfile::tempdir().unwrap();
    std::fs::set_permissions(data.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let volume = format!("bench-previews-{}", std::process::id());
    let setup = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {volume}}}\nspec: {{capacity: {{storage: 1Gi}}, \
         accessModes: [ReadWriteOnce], storageClassName: manual, hostPath: {{path: {}}}}}\n---\n\
         apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data}}\nspec: {{accessModes: [ReadWriteOnce], \
         storageClassName: manual, volumeName: {volume}, resources: {{requests: {{storage: 1Gi}}}}}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: creds}}\nstringData: {{token: s3cret}}\n",
        data.path().display()
    );
    let plugs =
        "  plugs:\n    rw: {persistentVolumeClaim: {claimName: data}}\n    ro: {secret: {name: creds, key: token}}\n";
    let images = format!(
        "    first: {{type: {0}, config: {{marker: /rw/first.marker, content: hello}}}}\n    \
         second: {{type: {0}, config: {{marker: /rw/second.marker, content: \"{{{{ resources.first.state.content }}}}-2\"}}}}\n",
        env.fixture_plugs
    );
    let args = ["--executor", "pod", "--helper-image", env.helper.as_str()];
    let scene = Scene::start(kubeconfig, "pods", &args, &setup, &manifest_with("app", 4, "b", (plugs, &images)), 4);
    let started = Instant::now();
    while !data.path().join("second.marker").exists() {
        assert!(started.elapsed() < Duration::from_secs(180), "the image types were not applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    let proposed = scene.file("proposed.yaml", &manifest_with("app", 4, "z", (plugs, &images)));
    let one = one_at_a_time(kubeconfig, &scene.namespace, &proposed);
    println!(
        "one preview of 4 ConfigMaps and 2 image types answered in {:.2} s (median of 5; target ≤ 5 s; its image types \
         read in runners of its own, started for it: the Manifest's warm runners are not shared with previews)",
        one.as_secs_f64()
    );
    drop(scene);
    kubectl(kubeconfig, &["delete", "persistentvolume", &volume, "--wait=false"]);
}

fn main() {
    let api_server = std::env::var("DEPLOYSTER_E2E_KUBECONFIG").ok();
    let cluster = pods::env();
    if api_server.is_none() && cluster.is_none() {
        eprintln!("no API server (DEPLOYSTER_E2E_KUBECONFIG) nor cluster (DEPLOYSTER_E2E_CLUSTER): nothing to measure");
    }
    if let Some(kubeconfig) = api_server {
        on_api_server(&kubeconfig);
    }
    if let Some(env) = cluster {
        on_cluster(env);
    }
}
