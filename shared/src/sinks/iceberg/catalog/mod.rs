//! Iceberg catalogs over a warehouse URI (`file://` or `s3://`): tables at
//! `{warehouse}/{namespace}/{table}`.
//!
//! iceberg-rust 0.10 has no catalog for the Hadoop layout (`metadata/vN.metadata.json` plus
//! `metadata/version-hint.text`), which is what DuckDB's `iceberg_scan('<table dir>')` and
//! PyIceberg's `StaticTable` open, so this module implements its `Catalog` trait
//! ([`FileCatalog`]). The one part that differs between layouts is where the current-metadata
//! pointer lives, a [`Pointer`]; the catalog holds any of them behind a [`LakePointer`]:
//!
//! - [`HadoopPointer`] (`hadoop.rs`, the `Duckdb` sink): the pointer is the highest complete
//!   `vN.metadata.json`. A commit creates `v{N+1}.metadata.json` exclusively: the file is
//!   written and fsynced under a temporary name, then hard-linked to its final name, which
//!   fails when the name exists. That link is the compare-and-swap, and it never exposes a
//!   half-written file. The hint (the bare number, no newline: DuckDB 1.4 does not trim it)
//!   is then replaced atomically (temporary file, fsync, rename, fsync of the directory).
//!   Loading reads the hint and rolls forward while `v{N+1}` exists, so a crash between the
//!   link and the hint never wedges later commits, and a missing or damaged hint falls
//!   back to listing the directory.
//! - [`StorePointer`] (`store.rs`, the `SkipprLake` sink): an item in a state store, swapped
//!   by compare-and-swap.
//! - The Glue pointer (`sinks::iceberg::glue::GluePointer`, the `AthenaIceberg` sink): the
//!   Glue table's `metadata_location` parameter, swapped by Glue's `UpdateTable` with the
//!   `VersionId` read. It lives with the rest of Glue; this module knows no Glue type.
//!
//! Every pointer passes one conformance suite (`conformance.rs`, tests only).
//!
//! The catalog applies a commit itself (requirements checked against the current metadata,
//! updates applied through `TableMetadataBuilder`), because iceberg-rust's
//! `TableCommit::apply` only accepts its own `00001-<uuid>` metadata names.

mod hadoop;
mod store;

#[cfg(test)]
pub(crate) mod conformance;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent, TableRequirement, TableUpdate,
};

pub use hadoop::{HadoopPointer, VERSION_HINT};
pub use store::{CATALOG_PARTITION, StorePointer, catalog_partition};

use super::storage::{durable_error, io_error, local_path};
use crate::durable::create_dir_durable;

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
    /// The pointer's own version of what it read, when its compare-and-swap is conditioned on
    /// that rather than on [`Current::version`] (Glue: the table's `VersionId`); `None` for
    /// the others.
    pub token: Option<String>,
    /// What the pointer read with the version and carries over to the next one (Glue: the
    /// table's parameters); empty for the others.
    pub properties: BTreeMap<String, String>,
}

impl Current {
    /// A version without pointer-specific state.
    pub fn new(version: u64, location: String) -> Self {
        Current {
            version,
            location,
            token: None,
            properties: BTreeMap::new(),
        }
    }
}

/// Where a table's current metadata is recorded, and how a new version is published.
///
/// Namespaces default to directories of a local warehouse; a pointer whose tables are
/// registered elsewhere (a service such as Glue) overrides the namespace methods.
///
/// A pointer is `'static` ([`Any`]) so that a [`LakePointer`] can be asked for the concrete
/// pointer it holds ([`LakePointer::downcast_ref`]).
#[async_trait]
pub trait Pointer: Any + Debug + Send + Sync {
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

/// The pointer of a lake sink: any [`Pointer`], type-erased, so one catalog type
/// ([`FileCatalog<LakePointer>`]) serves every sink whatever its pointer is.
#[derive(Debug, Clone)]
pub struct LakePointer(Arc<dyn Pointer>);

impl LakePointer {
    /// Erase `pointer`'s type.
    pub fn new(pointer: impl Pointer) -> Self {
        LakePointer(Arc::new(pointer))
    }

    /// The pointer held, if it is a `P` (e.g. a [`StorePointer`], for its partition).
    pub fn downcast_ref<P: Pointer>(&self) -> Option<&P> {
        let pointer: &dyn Any = self.0.as_ref();
        pointer.downcast_ref()
    }
}

#[async_trait]
impl Pointer for LakePointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        self.0.current(table).await
    }

    async fn publish(
        &self,
        file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        self.0.publish(file_io, table, previous, metadata).await
    }

    async fn list_namespaces(&self, warehouse: &str) -> Result<Vec<String>> {
        self.0.list_namespaces(warehouse).await
    }

    async fn create_namespace(&self, namespace: &NamespaceIdent, location: &str) -> Result<()> {
        self.0.create_namespace(namespace, location).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent, location: &str) -> Result<bool> {
        self.0.namespace_exists(namespace, location).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent, location: &str) -> Result<Vec<String>> {
        self.0.list_tables(namespace, location).await
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
