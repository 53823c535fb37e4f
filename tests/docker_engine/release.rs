//! `image/release.sh`, run as a release is made (in the tests' profile): a static binary that
//! runs, the controller image as a tar Docker loads, the Helm chart, each with its checksum.

use std::path::Path;
use std::process::Command;

#[ignore = "needs Docker and helm: DEPLOYSTER_HELM=<helm> cargo test --test docker_engine release:: -- --include-ignored (.ci/run runs it)"]
#[test]
fn the_release_script_makes_the_binary_the_image_and_the_chart_with_their_checksums() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dist = tempfile::tempdir().unwrap();
    let helm = crate::support::helm::helm();
    let out = Command::new(root.join("image/release.sh"))
        .env("PROFILE", crate::support::docker::static_profile())
        .env("DIST", dist.path())
        .env("HELM", &helm)
        .output()
        .unwrap();
    assert!(out.status.success(), "image/release.sh: {}", String::from_utf8_lossy(&out.stderr));
    let version = env!("CARGO_PKG_VERSION");
    let sums = std::fs::read_to_string(dist.path().join("SHA256SUMS")).unwrap();
    let names: Vec<&str> = sums.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    assert_eq!(names.len(), 3, "{sums}");
    assert!(names.iter().any(|n| n.starts_with(&format!("deployster-{version}-"))), "{sums}");
    assert!(names.contains(&format!("deployster-controller-{version}.image.tar").as_str()), "{sums}");
    assert!(names.contains(&format!("deployster-{version}.tgz").as_str()), "{sums}");
    let check = Command::new("sha256sum").args(["-c", "SHA256SUMS"]).current_dir(dist.path()).output().unwrap();
    assert!(check.status.success(), "the checksums hold: {}", String::from_utf8_lossy(&check.stdout));

    // The binary runs alone, with no libc: as the image runs it.
    let binary = dist.path().join(names.iter().find(|n| !n.ends_with(".tar") && !n.ends_with(".tgz")).unwrap());
    let said = Command::new(&binary).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&said.stdout).trim(), format!("deployster {version}"));
    let ldd = Command::new("ldd").arg(&binary).output().expect("ldd (libc-bin) runs");
    let kind = format!("{}{}", String::from_utf8_lossy(&ldd.stdout), String::from_utf8_lossy(&ldd.stderr));
    assert!(kind.contains("statically linked") || kind.contains("not a dynamic executable"), "{kind}");
    // The chart installs that image by default, at that version.
    let chart = dist.path().join(format!("deployster-{version}.tgz"));
    let shown = Command::new(&helm).args(["show", "chart"]).arg(&chart).output().unwrap();
    let chart_yaml = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(chart_yaml.contains(&format!("version: {version}")), "{chart_yaml}");
    // The image tar loads.
    let tar = dist.path().join(format!("deployster-controller-{version}.image.tar"));
    let loaded = Command::new("docker").arg("load").arg("-i").arg(&tar).output().unwrap();
    let loaded_said = String::from_utf8_lossy(&loaded.stdout).to_string();
    assert!(
        loaded.status.success() && loaded_said.contains(&format!("deployster/controller:{version}")),
        "{loaded_said}"
    );
}
