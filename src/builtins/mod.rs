//! Resource types carried by the deployster binary, so that it is useful with no Docker and no
//! cloud. They speak the real protocol — request JSON in, response JSON and messages out — and
//! run either as a program (`deployster __type <name> [args]`, request on stdin, response on
//! stdout) or, where nothing they do needs a process of their own, inside deployster through
//! [`InProcess`], which hands them the same bytes and reads the same bytes back.
//!
//! Both types accept an optional writable plug named `files`: when given, relative paths
//! resolve inside it rather than in the workspace. That is how they reach the host from a
//! container, which sees nothing of the host but its plugs.

mod directory;
mod error;
mod file;
mod in_process;
#[cfg(feature = "kube")]
pub mod kubernetes;
mod package;
pub mod reference;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub use error::BuiltinError;
pub use in_process::InProcess;

/// `builtin/kubernetes`'s name: answered by `kubernetes::KubeObjects`, which holds the clients.
pub const KUBERNETES: &str = "kubernetes";

/// Runs built-in type `name` with `args` (none for init, `state`, or an action name) as a
/// program: the request on stdin, the reply on stdout and stderr. Returns the exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("builtin/{name}: cannot read the request: {e}");
        return 1;
    }
    if name == "package" && args.first().is_some_and(|a| a != "state") {
        return package_action(args, &input);
    }
    let reply = respond(name, args, &input);
    print!("{}", reply.stdout);
    // A program names itself: its stderr is read among others'.
    if !reply.stderr.is_empty() {
        eprint!("builtin/{name}: {}", reply.stderr);
    }
    reply.code
}

/// What a built-in type answered: its stdout, and on failure (code 1) why, which its program
/// prints on stderr after its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Whether this call can run inside deployster: everything but `builtin/package`'s state and
/// actions, which run the package's own scripts — those need a process (and its process group,
/// time limit and signals) of their own, and the run's environment.
pub fn runs_in_process(name: &str, args: &[String]) -> bool {
    name != "package" || args.is_empty()
}

/// Why built-in `name` cannot be used in a cluster at all, when it cannot.
pub fn refused_in_cluster(name: &str) -> Option<&'static str> {
    (name == "package").then_some(
        "it deploys a package on the machine it runs on, and its scripts need that machine's shell; in a cluster \
         that would be a Pod gone when it ends: run it with the CLI on the machine it is for",
    )
}

/// Whether a request to a file built-in ([`crate::engine::typeref::TypeRef::is_file_builtin`]) stays within its `files` plug: in a Pod
/// the rest of the filesystem goes with the Pod, so a path elsewhere (absolute, or climbing out
/// with `..`) would be written and lost.
pub fn confined(request: &[u8]) -> Result<(), BuiltinError> {
    let request: Value =
        serde_json::from_slice(request).map_err(|e| BuiltinError::Request(format!("is not JSON: {e}")))?;
    let Some(plug) = request.get("plugs").and_then(|p| p.get(FILES_PLUG)).and_then(Value::as_str) else {
        return Err(BuiltinError::Unconfined(format!(
            "it has no `{FILES_PLUG}` plug: in a cluster it acts in a Pod, whose own filesystem goes with the Pod; \
             give it a plug `{FILES_PLUG}` naming a PersistentVolumeClaim"
        )));
    };
    let path = request
        .pointer("/config/path")
        .and_then(Value::as_str)
        .ok_or_else(|| BuiltinError::config("path", "must be a string"))?;
    let given = Path::new(path);
    let inside = given.strip_prefix(plug).unwrap_or(given);
    let climbs = inside.components().any(|c| matches!(c, std::path::Component::ParentDir));
    if inside.is_absolute() || climbs {
        return Err(BuiltinError::Unconfined(format!(
            "config.path `{path}` is outside its `{FILES_PLUG}` plug: in a cluster it acts in a Pod, and only the \
             plug (mounted at {plug}) outlives it; give a path relative to the plug"
        )));
    }
    Ok(())
}

/// Answers one request to built-in type `name` (any call but a `builtin/package` action).
pub fn respond(name: &str, args: &[String], input: &str) -> Reply {
    let mut said = Vec::new();
    let result = dispatch(name, args, input, &mut said);
    let mut stdout: String = said.iter().map(|line| format!("{line}\n")).collect();
    match result {
        Ok(Some(response)) => {
            stdout.push_str(&format!("{response}\n"));
            Reply { code: 0, stdout, stderr: String::new() }
        }
        Ok(None) => Reply { code: 0, stdout, stderr: String::new() },
        Err(error) => Reply { code: 1, stdout, stderr: format!("{error}\n") },
    }
}

/// A `builtin/package` action. A failed script's exit code is passed on with nothing added to
/// stderr: its own stderr, or else its last message, says why (seed 004).
fn package_action(args: &[String], input: &str) -> i32 {
    let outcome = parse_request(input)
        .map_err(package::Failure::Other)
        .and_then(|parsed| package::act(args, &Request::new(&parsed)?));
    match outcome {
        Ok(()) => 0,
        Err(package::Failure::Script(code)) => code,
        Err(package::Failure::Other(error)) => {
            eprintln!("builtin/package: {error}");
            1
        }
    }
}

/// Parses a request. Requests carry dependencies recursively, so a long chain nests deeper than
/// serde_json's default limit of 128; the input comes from the engine, not from strangers.
fn parse_request(input: &str) -> Result<Value, BuiltinError> {
    use serde::Deserialize;
    let mut deserializer = serde_json::Deserializer::from_str(input);
    deserializer.disable_recursion_limit();
    Value::deserialize(&mut deserializer).map_err(|e| BuiltinError::Request(format!("is not JSON: {e}")))
}

/// A reply (for init and state) or nothing (for an action); what an action did goes to `said`.
fn dispatch(name: &str, args: &[String], input: &str, said: &mut Vec<String>) -> Result<Option<Value>, BuiltinError> {
    let request = parse_request(input)?;
    let verb = args.first().map(String::as_str);
    match (name, verb) {
        ("directory", None) => Ok(Some(directory::init())),
        ("directory", Some("state")) => directory::state(&Request::new(&request)?).map(Some),
        ("directory", Some(action)) => directory::act(action, &Request::new(&request)?, said).map(|()| None),
        ("file", None) => Ok(Some(file::init())),
        ("file", Some("state")) => file::state(&Request::new(&request)?).map(Some),
        ("file", Some(action)) => file::act(action, &Request::new(&request)?, said).map(|()| None),
        ("package", None) => Ok(Some(package::init())),
        ("package", Some("state")) => package::state(&Request::new(&request)?).map(Some),
        // Answered by `kubernetes::KubeObjects`, which holds the clients: a `__type` program
        // (DEPLOYSTER_BUILTINS=process) or a build without the kube feature has none.
        (KUBERNETES, _) => Err(BuiltinError::NoClient),
        (other, _) => Err(BuiltinError::UnknownType(other.into())),
    }
}

/// The parts of a state or action request the built-ins use.
struct Request<'a> {
    config: &'a Value,
    /// Where relative paths resolve: the `files` plug when given, else the workspace.
    base: PathBuf,
}

/// The plug the built-in types accept: a writable host directory for relative paths.
pub const FILES_PLUG: &str = "files";

impl<'a> Request<'a> {
    fn new(request: &'a Value) -> Result<Self, BuiltinError> {
        let config = request.get("config").ok_or_else(|| BuiltinError::Request("has no `config`".into()))?;
        let workspace = request.get("workspace").and_then(Value::as_str).unwrap_or(".");
        let plug = request.get("plugs").and_then(|p| p.get(FILES_PLUG)).and_then(Value::as_str);
        Ok(Self { config, base: PathBuf::from(plug.unwrap_or(workspace)) })
    }

    /// `config.path`, absolute.
    fn path(&self) -> Result<PathBuf, BuiltinError> {
        let path = self.text("path")?;
        Ok(self.base.join(path))
    }

    /// A string config value the type needs.
    fn text(&self, field: &str) -> Result<&'a str, BuiltinError> {
        self.config.get(field).and_then(Value::as_str).ok_or_else(|| BuiltinError::config(field, "must be a string"))
    }

    /// Whether a plan sends `field` not known yet (see `state_with_unknowns`).
    fn unknown(&self, field: &str) -> bool {
        self.config.get(field).is_some_and(crate::engine::protocol::is_unknown)
    }

    /// Refuses to tell a thing that exists from a config whose `fields` are not known yet.
    fn cannot_tell(&self, shown: &str, fields: &[&str]) -> BuiltinError {
        let fields: Vec<String> = fields.iter().map(|f| format!("config.{f}")).collect();
        BuiltinError::Refused(format!(
            "{shown} exists, and {} is not known yet: whether it differs is known once it is",
            fields.join(", ")
        ))
    }

    /// `config.mode` as permission bits, when given (and known).
    fn mode(&self) -> Result<Option<u32>, BuiltinError> {
        match self.config.get("mode") {
            Some(v) if crate::engine::protocol::is_unknown(v) => Ok(None),
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => u32::from_str_radix(s, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .map(Some)
                .ok_or_else(|| BuiltinError::config("mode", format!("`{s}` is not an octal mode such as 0644"))),
            Some(_) => Err(BuiltinError::config("mode", "must be a string such as \"0644\"")),
        }
    }
}

/// The `plugs` part of the init response: the optional `files` plug.
fn plugs() -> Value {
    json!({FILES_PLUG: {"container_path": "/files", "optional": true, "writable": true}})
}

/// The schema fragment for `mode`: an octal string.
/// What `path` means to the file built-ins.
const PATH_DESCRIPTION: &str = "where it is; a relative path is taken from the `files` plug when the resource has one, else from the manifest's directory";

fn mode_schema() -> Value {
    json!({"type": "string", "pattern": "^0?[0-7]{3,4}$", "description": "octal permission bits, e.g. \"0755\""})
}

fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

fn mode_of(metadata: &std::fs::Metadata) -> u32 {
    metadata.permissions().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) -> Result<(), BuiltinError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(BuiltinError::io(format!("set mode {} on", format_mode(mode)), path))
}

/// A STALE or MISSING response.
/// A STALE or MISSING reply: its state as found, if any, and the state it is planned to have
/// once its actions ran (its values not known until then [`crate::engine::protocol::unknown`]).
fn needs(status: &str, (stale_state, planned): (Option<Value>, Value), actions: &[(&str, String)]) -> Value {
    let actions: Vec<Value> = actions
        .iter()
        .map(|(name, description)| json!({"name": name, "description": description, "args": [name]}))
        .collect();
    let mut response = json!({"status": status, "actions": actions});
    if let Some(stale) = stale_state {
        response["staleState"] = stale;
    }
    if !planned.is_null() {
        response["planned_state"] = planned;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's answer, or its error as the user reads it.
    fn call(kind: &str, verb: Option<&str>, config: Value, workspace: &Path) -> Result<Option<Value>, String> {
        let request = json!({"name": "r", "config": config, "workspace": workspace});
        let args: Vec<String> = verb.into_iter().map(str::to_string).collect();
        dispatch(kind, &args, &request.to_string(), &mut Vec::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn init_responses_are_draft4_schemas_with_a_state_action() {
        for kind in ["directory", "file", "package"] {
            let init = call(kind, None, json!({}), Path::new("/")).unwrap().unwrap();
            assert_eq!(init["state_action"]["args"], json!(["state"]));
            assert!(init["config_schema"].get("$schema").is_none());
            jsonschema::draft4::new(&init["config_schema"]).expect("a valid Draft 4 schema");
        }
    }

    #[test]
    fn relative_paths_resolve_inside_the_files_plug_when_given() {
        let plug = tempfile::tempdir().unwrap();
        let request = json!({"name": "r", "config": {"path": "in/plug", "content": "x"}, "workspace": "/nonexistent",
                             "plugs": {"files": plug.path()}});
        std::fs::create_dir(plug.path().join("in")).unwrap();
        dispatch("file", &["write".into()], &request.to_string(), &mut Vec::new()).unwrap();
        assert_eq!(std::fs::read_to_string(plug.path().join("in/plug")).unwrap(), "x");
    }

    #[test]
    fn relative_paths_resolve_against_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let state = call("directory", Some("state"), json!({"path": "sub"}), ws.path()).unwrap().unwrap();
        assert_eq!(state["status"], "MISSING");
        call("directory", Some("create"), json!({"path": "sub", "mode": "0700"}), ws.path()).unwrap();
        let state =
            call("directory", Some("state"), json!({"path": "sub", "mode": "700"}), ws.path()).unwrap().unwrap();
        assert_eq!(state, json!({"status": "VALID", "state": {"path": ws.path().join("sub"), "mode": "0700"}}));
    }

    #[test]
    fn something_else_in_the_way_is_refused_not_replaced() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f"), "data").unwrap();
        let err = call("directory", Some("state"), json!({"path": "f"}), ws.path()).unwrap_err();
        assert!(err.contains("exists and is not a directory"), "{err}");
        let err = call("file", Some("state"), json!({"path": ".", "content": ""}), ws.path()).unwrap_err();
        assert!(err.contains("is not a regular file"), "{err}");
        assert_eq!(std::fs::read_to_string(ws.path().join("f")).unwrap(), "data");
    }

    #[test]
    fn writing_into_a_missing_directory_fails_clearly_and_leaves_no_temporary_file() {
        let ws = tempfile::tempdir().unwrap();
        let err = call("file", Some("write"), json!({"path": "no/such/f", "content": "x"}), ws.path()).unwrap_err();
        assert!(err.contains("directory") && err.contains("does not exist"), "{err}");
        let entries: Vec<_> = std::fs::read_dir(ws.path()).unwrap().collect();
        assert!(entries.is_empty(), "{entries:?}");
    }

    #[test]
    fn rewriting_keeps_the_mode_unless_one_is_configured() {
        use std::os::unix::fs::PermissionsExt;
        let ws = tempfile::tempdir().unwrap();
        let file = ws.path().join("f");
        std::fs::write(&file, "old").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let stale = call("file", Some("state"), json!({"path": "f", "content": "new"}), ws.path()).unwrap().unwrap();
        assert_eq!(stale["status"], "STALE");
        assert_eq!(stale["staleState"]["size"], 3);
        call("file", Some("write"), json!({"path": "f", "content": "new"}), ws.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
    }

    #[test]
    fn deleting_removes_files_and_only_empty_directories() {
        let ws = tempfile::tempdir().unwrap();
        call("directory", Some("create"), json!({"path": "d"}), ws.path()).unwrap();
        call("file", Some("write"), json!({"path": "d/f", "content": "x"}), ws.path()).unwrap();
        let err = call("directory", Some("delete"), json!({"path": "d"}), ws.path()).unwrap_err();
        assert!(err.contains("is not empty; refusing"), "{err}");
        call("file", Some("delete"), json!({"path": "d/f", "content": "x"}), ws.path()).unwrap();
        call("directory", Some("delete"), json!({"path": "d"}), ws.path()).unwrap();
        assert!(!ws.path().join("d").exists());
        call("file", Some("delete"), json!({"path": "d/f", "content": "x"}), ws.path())
            .expect("deleting twice is fine");
        call("directory", Some("delete"), json!({"path": "d"}), ws.path()).expect("deleting twice is fine");
    }

    #[test]
    fn in_a_pod_a_file_built_in_stays_within_its_files_plug() {
        let request = |path: &str, plugs: Value| {
            serde_json::to_vec(&json!({"config": {"path": path, "content": ""}, "workspace": "/w", "plugs": plugs}))
                .unwrap()
        };
        let plug = json!({"files": "/files"});
        for inside in ["a", "d/a.json", "./a", "/files/a", "/files"] {
            confined(&request(inside, plug.clone())).unwrap_or_else(|e| panic!("{inside}: {e}"));
        }
        for outside in ["/tmp/a", "../a", "d/../../a", "/files/../etc/passwd", "/filesystem/a"] {
            let why = confined(&request(outside, plug.clone())).unwrap_err();
            assert_eq!(why.reason(), "OutsideFilesPlug");
            let why = why.to_string();
            assert!(why.contains(&format!("config.path `{outside}` is outside its `files` plug")), "{why}");
            assert!(why.contains("mounted at /files"), "{why}");
        }
        let why = confined(&request("a", json!({}))).unwrap_err().to_string();
        assert!(why.contains("it has no `files` plug"), "{why}");
        assert!(confined(b"not json").unwrap_err().to_string().contains("not JSON"));
    }

    #[test]
    fn bad_modes_and_unknown_actions_are_errors() {
        let ws = tempfile::tempdir().unwrap();
        let err = call("directory", Some("state"), json!({"path": "d", "mode": "999"}), ws.path()).unwrap_err();
        assert!(err.contains("not an octal mode"), "{err}");
        let err = call("file", Some("explode"), json!({"path": "f", "content": ""}), ws.path()).unwrap_err();
        assert!(err.contains("unknown action `explode`"), "{err}");
        let unknown = dispatch("nope", &[], "{}", &mut Vec::new()).unwrap_err();
        assert_eq!(unknown.reason(), "UnknownType");
        assert!(unknown.to_string().contains("unknown built-in type"));
        // What holds no client (a `__type` program) says why it cannot run it.
        let refused = dispatch("kubernetes", &["state".into()], "{}", &mut Vec::new()).unwrap_err();
        assert!(refused.to_string().contains("answered inside deployster"), "{refused}");
    }
}
