//! The Helm chart `charts/deployster`, held against the code: its CRDs are `crds/`,
//! its RBAC rules are exactly `controller::rbac::API_ACCESS`, the arguments it renders are ones
//! the binary accepts, bad values are refused at install time, and it installs into (and
//! uninstalls cleanly from) the test API server.
//!
//! Needs `helm` (see tests/support/helm.rs). Its installation on a cluster whose Pods run is
//! tests/cluster/helm_cluster.rs.
#![cfg(feature = "kube")]

use crate::support;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::cluster::{Cluster, free_port, wait_for};
use crate::support::helm::{chart, helm, run_helm};
use deployster::controller::rbac::{API_ACCESS, Scope};
use serde::Deserialize;
use serde_json::Value;

/// The chart rendered with `extra` arguments, as JSON documents.
fn render(helm: &Path, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let args = [&["template", "rel", chart.to_str().unwrap(), "--namespace", "ops"], extra].concat();
    let (ok, stdout, stderr) = run_helm(helm, &args);
    assert!(ok, "helm template {extra:?} failed: {stderr}");
    serde_norway::Deserializer::from_str(&stdout)
        .filter_map(|doc| Option::<Value>::deserialize(doc).expect("helm renders YAML"))
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// (group, resource, verb) of every rule of a Role or ClusterRole.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let strings = |v: &Value| v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>();
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

fn listed(scopes: &[Scope]) -> BTreeSet<(String, String, String)> {
    API_ACCESS
        .iter()
        .filter(|a| scopes.contains(&a.scope))
        .flat_map(|a| a.verbs.iter().map(|v| (a.group.to_string(), a.resource.to_string(), v.to_string())))
        .collect()
}

#[test]
fn the_chart_carries_the_committed_crds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["manifest.yaml", "pipeline.yaml"] {
        let committed = std::fs::read_to_string(root.join("crds").join(file)).unwrap();
        let in_chart = std::fs::read_to_string(chart().join("crds").join(file)).unwrap();
        assert!(
            in_chart == committed,
            "charts/deployster/crds/{file} differs from crds/; fix: cp crds/{file} charts/deployster/crds/"
        );
    }
}

#[ignore = "needs helm: DEPLOYSTER_HELM=$(../shared/tools/install-helm $PWD/target/tools | tail -1) cargo test --test apiserver helm:: -- --include-ignored"]
#[test]
fn the_chart_lints_with_default_values_and_with_every_option() {
    let helm = helm();
    let chart = chart();
    let (ok, out, err) = run_helm(&helm, &["lint", "--strict", chart.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    // helm lint cannot be told about the ServiceMonitor API; `template` below renders it.
    let values = chart.join("ci/all-options-values.yaml");
    let args = [
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "-f",
        values.to_str().unwrap(),
        "--set",
        "metrics.serviceMonitor.enabled=false",
        "--set",
        "metrics.prometheusRule.enabled=false",
    ];
    let (ok, out, err) = run_helm(&helm, &args);
    assert!(ok, "{out}{err}");
}

/// The RBAC the chart grants is exactly what the controller lists: cluster-wide when it
/// watches every namespace, a Role per namespace otherwise, and the lease in its own namespace.
#[ignore = "needs helm: DEPLOYSTER_HELM=$(../shared/tools/install-helm $PWD/target/tools | tail -1) cargo test --test apiserver helm:: -- --include-ignored"]
#[test]
fn the_chart_rbac_is_exactly_what_the_controller_uses() {
    let helm = helm();
    let all = render(&helm, &[]);
    // What CI is bound to, to ask for previews: ManifestPreviews, and nothing else.
    let requester = |docs: &[Value]| {
        let role = of_kind(docs, "ClusterRole")
            .into_iter()
            .find(|r| r["metadata"]["name"] == "rel-deployster-preview-requester");
        grants(role.expect("the preview requester's ClusterRole"))
    };
    let asks: BTreeSet<(String, String, String)> =
        ["create", "get", "delete"].map(|v| ("deployster.io".into(), "manifestpreviews".into(), v.into())).into();
    assert_eq!(requester(&all), asks);
    let controllers = |docs: &[Value]| -> Vec<Value> {
        of_kind(docs, "ClusterRole")
            .into_iter()
            .filter(|r| r["metadata"]["name"] == "rel-deployster")
            .cloned()
            .collect()
    };
    let cluster_roles = controllers(&all);
    assert_eq!(cluster_roles.len(), 1);
    assert_eq!(grants(&cluster_roles[0]), listed(&[Scope::Watched, Scope::Pods]), "image types run as Pods by default");
    let roles = of_kind(&all, "Role");
    assert_eq!(roles.len(), 1, "only the lease's Role");
    assert_eq!(roles[0]["metadata"]["namespace"], "ops");
    assert_eq!(grants(roles[0]), listed(&[Scope::Lease]));
    let docker = render(&helm, &["--set", "docker.enabled=true"]);
    assert_eq!(grants(&controllers(&docker)[0]), listed(&[Scope::Watched]), "no Pods: no rights on Pods");
    assert_eq!(of_kind(&all, "ClusterRoleBinding").len(), 1);

    let some = render(&helm, &["--set", "watchNamespaces={team-a,team-b}"]);
    assert!(controllers(&some).is_empty(), "nothing cluster-wide when namespaces are listed");
    assert_eq!(requester(&some), asks, "a ClusterRole to bind in a namespace, granting nothing until bound");
    let roles = of_kind(&some, "Role");
    let namespaced: Vec<&str> = roles.iter().map(|r| r["metadata"]["namespace"].as_str().unwrap()).collect();
    assert_eq!(namespaced, ["team-a", "team-b", "ops"]);
    for role in &roles[..2] {
        assert_eq!(grants(role), listed(&[Scope::Watched, Scope::Pods]));
    }
    assert_eq!(grants(roles[2]), listed(&[Scope::Lease]));
    let bindings = of_kind(&some, "RoleBinding");
    assert_eq!(bindings.len(), 3);
    for binding in bindings {
        assert_eq!(binding["subjects"][0]["name"], "rel-deployster");
        assert_eq!(binding["subjects"][0]["namespace"], "ops");
    }
    let no_election = render(&helm, &["--set", "leaderElection.enabled=false"]);
    assert!(of_kind(&no_election, "Role").is_empty(), "no lease, no lease Role");
}

fn deployment(docs: &[Value]) -> &Value {
    of_kind(docs, "Deployment")[0]
}

fn args_of(deployment: &Value) -> Vec<String> {
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    args.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

/// The binary accepts the rendered arguments: it gets past parsing (exit 2 would be a usage
/// error) and stops at the API server, which points nowhere here.
fn assert_the_binary_accepts(args: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let metrics = format!("--metrics-addr=127.0.0.1:{}", free_port());
    // The Secret's file, as the Pod has it mounted.
    std::fs::write(dir.path().join("key"), "k".repeat(48)).unwrap();
    let key = format!("--fingerprint-key-file={}", dir.path().join("key").display());
    let args: Vec<&str> = args
        .iter()
        .map(|a| match a {
            a if a.starts_with("--metrics-addr=") => metrics.as_str(),
            a if a.starts_with("--fingerprint-key-file=") => key.as_str(),
            a => a.as_str(),
        })
        .collect();
    let output = Command::new(support::deployster()).args(&args).env("KUBECONFIG", &kubeconfig).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(stderr.contains("cannot reach the Kubernetes API server"), "{args:?}: {stderr}");
}

#[ignore = "needs helm: DEPLOYSTER_HELM=$(../shared/tools/install-helm $PWD/target/tools | tail -1) cargo test --test apiserver helm:: -- --include-ignored"]
#[test]
fn the_default_values_render_a_hardened_deployment_the_binary_accepts() {
    let helm = helm();
    let docs = render(&helm, &[]);
    let deployment = deployment(&docs);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], format!("deployster/controller:{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532, "the image's numeric user");
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let hardening = &container["securityContext"];
    assert_eq!(hardening["allowPrivilegeEscalation"], false);
    assert_eq!(hardening["readOnlyRootFilesystem"], true);
    assert_eq!(hardening["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["volumeMounts"][0]["mountPath"], "/tmp");
    assert!(pod["volumes"][0]["emptyDir"].is_object(), "a writable emptyDir for scratch space");
    assert_eq!(pod["terminationGracePeriodSeconds"], 35, "shutdownGrace (20s) + 15 s");
    let args = args_of(deployment);
    let helper = format!("--helper-image=deployster/controller:{}", env!("CARGO_PKG_VERSION"));
    for expected in [
        "--leader-elect",
        "--lease-namespace=ops",
        "--metrics-addr=0.0.0.0:8080",
        "--plug-dir=/tmp/plugs",
        "--executor=pod",
        "--runner-idle=10m",
        "--fingerprint-key-file=/etc/deployster/fingerprint-key/key",
        helper.as_str(),
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    assert!(!args.iter().any(|a| a.starts_with("--namespace")), "every namespace by default");
    assert!(!args.iter().any(|a| a.starts_with("--shards")), "one leader by default, no sharding");
    assert_the_binary_accepts(&args);
    let service = of_kind(&docs, "Service")[0];
    assert_eq!(service["spec"]["ports"][0]["port"], 8080);
    assert!(of_kind(&docs, "ServiceMonitor").is_empty());
    // The fingerprint key: a Secret of 48 random characters, mounted where the flag reads it.
    let key = of_kind(&docs, "Secret").into_iter().find(|s| s["metadata"]["name"] == "rel-deployster-fingerprint-key");
    let key = key.expect("the fingerprint key's Secret");
    let decoded =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, key["data"]["key"].as_str().unwrap());
    assert_eq!(decoded.unwrap().len(), 48);
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/etc/deployster/fingerprint-key" && m["readOnly"] == true));
    let volumes = pod["volumes"].as_array().unwrap();
    assert!(volumes.iter().any(|v| v["secret"]["secretName"] == "rel-deployster-fingerprint-key"), "{volumes:?}");
}

#[ignore = "needs helm: DEPLOYSTER_HELM=$(../shared/tools/install-helm $PWD/target/tools | tail -1) cargo test --test apiserver helm:: -- --include-ignored"]
#[test]
fn every_option_renders_and_the_binary_accepts_it() {
    let helm = helm();
    let values = chart().join("ci/all-options-values.yaml");
    let api = "monitoring.coreos.com/v1/ServiceMonitor";
    let rules_api = "monitoring.coreos.com/v1/PrometheusRule";
    let docs = render(&helm, &["-f", values.to_str().unwrap(), "--api-versions", api, "--api-versions", rules_api]);
    let deployment = deployment(&docs);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(pod["serviceAccountName"], "deployster-sa");
    assert_eq!(pod["securityContext"]["supplementalGroups"], serde_json::json!([999]), "the Docker socket's group");
    let volumes = pod["volumes"].as_array().unwrap();
    let host_path = |name: &str| volumes.iter().find(|v| v["name"] == name).map(|v| v["hostPath"]["path"].clone());
    assert_eq!(host_path("docker-socket"), Some("/run/docker.sock".into()));
    assert_eq!(host_path("plugs"), Some("/srv/deployster/plugs".into()));
    let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
    assert!(
        mounts.iter().any(|m| m["name"] == "plugs" && m["mountPath"] == "/srv/deployster/plugs"),
        "same path as on the node"
    );
    let args = args_of(deployment);
    for expected in [
        "--namespace=team-a",
        "--namespace=team-b",
        "--plug-dir=/srv/deployster/plugs",
        "--pull=always",
        "--executor=docker",
        "--allow-local-programs",
        "--shards=12",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    assert!(!args.iter().any(|a| a.starts_with("--helper-image")), "no Pods with docker.enabled: {args:?}");
    assert_the_binary_accepts(&args);
    let container = &pod["containers"][0];
    assert!(container["env"].as_array().unwrap().iter().any(|e| e["name"] == "KUBECONFIG"), "extraEnv");
    assert!(volumes.iter().any(|v| v["secret"]["secretName"] == "controller-kubeconfig"), "extraVolumes");
    assert!(mounts.iter().any(|m| m["mountPath"] == "/etc/deployster/kubeconfig"), "extraVolumeMounts");
    let pods_args = render(
        &helm,
        &[
            "-f",
            values.to_str().unwrap(),
            "--api-versions",
            api,
            "--api-versions",
            rules_api,
            "--set",
            "docker.enabled=false",
        ],
    );
    let args = args_of(of_kind(&pods_args, "Deployment")[0]);
    for expected in [
        "--executor=pod",
        "--helper-image=registry.example.com/platform/deployster-controller:0.1.0-rc1",
        "--insecure-registry=registry.internal:5000",
        "--runner-idle=15m",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    assert_the_binary_accepts(&args);
    let monitor = of_kind(&docs, "ServiceMonitor")[0];
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(of_kind(&docs, "Service")[0]["spec"]["type"], "NodePort");
    // The alerts are the chart's rule file as promtool checked and tested it, whole.
    let rule = of_kind(&docs, "PrometheusRule")[0];
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let file: Value =
        serde_norway::from_str(&std::fs::read_to_string(chart().join("files/prometheus-rules.yaml")).unwrap()).unwrap();
    assert_eq!(rule["spec"]["groups"], file["groups"]);
    // The dashboard, where Grafana's sidecar finds it.
    let dashboard =
        of_kind(&docs, "ConfigMap").into_iter().find(|c| c["metadata"]["name"] == "rel-deployster-dashboard");
    let dashboard = dashboard.expect("the dashboard's ConfigMap");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(dashboard["data"]["deployster.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["title"], "Deployster");
}

#[ignore = "needs helm: DEPLOYSTER_HELM=$(../shared/tools/install-helm $PWD/target/tools | tail -1) cargo test --test apiserver helm:: -- --include-ignored"]
#[test]
fn bad_values_are_refused_at_install_time() {
    let helm = helm();
    let chart = chart();
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "replicas=two"], "replicas: Invalid type. Expected: integer"),
        (&["--set", "replica=2"], "Additional property replica is not allowed"),
        (&["--set", "metrics.port=http"], "metrics.port: Invalid type"),
        (&["--set", "leaderElection.leaseDuration=500ms"], "leaderElection.leaseDuration: Does not match pattern"),
        (&["--set", "watchNamespaces={Team_A}"], "watchNamespaces.0: Does not match pattern"),
        (&["--set", "docker.pull=sometimes"], "docker.pull: docker.pull must be one of"),
        (&["--set", "pods.runnerIdle=forever"], "pods.runnerIdle: Must validate at least one schema"),
        (&["--set-json", r#"extraVolumeMounts=[{"name": "x"}]"#], "mountPath is required"),
        (
            &["--set", "replicas=2", "--set", "leaderElection.enabled=false"],
            "replicas > 1 needs leaderElection.enabled",
        ),
        (
            &["--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false"],
            "sharding.enabled needs leaderElection.enabled",
        ),
        (&["--set", "sharding.shards=0"], "sharding.shards: Must be greater than or equal to 1"),
        (&["--set-json", r#"extraArgs=["--namespace=other"]"#], "give namespaces in watchNamespaces"),
        (&["--set", "metrics.serviceMonitor.enabled=true"], "needs the Prometheus operator's monitoring.coreos.com/v1"),
        (&["--set", "metrics.prometheusRule.enabled=true"], "monitoring.coreos.com/v1 PrometheusRule API"),
    ];
    for (extra, expected) in cases {
        let args = [&["template", "rel", chart.to_str().unwrap()], *extra].concat();
        let (ok, _, stderr) = run_helm(&helm, &args);
        assert!(!ok, "{extra:?} was accepted");
        assert!(stderr.contains(expected), "{extra:?}: expected `{expected}` in: {stderr}");
    }
}

/// Installed into the test API server, the chart's objects are created; uninstalled, they go.
/// (The API server runs no Pods, and enforces no RBAC: that the rules suffice is checked above,
/// against the controller's own list.)
#[ignore = "needs helm and a Kubernetes API server: DEPLOYSTER_HELM=<helm> DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver helm:: -- --include-ignored"]
#[test]
fn the_chart_installs_and_uninstalls_cleanly() {
    let helm = helm();
    let cluster = Cluster::new("helm");
    let ns = cluster.namespace.as_str();
    let release = format!("ctl-{}", std::process::id());
    let kube = ["--kubeconfig", cluster.kubeconfig.as_str(), "--namespace", ns];
    let chart = chart();
    // A watched namespace that does not exist is refused, by name, before anything is created.
    let missing = format!("watchNamespaces={{{ns},not-there-{}}}", std::process::id());
    let refused = [&["install", release.as_str(), chart.to_str().unwrap(), "--set", &missing], &kube[..]].concat();
    let (ok, _, err) = run_helm(&helm, &refused);
    assert!(!ok, "installed with a missing namespace");
    assert!(err.contains(&format!("namespace \"not-there-{}\" does not exist", std::process::id())), "{err}");
    let install = [&["install", release.as_str(), chart.to_str().unwrap(), "--wait=false"], &kube[..]].concat();
    let (ok, out, err) = run_helm(&helm, &install);
    assert!(ok, "{out}{err}");
    assert!(out.contains("The Deployster controller is installed"), "NOTES.txt is shown: {out}");
    let fullname = format!("{release}-deployster");
    let exists = |kind: &str, cluster_wide: bool| {
        let args = ["get", kind, fullname.as_str(), "-o", "name"];
        if cluster_wide { cluster.kubectl(&args).0 } else { cluster.kubectl(&cluster.ns(&args)).0 }
    };
    for kind in ["serviceaccounts", "deployments.apps"] {
        assert!(exists(kind, false), "{kind} {fullname}");
    }
    let key_secret = format!("{fullname}-fingerprint-key");
    let key_of = || cluster.kubectl(&cluster.ns(&["get", "secret", &key_secret, "-o", "jsonpath={.data.key}"]));
    let (found, key) = key_of();
    assert!(found && key.len() > 40, "the fingerprint key's Secret: {key}");
    let upgrade = [&["upgrade", release.as_str(), chart.to_str().unwrap(), "--wait=false"], &kube[..]].concat();
    let (ok, out, err) = run_helm(&helm, &upgrade);
    assert!(ok, "{out}{err}");
    assert_eq!(key_of().1, key, "an upgrade keeps the key (fingerprints stay comparable)");
    assert!(cluster.kubectl(&cluster.ns(&["get", "services", &format!("{fullname}-metrics")])).0);
    assert!(
        cluster
            .kubectl(&cluster.ns(&["get", "roles.rbac.authorization.k8s.io", &format!("{fullname}-leader-election")]))
            .0
    );
    for kind in ["clusterroles.rbac.authorization.k8s.io", "clusterrolebindings.rbac.authorization.k8s.io"] {
        assert!(exists(kind, true), "{kind} {fullname}");
    }
    let (ok, out, err) = run_helm(&helm, &[&["uninstall", release.as_str()], &kube[..]].concat());
    assert!(ok, "{out}{err}");
    wait_for("the release's objects to go", Duration::from_secs(30), || {
        !exists("deployments.apps", false)
            && !exists("serviceaccounts", false)
            && !exists("clusterroles.rbac.authorization.k8s.io", true)
    });
    assert!(
        cluster.kubectl(&["get", "crd", "manifests.deployster.io"]).0,
        "Helm keeps CRDs: Manifests are not deleted with the chart"
    );
}
