//! A validating admission webhook of the test's own: served over TLS on loopback, where the
//! real API server of `../shared/apiserver` (which runs on this host) calls it, registered for
//! one test namespace only, and removed when dropped. It answers each AdmissionReview with the
//! test's verdict and keeps the requests it was asked, so a test can see whether a dry run
//! reached it.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};

use super::cluster::Cluster;

/// What the webhook says of one request: `None` allows it, `Some(message)` refuses it.
pub type Verdict = dyn Fn(&Value) -> Option<String> + Send + Sync;

pub struct Webhook {
    /// The `ValidatingWebhookConfiguration` (cluster-scoped) this webhook is registered as.
    pub name: String,
    kubeconfig: String,
    /// Every AdmissionReview `request` the API server sent, in order.
    pub requests: Arc<Mutex<Vec<Value>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Webhook {
    /// Serves the webhook and registers it for `resource` (plural, core group) in `cluster`'s
    /// namespace, for creates and updates, refusing what `verdict` refuses. The registration
    /// fails closed (`failurePolicy: Fail`) and says the webhook has no side effects, so the
    /// API server calls it on dry runs too.
    pub fn register(
        cluster: &Cluster,
        resource: &str,
        verdict: impl Fn(&Value) -> Option<String> + Send + Sync + 'static,
    ) -> Webhook {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("a certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .expect("a server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let verdict: Arc<Verdict> = Arc::new(verdict);
        let seen = requests.clone();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (acceptor, verdict, seen) = (acceptor.clone(), verdict.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let service = hyper::service::service_fn(move |request| {
                        let (verdict, seen) = (verdict.clone(), seen.clone());
                        async move { Ok::<_, hyper::Error>(review(request, &*verdict, &seen).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });

        let name = format!("deployster-test-{}", cluster.namespace);
        cluster.must(&["label", "namespace", &cluster.namespace, &format!("deployster-webhook={name}")]);
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(cert.pem());
        let configuration = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "policy.deployster.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca_bundle},
                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": [resource]}],
                "namespaceSelector": {"matchLabels": {"deployster-webhook": name}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }],
        });
        cluster.apply_yaml(&configuration.to_string());
        Webhook { name, kubeconfig: cluster.kubeconfig.clone(), requests, _runtime: runtime }
    }

    /// The requests the API server sent for the object named `name`: (operation, dry run).
    pub fn asked_about(&self, name: &str) -> Vec<(String, bool)> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r["name"] == name)
            .map(|r| (r["operation"].as_str().unwrap_or("").to_string(), r["dryRun"] == true))
            .collect()
    }
}

/// Answers one AdmissionReview.
async fn review(
    request: hyper::Request<hyper::body::Incoming>,
    verdict: &Verdict,
    seen: &Mutex<Vec<Value>>,
) -> hyper::Response<Full<Bytes>> {
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let asked = review["request"].clone();
    let refusal = verdict(&asked);
    seen.lock().unwrap().push(asked.clone());
    let mut response = json!({"uid": asked["uid"], "allowed": refusal.is_none()});
    if let Some(message) = refusal {
        response["status"] = json!({"code": 403, "message": message});
    }
    let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    hyper::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(answer.to_string())))
        .unwrap()
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args(["--kubeconfig", &self.kubeconfig, "delete", "validatingwebhookconfiguration", &self.name])
            .args(["--ignore-not-found", "--wait=false"])
            .output();
    }
}
