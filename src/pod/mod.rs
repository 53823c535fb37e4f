//! Resource types run as Kubernetes Pods (issue 23).
//!
//! [`executor`] runs each invocation of an image type as a short-lived Pod: [`registry`] learns
//! what the image runs, [`spec`] makes the Pod and the Secret that carries the request,
//! [`entry`] is the helper that runs in front of the type's own program inside the Pod, and
//! [`frames`] is how the program's stdout comes back through the Pod's log, verified.
//! [`runner`] runs them in warm runners instead (issue 37): a long-lived Pod per type and
//! identity, each invocation an exec of the same helper's [`serve`] mode into it.

mod api;
pub mod executor;
mod log;
mod progress;
pub mod registry;
pub mod runner;
pub mod settings;
pub mod spec;
