//! The landed side of a pipeline with a `File` destination (Parquet): each table's files of
//! this pipeline whose WAL batch is at or below the table's landed marker (see
//! [`crate::sinks::files`]), unioned with the WAL batches above it, so a row is counted once
//! even while a crashed delivery's files of later batches lie beside them.
//!
//! Destinations this build cannot read back are refused by name (never a WAL-only answer that
//! would silently miss the reclaimed rows): `S3` files, `File` files in `jsonl` or `csv`, and
//! `Athena` tables (their files carry Glue's column names; use `query --engine athena`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::ValidatedPipeline;
use crate::config::connectors::OutputFormat;
use crate::config::validate::FileDestinationKind;
use crate::schema::adapt::merge_schemas;
use crate::sinks::Sink as _;
use crate::sinks::files::FileSink;

use super::QueryError;
use super::lake::LakePart;

/// The output directory of a pipeline's `File` destination, its sink, and its file stem;
/// `None` without an overwrite-on-retry destination; an error for one that cannot be read.
pub(super) fn files_source(
    pipeline: &ValidatedPipeline,
) -> Result<Option<(PathBuf, Arc<FileSink>)>, QueryError> {
    let Some(dest) = &pipeline.files else {
        return Ok(None);
    };
    let unsupported = |reason: String| QueryError::Unsupported {
        pipeline: pipeline.name.clone(),
        reason,
    };
    match &dest.kind {
        FileDestinationKind::File { dir } if dest.format == OutputFormat::Parquet => {
            let sink = FileSink::for_destination(dest, &pipeline.store.partition, None)
                .map_err(|e| unsupported(e.to_string()))?;
            Ok(Some((dir.clone(), Arc::new(sink))))
        }
        FileDestinationKind::File { .. } => Err(unsupported(format!(
            "its data_sink '{}' writes {:?} files, which `query` does not read back yet (only Parquet)",
            dest.name, dest.format
        ))),
        FileDestinationKind::Athena(_) => Err(unsupported(format!(
            "its data_sink '{}' is an Athena table: query it with `--engine athena`",
            dest.name
        ))),
        FileDestinationKind::S3 { .. } => Err(unsupported(format!(
            "its data_sink '{}' writes to S3, which `query` does not read back yet",
            dest.name
        ))),
        // Nothing is kept: the WAL is all there is.
        FileDestinationKind::Stdout => Ok(None),
    }
}

/// The landed files of every table of `root` that `sink`'s pipeline has a marker for.
pub(super) fn load_files(
    pipeline: &str,
    root: &Path,
    sink: &FileSink,
) -> Result<BTreeMap<String, LakePart>, QueryError> {
    let err = |reason: String| QueryError::Unsupported {
        pipeline: pipeline.to_owned(),
        reason,
    };
    let mut parts = BTreeMap::new();
    for table in sink.landed_tables().map_err(|e| err(e.to_string()))? {
        let landed = sink.landed(&table).map_err(|e| err(e.to_string()))?;
        if landed == 0 {
            continue;
        }
        let mut files = Vec::new();
        let mut schemas = Vec::new();
        let dir = root.join(&table);
        for path in walk(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))? {
            let Some(batch) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| sink.batch_of(n))
            else {
                continue;
            };
            if batch > landed {
                continue;
            }
            let file =
                std::fs::File::open(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
            let meta =
                parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&file, Default::default())
                    .map_err(|e| err(format!("{}: {e}", path.display())))?;
            schemas.push(Arc::clone(meta.schema()));
            files.push(format!("file://{}", path.display()));
        }
        files.sort();
        parts.insert(
            table,
            LakePart {
                landed,
                schema: merge_schemas(&schemas),
                files,
            },
        );
    }
    Ok(parts)
}

/// Every file below `dir` (none when it does not exist).
fn walk(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}
