//! # Schemas
//!
//! `skipprd discover` reads sample data, infers one schema per *namespace* (a destination
//! table), and saves them all in one schema file. Later runs type every record against that
//! file and turn records into Arrow record batches.
//!
//! ## Inference
//!
//! Inference is deterministic: the same records give byte-for-byte the same schema file,
//! whatever the batch size, the order of records or files, or how the work was split between
//! partial inferences that were merged afterwards. To get that, every field keeps a summary of
//! the values seen (counts by JSON kind, the smallest and largest integer, whether every
//! string is a date, ...) and summaries merge by adding counts; the types are only decided at
//! the end, from the merged summary, by the fixed rules below.
//!
//! ### Value kinds
//!
//! | JSON value | counts as |
//! |---|---|
//! | `true` / `false` | boolean |
//! | a number written without fraction or exponent that fits a signed 64-bit integer | integer |
//! | an integer from 2^63 to 2^64 - 1 (read exactly, but a double would round it) | string (neither a date nor numeric), so its digits are kept as text |
//! | any other number (`1.5`, `1e3`, `1.0`, or an integer beyond 2^64, which the parser reads as a float) | float |
//! | a string | string (also noted: is it a date? is it a number?) |
//! | an object | struct (each key summarized recursively), but string for a map-like or too deeply nested object (see [Limits](#limits-maps-and-deep-nesting)) |
//! | an array | list (all elements of all arrays summarized together as one element), but string when too deeply nested |
//! | `null`, or a missing key | null |
//!
//! A string is a **date** when it is exactly `YYYY-MM-DD` and names a real calendar day
//! (`2023-02-28` is a date, `2023-02-30` and `2023-2-28` are not). A string is **numeric**
//! when it is decimal number text: an optional sign, digits with an optional fraction, and an
//! optional exponent (`42`, `-0.5`, `1e9`, `.5`), and the value is finite (`1e999`, `nan` and
//! `inf` are not numeric); or it is exactly `NaN`, `Infinity` or `-Infinity`, the strings the
//! Parquet and Postgres sources write for the floats JSON has no number for, which a `double`
//! column stores as NaN and the infinities. (A field whose values are only such strings and
//! nulls is a `string`, like any field of numeric strings alone.)
//!
//! ### Types
//!
//! | type | Arrow type | chosen when a field holds |
//! |---|---|---|
//! | `string` | `Utf8` | only nulls; or strings that are not all dates (objects and arrays kept as JSON text count as such strings) |
//! | `boolean` | `Boolean` | only booleans |
//! | `int` | `Int32` | only integers, all in `[-2147483648, 2147483647]` (and not all timestamps) |
//! | `long` | `Int64` | only integers, some outside 32 bits (and not all timestamps) |
//! | `double` | `Float64` | integers and floats; or numbers together with strings that are all numeric |
//! | `date` | `Date32` | only strings, all dates |
//! | `timestamp` | `Timestamp(Microsecond, "UTC")` | only integers, all in `[1262304000, 4102444800)`: Unix seconds from 2010-01-01 up to (not including) 2100-01-01 |
//! | `timestamp_ms` | `Timestamp(Millisecond, "UTC")` | only integers, all in `[1262304000000, 2208988800000)`: Unix milliseconds from 2010-01-01 up to (not including) 2040-01-01 |
//! | `struct` | `Struct` | objects; the fields are inferred recursively (within the [limits](#limits-maps-and-deep-nesting)) |
//! | `list` | `List` (item field `element`) | arrays; the element type is inferred from all elements |
//!
//! Nulls never change a type: every field is nullable.
//!
//! ### Conflicts: sibling columns
//!
//! When one field holds values of incompatible kinds, the column is not broken and nothing is
//! an error. The field keeps one kind, picked by this precedence:
//!
//! > struct > list > number (its type from the rules above) > boolean > string/date
//!
//! but a top-level field that is a merge key of its namespace (`write_policy: merge_by_key`,
//! `primary_key`; [`MergeKeys`]) keeps a scalar kind when it has one, as number > boolean >
//! string/date > struct > list: an object or an array cannot be a key, and one stray object
//! must not make the key column a struct that no scalar key fits.
//!
//! and every other kind present becomes a **sibling field** `<field>_<type>` in the same
//! object, typed from just those values, where `<type>` is the sibling's type name
//! (`boolean`, `int`, `long`, `double`, `date`, `timestamp`, `timestamp_ms`, `string`,
//! `struct`, `list`). For example, a `price` that is `12.5` in most records and `"n/a"` in
//! some becomes `price: double` plus `price_string: string`.
//!
//! Values that still fit the field are not conflicts: integers next to floats make a `double`,
//! and numbers next to strings that are *all* numeric make a `double` too (the numeric strings
//! are stored as numbers). A numeric string is one a `double` keeps exactly: a canonical number
//! (an optional `-`, digits without leading zeros, an optional fraction and exponent: `12`,
//! `-0.25`, `2.50`, `1e3`) with a finite value, an integer one at most 2^53 in magnitude. So
//! `"007"`, `"+15"`, `".5"`, `"0x10"`, `"1e400"` and a 20-digit identifier stay strings (CSV
//! cells are typed by the same rule). One non-numeric string among them sends *all* of the strings to
//! the `_string` sibling at inference; when typing records, a numeric string still lands in
//! the `double` column because it fits there.
//!
//! If a sibling's name is also the name of a real field (the data has both `price` with
//! conflicting strings and its own `price_string`), the two are merged into one field and
//! typed from all of their values together, by the same rules (so it may get siblings of its
//! own, such as `price_string_int`). Its name stays `price_string` even when the merged type
//! is not `string`.
//!
//! Inside a list, the elements have no siblings: if the elements of a field's arrays
//! conflict, the element type is `string` and every element is stored as text (strings as
//! they are, other values as their JSON text, for example `{"a":1}` or `42`). An array field
//! that is only ever empty, or holds only nulls, has element type `string`.
//!
//! ### Field order
//!
//! Fields are sorted by name (bytewise, so `B` < `_` < `a`) at every level, so the order in
//! which fields first appear does not matter.
//!
//! ### Limits: maps and deep nesting
//!
//! These limits keep inference's memory bounded and every saved schema file readable. They
//! depend only on where a value sits and on the *set* of keys seen there, so they do not
//! break the independence from order and split.
//!
//! - **Map-like objects.** An object whose keys are data (`{"u123": 1}`, `{"u124": 1}`, ...)
//!   would get one field per key. When the objects at one place (a field, a field of a
//!   struct, or the elements of a list) have more than `max_fields_per_struct` (1000)
//!   distinct keys *all together*, that place is treated as a map: each of its objects is
//!   kept as compact JSON text, counted as a string that is neither a date nor numeric. On
//!   its own such a field is a `string` field; next to numbers its objects go to the
//!   `_string` sibling, like any other text. Inference forgets the keys it had collected
//!   there and logs a warning once per inference for the field (named by its path, such as `m` or
//!   `items[].tags`, where `[]` stands for the elements of a list). When a sibling is merged
//!   into a real field of the same name, the keys of both count together.
//! - **Too many top-level fields.** The top level of a namespace is never turned into text:
//!   when a namespace's records have more than `max_fields_per_struct` distinct top-level
//!   fields (with `flatten_events`, dotted columns), inference stops with an error naming
//!   the namespace, the limit and a few of the fields, and the record that would go over is
//!   not accumulated. Merging partial inferences whose top-level fields together go over the
//!   limit fails the same way.
//! - **Depth.** A top-level field is at level 1; the fields of a struct and the elements of a
//!   list are one level below it. An object or array deeper than [`MAX_DEPTH`] (32) levels
//!   is kept as compact JSON text, counted as a string that is neither a date nor numeric.
//!   So a schema nests at most 32 structs and lists, and a saved schema file always loads
//!   back.
//!
//! ## Namespaces
//!
//! Records are routed to namespaces before typing (see [`TransformOptions`]):
//!
//! - Without `namespace_fields`, every record goes to `default_namespace`.
//! - With them, the namespace is the value at each field's dot path (`meta.type` looks up
//!   `type` inside the object `meta`): strings as they are, numbers and booleans as their
//!   JSON text. Several fields are joined with `_` (`["source", "version"]` gives `web_2`).
//! - The name is sanitized to be table-safe ([`sanitize_namespace`]): ASCII letters are
//!   lowercased, ASCII digits and `_` kept, each run of the *separators* space, `-`, `.`,
//!   `/` and `:` replaced by one `_`, and leading and trailing `_` trimmed, so `Dock Event`,
//!   `dock-event` and `DOCK_EVENT` all name `dock_event`. Any other character (non-ASCII
//!   letters such as `Ä`, punctuation such as `!`) is also replaced (each run by one `_`),
//!   but that loses information, so then, and also when nothing but `_` would be left (an
//!   empty value, `___`), the name gets a suffix `_` + 8 lowercase hex digits: the top 32
//!   bits of the 64-bit FNV-1a hash of the whole value before sanitizing (the values joined
//!   with `_` when there are several fields). `Ünïcode` names `n_code_2b3811cd`, and `ÄÖ` and
//!   `!!!`, which without the suffix would share the namespace `_`, name `_b99320c6` and
//!   `_bbe43c17`. A name longer than [`naming::MAX_TABLE_NAME_BYTES`] (128 bytes) is cut
//!   and gets the suffix too, so a 1,100-byte value names a 128-byte table (Glue allows
//!   255, a file name 255, a WAL part 1,024). The hash is fixed, so a value names the same
//!   namespace in every run and on every machine. The whole policy, for columns and
//!   partition directories too, is in [`naming`].
//! - A record where any namespace field is missing, null, an object or an array goes to
//!   `default_namespace` (which is used as configured, not sanitized).
//! - Routing stops with an error once more than `max_namespaces` (1000; no configuration
//!   key changes it) namespaces would exist; the error names the fields and the limit and
//!   asks for `namespace_fields` with fewer distinct values. Merging partial inferences
//!   ([`SchemaInferrer::merge`]) does not check the limit again.
//!
//! Namespace fields are looked up in the record as read, before flattening.
//!
//! ### Flattening
//!
//! With `flatten_events`, nested objects become dotted top-level columns: `{"a":{"b":{"c":1}}}`
//! gives the column `a.b.c`. Arrays stay lists and their elements are not flattened. An empty
//! object gives no column. If a literal dotted key collides with a flattened one (`"a.b"` next
//! to `"a":{"b":..}`), the key later in the record wins. Flattened columns are top-level
//! fields for the [limits](#limits-maps-and-deep-nesting): they are at level 1 and count
//! towards the top-level field limit. The same flattening is applied when
//! inferring and when typing records ([`RecordBatchBuilder::with_flatten_events`]).
//!
//! ## Typing records
//!
//! [`RecordBatchBuilder`] puts each record's values into the columns of its namespace's
//! schema. A value goes into its field's column when it fits:
//!
//! - `boolean`: booleans. `int`: integers in 32 bits. `long`: integers in 64 bits.
//! - `double`: any number but an integer from 2^63 to 2^64 - 1 (a double would round its
//!   digits: it goes to a `string` column, as its exact text), and numeric strings.
//! - `date`: `YYYY-MM-DD` strings naming a real day.
//! - `timestamp`: integers, read as Unix seconds (stored as microseconds).
//!   `timestamp_ms`: integers, read as Unix milliseconds.
//! - `string`: anything: strings as they are, numbers and booleans as their JSON text,
//!   objects and arrays as compact JSON text. This is how the map-like and too deeply nested
//!   objects that inference kept as text are stored: their fields are `string` fields.
//! - `struct`: objects (their keys are typed recursively; keys not in the schema are ignored).
//! - `list`: arrays (each element must fit the element type).
//!
//! A missing key or `null` is a null. A value that does not fit its column goes to a sibling
//! column `<field>_<type>` that it fits, trying the type names in the order `boolean`, `int`,
//! `long`, `double`, `timestamp`, `timestamp_ms`, `date`, `struct`, `list`, `string` (and,
//! when the sibling itself does not fit, that sibling's own siblings). A sibling column is
//! only used when the record has no value of its own for it. A value that fits nowhere
//! rejects the whole record as a deadletter with code `untypeable`, naming the field path,
//! the value's JSON type and the column type; the batch is left as if the record had never
//! been appended.
//!
//! A namespace merged by key ([`RecordBatchBuilder::with_merge_key`]) needs a value of the
//! record's own in each key column: a record whose key value is null or missing, an object
//! or an array, or does not fit the key column (it would land in a sibling, leaving the key
//! NULL) is rejected the same way, with code `bad_key`, naming the column. A truncate
//! (`_op` is `t`) names no key and is taken.
//!
//! ## The saved schema file (format version 1)
//!
//! One JSON document per pipeline, written by [`PipelineSchema::save`] with 2-space
//! indentation, keys in a fixed order, namespaces sorted by name, and a trailing newline; it
//! holds no timestamps, so unchanged data saves to identical bytes. Each field is an object
//! with `name` and `type`; a `struct` adds `fields` (the same shape, recursively) and a
//! `list` adds `element` (a type object without a `name`). A file with any other
//! `format_version` is refused with a message asking to upgrade skipprd or discover again.
//!
//! ```json
//! {
//!   "format_version": 1,
//!   "workspace": "acme",
//!   "pipeline": "shop-events",
//!   "namespaces": {
//!     "orders": {
//!       "records": 2,
//!       "fields": [
//!         {
//!           "name": "customer",
//!           "type": "struct",
//!           "fields": [
//!             {
//!               "name": "since",
//!               "type": "date"
//!             }
//!           ]
//!         },
//!         {
//!           "name": "price",
//!           "type": "double"
//!         },
//!         {
//!           "name": "price_string",
//!           "type": "string"
//!         },
//!         {
//!           "name": "tags",
//!           "type": "list",
//!           "element": {
//!             "type": "string"
//!           }
//!         }
//!       ]
//!     }
//!   }
//! }
//! ```
//!
//! Unknown keys are refused too, so a typo in a hand-edited file is reported rather than
//! silently ignored.

pub mod adapt;
mod arrow;
mod error;
pub mod evolve;
mod infer;
pub(crate) mod json_tape;
mod line_typer;
mod namespace;
pub mod naming;
mod saved;
pub mod store;

pub(crate) use self::arrow::parse_decimal;
#[cfg(test)]
pub(crate) use self::arrow::sample_decimals;
pub use self::arrow::{RecordBatchBuilder, to_arrow_schema};
pub use self::error::SchemaError;
pub use self::evolve::{ChangeKind, SchemaChange, evolve};
pub use self::infer::SchemaInferrer;
#[cfg(test)]
pub(crate) use self::infer::{MILLIS_RANGE, SECONDS_RANGE};
pub(crate) use self::infer::{NumberShape, cells_typed, number_shape};
pub(crate) use self::line_typer::JsonLineTyper;
pub use self::namespace::{
    MergeKeys, TransformOptions, namespace_for, namespace_for_record, sanitize_namespace,
};
pub use self::saved::PipelineSchema;
pub use self::store::{
    LocalSchemaStore, MemorySchemaStore, PipelineSchemaStore, S3SchemaStore, SchemaStore,
};

/// How deep inference looks into nested values: an object or array more than this many
/// levels down (a top-level field is level 1; the fields of a struct and the elements of a
/// list are one level below it) is kept as JSON text in a `string` field. This keeps every
/// saved schema file within what [`PipelineSchema::load`] reads back.
pub const MAX_DEPTH: usize = 32;

/// The type of a field. Every field is nullable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// `true` / `false`.
    Boolean,
    /// A signed 32-bit integer.
    Int,
    /// A signed 64-bit integer.
    Long,
    /// A 64-bit float.
    Double,
    /// A calendar date (`YYYY-MM-DD`).
    Date,
    /// A UTC instant read from Unix seconds, stored with microsecond precision.
    Timestamp,
    /// A UTC instant read from Unix milliseconds.
    TimestampMs,
    /// An exact decimal of at most `precision` digits, `scale` of them after the point
    /// (`1 <= precision <= 38`, `scale <= precision`): a typed source's `numeric(p, s)`.
    Decimal {
        /// Digits in all.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// UTF-8 text.
    String,
    /// An object with these fields, sorted by name.
    Struct(Vec<Field>),
    /// An array whose elements have this type.
    List(Box<FieldType>),
}

impl FieldType {
    /// The type's name as written in the schema file and in sibling names
    /// (`boolean`, `int`, `long`, `double`, `date`, `timestamp`, `timestamp_ms`, `decimal`,
    /// `string`, `struct`, `list`).
    pub fn type_name(&self) -> &'static str {
        match self {
            FieldType::Boolean => "boolean",
            FieldType::Int => "int",
            FieldType::Long => "long",
            FieldType::Double => "double",
            FieldType::Date => "date",
            FieldType::Timestamp => "timestamp",
            FieldType::TimestampMs => "timestamp_ms",
            FieldType::Decimal { .. } => "decimal",
            FieldType::String => "string",
            FieldType::Struct(_) => "struct",
            FieldType::List(_) => "list",
        }
    }

    /// A decimal type, if `precision` and `scale` make one (see [`FieldType::Decimal`]).
    pub fn decimal(precision: u32, scale: u32) -> Option<FieldType> {
        let precision = u8::try_from(precision)
            .ok()
            .filter(|p| (1..=38).contains(p))?;
        let scale = u8::try_from(scale).ok().filter(|s| *s <= precision)?;
        Some(FieldType::Decimal { precision, scale })
    }

    /// The precision and scale a SQL type name such as `numeric(12,3)` or `decimal(12,3)`
    /// spells after `name`, if it is that shape.
    pub(crate) fn precision_scale(text: &str, name: &str) -> Option<(u32, u32)> {
        let (precision, scale) = text
            .strip_prefix(name)?
            .strip_prefix('(')?
            .strip_suffix(')')?
            .split_once(',')?;
        Some((precision.trim().parse().ok()?, scale.trim().parse().ok()?))
    }

    /// The type of a scalar (non-struct, non-list, non-decimal) type name, if it is one.
    pub fn scalar_from_name(name: &str) -> Option<FieldType> {
        Some(match name {
            "boolean" => FieldType::Boolean,
            "int" => FieldType::Int,
            "long" => FieldType::Long,
            "double" => FieldType::Double,
            "date" => FieldType::Date,
            "timestamp" => FieldType::Timestamp,
            "timestamp_ms" => FieldType::TimestampMs,
            "string" => FieldType::String,
            _ => return None,
        })
    }
}

impl std::fmt::Display for FieldType {
    /// Scalars by their type name, decimals as `decimal(p,s)`, lists as `list<element>`
    /// (`list<list<int>>`), structs as `struct`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldType::List(element) => write!(f, "list<{element}>"),
            FieldType::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            other => f.write_str(other.type_name()),
        }
    }
}

/// One named, nullable field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// The field's name (a key of the JSON object; a dotted path when flattening).
    pub name: String,
    /// The field's type.
    pub field_type: FieldType,
}

impl Field {
    /// A field with this name and type.
    pub fn new(name: impl Into<String>, field_type: FieldType) -> Self {
        Field {
            name: name.into(),
            field_type,
        }
    }
}

/// The schema of one namespace: its top-level fields, sorted by name, and how many records
/// it was inferred from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceSchema {
    /// Top-level fields, sorted by name.
    pub fields: Vec<Field>,
    /// Records the schema was inferred from.
    pub records: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_round_trip_for_scalars() {
        for field_type in [
            FieldType::Boolean,
            FieldType::Int,
            FieldType::Long,
            FieldType::Double,
            FieldType::Date,
            FieldType::Timestamp,
            FieldType::TimestampMs,
            FieldType::String,
        ] {
            assert_eq!(
                FieldType::scalar_from_name(field_type.type_name()),
                Some(field_type)
            );
        }
        assert_eq!(FieldType::scalar_from_name("struct"), None);
    }

    #[test]
    fn display_spells_out_nested_list_types() {
        let nested = FieldType::List(Box::new(FieldType::List(Box::new(FieldType::Int))));
        assert_eq!(nested.to_string(), "list<list<int>>");
        assert_eq!(FieldType::Struct(vec![]).to_string(), "struct");
    }
}
