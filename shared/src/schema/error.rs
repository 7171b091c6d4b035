//! Errors from schema inference, the saved schema file and Arrow conversion.

use std::io;
use std::path::PathBuf;

/// Something went wrong while inferring, saving, loading or applying a schema.
///
/// Every message is one line and names the file, field or namespace involved. A record that
/// cannot be typed is not a `SchemaError`: it becomes a
/// [`Deadletter`](crate::deadletter::Deadletter).
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// There is no saved schema at this path.
    #[error("no saved schema at `{}`: run `skipprd discover` first", path.display())]
    NotFound {
        /// The path that was looked up.
        path: PathBuf,
    },

    /// Reading or writing a schema file (or its directory) failed.
    #[error("cannot {action} `{}`: {error}", path.display())]
    Io {
        /// What was being done, for example `write` or `rename into place`.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying I/O error.
        error: io::Error,
    },

    /// Reading or writing the schema object in S3 (`skipprd_el_storage_mode: s3`) failed.
    #[error("cannot {op} `{uri}`: {failure}")]
    ObjectStore {
        /// What was being done: `read` or `write`.
        op: &'static str,
        /// The object, `s3://bucket/key`.
        uri: String,
        /// The SDK's error, classified (retryable on throttling, 5xx and transport errors).
        failure: Box<crate::aws::SdkFailure>,
    },

    /// The schema file is not valid JSON or does not have the expected shape.
    #[error("invalid schema file `{}`: {message}", path.display())]
    Invalid {
        /// The schema file.
        path: PathBuf,
        /// What is wrong and where in the file.
        message: String,
    },

    /// The schema file was written in a format version this build does not read.
    #[error(
        "schema file `{}` has format_version {found}, but this skipprd reads only version {supported}: upgrade skipprd or run `skipprd discover` again",
        path.display()
    )]
    UnsupportedVersion {
        /// The schema file.
        path: PathBuf,
        /// The version found in the file, as written there.
        found: String,
        /// The version this build reads.
        supported: u32,
    },

    /// Routing records by the namespace fields produced more namespaces than allowed.
    #[error(
        "too many namespaces: routing by {fields} would create more than {limit} (the next would be `{namespace}`), and a pipeline has at most {limit} namespaces; set the pipeline's `transform.namespace_fields` to fields with fewer distinct values (a type or category, not an ID, a user or a timestamp), or leave it empty to put every record in one namespace"
    )]
    TooManyNamespaces {
        /// The namespace field paths, quoted and comma-separated.
        fields: String,
        /// The configured limit.
        limit: usize,
        /// The namespace that would have gone over the limit.
        namespace: String,
    },

    /// A namespace's records have more distinct top-level fields than one table may have.
    #[error(
        "namespace `{namespace}` has more than {limit} distinct top-level fields (for example {examples}): its records look like a map, with data in the keys, rather than a fixed set of columns; put such a map under one field, where it is kept as JSON text{}",
        flatten_hint(*flattened)
    )]
    TooManyFields {
        /// The namespace.
        namespace: String,
        /// The limit (`max_fields_per_struct`).
        limit: usize,
        /// A few of the keys, quoted and comma-separated.
        examples: String,
        /// Whether `flatten_events` was on, making nested keys top-level fields.
        flattened: bool,
    },

    /// Assembling an Arrow record batch failed (an internal inconsistency or an over-large batch).
    #[error("cannot build an Arrow batch for namespace `{namespace}`: {message}")]
    Arrow {
        /// The namespace being built (empty when not set on the builder).
        namespace: String,
        /// The Arrow error text.
        message: String,
    },
}

/// The advice for [`SchemaError::TooManyFields`] when nested keys became top-level fields.
fn flatten_hint(flattened: bool) -> &'static str {
    if flattened {
        "; `transform.flatten_events` is on, which makes every key of a nested map a top-level field: turn it off to keep nested maps as JSON text"
    } else {
        ""
    }
}

impl SchemaError {
    /// Whether trying the same operation again might succeed (transient I/O trouble only).
    pub fn is_retryable(&self) -> bool {
        match self {
            SchemaError::Io { error, .. } => matches!(
                error.kind(),
                io::ErrorKind::Interrupted
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::WouldBlock
                    | io::ErrorKind::ResourceBusy
            ),
            SchemaError::ObjectStore { failure, .. } => failure.retryable,
            SchemaError::NotFound { .. }
            | SchemaError::Invalid { .. }
            | SchemaError::UnsupportedVersion { .. }
            | SchemaError::TooManyNamespaces { .. }
            | SchemaError::TooManyFields { .. }
            | SchemaError::Arrow { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_message_tells_the_user_to_run_discover() {
        let error = SchemaError::NotFound {
            path: PathBuf::from("/tmp/x/schema.json"),
        };
        assert_eq!(
            error.to_string(),
            "no saved schema at `/tmp/x/schema.json`: run `skipprd discover` first"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn object_store_errors_name_the_uri_and_are_retryable_only_when_s3_says_so() {
        let failure = |status: u16, code: &str, retryable: bool| crate::aws::SdkFailure {
            code: code.into(),
            status: Some(status),
            message: "service error".into(),
            retryable,
        };
        let throttled = SchemaError::ObjectStore {
            op: "write",
            uri: "s3://meta/schemas/t/w/p/schema.json".into(),
            failure: Box::new(failure(503, "SlowDown", true)),
        };
        let denied = SchemaError::ObjectStore {
            op: "read",
            uri: "s3://meta/schemas/t/w/p/schema.json".into(),
            failure: Box::new(failure(403, "AccessDenied", false)),
        };
        assert!(throttled.is_retryable());
        assert!(!denied.is_retryable());
        assert_eq!(
            denied.to_string(),
            "cannot read `s3://meta/schemas/t/w/p/schema.json`: AccessDenied (HTTP 403): service error"
        );
    }

    #[test]
    fn only_transient_io_errors_are_retryable() {
        let transient = SchemaError::Io {
            action: "write",
            path: PathBuf::from("a"),
            error: io::Error::from(io::ErrorKind::Interrupted),
        };
        let permanent = SchemaError::Io {
            action: "write",
            path: PathBuf::from("a"),
            error: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert!(transient.is_retryable());
        assert!(!permanent.is_retryable());
        assert!(!transient.to_string().contains('\n'));
    }

    #[test]
    fn too_many_namespaces_names_the_fields_and_the_limit_and_advises_only_what_the_user_can_change()
     {
        let error = SchemaError::TooManyNamespaces {
            fields: "`type`".into(),
            limit: 3,
            namespace: "d".into(),
        };
        let text = error.to_string();
        assert!(text.contains("`type`"), "{text}");
        assert!(text.contains("more than 3"), "{text}");
        assert!(text.contains("at most 3 namespaces"), "{text}");
        // No configuration key sets the limit, so the message must not suggest raising it.
        assert!(!text.contains("max_namespaces"), "{text}");
        assert!(!text.contains("raise"), "{text}");
        assert!(text.contains("`transform.namespace_fields`"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
