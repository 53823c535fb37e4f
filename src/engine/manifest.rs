//! The manifest as users write it: deserialized, merged from several files, not yet validated.
//!
//! Everything here is plain data. [`crate::engine::validate`] turns a [`LoadedManifest`] into a
//! [`crate::engine::validate::ValidatedManifest`], the only type the rest of the engine accepts.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// One manifest document: `plugs`, `vars` and `resources`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSpec {
    /// Host files or directories handed to resource programs that ask for them.
    #[serde(default, deserialize_with = "unique_keys")]
    pub plugs: IndexMap<String, PlugSpec>,
    /// Default variables; var files and `--var` override them.
    #[serde(default, deserialize_with = "unique_keys")]
    pub vars: IndexMap<String, Value>,
    /// The resources, in the order they were written.
    #[serde(default, deserialize_with = "unique_keys")]
    pub resources: IndexMap<String, ResourceSpec>,
    /// Variables whose values are secret: masked as `***` wherever Deployster shows or keeps
    /// a value (plan differences, the deployment log).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive: Vec<String>,
    /// Named values rendered from the resources' state once everything is VALID (the same
    /// expressions as configs: `{{ resources.db.state.url }}`).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty", deserialize_with = "unique_keys")]
    pub outputs: IndexMap<String, Value>,
    /// Environment variables for every program of every resource (values may use variables).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty", deserialize_with = "unique_keys")]
    pub env: IndexMap<String, String>,
    /// Resources renamed, old name → new name: what the inventory holds under the old name
    /// is moved to the new one, its state and history with it, instead of being deleted and
    /// created anew. Kept after the move, it changes nothing more.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty", deserialize_with = "unique_keys")]
    pub moved: IndexMap<String, String>,
}

impl ManifestSpec {
    /// The manifest's `moved`, each old name followed to the declared name it ends at (`a → b`,
    /// `b → c`: `a` and `b` end at `c`); or every problem: an old name still declared, a new name
    /// not declared, a cycle.
    /// The names `moved` says `resource` had before.
    pub fn formerly(&self, resource: &str) -> Vec<String> {
        if self.moved.is_empty() {
            return Vec::new();
        }
        let moves = self.moves().unwrap_or_default();
        moves.into_iter().filter(|(_, new)| new == resource).map(|(old, _)| old).collect()
    }

    pub fn moves(&self) -> Result<IndexMap<String, String>, Vec<String>> {
        let spec = self;
        let (mut resolved, mut problems) = (IndexMap::new(), Vec::new());
        for (old, new) in &spec.moved {
            if spec.resources.contains_key(old) {
                problems.push(format!(
                    "moved: `{old}` is still declared: a resource is moved from a name the manifest no longer declares"
                ));
                continue;
            }
            let mut path = vec![old.as_str(), new.as_str()];
            let mut end = new;
            while let Some(next) = spec.moved.get(end) {
                if path.contains(&next.as_str()) {
                    path.push(next);
                    break;
                }
                path.push(next);
                end = next;
            }
            if path[..path.len() - 1].contains(path.last().expect("at least two")) {
                problems.push(format!("moved: a cycle: {}", path.join(" → ")));
            } else if !spec.resources.contains_key(end) {
                problems.push(format!("moved: `{old}` → `{end}`, which the manifest does not declare"));
            } else {
                resolved.insert(old.clone(), end.clone());
            }
        }
        if problems.is_empty() { Ok(resolved) } else { Err(problems) }
    }
}

/// A plug as declared in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlugSpec {
    /// Host path; relative paths resolve against the declaring manifest's directory. A plug
    /// names a path or one object of the cluster below, never both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A Secret of the namespace (one key, or every key as a file): for types run as Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectKey>,
    /// A ConfigMap of the namespace (one key, or every key as a file): for types run as Pods.
    #[serde(default, rename = "configMap", skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ObjectKey>,
    /// A PersistentVolumeClaim of the namespace, the only writable kind: for types run as Pods.
    #[serde(default, rename = "persistentVolumeClaim", skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimName>,
    /// When true, no resource may ask for write access to it.
    #[serde(default)]
    pub read_only: bool,
    /// Regular expressions; when non-empty, only resources whose name matches one get the plug.
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Regular expressions; when non-empty, only resources whose type matches one get the plug.
    #[serde(default)]
    pub resource_types: Vec<String>,
}

/// An object of the cluster's namespace and, optionally, one of its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectKey {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A PersistentVolumeClaim, as a Pod's volume names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimName {
    pub claim_name: String,
}

/// A resource as declared in the manifest. The Kubernetes custom resource embeds this type, so
/// the CLI and the controller accept the same document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// `builtin/<name>`, a local program path (`./x`, `../x`, `/x`) or a Docker image reference.
    /// Optional here so that a missing type is reported by validation with the resource's name.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_ref: Option<String>,
    /// Observe only: never apply actions; fail if the resource is not `VALID`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub readonly: bool,
    /// Alias → name of the resource this one depends on.
    #[serde(default, deserialize_with = "unique_keys", skip_serializing_if = "IndexMap::is_empty")]
    pub dependencies: IndexMap<String, String>,
    /// Free-form configuration; strings may hold Jinja expressions.
    #[serde(default = "empty_object")]
    #[cfg_attr(feature = "kube", schemars(extend("x-kubernetes-preserve-unknown-fields" = true)))]
    pub config: Value,
    /// Environment variables for this resource's programs, over the manifest's `env` (values
    /// may use variables).
    #[serde(default, deserialize_with = "unique_keys", skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// How long this resource's programs may run (`30m`, `90s`): `action` for actions, `state`
    /// for init and state reads; the command line's (or the controller's) limits otherwise.
    #[serde(default, skip_serializing_if = "ResourceTimeouts::is_empty")]
    pub timeouts: ResourceTimeouts,
}

/// A resource's own time limits, as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourceTimeouts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// An action that reported progress and then no increase for this long is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
}

impl ResourceTimeouts {
    pub fn is_empty(&self) -> bool {
        self.action.is_none() && self.state.is_none() && self.progress.is_none()
    }
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// `from` (of the file at `index`) into `into`; a name already there is `(name, its file)`.
fn merge_from<V>(
    into: &mut IndexMap<String, V>,
    origin: &mut BTreeMap<String, usize>,
    from: IndexMap<String, V>,
    index: usize,
) -> Result<(), (String, usize)> {
    for (name, value) in from {
        if let Some(&other) = origin.get(&name) {
            return Err((name, other));
        }
        origin.insert(name.clone(), index);
        into.insert(name, value);
    }
    Ok(())
}

/// One or more manifest files merged into one document, remembering where each part came from.
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    /// The files, in the order given; the first names the manifest in messages.
    pub files: Vec<PathBuf>,
    pub spec: ManifestSpec,
    /// Which file (index into `files`) declared each resource.
    pub resource_origin: BTreeMap<String, usize>,
    /// Which file (index into `files`) declared each plug.
    pub plug_origin: BTreeMap<String, usize>,
}

impl LoadedManifest {
    /// How the manifest is named in messages: its first file, plus a count of the others.
    pub fn display_name(&self) -> String {
        display_name(&self.files)
    }

    /// The directory of the file at `index`: the base for relative paths declared in it.
    pub fn dir_of(&self, index: usize) -> PathBuf {
        parent_dir(&self.files[index])
    }

    /// Wraps an already-parsed document (used by callers that do not read files, such as the
    /// controller, whose manifest arrives inside a Kubernetes object).
    pub fn from_spec(name: impl Into<PathBuf>, spec: ManifestSpec) -> Self {
        let resource_origin = spec.resources.keys().map(|k| (k.clone(), 0)).collect();
        let plug_origin = spec.plugs.keys().map(|k| (k.clone(), 0)).collect();
        Self { files: vec![name.into()], spec, resource_origin, plug_origin }
    }
}

/// Formats a list of manifest files for messages.
pub fn display_name(files: &[PathBuf]) -> String {
    match files {
        [] => "<no manifest>".to_string(),
        [one] => one.display().to_string(),
        [first, rest @ ..] => format!("{} (+{} more)", first.display(), rest.len()),
    }
}

/// The directory holding `file`, as an absolute path when it can be made one.
pub fn parent_dir(file: &Path) -> PathBuf {
    let dir = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("manifest {path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("manifest {path}: not a valid manifest: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("manifest {path}: {kind} `{name}` is also declared in {other}")]
    Duplicate { path: PathBuf, kind: &'static str, name: String, other: PathBuf },
    #[error("no manifest file given")]
    NoFiles,
}

impl LoadError {
    pub fn reason(&self) -> &'static str {
        match self {
            LoadError::Read { .. } => "ManifestUnreadable",
            LoadError::Parse { .. } => "ManifestMalformed",
            LoadError::Duplicate { .. } => "DuplicateName",
            LoadError::NoFiles => "NoManifest",
        }
    }
}

/// Reads and merges manifest files. A name declared twice (resource, plug or var), even across
/// files, is an error: silently letting one win would apply something the user did not read.
pub fn load(files: &[PathBuf]) -> Result<LoadedManifest, LoadError> {
    if files.is_empty() {
        return Err(LoadError::NoFiles);
    }
    let mut merged = LoadedManifest {
        files: files.to_vec(),
        spec: ManifestSpec::default(),
        resource_origin: BTreeMap::new(),
        plug_origin: BTreeMap::new(),
    };
    let mut var_origin: BTreeMap<String, usize> = BTreeMap::new();
    let mut output_origin: BTreeMap<String, usize> = BTreeMap::new();
    let mut env_origin: BTreeMap<String, usize> = BTreeMap::new();
    let mut moved_origin: BTreeMap<String, usize> = BTreeMap::new();
    for (index, path) in files.iter().enumerate() {
        let spec = parse_file(path)?;
        let dup = |kind, name: &str, other: usize| LoadError::Duplicate {
            path: path.clone(),
            kind,
            name: name.to_string(),
            other: files[other].clone(),
        };
        for (name, plug) in spec.plugs {
            if let Some(&other) = merged.plug_origin.get(&name) {
                return Err(dup("plug", &name, other));
            }
            merged.plug_origin.insert(name.clone(), index);
            merged.spec.plugs.insert(name, plug);
        }
        merge_from(&mut merged.spec.vars, &mut var_origin, spec.vars, index).map_err(|(n, o)| dup("var", &n, o))?;
        merge_from(&mut merged.spec.env, &mut env_origin, spec.env, index).map_err(|(n, o)| dup("env entry", &n, o))?;
        merge_from(&mut merged.spec.outputs, &mut output_origin, spec.outputs, index)
            .map_err(|(n, o)| dup("output", &n, o))?;
        merge_from(&mut merged.spec.moved, &mut moved_origin, spec.moved, index)
            .map_err(|(n, o)| dup("moved entry", &n, o))?;
        for name in spec.sensitive {
            if !merged.spec.sensitive.contains(&name) {
                merged.spec.sensitive.push(name);
            }
        }
        for (name, resource) in spec.resources {
            if let Some(&other) = merged.resource_origin.get(&name) {
                return Err(dup("resource", &name, other));
            }
            merged.resource_origin.insert(name.clone(), index);
            merged.spec.resources.insert(name, resource);
        }
    }
    Ok(merged)
}

fn parse_file(path: &Path) -> Result<ManifestSpec, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: path.to_path_buf(), source })?;
    parse_document(&text, is_json(path)).map_err(|message| LoadError::Parse { path: path.to_path_buf(), message })
}

/// Parses one manifest document; `json` selects the JSON parser (for its error positions),
/// otherwise YAML. An empty document is an empty manifest.
pub fn parse_document(text: &str, json: bool) -> Result<ManifestSpec, String> {
    if text.trim().is_empty() {
        return Ok(ManifestSpec::default());
    }
    let parsed = if json {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        serde_norway::from_str(text).map_err(|e| e.to_string())
    };
    parsed.map_err(|message| {
        let kinds = kubernetes_kinds(text, json);
        let what = match kinds.as_slice() {
            [] => return message,
            [kind] => format!("this is a Kubernetes object (kind: {kind})"),
            kinds => format!("this holds Kubernetes objects (kinds: {})", kinds.join(", ")),
        };
        format!(
            "{message}\n  hint: {what}, not a manifest file; a Manifest custom resource is applied with `kubectl \
             apply -f` and kept by `deployster controller`"
        )
    })
}

/// The `kind`s of the documents that look like Kubernetes objects (`apiVersion` and `kind`),
/// in order: a file of several (a Manifest and the claim it plugs) is read whole.
fn kubernetes_kinds(text: &str, json: bool) -> Vec<String> {
    let kind = |doc: Value| Some(doc.get("kind")?.as_str()?.to_string()).filter(|_| doc.get("apiVersion").is_some());
    if json {
        return serde_json::from_str(text).ok().and_then(kind).into_iter().collect();
    }
    // Up to the first document that does not parse: past a syntax error the stream of
    // documents would go on failing without end.
    let mut kinds = Vec::new();
    for document in serde_norway::Deserializer::from_str(text) {
        match Value::deserialize(document) {
            Ok(doc) => kinds.extend(kind(doc)),
            Err(_) => break,
        }
    }
    kinds
}

/// Whether a file should be parsed as JSON (by extension) rather than YAML.
pub fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// Deserializes a map, rejecting a key that appears twice (serde's maps keep the last silently).
pub fn unique_keys<'de, D, V>(deserializer: D) -> Result<IndexMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct UniqueVisitor<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueVisitor<V> {
        type Value = IndexMap<String, V>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map with unique keys")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(IndexMap::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = IndexMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(serde::de::Error::custom(format_args!("duplicate key `{key}`")));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_any(UniqueVisitor(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let spec = parse_document(
            r#"
plugs:
  creds: { path: ./secrets/creds.json, read_only: true, resource_names: ["^app_"] }
vars:
  env: dev
resources:
  data_dir:
    type: builtin/directory
    config: { path: "/tmp/demo-{{ env }}" }
  app_config:
    type: builtin/file
    dependencies: { dir: data_dir }
    config:
      path: "{{ dir.state.path }}/app.json"
"#,
            false,
        )
        .unwrap();
        assert_eq!(spec.resources.keys().collect::<Vec<_>>(), ["data_dir", "app_config"]);
        assert!(spec.plugs["creds"].read_only);
        assert_eq!(spec.resources["app_config"].dependencies["dir"], "data_dir");
    }

    #[test]
    fn rejects_duplicate_resource_in_yaml_and_json() {
        let yaml = "resources:\n  a: {type: builtin/file}\n  a: {type: builtin/file}\n";
        let err = parse_document(yaml, false).unwrap_err();
        assert!(err.contains("duplicate") && err.contains('a'), "{err}");
        let json = r#"{"resources": {"a": {"type": "x"}, "a": {"type": "y"}}}"#;
        let err = parse_document(json, true).unwrap_err();
        assert!(err.contains("duplicate key `a`"), "{err}");
    }

    #[test]
    fn rejects_unknown_fields_with_their_name() {
        let err = parse_document("resources:\n  a: {type: x, dependecies: {}}\n", false).unwrap_err();
        assert!(err.contains("dependecies"), "{err}");
    }

    #[test]
    fn merging_files_rejects_a_name_declared_twice() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.yaml");
        let b = dir.path().join("b.json");
        std::fs::write(&a, "resources:\n  x: {type: builtin/file}\n").unwrap();
        std::fs::write(&b, r#"{"resources": {"x": {"type": "builtin/file"}}}"#).unwrap();
        let err = load(&[a.clone(), b]).unwrap_err();
        assert_eq!(err.reason(), "DuplicateName");
        assert!(err.to_string().contains("resource `x` is also declared in"), "{err}");
        let c = dir.path().join("c.yaml");
        std::fs::write(&c, "resources:\n  y: {type: builtin/file}\n").unwrap();
        let merged = load(&[a, c]).unwrap();
        assert_eq!(merged.resource_origin["y"], 1);
    }
}
