//! Arrow schemas for inferred fields, and typing JSON records into Arrow record batches.
//!
//! [`RecordBatchBuilder`] keeps its own growable buffers (plain vectors and bit builders) so
//! that a record that turns out to be untypeable half-way through can be rolled back by
//! truncating every column to the previous row count; the Arrow arrays are assembled from
//! those buffers, without copying values one by one, in [`RecordBatchBuilder::finish`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ::arrow::array::{
    ArrayRef, BooleanArray, BooleanBufferBuilder, Date32Array, Decimal128Array, Float64Array,
    Int32Array, Int64Array, ListArray, StringArray, StructArray, TimestampMicrosecondArray,
    TimestampMillisecondArray,
};
use ::arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use ::arrow::datatypes::{DataType, Field as ArrowField, Fields, Schema, SchemaRef, TimeUnit};
use ::arrow::error::ArrowError;
use ::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use chrono::Datelike;
use serde_json::{Map, Value};

mod from_cells;
#[cfg(test)]
pub(crate) use self::from_cells::sample_decimals;
use from_cells::instant_of;
mod from_tape;

use super::error::SchemaError;
use super::infer::{parse_date, parse_numeric};
use super::namespace::flatten;
use super::{Field, FieldType, NamespaceSchema};
use crate::deadletter::{Deadletter, FailureCode};

/// The Arrow schema for these fields (all nullable).
///
/// `boolean` -> `Boolean`, `int` -> `Int32`, `long` -> `Int64`, `double` -> `Float64`,
/// `date` -> `Date32`, `timestamp` -> `Timestamp(Microsecond, "UTC")`, `timestamp_ms` ->
/// `Timestamp(Millisecond, "UTC")`, `string` -> `Utf8`, `struct` -> `Struct`, `list` ->
/// `List` with the item field named `element`.
pub fn to_arrow_schema(fields: &[Field]) -> Schema {
    Schema::new(fields.iter().map(arrow_field).collect::<Vec<_>>())
}

fn arrow_field(field: &Field) -> ArrowField {
    ArrowField::new(field.name.as_str(), data_type(&field.field_type), true)
}

fn element_field(element: &FieldType) -> ArrowField {
    ArrowField::new("element", data_type(element), true)
}

fn data_type(field_type: &FieldType) -> DataType {
    match field_type {
        FieldType::Boolean => DataType::Boolean,
        FieldType::Int => DataType::Int32,
        FieldType::Long => DataType::Int64,
        FieldType::Double => DataType::Float64,
        FieldType::Date => DataType::Date32,
        FieldType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        FieldType::TimestampMs => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        FieldType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale as i8),
        FieldType::String => DataType::Utf8,
        FieldType::Struct(fields) => {
            DataType::Struct(fields.iter().map(arrow_field).collect::<Fields>())
        }
        FieldType::List(element) => DataType::List(Arc::new(element_field(element))),
    }
}

/// Sibling type names, in the order a value that does not fit its column tries them.
const SIBLING_ORDER: [&str; 11] = [
    "boolean",
    "int",
    "long",
    "double",
    "timestamp",
    "timestamp_ms",
    "date",
    "decimal",
    "struct",
    "list",
    "string",
];

/// No slot routes a value here.
const NO_ROUTE: usize = usize::MAX;

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// Why a value could not be typed; the path is collected (innermost first) on the way out.
#[derive(Debug)]
struct RowError {
    path: Vec<String>,
    message: String,
}

impl RowError {
    fn new(message: String) -> Self {
        RowError {
            path: Vec::new(),
            message,
        }
    }

    fn within(mut self, segment: &str) -> Self {
        self.path.push(segment.to_owned());
        self
    }

    fn path_text(&self) -> String {
        let mut text = String::new();
        for segment in self.path.iter().rev() {
            if !text.is_empty() && !segment.starts_with('[') {
                text.push('.');
            }
            text.push_str(segment);
        }
        text
    }

    fn describe(&self) -> String {
        format!("cannot type field `{}`: {}", self.path_text(), self.message)
    }
}

/// The JSON type of a value, for messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn mismatch(label: &str, value: &Value) -> RowError {
    RowError::new(format!(
        "a JSON {} does not fit the column type {label}",
        json_type(value)
    ))
}

/// Key lookup over a JSON object or a flattened record.
trait Lookup {
    fn lookup(&self, key: &str) -> Option<&Value>;
    /// How many keys the object has.
    fn key_count(&self) -> usize;
}

impl Lookup for Map<String, Value> {
    fn lookup(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }

    fn key_count(&self) -> usize {
        self.len()
    }
}

impl Lookup for BTreeMap<String, &Value> {
    fn lookup(&self, key: &str) -> Option<&Value> {
        self.get(key).copied()
    }

    fn key_count(&self) -> usize {
        self.len()
    }
}

thread_local! {
    /// Set while typing a record when an object (at any depth) has a key its struct has no
    /// column for; read and cleared by [`RecordBatchBuilder::append`].
    static UNKNOWN_KEYS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A key's value unless it is missing or null.
fn own<'o, L: Lookup>(object: &'o L, key: &str) -> Option<&'o Value> {
    object.lookup(key).filter(|value| !value.is_null())
}

/// The unscaled value of a decimal text (`-12.5`, `007`, `0.125`: an optional `-`, digits,
/// optionally a `.` and digits) in a `decimal(precision, scale)` column: `None` when it is
/// not that shape, has more than `scale` digits after the point, or more than
/// `precision - scale` before it. Trailing zeros after the point are digits like any other
/// (`1.50` in a scale-1 column does not fit), so no value is ever rounded.
pub(crate) fn parse_decimal(text: &str, precision: u8, scale: u8) -> Option<i128> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match body.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return None,
        None => (body, ""),
    };
    if whole.is_empty()
        || fraction.len() > usize::from(scale)
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let significant = whole.trim_start_matches('0');
    if significant.len() > usize::from(precision.checked_sub(scale)?) {
        return None;
    }
    let mut unscaled: i128 = 0;
    for digit in significant.bytes().chain(fraction.bytes()) {
        unscaled = unscaled * 10 + i128::from(digit - b'0');
    }
    for _ in fraction.len()..usize::from(scale) {
        unscaled *= 10;
    }
    Some(if negative { -unscaled } else { unscaled })
}

/// One column's growable buffers.
#[derive(Debug)]
struct Column {
    /// The column type as shown in messages (`int`, `list<string>`).
    label: String,
    validity: BooleanBufferBuilder,
    data: Data,
}

#[derive(Debug)]
enum Data {
    Boolean(BooleanBufferBuilder),
    Int(Vec<i32>),
    Long(Vec<i64>),
    Double(Vec<f64>),
    Date(Vec<i32>),
    Timestamp(Vec<i64>),
    TimestampMs(Vec<i64>),
    Decimal {
        /// The unscaled values.
        values: Vec<i128>,
        precision: u8,
        scale: u8,
    },
    Text {
        /// Always one more entry than rows; starts with 0.
        offsets: Vec<i32>,
        bytes: Vec<u8>,
    },
    Struct(StructColumn),
    List {
        item: Arc<ArrowField>,
        /// Always one more entry than rows; starts with 0.
        offsets: Vec<i32>,
        element: Box<Column>,
    },
}

impl Column {
    fn new(field_type: &FieldType) -> Self {
        let data = match field_type {
            FieldType::Boolean => Data::Boolean(BooleanBufferBuilder::new(0)),
            FieldType::Int => Data::Int(Vec::new()),
            FieldType::Long => Data::Long(Vec::new()),
            FieldType::Double => Data::Double(Vec::new()),
            FieldType::Date => Data::Date(Vec::new()),
            FieldType::Timestamp => Data::Timestamp(Vec::new()),
            FieldType::TimestampMs => Data::TimestampMs(Vec::new()),
            FieldType::Decimal { precision, scale } => Data::Decimal {
                values: Vec::new(),
                precision: *precision,
                scale: *scale,
            },
            FieldType::String => Data::Text {
                offsets: vec![0],
                bytes: Vec::new(),
            },
            FieldType::Struct(fields) => Data::Struct(StructColumn::new(fields)),
            FieldType::List(element) => Data::List {
                item: Arc::new(element_field(element)),
                offsets: vec![0],
                element: Box::new(Column::new(element)),
            },
        };
        Column {
            label: field_type.to_string(),
            validity: BooleanBufferBuilder::new(0),
            data,
        }
    }

    fn len(&self) -> usize {
        self.validity.len()
    }

    /// Whether a non-null value can go into this column (shallowly: a struct takes any
    /// object, a list any array).
    fn fits(&self, value: &Value) -> bool {
        match &self.data {
            Data::Boolean(_) => value.is_boolean(),
            Data::Int(_) => value.as_i64().is_some_and(|int| i32::try_from(int).is_ok()),
            Data::Long(_) => value.as_i64().is_some(),
            Data::TimestampMs(_) => {
                value.as_i64().is_some() || instant_of(value).is_some_and(|m| m % 1_000 == 0)
            }
            Data::Double(_) => match value {
                // Not an integer beyond `i64` that the parser read exactly: a double would
                // round it (it goes to a string column, whose text keeps it).
                Value::Number(number) => !number.is_u64() || number.as_i64().is_some(),
                Value::String(text) => parse_numeric(text).is_some(),
                _ => false,
            },
            Data::Date(_) => value
                .as_str()
                .is_some_and(|text| parse_date(text).is_some()),
            // Decimal text (a typed source's `numeric`), exactly.
            Data::Decimal {
                precision, scale, ..
            } => value
                .as_str()
                .is_some_and(|text| parse_decimal(text, *precision, *scale).is_some()),
            Data::Timestamp(_) => {
                value
                    .as_i64()
                    .is_some_and(|secs| secs.checked_mul(1_000_000).is_some())
                    || instant_of(value).is_some()
            }
            Data::Text { .. } => true,
            Data::Struct(_) => value.is_object(),
            Data::List { .. } => value.is_array(),
        }
    }

    fn mismatch(&self, value: &Value) -> RowError {
        mismatch(&self.label, value)
    }

    fn push_null(&mut self) {
        match &mut self.data {
            Data::Boolean(values) => values.append(false),
            Data::Int(values) | Data::Date(values) => values.push(0),
            Data::Long(values) | Data::Timestamp(values) | Data::TimestampMs(values) => {
                values.push(0);
            }
            Data::Double(values) => values.push(0.0),
            Data::Decimal { values, .. } => values.push(0),
            Data::Text { offsets, .. } | Data::List { offsets, .. } => {
                let last = offsets.last().copied().unwrap_or(0);
                offsets.push(last);
            }
            Data::Struct(columns) => {
                for slot in &mut columns.slots {
                    slot.column.push_null();
                }
            }
        }
        self.validity.append(false);
    }

    /// Append one value (missing and null append a null). A value that does not fit is an
    /// error, after which the caller truncates the column back.
    fn push(&mut self, value: Option<&Value>) -> Result<(), RowError> {
        let Some(value) = value.filter(|value| !value.is_null()) else {
            self.push_null();
            return Ok(());
        };
        if !self.fits(value) {
            return Err(self.mismatch(value));
        }
        // `fits` said yes, so the conversions below succeed; a `None` would be a bug, and is
        // reported as a mismatch rather than a panic.
        let label = self.label.as_str();
        match &mut self.data {
            Data::Boolean(values) => match value.as_bool() {
                Some(flag) => values.append(flag),
                None => return Err(mismatch(label, value)),
            },
            Data::Int(values) => match value.as_i64().and_then(|int| i32::try_from(int).ok()) {
                Some(int) => values.push(int),
                None => return Err(mismatch(label, value)),
            },
            Data::Long(values) => match value.as_i64() {
                Some(int) => values.push(int),
                None => return Err(mismatch(label, value)),
            },
            Data::TimestampMs(values) => {
                match value
                    .as_i64()
                    .or_else(|| instant_of(value).map(|micros| micros / 1_000))
                {
                    Some(int) => values.push(int),
                    None => return Err(mismatch(label, value)),
                }
            }
            Data::Timestamp(values) => {
                match value
                    .as_i64()
                    .and_then(|secs| secs.checked_mul(1_000_000))
                    .or_else(|| instant_of(value))
                {
                    Some(micros) => values.push(micros),
                    None => return Err(mismatch(label, value)),
                }
            }
            Data::Double(values) => {
                let number = match value {
                    Value::Number(number) => number.as_f64(),
                    Value::String(text) => parse_numeric(text),
                    _ => None,
                };
                match number {
                    Some(number) => values.push(number),
                    None => return Err(mismatch(label, value)),
                }
            }
            Data::Date(values) => match value.as_str().and_then(parse_date) {
                Some(date) => values.push(date.num_days_from_ce() - UNIX_EPOCH_DAYS_FROM_CE),
                None => return Err(mismatch(label, value)),
            },
            Data::Decimal {
                values,
                precision,
                scale,
            } => match value
                .as_str()
                .and_then(|text| parse_decimal(text, *precision, *scale))
            {
                Some(unscaled) => values.push(unscaled),
                None => return Err(mismatch(label, value)),
            },
            Data::Text { offsets, bytes } => {
                match value {
                    Value::String(text) => bytes.extend_from_slice(text.as_bytes()),
                    other => serde_json::to_writer(&mut *bytes, other).map_err(|error| {
                        RowError::new(format!("cannot write JSON text: {error}"))
                    })?,
                }
                let end = i32::try_from(bytes.len()).map_err(|_| {
                    RowError::new("the batch's text for this column exceeds 2 GiB".into())
                })?;
                offsets.push(end);
            }
            Data::Struct(columns) => match value.as_object() {
                Some(object) => columns.push_fields(object)?,
                None => return Err(mismatch(label, value)),
            },
            Data::List {
                offsets, element, ..
            } => {
                let Some(items) = value.as_array() else {
                    return Err(mismatch(label, value));
                };
                for (index, item) in items.iter().enumerate() {
                    element
                        .push(Some(item))
                        .map_err(|error| error.within(&format!("[{index}]")))?;
                }
                let end = i32::try_from(element.len()).map_err(|_| {
                    RowError::new("the batch's list elements for this column exceed 2^31".into())
                })?;
                offsets.push(end);
            }
        }
        self.validity.append(true);
        Ok(())
    }

    /// Drop everything after the first `rows` rows.
    fn truncate(&mut self, rows: usize) {
        if self.len() < rows {
            return;
        }
        self.validity.truncate(rows);
        match &mut self.data {
            Data::Boolean(values) => values.truncate(rows),
            Data::Int(values) | Data::Date(values) => values.truncate(rows),
            Data::Long(values) | Data::Timestamp(values) | Data::TimestampMs(values) => {
                values.truncate(rows);
            }
            Data::Double(values) => values.truncate(rows),
            Data::Decimal { values, .. } => values.truncate(rows),
            Data::Text { offsets, bytes } => {
                let end = offsets.get(rows).copied().unwrap_or(0);
                bytes.truncate(usize::try_from(end).unwrap_or(0));
                offsets.truncate(rows + 1);
            }
            Data::Struct(columns) => columns.truncate(rows),
            Data::List {
                offsets, element, ..
            } => {
                let end = offsets.get(rows).copied().unwrap_or(0);
                element.truncate(usize::try_from(end).unwrap_or(0));
                offsets.truncate(rows + 1);
            }
        }
    }

    /// Build the Arrow array from the buffers and start over empty.
    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        let rows = self.len();
        let nulls = take_nulls(&mut self.validity);
        Ok(match &mut self.data {
            Data::Boolean(values) => Arc::new(BooleanArray::new(values.finish(), nulls)),
            Data::Int(values) => Arc::new(Int32Array::try_new(
                ScalarBuffer::from(std::mem::take(values)),
                nulls,
            )?),
            Data::Long(values) => Arc::new(Int64Array::try_new(
                ScalarBuffer::from(std::mem::take(values)),
                nulls,
            )?),
            Data::Double(values) => Arc::new(Float64Array::try_new(
                ScalarBuffer::from(std::mem::take(values)),
                nulls,
            )?),
            Data::Date(values) => Arc::new(Date32Array::try_new(
                ScalarBuffer::from(std::mem::take(values)),
                nulls,
            )?),
            Data::Timestamp(values) => Arc::new(
                TimestampMicrosecondArray::try_new(
                    ScalarBuffer::from(std::mem::take(values)),
                    nulls,
                )?
                .with_timezone("UTC"),
            ),
            Data::TimestampMs(values) => Arc::new(
                TimestampMillisecondArray::try_new(
                    ScalarBuffer::from(std::mem::take(values)),
                    nulls,
                )?
                .with_timezone("UTC"),
            ),
            Data::Decimal {
                values,
                precision,
                scale,
            } => Arc::new(
                Decimal128Array::try_new(ScalarBuffer::from(std::mem::take(values)), nulls)?
                    .with_precision_and_scale(*precision, *scale as i8)?,
            ),
            Data::Text { offsets, bytes } => {
                let offsets = std::mem::replace(offsets, vec![0]);
                Arc::new(StringArray::try_new(
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    Buffer::from_vec(std::mem::take(bytes)),
                    nulls,
                )?)
            }
            Data::Struct(columns) => Arc::new(columns.finish(rows, nulls)?),
            Data::List {
                item,
                offsets,
                element,
            } => {
                let offsets = std::mem::replace(offsets, vec![0]);
                let values = element.finish()?;
                Arc::new(ListArray::try_new(
                    Arc::clone(item),
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    values,
                    nulls,
                )?)
            }
        })
    }
}

/// The null buffer for the rows so far (none when nothing is null), leaving the builder empty.
fn take_nulls(validity: &mut BooleanBufferBuilder) -> Option<NullBuffer> {
    let nulls = NullBuffer::new(validity.finish());
    (nulls.null_count() > 0).then_some(nulls)
}

/// One field of a struct (or of the record) with its sibling columns.
#[derive(Debug)]
struct Slot {
    name: String,
    column: Column,
    /// Indexes of the sibling slots `<name>_<type>`, in [`SIBLING_ORDER`].
    siblings: Vec<usize>,
}

/// The columns of a struct, or of a whole record.
#[derive(Debug)]
struct StructColumn {
    fields: Fields,
    slots: Vec<Slot>,
    /// Per slot, the slot whose value lands there this row ([`NO_ROUTE`] for none); reused
    /// from row to row.
    route: Vec<usize>,
    /// Typing from a token tape (see `from_tape`): the slot of each field name.
    by_name: HashMap<Vec<u8>, usize>,
    /// Typing from a token tape: the slot the n-th key of the last object named (objects
    /// usually list their keys in the same order).
    hints: Vec<usize>,
    /// Typing from a token tape: per slot, the number of the last object that gave it a
    /// value (`stamp`).
    seen: Vec<u32>,
    /// Typing from a token tape: the number of the object being typed.
    stamp: u32,
    /// Typing from a token tape: per slot, the number of the last object that gave it a
    /// non-null value (its own or one routed to it).
    valued: Vec<u32>,
    /// Typing from a token tape: the values of this object waiting for a sibling column
    /// (slot, token index); reused.
    deferred: Vec<(usize, usize)>,
}

impl StructColumn {
    fn new(fields: &[Field]) -> Self {
        let index: HashMap<&str, usize> = fields
            .iter()
            .enumerate()
            .map(|(position, field)| (field.name.as_str(), position))
            .collect();
        let slots = fields
            .iter()
            .map(|field| Slot {
                name: field.name.clone(),
                column: Column::new(&field.field_type),
                siblings: SIBLING_ORDER
                    .iter()
                    .filter_map(|type_name| {
                        index
                            .get(format!("{}_{type_name}", field.name).as_str())
                            .copied()
                    })
                    .collect(),
            })
            .collect();
        StructColumn {
            fields: fields.iter().map(arrow_field).collect(),
            slots,
            route: vec![NO_ROUTE; fields.len()],
            by_name: fields
                .iter()
                .enumerate()
                .map(|(position, field)| (field.name.as_bytes().to_vec(), position))
                .collect(),
            hints: Vec::new(),
            seen: vec![0; fields.len()],
            stamp: 0,
            valued: vec![0; fields.len()],
            deferred: Vec::new(),
        }
    }

    /// Append one row from an object: decide where each value lands, then push every column.
    fn push_fields<L: Lookup>(&mut self, object: &L) -> Result<(), RowError> {
        self.route.fill(NO_ROUTE);
        // Each key is looked up once per row (a lookup hashes the key).
        let present: Vec<Option<&Value>> = self
            .slots
            .iter()
            .map(|slot| object.lookup(&slot.name))
            .collect();
        if present.iter().filter(|v| v.is_some()).count() < object.key_count() {
            UNKNOWN_KEYS.with(|unknown| unknown.set(true));
        }
        let values: Vec<Option<&Value>> = present
            .into_iter()
            .map(|v| v.filter(|value| !value.is_null()))
            .collect();
        for (source, value) in values.iter().enumerate() {
            let slot = &self.slots[source];
            let Some(value) = *value else {
                continue;
            };
            if slot.column.fits(value) {
                self.route[source] = source;
                continue;
            }
            match find_home(&self.slots, &self.route, object, source, value) {
                Some(home) => self.route[home] = source,
                None => {
                    return Err(RowError::new(format!(
                        "a JSON {} fits neither its column ({}) nor a sibling column",
                        json_type(value),
                        slot.column.label
                    ))
                    .within(&slot.name));
                }
            }
        }
        for target in 0..self.slots.len() {
            let value = match self.route[target] {
                NO_ROUTE => None,
                source => values[source],
            };
            let slot = &mut self.slots[target];
            slot.column
                .push(value)
                .map_err(|error| error.within(&slot.name))?;
        }
        Ok(())
    }

    fn truncate(&mut self, rows: usize) {
        for slot in &mut self.slots {
            slot.column.truncate(rows);
        }
    }

    fn finish(
        &mut self,
        rows: usize,
        nulls: Option<NullBuffer>,
    ) -> Result<StructArray, ArrowError> {
        let arrays = self
            .slots
            .iter_mut()
            .map(|slot| slot.column.finish())
            .collect::<Result<Vec<_>, _>>()?;
        StructArray::try_new_with_length(self.fields.clone(), arrays, nulls, rows)
    }
}

/// The first free sibling of `from` (depth first, in [`SIBLING_ORDER`]) that `value` fits.
/// A sibling is free when the record has no value of its own for it.
fn find_home<L: Lookup>(
    slots: &[Slot],
    route: &[usize],
    object: &L,
    from: usize,
    value: &Value,
) -> Option<usize> {
    let free = |sibling: usize| {
        route.get(sibling) == Some(&NO_ROUTE)
            && slots
                .get(sibling)
                .is_some_and(|slot| own(object, &slot.name).is_none())
    };
    first_home(slots, from, &free, &mut |column| Some(column.fits(value))).flatten()
}

/// Where a value its own column (slot `from`) does not take goes, for `append` and for
/// typing from a tape alike: the first sibling that is `free` and whose column `takes` it,
/// depth first (each sibling, then its own siblings) in [`SIBLING_ORDER`]; a sibling that is
/// not free closes its branch. `Some(None)` for no home; `None` when `takes` cannot tell.
fn first_home(
    slots: &[Slot],
    from: usize,
    free: &dyn Fn(usize) -> bool,
    takes: &mut dyn FnMut(&Column) -> Option<bool>,
) -> Option<Option<usize>> {
    for &sibling in &slots.get(from)?.siblings {
        if !free(sibling) {
            continue;
        }
        if takes(&slots.get(sibling)?.column)? {
            return Some(Some(sibling));
        }
        if let Some(home) = first_home(slots, sibling, free, takes)? {
            return Some(Some(home));
        }
    }
    Some(None)
}

/// Types JSON records into an Arrow [`RecordBatch`] following one namespace's schema.
///
/// See the [module docs](super) for where each value lands. An untypeable record is returned
/// as a [`Deadletter`] and leaves the batch exactly as it was.
#[derive(Debug)]
pub struct RecordBatchBuilder {
    schema: SchemaRef,
    root: StructColumn,
    rows: usize,
    flatten_events: bool,
    namespace: Option<String>,
    /// Whether an appended record had a key the schema has no column for (its value was
    /// not stored).
    unknown_keys: bool,
    /// Typing from cells: where the columns of the last page's rows go.
    cell_slots: from_cells::CellSlots,
    /// `merge_by_key`'s key columns, each with its slot (`None`: the schema has no such
    /// column): every row needs a value of its own in each ([`Self::with_merge_key`]).
    keys: Vec<(String, Option<usize>)>,
}

impl RecordBatchBuilder {
    /// A builder for records of this namespace schema, without flattening.
    pub fn new(ns: &NamespaceSchema) -> Self {
        RecordBatchBuilder {
            schema: Arc::new(to_arrow_schema(&ns.fields)),
            root: StructColumn::new(&ns.fields),
            rows: 0,
            flatten_events: false,
            namespace: None,
            unknown_keys: false,
            cell_slots: from_cells::CellSlots::default(),
            keys: Vec::new(),
        }
    }

    /// Rows are merged by these key columns (`write_policy: merge_by_key`; empty: they are
    /// not): a record with no value of its own in one of them is refused as a
    /// [`FailureCode::BadKey`] deadletter, whether the value is null or missing, is an
    /// object or an array, or does not fit the key column (it would land in a sibling column
    /// and leave the key NULL). Merged, such a record would share the NULL key with every
    /// other one and replace them. A truncate (`_op` is `t`) names no key and is taken.
    pub fn with_merge_key(mut self, columns: &[String]) -> Self {
        self.keys = columns
            .iter()
            .map(|name| {
                (
                    name.clone(),
                    self.root.by_name.get(name.as_bytes()).copied(),
                )
            })
            .collect();
        self
    }

    /// Whether the row being added (row `self.rows`, pushed to every column) holds a value of
    /// its own in each key column of a scalar type: the fast paths' test, which refuse the
    /// record otherwise, for [`Self::append`] to decide (a truncate is taken there).
    fn keys_hold(&self) -> bool {
        self.keys.iter().all(|(_, slot)| {
            slot.and_then(|slot| self.root.slots.get(slot))
                .is_some_and(|slot| {
                    !matches!(slot.column.data, Data::Struct(_) | Data::List { .. })
                        && self.holds_row(slot)
                })
        })
    }

    /// Whether `slot`'s column took a value (not a null) for the row being added.
    fn holds_row(&self, slot: &Slot) -> bool {
        slot.column.len() == self.rows + 1 && slot.column.validity.get_bit(self.rows)
    }

    /// Why the row being added (from `object`, pushed to every column) cannot be merged by
    /// key; `None` when it can, or when it is a truncate (`_op` is `t`).
    fn key_fault<L: Lookup>(&self, object: &L) -> Option<String> {
        if self.keys.is_empty()
            || object
                .lookup(crate::sinks::iceberg::merge::OP_COLUMN)
                .and_then(Value::as_str)
                == Some("t")
        {
            return None;
        }
        for (name, slot) in &self.keys {
            let Some(value) = own(object, name) else {
                let what = if object.lookup(name).is_some() {
                    "null"
                } else {
                    "missing"
                };
                return Some(format!(
                    "cannot merge by key: the `primary_key` column `{name}` is {what} in this record"
                ));
            };
            if value.is_object() || value.is_array() {
                return Some(format!(
                    "cannot merge by key: the `primary_key` column `{name}` holds a JSON {} in this record, not a single value",
                    json_type(value)
                ));
            }
            let column = slot.and_then(|slot| self.root.slots.get(slot));
            match column {
                Some(slot) if self.holds_row(slot) => {}
                Some(slot) => {
                    return Some(format!(
                        "cannot merge by key: the `primary_key` column `{name}` ({}) cannot hold this record's value, a JSON {} (it would land in a sibling column and leave the key NULL)",
                        slot.column.label,
                        json_type(value)
                    ));
                }
                None => {
                    return Some(format!(
                        "cannot merge by key: the schema has no `primary_key` column `{name}`"
                    ));
                }
            }
        }
        None
    }

    /// Flatten nested objects into dotted keys before typing, as inference did when
    /// `TransformOptions::flatten_events` was set.
    pub fn with_flatten_events(mut self, flatten_events: bool) -> Self {
        self.flatten_events = flatten_events;
        self
    }

    /// The namespace name to put in deadletters and errors.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The Arrow schema of the batches this builder makes.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Type one record and add it as a row. `locate` (called only on failure) gives the
    /// record's source URI, line number and byte offset for the deadletter.
    ///
    /// A record with a value that fits neither its column nor any sibling column is rejected
    /// whole, as a [`FailureCode::Untypeable`] deadletter, and no row is added; so is one
    /// that cannot be merged by key, as a [`FailureCode::BadKey`] deadletter
    /// ([`Self::with_merge_key`]).
    pub fn append(
        &mut self,
        record: &Map<String, Value>,
        locate: impl FnOnce() -> (String, u64, u64),
    ) -> Result<(), Deadletter> {
        UNKNOWN_KEYS.with(|unknown| unknown.set(false));
        let flat = self.flatten_events.then(|| flatten(record));
        let pushed = match &flat {
            Some(flat) => self.root.push_fields(flat),
            None => self.root.push_fields(record),
        };
        self.unknown_keys |= UNKNOWN_KEYS.with(|unknown| unknown.replace(false));
        let refused = match pushed {
            Ok(()) => match &flat {
                Some(flat) => self.key_fault(flat),
                None => self.key_fault(record),
            }
            .map(|error| (error, FailureCode::BadKey)),
            Err(error) => Some((error.describe(), FailureCode::Untypeable)),
        };
        let Some((error, code)) = refused else {
            self.rows += 1;
            return Ok(());
        };
        self.root.truncate(self.rows);
        let (source_uri, line, offset) = locate();
        let raw = serde_json::to_string(record).unwrap_or_default();
        Err(Deadletter {
            source_uri,
            line,
            offset,
            raw: Deadletter::clip_raw(&raw),
            error,
            code,
            namespace: self.namespace.clone(),
        })
    }

    /// Whether any record appended so far had a key (at any depth) that the schema has no
    /// column for. Such a value is not stored: the caller should evolve the schema first.
    pub fn saw_unknown_keys(&self) -> bool {
        self.unknown_keys
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether no rows were appended since the last [`finish`](Self::finish).
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The rows appended so far as a record batch; the builder starts over empty.
    pub fn finish(&mut self) -> Result<RecordBatch, SchemaError> {
        let rows = std::mem::take(&mut self.rows);
        let to_error = |error: ArrowError| SchemaError::Arrow {
            namespace: self.namespace.clone().unwrap_or_default(),
            message: error.to_string(),
        };
        let columns = self
            .root
            .slots
            .iter_mut()
            .map(|slot| slot.column.finish())
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_error)?;
        RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(to_error)
    }
}

#[cfg(test)]
mod tests;
