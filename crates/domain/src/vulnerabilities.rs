//! Advisory import, the same from every door: OSV records read from a single `.json` record,
//! a directory of them, or the per-ecosystem `all.zip` archives osv.dev publishes, then loaded
//! with [`breeze_store::Store::import_advisories`] (idempotent on id and `modified`; the changed
//! records' exposure recomputed). The CLI (`breeze advisories import`) and the server's
//! scheduled refresh both come through here.
//!
//! Reading is bounded: a record larger than [`MAX_RECORD_BYTES`] or an archive of more than
//! [`MAX_ARCHIVE_ENTRIES`] entries is refused, so a hostile or broken archive cannot exhaust
//! memory. A record that does not parse is counted and named, and the rest still load.

use std::{
    io::{Cursor, Read as _},
    path::{Path, PathBuf},
};

use breeze_core::advisory::OsvRecord;
use breeze_store::{ImportOutcome, Store};

/// The largest single record read (osv.dev's largest are a few hundred kilobytes).
pub const MAX_RECORD_BYTES: u64 = 8 * 1024 * 1024;

/// The most entries an archive may hold (Debian's, the largest, has under 100,000).
pub const MAX_ARCHIVE_ENTRIES: usize = 500_000;

/// Why advisories could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A file or directory could not be read.
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    /// Not a zip archive, or one past the limits.
    #[error("{0}")]
    Archive(String),
}

/// Records read, and those refused (counted; the first few named).
#[derive(Debug, Default)]
pub struct Records {
    pub records: Vec<OsvRecord>,
    pub rejected: u64,
    pub rejections: Vec<String>,
}

impl Records {
    fn reject(&mut self, why: String) {
        self.rejected += 1;
        if self.rejections.len() < 20 {
            self.rejections.push(why);
        }
    }

    fn parse(&mut self, name: &str, text: &[u8]) {
        match std::str::from_utf8(text)
            .map_err(|e| e.to_string())
            .and_then(|t| OsvRecord::parse(t).map_err(|e| e.to_string()))
        {
            Ok(r) => self.records.push(r),
            Err(e) => self.reject(format!("{name}: {e}")),
        }
    }
}

/// Reads every `.json` entry of a zip archive (osv.dev's `all.zip`).
pub fn read_archive(bytes: &[u8]) -> Result<Records, ReadError> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| ReadError::Archive(format!("not a zip archive: {e}")))?;
    if zip.len() > MAX_ARCHIVE_ENTRIES {
        return Err(ReadError::Archive(format!(
            "the archive has {} entries, more than {MAX_ARCHIVE_ENTRIES}",
            zip.len()
        )));
    }
    let mut out = Records::default();
    let mut buf = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| ReadError::Archive(format!("archive entry {i}: {e}")))?;
        let name = entry
            .name()
            .map(|n| n.into_owned())
            .unwrap_or_else(|_| format!("entry {i}"));
        if entry.is_dir() || !name.ends_with(".json") {
            continue;
        }
        if entry.size() > MAX_RECORD_BYTES {
            out.reject(format!("{name}: larger than {MAX_RECORD_BYTES} bytes"));
            continue;
        }
        buf.clear();
        // The declared size is not trusted: reading stops past the limit.
        if let Err(e) = (&mut entry)
            .take(MAX_RECORD_BYTES + 1)
            .read_to_end(&mut buf)
        {
            out.reject(format!("{name}: {e}"));
            continue;
        }
        if buf.len() as u64 > MAX_RECORD_BYTES {
            out.reject(format!("{name}: larger than {MAX_RECORD_BYTES} bytes"));
            continue;
        }
        out.parse(&name, &buf);
    }
    Ok(out)
}

fn io(path: &Path, e: impl std::fmt::Display) -> ReadError {
    ReadError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// The files an import of `path` reads, in name order: the path itself, or a directory's
/// `.json` and `.zip` files (not descending into subdirectories).
pub fn files(path: &Path) -> Result<Vec<PathBuf>, ReadError> {
    let meta = std::fs::metadata(path).map_err(|e| io(path, e))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| io(path, e))? {
        let p = entry.map_err(|e| io(path, e))?.path();
        let wanted = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("json") || e.eq_ignore_ascii_case("zip"));
        if wanted && p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Reads one file: a zip archive (by content, whatever its name) or one JSON record.
pub fn read_file(path: &Path) -> Result<Records, ReadError> {
    let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
    read_bytes(&path.display().to_string(), &bytes).map_err(|e| io(path, e))
}

/// Reads what `name` (a file, a download) holds: a zip archive (by content, whatever its name)
/// or one JSON record.
pub fn read_bytes(name: &str, bytes: &[u8]) -> Result<Records, ReadError> {
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        return read_archive(bytes);
    }
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(ReadError::Archive(format!(
            "larger than {MAX_RECORD_BYTES} bytes and not a zip archive"
        )));
    }
    let mut out = Records::default();
    out.parse(name, bytes);
    Ok(out)
}

/// Loads what was read, adding the read's refusals to the outcome.
pub async fn import(store: &Store, read: Records) -> crate::Result<ImportOutcome> {
    let mut outcome = store.import_advisories(read.records).await?;
    outcome.rejected += read.rejected;
    let named = 20usize.saturating_sub(outcome.rejections.len());
    outcome
        .rejections
        .extend(read.rejections.into_iter().take(named));
    Ok(outcome)
}

/// Imports a file or a directory of them, one file at a time (so memory holds one archive).
pub async fn import_path(store: &Store, path: &Path) -> Result<ImportOutcome, ImportError> {
    let mut total = ImportOutcome::default();
    for file in files(path)? {
        let read = read_file(&file)?;
        let outcome = import(store, read).await?;
        merge(&mut total, outcome);
    }
    Ok(total)
}

/// Adds `more` to `total`.
pub fn merge(total: &mut ImportOutcome, more: ImportOutcome) {
    total.added += more.added;
    total.replaced += more.replaced;
    total.unchanged += more.unchanged;
    total.rejected += more.rejected;
    total.devices_recomputed += more.devices_recomputed;
    total.findings += more.findings;
    let named = 20usize.saturating_sub(total.rejections.len());
    total
        .rejections
        .extend(more.rejections.into_iter().take(named));
}

/// Why an import of files failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Records(#[from] ReadError),
    #[error(transparent)]
    Domain(#[from] crate::Error),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write as _;

    use super::*;

    const RECORD: &str = r#"{"id":"ALPINE-CVE-2023-38545","modified":"2024-09-03T05:10:21Z",
        "affected":[{"package":{"ecosystem":"Alpine:v3.18","name":"curl"},
        "ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"8.4.0-r0"}]}]}]}"#;

    /// A zip archive of `entries`, deflated as osv.dev's are.
    pub(crate) fn archive(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, text) in entries {
            w.start_file(*name, opts).unwrap();
            w.write_all(text.as_bytes()).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn archives_files_and_directories_read_alike() {
        let zip = archive(&[
            ("ALPINE-CVE-2023-38545.json", RECORD),
            ("broken.json", "{"),
            ("README.txt", "not a record"),
        ]);
        let read = read_archive(&zip).unwrap();
        assert_eq!(read.records.len(), 1);
        assert_eq!(read.rejected, 1);
        assert!(
            read.rejections[0].starts_with("broken.json: "),
            "{:?}",
            read.rejections
        );
        assert!(matches!(read_archive(b"nope"), Err(ReadError::Archive(_))));

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("all.zip"), &zip).unwrap();
        std::fs::write(dir.path().join("one.json"), RECORD).unwrap();
        std::fs::write(dir.path().join("notes.md"), "skip me").unwrap();
        let found = files(dir.path()).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(read_file(&found[0]).unwrap().records.len(), 1);
        assert_eq!(
            read_file(&found[1]).unwrap().records[0].id,
            "ALPINE-CVE-2023-38545"
        );
        let missing = files(&dir.path().join("absent")).unwrap_err();
        assert!(missing.to_string().contains("absent"), "{missing}");
    }

    /// What `breeze advisories import DIR` runs: an archive and a record loaded, then the
    /// same directory again changing nothing; a refused entry named.
    async fn a_directory_imports_once(cx: breeze_store::testing::Ctx) {
        let dir = tempfile::tempdir().unwrap();
        let other = RECORD.replace("ALPINE-CVE-2023-38545", "ALPINE-CVE-2023-38546");
        std::fs::write(
            dir.path().join("all.zip"),
            archive(&[("a.json", RECORD), ("bad.json", "[]")]),
        )
        .unwrap();
        std::fs::write(dir.path().join("b.json"), other).unwrap();
        let first = import_path(&cx.store, dir.path()).await.unwrap();
        assert_eq!((first.added, first.rejected), (2, 1), "{first:?}");
        assert!(first.rejections[0].starts_with("bad.json: "), "{first:?}");
        let again = import_path(&cx.store, dir.path()).await.unwrap();
        assert_eq!((again.added, again.unchanged), (0, 2), "{again:?}");
    }

    breeze_store::on_both_backends!(a_directory_imports_once);
}
