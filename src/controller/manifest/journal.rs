//! A Manifest's status while a pass runs: the log as it stands before each action, and the
//! running actions' progress.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::controller::error::StatusWriteError;
use crate::controller::report::StatusWriter;
use crate::controller::status::{self, bound};
use crate::crd::{ActionProgress, Manifest, ManifestStatus, ResourceStatus};
use crate::engine::events::{IntentError, Observer, RunEvent};
use crate::history::MemoryLog;

/// The object's status while a pass runs. Before each action: the deployment log as it now
/// stands — the action's intent last — so that after a crash the next pass knows what may have
/// been half done (observes after the recorder, which appends the intent to `log`). Meanwhile:
/// the running actions and their reported progress, written at most once per
/// [`PROGRESS_WRITE_EVERY`] by [`StatusJournal::keep_writing`]. It writes through the
/// reconcile's one [`StatusWriter`], which writes the pass's outcome after it.
pub(in crate::controller) struct StatusJournal {
    writer: Arc<StatusWriter<Manifest>>,
    old: ManifestStatus,
    log: Arc<MemoryLog>,
    /// Each resource's type, for resources the old status does not list yet.
    types: Vec<(String, String)>,
    running: std::sync::Mutex<std::collections::BTreeMap<String, ActionProgress>>,
    /// Progress changed since the last write.
    dirty: std::sync::atomic::AtomicBool,
}

/// How long an action's intent waits for those of the actions starting with it, so that one
/// status write records them all (without it: one write, then one with the rest — an API
/// server's round trip more before most of them start).
const GATHER_INTENTS: Duration = Duration::from_millis(10);

/// How often, at most, progress alone causes a status write.
pub const PROGRESS_WRITE_EVERY: Duration = Duration::from_secs(5);

impl StatusJournal {
    pub(super) fn new(
        writer: Arc<StatusWriter<Manifest>>,
        obj: &Manifest,
        old: &ManifestStatus,
        log: &Arc<MemoryLog>,
    ) -> Self {
        let types =
            obj.spec.resources.iter().map(|(name, r)| (name.clone(), r.type_ref.clone().unwrap_or_default())).collect();
        Self {
            writer,
            old: old.clone(),
            log: log.clone(),
            types,
            running: Default::default(),
            dirty: Default::default(),
        }
    }

    /// The old status with the log as it now stands and the actions running now.
    fn now(&self) -> ManifestStatus {
        let mut status = self.old.clone();
        status.history = status::history_from(&self.log.entries());
        let running = self.running.lock().expect("progress lock").clone();
        for (resource, progress) in &running {
            let at = match status.resources.iter().position(|r| r.name == resource.as_str()) {
                Some(at) => at,
                None => {
                    // One no longer declared, being deleted: in `progress` only.
                    let Some((_, type_)) = self.types.iter().find(|(n, _)| n == resource) else { continue };
                    status.resources.push(ResourceStatus {
                        name: resource.into(),
                        type_: type_.as_str().into(),
                        status: "PENDING".into(),
                        ..ResourceStatus::default()
                    });
                    status.resources.len() - 1
                }
            };
            status.resources[at].progress = Some(progress.clone());
        }
        let summary: Vec<String> = running.iter().map(|(resource, p)| p.describe(resource)).collect();
        status.progress = (!summary.is_empty()).then(|| summary.join(", "));
        bound(&mut status);
        status
    }

    /// Writes the status as the log and progress are when the write starts (one at a time).
    pub(super) async fn write(&self) -> Result<(), StatusWriteError> {
        // Progress is a display: a write the server does not answer is not waited for.
        self.writer
            .write_with(
                || {
                    self.dirty.store(false, std::sync::atomic::Ordering::SeqCst);
                    self.now()
                },
                Duration::ZERO,
            )
            .await
    }

    /// Until `stop`: every [`PROGRESS_WRITE_EVERY`], the status when progress changed. A write
    /// that fails is logged: progress is a display, the pass goes on.
    pub(super) async fn keep_writing(&self, stop: &CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(PROGRESS_WRITE_EVERY) => {}
            }
            if self.dirty.load(std::sync::atomic::Ordering::SeqCst)
                && let Err(e) = self.write().await
            {
                tracing::warn!(error = %e, "the Manifest's progress could not be written");
            }
        }
    }
}

#[async_trait]
impl Observer for StatusJournal {
    fn on_event(&self, event: &RunEvent) {
        let mut running = self.running.lock().expect("progress lock");
        let changed = match event {
            RunEvent::Progress { resource, percent, .. } => {
                running.get_mut(resource).map(|p| p.percent = Some((percent * 10.0).round() / 10.0)).is_some()
            }
            RunEvent::ActionFinished { resource, .. } | RunEvent::Settled { resource, .. } => {
                running.remove(resource).is_some()
            }
            _ => false,
        };
        if changed {
            self.dirty.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    async fn on_intent(&self, resource: &str, action: &str) -> Result<(), IntentError> {
        let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let progress = ActionProgress { action: action.to_string(), percent: None, started_at };
        self.running.lock().expect("progress lock").insert(resource.to_string(), progress);
        // The actions of resources read together start together: their intents go in one write.
        tokio::time::sleep(GATHER_INTENTS).await;
        self.write().await.map_err(|e| IntentError(format!("the Manifest's status could not be written: {e}")))
    }
}
