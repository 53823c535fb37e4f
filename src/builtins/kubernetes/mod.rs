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
//!   unless `adopt: true`. An apply right after the state that found the object missing or
//!   drifted does not read it again, nor the state right after the apply: each takes what
//!   the call before it had from the server ([`memory`]) — a GET and a PATCH per object
//!   created or corrected, not three GETs and a PATCH.
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

mod bundle;
mod diff;
mod error;
mod ignore;
mod memory;
mod object;
mod ownership;
mod ready;
mod schema;
pub mod written;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::ApiCapabilities;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::client::{Kubeconfig, acting_as};
use crate::engine::executor::{ExecError, Executor, Exit, Invocation, Outcome, Stream};
use bundle::Bundle;
pub use error::ObjectError;
use memory::Memory;

/// The built-in type's name (`builtin/kubernetes`).
pub const NAME: &str = super::KUBERNETES;
/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "deployster";
/// The annotation naming the manifest and resource an object belongs to.
pub const OWNER_ANNOTATION: &str = "deployster.io/resource";
/// The label on every object applied (value `"true"`): what a watch of them selects by.
pub const MANAGED_LABEL: &str = "deployster.io/managed";

/// What the owner annotation of a manifest's objects starts with: a Manifest's
/// `namespace/name` (`object_named`), or the CLI manifest's file name — not its path: the same
/// whether it is given as `m.yaml`, `./m.yaml` or an absolute path, and from a laptop or CI.
pub fn owner_prefix(manifest: &str, object_named: bool) -> String {
    match std::path::Path::new(manifest).file_name() {
        Some(file) if !object_named => file.to_string_lossy().into_owned(),
        _ => manifest.to_string(),
    }
}

/// Answers `builtin/kubernetes` (the one type it is handed: `crate::executors::route`). A call
/// acts with the default client: the current kubeconfig's, made when the first such call comes (a manifest without
/// the type needs no cluster). The controller's passes act through a [`PassObjects`] instead,
/// as their Manifest's ServiceAccount ([`KubeObjects::for_pass`]); what discovery and dry runs
/// found is shared between them.
pub struct KubeObjects {
    client: OnceCell<Result<kube::Client, ObjectError>>,
    /// The controller's configuration, from which clients acting as a ServiceAccount are made,
    /// and those made so far by `namespace/account`.
    impersonation: Option<(kube::Config, Mutex<HashMap<String, kube::Client>>)>,
    /// What discovery said of each kind: looked up once, not on every call. A kind the server
    /// did not know is asked again (its CRD may come).
    kinds: Kinds,
    /// What dry runs confirmed, and objects just read or applied ([`memory`]).
    memory: Arc<Memory>,
    /// Where the default client connects.
    cluster: Kubeconfig,
}

/// What the server said of each kind: where it is served (discovery) and its fields' types.
#[derive(Default)]
struct Kinds {
    found: Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>,
    schemas: schema::Schemas,
}

/// Who one pass acts as, and where its objects without a namespace go.
struct Identity {
    client: Result<kube::Client, ObjectError>,
    namespace: String,
}

impl KubeObjects {
    pub fn new(cluster: Kubeconfig) -> Self {
        Self { cluster, client: OnceCell::new(), impersonation: None, kinds: Kinds::default(), memory: Arc::default() }
    }

    /// A type whose default client is given.
    pub fn with_client(client: kube::Client) -> Self {
        Self { client: OnceCell::new_with(Some(Ok(client))), ..Self::new(Kubeconfig::default()) }
    }

    /// The controller's: no default client — a call but through a pass's [`PassObjects`] is
    /// refused — and clients made from `config`.
    pub fn impersonating(config: kube::Config) -> Self {
        let none = Err(ObjectError::Client(
            "the controller acts only as a Manifest's ServiceAccount, and this pass entered none".into(),
        ));
        Self {
            client: OnceCell::new_with(Some(none)),
            impersonation: Some((config, Mutex::default())),
            ..Self::new(Kubeconfig::default())
        }
    }

    /// The executor of a pass whose calls act as ServiceAccount `account` (else `default`) of
    /// `namespace`, where its objects without a namespace go — where this front end
    /// impersonates (the controller); else as the default client's user, in its namespace (the
    /// CLI, which acts as whoever runs it).
    pub fn for_pass(self: &Arc<Self>, namespace: &str, account: Option<&str>) -> PassObjects {
        let Some((config, clients)) = &self.impersonation else {
            return PassObjects { objects: self.clone(), identity: None };
        };
        let account = account.unwrap_or("default");
        let key = format!("{namespace}/{account}");
        let mut clients = clients.lock().expect("clients lock");
        let client = match clients.get(&key) {
            Some(client) => Ok(client.clone()),
            None => crate::client::connect(acting_as(config, namespace, account))
                .map(|client| clients.entry(key).or_insert(client).clone())
                .map_err(|e| ObjectError::Client(format!("acting as ServiceAccount {namespace}/{account}: {e}"))),
        };
        PassObjects { objects: self.clone(), identity: Some(Identity { client, namespace: namespace.to_string() }) }
    }

    /// The client and default namespace a call acts with — the pass's `identity`, else the
    /// default client's — and whether it is a pass's (the controller's) rather than the
    /// default (the CLI's).
    async fn identity(&self, identity: Option<&Identity>) -> Result<(kube::Client, String, bool), ObjectError> {
        match identity {
            Some(identity) => identity.client.clone().map(|client| (client, identity.namespace.clone(), true)),
            None => self.client().await.map(|client| {
                let namespace = client.default_namespace().to_string();
                (client, namespace, false)
            }),
        }
    }

    async fn client(&self) -> Result<kube::Client, ObjectError> {
        self.client
            .get_or_init(|| async {
                let config = self.cluster.load().await.map_err(|e| ObjectError::Client(e.to_string()))?;
                crate::client::connect(config).map_err(|e| ObjectError::Client(e.to_string()))
            })
            .await
            .clone()
    }

    /// `builtin/kubernetes` answered here, acting as `identity` (else the default client's).
    async fn invoke_as(&self, invocation: Invocation, identity: Option<&Identity>) -> Result<Outcome, ExecError> {
        if invocation.cancel.is_cancelled() {
            return Err(ExecError::Cancelled);
        }
        self.answer(invocation, identity).await
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
                            Bundle::new(client, &namespace, entered, &invocation, &self.kinds, &self.memory).await?;
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
        let (exit, stderr) = match result {
            Ok(Some(response)) => {
                let response = response.to_string();
                if let Some(sink) = &invocation.sink {
                    sink(Stream::Stdout, &response);
                }
                stdout.push_str(&format!("{response}\n"));
                (Exit::Code(0), String::new())
            }
            Ok(None) => (Exit::Code(0), String::new()),
            Err(error) => {
                tracing::debug!(reason = error.reason(), %error, resource = %invocation.labels.resource, "builtin/{NAME} failed");
                (Exit::Failed, format!("{error}\n"))
            }
        };
        if let Some(sink) = &invocation.sink {
            stderr.lines().for_each(|line| sink(Stream::Stderr, line));
        }
        Ok(Outcome { exit, stdout: stdout.into_bytes(), stderr: stderr.into_bytes(), elapsed: started.elapsed() })
    }
}

/// Calls answered here, which end with deployster: no program starts, none outlives a run.
#[async_trait]
impl Executor for KubeObjects {
    fn starts_program(&self, _: &Invocation) -> bool {
        false
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        self.invoke_as(invocation, None).await
    }
}

/// `builtin/kubernetes` for one pass, acting as its identity.
pub struct PassObjects {
    objects: Arc<KubeObjects>,
    /// `None`: the default client's.
    identity: Option<Identity>,
}

#[async_trait]
impl Executor for PassObjects {
    fn starts_program(&self, _: &Invocation) -> bool {
        false
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        self.objects.invoke_as(invocation, self.identity.as_ref()).await
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

pub(super) fn init() -> Value {
    let object = json!({
        "type": "object",
        "description": "one Kubernetes object, of any kind the server knows",
        "properties": {
            "apiVersion": {"type": "string", "minLength": 1, "description": "the kind's group and version: `v1`, `apps/v1`"},
            "kind": {"type": "string", "minLength": 1, "description": "as the server names it: `ConfigMap`, `Deployment`"},
            "metadata": {
                "type": "object",
                "description": "`name`, and `namespace` for a namespaced kind (default: the kubeconfig's, or the Manifest's in a cluster)",
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
                "ignore": {
                    "type": "array",
                    "items": {"type": "string", "pattern": ignore::PATH_PATTERN},
                    "description": "fields left to another writer (an HPA's spec.replicas), as the plan prints them: out of drift, and out of every apply after the object's creation"
                },
                "wait": {
                    "type": "object",
                    "description": "wait until the objects are ready (kstatus rules) after applying them; a dependent waits too",
                    "properties": {
                        "ready": {"type": "boolean", "description": "wait until every object is ready"},
                        "timeout": {"type": "string", "description": "how long, e.g. 5m (default 5m)"}
                    },
                    "additionalProperties": false
                }
            },
            "oneOf": [{"required": ["object"]}, {"required": ["objects"]}],
            "additionalProperties": false
        },
        "state_action": {"args": ["state"]},
        "delete_action": {"args": ["delete"]},
        "identity": ["/object/kind", "/object/metadata/namespace", "/object/metadata/name"],
        "state_with_unknowns": true
    })
}

#[cfg(test)]
pub(crate) mod tests;
