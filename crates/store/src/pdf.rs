//! A small PDF 1.4 writer for tabular reports, written as the rows come.
//!
//! Why by hand: a report of 10,000 devices is generated page by page into the store's chunks, so
//! the writer must never hold the document; PDF allows that as long as every object's byte
//! offset is remembered for the cross-reference table at the end. The writer keeps only those
//! offsets (two objects a page), the page being laid out, and the glyphs used so far.
//!
//! Text is set in a TrueType font, a subset of it embedded (see [`crate::pdf_font`]), as a Type0 font with
//! a CIDFontType2 descendant: Identity-H encoding (each character is its glyph id in two bytes),
//! a `/W` array with the widths of the glyphs used, and a `/ToUnicode` CMap mapping each glyph
//! back to its character, so the text can be searched and copied. The glyphs used are known only
//! at the end, so the font's objects (and the subset) are written after the last page. Characters the font lacks
//! (DejaVu Sans has no CJK) print as its `.notdef` box and copy as U+FFFD. The header row is set
//! in the same font, drawn with a thin outline (text render mode 2) to look bold.
//!
//! With no font available it falls back to the standard Type1 fonts Helvetica and
//! Helvetica-Bold (nothing embedded) with WinAnsiEncoding: characters outside it print as `?`,
//! and the first page says so under the title. Either way a cell too wide for its column is cut
//! and ends with `..`, measured with the font's own character widths — or, in a document
//! started with `start_wrapping` (invoices, quotes), wraps onto more lines within its column.
//!
//! Layout: A4 landscape, a title on the first page, the column header on every page, "page N"
//! at the foot. A page's content stream is written as its rows come, its length given by an
//! indirect object written after it (so nothing of a page is held back), and the page tree
//! object is written last (its kids are known only then); PDF lets objects appear in any
//! order, the cross-reference table maps each number to its offset.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    sync::Arc,
};

use crate::pdf_font::PdfFont;

/// A4 landscape, in points.
const PAGE_W: f64 = 842.0;
const PAGE_H: f64 = 595.0;
const MARGIN: f64 = 36.0;
const FONT_SIZE: f64 = 7.0;
const LEADING: f64 = 9.5;
const TITLE_SIZE: f64 = 11.0;
/// Padding between columns.
const GAP: f64 = 4.0;

// Fixed object numbers; each page then takes three: content stream, its length, page. With an
// embedded font, FONT is its Type0 font and FONT_BOLD its CIDFontType2 descendant (both written
// at the end, with the font descriptor, the font file and the ToUnicode CMap).
const CATALOG: usize = 1;
const PAGES: usize = 2;
const FONT: usize = 3;
const FONT_BOLD: usize = 4;
const FIRST_FREE: usize = 5;

/// Helvetica's advance widths (1/1000 em) for the printable ASCII characters 32..=126; other
/// characters are measured as 556.
const HELVETICA: [u16; 95] = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278,
    278, // ' '..'/'
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, // '0'..'9'
    278, 278, 584, 584, 584, 556, 1015, // ':'..'@'
    667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, // 'A'..'M'
    722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, // 'N'..'Z'
    278, 278, 278, 469, 556, 333, // '['..'`'
    556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, // 'a'..'m'
    556, 556, 556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, // 'n'..'z'
    334, 260, 334, 584, // '{'..'~'
];

/// A character as one WinAnsiEncoding byte: ASCII and Latin-1 as themselves, the rest `?`.
fn win_ansi(c: char) -> u8 {
    match c {
        ' '..='~' => c as u8,
        '\u{a0}'..='\u{ff}' => c as u32 as u8,
        '\t' | '\n' | '\r' => b' ',
        _ => b'?',
    }
}

/// Helvetica's width of WinAnsi `byte`, in 1/1000 em.
fn helvetica_width(byte: u8) -> u16 {
    match byte {
        32..=126 => HELVETICA[usize::from(byte - 32)],
        _ => 556,
    }
}

/// A glyph as the content stream names it (a WinAnsi byte, or a glyph id of the embedded
/// font), its width in 1/1000 em, and the character it stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Glyph {
    code: u16,
    width: u16,
    ch: char,
}

/// `glyphs` that fit in `room` points at `size`, cut and ending with `dots` (two full stops)
/// when they do not.
fn fit(glyphs: Vec<Glyph>, dots: [Glyph; 2], room: f64, size: f64) -> Vec<Glyph> {
    let w = |g: &Glyph| f64::from(g.width) * size / 1000.0;
    let total: f64 = glyphs.iter().map(w).sum();
    if total <= room {
        return glyphs;
    }
    let room = room - dots.iter().map(w).sum::<f64>();
    let mut used = 0.0;
    let mut out = Vec::new();
    for g in glyphs {
        used += w(&g);
        if used > room {
            break;
        }
        out.push(g);
    }
    out.extend(dots);
    out
}

/// `paragraphs` (one per element) broken into lines that each fit in `room` points at
/// `size`: at spaces where it can, inside a word longer than a whole line where it must. Every
/// glyph is kept: nothing is cut. An empty paragraph is one empty line.
fn wrap(paragraphs: Vec<Vec<Glyph>>, room: f64, size: f64) -> Vec<Vec<Glyph>> {
    let w = |g: &Glyph| f64::from(g.width) * size / 1000.0;
    let mut lines = Vec::new();
    for para in paragraphs {
        let mut line: Vec<Glyph> = Vec::new();
        let mut used = 0.0;
        for word in para.split(|g| g.ch == ' ') {
            let width: f64 = word.iter().map(w).sum();
            let space = para.iter().find(|g| g.ch == ' ').copied();
            let space_w = space.as_ref().map_or(0.0, w);
            if !line.is_empty() && used + space_w + width <= room {
                line.extend(space);
                line.extend_from_slice(word);
                used += space_w + width;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
                used = 0.0;
            }
            // A word wider than a line is broken where the line is full.
            for g in word {
                if !line.is_empty() && used + w(g) > room {
                    lines.push(std::mem::take(&mut line));
                    used = 0.0;
                }
                line.push(*g);
                used += w(g);
            }
        }
        lines.push(line);
    }
    lines
}

/// How text is set.
enum Typeface {
    /// Helvetica with WinAnsiEncoding, nothing embedded.
    Standard,
    /// An embedded TrueType font, with the glyphs met so far.
    Embedded(Embedded),
}

struct Embedded {
    font: Arc<PdfFont>,
    /// Each character met so far: its glyph.
    chars: HashMap<char, Glyph>,
    /// Each glyph drawn so far: its width and the character it stands for (the first one met,
    /// for the ToUnicode CMap).
    used: BTreeMap<u16, (u16, char)>,
}

impl Typeface {
    /// `text`'s glyphs (tabs and line breaks as spaces).
    fn shape(&mut self, text: &str) -> Vec<Glyph> {
        let text = text.chars().map(|c| {
            if matches!(c, '\t' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        });
        match self {
            Typeface::Standard => text
                .map(|c| {
                    let b = win_ansi(c);
                    Glyph {
                        code: u16::from(b),
                        width: helvetica_width(b),
                        ch: c,
                    }
                })
                .collect(),
            Typeface::Embedded(e) => text
                .map(|c| {
                    *e.chars.entry(c).or_insert_with(|| {
                        let (code, width) = e.font.glyph(c);
                        Glyph { code, width, ch: c }
                    })
                })
                .collect(),
        }
    }

    /// Appends `glyphs` as a string operand of `Tj`, recording the embedded glyphs as used.
    fn string(&mut self, out: &mut Vec<u8>, glyphs: &[Glyph]) {
        match self {
            Typeface::Standard => {
                let bytes: Vec<u8> = glyphs.iter().map(|g| g.code as u8).collect();
                literal(out, &bytes);
            }
            Typeface::Embedded(e) => {
                out.push(b'<');
                for g in glyphs {
                    // .notdef stands for every character the font lacks: it copies as U+FFFD.
                    let ch = if g.code == 0 { '\u{fffd}' } else { g.ch };
                    e.used.entry(g.code).or_insert((g.width, ch));
                    out.extend_from_slice(format!("{:04X}", g.code).as_bytes());
                }
                out.push(b'>');
            }
        }
    }
}

/// Appends `bytes` as a PDF literal string.
fn literal(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'(');
    for &b in bytes {
        match b {
            b'(' | b')' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            32..=126 => out.push(b),
            // Latin-1 bytes as octal escapes: the file stays ASCII outside streams' binary.
            _ => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
        }
    }
    out.push(b')');
}

/// A PDF being written. Every method appends to the caller's buffer (which the caller may
/// empty between calls: the writer counts what it wrote, it never reads it back).
pub(crate) struct PdfTable {
    /// Bytes written so far: the next object's offset.
    written: u64,
    /// Offsets of objects 1.. (index + 1 is the object number); 0 until written.
    offsets: Vec<u64>,
    /// Page objects, in order.
    pages: Vec<usize>,
    columns: Vec<String>,
    /// Each column's left edge.
    xs: Vec<f64>,
    widths: Vec<f64>,
    title: String,
    face: Typeface,
    /// The page being written: its content stream's object, where the stream's data began,
    /// and the baseline of the next row.
    stream: usize,
    stream_start: u64,
    y: f64,
    rows_on_page: usize,
    /// Long cells and the title wrap onto more lines instead of being cut.
    wrapping: bool,
}

/// The line under the title when no Unicode font was found.
const NO_FONT_NOTE: &str = "Set in Helvetica: no Unicode font was found (BREEZE_PDF_FONT), \
                            characters beyond Latin-1 print as ?";

impl PdfTable {
    /// Starts a document (header, catalog, fonts) with `columns` and a `title` on its first
    /// page, set in `font` (embedded), or in Helvetica when it is `None`.
    pub(crate) fn start(
        out: &mut Vec<u8>,
        title: &str,
        columns: &[&str],
        font: Option<Arc<PdfFont>>,
    ) -> Self {
        Self::begin(out, title, columns, font, false)
    }

    /// As [`Self::start`], for a document whose long cells and title wrap onto more lines
    /// within their column ([`Self::wrapped_row`]) instead of being cut: invoices and quotes.
    pub(crate) fn start_wrapping(
        out: &mut Vec<u8>,
        title: &str,
        columns: &[&str],
        font: Option<Arc<PdfFont>>,
    ) -> Self {
        Self::begin(out, title, columns, font, true)
    }

    fn begin(
        out: &mut Vec<u8>,
        title: &str,
        columns: &[&str],
        font: Option<Arc<PdfFont>>,
        wrapping: bool,
    ) -> Self {
        let weights: Vec<f64> = columns.iter().map(|c| column_weight(c)).collect();
        let sum: f64 = weights.iter().sum::<f64>().max(1.0);
        let usable = PAGE_W - 2.0 * MARGIN;
        let widths: Vec<f64> = weights.iter().map(|w| usable * w / sum).collect();
        let mut xs = Vec::with_capacity(widths.len());
        let mut x = MARGIN;
        for w in &widths {
            xs.push(x);
            x += w;
        }
        let face = match font {
            Some(font) => Typeface::Embedded(Embedded {
                font,
                chars: HashMap::new(),
                used: BTreeMap::new(),
            }),
            None => Typeface::Standard,
        };
        let mut pdf = Self {
            written: 0,
            offsets: vec![0; FIRST_FREE - 1],
            pages: Vec::new(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            xs,
            widths,
            title: title.to_owned(),
            face,
            stream: 0,
            stream_start: 0,
            y: 0.0,
            rows_on_page: 0,
            wrapping,
        };
        // The binary comment marks the file as binary for transfer programs.
        pdf.emit(out, b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n");
        pdf.object(
            out,
            CATALOG,
            format!("<< /Type /Catalog /Pages {PAGES} 0 R >>").as_bytes(),
        );
        if matches!(pdf.face, Typeface::Standard) {
            for (n, name) in [(FONT, "Helvetica"), (FONT_BOLD, "Helvetica-Bold")] {
                pdf.object(
                    out,
                    n,
                    format!(
                        "<< /Type /Font /Subtype /Type1 /BaseFont /{name} \
                         /Encoding /WinAnsiEncoding >>"
                    )
                    .as_bytes(),
                );
            }
        }
        pdf.new_page(out);
        pdf
    }

    fn emit(&mut self, out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(bytes);
        self.written += bytes.len() as u64;
    }

    /// Starts object `n` here.
    fn begin_object(&mut self, out: &mut Vec<u8>, n: usize) {
        if self.offsets.len() < n {
            self.offsets.resize(n, 0);
        }
        self.offsets[n - 1] = self.written;
        self.emit(out, format!("{n} 0 obj\n").as_bytes());
    }

    fn object(&mut self, out: &mut Vec<u8>, n: usize, body: &[u8]) {
        self.begin_object(out, n);
        self.emit(out, body);
        self.emit(out, b"\nendobj\n");
    }

    /// Writes stream object `n` (with `dict` entries beside its length) and its length, object
    /// `n + 1`.
    fn stream_object(&mut self, out: &mut Vec<u8>, n: usize, dict: &str, data: &[u8]) {
        self.begin_object(out, n);
        self.emit(
            out,
            format!("<< /Length {} 0 R{dict} >>\nstream\n", n + 1).as_bytes(),
        );
        self.emit(out, data);
        self.emit(out, b"\nendstream\nendobj\n");
        self.object(out, n + 1, data.len().to_string().as_bytes());
    }

    fn next_number(&self) -> usize {
        self.offsets.len() + 1
    }

    /// `text` as glyphs that fit in `room` points at `size`.
    fn fit(&mut self, text: &str, room: f64, size: f64) -> Vec<Glyph> {
        let glyphs = self.face.shape(text);
        let dots = self.face.shape("..");
        let dots = [dots[0], dots[1]];
        fit(glyphs, dots, room, size)
    }

    /// `text` as lines of glyphs that fit in `room` points at `size` ([`wrap`]); its line
    /// breaks start new lines.
    fn wrap(&mut self, text: &str, room: f64, size: f64) -> Vec<Vec<Glyph>> {
        let paragraphs = text.split('\n').map(|p| self.face.shape(p)).collect();
        wrap(paragraphs, room, size)
    }

    /// Begins a page: opens its content stream, then the title (first page only) and the
    /// column header.
    fn new_page(&mut self, out: &mut Vec<u8>) {
        self.stream = self.next_number();
        // Reserve the numbers of the stream's length and of the page.
        self.offsets.resize(self.stream + 2, 0);
        self.begin_object(out, self.stream);
        self.emit(
            out,
            format!("<< /Length {} 0 R >>\nstream\n", self.stream + 1).as_bytes(),
        );
        self.stream_start = self.written;
        self.rows_on_page = 0;
        self.y = PAGE_H - MARGIN;
        if self.pages.is_empty() {
            self.y -= TITLE_SIZE;
            let title = self.title.clone();
            let room = PAGE_W - 2.0 * MARGIN;
            let lines = if self.wrapping {
                // Bold is a little wider than the widths measured: some room to spare.
                self.wrap(&title, room * 0.95, TITLE_SIZE)
            } else {
                vec![self.fit(&title, room, TITLE_SIZE)]
            };
            for (i, line) in lines.iter().enumerate() {
                if i > 0 {
                    self.y -= TITLE_SIZE * 1.3;
                }
                self.text(out, true, TITLE_SIZE, MARGIN, line);
            }
            self.y -= LEADING;
            if matches!(self.face, Typeface::Standard) {
                self.y -= FONT_SIZE;
                let note = self.fit(NO_FONT_NOTE, PAGE_W - 2.0 * MARGIN, FONT_SIZE);
                self.text(out, false, FONT_SIZE, MARGIN, &note);
                self.y -= LEADING;
            }
        }
        self.y -= FONT_SIZE;
        let columns = self.columns.clone();
        let header: Vec<Vec<Glyph>> = columns
            .iter()
            .zip(self.widths.clone())
            // Bold is a little wider than the widths measured: some room to spare.
            .map(|(c, w)| self.fit(c, (w - GAP) * 0.9, FONT_SIZE))
            .collect();
        for (i, cell) in header.iter().enumerate() {
            self.text(out, true, FONT_SIZE, self.xs[i], cell);
        }
        let rule_y = self.y - 2.5;
        let rule = format!(
            "0.5 w {MARGIN} {rule_y:.2} m {:.2} {rule_y:.2} l S\n",
            PAGE_W - MARGIN
        );
        self.emit(out, rule.as_bytes());
        self.y -= LEADING + 1.0;
    }

    fn text(&mut self, out: &mut Vec<u8>, bold: bool, size: f64, x: f64, glyphs: &[Glyph]) {
        let y = self.y;
        let mut op = match (&self.face, bold) {
            (Typeface::Standard, false) => format!("BT /F1 {size} Tf {x:.2} {y:.2} Td "),
            (Typeface::Standard, true) => format!("BT /F2 {size} Tf {x:.2} {y:.2} Td "),
            (Typeface::Embedded(_), false) => format!("BT /F1 {size} Tf {x:.2} {y:.2} Td "),
            // One face embedded: bold is drawn filled and thinly outlined.
            (Typeface::Embedded(_), true) => {
                format!(
                    "q 2 Tr {:.2} w BT /F1 {size} Tf {x:.2} {y:.2} Td ",
                    size / 30.0
                )
            }
        }
        .into_bytes();
        self.face.string(&mut op, glyphs);
        op.extend_from_slice(b" Tj ET");
        if bold && matches!(self.face, Typeface::Embedded(_)) {
            op.extend_from_slice(b" Q");
        }
        op.push(b'\n');
        self.emit(out, &op);
    }

    /// Ends the page: the footer, the end of its content stream, the stream's length, the
    /// page object.
    fn end_page(&mut self, out: &mut Vec<u8>) {
        let number = self.pages.len() + 1;
        let foot = self.face.shape(&format!("page {number}"));
        self.y = MARGIN / 2.0;
        self.text(out, false, FONT_SIZE, PAGE_W - MARGIN - 40.0, &foot);
        let stream = self.stream;
        let length = self.written - self.stream_start;
        self.emit(out, b"\nendstream\nendobj\n");
        self.object(out, stream + 1, length.to_string().as_bytes());
        let page = stream + 2;
        // With an embedded font there is one face: F2 names it too.
        let bold = match self.face {
            Typeface::Standard => FONT_BOLD,
            Typeface::Embedded(_) => FONT,
        };
        let dict = format!(
            "<< /Type /Page /Parent {PAGES} 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] \
             /Resources << /Font << /F1 {FONT} 0 R /F2 {bold} 0 R >> >> \
             /Contents {stream} 0 R >>"
        );
        self.object(out, page, dict.as_bytes());
        self.pages.push(page);
    }

    /// Appends one row (texts in column order); starts a new page when this one is full.
    pub(crate) fn row(&mut self, out: &mut Vec<u8>, cells: &[String]) {
        if self.y < MARGIN + LEADING {
            self.end_page(out);
            self.new_page(out);
        }
        for (i, cell) in cells.iter().enumerate().take(self.columns.len()) {
            let fitted = self.fit(cell, self.widths[i] - GAP, FONT_SIZE);
            if !fitted.is_empty() {
                self.text(out, false, FONT_SIZE, self.xs[i], &fitted);
            }
        }
        self.y -= LEADING;
        self.rows_on_page += 1;
    }

    /// Appends one row whose cells wrap within their columns: as many lines as its longest
    /// cell needs, continued on the next page when this one is full.
    pub(crate) fn wrapped_row(&mut self, out: &mut Vec<u8>, cells: &[String]) {
        let columns = self.columns.len();
        let lines: Vec<Vec<Vec<Glyph>>> = cells
            .iter()
            .take(columns)
            .enumerate()
            .map(|(i, cell)| self.wrap(cell, self.widths[i] - GAP, FONT_SIZE))
            .collect();
        let height = lines.iter().map(Vec::len).max().unwrap_or(0).max(1);
        for k in 0..height {
            if self.y < MARGIN + LEADING {
                self.end_page(out);
                self.new_page(out);
            }
            for (i, cell) in lines.iter().enumerate() {
                if let Some(line) = cell.get(k).filter(|l| !l.is_empty()) {
                    self.text(out, false, FONT_SIZE, self.xs[i], line);
                }
            }
            self.y -= LEADING;
        }
        self.rows_on_page += 1;
    }

    /// Ends the document: the last page, the page tree, the embedded font, the
    /// cross-reference table, the trailer.
    pub(crate) fn finish(mut self, out: &mut Vec<u8>, rows: i64) {
        if rows == 0 && self.rows_on_page == 0 {
            let none = self.face.shape("No rows.");
            self.text(out, false, FONT_SIZE, MARGIN, &none);
        }
        self.end_page(out);
        let mut kids = String::new();
        for p in &self.pages {
            let _ = write!(kids, "{p} 0 R ");
        }
        let tree = format!(
            "<< /Type /Pages /Kids [{kids}] /Count {} >>",
            self.pages.len()
        );
        self.object(out, PAGES, tree.as_bytes());
        if let Typeface::Embedded(e) = std::mem::replace(&mut self.face, Typeface::Standard) {
            self.embed(out, &e);
        }
        let xref = self.written;
        let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", self.offsets.len() + 1);
        for offset in &self.offsets {
            let _ = writeln!(table, "{offset:010} 00000 n ");
        }
        let _ = write!(
            table,
            "trailer\n<< /Size {} /Root {CATALOG} 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            self.offsets.len() + 1
        );
        self.emit(out, table.as_bytes());
    }

    /// Writes the embedded font's objects: the Type0 font, its CIDFontType2 descendant with
    /// the used glyphs' widths, the font descriptor, the font file and the ToUnicode CMap.
    fn embed(&mut self, out: &mut Vec<u8>, e: &Embedded) {
        let font = &e.font;
        let descriptor = self.next_number();
        let (file, cmap) = (descriptor + 1, descriptor + 3);
        let glyphs: std::collections::BTreeSet<u16> = e.used.keys().copied().collect();
        let (subset, program) = font.program(&glyphs);
        // A subset is named with a tag of six capitals that depends on the glyphs in it.
        let name = if subset {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for g in &glyphs {
                h = (h ^ u64::from(*g)).wrapping_mul(0x0100_0000_01b3);
            }
            let tag: String = (0..6)
                .map(|i| char::from(b'A' + ((h >> (i * 8)) % 26) as u8))
                .collect();
            format!("{tag}+{}", font.name)
        } else {
            font.name.clone()
        };
        let name = &name;
        self.object(
            out,
            FONT,
            format!(
                "<< /Type /Font /Subtype /Type0 /BaseFont /{name} /Encoding /Identity-H \
                 /DescendantFonts [{FONT_BOLD} 0 R] /ToUnicode {cmap} 0 R >>"
            )
            .as_bytes(),
        );
        // Widths of runs of consecutive glyph ids: `first [w w …]`.
        let mut widths = String::new();
        let mut next = None;
        for (&gid, &(width, _)) in &e.used {
            if next != Some(gid) {
                if next.is_some() {
                    widths.push_str("] ");
                }
                let _ = write!(widths, "{gid} [");
            } else {
                widths.push(' ');
            }
            let _ = write!(widths, "{width}");
            next = gid.checked_add(1);
        }
        if !e.used.is_empty() {
            widths.push(']');
        }
        self.object(
            out,
            FONT_BOLD,
            format!(
                "<< /Type /Font /Subtype /CIDFontType2 /BaseFont /{name} \
                 /CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> \
                 /FontDescriptor {descriptor} 0 R /CIDToGIDMap /Identity /DW 1000 \
                 /W [{widths}] >>"
            )
            .as_bytes(),
        );
        let [x0, y0, x1, y1] = font.bbox;
        self.object(
            out,
            descriptor,
            format!(
                "<< /Type /FontDescriptor /FontName /{name} /Flags 32 \
                 /FontBBox [{x0} {y0} {x1} {y1}] /ItalicAngle {} /Ascent {} /Descent {} \
                 /CapHeight {} /StemV 80 /FontFile2 {file} 0 R >>",
                font.italic_angle, font.ascent, font.descent, font.cap_height
            )
            .as_bytes(),
        );
        // Deflating into a Vec cannot fail; if it did, the program goes uncompressed.
        let (filter, body) = match crate::pdf_font::deflate(&program) {
            Ok(deflated) => (" /Filter /FlateDecode", deflated),
            Err(_) => ("", program.clone()),
        };
        let dict = format!(" /Length1 {}{filter}", program.len());
        self.stream_object(out, file, &dict, &body);
        self.stream_object(out, cmap, "", to_unicode(&e.used).as_bytes());
    }
}

/// The ToUnicode CMap: each used glyph id (two bytes, as Identity-H writes it) to the
/// character it stands for, in UTF-16BE.
fn to_unicode(used: &BTreeMap<u16, (u16, char)>) -> String {
    let mut cmap = String::from(
        "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n\
         /CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n\
         /CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n\
         1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n",
    );
    let entries: Vec<_> = used.iter().collect();
    // At most 100 entries a block.
    for block in entries.chunks(100) {
        let _ = writeln!(cmap, "{} beginbfchar", block.len());
        for (gid, (_, ch)) in block {
            let mut units = [0u16; 2];
            let utf16: String = ch
                .encode_utf16(&mut units)
                .iter()
                .map(|u| format!("{u:04X}"))
                .collect();
            let _ = writeln!(cmap, "<{gid:04X}> <{utf16}>");
        }
        cmap.push_str("endbfchar\n");
    }
    cmap.push_str("endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n");
    cmap
}

/// How much of the line a column gets: ids (UUIDs) and times are long, the rest share.
fn column_weight(name: &str) -> f64 {
    if name == "id" || name.ends_with("Id") {
        2.2
    } else if name.ends_with("At") || name == "at" {
        1.7
    } else if name == "description" {
        3.0
    } else if name == "details" || name == "message" || name == "title" || name == "tags" {
        2.0
    } else {
        1.0
    }
}

/// Checks what a reader checks first: the header, `startxref` pointing at the `xref`
/// table, every in-use entry pointing at `n 0 obj`, the trailer's size, the page tree's
/// count against the page objects; panics on the first that fails. Returns the number of
/// pages. For tests (`breeze_store::testing::check_pdf`).
#[cfg(any(test, feature = "testing"))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // a test helper: a panic is the report
pub fn check_structure(pdf: &[u8]) -> usize {
    assert!(pdf.starts_with(b"%PDF-1.4\n"));
    assert!(pdf.ends_with(b"%%EOF\n"));
    // One character per byte, so indices into the text are offsets into the file.
    let text: String = pdf
        .iter()
        .map(|&b| if b.is_ascii() { b as char } else { '?' })
        .collect();
    let sx = text.rfind("startxref\n").expect("startxref");
    let xref: usize = text[sx + 10..]
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        &pdf[xref..xref + 5],
        b"xref\n",
        "startxref points at the table"
    );
    let mut lines = text[xref..].lines();
    lines.next();
    let header: Vec<usize> = lines
        .next()
        .unwrap()
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(header[0], 0);
    let size = header[1];
    let mut entries = Vec::new();
    for _ in 0..size {
        entries.push(lines.next().unwrap().to_owned());
    }
    assert_eq!(entries[0], "0000000000 65535 f ");
    for (n, e) in entries.iter().enumerate().skip(1) {
        // Each entry is exactly 20 bytes with its end of line.
        assert_eq!(e.len() + 1, 20, "entry {n}: {e:?}");
        assert!(e.ends_with(" 00000 n "), "entry {n}: {e:?}");
        let offset: usize = e[..10].parse().unwrap();
        let head = format!("{n} 0 obj\n");
        assert_eq!(
            &pdf[offset..offset + head.len()],
            head.as_bytes(),
            "object {n} is where the table says"
        );
    }
    assert_eq!(lines.next(), Some("trailer"));
    assert!(text.contains(&format!("/Size {size} /Root 1 0 R")));
    // Streams' lengths (indirect objects, found through the table) are exact.
    let mut from = 0;
    while let Some(i) = text[from..].find("<< /Length ") {
        let at = from + i + 11;
        let n: usize = text[at..].split(' ').next().unwrap().parse().unwrap();
        let offset: usize = entries[n][..10].parse().unwrap();
        let body = &text[offset + format!("{n} 0 obj\n").len()..];
        let len: usize = body.lines().next().unwrap().trim().parse().unwrap();
        let start = at + text[at..].find("stream\n").unwrap() + 7;
        assert_eq!(&pdf[start + len..start + len + 10], b"\nendstream");
        from = start + len;
    }
    let pages = text.matches("/Type /Page ").count();
    assert!(text.contains(&format!("/Count {pages} >>")));
    pages
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The font the tests embed: DejaVu Sans (Condensed if installed) where Debian puts it
    /// (CI installs fonts-dejavu-core).
    fn dejavu() -> Arc<PdfFont> {
        let path = crate::pdf_font::WELL_KNOWN_FONTS
            .iter()
            .map(std::path::Path::new)
            .find(|p| p.exists() && p.to_string_lossy().contains("DejaVu"))
            .expect("DejaVu Sans is installed (apt-get install fonts-dejavu-core)");
        Arc::new(PdfFont::load(path).unwrap())
    }

    fn document(rows: usize, font: Option<Arc<PdfFont>>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut pdf = PdfTable::start(
            &mut out,
            "Device inventory (ACME)",
            &["id", "hostname"],
            font,
        );
        // The caller empties its buffer now and then (a stored chunk); offsets still count.
        let mut file = Vec::new();
        for i in 0..rows {
            pdf.row(&mut out, &[format!("{i:08}"), format!("host-{i} (é) \\ ✓")]);
            if out.len() > 4096 {
                file.append(&mut out);
            }
        }
        pdf.finish(&mut out, rows as i64);
        file.append(&mut out);
        file
    }

    #[test]
    fn a_long_table_is_a_valid_pdf_of_many_pages() {
        let pdf = document(500, None);
        let pages = check_structure(&pdf);
        assert!(pages >= 9, "{pages} pages");
        let text = String::from_utf8_lossy(&pdf);
        // Escaped: the parenthesis, the backslash, é as Latin-1, ✓ as '?'.
        assert!(
            text.contains(r"(host-7 \(\351\) \\ ?) Tj"),
            "{}",
            &text[..2000]
        );
        assert!(text.contains("(page 1) Tj") && text.contains(&format!("(page {pages}) Tj")));
        // Without a font, the first page says why the '?'.
        assert!(text.contains("(Set in Helvetica: no Unicode font was found"));
        assert!(!text.contains("/FontFile2"));
    }

    #[test]
    fn an_empty_table_is_one_page() {
        let pdf = document(0, None);
        assert_eq!(check_structure(&pdf), 1);
        assert!(String::from_utf8_lossy(&pdf).contains("(No rows.) Tj"));
        let pdf = document(0, Some(dejavu()));
        assert_eq!(check_structure(&pdf), 1);
    }

    #[test]
    fn long_cells_are_cut_to_their_column() {
        for font in [None, Some(dejavu())] {
            let mut out = Vec::new();
            let mut pdf = PdfTable::start(&mut out, "t", &["a"], font);
            let cut = pdf.fit(&"W".repeat(200), 50.0, FONT_SIZE);
            let dot = pdf.face.shape(".")[0];
            assert_eq!(&cut[cut.len() - 2..], &[dot, dot]);
            let w: f64 = cut
                .iter()
                .map(|g| f64::from(g.width) * FONT_SIZE / 1000.0)
                .sum();
            assert!(w <= 50.0 && w > 40.0, "{w}");
            assert_eq!(pdf.fit("short", 50.0, FONT_SIZE).len(), 5);
        }
    }

    /// With the font embedded: the text is glyph ids, every glyph drawn has a width and a
    /// ToUnicode entry naming its character, a character the font lacks is .notdef, and the
    /// font objects come after the pages.
    #[test]
    fn an_embedded_font_maps_every_glyph_used() {
        let font = dejavu();
        let pdf = document(300, Some(font.clone()));
        let pages = check_structure(&pdf);
        assert!(pages >= 5, "{pages} pages");
        let text = String::from_utf8_lossy(&pdf);
        let (gid, _) = font.glyph('✓');
        assert_ne!(gid, 0, "DejaVu Sans has ✓");
        assert!(text.contains(&format!("{gid:04X}> Tj")), "✓ ends the cell");
        assert!(
            text.contains(&format!("<{gid:04X}> <2713>")),
            "✓ in the CMap"
        );
        let (e_acute, width) = font.glyph('é');
        assert!(text.contains(&format!("<{e_acute:04X}> <00E9>")));
        assert!(text.contains(&format!("{e_acute} [{width}")));
        assert!(text.contains("/Encoding /Identity-H") && text.contains("/CIDToGIDMap /Identity"));
        assert!(
            text.contains(&format!("+{} ", font.name)),
            "a subset's name"
        );
        assert!(font.name.starts_with("DejaVuSans"), "{}", font.name);
        assert_eq!(font.glyph('中').0, 0, "no CJK in DejaVu Sans");
        // The fonts are written after the last page.
        let last_page = text.rfind("/Type /Page ").unwrap();
        assert!(text.rfind("/Subtype /Type0").unwrap() > last_page);
        assert!(!text.contains("WinAnsiEncoding"));
    }

    #[test]
    fn to_unicode_writes_surrogate_pairs_and_blocks_of_100() {
        let used: BTreeMap<u16, (u16, char)> = (1..=150u16)
            .map(|g| (g, (500, 'a')))
            .chain([(200, (500, '😀'))])
            .collect();
        let cmap = to_unicode(&used);
        assert!(cmap.contains("100 beginbfchar") && cmap.contains("51 beginbfchar"));
        assert!(cmap.contains("<00C8> <D83DDE00>"), "{cmap}");
    }
}
