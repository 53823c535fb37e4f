//! A Kubernetes API server for the end-to-end tests: `DEPLOYSTER_E2E_KUBECONFIG` names its
//! kubeconfig (`.ci/run` starts `../shared/apiserver/`; kind or k3d work too). Tests read the
//! server's answers as JSON, never the tables `kubectl get` prints (their columns differ
//! between servers).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A namespaced CustomResourceDefinition of `kind` in `group`, served and stored as `v1`, with
/// `schema` as its `openAPIV3Schema` and, when `status`, the status subresource: as one line of
/// JSON, which a manifest's YAML takes as the object.
pub fn crd(group: &str, kind: &str, schema: Value, status: bool) -> String {
    let singular = kind.to_lowercase();
    let mut version =
        serde_json::json!({"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}});
    if status {
        version["subresources"] = serde_json::json!({"status": {}});
    }
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{singular}s.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": format!("{singular}s"), "singular": singular, "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [version]
        }
    })
    .to_string()
}

/// Turns at the clusters and servers the tests share: tests that use one hold a turn
/// [`beside`] the others for as long as they use it; a test that must be alone takes them all.
static TURNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

std::thread_local! {
    /// Turns this thread holds: one is enough (a second read of `TURNS` while a test waits
    /// to be alone would wait for ever), and none is needed by a test that is alone.
    static HELD: std::cell::Cell<(usize, bool)> = const { std::cell::Cell::new((0, false)) };
}

/// A test alone among those holding turns, until dropped.
pub struct Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>);

impl Drop for Alone {
    fn drop(&mut self) {
        HELD.with(|held| held.set((held.get().0, false)));
    }
}

/// One test at a time: the sharding tests each run several replicas and hold takeover times
/// to the issue's bounds, which are the replicas' and the server's, not those of tests
/// fighting for 2 cores; the chart's tests each check that nothing is left cluster-wide. Every
/// other test of the binary that uses a cluster or server waits meanwhile (see [`beside`]).
/// Take it first, before any cluster.
pub fn one_at_a_time() -> Alone {
    assert_eq!(HELD.with(|held| held.get().0), 0, "one_at_a_time() is taken before any cluster or server");
    let alone = Alone(TURNS.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
    HELD.with(|held| held.set((0, true)));
    alone
}

/// A turn beside other tests at the shared cluster or server: held by [`Cluster`]
/// and [`ApiServer`] for their lives, so that a test [`one_at_a_time`] runs alone.
pub struct Turn(#[allow(dead_code)] Option<std::sync::RwLockReadGuard<'static, ()>>);

impl Drop for Turn {
    fn drop(&mut self) {
        HELD.with(|held| {
            let (count, alone) = held.get();
            held.set((count.saturating_sub(1), alone));
        });
    }
}

/// A turn beside the other tests: waits while a test is alone (but for that test itself).
pub fn beside() -> Turn {
    let (count, alone) = HELD.with(|held| held.get());
    HELD.with(|held| held.set((count + 1, alone)));
    if alone || count > 0 {
        return Turn(None);
    }
    Turn(Some(TURNS.read().unwrap_or_else(|poisoned| poisoned.into_inner())))
}

/// A fresh namespace on the test API server, deleted when dropped.
pub struct Cluster {
    pub kubeconfig: String,
    pub namespace: String,
    /// Its test's turn at the cluster (see [`one_at_a_time`]).
    _turn: Turn,
}

impl Cluster {
    /// The cluster, with a new namespace named after `test`. A test that needs it is
    /// `#[ignore]`d with the command that runs it, and fails (never passes) without it.
    pub fn new(test: &str) -> Cluster {
        Cluster::on(
            required(
                "DEPLOYSTER_E2E_KUBECONFIG",
                "the kubeconfig ../shared/apiserver/up.sh prints (kind or k3d work too)",
            ),
            test,
        )
    }

    /// The cluster of `kubeconfig`, with the CRD installed and a new namespace named after `test`.
    pub fn on(kubeconfig: String, test: &str) -> Cluster {
        let namespace = format!("e2e-{test}-{}", std::process::id()).replace('_', "-");
        let cluster = Cluster { kubeconfig, namespace, _turn: beside() };
        cluster.install_crd();
        cluster.must(&["create", "namespace", &cluster.namespace]);
        cluster
    }

    fn install_crd(&self) {
        // Tests run in parallel: two concurrent `kubectl apply`s of a CRD the server does not
        // have yet both try to create it, and one fails with AlreadyExists.
        static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        for kind in ["manifest", "pipeline", "preview"] {
            let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("crds/{kind}.yaml"));
            self.must(&["apply", "-f", crd.to_str().unwrap()]);
            // Polled rather than `kubectl wait`, which fails ("accessor error: <nil>") instead of
            // waiting when it reads a just-created CRD before it has any condition.
            let name = match kind {
                "preview" => "manifestpreviews.deployster.io".to_string(),
                kind => format!("{kind}s.deployster.io"),
            };
            wait_for("the CRD to be established", Duration::from_secs(60), || {
                self.get(&["crd", &name]).is_some_and(|crd| {
                    crd["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
                })
            });
        }
    }

    /// Runs kubectl: whether it succeeded, and stdout followed by stderr.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let output = Command::new("kubectl")
            .args(["--kubeconfig", &self.kubeconfig])
            .args(args)
            .output()
            .expect("kubectl is installed");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), text)
    }

    pub fn must(&self, args: &[&str]) -> String {
        let (ok, text) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed:\n{text}");
        text
    }

    /// `args` in the test's namespace.
    pub fn ns<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        [&["-n", self.namespace.as_str()], args].concat()
    }

    /// ServiceAccount `name` in the test's namespace, bound to a Role of its own granting
    /// `verbs` (comma-separated) on `resources` (`configmaps,secrets`): RBAC is enforced, and a
    /// Manifest acts as its ServiceAccount.
    pub fn service_account(&self, name: &str, verbs: &str, resources: &str) {
        self.must(&self.ns(&["create", "serviceaccount", name]));
        self.must(&self.ns(&["create", "role", name, "--verb", verbs, "--resource", resources]));
        let subject = format!("{}:{name}", self.namespace);
        self.must(&self.ns(&["create", "rolebinding", name, "--role", name, "--serviceaccount", &subject]));
    }

    /// A kubeconfig (written into `dir`) acting as ServiceAccount `account` of the test's
    /// namespace, with its token: what a user of the CLI with only that account's rights has.
    pub fn token_kubeconfig(&self, account: &str, dir: &Path) -> std::path::PathBuf {
        // `kubectl create token` on current servers; before 1.24, the token Secret made for it.
        let token = match self.kubectl(&self.ns(&["create", "token", account])) {
            (true, token) => token.trim().to_string(),
            (false, _) => {
                let mut token = String::new();
                wait_for("the ServiceAccount's token Secret", Duration::from_secs(30), || {
                    let secret =
                        self.get(&["sa", account]).and_then(|sa| sa["secrets"][0]["name"].as_str().map(str::to_string));
                    let Some(secret) = secret.and_then(|name| self.get(&["secret", &name])) else { return false };
                    token = secret["data"]["token"].as_str().unwrap_or_default().to_string();
                    !token.is_empty()
                });
                use base64::Engine;
                String::from_utf8(base64::engine::general_purpose::STANDARD.decode(token).unwrap()).unwrap()
            }
        };
        let view: Value =
            serde_json::from_str(&self.must(&["config", "view", "--minify", "--raw", "-o", "json"])).unwrap();
        let server = &view["clusters"][0]["cluster"];
        let path = dir.join(format!("{account}.kubeconfig"));
        let config = serde_json::json!({"apiVersion": "v1", "kind": "Config", "current-context": "r",
                "clusters": [{"name": "c", "cluster": server}],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": "r", "context": {"cluster": "c", "user": account, "namespace": self.namespace}}]});
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    /// Evicts Pod `name` of the test's namespace through the Eviction API, as `kubectl drain`
    /// does (`policy/v1`, or `policy/v1beta1` before 1.22).
    pub fn evict(&self, name: &str) {
        let path = format!("/api/v1/namespaces/{}/pods/{name}/eviction", self.namespace);
        let mut said = Vec::new();
        for version in ["policy/v1", "policy/v1beta1"] {
            let body = serde_json::json!({"apiVersion": version, "kind": "Eviction",
                "metadata": {"name": name, "namespace": self.namespace}});
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), body.to_string()).unwrap();
            match self.kubectl(&["create", "--raw", &path, "-f", file.path().to_str().unwrap()]) {
                (true, _) => return,
                (false, text) => said.push(format!("{version}: {text}")),
            }
        }
        panic!("evicting Pod {name}: {said:?}");
    }

    /// `kubectl get … -o json` in the test's namespace; `None` when it fails (not found).
    pub fn get(&self, args: &[&str]) -> Option<Value> {
        let (ok, text) = self.kubectl(&[&self.ns(&["get"])[..], args, &["-o", "json"]].concat());
        ok.then(|| {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl get {args:?}: not JSON ({e}): {text}"))
        })
    }

    /// Applies a YAML document in the test's namespace.
    pub fn apply_yaml(&self, yaml: &str) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), yaml).unwrap();
        self.must(&self.ns(&["apply", "-f", file.path().to_str().unwrap()]));
    }

    /// The status of condition `type_` on Manifest `name` ("True", "False", or "" when absent).
    pub fn condition(&self, name: &str, type_: &str) -> String {
        let Some(manifest) = self.get(&["manifest", name]) else { return String::new() };
        manifest["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == type_))
            .and_then(|c| c["status"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// Each Manifest's `status.shard.replica` (who wrote its status) and
    /// `status.lastReconcileTime`, by name.
    pub fn reconcilers(&self) -> BTreeMap<String, (String, String)> {
        let list = self.get(&["manifests"]).unwrap();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
        let by_name = items.iter().map(|m| {
            let writer = (text(&m["status"]["shard"]["replica"]), text(&m["status"]["lastReconcileTime"]));
            (text(&m["metadata"]["name"]), writer)
        });
        by_name.collect()
    }

    /// `status.history` of Manifest `name`, oldest first.
    pub fn history(&self, name: &str) -> Vec<Value> {
        self.get(&["manifest", name]).and_then(|m| m["status"]["history"].as_array().cloned()).unwrap_or_default()
    }

    /// The reasons of the events about Manifest `name`, oldest first.
    pub fn event_reasons(&self, name: &str) -> Vec<String> {
        let Some(list) = self.get(&["events.events.k8s.io"]) else { return Vec::new() };
        let mut events: Vec<&Value> =
            list["items"].as_array().into_iter().flatten().filter(|e| e["regarding"]["name"] == name).collect();
        events.sort_by_key(|e| e["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string());
        events.iter().filter_map(|e| e["reason"].as_str().map(str::to_string)).collect()
    }
}

/// The value of `variable`, which a test that needs a cluster must be given: such a test is
/// `#[ignore]`d, so run without it on purpose it fails, naming what to set (`what`).
pub fn required(variable: &str, what: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!(
            "this test needs {variable}: set it to {what} (.ci/run starts ../shared/apiserver and ../shared/cluster)"
        )
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Let go of what the test left (finalizers would keep the namespace).
        let (_, list) = self.kubectl(&self.ns(&["get", "manifests", "-o", "name"]));
        for object in list.lines().filter(|l| l.starts_with("manifest")) {
            let patch = r#"{"metadata":{"finalizers":null}}"#;
            let _ = self.kubectl(&self.ns(&["patch", object, "--type", "merge", "-p", patch]));
        }
        let _ = self.kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

/// A `deployster controller` process, killed when dropped; its log is kept in a file.
pub struct ControllerProcess {
    pub child: Child,
    pub log: PathBuf,
    /// `host:port` of its metrics and health endpoints.
    pub metrics: String,
}

impl ControllerProcess {
    /// Starts `deployster controller ARGS` against the test cluster, with metrics on a free port.
    pub fn start(cluster: &Cluster, dir: &Path, name: &str, args: &[&str]) -> ControllerProcess {
        Self::start_env(cluster, dir, name, args, &[])
    }

    /// As [`ControllerProcess::start`], with more environment (set last: `KUBECONFIG` too).
    pub fn start_env(
        cluster: &Cluster,
        dir: &Path,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> ControllerProcess {
        let metrics = format!("127.0.0.1:{}", free_port());
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(super::deployster())
            .arg("controller")
            // Built-in types with plugs: files the controller writes, unless the test runs Pods.
            .args(if args.contains(&"--executor") { &[][..] } else { &["--executor", "docker"][..] })
            .args(["--metrics-addr", &metrics, "--plug-dir", dir.join(format!("{name}-plugs")).to_str().unwrap()])
            .args(args)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("DEPLOYSTER_LOG", "info,deployster=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the controller");
        ControllerProcess { child, log, metrics }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path` on the metrics address: status code and body, `None` when nothing answers.
    pub fn http(&self, path: &str) -> Option<(u16, String)> {
        http_get(&self.metrics, path)
    }

    /// The value of the sample `series` (name and labels exactly as exposed), if present.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.http("/metrics")?;
        body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it as Kubernetes stops a Pod (SIGTERM) and waits for it to exit: its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.child.wait().ok()?.code()
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- the last lines of {}:", self.log.display());
            tail.iter().rev().for_each(|l| eprintln!("{l}"));
        }
    }
}

/// `deployster_kube_api_requests_total` as exposed: (verb, group, resource) → requests.
pub fn api_requests(controller: &ControllerProcess) -> BTreeMap<(String, String, String), f64> {
    let (_, body) = controller.http("/metrics").expect("the metrics endpoint answers");
    api_requests_in(&body)
}

/// The API requests counted in `metrics` (Prometheus' text format), by (verb, group, resource).
pub fn api_requests_in(metrics: &str) -> BTreeMap<(String, String, String), f64> {
    let label = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\"")).map(|i| i + name.len() + 2)?;
        Some(line[start..].split('"').next()?.to_string())
    };
    metrics
        .lines()
        .filter(|l| l.starts_with("deployster_kube_api_requests_total{"))
        .map(|l| {
            let key = (label(l, "verb").unwrap(), label(l, "group").unwrap(), label(l, "resource").unwrap());
            (key, l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        })
        .fold(BTreeMap::new(), |mut m, (k, n)| {
            *m.entry(k).or_default() += n;
            m
        })
}

/// Every request the controller made is one that `controller::rbac::API_ACCESS` lists (and the
/// Helm chart's RBAC, held against that list by tests/apiserver/helm.rs, grants).
pub fn assert_api_calls_are_listed(controller: &ControllerProcess) {
    assert_listed(&api_requests(controller));
}

/// Every one of `calls` is in `controller::rbac::API_ACCESS`.
pub fn assert_listed(calls: &BTreeMap<(String, String, String), f64>) {
    assert!(!calls.is_empty(), "the API requests were counted");
    for (verb, group, resource) in calls.keys() {
        assert!(
            deployster::controller::rbac::allowed(group, resource, verb),
            "{verb} {group}/{resource} is not in controller::rbac::API_ACCESS"
        );
    }
}

/// An API server of the test's own (`../shared/apiserver`, named by `DEPLOYSTER_E2E_APISERVER`),
/// for tests that stop and restart it: real kube-apiserver, etcd and controller-manager. Only
/// kube-apiserver is stopped (`SIGKILL`, as a crashed or rebooted control plane node); etcd
/// keeps the data, and [`ApiServer::restart`] starts the same command line again. Stopped and
/// removed (`down.sh`) when dropped.
pub struct ApiServer {
    scripts: PathBuf,
    /// The run folder (`up.sh` wants one that does not exist yet, of at most 40 characters).
    dir: PathBuf,
    port: u16,
    pub kubeconfig: String,
    /// kube-apiserver's command line, read while it ran.
    command: std::sync::Mutex<Vec<String>>,
    /// The kube-apiserver [`ApiServer::restart`] started, reaped once `down.sh` stopped it.
    restarted: std::sync::Mutex<Option<Child>>,
    /// Its test's turn beside the others (see [`one_at_a_time`]).
    _turn: Turn,
}

impl ApiServer {
    /// A server of `../shared/apiserver`'s scripts (`DEPLOYSTER_E2E_APISERVER`); fails without them.
    pub fn start(test: &str) -> ApiServer {
        let scripts = required("DEPLOYSTER_E2E_APISERVER", "../shared/apiserver: the test starts servers of its own");
        let turn = beside();
        let dir = PathBuf::from(format!("/tmp/dpl-{test}-{}", std::process::id()));
        let port = free_port();
        let output = Command::new(Path::new(&scripts).join("up.sh"))
            .env("APISERVER_DIR", &dir)
            .env("APISERVER_PORT", port.to_string())
            .stderr(Stdio::inherit())
            .output()
            .expect("run up.sh");
        assert!(output.status.success(), "up.sh failed");
        let kubeconfig =
            String::from_utf8_lossy(&output.stdout).lines().last().expect("up.sh prints the kubeconfig").to_string();
        ApiServer {
            scripts: PathBuf::from(scripts),
            dir,
            port,
            kubeconfig,
            command: Default::default(),
            restarted: Default::default(),
            _turn: turn,
        }
    }

    /// `NAME=value` of the run folder's `state.env` (the first, as the scripts read it).
    fn state(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join("state.env")).expect("the run folder's state.env");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name}= in state.env"))
            .to_string()
    }

    /// Kills kube-apiserver, keeping its command line for [`ApiServer::restart`].
    pub fn stop(&self) {
        let pid = self.state("APISERVER_PID");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("kube-apiserver is running");
        let command: Vec<String> =
            cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect();
        *self.command.lock().unwrap() = command;
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        wait_for("the API server to stop", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", self.port)).is_err()
        });
    }

    /// Starts kube-apiserver again with the same command line (port, certificates, etcd), and
    /// waits until it is ready. Its PID replaces the old one in `state.env`, so `down.sh`
    /// stops it.
    pub fn restart(&self) {
        let command = self.command.lock().unwrap().clone();
        assert!(!command.is_empty(), "restart follows stop");
        let log = std::fs::File::create(self.dir.join("apiserver-restarted.log")).unwrap();
        // setsid execs in place (the child is no group leader): the PID is kube-apiserver's.
        let child = Command::new("setsid")
            .args(&command)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start kube-apiserver again");
        let state = std::fs::read_to_string(self.dir.join("state.env")).unwrap();
        let state: String = state
            .lines()
            .map(|l| {
                if l.starts_with("APISERVER_PID=") {
                    format!("APISERVER_PID={}\n", child.id())
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(self.dir.join("state.env"), state).unwrap();
        *self.restarted.lock().unwrap() = Some(child);
        wait_for("the API server to be ready again", Duration::from_secs(60), || {
            Command::new("kubectl")
                .args(["--kubeconfig", &self.kubeconfig, "get", "--raw", "/readyz"])
                .output()
                .is_ok_and(|o| o.stdout == b"ok")
        });
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = Command::new(self.scripts.join("down.sh")).arg(&self.dir).status();
        if let Some(mut restarted) = self.restarted.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = restarted.wait();
        }
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain HTTP/1.0 GET: status code and body.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// Polls `done` every 200 ms until it holds; fails the test after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Now, as `status.lastReconcileTime` writes it (UTC, whole seconds): later times compare greater.
pub fn rfc3339_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
