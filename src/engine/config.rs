//! A resource's config against what is known so far: the expression context its templates
//! render in (variables, dependencies' state), and its check against the type's schema.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::error::{Cause, Phase, ResourceError};
use super::expr::{self, PathSegment, TemplateSite, ValuePath};
use super::protocol;
use super::validate::ValidatedManifest;
use super::vars;

/// A resource known to be VALID: its rendered config and its state. Or, `planned`, what a plan
/// takes it to be once its actions ran: its state as its type planned it, each value not known
/// until then [`protocol::UNKNOWN`], and any field the planned state does not name unknown too.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Known {
    pub config: Value,
    pub state: Value,
    pub planned: bool,
}

impl Known {
    /// Nothing known of it yet but its name and type: a dependency before anything ran.
    pub(crate) fn unknown() -> Known {
        Known { config: protocol::unknown(), state: protocol::unknown(), planned: true }
    }
}

/// What has been learnt so far, indexed like the manifest's resources. One per pass, shared by
/// every resource's task: a slot is filled once, when its resource is found VALID, and a task
/// starts only after its dependencies' slots are — so no task needs a copy of its own.
#[derive(Debug, Default)]
pub(crate) struct Knowledge {
    slots: Box<[std::sync::OnceLock<Arc<Known>>]>,
    /// What any resource without a slot is known to be.
    otherwise: Option<Arc<Known>>,
}

impl Knowledge {
    /// What resource `j` is known to be, if VALID so far.
    pub(crate) fn of(&self, j: usize) -> Option<&Arc<Known>> {
        self.slots.get(j).and_then(|slot| slot.get()).or(self.otherwise.as_ref())
    }

    /// Records that resource `j` is VALID; what is known already is kept.
    pub(crate) fn learn(&self, j: usize, known: Option<Arc<Known>>) {
        if let (Some(slot), Some(known)) = (self.slots.get(j), known) {
            let _ = slot.set(known);
        }
    }

    /// Before anything ran: every state unknown.
    pub(crate) fn nothing_yet() -> Knowledge {
        Knowledge { slots: Box::default(), otherwise: Some(Arc::new(Known::unknown())) }
    }
}

impl FromIterator<Option<Arc<Known>>> for Knowledge {
    fn from_iter<I: IntoIterator<Item = Option<Arc<Known>>>>(iter: I) -> Self {
        let slots =
            iter.into_iter().map(|k| k.map_or_else(std::sync::OnceLock::new, std::sync::OnceLock::from)).collect();
        Knowledge { slots, otherwise: None }
    }
}

/// The expression context for resource `i`: variables (top level and under `vars`), each
/// dependency alias, and `resources.<name>` for every resource it depends on. Unknown states
/// are `null` (only used when the config reads no dependency).
fn render_context(manifest: &ValidatedManifest, i: usize, known: &Knowledge) -> Value {
    let resource = &manifest.resources[i];
    let view = |j: usize| {
        let dep = &manifest.resources[j];
        let state = known.of(j).map_or(Value::Null, |k| k.state.clone());
        json!({"name": dep.name, "type": dep.type_name, "state": state})
    };
    let mut ctx = vars::context(&manifest.vars);
    for (alias, &j) in &resource.aliases {
        ctx.insert(alias.clone(), view(j));
    }
    let resources: Map<String, Value> = resource
        .aliases
        .values()
        .chain(&resource.implicit)
        .map(|&j| (manifest.resources[j].name.clone(), view(j)))
        .collect();
    ctx.insert("resources".to_string(), Value::Object(resources));
    Value::Object(ctx)
}

/// A type's `config_schema`, compiled, and as it was written: where a config has a key the
/// schema does not allow, the keys it does allow are looked up there for the closest.
pub(crate) struct ConfigSchema {
    pub compiled: jsonschema::Validator,
    pub source: Value,
}

/// A config rendered against what is known: where it reads a value not known yet (a planned
/// state's), the value is [`protocol::unknown`] and its path is in `unknown`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rendered {
    pub config: Value,
    pub unknown: Vec<ValuePath>,
}

/// Resource `i`'s config rendered against what is known, and checked against its type's
/// schema (every violation, located by config path; a value not known yet matches anything).
pub(crate) fn rendered_config(
    manifest: &ValidatedManifest,
    i: usize,
    known: &Knowledge,
    schema: Option<&ConfigSchema>,
) -> Result<Rendered, ResourceError> {
    let resource = &manifest.resources[i];
    let prefix = resource.config_prefix();
    let context = render_context(manifest, i, known);
    let (unknown, sites): (Vec<&TemplateSite>, Vec<&TemplateSite>) = resource
        .config
        .sites
        .iter()
        .partition(|site| site.references.iter().any(|r| reads_unknown(manifest, i, known, r)));
    let template = match unknown.is_empty() {
        true => std::borrow::Cow::Borrowed(&resource.config),
        false => {
            let mut value = resource.config.value.clone();
            for site in &unknown {
                expr::replace(&mut value, &site.path, protocol::unknown());
            }
            std::borrow::Cow::Owned(expr::ConfigTemplate { value, sites: sites.into_iter().cloned().collect() })
        }
    };
    let config = expr::render(&template, &context, &prefix)
        .map_err(|e| ResourceError::new(Phase::Config, Cause::Render(e.to_string())))?;
    mask_derived(manifest, &template, &context, &config);
    let unknown: Vec<ValuePath> = unknown.iter().map(|site| site.path.clone()).collect();
    let violations = schema.map(|schema| schema_violations(schema, &config, &prefix, &unknown)).unwrap_or_default();
    if !violations.is_empty() {
        return Err(ResourceError::new(Phase::Config, Cause::Schema(violations)));
    }
    Ok(Rendered { config, unknown })
}

/// Whether `reference` (`dir.state.path`, `resources.db.state`) of resource `i`'s config
/// reads a value not known yet: one a planned state marks unknown, or does not name.
fn reads_unknown(manifest: &ValidatedManifest, i: usize, known: &Knowledge, reference: &str) -> bool {
    let resource = &manifest.resources[i];
    let planned = |j: usize| known.of(j).filter(|k| k.planned);
    let mut parts = reference.split('.');
    let target = match parts.next().unwrap_or_default() {
        "resources" => match parts.next() {
            Some(name) => manifest.index_of(name),
            // Every dependency at once.
            None => {
                return resource.aliases.values().chain(&resource.implicit).any(|&j| planned(j).is_some());
            }
        },
        alias => resource.aliases.get(alias).copied(),
    };
    let Some(dependency) = target.and_then(planned) else { return false };
    match parts.next() {
        None => !protocol::unknown_paths(&dependency.state, "").is_empty(),
        Some("state") => {
            let mut at = &dependency.state;
            for key in parts {
                if protocol::is_unknown(at) {
                    return true;
                }
                match at.get(key) {
                    Some(next) => at = next,
                    None => return true,
                }
            }
            !protocol::unknown_paths(at, "").is_empty()
        }
        // Its name or its type: known from the manifest.
        Some(_) => false,
    }
}

/// The manifest's outputs rendered against what `entries` (a report) found: variables, and
/// every resource as `resources.<name>` (`{name, type, state}`). `Ok(None)`: it declares none.
pub(crate) fn render_outputs(
    manifest: &ValidatedManifest,
    entries: &[super::plan::ResourceEntry],
) -> Result<Option<Value>, expr::ExprError> {
    if manifest.outputs.value.as_object().is_none_or(Map::is_empty) {
        return Ok(None);
    }
    let mut ctx = vars::context(&manifest.vars);
    let resources: Map<String, Value> = entries
        .iter()
        .map(|e| {
            let view = json!({"name": e.name, "type": e.type_name, "state": e.standing.state()});
            (e.name.clone(), view)
        })
        .collect();
    ctx.insert("resources".to_string(), Value::Object(resources));
    let context = Value::Object(ctx);
    let outputs = expr::render(&manifest.outputs, &context, "outputs")?;
    mask_derived(manifest, &manifest.outputs, &context, &outputs);
    Ok(Some(outputs))
}

/// Whatever a template made of a sensitive variable is sensitive too (`{{ token | upper }}`,
/// `{{ password | b64encode }}`): the value each such template rendered joins the mask — unless
/// the template only placed the value as it is (`Bearer {{ token }}`), which masking already
/// hides while showing the rest. That is told by rendering again with each sensitive variable
/// as it is shown (`***`): the same text as the rendered value masked means nothing else came
/// of the secret.
fn mask_derived(manifest: &ValidatedManifest, template: &expr::ConfigTemplate, context: &Value, rendered: &Value) {
    if manifest.sensitive.is_empty() {
        return;
    }
    let reads_sensitive = |reference: &str| {
        let mut parts = reference.split('.');
        let root = parts.next().unwrap_or_default();
        let name = if root == "vars" { parts.next().unwrap_or_default() } else { root };
        manifest.sensitive.iter().any(|s| s == name)
    };
    let tainted: Vec<&expr::TemplateSite> =
        template.sites.iter().filter(|s| s.references.iter().any(|r| reads_sensitive(r))).collect();
    if tainted.is_empty() {
        return;
    }
    let mut shown = context.clone();
    for name in &manifest.sensitive {
        let Some(value) = manifest.vars.get(name) else { continue };
        let masked = manifest.mask.value(value);
        if shown.get(name) == Some(value) {
            shown[name] = masked.clone();
        }
        if let Some(vars) = shown.get_mut("vars").and_then(Value::as_object_mut) {
            vars.insert(name.clone(), masked);
        }
    }
    let as_shown = expr::render(template, &shown, "").ok();
    for site in tainted {
        let Some(value) = expr::pointer(rendered, &site.path) else { continue };
        let placed_as_is =
            as_shown.as_ref().and_then(|s| expr::pointer(s, &site.path)) == Some(&manifest.mask.value(value));
        if !placed_as_is {
            manifest.mask.add(value);
        }
    }
}

/// Every schema violation, located by config path, with values masked (they may come from
/// variables); a key the schema does not allow, with the allowed key most like it.
///
/// A value not known yet (at a path of `unknown`) matches anything: a violation at or under it
/// is not one, and neither is one over it that its value could decide (`oneOf`, `enum`, …).
fn schema_violations(schema: &ConfigSchema, config: &Value, prefix: &str, unknown: &[ValuePath]) -> Vec<String> {
    use jsonschema::error::ValidationErrorKind as Kind;
    schema
        .compiled
        .iter_errors(config)
        .filter_map(|e| {
            let path = pointer_to_path(config, e.instance_path().as_str());
            let structural = matches!(
                e.kind(),
                Kind::AdditionalProperties { .. }
                    | Kind::Required { .. }
                    | Kind::Type { .. }
                    | Kind::MaxProperties { .. }
                    | Kind::MinProperties { .. }
                    | Kind::MaxItems { .. }
                    | Kind::MinItems { .. }
            );
            let decided_by_unknown = unknown.iter().any(|u| {
                u.0.starts_with(&path.0) && (u.0.len() == path.0.len() || !structural) || path.0.starts_with(&u.0)
            });
            (!decided_by_unknown).then_some((e, path))
        })
        .map(|(e, path)| {
            let mut hints = String::new();
            if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } = e.kind() {
                // The schema object holding `additionalProperties`, and the keys it declares.
                let at = e.schema_path().as_str();
                let object = at.strip_suffix("/additionalProperties").and_then(|p| schema.source.pointer(p));
                let allowed = object.and_then(|o| o.get("properties")).and_then(Value::as_object);
                for key in unexpected {
                    if let Some(meant) =
                        allowed.and_then(|a| super::suggest::closest(key, a.keys().map(String::as_str)))
                    {
                        hints.push_str(&format!(" (`{key}`: did you mean `{meant}`?)"));
                    }
                }
            }
            format!("{}: {}{hints}", expr::full_path(prefix, &path), e.masked())
        })
        .collect()
}

/// A JSON pointer (`/a/0/b`) as a path, telling array indices from keys by the value's shape.
fn pointer_to_path(value: &Value, pointer: &str) -> ValuePath {
    let mut path = Vec::new();
    let mut cur = Some(value);
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        match (cur, token.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(n)) => {
                cur = items.get(n);
                path.push(PathSegment::Index(n));
            }
            (c, _) => {
                cur = c.and_then(|v| v.get(&token));
                path.push(PathSegment::Key(token));
            }
        }
    }
    ValuePath(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_user_paths() {
        let v = json!({"a": [{"b": 1}], "0": {"x/y": 2}});
        assert_eq!(pointer_to_path(&v, "/a/0/b").to_string(), "a[0].b");
        assert_eq!(pointer_to_path(&v, "/0/x~1y").to_string(), "0.x/y");
        assert_eq!(pointer_to_path(&v, "").to_string(), "");
    }

    fn schema(source: Value) -> ConfigSchema {
        ConfigSchema { compiled: jsonschema::draft4::new(&source).unwrap(), source }
    }

    #[test]
    fn a_key_the_schema_does_not_allow_is_shown_with_the_closest_it_does() {
        let schema = schema(json!({
            "type": "object",
            "properties": {
                "content": {"type": "string"},
                "path": {"type": "string"},
                "owner": {"type": "object", "properties": {"name": {}}, "additionalProperties": false}
            },
            "additionalProperties": false
        }));
        let config = json!({"contents": "x", "path": "p", "zzz": 1, "owner": {"nmae": "u"}});
        let v = schema_violations(&schema, &config, "resources.r.config", &[]);
        assert_eq!(v.len(), 2, "{v:?}");
        let at = |prefix: &str| v.iter().find(|m| m.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}: {v:?}"));
        let root = at("resources.r.config: Additional properties are not allowed");
        assert!(root.ends_with("were unexpected) (`contents`: did you mean `content`?)"), "{v:?}");
        assert!(!root.contains("`zzz`: did you mean"), "{v:?}");
        assert!(at("resources.r.config.owner: ").ends_with("(`nmae`: did you mean `name`?)"), "{v:?}");
    }

    #[test]
    fn schema_violations_are_all_reported_masked() {
        let schema = schema(json!({
            "type": "object",
            "properties": {"port": {"type": "integer"}, "hosts": {"type": "array", "items": {"type": "string"}}},
            "required": ["name"]
        }));
        let config = json!({"port": "s3cret", "hosts": ["a", 5]});
        let v = schema_violations(&schema, &config, "resources.r.config", &[]);
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v.iter().any(|m| m.starts_with("resources.r.config.port: ") && m.contains("integer")), "{v:?}");
        assert!(v.iter().any(|m| m.starts_with("resources.r.config.hosts[1]: ")), "{v:?}");
        assert!(v.iter().any(|m| m.starts_with("resources.r.config: ") && m.contains("name")), "{v:?}");
        assert!(!v.iter().any(|m| m.contains("s3cret")), "{v:?}");
    }
}
