//! Errors a source can fail with.
//!
//! A [`SourceError`] stops reading (of the current file, at least); a record that merely fails to
//! parse never does, it becomes a [`crate::deadletter::Deadletter`] instead. Every message is one
//! line, starts lower-case and names the file (or pattern) as the user wrote it.

use std::io;

/// Why a source could not go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The configured path is empty.
    #[error("the File source `path` is empty")]
    EmptyPath,

    /// The configured path names no file, directory or glob match.
    #[error("no such file or directory `{path}`")]
    NotFound {
        /// The path as configured.
        path: String,
    },

    /// A directory or glob matched no readable file.
    #[error("no files match `{pattern}`")]
    NoFiles {
        /// The directory or glob pattern as configured.
        pattern: String,
    },

    /// Everything the configured path names is under a directory the source never reads:
    /// the pipeline's data directory, which holds its WAL and state.
    #[error(
        "every file `{pattern}` names is under `{excluded}`, the pipeline's data directory (its WAL and state), which is never read as input: move the files out of it, or give the pipeline another `data_dir`"
    )]
    Excluded {
        /// The path or pattern as configured.
        pattern: String,
        /// The excluded directory, as configured.
        excluded: String,
    },

    /// The glob pattern is not valid.
    #[error("bad glob pattern `{pattern}`: {message}")]
    BadPattern {
        /// The pattern as configured.
        pattern: String,
        /// What is wrong with it, and where.
        message: String,
    },

    /// The file's format could not be told from its name or content.
    #[error(
        "cannot tell the format of `{path}`: use a .jsonl, .json, .csv or .parquet name (optionally .gz), or set `format`"
    )]
    UnknownFormat {
        /// The file.
        path: String,
    },

    /// The format is set to JSON but the file's content is not JSON.
    #[error("cannot read `{path}` as JSON (`format: json`): it does not start with `{{` or `[`")]
    NotJson {
        /// The file.
        path: String,
    },

    /// The file's compression cannot be read with its format (a gzipped Parquet file).
    #[error("cannot read `{path}`: {format} files cannot be gzip-compressed, decompress it first")]
    UnsupportedCompression {
        /// The file.
        path: String,
        /// The format's name.
        format: &'static str,
    },

    /// A file listed when the source was opened was gone when its turn came.
    #[error("file `{path}` vanished before it could be read")]
    Vanished {
        /// The file.
        path: String,
    },

    /// Reading the file (or listing a directory) failed.
    #[error("cannot read `{path}`: {}", describe_io(source))]
    Io {
        /// The file or directory.
        path: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// The file's gzip stream is corrupt or truncated.
    #[error("corrupt gzip stream in `{path}`: {message}")]
    CorruptGzip {
        /// The file.
        path: String,
        /// The decoder's complaint.
        message: String,
    },

    /// The Parquet file could not be read.
    #[error("cannot read Parquet file `{path}`: {message}")]
    Parquet {
        /// The file.
        path: String,
        /// The reader's complaint.
        message: String,
    },

    /// The checkpoint handed to the source cannot be resumed from: it is corrupt, or written
    /// by a different version or a different kind of source.
    #[error("cannot resume `{path}` from its checkpoint: {message}")]
    BadCheckpoint {
        /// The source's configured path.
        path: String,
        /// What is wrong with the checkpoint.
        message: String,
    },

    /// An S3 request failed, after the SDK's retries.
    #[error("cannot {operation} `s3://{bucket}/{key}`: {failure}")]
    S3 {
        /// The bucket.
        bucket: String,
        /// The object's key (the prefix, for a listing).
        key: String,
        /// What was being done.
        operation: S3Operation,
        /// The service's answer, and whether a later attempt may succeed.
        failure: Box<crate::aws::SdkFailure>,
    },

    /// An object was rewritten after part or all of it was read: its ETag is not the one
    /// recorded in the checkpoint. Its new content is not read (see the S3 source's docs).
    #[error(
        "object `s3://{bucket}/{key}` changed after it was read (its ETag was {}, now {}); records from before the change were kept and its new content is not read: write new data under a new key",
        .etags.was,
        .etags.now
    )]
    ObjectChanged {
        /// The bucket.
        bucket: String,
        /// The object's key.
        key: String,
        /// The ETag read and the one found now.
        etags: Box<EtagChange>,
    },

    /// A deadletter object could not be read back for replay (from a `File` or `S3`
    /// deadletter sink).
    #[error("replaying `{path}`: {source}")]
    Deadletter {
        /// The object: a path or an `s3://` URI.
        path: String,
        /// The target's error (retryable as the operating system's or the AWS SDK's error).
        #[source]
        source: crate::objects::ObjectError,
    },

    /// An HTTP request failed (after its retries), or its answer could not be read. The URL
    /// has its credentials shown as `***`.
    #[error("cannot read `{url}`{}: {message}", .status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Http {
        /// The request's URL, redacted.
        url: String,
        /// The answer's status, if there was one.
        status: Option<u16>,
        /// What went wrong (for a refused request, the first 200 bytes of the body).
        message: String,
        /// Whether a later attempt may succeed (connection errors, timeouts, 429, 5xx).
        retryable: bool,
    },

    /// Reading a PostgreSQL server failed: connecting, authenticating, a missing table or
    /// column, or a query the server refused. Names the server (`host:port/database`, never
    /// the password or connection string) and the table when there is one.
    #[error("PostgreSQL `{server}`{}: {message}", .table.as_ref().map(|t| format!(", table `{t}`")).unwrap_or_default())]
    Postgres {
        /// `host:port/database`.
        server: String,
        /// The table (`schema.table`), when the error is about one.
        table: Option<String>,
        /// What went wrong, with the server's message.
        message: String,
        /// Whether a later attempt may succeed (connection lost or refused, server shutting
        /// down, serialization failures).
        retryable: bool,
    },

    /// The CSV reader failed in a way that is not tied to one row.
    #[error("cannot read CSV file `{path}` at line {line}: {message}")]
    Csv {
        /// The file.
        path: String,
        /// The 1-based line where reading stopped.
        line: u64,
        /// The reader's complaint.
        message: String,
    },
}

impl SourceError {
    /// Whether the error is about one file only, so that reading can go on with the next
    /// file (which the File source does when called again after such an error).
    pub fn affects_one_file(&self) -> bool {
        matches!(
            self,
            SourceError::UnknownFormat { .. }
                | SourceError::NotJson { .. }
                | SourceError::UnsupportedCompression { .. }
                | SourceError::Vanished { .. }
                | SourceError::Io { .. }
                | SourceError::CorruptGzip { .. }
                | SourceError::Parquet { .. }
                | SourceError::Csv { .. }
                | SourceError::ObjectChanged { .. }
                | SourceError::Deadletter { .. }
                | SourceError::S3 {
                    operation: S3Operation::Get,
                    ..
                }
        )
    }

    /// Whether trying the same read again may succeed: true for interrupted or timed-out I/O,
    /// false for missing files, bad patterns, unknown formats and corrupt content.
    pub fn is_retryable(&self) -> bool {
        match self {
            SourceError::Io { source, .. } => is_transient(source.kind()),
            SourceError::S3 { failure, .. } => failure.retryable,
            SourceError::Deadletter { source, .. } => source.is_retryable(),
            SourceError::Http { retryable, .. } => *retryable,
            SourceError::Postgres { retryable, .. } => *retryable,
            SourceError::EmptyPath
            | SourceError::NotFound { .. }
            | SourceError::NoFiles { .. }
            | SourceError::Excluded { .. }
            | SourceError::BadPattern { .. }
            | SourceError::UnknownFormat { .. }
            | SourceError::NotJson { .. }
            | SourceError::UnsupportedCompression { .. }
            | SourceError::Vanished { .. }
            | SourceError::CorruptGzip { .. }
            | SourceError::Parquet { .. }
            | SourceError::Csv { .. }
            | SourceError::ObjectChanged { .. }
            | SourceError::BadCheckpoint { .. } => false,
        }
    }

    /// The file, directory or pattern the error is about, as configured or listed (empty for
    /// [`SourceError::EmptyPath`]); the object key (or listed prefix) for S3 errors.
    pub fn path(&self) -> &str {
        match self {
            SourceError::EmptyPath => "",
            SourceError::NotFound { path }
            | SourceError::UnknownFormat { path }
            | SourceError::NotJson { path }
            | SourceError::UnsupportedCompression { path, .. }
            | SourceError::Vanished { path }
            | SourceError::Io { path, .. }
            | SourceError::CorruptGzip { path, .. }
            | SourceError::Parquet { path, .. }
            | SourceError::Csv { path, .. }
            | SourceError::Deadletter { path, .. }
            | SourceError::BadCheckpoint { path, .. } => path,
            SourceError::NoFiles { pattern }
            | SourceError::Excluded { pattern, .. }
            | SourceError::BadPattern { pattern, .. } => pattern,
            SourceError::S3 { key, .. } | SourceError::ObjectChanged { key, .. } => key,
            SourceError::Http { url, .. } => url,
            SourceError::Postgres { server, table, .. } => table.as_deref().unwrap_or(server),
        }
    }
}

/// An object's ETag when it was read, and now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtagChange {
    /// The ETag of the content that was read.
    pub was: String,
    /// The ETag found now.
    pub now: String,
}

/// An S3 request a source makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Operation {
    /// Listing the objects under a prefix (`ListObjectsV2`).
    List,
    /// Reading an object, or a range of it (`GetObject`).
    Get,
}

impl std::fmt::Display for S3Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            S3Operation::List => "list",
            S3Operation::Get => "read",
        })
    }
}

/// I/O error kinds worth a retry.
fn is_transient(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::Interrupted
            | io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ResourceBusy
    )
}

pub(crate) use crate::text::{describe_io, lower_first};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_one_lower_case_line_naming_the_path() {
        let error = SourceError::Io {
            path: "data/x.jsonl".into(),
            source: io::Error::from_raw_os_error(13),
        };
        assert_eq!(
            error.to_string(),
            "cannot read `data/x.jsonl`: permission denied"
        );
        assert!(!error.is_retryable());
        assert_eq!(error.path(), "data/x.jsonl");
    }

    #[test]
    fn interrupted_io_is_retryable_and_missing_files_are_not() {
        let interrupted = SourceError::Io {
            path: "a".into(),
            source: io::Error::from(io::ErrorKind::Interrupted),
        };
        assert!(interrupted.is_retryable());
        assert!(!SourceError::NotFound { path: "a".into() }.is_retryable());
        assert!(
            !SourceError::BadPattern {
                pattern: "[".into(),
                message: "x".into()
            }
            .is_retryable()
        );
        assert!(
            !SourceError::Parquet {
                path: "a".into(),
                message: "x".into()
            }
            .is_retryable()
        );
    }

    #[test]
    fn no_files_message_names_the_pattern() {
        let error = SourceError::NoFiles {
            pattern: "data/*.jsonl".into(),
        };
        assert_eq!(error.to_string(), "no files match `data/*.jsonl`");
    }

    #[test]
    fn lower_first_keeps_acronyms() {
        assert_eq!(lower_first("Invalid data"), "invalid data");
        assert_eq!(lower_first("EOF while parsing"), "EOF while parsing");
        assert_eq!(lower_first(""), "");
    }
}
