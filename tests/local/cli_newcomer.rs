//! The mistakes a newcomer made following the README, each answered with what was meant: a
//! misspelt type, dependency, config key or flag gets "did you mean", nothing runs, and nothing
//! asks a registry; and the small things that read wrong read right.

use crate::support::Workspace;

/// `bulitin/file` is a valid image name: it was looked for on Docker Hub. Now the typo is named
/// before any registry is asked (no Docker daemon is even reached: none is needed here).
#[test]
fn a_misspelt_builtin_type_is_named_before_any_registry_is_asked() {
    let ws = Workspace::new();
    for (typo, meant) in [("bulitin/file", "builtin/file"), ("builtin/fiel", "builtin/file")] {
        ws.manifest(&format!("resources:\n  f: {{type: {typo}, config: {{path: \"$WS/f\", content: x}}}}\n"));
        let run = ws.run_with_env(&["apply", "-f", "manifest.yaml", "--yes"], &[("DOCKER_HOST", "tcp://127.0.0.1:1")]);
        assert_eq!(run.code, 2, "{}", run.all());
        assert!(run.stderr.contains("resource `f`: unknown"), "{}", run.all());
        assert!(run.stderr.contains(&format!("`{typo}` (did you mean `{meant}`?)")), "{}", run.all());
        assert!(!run.all().contains("Docker daemon"), "no Docker daemon was reached for: {}", run.all());
        assert!(!ws.exists("f"));
    }
}

/// A dependency naming no resource: the closest named, and what reads the alias is not reported
/// again as an undefined variable.
#[test]
fn a_misspelt_dependency_is_named_once_with_the_closest_resource() {
    let ws = Workspace::new();
    ws.manifest(
        "resources:\n  data_dir: {type: builtin/directory, config: {path: \"$WS/d\"}}\n  app_config:\n    \
         type: builtin/file\n    dependencies: {dir: data_dri}\n    config: {path: \"{{ dir.state.path }}/app.json\", content: x}\n",
    );
    let run = ws.plan(&[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains(
            "resource `app_config`: dependency `dir` names unknown resource `data_dri` (did you mean `data_dir`?)"
        ),
        "{}",
        run.all()
    );
    assert!(!run.stderr.contains("undefined variable `dir`"), "no derived second error: {}", run.all());
    // A reference by name gets the same.
    ws.manifest(
        "resources:\n  data_dir: {type: builtin/directory, config: {path: \"$WS/d\"}}\n  app_config:\n    \
         type: builtin/file\n    config: {path: \"{{ resources.data_dri.state.path }}/a\", content: x}\n",
    );
    let run = ws.plan(&[]);
    assert!(run.stderr.contains("refers to unknown resource `data_dri` (did you mean `data_dir`?)"), "{}", run.all());
}

/// A config key the type's schema does not have: the closest it does.
#[test]
fn a_misspelt_config_key_gets_the_closest_key_of_the_schema() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  f: {type: builtin/file, config: {path: \"$WS/f\", contents: hello}}\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("'contents' was unexpected) (`contents`: did you mean `content`?)"), "{}", run.all());
    assert!(!ws.exists("f"));
}

/// Flags other tools taught point to ours; `graph --output json` says what to use; a plan of
/// one resource says so in words.
#[test]
fn familiar_flags_and_small_words_read_right() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  d: {type: builtin/directory, config: {path: \"$WS/d\"}}\n");
    let run = ws.run(&["apply", "-f", "manifest.yaml", "--auto-approve"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("unexpected argument '--auto-approve': deployster's is `--yes`"), "{}", run.all());
    let run = ws.run(&["graph", "-f", "manifest.yaml", "--output", "json"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("deployster plan --output json"), "{}", run.all());
    assert!(run.stdout.is_empty(), "no Mermaid in its place: {}", run.all());

    assert_eq!(ws.apply(&[]).code, 0);
    let again = ws.apply(&[]);
    assert!(again.stdout.contains("Nothing to do: its one resource is VALID."), "{}", again.all());
    // A state read under a millisecond is not "(0s)".
    let plan = ws.plan(&[]);
    assert!(!plan.stdout.contains("(0s)"), "{}", plan.all());
}

/// One exit-code rule, said in `--help`; completions and a man page come from the same
/// definitions as the commands.
#[test]
fn the_exit_codes_completions_and_man_page_come_from_the_command_definitions() {
    let ws = Workspace::new();
    let help = ws.run(&["--help"]);
    assert!(
        help.stdout.contains("Exit codes, for every command:") && help.stdout.contains("  2  refused before"),
        "{}",
        help.all()
    );
    for (shell, expected) in
        [("bash", "_deployster()"), ("zsh", "#compdef deployster"), ("fish", "complete -c deployster")]
    {
        let run = ws.run(&["completions", shell]);
        assert_eq!(run.code, 0, "{}", run.all());
        assert!(run.stdout.contains(expected) && run.stdout.contains("reconcile"), "{shell}: {}", run.stdout);
    }
    let man = ws.run(&["man"]);
    assert_eq!(man.code, 0, "{}", man.all());
    assert!(man.stdout.contains(".TH deployster") && man.stdout.contains("Exit codes"), "{}", man.stdout);
    let pages = ws.run(&["man", "--out-dir", "man"]);
    assert_eq!(pages.code, 0, "{}", pages.all());
    assert!(ws.exists("man/deployster-apply.1") && ws.exists("man/deployster-pipeline-run.1"));
}

/// Markers and colour on a terminal (`--color always` stands in for one), never in a pipe,
/// under `--color never`, or in JSON; `NO_COLOR` keeps the markers and drops the colour.
#[test]
fn markers_and_colour_are_for_terminals_only() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  d: {type: builtin/directory, config: {path: \"$WS/d\"}}\n");
    let piped = ws.plan(&[]);
    assert!(piped.stdout.contains("\n  MISSING   d"), "{}", piped.all());
    assert!(!piped.stdout.contains('\u{1b}'), "{}", piped.all());
    let always = ws.plan(&["--color", "always"]);
    assert!(always.stdout.contains("\u{1b}[32m+ MISSING  \u{1b}[0m d"), "{:?}", always.stdout);
    let never = ws.plan(&["--color", "never"]);
    assert!(never.stdout.contains("\n  MISSING   d") && !never.stdout.contains('\u{1b}'), "{}", never.all());
    let no_color = ws.run_with_env(&["plan", "-f", "manifest.yaml", "--color", "always"], &[("NO_COLOR", "1")]);
    assert!(no_color.stdout.contains("\u{1b}[32m+ MISSING"), "--color always wins over NO_COLOR: {}", no_color.all());
    let json = ws.plan(&["--color", "always", "--output", "json"]);
    assert!(!json.all().contains('\u{1b}'), "{}", json.all());
    json.json();
}

/// What a user of Terraform, or of `kubectl apply FILE`, types first gets what was meant:
/// a manifest given where a plan file goes, and single-dash long flags.
#[test]
fn a_manifest_without_f_and_terraform_s_flags_are_answered_with_ours() {
    let ws = Workspace::new();
    ws.manifest("resources:\n  f: {type: builtin/file, config: {path: \"$WS/f\", content: x}}\n");
    let run = ws.run(&["apply", "manifest.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains("to apply a manifest, name it with -f: deployster apply -f manifest.yaml"),
        "{}",
        run.all()
    );
    for (theirs, ours) in [("-auto-approve", "`--yes`"), ("-var=x=1", "`--var`"), ("-out=p.json", "`--out`")] {
        let command = if theirs.starts_with("-out") { "plan" } else { "apply" };
        let run = ws.run(&[command, theirs, "-f", "manifest.yaml"]);
        assert_eq!(run.code, 2, "{theirs}: {}", run.all());
        assert!(run.stderr.contains(&format!("unexpected argument '{theirs}'")), "{}", run.all());
        assert!(run.stderr.contains(&format!("two dashes: {ours}")), "{theirs}: {}", run.all());
    }
    assert!(!ws.exists("f"), "nothing ran");
}

/// `history -f` of a manifest that is not there, with no log beside it: a mistyped path, said
/// so, and no state directory made; `destroy` of a copy elsewhere says which log it read.
#[test]
fn history_of_a_missing_file_and_destroy_of_a_copy_say_where_they_looked() {
    let ws = Workspace::new();
    let run = ws.run(&["history", "-f", "nothere.yaml"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("manifest nothere.yaml: no such file, and no deployment log in"), "{}", run.all());
    assert!(!ws.exists(".deployster"), "no empty log directory made");

    ws.write("applied/m.yaml", "resources:\n  f: {type: builtin/file, config: {path: f.txt, content: x}}\n");
    assert_eq!(ws.run(&["apply", "-f", "applied/m.yaml", "--yes"]).code, 0);
    ws.write("copy/m.yaml", &std::fs::read_to_string(ws.path("applied/m.yaml")).unwrap());
    let run = ws.run(&["destroy", "-f", "copy/m.yaml", "--yes"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("Nothing to destroy"), "{}", run.all());
    assert!(
        run.stderr.contains("the inventory read is the deployment log in") && run.stderr.contains("copy/.deployster"),
        "{}",
        run.all()
    );
    assert!(ws.exists("applied/f.txt"), "what the other copy applied stays");
}
