//! What leaves the manifest in a pass: moved, forgotten, or planned and deleted — and
//! `destroy`, where everything held leaves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use indexmap::IndexMap;

use super::{Ended, Inventory, Pass};
use crate::engine::PrepareError;
use crate::engine::delete::{DeleteReport, remove_some};
use crate::engine::events::{Decision, Mode, Observer, Observers, RunEvent};
use crate::engine::identity::IdentityFields;
use crate::engine::manifest::ResourceSpec;
use crate::engine::plan::{Plan, Removal, RemovalEntry, Replacement};
use crate::engine::prune;
use crate::engine::run::Prepared;
use crate::engine::validate::ValidatedManifest;
use crate::history::inventory::Keeper;
use crate::history::recorder::Recorder;

impl Pass<'_> {
    /// What leaves the manifest (everything, for a delete pass), inited and planned; the
    /// resources moved come first in its removals.
    pub(super) async fn plan_removal(
        &self,
        books: &Books,
        observers: &Arc<Observers>,
        replaced: &[Replacement],
    ) -> Result<Option<Leaving>, PrepareError> {
        let replaced: BTreeMap<String, IdentityFields> =
            replaced.iter().filter_map(|r| Some((r.name.clone(), books.identities.get(&r.name)?.clone()))).collect();
        let not_planned = |message: String| PrepareError::Removal { manifest: self.manifest.name.clone(), message };
        let moved = books.moves.clone().map_err(not_planned)?;
        let moved: Vec<RemovalEntry> = moved
            .into_iter()
            .map(|(old, new)| RemovalEntry {
                type_name: books.held[&new].type_ref.clone().unwrap_or_default(),
                name: old,
                removal: Removal::Moved { to: new },
            })
            .collect();
        if self.inventory == Inventory::Orphan {
            let mut left: Vec<RemovalEntry> = (books.held.iter())
                .filter(|(name, _)| self.manifest.index_of(name).is_none() || replaced.contains_key(*name))
                .map(|(name, spec)| RemovalEntry {
                    name: name.clone(),
                    type_name: spec.type_ref.clone().unwrap_or_default(),
                    removal: Removal::Forgotten {
                        reason: match replaced.contains_key(name) {
                            true => "replaced: the old one is left in place, as removalPolicy is Orphan".into(),
                            false => "left in place: removalPolicy is Orphan".into(),
                        },
                    },
                })
                .collect();
            left.sort_by(|a, b| a.name.cmp(&b.name));
            let nothing = moved.is_empty() && left.is_empty();
            return Ok((!nothing).then_some(Leaving { moved, removing: None, left }));
        }
        let everything = self.inventory == Inventory::Destroy;
        let removal = match prune::removal(&self.manifest, &books.held, everything, &replaced) {
            Ok(Some(removal)) => removal,
            Ok(None) if moved.is_empty() => return Ok(None),
            Ok(None) => return Ok(Some(Leaving { moved, removing: None, left: Vec::new() })),
            Err(e) => return Err(not_planned(e.problems.clone() + &format!(" (removing {})", e.removed.join(", ")))),
        };
        let prepared = self.engine(removal.manifest.clone(), observers).prepare().await.map_err(|e| {
            not_planned(format!("the removal of {} cannot be prepared: {e}", removal.names().join(", ")))
        })?;
        let plan = prepared.plan().await;
        // Made by this `Prepared`, so never refused.
        let planned =
            remove_some(&prepared, &plan, &removal.removed, false).await.map_err(|e| not_planned(e.to_string()))?;
        Ok(Some(Leaving { moved, removing: Some(Removing { prepared, plan, removal, planned }), left: Vec::new() }))
    }

    /// Records the moves, then removes what left: before anything declared is applied.
    pub(super) async fn remove(
        &self,
        books: &Books,
        leaving: &Leaving,
        observers: &Observers,
    ) -> Result<DeleteReport, PrepareError> {
        let moves: Vec<(String, String)> = books.moves.clone().unwrap_or_default();
        if let Some(keeper) = &books.keeper {
            keeper.record_moves(&moves).map_err(|e| PrepareError::Removal {
                manifest: self.manifest.name.clone(),
                message: format!("the moves could not be recorded: {e}"),
            })?;
        }
        for left in &leaving.left {
            let (resource, message) = (left.name.clone(), left.removal.message());
            observers.on_event(&RunEvent::Settled {
                resource,
                label: "FORGOTTEN",
                elapsed: Default::default(),
                message,
            });
        }
        // What became of each: moved, then forgotten or removed.
        let mut entries = leaving.moved.clone();
        entries.extend(leaving.left.iter().cloned());
        if let Some(r) = &leaving.removing {
            books.keeper.iter().for_each(|k| k.removing(true));
            let report = remove_some(&r.prepared, &r.plan, &r.removal.removed, true).await;
            books.keeper.iter().for_each(|k| k.removing(false));
            let report = report
                .map_err(|e| PrepareError::Removal { manifest: self.manifest.name.clone(), message: e.to_string() })?;
            entries.extend(report.entries);
        }
        Ok(DeleteReport { manifest: self.manifest.name.clone(), entries })
    }

    /// `destroy`: everything declared or held, deleted dependents first.
    pub(super) async fn destroy(&self, observers: Arc<Observers>, books: &Books) -> Ended {
        let leaving = match self.plan_removal(books, &observers, &[]).await {
            Ok(Some(leaving)) => leaving,
            Ok(None) => Leaving { moved: Vec::new(), removing: None, left: Vec::new() },
            Err(e) => return Ended::NotPrepared(e),
        };
        // Shown as removals only: every resource here leaves (none, when nothing is held).
        let mut plan = match &leaving.removing {
            Some(removing) => removing.plan.clone(),
            None => Plan {
                manifest: self.manifest.name.clone(),
                run_id: self.options.run_id.clone(),
                entries: Vec::new(),
                removals: Vec::new(),
                held: 0,
                notes: Vec::new(),
                warnings: Vec::new(),
                replacements: Vec::new(),
                mask: self.manifest.mask.clone(),
            },
        };
        plan.entries.clear();
        plan.removals = leaving.entries();
        plan.held = books.held.len();
        observers.on_planned(&plan, &books.recorder.drifts(), &books.recorder.changes());
        if self.mode == Mode::Plan {
            return Ended::Planned(plan);
        }
        let decision = match plan.has_changes() {
            true => self.approver.approve_plan(&plan).await,
            false => Decision::Apply,
        };
        match decision {
            Decision::Apply => {}
            Decision::Decline(why) => return Ended::Declined { plan, why },
            Decision::Refuse(why) => return Ended::Refused { plan, why },
        }
        match self.remove(books, &leaving, &observers).await {
            Ok(report) => Ended::Deleted { plan, report },
            Err(e) => Ended::NotPrepared(e),
        }
    }
}

/// A resource deleted beside a new one of the same type is, as often as not, a rename: said,
/// with how to keep it instead.
pub(super) fn renames(
    manifest: &ValidatedManifest,
    held: &IndexMap<String, ResourceSpec>,
    removals: &[RemovalEntry],
) -> Vec<String> {
    let mut new: Vec<&crate::engine::validate::Resource> =
        manifest.resources.iter().filter(|r| !held.contains_key(&r.name)).collect();
    let mut notes = Vec::new();
    // A replacement's old one is declared still: not a rename.
    for leaving in removals.iter().filter(|r| r.removal == Removal::ToDelete && manifest.index_of(&r.name).is_none()) {
        let Some(at) = new.iter().position(|r| r.type_name == leaving.type_name) else { continue };
        let (old, renamed) = (&leaving.name, &new.remove(at).name);
        notes.push(format!(
            "`{old}` is deleted and `{renamed}` ({}) is new: if `{renamed}` is `{old}` renamed, add `moved: {{{old}: {renamed}}}` \
             to keep it, with its state and history, instead of deleting it and creating it anew",
            leaving.type_name
        ));
    }
    notes
}

/// The declared resources whose identity, as the plan rendered it, moved from the one the
/// inventory holds: each is replaced (the old one deleted first, then the new one created).
pub(super) fn replacements(prepared: &Prepared, plan: &Plan, books: &Books) -> Vec<Replacement> {
    plan.entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let kept = books.identities.get(&e.name)?;
            let moved = crate::engine::identity::moved(kept, &prepared.identity(i, e.config.as_ref()?));
            let replacement = Replacement { name: e.name.clone(), type_name: e.type_name.clone(), moved };
            (!replacement.moved.is_empty()).then_some(replacement)
        })
        .collect()
}

/// What a pass keeps in the log, and what it read there first.
pub(super) struct Books {
    pub(super) recorder: Arc<Recorder>,
    pub(super) keeper: Option<Arc<Keeper>>,
    /// The manifest's inventory, its moves made.
    pub(super) held: IndexMap<String, ResourceSpec>,
    /// Which thing each resource held is, when the inventory kept it.
    pub(super) identities: HashMap<String, IdentityFields>,
    /// Which variables differ from those of the last successful apply, as a note.
    pub(super) varied: Option<String>,
    /// The renames (`moved`) the inventory calls for, `(old, new)`; or why they cannot be made.
    pub(super) moves: Result<Vec<(String, String)>, String>,
}

/// What leaves the manifest: renamed, to be removed, or left in place.
pub(super) struct Leaving {
    pub(super) moved: Vec<RemovalEntry>,
    pub(super) removing: Option<Removing>,
    /// Forgotten without a look ([`Inventory::Orphan`]).
    pub(super) left: Vec<RemovalEntry>,
}

impl Leaving {
    /// What the plan shows: the moves, then the removals.
    pub(super) fn entries(&self) -> Vec<RemovalEntry> {
        let removals = self.removing.iter().flat_map(|r| r.planned.entries.iter().cloned());
        self.moved.iter().cloned().chain(removals).chain(self.left.iter().cloned()).collect()
    }
}

/// What is removed, ready.
pub(super) struct Removing {
    pub(super) prepared: Prepared,
    pub(super) plan: Plan,
    pub(super) removal: prune::Outgoing,
    /// What a run would do to each resource removed.
    pub(super) planned: DeleteReport,
}
