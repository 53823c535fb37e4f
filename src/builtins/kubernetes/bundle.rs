//! A resource's objects, as one resource: the config read, and state, apply, wait and delete
//! over each object in order.

use std::sync::Arc;

use serde_json::{Value, json};

use super::error::ObjectError;
use super::ignore::Ignored;
use super::memory::Memory;
use super::object::{ObjectRules, ObjectStanding, ServerObject};
use super::ownership::Force;
use super::{Kinds, Said};
use crate::engine::executor::Invocation;
use crate::engine::protocol::{is_unknown, unknown};

/// A resource's objects: `config.object`, or `config.objects` in the order they are applied
/// (Namespaces, then CustomResourceDefinitions, then the rest as listed).
///
/// Each object is looked up on the server when it is needed, in that order: a custom resource
/// whose CustomResourceDefinition comes earlier in the list is MISSING until the CRD is
/// applied, not an unknown kind.
pub(super) struct Bundle<'a> {
    client: kube::Client,
    /// Where objects without a namespace go.
    namespace: String,
    /// Each object, with where it is in the config (`config.objects[2]`).
    objects: Vec<(String, Value)>,
    options: Arc<ObjectRules>,
    kinds: &'a Kinds,
    memory: &'a Arc<Memory>,
    /// `config.objects`: the state is `{objects: [...]}`.
    list: bool,
}

impl<'a> Bundle<'a> {
    /// `object_named`: whether the manifest's name names the object it came from (a Manifest's
    /// `namespace/name`) rather than a file (the CLI's path, of which only the file name counts).
    pub(super) async fn new(
        client: kube::Client,
        namespace: &str,
        object_named: bool,
        invocation: &Invocation,
        kinds: &'a Kinds,
        memory: &'a Arc<Memory>,
    ) -> Result<Self, ObjectError> {
        let request: Value = serde_json::from_slice(&invocation.stdin)
            .map_err(|e| ObjectError::Config(format!("the request is not JSON: {e}")))?;
        let config = request.get("config").ok_or_else(|| ObjectError::Config("the request has no `config`".into()))?;
        let wait = match config.get("wait") {
            Some(wait) if wait.get("ready").and_then(Value::as_bool) == Some(true) => {
                let timeout = wait.get("timeout").and_then(Value::as_str).unwrap_or("5m");
                Some(humantime::parse_duration(timeout).map_err(|e| {
                    ObjectError::Config(format!(
                        "config.wait.timeout `{timeout}` is not a duration such as 5m or 90s: {e}"
                    ))
                })?)
            }
            _ => None,
        };
        let flag = |field: &str, default: bool| config.get(field).and_then(Value::as_bool).unwrap_or(default);
        let manifest = super::owner_prefix(&invocation.labels.manifest, object_named);
        let options = Arc::new(ObjectRules {
            owner: format!("{manifest}/{}", invocation.labels.resource),
            formerly: invocation.labels.formerly.iter().map(|old| format!("{manifest}/{old}")).collect(),
            force: Force::from_config(config.get("force").and_then(Value::as_bool)),
            prune: flag("prune", true),
            adopt: flag("adopt", false),
            wait,
            ignore: Ignored::from_config(config)?,
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
            (None, Some(_)) => {
                return Err(ObjectError::Config("config.objects must be a non-empty list of objects".into()));
            }
            (Some(_), Some(_)) => {
                return Err(ObjectError::Config("config has both `object` and `objects`: give one".into()));
            }
            (None, None) => return Err(ObjectError::Config("config.object (or config.objects) is required".into())),
        };
        options.ignore.check_set(objects.iter().map(|(_, object)| object))?;
        let list = config.get("objects").is_some();
        Ok(Bundle { client, namespace: namespace.to_string(), objects, options, kinds, memory, list })
    }

    /// Object `i`, looked up on the server.
    async fn call(&self, i: usize) -> Result<ServerObject, ObjectError> {
        let (at, object) = &self.objects[i];
        ServerObject::new(self.client.clone(), &self.namespace, object, at, &self.options, self.kinds, self.memory)
            .await
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

    pub(super) async fn run(&self, verb: &str, said: &mut Said) -> Result<Option<Value>, ObjectError> {
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
            other => Err(ObjectError::UnknownAction(other.to_string())),
        }
    }

    /// MISSING when every object is; STALE with `apply` when one is missing or differs, or with
    /// `wait` when all are as asked but one is not ready; else VALID — with the live object, or
    /// `{objects: [...]}` for a list. STALE or MISSING, with the state planned: each object as
    /// the server's dry run of applying it answered (what only the write decides unknown).
    async fn state(&self) -> Result<Value, ObjectError> {
        let mut states = Vec::new();
        let mut planned = Vec::new();
        let (mut to_apply, mut to_wait) = (Vec::new(), Vec::new());
        for (i, (_, object)) in self.objects.iter().enumerate() {
            let call = match self.call(i).await {
                Ok(call) => call,
                // Its kind comes with a CRD of this bundle, not applied yet.
                Err(_) if self.defines(object) => {
                    let (kind, name) = (object["kind"].as_str().unwrap_or("?"), &object["metadata"]["name"]);
                    to_apply.push(format!("Create {kind} {}", name.as_str().unwrap_or("?")));
                    planned.push(unknown());
                    continue;
                }
                Err(e) => return Err(e),
            };
            match call.standing().await? {
                ObjectStanding::Missing { planned: will_be } => {
                    to_apply.push(format!("Create {}", call.shown));
                    planned.push(will_be);
                }
                ObjectStanding::Stale { state, fields, planned: will_be } => {
                    planned.push(will_be.unwrap_or_else(unknown));
                    states.push(state);
                    to_apply.push(format!("Update {}: {}", call.shown, fields.join("; ")));
                }
                ObjectStanding::NotReady { state, why } => {
                    let mut ready = state.clone();
                    ready["status"] = unknown();
                    ready["metadata"]["resourceVersion"] = unknown();
                    planned.push(ready);
                    states.push(state);
                    to_wait.push(format!("Wait for {} to be ready: {why}", call.shown));
                }
                ObjectStanding::Valid { state } => {
                    planned.push(state.clone());
                    states.push(state);
                }
            }
        }
        let one_or_all = |mut states: Vec<Value>| match self.list {
            true => json!({"objects": states}),
            false => states.drain(..).next().unwrap_or(Value::Null),
        };
        let none_found = states.is_empty();
        let state = one_or_all(states);
        let planned = one_or_all(planned);
        let action =
            |name: &str, said: &[String]| json!([{"name": name, "description": said.join("; "), "args": [name]}]);
        let mut reply = if none_found {
            json!({"status": "MISSING", "actions": action("apply", &to_apply)})
        } else if !to_apply.is_empty() {
            json!({"status": "STALE", "staleState": state, "actions": action("apply", &to_apply)})
        } else if !to_wait.is_empty() {
            json!({"status": "STALE", "staleState": state, "actions": action("wait", &to_wait)})
        } else {
            return Ok(json!({"status": "VALID", "state": state}));
        };
        if !is_unknown(&planned) {
            reply["planned_state"] = planned;
        }
        Ok(reply)
    }
}
