//! Fetching a Manifest's inputs (its plugs' Secrets and ConfigMaps, `varsFrom`) and
//! materializing them to files for the executors ([`super::fetch::prepare`] then has the object
//! validated with them).

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest, Sha256};

use super::invalid::InvalidSpec;
use crate::controller::config::Plugs;
use crate::crd::{KeyRef, Manifest};

/// Why a Manifest's inputs could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ManifestInputError {
    /// What only a change of the spec fixes: not retried.
    #[error(transparent)]
    Invalid(#[from] InvalidSpec),
    #[error("{kind} `{name}` not found in namespace `{namespace}`")]
    Missing { kind: &'static str, name: String, namespace: String },
    #[error("plug `{plug}`: {kind} `{name}` has no key `{key}`")]
    MissingKey { plug: String, kind: &'static str, name: String, key: String },
    #[error("cannot write plug files: {0}")]
    Files(std::io::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl ManifestInputError {
    pub fn reason(&self) -> &'static str {
        match self {
            ManifestInputError::Invalid(e) => e.reason(),
            ManifestInputError::Missing { .. } | ManifestInputError::MissingKey { .. } => "PlugUnavailable",
            ManifestInputError::Files(_) => "PlugFiles",
            ManifestInputError::Kube(_) => "KubernetesApi",
        }
    }

    /// Only a change of the spec fixes it: not retried.
    pub fn is_invalid(&self) -> bool {
        matches!(self, ManifestInputError::Invalid(_))
    }

    /// A referenced Secret, ConfigMap or key is missing: it may appear later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ManifestInputError::Missing { .. } | ManifestInputError::MissingKey { .. })
    }
}

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
                let claim = claim.claim_name.clone();
                return Err(InvalidSpec::ClaimNeedsPods { plug: name.clone(), claim }.into());
            }
            _ => return Err(InvalidSpec::PlugSource { plug: name.clone() }.into()),
        };
        let files = select_key(files, reference).ok_or_else(|| ManifestInputError::MissingKey {
            plug: name.clone(),
            kind,
            name: reference.name.clone(),
            key: reference.key.clone().unwrap_or_default(),
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
        let keys = select_key(keys, reference).ok_or_else(|| ManifestInputError::MissingKey {
            plug: format!("varsFrom[{i}]"),
            kind: "secret",
            name: reference.name.clone(),
            key: reference.key.clone().unwrap_or_default(),
        })?;
        for (key, bytes) in keys {
            let value = String::from_utf8(bytes)
                .map_err(|_| InvalidSpec::VarNotText { secret: reference.name.clone(), key: key.clone() })?;
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

/// Only the referenced key, when the reference names one; `None` when it holds no such key.
fn select_key(mut files: BTreeMap<String, Vec<u8>>, r: &KeyRef) -> Option<BTreeMap<String, Vec<u8>>> {
    match &r.key {
        None => Some(files),
        Some(key) => files.remove(key).map(|bytes| BTreeMap::from([(key.clone(), bytes)])),
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
pub(super) mod tests {
    use super::*;

    /// A Manifest `app` of `namespace` with `spec` (YAML).
    pub(in crate::controller::manifest) fn manifest(namespace: &str, spec: &str) -> Manifest {
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
}
