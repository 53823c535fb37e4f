//! Every word the controller writes as a condition's type or reason, an event's reason or its
//! action, in one place: users match on them (`kubectl wait`, alerts, Argo CD's health check),
//! so none is spelt twice, and the metrics' labels are derived from them, never from a string
//! compared again. Reasons forwarded from the engine's errors (`error.reason()`) are theirs.

/// Defines an enum whose values are shown as their names.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$doc:meta])* $word:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$doc])* $word),*
        }

        impl $name {
            /// Every value, in order.
            pub const ALL: &[$name] = &[$($name::$word),*];

            /// As written on the object.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$word => stringify!($word)),*
                }
            }

            /// The value written as `text`, if it is one.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|w| w.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<$name> for &'static str {
            fn from(word: $name) -> Self {
                word.as_str()
            }
        }
    };
}

words! {
    /// The conditions of a Manifest's and a Pipeline's status.
    ConditionType {
        Ready,
        Reconciling,
        Stalled,
    }
}

words! {
    /// What an event says the controller was doing.
    EventAction {
        Fetch,
        Validate,
        Reconcile,
        Delete,
        Drive,
        Watch,
    }
}

words! {
    /// The controller's own reasons, of conditions and events.
    Reason {
        // A Manifest's conditions.
        Progressing,
        RetryingAfterFailure,
        Succeeded,
        Suspended,
        AwaitingApproval,
        Thrashing,
        DriftCorrected,
        DriftDetected,
        /// A resource's type warned the user (its init or state reply's `warnings`).
        TypeWarning,
        Applied,
        UpToDate,
        NotApplied,
        PlanFailed,
        Failed,
        DeletionGuarded,
        RemovalFailed,
        // A Manifest's events.
        Interrupted,
        OutputsWritten,
        OutputsNotWritten,
        OutputsFailed,
        ApprovalIgnored,
        PodsStopped,
        RunnersUnavailable,
        WatchRefused,
        DeleteFailed,
        ResourcesDeleted,
        ResourceDeleted,
        ResourceForgotten,
        ResourceMoved,
        MalformedObject,
        // A Pipeline's conditions and events.
        Through,
        StepFailed,
        Superseded,
        NotRegistered,
        ManifestMissing,
        InvalidPipeline,
        RevisionThrough,
        RevisionRegistered,
        ArtifactRegistered,
        RegisterRefused,
        Approved,
        ApprovalRefused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_word_is_written_as_its_name_and_read_back() {
        assert_eq!(Reason::AwaitingApproval.as_str(), "AwaitingApproval");
        assert_eq!(ConditionType::Ready.to_string(), "Ready");
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(*reason));
        }
        assert_eq!(Reason::parse("KubernetesApi"), None, "a forwarded reason is not the controller's own");
    }
}

words! {
    /// Where a ManifestPreview is (`status.phase`).
    PreviewPhase {
        Queued,
        Planning,
        Planned,
        Failed,
    }
}

words! {
    /// Why a ManifestPreview failed or waits (`status.reason`).
    PreviewReason {
        /// The proposal is over the size a preview may have.
        ProposalTooLarge,
        /// The proposal is not a valid Manifest spec (its errors, as for a Manifest).
        ProposalInvalid,
        /// The ServiceAccount the proposal names does not exist.
        ServiceAccountMissing,
        /// Previews planned at once in the namespace are at their bound.
        TooManyPreviews,
        /// Its types could not be inited, or the pass could not run.
        PlanFailed,
        /// Being planned now.
        Planning,
        /// Planned; the plan is in `status.plan`.
        PlanReady,
        /// The object does not match the ManifestPreview schema (written with `--validate=false`,
        /// or under an older CRD): nothing is planned until it changes.
        MalformedObject,
    }
}
