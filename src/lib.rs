//! Deployster: a reconciliation engine for infrastructure.
//!
//! Users describe resources in a manifest; each resource *type* is a program that speaks a small
//! JSON protocol (`init` → `state` → actions → `state`). The house, one module a line, the
//! model first and the front ends after:
//!
//! - [`engine`]: the model — manifests validated, the graph, expressions, plans, the protocol,
//!   runs and the executor trait; it knows nothing of Kubernetes or the command line.
//! - [`history`]: the append-only deployment log of what every run did, its queries, the recorder.
//! - [`pass`]: one recorded pass (recover, plan, decide, apply or delete) for every front end.
//! - [`pipeline`]: revisions through stages, groups and steps, from the pipeline's log alone.
//! - [`builtins`]: the resource types the binary carries itself (`builtin/…`).
//! - [`executors`]: a pass's executor stack, assembled once from a plan both front ends fill.
//! - [`stop`]: SIGINT, SIGTERM and SIGHUP, handled alike by every command.
//! - [`client`]: Kubernetes clients — which cluster, as whom, over which TLS.
//! - [`crd`]: the custom resources (Manifest, Pipeline, ManifestPreview) as Rust types.
//! - [`watches`]: watches of the objects a manifest applied, shared by both front ends.
//! - [`pod`]: resource types run as Pods (the client side: Pods, runners, registries).
//! - [`pod_helper`]: what runs inside those Pods, in front of the type's program.
//! - [`controller`]: the Kubernetes controller — each kind reconciled in the same shape.
//! - [`cli`]: the command line.
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
#[cfg(feature = "kube")]
pub mod watches;
