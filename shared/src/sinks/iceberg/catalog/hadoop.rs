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
use crate::durable::{DurableError, create_dir_durable, sync_dir, write_atomic};

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

/// Point `version-hint.text` at `version`, or past it when a later version is already
/// linked. Writers that race end with the hint at the highest version: each one writes its
/// version, then looks for the next one and moves on to it, so whichever writes last has
/// seen every version linked before its write.
fn advance_hint(table_dir: &Path, mut version: u64) -> std::result::Result<(), DurableError> {
    let hint = table_dir.join("metadata").join(VERSION_HINT);
    loop {
        write_atomic(&hint, version.to_string().as_bytes())?;
        if !version_file(table_dir, version + 1).is_file() {
            return Ok(());
        }
        while version_file(table_dir, version + 1).is_file() {
            version += 1;
        }
    }
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
        // A hint behind the current version (a crash between a commit and its hint) would
        // show readers that trust it (DuckDB's `iceberg_scan`, PyIceberg) an older table
        // until the next commit, which may never come: repair it now.
        if let Some(v) = version
            && hinted != Some(v)
            && let Err(e) = advance_hint(table_dir, v)
        {
            tracing::debug!(table = %table_dir.display(), error = %e, "Could not repair the Iceberg version hint.");
        }
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
        // The commit is done. A crash here leaves the hint behind; the next `current` of the
        // table repairs it.
        if crate::failpoint::check(crate::failpoint::sink::BEFORE_VERSION_HINT) {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "failpoint sink.before_version_hint",
            ));
        }
        // The hint is what readers open: a failure to update it is logged, not returned (a
        // retry would commit the same changes twice).
        if let Err(e) = advance_hint(table_dir, next) {
            tracing::warn!(table = %table_dir.display(), error = %e, "Could not update the Iceberg version hint; readers that use it see the previous version until the next commit.");
        }
        Ok(format!("file://{}", target.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::{NamespaceIdent, TableIdent};

    fn hint(table_dir: &Path) -> String {
        fs::read_to_string(table_dir.join("metadata").join(VERSION_HINT)).unwrap_or_default()
    }

    /// Versions 1..=`upto` linked, as commits leave them (the content is not read here).
    fn link_versions(table_dir: &Path, upto: u64) {
        fs::create_dir_all(table_dir.join("metadata")).unwrap();
        for v in 1..=upto {
            fs::write(version_file(table_dir, v), b"{}").unwrap();
        }
    }

    fn current(table_dir: &Path) -> Option<u64> {
        let ident = TableIdent::new(NamespaceIdent::new("ns".to_owned()), "t".to_owned());
        let location = format!("file://{}", table_dir.display());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(HadoopPointer.current(TableRef {
                ident: &ident,
                location: &location,
            }))
            .unwrap()
            .map(|c| c.version)
    }

    /// Regression: a crash between linking `v3.metadata.json` and rewriting the hint left
    /// the hint at 2; a later pass with nothing new to commit found the batch landed (the
    /// pointer rolls forward) but never rewrote the hint, so DuckDB and PyIceberg read the
    /// table without the last commit's rows (3,000 of 113,000 in a Postgres kill loop).
    #[test]
    fn reading_the_current_version_repairs_a_hint_left_behind_by_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t");
        link_versions(&table, 3);
        write_atomic(&table.join("metadata").join(VERSION_HINT), b"2").unwrap();
        assert_eq!(current(&table), Some(3));
        assert_eq!(hint(&table), "3");
        // A hint naming a missing version, or none at all: the highest listed version.
        fs::remove_file(table.join("metadata").join(VERSION_HINT)).unwrap();
        assert_eq!(current(&table), Some(3));
        assert_eq!(hint(&table), "3");
        write_atomic(&table.join("metadata").join(VERSION_HINT), b"9").unwrap();
        assert_eq!(current(&table), Some(3));
        assert_eq!(hint(&table), "3");
    }

    /// A writer whose hint write comes after a faster writer's (the later version) moves the
    /// hint on to that version instead of leaving it behind.
    #[test]
    fn a_late_hint_write_moves_on_to_the_versions_linked_since() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t");
        link_versions(&table, 5);
        advance_hint(&table, 3).unwrap();
        assert_eq!(hint(&table), "5");
        advance_hint(&table, 5).unwrap();
        assert_eq!(hint(&table), "5");
    }
}
