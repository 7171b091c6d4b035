//! `write_policy: replace_table` and `replace_partition` on Iceberg tables.
//!
//! A delivery of such a pipeline is one whole read of its source (the pass marks where a
//! read ends in the WAL, and the delivery never takes part of one: `pipeline::delivery`).
//! The read's rows are written as new data files as any delivery's are; then one `overwrite`
//! snapshot adds them and removes the table's live files: every live file (`replace_table`),
//! or the live files of the partitions the new files are in (`replace_partition`). The landed
//! property goes in the same commit, required to apply to the table whose `main` is still the
//! snapshot replaced, so a concurrent commit makes it fail with nothing lost and the new
//! files deleted. Readers see the old rows or the new ones, never both: no delete files are
//! written, so DuckDB's `iceberg_scan` and PyIceberg read the result as plain data files. The
//! removed files stay referenced by the older snapshots until maintenance expires them.

use std::collections::{HashMap, HashSet};

use iceberg::spec::{
    DataFile, FormatVersion, Literal, Operation, PrimitiveLiteral, Snapshot, Struct,
};
use iceberg::table::Table;
use iceberg::{ErrorKind, TableUpdate};

use super::IcebergSink;
use super::maintain::compact::{
    Live, LiveFiles, Staging, commit_or_discard, discard, live_files, snapshot_names, stage,
    written_paths,
};
use crate::sinks::SinkError;
use crate::wal::BatchId;

impl IcebergSink {
    /// Commit `written` (one whole read's rows of namespace `ns`) in place of the table's
    /// live files: all of them, or with `partitions_only` those of the partitions `written`
    /// is in (see the module docs). `summary` and the landed property (`last`) go in the same
    /// commit.
    pub(super) async fn replace(
        &self,
        ns: &str,
        table: &Table,
        written: Vec<DataFile>,
        summary: HashMap<String, String>,
        last: BatchId,
        partitions_only: bool,
    ) -> Result<Table, SinkError> {
        let err = |e: iceberg::Error| self.iceberg_err(ns, e);
        let policy = if partitions_only {
            "replace_partition"
        } else {
            "replace_table"
        };
        let metadata = table.metadata();
        let Some(current) = metadata.current_snapshot().cloned() else {
            // Nothing to replace yet.
            return self.append(ns, table, written, summary, last).await;
        };
        if metadata.format_version() != FormatVersion::V2 {
            return Err(err(iceberg::Error::new(
                ErrorKind::FeatureUnsupported,
                format!("{policy} rewrites format v2 tables only"),
            )));
        }
        let Some(live) = live_files(table, &current).await.map_err(err)? else {
            return Err(err(iceberg::Error::new(
                ErrorKind::FeatureUnsupported,
                format!("the table has delete files, which {policy} does not remove"),
            )));
        };
        let spec = metadata.default_partition_spec();
        if partitions_only && spec.is_unpartitioned() {
            // Every file would match the one empty partition: the whole table would go.
            return Err(err(iceberg::Error::new(
                ErrorKind::FeatureUnsupported,
                "replace_partition needs a partitioned table, and this one has no partition fields (its rows lacked the partition field, or it is not a scalar); declare replace_table, or write the table anew with the field present",
            )));
        }
        let spec_id = spec.spec_id();
        if live.entries.iter().any(|l| {
            live.manifests
                .get(l.manifest)
                .is_none_or(|m| m.partition_spec_id != spec_id)
        }) {
            return Err(err(iceberg::Error::new(
                ErrorKind::FeatureUnsupported,
                format!(
                    "the table holds data files of an earlier partition spec, which {policy} does not remove (its partitioning changed); write it anew under the current layout"
                ),
            )));
        }
        let touched: HashSet<Vec<Option<Literal>>> =
            written.iter().map(|f| widened(f.partition())).collect();
        let replaced: Vec<&Live> = live
            .entries
            .iter()
            .filter(|l| {
                !partitions_only || touched.contains(&widened(l.entry.data_file().partition()))
            })
            .collect();
        self.overwrite(
            ns, table, &current, &live, &replaced, written, summary, last,
        )
        .await
    }
    /// Commit one `overwrite` snapshot of `table` on top of `current`: the `replaced` live
    /// files (of `live`) out, `written` in, `summary` as its summary and the landed property
    /// set to `last` in the same commit, required to apply while `main` is still `current`
    /// (a concurrent commit fails it). The written files are deleted when it fails.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn overwrite(
        &self,
        ns: &str,
        table: &Table,
        current: &Snapshot,
        live: &LiveFiles,
        replaced: &[&Live],
        written: Vec<DataFile>,
        summary: HashMap<String, String>,
        last: BatchId,
    ) -> Result<Table, SinkError> {
        let err = |e: iceberg::Error| self.iceberg_err(ns, e);
        let (snapshot_id, manifest_path, list_path) = snapshot_names(table.metadata());
        let ours = written_paths(&written, &manifest_path, &list_path);
        let landed = TableUpdate::SetProperties {
            updates: HashMap::from([(self.landed_key(), last.0.to_string())]),
        };
        let staged = stage(
            table,
            current,
            live,
            replaced,
            &written,
            Staging {
                snapshot_id,
                manifest_path,
                list_path,
                operation: Operation::Overwrite,
                summary,
            },
            vec![landed],
        )
        .await;
        let updates = match staged {
            Ok(updates) => updates,
            Err(e) => {
                discard(table, &ours).await;
                return Err(err(e));
            }
        };
        commit_or_discard(
            self.catalog.as_ref(),
            table,
            Some(current.snapshot_id()),
            snapshot_id,
            &ours,
            updates,
        )
        .await
        .map_err(err)
    }
}

/// A partition value as compared between files: `int` literals widened to `long`, since a
/// manifest written before an `int -> long` widening of an identity partition column holds the
/// narrower literal for the same value.
fn widened(partition: &Struct) -> Vec<Option<Literal>> {
    partition
        .iter()
        .map(|value| {
            value.map(|literal| match literal {
                Literal::Primitive(PrimitiveLiteral::Int(i)) => {
                    Literal::Primitive(PrimitiveLiteral::Long(i64::from(*i)))
                }
                other => other.clone(),
            })
        })
        .collect()
}
