//! Deployster: a reconciliation engine for infrastructure.
//!
//! Users describe resources in a manifest; each resource *type* is a program that speaks a small
//! JSON protocol (`init` → `state` → actions → `state`). The [`engine`] validates the manifest,
//! orders resources by dependency, renders expressions over dependencies' state and runs what
//! is needed. [`history`] is the append-only deployment log of what every run did. [`builtins`]
//! are the resource types the binary carries itself; [`cli`] is the command line.
#![forbid(unsafe_code)]

pub mod builtins;
pub mod cli;
#[cfg(feature = "kube")]
pub mod client;
#[cfg(feature = "kube")]
pub mod controller;
#[cfg(feature = "kube")]
pub mod crd;
pub mod engine;
pub mod executors;
pub mod history;
pub mod pass;
pub mod pipeline;
#[cfg(feature = "kube")]
pub mod pod;
pub mod pod_helper;
pub mod stop;
