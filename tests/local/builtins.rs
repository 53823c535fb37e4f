//! Built-in types answer the same inside deployster as they do as `deployster __type` programs:
//! every call below runs on both executors, each in a workspace of its own laid out alike, and
//! the two must give the same exit code, output (bytes and streamed lines), error and files —
//! but for one difference: a program that fails exits with code 1 and names itself on stderr
//! (`builtin/file: …`); answered inside deployster, no process exits, so the outcome is
//! `Exit::Failed`, and stderr is the cause alone (the resource's type is known).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deployster::builtins::InProcess;
use deployster::engine::executor::process::ProcessExecutor;
use deployster::engine::executor::{Executor, Invocation};
use deployster::engine::typeref::TypeRef;
use deployster::executors::route::Router;
use serde_json::{Value, json};

/// One call: built-in type, arguments, config (or raw request text), and how it is invoked.
struct Call {
    kind: &'static str,
    args: &'static [&'static str],
    request: Request,
    entrypoint: Option<&'static str>,
    /// A working directory that does not exist.
    no_workdir: bool,
}

enum Request {
    Config(Value),
    /// Config with the `files` plug pointing at `<workspace>/plug`.
    WithPlug(Value),
    Raw(&'static str),
}

fn call(kind: &'static str, args: &'static [&'static str], config: Value) -> Call {
    Call { kind, args, request: Request::Config(config), entrypoint: None, no_workdir: false }
}

/// The sequence: init of each type; a directory and a file created, read, changed and
/// deleted; every way a call can fail; init again.
fn calls() -> Vec<Call> {
    vec![
        call("directory", &[], json!({})),
        call("file", &[], json!({})),
        call("package", &[], json!({})),
        call("directory", &["state"], json!({"path": "sub"})),
        call("directory", &["create"], json!({"path": "sub", "mode": "0700"})),
        call("directory", &["state"], json!({"path": "sub", "mode": "0700"})),
        call("directory", &["state"], json!({"path": "sub", "mode": "0755"})),
        call("directory", &["chmod"], json!({"path": "sub", "mode": "0755"})),
        call("file", &["state"], json!({"path": "sub/f", "content": "x"})),
        call("file", &["write"], json!({"path": "sub/f", "content": "x", "mode": "0640"})),
        call("file", &["state"], json!({"path": "sub/f", "content": "x", "mode": "0640"})),
        call("file", &["state"], json!({"path": "sub/f", "content": "changed"})),
        call("file", &["write"], json!({"path": "sub/f", "content": "changed"})),
        call("file", &["state"], json!({"path": "sub/f", "content": "changed", "mode": "0600"})),
        call("file", &["chmod"], json!({"path": "sub/f", "content": "changed", "mode": "0600"})),
        call("file", &["chmod"], json!({"path": "sub/f", "content": "changed"})),
        call("directory", &["delete"], json!({"path": "sub"})),
        call("file", &["state"], json!({"path": "sub", "content": ""})),
        call("directory", &["state"], json!({"path": "sub/f"})),
        call("file", &["delete"], json!({"path": "sub/f", "content": "changed"})),
        call("file", &["delete"], json!({"path": "sub/f", "content": "changed"})),
        call("directory", &["delete"], json!({"path": "sub"})),
        call("file", &["write"], json!({"path": "no/such/dir/f", "content": "x"})),
        call("directory", &["state"], json!({"path": "d", "mode": "999"})),
        call("directory", &["state"], json!({"path": "d", "mode": 755})),
        call("file", &["explode"], json!({"path": "f", "content": ""})),
        call("file", &["state"], json!({"path": 3, "content": ""})),
        call("file", &["state"], json!({"path": "f"})),
        call("nope", &[], json!({})),
        Call {
            request: Request::WithPlug(json!({"path": "in-plug", "content": "p"})),
            ..call("file", &["write"], json!(null))
        },
        Call {
            request: Request::WithPlug(json!({"path": "in-plug", "content": "p"})),
            ..call("file", &["state"], json!(null))
        },
        Call { request: Request::Raw("not json"), ..call("file", &["state"], json!(null)) },
        Call { request: Request::Raw(r#"{"name": "r"}"#), ..call("directory", &["state"], json!(null)) },
        // Init again: in-process, the answer kept from the first (any JSON request), the same.
        call("directory", &[], json!({"other": "config"})),
        call("file", &[], json!({})),
        Call { request: Request::Raw("{}"), ..call("directory", &[], json!(null)) },
        Call { request: Request::Raw("not json"), ..call("directory", &[], json!(null)) },
        Call { entrypoint: Some("other"), ..call("file", &["state"], json!({"path": "f", "content": ""})) },
        Call { no_workdir: true, ..call("file", &["state"], json!({"path": "f", "content": ""})) },
    ]
}

/// What a call did, with the workspace's path replaced by `<ws>`.
#[derive(Debug, PartialEq)]
enum Seen {
    Ran { exit: String, stdout: String, stderr: String, lines: Vec<String> },
    Failed { reason: &'static str, message: String },
}

async fn run(executor: &dyn Executor, ws: &Path, c: &Call) -> Seen {
    let hide = |text: &str| text.replace(&ws.display().to_string(), "<ws>");
    let request = match &c.request {
        Request::Config(config) => json!({"name": "r", "config": config, "workspace": ws}).to_string(),
        Request::WithPlug(config) => {
            json!({"name": "r", "config": config, "workspace": "/nonexistent", "plugs": {"files": ws.join("plug")}})
                .to_string()
        }
        Request::Raw(text) => text.to_string(),
    };
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let invocation = Invocation {
        entrypoint: c.entrypoint.map(str::to_string),
        args: c.args.iter().map(|a| a.to_string()).collect(),
        stdin: request.into_bytes(),
        workdir: Some(if c.no_workdir { ws.join("gone") } else { ws.to_path_buf() }),
        sink: Some(Arc::new(move |stream, line: &str| seen.lock().unwrap().push(format!("{stream:?}: {line}")))),
        ..Invocation::new(TypeRef::Builtin(c.kind.into()), Duration::from_secs(30))
    };
    match executor.invoke(invocation).await {
        Ok(outcome) => Seen::Ran {
            exit: outcome.exit.to_string(),
            stdout: hide(&String::from_utf8_lossy(&outcome.stdout)),
            stderr: hide(&String::from_utf8_lossy(&outcome.stderr)),
            lines: lines.lock().unwrap().iter().map(|l| hide(l)).collect(),
        },
        Err(e) => Seen::Failed { reason: e.reason(), message: hide(&e.to_string()) },
    }
}

/// What a program's answer is when answered inside deployster: a failure (exit code 1) has no
/// exit code, and its stderr does not name the type.
fn as_answered_in_process(seen: Seen, kind: &str) -> Seen {
    match seen {
        Seen::Ran { exit, stdout, stderr, lines } if exit == "exit code 1" => {
            let prefix = format!("builtin/{kind}: ");
            Seen::Ran {
                exit: "failed".into(),
                stdout,
                stderr: stderr.strip_prefix(&prefix).map(str::to_string).unwrap_or(stderr),
                lines: lines.into_iter().map(|l| l.replacen(&format!("Stderr: {prefix}"), "Stderr: ", 1)).collect(),
            }
        }
        other => other,
    }
}

/// Every file and directory under `dir`: relative path, mode, and content for files.
fn tree(dir: &Path) -> Vec<(PathBuf, u32, Option<String>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            let content = meta.is_file().then(|| std::fs::read_to_string(&path).unwrap());
            if meta.is_dir() {
                todo.push(path.clone());
            }
            found.push((path.strip_prefix(dir).unwrap().to_path_buf(), meta.permissions().mode() & 0o7777, content));
        }
    }
    found.sort();
    found
}

fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("plug")).unwrap();
    ws
}

#[tokio::test]
async fn built_ins_answer_alike_in_process_and_as_programs() {
    let deployster = PathBuf::from(env!("CARGO_BIN_EXE_deployster"));
    let as_programs = ProcessExecutor::new(deployster.clone());
    let fallback = Arc::new(ProcessExecutor::new(deployster));
    let in_process = Arc::new(InProcess::new());
    let router = Router { in_process: Some(in_process.clone()), ..Router::programs(fallback.clone()) };
    let (ws_programs, ws_in_process) = (workspace(), workspace());
    let calls = calls();
    for (n, c) in calls.iter().enumerate() {
        let expected = as_answered_in_process(run(&as_programs, ws_programs.path(), c).await, c.kind);
        let got = run(&router, ws_in_process.path(), c).await;
        assert_eq!(got, expected, "call {n}: builtin/{} {:?}", c.kind, c.args);
        assert_eq!(tree(ws_in_process.path()), tree(ws_programs.path()), "files after call {n}");
    }
    assert_eq!(fallback.programs_started(), 0, "no call started a program here");
    // The call with an entrypoint went to the program executor, which refused it, and the one
    // with no working directory was refused before an answer; all others were answered here.
    assert_eq!(in_process.answered(), calls.len() as u64 - 2);
    assert_eq!(in_process.inits_reused(), 3, "the second inits answered with the first's answer");
    assert!(as_programs.programs_started() >= calls.len() as u64 - 3, "the reference really ran programs");
}

#[tokio::test]
async fn package_state_and_actions_run_as_programs() {
    // They run the package's own scripts: those need a process group, a time limit and signals.
    let fallback = Arc::new(ProcessExecutor::new(PathBuf::from(env!("CARGO_BIN_EXE_deployster"))));
    let in_process = Arc::new(InProcess::new());
    let router = Router { in_process: Some(in_process.clone()), ..Router::programs(fallback.clone()) };
    let ws = workspace();
    let config = json!({"name": "app", "version": "1.0.0", "root": ws.path(), "source": ws.path()});
    for args in [&["state"][..], &["install"]] {
        let c = Call { args, ..call("package", &[], config.clone()) };
        let seen = run(&router, ws.path(), &c).await;
        assert!(matches!(seen, Seen::Ran { .. }), "{seen:?}");
    }
    assert_eq!(fallback.programs_started(), 2);
    assert_eq!(in_process.answered(), 0);
    // What a budget of invocations counts: programs started, not calls answered here.
    let invocation = |kind: &str, args: &[&str]| Invocation {
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Invocation::new(TypeRef::Builtin(kind.into()), Duration::from_secs(1))
    };
    assert!(!router.starts_program(&invocation("file", &["state"])));
    assert!(!router.starts_program(&invocation("package", &[])));
    assert!(router.starts_program(&invocation("package", &["state"])));
}
