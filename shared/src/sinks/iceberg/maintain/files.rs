//! The files under a table's location, with their sizes and modification times: a local
//! directory (`file://`) or an S3 prefix (`s3://`, listed with `ListObjectsV2`, one request
//! per 1,000 keys). [`super::cleanup`] decides from these listings alone, so its rules are
//! written once for both; files are deleted through the table's file I/O (on S3 one
//! `DeleteObjects` per 1,000 keys).
//!
//! Files are named by URI, normalised by [`normalize`] (`file:/x` and `file:///x` are the same
//! file), which is how the live set read from the manifests is matched against a listing.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use futures::StreamExt as _;
use iceberg::io::FileIO;

use crate::aws::Bucket;
use crate::sinks::SinkError;
use crate::sinks::iceberg::catalog::{FileCatalog, LakePointer};
use crate::sinks::iceberg::s3::split_uri;
use crate::sinks::iceberg::storage::local_path;

/// One file of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFile {
    /// Its URI, normalised ([`normalize`]).
    pub uri: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written (S3: whole seconds), when known. A file of unknown age is
    /// never old.
    pub modified: Option<SystemTime>,
}

impl TableFile {
    /// The last part of the URI.
    pub fn name(&self) -> &str {
        self.uri.rsplit('/').next().unwrap_or(&self.uri)
    }
}

/// `uri` as [`TableFile::uri`] names it: a `file:` URI as `file:///abs/path`, any other as is.
pub fn normalize(uri: &str) -> String {
    if uri.starts_with("file:") || uri.starts_with('/') {
        format!("file://{}", local_path(uri).display())
    } else {
        uri.to_owned()
    }
}

/// Where a table's files are listed.
#[derive(Debug)]
pub enum TableFiles {
    /// The table's local directory.
    Local(PathBuf),
    /// The table's prefix (`{key}/`, never empty) in its bucket.
    S3 {
        /// The bucket (boxed: a client is large).
        bucket: Box<Bucket>,
        /// The key prefix of the table, ending in `/`.
        prefix: String,
    },
}

impl TableFiles {
    /// The files of the table `name` at `location` (its metadata's location) of `catalog`.
    pub fn at(
        catalog: &FileCatalog<LakePointer>,
        name: &str,
        location: &str,
    ) -> Result<Self, SinkError> {
        let location = location.trim_end_matches('/');
        if location.starts_with("file:") {
            return Ok(TableFiles::Local(local_path(location)));
        }
        let unsupported = |why: &str| SinkError::Iceberg {
            table: name.to_owned(),
            source: Box::new(iceberg::Error::new(
                iceberg::ErrorKind::FeatureUnsupported,
                format!("cannot list the files under {location} for maintenance: {why}"),
            )),
        };
        let (bucket, key) = split_uri(location).map_err(|e| unsupported(&e.to_string()))?;
        let Some(aws) = catalog.aws() else {
            return Err(unsupported(
                "the catalog has no AWS handle (FileCatalog::with_aws)",
            ));
        };
        if key.is_empty() {
            return Err(unsupported(
                "a table at the root of a bucket is not maintained",
            ));
        }
        Ok(TableFiles::S3 {
            bucket: Box::new(Bucket::new(aws, &bucket, None)),
            prefix: format!("{key}/"),
        })
    }

    /// Every file under the table's subdirectory `dir` (`data`, `metadata`), at any depth.
    pub async fn list(&self, dir: &str) -> Result<Vec<TableFile>, SinkError> {
        match self {
            TableFiles::Local(table_dir) => {
                let mut out = Vec::new();
                list_local(&table_dir.join(dir), &mut out)?;
                Ok(out)
            }
            TableFiles::S3 { bucket, prefix } => {
                let prefix = format!("{prefix}{dir}/");
                let objects = bucket.list_objects(&prefix).await.map_err(|failure| {
                    SinkError::ObjectStore {
                        op: "list",
                        uri: bucket.uri(&prefix),
                        failure: Box::new(failure),
                    }
                })?;
                Ok(objects
                    .into_iter()
                    .map(|o| TableFile {
                        uri: bucket.uri(&o.key),
                        size: o.size,
                        modified: o.last_modified,
                    })
                    .collect())
            }
        }
    }
}

fn list_local(dir: &Path, out: &mut Vec<TableFile>) -> Result<(), SinkError> {
    let io = |source| SinkError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io)?;
        let meta = entry.metadata().map_err(io)?;
        if meta.is_dir() {
            list_local(&entry.path(), out)?;
        } else if meta.is_file() {
            out.push(TableFile {
                uri: normalize(&entry.path().to_string_lossy()),
                size: meta.len(),
                modified: meta.modified().ok(),
            });
        }
    }
    Ok(())
}

/// Delete `uris` through `file_io` (a missing file is not an error), for the table `name`.
pub async fn delete(file_io: &FileIO, name: &str, uris: Vec<String>) -> Result<(), SinkError> {
    if uris.is_empty() {
        return Ok(());
    }
    for uri in &uris {
        tracing::debug!(file = %uri, "Deleting an unreferenced table file.");
    }
    file_io
        .delete_stream(futures::stream::iter(uris).boxed())
        .await
        .map_err(|source| SinkError::Iceberg {
            table: name.to_owned(),
            source: Box::new(source),
        })
}
