//! Errors the WAL can fail with.
//!
//! Every message is one line, starts lower-case and names the segment file, the byte offset or
//! the batch id it is about. A torn tail after a crash is not an error (it is reported in
//! [`super::Recovery`]); damage inside committed data always is ([`WalError::Corrupt`]).

use std::io;
use std::path::PathBuf;

use super::BatchId;

/// Why a WAL operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// Reading, writing, syncing, renaming or deleting a file or the WAL directory failed.
    #[error("cannot {op} `{}`: {}", path.display(), describe_io(source))]
    Io {
        /// What was being done: "read", "write", "sync", "create", "delete", "rename", "list".
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A segment holds bytes that are not what the WAL wrote, inside committed data: a checksum
    /// mismatch or garbage followed by a later valid commit, any damage in a segment that is not
    /// the last one, or a record that breaks the format's rules. Never skipped silently.
    #[error("corrupt WAL segment `{}` at offset {offset}: {reason}", path.display())]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset in the file of the damaged record (or header field).
        offset: u64,
        /// What is wrong, in a few words.
        reason: String,
    },

    /// A segment file does not start with the WAL's magic bytes: not a WAL segment.
    #[error("`{}` is not a WAL segment: bad magic bytes {found:02x?}", path.display())]
    BadMagic {
        /// The segment file.
        path: PathBuf,
        /// The first bytes found (up to 8).
        found: Vec<u8>,
    },

    /// A segment was written by a format version this build cannot read.
    #[error(
        "WAL segment `{}` has format version {found}, this build reads version {supported}",
        path.display()
    )]
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// The version in its header.
        found: u16,
        /// The version this build reads and writes.
        supported: u16,
    },

    /// Segment ids are not contiguous: a segment is missing, or an extra one overlaps.
    #[error(
        "WAL segments are not contiguous: `{}` starts at batch {found}, expected batch {expected}",
        path.display()
    )]
    SegmentGap {
        /// The segment that does not follow on from the one before it.
        path: PathBuf,
        /// The first batch id the previous segment implies.
        expected: BatchId,
        /// The first batch id of this segment.
        found: BatchId,
    },

    /// Encoding a part to Arrow IPC, or decoding it back, failed.
    #[error("cannot {op} batch {batch} part `{namespace}` as Arrow IPC: {source}")]
    Arrow {
        /// "encode" or "decode".
        op: &'static str,
        /// The batch.
        batch: BatchId,
        /// The part's namespace.
        namespace: String,
        /// Arrow's error.
        #[source]
        source: arrow::error::ArrowError,
    },

    /// The batch is not in the WAL: never committed, or already reclaimed.
    #[error("batch {batch} is not in the WAL (never committed, or reclaimed)")]
    NotFound {
        /// The batch asked for.
        batch: BatchId,
    },

    /// The batch given to `append` breaks a limit or rule (no parts, an empty or overlong
    /// namespace, a payload over the maximum size).
    #[error("cannot append batch {batch}: {reason}")]
    InvalidBatch {
        /// The id the batch would have had.
        batch: BatchId,
        /// Which rule it breaks.
        reason: String,
    },

    /// `reclaim_through` named a batch that has not been committed yet.
    #[error("cannot reclaim through batch {requested}: the newest committed batch is {newest}")]
    ReclaimAhead {
        /// The batch asked for.
        requested: BatchId,
        /// The newest committed batch (`b0` when there is none).
        newest: BatchId,
    },

    /// The options passed to `open` are not usable.
    #[error("invalid WAL options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: String,
    },

    /// An earlier write or sync failed in a way that leaves this handle's view of the files
    /// uncertain (for example a failed fsync). Reopen the WAL: recovery finds what is durable.
    #[error("the WAL in `{}` must be reopened after an earlier failure: {reason}", dir.display())]
    Poisoned {
        /// The WAL directory.
        dir: PathBuf,
        /// The earlier failure.
        reason: String,
    },

    /// An S3 request of the S3 WAL failed (after the SDK's retries).
    #[error("cannot {op} `{uri}`: {failure}")]
    ObjectStore {
        /// What was being done: "read", "write", "delete", "list".
        op: &'static str,
        /// The object (or the WAL prefix, for a listing).
        uri: String,
        /// The SDK's error, classified.
        failure: Box<crate::aws::SdkFailure>,
    },

    /// The state store refused or failed a write of the S3 WAL (its watermark, or the fenced
    /// claim before replacing an orphaned body): a lease taken over reads as `Fenced`.
    #[error("WAL state: {source}")]
    State {
        /// The store's error.
        #[source]
        source: crate::state::StateError,
    },

    /// Another writer (one whose lease was taken over) wrote this S3 WAL object at the same
    /// batch id first: this append is not committed. The next pass recovers.
    #[error(
        "`{uri}` was written by another writer at the same batch id (a writer whose lease was taken over); this batch is not committed, the next pass recovers"
    )]
    CommitRace {
        /// The object.
        uri: String,
    },

    /// A failpoint fired (unit tests only; a build with the `failpoints` feature aborts instead).
    #[error("failpoint `{name}` fired")]
    Failpoint {
        /// The failpoint's name.
        name: &'static str,
    },
}

impl WalError {
    /// Whether trying the same call again may succeed: true for interrupted, timed-out or
    /// disk-full I/O (an append that fails on a full disk is rolled back, so it can be retried
    /// once space is freed); false for corruption, format, gap, Arrow, limit and poisoned errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            WalError::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::Interrupted
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::WouldBlock
                    | io::ErrorKind::StorageFull
                    | io::ErrorKind::ResourceBusy
            ),
            WalError::ObjectStore { failure, .. } => failure.retryable,
            WalError::State { source } => source.is_retryable(),
            WalError::CommitRace { .. } => true,
            WalError::Corrupt { .. }
            | WalError::BadMagic { .. }
            | WalError::UnsupportedVersion { .. }
            | WalError::SegmentGap { .. }
            | WalError::Arrow { .. }
            | WalError::NotFound { .. }
            | WalError::InvalidBatch { .. }
            | WalError::ReclaimAhead { .. }
            | WalError::InvalidOptions { .. }
            | WalError::Poisoned { .. }
            | WalError::Failpoint { .. } => false,
        }
    }

    /// Shorthand for [`WalError::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        WalError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Shorthand for [`WalError::Corrupt`].
    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        WalError::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}

use crate::text::describe_io;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_one_lower_case_line_naming_the_operation_and_path() {
        let error = WalError::io(
            "write",
            "/data/wal/wal-00000000000000000001.seg",
            io::Error::from_raw_os_error(13),
        );
        assert_eq!(
            error.to_string(),
            "cannot write `/data/wal/wal-00000000000000000001.seg`: permission denied"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn interrupted_and_disk_full_io_are_retryable_and_corruption_is_not() {
        assert!(
            WalError::io("write", "a", io::Error::from(io::ErrorKind::Interrupted)).is_retryable()
        );
        assert!(
            WalError::io("write", "a", io::Error::from(io::ErrorKind::StorageFull)).is_retryable()
        );
        assert!(!WalError::corrupt("a", 0, "x").is_retryable());
        assert!(!WalError::NotFound { batch: BatchId(3) }.is_retryable());
    }

    #[test]
    fn bad_magic_and_gap_messages_name_the_file_and_the_values() {
        let magic = WalError::BadMagic {
            path: "w/wal-1.seg".into(),
            found: b"PAR1".to_vec(),
        };
        assert_eq!(
            magic.to_string(),
            "`w/wal-1.seg` is not a WAL segment: bad magic bytes [50, 41, 52, 31]"
        );
        let gap = WalError::SegmentGap {
            path: "w/wal-9.seg".into(),
            expected: BatchId(5),
            found: BatchId(9),
        };
        assert_eq!(
            gap.to_string(),
            "WAL segments are not contiguous: `w/wal-9.seg` starts at batch b9, expected batch b5"
        );
    }
}
