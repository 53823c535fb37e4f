//! The work done for one resource: render its config from its dependencies' state, read its
//! state, run its actions, and read its state again.

use std::sync::Arc;
use std::time::Instant;

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use super::error::{Cause, Phase, ResourceError};
use super::expr::{self, PathSegment, ValuePath};
use super::init::ResourceType;
use super::protocol::{self, Action, ActionRequest, DependencyView, InitRequest, StateRequest, StateResponse, Status};
use super::run::{Approver, Context, RunEvent};
use super::validate::ValidatedManifest;
use super::vars;

/// A resource known to be VALID: its rendered config and its state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Known {
    pub config: Value,
    pub state: Value,
}

/// What has been learnt so far, indexed like the manifest's resources.
pub(crate) type Knowledge = [Option<Arc<Known>>];

/// The expression context for resource `i`: variables (top level and under `vars`), each
/// dependency alias, and `resources.<name>` for every resource it depends on. Unknown states
/// are `null` (only used when the config reads no dependency).
pub(crate) fn render_context(manifest: &ValidatedManifest, i: usize, known: &Knowledge) -> Value {
    let resource = &manifest.resources[i];
    let view = |j: usize| {
        let dep = &manifest.resources[j];
        let state = known.get(j).and_then(|k| k.as_ref()).map_or(Value::Null, |k| k.state.clone());
        json!({"name": dep.name, "type": dep.type_name, "state": state})
    };
    let Value::Object(mut ctx) = vars::context(&manifest.vars) else { unreachable!("context is a map") };
    for (alias, &j) in &resource.aliases {
        ctx.insert(alias.clone(), view(j));
    }
    let resources: Map<String, Value> = resource
        .aliases
        .values()
        .chain(&resource.implicit)
        .map(|&j| (manifest.resources[j].name.clone(), view(j)))
        .collect();
    ctx.insert("resources".to_string(), Value::Object(resources));
    Value::Object(ctx)
}

/// The `dependencies` of a request: each alias with its config, fresh state and own
/// dependencies, recursively.
fn dependency_views(manifest: &ValidatedManifest, i: usize, known: &Knowledge) -> IndexMap<String, DependencyView> {
    manifest.resources[i]
        .aliases
        .iter()
        .map(|(alias, &j)| {
            let dep = &manifest.resources[j];
            let (config, state) = match known.get(j).and_then(|k| k.as_ref()) {
                Some(k) => (k.config.clone(), k.state.clone()),
                None => (Value::Null, Value::Null),
            };
            let view = DependencyView {
                name: dep.name.clone(),
                type_name: dep.type_name.clone(),
                config,
                properties: state.clone(),
                state,
                dependencies: dependency_views(manifest, j, known),
            };
            (alias.clone(), view)
        })
        .collect()
}

/// Every schema violation, located by config path, with values masked (they may come from
/// variables).
pub(crate) fn schema_violations(schema: &jsonschema::Validator, config: &Value, prefix: &str) -> Vec<String> {
    schema
        .iter_errors(config)
        .map(|e| {
            let path = pointer_to_path(config, e.instance_path().as_str());
            format!("{}: {}", expr::full_path(prefix, &path), e.masked())
        })
        .collect()
}

/// A JSON pointer (`/a/0/b`) as a path, telling array indices from keys by the value's shape.
fn pointer_to_path(value: &Value, pointer: &str) -> ValuePath {
    let mut path = Vec::new();
    let mut cur = Some(value);
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        match (cur, token.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(n)) => {
                cur = items.get(n);
                path.push(PathSegment::Index(n));
            }
            (c, _) => {
                cur = c.and_then(|v| v.get(&token));
                path.push(PathSegment::Key(token));
            }
        }
    }
    ValuePath(path)
}

/// A resource's state as read by its state action, with the config it was read for.
pub(crate) struct Resolved {
    pub config: Value,
    pub response: StateResponse,
}

/// Why applying a resource stopped.
pub(crate) enum Stop {
    Failed(ResourceError),
    Declined,
}

impl From<ResourceError> for Stop {
    fn from(e: ResourceError) -> Self {
        Stop::Failed(e)
    }
}

impl Context {
    pub(crate) fn state_request(
        &self,
        i: usize,
        config: Value,
        known: &Knowledge,
        types: &[ResourceType],
    ) -> StateRequest {
        StateRequest {
            init: InitRequest::for_resource(&self.manifest.resources[i], self.options.verbose),
            config,
            dependencies: dependency_views(&self.manifest, i, known),
            plugs: types[i].plug_paths.clone(),
        }
    }

    /// Renders the config against the dependencies' state, checks it, and runs the state action.
    pub(crate) async fn resolve(
        &self,
        i: usize,
        known: &Knowledge,
        types: &[ResourceType],
    ) -> Result<Resolved, ResourceError> {
        let resource = &self.manifest.resources[i];
        let prefix = resource.config_prefix();
        let context = render_context(&self.manifest, i, known);
        let config = expr::render(&resource.config, &context, &prefix)
            .map_err(|e| ResourceError::new(Phase::Config, Cause::Render(e.to_string())))?;
        if let Some(schema) = &types[i].schema {
            let violations = schema_violations(schema, &config, &prefix);
            if !violations.is_empty() {
                return Err(ResourceError::new(Phase::Config, Cause::Schema(violations)));
            }
        }
        let request = self.state_request(i, config.clone(), known, types);
        let response = self.read_state(i, &Phase::State, &request, types).await?;
        Ok(Resolved { config, response })
    }

    pub(crate) async fn read_state(
        &self,
        i: usize,
        phase: &Phase,
        request: &StateRequest,
        types: &[ResourceType],
    ) -> Result<StateResponse, ResourceError> {
        let stdin = serde_json::to_vec(request).expect("requests serialize");
        let action = &types[i].init.state_action;
        let outcome = self.run_program(i, phase, action, &types[i].mounts, stdin, false).await?;
        let response = protocol::parse_state(&outcome.stdout)
            .map_err(|e| ResourceError::protocol(phase.clone(), e.problem, &outcome))?;
        self.emit(RunEvent::StateFound {
            resource: self.manifest.resources[i].name.clone(),
            status: response.status(),
            verify: *phase == Phase::Verify,
        });
        Ok(response)
    }

    /// Runs the actions in order, then reads the state again, which must now be VALID.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn apply_actions(
        &self,
        i: usize,
        config: Value,
        status: Status,
        stale_state: Option<Value>,
        actions: &[Action],
        known: &Knowledge,
        types: &[ResourceType],
        approver: &dyn Approver,
    ) -> Result<(Value, Vec<String>), Stop> {
        let name = &self.manifest.resources[i].name;
        if !approver.approve_resource(name, status, actions).await {
            return Err(Stop::Declined);
        }
        let request = self.state_request(i, config, known, types);
        let action_request =
            ActionRequest { state: request.clone(), stale_state: stale_state.unwrap_or_else(|| json!({})) };
        let stdin = serde_json::to_vec(&action_request).expect("requests serialize");
        let mut ran = Vec::new();
        for action in actions {
            let phase = Phase::Action(action.name.clone());
            if !approver.approve_action(name, action).await {
                return Err(Stop::Declined);
            }
            if let Err(e) = self.record_intent(name, &action.name).await {
                let cause = Cause::Exec { reason: "IntentNotRecorded", message: e.to_string() };
                return Err(Stop::Failed(ResourceError::new(phase, cause)));
            }
            let started = Instant::now();
            let result = self.run_program(i, &phase, &action.invocable, &types[i].mounts, stdin.clone(), true).await;
            self.emit(RunEvent::ActionFinished {
                resource: name.clone(),
                action: action.name.clone(),
                elapsed: started.elapsed(),
                error: result.as_ref().err().map(ToString::to_string),
            });
            result?;
            ran.push(action.name.clone());
        }
        match self.read_state(i, &Phase::Verify, &request, types).await? {
            StateResponse::Valid { state } => Ok((state, ran)),
            other => Err(ResourceError::new(Phase::Verify, Cause::StillNotValid(other.status())).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_user_paths() {
        let v = json!({"a": [{"b": 1}], "0": {"x/y": 2}});
        assert_eq!(pointer_to_path(&v, "/a/0/b").to_string(), "a[0].b");
        assert_eq!(pointer_to_path(&v, "/0/x~1y").to_string(), "0.x/y");
        assert_eq!(pointer_to_path(&v, "").to_string(), "");
    }

    #[test]
    fn schema_violations_are_all_reported_masked() {
        let schema = jsonschema::draft4::new(&json!({
            "type": "object",
            "properties": {"port": {"type": "integer"}, "hosts": {"type": "array", "items": {"type": "string"}}},
            "required": ["name"]
        }))
        .unwrap();
        let config = json!({"port": "s3cret", "hosts": ["a", 5]});
        let v = schema_violations(&schema, &config, "resources.r.config");
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v.iter().any(|m| m.starts_with("resources.r.config.port: ") && m.contains("integer")), "{v:?}");
        assert!(v.iter().any(|m| m.starts_with("resources.r.config.hosts[1]: ")), "{v:?}");
        assert!(v.iter().any(|m| m.starts_with("resources.r.config: ") && m.contains("name")), "{v:?}");
        assert!(!v.iter().any(|m| m.contains("s3cret")), "{v:?}");
    }
}
