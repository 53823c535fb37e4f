//! Validate (pure): what only a change of the spec can fix, found before anything runs — the
//! intervals and where the outputs go ([`check`], before the inputs are read), then the object
//! as an engine manifest with its inputs ([`manifest`]): its resources and plugs, local
//! programs refused, what built-ins need in Pods. No I/O here.

use std::time::Duration;

use indexmap::IndexMap;
use kube::ResourceExt;

use super::inputs::Materialized;
pub use super::invalid::InvalidSpec;
use super::outputs::OutputsTarget;
use crate::controller::config::{Plugs, Settings};
use crate::crd::{KeyRef, Manifest};
use crate::engine::manifest::{ClaimName, LoadedManifest, ManifestSpec as EngineSpec, ObjectKey, PlugSpec};
use crate::engine::typeref::TypeRef;
use crate::engine::validate::{ValidatedManifest, validate_kept};

/// A Manifest's settings, checked.
pub struct Checked {
    pub intervals: Intervals,
    /// Where its outputs are written, if it declares them.
    pub outputs: Option<OutputsTarget>,
}

/// Checks what can be checked of `obj` without reading anything.
pub fn check(obj: &Manifest) -> Result<Checked, InvalidSpec> {
    Ok(Checked { intervals: intervals(obj)?, outputs: OutputsTarget::of(obj)? })
}

/// `obj` with its `inputs` as the validated engine manifest a pass runs on, checked for what
/// this controller runs (local programs; built-ins acting in Pods).
pub fn manifest(obj: &Manifest, inputs: &Materialized, settings: &Settings) -> Result<ValidatedManifest, InvalidSpec> {
    let manifest = engine_manifest(obj, inputs, settings.plugs)?;
    check_programs(&manifest, settings.allow_local_programs)?;
    if let Some(key) = &settings.fingerprint_key {
        manifest.mask.use_fingerprint_key(key.clone());
    }
    if settings.plugs == Plugs::Volumes {
        check_builtins_in_pods(&manifest)?;
    }
    Ok(manifest)
}

/// The object as a validated engine manifest, named `namespace/name`.
pub fn engine_manifest(obj: &Manifest, inputs: &Materialized, plugs: Plugs) -> Result<ValidatedManifest, InvalidSpec> {
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
    let mut manifest = validate_kept(&loaded, vars).map_err(InvalidSpec::Manifest)?;
    manifest.name = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    Ok(manifest)
}

/// What a Manifest's manifest is called in its workspace, and so in its deployment log's
/// inventory (`ValidatedManifest::inventory_key`).
pub const MANIFEST_FILE: &str = "manifest";

/// Resource types that are local programs run code of the Manifest author's choosing inside the
/// controller: refused unless the controller was started with `--allow-local-programs`.
pub fn check_programs(manifest: &ValidatedManifest, allow_local: bool) -> Result<(), InvalidSpec> {
    let local: Vec<String> = manifest
        .resources
        .iter()
        .filter(|r| matches!(r.type_ref, TypeRef::Local(_)))
        .map(|r| format!("{} ({})", r.name, r.type_name))
        .collect();
    if local.is_empty() || allow_local {
        return Ok(());
    }
    Err(InvalidSpec::LocalPrograms(local))
}

/// What the built-ins of `manifest` need when they act in Pods, checked before anything runs:
/// a file built-in's `files` plug is a PersistentVolumeClaim it may write to (nothing else
/// outlives its Pod); `builtin/package` has no place in a cluster.
pub fn check_builtins_in_pods(manifest: &ValidatedManifest) -> Result<(), InvalidSpec> {
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
    if problems.is_empty() { Ok(()) } else { Err(InvalidSpec::BuiltinsInCluster(problems)) }
}

/// `interval` and `retryInterval`.
pub fn intervals(obj: &Manifest) -> Result<Intervals, InvalidSpec> {
    let parse = |field: &'static str, text: &str| {
        crate::engine::positive_duration(text).map_err(|why| InvalidSpec::Interval { field, why })
    };
    let check = parse("interval", &obj.spec.interval)?;
    let max = match &obj.spec.max_interval {
        None => check.saturating_mul(DEFAULT_MAX_INTERVAL_FACTOR),
        Some(text) => match parse("maxInterval", text)? {
            max if max < check => {
                return Err(InvalidSpec::MaxInterval { text: text.clone(), interval: obj.spec.interval.clone() });
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

#[cfg(test)]
mod tests {
    use super::super::inputs::tests::manifest;
    use super::*;
    use std::path::PathBuf;

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
                let InvalidSpec::BuiltinsInCluster(problems) = e else { panic!("{e}") };
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
        let e = super::super::inputs::ManifestInputError::from(InvalidSpec::ClaimNeedsPods {
            plug: "data".into(),
            claim: "pvc".into(),
        });
        assert!(e.is_invalid(), "only a change of the spec fixes it");
        let text = e.to_string();
        assert!(text.contains("plug `data`") && text.contains("`pvc`") && text.contains("executor=pod"), "{text}");
    }
}
