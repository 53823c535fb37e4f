//! `outputs:` — named values rendered from resources' state once everything is VALID: printed
//! by `apply`, kept in the log, read back by `deployster outputs`.

use crate::support;
use crate::support::Workspace;
use serde_json::json;

fn with_outputs() -> String {
    let head = "vars: { token: s3cr3t-t0ken }\nsensitive: [token]";
    let outputs = r#"outputs:
  file_path: "{{ resources.file.state.path }}"
  size: "{{ resources.file.state.size }}"
  auth: "Bearer {{ token }}"
"#;
    support::dir_and_file(head, "f.txt", r"hello\n", outputs)
}

#[test]
fn outputs_are_printed_after_apply_and_read_back_masked() {
    let ws = Workspace::new();
    ws.manifest(&with_outputs());
    let missing = ws.run(&["outputs"]);
    assert_eq!(missing.code, 2, "{}", missing.all());
    assert!(missing.stderr.contains("no outputs recorded"), "{}", missing.all());

    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    let path = ws.path("out/f.txt").display().to_string();
    assert!(
        run.stdout.contains(&format!("Outputs:\n  file_path = \"{path}\"\n  size = 6\n  auth = \"Bearer ***\"")),
        "{}",
        run.all()
    );

    let json = ws.apply(&["--output", "json"]).json();
    assert_eq!(json["outputs"], json!({"file_path": path, "size": 6, "auth": "Bearer ***"}));

    let read = ws.run(&["outputs", "--output", "json"]);
    assert_eq!(read.code, 0, "{}", read.all());
    assert_eq!(read.json(), json!({"file_path": path, "size": 6, "auth": "Bearer ***"}));
    let text = ws.run(&["outputs"]);
    assert_eq!(text.stdout, format!("file_path = \"{path}\"\nsize = 6\nauth = \"Bearer ***\"\n"));
    // One, and raw for scripts (`cat "$(deployster outputs --raw file_path)"`).
    assert_eq!(ws.run(&["outputs", "file_path"]).stdout, format!("\"{path}\"\n"));
    assert_eq!(ws.run(&["outputs", "file_path", "--raw"]).stdout, format!("{path}\n"));
    assert_eq!(ws.run(&["outputs", "size", "--raw"]).stdout, "6\n");
    assert_eq!(ws.run(&["outputs", "auth", "--raw"]).stdout, "Bearer ***\n", "masked, raw too");
    let typo = ws.run(&["outputs", "file_pth", "--raw"]);
    assert_eq!(typo.code, 2, "{}", typo.all());
    assert!(
        typo.stderr.contains("no output `file_pth` (did you mean `file_path`?); the outputs: file_path, size, auth"),
        "{}",
        typo.all()
    );
    let raw_alone = ws.run(&["outputs", "--raw"]);
    assert_eq!(raw_alone.code, 2, "--raw names an output: {}", raw_alone.all());
    let log = ws.run(&["history", "--limit", "1000", "--output", "json"]);
    assert!(!log.stdout.contains("s3cr3t"), "{}", log.stdout);
}

#[test]
fn outputs_that_reference_unknown_resources_are_refused_before_anything_runs() {
    let ws = Workspace::new();
    ws.manifest(&with_outputs().replace("resources.file.state.size", "resources.nope.state.size"));
    let run = ws.apply(&[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains("outputs.size: `resources.nope.state.size` refers to unknown resource `nope`"),
        "{}",
        run.all()
    );
    assert!(!ws.exists("out"));
}

#[test]
fn outputs_that_fail_to_render_fail_the_run_and_say_why() {
    let ws = Workspace::new();
    ws.manifest(&with_outputs().replace("resources.file.state.size", "resources.file.state.nope"));
    let run = ws.apply(&[]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.stderr.contains("the outputs could not be rendered: outputs.size"), "{}", run.all());
    assert!(ws.exists("out/f.txt"), "the resources were applied; only the outputs failed");
    let read = ws.run(&["outputs"]);
    assert_eq!(read.code, 1, "{}", read.all());
    assert!(read.stderr.contains("could not render the outputs"), "{}", read.all());
}

/// A manifest that declares no outputs says so, rather than "apply first" (which would not
/// help), applied or not.
#[test]
fn a_manifest_without_outputs_says_it_declares_none() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  dir: { type: builtin/directory, config: { path: out } }\n");
    for _ in ["before", "after an apply"] {
        let read = ws.run(&["outputs"]);
        assert_eq!(read.code, 2, "{}", read.all());
        assert!(read.stderr.contains("manifest.yaml declares no outputs"), "{}", read.all());
        assert!(!read.stderr.contains("apply first"), "{}", read.all());
        assert_eq!(ws.apply(&[]).code, 0);
    }
}
