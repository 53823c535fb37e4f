//! `deployster history`: what the deployment log says about a manifest or one resource.

use serde_json::{Value, json};

use super::apply::state_dir;
use super::render::print_json;
use super::{CliError, Exit, HistoryArgs, OutputFormat};
use crate::history::store::{DATABASE, SqliteLog};
use crate::history::{Entry, History, format_time, in_progress, latest_applied, latest_failed, target};

pub(super) fn history(args: HistoryArgs) -> Result<Exit, CliError> {
    let dir = state_dir(&args.files, args.state_dir.as_deref());
    let subject = args.resource.as_deref().map_or("the manifest".to_string(), |r| format!("resource `{r}`"));
    if !dir.join(DATABASE).exists() {
        match args.output {
            OutputFormat::Text => {
                outln!("No deployment log in {} yet: nothing was planned or applied there.", dir.display())
            }
            OutputFormat::Json => print_json(
                &json!({"state_dir": dir, "latest_applied": null, "latest_failed": null, "in_progress": [], "events": []}),
            ),
        }
        return Ok(Exit::Ok);
    }
    let log = SqliteLog::open_for_reading(&dir)?;
    let resource = args.resource.as_deref();
    let applied = latest_applied(&log, resource)?;
    let failed = latest_failed(&log, resource)?;
    let running = in_progress(&log, resource)?;
    let events = log.recent(&resource.map(target::resource).unwrap_or_default(), args.limit)?;
    match args.output {
        OutputFormat::Json => print_json(&json!({
            "state_dir": dir,
            "subject": resource.map_or_else(|| target::MANIFEST.to_string(), target::resource),
            "latest_applied": applied.as_ref().map(entry_json),
            "latest_failed": failed.as_ref().map(entry_json),
            "in_progress": running.iter().map(entry_json).collect::<Vec<_>>(),
            "events": events.iter().map(entry_json).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            outln!("Deployment log {} — {subject}:", dir.display());
            outln!("  latest applied revision   {}", revision_line(applied.as_ref()));
            outln!("  latest failed revision    {}", revision_line(failed.as_ref()));
            if running.is_empty() {
                outln!("  in progress               none");
            }
            for entry in &running {
                let what = if entry.target == target::MANIFEST { String::new() } else { format!(" {}", entry.target) };
                outln!("  in progress               {}{what}", revision_line(Some(entry)));
            }
            outln!("Recent events (newest first):");
            for entry in &events {
                outln!("{}", event_line(entry));
            }
        }
    }
    Ok(Exit::Ok)
}

fn revision_line(entry: Option<&Entry>) -> String {
    match entry {
        None => "none".into(),
        Some(e) => format!("{} (run {}, {})", e.revision, e.id, format_time(e.at)),
    }
}

fn event_line(entry: &Entry) -> String {
    let message =
        entry.detail.get("message").and_then(Value::as_str).and_then(|m| m.lines().next()).unwrap_or_default();
    format!(
        "  {}  {}  {}  {:<40} {:<29} {message}",
        format_time(entry.at),
        entry.id,
        entry.revision,
        entry.target,
        entry.event.as_str()
    )
    .trim_end()
    .to_string()
}

fn entry_json(entry: &Entry) -> Value {
    json!({
        "id": entry.id,
        "target": entry.target,
        "revision": entry.revision,
        "event": entry.event,
        "at": format_time(entry.at),
        "detail": entry.detail,
    })
}
