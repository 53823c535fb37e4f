//! What the flags' values must be: each parser clap is given, and why it refuses a value.

use std::time::Duration;

/// A workspace's name: a directory's name, and nothing that could leave the state directory.
pub(super) fn parse_workspace(name: &str) -> Result<String, ArgError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with('-');
    match valid {
        true => Ok(name.to_string()),
        false => Err(ArgError::Workspace),
    }
}

/// A runner's idle time: a duration, or `0` for none.
#[cfg(feature = "kube")]
pub(super) fn parse_idle(text: &str) -> Result<Duration, ArgError> {
    if text == "0" { Ok(Duration::ZERO) } else { parse_duration(text) }
}

/// `KEY=VALUE`, both non-empty.
#[cfg(feature = "kube")]
pub(super) fn parse_label(text: &str) -> Result<(String, String), ArgError> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() && !value.is_empty() => Ok((key.into(), value.into())),
        _ => Err(ArgError::Label(text.to_string())),
    }
}

/// A lease duration: whole seconds (the Lease stores seconds), at least 2.
#[cfg(feature = "kube")]
pub(super) fn parse_lease_duration(text: &str) -> Result<Duration, ArgError> {
    let duration = humantime::parse_duration(text)?;
    if duration < Duration::from_secs(2) || duration.subsec_nanos() != 0 {
        return Err(ArgError::LeaseDuration);
    }
    Ok(duration)
}

/// A time limit or interval: see [`crate::engine::positive_duration`].
pub(super) fn parse_duration(text: &str) -> Result<Duration, ArgError> {
    Ok(crate::engine::positive_duration(text)?)
}

/// Why a flag's value is refused (clap says it with the flag).
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    #[error("a workspace's name is 1 to 64 letters, digits, '-' and '_', not starting with '-'")]
    Workspace,
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    #[error("`{0}` is not KEY=VALUE")]
    Label(String),
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    #[error("a whole number of seconds, at least 2s")]
    LeaseDuration,
    #[error(transparent)]
    Duration(#[from] crate::engine::DurationError),
    #[error(transparent)]
    NotADuration(#[from] humantime::DurationError),
    #[error("a run id is a UUID, such as the `run` a plan or `history` shows (01a250c3-a6cd-7167-a5d8-faa90b0ebd19)")]
    RunId,
}

/// A run id: a UUID, written as deployster writes them (lower case, hyphenated).
pub(super) fn parse_run_id(text: &str) -> Result<String, ArgError> {
    let id = uuid::Uuid::try_parse(text.trim()).map_err(|_| ArgError::RunId)?;
    Ok(id.hyphenated().to_string())
}
