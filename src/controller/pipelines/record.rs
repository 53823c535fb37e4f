//! Record: the Pipeline's log read (once: every step after works on the progress read here),
//! then what the object asks for recorded in it — the spec's revision registered when it is
//! not the newest, the artifacts and approvals its annotations list. Nothing is published
//! here: what happened comes back as events for the report.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;

use super::PipelineContext;
use super::compile::Compiled;
use super::log::ConfigMapLog;
use super::observe::PipelineEvent;
use crate::controller::reasons::Reason;
use crate::crd::pipeline::{APPROVE_ANNOTATION, Pipeline, REGISTER_ANNOTATION};
use crate::history::HistoryError;
use crate::pipeline::PipelineError;
use crate::pipeline::drive::read;
use crate::pipeline::progress::Progress;

/// Why what the object asks for could not be recorded: its log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("reading the Pipeline's log: {0}")]
    Log(#[from] HistoryError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

impl RecordError {
    pub fn reason(&self) -> &'static str {
        match self {
            RecordError::Log(e) => e.reason(),
            RecordError::Pipeline(e) => e.reason(),
        }
    }
}

/// The Pipeline's log, its progress with what the object asked for recorded, and what to tell.
pub struct Recorded {
    pub log: Arc<ConfigMapLog>,
    pub progress: Progress,
    pub events: Vec<PipelineEvent>,
}

/// Reads the log of `object` and records in it the spec's revision, the artifacts and the
/// approvals its annotations list.
pub async fn record(object: &Pipeline, ctx: &PipelineContext, compiled: &Compiled) -> Result<Recorded, RecordError> {
    let log = ctx.logs.get(ctx.client.clone(), object).await?;
    let say = |_: &str| {};
    let driver = compiled.driver(&log, ctx, &say, CancellationToken::new());
    let mut progress = read(driver.pipeline, driver.log.as_ref())?;
    let mut events = Vec::new();
    let revision = &compiled.revision;
    let newest = progress.revisions.last().map(|r| r.revision.as_str());
    if newest != Some(revision.as_str()) && driver.register_in(&mut progress, revision, &compiled.vars)? {
        events.push((EventType::Normal, Reason::RevisionRegistered, format!("revision {revision}")));
    }
    for words in annotated(object, REGISTER_ANNOTATION, 3) {
        let [registered, stage, artifact] = [&words[0], &words[1], &words[2]];
        let have = progress.revision(registered).and_then(|r| progress.artifacts.get(&(stage.clone(), r.id.clone())));
        if have.is_some_and(|a| a.contains(artifact)) {
            continue;
        }
        match driver.register_artifact_in(&mut progress, registered, stage, artifact) {
            Ok(()) => {
                let note = format!("artifact {artifact} of revision {registered} for stage {stage}");
                events.push((EventType::Normal, Reason::ArtifactRegistered, note));
            }
            Err(PipelineError::Refused(why)) => events.push((EventType::Warning, Reason::RegisterRefused, why)),
            Err(e) => return Err(e.into()),
        }
    }
    for words in annotated(object, APPROVE_ANNOTATION, 2) {
        let (approved, gate) = (&words[0], &words[1]);
        if approved_already(&progress, approved, gate) {
            continue;
        }
        match driver.approve_in(&mut progress, approved, gate) {
            Ok(()) => events.push((EventType::Normal, Reason::Approved, format!("revision {approved} at {gate}"))),
            Err(PipelineError::Refused(why)) => events.push((EventType::Warning, Reason::ApprovalRefused, why)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Recorded { log, progress, events })
}

/// The items of annotation `key` — lines, or commas — of `words` words each (others are
/// ignored: `<revision> <stage/group>` approves, `<revision> <stage> <artifact>` registers).
fn annotated(object: &Pipeline, key: &str, words: usize) -> Vec<Vec<String>> {
    let text = object.annotations().get(key).cloned().unwrap_or_default();
    text.lines()
        .flat_map(|line| line.split(','))
        .map(|item| item.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|item| item.len() == words)
        .collect()
}

/// Whether the newest run of `revision` holds an approval at `gate` (a group, or a stage's
/// first group).
fn approved_already(progress: &Progress, revision: &str, gate: &str) -> bool {
    progress.revision(revision).is_some_and(|r| {
        progress
            .approvals
            .iter()
            .any(|(at, id)| id == &r.id && (at == gate || at.split_once('/').map(|(s, _)| s) == Some(gate)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_lines_or_commas_of_words() {
        let mut object = Pipeline::new("p", Default::default());
        let approve = "1.0 prod/fleet\n2.0 prod, 3.0\n\n4.0 a b";
        let register = "1.0 build amd64, 1.0 build";
        object.metadata.annotations = Some(
            [(APPROVE_ANNOTATION.to_string(), approve.to_string()), (REGISTER_ANNOTATION.into(), register.into())]
                .into(),
        );
        assert_eq!(annotated(&object, APPROVE_ANNOTATION, 2), [vec!["1.0", "prod/fleet"], vec!["2.0", "prod"]]);
        assert_eq!(annotated(&object, REGISTER_ANNOTATION, 3), [vec!["1.0", "build", "amd64"]]);
    }
}
