//! A Manifest's outputs in the cluster: a Secret (or a ConfigMap) owned by the Manifest —
//! created on the first successful pass, replaced only when a value changes, gone with the
//! Manifest (garbage collection through its ownerReference). The values never reach the
//! status, events or logs.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;

use super::Context;
use super::inputs::InputError;
use crate::crd::Manifest;

/// Where outputs are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Secret(String),
    ConfigMap(String),
}

impl Target {
    /// The Manifest's outputs target; `None` when it declares no outputs.
    pub fn of(obj: &Manifest) -> Result<Option<Target>, InputError> {
        let Some(outputs) = obj.spec.outputs.as_ref().filter(|o| !o.values.is_empty()) else { return Ok(None) };
        match (&outputs.secret_name, &outputs.config_map_name) {
            (Some(_), Some(_)) => Err(InputError::OutputsTarget),
            (_, Some(name)) => Ok(Some(Target::ConfigMap(name.clone()))),
            (Some(name), None) => Ok(Some(Target::Secret(name.clone()))),
            (None, None) => Ok(Some(Target::Secret(format!("{}-outputs", obj.name_any())))),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Target::Secret(name) => format!("Secret `{name}`"),
            Target::ConfigMap(name) => format!("ConfigMap `{name}`"),
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

/// Writes `values` (an object) to `target`, unless it already holds them.
pub async fn write(ctx: &Context, obj: &Manifest, target: &Target, values: &Value) -> Result<Written, OutputsError> {
    let namespace = obj.namespace().unwrap_or_default();
    let data: BTreeMap<String, String> =
        values.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), as_text(v))).collect();
    let owner = obj.controller_owner_ref(&());
    let owned =
        |meta: &ObjectMeta| meta.owner_references.iter().flatten().any(|o| Some(&o.uid) == obj.meta().uid.as_ref());
    let failed = |source| OutputsError::Kube { target: target.describe(), source };
    match target {
        Target::Secret(name) => {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            let bytes: BTreeMap<String, ByteString> =
                data.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect();
            match api.get_opt(name).await.map_err(failed)? {
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            owner_references: owner.map(|o| vec![o]),
                            ..Default::default()
                        },
                        data: Some(bytes),
                        ..Default::default()
                    };
                    api.create(&PostParams::default(), &secret).await.map_err(failed)?;
                    Ok(Written::Created)
                }
                Some(existing) if !owned(&existing.metadata) => Err(OutputsError::NotOwned(target.describe())),
                Some(existing) if existing.data.as_ref() == Some(&bytes) => Ok(Written::Unchanged),
                Some(mut existing) => {
                    existing.data = Some(bytes);
                    existing.string_data = None;
                    api.replace(name, &PostParams::default(), &existing).await.map_err(failed)?;
                    Ok(Written::Updated)
                }
            }
        }
        Target::ConfigMap(name) => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
            match api.get_opt(name).await.map_err(failed)? {
                None => {
                    let map = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            owner_references: owner.map(|o| vec![o]),
                            ..Default::default()
                        },
                        data: Some(data),
                        ..Default::default()
                    };
                    api.create(&PostParams::default(), &map).await.map_err(failed)?;
                    Ok(Written::Created)
                }
                Some(existing) if !owned(&existing.metadata) => Err(OutputsError::NotOwned(target.describe())),
                Some(existing) if existing.data.as_ref() == Some(&data) => Ok(Written::Unchanged),
                Some(mut existing) => {
                    existing.data = Some(data);
                    api.replace(name, &PostParams::default(), &existing).await.map_err(failed)?;
                    Ok(Written::Updated)
                }
            }
        }
    }
}
