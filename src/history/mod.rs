//! The deployment log: an append-only history of what every run did, at several granularities,
//! and the queries that answer "what is deployed, what failed, what is in progress".
//!
//! An entry is `(id, target, revision, event, at, detail)`: during run `id`, `event` happened to
//! `target` — the manifest, a resource (`resource/<name>`) or an action
//! (`resource/<name>/action/<action>`) — for manifest revision `revision`. Entries are only
//! appended. Queries look only for the markers they need, so new kinds of entries can be added
//! without breaking old questions.
//!
//! Two stores share these semantics: [`store::SqliteLog`] (the CLI's `.deployster/` directory)
//! and [`MemoryLog`] (the bounded history the controller keeps on each custom resource).

pub mod inventory;
pub mod recorder;
pub mod store;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What happened. The names are part of the log's format; see `docs/history.md`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Event {
    /// An apply or reconcile pass began (target: the manifest).
    RunStarted,
    RunFinishedSuccessfully,
    RunFailed,
    /// Appended by a later run for a run that never recorded its end (it crashed).
    RunInterrupted,
    /// The user declined the plan, or it could not be confirmed: nothing was changed.
    RunDeclined,
    /// A plan began / ended (plans change nothing, so they are not runs).
    PlanStarted,
    PlanFinished,
    ResourceValid,
    ResourceStale,
    ResourceMissing,
    /// The resource was VALID at its previous observation and is STALE or MISSING now, with
    /// the same inputs: something outside Deployster changed it.
    DriftDetected,
    /// The resource was VALID at its previous observation and is STALE or MISSING now because
    /// its inputs changed (config, variables, type, dependencies' state): a change, not drift.
    ChangeDetected,
    /// About to run an action: the intent, recorded before the action starts.
    ActionStarted,
    ActionFinishedSuccessfully,
    ActionFailed,
    /// Appended by a later run for an action whose run crashed before recording its end.
    ActionInterrupted,
    /// Actions ran and the resource is VALID.
    ResourceApplied,
    ResourceFailed,
    ResourceBlocked,
    ResourceDeclined,
    /// A plan could not read the resource yet: a dependency is not VALID.
    ResourcePending,
    /// Its type warned the user (`phase`, `message`): a line of its init or state reply's
    /// `warnings`.
    ResourceWarned,
    /// The manifest's outputs after a successful run (target: the manifest), sensitive values
    /// masked; or why they could not be rendered.
    OutputsRecorded,
    /// The resource joins (or, declared anew, stays in) the manifest's inventory: what a later
    /// run deletes when the manifest no longer declares it. `detail.manifest` names the
    /// manifest, `detail.declaration` is the resource as written (templates unrendered). Written
    /// before its first action, or when a run finds it VALID (see [`inventory`]).
    ResourceInventoried,
    /// Its delete action ran and it is MISSING, or it was found MISSING: it leaves the inventory.
    ResourceDeleted,
    /// Renamed in the manifest (`moved`): on the old name with `detail.to`, on the new one with
    /// `detail.from` and the declaration the inventory holds it by from now on.
    ResourceMoved,
    /// Left in place and no longer kept in the inventory (its type cannot delete, it is
    /// `readonly`, or something left in place depends on it).
    ResourceForgotten,

    // Pipelines (`crate::pipeline`). Targets: `pipeline`, `pipeline/<stage>`,
    // `pipeline/<stage>/<group>`, `…/<target>`, `…/<step>`; the revision is the pipeline's.
    /// A revision entered the pipeline (`deployster pipeline start`): the seed's "artifact
    /// registered" event (target: the pipeline).
    RevisionRegistered,
    /// An artifact a stage requires was registered for a revision (target: the stage).
    ArtifactRegistered,
    /// A newer revision entered a stage this one had not finished (`concurrency: Supersede`):
    /// it stops here (target: the pipeline).
    RevisionSuperseded,
    /// The pipeline first holds this step; `detail.underWay` lists the revisions already under
    /// way, which skip it.
    StepIntroduced,
    /// The pipeline no longer holds this step (it was removed from the document); added back,
    /// it is introduced again.
    StepWithdrawn,
    PipelineStarted,
    PipelineFinishedSuccessfully,
    PipelineFailed,
    StageStarted,
    StageFinishedSuccessfully,
    StageFailed,
    GroupStarted,
    GroupFinishedSuccessfully,
    GroupFailed,
    TargetStarted,
    TargetFinishedSuccessfully,
    TargetFailed,
    StepStarted,
    StepSucceeded,
    StepFailed,
    /// Not run for this revision, with `detail.reason` (`introduced-after`).
    StepSkipped,
    /// Appended by a later drive for a step whose drive ended before recording its end.
    StepInterrupted,
    /// Someone approved a gate for a revision (target: the stage or group the gate holds).
    Approved,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(text: &str) -> Option<Event> {
        text.parse().ok()
    }

    /// For an event that opens something (a run, a plan, an action), the events that close it.
    pub fn closed_by(self) -> &'static [Event] {
        match self {
            Event::RunStarted => {
                &[Event::RunFinishedSuccessfully, Event::RunFailed, Event::RunInterrupted, Event::RunDeclined]
            }
            Event::PlanStarted => &[Event::PlanFinished],
            Event::ActionStarted => &[Event::ActionFinishedSuccessfully, Event::ActionFailed, Event::ActionInterrupted],
            _ => &[],
        }
    }

    /// The opening event this event closes, if it closes one.
    pub fn closes(self) -> Option<Event> {
        [Event::RunStarted, Event::PlanStarted, Event::ActionStarted]
            .into_iter()
            .find(|o| o.closed_by().contains(&self))
    }
}

/// Targets: what an entry is about.
pub mod target {
    pub const MANIFEST: &str = "manifest";

    pub fn resource(name: &str) -> String {
        format!("resource/{name}")
    }

    pub fn action(resource: &str, action: &str) -> String {
        format!("resource/{resource}/action/{action}")
    }
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The run's deployment id.
    pub id: String,
    pub target: String,
    pub revision: String,
    pub event: Event,
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    /// Small JSON: a message, an exit code, a duration. Never secrets or plug contents.
    pub detail: Value,
}

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("the deployment log at {path} is in use by another deployster run ({holder}); wait for it to finish")]
    Locked { path: String, holder: String },
    #[error("the deployment log at {path}: {message}")]
    Store { path: String, message: String },
    /// The state directory or its log cannot be used as given (a file, read-only, a newer
    /// deployster's log): the command line or the machine must change, not a retry.
    #[error("the state directory {path} cannot be used: {message}")]
    Unusable { path: String, message: String },
}

impl HistoryError {
    pub fn reason(&self) -> &'static str {
        match self {
            HistoryError::Locked { .. } => "StateLocked",
            HistoryError::Store { .. } => "StateUnavailable",
            HistoryError::Unusable { .. } => "StateUnusable",
        }
    }
}

/// A numbered revision of a manifest (its content and variables), per state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub number: i64,
    /// The content hash.
    pub hash: String,
    /// Milliseconds since the Unix epoch.
    pub first_seen: i64,
}

/// A deployment log: appended to, and queried.
pub trait History: Send + Sync {
    /// What entries name the revision of this content (`hash`) by: a log that numbers
    /// revisions gives the number, assigning the next one to new content; others the hash.
    fn revision_of(&self, hash: &str) -> Result<String, HistoryError> {
        Ok(hash.to_string())
    }

    /// Appends entries atomically and durably, in order.
    fn append(&self, entries: &[Entry]) -> Result<(), HistoryError>;

    /// The newest entry for exactly `target` whose event is one of `events`.
    fn latest(&self, target: &str, events: &[Event]) -> Result<Option<Entry>, HistoryError>;

    /// Opening entries (run, plan or action started) with no closing entry yet, for targets
    /// starting with `prefix`, oldest first.
    fn open(&self, prefix: &str) -> Result<Vec<Entry>, HistoryError>;

    /// The newest `limit` entries for targets starting with `prefix`, newest first.
    fn recent(&self, prefix: &str, limit: usize) -> Result<Vec<Entry>, HistoryError>;

    /// For each target starting with `prefix`, its newest entry whose event is one of
    /// `events`, oldest first. Stores with an index of the newest entries answer from it.
    fn latest_each(&self, prefix: &str, events: &[Event]) -> Result<Vec<Entry>, HistoryError> {
        let mut newest: Vec<Entry> = Vec::new();
        for entry in self.recent(prefix, usize::MAX)? {
            if events.contains(&entry.event) && !newest.iter().any(|n| n.target == entry.target) {
                newest.push(entry);
            }
        }
        newest.reverse();
        Ok(newest)
    }
}

/// A log read but not written: what a plan uses where it may not write (a read-only state
/// directory). Queries go to `reads`; appends are dropped, once the caller said so.
pub struct Unrecorded(pub Arc<dyn History>);

impl History for Unrecorded {
    fn append(&self, _: &[Entry]) -> Result<(), HistoryError> {
        Ok(())
    }

    fn latest(&self, target: &str, events: &[Event]) -> Result<Option<Entry>, HistoryError> {
        self.0.latest(target, events)
    }

    fn open(&self, prefix: &str) -> Result<Vec<Entry>, HistoryError> {
        self.0.open(prefix)
    }

    fn recent(&self, prefix: &str, limit: usize) -> Result<Vec<Entry>, HistoryError> {
        self.0.recent(prefix, limit)
    }

    fn latest_each(&self, prefix: &str, events: &[Event]) -> Result<Vec<Entry>, HistoryError> {
        self.0.latest_each(prefix, events)
    }
}

/// How a revision went, from its entries (oldest first): the end of its newest run — or `in
/// progress`, or `planned` when only plans saw it.
pub fn outcome(entries: &[Entry]) -> &'static str {
    let run = |e: &&Entry| e.target == target::MANIFEST && !matches!(e.event, Event::PlanStarted | Event::PlanFinished);
    let newest = entries.iter().rfind(run);
    if newest.is_some_and(|e| e.detail.get("destroyed") == Some(&Value::Bool(true))) {
        return "destroyed";
    }
    match newest.map(|e| e.event) {
        Some(Event::RunFinishedSuccessfully) => "applied",
        Some(Event::RunFailed) => "failed",
        Some(Event::RunDeclined) => "declined",
        Some(Event::RunInterrupted) => "interrupted",
        Some(_) => "in progress",
        None => "planned",
    }
}

/// The newest revision deployed successfully: of the whole manifest, or of one resource
/// (applied, or found VALID by a run).
pub fn latest_applied(log: &dyn History, resource: Option<&str>) -> Result<Option<Entry>, HistoryError> {
    match resource {
        None => log.latest(target::MANIFEST, &[Event::RunFinishedSuccessfully]),
        Some(name) => log.latest(&target::resource(name), &[Event::ResourceApplied, Event::ResourceValid]),
    }
}

/// The newest failed revision: of the whole manifest, or of one resource.
pub fn latest_failed(log: &dyn History, resource: Option<&str>) -> Result<Option<Entry>, HistoryError> {
    match resource {
        None => log.latest(target::MANIFEST, &[Event::RunFailed]),
        Some(name) => log.latest(&target::resource(name), &[Event::ResourceFailed]),
    }
}

/// Revisions in progress: runs started without an end (of the manifest), or actions whose
/// intent was recorded without a result (of one resource) — after a crash, what may have been
/// half done.
pub fn in_progress(log: &dyn History, resource: Option<&str>) -> Result<Vec<Entry>, HistoryError> {
    match resource {
        None => Ok(log.open(target::MANIFEST)?.into_iter().filter(|e| e.event == Event::RunStarted).collect()),
        Some(name) => Ok(log
            .open(&format!("{}/action/", target::resource(name)))?
            .into_iter()
            .filter(|e| e.event == Event::ActionStarted)
            .collect()),
    }
}

/// Whether `prefix` selects `target`: exactly, or as a parent (`resource/a` selects
/// `resource/a/action/x` but not `resource/ab`).
pub fn selects(prefix: &str, target: &str) -> bool {
    prefix.is_empty()
        || target == prefix
        || (target.starts_with(prefix) && (prefix.ends_with('/') || target[prefix.len()..].starts_with('/')))
}

/// A log held in memory, newest last; optionally bounded to its newest `capacity` entries
/// (what the controller keeps on each object).
#[derive(Debug, Default)]
pub struct MemoryLog {
    entries: Mutex<Vec<Entry>>,
    capacity: Option<usize>,
}

impl MemoryLog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn bounded(capacity: usize) -> Self {
        Self { entries: Mutex::default(), capacity: Some(capacity) }
    }

    pub fn from_entries(entries: Vec<Entry>, capacity: Option<usize>) -> Self {
        let log = Self { entries: Mutex::new(Vec::new()), capacity };
        log.push(entries);
        log
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().expect("log lock").clone()
    }

    /// Holds `entries` instead of what it held (a compacted log).
    pub fn replace(&self, entries: Vec<Entry>) {
        self.entries.lock().expect("log lock").clear();
        self.push(entries);
    }

    /// Appends `entries`; a bounded log then keeps its newest `capacity` entries, and besides
    /// them what the inventory stands on ([`inventory::pinned`]).
    fn push(&self, entries: Vec<Entry>) {
        let mut all = self.entries.lock().expect("log lock");
        all.extend(entries);
        let Some(cap) = self.capacity.filter(|cap| all.len() > *cap) else { return };
        let pinned = inventory::pinned(&all);
        let excess = pinned.iter().filter(|p| !**p).count().saturating_sub(cap);
        inventory::drop_oldest(&mut all, &pinned, excess);
    }
}

impl History for MemoryLog {
    fn append(&self, entries: &[Entry]) -> Result<(), HistoryError> {
        self.push(entries.to_vec());
        Ok(())
    }

    fn latest(&self, target: &str, events: &[Event]) -> Result<Option<Entry>, HistoryError> {
        let all = self.entries.lock().expect("log lock");
        Ok(all.iter().rev().find(|e| e.target == target && events.contains(&e.event)).cloned())
    }

    fn open(&self, prefix: &str) -> Result<Vec<Entry>, HistoryError> {
        let all = self.entries.lock().expect("log lock");
        let closed = |opening: &Entry| {
            all.iter().any(|e| {
                e.id == opening.id && e.target == opening.target && opening.event.closed_by().contains(&e.event)
            })
        };
        Ok(all
            .iter()
            .filter(|e| !e.event.closed_by().is_empty() && selects(prefix, &e.target) && !closed(e))
            .cloned()
            .collect())
    }

    fn recent(&self, prefix: &str, limit: usize) -> Result<Vec<Entry>, HistoryError> {
        let all = self.entries.lock().expect("log lock");
        Ok(all.iter().rev().filter(|e| selects(prefix, &e.target)).take(limit).cloned().collect())
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or_default()
}

/// A timestamp as RFC 3339 (UTC, milliseconds).
pub fn format_time(at_ms: i64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

pub use crate::engine::protocol::cut_to;

#[cfg(test)]
pub(crate) mod tests;
