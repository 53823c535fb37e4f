//! Who may own the fields a config sets: when an apply takes them from another field manager.
//!
//! The fields a config sets are Deployster's. A person who changes one by hand (`kubectl
//! edit`, `kubectl patch`, `kubectl scale`, a client-side `kubectl apply`) becomes its
//! manager, and a plain server-side apply would then be refused with a conflict: correcting
//! that drift takes the field back, as Argo CD and Flux do with server-side apply. Another
//! *controller* that owns a field (an HPA owning `replicas`) is different: taking the field
//! from it starts a tug of war, so that conflict is the user's to resolve, by not setting the
//! field or by `force: true`. `force: false` never takes a field, for objects shared on
//! purpose.

use kube::core::Status;

/// When an apply takes fields from other managers (`config.force`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Force {
    /// `force: false`: never; any conflict fails.
    Never,
    /// Not set: from changes made by hand ([`by_hand`]), not from other controllers.
    FromChangesByHand,
    /// `force: true`: from any manager.
    Always,
}

impl Force {
    pub fn from_config(force: Option<bool>) -> Self {
        match force {
            Some(false) => Force::Never,
            None => Force::FromChangesByHand,
            Some(true) => Force::Always,
        }
    }

    /// What to do about a conflict this setting did not take.
    pub fn refusal(self) -> &'static str {
        match self {
            Force::Never => "`force: false` takes no field another manager owns: set `force` otherwise to take them",
            _ => {
                "another controller owns those fields: stop setting them in the config, or set `force: true` to take them"
            }
        }
    }

    /// The conflicts a refused apply (`status`) met, when this setting takes their fields.
    pub fn taken(self, status: &Status) -> Option<Vec<Conflict>> {
        let found = conflicts(status);
        self.takes(&found).then_some(found)
    }

    /// Whether an apply that met these conflicts may take the fields.
    pub fn takes(self, conflicts: &[Conflict]) -> bool {
        match self {
            Force::Never => false,
            Force::Always => true,
            Force::FromChangesByHand => !conflicts.is_empty() && conflicts.iter().all(|c| by_hand(&c.manager)),
        }
    }
}

/// Whether a field manager is a person's tool rather than a controller: kubectl's verbs
/// (`kubectl-edit`, `kubectl-patch`, `kubectl-client-side-apply`, … and plain `kubectl`), and
/// `before-first-apply`, the manager the server gives fields an object had before its first
/// server-side apply.
pub fn by_hand(manager: &str) -> bool {
    manager == "kubectl" || manager.starts_with("kubectl-") || manager == "before-first-apply"
}

/// Who else owns the field at JSON `pointer` of `live` (`/spec/replicas`), by its managed
/// fields: `.spec.replicas from hpa-controller` for each manager but Deployster's.
pub fn owners(live: &serde_json::Value, pointer: &str) -> Vec<String> {
    let segments: Vec<String> = pointer.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
    let keys: Vec<String> = segments.iter().map(|s| format!("f:{s}")).collect();
    let shown = format!(".{}", segments.join("."));
    let entries = live.pointer("/metadata/managedFields").and_then(serde_json::Value::as_array);
    entries
        .into_iter()
        .flatten()
        .filter(|entry| entry["manager"].as_str().is_some_and(|m| m != super::FIELD_MANAGER))
        .filter(|entry| keys.iter().try_fold(&entry["fieldsV1"], |at, key| at.get(key)).is_some())
        .filter_map(|entry| Some(format!("{shown} from {}", entry["manager"].as_str()?)))
        .collect()
}

/// A field another manager owns, as a 409 of server-side apply names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// `.spec.replicas`.
    pub field: String,
    pub manager: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} from {}", self.field, self.manager)
    }
}

/// The conflicts a 409 of server-side apply lists: each cause of reason
/// `FieldManagerConflict` says `conflict with "<manager>"` (with ` using <version>` on some
/// servers) about its field. Empty for any other answer.
pub fn conflicts(status: &Status) -> Vec<Conflict> {
    if status.code != 409 {
        return Vec::new();
    }
    status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .filter(|c| c.reason == "FieldManagerConflict")
        .filter_map(|c| {
            let manager = c.message.split('"').nth(1)?;
            Some(Conflict { field: c.field.clone(), manager: manager.to_string() })
        })
        .collect()
}

/// `.data.mode from kubectl-patch, .spec.replicas from kubectl-scale`.
pub fn said(conflicts: &[Conflict]) -> String {
    conflicts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn conflict_status(causes: &[(&str, &str)]) -> Status {
        let causes = causes
            .iter()
            .map(|(field, message)| StatusCause {
                reason: "FieldManagerConflict".into(),
                message: message.to_string(),
                field: field.to_string(),
            })
            .collect();
        let mut status = Status::failure("Apply failed", "Conflict").with_code(409);
        status.details = Some(StatusDetails {
            name: "cm".into(),
            group: String::new(),
            kind: "configmaps".into(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        });
        status
    }

    #[test]
    fn the_other_owners_of_a_field_are_read_from_the_managed_fields() {
        let live = serde_json::json!({"metadata": {"managedFields": [
            {"manager": "deployster", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "hpa-controller", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl-label", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}},
        ]}});
        assert_eq!(owners(&live, "/spec/replicas"), [".spec.replicas from hpa-controller"]);
        assert_eq!(owners(&live, "/metadata/labels/a"), [".metadata.labels.a from kubectl-label"]);
        assert!(owners(&live, "/spec/paused").is_empty());
        let slashed = serde_json::json!({"metadata": {"managedFields": [
            {"manager": "op", "fieldsV1": {"f:metadata": {"f:annotations": {"f:example.com/a": {}}}}}]}});
        assert_eq!(
            owners(&slashed, "/metadata/annotations/example.com~1a"),
            [".metadata.annotations.example.com/a from op"]
        );
    }

    #[test]
    fn a_409_names_each_field_and_its_manager() {
        let status = conflict_status(&[
            (".data.mode", r#"conflict with "kubectl-patch" using v1"#),
            (".spec.replicas", r#"conflict with "hpa-controller""#),
        ]);
        let found = conflicts(&status);
        assert_eq!(
            found,
            [
                Conflict { field: ".data.mode".into(), manager: "kubectl-patch".into() },
                Conflict { field: ".spec.replicas".into(), manager: "hpa-controller".into() },
            ]
        );
        assert_eq!(said(&found), ".data.mode from kubectl-patch, .spec.replicas from hpa-controller");
        assert!(conflicts(&Status::failure("gone", "NotFound").with_code(404)).is_empty());
    }

    #[test]
    fn changes_by_hand_are_taken_back_unless_force_is_false_and_controllers_keep_theirs() {
        let by_kubectl = conflicts(&conflict_status(&[
            (".data.a", r#"conflict with "kubectl-edit" using v1"#),
            (".data.b", r#"conflict with "kubectl-client-side-apply" using v1"#),
            (".data.c", r#"conflict with "before-first-apply" using v1"#),
        ]));
        let with_a_controller = conflicts(&conflict_status(&[
            (".data.a", r#"conflict with "kubectl-edit" using v1"#),
            (".spec.replicas", r#"conflict with "kube-controller-manager" using autoscaling/v2"#),
        ]));
        assert!(Force::from_config(None).takes(&by_kubectl));
        assert!(!Force::from_config(None).takes(&with_a_controller));
        assert!(!Force::from_config(None).takes(&[]), "no conflicts named: nothing to take");
        assert!(!Force::from_config(Some(false)).takes(&by_kubectl));
        assert!(Force::from_config(Some(true)).takes(&with_a_controller));
        assert!(!by_hand("kubectlish-operator"), "a prefix of a word is not kubectl");
    }
}
