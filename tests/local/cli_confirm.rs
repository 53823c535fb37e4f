//! `apply --confirm ONCE|RESOURCE|ACTION` on a real terminal: the binary runs under `script`,
//! which gives it a pseudo-terminal; each prompt is answered only once it has appeared.

use crate::support::{Workspace, on_terminal};

const TWO: &str = "resources:\n  alpha: { type: ./fixture }\n  beta: { type: ./fixture }\n";

#[test]
fn once_asks_after_the_plan_and_no_changes_nothing() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml"], |_| "n");
    assert_eq!(code, 1, "{out}");
    let plan_at = out.find("Plan: 2 to apply").expect("plan shown");
    let prompt_at = out.find("Apply these changes?").expect("prompt shown");
    assert!(plan_at < prompt_at, "the question must come after the plan:\n{out}");
    assert!(out.contains("Apply cancelled; nothing was changed."), "{out}");
    assert!(!ws.exists("alpha.marker") && !ws.exists("beta.marker"));
}

#[test]
fn once_yes_applies_everything() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--confirm", "ONCE"], |_| "y");
    assert_eq!(code, 0, "{out}");
    assert!(ws.exists("alpha.marker") && ws.exists("beta.marker"));
}

#[test]
fn resource_mode_asks_per_resource_and_declining_one_blocks_its_dependents() {
    let ws = Workspace::new();
    ws.manifest(&format!("{TWO}  gamma: {{ type: ./fixture, dependencies: {{ b: beta }} }}\n"));
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--confirm", "resource"], |p| {
        if p.contains("beta") { "n" } else { "y" }
    });
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Apply alpha (MISSING; actions: create)?"), "{out}");
    assert!(!out.contains("Apply these changes?"), "RESOURCE mode does not ask once:\n{out}");
    assert!(ws.exists("alpha.marker"));
    assert!(!ws.exists("beta.marker") && !ws.exists("gamma.marker"));
    assert!(out.contains("DECLINED  beta") && out.contains("blocked by beta"), "{out}");
}

#[test]
fn action_mode_asks_per_action() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--confirm", "action"], |p| {
        if p.contains("alpha") { "y" } else { "n" }
    });
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Run alpha/create: Create "), "{out}");
    assert!(ws.exists("alpha.marker") && !ws.exists("beta.marker"));
}

/// The prompt may wait an hour: after "yes", every state is read again, and if anything differs
/// from the plan that was shown, nothing is applied.
#[test]
fn a_state_changed_while_the_prompt_waited_stops_the_apply() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml"], |_| {
        std::fs::write(ws.path("alpha.marker"), "made by hand while the prompt waited").unwrap();
        "y"
    });
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the plan no longer holds; nothing was applied"), "{out}");
    assert!(out.contains("resource `alpha`: MISSING when planned, VALID now"), "{out}");
    assert!(!ws.exists("beta.marker"), "nothing was applied:\n{out}");
    assert_eq!(std::fs::read_to_string(ws.path("alpha.marker")).unwrap(), "made by hand while the prompt waited");
}
