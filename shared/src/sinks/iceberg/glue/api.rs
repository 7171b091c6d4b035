//! The Glue operations the catalog needs ([`GlueApi`]), and what they take and return.

use std::collections::BTreeMap;

use async_trait::async_trait;
use iceberg::{Error, ErrorKind};

use crate::aws::{AwsError, SdkFailure};

/// A Glue column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlueColumn {
    /// The column name.
    pub name: String,
    /// The Hive type name (`bigint`, `struct<a:int>`, ...).
    pub type_name: String,
    /// The column comment (the Iceberg field's doc).
    pub comment: Option<String>,
    /// Column parameters (`iceberg.field.id`, `iceberg.field.optional`).
    pub parameters: BTreeMap<String, String>,
}

/// A Glue table, as read or to be written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GlueTable {
    /// The table name.
    pub name: String,
    /// The storage location.
    pub location: Option<String>,
    /// The table parameters.
    pub parameters: BTreeMap<String, String>,
    /// The columns of the storage descriptor.
    pub columns: Vec<GlueColumn>,
    /// Glue's version of the table (read only; the optimistic lock of `UpdateTable`).
    pub version_id: Option<String>,
}

/// What went wrong calling Glue.
#[derive(Debug, thiserror::Error)]
pub enum GlueError {
    /// Another writer changed the table first (`ConcurrentModificationException`, or
    /// `AlreadyExistsException` creating it).
    #[error("Glue table {database}.{table} was changed by another writer: {message}")]
    Conflict {
        /// The database.
        database: String,
        /// The table.
        table: String,
        /// What Glue said.
        message: String,
    },
    /// The database does not exist.
    #[error("Glue database {database} does not exist")]
    NoDatabase {
        /// The database.
        database: String,
    },
    /// A Glue request failed after the SDK's retries.
    #[error("Glue {operation} of {target}: {failure}")]
    Sdk {
        /// The request (`GetTable`, ...).
        operation: &'static str,
        /// The database or table.
        target: String,
        /// What the SDK reported.
        failure: SdkFailure,
    },
    /// A request could not be built (a bug, or an invalid name).
    #[error("Glue {operation} of {target}: {message}")]
    Build {
        /// The request.
        operation: &'static str,
        /// The database or table.
        target: String,
        /// The cause.
        message: String,
    },
    /// The runtime of the AWS calls is gone.
    #[error("Glue request: {0}")]
    Runtime(#[from] AwsError),
}

impl GlueError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            GlueError::Conflict { .. } => true,
            GlueError::Sdk { failure, .. } => failure.retryable,
            GlueError::NoDatabase { .. } | GlueError::Build { .. } | GlueError::Runtime(_) => false,
        }
    }
}

impl From<GlueError> for Error {
    fn from(e: GlueError) -> Self {
        let retryable = e.is_retryable();
        let kind = match e {
            GlueError::Conflict { .. } => ErrorKind::CatalogCommitConflicts,
            GlueError::NoDatabase { .. } => ErrorKind::NamespaceNotFound,
            _ => ErrorKind::Unexpected,
        };
        Error::new(kind, e.to_string())
            .with_retryable(retryable)
            .with_source(e)
    }
}

/// The result of a [`GlueApi`] call.
pub type GlueResult<T> = std::result::Result<T, GlueError>;

/// The Glue operations the catalog needs (see the module docs).
#[async_trait]
pub trait GlueApi: std::fmt::Debug + Send + Sync {
    /// Whether `database` exists.
    async fn database_exists(&self, database: &str) -> GlueResult<bool>;
    /// Create `database` (at `location`); `false` when it already existed.
    async fn create_database(&self, database: &str, location: &str) -> GlueResult<bool>;
    /// The names of every database.
    async fn list_databases(&self) -> GlueResult<Vec<String>>;
    /// The table, or `None` when it does not exist.
    async fn get_table(&self, database: &str, table: &str) -> GlueResult<Option<GlueTable>>;
    /// Every table of `database`.
    async fn list_tables(&self, database: &str) -> GlueResult<Vec<GlueTable>>;
    /// Create a table; [`GlueError::Conflict`] when it exists.
    async fn create_table(&self, database: &str, table: &GlueTable) -> GlueResult<()>;
    /// Replace a table's definition if its version is still `version_id`;
    /// [`GlueError::Conflict`] otherwise.
    async fn update_table(
        &self,
        database: &str,
        table: &GlueTable,
        version_id: Option<&str>,
    ) -> GlueResult<()>;
}
