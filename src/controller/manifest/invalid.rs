//! What only a change of a Manifest's spec can fix, found by [`super::validate`] or while its
//! inputs are read ([`super::inputs`]): the object is Stalled with why, and not retried.

use crate::engine::validate::Invalid;

/// What only a change of a Manifest's spec can fix: the object is Stalled, and not retried.
#[derive(Debug, thiserror::Error)]
pub enum InvalidSpec {
    #[error("spec.{field} {why}")]
    Interval { field: &'static str, why: crate::engine::DurationError },
    #[error("spec.maxInterval `{text}` is shorter than spec.interval `{interval}`")]
    MaxInterval { text: String, interval: String },
    #[error("plug `{plug}`: give exactly one of `secret`, `configMap` or `persistentVolumeClaim`")]
    PlugSource { plug: String },
    #[error(
        "plug `{plug}` names the PersistentVolumeClaim `{claim}`, which only resource types run as Pods can mount; \
         this controller runs image types without Pods (install it with executor=pod, the chart's default)"
    )]
    ClaimNeedsPods { plug: String, claim: String },
    #[error("{}", .0.problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Manifest(Invalid),
    #[error(
        "local program types are refused (the controller runs without --allow-local-programs): {}; use \
         builtin/<name> or a Docker image",
        .0.join(", ")
    )]
    LocalPrograms(Vec<String>),
    #[error("in a cluster, built-in types act in Pods of the namespace: {}", .0.join("; "))]
    BuiltinsInCluster(Vec<String>),
    #[error("spec.outputs: give at most one of `secretName` or `configMapName`")]
    OutputsTarget,
    #[error("varsFrom: key `{key}` of secret `{secret}` is not UTF-8 text, so it cannot be a variable")]
    VarNotText { secret: String, key: String },
}

impl InvalidSpec {
    pub fn reason(&self) -> &'static str {
        match self {
            InvalidSpec::LocalPrograms(_) => "LocalProgramRefused",
            _ => "InvalidManifest",
        }
    }
}
