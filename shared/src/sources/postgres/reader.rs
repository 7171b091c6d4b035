//! The async side of the Postgres source: one connection, one `REPEATABLE READ` snapshot per
//! pass, each table read in key order by one binary `COPY` cut into pages, each page sent as
//! a [`Chunk`] through a channel of one, so memory holds a few pages.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

use super::cdc::{
    CHANGE_COLUMN_TYPES, COMMIT_LSN, COMMIT_TS, LSN, OP, SNAPSHOT_OP, SnapshotFilter,
};
use super::copy::{CopyPages, CopyRow, Fetch, PAGE_BYTES, RawRow, literal, read_copy};
use super::decode::Decoder;
use super::{PostgresSourceOptions, TableStart};
use crate::sources::SourceError;
use crate::sources::cells::{CellPage, Declared};

/// One page of one table.
#[derive(Debug)]
pub(super) struct Chunk {
    /// The index of the table in the pass's plan.
    pub table: usize,
    /// The rows.
    pub rows: Rows,
    /// The key (as text) of the last row: `(cursor, primary key...)`, the primary key, or
    /// the `ctid`; for a query, nothing.
    pub last_key: Option<Vec<String>>,
    /// No row of this table comes after these in this pass.
    pub end: bool,
    /// No row of any table comes after these in this pass: the state after this chunk is
    /// the finished pass's.
    pub last_of_pass: bool,
}

/// A page's rows: JSON objects, or typed cells (see
/// [`PostgresSourceOptions::typed_cells`]).
#[derive(Debug)]
pub(super) enum Rows {
    /// Rows as records.
    Json(Vec<Map<String, Value>>),
    /// Rows as cells; `changes`: each row ends with the change columns of a snapshot read
    /// before a change stream (`_op` `r`, `_lsn` and `_commit_lsn` 0, `_commit_ts` NULL).
    Cells {
        /// The rows.
        page: Arc<CellPage>,
        /// Whether the rows carry the change columns.
        changes: bool,
    },
}

impl Rows {
    fn is_empty(&self) -> bool {
        match self {
            Rows::Json(rows) => rows.is_empty(),
            Rows::Cells { page, .. } => page.rows() == 0,
        }
    }
}

/// Sends pages one behind, so that each page sent knows whether it is its table's last and
/// the pass's last (the checkpoint of the last batch of a pass then says the pass finished,
/// with no empty batch needed to commit that). Empty pages are not sent.
struct Out<'a> {
    tx: &'a mpsc::Sender<Message>,
    held: Option<Chunk>,
}

impl Out<'_> {
    /// Queue a page; `Ok(false)`: the receiver is gone.
    async fn push(&mut self, chunk: Chunk) -> bool {
        if chunk.rows.is_empty() {
            return true;
        }
        match self.held.replace(chunk) {
            Some(before) => self.tx.send(Ok(before)).await.is_ok(),
            None => true,
        }
    }

    /// The table `index` has no more rows.
    fn table_end(&mut self, index: usize) {
        if let Some(held) = self.held.as_mut()
            && held.table == index
        {
            held.end = true;
        }
    }

    /// The pass read everything: send the last page, marked so.
    async fn finish(&mut self) -> bool {
        match self.held.take() {
            Some(mut last) => {
                last.last_of_pass = true;
                self.tx.send(Ok(last)).await.is_ok()
            }
            None => true,
        }
    }
}

/// What the reader sends.
pub(super) type Message = Result<Chunk, SourceError>;

/// How one table is read in a pass.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// `schema.table` (or `query`).
    pub name: String,
    /// Where to start.
    pub start: TableStart,
}

/// Connection and query errors, with the server's message and whether retrying may help.
pub(crate) fn pg_error(
    options: &PostgresSourceOptions,
    table: Option<&str>,
    doing: &str,
    e: &tokio_postgres::Error,
) -> SourceError {
    let (message, retryable) = match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            let retryable = code.starts_with("08")
                || code.starts_with("57P")
                // A statement cancelled (`statement_timeout`, `pg_cancel_backend`): a
                // table's read is one statement per pass, and the next resumes after the
                // last committed key.
                || code == "57014"
                || code == "40001"
                || code == "40P01"
                || code.starts_with("53");
            let mut message = format!("{doing}: {} (SQLSTATE {code})", db.message());
            if let Some(hint) = db.hint() {
                message.push_str(&format!("; hint: {hint}"));
            }
            (message, retryable)
        }
        None if super::tls::certificate_refused(e) => (
            format!(
                "{doing}: the server's TLS certificate was refused (sslmode verify-full): {}; set `sslrootcert` to the CA that signed it, or connect by a host name the certificate names",
                error_chain(e)
            ),
            false,
        ),
        None => (format!("{doing}: {}", error_chain(e)), true),
    };
    SourceError::Postgres {
        server: options.server.clone(),
        table: table.map(str::to_owned),
        message,
        retryable,
    }
}

/// The messages of `e`'s causes, innermost last, each once.
fn error_chain(e: &tokio_postgres::Error) -> String {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        let text = inner.to_string();
        if !message.contains(&text) {
            message.push_str(&format!(": {text}"));
        }
        source = inner.source();
    }
    message
}

/// Quote an identifier for SQL.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Run a connection's I/O in the background until the client is dropped.
fn drive<C>(connection: C)
where
    C: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "PostgreSQL connection ended");
        }
    });
}

/// Connect and set the session up so text casts are stable (ISO dates, UTC, exact floats).
pub(crate) async fn connect(options: &PostgresSourceOptions) -> Result<Client, SourceError> {
    let connector = options
        .tls
        .connector()
        .map_err(|message| SourceError::Postgres {
            server: options.server.clone(),
            table: None,
            message,
            retryable: false,
        })?;
    let failed = |e| pg_error(options, None, "cannot connect", &e);
    let client = match connector {
        None => {
            let (client, connection) = options.config.connect(NoTls).await.map_err(failed)?;
            drive(connection);
            client
        }
        Some(tls) => {
            let (client, connection) = options.config.connect(tls).await.map_err(failed)?;
            drive(connection);
            client
        }
    };
    client
        .batch_execute(
            "SET DateStyle = 'ISO, YMD'; SET TimeZone = 'UTC'; SET extra_float_digits = 3; \
             SET IntervalStyle = 'iso_8601'; SET bytea_output = 'hex'",
        )
        .await
        .map_err(|e| pg_error(options, None, "cannot set the session up", &e))?;
    Ok(client)
}

/// The tables of `schema` (ordinary and partitioned, not partitions), by name.
pub(super) async fn list_tables(
    client: &Client,
    options: &PostgresSourceOptions,
) -> Result<Vec<String>, SourceError> {
    let rows = client
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
             ORDER BY c.relname",
            &[&options.schema],
        )
        .await
        .map_err(|e| pg_error(options, None, "cannot list the tables", &e))?;
    rows.iter()
        .map(|row| row.try_get::<_, String>(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(options, None, "cannot list the tables", &e))
}

/// The merge key of each table the source reads, by namespace: a table entry's
/// `primary_key`, else the table's own primary key; a table with neither is left out.
pub async fn table_keys(
    options: &PostgresSourceOptions,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, SourceError> {
    let client = connect(options).await?;
    let rows = client
        .query(
            "SELECT c.relname::text, array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum)) \
             FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
             WHERE i.indisprimary AND n.nspname = $1 GROUP BY c.relname",
            &[&options.schema],
        )
        .await
        .map_err(|e| pg_error(options, None, "cannot read the tables' primary keys", &e))?;
    let mut own = std::collections::BTreeMap::new();
    for row in rows {
        let read = |e| pg_error(options, None, "cannot read a primary key", &e);
        let table: String = row.try_get(0).map_err(read)?;
        let columns: Vec<String> = row.try_get(1).map_err(read)?;
        own.insert(table, columns);
    }
    let mut keys = std::collections::BTreeMap::new();
    let tables: Vec<(String, Option<Vec<String>>)> = if options.tables.is_empty() {
        own.keys().map(|t| (t.clone(), None)).collect()
    } else {
        options
            .tables
            .iter()
            .map(|t| (t.name.clone(), t.primary_key.clone()))
            .collect()
    };
    for (table, configured) in tables {
        if let Some(key) = configured.or_else(|| own.get(&table).cloned()) {
            keys.insert(
                super::namespace_of(&format!("{}.{table}", options.schema)),
                key,
            );
        }
    }
    Ok(keys)
}

/// [`table_keys`] on a runtime of its own, for callers outside one.
pub fn table_keys_blocking(
    options: &PostgresSourceOptions,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, SourceError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SourceError::Postgres {
            server: options.server.clone(),
            table: None,
            message: format!("cannot start a runtime: {e}"),
            retryable: false,
        })?;
    runtime.block_on(table_keys(options))
}

/// Read every planned table (or the query) inside one snapshot, sending pages to `tx`.
/// Ends quietly when the receiver is gone.
/// With `filter`, the snapshot's visible transactions and WAL position are sent there first
/// (for the change stream that follows it).
pub(super) async fn run(
    options: PostgresSourceOptions,
    plans: Vec<Plan>,
    tx: mpsc::Sender<Message>,
    filter: Option<tokio::sync::oneshot::Sender<SnapshotFilter>>,
) {
    if let Err(e) = read_all(&options, &plans, &tx, filter).await {
        let _ = tx.send(Err(e)).await;
    }
}

async fn read_all(
    options: &PostgresSourceOptions,
    plans: &[Plan],
    tx: &mpsc::Sender<Message>,
    filter: Option<tokio::sync::oneshot::Sender<SnapshotFilter>>,
) -> Result<(), SourceError> {
    // Shared with the task that reads a table's COPY while the page before is decoded.
    let client = std::sync::Arc::new(connect(options).await?);
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(|e| pg_error(options, None, "cannot begin the snapshot", &e))?;
    let snapshot: String = client
        .query_one("SELECT pg_export_snapshot()", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| pg_error(options, None, "cannot export the snapshot", &e))?;
    tracing::debug!(server = %options.server, %snapshot, "PostgreSQL snapshot taken");
    if let Some(filter) = filter {
        // In the snapshot's transaction: what it sees, and the WAL position after it.
        let row = client
            .query_one(
                "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text",
                &[],
            )
            .await
            .map_err(|e| pg_error(options, None, "cannot read the snapshot's position", &e))?;
        let read = |e| pg_error(options, None, "cannot read the snapshot's position", &e);
        let seen: String = row.try_get(0).map_err(read)?;
        let lsn: String = row.try_get(1).map_err(read)?;
        let parsed = super::pgoutput::parse_lsn(&lsn)
            .and_then(|lsn| SnapshotFilter::parse(&seen, lsn))
            .ok_or_else(|| SourceError::Postgres {
                server: options.server.clone(),
                table: None,
                message: format!("cannot read the snapshot `{seen}` at `{lsn}`"),
                retryable: false,
            })?;
        let _ = filter.send(parsed);
    }
    let mut out = Out { tx, held: None };
    for (index, plan) in plans.iter().enumerate() {
        if plan.start.done {
            continue;
        }
        let sent = match &options.query {
            Some(query) => read_query(&client, options, index, plan, query, &mut out).await?,
            None => read_table(&client, options, index, plan, &mut out).await?,
        };
        if !sent {
            return Ok(());
        }
        out.table_end(index);
    }
    let _ = client.batch_execute("COMMIT").await;
    out.finish().await;
    Ok(())
}

/// A table's columns: name, type, decoder (`None`: read as `::text`).
struct Column {
    name: String,
    ty: Type,
    decoder: Option<Decoder>,
    /// The type inference gives the column (from its decoder and type modifier).
    declared: Option<Declared>,
}

async fn columns_of(
    client: &Client,
    options: &PostgresSourceOptions,
    table: &str,
    from: &str,
) -> Result<Vec<Column>, SourceError> {
    let statement = client
        .prepare(&format!("SELECT * FROM {from} LIMIT 0"))
        .await
        .map_err(|e| pg_error(options, Some(table), "cannot read the columns", &e))?;
    // The type modifiers (`numeric(p, s)`) of the columns read straight from a table.
    let mut typmods: HashMap<(u32, i16), i32> = HashMap::new();
    let tables: BTreeSet<u32> = statement
        .columns()
        .iter()
        .filter(|c| *c.type_() == Type::NUMERIC)
        .filter_map(tokio_postgres::Column::table_oid)
        .collect();
    for oid in tables {
        let rows = client
            .query(
                "SELECT attnum, atttypmod FROM pg_attribute WHERE attrelid = $1 AND attnum > 0",
                &[&oid],
            )
            .await
            .map_err(|e| pg_error(options, Some(table), "cannot read the column types", &e))?;
        for row in rows {
            let (Ok(attnum), Ok(typmod)) = (row.try_get::<_, i16>(0), row.try_get::<_, i32>(1))
            else {
                continue;
            };
            typmods.insert((oid, attnum), typmod);
        }
    }
    let columns = statement
        .columns()
        .iter()
        .map(|c| {
            let decoder = Decoder::for_type(c.type_());
            let typmod = c
                .table_oid()
                .zip(c.column_id())
                .and_then(|at| typmods.get(&at).copied())
                .unwrap_or(-1);
            let declared = decoder.as_ref().and_then(|d| d.declared(typmod));
            if decoder.is_none() {
                tracing::warn!(
                    table,
                    column = c.name(),
                    r#type = c.type_().name(),
                    "column `{}` of `{table}` has type `{}`, which this source does not map: it is read as its text",
                    c.name(),
                    c.type_().name()
                );
            }
            Column {
                name: c.name().to_owned(),
                ty: c.type_().clone(),
                decoder,
                declared,
            }
        })
        .collect();
    Ok(columns)
}

/// The primary key columns of `schema.table`, in key order (empty when it has none).
async fn primary_key(
    client: &Client,
    options: &PostgresSourceOptions,
    table: &str,
    name: &str,
) -> Result<Vec<String>, SourceError> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
             WHERE i.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass \
             AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)",
            &[&options.schema, &name],
        )
        .await
        .map_err(|e| pg_error(options, Some(table), "cannot read the primary key", &e))?;
    rows.iter()
        .map(|row| row.try_get::<_, String>(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(options, Some(table), "cannot read the primary key", &e))
}

/// The SQL name of a type, schema-qualified, for a cast.
fn type_name(ty: &Type) -> String {
    format!("{}.{}", ident(ty.schema()), ident(ty.name()))
}

/// Read one table from its start key, page by page. `Ok(false)`: the receiver is gone.
async fn read_table(
    client: &std::sync::Arc<Client>,
    options: &PostgresSourceOptions,
    index: usize,
    plan: &Plan,
    out: &mut Out<'_>,
) -> Result<bool, SourceError> {
    let table = plan.name.as_str();
    let config = &options.tables[index];
    let from = format!("{}.{}", ident(&options.schema), ident(&config.name));
    let exists = client
        .query_one(
            "SELECT to_regclass(quote_ident($1) || '.' || quote_ident($2)) IS NOT NULL",
            &[&options.schema, &config.name],
        )
        .await
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| pg_error(options, Some(table), "cannot look the table up", &e))?;
    if !exists {
        return Err(SourceError::Postgres {
            server: options.server.clone(),
            table: Some(table.to_owned()),
            message: format!(
                "no such table in schema `{}` (or the user may not see it)",
                options.schema
            ),
            retryable: false,
        });
    }
    let columns = columns_of(client, options, table, &from).await?;
    let find = |name: &str| columns.iter().position(|c| c.name == name);
    let pk = match &config.primary_key {
        Some(pk) => pk.clone(),
        None => primary_key(client, options, table, &config.name).await?,
    };
    // The key columns (name, cast type, and where the client finds its text), in order. A key
    // whose text the client cannot write as the server does is read a second time, as the
    // server's text (`skipprd_key_{i}`, after the table's columns).
    let mut key: Vec<(String, String, KeyText)> = Vec::new();
    let mut extra = columns.len();
    let mut server_text = || {
        extra += 1;
        KeyText::Server(extra - 1)
    };
    let named = config
        .cursor_field
        .iter()
        .map(|name| (name, "cursor_field"))
        .chain(pk.iter().map(|name| (name, "primary_key")));
    for (name, named_by) in named {
        let Some(at) = find(name) else {
            return Err(missing_column(options, table, named_by, name));
        };
        let ty = &columns[at].ty;
        key.push((
            format!("skipprd_t.{}", ident(name)),
            type_name(ty),
            KeyText::of_column(ty, at).unwrap_or_else(&mut server_text),
        ));
    }
    if pk.is_empty() {
        if config.cursor_field.is_some() {
            return Err(SourceError::Postgres {
                server: options.server.clone(),
                table: Some(table.to_owned()),
                message: "has no primary key, which incremental reading needs to order rows that share a cursor value: give `primary_key` in its `tables` entry".into(),
                retryable: false,
            });
        }
        key.push((
            "skipprd_t.ctid".into(),
            "pg_catalog.tid".into(),
            server_text(),
        ));
    }
    if plan
        .start
        .key
        .as_ref()
        .is_some_and(|k| k.len() != key.len())
    {
        return Err(SourceError::Postgres {
            server: options.server.clone(),
            table: Some(table.to_owned()),
            message: "the checkpoint's key has another number of columns than the table's key"
                .into(),
            retryable: false,
        });
    }
    let select: Vec<String> = columns
        .iter()
        .map(|c| match c.decoder {
            Some(_) => format!("skipprd_t.{}", ident(&c.name)),
            None => format!("skipprd_t.{}::text", ident(&c.name)),
        })
        .chain(
            key.iter()
                .filter(|(_, _, text)| matches!(text, KeyText::Server(_)))
                .enumerate()
                .map(|(i, (name, _, _))| format!("{name}::text AS skipprd_key_{i}")),
        )
        .collect();
    let key_list = key
        .iter()
        .map(|(n, _, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let not_null = config
        .cursor_field
        .as_ref()
        .map(|c| format!("skipprd_t.{} IS NOT NULL", ident(c)));
    // After the checkpoint's key: a COPY takes no parameters, so the key is written as
    // literals (cast from text, as the checkpoint holds it).
    let after = plan.start.key.as_ref().map(|start| {
        let values = start
            .iter()
            .zip(&key)
            .map(|(text, (_, ty, _))| format!("{}::text::{ty}", literal(text)))
            .collect::<Vec<_>>()
            .join(", ");
        format!("({key_list}) > ({values})")
    });
    let conditions: Vec<String> = not_null.into_iter().chain(after).collect();
    let mut sql = format!("SELECT {} FROM {from} AS skipprd_t", select.join(", "));
    if !conditions.is_empty() {
        sql.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
    }
    sql.push_str(&format!(" ORDER BY {key_list}"));
    if let Some(most) = options.sample_rows {
        sql.push_str(&format!(" LIMIT {most}"));
    }
    // The table's rows in key order are read by one statement per pass: an index scan in
    // key order when an index gives that order, which the planner is told to prefer over
    // sorting the table (`enable_sort` off, for this transaction), so rows stream from the
    // first and the server holds no sort of the table.
    client
        .batch_execute("SET LOCAL enable_sort = off")
        .await
        .map_err(|e| pg_error(options, Some(table), "cannot set the read up", &e))?;
    let decoders: Vec<Decoder> = columns
        .iter()
        .map(|c| c.decoder.clone().unwrap_or(Decoder::Text))
        .collect();
    let names: Arc<[String]> = columns.iter().map(|c| c.name.clone()).collect();
    // The text of the last page: the next one's is about as long.
    let mut text_hint = 0;
    let mut pages = read_copy(
        Arc::clone(client),
        format!("COPY ({sql}) TO STDOUT (FORMAT binary)"),
        CopyPages::new(extra, options.batch_rows, PAGE_BYTES),
    );
    let failed = |message: String, retryable: bool| SourceError::Postgres {
        server: options.server.clone(),
        table: Some(table.to_owned()),
        message,
        retryable,
    };
    let key_of = |row: CopyRow<'_>| -> Result<Vec<String>, SourceError> {
        key.iter()
            .map(|(_, _, text)| {
                text.of_row(&row)
                    .map(Option::unwrap_or_default)
                    .map_err(|why| failed(format!("cannot read a key: {why}"), false))
            })
            .collect()
    };
    while let Some(page) = pages.next().await {
        let page = match page {
            Ok(page) => page,
            Err(Fetch::Server(e)) => {
                return Err(pg_error(options, Some(table), "cannot read rows", &e));
            }
            Err(Fetch::Stopped(why)) => {
                return Err(failed(format!("the table's reader stopped: {why}"), true));
            }
            Err(Fetch::Data(why)) => {
                let message = format!("cannot read the server's binary COPY data: {why}");
                return Err(failed(message, false));
            }
        };
        let rows = page.rows();
        let last_key = rows
            .checked_sub(1)
            .map(|last| key_of(page.row(last)))
            .transpose()?;
        let chunk = Chunk {
            table: index,
            rows: decode_page(
                options,
                table,
                (&columns, &decoders, &names),
                (0..rows).map(|row| page.row(row)),
                &mut text_hint,
            )?,
            last_key,
            end: false,
            last_of_pass: false,
        };
        pages.recycle(page);
        if !out.push(chunk).await {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Where the text of a key column (the checkpoint's) comes from. The server's text cast of
/// every row's key cost the benchmark's server a fifth more CPU (10M rows: 2.2 s of 9.9 s),
/// and only each page's last row needs it: the types whose decoded value is exactly the
/// server's text are decoded from the row's own value.
#[derive(Debug, Clone)]
enum KeyText {
    /// The server's text, in this column of the row.
    Server(usize),
    /// The value in this column, decoded: `int2`, `int4` and `int8` (digits), `text` and
    /// `varchar` (the text itself), `uuid` (lowercase, hyphenated), as the server writes them.
    Decoded(usize, Decoder),
}

impl KeyText {
    /// The text of the key column at index `at` of the row, of type `ty`, decoded by the
    /// client when its decoded value is the server's text; `None` otherwise.
    fn of_column(ty: &Type, at: usize) -> Option<KeyText> {
        [
            Type::INT2,
            Type::INT4,
            Type::INT8,
            Type::TEXT,
            Type::VARCHAR,
            Type::UUID,
        ]
        .contains(ty)
        .then(|| Decoder::for_type(ty).map(|decoder| KeyText::Decoded(at, decoder)))
        .flatten()
    }

    /// The key's text in `row` (`None` for NULL).
    fn of_row(&self, row: &impl RawRow) -> Result<Option<String>, String> {
        match self {
            KeyText::Server(at) => row
                .raw(*at)?
                .map(|bytes| {
                    String::from_utf8(bytes.to_vec())
                        .map_err(|_| "a key's text is not UTF-8".into())
                })
                .transpose(),
            KeyText::Decoded(at, decoder) => row
                .raw(*at)?
                .map(|bytes| match decoder.decode(bytes)? {
                    Value::String(text) => Ok(text),
                    other => Ok(other.to_string()),
                })
                .transpose(),
        }
    }
}

fn missing_column(
    options: &PostgresSourceOptions,
    table: &str,
    key: &str,
    column: &str,
) -> SourceError {
    SourceError::Postgres {
        server: options.server.clone(),
        table: Some(table.to_owned()),
        message: format!("has no column `{column}` (named by `{key}`)"),
        retryable: false,
    }
}

/// A page of rows: typed cells when the options ask for them (and the names are distinct),
/// else records.
fn decode_page(
    options: &PostgresSourceOptions,
    table: &str,
    (columns, decoders, names): (&[Column], &[Decoder], &Arc<[String]>),
    rows: impl ExactSizeIterator<Item = impl RawRow>,
    text_hint: &mut usize,
) -> Result<Rows, SourceError> {
    // Before a change stream, each row also carries the change columns of a snapshot read
    // (a sampling read, `discover`'s, never streams).
    let streamed = options.cdc.is_some() && options.sample_rows.is_none();
    let declared = columns.iter().map(|c| c.declared);
    let cells = options
        .typed_cells
        .then(|| match streamed {
            false => {
                CellPage::new(Arc::clone(names)).map(|page| page.with_declared(declared.collect()))
            }
            true => CellPage::new(
                names
                    .iter()
                    .cloned()
                    .chain([OP, LSN, COMMIT_LSN, COMMIT_TS].map(String::from))
                    .collect(),
            )
            .map(|page| page.with_declared(declared.chain(CHANGE_COLUMN_TYPES).collect())),
        })
        .flatten();
    let Some(mut page) = cells else {
        return rows
            .map(|row| record(options, table, columns, decoders, &row))
            .collect::<Result<Vec<_>, _>>()
            .map(Rows::Json);
    };
    // Sized once: growing the page's buffers copied them over and over (memmove was 8% of
    // the Postgres benchmark's profile).
    page.reserve(rows.len(), *text_hint);
    for row in rows {
        each_value(
            options,
            table,
            columns,
            decoders,
            &row,
            |_, decoder, raw| match raw {
                None => {
                    page.push_null();
                    Ok(())
                }
                Some(bytes) => decoder.decode_cell(bytes, &mut page),
            },
        )?;
        if streamed {
            page.push_text(SNAPSHOT_OP)
                .map_err(|e| SourceError::Postgres {
                    server: options.server.clone(),
                    table: Some(table.to_owned()),
                    message: format!("cannot add a row's change columns: {e}"),
                    retryable: false,
                })?;
            page.push_long(0);
            page.push_long(0);
            page.push_null();
        }
    }
    *text_hint = page.text_len();
    Ok(Rows::Cells {
        page: Arc::new(page),
        changes: streamed,
    })
}

/// One row as a record, columns in table order.
fn record(
    options: &PostgresSourceOptions,
    table: &str,
    columns: &[Column],
    decoders: &[Decoder],
    row: &impl RawRow,
) -> Result<Map<String, Value>, SourceError> {
    let mut out = Map::with_capacity(columns.len());
    each_value(
        options,
        table,
        columns,
        decoders,
        row,
        |column, decoder, raw| {
            let value = match raw {
                None => Value::Null,
                Some(bytes) => decoder.decode(bytes)?,
            };
            out.insert(column.name.clone(), value);
            Ok(())
        },
    )?;
    Ok(out)
}

/// Hand each column of `row`, its decoder and its raw value (`None` for NULL) to `take`, in
/// table order; an error of `take` fails the row, naming the column.
fn each_value(
    options: &PostgresSourceOptions,
    table: &str,
    columns: &[Column],
    decoders: &[Decoder],
    row: &impl RawRow,
    mut take: impl FnMut(&Column, &Decoder, Option<&[u8]>) -> Result<(), String>,
) -> Result<(), SourceError> {
    let failed = |message: String| SourceError::Postgres {
        server: options.server.clone(),
        table: Some(table.to_owned()),
        message,
        retryable: false,
    };
    for (i, (column, decoder)) in columns.iter().zip(decoders).enumerate() {
        let raw = row.raw(i).map_err(|why| {
            failed(format!(
                "cannot read the value of column `{}`: {why}",
                column.name
            ))
        })?;
        take(column, decoder, raw)
            .map_err(|why| failed(format!("cannot decode column `{}`: {why}", column.name)))?;
    }
    Ok(())
}

/// Read the custom query with a cursor, skipping the rows a resumed pass handed out already.
async fn read_query(
    client: &Client,
    options: &PostgresSourceOptions,
    index: usize,
    plan: &Plan,
    query: &str,
    out: &mut Out<'_>,
) -> Result<bool, SourceError> {
    let table = plan.name.as_str();
    // A trailing `;` is common in hand-written SQL and would end the wrapping SELECT.
    let query = query.trim().trim_end_matches(';');
    let from = format!("({query}) AS skipprd_query");
    let columns = columns_of(client, options, table, &from).await?;
    let select: Vec<String> = columns
        .iter()
        .map(|c| match c.decoder {
            Some(_) => format!("skipprd_query.{}", ident(&c.name)),
            None => format!("skipprd_query.{}::text", ident(&c.name)),
        })
        .collect();
    client
        .batch_execute(&format!(
            "DECLARE skipprd_cursor NO SCROLL CURSOR FOR SELECT {} FROM {from}",
            select.join(", ")
        ))
        .await
        .map_err(|e| pg_error(options, Some(table), "cannot open the query", &e))?;
    if plan.start.rows > 0 {
        client
            .batch_execute(&format!(
                "MOVE FORWARD {} IN skipprd_cursor",
                plan.start.rows
            ))
            .await
            .map_err(|e| pg_error(options, Some(table), "cannot skip rows", &e))?;
    }
    let fetch = client
        .prepare(&format!(
            "FETCH FORWARD {} FROM skipprd_cursor",
            options.batch_rows
        ))
        .await
        .map_err(|e| pg_error(options, Some(table), "cannot prepare the fetch", &e))?;
    let decoders: Vec<Decoder> = columns
        .iter()
        .map(|c| c.decoder.clone().unwrap_or(Decoder::Text))
        .collect();
    let names: Arc<[String]> = columns.iter().map(|c| c.name.clone()).collect();
    // The text of the last page: the next one's is about as long.
    let mut text_hint = 0;
    let mut read = 0usize;
    loop {
        let rows = client
            .query(&fetch, &[])
            .await
            .map_err(|e| pg_error(options, Some(table), "cannot read rows", &e))?;
        read += rows.len();
        let end =
            rows.len() < options.batch_rows || options.sample_rows.is_some_and(|most| read >= most);
        let chunk = Chunk {
            table: index,
            rows: decode_page(
                options,
                table,
                (&columns, &decoders, &names),
                rows.iter(),
                &mut text_hint,
            )?,
            last_key: None,
            end: false,
            last_of_pass: false,
        };
        if !out.push(chunk).await {
            return Ok(false);
        }
        if end {
            return Ok(true);
        }
    }
}
