//! Live display of a run: on a terminal, a spinner per busy resource that becomes a bar with a
//! percentage when its action reports progress; elsewhere one line per progress change,
//! throttled. Program output is prefixed with `resource/action`, and apply gives one line per
//! resource as it settles it.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::OutputFormat;
use super::render::{self, elapsed, print_plan, settled_line};
use crate::engine::error::Phase;
use crate::engine::events::{Observer, RunEvent};
use crate::engine::plan::{Change, Drift, Plan, Standing};

pub(super) struct ProgressView {
    format: OutputFormat,
    /// Present when stderr is a terminal and the output is text.
    bars: Option<MultiProgress>,
    /// What each running resource is doing; its spinner shows once it has run for
    /// [`SHOW_AFTER`] (thousands of quick resources would otherwise redraw the terminal
    /// thousands of times a second).
    spinners: Mutex<HashMap<String, Spinner>>,
    /// Set once apply starts running actions: from then on, settled resources get a line.
    executing: AtomicBool,
    /// Width of the name column of those lines.
    name_width: AtomicUsize,
    /// What each planned action is for: (resource, action) → its description.
    descriptions: Mutex<HashMap<(String, String), String>>,
    /// Off a terminal: when each resource's progress was last printed, and at what percentage.
    printed: Mutex<HashMap<String, (Instant, f64)>>,
    /// On a terminal, while spinners show: lines waiting to be printed above them, a tick's
    /// worth at once (one redraw for many lines, not one per line: thousands of resources).
    lines: Mutex<Vec<String>>,
}

/// What a running resource is doing, and its spinner once shown.
struct Spinner {
    what: String,
    percent: Option<f64>,
    since: Instant,
    bar: Option<ProgressBar>,
}

/// A resource's spinner shows once it has been running this long.
const SHOW_AFTER: Duration = Duration::from_millis(200);

impl Spinner {
    /// Shows the spinner if it is due, and brings it up to date.
    fn show(&mut self, bars: &MultiProgress) {
        if self.bar.is_none() && self.since.elapsed() >= SHOW_AFTER {
            let bar = bars.add(ProgressBar::new_spinner().with_elapsed(self.since.elapsed()));
            bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"));
            self.bar = Some(bar);
        }
        let Some(bar) = &self.bar else { return };
        bar.set_message(self.what.clone());
        if let Some(percent) = self.percent {
            if bar.length().is_none() {
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg} [{bar:24}] {pos:>3}% ({elapsed})")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                bar.set_length(100);
            }
            bar.set_position(percent.clamp(0.0, 100.0) as u64);
        }
    }

    fn remove(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Off a terminal, at most one progress line per resource this often (first and last always).
const PROGRESS_LINE_EVERY: Duration = Duration::from_secs(1);

impl ProgressView {
    pub(super) fn new(format: OutputFormat) -> Arc<Self> {
        let live = format == OutputFormat::Text && std::io::stderr().is_terminal();
        let bars = live.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        let progress = Arc::new(Self {
            format,
            bars,
            spinners: Mutex::default(),
            executing: AtomicBool::new(false),
            name_width: AtomicUsize::new(0),
            descriptions: Mutex::default(),
            printed: Mutex::default(),
            lines: Mutex::default(),
        });
        if live {
            // One ticker for every spinner (a steady tick of its own would start a thread per
            // resource: thousands in a large manifest).
            let progress = Arc::downgrade(&progress);
            std::thread::spawn(move || {
                while let Some(progress) = progress.upgrade() {
                    progress.flush();
                    if let Some(bars) = &progress.bars {
                        for spinner in progress.spinners.lock().expect("spinners lock").values_mut() {
                            // Shown now if due; once shown, `busy` keeps it up to date.
                            if spinner.bar.is_none() {
                                spinner.show(bars);
                            }
                            if let Some(bar) = &spinner.bar {
                                bar.tick();
                            }
                        }
                    }
                    drop(progress);
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        progress
    }

    /// From now on each settled resource gets a line; `name_width` aligns them.
    pub(super) fn start_executing(&self, name_width: usize) {
        self.name_width.store(name_width, Ordering::SeqCst);
        self.executing.store(true, Ordering::SeqCst);
    }

    /// A line of the command's result: stdout for text, stderr when stdout carries JSON.
    pub(super) fn say(&self, line: &str) {
        match (&self.bars, self.format) {
            (Some(_), _) if !self.spinners.lock().expect("spinners lock").is_empty() => {
                self.lines.lock().expect("lines lock").push(line.to_string());
            }
            (Some(bars), _) => {
                self.flush();
                let _ = bars.println(line);
            }
            (None, OutputFormat::Text) => outln!("{line}"),
            (None, OutputFormat::Json) => errln!("{line}"),
        }
    }

    /// Prints the lines waiting above the spinners.
    fn flush(&self) {
        let lines = std::mem::take(&mut *self.lines.lock().expect("lines lock"));
        if let (Some(bars), false) = (&self.bars, lines.is_empty()) {
            let _ = bars.println(lines.join("\n"));
        }
    }

    /// A diagnostic, always on stderr.
    pub(super) fn note(&self, line: &str) {
        self.flush();
        match &self.bars {
            Some(bars) => bars.suspend(|| errln!("{line}")),
            None => errln!("{line}"),
        }
    }

    /// Runs `f` with the display hidden (for prompts).
    pub(super) fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.flush();
        match &self.bars {
            Some(bars) => bars.suspend(f),
            None => f(),
        }
    }

    /// Removes every spinner.
    pub(super) fn clear(&self) {
        self.flush();
        self.spinners.lock().expect("spinners lock").drain().for_each(|(_, spinner)| spinner.remove());
    }

    fn busy(&self, resource: &str, what: String, percent: Option<f64>) {
        let Some(bars) = &self.bars else { return };
        let mut spinners = self.spinners.lock().expect("spinners lock");
        let spinner = spinners.entry(resource.to_string()).or_insert_with(|| Spinner {
            what: String::new(),
            percent: None,
            since: Instant::now(),
            bar: None,
        });
        spinner.what = what;
        spinner.percent = percent.or(spinner.percent);
        if spinner.bar.is_some() {
            spinner.show(bars);
        }
    }

    /// On a terminal, the resource's spinner becomes a bar; elsewhere a line, unless one was
    /// printed for it less than [`PROGRESS_LINE_EVERY`] ago (the first and 100 % always are).
    fn progressed(&self, resource: &str, phase: &Phase, percent: f64) {
        let what = match phase {
            Phase::Action(action) => {
                let descriptions = self.descriptions.lock().expect("descriptions lock");
                match descriptions.get(&(resource.to_string(), action.clone())) {
                    Some(description) => format!("{resource}: {phase} ({description})"),
                    None => format!("{resource}: {phase}"),
                }
            }
            other => format!("{resource}: {other}"),
        };
        if self.bars.is_some() {
            self.busy(resource, what, Some(percent));
            return;
        }
        let now = Instant::now();
        let mut printed = self.printed.lock().expect("printed lock");
        let due = match printed.get(resource) {
            None => true,
            Some((at, last)) => percent >= 100.0 && *last < 100.0 || now.duration_since(*at) >= PROGRESS_LINE_EVERY,
        };
        if due {
            printed.insert(resource.to_string(), (now, percent));
            self.note(&format!("{what} {percent:.0}%"));
        }
    }

    fn done(&self, resource: &str) {
        self.printed.lock().expect("printed lock").remove(resource);
        if let Some(spinner) = self.spinners.lock().expect("spinners lock").remove(resource) {
            spinner.remove();
        }
    }
}

impl Observer for ProgressView {
    /// The plan as soon as it is made (text; JSON prints one document at the end), then the
    /// drift it found.
    fn on_planned(&self, plan: &Plan, drifts: &[Drift], changes: &[Change]) {
        self.clear();
        let mut descriptions = self.descriptions.lock().expect("descriptions lock");
        for entry in &plan.entries {
            if let Standing::NeedsActions { actions, .. } = &entry.standing {
                for a in actions.iter().filter(|a| !a.description.is_empty()) {
                    descriptions.insert((entry.name.clone(), a.name.clone()), a.description.clone());
                }
            }
        }
        drop(descriptions);
        if self.format == OutputFormat::Text {
            print_plan(plan);
            for d in drifts {
                self.say(&format!(
                    "Drift: {} was VALID at its last observation and is {} now, with the same inputs: something else changed it.",
                    d.resource, d.now
                ));
            }
            for c in changes {
                self.say(&render::change_text(c));
            }
        }
    }

    fn on_event(&self, event: &RunEvent) {
        match event {
            RunEvent::Recovered { description } => self.note(&format!("note: {description}")),
            RunEvent::Warned(w) => {
                self.note(&format!("warning: resource `{}` ({}): {}", w.resource, w.phase, w.message))
            }
            RunEvent::Invoking { resource, phase } => {
                // A new invocation starts as a spinner, whatever the last one reported.
                self.done(resource);
                self.busy(resource, format!("{resource}: {phase}"), None);
            }
            RunEvent::Output { resource, phase, line, .. } => {
                let source = match phase {
                    Phase::Action(name) => name.clone(),
                    other => other.label(),
                };
                let text = format!("{resource}/{source} | {line}");
                match self.format {
                    OutputFormat::Text => self.say(&text),
                    OutputFormat::Json => self.note(&text),
                }
            }
            RunEvent::Settled { resource, label, elapsed: took, message } => {
                self.done(resource);
                if self.executing.load(Ordering::SeqCst) {
                    let detail = message.as_deref().and_then(|m| m.lines().next()).unwrap_or_default();
                    let width = self.name_width.load(Ordering::SeqCst);
                    self.say(&settled_line(label, resource, width, detail, Some(&elapsed(*took))));
                }
            }
            RunEvent::Outputs(Ok(values)) if self.format == OutputFormat::Text => {
                self.say("Outputs:");
                for (name, value) in values.as_object().into_iter().flatten() {
                    self.say(&format!("  {name} = {value}"));
                }
            }
            RunEvent::Outputs(Err(why)) => self.note(&format!("error: the outputs could not be rendered: {why}")),
            RunEvent::Progress { resource, phase, percent } => self.progressed(resource, phase, *percent),
            RunEvent::ActionFinished { resource, action, results, .. } if !results.is_empty() => {
                for (key, value) in results {
                    self.say(&format!("  {resource}/{action} result: {key} = {value}"));
                }
            }
            RunEvent::Outputs(_)
            | RunEvent::StateFound { .. }
            | RunEvent::ActionFinished { .. }
            | RunEvent::Started
            | RunEvent::Ended(_) => {}
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        self.flush();
    }
}
