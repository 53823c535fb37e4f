//! ManifestPreviews on a real API server; prints figures.
//! `DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig of ../shared/apiserver/up.sh> cargo bench --bench previews`
//!
//! A controller (this build's binary) watches a fresh namespace holding the Manifest `app` of 4
//! ConfigMaps (`builtin/kubernetes`) and `steady` of 10. Figures: how long `deployster preview`
//! takes to answer for a proposal changing one of `app`'s (median of 5, one at a time; target
//! ≤ 5 s), how long 20 previews asked at once take, and how long the controller takes to correct
//! a drifted ConfigMap of `steady` alone and while those 20 previews are planned (median of 5
//! each; target: at most 1.5× slower).
//! Image types are not part of it: the API server alone runs no Pods (the cluster tests do).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn kubectl(kubeconfig: &str, args: &[&str]) -> String {
    let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Manifest `name` of `count` ConfigMaps `<name>-<i>`, the first with data `a: <value>`.
fn manifest(name: &str, count: usize, value: &str) -> String {
    let mut yaml = format!(
        "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nmetadata: {{name: {name}}}\nspec:\n  interval: 1h\n  \
         serviceAccountName: deployer\n  resources:\n"
    );
    for i in 0..count {
        let data = if i == 0 { value } else { "b" };
        yaml.push_str(&format!(
            "    c{i}:\n      type: builtin/kubernetes\n      config: {{object: {{apiVersion: v1, kind: ConfigMap, \
             metadata: {{name: {name}-{i}}}, data: {{a: {data}}}}}}}\n"
        ));
    }
    yaml
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `deployster preview app -f file`, started.
fn preview(kubeconfig: &str, namespace: &str, file: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args(["preview", "app", "-n", namespace, "-f", file.to_str().unwrap(), "--timeout", "120s"])
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("deployster")
}

fn waited(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "changes pending: {}", String::from_utf8_lossy(&out.stderr));
}

/// How long the controller takes to put back ConfigMap `steady-<n>`, edited behind its back
/// (each once: one edited again and again is corrected after a growing wait, on purpose).
fn correction(kubeconfig: &str, namespace: &str, n: usize) -> Duration {
    let started = Instant::now();
    let name = format!("steady-{n}");
    let patch = r#"{"data":{"a":"x"}}"#;
    kubectl(kubeconfig, &["-n", namespace, "patch", "configmap", &name, "--type", "merge", "-p", patch]);
    loop {
        let a = kubectl(kubeconfig, &["-n", namespace, "get", "configmap", &name, "-o", "jsonpath={.data.a}"]);
        if a == "b" {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{name} not corrected");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn main() {
    let Ok(kubeconfig) = std::env::var("DEPLOYSTER_E2E_KUBECONFIG") else {
        eprintln!("no API server (DEPLOYSTER_E2E_KUBECONFIG): nothing to measure");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for crd in ["manifest", "pipeline", "preview"] {
        kubectl(&kubeconfig, &["apply", "-f", root.join(format!("crds/{crd}.yaml")).to_str().unwrap()]);
    }
    let namespace = format!("bench-previews-{}", std::process::id());
    kubectl(&kubeconfig, &["create", "namespace", &namespace]);
    let ns =
        |args: &[&str]| [&["-n", namespace.as_str()], args].concat().iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for args in [
        ns(&["create", "serviceaccount", "deployer"]),
        ns(&["create", "role", "deployer", "--verb", "get,list,watch,create,patch,delete", "--resource", "configmaps"]),
        ns(&[
            "create",
            "rolebinding",
            "deployer",
            "--role",
            "deployer",
            "--serviceaccount",
            &format!("{namespace}:deployer"),
        ]),
    ] {
        kubectl(&kubeconfig, &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut controller = Command::new(env!("CARGO_BIN_EXE_deployster"))
        .args(["controller", "--namespace", &namespace, "--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--plug-dir", dir.path().join("plugs").to_str().unwrap()])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
        .spawn()
        .expect("the controller");
    let applied = dir.path().join("app.yaml");
    std::fs::write(&applied, manifest("app", 4, "b") + "---\n" + &manifest("steady", 10, "b")).unwrap();
    kubectl(&kubeconfig, &["-n", &namespace, "apply", "-f", applied.to_str().unwrap()]);
    let started = Instant::now();
    while kubectl(&kubeconfig, &["-n", &namespace, "get", "configmap", "-o", "name"]).lines().count() < 14 {
        assert!(started.elapsed() < Duration::from_secs(120), "the Manifest was not applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    let proposed = dir.path().join("proposed.yaml");
    std::fs::write(&proposed, manifest("app", 4, "z")).unwrap();

    let one: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            waited(preview(&kubeconfig, &namespace, &proposed));
            started.elapsed()
        })
        .collect();
    println!("one preview answered in {:.2} s (median of 5; target ≤ 5 s)", median(one).as_secs_f64());

    // Its watches are up once its first pass is recorded: give it that.
    std::thread::sleep(Duration::from_secs(2));
    let alone: Vec<Duration> = (0..5).map(|n| correction(&kubeconfig, &namespace, n)).collect();
    let alone = median(alone);
    let started = Instant::now();
    let many: Vec<Child> = (0..20).map(|_| preview(&kubeconfig, &namespace, &proposed)).collect();
    let busy: Vec<Duration> = (5..10).map(|n| correction(&kubeconfig, &namespace, n)).collect();
    many.into_iter().for_each(waited);
    let all = started.elapsed();
    let busy = median(busy);
    println!("20 previews at once all answered in {:.2} s", all.as_secs_f64());
    println!(
        "a drift correction of the Manifest: {:.0} ms alone, {:.0} ms while 20 previews are planned: {:.2}× (target ≤ 1.5×)",
        alone.as_secs_f64() * 1000.0,
        busy.as_secs_f64() * 1000.0,
        busy.as_secs_f64() / alone.as_secs_f64()
    );
    let _ = controller.kill();
    let _ = controller.wait();
    kubectl(&kubeconfig, &["delete", "namespace", &namespace, "--wait=false"]);
}
