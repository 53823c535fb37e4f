//! The inventory: what each manifest's runs brought into being, read from the deployment log.
//!
//! A resource joins its manifest's inventory (`resource-inventoried`, with the resource as
//! written) durably before its first action runs, or when a run finds it VALID; it leaves when
//! it is deleted or found MISSING (`resource-deleted`), or left in place on purpose
//! (`resource-forgotten`). What the inventory holds and the manifest no longer declares is what
//! a run deletes ([`crate::engine::prune`]). Each manifest has its own: a resource another
//! manifest inventoried is not this one's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use serde_json::{Value, json};

use super::{Entry, Event, History, HistoryError, now_ms, target};
use crate::engine::events::{IntentError, Mode, Observer, RunEvent};
use crate::engine::identity::IdentityFields;
use crate::engine::manifest::ResourceSpec;
use crate::engine::plan::{Change, Drift, Plan, Standing};
use crate::engine::protocol::Status;
use crate::engine::validate::ValidatedManifest;

/// The events that move a resource in or out of an inventory.
const EVENTS: [Event; 4] =
    [Event::ResourceInventoried, Event::ResourceMoved, Event::ResourceDeleted, Event::ResourceForgotten];

/// The resources the log holds in `manifest`'s inventory, oldest first, as they were written.
pub fn inventory(log: &dyn History, manifest: &str) -> Result<IndexMap<String, ResourceSpec>, HistoryError> {
    Ok(held(log, manifest)?
        .into_iter()
        .filter_map(|(name, held)| match serde_json::from_value(held.declaration) {
            Ok(spec) => Some((name, spec)),
            Err(e) => {
                tracing::warn!(resource = %name, error = %e, "an inventory entry cannot be read; it is skipped");
                None
            }
        })
        .collect())
}

/// Whether `log` predates the inventory for `manifest`: resources were found VALID or applied,
/// and none was ever inventoried. What such a log's manifest applied is what it declares.
pub fn predates(log: &dyn History, manifest: &str) -> Result<bool, HistoryError> {
    let ours = |e: &Entry| e.detail.get("manifest").and_then(Value::as_str) == Some(manifest);
    if log.latest_each("resource/", &EVENTS)?.iter().any(ours) {
        return Ok(false);
    }
    Ok(!log.latest_each("resource/", &[Event::ResourceValid, Event::ResourceApplied])?.is_empty())
}

/// Which thing each resource of `manifest`'s inventory is, as it was when it was held: its
/// type's identity fields ([`crate::engine::identity`]). Resources held before identities
/// were kept have none.
pub fn identities(log: &dyn History, manifest: &str) -> Result<HashMap<String, IdentityFields>, HistoryError> {
    Ok(held(log, manifest)?
        .into_iter()
        .filter_map(|(name, held)| Some((name, serde_json::from_value(held.identity?).ok()?)))
        .collect())
}

/// One resource as the inventory holds it.
#[derive(Debug, Clone, PartialEq)]
struct Holding {
    /// As written (sensitive values masked).
    declaration: Value,
    /// Its identity fields as they were rendered, when a state read said them.
    identity: Option<Value>,
}

/// Resource → its declaration (and identity) as the inventory keeps it.
fn held(log: &dyn History, manifest: &str) -> Result<IndexMap<String, Holding>, HistoryError> {
    let mut held = IndexMap::new();
    for entry in log.latest_each("resource/", &EVENTS)? {
        let ours = entry.detail.get("manifest").and_then(Value::as_str) == Some(manifest);
        // Moved: held under the new name (the entry naming where from), not the old one.
        if !holds(entry.event, &entry.detail) || !ours {
            continue;
        }
        if let (Some(name), Some(declaration)) =
            (entry.target.strip_prefix("resource/"), entry.detail.get("declaration"))
        {
            let identity = entry.detail.get("identity").cloned();
            held.insert(name.to_string(), Holding { declaration: declaration.clone(), identity });
        }
    }
    Ok(held)
}

/// Whether `entry` (of an inventory event) holds its resource in the inventory.
fn holds(event: Event, detail: &Value) -> bool {
    match event {
        Event::ResourceInventoried => true,
        Event::ResourceMoved => detail.get("from").is_some(),
        _ => false,
    }
}

/// Which of `items` (oldest first) the inventory stands on: each resource's newest entry of an
/// inventory event, when it holds the resource. A bounded log keeps these whatever its bound —
/// a controller's log is its Manifest's status, and a resource it forgot would never be
/// deleted. `read` gives an item's target, event and detail.
pub fn pinned_by<T>(items: &[T], read: impl Fn(&T) -> Option<(&str, Event, &Value)>) -> Vec<bool> {
    let mut pinned = vec![false; items.len()];
    let mut seen = std::collections::HashSet::new();
    for (i, item) in items.iter().enumerate().rev() {
        let Some((target, event, detail)) = read(item).filter(|(_, event, _)| EVENTS.contains(event)) else {
            continue;
        };
        if seen.insert(target) {
            pinned[i] = holds(event, detail);
        }
    }
    pinned
}

/// [`pinned_by`] over log entries.
pub fn pinned(entries: &[Entry]) -> Vec<bool> {
    pinned_by(entries, |e| Some((e.target.as_str(), e.event, &e.detail)))
}

/// Drops the oldest `count` of `items` that are not `pinned`.
pub fn drop_oldest<T>(items: &mut Vec<T>, pinned: &[bool], count: usize) {
    let (mut count, mut at) = (count, 0);
    items.retain(|_| {
        let keep = pinned[at] || count == 0;
        count -= usize::from(!keep);
        at += 1;
        keep
    });
}

/// The inventory's entries in `entries`, by run and target: two logs whose marks differ hold
/// different inventories (or reached them differently).
pub fn marks(entries: &[Entry]) -> std::collections::BTreeSet<(&str, &str, &str)> {
    entries
        .iter()
        .filter(|e| EVENTS.contains(&e.event))
        .map(|e| (e.id.as_str(), e.target.as_str(), e.event.as_str()))
        .collect()
}

/// Keeps one pass's inventory: an [`Observer`] beside the recorder. Entries that must be in the
/// log before an action runs are written with its intent; the rest at the end of the pass.
pub struct Keeper {
    log: Arc<dyn History>,
    manifest: String,
    run_id: String,
    revision: String,
    /// A plan records nothing here; a delete pass only takes resources out.
    mode: Mode,
    /// Each declared resource, as the inventory would keep it (sensitive values masked).
    declared: HashMap<String, Value>,
    /// What the inventory holds now.
    held: Mutex<IndexMap<String, Holding>>,
    /// Each resource's identity, as its latest state read in this pass rendered it.
    identities: Mutex<HashMap<String, IdentityFields>>,
    /// Resources being replaced — a state read found another identity than the one held —
    /// whose old one stays held until it is deleted (the pass removes it first); and those of
    /// them found VALID already, held as soon as it is.
    replacing: Mutex<(HashSet<String>, HashSet<String>)>,
    /// The pass is removing what leaves (the old ones of replacements among them).
    removing: std::sync::atomic::AtomicBool,
    pending: Mutex<Vec<Entry>>,
}

impl Keeper {
    pub fn new(
        log: Arc<dyn History>,
        manifest: &ValidatedManifest,
        run_id: &str,
        revision: &str,
        mode: Mode,
    ) -> Result<Keeper, HistoryError> {
        let key = manifest.inventory_key();
        let declared = manifest
            .source
            .spec
            .resources
            .iter()
            .map(|(name, spec)| (name.clone(), manifest.mask.value(&json!(spec))))
            .collect();
        Ok(Keeper {
            held: Mutex::new(held(log.as_ref(), &key)?),
            log,
            manifest: key,
            run_id: run_id.to_string(),
            revision: revision.to_string(),
            mode,
            declared,
            identities: Mutex::default(),
            replacing: Mutex::default(),
            removing: Default::default(),
            pending: Mutex::default(),
        })
    }

    /// The pass removes what leaves the manifest from now (`true`) until `false`: the delete
    /// actions of the old ones of replacements may run then, and only then.
    pub fn removing(&self, removing: bool) {
        self.removing.store(removing, std::sync::atomic::Ordering::SeqCst);
    }

    /// A state read rendered `resource` as `identity`: when it moved from the one held, the
    /// resource is being replaced.
    fn found(&self, resource: &str, identity: &IdentityFields) {
        let was = self.held.lock().expect("inventory lock").get(resource).and_then(|h| h.identity.clone());
        let was: IdentityFields = was.and_then(|w| serde_json::from_value(w).ok()).unwrap_or_default();
        if !crate::engine::identity::moved(&was, identity).is_empty() {
            self.replacing.lock().expect("inventory lock").0.insert(resource.to_string());
        }
        self.identities.lock().expect("inventory lock").insert(resource.to_string(), identity.clone());
    }

    fn is_replacing(&self, resource: &str) -> bool {
        self.replacing.lock().expect("inventory lock").0.contains(resource)
    }

    fn entry(&self, resource: &str, event: Event, detail: Value) -> Entry {
        Entry {
            id: self.run_id.clone(),
            target: target::resource(resource),
            revision: self.revision.clone(),
            event,
            at: now_ms(),
            detail,
        }
    }

    /// Queues `resource` into the inventory, as declared now, unless it is there as such.
    fn hold(&self, resource: &str) -> bool {
        let Some(declaration) = self.declared.get(resource).filter(|_| self.mode == Mode::Apply) else { return false };
        let mut replacing = self.replacing.lock().expect("inventory lock");
        if replacing.0.contains(resource) {
            replacing.1.insert(resource.to_string());
            return false;
        }
        drop(replacing);
        let identity =
            self.identities.lock().expect("inventory lock").get(resource).filter(|i| !i.is_empty()).map(|i| json!(i));
        let mut held = self.held.lock().expect("inventory lock");
        // An identity no read said this pass (an assumed state) is the one held.
        let identity = identity.or_else(|| held.get(resource).and_then(|h| h.identity.clone()));
        let now = Holding { declaration: declaration.clone(), identity };
        if held.get(resource) == Some(&now) {
            return false;
        }
        let mut detail = json!({"manifest": self.manifest, "declaration": declaration});
        if let Some(identity) = &now.identity {
            detail["identity"] = identity.clone();
        }
        held.insert(resource.to_string(), now);
        self.pending.lock().expect("inventory lock").push(self.entry(resource, Event::ResourceInventoried, detail));
        true
    }

    /// Queues `resource` out of the inventory.
    fn release(&self, resource: &str, event: Event, reason: Option<&str>) {
        if self.mode == Mode::Plan || self.held.lock().expect("inventory lock").shift_remove(resource).is_none() {
            return;
        }
        let mut detail = json!({"manifest": self.manifest});
        if let Some(reason) = reason {
            detail["message"] = json!(super::cut_to(reason, 1024));
        }
        self.pending.lock().expect("inventory lock").push(self.entry(resource, event, detail));
        // A replaced one gone: the new one may be held, and is at once if it is VALID already.
        let mut replacing = self.replacing.lock().expect("inventory lock");
        if replacing.0.remove(resource) && replacing.1.remove(resource) {
            drop(replacing);
            self.hold(resource);
        }
        // Written at once, beside the delete's result (deletions are few).
        if let Err(e) = self.flush() {
            tracing::error!(error = %e, "could not write the inventory");
        }
    }

    /// Records the moves `made` (`(old, new)`), durably: before anything is deleted, so that a
    /// moved resource is never taken for a removed one.
    pub fn record_moves(&self, made: &[(String, String)]) -> Result<(), HistoryError> {
        if self.mode == Mode::Plan || made.is_empty() {
            return Ok(());
        }
        for (old, new) in made {
            let Some(declaration) = self.held.lock().expect("inventory lock").shift_remove(old) else { continue };
            let (to, mut from) = (
                json!({"manifest": self.manifest, "to": new}),
                json!({"manifest": self.manifest, "from": old, "declaration": declaration.declaration.clone()}),
            );
            if let Some(identity) = &declaration.identity {
                from["identity"] = identity.clone();
            }
            self.held.lock().expect("inventory lock").insert(new.clone(), declaration);
            let mut pending = self.pending.lock().expect("inventory lock");
            pending.push(self.entry(old, Event::ResourceMoved, to));
            pending.push(self.entry(new, Event::ResourceMoved, from));
        }
        self.flush()
    }

    fn flush(&self) -> Result<(), HistoryError> {
        let batch = std::mem::take(&mut *self.pending.lock().expect("inventory lock"));
        if batch.is_empty() {
            return Ok(());
        }
        self.log.append(&batch).inspect_err(|_| {
            // Kept for the next write, ahead of anything queued since.
            let mut pending = self.pending.lock().expect("inventory lock");
            let newer = std::mem::replace(&mut *pending, batch.clone());
            pending.extend(newer);
        })
    }
}

#[async_trait::async_trait]
impl Observer for Keeper {
    /// Before a declared resource's first action: in the inventory, durably, or the action
    /// does not run (what it creates would otherwise never be deleted).
    async fn on_intent(&self, resource: &str, _action: &str) -> Result<(), IntentError> {
        // A removal's delete actions: what they delete leaves the inventory, nothing joins it.
        if self.removing.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        if self.mode == Mode::Apply && self.is_replacing(resource) {
            return Err(IntentError(format!(
                "it replaces the {resource} the inventory holds, which is not deleted yet (see the removals)"
            )));
        }
        if !self.hold(resource) {
            return Ok(());
        }
        self.flush().map_err(|e| IntentError(format!("the inventory could not be written: {e}")))
    }

    /// What the plan found VALID — read, or assumed from an earlier read (a controller's
    /// steady resources between their checks) — is held.
    fn on_planned(&self, plan: &Plan, _: &[Drift], _: &[Change]) {
        for entry in plan.entries.iter().filter(|e| matches!(e.standing, Standing::Valid { .. })) {
            self.hold(&entry.name);
        }
    }

    fn on_event(&self, event: &RunEvent) {
        match event {
            RunEvent::StateFound { resource, status, verify: false, identity, .. } => {
                // The old one of a replacement, read to be deleted, is not what is held next.
                if self.is_replacing(resource) {
                    return;
                }
                self.found(resource, identity);
                if *status == Status::Valid {
                    self.hold(resource);
                }
            }
            RunEvent::Settled { resource, label: "DELETED" | "ABSENT", .. } => {
                self.release(resource, Event::ResourceDeleted, None)
            }
            RunEvent::Settled { resource, label: "FORGOTTEN", message, .. } => {
                self.release(resource, Event::ResourceForgotten, message.as_deref())
            }
            RunEvent::Ended(_) => {
                if let Err(e) = self.flush() {
                    tracing::error!(error = %e, "could not write the inventory");
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::MemoryLog;

    fn held(manifest: &str, resource: &str, event: Event, detail: Value, at: i64) -> Entry {
        let mut detail = detail;
        detail["manifest"] = json!(manifest);
        Entry { id: "r".into(), target: target::resource(resource), revision: "1".into(), event, at, detail }
    }

    fn declared(type_ref: &str) -> Value {
        json!({"declaration": {"type": type_ref, "config": {}}})
    }

    /// What a manifest's inventory holds: its own entries only, each resource by its newest
    /// entry — moved under its new name, gone once deleted or forgotten.
    #[test]
    fn the_inventory_is_each_manifest_s_newest_word_on_each_resource() {
        let log = MemoryLog::new();
        log.append(&[
            held("a.yaml", "dir", Event::ResourceInventoried, declared("builtin/directory"), 1),
            held("a.yaml", "notes", Event::ResourceInventoried, declared("builtin/file"), 2),
            held("a.yaml", "tmp", Event::ResourceInventoried, declared("builtin/file"), 3),
            held("a.yaml", "kept", Event::ResourceInventoried, declared("./keeper"), 4),
            held("b.yaml", "other", Event::ResourceInventoried, declared("builtin/file"), 5),
            held("a.yaml", "notes", Event::ResourceMoved, json!({"to": "memo"}), 6),
            held(
                "a.yaml",
                "memo",
                Event::ResourceMoved,
                json!({"from": "notes", "declaration": {"type": "builtin/file"}}),
                6,
            ),
            held("a.yaml", "tmp", Event::ResourceDeleted, json!({}), 7),
            held("a.yaml", "kept", Event::ResourceForgotten, json!({"message": "no delete_action"}), 8),
        ])
        .unwrap();
        let a = inventory(&log, "a.yaml").unwrap();
        assert_eq!(a.keys().collect::<Vec<_>>(), ["dir", "memo"]);
        assert_eq!(a["memo"].type_ref.as_deref(), Some("builtin/file"));
        assert_eq!(inventory(&log, "b.yaml").unwrap().keys().collect::<Vec<_>>(), ["other"]);
        // Declared anew by another manifest: that manifest's from then on.
        log.append(&[held("b.yaml", "dir", Event::ResourceInventoried, declared("builtin/directory"), 9)]).unwrap();
        assert_eq!(inventory(&log, "a.yaml").unwrap().keys().collect::<Vec<_>>(), ["memo"]);
    }

    fn found(resource: &str, path: &str, status: Status) -> RunEvent {
        let config = json!({"path": path});
        RunEvent::StateFound {
            resource: resource.into(),
            status,
            verify: false,
            inputs: crate::engine::plan::Inputs {
                type_name: "builtin/directory".into(),
                config: config.clone(),
                digest: String::new(),
                sensitive: Default::default(),
            },
            identity: [("/path".to_string(), json!(path))].into(),
        }
    }

    /// A state read that finds another identity than the one held: the new one's actions wait
    /// (fail closed) until the old one is deleted — the delete itself may run — and then it is
    /// held with its own identity; the old identity is what the inventory kept till then.
    #[tokio::test]
    async fn a_replaced_resource_waits_for_its_old_one_to_be_deleted_and_is_then_held_anew() {
        let log: Arc<dyn History> = Arc::new(MemoryLog::new());
        let spec = crate::engine::manifest::parse_document(
            "resources:\n  dir: {type: builtin/directory, config: {path: /b}}\n",
            false,
        )
        .unwrap();
        let loaded = crate::engine::manifest::LoadedManifest::from_spec("/ws/m.yaml", spec);
        let manifest = crate::engine::validate::validate(&loaded, Default::default()).unwrap();
        let was = json!({"declaration": {"type": "builtin/directory", "config": {"path": "/a"}}, "identity": {"/path": "/a"}});
        log.append(&[held("m.yaml", "dir", Event::ResourceInventoried, was, 1)]).unwrap();
        assert_eq!(identities(log.as_ref(), "m.yaml").unwrap()["dir"]["/path"], json!("/a"));

        let keeper = Keeper::new(log.clone(), &manifest, "r2", "2", Mode::Apply).unwrap();
        keeper.on_event(&found("dir", "/b", Status::Missing));
        let refused = keeper.on_intent("dir", "create").await.unwrap_err();
        assert!(refused.0.contains("replaces the dir the inventory holds"), "{refused}");
        // The removal reads the old one (its identity is not taken for the new one's) and deletes it.
        keeper.removing(true);
        keeper.on_event(&found("dir", "/a", Status::Valid));
        keeper.on_intent("dir", "delete").await.unwrap();
        keeper.on_event(&RunEvent::Settled {
            resource: "dir".into(),
            label: "DELETED",
            elapsed: Default::default(),
            message: None,
        });
        keeper.removing(false);
        assert!(inventory(log.as_ref(), "m.yaml").unwrap().is_empty(), "the old one left the inventory");
        keeper.on_intent("dir", "create").await.unwrap();
        assert_eq!(identities(log.as_ref(), "m.yaml").unwrap()["dir"]["/path"], json!("/b"));
        assert_eq!(inventory(log.as_ref(), "m.yaml").unwrap()["dir"].config["path"], json!("/b"));
    }
}
