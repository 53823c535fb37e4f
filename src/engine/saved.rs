//! A plan saved to a file (`deployster plan --out`) and the rule for applying one (seed 003):
//! what was known when the plan was made must be what is found when it is applied — every
//! resource's status, state and action list, and the manifest and its variables. Values that
//! were unknown (pending resources) may become known.
//!
//! A saved plan holds digests, never values: no rendered config, no state, no plug content,
//! and no value of a `sensitive` variable (its `--var` is kept by name only, to be given again).
//! A checksum over the rest refuses a file edited by hand.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::plan::{Plan, ResourceEntry, Standing};
use super::protocol::{Action, StateResponse};
use super::validate::{ValidatedManifest, content_hash};
use super::vars::VarSource;

/// The format this version writes and reads.
pub const FORMAT: &str = "deployster-plan/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPlan {
    pub format: String,
    /// The manifest's name in messages (its first file).
    pub manifest: String,
    /// The manifest files, absolute.
    pub files: Vec<PathBuf>,
    /// `--var` and `--var-file` as given, in order.
    pub vars: Vec<SavedVar>,
    /// The manifest's revision (content and variables).
    pub revision: String,
    /// The run that made the plan.
    pub run_id: String,
    /// The CLI's workspace (`--workspace`), unless the default: applying the plan records it
    /// in that workspace's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// `plan --replace`: the resources it deletes and creates again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace: Vec<String>,
    pub resources: Vec<SavedResource>,
    /// The resources leaving the manifest (its inventory holds them, it no longer declares
    /// them), and what applying does to each: `DELETE`, `FORGOTTEN`, `ABSENT`, `KEPT`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removals: Vec<SavedRemoval>,
    /// What the revision was made of, each part's digest (keyed where values may be
    /// sensitive): a refused plan says which file, variable or resource changed.
    #[serde(default, skip_serializing_if = "Parts::is_empty")]
    pub parts: Parts,
    /// Over everything above: a file edited by hand is refused.
    #[serde(default)]
    pub checksum: String,
}

/// The digests of what a manifest's revision is made of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Parts {
    /// Each manifest file's content, by its path.
    pub files: BTreeMap<String, String>,
    /// Each variable's value (defaults, files and `--var` resolved), by its name.
    pub vars: BTreeMap<String, String>,
    /// Each resource's declaration as written, by its name.
    pub resources: BTreeMap<String, String>,
}

impl Parts {
    fn is_empty(&self) -> bool {
        self.files.is_empty() && self.vars.is_empty() && self.resources.is_empty()
    }

    /// The parts of `manifest`'s revision, its files as they are on disk now.
    pub fn of(manifest: &ValidatedManifest) -> Parts {
        let files = manifest
            .files
            .iter()
            .map(|f| {
                let read = std::fs::read(f).map_or(Value::Null, |bytes| json!(String::from_utf8_lossy(&bytes)));
                (std::path::absolute(f).unwrap_or(f.clone()).display().to_string(), manifest.mask.digest(&read))
            })
            .collect();
        let vars = manifest.vars.iter().map(|(k, v)| (k.clone(), manifest.mask.digest(v))).collect();
        let resources = manifest
            .source
            .spec
            .resources
            .iter()
            .map(|(name, spec)| (name.clone(), content_hash(&json!(spec))))
            .collect();
        Parts { files, vars, resources }
    }

    /// What differs from `self` in `now`, a line each: `kind` names what a map holds.
    fn differences(&self, now: &Parts) -> Vec<String> {
        let mut found = Vec::new();
        let kinds = [
            ("file", &self.files, &now.files),
            ("variable", &self.vars, &now.vars),
            ("resource", &self.resources, &now.resources),
        ];
        for (kind, was, is) in kinds {
            for name in was.keys().chain(is.keys().filter(|k| !was.contains_key(*k))) {
                let what = match (was.get(name), is.get(name)) {
                    (Some(a), Some(b)) if a == b => continue,
                    (Some(_), Some(_)) => "changed since the plan",
                    (Some(_), None) => "is gone since the plan",
                    _ => "is new since the plan",
                };
                let named = if kind == "file" { name.clone() } else { format!("`{name}`") };
                found.push(format!("{kind} {named} {what}"));
            }
        }
        found
    }
}

/// One `--var` or `--var-file` the plan was made with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SavedVar {
    Var {
        key: String,
        value: String,
    },
    /// A `--var` of a sensitive variable: its value is not kept.
    SensitiveVar {
        key: String,
    },
    File {
        path: PathBuf,
    },
}

/// One resource as the plan found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedResource {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// VALID, STALE, MISSING, PENDING (or FAILED, BLOCKED: such a plan is not applicable).
    pub status: String,
    /// A digest of the state it reported (VALID) or of its stale state.
    pub state_digest: Option<String>,
    /// A digest of its type and rendered config.
    pub inputs_digest: Option<String>,
    pub actions: Vec<String>,
    /// Config values unknown until a dependency is applied: `path = expression`.
    pub unknown_inputs: Vec<String>,
    /// A pending resource read with its dependencies' states as found: what it was found to be
    /// (`VALID`, `STALE`, `MISSING`; its state digest and actions above are those it was found
    /// with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
}

/// One resource leaving the manifest, as the plan found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedRemoval {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub status: String,
}

fn saved_removals(plan: &Plan) -> Vec<SavedRemoval> {
    plan.removals
        .iter()
        .map(|r| SavedRemoval {
            name: r.name.clone(),
            type_name: r.type_name.clone(),
            status: r.removal.label().into(),
        })
        .collect()
}

/// Why a saved plan cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SavedPlanError {
    #[error("plan file {path}: {message}")]
    Unreadable { path: String, message: String },
    #[error(
        "plan file {path}: the plan was made with the sensitive variable `{key}` set on the command line, and its value is never kept: give `--sensitive-var {key}=…` again"
    )]
    SensitiveVarMissing { path: String, key: String },
}

impl SavedPlanError {
    pub fn reason(&self) -> &'static str {
        match self {
            SavedPlanError::Unreadable { .. } => "InvalidPlanFile",
            SavedPlanError::SensitiveVarMissing { .. } => "MissingVariable",
        }
    }
}

/// The state kept of a STALE or MISSING answer (`{}` when it gave none), and its action names.
fn needing(stale_state: &Option<Value>, actions: &[Action]) -> (Option<Value>, Vec<String>) {
    (Some(stale_state.clone().unwrap_or_else(|| json!({}))), actions.iter().map(|a| a.name.clone()).collect())
}

/// The state and the action names a state action answered.
fn answered(response: &StateResponse) -> (Option<serde_json::Value>, Vec<String>) {
    match response {
        StateResponse::Valid { state } => (Some(state.clone()), Vec::new()),
        StateResponse::NeedsActions { stale_state, actions, .. } => needing(stale_state, actions),
    }
}

fn saved_resource(manifest: &ValidatedManifest, i: usize, entry: &ResourceEntry) -> SavedResource {
    let (state, actions, unknown_inputs, found) = match &entry.standing {
        Standing::Valid { state, .. } => (Some(state.clone()), Vec::new(), Vec::new(), None),
        Standing::NeedsActions { stale_state, actions, .. } => {
            let (state, actions) = needing(stale_state, actions);
            (state, actions, Vec::new(), None)
        }
        Standing::Pending { unknown_inputs, found, .. } => {
            let (state, actions) = found.as_deref().map(answered).unwrap_or_default();
            let unknown = unknown_inputs.iter().map(|u| format!("{} = {}", u.path, u.expression)).collect();
            (state, actions, unknown, found.as_ref().map(|f| f.status().to_string()))
        }
        _ => (None, Vec::new(), Vec::new(), None),
    };
    let type_name = manifest.resources[i].type_name.clone();
    SavedResource {
        name: entry.name.clone(),
        inputs_digest: entry.config.as_ref().map(|c| manifest.mask.digest(&json!({"type": type_name, "config": c}))),
        type_name,
        status: entry.standing.label().to_string(),
        state_digest: state.as_ref().map(|s| manifest.mask.digest(s)),
        actions,
        unknown_inputs,
        found,
    }
}

impl SavedPlan {
    /// The plan `plan` of `manifest`, made with the variables `sources`.
    pub fn new(plan: &Plan, manifest: &ValidatedManifest, sources: &[VarSource]) -> SavedPlan {
        let sensitive = |key: &str| manifest.sensitive.iter().any(|s| key.split('.').next() == Some(s.as_str()));
        let vars = sources
            .iter()
            .map(|source| match source {
                VarSource::Sensitive { key, .. } => SavedVar::SensitiveVar { key: key.clone() },
                VarSource::Assignment { key, .. } if sensitive(key) => SavedVar::SensitiveVar { key: key.clone() },
                VarSource::Assignment { key, value } => SavedVar::Var { key: key.clone(), value: value.clone() },
                VarSource::File(path) => SavedVar::File { path: std::path::absolute(path).unwrap_or(path.clone()) },
            })
            .collect();
        let resources = plan.entries.iter().enumerate().map(|(i, e)| saved_resource(manifest, i, e)).collect();
        let mut saved = SavedPlan {
            format: FORMAT.into(),
            manifest: manifest.name.clone(),
            files: manifest.files.iter().map(|f| std::path::absolute(f).unwrap_or(f.clone())).collect(),
            vars,
            revision: manifest.revision.clone(),
            run_id: plan.run_id.clone(),
            workspace: None,
            replace: Vec::new(),
            resources,
            removals: saved_removals(plan),
            parts: Parts::default(),
            checksum: String::new(),
        };
        saved.checksum = saved.expected_checksum();
        saved
    }

    /// The plan, with the digests of what its revision is made of (the files read now), so
    /// that a plan file refused later names the file, variable or resource that changed.
    pub fn with_parts(mut self, manifest: &ValidatedManifest) -> SavedPlan {
        self.parts = Parts::of(manifest);
        self.checksum = self.expected_checksum();
        self
    }

    /// The plan, made with `--replace` of these resources.
    pub fn replacing(mut self, replace: &[String]) -> SavedPlan {
        self.replace = replace.to_vec();
        self.checksum = self.expected_checksum();
        self
    }

    /// The plan, made in `workspace`.
    pub fn in_workspace(mut self, workspace: Option<&str>) -> SavedPlan {
        self.workspace = workspace.map(str::to_string);
        self.checksum = self.expected_checksum();
        self
    }

    /// A digest of what the plan knew — the revision and every resource's status, state and
    /// config digests and actions — whoever made it and when.
    pub fn digest(&self) -> String {
        let mut what = json!({"revision": self.revision, "resources": self.resources});
        if !self.removals.is_empty() {
            what["removals"] = json!(self.removals);
        }
        content_hash(&what)
    }

    fn expected_checksum(&self) -> String {
        let mut value = serde_json::to_value(self).expect("plans serialize");
        value["checksum"] = json!("");
        content_hash(&value)
    }

    /// The file's text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plans serialize") + "\n"
    }

    /// Reads a plan file's text: JSON of this format, unedited.
    pub fn parse(text: &str, path: &str) -> Result<SavedPlan, SavedPlanError> {
        let err = |message: String| SavedPlanError::Unreadable { path: path.to_string(), message };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err(format!("not a plan: not JSON ({e})")))?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(err(format!(
                    "written in format `{other}`, and this deployster reads `{FORMAT}`: make the plan again"
                )));
            }
            None => return Err(err("not a plan: it has no `format`".into())),
        }
        let saved: SavedPlan = serde_json::from_value(value).map_err(|e| err(format!("not a plan: {e}")))?;
        if saved.checksum != saved.expected_checksum() {
            return Err(err(
                "it was changed after it was written (its checksum does not match): make the plan again".into()
            ));
        }
        Ok(saved)
    }

    /// The variable sources to load the manifest with: the plan's, each sensitive one taken
    /// from `given` (the command line's), then the rest of `given`.
    pub fn var_sources(&self, given: &[VarSource], path: &str) -> Result<Vec<VarSource>, SavedPlanError> {
        let mut sources = Vec::new();
        for var in &self.vars {
            match var {
                SavedVar::Var { key, value } => {
                    sources.push(VarSource::Assignment { key: key.clone(), value: value.clone() })
                }
                SavedVar::File { path } => sources.push(VarSource::File(path.clone())),
                SavedVar::SensitiveVar { key } => {
                    let found = given.iter().any(|g| {
                        matches!(g, VarSource::Assignment { key: k, .. } | VarSource::Sensitive { key: k, .. } if k == key)
                    });
                    if !found {
                        return Err(SavedPlanError::SensitiveVarMissing { path: path.to_string(), key: key.clone() });
                    }
                }
            }
        }
        sources.extend(given.iter().cloned());
        Ok(sources)
    }

    /// How `now` (a plan of `manifest` made just now) differs from this one, one line per
    /// difference; empty when it may be applied as this plan.
    pub fn differences(&self, now: &Plan, manifest: &ValidatedManifest) -> Vec<String> {
        let mut found = Vec::new();
        if self.revision != manifest.revision {
            let parts = self.parts.differences(&Parts::of(manifest));
            found.push(format!(
                "the manifest or its variables changed: revision {} when planned, {} now{}",
                self.revision,
                manifest.revision,
                if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) }
            ));
        }
        let leaving = |removals: &[SavedRemoval]| {
            let listed: Vec<String> = removals.iter().map(|r| format!("{} ({})", r.name, r.status)).collect();
            if listed.is_empty() { "none".to_string() } else { listed.join(", ") }
        };
        let (planned, now_leaving) = (leaving(&self.removals), leaving(&saved_removals(now)));
        if planned != now_leaving {
            found.push(format!("what leaves the manifest differs: {planned} when planned, {now_leaving} now"));
        }
        let was: Vec<&str> = self.resources.iter().map(|r| r.name.as_str()).collect();
        let is: Vec<&str> = now.entries.iter().map(|e| e.name.as_str()).collect();
        if was != is {
            found.push(format!("the resources differ: {} when planned, {} now", was.join(", "), is.join(", ")));
            return found;
        }
        for (i, (saved, entry)) in self.resources.iter().zip(&now.entries).enumerate() {
            // Unknown when planned: whatever is found now is new knowledge, not a contradiction.
            if saved.status == "PENDING" && saved.found.is_none() {
                continue;
            }
            let current = saved_resource(manifest, i, entry);
            let name = &saved.name;
            let shown = |r: &SavedResource| match &r.found {
                Some(found) => format!("{} (found {found} before its dependencies' actions)", r.status),
                None => r.status.clone(),
            };
            if (&current.status, &current.found) != (&saved.status, &saved.found) {
                found.push(format!("resource `{name}`: {} when planned, {} now", shown(saved), shown(&current)));
            } else if current.state_digest != saved.state_digest {
                found.push(format!("resource `{name}`: its state changed since the plan ({})", saved.status));
            } else if current.inputs_digest != saved.inputs_digest {
                found.push(format!("resource `{name}`: its rendered config changed since the plan"));
            } else if current.actions != saved.actions {
                found.push(format!(
                    "resource `{name}`: the actions were [{}] when planned and are [{}] now",
                    saved.actions.join(", "),
                    current.actions.join(", ")
                ));
            }
        }
        found
    }
}
