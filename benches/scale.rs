//! Scale benchmark; prints figures, asserts nothing. `cargo bench --bench scale`.
//!
//! A manifest of 5,000 independent `builtin/file` resources, applied (all MISSING) and applied
//! again (a no-op), by the real `deployster apply` with its deployment log — once with the
//! built-ins answered inside deployster (the default) and once as `deployster __type` programs
//! (`DEPLOYSTER_BUILTINS=process`, as every built-in call ran before). For each: wall time and
//! peak RSS of the deployster process, and beside them the sum of the programs' own run times
//! (the same manifest run in-library through an executor that adds up each call's time).
//!
//! Targets (issue 14, against the 49.6 s apply and 14.9 s no-op measured before): apply and
//! no-op each under 5 % of those (2.48 s, 0.745 s), peak RSS ≤ 100 MB.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use deployster::builtins::InProcess;
use deployster::engine::context::RunOptions;
use deployster::engine::events::ApproveAll;
use deployster::engine::executor::process::ProcessExecutor;
use deployster::engine::executor::{ExecError, Executor, Invocation, Outcome};
use deployster::engine::load_validated;
use deployster::engine::run::Engine;
use deployster::executors::route::Router;

const RESOURCES: usize = 5_000;
const BEFORE_APPLY: Duration = Duration::from_millis(49_600);
const BEFORE_NO_OP: Duration = Duration::from_millis(14_900);

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!("{RESOURCES} independent builtin/file resources (each pass: init, state; apply: + write, state)");
    println!(
        "  {:<28} {:>10} {:>10} {:>12} {:>11} {:>14}",
        "", "wall", "peak RSS", "programs' Σ", "overhead", "vs before"
    );
    for (label, builtins) in [("in-process (default)", "in-process"), ("as programs (before)", "process")] {
        let cli = Workspace::new();
        let apply = cli.apply(builtins);
        let no_op = cli.apply(builtins);
        let library = Workspace::new();
        let (own_apply, own_no_op) = runtime.block_on(library.own_times(builtins));
        for (what, run, own, before) in
            [("apply", &apply, own_apply, BEFORE_APPLY), ("no-op", &no_op, own_no_op, BEFORE_NO_OP)]
        {
            println!(
                "  {:<28} {:>8.2} s {:>7.0} MB {:>10.2} s {:>9.2} s {:>13.1} %",
                format!("{label}: {what}"),
                run.wall.as_secs_f64(),
                run.peak_rss_kib as f64 / 1024.0,
                own.as_secs_f64(),
                run.wall.saturating_sub(own).as_secs_f64(),
                100.0 * run.wall.as_secs_f64() / before.as_secs_f64(),
            );
        }
    }
    println!("  targets: apply < 2.48 s and no-op < 0.745 s (5 % of before), peak RSS ≤ 100 MB");
}

struct Workspace {
    dir: tempfile::TempDir,
}

/// What one `deployster apply` took.
struct Run {
    wall: Duration,
    peak_rss_kib: u64,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("out")).expect("out dir");
        let mut yaml = String::from("resources:\n");
        for i in 0..RESOURCES {
            yaml.push_str(&format!(
                "  f{i}: {{ type: builtin/file, config: {{ path: out/f{i}, content: \"{i}\" }} }}\n"
            ));
        }
        std::fs::write(dir.path().join("manifest.yaml"), yaml).expect("write manifest");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `deployster apply --yes`, its wall time and peak RSS (from `wait4`, which also reaps it).
    #[allow(clippy::zombie_processes)]
    fn apply(&self, builtins: &str) -> Run {
        let started = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_deployster"))
            .args(["apply", "-f", "manifest.yaml", "--yes"])
            .current_dir(self.path())
            .env("DEPLOYSTER_BUILTINS", builtins)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start deployster");
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, whose pid we hold; both pointers are valid.
        let waited = unsafe { nix::libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        let wall = started.elapsed();
        assert_eq!(waited, child.id() as i32, "wait4");
        assert!(nix::libc::WIFEXITED(status) && nix::libc::WEXITSTATUS(status) == 0, "deployster apply failed");
        Run { wall, peak_rss_kib: usage.ru_maxrss as u64 }
    }

    /// The programs' own run times of an apply and a no-op of this manifest, in-library.
    async fn own_times(&self, builtins: &str) -> (Duration, Duration) {
        let programs: Arc<dyn Executor> = Arc::new(ProcessExecutor::new(env!("CARGO_BIN_EXE_deployster").into()));
        let inner: Arc<dyn Executor> = if builtins == "process" {
            programs
        } else {
            Arc::new(Router { in_process: Some(Arc::new(InProcess::new())), ..Router::programs(programs) })
        };
        let timed = Arc::new(Timed { inner, own: Mutex::default() });
        let manifest = Arc::new(load_validated(&[self.path().join("manifest.yaml")], &[]).expect("valid manifest"));
        let mut own = Vec::new();
        for _ in 0..2 {
            *timed.own.lock().unwrap() = Duration::ZERO;
            let engine = Engine::new(manifest.clone(), timed.clone(), RunOptions::default());
            let prepared = engine.prepare().await.expect("init");
            let plan = prepared.plan().await;
            let report = prepared.apply(&plan, &ApproveAll).await.expect("applicable");
            assert!(report.succeeded(), "every resource applied");
            own.push(*timed.own.lock().unwrap());
        }
        (own[0], own[1])
    }
}

/// Adds up each call's own time.
struct Timed {
    inner: Arc<dyn Executor>,
    own: Mutex<Duration>,
}

#[async_trait]
impl Executor for Timed {
    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let outcome = self.inner.invoke(invocation).await?;
        *self.own.lock().unwrap() += outcome.elapsed;
        Ok(outcome)
    }
}
