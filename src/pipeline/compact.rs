//! Compaction of a pipeline's log: the entries that still say something, in their order.
//!
//! A pipeline's log grows with every revision that goes through it, while what progress and
//! the seed's questions need of a run that ended is little: whether it is the newest run to
//! have passed or failed some node, whether its deploy is what a target runs now, and that it
//! ended. Compaction keeps
//! - every entry of the runs still live (their steps, markers, approvals and artifacts);
//! - the newest registration of all, so that a front end does not register its revision again;
//! - of each step, its newest introduction and a withdrawal after it;
//! - of the runs that ended, only those still the answer to a question: the newest run (in
//!   the order runs were registered) to hold each node's marker, and per target the run whose
//!   deploy succeeded last; of each, its registration, what ended it, those entries and its
//!   approvals.
//!
//! The result is a subset of the log in its own order, read as before ([`super::drive::read`]):
//! latest through, latest failed and in progress at every node, each target's current revision,
//! and what the next drive does are the same. What it forgets: ended runs that answer nothing
//! more drop out of `pipeline status`, and run numbers count the runs kept.

use std::collections::{HashMap, HashSet};

use super::progress::{Progress, target_of};
use super::spec::Pipeline;
use crate::history::{Entry, Event};

/// The entries of `entries` (oldest first) that compaction keeps, oldest first.
pub fn compact(pipeline: &Pipeline, entries: &[Entry]) -> Vec<Entry> {
    let progress = Progress::from_entries(pipeline, entries);
    // A run's place in the order of registration, as progress counts runs.
    let order: HashMap<&str, usize> = progress.revisions.iter().enumerate().map(|(i, r)| (r.id.as_str(), i)).collect();
    let live: HashSet<&str> = progress.revisions.iter().filter(|r| r.is_live()).map(|r| r.id.as_str()).collect();

    // Each node's marker: the newest run holding it (entry index kept if that run has ended).
    let mut markers: HashMap<(&str, Event), (usize, usize)> = HashMap::new();
    // Each deploy step: the run whose success there is the newest (`current`), by (at, run).
    let mut deploys: HashMap<usize, ((i64, usize), usize)> = HashMap::new();
    let mut steps_held: HashMap<&str, (Option<usize>, Option<usize>)> = HashMap::new();
    let deploy_steps: HashSet<usize> = (0..pipeline.targets.len()).filter_map(|t| pipeline.deploy_step(t)).collect();
    let mut newest_registration = None;
    for (index, entry) in entries.iter().enumerate() {
        let id = entry.target.strip_prefix("pipeline/").unwrap_or_default();
        match entry.event {
            Event::RevisionRegistered => newest_registration = Some(index),
            Event::StepIntroduced => *steps_held.entry(&entry.target).or_default() = (Some(index), None),
            Event::StepWithdrawn => steps_held.entry(&entry.target).or_default().1 = Some(index),
            _ => {}
        }
        let Some(&run) = order.get(entry.id.as_str()) else { continue };
        match (entry.event, pipeline.step(id)) {
            (Event::StepSucceeded | Event::StepSkipped, Some(step)) if deploy_steps.contains(&step) => {
                let key = (entry.at, run);
                if deploys.get(&step).is_none_or(|(newest, _)| key >= *newest) {
                    deploys.insert(step, (key, index));
                }
            }
            (Event::RevisionRegistered | Event::Approved | Event::ArtifactRegistered, _) | (_, Some(_)) => {}
            (event, None) => {
                let newest = markers.entry((&entry.target, event)).or_insert((run, index));
                if run >= newest.0 {
                    *newest = (run, index);
                }
            }
        }
    }

    let mut keep: HashSet<usize> = HashSet::new();
    let mut answering: HashSet<&str> = HashSet::new();
    for &(run, index) in markers.values() {
        keep.insert(index);
        answering.insert(progress.revisions[run].id.as_str());
    }
    for &(_, index) in deploys.values() {
        keep.insert(index);
        answering.insert(entries[index].id.as_str());
    }
    if let Some(index) = newest_registration {
        answering.insert(entries[index].id.as_str());
    }
    for (introduced, withdrawn) in steps_held.values() {
        keep.extend(introduced.iter().chain(withdrawn));
    }
    let ending =
        [Event::StepFailed, Event::PipelineFinishedSuccessfully, Event::PipelineFailed, Event::RevisionSuperseded];
    let kept = entries.iter().enumerate().filter(|(index, entry)| {
        let id = entry.id.as_str();
        let of_an_answer = answering.contains(id)
            && (ending.contains(&entry.event) || matches!(entry.event, Event::RevisionRegistered | Event::Approved));
        keep.contains(index) || live.contains(id) || of_an_answer || !entry.target.starts_with(&target_of(""))
    });
    kept.map(|(_, entry)| entry.clone()).collect()
}
