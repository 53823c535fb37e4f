//! `deployster controller` given bad inputs at start-up: each a clear error and a non-zero exit
//! within seconds, never a silent hang. No cluster is needed: the API servers here point
//! nowhere, or are a stub that answers as Kubernetes does.
#![cfg(feature = "kube")]

use crate::support;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `deployster controller ARGS` with `kubeconfig`; fails the test if it is still running
/// after `limit`. Returns the exit code and stderr.
fn controller(kubeconfig: &std::path::Path, args: &[&str], limit: Duration) -> (i32, String) {
    let mut child = Command::new(support::deployster())
        .arg("controller")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the controller was still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status.code().unwrap_or(-1), stderr)
}

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\"}}}}]\n\
         users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
         current-context: x\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn metrics_addr() -> String {
    format!("127.0.0.1:{}", TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
}

#[test]
fn a_kubeconfig_that_points_nowhere_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = kubeconfig(dir.path(), &format!("https://127.0.0.1:{port}"));
    let (code, stderr) = controller(&config, &["--metrics-addr", &metrics_addr()], Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
    let expected = format!("error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}/");
    assert!(stderr.contains(&expected), "{stderr}");
    // Every command that needs the cluster fails so, with the same code (one rule: what cannot
    // be reached is a failure, 1; a refusal of the input is 2).
    std::fs::write(
        dir.path().join("app.yaml"),
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {name: app}\nspec: {resources: {}}\n",
    )
    .unwrap();
    for args in [
        &["approve", "app", "-n", "team"][..],
        &["preview", "app", "-n", "team", "-f", dir.path().join("app.yaml").to_str().unwrap()],
        &["graph", "--manifest", "app", "-n", "team"],
    ] {
        let output = Command::new(support::deployster()).args(args).env("KUBECONFIG", &config).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot reach the cluster"), "{args:?}: {stderr}");
    }
}

/// The fingerprint key is read before anything starts: a file missing or too short to be a key
/// is refused (2), named.
#[test]
fn a_fingerprint_key_file_that_cannot_be_a_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), "https://127.0.0.1:1");
    let short = dir.path().join("short");
    std::fs::write(&short, "tiny").unwrap();
    for (file, why) in [(dir.path().join("none"), "No such file"), (short, "at least 16 bytes")] {
        let flag = format!("--fingerprint-key-file={}", file.display());
        let (code, stderr) = controller(&config, &["--metrics-addr", &metrics_addr(), &flag], Duration::from_secs(10));
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(&format!("--fingerprint-key-file {}: ", file.display())), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
    }
}

#[test]
fn a_metrics_port_in_use_is_a_clear_error_before_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // The kubeconfig points nowhere too: the port is checked first, and named.
    let config = kubeconfig(dir.path(), "https://127.0.0.1:1");
    let (code, stderr) = controller(&config, &["--metrics-addr", &addr], Duration::from_secs(10));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&format!("cannot serve metrics and health on --metrics-addr {addr}")), "{stderr}");
    assert!(stderr.contains("Address already in use"), "{stderr}");
}

/// An API server that refuses everything with 403, as Kubernetes does when RBAC does not cover
/// a request.
fn forbidding_api_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 8192];
            let n = stream.read(&mut request).unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n]).lines().next().unwrap_or_default().to_string();
            let body = format!(
                r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"manifests.deployster.io is forbidden: User \"system:serviceaccount:ops:deployster\" cannot list resource \"manifests\" ({line})","reason":"Forbidden","code":403}}"#
            );
            let response = format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    url
}

#[test]
fn a_namespace_the_rbac_does_not_cover_is_named_with_the_chart_value_that_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &forbidding_api_server());
    let args = ["--metrics-addr", &metrics_addr(), "--namespace", "team-b"];
    let (code, stderr) = controller(&config, &args, Duration::from_secs(10));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("the controller may not list Manifests in namespace `team-b`"), "{stderr}");
    assert!(stderr.contains("list it in watchNamespaces"), "{stderr}");
}

#[test]
fn lease_flags_need_leader_election() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), "https://127.0.0.1:1");
    let (code, stderr) = controller(&config, &["--lease-namespace", "ops"], Duration::from_secs(10));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--leader-elect"), "{stderr}");
    let (code, stderr) = controller(&config, &["--leader-elect", "--lease-duration", "500ms"], Duration::from_secs(10));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("a whole number of seconds, at least 2s"), "{stderr}");
}
