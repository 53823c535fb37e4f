//! The engine's modules read top-down: each imports only modules above it, never one that
//! imports it back (issue 10), and none knows of the command line or Kubernetes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the engine modules its code (comments and tests aside) refers to.
fn engine_imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut files: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .filter(|(name, _)| name != "mod" && !name.ends_with("_tests"))
        .collect();
    files.push(("executor".into(), dir.join("executor/mod.rs")));
    let names: BTreeSet<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let reference = regex::Regex::new(r"(?:super|crate::engine)::([a-z_]+)").unwrap();
    files
        .iter()
        .map(|(name, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let code: String =
                code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            assert!(
                !["crate::cli", "crate::controller", "kube::", "clap::"].iter().any(|outside| code.contains(outside)),
                "src/engine/{name} refers to the command line or Kubernetes"
            );
            let used = reference
                .captures_iter(&code)
                .map(|c| c[1].to_string())
                .filter(|m| names.contains(m) && m != name)
                .collect();
            (name.clone(), used)
        })
        .collect()
}

#[test]
fn engine_modules_import_each_other_without_cycles() {
    let imports = engine_imports();
    assert!(imports["run"].contains("resource") && imports["resource"].contains("context"), "{imports:?}");
    // Peel off modules that import nothing left; what remains is on a cycle or imports one.
    let mut left = imports.clone();
    while let Some(leaf) =
        left.iter().find(|(_, used)| used.iter().all(|m| !left.contains_key(m))).map(|(n, _)| n.clone())
    {
        left.remove(&leaf);
    }
    assert!(left.is_empty(), "engine modules on (or importing) an import cycle: {left:?}");
}
