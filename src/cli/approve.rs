//! `deployster approve NAME -n NS`: shows a Manifest's plan awaiting approval and approves it
//! (the `deployster.io/approve` annotation).

use kube::api::{Api, Patch, PatchParams};

use super::{ApproveArgs, CliError, ExitKind};
use crate::crd::{APPROVE_ANNOTATION, Manifest};

/// A client of the kubeconfig's cluster. One that cannot be reached fails the command (1), as
/// an unreachable Docker daemon does.
pub(super) async fn cluster_client() -> Result<kube::Client, CliError> {
    let unreachable = |e: crate::client::ClientError| CliError::Unreachable(format!("cannot reach the cluster: {e}"));
    let config = crate::client::Kubeconfig::default().load().await.map_err(unreachable)?;
    crate::client::connect(config).map_err(unreachable)
}

/// An API error as the command's: the server's refusal (403, 422…) is a refusal (2), anything
/// else (no answer) a failure to reach it (1).
pub(super) fn api_error(what: &str, error: kube::Error) -> CliError {
    match error {
        kube::Error::Api(status) => CliError::Refused(format!("{what}: {}", status.message)),
        other => CliError::Unreachable(format!("{what}: cannot reach the cluster: {other}")),
    }
}

/// The Manifest `name` in `namespace` (default: the kubeconfig's), its API, and `ns/name`.
pub(super) async fn fetch(name: &str, namespace: Option<&str>) -> Result<(Manifest, Api<Manifest>, String), CliError> {
    let client = cluster_client().await?;
    let namespace = namespace.map_or_else(|| client.default_namespace().to_string(), str::to_string);
    let api: Api<Manifest> = Api::namespaced(client, &namespace);
    let qualified = format!("{namespace}/{name}");
    let obj = api.get_opt(name).await.map_err(|e| api_error(&format!("manifest {qualified}"), e))?;
    let obj = obj.ok_or_else(|| CliError::Refused(format!("manifest {qualified} does not exist")))?;
    Ok((obj, api, qualified))
}

pub(super) async fn approve(args: ApproveArgs) -> Result<ExitKind, CliError> {
    let (obj, api, name) = fetch(&args.name, args.namespace.as_deref()).await?;
    let Some(pending) = obj.status.and_then(|s| s.pending_plan) else {
        return Err(CliError::Refused(format!("manifest {name} has no plan awaiting approval")));
    };
    // The id reviewed: the pending plan's own, or a preview's (`deployster preview`), which is
    // the digest of what the plan knew — the same states, configs, actions and revision.
    if let Some(wanted) = &args.plan
        && *wanted != pending.id
        && *wanted != pending.digest
    {
        return Err(CliError::Refused(format!(
            "manifest {name}: plan {wanted} is not the one awaiting approval (id {}, digest {}): what the \
             controller would apply now differs from what was reviewed; nothing was approved",
            pending.id, pending.digest
        )));
    }
    outln!("Plan {} of {name} (revision {}, planned {}):", pending.id, pending.revision, pending.created_at);
    for change in &pending.changes {
        let actions =
            if change.actions.is_empty() { "after its dependencies".to_string() } else { change.actions.join(", ") };
        outln!("  {:<9} {}  {actions}", change.status, change.name);
    }
    let patch = serde_json::json!({"metadata": {"annotations": {APPROVE_ANNOTATION: pending.id}}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error(&format!("manifest {name}: cannot approve"), e))?;
    outln!("Approved: the controller applies plan {} on its next pass, if it still holds.", pending.id);
    Ok(ExitKind::Ok)
}
