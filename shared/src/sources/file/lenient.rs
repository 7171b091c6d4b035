//! Lenient JSON, turned on by the transforms `enable_single_quote_parsing` and
//! `enable_unicode_parsing` for the JSON formats of the File and S3 sources.
//!
//! A record is parsed as strict JSON first; only a record that fails is rewritten and parsed
//! again, so well-formed input costs nothing. A record that still fails is deadlettered with
//! the strict parser's error, as without the transforms.
//!
//! - `enable_single_quote_parsing`: strings may be in single quotes (`{'name': 'O\'Brien'}`,
//!   as Python's `repr` and some loggers write them); a `"` inside one is kept, `\'` is a quote.
//! - `enable_unicode_parsing`: bytes that are not UTF-8 and escapes of a lone UTF-16
//!   surrogate (`"\ud800"`) become U+FFFD, and raw control characters inside strings (a tab,
//!   a newline) are read as if escaped, where strict JSON refuses the record.
//!
//! Element boundaries of a JSON array or of concatenated documents are found as for strict
//! JSON, so in those formats a single-quoted string must not hold a bracket or a brace.

/// Which lenient readings are on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leniency {
    /// Strings in single quotes (`enable_single_quote_parsing`).
    pub single_quotes: bool,
    /// Broken UTF-8, lone surrogates and raw control characters (`enable_unicode_parsing`).
    pub unicode: bool,
}

impl Leniency {
    /// Whether any lenient reading is on.
    pub fn is_active(&self) -> bool {
        self.single_quotes || self.unicode
    }

    /// `text` rewritten as strict JSON by the readings that are on.
    pub(crate) fn rewrite(&self, text: &[u8]) -> Vec<u8> {
        let mut out: Vec<u8> = if self.unicode {
            String::from_utf8_lossy(text).into_owned().into_bytes()
        } else {
            text.to_vec()
        };
        if self.single_quotes {
            out = single_to_double(&out);
        }
        if self.unicode {
            out = mend_strings(&out);
        }
        out
    }
}

/// Single-quoted strings rewritten as double-quoted ones; double-quoted strings untouched.
fn single_to_double(text: &[u8]) -> Vec<u8> {
    #[derive(PartialEq)]
    enum In {
        Code,
        Double,
        Single,
    }
    let mut out = Vec::with_capacity(text.len() + 8);
    let mut state = In::Code;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        match state {
            In::Code => {
                match b {
                    b'"' => state = In::Double,
                    b'\'' => {
                        state = In::Single;
                        out.push(b'"');
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
                out.push(b);
            }
            In::Double => {
                out.push(b);
                if b == b'\\' {
                    if let Some(&next) = text.get(i + 1) {
                        out.push(next);
                        i += 1;
                    }
                } else if b == b'"' {
                    state = In::Code;
                }
            }
            In::Single => match b {
                b'\\' => match text.get(i + 1) {
                    Some(b'\'') => {
                        out.push(b'\'');
                        i += 1;
                    }
                    Some(&next) => {
                        out.extend_from_slice(&[b'\\', next]);
                        i += 1;
                    }
                    None => out.push(b'\\'),
                },
                b'"' => out.extend_from_slice(b"\\\""),
                b'\'' => {
                    out.push(b'"');
                    state = In::Code;
                }
                _ => out.push(b),
            },
        }
        i += 1;
    }
    out
}

/// Inside strings: a lone surrogate escape becomes `\ufffd`, a raw control character its
/// `\u00XX` escape.
fn mend_strings(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 8);
    let mut in_string = false;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if !in_string {
            if b == b'"' {
                in_string = true;
            }
            out.push(b);
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = false;
                out.push(b);
            }
            b'\\' if text.get(i + 1) == Some(&b'u') => {
                let unit = hex4(text, i + 2);
                match unit {
                    Some(high @ 0xD800..=0xDBFF) => {
                        let low = (text.get(i + 6) == Some(&b'\\')
                            && text.get(i + 7) == Some(&b'u'))
                        .then(|| hex4(text, i + 8))
                        .flatten();
                        if matches!(low, Some(0xDC00..=0xDFFF)) {
                            out.extend_from_slice(&text[i..i + 12]);
                            i += 12;
                        } else {
                            let _ = high;
                            out.extend_from_slice(b"\\ufffd");
                            i += 6;
                        }
                        continue;
                    }
                    Some(0xDC00..=0xDFFF) => {
                        out.extend_from_slice(b"\\ufffd");
                        i += 6;
                        continue;
                    }
                    _ => out.extend_from_slice(b"\\u"),
                }
                i += 2;
                continue;
            }
            b'\\' => {
                out.push(b);
                if let Some(&next) = text.get(i + 1) {
                    out.push(next);
                    i += 1;
                }
            }
            0x00..=0x1F => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

/// The four hex digits at `at`, as a number.
fn hex4(text: &[u8], at: usize) -> Option<u32> {
    let digits = text.get(at..at + 4)?;
    let s = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn read(l: Leniency, text: &[u8]) -> Value {
        serde_json::from_slice(&l.rewrite(text))
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&l.rewrite(text))))
    }

    const QUOTES: Leniency = Leniency {
        single_quotes: true,
        unicode: false,
    };
    const UNICODE: Leniency = Leniency {
        single_quotes: false,
        unicode: true,
    };

    #[test]
    fn single_quoted_strings_read_as_strings_and_double_quoted_ones_are_untouched() {
        assert_eq!(
            read(
                QUOTES,
                br#"{'name': 'O\'Brien', 'say': 'a "b" c', "k": "it's", 'n': 1}"#
            ),
            json!({"name": "O'Brien", "say": "a \"b\" c", "k": "it's", "n": 1})
        );
        assert_eq!(
            read(QUOTES, br"{'path': 'C:\\dir', 'nl': 'a\nb'}"),
            json!({"path": "C:\\dir", "nl": "a\nb"})
        );
        // Strict JSON is left as it is.
        let strict = br#"{"a":"x\"'y","b":[1,2]}"#;
        assert_eq!(QUOTES.rewrite(strict), strict.to_vec());
    }

    #[test]
    fn broken_utf8_lone_surrogates_and_raw_control_characters_become_readable() {
        assert_eq!(
            read(UNICODE, b"{\"a\":\"caf\xe9\",\"b\":1}"),
            json!({"a": "caf\u{fffd}", "b": 1})
        );
        assert_eq!(
            read(
                UNICODE,
                br#"{"a":"x\ud800y","b":"\udc00","ok":"\ud83d\ude00","e":"\\ud800"}"#
            ),
            json!({"a": "x\u{fffd}y", "b": "\u{fffd}", "ok": "\u{1f600}", "e": "\\ud800"})
        );
        assert_eq!(
            read(UNICODE, b"{\"a\":\"tab\there\",\"b\":\"line\nbreak\"}"),
            json!({"a": "tab\there", "b": "line\nbreak"})
        );
        // Without the reading these all fail strict parsing.
        for text in [
            &b"{\"a\":\"caf\xe9\"}"[..],
            br#"{"a":"\ud800"}"#,
            b"{\"a\":\"tab\there\"}",
        ] {
            assert!(serde_json::from_slice::<Value>(text).is_err());
        }
    }

    #[test]
    fn both_readings_together() {
        let both = Leniency {
            single_quotes: true,
            unicode: true,
        };
        assert_eq!(
            read(both, b"{'a': 'caf\xe9\tx', 'b': '\\ud800'}"),
            json!({"a": "caf\u{fffd}\tx", "b": "\u{fffd}"})
        );
    }
}
