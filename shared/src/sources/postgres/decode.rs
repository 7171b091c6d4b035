//! Column values from PostgreSQL's binary wire format to JSON values (the mapping is in the
//! [module docs](super#types)).

use std::fmt::Write as _;

use serde_json::{Number, Value};
use tokio_postgres::types::{FromSql, Kind, Type};

use crate::sources::cells::{CellPage, Declared};

/// How one column's values are decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoder {
    /// `bool`.
    Bool,
    /// `int2`.
    Int2,
    /// `int4`.
    Int4,
    /// `int8`.
    Int8,
    /// `oid`.
    Oid,
    /// `float4`.
    Float4,
    /// `float8`.
    Float8,
    /// `numeric`, to its exact decimal text.
    Numeric,
    /// UTF-8 text: `text`, `varchar`, `bpchar`, `name`, enums, and columns read as `::text`.
    Text,
    /// `"char"`: one byte.
    Char,
    /// `date`, to `YYYY-MM-DD`.
    Date,
    /// `timestamp`, to ISO 8601 without a zone.
    Timestamp,
    /// `timestamptz`, to ISO 8601 in UTC (`Z`).
    Timestamptz,
    /// `time`, to `HH:MM:SS.ffffff`.
    Time,
    /// `uuid`, to its hyphenated form.
    Uuid,
    /// `json`, its text.
    Json,
    /// `jsonb`, its text.
    Jsonb,
    /// `bytea`, to `\x` and lowercase hex (PostgreSQL's own text form).
    Bytea,
    /// An array of values of one decodable type, to a JSON array (nested per dimension).
    Array(Box<Decoder>),
}

impl Decoder {
    /// The decoder for a column of type `ty`; `None` for a type this source does not map (the
    /// column is then read as `::text`).
    pub(crate) fn for_type(ty: &Type) -> Option<Decoder> {
        let decoder = match *ty {
            Type::BOOL => Decoder::Bool,
            Type::INT2 => Decoder::Int2,
            Type::INT4 => Decoder::Int4,
            Type::INT8 => Decoder::Int8,
            Type::OID => Decoder::Oid,
            Type::FLOAT4 => Decoder::Float4,
            Type::FLOAT8 => Decoder::Float8,
            Type::NUMERIC => Decoder::Numeric,
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => Decoder::Text,
            Type::CHAR => Decoder::Char,
            Type::DATE => Decoder::Date,
            Type::TIMESTAMP => Decoder::Timestamp,
            Type::TIMESTAMPTZ => Decoder::Timestamptz,
            Type::TIME => Decoder::Time,
            Type::UUID => Decoder::Uuid,
            Type::JSON => Decoder::Json,
            Type::JSONB => Decoder::Jsonb,
            Type::BYTEA => Decoder::Bytea,
            _ => match ty.kind() {
                Kind::Enum(_) => Decoder::Text,
                Kind::Domain(base) => return Decoder::for_type(base),
                Kind::Array(member) => {
                    let member = Decoder::for_type(member)?;
                    if matches!(member, Decoder::Array(_)) {
                        return None;
                    }
                    Decoder::Array(Box::new(member))
                }
                _ => return None,
            },
        };
        Some(decoder)
    }

    /// The type inference gives this decoder's column, whose type modifier is `typmod`
    /// (`pg_attribute.atttypmod`, -1 for none; see [`Declared`]): `numeric(p, s)` is a
    /// decimal when `1 <= p <= 38` and `0 <= s <= p`; `None` for the columns typed by their
    /// values (text forms, unconstrained `numeric`, arrays).
    pub(crate) fn declared(&self, typmod: i32) -> Option<Declared> {
        Some(match self {
            Decoder::Numeric => {
                // (precision << 16 | scale) + 4, the scale an 11-bit signed number.
                let packed = typmod.checked_sub(4).filter(|_| typmod >= 4)?;
                let precision = (packed >> 16) & 0xffff;
                let scale = ((packed & 0x7ff) ^ 1024) - 1024;
                let precision = u8::try_from(precision)
                    .ok()
                    .filter(|p| (1..=38).contains(p))?;
                let scale = u8::try_from(scale).ok().filter(|s| *s <= precision)?;
                Declared::Decimal { precision, scale }
            }
            Decoder::Bool => Declared::Boolean,
            Decoder::Int2 | Decoder::Int4 => Declared::Int,
            Decoder::Int8 | Decoder::Oid => Declared::Long,
            Decoder::Float4 | Decoder::Float8 => Declared::Double,
            Decoder::Date => Declared::Date,
            Decoder::Timestamp | Decoder::Timestamptz => Declared::Timestamp,
            _ => return None,
        })
    }

    /// The JSON value of one non-null value's bytes; a malformed value is an error naming why.
    pub(crate) fn decode(&self, raw: &[u8]) -> Result<Value, String> {
        Ok(match self {
            Decoder::Bool => Value::Bool(*raw.first().ok_or("empty bool")? != 0),
            Decoder::Int2 => Value::from(i16::from_be_bytes(fixed(raw)?)),
            Decoder::Int4 => Value::from(i32::from_be_bytes(fixed(raw)?)),
            Decoder::Int8 => Value::from(i64::from_be_bytes(fixed(raw)?)),
            Decoder::Oid => Value::from(u32::from_be_bytes(fixed(raw)?)),
            Decoder::Float4 => float(f64::from(f32::from_be_bytes(fixed(raw)?))),
            Decoder::Float8 => float(f64::from_be_bytes(fixed(raw)?)),
            Decoder::Numeric => Value::String(numeric(raw)?),
            Decoder::Text => Value::String(text(raw)),
            Decoder::Char => Value::String(text(raw)),
            Decoder::Date => Value::String(date(i32::from_be_bytes(fixed(raw)?))),
            Decoder::Timestamp => Value::String(timestamp(i64::from_be_bytes(fixed(raw)?), "")),
            Decoder::Timestamptz => Value::String(timestamp(i64::from_be_bytes(fixed(raw)?), "Z")),
            Decoder::Time => Value::String(time(i64::from_be_bytes(fixed(raw)?))),
            Decoder::Uuid => {
                Value::String(uuid::Uuid::from_bytes(fixed(raw)?).hyphenated().to_string())
            }
            Decoder::Json => Value::String(text(raw)),
            Decoder::Jsonb => match raw.split_first() {
                Some((1, rest)) => Value::String(text(rest)),
                Some((version, _)) => return Err(format!("jsonb version {version}")),
                None => return Err("empty jsonb".into()),
            },
            Decoder::Bytea => {
                let mut out = String::with_capacity(2 + raw.len() * 2);
                out.push_str("\\x");
                for byte in raw {
                    let _ = write!(out, "{byte:02x}");
                }
                Value::String(out)
            }
            Decoder::Array(member) => array(member, raw)?,
        })
    }
}

impl Decoder {
    /// Add one non-null value's bytes to `page` as the cell standing for the JSON value
    /// [`Decoder::decode`] gives (the same bytes, the same value; see
    /// [`crate::sources::cells`]).
    pub(crate) fn decode_cell(&self, raw: &[u8], page: &mut CellPage) -> Result<(), String> {
        let text = |page: &mut CellPage, raw: &[u8]| {
            page.write_text(|out| match std::str::from_utf8(raw) {
                Ok(valid) => out.push_str(valid),
                Err(_) => out.push_str(&String::from_utf8_lossy(raw)),
            })
        };
        match self {
            Decoder::Bool => page.push_bool(*raw.first().ok_or("empty bool")? != 0),
            Decoder::Int2 => page.push_long(i16::from_be_bytes(fixed(raw)?).into()),
            Decoder::Int4 => page.push_long(i32::from_be_bytes(fixed(raw)?).into()),
            Decoder::Int8 => page.push_long(i64::from_be_bytes(fixed(raw)?)),
            Decoder::Oid => page.push_long(u32::from_be_bytes(fixed(raw)?).into()),
            Decoder::Float4 => page
                .push_double(f64::from(f32::from_be_bytes(fixed(raw)?)))
                .map_err(|e| e.to_string())?,
            Decoder::Float8 => page
                .push_double(f64::from_be_bytes(fixed(raw)?))
                .map_err(|e| e.to_string())?,
            Decoder::Text | Decoder::Char | Decoder::Json => {
                text(page, raw).map_err(|e| e.to_string())?;
            }
            Decoder::Jsonb => match raw.split_first() {
                Some((1, rest)) => text(page, rest).map_err(|e| e.to_string())?,
                Some((version, _)) => return Err(format!("jsonb version {version}")),
                None => return Err("empty jsonb".into()),
            },
            Decoder::Date => {
                let days = i32::from_be_bytes(fixed(raw)?);
                // A day (a `date` column), but for `infinity`, `-infinity` and the years
                // without four digits, which stay text.
                let typed = FOUR_DIGIT_DAYS.contains(&i64::from(days))
                    && i32::try_from(i64::from(days) + PG_EPOCH_UNIX_DAYS)
                        .is_ok_and(|unix| page.push_date(unix));
                if !typed {
                    page.push_text(&date(days)).map_err(|e| e.to_string())?;
                }
            }
            // A decimal cell when it has at most 38 digits, else its exact text (`NaN` and
            // the infinities too).
            Decoder::Numeric => {
                let typed = numeric_unscaled(raw)
                    .is_some_and(|(unscaled, scale)| page.push_decimal(unscaled, scale));
                if !typed {
                    page.try_write_text(|out| write_numeric(raw, out))?;
                }
            }
            Decoder::Timestamp | Decoder::Timestamptz => {
                let micros = i64::from_be_bytes(fixed(raw)?);
                let utc = *self == Decoder::Timestamptz;
                // An instant (a `timestamp` column), but for `infinity`, `-infinity` and
                // instants past the years chrono writes, which stay text.
                let typed = micros != i64::MIN
                    && micros != i64::MAX
                    && micros
                        .checked_add(PG_EPOCH_UNIX_MICROS)
                        .is_some_and(|unix| page.push_instant(unix, utc));
                if !typed {
                    let zone = if utc { "Z" } else { "" };
                    page.push_text(&timestamp(micros, zone))
                        .map_err(|e| e.to_string())?;
                }
            }
            _ => page
                .push_json(self.decode(raw)?)
                .map_err(|e| e.to_string())?,
        }
        Ok(())
    }
}

/// A column's raw value bytes, whatever its type (`None` for NULL).
pub(crate) struct RawValue<'a>(pub(crate) &'a [u8]);

impl<'a> FromSql<'a> for RawValue<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(raw))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn fixed<const N: usize>(raw: &[u8]) -> Result<[u8; N], String> {
    raw.try_into()
        .map_err(|_| format!("{} bytes where {N} were expected", raw.len()))
}

fn text(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

/// A finite float as a JSON number; NaN and the infinities as PostgreSQL spells them.
pub(crate) fn float(value: f64) -> Value {
    match Number::from_f64(value) {
        Some(number) => Value::Number(number),
        None if value.is_nan() => Value::String("NaN".into()),
        None if value > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

/// Days, microseconds: PostgreSQL's epoch is 2000-01-01.
pub(crate) fn pg_epoch() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .unwrap_or_default()
}

fn date(days: i32) -> String {
    match days {
        i32::MAX => "infinity".into(),
        i32::MIN => "-infinity".into(),
        _ => match pg_epoch()
            .date()
            .checked_add_signed(chrono::TimeDelta::days(i64::from(days)))
        {
            Some(day) => format_date(day),
            None => format!("{days} days after 2000-01-01"),
        },
    }
}

/// A day as this source writes it (`YYYY-MM-DD`; chrono's sign for years outside 1-9999).
pub(crate) fn format_date(day: chrono::NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// An instant as this source writes it (`YYYY-MM-DDTHH:MM:SS.ffffff`, then `zone`).
pub(crate) fn format_timestamp(at: chrono::NaiveDateTime, zone: &str) -> String {
    format!("{}{zone}", at.format("%Y-%m-%dT%H:%M:%S%.6f"))
}

/// Days from 2000-01-01 back to 0001-01-01 and on to 10000-01-01: the days whose dates
/// [`format_date`] writes as `YYYY-MM-DD` with four digits and no sign.
const FOUR_DIGIT_DAYS: std::ops::Range<i64> = -730_119..2_921_940;

/// Days from 1970-01-01 to 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_UNIX_DAYS: i64 = 10_957;

/// Microseconds from 1970-01-01 to 2000-01-01.
pub(crate) const PG_EPOCH_UNIX_MICROS: i64 = PG_EPOCH_UNIX_DAYS * 86_400_000_000;

/// The last `width` (at most 6) decimal digits of a non-negative `value`, zero-padded.
fn push_digits(out: &mut String, value: i64, width: usize) {
    let mut buf = [b'0'; 6];
    let width = width.min(buf.len());
    let mut rest = value.unsigned_abs();
    for slot in buf[..width].iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.push_str(std::str::from_utf8(&buf[..width]).unwrap_or_default());
}

/// Microseconds after 2000-01-01 as a timestamp (`zone` `Z` for `timestamptz`).
pub(crate) fn timestamp(micros: i64, zone: &str) -> String {
    match micros {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        _ => match pg_epoch().checked_add_signed(chrono::TimeDelta::microseconds(micros)) {
            Some(at) => format_timestamp(at, zone),
            None => format!("{micros} microseconds after 2000-01-01"),
        },
    }
}

fn time(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    format!(
        "{:02}:{:02}:{:02}.{frac:06}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// The exact decimal text of a binary `numeric`: base-10000 digit groups, a weight (the
/// power of 10000 of the first group), a sign and the display scale.
pub(crate) fn numeric(raw: &[u8]) -> Result<String, String> {
    let mut out = String::new();
    write_numeric(raw, &mut out)?;
    Ok(out)
}

/// A binary `numeric` as an integer of its digits and its display scale (`12.50`: `(1250,
/// 2)`), when it is a finite number of at most 38 digits with a scale of at most 38 (whose
/// [`crate::sources::cells::decimal_text`] is then [`numeric`]'s text); `None` otherwise.
///
/// The value is `digits[i] * 10000^(weight - i)` summed, in base-10000 digits; `dscale`
/// digits are shown after the point.
pub(crate) fn numeric_unscaled(raw: &[u8]) -> Option<(i128, u8)> {
    let word = |at: usize| {
        raw.get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = i64::from(word(0)?);
    let weight = i64::from(word(2)? as i16);
    let negative = match word(4)? {
        0x0000 => false,
        0x4000 => true,
        _ => return None,
    };
    let scale = u8::try_from(word(6)?).ok().filter(|scale| *scale <= 38)?;
    if raw.len() != 8 + 2 * usize::try_from(ndigits).ok()? {
        return None;
    }
    // Base-10000 places from `weight` down to the last one the scale shows.
    let fraction_places = i64::from(scale.div_ceil(4));
    if ndigits > 0 && weight - (ndigits - 1) < -fraction_places {
        // A digit past the scale (PostgreSQL never sends one).
        return None;
    }
    // The last place holds 4 digits; the scale may show fewer (the rest are 0), which are
    // dropped as the place is added (38 digits fit an `i128`, 40 would not).
    let dropped = 10u16.pow(u32::try_from(fraction_places * 4 - i64::from(scale)).ok()?);
    let mut value: i128 = 0;
    for place in (-fraction_places..=weight).rev() {
        let index = weight - place;
        let digit = if index < ndigits {
            word(8 + 2 * usize::try_from(index).ok()?)?
        } else {
            0
        };
        if digit > 9999 {
            return None;
        }
        let (base, digit) = if place == -fraction_places {
            if digit % dropped != 0 {
                return None;
            }
            (10_000 / dropped, digit / dropped)
        } else {
            (10_000, digit)
        };
        value = value
            .checked_mul(i128::from(base))?
            .checked_add(i128::from(digit))?;
    }
    if value.unsigned_abs() >= crate::sources::cells::DECIMAL_LIMIT {
        return None;
    }
    Some((if negative { -value } else { value }, scale))
}

/// [`numeric`], written into `out`; on an error nothing is written.
fn write_numeric(raw: &[u8], out: &mut String) -> Result<(), String> {
    let word = |at: usize| -> Result<u16, String> {
        raw.get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| format!("numeric cut short at byte {at}"))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = usize::from(word(6)?);
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => {
            out.push_str("NaN");
            return Ok(());
        }
        0xD000 => {
            out.push_str("Infinity");
            return Ok(());
        }
        0xF000 => {
            out.push_str("-Infinity");
            return Ok(());
        }
        other => return Err(format!("numeric sign {other:#x}")),
    }
    for i in 0..ndigits {
        word(8 + 2 * i)?;
    }
    let group = |index: i64| -> u16 {
        usize::try_from(index)
            .ok()
            .filter(|i| *i < ndigits)
            .and_then(|i| word(8 + 2 * i).ok())
            .unwrap_or(0)
    };
    let start = out.len();
    if sign == 0x4000 {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    } else {
        for index in 0..=weight {
            if index == 0 {
                let _ = write!(out, "{}", group(index));
            } else {
                push_group(out, group(index));
            }
        }
    }
    if dscale > 0 {
        out.push('.');
        let fraction = out.len();
        let mut index = weight + 1;
        while out.len() - fraction < dscale {
            push_group(out, group(index));
            index += 1;
        }
        out.truncate(fraction + dscale);
    }
    let written = &out[start..];
    if written == "-0" || (written.starts_with("-0.") && written[3..].bytes().all(|b| b == b'0')) {
        out.remove(start);
    }
    Ok(())
}

/// A base-10000 digit group as four digits (a malformed group past 9999 whole, as `{:04}`
/// writes it).
fn push_group(out: &mut String, group: u16) {
    if group > 9999 {
        let _ = write!(out, "{group:04}");
    } else {
        push_digits(out, i64::from(group), 4);
    }
}

/// A binary array: dimensions, then the elements in row-major order.
fn array(member: &Decoder, raw: &[u8]) -> Result<Value, String> {
    let int = |at: usize| -> Result<i32, String> {
        raw.get(at..at + 4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("array cut short at byte {at}"))
    };
    let ndim = usize::try_from(int(0)?).map_err(|_| "negative array dimensions")?;
    if ndim == 0 {
        return Ok(Value::Array(Vec::new()));
    }
    if ndim > 6 {
        return Err(format!("{ndim} array dimensions"));
    }
    let mut dims = Vec::with_capacity(ndim);
    for d in 0..ndim {
        dims.push(usize::try_from(int(12 + 8 * d)?).map_err(|_| "negative array length")?);
    }
    let mut at = 12 + 8 * ndim;
    let total: usize = dims.iter().product();
    let mut flat = Vec::with_capacity(total.min(1 << 16));
    for _ in 0..total {
        let len = int(at)?;
        at += 4;
        if len < 0 {
            flat.push(Value::Null);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| "bad element length")?;
        let bytes = raw
            .get(at..at + len)
            .ok_or_else(|| format!("array element cut short at byte {at}"))?;
        flat.push(member.decode(bytes)?);
        at += len;
    }
    Ok(nest(&dims, &mut flat.into_iter()))
}

fn nest(dims: &[usize], items: &mut impl Iterator<Item = Value>) -> Value {
    match dims.split_first() {
        None => items.next().unwrap_or(Value::Null),
        Some((&len, [])) => Value::Array(items.take(len).collect()),
        Some((&len, rest)) => Value::Array((0..len).map(|_| nest(rest, items)).collect()),
    }
}
