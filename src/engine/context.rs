//! What every step of one run shares: the manifest, the options, the executor behind a
//! semaphore, the observers and the cancellation — and running one program for a resource.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::error::{Cause, Phase, ResourceError};
use super::events::{IntentError, Observer, RunEvent};
use super::executor::RUN_ID_ENV;
use super::executor::{Executor, Invocation, InvocationLabels, LineSink, Mount, Outcome as ExecOutcome, Stream};
use super::messages::{Line, Message, Percent, Reader};
use super::plan::{RUN_WARNINGS_KEPT, TypeWarning};
use super::protocol::{InitResponse, Invocable};
use super::typeref::TypeRef;
use super::validate::ValidatedManifest;

/// How a run behaves.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// At most this many programs run at once.
    pub parallelism: usize,
    /// Sets `verbose` in requests and streams programs' stderr for init and state.
    pub verbose: bool,
    /// How long an invocation may run before it is stopped (SIGTERM, then SIGKILL).
    pub timeouts: Timeouts,
    /// Identifies the run in labels and logs.
    pub run_id: String,
    /// Resources the plan takes for VALID, with their last state, without reading it — as long
    /// as their config renders as it did (adaptive drift checks, [`super::schedule`]).
    pub assume_valid: super::schedule::AssumeValid,
    /// Resources to delete and create again (`--replace`): planned with their type's delete
    /// action, then whatever their state asks for once deleted.
    pub replace: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            replace: Vec::new(),
            parallelism: std::thread::available_parallelism().map_or(4, |n| n.get()),
            verbose: false,
            timeouts: Timeouts::default(),
            run_id: new_run_id(),
            assume_valid: Default::default(),
        }
    }
}

/// How long invocations may run: actions, and everything else (init, state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub action: Duration,
    pub state: Duration,
    /// An action that reported progress once and then no increase for this long is stopped.
    pub progress: Duration,
}

impl Default for Timeouts {
    /// 15 minutes for actions, 2 for init and state.
    fn default() -> Self {
        Self {
            action: Duration::from_secs(15 * 60),
            state: Duration::from_secs(2 * 60),
            progress: Duration::from_secs(60),
        }
    }
}

impl Timeouts {
    /// The same limit for every invocation.
    pub fn all(limit: Duration) -> Self {
        Self { action: limit, state: limit, ..Self::default() }
    }
}

/// What an action's messages said so far.
#[derive(Debug, Default)]
struct Read {
    reader: Reader,
    percent: Option<f64>,
    results: Vec<(String, String)>,
    /// The last message's error.
    error: Option<String>,
    /// The first message that broke the format.
    invalid: Option<String>,
    /// Stdout without the messages (the first 64 KiB), for a failure's message.
    text: String,
    /// When progress last increased.
    moved: Option<std::time::Instant>,
    /// Set when the action was stopped for reporting no progress for this long.
    stalled: Option<Duration>,
}

impl Read {
    /// Takes a message in; returns the progress to show when it moved.
    fn take(&mut self, message: Message) -> Option<f64> {
        self.results.extend(message.results);
        if message.error.is_some() {
            self.error = message.error;
        }
        let now = match message.progress? {
            Percent::At(p) => p,
            Percent::Plus(p) => self.percent.unwrap_or(0.0) + p,
        };
        if self.percent.is_some_and(|before| now < before) {
            self.invalid.get_or_insert(format!("progress went backwards, to {now}"));
            return None;
        }
        if self.percent.is_none_or(|before| now > before) {
            self.moved = Some(std::time::Instant::now());
        }
        self.percent = Some(now.min(100.0));
        self.percent
    }
}

/// A fresh deployment id: a UUIDv7, so ids sort by time.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// What a resource's type told us at init, checked against the manifest.
pub(crate) struct ResourceType {
    pub init: InitResponse,
    pub schema: Option<Arc<super::config::ConfigSchema>>,
    pub mounts: Vec<Mount>,
    /// Plug name → path as the program sees it.
    pub plug_paths: IndexMap<String, String>,
}

/// What every step of a run shares. Read-only once prepared.
pub(crate) struct RunContext {
    pub manifest: Arc<ValidatedManifest>,
    pub options: RunOptions,
    /// Each resource's type, once every init succeeded (empty before).
    pub(crate) types: Vec<ResourceType>,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) permits: Semaphore,
    pub(crate) cancel: CancellationToken,
    /// What the types warned of, since the plan or apply that takes them began.
    pub(crate) warnings: std::sync::Mutex<Vec<TypeWarning>>,
}

impl RunContext {
    pub(crate) fn emit(&self, event: RunEvent) {
        self.observer.on_event(&event);
    }

    /// Tells and keeps what resource `i`'s type warned of in `phase` (masked; at most
    /// [`RUN_WARNINGS_KEPT`] a run; the same words in the same phase once, for the first
    /// resource that said them: every resource of a type inits alike).
    pub(crate) fn warn(&self, i: usize, phase: &Phase, warnings: Vec<String>) {
        for message in warnings {
            let message = self.manifest.mask.text(&message);
            let mut kept = self.warnings.lock().expect("warnings lock");
            if kept.len() >= RUN_WARNINGS_KEPT || kept.iter().any(|w| w.phase == *phase && w.message == message) {
                continue;
            }
            let resource = self.manifest.resources[i].name.clone();
            let warning = TypeWarning { resource, phase: phase.clone(), message };
            kept.push(warning.clone());
            drop(kept);
            self.emit(RunEvent::Warned(warning));
        }
    }

    /// The warnings kept so far, taken.
    pub(crate) fn take_warnings(&self) -> Vec<TypeWarning> {
        std::mem::take(&mut *self.warnings.lock().expect("warnings lock"))
    }

    /// Makes the intent to run `action` for resource `i` durable, or fails the action.
    pub(crate) async fn record_intent(&self, i: usize, action: &str) -> Result<(), ResourceError> {
        let result = self.observer.on_intent(&self.manifest.resources[i].name, action).await;
        let cause = |e: IntentError| Cause::Exec { reason: "IntentNotRecorded", message: e.to_string() };
        result.map_err(|e| ResourceError::new(Phase::Action(action.into()), cause(e)))
    }

    /// Runs one program for resource `i` and requires it to exit 0; returns its outcome and
    /// the `result` pairs its messages reported. `stream_all` (actions) reads the program's
    /// messages on stdout (see [`super::messages`]) and sends every other output line to the
    /// observer; otherwise only stderr goes, and only when verbose.
    pub(crate) async fn run_program(
        &self,
        i: usize,
        phase: &Phase,
        invocable: &Invocable,
        stdin: Vec<u8>,
        stream_all: bool,
    ) -> Result<(ExecOutcome, Vec<(String, String)>), ResourceError> {
        let resource = &self.manifest.resources[i];
        let read: Arc<Mutex<Read>> = Arc::default();
        let cancel = self.cancel.child_token();
        // An action that reported progress and then stopped increasing it is stopped; when its
        // type declares that its actions report progress, one silent from its start too.
        let declared = self.types.get(i).and_then(|t| t.init.progress_timeout);
        let stall = resource.timeouts.progress.or(declared).unwrap_or(self.options.timeouts.progress);
        if declared.is_some() {
            read.lock().expect("messages lock").moved = Some(std::time::Instant::now());
        }
        let watchdog = matches!(phase, Phase::Action(_)).then(|| {
            let (read, cancel) = (read.clone(), cancel.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(200).min(stall)).await;
                    let mut read = read.lock().expect("messages lock");
                    if read.moved.is_some_and(|at| at.elapsed() >= stall) {
                        read.stalled = Some(stall);
                        cancel.cancel();
                        return;
                    }
                }
            })
        });
        let program = match &invocable.image {
            Some(image) => TypeRef::parse(image, &resource.workspace).map_err(|problem| {
                ResourceError::new(
                    phase.clone(),
                    Cause::Protocol { problem: format!("image: {problem}"), output: String::new() },
                )
            })?,
            None => resource.type_ref.clone(),
        };
        let invocation = Invocation {
            program,
            entrypoint: invocable.entrypoint.clone(),
            args: invocable.args.clone(),
            stdin,
            mounts: self.types.get(i).map_or_else(Vec::new, |t| t.mounts.clone()),
            env: self.environment(i, phase),
            workdir: Some(resource.workspace.clone()),
            timeout: match phase {
                Phase::Action(_) => resource.timeouts.action.unwrap_or(self.options.timeouts.action),
                _ => resource.timeouts.state.unwrap_or(self.options.timeouts.state),
            },
            labels: InvocationLabels {
                manifest: self.manifest.name.clone(),
                resource: resource.name.clone(),
                phase: phase.label(),
                run_id: self.options.run_id.clone(),
                formerly: self.manifest.source.spec.formerly(&resource.name),
            },
            sink: self.sink(&resource.name, phase, stream_all, &read),
            cancel,
        };
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        self.emit(RunEvent::Invoking { resource: resource.name.clone(), phase: phase.clone() });
        let mask = &self.manifest.mask;
        let invoked = self.executor.invoke(invocation).await;
        if let Some(watchdog) = watchdog {
            watchdog.abort();
        }
        let mut read = std::mem::take(&mut *read.lock().expect("messages lock"));
        if let Some(stall) = read.stalled.filter(|_| invoked.is_err()) {
            let stall = humantime::format_duration(stall);
            let message = match read.percent {
                Some(_) => format!("reported no progress for {stall} and was stopped"),
                None => format!(
                    "reported no progress in its first {stall} (its type's init declares progress_timeout) and was stopped"
                ),
            };
            return Err(ResourceError::new(phase.clone(), Cause::Exec { reason: "ProgressTimedOut", message }));
        }
        let outcome = invoked.map_err(|e| ResourceError::exec(phase.clone(), &e).masked(mask))?;
        if let Some(Line::Invalid(why)) = read.reader.finish() {
            read.invalid.get_or_insert(why);
        }
        if !outcome.exit.success() {
            // The seed: a failure's message is stderr's, or else the last message's error.
            let error = match read.error.filter(|_| outcome.stderr.iter().all(u8::is_ascii_whitespace)) {
                Some(message) => ResourceError::exit_saying(phase.clone(), outcome.exit, message),
                // Stdout as shown: without the messages.
                None if stream_all => {
                    let shown = ExecOutcome { stdout: read.text.into_bytes(), ..outcome.clone() };
                    ResourceError::exit(phase.clone(), &shown)
                }
                None => ResourceError::exit(phase.clone(), &outcome),
            };
            return Err(error.masked(mask).with_results(read.results));
        }
        if let Some(why) = read.invalid {
            let problem = format!("its [AGENT_MESSAGE] output is invalid: {why}");
            return Err(
                ResourceError::new(phase.clone(), Cause::Protocol { problem, output: String::new() }).masked(mask)
            );
        }
        Ok((outcome, read.results))
    }

    /// What every program is told about itself, then the resource's own `env`.
    fn environment(&self, i: usize, phase: &Phase) -> Vec<(String, String)> {
        let resource = &self.manifest.resources[i];
        let phase_name = match phase {
            Phase::Action(_) => "action",
            Phase::Verify => "verify",
            Phase::Init => "init",
            Phase::State | Phase::Config => "state",
        };
        let mut env = vec![
            (RUN_ID_ENV.to_string(), self.options.run_id.clone()),
            ("DEPLOYSTER_MANIFEST".to_string(), self.manifest.name.clone()),
            ("DEPLOYSTER_RESOURCE".to_string(), resource.name.clone()),
            ("DEPLOYSTER_PHASE".to_string(), phase_name.to_string()),
        ];
        if let Phase::Action(action) = phase {
            env.push(("DEPLOYSTER_ACTION".to_string(), action.clone()));
        }
        env.extend(resource.env.iter().cloned());
        env
    }

    fn sink(&self, resource: &str, phase: &Phase, stream_all: bool, read: &Arc<Mutex<Read>>) -> Option<LineSink> {
        if !stream_all && !self.options.verbose {
            return None;
        }
        let (observer, mask, read) = (self.observer.clone(), self.manifest.mask.clone(), read.clone());
        let (resource, phase) = (resource.to_string(), phase.clone());
        Some(Arc::new(move |stream, line: &str| {
            if stream_all && stream == Stream::Stdout {
                let mut read = read.lock().expect("messages lock");
                match read.reader.line(line) {
                    Line::Text(text) => {
                        if read.text.len() < 64 * 1024 {
                            read.text.push_str(&text);
                            read.text.push('\n');
                        }
                    }
                    Line::Pending => return,
                    Line::Invalid(why) => {
                        read.invalid.get_or_insert(why);
                        return;
                    }
                    Line::Message(message) => {
                        if let Some(percent) = read.take(message) {
                            let (resource, phase) = (resource.clone(), phase.clone());
                            observer.on_event(&RunEvent::Progress { resource, phase, percent });
                        }
                        return;
                    }
                }
            }
            if stream_all || stream == Stream::Stderr {
                let (resource, phase, line) = (resource.clone(), phase.clone(), mask.text(line));
                observer.on_event(&RunEvent::Output { resource, phase, stream, line });
            }
        }))
    }
}
