//! What every step of one run shares: the manifest, the options, the executor behind a
//! semaphore, the observers and the cancellation — and running one program for a resource.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::error::{Cause, Phase, ResourceError};
use super::events::{IntentError, Observer, RunEvent};
use super::executor::process::RUN_ID_ENV;
use super::executor::{Executor, Invocation, InvocationLabels, LineSink, Mount, Outcome as ExecOutcome, Stream};
use super::protocol::Invocable;
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
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism().map_or(4, |n| n.get()),
            verbose: false,
            timeouts: Timeouts::default(),
            run_id: new_run_id(),
        }
    }
}

/// How long invocations may run: actions, and everything else (init, state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub action: Duration,
    pub state: Duration,
}

impl Default for Timeouts {
    /// 15 minutes for actions, 2 for init and state.
    fn default() -> Self {
        Self { action: Duration::from_secs(15 * 60), state: Duration::from_secs(2 * 60) }
    }
}

impl Timeouts {
    /// The same limit for every invocation.
    pub fn all(limit: Duration) -> Self {
        Self { action: limit, state: limit }
    }
}

/// A fresh deployment id: a UUIDv7, so ids sort by time.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// What every step of a run shares. Read-only once built.
pub(crate) struct Context {
    pub manifest: Arc<ValidatedManifest>,
    pub options: RunOptions,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) permits: Semaphore,
    pub(crate) cancel: CancellationToken,
}

impl Context {
    pub(crate) fn emit(&self, event: RunEvent) {
        self.observer.on_event(&event);
    }

    /// Makes the intent to run `action` for resource `i` durable, or fails the action.
    pub(crate) async fn record_intent(&self, i: usize, action: &str) -> Result<(), ResourceError> {
        let result = self.observer.on_intent(&self.manifest.resources[i].name, action).await;
        let cause = |e: IntentError| Cause::Exec { reason: "IntentNotRecorded", message: e.to_string() };
        result.map_err(|e| ResourceError::new(Phase::Action(action.into()), cause(e)))
    }

    /// Runs one program for resource `i` and requires it to exit 0. `stream_all` sends every
    /// output line to the observer (actions); otherwise only stderr, and only when verbose.
    pub(crate) async fn run_program(
        &self,
        i: usize,
        phase: &Phase,
        invocable: &Invocable,
        mounts: &[Mount],
        stdin: Vec<u8>,
        stream_all: bool,
    ) -> Result<ExecOutcome, ResourceError> {
        let resource = &self.manifest.resources[i];
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
            mounts: mounts.to_vec(),
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
            },
            sink: self.sink(&resource.name, phase, stream_all),
            cancel: self.cancel.child_token(),
        };
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        self.emit(RunEvent::Invoking { resource: resource.name.clone(), phase: phase.clone() });
        let mask = &self.manifest.mask;
        let outcome =
            self.executor.invoke(invocation).await.map_err(|e| ResourceError::exec(phase.clone(), &e).masked(mask))?;
        match outcome.exit.success() {
            true => Ok(outcome),
            false => Err(ResourceError::exit(phase.clone(), &outcome).masked(mask)),
        }
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

    fn sink(&self, resource: &str, phase: &Phase, stream_all: bool) -> Option<LineSink> {
        if !stream_all && !self.options.verbose {
            return None;
        }
        let (observer, mask) = (self.observer.clone(), self.manifest.mask.clone());
        let (resource, phase) = (resource.to_string(), phase.clone());
        Some(Arc::new(move |stream, line: &str| {
            if stream_all || stream == Stream::Stderr {
                let (resource, phase, line) = (resource.clone(), phase.clone(), mask.text(line));
                observer.on_event(&RunEvent::Output { resource, phase, stream, line });
            }
        }))
    }
}
