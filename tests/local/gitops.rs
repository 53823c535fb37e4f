//! The chart's Argo CD health check (charts/deployster/health/argocd-health.lua), run by
//! `lua5.4` on Manifests as the controller wrote them: tests/gitops/*.json were captured from
//! the end-to-end test `argo_cd_health_reads_the_statuses_the_controller_writes`
//! (`DEPLOYSTER_CAPTURE_HEALTH_FIXTURES=tests/gitops`), which checks the same on a live cluster.
//! `#[ignore]`d, so plain `cargo test` lists them; without lua5.4 they fail.

use crate::support;
use serde_json::Value;

fn captured(name: &str) -> Value {
    let path = format!("{}/tests/gitops/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

#[ignore = "needs lua5.4: apt-get install lua5.4; cargo test --test local gitops:: -- --include-ignored"]
#[test]
fn each_status_the_controller_writes_maps_to_an_argo_cd_health() {
    for (name, status, needle) in [
        ("ready", "Healthy", "all 1 resources VALID"),
        ("failing", "Degraded", "waiting on f: action write failed"),
        ("invalid", "Degraded", "nothere"),
        ("suspended", "Suspended", "spec.suspend is true"),
        ("approval", "Suspended", "awaits approval"),
    ] {
        let (health, message) = support::argocd_health(&captured(name));
        assert_eq!(health, status, "{name}: {message}");
        assert!(message.contains(needle), "{name}: {message}");
    }
}

#[ignore = "needs lua5.4: apt-get install lua5.4; cargo test --test local gitops:: -- --include-ignored"]
#[test]
fn a_pass_not_yet_made_or_still_running_is_progressing() {
    // The same captured object at moments the e2e test does not stop at.
    let mut fresh = captured("ready");
    fresh.as_object_mut().unwrap().remove("status");
    assert_eq!(support::argocd_health(&fresh).0, "Progressing", "before the first pass");
    let mut edited = captured("ready");
    edited["metadata"]["generation"] = Value::from(edited["status"]["observedGeneration"].as_i64().unwrap() + 1);
    assert_eq!(
        support::argocd_health(&edited),
        ("Progressing".into(), "The spec changed: waiting for a pass over it".into())
    );
    let mut running = captured("ready");
    running["status"]["progress"] = Value::from("d/create 40%");
    assert_eq!(support::argocd_health(&running), ("Progressing".into(), "Applying: d/create 40%".into()));
}
