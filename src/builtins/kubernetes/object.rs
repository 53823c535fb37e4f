//! One object of a resource on the server: where it stands (missing, drifted as a dry run
//! confirms, not ready, valid), and applying, waiting for and deleting it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::Value;

use super::error::{ObjectError, api_code};
use super::ignore::Ignored;
use super::memory::{KeptFor, Memory};
use super::ownership::{self, Force};
use super::written::{self, written};
use super::{FIELD_MANAGER, Kinds, MANAGED_LABEL, OWNER_ANNOTATION, Said, diff, ready, schema};
use crate::engine::protocol::unknown;

/// What the config says besides the objects, and whose they are.
pub(super) struct ObjectRules {
    /// `manifest/resource`: the annotation's value.
    pub(super) owner: String,
    /// The annotation's values under the resource's names before a move (`moved`).
    pub(super) formerly: Vec<String>,
    pub(super) force: Force,
    pub(super) prune: bool,
    pub(super) adopt: bool,
    /// How long to wait for readiness after applying (`wait.ready`).
    pub(super) wait: Option<Duration>,
    /// Fields left to another writer: out of drift, and out of every apply after creation.
    pub(super) ignore: Ignored,
}

/// The resource `live` says it belongs to (its owner annotation).
fn owner_of(live: &Value) -> Option<&str> {
    live.pointer(&format!("/metadata/annotations/{}", OWNER_ANNOTATION.replace('/', "~1"))).and_then(Value::as_str)
}

/// One object of a resource, and its API.
pub(super) struct ServerObject {
    api: Api<DynamicObject>,
    wanted: Value,
    /// `Deployment team-a/web`.
    pub(super) shown: String,
    name: String,
    options: Arc<ObjectRules>,
    is_secret: bool,
    /// A CustomResourceDefinition: applied once its kind is served.
    is_crd: bool,
    /// Where dry-run findings, and what was just read or applied, are remembered.
    memory: Arc<Memory>,
    /// How [`written`] names it.
    written_as: String,
}

/// Where one object stands.
pub(super) enum ObjectStanding {
    /// With what it will be once created: the server's answer to a dry run of creating it, or
    /// unknown (a dry run it refuses: its namespace is not there yet, say).
    Missing {
        planned: Value,
    },
    /// The fields that differ, as said, and what it will be once applied (the server's answer
    /// to a dry run of applying it), when a dry run said.
    Stale {
        state: Value,
        fields: Vec<String>,
        planned: Option<Value>,
    },
    NotReady {
        state: Value,
        why: String,
    },
    Valid {
        state: Value,
    },
}

impl ServerObject {
    /// The request's object, found on the server by its kind. Fails before the work starts.
    /// The object at `at` (`config.object`, `config.objects[2]`), found on the server by its
    /// kind. Fails before the work starts.
    pub(super) async fn new(
        client: kube::Client,
        namespace: &str,
        object: &Value,
        at: &str,
        options: &Arc<ObjectRules>,
        kinds: &Kinds,
        memory: &Arc<Memory>,
    ) -> Result<Self, ObjectError> {
        let text = |field: &str| object.get(field).and_then(Value::as_str).filter(|s| !s.is_empty());
        let api_version = text("apiVersion").ok_or_else(|| ObjectError::Config(format!("{at} has no apiVersion")))?;
        let kind = text("kind").ok_or_else(|| ObjectError::Config(format!("{at} has no kind")))?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ObjectError::Config(format!("{at} has no metadata.name")))?
            .to_string();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let known = kinds.found.lock().expect("kinds lock").get(&gvk).cloned();
        let (resource, capabilities) = match known {
            Some(known) => known,
            None => {
                let found = kube::discovery::pinned_kind(&client, &gvk).await.map_err(|e| match e {
                    kube::Error::Api(status) if status.code == 404 => ObjectError::UnknownKind(format!(
                        "the server knows no kind `{kind}` in `{api_version}` ({})",
                        status.message
                    )),
                    kube::Error::Discovery(_) => {
                        ObjectError::UnknownKind(format!("the server knows no kind `{kind}` in `{api_version}`"))
                    }
                    other => ObjectError::Api {
                        code: api_code(&other),
                        message: format!("cannot look up kind `{kind}` in `{api_version}`: {other}"),
                    },
                })?;
                kinds.found.lock().expect("kinds lock").insert(gvk.clone(), found.clone());
                found
            }
        };
        // Each value of the type its field takes (`data: {n: 3}` is the text "3").
        let mut wanted = match kinds.schemas.of(&client, &gvk).await? {
            Some(schema) => schema.convert(object).map_err(|wrong| {
                ObjectError::ValueType(format!(
                    "{at} ({kind} {name}): {} is {} where the field takes {}; make the expression's value one \
                     (with {})",
                    wrong.path,
                    schema::with_article(wrong.found),
                    schema::with_article(wrong.wanted),
                    wrong.remedy()
                ))
            })?,
            None => object.clone(),
        };
        let (api, shown, object_namespace) = match capabilities.scope {
            Scope::Namespaced => {
                let namespace =
                    object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(namespace).to_string();
                wanted["metadata"]["namespace"] = Value::String(namespace.clone());
                (
                    Api::namespaced_with(client, &namespace, &resource),
                    format!("{kind} {namespace}/{name}"),
                    Some(namespace),
                )
            }
            Scope::Cluster => {
                if let Some(namespace) = object.pointer("/metadata/namespace").and_then(Value::as_str) {
                    return Err(ObjectError::Config(format!(
                        "{kind} is not namespaced, yet {at} names namespace `{namespace}`"
                    )));
                }
                (Api::all_with(client, &resource), format!("{kind} {name}"), None)
            }
        };
        let written_as = written::object_key(api_version, kind, object_namespace.as_deref(), &name);
        // Kubernetes' own groups: none, or one under k8s.io.
        if !group.contains('.') || group.ends_with(".k8s.io") {
            wanted = diff::with_port_protocols(wanted);
        }
        let is_secret = kind == "Secret" && group.is_empty();
        if is_secret {
            wanted = diff::secret_as_data(wanted);
        }
        Ok(ServerObject {
            api,
            wanted,
            shown,
            name,
            options: options.clone(),
            is_secret,
            is_crd: kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io",
            memory: memory.clone(),
            written_as,
        })
    }

    /// The object as the server holds it; what was kept of it is dropped (a delete, a wait
    /// read afresh: what the call after them reads is the server's too).
    async fn live(&self) -> Result<Option<Value>, ObjectError> {
        self.memory.forget(&self.memory_key());
        let live = self.api.get_opt(&self.name).await.map_err(|e| self.api_error("reading", e))?;
        Ok(live.map(|object| serde_json::to_value(object).expect("an object serializes")))
    }

    /// The object as the call before this one (`by`'s) left it, if that was just now; else as
    /// the server holds it ([`super::memory`]).
    async fn live_for(&self, by: KeptFor) -> Result<Option<Value>, ObjectError> {
        match self.memory.take(&self.memory_key(), by) {
            Some(kept) => Ok(kept),
            None => self.live().await,
        }
    }

    /// The object's key in memory: the resource that owns it, and the object.
    fn memory_key(&self) -> String {
        format!("{}\n{}", self.options.owner, self.shown)
    }

    /// Whether `live` is this resource's own (created or adopted by it).
    /// Or, renamed (`moved`), its old name's: the next apply writes the new name.
    fn ours(&self, live: &Value) -> bool {
        owner_of(live).is_some_and(|o| o == self.options.owner || self.options.formerly.iter().any(|f| f == o))
    }

    pub(super) async fn standing(&self) -> Result<ObjectStanding, ObjectError> {
        let live = self.live_for(KeptFor::State).await?;
        let standing = self.standing_of(live.as_ref()).await?;
        if matches!(standing, ObjectStanding::Missing { .. } | ObjectStanding::Stale { .. }) {
            // An apply comes next: it need not read the object again.
            self.memory.keep(&self.memory_key(), KeptFor::Apply, live);
        }
        Ok(standing)
    }

    async fn standing_of(&self, live: Option<&Value>) -> Result<ObjectStanding, ObjectError> {
        // A plan's, with values not known yet: all it can tell is that the object is not there.
        let unknown_at = crate::engine::protocol::unknown_paths(&self.wanted, "object");
        match (live, unknown_at.first()) {
            (None, Some(_)) => return Ok(ObjectStanding::Missing { planned: self.wanted.clone() }),
            (Some(_), Some(at)) => {
                return Err(ObjectError::Config(format!(
                    "{} exists, and {at} is not known yet: whether it differs is known once it is",
                    self.shown
                )));
            }
            (_, None) => {}
        }
        let Some(live) = live else {
            let created = Patch::Apply(self.applied(None));
            let planned = match self.api.patch(&self.name, &self.apply_params().dry_run(), &created).await {
                Ok(dry) => self.planned(&serde_json::to_value(dry).expect("an object serializes"), true),
                // The server finds the object invalid: creating it would fail the same way, so
                // the plan says it now, and nothing is applied.
                Err(kube::Error::Api(status)) if status.code == 422 => {
                    let e = kube::Error::Api(status);
                    return Err(self.api_error("checking (a server-side dry run of creating it)", e));
                }
                // Anything else (no right to patch, a namespace created by an earlier
                // resource): what it will be is not known until it is.
                Err(_) => unknown(),
            };
            return Ok(ObjectStanding::Missing { planned });
        };
        let options = &self.options;
        if !self.ours(live) && !options.adopt {
            return Err(ObjectError::NotOurs(format!(
                "{} exists and was not created by this resource ({OWNER_ANNOTATION} is not `{}`): \
                 refusing to take it over; set `adopt: true` to manage it",
                self.shown, options.owner
            )));
        }
        let mut found = diff::changes(&self.wanted, live, self.is_secret);
        found.retain(|change| !options.ignore.covers(&change.path));
        let (mut fields, planned) = match found.is_empty() {
            true => (Vec::new(), None),
            false => self.confirmed(found, live).await?,
        };
        // Adopted, or renamed (`moved`): the annotation names this resource from now on.
        let owner = owner_of(live);
        if owner != Some(options.owner.as_str()) {
            let was = owner.map_or_else(|| "(absent)".to_string(), |o| format!("\"{o}\""));
            fields.push(format!("metadata.annotations.{OWNER_ANNOTATION}: {was} → \"{}\"", options.owner));
        }
        if !labelled(live) {
            // Applied before objects were labelled (or the label was taken off): watches
            // select by it.
            fields.push(format!("metadata.labels.{MANAGED_LABEL}: (absent) → \"true\""));
        }
        let state = diff::shown(live, self.is_secret);
        if !fields.is_empty() {
            return Ok(ObjectStanding::Stale { state, fields, planned });
        }
        // As asked, and (with `wait`) ready: else a dependent waits for the `wait` action.
        match options.wait.map(|_| ready::readiness(live)) {
            None | Some(ready::Rollout::Ready) => Ok(ObjectStanding::Valid { state }),
            Some(ready::Rollout::Waiting(why)) => Ok(ObjectStanding::NotReady { state, why }),
            Some(ready::Rollout::Failed(why)) => Err(ObjectError::NotReady(format!(
                "{} is not ready, and waiting will not make it so: {why}",
                self.shown
            ))),
        }
    }

    /// Of the fields that look changed, those a server-side dry-run apply of the config would
    /// really change, as said: the server may write a value in another form, drop a field its
    /// schema does not have, or have a webhook set it. A conflict with another manager is
    /// drift too, and said. Remembered until the object's `resourceVersion` or the config
    /// changes.
    async fn confirmed(
        &self,
        found: Vec<diff::FieldChange>,
        live: &Value,
    ) -> Result<(Vec<String>, Option<Value>), ObjectError> {
        use sha2::Digest;
        let object = self.applied(Some(live));
        let metadata = |field: &str| live["metadata"][field].as_str().unwrap_or_default().to_string();
        let digest = hex::encode(sha2::Sha256::digest(format!("{:?}{object}", self.options.force).as_bytes()));
        let key = format!("{}\n{}\n{}\n{digest}", self.shown, metadata("uid"), metadata("resourceVersion"));
        if let Some(kept) = self.memory.confirmed.lock().expect("confirmed lock").get(&key).cloned() {
            return Ok(kept);
        }
        let said = |changes: &[diff::FieldChange]| changes.iter().map(ToString::to_string).collect::<Vec<_>>();
        let real = |dry: DynamicObject| {
            let dry = serde_json::to_value(dry).expect("an object serializes");
            let fields = said(
                &found
                    .iter()
                    .filter(|c| dry.pointer(&c.pointer) != live.pointer(&c.pointer))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            (fields, Some(self.planned(&dry, false)))
        };
        let kept = match self.api.patch(&self.name, &self.apply_params().dry_run(), &Patch::Apply(&object)).await {
            Ok(dry) => {
                let (mut fields, planned) = real(dry);
                // `force: true` met no conflict: say from whom it takes the fields anyway.
                let owners: Vec<String> = if self.options.force == Force::Always {
                    found.iter().flat_map(|c| ownership::owners(live, &c.pointer)).collect()
                } else {
                    Vec::new()
                };
                if !fields.is_empty() && !owners.is_empty() {
                    fields.push(format!("takes {} (force: true)", owners.join(", ")));
                }
                (fields, planned)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => match self.options.force.taken(&status) {
                Some(taken) => {
                    let forced = self.apply_params().force().dry_run();
                    let dry = self
                        .api
                        .patch(&self.name, &forced, &Patch::Apply(&object))
                        .await
                        .map_err(|e| self.api_error("checking (a server-side dry run of applying)", e))?;
                    let (mut fields, planned) = real(dry);
                    fields.push(format!("takes back {} (changed by hand)", ownership::said(&taken)));
                    (fields, planned)
                }
                None => {
                    let mut fields = said(&found);
                    fields.push(format!(
                        "{} (applying fails: {})",
                        self.api_error("a dry run of applying", kube::Error::Api(status)),
                        self.options.force.refusal()
                    ));
                    (fields, None)
                }
            },
            // Whoever may read but not write (a plan with read-only rights) sees the fields as
            // compared here, unconfirmed; applying will say the 403. Any other 403 (an admission
            // webhook's or a quota's refusal) is the server refusing the change: it fails here.
            Err(kube::Error::Api(status)) if status.code == 403 && lacks_the_right_to_patch(&status) => {
                return Ok((said(&found), None));
            }
            Err(e) => return Err(self.api_error("checking (a server-side dry run of applying)", e)),
        };
        self.memory.confirmed.lock().expect("confirmed lock").put(key, kept.clone());
        Ok(kept)
    }

    /// What the object will be once applied, from a dry run's answer (`created`: of creating
    /// it): as shown, with what only the real write decides unknown — its version, and its
    /// status (the server's and controllers' to write); created, its uid and time too, and a
    /// Service's addresses and node ports (allocated by the write).
    fn planned(&self, dry: &Value, created: bool) -> Value {
        let mut planned = diff::shown(dry, self.is_secret);
        let mut mark = |pointer: &str| {
            if let Some(value) = planned.pointer_mut(pointer) {
                *value = unknown();
            }
        };
        ["/metadata/resourceVersion", "/metadata/generation", "/status"].into_iter().for_each(&mut mark);
        if created {
            ["/metadata/uid", "/metadata/creationTimestamp", "/metadata/selfLink"].into_iter().for_each(&mut mark);
            if dry["kind"] == "Service" {
                ["/spec/clusterIP", "/spec/clusterIPs", "/spec/healthCheckNodePort"].into_iter().for_each(&mut mark);
                let ports = dry.pointer("/spec/ports").and_then(Value::as_array).map_or(0, Vec::len);
                (0..ports).for_each(|i| mark(&format!("/spec/ports/{i}/nodePort")));
            }
        }
        planned
    }

    /// The object as applied over `live` (none: it is created): the config's, annotated with
    /// its owner, its ignored fields as `live` holds them.
    fn applied(&self, live: Option<&Value>) -> Value {
        let mut object = self.wanted.clone();
        object["metadata"]["annotations"][OWNER_ANNOTATION] = Value::String(self.options.owner.clone());
        object["metadata"]["labels"][MANAGED_LABEL] = Value::String("true".into());
        if let Some(live) = live.filter(|_| !self.options.ignore.is_empty()) {
            self.options.ignore.keep_live(&mut object, live);
        }
        object
    }

    fn apply_params(&self) -> PatchParams {
        let params = PatchParams::apply(FIELD_MANAGER);
        if self.options.force == Force::Always { params.force() } else { params }
    }

    pub(super) async fn apply(&self, said: &mut Said) -> Result<(), ObjectError> {
        let live = self.live_for(KeptFor::Apply).await?;
        let (object, params) = (self.applied(live.as_ref()), self.apply_params());
        if let Some(live) = &live
            && !self.ours(live)
            && !self.options.adopt
        {
            return Err(ObjectError::NotOurs(format!(
                "{} exists and was not created by this resource: set `adopt: true` to manage it",
                self.shown
            )));
        }
        // A watch that sees this write before its answer comes waits for the answer.
        let writing = written().begin(&self.written_as);
        let applied = match self.api.patch(&self.name, &params, &Patch::Apply(&object)).await {
            Ok(applied) => {
                said.push(format!("applied {}", self.shown));
                applied
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let Some(taken) = self.options.force.taken(&status) else {
                    return Err(self.api_error("applying", kube::Error::Api(status)));
                };
                let applied = self
                    .api
                    .patch(&self.name, &params.force(), &Patch::Apply(&object))
                    .await
                    .map_err(|e| self.api_error("applying", e))?;
                let taken = ownership::said(&taken);
                said.push(format!("applied {}, taking back {taken} (changed by hand)", self.shown));
                applied
            }
            Err(e) => return Err(self.api_error("applying", e)),
        };
        writing.wrote(&applied.metadata);
        drop(writing);
        if self.is_crd || self.options.wait.is_some() {
            // A CRD's kind is served once it is Established: a dependent's object of that kind
            // waits until then, as it waits for the action itself.
            self.wait_ready(said).await?;
        } else {
            // The state call that follows reads the server's answer, not the server again.
            let applied = serde_json::to_value(applied).expect("an object serializes");
            self.memory.keep(&self.memory_key(), KeptFor::State, Some(applied));
        }
        Ok(())
    }

    /// Waits until the object is ready (kstatus rules), saying why not whenever that changes;
    /// fails at once on what waiting will not mend, and after `wait.timeout` (default 5m).
    pub(super) async fn wait_ready(&self, said: &mut Said) -> Result<(), ObjectError> {
        let timeout = self.options.wait.unwrap_or(Duration::from_secs(300));
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let live = self.live().await?.ok_or_else(|| ObjectError::NotReady(format!("{} is gone", self.shown)))?;
            match ready::readiness(&live) {
                ready::Rollout::Ready => {
                    said.push(format!("{} is ready", self.shown));
                    return Ok(());
                }
                ready::Rollout::Failed(why) => {
                    return Err(ObjectError::NotReady(format!("{} will not be ready: {why}", self.shown)));
                }
                ready::Rollout::Waiting(why) if Instant::now() >= deadline => {
                    return Err(ObjectError::NotReady(format!(
                        "{} was not ready within {}: {why}",
                        self.shown,
                        humantime::format_duration(timeout)
                    )));
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

    pub(super) async fn delete(&self, said: &mut Said) -> Result<(), ObjectError> {
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
    fn api_error(&self, doing: &str, error: kube::Error) -> ObjectError {
        let code = api_code(&error);
        let message = match error {
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
        };
        ObjectError::Api { code, message }
    }
}

/// Whether `live` carries the label watches select Deployster's objects by.
fn labelled(live: &Value) -> bool {
    live.pointer(&format!("/metadata/labels/{}", MANAGED_LABEL.replace('/', "~1"))).and_then(Value::as_str)
        == Some("true")
}

/// Whether a 403 is the authorizer's (RBAC: `User "…" cannot patch resource "…"`), not an
/// admission plugin's or webhook's refusal, which is a 403 too.
fn lacks_the_right_to_patch(status: &kube::core::Status) -> bool {
    status.message.contains(" cannot patch resource ")
}
