//! A resource type for Deployster's tests. It follows the protocol by default and misbehaves on
//! request, so that every bad response can be produced by a real program.
//!
//! * init: appends `<name> init <ms>` to `<workspace>/fixture-init.log` when that file exists;
//!   prints `<workspace>/fixture-init/<name>.json` verbatim when that file exists (any
//!   content, even garbage). Otherwise the image tag of `type` picks a profile (containers see
//!   no workspace files): `…:plugs` asks for plug `ro` at `/ro` (read-only) and `rw` at `/rw`
//!   (writable), with a `delete_action` (`act delete`: removes the marker); `…:eager` has a
//!   state action (`exit-at-once`) that exits at once, printing nothing, without reading its
//!   request; anything else gets a permissive default.
//! * state (`state`): driven by `config`:
//!   - `respond`: a JSON value printed as the response; `raw`: a string printed as is;
//!   - `exit`: exit code; `sleep_ms`: sleep first; `hang`: never finish;
//!   - otherwise VALID when the marker file (`marker`, default `<workspace>/<name>.marker`)
//!     exists, MISSING with action `create` when it does not.
//!   - `actions`: the actions to ask for when MISSING, instead of the default `create`;
//!   - `planned`: the `planned_state` given when MISSING;
//!   - `spew_bytes`: print that many bytes on stdout first;
//!   - `fill_disk: <path>`: first write zeros to that file until its file system is full
//!     (`action_fill_disk`: the same in an action, after its intent was recorded);
//!   - `probe`: VALID, with a state telling where the program runs: `netns` (its network
//!     namespace), `hostname`, and with `probe.connect: "ip:port"` whether a TCP connection
//!     there succeeded (`connected`, or `connect_error`).
//! * action (`act <name>`): prints to stdout and stderr; `action_exit` makes it fail;
//!   `lock: <path>` holds an exclusive lock on that file while it runs and logs `<pid> started
//!   <ms>` and `<pid> finished <ms>` to `<path>.log` — or logs `<pid> overlap <ms>` and fails when
//!   another action holds it; with `lock_in_child: true` a child process (`hold`) does the
//!   locking and sleeping, as a program's worker would (`detach_child: true`: in a session of
//!   its own, by setsid);
//!   `stays_stale` makes `create` not create the marker; `write_file` makes it write that
//!   path (and fail clearly if it cannot); `sleep_ms` applies too, `action_sleep_ms` only here.
//!   Messages (seed 004): `progress_steps` progress messages `step_ms` apart, `stall_after`
//!   (hang before that step), `results` ({key: value}) and `error_msg` in a last JSON
//!   message; `quiet` keeps stderr empty (so that a failure's message comes from stdout);
//!   `on_term: <path>` makes the action's sleep end on SIGTERM, writing that file first;
//!   `not_reentrant` makes `create` fail when the marker exists already.
//! * `changing`: a VALID state carries the time it was read (never the same twice);
//!   `strict`: any request field the protocol does not define fails the program;
//!   `max_depth: N`: a request nesting deeper than N levels fails it, as a JSON parser with
//!   that limit would.
//! * `log`: appends `<name> <phase> <start_ms> <end_ms>` to that file; `record`: appends each
//!   request as a JSON line, with the `DEPLOYSTER_PLUG_*` variables the program saw and every
//!   `DEPLOYSTER_*` variable (`env`), and the names of all its variables (`env_names`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

fn append(path: &str, line: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open log");
    file.write_all(format!("{line}\n").as_bytes()).expect("append log");
}

/// How deeply `value` nests arrays and objects.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The request fields a `strict` fixture accepts.
const KNOWN_FIELDS: [&str; 9] =
    ["name", "type", "version", "verbose", "workspace", "config", "dependencies", "plugs", "staleState"];

fn main() {
    if std::env::args().nth(1).as_deref() == Some("exit-at-once") {
        // The `eager` profile's state: a program that never reads its request.
        return;
    }
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("read stdin");
    // Requests nest dependencies recursively: no recursion limit for long chains.
    let mut deserializer = serde_json::Deserializer::from_str(&input);
    deserializer.disable_recursion_limit();
    let request = <Value as serde::Deserialize>::deserialize(&mut deserializer).unwrap_or(Value::Null);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = request["name"].as_str().unwrap_or("unnamed").to_string();
    let workspace = PathBuf::from(request["workspace"].as_str().unwrap_or("."));
    let config = request.get("config").cloned().unwrap_or(Value::Null);
    if let [hold, path, ms] = args.as_slice()
        && hold == "hold"
    {
        // A grandchild of deployster holding the action's lock (see `lock_in_child`).
        let _held = hold_lock(path).unwrap_or_else(|code| std::process::exit(code));
        std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(0)));
        append(&format!("{path}.log"), &format!("{} finished {}", std::process::id(), now_ms()));
        return;
    }
    let phase = match args.as_slice() {
        [] => "init".to_string(),
        [state] if state == "state" => "state".to_string(),
        [act, action] if act == "act" => format!("action:{action}"),
        other => {
            eprintln!("fixture: unexpected arguments {other:?}");
            std::process::exit(64);
        }
    };
    if let Some(path) = config["record"].as_str() {
        let plug_env: serde_json::Map<String, Value> = std::env::vars()
            .filter(|(k, _)| k.starts_with("DEPLOYSTER_PLUG_"))
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let env: serde_json::Map<String, Value> = std::env::vars()
            .filter(|(k, _)| k.starts_with("DEPLOYSTER_"))
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let env_names: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
        let record =
            json!({"phase": phase, "request": request, "plug_env": plug_env, "env": env, "env_names": env_names});
        append(path, &record.to_string());
    }
    let started = now_ms();
    let tag = request["type"].as_str().and_then(|t| t.rsplit_once(':')).map(|(_, tag)| tag.to_string());
    if let Some(limit) = config["max_depth"].as_u64()
        && depth(&request) > limit as usize
    {
        eprintln!("fixture: the request nests {} levels deep, past this parser's limit of {limit}", depth(&request));
        std::process::exit(65);
    }
    if config["strict"].as_bool() == Some(true)
        && let Some(unknown) = request.as_object().and_then(|r| r.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())))
    {
        eprintln!("fixture: unknown request field `{unknown}`");
        std::process::exit(9);
    }
    let code = run(&phase, &name, &workspace, &config, tag.as_deref());
    if let Some(path) = config["log"].as_str() {
        append(path, &format!("{name} {phase} {started} {}", now_ms()));
    }
    std::process::exit(code);
}

fn run(phase: &str, name: &str, workspace: &std::path::Path, config: &Value, tag: Option<&str>) -> i32 {
    if phase == "init" {
        // Counted where a test asks for it (the request of init carries no config).
        let calls = workspace.join("fixture-init.log");
        if calls.exists() {
            append(&calls.to_string_lossy(), &format!("{name} init {}", now_ms()));
        }
        let custom = workspace.join("fixture-init").join(format!("{name}.json"));
        let mut init =
            json!({"label": "Test fixture", "config_schema": {"type": "object"}, "state_action": {"args": ["state"]}});
        if tag == Some("plugs") {
            init["plugs"] = json!({"ro": {"container_path": "/ro"}, "rw": {"container_path": "/rw", "writable": true}});
            init["delete_action"] = json!({"args": ["act", "delete"]});
        }
        if tag == Some("eager") {
            init["state_action"] = json!({"args": ["exit-at-once"]});
        }
        match std::fs::read_to_string(&custom) {
            Ok(text) => print!("{text}"),
            Err(_) => println!("{init}"),
        }
        return 0;
    }
    if config["hang"].as_bool() == Some(true) {
        std::thread::sleep(Duration::from_secs(3600));
    }
    if let Some(ms) = config["sleep_ms"].as_u64() {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let marker =
        config["marker"].as_str().map(PathBuf::from).unwrap_or_else(|| workspace.join(format!("{name}.marker")));
    if let Some(action) = phase.strip_prefix("action:") {
        println!("{action}: working on {}", marker.display());
        let sleep_ms = config["action_sleep_ms"].as_u64().unwrap_or(0);
        if config["ignore_term"].as_bool() == Some(true) {
            // SAFETY: SIG_IGN is a valid disposition.
            unsafe { signal_disposition(SIGTERM, SIG_IGN) };
        }
        if let Some(path) = config["daemon"].as_str() {
            // `worker &`: a process left running, which appends to `<path>.log` after
            // `daemon_ms` unless it is stopped first; the program does not wait for it.
            let exe = std::env::current_exe().expect("own path");
            let ms = config["daemon_ms"].as_u64().unwrap_or(0).to_string();
            // Never waited for: being left behind is what it is for.
            #[allow(clippy::zombie_processes)]
            let _daemon = std::process::Command::new(exe)
                .args(["hold", path, &ms])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start the daemon");
            // Exits once the daemon runs (it says so in its log), not before.
            let log = format!("{path}.log");
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("started"))
                && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        match config["lock"].as_str() {
            Some(lock) if config["lock_in_child"].as_bool() == Some(true) => {
                // The work happens in a child of this program: a grandchild of deployster.
                let exe = std::env::current_exe().expect("own path");
                // `detach_child`: the worker leaves the program's session and group (setsid), as
                // a daemonizing worker does.
                let mut worker = if config["detach_child"].as_bool() == Some(true) {
                    let mut setsid = std::process::Command::new("setsid");
                    setsid.arg(exe);
                    setsid
                } else {
                    std::process::Command::new(exe)
                };
                let status = worker.args(["hold", lock, &sleep_ms.to_string()]).status();
                match status.ok().and_then(|s| s.code()) {
                    Some(0) => {}
                    code => return code.unwrap_or(1),
                }
            }
            Some(lock) => {
                // Held until the process ends, however it ends: the kernel releases it.
                let _held = match hold_lock(lock) {
                    Err(code) => return code,
                    Ok(file) => file,
                };
                std::thread::sleep(Duration::from_millis(sleep_ms));
                append(&format!("{lock}.log"), &format!("{} finished {}", std::process::id(), now_ms()));
            }
            None => nap(sleep_ms, config),
        }
        talk(config);
        if let Some(path) = config["action_fill_disk"].as_str() {
            fill_disk(path);
        }
        let quiet = config["quiet"].as_bool() == Some(true);
        if !quiet {
            eprintln!("{action}: a note on stderr");
        }
        if config["not_reentrant"].as_bool() == Some(true) && marker.exists() {
            eprintln!("{action}: {} exists already", marker.display());
            return 5;
        }
        if let Some(code) = config["action_exit"].as_i64().filter(|c| *c != 0) {
            if !quiet {
                eprintln!("{action}: failing with exit code {code} as configured");
            }
            return code as i32;
        }
        if let Some(path) = config["write_file"].as_str()
            && let Err(e) = std::fs::write(path, "written by an action\n")
        {
            eprintln!("{action}: cannot write {path}: {e}");
            return 1;
        }
        if action == "delete" {
            let _ = std::fs::remove_file(&marker);
        }
        if action == "create" && config["stays_stale"].as_bool() != Some(true) {
            std::fs::write(&marker, config["content"].as_str().unwrap_or("created")).expect("write marker");
        }
        return 0;
    }
    eprintln!("state: checking {name}");
    if config["stderr_forever"].as_bool() == Some(true) {
        // A program that never stops talking: only a bound on stderr ends it.
        let mut err = std::io::stderr().lock();
        let line = format!("state: {name} says more{}\n", ".".repeat(200));
        while err.write_all(line.as_bytes()).is_ok() {}
        return 1;
    }
    if let Some(path) = config["fill_disk"].as_str() {
        fill_disk(path);
    }
    if let Some(n) = config["spew_bytes"].as_u64() {
        let chunk = vec![b'x'; 64 * 1024];
        let mut out = std::io::stdout().lock();
        let mut left = n as usize;
        while left > 0 {
            let take = left.min(chunk.len());
            if out.write_all(&chunk[..take]).is_err() {
                return 1;
            }
            left -= take;
        }
    }
    if let Some(code) = config["exit"].as_i64().filter(|c| *c != 0) {
        eprintln!("state: failing with exit code {code} as configured");
        return code as i32;
    }
    if let Some(raw) = config["raw"].as_str() {
        print!("{raw}");
        return 0;
    }
    if let Some(probe) = config.get("probe") {
        println!("{}", json!({"status": "VALID", "state": where_am_i(probe)}));
        return 0;
    }
    if let Some(response) = config.get("respond") {
        println!("{response}");
        return 0;
    }
    if marker.exists() {
        let content = std::fs::read_to_string(&marker).unwrap_or_default();
        let mut state = json!({"marker": marker, "content": content});
        if config["changing"].as_bool() == Some(true) {
            state["read_at"] = json!(now_ms());
        }
        println!("{}", json!({"status": "VALID", "state": state}));
    } else {
        let default = json!([{"name": "create", "description": format!("Create {}", marker.display()), "args": ["act", "create"]}]);
        let actions = config.get("actions").cloned().unwrap_or(default);
        let mut reply = json!({"status": "MISSING", "staleState": {}, "actions": actions});
        if let Some(planned) = config.get("planned") {
            reply["planned_state"] = planned.clone();
        }
        println!("{reply}");
    }
    0
}

static TERMINATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigterm(_: i32) {
    TERMINATED.store(true, std::sync::atomic::Ordering::SeqCst);
}

unsafe extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    // The same C function, given a disposition (SIG_IGN) rather than a handler.
    #[allow(clashing_extern_declarations)]
    #[link_name = "signal"]
    fn signal_disposition(signum: i32, disposition: usize) -> usize;
}

const SIGTERM: i32 = 15;
const SIG_IGN: usize = 1;

/// Sleeps `ms`. With `on_term: <path>`, SIGTERM ends the nap: the program says it cleans up,
/// writes `<path>` and exits 0 — a program that handles SIGTERM as it should.
fn nap(ms: u64, config: &Value) {
    let Some(path) = config["on_term"].as_str() else {
        std::thread::sleep(Duration::from_millis(ms));
        return;
    };
    // SAFETY: the handler only stores to an atomic.
    unsafe { signal(SIGTERM, on_sigterm) };
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < until {
        if TERMINATED.load(std::sync::atomic::Ordering::SeqCst) {
            println!("cleaning up after SIGTERM");
            std::fs::write(path, "cleaned up\n").expect("write the on_term file");
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Seed-004 messages on an action's stdout: `progress_steps` steps `step_ms` apart (the
/// first an absolute percentage, the others increments, the last absolute 100), hanging
/// instead of reporting step `stall_after`; then, with `results` ({key: value}) or
/// `error_msg`, one multi-line JSON message carrying them.
fn talk(config: &Value) {
    let steps = config["progress_steps"].as_u64().unwrap_or(0);
    let step = 100.0 / steps.max(1) as f64;
    for i in 0..steps {
        if config["stall_after"].as_u64() == Some(i) {
            std::thread::sleep(Duration::from_secs(3600));
        }
        match i {
            0 => println!("[AGENT_MESSAGE] {step:.1} [AGENT_MESSAGE_END]"),
            i if i + 1 == steps => println!("[AGENT_MESSAGE] 100 [AGENT_MESSAGE_END]"),
            _ => println!("[AGENT_MESSAGE] +{step:.1}"),
        }
        std::thread::sleep(Duration::from_millis(config["step_ms"].as_u64().unwrap_or(0)));
    }
    let mut body = serde_json::Map::new();
    if let Some(results) = config["results"].as_object() {
        let pairs: Vec<Value> = results.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
        body.insert("result".into(), json!(pairs));
    }
    if let Some(message) = config["error_msg"].as_str() {
        body.insert("error".into(), json!(1));
        body.insert("errorMsg".into(), json!(message));
    }
    if !body.is_empty() {
        // Pretty-printed: a multi-line message, as the seed shows them.
        println!("[AGENT_MESSAGE]\n{}\n[AGENT_MESSAGE_END]", serde_json::to_string_pretty(&body).expect("JSON"));
    }
}

/// Takes an exclusive lock on `path` for the life of this action, logging `<pid> started` to
/// `<path>.log`; when another action holds it (two copies running at once), logs `<pid>
/// overlap` there and fails.
fn hold_lock(path: &str) -> Result<std::fs::File, i32> {
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).expect("open lock");
    let log = format!("{path}.log");
    match file.try_lock() {
        Ok(()) => {
            append(&log, &format!("{} started {}", std::process::id(), now_ms()));
            Ok(file)
        }
        Err(e) => {
            append(&log, &format!("{} overlap {}", std::process::id(), now_ms()));
            eprintln!("fixture: another copy of this action holds {path}: {e}");
            Err(75)
        }
    }
}

fn where_am_i(probe: &Value) -> Value {
    let netns = std::fs::read_link("/proc/self/ns/net").map(|p| p.display().to_string());
    let hostname = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string());
    let mut state = json!({
        "netns": netns.unwrap_or_else(|e| format!("unknown: {e}")),
        "hostname": hostname.unwrap_or_else(|e| format!("unknown: {e}")),
    });
    if let Some(target) = probe["connect"].as_str() {
        let connected = target.parse::<std::net::SocketAddr>().map_err(|e| e.to_string()).and_then(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())
        });
        match connected {
            Ok(_) => state["connected"] = json!(true),
            Err(e) => {
                state["connected"] = json!(false);
                state["connect_error"] = json!(e);
            }
        }
    }
    state
}

/// Fills the file system holding `path` (a test's tmpfs) until it refuses more.
fn fill_disk(path: &str) {
    let mut file = std::fs::File::create(path).expect("create the filler");
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).and_then(|()| file.sync_data()).is_ok() {}
}
