//! Digests of values: the same content, the same digest, whatever the key order.

use serde_json::Value;

/// The first 12 hex digits of the SHA-256 of a value's canonical JSON (keys sorted): the same
/// content gives the same hash, whatever the key order or formatting.
pub fn content_hash(value: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(canonical(value).as_bytes())[..6])
}

pub(crate) fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> =
                keys.iter().map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&map[*k]))).collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}
