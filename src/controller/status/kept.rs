//! What a status keeps of the deployment log, and how it stays under [`STATUS_LIMIT`].

use serde_json::{Value, json};

use super::{STATUS_LIMIT, first_line};
use crate::crd::{HistoryEntry, ManifestStatus};
use crate::history::inventory::{drop_oldest, pinned_by};
use crate::history::{Entry, Event, format_time};

/// Log entries as the status holds them.
pub fn history_from(entries: &[Entry]) -> Vec<HistoryEntry> {
    entries.iter().map(to_history_entry).collect()
}

fn to_history_entry(e: &Entry) -> HistoryEntry {
    HistoryEntry {
        id: e.id.as_str().into(),
        target: e.target.as_str().into(),
        revision: e.revision.as_str().into(),
        event: e.event.as_str().into(),
        at: format_time(e.at).into(),
        detail: (!e.detail.as_object().is_some_and(|d| d.is_empty())).then(|| e.detail.clone()),
    }
}

/// The deployment-log entries a status holds, for the next pass's log. Entries of events this
/// version does not know are skipped.
pub fn history_entries(status: &ManifestStatus) -> Vec<Entry> {
    status
        .history
        .iter()
        .filter_map(|h| {
            let at =
                humantime::parse_rfc3339(&h.at).ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
            Some(Entry {
                id: h.id.to_string(),
                target: h.target.to_string(),
                revision: h.revision.to_string(),
                event: Event::parse(&h.event)?,
                at,
                detail: h.detail.clone().unwrap_or_else(|| json!({})),
            })
        })
        .collect()
}

/// Keeps the serialized status under [`STATUS_LIMIT`]: oldest history first, then the largest
/// resource states.
pub fn bound(status: &mut ManifestStatus) {
    let size = |s: &ManifestStatus| serde_json::to_string(s).map_or(usize::MAX, |t| t.len());
    // What the inventory stands on stays: without it, what leaves the spec is never deleted.
    static NO_DETAIL: Value = Value::Null;
    while size(status) > STATUS_LIMIT {
        let pinned = pinned_by(&status.history, |h| {
            Some((h.target.as_str(), Event::parse(&h.event)?, h.detail.as_ref().unwrap_or(&NO_DETAIL)))
        });
        let loose = pinned.iter().filter(|p| !**p).count();
        if loose == 0 {
            break;
        }
        drop_oldest(&mut status.history, &pinned, loose.div_ceil(4));
    }
    while size(status) > STATUS_LIMIT {
        let Some(largest) = status
            .resources
            .iter_mut()
            .filter(|r| r.state.is_some())
            .max_by_key(|r| r.state.as_ref().map_or(0, |s| s.to_string().len()))
        else {
            break;
        };
        let bytes = largest.state.as_ref().map_or(0, |s| s.to_string().len());
        if bytes < 100 {
            break;
        }
        largest.state = Some(json!({"truncated": true, "bytes": bytes}));
    }
    // Thousands of resources with long messages: keep each message's first line, shortened.
    if size(status) > STATUS_LIMIT {
        for r in &mut status.resources {
            if let Some(message) = &mut r.message {
                let mut short = first_line(message).to_string();
                short.truncate(short.char_indices().nth(120).map_or(short.len(), |(i, _)| i));
                *message = short;
            }
        }
    }
}
