//! Resource types run as Kubernetes Pods (issue 23).
//!
//! [`executor`] runs each invocation of an image type as a short-lived Pod: [`registry`] learns
//! what the image runs, [`spec`] makes the Pod and the Secret that carries the request,
//! [`entry`] is the helper that runs in front of the type's own program inside the Pod, and
//! [`frames`] is how the program's stdout comes back through the Pod's log, verified.

pub mod entry;
pub mod executor;
pub mod frames;
pub mod registry;
pub mod spec;
