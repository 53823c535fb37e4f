//! Tests against a real Kubernetes API server (`../shared/apiserver/up.sh`): the controller,
//! Pipelines, shards, `builtin/kubernetes`, the chart and the controller image.
//! One binary per need: each module was a test binary of its own before, each linking the
//! kube and Docker stacks. Run one module with `cargo test --test apiserver <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod book;
mod e2e_controller;
mod e2e_pipeline;
mod e2e_shards;
mod helm;
mod image;
mod kubernetes;
mod plans;
mod previews;
mod removals;
mod watches;
