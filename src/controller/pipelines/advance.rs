//! Advance: one step forward from the progress recorded — the steps that ended recorded, those
//! due started ([`super::steps::ManifestSteps`]: a Manifest's vars set) — then the log written
//! (before the status says what it holds) and compacted when it grew long.

use std::sync::Arc;

use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::PipelineContext;
use super::compile::Compiled;
use super::log::ConfigMapLog;
use super::steps::ManifestSteps;
use crate::crd::pipeline::Pipeline;
use crate::history::HistoryError;
use crate::pipeline::PipelineError;
use crate::pipeline::advance::Advanced;
use crate::pipeline::progress::Progress;

/// Why the Pipeline could not be advanced, or what the advance recorded not written.
#[derive(Debug, thiserror::Error)]
pub enum AdvanceError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("writing the Pipeline's log: {0}")]
    Log(#[from] HistoryError),
}

impl AdvanceError {
    pub fn reason(&self) -> &'static str {
        match self {
            AdvanceError::Pipeline(e) => e.reason(),
            AdvanceError::Log(e) => e.reason(),
        }
    }
}

/// What an advance left, and where the log is kept now (for the status).
pub struct Advance {
    pub advanced: Advanced,
    /// The log's selector, ConfigMaps and entries.
    pub kept: (String, u32, u64),
}

/// Advances `object` once from what `recorded` holds, and writes the log. A log that could not
/// be written is forgotten: the next reconcile reads it anew (it may be behind what the API
/// holds after a conflict) and redoes what was lost.
pub async fn advance(
    object: &Pipeline,
    ctx: &PipelineContext,
    compiled: &Compiled,
    (log, progress): (Arc<ConfigMapLog>, Progress),
    term: CancellationToken,
    now: i64,
) -> Result<Advance, AdvanceError> {
    let advanced = steps_forward(object, ctx, compiled, &log, progress, term, now).await;
    let written = match advanced {
        Ok(advanced) => log.flush().await.map(|()| advanced).map_err(AdvanceError::from),
        Err(e) => Err(e),
    };
    let advanced = written.inspect_err(|_| ctx.logs.forget(object))?;
    let shown = format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any());
    match log.compact(&compiled.pipeline).await {
        Ok(true) => tracing::info!(pipeline = %shown, "compacted the pipeline's log"),
        Ok(false) => {}
        // Not fatal: the log stays whole, and the next reconcile reads it anew and tries again.
        Err(e) => {
            tracing::warn!(pipeline = %shown, "could not compact the pipeline's log: {e}");
            ctx.logs.forget(object);
        }
    }
    Ok(Advance { advanced, kept: log.where_kept() })
}

/// The driver's one advance, with the controller's steps: a change of a step's Manifest wakes
/// the Pipeline again.
async fn steps_forward(
    object: &Pipeline,
    ctx: &PipelineContext,
    compiled: &Compiled,
    log: &Arc<ConfigMapLog>,
    progress: Progress,
    term: CancellationToken,
    now: i64,
) -> Result<Advanced, AdvanceError> {
    let namespace = object.namespace().unwrap_or_default();
    let shown = format!("{namespace}/{}", object.name_any());
    let steps = ManifestSteps {
        client: ctx.client.clone(),
        timeout: ctx.settings.pipeline_step_timeout,
        metrics: ctx.metrics.clone(),
        cache: ctx.cache_of(&namespace).cloned(),
        namespace,
        now,
    };
    let say = |line: &str| tracing::info!(pipeline = %shown, "{line}");
    let driver = compiled.driver(log, ctx, &say, term);
    Ok(driver.advance_from(progress, &steps).await?)
}
