//! `builtin/package`: a seed-004 package deployed on the machine it runs on.
//!
//! The service root `{home}/{service}` holds `.metadata.json`, `.appdata/` (shared by every
//! version) and `manifests/{version}/{package}` — the inflated `.cronus` tarball — with the
//! `manifests/active` symlink naming the active version. The package's `cronus/scripts/` run as
//! children of the action with their output passed through, so that deployster's runtime
//! reads their progress and messages and applies its time limits to them; they get
//! `CRONUSAPP_HOME` (the service root) and `LCM_CORRELATIONID` (the run id), plus `config.env`.
//!
//! Each step is one action, so that a plan shows the sequence and the log records each:
//! `install` (unpack, then the `install` script), `activate`, `startup`, `shutdown <version>`,
//! `deactivate <version>`. A step whose script fails is undone where it can be (an install is
//! removed, an activation restores the previous link), so that the next apply starts it afresh.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use md5::{Digest, Md5};
use serde_json::{Value, json};

use super::error::BuiltinError;
use super::{Request, needs, plugs};

/// `{name}-{major}.{minor}.{incremental}[.{suffix}].{platform}.cronus` (seed 004).
const NAME_CONVENTION: &str =
    r"^([A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*)-(\d+)\.(\d+)\.(\d+)(?:\.([A-Za-z0-9_-]+))?\.([A-Za-z0-9_]+)\.cronus$";

pub(super) fn init() -> Value {
    let name = json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"});
    json!({
        "label": "A service's package (a .cronus tarball), installed, activated and started",
        "config_schema": {
            "type": "object",
            "properties": {
                "service": with(&name, "the service; its root is `{home}/{service}`"),
                "home": {"type": "string", "minLength": 1, "description": "the directory holding service roots"},
                "version": with(&name, "the version to install, activate and start"),
                "package": {"type": "string", "minLength": 1, "description": "path to the .cronus tarball"},
                "prop": {"type": "string", "minLength": 1, "description": "path to its .prop file (md5 checked)"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "environment given to the package's scripts"},
                "active": {"type": "boolean", "default": true, "description": "whether this version is the active one"},
                "running": {"type": "boolean", "default": true, "description": "whether the service runs (its startup script ran, not its shutdown)"}
            },
            "required": ["service", "home", "version", "package"],
            "additionalProperties": false
        },
        "plugs": plugs(),
        "state_action": {"args": ["state"]},
        "delete_action": {"args": ["delete"]},
        "identity": ["/home", "/service"]
    })
}

/// `schema` with `description`.
fn with(schema: &Value, description: &str) -> Value {
    let mut schema = schema.clone();
    schema["description"] = json!(description);
    schema
}

/// A package as configured, its paths resolved.
struct Package {
    service: String,
    /// `{home}/{service}`.
    root: PathBuf,
    version: String,
    tarball: PathBuf,
    /// The tarball's file name, and the package name it starts with.
    file: String,
    name: String,
    prop: Option<PathBuf>,
    env: Vec<(String, String)>,
    active: bool,
    running: bool,
}

impl Package {
    fn of(request: &Request) -> Result<Package, BuiltinError> {
        let config = request.config;
        let service = request.text("service")?.to_string();
        let version = request.text("version")?.to_string();
        if version == "active" || version.starts_with('.') {
            return Err(BuiltinError::config("version", format!("`{version}` cannot be a manifest directory's name")));
        }
        let tarball = request.base.join(request.text("package")?);
        let file = tarball.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_string();
        let convention = regex::Regex::new(NAME_CONVENTION).expect("a valid pattern");
        let name = match convention.captures(&file) {
            Some(parts) => parts[1].to_string(),
            None => {
                return Err(BuiltinError::Package(format!(
                    "package file `{file}` breaks the naming convention \
                     {{name}}-{{major}}.{{minor}}.{{incremental}}[.{{suffix}}].{{platform}}.cronus \
                     (e.g. agent-1.0.0.x86_ubuntu.cronus)"
                )));
            }
        };
        let env = config
            .get("env")
            .and_then(Value::as_object)
            .map(|env| env.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
            .unwrap_or_default();
        let flag = |key: &str| config.get(key).and_then(Value::as_bool).unwrap_or(true);
        let (active, running) = (flag("active"), flag("running"));
        if running && !active {
            return Err(BuiltinError::Config(
                "config.running: true needs config.active: true (only the active version runs)".into(),
            ));
        }
        Ok(Package {
            root: request.base.join(request.text("home")?).join(&service),
            service,
            version,
            tarball,
            file,
            name,
            prop: config.get("prop").and_then(Value::as_str).map(|p| request.base.join(p)),
            env,
            active,
            running,
        })
    }

    fn manifests(&self) -> PathBuf {
        self.root.join("manifests")
    }

    /// Where version `version` of the package is inflated.
    fn dir(&self, version: &str) -> PathBuf {
        self.manifests().join(version).join(&self.name)
    }

    fn installed(&self) -> bool {
        self.dir(&self.version).join("cronus").is_dir()
    }

    fn active_link(&self) -> PathBuf {
        self.manifests().join("active")
    }

    /// The version `manifests/active` points to.
    fn active_version(&self) -> Option<String> {
        let target = std::fs::read_link(self.active_link()).ok()?;
        target.file_name()?.to_str().map(str::to_string)
    }

    /// The tarball's md5, checked against the `.prop` file when one is configured.
    fn check(&self) -> Result<String, BuiltinError> {
        let cannot = || BuiltinError::io("read package", &self.tarball);
        // Read in chunks: a package may be large.
        let mut file = std::fs::File::open(&self.tarball).map_err(cannot())?;
        let (mut hasher, mut chunk) = (Md5::new(), vec![0u8; 1 << 16]);
        loop {
            match std::io::Read::read(&mut file, &mut chunk).map_err(cannot())? {
                0 => break,
                n => hasher.update(&chunk[..n]),
            }
        }
        let md5 = hex::encode(hasher.finalize());
        let Some(prop) = &self.prop else { return Ok(md5) };
        let expected_name = format!("{}.prop", self.file);
        if prop.file_name().and_then(|f| f.to_str()) != Some(expected_name.as_str()) {
            return Err(BuiltinError::Package(format!(
                "property file {} must be named {expected_name} (the .cronus package format)",
                prop.display()
            )));
        }
        let text = std::fs::read_to_string(prop).map_err(BuiltinError::io("read", prop))?;
        let props: Value = serde_json::from_str(&text)
            .map_err(|e| BuiltinError::Package(format!("{} is not a JSON property file: {e}", prop.display())))?;
        if let Some(name) = props.get("name").and_then(Value::as_str)
            && name != self.file
        {
            return Err(BuiltinError::Package(format!(
                "{} describes package {name}, not {}",
                prop.display(),
                self.file
            )));
        }
        match props.get("md5").and_then(Value::as_str) {
            Some(expected) if expected.eq_ignore_ascii_case(&md5) => Ok(md5),
            Some(expected) => Err(BuiltinError::Package(format!(
                "package {} has md5 {md5}, but {} says {expected}: refusing a corrupt or substituted package",
                self.file,
                prop.display()
            ))),
            None => Err(BuiltinError::Package(format!("{} has no md5", prop.display()))),
        }
    }

    fn metadata_path(&self) -> PathBuf {
        self.root.join(".metadata.json")
    }

    fn metadata(&self) -> Value {
        std::fs::read_to_string(self.metadata_path())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| json!({"service": self.service, "versions": {}}))
    }

    /// Changes `.metadata.json` (written whole, atomically).
    fn update_metadata(&self, change: impl FnOnce(&mut Value)) -> Result<(), BuiltinError> {
        let mut metadata = self.metadata();
        change(&mut metadata);
        metadata["active"] = json!(self.active_version());
        let path = self.metadata_path();
        let partial = path.with_extension("json.partial");
        let text = serde_json::to_string_pretty(&metadata).expect("JSON");
        std::fs::write(&partial, text)
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(BuiltinError::io("write", &path))
    }

    /// Whether version `version`'s application runs: its `running` script's answer, or, for a
    /// package without one, whether its last startup or shutdown was a startup.
    fn is_running(&self, version: &str) -> Result<bool, BuiltinError> {
        let script = self.script(version, "running");
        if !script.exists() {
            return Ok(self.metadata()["versions"][version]["started"].as_bool() == Some(true));
        }
        // Its output is not the state response: kept, and shown on stderr.
        let output = self
            .command(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(BuiltinError::io("run", &script))?;
        for line in
            String::from_utf8_lossy(&output.stdout).lines().chain(String::from_utf8_lossy(&output.stderr).lines())
        {
            eprintln!("running: {line}");
        }
        Ok(output.status.success())
    }

    fn script(&self, version: &str, name: &str) -> PathBuf {
        self.dir(version).join("cronus/scripts").join(name)
    }

    fn command(&self, script: &Path) -> Command {
        let mut command = Command::new(script);
        command
            .current_dir(script.parent().and_then(Path::parent).and_then(Path::parent).unwrap_or(&self.root))
            .stdin(Stdio::null())
            .env("CRONUSAPP_HOME", &self.root)
            .env("LCM_CORRELATIONID", std::env::var("DEPLOYSTER_RUN_ID").unwrap_or_default())
            // What the scripts start may live on: not as part of this run.
            .env_remove("DEPLOYSTER_RUN_ID")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Runs script `name` of `version`, its output passed through. `Ok(false)` when the package
    /// has no such script.
    fn run(&self, version: &str, name: &str) -> Result<bool, Failure> {
        let script = self.script(version, name);
        if !script.exists() {
            return Ok(false);
        }
        println!("running {name} of {} {version}", self.name);
        let status = self.command(&script).status().map_err(BuiltinError::io("run", &script))?;
        match status.code() {
            Some(0) => Ok(true),
            Some(code) => Err(Failure::Script(code)),
            None => Err(Failure::Other(BuiltinError::Refused(format!(
                "script {name} of {} {version} was killed by a signal",
                self.name
            )))),
        }
    }
}

pub(super) fn state(request: &Request) -> Result<Value, BuiltinError> {
    let p = Package::of(request)?;
    let installed = p.installed();
    // The tarball is read (and its md5 checked) only when it is to be installed, not on every
    // drift check of an installed version.
    let md5 = match installed {
        true => p.metadata()["versions"][&p.version]["md5"].clone(),
        false => json!(p.check()?),
    };
    let active = p.active_version();
    let this_active = active.as_deref() == Some(p.version.as_str());
    let running = if this_active && installed { Some(p.is_running(&p.version)?) } else { None };
    let mut actions: Vec<(&str, String, Vec<String>)> = Vec::new();
    let step = |name: &'static str, what: String, version: Option<&str>| {
        let mut args = vec![name.to_string()];
        args.extend(version.map(str::to_string));
        (name, what, args)
    };
    let (name, version) = (&p.name, &p.version);
    if !installed {
        actions.push(step("install", format!("Install {} into {}", p.file, p.dir(version).display()), None));
    }
    if p.active && !this_active {
        if let Some(old) = active.as_deref() {
            if p.is_running(old)? {
                actions.push(step("shutdown", format!("Shut down {name} {old}"), Some(old)));
            }
            actions.push(step("deactivate", format!("Deactivate {name} {old}"), Some(old)));
        }
        actions.push(step("activate", format!("Activate {name} {version}"), None));
        if p.running {
            actions.push(step("startup", format!("Start {name} {version}"), None));
        }
    } else if p.active {
        match (p.running, running == Some(true)) {
            (true, false) => actions.push(step("startup", format!("Start {name} {version}"), None)),
            (false, true) => actions.push(step("shutdown", format!("Shut down {name} {version}"), Some(version))),
            _ => {}
        }
    } else if this_active {
        if running == Some(true) {
            actions.push(step("shutdown", format!("Shut down {name} {version}"), Some(version)));
        }
        actions.push(step("deactivate", format!("Deactivate {name} {version}"), Some(version)));
    }
    let current = json!({
        "service": p.service,
        "root": p.root,
        "version": version,
        "package": name,
        "md5": md5,
        "installed": installed,
        "active": active,
        "running": running,
    });
    if actions.is_empty() {
        return Ok(json!({"status": "VALID", "state": current}));
    }
    let status = if installed { "STALE" } else { "MISSING" };
    let mut response = needs(status, (installed.then_some(current), Value::Null), &[]);
    response["actions"] = actions
        .into_iter()
        .map(|(name, description, args)| json!({"name": name, "description": description, "args": args}))
        .collect();
    Ok(response)
}

/// Why an action failed: a script's exit code (its own output says why, as seed 004 wants it
/// read), or what went wrong around it.
pub(super) enum Failure {
    Script(i32),
    Other(BuiltinError),
}

impl From<BuiltinError> for Failure {
    fn from(error: BuiltinError) -> Self {
        Failure::Other(error)
    }
}

pub(super) fn act(args: &[String], request: &Request) -> Result<(), Failure> {
    let p = Package::of(request)?;
    let on = |i: usize| args.get(i).cloned().unwrap_or_else(|| p.version.clone());
    match args.first().map(String::as_str) {
        Some("install") => install(&p),
        Some("activate") => activate(&p),
        Some("startup") => {
            if !p.run(&p.version, "startup")? {
                return Err(Failure::Other(BuiltinError::Package(format!(
                    "{} {} has no cronus/scripts/startup (a package must have one)",
                    p.name, p.version
                ))));
            }
            p.update_metadata(|m| m["versions"][&p.version]["started"] = json!(true))?;
            Ok(())
        }
        Some("shutdown") => {
            let version = on(1);
            p.run(&version, "shutdown")?;
            p.update_metadata(|m| m["versions"][&version]["started"] = json!(false))?;
            Ok(())
        }
        Some("deactivate") => deactivate(&p, &on(1)),
        Some("delete") => delete(&p),
        Some(other) => Err(BuiltinError::UnknownAction(other.into()).into()),
        None => Err(BuiltinError::Request("names no action".into()).into()),
    }
}

/// Unpacks the tarball beside the manifests, checks it holds a startup script, moves it into
/// place, then runs its `install` script — removing it again if that fails.
fn install(p: &Package) -> Result<(), Failure> {
    let md5 = p.check()?;
    let manifests = p.manifests();
    std::fs::create_dir_all(&manifests).map_err(BuiltinError::io("create", &manifests))?;
    let appdata = p.root.join(".appdata");
    std::fs::create_dir_all(&appdata).map_err(BuiltinError::io("create", &appdata))?;
    let partial = manifests.join(format!(".{}.partial-{}", p.version, std::process::id()));
    let unpacked = unpack(&p.tarball, &partial);
    let placed = unpacked.and_then(|root| {
        if !root.join("cronus/scripts/startup").is_file() {
            return Err(BuiltinError::Package(format!(
                "{} has no cronus/scripts/startup (a package must have one); nothing was installed",
                p.file
            )));
        }
        let target = p.dir(&p.version);
        std::fs::create_dir_all(target.parent().expect("inside manifests"))
            .and_then(|()| std::fs::rename(&root, &target))
            .map_err(BuiltinError::io("move the package to", &target))
    });
    let _ = std::fs::remove_dir_all(&partial);
    placed?;
    println!("unpacked {} into {}", p.file, p.dir(&p.version).display());
    let recorded = p.update_metadata(|m| {
        m["versions"][&p.version] = json!({"package": p.name, "file": p.file, "md5": md5, "started": false});
    });
    match recorded.map_err(Failure::from).and_then(|()| p.run(&p.version, "install")) {
        Ok(_) => Ok(()),
        Err(failure) => {
            // Not installed after all: the next apply unpacks and installs afresh.
            let _ = std::fs::remove_dir_all(p.dir(&p.version));
            let _ = std::fs::remove_dir(p.manifests().join(&p.version));
            let _ = p.update_metadata(|m| {
                if let Some(versions) = m["versions"].as_object_mut() {
                    versions.remove(&p.version);
                }
            });
            println!("install of {} {} failed: removed again", p.name, p.version);
            Err(failure)
        }
    }
}

/// Unpacks `tarball` (gzip-compressed tar) into `into`; returns the package root: `into`, or the
/// one directory it holds when the archive wraps everything in one.
fn unpack(tarball: &Path, into: &Path) -> Result<PathBuf, BuiltinError> {
    let file = std::fs::File::open(tarball).map_err(BuiltinError::io("open", tarball))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive.set_preserve_permissions(true);
    archive.unpack(into).map_err(BuiltinError::io("unpack", tarball))?;
    if into.join("cronus").is_dir() {
        return Ok(into.to_path_buf());
    }
    let entries: Vec<PathBuf> =
        std::fs::read_dir(into).map_err(BuiltinError::io("read", into))?.flatten().map(|e| e.path()).collect();
    match entries.as_slice() {
        [only] if only.join("cronus").is_dir() => Ok(only.clone()),
        _ => Err(BuiltinError::Package(format!(
            "{} holds no cronus/ directory: not a seed-004 package",
            tarball.display()
        ))),
    }
}

/// Points `manifests/active` at the version (atomically), then runs its `activate` script;
/// puts the previous link back if that fails.
fn activate(p: &Package) -> Result<(), Failure> {
    let link = p.active_link();
    let previous = std::fs::read_link(&link).ok();
    point(&link, Some(Path::new(&p.version)))?;
    if let Err(failure) = p.run(&p.version, "activate") {
        point(&link, previous.as_deref())?;
        println!("activation of {} {} failed: the previous active version is back", p.name, p.version);
        return Err(failure);
    }
    p.update_metadata(|_| {})?;
    println!("{} {} is active", p.name, p.version);
    Ok(())
}

/// Runs `version`'s `deactivate` script, then removes `manifests/active` if it points there.
fn deactivate(p: &Package, version: &str) -> Result<(), Failure> {
    p.run(version, "deactivate")?;
    if p.active_version().as_deref() == Some(version) {
        point(&p.active_link(), None)?;
    }
    p.update_metadata(|_| {})?;
    println!("{} {version} is no longer active", p.name);
    Ok(())
}

/// Makes `link` point to `target` (relative to its directory), or removes it.
fn point(link: &Path, target: Option<&Path>) -> Result<(), BuiltinError> {
    let Some(target) = target else {
        return match std::fs::remove_file(link) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BuiltinError::io("remove", link)(e)),
            _ => Ok(()),
        };
    };
    let partial = link.with_file_name(format!(".active.partial-{}", std::process::id()));
    let _ = std::fs::remove_file(&partial);
    std::os::unix::fs::symlink(target, &partial)
        .and_then(|()| std::fs::rename(&partial, link))
        .map_err(BuiltinError::io(format!("point to {} the link", target.display()), link))
}

/// Deleting the resource: shut down and deactivate the version if it is active, then remove it.
fn delete(p: &Package) -> Result<(), Failure> {
    if !p.manifests().join(&p.version).exists() {
        return Ok(());
    }
    if p.active_version().as_deref() == Some(p.version.as_str()) {
        if p.is_running(&p.version)? {
            p.run(&p.version, "shutdown")?;
        }
        deactivate(p, &p.version)?;
    }
    let dir = p.manifests().join(&p.version);
    std::fs::remove_dir_all(&dir).map_err(BuiltinError::io("remove", &dir))?;
    p.update_metadata(|m| {
        if let Some(versions) = m["versions"].as_object_mut() {
            versions.remove(&p.version);
        }
    })?;
    println!("removed {} {}", p.name, p.version);
    Ok(())
}
