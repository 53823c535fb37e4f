//! `deployster graph`: the dependency graph with each resource's status, as Mermaid, DOT and
//! SVG; golden-tested on `tests/graph/manifest.yaml` (one resource in each status, planned
//! live), whose SVG is the README's picture.

use crate::support;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Run, Workspace};

fn graph_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/graph")
}

/// `deployster graph --live` on the status showcase, in its directory, logging elsewhere.
fn showcase(format: &str) -> String {
    let state = tempfile::tempdir().unwrap();
    let output = Command::new(support::deployster())
        .args(["graph", "-f", "manifest.yaml", "--live", "--format", format, "--state-dir"])
        .arg(state.path())
        .current_dir(graph_dir())
        .output()
        .unwrap();
    let run = Run::from(output);
    assert_eq!(run.code, 0, "{}", run.all());
    run.stdout
}

/// Compares `actual` with the committed file; `DEPLOYSTER_BLESS=1` rewrites it instead.
fn golden(path: &Path, actual: &str) {
    if std::env::var_os("DEPLOYSTER_BLESS").is_some() {
        std::fs::write(path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} is not current (DEPLOYSTER_BLESS=1 cargo test --test local cli_graph:: rewrites it):\n{actual}",
        path.display()
    );
}

const NODES: [(&str, &str); 5] = [
    ("site_dir", "VALID"),
    ("config_file", "MISSING"),
    ("backup", "PENDING"),
    ("broken", "FAILED"),
    ("reader", "BLOCKED"),
];

#[test]
fn mermaid_is_golden_with_aliases_on_edges_and_implicit_edges_dashed() {
    let text = showcase("mermaid");
    golden(&graph_dir().join("expected.mmd"), &text);
    assert!(text.starts_with("flowchart LR\n"));
    assert!(text.contains("r0 -- \"dir\" --> r1"), "{text}");
    assert!(text.contains("r1 -.-> r2"), "implicit: dashed\n{text}");
    for (name, status) in NODES {
        assert!(text.contains(&format!("{name}<br/>")) && text.contains(&format!(":::{}", status.to_lowercase())));
    }
}

#[test]
fn dot_is_golden_and_coloured_by_status() {
    let text = showcase("dot");
    golden(&graph_dir().join("expected.dot"), &text);
    assert!(text.contains("\"site_dir\" -> \"config_file\" [label=\"dir\"];"), "{text}");
    assert!(text.contains("\"config_file\" -> \"backup\" [style=dashed];"), "{text}");
    assert!(text.contains("label=\"broken\\nbuiltin/file\\nFAILED\", fillcolor=\"#f8d7da\""), "{text}");
}

/// The SVG is the README's picture (docs/graph.svg): current, and showing every node.
#[test]
fn svg_is_drawn_without_graphviz_and_is_the_readme_picture() {
    let svg = showcase("svg");
    golden(&Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/graph.svg"), &svg);
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"), "{svg}");
    for (name, status) in NODES {
        assert!(svg.contains(&format!(">{name}</tspan>")), "{name} is drawn");
        assert!(svg.contains(&format!(">{status}</tspan>")), "{status} is drawn");
    }
    assert!(svg.contains("#f8d7da") && svg.contains("#d4edda"), "filled by status");
    assert!(svg.contains("stroke-dasharray"), "the implicit edge is dashed");
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(readme.contains("](docs/graph.svg)"), "the README shows the picture");
}

#[test]
fn statuses_come_from_the_log_unless_live() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  d: { type: builtin/directory, config: { path: d } }\n  f: { type: builtin/file, dependencies: { dir: d }, config: { path: \"{{ dir.state.path }}/f\", content: x } }\n",
    );
    let graph = |extra: &[&str]| ws.run(&[&["graph", "-f", "manifest.yaml", "--format", "dot"], extra].concat());
    let before = graph(&[]);
    assert_eq!(before.code, 0, "{}", before.all());
    assert!(before.stdout.contains("d\\nbuiltin/directory\\nUNKNOWN"), "never observed:\n{}", before.stdout);
    assert_eq!(ws.apply(&[]).code, 0);
    let after = graph(&[]);
    assert!(after.stdout.contains("f\\nbuiltin/file\\nVALID"), "{}", after.stdout);
    std::fs::remove_file(ws.path("d/f")).unwrap();
    assert!(graph(&[]).stdout.contains("f\\nbuiltin/file\\nVALID"), "the log's latest observation");
    let live = graph(&["--live"]);
    assert_eq!(live.code, 0, "{}", live.all());
    assert!(live.stdout.contains("f\\nbuiltin/file\\nMISSING"), "a plan made now:\n{}", live.stdout);
    assert!(!ws.exists("d/f"), "--live runs no action");
}

#[test]
fn an_invalid_manifest_or_format_is_refused_as_plan_refuses_it() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  a: { type: builtin/directory, dependencies: { x: b }, config: { path: a } }\n  b: { type: builtin/directory, dependencies: { y: a }, config: { path: b } }\n",
    );
    let graph = ws.run(&["graph", "-f", "manifest.yaml"]);
    let plan = ws.plan(&[]);
    assert_eq!((graph.code, plan.code), (2, 2), "{}", graph.all());
    assert!(graph.stderr.contains("cycle"), "{}", graph.all());
    assert_eq!(graph.stderr, plan.stderr, "the same errors as plan");
    let bad = ws.run(&["graph", "-f", "manifest.yaml", "--format", "png"]);
    assert_eq!(bad.code, 2, "{}", bad.all());
    assert!(bad.stderr.contains("invalid value 'png'") && bad.stderr.contains("mermaid, dot, svg"), "{}", bad.all());
}
