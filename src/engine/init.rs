//! The init phase: ask every resource type what it needs, then check that the manifest gives it
//! (plugs, typed dependencies, a config that matches the schema) before anything else runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use futures::future::join_all;
use indexmap::IndexMap;
use serde_json::Value;

use super::config::{ConfigSchema, Knowledge, rendered_config};
use super::context::{ResourceType, RunContext};
use super::error::{Cause, Phase, ResourceError};
use super::executor::Mount;
use super::protocol::{self, InitRequest, InitResponse, Invocable};
use super::typeref::{TypeRef, type_satisfies};
use super::validate::Resource;

/// The `workspace` a container is told. Containers do not see the manifest's directory: mounting
/// it would hand every type whatever lies beside the manifest, bypassing the plugs' allow-lists.
pub const CONTAINER_WORKSPACE: &str = "/";

/// Why a run stopped before any state was read; nothing ran after init.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// The executor cannot run this manifest's types at all (e.g. the Docker daemon is down).
    #[error("manifest {manifest}: cannot run its resource types: {message}")]
    Executor { manifest: String, reason: &'static str, message: String },
    /// What left the manifest cannot be planned for removal: nothing is changed.
    #[error("manifest {manifest}: {message}; nothing was changed")]
    Removal { manifest: String, message: String },
    /// Some resources failed init or the checks after it.
    #[error("manifest {manifest}: {}", listed(failures))]
    Resources { manifest: String, failures: Vec<(String, ResourceError)> },
}

impl PrepareError {
    /// Whether every failure is the manifest's fault (as opposed to a program's or the host's).
    pub fn is_invalid_input(&self) -> bool {
        match self {
            PrepareError::Executor { .. } => false,
            PrepareError::Removal { .. } => false,
            PrepareError::Resources { failures, .. } => failures.iter().all(|(_, e)| e.is_invalid_input()),
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            PrepareError::Executor { reason, .. } => reason,
            _ if self.is_invalid_input() => "InvalidManifest",
            PrepareError::Resources { .. } => "InitFailed",
            PrepareError::Removal { .. } => "RemovalNotPlanned",
        }
    }
}

/// "N resources failed before anything ran:", then each, indented.
fn listed(failures: &[(String, ResourceError)]) -> String {
    let n = failures.len();
    let mut text = format!("{n} resource{} failed before anything ran:", if n == 1 { "" } else { "s" });
    for (resource, error) in failures {
        text.push_str(&format!("\n  - resource `{resource}`: {}", error.to_string().replace('\n', "\n  ")));
    }
    text
}

/// The workspace path as the program sees it.
pub(crate) fn workspace_view(program: &TypeRef, host: &Path) -> String {
    if program.sees_host_paths() { host.display().to_string() } else { CONTAINER_WORKSPACE.to_string() }
}

impl InitRequest {
    pub(crate) fn for_resource(resource: &Resource, verbose: bool) -> Self {
        InitRequest {
            name: resource.name.clone(),
            type_name: resource.type_name.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            verbose,
            workspace: workspace_view(&resource.type_ref, &resource.workspace),
        }
    }
}

/// Inits every resource concurrently and checks what they need.
pub(crate) async fn init_all(ctx: &RunContext) -> Result<Vec<ResourceType>, PrepareError> {
    let programs: Vec<TypeRef> = ctx.manifest.resources.iter().map(|r| r.type_ref.clone()).collect();
    ctx.executor.preflight(&programs).await.map_err(|e| PrepareError::Executor {
        manifest: ctx.manifest.name.clone(),
        reason: e.reason(),
        message: e.to_string(),
    })?;
    let results = join_all((0..ctx.manifest.resources.len()).map(|i| init_one(ctx, i))).await;
    let mut types = Vec::with_capacity(results.len());
    let mut failures = Vec::new();
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(t) => types.push(t),
            Err(e) => failures.push((ctx.manifest.resources[i].name.clone(), e)),
        }
    }
    if failures.is_empty() {
        Ok(types)
    } else {
        Err(PrepareError::Resources { manifest: ctx.manifest.name.clone(), failures })
    }
}

async fn init_one(ctx: &RunContext, i: usize) -> Result<ResourceType, ResourceError> {
    let resource = &ctx.manifest.resources[i];
    let request = InitRequest::for_resource(resource, ctx.options.verbose);
    let stdin = serde_json::to_vec(&request).expect("requests serialize");
    let (outcome, _) = ctx.run_program(i, &Phase::Init, &Invocable::default(), stdin, false).await?;
    let init =
        protocol::parse_init(&outcome.stdout).map_err(|e| ResourceError::protocol(Phase::Init, e.problem, &outcome))?;
    let schema = match &init.config_schema {
        None => None,
        Some(schema) => {
            Some(compiled_schema(schema).map_err(|problem| ResourceError::protocol(Phase::Init, problem, &outcome))?)
        }
    };
    ctx.warn(i, &Phase::Init, init.warnings.clone());
    let mut problems = Vec::new();
    let (mounts, plug_paths) = resolve_plugs(ctx, resource, &init, &mut problems);
    check_required_resources(ctx, resource, &init, &mut problems);
    if ctx.options.replace.contains(&resource.name) && init.delete_action.is_none() {
        problems.push(
            "`--replace` names it, but its type has no `delete_action`: it cannot be deleted to be created again"
                .into(),
        );
    }
    if let Some(image) = &init.state_action.image
        && let Err(e) = TypeRef::parse(image, &resource.workspace)
    {
        problems.push(format!("state_action image: {e}"));
    }
    if !problems.is_empty() {
        return Err(ResourceError::new(Phase::Init, Cause::Unsatisfied(problems)));
    }
    let checked = ResourceType { init, schema, mounts, plug_paths };
    check_static_config(ctx, i, &checked)?;
    Ok(checked)
}

/// [`compile_schema`], once per distinct schema for the life of the process: every resource of a
/// type has the same one, and a large manifest or a controller's every pass would otherwise
/// compile it again for each (regular expressions and all).
fn compiled_schema(schema: &Value) -> Result<Arc<ConfigSchema>, String> {
    type Cache = std::sync::Mutex<HashMap<String, Arc<ConfigSchema>>>;
    /// Distinct schemas kept at most; past that the cache starts again.
    const KEPT: usize = 256;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let key = schema.to_string();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().expect("schema cache").get(&key) {
        return Ok(hit.clone());
    }
    let compiled = Arc::new(ConfigSchema { compiled: compile_schema(schema)?, source: schema.clone() });
    let mut cache = cache.lock().expect("schema cache");
    if cache.len() >= KEPT {
        cache.clear();
    }
    cache.insert(key, compiled.clone());
    Ok(compiled)
}

/// A config schema without `$schema` is Draft 4 (what existing types were written against);
/// one with `$schema` gets the draft it names.
pub(crate) fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    let declares_draft = schema.get("$schema").is_some();
    let compiled = if declares_draft { jsonschema::validator_for(schema) } else { jsonschema::draft4::new(schema) };
    compiled.map_err(|e| format!("`config_schema` is not a valid JSON Schema: {e}"))
}

fn resolve_plugs(
    ctx: &RunContext,
    resource: &Resource,
    init: &InitResponse,
    problems: &mut Vec<String>,
) -> (Vec<Mount>, IndexMap<String, String>) {
    let mut mounts = Vec::new();
    let mut paths = IndexMap::new();
    for (name, request) in &init.plugs {
        let Some(plug) = ctx.manifest.plugs.get(name).filter(|p| p.allowed_for(resource)) else {
            if !request.optional {
                problems.push(format!(
                    "requires plug `{name}`, which the manifest does not provide{}",
                    if ctx.manifest.plugs.contains_key(name) {
                        " to this resource (resource_names/resource_types)"
                    } else {
                        ""
                    }
                ));
            }
            continue;
        };
        if request.writable && plug.read_only {
            problems.push(format!("asks to write to plug `{name}`, which is read_only"));
            continue;
        }
        if plug.cluster.is_none() && !plug.path.exists() {
            problems.push(format!("plug `{name}`: {} does not exist", plug.path.display()));
            continue;
        }
        let seen = if resource.type_ref.sees_host_paths() && plug.cluster.is_none() {
            plug.path.display().to_string()
        } else {
            request.container_path.clone()
        };
        paths.insert(name.clone(), seen);
        mounts.push(Mount {
            name: name.clone(),
            host_path: plug.path.clone(),
            container_path: request.container_path.clone(),
            writable: request.writable,
            cluster: plug.cluster.clone(),
        });
    }
    (mounts, paths)
}

fn check_required_resources(ctx: &RunContext, resource: &Resource, init: &InitResponse, problems: &mut Vec<String>) {
    for (alias, expected) in &init.required_resources {
        match resource.aliases.get(alias) {
            None => problems
                .push(format!("requires a dependency `{alias}` of type `{expected}`; declare it under `dependencies`")),
            Some(&j) => {
                let dep = &ctx.manifest.resources[j];
                if !type_satisfies(&dep.type_ref, expected, &resource.workspace) {
                    problems.push(format!(
                        "dependency `{alias}` (`{}`) must be of type `{expected}`, not `{}`",
                        dep.name, dep.type_name
                    ));
                }
            }
        }
    }
}

/// Every config is rendered and checked now, before anything runs: what it reads of its
/// dependencies is not known yet, and matches anything its schema allows (a key the schema
/// does not have is a typo whatever the values).
fn check_static_config(ctx: &RunContext, i: usize, checked: &ResourceType) -> Result<(), ResourceError> {
    rendered_config(&ctx.manifest, i, &Knowledge::nothing_yet(), checked.schema.as_deref()).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_default_to_draft4_and_honour_schema_when_declared() {
        // Draft 4 spells an exclusive bound as a boolean beside `maximum`; later drafts use a
        // number. The same keyword therefore means different things in each draft.
        let draft4 = compile_schema(&json!({"maximum": 10, "exclusiveMaximum": true})).unwrap();
        assert!(!draft4.is_valid(&json!(10)), "Draft 4 applies the boolean exclusive bound");
        assert!(draft4.is_valid(&json!(9)));

        let declared = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "exclusiveMaximum": 5});
        let draft2020 = compile_schema(&declared).unwrap();
        assert!(!draft2020.is_valid(&json!(5)) && draft2020.is_valid(&json!(4)));

        // Without `$schema`, the numeric form is not Draft 4 and is rejected as a schema.
        let err = compile_schema(&json!({"exclusiveMaximum": 5})).unwrap_err();
        assert!(err.contains("not a valid JSON Schema"), "{err}");
    }
}
