//! What runs inside a resource type's Pod, in front of its program: the helper
//! (`deployster __pod-entry`, [`entry`]), its side of an invocation served by a warm runner
//! (`deployster __pod-serve`, [`serve`]), and the framed output both write ([`frames`]). No
//! Kubernetes client here: the helper is plain processes and files, built without the `kube`
//! feature; the client side that starts Pods and reads their logs is [`crate::pod`] (issue 51).

pub mod entry;
pub mod frames;
pub mod serve;

use std::path::PathBuf;

/// Why the helper's arguments are not what its caller writes (`entry::HelperCommand::args`,
/// `serve::args`): said on stderr with its usage, exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("{0} is missing")]
    Missing(String),
    #[error("{0} has no value")]
    NoValue(String),
    #[error("unknown argument `{0}`")]
    Unknown(String),
    #[error("{flag} takes whole seconds, not `{value}`")]
    NotSeconds { flag: String, value: String },
    #[error("{0} and {1} exclude each other")]
    Exclusive(&'static str, &'static str),
    #[error("usage: __pod-entry --nonce N --request FILE --termination-log FILE [--done FILE] -- PROGRAM [ARGS]")]
    NoSeparator,
    #[error("no program to run after --")]
    NoProgram,
}

/// Why a warm runner refuses an invocation: what its refusal record says (the executor starts
/// another runner when it is retiring, and reports the rest).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{} (idle)", serve::RETIRING)]
    Retiring,
    #[error("cannot open the lock {}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot lock {}: {source}", .path.display())]
    Lock { path: PathBuf, source: nix::errno::Errno },
    #[error("cannot mark {} used: {source}", .path.display())]
    Mark { path: PathBuf, source: std::io::Error },
    #[error("cannot write the lock {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "another invocation of resource `{resource}` is running in this runner ({running}); refusing to overlap it"
    )]
    Overlap { resource: String, running: String },
}
