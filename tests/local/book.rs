//! The book (docs/, an mdBook) and the README: every page listed in SUMMARY.md and every page
//! listed, every relative link and `#anchor` resolving, the README one screen, and the pages a
//! newcomer reads free of the project's internal words.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::support::{Workspace, assert_said, on_terminal, page_commands};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

/// The anchor a heading gets (GitHub's and mdBook's rule): lower case, spaces to `-`, other
/// punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Outside fenced code: the text's headings' anchors, and its links' targets.
fn headings_and_links(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let (mut anchors, mut links, mut code) = (BTreeSet::new(), Vec::new(), false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            code = !code;
            continue;
        }
        if code {
            continue;
        }
        if let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#'))
            && heading.starts_with(' ')
        {
            anchors.insert(slug(heading));
        }
        links.extend(link.captures_iter(line).map(|c| c[1].to_string()));
    }
    (anchors, links)
}

#[test]
fn every_page_is_in_the_summary_and_every_link_resolves() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let (_, listed) = headings_and_links(&summary);
    let listed: BTreeSet<String> = listed.into_iter().collect();
    for page in pages() {
        let name = page.file_name().unwrap().to_str().unwrap().to_string();
        assert!(name == "SUMMARY.md" || listed.contains(&name), "docs/{name} is in no chapter of docs/SUMMARY.md");
    }
    let mut checked = 0;
    for file in pages().into_iter().chain([root().join("README.md")]) {
        let text = std::fs::read_to_string(&file).unwrap();
        let (own, links) = headings_and_links(&text);
        for target in links {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
            let at = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            assert!(at.exists(), "{}: the link `{target}` leads nowhere ({})", file.display(), at.display());
            // The book is built from docs/ alone: a link out of it is a 404 in the rendered pages.
            let docs = root().join("docs").canonicalize().unwrap();
            assert!(
                !file.canonicalize().unwrap().starts_with(&docs) || at.canonicalize().unwrap().starts_with(&docs),
                "{}: the link `{target}` leaves the book: name the repository's file as a path instead",
                file.display()
            );
            if let Some(anchor) = anchor {
                let anchors = if path.is_empty() {
                    own.clone()
                } else {
                    headings_and_links(&std::fs::read_to_string(&at).unwrap()).0
                };
                assert!(
                    anchors.contains(anchor),
                    "{}: `{target}`: no heading has the anchor #{anchor}",
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "{checked} links checked");
}

#[test]
fn the_readme_is_one_screen_that_opens_with_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.lines().count() <= 50, "the README is {} lines", readme.lines().count());
    let commands: Vec<&str> = readme.lines().skip_while(|l| *l != "```sh").skip(1).take(2).collect();
    assert!(commands[0].starts_with("cargo run --release -- apply -f examples/local/manifest.yaml"), "{commands:?}");
    assert!(commands[1].starts_with("cargo test "), "{commands:?}");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("cargo test --no-fail-fast"), ".ci/run runs the README's test command");
}

/// What a newcomer reads says nothing of the project's issues, design seeds, source files, test
/// harness or benchmarks: every page but those for developers (the architecture, development),
/// and every example.
#[test]
fn the_pages_for_users_use_no_internal_words() {
    let internal = regex::Regex::new(
        r"issue \d|seed-\d|tests/|\.ci/run|\.\./shared|src/[a-z_/]+\.rs|end-to-end test|cargo bench|the tests? (prove|hold)",
    )
    .unwrap();
    let mut read = 0;
    for page in pages() {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        if ["architecture.md", "development.md", "SUMMARY.md"].contains(&name.as_str()) {
            continue;
        }
        read += 1;
        let text = std::fs::read_to_string(&page).unwrap();
        let found: Vec<&str> = internal.find_iter(&text).map(|m| m.as_str()).collect();
        assert!(found.is_empty(), "{} says {found:?}", page.display());
    }
    assert!(read > 18, "the walk reads the pages ({read})");
    let mut examples = Vec::new();
    let mut dirs = vec![root().join("examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| ["yaml", "sh", "md", "json"].contains(&x.to_str().unwrap())) {
                examples.push(path);
            }
        }
    }
    assert!(examples.len() > 10, "the walk reads the examples ({})", examples.len());
    for example in examples {
        let text = std::fs::read_to_string(&example).unwrap();
        let found: Vec<&str> = internal.find_iter(&text).map(|m| m.as_str()).collect();
        assert!(found.is_empty(), "{} says {found:?}", example.display());
    }
}

/// A page written from the code (`DEPLOYSTER_BLESS=1` rewrites it): current.
fn generated(page: &str, text: &str) {
    let path = root().join("docs").join(page);
    if std::env::var_os("DEPLOYSTER_BLESS").is_some() {
        std::fs::write(&path, text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == text, "{} is not current: DEPLOYSTER_BLESS=1 cargo test --test local book::", path.display());
}

/// The built-in types' reference is written from their config schemas.
#[test]
fn the_builtin_types_reference_is_current() {
    let text = deployster::builtins::reference::markdown();
    generated("builtin-types.md", &text);
    for expected in ["## `builtin/file`", "| `content` | string | yes |", "| `wait.timeout` |"] {
        assert!(text.contains(expected), "{expected}");
    }
}

/// The command reference is written from the command definitions.
#[test]
fn the_command_reference_is_current() {
    let text = deployster::cli::reference::markdown();
    generated("cli-reference.md", &text);
    for expected in ["### `deployster apply`", "### `deployster pipeline run`", "`--detailed-exitcode`", "Exit codes"] {
        assert!(text.contains(expected), "{expected}");
    }
}

/// The custom resources' reference is written from the CRDs: every field of spec and status,
/// with its type and description.
#[test]
fn the_custom_resources_reference_is_current() {
    let text = deployster::crd::reference::markdown();
    generated("crd-reference.md", &text);
    assert!(
        text.contains("## ManifestPreview (`deployster.io/v1alpha1`)") && text.contains("| `spec.manifest` |"),
        "{text}"
    );
}

/// The getting-started page, run as a newcomer would: each command of its shell blocks in order,
/// on a copy of the example whose paths are this test's own; an `apply` that asks is answered
/// yes on a terminal; each result quoted in a command's comment is found in what it said.
#[test]
fn the_getting_started_commands_run_as_written() {
    let ws = Workspace::new();
    let demo = format!("{}/demo-", ws.root());
    let releases = format!("{}/pipeline", ws.root());
    for (file, from, to) in [
        ("examples/local/manifest.yaml", "/tmp/deployster-demo-", &demo),
        ("examples/pipeline/pipeline.yaml", "/tmp/deployster-pipeline", &releases),
        ("examples/pipeline/app.yaml", "/tmp/deployster-pipeline", &releases),
        ("examples/pipeline/smoke.yaml", "/tmp/deployster-pipeline", &releases),
    ] {
        ws.write(file, &std::fs::read_to_string(root().join(file)).unwrap().replace(from, to));
    }
    // The page puts the example back with git, as a reader in their checkout would.
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(ws.root())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "examples"]);
    git(&["commit", "-qm", "the examples"]);
    let page = std::fs::read_to_string(root().join("docs/getting-started.md")).unwrap();
    let ran = run_commands(&ws, &page, ("/tmp/deployster-demo-", &demo));
    assert!(ran >= 16, "{ran} commands ran");
    assert_eq!(ws.read("pipeline/prod-b2/release.txt"), "1.4.2 in region b\n", "the pipeline's revision went through");
}

/// Runs each command of `text`'s shell blocks in order, as a reader would, in `ws` with
/// `paths.0` made `paths.1`: an `apply` that asks is answered yes on a terminal; each result
/// quoted in a command's comment (`…` between pieces) must be in what it said. How many ran.
fn run_commands(ws: &Workspace, text: &str, paths: (&str, &str)) -> usize {
    let commands = page_commands(text);
    for (command, comment) in commands.iter().filter(|(c, _)| !c.starts_with("cargo build")) {
        let (command, comment) = (command.replace(paths.0, paths.1), comment.replace(paths.0, paths.1));
        let said = match command.strip_prefix("deployster ") {
            Some(args) => {
                let args: Vec<&str> = args.split_whitespace().collect();
                if args[0] == "apply" && !args.contains(&"--yes") {
                    let (code, out) = on_terminal(ws, &args, |_| "y");
                    assert_eq!(code, 0, "{command}: {out}");
                    out
                } else {
                    let run = ws.run(&args);
                    assert_eq!(run.code, 0, "{command}: {}", run.all());
                    run.all()
                }
            }
            None => {
                let out =
                    std::process::Command::new("bash").args(["-c", &command]).current_dir(ws.root()).output().unwrap();
                assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8_lossy(&out.stdout).to_string()
            }
        };
        assert_said(&command, &comment, &said);
    }
    commands.iter().filter(|(c, _)| !c.starts_with("cargo build")).count()
}

/// The types chapter's first type is the example's, checked, applied, drifted and destroyed as
/// the page says; its manifest is the example's too.
#[test]
fn the_first_type_runs_as_written() {
    let page = std::fs::read_to_string(root().join("docs/types.md")).unwrap();
    let section = &page[page.find("## Your first type").unwrap()..];
    let section = &section[..section[3..].find("\n## ").unwrap()];
    let block = |fence: &str| {
        let from = section.find(fence).unwrap_or_else(|| panic!("no {fence} block")) + fence.len();
        section[from..from + section[from..].find("```").unwrap()].to_string()
    };
    let program = std::fs::read_to_string(root().join("examples/first-type/line")).unwrap();
    assert_eq!(block("```python\n"), program, "the page shows examples/first-type/line as it is");
    let manifest = std::fs::read_to_string(root().join("examples/first-type/manifest.yaml")).unwrap();
    assert_eq!(block("```yaml\n"), manifest, "the page shows examples/first-type/manifest.yaml as it is");

    let ws = Workspace::new();
    let here = format!("{}/first-type", ws.root());
    for file in ["line", "manifest.yaml", "case.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/first-type").join(file)).unwrap();
        ws.write(&format!("examples/first-type/{file}"), &text.replace("/tmp/deployster-first-type", &here));
    }
    let line = ws.path("examples/first-type/line");
    std::fs::set_permissions(&line, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(run_commands(&ws, section, ("/tmp/deployster-first-type", &here)), 8);
    // Once more: a delete is timed as it ran (a program's start is never under a millisecond).
    assert_eq!(ws.run(&["apply", "-f", "examples/first-type/manifest.yaml", "--yes"]).code, 0);
    let destroy = ws.run(&["destroy", "-f", "examples/first-type/manifest.yaml", "--yes"]);
    let deleted = destroy.stdout.lines().find(|l| l.contains("DELETED")).unwrap_or_else(|| panic!("{}", destroy.all()));
    assert!(deleted.ends_with("ms)") && !deleted.contains("<1ms"), "{deleted}");
}

/// The manifests a newcomer is shown first — the README's, getting started's, and the first of
/// Manifests — apply as written (their `/tmp` paths made this test's own), and again to nothing.
#[test]
fn the_manifests_shown_first_apply_as_written() {
    let mut shown = Vec::new();
    for (file, all) in [("README.md", true), ("docs/getting-started.md", true), ("docs/manifests.md", false)] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        let blocks: Vec<String> =
            text.split("```yaml\n").skip(1).map(|b| b[..b.find("```").unwrap()].to_string()).collect();
        assert!(!blocks.is_empty(), "{file} shows a manifest");
        shown.extend(blocks.into_iter().take(if all { usize::MAX } else { 1 }).map(|b| (file, b)));
    }
    for (file, yaml) in shown {
        let ws = Workspace::new();
        ws.manifest(&yaml.replace("/tmp/", &format!("{}/", ws.root())));
        let run = ws.apply(&[]);
        assert_eq!(run.code, 0, "{file}:\n{yaml}\n{}", run.all());
        let again = ws.apply(&[]);
        assert!(again.stdout.contains("Nothing to do"), "{file}: {}", again.all());
    }
}

/// Every key a manifest may have — the Manifest object's spec as the CRD gives it, its
/// resources' and its plugs' — is in the Manifests chapter (a key of the object alone may be
/// in the controller's), under its name or, for the file's plugs, its snake_case one.
#[test]
fn every_key_of_a_manifest_is_in_the_book() {
    let yaml = std::fs::read_to_string(root().join("crds/manifest.yaml")).unwrap();
    let crd: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let manifests = std::fs::read_to_string(root().join("docs/manifests.md")).unwrap();
    let controller = std::fs::read_to_string(root().join("docs/controller.md")).unwrap();
    let named = |text: &str, key: &str| text.contains(&format!("`{key}`")) || text.contains(&format!("{key}:"));
    let snake = |key: &str| {
        key.chars()
            .flat_map(|c| if c.is_uppercase() { vec!['_', c.to_ascii_lowercase()] } else { vec![c] })
            .collect::<String>()
    };
    let mut checked = 0;
    for key in spec.as_object().unwrap().keys() {
        assert!(named(&manifests, key), "docs/manifests.md does not name the Manifest's `{key}`");
        assert!(named(&manifests, key) || named(&controller, key), "`{key}` is in no chapter");
        checked += 1;
    }
    for part in ["resources", "plugs"] {
        for key in spec[part]["additionalProperties"]["properties"].as_object().unwrap().keys() {
            assert!(
                named(&manifests, key) || named(&manifests, &snake(key)),
                "docs/manifests.md does not name {part}' `{key}`"
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} keys");
}

/// The commands at a glance (`docs/cli.md`) name every command, and every `pipeline`
/// subcommand, the binary has; the reference describes every flag and argument.
#[test]
fn every_command_is_at_a_glance_and_every_flag_described() {
    use clap::CommandFactory;
    let glance = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    let table: Vec<&str> = glance.lines().filter(|l| l.starts_with("| `deployster ")).collect();
    let mut missing = Vec::new();
    let cli = deployster::cli::Cli::command();
    let mut named = 0;
    for command in cli.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = command.get_name();
        let subcommands: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
        let words: Vec<String> = if subcommands.is_empty() {
            vec![format!("deployster {name}")]
        } else {
            subcommands.iter().map(|sub| format!("{name} {sub}")).collect()
        };
        for word in words {
            named += 1;
            if !table.iter().any(|row| row.contains(&word)) {
                missing.push(word);
            }
        }
    }
    assert!(named > 15, "the walk sees the commands ({named})");
    assert!(missing.is_empty(), "docs/cli.md's table lacks {missing:?}");
    let reference = std::fs::read_to_string(root().join("docs/cli-reference.md")).unwrap();
    let bare: Vec<&str> =
        reference.lines().filter(|l| l.starts_with("| `") && l.trim_end().ends_with("|  |")).collect();
    assert!(bare.is_empty(), "flags and arguments without a description: {bare:#?}");
}
