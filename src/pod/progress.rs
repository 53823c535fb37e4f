//! Where an invocation's Pod is on its way to running its program, from what the API says of
//! it: plain rules over the Pod object, failing fast on what will not get better (an image that
//! cannot be pulled, a Pod no node takes, a container that cannot start).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::api::pod_error;
use super::settings::PodSettings;
use crate::engine::executor::ExecError;

/// Where a Pod is.
pub enum PodProgress {
    Waiting,
    Started,
    Ended,
}

/// Where the Pod is on its way to running its program; an error for what will not get
/// better.
pub fn progress(settings: &PodSettings, pod: &Pod, waited: Duration) -> Result<PodProgress, ExecError> {
    if ended(pod) {
        return Ok(PodProgress::Ended);
    }
    let status = pod.status.clone().unwrap_or_default();
    let main = status.container_statuses.as_ref().and_then(|s| s.iter().find(|c| c.name == "main"));
    if let Some(state) = main.and_then(|c| c.state.as_ref())
        && (state.running.is_some() || state.terminated.is_some())
    {
        return Ok(PodProgress::Started);
    }
    let helper = status.container_statuses.as_ref().and_then(|s| s.iter().find(|c| c.name == "helper"));
    for (container, which) in [(helper, "the helper image"), (main, "the type's image")] {
        let Some(container) = container else { continue };
        let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        let reason = waiting.reason.as_deref().unwrap_or("");
        let message = waiting.message.as_deref().unwrap_or("");
        let image = container.image.as_str();
        match reason {
            "ErrImagePull" | "ImagePullBackOff" if waited >= settings.pull_timeout => {
                return Err(pod_error(
                    "ImagePullFailed",
                    format!(
                        "the node could not pull {which} `{image}` within {:?}: {reason}: {message}",
                        settings.pull_timeout
                    ),
                ));
            }
            "InvalidImageName" | "ErrImageNeverPull" => {
                return Err(pod_error("ImagePullFailed", format!("{which} `{image}`: {reason}: {message}")));
            }
            "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
                return Err(pod_error("ContainerNotStarted", format!("{which} `{image}`: {reason}: {message}")));
            }
            _ => {}
        }
    }
    // The helper holds until the type's container is done: ended before that one started, it
    // failed (its copy, or its `postStart` hook, after which the kubelet kills it).
    if let Some(helper) = helper
        && let Some(done) = helper.state.as_ref().and_then(|s| s.terminated.as_ref())
    {
        return Err(pod_error(
            "HelperFailed",
            format!(
                "the helper's container (`{}`) ended with code {} before the type's started: {} {}",
                helper.image,
                done.exit_code,
                done.reason.as_deref().unwrap_or(""),
                done.message.as_deref().unwrap_or("")
            ),
        ));
    }
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    if let Some(condition) = unschedulable {
        if waited >= settings.schedule_timeout {
            return Err(pod_error(
                "Unschedulable",
                format!(
                    "no node took the Pod within {:?}: {}",
                    settings.schedule_timeout,
                    condition.message.as_deref().unwrap_or("the scheduler gave no reason")
                ),
            ));
        }
        return Ok(PodProgress::Waiting);
    }
    let scheduled = status.conditions.iter().flatten().any(|c| c.type_ == "PodScheduled" && c.status == "True");
    if scheduled && waited >= settings.start_timeout {
        let why = [helper, main]
            .into_iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
            .map(|w| format!("{}: {}", w.reason.as_deref().unwrap_or(""), w.message.as_deref().unwrap_or("")))
            .next()
            .unwrap_or_else(|| "no reason given (a volume that cannot mount shows in the Pod's events)".into());
        return Err(pod_error(
            "ContainerNotStarted",
            format!("the Pod was scheduled but its program had not started after {:?}: {why}", settings.start_timeout),
        ));
    }
    if !scheduled && waited >= settings.schedule_timeout {
        return Err(pod_error(
            "Unschedulable",
            format!("the Pod was not scheduled within {:?}", settings.schedule_timeout),
        ));
    }
    Ok(PodProgress::Waiting)
}

/// The Pod has ended, or the type's container has: the helper's ends a moment later (when its
/// program could not mark itself done, only with the Pod's deletion), and is not waited for.
pub fn ended(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        || status
            .container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == "main" && c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
}

/// The Pod a watch event shows; an error when the Pod is gone or the watch failed.
pub fn observed(
    event: Option<Result<Option<Pod>, kube::runtime::watcher::Error>>,
    name: &str,
) -> Result<Pod, ExecError> {
    match event {
        Some(Ok(Some(pod))) => Ok(pod),
        Some(Ok(None)) | None => {
            Err(pod_error("PodDeleted", format!("the Pod {name} was deleted by someone else before its program ended")))
        }
        Some(Err(e)) => Err(pod_error("KubernetesApi", format!("watching the Pod {name}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "dst-x"}, "status": status})).unwrap()
    }

    fn settings() -> PodSettings {
        PodSettings::new("helper:1")
    }

    fn waiting(reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!({"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "main", "image": "r/type@sha256:1", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]})
    }

    fn failure(result: Result<PodProgress, ExecError>) -> (String, String) {
        match result {
            Err(e) => (e.reason().to_string(), e.to_string()),
            Ok(_) => panic!("expected a failure"),
        }
    }

    #[test]
    fn what_will_not_get_better_fails_and_names_its_cause() {
        let s = settings();
        let pull = pod(waiting("ImagePullBackOff", "manifest unknown"));
        assert!(matches!(progress(&s, &pull, Duration::from_secs(10)), Ok(PodProgress::Waiting)), "pulls get a minute");
        let (reason, text) = failure(progress(&s, &pull, Duration::from_secs(61)));
        assert_eq!(reason, "ImagePullFailed");
        assert!(text.contains("`r/type@sha256:1`") && text.contains("manifest unknown"), "{text}");
        let config = pod(waiting("CreateContainerConfigError", "secret \"db\" not found"));
        let (reason, text) = failure(progress(&s, &config, Duration::ZERO));
        assert_eq!(reason, "ContainerNotStarted");
        assert!(text.contains("secret \"db\" not found"), "{text}");
        let mounting = pod(waiting("ContainerCreating", ""));
        assert!(
            matches!(progress(&s, &mounting, Duration::from_secs(200)), Ok(PodProgress::Waiting)),
            "a slow pull is not a failure"
        );
        let (reason, _) = failure(progress(&s, &mounting, Duration::from_secs(301)));
        assert_eq!(reason, "ContainerNotStarted");
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available: node selector"}]}));
        assert!(matches!(progress(&s, &unschedulable, Duration::from_secs(200)), Ok(PodProgress::Waiting)));
        let (reason, text) = failure(progress(&s, &unschedulable, Duration::from_secs(301)));
        assert_eq!(reason, "Unschedulable");
        assert!(text.contains("0/1 nodes are available: node selector"), "{text}");
        let running = serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]});
        assert!(matches!(progress(&s, &pod(running), Duration::ZERO), Ok(PodProgress::Started)));
        assert!(matches!(
            progress(&s, &pod(serde_json::json!({"phase": "Failed"})), Duration::ZERO),
            Ok(PodProgress::Ended)
        ));
    }
}
