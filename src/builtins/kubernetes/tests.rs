use crate::engine::typeref::TypeRef;
use std::time::Duration;

use super::*;

#[test]
fn the_controller_acts_as_the_manifest_s_service_account() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let acting = acting_as(&config, "team-a", "deployer");
    assert_eq!(acting.auth_info.impersonate.as_deref(), Some("system:serviceaccount:team-a:deployer"));
    assert_eq!(acting.default_namespace, "team-a");
    assert_eq!(config.auth_info.impersonate, None, "the controller's own configuration is untouched");
}

#[tokio::test]
async fn a_pass_acts_as_what_it_entered_and_the_controller_never_as_itself() {
    crate::client::install_crypto();
    let objects = Arc::new(KubeObjects::impersonating(kube::Config::new("http://127.0.0.1:1".parse().unwrap())));
    let Err(refused) = objects.identity(None).await else { panic!("acted as the controller") };
    assert!(refused.to_string().contains("acts only as a Manifest's ServiceAccount"), "{refused}");
    assert_eq!(refused.reason(), "NoClient");
    let pass = objects.for_pass("team-a", None);
    let (_, namespace, entered) = objects.identity(pass.identity.as_ref()).await.unwrap();
    assert_eq!((namespace.as_str(), entered), ("team-a", true));
    let again = objects.for_pass("team-a", None);
    assert_eq!(
        objects.impersonation.as_ref().unwrap().1.lock().unwrap().keys().collect::<Vec<_>>(),
        ["team-a/default"],
        "one client per ServiceAccount, shared by its passes"
    );
    drop((pass, again));
}
/// One request a [`loopback_api_server`] was sent: method, path with query, headers (lower
/// case), body.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    path: String,
    headers: String,
    body: Value,
}

/// An API server on loopback that knows ConfigMaps (discovery) and answers every other
/// request with `answer`; what it was sent is kept in the returned list.
async fn loopback_api_server(
    answer: impl Fn(&Request) -> (u16, Value) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Request>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            // The head, then as much body as it announces.
            let mut bytes = Vec::new();
            let mut chunk = [0u8; 8192];
            let head_end = loop {
                let n = stream.read(&mut chunk).await.unwrap_or(0);
                bytes.extend_from_slice(&chunk[..n]);
                if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                if n == 0 {
                    break bytes.len();
                }
            };
            let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                .unwrap_or(0);
            while bytes.len() < head_end + length {
                let n = stream.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                bytes.extend_from_slice(&chunk[..n]);
            }
            let original = String::from_utf8_lossy(&bytes[..head_end]).to_string();
            let mut words = original.split_whitespace();
            let request = Request {
                method: words.next().unwrap_or_default().to_string(),
                path: words.next().unwrap_or_default().to_string(),
                headers: head,
                body: serde_json::from_slice(&bytes[head_end..]).unwrap_or(Value::Null),
            };
            let (code, body) = if request.path == "/api/v1" {
                let resources = json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                    {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap",
                     "verbs": ["get", "list", "patch", "create", "delete"]}]});
                (200, resources)
            } else {
                let answered = answer(&request);
                kept.lock().unwrap().push(request);
                answered
            };
            let body = body.to_string();
            let response = format!(
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    (address, seen)
}

/// A Status of the API's.
fn status(code: u16, reason: &str, message: &str, causes: Value) -> (u16, Value) {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                        "reason": reason, "details": {"name": "x", "kind": "configmaps", "causes": causes}, "code": code});
    (code, status)
}

/// An API server on loopback that forbids every request, naming the user it was asked to
/// act as (the `Impersonate-User` header), as Kubernetes' RBAC does.
pub(crate) async fn forbidding_api_server() -> String {
    let (address, _) = loopback_api_server(|request| {
        let user = request
            .headers
            .lines()
            .find_map(|l| l.strip_prefix("impersonate-user:").map(|u| u.trim().to_string()))
            .unwrap_or_else(|| "system:anonymous".into());
        let message = format!(
            "configmaps \"x\" is forbidden: User \"{user}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"team\""
        );
        status(403, "Forbidden", &message, json!([]))
    })
    .await;
    address
}

/// A `builtin/kubernetes` call of pass `run-1`, resource `cm` of manifest `team/app` (from
/// a file: its owner annotation is `app/cm`; in the controller, `team/app/cm`).
pub(crate) fn call(verb: &str, config: Value) -> Invocation {
    let request = json!({"name": "cm", "config": config});
    Invocation {
        args: vec![verb.into()],
        stdin: request.to_string().into_bytes(),
        labels: crate::engine::executor::InvocationLabels {
            manifest: "team/app".into(),
            resource: "cm".into(),
            run_id: "run-1".into(),
            ..Default::default()
        },
        ..Invocation::new(TypeRef::Builtin(NAME.into()), Duration::from_secs(10))
    }
}

/// The type, acting on the server at `address` as the CLI does (no impersonation).
fn objects_at(address: &str) -> KubeObjects {
    crate::client::install_crypto();
    let mut config = kube::Config::new(format!("http://{address}").parse().unwrap());
    config.default_namespace = "team".into();
    KubeObjects::with_client(kube::Client::try_from(config).unwrap())
}

/// A ConfigMap of this resource's as the server holds it.
fn live_config_map(data: Value, version: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data,
           "metadata": {"name": "x", "namespace": "team", "uid": "u-1", "resourceVersion": version,
                        "annotations": {OWNER_ANNOTATION: "app/cm"}, "labels": {MANAGED_LABEL: "true"}}})
}

async fn state_of(objects: &KubeObjects, config: Value) -> Value {
    let outcome = objects.invoke(call("state", config)).await.unwrap();
    let stdout = String::from_utf8_lossy(&outcome.stdout).to_string();
    assert!(outcome.exit.success(), "{stdout}{}", String::from_utf8_lossy(&outcome.stderr));
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// Fields that look changed are confirmed by a server-side dry-run apply (`dryRun=All`, as
/// field manager `deployster`): what the server would write as it is is not drift, what it
/// would change is; the finding is remembered until the `resourceVersion` changes.
#[tokio::test]
async fn drift_is_what_a_dry_run_apply_would_change() {
    // The server holds `mode: FAST` and writes any `mode` in capitals (as a webhook might).
    let live = Arc::new(Mutex::new(live_config_map(json!({"mode": "FAST", "size": "1"}), "7")));
    let held = live.clone();
    let (address, seen) = loopback_api_server(move |request| match request.method.as_str() {
        "GET" => (200, held.lock().unwrap().clone()),
        "PATCH" => {
            let mut result = held.lock().unwrap().clone();
            for (key, value) in request.body["data"].as_object().unwrap() {
                result["data"][key] = json!(value.as_str().unwrap().to_uppercase());
            }
            (200, result)
        }
        _ => (405, json!({})),
    })
    .await;
    let objects = objects_at(&address);
    let config = |mode: &str, size: &str| {
        json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                          "data": {"mode": mode, "size": size}}})
    };

    let state = state_of(&objects, config("fast", "1")).await;
    assert_eq!(state["status"], "VALID", "the server would write `fast` as it holds it: {state}");
    let patches: Vec<Request> = seen.lock().unwrap().iter().filter(|r| r.method == "PATCH").cloned().collect();
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert!(patches[0].path.contains("dryRun=All"), "a dry run: {}", patches[0].path);
    assert!(patches[0].path.contains("fieldManager=deployster"), "{}", patches[0].path);
    assert!(!patches[0].path.contains("force=true"), "{}", patches[0].path);
    assert!(patches[0].headers.contains("content-type: application/apply-patch+yaml"), "{}", patches[0].headers);
    assert_eq!(patches[0].body["metadata"]["annotations"][OWNER_ANNOTATION], "app/cm", "as applied");
    assert_eq!(patches[0].body["metadata"]["labels"][MANAGED_LABEL], "true", "labelled, for watches");

    // Again, the object unchanged: remembered, no second dry run.
    assert_eq!(state_of(&objects, config("fast", "1")).await["status"], "VALID");
    assert_eq!(seen.lock().unwrap().iter().filter(|r| r.method == "PATCH").count(), 1, "remembered");

    // Only what the server would really change is drift.
    let state = state_of(&objects, config("fast", "2")).await;
    assert_eq!(state["status"], "STALE", "{state}");
    let description = state["actions"][0]["description"].as_str().unwrap();
    assert_eq!(description, r#"Update ConfigMap team/x: data.size: "1" → "2""#);

    // A new resourceVersion is looked at anew.
    *live.lock().unwrap() = live_config_map(json!({"mode": "SLOW", "size": "1"}), "8");
    let state = state_of(&objects, config("fast", "1")).await;
    assert_eq!(
        state["actions"][0]["description"].as_str().unwrap(),
        r#"Update ConfigMap team/x: data.mode: "SLOW" → "fast""#
    );
    assert_eq!(seen.lock().unwrap().iter().filter(|r| r.method == "PATCH").count(), 3);
}

/// A dry run that conflicts is drift, said with the manager; one the server refuses as
/// invalid fails the state with each field's reason; one it forbids leaves the fields as
/// compared.
#[tokio::test]
async fn a_dry_run_the_server_refuses_is_said() {
    let answer = Arc::new(Mutex::new(status(409, "Conflict", "", json!([]))));
    let answering = answer.clone();
    let (address, _) = loopback_api_server(move |request| match request.method.as_str() {
        "GET" => (200, live_config_map(json!({"mode": "a"}), "1")),
        _ => answering.lock().unwrap().clone(),
    })
    .await;
    let objects = objects_at(&address);
    let config = |mode: &str| json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"mode": mode}}});

    *answer.lock().unwrap() = status(
        409,
        "Conflict",
        "Apply failed with 1 conflict: conflict with \"other\": .data.mode",
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"other\"", "field": ".data.mode"}]),
    );
    let state = state_of(&objects, config("b")).await;
    assert_eq!(state["status"], "STALE");
    let description = state["actions"][0]["description"].as_str().unwrap();
    assert!(description.contains(r#"data.mode: "a" → "b""#), "{description}");
    assert!(description.contains(r#"conflict with "other": .data.mode"#), "{description}");
    assert!(description.contains("applying fails: another controller owns those fields"), "{description}");

    *answer.lock().unwrap() = status(
        422,
        "Invalid",
        "ConfigMap \"x\" is invalid",
        json!([{"reason": "FieldValueInvalid", "message": "Invalid value: \"c\"", "field": "data.mode"}]),
    );
    let outcome = objects.invoke(call("state", config("c"))).await.unwrap();
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    assert!(!outcome.exit.success());
    assert!(
        stderr.contains("checking (a server-side dry run of applying) ConfigMap team/x: ConfigMap \"x\" is invalid (422 Invalid); data.mode: Invalid value: \"c\""),
        "{stderr}"
    );

    // The authorizer's 403 (the words of a real server's RBAC): the fields as compared.
    let rbac = "configmaps \"x\" is forbidden: User \"system:serviceaccount:team:reader\" cannot patch \
                resource \"configmaps\" in API group \"\" in the namespace \"team\"";
    *answer.lock().unwrap() = status(403, "Forbidden", rbac, json!([]));
    let state = state_of(&objects, config("d")).await;
    assert_eq!(state["actions"][0]["description"], r#"Update ConfigMap team/x: data.mode: "a" → "d""#);

    // An admission webhook's 403 refuses the change itself: the state fails, saying so.
    let webhook = "admission webhook \"policy.example.com\" denied the request: mode d is not allowed";
    *answer.lock().unwrap() = status(403, "Forbidden", webhook, json!([]));
    let outcome = objects.invoke(call("state", config("e"))).await.unwrap();
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    assert!(!outcome.exit.success());
    assert!(stderr.contains("denied the request: mode d is not allowed (403 Forbidden)"), "{stderr}");
}

/// A ServiceAccount without the rights fails the call with the API's 403, which names the
/// account (impersonated), the verb and the resource.
#[tokio::test]
async fn a_service_account_without_rights_fails_with_the_api_s_403() {
    crate::client::install_crypto();
    let address = forbidding_api_server().await;
    let config = kube::Config::new(format!("http://{address}").parse().unwrap());
    let objects = Arc::new(KubeObjects::impersonating(config));
    let pass = objects.for_pass("team", Some("deployer"));
    let invocation =
        call("state", json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}}));
    let outcome = pass.invoke(invocation).await.unwrap();
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    assert!(!outcome.exit.success());
    assert!(
        stderr.contains(
            "reading ConfigMap team/x: configmaps \"x\" is forbidden: User \"system:serviceaccount:team:deployer\" \
             cannot get resource \"configmaps\""
        ),
        "{stderr}"
    );
    assert!(stderr.contains("(403 Forbidden)"), "{stderr}");
}
