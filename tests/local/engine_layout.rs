//! The engine's modules read top-down: each imports only modules above it, never one that
//! imports it back (issue 10), and none knows of the command line or Kubernetes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the engine modules its code (comments and tests aside) refers to.
fn engine_imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut files: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .filter(|(name, _)| name != "mod" && !name.ends_with("_tests"))
        .collect();
    files.push(("executor".into(), dir.join("executor/mod.rs")));
    let names: BTreeSet<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let reference = regex::Regex::new(r"(?:super|crate::engine)::([a-z_]+)").unwrap();
    files
        .iter()
        .map(|(name, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let code: String =
                code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            let code = ungroup(&code);
            assert!(
                !["crate::cli", "crate::controller", "kube::", "clap::"].iter().any(|outside| code.contains(outside)),
                "src/engine/{name} refers to the command line or Kubernetes"
            );
            let used = reference
                .captures_iter(&code)
                .map(|c| c[1].to_string())
                .filter(|m| names.contains(m) && m != name)
                .collect();
            (name.clone(), used)
        })
        .collect()
}

#[test]
fn engine_modules_import_each_other_without_cycles() {
    let imports = engine_imports();
    assert!(imports["run"].contains("resource") && imports["resource"].contains("context"), "{imports:?}");
    // Peel off modules that import nothing left; what remains is on a cycle or imports one.
    let mut left = imports.clone();
    while let Some(leaf) =
        left.iter().find(|(_, used)| used.iter().all(|m| !left.contains_key(m))).map(|(n, _)| n.clone())
    {
        left.remove(&leaf);
    }
    assert!(left.is_empty(), "engine modules on (or importing) an import cycle: {left:?}");
}

/// Every file of `src/` as a module path (`controller::pipelines::log`; `crate` for lib.rs).
fn src_modules() -> BTreeMap<String, std::path::PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|x| x == "rs") {
                found.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).unwrap().with_extension("");
            let parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let module = match parts.as_slice() {
                [only] if only == "lib" || only == "main" => "crate".to_string(),
                [dirs @ .., last] if last == "mod" => dirs.join("::"),
                all => all.join("::"),
            };
            (module, path)
        })
        .collect()
}

/// Module → the modules of `src/` its code (comments and unit tests aside) names through
/// `crate::` or `super::`, each resolved to the longest module path it starts with.
fn src_imports() -> BTreeMap<String, BTreeSet<String>> {
    let modules = src_modules();
    let reference = regex::Regex::new(r"\b(crate|super)::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)").unwrap();
    let resolve = |path: &str| {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains_key(m))
    };
    modules
        .iter()
        .map(|(module, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: String = code.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
            let code = ungroup(&code);
            let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
            let used = reference
                .captures_iter(&code)
                .filter_map(|c| match &c[1] {
                    "crate" => resolve(&c[2]),
                    _ if parent.is_empty() => resolve(&c[2]),
                    _ => resolve(&format!("{parent}::{}", &c[2])),
                })
                .filter(|m| m != module)
                .collect();
            (module.clone(), used)
        })
        .collect()
}

/// Issue 36: no two modules anywhere in `src/` import each other, directly or round a circle.
#[test]
fn no_module_of_src_is_on_an_import_cycle() {
    let imports = src_imports();
    assert!(
        imports["builtins::kubernetes"].contains("client"),
        "the walk sees what it should: {:?}",
        imports["builtins::kubernetes"]
    );
    let mut left = imports.clone();
    while let Some(leaf) =
        left.iter().find(|(_, used)| used.iter().all(|m| !left.contains_key(m))).map(|(n, _)| n.clone())
    {
        left.remove(&leaf);
    }
    // What remains is on a cycle, or imports a module that is: name the cycles' edges.
    let on_cycle: Vec<String> = left
        .iter()
        .flat_map(|(m, used)| used.iter().filter(|u| left.contains_key(*u)).map(move |u| format!("{m} -> {u}")))
        .collect();
    assert!(on_cycle.is_empty(), "modules of src/ on (or importing) an import cycle: {on_cycle:#?}");
}

/// Issues 36 and 51: every file of `src/` reads at once — 600 lines at most — but for tests
/// (files of tests, and a file's `#[cfg(test)] mod tests` at its end).
#[test]
fn no_file_of_src_is_over_600_lines_but_for_tests() {
    let too_long: Vec<String> = src_modules()
        .into_iter()
        .filter(|(module, _)| !(module.ends_with("::tests") || module.ends_with("_tests")))
        .filter_map(|(module, path)| {
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = text.split("#[cfg(test)]\nmod tests").next().unwrap().lines().count();
            (lines > 600).then(|| format!("{module}: {lines} lines"))
        })
        .collect();
    assert!(too_long.is_empty(), "split these at their seams: {too_long:#?}");
}

/// Issue 36: one name per concept — no two types of `src/` (tests aside) share a name, but for
/// alternatives of one type in one file (`#[cfg]` variants) and `ManifestSpec`, which the
/// custom resource's derive names after its kind while the engine's is the document it carries.
#[test]
fn no_two_types_of_src_share_a_name() {
    // Associated types (`type Err = …`, indented in an impl) are not definitions.
    let definition = regex::Regex::new(
        r"(?m)^(?:\s*(?:pub(?:\([a-z]+\))? )?(?:struct|enum|trait)|(?:pub(?:\([a-z]+\))? )?type) ([A-Z][A-Za-z0-9]*)",
    )
    .unwrap();
    let mut homes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in src_modules() {
        if module.ends_with("::tests") || module.ends_with("_tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for name in definition.captures_iter(code).map(|c| c[1].to_string()) {
            homes.entry(name).or_default().insert(module.clone());
        }
    }
    let shared: Vec<String> = homes
        .iter()
        .filter(|(name, modules)| modules.len() > 1 && name.as_str() != "ManifestSpec")
        .map(|(name, modules)| format!("{name}: {modules:?}"))
        .collect();
    assert!(homes.contains_key("ServerObject") && homes.contains_key("PassExecutors"), "the walk sees the types");
    assert!(shared.is_empty(), "types named alike in different modules: {shared:#?}");
}

/// `code` with each grouped import written out: `use super::{a, b::{c, d}}` becomes
/// `use super::a super::b::c super::b::d`, so that a walk reading `super::x` paths sees them all.
fn ungroup(code: &str) -> String {
    let mut code = code.to_string();
    while let Some(open) = code.find("::{") {
        // The path before the group: back to the first character that cannot be in a path.
        let start = code[..open].rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).map_or(0, |i| i + 1);
        let prefix = code[start..open].to_string();
        let mut depth = 0;
        let mut close = open + 2;
        for (i, c) in code[open + 2..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                close = open + 2 + i;
                break;
            }
        }
        // The group's items, split at top-level commas.
        let inner = &code[open + 3..close];
        let (mut items, mut item, mut depth) = (Vec::new(), String::new(), 0);
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        items.push(item);
        let written: Vec<String> = items
            .iter()
            .map(|i| i.trim())
            .filter(|i| !i.is_empty())
            .map(|i| if i == "self" { prefix.clone() } else { format!("{prefix}::{i}") })
            .collect();
        code.replace_range(start..=close, &written.join(" "));
    }
    code
}

#[test]
fn grouped_imports_are_read_as_their_paths() {
    let code = ungroup("use super::{a, b::{c, self}};\nuse crate::engine::{plan::Plan, run};");
    assert_eq!(code, "use super::a super::b::c super::b;\nuse crate::engine::plan::Plan crate::engine::run;");
}

/// Issue 51: a module takes what a sibling room owns from that room, not from their parent's
/// `mod.rs` (which re-exports it for the code outside): `super::context::Context`, never
/// `super::Context`. The parent keeps its own things; the rooms do not lean on the hall.
#[test]
fn no_module_imports_from_its_parent_what_a_sibling_owns() {
    let modules = src_modules();
    let reexport = regex::Regex::new(r"(?m)^pub use ([a-z_]+)::(\{[^}]*\}|[A-Za-z_0-9]+);").unwrap();
    let mut leaning = Vec::new();
    let mut checked = 0;
    for (parent, path) in &modules {
        if !path.ends_with("mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        // Names the parent re-exports from a child of its own.
        let owned: BTreeSet<String> = reexport
            .captures_iter(&text)
            .filter(|c| modules.contains_key(&format!("{parent}::{}", &c[1])))
            .flat_map(|c| {
                c[2].trim_matches(|ch| ch == '{' || ch == '}')
                    .split(',')
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect();
        for (child, child_path) in &modules {
            if child.rsplit_once("::").map(|(p, _)| p) != Some(parent.as_str()) {
                continue;
            }
            checked += 1;
            let child_text = std::fs::read_to_string(child_path).unwrap();
            let code = ungroup(child_text.split("#[cfg(test)]\nmod tests").next().unwrap());
            for name in &owned {
                if code.contains(&format!("super::{name}")) {
                    leaning.push(format!("{child} takes {name} from {parent}"));
                }
            }
        }
    }
    assert!(checked > 50, "the walk sees the modules ({checked})");
    assert!(leaning.is_empty(), "take these from the room that owns them: {leaning:#?}");
}

/// Issue 51: what runs inside a type's Pod (`src/pod_helper/`) is built without the `kube`
/// feature and knows nothing of the client side (`crate::pod`), Kubernetes or the controller.
#[test]
fn the_pod_helper_knows_no_kubernetes_client() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let declared = lib.lines().position(|l| l == "pub mod pod_helper;").expect("lib.rs declares pod_helper");
    assert!(!lib.lines().nth(declared - 1).unwrap().contains("cfg"), "pod_helper is built in every build");
    let mut read = 0;
    for (module, path) in src_modules() {
        if !(module == "pod_helper" || module.starts_with("pod_helper::")) {
            continue;
        }
        read += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let code = ungroup(text.split("#[cfg(test)]\nmod tests").next().unwrap());
        for outside in ["kube::", "k8s_openapi", "crate::pod::", "crate::controller", "crate::crd"] {
            assert!(!code.contains(outside), "{module} refers to {outside}");
        }
    }
    assert!(read >= 4, "the walk reads pod_helper's files ({read})");
}

/// Issue 51: which executor answers a type is decided once, in `executors::route`; the
/// executors it routes to (`builtin/kubernetes`, the built-ins answered in process) answer what
/// they are handed and wrap no other executor; and the front ends fill an `ExecutorPlan`
/// rather than making executors of their own.
#[test]
fn which_executor_answers_a_type_is_decided_in_one_place() {
    let mut deciding = Vec::new();
    let mut read = 0;
    for (module, path) in src_modules() {
        read += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let routing = ["runs_in_process(", "fn answered_here", "Dispatch"];
        for decision in routing.iter().filter(|d| code.contains(*d)) {
            if module != "executors::route" && !(module == "builtins" && *decision == "runs_in_process(") {
                deciding.push(format!("{module}: {decision}"));
            }
        }
        let entry = module == "builtins::in_process" || module == "builtins::kubernetes";
        if entry && code.contains("Arc<dyn Executor>") {
            deciding.push(format!("{module} wraps another executor"));
        }
        let front_end = module.starts_with("cli") || module.starts_with("controller");
        for making in
            ["ProcessExecutor::new(", "InProcess::new(", "KubeObjects::", "DockerExecutor::new(", "PodRuntime::"]
        {
            if front_end && code.contains(making) {
                deciding.push(format!("{module} makes an executor ({making}): fill an ExecutorPlan"));
            }
        }
    }
    assert!(read > 100, "the walk reads src ({read} files)");
    assert!(deciding.is_empty(), "route in executors::route alone: {deciding:#?}");
}

/// Issue 51: a Manifest's reconcile is named steps, each that can fail with an error type of
/// its own (none shares the Pipelines' `PipelineReconcileError`), the pure ones (validate,
/// observe) apart from those that call the API.
#[test]
fn the_manifest_reconcile_s_steps_have_their_own_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/manifest");
    let code = |step: &str| {
        let text = std::fs::read_to_string(root.join(format!("{step}.rs"))).unwrap();
        text.split("#[cfg(test)]\nmod tests").next().unwrap().to_string()
    };
    for (step, error) in
        [("fetch", "FetchError"), ("run", "RunError"), ("report", "ReportError"), ("delete", "DeleteError")]
    {
        assert!(code(step).contains(&format!("pub enum {error} ")), "manifest::{step} defines {error}");
    }
    for step in ["mod", "fetch", "validate", "run", "observe", "report", "delete", "journal"] {
        assert!(!code(step).contains("PipelineReconcileError"), "manifest::{step} uses the Pipelines' error");
    }
    for pure in ["validate", "observe"] {
        let code = code(pure);
        for io in [".await", "Context", "kube::Api", "Client"] {
            assert!(!code.contains(io), "manifest::{pure} is pure, but has {io}");
        }
    }
}

/// Issue 51: the controller spells condition types, event actions and its own reasons once,
/// in `controller/reasons.rs`: no other file of it writes one as a string literal.
#[test]
fn the_controller_spells_its_reasons_in_one_place() {
    let reasons =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/reasons.rs")).unwrap();
    let words: Vec<String> = regex::Regex::new(r"(?m)^        ([A-Z][A-Za-z]+),$")
        .unwrap()
        .captures_iter(&reasons)
        .map(|c| c[1].to_string())
        .collect();
    assert!(words.len() > 40 && words.contains(&"AwaitingApproval".to_string()), "the words are read: {words:?}");
    let mut spelt = Vec::new();
    for (module, path) in src_modules() {
        if !module.starts_with("controller") || module == "controller::reasons" || module.ends_with("tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (number, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap();
            for word in &words {
                if line.contains(&format!("\"{word}\"")) {
                    spelt.push(format!("{module}:{}: {word}", number + 1));
                }
            }
        }
    }
    assert!(spelt.is_empty(), "use controller::reasons instead: {spelt:#?}");
}

/// Issue 51: a scope's lifecycle (begin a pass, forget a Manifest, shut down) is asked of the
/// executor stack (`PassExecutors`): the controller never reaches past it into the Pod runtime.
#[test]
fn the_controller_does_not_reach_into_the_pod_runtime() {
    let mut reaching = Vec::new();
    let mut read = 0;
    for (module, path) in src_modules() {
        if !module.starts_with("controller") {
            continue;
        }
        read += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for call in [".sweep(", ".delete_runners(", ".reap_runners_but(", ".untold_runner_refusal(", ".pods()"] {
            if code.contains(call) {
                reaching.push(format!("{module}: {call}"));
            }
        }
    }
    assert!(read > 20, "the walk reads the controller ({read} files)");
    assert!(reaching.is_empty(), "ask PassExecutors instead: {reaching:#?}");
}

/// Issue 51: no code of `src/` blocks a runtime worker on I/O (`block_in_place`): a Pipeline's
/// log is written by an async flush, a prompt waits on a thread for blocking work.
#[test]
fn nothing_in_src_blocks_a_runtime_worker() {
    let blocking: Vec<String> = src_modules()
        .into_iter()
        .filter(|(_, path)| std::fs::read_to_string(path).unwrap().contains("block_in_place"))
        .map(|(module, _)| module)
        .collect();
    assert!(blocking.is_empty(), "block_in_place in {blocking:?}");
}

/// Issues 51 and 70: one writer of every status, of every kind — `controller::report::StatusWriter`,
/// fenced by the replica's term — through which a Manifest's journal writes the pass's
/// progress and its report the outcome, and Pipelines and previews their statuses: no other
/// module of `src/` writes a status.
#[test]
fn every_status_has_one_writer() {
    let writers: Vec<String> = src_modules()
        .into_iter()
        .filter(|(_, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap().to_string();
            code.contains("patch_status(") || code.contains("replace_status(")
        })
        .map(|(module, _)| module)
        .collect();
    assert_eq!(writers, ["controller::report"], "status writes outside the StatusWriter");
    let report =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/report.rs")).unwrap();
    assert_eq!(report.matches("patch_status(").count(), 1, "one call, in StatusWriter::apply");
    let fenced = report.split("async fn apply(").nth(1).expect("StatusWriter::apply");
    assert!(fenced.find(".confirm(").unwrap() < fenced.find("patch_status(").unwrap(), "the fence before the write");
}

/// The code of `path`: comments and its `#[cfg(test)] mod tests` aside, grouped imports
/// written out.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    let code: String = code.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
    ungroup(&code)
}

/// The lines of the function `name` in `code` (its signature to its closing brace at the start of a line).
fn function_lines(code: &str, name: &str) -> Option<usize> {
    let start = code.find(&format!("fn {name}("))?;
    let body = &code[start..];
    let end = body.find("\n}")?;
    Some(body[..end].lines().count() + 1)
}

/// Issue 70: `controller::run()` is the one place things start — `controller/mod.rs` holds the
/// start-up checks, the shared context and the admin server, and joins the kinds; it builds no
/// kube `Controller` of its own (each kind builds its own, in its `controllers()`).
#[test]
fn the_controller_s_mod_only_starts_things() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/mod.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines = text.split("#[cfg(test)]\nmod tests").next().unwrap().lines().count();
    assert!(lines <= 200, "controller/mod.rs is {lines} lines: it starts things, the kinds do the rest");
    let code = code_of(&path);
    for building in ["Controller::new(", "Controller::for_stream(", "watcher(", ".watches_stream("] {
        assert!(!code.contains(building), "controller/mod.rs has {building}: a kind's controllers() does that");
    }
}

/// The kinds the controller reconciles: the folders whose `controllers()` `controller::run` joins.
fn kinds() -> Vec<String> {
    let code = code_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/mod.rs"));
    let joined = regex::Regex::new(r"\b([a-z_]+)::controllers\(").unwrap();
    let kinds: Vec<String> = joined.captures_iter(&code).map(|c| c[1].to_string()).collect();
    assert!(kinds.len() >= 3, "the walk finds the kinds run() joins: {kinds:?}");
    kinds
}

/// Issue 70: every kind has one shape — its folder's `mod.rs` holds `controllers()` (its watches
/// through `DeserializeGuard`, so that one malformed object stalls nothing), a `reconcile()` of
/// at most 40 lines that calls named steps, and `error_policy()`; and no kube `Controller` is
/// built anywhere else.
#[test]
fn every_kind_has_the_same_shape() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller");
    let mut misshapen = Vec::new();
    for kind in kinds() {
        let path = root.join(&kind).join("mod.rs");
        assert!(path.exists(), "the kind {kind} is a folder with a mod.rs");
        let code = code_of(&path);
        for function in ["controllers", "reconcile", "error_policy"] {
            if function_lines(&code, function).is_none() {
                misshapen.push(format!("{kind}: no {function}()"));
            }
        }
        match function_lines(&code, "reconcile") {
            Some(lines) if lines > 40 => misshapen.push(format!("{kind}: reconcile() is {lines} lines (at most 40)")),
            _ => {}
        }
        if !code.contains("DeserializeGuard<") {
            misshapen.push(format!("{kind}: its watch is not through DeserializeGuard"));
        }
    }
    for (module, path) in src_modules() {
        let code = code_of(&path);
        let builds = code.contains("Controller::new(") || code.contains("Controller::for_stream(");
        let kind_root =
            module.strip_prefix("controller::").is_some_and(|k| !k.contains("::") && kinds().contains(&k.to_string()));
        if builds && !kind_root {
            misshapen.push(format!("{module} builds a kube Controller: only a kind's controllers() does"));
        }
    }
    assert!(misshapen.is_empty(), "{misshapen:#?}");
}

/// The items a module's file defines for itself and does not make `pub`: fns, types, consts.
fn private_items(code: &str) -> BTreeSet<String> {
    let item = regex::Regex::new(
        r"(?m)^(pub\([a-z: ]+\) )?(?:async )?(?:fn|struct|enum|const|static|type|trait) ([A-Za-z_][A-Za-z0-9_]*)",
    )
    .unwrap();
    item.captures_iter(code).map(|c| c[2].to_string()).collect()
}

/// Issue 70: a room takes from its parent only what the parent makes `pub` — never its
/// private items (`pub(crate)`, `pub(super)` or none), which are the parent's own business.
/// A private child module (`mod task;`) is the parent's own implementation and may.
#[test]
fn no_child_module_imports_its_parent_s_private_items() {
    let modules = src_modules();
    let mut leaning = Vec::new();
    let mut checked = 0;
    for (module, path) in &modules {
        let segments: Vec<&str> = module.split("::").collect();
        for up in 1..segments.len() {
            let ancestor = segments[..segments.len() - up].join("::");
            let Some(ancestor_path) = modules.get(&ancestor) else { continue };
            let ancestor_text = std::fs::read_to_string(ancestor_path).unwrap();
            // The child of the ancestor this module is in (or is): a private one is exempt.
            let child = segments[segments.len() - up];
            if ancestor_text.lines().any(|l| l.trim() == format!("mod {child};")) {
                break;
            }
            let private = private_items(ancestor_text.split("#[cfg(test)]\nmod tests").next().unwrap());
            let code = code_of(path);
            let prefix = "super::".repeat(up);
            checked += 1;
            for name in &private {
                let used = regex::Regex::new(&format!(r"\b{prefix}{name}\b")).unwrap();
                if used.is_match(&code) {
                    leaning.push(format!("{module} takes {ancestor}'s private {name}"));
                }
            }
        }
    }
    assert!(checked > 80, "the walk sees the modules ({checked})");
    assert!(leaning.is_empty(), "make these pub in their room, or move them where they are used: {leaning:#?}");
}

/// Issue 70: the command line uses the controller through what it exports at its root
/// (`crate::controller::run`, `RunConfig`, …), never through its rooms: what both front ends
/// need sits beside them at the top of `src/` (as `watches` does).
#[test]
fn no_module_of_the_cli_imports_controller_internals() {
    let mut reaching = Vec::new();
    let mut read = 0;
    let inside = regex::Regex::new(r"crate::controller::([a-z_]+)::").unwrap();
    for (module, path) in src_modules() {
        if module != "cli" && !module.starts_with("cli::") {
            continue;
        }
        read += 1;
        let code = code_of(&path);
        for room in inside.captures_iter(&code) {
            reaching.push(format!("{module}: crate::controller::{}::", &room[1]));
        }
    }
    assert!(read > 10, "the walk reads the cli ({read} files)");
    assert!(reaching.is_empty(), "the cli reaches into the controller: {reaching:#?}");
}

/// The error types of the `Result`s the functions in `code` return (`-> Result<T, E>`: `E`).
fn returned_errors(code: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for (at, _) in code.match_indices("-> Result<") {
        let args = &code[at + "-> Result<".len()..];
        // The two type arguments, split at the comma outside any brackets.
        let (mut depth, mut comma, mut end) = (0, None, None);
        for (i, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => comma = Some(i),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (comma, end) {
            errors.push(args[comma + 1..end].trim().to_string());
        }
    }
    errors
}

/// Issue 70: errors a caller branches on are enum variants, not strings: at most 15 functions
/// of `src/` return `Result<_, String>` (tests aside), and none in `pipeline/spec.rs`.
#[test]
fn few_functions_return_a_string_error() {
    assert_eq!(
        returned_errors("fn a() -> Result<IndexMap<String, String>, Vec<String>> {} fn b() -> Result<(), String>"),
        ["Vec<String>", "String"]
    );
    let mut found = Vec::new();
    for (module, path) in src_modules() {
        if module.ends_with("::tests") || module.ends_with("_tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        found.extend(returned_errors(code).into_iter().filter(|e| e == "String").map(|_| module.clone()));
    }
    assert!(found.len() > 3, "the walk finds what it looks for: {found:?}");
    assert!(!found.iter().any(|m| m == "pipeline::spec"), "pipeline::spec returns strings as errors");
    assert!(found.len() <= 15, "{} functions return Result<_, String> (at most 15): {found:#?}", found.len());
}

/// Issue 70: `src/lib.rs`'s documentation is the map of the house: it names every top-level
/// module, one line each.
#[test]
fn the_crate_doc_names_every_top_level_module() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let doc: Vec<&str> = lib.lines().filter(|l| l.starts_with("//!")).collect();
    let declared: Vec<String> =
        regex::Regex::new(r"(?m)^pub mod ([a-z_]+);").unwrap().captures_iter(&lib).map(|c| c[1].to_string()).collect();
    assert!(declared.len() > 10, "the walk reads lib.rs's modules: {declared:?}");
    let unnamed: Vec<&String> =
        declared.iter().filter(|m| !doc.iter().any(|l| l.contains(&format!("[`{m}`]")))).collect();
    assert!(unnamed.is_empty(), "lib.rs's doc does not name {unnamed:?}");
}
