//! What differs between the object a config asks for and the live one, field by field, with
//! nothing of a Secret's data shown.

use serde_json::Value;

/// One field whose live value is not the wanted one.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldChange {
    /// `spec.template.spec.containers[0].image`.
    pub path: String,
    /// The same field as a JSON pointer (`/spec/template/spec/containers/0/image`): a key may
    /// hold dots (`deployster.io/resource`), a pointer says it unambiguously.
    pub pointer: String,
    /// `None`: the field is not there.
    pub live: Option<Value>,
    pub wanted: Value,
    /// A Secret's data: only that it differs is said.
    pub secret: bool,
}

impl std::fmt::Display for FieldChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.secret {
            return write!(f, "{} differs (Secret data is not shown)", self.path);
        }
        match &self.live {
            None => write!(f, "{}: (absent) → {}", self.path, self.wanted),
            Some(live) => write!(f, "{}: {live} → {}", self.path, self.wanted),
        }
    }
}

/// The fields `wanted` sets that `live` does not hold as asked. Only what the config sets is
/// compared: whatever the server filled in (defaults, status, fields other managers own) is
/// never drift. Lists of as many items are compared item by item; a list of another length
/// differs whole.
pub fn changes(wanted: &Value, live: &Value, is_secret: bool) -> Vec<FieldChange> {
    let mut found = Vec::new();
    walk(wanted, Some(live), (String::new(), String::new()), is_secret, &mut found);
    found
}

/// A port's `protocol` written out where a built-in kind's config leaves it to the default
/// (`TCP`). Server-side apply merges `ports` lists by their keys, `port` (or `containerPort`)
/// *and* `protocol`, and servers before the key-defaulting fix refuse an element that omits
/// one (1.20: 500 "associative list with keys has an element that omits key field
/// \"protocol\""). Writing the default the server would fill in changes nothing it stores.
pub fn with_port_protocols(mut wanted: Value) -> Value {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(fields) => {
                for (key, field) in fields.iter_mut() {
                    if key == "ports"
                        && let Value::Array(ports) = field
                    {
                        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                            if (port.contains_key("port") || port.contains_key("containerPort"))
                                && !port.contains_key("protocol")
                            {
                                port.insert("protocol".into(), Value::String("TCP".into()));
                            }
                        }
                    }
                    walk(field);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut wanted);
    wanted
}

/// A Secret's `stringData` as the `data` the server would write it into, base64-encoded: so it
/// is applied and compared where it lives.
pub fn secret_as_data(mut wanted: Value) -> Value {
    use base64::Engine;
    if let Some(Value::Object(strings)) = wanted.as_object_mut().and_then(|o| o.remove("stringData")) {
        let data = wanted
            .as_object_mut()
            .expect("an object")
            .entry("data")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(data) = data {
            for (key, value) in strings {
                let text = value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
                data.insert(key, Value::String(base64::engine::general_purpose::STANDARD.encode(text)));
            }
        }
    }
    wanted
}

/// `at`: the field's path as said and as a JSON pointer.
fn walk(wanted: &Value, live: Option<&Value>, at: (String, String), is_secret: bool, found: &mut Vec<FieldChange>) {
    let (path, pointer) = at;
    let secret = is_secret && (path == "data" || path.starts_with("data."));
    match (wanted, live) {
        (Value::Object(fields), Some(Value::Object(live))) => {
            for (key, value) in fields {
                let said = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                let escaped = key.replace('~', "~0").replace('/', "~1");
                walk(value, live.get(key), (said, format!("{pointer}/{escaped}")), is_secret, found);
            }
        }
        // A list of as many items: item by item, each as an object is (the server fills in
        // the rest of each item). Otherwise the list is said whole.
        (Value::Array(items), Some(Value::Array(live))) if items.len() == live.len() => {
            for (i, (item, live)) in items.iter().zip(live).enumerate() {
                walk(item, Some(live), (format!("{path}[{i}]"), format!("{pointer}/{i}")), is_secret, found);
            }
        }
        (Value::Null, None | Some(Value::Null)) => {}
        (wanted, live) if live.is_some_and(|live| same(wanted, live, holds_quantity(&path))) => {}
        (wanted, live) => {
            found.push(FieldChange { path, pointer, live: live.cloned(), wanted: wanted.clone(), secret })
        }
    }
}

/// Equal as the server means it: a number the config gave as a whole float, a quantity it
/// writes in its canonical form (`1000m` is `1`, `1Gi` is `1024Mi`), an int-or-string port
/// given as the other.
fn same(wanted: &Value, live: &Value, quantity: bool) -> bool {
    if wanted == live {
        return true;
    }
    // Two strings are text ("1.10" is not "1.1", "1k" is not "1000") unless the field holds a
    // quantity; a string and a number are compared as numbers (an int-or-string).
    if wanted.is_string() && live.is_string() && !quantity {
        return false;
    }
    match (number_of(wanted), number_of(live)) {
        (Some(a), Some(b)) => (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs()).max(1.0),
        _ => false,
    }
}

/// Whether the field at `path` holds a quantity: resources' limits, requests and quotas,
/// capacities, sizes.
fn holds_quantity(path: &str) -> bool {
    let mut parts = path.rsplit('.');
    let (key, parent) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    matches!(parent, "limits" | "requests" | "hard" | "capacity" | "allocatable")
        || matches!(key, "sizeLimit" | "storage")
}

/// A number, or a string the API server reads as one: a quantity (`500m`, `1.5Gi`, `2e3`) or
/// digits.
fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(text) => quantity(text),
        _ => None,
    }
}

/// A Kubernetes quantity's value: a decimal number and a suffix (binary `Ki`…`Ei`, decimal
/// `n`, `u`, `m`, `k`, `M`…`E`, or an exponent `e3`).
fn quantity(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => 10f64.powi(exponent.strip_prefix(['e', 'E'])?.parse().ok()?),
    };
    Some(number * scale)
}

/// The live object as a dependent may read it: no managed fields, no Secret data (its keys
/// only, under `dataKeys`).
pub fn shown(live: &Value, is_secret: bool) -> Value {
    let mut live = live.clone();
    if let Some(metadata) = live.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        if let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    if is_secret && let Some(object) = live.as_object_mut() {
        let keys: Vec<Value> = ["data", "stringData"]
            .iter()
            .filter_map(|field| object.remove(*field))
            .filter_map(|data| data.as_object().map(|d| d.keys().cloned().map(Value::String).collect::<Vec<_>>()))
            .flatten()
            .collect();
        object.insert("dataKeys".into(), Value::Array(keys));
    }
    live
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ports_get_the_protocol_the_server_would_default() {
        let service = json!({"kind": "Service", "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}});
        let service = with_port_protocols(service);
        assert_eq!(service["spec"]["ports"], json!([{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]));
        let deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "ports": [{"containerPort": 8080}]},
            {"name": "other"}
        ]}}}});
        let deployment = with_port_protocols(deployment);
        assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(deployment["spec"]["template"]["spec"]["containers"][1].get("ports"), None);
        let named = json!({"spec": {"ports": [{"name": "x"}]}});
        assert_eq!(with_port_protocols(named.clone()), named, "not a port: left as it is");
    }

    #[test]
    fn only_what_the_config_sets_is_compared() {
        let live = json!({"metadata": {"name": "web", "uid": "u", "labels": {"a": "1", "b": "2"}},
                          "spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"},
                                   "template": {"spec": {"containers": [{"name": "c", "image": "x:1", "imagePullPolicy": "IfNotPresent"}]}}}});
        let wanted = json!({"metadata": {"name": "web", "labels": {"a": "1"}},
                            "spec": {"replicas": 2.0, "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
        assert_eq!(changes(&wanted, &live, false), vec![], "server defaults and other labels are not drift");
        let two = json!({"spec": {"template": {"spec": {"containers": [{"name": "c"}, {"name": "d"}]}}}});
        assert_eq!(changes(&two, &live, false)[0].path, "spec.template.spec.containers", "another length: whole");

        let wanted = json!({"metadata": {"labels": {"a": "2", "c": "3"}},
                            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}});
        let found: Vec<String> = changes(&wanted, &live, false).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                r#"metadata.labels.a: "1" → "2""#,
                r#"metadata.labels.c: (absent) → "3""#,
                r#"spec.template.spec.containers[0].image: "x:1" → "x:2""#,
            ]
        );
    }

    #[test]
    fn quantities_and_ports_are_compared_as_the_server_writes_them() {
        let live = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                          "requests": {"cpu": "250m", "memory": "512M"}}, "ports": [{"containerPort": 8080}]}]}});
        let same = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1000m", "memory": "1024Mi"},
                          "requests": {"cpu": 0.25, "memory": "0.512G"}}, "ports": [{"containerPort": "8080"}]}]}});
        assert_eq!(changes(&same, &live, false), vec![]);
        let more = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1001m"}}}]}});
        assert_eq!(changes(&more, &live, false)[0].path, "spec.containers[0].resources.limits.cpu");
        assert_eq!(changes(&more, &live, false)[0].pointer, "/spec/containers/0/resources/limits/cpu");
        let annotated = changes(
            &json!({"metadata": {"annotations": {"a.io/b~c": "x"}}}),
            &json!({"metadata": {"annotations": {}}}),
            false,
        );
        assert_eq!(annotated[0].pointer, "/metadata/annotations/a.io~1b~0c", "escaped as RFC 6901 says");
        let text = |a: &str, b: &str| changes(&json!({"data": {"a": a}}), &json!({"data": {"a": b}}), false);
        assert_ne!(text("1.10", "1.1"), vec![], "text is text");
        assert_ne!(text("1k", "1000"), vec![], "text is text");
        let quota = |a: &str, b: &str| {
            changes(&json!({"spec": {"hard": {"pods": a}}}), &json!({"spec": {"hard": {"pods": b}}}), false)
        };
        assert_eq!(quota("1e3", "1k"), vec![], "a quota is a quantity");
        assert_ne!(quota("1e3", "1.1k"), vec![]);
    }

    #[test]
    fn secret_data_is_compared_but_never_shown() {
        let live = json!({"kind": "Secret", "data": {"password": "aHVudGVyMg=="}, "metadata": {"name": "db"}});
        let wanted = |password: &str| secret_as_data(json!({"stringData": {"password": password}}));
        assert_eq!(wanted("hunter2"), json!({"data": {"password": "aHVudGVyMg=="}}));
        assert_eq!(changes(&wanted("hunter2"), &live, true), vec![]);
        let found = changes(&wanted("hunter3"), &live, true);
        assert_eq!(found.len(), 1);
        let said = found[0].to_string();
        assert_eq!(said, "data.password differs (Secret data is not shown)");
        assert_eq!(shown(&live, true), json!({"kind": "Secret", "dataKeys": ["password"], "metadata": {"name": "db"}}));
    }
}
