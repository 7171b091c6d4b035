//! Iceberg file I/O on S3 (`s3://bucket/key`) through our own aws-sdk-s3 client.
//!
//! iceberg-rust's S3 support comes through OpenDAL; this storage uses the client of
//! [`crate::aws::Aws`] instead, so it honours the same endpoint (`AWS_ENDPOINT_URL`, moto in
//! tests), retries and credentials as every other AWS call, and its requests are counted.
//!
//! - `read` is one `GetObject`; a [`FileRead`] issues ranged `GetObject`s (Parquet readers
//!   read footers and column chunks by range).
//! - `write` is one `PutObject`. A streamed file (Parquet data, manifests) is buffered up to
//!   [`PART_SIZE`]; a file that stays smaller is one `PutObject` on `close`, a larger one a
//!   multipart upload (aborted when a part fails). Nothing is visible before `close`
//!   returns: S3 publishes an object whole or not at all.
//! - `delete_prefix` lists the prefix and deletes in batches of 1000 keys.
//!
//! SDK calls run on the [`Aws`] handle's runtime ([`Aws::run`]), so the storage works from
//! any runtime, including the sinks' small current-thread ones.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use serde::{Deserialize, Serialize};

use crate::aws::{Aws, AwsError, SdkFailure, is_retryable_code};

/// Size of each part of a multipart upload, and the buffer a streamed file fills before its
/// first part is sent (S3's minimum part size is 5 MiB).
pub const PART_SIZE: usize = 8 << 20;

/// The checksum every multipart upload names, sends with each part and lists on completion.
const PART_CHECKSUM: aws_sdk_s3::types::ChecksumAlgorithm =
    aws_sdk_s3::types::ChecksumAlgorithm::Crc32;

/// Keys per `DeleteObjects` request (S3's maximum).
const DELETE_BATCH: usize = 1000;

/// What went wrong with an S3 object.
#[derive(Debug, thiserror::Error)]
pub enum S3StorageError {
    /// The path is not an `s3://bucket/key` URI.
    #[error("`{uri}` is not an s3://bucket/key URI")]
    BadUri {
        /// The path given.
        uri: String,
    },
    /// An S3 request failed after the SDK's retries.
    #[error("S3 {operation} of {uri}: {failure}")]
    Sdk {
        /// The request (`GetObject`, ...).
        operation: &'static str,
        /// The object or prefix.
        uri: String,
        /// What the SDK reported.
        failure: SdkFailure,
    },
    /// A response body could not be read to its end.
    #[error("S3 {operation} of {uri}: reading the response body: {message}")]
    Body {
        /// The request.
        operation: &'static str,
        /// The object.
        uri: String,
        /// The cause.
        message: String,
    },
    /// A streamed file was written to after it was closed (a bug of the caller).
    #[error("{uri}: write to a closed file")]
    Closed {
        /// The object.
        uri: String,
    },
    /// The storage was deserialized, which leaves it without a client.
    #[error("S3 storage for {uri} has no client (it was deserialized, not built by skipprd)")]
    NoClient {
        /// The object.
        uri: String,
    },
    /// The runtime of the AWS calls is gone.
    #[error("S3 request for {uri}: {source}")]
    Runtime {
        /// The object.
        uri: String,
        /// The cause.
        #[source]
        source: AwsError,
    },
}

impl S3StorageError {
    /// Whether trying again later may succeed: the AWS error's own flag (throttling, 5xx,
    /// timeouts and transport errors are retryable; a refused request such as `AccessDenied`
    /// is not), and a body cut off mid-way.
    pub fn is_retryable(&self) -> bool {
        match self {
            S3StorageError::Sdk { failure, .. } => failure.retryable,
            S3StorageError::Runtime { source, .. } => source.is_retryable(),
            S3StorageError::Body { .. } => true,
            S3StorageError::BadUri { .. }
            | S3StorageError::Closed { .. }
            | S3StorageError::NoClient { .. } => false,
        }
    }
}

/// An [`iceberg::Error`] flagged [retryable](iceberg::Error::retryable) exactly when the S3
/// error is ([`S3StorageError::is_retryable`]); the S3 error is kept as its source.
impl From<S3StorageError> for iceberg::Error {
    fn from(e: S3StorageError) -> Self {
        let retryable = e.is_retryable();
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string())
            .with_retryable(retryable)
            .with_source(e)
    }
}

type S3Result<T> = std::result::Result<T, S3StorageError>;

/// `s3://bucket/key` as `(bucket, key)`; the key may be empty (a bucket root).
pub fn split_uri(uri: &str) -> S3Result<(String, String)> {
    let bad = || S3StorageError::BadUri {
        uri: uri.to_owned(),
    };
    let rest = uri.strip_prefix("s3://").ok_or_else(bad)?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad());
    }
    Ok((bucket.to_owned(), key.to_owned()))
}

/// The client and the runtime its calls run on.
#[derive(Clone)]
struct Client {
    aws: Aws,
    s3: aws_sdk_s3::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("aws", &self.aws).finish()
    }
}

/// A [`FileIO`] over [`S3Storage`] with `aws`'s S3 client (`endpoint` overrides the
/// environment's).
pub fn s3_file_io(aws: &Aws, endpoint: Option<&str>) -> FileIO {
    FileIOBuilder::new(Arc::new(S3StorageFactory::new(aws, endpoint))).build()
}

/// Builds [`S3Storage`] around one client.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct S3StorageFactory {
    #[serde(skip)]
    client: Option<Client>,
}

impl S3StorageFactory {
    /// A factory of storages using `aws`'s S3 client (`endpoint` overrides the environment's).
    pub fn new(aws: &Aws, endpoint: Option<&str>) -> Self {
        S3StorageFactory {
            client: Some(Client {
                aws: aws.clone(),
                s3: aws.s3(endpoint),
            }),
        }
    }
}

#[typetag::serde]
impl StorageFactory for S3StorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(S3Storage {
            client: self.client.clone(),
        }))
    }
}

/// Iceberg storage on S3 (see the module docs).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct S3Storage {
    #[serde(skip)]
    client: Option<Client>,
}

fn is_not_found(failure: &SdkFailure) -> bool {
    failure.status == Some(404) || matches!(failure.code.as_str(), "NoSuchKey" | "NotFound")
}

impl S3Storage {
    fn client(&self, uri: &str) -> S3Result<&Client> {
        self.client
            .as_ref()
            .ok_or_else(|| S3StorageError::NoClient {
                uri: uri.to_owned(),
            })
    }

    /// Run `f(client)` on the AWS runtime.
    async fn call<T, F, Fut>(&self, uri: &str, f: F) -> S3Result<T>
    where
        F: FnOnce(aws_sdk_s3::Client) -> Fut,
        Fut: std::future::Future<Output = S3Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let client = self.client(uri)?;
        client
            .aws
            .run(f(client.s3.clone()))
            .await
            .map_err(|source| S3StorageError::Runtime {
                uri: uri.to_owned(),
                source,
            })?
    }

    /// The object's size, or `None` when it does not exist.
    async fn head(&self, uri: &str) -> S3Result<Option<u64>> {
        let (bucket, key) = split_uri(uri)?;
        let owned = uri.to_owned();
        self.call(uri, move |s3| async move {
            match s3.head_object().bucket(bucket).key(key).send().await {
                Ok(out) => Ok(Some(out.content_length().unwrap_or(0).max(0) as u64)),
                Err(e) => {
                    let failure = SdkFailure::from_sdk(&e);
                    if is_not_found(&failure) {
                        Ok(None)
                    } else {
                        Err(S3StorageError::Sdk {
                            operation: "HeadObject",
                            uri: owned,
                            failure,
                        })
                    }
                }
            }
        })
        .await
    }

    /// The object's bytes, or the bytes of `range` of it.
    async fn get(&self, uri: &str, range: Option<Range<u64>>) -> S3Result<Bytes> {
        if let Some(r) = &range
            && r.start >= r.end
        {
            return Ok(Bytes::new());
        }
        let (bucket, key) = split_uri(uri)?;
        let owned = uri.to_owned();
        self.call(uri, move |s3| async move {
            let mut request = s3.get_object().bucket(bucket).key(key);
            if let Some(r) = range {
                request = request.range(format!("bytes={}-{}", r.start, r.end - 1));
            }
            let out = request.send().await.map_err(|e| S3StorageError::Sdk {
                operation: "GetObject",
                uri: owned.clone(),
                failure: SdkFailure::from_sdk(&e),
            })?;
            let body = out.body.collect().await.map_err(|e| S3StorageError::Body {
                operation: "GetObject",
                uri: owned,
                message: e.to_string(),
            })?;
            Ok(body.into_bytes())
        })
        .await
    }

    async fn put(&self, uri: &str, bytes: Bytes) -> S3Result<()> {
        let (bucket, key) = split_uri(uri)?;
        let owned = uri.to_owned();
        self.call(uri, move |s3| async move {
            s3.put_object()
                .bucket(bucket)
                .key(key)
                .body(bytes.into())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| S3StorageError::Sdk {
                    operation: "PutObject",
                    uri: owned,
                    failure: SdkFailure::from_sdk(&e),
                })
        })
        .await
    }

    /// Delete `keys` of `bucket`, [`DELETE_BATCH`] per request.
    async fn delete_keys(&self, bucket: &str, keys: Vec<String>) -> S3Result<()> {
        use aws_sdk_s3::types::{Delete, ObjectIdentifier};
        for chunk in keys.chunks(DELETE_BATCH) {
            let uri = format!("s3://{bucket}/{}", chunk.first().map_or("", |k| k.as_str()));
            let mut objects = Vec::with_capacity(chunk.len());
            for key in chunk {
                objects.push(ObjectIdentifier::builder().key(key).build().map_err(|e| {
                    S3StorageError::Sdk {
                        operation: "DeleteObjects",
                        uri: uri.clone(),
                        failure: SdkFailure {
                            code: "construction".into(),
                            status: None,
                            message: e.to_string(),
                            retryable: false,
                        },
                    }
                })?);
            }
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| S3StorageError::Sdk {
                    operation: "DeleteObjects",
                    uri: uri.clone(),
                    failure: SdkFailure {
                        code: "construction".into(),
                        status: None,
                        message: e.to_string(),
                        retryable: false,
                    },
                })?;
            let bucket = bucket.to_owned();
            let owned = uri.clone();
            self.call(&uri, move |s3| async move {
                let out = s3
                    .delete_objects()
                    .bucket(bucket)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|e| S3StorageError::Sdk {
                        operation: "DeleteObjects",
                        uri: owned.clone(),
                        failure: SdkFailure::from_sdk(&e),
                    })?;
                match out.errors().first() {
                    None => Ok(()),
                    Some(error) => Err(S3StorageError::Sdk {
                        operation: "DeleteObjects",
                        uri: format!("{owned} (key {})", error.key().unwrap_or("?")),
                        failure: SdkFailure {
                            code: error.code().unwrap_or("unknown").to_owned(),
                            status: None,
                            message: error.message().unwrap_or_default().to_owned(),
                            // A key refused (`AccessDenied`) stays refused; `SlowDown` or
                            // `InternalError` may pass next time.
                            retryable: error.code().is_none_or(is_retryable_code),
                        },
                    }),
                }
            })
            .await?;
        }
        Ok(())
    }

    /// Every key under `prefix` of `bucket`.
    async fn list(&self, bucket: &str, prefix: &str) -> S3Result<Vec<String>> {
        let uri = format!("s3://{bucket}/{prefix}");
        let bucket = bucket.to_owned();
        let prefix = prefix.to_owned();
        let owned = uri.clone();
        self.call(&uri, move |s3| async move {
            let mut keys = Vec::new();
            let mut pages = s3
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| S3StorageError::Sdk {
                    operation: "ListObjectsV2",
                    uri: owned.clone(),
                    failure: SdkFailure::from_sdk(&e),
                })?;
                keys.extend(
                    page.contents()
                        .iter()
                        .filter_map(|o| o.key().map(str::to_owned)),
                );
            }
            Ok(keys)
        })
        .await
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for S3Storage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        Ok(self.head(path).await?.is_some())
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        match self.head(path).await? {
            Some(size) => Ok(FileMetadata { size }),
            None => Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{path} does not exist"),
            )),
        }
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        Ok(self.get(path, None).await?)
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        split_uri(path)?;
        Ok(Box::new(S3FileRead {
            storage: self.clone(),
            uri: path.to_owned(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        Ok(self.put(path, bs).await?)
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let (bucket, key) = split_uri(path)?;
        Ok(Box::new(S3FileWrite {
            storage: self.clone(),
            uri: path.to_owned(),
            bucket,
            key,
            buffer: BytesMut::new(),
            upload: None,
            closed: false,
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        let (bucket, key) = split_uri(path)?;
        Ok(self.delete_keys(&bucket, vec![key]).await?)
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let (bucket, mut prefix) = split_uri(path)?;
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        let keys = self.list(&bucket, &prefix).await?;
        Ok(self.delete_keys(&bucket, keys).await?)
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        let mut by_bucket: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        while let Some(path) = paths.next().await {
            let (bucket, key) = split_uri(&path)?;
            by_bucket.entry(bucket).or_default().push(key);
        }
        for (bucket, keys) in by_bucket {
            self.delete_keys(&bucket, keys).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Ranged reads of one object.
struct S3FileRead {
    storage: S3Storage,
    uri: String,
}

#[async_trait]
impl FileRead for S3FileRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        Ok(self.storage.get(&self.uri, Some(range)).await?)
    }
}

/// A multipart upload in progress: its id and the parts sent.
struct Upload {
    id: String,
    parts: Vec<aws_sdk_s3::types::CompletedPart>,
}

/// A streamed object (see the module docs).
struct S3FileWrite {
    storage: S3Storage,
    uri: String,
    bucket: String,
    key: String,
    buffer: BytesMut,
    upload: Option<Upload>,
    closed: bool,
}

impl S3FileWrite {
    fn sdk(&self, operation: &'static str) -> impl Fn(SdkFailure) -> S3StorageError + use<> {
        let uri = self.uri.clone();
        move |failure| S3StorageError::Sdk {
            operation,
            uri: uri.clone(),
            failure,
        }
    }

    /// Send the buffer as the next part, starting the upload if needed.
    ///
    /// The three calls agree on the checksum (see [`PART_CHECKSUM`]): the upload is created
    /// naming CRC32, each part is sent with its CRC32 (which the SDK computes) and the
    /// completion lists every part's CRC32 beside its ETag. Left to itself the SDK adds a
    /// CRC32 to each part while the creation names no algorithm and the completion sends no
    /// part checksums, a mix real S3 may refuse with `InvalidPart`.
    async fn send_part(&mut self) -> S3Result<()> {
        if self.upload.is_none() {
            let (bucket, key, err) = (
                self.bucket.clone(),
                self.key.clone(),
                self.sdk("CreateMultipartUpload"),
            );
            let id = self
                .storage
                .call(&self.uri, move |s3| async move {
                    let out = s3
                        .create_multipart_upload()
                        .bucket(bucket)
                        .key(key)
                        .checksum_algorithm(PART_CHECKSUM)
                        .send()
                        .await
                        .map_err(|e| err(SdkFailure::from_sdk(&e)))?;
                    Ok(out.upload_id().unwrap_or_default().to_owned())
                })
                .await?;
            self.upload = Some(Upload {
                id,
                parts: Vec::new(),
            });
        }
        let Some(upload) = self.upload.as_mut() else {
            return Ok(());
        };
        let number = upload.parts.len() as i32 + 1;
        let body = self.buffer.split().freeze();
        let (bucket, key, id) = (self.bucket.clone(), self.key.clone(), upload.id.clone());
        let err = {
            let uri = self.uri.clone();
            move |failure| S3StorageError::Sdk {
                operation: "UploadPart",
                uri: uri.clone(),
                failure,
            }
        };
        let etag = self
            .storage
            .call(&self.uri, move |s3| async move {
                let out = s3
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(id)
                    .part_number(number)
                    .checksum_algorithm(PART_CHECKSUM)
                    .body(body.into())
                    .send()
                    .await
                    .map_err(|e| err(SdkFailure::from_sdk(&e)))?;
                Ok((
                    out.e_tag().map(str::to_owned),
                    out.checksum_crc32().map(str::to_owned),
                ))
            })
            .await?;
        let (etag, checksum) = etag;
        upload.parts.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(number)
                .set_e_tag(etag)
                .set_checksum_crc32(checksum)
                .build(),
        );
        Ok(())
    }

    async fn finish(&mut self) -> S3Result<()> {
        let Some(upload) = self.upload.take() else {
            let body = self.buffer.split().freeze();
            return self.storage.put(&self.uri, body).await;
        };
        self.upload = Some(upload);
        if !self.buffer.is_empty() {
            self.send_part().await?;
        }
        let Some(upload) = self.upload.take() else {
            return Ok(());
        };
        let (bucket, key, err) = (
            self.bucket.clone(),
            self.key.clone(),
            self.sdk("CompleteMultipartUpload"),
        );
        self.storage
            .call(&self.uri, move |s3| async move {
                s3.complete_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(upload.id)
                    .multipart_upload(
                        aws_sdk_s3::types::CompletedMultipartUpload::builder()
                            .set_parts(Some(upload.parts))
                            .build(),
                    )
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| err(SdkFailure::from_sdk(&e)))
            })
            .await
    }

    /// Abort the multipart upload, if one was started (best effort: S3 lifecycle rules reap
    /// what an abort misses).
    async fn abort(&mut self) {
        let Some(upload) = self.upload.take() else {
            return;
        };
        let (bucket, key) = (self.bucket.clone(), self.key.clone());
        let result = self
            .storage
            .call(&self.uri, move |s3| async move {
                s3.abort_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(upload.id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| S3StorageError::Sdk {
                        operation: "AbortMultipartUpload",
                        uri: String::new(),
                        failure: SdkFailure::from_sdk(&e),
                    })
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(uri = %self.uri, error = %e, "Could not abort a multipart upload; an S3 lifecycle rule for incomplete uploads reclaims it.");
        }
    }
}

#[async_trait]
impl FileWrite for S3FileWrite {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        if self.closed {
            return Err(S3StorageError::Closed {
                uri: self.uri.clone(),
            }
            .into());
        }
        self.buffer.extend_from_slice(&bs);
        if self.buffer.len() >= PART_SIZE
            && let Err(e) = self.send_part().await
        {
            self.abort().await;
            self.closed = true;
            return Err(e.into());
        }
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        if self.closed {
            return Err(S3StorageError::Closed {
                uri: self.uri.clone(),
            }
            .into());
        }
        self.closed = true;
        if let Err(e) = self.finish().await {
            self.abort().await;
            return Err(e.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::sdk_failure;

    fn put_failed(status: u16, code: &str) -> iceberg::Error {
        S3StorageError::Sdk {
            operation: "PutObject",
            uri: "s3://lake/t/metadata/v1.metadata.json".into(),
            failure: sdk_failure(status, code),
        }
        .into()
    }

    #[test]
    fn access_denied_is_handed_to_iceberg_as_not_retryable_and_a_throttle_as_retryable() {
        let denied = put_failed(403, "AccessDenied");
        assert!(!denied.retryable(), "{denied}");
        assert!(denied.to_string().contains("AccessDenied"), "{denied}");
        for (status, code) in [
            (503, "SlowDown"),
            (500, "InternalError"),
            (503, "ServiceUnavailable"),
        ] {
            let throttled = put_failed(status, code);
            assert!(throttled.retryable(), "{throttled}");
        }
        let stopped: iceberg::Error = S3StorageError::Runtime {
            uri: "s3://lake/x".into(),
            source: AwsError::Stopped,
        }
        .into();
        assert!(!stopped.retryable());
        let cut: iceberg::Error = S3StorageError::Body {
            operation: "GetObject",
            uri: "s3://lake/x".into(),
            message: "connection reset".into(),
        }
        .into();
        assert!(cut.retryable());
    }

    #[test]
    fn uris_split_into_bucket_and_key() -> Result<(), S3StorageError> {
        assert_eq!(
            split_uri("s3://b/x/y.json")?,
            ("b".to_owned(), "x/y.json".to_owned())
        );
        assert_eq!(split_uri("s3://b")?, ("b".to_owned(), String::new()));
        assert!(matches!(
            split_uri("file:///x"),
            Err(S3StorageError::BadUri { .. })
        ));
        assert!(matches!(
            split_uri("s3:///x"),
            Err(S3StorageError::BadUri { .. })
        ));
        Ok(())
    }
}
