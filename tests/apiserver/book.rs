//! The book's controller chapter, run as a reader would on a real API server: each command of
//! its "Try it" section in order, its namespace made the test's own.

use std::process::{Child, Command, Stdio};

use crate::support::cluster::{Cluster, free_port};
use crate::support::{assert_said, deployster, page_commands};

/// Kills the commands a page runs in the background (`… &`) when the test ends, as the page
/// asks the reader to (`kill %1`).
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the commands of `page`'s section under `heading` as a reader would, with the page's
/// namespace (`demo`) and metrics port made the test's own and `example` (a file of the
/// repository the commands apply) copied so; returns the test's cluster and how many commands
/// ran in the foreground and in the background.
fn run_section(name: &str, page: &str, heading: &str, example: &str, port_on_page: &str) -> (Cluster, usize, usize) {
    let cluster = Cluster::new(name);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs").join(page)).unwrap();
    let from = page.find(heading).unwrap_or_else(|| panic!("the page has a section {heading}"));
    let section = &page[from..from + page[from + 3..].find("\n## ").map_or(page.len() - from, |at| at + 3)];
    // The page's namespace and metrics port, made this test's own.
    let namespace = regex::Regex::new(r"\bdemo\b").unwrap();
    let port = free_port().to_string();
    let own = |text: &str| namespace.replace_all(text, cluster.namespace.as_str()).replace(port_on_page, &port);
    let work = tempfile::tempdir().unwrap();
    let copy = work.path().join(example);
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::write(&copy, own(&std::fs::read_to_string(root.join(example)).unwrap())).unwrap();
    let path = format!("{}:{}", deployster().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let shell = |command: &str| {
        let mut shell = Command::new("bash");
        shell.args(["-c", command]).current_dir(work.path()).env("KUBECONFIG", &cluster.kubeconfig).env("PATH", &path);
        shell
    };
    let mut background = Background(Vec::new());
    let mut ran = 0;
    for (command, comment) in page_commands(section) {
        // The test's namespace exists already: the cluster made it.
        if command.starts_with("kubectl create namespace") {
            continue;
        }
        let command = own(&command);
        if let Some(command) = command.strip_suffix('&') {
            // `exec`: the process killed at the end is the command's own, not a shell's.
            let command = format!("exec {command}");
            background.0.push(shell(&command).stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap());
            continue;
        }
        let out = shell(&command).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let log = std::fs::read_to_string(work.path().join("controller.log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "{command}: {}\n{said}\nthe controller's log:\n{log}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_said(&command, &comment, &said);
        ran += 1;
    }
    let in_background = background.0.len();
    drop(background);
    (cluster, ran, in_background)
}

#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver book:: -- --include-ignored"]
#[test]
fn the_controller_chapter_s_first_manifest_runs_as_written() {
    let (cluster, ran, in_background) =
        run_section("tour", "controller.md", "## Try it", "examples/k8s/first.yaml", "9090");
    assert_eq!((in_background, ran), (1, 12), "the controller in the background, and the commands");
    assert!(cluster.get(&["dm", "hello"]).is_none(), "the Manifest is gone");
    assert!(cluster.get(&["configmap", "hello"]).is_none(), "and its ConfigMap with it");
}

/// The Pipelines chapter's walk through a `Pipeline` in a cluster, on a bare API server: the
/// revision through staging and the one-box, waiting for the fleet's approval, approved by
/// annotation, through, and the next revision started.
#[ignore = "needs a Kubernetes API server: DEPLOYSTER_E2E_KUBECONFIG=<kubeconfig ../shared/apiserver/up.sh prints> cargo test --test apiserver book:: -- --include-ignored"]
#[test]
fn the_pipelines_chapter_s_cluster_walkthrough_runs_as_written() {
    let (cluster, ran, in_background) = run_section(
        "pipeline-tour",
        "pipelines.md",
        "## A `Pipeline` in a cluster",
        "examples/pipeline/k8s.yaml",
        "9091",
    );
    assert_eq!((in_background, ran), (1, 13), "the controller in the background, and the commands");
    let tested = cluster.get(&["configmap", "smoke-stg"]).unwrap();
    assert_eq!(tested["data"]["tested"], "1.1", "the smoke test of 1.1 ran first: {tested}");
}
