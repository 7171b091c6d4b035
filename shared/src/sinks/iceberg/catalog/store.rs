//! The `SkipprLake` pointer: each table's current metadata location is an item in a state
//! store (the embedded store file of a local warehouse, or DynamoDB), swapped by
//! compare-and-swap.

use std::fmt::Debug;
use std::fs;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::{Error, ErrorKind, NamespaceIdent, Result, TableIdent};

use super::super::storage::{durable_error, local_path};
use super::{
    Current, Pointer, TableRef, commit_conflict, local_create_namespace, local_namespaces,
    local_tables,
};
use crate::durable::{create_dir_durable, write_atomic};

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
///   for a new table).
/// - A failed condition, or a put whose outcome is unknown (a failed request), reads the
///   pointer again: naming this commit's file, it is a success (an earlier attempt of the
///   request applied, and the SDK's retry found its condition failed). Otherwise it is a
///   retryable conflict (or the error), and the file is deleted only when nothing can name
///   it: no put was sent, or another writer holds version `N+1` (a put conditioned on `N` can
///   never apply). When unsure the file is kept: an unreferenced file is harmless, and
///   deleting the file a pointer names would make the table unreadable.
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

/// What a pointer swap did.
enum Swap {
    /// The pointer names the new metadata.
    Done,
    /// The pointer had moved on before the put: nothing was sent.
    NotSent,
    /// The put's condition failed.
    Refused,
}

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
                None => return Ok(Swap::NotSent),
                Some(item) => {
                    if Self::read(&item, &key)?.version + 1 != next {
                        return Ok(Swap::NotSent);
                    }
                    Condition::Version(item.version)
                }
            };
            match store.put(&key, &value, condition, None) {
                Ok(_) => Ok(Swap::Done),
                Err(crate::state::StateError::Conflict { .. }) => Ok(Swap::Refused),
                Err(e) => Err(state_error(e)),
            }
        });
        match swapped {
            Ok(Swap::Done) => Ok(location),
            // Nothing was sent: nothing can name the file.
            Ok(Swap::NotSent) => {
                Self::delete_metadata(file_io, &location).await;
                Err(commit_conflict(table.location, next))
            }
            // A refused condition, or a failure whose outcome is unknown: the pointer may name
            // the file (a retried request whose first attempt applied). Read it again.
            Ok(Swap::Refused) | Err(_) => {
                let now = self.current(table).await;
                match &now {
                    Ok(Some(current)) if current.location == location => {
                        tracing::info!(table = %table.location, version = next, "The pointer names this commit's metadata: an earlier attempt of the swap applied.");
                        return Ok(location);
                    }
                    // Another writer took version `next`: a swap conditioned on the version
                    // before it can never apply, so nothing names the file.
                    Ok(Some(current)) if current.version == next => {
                        Self::delete_metadata(file_io, &location).await;
                    }
                    // Unsure (the pointer moved further, or could not be read): keep the
                    // file, harmless if unreferenced.
                    _ => {
                        tracing::debug!(file = %location, "Kept the metadata file of a commit whose outcome is unclear.")
                    }
                }
                match swapped {
                    Err(e) => Err(e),
                    Ok(_) => Err(commit_conflict(table.location, next)),
                }
            }
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
