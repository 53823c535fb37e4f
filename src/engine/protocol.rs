//! The JSON protocol between Deployster and resource programs, both seed revisions.
//!
//! Requests are serialized from plain structs. Responses are parsed leniently about unknown
//! fields (forward compatibility) and strictly about the fields the protocol defines: a response
//! that breaks the rules fails the resource with a message saying which rule.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Sent on stdin to the `init` invocation (the program run with no arguments).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct InitRequest {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// The Deployster version, so a type may refuse versions it does not support.
    pub version: String,
    pub verbose: bool,
    /// The manifest's directory as the program sees it.
    pub workspace: String,
}

/// Sent to the state action: the init request plus the rendered config, dependencies and plugs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct StateRequest {
    #[serde(flatten)]
    pub init: InitRequest,
    pub config: Value,
    pub dependencies: IndexMap<String, DependencyView>,
    /// Plug name → path as the program sees it (only plugs actually provided).
    pub plugs: IndexMap<String, String>,
    /// Where `config` holds a value not known yet (`config.content`): only for a type whose
    /// init says `state_with_unknowns`, while a plan is made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

/// Sent to each action: the state request plus the state the resource was found in.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ActionRequest {
    #[serde(flatten)]
    pub state: StateRequest,
    /// `{}` when the state action reported none.
    #[serde(rename = "staleState")]
    pub stale_state: Value,
}

/// A dependency as a resource program sees it. `state` and `properties` carry the same value:
/// `properties` is what the older revision called it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DependencyView {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub config: Value,
    pub state: Value,
    pub properties: Value,
    /// The dependency's own dependencies, recursively.
    pub dependencies: IndexMap<String, DependencyView>,
}

/// How to invoke a program: the same image/program unless `image` is given. At least one of
/// `args`, `entrypoint` or `image`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Invocable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

impl Invocable {
    /// A program run with no arguments, entrypoint or image of its own is the type's init
    /// invocation: as a state or action invocation it would answer init again, or worse.
    fn is_init_invocation(&self) -> bool {
        self.image.is_none() && self.entrypoint.is_none() && self.args.is_empty()
    }
}

fn check_invocable(what: &str, invocable: &Invocable) -> Result<(), ProtocolError> {
    if invocable.is_init_invocation() {
        return Err(problem(format!(
            "{what} has no `args` (nor an `entrypoint` or `image`): it would run the type as for `init`; \
             give it the arguments that select it, e.g. {{\"args\": [\"state\"]}}"
        )));
    }
    Ok(())
}

/// An action a state action asks to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Action {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(flatten)]
    pub invocable: Invocable,
}

/// A plug a resource type asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlugRequest {
    /// Where the plug is mounted inside a container (ignored for local programs, which get the
    /// host path).
    pub container_path: String,
    #[serde(default)]
    pub optional: bool,
    #[serde(default)]
    pub writable: bool,
}

/// The validated init response, with the older revision's fields folded in.
#[derive(Debug, Clone, PartialEq)]
pub struct InitResponse {
    pub label: Option<String>,
    pub config_schema: Option<Value>,
    pub state_action: Invocable,
    pub plugs: IndexMap<String, PlugRequest>,
    /// Dependency alias → expected type (older revision).
    pub required_resources: IndexMap<String, String>,
    /// Deployster extension: how to delete the resource (for the controller's
    /// `deletionPolicy: Delete`). Types without one are left in place.
    pub delete_action: Option<Invocable>,
    /// The reply used the older revision's `required_plugs` or `required_resources`: the type
    /// is sent its dependencies' own dependencies too (to a bounded depth), as that revision did.
    pub older_revision: bool,
    /// What the type says the user should know, bounded ([`WARNINGS_KEPT`]).
    pub warnings: Vec<String>,
    /// Its actions report progress: one silent this long from its start is stopped.
    pub progress_timeout: Option<std::time::Duration>,
    /// The config's fields that say *which* thing the resource is (JSON Pointers: `/path`,
    /// `/object/metadata/name`): a change of one is a replacement, the old one deleted.
    pub identity: Vec<String>,
    /// Its state action may be sent, while a plan is made, a config holding values not known
    /// yet: it answers MISSING when what its identity fields name does not exist.
    pub state_with_unknowns: bool,
}

/// How many warnings of one reply are kept (the rest are counted in one more), and how many
/// bytes of each.
pub const WARNINGS_KEPT: usize = 10;
pub const WARNING_BYTES: usize = 500;

/// A reply's `warnings`: a list of strings, bounded.
fn parse_warnings(raw: Option<Value>) -> Result<Vec<String>, ProtocolError> {
    let items = match raw {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(problem("`warnings` must be a list of strings")),
    };
    let mut kept = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Value::String(text) = item else {
            return Err(problem(format!("`warnings[{i}]` must be a string, got {item}")));
        };
        if kept.len() < WARNINGS_KEPT && !text.trim().is_empty() {
            kept.push(cut_to(text.trim(), WARNING_BYTES));
        }
    }
    if items.len() > WARNINGS_KEPT {
        kept.push(format!("… and {} more warnings", items.len() - WARNINGS_KEPT));
    }
    Ok(kept)
}

/// The `init` reply as a program prints it, either revision: `plugs` (newer) or
/// `required_plugs` (older, name → container path); `required_resources` (older).
#[derive(Deserialize, JsonSchema)]
#[schemars(title = "init reply")]
struct RawInitResponse {
    /// A human-readable name for the type.
    #[serde(default)]
    label: Option<String>,
    /// A JSON Schema (Draft 4 or later) the resource's config must satisfy.
    #[serde(default)]
    config_schema: Option<Value>,
    /// How to run the state action (required).
    #[serde(default)]
    state_action: Option<Invocable>,
    #[serde(default)]
    plugs: Option<IndexMap<String, PlugRequest>>,
    #[serde(default)]
    required_plugs: Option<IndexMap<String, String>>,
    /// Dependency alias → the type it must have.
    #[serde(default)]
    required_resources: Option<IndexMap<String, String>>,
    /// How to delete the resource (Deployster extension; used by `deletionPolicy: Delete`).
    #[serde(default)]
    delete_action: Option<Invocable>,
    /// What the user should know (a deprecation, say): shown in the plan and the apply, kept
    /// in the log, a `Warning` event in a cluster. At most 10 are kept, each cut to 500 bytes.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    warnings: Option<Value>,
    /// Its actions report progress (agent messages): one silent for this long from its start,
    /// or with no progress for this long since its last, is stopped (`90s`, `5m`). Without it,
    /// the limit counts only from an action's first progress message.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    progress_timeout: Option<Value>,
    /// The config's fields that say which thing the resource is, as JSON Pointers (`/path`,
    /// `/object/metadata/name`): when a change moves one, the plan shows a replacement — the
    /// old one deleted (its delete action, with the config it was applied with), then the
    /// new one created — rather than leaving the old one behind.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    identity: Option<Value>,
    /// While a plan is made, its state action may be sent a config holding values not known
    /// yet (`{"$unknown": true}`, each listed in the request's `unknown`), its `identity`
    /// fields all known: it answers MISSING, with its actions, when the thing they name does
    /// not exist; any other answer (or a failure) is set aside, and the resource waits until
    /// the values are known. So a dependent of something new is planned as created.
    #[serde(default)]
    state_with_unknowns: Option<bool>,
}

/// What a state action found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
#[serde(rename_all = "UPPERCASE")]
#[strum(serialize_all = "UPPERCASE")]
pub enum Status {
    Valid,
    Stale,
    Missing,
}

/// The validated state response.
#[derive(Debug, Clone, PartialEq)]
pub enum StateResponse {
    Valid {
        state: Value,
    },
    /// `STALE` or `MISSING`, with at least one action.
    NeedsActions {
        status: Status,
        stale_state: Option<Value>,
        /// The state it will have once its actions ran, each value not known until then
        /// [`UNKNOWN`]; `None`: the type did not say.
        planned_state: Option<Value>,
        actions: Vec<Action>,
    },
}

/// What a planned state holds (and a config rendered from one) where a value is not known
/// until actions run: `{"$unknown": true}`.
pub const UNKNOWN: &str = "$unknown";

/// The value [`UNKNOWN`] names.
pub fn unknown() -> Value {
    serde_json::json!({ UNKNOWN: true })
}

/// Whether `value` is the unknown marker.
pub fn is_unknown(value: &Value) -> bool {
    value.as_object().is_some_and(|o| o.len() == 1 && o.get(UNKNOWN) == Some(&Value::Bool(true)))
}

/// Where `value` holds the unknown marker, as paths under `root` (`state.id`).
pub fn unknown_paths(value: &Value, root: &str) -> Vec<String> {
    fn walk(value: &Value, at: String, found: &mut Vec<String>) {
        if is_unknown(value) {
            found.push(at);
            return;
        }
        match value {
            Value::Object(map) => map.iter().for_each(|(k, v)| walk(v, format!("{at}.{k}"), found)),
            Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| walk(v, format!("{at}[{i}]"), found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(value, root.to_string(), &mut found);
    found
}

impl StateResponse {
    pub fn status(&self) -> Status {
        match self {
            StateResponse::Valid { .. } => Status::Valid,
            StateResponse::NeedsActions { status, .. } => *status,
        }
    }
}

/// The state action's reply as a program prints it, either revision: `state` (newer) or
/// `properties` (older) for a VALID resource; `actions` (at least one) when STALE or MISSING.
#[derive(Deserialize, JsonSchema)]
#[schemars(title = "state reply")]
struct RawStateResponse {
    #[schemars(with = "Status")]
    status: String,
    #[serde(default)]
    state: Option<Value>,
    #[serde(default)]
    properties: Option<Value>,
    /// STALE: the state as found (the older revision: `staleProperties`).
    #[serde(default, rename = "staleState", alias = "staleProperties")]
    stale_state: Option<Value>,
    /// STALE or MISSING: the state it will have once its actions ran, each value not known
    /// until then `{"$unknown": true}` (optional; `plannedState` also accepted). A plan reads
    /// and shows its dependents over it.
    #[serde(default, alias = "plannedState")]
    planned_state: Option<Value>,
    #[serde(default)]
    actions: Option<Vec<Action>>,
    /// What the user should know: shown in the plan and the apply, kept in the log, a
    /// `Warning` event in a cluster. At most 10 are kept, each cut to 500 bytes.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    warnings: Option<Value>,
}

/// A response that breaks the protocol: `problem` says which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct ProtocolError {
    pub problem: String,
}

fn problem(text: impl Into<String>) -> ProtocolError {
    ProtocolError { problem: text.into() }
}

/// Parses stdout as one JSON object.
fn parse_object(stdout: &[u8]) -> Result<Value, ProtocolError> {
    let text = std::str::from_utf8(stdout).map_err(|_| problem("output is not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(problem("printed nothing on stdout (expected a JSON object)"));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| problem(format!("output is not a JSON object: {e}")))?;
    if !value.is_object() {
        return Err(problem("output is JSON but not an object"));
    }
    Ok(value)
}

/// Validates an init response.
pub fn parse_init(stdout: &[u8]) -> Result<InitResponse, ProtocolError> {
    let raw: RawInitResponse =
        serde_json::from_value(parse_object(stdout)?).map_err(|e| problem(format!("malformed init response: {e}")))?;
    let state_action = raw.state_action.ok_or_else(|| problem("init response has no `state_action` (required)"))?;
    check_invocable("`state_action`", &state_action)?;
    if let Some(delete_action) = &raw.delete_action {
        check_invocable("`delete_action`", delete_action)?;
    }
    if let Some(schema) = &raw.config_schema
        && !(schema.is_object() || schema.is_boolean())
    {
        return Err(problem("`config_schema` must be a JSON Schema (an object or a boolean)"));
    }
    let older_revision = raw.required_plugs.is_some() || raw.required_resources.is_some();
    let mut plugs = raw.plugs.unwrap_or_default();
    for (name, path) in raw.required_plugs.unwrap_or_default() {
        plugs.entry(name).or_insert(PlugRequest { container_path: path, optional: false, writable: false });
    }
    for (name, plug) in &plugs {
        if !plug.container_path.starts_with('/') {
            return Err(problem(format!(
                "plug `{name}`: `container_path` must be an absolute path, got `{}`",
                plug.container_path
            )));
        }
    }
    let warnings = parse_warnings(raw.warnings)?;
    let progress_timeout = match raw.progress_timeout {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            Some(crate::engine::positive_duration(&text).map_err(|e| problem(format!("`progress_timeout`: {e}")))?)
        }
        Some(other) => {
            return Err(problem(format!("`progress_timeout` must be a duration such as \"90s\", got {other}")));
        }
    };
    let identity = parse_identity(raw.identity)?;
    Ok(InitResponse {
        warnings,
        progress_timeout,
        identity,
        state_with_unknowns: raw.state_with_unknowns.unwrap_or(false),
        label: raw.label,
        config_schema: raw.config_schema,
        state_action,
        plugs,
        required_resources: raw.required_resources.unwrap_or_default(),
        delete_action: raw.delete_action,
        older_revision,
    })
}

/// An init reply's `identity`: a list of JSON Pointers into the config.
fn parse_identity(raw: Option<Value>) -> Result<Vec<String>, ProtocolError> {
    let items = match raw {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(problem(format!("`identity` must be a list of JSON Pointers such as \"/name\", got {other}")));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(pointer) if pointer.starts_with('/') && pointer.len() > 1 => Ok(pointer.clone()),
            _ => Err(problem(format!(
                "`identity[{i}]` must be a JSON Pointer into the config such as \"/name\" or \"/metadata/name\", got {item}"
            ))),
        })
        .collect()
}

/// Validates a state response.
pub fn parse_state(stdout: &[u8]) -> Result<StateResponse, ProtocolError> {
    parse_state_reply(stdout).map(|(response, _)| response)
}

/// Validates a state response, with the warnings it gave (bounded).
pub fn parse_state_reply(stdout: &[u8]) -> Result<(StateResponse, Vec<String>), ProtocolError> {
    let mut raw: RawStateResponse =
        serde_json::from_value(parse_object(stdout)?).map_err(|e| problem(format!("malformed state response: {e}")))?;
    let warnings = parse_warnings(raw.warnings.take())?;
    checked_state(raw).map(|response| (response, warnings))
}

fn checked_state(raw: RawStateResponse) -> Result<StateResponse, ProtocolError> {
    let status = match raw.status.as_str() {
        "VALID" => Status::Valid,
        "STALE" => Status::Stale,
        "MISSING" => Status::Missing,
        other => return Err(problem(format!("`status` must be VALID, STALE or MISSING, got `{other}`"))),
    };
    if status == Status::Valid {
        if raw.actions.is_some() {
            return Err(problem("status VALID must not carry `actions`"));
        }
        if raw.planned_state.is_some() {
            return Err(problem("status VALID must not carry `planned_state`: its `state` is the state"));
        }
        let state = raw
            .state
            .or(raw.properties)
            .ok_or_else(|| problem("status VALID requires `state` (or the older `properties`)"))?;
        refuse_unknowns("a VALID resource's `state`", &state, "state")?;
        return Ok(StateResponse::Valid { state });
    }
    if let Some(stale_state) = &raw.stale_state {
        refuse_unknowns("`staleState` (the state as found)", stale_state, "staleState")?;
    }
    if let Some(planned) = &raw.planned_state
        && is_unknown(planned)
    {
        return Err(problem(
            "`planned_state` is unknown as a whole: leave it out, or mark unknown only the values not known yet",
        ));
    }
    let actions = raw.actions.unwrap_or_default();
    if actions.is_empty() {
        return Err(problem(format!("status {status} requires a non-empty `actions` list")));
    }
    let mut names = std::collections::BTreeSet::new();
    for action in &actions {
        if action.name.trim().is_empty() {
            return Err(problem("every action needs a non-empty `name`"));
        }
        if !names.insert(action.name.as_str()) {
            return Err(problem(format!("action name `{}` appears more than once", action.name)));
        }
        check_invocable(&format!("action `{}`", action.name), &action.invocable)?;
    }
    Ok(StateResponse::NeedsActions { status, stale_state: raw.stale_state, planned_state: raw.planned_state, actions })
}

/// Refuses `{"$unknown": true}` where every value is known (`what`, at `root`).
fn refuse_unknowns(what: &str, value: &Value, root: &str) -> Result<(), ProtocolError> {
    let at = unknown_paths(value, root);
    if at.is_empty() {
        return Ok(());
    }
    Err(problem(format!(
        "{what} holds unknown values (`{{\"{UNKNOWN}\": true}}` at {}): only a `planned_state` may",
        at.join(", ")
    )))
}

/// The first `limit` bytes of program output, as text, for error messages.
pub fn excerpt(bytes: &[u8], limit: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(limit)]).into_owned();
    if bytes.len() > limit { format!("{text}… ({} more bytes)", bytes.len() - limit) } else { text }
}

/// `text` cut to at most `limit` bytes on a character boundary, `…` included when it was cut
/// (an event's note over 1024 bytes is refused by the API server, and the event lost).
pub fn cut_to(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Every protocol message as a JSON Schema, generated from the types above: (file stem,
/// schema). Published as `docs/protocol/<stem>.schema.json` (a test keeps them current), so
/// that type authors in any language can validate what they print and read.
pub fn schemas() -> Vec<(&'static str, Value)> {
    let mut init_reply = serde_json::to_value(schemars::schema_for!(RawInitResponse)).expect("schemas serialize");
    // Optional in the raw type only so that its absence gets a clear message.
    init_reply["required"] = serde_json::json!(["state_action"]);
    let schema = |s: schemars::Schema| serde_json::to_value(s).expect("schemas serialize");
    vec![
        ("init-request", schema(schemars::schema_for!(InitRequest))),
        ("init-reply", init_reply),
        ("state-request", schema(schemars::schema_for!(StateRequest))),
        ("state-reply", schema(schemars::schema_for!(RawStateResponse))),
        ("action-request", schema(schemars::schema_for!(ActionRequest))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(v: Value) -> Result<StateResponse, ProtocolError> {
        parse_state(v.to_string().as_bytes())
    }

    #[test]
    fn init_accepts_both_revisions() {
        let new = json!({"plugs": {"sa": {"container_path": "/sa", "writable": true}},
                         "config_schema": {"type": "object"}, "state_action": {"args": ["state"]}});
        let r = parse_init(new.to_string().as_bytes()).unwrap();
        assert!(r.plugs["sa"].writable && !r.plugs["sa"].optional);
        assert_eq!(r.state_action.args, ["state"]);

        let old = json!({"label": "VM", "required_plugs": {"creds": "/creds"},
                         "required_resources": {"disk": "acme/disk"},
                         "state_action": {"image": "acme/vm", "entrypoint": "/state.sh"}});
        let r = parse_init(old.to_string().as_bytes()).unwrap();
        assert_eq!(r.label.as_deref(), Some("VM"));
        assert_eq!(r.plugs["creds"], PlugRequest { container_path: "/creds".into(), optional: false, writable: false });
        assert_eq!(r.required_resources["disk"], "acme/disk");
        assert_eq!(r.state_action.entrypoint.as_deref(), Some("/state.sh"));
    }

    #[test]
    fn init_rejects_what_breaks_the_protocol() {
        let cases = [
            (json!({}), "no `state_action`"),
            (json!({"state_action": {"args": ["s"]}, "config_schema": 3}), "config_schema"),
            (json!({"state_action": {"args": ["s"]}, "plugs": {"p": {"container_path": "rel"}}}), "absolute path"),
            (json!({"state_action": {}}), "`state_action` has no `args`"),
            (json!({"state_action": {"args": ["s"]}, "delete_action": {}}), "`delete_action` has no `args`"),
            (json!({"state_action": {"args": "state"}}), "malformed init response"),
        ];
        for (v, expected) in cases {
            let err = parse_init(v.to_string().as_bytes()).unwrap_err();
            assert!(err.problem.contains(expected), "{v}: {err}");
        }
        assert!(parse_init(b"hello").unwrap_err().problem.contains("not a JSON object"));
        assert!(parse_init(b"").unwrap_err().problem.contains("printed nothing"));
        assert!(parse_init(b"[1]").unwrap_err().problem.contains("not an object"));
    }

    #[test]
    fn state_valid_requires_state_or_properties_and_forbids_actions() {
        assert_eq!(
            state(json!({"status": "VALID", "state": {"a": 1}})).unwrap(),
            StateResponse::Valid { state: json!({"a": 1}) }
        );
        assert_eq!(
            state(json!({"status": "VALID", "properties": 2})).unwrap(),
            StateResponse::Valid { state: json!(2) }
        );
        assert!(state(json!({"status": "VALID"})).unwrap_err().problem.contains("requires `state`"));
        let err = state(json!({"status": "VALID", "state": {}, "actions": [{"name": "x"}]})).unwrap_err();
        assert!(err.problem.contains("must not carry `actions`"), "{err}");
    }

    #[test]
    fn stale_and_missing_require_actions() {
        let r = state(json!({"status": "STALE", "staleState": {"m": 1}, "actions": [{"name": "fix", "args": ["a"]}]}))
            .unwrap();
        let StateResponse::NeedsActions { status, stale_state, actions, .. } = r else { panic!() };
        assert_eq!(
            (status, stale_state, actions[0].invocable.args.clone()),
            (Status::Stale, Some(json!({"m": 1})), vec!["a".to_string()])
        );
        assert!(state(json!({"status": "MISSING"})).unwrap_err().problem.contains("non-empty `actions`"));
        assert!(state(json!({"status": "STALE", "actions": []})).unwrap_err().problem.contains("non-empty"));
        assert!(
            state(json!({"status": "STALE", "actions": [{"name": "a", "args": ["x"]}, {"name": "a", "args": ["x"]}]}))
                .unwrap_err()
                .problem
                .contains("more than once")
        );
        assert!(state(json!({"status": "valid"})).unwrap_err().problem.contains("got `valid`"));
        let init_mode = state(json!({"status": "MISSING", "actions": [{"name": "create"}]})).unwrap_err();
        assert!(init_mode.problem.contains("action `create` has no `args`"), "{init_mode}");
        let other_image = json!({"status": "MISSING", "actions": [{"name": "create", "image": "acme/creator"}]});
        assert!(state(other_image).is_ok(), "another image's default invocation is its own business");
    }

    #[test]
    fn requests_serialize_with_protocol_names() {
        let init = InitRequest {
            name: "n".into(),
            type_name: "t".into(),
            version: "1".into(),
            verbose: false,
            workspace: "/w".into(),
        };
        let req = ActionRequest {
            state: StateRequest {
                init,
                config: json!({}),
                dependencies: IndexMap::new(),
                plugs: IndexMap::new(),
                unknown: Vec::new(),
            },
            stale_state: json!({}),
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["type"], "t");
        assert_eq!(v["staleState"], json!({}));
        assert_eq!(v["workspace"], "/w");
    }

    #[test]
    fn a_planned_state_is_read_in_either_spelling_and_refused_where_it_cannot_be() {
        let planned = json!({"path": "/d", "mode": {"$unknown": true}});
        for key in ["planned_state", "plannedState"] {
            let r = state(json!({"status": "MISSING", key: planned, "actions": [{"name": "create", "args": ["c"]}]}))
                .unwrap();
            let StateResponse::NeedsActions { planned_state, .. } = r else { panic!("{key}") };
            assert_eq!(planned_state.as_ref(), Some(&planned), "{key}");
            assert_eq!(unknown_paths(planned_state.as_ref().unwrap(), "state"), ["state.mode"]);
        }
        let old =
            state(json!({"status": "STALE", "staleProperties": {"m": 1}, "actions": [{"name": "a", "args": ["a"]}]}));
        assert!(
            matches!(old.unwrap(), StateResponse::NeedsActions { stale_state: Some(s), .. } if s == json!({"m": 1}))
        );
        let refused = [
            (
                json!({"status": "VALID", "state": {"id": {"$unknown": true}}}),
                "a VALID resource's `state` holds unknown values (`{\"$unknown\": true}` at state.id)",
            ),
            (json!({"status": "VALID", "state": {"a": [1, {"$unknown": true}]}}), "at state.a[1]"),
            (json!({"status": "VALID", "state": {}, "planned_state": {}}), "must not carry `planned_state`"),
            (
                json!({"status": "STALE", "staleState": {"x": {"$unknown": true}}, "actions": [{"name": "a", "args": ["a"]}]}),
                "`staleState` (the state as found) holds unknown values",
            ),
            (
                json!({"status": "MISSING", "planned_state": {"$unknown": true}, "actions": [{"name": "a", "args": ["a"]}]}),
                "unknown as a whole",
            ),
        ];
        for (reply, said) in refused {
            let err = state(reply.clone()).unwrap_err();
            assert!(err.problem.contains(said), "{reply}: {err}");
        }
        // A value that only looks like the marker is data.
        assert!(!is_unknown(&json!({"$unknown": true, "other": 1})) && !is_unknown(&json!({"$unknown": "yes"})));
        assert!(state(json!({"status": "VALID", "state": {"$unknown": false}})).is_ok());
    }

    #[test]
    fn warnings_are_strings_and_bounded() {
        let reply = |warnings: Value| json!({"status": "VALID", "state": {}, "warnings": warnings}).to_string();
        let (_, said) = parse_state_reply(reply(json!(["v1 is deprecated: use v2", "  "])).as_bytes()).unwrap();
        assert_eq!(said, ["v1 is deprecated: use v2"]);
        let many: Vec<String> = (0..5000).map(|i| format!("w{i} {}", "x".repeat(2000))).collect();
        let (_, said) = parse_state_reply(reply(json!(many)).as_bytes()).unwrap();
        assert_eq!(said.len(), WARNINGS_KEPT + 1);
        assert!(said.iter().all(|w| w.len() <= WARNING_BYTES), "each is cut");
        assert_eq!(said[WARNINGS_KEPT], "… and 4990 more warnings");
        let err = parse_state_reply(reply(json!(["ok", 3])).as_bytes()).unwrap_err();
        assert_eq!(err.problem, "`warnings[1]` must be a string, got 3");
        let err = parse_state_reply(reply(json!("one")).as_bytes()).unwrap_err();
        assert_eq!(err.problem, "`warnings` must be a list of strings");
        let init = json!({"state_action": {"args": ["s"]}, "warnings": ["old"]}).to_string();
        assert_eq!(parse_init(init.as_bytes()).unwrap().warnings, ["old"]);
        let init = json!({"state_action": {"args": ["s"]}, "warnings": [{"a": 1}]}).to_string();
        assert!(parse_init(init.as_bytes()).unwrap_err().problem.starts_with("`warnings[0]` must be a string"));
        let init = |t: Value| json!({"state_action": {"args": ["s"]}, "progress_timeout": t}).to_string();
        let said = parse_init(init(json!("90s")).as_bytes()).unwrap().progress_timeout;
        assert_eq!(said, Some(std::time::Duration::from_secs(90)));
        let err = parse_init(init(json!("soon")).as_bytes()).unwrap_err();
        assert_eq!(err.problem, "`progress_timeout`: `soon` is not a duration such as 90s or 30m");
        let err = parse_init(init(json!(30)).as_bytes()).unwrap_err();
        assert_eq!(err.problem, "`progress_timeout` must be a duration such as \"90s\", got 30");
        let err = parse_init(init(json!("0s")).as_bytes()).unwrap_err();
        assert!(err.problem.contains("is zero"), "{err}");
        let init = json!({"state_action": {"args": ["s"]}, "warnings": [{"a": 1}]}).to_string();
        assert!(parse_init(init.as_bytes()).unwrap_err().problem.starts_with("`warnings[0]` must be a string"));
    }

    #[test]
    fn excerpts_are_cut() {
        assert_eq!(excerpt(b"abc", 2), "ab… (1 more bytes)");
        assert_eq!(excerpt(b"abc", 5), "abc");
    }
}
