//! Pure: the Kubernetes objects a pass left as declared — what its Manifest watches.

use serde_json::Value;

use crate::engine::plan::{ResourceEntry, Standing};

/// One object a `builtin/kubernetes` resource applied (or found as declared).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Declared {
    /// `apps/v1`.
    pub api_version: String,
    pub kind: String,
    /// As the config says it; none: the Manifest's namespace if the kind is namespaced.
    pub namespace: Option<String>,
    pub name: String,
    /// The resource that declares it.
    pub resource: String,
}

/// The objects of the `builtin/kubernetes` resources a pass found or left VALID: those whose
/// changes should start a pass. A resource that failed (another's object, a right it lacks)
/// is not watched: the interval reads it again.
pub fn declared(entries: &[ResourceEntry]) -> Vec<Declared> {
    let mut found = Vec::new();
    for entry in entries {
        let (true, Standing::Valid { .. }, Some(config)) = (
            entry.type_name.strip_prefix("builtin/") == Some(crate::builtins::KUBERNETES),
            &entry.standing,
            &entry.config,
        ) else {
            continue;
        };
        let objects = match (config.get("object"), config.get("objects")) {
            (Some(object), _) => std::slice::from_ref(object),
            (None, Some(Value::Array(objects))) => objects.as_slice(),
            _ => &[],
        };
        found.extend(objects.iter().filter_map(|object| {
            let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty());
            Some(Declared {
                api_version: text("/apiVersion")?.to_string(),
                kind: text("/kind")?.to_string(),
                namespace: text("/metadata/namespace").map(str::to_string),
                name: text("/metadata/name")?.to_string(),
                resource: entry.name.clone(),
            })
        }));
    }
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn entry(name: &str, type_name: &str, config: Value, valid: bool) -> ResourceEntry {
        ResourceEntry {
            name: name.into(),
            type_name: type_name.into(),
            standing: if valid {
                Standing::Valid { state: json!({}), applied: None }
            } else {
                Standing::Blocked { by: "x".into() }
            },
            elapsed: Duration::ZERO,
            config: Some(config),
        }
    }

    #[test]
    fn the_valid_kubernetes_resources_objects_are_declared_and_nothing_else() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}});
        let deploy =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "other"}});
        let found = declared(&[
            entry("settings", "builtin/kubernetes", json!({"object": cm}), true),
            entry("app", "builtin/kubernetes", json!({"objects": [deploy, {"kind": "nameless"}]}), true),
            entry("failed", "builtin/kubernetes", json!({"object": cm}), false),
            entry("file", "builtin/file", json!({"object": cm}), true),
        ]);
        assert_eq!(
            found,
            [
                Declared {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: Some("other".into()),
                    name: "web".into(),
                    resource: "app".into()
                },
                Declared {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: None,
                    name: "settings".into(),
                    resource: "settings".into()
                },
            ]
        );
    }
}
