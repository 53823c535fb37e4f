//! A resource's identity (a directory's path, a type's `identity` fields). A change of it is a
//! replacement: the plan says "must be replaced", the old one is deleted first with the
//! config it was applied with, then the new one is created — never left behind silently. And
//! known while other values are not, it lets a plan say a dependent will be created.

use crate::support::Workspace;

/// A directory whose path a variable chooses, a file in it, and a directory that stays.
const MANIFEST: &str = r#"
vars:
  root: a
resources:
  dir:
    type: builtin/directory
    config: { path: "$WS/{{ vars.root }}" }
  file:
    type: builtin/file
    dependencies: { d: dir }
    config: { path: "{{ d.state.path }}/f.txt", content: "hi\n" }
  logs:
    type: builtin/directory
    config: { path: "$WS/logs" }
  cache:
    type: builtin/directory
    config: { path: "$WS/cache" }
  tmp:
    type: builtin/directory
    config: { path: "$WS/tmp" }
"#;

/// A local type whose identity is `thing`: `$THINGS/<thing>` exists once created; every
/// create and delete is logged to `$THINGS/../log` with the `thing` its request named.
const THING: &str = r#"#!/bin/sh
if [ $# -eq 0 ]; then echo "$INIT"; exit 0; fi
req=$(cat)
thing=$(echo "$req" | sed -n 's/.*"thing":"\([^"]*\)".*/\1/p')
case $1 in
state) echo "$req" >> "$THINGS.requests"; if [ -f "$THINGS/$thing" ]; then echo '{"status": "VALID", "state": {}}'; else echo '{"status": "MISSING", "actions": [{"name": "create", "args": ["create"]}]}'; fi ;;
create) mkdir -p "$THINGS"; echo "$thing" > "$THINGS/$thing"; echo "created $thing" >> "$THINGS/../log" ;;
delete) rm -f "$THINGS/$thing"; echo "deleted $thing" >> "$THINGS/../log" ;;
esac
"#;

const THING_INIT: &str =
    r#"{"state_action": {"args": ["state"]}, "delete_action": {"args": ["delete"]}, "identity": ["/thing"]}"#;

fn with_thing(ws: &Workspace, init: &str, things: &[(&str, &str)]) {
    ws.write("types/thing", THING);
    std::fs::set_permissions(ws.path("types/thing"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut yaml = String::from("resources:\n");
    for (name, config) in things {
        yaml.push_str(&format!(
            "  {name}:\n    type: ./types/thing\n    env: {{ THINGS: \"$WS/things\", INIT: '{init}' }}\n    config: {config}\n"
        ));
    }
    ws.manifest(&yaml);
}

#[test]
fn a_directory_moved_by_a_variable_is_replaced_old_one_deleted_first_and_the_plan_says_so() {
    let ws = Workspace::new();
    ws.manifest(MANIFEST);
    assert_eq!(ws.apply(&[]).code, 0);
    assert!(ws.exists("a/f.txt"));

    let plan = ws.plan(&["--var", "root=b"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    let text = plan.stdout.replace(&ws.root(), "$WS");
    assert!(
        text.contains(r#"must be replaced (path: "$WS/a" → "$WS/b"): the old one is deleted first"#),
        "{}",
        plan.all()
    );
    assert!(text.contains(r#"must be replaced (path: "$WS/a/f.txt" → "$WS/b/f.txt")"#), "{}", plan.all());
    assert!(text.contains("Replaced, their identity changed"), "{}", plan.all());
    assert!(text.contains("DELETE    dir"), "{}", plan.all());
    assert!(text.contains("Plan: 2 to apply, 0 pending, 3 valid, 2 to replace."), "{}", plan.all());
    assert!(!text.contains("No longer declared"), "nothing left the manifest: {}", plan.all());
    assert!(ws.exists("a/f.txt"), "a plan deletes nothing");
    let json = ws.plan(&["--var", "root=b", "--output", "json"]).json();
    assert_eq!(json["replacements"][0]["name"], "dir");
    assert_eq!(json["replacements"][0]["moved"][0]["field"], "path");
    assert_eq!(json["replacements"][0]["moved"][0]["was"], format!("{}/a", ws.root()));
    assert_eq!(json["removals"][0]["status"], "DELETE");

    // Saved, then applied exactly: the old file and directory deleted, the new ones made.
    let saved = ws.run(&["plan", "-f", "manifest.yaml", "--var", "root=b", "--out", "plan.json"]);
    assert_eq!(saved.code, 0, "{}", saved.all());
    let apply = ws.run(&["apply", "plan.json", "--yes"]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(!ws.exists("a"), "the old directory is gone: {}", apply.all());
    assert_eq!(ws.read("b/f.txt"), "hi\n");
    assert!(ws.exists("logs") && ws.exists("cache"), "the others are untouched");
    assert!(apply.stdout.contains("Removal complete: 2 deleted."), "{}", apply.all());
    let history = ws.run(&["history", "-f", "manifest.yaml", "--resource", "dir"]);
    let (deleted, applied) = (history.stdout.find("resource-deleted"), history.stdout.find("resource-applied"));
    assert!(applied < deleted, "newest first: applied after it was deleted: {}", history.all());

    // Planned with the variable: nothing to do. Without it: a replacement back, and a note
    // naming the variable the last apply had.
    let again = ws.plan(&["--var", "root=b"]);
    assert!(again.stdout.contains("Plan: 0 to apply, 0 pending, 5 valid."), "{}", again.all());
    assert!(!again.stdout.contains("note:"), "{}", again.all());
    let without = ws.plan(&[]);
    assert!(
        without.stdout.contains(r#"had other variables: root = "b" (now "a")"#)
            && without.stdout.contains("(--var root=b)"),
        "{}",
        without.all()
    );
    assert!(without.stdout.contains("2 to replace"), "{}", without.all());
}

#[test]
fn replacements_count_as_deletions_for_the_guard() {
    let ws = Workspace::new();
    let four = MANIFEST.replace("  cache:", "  c2:").replace("  tmp:", "  t2:");
    ws.manifest(&four);
    assert_eq!(ws.apply(&[]).code, 0);
    // Every directory moved at once: four of five replaced, more than half.
    let moved = four.replace("$WS/logs", "$WS/logs2").replace("$WS/cache", "$WS/cache2");
    ws.manifest(&moved);
    let apply = ws.apply(&["--var", "root=b"]);
    assert_ne!(apply.code, 0, "{}", apply.all());
    assert!(apply.stderr.contains("deletes 4 of the 5 resources"), "{}", apply.all());
    assert!(ws.exists("a/f.txt") && ws.exists("logs") && !ws.exists("b"), "nothing was changed");
    let allowed = ws.apply(&["--var", "root=b", "--allow-deletes", "4"]);
    assert_eq!(allowed.code, 0, "{}", allowed.all());
    assert!(!ws.exists("logs") && ws.exists("logs2") && ws.exists("b/f.txt"), "{}", allowed.all());
}

#[test]
fn a_type_s_identity_change_deletes_the_old_one_with_its_old_config_first() {
    let ws = Workspace::new();
    with_thing(&ws, THING_INIT, &[("one", "{ thing: alpha, size: 1 }"), ("two", "{ thing: keep }")]);
    assert_eq!(ws.apply(&[]).code, 0);
    // A change of another field is an update, not a replacement.
    with_thing(&ws, THING_INIT, &[("one", "{ thing: alpha, size: 2 }"), ("two", "{ thing: keep }")]);
    let plan = ws.plan(&[]);
    assert!(!plan.stdout.contains("must be replaced"), "{}", plan.all());

    with_thing(&ws, THING_INIT, &[("one", "{ thing: beta, size: 2 }"), ("two", "{ thing: keep }")]);
    let plan = ws.plan(&[]);
    assert!(plan.stdout.contains(r#"must be replaced (thing: "alpha" → "beta")"#), "{}", plan.all());
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    // The first two were created side by side; then the old one deleted before the new one.
    let log = ws.read("log");
    assert_eq!(log.lines().skip(2).collect::<Vec<_>>(), ["deleted alpha", "created beta"], "{}", apply.all());
    assert!(!ws.exists("things/alpha") && ws.exists("things/beta"));
    let again = ws.apply(&[]);
    assert!(again.stdout.contains("Nothing to do"), "{}", again.all());
}

#[test]
fn a_replaced_resource_whose_type_cannot_delete_is_left_in_place_and_the_new_one_created() {
    let ws = Workspace::new();
    let no_delete = r#"{"state_action": {"args": ["state"]}, "identity": ["/thing"]}"#;
    with_thing(&ws, no_delete, &[("one", "{ thing: alpha }"), ("two", "{ thing: keep }"), ("three", "{ thing: c }")]);
    assert_eq!(ws.apply(&[]).code, 0);
    with_thing(&ws, no_delete, &[("one", "{ thing: beta }"), ("two", "{ thing: keep }"), ("three", "{ thing: c }")]);
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(apply.stdout.contains("left in place, forgotten: its type declares no delete_action"), "{}", apply.all());
    assert!(ws.exists("things/alpha") && ws.exists("things/beta"), "{}", apply.all());
    let again = ws.plan(&[]);
    assert!(!again.stdout.contains("replaced"), "the new one is held now: {}", again.all());
}

#[test]
fn an_identity_field_set_on_one_side_only_is_not_a_replacement() {
    let ws = Workspace::new();
    let init = r#"{"state_action": {"args": ["state"]}, "delete_action": {"args": ["delete"]}, "identity": ["/thing", "/zone"]}"#;
    with_thing(&ws, init, &[("one", "{ thing: alpha }")]);
    assert_eq!(ws.apply(&[]).code, 0);
    // `zone` unset before is the type's default, which may well be this one.
    with_thing(&ws, init, &[("one", "{ thing: alpha, zone: z1 }")]);
    let plan = ws.plan(&[]);
    assert!(!plan.stdout.contains("must be replaced"), "{}", plan.all());
}

#[test]
fn an_identity_that_is_not_a_list_of_json_pointers_fails_init_naming_it() {
    for (identity, says) in [
        (r#""/thing""#, "`identity` must be a list of JSON Pointers"),
        (r#"["thing"]"#, "`identity[0]` must be a JSON Pointer into the config"),
        (r#"["/thing", 3]"#, "`identity[1]` must be a JSON Pointer into the config"),
    ] {
        let ws = Workspace::new();
        let init = format!(r#"{{"state_action": {{"args": ["state"]}}, "identity": {identity}}}"#);
        with_thing(&ws, &init, &[("one", "{ thing: alpha }")]);
        let plan = ws.plan(&[]);
        assert_eq!(plan.code, 1, "{identity}: {}", plan.all());
        assert!(plan.stderr.contains("one") && plan.stderr.contains(says), "{identity}: {}", plan.all());
    }
}

/// A thing whose `note` reads a directory's mode, not known until the directory exists.
fn noted(ws: &Workspace, init: &str) {
    ws.write("types/thing", THING);
    std::fs::set_permissions(ws.path("types/thing"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    ws.manifest(&format!(
        "resources:\n  dir:\n    type: builtin/directory\n    config: {{ path: \"$WS/d\" }}\n  one:\n    type: ./types/thing\n    \
         dependencies: {{ d: dir }}\n    env: {{ THINGS: \"$WS/things\", INIT: '{init}' }}\n    \
         config: {{ thing: alpha, note: \"{{{{ d.state.mode }}}}\" }}\n"
    ));
}

#[test]
fn a_type_that_reads_state_with_unknowns_is_planned_as_created_when_its_identity_names_nothing() {
    let ws = Workspace::new();
    let init = r#"{"state_action": {"args": ["state"]}, "delete_action": {"args": ["delete"]}, "identity": ["/thing"], "state_with_unknowns": true}"#;
    noted(&ws, init);
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("Plan: 2 to apply, 0 pending, 0 valid."), "{}", plan.all());
    assert!(plan.stdout.contains("after dir's actions, created as planned"), "{}", plan.all());
    assert!(plan.stdout.contains("config.note = (known after apply) {{ d.state.mode }}"), "{}", plan.all());
    let asked: serde_json::Value = serde_json::from_str(ws.read("things.requests").lines().next().unwrap()).unwrap();
    assert_eq!(asked["config"]["note"], serde_json::json!({"$unknown": true}), "{asked}");
    assert_eq!(asked["unknown"], serde_json::json!(["config.note"]), "{asked}");
    let apply = ws.apply(&[]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert!(ws.exists("things/alpha"));

    // It exists now: with the mode unknown again (the directory gone), the thing's answer
    // (VALID) is set aside, and it waits for the value.
    std::fs::remove_dir(ws.path("d")).unwrap();
    let plan = ws.plan(&[]);
    assert!(plan.stdout.contains("Plan: 1 to apply, 1 pending, 0 valid."), "{}", plan.all());
}

#[test]
fn a_type_that_does_not_say_it_reads_unknowns_is_never_sent_them_and_waits() {
    let ws = Workspace::new();
    noted(&ws, THING_INIT);
    let plan = ws.plan(&[]);
    assert_eq!(plan.code, 0, "{}", plan.all());
    assert!(plan.stdout.contains("Plan: 1 to apply, 1 pending, 0 valid."), "{}", plan.all());
    assert!(!ws.exists("things.requests"), "no state request with unknowns");
}
