//! Colour and `+ ~ -` markers for people at a terminal; nothing of either in a pipe, a file or
//! `--output json`, so what scripts read never changes. `--color always|never` decides outright;
//! `auto` (the default) shows them when stdout is a terminal, the colour only without
//! `NO_COLOR` (<https://no-color.org>).

use std::io::IsTerminal;
use std::sync::OnceLock;

use anstyle::{AnsiColor, Style};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorWhen {
    #[default]
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Shown {
    markers: bool,
    colour: bool,
}

static SHOWN: OnceLock<Shown> = OnceLock::new();

/// Decides once, for the whole command: `json` when its output is JSON.
pub(super) fn init(when: ColorWhen, json: bool) {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _ = SHOWN.set(decide(when, json, std::io::stdout().is_terminal(), no_color));
}

fn decide(when: ColorWhen, json: bool, terminal: bool, no_color: bool) -> Shown {
    match when {
        _ if json => Shown::default(),
        ColorWhen::Never => Shown::default(),
        ColorWhen::Always => Shown { markers: true, colour: true },
        ColorWhen::Auto => Shown { markers: terminal, colour: terminal && !no_color },
    }
}

fn shown() -> Shown {
    SHOWN.get().copied().unwrap_or_default()
}

/// What a status means for the resource, as Terraform marks it: created, changed, deleted.
fn marker_and_style(label: &str) -> (char, Style) {
    let colour = |c: AnsiColor| Style::new().fg_color(Some(c.into()));
    match label {
        "MISSING" => ('+', colour(AnsiColor::Green)),
        "STALE" => ('~', colour(AnsiColor::Yellow)),
        "DELETE" => ('-', colour(AnsiColor::Red)),
        "APPLIED" | "DELETED" => (' ', colour(AnsiColor::Green)),
        "FAILED" => ('!', colour(AnsiColor::Red).bold()),
        "BLOCKED" | "DECLINED" | "CANCELLED" => (' ', colour(AnsiColor::Red)),
        "PENDING" => (' ', colour(AnsiColor::Cyan)),
        _ => (' ', Style::new()),
    }
}

/// The start of a resource's line: its status padded to `width`, after its marker and in its
/// colour where they are shown; `  STATUS   ` otherwise, as scripts have always read it.
pub(super) fn status(label: &str, width: usize) -> String {
    styled_status(label, width, shown())
}

fn styled_status(label: &str, width: usize, shown: Shown) -> String {
    let padded = format!("{label:<width$}");
    if !shown.markers {
        return format!("  {padded}");
    }
    let (marker, style) = marker_and_style(label);
    match shown.colour {
        true => format!("{style}{marker} {padded}{style:#}"),
        false => format!("{marker} {padded}"),
    }
}

/// `text` in bold where colour is shown (headings, verdicts).
pub(super) fn bold(text: &str) -> String {
    match shown().colour {
        true => format!("{0}{text}{0:#}", Style::new().bold()),
        false => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_colour_only_for_a_terminal_never_for_json() {
        let off = Shown::default();
        assert_eq!(decide(ColorWhen::Auto, false, false, false), off, "a pipe");
        assert_eq!(decide(ColorWhen::Auto, true, true, false), off, "--output json");
        assert_eq!(decide(ColorWhen::Never, false, true, false), off);
        assert_eq!(decide(ColorWhen::Auto, false, true, true), Shown { markers: true, colour: false }, "NO_COLOR");
        assert_eq!(decide(ColorWhen::Auto, false, true, false), Shown { markers: true, colour: true });
        assert_eq!(decide(ColorWhen::Always, false, false, true), Shown { markers: true, colour: true });
    }

    #[test]
    fn a_status_keeps_its_column_with_or_without_markers() {
        let plain = styled_status("STALE", 9, Shown::default());
        assert_eq!(plain, "  STALE    ");
        assert_eq!(styled_status("MISSING", 9, Shown { markers: true, colour: false }), "+ MISSING  ");
        assert_eq!(styled_status("DELETE", 9, Shown { markers: true, colour: false }), "- DELETE   ");
        assert_eq!(styled_status("VALID", 9, Shown { markers: true, colour: false }), "  VALID    ");
        let coloured = styled_status("STALE", 9, Shown { markers: true, colour: true });
        assert_eq!(coloured, "\u{1b}[33m~ STALE    \u{1b}[0m");
    }
}
