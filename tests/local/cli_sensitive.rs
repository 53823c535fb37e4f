//! Sensitive values and bounded templates, tried from outside: a secret is never shown, never
//! kept, never altered; a template cannot keep `plan` busy.

use std::os::unix::fs::PermissionsExt;

use crate::support::Workspace;

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
        // The template placed the secret as it is: the rest of the value still shows.
        assert!(run.all().contains("Bearer ***"), "the failure still says what it saw, masked:\n{}", run.all());
        assert!(!run.all().contains("s3cr3t"), "{}", run.all());
    }
    let log = ws.run(&["history", "--limit", "1000", "--output", "json"]);
    assert!(log.stdout.contains("Bearer ***") && !log.stdout.contains("s3cr3t"), "{}", log.stdout);
}

#[test]
fn a_secret_is_masked_across_lines_as_json_escapes_it_and_whatever_a_filter_made_of_it() {
    let ws = Workspace::new();
    // This type also prints its request with the JSON escapes undone, so a multi-line secret
    // reaches the output over several lines.
    let script = ws.write(
        "echoing",
        r#"#!/bin/sh
if [ $# -eq 0 ]; then echo '{"state_action": {"args": ["state"]}}'; exit 0; fi
request=$(cat)
printf 'got %s\n' "$request" >&2
decoded=$(printf '%s' "$request" | sed 's/\\"/"/g')
printf '%b\n' "$decoded" >&2
printf 'got %s\n' "$request"
exit 3
"#,
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    ws.write(
        "secrets.yaml",
        "pem: \"-----BEGIN KEY-----\\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX\\n6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\\n-----END KEY-----\\n\"\nodd: \"q\\\"uo\\teSECRET\u{e9}\"\ntoken: t0k3n-abc\n",
    );
    ws.manifest(
        "sensitive: [pem, odd, token]\nresources:\n  e: { type: ./echoing, config: { key: \"{{ pem }}\", odd: \"{{ odd }}\", shout: \"{{ token | upper }}\" } }\n",
    );
    let leaks = ["MIIBOg", "6Ppy1t", "eSECRET", "T0K3N-ABC", "t0k3n"];
    for run in
        [ws.plan(&["-v", "--var-file", "secrets.yaml"]), ws.apply(&["--output", "json", "--var-file", "secrets.yaml"])]
    {
        assert_eq!(run.code, 1, "{}", run.all());
        assert!(run.all().contains("got {"), "the type's output is shown: {}", run.all());
        for leak in leaks {
            assert!(!run.all().contains(leak), "{leak} leaked:\n{}", run.all());
        }
    }
    let log = ws.run(&["history", "--limit", "1000", "--output", "json"]);
    assert!(log.stdout.contains("***"), "{}", log.stdout);
    for leak in leaks {
        assert!(!log.stdout.contains(leak), "{leak} leaked into the log:\n{}", log.stdout);
    }
    // The log's files as they are on disk (the database and its write-ahead log).
    let files = std::fs::read_dir(ws.path(".deployster")).unwrap();
    let raw: Vec<u8> = files.flat_map(|f| std::fs::read(f.unwrap().path()).unwrap_or_default()).collect();
    assert!(!raw.is_empty());
    for leak in leaks {
        assert!(!String::from_utf8_lossy(&raw).contains(leak), "{leak} leaked into the log's files");
    }
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
