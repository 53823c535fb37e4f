//! The book's command reference (docs/cli-reference.md), written from the clap definitions the
//! commands are parsed with, so that it cannot fall behind them (tests/local/book.rs).

use std::fmt::Write;

use clap::CommandFactory;

/// Every command and sub-command that is not hidden: what it does, its usage, and each
/// argument with its help and default.
pub fn markdown() -> String {
    let mut cli = super::Cli::command();
    cli.build();
    let mut out = String::from(
        "# Every command and flag\n\n<!-- Written by `DEPLOYSTER_BLESS=1 cargo test --test local book::` from the \
         command definitions: do not edit. -->\n\n",
    );
    command(&mut out, &cli, "deployster");
    out
}

fn command(out: &mut String, cmd: &clap::Command, path: &str) {
    let level = if path == "deployster" { "##" } else { "###" };
    let _ = writeln!(out, "{level} `{path}`\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    let usage = cmd.clone().render_usage().to_string();
    let _ = writeln!(out, "```text\n{}\n```\n", usage.trim().trim_start_matches("Usage: "));
    let args: Vec<&clap::Arg> =
        cmd.get_arguments().filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version").collect();
    if !args.is_empty() {
        out.push_str("| argument | what |\n|---|---|\n");
        for arg in args {
            let _ = writeln!(out, "| {} | {} |", name(arg), help(arg));
        }
        out.push('\n');
    }
    if path == "deployster" {
        let _ = writeln!(out, "```text\n{}\n```\n", super::EXIT_CODES);
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        command(out, sub, &format!("{path} {}", sub.get_name()));
    }
}

fn name(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    let mut forms = Vec::new();
    if let Some(short) = arg.get_short() {
        forms.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        forms.push(format!("--{long}"));
    }
    match (forms.is_empty(), takes_value) {
        (true, _) => format!("`{value}`"),
        (false, true) => format!("`{} {value}`", forms.join(", ")),
        (false, false) => format!("`{}`", forms.join(", ")),
    }
}

fn help(arg: &clap::Arg) -> String {
    let mut text = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
    if !text.is_empty() && !text.ends_with(['.', ')', ']']) {
        text.push('.');
    }
    let choices: Vec<String> =
        arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| format!("`{}`", v.get_name())).collect();
    if !choices.is_empty() && arg.get_num_args().is_some_and(|n| n.takes_values()) {
        let _ = write!(text, " One of {}.", choices.join(", "));
    }
    let defaults: Vec<String> = arg.get_default_values().iter().map(|d| d.to_string_lossy().to_string()).collect();
    if !defaults.is_empty() && arg.get_num_args().is_some_and(|n| n.takes_values()) {
        let _ = write!(text, " Default: `{}`.", defaults.join(" "));
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(text, " Environment: `{}`.", env.to_string_lossy());
    }
    escaped(text.replace('\n', " ").replace('|', "\\|").trim())
}

/// `<` and `>` outside code spans as entities: Markdown would take `<FILE>` for a tag.
fn escaped(text: &str) -> String {
    let mut code = false;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}
