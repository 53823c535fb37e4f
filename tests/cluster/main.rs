//! Tests on a cluster whose Pods really run (`../shared/cluster/up.sh`): resource types and
//! runners in Pods, the controller with them, the chart installed by Helm.
//! One binary per need: each module was a test binary of its own before, each linking the
//! kube and Docker stacks. Run one module with `cargo test --test cluster <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod controller_pods;
mod helm_cluster;
mod pods;
mod runners;
