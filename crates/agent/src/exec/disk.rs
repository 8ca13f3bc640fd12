//! `DiskScan` and `DiskCleanup`.
//!
//! The scan walks a tree without following symlinks and without entering `/proc`, `/sys` or
//! `/dev` or any protected path (see [`super::protect`]; a scan of `/` skips those subtrees and
//! names none of them), within a budget of entries and the command's deadline; it reports the largest files
//! and directories, the mounts, and cleanup candidates: `temp` (under `/tmp`, `/var/tmp`),
//! `cache` (users' `~/.cache`, apt's downloaded packages), `old_logs` (rotated logs under
//! `/var/log`) and `large_file` (at or above the threshold). Cleanup deletes only paths that
//! fall in the first three categories, after resolving symlinks in their parents, and never a
//! protected path or a tree that holds one (or another mounted filesystem).
//!
//! The scan reads directories by path, not through descriptors as file reads do: a directory
//! swapped for a link while it runs could show names and sizes (never contents) from where the
//! link points, until the next entry's checks. Cleanup deletes with `remove_dir_all`, which
//! does not follow links even under such a race.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use super::protect::{PathGuard, Resolve};
use super::{Typed, system_time};

/// Most entries one scan visits.
pub const SCAN_BUDGET: u64 = 500_000;
/// Directories never entered.
const SKIP: &[&str] = &["/proc", "/sys", "/dev"];
/// Temporary directories whose contents are cleanup candidates.
const TEMP_DIRS: &[&str] = &["/tmp", "/var/tmp"];
/// Most cleanup candidates listed per category.
const MAX_CANDIDATES: usize = 200;

/// A cleanup category and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Category {
    pub name: &'static str,
    pub reason: &'static str,
}

const TEMP: Category = Category {
    name: "temp",
    reason: "inside a temporary directory",
};
const CACHE: Category = Category {
    name: "cache",
    reason: "inside a cache directory",
};
const OLD_LOGS: Category = Category {
    name: "old_logs",
    reason: "a rotated log file",
};

fn strictly_under(path: &Path, dir: &Path) -> bool {
    path != dir && path.starts_with(dir)
}

fn rotated_log_name(name: &str) -> bool {
    [".gz", ".xz", ".bz2", ".zst", ".old"]
        .iter()
        .any(|ext| name.ends_with(ext))
        || name.rsplit_once('.').is_some_and(|(stem, n)| {
            !stem.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The cleanup category of an absolute, normalised path, if it has one.
pub fn categorize(path: &Path) -> Option<Category> {
    if TEMP_DIRS.iter().any(|d| strictly_under(path, Path::new(d))) {
        return Some(TEMP);
    }
    let apt = Path::new("/var/cache/apt/archives");
    if strictly_under(path, apt) {
        let name = path.file_name()?.to_string_lossy();
        if name.ends_with(".deb") || strictly_under(path, &apt.join("partial")) {
            return Some(CACHE);
        }
        return None;
    }
    if strictly_under(path, Path::new("/root/.cache")) {
        return Some(CACHE);
    }
    let mut parts = path.components();
    if let (
        Some(Component::RootDir),
        Some(Component::Normal(home)),
        Some(Component::Normal(_user)),
        Some(Component::Normal(cache)),
        Some(_),
    ) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) && home == "home"
        && cache == ".cache"
    {
        return Some(CACHE);
    }
    if strictly_under(path, Path::new("/var/log")) {
        let name = path.file_name()?.to_string_lossy();
        if rotated_log_name(&name) {
            return Some(OLD_LOGS);
        }
    }
    None
}

struct Walk<'g> {
    guard: &'g PathGuard,
    protected: u64,
    top_n: usize,
    large: u64,
    deadline: Instant,
    visited: u64,
    truncated: bool,
    errors: u64,
    files: BinaryHeap<Reverse<(u64, String)>>,
    dirs: BinaryHeap<Reverse<(u64, String)>>,
    candidates: Vec<(u64, String, Category)>,
    large_files: BinaryHeap<Reverse<(u64, String)>>,
}

fn keep_top(heap: &mut BinaryHeap<Reverse<(u64, String)>>, n: usize, size: u64, path: &Path) {
    if n == 0 {
        return;
    }
    if heap.len() < n {
        heap.push(Reverse((size, path.to_string_lossy().into_owned())));
    } else if heap.peek().is_some_and(|Reverse((min, _))| size > *min) {
        heap.pop();
        heap.push(Reverse((size, path.to_string_lossy().into_owned())));
    }
}

impl Walk<'_> {
    fn exhausted(&mut self) -> bool {
        if self.visited >= SCAN_BUDGET
            || (self.visited.is_multiple_of(1024) && Instant::now() >= self.deadline)
        {
            self.truncated = true;
        }
        self.truncated
    }

    /// Size of the tree at `path` (its metadata already read).
    fn walk(&mut self, path: &Path, meta: &std::fs::Metadata, parent_categorized: bool) -> u64 {
        self.visited += 1;
        let category = categorize(path);
        let size = if meta.is_dir() {
            if SKIP.iter().any(|s| path == Path::new(s)) {
                return 0;
            }
            let mut total = 0u64;
            match std::fs::read_dir(path) {
                Ok(entries) => {
                    for entry in entries {
                        if self.exhausted() {
                            break;
                        }
                        let Ok(entry) = entry else {
                            self.errors += 1;
                            continue;
                        };
                        let child = entry.path();
                        match std::fs::symlink_metadata(&child) {
                            Ok(m) if self.guard.skips(&child, &m) => self.protected += 1,
                            Ok(m) => {
                                total =
                                    total.saturating_add(self.walk(&child, &m, category.is_some()));
                            }
                            Err(_) => self.errors += 1,
                        }
                    }
                }
                Err(_) => self.errors += 1,
            }
            keep_top(&mut self.dirs, self.top_n, total, path);
            total
        } else if meta.is_file() {
            let len = meta.len();
            keep_top(&mut self.files, self.top_n, len, path);
            if len >= self.large {
                keep_top(&mut self.large_files, self.top_n, len, path);
            }
            len
        } else {
            // Symlinks and special files count for nothing and are not followed.
            0
        };
        if let (Some(category), false) = (category, parent_categorized)
            && self.candidates.len() < MAX_CANDIDATES * 3
        {
            self.candidates
                .push((size, path.to_string_lossy().into_owned(), category));
        }
        size
    }
}

fn mtime(path: &str) -> Value {
    std::fs::symlink_metadata(path)
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(system_time)
        .map_or(Value::Null, |t| json!(t))
}

/// Scans `path`. See the module docs.
pub fn scan(
    guard: &PathGuard,
    path: &str,
    top_n: u32,
    large_file_bytes: u64,
    deadline: Instant,
) -> Typed {
    let root = guard.resolve(path, Resolve::Follow)?;
    let meta = std::fs::symlink_metadata(&root).map_err(|e| format!("cannot scan {path}: {e}"))?;
    let top_n = if top_n == 0 {
        20
    } else {
        top_n.min(1000) as usize
    };
    let mut walk = Walk {
        guard,
        protected: 0,
        top_n,
        large: if large_file_bytes == 0 {
            u64::MAX
        } else {
            large_file_bytes
        },
        deadline,
        visited: 0,
        truncated: false,
        errors: 0,
        files: BinaryHeap::new(),
        dirs: BinaryHeap::new(),
        candidates: Vec::new(),
        large_files: BinaryHeap::new(),
    };
    let parent_categorized = root.parent().and_then(categorize).is_some();
    let total = walk.walk(&root, &meta, parent_categorized);
    let sorted = |heap: BinaryHeap<Reverse<(u64, String)>>| {
        let mut v: Vec<(u64, String)> = heap.into_iter().map(|Reverse(x)| x).collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v
    };
    let largest_files: Vec<Value> = sorted(walk.files)
        .into_iter()
        .map(|(size, p)| json!({ "path": p, "sizeBytes": size, "modifiedAt": mtime(&p) }))
        .collect();
    let largest_dirs: Vec<Value> = sorted(walk.dirs)
        .into_iter()
        .map(|(size, p)| json!({ "path": p, "sizeBytes": size }))
        .collect();
    let mut candidates = walk.candidates;
    candidates.sort_by_key(|c| Reverse(c.0));
    let mut cleanup: Vec<Value> = candidates
        .into_iter()
        .take(MAX_CANDIDATES)
        .map(|(size, p, c)| json!({ "path": p, "category": c.name, "sizeBytes": size, "reason": c.reason }))
        .collect();
    for (size, p) in sorted(walk.large_files) {
        cleanup.push(json!({
            "path": p,
            "category": "large_file",
            "sizeBytes": size,
            "reason": format!("at least {} bytes", walk.large),
        }));
    }
    let mounts: Vec<Value> = crate::system::inventory::disks()
        .into_iter()
        .map(|d| {
            let used = d.total_bytes.saturating_sub(d.available_bytes);
            json!({
                "mount": d.mount,
                "filesystem": d.filesystem,
                "totalBytes": d.total_bytes,
                "availableBytes": d.available_bytes,
                "usedBytes": used,
                "usedPercent": if d.total_bytes == 0 { 0.0 } else { ((used as f64 * 10_000.0 / d.total_bytes as f64).round()) / 100.0 },
            })
        })
        .collect();
    Ok(json!({
        "path": path,
        "totalBytes": total,
        "scannedEntries": walk.visited,
        "truncated": walk.truncated,
        "unreadable": walk.errors,
        "protectedSkipped": walk.protected,
        "mounts": mounts,
        "largestFiles": largest_files,
        "largestDirectories": largest_dirs,
        "cleanupCandidates": cleanup,
    }))
}

/// The path with symlinks in its parent resolved and checked, `.` and `..` refused.
fn resolve(guard: &PathGuard, path: &str) -> Result<PathBuf, String> {
    if Path::new(path)
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err("the path contains . or .. components".to_owned());
    }
    guard.resolve(path, Resolve::Parent)
}

fn tree_size(path: &Path, budget: &mut u64) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if *budget == 0 {
        return 0;
    }
    *budget -= 1;
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| tree_size(&e.path(), budget))
                    .sum()
            })
            .unwrap_or(0)
    } else if meta.is_file() {
        meta.len()
    } else {
        0
    }
}

/// Deletes recognised cleanup candidates; everything else is skipped with a reason.
pub fn cleanup(guard: &PathGuard, paths: &[String]) -> Value {
    let mut deleted = Vec::new();
    let mut skipped = Vec::new();
    let mut freed = 0u64;
    for path in paths {
        let outcome = (|| -> Result<u64, String> {
            let resolved = resolve(guard, path)?;
            if categorize(&resolved).is_none() {
                return Err("not a cleanup candidate: only paths inside a temp or cache directory, or rotated logs, are deleted".to_owned());
            }
            let mut budget = SCAN_BUDGET;
            if guard.tree_holds_protected(&resolved, &mut budget) {
                return Err(format!(
                    "{} (it holds protected paths or another filesystem)",
                    PathGuard::refusal(path)
                ));
            }
            let meta =
                std::fs::symlink_metadata(&resolved).map_err(|e| format!("cannot read it: {e}"))?;
            let mut budget = SCAN_BUDGET;
            let size = tree_size(&resolved, &mut budget);
            let removed = if meta.is_dir() {
                std::fs::remove_dir_all(&resolved)
            } else {
                std::fs::remove_file(&resolved)
            };
            removed.map_err(|e| format!("could not delete it: {e}"))?;
            Ok(size)
        })();
        match outcome {
            Ok(size) => {
                freed = freed.saturating_add(size);
                deleted.push(json!({ "path": path, "bytesFreed": size }));
            }
            Err(reason) => skipped.push(json!({ "path": path, "reason": reason })),
        }
    }
    json!({ "deleted": deleted, "skipped": skipped, "bytesFreed": freed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert_eq!(categorize(Path::new("/tmp/x")), Some(TEMP));
        assert_eq!(categorize(Path::new("/tmp")), None);
        assert_eq!(categorize(Path::new("/var/tmp/a/b")), Some(TEMP));
        assert_eq!(categorize(Path::new("/home/al/.cache/pip")), Some(CACHE));
        assert_eq!(categorize(Path::new("/home/al/.cache")), None);
        assert_eq!(categorize(Path::new("/root/.cache/x")), Some(CACHE));
        assert_eq!(
            categorize(Path::new("/var/cache/apt/archives/a.deb")),
            Some(CACHE)
        );
        assert_eq!(categorize(Path::new("/var/cache/apt/archives/lock")), None);
        assert_eq!(categorize(Path::new("/var/log/syslog.1")), Some(OLD_LOGS));
        assert_eq!(
            categorize(Path::new("/var/log/nginx/access.log.2.gz")),
            Some(OLD_LOGS)
        );
        assert_eq!(categorize(Path::new("/var/log/syslog")), None);
        assert_eq!(categorize(Path::new("/etc/passwd")), None);
    }
}
