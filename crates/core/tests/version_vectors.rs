//! The ecosystems' published version-comparison vectors, kept as data beside this file
//! (`data/versions/`: dpkg's `Dpkg_Version.t` and `t-version.c`, rpm's `rpmvercmp.at`,
//! apk-tools' `version.data`), run against Breeze's orderings. Every comparison is checked
//! both ways round.

use std::cmp::Ordering;

use breeze_core::compliance::rpmvercmp;
use breeze_core::pkgversion::{VersionOrder, apk_compare};

/// `(a, b, expected)` from lines of `a b -1|0|1`.
fn numeric(text: &str) -> Vec<(String, String, Ordering)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "bad vector line {l:?}");
            let want = match f[2] {
                "-1" => Ordering::Less,
                "0" => Ordering::Equal,
                "1" => Ordering::Greater,
                other => panic!("bad expectation {other:?}"),
            };
            (f[0].to_owned(), f[1].to_owned(), want)
        })
        .collect()
}

fn check(name: &str, cases: &[(String, String, Ordering)], cmp: impl Fn(&str, &str) -> Ordering) {
    assert!(!cases.is_empty());
    let mut failures = Vec::new();
    for (a, b, want) in cases {
        let got = cmp(a, b);
        let back = cmp(b, a);
        if got != *want || back != want.reverse() {
            failures.push(format!(
                "{a} vs {b}: want {want:?}, got {got:?} (reverse {back:?})"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn dpkg_published_vectors() {
    let cases = numeric(include_str!("data/versions/dpkg.txt"));
    assert!(cases.len() >= 50);
    check("dpkg", &cases, |a, b| VersionOrder::Dpkg.compare(a, b));
}

#[test]
fn rpm_published_vectors() {
    let cases = numeric(include_str!("data/versions/rpm.txt"));
    assert!(cases.len() >= 60);
    check("rpmvercmp", &cases, rpmvercmp);
    // The same fields as whole versions (no release) order alike through the EVR comparison.
    check("rpm evr", &cases, |a, b| VersionOrder::Rpm.compare(a, b));
}

#[test]
fn apk_published_vectors() {
    let cases: Vec<(String, String, Ordering)> = include_str!("data/versions/apk.txt")
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "bad vector line {l:?}");
            let want = match f[1] {
                "<" => Ordering::Less,
                "=" => Ordering::Equal,
                ">" => Ordering::Greater,
                other => panic!("bad operator {other:?}"),
            };
            (f[0].to_owned(), f[2].to_owned(), want)
        })
        .collect();
    assert!(cases.len() >= 700);
    check("apk", &cases, apk_compare);
    check("apk via ecosystem", &cases, |a, b| {
        VersionOrder::for_ecosystem("Alpine:v3.20").map_or(Ordering::Equal, |o| o.compare(a, b))
    });
}
