//! Tests that run resource types in containers on this machine's Docker engine.
//! One binary per need: each module was a test binary of its own before, each linking the
//! kube and Docker stacks. Run one module with `cargo test --test docker_engine <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod docker;
mod release;
