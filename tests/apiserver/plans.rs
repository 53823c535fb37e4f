//! Plans that reach every resource on a real API server: a Kubernetes object's planned state is
//! the server's dry run of applying it, so what reads it is planned too — and what reads a value
//! only the write decides (a Service's cluster IP) waits, saying which.
#![cfg(feature = "kube")]

use crate::kubernetes::deployster;
use crate::support::Workspace;
use crate::support::cluster::Cluster;

/// A ConfigMap that reads another's data and name, both new: the plan shows both created,
/// counts both, and the saved plan applies them with nothing unplanned.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver plans:: -- --include-ignored"]
#[test]
fn a_dependent_of_a_new_object_is_planned_over_the_dry_run() {
    let cluster = Cluster::new("planned");
    let ws = Workspace::new();
    ws.manifest(&format!(
        r#"
resources:
  colors:
    type: builtin/kubernetes
    config:
      object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: colors, namespace: {ns}}}, data: {{color: blue}}}}
  web:
    type: builtin/kubernetes
    dependencies: {{c: colors}}
    config:
      object:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: web, namespace: {ns}}}
        data: {{from: "{{{{ c.state.metadata.name }}}}", color: "{{{{ c.state.data.color }}}}"}}
"#,
        ns = cluster.namespace
    ));
    let plan = deployster(&ws, &cluster, &["plan", "-f", "manifest.yaml", "--out", "plan.json"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    let text = plan.stdout.clone();
    assert!(text.contains("Plan: 2 to apply, 0 pending, 0 valid."), "{text}");
    assert!(text.contains("after colors's actions, as planned"), "{text}");
    assert!(text.contains(&format!("Create ConfigMap {}/web", cluster.namespace)), "{text}");
    assert!(text.contains("state.metadata.creationTimestamp"), "what only the write decides: {text}");
    assert!(cluster.get(&["configmap", "colors"]).is_none(), "a plan writes nothing");

    let applied = deployster(&ws, &cluster, &["apply", "plan.json", "--yes"]);
    assert_eq!(applied.code, 0, "as planned, no NotAsPlanned: {}", applied.all());
    let web = cluster.get(&["configmap", "web"]).expect("web");
    assert_eq!((web["data"]["from"].as_str(), web["data"]["color"].as_str()), (Some("colors"), Some("blue")));
}

/// `examples/kubernetes`, fresh: the Service is planned, and what reads its cluster IP (which
/// the server allocates when it is written) is planned as created — it does not exist — with
/// that value known after apply, named; the port it reads is known. The saved plan applies.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver plans:: -- --include-ignored"]
#[test]
fn what_reads_a_value_only_the_write_decides_is_created_with_that_value_known_after_apply() {
    let cluster = Cluster::new("known-after");
    let ws = Workspace::new();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes/manifest.yaml");
    let namespace = format!("namespace={}", cluster.namespace);
    let file = example.to_str().unwrap();
    // Its log in the test's workspace, not beside the example (another test applies it too).
    let state = ws.path(".deployster").display().to_string();
    let args = ["plan", "-f", file, "--var", &namespace, "--out", "plan.json", "--state-dir", &state];
    let plan = deployster(&ws, &cluster, &args);
    assert_eq!(plan.code, 0, "{}", plan.all());
    let text = plan.stdout;
    assert!(text.contains("Plan: 3 to apply, 0 pending, 0 valid."), "{text}");
    assert!(text.contains("after db_service's actions, created as planned"), "{text}");
    assert!(text.contains(&format!("Create ConfigMap {}/web", cluster.namespace)), "its own action: {text}");
    assert!(text.contains("config.object.data.DB_HOST = (known after apply) {{ db.state.spec.clusterIP }}"), "{text}");
    assert!(!text.contains("config.object.data.DB_PORT ="), "the port is planned: {text}");
    assert!(text.contains("spec.clusterIP"), "the Service's own unknowns are said: {text}");
    let applied = deployster(&ws, &cluster, &["apply", "plan.json", "--yes", "--state-dir", &state]);
    assert_eq!(applied.code, 0, "{}", applied.all());
    let ip = cluster.get(&["service", "db"]).unwrap()["spec"]["clusterIP"].clone();
    assert_eq!(cluster.get(&["configmap", "web"]).unwrap()["data"]["DB_HOST"], ip);

    // Moved to another namespace once the old objects are gone: each old one is found absent
    // (what the old Deployment reads is gone too, yet its name says it is not there), and the
    // new ones are created — not stuck behind replacements that cannot be deleted.
    let other = format!("{}-moved", cluster.namespace);
    cluster.must(&["create", "namespace", &other]);
    cluster.must(&cluster.ns(&["delete", "deployment,configmap,service", "--all", "--wait=true"]));
    let moved = format!("namespace={other}");
    let args = ["apply", "-f", file, "--var", &moved, "--yes", "--allow-deletes", "3", "--state-dir", &state];
    let out = deployster(&ws, &cluster, &args);
    let _ = cluster.kubectl(&["delete", "namespace", &other, "--wait=false"]);
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("Removal complete: 3 already gone."), "{}", out.all());
    assert!(cluster.kubectl(&["get", "-n", &other, "deployment", "web"]).0, "{}", out.all());
}
