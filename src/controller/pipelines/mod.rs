//! Pipelines in a cluster: each `Pipeline` object is driven as `deployster pipeline run` drives
//! a file — the same compiled pipeline, progress computed from its log alone, the same driver
//! — with three differences. Its log is a set of ConfigMaps it owns ([`log`]); a step sets the
//! vars of a Manifest of its namespace and waits for it to be Ready ([`steps`]); and what the
//! CLI takes as arguments comes from the object: the revision is `spec.revision` over
//! `spec.vars` (a new one is registered when it changes), approvals are lines of the
//! `deployster.io/approve` annotation. Its status is a bounded view of what the log says.

pub mod log;
pub mod malformed;
pub mod steps;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::ListParams;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};

use super::context::Context;
use super::error::PipelineReconcileError;
use super::status::{Wanted, transition};
use crate::controller::reasons::{ConditionType, EventAction, Reason};
use crate::crd::Manifest;
use crate::crd::pipeline::{APPROVE_ANNOTATION, LogStatus, Pipeline, PipelineStatus, REGISTER_ANNOTATION};
use crate::history::{Event, History, format_time};
use crate::pipeline::PipelineError;
use crate::pipeline::drive::{Driven, Driver, read};
use crate::pipeline::progress::{Progress, RevisionEnded, target_of};
use crate::pipeline::query::status;
use crate::pipeline::spec::{self, Manifests, TargetSpec};

/// Bounds of the status: nodes, revisions and frontier steps shown.
const NODES_SHOWN: usize = 100;
const REVISIONS_SHOWN: usize = 10;
const FRONTIER_SHOWN: usize = 50;

/// How often a Pipeline whose targets or tests name a Manifest not there looks again.
const MISSING_RECHECK: Duration = Duration::from_secs(10);

pub use log::Pipelines;

/// The Manifests of a namespace, as a pipeline's targets and tests name them: a template over
/// `pipeline.stage`, `pipeline.target` and the target's vars.
struct ManifestObjects {
    namespace: String,
    names: HashSet<String>,
    /// Names asked for that name no Manifest (yet).
    missing: std::sync::Mutex<Vec<String>>,
}

impl Manifests for ManifestObjects {
    fn resolve(&self, written: &Path, stage: &str, target: &TargetSpec, what: &str) -> Result<PathBuf, String> {
        let mut vars = target.vars.clone();
        vars.insert("pipeline".into(), json!({"stage": stage, "target": target.name}));
        let written = written.to_string_lossy();
        let name = minijinja::Environment::new()
            .render_str(&written, minijinja::value::Serde(&vars))
            .map_err(|e| format!("{what}: manifest `{written}`: {e}"))?;
        if !self.names.contains(&name) {
            self.missing.lock().expect("missing lock").push(name.clone());
            return Err(format!("{what}: there is no Manifest {}/{name}", self.namespace));
        }
        Ok(PathBuf::from(name))
    }
}

/// Reconciles one Pipeline: compile, register the spec's revision, record approvals, drive,
/// write the status.
pub async fn reconcile(object: Arc<Pipeline>, ctx: Arc<Context>) -> Result<Action, PipelineReconcileError> {
    // At debug level, so that a reconcile that never ends (a request without an answer) shows.
    tracing::debug!(pipeline = %object.name_any(), "reconcile started");
    let Some(ticket) = ctx.ownership.begin(&object.namespace().unwrap_or_default(), &object.name_any()) else {
        return Ok(Action::await_change());
    };
    let term = ticket.term.clone();
    if object.meta().deletion_timestamp.is_some() {
        // Its log goes with it (owner references); the Manifests it set vars on stay.
        return Ok(Action::await_change());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let api: Api<Pipeline> = Api::namespaced(ctx.client.clone(), &namespace);
    let old = object.status.clone().unwrap_or_default();
    let now = (ctx.clock)();
    let generation = object.meta().generation;

    let names = manifest_names(&ctx, &namespace).await?;
    let resolver = ManifestObjects { namespace: namespace.clone(), names, missing: Default::default() };
    let compiled = spec::compile(&name, &object.spec.pipeline, &resolver)
        .map_err(|e| PipelineError::Invalid(format!("Pipeline {namespace}/{name}: {e}")))
        .and_then(|p| {
            let vars: Map<String, Value> = p.vars.clone().into_iter().collect();
            let revision = p.revision_of(&vars)?;
            Ok((p, vars, revision))
        });
    let (pipeline, vars, revision) = match compiled {
        Ok(compiled) => compiled,
        Err(e) => {
            // A Manifest not there (yet) is waited for: creating it is the fix, not a new
            // spec. Anything else wrong only a change of the spec can fix (Stalled).
            let missing = !resolver.missing.lock().expect("missing lock").is_empty();
            let reason = if missing { Reason::ManifestMissing } else { Reason::InvalidPipeline };
            let message = e.to_string();
            let mut new = old.clone();
            new.observed_generation = generation;
            new.conditions = conditions(
                &old,
                generation,
                now,
                (ConditionType::Ready.as_str(), "False", reason.as_str().into(), message.clone()),
                !missing,
            );
            super::report::write_status_to(
                &ctx.ownership,
                &api,
                &namespace,
                &name,
                &new,
                super::report::STATUS_WRITE_PATIENCE,
            )
            .await?;
            // Said once, not on every look of a wait for a Manifest.
            let said = old.conditions.iter().any(|c| {
                c.type_ == ConditionType::Ready.as_str() && c.reason == reason.as_str() && c.message == message
            });
            if !(missing && said) {
                publish(&ctx, &object, EventType::Warning, reason.as_str(), &message).await;
            }
            counted(&ctx, Some(reason));
            return Ok(if missing { Action::requeue(MISSING_RECHECK) } else { Action::await_change() });
        }
    };

    let pipelines = &ctx.pipelines;
    let log = match pipelines.logs.get(ctx.client.clone(), &object).await {
        Ok(log) => log,
        Err(e) => return Err(PipelineReconcileError::Pipeline(PipelineError::History(e))),
    };
    let steps = steps::ManifestSteps {
        client: ctx.client.clone(),
        namespace: namespace.clone(),
        timeout: ctx.settings.pipeline_step_timeout,
        metrics: ctx.metrics.clone(),
        cache: ctx.manifests.iter().find(|cache| cache.scope.as_deref().is_none_or(|s| s == namespace)).cloned(),
        now,
    };
    let clock = || (ctx.clock)();
    let say = |line: &str| tracing::info!(pipeline = %format!("{namespace}/{name}"), "{line}");
    let driver = Driver {
        pipeline: &pipeline,
        log: log.clone() as Arc<dyn History>,
        runner: None,
        now: &clock,
        state_dir: PathBuf::new(),
        say: &say,
        cancel: term,
    };
    let driven = drive(&ctx, &object, &driver, &steps, &revision, &vars).await;
    let driven = match driven {
        Ok(driven) => driven,
        Err(e) => {
            // The log may be behind what the API holds (a conflict): read it anew next time.
            pipelines.logs.forget(&object);
            return Err(e);
        }
    };
    for (failed_revision, step, why) in &driven.failed {
        let note = format!("revision {failed_revision}, step {step}: {why}");
        publish(&ctx, &object, EventType::Warning, Reason::StepFailed.as_str(), &note).await;
    }
    // What the advance recorded, written before the status says it.
    if let Err(e) = log.flush().await {
        pipelines.logs.forget(&object);
        return Err(PipelineReconcileError::Pipeline(PipelineError::History(e)));
    }
    match log.compact(&pipeline).await {
        Ok(true) => tracing::info!(pipeline = %format!("{namespace}/{name}"), "compacted the pipeline's log"),
        Ok(false) => {}
        // Not fatal: the log stays whole, and the next reconcile reads it anew and tries again.
        Err(e) => {
            tracing::warn!(pipeline = %format!("{namespace}/{name}"), "could not compact the pipeline's log: {e}");
            pipelines.logs.forget(&object);
        }
    }
    let new = next_status(&pipeline, &driven, &old, generation, &revision, now, log.where_kept());
    if through(&driven.progress, &revision) && !through_in(&old, &revision) {
        publish(
            &ctx,
            &object,
            EventType::Normal,
            Reason::RevisionThrough.as_str(),
            &format!("revision {revision} is through"),
        )
        .await;
        ctx.metrics.pipeline_revisions_through.inc();
    }
    super::report::write_status_to(&ctx.ownership, &api, &namespace, &name, &new, super::report::STATUS_WRITE_PATIENCE)
        .await?;
    counted(&ctx, new.conditions.first().and_then(|ready| Reason::parse(&ready.reason)));
    let live = driven.progress.revisions.iter().any(|r| r.is_live());
    Ok(if live { Action::requeue(pipelines.poll.max(Duration::from_secs(1)) * 5) } else { Action::await_change() })
}

/// The Pipelines to reconcile as the Manifests of a namespace change (a step's Manifest answered,
/// or may have): those of the namespace not through, as the Pipeline watch holds them.
pub fn woken_by(
    changes: &tokio::sync::broadcast::Sender<String>,
    pipelines: Store<DeserializeGuard<Pipeline>>,
) -> impl futures::Stream<Item = ObjectRef<DeserializeGuard<Pipeline>>> + Send + use<> {
    use tokio::sync::broadcast::error::RecvError;
    let namespaces = futures::stream::unfold(changes.subscribe(), |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(namespace) => return Some((namespace, changes)),
                // Some changes missed: the next wakes them as well (and each Pipeline looks
                // again on its own while a revision is live).
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    namespaces.flat_map(move |namespace| {
        let woken: Vec<ObjectRef<DeserializeGuard<Pipeline>>> = pipelines
            .state()
            .iter()
            .filter(|guard| guard.meta().namespace.as_deref() == Some(namespace.as_str()))
            .filter(|guard| {
                let ready = guard.0.as_ref().ok().and_then(|p| p.status.as_ref()).and_then(|s| s.conditions.first());
                ready.is_none_or(|ready| ready.status != "True")
            })
            .map(|guard| ObjectRef::from_obj(&**guard))
            .collect();
        futures::stream::iter(woken)
    })
}

/// The names of the Manifests in `namespace`: from the controller's watch cache of it once
/// that has synced (a reconcile asks the API nothing for them), else from the API. Never waits
/// for the cache (see `ManifestCache`).
async fn manifest_names(ctx: &Context, namespace: &str) -> Result<HashSet<String>, PipelineReconcileError> {
    let cache = ctx.manifests.iter().find(|cache| cache.scope.as_deref().is_none_or(|s| s == namespace));
    if let Some(cache) = cache
        && *cache.synced.borrow()
    {
        let refs =
            cache.store.state().iter().map(|m| kube::runtime::reflector::ObjectRef::from_obj(&**m)).collect::<Vec<_>>();
        return Ok(refs.into_iter().filter(|r| r.namespace.as_deref() == Some(namespace)).map(|r| r.name).collect());
    }
    let manifests: Api<Manifest> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(manifests.list_metadata(&ListParams::default()).await?.items.iter().map(ResourceExt::name_any).collect())
}

/// Registers the spec's revision when it is not the newest registered, records the
/// annotation's approvals, and advances once.
async fn drive(
    ctx: &Context,
    object: &Pipeline,
    driver: &Driver<'_>,
    steps: &steps::ManifestSteps,
    revision: &str,
    vars: &Map<String, Value>,
) -> Result<Driven, PipelineReconcileError> {
    let newest = driver.log.latest(&target_of(""), &[Event::RevisionRegistered]).map_err(PipelineError::from)?;
    if newest.is_none_or(|e| e.revision != revision) && driver.register(revision, vars)? {
        publish(ctx, object, EventType::Normal, Reason::RevisionRegistered.as_str(), &format!("revision {revision}"))
            .await;
    }
    let progress = read(driver.pipeline, driver.log.as_ref())?;
    for words in annotated(object, REGISTER_ANNOTATION, 3) {
        let [registered, stage, artifact] = [&words[0], &words[1], &words[2]];
        let have = progress.revision(registered).and_then(|r| progress.artifacts.get(&(stage.clone(), r.id.clone())));
        if have.is_some_and(|a| a.contains(artifact)) {
            continue;
        }
        match driver.register_artifact(registered, stage, artifact) {
            Ok(()) => {
                let note = format!("artifact {artifact} of revision {registered} for stage {stage}");
                publish(ctx, object, EventType::Normal, Reason::ArtifactRegistered.as_str(), &note).await
            }
            Err(PipelineError::Refused(why)) => {
                publish(ctx, object, EventType::Warning, Reason::RegisterRefused.as_str(), &why).await
            }
            Err(e) => return Err(e.into()),
        }
    }
    let progress = read(driver.pipeline, driver.log.as_ref())?;
    for words in annotated(object, APPROVE_ANNOTATION, 2) {
        let (approved, gate) = (words[0].clone(), words[1].clone());
        if approved_already(&progress, &approved, &gate) {
            continue;
        }
        match driver.approve(&approved, &gate) {
            Ok(()) => {
                publish(
                    ctx,
                    object,
                    EventType::Normal,
                    Reason::Approved.as_str(),
                    &format!("revision {approved} at {gate}"),
                )
                .await
            }
            Err(PipelineError::Refused(why)) => {
                publish(ctx, object, EventType::Warning, Reason::ApprovalRefused.as_str(), &why).await
            }
            Err(e) => return Err(e.into()),
        }
    }
    // One step forward: what ended is recorded, what is due started; a change of a step's
    // Manifest wakes the Pipeline again.
    let advanced = driver.advance(steps).await?;
    Ok(Driven { progress: advanced.progress, waiting: advanced.waiting, failed: advanced.failed, interrupted: false })
}

/// The items of annotation `key` — lines, or commas — of `words` words each (others are
/// ignored: `<revision> <stage/group>` approves, `<revision> <stage> <artifact>` registers).
fn annotated(object: &Pipeline, key: &str, words: usize) -> Vec<Vec<String>> {
    let text = object.annotations().get(key).cloned().unwrap_or_default();
    text.lines()
        .flat_map(|line| line.split(','))
        .map(|item| item.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|item| item.len() == words)
        .collect()
}

/// How a Pipeline's gate is approved: a line of its approval annotation.
fn how_to_approve(revision: &str, gate: &str) -> String {
    format!("the line `{revision} {gate}` in the Pipeline's annotation {APPROVE_ANNOTATION}")
}

/// Whether the newest run of `revision` holds an approval at `gate` (a group, or a stage's
/// first group).
fn approved_already(progress: &Progress, revision: &str, gate: &str) -> bool {
    progress.revision(revision).is_some_and(|r| {
        progress
            .approvals
            .iter()
            .any(|(at, id)| id == &r.id && (at == gate || at.split_once('/').map(|(s, _)| s) == Some(gate)))
    })
}

fn through(progress: &Progress, revision: &str) -> bool {
    progress.revision(revision).is_some_and(|r| r.ended == Some(RevisionEnded::Through))
}

fn through_in(status: &PipelineStatus, revision: &str) -> bool {
    status.revisions.iter().any(|r| r.revision == revision && r.status == "through")
}

/// The status: the log's answers, bounded, and the conditions for the spec's revision.
fn next_status(
    pipeline: &spec::Pipeline,
    driven: &Driven,
    old: &PipelineStatus,
    generation: Option<i64>,
    revision: &str,
    now: i64,
    (selector, config_maps, entries): (String, u32, u64),
) -> PipelineStatus {
    let all = status(pipeline, &driven.progress, now, &how_to_approve);
    let mut omitted = Vec::new();
    let mut bounded = |what: &str, items: usize, shown: usize| {
        if items > shown {
            omitted.push(format!("{} {what}", items - shown));
        }
    };
    bounded("nodes", all.nodes.len(), NODES_SHOWN);
    bounded("revisions", all.revisions.len(), REVISIONS_SHOWN);
    bounded("frontier steps", all.frontier.len(), FRONTIER_SHOWN);
    let latest_through = all.nodes.first().and_then(|n| n.latest_through.clone());
    let run = driven.progress.revision(revision);
    let ready: Wanted = match run.map(|r| (r.ended.clone(), r)) {
        Some((Some(RevisionEnded::Through), _)) => (
            ConditionType::Ready.as_str(),
            "True",
            Reason::Through.as_str().into(),
            format!("revision {revision} is through every stage"),
        ),
        Some((Some(RevisionEnded::Failed { step, message }), _)) => (
            ConditionType::Ready.as_str(),
            "False",
            Reason::StepFailed.as_str().into(),
            format!("revision {revision} failed at {step}: {message}"),
        ),
        Some((Some(RevisionEnded::Superseded { by }), _)) => (
            ConditionType::Ready.as_str(),
            "False",
            Reason::Superseded.as_str().into(),
            format!("revision {revision} was superseded by {by}"),
        ),
        Some((None, _)) if driven.interrupted => (
            ConditionType::Ready.as_str(),
            "False",
            Reason::Interrupted.as_str().into(),
            "the controller stopped driving it; it goes on when one leads".into(),
        ),
        Some((None, r)) => {
            let waiting = driven.waiting.iter().find(|s| s.revision == r.revision);
            let message = match waiting.and_then(|s| s.decision.waits_for(&how_to_approve).map(|w| (s.step, w))) {
                Some((step, waits)) => format!("{} waits for {waits}", pipeline.steps[step].id),
                None => format!("revision {revision} is in progress"),
            };
            (ConditionType::Ready.as_str(), "False", Reason::Progressing.as_str().into(), message)
        }
        None => (
            ConditionType::Ready.as_str(),
            "Unknown",
            Reason::NotRegistered.as_str().into(),
            format!("revision {revision} is not registered"),
        ),
    };
    let newest_revisions = all.revisions.len().saturating_sub(REVISIONS_SHOWN);
    PipelineStatus {
        observed_generation: generation,
        conditions: conditions(old, generation, now, ready, false),
        revision: Some(revision.to_string()),
        latest_through,
        revisions: all.revisions[newest_revisions..].to_vec(),
        nodes: all.nodes.into_iter().take(NODES_SHOWN).collect(),
        frontier: all.frontier.into_iter().take(FRONTIER_SHOWN).collect(),
        omitted: (!omitted.is_empty()).then(|| {
            format!(
                "{}: the whole log is in the ConfigMaps `kubectl get configmaps -l {selector}` lists",
                omitted.join(", ")
            )
        }),
        log: Some(LogStatus { selector, config_maps, entries }),
        // Written by the status write, as the replica that makes it.
        shard: None,
    }
}

/// `Ready` as wanted, and `Stalled` (an invalid pipeline waits for its spec to change).
fn conditions(
    old: &PipelineStatus,
    generation: Option<i64>,
    now: i64,
    ready: Wanted,
    stalled: bool,
) -> Vec<crate::crd::Condition> {
    let now = format_time(now);
    let stall: Wanted = match stalled {
        true => (ConditionType::Stalled.as_str(), "True", ready.2.clone(), ready.3.clone()),
        false => (ConditionType::Stalled.as_str(), "False", Reason::Progressing.as_str().into(), String::new()),
    };
    [ready, stall].into_iter().map(|wanted| transition(&old.conditions, wanted, generation, &now)).collect()
}

/// Counts a reconcile by the Ready reason it left (`None`: a reason not the controller's own).
pub(super) fn counted(ctx: &Context, ready: Option<Reason>) {
    count(
        ctx,
        match ready {
            Some(Reason::Through) => "through",
            Some(Reason::Progressing) => "progressing",
            Some(Reason::StepFailed) => "failed",
            Some(Reason::Superseded) => "superseded",
            Some(Reason::Interrupted) => "interrupted",
            Some(Reason::NotRegistered) => "not_registered",
            Some(Reason::InvalidPipeline | Reason::MalformedObject) => "invalid",
            Some(Reason::ManifestMissing) => "manifest_missing",
            _ => "other",
        },
    )
}

/// Counts a reconcile that failed (retried by the error policy).
pub(super) fn counted_error(ctx: &Context) {
    count(ctx, "error")
}

fn count(ctx: &Context, result: &'static str) {
    ctx.metrics.pipeline_reconciles.get_or_create(&super::metrics::ResultLabels { result }).inc();
}

async fn publish(ctx: &Context, object: &Pipeline, type_: EventType, reason: &str, note: &str) {
    super::report::publish_to(ctx, &object.object_ref(&()), type_, reason, EventAction::Drive.as_str(), note).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, ManifestStatus};

    fn manifest(status: &str, reason: &str, observed: i64) -> Manifest {
        let ready = Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: "why".into(),
            observed_generation: Some(observed),
            ..Default::default()
        };
        let mut m = Manifest::new("app", Default::default());
        m.status = Some(ManifestStatus { conditions: vec![ready], ..Default::default() });
        m
    }

    #[test]
    fn a_step_s_result_is_the_manifest_s_ready_condition_at_its_generation() {
        use steps::{StepOutcome, outcome};
        assert_eq!(outcome(&manifest("True", "Applied", 3), 3), StepOutcome::Ready);
        assert_eq!(
            outcome(&manifest("True", "Applied", 2), 3),
            StepOutcome::Pending,
            "an older generation says nothing"
        );
        assert_eq!(
            outcome(&manifest("False", "ProgramFailed", 3), 3),
            StepOutcome::Failed("ProgramFailed: why".into())
        );
        assert_eq!(outcome(&manifest("False", "AwaitingApproval", 3), 3), StepOutcome::Pending);
        assert_eq!(outcome(&manifest("Unknown", "Suspended", 4), 3), StepOutcome::Pending);
        assert_eq!(outcome(&Manifest::new("app", Default::default()), 1), StepOutcome::Pending);
    }

    #[test]
    fn a_step_s_vars_replace_what_the_last_step_set_and_keep_the_manifest_s_own() {
        use steps::{VARS_ANNOTATION, vars_patch};
        let mut m = Manifest::new("app", Default::default());
        m.metadata.resource_version = Some("41".into());
        let vars = |v: serde_json::Value| v.as_object().unwrap().clone();
        m.spec.vars = serde_json::from_value(serde_json::json!({
            "dir": "/srv", "version": "none", "channel": "beta", "limits": {"cpu": 1, "memory": 2}
        }))
        .unwrap();
        // The first step: nothing set before, so nothing removed; an object replaces key by key.
        let first =
            vars_patch(&m, &vars(serde_json::json!({"version": "1.0", "channel": "beta", "limits": {"cpu": 2}})));
        assert_eq!(
            first,
            serde_json::json!({
                "metadata": {"resourceVersion": "41", "annotations": {VARS_ANNOTATION: "[\"version\",\"channel\",\"limits\"]"}},
                "spec": {"vars": {"version": "1.0", "channel": "beta", "limits": {"cpu": 2, "memory": null}}}
            })
        );
        // The next step no longer sets `channel` or `limits`: both go, `dir` (never set) stays.
        m.metadata.annotations =
            Some([(VARS_ANNOTATION.to_string(), "[\"version\",\"channel\",\"limits\"]".to_string())].into());
        let next = vars_patch(&m, &vars(serde_json::json!({"version": "2.0"})));
        assert_eq!(next["spec"]["vars"], serde_json::json!({"version": "2.0", "channel": null, "limits": null}));
        assert_eq!(next["metadata"]["annotations"][VARS_ANNOTATION], "[\"version\"]");
        // An annotation that is not a list of names (edited by hand) removes nothing.
        m.metadata.annotations = Some([(VARS_ANNOTATION.to_string(), "channel".to_string())].into());
        assert_eq!(
            vars_patch(&m, &vars(serde_json::json!({"version": "3.0"})))["spec"]["vars"],
            serde_json::json!({"version": "3.0"})
        );
    }

    #[test]
    fn annotations_are_lines_or_commas_of_words() {
        let mut object = Pipeline::new("p", Default::default());
        let approve = "1.0 prod/fleet\n2.0 prod, 3.0\n\n4.0 a b";
        let register = "1.0 build amd64, 1.0 build";
        object.metadata.annotations = Some(
            [(APPROVE_ANNOTATION.to_string(), approve.to_string()), (REGISTER_ANNOTATION.into(), register.into())]
                .into(),
        );
        assert_eq!(annotated(&object, APPROVE_ANNOTATION, 2), [vec!["1.0", "prod/fleet"], vec!["2.0", "prod"]]);
        assert_eq!(annotated(&object, REGISTER_ANNOTATION, 3), [vec!["1.0", "build", "amd64"]]);
    }

    #[test]
    fn targets_name_manifests_of_the_namespace_by_template() {
        let names = ["app-stg".to_string(), "smoke".to_string()].into();
        let objects = ManifestObjects { namespace: "ns".into(), names, missing: Default::default() };
        let target = TargetSpec { name: "stg".into(), manifest: "app-{{ pipeline.target }}".into(), vars: Map::new() };
        let written = Path::new("app-{{ pipeline.target }}");
        assert_eq!(objects.resolve(written, "staging", &target, "t"), Ok(PathBuf::from("app-stg")));
        let missing =
            objects.resolve(Path::new("app-{{ pipeline.stage }}"), "staging", &target, "stage `s`, target `stg`");
        assert_eq!(missing, Err("stage `s`, target `stg`: there is no Manifest ns/app-staging".into()));
        let bad = objects.resolve(Path::new("app-{{ "), "staging", &target, "t").unwrap_err();
        assert!(bad.starts_with("t: manifest `app-{{ `:"), "{bad}");
        // Only a name naming nothing is missing (waited for); a bad template is not.
        assert_eq!(*objects.missing.lock().unwrap(), ["app-staging"]);
    }
}
