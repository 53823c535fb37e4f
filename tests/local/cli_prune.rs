//! What leaves a manifest is deleted — shown in the plan first — and `destroy` deletes
//! everything: the inventory in the deployment log, seen from the command line.

use crate::support::{Workspace, on_terminal};

const THREE: &str = r#"
resources:
  data_dir:
    type: builtin/directory
    config: { path: "$WS/out" }
  app_config:
    type: builtin/file
    dependencies: { dir: data_dir }
    config: { path: "{{ dir.state.path }}/app.json", content: "app\n" }
  notes:
    type: builtin/file
    config: { path: "{{ resources.data_dir.state.path }}/notes.txt", content: "notes\n" }
"#;

/// `THREE` without `notes`.
fn without_notes() -> String {
    THREE[..THREE.find("  notes:").unwrap()].to_string()
}

/// A local type that cannot delete: its state is whether `$WS/kept.txt` exists.
const NO_DELETE: &str = "#!/bin/sh
if [ $# -eq 0 ]; then echo '{\"state_action\": {\"args\": [\"state\"]}}'; exit 0; fi
case $1 in
state) if [ -f \"$KEPT\" ]; then echo '{\"status\": \"VALID\", \"state\": {}}'; else echo '{\"status\": \"MISSING\", \"actions\": [{\"name\": \"create\", \"args\": [\"create\"]}]}'; fi ;;
create) touch \"$KEPT\" ;;
esac
";

/// A local type whose delete action fails (`$WS/doomed.txt` exists until deleted).
const FAILING_DELETE: &str = "#!/bin/sh
if [ $# -eq 0 ]; then echo '{\"state_action\": {\"args\": [\"state\"]}, \"delete_action\": {\"args\": [\"delete\"]}}'; exit 0; fi
case $1 in
state) if [ -f \"$DOOMED\" ]; then echo '{\"status\": \"VALID\", \"state\": {}}'; else echo '{\"status\": \"MISSING\", \"actions\": [{\"name\": \"create\", \"args\": [\"create\"]}]}'; fi ;;
create) touch \"$DOOMED\" ;;
delete) echo 'the API refused: 403' >&2; exit 1 ;;
esac
";

#[test]
fn a_resource_removed_from_the_manifest_is_planned_as_delete_then_deleted_by_apply() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    assert!(ws.exists("out/notes.txt"));

    ws.manifest(&without_notes());
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("No longer declared"), "{}", plan.all());
    assert!(plan.stdout.contains("DELETE    notes  builtin/file"), "{}", plan.all());
    assert!(plan.stdout.contains("1 to delete."), "{}", plan.all());
    assert!(ws.exists("out/notes.txt"), "a plan deletes nothing");
    let json = ws.plan(&["--output", "json"]).json();
    assert_eq!(json["removals"][0]["name"], "notes");
    assert_eq!(json["removals"][0]["status"], "DELETE");

    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(!ws.exists("out/notes.txt"), "{}", apply.all());
    assert!(ws.exists("out/app.json"));
    assert!(apply.stdout.contains("Removal complete: 1 deleted."), "{}", apply.all());
    let history = ws.run(&["history", "-f", "manifest.yaml", "--resource", "notes"]);
    assert!(
        history.stdout.contains("action-started") && history.stdout.contains("resource-deleted"),
        "{}",
        history.all()
    );

    let again = ws.apply(&[]);
    assert!(again.stdout.contains("Nothing to do: all 2 resources are VALID."), "{}", again.all());
}

#[test]
fn a_resource_removed_and_put_back_before_the_next_run_is_not_deleted() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&without_notes());
    ws.manifest(THREE);
    let apply = ws.apply(&[]);
    assert!(apply.stdout.contains("Nothing to do: all 3 resources are VALID."), "{}", apply.all());
    assert!(ws.exists("out/notes.txt"));
}

#[test]
fn a_renamed_resource_without_moved_is_deleted_and_created_anew() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&THREE.replace("  notes:", "  memo:"));
    let plan = ws.plan(&[]);
    assert!(plan.stdout.contains("DELETE    notes"), "{}", plan.all());
    assert!(
        plan.stdout.contains("note: `notes` is deleted and `memo` (builtin/file) is new: if `memo` is `notes` renamed, add `moved: {notes: memo}`"),
        "the plan says it is a delete and a create: {}",
        plan.all()
    );
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    // Deleted first, then read again: the file the new name declares exists at the end.
    assert_eq!(ws.read("out/notes.txt"), "notes\n", "{}", apply.all());
    assert!(apply.stdout.contains("DELETED   notes"), "{}", apply.all());
    assert!(apply.stdout.contains("APPLIED   memo"), "{}", apply.all());
}

#[test]
fn a_type_without_a_delete_action_is_left_in_place_and_forgotten() {
    let ws = Workspace::new();
    ws.write("types/keeper", NO_DELETE);
    std::fs::set_permissions(ws.path("types/keeper"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let kept =
        format!("  kept:\n    type: ./types/keeper\n    env: {{ KEPT: \"{}\" }}\n", ws.path("kept.txt").display());
    ws.manifest(&format!("{THREE}{kept}"));
    assert_eq!(ws.apply(&[]).code, 0);
    assert!(ws.exists("kept.txt"));

    ws.manifest(THREE);
    let plan = ws.plan(&[]);
    assert!(plan.stdout.contains("FORGOTTEN kept"), "{}", plan.all());
    assert!(plan.stdout.contains("left in place, forgotten: its type declares no delete_action"), "{}", plan.all());
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(ws.exists("kept.txt"), "left in place");
    assert!(apply.stdout.contains("1 forgotten"), "{}", apply.all());
    let again = ws.plan(&[]);
    assert!(!again.stdout.contains("kept"), "no longer in the inventory: {}", again.all());
}

#[test]
fn a_failed_delete_stays_in_the_inventory_and_nothing_else_is_applied() {
    let ws = Workspace::new();
    ws.write("types/doomed", FAILING_DELETE);
    std::fs::set_permissions(ws.path("types/doomed"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let doomed = format!(
        "  doomed:\n    type: ./types/doomed\n    env: {{ DOOMED: \"{}\" }}\n",
        ws.path("doomed.txt").display()
    );
    ws.manifest(&format!("{THREE}{doomed}"));
    assert_eq!(ws.apply(&[]).code, 0);

    // `doomed` removed, and a change to a declared resource beside it.
    ws.manifest(&THREE.replace("content: \"app\\n\"", "content: \"app v2\\n\""));
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 1, "{}", apply.all());
    assert!(apply.stderr.contains("doomed") && apply.stderr.contains("the API refused: 403"), "{}", apply.all());
    assert!(apply.stdout.contains("Removal failed: 1 failed to delete."), "{}", apply.all());
    assert_eq!(ws.read("out/app.json"), "app\n", "nothing else is applied once a removal failed");
    let plan = ws.plan(&[]);
    assert!(plan.stdout.contains("DELETE    doomed"), "still held, planned again: {}", plan.all());
}

#[test]
fn destroy_deletes_everything_dependents_first_and_history_says_so() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);

    let plan = ws.run(&["plan", "--destroy", "-f", "manifest.yaml"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("3 to delete."), "{}", plan.all());
    assert!(ws.exists("out/app.json"), "a plan deletes nothing");

    // Not without asking: there is no terminal here.
    let refused = ws.run(&["destroy", "-f", "manifest.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(ws.exists("out/app.json"));

    let destroy = ws.run(&["destroy", "-f", "manifest.yaml", "--yes"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    assert!(!ws.exists("out"), "{}", destroy.all());
    assert!(destroy.stdout.contains("Destroy complete: 3 deleted."), "{}", destroy.all());
    let (file, dir) =
        (destroy.stdout.find("DELETED   app_config").unwrap(), destroy.stdout.find("DELETED   data_dir").unwrap());
    assert!(file < dir, "dependents first: {}", destroy.stdout);
    let history = ws.run(&["history", "-f", "manifest.yaml"]);
    assert!(history.stdout.contains("destroyed"), "{}", history.all());

    // A new apply starts afresh: no drift, everything created.
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(!apply.stdout.contains("Drift"), "{}", apply.all());
    assert!(apply.stdout.contains("3 applied"), "{}", apply.all());
}

/// `destroy` deletes what the inventory holds: a resource that never got applied (its image
/// cannot be had) neither blocks it nor is touched; a manifest never applied has nothing to
/// destroy.
#[test]
fn destroy_deletes_what_was_applied_and_nothing_that_never_was() {
    let ws = Workspace::new();
    // No registry listens on port 1: the image can never be had.
    let never = "  never:\n    type: 127.0.0.1:1/deployster/missing:1\n";
    ws.manifest(&(without_notes() + never));
    let nothing = ws.run(&["destroy", "-f", "manifest.yaml", "--yes"]);
    assert_eq!(nothing.code, 0, "{}", nothing.all());
    assert!(nothing.stdout.contains("Nothing to destroy"), "{}", nothing.all());

    ws.manifest(&without_notes());
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&(without_notes() + never));
    let failed = ws.apply(&[]);
    assert_eq!(failed.code, 1, "the image cannot be had: {}", failed.all());
    let destroy = ws.run(&["destroy", "-f", "manifest.yaml", "--yes"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    assert!(destroy.stdout.contains("Destroy complete: 2 deleted."), "{}", destroy.all());
    assert!(!destroy.all().contains("missing:1"), "never inited: {}", destroy.all());
    assert!(!ws.exists("out"));
}

#[test]
fn what_another_manifest_applied_is_never_deleted() {
    let ws = Workspace::new();
    ws.write(
        "other.yaml",
        &format!(
            "resources:\n  other:\n    type: builtin/file\n    config: {{ path: \"{}/other.txt\", content: \"x\" }}\n",
            ws.root()
        ),
    );
    assert_eq!(ws.run(&["apply", "-f", "other.yaml", "--yes"]).code, 0);
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&without_notes());
    let plan = ws.plan(&["--output", "json"]).json();
    let removals: Vec<&str> =
        plan["removals"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(removals, ["notes"]);
    let destroy = ws.run(&["destroy", "-f", "manifest.yaml", "--yes"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    assert!(ws.exists("other.txt"), "{}", destroy.all());
}

#[test]
fn a_declared_resource_that_depends_on_a_removed_one_is_an_error_naming_both() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&THREE.replace("  data_dir:", "  gone_dir:"));
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 2, "{}", plan.all());
    assert!(plan.stderr.contains("app_config") && plan.stderr.contains("data_dir"), "{}", plan.all());
    assert!(ws.exists("out/app.json"), "nothing deleted");
}

#[test]
fn deleting_more_than_half_of_the_inventory_needs_the_count_named_or_a_louder_prompt() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    // Only `data_dir` left: 2 of the 3 would go, a manifest cut by mistake as often as not.
    ws.manifest(&THREE[..THREE.find("  app_config:").unwrap()]);
    for extra in [&[][..], &["--allow-deletes", "1"][..]] {
        let refused = ws.apply(extra);
        assert_eq!(refused.code, 2, "{}", refused.all());
        assert!(
            refused.stderr.contains("this apply deletes 2 of the 3 resources its inventory holds (app_config, notes)")
                && refused.stderr.contains("deployster apply --allow-deletes 2"),
            "{}",
            refused.all()
        );
        assert!(ws.exists("out/app.json") && ws.exists("out/notes.txt"), "nothing deleted");
    }
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml"], |_| "n");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("WARNING: manifest manifest.yaml: this apply deletes 2 of the 3"), "{out}");
    assert!(ws.exists("out/app.json"), "declined: nothing deleted");

    let allowed = ws.apply(&["--allow-deletes", "2"]);
    assert_eq!(allowed.code, 0, "{}", allowed.all());
    assert!(!ws.exists("out/app.json") && !ws.exists("out/notes.txt"), "{}", allowed.all());
}

#[test]
fn destroy_asks_at_a_terminal_and_a_saved_plan_applies_exactly_its_deletions() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&without_notes());
    let saved = ws.plan(&["--out", "plan.json"]);
    assert_eq!(saved.code, 0, "{}", saved.all());
    assert!(ws.read("plan.json").contains("\"removals\""), "{}", ws.read("plan.json"));
    // Put back before the saved plan is applied: it no longer holds.
    ws.manifest(THREE);
    let changed = ws.run(&["apply", "plan.json", "-f", "manifest.yaml"]);
    assert_eq!(changed.code, 1, "{}", changed.all());
    assert!(
        changed.stderr.contains("what leaves the manifest differs: notes (DELETE) when planned, none now"),
        "{}",
        changed.all()
    );
    assert!(ws.exists("out/notes.txt"));
    ws.manifest(&without_notes());
    let saved = ws.plan(&["--out", "plan.json"]);
    assert_eq!(saved.code, 0, "{}", saved.all());
    let applied = ws.run(&["apply", "plan.json"]);
    assert_eq!(applied.code, 0, "{}", applied.all());
    assert!(!ws.exists("out/notes.txt"));

    let (code, out) = on_terminal(&ws, &["destroy", "-f", "manifest.yaml"], |_| "n");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Delete these 2 resources? This cannot be undone."), "{out}");
    assert!(ws.exists("out/app.json"));
    let (code, out) = on_terminal(&ws, &["destroy", "-f", "manifest.yaml"], |_| "y");
    assert_eq!(code, 0, "{out}");
    assert!(!ws.exists("out"), "{out}");
}

/// What a delete action is sent and prints passes through the mask like any action's.
#[test]
fn sensitive_values_in_a_delete_s_request_and_output_are_masked() {
    let ws = Workspace::new();
    ws.write(
        "types/echo",
        "#!/bin/sh
if [ $# -eq 0 ]; then echo '{\"state_action\": {\"args\": [\"state\"]}, \"delete_action\": {\"args\": [\"delete\"]}}'; exit 0; fi
case $1 in
state) if [ -f \"$MARK\" ]; then echo '{\"status\": \"VALID\", \"state\": {}}'; else echo '{\"status\": \"MISSING\", \"actions\": [{\"name\": \"create\", \"args\": [\"create\"]}]}'; fi ;;
create) touch \"$MARK\" ;;
delete) echo \"deleting with $(cat)\"; rm \"$MARK\" ;;
esac
",
    );
    std::fs::set_permissions(ws.path("types/echo"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let echo = format!(
        "  echo:\n    type: ./types/echo\n    env: {{ MARK: \"{}\" }}\n    config: {{ token: \"{{{{ token }}}}\" }}\n",
        ws.path("echo.mark").display()
    );
    ws.manifest(&format!("vars: {{ token: hunter2-secret }}\nsensitive: [token]\n{THREE}{echo}"));
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(&format!("vars: {{ token: hunter2-secret }}\nsensitive: [token]\n{THREE}"));
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(!ws.exists("echo.mark"), "{}", apply.all());
    assert!(apply.stdout.contains("echo/delete | deleting with"), "{}", apply.all());
    assert!(!apply.all().contains("hunter2-secret"), "{}", apply.all());
    let history = ws.run(&["history", "-f", "manifest.yaml", "--output", "json", "--limit", "500"]);
    assert!(!history.stdout.contains("hunter2-secret"), "{}", history.stdout);
    for file in std::fs::read_dir(ws.path(".deployster")).unwrap() {
        let bytes = std::fs::read(file.unwrap().path()).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains("hunter2-secret"), "the log on disk holds the secret");
    }
}

#[test]
fn a_resource_renamed_with_moved_keeps_its_state_and_history() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    let renamed = format!("moved: {{ notes: memo }}\n{}", THREE.replace("  notes:", "  memo:"));
    ws.manifest(&renamed);
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("MOVED     notes") && plan.stdout.contains("→ memo (`moved`)"), "{}", plan.all());
    assert!(plan.stdout.contains("VALID     memo"), "found as it was: {}", plan.all());
    assert!(!plan.stdout.contains("DELETE"), "{}", plan.all());

    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(apply.stdout.contains("1 moved"), "{}", apply.all());
    assert!(!apply.stdout.contains("APPLIED   memo") && !apply.stdout.contains("DELETED"), "{}", apply.all());
    assert_eq!(ws.read("out/notes.txt"), "notes\n");
    let history = ws.run(&["history", "-f", "manifest.yaml", "--resource", "memo"]);
    assert!(history.stdout.contains("resource/memo") && history.stdout.contains("resource-moved"), "{}", history.all());
    assert!(history.stdout.contains("resource/notes/action/write"), "the history before the move: {}", history.all());

    // The `moved` entry stays, and changes nothing more.
    let again = ws.apply(&[]);
    assert!(again.stdout.contains("Nothing to do: all 3 resources are VALID."), "{}", again.all());
    // Held under its new name: removed, it is deleted.
    ws.manifest(&renamed[..renamed.find("  memo:").unwrap()].replace("moved: { notes: memo }\n", ""));
    let plan = ws.plan(&[]);
    assert!(plan.stdout.contains("DELETE    memo"), "{}", plan.all());
}

#[test]
fn a_move_to_an_undeclared_name_a_cycle_or_from_a_declared_name_is_an_error() {
    let ws = Workspace::new();
    ws.manifest(THREE);
    assert_eq!(ws.apply(&[]).code, 0);
    for (moved, error) in [
        ("{ gone: nowhere }", "moved: `gone` → `nowhere`, which the manifest does not declare"),
        ("{ a: b, b: a }", "moved: a cycle: a → b → a"),
        ("{ notes: app_config }", "moved: `notes` is still declared"),
    ] {
        ws.manifest(&format!("moved: {moved}\n{THREE}"));
        let plan = ws.plan(&[]);
        assert_eq!(plan.code, 2, "{moved}: {}", plan.all());
        assert!(plan.stderr.contains(error), "{moved}: {}", plan.all());
    }
    assert!(ws.exists("out/notes.txt"));
}

/// A local type whose delete takes a while, so that its run can be killed in the middle.
const SLOW_DELETE: &str = "#!/bin/sh
if [ $# -eq 0 ]; then echo '{\"state_action\": {\"args\": [\"state\"]}, \"delete_action\": {\"args\": [\"delete\"]}}'; exit 0; fi
case $1 in
state) if [ -f \"$MARK\" ]; then echo '{\"status\": \"VALID\", \"state\": {}}'; else echo '{\"status\": \"MISSING\", \"actions\": [{\"name\": \"create\", \"args\": [\"create\"]}]}'; fi ;;
create) touch \"$MARK\" ;;
delete) echo started >> \"$MARK.deletes\"; sleep 3; rm \"$MARK\"; echo finished >> \"$MARK.deletes\" ;;
esac
";

#[test]
fn a_deletion_killed_in_the_middle_is_resumed_by_the_next_run_never_beside_it() {
    let ws = Workspace::new();
    ws.write("types/slow", SLOW_DELETE);
    std::fs::set_permissions(ws.path("types/slow"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let slow =
        format!("  slow:\n    type: ./types/slow\n    env: {{ MARK: \"{}\" }}\n", ws.path("slow.mark").display());
    ws.manifest(&format!("{THREE}{slow}"));
    assert_eq!(ws.apply(&[]).code, 0);
    ws.manifest(THREE);
    let mut child = ws.spawn(&["apply", "-f", "manifest.yaml", "--yes"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ws.exists("slow.mark.deletes") {
        assert!(std::time::Instant::now() < deadline, "the delete never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: nothing of deployster's runs after this
    child.wait().unwrap();

    let next = ws.apply(&[]);
    assert_eq!(next.code, 0, "{}", next.all());
    assert!(next.all().contains("was interrupted before it recorded its end"), "{}", next.all());
    assert!(!ws.exists("slow.mark"), "{}", next.all());
    // The killed run's delete was stopped (its process group) before the next one started:
    // it never finishes, even given the time to.
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert_eq!(ws.read("slow.mark.deletes"), "started\nstarted\nfinished\n");
    let plan = ws.plan(&[]);
    assert!(!plan.stdout.contains("slow"), "no longer held: {}", plan.all());
}
