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

    fn meta(generation: Option<i64>, version: &str, annotation: &str) -> ObjectMeta {
        ObjectMeta {
            generation,
            resource_version: Some(version.into()),
            annotations: Some([("a".to_string(), annotation.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_new_generation_or_new_marks_are_a_change() {
        let before = Seen::of(&meta(Some(1), "10", "x"));
        assert!(changed(Some(&before), &meta(Some(2), "11", "x"), false), "scaled");
        assert!(changed(Some(&before), &meta(Some(1), "12", "relabelled"), false));
    }

    #[test]
    fn status_writes_of_kinds_with_a_generation_are_no_change_and_any_write_of_others_is() {
        let before = Seen::of(&meta(Some(1), "10", "x"));
        assert!(!changed(Some(&before), &meta(Some(1), "11", "x"), false));
        let config_map = Seen::of(&meta(None, "10", "x"));
        assert!(!changed(Some(&config_map), &meta(None, "10", "x"), false));
        assert!(changed(Some(&config_map), &meta(None, "11", "x"), false));
    }

    #[test]
    fn a_listing_tells_only_what_changed_while_the_watch_was_down() {
        assert!(!changed(None, &meta(None, "10", "x"), true), "first seen");
        let before = Seen::of(&meta(None, "10", "x"));
        assert!(!changed(Some(&before), &meta(None, "10", "x"), true));
        assert!(changed(Some(&before), &meta(None, "14", "y"), true));
        // Appearing while watching (not listed): created by someone, or by Deployster.
        assert!(changed(None, &meta(None, "15", "x"), false));
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
