//! Fetching a Manifest's inputs (its plugs' Secrets and ConfigMaps), materializing them to
//! files for the executors, and turning the object into a validated engine manifest.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest, Sha256};

use crate::crd::{KeyRef, Manifest};
use crate::engine::manifest::{ClaimName, LoadedManifest, ManifestSpec as EngineSpec, ObjectKey, PlugSpec};
use crate::engine::typeref::TypeRef;
use crate::engine::validate::{Invalid, ValidatedManifest, validate_kept};

/// Why a Manifest's inputs could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ManifestInputError {
    #[error("spec.{field} {why}")]
    Interval { field: &'static str, why: String },
    #[error("spec.maxInterval `{text}` is shorter than spec.interval `{interval}`")]
    MaxInterval { text: String, interval: String },
    #[error("plug `{plug}`: give exactly one of `secret`, `configMap` or `persistentVolumeClaim`")]
    PlugSource { plug: String },
    #[error(
        "plug `{plug}` names the PersistentVolumeClaim `{claim}`, which only resource types run as Pods can mount; \
         this controller runs image types without Pods (install it with executor=pod, the chart's default)"
    )]
    ClaimNeedsPods { plug: String, claim: String },
    #[error("{kind} `{name}` not found in namespace `{namespace}`")]
    Missing { kind: &'static str, name: String, namespace: String },
    #[error("plug `{plug}`: {kind} `{name}` has no key `{key}`")]
    MissingKey { plug: String, kind: &'static str, name: String, key: String },
    #[error("{}", .0.problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Manifest(Invalid),
    #[error(
        "local program types are refused (the controller runs without --allow-local-programs): {}; use \
         builtin/<name> or a Docker image",
        .0.join(", ")
    )]
    LocalPrograms(Vec<String>),
    #[error("in a cluster, built-in types act in Pods of the namespace: {}", .0.join("; "))]
    BuiltinsInCluster(Vec<String>),
    #[error("cannot write plug files: {0}")]
    Files(std::io::Error),
    #[error("spec.outputs: give at most one of `secretName` or `configMapName`")]
    OutputsTarget,
    #[error("varsFrom: key `{key}` of secret `{secret}` is not UTF-8 text, so it cannot be a variable")]
    VarNotText { secret: String, key: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl ManifestInputError {
    pub fn reason(&self) -> &'static str {
        match self {
            ManifestInputError::Interval { .. }
            | ManifestInputError::MaxInterval { .. }
            | ManifestInputError::PlugSource { .. }
            | ManifestInputError::ClaimNeedsPods { .. }
            | ManifestInputError::Manifest(_)
            | ManifestInputError::OutputsTarget
            | ManifestInputError::BuiltinsInCluster(_)
            | ManifestInputError::VarNotText { .. } => "InvalidManifest",
            ManifestInputError::LocalPrograms(_) => "LocalProgramRefused",
            ManifestInputError::Missing { .. } | ManifestInputError::MissingKey { .. } => "PlugUnavailable",
            ManifestInputError::Files(_) => "PlugFiles",
            ManifestInputError::Kube(_) => "KubernetesApi",
        }
    }

    /// Only a change of the spec fixes it: not retried.
    pub fn is_invalid(&self) -> bool {
        matches!(self.reason(), "InvalidManifest" | "LocalProgramRefused")
    }

    /// A referenced Secret, ConfigMap or key is missing: it may appear later.
    pub fn is_unavailable(&self) -> bool {
        self.reason() == "PlugUnavailable"
    }
}

/// The object as a validated engine manifest with its plugs materialized (or handed to the
/// Pods as volumes): what a pass (or a deletion) runs on.
pub async fn prepare(
    client: &Client,
    obj: &Manifest,
    settings: &super::config::Settings,
) -> Result<(ValidatedManifest, Materialized), ManifestInputError> {
    let inputs = materialize(client, obj, &settings.plug_root, settings.plugs).await?;
    let manifest = engine_manifest(obj, &inputs, settings.plugs)?;
    check_programs(&manifest, settings.allow_local_programs)?;
    if let Some(key) = &settings.fingerprint_key {
        manifest.mask.use_fingerprint_key(key.clone());
    }
    if settings.plugs == Plugs::Volumes {
        check_builtins_in_pods(&manifest)?;
    }
    Ok((manifest, inputs))
}

pub use super::config::Plugs;

/// The materialized inputs of one pass.
#[derive(Debug, Clone)]
pub struct Materialized {
    /// Plug name → host path of its materialized content.
    pub plug_paths: IndexMap<String, PathBuf>,
    /// A hash of every materialized byte (for the revision), never the bytes themselves.
    pub digest: String,
    /// Variables read from Secrets (`spec.varsFrom`), in order: all sensitive.
    pub secret_vars: Vec<(String, String)>,
    /// The object's own directory (the engine's workspace).
    pub workspace: PathBuf,
}

/// The kinds of object a Manifest reads its inputs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Secret,
    ConfigMap,
}

/// Whether `obj` reads the `source` object named `name` in its own namespace (through a plug or
/// `varsFrom`): a change to that object starts a pass of `obj` at once.
pub fn reads(obj: &Manifest, source: Source, namespace: Option<&str>, name: &str) -> bool {
    // Called for every cached Manifest on each change of a Secret or ConfigMap: no allocation.
    if obj.metadata.namespace.as_deref() != namespace {
        return false;
    }
    let plugs = obj.spec.plugs.values().filter_map(|plug| match source {
        Source::Secret => plug.secret.as_ref(),
        Source::ConfigMap => plug.config_map.as_ref(),
    });
    let vars = obj.spec.vars_from.iter().filter(|_| source == Source::Secret).map(|v| &v.secret_ref);
    plugs.chain(vars).any(|r| r.name == name)
}

/// The directory of one object under the controller's root.
pub fn object_dir(root: &Path, obj: &Manifest) -> PathBuf {
    root.join(obj.namespace().unwrap_or_default()).join(obj.name_any())
}

/// Fetches every plug of `obj` and, as files, writes it (files 0600, directories 0700).
pub async fn materialize(
    client: &Client,
    obj: &Manifest,
    root: &Path,
    plugs: Plugs,
) -> Result<Materialized, ManifestInputError> {
    let namespace = obj.namespace().unwrap_or_default();
    let workspace = object_dir(root, obj);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&workspace).map_err(ManifestInputError::Files)?;
    let mut plug_paths = IndexMap::new();
    let mut digest = Sha256::new();
    for (name, plug) in &obj.spec.plugs {
        let (kind, reference, files) = match (&plug.secret, &plug.config_map, &plug.persistent_volume_claim) {
            (Some(r), None, None) => ("secret", r, secret_files(client, &namespace, r).await?),
            (None, Some(r), None) => ("configMap", r, config_map_files(client, &namespace, r).await?),
            (None, None, Some(_)) if plugs == Plugs::Volumes => {
                // Its content is the program's to change; only its name is part of the revision.
                continue;
            }
            (None, None, Some(claim)) => {
                return Err(ManifestInputError::ClaimNeedsPods { plug: name.clone(), claim: claim.claim_name.clone() });
            }
            _ => return Err(ManifestInputError::PlugSource { plug: name.clone() }),
        };
        let files = select_key(files, reference).map_err(|key| ManifestInputError::MissingKey {
            plug: name.clone(),
            kind,
            name: reference.name.clone(),
            key,
        })?;
        for (key, bytes) in &files {
            digest.update(name.as_bytes());
            digest.update(key.as_bytes());
            digest.update(bytes);
        }
        if plugs == Plugs::Files {
            let path = workspace.join("plugs").join(name);
            write_plug(&path, &files, reference.key.is_some()).map_err(ManifestInputError::Files)?;
            plug_paths.insert(name.clone(), path);
        }
    }
    let mut secret_vars = Vec::new();
    for (i, source) in obj.spec.vars_from.iter().enumerate() {
        let reference = &source.secret_ref;
        let keys = secret_files(client, &namespace, reference).await?;
        let keys = select_key(keys, reference).map_err(|key| ManifestInputError::MissingKey {
            plug: format!("varsFrom[{i}]"),
            kind: "secret",
            name: reference.name.clone(),
            key,
        })?;
        for (key, bytes) in keys {
            let value = String::from_utf8(bytes)
                .map_err(|_| ManifestInputError::VarNotText { secret: reference.name.clone(), key: key.clone() })?;
            digest.update(b"var");
            digest.update(key.as_bytes());
            digest.update(value.as_bytes());
            secret_vars.push((key, value));
        }
    }
    Ok(Materialized { plug_paths, digest: hex::encode(&digest.finalize()[..6]), secret_vars, workspace })
}

async fn secret_files(
    client: &Client,
    namespace: &str,
    r: &KeyRef,
) -> Result<BTreeMap<String, Vec<u8>>, ManifestInputError> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace).get_opt(&r.name).await?;
    let secret = secret.ok_or_else(|| missing("secret", r, namespace))?;
    let mut files: BTreeMap<String, Vec<u8>> =
        secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    files.extend(secret.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
    Ok(files)
}

async fn config_map_files(
    client: &Client,
    namespace: &str,
    r: &KeyRef,
) -> Result<BTreeMap<String, Vec<u8>>, ManifestInputError> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace).get_opt(&r.name).await?;
    let map = map.ok_or_else(|| missing("configMap", r, namespace))?;
    let mut files: BTreeMap<String, Vec<u8>> =
        map.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    files.extend(map.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
    Ok(files)
}

fn missing(kind: &'static str, r: &KeyRef, namespace: &str) -> ManifestInputError {
    ManifestInputError::Missing { kind, name: r.name.clone(), namespace: namespace.to_string() }
}

/// Only the referenced key, when the reference names one.
fn select_key(mut files: BTreeMap<String, Vec<u8>>, r: &KeyRef) -> Result<BTreeMap<String, Vec<u8>>, String> {
    match &r.key {
        None => Ok(files),
        Some(key) => files.remove(key).map(|bytes| BTreeMap::from([(key.clone(), bytes)])).ok_or_else(|| key.clone()),
    }
}

/// Writes one key as the file `path`, or every key as a file of the directory `path`.
fn write_plug(path: &Path, files: &BTreeMap<String, Vec<u8>>, single: bool) -> std::io::Result<()> {
    let parent = path.parent().expect("plug paths have a parent");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    let write = |file: &Path, bytes: &[u8]| -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(file)?;
        f.write_all(bytes)
    };
    if single {
        let bytes = files.values().next().map_or(&[][..], Vec::as_slice);
        return write(path, bytes);
    }
    if path.is_dir() {
        std::fs::remove_dir_all(path)?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(path)?;
    for (key, bytes) in files {
        write(&path.join(key), bytes)?;
    }
    Ok(())
}

/// The object as a validated engine manifest, named `namespace/name`.
pub fn engine_manifest(
    obj: &Manifest,
    inputs: &Materialized,
    plugs: Plugs,
) -> Result<ValidatedManifest, ManifestInputError> {
    let spec = &obj.spec;
    let as_volumes = plugs == Plugs::Volumes;
    let key = |r: &Option<KeyRef>| {
        r.as_ref().filter(|_| as_volumes).map(|r| ObjectKey { name: r.name.clone(), key: r.key.clone() })
    };
    let plugs = spec
        .plugs
        .iter()
        .map(|(name, p)| {
            let path = inputs.plug_paths.get(name).map(|p| p.display().to_string());
            let plug = PlugSpec {
                path: if as_volumes { None } else { Some(path.unwrap_or_default()) },
                secret: key(&p.secret),
                config_map: key(&p.config_map),
                persistent_volume_claim: p
                    .persistent_volume_claim
                    .as_ref()
                    .filter(|_| as_volumes)
                    .map(|c| ClaimName { claim_name: c.claim_name.clone() }),
                read_only: p.read_only,
                resource_names: p.resource_names.clone(),
                resource_types: p.resource_types.clone(),
            };
            (name.clone(), plug)
        })
        .collect();
    let engine_spec = EngineSpec {
        plugs,
        vars: spec.vars.clone(),
        resources: spec.resources.clone(),
        sensitive: spec.sensitive.iter().cloned().chain(inputs.secret_vars.iter().map(|(k, _)| k.clone())).collect(),
        outputs: spec.outputs.as_ref().map(|o| o.values.clone()).unwrap_or_default(),
        // Per-resource `env` comes with the resources; the Manifest has no manifest-level one.
        env: IndexMap::new(),
        moved: spec.moved.clone(),
    };
    let loaded = LoadedManifest::from_spec(inputs.workspace.join(MANIFEST_FILE), engine_spec);
    let mut vars: serde_json::Map<String, serde_json::Value> =
        spec.vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    vars.extend(inputs.secret_vars.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))));
    let mut manifest = validate_kept(&loaded, vars).map_err(ManifestInputError::Manifest)?;
    manifest.name = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    Ok(manifest)
}

/// What a Manifest's manifest is called in its workspace, and so in its deployment log's
/// inventory (`ValidatedManifest::inventory_key`).
pub const MANIFEST_FILE: &str = "manifest";

/// Resource types that are local programs run code of the Manifest author's choosing inside the
/// controller: refused unless the controller was started with `--allow-local-programs`.
pub fn check_programs(manifest: &ValidatedManifest, allow_local: bool) -> Result<(), ManifestInputError> {
    let local: Vec<String> = manifest
        .resources
        .iter()
        .filter(|r| matches!(r.type_ref, TypeRef::Local(_)))
        .map(|r| format!("{} ({})", r.name, r.type_name))
        .collect();
    if local.is_empty() || allow_local {
        return Ok(());
    }
    Err(ManifestInputError::LocalPrograms(local))
}

/// What the built-ins of `manifest` need when they act in Pods, checked before anything runs:
/// a file built-in's `files` plug is a PersistentVolumeClaim it may write to (nothing else
/// outlives its Pod); `builtin/package` has no place in a cluster.
pub fn check_builtins_in_pods(manifest: &ValidatedManifest) -> Result<(), ManifestInputError> {
    use crate::engine::validate::ClusterPlug;
    const FILES: &str = crate::builtins::FILES_PLUG;
    let mut problems = Vec::new();
    for resource in &manifest.resources {
        let named = format!("resource `{}` ({})", resource.name, resource.type_name);
        if let TypeRef::Builtin(name) = &resource.type_ref
            && let Some(why) = crate::builtins::refused_in_cluster(name)
        {
            problems.push(format!("{named} cannot be used here: {why}"));
            continue;
        }
        if !resource.type_ref.is_file_builtin() {
            continue;
        }
        let plug = manifest.plugs.get(FILES).filter(|p| p.allowed_for(resource));
        let why = match plug {
            None => "it is given no plug `files`, and its Pod's own filesystem goes with the Pod",
            Some(p) if !matches!(p.cluster, Some(ClusterPlug::Claim { .. })) => {
                "its plug `files` is not a PersistentVolumeClaim, the one kind of plug it can write to"
            }
            Some(p) if p.read_only => "its plug `files` is readOnly",
            Some(_) => continue,
        };
        problems.push(format!(
            "{named} needs a plug `files` naming a PersistentVolumeClaim it may write to (`plugs: {{files: \
             {{persistentVolumeClaim: {{claimName: NAME}}}}}}`), with paths relative to it: {why}"
        ));
    }
    if problems.is_empty() { Ok(()) } else { Err(ManifestInputError::BuiltinsInCluster(problems)) }
}

/// `interval` and `retryInterval`.
pub fn intervals(obj: &Manifest) -> Result<Intervals, ManifestInputError> {
    let parse = |field: &'static str, text: &str| {
        crate::engine::positive_duration(text).map_err(|why| ManifestInputError::Interval { field, why })
    };
    let check = parse("interval", &obj.spec.interval)?;
    let max = match &obj.spec.max_interval {
        None => check.saturating_mul(DEFAULT_MAX_INTERVAL_FACTOR),
        Some(text) => match parse("maxInterval", text)? {
            max if max < check => {
                return Err(ManifestInputError::MaxInterval {
                    text: text.clone(),
                    interval: obj.spec.interval.clone(),
                });
            }
            max => max,
        },
    };
    Ok(Intervals { check, retry: parse("retryInterval", &obj.spec.retry_interval)?, max })
}

/// `maxInterval` when not given: this many times `interval`.
pub const DEFAULT_MAX_INTERVAL_FACTOR: u32 = 4;

/// How often a Manifest is checked, and retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intervals {
    /// `interval`: how often a resource is checked at first, and after drift or a change.
    pub check: Duration,
    pub retry: Duration,
    /// `maxInterval`: how rarely a steady resource is checked.
    pub max: Duration,
}

/// The revision of a pass: `<generation>-<hash>`, the object's generation (which a spec edit
/// bumps) and a hash of the spec and the content of the Secrets and ConfigMaps it reads (not
/// where this controller happens to write them), which a changed Secret changes.
pub fn revision(obj: &Manifest, inputs: &Materialized) -> String {
    let hash = crate::engine::validate::content_hash(&serde_json::json!({"spec": obj.spec, "plugs": inputs.digest}));
    format!("{}-{hash}", obj.metadata.generation.unwrap_or(0))
}

/// The content part of a [`revision`]: the same spec and inputs, the same, whatever the
/// generation.
pub fn content_of(revision: &str) -> &str {
    revision.split_once('-').map_or(revision, |(_, hash)| hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(namespace: &str, spec: &str) -> Manifest {
        let mut obj = Manifest::new("app", serde_norway::from_str(spec).unwrap());
        obj.metadata.namespace = Some(namespace.into());
        obj
    }

    #[test]
    fn a_manifest_reads_the_secrets_and_config_maps_its_plugs_and_vars_name() {
        let obj = manifest(
            "team",
            "plugs:\n  db: {secret: {name: db, key: password}}\n  settings: {configMap: {name: settings}}\n\
             varsFrom:\n  - secretRef: {name: env}\nresources: {}\n",
        );
        let reads = |source, namespace, name| reads(&obj, source, Some(namespace), name);
        assert!(reads(Source::Secret, "team", "db"));
        assert!(reads(Source::Secret, "team", "env"), "varsFrom");
        assert!(reads(Source::ConfigMap, "team", "settings"));
        assert!(!reads(Source::ConfigMap, "team", "db"), "a ConfigMap named like a Secret it reads");
        assert!(!reads(Source::Secret, "team", "settings"), "a Secret named like a ConfigMap it reads");
        assert!(!reads(Source::ConfigMap, "team", "env"), "varsFrom names Secrets only");
        assert!(!reads(Source::Secret, "other", "db"), "another namespace");
        assert!(!reads(Source::Secret, "team", "app-outputs"), "what it writes is not an input");
    }

    fn inputs() -> Materialized {
        let plug_paths = [("db".to_string(), PathBuf::from("/plugs/db"))].into_iter().collect();
        Materialized { plug_paths, digest: String::new(), secret_vars: Vec::new(), workspace: PathBuf::from("/w") }
    }

    #[test]
    fn as_volumes_plugs_stay_objects_of_the_namespace_never_paths() {
        use crate::engine::validate::ClusterPlug;
        let obj = manifest(
            "team",
            "plugs:\n  db: {secret: {name: db, key: password}}\n  data: {persistentVolumeClaim: {claimName: pvc}}\n\
             resources: {x: {type: builtin/directory, config: {path: /tmp/x}}}\n",
        );
        let m =
            engine_manifest(&obj, &Materialized { plug_paths: IndexMap::new(), ..inputs() }, Plugs::Volumes).unwrap();
        assert_eq!(
            m.plugs["db"].cluster,
            Some(ClusterPlug::Secret { name: "db".into(), key: Some("password".into()) })
        );
        assert_eq!(m.plugs["data"].cluster, Some(ClusterPlug::Claim { name: "pvc".into() }));
        let as_files = manifest(
            "team",
            "plugs:\n  db: {secret: {name: db}}\nresources: {x: {type: builtin/directory, config: {path: /tmp/x}}}\n",
        );
        let m = engine_manifest(&as_files, &inputs(), Plugs::Files).unwrap();
        assert_eq!(m.plugs["db"].cluster, None, "a file the controller wrote");
    }

    /// The problems `check_builtins_in_pods` finds in a Manifest of `plugs` and `resources`.
    fn builtin_problems(plugs: &str, resources: &str) -> Vec<String> {
        let obj = manifest("team", &format!("plugs: {plugs}\nresources: {resources}\n"));
        let m =
            engine_manifest(&obj, &Materialized { plug_paths: IndexMap::new(), ..inputs() }, Plugs::Volumes).unwrap();
        match check_builtins_in_pods(&m) {
            Ok(()) => Vec::new(),
            Err(e) => {
                assert_eq!(e.reason(), "InvalidManifest");
                assert!(e.is_invalid(), "only a change of the spec fixes it");
                let ManifestInputError::BuiltinsInCluster(problems) = e else { panic!("{e}") };
                problems
            }
        }
    }

    #[test]
    fn file_built_ins_in_pods_need_a_writable_claim_as_their_files_plug() {
        let claim = "{files: {persistentVolumeClaim: {claimName: data}}}";
        let file = "{type: builtin/file, config: {path: a, content: x}}";
        assert!(
            builtin_problems(claim, &format!("{{f: {file}, d: {{type: builtin/directory, config: {{path: d}}}}}}"))
                .is_empty()
        );
        let cases = [
            ("{}", "is given no plug `files`"),
            ("{files: {secret: {name: s}}}", "not a PersistentVolumeClaim"),
            ("{files: {persistentVolumeClaim: {claimName: data}, readOnly: true}}", "is readOnly"),
            ("{files: {persistentVolumeClaim: {claimName: data}, resourceNames: [other]}}", "is given no plug `files`"),
        ];
        for (plugs, why) in cases {
            let problems = builtin_problems(plugs, &format!("{{f: {file}}}"));
            assert_eq!(problems.len(), 1, "{plugs}: {problems:?}");
            assert!(problems[0].starts_with("resource `f` (builtin/file) needs a plug `files`"), "{}", problems[0]);
            assert!(problems[0].contains(why), "{plugs}: {}", problems[0]);
        }
        // Every resource is named at once; what acts through the API is not concerned.
        let problems = builtin_problems(
            "{}",
            "{a: {type: builtin/directory, config: {path: a}}, p: {type: builtin/package, config: {service: s, \
             home: /h, version: v1, package: p.cronus}}, k: {type: builtin/kubernetes, config: {manifest: {}}}}",
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("resource `a` (builtin/directory)"), "{problems:?}");
        assert!(problems[1].starts_with("resource `p` (builtin/package) cannot be used here"), "{problems:?}");
        assert!(problems[1].contains("run it with the CLI"), "{problems:?}");
    }

    #[test]
    fn a_claim_without_pods_is_refused_as_invalid_naming_plug_and_claim() {
        let e = ManifestInputError::ClaimNeedsPods { plug: "data".into(), claim: "pvc".into() };
        assert!(e.is_invalid());
        let text = e.to_string();
        assert!(text.contains("plug `data`") && text.contains("`pvc`") && text.contains("executor=pod"), "{text}");
    }
}
