//! A small PDF 1.4 writer for tabular reports, written as the rows come (no dependency).
//!
//! Why by hand: a report of 10,000 devices is generated page by page into the store's chunks, so
//! the writer must never hold the document; PDF allows that as long as every object's byte
//! offset is remembered for the cross-reference table at the end. The writer keeps only those
//! offsets (two objects a page) and the page being laid out. Text is set in the standard Type1
//! fonts Helvetica and Helvetica-Bold (every reader has them, nothing is embedded) with
//! WinAnsiEncoding; characters outside it print as `?`. A cell too wide for its column is cut
//! and ends with `..`, measured with Helvetica's own character widths.
//!
//! Layout: A4 landscape, a title on the first page, the column header on every page, "page N"
//! at the foot. A page's content stream is written as its rows come, its length given by an
//! indirect object written after it (so nothing of a page is held back), and the page tree
//! object is written last (its kids are known only then); PDF lets objects appear in any
//! order, the cross-reference table maps each number to its offset.

use std::fmt::Write as _;

/// A4 landscape, in points.
const PAGE_W: f64 = 842.0;
const PAGE_H: f64 = 595.0;
const MARGIN: f64 = 36.0;
const FONT_SIZE: f64 = 7.0;
const LEADING: f64 = 9.5;
const TITLE_SIZE: f64 = 11.0;
/// Padding between columns.
const GAP: f64 = 4.0;

// Fixed object numbers; each page then takes three: content stream, its length, page.
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

/// The width of `byte` in points at `size`.
fn width(byte: u8, size: f64) -> f64 {
    let w = match byte {
        32..=126 => HELVETICA[usize::from(byte - 32)],
        _ => 556,
    };
    f64::from(w) * size / 1000.0
}

/// `text` as WinAnsi bytes that fit in `room` points (cut, ending with `..`, when they do not).
fn fit(text: &str, room: f64, size: f64) -> Vec<u8> {
    let bytes: Vec<u8> = text.chars().map(win_ansi).collect();
    let total: f64 = bytes.iter().map(|b| width(*b, size)).sum();
    if total <= room {
        return bytes;
    }
    let room = room - 2.0 * width(b'.', size);
    let mut used = 0.0;
    let mut out = Vec::new();
    for b in bytes {
        used += width(b, size);
        if used > room {
            break;
        }
        out.push(b);
    }
    out.extend_from_slice(b"..");
    out
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
    /// The page being written: its content stream's object, where the stream's data began,
    /// and the baseline of the next row.
    stream: usize,
    stream_start: u64,
    y: f64,
    rows_on_page: usize,
}

impl PdfTable {
    /// Starts a document (header, catalog, fonts) with `columns` and a `title` on its first page.
    pub(crate) fn start(out: &mut Vec<u8>, title: &str, columns: &[&str]) -> Self {
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
        let mut pdf = Self {
            written: 0,
            offsets: vec![0; FIRST_FREE - 1],
            pages: Vec::new(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            xs,
            widths,
            title: title.to_owned(),
            stream: 0,
            stream_start: 0,
            y: 0.0,
            rows_on_page: 0,
        };
        // The binary comment marks the file as binary for transfer programs.
        pdf.emit(out, b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n");
        pdf.object(
            out,
            CATALOG,
            format!("<< /Type /Catalog /Pages {PAGES} 0 R >>").as_bytes(),
        );
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

    fn next_number(&self) -> usize {
        self.offsets.len() + 1
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
            let title = fit(&self.title, PAGE_W - 2.0 * MARGIN, TITLE_SIZE);
            self.text(out, FONT_BOLD, TITLE_SIZE, MARGIN, &title);
            self.y -= LEADING;
        }
        self.y -= FONT_SIZE;
        let header: Vec<Vec<u8>> = self
            .columns
            .iter()
            .zip(&self.widths)
            // Bold is a little wider than the widths measured: some room to spare.
            .map(|(c, w)| fit(c, (w - GAP) * 0.9, FONT_SIZE))
            .collect();
        for (i, cell) in header.iter().enumerate() {
            self.text(out, FONT_BOLD, FONT_SIZE, self.xs[i], cell);
        }
        let rule_y = self.y - 2.5;
        let rule = format!(
            "0.5 w {MARGIN} {rule_y:.2} m {:.2} {rule_y:.2} l S\n",
            PAGE_W - MARGIN
        );
        self.emit(out, rule.as_bytes());
        self.y -= LEADING + 1.0;
    }

    fn text(&mut self, out: &mut Vec<u8>, font: usize, size: f64, x: f64, bytes: &[u8]) {
        let font = if font == FONT_BOLD { "F2" } else { "F1" };
        let mut op = format!("BT /{font} {size} Tf {x:.2} {:.2} Td ", self.y).into_bytes();
        literal(&mut op, bytes);
        op.extend_from_slice(b" Tj ET\n");
        self.emit(out, &op);
    }

    /// Ends the page: the footer, the end of its content stream, the stream's length, the
    /// page object.
    fn end_page(&mut self, out: &mut Vec<u8>) {
        let number = self.pages.len() + 1;
        let foot = format!("page {number}");
        self.y = MARGIN / 2.0;
        self.text(
            out,
            FONT,
            FONT_SIZE,
            PAGE_W - MARGIN - 40.0,
            foot.as_bytes(),
        );
        let stream = self.stream;
        let length = self.written - self.stream_start;
        self.emit(out, b"\nendstream\nendobj\n");
        self.object(out, stream + 1, length.to_string().as_bytes());
        let page = stream + 2;
        let dict = format!(
            "<< /Type /Page /Parent {PAGES} 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] \
             /Resources << /Font << /F1 {FONT} 0 R /F2 {FONT_BOLD} 0 R >> >> \
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
            let fitted = fit(cell, self.widths[i] - GAP, FONT_SIZE);
            if !fitted.is_empty() {
                self.text(out, FONT, FONT_SIZE, self.xs[i], &fitted);
            }
        }
        self.y -= LEADING;
        self.rows_on_page += 1;
    }

    /// Ends the document: the last page, the page tree, the cross-reference table, the trailer.
    pub(crate) fn finish(mut self, out: &mut Vec<u8>, rows: i64) {
        if rows == 0 && self.rows_on_page == 0 {
            self.text(out, FONT, FONT_SIZE, MARGIN, b"No rows.");
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
}

/// How much of the line a column gets: ids (UUIDs) and times are long, the rest share.
fn column_weight(name: &str) -> f64 {
    if name == "id" || name.ends_with("Id") {
        2.2
    } else if name.ends_with("At") || name == "at" {
        1.7
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

    fn document(rows: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut pdf = PdfTable::start(&mut out, "Device inventory (ACME)", &["id", "hostname"]);
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
        let pdf = document(500);
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
    }

    #[test]
    fn an_empty_table_is_one_page() {
        let pdf = document(0);
        assert_eq!(check_structure(&pdf), 1);
        assert!(String::from_utf8_lossy(&pdf).contains("(No rows.) Tj"));
    }

    #[test]
    fn long_cells_are_cut_to_their_column() {
        let cut = fit(&"W".repeat(200), 50.0, FONT_SIZE);
        assert!(cut.ends_with(b".."));
        let w: f64 = cut.iter().map(|b| width(*b, FONT_SIZE)).sum();
        assert!(w <= 50.0, "{w}");
        assert_eq!(fit("short", 50.0, FONT_SIZE), b"short");
    }
}
