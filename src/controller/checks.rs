//! Adaptive drift checks for the Manifests this replica reconciles: one
//! [`Schedule`](crate::engine::schedule::Schedule) per object, in memory (a restarted controller
//! reads every state once, then backs off again).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use kube::ResourceExt;

use super::inputs::Intervals;
use crate::crd::Manifest;
use crate::engine::plan::ResourceEntry;
use crate::engine::schedule::{AssumeValid, Schedule};

#[derive(Default)]
pub struct Checks {
    by_object: Mutex<HashMap<String, Schedule>>,
}

/// When a pass's resources are next read, and when the next pass should run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NextChecks {
    pub by_resource: BTreeMap<String, SystemTime>,
    pub next_pass: Duration,
}

fn key(obj: &Manifest) -> String {
    obj.uid().unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

impl Checks {
    /// The resources of `obj` that need no check at `now` (for the revision they were read
    /// at: a spec edit or a changed Secret reads everything). Other intervals start the object's
    /// schedule again.
    pub fn not_due(&self, obj: &Manifest, intervals: Intervals, now: SystemTime) -> AssumeValid {
        let mut by_object = self.by_object.lock().expect("checks lock");
        let fresh = || Schedule::new(intervals.check, intervals.max);
        let schedule = by_object.entry(key(obj)).or_insert_with(fresh);
        if schedule.interval() != intervals.check || schedule.max_interval() != intervals.max {
            *schedule = fresh();
        }
        schedule.not_due(now)
    }

    /// Takes in a pass of `obj` that ran at `now`. `entries`: what it ended with, when it
    /// applied; otherwise (failed, awaiting approval, …) every state is read next time.
    pub fn record(
        &self,
        obj: &Manifest,
        now: SystemTime,
        revision: &str,
        assumed: &AssumeValid,
        entries: Option<&[ResourceEntry]>,
    ) -> NextChecks {
        let mut by_object = self.by_object.lock().expect("checks lock");
        let Some(schedule) = by_object.get_mut(&key(obj)) else { return NextChecks::default() };
        let next_pass = schedule.after_pass(now, revision, assumed, entries);
        let by_resource = entries
            .unwrap_or_default()
            .iter()
            .filter_map(|e| Some((e.name.clone(), schedule.next_check(&e.name)?)))
            .collect();
        NextChecks { by_resource, next_pass }
    }

    /// Forgets a deleted object.
    pub fn forget(&self, obj: &Manifest) {
        self.by_object.lock().expect("checks lock").remove(&key(obj));
    }
}
