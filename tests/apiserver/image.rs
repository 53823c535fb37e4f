//! The controller image, built by `image/build.sh` and checked through the Docker API: what is in
//! it, who it runs as, `--version` and `crd`, and — when a test API server is given
//! (`DEPLOYSTER_E2E_KUBECONFIG`) — the controller in it reconciling a Manifest with a built-in
//! type. `#[ignore]`d like the other Docker tests; without a daemon it fails.
#![cfg(all(feature = "docker", feature = "kube"))]

use crate::support;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::cluster::{Cluster, free_port, http_get, wait_for};
use crate::support::docker::DockerEnv;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{LogsOptionsBuilder, RemoveContainerOptionsBuilder, WaitContainerOptions};
use futures::StreamExt;

/// Builds the image with the project's script; its name.
fn build_image() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(root.join("image/build.sh"))
        .env("PROFILE", support::docker::static_profile())
        .output()
        .expect("run image/build.sh");
    assert!(output.status.success(), "image/build.sh failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).lines().last().expect("the script prints the image").to_string()
}

/// Runs the image with `cmd` to completion; its exit code and output.
fn run(env: &DockerEnv, image: &str, cmd: &[&str]) -> (i64, String) {
    env.block_on(async {
        let id = create(&env.docker, image, cmd, &[], HostConfig::default()).await;
        env.docker.start_container(&id, None).await.expect("start");
        let code = match env.docker.wait_container(&id, None::<WaitContainerOptions>).next().await {
            Some(Ok(r)) => r.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            other => panic!("waiting for the container: {other:?}"),
        };
        let output = logs(&env.docker, &id).await;
        remove(&env.docker, &id).await;
        (code, output)
    })
}

async fn create(docker: &Docker, image: &str, cmd: &[&str], env: &[&str], host_config: HostConfig) -> String {
    let body = ContainerCreateBody {
        image: Some(image.into()),
        cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
        env: Some(env.iter().map(|s| s.to_string()).collect()),
        labels: Some([("deployster.io/test".to_string(), "image".to_string())].into()),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    };
    docker.create_container(None, body).await.expect("create the container").id
}

async fn logs(docker: &Docker, id: &str) -> String {
    let options = LogsOptionsBuilder::default().stdout(true).stderr(true).build();
    let mut stream = docker.logs(id, Some(options));
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        match chunk.expect("read logs") {
            LogOutput::StdOut { message } | LogOutput::StdErr { message } => {
                text.push_str(&String::from_utf8_lossy(&message))
            }
            _ => {}
        }
    }
    text
}

async fn remove(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::default().force(true).build();
    let _ = docker.remove_container(id, Some(options)).await;
}

/// Every path in the image's layers.
fn files_in(env: &DockerEnv, image: &str) -> BTreeSet<String> {
    let saved: Vec<u8> = env.block_on(async {
        let mut stream = env.docker.export_image(image);
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            bytes.extend_from_slice(&chunk.expect("export the image"));
        }
        bytes
    });
    let mut files = BTreeSet::new();
    let mut outer = tar::Archive::new(saved.as_slice());
    for entry in outer.entries().unwrap() {
        let mut entry = entry.unwrap();
        if !entry.path().unwrap().to_string_lossy().ends_with("layer.tar") {
            continue;
        }
        let mut layer = Vec::new();
        entry.read_to_end(&mut layer).unwrap();
        for file in tar::Archive::new(layer.as_slice()).entries().unwrap() {
            files.insert(file.unwrap().path().unwrap().to_string_lossy().trim_end_matches('/').to_string());
        }
    }
    files
}

#[ignore = "needs Docker and a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver image:: -- --include-ignored"]
#[test]
fn the_image_holds_one_static_binary_run_as_a_numeric_non_root_user() {
    let env = support::docker::env();
    let image = build_image();
    assert_eq!(image, format!("deployster/controller:{}", env!("CARGO_PKG_VERSION")));

    let inspected = env.block_on(env.docker.inspect_image(&image)).expect("inspect the image");
    let config = inspected.config.expect("an image config");
    assert_eq!(config.user.as_deref(), Some("65532:65532"), "a numeric UID:GID, so runAsNonRoot can verify it");
    assert_eq!(config.entrypoint, Some(vec!["/deployster".to_string()]));
    let files = ["deployster", "tmp", "etc", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt"];
    assert_eq!(files_in(env, &image), files.iter().map(|f| f.to_string()).collect(), "the binary and a CA bundle");

    let (code, output) = run(env, &image, &["--version"]);
    assert_eq!((code, output.trim()), (0, format!("deployster {}", env!("CARGO_PKG_VERSION")).as_str()));
    let (code, crd) = run(env, &image, &["crd"]);
    assert_eq!(code, 0, "{crd}");
    let committed = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/manifest.yaml")).unwrap();
    assert_eq!(crd, committed, "the image prints the committed CRD");

    // The controller in the image, against the test API server, runs a built-in type.
    let cluster = Cluster::new("image");
    let metrics = format!("127.0.0.1:{}", free_port());
    // A copy the image's user may read (the real server's kubeconfig is root's, mode 0600).
    let copy = tempfile::tempdir().unwrap();
    let kubeconfig = copy.path().join("kubeconfig");
    std::fs::copy(&cluster.kubeconfig, &kubeconfig).unwrap();
    std::os::unix::fs::chown(&kubeconfig, Some(65532), Some(65532)).unwrap();
    let host_config = HostConfig {
        network_mode: Some("host".into()),
        binds: Some(vec![format!("{}:/kubeconfig:ro", kubeconfig.display())]),
        ..HostConfig::default()
    };
    // Built-ins beside it (`--executor docker`): this API server has no node to run Pods on.
    let cmd = [
        "controller",
        "--log-format",
        "json",
        "--namespace",
        &cluster.namespace,
        "--metrics-addr",
        &metrics,
        "--executor",
        "docker",
    ];
    let id = env.block_on(async {
        let id = create(&env.docker, &image, &cmd, &["KUBECONFIG=/kubeconfig"], host_config).await;
        env.docker.start_container(&id, None).await.expect("start");
        id
    });
    let ready = || http_get(&metrics, "/readyz").is_some_and(|(code, _)| code == 200);
    let outcome = std::panic::catch_unwind(|| {
        wait_for("the controller in the image to be ready", Duration::from_secs(60), ready);
        cluster.apply_yaml(
            "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {name: in-image}\nspec:\n  resources:\n    d: {type: builtin/directory, config: {path: /tmp/made-in-the-image}}\n",
        );
        wait_for("the Manifest to be Ready", Duration::from_secs(60), || {
            cluster.condition("in-image", "Ready") == "True"
        });
    });
    let log = env.block_on(logs(&env.docker, &id));
    env.block_on(remove(&env.docker, &id));
    assert!(outcome.is_ok(), "the controller's log:\n{log}");
    // JSON logs name the object and the run on every line of a pass.
    let passes: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "pass finished")
        .collect();
    assert!(!passes.is_empty(), "a pass was logged: {log}");
    for line in passes {
        assert_eq!(line["span"]["manifest"], "in-image", "{line}");
        assert_eq!(line["span"]["namespace"], cluster.namespace.as_str(), "{line}");
        assert!(line["span"]["run_id"].as_str().is_some_and(|id| id.len() == 36), "{line}");
    }
}
