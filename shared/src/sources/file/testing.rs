//! Helpers shared by the File source's tests.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{FileSource, FileSourceOptions};
use crate::deadletter::Deadletter;
use crate::sources::{Source, SourceBatch, SourceError, SourceRecord};

/// Write `bytes` to `dir/name`, creating parent directories.
pub(crate) fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `bytes` gzipped.
pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// Options reading `path` relative to `dir`.
pub(crate) fn options(dir: &Path, path: &str) -> FileSourceOptions {
    FileSourceOptions {
        path: path.to_owned(),
        base_dir: dir.to_path_buf(),
        ..FileSourceOptions::default()
    }
}

/// Everything a source yields, batch by batch.
pub(crate) fn batches(options: FileSourceOptions) -> Result<Vec<SourceBatch>, SourceError> {
    let mut source = FileSource::open(options)?;
    let mut out = Vec::new();
    while let Some(batch) = source.next_batch()? {
        out.push(batch);
    }
    Ok(out)
}

/// All records and deadletters a source yields.
pub(crate) fn read_all(
    options: FileSourceOptions,
) -> Result<(Vec<SourceRecord>, Vec<Deadletter>), SourceError> {
    let mut records = Vec::new();
    let mut dead = Vec::new();
    for batch in batches(options)? {
        records.extend(batch.records);
        dead.extend(batch.deadletters);
    }
    Ok((records, dead))
}

/// Read one file written with `bytes`, expecting success.
pub(crate) fn read_bytes(name: &str, bytes: &[u8]) -> (Vec<SourceRecord>, Vec<Deadletter>) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), name, bytes);
    read_all(options(dir.path(), name)).unwrap()
}

/// The records' values as JSON text, for compact comparisons.
pub(crate) fn values(records: &[SourceRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| serde_json::Value::Object(r.value.clone()).to_string())
        .collect()
}
