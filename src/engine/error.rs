//! Why a resource failed, with the phase it failed in.

use super::mask::Mask;
use std::fmt;

use super::executor::{ExecError, Exit, Outcome};
use super::protocol::{Status, excerpt};

/// How much of a program's output an error message quotes.
pub const OUTPUT_EXCERPT: usize = 2048;

/// Where in a resource's lifecycle something happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Init,
    /// Rendering the config and checking it against the schema.
    Config,
    State,
    Action(String),
    /// The state action run again after the actions.
    Verify,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Init => f.write_str("init"),
            Phase::Config => f.write_str("config"),
            Phase::State => f.write_str("state"),
            Phase::Action(name) => write!(f, "action {name}"),
            Phase::Verify => f.write_str("state after actions"),
        }
    }
}

impl Phase {
    /// The label executors and logs use: `init`, `state`, `action:<name>`.
    pub fn label(&self) -> String {
        match self {
            Phase::Init => "init".into(),
            Phase::Config => "config".into(),
            Phase::State | Phase::Verify => "state".into(),
            Phase::Action(name) => format!("action:{name}"),
        }
    }
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The program could not be run to completion (not found, timed out, too much output…).
    Exec { reason: &'static str, message: String },
    /// The program exited unsuccessfully, or a built-in failed ([`Exit::Failed`]).
    Exit {
        exit: Exit,
        /// The line that says why: the type's last error message, else stderr's first line.
        why: Option<String>,
        /// The output quoted below the first line.
        output: String,
    },
    /// The program's response broke the protocol.
    Protocol { problem: String, output: String },
    /// A config expression did not render.
    Render(String),
    /// The rendered config does not match the type's schema (every violation).
    Schema(Vec<String>),
    /// The state action still did not report VALID after the actions ran.
    StillNotValid(Status),
    /// The state action did not report MISSING after the delete action ran.
    StillPresent(Status),
    /// A `readonly` resource is not VALID; its actions are not run.
    Readonly { status: Status, actions: Vec<String> },
    /// The init response asks for something the manifest cannot give (plugs, dependencies).
    Unsatisfied(Vec<String>),
    /// Apply would run on a resource what its plan did not show (`shown`: what the plan showed,
    /// `now`: what it would run); nothing was run on it.
    NotInPlan { shown: String, now: String },
    /// After its actions, the state differs from what its type planned (each difference:
    /// `path: planned → now`): what its dependents were planned over is not what they get.
    NotAsPlanned(Vec<String>),
}

/// A resource's failure: the phase and the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ResourceError {
    pub phase: Phase,
    pub cause: Cause,
    /// The `result` pairs a failed action reported in its messages before it failed (seed 004):
    /// kept and shown as a success's are.
    pub results: Vec<(String, String)>,
}

impl ResourceError {
    pub fn new(phase: Phase, cause: Cause) -> Self {
        Self { phase, cause, results: Vec::new() }
    }

    /// The same failure, with the result pairs the program reported before it failed.
    pub fn with_results(self, results: Vec<(String, String)>) -> Self {
        Self { results, ..self }
    }

    pub fn exec(phase: Phase, error: &ExecError) -> Self {
        Self::new(phase, Cause::Exec { reason: error.reason(), message: error.to_string() })
    }

    /// A program's or a built-in's failure, from what it printed. A built-in's stderr is its
    /// own words, shown as the cause (it has no exit code); a program's output is quoted.
    pub fn exit(phase: Phase, outcome: &Outcome) -> Self {
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        let why = stderr.lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_string);
        let output = match outcome.exit {
            // The rest of its words, then what it said it did.
            Exit::Failed => {
                let rest: String = stderr.trim().lines().skip(1).map(|l| format!("\n    {l}")).collect();
                rest + &quote(&[("stdout", &outcome.stdout)])
            }
            _ => quote_output(outcome),
        };
        Self::new(phase, Cause::Exit { exit: outcome.exit, why, output })
    }

    /// A failure whose stderr said nothing, explained by the type's last error message.
    pub fn exit_saying(phase: Phase, exit: Exit, message: String) -> Self {
        let output = if exit == Exit::Failed { String::new() } else { format!("\n    {message}") };
        Self::new(phase, Cause::Exit { exit, why: Some(message), output })
    }

    pub fn protocol(phase: Phase, problem: String, outcome: &Outcome) -> Self {
        Self::new(phase, Cause::Protocol { problem, output: quote_output(outcome) })
    }

    /// A stable, machine-readable reason (condition reasons, metrics, JSON output).
    pub fn reason(&self) -> &'static str {
        match &self.cause {
            Cause::Exec { reason, .. } => reason,
            Cause::Exit { .. } if matches!(self.phase, Phase::Action(_)) => "ActionFailed",
            Cause::Exit { .. } => "ProgramFailed",
            Cause::Protocol { .. } => "ProtocolViolation",
            Cause::Render(_) => "RenderFailed",
            Cause::Schema(_) => "ConfigInvalid",
            Cause::StillNotValid(_) => "StillNotValid",
            Cause::StillPresent(_) => "StillPresent",
            Cause::Readonly { .. } => "ReadonlyNotValid",
            Cause::Unsatisfied(_) => "RequirementsUnsatisfied",
            Cause::NotInPlan { .. } => "NotInPlan",
            Cause::NotAsPlanned(_) => "NotAsPlanned",
        }
    }

    /// The same failure with the values of sensitive variables in the program's output (and
    /// any other text from outside) masked.
    pub fn masked(self, mask: &Mask) -> Self {
        let cause = match self.cause {
            Cause::Exec { reason, message } => Cause::Exec { reason, message: mask.text(&message) },
            Cause::Exit { exit, why, output } => {
                Cause::Exit { exit, why: why.map(|w| mask.text(&w)), output: mask.text(&output) }
            }
            Cause::Protocol { problem, output } => {
                Cause::Protocol { problem: mask.text(&problem), output: mask.text(&output) }
            }
            other => other,
        };
        Self { cause, ..self }
    }

    /// The failure in one line that names its cause: what a condition's message or a summary
    /// shows, where the whole text has no room.
    pub fn headline(&self) -> String {
        let phase = &self.phase;
        let first = |items: &[String]| match items {
            [] => String::new(),
            [one] => format!(" {one}"),
            [one, rest @ ..] => format!(" {one} (and {} more)", rest.len()),
        };
        match &self.cause {
            Cause::Exit { exit, why: Some(why), .. } if *exit != Exit::Failed => {
                format!("{phase} failed with {exit}: {why}")
            }
            Cause::Schema(violations) => {
                format!("{phase}: does not match the type's config_schema:{}", first(violations))
            }
            Cause::Unsatisfied(problems) => {
                format!("{phase}: the resource type's requirements are not met:{}", first(problems))
            }
            _ => self.to_string().lines().next().unwrap_or_default().to_string(),
        }
    }

    /// Whether the failure is the manifest's fault (exit code 2) rather than a program's.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self.cause, Cause::Render(_) | Cause::Schema(_) | Cause::Unsatisfied(_))
    }
}

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = &self.phase;
        match &self.cause {
            Cause::Exec { message, .. } => write!(f, "{phase} failed: {message}"),
            Cause::Exit { exit: Exit::Failed, why, output } => {
                write!(f, "{phase} failed: {}{output}", why.as_deref().unwrap_or("no reason given"))
            }
            Cause::Exit { exit, output, .. } => write!(f, "{phase} failed with {exit}{output}"),
            Cause::Protocol { problem, output } => write!(f, "{phase}: invalid response: {problem}{output}"),
            Cause::Render(message) => write!(f, "{phase}: {message}"),
            Cause::Schema(violations) => {
                write!(f, "{phase}: does not match the type's config_schema:")?;
                violations.iter().try_for_each(|v| write!(f, "\n    {v}"))
            }
            Cause::StillNotValid(status) => write!(f, "still {status} after applying its actions"),
            Cause::StillPresent(status) => write!(f, "still present ({status}) after its delete action"),
            Cause::Readonly { status, actions } => {
                write!(f, "readonly resource is {status}; refusing to run its actions ({})", actions.join(", "))
            }
            Cause::Unsatisfied(problems) => {
                write!(f, "{phase}: the resource type's requirements are not met:")?;
                problems.iter().try_for_each(|p| write!(f, "\n    {p}"))
            }
            Cause::NotInPlan { shown, now } => {
                write!(f, "the plan did not show this: {shown}; now {now}. Nothing was run on it: make a new plan")
            }
            Cause::NotAsPlanned(differences) => {
                write!(
                    f,
                    "after its actions its state is not the one its type planned (its dependents were planned over \
                     that one, and are not run):"
                )?;
                differences.iter().try_for_each(|d| write!(f, "\n    {d}"))
            }
        }
    }
}

/// The first bytes of a program's stdout and stderr, indented, for error messages.
pub fn quote_output(outcome: &Outcome) -> String {
    let out = quote(&[("stdout", &outcome.stdout), ("stderr", &outcome.stderr)]);
    if out.is_empty() { "\n    (the program printed nothing)".into() } else { out }
}

/// The first bytes of each named stream that printed something, indented.
fn quote(streams: &[(&str, &[u8])]) -> String {
    let mut out = String::new();
    for (name, bytes) in streams {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let text = excerpt(bytes, OUTPUT_EXCERPT);
        out.push_str(&format!("\n    {name}: "));
        out.push_str(&text.trim_end().replace('\n', "\n      "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn messages_name_the_phase_and_quote_the_output() {
        let outcome = Outcome {
            exit: Exit::Code(1),
            stdout: b"line one\nline two\n".to_vec(),
            stderr: b"boom".to_vec(),
            elapsed: Duration::ZERO,
        };
        let e = ResourceError::exit(Phase::Action("create".into()), &outcome);
        assert_eq!(
            e.to_string(),
            "action create failed with exit code 1\n    stdout: line one\n      line two\n    stderr: boom"
        );
        assert_eq!(e.reason(), "ActionFailed");
        let e =
            ResourceError::protocol(Phase::State, "not json".into(), &Outcome { stdout: vec![b'x'; 5000], ..outcome });
        let text = e.to_string();
        assert!(text.starts_with("state: invalid response: not json\n    stdout: xxx"), "{text}");
        assert!(text.contains("… (2952 more bytes)"), "{text}");
    }

    #[test]
    fn a_built_in_s_failure_has_no_exit_code_and_its_cause_leads() {
        let outcome = Outcome {
            exit: Exit::Failed,
            stdout: b"created /a\n".to_vec(),
            stderr: b"cannot create /a/b: Permission denied (os error 13)\nsecond line\n".to_vec(),
            elapsed: Duration::ZERO,
        };
        let e = ResourceError::exit(Phase::Action("create".into()), &outcome);
        assert_eq!(
            e.to_string(),
            "action create failed: cannot create /a/b: Permission denied (os error 13)\n    second line\n    \
             stdout: created /a"
        );
        assert_eq!(e.headline(), "action create failed: cannot create /a/b: Permission denied (os error 13)");
        assert_eq!(e.reason(), "ActionFailed");
        let quiet = ResourceError::exit(Phase::State, &Outcome { stdout: vec![], stderr: vec![], ..outcome });
        assert_eq!(quiet.to_string(), "state failed: no reason given");
    }

    #[test]
    fn a_headline_names_the_cause_in_one_line() {
        let outcome = Outcome {
            exit: Exit::Code(2),
            stdout: vec![],
            stderr: b"\n  boom\nmore\n".to_vec(),
            elapsed: Duration::ZERO,
        };
        let e = ResourceError::exit(Phase::State, &outcome);
        assert_eq!(e.headline(), "state failed with exit code 2: boom");
        let said = ResourceError::exit_saying(Phase::Action("x".into()), Exit::Code(1), "quota exceeded".into());
        assert_eq!(said.headline(), "action x failed with exit code 1: quota exceeded");
        let schema = ResourceError::new(Phase::Config, Cause::Schema(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(schema.headline(), "config: does not match the type's config_schema: a (and 2 more)");
        let silent = ResourceError::exit(Phase::State, &Outcome { stderr: vec![], ..outcome });
        assert_eq!(silent.headline(), "state failed with exit code 2");
    }
}
