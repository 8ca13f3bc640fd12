//! The TrueType font PDF reports embed, so text beyond Latin-1 (Cyrillic, Greek, accents of
//! every kind) prints and can be searched and copied.
//!
//! Which font: the file `BREEZE_PDF_FONT` names (read by breeze-cli into
//! [`StoreOptions::pdf_font`](crate::StoreOptions); a file that cannot be used fails the
//! store's opening, as a wrong setting should), else the first of [`WELL_KNOWN_FONTS`] that
//! loads (probed once per process, on the first PDF). With neither, reports are set in the
//! standard Helvetica as before, characters beyond Latin-1 as `?`, and the report says so.
//!
//! What is embedded is a subset (FontFile2): the font file with the outlines of the glyphs a
//! report did not use emptied, glyph ids unchanged (so the content stream's ids, the `/W`
//! widths and the ToUnicode CMap need no renumbering), and the tables a PDF reader does not
//! need (`cmap`, `post`, layout tables) left out. It is built and deflated when the document
//! ends, the glyphs used known then: a report of Latin, Cyrillic and Greek text carries a few
//! tens of KiB of font instead of the whole file (DejaVu Sans Condensed: 667 KiB, ~340 KiB
//! deflated), which is embedded only if the file cannot be subset.
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
    pub(crate) data: Vec<u8>,
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
        "cannot use {} as PDF reports' font: {why}",
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
        if subset(&data, &std::collections::BTreeSet::from([0])).is_none() {
            tracing::warn!(font = %path.display(), "cannot subset this font: PDF reports embed it whole");
        }
        Ok(PdfFont {
            path: path.to_owned(),
            name: if name.is_empty() {
                "Embedded".into()
            } else {
                name
            },
            data,
            units_per_em,
            ascent,
            descent,
            cap_height,
            bbox,
            italic_angle,
        })
    }

    /// The font program to embed for a document that drew `glyphs` (with .notdef): a subset
    /// (see [`subset`]), or the whole file when it cannot be subset.
    pub(crate) fn program(&self, glyphs: &std::collections::BTreeSet<u16>) -> (bool, Vec<u8>) {
        match subset(&self.data, glyphs) {
            Some(sub) => (true, sub),
            None => (false, self.data.clone()),
        }
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

/// `data` deflated (zlib), as a `/FlateDecode` stream carries it.
pub(crate) fn deflate(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(data)?;
    z.finish()
}

/// The tables a subset keeps: those a PDF reader needs to draw glyphs by id (ISO 32000-1,
/// 9.9: `glyf`, `head`, `hhea`, `hmtx`, `loca`, `maxp`, and the hinting tables `cvt `, `fpgm`,
/// `prep`), plus `OS/2` and `name`, small, which some readers look at.
const KEPT_TABLES: [&[u8; 4]; 11] = [
    b"OS/2", b"cvt ", b"fpgm", b"glyf", b"head", b"hhea", b"hmtx", b"loca", b"maxp", b"name",
    b"prep",
];

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(d.get(at..at + 2)?.try_into().ok()?))
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

/// A TrueType file with only `glyphs` (and the glyphs their composites are made of) keeping
/// their outlines: every other glyph is empty, ids unchanged; `loca` rewritten in the long
/// format; only [`KEPT_TABLES`]. `None` when the file is not a TrueType font this can read.
pub(crate) fn subset(data: &[u8], glyphs: &std::collections::BTreeSet<u16>) -> Option<Vec<u8>> {
    // The table directory.
    let count = usize::from(be16(data, 4)?);
    let mut tables = std::collections::BTreeMap::new();
    for i in 0..count {
        let rec = 12 + 16 * i;
        let tag: [u8; 4] = data.get(rec..rec + 4)?.try_into().ok()?;
        let offset = be32(data, rec + 8)? as usize;
        let length = be32(data, rec + 12)? as usize;
        tables.insert(tag, data.get(offset..offset.checked_add(length)?)?);
    }
    let head = *tables.get(b"head")?;
    let glyf = *tables.get(b"glyf")?;
    let loca = *tables.get(b"loca")?;
    let glyph_count = usize::from(be16(tables.get(b"maxp")?, 4)?);
    let long = be16(head, 50)? == 1;
    let offset_of = |g: usize| -> Option<usize> {
        if long {
            be32(loca, 4 * g).map(|o| o as usize)
        } else {
            be16(loca, 2 * g).map(|o| 2 * usize::from(o))
        }
    };
    let outline = |g: usize| -> Option<&[u8]> {
        let (from, to) = (offset_of(g)?, offset_of(g + 1)?);
        if from > to {
            return None;
        }
        glyf.get(from..to)
    };

    // The glyphs kept: those used, .notdef, and every component of a composite among them.
    let mut kept: std::collections::BTreeSet<usize> =
        glyphs.iter().map(|g| usize::from(*g)).collect();
    kept.insert(0);
    kept.retain(|g| *g < glyph_count);
    let mut todo: Vec<usize> = kept.iter().copied().collect();
    while let Some(g) = todo.pop() {
        let o = outline(g)?;
        // A negative contour count marks a composite glyph: its components follow the header.
        if o.len() < 10 || be16(o, 0)? & 0x8000 == 0 {
            continue;
        }
        let mut at = 10;
        loop {
            let flags = be16(o, at)?;
            let component = usize::from(be16(o, at + 2)?);
            if component < glyph_count && kept.insert(component) {
                todo.push(component);
            }
            at += 4 + if flags & 0x0001 != 0 { 4 } else { 2 };
            at += match flags {
                f if f & 0x0008 != 0 => 2, // one scale
                f if f & 0x0040 != 0 => 4, // x and y scales
                f if f & 0x0080 != 0 => 8, // a 2x2 matrix
                _ => 0,
            };
            if flags & 0x0020 == 0 {
                break;
            }
        }
    }

    // The new glyf (each outline 4-byte aligned) and its long loca.
    let mut new_glyf = Vec::new();
    let mut new_loca = Vec::with_capacity(4 * (glyph_count + 1));
    for g in 0..glyph_count {
        new_loca.extend_from_slice(&u32::try_from(new_glyf.len()).ok()?.to_be_bytes());
        if kept.contains(&g) {
            new_glyf.extend_from_slice(outline(g)?);
            new_glyf.resize(new_glyf.len().next_multiple_of(4), 0);
        }
    }
    new_loca.extend_from_slice(&u32::try_from(new_glyf.len()).ok()?.to_be_bytes());
    let mut new_head = head.to_vec();
    new_head.get_mut(8..12)?.copy_from_slice(&[0; 4]); // checkSumAdjustment, set below
    new_head
        .get_mut(50..52)?
        .copy_from_slice(&1u16.to_be_bytes()); // indexToLocFormat: long

    let mut out_tables: Vec<([u8; 4], std::borrow::Cow<'_, [u8]>)> = Vec::new();
    for (tag, body) in &tables {
        if !KEPT_TABLES.contains(&tag) {
            continue;
        }
        let body = match tag {
            b"glyf" => std::borrow::Cow::Owned(std::mem::take(&mut new_glyf)),
            b"loca" => std::borrow::Cow::Owned(std::mem::take(&mut new_loca)),
            b"head" => std::borrow::Cow::Owned(std::mem::take(&mut new_head)),
            _ => std::borrow::Cow::Borrowed(*body),
        };
        out_tables.push((*tag, body));
    }

    // The file: offset table, directory (sorted by tag, as the BTreeMap is), tables.
    let n = u16::try_from(out_tables.len()).ok()?;
    let pow = 1u16 << (15 - n.max(1).leading_zeros()); // the largest power of two <= n
    let mut font = Vec::new();
    font.extend_from_slice(&0x0001_0000u32.to_be_bytes());
    font.extend_from_slice(&n.to_be_bytes());
    font.extend_from_slice(&(pow * 16).to_be_bytes());
    font.extend_from_slice(&(pow.trailing_zeros() as u16).to_be_bytes());
    font.extend_from_slice(&((n - pow) * 16).to_be_bytes());
    let mut offset = 12 + 16 * out_tables.len();
    let mut head_at = None;
    for (tag, body) in &out_tables {
        font.extend_from_slice(tag);
        font.extend_from_slice(&checksum(body).to_be_bytes());
        font.extend_from_slice(&u32::try_from(offset).ok()?.to_be_bytes());
        font.extend_from_slice(&u32::try_from(body.len()).ok()?.to_be_bytes());
        if tag == b"head" {
            head_at = Some(offset);
        }
        offset += body.len().next_multiple_of(4);
    }
    for (_, body) in &out_tables {
        font.extend_from_slice(body);
        font.resize(font.len().next_multiple_of(4), 0);
    }
    let adjustment = 0xB1B0_AFBAu32.wrapping_sub(checksum(&font));
    font.get_mut(head_at? + 8..head_at? + 12)?
        .copy_from_slice(&adjustment.to_be_bytes());
    Some(font)
}

/// The sum of `data` as big-endian 32-bit words (the last one zero-padded), as TrueType's table
/// directory records it.
fn checksum(data: &[u8]) -> u32 {
    data.chunks(4).fold(0u32, |sum, word| {
        let mut w = [0u8; 4];
        w[..word.len()].copy_from_slice(word);
        sum.wrapping_add(u32::from_be_bytes(w))
    })
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
                let font = PdfFont::load(path)
                    .map_err(|e| StoreError::Config(format!("BREEZE_PDF_FONT: {e}")))?;
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

    /// A subset keeps the outlines of the glyphs asked for (and of their components), empties
    /// the others, keeps every glyph id and parses as a font again.
    #[test]
    fn a_subset_keeps_the_glyphs_used_and_their_ids() {
        let font = probed().expect("a font in WELL_KNOWN_FONTS");
        let face = ttf_parser::Face::parse(&font.data, 0).unwrap();
        let id = |c| face.glyph_index(c).unwrap().0;
        // 'é' is a composite in DejaVu (e + acute): its components come along.
        let used: std::collections::BTreeSet<u16> = [id('Ж'), id('Ω'), id('é')].into();
        let sub = subset(&font.data, &used).unwrap();
        assert!(
            sub.len() * 5 < font.data.len(),
            "{} of {}",
            sub.len(),
            font.data.len()
        );
        let parsed = ttf_parser::Face::parse(&sub, 0).unwrap();
        assert_eq!(parsed.number_of_glyphs(), face.number_of_glyphs());
        let bbox = |f: &ttf_parser::Face<'_>, g| f.glyph_bounding_box(ttf_parser::GlyphId(g));
        for g in &used {
            assert!(bbox(&parsed, *g).is_some(), "glyph {g} kept");
            assert_eq!(bbox(&parsed, *g), bbox(&face, *g));
        }
        assert!(
            bbox(&parsed, id('e')).is_some(),
            "the composite's component is kept"
        );
        assert!(bbox(&parsed, id('Z')).is_none(), "an unused glyph is empty");
        assert_eq!(
            parsed.glyph_hor_advance(ttf_parser::GlyphId(id('Z'))),
            face.glyph_hor_advance(ttf_parser::GlyphId(id('Z')))
        );
        // The whole file sums to the magic number, as its head table says.
        assert_eq!(checksum(&sub), 0xB1B0_AFBA);
        assert!(subset(b"not a font at all", &used).is_none());
    }

    #[test]
    fn a_font_that_cannot_be_used_is_refused_naming_the_setting() {
        let missing = FontChoice::new(Some(Path::new("/nonexistent/font.ttf"))).unwrap_err();
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
        assert!(
            subset(&font.data, &Default::default()).is_some(),
            "it can be subset"
        );
        assert!(font.ascent > 0 && font.descent < 0);
    }
}
