//! Turns a run's events into deployment-log entries.
//!
//! Observations (a resource found VALID, an action's result) are buffered and written with the
//! next durable point; an action's intent (`action-started`) is a durable point itself, written
//! before the action starts, so that after a crash the log says what may have been half done.
//! The end of the run is the last durable point. Intents of actions starting at once share a
//! transaction (group commit): whoever writes takes everything queued by then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::{Entry, Event, History, HistoryError, in_progress, now_ms, target};
use crate::engine::events::{Ending, IntentError, Mode, Observer, RunEvent};
use crate::engine::plan::{Change, Difference, Inputs, Plan, Standing};
use crate::engine::protocol::Status;

/// How much of a message an entry keeps.
const DETAIL_MESSAGE_LIMIT: usize = 1024;

pub use crate::engine::plan::Drift;

/// A run that never recorded its end, found when a new run started.
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupted {
    pub run: Entry,
    /// The action intents it left without a result.
    pub actions: Vec<Entry>,
}

/// Records one run into a log. Also an engine [`Observer`].
pub struct Recorder {
    journal: Arc<Journal>,
    run_id: String,
    revision: String,
    mode: Mode,
    /// What the log says of each resource before this run.
    before: HashMap<String, Before>,
    /// Resource → the inputs this run read its state for.
    inputs: Mutex<HashMap<String, Inputs>>,
    drifts: Mutex<Vec<Drift>>,
    changes: Mutex<Vec<Change>>,
    /// Kept with a successful apply's end: the variables it applied with.
    pub variables: Option<Value>,
}

/// A run's entries on their way to the log (shared with the threads that write intents).
struct Journal {
    log: Arc<dyn History>,
    /// Entries not yet written, and how many durable points were queued so far.
    buffer: Mutex<(Vec<Entry>, u64)>,
    /// One write at a time; the durable points written so far.
    written: Mutex<u64>,
    /// The first write failure; the run goes on, the caller reports it at the end.
    failure: Mutex<Option<String>>,
}

/// A resource as the log knew it when the run began.
struct Before {
    /// Its newest observation was VALID (or applied).
    valid: bool,
    /// Its newest VALID (or applied) observation: with what inputs, at what revision.
    last_valid: Option<(Option<Inputs>, String)>,
}

/// What the log says of resource `name`: its newest observation, and its newest VALID one.
fn before_of(log: &dyn History, name: &str) -> Result<Before, HistoryError> {
    let observations = [
        Event::ResourceValid,
        Event::ResourceApplied,
        Event::ResourceStale,
        Event::ResourceMissing,
        Event::ResourceFailed,
        Event::ResourceDeleted,
    ];
    let valid_events = [Event::ResourceValid, Event::ResourceApplied];
    let last = log.latest(&target::resource(name), &observations)?;
    if last.as_ref().is_some_and(|e| e.event == Event::ResourceDeleted) {
        // Deleted (`destroy`, or removed from the manifest): what comes next is new.
        return Ok(Before { valid: false, last_valid: None });
    }
    let valid = last.as_ref().is_some_and(|e| valid_events.contains(&e.event));
    let last_valid = match last {
        Some(entry) if valid => Some(entry),
        _ => log.latest(&target::resource(name), &valid_events)?,
    };
    let last_valid = last_valid.map(|e| (e.detail.get("inputs").and_then(Inputs::from_json), e.revision));
    Ok(Before { valid, last_valid })
}

fn cut(message: &str) -> String {
    super::cut_to(message, DETAIL_MESSAGE_LIMIT)
}

impl Recorder {
    /// Prepares to record run `run_id` of `revision`, reading each resource's last observation
    /// and the inputs it was last VALID with (to tell drift from change).
    pub fn new(
        log: Arc<dyn History>,
        run_id: &str,
        revision: &str,
        mode: Mode,
        resources: &[String],
    ) -> Result<Self, HistoryError> {
        let mut before = HashMap::new();
        for name in resources {
            before.insert(name.clone(), before_of(log.as_ref(), name)?);
        }
        let journal = Journal { log, buffer: Mutex::default(), written: Mutex::default(), failure: Mutex::default() };
        Ok(Self {
            journal: Arc::new(journal),
            run_id: run_id.to_string(),
            revision: revision.to_string(),
            mode,
            before,
            inputs: Mutex::default(),
            drifts: Mutex::default(),
            changes: Mutex::default(),
            variables: None,
        })
    }

    /// `resource` was renamed from `from` (`moved`): what the log says of `from` is what it
    /// was, for drift and changes.
    pub fn inherit(&mut self, resource: &str, from: &str) -> Result<(), HistoryError> {
        let before = before_of(self.journal.log.as_ref(), from)?;
        self.before.insert(resource.to_string(), before);
        Ok(())
    }

    fn entry(&self, target: String, event: Event, detail: Value) -> Entry {
        Entry { id: self.run_id.clone(), target, revision: self.revision.clone(), event, at: now_ms(), detail }
    }

    /// `run-started` or `plan-started`, durably.
    fn start(&self) {
        let event = if self.mode == Mode::Plan { Event::PlanStarted } else { Event::RunStarted };
        let _ = self.journal.durable(Some(self.entry(target::MANIFEST.into(), event, json!({}))));
    }

    /// The run's end, durably: a plan's always ends as `plan-finished`.
    fn end(&self, ending: &Ending) {
        let (event, message) = match ending {
            _ if self.mode == Mode::Plan => (Event::PlanFinished, None),
            Ending::Planned | Ending::Succeeded => (Event::RunFinishedSuccessfully, None),
            Ending::Failed(why) => (Event::RunFailed, Some(why)),
            Ending::Declined(why) => (Event::RunDeclined, Some(why)),
            Ending::Interrupted(why) => (Event::RunInterrupted, Some(why)),
        };
        let mut detail = message.map_or_else(|| json!({}), |m| json!({"message": cut(m)}));
        if event == Event::RunFinishedSuccessfully && self.mode == Mode::Delete {
            // Everything deleted: `history` says so, and the next apply starts afresh.
            detail["destroyed"] = json!(true);
        }
        if let Some(Value::Object(kept)) =
            self.variables.as_ref().filter(|_| event == Event::RunFinishedSuccessfully && self.mode == Mode::Apply)
        {
            detail.as_object_mut().expect("an object").extend(kept.clone());
        }
        let _ = self.journal.durable(Some(self.entry(target::MANIFEST.into(), event, detail)));
    }

    /// Resources that drifted during this run.
    pub fn drifts(&self) -> Vec<Drift> {
        self.drifts.lock().expect("drifts lock").clone()
    }

    /// Resources whose inputs changed since they were last VALID, found during this run.
    pub fn changes(&self) -> Vec<Change> {
        self.changes.lock().expect("changes lock").clone()
    }

    /// The first failure to write the log, if any.
    pub fn failure(&self) -> Option<String> {
        self.journal.failure.lock().expect("failure lock").clone()
    }

    /// A state read before any action: recorded with its inputs. A resource VALID before and
    /// not now drifted if its inputs are those it was VALID with (or, where the log kept no
    /// inputs, if the revision is); otherwise its configuration changed.
    fn observed(&self, resource: &str, status: Status, inputs: &Inputs) {
        let event = match status {
            Status::Valid => Event::ResourceValid,
            Status::Stale => Event::ResourceStale,
            Status::Missing => Event::ResourceMissing,
        };
        self.inputs.lock().expect("inputs lock").insert(resource.to_string(), inputs.clone());
        self.journal.push(self.entry(target::resource(resource), event, json!({"inputs": inputs})));
        let Some(before) = self.before.get(resource).filter(|_| status != Status::Valid) else { return };
        let differences = match &before.last_valid {
            Some((Some(was), _)) => was.differences(inputs),
            Some((None, revision)) if *revision != self.revision => {
                vec![Difference {
                    path: "revision".into(),
                    was: Some(json!(revision)),
                    now: Some(json!(self.revision)),
                }]
            }
            _ => Vec::new(),
        };
        let target = target::resource(resource);
        if !differences.is_empty() {
            if before.valid {
                let changed: Vec<&str> = differences.iter().map(|d| d.path.as_str()).collect();
                let detail = json!({"was": "VALID", "now": status.to_string(), "changed": changed});
                self.journal.push(self.entry(target, Event::ChangeDetected, detail));
            }
            let change = Change { resource: resource.to_string(), now: status, was_valid: before.valid, differences };
            // Once a pass: read again (after a removal, or the old one of a replacement read to
            // be deleted), it is the same change.
            let mut changes = self.changes.lock().expect("changes lock");
            if !changes.iter().any(|c| c.resource == resource) {
                changes.push(change);
            }
        } else if before.valid {
            self.drifts.lock().expect("drifts lock").push(Drift { resource: resource.to_string(), now: status });
            let detail = json!({"was": "VALID", "now": status.to_string()});
            self.journal.push(self.entry(target, Event::DriftDetected, detail));
        }
    }

    fn settled(&self, resource: &str, label: &str, message: Option<&str>, elapsed_ms: u128) {
        let event = match label {
            "APPLIED" => Event::ResourceApplied,
            "FAILED" => Event::ResourceFailed,
            "BLOCKED" => Event::ResourceBlocked,
            "DECLINED" => Event::ResourceDeclined,
            // VALID, STALE and MISSING were recorded when the state was read.
            _ => return,
        };
        let mut detail = json!({"duration_ms": elapsed_ms});
        if let Some(message) = message {
            detail["message"] = json!(cut(message));
        }
        if let (Event::ResourceApplied, Some(inputs)) = (event, self.inputs.lock().expect("inputs lock").get(resource))
        {
            detail["inputs"] = json!(inputs);
        }
        self.journal.push(self.entry(target::resource(resource), event, detail));
    }
}

impl Journal {
    /// Queues an entry for the next durable point.
    fn push(&self, entry: Entry) {
        self.buffer.lock().expect("buffer lock").0.push(entry);
    }

    /// Writes everything buffered, then `entry`, in one transaction — or returns once another
    /// caller's transaction wrote them (durable points queued while a write is under way are
    /// written together by the next writer). A failure is kept for the end of the run (see
    /// [`Recorder::failure`]), and returned; the entries stay queued for the next durable point.
    fn durable(&self, entry: Option<Entry>) -> Result<(), HistoryError> {
        let mine = {
            let mut buffer = self.buffer.lock().expect("buffer lock");
            buffer.0.extend(entry);
            buffer.1 += 1;
            buffer.1
        };
        let mut written = self.written.lock().expect("writer lock");
        if *written >= mine {
            return Ok(());
        }
        let (batch, upto) = {
            let mut buffer = self.buffer.lock().expect("buffer lock");
            (std::mem::take(&mut buffer.0), buffer.1)
        };
        if batch.is_empty() {
            *written = upto;
            return Ok(());
        }
        match self.log.append(&batch) {
            Ok(()) => {
                *written = upto;
                Ok(())
            }
            Err(e) => {
                // Not written: they go back ahead of whatever was queued since.
                let mut buffer = self.buffer.lock().expect("buffer lock");
                let newer = std::mem::replace(&mut buffer.0, batch);
                buffer.0.extend(newer);
                tracing::error!(error = %e, "could not write the deployment log");
                self.failure.lock().expect("failure lock").get_or_insert(e.to_string());
                Err(e)
            }
        }
    }
}

#[async_trait::async_trait]
impl Observer for Recorder {
    /// The intent (`action-started`) is written, with everything buffered, in one durable
    /// transaction before the action runs; if it cannot be, the action does not run.
    ///
    /// The write waits for the disk on a blocking thread, not on the thread that drives the
    /// pass: the intents of other actions starting meanwhile queue up behind it and share the
    /// next transaction.
    async fn on_intent(&self, resource: &str, action: &str) -> Result<(), IntentError> {
        let entry = self.entry(target::action(resource, action), Event::ActionStarted, json!({}));
        let journal = self.journal.clone();
        let written = tokio::task::spawn_blocking(move || journal.durable(Some(entry))).await;
        match written {
            Ok(result) => result.map_err(|e| IntentError(e.to_string())),
            Err(e) => Err(IntentError(format!("the intent's write did not finish: {e}"))),
        }
    }

    /// Pending resources settle no other way: recorded with what they wait on. One the plan
    /// foresees was read (over its dependencies' planned states), and is recorded as found.
    fn on_planned(&self, plan: &Plan, _: &[Drift], _: &[Change]) {
        for e in plan.entries.iter().filter(|e| e.standing.foreseen().is_none()) {
            if let Standing::Pending { waiting_on, .. } = &e.standing {
                let waiting: Vec<&str> = waiting_on.iter().map(|w| w.resource.as_str()).collect();
                let detail = json!({"waiting_on": waiting});
                self.journal.push(self.entry(target::resource(&e.name), Event::ResourcePending, detail));
            }
        }
    }

    fn on_event(&self, event: &RunEvent) {
        match event {
            RunEvent::Started => self.start(),
            RunEvent::Outputs(outputs) => {
                let detail = match outputs {
                    Ok(values) => json!({"outputs": values}),
                    Err(why) => json!({"message": cut(why)}),
                };
                self.journal.push(self.entry(target::MANIFEST.into(), Event::OutputsRecorded, detail));
            }
            RunEvent::Ended(ending) => self.end(ending),
            RunEvent::StateFound { resource, status, verify: false, inputs, .. } => {
                self.observed(resource, *status, inputs)
            }
            RunEvent::StateFound { verify: true, .. }
            | RunEvent::Output { .. }
            | RunEvent::Invoking { .. }
            | RunEvent::Progress { .. }
            | RunEvent::Recovered { .. } => {}
            RunEvent::ActionFinished { resource, action, elapsed, error, results } => {
                let (event, mut detail) = match error {
                    None => (Event::ActionFinishedSuccessfully, json!({})),
                    Some(message) => (Event::ActionFailed, json!({"message": cut(message)})),
                };
                detail["duration_ms"] = json!(elapsed.as_millis());
                if !results.is_empty() {
                    let pairs: Vec<Value> = results.iter().map(|(k, v)| json!({"key": k, "value": cut(v)})).collect();
                    detail["result"] = json!(pairs);
                }
                self.journal.push(self.entry(target::action(resource, action), event, detail));
            }
            RunEvent::Settled { resource, label, elapsed, message } => {
                self.settled(resource, label, message.as_deref(), elapsed.as_millis())
            }
            RunEvent::Warned(w) => {
                let detail = json!({"phase": w.phase.to_string(), "message": w.message});
                self.journal.push(self.entry(target::resource(&w.resource), Event::ResourceWarned, detail));
            }
        }
    }
}

/// Closes what crashed runs left open: each run started without an end gets `run-interrupted`,
/// each of its action intents without a result `action-interrupted`. Call only while holding the
/// state lock (no other run can be alive). Returns what was found, for the user.
pub fn close_interrupted(log: &dyn History, by_run: &str) -> Result<Vec<Interrupted>, HistoryError> {
    let runs = in_progress(log, None)?;
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let open_actions: Vec<Entry> =
        log.open("resource/")?.into_iter().filter(|e| e.event == Event::ActionStarted).collect();
    let mut found = Vec::new();
    let mut closing = Vec::new();
    for run in runs {
        let actions: Vec<Entry> = open_actions.iter().filter(|a| a.id == run.id).cloned().collect();
        let close = |opened: &Entry, event| Entry {
            event,
            at: now_ms(),
            detail: json!({"interrupted_by": by_run}),
            ..opened.clone()
        };
        closing.extend(actions.iter().map(|a| close(a, Event::ActionInterrupted)));
        closing.push(close(&run, Event::RunInterrupted));
        found.push(Interrupted { run, actions });
    }
    log.append(&closing)?;
    Ok(found)
}

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;
