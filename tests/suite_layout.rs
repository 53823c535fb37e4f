//! Plain `cargo test` passes on a machine with only the toolchain, and no test passes there by
//! doing nothing: every test that needs something beyond the toolchain (Docker, helm, Lua, a
//! cluster, an API server of its own) is `#[ignore = "needs …"]`d with the command that runs
//! it, and fails without it when run (`.ci/run` runs them with `--include-ignored`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What a test calls when it needs something beyond the toolchain.
const NEEDS: [&str; 7] =
    ["docker::env()", "helm()", "argocd_health(", "Cluster::new(", "on_cluster(", "ApiServer::start(", "pods::env()"];

/// Each function of `text` at the start of a line (tests and helpers alike): its name, the
/// attributes and doc comments above it, and its body.
fn functions(text: &str) -> Vec<(String, String, String)> {
    let start = regex::Regex::new(r"(?m)^(?:pub )?(?:async )?fn ([a-z_0-9]+)").unwrap();
    let starts: Vec<(usize, String)> =
        start.captures_iter(text).map(|c| (c.get(0).unwrap().start(), c[1].to_string())).collect();
    starts
        .iter()
        .map(|(at, name)| {
            let above: Vec<&str> =
                text[..*at].lines().rev().take_while(|l| l.starts_with("#[") || l.starts_with("///")).collect();
            let body = text[*at..].split("\n}\n").next().unwrap_or("").to_string();
            (name.clone(), above.join("\n"), body)
        })
        .collect()
}

#[test]
fn every_test_that_needs_more_than_the_toolchain_is_ignored_with_its_command() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut checked = 0;
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "rs") || path.ends_with("suite_layout.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let functions = functions(&text);
        // Which functions need something, directly or through a helper of the same file.
        let mut needing: BTreeSet<String> = BTreeSet::new();
        loop {
            let before = needing.len();
            for (name, _, body) in &functions {
                let calls = |f: &String| body.contains(&format!("{f}(")) && f != name;
                if NEEDS.iter().any(|n| body.contains(n)) || needing.iter().any(calls) {
                    needing.insert(name.clone());
                }
            }
            if needing.len() == before {
                break;
            }
        }
        let attributes: BTreeMap<&String, &String> = functions.iter().map(|(n, a, _)| (n, a)).collect();
        for name in &needing {
            let above = attributes[name];
            if !(above.contains("#[test]") || above.contains("#[tokio::test")) {
                continue;
            }
            checked += 1;
            let ignored = above.lines().any(|l| l.starts_with("#[ignore = \"needs ") && l.contains("cargo test"));
            if !ignored {
                missing.push(format!("{}: {name}", path.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(checked > 50, "found only {checked} tests that need a tool: is this check still reading the tests?");
    assert!(missing.is_empty(), "not #[ignore = \"needs …: <command>\"]d: {missing:#?}");
}
