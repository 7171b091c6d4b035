//! Iceberg catalogs over a warehouse URI (`file://` or `s3://`): tables at
//! `{warehouse}/{namespace}/{table}`.
//!
//! iceberg-rust 0.10 has no catalog for the Hadoop layout (`metadata/vN.metadata.json` plus
//! `metadata/version-hint.text`), which is what DuckDB's `iceberg_scan('<table dir>')` and
//! PyIceberg's `StaticTable` open, so this module implements its `Catalog` trait. The one
//! part that differs between layouts is where the current-metadata pointer lives, a
//! [`Pointer`]:
//!
//! - [`HadoopPointer`] (the `Duckdb` sink): the pointer is the highest complete
//!   `vN.metadata.json`. A commit creates `v{N+1}.metadata.json` exclusively: the file is
//!   written and fsynced under a temporary name, then hard-linked to its final name, which
//!   fails when the name exists. That link is the compare-and-swap, and it never exposes a
//!   half-written file. The hint (the bare number, no newline: DuckDB 1.4 does not trim it)
//!   is then replaced atomically (temporary file, fsync, rename, fsync of the directory).
//!   Loading reads the hint and rolls forward while `v{N+1}` exists, so a crash between the
//!   link and the hint never wedges later commits, and a missing or damaged hint falls
//!   back to listing the directory.
//! - [`StorePointer`] (the `SkipprLake` sink): an item in a state store, swapped by
//!   compare-and-swap.
//! - [`super::glue::GluePointer`] (the `AthenaIceberg` sink): the Glue table's
//!   `metadata_location` parameter, swapped by Glue's `UpdateTable` with the `VersionId` read.
//!
//! The catalog applies a commit itself (requirements checked against the current metadata,
//! updates applied through `TableMetadataBuilder`), because iceberg-rust's
//! `TableCommit::apply` only accepts its own `00001-<uuid>` metadata names.

use std::collections::HashMap;
use std::fmt::Debug;
use std::fs;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent, TableRequirement, TableUpdate,
};

use super::storage::{durable_error, io_error, local_path};
use crate::durable::{create_dir_durable, sync_dir, write_atomic};

/// Name of the version hint file in a table's `metadata/` directory.
pub const VERSION_HINT: &str = "version-hint.text";

/// A table as a pointer sees it: its identifier and its location (a URI: `file:///...` or
/// `s3://bucket/...`).
#[derive(Debug, Clone, Copy)]
pub struct TableRef<'a> {
    /// The table.
    pub ident: &'a TableIdent,
    /// The table's root location (no trailing `/`).
    pub location: &'a str,
}

/// The current version of a table, as its pointer read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    /// The version number (the `N` of `vN.metadata.json` / `0000N-<uuid>.metadata.json`).
    pub version: u64,
    /// The current metadata file.
    pub location: String,
    /// What Glue returned with it, for the [`super::glue::GluePointer`]'s compare-and-swap
    /// (its `VersionId`) and to keep the table's other parameters; `None` for the others.
    pub glue: Option<Box<super::glue::GlueTable>>,
}

impl Current {
    /// A version without pointer-specific state.
    pub fn new(version: u64, location: String) -> Self {
        Current {
            version,
            location,
            glue: None,
        }
    }
}

/// Where a table's current metadata is recorded, and how a new version is published.
///
/// Namespaces default to directories of a local warehouse; a pointer whose tables are
/// registered elsewhere (Glue) overrides the namespace methods.
#[async_trait]
pub trait Pointer: Debug + Send + Sync {
    /// The current version of `table`, or `None` when the table does not exist.
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>>;

    /// Publish `metadata` as the version after `previous` (`None`: the table's first) and
    /// return its location. Fails with a retryable [`ErrorKind::CatalogCommitConflicts`] when
    /// another writer published over `previous` first. `file_io` is the catalog's.
    async fn publish(
        &self,
        file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String>;

    /// The namespaces under `warehouse` (default: its directories).
    async fn list_namespaces(&self, warehouse: &str) -> Result<Vec<String>> {
        local_namespaces(warehouse)
    }

    /// Create `namespace` at `location` if it does not exist (default: a directory).
    async fn create_namespace(&self, namespace: &NamespaceIdent, location: &str) -> Result<()> {
        let _ = namespace;
        local_create_namespace(location)
    }

    /// Whether `namespace` at `location` exists (default: the directory exists).
    async fn namespace_exists(&self, namespace: &NamespaceIdent, location: &str) -> Result<bool> {
        let _ = namespace;
        Ok(local_path(location).is_dir())
    }

    /// The names of the tables of `namespace` at `location` (default: its directories with a
    /// current version).
    async fn list_tables(&self, namespace: &NamespaceIdent, location: &str) -> Result<Vec<String>> {
        local_tables(self, namespace, location).await
    }
}

/// The namespaces of a local warehouse: its directories.
fn local_namespaces(warehouse: &str) -> Result<Vec<String>> {
    list_dirs(&local_path(warehouse))
}

/// Create the directory of a namespace of a local warehouse.
fn local_create_namespace(location: &str) -> Result<()> {
    let dir = local_path(location);
    create_dir_durable(&dir).map_err(durable_error)
}

/// The tables of a namespace of a local warehouse: its directories that `pointer` knows a
/// current version of.
async fn local_tables<P: Pointer + ?Sized>(
    pointer: &P,
    namespace: &NamespaceIdent,
    location: &str,
) -> Result<Vec<String>> {
    let mut tables = Vec::new();
    for name in list_dirs(&local_path(location))? {
        let ident = TableIdent::new(namespace.clone(), name.clone());
        let table_location = format!("{location}/{name}");
        let table = TableRef {
            ident: &ident,
            location: &table_location,
        };
        if pointer.current(table).await?.is_some() {
            tables.push(name);
        }
    }
    Ok(tables)
}

/// The conflict error of a compare-and-swap that another writer won.
pub fn commit_conflict(table: &str, version: u64) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!("another writer committed version {version} of {table} first"),
    )
    .with_retryable(true)
}

/// The subdirectories of `dir`, sorted (none when it does not exist).
fn list_dirs(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("cannot list", dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("cannot list", dir, e))?;
        if entry.path().is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The Hadoop layout's pointer: `metadata/vN.metadata.json` and `metadata/version-hint.text`
/// (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct HadoopPointer;

fn version_file(table_dir: &Path, version: u64) -> PathBuf {
    table_dir
        .join("metadata")
        .join(format!("v{version}.metadata.json"))
}

/// The number in a `v{N}.metadata.json` name.
fn parse_version_name(name: &str) -> Option<u64> {
    name.strip_prefix('v')?
        .strip_suffix(".metadata.json")?
        .parse()
        .ok()
}

impl HadoopPointer {
    /// The highest `vN.metadata.json` in the metadata directory.
    fn highest_listed(metadata_dir: &Path) -> Result<Option<u64>> {
        let entries = match fs::read_dir(metadata_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("cannot list", metadata_dir, e)),
        };
        let mut highest = None;
        for entry in entries {
            let entry = entry.map_err(|e| io_error("cannot list", metadata_dir, e))?;
            if let Some(v) = parse_version_name(&entry.file_name().to_string_lossy()) {
                highest = highest.max(Some(v));
            }
        }
        Ok(highest)
    }
}

#[async_trait]
impl Pointer for HadoopPointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        let table_dir = local_path(table.location);
        let table_dir = table_dir.as_path();
        let metadata_dir = table_dir.join("metadata");
        let hinted = fs::read_to_string(metadata_dir.join(VERSION_HINT))
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|v| version_file(table_dir, *v).is_file());
        let version = match hinted {
            Some(mut v) => {
                // Roll forward past a crash between a commit and its hint.
                while version_file(table_dir, v + 1).is_file() {
                    v += 1;
                }
                Some(v)
            }
            None => Self::highest_listed(&metadata_dir)?,
        };
        Ok(version.map(|v| {
            Current::new(
                v,
                format!("file://{}", version_file(table_dir, v).display()),
            )
        }))
    }

    async fn publish(
        &self,
        _file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        let next = previous.map_or(1, |c| c.version + 1);
        let table_dir = local_path(table.location);
        let table_dir = table_dir.as_path();
        let metadata_dir = table_dir.join("metadata");
        create_dir_durable(&metadata_dir).map_err(durable_error)?;
        let bytes = serde_json::to_vec(metadata).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "cannot serialize table metadata").with_source(e)
        })?;
        let target = version_file(table_dir, next);
        let tmp = metadata_dir.join(format!(
            ".v{next}.metadata.json.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let written = (|| {
            use std::io::Write as _;
            let mut file = fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_error("cannot write", &tmp, e));
        }
        let linked = fs::hard_link(&tmp, &target);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(commit_conflict(table.location, next));
            }
            Err(e) => return Err(io_error("cannot create", &target, e)),
        }
        sync_dir(&metadata_dir).map_err(durable_error)?;
        // The commit is done. The hint only saves readers a listing: a failure to update it
        // is logged, not returned (a retry would commit the same changes twice).
        if let Err(e) = write_atomic(
            &metadata_dir.join(VERSION_HINT),
            next.to_string().as_bytes(),
        ) {
            tracing::warn!(table = %table_dir.display(), error = %e, "Could not update the Iceberg version hint; readers that use it see the previous version until the next commit.");
        }
        Ok(format!("file://{}", target.display()))
    }
}

/// An Iceberg catalog over a warehouse (see the module docs).
#[derive(Debug)]
pub struct FileCatalog<P: Pointer> {
    warehouse: String,
    file_io: FileIO,
    pointer: P,
    aws: Option<crate::aws::Aws>,
}

impl<P: Pointer> FileCatalog<P> {
    /// A catalog of the tables under the local directory `warehouse` (absolute).
    pub fn new(warehouse: PathBuf, file_io: FileIO, pointer: P) -> Self {
        Self::at(format!("file://{}", warehouse.display()), file_io, pointer)
    }

    /// A catalog of the tables under the warehouse URI `warehouse` (`file:///dir` or
    /// `s3://bucket/prefix`); `file_io` must reach it.
    pub fn at(warehouse: String, file_io: FileIO, pointer: P) -> Self {
        FileCatalog {
            warehouse: warehouse.trim_end_matches('/').to_owned(),
            file_io,
            pointer,
            aws: None,
        }
    }

    /// The AWS handle of an `s3://` warehouse, for what Iceberg's file I/O cannot do: list
    /// the objects under a table (maintenance deletes the ones no snapshot references).
    pub fn with_aws(mut self, aws: crate::aws::Aws) -> Self {
        self.aws = Some(aws);
        self
    }

    /// The AWS handle given with [`FileCatalog::with_aws`].
    pub fn aws(&self) -> Option<&crate::aws::Aws> {
        self.aws.as_ref()
    }

    /// The warehouse URI (no trailing `/`).
    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }

    /// Whether the warehouse is a local directory (`file://`).
    pub fn is_local(&self) -> bool {
        self.warehouse.starts_with("file:")
    }

    /// The pointer.
    pub fn pointer(&self) -> &P {
        &self.pointer
    }

    /// The catalog's file I/O.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// The location of a table: `{warehouse}/{namespace...}/{name}`.
    pub fn table_location(&self, ident: &TableIdent) -> String {
        format!(
            "{}/{}",
            self.namespace_location(ident.namespace()),
            ident.name()
        )
    }

    /// The directory of a table of a local warehouse: `{warehouse}/{namespace...}/{name}`.
    pub fn table_dir(&self, ident: &TableIdent) -> PathBuf {
        local_path(&self.table_location(ident))
    }

    fn namespace_location(&self, namespace: &NamespaceIdent) -> String {
        let mut location = self.warehouse.clone();
        for part in namespace.iter() {
            location.push('/');
            location.push_str(part);
        }
        location
    }

    async fn current(&self, ident: &TableIdent) -> Result<Option<Current>> {
        let location = self.table_location(ident);
        self.pointer
            .current(TableRef {
                ident,
                location: &location,
            })
            .await
    }

    async fn read_table(&self, ident: &TableIdent, location: &str) -> Result<Table> {
        let bytes = self.file_io.new_input(location)?.read().await?;
        let metadata: TableMetadata = serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("{location} is not valid table metadata"),
            )
            .with_source(e)
        })?;
        self.table(ident, metadata, location.to_owned())
    }

    fn table(
        &self,
        ident: &TableIdent,
        metadata: TableMetadata,
        location: String,
    ) -> Result<Table> {
        Table::builder()
            .metadata(metadata)
            .metadata_location(location)
            .identifier(ident.clone())
            .file_io(self.file_io.clone())
            .runtime(iceberg::Runtime::try_current()?)
            .build()
    }

    fn not_found(ident: &TableIdent) -> Error {
        Error::new(
            ErrorKind::TableNotFound,
            format!("table {} does not exist", ident.name()),
        )
    }

    /// Apply `updates` to the table if `requirements` hold, publishing a new version.
    ///
    /// Besides the requirements, a commit that adds a snapshot of skipprd WAL batches is
    /// refused (non-retryable [`ErrorKind::CatalogCommitConflicts`]) when the current metadata
    /// shows those batches already landed (see [`super::check_not_landed`]): the check runs on
    /// the version the compare-and-swap is conditioned on, so it is atomic with the commit.
    pub async fn commit_updates(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let location = self.table_location(ident);
        let current = self
            .current(ident)
            .await?
            .ok_or_else(|| Self::not_found(ident))?;
        let table = self.read_table(ident, &current.location).await?;
        for requirement in &requirements {
            requirement.check(Some(table.metadata()))?;
        }
        super::check_not_landed(table.metadata(), &updates)?;
        let mut builder = table
            .metadata()
            .clone()
            .into_builder(Some(current.location.clone()));
        for update in updates {
            builder = update.apply(builder)?;
        }
        let metadata = builder.build()?.metadata;
        let published = self
            .pointer
            .publish(
                &self.file_io,
                TableRef {
                    ident,
                    location: &location,
                },
                Some(&current),
                &metadata,
            )
            .await?;
        self.table(ident, metadata, published)
    }

    fn unsupported(what: &str) -> Error {
        Error::new(
            ErrorKind::FeatureUnsupported,
            format!("{what} is not supported by skipprd's file catalog"),
        )
    }
}

#[async_trait]
impl<P: Pointer> Catalog for FileCatalog<P> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        if parent.is_some() {
            return Ok(Vec::new());
        }
        self.pointer
            .list_namespaces(&self.warehouse)
            .await?
            .into_iter()
            .map(|name| NamespaceIdent::from_vec(vec![name]))
            .collect()
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.pointer
            .create_namespace(namespace, &self.namespace_location(namespace))
            .await?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        if self.namespace_exists(namespace).await? {
            Ok(Namespace::new(namespace.clone()))
        } else {
            Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("namespace {} does not exist", namespace.to_url_string()),
            ))
        }
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.pointer
            .namespace_exists(namespace, &self.namespace_location(namespace))
            .await
    }

    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> Result<()> {
        Err(Self::unsupported("namespace properties"))
    }

    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> Result<()> {
        Err(Self::unsupported("dropping a namespace"))
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        Ok(self
            .pointer
            .list_tables(namespace, &self.namespace_location(namespace))
            .await?
            .into_iter()
            .map(|name| TableIdent::new(namespace.clone(), name))
            .collect())
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        let location = self.table_location(&ident);
        if self.current(&ident).await?.is_some() {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {location} already exists"),
            ));
        }
        let mut creation = creation;
        creation.location = Some(location.clone());
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let published = self
            .pointer
            .publish(
                &self.file_io,
                TableRef {
                    ident: &ident,
                    location: &location,
                },
                None,
                &metadata,
            )
            .await?;
        self.table(&ident, metadata, published)
    }

    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let current = self
            .current(ident)
            .await?
            .ok_or_else(|| Self::not_found(ident))?;
        self.read_table(ident, &current.location).await
    }

    async fn drop_table(&self, _table: &TableIdent) -> Result<()> {
        Err(Self::unsupported("dropping a table"))
    }

    async fn purge_table(&self, _table: &TableIdent) -> Result<()> {
        Err(Self::unsupported("purging a table"))
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self.current(ident).await?.is_some())
    }

    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> Result<()> {
        Err(Self::unsupported("renaming a table"))
    }

    async fn register_table(&self, _table: &TableIdent, _location: String) -> Result<Table> {
        Err(Self::unsupported("registering a table"))
    }

    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let requirements = commit.take_requirements();
        let updates = commit.take_updates();
        self.commit_updates(&ident, requirements, updates).await
    }
}

/// The `SkipprLake` pointer: the current metadata location of each table is an item in a
/// state store, swapped by compare-and-swap.
///
/// - The item: sort key `table#{namespace}/{table}`, value
///   `{"version":N,"location":"<table>/metadata/0000N-<uuid>.metadata.json"}`, in the
///   partition [`CATALOG_PARTITION`] of the embedded store, or `catalog#{warehouse}` (see
///   [`catalog_partition`]) of a shared store (DynamoDB).
/// - A commit writes the new metadata file under a fresh name (a `file://` table atomically:
///   temporary file, fsync, rename; an `s3://` table through the catalog's file I/O, a single
///   PUT), then puts the item on condition that it is still at the version read (or absent,
///   for a new table). A failed condition is a retryable conflict, and the unused metadata file
///   is deleted. When the outcome of the put is unknown (a failed request), the file is kept.
/// - With the embedded store, the items live in `{warehouse}/_skippr_catalog/{name}.redb`,
///   shared by every pipeline that writes to the warehouse. The file is opened for each
///   operation and closed after it (redb admits one process at a time), retrying for up to
///   five seconds while another process has it open. Namespaces and tables are then the
///   warehouse's directories.
/// - With a shared store (an `s3://` warehouse: DynamoDB), namespaces and tables come from the
///   store: a namespace is an item `namespace#{namespace}` (value `{}`), a table its pointer
///   item. Object stores have no directories to list.
#[derive(Clone)]
pub struct StorePointer {
    store: PointerStore,
    partition: String,
}

#[derive(Clone)]
enum PointerStore {
    /// The embedded store file, opened per operation.
    Embedded { warehouse: PathBuf, file: PathBuf },
    /// A store shared by every writer of the warehouse (DynamoDB; tests: memory).
    Shared {
        store: std::sync::Arc<dyn crate::state::StateStore>,
        describe: String,
    },
}

impl Debug for StorePointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = match &self.store {
            PointerStore::Embedded { file, .. } => file.display().to_string(),
            PointerStore::Shared { describe, .. } => describe.clone(),
        };
        f.debug_struct("StorePointer")
            .field("store", &store)
            .field("partition", &self.partition)
            .finish()
    }
}

/// The partition of the catalog items in the embedded store (one store file per warehouse).
pub const CATALOG_PARTITION: &str = "catalog";

/// The partition of the catalog items of `warehouse` (a URI, no trailing `/`) in a shared
/// store: `catalog#{warehouse}`, e.g. `catalog#s3://bucket/lake`. Pipeline partitions are
/// `{tenant}#{workspace}#{pipeline}` of names without `:` or `/`, so the two never meet, and
/// several warehouses can share one table.
pub fn catalog_partition(warehouse: &str) -> String {
    format!("{CATALOG_PARTITION}#{}", warehouse.trim_end_matches('/'))
}

/// The sort-key prefix of the table pointers.
const TABLE_PREFIX: &str = "table#";
/// The sort-key prefix of the namespace items of a shared store.
const NAMESPACE_PREFIX: &str = "namespace#";

#[derive(serde::Serialize, serde::Deserialize)]
struct PointerValue {
    version: u64,
    location: String,
}

impl StorePointer {
    /// Pointers for the tables under `warehouse`, kept in the embedded store file
    /// `{warehouse}/_skippr_catalog/{name}.redb`.
    pub fn embedded(warehouse: PathBuf, name: &str) -> Self {
        let file = warehouse
            .join("_skippr_catalog")
            .join(format!("{name}.redb"));
        StorePointer {
            store: PointerStore::Embedded { warehouse, file },
            partition: CATALOG_PARTITION.to_owned(),
        }
    }

    /// Pointers for the tables under the warehouse URI `warehouse`, kept in `store` (a
    /// DynamoDB table, described as `describe` in logs, e.g. `DynamoDB table 'skippr'`) in
    /// the partition [`catalog_partition`]`(warehouse)`.
    pub fn shared(
        store: std::sync::Arc<dyn crate::state::StateStore>,
        describe: String,
        warehouse: &str,
    ) -> Self {
        StorePointer {
            store: PointerStore::Shared { store, describe },
            partition: catalog_partition(warehouse),
        }
    }

    /// The embedded store file (`None` for a shared store).
    pub fn store_file(&self) -> Option<&Path> {
        match &self.store {
            PointerStore::Embedded { file, .. } => Some(file),
            PointerStore::Shared { .. } => None,
        }
    }

    /// The warehouse directory of the embedded store (`None` for a shared store).
    pub fn warehouse(&self) -> Option<&Path> {
        match &self.store {
            PointerStore::Embedded { warehouse, .. } => Some(warehouse),
            PointerStore::Shared { .. } => None,
        }
    }

    /// The partition of the catalog items.
    pub fn partition(&self) -> &str {
        &self.partition
    }

    /// The key of `ident`'s pointer item.
    pub fn key(&self, ident: &TableIdent) -> crate::state::StateKey {
        let mut relative = String::new();
        for part in ident.namespace().iter() {
            relative.push_str(part);
            relative.push('/');
        }
        relative.push_str(ident.name());
        crate::state::StateKey::new(self.partition.as_str(), format!("{TABLE_PREFIX}{relative}"))
    }

    fn namespace_key(&self, namespace: &NamespaceIdent) -> crate::state::StateKey {
        crate::state::StateKey::new(
            self.partition.as_str(),
            format!("{NAMESPACE_PREFIX}{}", namespace.join("/")),
        )
    }

    /// Run `f` on the store: the embedded file is opened for it (see the type's docs).
    fn with_store<T>(&self, f: impl Fn(&dyn crate::state::StateStore) -> Result<T>) -> Result<T> {
        let file = match &self.store {
            PointerStore::Shared { store, .. } => return f(store.as_ref()),
            PointerStore::Embedded { file, .. } => file,
        };
        let dir = file.parent().unwrap_or(Path::new("/"));
        create_dir_durable(dir).map_err(durable_error)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match crate::state::EmbeddedStore::open(file) {
                Ok(store) => return f(&store),
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "The catalog store is busy; retrying.");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Unexpected,
                        format!("cannot open the catalog store: {e}"),
                    )
                    .with_retryable(true));
                }
            }
        }
    }

    /// Whether the store is missing altogether (an embedded file not created yet).
    fn absent(&self) -> bool {
        matches!(&self.store, PointerStore::Embedded { file, .. } if !file.exists())
    }

    fn read(item: &crate::state::Item, key: &crate::state::StateKey) -> Result<PointerValue> {
        serde_json::from_slice(&item.value).map_err(|e| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("catalog item {key} is not a metadata pointer"),
            )
            .with_source(e)
        })
    }

    /// The sort keys (without `prefix`) of the items under `prefix`.
    fn scan(&self, prefix: &str) -> Result<Vec<String>> {
        let partition = self.partition.as_str();
        self.with_store(|store| {
            Ok(store
                .scan_prefix(partition, prefix)
                .map_err(state_error)?
                .into_iter()
                .filter_map(|(sort, _)| sort.strip_prefix(prefix).map(str::to_owned))
                .collect())
        })
    }

    /// Write the metadata file of version `next` of the table at `location`; returns its URI.
    async fn write_metadata(
        file_io: &FileIO,
        location: &str,
        next: u64,
        metadata: &TableMetadata,
    ) -> Result<String> {
        let name = format!("{next:05}-{}.metadata.json", uuid::Uuid::new_v4());
        let bytes = serde_json::to_vec(metadata).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "cannot serialize table metadata").with_source(e)
        })?;
        if location.starts_with("file:") {
            let path = local_path(location).join("metadata").join(name);
            write_atomic(&path, &bytes).map_err(durable_error)?;
            Ok(format!("file://{}", path.display()))
        } else {
            let uri = format!("{location}/metadata/{name}");
            file_io.new_output(&uri)?.write(bytes.into()).await?;
            Ok(uri)
        }
    }

    /// Delete the metadata file of a lost commit (nothing references it).
    async fn delete_metadata(file_io: &FileIO, uri: &str) {
        let deleted = if uri.starts_with("file:") {
            fs::remove_file(local_path(uri)).map_err(|e| e.to_string())
        } else {
            file_io.delete(uri).await.map_err(|e| e.to_string())
        };
        if let Err(error) = deleted {
            tracing::warn!(file = %uri, %error, "Could not delete the metadata file of a lost commit; it is unreferenced.");
        }
    }
}

fn state_error(e: crate::state::StateError) -> Error {
    let retryable = e.is_retryable();
    Error::new(ErrorKind::Unexpected, e.to_string()).with_retryable(retryable)
}

#[async_trait]
impl Pointer for StorePointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        let key = self.key(table.ident);
        if self.absent() {
            return Ok(None);
        }
        self.with_store(|store| match store.get(&key).map_err(state_error)? {
            Some(item) => {
                let value = Self::read(&item, &key)?;
                Ok(Some(Current::new(value.version, value.location)))
            }
            None => Ok(None),
        })
    }

    async fn publish(
        &self,
        file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        use crate::state::Condition;
        let next = previous.map_or(1, |c| c.version + 1);
        let location = Self::write_metadata(file_io, table.location, next, metadata).await?;
        let key = self.key(table.ident);
        let value = serde_json::to_vec(&PointerValue {
            version: next,
            location: location.clone(),
        })
        .map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "cannot encode a pointer").with_source(e)
        })?;
        let swapped = self.with_store(|store| {
            let condition = match store.get(&key).map_err(state_error)? {
                None if next == 1 => Condition::Absent,
                None => return Ok(false),
                Some(item) => {
                    if Self::read(&item, &key)?.version + 1 != next {
                        return Ok(false);
                    }
                    Condition::Version(item.version)
                }
            };
            match store.put(&key, &value, condition, None) {
                Ok(_) => Ok(true),
                Err(crate::state::StateError::Conflict { .. }) => Ok(false),
                Err(e) => Err(state_error(e)),
            }
        });
        match swapped {
            Ok(true) => Ok(location),
            Ok(false) => {
                Self::delete_metadata(file_io, &location).await;
                Err(commit_conflict(table.location, next))
            }
            // The pointer may or may not have moved (a failure after the request was sent):
            // keep the file, which is harmless if unreferenced and needed if referenced.
            Err(e) => Err(e),
        }
    }

    async fn list_namespaces(&self, warehouse: &str) -> Result<Vec<String>> {
        if self.warehouse().is_some() {
            return local_namespaces(warehouse);
        }
        let mut names = self.scan(NAMESPACE_PREFIX)?;
        names.sort();
        Ok(names)
    }

    async fn create_namespace(&self, namespace: &NamespaceIdent, location: &str) -> Result<()> {
        if self.warehouse().is_some() {
            return local_create_namespace(location);
        }
        let key = self.namespace_key(namespace);
        self.with_store(|store| {
            match store.put(&key, b"{}", crate::state::Condition::Absent, None) {
                Ok(_) | Err(crate::state::StateError::Conflict { .. }) => Ok(()),
                Err(e) => Err(state_error(e)),
            }
        })
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent, location: &str) -> Result<bool> {
        if self.warehouse().is_some() {
            return Ok(local_path(location).is_dir());
        }
        let key = self.namespace_key(namespace);
        self.with_store(|store| Ok(store.get(&key).map_err(state_error)?.is_some()))
    }

    async fn list_tables(&self, namespace: &NamespaceIdent, location: &str) -> Result<Vec<String>> {
        if self.warehouse().is_some() {
            return local_tables(self, namespace, location).await;
        }
        let prefix = format!("{TABLE_PREFIX}{}/", namespace.join("/"));
        let mut names: Vec<String> = self
            .scan(&prefix)?
            .into_iter()
            .filter(|name| !name.contains('/'))
            .collect();
        names.sort();
        Ok(names)
    }
}

/// The pointer of a lake sink.
#[derive(Debug, Clone)]
pub enum LakePointer {
    /// `Duckdb`: `vN.metadata.json` + `version-hint.text`.
    Hadoop(HadoopPointer),
    /// `SkipprLake`: a state-store item.
    Store(StorePointer),
    /// `AthenaIceberg`: the Glue table's `metadata_location`.
    Glue(super::glue::GluePointer),
}

#[async_trait]
impl Pointer for LakePointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        match self {
            LakePointer::Hadoop(p) => p.current(table).await,
            LakePointer::Store(p) => p.current(table).await,
            LakePointer::Glue(p) => p.current(table).await,
        }
    }

    async fn publish(
        &self,
        file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        match self {
            LakePointer::Hadoop(p) => p.publish(file_io, table, previous, metadata).await,
            LakePointer::Store(p) => p.publish(file_io, table, previous, metadata).await,
            LakePointer::Glue(p) => p.publish(file_io, table, previous, metadata).await,
        }
    }

    async fn list_namespaces(&self, warehouse: &str) -> Result<Vec<String>> {
        match self {
            LakePointer::Hadoop(p) => p.list_namespaces(warehouse).await,
            LakePointer::Store(p) => p.list_namespaces(warehouse).await,
            LakePointer::Glue(p) => p.list_namespaces(warehouse).await,
        }
    }

    async fn create_namespace(&self, namespace: &NamespaceIdent, location: &str) -> Result<()> {
        match self {
            LakePointer::Hadoop(p) => p.create_namespace(namespace, location).await,
            LakePointer::Store(p) => p.create_namespace(namespace, location).await,
            LakePointer::Glue(p) => p.create_namespace(namespace, location).await,
        }
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent, location: &str) -> Result<bool> {
        match self {
            LakePointer::Hadoop(p) => p.namespace_exists(namespace, location).await,
            LakePointer::Store(p) => p.namespace_exists(namespace, location).await,
            LakePointer::Glue(p) => p.namespace_exists(namespace, location).await,
        }
    }

    async fn list_tables(&self, namespace: &NamespaceIdent, location: &str) -> Result<Vec<String>> {
        match self {
            LakePointer::Hadoop(p) => p.list_tables(namespace, location).await,
            LakePointer::Store(p) => p.list_tables(namespace, location).await,
            LakePointer::Glue(p) => p.list_tables(namespace, location).await,
        }
    }
}
