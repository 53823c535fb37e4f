//! `builtin/package`: seed-004 packages deployed on this machine — install, activate, startup,
//! running as the state check, a version switch, deactivation, and every bad package refused
//! before anything is half done.

use std::io::Write;

use crate::support::{Run, Workspace};
use serde_json::{Value, json};

/// The scripts of a package of version `version`: each logs `<version> <script> <correlation
/// id>` to `.appdata/lcm.log`; startup starts a detached `sleep` whose pid goes to
/// `.appdata/pid`, running checks it, shutdown stops it.
fn scripts(version: &str) -> Vec<(&'static str, String)> {
    let log = |name: &str| {
        format!("#!/bin/sh\necho \"{version} {name} $LCM_CORRELATIONID\" >> \"$CRONUSAPP_HOME/.appdata/lcm.log\"\n")
    };
    vec![
        ("install", log("install") + "echo '[AGENT_MESSAGE] 50 [AGENT_MESSAGE_END]'\necho installed\n"),
        ("activate", log("activate")),
        (
            "startup",
            log("startup")
                + "setsid sleep 300 >/dev/null 2>&1 </dev/null &\necho $! > \"$CRONUSAPP_HOME/.appdata/pid\"\n\
                   echo \"[AGENT_MESSAGE] {\\\"progress\\\": 100, \\\"result\\\": [{\\\"key\\\": \\\"pid\\\", \\\"value\\\": \\\"$!\\\"}]} [AGENT_MESSAGE_END]\"\n",
        ),
        // Alive and not a zombie (an orphan's reaper may be slow to reap it).
        (
            "running",
            "#!/bin/sh\npid=$(cat \"$CRONUSAPP_HOME/.appdata/pid\" 2>/dev/null) || exit 1\n\
             [ -r \"/proc/$pid/status\" ] && ! grep -q '^State:[[:space:]]*Z' \"/proc/$pid/status\"\n"
                .into(),
        ),
        (
            "shutdown",
            log("shutdown")
                + "kill \"$(cat \"$CRONUSAPP_HOME/.appdata/pid\")\" 2>/dev/null\nrm -f \"$CRONUSAPP_HOME/.appdata/pid\"\n",
        ),
        ("deactivate", log("deactivate")),
    ]
}

/// Writes `dist/<file>` (a gzip-compressed tar with `cronus/cronus.prop` and `scripts`) and
/// `dist/<file>.prop` with its md5.
fn package(ws: &Workspace, file: &str, scripts: &[(&str, String)]) {
    let mut bytes = Vec::new();
    {
        let gz = flate2::write::GzEncoder::new(&mut bytes, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        let mut add = |path: &str, content: &[u8], mode: u32| {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(mode);
            header.set_cksum();
            tar.append_data(&mut header, path, content).unwrap();
        };
        add("cronus/cronus.prop", b"{}", 0o644);
        for (name, body) in scripts {
            add(&format!("cronus/scripts/{name}"), body.as_bytes(), 0o755);
        }
        add("app/README", b"the application\n", 0o644);
        tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
    }
    let md5 = md5_of(&bytes);
    std::fs::create_dir_all(ws.path("dist")).unwrap();
    std::fs::write(ws.path(&format!("dist/{file}")), &bytes).unwrap();
    ws.write(&format!("dist/{file}.prop"), &json!({"name": file, "md5": md5}).to_string());
}

/// The md5 of `bytes`, in hex.
fn md5_of(bytes: &[u8]) -> String {
    use md5::Digest;
    hex::encode(md5::Md5::digest(bytes))
}

fn manifest(ws: &Workspace, version: &str, extra: &str) {
    ws.manifest(&format!(
        "resources:\n  hello:\n    type: builtin/package\n    config:\n      service: hello\n      home: srv\n      version: \"{version}\"\n      package: dist/hello-{version}.unix.cronus\n      prop: dist/hello-{version}.unix.cronus.prop\n{extra}"
    ));
}

fn log(ws: &Workspace) -> Vec<String> {
    std::fs::read_to_string(ws.path("srv/hello/.appdata/lcm.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.rsplit_once(' ').map_or(l, |(head, _)| head).to_string())
        .collect()
}

fn planned_actions(run: &Run) -> Vec<String> {
    let doc = run.json();
    let hello = doc["plan"].as_array().unwrap().iter().find(|e| e["name"] == "hello").unwrap().clone();
    hello["actions"].as_array().map_or(vec![], |a| a.iter().map(|a| a["name"].as_str().unwrap().to_string()).collect())
}

fn state(run: &Run) -> Value {
    let doc = run.json();
    doc["result"].as_array().unwrap().iter().find(|e| e["name"] == "hello").unwrap()["state"].clone()
}

/// Stops the application a test started, however the test ends.
struct Daemon<'a>(&'a Workspace);

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.0.path("srv/hello/.appdata/pid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
    }
}

#[test]
fn install_activate_startup_then_running_is_the_state_check() {
    let ws = Workspace::new();
    let _daemon = Daemon(&ws);
    package(&ws, "hello-1.0.0.unix.cronus", &scripts("1.0.0"));
    manifest(&ws, "1.0.0", "");
    let plan = ws.plan(&["--output", "json"]);
    assert_eq!(planned_actions(&plan), ["install", "activate", "startup"], "{}", plan.all());

    let run = ws.apply(&["--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(log(&ws), ["1.0.0 install", "1.0.0 activate", "1.0.0 startup"]);
    let run_id = run.json()["run_id"].as_str().unwrap().to_string();
    let correlation = std::fs::read_to_string(ws.path("srv/hello/.appdata/lcm.log")).unwrap();
    assert!(correlation.lines().all(|l| l.ends_with(&run_id)), "LCM_CORRELATIONID is the run id:\n{correlation}");
    // The seed's layout.
    assert!(ws.path("srv/hello/manifests/1.0.0/hello/cronus/scripts/startup").is_file());
    assert!(ws.path("srv/hello/manifests/1.0.0/hello/app/README").is_file());
    assert_eq!(std::fs::read_link(ws.path("srv/hello/manifests/active")).unwrap().to_str(), Some("1.0.0"));
    let metadata: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path("srv/hello/.metadata.json")).unwrap()).unwrap();
    assert_eq!(metadata["active"], "1.0.0");
    assert_eq!(metadata["versions"]["1.0.0"]["file"], "hello-1.0.0.unix.cronus");
    let st = state(&run);
    assert_eq!(
        (st["installed"].clone(), st["active"].clone(), st["running"].clone()),
        (json!(true), json!("1.0.0"), json!(true))
    );
    assert!(run.stderr.contains("hello: action install (Install hello-1.0.0.unix.cronus"), "{}", run.all());
    let hello = run.json()["result"].as_array().unwrap().iter().find(|e| e["name"] == "hello").unwrap().clone();
    let startup = hello["results"].as_array().unwrap().iter().find(|r| r["action"] == "startup").unwrap().clone();
    assert_eq!(startup["result"][0]["key"], "pid", "the startup script's result is kept");

    let again = ws.apply(&[]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert_eq!(log(&ws).len(), 3, "a second apply runs nothing: {}", again.all());

    // The application stops behind deployster's back: `running` says so, startup runs again.
    let pid = std::fs::read_to_string(ws.path("srv/hello/.appdata/pid")).unwrap();
    std::process::Command::new("kill").arg(pid.trim()).status().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let plan = ws.plan(&["--output", "json"]);
    assert_eq!(planned_actions(&plan), ["startup"], "{}", plan.all());
    assert_eq!(ws.apply(&[]).code, 0);
    assert_eq!(log(&ws).last().unwrap(), "1.0.0 startup");
}

#[test]
fn a_version_switch_shuts_down_and_deactivates_the_old_before_the_new_starts() {
    let ws = Workspace::new();
    let _daemon = Daemon(&ws);
    package(&ws, "hello-1.0.0.unix.cronus", &scripts("1.0.0"));
    package(&ws, "hello-1.1.0.unix.cronus", &scripts("1.1.0"));
    manifest(&ws, "1.0.0", "");
    assert_eq!(ws.apply(&[]).code, 0);
    manifest(&ws, "1.1.0", "");
    let plan = ws.plan(&["--output", "json"]);
    assert_eq!(planned_actions(&plan), ["install", "shutdown", "deactivate", "activate", "startup"], "{}", plan.all());
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(
        log(&ws)[3..],
        ["1.1.0 install", "1.0.0 shutdown", "1.0.0 deactivate", "1.1.0 activate", "1.1.0 startup"]
    );
    assert_eq!(std::fs::read_link(ws.path("srv/hello/manifests/active")).unwrap().to_str(), Some("1.1.0"));
    assert!(ws.path("srv/hello/manifests/1.0.0/hello").is_dir(), "the old version stays installed");

    // Deactivated on request: shut down first.
    manifest(&ws, "1.1.0", "      active: false\n      running: false\n");
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(log(&ws)[8..], ["1.1.0 shutdown", "1.1.0 deactivate"]);
    assert!(std::fs::symlink_metadata(ws.path("srv/hello/manifests/active")).is_err(), "no active version");
    assert_eq!(ws.apply(&[]).code, 0);
    assert_eq!(log(&ws).len(), 10, "and it stays so");
}

fn assert_refused(run: &Run, needles: &[&str]) {
    assert_eq!(run.code, 1, "{}", run.all());
    for needle in needles {
        assert!(run.stderr.contains(needle), "missing {needle:?} in:\n{}", run.all());
    }
}

#[test]
fn bad_packages_are_refused_before_anything_is_installed() {
    let ws = Workspace::new();
    package(&ws, "hello-1.0.0.unix.cronus", &scripts("1.0.0"));
    // A package whose md5 is not the one its .prop gives.
    ws.write(
        "dist/hello-1.0.0.unix.cronus.prop",
        r#"{"name": "hello-1.0.0.unix.cronus", "md5": "0123456789abcdef0123456789abcdef"}"#,
    );
    manifest(&ws, "1.0.0", "");
    let run = ws.apply(&[]);
    assert_refused(
        &run,
        &["resource `hello` failed in state", "hello-1.0.0.unix.cronus.prop says 0123456789abcdef0123456789abcdef"],
    );
    assert!(!ws.path("srv").exists(), "nothing was installed");

    // A name that breaks the convention.
    std::fs::copy(ws.path("dist/hello-1.0.0.unix.cronus"), ws.path("dist/hello.tgz")).unwrap();
    ws.manifest("resources:\n  hello: { type: builtin/package, config: { service: hello, home: srv, version: '1', package: dist/hello.tgz } }\n");
    assert_refused(&ws.apply(&[]), &["package file `hello.tgz` breaks the naming convention"]);

    // `running: true` without `active: true`.
    manifest(&ws, "1.0.0", "      active: false\n");
    assert_refused(&ws.plan(&[]), &["config.running: true needs config.active: true"]);

    // A package without the startup script the seed requires.
    let no_startup: Vec<_> = scripts("1.0.0").into_iter().filter(|(n, _)| *n != "startup").collect();
    package(&ws, "hello-1.0.0.unix.cronus", &no_startup);
    manifest(&ws, "1.0.0", "");
    let run = ws.apply(&[]);
    assert_refused(&run, &["failed in action install", "has no cronus/scripts/startup"]);
    assert!(!ws.path("srv/hello/manifests/1.0.0").exists(), "nothing left half installed");
    assert!(log(&ws).is_empty());
}

#[test]
fn a_failed_install_is_removed_and_says_why_from_its_message() {
    let ws = Workspace::new();
    let mut failing = scripts("1.0.0");
    failing[0].1 = "#!/bin/sh\necho '[AGENT_MESSAGE] {\"error\": 3, \"errorMsg\": \"disk quota exceeded\", \"result\": [{\"key\": \"freeMb\", \"value\": \"12\"}]} [AGENT_MESSAGE_END]'\nexit 3\n".into();
    package(&ws, "hello-1.0.0.unix.cronus", &failing);
    manifest(&ws, "1.0.0", "");
    let run = ws.apply(&[]);
    assert_refused(&run, &["failed in action install", "disk quota exceeded"]);
    // What it reported before failing is shown and kept, as a success's results are.
    assert!(run.stdout.contains("hello/install result: freeMb = 12"), "{}", run.all());
    let log = ws.run(&["history", "-f", "manifest.yaml", "--output", "json"]);
    let failed = log.json()["events"].as_array().unwrap().iter().find(|e| e["event"] == "action-failed").cloned();
    let failed = failed.unwrap_or_else(|| panic!("no action-failed: {}", log.stdout));
    assert_eq!(failed["detail"]["result"], json!([{"key": "freeMb", "value": "12"}]), "{failed}");
    assert!(!ws.path("srv/hello/manifests/1.0.0").exists(), "removed so that the next apply installs afresh");
    assert!(run.stdout.contains("install of hello 1.0.0 failed: removed again"), "{}", run.all());
}

#[test]
fn a_startup_that_blocks_is_stopped_by_the_time_limit() {
    let ws = Workspace::new();
    let mut blocking = scripts("1.0.0");
    blocking[2].1 = "#!/bin/sh\necho starting\nsleep 300\n".into();
    package(&ws, "hello-1.0.0.unix.cronus", &blocking);
    manifest(&ws, "1.0.0", "    timeouts: { action: 2s }\n");
    let started = std::time::Instant::now();
    let run = ws.apply(&[]);
    assert_refused(&run, &["failed in action startup", "timed out after 2s"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    let left = std::process::Command::new("pgrep").args(["-f", "sleep 300"]).output().unwrap();
    let pids = String::from_utf8_lossy(&left.stdout).to_string();
    for pid in pids.split_whitespace() {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let env = String::from_utf8_lossy(&environ);
        assert!(!env.contains(&ws.root()), "the blocking startup (pid {pid}) was left running");
    }
}

/// `examples/package/`: its build script makes two versions; the manifest installs and starts
/// the first, switches to the second, and shuts it down when asked.
#[test]
fn the_example_builds_installs_switches_and_shuts_down() {
    let ws = Workspace::new();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/package");
    for file in ["build.sh", "manifest.yaml"] {
        std::fs::copy(example.join(file), ws.path(file)).unwrap();
    }
    let _daemon = Daemon(&ws);
    for version in ["1.0.0", "1.1.0"] {
        let built = std::process::Command::new(ws.path("build.sh")).arg(version).output().unwrap();
        assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    }
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("hello/startup result: pid = "), "{}", run.all());
    wait_for_heartbeat(&ws, "hello 1.0.0");
    let run = ws.apply(&["--var", "version=1.1.0"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("APPLIED   hello  install, shutdown, deactivate, activate, startup"), "{}", run.all());
    wait_for_heartbeat(&ws, "hello 1.1.0");
    let off = std::fs::read_to_string(ws.path("manifest.yaml"))
        .unwrap()
        .replace("active: true", "active: false")
        .replace("running: true", "running: false");
    ws.manifest(&off);
    let run = ws.apply(&["--var", "version=1.1.0"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("APPLIED   hello  shutdown, deactivate"), "{}", run.all());
    assert!(!ws.exists("srv/hello/.appdata/pid"));
}

fn wait_for_heartbeat(ws: &Workspace, expected: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let beat = std::fs::read_to_string(ws.path("srv/hello/.appdata/heartbeat")).unwrap_or_default();
        if beat.starts_with(expected) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no heartbeat from {expected}: {beat:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Two packages in one manifest, each at its own version, and one restarted with `--replace`
/// in one apply: shut down and removed, then installed and started again; the other untouched.
#[test]
fn two_packages_each_at_its_version_and_one_restarted_by_replace() {
    struct World<'a>(&'a Workspace);
    impl Drop for World<'_> {
        fn drop(&mut self) {
            if let Ok(pid) = std::fs::read_to_string(self.0.path("srv/world/.appdata/pid")) {
                let _ = std::process::Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
    let ws = Workspace::new();
    let (_hello, _world) = (Daemon(&ws), World(&ws));
    package(&ws, "hello-1.0.0.unix.cronus", &scripts("1.0.0"));
    package(&ws, "world-2.1.0.unix.cronus", &scripts("2.1.0"));
    let resource = |service: &str, version: &str| {
        format!(
            "  {service}:\n    type: builtin/package\n    config:\n      service: {service}\n      home: srv\n      version: \"{version}\"\n      package: dist/{service}-{version}.unix.cronus\n      prop: dist/{service}-{version}.unix.cronus.prop\n"
        )
    };
    ws.manifest(&format!("resources:\n{}{}", resource("hello", "1.0.0"), resource("world", "2.1.0")));
    let lcm = |service: &str| {
        std::fs::read_to_string(ws.path(&format!("srv/{service}/.appdata/lcm.log")))
            .unwrap_or_default()
            .lines()
            .map(|l| l.rsplit_once(' ').map_or(l, |(head, _)| head).to_string())
            .collect::<Vec<_>>()
    };
    let run = ws.apply(&[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(lcm("hello"), ["1.0.0 install", "1.0.0 activate", "1.0.0 startup"]);
    assert_eq!(lcm("world"), ["2.1.0 install", "2.1.0 activate", "2.1.0 startup"]);

    let run = ws.apply(&["--replace", "world"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.stdout.contains("APPLIED   world  delete, install, activate, startup"), "{}", run.all());
    assert_eq!(lcm("hello"), ["1.0.0 install", "1.0.0 activate", "1.0.0 startup"], "the other is untouched");
    assert_eq!(
        lcm("world"),
        [
            "2.1.0 install",
            "2.1.0 activate",
            "2.1.0 startup",
            "2.1.0 shutdown",
            "2.1.0 deactivate",
            "2.1.0 install",
            "2.1.0 activate",
            "2.1.0 startup"
        ]
    );
}
