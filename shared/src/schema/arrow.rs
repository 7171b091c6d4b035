//! Arrow schemas for inferred fields, and typing JSON records into Arrow record batches.
//!
//! [`RecordBatchBuilder`] keeps its own growable buffers (plain vectors and bit builders) so
//! that a record that turns out to be untypeable half-way through can be rolled back by
//! truncating every column to the previous row count; the Arrow arrays are assembled from
//! those buffers, without copying values one by one, in [`RecordBatchBuilder::finish`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ::arrow::array::{
    ArrayRef, BooleanArray, BooleanBufferBuilder, Date32Array, Float64Array, Int32Array,
    Int64Array, ListArray, StringArray, StructArray, TimestampMicrosecondArray,
    TimestampMillisecondArray,
};
use ::arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use ::arrow::datatypes::{DataType, Field as ArrowField, Fields, Schema, SchemaRef, TimeUnit};
use ::arrow::error::ArrowError;
use ::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use chrono::Datelike;
use serde_json::{Map, Value};

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
        FieldType::String => DataType::Utf8,
        FieldType::Struct(fields) => {
            DataType::Struct(fields.iter().map(arrow_field).collect::<Fields>())
        }
        FieldType::List(element) => DataType::List(Arc::new(element_field(element))),
    }
}

/// Sibling type names, in the order a value that does not fit its column tries them.
const SIBLING_ORDER: [&str; 10] = [
    "boolean",
    "int",
    "long",
    "double",
    "timestamp",
    "timestamp_ms",
    "date",
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
            Data::Long(_) | Data::TimestampMs(_) => value.as_i64().is_some(),
            Data::Double(_) => match value {
                Value::Number(_) => true,
                Value::String(text) => parse_numeric(text).is_some(),
                _ => false,
            },
            Data::Date(_) => value
                .as_str()
                .is_some_and(|text| parse_date(text).is_some()),
            Data::Timestamp(_) => value
                .as_i64()
                .is_some_and(|secs| secs.checked_mul(1_000_000).is_some()),
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
            Data::Long(values) | Data::TimestampMs(values) => match value.as_i64() {
                Some(int) => values.push(int),
                None => return Err(mismatch(label, value)),
            },
            Data::Timestamp(values) => {
                match value.as_i64().and_then(|secs| secs.checked_mul(1_000_000)) {
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
    for &sibling in &slots[from].siblings {
        if route[sibling] != NO_ROUTE || own(object, &slots[sibling].name).is_some() {
            continue;
        }
        if slots[sibling].column.fits(value) {
            return Some(sibling);
        }
        if let Some(home) = find_home(slots, route, object, sibling, value) {
            return Some(home);
        }
    }
    None
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
        }
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
    /// whole, as a [`FailureCode::Untypeable`] deadletter, and no row is added.
    pub fn append(
        &mut self,
        record: &Map<String, Value>,
        locate: impl FnOnce() -> (String, u64, u64),
    ) -> Result<(), Deadletter> {
        UNKNOWN_KEYS.with(|unknown| unknown.set(false));
        let pushed = if self.flatten_events {
            self.root.push_fields(&flatten(record))
        } else {
            self.root.push_fields(record)
        };
        self.unknown_keys |= UNKNOWN_KEYS.with(|unknown| unknown.replace(false));
        match pushed {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(error) => {
                self.root.truncate(self.rows);
                let (source_uri, line, offset) = locate();
                let raw = serde_json::to_string(record).unwrap_or_default();
                Err(Deadletter {
                    source_uri,
                    line,
                    offset,
                    raw: Deadletter::clip_raw(&raw),
                    error: error.describe(),
                    code: FailureCode::Untypeable,
                    namespace: self.namespace.clone(),
                })
            }
        }
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
mod tests {
    use super::*;
    use crate::schema::{SchemaInferrer, TransformOptions};
    use ::arrow::array::{Array, AsArray};
    use ::arrow::datatypes::{Date32Type, Float64Type, Int32Type, Int64Type};
    use proptest::prelude::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn schema_of(fields: Vec<Field>) -> NamespaceSchema {
        NamespaceSchema { fields, records: 0 }
    }

    fn here() -> (String, u64, u64) {
        ("file:///data.jsonl".to_owned(), 7, 120)
    }

    fn build(ns: &NamespaceSchema, records: &[Value]) -> RecordBatch {
        let mut builder = RecordBatchBuilder::new(ns);
        for record in records {
            builder.append(&object(record.clone()), here).unwrap();
        }
        builder.finish().unwrap()
    }

    fn list(element: FieldType) -> FieldType {
        FieldType::List(Box::new(element))
    }

    #[test]
    fn arrow_schema_maps_every_type_with_nullable_fields() {
        let fields = vec![
            Field::new("b", FieldType::Boolean),
            Field::new("i", FieldType::Int),
            Field::new("l", FieldType::Long),
            Field::new("d", FieldType::Double),
            Field::new("dt", FieldType::Date),
            Field::new("ts", FieldType::Timestamp),
            Field::new("tms", FieldType::TimestampMs),
            Field::new("s", FieldType::String),
            Field::new(
                "st",
                FieldType::Struct(vec![Field::new("x", FieldType::Int)]),
            ),
            Field::new("li", list(FieldType::String)),
        ];
        let schema = to_arrow_schema(&fields);
        let types: Vec<DataType> = schema
            .fields()
            .iter()
            .map(|field| field.data_type().clone())
            .collect();
        assert_eq!(
            types,
            [
                DataType::Boolean,
                DataType::Int32,
                DataType::Int64,
                DataType::Float64,
                DataType::Date32,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                DataType::Utf8,
                DataType::Struct(Fields::from(vec![ArrowField::new(
                    "x",
                    DataType::Int32,
                    true
                )])),
                DataType::List(Arc::new(ArrowField::new("element", DataType::Utf8, true))),
            ]
        );
        assert!(schema.fields().iter().all(|field| field.is_nullable()));
    }

    #[test]
    fn scalars_land_in_their_columns_and_missing_or_null_values_are_nulls() {
        let ns = schema_of(vec![
            Field::new("b", FieldType::Boolean),
            Field::new("d", FieldType::Double),
            Field::new("dt", FieldType::Date),
            Field::new("i", FieldType::Int),
            Field::new("l", FieldType::Long),
            Field::new("s", FieldType::String),
            Field::new("tms", FieldType::TimestampMs),
            Field::new("ts", FieldType::Timestamp),
        ]);
        let batch = build(
            &ns,
            &[
                json!({"b": true, "d": 1.5, "dt": "1970-01-02", "i": -3, "l": 5_000_000_000_i64,
                       "s": "hi", "tms": 1_700_000_000_123_i64, "ts": 1_700_000_000}),
                json!({"b": null, "d": 2, "dt": "2024-02-29", "s": 42, "extra": "ignored"}),
                json!({"d": "3.25", "s": {"k": [1, true]}}),
            ],
        );
        assert_eq!(batch.num_rows(), 3);
        let b = batch.column(0).as_boolean();
        assert!(b.value(0));
        assert!(b.is_null(1) && b.is_null(2));
        let d = batch.column(1).as_primitive::<Float64Type>();
        assert_eq!(d.values().to_vec(), [1.5, 2.0, 3.25]);
        let dt = batch.column(2).as_primitive::<Date32Type>();
        assert_eq!(dt.value(0), 1);
        assert_eq!(dt.value(1), 19_782);
        assert!(dt.is_null(2));
        let i = batch.column(3).as_primitive::<Int32Type>();
        assert_eq!(i.value(0), -3);
        assert_eq!(i.null_count(), 2);
        assert_eq!(
            batch.column(4).as_primitive::<Int64Type>().value(0),
            5_000_000_000
        );
        let s = batch.column(5).as_string::<i32>();
        assert_eq!(
            [s.value(0), s.value(1), s.value(2)],
            ["hi", "42", r#"{"k":[1,true]}"#]
        );
        let tms = batch
            .column(6)
            .as_primitive::<::arrow::datatypes::TimestampMillisecondType>();
        assert_eq!(tms.value(0), 1_700_000_000_123);
        let ts = batch
            .column(7)
            .as_primitive::<::arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_000_000);
        assert_eq!(batch.schema(), Arc::new(to_arrow_schema(&ns.fields)));
    }

    #[test]
    fn values_that_do_not_fit_go_to_their_sibling_column_and_numeric_strings_stay_in_double() {
        let ns = schema_of(vec![
            Field::new("price", FieldType::Double),
            Field::new("price_string", FieldType::String),
        ]);
        let batch = build(
            &ns,
            &[
                json!({"price": 1}),
                json!({"price": "7.5"}),
                json!({"price": "n/a"}),
                json!({}),
            ],
        );
        let price = batch.column(0).as_primitive::<Float64Type>();
        assert_eq!((price.value(0), price.value(1)), (1.0, 7.5));
        assert!(price.is_null(2) && price.is_null(3));
        let text = batch.column(1).as_string::<i32>();
        assert_eq!(text.null_count(), 3);
        assert_eq!(text.value(2), "n/a");
    }

    #[test]
    fn siblings_are_tried_in_type_order_and_through_merged_siblings() {
        // `a_string` is a real int field that also took strings from `a` at discovery,
        // so it has its own sibling `a_string_string`.
        let ns = schema_of(vec![
            Field::new("a", FieldType::Int),
            Field::new("a_long", FieldType::Long),
            Field::new("a_string", FieldType::Int),
            Field::new("a_string_string", FieldType::String),
        ]);
        let batch = build(&ns, &[json!({"a": 9_000_000_000_i64}), json!({"a": "x"})]);
        assert_eq!(
            batch.column(1).as_primitive::<Int64Type>().value(0),
            9_000_000_000
        );
        assert!(batch.column(2).is_null(1));
        assert_eq!(batch.column(3).as_string::<i32>().value(1), "x");
    }

    #[test]
    fn a_sibling_column_is_not_used_when_the_record_has_its_own_value_for_it() {
        let ns = schema_of(vec![
            Field::new("price", FieldType::Double),
            Field::new("price_string", FieldType::String),
        ]);
        let mut builder = RecordBatchBuilder::new(&ns);
        let record = object(json!({"price": "n/a", "price_string": "own"}));
        let rejected = builder.append(&record, here).unwrap_err();
        assert!(rejected.error.contains("`price`"), "{}", rejected.error);
        assert_eq!(builder.len(), 0);
    }

    #[test]
    fn nested_structs_and_lists_are_built_recursively() {
        let item = FieldType::Struct(vec![
            Field::new("qty", FieldType::Int),
            Field::new("sku", FieldType::String),
        ]);
        let ns = schema_of(vec![
            Field::new("items", list(item)),
            Field::new("matrix", list(list(FieldType::Int))),
            Field::new(
                "meta",
                FieldType::Struct(vec![Field::new(
                    "inner",
                    FieldType::Struct(vec![Field::new("flag", FieldType::Boolean)]),
                )]),
            ),
        ]);
        let batch = build(
            &ns,
            &[
                json!({"items": [{"qty": 1, "sku": "a"}, {"sku": "b"}, null],
                       "matrix": [[1, 2], [], null], "meta": {"inner": {"flag": true}}}),
                json!({"items": null, "meta": {}}),
                json!({"items": [], "matrix": [[3]]}),
            ],
        );
        let items = batch.column(0).as_list::<i32>();
        assert_eq!(items.value_offsets(), [0, 3, 3, 3]);
        assert!(items.is_null(1) && items.is_valid(2));
        let elements = items.values().as_struct();
        assert_eq!(elements.len(), 3);
        assert!(elements.is_null(2));
        let qty = elements.column(0).as_primitive::<Int32Type>();
        assert_eq!(qty.value(0), 1);
        assert!(qty.is_null(1));
        assert_eq!(elements.column(1).as_string::<i32>().value(1), "b");

        let matrix = batch.column(1).as_list::<i32>();
        assert_eq!(matrix.value_offsets(), [0, 3, 3, 4]);
        let rows = matrix.values().as_list::<i32>();
        assert_eq!(rows.value_offsets(), [0, 2, 2, 2, 3]);
        assert!(rows.is_null(2));
        assert_eq!(
            rows.values().as_primitive::<Int32Type>().values().to_vec(),
            [1, 2, 3]
        );

        let meta = batch.column(2).as_struct();
        assert!(meta.is_valid(1) && meta.is_null(2));
        let inner = meta.column(0).as_struct();
        assert!(inner.is_valid(0) && inner.is_null(1));
        assert!(inner.column(0).as_boolean().value(0));
    }

    #[test]
    fn an_untypeable_record_becomes_a_deadletter_and_leaves_the_batch_consistent() {
        let item = FieldType::Struct(vec![Field::new("qty", FieldType::Int)]);
        let ns = schema_of(vec![
            Field::new("a", FieldType::String),
            Field::new("items", list(item)),
            Field::new("z", FieldType::Long),
        ]);
        let mut builder = RecordBatchBuilder::new(&ns).with_namespace("orders");
        builder
            .append(
                &object(json!({"a": "first", "items": [{"qty": 1}], "z": 1})),
                here,
            )
            .unwrap();
        // Fails deep inside the second list element, after `a` and the first element were
        // already appended.
        let bad = object(json!({"a": "bad", "items": [{"qty": 2}, {"qty": "many"}], "z": 2}));
        let rejected = builder.append(&bad, here).unwrap_err();
        assert_eq!(rejected.code, FailureCode::Untypeable);
        assert_eq!(rejected.source_uri, "file:///data.jsonl");
        assert_eq!((rejected.line, rejected.offset), (7, 120));
        assert_eq!(rejected.namespace.as_deref(), Some("orders"));
        assert_eq!(
            rejected.error,
            "cannot type field `items[1].qty`: a JSON string fits neither its column (int) nor a sibling column"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&rejected.raw).unwrap(),
            Value::Object(bad)
        );
        // Also at the top level, after earlier columns were appended.
        let rejected = builder
            .append(&object(json!({"a": "x", "z": true})), here)
            .unwrap_err();
        assert_eq!(
            rejected.error,
            "cannot type field `z`: a JSON boolean fits neither its column (long) nor a sibling column"
        );
        builder
            .append(
                &object(json!({"a": "last", "items": [{"qty": 3}], "z": 3})),
                here,
            )
            .unwrap();
        assert_eq!(builder.len(), 2);

        let batch = builder.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert!(batch.columns().iter().all(|column| column.len() == 2));
        let a = batch.column(0).as_string::<i32>();
        assert_eq!([a.value(0), a.value(1)], ["first", "last"]);
        let items = batch.column(1).as_list::<i32>();
        assert_eq!(items.value_offsets(), [0, 1, 2]);
        let qty = items
            .values()
            .as_struct()
            .column(0)
            .as_primitive::<Int32Type>();
        assert_eq!(qty.values().to_vec(), [1, 3]);
        assert_eq!(
            batch
                .column(2)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec(),
            [1, 3]
        );
    }

    #[test]
    fn integers_too_big_for_their_column_are_untypeable_without_a_sibling() {
        let ns = schema_of(vec![Field::new("n", FieldType::Int)]);
        let mut builder = RecordBatchBuilder::new(&ns);
        let rejected = builder
            .append(&object(json!({"n": 3_000_000_000_i64})), here)
            .unwrap_err();
        assert!(
            rejected.error.contains("JSON integer"),
            "{}",
            rejected.error
        );
        assert!(builder.is_empty());
        assert_eq!(builder.finish().unwrap().num_rows(), 0);
    }

    #[test]
    fn a_list_element_that_does_not_fit_names_its_index() {
        let ns = schema_of(vec![Field::new("tags", list(FieldType::Int))]);
        let mut builder = RecordBatchBuilder::new(&ns);
        let rejected = builder
            .append(&object(json!({"tags": [1, "x"]})), here)
            .unwrap_err();
        assert_eq!(
            rejected.error,
            "cannot type field `tags[1]`: a JSON string does not fit the column type int"
        );
        assert!(builder.is_empty());
    }

    #[test]
    fn finish_starts_a_fresh_batch() {
        let ns = schema_of(vec![
            Field::new("s", FieldType::String),
            Field::new("n", FieldType::Int),
        ]);
        let mut builder = RecordBatchBuilder::new(&ns);
        builder
            .append(&object(json!({"s": "one", "n": 1})), here)
            .unwrap();
        assert_eq!(builder.finish().unwrap().num_rows(), 1);
        builder.append(&object(json!({"s": "two"})), here).unwrap();
        builder.append(&object(json!({"n": 3})), here).unwrap();
        let batch = builder.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        let s = batch.column(0).as_string::<i32>();
        assert_eq!(s.value(0), "two");
        assert!(s.is_null(1));
    }

    #[test]
    fn a_schema_without_fields_still_counts_rows() {
        let mut builder = RecordBatchBuilder::new(&NamespaceSchema::default());
        builder
            .append(&object(json!({"ignored": 1})), here)
            .unwrap();
        assert_eq!(builder.finish().unwrap().num_rows(), 1);
    }

    #[test]
    fn with_flatten_events_the_builder_reads_dotted_columns() {
        let ns = schema_of(vec![
            Field::new("a.b", FieldType::Int),
            Field::new("a.c", FieldType::String),
            Field::new("list", list(FieldType::String)),
        ]);
        let mut builder = RecordBatchBuilder::new(&ns).with_flatten_events(true);
        builder
            .append(
                &object(json!({"a": {"b": 1, "c": "x"}, "list": [{"k": 1}]})),
                here,
            )
            .unwrap();
        let batch = builder.finish().unwrap();
        assert_eq!(batch.column(0).as_primitive::<Int32Type>().value(0), 1);
        assert_eq!(batch.column(1).as_string::<i32>().value(0), "x");
        let list = batch.column(2).as_list::<i32>();
        assert_eq!(list.values().as_string::<i32>().value(0), r#"{"k":1}"#);
    }

    #[test]
    fn maps_over_the_field_limit_and_values_beyond_max_depth_are_typed_as_json_text() {
        let options = TransformOptions {
            max_fields_per_struct: 3,
            ..TransformOptions::default()
        };
        let deep = (0..40).fold(json!({"end": [1]}), |inner, _| json!({ "n": inner }));
        let records = [
            json!({"m": {"a": 1}, "items": [{"x": 1}], "deep": deep}),
            json!({"m": {"b": [true]}, "items": [{"y": 2}, {"z": 3}, {"w": 4}]}),
            json!({"m": {"c": null, "d": {"e": 1}}}),
            json!({"m": "plain text"}),
        ];
        let mut inferrer = SchemaInferrer::new(options);
        for record in &records {
            inferrer.add(&object(record.clone())).unwrap();
        }
        let schema = inferrer.finish("p", "w");
        let ns = &schema.namespaces["default"];
        let batch = build(ns, &records);
        let names: Vec<&str> = ns.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["deep", "items", "m"]);
        assert_eq!(ns.fields[1].field_type, list(FieldType::String));
        assert_eq!(ns.fields[2].field_type, FieldType::String);

        let m = batch.column(2).as_string::<i32>();
        assert_eq!(
            (0..4).map(|row| m.value(row)).collect::<Vec<_>>(),
            [
                r#"{"a":1}"#,
                r#"{"b":[true]}"#,
                r#"{"c":null,"d":{"e":1}}"#,
                "plain text"
            ]
        );
        let items = batch.column(1).as_list::<i32>();
        let elements = items.values().as_string::<i32>();
        assert_eq!(
            (0..4).map(|i| elements.value(i)).collect::<Vec<_>>(),
            [r#"{"x":1}"#, r#"{"y":2}"#, r#"{"z":3}"#, r#"{"w":4}"#]
        );
        // `deep` is a struct down to level 32; below that the object is JSON text.
        let mut column = Arc::clone(batch.column(0));
        for _ in 1..crate::schema::MAX_DEPTH {
            column = Arc::clone(column.as_struct().column(0));
        }
        let text = column.as_struct().column(0).as_string::<i32>();
        let expected = (0..40 - crate::schema::MAX_DEPTH)
            .fold(json!({"end": [1]}), |inner, _| json!({ "n": inner }));
        assert_eq!(text.value(0), expected.to_string());
        assert!(text.is_null(1));
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            prop_oneof![
                any::<i64>(),
                -5i64..5,
                Just(i64::from(i32::MAX) + 1),
                1_262_304_000i64..1_262_304_010,
                1_262_304_000_000i64..1_262_304_000_010,
            ]
            .prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            prop_oneof![
                Just("2024-01-31"),
                Just("2023-02-30"),
                Just("-1.5e3"),
                Just("text")
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(arb_key(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn arb_key() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("B"), Just("c.d")].prop_map(str::to_owned)
    }

    proptest! {
        #[test]
        fn every_record_used_for_discovery_types_into_the_discovered_schema(
            records in prop::collection::vec(
                prop::collection::vec((arb_key(), arb_value()), 0..4)
                    .prop_map(|pairs| pairs.into_iter().collect::<Map<String, Value>>()),
                1..16,
            ),
            flatten in any::<bool>(),
            max_fields in prop_oneof![Just(TransformOptions::DEFAULT_MAX_FIELDS_PER_STRUCT), 1..4usize],
        ) {
            let options = TransformOptions {
                flatten_events: flatten,
                max_fields_per_struct: max_fields,
                ..TransformOptions::default()
            };
            let mut inferrer = SchemaInferrer::new(options);
            for record in &records {
                // Records too wide for a small limit have no schema to type into.
                if let Err(error) = inferrer.add(record) {
                    prop_assert!(matches!(error, SchemaError::TooManyFields { .. }), "{}", error);
                    return Ok(());
                }
            }
            let schema = inferrer.finish("p", "w");
            let ns = &schema.namespaces["default"];
            let mut builder = RecordBatchBuilder::new(ns).with_flatten_events(flatten);
            for record in &records {
                if let Err(rejected) = builder.append(record, here) {
                    return Err(TestCaseError::fail(format!(
                        "{} for {}\nschema: {}",
                        rejected.error,
                        rejected.raw,
                        schema.to_json_pretty()
                    )));
                }
            }
            let batch = builder.finish().unwrap();
            prop_assert_eq!(batch.num_rows(), records.len());
        }
    }

    #[test]
    fn keys_the_schema_has_no_column_for_are_noticed_at_any_depth() {
        let ns = NamespaceSchema {
            fields: vec![
                Field::new("a", FieldType::Long),
                Field::new(
                    "s",
                    FieldType::Struct(vec![Field::new("x", FieldType::Long)]),
                ),
            ],
            records: 1,
        };
        let here = || (String::new(), 0, 0);
        let mut builder = RecordBatchBuilder::new(&ns);
        builder
            .append(
                &object(serde_json::json!({"a": 1, "s": {"x": 2}, "n": null})),
                here,
            )
            .unwrap();
        assert!(
            builder.saw_unknown_keys(),
            "a top-level key that is only null still counts"
        );
        let mut builder = RecordBatchBuilder::new(&ns);
        builder
            .append(&object(serde_json::json!({"a": 1, "s": {"x": 2}})), here)
            .unwrap();
        builder
            .append(&object(serde_json::json!({"a": null})), here)
            .unwrap();
        assert!(!builder.saw_unknown_keys());
        builder
            .append(&object(serde_json::json!({"s": {"x": 2, "y": 3}})), here)
            .unwrap();
        assert!(builder.saw_unknown_keys(), "a nested key counts too");
    }
}
