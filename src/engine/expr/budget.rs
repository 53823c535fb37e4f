//! Renders bounded in memory and work, not only in steps.
//!
//! Fuel bounds how many instructions a render runs, but one instruction can build gigabytes:
//! `'a' * 100000000`, `s ~ s` doubled a few times, `join` over a long list, an output loop. So
//! everything that builds a value from others — the operators `+`, `*` and `~`, every filter,
//! every emitted piece of output and the rendered value itself — is charged to one budget per
//! render: the bytes it may produce or handle ([`RENDER_BUDGET`]). Each checks what it would
//! build from the size of its inputs *before* building it, so a render over budget fails before
//! the memory is taken.
//!
//! minijinja has no hook on its operators, so the operators are compiled as calls to bounded
//! filters: the template's instructions are rewritten one for one after minijinja compiles them
//! (its `unstable_machinery`, hence the exact minijinja version in Cargo.toml; the tests below
//! fail if a new version changes what the rewrite relies on).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use minijinja::machinery::{self, CodeGenerator, Instruction, Instructions};
use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, Value};

use super::limits::{ITEM_COST, OVER_BUDGET, RENDER_BUDGET};

thread_local! {
    /// Bytes charged to the render running on this thread (a render never awaits).
    static SPENT: Cell<usize> = const { Cell::new(0) };
}

fn over() -> Error {
    Error::new(ErrorKind::InvalidOperation, OVER_BUDGET)
}

fn remaining() -> usize {
    RENDER_BUDGET.saturating_sub(SPENT.get())
}

/// Fails when `bytes` more do not fit; charges them either way.
fn charge(bytes: usize) -> Result<(), Error> {
    let spent = SPENT.get().saturating_add(bytes);
    SPENT.set(spent);
    if spent > RENDER_BUDGET { Err(over()) } else { Ok(()) }
}

/// Fails unless `bytes` more would fit, charging nothing.
fn fits(bytes: usize) -> Result<(), Error> {
    if bytes > remaining() { Err(over()) } else { Ok(()) }
}

/// Counts text written to it, failing past `cap` (so a huge value is never written out whole).
struct Counter {
    bytes: usize,
    cap: usize,
}

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes += s.len();
        if self.bytes > self.cap { Err(fmt::Error) } else { Ok(()) }
    }
}

/// What `value` costs: its text, plus [`ITEM_COST`] per item of a sequence or map. Fails as
/// soon as that passes what is left of the budget, having looked at no more than that.
fn measure(value: &Value) -> Result<usize, Error> {
    let cap = remaining();
    if let Some(s) = value.as_str() {
        return if s.len() > cap { Err(over()) } else { Ok(s.len()) };
    }
    let items = match value.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => value.len().unwrap_or(0),
        _ => 0,
    };
    let items = items.checked_mul(ITEM_COST).filter(|&n| n <= cap).ok_or_else(over)?;
    let mut counter = Counter { bytes: items, cap };
    write!(counter, "{value}").map_err(|_| over())?;
    Ok(counter.bytes)
}

/// Names the bounded operators are compiled as (a template may call them too: they are the
/// operators).
const ADD: &str = "deployster_add";
const MUL: &str = "deployster_mul";
const CONCAT: &str = "deployster_concat";

/// Rewrites the operators that build values into calls of their bounded filters. One
/// instruction for one, so that jump targets stay right; `!0` looks the filter up by name.
fn rewrite(instructions: &mut Instructions<'_>) {
    let mut pc = 0;
    while let Some(instruction) = instructions.get_mut(pc) {
        let bounded = match instruction {
            Instruction::Add => ADD,
            Instruction::Mul => MUL,
            Instruction::StringConcat => CONCAT,
            _ => {
                pc += 1;
                continue;
            }
        };
        *instruction = Instruction::ApplyFilter(bounded, Some(2), !0);
        pc += 1;
    }
}

/// Parses a template, refusing one whose constants would fold into more than the budget
/// (minijinja builds them while it compiles).
pub fn parse(source: &str) -> Result<machinery::ast::Stmt<'_>, Error> {
    let ast = machinery::parse(source, "<config>", env_syntax())?;
    super::folding::check_stmt(&ast)?;
    Ok(ast)
}

/// [`parse`] for an expression.
pub fn parse_expr(source: &str) -> Result<machinery::ast::Expr<'_>, Error> {
    let ast = machinery::parse_expr(source)?;
    super::folding::check_expr(&ast)?;
    Ok(ast)
}

/// Renders the template `source` within the budget (which [`start`] reset).
pub fn render_str(env: &Environment<'_>, source: &str, ctx: Value) -> Result<String, Error> {
    let ast = parse(source)?;
    let mut generator = CodeGenerator::new("<config>", source);
    generator.compile_stmt(&ast);
    let (mut instructions, mut blocks) = generator.finish();
    rewrite(&mut instructions);
    blocks.values_mut().for_each(rewrite);
    let mut text = String::new();
    let mut out = machinery::make_string_output(&mut text);
    machinery::eval(env, &instructions, ctx, &blocks, &mut out, AutoEscape::None)?;
    Ok(text)
}

/// Evaluates the expression `source` within the budget, charging the value it gives.
pub fn eval(env: &Environment<'_>, source: &str, ctx: Value) -> Result<Value, Error> {
    let ast = parse_expr(source)?;
    let mut generator = CodeGenerator::new("<expression>", source);
    generator.compile_expr(&ast);
    let (mut instructions, _) = generator.finish();
    rewrite(&mut instructions);
    let mut ignored = String::new();
    let mut out = machinery::make_string_output(&mut ignored);
    let (value, _) = machinery::eval(env, &instructions, ctx, &BTreeMap::new(), &mut out, AutoEscape::None)?;
    let value = value.ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "the expression gave no value"))?;
    // The value is turned into JSON whole: a list naming one big string many times is big.
    charge(measure(&value)?)?;
    Ok(value)
}

/// The syntax every config template is parsed with (as the environment's).
pub fn env_syntax() -> minijinja::syntax::SyntaxConfig {
    minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
        .expect("the default delimiters are valid")
}

/// Starts a render's budget on this thread.
pub fn start() {
    SPENT.set(0);
}

/// Installs the bounded operators, filters and output on `env`.
pub fn install(env: &mut Environment<'static>) {
    env.add_filter(ADD, |a: Value, b: Value| binary(a, b, "+"));
    env.add_filter(MUL, |a: Value, b: Value| binary(a, b, "*"));
    env.add_filter(CONCAT, concat);
    env.set_formatter(|out, state, value| {
        charge(measure(value)?)?;
        minijinja::escape_formatter(out, state, value)
    });
    for (name, filter) in builtin_filters() {
        env.add_filter(name, move |state: &mut State, args: Rest<ValueOrKwargs>| {
            bounded_filter(name, &filter, state, &args.into_values())
        });
    }
}

fn undefined(a: &Value, b: &Value) -> Result<(), Error> {
    if a.is_undefined() || b.is_undefined() {
        return Err(Error::new(ErrorKind::UndefinedError, "undefined value"));
    }
    Ok(())
}

/// `a ~ b`: both as text.
fn concat(a: Value, b: Value) -> Result<Value, Error> {
    undefined(&a, &b)?;
    charge(measure(&a)?)?;
    charge(measure(&b)?)?;
    Ok(Value::from(format!("{a}{b}")))
}

/// `a + b` and `a * b`: what they would build is checked first, then minijinja's own operator
/// builds it.
fn binary(a: Value, b: Value, op: &'static str) -> Result<Value, Error> {
    undefined(&a, &b)?;
    let (size_a, size_b) = (size(&a)?, size(&b)?);
    let repeat = |v: &Value| v.as_usize().unwrap_or(0);
    let builds = match op {
        "+" => size_a.saturating_add(size_b),
        _ => size_a.saturating_mul(repeat(&b)).max(size_b.saturating_mul(repeat(&a))),
    };
    charge(builds)?;
    raw(op, a, b)
}

/// What an operand of `+` or `*` costs: a string its length, a sequence its items (a lazy one
/// counted, up to what the budget has left).
fn size(value: &Value) -> Result<usize, Error> {
    Ok(match value.kind() {
        ValueKind::String => value.as_str().map_or(0, str::len),
        ValueKind::Seq | ValueKind::Iterable => match value.len() {
            Some(len) => len.saturating_mul(ITEM_COST),
            None => {
                let most = remaining() / ITEM_COST;
                let counted = value.try_iter()?.take(most + 1).count();
                if counted > most {
                    return Err(over());
                }
                counted * ITEM_COST
            }
        },
        _ => 0,
    })
}

/// minijinja's own operator on two values (each expression compiled once: a loop adding up
/// numbers calls this on every turn).
fn raw(op: &'static str, a: Value, b: Value) -> Result<Value, Error> {
    use std::sync::OnceLock;
    type Compiled = minijinja::Expression<'static, 'static>;
    static PLAIN: OnceLock<Environment<'static>> = OnceLock::new();
    static ADD: OnceLock<Compiled> = OnceLock::new();
    static MUL: OnceLock<Compiled> = OnceLock::new();
    let env = PLAIN.get_or_init(Environment::empty);
    let (cell, source) = if op == "+" { (&ADD, "a + b") } else { (&MUL, "a * b") };
    let expr = cell.get_or_init(|| env.compile_expression(source).expect("a valid expression"));
    expr.eval(minijinja::context! { a, b })
}

/// Runs a builtin filter if what it would build fits: its inputs are charged (the filter
/// reads them), what it may add to them is checked first, and what it gave is charged.
fn bounded_filter(name: &str, filter: &Value, state: &mut State, args: &[Value]) -> Result<Value, Error> {
    let mut input = 0usize;
    for arg in args {
        let size = measure(arg)?;
        charge(size)?;
        input += size;
    }
    fits(growth(name, args, input)?)?;
    let out = filter.call(state, args)?;
    charge(measure(&out)?)?;
    Ok(out)
}

/// At most how much a filter may build beyond a copy of its inputs, from its inputs.
fn growth(name: &str, args: &[Value], input: usize) -> Result<usize, Error> {
    let text = |i: usize| args.get(i).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    let number = |i: usize, key: &str, default: usize| {
        let positional = args.get(i).filter(|v| !v.is_kwargs()).and_then(Value::as_usize);
        let named = args.last().filter(|v| v.is_kwargs()).and_then(|k| k.get_attr(key).ok()?.as_usize());
        positional.or(named).unwrap_or(default)
    };
    Ok(match name {
        // Escaping, case changes: each byte at most six.
        "escape" | "e" | "upper" | "lower" | "title" | "capitalize" => input.saturating_mul(6),
        // A string split into items, each a value.
        "list" | "split" | "lines" | "batch" | "slice" => input.saturating_mul(ITEM_COST),
        "replace" => {
            let (value, from, to) =
                (text(0).unwrap_or_default(), text(1).unwrap_or_default(), text(2).unwrap_or_default());
            let times = if from.is_empty() { value.chars().count() + 1 } else { value.matches(from.as_str()).count() };
            times.saturating_mul(to.len())
        }
        "join" => {
            let separator = args.get(1).filter(|v| !v.is_kwargs()).map_or(0, |s| s.to_string().len());
            let items = args.first().map_or(Ok(0), |v| v.try_iter().map(Iterator::count))?;
            items.saturating_mul(separator)
        }
        "indent" => {
            let lines = text(0).map_or(1, |t| t.matches('\n').count() + 1);
            lines.saturating_mul(number(1, "width", 4))
        }
        // Widths and precisions (`%.100000000f`): every number in the format, once per value.
        "format" => {
            let format = text(0).unwrap_or_default();
            let numbers = format.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<usize>().ok());
            numbers.fold(0usize, usize::saturating_add).saturating_mul(args.len())
        }
        // JSON and Debug text: escapes, and an indentation on every line.
        "tojson" | "pprint" => {
            let indent = if name == "pprint" { 4 } else { number(1, "indent", 2) };
            let depth = args.first().map_or(Ok(0), |v| depth(v, 0))?;
            input.saturating_mul(6).saturating_add(input.saturating_mul(indent).saturating_mul(depth))
        }
        _ => input,
    })
}

/// How deeply sequences and maps nest in `value` (one line of JSON per item, indented that
/// deep at most).
fn depth(value: &Value, level: usize) -> Result<usize, Error> {
    if level > 256 {
        return Err(over());
    }
    if !matches!(value.kind(), ValueKind::Seq | ValueKind::Map) {
        return Ok(level);
    }
    let mut deepest = level + 1;
    for item in value.try_iter()? {
        let item = if value.kind() == ValueKind::Map { value.get_item(&item)? } else { item };
        deepest = deepest.max(depth(&item, level + 1)?);
    }
    Ok(deepest)
}

/// minijinja's builtin filters, to be run through [`bounded_filter`] under their own names.
fn builtin_filters() -> Vec<(&'static str, Value)> {
    use minijinja::filters::*;
    vec![
        ("safe", Value::from_function(safe)),
        ("escape", Value::from_function(escape)),
        ("e", Value::from_function(escape)),
        ("lower", Value::from_function(lower)),
        ("upper", Value::from_function(upper)),
        ("title", Value::from_function(title)),
        ("capitalize", Value::from_function(capitalize)),
        ("replace", Value::from_function(replace)),
        ("length", Value::from_function(length)),
        ("count", Value::from_function(length)),
        ("dictsort", Value::from_function(dictsort)),
        ("items", Value::from_function(items)),
        ("reverse", Value::from_function(reverse)),
        ("trim", Value::from_function(trim)),
        ("join", Value::from_function(join)),
        ("split", Value::from_function(split)),
        ("lines", Value::from_function(lines)),
        ("default", Value::from_function(default)),
        ("d", Value::from_function(default)),
        ("round", Value::from_function(round)),
        ("abs", Value::from_function(abs)),
        ("int", Value::from_function(int)),
        ("float", Value::from_function(float)),
        ("attr", Value::from_function(attr)),
        ("first", Value::from_function(first)),
        ("last", Value::from_function(last)),
        ("min", Value::from_function(min)),
        ("max", Value::from_function(max)),
        ("sort", Value::from_function(sort)),
        ("list", Value::from_function(list)),
        ("string", Value::from_function(string)),
        ("bool", Value::from_function(bool)),
        ("batch", Value::from_function(batch)),
        ("slice", Value::from_function(slice)),
        ("sum", Value::from_function(sum)),
        ("indent", Value::from_function(indent)),
        ("select", Value::from_function(select)),
        ("reject", Value::from_function(reject)),
        ("selectattr", Value::from_function(selectattr)),
        ("rejectattr", Value::from_function(rejectattr)),
        ("map", Value::from_function(map)),
        ("groupby", Value::from_function(groupby)),
        ("unique", Value::from_function(unique)),
        ("chain", Value::from_function(chain)),
        ("zip", Value::from_function(zip)),
        ("pprint", Value::from_function(pprint)),
        ("format", Value::from_function(format)),
        ("tojson", Value::from_function(tojson)),
    ]
}
