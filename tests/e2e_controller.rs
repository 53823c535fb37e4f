//! End to end against a real API server: runs when `DEPLOYSTER_E2E_KUBECONFIG` names a
//! kubeconfig (kind, k3d, …), and skips with a printed reason otherwise. See the README.
//!
//! Applies the CRD from `crds/`, starts `deployster controller` (built-in types, acting on this
//! machine's filesystem) for a fresh namespace, applies `examples/k8s/manifest.yaml`, waits for
//! Ready, causes drift and waits for its correction and event, then deletes the Manifest and
//! waits for its resources to be deleted and the object to go.
#![cfg(feature = "kube")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Cluster {
    kubeconfig: String,
    namespace: String,
}

impl Cluster {
    fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let output = Command::new("kubectl")
            .args(["--kubeconfig", &self.kubeconfig])
            .args(args)
            .output()
            .expect("kubectl is installed");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), text)
    }

    fn must(&self, args: &[&str]) -> String {
        let (ok, text) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed:\n{text}");
        text
    }

    fn ns<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        [&["-n", self.namespace.as_str()], args].concat()
    }
}

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_manifest_is_applied_kept_and_deleted_by_the_controller() {
    let Ok(kubeconfig) = std::env::var("DEPLOYSTER_E2E_KUBECONFIG") else {
        eprintln!("skipping the end-to-end test: set DEPLOYSTER_E2E_KUBECONFIG to a kind or k3d kubeconfig to run it");
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cluster = Cluster { kubeconfig, namespace: format!("deployster-e2e-{}", std::process::id()) };
    let work = tempfile::tempdir().unwrap();
    let base: PathBuf = work.path().join("demo");

    cluster.must(&["apply", "-f", root.join("crds/manifest.yaml").to_str().unwrap()]);
    cluster.must(&["wait", "--for", "condition=established", "--timeout=60s", "crd/manifests.deployster.io"]);
    cluster.must(&["create", "namespace", &cluster.namespace]);

    let log = std::fs::File::create(work.path().join("controller.log")).unwrap();
    let _controller = Controller(
        Command::new(support::deployster())
            .args([
                "controller",
                "--namespace",
                &cluster.namespace,
                "--plug-dir",
                work.path().join("plugs").to_str().unwrap(),
            ])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    // The example, with its files in this test's directory and a short interval.
    let example = std::fs::read_to_string(root.join("examples/k8s/manifest.yaml"))
        .unwrap()
        .replace("/tmp/deployster-k8s-demo", base.to_str().unwrap())
        .replace("interval: 1m", "interval: 3s");
    let file = work.path().join("manifest.yaml");
    std::fs::write(&file, example).unwrap();
    cluster.must(&cluster.ns(&["apply", "-f", file.to_str().unwrap()]));

    let ready = || {
        let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
        cluster.kubectl(&cluster.ns(&["get", "manifest", "demo", "-o", jsonpath])).1.trim() == "True"
    };
    wait_for("the Manifest to be Ready", Duration::from_secs(120), ready);
    let app = base.join("app.json");
    assert!(app.exists());
    let columns = cluster.must(&cluster.ns(&["get", "dm", "demo"]));
    assert!(columns.contains("READY") && columns.contains("2/2"), "{columns}");

    std::fs::remove_file(&app).unwrap();
    wait_for("the drift to be corrected", Duration::from_secs(60), || app.exists());
    wait_for("the DriftCorrected event", Duration::from_secs(30), || {
        cluster.kubectl(&cluster.ns(&["get", "events.events.k8s.io", "-o", "wide"])).1.contains("DriftCorrected")
    });

    cluster.must(&cluster.ns(&["delete", "manifest", "demo", "--wait=false"]));
    wait_for("the Manifest to go", Duration::from_secs(120), || {
        !cluster.kubectl(&cluster.ns(&["get", "manifest", "demo"])).0
    });
    assert!(!base.exists(), "deletionPolicy: Delete removed what the Manifest created");
    cluster.must(&["delete", "namespace", &cluster.namespace, "--wait=false"]);
}
