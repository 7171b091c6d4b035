//! Reading one object: a blocking [`Read`] over a `GetObject` body, and random access by
//! ranged GETs for Parquet.

use std::io::{self, Read};

use aws_sdk_s3::primitives::ByteStream;
use bytes::{Buf, Bytes};
use parquet::file::reader::{ChunkReader, Length};

use crate::aws::{Aws, SdkFailure};
use crate::sources::error::S3Operation;
use crate::sources::{EtagChange, SourceError};

/// Where an object lives, and which version of it is wanted.
#[derive(Clone)]
pub(crate) struct ObjectAt {
    pub(crate) aws: Aws,
    pub(crate) client: aws_sdk_s3::Client,
    pub(crate) bucket: String,
    pub(crate) key: String,
    /// The ETag every GET requires (`If-Match`); `None` takes whatever is there.
    pub(crate) etag: Option<String>,
}

/// An object's body as returned by a GET: the stream and the ETag of what it holds.
pub(crate) struct Body {
    pub(crate) reader: BodyReader,
    pub(crate) etag: Option<String>,
}

impl ObjectAt {
    /// The object as `s3://bucket/key`.
    pub(crate) fn uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    /// GET the object from byte `from` (0: all of it) to `to` (inclusive; `None`: its end).
    /// A missing object has [`SourceError::Vanished`]; one whose ETag is no longer the one
    /// asked for has [`SourceError::ObjectChanged`].
    pub(crate) fn get(&self, from: u64, to: Option<u64>) -> Result<Body, SourceError> {
        let range = match (from, to) {
            (0, None) => None,
            (from, None) => Some(format!("bytes={from}-")),
            (from, Some(to)) => Some(format!("bytes={from}-{to}")),
        };
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .set_if_match(self.etag.clone())
            .set_range(range);
        match self.aws.block_on(request.send()) {
            Ok(output) => Ok(Body {
                etag: output.e_tag,
                reader: BodyReader {
                    aws: self.aws.clone(),
                    body: output.body,
                    chunk: Bytes::new(),
                },
            }),
            Err(error) => {
                let failure = SdkFailure::from_sdk(&error);
                Err(match failure.status {
                    Some(404) => SourceError::Vanished { path: self.uri() },
                    Some(412) => SourceError::ObjectChanged {
                        bucket: self.bucket.clone(),
                        key: self.key.clone(),
                        etags: Box::new(EtagChange {
                            was: self.etag.clone().unwrap_or_default(),
                            now: "a new one (it changed while being read)".to_owned(),
                        }),
                    },
                    _ => SourceError::S3 {
                        bucket: self.bucket.clone(),
                        key: self.key.clone(),
                        operation: S3Operation::Get,
                        failure: Box::new(failure),
                    },
                })
            }
        }
    }
}

/// A blocking reader over an object's body: one chunk held at a time, so memory stays bounded
/// whatever the object's size.
pub(crate) struct BodyReader {
    aws: Aws,
    body: ByteStream,
    /// What is left of the chunk received last.
    chunk: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.aws.block_on(self.body.next()) {
                None => return Ok(0),
                Some(Ok(chunk)) => self.chunk = chunk,
                // The body broke off (a reset or timed-out connection): worth another try,
                // which the next pass makes from the last record returned.
                Some(Err(error)) => {
                    return Err(io::Error::new(io::ErrorKind::ConnectionAborted, error));
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk.advance(n);
        Ok(n)
    }
}

/// An object read by ranges, for the Parquet reader (which reads the footer, then the column
/// chunks it needs). Every GET requires the object's ETag, so a rewritten object fails the
/// read instead of mixing versions.
pub(crate) struct Ranges {
    pub(crate) object: ObjectAt,
    pub(crate) size: u64,
}

impl Length for Ranges {
    fn len(&self) -> u64 {
        self.size
    }
}

/// A Parquet error carrying a source error.
fn parquet_error(error: SourceError) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(error))
}

impl ChunkReader for Ranges {
    type T = BodyReader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<BodyReader> {
        self.object
            .get(start, None)
            .map(|body| body.reader)
            .map_err(parquet_error)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if length == 0 {
            return Ok(Bytes::new());
        }
        let end = start + length as u64 - 1;
        let mut body = self
            .object
            .get(start, Some(end))
            .map_err(parquet_error)?
            .reader;
        let mut out = Vec::with_capacity(length);
        body.read_to_end(&mut out).map_err(|error| {
            parquet_error(SourceError::Io {
                path: self.object.uri(),
                source: error,
            })
        })?;
        if out.len() != length {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "expected {length} bytes at offset {start} of `{}`, got {}",
                self.object.uri(),
                out.len()
            )));
        }
        Ok(Bytes::from(out))
    }
}
