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
//!   hint names.
//!
//! If any manifest of the live set cannot be read, nothing is deleted.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use iceberg::TableIdent;
use iceberg::spec::{ManifestStatus, SnapshotRef};
use iceberg::table::Table;

use super::{Policy, table_name};
use crate::sinks::SinkError;
use crate::sinks::iceberg::catalog::{FileCatalog, LakePointer, VERSION_HINT};
use crate::sinks::iceberg::storage::local_path;

/// Files some snapshots reference (local paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Referenced {
    /// Manifest lists, manifests and data files.
    pub files: HashSet<PathBuf>,
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
        out.files.insert(local_path(snapshot.manifest_list()));
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest_file in list.entries() {
            if !manifests_seen.insert(manifest_file.manifest_path.clone()) {
                continue;
            }
            out.files.insert(local_path(&manifest_file.manifest_path));
            let manifest = manifest_file.load_manifest(table.file_io()).await?;
            for entry in manifest.entries() {
                if live_only && entry.status() == ManifestStatus::Deleted {
                    continue;
                }
                out.files.insert(local_path(entry.file_path()));
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
    let dir = catalog.table_dir(ident);
    let old_before = SystemTime::now()
        .checked_sub(policy.orphan_min_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut deleted = Deleted::default();

    let mut data_files = Vec::new();
    list_recursive(&dir.join("data"), &mut data_files)?;
    let metadata_dir = dir.join("metadata");
    let mut metadata_files = Vec::new();
    list_dir(&metadata_dir, &mut metadata_files)?;

    let is_old = |meta: &fs::Metadata| meta.modified().is_ok_and(|m| m < old_before);
    for (path, meta) in &data_files {
        let parquet = path.extension().is_some_and(|e| e == "parquet");
        if !parquet || live.files.contains(path) {
            continue;
        }
        if dead.files.contains(path) || is_old(meta) {
            remove(path, meta, &mut deleted)?;
        }
    }

    // The current version and the hint's: never deleted.
    let current = parse_version(&local_path(table.metadata_location().unwrap_or_default()));
    let hinted = fs::read_to_string(metadata_dir.join(VERSION_HINT))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    for (path, meta) in &metadata_files {
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if file_name.ends_with(".avro") {
            if live.files.contains(path) {
                continue;
            }
            if dead.files.contains(path) || is_old(meta) {
                remove(path, meta, &mut deleted)?;
            }
        } else if file_name.starts_with('.') && file_name.ends_with(".tmp") {
            if is_old(meta) {
                remove(path, meta, &mut deleted)?;
            }
        } else if let (Some(version), Some(current)) = (parse_version(path), current)
            && version != current
            && Some(version) != hinted
            && version.saturating_add(policy.retain_metadata_versions) < current
        {
            remove(path, meta, &mut deleted)?;
        }
    }
    Ok(deleted)
}

/// The `N` of `…/vN.metadata.json` (`Duckdb`) or `…/0000N-<uuid>.metadata.json`
/// (`SkipprLake`).
fn parse_version(path: &Path) -> Option<u64> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".metadata.json")?;
    match stem.strip_prefix('v') {
        Some(n) => n.parse().ok(),
        None => stem.split_once('-')?.0.parse().ok(),
    }
}

fn remove(path: &Path, meta: &fs::Metadata, deleted: &mut Deleted) -> Result<(), SinkError> {
    match fs::remove_file(path) {
        Ok(()) => {
            deleted.files += 1;
            deleted.bytes += meta.len();
            tracing::debug!(file = %path.display(), "Deleted an unreferenced table file.");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SinkError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn list_dir(dir: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) -> Result<(), SinkError> {
    let io = |source| SinkError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io)?;
        let meta = entry.metadata().map_err(io)?;
        if meta.is_file() {
            out.push((entry.path(), meta));
        }
    }
    Ok(())
}

fn list_recursive(dir: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) -> Result<(), SinkError> {
    let io = |source| SinkError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io)?;
        let meta = entry.metadata().map_err(io)?;
        if meta.is_dir() {
            list_recursive(&entry.path(), out)?;
        } else if meta.is_file() {
            out.push((entry.path(), meta));
        }
    }
    Ok(())
}
