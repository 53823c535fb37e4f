//! A global budget for checks: init and state reads that start a program (a process, a
//! container) run at most so many per second, spread evenly ([`Budget`]), so that thousands of
//! Manifests due at once never stampede. Built-ins answered in-process cost next to nothing and
//! are not counted. Actions are never held back: what a pass decided to do, it does.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use super::{ExecError, Executor, Invocation, Outcome};
use crate::engine::schedule::Budget;
use crate::engine::typeref::TypeRef;

pub struct Budgeted {
    inner: Arc<dyn Executor>,
    budget: Arc<Mutex<Budget>>,
}

impl Budgeted {
    pub fn new(inner: Arc<dyn Executor>, per_second: u32) -> Self {
        SharedBudget::new(per_second).over(inner)
    }
}

/// One budget for every executor put under it: the controller's passes each have executors of
/// their own, and one budget between them.
#[derive(Clone)]
pub struct SharedBudget(Arc<Mutex<Budget>>);

impl SharedBudget {
    pub fn new(per_second: u32) -> Self {
        SharedBudget(Arc::new(Mutex::new(Budget::new(per_second))))
    }

    /// `inner` within this budget.
    pub fn over(&self, inner: Arc<dyn Executor>) -> Budgeted {
        Budgeted { inner, budget: self.0.clone() }
    }
}

/// The default budget: 100 checks per second per core — a core's worth of small programs.
pub fn default_per_second() -> u32 {
    100 * std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

#[async_trait]
impl Executor for Budgeted {
    async fn preflight(&self, programs: &[TypeRef]) -> Result<(), ExecError> {
        self.inner.preflight(programs).await
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        if !invocation.labels.phase.starts_with("action:") && self.inner.starts_program(&invocation) {
            let wait = self.budget.lock().expect("budget lock").take(Instant::now());
            if !wait.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = invocation.cancel.cancelled() => return Err(ExecError::Cancelled),
                }
            }
        }
        self.inner.invoke(invocation).await
    }

    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        self.inner.stop_run(run_id).await
    }

    fn starts_program(&self, invocation: &Invocation) -> bool {
        self.inner.starts_program(invocation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::executor::InvocationLabels;
    use crate::engine::executor::fake::{FakeExecutor, FakeReply};
    use std::time::Duration;

    fn call(phase: &str) -> Invocation {
        Invocation {
            labels: InvocationLabels { phase: phase.into(), ..InvocationLabels::default() },
            ..Invocation::new(TypeRef::Builtin("file".into()), Duration::from_secs(5))
        }
    }

    #[tokio::test]
    async fn checks_beyond_the_budget_wait_and_actions_do_not() {
        let budgeted = Budgeted::new(Arc::new(FakeExecutor::new(|_| FakeReply::default())), 20);
        let started = std::time::Instant::now();
        for _ in 0..20 {
            budgeted.invoke(call("state")).await.unwrap();
        }
        budgeted.invoke(call("action:write")).await.unwrap();
        let burst = started.elapsed();
        // The 21st and 22nd checks wait 50 and 100 ms for their tokens.
        budgeted.invoke(call("state")).await.unwrap();
        budgeted.invoke(call("init")).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(90), "{:?}", started.elapsed());
        assert!(burst < started.elapsed() - Duration::from_millis(80), "a second's worth and the action went at once");
        let cancelled = call("state");
        cancelled.cancel.cancel();
        assert!(matches!(budgeted.invoke(cancelled).await, Err(ExecError::Cancelled)));
    }

    #[tokio::test]
    async fn executors_over_one_budget_share_it() {
        let budget = SharedBudget::new(20);
        let first = budget.over(Arc::new(FakeExecutor::new(|_| FakeReply::default())));
        let second = budget.over(Arc::new(FakeExecutor::new(|_| FakeReply::default())));
        let started = std::time::Instant::now();
        for _ in 0..10 {
            first.invoke(call("state")).await.unwrap();
            second.invoke(call("state")).await.unwrap();
        }
        assert!(started.elapsed() < Duration::from_millis(40), "a second's worth between them at once");
        second.invoke(call("state")).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(40), "the 21st waits: {:?}", started.elapsed());
    }

    /// Answers in this process, as built-ins do.
    struct Free;

    #[async_trait]
    impl Executor for Free {
        async fn invoke(&self, _: Invocation) -> Result<Outcome, ExecError> {
            Ok(Outcome { exit: super::super::Exit::Code(0), stdout: vec![], stderr: vec![], elapsed: Duration::ZERO })
        }

        fn starts_program(&self, _: &Invocation) -> bool {
            false
        }
    }

    #[tokio::test]
    async fn calls_that_start_no_program_are_not_counted() {
        let budgeted = Budgeted::new(Arc::new(Free), 1);
        let started = std::time::Instant::now();
        for _ in 0..100 {
            budgeted.invoke(call("state")).await.unwrap();
        }
        assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
    }
}
