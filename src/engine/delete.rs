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
use super::protocol::{ActionRequest, StateResponse, Status};
use super::resource::{read_state, state_request};
use super::run::{NotApplicable, Prepared, known_of};

/// What became of one resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Removal {
    /// Its delete action ran and it is MISSING now.
    Deleted,
    /// It did not exist.
    Absent,
    /// Left in place, and why.
    Kept {
        reason: String,
    },
    Failed(ResourceError),
}

impl Removal {
    pub fn label(&self) -> &'static str {
        match self {
            Removal::Deleted => "DELETED",
            Removal::Absent => "ABSENT",
            Removal::Kept { .. } => "KEPT",
            Removal::Failed(_) => "FAILED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct RemovalEntry {
    pub name: String,
    pub type_name: String,
    pub removal: Removal,
}

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
}

/// Deletes the resources of `plan` (made by `prepared`) in reverse dependency order.
pub async fn delete(prepared: &Prepared, plan: &Plan) -> Result<DeleteReport, NotApplicable> {
    prepared.check_made_here(plan)?;
    let manifest = &prepared.ctx.manifest;
    let known: Knowledge = plan.entries.iter().map(known_of).collect();
    // Resource → why it must stay (a dependent that was not deleted).
    let mut needed: HashMap<usize, String> = HashMap::new();
    let mut removals: Vec<Option<Removal>> = vec![None; plan.entries.len()];
    for &i in manifest.graph.topological().iter().rev() {
        let removal = match needed.get(&i) {
            Some(reason) => Removal::Kept { reason: reason.clone() },
            None => remove(prepared, i, &plan.entries[i].standing, plan.entries[i].config.clone(), &known).await,
        };
        if !matches!(removal, Removal::Deleted | Removal::Absent) {
            let reason = match needed.get(&i) {
                Some(reason) => reason.clone(),
                None => format!("{} depends on it and was not deleted", manifest.resources[i].name),
            };
            for &d in manifest.graph.dependencies(i) {
                needed.entry(d).or_insert_with(|| reason.clone());
            }
        }
        prepared.ctx.emit(RunEvent::Settled {
            resource: manifest.resources[i].name.clone(),
            label: removal.label(),
            elapsed: std::time::Duration::ZERO,
            message: match &removal {
                Removal::Kept { reason } => Some(reason.clone()),
                Removal::Failed(e) => Some(e.to_string()),
                _ => None,
            },
        });
        removals[i] = Some(removal);
    }
    let entries = manifest
        .resources
        .iter()
        .zip(removals)
        .map(|(r, removal)| RemovalEntry {
            name: r.name.clone(),
            type_name: r.type_name.clone(),
            removal: removal.expect("every resource is visited"),
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
) -> Removal {
    let kept = |reason: &str| Removal::Kept { reason: reason.to_string() };
    let current = match standing {
        Standing::NeedsActions { status: Status::Missing, .. } => return Removal::Absent,
        Standing::Valid { state, .. } => state.clone(),
        Standing::NeedsActions { stale_state, .. } => stale_state.clone().unwrap_or_else(|| json!({})),
        Standing::Pending { .. } => return kept("its inputs are unknown: a dependency is not VALID"),
        _ => return kept("its state could not be read"),
    };
    if prepared.ctx.manifest.resources[i].readonly {
        return kept("readonly: observed, never deleted");
    }
    let Some(delete_action) = prepared.ctx.types[i].init.delete_action.clone() else {
        return kept("its type declares no delete_action");
    };
    let config = config.unwrap_or_else(|| json!({}));
    let request = state_request(&prepared.ctx, i, config, known);
    let stdin = serde_json::to_vec(&ActionRequest { state: request.clone(), stale_state: current })
        .expect("requests serialize");
    let phase = Phase::Action("delete".into());
    if let Err(e) = prepared.ctx.record_intent(i, "delete").await {
        return Removal::Failed(e);
    }
    if let Err(e) = prepared.ctx.run_program(i, &phase, &delete_action, stdin, true).await {
        return Removal::Failed(e);
    }
    match read_state(&prepared.ctx, i, &Phase::Verify, &request).await {
        Ok(StateResponse::NeedsActions { status: Status::Missing, .. }) => Removal::Deleted,
        Ok(other) => Removal::Failed(ResourceError::new(Phase::Verify, Cause::StillPresent(other.status()))),
        Err(e) => Removal::Failed(e),
    }
}
