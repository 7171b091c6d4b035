//! Our Iceberg schema as Glue shows it: Hive type names ([`hive_type`]) and Glue columns
//! ([`glue_columns`]), so Athena's column list follows schema evolution.
//!
//! Names follow the naming policy ([`crate::schema::naming`]) and Athena's rules: a column,
//! and a struct field inside a type string, is [`glue_column_name`] of its key (lowercase
//! letters, digits and `_`; a key that had to change gets a hash suffix and is kept as the
//! column comment), so no key can break the type string's syntax. The Iceberg schema keeps
//! the keys as they are (Athena reads Iceberg tables by their Iceberg schema).

use std::collections::BTreeMap;

use iceberg::spec::{NestedFieldRef, PrimitiveType, Schema, Type};

use super::GlueColumn;
use crate::schema::naming::glue_column_name;

/// Iceberg type -> Hive type name, as Athena and Glue show columns.
pub fn hive_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Fixed(_) | PrimitiveType::Binary => "binary".into(),
        },
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|f| format!("{}:{}", glue_column_name(&f.name), hive_type(&f.field_type)))
                .collect();
            format!("struct<{}>", fields.join(","))
        }
        Type::List(l) => format!("array<{}>", hive_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            hive_type(&m.key_field.field_type),
            hive_type(&m.value_field.field_type)
        ),
    }
}

/// The Glue columns of an Iceberg schema.
pub fn glue_columns(schema: &Schema) -> Vec<GlueColumn> {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f: &NestedFieldRef| GlueColumn {
            name: glue_column_name(&f.name),
            type_name: hive_type(&f.field_type),
            comment: if glue_column_name(&f.name) == f.name {
                f.doc.clone()
            } else {
                Some(f.name.clone())
            },
            parameters: BTreeMap::from([
                ("iceberg.field.id".to_owned(), f.id.to_string()),
                (
                    "iceberg.field.optional".to_owned(),
                    (!f.required).to_string(),
                ),
                ("iceberg.field.current".to_owned(), "true".to_owned()),
            ]),
        })
        .collect()
}
