//! A pipeline as compiled from its document ([`super::document`]): every step
//! with its stable id, the `next` edges between steps, each step's `after` set, batches and
//! gates — checked, so that everything downstream takes only a [`Pipeline`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fixedbitset::FixedBitSet;
use indexmap::IndexMap;
use serde_json::{Map, Value};

pub use super::document::{Concurrency, GroupSpec, GroupTarget, PipelineSpec, StageSpec, TargetSpec, TestSpec};
pub use super::gates::DenyWindow;
use super::gates::{approval, windows};
use super::{PipelineError, SpecError};

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// Apply this manifest (the target's, or a test's) with the revision's and target's vars.
    Apply(PathBuf),
    /// Wait this long after the target's previous step succeeded (`bake`).
    Wait(Duration),
}

/// One step of one target: the unit the log records.
#[derive(Debug, Clone)]
pub struct Step {
    /// `stage/group/target/step`.
    pub id: String,
    pub stage: usize,
    pub group: usize,
    /// Index into [`Pipeline::targets`].
    pub target: usize,
    pub work: Work,
    /// The next steps: what may start once this one is through.
    pub next: Vec<usize>,
    /// The steps that must be through before this one starts.
    pub previous: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    /// `stage/group/target`.
    pub id: String,
    pub vars: Map<String, Value>,
}

#[derive(Debug, Clone)]
pub struct Group {
    /// `stage/group`.
    pub id: String,
    pub max_parallel: Option<usize>,
    /// Its first steps wait for an `approved` entry.
    pub approval: bool,
    pub steps: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    pub requires: Vec<String>,
    /// No step of the stage starts inside one of these.
    pub windows: Vec<DenyWindow>,
    pub groups: Vec<Group>,
    pub steps: Vec<usize>,
}

/// A batch: once a revision has started a step of `from`, no other revision starts one until
/// it is through every step of `to`.
#[derive(Debug, Clone)]
pub struct Batch {
    pub from: Vec<usize>,
    pub to: Vec<usize>,
    /// As written.
    pub said: String,
}

/// A checked pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// What the log and the state directory call it (the file's stem, or the object's name).
    pub name: String,
    pub revision: String,
    /// The revision's vars as the document gives them.
    pub vars: IndexMap<String, Value>,
    pub stages: Vec<Stage>,
    pub targets: Vec<Target>,
    pub steps: Vec<Step>,
    /// Steps with no previous step: where every revision starts.
    pub roots: Vec<usize>,
    /// `after[a]`: every step reachable from `a` (the seed's `after`).
    pub after: Vec<FixedBitSet>,
    pub batches: Vec<Batch>,
    pub concurrency: Concurrency,
    by_id: HashMap<String, usize>,
}

impl Pipeline {
    pub fn step(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// Target `target`'s `deploy` step: whose newest success says what the target runs.
    pub fn deploy_step(&self, target: usize) -> Option<usize> {
        self.step(&format!("{}/deploy", self.targets[target].id)).filter(|&s| self.steps[s].target == target)
    }

    /// Renders the revision template with `vars`; empty is an error.
    pub fn revision_of(&self, vars: &Map<String, Value>) -> Result<String, PipelineError> {
        let invalid = |message: String| PipelineError::Invalid(format!("revision `{}`: {message}", self.revision));
        let environment = minijinja::Environment::new();
        let rendered = environment
            .render_str(&self.revision, minijinja::value::Serde(vars))
            .map_err(|e| invalid(e.to_string()))?;
        let rendered = rendered.trim().to_string();
        if rendered.is_empty() {
            return Err(invalid("renders empty: give the var it reads (`--var version=1.4.3`)".into()));
        }
        Ok(rendered)
    }
}

/// `Err` of a broken rule, said as `why`.
fn invalid<T>(why: String) -> Result<T, SpecError> {
    Err(SpecError::Invalid(why))
}

/// Where a pipeline's manifests are, and whether each loads.
pub trait Manifests {
    /// The manifest a step of `target` in `stage` applies, as written (`written`): checked.
    /// `what` names the step in an error.
    fn resolve(&self, written: &Path, stage: &str, target: &TargetSpec, what: &str) -> Result<PathBuf, SpecError>;
}

/// Manifest files, beside the pipeline's file; each loaded once.
pub struct Files {
    dir: PathBuf,
    loaded: std::cell::RefCell<std::collections::HashSet<PathBuf>>,
}

impl Files {
    pub fn new(dir: &Path) -> Files {
        Files { dir: dir.to_path_buf(), loaded: Default::default() }
    }
}

impl Manifests for Files {
    fn resolve(&self, written: &Path, _: &str, _: &TargetSpec, what: &str) -> Result<PathBuf, SpecError> {
        let manifest = self.dir.join(written);
        if !self.loaded.borrow().contains(&manifest) {
            crate::engine::manifest::load(std::slice::from_ref(&manifest)).map_err(|e| {
                SpecError::ManifestUnloadable { at: what.to_string(), manifest: manifest.clone(), why: e.to_string() }
            })?;
            self.loaded.borrow_mut().insert(manifest.clone());
        }
        Ok(manifest)
    }
}

/// Reads and checks the pipeline in `file`; its manifests are found beside it.
pub fn load(file: &Path) -> Result<Pipeline, PipelineError> {
    let shown = file.display();
    let text =
        std::fs::read_to_string(file).map_err(|e| PipelineError::Invalid(format!("cannot read {shown}: {e}")))?;
    let spec: PipelineSpec =
        serde_norway::from_str(&text).map_err(|e| PipelineError::Invalid(format!("{shown} is not a pipeline: {e}")))?;
    let name = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "pipeline".into());
    let pipeline = compile(&name, &spec, &Files::new(&crate::engine::manifest::parent_dir(file)))
        .map_err(|e| PipelineError::Invalid(format!("pipeline {shown}: {e}")))?;
    Ok(pipeline)
}

/// Checks `spec` and builds its steps; each manifest is resolved by `manifests` and must load.
pub fn compile(name: &str, spec: &PipelineSpec, manifests: &dyn Manifests) -> Result<Pipeline, SpecError> {
    let order = stage_order(spec)?;
    let mut pipeline = Pipeline {
        name: name.to_string(),
        revision: spec.revision.clone(),
        vars: spec.vars.clone(),
        stages: Vec::new(),
        targets: Vec::new(),
        steps: Vec::new(),
        roots: Vec::new(),
        after: Vec::new(),
        batches: Vec::new(),
        concurrency: spec.concurrency,
        by_id: HashMap::new(),
    };
    let mut lasts: Vec<Vec<usize>> = vec![Vec::new(); spec.stages.len()];
    for &s in &order {
        let stage = &spec.stages[s];
        let (compiled, firsts, last) = compile_stage(&mut pipeline, s, stage, manifests)?;
        let previous: Vec<usize> = match &stage.after {
            None if s == 0 => Vec::new(),
            None => lasts[s - 1].clone(),
            Some(after) => after
                .iter()
                .flat_map(|a| lasts[spec.stages.iter().position(|t| &t.name == a).expect("checked")].clone())
                .collect(),
        };
        link(&mut pipeline.steps, &previous, &firsts);
        if previous.is_empty() {
            pipeline.roots.extend(&firsts);
        }
        lasts[s] = last;
        pipeline.stages.push(compiled);
    }
    // Stages in the order written, whatever order they were compiled in.
    let mut stages: Vec<(usize, Stage)> = order.iter().copied().zip(std::mem::take(&mut pipeline.stages)).collect();
    stages.sort_by_key(|(s, _)| *s);
    pipeline.stages = stages.into_iter().map(|(_, stage)| stage).collect();
    pipeline.after = after_sets(&pipeline.steps);
    for range in &spec.batches {
        let batches = batch(&pipeline, range)?;
        pipeline.batches.extend(batches);
    }
    Ok(pipeline)
}

/// The stages in an order where each comes after those it names; a cycle is an error that
/// shows it.
fn stage_order(spec: &PipelineSpec) -> Result<Vec<usize>, SpecError> {
    if spec.stages.is_empty() {
        return invalid("a pipeline needs at least one stage".into());
    }
    let mut graph = petgraph::graph::DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..spec.stages.len()).map(|s| graph.add_node(s)).collect();
    for (s, stage) in spec.stages.iter().enumerate() {
        check_name("stage", &stage.name)?;
        if spec.stages[..s].iter().any(|t| t.name == stage.name) {
            return invalid(format!("two stages are named `{}`", stage.name));
        }
        let after = match &stage.after {
            Some(after) => after.clone(),
            None if s > 0 => vec![spec.stages[s - 1].name.clone()],
            None => Vec::new(),
        };
        for name in after {
            let Some(t) = spec.stages.iter().position(|t| t.name == name) else {
                return invalid(format!("stage `{}` comes after `{name}`, which is not a stage", stage.name));
            };
            graph.add_edge(nodes[t], nodes[s], ());
        }
    }
    petgraph::algo::toposort(&graph, None).map(|order| order.into_iter().map(|n| graph[n]).collect()).map_err(|cycle| {
        // A way round the cycle, from the first stage written on it, as the edges go.
        let start = cycle.node_id();
        let scc = petgraph::algo::kosaraju_scc(&graph).into_iter().find(|scc| scc.contains(&start)).unwrap_or_default();
        let first = scc.iter().copied().min_by_key(|&n| graph[n]).unwrap_or(start);
        let mut path = vec![first];
        if !round(&graph, &scc, first, &mut path) {
            path = vec![first];
        }
        path.push(first);
        let names: Vec<&str> = path.iter().map(|&n| spec.stages[graph[n]].name.as_str()).collect();
        SpecError::Invalid(format!("the stages form a cycle: {}", names.join(" → ")))
    })
}

/// Extends `path` (which ends at a node of `scc`) back round to its first node.
fn round(
    graph: &petgraph::graph::DiGraph<usize, ()>,
    scc: &[petgraph::graph::NodeIndex],
    first: petgraph::graph::NodeIndex,
    path: &mut Vec<petgraph::graph::NodeIndex>,
) -> bool {
    let at = *path.last().expect("a path");
    let mut next: Vec<_> = graph.neighbors(at).filter(|n| scc.contains(n)).collect();
    next.sort_by_key(|&n| graph[n]);
    for n in next {
        if n == first {
            return true;
        }
        if !path.contains(&n) {
            path.push(n);
            if round(graph, scc, first, path) {
                return true;
            }
            path.pop();
        }
    }
    false
}

fn check_name(what: &str, name: &str) -> Result<(), SpecError> {
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
        return invalid(format!("{what} name `{name}` must be non-empty, without `/` or spaces"));
    }
    Ok(())
}

/// The stage's steps; returns it with its first steps and its last steps.
fn compile_stage(
    pipeline: &mut Pipeline,
    s: usize,
    stage: &StageSpec,
    manifests: &dyn Manifests,
) -> Result<(Stage, Vec<usize>, Vec<usize>), SpecError> {
    let at = format!("stage `{}`", stage.name);
    let works = step_works(stage, &at)?;
    let approval = approval(stage, &at)?;
    let groups: Vec<GroupSpec> = match (stage.groups.is_empty(), stage.targets.is_empty()) {
        (true, true) => return invalid(format!("{at} has no targets")),
        (true, false) => vec![GroupSpec {
            name: "all".into(),
            targets: stage.targets.iter().cloned().map(GroupTarget::Written).collect(),
            max_parallel: None,
        }],
        (false, _) => stage.groups.clone(),
    };
    let mut compiled = Stage {
        name: stage.name.clone(),
        requires: stage.requires.clone(),
        windows: windows(stage, &at)?,
        groups: Vec::new(),
        steps: vec![],
    };
    let (mut firsts, mut previous): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut seen_targets: Vec<String> = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        check_name("group", &group.name)?;
        if groups[..g].iter().any(|h| h.name == group.name) {
            return invalid(format!("{at} has two groups named `{}`", group.name));
        }
        if group.max_parallel == Some(0) {
            return invalid(format!("{at}, group `{}`: maxParallel must be at least 1", group.name));
        }
        let waits = approval.as_ref().is_some_and(|a| a.iter().any(|n| n == &group.name) || (a.is_empty() && g == 0));
        let id = format!("{}/{}", stage.name, group.name);
        let mut group_steps = Vec::new();
        let (mut group_firsts, mut group_lasts) = (Vec::new(), Vec::new());
        for target in &group.targets {
            let target = resolve_target(stage, target, &at)?;
            check_name("target", &target.name)?;
            if seen_targets.contains(&target.name) {
                return invalid(format!("{at} has two targets named `{}`", target.name));
            }
            seen_targets.push(target.name.clone());
            let what = format!("{at}, target `{}`", target.name);
            let manifest = manifests.resolve(&target.manifest, &stage.name, &target, &what)?;
            let t = pipeline.targets.len();
            let target_id = format!("{id}/{}", target.name);
            pipeline.targets.push(Target {
                name: target.name.clone(),
                id: target_id.clone(),
                vars: target.vars.clone(),
            });
            let mut before: Option<usize> = None;
            for (name, work) in &works {
                let work = match work {
                    // A test's manifest, as written: resolved for this target.
                    Some(Work::Apply(test)) => {
                        let what = format!("{what}, test `{name}`");
                        Work::Apply(manifests.resolve(test, &stage.name, &target, &what)?)
                    }
                    Some(work) => work.clone(),
                    None => Work::Apply(manifest.clone()),
                };
                let i = pipeline.steps.len();
                let step_id = format!("{target_id}/{name}");
                pipeline.by_id.insert(step_id.clone(), i);
                pipeline.steps.push(Step {
                    id: step_id,
                    stage: s,
                    group: g,
                    target: t,
                    work,
                    next: vec![],
                    previous: vec![],
                });
                if let Some(b) = before {
                    link(&mut pipeline.steps, &[b], &[i]);
                } else {
                    group_firsts.push(i);
                }
                before = Some(i);
                group_steps.push(i);
            }
            group_lasts.extend(before);
        }
        if g == 0 {
            firsts = group_firsts.clone();
        } else {
            link(&mut pipeline.steps, &previous, &group_firsts);
        }
        previous = group_lasts;
        compiled.steps.extend(&group_steps);
        compiled.groups.push(Group { id, max_parallel: group.max_parallel, approval: waits, steps: group_steps });
    }
    if let Some(named) = &approval {
        if let Some(name) = named.iter().find(|n| !groups.iter().any(|g| &&g.name == n)) {
            return invalid(format!("{at}: gates.approval names `{name}`, which is not a group of the stage"));
        }
    }
    Ok((compiled, firsts, previous))
}

/// Each step name of the stage and its work (`None`: deploy the target's manifest; a test's
/// manifest as written, resolved for each target).
fn step_works(stage: &StageSpec, at: &str) -> Result<Vec<(String, Option<Work>)>, SpecError> {
    if stage.steps.is_empty() {
        return invalid(format!("{at} has no steps"));
    }
    for gate in stage.gates.keys().filter(|g| *g != "approval" && *g != "windows") {
        if !stage.steps.contains(gate) {
            return invalid(format!(
                "{at}: gates names `{gate}`, which is not one of its steps ({})",
                stage.steps.join(", ")
            ));
        }
    }
    for test in stage.tests.keys() {
        if !stage.steps.contains(test) {
            return invalid(format!(
                "{at}: tests names `{test}`, which is not one of its steps ({})",
                stage.steps.join(", ")
            ));
        }
    }
    let mut works = Vec::new();
    for (i, name) in stage.steps.iter().enumerate() {
        check_name("step", name)?;
        if stage.steps[..i].contains(name) {
            return invalid(format!("{at} has two steps named `{name}`"));
        }
        let work = match (name.as_str(), stage.tests.get(name), stage.gates.get(name)) {
            ("deploy", None, None) => None,
            (_, Some(test), None) => Some(Work::Apply(test.manifest.clone())),
            (_, None, Some(Value::String(duration))) => {
                Some(Work::Wait(humantime::parse_duration(duration).map_err(|e| {
                    SpecError::Invalid(format!("{at}: gates.{name} `{duration}` is not a duration such as 30m: {e}"))
                })?))
            }
            (_, None, Some(other)) => {
                return invalid(format!("{at}: gates.{name} must be a duration such as 30m, not {other}"));
            }
            (_, Some(_), Some(_)) => return invalid(format!("{at}: `{name}` is both a test and a gate")),
            (_, None, None) => {
                return invalid(format!(
                    "{at}: step `{name}` is neither `deploy`, a test (`tests.{name}`) nor a timed gate (`gates.{name}: 30m`)"
                ));
            }
        };
        works.push((name.clone(), work));
    }
    Ok(works)
}

fn resolve_target(stage: &StageSpec, target: &GroupTarget, at: &str) -> Result<TargetSpec, SpecError> {
    match target {
        GroupTarget::Written(target) => Ok(target.clone()),
        GroupTarget::Named(name) if !stage.groups.is_empty() => {
            stage.targets.iter().find(|t| &t.name == name).cloned().ok_or_else(|| {
                SpecError::Invalid(format!(
                    "{at}: a group names target `{name}`, which is not one of the stage's `targets`"
                ))
            })
        }
        GroupTarget::Named(name) => invalid(format!("{at}: target `{name}` needs a manifest")),
    }
}

fn link(steps: &mut [Step], from: &[usize], to: &[usize]) {
    for &a in from {
        for &b in to {
            steps[a].next.push(b);
            steps[b].previous.push(a);
        }
    }
}

/// Every step's `after` set. Steps are numbered so that each comes after its previous steps
/// (stages in dependency order, then groups, targets, steps), so one backward sweep does.
fn after_sets(steps: &[Step]) -> Vec<FixedBitSet> {
    let mut after = vec![FixedBitSet::with_capacity(steps.len()); steps.len()];
    for a in (0..steps.len()).rev() {
        let mut set = FixedBitSet::with_capacity(steps.len());
        for &b in &steps[a].next {
            debug_assert!(b > a, "steps are numbered in order");
            set.insert(b);
            set.union_with(&after[b]);
        }
        after[a] = set;
    }
    after
}

/// `[from, to]`: each end is `stage/step` (that step on each of the stage's targets) or a
/// step's id. Within one stage, `stage/step` ranges are one batch per target: a revision on
/// one target does not hold the others.
fn batch(pipeline: &Pipeline, range: &[String]) -> Result<Vec<Batch>, SpecError> {
    let said = format!("[{}]", range.join(", "));
    let [from, to] = range else {
        return invalid(format!("batch {said} must name two steps: [from, to]"));
    };
    let ends = |end: &str| -> Result<Vec<usize>, SpecError> {
        if let Some(step) = pipeline.step(end) {
            return Ok(vec![step]);
        }
        let found: Vec<usize> = match end.split_once('/') {
            Some((stage, step)) if !step.contains('/') => pipeline
                .steps
                .iter()
                .enumerate()
                .filter(|(_, s)| pipeline.stages[s.stage].name == stage && s.id.rsplit('/').next() == Some(step))
                .map(|(i, _)| i)
                .collect(),
            _ => Vec::new(),
        };
        if found.is_empty() {
            return invalid(format!(
                "batch {said}: `{end}` is no step (write `stage/step` or `stage/group/target/step`)"
            ));
        }
        Ok(found)
    };
    let (from_steps, to_steps) = (ends(from)?, ends(to)?);
    let on_path = |a: usize, b: usize| a == b || pipeline.after[a].contains(b);
    if !to_steps.iter().all(|&b| from_steps.iter().any(|&a| on_path(a, b))) {
        return invalid(format!("batch {said} is not a path in the pipeline: `{to}` does not come after `{from}`"));
    }
    let target_of = |steps: &[usize]| steps.iter().map(|&s| pipeline.steps[s].target).collect::<Vec<_>>();
    if from_steps.len() > 1 && target_of(&from_steps) == target_of(&to_steps) {
        return Ok(from_steps
            .iter()
            .zip(&to_steps)
            .map(|(&a, &b)| Batch { from: vec![a], to: vec![b], said: said.clone() })
            .collect());
    }
    Ok(vec![Batch { from: from_steps, to: to_steps, said }])
}
