//! A stage's gates as its document writes them (`gates.approval`, `gates.windows`), checked:
//! who must approve which group, and the windows when the stage starts nothing.

use std::time::Duration;

use serde_json::Value;

use super::SpecError;
use super::document::StageSpec;

/// A time when a stage starts nothing: each time `cron` matches (UTC), for `duration`.
#[derive(Debug, Clone)]
pub struct DenyWindow {
    pub cron: croner::Cron,
    pub duration: Duration,
    /// As written: `0 17 * * 5` for 64h.
    pub said: String,
}

impl DenyWindow {
    /// When the window that holds `now` (milliseconds since the epoch) ends, if one does.
    pub fn holds(&self, now: i64) -> Option<i64> {
        let span = self.duration.as_millis() as i64;
        let since = chrono::DateTime::from_timestamp_millis(now - span)?;
        let opened = self.cron.find_next_occurrence(&since, false).ok()?.timestamp_millis();
        (opened <= now).then_some(opened + span)
    }
}

/// `gates.windows: [{deny: "0 17 * * 5", duration: 64h}]`: cron expressions (UTC) and how long
/// each window lasts.
pub(super) fn windows(stage: &StageSpec, at: &str) -> Result<Vec<DenyWindow>, SpecError> {
    let Some(listed) = stage.gates.get("windows") else { return Ok(Vec::new()) };
    let shape = || {
        SpecError::Invalid(format!(
            "{at}: gates.windows must be a list of {{deny: <cron expression>, duration: <such as 2h>}}"
        ))
    };
    let listed = listed.as_array().ok_or_else(shape)?;
    listed
        .iter()
        .map(|window| {
            let (Some(deny), Some(duration)) = (window["deny"].as_str(), window["duration"].as_str()) else {
                return Err(shape());
            };
            let cron: croner::Cron = deny.parse().map_err(|e| {
                SpecError::Invalid(format!("{at}: gates.windows: `{deny}` is not a cron expression: {e}"))
            })?;
            let duration = humantime::parse_duration(duration).map_err(|e| {
                SpecError::Invalid(format!("{at}: gates.windows: duration `{duration}` is not one such as 2h: {e}"))
            })?;
            if duration.is_zero() {
                return Err(SpecError::Invalid(format!(
                    "{at}: gates.windows: duration is zero: give a duration longer than 0"
                )));
            }
            Ok(DenyWindow { cron, duration, said: format!("{deny} for {}", humantime::format_duration(duration)) })
        })
        .collect()
}

/// `gates.approval`: `None` when absent or false; an empty list for `true` (the stage's first
/// group); else the groups named.
pub(super) fn approval(stage: &StageSpec, at: &str) -> Result<Option<Vec<String>>, SpecError> {
    match stage.gates.get("approval") {
        None | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(Vec::new())),
        Some(Value::Array(names)) if !names.is_empty() && names.iter().all(Value::is_string) => {
            Ok(Some(names.iter().filter_map(Value::as_str).map(str::to_string).collect()))
        }
        Some(other) => {
            Err(SpecError::Invalid(format!("{at}: gates.approval must be true or a list of its groups, not {other}")))
        }
    }
}
