//! The `AthenaIceberg` catalog: Iceberg tables registered in AWS Glue, so Athena (and
//! PyIceberg's `GlueCatalog`, Spark, Trino...) finds them.
//!
//! A table's current metadata is the Glue table's `metadata_location` parameter, the
//! convention every Glue-aware Iceberg engine follows ([`GluePointer`]):
//!
//! - **current**: `GetTable`; the table must have `table_type=ICEBERG`. The `VersionId` Glue
//!   returns is kept with the version read ([`super::catalog::Current::glue`]).
//! - **publish**: the new metadata is written to
//!   `{table}/metadata/{next:05}-{uuid}.metadata.json` first, then `CreateTable` (the first
//!   version) or `UpdateTable` with the `VersionId` read: Glue's optimistic lock is the
//!   compare-and-swap. The table input carries `table_type=ICEBERG`, `metadata_location`,
//!   `previous_metadata_location`, the table's other parameters as read, and the Glue
//!   columns derived from the current Iceberg schema (so Athena's column list follows
//!   schema evolution).
//! - **conflict**: `ConcurrentModificationException` on update (or `AlreadyExistsException`
//!   on create) means another writer won. The metadata file just written is an orphan and is
//!   deleted, and a retryable `CatalogCommitConflicts` makes iceberg's `Transaction` reload
//!   the table and apply the append again on top of the winner's version. The sink's landed
//!   check ([`super::check_not_landed`], run by the catalog on the version the swap is
//!   conditioned on) refuses a commit of batches the winner already landed.
//! - **unknown outcome** (a timeout, a 5xx): the update may or may not have happened, so the
//!   metadata file is kept (harmless when unreferenced, needed when referenced).
//!
//! Glue is reached through [`GlueApi`]: [`SdkGlue`] is the real service; [`MemoryGlue`] is an
//! in-process double that enforces `VersionId`, which the local AWS server (moto 5.2.5) does
//! NOT do (it accepts an `UpdateTable` with a stale `VersionId`), so the race tests run
//! against the double.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{NestedFieldRef, PrimitiveType, Schema, TableMetadata, Type};
use iceberg::{Error, ErrorKind, NamespaceIdent, Result};

use super::catalog::{Current, Pointer, TableRef, commit_conflict};
use crate::aws::{Aws, AwsError, SdkFailure};

/// Glue table parameter naming the table format.
pub const PARAM_TABLE_TYPE: &str = "table_type";
/// `table_type` value of an Iceberg table.
pub const ICEBERG: &str = "ICEBERG";
/// Glue table parameter: the current metadata file.
pub const PARAM_METADATA_LOCATION: &str = "metadata_location";
/// Glue table parameter: the metadata file before it.
pub const PARAM_PREVIOUS_METADATA_LOCATION: &str = "previous_metadata_location";

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

type GlueResult<T> = std::result::Result<T, GlueError>;

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

// ---------------------------------------------------------------------------------------------
// The real service
// ---------------------------------------------------------------------------------------------

/// [`GlueApi`] over the AWS SDK.
#[derive(Clone)]
pub struct SdkGlue {
    aws: Aws,
    client: aws_sdk_glue::Client,
    catalog_id: Option<String>,
}

impl std::fmt::Debug for SdkGlue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SdkGlue")
            .field("aws", &self.aws)
            .field("catalog_id", &self.catalog_id)
            .finish()
    }
}

impl SdkGlue {
    /// Glue of `aws`'s region, in the catalog `catalog_id` (default: the caller's account).
    pub fn new(aws: &Aws, catalog_id: Option<String>) -> Self {
        SdkGlue {
            aws: aws.clone(),
            client: aws.glue(),
            catalog_id,
        }
    }
}

fn sdk_error<E, R>(
    operation: &'static str,
    target: String,
) -> impl FnOnce(aws_sdk_glue::error::SdkError<E, R>) -> GlueError
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + crate::aws::HasStatus,
{
    move |e| GlueError::Sdk {
        operation,
        target,
        failure: SdkFailure::from_sdk(&e),
    }
}

fn from_sdk_table(t: &aws_sdk_glue::types::Table) -> GlueTable {
    let sd = t.storage_descriptor();
    GlueTable {
        name: t.name().to_owned(),
        location: sd.and_then(|sd| sd.location()).map(str::to_owned),
        parameters: t
            .parameters()
            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        columns: sd
            .map(|sd| {
                sd.columns()
                    .iter()
                    .map(|c| GlueColumn {
                        name: c.name().to_owned(),
                        type_name: c.r#type().unwrap_or_default().to_owned(),
                        comment: c.comment().map(str::to_owned),
                        parameters: c
                            .parameters()
                            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        version_id: t.version_id().map(str::to_owned),
    }
}

fn to_table_input(
    table: &GlueTable,
    operation: &'static str,
    target: &str,
) -> GlueResult<aws_sdk_glue::types::TableInput> {
    use aws_sdk_glue::types::{Column, StorageDescriptor, TableInput};
    let build = |e: aws_sdk_glue::error::BuildError| GlueError::Build {
        operation,
        target: target.to_owned(),
        message: e.to_string(),
    };
    let mut columns = Vec::with_capacity(table.columns.len());
    for c in &table.columns {
        columns.push(
            Column::builder()
                .name(&c.name)
                .r#type(&c.type_name)
                .set_comment(c.comment.clone())
                .set_parameters(Some(c.parameters.clone().into_iter().collect()))
                .build()
                .map_err(build)?,
        );
    }
    TableInput::builder()
        .name(&table.name)
        .table_type("EXTERNAL_TABLE")
        .set_parameters(Some(table.parameters.clone().into_iter().collect()))
        .storage_descriptor(
            StorageDescriptor::builder()
                .set_location(table.location.clone())
                .set_columns(Some(columns))
                .build(),
        )
        .build()
        .map_err(build)
}

#[async_trait]
impl GlueApi for SdkGlue {
    async fn database_exists(&self, database: &str) -> GlueResult<bool> {
        let request = self
            .client
            .get_database()
            .set_catalog_id(self.catalog_id.clone())
            .name(database);
        let target = database.to_owned();
        self.aws
            .run(async move {
                match request.send().await {
                    Ok(_) => Ok(true),
                    Err(e) => {
                        let failure = SdkFailure::from_sdk(&e);
                        if failure.code == "EntityNotFoundException" {
                            Ok(false)
                        } else {
                            Err(GlueError::Sdk {
                                operation: "GetDatabase",
                                target,
                                failure,
                            })
                        }
                    }
                }
            })
            .await?
    }

    async fn create_database(&self, database: &str, location: &str) -> GlueResult<bool> {
        let input = aws_sdk_glue::types::DatabaseInput::builder()
            .name(database)
            .location_uri(location)
            .description("Iceberg tables written by skipprd")
            .build()
            .map_err(|e| GlueError::Build {
                operation: "CreateDatabase",
                target: database.to_owned(),
                message: e.to_string(),
            })?;
        let request = self
            .client
            .create_database()
            .set_catalog_id(self.catalog_id.clone())
            .database_input(input);
        let target = database.to_owned();
        self.aws
            .run(async move {
                match request.send().await {
                    Ok(_) => Ok(true),
                    Err(e) => {
                        let failure = SdkFailure::from_sdk(&e);
                        if failure.code == "AlreadyExistsException" {
                            Ok(false)
                        } else {
                            Err(GlueError::Sdk {
                                operation: "CreateDatabase",
                                target,
                                failure,
                            })
                        }
                    }
                }
            })
            .await?
    }

    async fn list_databases(&self) -> GlueResult<Vec<String>> {
        let request = self
            .client
            .get_databases()
            .set_catalog_id(self.catalog_id.clone());
        self.aws
            .run(async move {
                let mut names = Vec::new();
                let mut pages = request.into_paginator().send();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(sdk_error("GetDatabases", "the catalog".into()))?;
                    names.extend(page.database_list().iter().map(|d| d.name().to_owned()));
                }
                Ok(names)
            })
            .await?
    }

    async fn get_table(&self, database: &str, table: &str) -> GlueResult<Option<GlueTable>> {
        let request = self
            .client
            .get_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .name(table);
        let target = format!("{database}.{table}");
        self.aws
            .run(async move {
                match request.send().await {
                    Ok(out) => Ok(out.table().map(from_sdk_table)),
                    Err(e) => {
                        let failure = SdkFailure::from_sdk(&e);
                        if failure.code == "EntityNotFoundException" {
                            Ok(None)
                        } else {
                            Err(GlueError::Sdk {
                                operation: "GetTable",
                                target,
                                failure,
                            })
                        }
                    }
                }
            })
            .await?
    }

    async fn list_tables(&self, database: &str) -> GlueResult<Vec<GlueTable>> {
        let request = self
            .client
            .get_tables()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database);
        let target = database.to_owned();
        self.aws
            .run(async move {
                let mut tables = Vec::new();
                let mut pages = request.into_paginator().send();
                while let Some(page) = pages.next().await {
                    let page = match page {
                        Ok(page) => page,
                        Err(e) => {
                            let failure = SdkFailure::from_sdk(&e);
                            if failure.code == "EntityNotFoundException" {
                                return Ok(Vec::new());
                            }
                            return Err(GlueError::Sdk {
                                operation: "GetTables",
                                target,
                                failure,
                            });
                        }
                    };
                    tables.extend(page.table_list().iter().map(from_sdk_table));
                }
                Ok(tables)
            })
            .await?
    }

    async fn create_table(&self, database: &str, table: &GlueTable) -> GlueResult<()> {
        let target = format!("{database}.{}", table.name);
        let input = to_table_input(table, "CreateTable", &target)?;
        let request = self
            .client
            .create_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .table_input(input);
        let (db, name) = (database.to_owned(), table.name.clone());
        self.aws
            .run(async move {
                match request.send().await {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        let failure = SdkFailure::from_sdk(&e);
                        match failure.code.as_str() {
                            "AlreadyExistsException" => Err(GlueError::Conflict {
                                database: db,
                                table: name,
                                message: failure.message,
                            }),
                            "EntityNotFoundException" => {
                                Err(GlueError::NoDatabase { database: db })
                            }
                            _ => Err(GlueError::Sdk {
                                operation: "CreateTable",
                                target,
                                failure,
                            }),
                        }
                    }
                }
            })
            .await?
    }

    async fn update_table(
        &self,
        database: &str,
        table: &GlueTable,
        version_id: Option<&str>,
    ) -> GlueResult<()> {
        let target = format!("{database}.{}", table.name);
        let input = to_table_input(table, "UpdateTable", &target)?;
        let request = self
            .client
            .update_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .table_input(input)
            .set_version_id(version_id.map(str::to_owned));
        let (db, name) = (database.to_owned(), table.name.clone());
        self.aws
            .run(async move {
                match request.send().await {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        let failure = SdkFailure::from_sdk(&e);
                        if failure.code == "ConcurrentModificationException" {
                            Err(GlueError::Conflict {
                                database: db,
                                table: name,
                                message: failure.message,
                            })
                        } else {
                            Err(GlueError::Sdk {
                                operation: "UpdateTable",
                                target,
                                failure,
                            })
                        }
                    }
                }
            })
            .await?
    }
}

// ---------------------------------------------------------------------------------------------
// The in-process double
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct MemoryState {
    databases: BTreeSet<String>,
    tables: BTreeMap<(String, String), GlueTable>,
}

/// An in-process [`GlueApi`] that enforces `VersionId` on `UpdateTable` the way Glue does
/// (each successful create or update gives the table a new version id), for tests: moto
/// does not enforce it. Updates can be made to meet at a barrier first, so a test makes two
/// writers read the same version before either swaps.
#[derive(Debug, Default)]
pub struct MemoryGlue {
    state: Mutex<MemoryState>,
    versions: AtomicU64,
    update_barrier: Mutex<Option<(Arc<Barrier>, usize)>>,
    updates: AtomicUsize,
    conflicts: AtomicUsize,
}

impl MemoryGlue {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Make the next `parties` `UpdateTable` calls each wait at a barrier of `parties`
    /// before they are applied, so that many writers have read the same version before any
    /// swaps. The waits block their threads: run each writer on its own thread.
    pub fn arm_update_barrier(&self, parties: usize) {
        if let Ok(mut barrier) = self.update_barrier.lock() {
            *barrier = Some((Arc::new(Barrier::new(parties)), parties));
            self.updates.store(0, Ordering::SeqCst);
        }
    }

    /// How many updates failed on a stale `VersionId`.
    pub fn conflicts(&self) -> usize {
        self.conflicts.load(Ordering::SeqCst)
    }

    /// A copy of a table.
    pub fn table(&self, database: &str, table: &str) -> Option<GlueTable> {
        self.state
            .lock()
            .ok()?
            .tables
            .get(&(database.to_owned(), table.to_owned()))
            .cloned()
    }

    fn lock(&self) -> GlueResult<std::sync::MutexGuard<'_, MemoryState>> {
        self.state.lock().map_err(|_| GlueError::Build {
            operation: "MemoryGlue",
            target: String::new(),
            message: "a thread panicked holding the catalog".into(),
        })
    }

    fn next_version(&self) -> String {
        (self.versions.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }
}

#[async_trait]
impl GlueApi for MemoryGlue {
    async fn database_exists(&self, database: &str) -> GlueResult<bool> {
        Ok(self.lock()?.databases.contains(database))
    }

    async fn create_database(&self, database: &str, _location: &str) -> GlueResult<bool> {
        Ok(self.lock()?.databases.insert(database.to_owned()))
    }

    async fn list_databases(&self) -> GlueResult<Vec<String>> {
        Ok(self.lock()?.databases.iter().cloned().collect())
    }

    async fn get_table(&self, database: &str, table: &str) -> GlueResult<Option<GlueTable>> {
        Ok(self.table(database, table))
    }

    async fn list_tables(&self, database: &str) -> GlueResult<Vec<GlueTable>> {
        Ok(self
            .lock()?
            .tables
            .iter()
            .filter(|((db, _), _)| db == database)
            .map(|(_, t)| t.clone())
            .collect())
    }

    async fn create_table(&self, database: &str, table: &GlueTable) -> GlueResult<()> {
        let mut state = self.lock()?;
        if !state.databases.contains(database) {
            return Err(GlueError::NoDatabase {
                database: database.to_owned(),
            });
        }
        let key = (database.to_owned(), table.name.clone());
        if state.tables.contains_key(&key) {
            return Err(GlueError::Conflict {
                database: database.to_owned(),
                table: table.name.clone(),
                message: "AlreadyExistsException".into(),
            });
        }
        let mut stored = table.clone();
        stored.version_id = Some(self.next_version());
        state.tables.insert(key, stored);
        Ok(())
    }

    async fn update_table(
        &self,
        database: &str,
        table: &GlueTable,
        version_id: Option<&str>,
    ) -> GlueResult<()> {
        let barrier = self.update_barrier.lock().ok().and_then(|b| b.clone());
        if let Some((barrier, parties)) = barrier
            && self.updates.fetch_add(1, Ordering::SeqCst) < parties
        {
            barrier.wait();
        }
        let mut state = self.lock()?;
        let key = (database.to_owned(), table.name.clone());
        let Some(stored) = state.tables.get_mut(&key) else {
            return Err(GlueError::Sdk {
                operation: "UpdateTable",
                target: format!("{database}.{}", table.name),
                failure: SdkFailure {
                    code: "EntityNotFoundException".into(),
                    status: Some(400),
                    message: "no such table".into(),
                    retryable: false,
                },
            });
        };
        if let Some(expected) = version_id
            && stored.version_id.as_deref() != Some(expected)
        {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
            return Err(GlueError::Conflict {
                database: database.to_owned(),
                table: table.name.clone(),
                message: format!(
                    "ConcurrentModificationException: version {expected} is not the current {}",
                    stored.version_id.as_deref().unwrap_or("?")
                ),
            });
        }
        let mut replaced = table.clone();
        replaced.version_id = Some(self.next_version());
        *stored = replaced;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The pointer
// ---------------------------------------------------------------------------------------------

/// Iceberg type -> Hive type name, as Athena and Glue show columns.
pub fn hive_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Fixed(_) | PrimitiveType::Binary => "binary".into(),
        },
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|f| format!("{}:{}", f.name, hive_type(&f.field_type)))
                .collect();
            format!("struct<{}>", fields.join(","))
        }
        Type::List(l) => format!("array<{}>", hive_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            hive_type(&m.key_field.field_type),
            hive_type(&m.value_field.field_type)
        ),
    }
}

/// The Glue columns of an Iceberg schema.
pub fn glue_columns(schema: &Schema) -> Vec<GlueColumn> {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f: &NestedFieldRef| GlueColumn {
            name: f.name.clone(),
            type_name: hive_type(&f.field_type),
            comment: f.doc.clone(),
            parameters: BTreeMap::from([
                ("iceberg.field.id".to_owned(), f.id.to_string()),
                (
                    "iceberg.field.optional".to_owned(),
                    (!f.required).to_string(),
                ),
                ("iceberg.field.current".to_owned(), "true".to_owned()),
            ]),
        })
        .collect()
}

/// The Glue database of a namespace (its parts joined by `_`; skipprd's namespaces have one).
pub fn database_name(namespace: &NamespaceIdent) -> String {
    namespace.iter().cloned().collect::<Vec<_>>().join("_")
}

/// The version number in a metadata file name `0000N-<uuid>.metadata.json` (`0` for a name
/// of another form, such as one written by another engine).
fn version_of(location: &str) -> u64 {
    let name = location.rsplit('/').next().unwrap_or(location);
    name.split('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The Glue pointer (see the module docs).
#[derive(Debug, Clone)]
pub struct GluePointer {
    glue: Arc<dyn GlueApi>,
}

impl GluePointer {
    /// A pointer over `glue`.
    pub fn new(glue: Arc<dyn GlueApi>) -> Self {
        GluePointer { glue }
    }

    /// The Glue API.
    pub fn glue(&self) -> &Arc<dyn GlueApi> {
        &self.glue
    }
}

#[async_trait]
impl Pointer for GluePointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        let database = database_name(table.ident.namespace());
        let Some(glue) = self.glue.get_table(&database, table.ident.name()).await? else {
            return Ok(None);
        };
        let table_type = glue.parameters.get(PARAM_TABLE_TYPE).map(String::as_str);
        if !table_type.is_some_and(|t| t.eq_ignore_ascii_case(ICEBERG)) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "Glue table {database}.{} exists but is not an Iceberg table (table_type = {}); drop it or choose another table name",
                    glue.name,
                    table_type.unwrap_or("unset")
                ),
            ));
        }
        let Some(location) = glue.parameters.get(PARAM_METADATA_LOCATION).cloned() else {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "Glue table {database}.{} is an Iceberg table without a `metadata_location` parameter",
                    glue.name
                ),
            ));
        };
        Ok(Some(Current {
            version: version_of(&location),
            location,
            glue: Some(Box::new(glue)),
        }))
    }

    async fn publish(
        &self,
        file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        let database = database_name(table.ident.namespace());
        let next = previous.map_or(1, |c| c.version + 1);
        let location = format!(
            "{}/metadata/{next:05}-{}.metadata.json",
            table.location,
            uuid::Uuid::new_v4()
        );
        let bytes = serde_json::to_vec(metadata).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "cannot serialize table metadata").with_source(e)
        })?;
        file_io.new_output(&location)?.write(bytes.into()).await?;

        let read = previous.and_then(|c| c.glue.as_deref());
        let mut parameters = read.map(|t| t.parameters.clone()).unwrap_or_default();
        parameters.insert(PARAM_TABLE_TYPE.to_owned(), ICEBERG.to_owned());
        parameters.insert(PARAM_METADATA_LOCATION.to_owned(), location.clone());
        match previous {
            Some(c) => parameters.insert(
                PARAM_PREVIOUS_METADATA_LOCATION.to_owned(),
                c.location.clone(),
            ),
            None => parameters.remove(PARAM_PREVIOUS_METADATA_LOCATION),
        };
        let input = GlueTable {
            name: table.ident.name().to_owned(),
            location: Some(metadata.location().to_owned()),
            parameters,
            columns: glue_columns(metadata.current_schema()),
            version_id: None,
        };
        let swapped = match previous {
            None => self.glue.create_table(&database, &input).await,
            Some(_) => {
                let version_id = read.and_then(|t| t.version_id.as_deref());
                self.glue.update_table(&database, &input, version_id).await
            }
        };
        match swapped {
            Ok(()) => Ok(location),
            Err(GlueError::Conflict { .. }) => {
                // The loser's metadata file is referenced by nothing: delete it.
                if let Err(e) = file_io.delete(&location).await {
                    tracing::warn!(file = %location, error = %e, "Could not delete the metadata file of a lost commit; it is unreferenced.");
                }
                Err(commit_conflict(
                    &format!("Glue table {database}.{}", table.ident.name()),
                    next,
                ))
            }
            // The swap may or may not have happened: keep the file.
            Err(e) => Err(e.into()),
        }
    }

    async fn list_namespaces(&self, _warehouse: &str) -> Result<Vec<String>> {
        Ok(self.glue.list_databases().await?)
    }

    async fn create_namespace(&self, namespace: &NamespaceIdent, location: &str) -> Result<()> {
        let database = database_name(namespace);
        if self.glue.database_exists(&database).await? {
            return Ok(());
        }
        if self.glue.create_database(&database, location).await? {
            tracing::info!(database = %database, location = %location, "Created the Glue database.");
        }
        Ok(())
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent, _location: &str) -> Result<bool> {
        Ok(self.glue.database_exists(&database_name(namespace)).await?)
    }

    async fn list_tables(
        &self,
        namespace: &NamespaceIdent,
        _location: &str,
    ) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .glue
            .list_tables(&database_name(namespace))
            .await?
            .into_iter()
            .filter(|t| {
                t.parameters
                    .get(PARAM_TABLE_TYPE)
                    .is_some_and(|v| v.eq_ignore_ascii_case(ICEBERG))
            })
            .map(|t| t.name)
            .collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{ListType, MapType, NestedField, StructType};

    #[test]
    fn iceberg_types_have_their_hive_names() {
        let p = |t| Type::Primitive(t);
        assert_eq!(hive_type(&p(PrimitiveType::Long)), "bigint");
        assert_eq!(hive_type(&p(PrimitiveType::Int)), "int");
        assert_eq!(hive_type(&p(PrimitiveType::Timestamptz)), "timestamp");
        assert_eq!(
            hive_type(&p(PrimitiveType::Decimal {
                precision: 38,
                scale: 9
            })),
            "decimal(38,9)"
        );
        let nested = Type::Struct(StructType::new(vec![
            NestedField::optional(1, "a", p(PrimitiveType::Int)).into(),
            NestedField::optional(
                2,
                "tags",
                Type::List(ListType::new(
                    NestedField::list_element(3, p(PrimitiveType::String), false).into(),
                )),
            )
            .into(),
            NestedField::optional(
                4,
                "m",
                Type::Map(MapType::new(
                    NestedField::map_key_element(5, p(PrimitiveType::String)).into(),
                    NestedField::map_value_element(6, p(PrimitiveType::Double), false).into(),
                )),
            )
            .into(),
        ]));
        assert_eq!(
            hive_type(&nested),
            "struct<a:int,tags:array<string>,m:map<string,double>>"
        );
    }

    #[test]
    fn version_numbers_come_from_metadata_names() {
        assert_eq!(
            version_of("s3://b/t/metadata/00007-abc-def.metadata.json"),
            7
        );
        assert_eq!(version_of("s3://b/t/metadata/v3.metadata.json"), 0);
    }

    #[test]
    fn the_double_enforces_version_ids() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let rt = tokio::runtime::Builder::new_current_thread().build()?;
        let glue = MemoryGlue::new();
        rt.block_on(async {
            glue.create_database("db", "s3://b/db").await?;
            let t = GlueTable {
                name: "t".into(),
                ..GlueTable::default()
            };
            glue.create_table("db", &t).await?;
            assert!(matches!(
                glue.create_table("db", &t).await,
                Err(GlueError::Conflict { .. })
            ));
            let v1 = glue.get_table("db", "t").await?.and_then(|t| t.version_id);
            glue.update_table("db", &t, v1.as_deref()).await?;
            assert!(matches!(
                glue.update_table("db", &t, v1.as_deref()).await,
                Err(GlueError::Conflict { .. })
            ));
            Ok::<_, GlueError>(())
        })?;
        assert_eq!(glue.conflicts(), 1);
        Ok(())
    }
}
