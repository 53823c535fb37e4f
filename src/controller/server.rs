//! The admin endpoints: `/metrics` (Prometheus text), `/healthz` and `/livez` (the process
//! answers), `/readyz` (every watch cache has synced and the API server answers).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use super::metrics::Metrics;
use super::readiness::Readiness;

#[derive(Clone)]
struct Admin {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    /// Refreshes the gauges computed from the watch caches before each scrape.
    refresh: Arc<dyn Fn(&Metrics) + Send + Sync>,
}

/// Serves the admin endpoints on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    refresh: Arc<dyn Fn(&Metrics) + Send + Sync>,
) -> std::io::Result<()> {
    let router = Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(live))
        .route("/livez", get(live))
        .route("/readyz", get(ready))
        .with_state(Admin { metrics, readiness, refresh });
    axum::serve(listener, router).await
}

async fn scrape(State(admin): State<Admin>) -> impl IntoResponse {
    (admin.refresh)(&admin.metrics);
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], admin.metrics.encode())
}

async fn live() -> &'static str {
    "ok\n"
}

async fn ready(State(admin): State<Admin>) -> (StatusCode, String) {
    match admin.readiness.problem() {
        None => (StatusCode::OK, "ok\n".into()),
        Some(problem) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {problem}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_watch_synced_and_while_the_api_answers() {
        let readiness = Readiness::new(2);
        assert_eq!(readiness.problem(), Some("the watch caches have not synced yet"));
        readiness.synced(0);
        assert!(readiness.problem().is_some(), "one watch of two");
        readiness.synced(1);
        assert_eq!(readiness.problem(), None);
        readiness.api_answered(false, || "connection refused".into());
        assert_eq!(readiness.problem(), Some("the Kubernetes API server is unreachable"));
        readiness.api_answered(true, String::new);
        assert_eq!(readiness.problem(), None);
    }

    #[tokio::test]
    async fn the_endpoints_answer_over_http() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new(1));
        let refresh: Arc<dyn Fn(&Metrics) + Send + Sync> =
            Arc::new(|m: &Metrics| m.set_manifests(&[("a".into(), "True", 7)]));
        tokio::spawn(serve(listener, metrics, readiness.clone(), refresh));
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.0 200"));
        let not_ready = get("/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.0 503") && not_ready.contains("not synced"), "{not_ready}");
        readiness.synced(0);
        assert!(get("/readyz").await.starts_with("HTTP/1.0 200"));
        let scraped = get("/metrics").await;
        assert!(scraped.contains("application/openmetrics-text"), "{scraped}");
        assert!(
            scraped.contains(r#"deployster_manifests{namespace="a",ready="True"} 7"#),
            "refreshed before the scrape: {scraped}"
        );
    }
}
