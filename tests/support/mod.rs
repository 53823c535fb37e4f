//! Helpers for the black-box tests: run the real `deployster` binary on manifests written into
//! temporary directories, with the fixture resource type beside them.
#![allow(dead_code)] // each test binary uses a different subset

#[cfg(feature = "kube")]
pub mod cluster;
#[cfg(feature = "docker")]
pub mod docker;
#[cfg(feature = "kube")]
pub mod helm;
#[cfg(all(feature = "docker", feature = "kube"))]
pub mod pod_objects;
#[cfg(all(feature = "docker", feature = "kube"))]
pub mod pods;
#[cfg(feature = "kube")]
pub mod proxy;
#[cfg(feature = "kube")]
pub mod replicas;
#[cfg(feature = "kube")]
pub mod webhook;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use regex::Regex;

use serde_json::Value;

/// Fixture configs that break the protocol in state or an action, and the `check-type` check
/// each must fail (tests/local/check_type.rs on processes, tests/docker_engine/docker.rs in containers).
pub const BROKEN_TYPE_CASES: [(&str, &str); 7] = [
    ("raw: nope", "P011"),
    ("respond: {status: STALE}", "P012"),
    ("action_exit: 3", "P013"),
    ("stays_stale: true", "P014"),
    ("changing: true", "P015"),
    ("strict: true", "P017"),
    ("planned: {content: other}", "P018"),
];

/// `examples/k8s/builtins.yaml`'s Manifest as a controller that runs built-ins beside it
/// (`--executor docker`) takes it: its files under `base` on this machine, and `plugs` (YAML
/// lines indented by four, or nothing) for its `files` claim, which no Pod mounts there.
pub fn builtins_example_on_this_machine(base: &Path, plugs: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/k8s/builtins.yaml")).unwrap();
    let manifest = example.split("\n---\n").find(|doc| doc.contains("kind: Manifest")).expect("the example's Manifest");
    let (head, rest) = manifest.split_once("  plugs:\n").expect("the example's plugs");
    let (_, resources) = rest.split_once("  resources:\n").expect("the example's resources");
    let plugs = if plugs.is_empty() { String::new() } else { format!("  plugs:\n{plugs}") };
    let head = head.lines().map(|l| {
        if l.trim_start().starts_with("base:") { format!("    base: {}", base.display()) } else { l.to_string() }
    });
    format!("{}\n{plugs}  resources:\n{resources}\n", head.collect::<Vec<_>>().join("\n"))
}

/// A directory `out` and, written from its state, a file `out/{file}` holding `content` (as
/// YAML writes it in double quotes): the manifest the log, saved-plan and outputs tests share.
/// `head` goes before `resources:` (vars, sensitive); `tail` after them (outputs).
pub fn dir_and_file(head: &str, file: &str, content: &str, tail: &str) -> String {
    format!(
        r#"
{head}
resources:
  dir: {{ type: builtin/directory, config: {{ path: out }} }}
  file:
    type: builtin/file
    dependencies: {{ d: dir }}
    config: {{ path: "{{{{ d.state.path }}}}/{file}", content: "{content}" }}
{tail}"#
    )
}

/// The deployster binary under test.
pub fn deployster() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_deployster"))
}

/// The fixture resource type (`tests/fixture-type`), built once per test process next to the
/// deployster binary.
pub fn fixture() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let bin = deployster();
            let path = bin.with_file_name("deployster-fixture-type");
            if is_fresh(&path) {
                return path;
            }
            let mut build = Command::new(env!("CARGO"));
            build.args(["build", "--quiet", "-p", "deployster-fixture-type"]);
            if bin.parent().and_then(Path::file_name).is_some_and(|d| d == "release") {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo to build the fixture type");
            assert!(status.success(), "building the fixture type failed");
            assert!(path.exists(), "fixture type not found at {}", path.display());
            path
        })
        .clone()
}

/// Whether the built fixture is newer than its sources (saves a cargo run per test process).
fn is_fresh(binary: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixture-type");
    let Some(built) = modified(binary) else { return false };
    ["Cargo.toml", "src/main.rs"].iter().all(|f| modified(&root.join(f)).is_some_and(|m| m < built))
}

/// What a command did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(output: Output) -> Self {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Both streams, for assertions that do not care where a message went.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.all()))
    }
}

/// A temporary directory holding a manifest, with `./fixture` linked to the fixture type.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink(fixture(), dir.path().join("fixture")).expect("link fixture");
        Workspace { dir }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// The workspace path as a string, for manifests.
    pub fn root(&self) -> String {
        self.dir.path().display().to_string()
    }

    pub fn write(&self, relative: &str, content: &str) -> PathBuf {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&path, content).expect("write file");
        path
    }

    /// Writes `manifest.yaml`, replacing `$WS` with the workspace path.
    pub fn manifest(&self, yaml: &str) -> PathBuf {
        self.write("manifest.yaml", &yaml.replace("$WS", &self.root()))
    }

    /// Makes the fixture answer `init` for resource `name` with `content`, verbatim.
    pub fn init_response(&self, name: &str, content: &str) {
        self.write(&format!("fixture-init/{name}.json"), content);
    }

    /// Runs deployster in the workspace with stdin closed (no terminal).
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_env(args, &[])
    }

    /// Starts deployster in the workspace in the background, stdin closed, output piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.spawn_with_env(args, &[])
    }

    /// [`Workspace::spawn`] with extra environment variables.
    pub fn spawn_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        Command::new(deployster())
            .args(args)
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start deployster")
    }

    /// Runs deployster with extra environment variables.
    pub fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let output = Command::new(deployster())
            .args(args)
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run deployster");
        Run::from(output)
    }

    /// [`Workspace::run`], with the peak resident memory of the deployster process in KiB (from
    /// `wait4`, which reaps it: the peak is the whole run's, up to its last instruction).
    #[allow(clippy::zombie_processes)]
    pub fn run_measured(&self, args: &[&str]) -> (Run, u64) {
        let mut child = self.spawn(args);
        let read = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = read(Box::new(child.stdout.take().unwrap()));
        let stderr = read(Box::new(child.stderr.take().unwrap()));
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, whose pid we hold; both pointers are valid.
        let waited = unsafe { nix::libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        assert_eq!(waited, child.id() as i32, "wait4");
        let code = if nix::libc::WIFEXITED(status) { nix::libc::WEXITSTATUS(status) } else { -1 };
        let run = Run { code, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() };
        (run, usage.ru_maxrss as u64)
    }

    pub fn apply(&self, extra: &[&str]) -> Run {
        self.run(&[&["apply", "-f", "manifest.yaml", "--yes"], extra].concat())
    }

    pub fn plan(&self, extra: &[&str]) -> Run {
        self.run(&[&["plan", "-f", "manifest.yaml"], extra].concat())
    }

    pub fn exists(&self, relative: &str) -> bool {
        self.path(relative).exists()
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).unwrap_or_else(|e| panic!("read {relative}: {e}"))
    }

    /// The requests recorded by fixture resources configured with `record: $WS/<file>`.
    pub fn recorded(&self, file: &str) -> Vec<Value> {
        match std::fs::read_to_string(self.path(file)) {
            Ok(text) => text.lines().map(|l| serde_json::from_str(l).expect("recorded JSON")).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Runs `deployster <args>` on a pseudo-terminal in `ws`. Every time a new prompt appears,
/// `answer` gets its text and returns the key to press. Returns (exit code, terminal output).
pub fn on_terminal(ws: &Workspace, args: &[&str], answer: impl Fn(&str) -> &'static str) -> (i32, String) {
    let command = std::iter::once(deployster().display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(ws.dir.path())
        // A terminal gets `+ ~ -` markers, and colour unless NO_COLOR: the words stay whole.
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("`script` (util-linux) is needed for terminal tests");
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let prompt = Regex::new(
        r"(Apply these changes\?|Apply these changes, deleting \d+ [^?]*\?|Delete them and apply\?|Delete these \d+ resources\? This cannot be undone\.|Apply \w+ \([^)]*\)\?|Run \w+/\w+: [^?]*\?) \[y/N\]",
    )
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (mut output, mut answered) = (String::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(bytes) => output.push_str(&String::from_utf8_lossy(&bytes)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let prompts: Vec<String> = prompt.find_iter(&output).map(|m| m.as_str().to_string()).collect();
        for p in prompts.iter().skip(answered) {
            stdin.write_all(answer(p).as_bytes()).unwrap();
            stdin.flush().unwrap();
            answered += 1;
        }
        assert!(Instant::now() < deadline, "the terminal session did not finish:\n{output}");
    }
    let status = child.wait().unwrap();
    (status.code().unwrap_or(-1), output)
}

/// The Argo CD health check the chart ships, run by `lua5.4` on `object` as Argo CD runs it (the
/// object as a Lua table named `obj`): its (status, message).
pub fn argocd_health(object: &Value) -> (String, String) {
    let file = match object["kind"].as_str() {
        Some("Pipeline") => "argocd-health-pipeline.lua",
        Some("ManifestPreview") => "argocd-health-preview.lua",
        _ => "argocd-health.lua",
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/deployster/health").join(file);
    let script = std::fs::read_to_string(path).expect("the chart's health check");
    let program = format!(
        "local obj = {}\nlocal function health(obj)\n{script}\nend\nlocal hs = health(obj)\nio.write(hs.status, \"\\n\", hs.message)\n",
        lua_literal(object)
    );
    let output =
        Command::new("lua5.4").args(["-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let mut child = output.expect("this test needs lua5.4 (Debian's lua5.4 package; .ci/run installs it)");
    child.stdin.take().unwrap().write_all(program.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the health check failed: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let (status, message) = text.split_once('\n').unwrap_or((&text, ""));
    (status.to_string(), message.to_string())
}

/// `value` as a Lua table constructor (JSON null as nil, as Argo CD converts it).
fn lua_literal(value: &Value) -> String {
    let string = |s: &str| {
        let mut out = String::from("\"");
        for b in s.bytes() {
            match b {
                b'"' | b'\\' => out.push_str(&format!("\\{}", b as char)),
                0x20..=0x7e => out.push(b as char),
                _ => out.push_str(&format!("\\{b:03}")),
            }
        }
        out.push('"');
        out
    };
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(items) => format!("{{{}}}", items.iter().map(lua_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let fields: Vec<String> =
                map.iter().map(|(k, v)| format!("[{}] = {}", string(k), lua_literal(v))).collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// The commands of `text`'s shell blocks (```` ```sh ````), in order, each with its comment
/// (what follows `  #`): the commands a page asks its reader to run.
pub fn page_commands(text: &str) -> Vec<(String, String)> {
    let mut in_block = false;
    let mut commands = Vec::new();
    for line in text.lines().map(str::trim) {
        match line {
            "```sh" => in_block = true,
            "```" => in_block = false,
            "" => {}
            _ if in_block => {
                let (command, comment) = line.split_once("  #").unwrap_or((line, ""));
                commands.push((command.trim().to_string(), comment.trim().to_string()));
            }
            _ => {}
        }
    }
    commands
}

/// Each result a page's comment quotes (`"…"`; a `…` inside separates pieces found in order or
/// not) is in what `command` said.
pub fn assert_said(command: &str, comment: &str, said: &str) {
    let quoted = Regex::new(r#""([^"]+)""#).unwrap();
    for expected in quoted.captures_iter(comment) {
        for piece in expected[1].split('…').map(str::trim).filter(|p| !p.is_empty()) {
            assert!(said.contains(piece), "{command}: `{piece}` is not in what it said:\n{said}");
        }
    }
}
