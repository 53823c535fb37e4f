//! A Manifest's outputs in the cluster: a Secret (or a ConfigMap) owned by the Manifest —
//! created on the first successful pass, replaced only when a value changes, gone with the
//! Manifest (garbage collection through its ownerReference). The values never reach the
//! status, events or logs.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;

use super::invalid::InvalidSpec;
use crate::controller::context::Context;
use crate::crd::Manifest;

/// Where outputs are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputsTarget {
    Secret(String),
    ConfigMap(String),
}

impl OutputsTarget {
    /// The Manifest's outputs target; `None` when it declares no outputs.
    pub fn of(obj: &Manifest) -> Result<Option<OutputsTarget>, InvalidSpec> {
        let Some(outputs) = obj.spec.outputs.as_ref().filter(|o| !o.values.is_empty()) else { return Ok(None) };
        match (&outputs.secret_name, &outputs.config_map_name) {
            (Some(_), Some(_)) => Err(InvalidSpec::OutputsTarget),
            (_, Some(name)) => Ok(Some(OutputsTarget::ConfigMap(name.clone()))),
            (Some(name), None) => Ok(Some(OutputsTarget::Secret(name.clone()))),
            (None, None) => Ok(Some(OutputsTarget::Secret(format!("{}-outputs", obj.name_any())))),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            OutputsTarget::Secret(name) => format!("Secret `{name}`"),
            OutputsTarget::ConfigMap(name) => format!("ConfigMap `{name}`"),
        }
    }
}

/// What writing the outputs did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
    Updated,
    Unchanged,
}

#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    #[error("{0} exists and is not owned by this Manifest: refusing to overwrite it")]
    NotOwned(String),
    #[error("cannot write the outputs to {target}: {source}")]
    Kube { target: String, source: kube::Error },
}

/// A value as the text a Secret or ConfigMap key holds: strings as they are, anything else as
/// JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A Secret or a ConfigMap, as far as writing outputs goes.
trait Holder:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Default
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
{
    type Data: PartialEq;
    fn data(&self) -> Option<&Self::Data>;
    fn set_data(&mut self, data: Self::Data);
}

impl Holder for Secret {
    type Data = BTreeMap<String, ByteString>;
    fn data(&self) -> Option<&Self::Data> {
        self.data.as_ref()
    }
    fn set_data(&mut self, data: Self::Data) {
        self.data = Some(data);
        self.string_data = None;
    }
}

impl Holder for ConfigMap {
    type Data = BTreeMap<String, String>;
    fn data(&self) -> Option<&Self::Data> {
        self.data.as_ref()
    }
    fn set_data(&mut self, data: Self::Data) {
        self.data = Some(data);
    }
}

/// Creates `name` holding `data`, owned by `obj`; or replaces the data of the one `obj` owns
/// when it differs.
async fn upsert<K: Holder>(
    api: Api<K>,
    obj: &Manifest,
    target: &OutputsTarget,
    name: &str,
    data: K::Data,
) -> Result<Written, OutputsError> {
    let failed = |source| OutputsError::Kube { target: target.describe(), source };
    match api.get_opt(name).await.map_err(failed)? {
        None => {
            let mut new = K::default();
            new.meta_mut().name = Some(name.to_string());
            new.meta_mut().owner_references = obj.controller_owner_ref(&()).map(|o| vec![o]);
            new.set_data(data);
            api.create(&PostParams::default(), &new).await.map_err(failed)?;
            Ok(Written::Created)
        }
        Some(existing) if !existing.owner_references().iter().any(|o| Some(&o.uid) == obj.meta().uid.as_ref()) => {
            Err(OutputsError::NotOwned(target.describe()))
        }
        Some(existing) if existing.data() == Some(&data) => Ok(Written::Unchanged),
        Some(mut existing) => {
            existing.set_data(data);
            api.replace(name, &PostParams::default(), &existing).await.map_err(failed)?;
            Ok(Written::Updated)
        }
    }
}

/// Writes `values` (an object) to `target`, unless it already holds them.
pub async fn write(
    ctx: &Context,
    obj: &Manifest,
    target: &OutputsTarget,
    values: &Value,
) -> Result<Written, OutputsError> {
    let namespace = obj.namespace().unwrap_or_default();
    let data: BTreeMap<String, String> =
        values.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), as_text(v))).collect();
    match target {
        OutputsTarget::Secret(name) => {
            let bytes = data.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect();
            upsert(Api::<Secret>::namespaced(ctx.client.clone(), &namespace), obj, target, name, bytes).await
        }
        OutputsTarget::ConfigMap(name) => {
            upsert(Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace), obj, target, name, data).await
        }
    }
}
