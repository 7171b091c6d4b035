//! Arrow columns as values for binary `COPY` (see the [module docs](super)).

use std::collections::BTreeMap;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array,
    Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, TimeUnit};
use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::schema::{Field, FieldType};

/// One value on its way to binary `COPY`.
#[derive(Debug)]
pub(super) enum Value {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Date(chrono::NaiveDate),
    Timestamp(chrono::DateTime<chrono::Utc>),
    /// An unscaled decimal and its scale.
    Numeric(i128, u8),
    Text(String),
    Json(serde_json::Value),
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Bool(v) => v.to_sql(ty, out),
            Value::Int(v) => v.to_sql(ty, out),
            Value::Long(v) => v.to_sql(ty, out),
            Value::Double(v) => v.to_sql(ty, out),
            Value::Date(v) => v.to_sql(ty, out),
            Value::Timestamp(v) => v.to_sql(ty, out),
            Value::Numeric(unscaled, scale) => {
                numeric_binary(*unscaled, *scale, out);
                Ok(IsNull::No)
            }
            Value::Text(v) => v.to_sql(ty, out),
            Value::Json(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// The values of one column, row by row (`field` is the column's schema field).
pub(super) fn column_values(array: &ArrayRef, json: Option<&[serde_json::Value]>) -> Vec<Value> {
    let n = array.len();
    let mut out = Vec::with_capacity(n);
    macro_rules! each {
        ($ty:ty, $f:expr) => {{
            if let Some(a) = array.as_any().downcast_ref::<$ty>() {
                for i in 0..n {
                    out.push(if a.is_null(i) {
                        Value::Null
                    } else {
                        $f(a.value(i))
                    });
                }
                return out;
            }
        }};
    }
    match array.data_type() {
        DataType::Boolean => each!(BooleanArray, Value::Bool),
        DataType::Int32 => each!(Int32Array, Value::Int),
        DataType::Int64 => each!(Int64Array, Value::Long),
        DataType::Float64 => each!(Float64Array, Value::Double),
        DataType::Date32 => each!(Date32Array, |d: i32| {
            chrono::NaiveDate::from_num_days_from_ce_opt(d.saturating_add(719_163))
                .map_or(Value::Null, Value::Date)
        }),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            each!(TimestampMicrosecondArray, |v| {
                chrono::DateTime::from_timestamp_micros(v).map_or(Value::Null, Value::Timestamp)
            })
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            each!(TimestampMillisecondArray, |v| {
                chrono::DateTime::from_timestamp_millis(v).map_or(Value::Null, Value::Timestamp)
            })
        }
        DataType::Utf8 => each!(StringArray, |s: &str| Value::Text(s.to_owned())),
        DataType::Decimal128(_, scale) => {
            let scale = u8::try_from(*scale).unwrap_or(0);
            each!(Decimal128Array, |v| Value::Numeric(v, scale));
        }
        _ => {}
    }
    match json {
        Some(values) => values
            .iter()
            .map(|v| {
                if v.is_null() {
                    Value::Null
                } else {
                    Value::Json(v.clone())
                }
            })
            .collect(),
        None => (0..n).map(|_| Value::Null).collect(),
    }
}

/// PostgreSQL's binary `numeric` for the decimal `unscaled` / 10^`scale`: base-10000 digit
/// groups (most significant first, no leading or trailing zero groups), the weight of the
/// first (10000^weight), the sign, and the display scale.
pub(super) fn numeric_binary(unscaled: i128, scale: u8, out: &mut BytesMut) {
    let scale = usize::from(scale);
    // The digits, at least one before the point.
    let mut digits = unscaled.unsigned_abs().to_string();
    if digits.len() <= scale {
        digits.insert_str(0, &"0".repeat(scale + 1 - digits.len()));
    }
    let (whole, fraction) = digits.split_at(digits.len() - scale);
    let group = |text: &str| text.bytes().fold(0i16, |n, b| n * 10 + i16::from(b - b'0'));
    // Whole groups from the right, fraction groups from the left.
    let lead = whole.len() % 4;
    let mut groups: Vec<i16> = Vec::new();
    if lead > 0 {
        groups.push(group(&whole[..lead]));
    }
    groups.extend(
        whole.as_bytes()[lead..]
            .chunks(4)
            .map(|c| group(std::str::from_utf8(c).unwrap_or("0"))),
    );
    let mut weight = i16::try_from(groups.len()).unwrap_or(i16::MAX) - 1;
    let padded = format!("{fraction}{}", "0".repeat((4 - fraction.len() % 4) % 4));
    groups.extend(
        padded
            .as_bytes()
            .chunks(4)
            .map(|c| group(std::str::from_utf8(c).unwrap_or("0"))),
    );
    let leading = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..leading);
    weight -= i16::try_from(leading).unwrap_or(0);
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(i16::try_from(groups.len()).unwrap_or(0));
    out.put_i16(weight);
    out.put_u16(if unscaled < 0 && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    out.put_u16(u16::try_from(scale).unwrap_or(0));
    for g in groups {
        out.put_i16(g);
    }
}

/// The nested (`jsonb`) columns of `batch` as JSON values, by column index.
pub(super) fn nested_json(
    batch: &RecordBatch,
    fields: &[Field],
) -> Result<BTreeMap<usize, Vec<serde_json::Value>>, arrow::error::ArrowError> {
    let nested: Vec<usize> = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f.field_type, FieldType::Struct(_) | FieldType::List(_)))
        .map(|(i, _)| i)
        .collect();
    let mut out = BTreeMap::new();
    if nested.is_empty() {
        return Ok(out);
    }
    let projected = batch.project(&nested)?;
    let bytes = crate::sinks::files::encode::encode(
        &projected,
        crate::config::connectors::OutputFormat::Jsonl,
    )?;
    let names: Vec<String> = projected
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    for &i in &nested {
        out.insert(i, Vec::with_capacity(batch.num_rows()));
    }
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let mut row: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
            .map_err(|e| arrow::error::ArrowError::JsonError(e.to_string()))?;
        for (k, &i) in nested.iter().enumerate() {
            let v = row.remove(&names[k]).unwrap_or(serde_json::Value::Null);
            if let Some(col) = out.get_mut(&i) {
                col.push(v);
            }
        }
    }
    Ok(out)
}
