//! File operations: list, read, write, delete, mkdir, rename. Paths must be absolute.

use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use breeze_agent_proto::ContentEncoding;
use serde_json::{Value, json};

use super::{Typed, system_time};

/// What `FileRead` returns when `maxBytes` is 0.
pub const DEFAULT_READ_BYTES: u64 = 1024 * 1024;

fn absolute(path: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(path);
    if path.is_empty() {
        return Err("path is empty".to_owned());
    }
    if !p.is_absolute() {
        return Err(format!("path {path:?} must be absolute"));
    }
    Ok(p)
}

fn io_error(action: &str, path: &Path, e: &std::io::Error) -> String {
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    };
    format!("cannot {action} {}: {why}", path.display())
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    }
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> Value {
    use std::os::unix::fs::PermissionsExt;
    Value::String(format!("{:04o}", meta.permissions().mode() & 0o7777))
}

#[cfg(not(unix))]
fn mode_of(meta: &std::fs::Metadata) -> Value {
    Value::String(
        if meta.permissions().readonly() {
            "r"
        } else {
            "rw"
        }
        .to_owned(),
    )
}

/// `{"path","entries":[{name,kind,sizeBytes,modifiedAt,mode}]}`, sorted by name.
pub fn list(path: &str) -> Typed {
    let dir = absolute(path)?;
    let entries = std::fs::read_dir(&dir).map_err(|e| io_error("list", &dir, &e))?;
    let mut out: Vec<(String, Value)> = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        out.push((
            name.clone(),
            json!({
                "name": name,
                "kind": kind_of(&meta),
                "sizeBytes": meta.len(),
                "modifiedAt": meta.modified().ok().and_then(system_time),
                "mode": mode_of(&meta),
            }),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(json!({ "path": path, "entries": out.into_iter().map(|e| e.1).collect::<Vec<_>>() }))
}

/// Reads up to `max_bytes`; UTF-8 text as is, anything else base64.
pub fn read(path: &str, max_bytes: u64) -> Typed {
    let p = absolute(path)?;
    let meta = std::fs::metadata(&p).map_err(|e| io_error("read", &p, &e))?;
    if meta.is_dir() {
        return Err(format!("cannot read {path}: it is a directory"));
    }
    let max = if max_bytes == 0 {
        DEFAULT_READ_BYTES
    } else {
        max_bytes
    };
    let file = std::fs::File::open(&p).map_err(|e| io_error("read", &p, &e))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read", &p, &e))?;
    let truncated = bytes.len() as u64 > max;
    bytes.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    let (content, encoding) = match std::str::from_utf8(&bytes) {
        Ok(text) => (text.to_owned(), "utf8"),
        // A multi-byte character cut by the limit still counts as text.
        Err(e) if truncated && e.error_len().is_none() => (
            String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
            "utf8",
        ),
        Err(_) => (BASE64.encode(&bytes), "base64"),
    };
    Ok(json!({
        "path": path,
        "content": content,
        "encoding": encoding,
        "sizeBytes": meta.len(),
        "truncated": truncated,
    }))
}

/// Writes the content (decoded from base64 when asked), creating parent directories.
pub fn write(path: &str, content: &str, encoding: ContentEncoding) -> Typed {
    let p = absolute(path)?;
    let bytes = match encoding {
        ContentEncoding::Utf8 => content.as_bytes().to_vec(),
        ContentEncoding::Base64 => BASE64
            .decode(content.trim())
            .map_err(|e| format!("content is not valid base64: {e}"))?,
    };
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_error("create", parent, &e))?;
    }
    std::fs::write(&p, &bytes).map_err(|e| io_error("write", &p, &e))?;
    Ok(json!({ "path": path, "bytesWritten": bytes.len() }))
}

/// Deletes a file, symlink or (with `recursive`) a directory tree. Symlinks are not followed.
pub fn delete(path: &str, recursive: bool) -> Typed {
    let p = absolute(path)?;
    if p.parent().is_none() {
        return Err("refusing to delete the root directory".to_owned());
    }
    let meta = std::fs::symlink_metadata(&p).map_err(|e| io_error("delete", &p, &e))?;
    if meta.is_dir() {
        if !recursive {
            return Err(format!(
                "{path} is a directory; set recursive to delete it and everything in it"
            ));
        }
        std::fs::remove_dir_all(&p).map_err(|e| io_error("delete", &p, &e))?;
    } else {
        std::fs::remove_file(&p).map_err(|e| io_error("delete", &p, &e))?;
    }
    Ok(json!({ "path": path, "deleted": true }))
}

/// `mkdir -p`. `created` is false when the directory was there already.
pub fn mkdir(path: &str) -> Typed {
    let p = absolute(path)?;
    if let Ok(meta) = std::fs::symlink_metadata(&p) {
        if meta.is_dir() {
            return Ok(json!({ "path": path, "created": false }));
        }
        return Err(format!("{path} exists and is not a directory"));
    }
    std::fs::create_dir_all(&p).map_err(|e| io_error("create", &p, &e))?;
    Ok(json!({ "path": path, "created": true }))
}

/// Renames (moves) within one filesystem.
pub fn rename(from: &str, to: &str) -> Typed {
    let f = absolute(from)?;
    let t = absolute(to)?;
    std::fs::symlink_metadata(&f).map_err(|e| io_error("rename", &f, &e))?;
    std::fs::rename(&f, &t).map_err(|e| {
        if e.kind() == std::io::ErrorKind::CrossesDevices {
            format!("cannot rename {from} to {to}: they are on different filesystems")
        } else {
            io_error("rename", &f, &e)
        }
    })?;
    Ok(json!({ "from": from, "to": to }))
}
