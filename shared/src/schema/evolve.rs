//! Schema evolution during `sync`: folding what a new batch looks like into the saved schema.
//!
//! Each batch is inferred on its own (with the same rules as `discover`), then merged into the
//! current schema field by field, never breaking a column that already holds data:
//!
//! | current column | observed in the batch | result |
//! |---|---|---|
//! | absent | any type | the field is **added** |
//! | same type | same type | unchanged |
//! | `string` | anything | unchanged (text takes any value) |
//! | `double` | `int`, `long`, `timestamp`, `timestamp_ms` | unchanged (numbers fit a double) |
//! | `long` | `int`, `timestamp`, `timestamp_ms` | unchanged |
//! | `timestamp` or `timestamp_ms` | `int`, `long` | unchanged (integers are read in the column's unit) |
//! | `int` | `long`, `timestamp`, `timestamp_ms` | **widened** to `long` (Iceberg-legal: int -> long) |
//! | `decimal(p,s)` | `decimal(q,s)`, `q <= p` | unchanged |
//! | `decimal(p,s)` | `decimal(q,s)`, `q > p` | **widened** to `decimal(q,s)` (Iceberg-legal: precision only) |
//! | `struct` | `struct` | evolved field by field, recursively |
//! | `list<T>` | `list<U>` | unchanged when `U` fits `T`; `list<int>` widens to `list<long>` |
//! | anything else | a conflicting type | a **sibling** `<field>_<type>` is added (or evolved, if it exists) |
//!
//! So only Iceberg-legal widenings change a type; everything else lands beside the column, the
//! way [`super::RecordBatchBuilder`] routes values (a list whose elements conflict gets a
//! `<field>_list` sibling). Fields stay sorted by name.

use std::fmt;

use super::{Field, FieldType, NamespaceSchema, PipelineSchema};

/// One change [`evolve`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// The namespace.
    pub namespace: String,
    /// Dotted path of the field (empty for a new namespace).
    pub path: String,
    /// What happened.
    pub kind: ChangeKind,
}

/// The kinds of change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeKind {
    /// A new namespace (table).
    NamespaceAdded,
    /// A new field, with its type.
    Added(FieldType),
    /// A type widened, from and to.
    Widened(FieldType, FieldType),
}

impl fmt::Display for SchemaChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ChangeKind::NamespaceAdded => write!(f, "new namespace {}", self.namespace),
            ChangeKind::Added(t) => write!(f, "{}: added {} {t}", self.namespace, self.path),
            ChangeKind::Widened(from, to) => write!(
                f,
                "{}: widened {} {from} -> {to}",
                self.namespace, self.path
            ),
        }
    }
}

/// Fold `observed` (the schema of a batch) into `current`, returning what changed (empty
/// when the batch fits the current schema as it is). Record counts of existing namespaces are
/// left alone: they count what `discover` sampled.
pub fn evolve(current: &mut PipelineSchema, observed: &PipelineSchema) -> Vec<SchemaChange> {
    let mut changes = Vec::new();
    for (name, ns) in &observed.namespaces {
        match current.namespaces.get_mut(name) {
            None => {
                current.namespaces.insert(
                    name.clone(),
                    NamespaceSchema {
                        fields: ns.fields.clone(),
                        records: ns.records,
                    },
                );
                changes.push(SchemaChange {
                    namespace: name.clone(),
                    path: String::new(),
                    kind: ChangeKind::NamespaceAdded,
                });
            }
            Some(existing) => {
                let mut record = |path: String, kind| {
                    changes.push(SchemaChange {
                        namespace: name.clone(),
                        path,
                        kind,
                    })
                };
                evolve_fields(&mut existing.fields, &ns.fields, "", &mut record);
            }
        }
    }
    changes
}

fn evolve_fields(
    current: &mut Vec<Field>,
    observed: &[Field],
    prefix: &str,
    record: &mut impl FnMut(String, ChangeKind),
) {
    for field in observed {
        evolve_field(current, &field.name, &field.field_type, prefix, record);
    }
}

/// Fold one observed field into the field list, adding, widening or adding a sibling.
fn evolve_field(
    fields: &mut Vec<Field>,
    name: &str,
    observed: &FieldType,
    prefix: &str,
    record: &mut impl FnMut(String, ChangeKind),
) {
    let path = format!("{prefix}{name}");
    let Some(index) = fields.iter().position(|f| f.name == name) else {
        insert_sorted(fields, Field::new(name, observed.clone()));
        record(path, ChangeKind::Added(observed.clone()));
        return;
    };
    let current = &mut fields[index].field_type;
    match (&mut *current, observed) {
        (FieldType::Struct(children), FieldType::Struct(seen)) => {
            evolve_fields(children, seen, &format!("{path}."), record);
        }
        (FieldType::List(element), FieldType::List(seen)) => {
            if fits(element, seen) {
                return;
            }
            if let Some(wider) = widen(element, seen) {
                let from = current.clone();
                *current = FieldType::List(Box::new(wider));
                record(path, ChangeKind::Widened(from, current.clone()));
                return;
            }
            let sibling = format!("{name}_list");
            evolve_field(fields, &sibling, observed, prefix, record);
        }
        (c, o) if fits(c, o) => {}
        (c, o) => {
            if let Some(wider) = widen(c, o) {
                let from = c.clone();
                *c = wider.clone();
                record(path, ChangeKind::Widened(from, wider));
                return;
            }
            let sibling = format!("{name}_{}", o.type_name());
            evolve_field(fields, &sibling, observed, prefix, record);
        }
    }
}

fn insert_sorted(fields: &mut Vec<Field>, field: Field) {
    let at = fields.partition_point(|f| f.name.as_bytes() < field.name.as_bytes());
    fields.insert(at, field);
}

/// Whether values inferred as `observed` go into a `current` column unchanged.
fn fits(current: &FieldType, observed: &FieldType) -> bool {
    use FieldType::*;
    match (current, observed) {
        (String, _) => true,
        (Double, Int | Long | Double | Timestamp | TimestampMs) => true,
        (Long, Int | Long | Timestamp | TimestampMs) => true,
        (Timestamp, Int | Long | Timestamp) | (TimestampMs, Int | Long | TimestampMs) => true,
        (
            Decimal { precision, scale },
            Decimal {
                precision: p,
                scale: s,
            },
        ) => scale == s && p <= precision,
        (Struct(fields), Struct(seen)) => seen.iter().all(|s| {
            fields
                .iter()
                .find(|f| f.name == s.name)
                .is_some_and(|f| fits(&f.field_type, &s.field_type))
        }),
        (List(element), List(seen)) => fits(element, seen),
        (c, o) => c == o,
    }
}

/// The Iceberg-legal widening of `current` that takes `observed`, if any.
fn widen(current: &FieldType, observed: &FieldType) -> Option<FieldType> {
    use FieldType::*;
    match (current, observed) {
        (Int, Long | Timestamp | TimestampMs) => Some(Long),
        (
            Decimal { scale, .. },
            Decimal {
                precision: p,
                scale: s,
            },
        ) if scale == s => Some(Decimal {
            precision: *p,
            scale: *s,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn schema(ns: &str, fields: Vec<Field>) -> PipelineSchema {
        PipelineSchema {
            format_version: PipelineSchema::FORMAT_VERSION,
            workspace: "w".into(),
            pipeline: "p".into(),
            namespaces: BTreeMap::from([(ns.to_owned(), NamespaceSchema { fields, records: 1 })]),
        }
    }

    fn f(name: &str, t: FieldType) -> Field {
        Field::new(name, t)
    }

    fn names(s: &PipelineSchema, ns: &str) -> Vec<String> {
        s.namespaces[ns]
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, f.field_type))
            .collect()
    }

    #[test]
    fn a_batch_that_fits_changes_nothing() {
        let mut current = schema(
            "e",
            vec![
                f("n", FieldType::Double),
                f("s", FieldType::String),
                f("t", FieldType::Long),
            ],
        );
        let before = current.clone();
        let seen = schema(
            "e",
            vec![
                f("n", FieldType::Int),
                f("s", FieldType::Boolean),
                f("t", FieldType::Timestamp),
            ],
        );
        assert!(evolve(&mut current, &seen).is_empty());
        assert_eq!(current, before);
    }

    #[test]
    fn new_fields_and_namespaces_are_added_in_name_order() {
        let mut current = schema("e", vec![f("a", FieldType::Int), f("c", FieldType::Int)]);
        let mut seen = schema("e", vec![f("b", FieldType::Date)]);
        seen.namespaces.insert(
            "other".into(),
            NamespaceSchema {
                fields: vec![f("x", FieldType::Boolean)],
                records: 3,
            },
        );
        let changes = evolve(&mut current, &seen);
        assert_eq!(names(&current, "e"), ["a: int", "b: date", "c: int"]);
        assert_eq!(current.namespaces["other"].records, 3);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].to_string(), "e: added b date");
        assert_eq!(changes[1].to_string(), "new namespace other");
    }

    #[test]
    fn int_widens_to_long_but_never_to_double() {
        let mut current = schema("e", vec![f("m", FieldType::Int), f("n", FieldType::Int)]);
        let seen = schema(
            "e",
            vec![f("m", FieldType::Double), f("n", FieldType::Long)],
        );
        let changes = evolve(&mut current, &seen);
        assert_eq!(
            names(&current, "e"),
            ["m: int", "m_double: double", "n: long"]
        );
        assert!(
            changes
                .iter()
                .any(|c| c.kind == ChangeKind::Widened(FieldType::Int, FieldType::Long))
        );
    }

    #[test]
    fn conflicting_values_get_a_sibling_and_an_existing_sibling_evolves() {
        let mut current = schema(
            "e",
            vec![
                f("price", FieldType::Double),
                f("price_string", FieldType::Int),
            ],
        );
        let seen = schema("e", vec![f("price", FieldType::String)]);
        evolve(&mut current, &seen);
        // `price_string` exists as int: the strings do not fit it, so it gets its own sibling.
        assert_eq!(
            names(&current, "e"),
            [
                "price: double",
                "price_string: int",
                "price_string_string: string"
            ]
        );
    }

    #[test]
    fn nested_structs_evolve_field_by_field() {
        let inner = |fields| FieldType::Struct(fields);
        let mut current = schema("e", vec![f("s", inner(vec![f("a", FieldType::Int)]))]);
        let seen = schema(
            "e",
            vec![f(
                "s",
                inner(vec![f("a", FieldType::Long), f("b", FieldType::Boolean)]),
            )],
        );
        let changes = evolve(&mut current, &seen);
        assert_eq!(
            current.namespaces["e"].fields[0].field_type,
            inner(vec![f("a", FieldType::Long), f("b", FieldType::Boolean)])
        );
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["s.a", "s.b"]);
    }

    #[test]
    fn lists_widen_their_elements_or_get_a_list_sibling() {
        let list = |t| FieldType::List(Box::new(t));
        let mut current = schema(
            "e",
            vec![
                f("k", list(FieldType::Boolean)),
                f("l", list(FieldType::Int)),
            ],
        );
        let seen = schema(
            "e",
            vec![f("k", list(FieldType::Date)), f("l", list(FieldType::Long))],
        );
        evolve(&mut current, &seen);
        assert_eq!(
            names(&current, "e"),
            ["k: list<boolean>", "k_list: list<date>", "l: list<long>"]
        );
    }

    #[test]
    fn a_struct_where_a_scalar_was_gets_a_struct_sibling() {
        let mut current = schema("e", vec![f("x", FieldType::Long)]);
        let seen = schema(
            "e",
            vec![f("x", FieldType::Struct(vec![f("y", FieldType::Int)]))],
        );
        evolve(&mut current, &seen);
        assert_eq!(names(&current, "e"), ["x: long", "x_struct: struct"]);
    }

    #[test]
    fn decimals_widen_their_precision_never_their_scale() {
        let decimal = |p, s| FieldType::decimal(p, s).unwrap();
        let mut current = schema("n", vec![f("price", decimal(10, 2))]);
        assert!(evolve(&mut current, &schema("n", vec![f("price", decimal(8, 2))])).is_empty());
        let changes = evolve(&mut current, &schema("n", vec![f("price", decimal(14, 2))]));
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(
            current.namespaces["n"].fields,
            vec![f("price", decimal(14, 2))]
        );
        evolve(&mut current, &schema("n", vec![f("price", decimal(14, 4))]));
        assert_eq!(
            current.namespaces["n"].fields,
            vec![
                f("price", decimal(14, 2)),
                f("price_decimal", decimal(14, 4))
            ]
        );
    }
}
