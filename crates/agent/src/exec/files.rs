//! File operations: list, read, write, delete, mkdir, rename. Paths must be absolute; every
//! one goes through the command's [`PathGuard`] first (see [`super::protect`]), and reads and
//! writes open what was checked.

use std::io::{Read, Write};
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use breeze_agent_proto::ContentEncoding;
use serde_json::{Value, json};

use super::protect::{PathGuard, Resolve};
use super::{Typed, system_time};

/// What `FileRead` returns when `maxBytes` is 0.
pub const DEFAULT_READ_BYTES: u64 = 1024 * 1024;

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

/// One directory entry's metadata, read without following a link and without leaving the
/// directory that was checked.
#[cfg(target_os = "linux")]
fn entry_meta(
    dir: &std::fs::File,
    _path: &Path,
    name: &std::ffi::OsStr,
) -> Option<std::fs::Metadata> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    let fd = openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    std::fs::File::from(fd).metadata().ok()
}

#[cfg(not(target_os = "linux"))]
fn entry_meta(
    _dir: &std::fs::File,
    path: &Path,
    name: &std::ffi::OsStr,
) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(path.join(name)).ok()
}

/// The names in the directory opened as `dir`.
#[cfg(unix)]
fn names_in(dir: &std::fs::File, given: &str) -> Result<Vec<std::ffi::OsString>, String> {
    use std::os::unix::ffi::OsStrExt;
    let fd = dir
        .try_clone()
        .map_err(|e| format!("cannot list {given}: {e}"))?;
    let listing = nix::dir::Dir::from_fd(std::os::fd::OwnedFd::from(fd))
        .map_err(|e| format!("cannot list {given}: {e}"))?;
    Ok(listing
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned())
        .filter(|n| n != "." && n != "..")
        .collect())
}

#[cfg(not(unix))]
fn names_in(_dir: &std::fs::File, given: &str) -> Result<Vec<std::ffi::OsString>, String> {
    Err(format!(
        "cannot list {given}: not supported on this platform"
    ))
}

/// `{"path","entries":[{name,kind,sizeBytes,modifiedAt,mode}],"protectedOmitted"}`, sorted by
/// name. Protected entries are left out and counted.
pub fn list(guard: &PathGuard, path: &str) -> Typed {
    let dir = guard.resolve(path, Resolve::Follow)?;
    let handle = guard.open_dir(path, &dir)?;
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut omitted = 0u64;
    for name in names_in(&handle, path)? {
        let Some(meta) = entry_meta(&handle, &dir, &name) else {
            continue;
        };
        if guard.skips(&dir.join(&name), &meta) {
            omitted += 1;
            continue;
        }
        let name = name.to_string_lossy().into_owned();
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
    Ok(json!({
        "path": path,
        "entries": out.into_iter().map(|e| e.1).collect::<Vec<_>>(),
        "protectedOmitted": omitted,
    }))
}

/// Reads up to `max_bytes` of a regular file; UTF-8 text as is, anything else base64 — and so
/// is "text" holding U+0000, which the server cannot store as text (it would come back as
/// U+FFFD): every byte read round-trips.
pub fn read(guard: &PathGuard, path: &str, max_bytes: u64) -> Typed {
    let p = guard.resolve(path, Resolve::Follow)?;
    let file = guard.open_read(path, &p)?;
    let meta = file
        .metadata()
        .map_err(|e| io_error("read", Path::new(path), &e))?;
    let max = if max_bytes == 0 {
        DEFAULT_READ_BYTES
    } else {
        max_bytes
    };
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read", Path::new(path), &e))?;
    let truncated = bytes.len() as u64 > max;
    bytes.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    let (content, encoding) = match std::str::from_utf8(&bytes) {
        _ if bytes.contains(&0) => (BASE64.encode(&bytes), "base64"),
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

/// Writes the content (decoded from base64 when asked), creating parent directories. The file
/// is created in its checked directory without following a link.
pub fn write(guard: &PathGuard, path: &str, content: &str, encoding: ContentEncoding) -> Typed {
    let target = guard.resolve(path, Resolve::Parent)?;
    let bytes = match encoding {
        ContentEncoding::Utf8 => content.as_bytes().to_vec(),
        ContentEncoding::Base64 => BASE64
            .decode(content.trim())
            .map_err(|e| format!("content is not valid base64: {e}"))?,
    };
    let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(format!("path {path:?} does not name a file"));
    };
    std::fs::create_dir_all(parent).map_err(|e| io_error("create", parent, &e))?;
    // Checked again now that the directories exist: one may have been a link all along.
    let target = guard.resolve(path, Resolve::Parent)?;
    let parent = target.parent().unwrap_or(parent);
    let dir = guard.open_parent(path, parent)?;
    let mut file = guard.create_in(path, &dir, parent, name)?;
    file.write_all(&bytes)
        .map_err(|e| io_error("write", Path::new(path), &e))?;
    Ok(json!({ "path": path, "bytesWritten": bytes.len() }))
}

/// Deletes a file, symlink or (with `recursive`) a directory tree. Symlinks are not followed;
/// a tree that holds a protected path, or another mounted filesystem, is not deleted.
pub fn delete(guard: &PathGuard, path: &str, recursive: bool) -> Typed {
    let p = guard.resolve(path, Resolve::Parent)?;
    if p.parent().is_none() {
        return Err("refusing to delete the root directory".to_owned());
    }
    let meta =
        std::fs::symlink_metadata(&p).map_err(|e| io_error("delete", Path::new(path), &e))?;
    if meta.is_dir() {
        if !recursive {
            return Err(format!(
                "{path} is a directory; set recursive to delete it and everything in it"
            ));
        }
        let mut budget = super::disk::SCAN_BUDGET;
        if guard.tree_holds_protected(&p, &mut budget) {
            return Err(format!(
                "{} (it holds protected paths or another filesystem)",
                PathGuard::refusal(path)
            ));
        }
        std::fs::remove_dir_all(&p).map_err(|e| io_error("delete", Path::new(path), &e))?;
    } else {
        std::fs::remove_file(&p).map_err(|e| io_error("delete", Path::new(path), &e))?;
    }
    Ok(json!({ "path": path, "deleted": true }))
}

/// `mkdir -p`. `created` is false when the directory was there already.
pub fn mkdir(guard: &PathGuard, path: &str) -> Typed {
    let p = guard.resolve(path, Resolve::Parent)?;
    if let Ok(meta) = std::fs::symlink_metadata(&p) {
        if meta.is_dir() {
            return Ok(json!({ "path": path, "created": false }));
        }
        return Err(format!("{path} exists and is not a directory"));
    }
    std::fs::create_dir_all(&p).map_err(|e| io_error("create", Path::new(path), &e))?;
    Ok(json!({ "path": path, "created": true }))
}

/// Renames (moves) within one filesystem. Neither end may be protected, and a directory that
/// holds a protected path is not moved (out from under its protection).
pub fn rename(guard: &PathGuard, from: &str, to: &str) -> Typed {
    let f = guard.resolve(from, Resolve::Parent)?;
    let t = guard.resolve(to, Resolve::Parent)?;
    let meta =
        std::fs::symlink_metadata(&f).map_err(|e| io_error("rename", Path::new(from), &e))?;
    let mut budget = super::disk::SCAN_BUDGET;
    if meta.is_dir() && guard.tree_holds_protected(&f, &mut budget) {
        return Err(format!(
            "{} (it holds protected paths or another filesystem)",
            PathGuard::refusal(from)
        ));
    }
    std::fs::rename(&f, &t).map_err(|e| {
        if e.kind() == std::io::ErrorKind::CrossesDevices {
            format!("cannot rename {from} to {to}: they are on different filesystems")
        } else {
            io_error("rename", Path::new(from), &e)
        }
    })?;
    Ok(json!({ "from": from, "to": to }))
}
