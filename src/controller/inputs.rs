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

use super::error::Error;
use crate::crd::{KeyRef, Manifest};
use crate::engine::manifest::{LoadedManifest, ManifestSpec as EngineSpec, PlugSpec};
use crate::engine::typeref::TypeRef;
use crate::engine::validate::{ValidatedManifest, validate};

/// Why the inputs could not be had.
#[derive(Debug)]
pub enum InputProblem {
    /// The spec is wrong: fixed only by changing it.
    Invalid(String),
    /// A referenced object or key is missing: it may appear later.
    Unavailable(String),
    Io(Error),
}

/// The materialized inputs of one pass.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Plug name → host path of its materialized content.
    pub plug_paths: IndexMap<String, PathBuf>,
    /// A hash of every materialized byte (for the revision), never the bytes themselves.
    pub digest: String,
    /// The object's own directory (the engine's workspace).
    pub workspace: PathBuf,
}

/// The directory of one object under the controller's root.
pub fn object_dir(root: &Path, obj: &Manifest) -> PathBuf {
    root.join(obj.namespace().unwrap_or_default()).join(obj.name_any())
}

/// Fetches and writes every plug of `obj` (files 0600, directories 0700).
pub async fn materialize(client: &Client, obj: &Manifest, root: &Path) -> Result<Inputs, InputProblem> {
    let namespace = obj.namespace().unwrap_or_default();
    let workspace = object_dir(root, obj);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&workspace)
        .map_err(|e| InputProblem::Io(Error::PlugFiles(e)))?;
    let mut plug_paths = IndexMap::new();
    let mut digest = Sha256::new();
    for (name, plug) in &obj.spec.plugs {
        let (kind, reference, files) = match (&plug.secret, &plug.config_map) {
            (Some(r), None) => ("secret", r, secret_files(client, &namespace, r).await?),
            (None, Some(r)) => ("configMap", r, config_map_files(client, &namespace, r).await?),
            _ => {
                return Err(InputProblem::Invalid(format!(
                    "plug `{name}`: give exactly one of `secret` or `configMap`"
                )));
            }
        };
        let files = select_key(files, reference).map_err(|missing| {
            InputProblem::Unavailable(format!("plug `{name}`: {kind} `{}` has no key `{missing}`", reference.name))
        })?;
        let path = workspace.join("plugs").join(name);
        write_plug(&path, &files, reference.key.is_some()).map_err(|e| InputProblem::Io(Error::PlugFiles(e)))?;
        for (key, bytes) in &files {
            digest.update(name.as_bytes());
            digest.update(key.as_bytes());
            digest.update(bytes);
        }
        plug_paths.insert(name.clone(), path);
    }
    Ok(Inputs { plug_paths, digest: hex::encode(&digest.finalize()[..6]), workspace })
}

async fn secret_files(client: &Client, namespace: &str, r: &KeyRef) -> Result<BTreeMap<String, Vec<u8>>, InputProblem> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&r.name)
        .await
        .map_err(|e| InputProblem::Io(e.into()))?;
    let secret = secret.ok_or_else(|| {
        InputProblem::Unavailable(format!("secret `{}` not found in namespace `{namespace}`", r.name))
    })?;
    let mut files: BTreeMap<String, Vec<u8>> =
        secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    files.extend(secret.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
    Ok(files)
}

async fn config_map_files(
    client: &Client,
    namespace: &str,
    r: &KeyRef,
) -> Result<BTreeMap<String, Vec<u8>>, InputProblem> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(&r.name)
        .await
        .map_err(|e| InputProblem::Io(e.into()))?;
    let map = map.ok_or_else(|| {
        InputProblem::Unavailable(format!("configMap `{}` not found in namespace `{namespace}`", r.name))
    })?;
    let mut files: BTreeMap<String, Vec<u8>> =
        map.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    files.extend(map.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
    Ok(files)
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
pub fn engine_manifest(obj: &Manifest, inputs: &Inputs) -> Result<ValidatedManifest, String> {
    let spec = &obj.spec;
    let plugs = spec
        .plugs
        .iter()
        .map(|(name, p)| {
            let path = inputs.plug_paths.get(name).map(|p| p.display().to_string()).unwrap_or_default();
            let plug = PlugSpec {
                path,
                read_only: p.read_only,
                resource_names: p.resource_names.clone(),
                resource_types: p.resource_types.clone(),
            };
            (name.clone(), plug)
        })
        .collect();
    let engine_spec = EngineSpec { plugs, vars: spec.vars.clone(), resources: spec.resources.clone() };
    let loaded = LoadedManifest::from_spec(inputs.workspace.join("manifest"), engine_spec);
    let vars = spec.vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut manifest = validate(&loaded, vars).map_err(|invalid| {
        let problems: Vec<String> = invalid.problems.iter().map(ToString::to_string).collect();
        problems.join("; ")
    })?;
    manifest.name = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    Ok(manifest)
}

/// Resource types that are local programs run code of the Manifest author's choosing inside the
/// controller: refused unless the controller was started with `--allow-local-programs`.
pub fn check_programs(manifest: &ValidatedManifest, allow_local: bool) -> Result<(), String> {
    let local: Vec<String> = manifest
        .resources
        .iter()
        .filter(|r| matches!(r.type_ref, TypeRef::Local(_)))
        .map(|r| format!("{} ({})", r.name, r.type_name))
        .collect();
    if local.is_empty() || allow_local {
        return Ok(());
    }
    Err(format!(
        "local program types are refused (the controller runs without --allow-local-programs): {}; use builtin/<name> or a Docker image",
        local.join(", ")
    ))
}

/// `interval` and `retryInterval`.
pub fn intervals(obj: &Manifest) -> Result<(Duration, Duration), String> {
    let parse = |field: &str, text: &str| {
        humantime::parse_duration(text)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("spec.{field} `{text}` is not a duration such as 30s or 5m"))
    };
    Ok((parse("interval", &obj.spec.interval)?, parse("retryInterval", &obj.spec.retry_interval)?))
}

/// The revision of a pass: the spec and the plugs' content (not where this controller happens
/// to write them).
pub fn revision(obj: &Manifest, inputs: &Inputs) -> String {
    crate::engine::validate::content_hash(&serde_json::json!({"spec": obj.spec, "plugs": inputs.digest}))
}
