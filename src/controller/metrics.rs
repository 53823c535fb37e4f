//! The controller's Prometheus metrics: one registry, every series named `deployster_…`, with
//! sub-registries per subsystem (`deployster_executor_…`, `deployster_kube_…`). Labels come
//! from `reason()`-style static strings, never from `Debug` output.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::rbac::ApiCall;
use super::readiness::Readiness;
use super::status::PassResult;
use crate::engine::executor::{ExecError, Executor, Invocation, Outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvocationSeries {
    pub phase: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadyLabels {
    pub namespace: String,
    pub ready: &'static str,
}

/// The replica a series is of (its identity, as in its Leases and `status.shard`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    pub replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
    pub code: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 10 ms … ~82 s, and +Inf.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// Every series the controller exposes.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub reconciles_running: Gauge,
    pub work_queue_depth: Gauge,
    pub drift_corrections: Counter,
    /// From a change a watch saw to the pass that corrected it.
    pub drift_corrected_seconds: Histogram,
    /// The watches of managed objects' figures, counted by the watches.
    pub watches: crate::watches::WatchMetrics,
    pub manifests: Family<ReadyLabels, Gauge>,
    pub leader: Gauge,
    pub shards_owned: Family<ReplicaLabels, Gauge>,
    pub manifests_owned: Family<ReplicaLabels, Gauge>,
    pub shard_members: Gauge,
    pub shard_settings_waiting: Gauge,
    replica: std::sync::OnceLock<String>,
    pub invocations: Family<InvocationSeries, Counter>,
    pub invocation_duration: HistogramFamily<PhaseLabels>,
    pub api_requests: Family<ApiLabels, Counter>,
    pub pipeline_reconciles: Family<ResultLabels, Counter>,
    pub pipeline_steps: Family<ResultLabels, Counter>,
    pub pipeline_step_duration: Histogram,
    pub pipeline_revisions_through: Counter,
    /// The warm runners' figures, counted by the Pod executor.
    pub runners: crate::pod::runner::RunnerMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("deployster");
        let metrics = Self {
            reconciles: Family::default(),
            reconcile_duration: seconds_histogram(),
            reconciles_running: Gauge::default(),
            work_queue_depth: Gauge::default(),
            drift_corrections: Counter::default(),
            drift_corrected_seconds: seconds_histogram(),
            watches: Default::default(),
            manifests: Family::default(),
            leader: Gauge::default(),
            shards_owned: Family::default(),
            manifests_owned: Family::default(),
            shard_members: Gauge::default(),
            shard_settings_waiting: Gauge::default(),
            replica: Default::default(),
            invocations: Family::default(),
            invocation_duration: Family::new_with_constructor(seconds_histogram),
            api_requests: Family::default(),
            pipeline_reconciles: Family::default(),
            pipeline_steps: Family::default(),
            pipeline_step_duration: Histogram::new(exponential_buckets(0.5, 2.0, 14)),
            pipeline_revisions_through: Counter::default(),
            runners: Default::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("reconciles", "Reconciles of Manifests, by result", metrics.reconciles.clone());
        r.register("reconcile_duration_seconds", "Time per reconcile", metrics.reconcile_duration.clone());
        r.register("reconciles_running", "Reconciles running now", metrics.reconciles_running.clone());
        r.register(
            "work_queue_depth",
            "Manifests due for a reconcile and waiting for a free worker (--concurrency)",
            metrics.work_queue_depth.clone(),
        );
        r.register("drift_corrected", "Resources found drifted and corrected", metrics.drift_corrections.clone());
        // Its earlier name, kept for dashboards that use it: the same counter.
        r.register(
            "drift_corrections",
            "Resources found drifted and corrected (deprecated: deployster_drift_corrected_total)",
            metrics.drift_corrections.clone(),
        );
        r.register(
            "drift_corrected_seconds",
            "From a change to a managed object seen by a watch to the pass that corrected it",
            metrics.drift_corrected_seconds.clone(),
        );
        let watch = r.sub_registry_with_prefix("watch");
        watch.register(
            "open",
            "Watches of managed objects open now: one per ServiceAccount, namespace and kind",
            metrics.watches.open.clone(),
        );
        watch.register(
            "events",
            "Changes to managed objects seen by watches: changed (wakes a pass) or ours (Deployster's own write)",
            metrics.watches.events.clone(),
        );
        r.register(
            "manifests",
            "Manifests in the watch cache, by namespace and their Ready condition",
            metrics.manifests.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease (or runs without election)",
            metrics.leader.clone(),
        );
        r.register(
            "manifests_owned",
            "Manifests this replica reconciles now (all while it leads; under sharding, those of its shards)",
            metrics.manifests_owned.clone(),
        );
        let shard = r.sub_registry_with_prefix("shard");
        shard.register("owned", "Shards this replica holds and works on", metrics.shards_owned.clone());
        shard.register(
            "members",
            "Live replicas of the shard group that share the work",
            metrics.shard_members.clone(),
        );
        shard.register(
            "settings_waiting",
            "1 while this replica takes no shard because the group's oldest member runs with other shard settings",
            metrics.shard_settings_waiting.clone(),
        );
        let executor = r.sub_registry_with_prefix("executor");
        executor.register(
            "invocations",
            "Resource program invocations, by phase (init, state, action) and result",
            metrics.invocations.clone(),
        );
        executor.register(
            "invocation_duration_seconds",
            "Time per resource program invocation, by phase",
            metrics.invocation_duration.clone(),
        );
        let runner = r.sub_registry_with_prefix("runner");
        runner.register(
            "alive",
            "Warm runners this replica started or used and has not seen go",
            metrics.runners.alive.clone(),
        );
        runner.register(
            "invocations",
            "Invocations each warm runner served, by runner",
            metrics.runners.served.clone(),
        );
        runner.register(
            "starts",
            "Warm runner Pods created, by reason (first, ended, deleted, retiring)",
            metrics.runners.starts.clone(),
        );
        let kube = r.sub_registry_with_prefix("kube");
        kube.register(
            "api_requests",
            "Requests to the Kubernetes API, by RBAC verb, group, resource and HTTP status",
            metrics.api_requests.clone(),
        );
        let pipeline = r.sub_registry_with_prefix("pipeline");
        pipeline.register(
            "reconciles",
            "Reconciles of Pipelines, by what the spec's revision is then (its Ready reason)",
            metrics.pipeline_reconciles.clone(),
        );
        pipeline.register(
            "steps",
            "Pipeline steps run, by result (succeeded, failed, interrupted)",
            metrics.pipeline_steps.clone(),
        );
        pipeline.register(
            "step_duration_seconds",
            "Time per pipeline step: its Manifest's vars set until it is Ready at that generation",
            metrics.pipeline_step_duration.clone(),
        );
        pipeline.register(
            "revisions_through",
            "Revisions seen through every stage of their Pipeline",
            metrics.pipeline_revisions_through.clone(),
        );
        Self { registry, ..metrics }
    }

    /// Names the replica the per-replica series are of (once; later calls change nothing).
    pub fn set_replica(&self, identity: &str) {
        let _ = self.replica.set(identity.to_string());
    }

    fn replica(&self) -> ReplicaLabels {
        ReplicaLabels { replica: self.replica.get().cloned().unwrap_or_default() }
    }

    pub fn set_shards_owned(&self, shards: i64) {
        self.shards_owned.get_or_create(&self.replica()).set(shards);
    }

    pub fn set_manifests_owned(&self, manifests: i64) {
        self.manifests_owned.get_or_create(&self.replica()).set(manifests);
    }

    /// The Prometheus/OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }

    /// Counts a pass by what it observed, and the drift it corrected.
    pub fn observe_pass(&self, pass: &PassResult) {
        self.reconciles.get_or_create(&ResultLabels { result: pass.result() }).inc();
        if pass.succeeded() {
            self.drift_corrections.inc_by(pass.drifts.len() as u64);
        }
    }

    pub fn reconciled(&self, result: &'static str) {
        self.reconciles.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts `manifests` by namespace and Ready status ("True", "False", "Unknown").
    pub fn set_manifests(&self, counts: &[(String, &'static str, i64)]) {
        self.manifests.clear();
        for (namespace, ready, n) in counts {
            self.manifests.get_or_create(&ReadyLabels { namespace: namespace.clone(), ready }).set(*n);
        }
    }

    fn invoked(&self, phase: &str, result: &'static str, elapsed: Duration) {
        let phase = match phase.split(':').next() {
            Some("init") => "init",
            Some("state") => "state",
            Some("action") => "action",
            _ => "other",
        };
        self.invocations.get_or_create(&InvocationSeries { phase, result }).inc();
        self.invocation_duration.get_or_create(&PhaseLabels { phase }).observe(elapsed.as_secs_f64());
    }
}

/// Observes the duration of what it lives through into a histogram, and counts it as running.
pub struct Timer<'a> {
    metrics: &'a Metrics,
    started: Instant,
}

impl<'a> Timer<'a> {
    pub fn start(metrics: &'a Metrics) -> Self {
        metrics.reconciles_running.inc();
        Self { metrics, started: Instant::now() }
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.metrics.reconciles_running.dec();
        self.metrics.reconcile_duration.observe(self.started.elapsed().as_secs_f64());
    }
}

/// An executor that counts and times every invocation of the one it wraps.
pub struct MeteredExecutor {
    pub inner: Arc<dyn Executor>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl Executor for MeteredExecutor {
    async fn preflight(&self, programs: &[crate::engine::typeref::TypeRef]) -> Result<(), ExecError> {
        self.inner.preflight(programs).await
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let phase = invocation.labels.phase.clone();
        let started = Instant::now();
        let result = self.inner.invoke(invocation).await;
        let label = match &result {
            Ok(outcome) if outcome.exit.success() => "succeeded",
            Ok(_) => "failed",
            Err(e) => e.reason(),
        };
        self.metrics.invoked(&phase, label, started.elapsed());
        result
    }
}

/// A layer on the Kubernetes client that counts every request by its RBAC verb, group,
/// resource and HTTP status (`deployster_kube_api_requests_total`), and tells readiness
/// whether the API server answers.
#[derive(Clone)]
pub struct ApiMeteringLayer {
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
}

impl<S> tower::Layer<S> for ApiMeteringLayer {
    type Service = ApiMetering<S>;

    fn layer(&self, inner: S) -> ApiMetering<S> {
        ApiMetering { inner, observer: self.clone() }
    }
}

#[derive(Clone)]
pub struct ApiMetering<S> {
    inner: S,
    observer: ApiMeteringLayer,
}

impl<S, B> tower::Service<http::Request<kube::client::Body>> for ApiMetering<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let path = request.uri().path_and_query().map_or("", |p| p.as_str());
        let call = ApiCall::from_request(request.method().as_str(), path);
        let response = self.inner.call(request);
        let observer = self.observer.clone();
        Box::pin(async move {
            let response = response.await;
            let code = response.as_ref().map(|r| r.status().as_u16());
            let answered = matches!(code, Ok(code) if code < 500);
            observer.readiness.api_answered(answered, || match &response {
                Ok(r) => format!("HTTP {}", r.status()),
                Err(e) => e.to_string(),
            });
            if let Some(ApiCall { verb, group, resource, .. }) = call {
                let code = code.map_or_else(|_| "error".into(), |c| c.to_string());
                observer.metrics.api_requests.get_or_create(&ApiLabels { verb, group, resource, code }).inc();
            }
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::executor::InvocationLabels as Labels;
    use crate::engine::executor::fake::{FakeExecutor, FakeReply};
    use crate::engine::typeref::TypeRef;

    fn invocation(phase: &str) -> Invocation {
        Invocation {
            labels: Labels { phase: phase.into(), ..Labels::default() },
            ..Invocation::new(TypeRef::Builtin("file".into()), Duration::from_secs(1))
        }
    }

    #[tokio::test]
    async fn invocations_are_counted_by_phase_and_result() {
        let metrics = Arc::new(Metrics::new());
        let inner = Arc::new(FakeExecutor::new(|i| FakeReply {
            exit: if i.phase == "action:create" { 3 } else { 0 },
            ..FakeReply::default()
        }));
        let executor = MeteredExecutor { inner, metrics: metrics.clone() };
        for phase in ["init", "state", "state", "action:create"] {
            executor.invoke(invocation(phase)).await.unwrap();
        }
        let text = metrics.encode();
        for line in [
            r#"deployster_executor_invocations_total{phase="init",result="succeeded"} 1"#,
            r#"deployster_executor_invocations_total{phase="state",result="succeeded"} 2"#,
            r#"deployster_executor_invocations_total{phase="action",result="failed"} 1"#,
            r#"deployster_executor_invocation_duration_seconds_count{phase="state"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn every_series_is_named_deployster() {
        let metrics = Metrics::new();
        metrics.reconciled("succeeded");
        metrics.set_manifests(&[("a".into(), "True", 2), ("a".into(), "False", 1)]);
        {
            let _timer = Timer::start(&metrics);
            assert_eq!(metrics.reconciles_running.get(), 1);
        }
        assert_eq!(metrics.reconciles_running.get(), 0);
        let text = metrics.encode();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("deployster_"), "{line}");
        }
        assert!(text.contains(r#"deployster_manifests{namespace="a",ready="True"} 2"#), "{text}");
        assert!(text.contains("deployster_reconcile_duration_seconds_count 1"), "{text}");
        metrics.set_manifests(&[("a".into(), "True", 3)]);
        assert!(!metrics.encode().contains(r#"ready="False""#), "stale label sets are dropped");
    }

    /// The chart's alerts (files/prometheus-rules.yaml) and dashboard (files/grafana-dashboard.json)
    /// read only series this controller exports: a renamed metric fails here, not silently in
    /// a platform team's Prometheus.
    #[test]
    fn every_series_the_chart_s_alerts_and_dashboard_read_is_exported() {
        // A family is exported once it has a series: give each one.
        let metrics = Metrics::new();
        metrics.reconciled("succeeded");
        metrics.set_manifests(&[("a".into(), "True", 1)]);
        metrics.set_shards_owned(1);
        metrics.set_manifests_owned(1);
        metrics.invoked("action", "succeeded", Duration::from_millis(5));
        metrics.watches.events.get_or_create(&crate::watches::VerdictLabels { verdict: "changed" }).inc();
        let call = ApiLabels { verb: "get", group: String::new(), resource: "pods".into(), code: "200".into() };
        metrics.api_requests.get_or_create(&call).inc();
        metrics.pipeline_reconciles.get_or_create(&ResultLabels { result: "through" }).inc();
        metrics.pipeline_steps.get_or_create(&ResultLabels { result: "succeeded" }).inc();
        metrics.runners.served.get_or_create(&crate::pod::runner::RunnerLabels { runner: "r".into() }).inc();
        metrics.runners.starts.get_or_create(&crate::pod::runner::StartLabels { reason: "first".into() }).inc();
        let text = metrics.encode();
        let mut exported = std::collections::BTreeSet::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            match kind {
                "counter" => exported.extend([format!("{}_total", name.trim_end_matches("_total"))]),
                "histogram" => exported.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}"))),
                _ => exported.extend([name.to_string()]),
            }
        }
        assert!(
            exported.contains("deployster_reconciles_total") && exported.contains("deployster_manifests"),
            "{text}"
        );
        let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/deployster/files");
        let series = regex::Regex::new(r"deployster_[a-z_]+").unwrap();
        for file in ["prometheus-rules.yaml", "grafana-dashboard.json"] {
            let text = std::fs::read_to_string(chart.join(file)).unwrap();
            let read: std::collections::BTreeSet<&str> = series.find_iter(&text).map(|m| m.as_str()).collect();
            assert!(read.len() >= 5, "{file} reads {read:?}");
            let unknown: Vec<&&str> = read.iter().filter(|s| !exported.contains(**s)).collect();
            assert!(
                unknown.is_empty(),
                "{file} reads series the controller does not export: {unknown:?}\nexported: {exported:?}"
            );
        }
    }
}
