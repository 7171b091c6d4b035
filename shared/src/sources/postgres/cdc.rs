//! The change stream of the Postgres source (`cdc_mode: snapshot_then_cdc | cdc_only`):
//! logical replication through a slot with the `pgoutput` plugin, read over an ordinary
//! connection by the SQL function `pg_logical_slot_peek_binary_changes`.
//!
//! # Exactly once
//!
//! Changes are *peeked*, never consumed: the slot's confirmed position moves only at the start
//! of a pass, by `pg_replication_slot_advance`, to the position of the checkpoint the pass
//! resumes from, which is the one committed with the last WAL batch. So the slot never
//! confirms a change that is not in the WAL, and after a crash the changes after the last
//! committed batch are decoded again and handed out from exactly where that batch ended:
//! [`CdcAt`] holds `confirmed` (every transaction whose commit record starts before it has
//! been handed out, PostgreSQL's own rule for a slot) and, for a transaction handed out
//! part-way, its commit LSN and how many of its records were handed out.
//!
//! # Snapshot, then stream
//!
//! The publication is made (when missing) before the slot, and the slot before the snapshot;
//! the snapshot's transaction records which transactions it sees (`pg_current_snapshot()`)
//! and the WAL insert position. A transaction the stream brings whose commit record lies
//! before that position and which the snapshot saw is skipped (its rows are in the
//! snapshot); every other one is delivered. So nothing falls between the snapshot and the
//! stream and nothing is in both. A crash during the snapshot resumes the table being read
//! after its last key in a new snapshot: a row that changed in that gap can then appear both
//! in the snapshot rows and as its change (a `merge_by_key` destination converges; an append
//! one holds the row twice).
//!
//! # Records
//!
//! A change becomes a record of its table's columns (text form decoded as the snapshot
//! decodes the binary form) plus `_op` (`c` insert, `u` update, `d` delete, `t` truncate, `r`
//! a snapshot row), `_lsn` (the change's own WAL position), `_commit_lsn` (its transaction's
//! commit, the order changes apply in; both 0 for snapshot rows, which come before every
//! change) and `_commit_ts` (UTC). A delete carries the replica identity's columns (the
//! primary key, or every column under `REPLICA IDENTITY FULL`); an update that changes the key
//! is a delete of the old key then the update. A large value stored out of line (TOASTed)
//! that an update did not touch is not sent by PostgreSQL under the default replica
//! identity: the record lacks the column and names it in `_unchanged` (comma-separated), and
//! a merging destination refuses such a record rather than overwrite the value with NULL;
//! under `REPLICA IDENTITY FULL` the old row supplies it.
//!
//! # Passes
//!
//! A pass reads in rounds: each decodes the slot up to the current flushed WAL position. The
//! pass ends once a round brings nothing new and no change has come for
//! `cdc_idle_timeout_seconds`, or after ten times that, or after a round once it has handed
//! out 200,000 changes (each round decodes again from the slot's confirmed position, which
//! only the next pass moves), or after the round in hand on a stop request (SIGTERM, a
//! Lambda pass's deadline).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tokio_postgres::types::{PgLsn, ToSql, Type};

mod typed;

use self::typed::{Shape, typed_row};
use super::PostgresSourceOptions;
use super::decode::{Decoder, RawValue, timestamp};
use super::pgoutput::{self, Cell, Message};
use super::reader::{connect, ident, list_tables, pg_error};
use crate::sources::SourceError;
use crate::sources::cells::{CellRow, Declared};

/// The operation column.
pub const OP: &str = "_op";
/// The operation of a row read by the snapshot before the stream.
pub const SNAPSHOT_OP: &str = "r";
/// The declared types of [`OP`], [`LSN`], [`COMMIT_LSN`] and [`COMMIT_TS`], in that order.
pub const CHANGE_COLUMN_TYPES: [Option<Declared>; 4] = [
    None,
    Some(Declared::Long),
    Some(Declared::Long),
    Some(Declared::Timestamp),
];
/// The change's own WAL position.
pub const LSN: &str = "_lsn";
/// Its transaction's commit position.
pub const COMMIT_LSN: &str = "_commit_lsn";
/// Its transaction's commit time.
pub const COMMIT_TS: &str = "_commit_ts";
/// The columns an update did not carry (unchanged values stored out of line, under the
/// default replica identity), comma-separated; absent when it carried all.
pub const UNCHANGED: &str = "_unchanged";

/// Where the change stream stands: part of the source's checkpoint.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CdcAt {
    /// The replication slot.
    pub slot: String,
    /// The snapshot of `snapshot_then_cdc` is still to be read (or finished).
    pub snapshot_pending: bool,
    /// Every transaction whose commit record starts before this LSN has been handed out.
    pub confirmed: u64,
    /// A transaction handed out part-way.
    pub partial: Option<Partial>,
    /// The snapshot the first transactions of the stream are checked against.
    pub snapshot: Option<SnapshotFilter>,
}

/// A transaction handed out part-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    /// Where its commit record starts.
    pub commit_lsn: u64,
    /// Its records handed out.
    pub records: u64,
}

/// The transactions a snapshot saw (`pg_current_snapshot()`, 64-bit ids) and the WAL insert
/// position just after it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFilter {
    /// Every transaction below it had finished.
    pub xmin: u64,
    /// No transaction at or above it had finished.
    pub xmax: u64,
    /// Transactions between that were still running.
    pub xip: Vec<u64>,
    /// A transaction the snapshot saw has its commit record before this LSN.
    pub lsn: u64,
}

impl SnapshotFilter {
    /// From `pg_current_snapshot()`'s text (`xmin:xmax:xip,...`) and an LSN.
    pub(crate) fn parse(snapshot: &str, lsn: u64) -> Option<SnapshotFilter> {
        let mut parts = snapshot.trim().split(':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let xip = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<Vec<u64>>>()?,
        };
        parts.next().is_none().then_some(SnapshotFilter {
            xmin,
            xmax,
            xip,
            lsn,
        })
    }

    /// Whether the snapshot saw the transaction with the 32-bit id `xid` (placed in the epoch
    /// around `xmax`) as committed.
    pub(crate) fn saw(&self, xid: u32) -> bool {
        let epoch = self.xmax >> 32;
        let mut full = (epoch << 32) | u64::from(xid);
        if full > self.xmax.saturating_add(1 << 31) && full >= 1 << 32 {
            full -= 1 << 32;
        } else if full.saturating_add(1 << 31) < self.xmax {
            full += 1 << 32;
        }
        full < self.xmin || (full < self.xmax && !self.xip.contains(&full))
    }
}

/// One record of the stream.
#[derive(Debug)]
pub(super) struct Change {
    /// `schema.table`.
    pub table: String,
    /// The change's LSN (its `_lsn`).
    pub lsn: u64,
    /// Its values: as typed cells (with the options' `typed_cells`, and names that do not
    /// repeat; `value` is then empty), else as a JSON object.
    pub cells: Option<CellRow>,
    /// Its values as a JSON object, unless `cells` holds them.
    pub value: Map<String, Value>,
}

/// Records of the stream and the position after the last of them.
#[derive(Debug)]
pub(super) struct Changes {
    /// In stream order.
    pub records: Vec<Change>,
    /// Where the stream stands after them.
    pub at: CdcAt,
}

/// What the stream task sends.
pub(super) type StreamMessage = Result<Changes, SourceError>;

/// A pass that has handed out this many changes ends after its round (see the module docs).
const ROUNDS_RECORDS_MAX: u64 = 200_000;

/// The stream's settings.
#[derive(Debug, Clone)]
pub(crate) struct StreamOptions {
    /// The publication.
    pub publication: String,
    /// A pass ends after this long without a change.
    pub idle: Duration,
    /// ... or after the round in hand on a stop request.
    pub stop: crate::sources::StopRequest,
}

fn failed(options: &PostgresSourceOptions, message: String, retryable: bool) -> SourceError {
    SourceError::Postgres {
        server: options.server.clone(),
        table: None,
        message,
        retryable,
    }
}

/// Before a pass of the stream: check `wal_level`, make the publication when missing (before
/// the slot, whose decoding needs it), check it publishes the tables, make the slot when
/// missing and move it to the committed position `at` (`None`: the stream starts now).
/// Returns the position the pass starts from.
pub(super) async fn prepare(
    options: &PostgresSourceOptions,
    stream: &StreamOptions,
    slot: &str,
    at: Option<CdcAt>,
) -> Result<CdcAt, SourceError> {
    let client = connect(options).await?;
    let level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| pg_error(options, None, "cannot read wal_level", &e))?;
    if level != "logical" {
        return Err(failed(
            options,
            format!(
                "CDC needs `wal_level = logical`, the server has `{level}`: run `ALTER SYSTEM SET wal_level = logical` and restart PostgreSQL"
            ),
            false,
        ));
    }
    publication(&client, options, stream).await?;
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text, plugin::text, database::text = current_database() \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| pg_error(options, None, "cannot look the replication slot up", &e))?;
    let read = |e| pg_error(options, None, "cannot read the replication slot", &e);
    let existing = match row {
        None => None,
        Some(row) => {
            let confirmed: Option<String> = row.try_get(0).map_err(read)?;
            let plugin: Option<String> = row.try_get(1).map_err(read)?;
            let here: Option<bool> = row.try_get(2).map_err(read)?;
            if plugin.as_deref() != Some("pgoutput") || here != Some(true) {
                return Err(failed(
                    options,
                    format!(
                        "replication slot `{slot}` exists but is not a `pgoutput` slot of this database: choose another `replication_slot_name`"
                    ),
                    false,
                ));
            }
            Some(
                confirmed
                    .as_deref()
                    .and_then(pgoutput::parse_lsn)
                    .unwrap_or(0),
            )
        }
    };
    match (at, existing) {
        (None, Some(confirmed)) => {
            tracing::info!(slot, at = %pgoutput::lsn_text(confirmed), "CDC starts at the existing replication slot's position");
            Ok(CdcAt {
                slot: slot.to_owned(),
                confirmed,
                ..CdcAt::default()
            })
        }
        (None, None) => {
            let lsn: String = client
                .query_one(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&slot],
                )
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| {
                    pg_error(
                        options,
                        None,
                        "cannot create the replication slot (the user needs the REPLICATION attribute, and max_replication_slots a free slot)",
                        &e,
                    )
                })?;
            let confirmed = pgoutput::parse_lsn(&lsn).unwrap_or(0);
            tracing::info!(slot, at = %lsn, "created the replication slot");
            Ok(CdcAt {
                slot: slot.to_owned(),
                confirmed,
                ..CdcAt::default()
            })
        }
        (Some(at), None) => Err(failed(
            options,
            format!(
                "replication slot `{slot}` is gone: the changes after {} can no longer be read; reset the pipeline (`skipprd query` `RESET PIPELINE`) to take a new snapshot",
                pgoutput::lsn_text(at.confirmed)
            ),
            false,
        )),
        (Some(at), Some(confirmed)) => {
            if at.confirmed > confirmed {
                client
                    .query_one(
                        "SELECT end_lsn::text FROM pg_replication_slot_advance($1, $2::text::pg_lsn)",
                        &[&slot, &pgoutput::lsn_text(at.confirmed)],
                    )
                    .await
                    .map_err(|e| pg_error(options, None, "cannot advance the replication slot", &e))?;
            } else if at.confirmed < confirmed && !at.snapshot_pending {
                return Err(failed(
                    options,
                    format!(
                        "replication slot `{slot}` has confirmed up to {} but this pipeline has committed changes only up to {}: another reader consumed the changes between; reset the pipeline to take a new snapshot",
                        pgoutput::lsn_text(confirmed),
                        pgoutput::lsn_text(at.confirmed)
                    ),
                    false,
                ));
            }
            Ok(at)
        }
    }
}

/// Make the publication for the tables when missing, and check it publishes each of them.
async fn publication(
    client: &Client,
    options: &PostgresSourceOptions,
    stream: &StreamOptions,
) -> Result<(), SourceError> {
    let name = &stream.publication;
    let tables: Vec<String> = if options.tables.is_empty() {
        list_tables(client, options).await?
    } else {
        options.tables.iter().map(|t| t.name.clone()).collect()
    };
    let exists = client
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[name])
        .await
        .map_err(|e| pg_error(options, None, "cannot look the publication up", &e))?
        .is_some();
    if !exists {
        if tables.is_empty() {
            return Err(failed(
                options,
                format!("schema `{}` has no tables to publish", options.schema),
                false,
            ));
        }
        // An UPDATE or DELETE on a published table without a replica identity fails in
        // PostgreSQL: never make the user's writes fail, say what to do instead.
        let rows = client
            .query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = ANY($2) AND (c.relreplident = 'n' OR (c.relreplident = 'd' \
                 AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary))) \
                 ORDER BY 1",
                &[&options.schema, &tables],
            )
            .await
            .map_err(|e| pg_error(options, None, "cannot read the tables' replica identity", &e))?;
        if let Some(row) = rows.first() {
            let table: String = row
                .try_get(0)
                .map_err(|e| pg_error(options, None, "cannot read a table name", &e))?;
            return Err(SourceError::Postgres {
                server: options.server.clone(),
                table: Some(format!("{}.{table}", options.schema)),
                message: format!(
                    "has no replica identity (no primary key, or REPLICA IDENTITY NOTHING): published, its UPDATEs and DELETEs would fail; run `ALTER TABLE {}.{} REPLICA IDENTITY FULL` (or add a primary key) first",
                    ident(&options.schema),
                    ident(&table)
                ),
                retryable: false,
            });
        }
        let list = tables
            .iter()
            .map(|t| format!("{}.{}", ident(&options.schema), ident(t)))
            .collect::<Vec<_>>()
            .join(", ");
        client
            // Partitioned tables publish their changes under the parent's name.
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE {list} WITH (publish_via_partition_root = true)",
                ident(name)
            ))
            .await
            .map_err(|e| {
                pg_error(
                    options,
                    None,
                    &format!("cannot create publication `{name}` (it needs the tables' owner; or create it and give `publication_name`)"),
                    &e,
                )
            })?;
        tracing::info!(publication = %name, tables = %list, "created the publication");
    }
    let published: BTreeSet<String> = client
        .query(
            "SELECT tablename::text FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2",
            &[name, &options.schema],
        )
        .await
        .map_err(|e| pg_error(options, None, "cannot read the publication's tables", &e))?
        .iter()
        .map(|row| row.try_get::<_, String>(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(options, None, "cannot read the publication's tables", &e))?;
    if let Some(missing) = tables.iter().find(|t| !published.contains(*t)) {
        return Err(SourceError::Postgres {
            server: options.server.clone(),
            table: Some(format!("{}.{missing}", options.schema)),
            message: format!(
                "is not in publication `{name}`: run `ALTER PUBLICATION {} ADD TABLE {}.{}`",
                ident(name),
                ident(&options.schema),
                ident(missing)
            ),
            retryable: false,
        });
    }
    Ok(())
}

/// A table of the stream, from its `Relation` message.
struct Table {
    /// `schema.table`.
    name: String,
    /// One of the source's tables (others in the publication are passed over).
    wanted: bool,
    /// Per column: name, decoder (`None`: its text as a string), part of the key.
    columns: Vec<(String, Option<Decoder>, bool)>,
    /// Per column, the type inference gives it (see [`Decoder::declared`]).
    declared: Vec<Option<Declared>>,
    /// The shape of the last change record typed (see [`typed_row`]).
    shape: Option<Shape>,
    /// The columns of its primary key (indices into `columns`).
    primary: Vec<usize>,
}

/// The transaction being read.
struct Txn {
    commit_lsn: u64,
    commit_ts: Value,
    /// Pass over it: handed out before, or seen by the snapshot.
    skip: bool,
    /// Records of it so far, and how many of those were handed out before.
    records: u64,
    handed_out_before: u64,
}

/// Read changes from `start` until the pass ends (see the module docs), sending them in
/// chunks of `batch_rows`, each with the position after it. Ends quietly when the receiver
/// is gone.
pub(super) async fn run(
    options: PostgresSourceOptions,
    stream: StreamOptions,
    start: CdcAt,
    tx: mpsc::Sender<StreamMessage>,
) {
    if let Err(e) = read(&options, &stream, start, &tx).await {
        let _ = tx.send(Err(e)).await;
    }
}

struct Reader<'a> {
    options: &'a PostgresSourceOptions,
    catalog: Client,
    tables: HashMap<u32, Table>,
    types: HashMap<u32, Option<Decoder>>,
    wanted: Option<BTreeSet<String>>,
    at: CdcAt,
    txn: Option<Txn>,
    out: Vec<Change>,
    sent_at: CdcAt,
}

async fn read(
    options: &PostgresSourceOptions,
    stream: &StreamOptions,
    start: CdcAt,
    tx: &mpsc::Sender<StreamMessage>,
) -> Result<(), SourceError> {
    let client = connect(options).await?;
    let catalog = connect(options).await?;
    let peek = client
        .prepare(
            "SELECT lsn, data FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL, \
             'proto_version', '1', 'publication_names', $3)",
        )
        .await
        .map_err(|e| pg_error(options, None, "cannot prepare the change read", &e))?;
    let wanted = (!options.tables.is_empty()).then(|| {
        options
            .tables
            .iter()
            .map(|t| format!("{}.{}", options.schema, t.name))
            .collect()
    });
    let mut reader = Reader {
        options,
        catalog,
        tables: HashMap::new(),
        types: HashMap::new(),
        wanted,
        sent_at: start.clone(),
        at: start,
        txn: None,
        out: Vec::new(),
    };
    let publications = ident(&stream.publication);
    let started = Instant::now();
    let mut last_change = Instant::now();
    let mut handed_out = 0u64;
    let longest = stream.idle.saturating_mul(10);
    loop {
        let upto: String = reader
            .catalog
            .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| pg_error(options, None, "cannot read the WAL position", &e))?;
        let upto_lsn = pgoutput::parse_lsn(&upto).unwrap_or(0);
        let slot = reader.at.slot.clone();
        let params: [&(dyn ToSql + Sync); 3] = [&slot, &upto, &publications];
        let rows = client
            .query_raw(&peek, params)
            .await
            .map_err(|e| pg_error(options, None, "cannot read changes", &e))?;
        let mut rows = std::pin::pin!(rows);
        let mut new_records = 0u64;
        // Each round decodes again from the slot's confirmed position: new tables' Relation
        // messages come again too.
        reader.tables.clear();
        reader.txn = None;
        while let Some(row) = rows.next().await {
            let row = row.map_err(|e| pg_error(options, None, "cannot read changes", &e))?;
            let lsn: PgLsn = row
                .try_get(0)
                .map_err(|e| pg_error(options, None, "cannot read a change's LSN", &e))?;
            let data: RawValue<'_> = row
                .try_get(1)
                .map_err(|e| pg_error(options, None, "cannot read a change", &e))?;
            let message = pgoutput::parse(data.0).map_err(|why| {
                failed(
                    options,
                    format!("cannot decode a change at {lsn}: {why}"),
                    false,
                )
            })?;
            new_records += reader.message(u64::from(lsn), message).await?;
            if reader.out.len() >= options.batch_rows && !reader.send(tx).await {
                return Ok(());
            }
        }
        // Every transaction whose commit starts before `upto` came in this round.
        if reader.txn.is_none() && reader.at.partial.is_none() {
            reader.at.confirmed = reader.at.confirmed.max(upto_lsn);
        }
        if new_records > 0 {
            last_change = Instant::now();
            if !reader.send(tx).await {
                return Ok(());
            }
        }
        handed_out += new_records;
        // Each round decodes again from the pass's start: a pass that has handed out much
        // ends, so the next one confirms it to the slot and starts from there.
        if last_change.elapsed() >= stream.idle
            || started.elapsed() >= longest
            || handed_out >= ROUNDS_RECORDS_MAX
            || stream.stop.is_requested()
        {
            if reader.at != reader.sent_at {
                reader.send(tx).await;
            }
            return Ok(());
        }
        tokio::time::sleep(stream.idle.min(Duration::from_millis(500))).await;
    }
}

impl Reader<'_> {
    /// Send what is collected with the position after it; `false`: the receiver is gone.
    async fn send(&mut self, tx: &mpsc::Sender<StreamMessage>) -> bool {
        if let Some(filter) = &self.at.snapshot
            && self.at.confirmed >= filter.lsn
        {
            self.at.snapshot = None;
        }
        let changes = Changes {
            records: std::mem::take(&mut self.out),
            at: self.at.clone(),
        };
        self.sent_at = self.at.clone();
        tx.send(Ok(changes)).await.is_ok()
    }

    /// Take one message in; returns the records it handed out.
    async fn message(&mut self, lsn: u64, message: Message) -> Result<u64, SourceError> {
        match message {
            Message::Begin {
                final_lsn,
                commit_time,
                xid,
            } => {
                let seen = self
                    .at
                    .snapshot
                    .as_ref()
                    .is_some_and(|f| final_lsn < f.lsn && f.saw(xid));
                let handed_out_before = match self.at.partial {
                    Some(p) if p.commit_lsn == final_lsn => p.records,
                    _ => 0,
                };
                self.txn = Some(Txn {
                    commit_lsn: final_lsn,
                    commit_ts: Value::String(timestamp(commit_time, "Z")),
                    skip: final_lsn < self.at.confirmed || seen,
                    records: 0,
                    handed_out_before,
                });
                Ok(0)
            }
            Message::Commit { end_lsn, .. } => {
                if self.txn.take().is_some() {
                    self.at.confirmed = self.at.confirmed.max(end_lsn);
                    self.at.partial = None;
                }
                Ok(0)
            }
            Message::Relation(relation) => {
                let name = format!("{}.{}", relation.schema, relation.name);
                let wanted = relation.schema == self.options.schema
                    && self.wanted.as_ref().is_none_or(|w| w.contains(&name));
                let mut columns = Vec::with_capacity(relation.columns.len());
                let mut declared = Vec::with_capacity(relation.columns.len());
                for c in relation.columns {
                    let decoder = if wanted {
                        self.decoder(c.type_oid, &name, &c.name).await?
                    } else {
                        None
                    };
                    declared.push(decoder.as_ref().and_then(|d| d.declared(c.type_modifier)));
                    columns.push((c.name, decoder, c.key));
                }
                let primary = if wanted {
                    let names = self.primary_key(relation.id).await?;
                    columns
                        .iter()
                        .enumerate()
                        .filter(|(_, (n, _, _))| names.contains(n))
                        .map(|(i, _)| i)
                        .collect()
                } else {
                    Vec::new()
                };
                self.tables.insert(
                    relation.id,
                    Table {
                        name,
                        wanted,
                        columns,
                        declared,
                        primary,
                        shape: None,
                    },
                );
                Ok(0)
            }
            Message::Insert { relation, new } => {
                let Some(record) = self.row(relation, &new, None, false)? else {
                    return Ok(0);
                };
                Ok(self.emit(relation, record, "c", lsn))
            }
            Message::Update {
                relation,
                old,
                old_full,
                new,
            } => {
                let mut n = 0;
                if let Some(old) = &old
                    && self.key_changed(relation, old, old_full, &new)
                    && let Some(record) = self.row(relation, old, None, true)?
                {
                    n += self.emit(relation, record, "d", lsn);
                }
                // Only a whole old row (REPLICA IDENTITY FULL) has the values an update left
                // out; a key tuple's other cells are NULL placeholders.
                let fill = old.as_deref().filter(|_| old_full);
                if let Some(record) = self.row(relation, &new, fill, false)? {
                    n += self.emit(relation, record, "u", lsn);
                }
                Ok(n)
            }
            Message::Delete { relation, old } => {
                let Some(record) = self.row(relation, &old, None, true)? else {
                    return Ok(0);
                };
                Ok(self.emit(relation, record, "d", lsn))
            }
            Message::Truncate { relations } => {
                let mut n = 0;
                for relation in relations {
                    if self.tables.get(&relation).is_some_and(|t| t.wanted) {
                        n += self.emit(relation, Map::new(), "t", lsn);
                    }
                }
                Ok(n)
            }
            Message::Other(_) => Ok(0),
        }
    }

    /// Hand a record out unless its transaction, or this record of it, was handed out
    /// before; returns 1 when it was.
    fn emit(&mut self, relation: u32, mut record: Map<String, Value>, op: &str, lsn: u64) -> u64 {
        let Some(table) = self.tables.get_mut(&relation).filter(|t| t.wanted) else {
            return 0;
        };
        let Some(txn) = self.txn.as_mut() else {
            return 0;
        };
        txn.records += 1;
        if txn.skip || txn.records <= txn.handed_out_before {
            return 0;
        }
        record.insert(OP.into(), Value::from(op));
        record.insert(LSN.into(), Value::from(lsn));
        record.insert(COMMIT_LSN.into(), Value::from(txn.commit_lsn));
        record.insert(COMMIT_TS.into(), txn.commit_ts.clone());
        self.at.partial = Some(Partial {
            commit_lsn: txn.commit_lsn,
            records: txn.records,
        });
        let cells = if self.options.typed_cells {
            typed_row(table, &record)
        } else {
            None
        };
        self.out.push(Change {
            table: table.name.clone(),
            lsn,
            value: if cells.is_some() { Map::new() } else { record },
            cells,
        });
        1
    }

    /// Whether an update moved its row to another key: the replica identity's columns of a
    /// key tuple (`K`, sent when they changed), or the primary key's of a whole old row (`O`:
    /// under REPLICA IDENTITY FULL every column is flagged as identity). A value not sent
    /// (unchanged) is the same value.
    fn key_changed(&self, relation: u32, old: &[Cell], old_full: bool, new: &[Cell]) -> bool {
        let Some(table) = self.tables.get(&relation) else {
            return false;
        };
        let differs = |i: usize| match (old.get(i), new.get(i)) {
            (Some(Cell::Unchanged), _) | (_, Some(Cell::Unchanged)) => false,
            (a, b) => a != b,
        };
        if old_full {
            table.primary.iter().any(|&i| differs(i))
        } else {
            table
                .columns
                .iter()
                .enumerate()
                .any(|(i, (_, _, key))| *key && differs(i))
        }
    }

    /// A row as a record (`None` for a table not read). `old` fills values an update left
    /// untouched (TOASTed); `key_only` keeps the key columns and the non-null others (a
    /// delete's old row).
    fn row(
        &self,
        relation: u32,
        cells: &[Cell],
        old: Option<&[Cell]>,
        key_only: bool,
    ) -> Result<Option<Map<String, Value>>, SourceError> {
        let Some(table) = self.tables.get(&relation) else {
            return Err(failed(
                self.options,
                format!("a change of relation {relation} came before its Relation message"),
                false,
            ));
        };
        if !table.wanted || self.txn.as_ref().is_some_and(|t| t.skip) {
            return Ok(table.wanted.then(Map::new));
        }
        let mut out = Map::with_capacity(table.columns.len() + 4);
        let mut unchanged: Vec<&str> = Vec::new();
        for (i, (name, decoder, key)) in table.columns.iter().enumerate() {
            let mut cell = cells.get(i).unwrap_or(&Cell::Unchanged);
            if matches!(cell, Cell::Unchanged)
                && let Some(before) = old.and_then(|o| o.get(i))
            {
                cell = before;
            }
            let value = match cell {
                Cell::Unchanged => {
                    unchanged.push(name);
                    continue;
                }
                Cell::Null if key_only && !key => continue,
                Cell::Null => Value::Null,
                Cell::Text(bytes) | Cell::Binary(bytes) => {
                    let text = String::from_utf8_lossy(bytes);
                    match decoder {
                        Some(d) => d.parse_text(&text).map_err(|why| SourceError::Postgres {
                            server: self.options.server.clone(),
                            table: Some(table.name.clone()),
                            message: format!("cannot decode column `{name}` of a change: {why}"),
                            retryable: false,
                        })?,
                        None => Value::String(text.into_owned()),
                    }
                }
            };
            out.insert(name.clone(), value);
        }
        if !unchanged.is_empty() {
            out.insert(UNCHANGED.into(), Value::String(unchanged.join(",")));
        }
        Ok(Some(out))
    }

    /// The primary key columns of the relation `id` (empty without one).
    async fn primary_key(&self, id: u32) -> Result<Vec<String>, SourceError> {
        let rows = self
            .catalog
            .query(
                "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a \
                 ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indrelid = $1 AND i.indisprimary",
                &[&id],
            )
            .await
            .map_err(|e| pg_error(self.options, None, "cannot read a primary key", &e))?;
        rows.iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<Result<_, _>>()
            .map_err(|e| pg_error(self.options, None, "cannot read a primary key", &e))
    }

    /// The decoder of a column's type, looked up in the catalog for types of the database's
    /// own (enums, domains, their arrays); `None` (its text) for types the source does not
    /// map, with a warning.
    async fn decoder(
        &mut self,
        oid: u32,
        table: &str,
        column: &str,
    ) -> Result<Option<Decoder>, SourceError> {
        if let Some(known) = self.types.get(&oid) {
            return Ok(known.clone());
        }
        let decoder = self.resolve(oid).await?;
        if decoder.is_none() {
            tracing::warn!(
                table,
                column,
                oid,
                "column `{column}` of `{table}` has a type this source does not map: it is read as its text"
            );
        }
        self.types.insert(oid, decoder.clone());
        Ok(decoder)
    }

    async fn resolve(&self, oid: u32) -> Result<Option<Decoder>, SourceError> {
        let mut oid = oid;
        let mut array = false;
        for _ in 0..8 {
            if let Some(ty) = Type::from_oid(oid) {
                let member = Decoder::for_type(&ty);
                return Ok(match (array, member) {
                    (_, None) => None,
                    (false, member) => member,
                    (true, Some(Decoder::Array(_))) => None,
                    (true, Some(member)) => Some(Decoder::Array(Box::new(member))),
                });
            }
            let row = self
                .catalog
                .query_opt(
                    "SELECT typtype::text, typbasetype, typelem, typcategory::text FROM pg_type WHERE oid = $1",
                    &[&oid],
                )
                .await
                .map_err(|e| pg_error(self.options, None, "cannot look a type up", &e))?;
            let Some(row) = row else { return Ok(None) };
            let read = |e| pg_error(self.options, None, "cannot look a type up", &e);
            let kind: String = row.try_get(0).map_err(read)?;
            let base: u32 = row.try_get(1).map_err(read)?;
            let element: u32 = row.try_get(2).map_err(read)?;
            let category: String = row.try_get(3).map_err(read)?;
            match kind.as_str() {
                "e" => {
                    return Ok(Some(if array {
                        Decoder::Array(Box::new(Decoder::Text))
                    } else {
                        Decoder::Text
                    }));
                }
                "d" => oid = base,
                _ if category == "A" && element != 0 && !array => {
                    array = true;
                    oid = element;
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
