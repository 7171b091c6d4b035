//! The Postgres source: tables of a PostgreSQL database (or one custom query), read through
//! one consistent snapshot per pass, in key order, a bounded page at a time.
//!
//! # Reading
//!
//! A pass opens one connection (`tokio-postgres`, driven on the source's own runtime, the
//! way the HTTP source drives `reqwest`), begins a `REPEATABLE READ READ ONLY` transaction and
//! exports its snapshot (`pg_export_snapshot`, logged at debug level); every table of the pass
//! is read inside that one transaction, so all of them show the same instant. Each table is
//! read in key order from the checkpoint's key on by one binary `COPY (SELECT ... WHERE (key) >
//! (checkpoint's key) ORDER BY key) TO STDOUT (FORMAT binary)` per pass (`copy.rs`), where
//! the key is `(cursor_field, primary key...)` for an incremental table, else the primary key
//! (configured, or the table's own), else `ctid` for a table with neither; the planner is
//! told to prefer an index in key order to a sort (`SET LOCAL enable_sort = off`). The
//! stream is cut into pages of `batch_size_rows` rows (or 32 MiB of the server's data), each
//! carrying its last row's key as the position, and a page is sent to the reading side
//! through a channel of one (with one page cut ahead), so memory holds a few pages whatever
//! the table's size. A custom `query` is read through a cursor
//! (`DECLARE ... NO SCROLL CURSOR`, `FETCH FORWARD batch_size_rows`). Without `tables`, the
//! pass reads every ordinary and partitioned table of `schema`, by name.
//!
//! # Types
//!
//! Rows are decoded from the binary wire format. For `sync` and `discover` (which ask for
//! [`PostgresSourceOptions::typed_cells`]) a page of a table or query becomes a
//! [`CellPage`](crate::sources::cells::CellPage): integers, finite floats and booleans as
//! themselves, timestamps as instants, every text form written once into the page's one
//! text buffer, arrays as JSON values, with no JSON object per row; a change of the stream
//! becomes a one-row page the same way. The pipeline infers each column's type from its
//! cells, which carry the column's type: an integer column is `int` or `long` (never a
//! Unix time, as an integer in a JSON record may be read), a `timestamp` or `timestamptz`
//! column is `timestamp` (never a string, as ISO 8601 text in a JSON record is). It types the
//! cells straight into its Arrow builders, making a JSON object only for a row a cell of
//! which needs a sibling column. Without `typed_cells`, and when `transform.namespace_fields`
//! or `flatten_events` shape records, rows are JSON objects. A cell's JSON form is the value
//! in this table:
//!
//! | PostgreSQL | record value |
//! | --- | --- |
//! | `bool` | boolean |
//! | `int2`, `int4`, `int8`, `oid` | integer |
//! | `float4`, `float8` | number (`NaN`, `Infinity`, `-Infinity` as strings, which a `double` column stores as those floats) |
//! | `numeric(p, s)`, `p` at most 38 | its exact decimal text, typed `decimal(p,s)` (Iceberg `decimal(p, s)`) |
//! | `numeric` without a precision, or past 38 digits | its exact decimal text, a string (never rounded through a float) |
//! | `text`, `varchar`, `char(n)`, `name`, `"char"`, enums | string |
//! | `date` | `YYYY-MM-DD` (typed `date`); `infinity`, `-infinity` as they are |
//! | `timestamp` | an instant, typed `timestamp` (its wall-clock time read as UTC); as text `YYYY-MM-DDTHH:MM:SS.ffffff` |
//! | `timestamptz` | an instant, typed `timestamp` (UTC); as text `YYYY-MM-DDTHH:MM:SS.ffffffZ` |
//! | `time` | `HH:MM:SS.ffffff` |
//! | `uuid` | hyphenated lowercase |
//! | `json`, `jsonb` | the JSON text, as a string |
//! | `bytea` | `\x` and lowercase hex, PostgreSQL's own text form |
//! | arrays of the above | lists (nested per dimension); NULL elements as null |
//! | domains | as their base type |
//! | anything else (`interval`, `inet`, ranges, geometric, ...) | its text (`::text`), with a warning naming the column |
//!
//! NULL is null. A `numeric(p, s)` column holding `NaN` is a string column of the values'
//! text. `infinity` and `-infinity` timestamps (and any past year 262,000) stay
//! text, so a column holding one is a `string` column of the instants' text. A table whose
//! column was a `string` before timestamps were typed keeps it, and the instants land in it
//! as their text (a string column takes any value). A column whose first values are all
//! NULL is inferred `string` (a null carries no type), and `_commit_ts` is one of them after
//! a snapshot whose rows carry no commit time: typed nulls are future work.
//!
//! # Incremental reading and checkpoint
//!
//! [`Source::checkpoint`] returns a [`PostgresCheckpoint`] as JSON: per table the key (as
//! text) of the last row handed out and the rows handed out this pass, and whether the pass
//! finished the table. A table with a `cursor_field` keeps its key across passes: each pass
//! reads only the rows whose `(cursor_field, primary key)` is greater, in that order, so rows
//! sharing a cursor value are never lost or repeated, and rows with a NULL cursor are never
//! read. Other tables start over each pass. Reopening at a checkpoint taken mid-pass goes on
//! with the table being read, after its last key, in a new snapshot (the tables finished
//! before the crash are not read again in that pass). A custom query resumes by skipping the
//! rows already handed out, which is exact when it has an `ORDER BY` and the data did not
//! change.
//!
//! # Change stream
//!
//! With `cdc_mode: snapshot_then_cdc` (the tables once, at the slot's consistent point, as
//! records with `_op: r`) or `cdc_only`, a pass reads the changes of a logical replication
//! slot after the committed position, exactly once across crashes: see [`cdc`]. The stream's
//! position is [`PostgresCheckpoint::cdc`]; a new stream commits its slot's starting point in
//! an empty first batch. `discover` samples the tables and never touches the slot.
//!
//! # Errors
//!
//! Every error is a [`SourceError::Postgres`] naming the server as `host:port/database` and
//! the table; the password and the connection string are never part of it.
//!
//! [`Source::checkpoint`]: crate::sources::Source::checkpoint

pub mod cdc;
mod copy;
pub(crate) mod decode;
pub mod doctor;
pub(crate) mod pgoutput;
pub(crate) mod reader;
#[cfg(test)]
mod tests;
mod text;
pub mod tls;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use self::cdc::{CdcAt, StreamMessage, StreamOptions};
use self::reader::{Chunk, Message, Plan, Rows};
use super::cells::CellRow;
use super::{Position, Progress, Source, SourceBatch, SourceError, SourceRecord};
use crate::config::connectors::{PgSslMode, PostgresSourceConfig, PostgresTableConfig};
use crate::config::validate::ResolvedCdc;

/// The rows of each table `skipprd discover` samples.
pub const DISCOVER_SAMPLE_ROWS: usize = 10_000;

/// The version of [`PostgresCheckpoint`] this build writes and reads.
pub const POSTGRES_CHECKPOINT_VERSION: u32 = 1;

/// What the Postgres source reads and how.
#[derive(Clone)]
pub struct PostgresSourceOptions {
    /// The connection (password inside; never printed).
    pub config: tokio_postgres::Config,
    /// `host:port/database`, for messages.
    pub server: String,
    /// TLS, from `sslmode` (or the connection string's) and `sslrootcert`.
    pub tls: tls::PgTls,
    /// The schema of the tables.
    pub schema: String,
    /// The tables; empty: every table of `schema`.
    pub tables: Vec<PostgresTableConfig>,
    /// A custom query instead of tables.
    pub query: Option<String>,
    /// Rows per query and per batch (at least 1).
    pub batch_rows: usize,
    /// Read at most this many rows of each table (the first in key order), for `discover`;
    /// `None`: every row.
    pub sample_rows: Option<usize>,
    /// The change stream (`snapshot_then_cdc`, `cdc_only`); `None`: `snapshot`. A sampling
    /// read (`discover`) never streams.
    pub cdc: Option<ResolvedCdc>,
    /// Hand rows out as typed cells
    /// ([`SourceRecord::cells`](crate::sources::SourceRecord::cells)) rather than JSON
    /// objects, for a consumer that infers and types from them (`sync`, `discover`): the
    /// rows of tables and queries, and the changes of the stream. Default `false`.
    pub typed_cells: bool,
}

impl std::fmt::Debug for PostgresSourceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSourceOptions")
            .field("server", &self.server)
            .field("schema", &self.schema)
            .field("tables", &self.tables)
            .field("batch_rows", &self.batch_rows)
            .finish_non_exhaustive()
    }
}

impl PostgresSourceOptions {
    /// Options from a validated connector config.
    pub fn from_config(c: &PostgresSourceConfig) -> Result<PostgresSourceOptions, SourceError> {
        let (mut config, mode) = match &c.connection_string {
            Some(text) => tls::parse_connection_string(text.expose()).ok_or_else(|| {
                SourceError::Postgres {
                    server: "connection_string".into(),
                    table: None,
                    message: "`connection_string` is not a valid PostgreSQL connection string"
                        .into(),
                    retryable: false,
                }
            })?,
            None => {
                let mut config = tokio_postgres::Config::new();
                config
                    .host(
                        c.host
                            .as_deref()
                            .unwrap_or(PostgresSourceConfig::DEFAULT_HOST),
                    )
                    .port(c.port.unwrap_or(PostgresSourceConfig::DEFAULT_PORT))
                    .user(
                        c.user
                            .as_deref()
                            .unwrap_or(PostgresSourceConfig::DEFAULT_USER),
                    )
                    .dbname(c.database.as_deref().unwrap_or_default());
                if let Some(password) = &c.password {
                    config.password(password.expose());
                }
                (config, c.sslmode.unwrap_or(PgSslMode::Prefer))
            }
        };
        let tls = match mode {
            PgSslMode::Disable => tls::PgTls::Disable,
            PgSslMode::Prefer => tls::PgTls::Prefer,
            PgSslMode::Require => tls::PgTls::Require,
            PgSslMode::VerifyFull => tls::PgTls::VerifyFull {
                root_cert: c.sslrootcert.clone(),
            },
        };
        config.ssl_mode(tls.ssl_mode());
        if config.get_user().is_none() {
            config.user(PostgresSourceConfig::DEFAULT_USER);
        }
        if config.get_hosts().is_empty() {
            config.host(PostgresSourceConfig::DEFAULT_HOST);
        }
        config.connect_timeout(Duration::from_secs(30));
        config.application_name("skipprd");
        let server = server_name(&config);
        Ok(PostgresSourceOptions {
            config,
            server,
            tls,
            schema: c
                .schema
                .clone()
                .unwrap_or_else(|| PostgresSourceConfig::DEFAULT_SCHEMA.to_owned()),
            tables: c.tables.iter().map(|t| t.config()).collect(),
            query: c.query.clone(),
            batch_rows: c
                .batch_size_rows
                .unwrap_or(PostgresSourceConfig::DEFAULT_BATCH_SIZE_ROWS)
                .max(1),
            sample_rows: None,
            cdc: None,
            typed_cells: false,
        })
    }
}

/// `host:port/database` of a connection config (the first host), for messages.
pub fn server_name(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => PostgresSourceConfig::DEFAULT_HOST.to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(PostgresSourceConfig::DEFAULT_PORT);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or_default();
    format!("{host}:{port}/{db}")
}

/// The namespace of a table's records: `postgres.{table}` (the schema left out).
pub(crate) fn namespace_of(table: &str) -> String {
    crate::schema::sanitize_namespace(&format!(
        "postgres.{}",
        table.rsplit('.').next().unwrap_or(table)
    ))
}

/// The Postgres source's checkpoint (see the [module docs](self#incremental-reading-and-checkpoint)).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PostgresCheckpoint {
    /// [`POSTGRES_CHECKPOINT_VERSION`].
    pub version: u32,
    /// `host:port/database/schema` (or `.../query`): a checkpoint of another source is not
    /// resumed.
    pub source: String,
    /// Whether a pass is part-way.
    pub in_pass: bool,
    /// Per table (`schema.table`, or `query`).
    pub tables: BTreeMap<String, TableAt>,
    /// Where the change stream stands (CDC modes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdc: Option<CdcAt>,
}

/// Where one table stands.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TableAt {
    /// The key columns the key is of (`cursor, pk...`, the primary key, or `ctid`), as
    /// configured: a key of other columns is not resumed.
    pub key_of: Vec<String>,
    /// The key (as text) of the last row handed out: for an incremental table across
    /// passes, for others in this pass.
    pub key: Option<Vec<String>>,
    /// Rows handed out in this pass.
    pub rows: u64,
    /// The pass read the table to its end.
    pub done: bool,
}

/// Where a table starts in a pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct TableStart {
    key: Option<Vec<String>>,
    rows: u64,
    done: bool,
}

/// Reads a PostgreSQL database; see the [module documentation](self).
pub struct PostgresSource {
    options: PostgresSourceOptions,
    runtime: Option<tokio::runtime::Runtime>,
    state: PostgresCheckpoint,
    /// The pass's tables, once known.
    plans: Option<Vec<Plan>>,
    rx: Option<tokio::sync::mpsc::Receiver<Message>>,
    /// The change stream of this pass, once started.
    stream_rx: Option<tokio::sync::mpsc::Receiver<StreamMessage>>,
    /// The stream's slot is ready and [`PostgresCheckpoint::cdc`] is set.
    cdc_ready: bool,
    /// The stream is new: its first checkpoint goes out at once, in an empty batch, so the
    /// slot's starting point is committed before anything else happens.
    cdc_announce: bool,
    /// The tables as configured (a pass without a list fills [`PostgresSourceOptions::tables`]
    /// with the schema's): the stream reads the same ones in every pass.
    configured_tables: Vec<PostgresTableConfig>,
    finished: bool,
    rows_done: u64,
    tables_done: u64,
    /// A change stream's round loop ends its pass on a stop request.
    stop: crate::sources::StopRequest,
}

impl std::fmt::Debug for PostgresSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSource")
            .field("server", &self.options.server)
            .field("rows_done", &self.rows_done)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresSource {
    fn drop(&mut self) {
        self.rx = None;
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl PostgresSource {
    /// Open the source at `checkpoint` (bytes from [`Source::checkpoint`]) or at its start.
    /// Nothing is read yet.
    pub fn open_at(
        options: PostgresSourceOptions,
        checkpoint: Option<&[u8]>,
    ) -> Result<PostgresSource, SourceError> {
        let source_key = match &options.query {
            Some(_) => format!("{}/query", options.server),
            None => format!("{}/{}", options.server, options.schema),
        };
        let bad = |message: String| SourceError::BadCheckpoint {
            path: source_key.clone(),
            message,
        };
        let mut state = match checkpoint {
            None => PostgresCheckpoint::default(),
            Some(bytes) => {
                let c: PostgresCheckpoint = serde_json::from_slice(bytes)
                    .map_err(|e| bad(format!("not a Postgres source checkpoint: {e}")))?;
                if c.version != POSTGRES_CHECKPOINT_VERSION {
                    return Err(bad(format!(
                        "written by checkpoint version {}, this build reads {POSTGRES_CHECKPOINT_VERSION}",
                        c.version
                    )));
                }
                if c.source == source_key {
                    c
                } else {
                    tracing::warn!(
                        was = %c.source,
                        now = %source_key,
                        "the Postgres source now reads `{source_key}` instead of `{}`: reading it from the start",
                        c.source
                    );
                    PostgresCheckpoint::default()
                }
            }
        };
        state.version = POSTGRES_CHECKPOINT_VERSION;
        state.source = source_key;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("skipprd-postgres")
            .enable_all()
            .build()
            .map_err(|e| SourceError::Postgres {
                server: options.server.clone(),
                table: None,
                message: format!("cannot start the PostgreSQL runtime: {e}"),
                retryable: false,
            })?;
        let configured_tables = options.tables.clone();
        Ok(PostgresSource {
            options,
            runtime: Some(runtime),
            state,
            plans: None,
            rx: None,
            stream_rx: None,
            cdc_ready: false,
            cdc_announce: false,
            configured_tables,
            finished: false,
            rows_done: 0,
            tables_done: 0,
            stop: crate::sources::StopRequest::default(),
        })
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, SourceError> {
        self.runtime.as_ref().ok_or_else(|| SourceError::Postgres {
            server: self.options.server.clone(),
            table: None,
            message: "the source was shut down".into(),
            retryable: false,
        })
    }

    /// The key columns of a table as configured, for the checkpoint (the table's own primary
    /// key is `pk`).
    fn key_of(table: &PostgresTableConfig) -> Vec<String> {
        let mut key = Vec::new();
        if let Some(cursor) = &table.cursor_field {
            key.push(cursor.clone());
        }
        match &table.primary_key {
            Some(pk) => key.extend(pk.iter().cloned()),
            None => key.push("(primary key)".into()),
        }
        key
    }

    /// Work out the pass's tables and start the reader.
    fn start(&mut self) -> Result<(), SourceError> {
        if self.options.query.is_none() && self.options.tables.is_empty() {
            let options = self.options.clone();
            let names = self.runtime()?.block_on(async move {
                let client = reader::connect(&options).await?;
                reader::list_tables(&client, &options).await
            })?;
            self.options.tables = names
                .into_iter()
                .map(|name| PostgresTableConfig {
                    name,
                    cursor_field: None,
                    primary_key: None,
                })
                .collect();
        }
        let entries: Vec<(String, Vec<String>, bool)> = match &self.options.query {
            Some(_) => vec![("query".to_owned(), Vec::new(), false)],
            None => self
                .options
                .tables
                .iter()
                .map(|t| {
                    (
                        format!("{}.{}", self.options.schema, t.name),
                        Self::key_of(t),
                        t.cursor_field.is_some(),
                    )
                })
                .collect(),
        };
        let in_pass = self.state.in_pass;
        let mut plans = Vec::with_capacity(entries.len());
        let mut tables = BTreeMap::new();
        for (name, key_of, incremental) in entries {
            let mut at = self.state.tables.remove(&name).unwrap_or_default();
            if at.key_of != key_of {
                if at.key.is_some() {
                    tracing::warn!(
                        table = %name,
                        "the key of `{name}` is now ({}) instead of ({}): reading it from the start",
                        key_of.join(", "),
                        at.key_of.join(", ")
                    );
                }
                at = TableAt {
                    key_of,
                    ..TableAt::default()
                };
            }
            if !in_pass {
                // A new pass: incremental tables go on after their key, others start over.
                if !incremental {
                    at.key = None;
                }
                at.rows = 0;
                at.done = false;
            }
            plans.push(Plan {
                name: name.clone(),
                start: TableStart {
                    key: at.key.clone(),
                    rows: at.rows,
                    done: at.done,
                },
            });
            tables.insert(name, at);
        }
        self.state.tables = tables;
        self.state.in_pass = true;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let options = self.options.clone();
        let task_plans = plans.clone();
        // The snapshot before a change stream records what it saw, once (a resumed
        // snapshot keeps the first one's: see `cdc`).
        let (filter_tx, filter_rx) = match &self.state.cdc {
            Some(at) if at.snapshot.is_none() => {
                let (t, r) = tokio::sync::oneshot::channel();
                (Some(t), Some(r))
            }
            _ => (None, None),
        };
        self.runtime()?
            .spawn(reader::run(options, task_plans, tx, filter_tx));
        if let Some(filter_rx) = filter_rx {
            // A reader that failed first says why through `rx`.
            if let Ok(filter) = self.runtime()?.block_on(filter_rx)
                && let Some(at) = self.state.cdc.as_mut()
            {
                at.snapshot = Some(filter);
            }
        }
        self.plans = Some(plans);
        self.rx = Some(rx);
        Ok(())
    }

    /// Ready the change stream's slot and publication, and move the slot to the committed
    /// position (see [`cdc`]).
    fn prepare_cdc(&mut self, settings: &ResolvedCdc) -> Result<(), SourceError> {
        let stream = StreamOptions {
            publication: settings.publication.clone(),
            idle: settings.idle_timeout,
            stop: self.stop.clone(),
        };
        let fresh = self.state.cdc.is_none();
        let options = self.options.clone();
        let slot = settings.slot_name.clone();
        let at = self.state.cdc.take();
        let mut at = self
            .runtime()?
            .block_on(async move { cdc::prepare(&options, &stream, &slot, at).await })?;
        if fresh {
            at.snapshot_pending = settings.snapshot_first;
            // A new stream starts its snapshot afresh.
            self.state.in_pass = false;
            self.state.tables.clear();
        }
        self.state.cdc = Some(at);
        self.cdc_ready = true;
        self.cdc_announce = fresh;
        Ok(())
    }

    /// The next batch of the change stream (started on first call); `None` once the pass
    /// ends.
    fn next_change_batch(
        &mut self,
        settings: &ResolvedCdc,
    ) -> Result<Option<SourceBatch>, SourceError> {
        let mut rx = match self.stream_rx.take() {
            Some(rx) => rx,
            None => {
                let Some(at) = self.state.cdc.clone() else {
                    return Ok(None);
                };
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                let stream = StreamOptions {
                    publication: settings.publication.clone(),
                    idle: settings.idle_timeout,
                    stop: self.stop.clone(),
                };
                let mut options = self.options.clone();
                options.tables.clone_from(&self.configured_tables);
                self.runtime()?.spawn(cdc::run(options, stream, at, tx));
                rx
            }
        };
        let message = self.runtime()?.block_on(rx.recv());
        match message {
            None => {
                self.finished = true;
                Ok(None)
            }
            Some(Err(e)) => {
                self.finished = true;
                Err(e)
            }
            Some(Ok(changes)) => {
                self.stream_rx = Some(rx);
                let mut batch = SourceBatch::default();
                for change in changes.records {
                    self.rows_done += 1;
                    batch.records.push(SourceRecord {
                        value: change.value,
                        position: Position {
                            uri: format!("postgres://{}/{}", self.options.server, change.table)
                                .into(),
                            offset: change.lsn,
                            record: self.rows_done,
                        },
                        unparsed: None,
                        cells: change.cells,
                        namespace: Some(namespace_of(&change.table).into()),
                    });
                }
                self.state.cdc = Some(changes.at);
                Ok(Some(batch))
            }
        }
    }

    /// Mark the pass finished, and stop reading.
    fn finish_pass(&mut self) {
        self.finished = true;
        self.rx = None;
        self.reset_for_next_pass();
    }

    /// The state a finished pass leaves: what the next pass starts from.
    fn reset_for_next_pass(&mut self) {
        self.state.in_pass = false;
        let incremental: Vec<bool> = match &self.options.query {
            Some(_) => vec![false],
            None => self
                .options
                .tables
                .iter()
                .map(|t| t.cursor_field.is_some())
                .collect(),
        };
        if let Some(plans) = &self.plans {
            for (plan, incremental) in plans.iter().zip(incremental) {
                if let Some(at) = self.state.tables.get_mut(&plan.name) {
                    at.rows = 0;
                    at.done = false;
                    if !incremental {
                        at.key = None;
                    }
                }
            }
        }
    }

    /// Turn a chunk into a batch (or nothing, for an empty last page) and move the state on.
    fn take(&mut self, chunk: Chunk) -> Option<SourceBatch> {
        let name = self
            .plans
            .as_ref()
            .and_then(|p| p.get(chunk.table))
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let namespace: std::sync::Arc<str> = namespace_of(&name).into();
        let uri: std::sync::Arc<str> = format!("postgres://{}/{name}", self.options.server).into();
        let streaming = self.state.cdc.is_some();
        let at = self.state.tables.entry(name).or_default();
        let mut batch = SourceBatch::default();
        let rows = match chunk.rows {
            // Pages read before a change stream carry its columns already.
            Rows::Cells { page, changes } if changes == streaming => {
                batch.records.reserve_exact(page.rows());
                for cells in CellRow::all(&page) {
                    at.rows += 1;
                    batch.records.push(SourceRecord {
                        value: serde_json::Map::new(),
                        position: Position {
                            uri: uri.clone(),
                            offset: at.rows,
                            record: at.rows,
                        },
                        unparsed: None,
                        cells: Some(cells),
                        namespace: Some(namespace.clone()),
                    });
                }
                Vec::new()
            }
            Rows::Cells { page, changes } => CellRow::all(&page)
                .map(|row| {
                    let mut value = row.to_json();
                    if changes {
                        // Not streaming after all: no change columns.
                        for name in [cdc::OP, cdc::LSN, cdc::COMMIT_LSN, cdc::COMMIT_TS] {
                            value.remove(name);
                        }
                    }
                    value
                })
                .collect(),
            Rows::Json(rows) => rows,
        };
        batch.records.reserve_exact(rows.len());
        for mut value in rows {
            if streaming {
                // A snapshot row before the stream: before every change.
                value.insert(cdc::OP.into(), serde_json::Value::from(cdc::SNAPSHOT_OP));
                value.insert(cdc::LSN.into(), serde_json::Value::from(0));
                value.insert(cdc::COMMIT_LSN.into(), serde_json::Value::from(0));
                value.insert(cdc::COMMIT_TS.into(), serde_json::Value::Null);
            }
            at.rows += 1;
            batch.records.push(SourceRecord {
                value,
                position: Position {
                    uri: uri.clone(),
                    offset: at.rows,
                    record: at.rows,
                },
                unparsed: None,
                cells: None,
                namespace: Some(namespace.clone()),
            });
        }
        if chunk.last_key.is_some() {
            at.key = chunk.last_key;
        }
        if chunk.end {
            at.done = true;
            self.tables_done += 1;
        }
        if chunk.last_of_pass {
            self.reset_for_next_pass();
            if let Some(cdc) = self.state.cdc.as_mut() {
                cdc.snapshot_pending = false;
            }
        }
        self.rows_done += batch.records.len() as u64;
        (!batch.records.is_empty()).then_some(batch)
    }
}

impl PostgresSource {
    /// The next batch of the tables' read (started on first call).
    fn next_snapshot_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        if self.rx.is_none() {
            self.start()?;
        }
        loop {
            let Some(mut rx) = self.rx.take() else {
                return Ok(None);
            };
            let message = self.runtime()?.block_on(rx.recv());
            self.rx = Some(rx);
            match message {
                None => {
                    self.finish_pass();
                    return Ok(None);
                }
                Some(Err(e)) => {
                    self.rx = None;
                    self.finished = true;
                    return Err(e);
                }
                Some(Ok(chunk)) => {
                    if let Some(batch) = self.take(chunk) {
                        return Ok(Some(batch));
                    }
                }
            }
        }
    }
}

impl Source for PostgresSource {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        if self.finished {
            return Ok(None);
        }
        if let Some(settings) = self
            .options
            .cdc
            .clone()
            .filter(|_| self.options.sample_rows.is_none())
        {
            if !self.cdc_ready {
                self.prepare_cdc(&settings)?;
            }
            if std::mem::take(&mut self.cdc_announce) {
                return Ok(Some(SourceBatch::default()));
            }
            if self.state.cdc.as_ref().is_some_and(|c| c.snapshot_pending) {
                if let Some(batch) = self.next_snapshot_batch()? {
                    return Ok(Some(batch));
                }
                self.finished = false;
                if let Some(cdc) = self.state.cdc.as_mut()
                    && cdc.snapshot_pending
                {
                    // The snapshot ended without a batch to carry its end: an empty batch
                    // commits it, so a crash now does not take the snapshot again.
                    cdc.snapshot_pending = false;
                    self.state.in_pass = false;
                    return Ok(Some(SourceBatch::default()));
                }
            }
            self.rx = None;
            return self.next_change_batch(&settings);
        }
        self.next_snapshot_batch()
    }

    fn progress(&self) -> Progress {
        Progress {
            bytes_done: 0,
            bytes_total: None,
            files_done: self.tables_done,
            files_total: self.plans.as_ref().map(|p| p.len() as u64),
            requests: 0,
            retries: 0,
        }
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        serde_json::to_vec(&self.state).map_err(|e| SourceError::BadCheckpoint {
            path: self.state.source.clone(),
            message: format!("cannot encode the checkpoint: {e}"),
        })
    }

    fn stop_on(&mut self, stop: crate::sources::StopRequest) {
        self.stop = stop;
    }
}
