//! What a plan found and what an apply did.
//!
//! [`Plan`] is produced by [`crate::engine::run::Prepared::plan`] without running any action;
//! [`Report`] only by [`crate::engine::run::Prepared::apply`], from executed results — its
//! fields are private so that nothing else can fabricate one.

use std::time::Duration;

use serde_json::Value;

use super::error::ResourceError;
use super::expr;
use super::protocol::{Action, Status};
use super::validate::ValidatedManifest;

/// A resource that was VALID at its previous observation (in the deployment log) and is not now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub resource: String,
    pub now: Status,
}

/// A dependency a pending resource waits on, and how it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub resource: String,
    /// `STALE`, `MISSING` or `PENDING`.
    pub status: String,
}

/// A config value that cannot be known until a dependency is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownInput {
    /// Path inside the config, e.g. `config.path`.
    pub path: String,
    /// The template that reads the unknown value.
    pub expression: String,
}

/// What the plan found for one resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Planned {
    Valid {
        state: Value,
    },
    NeedsActions {
        status: Status,
        stale_state: Option<Value>,
        actions: Vec<Action>,
    },
    /// A dependency is not VALID yet, so this resource cannot be resolved before apply.
    Pending {
        waiting_on: Vec<Waiting>,
        unknown_inputs: Vec<UnknownInput>,
    },
    Failed(ResourceError),
    /// A dependency (`by`, the root cause) failed.
    Blocked {
        by: String,
    },
}

impl Planned {
    /// The word shown for this entry.
    pub fn label(&self) -> &'static str {
        match self {
            Planned::Valid { .. } => "VALID",
            Planned::NeedsActions { status: Status::Missing, .. } => "MISSING",
            Planned::NeedsActions { .. } => "STALE",
            Planned::Pending { .. } => "PENDING",
            Planned::Failed(_) => "FAILED",
            Planned::Blocked { .. } => "BLOCKED",
        }
    }
}

/// One resource in a plan.
#[derive(Debug, Clone)]
pub struct PlanEntry {
    pub name: String,
    pub type_name: String,
    pub planned: Planned,
    pub elapsed: Duration,
    /// The rendered config the state action saw; kept for apply, never shown (it may hold
    /// values of variables, which carry credentials).
    pub(crate) config: Option<Value>,
}

/// The result of planning a manifest.
#[derive(Debug, Clone)]
pub struct Plan {
    pub manifest: String,
    pub run_id: String,
    pub entries: Vec<PlanEntry>,
}

/// How many entries of a plan or report are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub valid: usize,
    pub to_apply: usize,
    pub pending: usize,
    pub applied: usize,
    pub failed: usize,
    pub blocked: usize,
    pub declined: usize,
}

impl Plan {
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for e in &self.entries {
            match e.planned {
                Planned::Valid { .. } => c.valid += 1,
                Planned::NeedsActions { .. } => c.to_apply += 1,
                Planned::Pending { .. } => c.pending += 1,
                Planned::Failed(_) => c.failed += 1,
                Planned::Blocked { .. } => c.blocked += 1,
            }
        }
        c
    }

    /// Whether applying would do anything.
    pub fn has_changes(&self) -> bool {
        let c = self.counts();
        c.to_apply + c.pending > 0
    }

    /// Whether the plan is sound enough to apply: nothing failed or blocked.
    pub fn is_applicable(&self) -> bool {
        let c = self.counts();
        c.failed + c.blocked == 0
    }
}

/// What apply did to one resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Already VALID; nothing ran.
    Unchanged {
        state: Value,
    },
    /// Actions ran and the resource is now VALID.
    Applied {
        state: Value,
        actions: Vec<String>,
    },
    Failed(ResourceError),
    /// Never ran because `by` (the root cause) failed or was declined.
    Blocked {
        by: String,
    },
    /// The user declined its actions.
    Declined,
    /// The run was cancelled before the resource could start.
    Cancelled,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Unchanged { .. } => "VALID",
            Outcome::Applied { .. } => "APPLIED",
            Outcome::Failed(_) => "FAILED",
            Outcome::Blocked { .. } => "BLOCKED",
            Outcome::Declined => "DECLINED",
            Outcome::Cancelled => "CANCELLED",
        }
    }

    pub fn state(&self) -> Option<&Value> {
        match self {
            Outcome::Unchanged { state } | Outcome::Applied { state, .. } => Some(state),
            _ => None,
        }
    }
}

/// One resource in a report.
#[derive(Debug, Clone)]
pub struct ReportEntry {
    pub name: String,
    pub type_name: String,
    pub outcome: Outcome,
    pub elapsed: Duration,
}

/// The result of applying a plan. Built only by the engine from executed results.
#[derive(Debug, Clone)]
pub struct Report {
    manifest: String,
    run_id: String,
    entries: Vec<ReportEntry>,
}

impl Report {
    pub(crate) fn new(manifest: String, run_id: String, entries: Vec<ReportEntry>) -> Self {
        Self { manifest, run_id, entries }
    }

    pub fn manifest(&self) -> &str {
        &self.manifest
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn entries(&self) -> &[ReportEntry] {
        &self.entries
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for e in &self.entries {
            match e.outcome {
                Outcome::Unchanged { .. } => c.valid += 1,
                Outcome::Applied { .. } => c.applied += 1,
                Outcome::Failed(_) => c.failed += 1,
                Outcome::Blocked { .. } => c.blocked += 1,
                Outcome::Declined | Outcome::Cancelled => c.declined += 1,
            }
        }
        c
    }

    /// Whether every resource ended VALID.
    pub fn succeeded(&self) -> bool {
        let c = self.counts();
        c.failed + c.blocked + c.declined == 0
    }
}

/// Why resource `i` could not be resolved during the plan: the dependencies that are not VALID
/// (with their labels from `labels`) and the config values that read them.
pub(crate) fn pending(manifest: &ValidatedManifest, i: usize, labels: &[&str]) -> Planned {
    let resource = &manifest.resources[i];
    let not_valid: Vec<usize> =
        manifest.graph.dependencies(i).iter().copied().filter(|&d| labels[d] != "VALID").collect();
    let waiting_on = not_valid
        .iter()
        .map(|&d| Waiting { resource: manifest.resources[d].name.clone(), status: labels[d].to_string() })
        .collect();
    let reads_unknown = |reference: &str| {
        let mut parts = reference.split('.');
        let target = match (parts.next(), parts.next()) {
            (Some("resources"), Some(name)) => manifest.index_of(name),
            (Some(root), _) => resource.aliases.get(root).copied(),
            _ => None,
        };
        target.is_some_and(|t| not_valid.contains(&t))
    };
    let unknown_inputs = resource
        .config
        .sites
        .iter()
        .filter(|site| site.references.iter().any(|r| reads_unknown(r)))
        .map(|site| UnknownInput { path: expr::full_path("config", &site.path), expression: site.source.clone() })
        .collect();
    Planned::Pending { waiting_on, unknown_inputs }
}
