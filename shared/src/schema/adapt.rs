//! Reading batches typed under different schema versions as one schema.
//!
//! Used by `query` (one table schema per namespace from the schemas its WAL batches were
//! written with, plus the landed Iceberg table's) and by the Iceberg sink (WAL batches of any
//! schema version written as the table's current schema).
//!
//! The table schema is the newest batch's schema, widened by every column (and struct child)
//! that only older schemas have, appended after the newest ones. Every field is nullable, since
//! a column missing from a batch reads as nulls. Field and schema metadata are dropped: they
//! differ between schema versions, and DataFusion refuses to combine inputs whose metadata
//! differs.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, LargeListArray, ListArray, StructArray};
use arrow::array::{RecordBatch, RecordBatchOptions, new_null_array};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use arrow::error::ArrowError;

/// The table schema for `schemas`, given newest first.
pub fn merge_schemas(schemas: &[SchemaRef]) -> SchemaRef {
    let mut fields: Vec<FieldRef> = Vec::new();
    for schema in schemas {
        merge_fields(&mut fields, schema.fields());
    }
    Arc::new(Schema::new(fields))
}

/// Add `more` (an older version's fields) to `fields`: new names at the end, struct children
/// merged the same way. A field already there keeps its type otherwise.
fn merge_fields(fields: &mut Vec<FieldRef>, more: &Fields) {
    let index: HashMap<String, usize> = fields
        .iter()
        .enumerate()
        .map(|(i, field)| (field.name().clone(), i))
        .collect();
    for field in more {
        match index.get(field.name()) {
            None => fields.push(Arc::new(normalize(field))),
            Some(&i) => {
                if let Some(merged) = merge_types(fields[i].data_type(), field.data_type()) {
                    fields[i] = Arc::new(fields[i].as_ref().clone().with_data_type(merged));
                }
            }
        }
    }
}

/// `newer` widened by the struct children only `older` has, if there are any.
fn merge_types(newer: &DataType, older: &DataType) -> Option<DataType> {
    match (newer, older) {
        (DataType::Struct(newer), DataType::Struct(older)) => {
            let mut fields: Vec<FieldRef> = newer.iter().cloned().collect();
            merge_fields(&mut fields, older);
            Some(DataType::Struct(fields.into()))
        }
        (DataType::List(newer), DataType::List(older)) => {
            let item = merge_types(newer.data_type(), older.data_type())?;
            Some(DataType::List(Arc::new(
                newer.as_ref().clone().with_data_type(item),
            )))
        }
        (DataType::LargeList(newer), DataType::LargeList(older)) => {
            let item = merge_types(newer.data_type(), older.data_type())?;
            Some(DataType::LargeList(Arc::new(
                newer.as_ref().clone().with_data_type(item),
            )))
        }
        // Widenings: a column that is wider in one input is read as the wider type.
        (DataType::Int32, DataType::Int64) => Some(DataType::Int64),
        (DataType::Float32, DataType::Float64) => Some(DataType::Float64),
        (DataType::Decimal128(a, scale), DataType::Decimal128(b, other))
            if scale == other && a != b =>
        {
            Some(DataType::Decimal128(*a.max(b), *scale))
        }
        (DataType::Timestamp(a, tz), DataType::Timestamp(b, _)) if a != b => Some(
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, tz.clone()),
        ),
        _ => None,
    }
}

/// `field` without metadata, nullable, and the same for its struct and list children.
pub fn normalize(field: &Field) -> Field {
    Field::new(field.name(), normalize_type(field.data_type()), true)
}

fn normalize_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|field| Arc::new(normalize(field)))
                .collect(),
        ),
        DataType::List(item) => DataType::List(Arc::new(normalize(item))),
        DataType::LargeList(item) => DataType::LargeList(Arc::new(normalize(item))),
        // A map's entries and keys must stay non-null; its metadata is kept too.
        other => other.clone(),
    }
}

/// `batch` as a batch of `schema`: columns matched by name, missing ones null, types converted
/// (struct children by name, integers widened). A field of `schema` that an Iceberg table
/// named by [`undotted_name`](crate::schema::naming::undotted_name) (`a%2Eb`) takes the
/// column of the key it was made from (`a.b`) when `schema` has no field of that name beside it.
pub fn adapt_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let rows = batch.num_rows();
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            match find(schema.fields(), field.name(), |name| {
                batch.column_by_name(name)
            }) {
                Some(column) => adapt_array(column, field.data_type()),
                None => Ok(new_null_array(field.data_type(), rows)),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}

/// The column for the field `name` of `siblings`: `column(name)`, or for an undotted name the
/// column of its key, unless a sibling has that key as its own name.
pub(crate) fn find<'a>(
    siblings: &Fields,
    name: &str,
    column: impl Fn(&str) -> Option<&'a ArrayRef>,
) -> Option<&'a ArrayRef> {
    column(name).or_else(|| {
        let key = crate::schema::naming::dotted_key(name)?;
        if siblings.iter().any(|f| *f.name() == key) {
            return None;
        }
        column(&key)
    })
}

fn adapt_array(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    adapt_array_named(array, to, &|name| name.to_owned())
}

/// `array` (a column of a file that stores names its own way) as type `to`: as
/// [`adapt_batch`] converts a column, with the struct child for each field of `to` found
/// under `stored_name(field name)` (the `Athena` sink's files carry Glue's lower-case names,
/// see [`crate::sinks::files::glue`]).
pub fn adapt_array_named(
    array: &ArrayRef,
    to: &DataType,
    stored_name: &dyn Fn(&str) -> String,
) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == to {
        return Ok(array.clone());
    }
    match (array.data_type(), to) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let structs = array.as_struct();
            let children = fields
                .iter()
                .map(|field| {
                    match find(fields, field.name(), |name| {
                        structs.column_by_name(&stored_name(name))
                    }) {
                        Some(child) => adapt_array_named(child, field.data_type(), stored_name),
                        None => Ok(new_null_array(field.data_type(), structs.len())),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(StructArray::try_new_with_length(
                fields.clone(),
                children,
                structs.nulls().cloned(),
                structs.len(),
            )?))
        }
        (DataType::List(_), DataType::List(item)) => {
            let lists = array.as_list::<i32>();
            let values = adapt_array_named(lists.values(), item.data_type(), stored_name)?;
            Ok(Arc::new(ListArray::try_new(
                item.clone(),
                lists.offsets().clone(),
                values,
                lists.nulls().cloned(),
            )?))
        }
        (DataType::LargeList(_), DataType::LargeList(item)) => {
            let lists = array.as_list::<i64>();
            let values = adapt_array_named(lists.values(), item.data_type(), stored_name)?;
            Ok(Arc::new(LargeListArray::try_new(
                item.clone(),
                lists.offsets().clone(),
                values,
                lists.nulls().cloned(),
            )?))
        }
        // Integers widened, and anything else Arrow can convert. A value that does not fit
        // fails the query rather than turning into a silent null.
        _ => cast_with_options(
            array,
            to,
            &CastOptions {
                safe: false,
                ..CastOptions::default()
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{Int32Array, Int64Array, StringArray};

    use super::*;

    fn with_id(field: Field, id: &str) -> Field {
        field.with_metadata(HashMap::from([(
            "PARQUET:field_id".to_owned(),
            id.to_owned(),
        )]))
    }

    #[test]
    fn the_merged_schema_is_the_newest_plus_old_only_columns_all_nullable_without_metadata() {
        let old_struct = DataType::Struct(
            vec![
                Field::new("a", DataType::Int32, false),
                Field::new("gone", DataType::Utf8, true),
            ]
            .into(),
        );
        let new_struct = DataType::Struct(
            vec![
                Field::new("a", DataType::Int64, false),
                Field::new("b", DataType::Utf8, true),
            ]
            .into(),
        );
        let old = Arc::new(Schema::new(vec![
            with_id(Field::new("id", DataType::Int32, false), "1"),
            Field::new("dropped", DataType::Utf8, true),
            Field::new("s", old_struct, true),
        ]));
        let new = Arc::new(Schema::new(vec![
            with_id(Field::new("id", DataType::Int64, false), "1"),
            Field::new("s", new_struct, true),
            Field::new("added", DataType::Utf8, true),
        ]));
        let merged = merge_schemas(&[normalize_schema(&new), old]);
        let expected_struct = DataType::Struct(
            vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Utf8, true),
                Field::new("gone", DataType::Utf8, true),
            ]
            .into(),
        );
        let expected = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", expected_struct, true),
            Field::new("added", DataType::Utf8, true),
            Field::new("dropped", DataType::Utf8, true),
        ]);
        assert_eq!(merged.as_ref(), &expected);
    }

    fn normalize_schema(schema: &Schema) -> SchemaRef {
        Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .map(|field| normalize(field))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn an_old_batch_adapts_with_nulls_for_missing_columns_and_widened_integers() {
        let old = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                with_id(Field::new("id", DataType::Int32, false), "1"),
                Field::new("extra", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["x", "y"])),
            ],
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let adapted = adapt_batch(&old, &schema).unwrap();
        assert_eq!(adapted.schema(), schema);
        assert_eq!(
            adapted.column(0).as_ref(),
            &Int64Array::from(vec![1, 2]) as &dyn Array
        );
        assert_eq!(adapted.column(1).null_count(), 2);
    }
}
