//! `builtin/directory`: a directory with optional permission bits.

use serde_json::{Value, json};

use crate::engine::protocol::unknown;

use super::error::BuiltinError;
use super::{PATH_DESCRIPTION, Request, format_mode, mode_of, mode_schema, needs, plugs, set_mode};

pub(super) fn init() -> Value {
    json!({
        "label": "Local directory",
        "config_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": PATH_DESCRIPTION},
                "mode": mode_schema()
            },
            "required": ["path"],
            "additionalProperties": false
        },
        "plugs": plugs(),
        "state_action": {"args": ["state"]},
        "delete_action": {"args": ["delete"]},
        "identity": ["/path"],
        "state_with_unknowns": true
    })
}

pub(super) fn state(request: &Request) -> Result<Value, BuiltinError> {
    let path = request.path()?;
    let wanted = request.mode()?;
    let shown = path.display().to_string();
    // Without a mode of its own, a new directory's is the umask's: known once it exists.
    let planned = json!({"path": shown, "mode": wanted.map_or_else(unknown, |m| json!(format_mode(m)))});
    let metadata = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(needs("MISSING", (None, planned), &[("create", format!("Create directory {shown}"))]));
        }
        Err(e) => return Err(BuiltinError::io("inspect", &path)(e)),
        Ok(_) if request.unknown("mode") => return Err(request.cannot_tell(&shown, &["mode"])),
        Ok(m) => m,
    };
    if !metadata.is_dir() {
        return Err(BuiltinError::Refused(format!("{shown} exists and is not a directory; refusing to replace it")));
    }
    let actual = mode_of(&metadata);
    let current = json!({"path": shown, "mode": format_mode(actual)});
    match wanted {
        Some(mode) if mode != actual => Ok(needs(
            "STALE",
            (Some(current), planned),
            &[("chmod", format!("Change mode of {shown} from {} to {}", format_mode(actual), format_mode(mode)))],
        )),
        _ => Ok(json!({"status": "VALID", "state": current})),
    }
}

pub(super) fn act(action: &str, request: &Request, said: &mut Vec<String>) -> Result<(), BuiltinError> {
    let path = request.path()?;
    match action {
        "create" => {
            std::fs::create_dir_all(&path).map_err(BuiltinError::io("create", &path))?;
            said.push(format!("created {}", path.display()));
        }
        "chmod" => {}
        "delete" => return delete(&path, said),
        other => return Err(BuiltinError::UnknownAction(other.into())),
    }
    if let Some(mode) = request.mode()? {
        set_mode(&path, mode)?;
        said.push(format!("mode of {} set to {}", path.display(), format_mode(mode)));
    }
    Ok(())
}

/// Removes the directory only when it is empty: what is inside is someone's data (the resources
/// that wrote it are deleted first, in reverse dependency order).
fn delete(path: &std::path::Path, said: &mut Vec<String>) -> Result<(), BuiltinError> {
    match std::fs::remove_dir(path) {
        Ok(()) => {
            said.push(format!("deleted {}", path.display()));
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
            Err(BuiltinError::Refused(format!("{} is not empty; refusing to delete what is inside", path.display())))
        }
        Err(e) => Err(BuiltinError::io("delete", path)(e)),
    }
}
