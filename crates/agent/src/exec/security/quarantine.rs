//! Quarantine: moving a flagged file into the agent's quarantine directory with a record of
//! what it was, and restoring or deleting it later.

use super::*;

/// A quarantine record (`record.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    pub quarantine_id: Uuid,
    pub original_path: String,
    pub sha256: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
    /// quarantined, removed or restored.
    pub state: String,
    pub quarantined_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<Timestamp>,
}

impl QuarantineRecord {
    fn view(&self) -> Value {
        json!({
            "quarantineId": self.quarantine_id,
            "originalPath": self.original_path,
            "sha256": self.sha256,
            "mode": mode_string(self.mode),
            "uid": self.uid,
            "gid": self.gid,
            "sizeBytes": self.size_bytes,
            "state": self.state,
        })
    }
}

fn record_dir(qdir: &Path, id: &str) -> Result<(Uuid, PathBuf), String> {
    let id =
        Uuid::parse_str(id).map_err(|_| format!("quarantineId {id:?} is not a quarantine id"))?;
    Ok((id, qdir.join(id.to_string())))
}

fn read_record(dir: &Path) -> Result<QuarantineRecord, String> {
    let bytes = std::fs::read(dir.join("record.json")).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "no such quarantined file on this device".to_owned()
        } else {
            format!("cannot read the quarantine record: {e}")
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| format!("the quarantine record is unreadable: {e}"))
}

fn write_record(dir: &Path, r: &QuarantineRecord) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(r).map_err(|e| e.to_string())?;
    crate::config::write_atomic(&dir.join("record.json"), &bytes, 0o600)
        .map_err(|e| format!("cannot write the quarantine record: {e}"))
}

/// Moves `from` to `to`: a rename, or a copy and delete across filesystems.
fn move_file(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
            std::fs::copy(from, to)?;
            std::fs::remove_file(from)
        }
        Err(e) => Err(e),
    }
}

/// Quarantines the regular file `path` into `qdir` (see the module docs).
pub fn quarantine(
    guard: &PathGuard,
    qdir: &Path,
    path: &str,
    expected_sha256: Option<&str>,
    delete: bool,
    now: Timestamp,
) -> Typed {
    use std::os::unix::fs::MetadataExt;
    let p = guard.resolve(path, Resolve::Parent)?;
    let meta =
        std::fs::symlink_metadata(&p).map_err(|e| format!("cannot quarantine {path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "cannot quarantine {path}: only regular files are quarantined (not links, directories or devices)"
        ));
    }
    // Hash what the guard opens (no link swapped in on the way).
    let mut file = guard.open_read(path, &p)?;
    let sha256 = sha256_of_reader(&mut file).map_err(|e| format!("cannot read {path}: {e}"))?;
    if let Some(want) = expected_sha256
        && !want.eq_ignore_ascii_case(&sha256)
    {
        return Err(format!(
            "{path} changed since the scan (sha256 {sha256}, expected {want}); nothing was moved"
        ));
    }
    crate::config::create_private_dir(qdir)
        .map_err(|e| format!("cannot create the quarantine: {e}"))?;
    let id = Uuid::now_v7();
    let dir = qdir.join(id.to_string());
    crate::config::create_private_dir(&dir)
        .map_err(|e| format!("cannot create the quarantine: {e}"))?;
    let content = dir.join("content");
    let mut record = QuarantineRecord {
        quarantine_id: id,
        original_path: path.to_owned(),
        sha256,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        size_bytes: meta.len(),
        state: "quarantining".into(),
        quarantined_at: now,
        changed_at: None,
    };
    write_record(&dir, &record)?;
    if let Err(e) = move_file(&p, &content) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!("cannot move {path} into the quarantine: {e}"));
    }
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&content, std::fs::Permissions::from_mode(0o600));
    }
    record.state = "quarantined".into();
    if delete {
        std::fs::remove_file(&content)
            .map_err(|e| format!("quarantined, but cannot delete the content: {e}"))?;
        record.state = "removed".into();
        record.changed_at = Some(now);
    }
    write_record(&dir, &record)?;
    tracing::info!(path, quarantine = %id, state = %record.state, "file quarantined");
    Ok(record.view())
}

/// Restores a quarantined file to its original path.
pub fn restore(guard: &PathGuard, qdir: &Path, id: &str, now: Timestamp) -> Typed {
    use std::os::unix::fs::PermissionsExt;
    let (_, dir) = record_dir(qdir, id)?;
    let mut record = read_record(&dir)?;
    if record.state != "quarantined" {
        return Err(format!(
            "cannot restore: the file is {} (only quarantined files are restored)",
            record.state
        ));
    }
    let target = guard.resolve(&record.original_path, Resolve::Parent)?;
    if std::fs::symlink_metadata(&target).is_ok() {
        return Err(format!(
            "cannot restore: something is at {} now; move it away first",
            record.original_path
        ));
    }
    let content = dir.join("content");
    let sha = sha256_of(&content).map_err(|e| format!("cannot read the quarantined copy: {e}"))?;
    if sha != record.sha256 {
        return Err(
            "the quarantined copy no longer matches its recorded sha256; not restored".into(),
        );
    }
    move_file(&content, &target)
        .map_err(|e| format!("cannot restore {}: {e}", record.original_path))?;
    let _ = std::fs::set_permissions(&target, std::fs::Permissions::from_mode(record.mode));
    let owner_restored =
        std::os::unix::fs::chown(&target, Some(record.uid), Some(record.gid)).is_ok();
    record.state = "restored".into();
    record.changed_at = Some(now);
    write_record(&dir, &record)?;
    tracing::info!(path = %record.original_path, quarantine = %record.quarantine_id, "file restored");
    let mut v = record.view();
    v["ownerRestored"] = json!(owner_restored);
    Ok(v)
}

/// Deletes a quarantined file's content, keeping its record.
pub fn delete(qdir: &Path, id: &str, now: Timestamp) -> Typed {
    let (_, dir) = record_dir(qdir, id)?;
    let mut record = read_record(&dir)?;
    if record.state != "quarantined" {
        return Err(format!("cannot remove: the file is {}", record.state));
    }
    std::fs::remove_file(dir.join("content"))
        .map_err(|e| format!("cannot delete the quarantined copy: {e}"))?;
    record.state = "removed".into();
    record.changed_at = Some(now);
    write_record(&dir, &record)?;
    Ok(record.view())
}
