//! An in-memory executor for unit tests: a closure answers each invocation, and every call is
//! recorded so tests can assert exactly what ran.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{ExecError, Executor, Exit, Invocation, Outcome, Stream};

/// One recorded invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeCall {
    pub resource: String,
    /// `init`, `state` or `action:<name>`.
    pub phase: String,
    pub args: Vec<String>,
    /// The request the engine sent, parsed.
    pub request: Value,
}

/// The scripted answer to an invocation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FakeReply {
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
    pub delay: Duration,
}

impl FakeReply {
    /// A successful invocation printing `value` as JSON.
    pub fn json(value: Value) -> Self {
        Self { stdout: value.to_string(), ..Self::default() }
    }

    /// An invocation that exits with `code`, printing `stderr`.
    pub fn fail(code: i32, stderr: &str) -> Self {
        Self { exit: code, stderr: stderr.to_string(), ..Self::default() }
    }
}

type Script = dyn Fn(&FakeCall) -> FakeReply + Send + Sync;

/// Answers invocations from a script.
pub struct FakeExecutor {
    script: Box<Script>,
    calls: Arc<Mutex<Vec<FakeCall>>>,
}

impl FakeExecutor {
    pub fn new(script: impl Fn(&FakeCall) -> FakeReply + Send + Sync + 'static) -> Self {
        Self { script: Box::new(script), calls: Arc::default() }
    }

    /// Every invocation so far, in the order they started.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.calls.lock().expect("calls lock").clone()
    }
}

#[async_trait]
impl Executor for FakeExecutor {
    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let call = FakeCall {
            resource: invocation.labels.resource.clone(),
            phase: invocation.labels.phase.clone(),
            args: invocation.args.clone(),
            request: serde_json::from_slice(&invocation.stdin).unwrap_or(Value::Null),
        };
        self.calls.lock().expect("calls lock").push(call.clone());
        let reply = (self.script)(&call);
        if !reply.delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(reply.delay) => {}
                _ = tokio::time::sleep(invocation.timeout) => return Err(ExecError::TimedOut(invocation.timeout)),
                _ = invocation.cancel.cancelled() => return Err(ExecError::Cancelled),
            }
        }
        if let Some(sink) = &invocation.sink {
            reply.stdout.lines().for_each(|l| sink(Stream::Stdout, l));
            reply.stderr.lines().for_each(|l| sink(Stream::Stderr, l));
        }
        Ok(Outcome {
            exit: Exit::Code(reply.exit),
            stdout: reply.stdout.into_bytes(),
            stderr: reply.stderr.into_bytes(),
            elapsed: reply.delay,
        })
    }
}
