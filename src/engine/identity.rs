//! Which thing a resource is: the config's fields its type names as its identity (init's
//! `identity`, JSON Pointers). A change of one is a replacement — the old thing deleted with
//! the config it was applied with, the new one created — where any other change is an update.
//!
//! Identities are read from the config as shown (sensitive values masked), so that the
//! inventory can keep them: a masked or unknown value is never compared.

use std::collections::BTreeMap;

use serde_json::Value;

use super::protocol::is_unknown;

/// Pointer → value, for each identity field the config sets.
pub type IdentityFields = BTreeMap<String, Value>;

/// What the config `shown` sets of the fields `pointers` name.
pub fn identity_of(pointers: &[String], shown: &Value) -> IdentityFields {
    pointers.iter().filter_map(|p| shown.pointer(p).map(|v| (p.clone(), v.clone()))).collect()
}

/// One identity field a change moves.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Moved {
    /// As a plan shows paths: `object.metadata.name`.
    pub field: String,
    pub was: Value,
    pub now: Value,
}

/// The fields that moved from `was` to `now`: only where both set a value that is known and
/// not masked. A field set on one side only is not compared: the other side is the type's
/// default, which Deployster cannot know (an object's namespace, say).
pub fn moved(was: &IdentityFields, now: &IdentityFields) -> Vec<Moved> {
    let comparable = |v: &Value| !is_unknown(v) && !v.to_string().contains("***") && !holds_unknown(v);
    was.iter()
        .filter_map(|(pointer, old)| {
            let new = now.get(pointer)?;
            (old != new && comparable(old) && comparable(new)).then(|| Moved {
                field: shown_path(pointer),
                was: old.clone(),
                now: new.clone(),
            })
        })
        .collect()
}

fn holds_unknown(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().any(|v| is_unknown(v) || holds_unknown(v)),
        Value::Array(items) => items.iter().any(|v| is_unknown(v) || holds_unknown(v)),
        _ => false,
    }
}

/// A pointer as a plan shows a path: `/object/metadata/name` → `object.metadata.name`.
pub fn shown_path(pointer: &str) -> String {
    pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect::<Vec<_>>().join(".")
}

/// `config` (a declaration's, unrendered) with each field of `kept` set to the value kept,
/// written so that it renders as itself. Returns the fields it could not set (a parent the
/// declaration computes as a whole, say), which then render as declared.
pub fn pin(config: &mut Value, kept: &IdentityFields) -> Vec<String> {
    let mut unset = Vec::new();
    for (pointer, value) in kept {
        if value.to_string().contains("***") {
            unset.push(shown_path(pointer));
            continue;
        }
        match config.pointer_mut(pointer) {
            Some(slot) => *slot = literal(value),
            None => unset.push(shown_path(pointer)),
        }
    }
    unset
}

/// `value` as a declaration writes it to mean itself: strings that look like templates are
/// kept raw.
fn literal(value: &Value) -> Value {
    match value {
        Value::String(s) if s.contains("{{") || s.contains("{%") || s.contains("{#") => {
            Value::String(format!("{{% raw %}}{s}{{% endraw %}}"))
        }
        Value::Array(items) => Value::Array(items.iter().map(literal).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), literal(v))).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pointers(list: &[&str]) -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_moved_field_is_named_as_a_plan_shows_paths_and_unset_or_unknown_ones_are_not_compared() {
        let ids = pointers(&["/object/metadata/name", "/object/metadata/namespace", "/object/kind"]);
        let was = identity_of(&ids, &json!({"object": {"kind": "ConfigMap", "metadata": {"name": "a"}}}));
        let now = identity_of(
            &ids,
            &json!({"object": {"kind": "ConfigMap", "metadata": {"name": "b", "namespace": "default"}}}),
        );
        assert_eq!(
            moved(&was, &now),
            vec![Moved { field: "object.metadata.name".into(), was: json!("a"), now: json!("b") }]
        );
        let unknown =
            identity_of(&ids, &json!({"object": {"kind": "ConfigMap", "metadata": {"name": {"$unknown": true}}}}));
        assert!(moved(&was, &unknown).is_empty(), "an unknown name is not a change yet");
        let masked = identity_of(&ids, &json!({"object": {"kind": "ConfigMap", "metadata": {"name": "***"}}}));
        assert!(moved(&was, &masked).is_empty(), "a masked name cannot be compared");
        assert!(moved(&was, &was).is_empty());
    }

    #[test]
    fn pinning_sets_the_kept_values_as_literals_and_says_what_it_could_not_set() {
        let mut declared = json!({"path": "{{ vars.root }}/app", "content": "x", "computed": "{{ whole }}"});
        let kept: IdentityFields =
            [("/path".to_string(), json!("/srv/{{odd}}/app")), ("/computed/name".to_string(), json!("n"))].into();
        assert_eq!(pin(&mut declared, &kept), vec!["computed.name".to_string()]);
        assert_eq!(declared["path"], json!("{% raw %}/srv/{{odd}}/app{% endraw %}"));
        assert_eq!(declared["content"], json!("x"));
    }
}
