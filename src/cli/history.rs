//! `deployster history`: what the deployment log says about a manifest or one resource.

use serde_json::{Value, json};

use super::render::print_json;
use super::{CliError, ExitKind, HistoryArgs, OutputFormat, OutputsArgs};
use crate::engine::plan::Inputs;
use crate::history::store::{DATABASE, SqliteLog};
use crate::history::{
    Entry, Event, History, HistoryError, Revision, format_time, in_progress, latest_applied, latest_failed, outcome,
    target,
};

pub(super) fn history(args: HistoryArgs) -> Result<ExitKind, CliError> {
    let dir = args.log.dir();
    let subject = args.resource.as_deref().map_or("the manifest".to_string(), |r| format!("resource `{r}`"));
    if !dir.join(DATABASE).exists() {
        // A manifest not there, and no log beside where it would be: a mistyped path, most
        // likely — not a manifest never applied.
        if let Some(missing) = args.log.files.iter().find(|f| !f.exists()) {
            return Err(CliError::Refused(format!(
                "manifest {}: no such file, and no deployment log in {}: give the manifest's path with -f",
                missing.display(),
                dir.display()
            )));
        }
        if let Some(number) = args.revision.or_else(|| args.diff.as_ref().and_then(|d| d.first().copied())) {
            let none = format!("there is no revision {number}: no deployment log in {} yet", dir.display());
            return Err(CliError::Refused(none));
        }
        if let Some(id) = &args.run {
            return Err(CliError::Refused(format!("there is no run {id}: no deployment log in {} yet", dir.display())));
        }
        if args.revisions && args.output == OutputFormat::Json {
            print_json(&json!([]));
            return Ok(ExitKind::Ok);
        }
        match args.output {
            OutputFormat::Text => {
                outln!("No deployment log in {} yet: nothing was planned or applied there.", dir.display())
            }
            OutputFormat::Json => print_json(
                &json!({"state_dir": dir, "latest_applied": null, "latest_failed": null, "in_progress": [], "events": []}),
            ),
        }
        return Ok(ExitKind::Ok);
    }
    let log = SqliteLog::open_for_reading(&dir)?;
    if args.revisions {
        revisions(&log, args.output)?;
        return Ok(ExitKind::Ok);
    }
    if let Some(number) = args.revision {
        revision(&log, number, args.output)?;
        return Ok(ExitKind::Ok);
    }
    if let Some([from, to]) = args.diff.as_deref() {
        diff(&log, *from, *to, args.output)?;
        return Ok(ExitKind::Ok);
    }
    if let Some(id) = &args.run {
        run(&log, id, args.output)?;
        return Ok(ExitKind::Ok);
    }
    let resource = args.resource.as_deref();
    let applied = latest_applied(&log, resource)?;
    let failed = latest_failed(&log, resource)?;
    let running = in_progress(&log, resource)?;
    let mut events = log.recent(&resource.map(target::resource).unwrap_or_default(), args.limit)?;
    // A resource renamed with `moved`: its history goes on from its old name's.
    let mut name = resource.map(str::to_string);
    while let Some(from) = moved_from(&log, name.as_deref())? {
        if events.len() >= args.limit || events.iter().any(|e| e.target == target::resource(&from)) {
            break;
        }
        events.extend(log.recent(&target::resource(&from), args.limit - events.len())?);
        name = Some(from);
    }
    let applied = match (applied, resource) {
        (None, Some(_)) => {
            events.iter().find(|e| matches!(e.event, Event::ResourceApplied | Event::ResourceValid)).cloned()
        }
        (applied, _) => applied,
    };
    match args.output {
        OutputFormat::Json => print_json(&json!({
            "state_dir": dir,
            "workspace": args.log.state.named_workspace().unwrap_or("default"),
            "subject": resource.map_or_else(|| target::MANIFEST.to_string(), target::resource),
            "latest_applied": applied.as_ref().map(entry_json),
            "latest_failed": failed.as_ref().map(entry_json),
            "in_progress": running.iter().map(entry_json).collect::<Vec<_>>(),
            "events": events.iter().map(entry_json).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            let workspace = args.log.state.named_workspace().map(|w| format!(" (workspace {w})")).unwrap_or_default();
            outln!("Deployment log {}{workspace} — {subject}:", dir.display());
            match applied.as_ref().filter(|e| e.detail.get("destroyed") == Some(&serde_json::json!(true))) {
                Some(destroyed) => outln!("  destroyed                 {}", revision_line(Some(destroyed))),
                None => outln!("  latest applied revision   {}", revision_line(applied.as_ref())),
            }
            outln!("  latest failed revision    {}", revision_line(failed.as_ref()));
            if running.is_empty() {
                outln!("  in progress               none");
            }
            for entry in &running {
                let what = if entry.target == target::MANIFEST { String::new() } else { format!(" {}", entry.target) };
                outln!("  in progress               {}{what}", revision_line(Some(entry)));
            }
            if events.len() == args.limit {
                outln!("The {} most recent events, newest first (--limit N shows more):", args.limit);
            } else {
                outln!("Recent events (newest first):");
            }
            for entry in &events {
                outln!("{}", event_line(entry));
            }
        }
    }
    Ok(ExitKind::Ok)
}

/// The name `resource` had before a `moved` renamed it, if it was.
fn moved_from(log: &SqliteLog, resource: Option<&str>) -> Result<Option<String>, HistoryError> {
    let Some(resource) = resource else { return Ok(None) };
    let moved = log.latest(&target::resource(resource), &[Event::ResourceMoved])?;
    Ok(moved.and_then(|e| e.detail.get("from").and_then(|f| f.as_str()).map(str::to_string)))
}

fn revision_line(entry: Option<&Entry>) -> String {
    match entry {
        None => "none".into(),
        Some(e) => format!("{} (run {}, {})", e.revision, e.id, format_time(e.at)),
    }
}

fn event_line(entry: &Entry) -> String {
    let mut message = entry
        .detail
        .get("message")
        .and_then(Value::as_str)
        .and_then(|m| m.lines().next())
        .unwrap_or_default()
        .to_string();
    // An action's results (seed-004 messages), as `key=value`.
    let results: Vec<String> = entry.detail["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| format!("{}={}", r["key"].as_str().unwrap_or_default(), r["value"].as_str().unwrap_or_default()))
        .collect();
    if !results.is_empty() {
        message = format!("{message} result: {}", results.join(", ")).trim_start().to_string();
    }
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
        // A number; a content hash in entries from before revisions were numbered.
        "revision": entry.revision.parse::<i64>().map_or_else(|_| json!(entry.revision), |n| json!(n)),
        "event": entry.event,
        "at": format_time(entry.at),
        "detail": entry.detail,
    })
}

/// The revision numbered `number`, or an error naming the ones there are.
fn find_revision(revisions: &[Revision], number: i64) -> Result<&Revision, CliError> {
    revisions.iter().find(|r| r.number == number).ok_or_else(|| {
        let known = match (revisions.first(), revisions.last()) {
            (Some(first), Some(last)) => format!("this log has revisions {} to {}", first.number, last.number),
            _ => "this log has no revisions yet".to_string(),
        };
        CliError::Refused(format!("there is no revision {number}: {known}"))
    })
}

/// `history --revisions`.
pub(super) fn revisions(log: &SqliteLog, format: OutputFormat) -> Result<(), CliError> {
    // Outcomes come from the manifest's own entries: read them once, not once per revision.
    let mut runs = log.recent(target::MANIFEST, usize::MAX)?;
    runs.reverse();
    let mut rows = Vec::new();
    for revision in log.revisions()?.into_iter().rev() {
        let number = revision.number.to_string();
        let at: Vec<Entry> =
            runs.iter().filter(|e| e.revision == number || e.revision == revision.hash).cloned().collect();
        rows.push((revision, outcome(&at)));
    }
    match format {
        OutputFormat::Json => print_json(&json!(
            rows.iter()
                .map(|(r, outcome)| json!({
                    "revision": r.number,
                    "hash": r.hash,
                    "first_seen": format_time(r.first_seen),
                    "outcome": outcome,
                }))
                .collect::<Vec<_>>()
        )),
        OutputFormat::Text => {
            outln!("REVISION  HASH          FIRST SEEN                OUTCOME");
            for (r, outcome) in &rows {
                outln!("{:<9} {:<13} {:<25} {outcome}", r.number, r.hash, format_time(r.first_seen));
            }
        }
    }
    Ok(())
}

/// Where each resource stood at the end of what happened at a revision: its newest entry.
fn resource_entries(entries: &[Entry]) -> Vec<(&str, &Entry)> {
    let mut newest: Vec<(&str, &Entry)> = Vec::new();
    for e in entries {
        let Some(name) = e.target.strip_prefix("resource/").filter(|rest| !rest.contains('/')) else { continue };
        if matches!(e.event, Event::DriftDetected | Event::ChangeDetected) {
            continue;
        }
        match newest.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = e,
            None => newest.push((name, e)),
        }
    }
    newest
}

/// `history --revision N`.
/// `history --run ID`: every event of one run, oldest first.
fn run(log: &SqliteLog, id: &str, format: OutputFormat) -> Result<(), CliError> {
    let entries = log.entries_of_run(id)?;
    if entries.is_empty() {
        return Err(CliError::Refused(format!(
            "no run {id} in the deployment log {}: `deployster history` lists recent runs",
            log.path().display()
        )));
    }
    match format {
        OutputFormat::Json => print_json(&json!({
            "run": id,
            "revision": entries[0].revision,
            "events": entries.iter().map(entry_json).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            outln!("Run {id} (revision {}), oldest first:", entries[0].revision);
            for entry in &entries {
                outln!("{}", event_line(entry));
            }
        }
    }
    Ok(())
}

pub(super) fn revision(log: &SqliteLog, number: i64, format: OutputFormat) -> Result<(), CliError> {
    let revisions = log.revisions()?;
    let revision = find_revision(&revisions, number)?;
    let entries = log.entries_at(revision)?;
    let runs: Vec<&Entry> = entries.iter().filter(|e| e.target == target::MANIFEST).collect();
    let resources = resource_entries(&entries);
    let message = |e: &Entry| e.detail.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
    match format {
        OutputFormat::Json => print_json(&json!({
            "revision": revision.number,
            "hash": revision.hash,
            "first_seen": format_time(revision.first_seen),
            "outcome": outcome(&entries),
            "runs": runs.iter().map(|e| entry_json(e)).collect::<Vec<_>>(),
            "resources": resources.iter().map(|(name, e)| json!({
                "resource": name, "event": e.event, "at": format_time(e.at), "run": e.id, "message": message(e),
            })).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            outln!(
                "Revision {} (hash {}, first seen {}): {}",
                revision.number,
                revision.hash,
                format_time(revision.first_seen),
                outcome(&entries)
            );
            for e in &runs {
                outln!("  run {}  {}  {}", e.id, format_time(e.at), e.event.as_str());
            }
            let width = resources.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
            for (name, e) in &resources {
                let first_line = message(e).lines().next().unwrap_or_default().to_string();
                outln!("{}", format!("  {name:<width$}  {:<20} {first_line}", e.event.as_str()).trim_end());
            }
        }
    }
    Ok(())
}

/// Each resource's inputs as last recorded at a revision.
fn inputs_at(entries: &[Entry]) -> Vec<(String, Inputs)> {
    let mut found: Vec<(String, Inputs)> = Vec::new();
    for e in entries {
        let Some(name) = e.target.strip_prefix("resource/").filter(|rest| !rest.contains('/')) else { continue };
        let Some(inputs) = e.detail.get("inputs").and_then(Inputs::from_json) else { continue };
        match found.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = inputs,
            None => found.push((name.to_string(), inputs)),
        }
    }
    found
}

/// `history --diff N M`.
pub(super) fn diff(log: &SqliteLog, from: i64, to: i64, format: OutputFormat) -> Result<(), CliError> {
    let revisions = log.revisions()?;
    let (a, b) = (find_revision(&revisions, from)?, find_revision(&revisions, to)?);
    let (was, now) = (inputs_at(&log.entries_at(a)?), inputs_at(&log.entries_at(b)?));
    let mut names: Vec<&str> = was.iter().map(|(n, _)| n.as_str()).collect();
    names.extend(now.iter().map(|(n, _)| n.as_str()).filter(|n| !was.iter().any(|(w, _)| w == n)));
    let lookup = |side: &[(String, Inputs)], name: &str| side.iter().find(|(n, _)| n == name).map(|(_, i)| i.clone());
    let mut changes = Vec::new();
    for name in names {
        let what = match (lookup(&was, name), lookup(&now, name)) {
            (Some(w), Some(n)) => w.differences(&n),
            // Recorded on one side only: every value it has, against nothing.
            (w, n) => {
                let nothing = || Inputs {
                    type_name: String::new(),
                    config: json!({}),
                    digest: String::new(),
                    sensitive: Default::default(),
                };
                let mut what = w.unwrap_or_else(nothing).differences(&n.unwrap_or_else(nothing));
                for d in what.iter_mut().filter(|d| d.path == "type") {
                    d.was.take_if(|v| v == "");
                    d.now.take_if(|v| v == "");
                }
                what
            }
        };
        if !what.is_empty() {
            changes.push((name, what));
        }
    }
    match format {
        OutputFormat::Json => print_json(&json!({
            "from": from,
            "to": to,
            "resources": changes.iter().map(|(name, what)| json!({"resource": name, "differences": what})).collect::<Vec<_>>(),
        })),
        OutputFormat::Text => {
            if changes.is_empty() {
                outln!("Revisions {from} and {to}: no recorded config differs.");
            }
            for (name, what) in &changes {
                outln!("{name}:");
                for d in what {
                    let show = |v: &Option<Value>| v.as_ref().map_or_else(|| "(absent)".to_string(), Value::to_string);
                    outln!("    {}: {} → {}", d.path, show(&d.was), show(&d.now));
                }
            }
        }
    }
    Ok(())
}

/// The manifest, when it (one file, read and parsed) has no `outputs:` section; `None` when it
/// has one or cannot be told (several files, unreadable: the log decides).
fn declares_no_outputs(files: &[std::path::PathBuf]) -> Option<&std::path::Path> {
    let [file] = files else { return None };
    let text = std::fs::read_to_string(file).ok()?;
    let document: serde_norway::Value = serde_norway::from_str(&text).ok()?;
    document.as_mapping().is_some_and(|m| !m.contains_key("outputs")).then_some(file.as_path())
}

/// `deployster outputs`: the newest recorded outputs (sensitive values masked, as recorded).
pub(super) fn outputs(args: OutputsArgs) -> Result<ExitKind, CliError> {
    let dir = args.log.dir();
    if let Some(manifest) = declares_no_outputs(&args.log.files) {
        return Err(CliError::Refused(format!(
            "{} declares no outputs: there is nothing to show (an `outputs:` section names values to keep)",
            manifest.display()
        )));
    }
    let none = || CliError::Refused(format!("no outputs recorded in {} yet: apply first", dir.display()));
    if !dir.join(DATABASE).exists() {
        return Err(none());
    }
    let log = SqliteLog::open_for_reading(&dir)?;
    let entry = log.latest(target::MANIFEST, &[Event::OutputsRecorded])?.ok_or_else(none)?;
    let Some(values) = entry.detail.get("outputs").and_then(Value::as_object) else {
        let why = entry.detail.get("message").and_then(Value::as_str).unwrap_or("unknown");
        errln!("error: the latest run (revision {}) could not render the outputs: {why}", entry.revision);
        return Ok(ExitKind::Failed);
    };
    let Some(name) = &args.name else {
        match args.output {
            OutputFormat::Json => print_json(&Value::Object(values.clone())),
            OutputFormat::Text => {
                for (name, value) in values {
                    outln!("{name} = {value}");
                }
            }
        }
        return Ok(ExitKind::Ok);
    };
    let Some(value) = values.get(name) else {
        let hint = crate::engine::suggest::hint(name, values.keys().map(String::as_str));
        let names: Vec<&str> = values.keys().map(String::as_str).collect();
        return Err(CliError::Refused(format!("no output `{name}`{hint}; the outputs: {}", names.join(", "))));
    };
    match (args.raw, value) {
        (true, Value::String(text)) => outln!("{text}"),
        (true, Value::Number(_) | Value::Bool(_)) => outln!("{value}"),
        (true, _) => {
            return Err(CliError::Refused(format!(
                "output `{name}` is {}: --raw prints strings, numbers and booleans; use --output json",
                match value {
                    Value::Null => "null",
                    Value::Array(_) => "a list",
                    _ => "a mapping",
                }
            )));
        }
        (false, _) if args.output == OutputFormat::Json => print_json(value),
        (false, _) => outln!("{value}"),
    }
    Ok(ExitKind::Ok)
}
