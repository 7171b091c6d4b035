//! From skipprd's namespace schema to the Iceberg table schema, and Arrow batches to match.
//!
//! Types: `boolean`, `int`, `long`, `double`, `date` and `string` map to the Iceberg types of
//! the same names; `timestamp` and `timestamp_ms` both map to `timestamptz` (Iceberg stores
//! microseconds; millisecond values are scaled); structs and lists map field by field.
//!
//! Evolution keeps every column the table has (columns are never dropped or renamed), keeps
//! the field id of every column it keeps, gives new columns (at any depth) fresh ids after
//! the table's highest, and changes a type only where Iceberg allows it: `int -> long` and
//! `float -> double`. A column whose type would have to change any other way is an error
//! naming the table and the column: skipprd's own schema rules route such values to
//! `<field>_<type>` sibling columns, so it means the table was changed by someone else.

use std::sync::Arc;

use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema as IcebergSchema, StructType, Type,
};

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
        FieldType::String => PrimitiveType::String,
        FieldType::Struct(_) | FieldType::List(_) => return None,
    })
}

/// A brand-new type, every id fresh.
fn fresh_type(field_type: &FieldType, ids: &mut Ids) -> Type {
    match field_type {
        FieldType::Struct(fields) => Type::Struct(StructType::new(
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
        )),
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
        data_type: wanted.type_name().to_owned(),
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
    let mut out = Vec::with_capacity(have.len().max(want.len()));
    for field in have {
        let evolved = match want.iter().find(|w| w.name == field.name) {
            Some(w) => {
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
        if !have.iter().any(|f| f.name == w.name) {
            let id = ids.next();
            out.push(Arc::new(NestedField::optional(
                id,
                &w.name,
                fresh_type(&w.field_type, ids),
            )));
        }
    }
    Ok(out)
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
    IcebergSchema::builder().with_fields(fields).build()
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
