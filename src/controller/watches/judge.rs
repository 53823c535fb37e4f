//! Pure: what a watch event of a managed object says — nothing new, Deployster's own write, or
//! a change someone else made that a pass should look at.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use kube::api::ObjectMeta;

use crate::builtins::kubernetes::FIELD_MANAGER;

/// What is remembered of an object between its events: enough to tell a change, little memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Bumped by the server on a change of the spec (not of the status) for kinds that keep
    /// one; `None` for kinds that do not (ConfigMaps, Secrets, ServiceAccounts).
    generation: Option<i64>,
    /// A digest of the labels and annotations.
    marks: u64,
    resource_version: String,
}

impl Seen {
    pub fn of(meta: &ObjectMeta) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let empty = BTreeMap::new();
        meta.labels.as_ref().unwrap_or(&empty).hash(&mut hasher);
        0u8.hash(&mut hasher);
        meta.annotations.as_ref().unwrap_or(&empty).hash(&mut hasher);
        Seen {
            generation: meta.generation.filter(|g| *g > 0),
            marks: hasher.finish(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }

    /// Whether `now` differs from this in what a user declares: the spec (its generation) and
    /// the labels and annotations for kinds with a generation — their status writes (a
    /// Deployment's controller, every few seconds) are no change — and any write for others.
    fn changed_to(&self, now: &Seen) -> bool {
        match (self.generation, now.generation) {
            (Some(before), Some(after)) => before != after || self.marks != now.marks,
            _ => self.resource_version != now.resource_version,
        }
    }
}

/// What one event of an object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// First seen (a listing), or no change that matters.
    Unchanged,
    /// Changed by Deployster's own apply: starts nothing.
    Ours,
    /// Changed by someone else, or deleted: its Manifest's pass reads it now.
    Changed,
}

/// Judges an object's event: `before` is what was seen of it last (none: first seen), `meta`
/// its metadata now. A change whose newest field-manager entry is Deployster's apply, alone at
/// that second, is its own write. A change seen first in a re-listing (after the watch was
/// down) counts as any other; an object first seen in a listing is no change.
pub fn judge(before: Option<&Seen>, meta: &ObjectMeta, listing: bool) -> Verdict {
    let now = Seen::of(meta);
    match before {
        None if listing => Verdict::Unchanged,
        Some(before) if !before.changed_to(&now) => Verdict::Unchanged,
        _ if last_written_by_us(meta) => Verdict::Ours,
        _ => Verdict::Changed,
    }
}

/// Whether the newest entry of the managed fields is Deployster's apply and no other entry
/// is as new (their times are to the second: a tie may hide another writer).
pub fn last_written_by_us(meta: &ObjectMeta) -> bool {
    let entries = meta.managed_fields.as_deref().unwrap_or_default();
    let Some(newest) = entries.iter().filter_map(|e| e.time.as_ref()).map(|t| t.0).max() else { return false };
    let at_newest: Vec<_> = entries.iter().filter(|e| e.time.as_ref().map(|t| t.0) == Some(newest)).collect();
    matches!(at_newest.as_slice(), [only] if only.manager.as_deref() == Some(FIELD_MANAGER)
        && only.operation.as_deref() == Some("Apply"))
}

/// Whose an object is and which resource of it, as its owner annotation says
/// (`<owner>/<resource>`: a Manifest's `namespace/name/resource`, a CLI manifest's
/// `file.yaml/resource`).
pub fn owner(meta: &ObjectMeta) -> Option<(String, String)> {
    let value = meta.annotations.as_ref()?.get(crate::builtins::kubernetes::OWNER_ANNOTATION)?;
    let (owner, resource) = value.rsplit_once('/')?;
    (!owner.is_empty() && !resource.is_empty()).then(|| (owner.to_string(), resource.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use k8s_openapi::jiff::Timestamp;

    fn entry(manager: &str, operation: &str, second: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            time: Some(Time(Timestamp::from_second(1_700_000_000 + second).unwrap())),
            ..Default::default()
        }
    }

    fn meta(generation: Option<i64>, version: &str, annotation: &str, managers: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            generation,
            resource_version: Some(version.into()),
            annotations: Some([("a".to_string(), annotation.to_string())].into()),
            managed_fields: Some(managers),
            ..Default::default()
        }
    }

    #[test]
    fn a_change_by_someone_else_wakes_and_deployster_s_own_apply_does_not() {
        let before = Seen::of(&meta(Some(1), "10", "x", vec![entry("deployster", "Apply", 0)]));
        let scaled =
            meta(Some(2), "11", "x", vec![entry("deployster", "Apply", 0), entry("kubectl-scale", "Update", 5)]);
        assert_eq!(judge(Some(&before), &scaled, false), Verdict::Changed);
        let corrected =
            meta(Some(3), "12", "x", vec![entry("deployster", "Apply", 6), entry("kubectl-scale", "Update", 5)]);
        assert_eq!(judge(Some(&Seen::of(&scaled)), &corrected, false), Verdict::Ours);
        // Written in the same second as another manager: not known to be ours alone.
        let tied = meta(Some(3), "12", "x", vec![entry("deployster", "Apply", 5), entry("kubectl-scale", "Update", 5)]);
        assert_eq!(judge(Some(&Seen::of(&scaled)), &tied, false), Verdict::Changed);
        // An update by Deployster's manager name but not an apply is not its.
        let updated = meta(Some(4), "13", "x", vec![entry("deployster", "Update", 9)]);
        assert_eq!(judge(Some(&before), &updated, false), Verdict::Changed);
    }

    #[test]
    fn status_writes_of_kinds_with_a_generation_are_no_change_and_any_write_of_others_is() {
        let managers = || vec![entry("deployster", "Apply", 0), entry("kube-controller-manager", "Update", 7)];
        let before = Seen::of(&meta(Some(1), "10", "x", managers()));
        assert_eq!(judge(Some(&before), &meta(Some(1), "11", "x", managers()), false), Verdict::Unchanged);
        assert_eq!(judge(Some(&before), &meta(Some(1), "12", "relabelled", managers()), false), Verdict::Changed);
        let config_map = Seen::of(&meta(None, "10", "x", managers()));
        assert_eq!(judge(Some(&config_map), &meta(None, "10", "x", managers()), false), Verdict::Unchanged);
        assert_eq!(judge(Some(&config_map), &meta(None, "11", "x", managers()), false), Verdict::Changed);
    }

    #[test]
    fn a_listing_tells_only_what_changed_while_the_watch_was_down() {
        let managers = || vec![entry("kubectl-edit", "Update", 3)];
        assert_eq!(judge(None, &meta(None, "10", "x", managers()), true), Verdict::Unchanged, "first seen");
        let before = Seen::of(&meta(None, "10", "x", managers()));
        assert_eq!(judge(Some(&before), &meta(None, "10", "x", managers()), true), Verdict::Unchanged);
        assert_eq!(judge(Some(&before), &meta(None, "14", "y", managers()), true), Verdict::Changed);
        // Appearing while watching (not listed): created by someone, or by Deployster.
        assert_eq!(judge(None, &meta(None, "15", "x", managers()), false), Verdict::Changed);
        assert_eq!(judge(None, &meta(None, "15", "x", vec![entry("deployster", "Apply", 9)]), false), Verdict::Ours);
    }

    #[test]
    fn the_owner_annotation_names_the_owner_and_the_resource() {
        let with = |value: &str| ObjectMeta {
            annotations: Some([(crate::builtins::kubernetes::OWNER_ANNOTATION.to_string(), value.to_string())].into()),
            ..Default::default()
        };
        assert_eq!(owner(&with("team/app/web")), Some(("team/app".into(), "web".into())));
        assert_eq!(owner(&with("app.yaml/web")), Some(("app.yaml".into(), "web".into())), "a CLI manifest's");
        assert_eq!(owner(&with("web")), None);
        assert_eq!(owner(&with("team/app/")), None);
        assert_eq!(owner(&ObjectMeta::default()), None);
    }
}
