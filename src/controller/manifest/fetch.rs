//! Fetch (I/O): the object ready for a pass — read as it is now, the finalizer set, its inputs
//! read (Secrets, ConfigMaps, files) and the manifest validated with them.

use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::inputs::{self, ManifestInputError};
use super::validate;
use crate::controller::config::Settings;
use crate::controller::context::Context;
use crate::crd::Manifest;
use crate::engine::validate::ValidatedManifest;

/// The finalizer that lets the controller clean up before an object goes.
pub const FINALIZER: &str = "deployster.io/cleanup";

/// Why the object could not be made ready for a pass.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("reading the Manifest: {0}")]
    Read(kube::Error),
    #[error("setting the finalizer: {0}")]
    Finalizer(kube::Error),
    #[error(transparent)]
    Inputs(#[from] ManifestInputError),
}

impl FetchError {
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::Read(_) | FetchError::Finalizer(_) => "KubernetesApi",
            FetchError::Inputs(e) => e.reason(),
        }
    }
}

fn api(ctx: &Context, obj: &Manifest) -> Api<Manifest> {
    Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default())
}

/// `cached` as the server holds it now (the watch cache's copy is pruned: `prune_for_cache`);
/// `None` when it is gone.
pub async fn current(ctx: &Context, cached: &Manifest) -> Result<Option<Manifest>, FetchError> {
    api(ctx, cached).get_opt(&cached.name_any()).await.map_err(FetchError::Read)
}

/// Adds or removes the finalizer (merge patch guarded by the resourceVersion); returns the
/// object as patched.
pub async fn set_finalizer(obj: &Manifest, ctx: &Context, present: bool) -> Result<Manifest, kube::Error> {
    let mut finalizers: Vec<String> = obj.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
    if present {
        finalizers.push(FINALIZER.to_string());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api(ctx, obj).patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
}

/// `obj` with the finalizer set: as the patch left it, when it had none.
pub async fn with_finalizer(obj: &Manifest, ctx: &Context) -> Result<Option<Manifest>, FetchError> {
    if obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(None);
    }
    set_finalizer(obj, ctx, true).await.map(Some).map_err(FetchError::Finalizer)
}

/// The object as a validated engine manifest with its plugs materialized (or handed to the
/// Pods as volumes): what a pass (or a deletion) runs on.
pub async fn prepare(
    client: &Client,
    obj: &Manifest,
    settings: &Settings,
) -> Result<(ValidatedManifest, inputs::Materialized), ManifestInputError> {
    let inputs = inputs::materialize(client, obj, &settings.plug_root, settings.plugs).await?;
    let manifest = validate::manifest(obj, &inputs, settings)?;
    Ok((manifest, inputs))
}

/// The manifest of `obj` with its inputs read (Secrets, ConfigMaps, files), its revision named
/// as the status names it.
pub async fn inputs(ctx: &Context, obj: &Manifest) -> Result<ValidatedManifest, ManifestInputError> {
    let (manifest, inputs) = prepare(&ctx.client, obj, &ctx.settings).await?;
    // The deployment log names the pass's revision as the status does.
    Ok(ValidatedManifest { revision: inputs::revision(obj, &inputs), ..manifest })
}
