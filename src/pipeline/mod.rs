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

#[cfg(test)]
mod tests;
