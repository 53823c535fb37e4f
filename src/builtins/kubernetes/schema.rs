//! Each kind's field types, from the server's OpenAPI document, so that a rendered value takes
//! its field's type: `data: {n: "{{ n }}"}` with `n: 3` is the string "3" in a ConfigMap, and
//! `replicas: "{{ n }}"` with `n` from `--var n=3` the integer 3 — as a YAML file's text would be
//! read by kubectl. A conversion is made only where it is exact; otherwise the object fails with
//! the field's path, the value's type and the wanted one.
//!
//! The schema comes from `/openapi/v3/<group-version>` (current servers: one small document per
//! group-version), else from `/openapi/v2` (one document for every kind; servers before 1.24 have
//! no v3). Both list built-in kinds and the structural schemas of CustomResourceDefinitions.
//! A document is fetched when a kind is first met and kept for every kind it describes, so a
//! drift check still costs one GET. A kind the server publishes no schema for is applied as
//! written; it is asked for again after [`ABSENT_KEPT`] (its CRD may have come since).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::core::GroupVersionKind;
use serde_json::{Map, Number, Value};

use super::error::ObjectError;

/// How long a kind found without a schema is not asked for again.
/// A CRD's schema is published a moment after the CRD is served: its objects, applied at once
/// (a CRD and its objects in one manifest), are applied as written, and the next check a minute
/// later finds the schema.
pub(super) const ABSENT_KEPT: Duration = Duration::from_secs(60);

/// A field's type, as far as values are converted: scalars, and the structure that leads to them.
#[derive(Debug, Clone, PartialEq)]
enum FieldType {
    /// A named schema of the same document.
    Ref(String),
    String,
    Integer,
    Number,
    Boolean,
    IntOrString,
    Object {
        properties: HashMap<String, FieldType>,
        additional: Option<Box<FieldType>>,
    },
    Array(Box<FieldType>),
    /// Anything: nothing is converted below it.
    Any,
}

/// One document's named schemas, described down to what conversion needs.
type Definitions = HashMap<String, FieldType>;

/// A kind's schema: its document's definitions and the kind's own name among them.
#[derive(Debug, Clone)]
pub(super) struct Schema {
    definitions: Arc<Definitions>,
    root: String,
}

enum SchemaLookup {
    Found(Schema),
    Absent(Instant),
}

/// The schemas met so far, by kind.
#[derive(Default)]
pub(super) struct Schemas {
    kinds: Mutex<HashMap<GroupVersionKind, SchemaLookup>>,
    /// Held while a document is fetched: the calls that wait for it find what it found, rather
    /// than fetching it again (a first pass checks many objects of a kind at once).
    fetching: tokio::sync::Mutex<()>,
    /// Whether the server answered `/openapi/v3` with 404 (then `/openapi/v2` is read).
    no_v3: std::sync::atomic::AtomicBool,
}

impl Schemas {
    /// `gvk`'s schema, fetched with `client` when not known yet; `None` when the server
    /// publishes none (the object is applied as written).
    pub(super) async fn of(
        &self,
        client: &kube::Client,
        gvk: &GroupVersionKind,
    ) -> Result<Option<Schema>, ObjectError> {
        if let Some(known) = self.known(gvk) {
            return Ok(known);
        }
        let _fetching = self.fetching.lock().await;
        if let Some(known) = self.known(gvk) {
            return Ok(known);
        }
        let document = self.fetch(client, gvk).await?;
        let found = document.as_ref().map(kinds_of).unwrap_or_default();
        let mut kinds = self.kinds.lock().expect("schemas lock");
        for (kind, schema) in found {
            kinds.insert(kind, SchemaLookup::Found(schema));
        }
        if !matches!(kinds.get(gvk), Some(SchemaLookup::Found(_))) {
            kinds.insert(gvk.clone(), SchemaLookup::Absent(Instant::now()));
        }
        Ok(match kinds.get(gvk) {
            Some(SchemaLookup::Found(schema)) => Some(schema.clone()),
            _ => None,
        })
    }

    /// What is known of `gvk`: its schema, or that it has none (asked recently); `None` when it
    /// is to be asked.
    fn known(&self, gvk: &GroupVersionKind) -> Option<Option<Schema>> {
        match self.kinds.lock().expect("schemas lock").get(gvk) {
            Some(SchemaLookup::Found(schema)) => Some(Some(schema.clone())),
            Some(SchemaLookup::Absent(since)) if since.elapsed() < ABSENT_KEPT => Some(None),
            _ => None,
        }
    }

    /// The document describing `gvk`'s group-version (v3), else every kind (v2); `None` when the
    /// server publishes neither.
    async fn fetch(&self, client: &kube::Client, gvk: &GroupVersionKind) -> Result<Option<Value>, ObjectError> {
        use std::sync::atomic::Ordering;
        if !self.no_v3.load(Ordering::Relaxed) {
            match get(client, "/openapi/v3").await? {
                Some(index) => {
                    let path = match gvk.group.as_str() {
                        "" => format!("api/{}", gvk.version),
                        group => format!("apis/{group}/{}", gvk.version),
                    };
                    let Some(url) = index.pointer(&format!("/paths/{}/serverRelativeURL", path.replace('/', "~1")))
                    else {
                        return Ok(None);
                    };
                    return get(client, url.as_str().unwrap_or_default()).await;
                }
                None => self.no_v3.store(true, Ordering::Relaxed),
            }
        }
        get(client, "/openapi/v2").await
    }
}

/// A GET of `path` as JSON; `None` on 404. Read by its HTTP status: a path the server does not
/// serve (`/openapi/v3` before 1.24) answers with a plain-text 404, not a `Status`.
async fn get(client: &kube::Client, path: &str) -> Result<Option<Value>, ObjectError> {
    let failed = |code: Option<u16>, why: String| ObjectError::Api {
        code,
        message: format!(
            "cannot read the server's OpenAPI document {path} (to give values their fields' types): {why}"
        ),
    };
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(|e| failed(None, e.to_string()))?;
    let response = client.send(request).await.map_err(|e| failed(super::error::api_code(&e), e.to_string()))?;
    let status = response.status();
    let body = response.into_body().collect_bytes().await.map_err(|e| failed(Some(status.as_u16()), e.to_string()))?;
    match status.as_u16() {
        200..=299 => serde_json::from_slice(&body).map(Some).map_err(|e| failed(Some(status.as_u16()), e.to_string())),
        404 => Ok(None),
        // An account that may not read it (RBAC's `system:discovery` lets every authenticated
        // user): values are applied as written.
        401 | 403 => {
            tracing::warn!(path, %status, "cannot read the OpenAPI document: values are applied as written");
            Ok(None)
        }
        code => Err(failed(Some(code), format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(300)])))),
    }
}

/// Every kind a document describes, with its schema.
fn kinds_of(document: &Value) -> Vec<(GroupVersionKind, Schema)> {
    let raw = document
        .pointer("/components/schemas")
        .or_else(|| document.get("definitions"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let definitions: Arc<Definitions> =
        Arc::new(raw.iter().map(|(name, schema)| (name.clone(), field_type(schema))).collect());
    let mut kinds = Vec::new();
    for (name, schema) in &raw {
        for gvk in schema.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten() {
            let part = |key: &str| gvk.get(key).and_then(Value::as_str).unwrap_or_default();
            kinds.push((
                GroupVersionKind::gvk(part("group"), part("version"), part("kind")),
                Schema { definitions: definitions.clone(), root: name.clone() },
            ));
        }
    }
    kinds
}

/// What conversion needs of one raw schema.
fn field_type(schema: &Value) -> FieldType {
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        return FieldType::Ref(target.rsplit('/').next().unwrap_or_default().to_string());
    }
    // v3 wraps a reference with its own description or default: `allOf: [{$ref}]`.
    if let Some([only]) = schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
        return field_type(only);
    }
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string") || schema.get("format").and_then(Value::as_str) == Some("int-or-string") {
        return FieldType::IntOrString;
    }
    if flag("x-kubernetes-preserve-unknown-fields") && schema.get("properties").is_none() {
        return FieldType::Any;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => FieldType::String,
        Some("integer") => FieldType::Integer,
        Some("number") => FieldType::Number,
        Some("boolean") => FieldType::Boolean,
        Some("array") => FieldType::Array(Box::new(schema.get("items").map_or(FieldType::Any, field_type))),
        Some("object") | None if schema.get("properties").is_some() || schema.get("additionalProperties").is_some() => {
            let properties = schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.iter().map(|(k, v)| (k.clone(), field_type(v))).collect())
                .unwrap_or_default();
            let additional =
                schema.get("additionalProperties").filter(|a| a.is_object()).map(|a| Box::new(field_type(a)));
            FieldType::Object { properties, additional }
        }
        _ => FieldType::Any,
    }
}

/// A value whose type is not its field's and cannot be converted exactly.
#[derive(Debug, PartialEq)]
pub(super) struct Mismatch {
    /// `spec.replicas`, `data.n`, `spec.ports[0].port`.
    pub(super) path: String,
    pub(super) found: &'static str,
    pub(super) wanted: &'static str,
}

impl Mismatch {
    /// The filter that makes an expression's value the wanted type.
    pub(super) fn remedy(&self) -> &'static str {
        match self.wanted {
            "string" => "`| string`",
            "integer" | "integer or string" => "`| int`",
            "number" => "`| float`",
            _ => "a value of that type",
        }
    }
}

impl Schema {
    /// `object` with each scalar converted to its field's type where the conversion is exact.
    pub(super) fn convert(&self, object: &Value) -> Result<Value, Mismatch> {
        let mut path = Vec::new();
        self.walk(object, &FieldType::Ref(self.root.clone()), &mut path, 0)
    }

    fn walk(&self, value: &Value, node: &FieldType, path: &mut Vec<String>, depth: usize) -> Result<Value, Mismatch> {
        // A recursive schema (a CRD's own JSONSchemaProps) on a value nested beyond reason.
        if depth > 64 {
            return Ok(value.clone());
        }
        let mismatch =
            |wanted: &'static str, path: &[String]| Mismatch { path: shown(path), found: type_of(value), wanted };
        match (node, value) {
            (FieldType::Ref(name), _) => match self.definitions.get(name) {
                Some(node) => self.walk(value, node, path, depth + 1),
                None => Ok(value.clone()),
            },
            (_, Value::Null) | (FieldType::Any, _) => Ok(value.clone()),
            // Not known yet (a plan's): whatever it will be is converted once it is.
            _ if crate::engine::protocol::is_unknown(value) => Ok(value.clone()),
            (FieldType::String, Value::String(_)) => Ok(value.clone()),
            (FieldType::String, Value::Number(n)) => Ok(Value::String(n.to_string())),
            (FieldType::String, Value::Bool(b)) => Ok(Value::String(b.to_string())),
            (FieldType::String, _) => Err(mismatch("string", path)),
            (FieldType::Integer, _) => integer(value).ok_or_else(|| mismatch("integer", path)),
            (FieldType::Number, Value::Number(_)) => Ok(value.clone()),
            (FieldType::Number, Value::String(s)) => integer(value)
                .or_else(|| s.parse::<f64>().ok().and_then(Number::from_f64).map(Value::Number))
                .ok_or_else(|| mismatch("number", path)),
            (FieldType::Number, _) => Err(mismatch("number", path)),
            (FieldType::Boolean, Value::Bool(_)) => Ok(value.clone()),
            (FieldType::Boolean, Value::String(s)) if s == "true" || s == "false" => Ok(Value::Bool(s == "true")),
            (FieldType::Boolean, _) => Err(mismatch("boolean", path)),
            // An int-or-string takes either as it is (`port: 80`, `port: "http"`, `maxSurge: 25%`).
            (FieldType::IntOrString, Value::String(_)) => Ok(value.clone()),
            (FieldType::IntOrString, Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(value.clone()),
            (FieldType::IntOrString, _) => integer(value).ok_or_else(|| mismatch("integer or string", path)),
            (FieldType::Object { properties, additional }, Value::Object(fields)) => {
                let mut out = Map::new();
                for (key, field) in fields {
                    let converted = match properties.get(key).or(additional.as_deref()) {
                        Some(node) => {
                            path.push(key.clone());
                            let converted = self.walk(field, node, path, depth + 1);
                            path.pop();
                            converted?
                        }
                        None => field.clone(),
                    };
                    out.insert(key.clone(), converted);
                }
                Ok(Value::Object(out))
            }
            (FieldType::Array(item), Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, each)| {
                    path.push(format!("[{i}]"));
                    let converted = self.walk(each, item, path, depth + 1);
                    path.pop();
                    converted
                })
                .collect::<Result<_, _>>()
                .map(Value::Array),
            // A structure where the schema wants another: the server says what it thinks.
            (FieldType::Object { .. } | FieldType::Array(_), _) => Ok(value.clone()),
        }
    }
}

/// `value` as an integer, when it is one exactly: `3`, `3.0`, `"3"` (not `"3.5"`, `"03"`, `true`).
fn integer(value: &Value) -> Option<Value> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(value.clone()),
        Value::Number(n) => n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9e15).map(|f| Value::from(f as i64)),
        Value::String(s) => s.parse::<i64>().ok().filter(|i| i.to_string() == *s).map(Value::from),
        _ => None,
    }
}

/// `an integer`, `a string`.
pub(super) fn with_article(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {type_name}")
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// `spec.ports[0].port`.
fn shown(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if !out.is_empty() && !part.starts_with('[') {
            out.push('.');
        }
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A v2 document the shape of a real server's: ConfigMap, Deployment (with a reference, a
    /// map, a list and an int-or-string) and a CRD's structural schema.
    fn v2() -> Value {
        json!({"definitions": {
            "io.k8s.api.core.v1.ConfigMap": {
                "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}},
                               "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}},
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}]
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
                "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}},
                               "generation": {"type": "integer", "format": "int64"}}
            },
            "io.k8s.api.apps.v1.Deployment": {
                "properties": {"spec": {"$ref": "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"}},
                "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}]
            },
            "io.k8s.api.apps.v1.DeploymentSpec": {"properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "paused": {"type": "boolean"},
                "ports": {"type": "array", "items": {"properties": {
                    "port": {"type": "integer"},
                    "target": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}}}}
            }},
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
            "io.example.v1.Widget": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "number"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}]
            }
        }})
    }

    fn schema(kind: &str) -> Schema {
        kinds_of(&v2()).into_iter().find(|(gvk, _)| gvk.kind == kind).expect("described").1
    }

    #[test]
    fn numbers_and_booleans_in_string_fields_become_their_text() {
        let converted = schema("ConfigMap")
            .convert(&json!({"data": {"n": 3, "f": 1.5, "b": true, "s": "x"}, "metadata": {"labels": {"v": 2}}}))
            .unwrap();
        assert_eq!(
            converted,
            json!({"data": {"n": "3", "f": "1.5", "b": "true", "s": "x"}, "metadata": {"labels": {"v": "2"}}})
        );
    }

    #[test]
    fn numeric_strings_in_integer_fields_become_integers_where_exact() {
        let deployment = schema("Deployment");
        let converted = deployment
            .convert(&json!({"spec": {"replicas": "3", "paused": "false", "ports": [{"port": "80", "target": "http"},
                                                                                  {"port": 81.0, "target": 8080}]}}))
            .unwrap();
        assert_eq!(
            converted,
            json!({"spec": {"replicas": 3, "paused": false, "ports": [{"port": 80, "target": "http"},
                                                                       {"port": 81, "target": 8080}]}})
        );
        for (value, found) in [
            (json!("abc"), "string"),
            (json!("3.5"), "string"),
            (json!("03"), "string"),
            (json!(true), "boolean"),
            (json!(2.5), "number"),
        ] {
            let wrong = deployment.convert(&json!({"spec": {"replicas": value}})).unwrap_err();
            assert_eq!(wrong, Mismatch { path: "spec.replicas".into(), found, wanted: "integer" });
            assert_eq!(wrong.remedy(), "`| int`");
        }
        let wrong = deployment.convert(&json!({"spec": {"ports": [{}, {"port": "eighty"}]}})).unwrap_err();
        assert_eq!(wrong.path, "spec.ports[1].port");
        let wrong = deployment.convert(&json!({"spec": {"ports": [{"target": false}]}})).unwrap_err();
        assert_eq!((wrong.path.as_str(), wrong.wanted), ("spec.ports[0].target", "integer or string"));
    }

    #[test]
    fn a_custom_resource_s_structural_schema_is_followed_and_unknown_fields_are_left() {
        let converted = schema("Widget")
            .convert(&json!({"spec": {"size": "2.5", "free": {"n": "3"}, "other": "4"}, "status": 1}))
            .unwrap();
        assert_eq!(converted, json!({"spec": {"size": 2.5, "free": {"n": "3"}, "other": "4"}, "status": 1}));
        let wrong = schema("Widget").convert(&json!({"spec": {"size": "big"}})).unwrap_err();
        assert_eq!((wrong.found, wrong.wanted, wrong.remedy()), ("string", "number", "`| float`"));
    }

    #[test]
    fn a_v3_document_s_wrapped_references_are_followed() {
        let document = json!({"components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {
                "properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}],
                                        "default": {}}},
                "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}]
            },
            "io.k8s.api.apps.v1.DeploymentSpec": {"properties": {
                "replicas": {"type": "integer"},
                "maxSurge": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}
            }}
        }}});
        let (gvk, schema) = kinds_of(&document).pop().unwrap();
        assert_eq!(gvk, GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!(
            schema.convert(&json!({"spec": {"replicas": "2", "maxSurge": "25%"}})).unwrap(),
            json!({"spec": {"replicas": 2, "maxSurge": "25%"}})
        );
    }

    #[test]
    fn a_recursive_schema_ends() {
        let document = json!({"definitions": {"Props": {
            "properties": {"items": {"$ref": "#/definitions/Props"}, "n": {"type": "integer"}},
            "x-kubernetes-group-version-kind": [{"group": "x", "version": "v1", "kind": "Props"}]
        }}});
        let (_, schema) = kinds_of(&document).pop().unwrap();
        let mut deep = json!({"n": "1"});
        for _ in 0..200 {
            deep = json!({"items": deep});
        }
        schema.convert(&deep).expect("converted as deep as the limit, the rest left");
    }
}
