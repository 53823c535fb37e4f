//! `builtin/file`: a file with the given content and optional permission bits.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::error::BuiltinError;
use super::{PATH_DESCRIPTION, Request, format_mode, mode_of, mode_schema, needs, plugs, set_mode};
use crate::engine::protocol::unknown;

pub(super) fn init() -> Value {
    json!({
        "label": "Local file",
        "config_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": PATH_DESCRIPTION},
                "content": {"type": "string", "description": "the file's whole content, as text"},
                "mode": mode_schema()
            },
            "required": ["path", "content"],
            "additionalProperties": false
        },
        "plugs": plugs(),
        "state_action": {"args": ["state"]},
        "delete_action": {"args": ["delete"]},
        "identity": ["/path"],
        "state_with_unknowns": true
    })
}

fn content<'a>(request: &Request<'a>) -> Result<&'a str, BuiltinError> {
    request.text("content")
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub(super) fn state(request: &Request) -> Result<Value, BuiltinError> {
    let path = request.path()?;
    let wanted_mode = request.mode()?;
    let shown = path.display().to_string();
    // A plan's content not known yet: the file's digest and size are known once it is.
    let (wanted_sha, size) = match request.unknown("content") {
        true => (unknown(), unknown()),
        false => (json!(sha256(content(request)?.as_bytes())), json!(content(request)?.len())),
    };
    // Without a mode of its own, a file's is the umask's (or, rewritten, the one it had).
    let planned = |found: Option<u32>| {
        let mode = wanted_mode.or(found).map_or_else(unknown, |m| json!(format_mode(m)));
        json!({"path": shown, "sha256": wanted_sha, "size": size, "mode": mode})
    };
    let metadata = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(needs("MISSING", (None, planned(None)), &[("write", format!("Write {shown}"))]));
        }
        Err(e) => return Err(BuiltinError::io("inspect", &path)(e)),
        Ok(_) if request.unknown("content") || request.unknown("mode") => {
            let fields: Vec<&str> = ["content", "mode"].into_iter().filter(|f| request.unknown(f)).collect();
            return Err(request.cannot_tell(&shown, &fields));
        }
        Ok(m) => m,
    };
    if !metadata.is_file() {
        return Err(BuiltinError::Refused(format!("{shown} exists and is not a regular file; refusing to replace it")));
    }
    let bytes = std::fs::read(&path).map_err(BuiltinError::io("read", &path))?;
    let actual_mode = mode_of(&metadata);
    let current =
        json!({"path": shown, "sha256": sha256(&bytes), "size": bytes.len(), "mode": format_mode(actual_mode)});
    if current["sha256"] != wanted_sha {
        let planned = planned(Some(actual_mode));
        return Ok(needs(
            "STALE",
            (Some(current), planned),
            &[("write", format!("Rewrite {shown} (its content differs)"))],
        ));
    }
    match wanted_mode {
        Some(mode) if mode != actual_mode => Ok(needs(
            "STALE",
            (Some(current), planned(Some(actual_mode))),
            &[("chmod", format!("Change mode of {shown} from {} to {}", format_mode(actual_mode), format_mode(mode)))],
        )),
        _ => Ok(json!({"status": "VALID", "state": current})),
    }
}

pub(super) fn act(action: &str, request: &Request, said: &mut Vec<String>) -> Result<(), BuiltinError> {
    let path = request.path()?;
    match action {
        "write" => write_atomically(&path, content(request)?.as_bytes(), request.mode()?, said)?,
        "delete" => match std::fs::remove_file(&path) {
            Ok(()) => said.push(format!("deleted {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BuiltinError::io("delete", &path)(e)),
        },
        "chmod" => {
            let mode = request.mode()?.ok_or_else(|| BuiltinError::config("mode", "must be given for chmod"))?;
            set_mode(&path, mode)?;
            said.push(format!("mode of {} set to {}", path.display(), format_mode(mode)));
        }
        other => return Err(BuiltinError::UnknownAction(other.into())),
    }
    Ok(())
}

/// Writes through a temporary file in the same directory and renames it into place, so that a
/// crash never leaves a half-written file. Keeps the existing mode unless one is configured.
fn write_atomically(path: &Path, bytes: &[u8], mode: Option<u32>, said: &mut Vec<String>) -> Result<(), BuiltinError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(BuiltinError::Refused(format!(
            "cannot write {}: directory {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    let name =
        path.file_name().ok_or_else(|| BuiltinError::config("path", format!("`{}` names no file", path.display())))?;
    // Unique within this process too: built-ins may run in deployster's own process, several at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = dir.join(format!(".{}.deployster-{}-{n}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp).map_err(BuiltinError::io("create", &temp))?;
        file.write_all(bytes).and_then(|()| file.sync_all()).map_err(BuiltinError::io("write", &temp))?;
        let keep = std::fs::metadata(path).ok().map(|m| mode_of(&m));
        if let Some(mode) = mode.or(keep) {
            set_mode(&temp, mode)?;
        }
        std::fs::rename(&temp, path).map_err(BuiltinError::io(format!("move into {} the file", path.display()), &temp))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result?;
    said.push(format!("wrote {} ({} bytes)", path.display(), bytes.len()));
    Ok(())
}
