//! Table maintenance: expire old snapshots, compact small data files, delete the files no
//! remaining snapshot references.
//!
//! A table run ([`maintain_table`]) does three things, in this order:
//!
//! 1. **Compact** ([`compact`]): when more than [`Policy::compact_min_files`] live data files
//!    are small (under [`Policy::small_file_size`], half the target), they are read back (the Parquet reader,
//!    then [`crate::schema::adapt::adapt_batch`] to the current schema), written as files of
//!    about the target size, and one `replace` snapshot removes the old files and adds the new
//!    ones. Its commit requires the current snapshot to be the one compacted, so a concurrent
//!    commit makes it give up (its new files are deleted once the table shows it did not
//!    land); nothing is lost. The landed-batch property is untouched and the summary says
//!    `skippr.maintenance = compact` with no batch ids, so exactly-once bookkeeping is the
//!    same before and after.
//! 2. **Expire** ([`expire`]): snapshots of `main`'s history beyond the newest
//!    [`Policy::retain_last`] that stopped being current more than [`Policy::max_snapshot_age`]
//!    ago are removed from the metadata (`RemoveSnapshots`). The current snapshot is never
//!    expired. A table with other branches or tags is left alone.
//! 3. **Delete** ([`cleanup`]): the live set is every manifest list, manifest and live data
//!    file of every remaining snapshot. Data files and Avro metadata files outside it are
//!    deleted when a snapshot this run expired referenced them, or when they are older than
//!    [`Policy::orphan_min_age`] (files of a delivery that crashed before its commit, or of
//!    an expiry whose cleanup crashed). Old `vN.metadata.json` files beyond
//!    [`Policy::retain_metadata_versions`] go too, never the current one or the hint's.
//!
//! Exactly once never depends on a snapshot surviving: the landed id is the table property
//! `skippr.landed.<pipeline>`, which every metadata version carries forward.
//!
//! The rules and guarantees are the same on local (`file://`) and `s3://` warehouses
//! (`AthenaIceberg` with the pointer in Glue, `SkipprLake` with the pointer in DynamoDB):
//! files are read and written through the table's file I/O, listed by [`files`] (a
//! directory walk or `ListObjectsV2`), and every commit goes through the catalog's pointer,
//! whose compare-and-swap (a new `vN` file, Glue's `VersionId`, a conditional DynamoDB put)
//! makes a concurrent delivery win and maintenance give up.
//!
//! It runs after every delivery commit (when [`Policy::auto`]; cheap when nothing is due: the
//! decision reads only the table metadata in hand, see [`due`]) and from `skipprd maintain`.

pub mod cleanup;
pub mod compact;
pub mod expire;
pub mod files;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use iceberg::TableIdent;
use iceberg::table::Table;
use serde::Serialize;

use super::IcebergSink;
use super::catalog::{FileCatalog, LakePointer};
use crate::sinks::SinkError;

/// Snapshot summary key of a maintenance snapshot (value: what it did, `compact`).
pub const SUMMARY_MAINTENANCE: &str = "skippr.maintenance";
/// Snapshot summary key of a compaction: small data files it left (for [`due`]).
pub const SUMMARY_SMALL_FILES: &str = "skippr.small-files";

/// After a delivery, expiry runs once at least this many snapshots are due, so that expiry
/// (a metadata commit and a directory listing) is amortised over several deliveries.
pub const AUTO_EXPIRE_BATCH: usize = 10;

/// When and how much maintenance does (the Duckdb sink's `maintenance_*`-style settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Run after delivery commits when something is due.
    pub auto: bool,
    /// Always keep this many of the newest snapshots (at least 1, the current one).
    pub retain_last: usize,
    /// Keep every snapshot that was current within this long.
    pub max_snapshot_age: Duration,
    /// Compaction writes files of about this size; data files under half of it are small
    /// ([`Policy::small_file_size`]).
    pub target_file_size: u64,
    /// Compact after a delivery when more than this many data files are small.
    pub compact_min_files: usize,
    /// Files no snapshot references are deleted only once this old (unless a snapshot this
    /// run expired referenced them).
    pub orphan_min_age: Duration,
    /// Old `vN.metadata.json` files kept besides the current one.
    pub retain_metadata_versions: u64,
}

impl Policy {
    /// Data files under this size are small: half [`Policy::target_file_size`]. A larger file
    /// is left alone, as merging two of them would make a file over the target: rewriting
    /// them would cost as much as writing them did, to save at most half the files. (At a
    /// full target, the 22 MB files a 64 MiB delivery makes of the bench's orders were
    /// rewritten in pairs, twice per 10M rows: 52 s and 420 MiB for a pass DuckDB does in
    /// 17 s.)
    pub fn small_file_size(&self) -> u64 {
        self.target_file_size / 2
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            auto: true,
            retain_last: 20,
            max_snapshot_age: Duration::from_secs(6 * 3600),
            target_file_size: 32 << 20,
            compact_min_files: 16,
            orphan_min_age: Duration::from_secs(24 * 3600),
            retain_metadata_versions: 20,
        }
    }
}

/// Who asked for a run: the sink after a delivery, or `skipprd maintain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// After a delivery commit: only what crossed its threshold.
    Auto,
    /// `skipprd maintain`: everything due (compaction as soon as two small files can merge).
    Manual,
}

/// What maintenance did (to one table or, summed, to several).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MaintenanceReport {
    /// Tables looked at.
    pub tables: u64,
    /// Snapshots expired.
    pub snapshots_expired: u64,
    /// Small data files a compaction replaced.
    pub files_compacted_from: u64,
    /// Data files a compaction wrote.
    pub files_compacted_to: u64,
    /// Files deleted (data files, manifests, manifest lists, old metadata versions).
    pub files_deleted: u64,
    /// Bytes of the deleted files.
    pub bytes_freed: u64,
}

impl MaintenanceReport {
    /// Add `other` to this report.
    pub fn add(&mut self, other: &MaintenanceReport) {
        self.tables += other.tables;
        self.snapshots_expired += other.snapshots_expired;
        self.files_compacted_from += other.files_compacted_from;
        self.files_compacted_to += other.files_compacted_to;
        self.files_deleted += other.files_deleted;
        self.bytes_freed += other.bytes_freed;
    }

    /// Whether anything changed.
    pub fn is_empty(&self) -> bool {
        self.snapshots_expired == 0 && self.files_compacted_from == 0 && self.files_deleted == 0
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What is due on `table`, from its metadata alone (no file is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Snapshots the policy would expire now.
    pub expirable: usize,
    /// An upper bound of the small data files (0 when compaction is surely not due).
    pub small_files_bound: usize,
}

/// What is due on `table` under `policy` (see [`Due`]).
pub fn due(table: &Table, policy: &Policy, now_ms: i64) -> Due {
    let expirable = expire::expirable(table.metadata(), policy, now_ms)
        .map(|ids| ids.len())
        .unwrap_or(0);
    Due {
        expirable,
        small_files_bound: compact::small_files_bound(table.metadata()),
    }
}

/// Run maintenance on one table (see the module docs). Compaction needs the pipeline's writer
/// lease or the sink's own delivery (the caller holds either).
pub async fn maintain_table(
    catalog: &FileCatalog<LakePointer>,
    ident: &TableIdent,
    policy: &Policy,
    trigger: Trigger,
) -> Result<MaintenanceReport, SinkError> {
    let name = table_name(ident);
    let iceberg_err = |source: iceberg::Error| SinkError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let mut report = MaintenanceReport {
        tables: 1,
        ..MaintenanceReport::default()
    };
    let mut table = iceberg::Catalog::load_table(catalog, ident)
        .await
        .map_err(iceberg_err)?;
    let now = now_ms();
    let due = due(&table, policy, now);
    let compact_over = match trigger {
        Trigger::Auto => policy.compact_min_files,
        Trigger::Manual => 1,
    };
    if due.small_files_bound > compact_over
        && let Some((done, compacted)) =
            compact::compact(catalog, &table, policy, compact_over).await?
    {
        report.files_compacted_from = done.removed;
        report.files_compacted_to = done.added;
        table = compacted;
    }
    let expire_at = match trigger {
        Trigger::Auto => AUTO_EXPIRE_BATCH,
        Trigger::Manual => 1,
    };
    let mut dead = cleanup::Referenced::default();
    if let Some(ids) = expire::expirable(table.metadata(), policy, now_ms())
        && !ids.is_empty()
        && ids.len() >= expire_at
    {
        // What the expired snapshots reference, read before they go: deleted at once when
        // no remaining snapshot references it.
        let referenced = cleanup::referenced(&table, &ids)
            .await
            .map_err(iceberg_err)?;
        if expire::expire(catalog, &table, &ids).await?.is_some() {
            report.snapshots_expired = ids.len() as u64;
            dead = referenced;
        }
    }
    if trigger == Trigger::Manual || report.snapshots_expired > 0 || report.files_compacted_to > 0 {
        let deleted = cleanup::delete_unreferenced(catalog, ident, &dead, policy).await?;
        report.files_deleted = deleted.files;
        report.bytes_freed = deleted.bytes;
    }
    Ok(report)
}

/// `namespace.table`.
pub(crate) fn table_name(ident: &TableIdent) -> String {
    format!("{}.{}", ident.namespace().to_url_string(), ident.name())
}

impl IcebergSink {
    /// Use `policy` for maintenance (the default is [`Policy::default`]).
    pub fn with_maintenance(mut self, policy: Policy) -> Self {
        self.maintenance = policy;
        self
    }

    /// The maintenance policy.
    pub fn maintenance(&self) -> &Policy {
        &self.maintenance
    }

    /// Run maintenance on every table of the sink's namespace (`skipprd maintain`). The caller
    /// holds the pipeline's writer lease.
    pub fn maintain_all(&self) -> Result<MaintenanceReport, SinkError> {
        self.block_on(async {
            let idents = iceberg::Catalog::list_tables(self.catalog.as_ref(), &self.namespace)
                .await
                .map_err(|source| SinkError::Iceberg {
                    table: self.namespace.to_url_string(),
                    source: Box::new(source),
                })?;
            let mut report = MaintenanceReport::default();
            for ident in idents {
                let one = maintain_table(&self.catalog, &ident, &self.maintenance, Trigger::Manual)
                    .await?;
                report.add(&one);
            }
            Ok(report)
        })
    }

    /// The hook after a delivery committed `table`: maintain it when something crossed its
    /// threshold. Only the metadata in hand is looked at when nothing is due. Maintenance
    /// failing never fails the delivery (it is committed); it is logged and tried again after
    /// the next one.
    pub(super) async fn after_commit(&self, table: &Table) {
        if !self.maintenance.auto {
            return;
        }
        let due = due(table, &self.maintenance, now_ms());
        if due.expirable < AUTO_EXPIRE_BATCH
            && due.small_files_bound <= self.maintenance.compact_min_files
        {
            return;
        }
        let ident = table.identifier().clone();
        match maintain_table(&self.catalog, &ident, &self.maintenance, Trigger::Auto).await {
            Ok(report) if report.is_empty() => {}
            Ok(report) => tracing::info!(
                table = %table_name(&ident),
                snapshots_expired = report.snapshots_expired,
                files_compacted_from = report.files_compacted_from,
                files_compacted_to = report.files_compacted_to,
                files_deleted = report.files_deleted,
                bytes_freed = report.bytes_freed,
                "Maintained the Iceberg table."
            ),
            Err(e) => tracing::warn!(
                table = %table_name(&ident),
                error = %e,
                "Table maintenance failed; the delivery is committed, and maintenance is tried again after the next one."
            ),
        }
    }
}

#[cfg(test)]
mod tests;
