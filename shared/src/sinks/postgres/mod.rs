//! The `Postgres` destination: one PostgreSQL table per namespace, exactly once by WAL batch
//! id.
//!
//! # Tables
//!
//! A namespace's table is named by the naming policy ([`crate::schema::naming::table_name`],
//! then [`crate::schema::naming::postgres_name`] for PostgreSQL's 63-byte limit), in the
//! sink's `schema`; columns keep the schema's field names exactly when they fit (see
//! [`crate::schema::naming::postgres_name`]). Every identifier is quoted. A table is created
//! from the namespace's schema and evolved with it: a new field is an `ADD COLUMN`, a column
//! the data needs wider is widened (`integer` to `bigint`, either to `double precision`), and
//! any other difference is an error naming the table and the column.
//!
//! | schema type | PostgreSQL |
//! | --- | --- |
//! | `boolean` | `boolean` |
//! | `int` | `integer` |
//! | `long` | `bigint` |
//! | `double` | `double precision` |
//! | `date` | `date` |
//! | `timestamp`, `timestamp_ms` | `timestamp with time zone` |
//! | `string` | `text` |
//! | `struct`, `list` | `jsonb` (the value as JSON; a null field is left out) |
//!
//! # Exactly once
//!
//! One delivery ([`Sink::write`]) is one transaction: under a transaction-scoped advisory lock
//! on the pipeline, it creates or evolves the tables, reads each table's landed id from
//! `_skippr_batches` (`pipeline`, `table_name`, `last_batch`), binary-`COPY`s the rows of the
//! batches above it into a temporary staging table per table, inserts them into the table
//! with one `INSERT ... SELECT`, records the delivery's last batch id for every table written,
//! and commits. A crash anywhere before the commit leaves nothing; after it, the batches are
//! recorded with their rows, and [`Sink::landed`] makes the retried delivery skip them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use futures::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient};

mod values;

use self::values::{Value, column_values, nested_json};
use super::{CommitCheck, Delivered, ReadBatch, Sink, SinkError};
use crate::config::WritePolicy;
use crate::config::connectors::{PostgresSinkConfig, PostgresSourceConfig, SourceConnector};
use crate::config::validate::{ValidatedPipeline, WritePolicies};
use crate::schema::naming::{postgres_name, table_name};
use crate::schema::{Field, FieldType, PipelineSchema};
use crate::sources::SourceError;
use crate::sources::postgres::PostgresSourceOptions;
use crate::sources::postgres::reader::{connect, ident, pg_error};
use crate::wal::BatchMeta;

/// The bookkeeping table: per pipeline and table, the last WAL batch id landed.
pub const BATCHES_TABLE: &str = "_skippr_batches";

/// A `Postgres` destination (see the module docs).
pub struct PostgresSink {
    /// The sink's name in `data_sinks`, for messages.
    name: String,
    /// The connection (secrets inside; never printed).
    options: PostgresSourceOptions,
    /// The schema tables go to.
    schema: String,
    /// The pipeline's identity (its state partition), the key of `_skippr_batches`.
    pipeline: String,
    /// The pipeline's write policies (`append` unless declared).
    policies: WritePolicies,
    /// The Postgres source whose tables' primary keys are the merge keys
    /// ([`WritePolicies::source_keys`]).
    key_source: Option<PostgresSourceOptions>,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSink")
            .field("name", &self.name)
            .field("server", &self.options.server)
            .field("schema", &self.schema)
            .field("pipeline", &self.pipeline)
            .finish_non_exhaustive()
    }
}

/// A source error of the shared connection code as this sink's error.
pub(crate) fn from_source(e: SourceError) -> SinkError {
    match e {
        SourceError::Postgres {
            server,
            table,
            message,
            retryable,
        } => SinkError::Postgres {
            server,
            table,
            message,
            retryable,
        },
        other => SinkError::Postgres {
            server: String::new(),
            table: None,
            retryable: other.is_retryable(),
            message: other.to_string(),
        },
    }
}

/// The PostgreSQL type of a schema type (as `format_type` prints it).
pub fn pg_type(t: &FieldType) -> std::borrow::Cow<'static, str> {
    std::borrow::Cow::Borrowed(match t {
        FieldType::Boolean => "boolean",
        FieldType::Int => "integer",
        FieldType::Long => "bigint",
        FieldType::Double => "double precision",
        FieldType::Date => "date",
        FieldType::Timestamp | FieldType::TimestampMs => "timestamp with time zone",
        FieldType::Decimal { precision, scale } => {
            return std::borrow::Cow::Owned(format!("numeric({precision},{scale})"));
        }
        FieldType::String => "text",
        FieldType::Struct(_) | FieldType::List(_) => "jsonb",
    })
}

fn wire_type(t: &FieldType) -> Type {
    match t {
        FieldType::Boolean => Type::BOOL,
        FieldType::Int => Type::INT4,
        FieldType::Long => Type::INT8,
        FieldType::Double => Type::FLOAT8,
        FieldType::Date => Type::DATE,
        FieldType::Timestamp | FieldType::TimestampMs => Type::TIMESTAMPTZ,
        FieldType::Decimal { .. } => Type::NUMERIC,
        FieldType::String => Type::TEXT,
        FieldType::Struct(_) | FieldType::List(_) => Type::JSONB,
    }
}

/// How a table column of type `table` takes data of type `data`.
#[derive(Debug, PartialEq, Eq)]
pub enum Fit {
    /// As it is (the same type, or an assignment cast PostgreSQL makes losslessly).
    Takes,
    /// After `ALTER COLUMN ... TYPE` to the data's type.
    Widen,
    /// Not at all.
    Conflict,
}

/// Whether a column of type `table` (as `format_type` prints it) holds values of `data`.
pub fn fit(table: &str, data: &str) -> Fit {
    // A wider precision at the same scale holds every value.
    let numeric = |t: &str| FieldType::precision_scale(t, "numeric");
    if let (Some((pt, st)), Some((pd, sd))) = (numeric(table), numeric(data))
        && st == sd
    {
        return if pd > pt { Fit::Widen } else { Fit::Takes };
    }
    match (table, data) {
        (t, d) if t == d => Fit::Takes,
        ("integer", "bigint") | ("integer" | "bigint", "double precision") => Fit::Widen,
        ("bigint", "integer") | ("double precision", "integer" | "bigint") => Fit::Takes,
        ("text", d) if d != "jsonb" => Fit::Takes,
        _ => Fit::Conflict,
    }
}

impl PostgresSink {
    /// The destination of `pipeline`, when it is a `Postgres` one.
    pub fn open(pipeline: &ValidatedPipeline) -> Result<Option<PostgresSink>, SinkError> {
        let Some(sink) = &pipeline.postgres else {
            return Ok(None);
        };
        let mut out = PostgresSink::new(&sink.name, &sink.connector, &pipeline.store.partition)?
            .with_policies(pipeline.write.clone());
        if pipeline.write.source_keys
            && let SourceConnector::Postgres(c) = &pipeline.source.connector
        {
            out.key_source = Some(PostgresSourceOptions::from_config(c).map_err(from_source)?);
        }
        Ok(Some(out))
    }

    /// The sink `name` with keys `c`, for the pipeline whose state partition is `identity`.
    pub fn new(
        name: &str,
        c: &PostgresSinkConfig,
        identity: &str,
    ) -> Result<PostgresSink, SinkError> {
        // The source's connection code, from the same keys.
        let keys = PostgresSourceConfig {
            version: None,
            host: c.host.clone(),
            port: c.port,
            user: c.user.clone(),
            password: c.password.clone(),
            database: c.database.clone(),
            connection_string: c.connection_string.clone(),
            schema: c.schema.clone(),
            tables: Vec::new(),
            query: None,
            batch_size_rows: None,
            cdc_mode: None,
            replication_slot_name: None,
            publication_name: None,
            cdc_idle_timeout_seconds: None,
            sslmode: c.sslmode,
            sslrootcert: c.sslrootcert.clone(),
        };
        let options = PostgresSourceOptions::from_config(&keys).map_err(from_source)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| SinkError::Io {
                path: options.server.clone().into(),
                source,
            })?;
        Ok(PostgresSink {
            name: name.to_owned(),
            schema: options.schema.clone(),
            options,
            pipeline: identity.to_owned(),
            policies: WritePolicies::default(),
            key_source: None,
            runtime,
        })
    }

    /// The sink applying `policies` (validation checked that it can).
    pub fn with_policies(mut self, policies: WritePolicies) -> PostgresSink {
        self.policies = policies;
        self
    }

    /// The merge key's columns of `table` when `namespace` merges by key (declared, or by
    /// its source table's primary key from `source_keys`, when the policies take those), checked
    /// against its fields; `None` for `append` and `replace_table`.
    fn merge_key(
        &self,
        namespace: &str,
        table: &str,
        fields: &[Field],
        source_keys: &BTreeMap<String, Vec<String>>,
    ) -> Result<Option<Vec<String>>, SinkError> {
        let policy = self.policies.of(namespace);
        if policy == WritePolicy::ReplacePartition {
            return Err(SinkError::Config {
                sink: self.name.clone(),
                message: format!(
                    "write policy `{}` cannot be applied by the `Postgres` destination (its tables have no partitions)",
                    policy.name()
                ),
            });
        }
        let Some(columns) = self.policies.merge_key(namespace, source_keys) else {
            return Ok(None);
        };
        let mut key = Vec::new();
        for column in columns {
            if !fields.iter().any(|f| &f.name == column) {
                return Err(SinkError::Postgres {
                    server: self.options.server.clone(),
                    table: Some(table.to_owned()),
                    message: format!(
                        "`primary_key` column `{column}` is not a field of namespace `{namespace}`, so its rows cannot be merged by key"
                    ),
                    retryable: false,
                });
            }
            key.push(Self::column_of(column));
        }
        Ok(Some(key))
    }

    /// The table of `namespace`.
    pub fn table_of(namespace: &str) -> String {
        postgres_name(&table_name(namespace))
    }

    /// The column of field `name`.
    pub fn column_of(name: &str) -> String {
        postgres_name(name)
    }

    /// `"schema"."table"`.
    fn qualified(&self, table: &str) -> String {
        format!("{}.{}", ident(&self.schema), ident(table))
    }

    fn error(&self, table: Option<&str>, doing: &str, e: &tokio_postgres::Error) -> SinkError {
        from_source(pg_error(&self.options, table, doing, e))
    }

    /// Run `f` on a fresh connection, on the sink's runtime.
    fn with_client<T>(
        &self,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        self.runtime.block_on(async {
            let mut client = connect(&self.options).await.map_err(from_source)?;
            f(&mut client).await
        })
    }

    /// Whether `_skippr_batches` exists.
    async fn has_batches_table(&self, client: &impl GenericClient) -> Result<bool, SinkError> {
        let row = client
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&self.qualified(BATCHES_TABLE)],
            )
            .await
            .map_err(|e| self.error(None, "cannot look for the bookkeeping table", &e))?;
        Ok(row.get(0))
    }

    /// Create the schema and `_skippr_batches` when missing.
    async fn ensure_bookkeeping(&self, client: &impl GenericClient) -> Result<(), SinkError> {
        let sql = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {t} (pipeline text NOT NULL, table_name text NOT NULL, last_batch bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (pipeline, table_name))",
            schema = ident(&self.schema),
            t = self.qualified(BATCHES_TABLE),
        );
        client.batch_execute(&sql).await.map_err(|e| {
            self.error(
                Some(BATCHES_TABLE),
                "cannot create the bookkeeping table",
                &e,
            )
        })
    }

    /// The landed id of `table` (0 when none).
    async fn landed_in(&self, client: &impl GenericClient, table: &str) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT last_batch FROM {} WHERE pipeline = $1 AND table_name = $2",
            self.qualified(BATCHES_TABLE)
        );
        let row = client
            .query_opt(&sql, &[&self.pipeline, &table])
            .await
            .map_err(|e| self.error(Some(table), "cannot read the landed batch id", &e))?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0).max(0) as u64))
    }

    /// Create `table` for `fields`, or evolve it to hold them.
    async fn ensure_table(
        &self,
        client: &impl GenericClient,
        table: &str,
        fields: &[Field],
    ) -> Result<(), SinkError> {
        let q = self.qualified(table);
        let err = |doing: &str, e: &tokio_postgres::Error| self.error(Some(table), doing, e);
        let existing = client
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
                 JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
                &[&self.schema, &table],
            )
            .await
            .map_err(|e| err("cannot read the table's columns", &e))?;
        let columns: BTreeMap<String, String> = existing
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        if columns.is_empty() {
            let defs: Vec<String> = fields
                .iter()
                .map(|f| {
                    format!(
                        "{} {}",
                        ident(&Self::column_of(&f.name)),
                        pg_type(&f.field_type)
                    )
                })
                .collect();
            let sql = format!("CREATE TABLE IF NOT EXISTS {q} ({})", defs.join(", "));
            return client
                .batch_execute(&sql)
                .await
                .map_err(|e| err("cannot create the table", &e));
        }
        for f in fields {
            let column = Self::column_of(&f.name);
            let wanted = pg_type(&f.field_type);
            let sql = match columns.get(&column) {
                None => format!("ALTER TABLE {q} ADD COLUMN {} {wanted}", ident(&column)),
                Some(have) => match fit(have, &wanted) {
                    Fit::Takes => continue,
                    Fit::Widen => format!(
                        "ALTER TABLE {q} ALTER COLUMN {} TYPE {wanted}",
                        ident(&column)
                    ),
                    Fit::Conflict => {
                        return Err(SinkError::Postgres {
                            server: self.options.server.clone(),
                            table: Some(table.to_owned()),
                            message: format!(
                                "column `{column}` has type {have} in the table but the data needs {wanted}, and that is not a widening PostgreSQL can make losslessly (was the table changed outside skipprd?)"
                            ),
                            retryable: false,
                        });
                    }
                },
            };
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| err(&format!("cannot evolve column `{column}`"), &e))?;
        }
        Ok(())
    }

    /// The namespace's fields, or a config error naming it.
    fn fields_of<'s>(
        &self,
        schema: &'s PipelineSchema,
        ns: &str,
    ) -> Result<&'s [Field], SinkError> {
        schema
            .namespaces
            .get(ns)
            .map(|n| n.fields.as_slice())
            .ok_or_else(|| SinkError::Config {
                sink: self.name.clone(),
                message: format!(
                    "the schema has no namespace `{ns}` that WAL batches hold rows of"
                ),
            })
    }

    /// Binary-`COPY` `batch` (aligned to `fields`) into `stage`.
    async fn copy_into(
        &self,
        client: &tokio_postgres::Transaction<'_>,
        stage: &str,
        table: &str,
        fields: &[Field],
        batch: &RecordBatch,
    ) -> Result<(), SinkError> {
        let err = |doing: &str, e: &tokio_postgres::Error| self.error(Some(table), doing, e);
        let columns: Vec<String> = fields
            .iter()
            .map(|f| ident(&Self::column_of(&f.name)))
            .collect();
        let types: Vec<Type> = fields.iter().map(|f| wire_type(&f.field_type)).collect();
        let json = nested_json(batch, fields).map_err(|e| SinkError::Postgres {
            server: self.options.server.clone(),
            table: Some(table.to_owned()),
            message: format!("cannot encode a nested column as JSON: {e}"),
            retryable: false,
        })?;
        let values: Vec<Vec<Value>> = batch
            .columns()
            .iter()
            .enumerate()
            .map(|(i, a)| column_values(a, json.get(&i).map(Vec::as_slice)))
            .collect();
        let sql = format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            ident(stage),
            columns.join(", ")
        );
        let sink = client
            .copy_in(&sql)
            .await
            .map_err(|e| err("cannot start COPY", &e))?;
        let writer = BinaryCopyInWriter::new(sink, &types);
        pin_mut!(writer);
        let mut row: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(values.len());
        for r in 0..batch.num_rows() {
            row.clear();
            for col in &values {
                row.push(&col[r]);
            }
            writer
                .as_mut()
                .write(&row)
                .await
                .map_err(|e| err("cannot COPY a row", &e))?;
        }
        writer
            .finish()
            .await
            .map_err(|e| err("cannot finish COPY", &e))?;
        Ok(())
    }
}

impl Sink for PostgresSink {
    fn location(&self) -> String {
        format!(
            "postgresql://{} schema {}",
            self.options.server, self.schema
        )
    }

    fn prepare(&self, namespaces: &[&str], schema: &PipelineSchema) -> Result<(), SinkError> {
        self.with_client(async |client| {
            let tx = client
                .transaction()
                .await
                .map_err(|e| self.error(None, "cannot begin a transaction", &e))?;
            self.ensure_bookkeeping(&tx).await?;
            for ns in namespaces {
                if let Some(n) = schema.namespaces.get(*ns) {
                    self.ensure_table(&tx, &Self::table_of(ns), &n.fields)
                        .await?;
                }
            }
            tx.commit()
                .await
                .map_err(|e| self.error(None, "cannot commit", &e))
        })
    }

    fn landed(&self, namespace: &str) -> Result<u64, SinkError> {
        self.with_client(async |client| {
            if !self.has_batches_table(&*client).await? {
                return Ok(0);
            }
            self.landed_in(&*client, &Self::table_of(namespace)).await
        })
    }

    fn landed_any(&self) -> Result<u64, SinkError> {
        self.with_client(async |client| {
            if !self.has_batches_table(&*client).await? {
                return Ok(0);
            }
            let sql = format!(
                "SELECT COALESCE(max(last_batch), 0) FROM {} WHERE pipeline = $1",
                self.qualified(BATCHES_TABLE)
            );
            let row = client
                .query_one(&sql, &[&self.pipeline])
                .await
                .map_err(|e| self.error(None, "cannot read the landed batch ids", &e))?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
    }

    fn write(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: CommitCheck<'_>,
    ) -> Result<Delivered, SinkError> {
        let Some(last) = batches.last().map(|b| b.id) else {
            return Ok(Delivered::default());
        };
        let namespaces: BTreeSet<&str> = batches
            .iter()
            .flat_map(|b| b.parts.iter())
            .filter(|p| p.rows > 0 && p.kind().is_data())
            .map(|p| p.namespace.as_str())
            .collect();
        let mut delivered = Delivered::default();
        if namespaces.is_empty() {
            delivered.through = Some(last);
            return Ok(delivered);
        }
        struct Open<'s> {
            table: String,
            landed: u64,
            fields: &'s [Field],
            arrow: SchemaRef,
            stage: Option<String>,
            key: Option<Vec<String>>,
        }
        self.with_client(async |client| {
            // Bookkeeping first, in its own transaction (idempotent DDL).
            self.ensure_bookkeeping(&*client).await?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| self.error(None, "cannot begin a transaction", &e))?;
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                &[&format!("skipprd:{}", self.pipeline)],
            )
            .await
            .map_err(|e| self.error(None, "cannot lock the pipeline", &e))?;
            // Under a change stream with no declared policy, the source tables' keys.
            let source_keys = match &self.key_source {
                Some(options) => crate::sources::postgres::reader::table_keys(options)
                    .await
                    .map_err(from_source)?,
                None => BTreeMap::new(),
            };
            let mut open: BTreeMap<String, Open<'_>> = BTreeMap::new();
            for ns in namespaces {
                let fields = self.fields_of(schema, ns)?;
                let table = Self::table_of(ns);
                self.ensure_table(&tx, &table, fields).await?;
                let key = self.merge_key(ns, &table, fields, &source_keys)?;
                if let Some(key) = &key {
                    let cols: Vec<String> = key.iter().map(|c| ident(c)).collect();
                    let index = postgres_name(&format!("{table}_skippr_key"));
                    tx.batch_execute(&format!(
                        "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({})",
                        ident(&index),
                        self.qualified(&table),
                        cols.join(", ")
                    ))
                    .await
                    .map_err(|e| self.error(Some(&table), "cannot create the merge key's unique index", &e))?;
                }
                let landed = self.landed_in(&tx, &table).await?;
                open.insert(
                    ns.to_owned(),
                    Open {
                        table,
                        landed,
                        fields,
                        arrow: Arc::new(crate::schema::to_arrow_schema(fields)),
                        stage: None,
                        key,
                    },
                );
            }
            let mut stages = 0usize;
            for meta in batches {
                if !delivered.wants(meta, |ns| open.get(ns).map(|o| o.landed)) {
                    continue;
                }
                let parts = read(meta.id).map_err(|source| SinkError::Wal {
                    batch: meta.id,
                    source,
                })?;
                for part in &parts {
                    if part.batch.num_rows() == 0 {
                        continue;
                    }
                    let Some(o) = open.get_mut(&part.namespace) else {
                        continue;
                    };
                    if meta.id.0 <= o.landed {
                        delivered.skipped_parts += 1;
                        delivered.skipped_rows += part.batch.num_rows() as u64;
                        continue;
                    }
                    let aligned = crate::schema::adapt::adapt_batch(&part.batch, &o.arrow)
                        .map_err(|source| SinkError::Align {
                            table: o.table.clone(),
                            batch: meta.id,
                            source,
                        })?;
                    let stage = match &o.stage {
                        Some(s) => s.clone(),
                        None => {
                            let s = format!("_skippr_stage_{stages}");
                            stages += 1;
                            let defs: Vec<String> = o
                                .fields
                                .iter()
                                .map(|f| {
                                    format!(
                                        "{} {}",
                                        ident(&Self::column_of(&f.name)),
                                        pg_type(&f.field_type)
                                    )
                                })
                                .collect();
                            // `_skippr_seq` numbers the rows in source order (COPY order).
                            tx.batch_execute(&format!(
                                "CREATE TEMP TABLE {} ({}, \"_skippr_seq\" bigserial) ON COMMIT DROP",
                                ident(&s),
                                defs.join(", ")
                            ))
                            .await
                            .map_err(|e| {
                                self.error(Some(&o.table), "cannot create the staging table", &e)
                            })?;
                            o.stage = Some(s.clone());
                            s
                        }
                    };
                    self.copy_into(&tx, &stage, &o.table, o.fields, &aligned)
                        .await?;
                    delivered.rows += aligned.num_rows() as u64;
                }
            }
            let record = format!(
                "INSERT INTO {} (pipeline, table_name, last_batch) VALUES ($1, $2, $3) \
                 ON CONFLICT (pipeline, table_name) DO UPDATE SET last_batch = GREATEST({0}.last_batch, EXCLUDED.last_batch), updated_at = now()",
                self.qualified(BATCHES_TABLE)
            );
            let last_id = i64::try_from(last.0).unwrap_or(i64::MAX);
            let mut written = Vec::new();
            for (ns, o) in &open {
                let Some(stage) = &o.stage else {
                    continue;
                };
                let columns: Vec<String> = o
                    .fields
                    .iter()
                    .map(|f| ident(&Self::column_of(&f.name)))
                    .collect();
                let cols = columns.join(", ");
                let insert = match &o.key {
                    None => format!(
                        "INSERT INTO {} ({cols}) SELECT {cols} FROM {}",
                        self.qualified(&o.table),
                        ident(stage)
                    ),
                    Some(key) => merge_sql(
                        &self.qualified(&o.table),
                        &ident(stage),
                        &columns,
                        key,
                        o.fields.iter().any(|f| f.name == OP_FIELD),
                        o.fields.iter().any(|f| f.name == UNCHANGED_FIELD),
                    ),
                };
                if self.policies.of(ns) == crate::config::WritePolicy::ReplaceTable {
                    // The delivery is one whole read: its rows replace the table's, visible
                    // to readers all at once when the transaction commits.
                    tx.batch_execute(&format!("DELETE FROM {}", self.qualified(&o.table)))
                        .await
                        .map_err(|e| self.error(Some(&o.table), "cannot empty the table to replace its rows", &e))?;
                }
                tx.batch_execute(&insert)
                .await
                .map_err(|e| self.error(Some(&o.table), "cannot insert the staged rows", &e))?;
                tx.execute(&record, &[&self.pipeline, &o.table, &last_id])
                    .await
                    .map_err(|e| self.error(Some(&o.table), "cannot record the landed batch", &e))?;
                written.push(ns.as_str());
            }
            if written.is_empty() {
                // Everything had landed: nothing to commit.
                tx.rollback()
                    .await
                    .map_err(|e| self.error(None, "cannot end the transaction", &e))?;
                return Ok(());
            }
            if crate::failpoint::check(crate::failpoint::sink::AFTER_DATA_FILES) {
                return Err(SinkError::Failpoint {
                    name: crate::failpoint::sink::AFTER_DATA_FILES,
                });
            }
            for ns in &written {
                before_commit(ns)?;
            }
            tx.commit()
                .await
                .map_err(|e| self.error(None, "cannot commit the delivery", &e))?;
            delivered.commits += 1;
            if crate::failpoint::check(crate::failpoint::sink::AFTER_TABLE_COMMIT) {
                return Err(SinkError::Failpoint {
                    name: crate::failpoint::sink::AFTER_TABLE_COMMIT,
                });
            }
            Ok(())
        })?;
        delivered.through = Some(last);
        Ok(delivered)
    }
}

/// The field a change stream marks each record's operation in (`d` delete, `t` truncate;
/// `sources::postgres::cdc`).
const OP_FIELD: &str = "_op";

/// The field naming the columns a change did not carry (`sources::postgres::cdc`).
const UNCHANGED_FIELD: &str = crate::sources::postgres::cdc::UNCHANGED;

/// The statements that merge a delivery's staged rows into `table` by `key`: the newest
/// version of each key in the delivery (by source order, `_skippr_seq`) is upserted over the
/// table's. With an `_op` column (a change stream), a key whose newest version is a delete
/// (`d`) is deleted instead, and a truncate (`t`) empties the table and drops the staged rows
/// before it. With an `_unchanged` column, a newest version that lacks some of its columns
/// fails the delivery (merging it would write NULL over the values it did not carry).
fn merge_sql(
    table: &str,
    stage: &str,
    columns: &[String],
    key: &[String],
    ops: bool,
    unchanged: bool,
) -> String {
    let key_idents: Vec<String> = key.iter().map(|c| ident(c)).collect();
    let keys = key_idents.join(", ");
    let cols = columns.join(", ");
    let set: Vec<String> = columns
        .iter()
        .filter(|c| !key_idents.contains(c))
        .map(|c| format!("{c} = EXCLUDED.{c}"))
        .collect();
    let action = if set.is_empty() {
        "DO NOTHING".to_owned()
    } else {
        format!("DO UPDATE SET {}", set.join(", "))
    };
    if !ops {
        return format!(
            "INSERT INTO {table} ({cols}) SELECT {cols} FROM (SELECT DISTINCT ON ({keys}) {cols} FROM {stage} ORDER BY {keys}, \"_skippr_seq\" DESC) newest ON CONFLICT ({keys}) {action}"
        );
    }
    let op = ident(OP_FIELD);
    // The staged rows after the delivery's last truncate (all when none).
    let after = format!(
        "\"_skippr_seq\" > COALESCE((SELECT max(\"_skippr_seq\") FROM {stage} WHERE {op} = 't'), 0)"
    );
    let newest = format!(
        "CREATE TEMP TABLE \"_skippr_newest\" ON COMMIT DROP AS SELECT DISTINCT ON ({keys}) {cols} FROM {stage} WHERE {after} AND {op} IS DISTINCT FROM 't' ORDER BY {keys}, \"_skippr_seq\" DESC"
    );
    let check = if unchanged {
        format!(
            "DO $skippr$ BEGIN IF EXISTS (SELECT 1 FROM \"_skippr_newest\" WHERE {} IS NOT NULL) THEN \
             RAISE EXCEPTION 'a change of this table did not carry the columns its _unchanged names (values stored out of line that an update left alone, under the source table''s default replica identity): merging it would overwrite them with NULL; run ALTER TABLE ... REPLICA IDENTITY FULL on the source table, then reset the pipeline'; \
             END IF; END $skippr$; ",
            ident(UNCHANGED_FIELD)
        )
    } else {
        String::new()
    };
    let matches = key_idents
        .iter()
        .map(|k| format!("t.{k} = n.{k}"))
        .collect::<Vec<_>>()
        .join(" AND ");
    format!(
        "DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM {stage} WHERE {op} = 't'); \
         {newest}; \
         {check}\
         DELETE FROM {table} t USING \"_skippr_newest\" n WHERE n.{op} = 'd' AND {matches}; \
         INSERT INTO {table} ({cols}) SELECT {cols} FROM \"_skippr_newest\" WHERE {op} IS DISTINCT FROM 'd' ON CONFLICT ({keys}) {action}; \
         DROP TABLE \"_skippr_newest\""
    )
}

#[cfg(test)]
mod tests;
