//! Black-box tests of `deployster plan` and `apply` on manifests that should work.

use crate::support;
use crate::support::Workspace;
use serde_json::json;

const BUILTINS: &str = r#"
vars:
  env: dev
resources:
  data_dir:
    type: builtin/directory
    config: { path: "$WS/out-{{ env }}", mode: "0750" }
  app_config:
    type: builtin/file
    dependencies: { dir: data_dir }
    config:
      path: "{{ dir.state.path }}/app.json"
      content: "{\"env\": \"{{ vars.env }}\"}\n"
  notes:
    type: builtin/file
    config:
      path: "{{ resources.data_dir.state.path }}/notes.txt"
      content: "notes\n"
      mode: "0600"
"#;

#[test]
fn fresh_apply_creates_everything_and_a_second_apply_is_a_no_op() {
    let ws = Workspace::new();
    ws.manifest(BUILTINS);
    let first = ws.apply(&[]);
    assert_eq!(first.code, 0, "{}", first.all());
    assert_eq!(ws.read("out-dev/app.json"), "{\"env\": \"dev\"}\n");
    assert_eq!(ws.read("out-dev/notes.txt"), "notes\n");
    assert!(first.stdout.contains("Apply complete: 3 applied, 0 unchanged"), "{}", first.all());
    // Action output is streamed with its resource/action prefix.
    assert!(first.stdout.contains("app_config/write | wrote "), "{}", first.all());
    assert!(first.stdout.contains("MISSING   app_config"), "planned over data_dir's plan: {}", first.all());

    let second = ws.apply(&[]);
    assert_eq!(second.code, 0, "{}", second.all());
    assert!(second.stdout.contains("Nothing to do: all 3 resources are VALID."), "{}", second.all());
    assert!(!second.stdout.contains("APPLIED"), "{}", second.all());
}

#[test]
fn drift_is_detected_in_the_plan_and_corrected_by_apply() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    ws.manifest(BUILTINS);
    assert_eq!(ws.apply(&[]).code, 0);

    std::fs::remove_file(ws.path("out-dev/app.json")).unwrap();
    std::fs::write(ws.path("out-dev/notes.txt"), "edited by hand\n").unwrap();
    let plan = ws.plan(&["--output", "json"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    let entries = plan.json()["plan"].clone();
    assert_eq!(entries[0]["status"], "VALID");
    assert_eq!(entries[1]["status"], "MISSING");
    assert_eq!(entries[1]["actions"][0]["name"], "write");
    assert_eq!(entries[2]["status"], "STALE");
    assert_eq!(entries[2]["stale_state"]["size"], 15, "staleState describes the file as found");

    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(apply.stdout.contains("2 applied, 1 unchanged"), "{}", apply.all());
    assert_eq!(ws.read("out-dev/notes.txt"), "notes\n");
    assert!(ws.exists("out-dev/app.json"));

    std::fs::set_permissions(ws.path("out-dev/notes.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let plan = ws.plan(&["--output", "json"]).json();
    assert_eq!(plan["plan"][2]["status"], "STALE");
    assert_eq!(plan["plan"][2]["actions"][0]["name"], "chmod");
    assert_eq!(ws.apply(&[]).code, 0);
    let mode = std::fs::metadata(ws.path("out-dev/notes.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn plan_runs_no_action_plans_dependents_and_names_what_waits() {
    let ws = Workspace::new();
    ws.manifest(BUILTINS);
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(!ws.exists("out-dev"), "plan must not create anything");
    assert!(plan.stdout.contains("after data_dir's actions, as planned"), "{}", plan.all());
    assert!(plan.stdout.contains("Plan: 3 to apply, 0 pending, 0 valid."), "{}", plan.all());
    let json = ws.plan(&["--output", "json"]).json();
    assert_eq!(json["plan"][1]["status"], "MISSING");
    assert_eq!(json["plan"][1]["waiting_on"], json!([{"resource": "data_dir", "status": "MISSING"}]));
    assert_eq!(json["plan"][1]["found"]["actions"][0]["name"], "write");
    assert_eq!(json["plan"][0]["planned_state"]["mode"], "0750");

    // A directory without a mode: its mode is the umask's, known once it exists. The file that
    // reads it does not exist (its path is known): it is created, its content known after apply.
    ws.manifest(
        &BUILTINS.replace(", mode: \"0750\"", "").replace("\"notes\\n\"", "\"{{ resources.data_dir.state.mode }}\""),
    );
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("Plan: 3 to apply, 0 pending, 0 valid."), "{}", plan.all());
    assert!(plan.stdout.contains("after data_dir's actions, created as planned"), "{}", plan.all());
    assert!(
        plan.stdout.contains("config.content = (known after apply) {{ resources.data_dir.state.mode }}"),
        "{}",
        plan.all()
    );
    let json = ws.plan(&["--output", "json"]).json();
    assert_eq!(json["plan"][2]["status"], "MISSING");
    assert_eq!(json["plan"][2]["found"]["actions"][0]["name"], "write", "{json}");
    assert_eq!(
        json["plan"][2]["unknown_inputs"],
        json!([{"path": "config.content", "expression": "{{ resources.data_dir.state.mode }}"}])
    );
    assert_eq!(json["plan"][0]["planned_state"]["mode"], json!({"$unknown": true}));
    // Applied, the content is what the mode turned out to be.
    assert_eq!(ws.apply(&[]).code, 0);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(ws.path("out-dev")).unwrap().permissions()) & 0o7777;
    assert_eq!(ws.read("out-dev/notes.txt"), format!("{mode:04o}"));
    std::fs::remove_dir_all(ws.path("out-dev")).unwrap();
    std::fs::remove_dir_all(ws.path(".deployster")).unwrap();

    // An unknown used as a map's key, in the file's path: which file it is cannot be known, so
    // it waits, saying which value.
    let lookup = "{{ {'0750': 'private'}[resources.data_dir.state.mode] }}";
    let in_path = BUILTINS.replace(", mode: \"0750\"", "").replace("/notes.txt\"", &format!("/{lookup}.txt\""));
    ws.manifest(&in_path);
    let json = ws.plan(&["--output", "json"]).json();
    assert_eq!(json["plan"][2]["status"], "PENDING", "{json}");
    let expression = format!("{{{{ resources.data_dir.state.path }}}}/{lookup}.txt");
    assert_eq!(json["plan"][2]["unknown_inputs"], json!([{"path": "config.path", "expression": expression}]));

    // An unknown (or any value) as a resource's name: which resource a config reads is never
    // left to a value — the plan is refused before anything runs, naming the expression.
    let by_name = "{{ resources[resources.data_dir.state.mode].state.path }}";
    ws.manifest(&BUILTINS.replace("\"notes\\n\"", &format!("\"{by_name}\"")));
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 2, "{}", plan.all());
    assert!(
        plan.stderr.contains("read other resources as `resources.<name>`") && plan.stderr.contains(by_name),
        "{}",
        plan.all()
    );
}

#[test]
fn independent_branches_run_concurrently_within_the_parallelism_limit() {
    let ws = Workspace::new();
    ws.manifest(
        r#"
resources:
  left:  { type: ./fixture, config: { sleep_ms: 400, log: "$WS/timing.log" } }
  right: { type: ./fixture, config: { sleep_ms: 400, log: "$WS/timing.log" } }
"#,
    );
    let intervals = |ws: &Workspace| {
        let log = ws.read("timing.log");
        let spans: Vec<(String, u128, u128)> = log
            .lines()
            .filter(|l| l.contains(" state "))
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].to_string(), f[2].parse().unwrap(), f[3].parse().unwrap())
            })
            .collect();
        assert_eq!(spans.len(), 2, "{log}");
        spans
    };
    let overlap = |s: &[(String, u128, u128)]| s[0].1 < s[1].2 && s[1].1 < s[0].2;

    assert_eq!(ws.plan(&["--parallelism", "2"]).code, 0);
    let spans = intervals(&ws);
    assert!(overlap(&spans), "independent state actions did not overlap: {spans:?}");

    std::fs::remove_file(ws.path("timing.log")).unwrap();
    assert_eq!(ws.plan(&["--parallelism", "1"]).code, 0);
    let spans = intervals(&ws);
    assert!(!overlap(&spans), "--parallelism 1 still overlapped: {spans:?}");
}

#[test]
fn requests_carry_both_protocol_revisions_dependencies_and_plugs() {
    let ws = Workspace::new();
    ws.write("secrets/creds.json", "{}");
    ws.init_response(
        "leaf",
        r#"{"state_action": {"args": ["state"]}, "plugs": {"creds": {"container_path": "/creds"}},
            "required_resources": {"up": "./fixture"}}"#,
    );
    ws.manifest(
        r#"
plugs:
  creds: { path: ./secrets/creds.json, read_only: true, resource_names: ["^leaf$"] }
resources:
  root: { type: ./fixture, config: { content: root-state } }
  middle: { type: ./fixture, dependencies: { up: root }, config: { from: "{{ up.state.content }}" } }
  leaf:
    type: ./fixture
    dependencies: { up: middle }
    config: { record: "$WS/leaf.jsonl", seen: "{{ up.state.content }}" }
  new_leaf:
    type: ./fixture
    dependencies: { up: middle }
    config: { record: "$WS/new_leaf.jsonl" }
"#,
    );
    let run = ws.apply(&["-v"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let records = ws.recorded("leaf.jsonl");
    let phases: Vec<&str> = records.iter().map(|r| r["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["state", "action:create", "state"]);

    let state = &records[0]["request"];
    assert_eq!(state["name"], "leaf");
    assert_eq!(state["type"], "./fixture");
    assert_eq!(state["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(state["verbose"], true);
    assert_eq!(state["workspace"], ws.root());
    assert_eq!(state["config"]["seen"], "created", "rendered from middle's fresh state");
    let up = &state["dependencies"]["up"];
    assert_eq!(up["name"], "middle");
    assert_eq!(up["config"]["from"], "root-state");
    assert_eq!(up["state"]["content"], "created");
    assert_eq!(up["properties"], up["state"], "the older revision's name carries the same state");
    assert_eq!(up["dependencies"]["up"]["name"], "root", "the older revision gets dependencies of dependencies");
    let creds = ws.path("secrets/creds.json").display().to_string();
    assert_eq!(state["plugs"], json!({"creds": creds}));
    assert_eq!(records[0]["plug_env"], json!({"DEPLOYSTER_PLUG_CREDS": creds}));

    // `leaf` speaks the older revision (`required_resources`); a newer-revision type gets its
    // direct dependencies only, so that requests do not grow with the chain behind them.
    let new = &ws.recorded("new_leaf.jsonl")[0]["request"];
    assert_eq!(new["dependencies"]["up"]["name"], "middle");
    assert_eq!(new["dependencies"]["up"]["dependencies"], json!({}));

    let action = &records[1]["request"];
    assert_eq!(action["staleState"], json!({}));
    assert_eq!(action["dependencies"], state["dependencies"]);
}

#[test]
fn variables_layer_in_order() {
    let ws = Workspace::new();
    ws.write("vars.auto.yaml", "greeting: auto\nwho: auto\n");
    ws.write("late.yaml", "who: file\n");
    ws.manifest(
        r#"
vars: { greeting: default, who: default, punct: "!" }
resources:
  out:
    type: builtin/file
    config: { path: "$WS/out.txt", content: "{{ greeting }} {{ who }}{{ punct }}" }
"#,
    );
    assert_eq!(ws.apply(&["--var", "who=cli", "--var-file", "late.yaml"]).code, 0);
    assert_eq!(ws.read("out.txt"), "auto file!");
    let run = ws.apply(&["--var-file", "late.yaml", "--var", "who=cli"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out.txt"), "auto cli!", "the later of --var/--var-file wins");
}

#[test]
fn several_manifest_files_are_merged() {
    let ws = Workspace::new();
    ws.write(
        "a.yaml",
        "vars: {x: one}\nresources:\n  first: {type: builtin/directory, config: {path: \"$WS/d\"}}\n"
            .replace("$WS", &ws.root())
            .as_str(),
    );
    ws.write(
        "b.json",
        &json!({"resources": {"second": {"type": "builtin/file", "dependencies": {"d": "first"},
                "config": {"path": "{{ d.state.path }}/f", "content": "{{ x }}"}}}})
        .to_string(),
    );
    let run = ws.run(&["apply", "-f", "a.yaml", "-f", "b.json", "--yes"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("d/f"), "one");
}

#[test]
fn a_readonly_resource_is_observed_and_offered_to_dependents() {
    let ws = Workspace::new();
    ws.write("existing/file.txt", "adopted");
    ws.manifest(
        r#"
resources:
  existing: { type: builtin/directory, readonly: true, config: { path: "$WS/existing" } }
  copy:
    type: builtin/file
    dependencies: { src: existing }
    config: { path: "{{ src.state.path }}/copy.txt", content: "copied" }
"#,
    );
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("existing/copy.txt"), "copied");
}

#[test]
fn json_output_reports_the_plan_and_the_result() {
    let ws = Workspace::new();
    ws.manifest(BUILTINS);
    let run = ws.apply(&["--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let doc = run.json();
    assert_eq!(doc["status"], "applied");
    assert_eq!(doc["plan"][0]["status"], "MISSING");
    assert_eq!(doc["result"][0]["status"], "APPLIED");
    assert_eq!(doc["result"][0]["actions"], json!(["create"]));
    assert_eq!(doc["result"][1]["state"]["path"], format!("{}/out-dev/app.json", ws.root()));
    assert!(run.stderr.contains("data_dir/create | created"), "action output goes to stderr with JSON: {}", run.all());
}

#[test]
fn every_bundled_example_validates_and_plans() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut planned = 0;
    for entry in walk(&root) {
        // The Docker example needs its image: tests/docker_engine/docker.rs plans it. The k8s example is a
        // Manifest custom resource, not a CLI manifest: tests/local/controller.rs reconciles it. The
        // package example needs its packages built: tests/local/package.rs builds and applies it. The
        // kubernetes example needs an API server: tests/apiserver/kubernetes.rs applies it.
        let tested_elsewhere = entry
            .components()
            .any(|c| ["docker", "k8s", "package", "kubernetes"].iter().any(|name| c.as_os_str() == *name));
        if entry.file_name().is_some_and(|n| n == "manifest.yaml") && !tested_elsewhere {
            let ws = Workspace::new();
            // An example's paths made this test's own where its manifest has `env` to do it.
            let env = format!("env=test-{}", std::process::id());
            let mut args = vec!["plan", "-f", entry.to_str().unwrap()];
            if std::fs::read_to_string(&entry).unwrap().contains("env") {
                args.extend(["--var", &env]);
            }
            let run = ws.run(&args);
            assert_eq!(run.code, 0, "{}: {}", entry.display(), run.all());
            planned += 1;
        }
    }
    assert!(planned >= 1, "no example manifest found under {}", root.display());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

#[test]
fn a_long_chain_with_aliases_applies_with_small_requests() {
    // Requests carry direct dependencies only: a long chain stays within any parser's limits.
    let ws = Workspace::new();
    let mut yaml = String::from("resources:\n  d0: { type: builtin/directory, config: { path: \"$WS/d0\" } }\n");
    for i in 1..80 {
        yaml.push_str(&format!(
            "  d{i}: {{ type: builtin/directory, dependencies: {{ up: d{} }}, config: {{ path: \"{{{{ up.state.path }}}}/d{i}\" }} }}\n",
            i - 1
        ));
    }
    ws.manifest(&yaml);
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    let deepest: String = (0..80).map(|i| format!("/d{i}")).collect();
    assert!(ws.path(&deepest[1..]).is_dir());
}

/// A chain of 300 resources of a local-program type whose JSON parser accepts 64 levels: every
/// request stays shallow, and the last one is no bigger than one in the middle.
#[test]
fn a_300_chain_works_with_a_parser_limited_to_64_levels_and_requests_stay_small() {
    let ws = Workspace::new();
    let mut yaml = String::from("resources:\n  r0: { type: ./fixture, config: { max_depth: 64 } }\n");
    for i in 1..300 {
        let record = if i == 150 || i == 299 { format!(", record: \"$WS/r{i}.jsonl\"") } else { String::new() };
        yaml.push_str(&format!(
            "  r{i}: {{ type: ./fixture, dependencies: {{ up: r{} }}, config: {{ max_depth: 64, from: \"{{{{ up.state.marker }}}}\"{record} }} }}\n",
            i - 1
        ));
    }
    ws.manifest(&yaml);
    let run = ws.apply(&["--output", "json"]);
    assert_eq!(run.code, 0, "{}", &run.all()[..run.all().len().min(4000)]);
    let size = |i: usize| ws.recorded(&format!("r{i}.jsonl"))[0]["request"].to_string().len();
    let (middle, last) = (size(150), size(299));
    assert!(last <= middle + 64, "request bytes grow with the chain: {middle} at 150, {last} at 299");
}

#[test]
fn verbose_shows_the_stderr_of_state_actions() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  quiet: { type: ./fixture, config: { respond: { status: VALID, state: {} } } }\n");
    let plain = ws.plan(&[]);
    assert_eq!(plain.code, 0, "{}", plain.all());
    assert!(!plain.all().contains("state: checking"), "{}", plain.all());
    let verbose = ws.plan(&["-v"]);
    assert!(verbose.stdout.contains("quiet/state | state: checking quiet"), "{}", verbose.all());
}

/// A type speaking the older revision gets its dependencies' dependencies — at most
/// `OLDER_REVISION_DEPTH` (32) levels of them.
#[test]
fn older_revision_types_get_ancestors_to_a_bounded_depth() {
    let ws = Workspace::new();
    let mut yaml = String::from("resources:\n  r0: { type: ./fixture }\n");
    for i in 1..40 {
        let record = if i == 39 { ", record: \"$WS/last.jsonl\"" } else { "" };
        yaml.push_str(&format!(
            "  r{i}: {{ type: ./fixture, dependencies: {{ up: r{} }}, config: {{ n: {i}{record} }} }}\n",
            i - 1
        ));
        ws.init_response(
            &format!("r{i}"),
            r#"{"state_action": {"args": ["state"]}, "required_resources": {"up": "./fixture"}}"#,
        );
    }
    ws.manifest(&yaml);
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    let request = ws.recorded("last.jsonl")[0]["request"].clone();
    let mut levels = 0;
    let mut at = &request;
    while let Some(up) = at["dependencies"].get("up") {
        levels += 1;
        at = up;
    }
    assert_eq!(levels, 32, "OLDER_REVISION_DEPTH: r38 down to r7, and no further");
}

#[test]
fn built_ins_apply_alike_in_process_and_as_programs() {
    // The same manifest, applied, drifted and planned again, once with built-ins answered inside
    // deployster (the default) and once with each call a `deployster __type` program.
    let outcome = |builtins: &str| {
        let ws = Workspace::new();
        ws.manifest(BUILTINS);
        let env = [("DEPLOYSTER_BUILTINS", builtins)];
        let apply = ws.run_with_env(&["apply", "-f", "manifest.yaml", "--yes", "--output", "json"], &env);
        assert_eq!(apply.code, 0, "{}", apply.all());
        std::fs::write(ws.path("out-dev/notes.txt"), "edited\n").unwrap();
        let plan = ws.run_with_env(&["plan", "-f", "manifest.yaml", "--output", "json"], &env);
        assert_eq!(plan.code, 0, "{}", plan.all());
        let shown = |run: &support::Run| {
            let doc = run.json();
            let part = if doc.get("result").is_some() { "result" } else { "plan" };
            let resources: Vec<_> = doc[part]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["name"].clone(), r["status"].clone(), r["actions"].clone(), r["state"].clone()))
                .collect();
            // Independent resources run at once: their lines may come in either order.
            let mut output: Vec<&str> = run.stderr.lines().filter(|l| l.contains(" | ")).collect();
            output.sort_unstable();
            format!("{resources:?}\n{output:?}").replace(&ws.root(), "<ws>")
        };
        (shown(&apply), shown(&plan))
    };
    let in_process = outcome("in-process");
    assert!(in_process.0.contains("wrote <ws>/out-dev/app.json"), "{}", in_process.0);
    assert!(in_process.1.contains("STALE"), "{}", in_process.1);
    assert_eq!(in_process, outcome("process"));
}

#[test]
fn an_unknown_builtins_setting_is_refused() {
    let ws = Workspace::new();
    ws.manifest(BUILTINS);
    let run = ws.run_with_env(&["plan", "-f", "manifest.yaml"], &[("DEPLOYSTER_BUILTINS", "threads")]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("DEPLOYSTER_BUILTINS must be `in-process` or `process`"), "{}", run.all());
}

/// `--workspace NAME`: a second copy of the manifest (`--var env=prod`) with a log of its own,
/// so that neither copy's plan reports the other's inputs as changes, and history, plans and
/// saved plans say which workspace they are of.
#[test]
fn each_workspace_keeps_its_own_log() {
    let ws = Workspace::new();
    ws.manifest(&format!(
        "vars: {{env: dev}}\nresources:\n  dir:\n    type: builtin/directory\n    config: {{path: \"{}/{{{{ env }}}}\"}}\n",
        ws.root()
    ));
    assert_eq!(ws.apply(&[]).code, 0);
    let prod = ws.apply(&["--workspace", "prod", "--var", "env=prod"]);
    assert_eq!(prod.code, 0, "{}", prod.all());
    assert!(prod.stderr.contains("workspace prod: deployment log"), "{}", prod.all());
    assert!(ws.exists("dev") && ws.exists("prod"));
    assert!(ws.exists(".deployster/workspaces/prod/log.sqlite"), "its own log");

    for (args, copy) in [(&[][..], "dev"), (&["--workspace", "prod", "--var", "env=prod"][..], "prod")] {
        let plan = ws.plan(args);
        assert_eq!(plan.code, 0, "{}", plan.all());
        assert!(plan.stdout.contains("0 to apply"), "{copy}: {}", plan.all());
        assert!(!plan.all().contains('→'), "{copy}: nothing of the other copy is a change: {}", plan.all());
    }
    let history = ws.run(&["history", "-f", "manifest.yaml", "--workspace", "prod"]);
    assert!(history.stdout.contains("(workspace prod)"), "{}", history.all());
    let json = ws.run(&["history", "-f", "manifest.yaml", "--workspace", "prod", "--output", "json"]).json();
    assert_eq!(json["workspace"], "prod");
    let default = ws.run(&["history", "-f", "manifest.yaml", "--output", "json"]).json();
    assert_eq!(default["workspace"], "default");
    // The environment names it too.
    let from_env = ws.run_with_env(&["history", "-f", "manifest.yaml"], &[("DEPLOYSTER_WORKSPACE", "prod")]);
    assert!(from_env.stdout.contains("(workspace prod)"), "{}", from_env.all());

    // A saved plan is applied in the workspace it was made in, and nowhere else.
    std::fs::remove_dir(ws.path("prod")).unwrap();
    let saved = ws.plan(&["--workspace", "prod", "--var", "env=prod", "--out", "prod.plan"]);
    assert_eq!(saved.code, 0, "{}", saved.all());
    let elsewhere = ws.run(&["apply", "prod.plan", "--workspace", "default"]);
    assert_eq!(elsewhere.code, 2, "{}", elsewhere.all());
    assert!(elsewhere.stderr.contains("it was made in workspace prod, not default"), "{}", elsewhere.all());
    let applied = ws.run(&["apply", "prod.plan"]);
    assert_eq!(applied.code, 0, "{}", applied.all());
    assert!(ws.exists("prod") && applied.stderr.contains("workspace prod"), "{}", applied.all());

    for bad in ["../x", "", "a/b", "-x"] {
        let refused = ws.run(&["plan", "-f", "manifest.yaml", &format!("--workspace={bad}")]);
        assert_eq!(refused.code, 2, "{bad}: {}", refused.all());
        assert!(refused.stderr.contains("a workspace's name is"), "{bad}: {}", refused.all());
    }
}

/// A program's type that reports its state as found gets each differing value shown found
/// against configured, as `builtin/kubernetes` does in its actions; a sensitive one masked on
/// both sides, even the value found.
#[test]
fn a_stale_program_type_s_fields_are_shown_found_against_wanted() {
    let ws = Workspace::new();
    ws.manifest(
        r#"
vars: { token: n3w-s3cret }
sensitive: [token]
resources:
  vm:
    type: ./fixture
    config:
      size: 4
      zone: eu
      token: "{{ token }}"
      respond: { status: STALE, staleState: { size: 2, zone: eu, token: old-s3cret }, actions: [{ name: resize, args: [act, resize] }] }
"#,
    );
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    let text = plan.all();
    assert!(text.contains("→ resize\n              size: 2 → 4\n"), "{text}");
    assert!(text.contains(r#"token: "***" → "***""#), "{text}");
    assert!(!text.contains("zone:"), "an equal value is not shown: {text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// What a type warns of (its init and state replies' `warnings`) is shown in the plan and the
/// apply, kept in the log, and in the JSON document; a warning that is not a string fails the
/// resource, saying so.
#[test]
fn a_type_s_warnings_are_shown_kept_and_bounded() {
    let ws = Workspace::new();
    let respond = |warnings: &str| {
        format!(
            "resources:\n  old: {{ type: ./fixture, config: {{ respond: {{ status: VALID, state: {{}}, warnings: {warnings} }} }} }}\n"
        )
    };
    ws.manifest(&respond(r#"["v1 is deprecated: use v2"]"#));
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stderr.contains("warning: resource `old` (state): v1 is deprecated: use v2"), "{}", run.all());
    let plan = ws.plan(&["--output", "json"]);
    assert_eq!(
        plan.json()["warnings"],
        json!([{"resource": "old", "phase": "state", "message": "v1 is deprecated: use v2"}]),
        "{}",
        plan.all()
    );
    let log = ws.run(&["history", "-f", "manifest.yaml", "--output", "json"]);
    assert!(log.stdout.contains("resource-warned") && log.stdout.contains("v1 is deprecated"), "{}", log.all());

    let many: Vec<String> = (0..3000).map(|i| format!("\"w{i}\"")).collect();
    ws.manifest(&respond(&format!("[{}]", many.join(", "))));
    let plan = ws.plan(&["--output", "json"]);
    let said = plan.json()["warnings"].as_array().unwrap().len();
    assert_eq!(said, 11, "ten kept and one counting the rest: {}", plan.all());
    assert!(plan.stderr.contains("… and 2990 more warnings"), "{}", plan.all());

    ws.manifest(&respond("[deprecated, 3]"));
    let run = ws.plan(&[]);
    assert_ne!(run.code, 0, "{}", run.all());
    assert!(run.all().contains("`warnings[1]` must be a string, got 3"), "{}", run.all());
}
