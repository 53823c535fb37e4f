//! Complete plans: a resource waiting on a dependency that is not VALID yet is still read by the
//! plan when that dependency's state is known as found (STALE, with the state its type reported,
//! before its actions run). The plan then shows what the resource is now — its drift, its
//! change, its actions — and marks as unknown only the values those actions may still change.
//! Apply holds to it: a resource so read runs no action the plan did not show (see
//! [`unshown`]).
//!
//! What a dependency's actions may change is judged from its type's own words: a field of its
//! state equal to the same field of its config is taken as what the actions keep (they make the
//! state match the config); any other field, and the whole of a state not read yet, may change.

use std::sync::Arc;

use serde_json::Value;

use super::config::Known;
use super::error::{Cause, Phase, ResourceError};
use super::expr;
use super::plan::{Inputs, ResourceEntry, Standing, UnknownInput, Waiting};
use super::protocol::{Action, StateResponse, Status, cut_to, is_unknown, unknown_paths};
use super::validate::ValidatedManifest;

/// What `entry` tells its dependents while the plan reads as found: a VALID resource's state;
/// the state its type plans it to have once its actions ran; else a STALE one's state before
/// its actions.
pub(crate) fn known(entry: &ResourceEntry) -> Option<Arc<Known>> {
    let (state, planned) = match &entry.standing {
        Standing::Valid { state, .. } => (state, false),
        Standing::NeedsActions { planned_state: Some(state), .. } => (state, true),
        Standing::NeedsActions { status: Status::Stale, stale_state: Some(state), .. } => (state, false),
        _ => return None,
    };
    Some(Arc::new(Known { config: entry.config.clone()?, state: state.clone(), planned }))
}

/// Resource `i` as the plan leaves it when it waits on a dependency, every dependency's
/// standing in `entries` being final already (call in topological order): what it waits on,
/// what it was `found` to be when read with its dependencies as found (if it could be), and the
/// config values that read what may still change — for a resource not read, every value that
/// reads a dependency that is not VALID.
pub(crate) fn pending(
    manifest: &ValidatedManifest,
    i: usize,
    entries: &[ResourceEntry],
    found: Option<StateResponse>,
) -> Standing {
    let resource = &manifest.resources[i];
    let not_valid: Vec<usize> = manifest
        .graph
        .dependencies(i)
        .iter()
        .copied()
        .filter(|&d| !matches!(entries[d].standing, Standing::Valid { .. }))
        .collect();
    let waiting_on = not_valid
        .iter()
        .map(|&d| Waiting { resource: entries[d].name.clone(), status: entries[d].standing.label().to_string() })
        .collect();
    let reads_unknown = |reference: &str| {
        let (root, rest) = reference.split_once('.').unwrap_or((reference, ""));
        let (target, rest) = match root {
            "resources" => {
                let (name, rest) = rest.split_once('.').unwrap_or((rest, ""));
                (manifest.index_of(name), rest)
            }
            alias => (resource.aliases.get(alias).copied(), rest),
        };
        target.is_some_and(|t| unknown(&entries[t], rest, found.is_some()))
    };
    let unknown_inputs = resource
        .config
        .sites
        .iter()
        .filter(|site| site.references.iter().any(|r| reads_unknown(r)))
        .map(|site| UnknownInput { path: expr::full_path("config", &site.path), expression: site.source.clone() })
        .collect();
    Standing::Pending { waiting_on, unknown_inputs, found: found.map(Box::new) }
}

/// Whether what a dependent reads at `rest` of `dependency`'s view (`state.path`, `name`) may
/// differ once the plan is applied. `read`: the dependent was read with the views as found;
/// otherwise whatever it reads of a dependency that is not VALID is unknown — but for what
/// the dependency's planned state says.
fn unknown(dependency: &ResourceEntry, rest: &str, read: bool) -> bool {
    let field = match rest {
        "" => "",
        _ => match rest.strip_prefix("state") {
            Some(field) if field.is_empty() || field.starts_with('.') => field,
            // Its name or its type: known from the manifest.
            _ => return false,
        },
    };
    let planned = match &dependency.standing {
        Standing::NeedsActions { planned_state: Some(planned), .. } => Some(planned),
        Standing::Pending { found: Some(found), unknown_inputs, .. } if unknown_inputs.is_empty() => {
            match found.as_ref() {
                StateResponse::NeedsActions { planned_state: Some(planned), .. } => Some(planned),
                _ => None,
            }
        }
        _ => None,
    };
    if let Some(planned) = planned {
        let at = field.split('.').filter(|k| !k.is_empty()).try_fold(planned, |v, k| match is_unknown(v) {
            true => None,
            false => v.get(k),
        });
        return at.is_none_or(|v| !unknown_paths(v, "").is_empty());
    }
    if !read {
        return !matches!(dependency.standing, Standing::Valid { .. });
    }
    let as_found = match &dependency.standing {
        Standing::Valid { .. } => return false,
        Standing::NeedsActions { status: Status::Stale, stale_state: Some(state), .. } => state,
        Standing::Pending { found: Some(found), unknown_inputs, .. } if unknown_inputs.is_empty() => {
            match found.as_ref() {
                // Read with nothing unknown and found VALID: nothing of it changes.
                StateResponse::Valid { .. } => return false,
                StateResponse::NeedsActions { status: Status::Stale, stale_state: Some(state), .. } => state,
                StateResponse::NeedsActions { .. } => return true,
            }
        }
        _ => return true,
    };
    let Some(config) = &dependency.config else { return true };
    let at = |value: &Value| field.split('.').filter(|k| !k.is_empty()).try_fold(value, |v, k| v.get(k)).cloned();
    match (at(as_found), at(config)) {
        (Some(state), Some(wanted)) => state != wanted,
        _ => true,
    }
}

/// What applying may not do to resource `i`, which the plan read with its dependencies as
/// found and with nothing it read expected to change (`planned`, with `planned_config`): run
/// an action the plan did not show, or run any with a config other than the one the plan
/// showed. `None`: the `actions` it needs now, with `config`, are what the plan showed.
pub(crate) fn unshown(
    manifest: &ValidatedManifest,
    i: usize,
    (planned, planned_config): (&StateResponse, &Value),
    waiting_on: &[Waiting],
    config: &Value,
    actions: &[Action],
) -> Option<ResourceError> {
    let shown: Vec<&str> = match planned {
        StateResponse::Valid { .. } => Vec::new(),
        StateResponse::NeedsActions { actions, .. } => actions.iter().map(|a| a.name.as_str()).collect(),
    };
    let extra: Vec<&str> = actions.iter().map(|a| a.name.as_str()).filter(|a| !shown.contains(a)).collect();
    let changed = (planned_config != config)
        .then(|| Inputs::new(manifest, i, planned_config).differences(&Inputs::new(manifest, i, config)));
    if extra.is_empty() && changed.is_none() {
        return None;
    }
    let before: Vec<&str> = waiting_on.iter().map(|w| w.resource.as_str()).collect();
    let shown = match planned {
        StateResponse::Valid { .. } => "VALID, with no action".to_string(),
        StateResponse::NeedsActions { status, .. } => format!("{status}, with {}", shown.join(", ")),
    };
    let mut now = format!("it needs {}", actions.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", "));
    if let Some(differences) = changed {
        let listed: Vec<String> = differences
            .iter()
            .map(|d| {
                let value = |v: Option<&Value>| v.map_or_else(|| "(absent)".to_string(), Value::to_string);
                format!("{}: {} → {}", d.path, value(d.was.as_ref()), value(d.now.as_ref()))
            })
            .collect();
        now.push_str(&format!(" with another config ({})", listed.join("; ")));
    }
    let shown = format!("read before {}'s actions, it was {shown}", before.join(", "));
    Some(ResourceError::new(Phase::State, Cause::NotInPlan { shown, now }))
}

/// Where `state`, after the actions, differs from the known values of the state its type
/// `planned`: `path: planned → now`, each. A value planned unknown may become anything.
pub(crate) fn unlike_planned(planned: &Value, state: &Value) -> Vec<String> {
    fn walk(planned: &Value, state: Option<&Value>, at: &str, found: &mut Vec<String>) {
        match (planned, state) {
            (p, _) if is_unknown(p) => {}
            (Value::Object(p), Some(Value::Object(s))) => {
                for (key, value) in p {
                    walk(value, s.get(key), &format!("{at}.{key}"), found);
                }
            }
            (Value::Array(p), Some(Value::Array(s))) if p.len() == s.len() => {
                for (i, (value, now)) in p.iter().zip(s).enumerate() {
                    walk(value, Some(now), &format!("{at}[{i}]"), found);
                }
            }
            (p, s) if s == Some(p) => {}
            (p, s) => {
                let now = s.map_or_else(|| "(absent)".to_string(), |s| cut_to(&s.to_string(), 80));
                found.push(format!("{at}: {} → {now}", cut_to(&p.to_string(), 80)));
            }
        }
    }
    let mut found = Vec::new();
    walk(planned, Some(state), "state", &mut found);
    found
}

#[cfg(test)]
#[path = "as_found_tests.rs"]
mod tests;
