//! The Hadoop layout's pointer (the `Duckdb` sink): the current version of a table is its
//! highest complete `metadata/vN.metadata.json`, and `metadata/version-hint.text` names it
//! for readers (see the [module docs](super)).

use std::fs;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::{Error, ErrorKind, Result};

use super::super::storage::{durable_error, local_path};
use super::{Current, Pointer, TableRef, commit_conflict, io_error};
use crate::durable::{create_dir_durable, sync_dir, write_atomic};

/// Name of the version hint file in a table's `metadata/` directory.
pub const VERSION_HINT: &str = "version-hint.text";

/// The Hadoop layout's pointer: `metadata/vN.metadata.json` and `metadata/version-hint.text`
/// (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct HadoopPointer;

fn version_file(table_dir: &Path, version: u64) -> PathBuf {
    table_dir
        .join("metadata")
        .join(format!("v{version}.metadata.json"))
}

/// The number in a `v{N}.metadata.json` name.
fn parse_version_name(name: &str) -> Option<u64> {
    name.strip_prefix('v')?
        .strip_suffix(".metadata.json")?
        .parse()
        .ok()
}

impl HadoopPointer {
    /// The highest `vN.metadata.json` in the metadata directory.
    fn highest_listed(metadata_dir: &Path) -> Result<Option<u64>> {
        let entries = match fs::read_dir(metadata_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("cannot list", metadata_dir, e)),
        };
        let mut highest = None;
        for entry in entries {
            let entry = entry.map_err(|e| io_error("cannot list", metadata_dir, e))?;
            if let Some(v) = parse_version_name(&entry.file_name().to_string_lossy()) {
                highest = highest.max(Some(v));
            }
        }
        Ok(highest)
    }
}

#[async_trait]
impl Pointer for HadoopPointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        let table_dir = local_path(table.location);
        let table_dir = table_dir.as_path();
        let metadata_dir = table_dir.join("metadata");
        let hinted = fs::read_to_string(metadata_dir.join(VERSION_HINT))
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|v| version_file(table_dir, *v).is_file());
        let version = match hinted {
            Some(mut v) => {
                // Roll forward past a crash between a commit and its hint.
                while version_file(table_dir, v + 1).is_file() {
                    v += 1;
                }
                Some(v)
            }
            None => Self::highest_listed(&metadata_dir)?,
        };
        Ok(version.map(|v| {
            Current::new(
                v,
                format!("file://{}", version_file(table_dir, v).display()),
            )
        }))
    }

    async fn publish(
        &self,
        _file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        let next = previous.map_or(1, |c| c.version + 1);
        let table_dir = local_path(table.location);
        let table_dir = table_dir.as_path();
        let metadata_dir = table_dir.join("metadata");
        create_dir_durable(&metadata_dir).map_err(durable_error)?;
        let bytes = serde_json::to_vec(metadata).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "cannot serialize table metadata").with_source(e)
        })?;
        let target = version_file(table_dir, next);
        let tmp = metadata_dir.join(format!(
            ".v{next}.metadata.json.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let written = (|| {
            use std::io::Write as _;
            let mut file = fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_error("cannot write", &tmp, e));
        }
        let linked = fs::hard_link(&tmp, &target);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(commit_conflict(table.location, next));
            }
            Err(e) => return Err(io_error("cannot create", &target, e)),
        }
        sync_dir(&metadata_dir).map_err(durable_error)?;
        // The commit is done. The hint only saves readers a listing: a failure to update it
        // is logged, not returned (a retry would commit the same changes twice).
        if let Err(e) = write_atomic(
            &metadata_dir.join(VERSION_HINT),
            next.to_string().as_bytes(),
        ) {
            tracing::warn!(table = %table_dir.display(), error = %e, "Could not update the Iceberg version hint; readers that use it see the previous version until the next commit.");
        }
        Ok(format!("file://{}", target.display()))
    }
}
