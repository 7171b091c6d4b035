//! Deleting the files of a table that no remaining snapshot references.
//!
//! The live set is read from the table as it is now (loaded again just before): for every
//! snapshot, its manifest list, each of its manifests, and each data file those list as
//! added or existing. A file in the live set is never deleted. Outside it:
//!
//! - data files (`data/**/*.parquet`) and Avro metadata (`metadata/*.avro`: manifests and
//!   manifest lists) are deleted when a snapshot expired in this run referenced them, or when
//!   they are older than [`Policy::orphan_min_age`]. The age keeps the files of a commit in
//!   flight (another writer's data files and manifests exist before its metadata commit)
//!   and covers files of a crashed delivery or a crashed cleanup;
//! - temporary files of a crashed metadata commit (`metadata/.*.tmp`) go by age too;
//! - `vN.metadata.json` (or `0000N-<uuid>.metadata.json`) below the current version minus
//!   [`Policy::retain_metadata_versions`] are deleted, never the current one nor the one the
//!   hint names (`version-hint.text`, read only when listed: S3 tables have none).
//!
//! The same rules hold on local and S3 warehouses: the files come from a listing
//! ([`super::files`]: a directory walk, or `ListObjectsV2` of the table's `data/` and
//! `metadata/` prefixes, with sizes and modification times) and are deleted through the
//! table's file I/O, in one batch per run. On S3 a file's age is its `LastModified` (whole
//! seconds, S3's clock), so [`Policy::orphan_min_age`] should stay well above clock skew and
//! the longest upload.
//!
//! If any manifest of the live set cannot be read, nothing is deleted.

use std::collections::HashSet;
use std::time::SystemTime;

use iceberg::TableIdent;
use iceberg::spec::{ManifestStatus, SnapshotRef};
use iceberg::table::Table;

use super::files::{self, TableFile, TableFiles, normalize};
use super::{Policy, table_name};
use crate::sinks::SinkError;
use crate::sinks::iceberg::catalog::{FileCatalog, LakePointer, VERSION_HINT};

/// Files some snapshots reference (URIs, normalised by [`normalize`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Referenced {
    /// Manifest lists, manifests and data files.
    pub files: HashSet<String>,
}

/// What a cleanup deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Files deleted.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Every file the snapshots `ids` of `table` reference, deleted entries included (they only
/// matter when no live snapshot references the file).
pub async fn referenced(table: &Table, ids: &[i64]) -> iceberg::Result<Referenced> {
    let snapshots: Vec<SnapshotRef> = ids
        .iter()
        .filter_map(|id| table.metadata().snapshot_by_id(*id).cloned())
        .collect();
    collect(table, &snapshots, false).await
}

/// Every file a snapshot of `table` needs: manifest lists, manifests, live data files.
pub async fn live(table: &Table) -> iceberg::Result<Referenced> {
    let snapshots: Vec<SnapshotRef> = table.metadata().snapshots().cloned().collect();
    collect(table, &snapshots, true).await
}

async fn collect(
    table: &Table,
    snapshots: &[SnapshotRef],
    live_only: bool,
) -> iceberg::Result<Referenced> {
    let mut out = Referenced::default();
    let mut manifests_seen: HashSet<String> = HashSet::new();
    for snapshot in snapshots {
        out.files.insert(normalize(snapshot.manifest_list()));
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest_file in list.entries() {
            if !manifests_seen.insert(manifest_file.manifest_path.clone()) {
                continue;
            }
            out.files.insert(normalize(&manifest_file.manifest_path));
            let manifest = manifest_file.load_manifest(table.file_io()).await?;
            for entry in manifest.entries() {
                if live_only && entry.status() == ManifestStatus::Deleted {
                    continue;
                }
                out.files.insert(normalize(entry.file_path()));
            }
        }
    }
    Ok(out)
}

/// Delete what no snapshot of the table references (see the module docs). `dead` is what
/// the snapshots expired in this run referenced.
pub async fn delete_unreferenced(
    catalog: &FileCatalog<LakePointer>,
    ident: &TableIdent,
    dead: &Referenced,
    policy: &Policy,
) -> Result<Deleted, SinkError> {
    let name = table_name(ident);
    let iceberg_err = |source: iceberg::Error| SinkError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let table = iceberg::Catalog::load_table(catalog, ident)
        .await
        .map_err(iceberg_err)?;
    let live = live(&table).await.map_err(iceberg_err)?;
    let listing = TableFiles::at(catalog, &name, table.metadata().location())?;
    let data_files = listing.list("data").await?;
    let metadata_files = listing.list("metadata").await?;
    let old_before = SystemTime::now()
        .checked_sub(policy.orphan_min_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let is_old = |file: &TableFile| file.modified.is_some_and(|m| m < old_before);
    let unreferenced_and_due = |file: &TableFile| {
        !live.files.contains(&file.uri) && (dead.files.contains(&file.uri) || is_old(file))
    };

    let mut doomed: Vec<&TableFile> = data_files
        .iter()
        .filter(|f| f.name().ends_with(".parquet") && unreferenced_and_due(f))
        .collect();

    // The current version and the hint's: never deleted.
    let current = table.metadata_location().and_then(parse_version);
    let hinted = match metadata_files.iter().find(|f| f.name() == VERSION_HINT) {
        Some(hint) => read_hint(&table, &hint.uri).await,
        None => None,
    };
    for file in &metadata_files {
        let file_name = file.name();
        let due = if file_name.ends_with(".avro") {
            unreferenced_and_due(file)
        } else if file_name.starts_with('.') && file_name.ends_with(".tmp") {
            is_old(file)
        } else if let (Some(version), Some(current)) = (parse_version(&file.uri), current) {
            version != current
                && Some(version) != hinted
                && version.saturating_add(policy.retain_metadata_versions) < current
        } else {
            false
        };
        if due {
            doomed.push(file);
        }
    }

    let deleted = Deleted {
        files: doomed.len() as u64,
        bytes: doomed.iter().map(|f| f.size).sum(),
    };
    let uris = doomed.iter().map(|f| f.uri.clone()).collect();
    files::delete(table.file_io(), &name, uris).await?;
    Ok(deleted)
}

/// The version `version-hint.text` names (`None` when it cannot be read or parsed).
async fn read_hint(table: &Table, uri: &str) -> Option<u64> {
    let input = table.file_io().new_input(uri).ok()?;
    let bytes = input.read().await.ok()?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// The `N` of `…/vN.metadata.json` (`Duckdb`) or `…/0000N-<uuid>.metadata.json`
/// (`SkipprLake`, `AthenaIceberg`).
fn parse_version(uri: &str) -> Option<u64> {
    let name = uri.rsplit('/').next()?;
    let stem = name.strip_suffix(".metadata.json")?;
    match stem.strip_prefix('v') {
        Some(n) => n.parse().ok(),
        None => stem.split_once('-')?.0.parse().ok(),
    }
}
