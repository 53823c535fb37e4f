//! What a run tells the world, and asks of it: its events, the observers that receive them
//! (progress, the deployment log, a controller's status) and the approver that decides what
//! may run. No logic: the bottom of the engine's modules.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::error::Phase;
use super::executor::Stream;
use super::plan::{Change, Drift, Inputs, Plan, TypeWarning};
use super::protocol::{Action, Status};

/// Something that happened during a run, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A program is about to run for a resource.
    Invoking { resource: String, phase: Phase },
    /// A line a program printed (actions always; init and state only when verbose).
    Output { resource: String, phase: Phase, stream: Stream, line: String },
    /// A state action answered; `verify` when it ran after the actions.
    StateFound {
        resource: String,
        status: Status,
        verify: bool,
        /// What the state was read for.
        inputs: Inputs,
        /// Which thing it read: its type's identity fields, as `inputs` shows them.
        identity: super::identity::IdentityFields,
    },
    /// A type warned the user.
    Warned(TypeWarning),
    /// A running action reported its progress, in percent.
    Progress { resource: String, phase: Phase, percent: f64 },
    ActionFinished {
        resource: String,
        action: String,
        elapsed: Duration,
        error: Option<String>,
        /// The `result` pairs its messages reported (sensitive values masked).
        results: Vec<(String, String)>,
    },
    /// A resource reached its final state for this plan or apply. `label` is what the plan or
    /// report shows (VALID, STALE, APPLIED, FAILED…).
    Settled { resource: String, label: &'static str, elapsed: Duration, message: Option<String> },
    /// A run that never recorded its end was found and dealt with (see `pass::recover`).
    Recovered { description: String },
    /// The manifest's outputs, rendered once every resource is VALID (sensitive values
    /// masked), or why they could not be.
    Outputs(Result<serde_json::Value, String>),
    /// The pass began.
    Started,
    /// The pass ended.
    Ended(Ending),
}

/// What a pass does once it has planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nothing: it changes nothing (in the log, a plan is not a run).
    Plan,
    /// Applies the plan, once approved.
    Apply,
    /// Deletes the manifest's resources, dependents first.
    Delete,
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A plan (which changes nothing) is complete.
    Planned,
    /// Every resource is VALID.
    Succeeded,
    /// Something failed, and why.
    Failed(String),
    /// The plan was not approved: nothing changed.
    Declined(String),
    /// Stopped from outside (a signal, shutdown, a lost lease), and why.
    Interrupted(String),
}

/// Why an action's intent could not be made durable. The action does not run: after a crash,
/// nobody could tell it had started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("its intent could not be recorded before it ran, so it did not run: {0}")]
pub struct IntentError(pub String);

/// Receives run events (progress display, deployment log, controller status).
#[async_trait]
pub trait Observer: Send + Sync {
    fn on_event(&self, event: &RunEvent);

    /// `action` of `resource` is about to run: return once its intent is durable wherever this
    /// observer keeps a record. An error stops the action (fail closed).
    async fn on_intent(&self, _resource: &str, _action: &str) -> Result<(), IntentError> {
        Ok(())
    }

    /// The plan is complete (before anything is applied), with what the log says of it: the
    /// drift, and the changes since each resource was last VALID.
    fn on_planned(&self, _plan: &Plan, _drifts: &[Drift], _changes: &[Change]) {}
}

/// Sends every event to each observer in turn.
pub struct Observers(pub Vec<Arc<dyn Observer>>);

#[async_trait]
impl Observer for Observers {
    fn on_event(&self, event: &RunEvent) {
        for observer in &self.0 {
            observer.on_event(event);
        }
    }

    /// In order, stopping at the first that cannot record the intent.
    async fn on_intent(&self, resource: &str, action: &str) -> Result<(), IntentError> {
        for observer in &self.0 {
            observer.on_intent(resource, action).await?;
        }
        Ok(())
    }

    fn on_planned(&self, plan: &Plan, drifts: &[Drift], changes: &[Change]) {
        for observer in &self.0 {
            observer.on_planned(plan, drifts, changes);
        }
    }
}

/// Ignores every event.
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _: &RunEvent) {}
}

/// Whether an approved plan is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Apply,
    /// Not applied: the user said no.
    Decline(String),
    /// Not applied: no decision could be had (no terminal to ask on), a usage error.
    Refuse(String),
}

/// Decides whether a plan is applied, then whether each resource's and each action's run.
#[async_trait]
pub trait Approver: Send + Sync {
    /// A plan with something to apply; called once, before anything runs.
    async fn approve_plan(&self, _plan: &Plan) -> Decision {
        Decision::Apply
    }
    async fn approve_resource(&self, resource: &str, status: Status, actions: &[Action]) -> bool;
    async fn approve_action(&self, resource: &str, action: &Action) -> bool;
}

/// Approves everything (the plan was approved as a whole, or not at all).
pub struct ApproveAll;

#[async_trait]
impl Approver for ApproveAll {
    async fn approve_resource(&self, _: &str, _: Status, _: &[Action]) -> bool {
        true
    }
    async fn approve_action(&self, _: &str, _: &Action) -> bool {
        true
    }
}
