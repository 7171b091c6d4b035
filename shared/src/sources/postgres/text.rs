//! Column values from PostgreSQL's text form to the same JSON values [`Decoder::decode`]
//! makes of the binary form, for the change stream (`pgoutput` sends text).
//!
//! The session is set up by `reader::connect` (`DateStyle` ISO, `TimeZone` UTC,
//! `extra_float_digits` 3, `bytea_output` hex), so the text of each type has one spelling.

use chrono::{Datelike, NaiveDate, NaiveDateTime};
use serde_json::Value;

use super::decode::{Decoder, float, format_date, format_timestamp};

impl Decoder {
    /// The JSON value of one non-null value's text; equal to [`Decoder::decode`] of the same
    /// value's binary form.
    pub(crate) fn parse_text(&self, text: &str) -> Result<Value, String> {
        Ok(match self {
            Decoder::Bool => match text {
                "t" | "true" => Value::Bool(true),
                "f" | "false" => Value::Bool(false),
                other => return Err(format!("`{other}` is not a boolean")),
            },
            Decoder::Int2 | Decoder::Int4 | Decoder::Int8 => Value::from(
                text.parse::<i64>()
                    .map_err(|e| format!("`{text}` is not an integer: {e}"))?,
            ),
            Decoder::Oid => Value::from(
                text.parse::<u32>()
                    .map_err(|e| format!("`{text}` is not an oid: {e}"))?,
            ),
            // float4 widened from its own precision, as the binary form is.
            Decoder::Float4 => float(f64::from(
                text.parse::<f32>()
                    .map_err(|e| format!("`{text}` is not a float4: {e}"))?,
            )),
            Decoder::Float8 => float(
                text.parse::<f64>()
                    .map_err(|e| format!("`{text}` is not a float8: {e}"))?,
            ),
            Decoder::Numeric
            | Decoder::Text
            | Decoder::Char
            | Decoder::Uuid
            | Decoder::Json
            | Decoder::Jsonb
            | Decoder::Bytea => Value::String(text.to_owned()),
            Decoder::Date => Value::String(match text {
                "infinity" | "-infinity" => text.to_owned(),
                _ => format_date(date(text)?),
            }),
            Decoder::Timestamp => Value::String(match text {
                "infinity" | "-infinity" => text.to_owned(),
                _ => format_timestamp(timestamp(text, false)?, ""),
            }),
            Decoder::Timestamptz => Value::String(match text {
                "infinity" | "-infinity" => text.to_owned(),
                _ => format_timestamp(timestamp(text, true)?, "Z"),
            }),
            Decoder::Time => Value::String(time(text)?),
            Decoder::Array(member) => array(member, text)?,
        })
    }
}

/// `text` without a trailing ` BC`, and whether it had one.
fn era(text: &str) -> (&str, bool) {
    match text.strip_suffix(" BC") {
        Some(rest) => (rest, true),
        None => (text, false),
    }
}

/// A year before the common era counts back from 1 BC = year 0 (chrono's and the binary
/// form's reckoning).
fn bc_year(year: i32) -> i32 {
    1 - year
}

/// chrono reads a year of more than four digits only after a sign.
fn signed_year(body: &str) -> std::borrow::Cow<'_, str> {
    match body.find('-') {
        Some(digits) if digits > 4 => format!("+{body}").into(),
        _ => body.into(),
    }
}

fn date(text: &str) -> Result<NaiveDate, String> {
    let (body, bc) = era(text);
    let body = signed_year(body);
    let day = NaiveDate::parse_from_str(&body, "%Y-%m-%d")
        .map_err(|e| format!("`{text}` is not a date: {e}"))?;
    if bc {
        day.with_year(bc_year(day.year()))
            .ok_or_else(|| format!("`{text}` is out of range"))
    } else {
        Ok(day)
    }
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]`, then for `timestamptz` an offset (`+00`, `+05:30`), then
/// ` BC` maybe; `timestamptz` is returned in UTC.
fn timestamp(text: &str, zoned: bool) -> Result<NaiveDateTime, String> {
    let (body, bc) = era(text);
    let body = signed_year(body);
    let bad = |e: chrono::ParseError| format!("`{text}` is not a timestamp: {e}");
    let at = if zoned {
        chrono::DateTime::parse_from_str(&body, "%Y-%m-%d %H:%M:%S%.f%#z")
            .map_err(bad)?
            .naive_utc()
    } else {
        NaiveDateTime::parse_from_str(&body, "%Y-%m-%d %H:%M:%S%.f").map_err(bad)?
    };
    if bc {
        at.with_year(bc_year(at.year()))
            .ok_or_else(|| format!("`{text}` is out of range"))
    } else {
        Ok(at)
    }
}

/// `HH:MM:SS[.f]` with the fraction padded to microseconds.
fn time(text: &str) -> Result<String, String> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let well_formed = whole.len() == 8
        && whole.bytes().enumerate().all(|(i, b)| {
            if i == 2 || i == 5 {
                b == b':'
            } else {
                b.is_ascii_digit()
            }
        })
        && fraction.len() <= 6
        && fraction.bytes().all(|b| b.is_ascii_digit());
    if !well_formed {
        return Err(format!("`{text}` is not a time"));
    }
    Ok(format!("{whole}.{fraction:0<6}"))
}

/// An array literal (`{1,2,NULL}`, `{{"a b","c\"d"}}`, `[0:1]={1,2}`), nested per
/// dimension, each element read by `member`.
fn array(member: &Decoder, text: &str) -> Result<Value, String> {
    // Non-default lower bounds come first as `[l:u]...=`; the binary form drops them too.
    let body = match text.strip_prefix('[') {
        Some(_) => text
            .split_once('=')
            .map(|(_, rest)| rest)
            .ok_or_else(|| format!("`{text}` is not an array"))?,
        None => text,
    };
    let mut parser = ArrayParser {
        bytes: body.as_bytes(),
        at: 0,
        member,
    };
    let value = parser.level()?;
    if parser.at != parser.bytes.len() {
        return Err(format!("`{text}` has text after its array"));
    }
    Ok(value)
}

struct ArrayParser<'a> {
    bytes: &'a [u8],
    at: usize,
    member: &'a Decoder,
}

impl ArrayParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!(
                "expected `{}` at byte {} of an array",
                char::from(byte),
                self.at
            ))
        }
    }

    /// `{ item, item, ... }` where an item is a nested level or an element.
    fn level(&mut self) -> Result<Value, String> {
        self.expect(b'{')?;
        let mut items = Vec::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            let item = if self.peek() == Some(b'{') {
                self.level()?
            } else {
                self.element()?
            };
            items.push(item);
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(format!("unterminated array at byte {}", self.at)),
            }
        }
    }

    /// One element: quoted (backslash escapes), or bare up to `,` or `}` (`NULL` is null).
    fn element(&mut self) -> Result<Value, String> {
        let mut out = Vec::new();
        let quoted = self.peek() == Some(b'"');
        if quoted {
            self.at += 1;
            loop {
                match self.peek() {
                    None => return Err("unterminated quoted array element".into()),
                    Some(b'"') => {
                        self.at += 1;
                        break;
                    }
                    Some(b'\\') => {
                        let escaped = self.bytes.get(self.at + 1).copied();
                        let Some(escaped) = escaped else {
                            return Err("an array element ends in a backslash".into());
                        };
                        out.push(escaped);
                        self.at += 2;
                    }
                    Some(b) => {
                        out.push(b);
                        self.at += 1;
                    }
                }
            }
        } else {
            while let Some(b) = self.peek() {
                if b == b',' || b == b'}' {
                    break;
                }
                if b == b'\\'
                    && let Some(escaped) = self.bytes.get(self.at + 1).copied()
                {
                    out.push(escaped);
                    self.at += 2;
                    continue;
                }
                out.push(b);
                self.at += 1;
            }
        }
        let text = String::from_utf8_lossy(&out);
        if !quoted && text.trim().eq_ignore_ascii_case("null") {
            return Ok(Value::Null);
        }
        let text = if quoted { &text[..] } else { text.trim() };
        self.member.parse_text(text)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_type_reads_from_its_text_as_from_its_binary_form() {
        let cases: Vec<(Decoder, &str, Value)> = vec![
            (Decoder::Bool, "t", json!(true)),
            (Decoder::Bool, "f", json!(false)),
            (Decoder::Int2, "-32768", json!(-32768)),
            (Decoder::Int8, "9223372036854775807", json!(i64::MAX)),
            (Decoder::Oid, "4294967295", json!(u32::MAX)),
            (Decoder::Float4, "0.1", json!(f64::from(0.1f32))),
            (Decoder::Float8, "1.5e-300", json!(1.5e-300)),
            (Decoder::Float8, "NaN", json!("NaN")),
            (Decoder::Float4, "-Infinity", json!("-Infinity")),
            (Decoder::Numeric, "-0.00012300", json!("-0.00012300")),
            (Decoder::Date, "2024-02-29", json!("2024-02-29")),
            (Decoder::Date, "0044-03-15 BC", json!("-0043-03-15")),
            (Decoder::Date, "infinity", json!("infinity")),
            (Decoder::Date, "10000-01-01", json!("+10000-01-01")),
            (
                Decoder::Timestamp,
                "12345-06-07 08:09:10",
                json!("+12345-06-07T08:09:10.000000"),
            ),
            (
                Decoder::Timestamp,
                "2024-01-02 03:04:05.12",
                json!("2024-01-02T03:04:05.120000"),
            ),
            (
                Decoder::Timestamp,
                "2024-01-02 03:04:05",
                json!("2024-01-02T03:04:05.000000"),
            ),
            (
                Decoder::Timestamptz,
                "2024-01-02 03:04:05.000001+00",
                json!("2024-01-02T03:04:05.000001Z"),
            ),
            (
                Decoder::Timestamptz,
                "2024-01-02 08:34:05+05:30",
                json!("2024-01-02T03:04:05.000000Z"),
            ),
            (Decoder::Time, "23:59:59.5", json!("23:59:59.500000")),
            (Decoder::Time, "24:00:00", json!("24:00:00.000000")),
            (Decoder::Bytea, "\\xdeadbeef", json!("\\xdeadbeef")),
            (
                Decoder::Array(Box::new(Decoder::Int4)),
                "{1,NULL,3}",
                json!([1, null, 3]),
            ),
            (
                Decoder::Array(Box::new(Decoder::Int4)),
                "{{1,2},{3,4}}",
                json!([[1, 2], [3, 4]]),
            ),
            (
                Decoder::Array(Box::new(Decoder::Text)),
                r#"{"a,b","c\"d\\e","NULL",NULL,plain}"#,
                json!(["a,b", "c\"d\\e", "NULL", null, "plain"]),
            ),
            (Decoder::Array(Box::new(Decoder::Int4)), "{}", json!([])),
            (
                Decoder::Array(Box::new(Decoder::Int4)),
                "[0:1]={7,8}",
                json!([7, 8]),
            ),
        ];
        for (decoder, text, want) in cases {
            assert_eq!(
                decoder.parse_text(text).unwrap(),
                want,
                "{decoder:?} {text}"
            );
        }
    }

    #[test]
    fn malformed_text_is_an_error_naming_the_value() {
        for (decoder, text) in [
            (Decoder::Bool, "yes"),
            (Decoder::Int4, "1.5"),
            (Decoder::Date, "2024-13-01"),
            (Decoder::Timestamp, "noon"),
            (Decoder::Time, "1:2:3"),
            (Decoder::Array(Box::new(Decoder::Int4)), "{1,2"),
            (Decoder::Array(Box::new(Decoder::Int4)), "{1,x}"),
            (Decoder::Array(Box::new(Decoder::Text)), "{\"open}"),
            (Decoder::Array(Box::new(Decoder::Int4)), "{1}tail"),
        ] {
            assert!(decoder.parse_text(text).is_err(), "{decoder:?} {text}");
        }
    }
}
