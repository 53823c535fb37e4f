//! `ignore: [paths]`: fields a resource leaves to another writer (an HPA's `spec.replicas`, a
//! webhook's annotation) — out of drift, and out of every apply after the object's creation.
//!
//! Paths are written as the plan prints them: keys joined by `.`, list items as `[i]`
//! (`spec.template.spec.containers[0].image`). A path covers its field and everything under it.
//! An apply after creation writes each ignored field as the server holds it (or leaves it out
//! where the server has none): the value does not change, and Deployster keeps no claim that
//! would make server-side apply remove the field, as leaving out a field it owns alone would.

use serde_json::Value;

use super::error::ObjectError;

/// The paths of a resource's `ignore`.
#[derive(Debug, Clone, Default)]
pub(super) struct Ignored(Vec<String>);

/// What a path may look like, for the config schema: keys (no `.`, `[`, `]` or space) joined
/// by `.`, each followed by any `[i]`.
pub(super) const PATH_PATTERN: &str = r"^[^.\[\]\s]+(\[[0-9]+\])*(\.[^.\[\]\s]+(\[[0-9]+\])*)*$";

impl Ignored {
    /// `config.ignore`, each path checked to parse.
    pub(super) fn from_config(config: &Value) -> Result<Ignored, ObjectError> {
        let Some(listed) = config.get("ignore") else { return Ok(Ignored::default()) };
        let Value::Array(listed) = listed else {
            return Err(ObjectError::Config("config.ignore must be a list of field paths".into()));
        };
        let mut paths = Vec::new();
        for (i, path) in listed.iter().enumerate() {
            let Some(path) = path.as_str() else {
                return Err(ObjectError::Config(format!("config.ignore[{i}] is not a field path: {path}")));
            };
            if let Err(why) = parse(path) {
                return Err(ObjectError::Config(format!(
                    "config.ignore[{i}] `{path}` is not a field path ({why}); write it as the plan prints fields, \
                     e.g. spec.replicas or spec.template.spec.containers[0].image"
                )));
            }
            paths.push(path.to_string());
        }
        Ok(Ignored(paths))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the field at `path` (as the plan prints it) is ignored: an ignored path is it, or
    /// holds it.
    pub(super) fn covers(&self, path: &str) -> bool {
        self.0.iter().any(|ignored| {
            path.strip_prefix(ignored.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
    }

    /// Each path names a field some object of the config sets: one that names none is a typo
    /// or a field the config does not own, and ignoring it would do nothing.
    pub(super) fn check_set<'a>(&self, objects: impl Iterator<Item = &'a Value> + Clone) -> Result<(), ObjectError> {
        for (i, path) in self.0.iter().enumerate() {
            if !objects.clone().any(|object| sets(object, path)) {
                return Err(ObjectError::Config(format!(
                    "config.ignore[{i}] `{path}` names no field the config sets: only fields it sets can be left to \
                     others"
                )));
            }
        }
        Ok(())
    }

    /// `wanted`, to apply over `live`: each ignored field as `live` holds it, or left out where
    /// it holds none (a list's item stays: leaving it out would move the items after it).
    pub(super) fn keep_live(&self, wanted: &mut Value, live: &Value) {
        let mut found = Vec::new();
        self.ignored_in(wanted, String::new(), String::new(), &mut found);
        for pointer in found.into_iter().rev() {
            match live.pointer(&pointer) {
                Some(held) => {
                    if let Some(slot) = wanted.pointer_mut(&pointer) {
                        *slot = held.clone();
                    }
                }
                None => {
                    let (parent, key) = pointer.rsplit_once('/').expect("a field's pointer has a parent");
                    let key = key.replace("~1", "/").replace("~0", "~");
                    if let Some(Value::Object(fields)) = wanted.pointer_mut(parent) {
                        fields.remove(&key);
                    }
                }
            }
        }
    }

    /// The pointers of the outermost ignored fields of `value` (at `path`, `pointer`).
    fn ignored_in(&self, value: &Value, path: String, pointer: String, found: &mut Vec<String>) {
        if !path.is_empty() && self.0.contains(&path) {
            found.push(pointer);
            return;
        }
        match value {
            Value::Object(fields) => {
                for (key, field) in fields {
                    let said = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                    let escaped = key.replace('~', "~0").replace('/', "~1");
                    self.ignored_in(field, said, format!("{pointer}/{escaped}"), found);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.ignored_in(item, format!("{path}[{i}]"), format!("{pointer}/{i}"), found);
                }
            }
            _ => {}
        }
    }
}

/// Whether `object` sets the field at `path` (as the plan prints it), or something under it.
fn sets(object: &Value, path: &str) -> bool {
    fn walk(value: &Value, at: &str, path: &str) -> bool {
        if at == path {
            return true;
        }
        // Only a prefix of the path can lead to it.
        if !at.is_empty() && !path.strip_prefix(at).is_some_and(|rest| rest.starts_with(['.', '['])) {
            return false;
        }
        match value {
            Value::Object(fields) => fields.iter().any(|(key, field)| {
                let said = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                walk(field, &said, path)
            }),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| walk(item, &format!("{at}[{i}]"), path)),
            _ => false,
        }
    }
    walk(object, "", path)
}

/// Why `path` is not a field path, if it is not ([`PATH_PATTERN`]).
fn parse(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("it is empty");
    }
    for segment in path.split('.') {
        let (key, mut indices) = segment.split_once('[').map_or((segment, ""), |(k, rest)| (k, rest));
        if key.is_empty() {
            return Err("a key is empty");
        }
        if key.contains(']') || key.chars().any(char::is_whitespace) {
            return Err("a key holds `]` or a space");
        }
        while !indices.is_empty() {
            let Some((index, rest)) = indices.split_once(']') else { return Err("a `[` is not closed") };
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return Err("a list index is not a number");
            }
            indices = match rest {
                "" => "",
                rest => rest.strip_prefix('[').ok_or("something follows a `]` that is not `.` or `[`")?,
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ignored(paths: &[&str]) -> Ignored {
        Ignored::from_config(&json!({"ignore": paths})).unwrap()
    }

    #[test]
    fn paths_parse_as_the_plan_prints_them() {
        for good in
            ["spec.replicas", "spec.template.spec.containers[0].image", "a[0][1].b", "metadata.annotations.x.io/y"]
        {
            assert_eq!(parse(good), Ok(()), "{good}");
            assert!(regex_matches(good), "the schema's pattern takes {good}");
        }
        for (bad, why) in [
            ("", "it is empty"),
            ("spec..replicas", "a key is empty"),
            (".spec", "a key is empty"),
            ("spec.", "a key is empty"),
            ("a[0", "a `[` is not closed"),
            ("a[x]", "a list index is not a number"),
            ("a[]", "a list index is not a number"),
            ("a[0]b", "something follows a `]` that is not `.` or `[`"),
            ("spec. replicas", "a key holds `]` or a space"),
            ("a]", "a key holds `]` or a space"),
        ] {
            assert_eq!(parse(bad), Err(why), "{bad:?}");
            assert!(!regex_matches(bad), "the schema's pattern refuses {bad:?}");
        }
        let Err(error) = Ignored::from_config(&json!({"ignore": ["spec.replicas", "a[x]"]})) else { panic!() };
        assert!(error.to_string().contains("config.ignore[1] `a[x]` is not a field path (a list index"), "{error}");
        let Err(error) = Ignored::from_config(&json!({"ignore": "spec.replicas"})) else { panic!() };
        assert!(error.to_string().contains("must be a list"), "{error}");
    }

    fn regex_matches(path: &str) -> bool {
        regex::Regex::new(PATH_PATTERN).unwrap().is_match(path)
    }

    #[test]
    fn a_path_covers_its_field_and_what_is_under_it() {
        let ignored = ignored(&["spec.replicas", "spec.template.spec.containers[0]"]);
        assert!(ignored.covers("spec.replicas"));
        assert!(ignored.covers("spec.template.spec.containers[0].image"));
        assert!(ignored.covers("spec.template.spec.containers[0]"));
        assert!(!ignored.covers("spec.replicasX"));
        assert!(!ignored.covers("spec.template.spec.containers[1].image"));
        assert!(!ignored.covers("spec.template.spec.containers[01]"));
        assert!(!ignored.covers("spec"));
    }

    #[test]
    fn only_fields_the_config_sets_can_be_ignored() {
        let deployment = json!({"metadata": {"name": "web", "annotations": {"x.io/y": "1"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let objects = [deployment];
        for set in
            ["spec.replicas", "spec.template", "spec.template.spec.containers[0].image", "metadata.annotations.x.io/y"]
        {
            assert!(ignored(&[set]).check_set(objects.iter()).is_ok(), "{set}");
        }
        for unset in ["spec.paused", "spec.template.spec.containers[1]", "spec.replicas.x", "status"] {
            let Err(error) = ignored(&["spec.replicas", unset]).check_set(objects.iter()) else { panic!("{unset}") };
            assert!(error.to_string().starts_with(&format!("config.ignore[1] `{unset}` names no field")), "{error}");
        }
    }

    #[test]
    fn an_apply_after_creation_writes_ignored_fields_as_the_server_holds_them() {
        let ignored = ignored(&["spec.replicas", "metadata.annotations.x.io/y", "spec.paused", "spec.list[1]"]);
        let mut wanted = json!({"metadata": {"name": "web", "annotations": {"x.io/y": "mine", "keep": "k"}},
            "spec": {"replicas": 2, "paused": false, "list": ["a", "b", "c"], "other": 1}});
        let live = json!({"metadata": {"name": "web", "annotations": {"x.io/y": "theirs"}},
            "spec": {"replicas": 7, "list": ["a"], "other": 9}});
        ignored.keep_live(&mut wanted, &live);
        assert_eq!(
            wanted,
            json!({"metadata": {"name": "web", "annotations": {"x.io/y": "theirs", "keep": "k"}},
                "spec": {"replicas": 7, "list": ["a", "b", "c"], "other": 1}}),
            "the server's values; a field it has not, left out; a list item kept in place; the rest as asked"
        );
    }
}
