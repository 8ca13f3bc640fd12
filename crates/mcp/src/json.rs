//! Writing JSON on the hot path: string escaping and the one result shape worth writing by
//! hand (a tool result, whose text block is its structured content as escaped JSON text).
//!
//! Everything written here is byte-for-byte what `serde_json` writes for the same value; the
//! tests hold both to that. It exists because it is faster than going through `serde_json`'s
//! serializer for the text block every tool result repeats.

/// Whether `b` must be escaped inside a JSON string (as `serde_json` does: quote, backslash,
/// control characters; not `/`, not DEL, not non-ASCII).
#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

fn push_escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
    }
}

/// Appends `s` as a quoted JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    // Without control characters (JSON text never has raw ones) only quotes and backslashes
    // are escaped: one pass over a buffer sized for the worst case, no call per escape.
    let controls = bytes.iter().fold(false, |c, &b| c | (b < 0x20));
    if !controls {
        let base = out.len();
        out.resize(base + 2 * bytes.len() + 2, 0);
        let buf = &mut out[base..];
        buf[0] = b'"';
        let mut j = 1;
        for &b in bytes {
            if b == b'"' || b == b'\\' {
                buf[j] = b'\\';
                buf[j + 1] = b;
                j += 2;
            } else {
                buf[j] = b;
                j += 1;
            }
        }
        buf[j] = b'"';
        out.truncate(base + j + 1);
        return;
    }
    out.reserve(bytes.len() + bytes.len() / 8 + 2);
    out.push(b'"');
    let mut copied = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if needs_escape(b) {
            out.extend_from_slice(&bytes[copied..i]);
            push_escape(out, b);
            copied = i + 1;
        }
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_exactly_as_serde_json() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "plain".into(),
            r#"{"devices":[{"id":"a\"b","path":"C:\\Temp"}],"total":3}"#.into(),
            "tab\tnew\nline\rcr\u{8}bs\u{c}ff\u{1}\u{1f}\u{7f}/é😀".into(),
            "\"".repeat(40),
            format!("{}\"{}", "x".repeat(15), "y".repeat(17)),
        ];
        // Every byte value below 0x80 at every position of a 40-byte string.
        for b in 0u8..0x80 {
            for at in [0, 7, 15, 16, 17, 31, 39] {
                let mut s = vec![b'a'; 40];
                s[at] = b;
                cases.push(String::from_utf8(s).unwrap());
            }
        }
        for s in cases {
            assert_eq!(escaped(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn tool_results_are_written_as_serde_writes_them() {
        use crate::model::{CallToolResult, Content};
        let structured = serde_json::value::to_raw_value(
            &serde_json::json!({ "devices": [{ "hostname": "a\"b", "tags": ["x\\y"] }], "total": 1 }),
        )
        .unwrap();
        let full = CallToolResult {
            content: vec![
                Content::text(structured.get()),
                Content::Image {
                    data: "aGk=".into(),
                    mime_type: "image/png".into(),
                },
                Content::text("line\n\u{1}"),
            ],
            structured_content: Some(structured),
            is_error: true,
            meta: Some(
                crate::model::shared_json(
                    &serde_json::json!({ "breeze/tier": 1, "server": { "name": "x" } }),
                )
                .unwrap(),
            ),
        };
        for result in [
            full.clone(),
            CallToolResult::text("plain"),
            CallToolResult::error("it \"failed\""),
            CallToolResult {
                content: Vec::new(),
                ..full
            },
        ] {
            assert_eq!(
                String::from_utf8(result.to_json_bytes()).unwrap(),
                serde_json::to_string(&result).unwrap()
            );
        }
    }
}
