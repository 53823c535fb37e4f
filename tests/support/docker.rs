//! Docker for the tests: reachability (a test that needs Docker fails without it; it is
//! `#[ignore]`d, so plain `cargo test` lists it), the test images built from static binaries
//! through the Docker API, and container queries by label.

#![allow(dead_code)] // shared by the tests and the Docker benchmark, which use different parts

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{BuildImageOptionsBuilder, ListContainersOptionsBuilder, TagImageOptionsBuilder};
use futures::StreamExt;

/// The built-in types' images (stages of one Dockerfile).
pub const DIRECTORY_IMAGE: &str = "deployster/directory:local";
pub const FILE_IMAGE: &str = "deployster/file:local";
/// The fixture type image; the `plugs` tag makes it ask for `ro` and `rw` plugs.
pub const FIXTURE_IMAGE: &str = "deployster/fixture:test";
pub const FIXTURE_PLUGS_IMAGE: &str = "deployster/fixture:plugs";

pub struct DockerEnv {
    pub runtime: tokio::runtime::Runtime,
    pub docker: Docker,
}

impl DockerEnv {
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// Containers carrying `label=value`, in any state.
    pub fn containers_with(&self, label: &str, value: &str) -> Vec<String> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{label}={value}")])]);
        let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        self.block_on(self.docker.list_containers(Some(options)))
            .expect("list containers")
            .into_iter()
            .filter_map(|c| c.id)
            .collect()
    }
}

/// Docker with the test images built. A test that needs it is `#[ignore]`d with the command
/// that runs it, and fails (never passes) without it.
pub fn env() -> &'static DockerEnv {
    try_env().unwrap_or_else(|why| {
        panic!("this test needs Docker (DOCKER_HOST or the default socket): {why}; .ci/run runs it where Docker runs")
    })
}

/// Docker with the test images built, or why not (the benchmarks print it and measure nothing).
pub fn try_env() -> Result<&'static DockerEnv, &'static str> {
    static ENV: OnceLock<Result<DockerEnv, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        let reachable = runtime.block_on(async {
            let docker = Docker::connect_with_defaults().map_err(|e| e.to_string())?;
            let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
                .await
                .map_err(|_| "no answer within 10s".to_string())?
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(docker)
        });
        reachable.map(|docker| {
            let env = DockerEnv { runtime, docker };
            build_images(&env);
            env
        })
    })
    .as_ref()
    .map_err(String::as_str)
}

/// The cargo profile the static binaries are built in: the test's own (a test run builds no
/// release, which took CI ten minutes), and release for a bench, whose figures are release's.
pub fn static_profile() -> &'static str {
    if cfg!(debug_assertions) { "dev" } else { "release" }
}

/// The deployster and fixture binaries, statically linked so that they run in `FROM scratch`.
pub fn static_binaries() -> (PathBuf, PathBuf) {
    let rustc = Command::new("rustc").arg("-vV").output().expect("run rustc -vV");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc reports its host");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--profile", static_profile(), "--target", &host])
        .args(["-p", "deployster", "-p", "deployster-fixture-type"])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the static binaries failed");
    let deployster = PathBuf::from(env!("CARGO_BIN_EXE_deployster"));
    let target = deployster
        .ancestors()
        .nth(2)
        .expect("target directory")
        .join(&host)
        .join(if static_profile() == "dev" { "debug" } else { "release" });
    (target.join("deployster"), target.join("deployster-fixture-type"))
}

fn build_images(env: &DockerEnv) {
    let (deployster, fixture) = static_binaries();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let builtins = [(root.join("examples/docker/Dockerfile"), "Dockerfile"), (deployster.clone(), "deployster")];
    build_image(env, &builtins, Some("directory"), &[DIRECTORY_IMAGE]);
    build_image(env, &builtins, Some("file"), &[FILE_IMAGE]);
    build_image(
        env,
        &[
            (root.join("tests/fixture-type/Dockerfile"), "Dockerfile"),
            (fixture, "deployster-fixture-type"),
            (deployster, "deployster"),
        ],
        None,
        &[FIXTURE_IMAGE, FIXTURE_PLUGS_IMAGE],
    );
}

/// Builds an image (the stage `target`, when given) from `files` (path, name in the context)
/// and gives it every tag.
fn build_image(env: &DockerEnv, files: &[(PathBuf, &str)], target: Option<&str>, tags: &[&str]) {
    let mut context = tar::Builder::new(Vec::new());
    context.sparse(false); // the daemon rejects GNU sparse entries
    for (path, name) in files {
        context
            .append_path_with_name(path, name)
            .unwrap_or_else(|e| panic!("add {} to the context: {e}", path.display()));
    }
    let context = context.into_inner().expect("finish the build context");
    let mut options = BuildImageOptionsBuilder::default().t(tags[0]).rm(true).forcerm(true);
    if let Some(target) = target {
        options = options.target(target);
    }
    let options = options.build();
    env.block_on(async {
        let mut progress = env.docker.build_image(options, None, Some(bollard::body_full(context.into())));
        while let Some(item) = progress.next().await {
            let info = item.unwrap_or_else(|e| panic!("building {}: {e}", tags[0]));
            if let Some(error) = info.error_detail {
                panic!("building {}: {error:?}", tags[0]);
            }
        }
        for tag in &tags[1..] {
            let (repo, tag_name) = tag.split_once(':').expect("tags are repo:tag");
            let options = TagImageOptionsBuilder::default().repo(repo).tag(tag_name).build();
            env.docker.tag_image(tags[0], Some(options)).await.expect("tag image");
        }
    });
}
