//! Compaction: small data files rewritten into files of about the target size, committed as
//! one `replace` snapshot.
//!
//! iceberg-rust 0.10 has no rewrite action, so the snapshot is built from its parts:
//!
//! 1. the current snapshot's manifests are read; live data files of the default partition
//!    spec smaller than [`Policy::small_file_size`] (half the target) are the candidates. A table with delete
//!    files, or not in format v2, is not compacted;
//! 2. candidates are grouped by partition and packed, in sequence-number order, into bins of
//!    about the target size; a bin of one file is left alone;
//! 3. each bin is read with the Parquet reader (each file whole, through the table's file I/O:
//!    a local file or one S3 `GetObject`; it is below the target size), each batch shaped to the current schema by
//!    [`adapt_batch`] (matching columns by name, a missing column or struct field reads as
//!    null; iceberg-rust's own reader fails on files written before a struct gained a
//!    field), and written through iceberg-rust's data file writer (column statistics
//!    included). The rows written must equal the rows of the files replaced;
//! 4. one new manifest lists the new files (added), the replaced ones (deleted), and the
//!    other live entries of every manifest that held a replaced file (existing); the other
//!    manifests are carried over unchanged. A manifest list names them all;
//! 5. the snapshot (operation `replace`, parent the current snapshot, summary with the
//!    totals, `skippr.maintenance = compact` and no batch ids) is committed with
//!    `AddSnapshot` + `SetSnapshotRef(main)` through the catalog, **required** to apply to
//!    the same table whose `main` is still the snapshot compacted. If another writer
//!    committed first, the commit fails and nothing is lost: once the reloaded table shows
//!    that the snapshot did not land, the files written for it are deleted (through the
//!    table's file I/O, as on local warehouses so on S3).
//!
//! Readers of older snapshots keep reading the replaced files until expiry and cleanup
//! remove them ([`super::cleanup`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, MAIN_BRANCH, ManifestContentType,
    ManifestEntryRef, ManifestFile, ManifestListWriter, ManifestStatus, ManifestWriterBuilder,
    Operation, PartitionKey, Snapshot, SnapshotReference, SnapshotRetention,
    SnapshotSummaryCollector, Struct, Summary, TableMetadata,
};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{ErrorKind, TableRequirement, TableUpdate};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::expire::history;
use super::{Policy, SUMMARY_MAINTENANCE, SUMMARY_SMALL_FILES, table_name};
use crate::schema::adapt::adapt_batch;
use crate::sinks::SinkError;
use crate::sinks::iceberg::catalog::{FileCatalog, LakePointer};
use crate::sinks::iceberg::location::{LakeLocationGenerator, partition_path};

/// The summary value of [`SUMMARY_MAINTENANCE`] for a compaction.
pub const COMPACT: &str = "compact";

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Data files replaced.
    pub removed: u64,
    /// Data files written.
    pub added: u64,
}

/// An upper bound of the table's small data files, from snapshot summaries alone: the files
/// added since the last compaction plus the small files it left; without a compaction in the
/// retained history, every data file of the current snapshot.
pub fn small_files_bound(metadata: &TableMetadata) -> usize {
    let number = |s: &Snapshot, key: &str| {
        s.summary()
            .additional_properties
            .get(key)
            .and_then(|v| v.parse::<usize>().ok())
    };
    let total = metadata
        .current_snapshot()
        .and_then(|s| number(s, "total-data-files"));
    let mut added = 0usize;
    for snapshot in history(metadata) {
        let props = &snapshot.summary().additional_properties;
        if props.get(SUMMARY_MAINTENANCE).map(String::as_str) == Some(COMPACT) {
            let left = number(&snapshot, SUMMARY_SMALL_FILES).unwrap_or(usize::MAX);
            let bound = added.saturating_add(left);
            return total.map_or(bound, |t| bound.min(t));
        }
        if snapshot.parent_snapshot_id().is_none() {
            // The whole history: every file was added along it.
            added = added.saturating_add(number(&snapshot, "added-data-files").unwrap_or(0));
            return total.map_or(added, |t| added.min(t));
        }
        added = added.saturating_add(number(&snapshot, "added-data-files").unwrap_or(0));
    }
    total.unwrap_or(added)
}

/// One live entry of the current snapshot, and the manifest it is in.
#[derive(Clone)]
pub(crate) struct Live {
    /// The entry.
    pub entry: ManifestEntryRef,
    /// The index of its manifest in [`LiveFiles::manifests`].
    pub manifest: usize,
}

/// The live data files of a snapshot and the manifests they are in.
pub(crate) struct LiveFiles {
    /// The snapshot's manifests, as listed.
    pub manifests: Vec<ManifestFile>,
    /// Each manifest, loaded.
    pub loaded: Vec<iceberg::spec::Manifest>,
    /// The live data files.
    pub entries: Vec<Live>,
}

/// The live data files of `current`; `None` when the table has live delete files (which
/// neither compaction nor a merge rewrites).
pub(crate) async fn live_files(
    table: &Table,
    current: &iceberg::spec::SnapshotRef,
) -> iceberg::Result<Option<LiveFiles>> {
    let list = table.manifest_list_reader(current).load().await?;
    let manifests: Vec<ManifestFile> = list.entries().to_vec();
    let mut entries = Vec::new();
    let mut loaded = Vec::with_capacity(manifests.len());
    for (i, manifest_file) in manifests.iter().enumerate() {
        let manifest = manifest_file.load_manifest(table.file_io()).await?;
        let alive: Vec<ManifestEntryRef> = manifest
            .entries()
            .iter()
            .filter(|e| e.status() != ManifestStatus::Deleted)
            .cloned()
            .collect();
        if manifest_file.content != ManifestContentType::Data && !alive.is_empty() {
            return Ok(None);
        }
        for entry in alive {
            if entry.data_file().content_type() == DataContentType::Data {
                entries.push(Live { entry, manifest: i });
            }
        }
        loaded.push(manifest);
    }
    Ok(Some(LiveFiles {
        manifests,
        loaded,
        entries,
    }))
}

/// Compact `table` when more than `over` of its data files are small (see the module docs).
/// `None` when there was nothing to do or a concurrent commit won.
pub async fn compact(
    catalog: &FileCatalog<LakePointer>,
    table: &Table,
    policy: &Policy,
    over: usize,
) -> Result<Option<(Compacted, Table)>, SinkError> {
    let ident = table.identifier();
    let name = table_name(ident);
    let iceberg_err = |source: iceberg::Error| SinkError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let metadata = table.metadata();
    let Some(current) = metadata.current_snapshot().cloned() else {
        return Ok(None);
    };
    if metadata.format_version() != FormatVersion::V2 {
        tracing::info!(table = %name, "Compaction skipped: only format v2 tables are compacted.");
        return Ok(None);
    }
    let spec = Arc::clone(metadata.default_partition_spec());
    let schema = Arc::clone(metadata.current_schema());

    // 1. The live files and their manifests.
    let Some(all) = live_files(table, &current).await.map_err(iceberg_err)? else {
        tracing::info!(table = %name, "Compaction skipped: the table has delete files.");
        return Ok(None);
    };
    let live: Vec<Live> = all
        .entries
        .iter()
        .filter(|l| {
            let file = l.entry.data_file();
            all.manifests[l.manifest].partition_spec_id == spec.spec_id()
                && file.file_format() == DataFileFormat::Parquet
                && file.file_size_in_bytes() < policy.small_file_size()
        })
        .cloned()
        .collect();
    if live.len() <= over {
        return Ok(None);
    }

    // 2. Bins per partition, in sequence-number order.
    // Grouped by the partition value itself (a path may be shared by two partitions, and
    // iceberg-rust's `partition_to_path` writes `null` for both a null and the string
    // "null"), ordered by the escaped path for a stable order.
    let mut by_value: HashMap<Struct, Vec<Live>> = HashMap::new();
    for l in live {
        by_value
            .entry(l.entry.data_file().partition().clone())
            .or_default()
            .push(l);
    }
    let mut groups: Vec<(String, Vec<Live>)> = by_value
        .into_iter()
        .map(|(value, files)| (partition_path(&spec, &schema, &value), files))
        .collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    let mut bins: Vec<Vec<Live>> = Vec::new();
    let small_total: usize = groups.iter().map(|(_, files)| files.len()).sum();
    for (_, mut files) in groups {
        files.sort_by(|a, b| {
            (a.entry.sequence_number(), a.entry.file_path())
                .cmp(&(b.entry.sequence_number(), b.entry.file_path()))
        });
        let mut bin: Vec<Live> = Vec::new();
        let mut size = 0u64;
        for l in files {
            size += l.entry.file_size_in_bytes();
            bin.push(l);
            if size >= policy.target_file_size {
                bins.push(std::mem::take(&mut bin));
                size = 0;
            }
        }
        if bin.len() >= 2 {
            bins.push(bin);
        }
    }
    bins.retain(|b| b.len() >= 2);
    if bins.is_empty() {
        return Ok(None);
    }

    // 3. Rewrite.
    let mut written: Vec<DataFile> = Vec::new();
    let result = rewrite(table, &bins, policy, &mut written).await;
    let (snapshot_id, manifest_path, list_path) = snapshot_names(metadata);
    let ours = written_paths(&written, &manifest_path, &list_path);
    let staged = match result {
        Ok(()) => {
            let small_left = small_total - bins.iter().map(Vec::len).sum::<usize>()
                + written
                    .iter()
                    .filter(|f| f.file_size_in_bytes() < policy.small_file_size())
                    .count();
            let replaced: Vec<&Live> = bins.iter().flatten().collect();
            stage(
                table,
                &current,
                &all,
                &replaced,
                &written,
                Staging {
                    snapshot_id,
                    manifest_path,
                    list_path,
                    operation: Operation::Replace,
                    summary: HashMap::from([
                        (SUMMARY_MAINTENANCE.to_owned(), COMPACT.to_owned()),
                        (SUMMARY_SMALL_FILES.to_owned(), small_left.to_string()),
                    ]),
                },
                Vec::new(),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let updates = match staged {
        Ok(updates) => updates,
        Err(e) => {
            discard(table, &ours).await;
            return Err(iceberg_err(e));
        }
    };
    let removed: u64 = bins.iter().map(|b| b.len() as u64).sum();
    let added = written.len() as u64;
    let committed = commit_or_discard(
        catalog,
        table,
        Some(current.snapshot_id()),
        snapshot_id,
        &ours,
        updates,
    )
    .await;
    match committed {
        Ok(after) => {
            tracing::info!(table = %name, removed, added, "Compacted small data files.");
            Ok(Some((Compacted { removed, added }, after)))
        }
        Err(e) => {
            if e.kind() == ErrorKind::CatalogCommitConflicts {
                tracing::info!(table = %name, error = %e, "Compaction skipped: the table changed meanwhile.");
                Ok(None)
            } else {
                Err(iceberg_err(e))
            }
        }
    }
}

/// A new snapshot's id, and the paths of its manifest and manifest list.
pub(crate) fn snapshot_names(metadata: &TableMetadata) -> (i64, String, String) {
    let snapshot_id = unique_snapshot_id(metadata);
    let commit_uuid = uuid::Uuid::new_v4().simple().to_string();
    let manifest_path = format!("{}/metadata/{commit_uuid}-m0.avro", metadata.location());
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_uuid}.avro",
        metadata.location()
    );
    (snapshot_id, manifest_path, list_path)
}

/// Every file a staged snapshot wrote: its data files, manifest and manifest list.
pub(crate) fn written_paths(written: &[DataFile], manifest: &str, list: &str) -> Vec<String> {
    let mut ours: Vec<String> = written.iter().map(|f| f.file_path().to_owned()).collect();
    ours.push(manifest.to_owned());
    ours.push(list.to_owned());
    ours
}

/// Commit `updates` (staged as snapshot `snapshot_id`) through `catalog`, required to apply
/// to the same table whose `main` is still `main`; when it fails, the files `ours` are
/// deleted once the reloaded table shows the snapshot did not land.
pub(crate) async fn commit_or_discard(
    catalog: &FileCatalog<LakePointer>,
    table: &Table,
    main: Option<i64>,
    snapshot_id: i64,
    ours: &[String],
    updates: Vec<TableUpdate>,
) -> iceberg::Result<Table> {
    let ident = table.identifier();
    let committed = catalog
        .commit_updates(
            ident,
            vec![
                TableRequirement::UuidMatch {
                    uuid: table.metadata().uuid(),
                },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: MAIN_BRANCH.to_owned(),
                    snapshot_id: main,
                },
            ],
            updates,
        )
        .await;
    if committed.is_err() {
        let landed = iceberg::Catalog::load_table(catalog, ident)
            .await
            .map(|t| t.metadata().snapshot_by_id(snapshot_id).is_some());
        if let Ok(false) = landed {
            discard(table, ours).await;
        }
    }
    committed
}

/// Delete the files of a snapshot that did not land (best effort: cleanup removes what is
/// left once it is old).
pub(crate) async fn discard(table: &Table, paths: &[String]) {
    let name = table_name(table.identifier());
    if let Err(e) = super::files::delete(table.file_io(), &name, paths.to_vec()).await {
        tracing::warn!(table = %name, error = %e, "Could not delete data files no commit references; cleanup removes them once they are old.");
    }
}

pub(crate) fn unique_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) >> 1) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Read every bin and write it as files of about the target size; `written` gets every file
/// written, also when a later one fails (so the caller can discard them).
async fn rewrite(
    table: &Table,
    bins: &[Vec<Live>],
    policy: &Policy,
    written: &mut Vec<DataFile>,
) -> iceberg::Result<()> {
    let metadata = table.metadata();
    let schema = Arc::clone(metadata.current_schema());
    let arrow = Arc::new(schema_to_arrow_schema(&schema)?);
    let spec = metadata.default_partition_spec();
    let props = crate::sinks::iceberg::parquet_properties()?;
    let target = usize::try_from(policy.target_file_size).unwrap_or(usize::MAX);
    for bin in bins {
        let rows_in: u64 = bin.iter().map(|l| l.entry.record_count()).sum();
        let rolling = RollingFileWriterBuilder::new(
            ParquetWriterBuilder::new(props.clone(), Arc::clone(&schema)),
            target,
            table.file_io().clone(),
            LakeLocationGenerator::new(metadata),
            DefaultFileNameGenerator::new(
                "compact".to_owned(),
                Some(uuid::Uuid::new_v4().simple().to_string()),
                DataFileFormat::Parquet,
            ),
        );
        let partition = bin.first().and_then(|l| {
            (!spec.is_unpartitioned()).then(|| {
                PartitionKey::new(
                    spec.as_ref().clone(),
                    Arc::clone(&schema),
                    l.entry.data_file().partition().clone(),
                )
            })
        });
        let mut writer = DataFileWriterBuilder::new(rolling).build(partition).await?;
        let mut failed = None;
        for l in bin {
            let path = l.entry.file_path();
            match read_adapted(table, path, &arrow).await {
                Ok(batches) => {
                    for batch in batches {
                        writer.write(batch).await?;
                    }
                }
                Err(message) => {
                    failed = Some(iceberg::Error::new(
                        ErrorKind::DataInvalid,
                        format!("cannot read data file {path} for compaction: {message}"),
                    ));
                    break;
                }
            }
        }
        let files = writer.close().await?;
        let rows_out: u64 = files.iter().map(DataFile::record_count).sum();
        written.extend(files);
        if let Some(e) = failed {
            return Err(e);
        }
        if rows_out != rows_in {
            return Err(iceberg::Error::new(
                ErrorKind::DataInvalid,
                format!("compaction wrote {rows_out} rows for {rows_in}; nothing was committed"),
            ));
        }
    }
    Ok(())
}

/// The rows of the data file `path`, shaped to `arrow` (the current schema). The file is read
/// whole through the table's file I/O (one `GetObject` on S3): a compaction reads files
/// smaller than the target size; a merge (`merge_by_key`) reads any live file, one at a time.
pub(crate) async fn read_adapted(
    table: &Table,
    path: &str,
    arrow: &arrow::datatypes::SchemaRef,
) -> Result<Vec<arrow::array::RecordBatch>, String> {
    let bytes = table
        .file_io()
        .new_input(path)
        .map_err(|e| e.to_string())?
        .read()
        .await
        .map_err(|e| e.to_string())?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        batches.push(adapt_batch(&batch, arrow).map_err(|e| e.to_string())?);
    }
    Ok(batches)
}

/// Names and summary of the snapshot being staged.
pub(crate) struct Staging {
    /// Its id.
    pub snapshot_id: i64,
    /// The new manifest's path.
    pub manifest_path: String,
    /// The manifest list's path.
    pub list_path: String,
    /// `replace` (a rewrite: same rows) or `overwrite` (rows replaced).
    pub operation: Operation,
    /// Summary properties beyond the counts.
    pub summary: HashMap<String, String>,
}

/// Write the manifest and manifest list of a snapshot that replaces the `replaced` live
/// files of `current` by the `written` ones; return its updates (`AddSnapshot`,
/// `SetSnapshotRef(main)`, then `extra`).
pub(crate) async fn stage(
    table: &Table,
    current: &Snapshot,
    live: &LiveFiles,
    replaced: &[&Live],
    written: &[DataFile],
    staging: Staging,
    extra: Vec<TableUpdate>,
) -> iceberg::Result<Vec<TableUpdate>> {
    let (manifests, loaded) = (&live.manifests, &live.loaded);
    let live_count = live.entries.len();
    let metadata = table.metadata();
    let schema = Arc::clone(metadata.current_schema());
    let spec = Arc::clone(metadata.default_partition_spec());
    let sequence_number = metadata.next_sequence_number();
    let touched: HashSet<usize> = replaced.iter().map(|l| l.manifest).collect();
    let rows_out: i128 = replaced
        .iter()
        .map(|l| i128::from(l.entry.record_count()))
        .sum();
    let rows_in: i128 = written.iter().map(|f| i128::from(f.record_count())).sum();
    let replaced_entries = replaced;
    let replaced: HashSet<&str> = replaced.iter().map(|l| l.entry.file_path()).collect();

    let mut summary = SnapshotSummaryCollector::default();
    let mut writer = ManifestWriterBuilder::new(
        table.file_io().new_output(&staging.manifest_path)?,
        Some(staging.snapshot_id),
        Arc::clone(&schema),
        spec.as_ref().clone(),
    )
    .build_v2_data();
    for file in written {
        summary.add_file(file, Arc::clone(&schema), Arc::clone(&spec));
        writer.add_file(file.clone(), -1)?;
    }
    for i in touched.iter().copied() {
        let Some(manifest) = loaded.get(i) else {
            continue;
        };
        for entry in manifest.entries() {
            if entry.status() == ManifestStatus::Deleted {
                continue;
            }
            let seq = entry.sequence_number().unwrap_or(current.sequence_number());
            let file_seq = entry.file_sequence_number.or(Some(seq));
            if replaced.contains(entry.file_path()) {
                summary.remove_file(entry.data_file(), Arc::clone(&schema), Arc::clone(&spec));
                writer.add_delete_file(entry.data_file().clone(), seq, file_seq)?;
            } else {
                let added_by = entry.snapshot_id().unwrap_or(current.snapshot_id());
                writer.add_existing_file(entry.data_file().clone(), added_by, seq, file_seq)?;
            }
        }
    }
    let new_manifest = writer.write_manifest_file().await?;

    let mut list = ManifestListWriter::v2(
        table
            .file_io()
            .new_output(&staging.list_path)?
            .writer()
            .await?,
        staging.snapshot_id,
        Some(current.snapshot_id()),
        sequence_number,
    );
    let kept = manifests
        .iter()
        .enumerate()
        .filter(|(i, _)| !touched.contains(i))
        .map(|(_, m)| m.clone());
    list.add_manifests(kept.chain(std::iter::once(new_manifest)))?;
    list.close().await?;

    // Totals: the live files after the replace.
    let removed = replaced.len();
    let previous = &current.summary().additional_properties;
    let total = |key: &str| previous.get(key).and_then(|v| v.parse::<i128>().ok());
    let mut props: HashMap<String, String> = summary.build();
    let bytes_in: i128 = replaced_entries
        .iter()
        .map(|l| i128::from(l.entry.file_size_in_bytes()))
        .sum();
    let bytes_out: i128 = written
        .iter()
        .map(|f| i128::from(f.file_size_in_bytes()))
        .sum();
    let files_after = live_count - removed + written.len();
    props.insert("total-data-files".to_owned(), files_after.to_string());
    if let Some(records) = total("total-records") {
        props.insert(
            "total-records".to_owned(),
            (records - rows_out + rows_in).to_string(),
        );
    }
    if let Some(size) = total("total-files-size") {
        props.insert(
            "total-files-size".to_owned(),
            (size - bytes_in + bytes_out).to_string(),
        );
    }
    for key in [
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    ] {
        props.insert(key.to_owned(), "0".to_owned());
    }
    props.extend(staging.summary);

    let snapshot = Snapshot::builder()
        .with_snapshot_id(staging.snapshot_id)
        .with_parent_snapshot_id(Some(current.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(super::now_ms().max(current.timestamp_ms()))
        .with_manifest_list(staging.list_path)
        .with_summary(Summary {
            operation: staging.operation,
            additional_properties: props,
        })
        .with_schema_id(metadata.current_schema_id())
        .build();
    let mut updates = vec![
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN_BRANCH.to_owned(),
            reference: SnapshotReference::new(
                staging.snapshot_id,
                SnapshotRetention::branch(None, None, None),
            ),
        },
    ];
    updates.extend(extra);
    Ok(updates)
}
