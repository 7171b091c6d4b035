//! The S3 source's checkpoint: the listing watermark and what was read of each object above it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sources::SourceError;
use crate::sources::file::{Compression, FileFormat};

/// The checkpoint format's version, in its `"v"` field.
pub const S3_CHECKPOINT_VERSION: u32 = 1;

/// The value of the checkpoint's `"source"` field.
const SOURCE_KIND: &str = "s3";

/// What the S3 source has read: the bytes [`Source::checkpoint`] returns, as JSON.
///
/// [`Source::checkpoint`]: crate::sources::Source::checkpoint
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Checkpoint {
    /// The format's version: [`S3_CHECKPOINT_VERSION`].
    pub v: u32,
    /// Always `"s3"`: tells this checkpoint from another source's.
    pub source: String,
    /// The bucket read.
    pub bucket: String,
    /// The key prefix read.
    pub prefix: String,
    /// The listing watermark: every object whose key is at or below it was read to its end
    /// (or reported) and is never listed again (`StartAfter`). `None` before the first one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Per object above the watermark that was (partly) read, keyed by its key.
    pub objects: BTreeMap<String, ObjectProgress>,
}

/// How far one object was read, and which version of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectProgress {
    /// The ETag of the object's content that was read.
    pub etag: String,
    /// The object's size in bytes.
    pub size: u64,
    /// The format it is read as; `None` for an object skipped because its format could not
    /// be told (or it cannot be read in its format).
    pub format: Option<FileFormat>,
    /// How it is compressed.
    pub compression: Compression,
    /// Bytes of the decompressed stream consumed up to the end of the last record (or
    /// deadletter) returned; for Parquet, rows.
    pub offset: u64,
    /// Records consumed, numbering what follows (lines for JSON lines and CSV).
    pub records: u64,
    /// Whether the object was read to its end (or skipped, or reported as changed): closed.
    pub done: bool,
}

/// Only the fields that tell what the bytes are, read before the rest so that an unknown
/// version or another source's checkpoint is named as such.
#[derive(Deserialize)]
struct Kind {
    v: serde_json::Value,
    #[serde(default)]
    source: Option<String>,
}

impl S3Checkpoint {
    /// An empty checkpoint of `bucket` and `prefix`: nothing read yet.
    pub fn new(bucket: &str, prefix: &str) -> S3Checkpoint {
        S3Checkpoint {
            v: S3_CHECKPOINT_VERSION,
            source: SOURCE_KIND.to_owned(),
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            after: None,
            objects: BTreeMap::new(),
        }
    }

    /// Read checkpoint bytes of the S3 source reading `uri` (`s3://bucket/prefix`, for
    /// messages); anything but a version-1 S3 source checkpoint is
    /// [`SourceError::BadCheckpoint`].
    pub fn from_bytes(bytes: &[u8], uri: &str) -> Result<S3Checkpoint, SourceError> {
        let bad = |message: String| SourceError::BadCheckpoint {
            path: uri.to_owned(),
            message,
        };
        let kind: Kind = serde_json::from_slice(bytes).map_err(|error| {
            bad(format!(
                "it is not an S3 source checkpoint ({})",
                crate::sources::error::lower_first(&error.to_string())
            ))
        })?;
        if kind.source.as_deref() != Some(SOURCE_KIND) {
            return Err(bad(
                "it is another source's checkpoint (was the pipeline's source changed? its state must be reset)"
                    .to_owned(),
            ));
        }
        if kind.v != S3_CHECKPOINT_VERSION {
            return Err(bad(format!(
                "unknown checkpoint version {} (this skipprd reads version {S3_CHECKPOINT_VERSION})",
                kind.v
            )));
        }
        serde_json::from_slice(bytes).map_err(|error| {
            bad(format!(
                "it is corrupt ({})",
                crate::sources::error::lower_first(&error.to_string())
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_round_trips_through_its_json_bytes() {
        let mut checkpoint = S3Checkpoint::new("b", "in/");
        checkpoint.after = Some("in/a.jsonl".into());
        checkpoint.objects.insert(
            "in/b.csv.gz".into(),
            ObjectProgress {
                etag: "\"e\"".into(),
                size: 10,
                format: Some(FileFormat::Csv),
                compression: Compression::Gzip,
                offset: 4,
                records: 2,
                done: false,
            },
        );
        let bytes = serde_json::to_vec(&checkpoint).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"v":1,"source":"s3","bucket":"b","prefix":"in/","after":"in/a.jsonl","objects":{"in/b.csv.gz":{"etag":"\"e\"","size":10,"format":"csv","compression":"gzip""#),
            "{text}"
        );
        assert_eq!(
            S3Checkpoint::from_bytes(&bytes, "s3://b/in/").unwrap(),
            checkpoint
        );
    }

    #[test]
    fn another_sources_or_a_corrupt_checkpoint_is_a_bad_checkpoint_naming_the_prefix() {
        for (bytes, message) in [
            (
                &br#"{"v":1,"files":{}}"#[..],
                "cannot resume `s3://b/in/` from its checkpoint: it is another source's checkpoint (was the pipeline's source changed? its state must be reset)",
            ),
            (
                br#"{"v":2,"source":"s3"}"#,
                "cannot resume `s3://b/in/` from its checkpoint: unknown checkpoint version 2 (this skipprd reads version 1)",
            ),
            (
                b"[",
                "cannot resume `s3://b/in/` from its checkpoint: it is not an S3 source checkpoint (EOF while parsing a list at line 1 column 1)",
            ),
        ] {
            let error = S3Checkpoint::from_bytes(bytes, "s3://b/in/").unwrap_err();
            assert_eq!(error.to_string(), message);
            assert!(!error.is_retryable());
        }
    }
}
