//! The agent's protected paths: the final wall in front of every file and disk command.
//!
//! The server checks paths too, but the agent runs as root and must refuse on its own whatever
//! a server (or anyone holding its socket) sends. The patterns are
//! [`breeze_agent_proto::paths::BUILTIN_PROTECTED`], the agent's own config file and state
//! directory (journal and scripts), any path given with `--protect`, and the organization's
//! additions carried by the command; nothing removes one.
//!
//! A path is checked three ways:
//! - as written, normalized lexically (`//etc/./shadow` is `/etc/shadow`), refusing relative
//!   paths and NUL bytes;
//! - resolved (`canonicalize`: every symlink followed; for a path that does not exist yet, its
//!   deepest existing ancestor resolved and the rest appended), so a link to `/etc/shadow` or
//!   `/proc/self/environ` is seen for what it is. Operations on a name itself (delete, rename,
//!   mkdir, cleanup) resolve only the parent, so deleting a link deletes the link;
//! - by identity: the device and inode of everything the patterns name, so a bind mount or a
//!   hard link of a protected file or directory is refused under any name.
//!
//! Files are then opened from `/` one component at a time with `O_NOFOLLOW` (the resolved path
//! has no links, so a link found on the way means someone swapped one in: refused), checking
//! each directory's identity again on the open descriptor. What is read is what was checked.
//! A `/proc` file reached outside `/proc` (a bind mount of one) is refused too.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use breeze_agent_proto::paths::{LexicalRefusal, Pattern, ProtectedSet, protected_message};

/// The agent's own protected paths, fixed at start.
#[derive(Debug, Clone)]
pub struct Protection {
    base: ProtectedSet,
}

impl Default for Protection {
    fn default() -> Self {
        Protection {
            base: ProtectedSet::builtin(),
        }
    }
}

impl Protection {
    /// The built-in list plus `own` (the agent's config file, state directory, `--protect`
    /// paths), each protected both as written and resolved.
    pub fn new(own: &[PathBuf]) -> Protection {
        let mut base = ProtectedSet::builtin();
        for p in own {
            let absolute = if p.is_absolute() {
                p.clone()
            } else {
                std::path::absolute(p).unwrap_or_else(|_| p.clone())
            };
            if let Ok(normal) = breeze_agent_proto::paths::normalize(&absolute.to_string_lossy()) {
                base.add(Pattern::literal(&normal));
            }
            if let Ok(resolved) = std::fs::canonicalize(&absolute) {
                base.add(Pattern::literal(&resolved));
            }
        }
        Protection { base }
    }

    /// Also protects what `patterns` name (glob patterns, see
    /// [`breeze_agent_proto::paths`]); one that does not parse is left out with a warning.
    #[must_use]
    pub fn with_patterns(mut self, patterns: &[String]) -> Protection {
        for p in patterns {
            match Pattern::parse(p) {
                Ok(parsed) => parsed.into_iter().for_each(|q| self.base.add(q)),
                Err(e) => tracing::warn!(pattern = %p, error = %e, "not a protected-path pattern"),
            }
        }
        self
    }

    /// The guard for one command: this list plus the organization's `additions`. An addition
    /// that does not parse fails the command rather than being skipped.
    pub fn for_command(&self, additions: &[String]) -> Result<PathGuard, String> {
        let set = self
            .base
            .clone()
            .with_additions(additions)
            .map_err(|e| format!("the organization's protected paths are invalid: {e}"))?;
        let mut ids = HashSet::new();
        let mut named = Vec::new();
        // Wildcards are expanded by listing directories; an organization's `/*/*/*` must not
        // make every command list the disk. Past this many names the identity check knows
        // less (the name and resolved-path checks are whole regardless).
        let mut budget = EXPANSION_BUDGET;
        for pattern in set.patterns() {
            let mut list = |dir: &Path| -> Vec<String> {
                if budget == 0 {
                    return Vec::new();
                }
                let names: Vec<String> = std::fs::read_dir(dir)
                    .map(|entries| {
                        entries
                            .filter_map(Result::ok)
                            .take(budget)
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                budget -= names.len();
                names
            };
            for path in pattern.expand(&mut list) {
                // Followed: a protected name that is a link protects what it points to.
                if let Ok(meta) = std::fs::metadata(&path) {
                    ids.insert(identity(&meta));
                }
                if let Ok(meta) = std::fs::symlink_metadata(&path) {
                    ids.insert(identity(&meta));
                    named.push(path);
                }
            }
        }
        Ok(PathGuard { set, ids, named })
    }
}

/// How much of a path to resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// Every link, the last component's too (read, list, scan).
    Follow,
    /// The parent's links; the last component is the name acted on (delete, rename, mkdir).
    Parent,
}

/// One command's view of the protected paths.
#[derive(Debug)]
pub struct PathGuard {
    set: ProtectedSet,
    ids: HashSet<(u64, u64)>,
    /// The existing paths the patterns name, for the hard-link check.
    named: Vec<PathBuf>,
}

/// Most names one command's pattern expansion lists.
const EXPANSION_BUDGET: usize = 20_000;

/// Most entries the hard-link check visits inside the protected trees before it gives up and
/// refuses.
const HARD_LINK_BUDGET: u64 = 50_000;

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(_meta: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

fn io_why(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    }
}

impl PathGuard {
    /// The refusal for `given`.
    pub fn refusal(given: &str) -> String {
        protected_message(given)
    }

    /// Checks `given` and answers the resolved path to act on.
    pub fn resolve(&self, given: &str, how: Resolve) -> Result<PathBuf, String> {
        match self.set.check_lexical(given) {
            Ok(_) => {}
            Err(LexicalRefusal::Invalid(e)) => return Err(format!("path {given:?} {e}")),
            Err(LexicalRefusal::Protected) => return Err(protected_message(given)),
        }
        let original = Path::new(given);
        let resolved = match how {
            Resolve::Follow => resolve_existing_prefix(original)
                .map_err(|e| format!("cannot resolve {given}: {e}"))?,
            Resolve::Parent => {
                let name = match original.components().next_back() {
                    Some(Component::Normal(name)) => name.to_owned(),
                    _ => return Err(format!("path {given:?} does not name a file or directory")),
                };
                let parent = original
                    .parent()
                    .ok_or_else(|| format!("path {given:?} has no parent directory"))?;
                resolve_existing_prefix(parent)
                    .map_err(|e| format!("cannot resolve {given}: {e}"))?
                    .join(name)
            }
        };
        if self.set.protects(&resolved) || self.hits_identity(&resolved, how) {
            return Err(protected_message(given));
        }
        Ok(resolved)
    }

    /// Whether the resolved `path` or an ancestor is protected by identity (a bind mount or a
    /// hard link of something the patterns name). The last component is not followed for
    /// [`Resolve::Parent`].
    fn hits_identity(&self, path: &Path, how: Resolve) -> bool {
        let mut prefix = PathBuf::new();
        let count = path.components().count();
        for (i, c) in path.components().enumerate() {
            prefix.push(c);
            let meta = if i + 1 == count && how == Resolve::Parent {
                std::fs::symlink_metadata(&prefix)
            } else {
                std::fs::metadata(&prefix)
            };
            match meta {
                Ok(m) if self.ids.contains(&identity(&m)) => return true,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        false
    }

    /// Whether the regular file `meta` describes is also a protected file under another name
    /// (a hard link: a file with more than one link whose inode is in a protected tree).
    /// Only files with several links are looked for, so this costs nothing in the usual case;
    /// when the protected trees are too large to search, the answer is yes.
    fn is_hard_link_of_protected(&self, meta: &std::fs::Metadata) -> bool {
        if links(meta) <= 1 || !meta.is_file() {
            return false;
        }
        let wanted = identity(meta);
        let mut budget = HARD_LINK_BUDGET;
        self.named
            .iter()
            .any(|root| holds_inode(root, wanted, &mut budget))
    }

    /// Whether an entry found while walking a resolved tree (`path`, its metadata not
    /// followed) must be left alone: protected by name or by identity.
    pub fn skips(&self, path: &Path, meta: &std::fs::Metadata) -> bool {
        self.set.protects(path) || self.ids.contains(&identity(meta))
    }

    /// Whether deleting or moving the tree at the resolved `path` could reach a protected
    /// path: one the patterns could name beneath it, a protected identity inside it (a bind
    /// mount or hard link), or another filesystem mounted inside it. Walks at most `budget`
    /// entries and says "could" when that is not enough to know.
    pub fn tree_holds_protected(&self, path: &Path, budget: &mut u64) -> bool {
        if self.set.may_hold_protected(path) {
            return true;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return false;
        };
        self.tree_walk(path, &meta, device(&meta), budget)
    }

    fn tree_walk(&self, path: &Path, meta: &std::fs::Metadata, dev: u64, budget: &mut u64) -> bool {
        if *budget == 0 {
            return true;
        }
        *budget -= 1;
        if self.skips(path, meta) {
            return true;
        }
        if !meta.is_dir() {
            return false;
        }
        if device(meta) != dev {
            // Another filesystem (or a bind mount of one) inside the tree.
            return true;
        }
        let Ok(entries) = std::fs::read_dir(path) else {
            return true;
        };
        for entry in entries {
            let Ok(entry) = entry else {
                return true;
            };
            let child = entry.path();
            let Ok(m) = std::fs::symlink_metadata(&child) else {
                return true;
            };
            if self.tree_walk(&child, &m, dev, budget) {
                return true;
            }
        }
        false
    }

    /// Opens the resolved regular file `path` for reading (see the module docs).
    pub fn open_read(&self, given: &str, path: &Path) -> Result<File, String> {
        let file = self.walk(given, path, Last::Read)?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read {given}: {}", io_why(&e)))?;
        if meta.is_dir() {
            return Err(format!("cannot read {given}: it is a directory"));
        }
        if !meta.is_file() {
            return Err(format!(
                "cannot read {given}: it is not a regular file (devices, sockets and pipes are not read)"
            ));
        }
        if self.is_hard_link_of_protected(&meta) {
            return Err(protected_message(given));
        }
        Ok(file)
    }

    /// Opens the resolved directory `path` for listing.
    pub fn open_dir(&self, given: &str, path: &Path) -> Result<File, String> {
        self.walk(given, path, Last::Dir)
    }

    /// Opens the resolved directory `dir` as a handle to create names in.
    pub fn open_parent(&self, given: &str, dir: &Path) -> Result<File, String> {
        self.walk(given, dir, Last::Parent)
    }
}

/// Whether the tree at `path` (links not followed) holds a file with identity `wanted`; also
/// true once `budget` runs out.
fn holds_inode(path: &Path, wanted: (u64, u64), budget: &mut u64) -> bool {
    if *budget == 0 {
        return true;
    }
    *budget -= 1;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if identity(&meta) == wanted {
        return true;
    }
    if !meta.is_dir() {
        return false;
    }
    std::fs::read_dir(path).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| holds_inode(&e.path(), wanted, budget))
    })
}

#[cfg(unix)]
fn links(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.nlink()
}

#[cfg(not(unix))]
fn links(_meta: &std::fs::Metadata) -> u64 {
    1
}

#[cfg(unix)]
fn device(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.dev()
}

#[cfg(not(unix))]
fn device(_meta: &std::fs::Metadata) -> u64 {
    0
}

/// `path` resolved as the kernel would, when it exists; otherwise its deepest existing
/// ancestor resolved and the rest appended (which may then hold no `..`).
fn resolve_existing_prefix(path: &Path) -> std::io::Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(p) => return Ok(p),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let parts: Vec<Component<'_>> = path.components().collect();
    for keep in (1..parts.len()).rev() {
        let prefix: PathBuf = parts[..keep].iter().collect();
        let Ok(base) = std::fs::canonicalize(&prefix) else {
            continue;
        };
        let mut out = base;
        for c in &parts[keep..] {
            match c {
                Component::Normal(n) => out.push(n),
                Component::CurDir => {}
                _ => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no such file or directory",
                    ));
                }
            }
        }
        return Ok(out);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "no such file or directory",
    ))
}

/// What the last component of a walk is opened as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Read,
    Dir,
    Parent,
}

#[cfg(unix)]
impl PathGuard {
    /// Opens `path` (resolved: no links) from `/`, one component at a time, never following a
    /// link, checking each step's identity.
    fn walk(&self, given: &str, path: &Path, last: Last) -> Result<File, String> {
        use nix::fcntl::{OFlag, open, openat};
        use nix::sys::stat::Mode;

        #[cfg(target_os = "linux")]
        let traverse = OFlag::O_PATH | OFlag::O_DIRECTORY;
        #[cfg(not(target_os = "linux"))]
        let traverse = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        let final_flags = match last {
            // Non-blocking: opening a FIFO must not hang; regular files ignore it.
            Last::Read => OFlag::O_RDONLY | OFlag::O_NONBLOCK,
            Last::Dir => OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Last::Parent => traverse,
        };
        let fail = |e: nix::errno::Errno| -> String {
            match e {
                nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => format!(
                    "cannot open {given}: it changed while being opened (a symbolic link appeared on the way); refused"
                ),
                other => format!(
                    "cannot open {given}: {}",
                    io_why(&std::io::Error::from(other))
                ),
            }
        };
        let names: Vec<&std::ffi::OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        let first = if names.is_empty() {
            final_flags
        } else {
            traverse
        };
        let mut current =
            File::from(open("/", first | OFlag::O_CLOEXEC, Mode::empty()).map_err(fail)?);
        for (i, name) in names.iter().enumerate() {
            let flags = if i + 1 == names.len() {
                final_flags
            } else {
                traverse
            };
            let fd = openat(
                &current,
                *name,
                flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(fail)?;
            let file = File::from(fd);
            let meta = file
                .metadata()
                .map_err(|e| format!("cannot open {given}: {}", io_why(&e)))?;
            if self.ids.contains(&identity(&meta)) {
                return Err(protected_message(given));
            }
            current = file;
        }
        #[cfg(target_os = "linux")]
        if !path.starts_with("/proc")
            && nix::sys::statfs::fstatfs(&current)
                .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
        {
            return Err(protected_message(given));
        }
        Ok(current)
    }

    /// Creates (or truncates) `name` in the directory `dir` opened by [`PathGuard::open_parent`],
    /// never through a link.
    pub fn create_in(
        &self,
        given: &str,
        dir: &File,
        _dir_path: &Path,
        name: &std::ffi::OsStr,
    ) -> Result<File, String> {
        use nix::fcntl::{OFlag, openat};
        use nix::sys::stat::Mode;
        let fd = openat(
            dir,
            name,
            // Not O_TRUNC: the file is emptied only once it is known not to be protected.
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC
                | OFlag::O_NONBLOCK,
            Mode::from_bits_truncate(0o666),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ELOOP => {
                format!("cannot write {given}: it is a symbolic link; write to its target instead")
            }
            other => format!(
                "cannot write {given}: {}",
                io_why(&std::io::Error::from(other))
            ),
        })?;
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot write {given}: {}", io_why(&e)))?;
        if self.ids.contains(&identity(&meta)) {
            return Err(protected_message(given));
        }
        if !meta.is_file() {
            return Err(format!("cannot write {given}: it is not a regular file"));
        }
        if self.is_hard_link_of_protected(&meta) {
            return Err(protected_message(given));
        }
        file.set_len(0)
            .map_err(|e| format!("cannot write {given}: {}", io_why(&e)))?;
        Ok(file)
    }
}

#[cfg(not(unix))]
impl PathGuard {
    fn walk(&self, given: &str, path: &Path, _last: Last) -> Result<File, String> {
        File::open(path).map_err(|e| format!("cannot open {given}: {}", io_why(&e)))
    }

    /// Creates (or truncates) `name` in `dir`.
    pub fn create_in(
        &self,
        given: &str,
        _dir: &File,
        dir_path: &Path,
        name: &std::ffi::OsStr,
    ) -> Result<File, String> {
        File::create(dir_path.join(name))
            .map_err(|e| format!("cannot write {given}: {}", io_why(&e)))
    }
}
