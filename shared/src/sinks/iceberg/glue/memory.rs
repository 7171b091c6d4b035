//! [`MemoryGlue`]: an in-process Glue that enforces `VersionId`, for tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use async_trait::async_trait;

use super::{GlueApi, GlueError, GlueResult, GlueTable};
use crate::aws::SdkFailure;

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
