//! Helm for the tests of the chart `charts/deployster`: `DEPLOYSTER_HELM`, or `helm` on PATH
//! (`../shared/tools/install-helm` installs it). The tests that need it are `#[ignore]`d, so
//! plain `cargo test` lists them, and fail without it.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/deployster")
}

/// Helm. A test that needs it is `#[ignore]`d with the command that runs it, and fails (never
/// passes) without it.
pub fn helm() -> PathBuf {
    let candidate = std::env::var_os("DEPLOYSTER_HELM").map(PathBuf::from).unwrap_or_else(|| "helm".into());
    let works = Command::new(&candidate).arg("version").output().is_ok_and(|o| o.status.success());
    assert!(
        works,
        "this test needs helm ({} does not run): ../shared/tools/install-helm installs it; set DEPLOYSTER_HELM",
        candidate.display()
    );
    candidate
}

/// `helm ARGS`: whether it succeeded, stdout, stderr.
pub fn run_helm(helm: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(helm).args(args).output().expect("run helm");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}
