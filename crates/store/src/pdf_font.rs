//! The TrueType font PDF reports embed, so text beyond Latin-1 (Cyrillic, Greek, accents of
//! every kind) prints and can be searched and copied.
//!
//! Which font: the file `BREEZE_PDF_FONT` names (read by breeze-cli into
//! [`StoreOptions::pdf_font`](crate::StoreOptions); a file that cannot be used fails the
//! store's opening, as a wrong setting should), else the first of [`WELL_KNOWN_FONTS`] that
//! loads (probed once per process, on the first PDF). With neither, reports are set in the
//! standard Helvetica as before, characters beyond Latin-1 as `?`, and the report says so.
//!
//! The whole font file is embedded (FontFile2), compressed once when it is loaded: DejaVu Sans
//! Condensed is 667 KiB, about 360 KiB deflated, added to each PDF report. Subsetting would shrink that
//! but needs the glyphs a report uses, known only at its end, and a rewrite of the glyph
//! tables; not worth it at reports' sizes (a 10,000-device inventory is ~5 MiB of pages).
//! Only TrueType outlines (`glyf`) can be embedded this way; a CFF-flavoured OpenType font is
//! refused, as is one whose licence forbids embedding.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
};

use crate::{Result, StoreError};

/// Where a Unicode font is looked for when none is configured, in order: DejaVu Sans
/// Condensed (about as wide as Helvetica, so a UUID still fits its column) and DejaVu Sans
/// where Debian, Ubuntu, Fedora, Arch and Alpine put them, then Liberation Sans and Noto Sans.
pub const WELL_KNOWN_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSansCondensed.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSansCondensed.ttf",
    "/usr/share/fonts/dejavu/DejaVuSansCondensed.ttf",
    "/usr/share/fonts/TTF/DejaVuSansCondensed.ttf",
    "/usr/share/fonts/ttf-dejavu/DejaVuSansCondensed.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/ttf-dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
];

/// A loaded TrueType font, ready to embed.
pub struct PdfFont {
    /// The file it came from (for logs).
    pub path: PathBuf,
    /// Its PostScript name, as PDF names it (`/BaseFont`).
    pub(crate) name: String,
    /// The font file, parsed again (cheaply) for each character a document meets first.
    data: Vec<u8>,
    /// The font file deflated, as the FontFile2 stream carries it.
    pub(crate) deflated: Vec<u8>,
    units_per_em: f64,
    /// Metrics in 1/1000 em, for the font descriptor.
    pub(crate) ascent: i32,
    pub(crate) descent: i32,
    pub(crate) cap_height: i32,
    pub(crate) bbox: [i32; 4],
    pub(crate) italic_angle: f32,
}

impl std::fmt::Debug for PdfFont {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PdfFont")
            .field("path", &self.path)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn refuse(path: &Path, why: impl std::fmt::Display) -> StoreError {
    StoreError::Config(format!(
        "BREEZE_PDF_FONT: cannot use {} for PDF reports: {why}",
        path.display()
    ))
}

impl PdfFont {
    /// Reads and checks the TrueType font at `path`.
    pub fn load(path: &Path) -> Result<PdfFont> {
        let data = std::fs::read(path).map_err(|e| refuse(path, e))?;
        let face = ttf_parser::Face::parse(&data, 0).map_err(|e| refuse(path, e))?;
        if face.tables().glyf.is_none() {
            return Err(refuse(path, "it has no TrueType outlines (glyf table)"));
        }
        if face.permissions() == Some(ttf_parser::Permissions::Restricted) {
            return Err(refuse(path, "its licence forbids embedding it"));
        }
        let units_per_em = f64::from(face.units_per_em().max(1));
        let em = |v: i16| (f64::from(v) * 1000.0 / units_per_em).round() as i32;
        let name = face
            .names()
            .into_iter()
            .filter(|n| n.name_id == ttf_parser::name_id::POST_SCRIPT_NAME)
            .find_map(|n| n.to_string())
            .unwrap_or_else(|| "Embedded".into());
        // A PDF name: printable ASCII without delimiters (a PostScript name is, normally).
        let name: String = name
            .chars()
            .filter(|c| c.is_ascii_graphic() && !"()<>[]{}/%#".contains(*c))
            .collect();
        let b = face.global_bounding_box();
        let ascent = em(face.ascender());
        let (descent, cap_height, italic_angle) = (
            em(face.descender()),
            face.capital_height().map_or(ascent, em),
            face.italic_angle(),
        );
        let bbox = [em(b.x_min), em(b.y_min), em(b.x_max), em(b.y_max)];
        let deflated = deflate(&data).map_err(|e| refuse(path, e))?;
        Ok(PdfFont {
            path: path.to_owned(),
            name: if name.is_empty() {
                "Embedded".into()
            } else {
                name
            },
            data,
            deflated,
            units_per_em,
            ascent,
            descent,
            cap_height,
            bbox,
            italic_angle,
        })
    }

    /// The length of the font file (FontFile2's `/Length1`).
    pub(crate) fn file_len(&self) -> usize {
        self.data.len()
    }

    /// `c`'s glyph and its advance width in 1/1000 em; glyph 0 (`.notdef`, an empty box) when
    /// the font has no glyph for it.
    pub(crate) fn glyph(&self, c: char) -> (u16, u16) {
        // Parsed when loaded: it parses again.
        let Ok(face) = ttf_parser::Face::parse(&self.data, 0) else {
            return (0, 0);
        };
        let id = face.glyph_index(c).unwrap_or(ttf_parser::GlyphId(0));
        let advance = face.glyph_hor_advance(id).unwrap_or(0);
        let width = (f64::from(advance) * 1000.0 / self.units_per_em).round();
        (id.0, width.clamp(0.0, f64::from(u16::MAX)) as u16)
    }
}

fn deflate(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(data)?;
    z.finish()
}

/// Which font a store's PDF reports use.
#[derive(Clone, Debug)]
pub(crate) enum FontChoice {
    /// The configured font, loaded when the store opened.
    Configured(Arc<PdfFont>),
    /// The first of [`WELL_KNOWN_FONTS`] that loads, if any.
    Probe,
}

impl FontChoice {
    /// The configured font (loaded now: a file that cannot be used is an error), or probing.
    pub(crate) fn new(configured: Option<&Path>) -> Result<Self> {
        Ok(match configured {
            Some(path) => {
                let font = PdfFont::load(path)?;
                tracing::info!(font = %path.display(), "PDF reports embed this font");
                FontChoice::Configured(Arc::new(font))
            }
            None => FontChoice::Probe,
        })
    }

    /// The font to embed, or `None` for Helvetica.
    pub(crate) fn font(&self) -> Option<Arc<PdfFont>> {
        match self {
            FontChoice::Configured(font) => Some(font.clone()),
            FontChoice::Probe => probed(),
        }
    }
}

/// The first well-known font that loads, looked for once per process.
fn probed() -> Option<Arc<PdfFont>> {
    static PROBED: OnceLock<Option<Arc<PdfFont>>> = OnceLock::new();
    PROBED
        .get_or_init(|| {
            for path in WELL_KNOWN_FONTS {
                let path = Path::new(path);
                if !path.exists() {
                    continue;
                }
                match PdfFont::load(path) {
                    Ok(font) => {
                        tracing::info!(font = %path.display(), "PDF reports embed this font");
                        return Some(Arc::new(font));
                    }
                    Err(e) => tracing::warn!(error = %e, "skipping a font for PDF reports"),
                }
            }
            tracing::warn!(
                "no Unicode font found for PDF reports (set BREEZE_PDF_FONT to a TrueType file): \
                 they are set in Helvetica, characters beyond Latin-1 print as '?'"
            );
            None
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_font_that_cannot_be_used_is_refused_naming_the_setting() {
        let missing = PdfFont::load(Path::new("/nonexistent/font.ttf")).unwrap_err();
        assert!(
            matches!(&missing, StoreError::Config(m) if m.contains("BREEZE_PDF_FONT")
                && m.contains("/nonexistent/font.ttf")),
            "{missing:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("not-a-font.ttf");
        std::fs::write(&text, "hello").unwrap();
        assert!(matches!(
            PdfFont::load(&text).unwrap_err(),
            StoreError::Config(_)
        ));
        assert!(FontChoice::new(Some(&text)).is_err());
    }

    #[test]
    fn dejavu_maps_cyrillic_and_greek_but_not_cjk() {
        let Some(font) = probed() else {
            panic!("no font in WELL_KNOWN_FONTS (apt-get install fonts-dejavu-core)");
        };
        for c in ['Ж', 'Ω', 'ő', 'ữ', 'A'] {
            let (gid, width) = font.glyph(c);
            assert!(gid != 0 && width > 0, "{c}: {gid} {width}");
        }
        assert_eq!(font.glyph('中').0, 0);
        assert!(font.deflated.len() < font.file_len(), "compressed");
        assert!(font.ascent > 0 && font.descent < 0);
    }
}
