//! How the Pod runtime's parts talk to the API alike: its errors as the executor's, and a Pod
//! deleted and waited for until it is gone.

use crate::engine::executor::ExecError;

/// Why a Pod failed, as a reason and a sentence.
pub(crate) fn pod_error(reason: &'static str, message: impl Into<String>) -> ExecError {
    ExecError::Pod { reason, message: message.into() }
}

pub(crate) fn api_error(step: &str, error: kube::Error) -> ExecError {
    let message = match &error {
        kube::Error::Api(status) => format!("{step}: {} ({})", status.message, status.code),
        other => format!("{step}: {other}"),
    };
    pod_error("KubernetesApi", message)
}

pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Deletes Pod `name` with `grace` for its program to end, and waits until it is gone.
pub(crate) async fn delete_and_wait(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    grace: std::time::Duration,
) {
    use futures::StreamExt;
    let params = kube::api::DeleteParams {
        grace_period_seconds: Some(grace.as_secs() as u32),
        ..kube::api::DeleteParams::background()
    };
    match pods.delete(name, &params).await {
        Err(e) if is_not_found(&e) => return,
        Err(e) => tracing::warn!(pod = name, "could not delete the Pod: {e}"),
        Ok(_) => {}
    }
    let patience = grace + std::time::Duration::from_secs(60);
    let gone = async {
        let mut watch = kube::runtime::watcher::watch_object(pods.clone(), name).boxed();
        while let Some(event) = watch.next().await {
            if matches!(event, Ok(None)) {
                return;
            }
        }
    };
    if tokio::time::timeout(patience, gone).await.is_err() {
        tracing::warn!(pod = name, "the Pod was still there {patience:?} after its deletion");
    }
}
