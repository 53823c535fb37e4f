//! Pipelines (seed 002): revisions progress through stages, groups of targets and steps, with
//! batches, gates and safe pipeline changes — computed from the pipeline's deployment log
//! alone, the only memory a pipeline has.
//!
//! - [`spec`]: the document, checked and compiled into steps with stable ids
//!   (`stage/group/target/step`), `next` edges and `after` sets.
//! - [`progress`]: where each revision stands, from the log; the frontier and what each step
//!   on it may do now.
//! - [`drive`]: the loop that does the work and records it; a front end (the CLI) brings the
//!   [`drive::StepRunner`] that applies manifests.
//! - [`query`]: what the log says at every granularity: latest revision through, latest
//!   failed, in progress.
//! - [`compact`]: the part of a log that still says something, so that a log kept whole
//!   (the controller's, in ConfigMaps) is bounded by what is live, not by history.

pub mod advance;
pub mod compact;
pub mod document;
pub mod drive;
pub mod gates;
pub mod here;
pub mod progress;
pub mod query;
pub mod spec;

use crate::history::HistoryError;

/// Why a pipeline command could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The pipeline itself is wrong (exit 2).
    #[error("{0}")]
    Invalid(String),
    /// The request does not fit what the log says (an approval nothing waits for).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    History(#[from] HistoryError),
}

impl PipelineError {
    pub fn reason(&self) -> &'static str {
        match self {
            PipelineError::Invalid(_) => "InvalidPipeline",
            PipelineError::Refused(_) => "Refused",
            PipelineError::History(e) => e.reason(),
        }
    }
}

/// Why a pipeline's document does not compile into a [`spec::Pipeline`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// A rule of the document broken, said where (`stage `prod``, a batch…) and how.
    #[error("{0}")]
    Invalid(String),
    /// A target's or test's manifest names nothing there is (yet): creating it is the fix, not
    /// a change of the pipeline.
    #[error("{at}: there is no Manifest {namespace}/{name}")]
    ManifestMissing { at: String, namespace: String, name: String },
    /// A manifest named as a template that does not render.
    #[error("{at}: manifest `{written}`: {why}")]
    ManifestTemplate { at: String, written: String, why: String },
    /// A manifest file that does not load.
    #[error("{at}: its manifest {} does not load: {why}", .manifest.display())]
    ManifestUnloadable { at: String, manifest: std::path::PathBuf, why: String },
}

impl SpecError {
    /// A manifest not there (yet): waited for rather than Stalled.
    pub fn is_missing_manifest(&self) -> bool {
        matches!(self, SpecError::ManifestMissing { .. })
    }
}

/// Why a step could not start or did not get through: what its `step-failed` entry records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The step's own state (its directory, its vars file, its lock, its log) could not be had.
    #[error("{what}: {why}")]
    State { what: String, why: String },
    /// Its manifest did not load, or its pass did not get through: the manifest, and why.
    #[error("manifest {manifest}{why}")]
    Manifest { manifest: String, why: String },
    /// Its Manifest (a Pipeline's step in a cluster) could not be given the step's vars.
    #[error("{manifest}: cannot set its vars for revision {revision}: {why}")]
    Vars { manifest: String, revision: String, why: String },
    /// What another runner of steps (a test's stand-in) says of its failure.
    #[error("{0}")]
    Failed(String),
}

#[cfg(test)]
mod tests;
