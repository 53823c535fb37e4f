//! Whether an object is ready, by the rules of kstatus (what `kubectl rollout status`, Flux and
//! Argo CD read): the workload kinds by their replicas, a Job by its conditions, a Pod by its
//! phase and `Ready` condition, anything else by `observedGeneration` and its `Ready` (or
//! `Stalled`) condition — an object with no status to say otherwise is ready.

use serde_json::Value;

/// How far the object has rolled out, as its status says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    Ready,
    /// Not yet, and why (`1 of 2 replicas available`).
    Waiting(String),
    /// It will not get there by waiting, and why.
    Failed(String),
}

use Rollout::{Failed, Ready, Waiting};

pub fn readiness(object: &Value) -> Rollout {
    let status = &object["status"];
    let generation = object.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = status.get("observedGeneration").and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed < generation
    {
        return Waiting(format!("its controller has not yet seen generation {generation} (it has seen {observed})"));
    }
    let kind = object["kind"].as_str().unwrap_or_default();
    let group = object["apiVersion"].as_str().and_then(|v| v.rsplit_once('/')).map_or("", |(g, _)| g);
    match (group, kind) {
        ("apps", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => replicas(object, "readyReplicas", "ready"),
        ("apps", "ReplicaSet") => replicas(object, "availableReplicas", "available"),
        ("apps", "DaemonSet") => daemon_set(status),
        ("batch", "Job") => job(status),
        ("", "Pod") => pod(status),
        ("", "PersistentVolumeClaim") => match status["phase"].as_str() {
            Some("Bound") => Ready,
            phase => Waiting(format!("the claim is {}", phase.unwrap_or("not yet bound"))),
        },
        ("", "Service") if object.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer") => {
            match status.pointer("/loadBalancer/ingress").and_then(Value::as_array) {
                Some(ingress) if !ingress.is_empty() => Ready,
                _ => Waiting("no load balancer address yet".into()),
            }
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => match condition(status, "Established") {
            Some(("True", _)) => Ready,
            _ => Waiting("not yet established".into()),
        },
        _ => by_conditions(status),
    }
}

/// A condition's status and its reason and message.
fn condition<'a>(status: &'a Value, type_: &str) -> Option<(&'a str, String)> {
    let found = status["conditions"].as_array()?.iter().find(|c| c["type"] == type_)?;
    let said: Vec<&str> = [&found["reason"], &found["message"]].iter().filter_map(|v| v.as_str()).collect();
    Some((found["status"].as_str().unwrap_or_default(), said.join(": ")))
}

fn count(status: &Value, field: &str) -> i64 {
    status[field].as_i64().unwrap_or(0)
}

fn wanted_replicas(object: &Value) -> i64 {
    object.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
}

fn deployment(object: &Value) -> Rollout {
    let status = &object["status"];
    if let Some((_, why)) =
        condition(status, "Progressing").filter(|(_, why)| why.starts_with("ProgressDeadlineExceeded"))
    {
        return Failed(why);
    }
    let wanted = wanted_replicas(object);
    let (updated, available, total) =
        (count(status, "updatedReplicas"), count(status, "availableReplicas"), count(status, "replicas"));
    if updated < wanted {
        Waiting(format!("{updated} of {wanted} replicas updated"))
    } else if total > updated {
        Waiting(format!("{} old replicas still running", total - updated))
    } else if available < wanted {
        Waiting(format!("{available} of {wanted} replicas available"))
    } else {
        Ready
    }
}

fn replicas(object: &Value, field: &str, word: &str) -> Rollout {
    let (wanted, have) = (wanted_replicas(object), count(&object["status"], field));
    if have < wanted { Waiting(format!("{have} of {wanted} replicas {word}")) } else { Ready }
}

fn daemon_set(status: &Value) -> Rollout {
    let wanted = count(status, "desiredNumberScheduled");
    let (updated, ready) = (count(status, "updatedNumberScheduled"), count(status, "numberReady"));
    match () {
        () if updated < wanted => Waiting(format!("{updated} of {wanted} nodes updated")),
        () if ready < wanted => Waiting(format!("{ready} of {wanted} nodes ready")),
        () => Ready,
    }
}

fn job(status: &Value) -> Rollout {
    if let Some(("True", why)) = condition(status, "Failed") {
        return Failed(format!("the Job failed: {why}"));
    }
    match condition(status, "Complete") {
        Some(("True", _)) => Ready,
        _ => Waiting(format!("{} Pods running, {} succeeded", count(status, "active"), count(status, "succeeded"))),
    }
}

fn pod(status: &Value) -> Rollout {
    match status["phase"].as_str() {
        Some("Succeeded") => return Ready,
        Some("Failed") => {
            let why = [&status["reason"], &status["message"]].iter().filter_map(|v| v.as_str()).collect::<Vec<_>>();
            return Failed(format!(
                "the Pod failed{}",
                if why.is_empty() { String::new() } else { format!(": {}", why.join(": ")) }
            ));
        }
        _ => {}
    }
    // A container that will not start says why (ImagePullBackOff, CrashLoopBackOff).
    let waiting = status["containerStatuses"].as_array().into_iter().flatten().find_map(|c| {
        let waiting = c.pointer("/state/waiting")?;
        Some(format!(
            "container {}: {}",
            c["name"].as_str().unwrap_or("?"),
            waiting["reason"].as_str().unwrap_or("waiting")
        ))
    });
    match condition(status, "Ready") {
        Some(("True", _)) => Ready,
        _ => {
            Waiting(waiting.unwrap_or_else(|| format!("the Pod is {}", status["phase"].as_str().unwrap_or("Pending"))))
        }
    }
}

/// A custom resource (or any kind without rules of its own): `Stalled` fails, `Ready` decides,
/// and without either it is ready.
fn by_conditions(status: &Value) -> Rollout {
    if let Some(("True", why)) = condition(status, "Stalled") {
        return Failed(format!("Stalled: {why}"));
    }
    match condition(status, "Ready") {
        None | Some(("True", _)) => Ready,
        Some((state, why)) if why.is_empty() => Waiting(format!("Ready is {state}")),
        Some((state, why)) => Waiting(format!("Ready is {state}: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(spec_replicas: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generation": 2},
               "spec": {"replicas": spec_replicas}, "status": status})
    }

    #[test]
    fn a_deployment_is_ready_once_rolled_out() {
        let seen = |status: Value| readiness(&deployment(2, status));
        assert_eq!(
            seen(json!({"observedGeneration": 1})),
            Waiting("its controller has not yet seen generation 2 (it has seen 1)".into())
        );
        assert_eq!(
            seen(json!({"observedGeneration": 2, "updatedReplicas": 1, "replicas": 2})),
            Waiting("1 of 2 replicas updated".into())
        );
        assert_eq!(
            seen(json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 3, "availableReplicas": 2})),
            Waiting("1 old replicas still running".into())
        );
        assert_eq!(
            seen(json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 1})),
            Waiting("1 of 2 replicas available".into())
        );
        assert_eq!(
            seen(json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 2})),
            Ready
        );
        let stuck = json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False",
                           "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-1\" has timed out progressing."}]});
        assert_eq!(
            seen(stuck),
            Failed("ProgressDeadlineExceeded: ReplicaSet \"web-1\" has timed out progressing.".into())
        );
    }

    #[test]
    fn jobs_pods_and_custom_resources_by_their_conditions() {
        let job = |conditions: Value| {
            readiness(
                &json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"active": 1, "conditions": conditions}}),
            )
        };
        assert_eq!(job(json!([])), Waiting("1 Pods running, 0 succeeded".into()));
        assert_eq!(job(json!([{"type": "Complete", "status": "True"}])), Ready);
        assert_eq!(
            job(json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])),
            Failed("the Job failed: BackoffLimitExceeded".into())
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending",
                         "containerStatuses": [{"name": "web", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
        assert_eq!(readiness(&pod), Waiting("container web: ImagePullBackOff".into()));
        let custom = |status: Value| {
            readiness(
                &json!({"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"generation": 1}, "status": status}),
            )
        };
        assert_eq!(custom(json!({})), Ready, "no status to say otherwise");
        assert_eq!(
            custom(json!({"conditions": [{"type": "Ready", "status": "False", "reason": "Provisioning"}]})),
            Waiting("Ready is False: Provisioning".into())
        );
        assert_eq!(
            custom(json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]})),
            Ready
        );
        assert_eq!(
            custom(json!({"conditions": [{"type": "Stalled", "status": "True", "message": "quota"}]})),
            Failed("Stalled: quota".into())
        );
    }
}
