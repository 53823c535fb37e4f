//! Pure: whether a watch event of a managed object is a change that matters, and whose object
//! it is.

use kube::api::ObjectMeta;

pub use crate::builtins::kubernetes::written::Seen;

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

/// Whether an object's event is a change: `before` is what was seen of it last (none: first
/// seen), `meta` its metadata now. A change seen first in a re-listing (after the watch was
/// down) counts as any other; an object first seen in a listing is no change. Whose change it
/// is, its `resourceVersion` tells ([`crate::builtins::kubernetes::written`]).
pub fn changed(before: Option<&Seen>, meta: &ObjectMeta, listing: bool) -> bool {
    match before {
        None => !listing,
        Some(before) => before.changed_to(&Seen::of(meta)),
    }
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn entry(manager: &str, operation: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    fn meta(generation: Option<i64>, version: &str, managers: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            generation,
            resource_version: Some(version.into()),
            managed_fields: Some(managers),
            ..Default::default()
        }
    }

    fn applied() -> ManagedFieldsEntry {
        entry("deployster", "Apply", json!({"f:data": {"f:level": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}))
    }

    #[test]
    fn a_field_deployster_owns_taken_or_a_new_generation_is_a_change() {
        let before = Seen::of(&meta(None, "10", vec![applied()]));
        // `kubectl patch` of data.level: the field moves to kubectl-patch's entry.
        let taken = vec![
            entry("deployster", "Apply", json!({"f:metadata": {"f:labels": {"f:app": {}}}})),
            entry("kubectl-patch", "Update", json!({"f:data": {"f:level": {}}})),
        ];
        assert!(changed(Some(&before), &meta(None, "11", taken), false));
        assert!(changed(Some(&before), &meta(None, "11", vec![]), false), "its entry gone (managed fields reset)");
        let deployment = Seen::of(&meta(Some(1), "10", vec![applied()]));
        assert!(changed(Some(&deployment), &meta(Some(2), "11", vec![applied()]), false), "scaled on 1.20");
    }

    #[test]
    fn writes_of_what_deployster_does_not_declare_are_no_change() {
        let before = Seen::of(&meta(Some(1), "10", vec![applied()]));
        // A Deployment's status, and its revision annotation, written by its controller.
        let revision = entry("kube-controller-manager", "Update", json!({"f:metadata": {"f:annotations": {}}}));
        assert!(!changed(Some(&before), &meta(Some(1), "11", vec![applied(), revision]), false));
        // The token the controller gives a ServiceAccount on 1.20.
        let account = Seen::of(&meta(None, "10", vec![applied()]));
        let token = entry("kube-controller-manager", "Update", json!({"f:secrets": {}}));
        assert!(!changed(Some(&account), &meta(None, "12", vec![applied(), token]), false));
        // Without Deployster's entry on either side, any write is a change.
        let bare = Seen::of(&meta(None, "10", vec![]));
        assert!(!changed(Some(&bare), &meta(None, "10", vec![]), false));
        assert!(changed(Some(&bare), &meta(None, "11", vec![]), false));
    }

    #[test]
    fn a_listing_tells_only_what_changed_while_the_watch_was_down() {
        assert!(!changed(None, &meta(None, "10", vec![applied()]), true), "first seen");
        let before = Seen::of(&meta(None, "10", vec![applied()]));
        assert!(!changed(Some(&before), &meta(None, "10", vec![applied()]), true));
        assert!(changed(Some(&before), &meta(None, "14", vec![]), true));
        // Appearing while watching (not listed): created by someone, or by Deployster.
        assert!(changed(None, &meta(None, "15", vec![applied()]), false));
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
