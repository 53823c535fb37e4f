//! Asking the user before actions run.

use std::sync::Arc;

use async_trait::async_trait;
use clap::ValueEnum;

use super::interactive;
use super::progress::ProgressView;
use super::render::name_width;
use crate::engine::events::{Approver, Decision};
use crate::engine::plan::{Plan, Removal};
use crate::engine::protocol::{Action, Status};

/// When `apply` asks for confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfirmMode {
    /// Once, after the whole plan was shown.
    Once,
    /// Before each resource's actions.
    Resource,
    /// Before each action.
    Action,
    /// Never.
    No,
}

impl ConfirmMode {
    pub fn name(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }
}

/// Asks a yes/no question on the terminal (default no), with the progress display paused.
pub(super) fn ask(progress: &ProgressView, question: &str) -> bool {
    progress.suspend(|| dialoguer::Confirm::new().with_prompt(question).default(false).interact().unwrap_or(false))
}

/// Asks per resource or per action, one question at a time; approves everything in the other
/// modes (the plan was approved as a whole, or confirmation was switched off).
pub(super) struct Prompting {
    mode: ConfirmMode,
    /// `--allow-deletes N`: a deletion of more than half of what the inventory holds goes
    /// ahead unasked only when it deletes exactly this many.
    allow_deletes: Option<usize>,
    progress: Arc<ProgressView>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Prompting {
    pub(super) fn new(mode: ConfirmMode, progress: Arc<ProgressView>, allow_deletes: Option<usize>) -> Self {
        Self { mode, allow_deletes, progress, one_at_a_time: tokio::sync::Mutex::new(()) }
    }

    async fn ask(&self, question: String) -> bool {
        let _turn = self.one_at_a_time.lock().await;
        // Prompts block on the terminal: on a thread for blocking work, not a runtime worker.
        let progress = self.progress.clone();
        tokio::task::spawn_blocking(move || ask(&progress, &question)).await.unwrap_or(false)
    }
}

#[async_trait]
impl Approver for Prompting {
    /// Refuses without a terminal to ask on (unless asked not to ask), asks once in `Once`, and
    /// from then on shows each resource as it settles.
    async fn approve_plan(&self, plan: &Plan) -> Decision {
        if self.mode != ConfirmMode::No && !interactive() {
            return Decision::Refuse(format!(
                "manifest {}: refusing to apply without confirmation: there is no terminal to ask on \
                 (--confirm {}); pass --yes (or --confirm no) to apply without asking",
                plan.manifest,
                self.mode.name()
            ));
        }
        let deleting = plan.removals.iter().filter(|r| r.removal == Removal::ToDelete).count();
        let mut question = match (plan.entries.is_empty(), deleting) {
            (true, 1) => "Delete this resource? This cannot be undone.".into(),
            (true, n) => format!("Delete these {n} resources? This cannot be undone."),
            (false, 0) => "Apply these changes?".into(),
            (false, n) => match plan.replacements.len() {
                0 => {
                    format!("Apply these changes, deleting {} no longer declared?", super::render::count(n, "resource"))
                }
                r if r == n => format!("Apply these changes, replacing {}?", super::render::count(n, "resource")),
                r => format!(
                    "Apply these changes, deleting {} no longer declared and replacing {r}?",
                    super::render::count(n - r, "resource")
                ),
            },
        };
        // `destroy` (a plan of removals only) asked for every deletion by its name.
        let mass = plan.mass_deletion().filter(|_| !plan.entries.is_empty());
        if let Some(n) = mass.filter(|n| self.allow_deletes != Some(*n)) {
            let names: Vec<&str> =
                plan.removals.iter().filter(|r| r.removal == Removal::ToDelete).map(|r| r.name.as_str()).collect();
            let what = format!(
                "manifest {}: this apply deletes {n} of the {} resources its inventory holds ({}), more than half",
                plan.manifest,
                plan.held,
                names.join(", ")
            );
            if self.mode != ConfirmMode::Once {
                return Decision::Refuse(format!(
                    "{what}; nothing was changed. Check the plan; if that is what you want, apply it with `deployster apply --allow-deletes {n}`"
                ));
            }
            question = format!("WARNING: {what}. Delete them and apply?");
        }
        if self.mode == ConfirmMode::Once && !self.ask(question).await {
            return Decision::Decline("declined by the user".into());
        }
        self.progress.start_executing(name_width(plan.entries.iter().map(|e| e.name.as_str())));
        Decision::Apply
    }

    async fn approve_resource(&self, resource: &str, status: Status, actions: &[Action]) -> bool {
        if self.mode != ConfirmMode::Resource {
            return true;
        }
        let names: Vec<&str> = actions.iter().map(|a| a.name.as_str()).collect();
        self.ask(format!("Apply {resource} ({status}; actions: {})?", names.join(", "))).await
    }

    async fn approve_action(&self, resource: &str, action: &Action) -> bool {
        if self.mode != ConfirmMode::Action {
            return true;
        }
        let description = if action.description.is_empty() { &action.name } else { &action.description };
        self.ask(format!("Run {resource}/{}: {description}?", action.name)).await
    }
}
