//! `apply --confirm ONCE|RESOURCE|ACTION` on a real terminal: the binary runs under `script`,
//! which gives it a pseudo-terminal; each prompt is answered only once it has appeared.

mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use regex::Regex;
use support::Workspace;

/// Runs `deployster <args>` on a pseudo-terminal in `ws`. Every time a new prompt appears,
/// `answer` gets its text and returns the key to press. Returns (exit code, terminal output).
fn on_terminal(ws: &Workspace, args: &[&str], answer: impl Fn(&str) -> &'static str) -> (i32, String) {
    let command = std::iter::once(support::deployster().display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(ws.dir.path())
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
    let prompt = Regex::new(r"(Apply these changes\?|Apply \w+ \([^)]*\)\?|Run \w+/\w+: [^?]*\?) \[y/N\]").unwrap();
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

const TWO: &str = "resources:\n  alpha: { type: ./fixture }\n  beta: { type: ./fixture }\n";

#[test]
fn once_asks_after_the_plan_and_no_changes_nothing() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml"], |_| "n");
    assert_eq!(code, 1, "{out}");
    let plan_at = out.find("Plan: 2 to apply").expect("plan shown");
    let prompt_at = out.find("Apply these changes?").expect("prompt shown");
    assert!(plan_at < prompt_at, "the question must come after the plan:\n{out}");
    assert!(out.contains("Apply cancelled; nothing was changed."), "{out}");
    assert!(!ws.exists("alpha.marker") && !ws.exists("beta.marker"));
}

#[test]
fn once_yes_applies_everything() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--confirm", "ONCE"], |_| "y");
    assert_eq!(code, 0, "{out}");
    assert!(ws.exists("alpha.marker") && ws.exists("beta.marker"));
}

#[test]
fn resource_mode_asks_per_resource_and_declining_one_blocks_its_dependents() {
    let ws = Workspace::new();
    ws.manifest(&format!("{TWO}  gamma: {{ type: ./fixture, dependencies: {{ b: beta }} }}\n"));
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--confirm", "resource"], |p| {
        if p.contains("beta") { "n" } else { "y" }
    });
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Apply alpha (MISSING; actions: create)?"), "{out}");
    assert!(!out.contains("Apply these changes?"), "RESOURCE mode does not ask once:\n{out}");
    assert!(ws.exists("alpha.marker"));
    assert!(!ws.exists("beta.marker") && !ws.exists("gamma.marker"));
    assert!(out.contains("DECLINED  beta") && out.contains("blocked by beta"), "{out}");
}

#[test]
fn action_mode_asks_per_action() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml", "--confirm", "action"], |p| {
        if p.contains("alpha") { "y" } else { "n" }
    });
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Run alpha/create: Create "), "{out}");
    assert!(ws.exists("alpha.marker") && !ws.exists("beta.marker"));
}

/// The prompt may wait an hour: after "yes", every state is read again, and if anything differs
/// from the plan that was shown, nothing is applied.
#[test]
fn a_state_changed_while_the_prompt_waited_stops_the_apply() {
    let ws = Workspace::new();
    ws.manifest(TWO);
    let (code, out) = on_terminal(&ws, &["apply", "-f", "manifest.yaml"], |_| {
        std::fs::write(ws.path("alpha.marker"), "made by hand while the prompt waited").unwrap();
        "y"
    });
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the plan no longer holds; nothing was applied"), "{out}");
    assert!(out.contains("resource `alpha`: MISSING when planned, VALID now"), "{out}");
    assert!(!ws.exists("beta.marker"), "nothing was applied:\n{out}");
    assert_eq!(std::fs::read_to_string(ws.path("alpha.marker")).unwrap(), "made by hand while the prompt waited");
}
