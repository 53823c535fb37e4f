//! Tests of the runner: names, Pods, bookkeeping, on in-memory data.

use std::collections::BTreeMap;

use super::*;
use crate::pod::spec::{PlugSource, PodPlug};
use crate::pod_helper::entry::HelperCommand;

fn invocation() -> PodInvocation {
    PodInvocation {
        namespace: "team-a".into(),
        name: "unused".into(),
        image: "registry:5000/acme/db-type@sha256:abc".into(),
        helper_image: "registry/deployster/controller:0.1.0".into(),
        entry: HelperCommand {
            nonce: "n".into(),
            request: spec::request_path(),
            termination_log: "/dev/termination-log".into(),
            program: vec!["/type".into(), "state".into()],
            done: None,
        },
        service_account: Some("deployer".into()),
        plugs: Vec::new(),
        deadline: Duration::from_secs(60),
        labels: BTreeMap::new(),
        owner: None,
        run_as_user: Some(65532),
        options: Default::default(),
    }
}

/// One runner per identity: the same invocation of the same identity, whatever its
/// program, request or deadline; another for anything that isolates (namespace,
/// ServiceAccount, image digest, plugs, options, user).
#[test]
fn a_runner_is_named_after_its_identity_and_nothing_else() {
    let base = runner_name(&invocation());
    assert!(base.starts_with("dsr-db-type-") && base.len() <= 63, "{base}");
    assert!(base.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{base}");
    let mut same = invocation();
    same.entry.program = vec!["/type".into(), "act".into(), "create".into()];
    same.deadline = Duration::from_secs(900);
    assert_eq!(runner_name(&same), base, "what one invocation asks does not make another runner");
    let differs: [fn(&mut PodInvocation); 6] = [
        |i| i.namespace = "team-b".into(),
        |i| i.service_account = None,
        |i| i.image = "registry:5000/acme/db-type@sha256:def".into(),
        |i| {
            i.plugs = vec![PodPlug {
                name: "data".into(),
                container_path: "/data".into(),
                source: PlugSource::Claim { name: "pvc".into() },
            }]
        },
        |i| i.options.node_selector = BTreeMap::from([("pool".into(), "deploy".into())]),
        |i| i.run_as_user = Some(1000),
    ];
    for change in differs {
        let mut other = invocation();
        change(&mut other);
        assert_ne!(runner_name(&other), base, "{other:?}");
    }
}

/// A runner that goes takes its figures with it: no longer alive, and no series of its
/// invocations left behind in `/metrics`; another runner's series stays.
#[test]
fn a_runner_gone_leaves_no_series_behind() {
    let runners = Runners::default();
    let (a, mut b) = (invocation(), invocation());
    b.name = "other".into();
    for runner in [&a, &b] {
        runners.note_used(runner);
        runners.metrics.served.get_or_create(&RunnerLabels { runner: runner.name.clone() }).inc();
    }
    runners.note_used(&a);
    assert_eq!(runners.metrics.alive.get(), 2, "a runner used twice is one alive");
    runners.note_gone(&a);
    runners.note_gone(&a);
    assert_eq!(runners.metrics.alive.get(), 1, "gone twice is one gone");
    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("served", "", runners.metrics.served.clone());
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(!text.contains("runner=\"unused\""), "{text}");
    assert!(text.contains("runner=\"other\""), "{text}");
}

/// A stopping replica deletes the runners it used, but not those of Manifests another
/// replica reconciles now (their shard moved): that replica may be using them.
#[tokio::test]
async fn a_stopping_replica_leaves_the_runners_of_manifests_handed_over() {
    let client = kube_fake_client::ClientBuilder::new().build().await.unwrap();
    let runners = Runners::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    for manifest in ["kept-here", "handed-over"] {
        let mut invocation = invocation();
        invocation.name = format!("dsr-{manifest}");
        invocation.owner = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "deployster.io/v1alpha1".into(),
            kind: "Manifest".into(),
            name: manifest.into(),
            uid: format!("uid-{manifest}"),
            ..Default::default()
        });
        pods.create(&PostParams::default(), &spec::runner_pod(&invocation, Duration::from_secs(600))).await.unwrap();
        runners.note_used(&invocation);
    }
    let reaped = runners.reap(&client, &|namespace, manifest| namespace == "team-a" && manifest == "handed-over").await;
    assert_eq!(reaped, 1);
    let left: Vec<String> = pods.list(&Default::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert_eq!(left, ["dsr-handed-over"]);
    assert_eq!(runners.metrics.alive.get(), 0, "both forgotten here");
}

/// The runner's Pod: made as an invocation's, restricted and without the token, but with
/// no request, no deadline, and its type's container holding until idle.
#[test]
fn a_runner_pod_holds_idle_with_no_request_and_no_deadline() {
    let pod = spec::runner_pod(&invocation(), Duration::from_secs(600));
    let spec = pod.spec.unwrap();
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.active_deadline_seconds, None, "a runner lives on");
    assert_eq!(spec.service_account_name.as_deref(), Some("deployer"));
    let main = &spec.containers[1];
    let command = main.command.clone().unwrap();
    assert_eq!(
        command[1..],
        ["__pod-serve", "--locks", "/tmp", "--hold", "--idle", "600", "--done", "/.deployster/bin/done"]
            .map(String::from)
    );
    let volumes: Vec<String> = spec.volumes.unwrap().into_iter().map(|v| v.name).collect();
    assert_eq!(volumes, ["helper", "tmp"], "no request Secret");
    assert_eq!(main.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
    let exec = spec::runner_command(&ServeMode::Invocation);
    assert_eq!(exec, ["/.deployster/bin/deployster", "__pod-serve", "--locks", "/tmp"].map(String::from));
}
