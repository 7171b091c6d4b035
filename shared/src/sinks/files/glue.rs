//! The Glue side of the `Athena` destination: one Hive table per namespace
//! (`EXTERNAL_TABLE`, Parquet SerDe), its columns from our schema, its partitions registered
//! with `BatchCreatePartition`.
//!
//! Names follow Athena's rules through the naming policy
//! ([`crate::schema::naming::glue_column_name`], [`crate::schema::naming::table_name`]): the
//! Parquet files of an `Athena` sink carry the same lower-case names ([`glue_batch`]), since
//! Athena's Parquet SerDe finds columns by name; a renamed column keeps its original key as
//! the Glue column comment.
//!
//! Partitions are registered explicitly, not by partition projection: projection needs every
//! key's value range or enumeration up front, and identity partitions on data values
//! (`region=eu`) have none. Each delivery registers the partitions its files created (100 per
//! request, Glue's limit); one that already exists is left as it is.

use std::sync::Arc;

use arrow::array::ArrayData;
use arrow::array::{ArrayRef, RecordBatch, make_array};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use arrow::error::ArrowError;
use aws_sdk_glue::types::{Column, PartitionInput, SerDeInfo, StorageDescriptor, TableInput};

use crate::aws::{Aws, SdkFailure};
use crate::schema::naming::glue_column_name;
use crate::sinks::SinkError;

/// A partition as Glue has it registered: its values in key order and its directory URI.
pub type RegisteredPartition = (Vec<String>, String);

const INPUT_FORMAT: &str = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat";
const OUTPUT_FORMAT: &str = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat";
const SERDE: &str = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe";
/// Glue's limit of partitions per `BatchCreatePartition`.
const PARTITIONS_PER_REQUEST: usize = 100;

/// An Arrow type as a Hive type string (`bigint`, `struct<a:int>`, `array<string>`), field
/// names by [`glue_column_name`].
pub fn hive_type(t: &DataType) -> String {
    match t {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 => "tinyint".into(),
        DataType::Int16 => "smallint".into(),
        DataType::Int32 | DataType::UInt8 | DataType::UInt16 => "int".into(),
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "bigint".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("decimal({p},{s})"),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Timestamp(_, _) => "timestamp".into(),
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_) => "binary".into(),
        DataType::Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f| format!(
                    "{}:{}",
                    glue_column_name(f.name()),
                    hive_type(f.data_type())
                ))
                .collect::<Vec<_>>()
                .join(",")
        ),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("array<{}>", hive_type(f.data_type()))
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "map<{},{}>",
                hive_type(kv[0].data_type()),
                hive_type(kv[1].data_type())
            ),
            _ => "string".into(),
        },
        _ => "string".into(),
    }
}

/// `schema` with every column and struct field renamed by [`glue_column_name`] (list items and
/// map entries keep their names).
pub fn glue_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| glue_field(f, true))
            .collect::<Vec<_>>(),
    ))
}

fn glue_field(f: &Field, rename: bool) -> Field {
    let name = if rename {
        glue_column_name(f.name())
    } else {
        f.name().clone()
    };
    Field::new(name, glue_type(f.data_type()), f.is_nullable())
}

fn glue_type(t: &DataType) -> DataType {
    match t {
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| glue_field(f, true))
                .collect::<Fields>(),
        ),
        DataType::List(f) => DataType::List(Arc::new(glue_field(f, false))),
        DataType::LargeList(f) => DataType::LargeList(Arc::new(glue_field(f, false))),
        DataType::Map(f, sorted) => DataType::Map(Arc::new(glue_field(f, false)), *sorted),
        other => other.clone(),
    }
}

/// `batch` under [`glue_schema`] names (the same values).
pub fn glue_batch(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let schema = glue_schema(&batch.schema());
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| retype(c.to_data(), f.data_type()).map(make_array))
        .collect::<Result<_, _>>()?;
    RecordBatch::try_new(schema, columns)
}

/// `data` with its type (and its children's) replaced by `to`, which differs only in names.
fn retype(data: ArrayData, to: &DataType) -> Result<ArrayData, ArrowError> {
    let children: Vec<DataType> = match to {
        DataType::Struct(fields) => fields.iter().map(|f| f.data_type().clone()).collect(),
        DataType::List(f) | DataType::LargeList(f) | DataType::Map(f, _) => {
            vec![f.data_type().clone()]
        }
        _ => Vec::new(),
    };
    if children.is_empty() {
        return Ok(data);
    }
    let child_data = data
        .child_data()
        .iter()
        .zip(children.iter())
        .map(|(c, t)| retype(c.clone(), t))
        .collect::<Result<Vec<_>, _>>()?;
    data.into_builder()
        .data_type(to.clone())
        .child_data(child_data)
        .build()
}

/// A column of a Glue table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiveColumn {
    /// The Glue name.
    pub name: String,
    /// The Hive type.
    pub type_name: String,
    /// The original key, when the name differs.
    pub comment: Option<String>,
}

/// The Glue columns of a namespace's Arrow schema (its original keys), without the columns
/// that are partition keys.
pub fn hive_columns(schema: &Schema, partition_columns: &[String]) -> Vec<HiveColumn> {
    schema
        .fields()
        .iter()
        .filter(|f| !partition_columns.iter().any(|p| p == f.name()))
        .map(|f| {
            let name = glue_column_name(f.name());
            HiveColumn {
                comment: (name != *f.name()).then(|| f.name().clone()),
                type_name: hive_type(f.data_type()),
                name,
            }
        })
        .collect()
}

/// Glue, for the Hive tables of one database.
#[derive(Debug, Clone)]
pub struct HiveGlue {
    aws: Aws,
    client: aws_sdk_glue::Client,
    catalog_id: Option<String>,
    database: String,
    /// `discovery_cache_ttl_secs`: how long [`KNOWN`] is trusted for this sink's tables.
    cache_ttl: Option<std::time::Duration>,
}

/// The columns (name and Hive type) each Glue table was last seen or made with, and when,
/// for the whole process
/// (the `sync` loop's passes and a warm Lambda's invocations open their sinks anew). Keyed by
/// region, catalog, database and table.
type Known = std::collections::HashMap<String, (Vec<(String, String)>, std::time::Instant)>;
static KNOWN: std::sync::OnceLock<std::sync::Mutex<Known>> = std::sync::OnceLock::new();

/// Whether a Glue column of Hive type `old` is widened to `new` for the data's sake: `int`
/// to `bigint`, and `decimal(p,s)` to `decimal(q,s)` with `q > p` (the evolutions the
/// schema makes; a table wider than the data is left as it is).
fn widens(old: &str, new: &str) -> bool {
    let decimal = |t: &str| crate::schema::FieldType::precision_scale(t, "decimal");
    match (decimal(old), decimal(new)) {
        (Some((p, s)), Some((q, t))) => s == t && q > p,
        _ => old == "int" && new == "bigint",
    }
}

fn known() -> std::sync::MutexGuard<'static, Known> {
    KNOWN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn failure<E, R>(
    op: &'static str,
    target: String,
) -> impl FnOnce(aws_sdk_glue::error::SdkError<E, R>) -> SinkError
where
    E: aws_sdk_glue::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + crate::aws::HasStatus,
{
    move |e| SinkError::ObjectStore {
        op,
        uri: target,
        failure: Box::new(SdkFailure::from_sdk(&e)),
    }
}

fn code_of<E, R>(e: &aws_sdk_glue::error::SdkError<E, R>) -> Option<&str>
where
    E: aws_sdk_glue::error::ProvideErrorMetadata,
{
    e.as_service_error().and_then(|s| s.code())
}

impl HiveGlue {
    /// Glue of `aws`'s region, database `database`, in catalog `catalog_id` (default: the
    /// caller's account).
    pub fn new(aws: &Aws, catalog_id: Option<String>, database: &str) -> Self {
        HiveGlue {
            aws: aws.clone(),
            client: aws.glue(),
            catalog_id,
            database: database.to_owned(),
            cache_ttl: None,
        }
    }

    /// Trust a table's definition this long once read or written (`None`: read it at every
    /// delivery), so a delivery whose columns the table is known to have sends no Glue request.
    pub fn with_cache_ttl(mut self, ttl: Option<std::time::Duration>) -> Self {
        self.cache_ttl = ttl;
        self
    }

    fn known_key(&self, table: &str) -> String {
        format!(
            "{}|{}|{}|{table}",
            self.aws.region().unwrap_or_default(),
            self.catalog_id.as_deref().unwrap_or_default(),
            self.database
        )
    }

    /// Whether the table is known, within the TTL, to have every one of `columns`, each
    /// with its type or a wider one.
    fn known_to_have(&self, table: &str, columns: &[HiveColumn]) -> bool {
        let Some(ttl) = self.cache_ttl else {
            return false;
        };
        known()
            .get(&self.known_key(table))
            .is_some_and(|(known, at)| {
                at.elapsed() < ttl
                    && columns.iter().all(|c| {
                        known.iter().any(|(name, type_name)| {
                            *name == c.name
                                && (*type_name == c.type_name || widens(&c.type_name, type_name))
                        })
                    })
            })
    }

    fn remember(&self, table: &str, columns: &[HiveColumn]) {
        if self.cache_ttl.is_some() {
            known().insert(
                self.known_key(table),
                (
                    columns
                        .iter()
                        .map(|c| (c.name.clone(), c.type_name.clone()))
                        .collect(),
                    std::time::Instant::now(),
                ),
            );
        }
    }

    fn target(&self, table: &str) -> String {
        format!("Glue table {}.{table}", self.database)
    }

    /// Create the database when missing.
    pub fn ensure_database(&self) -> Result<(), SinkError> {
        let get = self
            .client
            .get_database()
            .set_catalog_id(self.catalog_id.clone())
            .name(&self.database);
        let create = self
            .client
            .create_database()
            .set_catalog_id(self.catalog_id.clone())
            .database_input(
                aws_sdk_glue::types::DatabaseInput::builder()
                    .name(&self.database)
                    .build()
                    .map_err(|e| SinkError::Config {
                        sink: self.database.clone(),
                        message: e.to_string(),
                    })?,
            );
        let target = format!("Glue database {}", self.database);
        self.aws.block_on(async move {
            match get.send().await {
                Ok(_) => return Ok(()),
                Err(e) if code_of(&e) == Some("EntityNotFoundException") => {}
                Err(e) => return Err(failure("read", target)(e)),
            }
            match create.send().await {
                Ok(_) => Ok(()),
                Err(e) if code_of(&e) == Some("AlreadyExistsException") => Ok(()),
                Err(e) => Err(failure("create", target)(e)),
            }
        })
    }

    /// Table `table` as Glue has it, or `None` when it does not exist.
    pub(crate) fn get_table(
        &self,
        table: &str,
    ) -> Result<Option<aws_sdk_glue::types::Table>, SinkError> {
        let get = self
            .client
            .get_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(&self.database)
            .name(table);
        let target = self.target(table);
        self.aws.block_on(async move {
            match get.send().await {
                Ok(out) => Ok(out.table().cloned()),
                Err(e) if code_of(&e) == Some("EntityNotFoundException") => Ok(None),
                Err(e) => Err(failure("read", target)(e)),
            }
        })
    }

    fn table_input(
        &self,
        table: &str,
        location: &str,
        columns: &[HiveColumn],
        partition_keys: &[String],
    ) -> Result<TableInput, SinkError> {
        let build = |e: aws_sdk_glue::error::BuildError| SinkError::Config {
            sink: self.target(table),
            message: e.to_string(),
        };
        let column = |c: &HiveColumn| {
            Column::builder()
                .name(&c.name)
                .r#type(&c.type_name)
                .set_comment(c.comment.clone())
                .build()
                .map_err(build)
        };
        let columns = columns.iter().map(column).collect::<Result<Vec<_>, _>>()?;
        let keys = partition_keys
            .iter()
            .map(|k| {
                column(&HiveColumn {
                    name: k.clone(),
                    type_name: "string".into(),
                    comment: None,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        TableInput::builder()
            .name(table)
            .table_type("EXTERNAL_TABLE")
            .parameters("EXTERNAL", "TRUE")
            .parameters("classification", "parquet")
            .parameters("parquet.compression", "ZSTD")
            .storage_descriptor(storage(location, columns))
            .set_partition_keys(Some(keys))
            .build()
            .map_err(build)
    }

    /// Create table `table` at `location`, or add the columns it lacks (never removing or
    /// retyping one). `SkipArchive` is set: Glue keeps no version per update.
    pub fn ensure_table(
        &self,
        table: &str,
        location: &str,
        columns: &[HiveColumn],
        partition_keys: &[String],
    ) -> Result<(), SinkError> {
        let target = self.target(table);
        if self.known_to_have(table, columns) {
            return Ok(());
        }
        let Some(current) = self.get_table(table)? else {
            let input = self.table_input(table, location, columns, partition_keys)?;
            let create = self
                .client
                .create_table()
                .set_catalog_id(self.catalog_id.clone())
                .database_name(&self.database)
                .table_input(input);
            return self.aws.block_on(async move {
                match create.send().await {
                    Ok(_) => {
                        self.remember(table, columns);
                        Ok(())
                    }
                    // Created by another writer meanwhile: the next delivery adds columns.
                    Err(e) if code_of(&e) == Some("AlreadyExistsException") => Ok(()),
                    Err(e) => Err(failure("create", target)(e)),
                }
            });
        };
        let mut all: Vec<HiveColumn> = current
            .storage_descriptor()
            .map(|sd| {
                sd.columns()
                    .iter()
                    .map(|c| HiveColumn {
                        name: c.name().to_owned(),
                        type_name: c.r#type().unwrap_or("string").to_owned(),
                        comment: c.comment().map(str::to_owned),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let missing: Vec<HiveColumn> = columns
            .iter()
            .filter(|c| !all.iter().any(|a| a.name == c.name))
            .cloned()
            .collect();
        // Columns the data has widened (`int` -> `bigint`, a decimal's precision).
        let mut widened = false;
        for column in &mut all {
            if let Some(wider) = columns
                .iter()
                .find(|c| c.name == column.name && widens(&column.type_name, &c.type_name))
            {
                column.type_name.clone_from(&wider.type_name);
                widened = true;
            }
        }
        if missing.is_empty() && !widened {
            self.remember(table, &all);
            return Ok(());
        }
        all.extend(missing);
        let keys: Vec<String> = current
            .partition_keys()
            .iter()
            .map(|k| k.name().to_owned())
            .collect();
        let input = self.table_input(table, location, &all, &keys)?;
        let update = self
            .client
            .update_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(&self.database)
            .skip_archive(true)
            .table_input(input);
        self.aws
            .block_on(async move { update.send().await })
            .map_err(failure("update", target))?;
        self.remember(table, &all);
        Ok(())
    }

    /// Register the partitions (`values` in key order, the directory URI) of `table`; ones
    /// that exist are left as they are.
    pub fn add_partitions(
        &self,
        table: &str,
        columns: &[HiveColumn],
        partitions: &[(Vec<String>, String)],
    ) -> Result<u64, SinkError> {
        let columns: Vec<Column> = columns
            .iter()
            .filter_map(|c| {
                Column::builder()
                    .name(&c.name)
                    .r#type(&c.type_name)
                    .set_comment(c.comment.clone())
                    .build()
                    .ok()
            })
            .collect();
        let mut added = 0;
        for chunk in partitions.chunks(PARTITIONS_PER_REQUEST) {
            let inputs: Vec<PartitionInput> = chunk
                .iter()
                .map(|(values, location)| {
                    PartitionInput::builder()
                        .set_values(Some(values.clone()))
                        .storage_descriptor(storage(location, columns.clone()))
                        .build()
                })
                .collect();
            let request = self
                .client
                .batch_create_partition()
                .set_catalog_id(self.catalog_id.clone())
                .database_name(&self.database)
                .table_name(table)
                .set_partition_input_list(Some(inputs));
            let target = self.target(table);
            let out = self
                .aws
                .block_on(async move { request.send().await })
                .map_err(failure("add partitions to", target.clone()))?;
            for e in out.errors() {
                let code = e.error_detail().and_then(|d| d.error_code()).unwrap_or("");
                if code != "AlreadyExistsException" {
                    return Err(SinkError::ObjectStore {
                        op: "add partitions to",
                        uri: target.clone(),
                        failure: Box::new(SdkFailure {
                            code: code.to_owned(),
                            status: None,
                            message: e
                                .error_detail()
                                .and_then(|d| d.error_message())
                                .unwrap_or("")
                                .to_owned(),
                            retryable: crate::aws::is_retryable_code(code),
                        }),
                    });
                }
            }
            added += (chunk.len() - out.errors().len()) as u64;
        }
        Ok(added)
    }
    /// The registered partitions of `table`: each one's values (in key order) and its
    /// directory URI, as `BatchCreatePartition` was given them. Read page by page
    /// (`GetPartitions`); an empty list when the table does not exist.
    pub fn partitions(&self, table: &str) -> Result<Vec<RegisteredPartition>, SinkError> {
        let target = self.target(table);
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let request = self
                .client
                .get_partitions()
                .set_catalog_id(self.catalog_id.clone())
                .database_name(&self.database)
                .table_name(table)
                .set_next_token(next.take());
            let target = target.clone();
            let page = self.aws.block_on(async move {
                match request.send().await {
                    Ok(page) => Ok(Some(page)),
                    Err(e) if code_of(&e) == Some("EntityNotFoundException") => Ok(None),
                    Err(e) => Err(failure("list the partitions of", target)(e)),
                }
            })?;
            let Some(page) = page else {
                return Ok(out);
            };
            for partition in page.partitions() {
                let location = partition
                    .storage_descriptor()
                    .and_then(|s| s.location())
                    .unwrap_or_default();
                out.push((partition.values().to_vec(), location.to_owned()));
            }
            match page.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_owned()),
                _ => return Ok(out),
            }
        }
    }
}

fn storage(location: &str, columns: Vec<Column>) -> StorageDescriptor {
    StorageDescriptor::builder()
        .location(location)
        .input_format(INPUT_FORMAT)
        .output_format(OUTPUT_FORMAT)
        .serde_info(
            SerDeInfo::builder()
                .serialization_library(SERDE)
                .parameters("serialization.format", "1")
                .build(),
        )
        .set_columns(Some(columns))
        .build()
}
