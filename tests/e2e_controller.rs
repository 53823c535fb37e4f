//! End to end against a real API server: runs when `DEPLOYSTER_E2E_KUBECONFIG` names a
//! kubeconfig (`.ci/run` starts `../shared/apiserver/`; kind or k3d work too), and skips with a
//! printed reason otherwise. See the README.
#![cfg(feature = "kube")]

mod support;

use std::path::Path;
use std::time::Duration;

use support::cluster::{Cluster, ControllerProcess, wait_for};

/// Installs the CRD, starts `deployster controller` (built-in types, acting on this machine's
/// filesystem) for a fresh namespace, applies `examples/k8s/manifest.yaml`, waits for Ready,
/// causes drift and waits for its correction and event, then deletes the Manifest and waits for
/// its resources to be deleted and the object to go.
#[test]
fn a_manifest_is_applied_kept_and_deleted_by_the_controller() {
    let Some(cluster) = Cluster::new("lifecycle") else { return };
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("demo");
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);

    // The example, with its files in this test's directory and a short interval.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/k8s/manifest.yaml"))
        .unwrap()
        .replace("/tmp/deployster-k8s-demo", base.to_str().unwrap())
        .replace("interval: 1m", "interval: 3s");
    cluster.apply_yaml(&example);

    wait_for("the Manifest to be Ready", Duration::from_secs(120), || cluster.condition("demo", "Ready") == "True");
    let app = base.join("app.json");
    assert!(app.exists());
    let status = cluster.get(&["manifest", "demo"]).unwrap()["status"].clone();
    assert_eq!(status["resourcesSummary"], "2/2", "{status:#}");

    std::fs::remove_file(&app).unwrap();
    wait_for("the drift to be corrected", Duration::from_secs(60), || app.exists());
    wait_for("the DriftCorrected event", Duration::from_secs(30), || {
        cluster.event_reasons("demo").iter().any(|r| r == "DriftCorrected")
    });

    cluster.must(&cluster.ns(&["delete", "manifest", "demo", "--wait=false"]));
    wait_for("the Manifest to go", Duration::from_secs(120), || cluster.get(&["manifest", "demo"]).is_none());
    assert!(!base.exists(), "deletionPolicy: Delete removed what the Manifest created");
}
