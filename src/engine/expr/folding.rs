//! minijinja folds constant expressions while it compiles a template: `'a' * 100000000` is
//! built then, before anything runs (and before the render budget can see it), as is
//! `[0] * 100000000`. So the parsed template is looked at first: what each constant
//! expression would fold into is estimated from its parts, without building it, and a template
//! whose constants would not fit the budget is refused.

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt, UnaryOpKind};

// The crate's `macros` and `multi_template` features are off: their statements cannot occur.
use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind};

use super::limits::{ITEM_COST, OVER_BUDGET, RENDER_BUDGET};

/// What a constant expression would fold into: its size, and its value when an integer.
#[derive(Clone, Copy)]
struct Folded {
    bytes: usize,
    int: Option<i128>,
    /// A string or a sequence: `*` repeats it.
    repeats: bool,
}

fn over() -> Error {
    Error::new(ErrorKind::InvalidOperation, OVER_BUDGET)
}

/// Fails if a constant in `stmt` would fold into more than the budget.
pub fn check_stmt(stmt: &Stmt<'_>) -> Result<(), Error> {
    let exprs = |list: &[&Expr<'_>]| list.iter().try_for_each(|e| expr(e).map(drop));
    let body = |stmts: &[Stmt<'_>]| stmts.iter().try_for_each(check_stmt);
    match stmt {
        Stmt::Template(t) => body(&t.children),
        Stmt::EmitExpr(e) => exprs(&[&e.expr]),
        Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
        Stmt::ForLoop(f) => {
            exprs(&[&f.target, &f.iter])?;
            f.filter_expr.as_ref().map_or(Ok(()), |e| exprs(&[e]))?;
            body(&f.body)?;
            body(&f.else_body)
        }
        Stmt::IfCond(i) => {
            exprs(&[&i.expr])?;
            body(&i.true_body)?;
            body(&i.false_body)
        }
        Stmt::WithBlock(w) => {
            w.assignments.iter().try_for_each(|(a, b)| exprs(&[a, b]))?;
            body(&w.body)
        }
        Stmt::Set(s) => exprs(&[&s.target, &s.expr]),
        Stmt::SetBlock(s) => {
            s.filter.as_ref().map_or(Ok(()), |e| exprs(&[e]))?;
            body(&s.body)
        }
        Stmt::AutoEscape(a) => {
            exprs(&[&a.enabled])?;
            body(&a.body)
        }
        Stmt::FilterBlock(f) => {
            exprs(&[&f.filter])?;
            body(&f.body)
        }
        Stmt::Do(d) => {
            exprs(&[&d.call.expr])?;
            args(&d.call.args)
        }
    }
}

fn args(list: &[CallArg<'_>]) -> Result<(), Error> {
    list.iter().try_for_each(|a| match a {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => expr(e).map(drop),
    })
}

/// Fails if a constant in `e` would fold into more than the budget.
pub fn check_expr(e: &Expr<'_>) -> Result<(), Error> {
    expr(e).map(drop)
}

/// Checks every constant inside `e`; what `e` folds into if it is constant itself.
fn expr(e: &Expr<'_>) -> Result<Option<Folded>, Error> {
    let each = |list: &[Expr<'_>]| -> Result<Option<usize>, Error> {
        let mut total = Some(list.len() * ITEM_COST);
        for item in list {
            let folded = expr(item)?;
            // Lists, tuples and maps fold only when every item is a literal.
            total = match (total, folded, item) {
                (Some(t), Some(f), Expr::Const(_)) => Some(t + f.bytes),
                _ => None,
            };
        }
        Ok(total)
    };
    let sequence = |bytes: Option<usize>| bytes.map(|bytes| Folded { bytes, int: None, repeats: true });
    Ok(match e {
        Expr::Var(_) => None,
        Expr::Const(c) => {
            let value = &c.value;
            let bytes = value.as_str().map_or_else(|| value.to_string().len(), str::len);
            let repeats = matches!(value.kind(), ValueKind::String | ValueKind::Seq);
            Some(Folded { bytes, int: value.as_i64().map(i128::from), repeats })
        }
        Expr::UnaryOp(u) => expr(&u.expr)?.map(|f| match u.op {
            UnaryOpKind::Neg => Folded { int: f.int.and_then(i128::checked_neg), ..f },
            UnaryOpKind::Not => Folded { bytes: 5, int: None, repeats: false },
        }),
        Expr::BinOp(b) => match (expr(&b.left)?, expr(&b.right)?) {
            (Some(l), Some(r)) => Some(binary(b.op, l, r)?),
            _ => None,
        },
        Expr::List(l) => sequence(each(&l.items)?),
        Expr::Tuple(t) => sequence(each(&t.items)?),
        Expr::Map(m) => {
            let keys = each(&m.keys)?;
            sequence(each(&m.values)?.zip(keys).map(|(v, k)| v + k))
        }
        Expr::Compare(c) => {
            let mut constant = expr(&c.expr)?.is_some();
            for op in &c.ops {
                constant &= expr(&op.expr)?.is_some();
            }
            constant.then_some(Folded { bytes: 5, int: None, repeats: false })
        }
        Expr::Slice(s) => {
            for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                expr(part)?;
            }
            expr(&s.expr)?;
            None
        }
        Expr::IfExpr(i) => {
            for part in [Some(&i.test_expr), Some(&i.true_expr), i.false_expr.as_ref()].into_iter().flatten() {
                expr(part)?;
            }
            None
        }
        Expr::Filter(f) => {
            f.expr.as_ref().map_or(Ok(None), expr)?;
            args(&f.args)?;
            None
        }
        Expr::Test(t) => {
            expr(&t.expr)?;
            args(&t.args)?;
            None
        }
        Expr::GetAttr(g) => {
            expr(&g.expr)?;
            None
        }
        Expr::GetItem(g) => {
            expr(&g.expr)?;
            expr(&g.subscript_expr)?;
            None
        }
        Expr::Call(c) => {
            expr(&c.expr)?;
            args(&c.args)?;
            None
        }
    })
}

/// What `l op r` folds into, refused past the budget.
fn binary(op: BinOpKind, l: Folded, r: Folded) -> Result<Folded, Error> {
    let scalar = |int: Option<i128>| Folded { bytes: 40, int, repeats: false };
    let ints = l.int.zip(r.int);
    let folded = match op {
        BinOpKind::Mul => match (l.repeats, r.repeats) {
            (true, false) => repeat(l, r.int),
            (false, true) => repeat(r, l.int),
            _ => scalar(ints.and_then(|(a, b)| a.checked_mul(b))),
        },
        BinOpKind::Add | BinOpKind::Concat if l.repeats || r.repeats || matches!(op, BinOpKind::Concat) => {
            Folded { bytes: l.bytes.saturating_add(r.bytes), int: None, repeats: true }
        }
        BinOpKind::Add => scalar(ints.and_then(|(a, b)| a.checked_add(b))),
        BinOpKind::Sub => scalar(ints.and_then(|(a, b)| a.checked_sub(b))),
        BinOpKind::FloorDiv => scalar(ints.and_then(|(a, b)| a.checked_div(b))),
        BinOpKind::Rem => scalar(ints.and_then(|(a, b)| a.checked_rem(b))),
        BinOpKind::Pow => scalar(ints.and_then(|(a, b)| a.checked_pow(u32::try_from(b).ok()?))),
        BinOpKind::ScAnd | BinOpKind::ScOr => Folded { bytes: l.bytes.max(r.bytes), int: None, ..l },
        _ => scalar(None),
    };
    if folded.bytes > RENDER_BUDGET {
        return Err(over());
    }
    Ok(folded)
}

/// A string or sequence repeated `times` (an integer we could not work out counts as huge).
fn repeat(what: Folded, times: Option<i128>) -> Folded {
    let times = times.map_or(usize::MAX, |n| usize::try_from(n.max(0)).unwrap_or(usize::MAX));
    Folded { bytes: what.bytes.max(1).saturating_mul(times), int: None, repeats: true }
}
