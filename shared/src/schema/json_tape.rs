//! A JSON tokenizer for typing JSON lines straight into Arrow columns, without building
//! `serde_json` values first.
//!
//! [`Tape::parse`] accepts a *subset* of what `serde_json` accepts, and reads every value it
//! accepts exactly as `serde_json` would. A line outside the subset is refused (`false`),
//! never misread: the caller then parses it with `serde_json`, which also gives the exact
//! error for a line that is not JSON. Refused, although `serde_json` may take them:
//!
//! - a top-level value that is not an object;
//! - nesting deeper than [`MAX_NESTING`] objects and arrays;
//! - a `\u` escape of a UTF-16 surrogate (paired or not).
//!
//! Like `serde_json`, it rejects strings that are not UTF-8 (outside strings the grammar
//! takes ASCII only). Numbers are kept as text and read by [`integer`], [`number`] and [`integer_text`], which
//! give `serde_json`'s value or `None` when the number needs `serde_json`'s slower paths.

/// The deepest nesting of objects and arrays accepted (`serde_json` allows 128).
pub(crate) const MAX_NESTING: u32 = 64;

/// One token of a line, with byte ranges into the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    /// An object: its members follow as key, value, key, value, ...; `end` is the index of
    /// the first token after the object.
    Object {
        /// The index of the first token after the object.
        end: u32,
    },
    /// An array: its elements follow; `end` is the index of the first token after it.
    Array {
        /// The index of the first token after the array.
        end: u32,
    },
    /// A string or an object key: the bytes between its quotes.
    String {
        /// First byte after the opening quote.
        start: u32,
        /// The closing quote.
        end: u32,
        /// Whether it holds a backslash escape (the bytes are not the string's text).
        escaped: bool,
    },
    /// A number without fraction or exponent.
    Integer {
        /// First byte (the sign, if any).
        start: u32,
        /// One past the last byte.
        end: u32,
    },
    /// A number with a fraction or an exponent.
    Float {
        /// First byte (the sign, if any).
        start: u32,
        /// One past the last byte.
        end: u32,
    },
    /// `true`.
    True,
    /// `false`.
    False,
    /// `null`.
    Null,
}

impl Token {
    /// The byte range of a string or number token.
    pub(crate) fn span(self) -> Option<std::ops::Range<usize>> {
        match self {
            Token::String { start, end, .. }
            | Token::Integer { start, end }
            | Token::Float { start, end } => Some(start as usize..end as usize),
            _ => None,
        }
    }
}

/// The tokens of one line; reused from line to line.
#[derive(Debug, Default)]
pub(crate) struct Tape {
    tokens: Vec<Token>,
}

impl Tape {
    /// Tokenize `line` as one JSON object. `false` when the line is outside the accepted
    /// subset (see the [module docs](self)); the tokens are then meaningless.
    pub(crate) fn parse(&mut self, line: &[u8]) -> bool {
        self.tokens.clear();
        if u32::try_from(line.len()).is_err() {
            return false;
        }
        let mut parser = Parser {
            bytes: line,
            pos: 0,
            tokens: &mut self.tokens,
        };
        parser.skip_whitespace();
        if parser.peek() != Some(b'{') || parser.object(0).is_none() {
            return false;
        }
        parser.skip_whitespace();
        parser.pos == line.len()
    }

    /// The tokens; the record's object is the first.
    pub(crate) fn tokens(&self) -> &[Token] {
        &self.tokens
    }
}

/// The index of the first token after the value at `at`.
pub(crate) fn skip(tokens: &[Token], at: usize) -> usize {
    match tokens.get(at) {
        Some(Token::Object { end } | Token::Array { end }) => *end as usize,
        _ => at + 1,
    }
}

/// Bytes a string scan stops at: the closing quote, a backslash, and the control characters
/// JSON forbids in strings.
const STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    tokens: &'a mut Vec<Token>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// The value at the current position (after whitespace).
    fn value(&mut self, depth: u32) -> Option<()> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => {
                let token = self.string()?;
                self.tokens.push(token);
                Some(())
            }
            b't' => self.literal(b"true", Token::True),
            b'f' => self.literal(b"false", Token::False),
            b'n' => self.literal(b"null", Token::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, text: &[u8], token: Token) -> Option<()> {
        if self.bytes.get(self.pos..self.pos + text.len())? != text {
            return None;
        }
        self.pos += text.len();
        self.tokens.push(token);
        Some(())
    }

    /// The object starting at the current `{`.
    fn object(&mut self, depth: u32) -> Option<()> {
        if depth >= MAX_NESTING {
            return None;
        }
        let at = self.tokens.len();
        self.tokens.push(Token::Object { end: 0 });
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_whitespace();
                if self.peek() != Some(b'"') {
                    return None;
                }
                let key = self.string()?;
                self.tokens.push(key);
                self.skip_whitespace();
                if self.peek() != Some(b':') {
                    return None;
                }
                self.pos += 1;
                self.value(depth + 1)?;
                self.skip_whitespace();
                match self.peek()? {
                    b',' => self.pos += 1,
                    b'}' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        let end = u32::try_from(self.tokens.len()).ok()?;
        *self.tokens.get_mut(at)? = Token::Object { end };
        Some(())
    }

    /// The array starting at the current `[`.
    fn array(&mut self, depth: u32) -> Option<()> {
        if depth >= MAX_NESTING {
            return None;
        }
        let at = self.tokens.len();
        self.tokens.push(Token::Array { end: 0 });
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                self.value(depth + 1)?;
                self.skip_whitespace();
                match self.peek()? {
                    b',' => self.pos += 1,
                    b']' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        let end = u32::try_from(self.tokens.len()).ok()?;
        *self.tokens.get_mut(at)? = Token::Array { end };
        Some(())
    }

    /// The string starting at the current `"`.
    fn string(&mut self) -> Option<Token> {
        let start = self.pos + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            let rest = self.bytes.get(at..)?;
            at += rest
                .iter()
                .position(|&byte| STRING_STOP[usize::from(byte)])?;
            match self.bytes.get(at)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    at = self.escape(at + 1)?;
                }
                _ => return None,
            }
        }
        // Outside strings the grammar takes ASCII only, so this checks the whole line.
        let text = self.bytes.get(start..at)?;
        if !text.is_ascii() && std::str::from_utf8(text).is_err() {
            return None;
        }
        self.pos = at + 1;
        Some(Token::String {
            start: u32::try_from(start).ok()?,
            end: u32::try_from(at).ok()?,
            escaped,
        })
    }

    /// Check the escape whose letter is at `at`; the index after it.
    fn escape(&self, at: usize) -> Option<usize> {
        match self.bytes.get(at)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 1),
            b'u' => {
                let code = hex4(self.bytes.get(at + 1..at + 5)?)?;
                (!(0xD800..0xE000).contains(&code)).then_some(at + 5)
            }
            _ => None,
        }
    }

    /// The number at the current position (JSON's grammar, which `serde_json` follows).
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        let mut at = start;
        let digit = |at: usize| self.bytes.get(at).is_some_and(u8::is_ascii_digit);
        if self.bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        match self.bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => {
                while digit(at) {
                    at += 1;
                }
            }
            _ => return None,
        }
        let mut float = false;
        if self.bytes.get(at) == Some(&b'.') {
            at += 1;
            if !digit(at) {
                return None;
            }
            while digit(at) {
                at += 1;
            }
            float = true;
        }
        if let Some(b'e' | b'E') = self.bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(at) {
                at += 1;
            }
            if !digit(at) {
                return None;
            }
            while digit(at) {
                at += 1;
            }
            float = true;
        }
        let (start, end) = (u32::try_from(start).ok()?, u32::try_from(at).ok()?);
        self.pos = at;
        self.tokens.push(if float {
            Token::Float { start, end }
        } else {
            Token::Integer { start, end }
        });
        Some(())
    }
}

/// Four hex digits.
fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |code, &byte| {
        Some(code * 16 + char::from(byte).to_digit(16)?)
    })
}

/// The text of a string token: borrowed from the line, or unescaped into `scratch`.
pub(crate) fn string_text<'a>(
    token: Token,
    line: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> Option<&'a [u8]> {
    let Token::String {
        start,
        end,
        escaped,
    } = token
    else {
        return None;
    };
    let raw = line.get(start as usize..end as usize)?;
    if !escaped {
        return Some(raw);
    }
    scratch.clear();
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', raw.get(at..)?) {
        scratch.extend_from_slice(raw.get(at..at + found)?);
        at += found + 1;
        let unescaped = match *raw.get(at)? {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let code = char::from_u32(hex4(raw.get(at + 1..at + 5)?)?)?;
                let mut utf8 = [0; 4];
                scratch.extend_from_slice(code.encode_utf8(&mut utf8).as_bytes());
                at += 5;
                continue;
            }
            _ => return None,
        };
        scratch.push(unescaped);
        at += 1;
    }
    scratch.extend_from_slice(raw.get(at..)?);
    Some(scratch)
}

/// The sign and the digits (as a `u64`, `None` on overflow) of an integer's text.
fn sign_and_significand(text: &[u8]) -> Option<(bool, u64)> {
    let (negative, digits) = match text.split_first()? {
        (b'-', digits) => (true, digits),
        _ => (false, text),
    };
    let significand = digits.iter().try_fold(0u64, |value, &byte| {
        value
            .checked_mul(10)?
            .checked_add(u64::from(byte.wrapping_sub(b'0')))
    })?;
    Some((negative, significand))
}

/// An integer token's value as `serde_json::Value::as_i64` gives it: `None` for `-0` and
/// beyond 64 bits (which `serde_json` reads as floats).
pub(crate) fn integer(text: &[u8]) -> Option<i64> {
    let (negative, significand) = sign_and_significand(text)?;
    if negative {
        // `serde_json` makes `-0`, and what does not fit an `i64`, a float.
        let negated = (significand as i64).wrapping_neg();
        (negated < 0).then_some(negated)
    } else {
        i64::try_from(significand).ok()
    }
}

/// The text `serde_json` writes for an integer token's number: the token itself when it is
/// an integer to `serde_json` too; `None` for `-0` and integers beyond 64 bits.
pub(crate) fn integer_text(text: &[u8]) -> Option<&[u8]> {
    let (negative, significand) = sign_and_significand(text)?;
    let integer = !negative || (significand as i64).wrapping_neg() < 0;
    integer.then_some(text)
}

/// Exact powers of ten, as `serde_json` uses them.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A number token's value as `serde_json::Value::as_f64` gives it (`serde_json` without
/// `float_roundtrip`: the digits as a `u64`, converted, then one multiplication or division
/// by a power of ten), or `None` when `serde_json` would take a slower path (more digits than
/// a `u64` holds, or a decimal exponent beyond +-22).
pub(crate) fn number(token: Token, line: &[u8]) -> Option<f64> {
    let text = line.get(token.span()?)?;
    if let Token::Integer { .. } = token {
        let (negative, significand) = sign_and_significand(text)?;
        let value = significand as f64;
        return Some(if negative { -value } else { value });
    }
    let (negative, rest) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    let mut significand: u64 = 0;
    let mut exponent: i32 = 0;
    let mut bytes = rest.iter().copied().peekable();
    while let Some(byte) = bytes.next_if(u8::is_ascii_digit) {
        significand = significand
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    if bytes.next_if_eq(&b'.').is_some() {
        while let Some(byte) = bytes.next_if(u8::is_ascii_digit) {
            significand = significand
                .checked_mul(10)?
                .checked_add(u64::from(byte - b'0'))?;
            exponent -= 1;
        }
    }
    if bytes.next_if(|byte| matches!(byte, b'e' | b'E')).is_some() {
        let negative_exponent = match bytes.next_if(|byte| matches!(byte, b'+' | b'-')) {
            Some(sign) => sign == b'-',
            None => false,
        };
        let mut written: i32 = 0;
        while let Some(byte) = bytes.next_if(u8::is_ascii_digit) {
            written = written
                .checked_mul(10)?
                .checked_add(i32::from(byte - b'0'))?;
            if written > 1000 {
                return None;
            }
        }
        exponent += if negative_exponent { -written } else { written };
    }
    if bytes.next().is_some() {
        return None;
    }
    let power = *POW10.get(usize::try_from(exponent.unsigned_abs()).ok()?)?;
    let mut value = significand as f64;
    if exponent >= 0 {
        value *= power;
    } else {
        value /= power;
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn parse(text: &str) -> Option<Vec<Token>> {
        let mut tape = Tape::default();
        tape.parse(text.as_bytes()).then(|| tape.tokens().to_vec())
    }

    #[test]
    fn an_object_tokenizes_with_the_end_of_each_container() {
        let tokens = parse(r#" {"a": [1, -2.5e3, "x"], "b": {"c": null}, "d": true} "#).unwrap();
        assert_eq!(tokens.len(), 12);
        assert_eq!(tokens[0], Token::Object { end: 12 });
        assert_eq!(tokens[2], Token::Array { end: 6 });
        assert!(matches!(tokens[3], Token::Integer { .. }));
        assert!(matches!(tokens[4], Token::Float { .. }));
        assert_eq!(tokens[7], Token::Object { end: 10 });
        assert_eq!(tokens[9], Token::Null);
        assert_eq!(tokens[11], Token::True);
        assert_eq!(skip(&tokens, 2), 6);
    }

    #[test]
    fn lines_outside_the_subset_are_refused() {
        for text in [
            "[1]",
            "42",
            "{\"a\":1} x",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":.5}",
            "{\"a\":+1}",
            "{\"a\":tru}",
            "{\"a\":\"\\ud800\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":1,}",
            "{a:1}",
            "{\"a\" 1}",
            "",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
        assert!(!Tape::default().parse(b"{\"a\":\"\xff\"}"));
        assert!(!Tape::default().parse(b"{\"a\"\xc3\xa9:1}"));
        assert!(Tape::default().parse("{\"\u{e9}\":\"\u{65e5}\u{672c} \u{2713}\"}".as_bytes()));
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(70), "]".repeat(70));
        assert_eq!(parse(&deep), None);
    }

    #[test]
    fn escaped_strings_read_as_serde_json_reads_them() {
        let line = r#"{"k":"a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac!"}"#;
        let tokens = parse(line).unwrap();
        let mut scratch = Vec::new();
        let text = string_text(tokens[2], line.as_bytes(), &mut scratch).unwrap();
        let expected: Value = serde_json::from_str(line).unwrap();
        assert_eq!(text, expected["k"].as_str().unwrap().as_bytes());
    }

    /// JSON number text, including the awkward cases.
    fn number_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |n| n.is_finite())
                .prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |n| n.is_finite())
                .prop_map(|n| format!("{n:e}")),
            (
                any::<bool>(),
                "[0-9]{1,25}",
                "[0-9]{0,25}",
                prop::option::of(-40i32..40)
            )
                .prop_map(|(negative, int, frac, exp)| {
                    let int = int.trim_start_matches('0');
                    let int = if int.is_empty() { "0" } else { int };
                    let mut text = format!("{}{int}", if negative { "-" } else { "" });
                    if !frac.is_empty() {
                        text.push('.');
                        text.push_str(&frac);
                    }
                    if let Some(exp) = exp {
                        text.push_str(&format!("e{exp}"));
                    }
                    text
                }),
            Just("-0".to_owned()),
            Just("-0.0".to_owned()),
            Just("1E+2".to_owned()),
            Just("9223372036854775808".to_owned()),
            Just("-9223372036854775808".to_owned()),
            Just("-9223372036854775809".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn numbers_read_as_serde_json_reads_them(text in number_text()) {
            let line = format!("{{\"n\":{text}}}");
            let expected: Value = serde_json::from_str(&line).unwrap();
            let expected = &expected["n"];
            let tokens = parse(&line).unwrap();
            let token = tokens[2];
            let span = token.span().unwrap();
            let bytes = &line.as_bytes()[span];
            if let Some(value) = number(token, line.as_bytes()) {
                prop_assert_eq!(Some(value.to_bits()), expected.as_f64().map(f64::to_bits));
            }
            if let Token::Integer { .. } = token {
                if let Some(value) = integer(bytes) {
                    prop_assert_eq!(Some(value), expected.as_i64());
                } else {
                    prop_assert!(expected.as_i64().is_none() || bytes.len() > 19);
                }
                if let Some(text) = integer_text(bytes) {
                    prop_assert_eq!(std::str::from_utf8(text).unwrap(), expected.to_string());
                }
            } else {
                prop_assert!(expected.is_f64());
            }
        }

        #[test]
        fn every_line_accepted_parses_with_serde_json(text in "[ -~]{0,40}") {
            let line = format!("{{\"k\":{text}}}");
            if parse(&line).is_some() {
                prop_assert!(serde_json::from_str::<Value>(&line).is_ok(), "{}", line);
            }
        }
    }
}
