//! Resource types run as Kubernetes Pods (issue 23) — under construction.
//!
//! What is here so far: what runs *inside* a type's Pod and how its output comes back —
//! [`entry`], the helper in front of the type's own program, and [`frames`], the format the
//! helper writes and the executor reads back and verifies — and [`spec`], the Pod and Secret an
//! invocation runs as. The executor that creates them (and `--executor pod`) builds on these.

pub mod entry;
pub mod frames;
pub mod spec;
