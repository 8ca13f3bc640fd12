//! Server-sent events as the providers send them (the WHATWG event-stream format): lines
//! ending in LF, CRLF or CR; `event:` and `data:` fields (several `data:` lines joined with
//! LF); comments (`:`) ignored; a blank line ends an event. Bytes arrive in arbitrary chunks,
//! so a line or a UTF-8 sequence may be split anywhere.

/// One event: its `event:` name (empty when none) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) name: String,
    pub(crate) data: String,
}

/// Incremental parser: feed chunks, take whole events.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    buf: Vec<u8>,
    name: String,
    data: Vec<String>,
    /// A CR ended the last line: a following LF belongs to it.
    after_cr: bool,
}

/// The most bytes one line may hold: a provider that never ends a line cannot grow memory.
const MAX_LINE: usize = 4 << 20;

/// Why a stream could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    #[error("an event-stream line is longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("the event stream is not UTF-8")]
    NotUtf8,
}

impl Parser {
    /// Feeds `chunk`, returning the events it completed.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Event>, SseError> {
        let mut events = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    let line = String::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
                    if let Some(e) = self.line(&line) {
                        events.push(e);
                    }
                }
                _ => {
                    if self.buf.len() >= MAX_LINE {
                        return Err(SseError::LineTooLong);
                    }
                    self.buf.push(b);
                }
            }
        }
        Ok(events)
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            if self.data.is_empty() && self.name.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(Event {
                name: std::mem::take(&mut self.name),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.name = value.to_owned(),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_any_chunking_and_line_ending() {
        let text = "event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n: comment\n\nevent: a\ndata: x\ndata: y\r\rdata:z\n\n";
        let whole = Parser::default().feed(text.as_bytes()).unwrap();
        assert_eq!(
            whole,
            vec![
                Event {
                    name: "ping".into(),
                    data: "{\"type\": \"ping\"}".into()
                },
                Event {
                    name: "a".into(),
                    data: "x\ny".into()
                },
                Event {
                    name: String::new(),
                    data: "z".into()
                },
            ]
        );
        for split in 1..text.len() {
            let mut p = Parser::default();
            let mut got = p.feed(&text.as_bytes()[..split]).unwrap();
            got.extend(p.feed(&text.as_bytes()[split..]).unwrap());
            assert_eq!(got, whole, "split at {split}");
        }
    }

    #[test]
    fn a_split_utf8_sequence_is_joined_and_bad_bytes_refused() {
        let text = "data: grüße\n\n".as_bytes();
        let mut p = Parser::default();
        let mut got = p.feed(&text[..9]).unwrap();
        got.extend(p.feed(&text[9..]).unwrap());
        assert_eq!(got[0].data, "grüße");
        assert_eq!(
            Parser::default().feed(b"data: \xff\n\n"),
            Err(SseError::NotUtf8)
        );
    }
}
