//! From skipprd's namespace schema to the Iceberg table schema, and Arrow batches to match.
//!
//! Types: `boolean`, `int`, `long`, `double`, `date`, `decimal(p,s)` and `string` map to the
//! Iceberg types of the same names; `timestamp` and `timestamp_ms` both map to `timestamptz`
//! (Iceberg stores microseconds; millisecond values are scaled); structs and lists map field
//! by field.
//!
//! Evolution keeps every column the table has (columns are never dropped or renamed), keeps
//! the field id of every column it keeps, gives new columns (at any depth) fresh ids after
//! the table's highest, and changes a type only where Iceberg allows it: `int -> long`,
//! `float -> double` and a decimal's precision (`decimal(p,s) -> decimal(q,s)`, `q > p`). A column whose type would have to change any other way is an error
//! naming the table and the column: skipprd's own schema rules route such values to
//! `<field>_<type>` sibling columns, so it means the table was changed by someone else.
//!
//! Names are the data's keys, but for one case. Iceberg indexes a schema's fields by their
//! dotted full names (`a.b` for the field `b` of the struct `a`, `a.element.b` inside a list)
//! and refuses a schema where two fields share one, which a key holding `.` can cause:
//! `{"a.b": 1}` beside `{"a": {"b": 2}}`. A key that starts with the name of a struct or list
//! beside it followed by `.` is therefore named by [`undotted_name`] in the table (`a%2Eb`),
//! whether it came first or second; a column already in the table is renamed (Iceberg keeps
//! data by field id, so its data stays). Batches find such a column under its key
//! ([`crate::schema::adapt::adapt_batch`]).

use std::sync::Arc;

use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema as IcebergSchema, StructType, Type,
};

use std::collections::{HashMap, HashSet};

use crate::schema::naming::{dotted_key, undotted_name};
use crate::schema::{Field, FieldType};

/// Why a table's schema cannot take a namespace's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatible {
    /// Dotted path of the column.
    pub column: String,
    /// The column's type in the table.
    pub table_type: String,
    /// The type the data needs.
    pub data_type: String,
}

/// Assigns fresh field ids.
struct Ids(i32);

impl Ids {
    fn next(&mut self) -> i32 {
        self.0 += 1;
        self.0
    }
}

fn primitive(field_type: &FieldType) -> Option<PrimitiveType> {
    Some(match field_type {
        FieldType::Boolean => PrimitiveType::Boolean,
        FieldType::Int => PrimitiveType::Int,
        FieldType::Long => PrimitiveType::Long,
        FieldType::Double => PrimitiveType::Double,
        FieldType::Date => PrimitiveType::Date,
        FieldType::Timestamp | FieldType::TimestampMs => PrimitiveType::Timestamptz,
        FieldType::Decimal { precision, scale } => PrimitiveType::Decimal {
            precision: u32::from(*precision),
            scale: u32::from(*scale),
        },
        FieldType::String => PrimitiveType::String,
        FieldType::Struct(_) | FieldType::List(_) => return None,
    })
}

/// A brand-new type, every id fresh.
fn fresh_type(field_type: &FieldType, ids: &mut Ids) -> Type {
    match field_type {
        FieldType::Struct(fields) => Type::Struct(StructType::new(undot_clashes(
            fields
                .iter()
                .map(|f| {
                    let id = ids.next();
                    Arc::new(NestedField::optional(
                        id,
                        &f.name,
                        fresh_type(&f.field_type, ids),
                    ))
                })
                .collect(),
        ))),
        FieldType::List(element) => {
            let id = ids.next();
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                fresh_type(element, ids),
                false,
            ))))
        }
        scalar => Type::Primitive(primitive(scalar).unwrap_or(PrimitiveType::String)),
    }
}

/// `existing` evolved to hold `wanted`: ids kept, new fields added, legal promotions made.
fn evolve_type(
    path: &str,
    existing: &Type,
    wanted: &FieldType,
    ids: &mut Ids,
) -> Result<Type, Incompatible> {
    let incompatible = || Incompatible {
        column: path.to_owned(),
        table_type: existing.to_string(),
        data_type: wanted.to_string(),
    };
    match (existing, wanted) {
        (Type::Struct(have), FieldType::Struct(want)) => Ok(Type::Struct(StructType::new(
            evolve_fields(path, have.fields(), want, ids)?,
        ))),
        (Type::List(have), FieldType::List(want)) => {
            let element = &have.element_field;
            let field_type =
                evolve_type(&format!("{path}.element"), &element.field_type, want, ids)?;
            Ok(Type::List(ListType::new(Arc::new(
                NestedField::list_element(element.id, field_type, element.required),
            ))))
        }
        (Type::Primitive(have), want) => {
            let want = primitive(want).ok_or_else(incompatible)?;
            match (have, &want) {
                (a, b) if a == b => Ok(existing.clone()),
                (PrimitiveType::Int, PrimitiveType::Long)
                | (PrimitiveType::Float, PrimitiveType::Double) => Ok(Type::Primitive(want)),
                // Iceberg widens a decimal's precision, never its scale.
                (
                    PrimitiveType::Decimal {
                        precision: p1,
                        scale: s1,
                    },
                    PrimitiveType::Decimal {
                        precision: p2,
                        scale: s2,
                    },
                ) if s1 == s2 => Ok(if p2 > p1 {
                    Type::Primitive(want)
                } else {
                    existing.clone()
                }),
                // The table is already wider than the data: the data is cast up on write.
                (PrimitiveType::Long, PrimitiveType::Int)
                | (PrimitiveType::Double, PrimitiveType::Int | PrimitiveType::Long) => {
                    Ok(existing.clone())
                }
                _ => Err(incompatible()),
            }
        }
        _ => Err(incompatible()),
    }
}

fn evolve_fields(
    path: &str,
    have: &[NestedFieldRef],
    want: &[Field],
    ids: &mut Ids,
) -> Result<Vec<NestedFieldRef>, Incompatible> {
    let join = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    let wanted: HashMap<&str, &Field> = want.iter().map(|w| (w.name.as_str(), w)).collect();
    // A column of the table holds a key of the data under the key's name or, for a key the
    // table had to undot, under its undotted name.
    let held = |name: &str| {
        wanted
            .get(name)
            .or_else(|| dotted_key(name).and_then(|key| wanted.get(key.as_str())))
            .copied()
    };
    let mut out = Vec::with_capacity(have.len().max(want.len()));
    let mut kept: HashSet<&str> = HashSet::with_capacity(have.len());
    for field in have {
        let evolved = match held(&field.name) {
            Some(w) => {
                kept.insert(w.name.as_str());
                let field_type =
                    evolve_type(&join(&field.name), &field.field_type, &w.field_type, ids)?;
                let mut f = NestedField::new(field.id, &field.name, field_type, field.required);
                f.doc.clone_from(&field.doc);
                Arc::new(f)
            }
            None => Arc::clone(field),
        };
        out.push(evolved);
    }
    for w in want {
        if !kept.contains(w.name.as_str()) {
            let id = ids.next();
            out.push(Arc::new(NestedField::optional(
                id,
                &w.name,
                fresh_type(&w.field_type, ids),
            )));
        }
    }
    Ok(undot_clashes(out))
}

/// Whether the key `name` would share a dotted full name with a field below one of the
/// `containers` (the structs and lists beside it): it starts with a container's name and `.`.
fn clashes(name: &str, containers: &[&str]) -> bool {
    name.contains('.')
        && containers.iter().any(|c| {
            name.len() > c.len()
                && name.starts_with(c)
                && name.as_bytes().get(c.len()) == Some(&b'.')
        })
}

/// `fields` (the fields of one struct) with every key that [`clashes`] renamed to its
/// [`undotted_name`], all else kept. An undotted name holds no `.`, so it never
/// clashes itself; it can make a new container name another key clashes with, hence the loop.
fn undot_clashes(mut fields: Vec<NestedFieldRef>) -> Vec<NestedFieldRef> {
    loop {
        let containers: Vec<&str> = fields
            .iter()
            .filter(|f| matches!(*f.field_type, Type::Struct(_) | Type::List(_)))
            .map(|f| f.name.as_str())
            .collect();
        let clashing: Vec<usize> = fields
            .iter()
            .enumerate()
            .filter(|(_, f)| clashes(&f.name, &containers))
            .map(|(i, _)| i)
            .collect();
        if clashing.is_empty() {
            return fields;
        }
        for i in clashing {
            if let Some(field) = fields.get_mut(i) {
                let mut f = NestedField::clone(field);
                f.name = undotted_name(&f.name);
                *field = Arc::new(f);
            }
        }
    }
}

/// The schema a new table gets for `fields` (ids from 1; the table metadata builder may
/// renumber them, so always read ids back from the table).
pub fn initial_schema(fields: &[Field]) -> iceberg::Result<IcebergSchema> {
    let mut ids = Ids(0);
    let fields = fields
        .iter()
        .map(|f| {
            let id = ids.next();
            Arc::new(NestedField::optional(
                id,
                &f.name,
                fresh_type(&f.field_type, &mut ids),
            ))
        })
        .collect::<Vec<_>>();
    IcebergSchema::builder()
        .with_fields(undot_clashes(fields))
        .build()
}

/// `current` evolved to hold `fields`, or `None` when it already does.
pub fn evolved_schema(
    current: &IcebergSchema,
    fields: &[Field],
) -> Result<Option<Vec<NestedFieldRef>>, Incompatible> {
    let mut ids = Ids(current.highest_field_id());
    let evolved = evolve_fields("", current.as_struct().fields(), fields, &mut ids)?;
    if evolved.as_slice() == current.as_struct().fields() {
        Ok(None)
    } else {
        Ok(Some(evolved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(schema: &IcebergSchema) -> Vec<String> {
        schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    #[test]
    fn only_dotted_keys_that_would_share_a_path_are_undotted() -> iceberg::Result<()> {
        let int = |name: &str| Field::new(name, FieldType::Int);
        let schema = initial_schema(&[
            int("a.b"),
            Field::new("a", FieldType::Struct(vec![int("b"), int("c.d")])),
            int("x.y"),
            Field::new("x", FieldType::Int),
            // `l.element.v` is the path of the field `v` of the elements of the list `l`.
            int("l.element.v"),
            Field::new(
                "l",
                FieldType::List(Box::new(FieldType::Struct(vec![int("v")]))),
            ),
            int("ab.c"),
        ])?;
        assert_eq!(
            names(&schema),
            ["a%2Eb", "a", "x.y", "x", "l%2Eelement%2Ev", "l", "ab.c"]
        );
        // Below a struct, keys keep their dots when nothing beside them clashes.
        assert!(schema.field_by_name("a.c.d").is_some());
        assert!(schema.field_by_name("l.element.v").is_some());
        Ok(())
    }

    #[test]
    fn an_undotted_struct_can_make_another_key_clash() -> iceberg::Result<()> {
        let int = |name: &str| Field::new(name, FieldType::Int);
        // `a.b` is undotted (it starts with the struct `a`) into `a%2Eb`, a struct whose field
        // `c` has the path `a%2Eb.c`: the key of that name must be undotted too.
        let schema = initial_schema(&[
            Field::new("a", FieldType::Struct(vec![int("z")])),
            Field::new("a.b", FieldType::Struct(vec![int("c")])),
            int("a%2Eb.c"),
        ])?;
        assert_eq!(names(&schema), ["a", "a%2Eb", "a%252Eb%2Ec"]);
        Ok(())
    }

    #[test]
    fn a_column_undotted_earlier_keeps_its_name_and_id() -> iceberg::Result<()> {
        let int = |name: &str| Field::new(name, FieldType::Int);
        let fields = [
            int("a.b"),
            Field::new("a", FieldType::Struct(vec![int("b")])),
        ];
        let schema = initial_schema(&fields)?;
        assert_eq!(evolved_schema(&schema, &fields), Ok(None));
        let id = schema.field_by_name("a%2Eb").map(|f| f.id);
        let more = [fields[0].clone(), fields[1].clone(), int("c")];
        let evolved = evolved_schema(&schema, &more)
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.column))?
            .unwrap_or_default();
        let evolved = IcebergSchema::builder().with_fields(evolved).build()?;
        assert_eq!(evolved.field_by_name("a%2Eb").map(|f| f.id), id);
        assert_eq!(names(&evolved), ["a%2Eb", "a", "c"]);
        Ok(())
    }
}
