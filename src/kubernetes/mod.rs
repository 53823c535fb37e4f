//! `builtin/kubernetes`: one Kubernetes object as a resource, answered inside deployster with
//! the API server's own answers.
//!
//! - `init`: the config is `{object, force?, prune?, adopt?}`.
//! - `state`: `MISSING` when the object does not exist; `STALE` when a field the config sets
//!   holds another value, each such field listed (Secret data only as "differs"); `VALID`
//!   otherwise, with the live object as the state (no managed fields, no Secret data), so that
//!   dependents read what the server filled in. Only what the config sets is compared: a
//!   server default or a field another manager owns is never drift, and a check that finds
//!   nothing changed costs one GET. Fields that look changed are confirmed by a server-side
//!   dry-run apply: only those the server would really change are drift (not a value it
//!   writes in another form, or a field it drops or a webhook sets), and a conflict with
//!   another manager is said at once. What a dry run found is remembered until the object's
//!   `resourceVersion` or the config changes.
//! - `apply`: server-side apply as field manager `deployster`. Fields changed by hand (kubectl's
//!   managers) are taken back, and the plan says from whom it takes which field; a conflict
//!   with another controller fails, naming the field and the manager, unless `force: true`;
//!   `force: false` takes no field from anyone ([`ownership`]). The object is annotated
//!   with the resource that owns it (the manifest's file name — a Manifest's `namespace/name`
//!   — and the resource's name); one that exists without that annotation is not adopted
//!   unless `adopt: true`.
//! - `delete` (the delete action): foreground deletion, waiting until the object is gone;
//!   nothing when `prune: false`, and never an object Deployster did not create or adopt.
//!
//! Identity: the CLI acts with the current kubeconfig. The controller never acts with its own
//! rights — that would let anyone who may create a Manifest create anything the controller
//! may: each pass acts as its Manifest's ServiceAccount (`spec.serviceAccountName`, else the
//! namespace's `default`) by impersonation, and an object without a namespace goes to the
//! Manifest's.
//!
//! - `wait: {ready: true, timeout: 5m}`: after apply, wait until the object is ready by the
//!   kstatus rules ([`ready`]), saying why not as it waits; a later state that finds it not
//!   ready is STALE with a `wait` action, so that a dependent waits. A CRD is always waited for
//!   until Established.
//!
//! - `objects: [...]`: several objects as one resource ([`Bundle`]).

mod diff;
mod ownership;
mod ready;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::client::{Kubeconfig, acting_as};
use crate::engine::executor::{ExecError, Executor, Exit, Invocation, Outcome, Stream};
use crate::engine::typeref::TypeRef;
use ownership::Force;

/// The built-in type's name (`builtin/kubernetes`).
pub const NAME: &str = "kubernetes";
/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "deployster";
/// The annotation naming the manifest and resource an object belongs to.
pub const OWNER_ANNOTATION: &str = "deployster.io/resource";

/// Answers `builtin/kubernetes`; everything else goes to `others`. A call acts with the default
/// client: the current kubeconfig's, made when the first such call comes (a manifest without
/// the type needs no cluster). The controller's passes act through a [`PassObjects`] instead,
/// as their Manifest's ServiceAccount ([`KubeObjects::for_pass`]); what discovery and dry runs
/// found is shared between them.
pub struct KubeObjects {
    others: Arc<dyn Executor>,
    client: OnceCell<Result<kube::Client, String>>,
    /// The controller's configuration, from which clients acting as a ServiceAccount are made,
    /// and those made so far by `namespace/account`.
    impersonation: Option<(kube::Config, Mutex<HashMap<String, kube::Client>>)>,
    /// What discovery said of each kind: looked up once, not on every call. A kind the server
    /// did not know is asked again (its CRD may come).
    kinds: Kinds,
    /// What dry runs confirmed ([`Call::confirmed`]).
    confirmed: Confirmed,
    /// Where the default client connects.
    cluster: Kubeconfig,
}

type Kinds = Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>;

/// The fields a dry run found changed, by the object's identity and `resourceVersion` and the
/// digest of what was applied: so a drift that persists costs no dry run per check.
type Confirmed = Arc<Mutex<lru::LruCache<String, Vec<String>>>>;

/// How many objects' dry-run findings are remembered.
const CONFIRMED_KEPT: usize = 4096;

/// Who one pass acts as, and where its objects without a namespace go.
struct Identity {
    client: Result<kube::Client, String>,
    namespace: String,
}

impl KubeObjects {
    pub fn new(others: Arc<dyn Executor>, cluster: Kubeconfig) -> Self {
        Self {
            cluster,
            others,
            client: OnceCell::new(),
            impersonation: None,
            kinds: Mutex::default(),
            confirmed: Arc::new(Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(CONFIRMED_KEPT).expect("not zero"),
            ))),
        }
    }

    /// A type whose default client is given.
    pub fn with_client(others: Arc<dyn Executor>, client: kube::Client) -> Self {
        Self { client: OnceCell::new_with(Some(Ok(client))), ..Self::new(others, Kubeconfig::default()) }
    }

    /// The controller's: no default client — a call but through a pass's [`PassObjects`] is
    /// refused — and clients made from `config`.
    pub fn impersonating(others: Arc<dyn Executor>, config: kube::Config) -> Self {
        let none = Err("the controller acts only as a Manifest's ServiceAccount, and this pass entered none".into());
        Self {
            client: OnceCell::new_with(Some(none)),
            impersonation: Some((config, Mutex::default())),
            ..Self::new(others, Kubeconfig::default())
        }
    }

    /// The executor of a pass whose calls act as ServiceAccount `account` (else `default`) of
    /// `namespace`, where its objects without a namespace go.
    pub fn for_pass(self: &Arc<Self>, namespace: &str, account: Option<&str>) -> PassObjects {
        let account = account.unwrap_or("default");
        let client = match &self.impersonation {
            None => Err("this front end cannot act as a ServiceAccount".to_string()),
            Some((config, clients)) => {
                let mut clients = clients.lock().expect("clients lock");
                match clients.get(&format!("{namespace}/{account}")) {
                    Some(client) => Ok(client.clone()),
                    None => crate::client::connect(acting_as(config, namespace, account))
                        .map(|client| clients.entry(format!("{namespace}/{account}")).or_insert(client).clone())
                        .map_err(|e| {
                            format!("cannot make a client acting as ServiceAccount {namespace}/{account}: {e}")
                        }),
                }
            }
        };
        PassObjects { objects: self.clone(), identity: Identity { client, namespace: namespace.to_string() } }
    }

    /// The client and default namespace a call acts with — the pass's `identity`, else the
    /// default client's — and whether it is a pass's (the controller's) rather than the
    /// default (the CLI's).
    async fn identity(&self, identity: Option<&Identity>) -> Result<(kube::Client, String, bool), String> {
        match identity {
            Some(identity) => identity.client.clone().map(|client| (client, identity.namespace.clone(), true)),
            None => self.client().await.map(|client| {
                let namespace = client.default_namespace().to_string();
                (client, namespace, false)
            }),
        }
    }

    async fn client(&self) -> Result<kube::Client, String> {
        self.client
            .get_or_init(|| async {
                let config = self.cluster.load().await?;
                crate::client::connect(config).map_err(|e| format!("cannot make a client of the kubeconfig: {e}"))
            })
            .await
            .clone()
    }

    /// The call's outcome, as a program's would be; its time limit and cancellation end it as
    /// they end a program.
    async fn answer(&self, invocation: Invocation, identity: Option<&Identity>) -> Result<Outcome, ExecError> {
        let started = Instant::now();
        let mut said = Said { lines: Vec::new(), sink: invocation.sink.clone() };
        let verb = invocation.args.first().cloned();
        let result = match verb.as_deref() {
            None => Ok(Some(init())),
            Some(verb) => match self.identity(identity).await {
                Err(e) => Err(e),
                Ok((client, namespace, entered)) => {
                    let work = async {
                        let bundle =
                            Bundle::new(client, &namespace, entered, &invocation, &self.kinds, &self.confirmed).await?;
                        bundle.run(verb, &mut said).await
                    };
                    tokio::select! {
                        ended = tokio::time::timeout(invocation.timeout, work) => {
                            ended.map_err(|_| ExecError::TimedOut(invocation.timeout))?
                        }
                        () = invocation.cancel.cancelled() => return Err(ExecError::Cancelled),
                    }
                }
            },
        };
        let mut stdout: String = said.lines.iter().map(|line| format!("{line}\n")).collect();
        let (code, stderr) = match result {
            Ok(Some(response)) => {
                let response = response.to_string();
                if let Some(sink) = &invocation.sink {
                    sink(Stream::Stdout, &response);
                }
                stdout.push_str(&format!("{response}\n"));
                (0, String::new())
            }
            Ok(None) => (0, String::new()),
            Err(message) => (1, format!("builtin/{NAME}: {message}\n")),
        };
        if let Some(sink) = &invocation.sink {
            stderr.lines().for_each(|line| sink(Stream::Stderr, line));
        }
        Ok(Outcome {
            exit: Exit::Code(code),
            stdout: stdout.into_bytes(),
            stderr: stderr.into_bytes(),
            elapsed: started.elapsed(),
        })
    }
}

#[async_trait]
impl Executor for KubeObjects {
    async fn preflight(&self, programs: &[TypeRef]) -> Result<(), ExecError> {
        self.others.preflight(programs).await
    }

    fn starts_program(&self, invocation: &Invocation) -> bool {
        !answered_here(invocation) && self.others.starts_program(invocation)
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        if !answered_here(&invocation) {
            return self.others.invoke(invocation).await;
        }
        if invocation.cancel.is_cancelled() {
            return Err(ExecError::Cancelled);
        }
        self.answer(invocation, None).await
    }

    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        self.others.stop_run(run_id).await
    }
}

/// `builtin/kubernetes` for one pass, acting as its identity; everything else goes to the
/// [`KubeObjects`]' `others`.
pub struct PassObjects {
    objects: Arc<KubeObjects>,
    identity: Identity,
}

#[async_trait]
impl Executor for PassObjects {
    async fn preflight(&self, programs: &[TypeRef]) -> Result<(), ExecError> {
        self.objects.preflight(programs).await
    }

    fn starts_program(&self, invocation: &Invocation) -> bool {
        self.objects.starts_program(invocation)
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        if !answered_here(&invocation) {
            return self.objects.others.invoke(invocation).await;
        }
        if invocation.cancel.is_cancelled() {
            return Err(ExecError::Cancelled);
        }
        self.objects.answer(invocation, Some(&self.identity)).await
    }

    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        self.objects.stop_run(run_id).await
    }
}

/// What a call says on stdout: kept for its outcome, and shown as it is said (a wait for
/// readiness reports as it goes).
struct Said {
    lines: Vec<String>,
    sink: Option<crate::engine::executor::LineSink>,
}

impl Said {
    fn push(&mut self, line: String) {
        if let Some(sink) = &self.sink {
            sink(Stream::Stdout, &line);
        }
        self.lines.push(line);
    }
}

fn answered_here(invocation: &Invocation) -> bool {
    matches!(&invocation.program, TypeRef::Builtin(name) if name == NAME) && invocation.entrypoint.is_none()
}

fn init() -> Value {
    let object = json!({
        "type": "object",
        "description": "one Kubernetes object, of any kind the server knows",
        "properties": {
            "apiVersion": {"type": "string", "minLength": 1},
            "kind": {"type": "string", "minLength": 1},
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"}},
                "required": ["name"]
            }
        },
        "required": ["apiVersion", "kind", "metadata"]
    });
    json!({
        "label": "Kubernetes object",
        "config_schema": {
            "type": "object",
            "properties": {
                "object": object,
                "objects": {
                    "type": "array",
                    "minItems": 1,
                    "items": object,
                    "description": "several objects as one resource: Namespaces, then CRDs, then the rest as listed"
                },
                "force": {
                    "type": "boolean",
                    "description": "true: take fields any other field manager owns; false: take none, not even those changed by hand with kubectl (default: take back only those)"
                },
                "prune": {"type": "boolean", "description": "delete the objects when the resource is deleted (default true)"},
                "adopt": {"type": "boolean", "description": "take over objects Deployster did not create"},
                "wait": {
                    "type": "object",
                    "description": "wait until the objects are ready (kstatus rules) after applying them; a dependent waits too",
                    "properties": {
                        "ready": {"type": "boolean"},
                        "timeout": {"type": "string", "description": "how long, e.g. 5m (default 5m)"}
                    },
                    "additionalProperties": false
                }
            },
            "oneOf": [{"required": ["object"]}, {"required": ["objects"]}],
            "additionalProperties": false
        },
        "state_action": {"args": ["state"]},
        "delete_action": {"args": ["delete"]}
    })
}

/// A resource's objects: `config.object`, or `config.objects` in the order they are applied
/// (Namespaces, then CustomResourceDefinitions, then the rest as listed).
///
/// Each object is looked up on the server when it is needed, in that order: a custom resource
/// whose CustomResourceDefinition comes earlier in the list is MISSING until the CRD is
/// applied, not an unknown kind.
struct Bundle<'a> {
    client: kube::Client,
    /// Where objects without a namespace go.
    namespace: String,
    /// Each object, with where it is in the config (`config.objects[2]`).
    objects: Vec<(String, Value)>,
    options: Arc<Options>,
    kinds: &'a Kinds,
    confirmed: &'a Confirmed,
    /// `config.objects`: the state is `{objects: [...]}`.
    list: bool,
}

/// What the config says besides the objects, and whose they are.
struct Options {
    /// `manifest/resource`: the annotation's value.
    owner: String,
    force: Force,
    prune: bool,
    adopt: bool,
    /// How long to wait for readiness after applying (`wait.ready`).
    wait: Option<Duration>,
}

/// One object of a resource, and its API.
struct Call {
    api: Api<DynamicObject>,
    wanted: Value,
    /// `Deployment team-a/web`.
    shown: String,
    name: String,
    options: Arc<Options>,
    is_secret: bool,
    /// A CustomResourceDefinition: applied once its kind is served.
    is_crd: bool,
    /// Where dry-run findings are remembered.
    confirmed: Option<Confirmed>,
}

/// Where one object stands.
enum Standing {
    Missing,
    /// The fields that differ, as said.
    Stale {
        state: Value,
        fields: Vec<String>,
    },
    NotReady {
        state: Value,
        why: String,
    },
    Valid {
        state: Value,
    },
}

impl<'a> Bundle<'a> {
    /// `object_named`: whether the manifest's name names the object it came from (a Manifest's
    /// `namespace/name`) rather than a file (the CLI's path, of which only the file name counts).
    async fn new(
        client: kube::Client,
        namespace: &str,
        object_named: bool,
        invocation: &Invocation,
        kinds: &'a Kinds,
        confirmed: &'a Confirmed,
    ) -> Result<Self, String> {
        let request: Value =
            serde_json::from_slice(&invocation.stdin).map_err(|e| format!("the request is not JSON: {e}"))?;
        let config = request.get("config").ok_or("the request has no `config`")?;
        let wait =
            match config.get("wait") {
                Some(wait) if wait.get("ready").and_then(Value::as_bool) == Some(true) => {
                    let timeout = wait.get("timeout").and_then(Value::as_str).unwrap_or("5m");
                    Some(humantime::parse_duration(timeout).map_err(|e| {
                        format!("config.wait.timeout `{timeout}` is not a duration such as 5m or 90s: {e}")
                    })?)
                }
                _ => None,
            };
        let flag = |field: &str, default: bool| config.get(field).and_then(Value::as_bool).unwrap_or(default);
        // The manifest's file name, not its path: the same whether it is given as `m.yaml`,
        // `./m.yaml` or an absolute path, and from a laptop or CI.
        let manifest = match std::path::Path::new(&invocation.labels.manifest).file_name() {
            Some(file) if !object_named => file.to_string_lossy().into_owned(),
            _ => invocation.labels.manifest.clone(),
        };
        let options = Arc::new(Options {
            owner: format!("{manifest}/{}", invocation.labels.resource),
            force: Force::from_config(config.get("force").and_then(Value::as_bool)),
            prune: flag("prune", true),
            adopt: flag("adopt", false),
            wait,
        });
        let objects: Vec<(String, Value)> = match (config.get("object"), config.get("objects")) {
            (Some(object), None) => vec![("config.object".into(), object.clone())],
            (None, Some(Value::Array(objects))) if !objects.is_empty() => {
                let mut listed: Vec<(String, Value)> =
                    objects.iter().enumerate().map(|(i, o)| (format!("config.objects[{i}]"), o.clone())).collect();
                let rank = |object: &Value| match object["kind"].as_str() {
                    Some("Namespace") => 0,
                    Some("CustomResourceDefinition") => 1,
                    _ => 2,
                };
                listed.sort_by_key(|(_, object)| rank(object));
                listed
            }
            (None, Some(_)) => return Err("config.objects must be a non-empty list of objects".into()),
            (Some(_), Some(_)) => return Err("config has both `object` and `objects`: give one".into()),
            (None, None) => return Err("config.object (or config.objects) is required".into()),
        };
        let list = config.get("objects").is_some();
        Ok(Bundle { client, namespace: namespace.to_string(), objects, options, kinds, confirmed, list })
    }

    /// Object `i`, looked up on the server.
    async fn call(&self, i: usize) -> Result<Call, String> {
        let (at, object) = &self.objects[i];
        let call = Call::new(self.client.clone(), &self.namespace, object, at, &self.options, self.kinds).await?;
        Ok(Call { confirmed: Some(self.confirmed.clone()), ..call })
    }

    /// Whether a CustomResourceDefinition of this bundle defines the kind of `object`.
    fn defines(&self, object: &Value) -> bool {
        let group = object["apiVersion"].as_str().and_then(|v| v.rsplit_once('/')).map(|(g, _)| g);
        self.objects.iter().any(|(_, crd)| {
            crd["kind"] == "CustomResourceDefinition"
                && crd.pointer("/spec/group").and_then(Value::as_str) == group
                && crd.pointer("/spec/names/kind") == object.get("kind")
        })
    }

    async fn run(&self, verb: &str, said: &mut Said) -> Result<Option<Value>, String> {
        match verb {
            "state" => self.state().await.map(Some),
            "apply" => {
                for i in 0..self.objects.len() {
                    self.call(i).await?.apply(said).await?;
                }
                Ok(None)
            }
            "wait" => {
                for i in 0..self.objects.len() {
                    self.call(i).await?.wait_ready(said).await?;
                }
                Ok(None)
            }
            // What the list made first goes last (a Namespace after what is in it), and the
            // objects of a CRD already gone with it are gone.
            "delete" => {
                for i in (0..self.objects.len()).rev() {
                    match self.call(i).await {
                        Ok(call) => call.delete(said).await?,
                        Err(_) if self.defines(&self.objects[i].1) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(None)
            }
            other => Err(format!("unknown action `{other}`")),
        }
    }

    /// MISSING when every object is; STALE with `apply` when one is missing or differs, or with
    /// `wait` when all are as asked but one is not ready; else VALID — with the live object, or
    /// `{objects: [...]}` for a list.
    async fn state(&self) -> Result<Value, String> {
        let mut states = Vec::new();
        let (mut to_apply, mut to_wait) = (Vec::new(), Vec::new());
        for (i, (_, object)) in self.objects.iter().enumerate() {
            let call = match self.call(i).await {
                Ok(call) => call,
                // Its kind comes with a CRD of this bundle, not applied yet.
                Err(_) if self.defines(object) => {
                    let (kind, name) = (object["kind"].as_str().unwrap_or("?"), &object["metadata"]["name"]);
                    to_apply.push(format!("Create {kind} {}", name.as_str().unwrap_or("?")));
                    continue;
                }
                Err(e) => return Err(e),
            };
            match call.standing().await? {
                Standing::Missing => to_apply.push(format!("Create {}", call.shown)),
                Standing::Stale { state, fields } => {
                    states.push(state);
                    to_apply.push(format!("Update {}: {}", call.shown, fields.join("; ")));
                }
                Standing::NotReady { state, why } => {
                    states.push(state);
                    to_wait.push(format!("Wait for {} to be ready: {why}", call.shown));
                }
                Standing::Valid { state } => states.push(state),
            }
        }
        let state = if self.list { json!({"objects": states}) } else { states.first().cloned().unwrap_or(Value::Null) };
        let action =
            |name: &str, said: &[String]| json!([{"name": name, "description": said.join("; "), "args": [name]}]);
        Ok(if states.is_empty() {
            json!({"status": "MISSING", "actions": action("apply", &to_apply)})
        } else if !to_apply.is_empty() {
            json!({"status": "STALE", "staleState": state, "actions": action("apply", &to_apply)})
        } else if !to_wait.is_empty() {
            json!({"status": "STALE", "staleState": state, "actions": action("wait", &to_wait)})
        } else {
            json!({"status": "VALID", "state": state})
        })
    }
}

impl Call {
    /// The request's object, found on the server by its kind. Fails before the work starts.
    /// The object at `at` (`config.object`, `config.objects[2]`), found on the server by its
    /// kind. Fails before the work starts.
    async fn new(
        client: kube::Client,
        namespace: &str,
        object: &Value,
        at: &str,
        options: &Arc<Options>,
        kinds: &Kinds,
    ) -> Result<Self, String> {
        let text = |field: &str| object.get(field).and_then(Value::as_str).filter(|s| !s.is_empty());
        let api_version = text("apiVersion").ok_or_else(|| format!("{at} has no apiVersion"))?;
        let kind = text("kind").ok_or_else(|| format!("{at} has no kind"))?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("{at} has no metadata.name"))?
            .to_string();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let known = kinds.lock().expect("kinds lock").get(&gvk).cloned();
        let (resource, capabilities) = match known {
            Some(known) => known,
            None => {
                let found = kube::discovery::pinned_kind(&client, &gvk).await.map_err(|e| match e {
                    kube::Error::Api(status) if status.code == 404 => {
                        format!("the server knows no kind `{kind}` in `{api_version}` ({})", status.message)
                    }
                    kube::Error::Discovery(_) => format!("the server knows no kind `{kind}` in `{api_version}`"),
                    other => format!("cannot look up kind `{kind}` in `{api_version}`: {other}"),
                })?;
                kinds.lock().expect("kinds lock").insert(gvk, found.clone());
                found
            }
        };
        let mut wanted = object.clone();
        let (api, shown) = match capabilities.scope {
            Scope::Namespaced => {
                let namespace =
                    object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(namespace).to_string();
                wanted["metadata"]["namespace"] = Value::String(namespace.clone());
                (Api::namespaced_with(client, &namespace, &resource), format!("{kind} {namespace}/{name}"))
            }
            Scope::Cluster => {
                if let Some(namespace) = object.pointer("/metadata/namespace").and_then(Value::as_str) {
                    return Err(format!("{kind} is not namespaced, yet {at} names namespace `{namespace}`"));
                }
                (Api::all_with(client, &resource), format!("{kind} {name}"))
            }
        };
        // Kubernetes' own groups: none, or one under k8s.io.
        if !group.contains('.') || group.ends_with(".k8s.io") {
            wanted = diff::with_port_protocols(wanted);
        }
        let is_secret = kind == "Secret" && group.is_empty();
        if is_secret {
            wanted = diff::secret_as_data(wanted);
        }
        Ok(Call {
            api,
            wanted,
            shown,
            name,
            options: options.clone(),
            is_secret,
            is_crd: kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io",
            confirmed: None,
        })
    }

    async fn live(&self) -> Result<Option<Value>, String> {
        let live = self.api.get_opt(&self.name).await.map_err(|e| self.api_error("reading", e))?;
        Ok(live.map(|object| serde_json::to_value(object).expect("an object serializes")))
    }

    /// Whether `live` is this resource's own (created or adopted by it).
    fn ours(&self, live: &Value) -> bool {
        live.pointer(&format!("/metadata/annotations/{}", OWNER_ANNOTATION.replace('/', "~1"))).and_then(Value::as_str)
            == Some(&self.options.owner)
    }

    async fn standing(&self) -> Result<Standing, String> {
        let Some(live) = self.live().await? else { return Ok(Standing::Missing) };
        let options = &self.options;
        if !self.ours(&live) && !options.adopt {
            return Err(format!(
                "{} exists and was not created by this resource ({OWNER_ANNOTATION} is not `{}`): \
                 refusing to take it over; set `adopt: true` to manage it",
                self.shown, options.owner
            ));
        }
        let found = diff::changes(&self.wanted, &live, self.is_secret);
        let mut fields = if found.is_empty() { Vec::new() } else { self.confirmed(found, &live).await? };
        if !self.ours(&live) {
            fields.push(format!("metadata.annotations.{OWNER_ANNOTATION}: (absent) → \"{}\"", options.owner));
        }
        let state = diff::shown(&live, self.is_secret);
        if !fields.is_empty() {
            return Ok(Standing::Stale { state, fields });
        }
        // As asked, and (with `wait`) ready: else a dependent waits for the `wait` action.
        match options.wait.map(|_| ready::readiness(&live)) {
            None | Some(ready::Rollout::Ready) => Ok(Standing::Valid { state }),
            Some(ready::Rollout::Waiting(why)) => Ok(Standing::NotReady { state, why }),
            Some(ready::Rollout::Failed(why)) => {
                Err(format!("{} is not ready, and waiting will not make it so: {why}", self.shown))
            }
        }
    }

    /// Of the fields that look changed, those a server-side dry-run apply of the config would
    /// really change, as said: the server may write a value in another form, drop a field its
    /// schema does not have, or have a webhook set it. A conflict with another manager is
    /// drift too, and said. Remembered until the object's `resourceVersion` or the config
    /// changes.
    async fn confirmed(&self, found: Vec<diff::Change>, live: &Value) -> Result<Vec<String>, String> {
        use sha2::Digest;
        let object = self.applied();
        let metadata = |field: &str| live["metadata"][field].as_str().unwrap_or_default().to_string();
        let digest = hex::encode(sha2::Sha256::digest(format!("{:?}{object}", self.options.force).as_bytes()));
        let key = format!("{}\n{}\n{}\n{digest}", self.shown, metadata("uid"), metadata("resourceVersion"));
        let memory = self.confirmed.as_ref();
        if let Some(fields) = memory.and_then(|m| m.lock().expect("confirmed lock").get(&key).cloned()) {
            return Ok(fields);
        }
        let said = |changes: &[diff::Change]| changes.iter().map(ToString::to_string).collect::<Vec<_>>();
        let real = |dry: DynamicObject| {
            let dry = serde_json::to_value(dry).expect("an object serializes");
            said(
                &found
                    .iter()
                    .filter(|c| dry.pointer(&c.pointer) != live.pointer(&c.pointer))
                    .cloned()
                    .collect::<Vec<_>>(),
            )
        };
        let fields = match self.api.patch(&self.name, &self.apply_params().dry_run(), &Patch::Apply(&object)).await {
            Ok(dry) => real(dry),
            Err(kube::Error::Api(status)) if status.code == 409 => match self.options.force.taken(&status) {
                Some(taken) => {
                    let forced = self.apply_params().force().dry_run();
                    let dry = self
                        .api
                        .patch(&self.name, &forced, &Patch::Apply(&object))
                        .await
                        .map_err(|e| self.api_error("checking (a server-side dry run of applying)", e))?;
                    let mut fields = real(dry);
                    fields.push(format!("takes back {} (changed by hand)", ownership::said(&taken)));
                    fields
                }
                None => {
                    let mut fields = said(&found);
                    fields.push(format!(
                        "{} (applying fails: {})",
                        self.api_error("a dry run of applying", kube::Error::Api(status)),
                        self.options.force.refusal()
                    ));
                    fields
                }
            },
            // Whoever may read but not write (a plan with read-only rights) sees the fields as
            // compared here, unconfirmed; applying will say the 403. Any other 403 (an admission
            // webhook's or a quota's refusal) is the server refusing the change: it fails here.
            Err(kube::Error::Api(status)) if status.code == 403 && lacks_the_right_to_patch(&status) => {
                return Ok(said(&found));
            }
            Err(e) => return Err(self.api_error("checking (a server-side dry run of applying)", e)),
        };
        if let Some(memory) = memory {
            memory.lock().expect("confirmed lock").put(key, fields.clone());
        }
        Ok(fields)
    }

    /// The object as applied: the config's, annotated with its owner.
    fn applied(&self) -> Value {
        let mut object = self.wanted.clone();
        object["metadata"]["annotations"][OWNER_ANNOTATION] = Value::String(self.options.owner.clone());
        object
    }

    fn apply_params(&self) -> PatchParams {
        let params = PatchParams::apply(FIELD_MANAGER);
        if self.options.force == Force::Always { params.force() } else { params }
    }

    async fn apply(&self, said: &mut Said) -> Result<(), String> {
        let (object, params) = (self.applied(), self.apply_params());
        if let Some(live) = self.live().await?
            && !self.ours(&live)
            && !self.options.adopt
        {
            return Err(format!(
                "{} exists and was not created by this resource: set `adopt: true` to manage it",
                self.shown
            ));
        }
        match self.api.patch(&self.name, &params, &Patch::Apply(&object)).await {
            Ok(_) => said.push(format!("applied {}", self.shown)),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let Some(taken) = self.options.force.taken(&status) else {
                    return Err(self.api_error("applying", kube::Error::Api(status)));
                };
                self.api
                    .patch(&self.name, &params.force(), &Patch::Apply(&object))
                    .await
                    .map_err(|e| self.api_error("applying", e))?;
                let taken = ownership::said(&taken);
                said.push(format!("applied {}, taking back {taken} (changed by hand)", self.shown));
            }
            Err(e) => return Err(self.api_error("applying", e)),
        }
        if self.is_crd || self.options.wait.is_some() {
            // A CRD's kind is served once it is Established: a dependent's object of that kind
            // waits until then, as it waits for the action itself.
            self.wait_ready(said).await?;
        }
        Ok(())
    }

    /// Waits until the object is ready (kstatus rules), saying why not whenever that changes;
    /// fails at once on what waiting will not mend, and after `wait.timeout` (default 5m).
    async fn wait_ready(&self, said: &mut Said) -> Result<(), String> {
        let timeout = self.options.wait.unwrap_or(Duration::from_secs(300));
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let live = self.live().await?.ok_or_else(|| format!("{} is gone", self.shown))?;
            match ready::readiness(&live) {
                ready::Rollout::Ready => {
                    said.push(format!("{} is ready", self.shown));
                    return Ok(());
                }
                ready::Rollout::Failed(why) => return Err(format!("{} will not be ready: {why}", self.shown)),
                ready::Rollout::Waiting(why) if Instant::now() >= deadline => {
                    return Err(format!(
                        "{} was not ready within {}: {why}",
                        self.shown,
                        humantime::format_duration(timeout)
                    ));
                }
                ready::Rollout::Waiting(why) => {
                    if why != last {
                        said.push(format!("waiting for {}: {why}", self.shown));
                        last = why;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn delete(&self, said: &mut Said) -> Result<(), String> {
        if !self.options.prune {
            said.push(format!("left {} in place (prune: false)", self.shown));
            return Ok(());
        }
        let Some(live) = self.live().await? else {
            said.push(format!("{} is already gone", self.shown));
            return Ok(());
        };
        if !self.ours(&live) {
            said.push(format!("left {}: it was not created by this resource", self.shown));
            return Ok(());
        }
        match self.api.delete(&self.name, &DeleteParams::foreground()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(self.api_error("deleting", e)),
            Ok(_) => {}
        }
        // Foreground: gone once its dependents are. The action's time limit bounds the wait.
        let uid = live.pointer("/metadata/uid").cloned();
        while let Some(now) = self.live().await? {
            if now.pointer("/metadata/uid") != uid.as_ref() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        said.push(format!("deleted {}", self.shown));
        Ok(())
    }

    /// The API's refusal, with what was refused: a 422's causes each with its field, a
    /// conflict's manager, a 403's verb and resource.
    fn api_error(&self, doing: &str, error: kube::Error) -> String {
        match error {
            kube::Error::Api(status) => {
                let causes: Vec<String> = status
                    .details
                    .iter()
                    .flat_map(|d| d.causes.iter())
                    .map(|c| match c.field.as_str() {
                        "" => c.message.clone(),
                        field => format!("{field}: {}", c.message),
                    })
                    .collect();
                let code = match status.reason.as_str() {
                    "" => status.code.to_string(),
                    reason => format!("{} {reason}", status.code),
                };
                let mut message = format!("{doing} {}: {} ({code})", self.shown, status.message);
                if !causes.is_empty() && !causes.iter().all(|c| status.message.contains(c.as_str())) {
                    message.push_str(&format!("; {}", causes.join("; ")));
                }
                // Server-side apply of an object that does not exist yet is also authorized as a
                // `create`, and a server refuses that with no reason given ("… is forbidden: ").
                if status.code == 403 && doing == "applying" && status.message.trim_end().ends_with("forbidden:") {
                    message.push_str(
                        "; creating an object by server-side apply needs the `create` verb as well as `patch`",
                    );
                }
                if status.code == 409 && doing == "applying" {
                    message.push_str(&format!("; {}", self.options.force.refusal()));
                }
                message
            }
            other => format!("{doing} {}: {other}", self.shown),
        }
    }
}

/// Whether a 403 is the authorizer's (RBAC: `User "…" cannot patch resource "…"`), not an
/// admission plugin's or webhook's refusal, which is a 403 too.
fn lacks_the_right_to_patch(status: &kube::core::Status) -> bool {
    status.message.contains(" cannot patch resource ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_acts_as_the_manifest_s_service_account() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let acting = acting_as(&config, "team-a", "deployer");
        assert_eq!(acting.auth_info.impersonate.as_deref(), Some("system:serviceaccount:team-a:deployer"));
        assert_eq!(acting.default_namespace, "team-a");
        assert_eq!(config.auth_info.impersonate, None, "the controller's own configuration is untouched");
    }

    #[tokio::test]
    async fn a_pass_acts_as_what_it_entered_and_the_controller_never_as_itself() {
        crate::client::install_crypto();
        let others: Arc<dyn Executor> =
            Arc::new(crate::engine::executor::fake::FakeExecutor::new(|_| unreachable!("no other type")));
        let objects =
            Arc::new(KubeObjects::impersonating(others, kube::Config::new("http://127.0.0.1:1".parse().unwrap())));
        let Err(refused) = objects.identity(None).await else { panic!("acted as the controller") };
        assert!(refused.contains("acts only as a Manifest's ServiceAccount"), "{refused}");
        let pass = objects.for_pass("team-a", None);
        let (_, namespace, entered) = objects.identity(Some(&pass.identity)).await.unwrap();
        assert_eq!((namespace.as_str(), entered), ("team-a", true));
        let again = objects.for_pass("team-a", None);
        assert_eq!(
            objects.impersonation.as_ref().unwrap().1.lock().unwrap().keys().collect::<Vec<_>>(),
            ["team-a/default"],
            "one client per ServiceAccount, shared by its passes"
        );
        drop((pass, again));
    }
    /// One request a [`loopback_api_server`] was sent: method, path with query, headers (lower
    /// case), body.
    #[derive(Clone, Debug)]
    struct Request {
        method: String,
        path: String,
        headers: String,
        body: Value,
    }

    /// An API server on loopback that knows ConfigMaps (discovery) and answers every other
    /// request with `answer`; what it was sent is kept in the returned list.
    async fn loopback_api_server(
        answer: impl Fn(&Request) -> (u16, Value) + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<Request>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                // The head, then as much body as it announces.
                let mut bytes = Vec::new();
                let mut chunk = [0u8; 8192];
                let head_end = loop {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    bytes.extend_from_slice(&chunk[..n]);
                    if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                    if n == 0 {
                        break bytes.len();
                    }
                };
                let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                    .unwrap_or(0);
                while bytes.len() < head_end + length {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    bytes.extend_from_slice(&chunk[..n]);
                }
                let original = String::from_utf8_lossy(&bytes[..head_end]).to_string();
                let mut words = original.split_whitespace();
                let request = Request {
                    method: words.next().unwrap_or_default().to_string(),
                    path: words.next().unwrap_or_default().to_string(),
                    headers: head,
                    body: serde_json::from_slice(&bytes[head_end..]).unwrap_or(Value::Null),
                };
                let (code, body) = if request.path == "/api/v1" {
                    let resources = json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                        {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap",
                         "verbs": ["get", "list", "patch", "create", "delete"]}]});
                    (200, resources)
                } else {
                    let answered = answer(&request);
                    kept.lock().unwrap().push(request);
                    answered
                };
                let body = body.to_string();
                let response = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        (address, seen)
    }

    /// A Status of the API's.
    fn status(code: u16, reason: &str, message: &str, causes: Value) -> (u16, Value) {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                            "reason": reason, "details": {"name": "x", "kind": "configmaps", "causes": causes}, "code": code});
        (code, status)
    }

    /// An API server on loopback that forbids every request, naming the user it was asked to
    /// act as (the `Impersonate-User` header), as Kubernetes' RBAC does.
    async fn forbidding_api_server() -> String {
        let (address, _) = loopback_api_server(|request| {
            let user = request
                .headers
                .lines()
                .find_map(|l| l.strip_prefix("impersonate-user:").map(|u| u.trim().to_string()))
                .unwrap_or_else(|| "system:anonymous".into());
            let message = format!(
                "configmaps \"x\" is forbidden: User \"{user}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"team\""
            );
            status(403, "Forbidden", &message, json!([]))
        })
        .await;
        address
    }

    /// A `builtin/kubernetes` call of pass `run-1`, resource `cm` of manifest `team/app` (from
    /// a file: its owner annotation is `app/cm`; in the controller, `team/app/cm`).
    fn call(verb: &str, config: Value) -> Invocation {
        let request = json!({"name": "cm", "config": config});
        Invocation {
            args: vec![verb.into()],
            stdin: request.to_string().into_bytes(),
            labels: crate::engine::executor::InvocationLabels {
                manifest: "team/app".into(),
                resource: "cm".into(),
                run_id: "run-1".into(),
                ..Default::default()
            },
            ..Invocation::new(TypeRef::Builtin(NAME.into()), Duration::from_secs(10))
        }
    }

    /// The type, acting on the server at `address` as the CLI does (no impersonation).
    fn objects_at(address: &str) -> KubeObjects {
        crate::client::install_crypto();
        let others: Arc<dyn Executor> =
            Arc::new(crate::engine::executor::fake::FakeExecutor::new(|_| unreachable!("no other type")));
        let mut config = kube::Config::new(format!("http://{address}").parse().unwrap());
        config.default_namespace = "team".into();
        KubeObjects::with_client(others, kube::Client::try_from(config).unwrap())
    }

    /// A ConfigMap of this resource's as the server holds it.
    fn live_config_map(data: Value, version: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data,
               "metadata": {"name": "x", "namespace": "team", "uid": "u-1", "resourceVersion": version,
                            "annotations": {OWNER_ANNOTATION: "app/cm"}}})
    }

    async fn state_of(objects: &KubeObjects, config: Value) -> Value {
        let outcome = objects.invoke(call("state", config)).await.unwrap();
        let stdout = String::from_utf8_lossy(&outcome.stdout).to_string();
        assert!(outcome.exit.success(), "{stdout}{}", String::from_utf8_lossy(&outcome.stderr));
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
    }

    /// Fields that look changed are confirmed by a server-side dry-run apply (`dryRun=All`, as
    /// field manager `deployster`): what the server would write as it is is not drift, what it
    /// would change is; the finding is remembered until the `resourceVersion` changes.
    #[tokio::test]
    async fn drift_is_what_a_dry_run_apply_would_change() {
        // The server holds `mode: FAST` and writes any `mode` in capitals (as a webhook might).
        let live = Arc::new(Mutex::new(live_config_map(json!({"mode": "FAST", "size": "1"}), "7")));
        let held = live.clone();
        let (address, seen) = loopback_api_server(move |request| match request.method.as_str() {
            "GET" => (200, held.lock().unwrap().clone()),
            "PATCH" => {
                let mut result = held.lock().unwrap().clone();
                for (key, value) in request.body["data"].as_object().unwrap() {
                    result["data"][key] = json!(value.as_str().unwrap().to_uppercase());
                }
                (200, result)
            }
            _ => (405, json!({})),
        })
        .await;
        let objects = objects_at(&address);
        let config = |mode: &str, size: &str| {
            json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                              "data": {"mode": mode, "size": size}}})
        };

        let state = state_of(&objects, config("fast", "1")).await;
        assert_eq!(state["status"], "VALID", "the server would write `fast` as it holds it: {state}");
        let patches: Vec<Request> = seen.lock().unwrap().iter().filter(|r| r.method == "PATCH").cloned().collect();
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert!(patches[0].path.contains("dryRun=All"), "a dry run: {}", patches[0].path);
        assert!(patches[0].path.contains("fieldManager=deployster"), "{}", patches[0].path);
        assert!(!patches[0].path.contains("force=true"), "{}", patches[0].path);
        assert!(patches[0].headers.contains("content-type: application/apply-patch+yaml"), "{}", patches[0].headers);
        assert_eq!(patches[0].body["metadata"]["annotations"][OWNER_ANNOTATION], "app/cm", "as applied");

        // Again, the object unchanged: remembered, no second dry run.
        assert_eq!(state_of(&objects, config("fast", "1")).await["status"], "VALID");
        assert_eq!(seen.lock().unwrap().iter().filter(|r| r.method == "PATCH").count(), 1, "remembered");

        // Only what the server would really change is drift.
        let state = state_of(&objects, config("fast", "2")).await;
        assert_eq!(state["status"], "STALE", "{state}");
        let description = state["actions"][0]["description"].as_str().unwrap();
        assert_eq!(description, r#"Update ConfigMap team/x: data.size: "1" → "2""#);

        // A new resourceVersion is looked at anew.
        *live.lock().unwrap() = live_config_map(json!({"mode": "SLOW", "size": "1"}), "8");
        let state = state_of(&objects, config("fast", "1")).await;
        assert_eq!(
            state["actions"][0]["description"].as_str().unwrap(),
            r#"Update ConfigMap team/x: data.mode: "SLOW" → "fast""#
        );
        assert_eq!(seen.lock().unwrap().iter().filter(|r| r.method == "PATCH").count(), 3);
    }

    /// A dry run that conflicts is drift, said with the manager; one the server refuses as
    /// invalid fails the state with each field's reason; one it forbids leaves the fields as
    /// compared.
    #[tokio::test]
    async fn a_dry_run_the_server_refuses_is_said() {
        let answer = Arc::new(Mutex::new(status(409, "Conflict", "", json!([]))));
        let answering = answer.clone();
        let (address, _) = loopback_api_server(move |request| match request.method.as_str() {
            "GET" => (200, live_config_map(json!({"mode": "a"}), "1")),
            _ => answering.lock().unwrap().clone(),
        })
        .await;
        let objects = objects_at(&address);
        let config = |mode: &str| json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"mode": mode}}});

        *answer.lock().unwrap() = status(
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"other\": .data.mode",
            json!([{"reason": "FieldManagerConflict", "message": "conflict with \"other\"", "field": ".data.mode"}]),
        );
        let state = state_of(&objects, config("b")).await;
        assert_eq!(state["status"], "STALE");
        let description = state["actions"][0]["description"].as_str().unwrap();
        assert!(description.contains(r#"data.mode: "a" → "b""#), "{description}");
        assert!(description.contains(r#"conflict with "other": .data.mode"#), "{description}");
        assert!(description.contains("applying fails: another controller owns those fields"), "{description}");

        *answer.lock().unwrap() = status(
            422,
            "Invalid",
            "ConfigMap \"x\" is invalid",
            json!([{"reason": "FieldValueInvalid", "message": "Invalid value: \"c\"", "field": "data.mode"}]),
        );
        let outcome = objects.invoke(call("state", config("c"))).await.unwrap();
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        assert!(!outcome.exit.success());
        assert!(
            stderr.contains("checking (a server-side dry run of applying) ConfigMap team/x: ConfigMap \"x\" is invalid (422 Invalid); data.mode: Invalid value: \"c\""),
            "{stderr}"
        );

        // The authorizer's 403 (the words of a real server's RBAC): the fields as compared.
        let rbac = "configmaps \"x\" is forbidden: User \"system:serviceaccount:team:reader\" cannot patch \
                    resource \"configmaps\" in API group \"\" in the namespace \"team\"";
        *answer.lock().unwrap() = status(403, "Forbidden", rbac, json!([]));
        let state = state_of(&objects, config("d")).await;
        assert_eq!(state["actions"][0]["description"], r#"Update ConfigMap team/x: data.mode: "a" → "d""#);

        // An admission webhook's 403 refuses the change itself: the state fails, saying so.
        let webhook = "admission webhook \"policy.example.com\" denied the request: mode d is not allowed";
        *answer.lock().unwrap() = status(403, "Forbidden", webhook, json!([]));
        let outcome = objects.invoke(call("state", config("e"))).await.unwrap();
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        assert!(!outcome.exit.success());
        assert!(stderr.contains("denied the request: mode d is not allowed (403 Forbidden)"), "{stderr}");
    }

    /// A ServiceAccount without the rights fails the call with the API's 403, which names the
    /// account (impersonated), the verb and the resource.
    #[tokio::test]
    async fn a_service_account_without_rights_fails_with_the_api_s_403() {
        crate::client::install_crypto();
        let address = forbidding_api_server().await;
        let others: Arc<dyn Executor> =
            Arc::new(crate::engine::executor::fake::FakeExecutor::new(|_| unreachable!("no other type")));
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let objects = Arc::new(KubeObjects::impersonating(others, config));
        let pass = objects.for_pass("team", Some("deployer"));
        let invocation =
            call("state", json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}}));
        let outcome = pass.invoke(invocation).await.unwrap();
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        assert!(!outcome.exit.success());
        assert!(
            stderr.contains(
                "reading ConfigMap team/x: configmaps \"x\" is forbidden: User \"system:serviceaccount:team:deployer\" \
                 cannot get resource \"configmaps\""
            ),
            "{stderr}"
        );
        assert!(stderr.contains("(403 Forbidden)"), "{stderr}");
    }
}
