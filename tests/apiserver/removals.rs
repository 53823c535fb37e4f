//! What leaves a Manifest's spec, on the real API server: deleted (dependents first), left in
//! place (`removalPolicy: Orphan`), moved (`moved`), guarded (`maxDeletionPercent`, an emptied
//! spec), refused by RBAC (the 403 on the object, retried) — and a Manifest deleted with a
//! resource that never got applied. The controller's inventory is its status's history.

use std::time::Duration;

use serde_json::Value;

use crate::support::cluster::{Cluster, ControllerProcess, wait_for};

/// A Manifest `name` of ConfigMaps, each `(resource, dependency)` one named `cm-<resource>`.
pub(crate) fn manifest(name: &str, extra: &str, resources: &[(&str, Option<&str>)]) -> String {
    let mut yaml = format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 2s\n  \
         retryInterval: 1s\n  deletionPolicy: Delete\n  serviceAccountName: deployer\n{extra}  resources:\n"
    );
    if resources.is_empty() {
        yaml = yaml.replace("  resources:\n", "  resources: {}\n");
    }
    for (resource, dependency) in resources {
        let deps = dependency.map_or(String::new(), |d| format!("\n      dependencies: {{up: {d}}}"));
        let data = dependency.map_or("{a: b}".to_string(), |_| "{up: \"{{ up.state.metadata.name }}\"}".into());
        yaml.push_str(&format!(
            "    {resource}:\n      type: builtin/kubernetes{deps}\n      config: {{object: {{apiVersion: v1, kind: \
             ConfigMap, metadata: {{name: cm-{resource}}}, data: {data}}}}}\n"
        ));
    }
    yaml
}

/// The events about Manifest `name`: (reason, note), oldest first.
fn events(cluster: &Cluster, name: &str) -> Vec<(String, String)> {
    let Some(list) = cluster.get(&["events.events.k8s.io"]) else { return Vec::new() };
    let mut events: Vec<&Value> =
        list["items"].as_array().into_iter().flatten().filter(|e| e["regarding"]["name"] == name).collect();
    events.sort_by_key(|e| e["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string());
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    events.iter().map(|e| (text(&e["reason"]), text(&e["note"]))).collect()
}

fn condition(cluster: &Cluster, name: &str, type_: &str) -> Value {
    let manifest = cluster.get(&["manifest", name]).unwrap_or_default();
    let conditions = manifest["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions.into_iter().find(|c| c["type"] == type_).unwrap_or_default()
}

fn ready(cluster: &Cluster, name: &str) -> Value {
    condition(cluster, name, "Ready")
}

fn uid(cluster: &Cluster, object: &str) -> String {
    cluster.get(&["configmap", object]).map(|c| c["metadata"]["uid"].as_str().unwrap().to_string()).unwrap_or_default()
}

fn wait_ready(cluster: &Cluster, name: &str) {
    wait_for("the Manifest to be Ready", Duration::from_secs(120), || cluster.condition(name, "Ready") == "True");
}

/// Removed from the spec: deleted, with an event, after the inventory outlived a short history
/// limit; renamed with `moved`: kept as it is; removed and put back before a pass: untouched.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver removals:: -- --include-ignored"]
#[test]
fn what_leaves_the_spec_is_deleted_moved_or_kept_as_it_says() {
    let cluster = Cluster::new("removed");
    let work = tempfile::tempdir().unwrap();
    // A history of 3 entries: the inventory must outlive it.
    let args = ["--namespace", cluster.namespace.as_str(), "--history-limit", "3"];
    let _controller = ControllerProcess::start(&cluster, work.path(), "controller", &args);
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    let all = [("a", None), ("b", Some("a")), ("c", None), ("d", None)];
    cluster.apply_yaml(&manifest("app", "", &all));
    wait_ready(&cluster, "app");
    // Drift corrected twice: the history turns over.
    for level in ["x", "y"] {
        let patch = format!(r#"{{"data":{{"a":"{level}"}}}}"#);
        cluster.must(&cluster.ns(&["patch", "configmap", "cm-c", "--type", "merge", "-p", &patch]));
        wait_for("the drift to be corrected", Duration::from_secs(60), || {
            cluster.get(&["configmap", "cm-c"]).is_some_and(|c| c["data"]["a"] == "b")
        });
    }
    let history = cluster.history("app");
    let inventoried: Vec<&Value> = history.iter().filter(|e| e["event"] == "resource-inventoried").collect();
    assert_eq!(inventoried.len(), 4, "every resource held, beyond the limit: {history:#?}");

    // `d` goes: deleted (1 of 4, under the guard's 50 %), with an event naming it.
    let (a, c) = (uid(&cluster, "cm-a"), uid(&cluster, "cm-c"));
    cluster.apply_yaml(&manifest("app", "", &all[..3]));
    wait_for("cm-d to be deleted", Duration::from_secs(60), || cluster.get(&["configmap", "cm-d"]).is_none());
    wait_ready(&cluster, "app");
    // Published after the status is written.
    wait_for("the event", Duration::from_secs(10), || {
        events(&cluster, "app").iter().any(|(reason, note)| {
            reason == "ResourceDeleted" && note == "deleted d (builtin/kubernetes): no longer declared"
        })
    });
    // No longer held (the entry that says so has gone with the short history since).
    let history = cluster.history("app");
    let held: Vec<&Value> = history.iter().filter(|e| e["event"] == "resource-inventoried").collect();
    assert!(held.len() == 3 && !held.iter().any(|e| e["target"] == "resource/d"), "{history:#?}");

    // `c` renamed `e` with `moved`: the same object, not deleted and created.
    let renamed = [("a", None), ("b", Some("a")), ("e", None)];
    let yaml = manifest("app", "  moved: {c: e}\n", &renamed).replace("cm-e", "cm-c");
    cluster.apply_yaml(&yaml);
    wait_for("the move", Duration::from_secs(60), || {
        events(&cluster, "app").iter().any(|(reason, note)| reason == "ResourceMoved" && note.contains("c is now e"))
    });
    wait_ready(&cluster, "app");
    assert_eq!(uid(&cluster, "cm-c"), c, "moved, not deleted and created anew");

    // Removed and put back while suspended: nothing is deleted.
    let suspended =
        |resources: &[(&str, Option<&str>)]| manifest("app", "  suspend: true\n", resources).replace("cm-e", "cm-c");
    cluster.apply_yaml(&suspended(&renamed));
    wait_for("suspended", Duration::from_secs(30), || {
        condition(&cluster, "app", "Reconciling")["reason"] == "Suspended"
    });
    cluster.apply_yaml(&suspended(&renamed[..2]));
    cluster.apply_yaml(&suspended(&renamed));
    cluster.apply_yaml(&yaml);
    wait_for("resumed and Ready", Duration::from_secs(60), || {
        let m = cluster.get(&["manifest", "app"]).unwrap();
        m["status"]["observedGeneration"] == m["metadata"]["generation"] && ready(&cluster, "app")["status"] == "True"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(uid(&cluster, "cm-a"), a, "never deleted");
    let said = events(&cluster, "app");
    let deleted: Vec<&(String, String)> = said.iter().filter(|(reason, _)| reason == "ResourceDeleted").collect();
    assert_eq!(deleted.len(), 1, "only d was ever deleted: {said:#?}");
}

/// `removalPolicy: Orphan`: what leaves the spec stays, forgotten, with an event, and deleting
/// the Manifest (`deletionPolicy: Delete`) does not delete it.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver removals:: -- --include-ignored"]
#[test]
fn an_orphan_policy_leaves_what_leaves_the_spec_in_place() {
    let cluster = Cluster::new("orphaned");
    let work = tempfile::tempdir().unwrap();
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    let policy = "  removalPolicy: Orphan\n";
    cluster.apply_yaml(&manifest("keep", policy, &[("a", None), ("b", None), ("c", None)]));
    wait_ready(&cluster, "keep");
    cluster.apply_yaml(&manifest("keep", policy, &[("a", None), ("b", None)]));
    wait_for("the event", Duration::from_secs(60), || {
        events(&cluster, "keep").iter().any(|(reason, note)| {
            reason == "ResourceForgotten" && note.contains("c (builtin/kubernetes)") && note.contains("Orphan")
        })
    });
    assert!(cluster.get(&["configmap", "cm-c"]).is_some(), "left in place");
    cluster.must(&cluster.ns(&["delete", "manifest", "keep", "--wait=false"]));
    wait_for("the Manifest to go", Duration::from_secs(120), || cluster.get(&["manifest", "keep"]).is_none());
    assert!(cluster.get(&["configmap", "cm-a"]).is_none(), "deletionPolicy: Delete deleted what it held");
    assert!(cluster.get(&["configmap", "cm-c"]).is_some(), "forgotten: not deleted with the Manifest");
}

/// A ConfigMap renamed in the spec is replaced: the old object deleted (an event says why),
/// the new one created, and what reads its name follows; a namespace set where none was is
/// the same object, not a replacement.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver removals:: -- --include-ignored"]
#[test]
fn an_object_renamed_in_the_spec_is_replaced_the_old_one_deleted() {
    let cluster = Cluster::new("replaced");
    let work = tempfile::tempdir().unwrap();
    let args = ["--namespace", cluster.namespace.as_str(), "--history-limit", "3"];
    let _controller = ControllerProcess::start(&cluster, work.path(), "controller", &args);
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    let all = [("a", None), ("b", Some("a")), ("c", None)];
    cluster.apply_yaml(&manifest("app", "", &all));
    wait_ready(&cluster, "app");
    let (b_uid, c_uid) = (uid(&cluster, "cm-b"), uid(&cluster, "cm-c"));
    let namespaced = format!("name: cm-c, namespace: {}}}", cluster.namespace);
    cluster.apply_yaml(
        &manifest("app", "", &all).replace("name: cm-a}", "name: cm-renamed}").replace("name: cm-c}", &namespaced),
    );
    wait_for("the old object to go and the new one to be read", Duration::from_secs(90), || {
        cluster.get(&["configmap", "cm-a"]).is_none()
            && cluster.get(&["configmap", "cm-b"]).is_some_and(|b| b["data"]["up"] == "cm-renamed")
    });
    assert!(cluster.get(&["configmap", "cm-renamed"]).is_some());
    assert_eq!(uid(&cluster, "cm-b"), b_uid, "b reads a's name: updated in place, not replaced");
    assert_eq!(uid(&cluster, "cm-c"), c_uid, "its namespace written out: the same object");
    wait_ready(&cluster, "app");
    let said = events(&cluster, "app");
    assert!(
        said.iter().any(|(reason, note)| reason == "ResourceDeleted"
            && note == "deleted the old a (builtin/kubernetes): replaced, its identity changed"),
        "{said:?}"
    );
    assert!(!said.iter().any(|(_, note)| note.contains("deleted c")), "{said:?}");
}

/// An emptied spec, and a change that deletes more than `maxDeletionPercent`: nothing is deleted
/// or applied, Ready says why and what would go (Argo CD: Suspended), until the annotation
/// names the revision.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver removals:: -- --include-ignored"]
#[test]
fn deleting_more_than_the_limit_waits_for_the_revision_to_be_acknowledged() {
    let cluster = Cluster::new("guarded");
    let work = tempfile::tempdir().unwrap();
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    let all = [("a", None), ("b", Some("a")), ("c", None), ("d", None)];
    cluster.apply_yaml(&manifest("guarded", "  maxDeletionPercent: 25\n", &all));
    wait_ready(&cluster, "guarded");

    // 2 of 4 is more than 25 %; the new `e` waits too.
    let shrunk = [("a", None), ("b", Some("a")), ("e", None)];
    cluster.apply_yaml(&manifest("guarded", "  maxDeletionPercent: 25\n", &shrunk));
    wait_for("the guard", Duration::from_secs(60), || ready(&cluster, "guarded")["reason"] == "DeletionGuarded");
    let said = ready(&cluster, "guarded");
    let message = said["message"].as_str().unwrap();
    assert!(message.contains("would delete 2 of the 4") && message.contains("c (builtin/kubernetes), d"), "{said:#}");
    assert_eq!(said["status"], "False");
    let object = cluster.get(&["manifest", "guarded"]).unwrap();
    let (health, _) = crate::support::argocd_health(&object);
    assert_eq!(health, "Suspended", "Argo CD waits, as for an approval");
    // A pass or more later (the interval is 2 s): still nothing.
    std::thread::sleep(Duration::from_secs(3));
    assert!(cluster.get(&["configmap", "cm-c"]).is_some() && cluster.get(&["configmap", "cm-d"]).is_some());
    assert!(cluster.get(&["configmap", "cm-e"]).is_none(), "nothing applied either");
    assert!(events(&cluster, "guarded").iter().any(|(reason, _)| reason == "DeletionGuarded"));

    // Acknowledged for another revision: still guarded. For this one: done.
    let revision = object["status"]["revision"].as_str().unwrap().to_string();
    cluster.must(&cluster.ns(&["annotate", "manifest", "guarded", "deployster.io/allow-deletes=0-other"]));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ready(&cluster, "guarded")["reason"], "DeletionGuarded");
    let allow = format!("deployster.io/allow-deletes={revision}");
    cluster.must(&cluster.ns(&["annotate", "manifest", "guarded", &allow, "--overwrite"]));
    wait_for("the deletions", Duration::from_secs(60), || {
        cluster.get(&["configmap", "cm-c"]).is_none() && cluster.get(&["configmap", "cm-d"]).is_none()
    });
    wait_ready(&cluster, "guarded");
    assert!(cluster.get(&["configmap", "cm-e"]).is_some());

    // Emptied by mistake: every resource would go, whatever the limit.
    cluster.apply_yaml(&manifest("guarded", "  maxDeletionPercent: 100\n", &[]));
    wait_for("the guard", Duration::from_secs(60), || ready(&cluster, "guarded")["reason"] == "DeletionGuarded");
    let message = ready(&cluster, "guarded")["message"].as_str().unwrap().to_string();
    assert!(message.contains("would delete 3 of the 3") && message.contains("kubectl annotate"), "{message}");
    std::thread::sleep(Duration::from_secs(3));
    for kept in ["cm-a", "cm-b", "cm-e"] {
        assert!(cluster.get(&["configmap", kept]).is_some(), "{kept} kept");
    }
}

/// A removal the Manifest's ServiceAccount may not make: the 403 on the object (Ready, an
/// event), retried; what the refused resource depends on is kept, though it could be deleted;
/// once the right is granted, both go.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver removals:: -- --include-ignored"]
#[test]
fn a_removal_refused_by_rbac_is_named_kept_and_retried() {
    let cluster = Cluster::new("refused");
    let ns = cluster.namespace.clone();
    let work = tempfile::tempdir().unwrap();
    let _controller = ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &ns]);
    // ConfigMaps may be deleted, Secrets not.
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    cluster.must(&cluster.ns(&["create", "role", "secrets", "--verb", "get,create,patch", "--resource", "secrets"]));
    let subject = format!("{ns}:deployer");
    cluster.must(&cluster.ns(&["create", "rolebinding", "secrets", "--role", "secrets", "--serviceaccount", &subject]));
    let secret = "    token:\n      type: builtin/kubernetes\n      dependencies: {up: b}\n      config: {object: \
                  {apiVersion: v1, kind: Secret, metadata: {name: token}, stringData: {for: \"{{ up.state.metadata.name }}\"}}}\n";
    let both = manifest("refused", "", &[("a", None), ("b", None), ("c", None)]) + secret;
    cluster.apply_yaml(&both);
    wait_ready(&cluster, "refused");

    // `token` and `b` leave (2 of 5 held: under the limit); the Secret's delete is refused.
    cluster.apply_yaml(&manifest("refused", "", &[("a", None), ("c", None)]));
    wait_for("the refusal", Duration::from_secs(60), || ready(&cluster, "refused")["reason"] == "RemovalFailed");
    let said = ready(&cluster, "refused");
    let message = said["message"].as_str().unwrap();
    assert!(message.starts_with("removing token (no longer declared): "), "{said:#}");
    assert!(message.contains("403") || message.contains("forbidden"), "the server's refusal: {said:#}");
    assert!(message.contains(&format!("system:serviceaccount:{ns}:deployer")), "{said:#}");
    assert!(
        events(&cluster, "refused").iter().any(|(reason, note)| reason == "RemovalFailed" && note.contains("token"))
    );
    assert!(cluster.get(&["secret", "token"]).is_some());
    assert!(cluster.get(&["configmap", "cm-b"]).is_some(), "what the refused one depends on is kept");
    let failures = cluster.get(&["manifest", "refused"]).unwrap()["status"]["consecutiveFailures"].as_u64().unwrap();
    assert!(failures >= 1, "retried with backoff");

    cluster.must(&cluster.ns(&["create", "role", "deleter", "--verb", "delete", "--resource", "secrets"]));
    cluster.must(&cluster.ns(&["create", "rolebinding", "deleter", "--role", "deleter", "--serviceaccount", &subject]));
    wait_for("the retry to delete both", Duration::from_secs(120), || {
        cluster.get(&["secret", "token"]).is_none() && cluster.get(&["configmap", "cm-b"]).is_none()
    });
    wait_ready(&cluster, "refused");
    assert!(cluster.get(&["configmap", "cm-a"]).is_some() && cluster.get(&["configmap", "cm-c"]).is_some());
}

/// A Manifest deleted while one of its resources never got applied (its image cannot be had,
/// another's config is invalid): what it applied is deleted and the Manifest goes — not stuck
/// `Terminating` on the init that failed.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver removals:: -- --include-ignored"]
#[test]
fn a_manifest_with_a_resource_never_applied_is_deleted() {
    let cluster = Cluster::new("never-applied");
    let work = tempfile::tempdir().unwrap();
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    cluster.service_account("deployer", "get,create,patch,delete", "configmaps");
    let applied = manifest("half", "", &[("a", None), ("b", Some("a"))]);
    cluster.apply_yaml(&applied);
    wait_ready(&cluster, "half");
    // No registry listens on port 1: the image can never be had.
    let never = "    three:\n      type: 127.0.0.1:1/deployster/missing:1\n    four:\n      type: builtin/kubernetes\n      \
                 config: {object: 42}\n";
    cluster.apply_yaml(&(applied + never));
    wait_for("the failure", Duration::from_secs(60), || {
        cluster.get(&["manifest", "half"]).is_some_and(|m| {
            m["status"]["observedGeneration"] == m["metadata"]["generation"]
                && ready(&cluster, "half")["status"] == "False"
        })
    });
    cluster.must(&cluster.ns(&["delete", "manifest", "half", "--wait=false"]));
    wait_for("the Manifest to go", Duration::from_secs(120), || cluster.get(&["manifest", "half"]).is_none());
    assert!(cluster.get(&["configmap", "cm-a"]).is_none() && cluster.get(&["configmap", "cm-b"]).is_none());
}
