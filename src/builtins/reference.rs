//! The book's reference of the built-in types' configs (docs/builtin-types.md), written from
//! the config schemas they answer `init` with, so that it cannot fall behind them.

use std::fmt::Write;

use serde_json::Value;

/// Each built-in type: what it is, and every key of its config.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Built-in types\n\n<!-- Written by `DEPLOYSTER_BLESS=1 cargo test --test local book::` from the types' \
         config schemas: do not edit. -->\n\nThe types carried by deployster itself: no program, image or network \
         needed. Their keys, as their config schemas give them (`deployster check-type builtin/<name>` checks \
         one).\n\n",
    );
    for (name, init) in inits() {
        let _ = writeln!(out, "## `builtin/{name}`\n\n{}.\n", init["label"].as_str().unwrap_or_default());
        out.push_str("| key | type | required | what |\n|---|---|---|---|\n");
        schema_rows(&mut out, &init["config_schema"], "", 1);
        out.push('\n');
    }
    out
}

/// Each built-in type's `init` answer.
pub fn inits() -> Vec<(&'static str, Value)> {
    let mut inits = vec![("directory", super::directory::init()), ("file", super::file::init())];
    inits.push(("package", super::package::init()));
    #[cfg(feature = "kube")]
    inits.push((super::KUBERNETES, super::kubernetes::init()));
    inits
}

/// One key a config schema declares: its path, its type, whether it is required, what it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaKey {
    pub path: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub required: bool,
    /// Its description, and its default when it has one.
    pub what: String,
}

/// Each key of `schema`, its path after `prefix`; the keys of an object or of a list's items
/// follow it, `levels` deep.
pub fn schema_keys(schema: &Value, prefix: &str, levels: usize) -> Vec<SchemaKey> {
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut keys = Vec::new();
    for (key, property) in schema["properties"].as_object().into_iter().flatten() {
        let path = format!("{prefix}{key}");
        let mut what = property["description"].as_str().unwrap_or_default().replace('\n', " ");
        if let Some(default) = property.get("default") {
            let _ = write!(what, " (default `{default}`)");
        }
        keys.push(SchemaKey {
            path: path.clone(),
            type_: type_of(property),
            required: required.contains(&key.as_str()),
            what: what.trim().to_string(),
        });
        if levels > 0 {
            keys.extend(schema_keys(property, &format!("{path}."), levels - 1));
            keys.extend(schema_keys(&property["items"], &format!("{path}[]."), levels - 1));
        }
    }
    keys
}

/// A row `| key | type | required | what |` for each of [`schema_keys`]: the table every
/// reference page shares (the built-in types' configs and the custom resources).
pub fn schema_rows(out: &mut String, schema: &Value, prefix: &str, levels: usize) {
    for key in schema_keys(schema, prefix, levels) {
        let required = if key.required { "yes" } else { "" };
        let _ = writeln!(out, "| `{}` | {} | {required} | {} |", key.path, key.type_, key.what.replace('|', "\\|"));
    }
}

fn type_of(schema: &Value) -> String {
    match (schema["type"].as_str(), schema["items"]["type"].as_str()) {
        (Some("array"), Some(item)) => format!("list of {item}"),
        (Some(kind), _) if schema.get("pattern").is_some() && kind == "string" => "string (pattern)".into(),
        (Some(kind), _) => kind.to_string(),
        (None, _) => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    /// Every key of every built-in type says what it is: the reference has no empty row.
    #[test]
    fn every_key_of_a_builtin_type_is_described() {
        for (name, init) in super::inits() {
            for (key, property) in init["config_schema"]["properties"].as_object().unwrap() {
                let described = property["description"].as_str().is_some_and(|d| !d.is_empty());
                assert!(described, "builtin/{name}: `{key}` has no description");
            }
        }
    }
}
