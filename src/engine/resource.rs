//! The work done for one resource: render its config from its dependencies' state, read its
//! state, run its actions, and read its state again.

use std::time::Instant;

use indexmap::IndexMap;
use serde_json::{Value, json};

use super::config::{Knowledge, rendered_config};
use super::context::RunContext;
use super::error::{Cause, Phase, ResourceError};
use super::events::{Approver, RunEvent};
use super::plan::{Inputs, Ran};
use super::protocol::{
    self, Action, ActionRequest, DependencyView, InitRequest, Invocable, StateRequest, StateResponse,
};
use super::validate::ValidatedManifest;

/// How many levels of dependencies a request carries for a type that speaks the older protocol
/// revision (which sent dependencies of dependencies): at most this many. Other types get their
/// direct dependencies only, so that a request's size does not grow with the chain behind it.
pub const OLDER_REVISION_DEPTH: usize = 32;

/// The `dependencies` of a request: each alias with its config and fresh state, and — down to
/// `depth` levels in all — its own dependencies.
fn dependency_views(
    manifest: &ValidatedManifest,
    i: usize,
    known: &Knowledge,
    depth: usize,
) -> IndexMap<String, DependencyView> {
    manifest.resources[i]
        .aliases
        .iter()
        .map(|(alias, &j)| {
            let dep = &manifest.resources[j];
            let (config, state) = match known.of(j) {
                Some(k) => (k.config.clone(), k.state.clone()),
                None => (Value::Null, Value::Null),
            };
            let view = DependencyView {
                name: dep.name.clone(),
                type_name: dep.type_name.clone(),
                config,
                properties: state.clone(),
                state,
                dependencies: match depth > 1 {
                    true => dependency_views(manifest, j, known, depth - 1),
                    false => IndexMap::new(),
                },
            };
            (alias.clone(), view)
        })
        .collect()
}

/// A resource's state as read by its state action, with the config it was read for — or not
/// read (`None`), its config reading values a plan does not know yet (each
/// [`protocol::unknown`] in `config`).
pub(crate) struct Resolved {
    pub config: Value,
    pub response: Option<StateResponse>,
}

/// Why applying a resource stopped.
pub(crate) enum ApplyStopped {
    Failed(ResourceError),
    Declined,
}

impl From<ResourceError> for ApplyStopped {
    fn from(e: ResourceError) -> Self {
        ApplyStopped::Failed(e)
    }
}

pub(crate) fn state_request(ctx: &RunContext, i: usize, config: Value, known: &Knowledge) -> StateRequest {
    StateRequest {
        init: InitRequest::for_resource(&ctx.manifest.resources[i], ctx.options.verbose),
        config,
        dependencies: dependency_views(
            &ctx.manifest,
            i,
            known,
            if ctx.types[i].init.older_revision { OLDER_REVISION_DEPTH } else { 1 },
        ),
        plugs: ctx.types[i].plug_paths.clone(),
        unknown: Vec::new(),
    }
}

/// Renders the config against the dependencies' state, checks it, and runs the state action —
/// unless `may_assume` and the run takes the resource for VALID (see
/// [`RunOptions::assume_valid`](super::context::RunOptions::assume_valid)) with this very config.
pub(crate) async fn resolve(
    ctx: &RunContext,
    i: usize,
    known: &Knowledge,
    may_assume: bool,
) -> Result<Resolved, ResourceError> {
    let resource = &ctx.manifest.resources[i];
    let rendered = rendered_config(&ctx.manifest, i, known, ctx.types[i].schema.as_deref())?;
    let config = rendered.config;
    if !rendered.unknown.is_empty() {
        let response = match may_assume {
            true => missing_with_unknowns(ctx, i, &config, &rendered.unknown, known).await,
            false => None,
        };
        return Ok(Resolved { config, response });
    }
    let assumed = ctx.options.assume_valid.get(&ctx.manifest.revision, &resource.name);
    if let Some(assumed) = assumed.filter(|a| may_assume && a.renders_as(&config)) {
        return Ok(Resolved { response: Some(StateResponse::Valid { state: assumed.state() }), config });
    }
    let request = state_request(ctx, i, config.clone(), known);
    let response = read_state(ctx, i, &Phase::State, &request).await?;
    Ok(Resolved { config, response: Some(response) })
}

/// While a plan is made, resource `i`'s state read with `config` holding values not known yet
/// (at `unknown`) — when its type says it can answer so and its identity is known: only a
/// MISSING answer is taken (what it names does not exist: it will be created, whatever those
/// values are). Anything else, a failure included, is set aside: the resource waits.
async fn missing_with_unknowns(
    ctx: &RunContext,
    i: usize,
    config: &Value,
    unknown: &[super::expr::ValuePath],
    known: &Knowledge,
) -> Option<StateResponse> {
    let init = &ctx.types[i].init;
    let identity = super::identity::identity_of(&init.identity, config);
    let identified = !init.identity.is_empty()
        && identity.len() == init.identity.len()
        && identity.values().all(|v| protocol::unknown_paths(v, "").is_empty());
    if !init.state_with_unknowns || !identified {
        return None;
    }
    let mut request = state_request(ctx, i, config.clone(), known);
    request.unknown = unknown.iter().map(|p| super::expr::full_path("config", p)).collect();
    // Told as found only when taken: an answer set aside is no observation of the resource.
    match read(ctx, i, &Phase::State, &request).await {
        Ok(response @ StateResponse::NeedsActions { status: protocol::Status::Missing, .. }) => {
            found(ctx, i, &Phase::State, &request, &response);
            Some(response)
        }
        _ => None,
    }
}

pub(crate) async fn read_state(
    ctx: &RunContext,
    i: usize,
    phase: &Phase,
    request: &StateRequest,
) -> Result<StateResponse, ResourceError> {
    let response = read(ctx, i, phase, request).await?;
    found(ctx, i, phase, request, &response);
    Ok(response)
}

/// Runs resource `i`'s state action for `request`.
async fn read(
    ctx: &RunContext,
    i: usize,
    phase: &Phase,
    request: &StateRequest,
) -> Result<StateResponse, ResourceError> {
    let stdin = serde_json::to_vec(request).expect("requests serialize");
    let action = &ctx.types[i].init.state_action;
    let (outcome, _) = ctx.run_program(i, phase, action, stdin, false).await?;
    let (response, warnings) = protocol::parse_state_reply(&outcome.stdout)
        .map_err(|e| ResourceError::protocol(phase.clone(), e.problem, &outcome).masked(&ctx.manifest.mask))?;
    ctx.warn(i, phase, warnings);
    Ok(response)
}

/// Tells the observers what resource `i`'s state read for `request` found.
fn found(ctx: &RunContext, i: usize, phase: &Phase, request: &StateRequest, response: &StateResponse) {
    let inputs = Inputs::new(&ctx.manifest, i, &request.config);
    ctx.emit(RunEvent::StateFound {
        resource: ctx.manifest.resources[i].name.clone(),
        status: response.status(),
        verify: *phase == Phase::Verify,
        identity: super::identity::identity_of(&ctx.types[i].init.identity, &inputs.config),
        inputs,
    });
}

/// Runs the actions (of a resource approved as a whole) in order, then reads the state again,
/// which must now be VALID — and, where its type planned it (`planned`), what it planned.
pub(crate) async fn apply_actions(
    ctx: &RunContext,
    i: usize,
    config: Value,
    (stale_state, planned): (Option<Value>, Option<&Value>),
    actions: &[Action],
    known: &Knowledge,
    approver: &dyn Approver,
) -> Result<(Value, Vec<Ran>), ApplyStopped> {
    let name = &ctx.manifest.resources[i].name;
    let request = state_request(ctx, i, config, known);
    let action_request =
        ActionRequest { state: request.clone(), stale_state: stale_state.unwrap_or_else(|| json!({})) };
    let stdin = serde_json::to_vec(&action_request).expect("requests serialize");
    let mut ran = Vec::new();
    for action in actions {
        if !approver.approve_action(name, action).await {
            return Err(ApplyStopped::Declined);
        }
        let results = run_action(ctx, i, &action.name, &action.invocable, stdin.clone()).await?;
        ran.push(Ran { action: action.name.clone(), results });
    }
    match read_state(ctx, i, &Phase::Verify, &request).await? {
        StateResponse::Valid { state } => {
            let unlike = planned.map(|planned| super::as_found::unlike_planned(planned, &state)).unwrap_or_default();
            if !unlike.is_empty() {
                let unlike = unlike.iter().map(|d| ctx.manifest.mask.text(d)).collect();
                return Err(ResourceError::new(Phase::Verify, Cause::NotAsPlanned(unlike)).into());
            }
            Ok((state, ran))
        }
        other => Err(ResourceError::new(Phase::Verify, Cause::StillNotValid(other.status())).into()),
    }
}

/// The name of the action a plan shows for a resource `--replace` names.
pub(crate) const REPLACE: &str = "replace";

/// What a plan shows for a resource `--replace` names: its type's delete action, then what its
/// state asks for once it is deleted.
pub(crate) fn replace_action(ctx: &RunContext, i: usize) -> Action {
    Action {
        name: REPLACE.into(),
        description: "Delete it and create it again (--replace): its type's delete action, then the actions its \
                      state asks for once it is deleted"
            .into(),
        invocable: ctx.types[i].init.delete_action.clone().unwrap_or_default(),
    }
}

/// Replaces resource `i` (`--replace`): runs its type's delete action, reads its state (which
/// must no longer be VALID), then runs the actions that state asks for, and reads it again —
/// VALID now. Every action is approved as any other.
pub(crate) async fn replace(
    ctx: &RunContext,
    i: usize,
    config: Value,
    stale_state: Option<Value>,
    known: &Knowledge,
    approver: &dyn Approver,
) -> Result<(Value, Vec<Ran>), ApplyStopped> {
    let name = &ctx.manifest.resources[i].name;
    let delete = Action { name: "delete".into(), ..replace_action(ctx, i) };
    if !approver.approve_action(name, &delete).await {
        return Err(ApplyStopped::Declined);
    }
    let request = state_request(ctx, i, config.clone(), known);
    let action_request =
        ActionRequest { state: request.clone(), stale_state: stale_state.unwrap_or_else(|| json!({})) };
    let stdin = serde_json::to_vec(&action_request).expect("requests serialize");
    let results = run_action(ctx, i, &delete.name, &delete.invocable, stdin).await?;
    let deleted = Ran { action: delete.name.clone(), results };
    let (stale_state, actions) = match read_state(ctx, i, &Phase::Verify, &request).await? {
        StateResponse::NeedsActions { stale_state, actions, .. } => (stale_state, actions),
        StateResponse::Valid { .. } => {
            return Err(ResourceError::new(Phase::Verify, Cause::StillPresent(super::protocol::Status::Valid)).into());
        }
    };
    let (state, mut ran) = apply_actions(ctx, i, config, (stale_state, None), &actions, known, approver).await?;
    ran.insert(0, deleted);
    Ok((state, ran))
}

/// Runs one action of resource `i`: its intent recorded first (or it does not run), its
/// result told to the observer. Returns the result pairs its messages reported, masked.
pub(crate) async fn run_action(
    ctx: &RunContext,
    i: usize,
    action: &str,
    invocable: &Invocable,
    stdin: Vec<u8>,
) -> Result<Vec<(String, String)>, ResourceError> {
    ctx.record_intent(i, action).await?;
    let started = Instant::now();
    let phase = Phase::Action(action.to_string());
    let result = ctx.run_program(i, &phase, invocable, stdin, true).await;
    let mask = &ctx.manifest.mask;
    // A failure's results too: what a script reported before it failed is worth as much.
    let reported = match &result {
        Ok((_, results)) => results,
        Err(error) => &error.results,
    };
    let results: Vec<(String, String)> = reported.iter().map(|(k, v)| (k.clone(), mask.text(v))).collect();
    ctx.emit(RunEvent::ActionFinished {
        resource: ctx.manifest.resources[i].name.clone(),
        action: action.to_string(),
        elapsed: started.elapsed(),
        error: result.as_ref().err().map(ToString::to_string),
        results: results.clone(),
    });
    result.map(|_| results)
}
