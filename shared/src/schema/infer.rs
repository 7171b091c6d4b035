//! Order-independent schema inference.
//!
//! Every field keeps an [`Acc`]: counts and bounds over the values seen, merged by addition,
//! minimum and maximum, so merging is commutative and associative. Types are decided only in
//! [`SchemaInferrer::finish`], from the merged accumulators.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::error::SchemaError;
use super::namespace::{TransformOptions, flatten, route};
use super::saved::PipelineSchema;
use super::{Field, FieldType, NamespaceSchema};

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
    objects: u64,
    children: BTreeMap<String, Acc>,
    arrays: u64,
    elements: Option<Box<Acc>>,
}

impl Acc {
    /// Account for one value.
    pub(crate) fn add(&mut self, value: &Value) {
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
            Value::Object(object) => {
                self.objects += 1;
                for (key, child) in object {
                    add_to(&mut self.children, key, child);
                }
            }
            Value::Array(items) => {
                self.arrays += 1;
                let elements = self.elements.get_or_insert_with(Box::default);
                for item in items {
                    elements.add(item);
                }
            }
        }
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

    /// Combine with another summary (commutative and associative).
    pub(crate) fn merge(&mut self, other: Acc) {
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
        self.objects += other.objects;
        merge_children(&mut self.children, other.children);
        self.arrays += other.arrays;
        match (&mut self.elements, other.elements) {
            (Some(mine), Some(theirs)) => mine.merge(*theirs),
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
    fn type_of(&self, kind: Kind) -> FieldType {
        match kind {
            Kind::Struct => FieldType::Struct(finalize_fields(&self.children)),
            Kind::List => FieldType::List(Box::new(match &self.elements {
                Some(elements) => elements.element_type(),
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
    fn element_type(&self) -> FieldType {
        match self.kinds().as_slice() {
            [kind] => self.type_of(*kind),
            _ => FieldType::String,
        }
    }
}

/// Account for `value` under `key`, creating the key's summary on first use.
fn add_to(map: &mut BTreeMap<String, Acc>, key: &str, value: &Value) {
    match map.get_mut(key) {
        Some(acc) => acc.add(value),
        None => {
            let mut acc = Acc::default();
            acc.add(value);
            map.insert(key.to_owned(), acc);
        }
    }
}

fn merge_children(mine: &mut BTreeMap<String, Acc>, theirs: BTreeMap<String, Acc>) {
    for (key, acc) in theirs {
        match mine.get_mut(&key) {
            Some(existing) => existing.merge(acc),
            None => {
                mine.insert(key, acc);
            }
        }
    }
}

/// Decide the fields of an object from its children's summaries, adding sibling fields for
/// conflicts and merging siblings into real fields of the same name.
///
/// Names are processed in ascending byte order. A sibling `<name>_<type>` always sorts after
/// `<name>`, so every contribution to a name has arrived before that name is decided, and the
/// output comes out sorted.
pub(crate) fn finalize_fields(children: &BTreeMap<String, Acc>) -> Vec<Field> {
    let mut pending: BTreeMap<String, Acc> = children.clone();
    let mut fields = Vec::with_capacity(pending.len());
    while let Some((name, acc)) = pending.pop_first() {
        let kinds = acc.kinds();
        let Some((&main, others)) = kinds.split_first() else {
            fields.push(Field::new(name, FieldType::String));
            continue;
        };
        fields.push(Field::new(name.clone(), acc.type_of(main)));
        for &kind in others {
            let part = acc.part(kind);
            let sibling = format!("{name}_{}", part.type_of(kind).type_name());
            match pending.get_mut(&sibling) {
                Some(existing) => existing.merge(part),
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
}

impl NamespaceAcc {
    fn merge(&mut self, other: NamespaceAcc) {
        self.records += other.records;
        merge_children(&mut self.fields, other.fields);
    }
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
    /// Fails (without accumulating the record) when the record would create a namespace
    /// beyond `max_namespaces`.
    pub fn add(&mut self, record: &Map<String, Value>) -> Result<&str, SchemaError> {
        let name = route(record, &self.options);
        if !self.namespaces.contains_key(name.as_ref()) {
            if self.namespaces.len() >= self.options.max_namespaces {
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
            self.namespaces
                .insert(name.to_string(), NamespaceAcc::default());
        }
        if let Some(acc) = self.namespaces.get_mut(name.as_ref()) {
            acc.records += 1;
            if self.options.flatten_events {
                for (key, value) in flatten(record) {
                    add_to(&mut acc.fields, &key, value);
                }
            } else {
                for (key, value) in record {
                    add_to(&mut acc.fields, key, value);
                }
            }
        }
        Ok(self
            .namespaces
            .get_key_value(name.as_ref())
            .map_or("", |(key, _)| key.as_str()))
    }

    /// Combine another partial inference into this one. The result is the same whichever
    /// way round, and in whatever grouping, partial inferences are merged. This inference's
    /// options are kept, and `max_namespaces` is not checked again.
    pub fn merge(&mut self, other: SchemaInferrer) {
        for (name, acc) in other.namespaces {
            match self.namespaces.get_mut(&name) {
                Some(existing) => existing.merge(acc),
                None => {
                    self.namespaces.insert(name, acc);
                }
            }
        }
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
                        fields: finalize_fields(&acc.fields),
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
        right.merge(left);
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
        prop::collection::vec((arb_key(), arb_value()), 0..4)
            .prop_map(|pairs| pairs.into_iter().collect())
    }

    fn options_for(flatten: bool) -> TransformOptions {
        TransformOptions {
            namespace_fields: vec!["b".into()],
            flatten_events: flatten,
            ..TransformOptions::default()
        }
    }

    fn schema_text(records: &[&Map<String, Value>], flatten: bool) -> String {
        let mut inferrer = SchemaInferrer::new(options_for(flatten));
        for record in records {
            inferrer.add(record).unwrap();
        }
        inferrer.finish("p", "w").to_json_pretty()
    }

    proptest! {
        #[test]
        fn the_schema_json_is_identical_whatever_the_order_or_split_of_records(
            (records, order, parts, merge_order, flatten) in prop::collection::vec(arb_record(), 0..24)
                .prop_flat_map(|records| {
                    let len = records.len();
                    (
                        Just(records),
                        Just((0..len).collect::<Vec<usize>>()).prop_shuffle(),
                        prop::collection::vec(0..4usize, len),
                        Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
                        any::<bool>(),
                    )
                })
        ) {
            let in_order: Vec<&Map<String, Value>> = records.iter().collect();
            let expected = schema_text(&in_order, flatten);

            let shuffled: Vec<&Map<String, Value>> = order.iter().map(|&i| &records[i]).collect();
            prop_assert_eq!(&schema_text(&shuffled, flatten), &expected);

            let mut partials: Vec<SchemaInferrer> =
                (0..4).map(|_| SchemaInferrer::new(options_for(flatten))).collect();
            for (&index, part) in order.iter().zip(&parts) {
                partials[*part].add(&records[index]).unwrap();
            }
            let mut slots: Vec<Option<SchemaInferrer>> = partials.into_iter().map(Some).collect();
            let mut merged = slots[merge_order[0]].take().unwrap();
            for &next in &merge_order[1..] {
                // Alternate which side absorbs the other.
                let other = slots[next].take().unwrap();
                if next % 2 == 0 {
                    merged.merge(other);
                } else {
                    let mut other = other;
                    other.merge(merged);
                    merged = other;
                }
            }
            prop_assert_eq!(merged.finish("p", "w").to_json_pretty(), expected);
        }
    }
}
