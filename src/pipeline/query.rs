//! What a pipeline's log says, at every granularity, with the same three questions the seed
//! asks: latest revision through, latest failed, in progress. Each looks only for its own
//! markers (`stage-finished-successfully` for a stage), so new kinds of steps do not change
//! the answers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::progress::{Progress, RevisionEnded, StepDecision, target_of};
use super::spec::Pipeline;
use crate::history::Event;

/// One node: the pipeline, a stage, a group or a target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// `pipeline`, `staging`, `prod/fleet`, `prod/fleet/prod-a2`.
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_through: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_failed: Option<String>,
    pub in_progress: Vec<String>,
    /// A target's: the revision of its newest successful `deploy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    pub revision: String,
    /// Which run of the revision, counted from 1, when it was registered more than once (a
    /// rollback to it, or a retry): each run has its own line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// `through`, `failed`, `superseded`, `in progress`, `registered`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A step on the frontier, and what it does or waits for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrontierStep {
    pub revision: String,
    pub step: String,
    /// `ready`, `running`, `skip`, `waiting`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineOverview {
    pub pipeline: String,
    pub revisions: Vec<RevisionStatus>,
    pub nodes: Vec<NodeStatus>,
    pub frontier: Vec<FrontierStep>,
}

/// Each run's number among its revision's runs (aligned with `progress.revisions`), when its
/// revision has more than one.
pub fn run_numbers(progress: &Progress) -> Vec<Option<u32>> {
    let mut seen: std::collections::HashMap<&str, u32> = Default::default();
    let numbers: Vec<u32> = progress
        .revisions
        .iter()
        .map(|r| {
            let n = seen.entry(r.revision.as_str()).or_default();
            *n += 1;
            *n
        })
        .collect();
    progress.revisions.iter().zip(numbers).map(|(r, n)| (seen[r.revision.as_str()] > 1).then_some(n)).collect()
}

/// A run as said: `1.4.2`, or `1.4.2 (run 2)` when the revision ran more than once.
pub fn run_name(revision: &str, run: Option<u32>) -> String {
    match run {
        Some(n) => format!("{revision} (run {n})"),
        None => revision.to_string(),
    }
}

/// The status of every node, revision and frontier step; `how` says how an approval is given
/// ([`StepDecision::waits_for`]).
pub fn status(
    pipeline: &Pipeline,
    progress: &Progress,
    now: i64,
    how: &dyn Fn(&str, &str) -> String,
) -> PipelineOverview {
    let mut nodes =
        vec![node(progress, "", Event::PipelineFinishedSuccessfully, Event::PipelineFailed, Event::PipelineStarted)];
    for stage in &pipeline.stages {
        nodes.push(node(
            progress,
            &stage.name,
            Event::StageFinishedSuccessfully,
            Event::StageFailed,
            Event::StageStarted,
        ));
        for group in &stage.groups {
            nodes.push(node(
                progress,
                &group.id,
                Event::GroupFinishedSuccessfully,
                Event::GroupFailed,
                Event::GroupStarted,
            ));
        }
    }
    for (t, target) in pipeline.targets.iter().enumerate() {
        let mut status =
            node(progress, &target.id, Event::TargetFinishedSuccessfully, Event::TargetFailed, Event::TargetStarted);
        status.current = pipeline.deploy_step(t).and_then(|s| {
            progress
                .revisions
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.skipped.contains(s))
                .filter_map(|(i, r)| r.succeeded_at.get(&s).map(|at| (*at, i, r.revision.clone())))
                .max()
                .map(|(_, _, revision)| revision)
        });
        nodes.push(status);
    }
    let revisions = progress
        .revisions
        .iter()
        .zip(run_numbers(progress))
        .map(|(r, run)| {
            let (status, detail) = match &r.ended {
                Some(RevisionEnded::Through) => ("through", None),
                Some(RevisionEnded::Failed { step, message }) => ("failed", Some(format!("{step}: {message}"))),
                Some(RevisionEnded::Superseded { by }) => ("superseded", Some(format!("by {by}"))),
                None if r.under_way() => ("in progress", None),
                None => ("registered", None),
            };
            RevisionStatus { revision: r.revision.clone(), run, status: status.into(), detail }
        })
        .collect();
    let frontier = progress
        .schedule(pipeline, now)
        .into_iter()
        .map(|s| {
            let (status, waits_for) = match s.decision {
                StepDecision::Start { .. } => ("ready", None),
                StepDecision::Running => ("running", None),
                StepDecision::Skip(why) => ("skip", Some(why)),
                waits @ (StepDecision::Wait(_) | StepDecision::Approval { .. }) => ("waiting", waits.waits_for(how)),
            };
            FrontierStep {
                revision: s.revision,
                step: pipeline.steps[s.step].id.clone(),
                status: status.into(),
                waits_for,
            }
        })
        .collect();
    PipelineOverview { pipeline: pipeline.name.clone(), revisions, nodes, frontier }
}

/// The seed's three questions for one node, "latest" in the order revisions were registered.
fn node(progress: &Progress, id: &str, through: Event, failed: Event, started: Event) -> NodeStatus {
    let target = target_of(id);
    let has = |r: &super::progress::RevisionProgress, event| r.markers.contains(&(target.clone(), event));
    let latest = |event| progress.revisions.iter().rev().find(|r| has(r, event)).map(|r| r.revision.clone());
    NodeStatus {
        node: if id.is_empty() { "pipeline".into() } else { id.to_string() },
        latest_through: latest(through),
        latest_failed: latest(failed),
        in_progress: progress
            .revisions
            .iter()
            .filter(|r| r.is_live() && has(r, started) && !has(r, through) && !has(r, failed))
            .map(|r| r.revision.clone())
            .collect(),
        current: None,
    }
}
