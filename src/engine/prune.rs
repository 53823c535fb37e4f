//! What leaves a manifest: the resources its inventory holds and it no longer declares (or, to
//! destroy, every one), gathered into a manifest of their own for the delete path
//! ([`super::delete::remove_some`]): their types inited, their states read, their delete actions
//! run dependents first.
//!
//! A removed resource is planned from its declaration as the inventory kept it, rendered with
//! today's variables and the states of the resources it depends on — declared ones read as
//! they are now (they are in the removal's manifest too, never deleted there), removed ones
//! as the inventory kept them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use indexmap::IndexMap;

use super::identity::IdentityFields;
use super::manifest::{LoadedManifest, ResourceSpec};
use super::validate::{Invalid, ValidatedManifest, validate};

/// The resources a pass removes, in a manifest of their own.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The removed resources, and the declared ones they depend on.
    pub manifest: Arc<ValidatedManifest>,
    /// Per resource of `manifest`: whether it is removed (otherwise declared, and kept).
    pub removed: Vec<bool>,
}

impl Outgoing {
    pub fn names(&self) -> Vec<&str> {
        let resources = &self.manifest.resources;
        resources.iter().zip(&self.removed).filter(|(_, r)| **r).map(|(r, _)| r.name.as_str()).collect()
    }
}

/// Why what leaves the manifest cannot be planned.
#[derive(Debug, thiserror::Error)]
#[error("manifest {manifest}: cannot plan the removal of {}: {problems}", .removed.join(", "))]
pub struct PruneError {
    pub manifest: String,
    pub removed: Vec<String>,
    pub problems: String,
}

/// The removal for `declared`, given what its inventory holds: the resources held and no
/// longer declared — or, with `everything`, every resource held — and the old ones of those
/// `replaced` (declared still, with another identity: planned from the declaration held, its
/// identity fields pinned to those kept). `None` when nothing leaves.
pub fn removal(
    declared: &ValidatedManifest,
    inventory: &IndexMap<String, ResourceSpec>,
    everything: bool,
    replaced: &BTreeMap<String, IdentityFields>,
) -> Result<Option<Outgoing>, PruneError> {
    let source = &declared.source;
    let leaving: Vec<&String> = match everything {
        true => inventory.keys().collect(),
        false => {
            inventory.keys().filter(|n| !source.spec.resources.contains_key(*n) || replaced.contains_key(*n)).collect()
        }
    };
    if leaving.is_empty() {
        return Ok(None);
    }
    // Listed by name: the inventory's order is the order runs happened to reach them.
    let mut leaving = leaving;
    leaving.sort();
    let fail = |invalid: Invalid| PruneError {
        manifest: declared.name.clone(),
        removed: leaving.iter().map(|n| n.to_string()).collect(),
        problems: invalid.problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
    };
    // First with every declared resource, to find which the removed ones depend on; then with
    // only those, so that nothing else is read twice.
    let mut resources: IndexMap<String, ResourceSpec> = source.spec.resources.clone();
    for name in &leaving {
        if let Some(kept) = replaced.get(*name).filter(|_| !everything) {
            let mut old = inventory[*name].clone();
            super::identity::pin(&mut old.config, kept);
            resources.insert(name.to_string(), old);
        } else if !resources.contains_key(*name) {
            resources.insert(name.to_string(), inventory[*name].clone());
        }
    }
    let all = build(declared, &resources).map_err(fail)?;
    let mut wanted = BTreeSet::new();
    let mut stack: Vec<usize> = leaving.iter().filter_map(|n| all.index_of(n)).collect();
    while let Some(i) = stack.pop() {
        if wanted.insert(i) {
            stack.extend(all.graph.dependencies(i).iter().copied());
        }
    }
    resources.retain(|name, _| all.index_of(name).is_some_and(|i| wanted.contains(&i)));
    let manifest = build(declared, &resources).map_err(fail)?;
    let removed = manifest.resources.iter().map(|r| leaving.contains(&&r.name)).collect();
    Ok(Some(Outgoing { manifest: Arc::new(manifest), removed }))
}

/// `declared`'s manifest with `resources` instead of its own, validated with its variables;
/// its outputs dropped (they read the declared resources), its mask shared.
fn build(
    declared: &ValidatedManifest,
    resources: &IndexMap<String, ResourceSpec>,
) -> Result<ValidatedManifest, Invalid> {
    let mut loaded: LoadedManifest = (*declared.source).clone();
    loaded.spec.resources = resources.clone();
    loaded.spec.outputs.clear();
    loaded.spec.moved.clear();
    let manifest = validate(&loaded, declared.vars.clone())?;
    Ok(ValidatedManifest {
        name: declared.name.clone(),
        revision: declared.revision.clone(),
        mask: declared.mask.clone(),
        ..manifest
    })
}

/// `held` with the moves of `moves` made: each old name the inventory holds, held under its
/// new name. Returns the moves made, `(old, new)`; a new name held already is an error (two
/// resources cannot become one).
pub fn make_moves(
    held: &mut IndexMap<String, ResourceSpec>,
    moves: &IndexMap<String, String>,
) -> Result<Vec<(String, String)>, String> {
    let mut made = Vec::new();
    for (old, new) in moves {
        if !held.contains_key(old) {
            // Moved already (the entry stays in the manifest), or never applied.
            continue;
        }
        if held.contains_key(new) {
            return Err(format!(
                "moved: `{old}` → `{new}`: the inventory holds both; delete one of them first or drop the move"
            ));
        }
        let spec = held.shift_remove(old).expect("held");
        held.insert(new.clone(), spec);
        made.push((old.clone(), new.clone()));
    }
    Ok(made)
}
