//! Black-box tests of bad input: each gives a clear error naming the manifest, the resource, the
//! phase and the cause, and nothing after the failure point runs.
//!
//! Most manifests carry a `bystander`: an independent fixture resource that is MISSING, so its
//! marker file appears if (and only if) its action runs.

use crate::support::{Run, Workspace};

const BYSTANDER: &str = "  bystander: { type: ./fixture, config: { record: \"$WS/bystander.jsonl\" } }\n";

fn with_bystander(resources: &str) -> String {
    format!("resources:\n{BYSTANDER}{resources}")
}

/// Asserts the run failed with `code` and every `needle` appears in its output.
fn assert_failed(run: &Run, code: i32, needles: &[&str]) {
    assert_eq!(run.code, code, "unexpected exit code:\n{}", run.all());
    for needle in needles {
        assert!(run.all().contains(needle), "missing {needle:?} in:\n{}", run.all());
    }
}

/// Nothing ran at all: the failure was found before any program was started.
fn assert_nothing_ran(ws: &Workspace) {
    assert!(!ws.exists("bystander.jsonl"), "a state action ran despite a static error");
    assert!(!ws.exists("bystander.marker"), "an action ran despite a static error");
}

/// Programs may have read state, but no action ran.
fn assert_no_action_ran(ws: &Workspace) {
    let phases: Vec<String> = ws.recorded("bystander.jsonl").iter().map(|r| r["phase"].to_string()).collect();
    assert!(phases.iter().all(|p| !p.contains("action")), "an action ran: {phases:?}");
    assert!(!ws.exists("bystander.marker"), "the bystander was applied despite the failure");
}

#[test]
fn a_dependency_cycle_is_printed_and_nothing_runs() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  a: { type: ./fixture, dependencies: { x: b } }\n  b: { type: ./fixture, config: { v: \"{{ resources.c.state }}\" } }\n  c: { type: ./fixture, dependencies: { y: a } }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        2,
        &["manifest manifest.yaml is invalid", "dependency cycle (each depends on the next): a -> b -> c -> a"],
    );
    assert_nothing_ran(&ws);
}

#[test]
fn an_unknown_dependency_is_named() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander("  app: { type: ./fixture, dependencies: { db: database } }\n"));
    let run = ws.plan(&[]);
    assert_failed(
        &run,
        2,
        &["manifest manifest.yaml is invalid", "resource `app`: dependency `db` names unknown resource `database`"],
    );
    assert_nothing_ran(&ws);
}

#[test]
fn a_config_that_violates_the_schema_reports_every_violation() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  conf: { type: builtin/file, config: { path: \"$WS/x\", mode: 644, extra: \"{{ secret }}\" } }\n",
    ));
    let run = ws.apply(&["--var", "secret=hunter2"]);
    assert_failed(
        &run,
        2,
        &[
            "manifest manifest.yaml: 1 resource failed before anything ran",
            "resource `conf`: config: does not match the type's config_schema",
            "resources.conf.config: ",
            "\"content\" is a required property",
            "resources.conf.config.mode: ",
            "'extra' was unexpected",
        ],
    );
    assert!(!run.all().contains("hunter2"), "a variable's value leaked into the error:\n{}", run.all());
    assert_nothing_ran(&ws);
}

#[test]
fn an_undefined_variable_is_named_with_its_config_path() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  app:\n    type: builtin/file\n    config: { path: \"$WS/{{ enviroment }}.txt\", content: x }\n",
    ));
    let run = ws.apply(&["--var", "environment=prod"]);
    assert_failed(
        &run,
        2,
        &[
            "resource `app`: resources.app.config.path: undefined variable `enviroment`",
            "in `$WS/{{ enviroment }}.txt`".replace("$WS", &ws.root()).as_str(),
        ],
    );
    assert_nothing_ran(&ws);
}

#[test]
fn a_missing_dependency_field_fails_at_render_time_naming_the_path() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  dir: { type: builtin/directory, config: { path: \"$WS/d\" } }\n  f:\n    type: builtin/file\n    dependencies: { d: dir }\n    config: { path: \"{{ d.state.paht }}/f\", content: x }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "resource `f` failed in config",
            "resources.f.config.path: cannot render",
            "{{ d.state.paht }}/f",
            "undefined",
        ],
    );
    assert!(ws.exists("d"), "the independent dependency was applied");
    assert!(ws.exists("bystander.marker"), "the independent branch carried on");
}

#[test]
fn a_missing_required_plug_fails_before_anything_runs() {
    let ws = Workspace::new();
    ws.init_response(
        "app",
        r#"{"state_action": {"args": ["state"]}, "plugs": {"creds": {"container_path": "/creds"}}}"#,
    );
    ws.manifest(&with_bystander("  app: { type: ./fixture }\n"));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        2,
        &[
            "manifest manifest.yaml: 1 resource failed before anything ran",
            "resource `app`: init:",
            "requires plug `creds`, which the manifest does not provide",
        ],
    );
    assert_nothing_ran(&ws);
}

#[test]
fn plug_allow_lists_and_read_only_are_enforced() {
    let ws = Workspace::new();
    ws.write("creds.json", "{}");
    let wants = |writable: bool, optional: bool| {
        format!(
            r#"{{"state_action": {{"args": ["state"]}}, "plugs": {{"creds": {{"container_path": "/c", "writable": {writable}, "optional": {optional}}}}}}}"#
        )
    };
    ws.init_response("writer", &wants(true, false));
    ws.init_response("outsider", &wants(false, false));
    ws.init_response("optional_outsider", &wants(false, true));
    ws.manifest(
        r#"
plugs:
  creds: { path: ./creds.json, read_only: true, resource_names: ["^(writer|reader)$"] }
resources:
  writer: { type: ./fixture }
  outsider: { type: ./fixture }
  optional_outsider: { type: ./fixture, config: { record: "$WS/optional.jsonl" } }
"#,
    );
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        2,
        &[
            "2 resources failed before anything ran",
            "resource `writer`: init:",
            "asks to write to plug `creds`, which is read_only",
            "resource `outsider`: init:",
            "requires plug `creds`, which the manifest does not provide to this resource",
        ],
    );
    assert!(!run.all().contains("optional_outsider`"), "an optional plug that is not allowed is simply absent");
}

#[test]
fn non_json_state_output_fails_the_resource_with_an_excerpt() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander("  noisy: { type: ./fixture, config: { raw: \"Starting up...\\nnot json\" } }\n"));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "error: manifest manifest.yaml: resource `noisy` failed in state:",
            "state: invalid response: output is not a JSON object",
            "stdout: Starting up...",
            "nothing was applied: the plan has failures",
        ],
    );
    assert_no_action_ran(&ws);
}

#[test]
fn valid_with_actions_breaks_the_protocol() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  odd: { type: ./fixture, config: { respond: { status: VALID, state: {}, actions: [ { name: x } ] } } }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(&run, 1, &["resource `odd` failed in state", "status VALID must not carry `actions`"]);
    assert_no_action_ran(&ws);
}

#[test]
fn stale_without_actions_breaks_the_protocol() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  odd: { type: ./fixture, config: { respond: { status: STALE, staleState: {} } } }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(&run, 1, &["resource `odd` failed in state", "status STALE requires a non-empty `actions` list"]);
    assert_no_action_ran(&ws);
}

#[test]
fn a_failing_action_blocks_dependents_while_independent_branches_carry_on() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        r#"  broken: { type: ./fixture, config: { action_exit: 1 } }
  child: { type: ./fixture, dependencies: { up: broken }, config: { record: "$WS/child.jsonl" } }
  grandchild: { type: ./fixture, config: { up: "{{ resources.child.state }}" } }
"#,
    ));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "broken/create | create: failing with exit code 1 as configured",
            "FAILED    broken",
            "BLOCKED   child       blocked by broken",
            "BLOCKED   grandchild  blocked by broken",
            "error: manifest manifest.yaml: resource `broken` failed in action create:",
            "action create failed with exit code 1",
            "Apply failed: 1 applied, 0 unchanged, 1 failed, 2 blocked.",
        ],
    );
    assert!(ws.exists("bystander.marker"), "the independent branch was not applied");
    assert!(ws.recorded("child.jsonl").is_empty(), "a blocked resource must never run");
    assert!(!ws.exists("child.marker") && !ws.exists("grandchild.marker"));
}

/// A built-in is answered inside deployster: its failure names its cause, and no exit code of
/// a process that never ran.
#[test]
fn a_built_in_s_failure_names_its_cause_and_no_exit_code() {
    let ws = Workspace::new();
    ws.write("taken", "a file where the directory should be");
    ws.manifest(&with_bystander("  dir: { type: builtin/directory, config: { path: taken } }\n"));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "error: manifest manifest.yaml: resource `dir` failed in state:",
            "state failed: ",
            "taken exists and is not a directory; refusing to replace it",
        ],
    );
    assert!(!run.all().contains("exit code"), "{}", run.all());
    assert_eq!(ws.read("taken"), "a file where the directory should be", "nothing replaced");
}

#[test]
fn a_resource_still_stale_after_its_actions_fails() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  stubborn: { type: ./fixture, config: { stays_stale: true } }\n  after: { type: ./fixture, dependencies: { s: stubborn } }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "resource `stubborn` failed in state after actions",
            "still MISSING after applying its actions",
            "BLOCKED   after",
        ],
    );
    assert!(!ws.exists("after.marker"));
}

#[test]
fn a_resource_program_that_does_not_exist_is_reported_before_anything_runs() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander("  ghost: { type: ./types/ghost }\n"));
    let run = ws.apply(&[]);
    assert_failed(&run, 2, &["resource `ghost`: resource program not found:", "/types/ghost"]);
    assert_nothing_ran(&ws);
}

#[test]
fn malformed_init_responses_are_rejected() {
    let ws = Workspace::new();
    ws.init_response("no_state_action", r#"{"label": "x"}"#);
    ws.init_response("garbage", "<html>oops</html>");
    ws.init_response("bad_schema", r#"{"state_action": {"args": ["state"]}, "config_schema": {"type": 12}}"#);
    ws.manifest(&with_bystander(
        "  no_state_action: { type: ./fixture }\n  garbage: { type: ./fixture }\n  bad_schema: { type: ./fixture }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "3 resources failed before anything ran",
            "resource `no_state_action`: init: invalid response: init response has no `state_action` (required)",
            "resource `garbage`: init: invalid response: output is not a JSON object",
            "stdout: <html>oops</html>",
            "resource `bad_schema`: init: invalid response: `config_schema` is not a valid JSON Schema",
        ],
    );
    assert_nothing_ran(&ws);
}

/// An action without arguments would run the type as for `init`: refused, and nothing runs.
#[test]
fn an_action_without_arguments_is_refused() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(
        "  odd: { type: ./fixture, config: { respond: { status: MISSING, actions: [{ name: create }] } } }\n",
    ));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "resource `odd`",
            "action `create` has no `args` (nor an `entrypoint` or `image`): it would run the type as for `init`",
        ],
    );
    assert_no_action_ran(&ws);
}

#[test]
fn required_resources_must_be_declared_with_the_expected_type() {
    let ws = Workspace::new();
    ws.init_response(
        "vm",
        r#"{"state_action": {"args": ["state"]}, "required_resources": {"disk": "acme/disk", "net": "builtin/directory"}}"#,
    );
    ws.manifest(&with_bystander("  d: { type: builtin/directory, config: { path: \"$WS/d\" } }\n  vm: { type: ./fixture, dependencies: { net: d } }\n"));
    let run = ws.apply(&[]);
    assert_failed(&run, 2, &["resource `vm`: init:", "requires a dependency `disk` of type `acme/disk`"]);
    assert!(!run.all().contains("`net`"), "a dependency of the right type is accepted:\n{}", run.all());
    assert_nothing_ran(&ws);
}

#[test]
fn a_readonly_resource_that_is_not_valid_fails_without_running_actions() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander("  adopted: { type: ./fixture, readonly: true }\n"));
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &["resource `adopted` failed in state", "readonly resource is MISSING; refusing to run its actions (create)"],
    );
    assert!(!ws.exists("adopted.marker"));
    assert_no_action_ran(&ws);
}

#[test]
fn a_hanging_program_is_stopped_at_the_timeout() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander("  hang: { type: ./fixture, config: { hang: true } }\n"));
    let started = std::time::Instant::now();
    let run = ws.apply(&["--timeout", "1s"]);
    assert_failed(&run, 1, &["resource `hang` failed in state", "timed out after 1s and was killed"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_no_action_ran(&ws);
}

#[test]
fn command_line_mistakes_are_usage_errors() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(""));
    let run = ws.apply(&["--var", "novalue"]);
    assert_failed(&run, 2, &["`novalue` is not of the form key=value (no `=` found)"]);
    let run = ws.apply(&["--parallelism", "0"]);
    assert_eq!(run.code, 2, "{}", run.all());
    let run = ws.run(&["plan", "-f", "missing.yaml"]);
    assert_failed(&run, 2, &["manifest missing.yaml: cannot read"]);
    assert_nothing_ran(&ws);
}

#[test]
fn apply_without_a_terminal_refuses_instead_of_prompting() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander(""));
    let run = ws.run(&["apply", "-f", "manifest.yaml"]);
    assert_failed(&run, 2, &["refusing to apply without confirmation", "pass --yes"]);
    assert!(run.stdout.contains("MISSING   bystander"), "the plan is shown first:\n{}", run.all());
    assert_no_action_ran(&ws);
    for mode in ["resource", "ACTION"] {
        let run = ws.run(&["apply", "-f", "manifest.yaml", "--confirm", mode]);
        assert_failed(&run, 2, &["refusing to apply without confirmation"]);
    }
    let run = ws.run(&["apply", "-f", "manifest.yaml", "--confirm", "no"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(ws.exists("bystander.marker"));
}

#[test]
fn duplicate_names_across_files_are_an_error() {
    let ws = Workspace::new();
    ws.write("a.yaml", "resources:\n  x: { type: builtin/directory, config: { path: /tmp } }\n");
    ws.write("b.yaml", "resources:\n  x: { type: builtin/directory, config: { path: /tmp } }\n");
    let run = ws.run(&["plan", "-f", "a.yaml", "-f", "b.yaml"]);
    assert_failed(&run, 2, &["manifest b.yaml: resource `x` is also declared in a.yaml"]);
}

#[test]
fn a_custom_resource_given_to_the_cli_is_recognised() {
    let ws = Workspace::new();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/k8s/builtins.yaml");
    let run = ws.run(&["plan", "-f", example.to_str().unwrap()]);
    assert_failed(
        &run,
        2,
        &[
            "not a valid manifest: unknown field `apiVersion`",
            "this holds Kubernetes objects (kinds: Manifest, PersistentVolumeClaim), not a manifest file",
        ],
    );
    // A file that is not YAML at all is said to be so (reading its documents for kinds stops
    // at the error; it once looped there for ever).
    ws.write("broken.yaml", "resources: [not, a, map");
    let run = ws.run(&["plan", "-f", "broken.yaml"]);
    assert_failed(&run, 2, &["manifest broken.yaml: not a valid manifest"]);
    ws.write("object.yaml", "apiVersion: deployster.io/v1alpha1\nkind: Manifest\nspec: {resources: {}}\n");
    let run = ws.run(&["plan", "-f", "object.yaml"]);
    assert_failed(&run, 2, &["this is a Kubernetes object (kind: Manifest), not a manifest file"]);
    // An ordinary mistake gets no such hint.
    ws.write("typo.yaml", "resource: {}\n");
    let run = ws.run(&["plan", "-f", "typo.yaml"]);
    assert_failed(&run, 2, &["manifest typo.yaml: not a valid manifest: unknown field `resource`"]);
    assert!(!run.all().contains("hint:"), "{}", run.all());
}

#[test]
fn a_manifest_without_resources_is_invalid() {
    let ws = Workspace::new();
    for manifest in ["resources: {}\n", "vars: { env: dev }\n"] {
        ws.manifest(manifest);
        for run in [ws.plan(&[]), ws.apply(&[])] {
            assert_failed(&run, 2, &["manifest.yaml", "declares no resources (under `resources:`)"]);
        }
    }
}

/// A local program killed by a signal is reported as killed by that signal.
#[test]
fn a_program_killed_by_a_signal_is_reported_so() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let script = ws.write(
        "crashy",
        "#!/bin/sh\nif [ $# -eq 0 ]; then echo '{\"state_action\": {\"args\": [\"state\"]}}'; exit 0; fi\nkill -SEGV $$\n",
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    ws.manifest(&with_bystander("  crashy: { type: ./crashy }\n"));
    let run = ws.plan(&[]);
    assert_failed(&run, 1, &["resource `crashy`", "killed by signal 11"]);
}

/// Time limits by phase: a resource's own `timeouts` win over the command line's, which
/// default to 2 minutes for init and state and 15 for actions.
#[test]
fn state_reads_and_actions_have_their_own_time_limits() {
    let ws = Workspace::new();
    ws.manifest(&with_bystander("  hang: { type: ./fixture, timeouts: { state: 1s }, config: { hang: true } }\n"));
    let run = ws.apply(&[]);
    assert_failed(&run, 1, &["resource `hang` failed in state", "timed out after 1s and was killed"]);

    ws.manifest(&with_bystander("  hang: { type: ./fixture, config: { hang: true } }\n"));
    let run = ws.apply(&["--state-timeout", "1s"]);
    assert_failed(&run, 1, &["resource `hang` failed in state", "timed out after 1s and was killed"]);

    // An action's limit is not a state read's: a slow action under --state-timeout is fine,
    // and stopped by its own limit.
    ws.manifest(&with_bystander("  slow: { type: ./fixture, config: { action_sleep_ms: 3000 } }\n"));
    let run = ws.apply(&["--state-timeout", "1s", "--action-timeout", "1s"]);
    assert_failed(&run, 1, &["resource `slow` failed in action create", "timed out after 1s and was killed"]);
    ws.manifest(&with_bystander(
        "  slow: { type: ./fixture, timeouts: { action: 10s }, config: { action_sleep_ms: 1500 } }\n",
    ));
    let run = ws.apply(&["--action-timeout", "1s"]);
    assert_eq!(run.code, 0, "the resource's own limit wins: {}", run.all());
}

#[test]
fn time_limits_that_are_not_durations_are_refused() {
    let ws = Workspace::new();
    for (timeouts, expected) in [
        ("{ state: -5s }", "timeouts.state `-5s` is not a duration such as 90s or 30m"),
        ("{ action: soon }", "timeouts.action `soon` is not a duration such as 90s or 30m"),
        ("{ action: 0s }", "timeouts.action `0s` is zero: give a duration longer than 0"),
        ("{ progress: never }", "timeouts.progress `never` is not a duration"),
        ("{ total: 1m }", "unknown field `total`"),
    ] {
        ws.manifest(&with_bystander(&format!("  t: {{ type: ./fixture, timeouts: {timeouts} }}\n")));
        let run = ws.plan(&[]);
        assert_failed(&run, 2, &[expected]);
    }
    let run = ws.apply(&["--timeout", "1s", "--state-timeout", "2s"]);
    assert_eq!(run.code, 2, "--timeout sets both limits: it cannot be given with either: {}", run.all());
    // Zero is refused the same way on the command line, for every limit and interval.
    ws.manifest(&with_bystander(""));
    for flags in [
        &["apply", "-f", "manifest.yaml", "--yes", "--action-timeout", "0s"][..],
        &["apply", "-f", "manifest.yaml", "--yes", "--state-timeout", "0ms"],
        &["apply", "-f", "manifest.yaml", "--yes", "--progress-timeout", "0s"],
        &["apply", "-f", "manifest.yaml", "--yes", "--timeout", "0s"],
        &["reconcile", "-f", "manifest.yaml", "--interval", "0s"],
        &["reconcile", "-f", "manifest.yaml", "--max-interval", "0s"],
        &["check-type", "./fixture", "--timeout", "0s"],
    ] {
        let run = ws.run(flags);
        assert_eq!(run.code, 2, "{flags:?}: {}", run.all());
        assert!(
            run.stderr.contains("is zero: give a duration longer than 0, such as 90s or 30m"),
            "{flags:?}: {}",
            run.stderr
        );
    }
    assert_nothing_ran(&ws);
}

#[test]
fn a_plug_of_the_cluster_is_refused_for_a_type_run_here() {
    let ws = Workspace::new();
    ws.manifest(
        "plugs:\n  files: {persistentVolumeClaim: {claimName: data}}\nresources:\n  page: {type: builtin/file, config: {path: out/page.txt, content: x}}\n",
    );
    let run = ws.apply(&[]);
    assert_failed(
        &run,
        1,
        &[
            "resource `page`",
            "plug `files` is the PersistentVolumeClaim `data` of the cluster: only resource types run as Pods \
             (`--executor pod`) can have it",
        ],
    );
    assert!(!ws.exists("out/page.txt"));
}

/// A `--var` whose name the manifest never names would change nothing: refused, with the
/// closest declared name (as Terraform refuses a value for an undeclared variable), before
/// anything is run or recorded.
#[test]
fn a_var_the_manifest_never_names_is_refused_with_the_closest_name() {
    let ws = Workspace::new();
    ws.manifest("vars: {env: dev}\nresources:\n  d: {type: builtin/directory, config: {path: \"out-{{ env }}\"}}\n");
    let run = ws.run(&["apply", "-f", "manifest.yaml", "--yes", "--var", "enviroment=prod", "--var", "env=qa"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains(
            "error: --var enviroment: manifest manifest.yaml never names a variable `enviroment` (did you mean `env`?): \
             it would change nothing, so nothing was done"
        ),
        "{}",
        run.all()
    );
    assert!(!run.stderr.contains("--var env:") && !run.stderr.contains("--var env,"), "{}", run.all());
    assert!(!ws.exists("out-qa") && !ws.exists("out-prod"), "nothing was run");
    let history = ws.run(&["history", "-f", "manifest.yaml", "--output", "json"]).json();
    assert_eq!(history["events"], serde_json::json!([]), "nothing was recorded: {history}");
    // Two, named together; one with nothing close.
    let run = ws.run(&["plan", "-f", "manifest.yaml", "--var", "enviroment=prod", "--var", "colour=red"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains(
            "--var enviroment, --var colour: manifest manifest.yaml never names the variables \
             `enviroment` (did you mean `env`?), `colour`:"
        ),
        "{}",
        run.all()
    );
    // The variable it reads is taken.
    let run = ws.run(&["apply", "-f", "manifest.yaml", "--yes", "--var", "env=qa"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(ws.exists("out-qa"));
}
