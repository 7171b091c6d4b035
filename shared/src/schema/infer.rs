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
use super::namespace::{TransformOptions, flatten, route_or};
use super::parse_decimal;
use super::saved::PipelineSchema;
use super::{Field, FieldType, MAX_DEPTH, NamespaceSchema};
use crate::sources::SourceRecord;
use crate::sources::cells::{Cell, CellRow, Declared};

/// Whether `sync` types a typed source's rows from their cells under these options (else
/// from their JSON objects): not when records are routed by `namespace_fields` or flattened.
pub(crate) fn cells_typed(options: &TransformOptions) -> bool {
    options.namespace_fields.is_empty() && !options.flatten_events
}

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

/// The number a numeric string holds, when storing it as a `double` keeps what was written:
/// the text is a canonical number ([`number_shape`]: `12`, `-0.25`, `1.5e3`, never `007`,
/// `+1`, `.5`, `0x10` or `-0`) with a finite value, and an integer is one a double holds
/// exactly (at most 2^53 in magnitude), so a long identifier in a string is never rounded.
/// CSV cells are typed by the same rule. Exactly `NaN`, `Infinity` and `-Infinity`, the words
/// the Parquet and Postgres sources write for the floats JSON has no number for, are numeric
/// too.
pub(crate) fn parse_numeric(text: &str) -> Option<f64> {
    /// The largest integer from which every smaller one is exact in a double.
    const EXACT: i64 = 1 << 53;
    match text {
        "NaN" => return Some(f64::NAN),
        "Infinity" => return Some(f64::INFINITY),
        "-Infinity" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    match number_shape(text)? {
        NumberShape::Integer => text
            .parse::<i64>()
            .ok()
            .filter(|n| (-EXACT..=EXACT).contains(n))
            .map(|n| n as f64),
        NumberShape::Decimal => text.parse::<f64>().ok().filter(|n| n.is_finite()),
    }
}

/// What kind of canonical number a text spells, if any: an optional `-`, digits without
/// leading zeros (a lone `0` is fine) and, for a decimal, a `.` followed by digits and/or an
/// exponent. `-0` is none (a number would lose its sign).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NumberShape {
    /// Digits alone.
    Integer,
    /// Digits with a fraction and/or an exponent.
    Decimal,
}

pub(crate) fn number_shape(cell: &str) -> Option<NumberShape> {
    let bytes = cell.as_bytes();
    let unsigned = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let int_len = unsigned.iter().take_while(|b| b.is_ascii_digit()).count();
    if int_len == 0 || (int_len > 1 && unsigned[0] == b'0') {
        return None;
    }
    let mut rest = &unsigned[int_len..];
    if rest.is_empty() {
        // `-0` would lose its sign as a number.
        return (unsigned != b"0" || bytes.len() == 1).then_some(NumberShape::Integer);
    }
    if let Some(after_dot) = rest.strip_prefix(b".") {
        let frac_len = after_dot.iter().take_while(|b| b.is_ascii_digit()).count();
        if frac_len == 0 {
            return None;
        }
        rest = &after_dot[frac_len..];
    }
    if let Some(after_e) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let digits = after_e
            .strip_prefix(b"+")
            .or_else(|| after_e.strip_prefix(b"-"))
            .unwrap_or(after_e);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        rest = &[];
    }
    rest.is_empty().then_some(NumberShape::Decimal)
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
    /// Strings that are typed instants (a source's timestamp cells; never JSON text).
    strings_instants: u64,
    /// Strings that are decimals of the type the source declared with them.
    strings_decimal: u64,
    /// The type a typed source declared for the field (the largest, should two differ).
    declared: Option<Declared>,
    /// Decimals of two scales were declared (a column altered while it was read): no
    /// decimal type holds both, so the declaration decides nothing.
    declared_conflict: bool,
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
                // Beyond `i64` but read exactly: a double would round it, its text keeps it.
                None if number.is_u64() => self.strings += 1,
                None => self.floats += 1,
            },
            Value::String(text) => self.add_string(text),
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

    /// Account for one top-level cell of a typed source's row ([`Cell`]). A cell's type is
    /// its column's: an integer is never read as a Unix time, an instant is a timestamp; a
    /// text or JSON cell counts as its JSON value does.
    pub(crate) fn add_cell(
        &mut self,
        cell: Cell<'_>,
        declared: Option<Declared>,
        place: &Place<'_>,
        walk: &mut Walk,
    ) {
        self.note_declared(declared);
        match cell {
            Cell::Null => self.nulls += 1,
            Cell::Bool(_) => self.bools += 1,
            Cell::Long(int) => self.count_int(int),
            Cell::Double(_) => self.floats += 1,
            Cell::Instant { .. } => {
                self.strings += 1;
                self.strings_instants += 1;
            }
            // Its JSON form, a `YYYY-MM-DD` string.
            Cell::Date(_) => {
                self.strings += 1;
                self.strings_dates += 1;
            }
            Cell::Text(text) => {
                self.add_string(text);
                if let Some(Declared::Decimal { precision, scale }) = declared
                    && parse_decimal(text, precision, scale).is_some()
                {
                    self.strings_decimal += 1;
                }
            }
            // Its JSON form, the decimal's text (inferred as that text is).
            Cell::Decimal { unscaled, scale } => {
                let text = crate::sources::cells::decimal_text(unscaled, scale);
                self.add_cell(Cell::Text(&text), declared, place, walk);
            }
            Cell::Json(value) => self.add(value, place, walk),
        }
    }

    /// Fold in a declared type (the largest is kept; see `declared_conflict`).
    fn note_declared(&mut self, declared: Option<Declared>) {
        if let (Some(Declared::Decimal { scale: mine, .. }), Some(Declared::Decimal { scale, .. })) =
            (self.declared, declared)
            && mine != scale
        {
            self.declared_conflict = true;
        }
        self.declared = self.declared.max(declared);
    }

    /// The declared type that decides, if any.
    fn declared(&self) -> Option<Declared> {
        self.declared.filter(|_| !self.declared_conflict)
    }

    fn add_string(&mut self, text: &str) {
        self.strings += 1;
        if parse_date(text).is_some() {
            self.strings_dates += 1;
        }
        if parse_numeric(text).is_some() {
            self.strings_numeric += 1;
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

    /// Count an integer and widen the bounds (no reading as a Unix time).
    fn count_int(&mut self, int: i64) {
        self.ints += 1;
        self.int_bounds = Some(match self.int_bounds {
            Some((low, high)) => (low.min(int), high.max(int)),
            None => (int, int),
        });
    }

    fn add_int(&mut self, int: i64) {
        self.count_int(int);
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
        self.strings_instants += other.strings_instants;
        self.strings_decimal += other.strings_decimal;
        self.declared_conflict |= other.declared_conflict;
        self.note_declared(other.declared);
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
                    part.strings_instants = self.strings_instants;
                    part.strings_decimal = self.strings_decimal;
                }
            }
            Kind::Boolean => part.bools = self.bools,
            Kind::Text => {
                part.strings = self.strings;
                part.strings_dates = self.strings_dates;
                part.strings_numeric = self.strings_numeric;
                part.strings_instants = self.strings_instants;
                part.strings_decimal = self.strings_decimal;
                part.declared = self
                    .declared
                    .filter(|d| matches!(d, Declared::Decimal { .. }));
                part.declared_conflict = self.declared_conflict;
            }
        }
        part
    }

    /// The type of this summary's values of one kind.
    fn type_of(&self, kind: Kind, max_fields: usize) -> FieldType {
        match kind {
            Kind::Struct => FieldType::Struct(finalize_fields(&self.children, max_fields, &[])),
            Kind::List => FieldType::List(Box::new(match &self.elements {
                Some(elements) => elements.element_type(max_fields),
                None => FieldType::String,
            })),
            Kind::Number => {
                if self.floats > 0 || self.strings_fold_into_numbers() {
                    FieldType::Double
                } else if self.declared() == Some(Declared::Long) {
                    FieldType::Long
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
                } else if self.strings_instants == self.strings {
                    FieldType::Timestamp
                } else if let Some(Declared::Decimal { precision, scale }) = self.declared()
                    && self.strings_decimal == self.strings
                {
                    FieldType::Decimal { precision, scale }
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
///
/// A field named in `keys` (a namespace's merge key, at the top level) keeps a scalar kind
/// when it has one: objects and arrays, which cannot be a key, go to its siblings.
pub(crate) fn finalize_fields(
    children: &BTreeMap<String, Acc>,
    max_fields: usize,
    keys: &[String],
) -> Vec<Field> {
    let mut pending: BTreeMap<String, Acc> = children.clone();
    let mut fields = Vec::with_capacity(pending.len());
    let mut walk = Walk::new(max_fields);
    while let Some((name, acc)) = pending.pop_first() {
        let mut kinds = acc.kinds();
        if keys.contains(&name) {
            // Stable: the scalar kinds first, in their order, then struct and list.
            kinds.sort_by_key(|kind| matches!(kind, Kind::Struct | Kind::List));
        }
        let Some((&main, others)) = kinds.split_first() else {
            // Only nulls: the type the source declared, else a string.
            let declared = match acc.declared() {
                None => FieldType::String,
                Some(Declared::Boolean) => FieldType::Boolean,
                Some(Declared::Int) => FieldType::Int,
                Some(Declared::Long) => FieldType::Long,
                Some(Declared::Double) => FieldType::Double,
                Some(Declared::Date) => FieldType::Date,
                Some(Declared::Timestamp) => FieldType::Timestamp,
                Some(Declared::Decimal { precision, scale }) => {
                    FieldType::Decimal { precision, scale }
                }
            };
            fields.push(Field::new(name, declared));
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

/// Accumulate one record with these top-level `keys` into namespace `name` (`add` adds
/// its values), after checking the namespace and field limits.
fn add_fields<'k>(
    namespaces: &mut BTreeMap<String, NamespaceAcc>,
    options: &TransformOptions,
    name: &str,
    keys: impl ExactSizeIterator<Item = &'k str>,
    add: impl FnOnce(&mut BTreeMap<String, Acc>, &mut Walk),
) -> Result<(), SchemaError> {
    let existing = namespaces.get(name);
    if existing.is_none() && namespaces.len() >= options.max_namespaces {
        return Err(SchemaError::TooManyNamespaces {
            fields: options
                .namespace_fields
                .iter()
                .map(|field| format!("`{field}`"))
                .collect::<Vec<_>>()
                .join(", "),
            limit: options.max_namespaces,
            namespace: name.to_owned(),
        });
    }
    let no_fields = BTreeMap::new();
    let fields = existing.map_or(&no_fields, |acc| &acc.fields);
    let max_fields = options.max_fields_per_struct;
    // Only a record with enough keys can go over the limit: count its new ones then.
    if fields.len() + keys.len() > max_fields {
        let new: Vec<&str> = keys.filter(|key| !fields.contains_key(*key)).collect();
        if fields.len() + new.len() > max_fields {
            return Err(SchemaError::TooManyFields {
                namespace: name.to_owned(),
                limit: max_fields,
                examples: key_examples(fields.keys().map(String::as_str), new.iter().copied()),
                flattened: options.flatten_events,
            });
        }
    }

    if existing.is_none() {
        namespaces.insert(name.to_owned(), NamespaceAcc::default());
    }
    if let Some(acc) = namespaces.get_mut(name) {
        acc.records += 1;
        let mut walk = Walk::new(max_fields);
        add(&mut acc.fields, &mut walk);
        acc.log_collapsed(name, walk);
    }
    Ok(())
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
        self.add_or(record, None)
    }

    /// [`SchemaInferrer::add`] for a record whose source named its namespace (`default`, used
    /// where no namespace field routes it; see [`crate::sources::SourceRecord::namespace`]).
    pub fn add_or(
        &mut self,
        record: &Map<String, Value>,
        default: Option<&str>,
    ) -> Result<&str, SchemaError> {
        let name = route_or(record, &self.options, default);
        let flat = self.options.flatten_events.then(|| flatten(record));
        match &flat {
            Some(flat) => add_fields(
                &mut self.namespaces,
                &self.options,
                &name,
                flat.keys().map(String::as_str),
                |fields, walk| {
                    for (key, value) in flat {
                        add_to(fields, key, value, &Place::top(key), walk);
                    }
                },
            )?,
            None => add_fields(
                &mut self.namespaces,
                &self.options,
                &name,
                record.keys().map(String::as_str),
                |fields, walk| {
                    for (key, value) in record {
                        add_to(fields, key, value, &Place::top(key), walk);
                    }
                },
            )?,
        }
        Ok(self
            .namespaces
            .get_key_value(name.as_ref())
            .map_or("", |(key, _)| key.as_str()))
    }

    /// Add a typed source's row of cells (see `Acc::add_cell`: the cells' types are their
    /// columns', not what their JSON form would infer), in the namespace the source named
    /// (`default`) or the default one. A row that `sync` types as its JSON object (with
    /// `namespace_fields` or `flatten_events`) is added as that object, [`Self::add_or`].
    pub fn add_cells(&mut self, row: &CellRow, default: Option<&str>) -> Result<&str, SchemaError> {
        if !cells_typed(&self.options) {
            return self.add_or(&row.to_json(), default);
        }
        let name = default.unwrap_or(&self.options.default_namespace);
        add_fields(
            &mut self.namespaces,
            &self.options,
            name,
            row.names().iter().map(String::as_str),
            |fields, walk| {
                for ((key, cell), declared) in
                    row.names().iter().zip(row.cells()).zip(row.declared())
                {
                    let place = Place::top(key);
                    match fields.get_mut(key) {
                        Some(acc) => acc.add_cell(cell, declared, &place, walk),
                        None => {
                            let mut acc = Acc::default();
                            acc.add_cell(cell, declared, &place, walk);
                            fields.insert(key.clone(), acc);
                        }
                    }
                }
            },
        )?;
        Ok(self
            .namespaces
            .get_key_value(name)
            .map_or("", |(key, _)| key.as_str()))
    }

    /// A source's record: its cells ([`Self::add_cells`]) or its value ([`Self::add_or`]).
    pub fn add_record(&mut self, record: &SourceRecord) -> Result<&str, SchemaError> {
        match &record.cells {
            Some(cells) => self.add_cells(cells, record.namespace.as_deref()),
            None => self.add_or(&record.value, record.namespace.as_deref()),
        }
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
                        fields: finalize_fields(
                            &acc.fields,
                            self.options.max_fields_per_struct,
                            self.options.merge_keys.of(name),
                        ),
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
mod tests;
