//! The File source's checkpoint: what was read of each file, and how to tell whether a file is
//! still the one that was read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sources::SourceError;

/// The checkpoint format's version, in its `"v"` field.
pub const CHECKPOINT_VERSION: u32 = 1;

/// The most leading on-disk bytes of a file hashed as its identity.
pub const IDENTITY_BYTES: u64 = 1024;

/// What the File source has read, per file: the bytes [`Source::checkpoint`] returns, as JSON.
///
/// [`Source::checkpoint`]: crate::sources::Source::checkpoint
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCheckpoint {
    /// The format's version: [`CHECKPOINT_VERSION`].
    pub v: u32,
    /// Per file, keyed by its uri as in [`Position::uri`](crate::sources::Position::uri).
    pub files: BTreeMap<String, FileProgress>,
}

/// How far one file was read, and what it looked like then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileProgress {
    /// Bytes of the decompressed stream consumed up to the end of the last record (or
    /// deadletter) returned; for Parquet, rows.
    pub offset: u64,
    /// Records consumed, numbering what follows: lines for JSON lines and CSV (blank lines and
    /// the CSV header included), elements, documents or rows for the other formats.
    pub records: u64,
    /// The file's size on disk when it was listed for that read.
    pub size: u64,
    /// How many leading on-disk bytes `head` hashes: `min(size, 1024)`.
    pub head_len: u64,
    /// The FNV-1a 64-bit hash of the first `head_len` bytes, in hex: the file's identity.
    pub head: String,
    /// Whether the file was read to its end.
    pub done: bool,
}

/// Only the version, read before the rest so an unknown version is named as such.
#[derive(Deserialize)]
struct Version {
    v: serde_json::Value,
}

impl FileCheckpoint {
    /// An empty checkpoint: nothing read yet.
    pub fn new() -> FileCheckpoint {
        FileCheckpoint {
            v: CHECKPOINT_VERSION,
            files: BTreeMap::new(),
        }
    }

    /// The checkpoint as JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Read checkpoint bytes of the File source reading `path`; anything but a version-1
    /// File source checkpoint is [`SourceError::BadCheckpoint`].
    pub fn from_bytes(bytes: &[u8], path: &str) -> Result<FileCheckpoint, SourceError> {
        let bad = |message: String| SourceError::BadCheckpoint {
            path: path.to_owned(),
            message,
        };
        let version: Version = serde_json::from_slice(bytes).map_err(|error| {
            bad(format!(
                "it is not a File source checkpoint ({})",
                crate::sources::error::lower_first(&error.to_string())
            ))
        })?;
        if version.v != CHECKPOINT_VERSION {
            return Err(bad(format!(
                "unknown checkpoint version {} (this skipprd reads version {CHECKPOINT_VERSION})",
                version.v
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

/// A file's identity as found now: its leading bytes' length and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) len: u64,
    pub(crate) hash: String,
}

impl Head {
    /// The identity of a file of `size` bytes starting with `head` (at least its first
    /// [`IDENTITY_BYTES`] bytes, or all of it).
    pub(crate) fn of(size: u64, head: &[u8]) -> Head {
        let len = size.min(IDENTITY_BYTES).min(head.len() as u64);
        Head {
            len,
            hash: fnv1a_hex(&head[..len as usize]),
        }
    }
}

/// The FNV-1a 64-bit hash of `bytes`, as 16 hex digits.
pub(crate) fn fnv1a_hex(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// How a listed file compares with what a checkpoint says was read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Not in the checkpoint.
    New,
    /// The same file, the same size, read to its end: nothing to read.
    Unchanged,
    /// The same file, read to its end, grown since.
    Grown,
    /// The same file, not read to its end, no smaller.
    Unfinished,
    /// Smaller than when it was read: a different file now.
    Shrunk,
    /// Its leading bytes differ: a different file now.
    Replaced,
}

impl FileProgress {
    /// How a file of `size` bytes starting with `head` (its first [`IDENTITY_BYTES`] bytes or
    /// more, or all of it) compares with this progress.
    pub(crate) fn compare(&self, size: u64, head: &[u8]) -> Identity {
        if size < self.size || (head.len() as u64) < self.head_len {
            return Identity::Shrunk;
        }
        if fnv1a_hex(&head[..self.head_len as usize]) != self.head {
            return Identity::Replaced;
        }
        match (self.done, size == self.size) {
            (true, true) => Identity::Unchanged,
            (true, false) => Identity::Grown,
            (false, _) => Identity::Unfinished,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(size: u64, head: &[u8], done: bool) -> FileProgress {
        let id = Head::of(size, head);
        FileProgress {
            offset: size,
            records: 1,
            size,
            head_len: id.len,
            head: id.hash,
            done,
        }
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a_hex(b""), "cbf29ce484222325");
        assert_eq!(fnv1a_hex(b"a"), "af63dc4c8601ec8c");
        assert_eq!(fnv1a_hex(b"foobar"), "85944171f73967e8");
    }

    #[test]
    fn a_file_compares_by_its_head_size_and_whether_it_was_finished() {
        let old = progress(6, b"abcdef", true);
        assert_eq!(old.compare(6, b"abcdef"), Identity::Unchanged);
        assert_eq!(old.compare(8, b"abcdefgh"), Identity::Grown);
        assert_eq!(old.compare(4, b"abcd"), Identity::Shrunk);
        assert_eq!(old.compare(6, b"abcdeX"), Identity::Replaced);
        assert_eq!(old.compare(9, b"Xbcdefghi"), Identity::Replaced);
        let unfinished = progress(6, b"abcdef", false);
        assert_eq!(unfinished.compare(6, b"abcdef"), Identity::Unfinished);
        assert_eq!(unfinished.compare(7, b"abcdefg"), Identity::Unfinished);
        // Only the first 1024 bytes are the identity.
        let long = vec![b'x'; 3000];
        let old = progress(3000, &long, true);
        assert_eq!(old.head_len, 1024);
        let mut changed = long.clone();
        changed[2000] = b'y';
        assert_eq!(old.compare(3000, &changed), Identity::Unchanged);
        changed[1000] = b'y';
        assert_eq!(old.compare(3000, &changed), Identity::Replaced);
    }

    #[test]
    fn a_checkpoint_round_trips_through_its_json_bytes() {
        let mut checkpoint = FileCheckpoint::new();
        checkpoint
            .files
            .insert("d/a.jsonl".into(), progress(6, b"abcdef", true));
        let bytes = checkpoint.to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"v":1,"files":{"d/a.jsonl":{"offset":6,"#),
            "{text}"
        );
        assert_eq!(FileCheckpoint::from_bytes(&bytes, "d").unwrap(), checkpoint);
    }

    #[test]
    fn corrupt_or_unknown_checkpoints_are_bad_checkpoints_naming_the_source() {
        for (bytes, message) in [
            (
                &b"not json"[..],
                "cannot resume `d/*.jsonl` from its checkpoint: it is not a File source checkpoint (expected ident at line 1 column 2)",
            ),
            (
                br#"{"v":2,"files":{}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: unknown checkpoint version 2 (this skipprd reads version 1)",
            ),
            (
                br#"{"v":1,"files":{"a":{"offset":"x"}}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: it is corrupt (invalid type: string \"x\", expected u64 at line 1 column 33)",
            ),
        ] {
            let error = FileCheckpoint::from_bytes(bytes, "d/*.jsonl").unwrap_err();
            assert!(
                matches!(error, SourceError::BadCheckpoint { .. }),
                "{error}"
            );
            assert_eq!(error.to_string(), message);
            assert!(!error.is_retryable());
            assert_eq!(error.path(), "d/*.jsonl");
        }
    }
}
