//! The command's own output. A reader that goes away (`deployster apply | head -1`) closes
//! the pipe: the first failed write ends output quietly — no panic, no message — and the run
//! goes on to its end, because a running action must never be cut short by a closed terminal
//! pipe. `println!` would panic there instead.

use std::fmt::Arguments;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

fn write(closed: &AtomicBool, mut to: impl Write, text: Arguments) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    if writeln!(to, "{text}").and_then(|()| to.flush()).is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}

/// A line on stdout.
pub(crate) fn out(text: Arguments) {
    write(&STDOUT_CLOSED, std::io::stdout().lock(), text);
}

/// A line on stderr.
pub(crate) fn err(text: Arguments) {
    write(&STDERR_CLOSED, std::io::stderr().lock(), text);
}
