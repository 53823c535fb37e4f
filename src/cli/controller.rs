//! `deployster controller`: the controller's run configuration from the command line.

use super::{CliError, ControllerArgs, ExecutorArg, ExitKind};
use crate::engine::mask::FingerprintKey;
use crate::executors::{Acting, ExecutorPlan, ImagePlan};

#[cfg(feature = "kube")]
pub(super) async fn controller(args: ControllerArgs) -> Result<ExitKind, CliError> {
    use crate::controller::{LeaderElection, OwnPod, RunConfig, Settings};
    let images = match args.executor {
        #[cfg(feature = "docker")]
        ExecutorArg::Docker => super::executors::docker(&args.docker),
        #[cfg(not(feature = "docker"))]
        ExecutorArg::Docker => ImagePlan::None,
        ExecutorArg::Pod => {
            let mut settings = args.making.settings();
            // Runners unless told otherwise (`--runner-idle 0`).
            if args.making.runner_idle.is_none() {
                settings.runner_idle = Some(crate::pod::runner::DEFAULT_IDLE);
            }
            // In a cluster the file built-ins act in Pods too, on their `files` plug; the
            // controller has just swept the namespace when a pass starts.
            ImagePlan::Pods { settings: Box::new(settings), builtins_too: true, check_access: false }
        }
    };
    // Each pass acts as its Manifest's ServiceAccount, never as the controller.
    let plan = ExecutorPlan {
        builtins: super::executors::builtins()?,
        local_programs: args.allow_local_programs,
        kubernetes: Acting::ServiceAccounts,
        images,
        reads_per_second: Some(args.budget.per_second()),
    };
    let defaults = Settings::default();
    let fingerprint_key = match &args.fingerprint_key_file {
        None => None,
        Some(path) => {
            let read = std::fs::read(path).map_err(|e| e.to_string());
            let key = read.and_then(|secret| FingerprintKey::from_secret(&secret));
            Some(key.map_err(|e| CliError::Refused(format!("--fingerprint-key-file {}: {e}", path.display())))?)
        }
    };
    let settings = Settings {
        fingerprint_key,
        allow_local_programs: args.allow_local_programs,
        history_limit: args.history_limit,
        pipeline_step_timeout: args.pipeline_step_timeout,
        plug_root: args.plug_dir.unwrap_or(defaults.plug_root),
        parallelism: usize::from(args.parallelism),
        timeouts: args.timeouts.timeouts(),
        plugs: defaults.plugs,
    };
    let leader_election = args.leader_elect.then_some(LeaderElection {
        lease_name: args.lease_name,
        lease_namespace: args.lease_namespace,
        lease_duration: args.lease_duration,
        shards: args.shards,
        pod: args.pod_name.zip(args.pod_uid).map(|(name, uid)| OwnPod { name, uid }),
    });
    let config = RunConfig {
        namespaces: args.namespaces,
        concurrency: args.concurrency,
        shutdown_grace: args.shutdown_grace,
        metrics_addr: args.metrics_addr,
        leader_election,
        settings,
    };
    crate::controller::run(config, plan).await?;
    Ok(ExitKind::Ok)
}
