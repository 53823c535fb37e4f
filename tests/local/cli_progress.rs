//! Live progress of actions that report it (seed 004 messages): a bar with the action's
//! description and percentage on a terminal, throttled lines elsewhere.

use crate::support::{Workspace, on_terminal};
use regex::Regex;

#[test]
fn on_a_terminal_an_action_reporting_progress_gets_a_bar_with_its_description() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  it: { type: ./fixture, config: { progress_steps: 5, step_ms: 300 } }\n");
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--yes"], |_| "n");
    assert_eq!(code, 0, "{out}");
    let bar = Regex::new(r"it: action create \(Create [^)]*it\.marker\) \[[=> ]{24}\]\s+(\d+)%").unwrap();
    let shown: Vec<u32> = bar.captures_iter(&out).map(|c| c[1].parse().unwrap()).collect();
    assert!(shown.len() >= 2, "a bar drawn as the action progressed:\n{out}");
    assert!(shown.windows(2).all(|w| w[0] <= w[1]), "percentages only grow: {shown:?}");
    assert!(shown.iter().any(|p| (20..100).contains(p)), "intermediate progress drawn: {shown:?}");
    assert!(out.contains("APPLIED"), "{out}");
}

#[test]
fn on_a_terminal_many_quick_resources_each_get_their_line() {
    // Lines above the spinners are printed a tick's worth at a time: none may be lost.
    let ws = Workspace::new();
    let mut yaml = String::from("resources:\n");
    for i in 0..300 {
        yaml.push_str(&format!("  f{i}: {{ type: builtin/file, config: {{ path: f{i}, content: \"{i}\" }} }}\n"));
    }
    ws.manifest(&yaml);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--yes"], |_| "n");
    assert_eq!(code, 0, "{out}");
    let applied = Regex::new(r"APPLIED\s+(f\d+)\s").unwrap();
    let names: std::collections::BTreeSet<&str> =
        applied.captures_iter(&out).map(|c| c.get(1).unwrap().as_str()).collect();
    assert_eq!(names.len(), 300, "{out}");
    assert!(out.contains("Apply complete: 300 applied"), "{out}");
}

#[test]
fn off_a_terminal_progress_lines_are_throttled_first_and_last_kept() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  it: { type: ./fixture, config: { progress_steps: 20, step_ms: 100 } }\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("it: action create")).collect();
    assert!(lines.first().is_some_and(|l| l.ends_with(" 5%")), "the first report is shown: {lines:?}");
    assert!(lines.last().is_some_and(|l| l.ends_with(" 100%")), "and the last: {lines:?}");
    // 20 reports over two seconds: about one line a second, not twenty.
    assert!((2..=5).contains(&lines.len()), "throttled to about one a second: {lines:?}");
    assert!(lines[0].contains("(Create "), "with the action's description: {lines:?}");
}
