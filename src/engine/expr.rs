//! Jinja expressions in configuration values (minijinja, strict undefined).
//!
//! A configuration is compiled once, during validation, into a [`ConfigTemplate`]: the literal
//! value plus one [`TemplateSite`] per string that holds template syntax, with the variables it
//! reads. Those variables give the implicit dependency edges and let undefined names be reported
//! before anything runs. Rendering re-parses the (small) sources against one shared environment;
//! minijinja's compiled templates borrow their environment, which would tie the validated manifest
//! to a lifetime for no measurable gain.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::OnceLock;

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

mod budget;
mod folding;
mod limits;
pub use limits::RENDER_BUDGET;

/// One step of a path into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

/// A path into a JSON value, displayed the way users write it: `config.servers[0].host`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ValuePath(pub Vec<PathSegment>);

impl ValuePath {
    pub fn child(&self, segment: PathSegment) -> ValuePath {
        let mut segments = self.0.clone();
        segments.push(segment);
        ValuePath(segments)
    }
}

impl fmt::Display for ValuePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Key(k) if i == 0 => write!(f, "{k}")?,
                PathSegment::Key(k) => write!(f, ".{k}")?,
                PathSegment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// How a template string renders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteKind {
    /// The string is exactly one `{{ expr }}`: the value keeps its JSON type.
    Expression(String),
    /// Anything else: rendered to text.
    Text,
}

/// A string inside a configuration that holds template syntax.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateSite {
    /// Where in the value the string sits (relative to the value's root).
    pub path: ValuePath,
    pub source: String,
    pub kind: SiteKind,
    /// Variables read, as dotted paths when trivially nested (`dir.state.path`).
    pub references: BTreeSet<String>,
}

impl TemplateSite {
    /// The root names read by this site (`dir` for `dir.state.path`).
    pub fn roots(&self) -> impl Iterator<Item = &str> {
        self.references.iter().map(|r| r.split('.').next().unwrap_or(r))
    }
}

/// A configuration value with its template strings located and analysed.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigTemplate {
    pub value: Value,
    pub sites: Vec<TemplateSite>,
}

/// A template that does not parse or does not render.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ExprError {
    /// Full path for messages, e.g. `resources.app_config.config.path`.
    pub path: String,
    pub message: String,
    /// What went wrong, without the template's source (for templates that are values a user
    /// may not want shown, such as var files').
    pub reason: String,
}

/// How many steps one template may take to render: far beyond any real config, and reached in
/// well under a second by a template that would otherwise run for minutes (nested loops).
pub const TEMPLATE_FUEL: u64 = 2_000_000;

/// The shared environment: strict undefined, no auto-escaping, trailing newlines kept (file
/// contents end with one and must round-trip).
fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_syntax(budget::env_syntax());
        budget::install(&mut env);
        env
    })
}

/// Names the environment provides itself; a template may use them without declaring them.
pub const GLOBALS: &[&str] = &["range", "dict", "namespace", "debug"];

fn has_template_syntax(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

/// `Some(expr)` when `s` is exactly one `{{ expr }}`, nothing around it (surrounding text,
/// even a newline, makes it text).
fn single_expression(s: &str) -> Option<&str> {
    let inner = s.strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    let inner = inner.strip_prefix(['-', '+']).unwrap_or(inner);
    let inner = inner.strip_suffix(['-', '+']).unwrap_or(inner);
    Some(inner.trim())
}

/// Finds and parses every template string in `value`. `prefix` names the value in messages
/// (`resources.app.config`).
pub fn compile(value: &Value, prefix: &str) -> Result<ConfigTemplate, ExprError> {
    let mut sites = Vec::new();
    collect_sites(value, &ValuePath::default(), prefix, &mut sites)?;
    Ok(ConfigTemplate { value: value.clone(), sites })
}

fn collect_sites(value: &Value, path: &ValuePath, prefix: &str, out: &mut Vec<TemplateSite>) -> Result<(), ExprError> {
    match value {
        Value::String(s) if has_template_syntax(s) => out.push(compile_site(s, path, prefix)?),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_sites(item, &path.child(PathSegment::Index(i)), prefix, out)?;
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                collect_sites(item, &path.child(PathSegment::Key(k.clone())), prefix, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn compile_site(source: &str, path: &ValuePath, prefix: &str) -> Result<TemplateSite, ExprError> {
    let env = environment();
    let error = |e: minijinja::Error| ExprError {
        path: full_path(prefix, path),
        message: format!("invalid expression `{source}`: {}", describe(&e)),
        reason: format!("not a valid template: {}", describe(&e)),
    };
    // Compiling folds constants: what they would fold into is checked first.
    match single_expression(source) {
        Some(expr) => budget::parse_expr(expr).map(drop),
        None => budget::parse(source).map(drop),
    }
    .map_err(error)?;
    let (kind, references) = match single_expression(source) {
        Some(expr) => {
            let compiled = env.compile_expression(expr).map_err(error)?;
            (SiteKind::Expression(expr.to_string()), compiled.undeclared_variables(true))
        }
        None => {
            let compiled = env.template_from_str(source).map_err(error)?;
            (SiteKind::Text, compiled.undeclared_variables(true))
        }
    };
    Ok(TemplateSite {
        path: path.clone(),
        source: source.to_string(),
        kind,
        references: references.into_iter().collect(),
    })
}

/// Joins a prefix such as `resources.app.config` with a path inside the value.
pub fn full_path(prefix: &str, path: &ValuePath) -> String {
    let tail = path.to_string();
    match (prefix.is_empty(), tail.is_empty()) {
        (true, _) => tail,
        (false, true) => prefix.to_string(),
        (false, false) if tail.starts_with('[') => format!("{prefix}{tail}"),
        (false, false) => format!("{prefix}.{tail}"),
    }
}

/// A minijinja error as text, without source excerpts or variable values.
fn describe(e: &minijinja::Error) -> String {
    if e.kind() == minijinja::ErrorKind::OutOfFuel {
        return format!("rendering took more than {TEMPLATE_FUEL} steps and was stopped (a loop too large?)");
    }
    if e.detail() == Some(limits::OVER_BUDGET) {
        return format!(
            "rendering would build or handle more than {} MiB and was stopped (a value, a filter or a loop too large?)",
            RENDER_BUDGET >> 20
        );
    }
    match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    }
}

/// Renders every site of `template` against `context`, returning the rendered value.
///
/// Error messages name the path and the template source, never the context: variables carry
/// credentials.
pub fn render(template: &ConfigTemplate, context: &Value, prefix: &str) -> Result<Value, ExprError> {
    let env = environment();
    let ctx = minijinja::Value::from(minijinja::value::Serde(context));
    let mut out = template.value.clone();
    budget::start();
    for site in &template.sites {
        let error =
            |message: String, reason: String| ExprError { path: full_path(prefix, &site.path), message, reason };
        let rendered = match &site.kind {
            SiteKind::Expression(expr) => {
                budget::eval(env, expr, ctx.clone()).map_err(|e| describe(&e)).and_then(|v| to_json(&v)).map_err(
                    |why| error(format!("cannot evaluate `{}`: {why}", site.source), format!("cannot evaluate: {why}")),
                )?
            }
            SiteKind::Text => budget::render_str(env, &site.source, ctx.clone()).map(Value::String).map_err(|e| {
                let why = describe(&e);
                error(format!("cannot render `{}`: {why}", site.source), format!("cannot render: {why}"))
            })?,
        };
        if let Some(slot) = pointer_mut(&mut out, &site.path) {
            *slot = rendered;
        }
    }
    Ok(out)
}

fn to_json(value: &minijinja::Value) -> Result<Value, String> {
    if value.is_undefined() {
        return Err("undefined value".to_string());
    }
    serde_json::to_value(value).map_err(|e| format!("the value is not representable as JSON: {e}"))
}

/// The value at `path` inside `value`.
pub fn pointer<'a>(value: &'a Value, path: &ValuePath) -> Option<&'a Value> {
    path.0.iter().try_fold(value, |v, segment| match segment {
        PathSegment::Key(k) => v.get(k),
        PathSegment::Index(i) => v.get(*i),
    })
}

/// Puts `with` at `path` inside `value`, where there is a value there.
pub fn replace(value: &mut Value, path: &ValuePath, with: Value) {
    if let Some(slot) = pointer_mut(value, path) {
        *slot = with;
    }
}

fn pointer_mut<'a>(value: &'a mut Value, path: &ValuePath) -> Option<&'a mut Value> {
    path.0.iter().try_fold(value, |v, segment| match segment {
        PathSegment::Key(k) => v.get_mut(k),
        PathSegment::Index(i) => v.get_mut(*i),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(config: Value, ctx: Value) -> Result<Value, ExprError> {
        let t = compile(&config, "resources.r.config")?;
        render(&t, &ctx, "resources.r.config")
    }

    #[test]
    fn rendering_is_bounded() {
        let loops = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let err = rendered(json!({"content": loops}), json!({})).unwrap_err();
        assert_eq!(err.path, "resources.r.config.content");
        assert!(err.message.contains("more than 2000000 steps and was stopped"), "{err}");
        // An ordinary loop is nowhere near the budget.
        let ok = rendered(json!({"c": "{% for i in range(1000) %}{{ i }},{% endfor %}"}), json!({})).unwrap();
        assert!(ok["c"].as_str().unwrap().ends_with("999,"));
    }

    /// Each of these once took gigabytes (or minutes); each must fail on the budget, naming
    /// the path, having built no more than it allows.
    #[test]
    fn rendering_is_bounded_in_memory() {
        let set_s = "{% set s = 'a' * 10000000 %}";
        let attacks = [
            "{% for i in range(1000) %}{{ 'a' * 1000000 }}{% endfor %}".to_string(),
            format!("{set_s}{{% set s = s ~ s %}}{{% set s = s ~ s %}}{{% set s = s ~ s %}}{{{{ s|length }}}}"),
            format!("{set_s}{{{{ s ~ s ~ s ~ s }}}}"),
            "{% set l = range(100000)|list %}{% set l = l + l %}{% set l = l + l %}{% set l = l + l %}{{ l|join(',') }}"
                .to_string(),
            "{{ ['x'] * 10000000 }}".to_string(),
            "{{ 'a' * 100000000 }}".to_string(),
            "{% set s = 'a' * 1000 %}{{ s|replace('', 'x' * 100000) }}".to_string(),
            "{% set s = 'a\n' * 1000 %}{{ s|indent(100000) }}".to_string(),
            "{{ '%.100000000f'|format(1.5) }}".to_string(),
            "{% set s = 'a' * 100000 %}{{ [s]|join(',' * 1000000) }}{{ (range(1000)|list)|join('-' * 100000) }}"
                .to_string(),
            format!("{set_s}{{{{ [s, s, s, s] }}}}"),
            format!("{set_s}{{% for i in range(10) %}}{{{{ s }}}}{{% endfor %}}"),
            format!("{set_s}{{{{ [[s, s], [s, s]]|tojson }}}}"),
            "{% set l = range(100000)|list %}{{ [l, l, l, l, l, l, l, l, l, l]|string|length }}".to_string(),
        ];
        for attack in &attacks {
            let started = std::time::Instant::now();
            for config in [json!({"content": attack}), json!({"value": format!("{{{{ {:?} }}}}", "x")})] {
                let _ = rendered(config, json!({}));
            }
            let err = rendered(json!({"files": [{"content": attack}]}), json!({})).unwrap_err();
            assert_eq!(err.path, "resources.r.config.files[0].content", "{attack}");
            assert!(err.message.contains("more than 16 MiB and was stopped"), "{attack}: {err}");
            assert!(started.elapsed() < std::time::Duration::from_secs(20), "{attack}: {:?}", started.elapsed());
        }
        // A single expression's value is charged whole before it becomes JSON.
        let err = rendered(json!({"v": "{{ [s, s, s, s] }}"}), json!({"s": "a".repeat(10_000_000)})).unwrap_err();
        assert!(err.message.contains("more than 16 MiB"), "{err}");
    }

    /// minijinja builds constant expressions while it compiles: those are refused at
    /// validation, before anything is built.
    #[test]
    fn constants_too_large_are_refused_before_they_are_built() {
        for source in [
            "{{ 'a' * 100000000 }}",
            "{{ ('a' * 30000000) ~ ('a' * 30000000) }}",
            "x{{ [0] * 100000000 }}",
            "{{ 'a' * (10000 * 10000) }}",
            "{{ (2 ** 40) * 'a' }}",
            "{% if x %}{% for i in ('ab' * 50000000) %}{% endfor %}{% endif %}",
            "{{ f(k=('a' * 100000000)) }}",
        ] {
            let started = std::time::Instant::now();
            let err = compile(&json!({"c": source}), "resources.r.config").unwrap_err();
            assert_eq!(err.path, "resources.r.config.c");
            assert!(err.message.contains("more than 16 MiB"), "{source}: {err}");
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "{source}: built before refused?");
        }
        let ok = rendered(json!({"c": "{{ '-' * 20 }}{{ [0] * 3 }}{{ 2 ** 10 }}"}), json!({})).unwrap();
        assert_eq!(ok["c"], json!("--------------------[0, 0, 0]1024"));
    }

    /// Arithmetic in a long loop works on numbers as before: only what grows is counted.
    #[test]
    fn a_loop_of_arithmetic_is_not_charged_for_its_numbers() {
        let source = "{% set ns = namespace(n=0) %}{% for i in range(50000) %}{% set ns.n = ns.n + i * 2 %}{% endfor %}{{ ns.n }}";
        let out = rendered(json!({"c": source}), json!({})).unwrap();
        assert_eq!(out["c"], json!("2499950000"));
    }

    /// The budget changes what a render may build, never what it gives.
    #[test]
    fn bounded_operators_and_filters_give_what_minijinja_gives() {
        let ctx = json!({"name": "web", "ports": [80, 443], "env": {"A": "1", "B": "<2>"}, "n": 3, "text": "a\nb"});
        let out = rendered(
            json!({
                "concat": "{{ name ~ '-' ~ n }}",
                "add": "{{ n + 2 }}",
                "addf": "{{ n + 0.5 }}",
                "adds": "{{ name + '-x' }}",
                "addl": "{{ ports + [8080] }}",
                "mul": "{{ n * 4 }}",
                "muls": "{{ '-' * n }}",
                "mull": "{{ [0] * n }}",
                "text": "{% for p in ports %}{{ name }}:{{ p }}{% if not loop.last %},{% endif %}{% endfor %}",
                "filters": "{{ ports|join(',') }} {{ name|upper|replace('W', 'w') }} {{ '%s=%05.1f'|format(name, 2.5) }}",
                "indent": "{{ text|indent(2, true) }}",
                "tojson": "{{ env|tojson }}",
                "pretty": "{{ env|tojson(indent=2) }}",
                "map": "{{ ports|map('string')|join(';') }} {{ env|dictsort|first|join('=') }}",
                "big": "{{ 'x' * 4000000 }}",
            }),
            ctx.clone(),
        )
        .unwrap();
        let env = minijinja::Environment::new();
        let plain = |source: &str| env.render_str(source, minijinja::value::Serde(&ctx)).unwrap();
        assert_eq!(out["concat"], json!("web-3"));
        assert_eq!((&out["add"], &out["addf"], &out["adds"]), (&json!(5), &json!(3.5), &json!("web-x")));
        assert_eq!(
            (&out["addl"], &out["mul"], &out["muls"], &out["mull"]),
            (&json!([80, 443, 8080]), &json!(12), &json!("---"), &json!([0, 0, 0]))
        );
        assert_eq!(out["text"], json!("web:80,web:443"));
        assert_eq!(
            out["filters"],
            json!(plain(
                "{{ ports|join(',') }} {{ name|upper|replace('W', 'w') }} {{ '%s=%05.1f'|format(name, 2.5) }}"
            ))
        );
        assert_eq!(out["indent"], json!("  a\n  b"));
        assert_eq!(out["tojson"], json!(plain("{{ env|tojson }}")));
        assert_eq!(out["pretty"], json!(plain("{{ env|tojson(indent=2) }}")));
        assert_eq!(out["map"], json!("80;443 A=1"));
        assert_eq!(out["big"].as_str().unwrap().len(), 4_000_000, "a large value within the budget renders");
        // Strict undefined still applies to the rewritten operators.
        let err = rendered(json!({"c": "{{ name ~ missing }}"}), ctx.clone()).unwrap_err();
        assert!(err.message.contains("undefined"), "{err}");
        let err = rendered(json!({"c": "{{ missing + 1 }}"}), ctx).unwrap_err();
        assert!(err.message.contains("undefined"), "{err}");
    }

    #[test]
    fn a_single_expression_keeps_its_json_type() {
        let ctx = json!({"n": 3, "flag": true, "obj": {"a": [1, 2]}, "s": "x"});
        let out = rendered(
            json!({"n": "{{ n }}", "flag": "{{flag}}", "obj": "{{- obj -}}", "both": "{{ n }}-{{ s }}", "lit": 7, "padded": " {{ n }}"}),
            ctx,
        )
        .unwrap();
        assert_eq!(out, json!({"n": 3, "flag": true, "obj": {"a": [1, 2]}, "both": "3-x", "lit": 7, "padded": " 3"}));
    }

    #[test]
    fn references_are_found_with_nested_paths() {
        let t = compile(
            &json!({"p": "{{ dir.state.path }}/x", "q": ["{{ resources.db.state.host }}"], "r": "{{ vars.env }}"}),
            "c",
        )
        .unwrap();
        let refs: Vec<_> = t.sites.iter().flat_map(|s| s.references.iter().cloned()).collect();
        assert_eq!(refs, ["dir.state.path", "resources.db.state.host", "vars.env"]);
        assert_eq!(t.sites[1].path.to_string(), "q[0]");
    }

    #[test]
    fn undefined_names_fail_with_the_path_and_without_values() {
        let err =
            rendered(json!({"a": {"b": "{{ secret_holder.missing }}"}}), json!({"secret_holder": {"k": "hunter2"}}))
                .unwrap_err();
        assert_eq!(err.path, "resources.r.config.a.b");
        assert!(err.message.contains("{{ secret_holder.missing }}"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn syntax_errors_are_reported_at_compile_time() {
        let err = compile(&json!({"a": "{{ oops("}), "resources.r.config").unwrap_err();
        assert_eq!(err.path, "resources.r.config.a");
        assert!(err.message.contains("syntax error"), "{err}");
    }

    #[test]
    fn text_keeps_a_trailing_newline() {
        assert_eq!(rendered(json!("{{ a }}\n"), json!({"a": "x"})).unwrap(), json!("x\n"));
        assert_eq!(rendered(json!("{% if a %}y{% endif %}\n"), json!({"a": 1})).unwrap(), json!("y\n"));
    }

    #[test]
    fn full_paths_join_cleanly() {
        let p = ValuePath(vec![PathSegment::Index(2), PathSegment::Key("k".into())]);
        assert_eq!(full_path("vars", &p), "vars[2].k");
        assert_eq!(full_path("", &p), "[2].k");
        assert_eq!(full_path("x", &ValuePath::default()), "x");
    }
}
