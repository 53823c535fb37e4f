//! Helm for the tests of the chart `charts/deployster`: `DEPLOYSTER_HELM`, or `helm` on PATH
//! (`../shared/tools/install-helm` installs it). Without it the tests skip with a reason, and
//! `DEPLOYSTER_REQUIRE_HELM=1` (as `.ci/run` sets) makes them fail instead.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/deployster")
}

pub fn helm() -> Option<PathBuf> {
    let candidate = std::env::var_os("DEPLOYSTER_HELM").map(PathBuf::from).unwrap_or_else(|| "helm".into());
    let works = Command::new(&candidate).arg("version").output().is_ok_and(|o| o.status.success());
    match works {
        true => Some(candidate),
        false if std::env::var("DEPLOYSTER_REQUIRE_HELM").is_ok_and(|v| v == "1") => {
            panic!("DEPLOYSTER_REQUIRE_HELM=1 but helm is not available ({})", candidate.display())
        }
        false => {
            eprintln!(
                "skipping: helm is not available; ../shared/tools/install-helm installs it (set DEPLOYSTER_HELM)"
            );
            None
        }
    }
}

/// `helm ARGS`: whether it succeeded, stdout, stderr.
pub fn run_helm(helm: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(helm).args(args).output().expect("run helm");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}
