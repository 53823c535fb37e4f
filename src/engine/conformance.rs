//! `deployster check-type`: runs a resource type through the protocol's conformance checks, on
//! the same executors as a real run. Each check has a stable id, documented with what to fix in
//! `docs/check-type.md`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::executor::{Executor, Invocation, InvocationLabels, Mount, Outcome};
use super::init::{compile_schema, workspace_view};
use super::protocol::{self, InitResponse, Invocable, StateResponse};
use super::typeref::TypeRef;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Pass,
    /// Worth fixing; the type still conforms.
    Warn,
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub title: &'static str,
    pub level: Level,
    /// What was found (empty for a plain pass).
    pub message: String,
    /// The `--config`/`--bad-config` file the check ran with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
}

/// One invocation and how long it took.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckedCall {
    pub phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
    pub elapsed_ms: u128,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ConformanceReport {
    #[serde(rename = "type")]
    pub type_name: String,
    /// Labels every invocation (containers carry it), as a run's id does.
    pub run_id: String,
    pub findings: Vec<Finding>,
    pub calls: Vec<CheckedCall>,
    /// The `config_schema` the type's init answered with: what a resource of it may configure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<Value>,
}

impl ConformanceReport {
    /// No check failed.
    pub fn conforms(&self) -> bool {
        self.findings.iter().all(|f| f.level != Level::Fail)
    }

    pub fn count(&self, level: Level) -> usize {
        self.findings.iter().filter(|f| f.level == level).count()
    }
}

/// What to check a type with.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Each invocation's time limit.
    pub timeout: Duration,
    /// Calls slower than this are flagged.
    pub slow: Duration,
    /// (label, config) cases that the type should converge on.
    pub configs: Vec<(String, Value)>,
    /// (label, config) cases that break the type's schema.
    pub bad_configs: Vec<(String, Value)>,
    /// Where relative type paths resolve, and the workspace the program is told about.
    pub workspace: PathBuf,
    /// A scratch directory: plugs the type asks for are made inside it.
    pub scratch: PathBuf,
}

/// The checks, in the order they run: (id, title).
pub const CHECKS: [(&str, &str); 18] = [
    ("P001", "init runs and exits 0"),
    ("P002", "init prints one JSON object"),
    ("P003", "init reply follows the init-reply schema"),
    ("P004", "init reply follows the protocol's rules"),
    ("P005", "config_schema compiles"),
    ("P006", "identity names fields of config_schema"),
    ("P010", "the given config satisfies config_schema"),
    ("P011", "state runs, exits 0 and prints one JSON object"),
    ("P012", "state reply follows the schema and the status's rules"),
    ("P013", "each action exits 0"),
    ("P014", "state is VALID after the actions (convergence)"),
    ("P015", "state stays VALID with the same state (idempotence)"),
    ("P016", "running the actions again does not fail (re-entrancy)"),
    ("P017", "unknown request fields are ignored"),
    ("P018", "the state after the actions is the one planned"),
    ("P020", "a config breaking the schema fails state with a message on stderr"),
    ("P030", "calls are quicker than the slow threshold"),
    ("P031", "stdout carries only the JSON reply (no chatter)"),
];

fn title(id: &'static str) -> &'static str {
    CHECKS.iter().find(|(i, _)| *i == id).map_or("", |(_, t)| t)
}

struct TypeChecker<'a> {
    executor: &'a dyn Executor,
    program: TypeRef,
    type_name: String,
    options: &'a CheckOptions,
    report: ConformanceReport,
}

/// Why a case cannot go on: already reported.
struct Halt;

impl TypeChecker<'_> {
    fn record(&mut self, id: &'static str, level: Level, message: impl Into<String>, case: Option<&str>) {
        let finding = Finding { id, title: title(id), level, message: message.into(), case: case.map(str::to_string) };
        self.report.findings.push(finding);
    }

    /// A pass, once per check and case.
    fn pass(&mut self, id: &'static str, case: Option<&str>) {
        let seen = self.report.findings.iter().any(|f| f.id == id && f.case.as_deref() == case);
        if !seen {
            self.record(id, Level::Pass, "", case);
        }
    }

    fn fail(&mut self, id: &'static str, message: impl Into<String>, case: Option<&str>) -> Halt {
        self.record(id, Level::Fail, message, case);
        Halt
    }

    /// Runs the program as `invocable` says with `request` on stdin; records its time.
    async fn call(
        &mut self,
        phase: &str,
        invocable: &Invocable,
        request: &Value,
        mounts: &[Mount],
        case: Option<&str>,
    ) -> Result<Outcome, String> {
        let program = match &invocable.image {
            Some(image) => TypeRef::parse(image, &self.options.workspace).map_err(|e| e.to_string())?,
            None => self.program.clone(),
        };
        let invocation = Invocation {
            entrypoint: invocable.entrypoint.clone(),
            args: invocable.args.clone(),
            stdin: serde_json::to_vec(request).expect("requests serialize"),
            mounts: mounts.to_vec(),
            workdir: Some(self.options.workspace.clone()),
            labels: InvocationLabels {
                manifest: "check-type".into(),
                resource: "check-type".into(),
                phase: phase.into(),
                run_id: self.report.run_id.clone(),
                formerly: Vec::new(),
            },
            env: vec![
                ("DEPLOYSTER_RUN_ID".into(), self.report.run_id.clone()),
                ("DEPLOYSTER_RESOURCE".into(), "check-type".into()),
                ("DEPLOYSTER_PHASE".into(), phase.split(':').next().unwrap_or(phase).into()),
            ],
            ..Invocation::new(program, self.options.timeout)
        };
        let started = std::time::Instant::now();
        let outcome = self.executor.invoke(invocation).await.map_err(|e| e.to_string());
        let elapsed = started.elapsed();
        self.report.calls.push(CheckedCall {
            phase: phase.into(),
            case: case.map(str::to_string),
            elapsed_ms: elapsed.as_millis(),
        });
        outcome
    }

    /// `outcome` exited 0 and printed one JSON object (P031 when it mixed in other text).
    fn json_reply(
        &mut self,
        outcome: Result<Outcome, String>,
        ran: &'static str,
        json: &'static str,
        case: Option<&str>,
    ) -> Result<Vec<u8>, Halt> {
        let outcome = outcome.map_err(|e| self.fail(ran, e, case))?;
        if !outcome.exit.success() {
            let why = format!("{}: {}", outcome.exit, protocol::excerpt(&outcome.stderr, 300));
            return Err(self.fail(ran, why, case));
        }
        if ran != json {
            self.pass(ran, case);
        }
        match serde_json::from_slice::<Value>(&outcome.stdout) {
            Ok(v) if v.is_object() => {
                self.pass(json, case);
                Ok(outcome.stdout)
            }
            _ => {
                let text = String::from_utf8_lossy(&outcome.stdout);
                let line = text.lines().find(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object()));
                match line {
                    Some(line) => {
                        self.record(
                            "P031",
                            Level::Fail,
                            "stdout mixes other text with the JSON reply: print logs and progress to stderr",
                            case,
                        );
                        Err(self.fail(
                            json,
                            format!(
                                "not one JSON object (the reply is there, among other lines: {})",
                                protocol::excerpt(line.as_bytes(), 120)
                            ),
                            case,
                        ))
                    }
                    None => Err(self.fail(
                        json,
                        format!("not a JSON object: {}", protocol::excerpt(&outcome.stdout, 200)),
                        case,
                    )),
                }
            }
        }
    }

    fn schema_check(&mut self, id: &'static str, stem: &str, reply: &[u8], case: Option<&str>) -> Result<(), Halt> {
        let schema = protocol::schemas().into_iter().find(|(s, _)| *s == stem).map(|(_, s)| s).expect("a known schema");
        let validator = jsonschema::validator_for(&schema).expect("the published schemas compile");
        let value: Value = serde_json::from_slice(reply).unwrap_or(Value::Null);
        let errors: Vec<String> =
            validator.iter_errors(&value).take(5).map(|e| format!("{e} (at `{}`)", e.instance_path())).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(self.fail(id, format!("docs/protocol/{stem}.schema.json: {}", errors.join("; ")), case))
        }
    }

    fn init_request(&self) -> Value {
        json!({
            "name": "check-type",
            "type": self.type_name,
            "version": env!("CARGO_PKG_VERSION"),
            "verbose": false,
            "workspace": workspace_view(&self.program, &self.options.workspace),
        })
    }

    async fn init(&mut self) -> Result<InitResponse, Halt> {
        let request = self.init_request();
        let outcome = self.call("init", &Invocable::default(), &request, &[], None).await;
        let reply = self.json_reply(outcome, "P001", "P002", None)?;
        self.schema_check("P003", "init-reply", &reply, None)?;
        self.pass("P003", None);
        let init = protocol::parse_init(&reply).map_err(|e| self.fail("P004", e.to_string(), None))?;
        self.pass("P004", None);
        self.report.config_schema = init.config_schema.clone();
        match &init.config_schema {
            Some(schema) => match compile_schema(schema) {
                Ok(_) => self.pass("P005", None),
                Err(e) => return Err(self.fail("P005", e, None)),
            },
            None => self.record(
                "P005",
                Level::Warn,
                "no config_schema: configs are not checked before they reach the type",
                None,
            ),
        }
        self.identity(&init);
        Ok(init)
    }

    /// Each `identity` pointer starts at a property `config_schema` lists (when it lists any):
    /// one that does not can never be set, so its changes would never replace anything.
    fn identity(&mut self, init: &InitResponse) {
        if init.identity.is_empty() {
            return;
        }
        let listed = init.config_schema.as_ref().and_then(|s| s.get("properties")).and_then(Value::as_object);
        let Some(listed) = listed else { return self.pass("P006", None) };
        let first = |p: &str| p.split('/').nth(1).unwrap_or_default().replace("~1", "/").replace("~0", "~");
        let unlisted: Vec<&str> =
            init.identity.iter().filter(|p| !listed.contains_key(&first(p))).map(String::as_str).collect();
        match unlisted.is_empty() {
            true => self.pass("P006", None),
            false => self.record(
                "P006",
                Level::Fail,
                format!("`identity` names {} that config_schema's properties do not list", unlisted.join(", ")),
                None,
            ),
        }
    }

    /// A scratch directory for each plug the type asks for; (mounts, request paths).
    fn plugs(&self, init: &InitResponse) -> (Vec<Mount>, serde_json::Map<String, Value>) {
        let mut mounts = Vec::new();
        let mut paths = serde_json::Map::new();
        for (name, plug) in &init.plugs {
            let host = self.options.scratch.join("plugs").join(name);
            let _ = std::fs::create_dir_all(&host);
            let seen =
                if self.program.sees_host_paths() { host.display().to_string() } else { plug.container_path.clone() };
            paths.insert(name.clone(), json!(seen));
            mounts.push(Mount {
                name: name.clone(),
                host_path: host,
                container_path: plug.container_path.clone(),
                writable: plug.writable,
                cluster: None,
            });
        }
        (mounts, paths)
    }

    fn state_request(&self, config: &Value, plugs: &serde_json::Map<String, Value>) -> Value {
        let mut request = self.init_request();
        request["config"] = config.clone();
        request["dependencies"] = json!({});
        request["plugs"] = Value::Object(plugs.clone());
        request
    }

    async fn state(
        &mut self,
        init: &InitResponse,
        request: &Value,
        mounts: &[Mount],
        case: &str,
    ) -> Result<StateResponse, Halt> {
        let outcome = self.call("state", &init.state_action, request, mounts, Some(case)).await;
        let reply = self.json_reply(outcome, "P011", "P011", Some(case))?;
        self.schema_check("P012", "state-reply", &reply, Some(case))?;
        protocol::parse_state(&reply).map_err(|e| self.fail("P012", e.to_string(), Some(case)))
    }

    async fn run_actions(
        &mut self,
        request: &Value,
        found: &StateResponse,
        mounts: &[Mount],
        case: &str,
    ) -> Result<Vec<String>, String> {
        let StateResponse::NeedsActions { actions, stale_state, .. } = found else { return Ok(Vec::new()) };
        let mut action_request = request.clone();
        action_request["staleState"] = stale_state.clone().unwrap_or_else(|| json!({}));
        let mut ran = Vec::new();
        for action in actions {
            let outcome = self
                .call(&format!("action:{}", action.name), &action.invocable, &action_request, mounts, Some(case))
                .await?;
            if !outcome.exit.success() {
                return Err(format!(
                    "action `{}`: {}: {}",
                    action.name,
                    outcome.exit,
                    protocol::excerpt(&outcome.stderr, 300)
                ));
            }
            ran.push(action.name.clone());
        }
        Ok(ran)
    }

    async fn case(&mut self, init: &InitResponse, label: &str, config: &Value) -> Result<(), Halt> {
        let case = Some(label);
        if let Some(schema) = &init.config_schema
            && let Ok(validator) = compile_schema(schema)
        {
            let errors: Vec<String> = validator.iter_errors(config).take(5).map(|e| e.to_string()).collect();
            if !errors.is_empty() {
                return Err(self.fail("P010", errors.join("; "), case));
            }
            self.pass("P010", case);
        }
        let (mounts, plugs) = self.plugs(init);
        let request = self.state_request(config, &plugs);
        let first = self.state(init, &request, &mounts, label).await?;
        self.pass("P012", case);
        match self.run_actions(&request, &first, &mounts, label).await {
            Ok(_) => self.pass("P013", case),
            Err(e) => return Err(self.fail("P013", e, case)),
        }
        let after = self.state(init, &request, &mounts, label).await?;
        let StateResponse::Valid { state } = &after else {
            return Err(self.fail("P014", format!("state is {} after the actions ran", after.status()), case));
        };
        self.pass("P014", case);
        match &first {
            StateResponse::NeedsActions { planned_state: Some(planned), .. } => {
                let unlike = super::as_found::unlike_planned(planned, state);
                match unlike.is_empty() {
                    true => self.pass("P018", case),
                    false => self.record(
                        "P018",
                        Level::Fail,
                        format!("the state after the actions is not the one planned: {}", unlike.join("; ")),
                        case,
                    ),
                }
            }
            StateResponse::NeedsActions { .. } => self.record(
                "P018",
                Level::Warn,
                "no `planned_state`: a plan cannot read this resource's dependents before it is applied",
                case,
            ),
            StateResponse::Valid { .. } => {}
        }
        match self.state(init, &request, &mounts, label).await? {
            StateResponse::Valid { state: again } if again == *state => self.pass("P015", case),
            StateResponse::Valid { state: again } => self.record(
                "P015",
                Level::Fail,
                format!("the state changed between two reads: {state} then {again}"),
                case,
            ),
            other => self.record("P015", Level::Fail, format!("state is {} on a second read", other.status()), case),
        }
        if first.status() != protocol::Status::Valid {
            match self.run_actions(&request, &first, &mounts, label).await {
                Ok(_) => self.pass("P016", case),
                Err(e) => self.record("P016", Level::Warn, format!("run again, as after a crash: {e}"), case),
            }
        }
        let mut extended = request.clone();
        extended["x_deployster_check_unknown_field"] = json!({"ignore": "me"});
        let outcome = self.call("state", &init.state_action, &extended, &mounts, case).await;
        let answered = outcome.ok().filter(|o| o.exit.success()).and_then(|o| protocol::parse_state(&o.stdout).ok());
        match answered {
            Some(reply) if reply.status() == protocol::Status::Valid => self.pass("P017", case),
            Some(reply) => self.record(
                "P017",
                Level::Fail,
                format!("with one unknown field added, state answered {}", reply.status()),
                case,
            ),
            None => self.record("P017", Level::Fail, "with one unknown field added to the request, state failed", case),
        }
        Ok(())
    }

    async fn bad_case(&mut self, init: &InitResponse, label: &str, config: &Value) {
        // Deployster checks a config against the type's schema before any state call: a config
        // the schema refuses never reaches the type, so only configs it accepts test the type.
        if let Some(why) = schema_refusal(init, config) {
            let message =
                format!("the type's config_schema refuses it ({why}): Deployster refuses it before state runs");
            return self.record("P020", Level::Pass, message, Some(label));
        }
        let (mounts, plugs) = self.plugs(init);
        let request = self.state_request(config, &plugs);
        match self.call("state", &init.state_action, &request, &mounts, Some(label)).await {
            Ok(o) if !o.exit.success() && !String::from_utf8_lossy(&o.stderr).trim().is_empty() => {
                self.pass("P020", Some(label))
            }
            Ok(o) if !o.exit.success() => {
                self.record("P020", Level::Fail, format!("{}, but nothing on stderr says why", o.exit), Some(label))
            }
            Ok(_) => {
                self.record("P020", Level::Fail, "state exited 0 for a config that breaks the schema", Some(label))
            }
            Err(e) => self.record("P020", Level::Fail, e, Some(label)),
        }
    }
}

/// Why the type's own `config_schema` refuses `config`, if it does (a schema that does not compile
/// refuses nothing here: P005 reports it).
fn schema_refusal(init: &InitResponse, config: &Value) -> Option<String> {
    let validator = compile_schema(init.config_schema.as_ref()?).ok()?;
    let errors: Vec<String> = validator.iter_errors(config).take(3).map(|e| e.to_string()).collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// Checks `type_name` (resolved against `options.workspace`) on `executor`.
pub async fn check(executor: &dyn Executor, type_name: &str, options: &CheckOptions) -> ConformanceReport {
    let run_id = super::context::new_run_id();
    let report = ConformanceReport {
        type_name: type_name.to_string(),
        run_id,
        findings: Vec::new(),
        calls: Vec::new(),
        config_schema: None,
    };
    let program = match TypeRef::parse(type_name, &options.workspace) {
        Ok(program) => program,
        Err(e) => {
            let mut report = report;
            report.findings.push(Finding {
                id: "P001",
                title: title("P001"),
                level: Level::Fail,
                message: e.to_string(),
                case: None,
            });
            return report;
        }
    };
    let mut checker = TypeChecker { executor, program, type_name: type_name.to_string(), options, report };
    if let Ok(init) = checker.init().await {
        if options.configs.is_empty() {
            checker.record(
                "P010",
                Level::Warn,
                "no --config given: state, actions and convergence were not checked",
                None,
            );
        }
        for (label, config) in &options.configs {
            let _ = checker.case(&init, label, config).await;
        }
        for (label, config) in &options.bad_configs {
            checker.bad_case(&init, label, config).await;
        }
    }
    let slow: Vec<String> = checker
        .report
        .calls
        .iter()
        .filter(|c| c.elapsed_ms > options.slow.as_millis())
        .map(|c| format!("{} took {} ms", c.phase, c.elapsed_ms))
        .collect();
    match slow.is_empty() {
        true => checker.pass("P030", None),
        false => {
            let message = format!("slower than {:?}: {}", options.slow, slow.join(", "));
            checker.record("P030", Level::Warn, message, None);
        }
    }
    if !checker.report.findings.iter().any(|f| f.id == "P031") {
        checker.pass("P031", None);
    }
    checker.report
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_check_is_documented_with_what_to_fix() {
        let docs = include_str!("../../docs/check-type.md");
        for (id, title) in super::CHECKS {
            assert!(docs.contains(&format!("| {id} | {title} |")), "docs/check-type.md has no row for {id} ({title})");
        }
    }
}
