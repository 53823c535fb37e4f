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

/// The test binaries, one per need: each links the kube and Docker stacks, so each costs CI a
/// link; a module of one is what a test file was.
const BINARIES: [&str; 4] = ["local", "docker_engine", "apiserver", "cluster"];

/// Each test module: its binary, its name and its path.
fn test_modules() -> Vec<(&'static str, String, std::path::PathBuf)> {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut modules = Vec::new();
    for binary in BINARIES {
        for entry in std::fs::read_dir(tests.join(binary)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.extension().is_some_and(|x| x == "rs") && name != "main" {
                modules.push((binary, name, path));
            }
        }
    }
    modules
}

/// No test binary but the four: a test file goes into the module of the binary for its need.
#[test]
fn the_tests_are_four_binaries_one_per_need() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut found: Vec<String> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") || p.join("main.rs").exists())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut expected: Vec<String> = BINARIES.iter().map(|b| b.to_string()).collect();
    expected.sort();
    assert_eq!(found, expected, "test binaries (tests/*.rs and tests/*/main.rs)");
    for (binary, name, _) in test_modules() {
        let main = std::fs::read_to_string(tests.join(binary).join("main.rs")).unwrap();
        assert!(main.lines().any(|l| l == format!("mod {name};")), "tests/{binary}/main.rs declares mod {name}");
    }
}

#[test]
fn every_test_that_needs_more_than_the_toolchain_is_ignored_with_its_command() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for (binary, module, path) in test_modules() {
        if module == "suite_layout" {
            continue;
        }
        let command = format!("cargo test --test {binary} {module}::");
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
            let ignored = above.lines().any(|l| l.starts_with("#[ignore = \"needs ") && l.contains(&command));
            if !ignored {
                missing.push(format!("{binary}/{module}: {name} (its command: {command})"));
            }
        }
    }
    assert!(checked > 50, "found only {checked} tests that need a tool: is this check still reading the tests?");
    assert!(missing.is_empty(), "not #[ignore = \"needs …: <command>\"]d: {missing:#?}");
}
