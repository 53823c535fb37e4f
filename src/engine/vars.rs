//! Variables: manifest defaults, then auto var files, then `--var` / `--var-file` in order.
//!
//! Later layers win and maps deep-merge. A var file's strings may use expressions over the
//! variables loaded before it. Messages name variables and files, never values.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use super::expr;

/// One command-line variable source, in the order the user gave them.
#[derive(Debug, Clone, PartialEq)]
pub enum VarSource {
    /// `--var key=value` (a dotted key sets a nested value).
    Assignment { key: String, value: String },
    /// `--sensitive-var key=value`: an assignment whose variable (the key's first part) is
    /// sensitive, as if listed under the manifest's `sensitive:`.
    Sensitive { key: String, value: String },
    /// `--var-file path`.
    File(PathBuf),
}

/// Why a `--var` (or `--sensitive-var`) is not `key=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    #[error("`{0}` is not of the form key=value (no `=` found)")]
    NoEquals(String),
    #[error("`{0}` has an empty variable name")]
    EmptyName(String),
    /// A sensitive one: said without its text, which may hold the value.
    #[error("is not of the form key=value with a variable name")]
    Sensitive,
}

impl VarSource {
    /// Parses `key=value`; the value may itself contain `=`.
    pub fn parse_assignment(text: &str) -> Result<VarSource, AssignmentError> {
        let (key, value) = text.split_once('=').ok_or_else(|| AssignmentError::NoEquals(text.to_string()))?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(AssignmentError::EmptyName(text.to_string()));
        }
        Ok(VarSource::Assignment { key: key.to_string(), value: value.to_string() })
    }

    /// Parses `key=value` of a sensitive variable; errors never show the value.
    pub fn parse_sensitive(text: &str) -> Result<VarSource, AssignmentError> {
        match Self::parse_assignment(text) {
            Ok(VarSource::Assignment { key, value }) => Ok(VarSource::Sensitive { key, value }),
            _ => Err(AssignmentError::Sensitive),
        }
    }

    /// The variable a `--sensitive-var` makes sensitive.
    pub fn sensitive_name(&self) -> Option<&str> {
        match self {
            VarSource::Sensitive { key, .. } => key.split('.').next(),
            _ => None,
        }
    }
}

/// The variables `--var` or `--sensitive-var` set that no manifest text (`texts`) so much as
/// names — neither declares under `vars:` nor reads in an expression — each with its
/// [`hint`](super::suggest::hint) among `declared`: a misspelt `--var` would otherwise change
/// nothing, silently.
pub fn unread_assignments(sources: &[VarSource], texts: &[String], declared: &[String]) -> Vec<(String, String)> {
    let mut unread: Vec<(String, String)> = Vec::new();
    for source in sources {
        let (VarSource::Assignment { key, .. } | VarSource::Sensitive { key, .. }) = source else { continue };
        let name = key.split('.').next().unwrap_or_default();
        let word = regex::Regex::new(&format!(r"(^|[^A-Za-z0-9_]){}($|[^A-Za-z0-9_])", regex::escape(name)))
            .expect("an escaped name is a pattern");
        if texts.iter().any(|t| word.is_match(t)) || unread.iter().any(|(n, _)| n == name) {
            continue;
        }
        unread.push((name.to_string(), super::suggest::hint(name, declared.iter().map(String::as_str))));
    }
    unread
}

/// Why variables could not be resolved; `origin` names the file or `--var`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct VarsError {
    pub origin: String,
    pub message: String,
}

impl VarsError {
    pub fn reason(&self) -> &'static str {
        "InvalidVariables"
    }
}

/// The auto var files of one directory, sorted by name: `vars.auto.yaml`, `vars.*.auto.yaml`
/// (`.yml` too).
pub fn auto_var_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(is_auto_var_file))
        .collect();
    files.sort();
    files
}

fn is_auto_var_file(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".auto.yaml").or_else(|| name.strip_suffix(".auto.yml")) else {
        return false;
    };
    stem == "vars" || stem.strip_prefix("vars.").is_some_and(|middle| !middle.is_empty())
}

/// Resolves the final variables. The values of `sensitive` variables are taken as they are:
/// never rendered as templates (a password with `{#` in it stays whole).
pub fn resolve(
    defaults: &IndexMap<String, Value>,
    manifest_dirs: &[PathBuf],
    sources: &[VarSource],
    sensitive: &[String],
) -> Result<Map<String, Value>, VarsError> {
    let mut vars: Map<String, Value> = defaults.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut seen_dirs: Vec<&PathBuf> = Vec::new();
    for dir in manifest_dirs {
        if seen_dirs.contains(&dir) {
            continue;
        }
        seen_dirs.push(dir);
        for file in auto_var_files(dir) {
            merge_file(&mut vars, &file, sensitive)?;
        }
    }
    for source in sources {
        match source {
            VarSource::Assignment { key, value } | VarSource::Sensitive { key, value } => {
                let mut parts = key.rsplit('.');
                let innermost = Map::from_iter([(parts.next().unwrap_or_default().to_string(), json!(value))]);
                let layer = parts.fold(innermost, |acc, part| Map::from_iter([(part.to_string(), Value::Object(acc))]));
                deep_merge(&mut vars, layer);
            }
            VarSource::File(path) => merge_file(&mut vars, path, sensitive)?,
        }
    }
    Ok(vars)
}

fn merge_file(vars: &mut Map<String, Value>, path: &Path, sensitive: &[String]) -> Result<(), VarsError> {
    let origin = format!("var file {}", path.display());
    let err = |message: String| VarsError { origin: origin.clone(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let value: Value = if super::manifest::is_json(path) {
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))?
    } else if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_norway::from_str(&text).map_err(|e| err(e.to_string()))?
    };
    let Value::Object(mut layer) = value else {
        return Err(err("must be a mapping of variable names to values".to_string()));
    };
    let taken: Map<String, Value> =
        sensitive.iter().filter_map(|name| layer.remove(name).map(|v| (name.clone(), v))).collect();
    // A var file's values are values: a message names the variable, never shows its value.
    let failed = |e: expr::ExprError| err(format!("{}: {}", e.path, e.reason));
    for (name, value) in layer.iter_mut() {
        let template = expr::compile(value, name).map_err(failed)?;
        *value = expr::render(&template, &Value::Object(context(vars)), name).map_err(failed)?;
    }
    deep_merge(vars, layer);
    deep_merge(vars, taken);
    Ok(())
}

/// The expression context of variables alone: each at the top level and all under `vars`.
pub fn context(vars: &Map<String, Value>) -> Map<String, Value> {
    let mut ctx = vars.clone();
    ctx.insert("vars".to_string(), Value::Object(vars.clone()));
    ctx
}

/// Merges `layer` into `base`: maps merge recursively, anything else replaces.
pub fn deep_merge(base: &mut Map<String, Value>, layer: Map<String, Value>) {
    for (key, value) in layer {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => deep_merge(existing, incoming),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> IndexMap<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn assignments_need_an_equals_sign_and_a_name() {
        assert!(VarSource::parse_assignment("novalue").unwrap_err().to_string().contains("no `=`"));
        assert!(VarSource::parse_assignment("=x").unwrap_err().to_string().contains("empty variable name"));
        assert_eq!(
            VarSource::parse_assignment("a=b=c").unwrap(),
            VarSource::Assignment { key: "a".into(), value: "b=c".into() }
        );
    }

    #[test]
    fn layers_apply_in_order_and_maps_deep_merge() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("vars.auto.yaml"), "db: {host: auto, port: 5432}\nenv: auto\n").unwrap();
        std::fs::write(dir.path().join("vars.b.auto.yaml"), "env: b\nurl: '{{ db.host }}:{{ vars.db.port }}'\n")
            .unwrap();
        std::fs::write(dir.path().join("vars.yaml"), "ignored: true\n").unwrap();
        let file = dir.path().join("extra.yaml");
        std::fs::write(&file, "db: {port: 6543}\nlabel: '{{ env }}'\n").unwrap();
        let sources = vec![
            VarSource::File(file),
            VarSource::parse_assignment("env=cli").unwrap(),
            VarSource::parse_assignment("db.host=override").unwrap(),
        ];
        let vars =
            resolve(&map(json!({"env": "default", "keep": 1})), &[dir.path().to_path_buf()], &sources, &[]).unwrap();
        assert_eq!(
            Value::Object(vars),
            json!({"env": "cli", "keep": 1, "db": {"host": "override", "port": 6543}, "url": "auto:5432", "label": "b"})
        );
    }

    #[test]
    fn a_var_file_expression_over_an_unknown_variable_names_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v.yaml");
        std::fs::write(&file, "a:\n  b: '{{ nope }}'\n").unwrap();
        let err = resolve(&map(json!({"token": "s3cret"})), &[], &[VarSource::File(file)], &[]).unwrap_err();
        assert!(err.origin.contains("v.yaml"), "{err}");
        assert!(err.message.starts_with("a.b:"), "{err}");
        assert!(!err.to_string().contains("s3cret"));
    }

    /// A value that is not a valid template is named, never shown; a sensitive one is never
    /// rendered at all.
    #[test]
    fn var_file_values_are_never_shown_and_sensitive_ones_never_rendered() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v.yaml");
        std::fs::write(&file, "db: { password: 'Xy7{#SECRET' }\n").unwrap();
        let err = resolve(&IndexMap::new(), &[], &[VarSource::File(file.clone())], &[]).unwrap_err();
        assert!(err.message.starts_with("db.password: not a valid template"), "{err}");
        assert!(!err.to_string().contains("Xy7") && !err.to_string().contains("SECRET"), "{err}");

        std::fs::write(&file, "password: 'Xy7{#x#}tail'\ndb: { password: 'Xy7{#SECRET' }\nname: '{{ 1 + 1 }}'\n")
            .unwrap();
        let sensitive = ["password".to_string(), "db".to_string()];
        let vars = resolve(&IndexMap::new(), &[], &[VarSource::File(file)], &sensitive).unwrap();
        assert_eq!(
            Value::Object(vars),
            json!({"password": "Xy7{#x#}tail", "db": {"password": "Xy7{#SECRET"}, "name": 2}),
            "sensitive values stay whole; others are still templates"
        );
    }

    #[test]
    fn a_var_file_must_be_a_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v.yaml");
        std::fs::write(&file, "- 1\n- 2\n").unwrap();
        let err = resolve(&IndexMap::new(), &[], &[VarSource::File(file)], &[]).unwrap_err();
        assert!(err.message.contains("mapping"), "{err}");
    }

    #[test]
    fn a_var_no_manifest_text_names_is_found_with_the_closest_declared_name() {
        let var = |key: &str| VarSource::Assignment { key: key.into(), value: "x".into() };
        let texts = vec![
            "vars: {environment: dev, region: eu}\nresources:\n  d: {config: {path: \"{{ environment }}\"}}\n"
                .to_string(),
        ];
        let declared = vec!["environment".to_string(), "region".to_string(), "enviroment".to_string()];
        let sources = [var("enviroment"), var("environment"), var("region.zone"), var("colour"), var("enviroment")];
        assert_eq!(
            unread_assignments(&sources, &texts, &declared),
            vec![
                ("enviroment".to_string(), " (did you mean `environment`?)".to_string()),
                ("colour".to_string(), String::new())
            ]
        );
        // A name inside a longer word is not a mention.
        let texts = vec!["{{ environments }}".to_string()];
        assert_eq!(unread_assignments(&[var("environment")], &texts, &[]).len(), 1);
    }

    #[test]
    fn auto_var_file_names() {
        assert!(is_auto_var_file("vars.auto.yaml"));
        assert!(is_auto_var_file("vars.prod.auto.yml"));
        assert!(!is_auto_var_file("vars..auto.yaml"));
        assert!(!is_auto_var_file("other.auto.yaml"));
        assert!(!is_auto_var_file("vars.yaml"));
    }
}
