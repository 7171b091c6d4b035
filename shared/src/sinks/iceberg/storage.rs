//! Local file storage for Iceberg that makes every file it writes durable.
//!
//! iceberg-rust's `LocalFsStorage` writes with plain `fs::write` and never fsyncs, which is
//! enough for tests but not for a lake that must survive power loss: a metadata file could
//! become durable while a data file it points to did not. This storage reads through
//! `LocalFsStorage` and writes its own way:
//!
//! - a streamed file (Parquet data, manifests, manifest lists) is fsynced on `close`, then
//!   its directory, so the file is durable before anything that references it is written;
//! - a whole-file `write` goes to a temporary name first, is fsynced and renamed into place
//!   (readers never see a half-written file), and the directory is fsynced.
//!
//! Directories created on the way are fsynced too (their parents record them). The durable
//! steps are [`crate::durable`]'s. Errors are flagged retryable only when the operating
//! system's error is transient, so the sink does not retry a refused permission.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage,
    OutputFile, Storage, StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

use crate::durable::{DurableError, create_dir_durable, is_transient, sync_dir, write_atomic};

/// A [`FileIO`] over [`DurableFsStorage`].
pub fn durable_file_io() -> FileIO {
    FileIOBuilder::new(Arc::new(DurableFsStorageFactory)).build()
}

/// Builds [`DurableFsStorage`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DurableFsStorageFactory;

#[typetag::serde]
impl StorageFactory for DurableFsStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(DurableFsStorage))
    }
}

/// Local file storage whose writes are durable when they return (see the module docs).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DurableFsStorage;

/// `file:///a/b` (or `file:/a/b`, or a bare path) as a path.
pub fn local_path(uri: &str) -> PathBuf {
    let rest = uri
        .strip_prefix("file://")
        .or_else(|| uri.strip_prefix("file:"))
        .unwrap_or(uri);
    if rest.starts_with('/') {
        PathBuf::from(rest)
    } else {
        PathBuf::from(format!("/{rest}"))
    }
}

/// An I/O error of the local storage or catalog as an [`Error`] naming the path, flagged
/// retryable when the operating system's error is transient
/// ([`crate::durable::is_transient`]).
pub fn io_error(what: &str, path: &Path, error: std::io::Error) -> Error {
    let retryable = is_transient(error.kind());
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} {}: {error}", path.display()),
    )
    .with_retryable(retryable)
    .with_source(error)
}

/// A failed durable write ([`crate::durable`]) as an [`Error`], flagged like [`io_error`].
pub fn durable_error(error: DurableError) -> Error {
    let retryable = error.is_retryable();
    Error::new(ErrorKind::Unexpected, error.to_string())
        .with_retryable(retryable)
        .with_source(error)
}

#[async_trait]
#[typetag::serde]
impl Storage for DurableFsStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        LocalFsStorage.exists(path).await
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        LocalFsStorage.metadata(path).await
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        LocalFsStorage.read(path).await
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        LocalFsStorage.reader(path).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let path = local_path(path);
        write_atomic(&path, &bs).map_err(durable_error)
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let path = local_path(path);
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        create_dir_durable(&dir).map_err(durable_error)?;
        let file = fs::File::create(&path).map_err(|e| io_error("cannot create", &path, e))?;
        Ok(Box::new(DurableFileWrite {
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            path,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        LocalFsStorage.delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        LocalFsStorage.delete_prefix(path).await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        LocalFsStorage.delete_stream(paths).await
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// A file being streamed; durable once closed.
struct DurableFileWrite {
    file: Option<std::io::BufWriter<fs::File>>,
    path: PathBuf,
}

#[async_trait]
impl FileWrite for DurableFileWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "write to a closed file"))?;
        file.write_all(&bs)
            .map_err(|e| io_error("cannot write", &self.path, e))
    }

    async fn close(&mut self) -> Result<()> {
        let file = self
            .file
            .take()
            .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "close of a closed file"))?;
        let file = file
            .into_inner()
            .map_err(|e| io_error("cannot write", &self.path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| io_error("cannot fsync", &self.path, e))?;
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        sync_dir(dir).map_err(durable_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_path_accepts_the_uri_forms() {
        assert_eq!(local_path("file:///a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("file:/a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("/a/b"), PathBuf::from("/a/b"));
    }

    #[test]
    fn written_files_read_back_and_leave_no_temporary()
    -> std::result::Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let rt = tokio::runtime::Builder::new_current_thread().build()?;
        let io = durable_file_io();
        let whole = format!("file://{}/x/y/whole.json", dir.path().display());
        let streamed = format!("file://{}/x/z/streamed.bin", dir.path().display());
        rt.block_on(async {
            io.new_output(&whole)?
                .write(Bytes::from_static(b"{}"))
                .await?;
            let mut w = io.new_output(&streamed)?.writer().await?;
            w.write(Bytes::from_static(b"ab")).await?;
            w.write(Bytes::from_static(b"cd")).await?;
            w.close().await?;
            Ok::<_, Error>(())
        })?;
        assert_eq!(fs::read(dir.path().join("x/y/whole.json"))?, b"{}");
        assert_eq!(fs::read(dir.path().join("x/z/streamed.bin"))?, b"abcd");
        let names: Vec<_> = fs::read_dir(dir.path().join("x/y"))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::result::Result<_, _>>()?;
        assert_eq!(names, vec![std::ffi::OsString::from("whole.json")]);
        Ok(())
    }
}
