//! How rows are laid out in a table: the partition spec (from `transform.batch_partition_fields`,
//! `batch_time_fields` and `batch_time_unit`) and the order of rows (`batch_order_fields`).
//!
//! - Each `batch_partition_fields` path (dots for nested fields) that the table has, with a
//!   primitive type, becomes an identity partition field named after the path (`a.b` ->
//!   `a_b`).
//! - The first `batch_time_fields` path the table has with a timestamp or date type becomes a
//!   time partition field, `{path}_{unit}` (or `time_partition_prefix`), with the transform of `batch_time_unit` (default
//!   `day`). Iceberg has no minute transform: `minute` partitions by hour, with a warning.
//! - A field the table does not have yet is skipped; once a later schema has it, the table's
//!   partition spec evolves (a new default spec; files written before keep theirs, as Iceberg
//!   allows).
//! - Rows are sorted by the `batch_order_fields` the table has (nulls last) within each WAL
//!   batch as it is written, so a data file holds sorted runs of at most one batch: enough
//!   for row-group statistics to prune, without holding a whole file in memory. The table
//!   declares no sort order, since a file is not sorted as a whole.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow::compute::{SortColumn, SortOptions, lexsort_to_indices, take_record_batch};
use arrow::error::ArrowError;
use iceberg::spec::{
    PartitionSpec, PrimitiveType, Schema as IcebergSchema, Transform, Type, UnboundPartitionSpec,
};

use crate::config::TimeUnit;
/// The layout settings of a pipeline (resolved by validation from its `transform`).
pub use crate::config::validate::Layout;

impl Layout {
    /// The partition spec for a table with `schema`, and warnings to log (fields skipped).
    pub fn partition_spec(
        &self,
        schema: &IcebergSchema,
    ) -> iceberg::Result<(UnboundPartitionSpec, Vec<String>)> {
        let mut builder = UnboundPartitionSpec::builder();
        let mut warnings = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for path in &self.partition_fields {
            match schema.field_by_name(path) {
                Some(field) if matches!(*field.field_type, Type::Primitive(_)) => {
                    let name = path.replace('.', "_");
                    if !names.contains(&name) {
                        builder =
                            builder.add_partition_field(field.id, &name, Transform::Identity)?;
                        names.push(name);
                    }
                }
                Some(_) => warnings.push(format!(
                    "batch_partition_fields: `{path}` is not a scalar column; it is not a partition"
                )),
                None => {}
            }
        }
        let unit = self.time_unit.unwrap_or(TimeUnit::Day);
        let (transform, unit_name) = match unit {
            TimeUnit::Year => (Transform::Year, "year"),
            TimeUnit::Month => (Transform::Month, "month"),
            TimeUnit::Day => (Transform::Day, "day"),
            TimeUnit::Hour => (Transform::Hour, "hour"),
            TimeUnit::Minute => {
                warnings.push(
                    "batch_time_unit: Iceberg has no minute partitions; partitioning by hour"
                        .to_owned(),
                );
                (Transform::Hour, "hour")
            }
        };
        let time = self.time_fields.iter().find_map(|path| {
            let field = schema.field_by_name(path)?;
            let usable = match *field.field_type {
                Type::Primitive(PrimitiveType::Timestamptz | PrimitiveType::Timestamp) => true,
                Type::Primitive(PrimitiveType::Date) => !matches!(transform, Transform::Hour),
                _ => false,
            };
            usable.then(|| (path, field.id))
        });
        if let Some((path, id)) = time {
            let name = self.time_key_name(path, unit_name);
            builder = builder.add_partition_field(id, name, transform)?;
        }
        Ok((builder.build(), warnings))
    }

    /// Rows of `batch` sorted by the order fields it has (all of them missing: unchanged).
    pub fn sort(&self, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
        let columns: Vec<SortColumn> = self
            .order_fields
            .iter()
            .filter_map(|path| column_at(batch, path))
            .map(|values| SortColumn {
                values,
                options: Some(SortOptions {
                    descending: false,
                    nulls_first: false,
                }),
            })
            .collect();
        if columns.is_empty() || batch.num_rows() < 2 {
            return Ok(batch.clone());
        }
        let indices = lexsort_to_indices(&columns, None)?;
        take_record_batch(batch, &indices)
    }

    /// Whether rows are sorted at all.
    pub fn sorts(&self) -> bool {
        !self.order_fields.is_empty()
    }
}

/// The column at a dot path (through structs); `None` when missing or not sortable.
fn column_at(batch: &RecordBatch, path: &str) -> Option<ArrayRef> {
    let mut parts = path.split('.');
    let mut column = Arc::clone(batch.column_by_name(parts.next()?)?);
    for part in parts {
        let structs = column.as_any().downcast_ref::<StructArray>()?;
        let child = Arc::clone(structs.column_by_name(part)?);
        // A null struct hides its children's values.
        column = match structs.nulls() {
            Some(nulls) if nulls.null_count() > 0 => {
                let merged = arrow::buffer::NullBuffer::union(Some(nulls), child.nulls());
                arrow::array::make_array(child.to_data().into_builder().nulls(merged).build().ok()?)
            }
            _ => child,
        };
    }
    (!column.data_type().is_nested()).then_some(column)
}

/// Whether `current` partitions exactly as `desired` does.
pub fn same_spec(current: &PartitionSpec, desired: &UnboundPartitionSpec) -> bool {
    current.fields().len() == desired.fields().len()
        && current.fields().iter().zip(desired.fields()).all(|(a, b)| {
            a.source_id == b.source_id && a.transform == b.transform && a.name == b.name
        })
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use iceberg::spec::NestedField;

    use super::*;

    fn table_schema() -> IcebergSchema {
        IcebergSchema::builder()
            .with_fields(vec![
                Arc::new(NestedField::optional(
                    1,
                    "city",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "at",
                    Type::Primitive(PrimitiveType::Timestamptz),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "s",
                    Type::Struct(iceberg::spec::StructType::new(vec![Arc::new(
                        NestedField::optional(4, "zone", Type::Primitive(PrimitiveType::Int)),
                    )])),
                )),
            ])
            .build()
            .unwrap()
    }

    #[test]
    fn the_spec_takes_present_fields_nested_paths_and_the_first_usable_time_field() {
        let layout = Layout {
            partition_fields: vec!["city".into(), "s.zone".into(), "missing".into(), "s".into()],
            time_fields: vec!["nope".into(), "city".into(), "at".into()],
            time_unit: Some(TimeUnit::Month),
            order_fields: vec![],
            ..Layout::default()
        };
        let (spec, warnings) = layout.partition_spec(&table_schema()).unwrap();
        let fields: Vec<_> = spec
            .fields()
            .iter()
            .map(|f| (f.source_id, f.name.clone(), f.transform))
            .collect();
        assert_eq!(
            fields,
            vec![
                (1, "city".to_owned(), Transform::Identity),
                (4, "s_zone".to_owned(), Transform::Identity),
                (2, "at_month".to_owned(), Transform::Month),
            ]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let (none, _) = Layout::default().partition_spec(&table_schema()).unwrap();
        assert!(none.fields().is_empty());
    }

    #[test]
    fn rows_sort_by_present_order_fields_with_nulls_last() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("city", DataType::Utf8, true),
                Field::new("n", DataType::Int32, true),
            ])),
            vec![
                Arc::new(StringArray::from(vec![
                    Some("b"),
                    None,
                    Some("a"),
                    Some("b"),
                ])),
                Arc::new(Int32Array::from(vec![2, 9, 5, 1])),
            ],
        )
        .unwrap();
        let layout = Layout {
            order_fields: vec!["missing".into(), "city".into(), "n".into()],
            ..Layout::default()
        };
        let sorted = layout.sort(&batch).unwrap();
        let n = sorted
            .column(1)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(n.values().to_vec(), vec![5, 1, 2, 9]);
    }
}
