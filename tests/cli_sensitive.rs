//! Sensitive values and bounded templates, tried from outside: a secret is never shown, never
//! kept, never altered; a template cannot keep `plan` busy.

mod support;

use std::os::unix::fs::PermissionsExt;

use support::Workspace;

/// A resource type that fails its state action after echoing its whole request (with the
/// rendered config) on stderr and stdout — as careless types do.
fn echoing_type(ws: &Workspace) {
    let script = ws.write(
        "echoing",
        "#!/bin/sh\nif [ $# -eq 0 ]; then echo '{\"state_action\": {\"args\": [\"state\"]}}'; exit 0; fi\nrequest=$(cat)\necho \"got $request\" >&2\necho \"got $request\"\nexit 3\n",
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_program_that_echoes_a_secret_has_it_masked_in_output_errors_and_the_log() {
    let ws = Workspace::new();
    echoing_type(&ws);
    ws.manifest("vars: { token: s3cr3t-t0ken }\nsensitive: [token]\nresources:\n  e: { type: ./echoing, config: { auth: \"Bearer {{ token }}\" } }\n");
    for run in [ws.plan(&["-v"]), ws.apply(&["--output", "json"])] {
        assert_eq!(run.code, 1, "{}", run.all());
        assert!(run.all().contains("Bearer ***"), "the failure still says what it saw, masked:\n{}", run.all());
        assert!(!run.all().contains("s3cr3t"), "{}", run.all());
    }
    let log = ws.run(&["history", "--limit", "1000", "--output", "json"]);
    assert!(log.stdout.contains("Bearer ***") && !log.stdout.contains("s3cr3t"), "{}", log.stdout);
}

#[test]
fn a_sensitive_var_on_the_command_line_is_masked_too() {
    let ws = Workspace::new();
    echoing_type(&ws);
    ws.manifest("resources:\n  e: { type: ./echoing, config: { auth: \"{{ vars.api.key }}\" } }\n");
    let run = ws.apply(&["--sensitive-var", "api.key=k3y-v4lue"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(run.all().contains("\\\"auth\\\":\\\"***\\\"") || run.all().contains("\"auth\":\"***\""), "{}", run.all());
    assert!(!run.all().contains("k3y-v4lue"), "{}", run.all());
    let bad = ws.apply(&["--sensitive-var", "novalue"]);
    assert_eq!(bad.code, 2, "{}", bad.all());
    assert!(bad.stderr.contains("--sensitive-var") && !bad.stderr.contains("novalue"), "{}", bad.all());
}

#[test]
fn var_file_values_are_never_shown_and_sensitive_ones_never_altered() {
    let ws = Workspace::new();
    ws.manifest("sensitive: [password]\nresources:\n  f: { type: builtin/file, config: { path: out.txt, content: \"{{ password }}\" } }\n");
    ws.write("bad.yaml", "password: 'ok'\nother: 'Xy7{#SECRET'\n");
    let run = ws.plan(&["--var-file", "bad.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("bad.yaml") && run.stderr.contains("other: not a valid template"), "{}", run.all());
    assert!(!run.all().contains("Xy7") && !run.all().contains("SECRET"), "{}", run.all());

    ws.write("good.yaml", "password: 'Xy7{#x#}tail'\n");
    let run = ws.apply(&["--var-file", "good.yaml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(ws.read("out.txt"), "Xy7{#x#}tail", "a sensitive value is used exactly as given");
    assert!(!run.all().contains("Xy7"), "{}", run.all());
}

#[test]
fn a_template_that_would_run_for_minutes_is_stopped_with_a_clear_error() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  f:\n    type: builtin/file\n    config:\n      path: out.txt\n      content: \"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}\"\n",
    );
    let run = ws.plan(&[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("resource `f`") && run.stderr.contains("resources.f.config.content"), "{}", run.all());
    assert!(run.stderr.contains("steps and was stopped"), "{}", run.all());
    assert!(!ws.exists("out.txt"));
}
