//! The executor that answers built-in types inside deployster: the same request bytes in, the
//! same reply bytes, exit code and output lines out as `deployster __type …` would give — only
//! the process start goes (about 12 ms each, and most of a large manifest's time).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use crate::engine::executor::output::Capture;
use crate::engine::executor::{
    DEFAULT_OUTPUT_LIMIT, ExecError, Executor, Exit, Invocation, Outcome, Stream, check_workdir,
};
use crate::engine::typeref::TypeRef;

/// Answers the built-in types it is handed in this process: those [`super::runs_in_process`]
/// says may be (the router, `crate::executors::route`, hands it those alone; local programs and
/// `builtin/package`'s scripts run as programs).
#[derive(Default)]
pub struct InProcess {
    answered: AtomicU64,
    /// CPU time spent answering, in nanoseconds.
    cpu_nanos: Arc<AtomicU64>,
    /// Each type's init answer: it depends on the type alone (its request need only be JSON),
    /// so it is made once for the life of the process, as programs' are kept.
    inits: Mutex<HashMap<String, super::Reply>>,
    inits_reused: AtomicU64,
}

impl InProcess {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many init calls were answered with a kept answer.
    pub fn inits_reused(&self) -> u64 {
        self.inits_reused.load(Ordering::Relaxed)
    }

    /// The kept init answer of built-in `name`, when `request` is one it would give it to.
    fn kept_init(&self, name: &str, args: &[String], request: &[u8]) -> Option<super::Reply> {
        if !args.is_empty() {
            return None;
        }
        let kept = self.inits.lock().expect("inits lock").get(name).cloned()?;
        serde_json::from_slice::<serde::de::IgnoredAny>(request).ok()?;
        self.inits_reused.fetch_add(1, Ordering::Relaxed);
        Some(kept)
    }

    /// How many calls were answered here, without a process.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// The CPU time the calls answered here took: what their programs would have spent.
    pub fn cpu_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.cpu_nanos.load(Ordering::Relaxed))
    }

    async fn answer(&self, name: String, invocation: Invocation) -> Result<Outcome, ExecError> {
        check_workdir(&invocation)?;
        if invocation.cancel.is_cancelled() {
            return Err(ExecError::Cancelled);
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let Invocation { args, stdin, timeout, sink, .. } = invocation;
        let reply = match self.kept_init(&name, &args, &stdin) {
            Some(reply) => reply,
            None => self.run(name, args, stdin, timeout).await?,
        };
        let mut stdout = Capture::new(Stream::Stdout, DEFAULT_OUTPUT_LIMIT, sink.clone());
        stdout.push(reply.stdout.as_bytes())?;
        let mut stderr = Capture::new(Stream::Stderr, DEFAULT_OUTPUT_LIMIT, sink);
        stderr.push(reply.stderr.as_bytes())?;
        Ok(Outcome {
            exit: if reply.code == 0 { Exit::Code(0) } else { Exit::Failed },
            stdout: stdout.finish(),
            stderr: stderr.finish(),
            elapsed: started.elapsed(),
        })
    }

    /// Answers one call on a blocking thread; keeps a successful init answer.
    async fn run(
        &self,
        name: String,
        args: Vec<String>,
        stdin: Vec<u8>,
        timeout: std::time::Duration,
    ) -> Result<super::Reply, ExecError> {
        let init = args.is_empty().then(|| name.clone());
        // A call is short and does its work atomically (a file is written aside and renamed
        // into place), so once started it is not cancelled half-way: the run's cancellation
        // takes effect before the next call. Its time limit still holds for the caller.
        let cpu_nanos = self.cpu_nanos.clone();
        let call = tokio::task::spawn_blocking(move || {
            let before = thread_cpu_nanos();
            let input = String::from_utf8_lossy(&stdin);
            let reply = super::respond(&name, &args, &input);
            cpu_nanos.fetch_add(thread_cpu_nanos().saturating_sub(before), Ordering::Relaxed);
            reply
        });
        let reply = match tokio::time::timeout(timeout, call).await {
            Err(_) => return Err(ExecError::TimedOut(timeout)),
            Ok(Err(panicked)) => return Err(ExecError::Io(std::io::Error::other(panicked.to_string()))),
            Ok(Ok(reply)) => reply,
        };
        if let Some(name) = init
            && reply.code == 0
        {
            self.inits.lock().expect("inits lock").insert(name, reply.clone());
        }
        Ok(reply)
    }
}

#[async_trait]
impl Executor for InProcess {
    /// Answered here: no program starts.
    fn starts_program(&self, _: &Invocation) -> bool {
        false
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        match &invocation.program {
            TypeRef::Builtin(name) => self.answer(name.clone(), invocation).await,
            other => Err(ExecError::Unavailable(format!("{other} is no built-in: it cannot be answered in process"))),
        }
    }
}

/// The CPU time this thread has used, in nanoseconds.
fn thread_cpu_nanos() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}
