//! The cluster whose Pods really run (`../shared/cluster`, named by `DEPLOYSTER_E2E_CLUSTER`)
//! and the images the Pod tests and benchmark need, built here and pushed to its registry.
//! Without the variable: `None` (a test fails, through `pod_objects::on_cluster`; the benchmark
//! measures nothing).

#![allow(dead_code)] // shared by the tests and the Pod benchmark, which use different parts

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use super::docker::{self, FIXTURE_IMAGE, FIXTURE_PLUGS_IMAGE};

/// The cluster and the images pushed to its registry.
pub struct PodEnv {
    pub kubeconfig: String,
    /// The helper's image (the controller's own).
    pub helper: String,
    /// The fixture type, the fixture asking for plugs `ro` and `rw`, and the fixture whose
    /// state exits without reading its request.
    pub fixture: String,
    pub fixture_plugs: String,
    pub fixture_eager: String,
    pub registry: String,
    /// The same registry as a Pod reaches it (`REGISTRY_IN_PODS`: `127.0.0.1` in a Pod is the
    /// Pod's own loopback).
    pub registry_in_pods: String,
    /// The node's own Docker daemon (`CLUSTER_DOCKER_HOST`), where the kubelet runs containers.
    pub node_docker: String,
}

pub fn env() -> Option<&'static PodEnv> {
    static ENV: OnceLock<Option<PodEnv>> = OnceLock::new();
    ENV.get_or_init(|| {
        let Ok(kubeconfig) = std::env::var("DEPLOYSTER_E2E_CLUSTER") else {
            return None;
        };
        let cluster_env = Path::new(&kubeconfig).with_file_name("cluster.env");
        let text = std::fs::read_to_string(&cluster_env)
            .unwrap_or_else(|e| panic!("{} beside the kubeconfig: {e}", cluster_env.display()));
        let setting = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {name}= in {}", cluster_env.display()))
                .trim()
                .to_string()
        };
        let (registry, node_docker) = (setting("REGISTRY"), setting("CLUSTER_DOCKER_HOST"));
        let registry_in_pods = setting("REGISTRY_IN_PODS");
        pin_bridge_address(Path::new(&kubeconfig));
        // The Pod tests build their images with Docker.
        docker::env();
        let push = |local: &str, remote: &str| {
            for args in [vec!["tag", local, remote], vec!["push", "--quiet", remote]] {
                let out = Command::new("docker").args(&args).output().expect("run docker");
                assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
        };
        let helper = format!("{registry}/deployster/controller:test");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let built = Command::new(root.join("image/build.sh"))
            .env("IMAGE", &helper)
            .env("PROFILE", docker::static_profile())
            .output()
            .expect("image/build.sh");
        assert!(built.status.success(), "image/build.sh: {}", String::from_utf8_lossy(&built.stderr));
        push(&helper, &helper);
        let fixture = format!("{registry}/deployster/fixture:test");
        let fixture_plugs = format!("{registry}/deployster/fixture:plugs");
        push(FIXTURE_IMAGE, &fixture);
        push(FIXTURE_PLUGS_IMAGE, &fixture_plugs);
        let fixture_eager = format!("{registry}/deployster/fixture:eager");
        push(FIXTURE_IMAGE, &fixture_eager);
        Some(PodEnv {
            kubeconfig,
            helper,
            fixture,
            fixture_plugs,
            fixture_eager,
            registry,
            registry_in_pods,
            node_docker,
        })
    })
    .as_ref()
}

/// Gives the test cluster's Pod bridge a fixed MAC address. `../shared/cluster` makes its bridge
/// `cbr0` with `ip link add` and no address, and a Linux bridge without one takes the lowest
/// address of its ports: starting or deleting a Pod can change the gateway's MAC under every
/// other Pod. A Pod that talks through the gateway (the controller installed by the chart, to
/// the API server and from the kubelet's probes) then loses its network until its ARP entry
/// for the gateway expires — 30 to 60 s of "Lease request timed out" and failed probes, seen
/// as a controller Pod that stalled and was restarted in `tests/cluster/helm_cluster.rs`. Real nodes'
/// bridges (Docker's `docker0`, the CNI bridge plugin) have an address of their own; this gives
/// `cbr0` one (Docker's form for the gateway's IP, 10.244.0.1), once, before any test's Pod.
/// Nothing to do on a cluster that is not `../shared/cluster` (no `node.pid` beside the
/// kubeconfig).
fn pin_bridge_address(kubeconfig: &Path) {
    let Ok(pid) = std::fs::read_to_string(kubeconfig.with_file_name("node.pid")) else { return };
    let set = ["-t", pid.trim(), "-n", "ip", "link", "set", "cbr0", "address", "02:42:0a:f4:00:01"];
    let out = Command::new("nsenter").args(set).output().expect("run nsenter");
    assert!(
        out.status.success(),
        "pinning the test cluster's bridge address: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
