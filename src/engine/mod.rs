//! The engine: manifest → validated manifest → init → plan → apply.
//!
//! Nothing here knows about Kubernetes or the command line; the CLI and the controller are thin
//! shells around [`run::Engine`].

pub(crate) mod as_found;
pub(crate) mod config;
pub mod conformance;
pub mod context;
pub mod delete;
pub mod digest;
pub mod error;
pub mod events;
pub mod executor;
pub mod expr;
pub mod graph;
pub mod identity;
pub(crate) mod init;
pub mod manifest;
pub mod mask;
pub mod messages;
pub mod plan;
pub mod protocol;
pub mod prune;
pub(crate) mod resource;
pub mod run;
pub mod saved;
pub mod schedule;
pub mod suggest;
pub mod typeref;
pub mod validate;
pub mod vars;

pub use init::PrepareError;

use std::path::PathBuf;

/// Why a manifest could not be turned into a validated one (all user input problems).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Load(#[from] manifest::LoadError),
    #[error(transparent)]
    Vars(#[from] vars::VarsError),
    #[error(transparent)]
    Invalid(#[from] validate::Invalid),
}

impl InputError {
    pub fn reason(&self) -> &'static str {
        match self {
            InputError::Load(e) => e.reason(),
            InputError::Vars(e) => e.reason(),
            InputError::Invalid(e) => e.reason(),
        }
    }
}

/// A duration no limit or interval may be, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is zero: give a duration longer than 0, such as 90s or 30m")]
    Zero(String),
    #[error("`{0}` is not a duration such as 90s or 30m")]
    NotADuration(String),
}

/// A time limit or interval as written (`90s`, `30m`, `1h 30m`): zero is refused, since a
/// limit of 0 would stop every program at once and an interval of 0 would pass without pause.
/// One rule and one message for the command line, manifests and Manifest objects.
pub fn positive_duration(text: &str) -> Result<std::time::Duration, DurationError> {
    match humantime::parse_duration(text.trim()) {
        Ok(d) if d.is_zero() => Err(DurationError::Zero(text.to_string())),
        Ok(d) => Ok(d),
        Err(_) => Err(DurationError::NotADuration(text.to_string())),
    }
}

/// Reads manifest files, resolves variables (defaults, auto var files, then `sources` in order)
/// and validates the result.
pub fn load_validated(
    files: &[PathBuf],
    sources: &[vars::VarSource],
) -> Result<validate::ValidatedManifest, InputError> {
    let mut loaded = manifest::load(files)?;
    for name in sources.iter().filter_map(vars::VarSource::sensitive_name) {
        if !loaded.spec.sensitive.iter().any(|s| s == name) {
            loaded.spec.sensitive.push(name.to_string());
        }
    }
    let dirs: Vec<PathBuf> = (0..loaded.files.len()).map(|i| loaded.dir_of(i)).collect();
    let vars = vars::resolve(&loaded.spec.vars, &dirs, sources, &loaded.spec.sensitive).map_err(|e| {
        vars::VarsError { origin: format!("manifest {}: {}", loaded.display_name(), e.origin), message: e.message }
    })?;
    Ok(validate::validate(&loaded, vars)?)
}
