//! Deleting what a manifest created (the controller's `deletionPolicy: Delete`).
//!
//! Resources are deleted in reverse dependency order through their type's `delete_action` (a
//! Deployster extension of the init response), each followed by a state read that must report
//! MISSING. A resource that is not deleted — its type cannot delete, it is `readonly`, its
//! delete failed — keeps every resource it depends on: it may still use them.

use std::collections::HashMap;

use serde_json::json;

use super::config::Knowledge;
use super::error::{Cause, Phase, ResourceError};
use super::events::RunEvent;
use super::plan::{Plan, Standing};
pub use super::plan::{Removal, RemovalEntry};
use super::protocol::{ActionRequest, StateResponse, Status};
use super::resource::{read_state, run_action, state_request};
use super::run::{NotApplicable, Prepared, known_of};

/// The result of a delete pass.
#[derive(Debug, Clone)]
pub struct DeleteReport {
    pub manifest: String,
    pub entries: Vec<RemovalEntry>,
}

impl DeleteReport {
    /// Failures, and resources kept because a deletion failed.
    pub fn problems(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter_map(|e| match &e.removal {
                Removal::Failed(error) => Some(format!("{}: {error}", e.name)),
                _ => None,
            })
            .collect()
    }

    pub fn succeeded(&self) -> bool {
        self.problems().is_empty()
    }

    /// Whether a run would change anything (a planned removal).
    pub fn has_changes(&self) -> bool {
        self.entries.iter().any(|e| e.removal.is_change())
    }
}

/// Deletes every resource of `plan` (made by `prepared`), in reverse dependency order.
pub async fn delete(prepared: &Prepared, plan: &Plan) -> Result<DeleteReport, NotApplicable> {
    let all = vec![true; plan.entries.len()];
    remove_some(prepared, plan, &all, true).await
}

/// Deletes the resources of `plan` marked in `removed`, dependents first; the others are
/// declared and stay. With `run` false nothing runs: the report says what a run would do.
pub async fn remove_some(
    prepared: &Prepared,
    plan: &Plan,
    removed: &[bool],
    run: bool,
) -> Result<DeleteReport, NotApplicable> {
    prepared.check_made_here(plan)?;
    let manifest = &prepared.ctx.manifest;
    let known: Knowledge = plan.entries.iter().map(known_of).collect();
    // Resource → why it must stay, and whether for good (a dependent left in place for good).
    let mut needed: HashMap<usize, (String, bool)> = HashMap::new();
    let mut removals: Vec<Option<Removal>> = vec![None; plan.entries.len()];
    for &i in manifest.graph.topological().iter().rev().filter(|&&i| removed[i]) {
        let name = &manifest.resources[i].name;
        let started = std::time::Instant::now();
        let removal = match needed.get(&i) {
            Some((reason, true)) => Removal::Forgotten { reason: reason.clone() },
            Some((reason, false)) => Removal::Kept { reason: reason.clone() },
            None => {
                let entry = &plan.entries[i];
                remove(prepared, i, &entry.standing, entry.config.clone(), &known, run).await
            }
        };
        let passed_on = match (&removal, needed.get(&i)) {
            (Removal::Forgotten { .. } | Removal::Kept { .. } | Removal::Failed(_), Some(inherited)) => {
                Some(inherited.clone())
            }
            (Removal::Forgotten { .. }, None) => Some((format!("{name} is left in place and depends on it"), true)),
            (Removal::Kept { .. } | Removal::Failed(_), None) => {
                Some((format!("{name} depends on it and was not deleted"), false))
            }
            _ => None,
        };
        if let Some(passed_on) = passed_on {
            for &d in manifest.graph.dependencies(i) {
                needed.entry(d).or_insert_with(|| passed_on.clone());
            }
        }
        if run {
            prepared.ctx.emit(RunEvent::Settled {
                resource: name.clone(),
                label: removal.label(),
                elapsed: started.elapsed(),
                message: removal.message(),
            });
        }
        removals[i] = Some(removal);
    }
    let entries = manifest
        .resources
        .iter()
        .zip(removals)
        .filter_map(|(r, removal)| {
            Some(RemovalEntry { name: r.name.clone(), type_name: r.type_name.clone(), removal: removal? })
        })
        .collect();
    Ok(DeleteReport { manifest: manifest.name.clone(), entries })
}

async fn remove(
    prepared: &Prepared,
    i: usize,
    standing: &Standing,
    config: Option<serde_json::Value>,
    known: &Knowledge,
    run: bool,
) -> Removal {
    let kept = |reason: String| Removal::Kept { reason };
    let forgotten = |reason: &str| Removal::Forgotten { reason: reason.to_string() };
    let current = match standing {
        Standing::NeedsActions { status: Status::Missing, .. } => return Removal::Absent,
        // Read with what it depends on gone (values unknown), and what its identity names is
        // not there: gone too (say, the old one of a replacement whose namespace was deleted).
        standing if standing.to_be_created() => return Removal::Absent,
        Standing::Valid { state, .. } => state.clone(),
        Standing::NeedsActions { stale_state, .. } => stale_state.clone().unwrap_or_else(|| json!({})),
        Standing::Pending { .. } => return kept("its inputs are unknown: a dependency is not VALID".into()),
        Standing::Failed(e) => return kept(format!("its state could not be read: {e}")),
        _ => return kept("its state could not be read".into()),
    };
    if prepared.ctx.manifest.resources[i].readonly {
        return forgotten("readonly: observed, never deleted");
    }
    let Some(delete_action) = prepared.ctx.types[i].init.delete_action.clone() else {
        return forgotten("its type declares no delete_action");
    };
    if !run {
        return Removal::ToDelete;
    }
    let config = config.unwrap_or_else(|| json!({}));
    let request = state_request(&prepared.ctx, i, config, known);
    let stdin = serde_json::to_vec(&ActionRequest { state: request.clone(), stale_state: current })
        .expect("requests serialize");
    if let Err(e) = run_action(&prepared.ctx, i, "delete", &delete_action, stdin).await {
        return Removal::Failed(e);
    }
    match read_state(&prepared.ctx, i, &Phase::Verify, &request).await {
        Ok(StateResponse::NeedsActions { status: Status::Missing, .. }) => Removal::Deleted,
        Ok(other) => Removal::Failed(ResourceError::new(Phase::Verify, Cause::StillPresent(other.status()))),
        Err(e) => Removal::Failed(e),
    }
}
