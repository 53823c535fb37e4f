//! `plan --out FILE` and `apply FILE`: a saved plan is applied exactly, or not at all.

use crate::support;
use crate::support::Workspace;
use serde_json::Value;

fn site() -> String {
    let head = "vars: { greeting: hello, token: s3cr3t-t0ken }\nsensitive: [token]";
    support::dir_and_file(head, "greeting.txt", r"{{ greeting }} {{ token }}\n", "")
}

fn save(ws: &Workspace, extra: &[&str]) {
    let run = ws.run(&[&["plan", "-f", "manifest.yaml", "--out", "plan.json"], extra].concat());
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stderr.contains("Plan saved to plan.json"), "{}", run.all());
}

#[test]
fn a_saved_plan_is_applied_exactly_and_holds_no_values() {
    let ws = Workspace::new();
    ws.manifest(&site());
    save(&ws, &["--var", "greeting=bonjour"]);
    let text = ws.read("plan.json");
    for value in ["s3cr3t", "bonjour"] {
        assert!(!text.contains(&format!("{value} ")), "no config value in the plan file:\n{text}");
    }
    let plan: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plan["format"], "deployster-plan/1");
    assert_eq!(plan["vars"], serde_json::json!([{"var": {"key": "greeting", "value": "bonjour"}}]));
    let statuses: Vec<&str> =
        plan["resources"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["MISSING", "MISSING"], "the file is planned over the directory's planned state");
    assert!(!ws.exists("out"), "planning changed nothing");

    // From another directory, with no -f: the plan names its manifest and variables.
    let run = ws.run(&["apply", &ws.path("plan.json").display().to_string(), "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out/greeting.txt"), "bonjour s3cr3t-t0ken\n");
    assert!(!run.stdout.contains("s3cr3t"), "{}", run.stdout);
}

/// The book's first manifest, fresh: the plan reaches the file in the directory not made yet,
/// counts both, and applying the saved plan runs exactly what it showed.
#[test]
fn a_fresh_plan_reaches_every_resource_and_apply_runs_what_it_showed() {
    let ws = Workspace::new();
    ws.manifest(&support::dir_and_file("", "app.json", "{{ d.state.path }}", ""));
    let run = ws.run(&["plan", "-f", "manifest.yaml", "--out", "plan.json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("Plan: 2 to apply, 0 pending, 0 valid."), "{}", run.all());
    assert!(run.stdout.contains("after dir's actions, as planned"), "{}", run.all());
    assert!(run.stdout.contains("→ write: Write "), "the file's action is shown: {}", run.all());
    assert!(run.stdout.contains("state.mode = (known after apply)"), "no mode configured: {}", run.all());
    let json = ws.run(&["plan", "-f", "manifest.yaml", "--output", "json"]);
    let doc = json.json();
    let file = doc["plan"].as_array().unwrap().iter().find(|r| r["name"] == "file").unwrap().clone();
    assert_eq!(file["found"]["status"], "MISSING", "{file}");
    assert!(file["found"]["planned_state"]["path"].as_str().unwrap().ends_with("/out/app.json"), "{file}");
    assert!(!ws.exists("out"), "planning changed nothing");

    let run = ws.run(&["apply", "plan.json", "--yes"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("Apply complete: 2 applied"), "{}", run.all());
    assert!(ws.read("out/app.json").ends_with("/out"), "{}", ws.read("out/app.json"));
}

/// A misspelt key in a resource that reads another is found before anything runs.
#[test]
fn a_typo_in_a_dependent_fails_the_plan_and_applies_nothing() {
    let ws = Workspace::new();
    ws.manifest(&support::dir_and_file("", "app.json", "x", "").replace("content:", "contents:"));
    for verb in [&["plan", "-f", "manifest.yaml"][..], &["apply", "-f", "manifest.yaml", "--yes"]] {
        let run = ws.run(verb);
        assert_eq!(run.code, 2, "{verb:?}: {}", run.all());
        assert!(run.stderr.contains("resource `file`"), "{}", run.all());
        assert!(run.stderr.contains("(`contents`: did you mean `content`?)"), "{}", run.all());
        assert!(!ws.exists("out"), "{verb:?}: nothing was applied");
    }
}

#[test]
fn a_saved_plan_is_refused_after_an_out_of_band_change_or_a_manifest_edit() {
    let ws = Workspace::new();
    ws.manifest(&site());
    assert_eq!(ws.apply(&[]).code, 0);
    std::fs::write(ws.path("out/greeting.txt"), "edited once\n").unwrap();
    save(&ws, &[]);

    // Someone else edits the file again: the state is not the one the plan knew.
    std::fs::write(ws.path("out/greeting.txt"), "edited twice\n").unwrap();
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("the plan no longer holds; nothing was applied"), "{}", run.all());
    assert!(run.stderr.contains("resource `file`: its state changed since the plan (STALE)"), "{}", run.all());
    assert_eq!(ws.read("out/greeting.txt"), "edited twice\n", "nothing was applied");

    // A fresh plan, then the manifest is edited.
    save(&ws, &[]);
    ws.manifest(&site().replace("greeting: hello", "greeting: hi"));
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("the manifest or its variables changed: revision"), "{}", run.all());
    let file = ws.path("manifest.yaml").display().to_string();
    let said = format!("(file {file} changed since the plan; variable `greeting` changed since the plan)");
    assert!(run.stderr.contains(&said), "which file and which variable: {}", run.all());
    assert_eq!(ws.read("out/greeting.txt"), "edited twice\n");

    // Different variables on the command line: also a different revision.
    ws.manifest(&site());
    save(&ws, &[]);
    let run = ws.run(&["apply", "plan.json", "--var", "greeting=hola"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("now (variable `greeting` changed since the plan)"), "{}", run.all());
    // A resource added to the manifest: named.
    ws.manifest(&format!("{}  extra: {{ type: builtin/file, config: {{ path: extra.txt, content: x }} }}\n", site()));
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("resource `extra` is new since the plan"), "{}", run.all());
    ws.manifest(&site());

    // The plan as it was made: applied.
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out/greeting.txt"), "hello s3cr3t-t0ken\n");
}

#[test]
fn a_sensitive_var_is_not_kept_and_must_be_given_again() {
    let ws = Workspace::new();
    ws.manifest(&site());
    save(&ws, &["--var", "token=n3w-s3cr3t"]);
    assert!(!ws.read("plan.json").contains("n3w-s3cr3t"), "{}", ws.read("plan.json"));
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains("the sensitive variable `token` set on the command line")
            && run.stderr.contains("--sensitive-var token="),
        "{}",
        run.all()
    );
    assert!(!ws.exists("out"));
    let run = ws.run(&["apply", "plan.json", "--var", "token=n3w-s3cr3t"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out/greeting.txt"), "hello n3w-s3cr3t\n");
}

#[test]
fn plan_files_that_cannot_be_applied_are_refused_with_a_clear_error() {
    let ws = Workspace::new();
    ws.manifest(&site());
    save(&ws, &[]);
    let good = ws.read("plan.json");
    let cases = [
        ("not json", "this is not a plan".to_string(), "not a plan: not JSON"),
        ("no format", "{}".to_string(), "not a plan: it has no `format`"),
        (
            "older format",
            good.replace("deployster-plan/1", "deployster-plan/0"),
            "written in format `deployster-plan/0`",
        ),
        ("edited", good.replace("\"MISSING\"", "\"VALID\""), "changed after it was written"),
    ];
    for (what, text, expected) in cases {
        ws.write("bad.json", &text);
        let run = ws.run(&["apply", "bad.json"]);
        assert_eq!(run.code, 2, "{what}: {}", run.all());
        assert!(run.stderr.contains("plan file bad.json: ") && run.stderr.contains(expected), "{what}: {}", run.all());
        assert!(!ws.exists("out"), "{what}: nothing was applied");
    }
    let run = ws.run(&["apply", "missing.json"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("plan file missing.json: cannot read it"), "{}", run.all());

    // A plan of another manifest.
    ws.write("other.yaml", "resources:\n  other: { type: builtin/directory, config: { path: elsewhere } }\n");
    let run = ws.run(&["apply", "plan.json", "-f", "other.yaml"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("the resources differ: dir, file when planned, other now"), "{}", run.all());
    assert!(!ws.exists("elsewhere") && !ws.exists("out"));
}

#[test]
fn a_plan_with_failures_is_not_saved() {
    let ws = Workspace::new();
    // The state action of `broken` fails: the plan has a FAILED resource.
    ws.manifest("resources:\n  ok: { type: ./fixture }\n  broken: { type: ./fixture, config: { exit: 3 } }\n");
    let run = ws.run(&["plan", "-f", "manifest.yaml", "--out", "plan.json"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("the plan has failures: not saved to plan.json"), "{}", run.all());
    assert!(!ws.exists("plan.json"));
    // Nor is a plan that could not even be made (a config that breaks its type's schema).
    ws.manifest("resources:\n  f: { type: builtin/file, config: { path: a, content: 1, bogus: true } }\n");
    let run = ws.run(&["plan", "-f", "manifest.yaml", "--out", "plan.json"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(!ws.exists("plan.json"));
}

/// `plan --detailed-exitcode`, as Terraform's: 0 nothing to do, 2 changes pending (deletions
/// too), 1 any error — an invalid manifest included, which is 2 without it.
#[test]
fn plan_s_detailed_exit_code_tells_ci_whether_changes_are_pending() {
    let ws = Workspace::new();
    ws.manifest(&site());
    let detailed = |ws: &Workspace| ws.run(&["plan", "-f", "manifest.yaml", "--detailed-exitcode"]);
    let pending = detailed(&ws);
    assert_eq!(pending.code, 2, "changes pending: {}", pending.all());
    assert_eq!(ws.plan(&[]).code, 0, "without the flag, a plan that can be applied is 0");
    assert_eq!(ws.apply(&[]).code, 0);
    let nothing = detailed(&ws);
    assert_eq!(nothing.code, 0, "nothing to do: {}", nothing.all());
    let json = ws.run(&["plan", "-f", "manifest.yaml", "--detailed-exitcode", "--output", "json"]);
    assert_eq!(json.code, 0, "{}", json.all());

    // A deletion is a change: `file` leaves the manifest.
    let head = "vars: { greeting: hello, token: s3cr3t-t0ken }\nsensitive: [token]\n";
    ws.manifest(&format!("{head}resources:\n  dir: {{ type: builtin/directory, config: {{ path: out }} }}\n"));
    let deleting = detailed(&ws);
    assert_eq!(deleting.code, 2, "{}", deleting.all());
    assert!(deleting.stdout.contains("DELETE"), "{}", deleting.all());

    ws.manifest("resources:\n  broken: { type: builtin/file, dependencies: { up: nowhere } }\n");
    let invalid = detailed(&ws);
    assert_eq!(invalid.code, 1, "an error is 1: {}", invalid.all());
    assert!(invalid.stderr.contains("error: ") && invalid.stderr.contains("nowhere"), "{}", invalid.all());
    assert_eq!(ws.plan(&[]).code, 2, "without the flag, an invalid manifest is 2");
}

/// The README's tour: a directory chmod-ed and a file in it edited behind Deployster's back. The
/// plan reads the file with the directory's state as found, so its drift is shown (not hidden
/// as PENDING), and the saved plan applies exactly what was shown.
#[test]
fn a_plan_shows_the_drift_of_what_waits_on_a_stale_dependency() {
    let ws = Workspace::new();
    let data = ws.path("data").display().to_string();
    ws.manifest(&format!(
        r#"
resources:
  data_dir: {{ type: builtin/directory, config: {{ path: "{data}", mode: "0755" }} }}
  app_config:
    type: builtin/file
    dependencies: {{ dir: data_dir }}
    config: {{ path: "{{{{ dir.state.path }}}}/app.json", content: "{{\"env\": \"dev\"}}\n", mode: "0640" }}
"#
    ));
    assert_eq!(ws.apply(&[]).code, 0);
    std::fs::write(ws.path("data/app.json"), "tampered\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.path("data"), std::fs::Permissions::from_mode(0o700)).unwrap();

    let run = ws.run(&["plan", "-f", "manifest.yaml", "--out", "plan.json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let shown = &run.stdout;
    assert!(shown.contains("after data_dir's actions, as planned"), "over its planned state: {shown}");
    assert!(!shown.contains("unknown until then"), "the file's path is the directory's own: {shown}");
    assert!(!shown.contains("may change"), "{shown}");
    let file_part = &shown[shown.find("app_config").unwrap()..];
    assert!(file_part.contains("→ "), "the file's action is shown: {shown}");
    assert!(run.all().contains("app_config was VALID"), "its drift is named: {}", run.all());
    let json = ws.run(&["plan", "-f", "manifest.yaml", "--output", "json"]);
    let plan: Value = serde_json::from_str(&json.stdout).unwrap();
    let file = plan["plan"].as_array().unwrap().iter().find(|r| r["name"] == "app_config").unwrap().clone();
    assert_eq!(file["status"], "STALE", "foreseen: {file}");
    assert_eq!(file["found"]["status"], "STALE", "{file}");
    assert!(!file["found"]["actions"].as_array().unwrap().is_empty(), "{file}");

    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("data/app.json"), "{\"env\": \"dev\"}\n");

    // Planned again with the file tampered; someone mends it before the apply: what the plan
    // found of it no longer holds.
    std::fs::write(ws.path("data/app.json"), "tampered\n").unwrap();
    std::fs::set_permissions(ws.path("data"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(ws.run(&["plan", "-f", "manifest.yaml", "--out", "plan.json"]).code, 0);
    std::fs::write(ws.path("data/app.json"), "{\"env\": \"dev\"}\n").unwrap();
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 1, "{}", run.all());
    let said = "resource `app_config`: STALE (found STALE before its dependencies' actions) when planned, \
                VALID (found VALID before its dependencies' actions) now";
    assert!(run.stderr.contains(said), "{}", run.all());
    assert_eq!(std::fs::metadata(ws.path("data")).unwrap().permissions().mode() & 0o777, 0o700, "nothing applied");
}

/// `--replace R`: the plan shows R deleted and created again, the apply does it (its type's
/// delete action, then what its state asks for), a saved plan keeps it; a name the manifest
/// has not, and a type that cannot delete, are refused before anything runs.
#[test]
fn replace_deletes_and_creates_a_resource_again_as_planned() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    ws.manifest(&support::dir_and_file("", "app.json", "hello", ""));
    assert_eq!(ws.apply(&[]).code, 0);
    // A mode the config does not set: a rewrite keeps it, only a new file has another.
    let mode = || std::fs::metadata(ws.path("out/app.json")).unwrap().permissions().mode() & 0o777;
    // (0604: no umask makes it, so the new file's mode differs.)
    std::fs::set_permissions(ws.path("out/app.json"), std::fs::Permissions::from_mode(0o604)).unwrap();
    let before = mode();

    let plan = ws.run(&["plan", "-f", "manifest.yaml", "--replace", "file", "--out", "plan.json"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("→ replace: Delete it and create it again (--replace)"), "{}", plan.all());
    assert!(plan.stdout.contains("Plan: 1 to apply, 0 pending, 1 valid."), "{}", plan.all());
    assert_eq!(mode(), before, "a plan changes nothing");
    let run = ws.run(&["apply", "plan.json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("APPLIED   file  delete, write"), "{}", run.all());
    assert_ne!(mode(), before, "a new file, deleted and created again");
    assert_eq!(ws.read("out/app.json"), "hello");
    let again = ws.run(&["apply", "-f", "manifest.yaml", "--replace", "file", "--yes"]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert!(again.stdout.contains("APPLIED   file  delete, write"), "{}", again.all());
    assert!(ws.plan(&[]).stdout.contains("Plan: 0 to apply"), "replaced once, not again");

    for (name, said) in [
        ("nowhere", "--replace nowhere: manifest manifest.yaml has no resource `nowhere`"),
        ("fil", "(did you mean `file`?)"),
    ] {
        let run = ws.run(&["apply", "-f", "manifest.yaml", "--replace", name, "--yes"]);
        assert_eq!(run.code, 2, "{}", run.all());
        assert!(run.stderr.contains(said), "{}", run.all());
    }
    ws.manifest("resources:\n  odd: { type: ./fixture, config: { respond: { status: VALID, state: {} } } }\n");
    let run = ws.run(&["plan", "-f", "manifest.yaml", "--replace", "odd"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("its type has no `delete_action`"), "{}", run.all());
}
