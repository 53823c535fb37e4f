//! `deployster graph`: the dependency graph, each resource with its latest status — from the
//! deployment log, or from a plan made now (`--live`) — as Mermaid, Graphviz DOT, or SVG drawn
//! in-process (layout-rs: no Graphviz binary needed).

use std::fmt::Write as _;
use std::sync::Arc;

use super::apply::{State, stop_on_signals};
use super::progress::ProgressView;
use super::{CliError, ExitKind, GraphArgs, GraphFormat, OutputFormat, Session, load};
use crate::engine::context::RunOptions;
use crate::engine::events::ApproveAll;
use crate::engine::validate::ValidatedManifest;
use crate::history::store::{DATABASE, SqliteLog};
use crate::history::{Event, History, target};
use crate::pass::{Ended, Mode, Pass};
use crate::stop::Cancel;

/// A resource as drawn: its name, type and status.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub type_name: String,
    pub status: String,
}

/// An edge from a dependency to its dependent: labelled with the alias the dependent reads it
/// by, or implicit (read through `resources.<name>` in an expression; drawn dashed).
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub alias: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub title: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

/// Fill and stroke for a status; grey for one never observed.
fn colours(status: &str) -> (&'static str, &'static str) {
    match status {
        "VALID" | "APPLIED" => ("#d4edda", "#2e7d32"),
        "STALE" => ("#fff3cd", "#b7791f"),
        "MISSING" => ("#e3f2fd", "#1565c0"),
        "FAILED" => ("#f8d7da", "#c62828"),
        "BLOCKED" => ("#ffe0b2", "#e65100"),
        "PENDING" => ("#ede7f6", "#5e35b1"),
        _ => ("#eeeeee", "#616161"),
    }
}

impl Graph {
    /// The graph of a Manifest object as the cluster holds it: its spec's resources, their
    /// status as the controller last wrote it. Names that are not resources (an invalid spec)
    /// are left out.
    #[cfg(feature = "kube")]
    pub fn of_object(title: String, obj: &crate::crd::Manifest) -> Graph {
        let resources = &obj.spec.resources;
        let observed = obj.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
        let nodes = resources
            .iter()
            .map(|(name, r)| {
                let status = observed.iter().find(|o| o.name == name.as_str()).map(|o| o.status.to_string());
                Node {
                    name: name.clone(),
                    type_name: r.type_ref.clone().unwrap_or_default(),
                    status: status.unwrap_or_else(|| "UNKNOWN".into()),
                }
            })
            .collect();
        let mut edges = Vec::new();
        for (to, (name, r)) in resources.iter().enumerate() {
            let index = |n: &str| resources.get_index_of(n);
            for (alias, target) in &r.dependencies {
                edges.extend(index(target).map(|from| Edge { from, to, alias: Some(alias.clone()) }));
            }
            let sites = crate::engine::expr::compile(&r.config, &format!("resources.{name}.config"))
                .map(|t| t.sites)
                .unwrap_or_default();
            let read: std::collections::BTreeSet<usize> = sites
                .iter()
                .flat_map(|site| &site.references)
                .filter_map(|path| index(path.strip_prefix("resources.")?.split('.').next()?))
                .filter(|from| !r.dependencies.values().any(|t| index(t) == Some(*from)))
                .collect();
            edges.extend(read.into_iter().map(|from| Edge { from, to, alias: None }));
        }
        Graph { title, nodes, edges }
    }

    /// The graph of `manifest`, with `statuses[i]` for resource `i`.
    pub fn of(manifest: &ValidatedManifest, statuses: Vec<String>) -> Graph {
        let nodes = manifest
            .resources
            .iter()
            .zip(statuses)
            .map(|(r, status)| Node { name: r.name.clone(), type_name: r.type_name.clone(), status })
            .collect();
        let mut edges = Vec::new();
        for (to, r) in manifest.resources.iter().enumerate() {
            for (alias, &from) in &r.aliases {
                edges.push(Edge { from, to, alias: Some(alias.clone()) });
            }
            for &from in r.implicit.iter().filter(|from| !r.aliases.values().any(|a| a == *from)) {
                edges.push(Edge { from, to, alias: None });
            }
        }
        Graph { title: manifest.name.clone(), nodes, edges }
    }

    /// A Mermaid flowchart (pastes into GitHub and GitLab markdown).
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart LR\n");
        for (i, n) in self.nodes.iter().enumerate() {
            let label = format!("{}<br/><small>{}</small><br/>{}", n.name, n.type_name, n.status);
            let _ = writeln!(out, "  r{i}[\"{}\"]:::{}", label.replace('"', "#quot;"), class(&n.status));
        }
        for e in &self.edges {
            let _ = match &e.alias {
                Some(alias) => writeln!(out, "  r{} -- \"{alias}\" --> r{}", e.from, e.to),
                None => writeln!(out, "  r{} -.-> r{}", e.from, e.to),
            };
        }
        let mut classes: Vec<&str> = self.nodes.iter().map(|n| n.status.as_str()).collect();
        classes.sort_unstable();
        classes.dedup();
        for status in classes {
            let (fill, stroke) = colours(status);
            let _ = writeln!(out, "  classDef {} fill:{fill},stroke:{stroke},color:#212121", class(status));
        }
        out
    }

    /// Graphviz DOT.
    pub fn dot(&self) -> String {
        let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
        let mut out = format!("digraph {} {{\n  rankdir=LR;\n", quote(&self.title));
        for n in &self.nodes {
            let (fill, stroke) = colours(&n.status);
            let label = format!("{}\\n{}\\n{}", n.name, n.type_name, n.status);
            let _ = writeln!(
                out,
                "  {} [shape=box, style=filled, label=\"{label}\", fillcolor=\"{fill}\", color=\"{stroke}\"];",
                quote(&n.name)
            );
        }
        for e in &self.edges {
            let (from, to) = (quote(&self.nodes[e.from].name), quote(&self.nodes[e.to].name));
            let _ = match &e.alias {
                Some(alias) => writeln!(out, "  {from} -> {to} [label={}];", quote(alias)),
                None => writeln!(out, "  {from} -> {to} [style=dashed];"),
            };
        }
        out.push_str("}\n");
        out
    }

    /// An SVG picture, laid out and drawn by layout-rs from the DOT text.
    pub fn svg(&self) -> Result<String, String> {
        use layout::backends::svg::SVGWriter;
        use layout::gv::{DotParser, GraphBuilder};
        let dot = self.dot();
        let parsed = DotParser::new(&dot).process().map_err(|e| format!("cannot lay out the graph: {e}"))?;
        let mut builder = GraphBuilder::new();
        builder.visit_graph(&parsed);
        let mut visual = builder.get();
        let mut svg = SVGWriter::new();
        visual.do_it(false, false, false, &mut svg);
        Ok(svg.finalize())
    }
}

/// A Mermaid class name for a status.
fn class(status: &str) -> String {
    status.to_ascii_lowercase()
}

/// Every event that says where a resource stood, and the status it means.
const STATUS_EVENTS: [(Event, &str); 8] = [
    (Event::ResourceValid, "VALID"),
    (Event::ResourceApplied, "VALID"),
    (Event::ResourceStale, "STALE"),
    (Event::ResourceMissing, "MISSING"),
    (Event::ResourceFailed, "FAILED"),
    (Event::ResourceBlocked, "BLOCKED"),
    (Event::ResourcePending, "PENDING"),
    (Event::ResourceDeclined, "STALE"),
];

/// Each resource's status as the log's newest observation of it says (`UNKNOWN`: never seen).
fn logged(args: &GraphArgs, manifest: &ValidatedManifest) -> Result<Vec<String>, CliError> {
    let dir = args.manifest.state.dir(&args.manifest.files);
    let unknown = || vec!["UNKNOWN".to_string(); manifest.resources.len()];
    if !dir.join(DATABASE).exists() {
        return Ok(unknown());
    }
    let log = SqliteLog::open_for_reading(&dir)?;
    let events: Vec<Event> = STATUS_EVENTS.iter().map(|(e, _)| *e).collect();
    let mut statuses = Vec::with_capacity(manifest.resources.len());
    for r in &manifest.resources {
        let latest = log.latest(&target::resource(&r.name), &events)?;
        let status = latest.and_then(|entry| STATUS_EVENTS.iter().find(|(e, _)| *e == entry.event)).map(|(_, s)| *s);
        statuses.push(status.unwrap_or("UNKNOWN").to_string());
    }
    Ok(statuses)
}

/// Each resource's status in a plan made now (recorded in the log as any plan is).
async fn live(args: &GraphArgs, manifest: ValidatedManifest, session: &Session) -> Result<Vec<String>, CliError> {
    let progress = ProgressView::new(OutputFormat::Json);
    let state = State::open(&args.manifest, false, &progress)?;
    let stop = stop_on_signals(progress, Cancel::AtOnce)?;
    let why = || "interrupted: running programs were stopped".to_string();
    let options = RunOptions { timeouts: args.manifest.timeouts.timeouts(), ..RunOptions::default() };
    if let Some(key) = &state.key {
        manifest.mask.use_fingerprint_key(key.clone());
    }
    let passed = Pass {
        manifest: Arc::new(manifest),
        executor: session.executor(&args.manifest.images, None).await?,
        log: state.log.clone(),
        mode: Mode::Plan,
        options,
        observers: Vec::new(),
        approver: &ApproveAll,
        cancel: stop.now.child_token(),
        cancelled_because: &why,
        recover: false,
        expected: None,
        recheck: false,
        inventory: crate::pass::Inventory::Off,
    }
    .run()
    .await?;
    match passed.ended {
        Ended::Planned(plan) | Ended::NotApplicable(plan) => {
            Ok(plan.entries.iter().map(|e| e.standing.label().to_string()).collect())
        }
        Ended::NotPrepared(e) => Err(e.into()),
        _ => Err(CliError::Refused("the plan ended without a plan to draw".into())),
    }
}

pub(super) async fn graph(args: GraphArgs, session: &Session) -> Result<ExitKind, CliError> {
    if matches!(args.manifest.output, super::OutputFormat::Json) {
        return Err(CliError::Refused(
            "graph: --output json: a graph is drawn as --format mermaid, dot or svg; for the resources and their \
             statuses as JSON: deployster plan --output json (or history --output json)"
                .into(),
        ));
    }
    #[cfg(feature = "kube")]
    let graph = match &args.object {
        Some(name) => {
            let (obj, _, qualified) =
                super::approve::fetch(name, args.manifest.images.pods.namespace.as_deref()).await?;
            Some(Graph::of_object(qualified, &obj))
        }
        None => None,
    };
    #[cfg(not(feature = "kube"))]
    let graph = None;
    let graph = match graph {
        Some(graph) => graph,
        None => {
            // The same validation, and the same errors, as `plan`.
            let manifest = load(&args.manifest)?;
            let statuses = match args.live {
                true => live(&args, manifest.clone(), session).await?,
                false => logged(&args, &manifest)?,
            };
            Graph::of(&manifest, statuses)
        }
    };
    let text = match args.format {
        GraphFormat::Mermaid => graph.mermaid(),
        GraphFormat::Dot => graph.dot(),
        GraphFormat::Svg => graph.svg().map_err(CliError::Refused)?,
    };
    outln!("{}", text.trim_end());
    Ok(ExitKind::Ok)
}
