//! The Hive layout of one WAL batch part: its rows grouped by partition, each group's
//! directory `{key=value}/...` escaped by the naming policy
//! ([`crate::schema::naming::partition_segment`]).
//!
//! - Each `batch_partition_fields` path is a partition key named after the path (`a.b` ->
//!   `a_b`); a row's value is the field's value as text (a missing or null field: `null`).
//!   For `Athena`, a top-level identity field is taken out of the file's columns (Glue refuses
//!   a column that is also a partition key, and Athena reads it from the partition); `File`
//!   and `S3` files keep it, so a file read on its own still has it (DuckDB's
//!   `hive_partitioning` takes it from the file or the path alike).
//! - With `batch_time_fields`, one more key `{first path}_{unit}` (`ts_day`): a row's value
//!   is the first of the fields that is not null in that row (a timestamp, a date, or unix
//!   seconds or milliseconds), formatted as `2024`, `2024-01`, `2024-01-02`, `2024-01-02-13`
//!   or `2024-01-02-13-05` by `batch_time_unit` (default `day`); none: `null`.
//!
//! - With `partition_allowed_values`, an identity key's value outside the list is
//!   `_other` ([`Layout::OTHER_PARTITION`]); the row keeps its value (only `File` and `S3`
//!   take the setting, and their files keep the column).
//! - `time_partition_prefix` names the time key in place of `{first path}_{unit}`.
//!
//! Every key exists in every table of the pipeline, so the partition keys of a table never
//! change. Groups come in key order, so the same rows always give the same groups.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, TimeUnit as ArrowTimeUnit};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use chrono::{DateTime, NaiveDate, Utc};

use crate::config::TimeUnit;
use crate::config::validate::Layout;
use crate::schema::naming::partition_segment;

/// A partition key of the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionKey {
    /// The key's name (`a_b`, `ts_day`), before the destination's column naming.
    pub name: String,
    /// What its value comes from.
    source: KeySource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySource {
    /// The value of this dot path; outside the allowed values (when there are any),
    /// [`Layout::OTHER_PARTITION`].
    Field(String, Vec<String>),
    /// The first non-null of these dot paths, truncated to the unit.
    Time(Vec<String>, TimeUnit),
}

/// The partition keys of a layout, in path order.
pub fn partition_keys(layout: &Layout) -> Vec<PartitionKey> {
    let mut keys: Vec<PartitionKey> = Vec::new();
    for path in &layout.partition_fields {
        let name = path.replace('.', "_");
        if !keys.iter().any(|k| k.name == name) {
            keys.push(PartitionKey {
                name,
                source: KeySource::Field(path.clone(), layout.allowed_values.clone()),
            });
        }
    }
    if let Some(first) = layout.time_fields.first() {
        let unit = layout.time_unit.unwrap_or(TimeUnit::Day);
        let unit_name = match unit {
            TimeUnit::Year => "year",
            TimeUnit::Month => "month",
            TimeUnit::Day => "day",
            TimeUnit::Hour => "hour",
            TimeUnit::Minute => "minute",
        };
        keys.push(PartitionKey {
            name: layout.time_key_name(first, unit_name),
            source: KeySource::Time(layout.time_fields.clone(), unit),
        });
    }
    keys
}

/// The top-level columns the keys take out of the files (identity keys of top-level fields).
pub fn partition_columns(keys: &[PartitionKey]) -> Vec<String> {
    keys.iter()
        .filter_map(|k| match &k.source {
            KeySource::Field(path, _) if !path.contains('.') => Some(path.clone()),
            _ => None,
        })
        .collect()
}

/// The rows of one partition.
#[derive(Debug, Clone)]
pub struct Group {
    /// Each key's value as text (`None`: null), in key order.
    pub values: Vec<Option<String>>,
    /// The directory: `{key=value}/...` escaped, empty without keys. `names` are the keys'
    /// names as the destination writes them.
    pub dir: String,
    /// The rows (the identity partition columns taken out, when asked).
    pub rows: RecordBatch,
}

/// `batch` split into its partitions (see the module docs), in key order; `names` are the
/// keys' names as directories show them; `drop_keys`: take the top-level identity columns out
/// of the rows.
pub fn split(
    batch: &RecordBatch,
    keys: &[PartitionKey],
    names: &[String],
    drop_keys: bool,
) -> Result<Vec<Group>, ArrowError> {
    let drop = if drop_keys {
        partition_columns(keys)
    } else {
        Vec::new()
    };
    let keep: Vec<usize> = (0..batch.num_columns())
        .filter(|&i| !drop.iter().any(|d| d == batch.schema().field(i).name()))
        .collect();
    let data = batch.project(&keep)?;
    if keys.is_empty() {
        return Ok(vec![Group {
            values: Vec::new(),
            dir: String::new(),
            rows: data,
        }]);
    }
    let columns: Vec<Vec<Option<String>>> = keys
        .iter()
        .map(|k| key_values(batch, k))
        .collect::<Result<_, _>>()?;
    let mut groups: BTreeMap<Vec<Option<String>>, Vec<u32>> = BTreeMap::new();
    for row in 0..batch.num_rows() {
        let key: Vec<Option<String>> = columns.iter().map(|c| c[row].clone()).collect();
        groups.entry(key).or_default().push(row as u32);
    }
    let mut out = Vec::with_capacity(groups.len());
    for (values, rows) in groups {
        let indices = UInt32Array::from(rows);
        let dir = names
            .iter()
            .zip(&values)
            .map(|(name, value)| partition_segment(name, value.as_deref()))
            .collect::<Vec<_>>()
            .join("/");
        out.push(Group {
            rows: take_record_batch(&data, &indices)?,
            values,
            dir,
        });
    }
    Ok(out)
}

/// Each row's value of key `k`.
fn key_values(batch: &RecordBatch, k: &PartitionKey) -> Result<Vec<Option<String>>, ArrowError> {
    let n = batch.num_rows();
    match &k.source {
        KeySource::Field(path, allowed) => match column_at(batch, path) {
            None => Ok(vec![None; n]),
            Some(column) => {
                let options = FormatOptions::default();
                let f = ArrayFormatter::try_new(column.as_ref(), &options)?;
                Ok((0..n)
                    .map(|i| {
                        column.is_valid(i).then(|| {
                            let value = f.value(i).to_string();
                            if allowed.is_empty() || allowed.contains(&value) {
                                value
                            } else {
                                Layout::OTHER_PARTITION.to_owned()
                            }
                        })
                    })
                    .collect())
            }
        },
        KeySource::Time(paths, unit) => {
            let columns: Vec<ArrayRef> = paths.iter().filter_map(|p| column_at(batch, p)).collect();
            Ok((0..n)
                .map(|i| {
                    columns
                        .iter()
                        .find_map(|c| instant(c.as_ref(), i))
                        .map(|t| format_time(t, *unit))
                })
                .collect())
        }
    }
}

/// The instant of row `i` of a time column: a timestamp, a date, or unix seconds (or
/// milliseconds, for values past the year 5138 in seconds) as an integer.
fn instant(column: &dyn Array, i: usize) -> Option<DateTime<Utc>> {
    use arrow::array::{
        Date32Array, Int64Array, TimestampMicrosecondArray, TimestampMillisecondArray,
        TimestampNanosecondArray, TimestampSecondArray,
    };
    if !column.is_valid(i) {
        return None;
    }
    let any = column.as_any();
    match column.data_type() {
        DataType::Timestamp(ArrowTimeUnit::Second, _) => any
            .downcast_ref::<TimestampSecondArray>()
            .and_then(|a| DateTime::from_timestamp(a.value(i), 0)),
        DataType::Timestamp(ArrowTimeUnit::Millisecond, _) => any
            .downcast_ref::<TimestampMillisecondArray>()
            .and_then(|a| DateTime::from_timestamp_millis(a.value(i))),
        DataType::Timestamp(ArrowTimeUnit::Microsecond, _) => any
            .downcast_ref::<TimestampMicrosecondArray>()
            .and_then(|a| DateTime::from_timestamp_micros(a.value(i))),
        DataType::Timestamp(ArrowTimeUnit::Nanosecond, _) => any
            .downcast_ref::<TimestampNanosecondArray>()
            .map(|a| DateTime::from_timestamp_nanos(a.value(i))),
        DataType::Date32 => any.downcast_ref::<Date32Array>().and_then(|a| {
            NaiveDate::from_num_days_from_ce_opt(a.value(i) + 719_163)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|d| d.and_utc())
        }),
        DataType::Int64 => any.downcast_ref::<Int64Array>().and_then(|a| {
            let v = a.value(i);
            if v.abs() >= 100_000_000_000 {
                DateTime::from_timestamp_millis(v)
            } else {
                DateTime::from_timestamp(v, 0)
            }
        }),
        _ => None,
    }
}

fn format_time(t: DateTime<Utc>, unit: TimeUnit) -> String {
    let pattern = match unit {
        TimeUnit::Year => "%Y",
        TimeUnit::Month => "%Y-%m",
        TimeUnit::Day => "%Y-%m-%d",
        TimeUnit::Hour => "%Y-%m-%d-%H",
        TimeUnit::Minute => "%Y-%m-%d-%H-%M",
    };
    t.format(pattern).to_string()
}

/// The column at a dot path (through structs; a null struct hides its children).
fn column_at(batch: &RecordBatch, path: &str) -> Option<ArrayRef> {
    let mut parts = path.split('.');
    let mut column = Arc::clone(batch.column_by_name(parts.next()?)?);
    for part in parts {
        let structs = column.as_any().downcast_ref::<StructArray>()?;
        let child = Arc::clone(structs.column_by_name(part)?);
        column = match structs.nulls() {
            Some(nulls) => {
                let data = child.to_data();
                let merged = arrow::buffer::NullBuffer::union(Some(nulls), data.nulls());
                arrow::array::make_array(data.into_builder().nulls(merged).build().ok()?)
            }
            None => child,
        };
    }
    Some(column)
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn rows_group_by_escaped_values_and_the_identity_column_leaves_the_file() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("region", DataType::Utf8, true),
                Field::new(
                    "ts",
                    DataType::Timestamp(ArrowTimeUnit::Microsecond, Some("UTC".into())),
                    true,
                ),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![
                    Some("eu/west"),
                    None,
                    Some("eu/west"),
                ])),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![
                        Some(1_700_000_000_000_000),
                        Some(1_700_000_000_000_000),
                        None,
                    ])
                    .with_timezone("UTC"),
                ),
            ],
        )
        .unwrap();
        let layout = Layout {
            partition_fields: vec!["region".into()],
            time_fields: vec!["ts".into()],
            ..Layout::default()
        };
        let keys = partition_keys(&layout);
        let names: Vec<String> = keys.iter().map(|k| k.name.clone()).collect();
        assert_eq!(names, ["region", "ts_day"]);
        let groups = split(&batch, &keys, &names, true).unwrap();
        let kept = split(&batch, &keys, &names, false).unwrap();
        assert!(kept[0].rows.column_by_name("region").is_some());
        let dirs: Vec<(&str, usize)> = groups
            .iter()
            .map(|g| (g.dir.as_str(), g.rows.num_rows()))
            .collect();
        assert_eq!(
            dirs,
            [
                ("region=null/ts_day=2023-11-14", 1),
                ("region=eu%2Fwest/ts_day=null", 1),
                ("region=eu%2Fwest/ts_day=2023-11-14", 1),
            ]
        );
        assert!(groups[0].rows.column_by_name("region").is_none());
    }

    #[test]
    fn values_outside_the_allowed_ones_share_one_partition_and_keep_their_value() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("region", DataType::Utf8, true),
                Field::new("at", DataType::Int64, true),
            ])),
            vec![
                Arc::new(StringArray::from(vec![
                    Some("eu"),
                    Some("../../etc"),
                    Some("us"),
                    Some("mars"),
                    None,
                ])),
                Arc::new(Int64Array::from(vec![Some(1_700_000_000); 5])),
            ],
        )
        .unwrap();
        let layout = Layout {
            partition_fields: vec!["region".into()],
            time_fields: vec!["at".into()],
            allowed_values: vec!["eu".into(), "us".into()],
            time_key: Some("dt".into()),
            ..Layout::default()
        };
        let keys = partition_keys(&layout);
        let names: Vec<String> = keys.iter().map(|k| k.name.clone()).collect();
        assert_eq!(names, ["region", "dt"]);
        let groups = split(&batch, &keys, &names, false).unwrap();
        let dirs: Vec<(&str, usize)> = groups
            .iter()
            .map(|g| (g.dir.as_str(), g.rows.num_rows()))
            .collect();
        assert_eq!(
            dirs,
            [
                ("region=null/dt=2023-11-14", 1),
                ("region=_other/dt=2023-11-14", 2),
                ("region=eu/dt=2023-11-14", 1),
                ("region=us/dt=2023-11-14", 1),
            ]
        );
        // The rows in `_other` keep the values they had.
        let other = groups[1]
            .rows
            .column_by_name("region")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(other.value(0), "../../etc");
        assert_eq!(other.value(1), "mars");
    }
}
