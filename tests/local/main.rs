//! Tests that need only the toolchain (and, for a few `#[ignore]`d ones, a tool `.ci/run`
//! installs): the CLI run as a black box, the controller on an in-memory API, the layout.
//! One binary per need: each module was a test binary of its own before, each linking the
//! kube and Docker stacks. Run one module with `cargo test --test local <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod book;
mod builtins;
mod check_type;
mod cli_apply;
mod cli_confirm;
mod cli_env;
mod cli_errors;
mod cli_graph;
mod cli_history;
mod cli_messages;
mod cli_newcomer;
mod cli_outputs;
mod cli_pipeline;
mod cli_progress;
mod cli_prune;
mod cli_replace;
mod cli_saved_plan;
mod cli_sensitive;
mod cli_signals;
mod cli_templates;
mod controller;
mod controller_cli;
mod engine_layout;
mod gitops;
mod package;
mod pod_entry;
mod pod_serve;
mod protocol_schemas;
mod suite_layout;
