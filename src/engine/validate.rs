//! Static validation: a [`LoadedManifest`] plus resolved variables becomes a
//! [`ValidatedManifest`] — names checked, types parsed, templates compiled, references and
//! dependencies resolved to indices, cycles rejected. Every problem is reported at once.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use indexmap::IndexMap;
use regex::Regex;
use serde_json::{Map, Value};

use super::expr::{self, ConfigTemplate, GLOBALS};
use super::graph::DependencyGraph;
use super::manifest::LoadedManifest;
use super::mask::Mask;
use super::suggest;
use super::typeref::{TypeRef, normalize};

/// A manifest that passed static validation; the only input the rest of the engine accepts.
#[derive(Debug, Clone)]
pub struct ValidatedManifest {
    /// How the manifest is named in messages (its first file).
    pub name: String,
    /// A short, stable hash of the manifest's content and resolved variables: the same input
    /// gives the same revision, whatever the key order or formatting.
    pub revision: String,
    pub files: Vec<PathBuf>,
    /// The manifest as written (templates unrendered): what the inventory keeps of each
    /// resource, and what a removal is planned from ([`super::prune`]).
    pub source: std::sync::Arc<LoadedManifest>,
    pub vars: Map<String, Value>,
    pub plugs: IndexMap<String, Plug>,
    /// In declaration order; indices are the graph's node numbers.
    pub resources: Vec<Resource>,
    pub graph: DependencyGraph,
    /// The variables declared `sensitive`.
    pub sensitive: Vec<String>,
    /// The manifest's `outputs`, compiled (an empty map when it declares none).
    pub outputs: ConfigTemplate,
    /// Hides their values.
    pub mask: Mask,
}

impl ValidatedManifest {
    /// What the deployment log's inventory names this manifest by: its first file's name
    /// (the state directory sits beside it), else its name.
    pub fn inventory_key(&self) -> String {
        self.files
            .first()
            .and_then(|f| f.file_name())
            .map_or_else(|| self.name.clone(), |n| n.to_string_lossy().into_owned())
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.resources.iter().position(|r| r.name == name)
    }
}

/// A plug with its path made absolute and its allow-lists compiled.
#[derive(Debug, Clone)]
pub struct Plug {
    pub name: String,
    /// Where it is on this machine (empty for a plug of the cluster).
    pub path: PathBuf,
    /// The cluster's object it is, for types run as Pods.
    pub cluster: Option<ClusterPlug>,
    pub read_only: bool,
    resource_names: Vec<Regex>,
    resource_types: Vec<Regex>,
}

/// A plug that is an object of the cluster rather than a path: what a Pod mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterPlug {
    /// Read-only: a Secret (one key, or all).
    Secret { name: String, key: Option<String> },
    /// Read-only: a ConfigMap (one key, or all).
    ConfigMap { name: String, key: Option<String> },
    /// Writable: a PersistentVolumeClaim.
    Claim { name: String },
}

impl ClusterPlug {
    /// What it is, for messages: "Secret `db`".
    pub fn describe(&self) -> String {
        match self {
            ClusterPlug::Secret { name, .. } => format!("the Secret `{name}`"),
            ClusterPlug::ConfigMap { name, .. } => format!("the ConfigMap `{name}`"),
            ClusterPlug::Claim { name } => format!("the PersistentVolumeClaim `{name}`"),
        }
    }

    pub fn writable(&self) -> bool {
        matches!(self, ClusterPlug::Claim { .. })
    }
}

impl Plug {
    /// Whether the allow-lists let `resource` have this plug (a plug it may not have is treated
    /// as absent for it).
    pub fn allowed_for(&self, resource: &Resource) -> bool {
        let matches = |list: &[Regex], text: &str| list.is_empty() || list.iter().any(|r| r.is_match(text));
        matches(&self.resource_names, &resource.name) && matches(&self.resource_types, &resource.type_name)
    }
}

/// A validated resource.
#[derive(Debug, Clone)]
pub struct Resource {
    pub name: String,
    /// The type as written in the manifest (sent to the program as `type`).
    pub type_name: String,
    pub type_ref: TypeRef,
    pub readonly: bool,
    /// Alias → index of the resource depended on.
    pub aliases: IndexMap<String, usize>,
    /// Resources read through `resources.<name>` (implicit dependencies).
    pub implicit: BTreeSet<usize>,
    pub config: ConfigTemplate,
    /// The declaring manifest file's directory.
    pub workspace: PathBuf,
    /// The manifest's `env` with the resource's over it, rendered.
    pub env: Vec<(String, String)>,
    /// Its own time limits, where it sets them.
    pub timeouts: Limits,
}

/// A resource's own time limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub action: Option<std::time::Duration>,
    pub state: Option<std::time::Duration>,
    pub progress: Option<std::time::Duration>,
}

impl Resource {
    /// Where this resource's config sits, for messages: `resources.<name>.config`.
    pub fn config_prefix(&self) -> String {
        format!("resources.{}.config", self.name)
    }
}

/// One thing wrong with a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The resource concerned, when there is one.
    pub resource: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.resource {
            Some(r) => write!(f, "resource `{r}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A manifest that failed validation, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid {
    pub manifest: String,
    pub problems: Vec<Problem>,
}

impl Invalid {
    pub fn reason(&self) -> &'static str {
        "InvalidManifest"
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "manifest {} is invalid", self.manifest)?;
        if let [only] = self.problems.as_slice() {
            return write!(f, ": {only}");
        }
        write!(f, " ({} problems):", self.problems.len())?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// The revision of a manifest: a [`content_hash`] of the spec and the variables.
pub fn revision(spec: &super::manifest::ManifestSpec, vars: &Map<String, Value>) -> String {
    content_hash(&serde_json::json!({"spec": spec, "vars": vars}))
}

pub use super::digest::content_hash;

fn identifier() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new("^[A-Za-z_][A-Za-z0-9_]{0,62}$").expect("valid pattern"))
}

/// Names the expression context defines itself; an alias may not take them.
const RESERVED: &[&str] = &["vars", "resources"];

struct ProblemList {
    problems: Vec<Problem>,
}

impl ProblemList {
    fn report(&mut self, resource: Option<&str>, message: impl Into<String>) {
        self.problems.push(Problem { resource: resource.map(str::to_string), message: message.into() });
    }

    fn check_name(&mut self, resource: Option<&str>, kind: &str, name: &str) -> bool {
        let ok = identifier().is_match(name);
        if !ok {
            self.report(
                resource,
                format!("invalid {kind} name `{name}`: use letters, digits and `_`, starting with a letter or `_` (at most 63)"),
            );
        }
        ok
    }
}

/// Validates a loaded manifest against resolved variables.
pub fn validate(loaded: &LoadedManifest, vars: Map<String, Value>) -> Result<ValidatedManifest, Invalid> {
    validate_with(loaded, vars, false)
}

/// Validates a manifest that a controller keeps: one that declares no resources is valid
/// there — its passes remove what it held, behind the deletion guard — where a file of only
/// vars is a mistake.
pub fn validate_kept(loaded: &LoadedManifest, vars: Map<String, Value>) -> Result<ValidatedManifest, Invalid> {
    validate_with(loaded, vars, true)
}

fn validate_with(
    loaded: &LoadedManifest,
    vars: Map<String, Value>,
    empty_allowed: bool,
) -> Result<ValidatedManifest, Invalid> {
    let mut checker = ProblemList { problems: Vec::new() };
    if loaded.spec.resources.is_empty() && !empty_allowed {
        // An empty `resources:` (or a file of only vars) is almost always a mistake: a manifest
        // that "applies" nothing must not look like a success.
        checker.report(None, "declares no resources (under `resources:`)");
    }
    let plugs = check_plugs(loaded, &mut checker);
    let names: Vec<&String> = loaded.spec.resources.keys().collect();
    let mut resources = Vec::with_capacity(names.len());
    for (name, spec) in &loaded.spec.resources {
        checker.check_name(None, "resource", name);
        let workspace = loaded.dir_of(loaded.resource_origin.get(name).copied().unwrap_or(0));
        if let Some(mut resource) = check_resource(name, spec, &names, &vars, workspace, &mut checker) {
            let mut env = loaded.spec.env.clone();
            env.extend(spec.env.clone());
            resource.env = check_env(&env, name, &vars, &mut checker);
            resources.push(resource);
        }
    }
    let outputs = Value::Object(loaded.spec.outputs.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    let outputs = match expr::compile(&outputs, "outputs") {
        Ok(outputs) => {
            check_references(None, &outputs, "outputs", &Aliases::default(), &names, &vars, &mut checker);
            outputs
        }
        Err(e) => {
            checker.report(None, e.to_string());
            ConfigTemplate { value: Value::Null, sites: Vec::new() }
        }
    };
    for name in &loaded.spec.sensitive {
        if !vars.contains_key(name) {
            checker.report(None, format!("sensitive: `{name}` is not a variable"));
        }
    }
    if let Err(problems) = loaded.spec.moves() {
        problems.into_iter().for_each(|p| checker.report(None, p));
    }
    let graph = if checker.problems.is_empty() { build_graph(&resources, &mut checker) } else { None };
    match graph {
        Some(graph) if checker.problems.is_empty() => Ok(ValidatedManifest {
            mask: Mask::of(loaded.spec.sensitive.iter().filter_map(|name| vars.get(name))),
            sensitive: loaded.spec.sensitive.clone(),
            outputs,
            name: loaded.display_name(),
            revision: revision(&loaded.spec, &vars),
            files: loaded.files.clone(),
            source: std::sync::Arc::new(loaded.clone()),
            vars,
            plugs,
            resources,
            graph,
        }),
        _ => Err(Invalid { manifest: loaded.display_name(), problems: checker.problems }),
    }
}

fn check_plugs(loaded: &LoadedManifest, checker: &mut ProblemList) -> IndexMap<String, Plug> {
    let mut plugs = IndexMap::new();
    for (name, spec) in &loaded.spec.plugs {
        checker.check_name(None, "plug", name);
        let mut compile = |list: &[String], field: &str| -> Vec<Regex> {
            list.iter()
                .filter_map(|p| match Regex::new(p) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        checker.report(None, format!("plug `{name}`: `{field}` pattern `{p}` is invalid: {e}"));
                        None
                    }
                })
                .collect()
        };
        let resource_names = compile(&spec.resource_names, "resource_names");
        let resource_types = compile(&spec.resource_types, "resource_types");
        let base = loaded.dir_of(loaded.plug_origin.get(name).copied().unwrap_or(0));
        let cluster = [
            spec.secret.as_ref().map(|o| ClusterPlug::Secret { name: o.name.clone(), key: o.key.clone() }),
            spec.config_map.as_ref().map(|o| ClusterPlug::ConfigMap { name: o.name.clone(), key: o.key.clone() }),
            spec.persistent_volume_claim.as_ref().map(|c| ClusterPlug::Claim { name: c.claim_name.clone() }),
        ];
        let mut given: Vec<ClusterPlug> = cluster.into_iter().flatten().collect();
        let sources = given.len() + usize::from(spec.path.is_some());
        if sources != 1 {
            checker.report(
                None,
                format!(
                    "plug `{name}`: give exactly one of `path`, `secret`, `configMap` or `persistentVolumeClaim` \
                     ({sources} given)"
                ),
            );
        }
        let cluster = given.pop();
        let path = spec.path.as_ref().map(|p| normalize(&base.join(p))).unwrap_or_default();
        plugs.insert(
            name.clone(),
            Plug {
                name: name.clone(),
                path,
                read_only: spec.read_only || cluster.as_ref().is_some_and(|c| !c.writable()),
                cluster,
                resource_names,
                resource_types,
            },
        );
    }
    plugs
}

fn check_resource(
    name: &str,
    spec: &super::manifest::ResourceSpec,
    names: &[&String],
    vars: &Map<String, Value>,
    workspace: PathBuf,
    checker: &mut ProblemList,
) -> Option<Resource> {
    let at = Some(name);
    let type_ref = match spec.type_ref.as_deref().map(str::trim) {
        None | Some("") => {
            checker.report(at, "`type` is missing");
            None
        }
        Some(text) => match TypeRef::parse(text, &workspace) {
            Ok(t) => check_program(&t, name, checker).then_some(t),
            Err(e) => {
                checker.report(at, e.to_string());
                None
            }
        },
    };
    let index_of = |target: &str| names.iter().position(|n| n.as_str() == target);
    let mut aliases = Aliases::default();
    for (alias, target) in &spec.dependencies {
        if !checker.check_name(at, "dependency alias", alias) {
            continue;
        }
        if RESERVED.contains(&alias.as_str()) {
            checker.report(at, format!("dependency alias `{alias}` is reserved (the expression context defines it)"));
        }
        match index_of(target) {
            Some(i) => {
                aliases.resolved.insert(alias.clone(), i);
            }
            None => {
                let hint = suggest::hint(target, names.iter().map(|n| n.as_str()));
                checker.report(at, format!("dependency `{alias}` names unknown resource `{target}`{hint}"));
                aliases.unresolved.insert(alias.clone());
            }
        }
    }
    if !spec.config.is_object() {
        checker.report(at, "`config` must be a mapping");
        return None;
    }
    let prefix = format!("resources.{name}.config");
    let config = match expr::compile(&spec.config, &prefix) {
        Ok(c) => c,
        Err(e) => {
            checker.report(at, e.to_string());
            return None;
        }
    };
    let implicit = check_references(Some(name), &config, &prefix, &aliases, names, vars, checker);
    let mut limit = |which: &str, text: Option<&str>| {
        let text = text?;
        super::positive_duration(text).map_err(|why| checker.report(at, format!("timeouts.{which} {why}"))).ok()
    };
    Some(Resource {
        name: name.to_string(),
        type_name: spec.type_ref.clone().unwrap_or_default().trim().to_string(),
        type_ref: type_ref?,
        readonly: spec.readonly,
        aliases: aliases.resolved,
        implicit,
        config,
        workspace,
        env: Vec::new(),
        timeouts: Limits {
            action: limit("action", spec.timeouts.action.as_deref()),
            state: limit("state", spec.timeouts.state.as_deref()),
            progress: limit("progress", spec.timeouts.progress.as_deref()),
        },
    })
}

/// The environment of a resource's programs, rendered against the variables. Names are
/// environment names; `DEPLOYSTER_*` is Deployster's own.
fn check_env(
    env: &IndexMap<String, String>,
    resource: &str,
    vars: &Map<String, Value>,
    checker: &mut ProblemList,
) -> Vec<(String, String)> {
    static NAME: OnceLock<Regex> = OnceLock::new();
    let valid = NAME.get_or_init(|| Regex::new("^[A-Za-z_][A-Za-z0-9_]*$").expect("valid pattern"));
    let context = Value::Object(super::vars::context(vars));
    let mut rendered = Vec::new();
    for (name, value) in env {
        let at = format!("env `{name}`");
        if !valid.is_match(name) {
            checker.report(Some(resource), format!("{at}: not an environment variable name"));
        } else if name.starts_with("DEPLOYSTER_") {
            checker.report(Some(resource), format!("{at}: `DEPLOYSTER_*` names are reserved: Deployster sets them"));
        }
        let text = Value::String(value.clone());
        let value = expr::compile(&text, &format!("env.{name}"))
            .and_then(|t| expr::render(&t, &context, &format!("env.{name}")));
        match value {
            Ok(Value::String(s)) => rendered.push((name.clone(), s)),
            Ok(other) => rendered.push((name.clone(), other.to_string())),
            Err(e) => checker.report(Some(resource), format!("{e} (env values may use variables only)")),
        }
    }
    rendered
}

/// A local program must exist and be executable before anything runs.
fn check_program(type_ref: &TypeRef, name: &str, checker: &mut ProblemList) -> bool {
    let TypeRef::Local(path) = type_ref else { return true };
    match executable_problem(path) {
        None => true,
        Some(problem) => {
            checker.report(Some(name), problem);
            false
        }
    }
}

/// Why `path` cannot be run as a program, if it cannot.
pub fn executable_problem(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(format!("resource program not found: {}", path.display()))
        }
        Err(e) => Some(format!("resource program {} cannot be read: {e}", path.display())),
        Ok(m) if !m.is_file() => Some(format!("resource program {} is not a file", path.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Some(format!("resource program {} is not executable (chmod +x it)", path.display()))
        }
        Ok(_) => None,
    }
}

/// A resource's dependency aliases: those naming a resource, and those naming none (reported
/// once, where declared: what reads them is not reported again).
#[derive(Default)]
struct Aliases {
    resolved: IndexMap<String, usize>,
    unresolved: BTreeSet<String>,
}

/// Checks every name a resource's templates read; returns the implicit dependencies.
/// `name`: the resource whose config it is (`None`: the manifest's outputs).
fn check_references(
    name: Option<&str>,
    config: &ConfigTemplate,
    prefix: &str,
    aliases: &Aliases,
    names: &[&String],
    vars: &Map<String, Value>,
    checker: &mut ProblemList,
) -> BTreeSet<usize> {
    let mut implicit = BTreeSet::new();
    for site in &config.sites {
        let path = expr::full_path(prefix, &site.path);
        for reference in &site.references {
            let mut parts = reference.split('.');
            let root = parts.next().unwrap_or_default();
            let second = parts.next();
            let resource_names = || names.iter().map(|n| n.as_str());
            let problem = match (root, second) {
                (alias, _) if aliases.resolved.contains_key(alias) || aliases.unresolved.contains(alias) => None,
                ("resources", None) => Some("read other resources as `resources.<name>`".to_string()),
                ("resources", Some(target)) => match names.iter().position(|n| n.as_str() == target) {
                    Some(_) if Some(target) == name => Some(format!("`{reference}` refers to the resource itself")),
                    Some(i) => {
                        implicit.insert(i);
                        None
                    }
                    None => Some(format!(
                        "`{reference}` refers to unknown resource `{target}`{}",
                        suggest::hint(target, resource_names())
                    )),
                },
                ("vars", Some(var)) if !vars.contains_key(var) => Some(format!(
                    "undefined variable `vars.{var}`{}",
                    suggest::hint(var, vars.keys().map(String::as_str))
                )),
                ("vars", _) => None,
                (var, _) if vars.contains_key(var) || GLOBALS.contains(&var) => None,
                (unknown, _) => {
                    let known = vars.keys().chain(aliases.resolved.keys()).map(String::as_str);
                    let known = known.chain(["vars", "resources"]);
                    match suggest::closest(unknown, known) {
                        Some(meant) => Some(format!("undefined variable `{unknown}` (did you mean `{meant}`?)")),
                        None => Some(format!(
                            "undefined variable `{unknown}` (not a variable, a dependency alias, `vars` or `resources`)"
                        )),
                    }
                }
            };
            if let Some(problem) = problem {
                checker.report(name, format!("{path}: {problem} in `{}`", site.source));
            }
        }
    }
    implicit
}

fn build_graph(resources: &[Resource], checker: &mut ProblemList) -> Option<DependencyGraph> {
    let edges: Vec<(usize, usize)> = resources
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.aliases.values().chain(r.implicit.iter()).map(move |&d| (i, d)))
        .collect();
    match DependencyGraph::build(resources.len(), &edges) {
        Ok(g) => Some(g),
        Err(cycle) => {
            let walk: Vec<&str> = cycle.iter().map(|&i| resources[i].name.as_str()).collect();
            checker.report(None, format!("dependency cycle (each depends on the next): {}", walk.join(" -> ")));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::manifest::{LoadedManifest, parse_document};
    use serde_json::json;

    fn check(yaml: &str, vars: Value) -> Result<ValidatedManifest, Invalid> {
        let spec = parse_document(yaml, false).unwrap();
        let Value::Object(vars) = vars else { panic!() };
        validate(&LoadedManifest::from_spec("/m/manifest.yaml", spec), vars)
    }

    fn problems(yaml: &str) -> Vec<String> {
        check(yaml, json!({})).unwrap_err().problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_valid_manifest_resolves_aliases_and_implicit_edges() {
        let m = check(
            r#"
resources:
  app:
    type: builtin/file
    dependencies: {dir: data}
    config: {path: "{{ dir.state.path }}/{{ resources.other.state.x }}", content: "{{ env }}"}
  data: {type: builtin/directory, config: {path: /tmp/x}}
  other: {type: builtin/directory, config: {path: "{{ vars.env }}"}}
"#,
            json!({"env": "dev"}),
        )
        .unwrap();
        let app = &m.resources[0];
        assert_eq!(app.aliases["dir"], 1);
        assert_eq!(app.implicit, BTreeSet::from([2]));
        assert_eq!(m.graph.dependencies(0), &[1, 2]);
        assert_eq!(m.graph.topological().last(), Some(&0));
    }

    #[test]
    fn the_revision_depends_on_content_not_on_formatting() {
        let a =
            check("vars: {x: 1, y: 2}\nresources:\n  r: {type: builtin/file, config: {p: 1, q: 2}}\n", json!({"v": 1}));
        let b =
            check("resources:\n  r: {config: {q: 2, p: 1}, type: builtin/file}\nvars: {y: 2, x: 1}\n", json!({"v": 1}));
        let c =
            check("vars: {x: 1, y: 2}\nresources:\n  r: {type: builtin/file, config: {p: 1, q: 3}}\n", json!({"v": 1}));
        let d =
            check("vars: {x: 1, y: 2}\nresources:\n  r: {type: builtin/file, config: {p: 1, q: 2}}\n", json!({"v": 2}));
        let (a, b, c, d) = (a.unwrap().revision, b.unwrap().revision, c.unwrap().revision, d.unwrap().revision);
        assert_eq!(a.len(), 12);
        assert_eq!(a, b, "key order and formatting do not matter");
        assert_ne!(a, c, "config matters");
        assert_ne!(a, d, "resolved variables matter");
    }

    #[test]
    fn a_cycle_is_printed_as_a_walk() {
        let p = problems(
            "resources:\n  a: {type: builtin/file, dependencies: {x: b}}\n  b: {type: builtin/file, config: {p: '{{ resources.a.state }}'}}\n",
        );
        assert_eq!(p, ["dependency cycle (each depends on the next): a -> b -> a"]);
    }

    #[test]
    fn every_problem_is_reported_with_its_resource() {
        let p = problems(
            r#"
resources:
  bad-name: {type: builtin/file}
  notype: {config: {}}
  unknown_dep: {type: builtin/file, dependencies: {d: ghost}}
  undefined: {type: builtin/file, config: {a: {b: "{{ nope }}"}}}
  badvar: {type: builtin/file, config: {a: "{{ vars.nope }}"}}
  badres: {type: builtin/file, config: {a: "{{ resources.ghost.state }}"}}
  badtype: {type: "Not An Image"}
  missing_program: {type: ./does/not/exist}
  reserved: {type: builtin/file, dependencies: {vars: notype}}
"#,
        );
        let expected = [
            "invalid resource name `bad-name`",
            "resource `notype`: `type` is missing",
            "resource `unknown_dep`: dependency `d` names unknown resource `ghost`",
            "resource `undefined`: resources.undefined.config.a.b: undefined variable `nope`",
            "resource `badvar`: resources.badvar.config.a: undefined variable `vars.nope`",
            "resource `badres`: resources.badres.config.a: `resources.ghost.state` refers to unknown resource `ghost`",
            "resource `badtype`: `Not An Image` is not a valid type",
            "resource `missing_program`: resource program not found: /m/does/not/exist",
            "resource `reserved`: dependency alias `vars` is reserved",
        ];
        for e in expected {
            assert!(p.iter().any(|p| p.contains(e)), "missing {e:?} in {p:#?}");
        }
        assert_eq!(p.len(), expected.len(), "{p:#?}");
    }

    #[test]
    fn plug_allow_lists_match_names_and_types() {
        let m = check(
            r#"
plugs:
  creds: {path: ./c, resource_names: ["^app_"]}
  typed: {path: /t, resource_types: ["^builtin/dir"]}
resources:
  app_x: {type: builtin/file}
  other: {type: builtin/directory}
"#,
            json!({}),
        )
        .unwrap();
        let (creds, typed) = (&m.plugs["creds"], &m.plugs["typed"]);
        assert_eq!(creds.path, PathBuf::from("/m/c"));
        assert!(creds.allowed_for(&m.resources[0]) && !creds.allowed_for(&m.resources[1]));
        assert!(!typed.allowed_for(&m.resources[0]) && typed.allowed_for(&m.resources[1]));
    }

    #[test]
    fn invalid_plug_patterns_are_reported() {
        let p = problems("plugs:\n  p: {path: x, resource_names: ['(']}\nresources:\n  r: {type: builtin/file}\n");
        assert!(p[0].contains("plug `p`: `resource_names` pattern `(` is invalid"), "{p:?}");
    }

    #[test]
    fn a_plug_is_a_path_or_one_object_of_the_cluster() {
        let m = check(
            r#"
plugs:
  creds: {secret: {name: db, key: password}}
  settings: {configMap: {name: app}}
  data: {persistentVolumeClaim: {claimName: pvc}}
resources:
  r: {type: builtin/file}
"#,
            json!({}),
        )
        .unwrap();
        assert_eq!(
            m.plugs["creds"].cluster,
            Some(ClusterPlug::Secret { name: "db".into(), key: Some("password".into()) })
        );
        assert!(m.plugs["creds"].read_only && m.plugs["settings"].read_only, "Secrets and ConfigMaps are read-only");
        assert_eq!(m.plugs["data"].cluster, Some(ClusterPlug::Claim { name: "pvc".into() }));
        assert!(!m.plugs["data"].read_only, "a claim can be written");
        let p = problems(
            "plugs:\n  both: {path: x, secret: {name: s}}\n  none: {read_only: true}\nresources:\n  r: {type: builtin/file}\n",
        );
        assert!(p.iter().any(|p| p.contains("plug `both`: give exactly one of `path`, `secret`")), "{p:?}");
        assert!(p.iter().any(|p| p.contains("plug `none`: give exactly one") && p.contains("(0 given)")), "{p:?}");
    }
}
