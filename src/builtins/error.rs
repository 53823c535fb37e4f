//! Why a built-in type could not answer. Its words become the failure's cause as they are: a
//! built-in answered in deployster has no process, so no exit code stands in front of them.

use std::path::PathBuf;

/// Why `builtin/directory`, `builtin/file` or `builtin/package` failed.
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    /// The request is not what the engine sends.
    #[error("the request {0}")]
    Request(String),
    /// A config value the type cannot use (the schema lets through what only the type can judge).
    #[error("{0}")]
    Config(String),
    /// Something already there that the type will not replace or remove.
    #[error("{0}")]
    Refused(String),
    /// The filesystem refused an operation.
    #[error("cannot {what} {}: {source}", path.display())]
    Io { what: String, path: PathBuf, source: std::io::Error },
    /// A package that breaks seed 004's rules (its name, its scripts, its checksum).
    #[error("{0}")]
    Package(String),
    /// A path a built-in acting in a Pod may not use: only its `files` plug outlives the Pod.
    #[error("{0}")]
    Unconfined(String),
    #[error("unknown action `{0}`")]
    UnknownAction(String),
    #[error("unknown built-in type `{0}`")]
    UnknownType(String),
    /// `builtin/kubernetes` asked of what holds no Kubernetes client (a `__type` program).
    #[error(
        "builtin/kubernetes is answered inside deployster (built with the kube feature), which holds its clients; \
         it has no `__type` program"
    )]
    NoClient,
}

impl BuiltinError {
    /// A stable, machine-readable reason (logs, metrics).
    pub fn reason(&self) -> &'static str {
        match self {
            BuiltinError::Request(_) => "RequestInvalid",
            BuiltinError::Config(_) => "ConfigInvalid",
            BuiltinError::Refused(_) => "Refused",
            BuiltinError::Io { .. } => "FilesystemError",
            BuiltinError::Package(_) => "PackageInvalid",
            BuiltinError::Unconfined(_) => "OutsideFilesPlug",
            BuiltinError::UnknownAction(_) => "UnknownAction",
            BuiltinError::UnknownType(_) => "UnknownType",
            BuiltinError::NoClient => "NoClient",
        }
    }

    /// An [`BuiltinError::Io`] error for `what` on `path`, as a `map_err` argument.
    pub(super) fn io(what: impl Into<String>, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let (what, path) = (what.into(), path.into());
        move |source| BuiltinError::Io { what, path, source }
    }

    /// `config.<field> <problem>`.
    pub(super) fn config(field: &str, problem: impl std::fmt::Display) -> Self {
        BuiltinError::Config(format!("config.{field} {problem}"))
    }
}
