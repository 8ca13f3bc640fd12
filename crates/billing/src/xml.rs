//! A small, strict XML reader for the documents the distributor answers: elements, attributes
//! (read past), text, CDATA, comments, the XML declaration, and the five predefined entities
//! plus numeric character references. A document type declaration is refused (so no entity
//! of the sender's is ever expanded), as are mismatched tags, more than [`MAX_DEPTH`] levels
//! and more than [`MAX_ELEMENTS`] elements.

/// The deepest nesting read.
const MAX_DEPTH: usize = 32;
/// The most elements one document may hold.
const MAX_ELEMENTS: usize = 20_000;

/// One element: its name, its text (the concatenation of its direct text), its children.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The trimmed text of the first child named `name`, if it has any.
    pub(crate) fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name)
            .map(|c| c.text.trim())
            .filter(|t| !t.is_empty())
    }
}

/// Why a document was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not well-formed XML: {0}")]
pub(crate) struct XmlError(String);

fn err<T>(why: impl Into<String>) -> Result<T, XmlError> {
    Err(XmlError(why.into()))
}

/// Reads `doc` into its root element.
pub(crate) fn parse(doc: &str) -> Result<Element, XmlError> {
    let mut p = Parser {
        s: doc.strip_prefix('\u{feff}').unwrap_or(doc),
        elements: 0,
    };
    p.misc()?;
    if !p.s.starts_with('<') {
        return err("no root element");
    }
    let root = p.element(0)?;
    p.misc()?;
    if !p.s.is_empty() {
        return err("content after the root element");
    }
    Ok(root)
}

struct Parser<'a> {
    s: &'a str,
    elements: usize,
}

impl Parser<'_> {
    /// Skips white space, comments and processing instructions (the declaration).
    fn misc(&mut self) -> Result<(), XmlError> {
        loop {
            self.s = self.s.trim_start();
            if self.s.starts_with("<?") {
                self.skip_past("?>")?;
            } else if self.s.starts_with("<!--") {
                self.skip_past("-->")?;
            } else if self.s.starts_with("<!") {
                return err("document type declarations are not read");
            } else {
                return Ok(());
            }
        }
    }

    fn skip_past(&mut self, end: &str) -> Result<(), XmlError> {
        match self.s.find(end) {
            Some(i) => {
                self.s = &self.s[i + end.len()..];
                Ok(())
            }
            None => err(format!("unterminated, expected {end}")),
        }
    }

    fn name(&mut self) -> Result<String, XmlError> {
        let end = self
            .s
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/' || c == '=')
            .unwrap_or(self.s.len());
        let name = &self.s[..end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
        {
            return err("a bad element name");
        }
        self.s = &self.s[end..];
        Ok(name.to_owned())
    }

    /// An element starting at `<`.
    fn element(&mut self, depth: usize) -> Result<Element, XmlError> {
        if depth >= MAX_DEPTH {
            return err("nested too deep");
        }
        self.elements += 1;
        if self.elements > MAX_ELEMENTS {
            return err("too many elements");
        }
        self.s = &self.s[1..];
        let name = self.name()?;
        // Attributes: name="value" or name='value', read past.
        loop {
            self.s = self.s.trim_start();
            if let Some(rest) = self.s.strip_prefix("/>") {
                self.s = rest;
                return Ok(Element {
                    name,
                    ..Element::default()
                });
            }
            if let Some(rest) = self.s.strip_prefix('>') {
                self.s = rest;
                break;
            }
            self.name()?;
            self.s = self.s.trim_start();
            let Some(rest) = self.s.strip_prefix('=') else {
                return err("an attribute without a value");
            };
            let rest = rest.trim_start();
            let quote = match rest.chars().next() {
                Some(q @ ('"' | '\'')) => q,
                _ => return err("an unquoted attribute value"),
            };
            match rest[1..].find(quote) {
                Some(i) => self.s = &rest[i + 2..],
                None => return err("an unterminated attribute value"),
            }
        }
        let mut el = Element {
            name,
            ..Element::default()
        };
        loop {
            let lt = self
                .s
                .find('<')
                .ok_or_else(|| XmlError(format!("<{}> is not closed", el.name)))?;
            el.text.push_str(&unescape(&self.s[..lt])?);
            self.s = &self.s[lt..];
            if let Some(rest) = self.s.strip_prefix("</") {
                self.s = rest;
                let close = self.name()?;
                self.s = self.s.trim_start();
                let Some(rest) = self.s.strip_prefix('>') else {
                    return err("a bad closing tag");
                };
                self.s = rest;
                if close != el.name {
                    return err(format!("<{}> closed by </{close}>", el.name));
                }
                return Ok(el);
            } else if let Some(rest) = self.s.strip_prefix("<![CDATA[") {
                let end = rest
                    .find("]]>")
                    .ok_or_else(|| XmlError("an unterminated CDATA section".into()))?;
                el.text.push_str(&rest[..end]);
                self.s = &rest[end + 3..];
            } else if self.s.starts_with("<!--") {
                self.skip_past("-->")?;
            } else if self.s.starts_with("<?") {
                self.skip_past("?>")?;
            } else if self.s.starts_with("<!") {
                return err("a declaration inside an element");
            } else {
                let child = self.element(depth + 1)?;
                el.children.push(child);
            }
        }
    }
}

/// Text with its references resolved.
fn unescape(text: &str) -> Result<String, XmlError> {
    if !text.contains('&') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let end = after
            .find(';')
            .filter(|e| *e <= 10)
            .ok_or_else(|| XmlError("a bare &".into()))?;
        let name = &after[..end];
        let c = match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = name.strip_prefix("#x") {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#') {
                    dec.parse::<u32>().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32)
                    .filter(|c| *c != '\0')
                    .ok_or_else(|| XmlError(format!("an unknown reference &{name};")))?
            }
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `text` escaped for element content.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use super::*;

    #[test]
    fn reads_documents_and_refuses_what_it_does_not_understand() {
        let doc = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- hi -->\n\
            <priceResponse version='2.8'><a>x &amp; y &#65;&#x42;</a><b/><a><![CDATA[<raw>]]></a>\
            </priceResponse>";
        let root = parse(doc).unwrap();
        assert_eq!(root.name, "priceResponse");
        assert_eq!(root.text_of("a"), Some("x & y AB"));
        assert_eq!(root.all("a").nth(1).unwrap().text, "<raw>");
        assert!(root.child("b").is_some() && root.text_of("b").is_none());
        for bad in [
            "",
            "<a>",
            "<a></b>",
            "<a>&bogus;</a>",
            "<a>& </a>",
            "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
            "<a b=c></a>",
            "<a></a><b></b>",
            "<a>&#0;</a>",
            "text",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was read");
        }
        let deep = format!("{}{}", "<a>".repeat(40), "</a>".repeat(40));
        assert!(parse(&deep).is_err());
        assert_eq!(escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(
            parse(&format!("<a>{}</a>", escape("<&>"))).unwrap().text,
            "<&>"
        );
    }
}
