//! What differs between the object a config asks for and the live one, field by field, with
//! nothing of a Secret's data shown.

use serde_json::Value;

/// One field whose live value is not the wanted one.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// `spec.template.spec.containers[0].image`.
    pub path: String,
    /// `None`: the field is not there.
    pub live: Option<Value>,
    pub wanted: Value,
    /// A Secret's data: only that it differs is said.
    pub secret: bool,
}

impl std::fmt::Display for Change {
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
pub fn changes(wanted: &Value, live: &Value, is_secret: bool) -> Vec<Change> {
    let mut found = Vec::new();
    walk(wanted, Some(live), String::new(), is_secret, &mut found);
    found
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

fn walk(wanted: &Value, live: Option<&Value>, path: String, is_secret: bool, found: &mut Vec<Change>) {
    let secret = is_secret && (path == "data" || path.starts_with("data."));
    match (wanted, live) {
        (Value::Object(fields), Some(Value::Object(live))) => {
            for (key, value) in fields {
                let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                walk(value, live.get(key), at, is_secret, found);
            }
        }
        // A list of as many items: item by item, each as an object is (the server fills in
        // the rest of each item). Otherwise the list is said whole.
        (Value::Array(items), Some(Value::Array(live))) if items.len() == live.len() => {
            for (i, (item, live)) in items.iter().zip(live).enumerate() {
                walk(item, Some(live), format!("{path}[{i}]"), is_secret, found);
            }
        }
        (Value::Null, None | Some(Value::Null)) => {}
        (wanted, live) if live.is_some_and(|live| same(wanted, live)) => {}
        (wanted, live) => found.push(Change { path, live: live.cloned(), wanted: wanted.clone(), secret }),
    }
}

/// Equal, where the server writes a number the config gave as a whole float the same.
fn same(wanted: &Value, live: &Value) -> bool {
    match (wanted, live) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => wanted == live,
    }
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
