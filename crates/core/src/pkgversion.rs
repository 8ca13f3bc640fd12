//! Package version ordering per ecosystem, for matching installed packages to advisories.
//!
//! An advisory's "fixed in V" means something only under the ecosystem's own ordering: dpkg's
//! for Debian and Ubuntu (epoch, upstream, revision; `~` before everything), rpm's for Red
//! Hat, Rocky and Alma (epoch:version-release, `rpmvercmp`), and apk's for Alpine (Gentoo-style
//! `digits.letter_suffix-rN`). dpkg and rpm are the ones compliance rules already use
//! ([`crate::compliance::deb_compare`], [`crate::compliance::rpm_evr_compare`]); apk's is here.
//! Each passes the ecosystem's own published test vectors (`tests/version_vectors.rs`).

use std::cmp::Ordering;

use crate::compliance::{deb_compare, rpm_evr_compare};

/// Which package manager's ordering applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VersionOrder {
    /// dpkg: Debian, Ubuntu.
    Dpkg,
    /// rpm: Red Hat, Rocky Linux, AlmaLinux.
    Rpm,
    /// apk: Alpine.
    Apk,
}

impl VersionOrder {
    /// The ordering of an OSV ecosystem name (`Debian:12`, `Ubuntu:22.04:LTS`, `Alpine:v3.19`,
    /// `Rocky Linux:9`, `AlmaLinux:9`, `Red Hat:enterprise_linux:9::baseos`); `None` for an
    /// ecosystem whose versions Breeze does not order.
    pub fn for_ecosystem(ecosystem: &str) -> Option<VersionOrder> {
        let base = ecosystem.split(':').next().unwrap_or_default().trim();
        match base {
            "Debian" | "Ubuntu" => Some(VersionOrder::Dpkg),
            "Alpine" => Some(VersionOrder::Apk),
            "Rocky Linux" | "AlmaLinux" | "Red Hat" | "RHEL" => Some(VersionOrder::Rpm),
            _ => None,
        }
    }

    /// Compares two versions.
    pub fn compare(self, a: &str, b: &str) -> Ordering {
        match self {
            VersionOrder::Dpkg => deb_compare(a, b),
            VersionOrder::Rpm => rpm_evr_compare(a, b),
            VersionOrder::Apk => apk_compare(a, b),
        }
    }
}

// apk's tokens, in the order the grammar allows them to follow each other.
const INVALID: i8 = -1;
const DIGIT_OR_ZERO: i8 = 0;
const DIGIT: i8 = 1;
const LETTER: i8 = 2;
const SUFFIX: i8 = 3;
const SUFFIX_NO: i8 = 4;
const REVISION_NO: i8 = 5;
const END: i8 = 6;

/// Pre-release suffixes (below the bare version), in order.
const PRE_SUFFIXES: [&str; 4] = ["alpha", "beta", "pre", "rc"];
/// Post-release suffixes (above it), in order.
const POST_SUFFIXES: [&str; 5] = ["cvs", "svn", "git", "hg", "p"];

/// A cursor over an apk version: the rest of the text and the kind of token it starts with.
struct ApkTokens<'a> {
    rest: &'a [u8],
    kind: i8,
}

impl ApkTokens<'_> {
    /// Reads the separator at the cursor and decides the next token's kind.
    fn advance_kind(&mut self) {
        let prev = self.kind;
        let mut next = INVALID;
        match self.rest.first() {
            None | Some(0) => next = END,
            Some(c) if (prev == DIGIT || prev == DIGIT_OR_ZERO) && c.is_ascii_lowercase() => {
                next = LETTER;
            }
            Some(c) if prev == LETTER && c.is_ascii_digit() => next = DIGIT,
            Some(c) if prev == SUFFIX && c.is_ascii_digit() => next = SUFFIX_NO,
            Some(c) => {
                match c {
                    b'.' => next = DIGIT_OR_ZERO,
                    b'_' => next = SUFFIX,
                    b'-' if self.rest.get(1) == Some(&b'r') => {
                        next = REVISION_NO;
                        self.rest = &self.rest[1..];
                    }
                    _ => {}
                }
                self.rest = &self.rest[1..];
            }
        }
        // A token may only go forward in the grammar, with three exceptions.
        if next < prev
            && !((next == DIGIT_OR_ZERO && prev == DIGIT)
                || (next == SUFFIX && prev == SUFFIX_NO)
                || (next == DIGIT && prev == LETTER))
        {
            next = INVALID;
        }
        self.kind = next;
    }

    /// The value of the token at the cursor, moving past it.
    fn value(&mut self) -> i64 {
        if self.rest.is_empty() {
            self.kind = END;
            return 0;
        }
        let (v, used, forced);
        let digits = |s: &[u8], from: usize| -> (i64, usize) {
            let mut v: i64 = 0;
            let mut i = from;
            while i < s.len() && s[i].is_ascii_digit() {
                v = v.saturating_mul(10).saturating_add(i64::from(s[i] - b'0'));
                i += 1;
            }
            (v, i)
        };
        match self.kind {
            DIGIT_OR_ZERO if self.rest[0] == b'0' => {
                // Leading zeros after a dot: the more of them, the lower.
                used = self.rest.iter().take_while(|c| **c == b'0').count();
                v = -(used as i64);
                forced = Some(DIGIT);
            }
            DIGIT_OR_ZERO | DIGIT | SUFFIX_NO | REVISION_NO => {
                (v, used) = digits(self.rest, 0);
                forced = None;
            }
            LETTER => {
                v = i64::from(self.rest[0]);
                used = 1;
                forced = None;
            }
            SUFFIX => {
                let found = PRE_SUFFIXES
                    .iter()
                    .position(|s| self.rest.starts_with(s.as_bytes()))
                    .map(|i| (i as i64 - PRE_SUFFIXES.len() as i64, PRE_SUFFIXES[i].len()))
                    .or_else(|| {
                        POST_SUFFIXES
                            .iter()
                            .position(|s| self.rest.starts_with(s.as_bytes()))
                            .map(|i| (i as i64, POST_SUFFIXES[i].len()))
                    });
                match found {
                    Some((value, len)) => {
                        v = value;
                        used = len;
                        forced = None;
                    }
                    None => {
                        self.kind = INVALID;
                        return -1;
                    }
                }
            }
            _ => {
                self.kind = INVALID;
                return -1;
            }
        }
        self.rest = &self.rest[used..];
        if self.rest.is_empty() {
            self.kind = END;
        } else if let Some(kind) = forced {
            self.kind = kind;
        } else {
            self.advance_kind();
        }
        v
    }
}

/// apk's version comparison (apk-tools' ordering of Gentoo-style versions).
pub fn apk_compare(a: &str, b: &str) -> Ordering {
    let mut ta = ApkTokens {
        rest: a.trim().as_bytes(),
        kind: DIGIT,
    };
    let mut tb = ApkTokens {
        rest: b.trim().as_bytes(),
        kind: DIGIT,
    };
    let (mut av, mut bv) = (0i64, 0i64);
    while ta.kind == tb.kind && ta.kind != END && ta.kind != INVALID && av == bv {
        av = ta.value();
        bv = tb.value();
    }
    match av.cmp(&bv) {
        Ordering::Equal => {}
        other => return other,
    }
    if ta.kind == tb.kind {
        return Ordering::Equal;
    }
    // Equal so far: the longer one is newer unless what follows is a pre-release suffix.
    if ta.kind == SUFFIX {
        let mut peek = ApkTokens {
            rest: ta.rest,
            kind: SUFFIX,
        };
        if peek.value() < 0 {
            return Ordering::Less;
        }
    }
    if tb.kind == SUFFIX {
        let mut peek = ApkTokens {
            rest: tb.rest,
            kind: SUFFIX,
        };
        if peek.value() < 0 {
            return Ordering::Greater;
        }
    }
    tb.kind.cmp(&ta.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecosystems_choose_their_ordering() {
        assert_eq!(
            VersionOrder::for_ecosystem("Debian:12"),
            Some(VersionOrder::Dpkg)
        );
        assert_eq!(
            VersionOrder::for_ecosystem("Ubuntu:22.04:LTS"),
            Some(VersionOrder::Dpkg)
        );
        assert_eq!(
            VersionOrder::for_ecosystem("Alpine:v3.19"),
            Some(VersionOrder::Apk)
        );
        assert_eq!(
            VersionOrder::for_ecosystem("Rocky Linux:9"),
            Some(VersionOrder::Rpm)
        );
        assert_eq!(
            VersionOrder::for_ecosystem("AlmaLinux:8"),
            Some(VersionOrder::Rpm)
        );
        assert_eq!(VersionOrder::for_ecosystem("PyPI"), None);
    }

    #[test]
    fn apk_basics() {
        assert_eq!(apk_compare("1.2.3-r1", "1.2.3-r0"), Ordering::Greater);
        assert_eq!(apk_compare("3.1.4-r0", "3.1.4_rc1-r0"), Ordering::Greater);
        assert_eq!(apk_compare("1.0_p1", "1.0"), Ordering::Greater);
        assert_eq!(apk_compare("1.0", "1.0"), Ordering::Equal);
    }
}
