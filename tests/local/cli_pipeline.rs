//! `deployster pipeline`: the bundled example driven end to end, a failing step, a drive
//! killed with `kill -9` and resumed, and an invalid pipeline — the real binary on real
//! manifests (built-in types and the fixture type).

use std::time::{Duration, Instant};

use crate::support::{Run, Workspace};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// The bundled example in a workspace, its bake shortened to nothing.
fn example() -> Workspace {
    example_baking("0s")
}

/// The bundled example in a workspace, its bake `bake` long.
fn example_baking(bake: &str) -> Workspace {
    let ws = Workspace::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pipeline");
    for file in ["pipeline.yaml", "app.yaml", "smoke.yaml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        ws.write(file, &text.replace("bake: 5s", &format!("bake: {bake}")));
    }
    ws
}

/// `pipeline ARGS`, again while another command holds the pipeline's state directory for a
/// moment (a `run --wait` between two of its rounds).
fn pipeline_when_free(ws: &Workspace, args: &[&str]) -> Run {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = pipeline(ws, args);
        if !run.stderr.contains("is in use by another deployster run") || Instant::now() > deadline {
            return run;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The README's walkthrough with `run --wait`: one command follows the revision through
/// staging, the one-box and its bake, then waits for the approval given from another shell, and
/// ends when the fleet is through. An approval asked during the bake says what the revision
/// waits for, and when approval becomes possible.
#[test]
fn run_wait_follows_a_revision_through_its_bake_and_an_approval_given_meanwhile() {
    let ws = example_baking("3s");
    let out = format!("root={}/out", ws.root());
    let args = ["pipeline", "run", "-f", "pipeline.yaml", "--var", "version=1.4.2", "--var", &out, "--wait"];
    let child = ws.spawn(&[&args[..], &["--timeout", "2m"]].concat());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.exists("out/prod-a1/release.txt") {
        assert!(Instant::now() < deadline, "the one-box was never deployed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let approve = ["approve", "-f", "pipeline.yaml", "--revision", "1.4.2", "prod/fleet"];
    let early = pipeline_when_free(&ws, &approve);
    assert_eq!(early.code, 2, "{}", early.all());
    assert!(
        early.stderr.contains(
            "nothing of revision 1.4.2 waits for approval at `prod/fleet` yet: prod/onebox/prod-a1/bake waits for bake until"
        ) && early.stderr.contains("approval at `prod/fleet` becomes possible once the steps before it are through"),
        "{}",
        early.all()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let frontier = status(&ws)["frontier"].to_string();
        if frontier.contains("approval of prod/fleet") {
            break;
        }
        assert!(Instant::now() < deadline, "the gate was never reached: {frontier}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let approved = pipeline_when_free(&ws, &approve);
    assert_eq!(approved.code, 0, "{}", approved.all());
    let waited = Run::from(child.wait_with_output().unwrap());
    assert_eq!(waited.code, 0, "{}", waited.all());
    assert!(waited.stdout.contains("Revision 1.4.2: through"), "{}", waited.all());
    assert_eq!(ws.read("out/prod-b2/release.txt"), "1.4.2 in region b\n");
    // What it waited for, each said once, as it began.
    for said in
        ["prod/onebox/prod-a1/bake waits for bake until", "prod/fleet/prod-a2/deploy waits for approval of prod/fleet"]
    {
        assert_eq!(waited.stderr.matches(said).count(), 1, "{said}: {}", waited.all());
    }

    // A gate that is no group: the closest named.
    let typo = pipeline(&ws, &["approve", "-f", "pipeline.yaml", "--revision", "1.4.2", "prod/flet"]);
    assert_eq!(typo.code, 2, "{}", typo.all());
    assert!(typo.stderr.contains("(did you mean `prod/fleet`?)"), "{}", typo.all());
}

fn pipeline(ws: &Workspace, args: &[&str]) -> Run {
    let mut all = vec!["pipeline"];
    all.extend(args);
    ws.run(&all)
}

fn status(ws: &Workspace) -> Value {
    let run = pipeline(ws, &["status", "-f", "pipeline.yaml", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    run.json()
}

fn node<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["nodes"].as_array().unwrap().iter().find(|n| n["node"] == name).unwrap_or_else(|| panic!("{name}: {status}"))
}

#[test]
fn the_example_goes_through_staging_then_waves_of_prod_after_approval() {
    let ws = example();
    let out = format!("root={}/out", ws.root());
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml", "--var", "version=1.4.2", "--var", &out]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("prod/fleet/prod-a2/deploy waits for approval of prod/fleet"), "{}", run.all());
    assert_eq!(ws.read("out/prod-a1/release.txt"), "1.4.2 in region a\n", "the one-box went first");
    assert!(!ws.exists("out/prod-a2/release.txt"));
    assert!(ws.exists("out/stg-1/smoke-1.4.2.txt"), "the smoke test ran in staging");

    let refused = pipeline(&ws, &["approve", "-f", "pipeline.yaml", "--revision", "1.4.2", "prod/onebox"]);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(
        refused.stderr.contains("nothing of revision 1.4.2 waits for approval at `prod/onebox`"),
        "{}",
        refused.all()
    );
    let approved = pipeline(&ws, &["approve", "-f", "pipeline.yaml", "--revision", "1.4.2", "prod/fleet"]);
    assert_eq!(approved.code, 0, "{}", approved.all());

    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("Revision 1.4.2: through"), "{}", run.all());
    assert_eq!(ws.read("out/prod-b2/release.txt"), "1.4.2 in region b\n", "the target's own vars");
    let status = status(&ws);
    for name in ["pipeline", "staging", "prod", "prod/fleet", "prod/fleet/prod-b1"] {
        assert_eq!(node(&status, name)["latest_through"], "1.4.2", "{name}: {status}");
    }
    assert_eq!(node(&status, "prod/fleet/prod-b1")["current"], "1.4.2");

    // The steps' own deployment logs are the manifests' ordinary ones.
    let step_log = ws.path(".deployster/pipelines/pipeline/steps/prod/fleet/prod-b1/deploy");
    let history = ws.run(&["history", "-f", "app.yaml", "--state-dir", step_log.to_str().unwrap()]);
    assert_eq!(history.code, 0, "{}", history.all());
    assert!(history.stdout.contains("applied"), "{}", history.all());

    let log = pipeline(&ws, &["history", "-f", "pipeline.yaml", "--output", "json", "--limit", "1000"]);
    let entries = log.json();
    let events: Vec<&str> = entries.as_array().unwrap().iter().rev().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events.iter().filter(|e| **e == "step-succeeded").count(), 2 * 5, "five targets, two steps each");
    assert_eq!(events.iter().filter(|e| **e == "approved").count(), 1);
    assert_eq!(*events.last().unwrap(), "pipeline-finished-successfully");
}

#[test]
fn a_failed_step_stops_its_revision_and_is_reported() {
    let ws = example();
    // A smoke test that fails: it writes into a directory nothing made.
    ws.write("smoke.yaml", "resources:\n  checked:\n    type: builtin/file\n    config: {path: \"{{ root }}/no-such-dir/smoke.txt\", content: x}\n");
    let out = format!("root={}/out", ws.root());
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml", "--var", "version=2.0.0", "--var", &out]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr.contains("error: pipeline pipeline: revision 2.0.0: step staging/all/stg-1/test failed: manifest"),
        "{}",
        run.all()
    );
    assert!(run.stderr.contains("resource `checked` failed in action"), "names the resource and phase: {}", run.all());
    assert!(run.stderr.contains("does not exist"), "and the cause: {}", run.all());
    assert!(!ws.exists("out/prod-a1"), "nothing after the failed step ran");
    let status = status(&ws);
    assert_eq!(node(&status, "staging")["latest_failed"], "2.0.0");
    assert_eq!(status["revisions"][0]["status"], "failed");
    // A later run does not try again: the revision is over.
    let again = pipeline(&ws, &["run", "-f", "pipeline.yaml"]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert!(again.stdout.contains("Revision 2.0.0: failed at staging/all/stg-1/test"), "{}", again.all());
}

/// The README's walkthrough as a user types it, with the one-box's bake kept (1 s): once the
/// bake is over, `approve` is taken at once (no `run` in between to record the bake's end);
/// the hints name the pipeline file, so they can be pasted; and a rollback's run is told apart
/// from the revision's first.
#[test]
fn approve_after_the_bake_needs_no_run_and_the_hints_and_runs_are_told_apart() {
    let ws = example();
    ws.write("pipeline.yaml", &ws.read("pipeline.yaml").replace("bake: 0s", "bake: 1s"));
    let out = format!("root={}/out", ws.root());
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml", "--var", "version=1.4.2", "--var", &out]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("prod/onebox/prod-a1/bake waits for bake until"), "{}", run.all());
    std::thread::sleep(Duration::from_millis(1500));

    let settled = status(&ws);
    let waiting = settled["frontier"].as_array().unwrap().iter().find(|s| s["step"] == "prod/fleet/prod-a2/deploy");
    let waits_for = waiting.map(|s| s["waits_for"].as_str().unwrap_or_default()).unwrap_or_default();
    assert!(
        waits_for.contains("`deployster pipeline approve -f pipeline.yaml --revision 1.4.2 prod/fleet`"),
        "status sees the bake over, and its hint names the file: {settled}"
    );
    let approved = pipeline(&ws, &["approve", "-f", "pipeline.yaml", "--revision", "1.4.2", "prod/fleet"]);
    assert_eq!(approved.code, 0, "{}", approved.all());
    assert!(approved.stdout.contains("`deployster pipeline run -f pipeline.yaml` goes on"), "{}", approved.all());
    // The fleet bakes too: run until it is through.
    for _ in 0..10 {
        let run = pipeline(&ws, &["run", "-f", "pipeline.yaml"]);
        assert_eq!(run.code, 0, "{}", run.all());
        if run.stdout.contains("Revision 1.4.2: through") {
            break;
        }
        assert!(run.stdout.contains("Revision 1.4.2: in progress"), "one run: no number\n{}", run.all());
        std::thread::sleep(Duration::from_millis(1100));
    }
    assert_eq!(ws.read("out/prod-b2/release.txt"), "1.4.2 in region b\n");

    // A rollback to 1.4.2 (registered again once its run ended) is a second run of it.
    let again = pipeline(&ws, &["run", "-f", "pipeline.yaml", "--var", "version=1.4.2", "--var", &out]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert!(again.stdout.contains("Revision 1.4.2 (run 1): through"), "{}", again.all());
    assert!(again.stdout.contains("Revision 1.4.2 (run 2): in progress"), "{}", again.all());
    let status = status(&ws);
    let runs: Vec<(&str, &Value)> =
        status["revisions"].as_array().unwrap().iter().map(|r| (r["status"].as_str().unwrap(), &r["run"])).collect();
    assert_eq!(runs, [("through", &Value::from(1)), ("in progress", &Value::from(2))], "{status}");
}

/// Two stages of one target each: the first quick, the second's action 3 s long, holding `lock`
/// (its start is logged in `lock.log`).
fn slow_second_step() -> Workspace {
    let ws = Workspace::new();
    ws.write(
        "first.yaml",
        &format!(
            "resources:\n  one: {{ type: ./fixture, config: {{ marker: {0}/one, log: {0}/one.log }} }}\n",
            ws.root()
        ),
    );
    ws.write(
        "second.yaml",
        &format!(
            "resources:\n  two: {{ type: ./fixture, config: {{ marker: {0}/two, lock: {0}/lock, action_sleep_ms: 3000 }} }}\n",
            ws.root()
        ),
    );
    ws.write(
        "pipeline.yaml",
        "revision: \"{{ version }}\"\nstages:\n  - {name: a, targets: [{name: t, manifest: first.yaml}], steps: [deploy]}\n  - {name: b, targets: [{name: t, manifest: second.yaml}], steps: [deploy]}\n",
    );
    ws
}

/// Starts a drive, and sends it `signal` once its second step runs.
fn signal_mid_step(ws: &Workspace, signal: Signal) -> std::process::Output {
    let drive = ws.spawn(&["pipeline", "run", "-f", "pipeline.yaml", "--var", "version=1"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(ws.path("lock.log")).is_ok_and(|l| l.contains("started")) {
        assert!(Instant::now() < deadline, "the second step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(drive.id() as i32), signal).unwrap();
    drive.wait_with_output().unwrap()
}

/// `kill -9` of a drive in the middle of a step: the next run records that step interrupted
/// and runs it again; the step that had succeeded is not run again.
#[test]
fn a_drive_killed_between_steps_resumes_without_rerunning_what_succeeded() {
    let ws = slow_second_step();
    signal_mid_step(&ws, Signal::SIGKILL);
    let actions =
        || std::fs::read_to_string(ws.path("one.log")).unwrap().lines().filter(|l| l.contains(" action:")).count();
    assert_eq!(actions(), 1, "the first step applied once before the kill");

    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stderr.contains("b/all/t/deploy: its drive ended before it did; running it again"), "{}", run.all());
    assert!(run.stdout.contains("Revision 1: through"), "{}", run.all());
    assert_eq!(actions(), 1, "the first step's action did not run again");
    let log = pipeline(&ws, &["history", "-f", "pipeline.yaml", "--output", "json", "--limit", "1000"]).json();
    let of = |target: &str| -> Vec<String> {
        log.as_array()
            .unwrap()
            .iter()
            .rev()
            .filter(|e| e["target"] == target)
            .map(|e| e["event"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(of("pipeline/a/all/t/deploy"), ["step-introduced", "step-started", "step-succeeded"]);
    assert_eq!(
        of("pipeline/b/all/t/deploy"),
        ["step-introduced", "step-started", "step-interrupted", "step-started", "step-succeeded"]
    );
}

#[test]
fn an_invalid_pipeline_exits_2_saying_why() {
    let ws = example();
    let cyclic = ws.read("pipeline.yaml").replace("  - name: staging\n", "  - name: staging\n    after: [prod]\n");
    ws.write("pipeline.yaml", &cyclic);
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml", "--var", "version=1"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains("pipeline pipeline.yaml: the stages form a cycle: staging → prod → staging"),
        "{}",
        run.all()
    );

    let ws = example();
    let run = pipeline(&ws, &["start", "-f", "pipeline.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("renders empty"), "{}", run.all());

    // Every subcommand says a file it cannot read as every other command does.
    for command in ["start", "run", "status", "history"] {
        let run = pipeline(&ws, &[command, "-f", "missing.yaml"]);
        assert_eq!(run.code, 2, "{command}: {}", run.all());
        assert!(run.stderr.starts_with("error: cannot read missing.yaml"), "{command}: {}", run.all());
    }
}

/// SIGINT (Ctrl-C) stops the running step's program and records the step as interrupted, not
/// failed (exit 1); the next run runs it again.
#[test]
fn ctrl_c_stops_the_running_step_and_the_next_run_finishes_it() {
    let ws = slow_second_step();
    let started = Instant::now();
    let stopped = Run::from(signal_mid_step(&ws, Signal::SIGINT));
    assert_eq!(stopped.code, 1, "{}", stopped.all());
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(stopped.stderr.contains("interrupted by SIGINT"), "{}", stopped.all());
    assert!(!stopped.stderr.contains("failed:"), "not a failure: {}", stopped.all());
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("Revision 1: through"), "{}", run.all());
    let log = pipeline(&ws, &["history", "-f", "pipeline.yaml", "--output", "json", "--limit", "1000"]).json();
    let events: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .filter(|e| e["target"] == "pipeline/b/all/t/deploy")
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["step-introduced", "step-started", "step-interrupted", "step-started", "step-succeeded"]);
}

/// The pipeline changed while a revision waits for the fleet's approval: a host added to the
/// fleet (not reached yet) is deployed by that revision; a host added to staging, which it has
/// gone past, is skipped, saying why, and deploys nothing.
#[test]
fn a_revision_under_way_reaches_a_new_host_ahead_and_skips_one_behind() {
    let ws = example();
    let out = format!("root={}/out", ws.root());
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml", "--var", "version=1.4.2", "--var", &out]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(ws.exists("out/prod-a1/release.txt"), "{}", run.all());
    let changed = ws
        .read("pipeline.yaml")
        .replace("      - {name: stg-1, manifest: app.yaml}\n", "      - {name: stg-1, manifest: app.yaml}\n      - {name: stg-2, manifest: app.yaml}\n")
        .replace("{name: prod-b2, manifest: app.yaml, vars: {region: b}}\n", "{name: prod-b2, manifest: app.yaml, vars: {region: b}}\n      - {name: prod-b3, manifest: app.yaml, vars: {region: b}}\n")
        .replace("targets: [prod-a2, prod-b1, prod-b2]", "targets: [prod-a2, prod-b1, prod-b2, prod-b3]");
    ws.write("pipeline.yaml", &changed);
    let approved = pipeline(&ws, &["approve", "-f", "pipeline.yaml", "--revision", "1.4.2", "prod/fleet"]);
    assert_eq!(approved.code, 0, "{}", approved.all());
    let run = pipeline(&ws, &["run", "-f", "pipeline.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("Revision 1.4.2: through"), "{}", run.all());
    assert_eq!(ws.read("out/prod-b3/release.txt"), "1.4.2 in region b\n", "the host ahead is reached");
    assert!(!ws.exists("out/stg-2"), "the host behind is not deployed");
    let status = status(&ws);
    assert_eq!(node(&status, "prod/fleet/prod-b3")["current"], "1.4.2", "{status}");
    assert_eq!(node(&status, "staging/all/stg-2")["current"], Value::Null, "{status}");
    let log = pipeline(&ws, &["history", "-f", "pipeline.yaml", "--output", "json", "--limit", "1000"]);
    let entries = log.json();
    let of = |target: &str| -> Vec<(String, String)> {
        let mut events: Vec<(String, String)> = entries
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["target"] == target)
            .map(|e| {
                (
                    e["event"].as_str().unwrap().to_string(),
                    e["detail"]["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        events.reverse();
        events
    };
    let plain = |event: &str| (event.to_string(), String::new());
    assert_eq!(
        of("pipeline/staging/all/stg-2/deploy"),
        [plain("step-introduced"), ("step-skipped".into(), "introduced-after".into())]
    );
    assert_eq!(
        of("pipeline/prod/fleet/prod-b3/deploy"),
        [plain("step-introduced"), plain("step-started"), plain("step-succeeded")]
    );
}
