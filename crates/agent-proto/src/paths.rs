//! Protected paths: the patterns no file or disk command may reach, and their lexical matcher.
//!
//! This is the one piece of behaviour in the wire crate, and it is here on purpose: the server
//! (a first, lexical wall in front of the queue, and the validation of an organization's
//! additions) and the agent (the final wall, which also resolves symlinks and checks what it
//! opens) must read a pattern the same way, and both already depend on this crate. It does no
//! IO.
//!
//! A pattern is an absolute path whose components may hold `*` (any run of characters within
//! one component; nothing else is special), or `~/…`, which means the same path under `/root`
//! and under every `/home/*`. A pattern protects the path it names and everything beneath it.
//! The built-in list is code, not data: an organization can add patterns, never remove one.

use std::path::{Path, PathBuf};

/// Longest path either side accepts (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest pattern an organization may add.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Most patterns one organization may add.
pub const MAX_ORG_PATTERNS: usize = 64;

/// What no Breeze tool may read, list, scan, write or delete on a device, whatever the
/// organization says. The agent adds its own config file, state and journal directories and
/// any directory it is told to protect at start (`--protect`; the demo protects its data
/// directory that way).
pub const BUILTIN_PROTECTED: &[&str] = &[
    // Password and group shadows, sudo policy, PAM's old passwords.
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers*",
    "/etc/security/opasswd",
    // Host keys, TLS and Kerberos keys, network secrets.
    "/etc/ssh/ssh_host_*_key",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/kubernetes",
    "/var/lib/kubelet/pki",
    "/run/secrets",
    "/var/run/secrets",
    // Breeze itself: the agent's system config and state, a server's data directory.
    "/etc/breeze-agent",
    "/var/lib/breeze-agent",
    "/etc/breeze",
    "/var/lib/breeze",
    // Users' keys and cloud, cluster and registry credentials.
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker/config.json",
    "~/.config/gcloud",
    "~/.config/breeze-agent",
    "~/.netrc",
    "~/.git-credentials",
    "~/.pgpass",
    // Other processes' environment, memory and open files; the kernel's memory.
    "/proc/*/environ",
    "/proc/*/mem",
    "/proc/*/fd",
    "/proc/*/map_files",
    "/proc/*/task/*/environ",
    "/proc/*/task/*/mem",
    "/proc/*/task/*/fd",
    "/proc/kcore",
];

/// Why a path or pattern was refused before any protection question arose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    Empty,
    Nul,
    NotAbsolute,
    TooLong,
    /// A pattern with a `.` or `..` component.
    DotComponent,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathError::Empty => "is empty",
            PathError::Nul => "contains a NUL byte",
            PathError::NotAbsolute => "is not an absolute path",
            PathError::TooLong => "is too long",
            PathError::DotComponent => "has a . or .. component",
        })
    }
}

impl std::error::Error for PathError {}

/// The sentence a caller sees when `path` is refused as protected. It names the path as the
/// caller gave it and nothing else: not the pattern, not what a link pointed to.
pub fn protected_message(path: &str) -> String {
    format!(
        "{path} is protected: Breeze tools may not reach credentials, keys or Breeze's own files"
    )
}

/// `path` with `.` and `..` resolved lexically and repeated slashes collapsed. Refuses empty,
/// NUL-holding, relative and over-long paths. `..` at the root stays at the root, as the kernel
/// does. This is not where symlinks are resolved; the agent also checks the resolved path.
pub fn normalize(path: &str) -> Result<PathBuf, PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = PathBuf::from("/");
    out.extend(parts);
    Ok(out)
}

/// One parsed pattern: its components, each a glob with `*` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Compared as is (a runtime path, where `*` is an ordinary character).
    Literal(String),
    Glob(String),
}

impl Part {
    fn matches(&self, name: &str) -> bool {
        match self {
            Part::Literal(l) => l == name,
            Part::Glob(g) => glob(g.as_bytes(), name.as_bytes()),
        }
    }
}

/// `*`-only glob over one component.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// A path's components as text. A name that is not UTF-8 compares with U+FFFD in place of its
/// bad bytes: a literal then never matches it by accident and a `*` still does, so the lossy
/// form can only protect more, never less.
fn names(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

impl Pattern {
    /// Parses one pattern (see the module docs). `~/x` yields two: `/root/x` and `/home/*/x`.
    pub fn parse(text: &str) -> Result<Vec<Pattern>, PathError> {
        if text.is_empty() {
            return Err(PathError::Empty);
        }
        if text.contains('\0') {
            return Err(PathError::Nul);
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        let (prefixes, rest): (&[&[&str]], &str) = match text.strip_prefix("~/") {
            Some(rest) => (&[&["root"], &["home", "*"]], rest),
            None if text.starts_with('/') => (&[&[]], text),
            None => return Err(PathError::NotAbsolute),
        };
        let mut tail = Vec::new();
        for part in rest.split('/') {
            match part {
                "" => {}
                "." | ".." => return Err(PathError::DotComponent),
                p => tail.push(Part::Glob(p.to_owned())),
            }
        }
        Ok(prefixes
            .iter()
            .map(|prefix| Pattern {
                parts: prefix
                    .iter()
                    .map(|p| Part::Glob((*p).to_owned()))
                    .chain(tail.iter().cloned())
                    .collect(),
            })
            .collect())
    }

    /// A pattern that is exactly `path` (already absolute and resolved), with no wildcards.
    pub fn literal(path: &Path) -> Pattern {
        Pattern {
            parts: names(path).into_iter().map(Part::Literal).collect(),
        }
    }

    /// Whether the pattern names `path` or one of its ancestors (so `path` is protected).
    fn covers(&self, path: &[String]) -> bool {
        !self.parts.is_empty()
            && path.len() >= self.parts.len()
            && self.parts.iter().zip(path).all(|(p, n)| p.matches(n))
    }

    /// Whether something the pattern names could lie strictly beneath `path`.
    fn beneath(&self, path: &[String]) -> bool {
        self.parts.len() > path.len() && self.parts.iter().zip(path).all(|(p, n)| p.matches(n))
    }

    /// The existing paths the pattern names, found by asking `list` for the names in a
    /// directory wherever a component has a `*` (the caller does the IO). `/proc` patterns
    /// answer nothing: their entries come and go with processes.
    pub fn expand(&self, list: &mut dyn FnMut(&Path) -> Vec<String>) -> Vec<PathBuf> {
        if matches!(self.parts.first(), Some(p) if p.matches("proc")) {
            return Vec::new();
        }
        let mut found = vec![PathBuf::from("/")];
        for part in &self.parts {
            let mut next = Vec::new();
            for dir in &found {
                match part {
                    Part::Literal(l) => next.push(dir.join(l)),
                    Part::Glob(g) if !g.contains('*') => next.push(dir.join(g)),
                    Part::Glob(_) => next.extend(
                        list(dir)
                            .into_iter()
                            .filter(|n| part.matches(n))
                            .map(|n| dir.join(n)),
                    ),
                }
            }
            found = next;
        }
        found
    }
}

/// Checks an organization's list of additional patterns: at most [`MAX_ORG_PATTERNS`], each
/// at most [`MAX_PATTERN_BYTES`] and parseable. Answers the list trimmed, without duplicates,
/// in the order given.
pub fn validate_additions(patterns: &[String]) -> Result<Vec<String>, String> {
    if patterns.len() > MAX_ORG_PATTERNS {
        return Err(format!("at most {MAX_ORG_PATTERNS} patterns"));
    }
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        let p = p.trim();
        if p.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "pattern {p:?} is longer than {MAX_PATTERN_BYTES} bytes"
            ));
        }
        Pattern::parse(p).map_err(|e| format!("pattern {p:?} {e}"))?;
        if p == "/" || p == "~/" {
            return Err(format!("pattern {p:?} would protect everything"));
        }
        if !out.iter().any(|q| q == p) {
            out.push(p.to_owned());
        }
    }
    Ok(out)
}

/// A set of patterns: the built-in list plus whatever was added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedSet {
    patterns: Vec<Pattern>,
}

impl Default for ProtectedSet {
    fn default() -> Self {
        Self::builtin()
    }
}

impl ProtectedSet {
    /// The built-in list, [`BUILTIN_PROTECTED`].
    pub fn builtin() -> ProtectedSet {
        let patterns = BUILTIN_PROTECTED
            .iter()
            .flat_map(|p| Pattern::parse(p).unwrap_or_default())
            .collect();
        ProtectedSet { patterns }
    }

    /// Adds patterns in text form; an unparseable one is refused whole, never skipped.
    pub fn with_additions(mut self, additions: &[String]) -> Result<ProtectedSet, String> {
        for a in additions {
            let parsed = Pattern::parse(a.trim()).map_err(|e| format!("pattern {a:?} {e}"))?;
            self.patterns.extend(parsed);
        }
        Ok(self)
    }

    /// Adds one parsed pattern.
    pub fn add(&mut self, pattern: Pattern) {
        self.patterns.push(pattern);
    }

    /// The patterns.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether the normalized absolute `path` is protected (named by a pattern or beneath one).
    pub fn protects(&self, path: &Path) -> bool {
        let names = names(path);
        self.patterns.iter().any(|p| p.covers(&names))
    }

    /// Whether a protected path could lie strictly beneath `path` (so deleting or moving the
    /// tree at `path` would reach it).
    pub fn may_hold_protected(&self, path: &Path) -> bool {
        let names = names(path);
        self.patterns.iter().any(|p| p.beneath(&names))
    }

    /// The lexical check: `path` normalized, then [`ProtectedSet::protects`].
    pub fn check_lexical(&self, path: &str) -> Result<PathBuf, LexicalRefusal> {
        let normal = normalize(path).map_err(LexicalRefusal::Invalid)?;
        if self.protects(&normal) {
            return Err(LexicalRefusal::Protected);
        }
        Ok(normal)
    }
}

/// Why [`ProtectedSet::check_lexical`] refused a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexicalRefusal {
    Invalid(PathError),
    Protected,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_defeats_spelling_tricks() {
        for (given, want) in [
            ("//etc/shadow", "/etc/shadow"),
            ("/etc/./shadow", "/etc/shadow"),
            ("/etc//shadow", "/etc/shadow"),
            ("/tmp/../etc/shadow", "/etc/shadow"),
            ("/../../etc/shadow/", "/etc/shadow"),
            ("/", "/"),
        ] {
            assert_eq!(normalize(given).unwrap(), PathBuf::from(want), "{given}");
        }
        assert_eq!(normalize(""), Err(PathError::Empty));
        assert_eq!(normalize("etc/shadow"), Err(PathError::NotAbsolute));
        assert_eq!(normalize("/etc/sha\0dow"), Err(PathError::Nul));
        assert_eq!(
            normalize(&format!("/{}", "a".repeat(MAX_PATH_BYTES))),
            Err(PathError::TooLong)
        );
    }

    #[test]
    fn the_builtin_list_covers_the_issue() {
        let set = ProtectedSet::builtin();
        for bad in [
            "/etc/shadow",
            "//etc/shadow",
            "/etc/./shadow",
            "/etc//shadow",
            "//proc/self/environ",
            "/proc/1/environ",
            "/proc/1/task/1/mem",
            "/etc/sudoers",
            "/etc/sudoers.d/90-cloud",
            "/etc/ssh/ssh_host_ed25519_key",
            "/root/.ssh/id_ed25519",
            "/home/alice/.ssh",
            "/home/alice/.aws/credentials",
            "/home/bob/.docker/config.json",
            "/root/.kube/config",
            "/etc/breeze-agent/agent.json",
        ] {
            assert_eq!(
                set.check_lexical(bad),
                Err(LexicalRefusal::Protected),
                "{bad}"
            );
        }
        for fine in [
            "/etc/passwd",
            "/etc/ssh/ssh_host_ed25519_key.pub",
            "/etc/ssh/sshd_config",
            "/home/alice/notes.txt",
            "/home/alice/.sshrc",
            "/proc/cpuinfo",
            "/proc/1/status",
            "/var/log/syslog",
            "/",
        ] {
            assert!(set.check_lexical(fine).is_ok(), "{fine}");
        }
        assert!(set.may_hold_protected(Path::new("/home/alice")));
        assert!(set.may_hold_protected(Path::new("/etc")));
        assert!(set.may_hold_protected(Path::new("/")));
        assert!(!set.may_hold_protected(Path::new("/var/log")));
    }

    #[test]
    fn globs_stay_within_a_component() {
        assert!(glob(b"ssh_host_*_key", b"ssh_host_rsa_key"));
        assert!(!glob(b"ssh_host_*_key", b"ssh_host_rsa_key.pub"));
        assert!(glob(b"*", b""));
        assert!(glob(b"a*b*c", b"aXbYbc"));
        assert!(!glob(b"a*b", b"a"));
        // `*` in a literal (runtime) pattern is an ordinary character.
        let p = Pattern::literal(Path::new("/srv/a*"));
        assert!(p.covers(&["srv".into(), "a*".into()]));
        assert!(!p.covers(&["srv".into(), "ab".into()]));
    }

    #[test]
    fn organization_additions_are_validated() {
        assert_eq!(
            validate_additions(&[" /srv/secrets ".into(), "/srv/secrets".into()]).unwrap(),
            vec!["/srv/secrets".to_owned()]
        );
        for bad in ["relative", "/a/../b", "/", "/x\0y", ""] {
            assert!(validate_additions(&[bad.into()]).is_err(), "{bad:?}");
        }
        let set = ProtectedSet::builtin()
            .with_additions(&["/srv/*/keys".into()])
            .unwrap();
        assert!(set.protects(Path::new("/srv/app/keys/k.pem")));
        assert!(set.protects(Path::new("/etc/shadow")), "built-ins stay");
    }
}
