//! Compile: the Pipeline's spec as a checked pipeline whose targets and tests name Manifests of
//! its namespace, and the revision its vars make. The names are read from the controller's
//! watch cache once it has synced (else from the API); the rest is pure.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::PipelineContext;
use super::log::ConfigMapLog;
use crate::crd::Manifest;
use crate::crd::pipeline::Pipeline;
use crate::history::History;
use crate::pipeline::PipelineError;
use crate::pipeline::SpecError;
use crate::pipeline::drive::Driver;
use crate::pipeline::spec::{self, Manifests, TargetSpec};

/// A Pipeline's spec, compiled: the pipeline, the vars of its revision, and the revision.
pub struct Compiled {
    pub pipeline: spec::Pipeline,
    pub vars: Map<String, Value>,
    pub revision: String,
}

impl Compiled {
    /// A driver of the pipeline over `log`, on the controller's clock, saying progress with `say`.
    pub fn driver<'a>(
        &'a self,
        log: &Arc<ConfigMapLog>,
        ctx: &'a PipelineContext,
        say: &'a (dyn Fn(&str) + Sync),
        cancel: CancellationToken,
    ) -> Driver<'a> {
        Driver {
            pipeline: &self.pipeline,
            log: log.clone() as Arc<dyn History>,
            runner: None,
            now: &*ctx.clock,
            state_dir: PathBuf::new(),
            say,
            cancel,
        }
    }
}

/// Why a Pipeline's spec could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum Uncompiled {
    /// Its spec is wrong (Stalled until it changes), or names a Manifest not there (waited for).
    #[error("Pipeline {namespace}/{name}: {source}")]
    Spec { namespace: String, name: String, source: SpecError },
    /// Its revision does not render from its vars.
    #[error(transparent)]
    Revision(PipelineError),
    /// The names of the namespace's Manifests could not be listed: tried again.
    #[error("listing the Manifests of namespace {namespace}: {source}")]
    Unlisted { namespace: String, source: kube::Error },
}

impl Uncompiled {
    /// A target's or test's Manifest is not there (yet): creating it is the fix.
    pub fn is_missing_manifest(&self) -> bool {
        matches!(self, Uncompiled::Spec { source, .. } if source.is_missing_manifest())
    }
}

/// Compiles `object`'s spec against the Manifests of its namespace.
pub async fn compile(object: &Pipeline, ctx: &PipelineContext) -> Result<Compiled, Uncompiled> {
    let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
    let names = manifest_names(ctx, &namespace)
        .await
        .map_err(|source| Uncompiled::Unlisted { namespace: namespace.clone(), source })?;
    let resolver = ManifestObjects { namespace: namespace.clone(), names };
    let pipeline = spec::compile(&name, &object.spec.pipeline, &resolver).map_err(|source| Uncompiled::Spec {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    })?;
    let vars: Map<String, Value> = pipeline.vars.clone().into_iter().collect();
    let revision = pipeline.revision_of(&vars).map_err(Uncompiled::Revision)?;
    Ok(Compiled { pipeline, vars, revision })
}

/// The names of the Manifests in `namespace`: from the controller's watch cache of it once
/// that has synced (a reconcile asks the API nothing for them), else from the API. Never waits
/// for the cache (see `ManifestCache`).
async fn manifest_names(ctx: &PipelineContext, namespace: &str) -> Result<HashSet<String>, kube::Error> {
    if let Some(cache) = ctx.cache_of(namespace)
        && *cache.synced.borrow()
    {
        let refs = cache.store.state().iter().map(|m| ObjectRef::from_obj(&**m)).collect::<Vec<_>>();
        return Ok(refs.into_iter().filter(|r| r.namespace.as_deref() == Some(namespace)).map(|r| r.name).collect());
    }
    let manifests: Api<Manifest> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(manifests.list_metadata(&ListParams::default()).await?.items.iter().map(ResourceExt::name_any).collect())
}

/// The Manifests of a namespace, as a pipeline's targets and tests name them: a template over
/// `pipeline.stage`, `pipeline.target` and the target's vars.
struct ManifestObjects {
    namespace: String,
    names: HashSet<String>,
}

impl Manifests for ManifestObjects {
    fn resolve(&self, written: &Path, stage: &str, target: &TargetSpec, what: &str) -> Result<PathBuf, SpecError> {
        let mut vars = target.vars.clone();
        vars.insert("pipeline".into(), json!({"stage": stage, "target": target.name}));
        let written = written.to_string_lossy();
        let name = minijinja::Environment::new().render_str(&written, minijinja::value::Serde(&vars)).map_err(|e| {
            SpecError::ManifestTemplate { at: what.to_string(), written: written.to_string(), why: e.to_string() }
        })?;
        if !self.names.contains(&name) {
            return Err(SpecError::ManifestMissing { at: what.to_string(), namespace: self.namespace.clone(), name });
        }
        Ok(PathBuf::from(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_manifests_of_the_namespace_by_template() {
        let names = ["app-stg".to_string(), "smoke".to_string()].into();
        let objects = ManifestObjects { namespace: "ns".into(), names };
        let target = TargetSpec { name: "stg".into(), manifest: "app-{{ pipeline.target }}".into(), vars: Map::new() };
        let written = Path::new("app-{{ pipeline.target }}");
        assert_eq!(objects.resolve(written, "staging", &target, "t"), Ok(PathBuf::from("app-stg")));
        let missing =
            objects.resolve(Path::new("app-{{ pipeline.stage }}"), "staging", &target, "stage `s`, target `stg`");
        let missing = missing.unwrap_err();
        assert_eq!(missing.to_string(), "stage `s`, target `stg`: there is no Manifest ns/app-staging");
        // Only a name naming nothing is missing (waited for); a bad template is not.
        assert!(missing.is_missing_manifest());
        let bad = objects.resolve(Path::new("app-{{ "), "staging", &target, "t").unwrap_err();
        assert!(bad.to_string().starts_with("t: manifest `app-{{ `:"), "{bad}");
        assert!(!bad.is_missing_manifest());
    }
}
