//! Order-independent schema inference.
//!
//! Every field keeps an [`Acc`]: counts and bounds over the values seen, merged by addition,
//! minimum and maximum, so merging is commutative and associative. Types are decided only in
//! [`SchemaInferrer::finish`], from the merged accumulators.
//!
//! Two limits keep the accumulators bounded, and both depend only on *where* a value is and
//! on the *set* of keys seen there, never on the order of records:
//!
//! - depth: an object or array more than [`MAX_DEPTH`] levels down is counted as a string
//!   (its JSON text), so the saved schema file stays readable;
//! - width: an object accumulator whose keys exceed `max_fields_per_struct` *collapses*: it
//!   drops its children and counts every object (before and after) as a string. Collapsing is
//!   monotone (a collapsed accumulator stays collapsed, merging with one collapses) and
//!   happens exactly when the union of the keys seen exceeds the cap.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::error::SchemaError;
use super::namespace::{TransformOptions, flatten, route};
use super::saved::PipelineSchema;
use super::{Field, FieldType, MAX_DEPTH, NamespaceSchema};

/// Unix seconds accepted as `timestamp`: 2010-01-01 (inclusive) to 2100-01-01 (exclusive).
pub(crate) const SECONDS_RANGE: std::ops::Range<i64> = 1_262_304_000..4_102_444_800;
/// Unix milliseconds accepted as `timestamp_ms`: 2010-01-01 (inclusive) to 2040-01-01 (exclusive).
pub(crate) const MILLIS_RANGE: std::ops::Range<i64> = 1_262_304_000_000..2_208_988_800_000;

/// The date a `YYYY-MM-DD` string names, if it is exactly that shape and a real day.
pub(crate) fn parse_date(text: &str) -> Option<chrono::NaiveDate> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let mut value = 0u32;
        for &byte in &bytes[range] {
            if !byte.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u32::from(byte - b'0');
        }
        Some(value)
    };
    let year = i32::try_from(digits(0..4)?).ok()?;
    chrono::NaiveDate::from_ymd_opt(year, digits(5..7)?, digits(8..10)?)
}

/// The number a numeric string holds: decimal number text (sign, digits, fraction, exponent)
/// with a finite value.
pub(crate) fn parse_numeric(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    if !bytes.iter().any(u8::is_ascii_digit)
        || !bytes
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
    {
        return None;
    }
    text.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// The kinds a field's values can have, in the precedence order for the main column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Struct,
    List,
    Number,
    Boolean,
    Text,
}

/// A summary of all values seen for one field (or one list element position).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Acc {
    nulls: u64,
    bools: u64,
    ints: u64,
    /// Smallest and largest integer, when `ints > 0`.
    int_bounds: Option<(i64, i64)>,
    ints_in_seconds: u64,
    ints_in_millis: u64,
    floats: u64,
    strings: u64,
    strings_dates: u64,
    strings_numeric: u64,
    /// Objects kept as structs (not counted here once collapsed: they are then strings).
    objects: u64,
    children: BTreeMap<String, Acc>,
    /// More than `max_fields_per_struct` distinct keys were seen: objects here are JSON text.
    collapsed: bool,
    arrays: u64,
    elements: Option<Box<Acc>>,
}

/// Where an accumulator sits: its depth (1 for a top-level field, one more inside each
/// object or list) and its path, built only when a warning needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'p> {
    parent: Option<&'p Place<'p>>,
    /// A key, or `[]` for the elements of a list.
    segment: &'p str,
    depth: usize,
}

impl<'p> Place<'p> {
    /// A top-level field of a namespace.
    pub(crate) fn top(key: &'p str) -> Self {
        Place {
            parent: None,
            segment: key,
            depth: 1,
        }
    }

    fn child<'c>(&'c self, key: &'c str) -> Place<'c> {
        Place {
            parent: Some(self),
            segment: key,
            depth: self.depth + 1,
        }
    }

    fn elements(&self) -> Place<'_> {
        self.child("[]")
    }

    /// The path as shown in warnings: `a.b`, `items[].tags`.
    fn path(&self) -> String {
        let mut segments = vec![self.segment];
        let mut current = self;
        while let Some(parent) = current.parent {
            segments.push(parent.segment);
            current = parent;
        }
        let mut text = String::new();
        for segment in segments.iter().rev() {
            if !text.is_empty() && *segment != "[]" {
                text.push('.');
            }
            text.push_str(segment);
        }
        text
    }
}

/// The width limit, and the paths that collapsed during one `add` or `merge`.
#[derive(Debug)]
pub(crate) struct Walk {
    max_fields: usize,
    collapsed: Vec<String>,
}

impl Walk {
    pub(crate) fn new(max_fields: usize) -> Self {
        Walk {
            max_fields,
            collapsed: Vec::new(),
        }
    }
}

impl Acc {
    /// Account for one value found at `place`.
    pub(crate) fn add(&mut self, value: &Value, place: &Place<'_>, walk: &mut Walk) {
        match value {
            Value::Null => self.nulls += 1,
            Value::Bool(_) => self.bools += 1,
            Value::Number(number) => match number.as_i64() {
                Some(int) => self.add_int(int),
                None => self.floats += 1,
            },
            Value::String(text) => {
                self.strings += 1;
                if parse_date(text).is_some() {
                    self.strings_dates += 1;
                }
                if parse_numeric(text).is_some() {
                    self.strings_numeric += 1;
                }
            }
            Value::Object(_) | Value::Array(_) if place.depth > MAX_DEPTH => self.add_json_text(),
            Value::Object(_) if self.collapsed => self.add_json_text(),
            Value::Object(object) => {
                self.objects += 1;
                for (key, child) in object {
                    add_to(&mut self.children, key, child, &place.child(key), walk);
                    if self.children.len() > walk.max_fields {
                        self.collapse(place, walk);
                        break;
                    }
                }
            }
            Value::Array(items) => {
                self.arrays += 1;
                let elements = self.elements.get_or_insert_with(Box::default);
                let place = place.elements();
                for item in items {
                    elements.add(item, &place, walk);
                }
            }
        }
    }

    /// Count an object or array that is kept as its JSON text: a string that is neither a
    /// date nor numeric.
    fn add_json_text(&mut self) {
        self.strings += 1;
    }

    /// Turn into the JSON text state for good: the objects seen so far become strings and
    /// the children are dropped.
    fn collapse(&mut self, place: &Place<'_>, walk: &mut Walk) {
        self.collapsed = true;
        self.strings += std::mem::take(&mut self.objects);
        self.children = BTreeMap::new();
        walk.collapsed.push(place.path());
    }

    fn add_int(&mut self, int: i64) {
        self.ints += 1;
        self.int_bounds = Some(match self.int_bounds {
            Some((low, high)) => (low.min(int), high.max(int)),
            None => (int, int),
        });
        if SECONDS_RANGE.contains(&int) {
            self.ints_in_seconds += 1;
        }
        if MILLIS_RANGE.contains(&int) {
            self.ints_in_millis += 1;
        }
    }

    /// Combine with another summary of the values at `place` (commutative and associative).
    pub(crate) fn merge(&mut self, other: Acc, place: &Place<'_>, walk: &mut Walk) {
        self.nulls += other.nulls;
        self.bools += other.bools;
        self.ints += other.ints;
        self.int_bounds = match (self.int_bounds, other.int_bounds) {
            (Some((a_low, a_high)), Some((b_low, b_high))) => {
                Some((a_low.min(b_low), a_high.max(b_high)))
            }
            (bounds, None) | (None, bounds) => bounds,
        };
        self.ints_in_seconds += other.ints_in_seconds;
        self.ints_in_millis += other.ints_in_millis;
        self.floats += other.floats;
        self.strings += other.strings;
        self.strings_dates += other.strings_dates;
        self.strings_numeric += other.strings_numeric;
        if !self.collapsed
            && (other.collapsed || union_exceeds(&self.children, &other.children, walk.max_fields))
        {
            self.collapse(place, walk);
        }
        if self.collapsed {
            // The other side's objects (none if it collapsed too) are JSON text here.
            self.strings += other.objects;
        } else {
            self.objects += other.objects;
            merge_children(&mut self.children, other.children, place, walk);
        }
        self.arrays += other.arrays;
        match (&mut self.elements, other.elements) {
            (Some(mine), Some(theirs)) => mine.merge(*theirs, &place.elements(), walk),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }

    /// Whether the strings are absorbed by the numbers (numbers present, every string numeric).
    fn strings_fold_into_numbers(&self) -> bool {
        self.ints + self.floats > 0 && self.strings > 0 && self.strings_numeric == self.strings
    }

    /// The kinds present, in precedence order (nulls are not a kind).
    fn kinds(&self) -> Vec<Kind> {
        let mut kinds = Vec::new();
        if self.objects > 0 {
            kinds.push(Kind::Struct);
        }
        if self.arrays > 0 {
            kinds.push(Kind::List);
        }
        if self.ints + self.floats > 0 {
            kinds.push(Kind::Number);
        }
        if self.bools > 0 {
            kinds.push(Kind::Boolean);
        }
        if self.strings > 0 && !self.strings_fold_into_numbers() {
            kinds.push(Kind::Text);
        }
        kinds
    }

    /// The part of this summary made of one kind's values (no nulls).
    fn part(&self, kind: Kind) -> Acc {
        let mut part = Acc::default();
        match kind {
            Kind::Struct => {
                part.objects = self.objects;
                part.children = self.children.clone();
            }
            Kind::List => {
                part.arrays = self.arrays;
                part.elements = self.elements.clone();
            }
            Kind::Number => {
                part.ints = self.ints;
                part.int_bounds = self.int_bounds;
                part.ints_in_seconds = self.ints_in_seconds;
                part.ints_in_millis = self.ints_in_millis;
                part.floats = self.floats;
                if self.strings_fold_into_numbers() {
                    part.strings = self.strings;
                    part.strings_dates = self.strings_dates;
                    part.strings_numeric = self.strings_numeric;
                }
            }
            Kind::Boolean => part.bools = self.bools,
            Kind::Text => {
                part.strings = self.strings;
                part.strings_dates = self.strings_dates;
                part.strings_numeric = self.strings_numeric;
            }
        }
        part
    }

    /// The type of this summary's values of one kind.
    fn type_of(&self, kind: Kind, max_fields: usize) -> FieldType {
        match kind {
            Kind::Struct => FieldType::Struct(finalize_fields(&self.children, max_fields)),
            Kind::List => FieldType::List(Box::new(match &self.elements {
                Some(elements) => elements.element_type(max_fields),
                None => FieldType::String,
            })),
            Kind::Number => {
                if self.floats > 0 || self.strings_fold_into_numbers() {
                    FieldType::Double
                } else if self.ints_in_seconds == self.ints {
                    FieldType::Timestamp
                } else if self.ints_in_millis == self.ints {
                    FieldType::TimestampMs
                } else {
                    match self.int_bounds {
                        Some((low, high))
                            if i32::try_from(low).is_ok() && i32::try_from(high).is_ok() =>
                        {
                            FieldType::Int
                        }
                        _ => FieldType::Long,
                    }
                }
            }
            Kind::Boolean => FieldType::Boolean,
            Kind::Text => {
                if self.strings_dates == self.strings {
                    FieldType::Date
                } else {
                    FieldType::String
                }
            }
        }
    }

    /// The element type of a list: one kind's type, or `string` when the elements conflict
    /// (or are all null, or there were none).
    fn element_type(&self, max_fields: usize) -> FieldType {
        match self.kinds().as_slice() {
            [kind] => self.type_of(*kind, max_fields),
            _ => FieldType::String,
        }
    }
}

/// Account for `value` under `key` (at `place`), creating the key's summary on first use.
fn add_to(
    map: &mut BTreeMap<String, Acc>,
    key: &str,
    value: &Value,
    place: &Place<'_>,
    walk: &mut Walk,
) {
    match map.get_mut(key) {
        Some(acc) => acc.add(value, place, walk),
        None => {
            let mut acc = Acc::default();
            acc.add(value, place, walk);
            map.insert(key.to_owned(), acc);
        }
    }
}

/// Merge the children of two summaries of the object at `parent`.
fn merge_children(
    mine: &mut BTreeMap<String, Acc>,
    theirs: BTreeMap<String, Acc>,
    parent: &Place<'_>,
    walk: &mut Walk,
) {
    for (key, acc) in theirs {
        match mine.get_mut(&key) {
            Some(existing) => existing.merge(acc, &parent.child(&key), walk),
            None => {
                mine.insert(key, acc);
            }
        }
    }
}

/// Whether the two key sets together hold more than `limit` keys.
fn union_exceeds<V>(
    mine: &BTreeMap<String, V>,
    theirs: &BTreeMap<String, V>,
    limit: usize,
) -> bool {
    if mine.len().max(theirs.len()) > limit {
        return true;
    }
    if mine.len() + theirs.len() <= limit {
        return false;
    }
    let new = theirs.keys().filter(|key| !mine.contains_key(*key)).count();
    mine.len() + new > limit
}

/// Decide the fields of an object from its children's summaries, adding sibling fields for
/// conflicts and merging siblings into real fields of the same name.
///
/// Names are processed in ascending byte order. A sibling `<name>_<type>` always sorts after
/// `<name>`, so every contribution to a name has arrived before that name is decided, and the
/// output comes out sorted. Merging a sibling into a real field follows the width limit like
/// any merge (the collapse is not logged: deciding types has no side effects).
pub(crate) fn finalize_fields(children: &BTreeMap<String, Acc>, max_fields: usize) -> Vec<Field> {
    let mut pending: BTreeMap<String, Acc> = children.clone();
    let mut fields = Vec::with_capacity(pending.len());
    let mut walk = Walk::new(max_fields);
    while let Some((name, acc)) = pending.pop_first() {
        let kinds = acc.kinds();
        let Some((&main, others)) = kinds.split_first() else {
            fields.push(Field::new(name, FieldType::String));
            continue;
        };
        fields.push(Field::new(name.clone(), acc.type_of(main, max_fields)));
        for &kind in others {
            let part = acc.part(kind);
            let sibling = format!("{name}_{}", part.type_of(kind, max_fields).type_name());
            match pending.get_mut(&sibling) {
                Some(existing) => existing.merge(part, &Place::top(&sibling), &mut walk),
                None => {
                    pending.insert(sibling, part);
                }
            }
        }
    }
    fields
}

/// The running inference for one namespace.
#[derive(Debug, Clone, Default, PartialEq)]
struct NamespaceAcc {
    records: u64,
    fields: BTreeMap<String, Acc>,
    /// Paths that collapsed to JSON text and were logged, so each is logged once.
    collapsed: BTreeSet<String>,
}

impl NamespaceAcc {
    /// Log the paths that collapsed in `walk` that were not logged before.
    fn log_collapsed(&mut self, namespace: &str, walk: Walk) {
        for path in walk.collapsed {
            if !self.collapsed.contains(&path) {
                tracing::warn!(
                    namespace,
                    field = %path,
                    limit = walk.max_fields,
                    "Field `{path}` has more than {} distinct keys, so it looks like a map: it is kept as JSON text (type string) instead of a struct.",
                    walk.max_fields
                );
                self.collapsed.insert(path);
            }
        }
    }
}

/// Up to three of the smallest keys of two key sets together, quoted, for messages.
fn key_examples<'k>(
    mine: impl Iterator<Item = &'k str>,
    theirs: impl Iterator<Item = &'k str>,
) -> String {
    let mut smallest: BTreeSet<&str> = BTreeSet::new();
    for key in mine.chain(theirs) {
        smallest.insert(key);
        if smallest.len() > 3 {
            smallest.pop_last();
        }
    }
    smallest
        .iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Infers one schema per namespace from records, in any order and in any number of parts.
///
/// ```
/// use skipprd::schema::{SchemaInferrer, TransformOptions};
///
/// let mut inferrer = SchemaInferrer::new(TransformOptions::default());
/// let record = serde_json::json!({"id": 1, "price": 9.5});
/// inferrer.add(record.as_object().unwrap()).unwrap();
/// let schema = inferrer.finish("shop", "acme");
/// assert_eq!(schema.namespaces["default"].records, 1);
/// ```
#[derive(Debug, Clone)]
pub struct SchemaInferrer {
    options: TransformOptions,
    namespaces: BTreeMap<String, NamespaceAcc>,
}

impl SchemaInferrer {
    /// An empty inference that routes and shapes records by `transform`.
    pub fn new(transform: TransformOptions) -> Self {
        SchemaInferrer {
            options: transform,
            namespaces: BTreeMap::new(),
        }
    }

    /// Route one record to its namespace and accumulate it. Returns the namespace name.
    ///
    /// Fails, without accumulating the record, when the record would create a namespace
    /// beyond `max_namespaces` ([`SchemaError::TooManyNamespaces`]), or would give its
    /// namespace more than `max_fields_per_struct` distinct top-level fields
    /// ([`SchemaError::TooManyFields`]).
    pub fn add(&mut self, record: &Map<String, Value>) -> Result<&str, SchemaError> {
        let name = route(record, &self.options);
        let existing = self.namespaces.get(name.as_ref());
        if existing.is_none() && self.namespaces.len() >= self.options.max_namespaces {
            return Err(SchemaError::TooManyNamespaces {
                fields: self
                    .options
                    .namespace_fields
                    .iter()
                    .map(|field| format!("`{field}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                limit: self.options.max_namespaces,
                namespace: name.into_owned(),
            });
        }
        let no_fields = BTreeMap::new();
        let fields = existing.map_or(&no_fields, |acc| &acc.fields);
        let flat = self.options.flatten_events.then(|| flatten(record));
        let max_fields = self.options.max_fields_per_struct;
        let key_count = flat.as_ref().map_or(record.len(), BTreeMap::len);
        // Only a record with enough keys can go over the limit: count its new ones then.
        if fields.len() + key_count > max_fields {
            let is_new = |key: &&String| !fields.contains_key(*key);
            let new: Vec<&str> = match &flat {
                Some(flat) => flat.keys().filter(is_new).map(String::as_str).collect(),
                None => record.keys().filter(is_new).map(String::as_str).collect(),
            };
            if fields.len() + new.len() > max_fields {
                return Err(SchemaError::TooManyFields {
                    namespace: name.into_owned(),
                    limit: max_fields,
                    examples: key_examples(fields.keys().map(String::as_str), new.iter().copied()),
                    flattened: self.options.flatten_events,
                });
            }
        }

        if existing.is_none() {
            self.namespaces
                .insert(name.to_string(), NamespaceAcc::default());
        }
        if let Some(acc) = self.namespaces.get_mut(name.as_ref()) {
            acc.records += 1;
            let mut walk = Walk::new(max_fields);
            match &flat {
                Some(flat) => {
                    for (key, value) in flat {
                        add_to(&mut acc.fields, key, value, &Place::top(key), &mut walk);
                    }
                }
                None => {
                    for (key, value) in record {
                        add_to(&mut acc.fields, key, value, &Place::top(key), &mut walk);
                    }
                }
            }
            acc.log_collapsed(&name, walk);
        }
        Ok(self
            .namespaces
            .get_key_value(name.as_ref())
            .map_or("", |(key, _)| key.as_str()))
    }

    /// Combine another partial inference into this one. The result is the same whichever
    /// way round, and in whatever grouping, partial inferences are merged (and the same as
    /// adding all records to one inference). This inference's options are kept, and
    /// `max_namespaces` is not checked again.
    ///
    /// Fails, leaving this inference unchanged, when a namespace would get more than
    /// `max_fields_per_struct` distinct top-level fields ([`SchemaError::TooManyFields`]),
    /// as adding all the records to one inference would have.
    pub fn merge(&mut self, other: SchemaInferrer) -> Result<(), SchemaError> {
        let max_fields = self.options.max_fields_per_struct;
        for (name, theirs) in &other.namespaces {
            if let Some(mine) = self.namespaces.get(name)
                && union_exceeds(&mine.fields, &theirs.fields, max_fields)
            {
                return Err(SchemaError::TooManyFields {
                    namespace: name.clone(),
                    limit: max_fields,
                    examples: key_examples(
                        mine.fields.keys().map(String::as_str),
                        theirs.fields.keys().map(String::as_str),
                    ),
                    flattened: self.options.flatten_events,
                });
            }
        }
        for (name, theirs) in other.namespaces {
            match self.namespaces.get_mut(&name) {
                Some(mine) => {
                    mine.records += theirs.records;
                    mine.collapsed.extend(theirs.collapsed);
                    let mut walk = Walk::new(max_fields);
                    for (key, acc) in theirs.fields {
                        match mine.fields.get_mut(&key) {
                            Some(existing) => existing.merge(acc, &Place::top(&key), &mut walk),
                            None => {
                                mine.fields.insert(key, acc);
                            }
                        }
                    }
                    mine.log_collapsed(&name, walk);
                }
                None => {
                    self.namespaces.insert(name, theirs);
                }
            }
        }
        Ok(())
    }
    /// Decide the types and produce the schema file contents.
    pub fn finish(&self, pipeline: &str, workspace: &str) -> PipelineSchema {
        PipelineSchema {
            format_version: PipelineSchema::FORMAT_VERSION,
            workspace: workspace.to_owned(),
            pipeline: pipeline.to_owned(),
            namespaces: self
                .namespaces
                .iter()
                .map(|(name, acc)| {
                    let schema = NamespaceSchema {
                        fields: finalize_fields(&acc.fields, self.options.max_fields_per_struct),
                        records: acc.records,
                    };
                    (name.clone(), schema)
                })
                .collect(),
        }
    }

    /// The namespaces seen so far, sorted by name, with their record counts.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, u64)> {
        self.namespaces
            .iter()
            .map(|(name, acc)| (name.as_str(), acc.records))
    }

    /// The options records are routed and shaped by.
    pub fn options(&self) -> &TransformOptions {
        &self.options
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    /// Infer the default namespace's fields from these records.
    fn infer_with(options: TransformOptions, records: &[Value]) -> Vec<Field> {
        let mut inferrer = SchemaInferrer::new(options.clone());
        for record in records {
            inferrer.add(&object(record.clone())).unwrap();
        }
        let mut schema = inferrer.finish("p", "w");
        schema
            .namespaces
            .remove(&options.default_namespace)
            .map(|ns| ns.fields)
            .unwrap_or_default()
    }

    fn infer(records: &[Value]) -> Vec<Field> {
        infer_with(TransformOptions::default(), records)
    }

    /// The type of field `x` when it takes each of these values in turn.
    fn type_of_x(values: &[Value]) -> FieldType {
        let records: Vec<Value> = values.iter().map(|value| json!({ "x": value })).collect();
        let fields = infer(&records);
        assert_eq!(fields.len(), 1, "expected just `x`, got {fields:?}");
        fields[0].field_type.clone()
    }

    fn field(name: &str, field_type: FieldType) -> Field {
        Field::new(name, field_type)
    }

    fn list(element: FieldType) -> FieldType {
        FieldType::List(Box::new(element))
    }

    #[test]
    fn booleans_infer_boolean() {
        assert_eq!(type_of_x(&[json!(true), json!(false)]), FieldType::Boolean);
    }

    #[test]
    fn integers_within_32_bits_infer_int_up_to_both_edges() {
        assert_eq!(
            type_of_x(&[json!(i32::MIN), json!(i32::MAX), json!(0)]),
            FieldType::Int
        );
    }

    #[test]
    fn integers_one_past_either_32_bit_edge_infer_long() {
        // 2^31 alone would read as Unix seconds (2038), so pair it with a small number.
        assert_eq!(
            type_of_x(&[json!(0), json!(i64::from(i32::MAX) + 1)]),
            FieldType::Long
        );
        assert_eq!(
            type_of_x(&[json!(i64::from(i32::MIN) - 1)]),
            FieldType::Long
        );
        assert_eq!(type_of_x(&[json!(1), json!(i64::MAX)]), FieldType::Long);
    }

    #[test]
    fn decimals_infer_double_and_absorb_integers() {
        assert_eq!(type_of_x(&[json!(1.5)]), FieldType::Double);
        assert_eq!(type_of_x(&[json!(1), json!(2.5)]), FieldType::Double);
        assert_eq!(type_of_x(&[json!(1.0)]), FieldType::Double);
    }

    #[test]
    fn integers_beyond_64_bits_count_as_decimals() {
        assert_eq!(type_of_x(&[json!(u64::MAX)]), FieldType::Double);
    }

    #[test]
    fn unix_seconds_from_2010_up_to_2100_infer_timestamp_with_exact_edges() {
        assert_eq!(type_of_x(&[json!(1_262_304_000)]), FieldType::Timestamp);
        assert_eq!(type_of_x(&[json!(4_102_444_799_i64)]), FieldType::Timestamp);
        assert_eq!(type_of_x(&[json!(1_262_303_999)]), FieldType::Int);
        assert_eq!(type_of_x(&[json!(4_102_444_800_i64)]), FieldType::Long);
    }

    #[test]
    fn unix_milliseconds_from_2010_up_to_2040_infer_timestamp_ms_with_exact_edges() {
        assert_eq!(
            type_of_x(&[json!(1_262_304_000_000_i64)]),
            FieldType::TimestampMs
        );
        assert_eq!(
            type_of_x(&[json!(2_208_988_799_999_i64)]),
            FieldType::TimestampMs
        );
        assert_eq!(type_of_x(&[json!(1_262_303_999_999_i64)]), FieldType::Long);
        assert_eq!(type_of_x(&[json!(2_208_988_800_000_i64)]), FieldType::Long);
    }

    #[test]
    fn one_integer_outside_the_timestamp_range_makes_the_field_a_plain_integer() {
        assert_eq!(type_of_x(&[json!(1_700_000_000), json!(5)]), FieldType::Int);
        assert_eq!(
            type_of_x(&[json!(1_700_000_000_000_i64), json!(1_700_000_000)]),
            FieldType::Long
        );
    }

    #[test]
    fn valid_dates_infer_date_but_impossible_or_odd_dates_stay_string() {
        assert_eq!(
            type_of_x(&[json!("2024-02-29"), json!("1999-12-31")]),
            FieldType::Date
        );
        assert_eq!(type_of_x(&[json!("2023-02-30")]), FieldType::String);
        assert_eq!(type_of_x(&[json!("2023-02-29")]), FieldType::String);
        assert_eq!(type_of_x(&[json!("2023-2-28")]), FieldType::String);
        assert_eq!(
            type_of_x(&[json!("2023-02-28T00:00:00Z")]),
            FieldType::String
        );
        assert_eq!(
            type_of_x(&[json!("2023-02-28"), json!("hello")]),
            FieldType::String
        );
    }

    #[test]
    fn nulls_only_infer_string_and_nulls_never_change_a_type() {
        assert_eq!(type_of_x(&[json!(null), json!(null)]), FieldType::String);
        assert_eq!(
            type_of_x(&[json!(null), json!(3), json!(null)]),
            FieldType::Int
        );
    }

    #[test]
    fn numeric_strings_alone_stay_string() {
        assert_eq!(type_of_x(&[json!("12"), json!("3.5")]), FieldType::String);
    }

    #[test]
    fn numbers_with_only_numeric_strings_fold_into_double_without_a_sibling() {
        assert_eq!(
            type_of_x(&[json!(1), json!("2.5"), json!("-3e2")]),
            FieldType::Double
        );
    }

    #[test]
    fn a_non_numeric_string_among_numbers_goes_to_a_string_sibling_not_an_error() {
        let fields = infer(&[
            json!({"price": 9.5}),
            json!({"price": "n/a"}),
            json!({"price": "7"}),
        ]);
        assert_eq!(
            fields,
            [
                field("price", FieldType::Double),
                field("price_string", FieldType::String)
            ]
        );
    }

    #[test]
    fn special_float_words_are_not_numeric_strings() {
        for word in ["NaN", "inf", "-infinity", "", "1e", "e5", "--1"] {
            assert_eq!(parse_numeric(word), None, "{word}");
        }
        assert_eq!(parse_numeric(".5"), Some(0.5));
        assert_eq!(parse_numeric("+1E3"), Some(1000.0));
    }

    #[test]
    fn conflicting_kinds_pick_the_main_column_by_precedence_and_name_siblings_by_type() {
        let fields = infer(&[
            json!({"v": {"a": 1}}),
            json!({"v": [1, 2]}),
            json!({"v": 1_700_000_000}),
            json!({"v": true}),
            json!({"v": "2024-01-01"}),
        ]);
        assert_eq!(
            fields,
            [
                field("v", FieldType::Struct(vec![field("a", FieldType::Int)])),
                field("v_boolean", FieldType::Boolean),
                field("v_date", FieldType::Date),
                field("v_list", list(FieldType::Int)),
                field("v_timestamp", FieldType::Timestamp),
            ]
        );
        let fields = infer(&[json!({"v": false}), json!({"v": "x"})]);
        assert_eq!(
            fields,
            [
                field("v", FieldType::Boolean),
                field("v_string", FieldType::String)
            ]
        );
    }

    #[test]
    fn a_sibling_that_collides_with_a_real_field_is_merged_into_it() {
        let fields = infer(&[
            json!({"price": 1, "price_string": "kept"}),
            json!({"price": "cheap"}),
        ]);
        assert_eq!(
            fields,
            [
                field("price", FieldType::Int),
                field("price_string", FieldType::String)
            ]
        );
        // When the merged values conflict again, the merged field gets siblings of its own.
        let fields = infer(&[
            json!({"price": 1, "price_string": 7}),
            json!({"price": "cheap"}),
        ]);
        assert_eq!(
            fields,
            [
                field("price", FieldType::Int),
                field("price_string", FieldType::Int),
                field("price_string_string", FieldType::String),
            ]
        );
    }

    #[test]
    fn nested_objects_become_structs_to_full_depth_with_sorted_fields() {
        let fields = infer(&[json!({
            "z": 1,
            "a": {"y": {"x": {"w": {"deepest": "2020-01-01", "b": true}}, "c": 1.5}}
        })]);
        let level4 = FieldType::Struct(vec![
            field("b", FieldType::Boolean),
            field("deepest", FieldType::Date),
        ]);
        let level3 = FieldType::Struct(vec![field("w", level4)]);
        let level2 = FieldType::Struct(vec![field("c", FieldType::Double), field("x", level3)]);
        let level1 = FieldType::Struct(vec![field("y", level2)]);
        assert_eq!(fields, [field("a", level1), field("z", FieldType::Int)]);
    }

    #[test]
    fn structs_merge_keys_seen_in_different_records() {
        let fields = infer(&[
            json!({"s": {"a": 1}}),
            json!({"s": {"b": "x"}}),
            json!({"s": null}),
        ]);
        assert_eq!(
            fields,
            [field(
                "s",
                FieldType::Struct(vec![
                    field("a", FieldType::Int),
                    field("b", FieldType::String)
                ])
            )]
        );
    }

    #[test]
    fn arrays_of_objects_become_lists_of_structs_merged_over_all_elements() {
        let fields = infer(&[
            json!({"items": [{"sku": "a", "qty": 1}, {"sku": "b", "price": 2.5}]}),
            json!({"items": []}),
            json!({"items": [{"qty": 5_000_000_000_i64, "tags": ["x"]}]}),
        ]);
        let item = FieldType::Struct(vec![
            field("price", FieldType::Double),
            field("qty", FieldType::Long),
            field("sku", FieldType::String),
            field("tags", list(FieldType::String)),
        ]);
        assert_eq!(fields, [field("items", list(item))]);
    }

    #[test]
    fn list_elements_that_conflict_make_the_element_type_string() {
        assert_eq!(
            type_of_x(&[json!([1, "a"]), json!([true])]),
            list(FieldType::String)
        );
        assert_eq!(type_of_x(&[json!([{"a": 1}, 2])]), list(FieldType::String));
    }

    #[test]
    fn list_elements_follow_the_scalar_rules_and_empty_lists_are_lists_of_string() {
        assert_eq!(type_of_x(&[json!([1, 2.5, "3"])]), list(FieldType::Double));
        assert_eq!(
            type_of_x(&[json!(["2020-01-01", null])]),
            list(FieldType::Date)
        );
        assert_eq!(
            type_of_x(&[json!([]), json!([null])]),
            list(FieldType::String)
        );
        assert_eq!(
            type_of_x(&[json!([[1], [2, 3]])]),
            list(list(FieldType::Int))
        );
    }

    #[test]
    fn records_are_routed_to_namespaces_and_counted() {
        let options = TransformOptions {
            namespace_fields: vec!["type".into()],
            ..TransformOptions::default()
        };
        let mut inferrer = SchemaInferrer::new(options);
        for record in [
            json!({"type": "Order", "id": 1}),
            json!({"type": "order", "total": 2.5}),
            json!({"type": "Click Event", "x": 1}),
            json!({"id": 9}),
        ] {
            inferrer.add(&object(record)).unwrap();
        }
        let seen: Vec<(&str, u64)> = inferrer.namespaces().collect();
        assert_eq!(seen, [("click_event", 1), ("default", 1), ("order", 2)]);
        let schema = inferrer.finish("p", "w");
        assert_eq!(
            schema.namespaces["order"].fields,
            [
                field("id", FieldType::Int),
                field("total", FieldType::Double),
                field("type", FieldType::String)
            ]
        );
    }

    #[test]
    fn add_returns_the_namespace_the_record_went_to() {
        let options = TransformOptions {
            namespace_fields: vec!["meta.kind".into(), "v".into()],
            ..TransformOptions::default()
        };
        let mut inferrer = SchemaInferrer::new(options);
        let name = inferrer
            .add(&object(json!({"meta": {"kind": "Page View"}, "v": 2})))
            .unwrap();
        assert_eq!(name, "page_view_2");
    }

    #[test]
    fn going_over_max_namespaces_is_an_error_naming_the_fields_and_the_limit() {
        let options = TransformOptions {
            namespace_fields: vec!["type".into(), "source".into()],
            max_namespaces: 2,
            ..TransformOptions::default()
        };
        let mut inferrer = SchemaInferrer::new(options);
        inferrer
            .add(&object(json!({"type": "a", "source": "s"})))
            .unwrap();
        inferrer
            .add(&object(json!({"type": "b", "source": "s"})))
            .unwrap();
        inferrer
            .add(&object(json!({"type": "a", "source": "s"})))
            .unwrap();
        let error = inferrer
            .add(&object(json!({"type": "c", "source": "s"})))
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`type`, `source`"), "{message}");
        assert!(message.contains("more than 2"), "{message}");
        assert!(message.contains("c_s"), "{message}");
        // The rejected record was not accumulated.
        assert_eq!(inferrer.namespaces().count(), 2);
    }

    #[test]
    fn flatten_events_turns_nested_objects_into_dotted_columns_but_keeps_lists() {
        let options = TransformOptions {
            flatten_events: true,
            ..TransformOptions::default()
        };
        let fields = infer_with(
            options,
            &[
                json!({"a": {"b": {"c": 1}}, "tags": [{"k": {"v": 1}}]}),
                json!({"a": {"d": "x"}}),
            ],
        );
        let tag = FieldType::Struct(vec![field(
            "k",
            FieldType::Struct(vec![field("v", FieldType::Int)]),
        )]);
        assert_eq!(
            fields,
            [
                field("a.b.c", FieldType::Int),
                field("a.d", FieldType::String),
                field("tags", list(tag)),
            ]
        );
    }

    /// Records whose object under `key` has one distinct key each: `{key: {"u0": 1}}`, ...
    fn map_records(key: &str, keys: std::ops::Range<usize>) -> Vec<Value> {
        keys.map(|i| json!({ key: { format!("u{i}"): 1 } }))
            .collect()
    }

    fn with_max_fields(max_fields: usize) -> TransformOptions {
        TransformOptions {
            max_fields_per_struct: max_fields,
            ..TransformOptions::default()
        }
    }

    #[test]
    fn a_nested_object_with_more_distinct_keys_than_the_limit_is_kept_as_json_text() {
        // Default limit: 1000 distinct keys are a struct, 1001 a map kept as text.
        let at_limit = infer(&map_records("m", 0..1000));
        assert!(
            matches!(&at_limit[0].field_type, FieldType::Struct(fields) if fields.len() == 1000)
        );
        assert_eq!(
            infer(&map_records("m", 0..1001)),
            [field("m", FieldType::String)]
        );
        // The same with a small limit, and strings next to the objects share the column.
        let mut records = map_records("m", 0..4);
        records.push(json!({"m": "text", "n": 1}));
        assert_eq!(
            infer_with(with_max_fields(3), &records),
            [field("m", FieldType::String), field("n", FieldType::Int)]
        );
        // Objects next to numbers go to the `_string` sibling, like any other text.
        records.push(json!({"m": 5}));
        assert_eq!(
            infer_with(with_max_fields(3), &records),
            [
                field("m", FieldType::Int),
                field("m_string", FieldType::String),
                field("n", FieldType::Int)
            ]
        );
    }

    #[test]
    fn a_collapsed_object_drops_its_children_so_memory_stays_bounded() {
        let mut inferrer = SchemaInferrer::new(with_max_fields(10));
        for record in map_records("m", 0..10_000) {
            inferrer.add(&object(record)).unwrap();
        }
        let acc = &inferrer.namespaces["default"].fields["m"];
        assert!(acc.collapsed);
        assert!(acc.children.is_empty());
        assert_eq!((acc.objects, acc.strings), (0, 10_000));
        // A single object with many keys collapses part-way, without storing all of them.
        let mut wide = Map::new();
        for i in 0..10_000 {
            wide.insert(format!("k{i}"), json!({"deep": i}));
        }
        let mut inferrer = SchemaInferrer::new(with_max_fields(10));
        inferrer
            .add(&object(json!({"w": Value::Object(wide)})))
            .unwrap();
        let acc = &inferrer.namespaces["default"].fields["w"];
        assert!(acc.collapsed && acc.children.is_empty());
    }

    #[test]
    fn the_field_limit_applies_to_every_nested_struct_including_list_elements() {
        let records: Vec<Value> = (0..5)
            .map(|i| json!({"s": {"inner": {format!("k{i}"): true}, "id": i}, "items": [{format!("k{i}"): 1}]}))
            .collect();
        assert_eq!(
            infer_with(with_max_fields(4), &records),
            [
                field("items", list(FieldType::String)),
                field(
                    "s",
                    FieldType::Struct(vec![
                        field("id", FieldType::Int),
                        field("inner", FieldType::String)
                    ])
                ),
            ]
        );
    }

    #[test]
    fn a_collapsed_object_is_collapsed_whichever_partial_inference_saw_which_keys() {
        // Neither half goes over the limit of 3; together they do.
        let mut left = SchemaInferrer::new(with_max_fields(3));
        let mut right = SchemaInferrer::new(with_max_fields(3));
        for record in map_records("m", 0..3) {
            left.add(&object(record)).unwrap();
        }
        for record in map_records("m", 2..5) {
            right.add(&object(record)).unwrap();
        }
        let (mut left_first, right_first) = (left.clone(), right.clone());
        left_first.merge(right).unwrap();
        let mut right_first = right_first;
        right_first.merge(left).unwrap();
        let expected = [field("m", FieldType::String)];
        for merged in [left_first, right_first] {
            let mut schema = merged.finish("p", "w");
            assert_eq!(
                schema.namespaces.remove("default").unwrap().fields,
                expected
            );
        }
        // A collapsed side wins over one that is not.
        let mut small = SchemaInferrer::new(with_max_fields(3));
        small.add(&object(json!({"m": {"u0": 1}}))).unwrap();
        let mut big = SchemaInferrer::new(with_max_fields(3));
        for record in map_records("m", 0..4) {
            big.add(&object(record)).unwrap();
        }
        small.merge(big).unwrap();
        assert_eq!(
            small.finish("p", "w").namespaces["default"].fields,
            expected
        );
    }

    #[test]
    fn more_distinct_top_level_fields_than_the_limit_is_an_error_naming_the_namespace_limit_and_keys()
     {
        let mut inferrer = SchemaInferrer::new(TransformOptions::default());
        for i in 0..1000 {
            inferrer
                .add(&object(json!({ format!("u{i}"): 1 })))
                .unwrap();
        }
        let error = inferrer
            .add(&object(json!({"u1000": 1, "u1": 2})))
            .unwrap_err();
        assert!(matches!(error, SchemaError::TooManyFields { .. }));
        let message = error.to_string();
        assert!(
            message.starts_with(
                "namespace `default` has more than 1000 distinct top-level fields (for example `u0`, `u1`, `u10`): its records look like a map"
            ),
            "{message}"
        );
        assert!(!message.contains("flatten_events"), "{message}");
        assert!(!message.contains('\n'), "{message}");
        // The rejected record was not accumulated; known keys are still fine.
        assert_eq!(
            inferrer.namespaces().collect::<Vec<_>>(),
            [("default", 1000)]
        );
        assert!(!inferrer.namespaces["default"].fields.contains_key("u1000"));
        inferrer.add(&object(json!({"u5": 1}))).unwrap();

        // One record alone can be too wide, and with flattening the hint says so.
        let options = TransformOptions {
            flatten_events: true,
            ..with_max_fields(2)
        };
        let mut inferrer = SchemaInferrer::new(options);
        let error = inferrer
            .add(&object(json!({"m": {"x": 1, "y": 2, "z": 3}})))
            .unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("(for example `m.x`, `m.y`, `m.z`)"),
            "{message}"
        );
        assert!(
            message.contains("`transform.flatten_events` is on"),
            "{message}"
        );
        assert_eq!(inferrer.namespaces().count(), 0);
    }

    #[test]
    fn merging_partial_inferences_whose_top_level_fields_together_exceed_the_limit_fails_unchanged()
    {
        let mut left = SchemaInferrer::new(with_max_fields(3));
        let mut right = SchemaInferrer::new(with_max_fields(3));
        left.add(&object(json!({"a": 1, "b": 1}))).unwrap();
        right.add(&object(json!({"b": 1, "c": 1}))).unwrap();
        let mut ok = left.clone();
        ok.merge(right).unwrap();
        let mut other = SchemaInferrer::new(with_max_fields(3));
        other.add(&object(json!({"d": 1}))).unwrap();
        let before = ok.finish("p", "w");
        let error = ok.merge(other).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("more than 3 distinct top-level fields (for example `a`, `b`, `c`)"),
            "{error}"
        );
        assert_eq!(ok.finish("p", "w"), before);
    }

    /// A subscriber that keeps the `field` of every warning.
    #[derive(Clone, Default)]
    struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Warnings {
        fn taken(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            struct FieldOf(Option<String>);
            impl tracing::field::Visit for FieldOf {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    if field.name() == "field" {
                        self.0 = Some(format!("{value:?}"));
                    }
                }
            }
            if *event.metadata().level() == tracing::Level::WARN {
                let mut visitor = FieldOf(None);
                event.record(&mut visitor);
                self.0.lock().unwrap().push(visitor.0.unwrap_or_default());
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn each_collapsed_path_is_logged_once_as_a_warning() {
        let warnings = Warnings::default();
        tracing::subscriber::with_default(warnings.clone(), || {
            let mut left = SchemaInferrer::new(with_max_fields(3));
            for i in 0..10 {
                left.add(&object(json!({
                    "m": {format!("u{i}"): 1},
                    "items": [{"tags": {format!("t{i}"): 1}}],
                })))
                .unwrap();
            }
            assert_eq!(warnings.taken(), ["m", "items[].tags"]);
            // Merging with a side that collapsed the same path logs nothing new; a path
            // that collapses only because of the merge is logged then.
            let mut right = SchemaInferrer::new(with_max_fields(3));
            right
                .add(&object(json!({"m": {"a": 1, "b": 1, "c": 1, "d": 1}})))
                .unwrap();
            assert_eq!(warnings.taken(), ["m"]);
            right.add(&object(json!({"s": {"w": 1, "x": 1}}))).unwrap();
            left.add(&object(json!({"s": {"y": 1, "z": 1}}))).unwrap();
            assert!(warnings.taken().is_empty());
            left.merge(right).unwrap();
            assert_eq!(warnings.taken(), ["s"]);
        });
    }

    /// `{"l1": {"l2": ... {"l<levels>": 1}}}`
    fn nested_objects(levels: usize) -> Value {
        (1..=levels).rev().fold(
            json!(1),
            |inner, level| json!({ format!("l{level}"): inner }),
        )
    }

    #[test]
    fn objects_and_arrays_nested_deeper_than_max_depth_are_kept_as_json_text() {
        let fields = infer(&[nested_objects(40)]);
        let mut expected = FieldType::String;
        for level in (1..=MAX_DEPTH).rev() {
            expected = FieldType::Struct(vec![field(&format!("l{}", level + 1), expected)]);
        }
        assert_eq!(fields, [field("l1", expected)]);

        let arrays = (0..40).fold(json!(1), |inner, _| json!([inner]));
        let mut expected = FieldType::String;
        for _ in 0..MAX_DEPTH {
            expected = list(expected);
        }
        assert_eq!(type_of_x(&[arrays]), expected);

        // With flattening, nested objects are top-level columns and do not add depth.
        let flattened = TransformOptions {
            flatten_events: true,
            ..TransformOptions::default()
        };
        let fields = infer_with(flattened, &[nested_objects(40)]);
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].field_type, FieldType::Int);
    }

    #[test]
    fn a_schema_discovered_from_deeply_nested_records_saves_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        for levels in [MAX_DEPTH, 40, 100] {
            let arrays = (0..levels).fold(json!({"end": true}), |inner, _| json!([inner]));
            let mut inferrer = SchemaInferrer::new(TransformOptions::default());
            inferrer
                .add(&object(json!({"o": nested_objects(levels), "a": arrays})))
                .unwrap();
            let schema = inferrer.finish("p", "w");
            let path = dir.path().join(format!("{levels}.json"));
            schema.save(&path).unwrap();
            let loaded = PipelineSchema::load(&path)
                .unwrap_or_else(|error| panic!("{levels} levels: {error}"));
            assert_eq!(loaded, schema, "{levels} levels");
        }
    }

    #[test]
    fn merging_partial_inferences_equals_inferring_everything_at_once() {
        let records = [
            json!({"a": 1, "b": {"c": "2020-01-01"}}),
            json!({"a": "x", "b": {"c": 3}}),
            json!({"a": 2.5, "l": [1, "y"]}),
        ];
        let mut whole = SchemaInferrer::new(TransformOptions::default());
        let mut left = SchemaInferrer::new(TransformOptions::default());
        let mut right = SchemaInferrer::new(TransformOptions::default());
        for (index, record) in records.iter().enumerate() {
            whole.add(&object(record.clone())).unwrap();
            let part = if index == 1 { &mut left } else { &mut right };
            part.add(&object(record.clone())).unwrap();
        }
        right.merge(left).unwrap();
        assert_eq!(
            right.finish("p", "w").to_json_pretty(),
            whole.finish("p", "w").to_json_pretty()
        );
    }

    /// Field names and values chosen to collide often and to hit every rule.
    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            prop_oneof![
                -5i64..5,
                Just(i64::from(i32::MAX)),
                Just(i64::from(i32::MAX) + 1),
                1_262_304_000i64..1_262_304_010,
                1_262_304_000_000i64..1_262_304_000_010,
            ]
            .prop_map(Value::from),
            (-10.0f64..10.0).prop_map(Value::from),
            prop_oneof![
                Just("2024-01-31"),
                Just("2023-02-30"),
                Just("12.5"),
                Just("text"),
                Just("")
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
        // `a_string` and `a_int` collide with siblings of `a`, exercising the merge rule.
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("B"),
            Just("c.d"),
            Just("a_string"),
            Just("a_int")
        ]
        .prop_map(str::to_owned)
    }

    fn arb_record() -> impl Strategy<Value = Map<String, Value>> {
        let flat = prop::collection::vec((arb_key(), arb_value()), 0..4)
            .prop_map(|pairs| pairs.into_iter().collect::<Map<String, Value>>());
        // Some records nest everything under `a` (keeping the namespace field `b`), so that
        // small field limits collapse nested objects without hitting the top-level limit.
        (flat, any::<bool>()).prop_map(|(record, wrap)| {
            if !wrap {
                return record;
            }
            let mut outer = Map::new();
            if let Some(b) = record.get("b") {
                outer.insert("b".into(), b.clone());
            }
            outer.insert("a".into(), Value::Object(record));
            outer
        })
    }

    fn options_for(flatten: bool, max_fields: usize) -> TransformOptions {
        TransformOptions {
            namespace_fields: vec!["b".into()],
            flatten_events: flatten,
            max_fields_per_struct: max_fields,
            ..TransformOptions::default()
        }
    }

    /// The schema text, or `None` when a namespace has too many top-level fields.
    fn schema_text(
        records: &[&Map<String, Value>],
        flatten: bool,
        max_fields: usize,
    ) -> Option<String> {
        let mut inferrer = SchemaInferrer::new(options_for(flatten, max_fields));
        for record in records {
            match inferrer.add(record) {
                Ok(_) => {}
                Err(SchemaError::TooManyFields { .. }) => return None,
                Err(other) => panic!("unexpected error: {other}"),
            }
        }
        Some(inferrer.finish("p", "w").to_json_pretty())
    }

    proptest! {
        /// Also with small field limits, so that nested objects collapse to JSON text and
        /// some namespaces go over the limit: the outcome must not depend on order or split.
        #[test]
        fn the_schema_json_is_identical_whatever_the_order_or_split_of_records(
            (records, order, parts, merge_order, flatten, max_fields) in prop::collection::vec(arb_record(), 0..24)
                .prop_flat_map(|records| {
                    let len = records.len();
                    (
                        Just(records),
                        Just((0..len).collect::<Vec<usize>>()).prop_shuffle(),
                        prop::collection::vec(0..4usize, len),
                        Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
                        any::<bool>(),
                        prop_oneof![Just(TransformOptions::DEFAULT_MAX_FIELDS_PER_STRUCT), 1..6usize],
                    )
                })
        ) {
            let in_order: Vec<&Map<String, Value>> = records.iter().collect();
            let expected = schema_text(&in_order, flatten, max_fields);

            let shuffled: Vec<&Map<String, Value>> = order.iter().map(|&i| &records[i]).collect();
            prop_assert_eq!(&schema_text(&shuffled, flatten, max_fields), &expected);

            let merged = (|| {
                let mut partials: Vec<SchemaInferrer> = (0..4)
                    .map(|_| SchemaInferrer::new(options_for(flatten, max_fields)))
                    .collect();
                for (&index, part) in order.iter().zip(&parts) {
                    partials[*part].add(&records[index]).ok()?;
                }
                let mut slots: Vec<Option<SchemaInferrer>> =
                    partials.into_iter().map(Some).collect();
                let mut merged = slots[merge_order[0]].take()?;
                for &next in &merge_order[1..] {
                    // Alternate which side absorbs the other.
                    let mut other = slots[next].take()?;
                    if next % 2 == 0 {
                        merged.merge(other).ok()?;
                    } else {
                        other.merge(merged).ok()?;
                        merged = other;
                    }
                }
                Some(merged.finish("p", "w").to_json_pretty())
            })();
            prop_assert_eq!(merged, expected);
        }
    }
}
