//! ManifestPreviews on the real API server: `deployster preview`, run with the rights of a CI
//! account that may only ask for previews, gets the plan of a proposed spec — for a Manifest
//! that exists or not — as text, JSON and Markdown, exiting 0/2/1 as `plan --detailed-exitcode`,
//! and nothing is applied. Bad proposals, a missing ServiceAccount, an oversized proposal, an
//! account that may not ask, sensitive values, and an abandoned preview.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::removals::manifest;
use crate::support;
use crate::support::cluster::{Cluster, ControllerProcess, wait_for};

/// `deployster preview NAME -f FILE ARGS` as the account of `kubeconfig`: exit code, stdout,
/// and all it said (stdout, then stderr).
fn preview(kubeconfig: &Path, name: &str, yaml: &str, args: &[&str]) -> (i32, String, String) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let output = Command::new(support::deployster())
        .args(["preview", name, "-f", file.path().to_str().unwrap(), "--timeout", "90s"])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    let stdout = text(&output.stdout);
    (output.status.code().unwrap_or(-1), stdout.clone(), stdout + &text(&output.stderr))
}

/// A cluster namespace named after `test` with the controller watching it, the ServiceAccount
/// `deployer` that Manifests act as (ConfigMaps), and CI's kubeconfig: an account that may
/// create, read and delete ManifestPreviews, and nothing else.
fn setup(test: &str) -> (Cluster, tempfile::TempDir, ControllerProcess, std::path::PathBuf) {
    let cluster = Cluster::new(test);
    let work = tempfile::tempdir().unwrap();
    let controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    cluster.service_account("deployer", "get,list,create,patch,delete", "configmaps");
    cluster.service_account("ci", "create,get,delete", "manifestpreviews.deployster.io");
    let ci = cluster.token_kubeconfig("ci", work.path());
    (cluster, work, controller, ci)
}

fn data(cluster: &Cluster, name: &str) -> Value {
    cluster.get(&["configmap", name]).map(|c| c["data"].clone()).unwrap_or_default()
}

#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver previews:: -- --include-ignored"]
#[test]
fn a_proposal_is_planned_in_the_cluster_and_nothing_is_applied() {
    let (cluster, _work, controller, ci) = setup("preview");
    // CI may ask for previews, and nothing else: not read ConfigMaps, Secrets or Manifests.
    assert!(!cluster.kubectl(&["--kubeconfig", ci.to_str().unwrap(), "get", "configmaps"]).0, "CI reads nothing");
    let all = [("a", None), ("b", Some("a")), ("c", None)];
    cluster.apply_yaml(&manifest("app", "", &all));
    wait_for("the Manifest to be Ready", Duration::from_secs(120), || cluster.condition("app", "Ready") == "True");

    // a's data changes, c leaves, d joins.
    let proposed = manifest("app", "", &[("a", None), ("b", Some("a")), ("d", None)]).replace("{a: b}", "{a: z}");
    let (code, stdout, stderr) = preview(&ci, "app", &proposed, &["--output", "json"]);
    assert_eq!(code, 2, "changes pending: {stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    let plan = &answer["status"]["plan"];
    assert_eq!(answer["status"]["phase"], "Planned", "{answer:#}");
    let status_of = |list: &str, name: &str| {
        plan[list].as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or_default()
    };
    let a = status_of("resources", "a");
    assert_eq!(a["status"], "STALE", "{plan:#}");
    assert!(!a["actions"].as_array().unwrap().is_empty(), "{a}");
    assert!(a["differences"].to_string().contains("config.object.data.a: \\\"b\\\" → \\\"z\\\""), "{a}");
    assert_eq!(status_of("resources", "d")["status"], "MISSING");
    assert_eq!(status_of("removals", "c")["status"], "DELETE");
    assert_eq!(plan["changes"], true);
    assert!(plan["id"].as_str().is_some_and(|id| id.len() >= 12), "{plan}");
    // Nothing applied, and the preview is gone (the CLI deletes it once printed).
    assert_eq!(data(&cluster, "cm-a")["a"], "b");
    assert!(cluster.get(&["configmap", "cm-d"]).is_none() && cluster.get(&["configmap", "cm-c"]).is_some());
    let left = cluster.get(&["manifestpreviews"]).unwrap();
    assert!(left["items"].as_array().unwrap().is_empty(), "{left}");
    // What the preview read (a's proposed data) is not in the Manifest's log: it kept its own.
    let history = cluster.history("app");
    let applied_inputs = history.iter().filter(|e| e.to_string().contains(r#""data":{"a":"b"}"#)).count();
    assert!(applied_inputs > 0, "the log keeps inputs so: {history:#?}");
    let proposed_inputs = history.iter().filter(|e| e.to_string().contains(r#""data":{"a":"z"}"#)).count();
    assert_eq!(proposed_inputs, 0, "the Manifest's log is not written: {history:#?}");

    // As Markdown, for the pull request.
    let (code, markdown, _) = preview(&ci, "app", &proposed, &["--output", "markdown"]);
    assert_eq!(code, 2);
    assert!(markdown.contains(&format!("### Deployster preview of `{}/app`: changes pending", cluster.namespace)));
    assert!(markdown.contains("| `~` STALE | `a` | `builtin/kubernetes` |"), "{markdown}");
    assert!(markdown.contains("| `-` DELETE | `c` |"), "{markdown}");
    assert!(markdown.contains("| `+` MISSING | `d` |"), "{markdown}");

    // The spec as it is: nothing to do, 0.
    let (code, text, stderr) = preview(&ci, "app", &manifest("app", "", &all), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(text.contains("Plan: 0 to apply, 0 pending, 3 valid."), "{text}");

    // A Manifest that does not exist: planned from nothing.
    let (code, text, _) = preview(&ci, "fresh", &manifest("fresh", "", &[("e", None)]), &[]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("MISSING   e"), "{text}");

    // A sensitive value: masked in the answer and in the status kept (--keep).
    let secret = manifest("app", "  vars: {token: s3cr3t-t0ken}\n  sensitive: [token]\n", &all)
        .replace("{a: b}", "{a: \"{{ token }}\"}");
    let (code, text, said) = preview(&ci, "app", &secret, &["--keep", "--output", "markdown"]);
    assert_eq!(code, 2, "{text}");
    assert!(!said.contains("s3cr3t"), "{said}");
    assert!(text.contains("***"), "{text}");
    // Nor in the controller's log (at debug, where it names each preview it plans), nor in the
    // namespace's events.
    let log = controller.log_text();
    assert!(log.contains("preview="), "the log speaks of previews: {log}");
    assert!(!log.contains("s3cr3t"), "the controller's log shows a sensitive value: {log}");
    let events = cluster.get(&["events"]).unwrap();
    assert!(!events["items"].as_array().unwrap().is_empty(), "the passes published events: {events}");
    assert!(!events.to_string().contains("s3cr3t"), "an event shows a sensitive value: {events}");
    // (Its spec holds what the asker wrote; the status is what the controller made of it.)
    let kept = cluster.get(&["manifestpreviews"]).unwrap();
    let status = &kept["items"][0]["status"];
    assert_eq!(status["phase"], "Planned", "{kept}");
    assert!(!status.to_string().contains("s3cr3t"), "{status}");
    // Flux's kstatus reads Ready; Argo CD the chart's health check.
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "True");
    let (health, message) = support::argocd_health(&kept["items"][0]);
    assert_eq!((health.as_str(), message.as_str()), ("Healthy", status["plan"]["summary"].as_str().unwrap()));
}

#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver previews:: -- --include-ignored"]
#[test]
fn bad_proposals_and_askers_get_clear_answers() {
    let (cluster, work, _controller, ci) = setup("preview-bad");
    cluster.service_account("nobody", "get", "secrets");
    let fine = manifest("app", "", &[("a", None)]);

    // Not a valid Manifest spec: its errors, as for a Manifest.
    let invalid = manifest("app", "", &[("a", Some("nowhere"))]);
    let (code, _, said) = preview(&ci, "app", &invalid, &[]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("ProposalInvalid") && said.contains("nowhere"), "{said}");
    // Not even a Manifest's shape: named by its field and line, before the cluster is asked.
    let (code, _, stderr) = preview(&ci, "app", &fine.replace("interval: 2s", "interval: [2s]"), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not a Manifest object") && stderr.contains("spec.interval"), "{stderr}");
    // A ServiceAccount that does not exist.
    let (code, _, stderr) =
        preview(&ci, "app", &fine.replace("serviceAccountName: deployer", "serviceAccountName: ghost"), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("ServiceAccount `ghost` not found"), "{stderr}");
    // One that may not read what the proposal manages: the plan says so, resource by resource.
    let (code, text, stderr) =
        preview(&ci, "app", &fine.replace("serviceAccountName: deployer", "serviceAccountName: nobody"), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(text.contains("FAILED") && text.contains("forbidden"), "{text}");
    // Over the size a preview may have.
    let big = fine.replace("{a: b}", &format!("{{a: {}}}", "x".repeat(300 * 1024)));
    let (code, _, stderr) = preview(&ci, "app", &big, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("ProposalTooLarge"), "{stderr}");
    // An account that may not ask: 403, named.
    let nobody = cluster.token_kubeconfig("nobody", work.path());
    let (code, _, stderr) = preview(&nobody, "app", &fine, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not allowed to create ManifestPreviews"), "{stderr}");
    assert!(cluster.get(&["configmap", "cm-a"]).is_none(), "nothing was applied");

    // Abandoned previews (no CLI waits for them): planned, then deleted after their TTL; 50
    // asked at once are all answered, at most 4 planned at a time, the rest queued (said).
    let mut many = String::new();
    for n in 0..50 {
        let object = format!(
            "apiVersion: deployster.io/v1alpha1\nkind: ManifestPreview\nmetadata: {{name: left-{n}}}\nspec:\n  \
             manifest: app\n  ttlSecondsAfterFinished: {}\n  proposed:\n    serviceAccountName: deployer\n    \
             resources: {{}}\n",
            if n == 0 { 1 } else { 120 }
        );
        many.push_str(&format!("---\n{object}"));
    }
    cluster.apply_yaml(&many);
    let mut items = Vec::new();
    wait_for("every preview to be planned", Duration::from_secs(120), || {
        let list = cluster.get(&["manifestpreviews"]).unwrap_or_default();
        items = list["items"].as_array().cloned().unwrap_or_default();
        items.len() == 49 && items.iter().all(|p| p["status"]["phase"] == "Planned")
    });
    let waited = items.iter().filter(|p| {
        p["status"]["message"].as_str().is_some_and(|m| m.starts_with("planned after waiting for a slot (at most 4"))
    });
    assert!(waited.count() >= 1, "some waited their turn: {items:#?}");
    assert!(cluster.get(&["manifestpreview", "left-0"]).is_none(), "the abandoned one is cleaned up");
    // A failed one, as Argo CD and Flux see it.
    cluster.apply_yaml(
        "apiVersion: deployster.io/v1alpha1\nkind: ManifestPreview\nmetadata: {name: ghostly}\nspec:\n  manifest: app\n  \
         proposed:\n    serviceAccountName: ghost\n    resources: {}\n",
    );
    wait_for("the preview to fail", Duration::from_secs(60), || {
        cluster.get(&["manifestpreview", "ghostly"]).is_some_and(|p| p["status"]["phase"] == "Failed")
    });
    let failed = cluster.get(&["manifestpreview", "ghostly"]).unwrap();
    assert_eq!(failed["status"]["conditions"][0]["status"], "False");
    assert_eq!(failed["status"]["conditions"][0]["reason"], "ServiceAccountMissing");
    let (health, message) = support::argocd_health(&failed);
    assert_eq!(health, "Degraded");
    assert!(message.contains("ServiceAccount `ghost` not found"), "{message}");
}

/// `deployster approve NAME --plan ID` as the admin: exit code and all it said.
fn approve(cluster: &Cluster, name: &str, plan: &str) -> (i32, String) {
    let output = Command::new(support::deployster())
        .args(["approve", name, "-n", &cluster.namespace, "--plan", plan])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), said)
}

/// The digest of the plan Manifest `name` awaits approval for, once it does, after `not`.
fn pending_digest(cluster: &Cluster, name: &str, not: &str) -> String {
    let mut digest = String::new();
    wait_for("a plan awaiting approval", Duration::from_secs(60), || {
        let found = cluster.get(&["manifest", name]).unwrap_or_default();
        digest = found["status"]["pendingPlan"]["digest"].as_str().unwrap_or_default().to_string();
        !digest.is_empty() && digest != not
    });
    digest
}

/// With `approval: Manual`, the plan a reviewer saw in the pull request's preview is the one
/// applied after the merge — or nothing, when another change was merged meanwhile.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver previews:: -- --include-ignored"]
#[test]
fn the_plan_previewed_is_the_plan_approved_after_the_merge() {
    let (cluster, _work, _controller, ci) = setup("preview-loop");
    let gated = |value: &str| {
        manifest("gated", "  approval: Manual\n", &[("a", None)]).replace("{a: b}", &format!("{{a: {value}}}"))
    };
    cluster.apply_yaml(&gated("b"));
    let first = pending_digest(&cluster, "gated", "");
    assert_eq!(approve(&cluster, "gated", &first).0, 0);
    wait_for("the first plan to be applied", Duration::from_secs(60), || data(&cluster, "cm-a")["a"] == "b");

    // The pull request: previewed, reviewed. Merged and synced: the controller's plan is the
    // previewed one, and approving the previewed id applies it.
    let (code, markdown, said) = preview(&ci, "gated", &gated("z"), &["--output", "markdown"]);
    assert_eq!(code, 2, "{said}");
    let id = markdown.split("--plan ").nth(1).and_then(|rest| rest.split('`').next()).unwrap().to_string();
    cluster.apply_yaml(&gated("z"));
    let now = pending_digest(&cluster, "gated", &first);
    assert_eq!(now, id, "the controller plans what the preview showed");
    let (code, said) = approve(&cluster, "gated", &id);
    assert_eq!(code, 0, "{said}");
    wait_for("the previewed plan to be applied", Duration::from_secs(60), || data(&cluster, "cm-a")["a"] == "z");

    // Reviewed one change; another was merged: the reviewed id approves nothing.
    let (_, markdown, _) = preview(&ci, "gated", &gated("w"), &["--output", "markdown"]);
    let reviewed = markdown.split("--plan ").nth(1).and_then(|rest| rest.split('`').next()).unwrap().to_string();
    cluster.apply_yaml(&gated("v"));
    pending_digest(&cluster, "gated", &now);
    let (code, said) = approve(&cluster, "gated", &reviewed);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains(&format!("plan {reviewed} is not the one awaiting approval")), "{said}");
    assert!(said.contains("nothing was approved"), "{said}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(data(&cluster, "cm-a")["a"], "z", "nothing applied");
}

/// `examples/preview/ci.sh` as a CI job runs it: the preview on the pull request, the merge
/// synced, the reviewed plan approved and applied.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver previews:: -- --include-ignored"]
#[test]
fn the_example_ci_job_previews_and_approves() {
    let (cluster, work, _controller, ci) = setup("preview-example");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/preview");
    let bin = support::deployster().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let job = |step: &str, kubeconfig: &Path| {
        let output = Command::new(example.join("ci.sh"))
            .arg(step)
            .current_dir(work.path())
            .env("PATH", &path)
            .env("NAMESPACE", &cluster.namespace)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.code().unwrap_or(-1), said)
    };
    let (code, said) = job("preview", &ci);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("changes pending") && said.contains("| `+` MISSING | `settings` |"), "{said}");
    let id = std::fs::read_to_string(work.path().join("plan-id.txt")).unwrap();
    assert_eq!(id.trim().len(), 12, "{id}");
    assert!(cluster.get(&["configmap", "app-settings"]).is_none(), "a preview applies nothing");

    cluster.must(&cluster.ns(&["apply", "-f", example.join("app.yaml").to_str().unwrap()]));
    assert_eq!(pending_digest(&cluster, "app", ""), id.trim());
    let (code, said) = job("approve", Path::new(&cluster.kubeconfig));
    assert_eq!(code, 0, "{said}");
    wait_for("the reviewed plan to be applied", Duration::from_secs(60), || {
        data(&cluster, "app-settings")["LOG_LEVEL"] == "info"
    });
}

/// Objects an older CRD let through (a field of the wrong type): a malformed ManifestPreview,
/// Manifest and Pipeline are each reported on the object — `MalformedObject`, with a Warning
/// event — and stall nothing: a good Manifest is applied and a good preview planned beside
/// them. On an API server of its own, whose CRDs the test loosens as an older one was.
#[ignore = "needs API servers of its own: DEPLOYSTER_E2E_APISERVER=../shared/apiserver cargo test --test apiserver previews:: -- --include-ignored"]
#[test]
fn malformed_objects_of_every_kind_are_reported_and_stall_nothing() {
    let server = crate::support::cluster::ApiServer::start("malformed");
    let cluster = Cluster::on(server.kubeconfig.clone(), "malformed");
    // As an older CRD: any spec goes.
    for crd in ["manifests", "pipelines", "manifestpreviews"] {
        let name = format!("{crd}.deployster.io");
        let patch = r#"[{"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec", "value": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}]"#;
        cluster.must(&["patch", "crd", &name, "--type", "json", "-p", patch]);
    }
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        bad.path(),
        "apiVersion: deployster.io/v1alpha1\nkind: ManifestPreview\nmetadata: {name: bad-preview}\nspec: {manifest: 5, proposed: nothing}\n\
         ---\napiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {name: bad-manifest}\nspec: {resources: [1, 2]}\n\
         ---\napiVersion: deployster.io/v1alpha1\nkind: Pipeline\nmetadata: {name: bad-pipeline}\nspec: {stages: 7}\n",
    )
    .unwrap();
    // Written as an older client would, once the server holds the loosened schemas.
    let apply = ["apply", "--validate=false", "-f", bad.path().to_str().unwrap()];
    wait_for("the malformed objects written", Duration::from_secs(30), || cluster.kubectl(&cluster.ns(&apply)).0);
    let work = tempfile::tempdir().unwrap();
    let _controller =
        ControllerProcess::start(&cluster, work.path(), "controller", &["--namespace", &cluster.namespace]);
    let dir = work.path().join("good");
    let good = format!("  resources:\n    d: {{type: builtin/directory, config: {{path: {}}}}}\n", dir.display());
    cluster.apply_yaml(&format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: good}}\nspec:\n{good}"
    ));
    cluster.apply_yaml(&format!(
        "apiVersion: deployster.io/v1alpha1\nkind: ManifestPreview\nmetadata: {{name: good-preview}}\nspec:\n  manifest: other\n  proposed:\n{}",
        good.replace("  resources", "    resources").replace("\n    d:", "\n      d:")
    ));
    let phase = |name: &str| {
        cluster.get(&["manifestpreview", name]).and_then(|p| p["status"]["phase"].as_str().map(str::to_string))
    };
    wait_for("the good Manifest applied", Duration::from_secs(60), || cluster.condition("good", "Ready") == "True");
    assert!(dir.is_dir());
    let planned = std::time::Instant::now();
    while phase("good-preview").as_deref() != Some("Planned") {
        let found = cluster.get(&["manifestpreview", "good-preview"]);
        assert!(planned.elapsed() < Duration::from_secs(60), "the good preview was not planned: {found:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for("the bad preview reported", Duration::from_secs(30), || phase("bad-preview").as_deref() == Some("Failed"));
    let bad = cluster.get(&["manifestpreview", "bad-preview"]).unwrap();
    assert_eq!(bad["status"]["reason"], "MalformedObject", "{bad:#}");
    assert!(bad["status"]["message"].as_str().unwrap().contains("does not match its schema"), "{bad:#}");
    for (kind, name) in [("manifest", "bad-manifest"), ("pipeline", "bad-pipeline")] {
        wait_for(&format!("{name} reported"), Duration::from_secs(30), || {
            let object = cluster.get(&[kind, name]).unwrap_or(Value::Null);
            object["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["reason"] == "MalformedObject"))
        });
    }
    for name in ["bad-preview", "bad-manifest", "bad-pipeline"] {
        assert!(cluster.event_reasons(name).iter().any(|r| r == "MalformedObject"), "a Warning event on {name}");
    }
}

/// What a reviewer approves covers every action that runs: a new object's dependent is planned
/// over the object's dry run, with its own actions, in the preview and in the plan awaiting
/// approval alike; and renaming the object is shown as the replacement it is.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver previews:: -- --include-ignored"]
#[test]
fn the_preview_and_the_plan_awaiting_approval_show_dependents_actions_and_replacements() {
    let (cluster, _work, _controller, ci) = setup("preview-deps");
    let chain = manifest("chain", "  approval: Manual\n", &[("a", None), ("b", Some("a"))]);
    let (code, stdout, said) = preview(&ci, "chain", &chain, &["--output", "json"]);
    assert_eq!(code, 2, "{said}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    let plan = &answer["status"]["plan"];
    let resource = |plan: &Value, name: &str| {
        plan["resources"].as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or_default()
    };
    assert_eq!(plan["summary"], "2 to apply, 0 pending, 0 valid", "{plan:#}");
    let b = resource(plan, "b");
    assert_eq!(b["found"], "MISSING", "{b}");
    assert!(b["actions"].to_string().contains("Create ConfigMap"), "b's own actions: {b}");

    cluster.apply_yaml(&chain);
    let digest = pending_digest(&cluster, "chain", "");
    let pending = cluster.get(&["manifest", "chain"]).unwrap()["status"]["pendingPlan"].clone();
    let changes = pending["changes"].as_array().unwrap();
    let change = |name: &str| changes.iter().find(|c| c["name"] == name).cloned().unwrap_or_default();
    assert!(!change("b")["actions"].as_array().unwrap().is_empty(), "b's actions await approval: {pending:#}");
    assert!(!change("a")["actions"].as_array().unwrap().is_empty(), "{pending:#}");
    assert_eq!(approve(&cluster, "chain", &digest).0, 0);
    wait_for("both created", Duration::from_secs(60), || data(&cluster, "cm-b")["up"] == "cm-a");

    let renamed = chain.replace("name: cm-a}", "name: cm-a2}");
    let (code, stdout, said) = preview(&ci, "chain", &renamed, &["--output", "json"]);
    assert_eq!(code, 2, "{said}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    let plan = &answer["status"]["plan"];
    assert!(plan["summary"].as_str().unwrap().ends_with(", 1 to replace"), "{plan:#}");
    let a = resource(plan, "a");
    assert!(
        a["message"]
            .as_str()
            .unwrap_or_default()
            .contains(r#"must be replaced (object.metadata.name: "cm-a" → "cm-a2")"#),
        "{a}"
    );
    let old = plan["removals"].as_array().unwrap().iter().find(|r| r["name"] == "a").cloned().unwrap_or_default();
    assert_eq!(old["status"], "DELETE", "{plan:#}");
    assert!(cluster.get(&["configmap", "cm-a"]).is_some(), "a preview deletes nothing");
}
