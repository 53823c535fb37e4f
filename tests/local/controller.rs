//! The reconcile pipeline against an in-memory Kubernetes API (kube-fake-client): status,
//! events, secrets, conflicts and deletion, with real resource types (the built-ins, and the
//! fixture where a failure is needed). The watch loop itself needs a real API server: see
//! tests/apiserver/e2e_controller.rs.
#![cfg(feature = "kube")]

use crate::support;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use deployster::builtins::kubernetes::KubeObjects;
use deployster::controller::manifest::{FINALIZER, ManifestContext, Next, reconcile};
use deployster::controller::{Context, Settings};
use deployster::crd::{Manifest, ManifestSpec, ManifestStatus};
use deployster::engine::executor::process::ProcessExecutor;
use deployster::engine::executor::{ExecError, Executor, Invocation, Outcome};
use deployster::executors::route::Router;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use kube_fake_client::ClientBuilder;

const NS: &str = "default";
const T0: i64 = 1_700_000_000_000;

/// Records every invocation's (resource, phase), then runs it for real.
struct Counting {
    inner: Router,
    calls: Mutex<Vec<(String, String)>>,
}

impl Counting {
    fn new(allow_local: bool) -> Arc<Self> {
        let local = Arc::new(ProcessExecutor::new(support::deployster()));
        let inner = Router { local_programs: allow_local, ..Router::programs(local) };
        Arc::new(Self { inner, calls: Mutex::default() })
    }

    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    fn actions(calls: &[(String, String)]) -> Vec<String> {
        calls.iter().filter(|(_, p)| p.starts_with("action:")).map(|(r, p)| format!("{r}/{p}")).collect()
    }
}

#[async_trait]
impl Executor for Counting {
    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let call = (invocation.labels.resource.clone(), invocation.labels.phase.clone());
        self.calls.lock().unwrap().push(call);
        self.inner.invoke(invocation).await
    }
}

fn object(name: &str, spec_yaml: &str) -> Manifest {
    let spec: ManifestSpec = serde_norway::from_str(spec_yaml).expect("a valid spec");
    let mut manifest = Manifest::new(name, spec);
    manifest.metadata.namespace = Some(NS.into());
    manifest.metadata.generation = Some(1);
    manifest.metadata.uid = Some(format!("uid-{name}"));
    manifest
}

async fn client_with(objects: Vec<Manifest>, extra: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Client {
    let builder = ClientBuilder::new().with_resource::<Manifest>().with_status_subresource::<Manifest>();
    let builder = objects.into_iter().fold(builder, |b, o| b.with_object(o));
    extra(builder).build().await.expect("fake client")
}

const CLOCK_STEP_MS: i64 = 301_000;

fn context(
    client: Client,
    executor: Arc<dyn Executor>,
    plug_root: &std::path::Path,
    allow_local: bool,
) -> ManifestContext {
    ManifestContext::new(shared_context(client, executor, plug_root, allow_local))
}

/// The context every kind shares, for a test that sets more of it.
fn shared_context(
    client: Client,
    executor: Arc<dyn Executor>,
    plug_root: &std::path::Path,
    allow_local: bool,
) -> Context {
    let settings = Settings {
        allow_local_programs: allow_local,
        plug_root: plug_root.to_path_buf(),
        parallelism: 2,
        ..Settings::default()
    };
    let mut ctx = Context::new(client, executor, settings);
    let now = Arc::new(std::sync::atomic::AtomicI64::new(T0));
    // Each reading is a default interval (5 min) and a second later than the last: every pass
    // finds every resource due for a check, as a controller does when passes are `interval`
    // apart. (Adaptive checks have a test of their own, with a clock it moves itself.)
    ctx.clock = Box::new(move || now.fetch_add(CLOCK_STEP_MS, std::sync::atomic::Ordering::SeqCst));
    ctx.jitter = Box::new(|d| d);
    ctx
}

async fn get(client: &Client, name: &str) -> Manifest {
    Api::<Manifest>::namespaced(client.clone(), NS).get(name).await.expect("the object exists")
}

fn status(obj: &Manifest) -> ManifestStatus {
    obj.status.clone().unwrap_or_default()
}

fn condition(obj: &Manifest, type_: &str) -> (String, String, String) {
    let status = status(obj);
    let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}: {status:#?}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// Events regarding `name` (the fake ignores field selectors: filter here).
async fn events(client: &Client, name: &str) -> Vec<(String, String)> {
    let list = Api::<KubeEvent>::namespaced(client.clone(), NS).list(&ListParams::default()).await.expect("events");
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

fn builtins(dir: &std::path::Path) -> String {
    format!(
        r#"
interval: 5m
resources:
  data_dir:
    type: builtin/directory
    config: {{ path: "{dir}/data" }}
  app_config:
    type: builtin/file
    dependencies: {{ d: data_dir }}
    config: {{ path: "{{{{ d.state.path }}}}/app.json", content: "{{{{ env }}}}" }}
vars: {{ env: prod }}
"#,
        dir = dir.display()
    )
}

#[tokio::test]
async fn create_then_ready_then_a_no_op_then_drift_corrected() {
    let dir = tempfile::tempdir().unwrap();
    let client = client_with(vec![object("site", &builtins(dir.path()))], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &dir.path().join("plugs"), false);

    // Create → Ready, every resource VALID.
    let next = reconcile(&get(&client, "site").await, &ctx).await.expect("reconcile");
    let obj = get(&client, "site").await;
    assert_eq!(next, Next::Requeue(Duration::from_secs(300)), "{:#?}", status(&obj));
    assert!(obj.finalizers().iter().any(|f| f == FINALIZER), "the finalizer is added");
    assert_eq!(condition(&obj, "Ready").0, "True", "{:#?}", status(&obj));
    assert_eq!(condition(&obj, "Ready").1, "Applied");
    let st = status(&obj);
    assert_eq!(st.resources_summary.as_deref(), Some("2/2"));
    assert!(st.resources.iter().all(|r| r.status == "VALID"));
    assert_eq!(st.last_applied_revision, st.revision);
    assert_eq!(std::fs::read_to_string(dir.path().join("data/app.json")).unwrap(), "prod");
    assert!(st.history.iter().any(|h| h.event == "action-started"));
    assert!(events(&client, "site").await.iter().any(|(r, _)| r == "Applied"));
    executor.take();

    // The watch cache keeps a lean copy (each reconcile reads the object afresh): the spec, the
    // conditions, each resource's status line — not the managed fields, history or states.
    let version = obj.resource_version();
    let mut cached = obj.clone();
    deployster::controller::manifest::prune_for_cache(&mut cached);
    assert!(!obj.managed_fields().is_empty() && cached.managed_fields().is_empty(), "managed fields are dropped");
    let (full, lean) = (status(&obj), status(&cached));
    assert_eq!((&cached.spec, &lean.conditions), (&obj.spec, &full.conditions));
    assert!(lean.history.is_empty() && lean.resources.iter().all(|r| r.state.is_none()), "{lean:#?}");
    let lines = |s: &ManifestStatus| s.resources.iter().map(|r| (r.name.clone(), r.status.clone())).collect::<Vec<_>>();
    assert_eq!(lines(&lean), lines(&full));
    // Second pass: nothing to do, nothing written.
    reconcile(&obj, &ctx).await.expect("reconcile");
    assert!(Counting::actions(&executor.take()).is_empty(), "no action on a no-op pass");
    let obj = get(&client, "site").await;
    assert_eq!(obj.resource_version(), version, "no status churn");

    // Drift: the file disappears; the next pass puts it back and says so.
    std::fs::remove_file(dir.path().join("data/app.json")).unwrap();
    reconcile(&obj, &ctx).await.expect("reconcile");
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:write"]);
    assert!(dir.path().join("data/app.json").exists());
    let obj = get(&client, "site").await;
    assert_eq!(condition(&obj, "Ready").1, "DriftCorrected");
    let drift = events(&client, "site").await.into_iter().find(|(r, _)| r == "DriftCorrected");
    assert!(
        // With what its action does, as the plan said.
        drift.is_some_and(|(_, note)| note.contains("app_config (MISSING: Write ") && note.ends_with("; corrected")),
        "{:?}",
        events(&client, "site").await
    );
    assert!(status(&obj).history.iter().any(|h| h.event == "drift-detected" && h.target == "resource/app_config"));

    // Spec edits, one per pass: changes, not drift — no drift event, no thrashing streak.
    let drift_events = |events: Vec<(String, String)>| events.iter().filter(|(r, _)| r == "DriftCorrected").count();
    let drift_events_before = drift_events(events(&client, "site").await);
    let mut obj = obj;
    for env in ["staging", "test", "dev", "prod"] {
        obj.spec.vars.insert("env".into(), serde_json::json!(env));
        reconcile(&obj, &ctx).await.expect("reconcile");
        assert_eq!(Counting::actions(&executor.take()), ["app_config/action:write"]);
        let status = status(&get(&client, "site").await);
        obj.status = Some(status.clone());
        assert_eq!(std::fs::read_to_string(dir.path().join("data/app.json")).unwrap(), env);
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Applied"), "{env}: {ready:?}");
        assert!(status.resources.iter().all(|r| r.drift_streak == 0), "{env}: {:?}", status.resources);
        let logged: Vec<&str> = status.history.iter().rev().take(8).map(|h| h.event.as_str()).collect();
        assert!(logged.contains(&"change-detected") && !logged.contains(&"drift-detected"), "{env}: {logged:?}");
    }
    assert_eq!(drift_events(events(&client, "site").await), drift_events_before, "no drift event for a spec edit");
}

#[tokio::test]
async fn a_suspended_manifest_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut obj = object("paused", &builtins(dir.path()));
    obj.spec.suspend = true;
    let client = client_with(vec![obj], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &dir.path().join("plugs"), false);
    let next = reconcile(&get(&client, "paused").await, &ctx).await.expect("reconcile");
    assert_eq!(next, Next::AwaitChange);
    assert!(executor.take().is_empty(), "nothing ran");
    assert!(!dir.path().join("data").exists());
    assert_eq!(condition(&get(&client, "paused").await, "Reconciling").1, "Suspended");
}

#[tokio::test]
async fn an_invalid_manifest_is_stalled_with_a_clear_message_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "resources:\n  a: { type: builtin/directory, dependencies: { x: b }, config: { path: /tmp/x } }\n  b: { type: builtin/directory, dependencies: { y: a }, config: { path: /tmp/y } }\n";
    let client = client_with(vec![object("cyclic", spec)], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &dir.path().join("plugs"), false);
    let next = reconcile(&get(&client, "cyclic").await, &ctx).await.expect("reconcile");
    assert_eq!(next, Next::AwaitChange, "no retry until the spec changes");
    assert!(executor.take().is_empty());
    let obj = get(&client, "cyclic").await;
    let (stalled, reason, message) = condition(&obj, "Stalled");
    assert_eq!((stalled.as_str(), reason.as_str()), ("True", "InvalidManifest"));
    assert!(message.contains("dependency cycle (each depends on the next): a -> b -> a"), "{message}");
    assert_eq!(condition(&obj, "Ready").0, "False");
    assert!(events(&client, "cyclic").await.iter().any(|(r, n)| r == "InvalidManifest" && n.contains("a -> b -> a")));
}

/// Issue 52: an `ignore` path of `builtin/kubernetes` that does not parse is the spec's fault:
/// Stalled, naming the resource and where the path is (a config's values are not shown in
/// schema errors: they may be secret), and nothing runs.
#[tokio::test]
async fn an_ignore_path_that_does_not_parse_stalls_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "resources:\n  web:\n    type: builtin/kubernetes\n    config: {object: {apiVersion: v1, kind: ConfigMap, metadata: {name: web}, data: {a: b}}, ignore: [\"data..a\"]}\n";
    let client = client_with(vec![object("ignoring", spec)], |b| b).await;
    let nowhere = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let programs = Arc::new(ProcessExecutor::new(support::deployster()));
    let kubernetes = Arc::new(KubeObjects::impersonating(nowhere));
    let executor = Arc::new(Router { kubernetes: Some(kubernetes), ..Router::programs(programs.clone()) });
    let ctx = context(client.clone(), executor, &dir.path().join("plugs"), false);
    let next = reconcile(&get(&client, "ignoring").await, &ctx).await.expect("reconcile");
    assert_eq!(next, Next::AwaitChange, "no retry until the spec changes");
    let obj = get(&client, "ignoring").await;
    let (stalled, reason, message) = condition(&obj, "Stalled");
    assert_eq!((stalled.as_str(), reason.as_str()), ("True", "InvalidManifest"), "{message}");
    assert!(message.contains("resources.web.config.ignore[0]: value does not match"), "{message}");
    assert_eq!(programs.programs_started(), 0, "nothing ran");
}

/// A workspace for fixture resource types: the fixture linked into the object's directory
/// (where the controller runs them), with `fixture-init/<name>.json` answers when given.
fn fixture_in(plug_root: &std::path::Path, object: &str, inits: &[(&str, &str)]) -> String {
    let dir = plug_root.join(NS).join(object);
    std::fs::create_dir_all(dir.join("fixture-init")).unwrap();
    for (name, init) in inits {
        std::fs::write(dir.join("fixture-init").join(format!("{name}.json")), init).unwrap();
    }
    support::fixture().display().to_string()
}

#[tokio::test]
async fn a_failed_action_names_the_root_cause_blocks_dependents_and_backs_off() {
    let dir = tempfile::tempdir().unwrap();
    let plugs = dir.path().join("plugs");
    let fixture = fixture_in(&plugs, "broken", &[]);
    let spec = format!(
        "retryInterval: 10s\ninterval: 1m\nresources:\n  data_dir: {{ type: {fixture}, config: {{ action_exit: 2 }} }}\n  app: {{ type: {fixture}, dependencies: {{ d: data_dir }} }}\n  leaf: {{ type: {fixture}, dependencies: {{ a: app }} }}\n"
    );
    let client = client_with(vec![object("broken", &spec)], |b| b).await;
    let ctx = context(client.clone(), Counting::new(true), &plugs, true);
    let mut waits = Vec::new();
    for _ in 0..4 {
        let next = reconcile(&get(&client, "broken").await, &ctx).await.expect("reconcile");
        waits.push(next);
    }
    let secs = |s| Next::Requeue(Duration::from_secs(s));
    assert_eq!(waits, [secs(10), secs(20), secs(40), secs(60)], "doubling, up to the interval");
    let obj = get(&client, "broken").await;
    let (ready, reason, message) = condition(&obj, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "ActionFailed"));
    assert!(message.starts_with("waiting on data_dir: action create failed with exit code 2"), "{message}");
    assert!(message.ends_with("; 2 blocked"), "{message}");
    let st = status(&obj);
    let leaf = st.resources.iter().find(|r| r.name == "leaf").unwrap();
    assert_eq!((leaf.status.as_str(), leaf.blocked_by.as_deref()), ("BLOCKED", Some("data_dir")), "the root cause");
    assert_eq!(st.consecutive_failures, 4);
    assert!(events(&client, "broken").await.iter().any(|(r, n)| r == "ActionFailed" && n.starts_with("data_dir: ")));
}

#[tokio::test]
async fn local_programs_are_refused_without_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let plugs = dir.path().join("plugs");
    let fixture = fixture_in(&plugs, "local", &[]);
    let client = client_with(vec![object("local", &format!("resources:\n  x: {{ type: {fixture} }}\n"))], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &plugs, false);
    assert_eq!(reconcile(&get(&client, "local").await, &ctx).await.unwrap(), Next::AwaitChange);
    assert!(executor.take().is_empty(), "nothing ran");
    let (stalled, reason, message) = condition(&get(&client, "local").await, "Stalled");
    assert_eq!((stalled.as_str(), reason.as_str()), ("True", "LocalProgramRefused"));
    assert!(message.contains("--allow-local-programs") && message.contains(&fixture), "{message}");
}

#[tokio::test]
async fn a_conflicting_status_write_is_retried() {
    use kube_fake_client::{Error as FakeError, interceptor};
    let dir = tempfile::tempdir().unwrap();
    let attempts = Arc::new(Mutex::new(0));
    let seen = attempts.clone();
    let client = client_with(vec![object("busy", &builtins(dir.path()))], move |b| {
        b.with_interceptor_funcs(interceptor::Funcs::new().patch_status(move |_| {
            let mut n = seen.lock().unwrap();
            *n += 1;
            if *n <= 2 { Err(FakeError::Conflict("the object has been modified".into())) } else { Ok(None) }
        }))
    })
    .await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    let next = reconcile(&get(&client, "busy").await, &ctx).await.expect("the conflict is retried, not returned");
    assert_eq!(next, Next::Requeue(Duration::from_secs(300)));
    assert!(*attempts.lock().unwrap() >= 3);
    assert_eq!(condition(&get(&client, "busy").await, "Ready").0, "True");
}

/// Captures this thread's log output (every level) while it lives.
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn plugs_from_a_secret_are_mounted_but_never_shown() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    const SECRET: &str = "s3cr3t-t0k3n-value";
    let logs = Arc::new(Mutex::new(Vec::new()));
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || CapturedLogs(writer.clone()))
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let plugs = dir.path().join("plugs");
    let init = r#"{"state_action": {"args": ["state"]}, "plugs": {"creds": {"container_path": "/creds"}}}"#;
    let fixture = fixture_in(&plugs, "secretive", &[("uses_creds", init)]);
    let record = dir.path().join("requests.jsonl");
    let spec = format!(
        "plugs:\n  creds: {{ secret: {{ name: api-token, key: token }}, readOnly: true }}\nresources:\n  uses_creds: {{ type: {fixture}, config: {{ record: {} }} }}\n",
        record.display()
    );
    let mut secret = Secret::default();
    secret.metadata.name = Some("api-token".into());
    secret.metadata.namespace = Some(NS.into());
    secret.data = Some([("token".to_string(), ByteString(SECRET.as_bytes().to_vec()))].into());
    let client = client_with(vec![object("secretive", &spec)], |b| b.with_object(secret)).await;
    let ctx = context(client.clone(), Counting::new(true), &plugs, true);
    reconcile(&get(&client, "secretive").await, &ctx).await.expect("reconcile");

    let obj = get(&client, "secretive").await;
    assert_eq!(condition(&obj, "Ready").0, "True", "{:#?}", status(&obj));
    let request: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&record).unwrap().lines().next().unwrap()).unwrap();
    let path = request["request"]["plugs"]["creds"].as_str().expect("the plug is in the request");
    assert_eq!(std::fs::read_to_string(path).unwrap(), SECRET, "materialized for the program");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(path).unwrap().permissions().mode() & 0o777, 0o600);
    let shown = serde_json::to_string(&status(&obj)).unwrap();
    assert!(!shown.contains(SECRET), "the secret is in the status: {shown}");
    let notes: String = events(&client, "secretive").await.into_iter().map(|(r, n)| r + &n).collect();
    assert!(!notes.contains(SECRET), "the secret is in an event");
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(!logged.contains(SECRET), "the secret is in the logs");

    // A missing secret is a clear, retried failure naming it.
    let client = client_with(vec![object("secretive", &spec)], |b| b).await;
    let ctx = context(client.clone(), Counting::new(true), &plugs, true);
    let next = reconcile(&get(&client, "secretive").await, &ctx).await.unwrap();
    assert!(matches!(next, Next::Requeue(_)));
    let (ready, reason, message) = condition(&get(&client, "secretive").await, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "PlugUnavailable"));
    assert_eq!(message, "secret `api-token` not found in namespace `default`");
}

/// The object as a real API server shows it once deleted: a deletion timestamp, finalizers kept.
fn deleting(mut obj: Manifest, status: Option<ManifestStatus>) -> Manifest {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    obj.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    obj.metadata.finalizers = Some(vec![FINALIZER.into()]);
    obj.status = status;
    obj
}

#[tokio::test]
async fn deletion_with_orphan_keeps_everything_and_with_delete_removes_dependents_first() {
    let dir = tempfile::tempdir().unwrap();
    let plugs = dir.path().join("plugs");
    let client = client_with(vec![object("site", &builtins(dir.path()))], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &plugs, false);
    reconcile(&get(&client, "site").await, &ctx).await.unwrap();
    assert!(dir.path().join("data/app.json").exists());
    // What its passes applied: its inventory, which deletion deletes.
    let applied = get(&client, "site").await.status;

    // Orphan: the finalizer goes at once, the resources stay.
    let orphan = deleting(object("site", &builtins(dir.path())), None);
    let client = client_with(vec![orphan], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &plugs, false);
    assert_eq!(reconcile(&get(&client, "site").await, &ctx).await.unwrap(), Next::AwaitChange);
    assert!(executor.take().is_empty(), "orphaning runs nothing");
    assert!(dir.path().join("data/app.json").exists());
    let gone = Api::<Manifest>::namespaced(client.clone(), NS).get_opt("site").await.unwrap();
    assert!(gone.is_none_or(|o| o.finalizers().is_empty()), "the finalizer is removed");

    // Delete: dependents first, then the finalizer.
    let mut doomed = object("site", &builtins(dir.path()));
    doomed.spec.deletion_policy = deployster::crd::DeletionPolicy::Delete;
    let client = client_with(vec![deleting(doomed, applied)], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &plugs, false);
    assert_eq!(reconcile(&get(&client, "site").await, &ctx).await.unwrap(), Next::AwaitChange);
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:delete", "data_dir/action:delete"]);
    assert!(!dir.path().join("data").exists(), "deleted");
    let gone = Api::<Manifest>::namespaced(client.clone(), NS).get_opt("site").await.unwrap();
    assert!(gone.is_none_or(|o| o.finalizers().is_empty()));
    assert!(events(&client, "site").await.iter().any(|(r, _)| r == "ResourcesDeleted"));
}

/// Deletion deletes what the status says was applied: a status from before the inventory
/// (resources found VALID, none inventoried) by the spec, as then; a Manifest that never
/// applied anything, nothing — not even an init.
#[tokio::test]
async fn deletion_deletes_what_was_applied_whatever_the_status_s_age() {
    let dir = tempfile::tempdir().unwrap();
    let plugs = dir.path().join("plugs");
    let client = client_with(vec![object("site", &builtins(dir.path()))], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &plugs, false);
    reconcile(&get(&client, "site").await, &ctx).await.unwrap();
    let mut older = get(&client, "site").await.status.unwrap();
    older.history.retain(|h| h.event != "resource-inventoried");
    assert!(older.history.iter().any(|h| h.event == "resource-applied"));

    let mut doomed = object("site", &builtins(dir.path()));
    doomed.spec.deletion_policy = deployster::crd::DeletionPolicy::Delete;
    let client = client_with(vec![deleting(doomed.clone(), Some(older))], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &plugs, false);
    assert_eq!(reconcile(&get(&client, "site").await, &ctx).await.unwrap(), Next::AwaitChange);
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:delete", "data_dir/action:delete"]);

    let client = client_with(vec![deleting(doomed, None)], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &plugs, false);
    assert_eq!(reconcile(&get(&client, "site").await, &ctx).await.unwrap(), Next::AwaitChange);
    assert!(executor.take().is_empty(), "nothing held: nothing run");
    let gone = Api::<Manifest>::namespaced(client.clone(), NS).get_opt("site").await.unwrap();
    assert!(gone.is_none_or(|o| o.finalizers().is_empty()), "the finalizer is removed");
}

#[tokio::test]
async fn a_failed_deletion_keeps_the_finalizer_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let plugs = dir.path().join("plugs");
    let client = client_with(vec![object("site", &builtins(dir.path()))], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &plugs, false);
    reconcile(&get(&client, "site").await, &ctx).await.unwrap();
    std::fs::write(dir.path().join("data/not-ours.txt"), "precious").unwrap();
    let applied = get(&client, "site").await.status;

    let mut doomed = object("site", &builtins(dir.path()));
    doomed.spec.deletion_policy = deployster::crd::DeletionPolicy::Delete;
    let client = client_with(vec![deleting(doomed, applied)], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &plugs, false);
    let next = reconcile(&get(&client, "site").await, &ctx).await.unwrap();
    assert!(matches!(next, Next::Requeue(_)), "retried");
    let obj = get(&client, "site").await;
    assert_eq!(obj.finalizers(), [FINALIZER.to_string()], "the finalizer stays");
    let (ready, reason, message) = condition(&obj, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "DeleteFailed"));
    assert!(message.contains("is not empty; refusing to delete what is inside"), "{message}");
    assert_eq!(std::fs::read_to_string(dir.path().join("data/not-ours.txt")).unwrap(), "precious");
    assert!(!dir.path().join("data/app.json").exists(), "what could be deleted was");
    assert!(events(&client, "site").await.iter().any(|(r, _)| r == "DeleteFailed"));
}

#[tokio::test]
async fn an_intent_left_by_a_crash_is_reported_and_not_repeated_blindly() {
    use deployster::crd::HistoryEntry;
    let dir = tempfile::tempdir().unwrap();
    let crashed = |event: &str, target: &str| HistoryEntry {
        id: "crashed-pass".into(),
        target: target.into(),
        revision: "old".into(),
        event: event.into(),
        at: "2023-11-14T00:00:00.000Z".into(),
        detail: None,
    };
    let left_by_crash = ManifestStatus {
        history: vec![crashed("run-started", "manifest"), crashed("action-started", "resource/data_dir/action/create")],
        ..ManifestStatus::default()
    };
    let mut obj = object("site", &builtins(dir.path()));
    obj.status = Some(left_by_crash);
    let client = client_with(vec![obj], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &dir.path().join("plugs"), false);
    // The directory already exists, as if the crashed pass had created it.
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    reconcile(&get(&client, "site").await, &ctx).await.unwrap();
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:write"], "the state was read again");
    let note = events(&client, "site").await.into_iter().find(|(r, _)| r == "Interrupted").map(|(_, n)| n);
    assert!(note.is_some_and(|n| n.contains("crashed-pass") && n.contains("resource/data_dir/action/create")));
    let st = status(&get(&client, "site").await);
    assert!(st.history.iter().any(|h| h.id == "crashed-pass" && h.event == "action-interrupted"));
}

#[tokio::test]
/// A thousand passes: the history turns over twenty times (each pass adds about five entries,
/// fifty are kept), so the status is in its steady state long before the end (ten thousand
/// took three minutes of CI, each intent's status write waiting its 10 ms to gather others).
async fn the_status_stays_bounded_after_a_thousand_drift_corrections() {
    use deployster::engine::executor::fake::{FakeCall, FakeExecutor, FakeReply};
    use serde_json::json;
    // Every pass finds `flappy` MISSING (something deletes it), applies it, then reads it VALID.
    let after_action = Arc::new(Mutex::new(false));
    let flag = after_action.clone();
    let executor = Arc::new(FakeExecutor::new(move |call: &FakeCall| match call.phase.as_str() {
        "init" => FakeReply::json(json!({"state_action": {"args": ["state"]}})),
        "state" if std::mem::replace(&mut *flag.lock().unwrap(), false) => {
            FakeReply::json(json!({"status": "VALID", "state": {"blob": "x".repeat(2000)}}))
        }
        "state" => FakeReply::json(json!({"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]})),
        _ => {
            *flag.lock().unwrap() = true;
            FakeReply::default()
        }
    }));
    let dir = tempfile::tempdir().unwrap();
    let spec = "resources:\n  flappy: { type: builtin/file }\n";
    let client = client_with(vec![object("flappy", spec)], |b| b).await;
    let ctx = context(client.clone(), executor, &dir.path().join("plugs"), false);
    let mut obj = get(&client, "flappy").await;
    for _ in 0..1_000 {
        reconcile(&obj, &ctx).await.expect("reconcile");
        obj = get(&client, "flappy").await;
    }
    let st = status(&obj);
    let size = serde_json::to_string(&st).unwrap().len();
    assert!(size < 256 * 1024, "{size} bytes");
    // The history limit, and besides it what the inventory holds.
    let inventoried = st.history.iter().filter(|h| h.event == "resource-inventoried").count();
    assert_eq!(inventoried, 1, "flappy, held once");
    assert!(st.history.len() <= 50 + inventoried, "{}", st.history.len());
    assert_eq!(st.resources[0].drift_streak, 999, "every pass but the first corrected drift");
    assert_eq!(condition(&obj, "Ready").1, "Thrashing");
}

#[tokio::test]
async fn a_missing_crd_is_reported_with_a_hint() {
    let client = ClientBuilder::new().build().await.expect("fake client");
    let err = deployster::controller::check_crd(&client).await.expect_err("no CRD registered");
    assert!(err.to_string().contains("deployster crd | kubectl apply -f -"), "{err}");
}

#[tokio::test]
async fn a_client_for_a_tls_api_server_can_be_made_whatever_crypto_features_the_build_has() {
    // This test binary enables both rustls providers (kube-fake-client asks for aws-lc-rs, we
    // for ring); left to choose, rustls panics building the first TLS client.
    let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    deployster::client::connect(config).expect("a client");
}

#[tokio::test]
async fn the_bundled_example_reconciles_to_ready() {
    let dir = tempfile::tempdir().unwrap();
    let text = support::builtins_example_on_this_machine(&dir.path().join("demo"), "");
    let mut example: Manifest = serde_norway::from_str(&text).expect("a Manifest");
    example.metadata.namespace = Some(NS.into());
    example.metadata.generation = Some(1);
    let client = client_with(vec![example], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    reconcile(&get(&client, "demo").await, &ctx).await.expect("reconcile");
    let obj = get(&client, "demo").await;
    assert_eq!(condition(&obj, "Ready").0, "True", "{:#?}", status(&obj));
    assert_eq!(std::fs::read_to_string(dir.path().join("demo/app.json")).unwrap(), "{\"env\": \"staging\"}\n");
}

/// `spec.approval: Manual`: a pass records its plan and applies nothing until the annotation
/// names the plan's id; a plan that no longer holds is replaced, not applied; an approval
/// holds for one plan only.
#[tokio::test]
async fn manual_approval_applies_only_the_approved_plan() {
    use deployster::crd::{APPROVE_ANNOTATION, Approval};
    let dir = tempfile::tempdir().unwrap();
    let mut obj = object("gated", &builtins(dir.path()));
    obj.spec.approval = Approval::Manual;
    let client = client_with(vec![obj], |b| b).await;
    let executor = Counting::new(false);
    let ctx = context(client.clone(), executor.clone(), &dir.path().join("plugs"), false);
    let approve = |obj: &mut Manifest, id: &str| {
        obj.metadata.annotations.get_or_insert_default().insert(APPROVE_ANNOTATION.into(), id.into());
    };

    reconcile(&get(&client, "gated").await, &ctx).await.expect("reconcile");
    assert!(Counting::actions(&executor.take()).is_empty(), "nothing is applied before approval");
    let obj = get(&client, "gated").await;
    let (ready, reason, message) = condition(&obj, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "AwaitingApproval"), "{message}");
    let pending = status(&obj).pending_plan.expect("the plan is recorded");
    assert!(message.contains(&pending.id), "{message}");
    let changes: Vec<(&str, &str)> = pending.changes.iter().map(|c| (c.name.as_str(), c.status.as_str())).collect();
    assert_eq!(changes, [("data_dir", "MISSING"), ("app_config", "MISSING")], "the file is planned too");
    assert_eq!(pending.changes[1].actions, ["write"]);
    assert!(events(&client, "gated").await.iter().any(|(r, n)| r == "AwaitingApproval" && n.contains(&pending.id)));

    // Planned again, unchanged: the same plan, the same id, no status write.
    let version = obj.resource_version();
    reconcile(&obj, &ctx).await.expect("reconcile");
    let obj = get(&client, "gated").await;
    assert_eq!(obj.resource_version(), version, "no status churn while waiting");

    // An approval of another id is ignored, and said so.
    let mut wrong = obj.clone();
    approve(&mut wrong, "0123456789ab");
    reconcile(&wrong, &ctx).await.expect("reconcile");
    assert!(Counting::actions(&executor.take()).is_empty());
    assert!(events(&client, "gated").await.iter().any(|(r, n)| r == "ApprovalIgnored" && n.contains("0123456789ab")));

    // Approved, but the world changed since the plan: not applied; a new plan awaits.
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let mut stale = get(&client, "gated").await;
    approve(&mut stale, &pending.id);
    reconcile(&stale, &ctx).await.expect("reconcile");
    assert!(Counting::actions(&executor.take()).is_empty(), "a plan that no longer holds is not applied");
    let replaced = status(&get(&client, "gated").await).pending_plan.expect("a new plan");
    assert_ne!(replaced.id, pending.id);
    assert_eq!(replaced.changes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["app_config"]);

    // The new plan, approved: applied, and nothing is pending any more.
    let mut approved = get(&client, "gated").await;
    approve(&mut approved, &replaced.id);
    reconcile(&approved, &ctx).await.expect("reconcile");
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:write"]);
    let obj = get(&client, "gated").await;
    assert_eq!(condition(&obj, "Ready").0, "True", "{:?}", condition(&obj, "Ready"));
    // (That the status write drops `pendingPlan` shows on a real API server — the e2e suite —
    // not on this fake, whose server-side apply keeps fields a write no longer sends.)

    // The same change again later (the file removed): the old approval does not carry over.
    std::fs::remove_file(dir.path().join("data/app.json")).unwrap();
    let mut again = obj.clone();
    approve(&mut again, &replaced.id);
    reconcile(&again, &ctx).await.expect("reconcile");
    assert!(Counting::actions(&executor.take()).is_empty(), "an approval holds for one plan only");
    let next = status(&get(&client, "gated").await).pending_plan.expect("a new plan");
    assert_ne!(next.id, replaced.id);
}

/// `spec.varsFrom`: variables from a Secret, used by the resources, masked everywhere the
/// controller shows or keeps something — status (history, states), events — and a program that
/// echoes its request in a failure has the value masked too.
#[tokio::test]
async fn vars_from_a_secret_are_used_and_never_shown() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    const SECRET: &str = "s3cr3t-db-p4ssword";
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        "varsFrom:\n  - secretRef: {{ name: db }}\nresources:\n  conf:\n    type: builtin/file\n    config: {{ path: \"{}/conf.txt\", content: \"password={{{{ password }}}}\" }}\n  broken:\n    type: builtin/file\n    config: {{ path: \"/proc/nope/{{{{ password }}}}\", content: x }}\n",
        dir.path().display()
    );
    let mut secret = Secret::default();
    secret.metadata.name = Some("db".into());
    secret.metadata.namespace = Some(NS.into());
    secret.data = Some([("password".to_string(), ByteString(SECRET.as_bytes().to_vec()))].into());
    let client = client_with(vec![object("withvars", &spec)], |b| b.with_object(secret)).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    reconcile(&get(&client, "withvars").await, &ctx).await.expect("reconcile");

    assert_eq!(std::fs::read_to_string(dir.path().join("conf.txt")).unwrap(), format!("password={SECRET}"));
    let obj = get(&client, "withvars").await;
    let st = status(&obj);
    assert!(st.resources.iter().any(|r| r.name == "broken" && r.status == "FAILED"), "{st:#?}");
    let shown = serde_json::to_string(&st).unwrap();
    assert!(!shown.contains(SECRET), "the secret is in the status: {shown}");
    assert!(shown.contains("/proc/nope/***"), "the failure still says what it saw, masked: {shown}");
    let notes: String = events(&client, "withvars").await.into_iter().map(|(r, n)| r + &n).collect();
    assert!(!notes.contains(SECRET), "the secret is in an event: {notes}");

    // Without the Secret: a clear, retried failure naming it.
    let client = client_with(vec![object("withvars", &spec)], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    let next = reconcile(&get(&client, "withvars").await, &ctx).await.unwrap();
    assert!(matches!(next, Next::Requeue(_)));
    let (ready, reason, message) = condition(&get(&client, "withvars").await, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "PlugUnavailable"));
    assert_eq!(message, "secret `db` not found in namespace `default`");
}

/// `spec.outputs` with `configMapName`: a ConfigMap owned by the Manifest, written after a
/// successful pass, left alone while the values hold; a name taken by another object is
/// refused, and said so.
#[tokio::test]
async fn outputs_to_a_config_map() {
    use deployster::crd::OutputsSpec;
    use k8s_openapi::api::core::v1::ConfigMap;
    let dir = tempfile::tempdir().unwrap();
    let mut obj = object("site", &builtins(dir.path()));
    obj.spec.outputs = Some(OutputsSpec {
        values: [("config".to_string(), serde_json::json!("{{ resources.app_config.state.path }}"))].into(),
        secret_name: None,
        config_map_name: Some("site-settings".into()),
    });
    let client = client_with(vec![obj], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    reconcile(&get(&client, "site").await, &ctx).await.expect("reconcile");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let written = maps.get("site-settings").await.expect("the ConfigMap is written");
    let path = dir.path().join("data/app.json").display().to_string();
    assert_eq!(written.data.unwrap_or_default().get("config"), Some(&path));
    let owner = written.metadata.owner_references.unwrap_or_default();
    assert_eq!(owner.first().map(|o| o.name.as_str()), Some("site"), "owned by the Manifest");
    let version = maps.get("site-settings").await.unwrap().metadata.resource_version;
    reconcile(&get(&client, "site").await, &ctx).await.expect("reconcile");
    assert_eq!(maps.get("site-settings").await.unwrap().metadata.resource_version, version, "not rewritten");
    assert!(events(&client, "site").await.iter().any(|(r, n)| r == "OutputsWritten" && n.contains("site-settings")));

    // Both a Secret and a ConfigMap: an invalid spec, nothing runs.
    let mut both = object("both", &builtins(dir.path()));
    both.spec.outputs = Some(OutputsSpec {
        values: [("x".to_string(), serde_json::json!("1"))].into(),
        secret_name: Some("a".into()),
        config_map_name: Some("b".into()),
    });
    let client = client_with(vec![both], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    assert_eq!(reconcile(&get(&client, "both").await, &ctx).await.unwrap(), Next::AwaitChange);
    let (_, reason, message) = condition(&get(&client, "both").await, "Ready");
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("InvalidManifest", "spec.outputs: give at most one of `secretName` or `configMapName`")
    );
}

/// Adaptive drift checks on the controller, with a clock the test moves: steady resources are
/// read less often (up to 4 × `interval`), taken for VALID in between with no program run and
/// no status write, drift is corrected at the next check and resets the interval, and a spec
/// change is read at once.
#[tokio::test]
async fn steady_resources_are_checked_less_often_and_drift_resets_them() {
    let dir = tempfile::tempdir().unwrap();
    let client = client_with(vec![object("site", &builtins(dir.path()))], |b| b).await;
    let executor = Counting::new(false);
    let mut ctx = shared_context(client.clone(), executor.clone(), &dir.path().join("plugs"), false);
    let now = Arc::new(std::sync::atomic::AtomicI64::new(T0));
    let clock = now.clone();
    ctx.clock = Box::new(move || clock.load(std::sync::atomic::Ordering::SeqCst));
    let ctx = ManifestContext::new(ctx);
    let advance = |d: Duration| now.fetch_add(d.as_millis() as i64, std::sync::atomic::Ordering::SeqCst);
    let states = |calls: &[(String, String)]| calls.iter().filter(|(_, p)| p == "state").count();
    let minutes = |n: u64| Duration::from_secs(60 * n);

    // Created, then checked at each requeue: 5 min three times, then 10, then 20 (4 × 5 min).
    let mut waits = Vec::new();
    let mut reads = Vec::new();
    for pass in 0..9 {
        if let Some(wait) = waits.last() {
            advance(*wait);
        }
        let Next::Requeue(wait) = reconcile(&get(&client, "site").await, &ctx).await.expect("reconcile") else {
            panic!("pass {pass} was not requeued")
        };
        reads.push(states(&executor.take()));
        waits.push(wait);
    }
    let m = minutes;
    assert_eq!(waits, [m(5), m(5), m(5), m(10), m(10), m(10), m(20), m(20), m(20)]);
    assert_eq!(reads[1..], [2; 8], "each check reads both states (the first pass reads them again after acting)");
    let st = status(&get(&client, "site").await);
    let at = |ms: i64| humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64));
    // Written when the status last changed (the first checks): never later than the true next one.
    let due = at(now.load(std::sync::atomic::Ordering::SeqCst) + m(20).as_millis() as i64).to_string();
    assert!(
        st.resources.iter().all(|r| r.next_check.as_deref().is_some_and(|c| c <= due.as_str())),
        "{due}: {:?}",
        st.resources
    );

    // A pass in between (a watch event, a restart of the requeue): nothing read, nothing written.
    let obj = get(&client, "site").await;
    let version = obj.resource_version();
    advance(minutes(1));
    let next = reconcile(&obj, &ctx).await.expect("reconcile");
    assert_eq!(states(&executor.take()), 0, "taken for VALID with the state it was last read with");
    assert_eq!(next, Next::Requeue(minutes(19)), "the next check stays where it was");
    assert_eq!(get(&client, "site").await.resource_version(), version, "no status write");

    // Drift between checks is found at the next one, corrected, and the interval starts again.
    std::fs::remove_file(dir.path().join("data/app.json")).unwrap();
    advance(minutes(19));
    let next = reconcile(&get(&client, "site").await, &ctx).await.expect("reconcile");
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:write"]);
    assert_eq!(next, Next::Requeue(minutes(5)), "back to the interval");
    assert_eq!(condition(&get(&client, "site").await, "Ready").1, "DriftCorrected");

    // A spec change is read and applied at once, whatever the schedule said.
    advance(minutes(1));
    let mut obj = get(&client, "site").await;
    obj.spec.vars.insert("env".into(), serde_json::json!("staging"));
    obj.metadata.generation = Some(2);
    reconcile(&obj, &ctx).await.expect("reconcile");
    assert_eq!(Counting::actions(&executor.take()), ["app_config/action:write"]);
    assert_eq!(std::fs::read_to_string(dir.path().join("data/app.json")).unwrap(), "staging");
}

#[tokio::test]
async fn a_max_interval_shorter_than_the_interval_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut obj = object("site", &builtins(dir.path()));
    obj.spec.max_interval = Some("1m".into());
    let client = client_with(vec![obj], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    let next = reconcile(&get(&client, "site").await, &ctx).await.expect("reconcile");
    assert_eq!(next, Next::AwaitChange);
    let (status, reason, message) = condition(&get(&client, "site").await, "Stalled");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "InvalidManifest"));
    assert!(message.contains("spec.maxInterval `1m` is shorter than spec.interval `5m`"), "{message}");

    let mut obj = object("later", &builtins(dir.path()));
    obj.spec.max_interval = Some("soon".into());
    let client = client_with(vec![obj], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    reconcile(&get(&client, "later").await, &ctx).await.expect("reconcile");
    let (_, _, message) = condition(&get(&client, "later").await, "Stalled");
    assert!(message.contains("spec.maxInterval `soon` is not a duration such as 90s or 30m"), "{message}");

    let mut obj = object("never", &builtins(dir.path()));
    obj.spec.retry_interval = "0s".into();
    let client = client_with(vec![obj], |b| b).await;
    let ctx = context(client.clone(), Counting::new(false), &dir.path().join("plugs"), false);
    reconcile(&get(&client, "never").await, &ctx).await.expect("reconcile");
    let (_, _, message) = condition(&get(&client, "never").await, "Stalled");
    assert!(message.contains("spec.retryInterval `0s` is zero: give a duration longer than 0"), "{message}");
}
