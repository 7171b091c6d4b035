//! The embedded state store: one [redb](https://docs.rs/redb) database file, ACID and pure
//! Rust. `store.type: sled` in skippr.yml selects it (the original product used sled, which is
//! unmaintained; the name is kept so existing files keep working).
//!
//! Layout: one table `state`; key `{partition}\u{1f}{sort}`, value `version (u64 LE) ‖ bytes`.
//! Every operation is one redb transaction, so a condition, a fence check and the write are
//! atomic, and a committed write survives a crash (redb fsyncs on commit).

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    Condition, Fence, Item, LEASE_SORT_KEY, StateError, StateKey, StateStore, check_condition,
    check_fence,
};

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("state");
const SEPARATOR: char = '\u{1f}';

/// The store in one file.
pub struct EmbeddedStore {
    db: Database,
    path: PathBuf,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Open (or create) the store at `path`. Its directory must exist.
    ///
    /// A new store is created under a temporary name (with its table), then linked into
    /// place (unless another process created it first) and the directory fsynced, so a crash during creation never leaves a partial
    /// database file that every later open would refuse.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        if !path.exists() {
            Self::create_atomically(path)?;
        }
        let db = Database::create(path).map_err(|e| storage(path, e, false))?;
        let store = EmbeddedStore {
            db,
            path: path.to_path_buf(),
        };
        // Create the table up front, so that reads never meet a missing table.
        let txn = store.db.begin_write().map_err(|e| storage(path, e, true))?;
        txn.open_table(TABLE).map_err(|e| storage(path, e, false))?;
        txn.commit().map_err(|e| storage(path, e, true))?;
        Ok(store)
    }

    fn create_atomically(path: &Path) -> Result<(), StateError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let created = (|| {
            let db = Database::create(&tmp).map_err(|e| storage(&tmp, e, false))?;
            let txn = db.begin_write().map_err(|e| storage(&tmp, e, true))?;
            txn.open_table(TABLE).map_err(|e| storage(&tmp, e, false))?;
            txn.commit().map_err(|e| storage(&tmp, e, true))?;
            drop(db);
            // A link, not a rename: it fails when another process created the store
            // meanwhile, whose file (and what it wrote since) must not be replaced.
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(storage(path, e, true)),
            }
            let _ = std::fs::remove_file(&tmp);
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| storage(dir, e, true))
        })();
        if created.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        created
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: impl std::fmt::Display, retryable: bool) -> StateError {
        storage(&self.path, e, retryable)
    }

    fn decode(key: &str, bytes: &[u8]) -> Result<Item, StateError> {
        let (version, value) =
            bytes
                .split_first_chunk::<8>()
                .ok_or_else(|| StateError::Corrupt {
                    key: key.replace(SEPARATOR, "/"),
                    message: format!("{} bytes is shorter than the 8-byte version", bytes.len()),
                })?;
        Ok(Item {
            value: value.to_vec(),
            version: u64::from_le_bytes(*version),
        })
    }

    /// Run `write` in a transaction after checking the fence and the condition.
    fn guarded_write(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
        write: impl FnOnce(
            &mut redb::Table<'_, &str, &[u8]>,
            &str,
            Option<u64>,
        ) -> Result<u64, StateError>,
    ) -> Result<u64, StateError> {
        let txn = self.db.begin_write().map_err(|e| self.err(e, true))?;
        let result = {
            let mut table = txn.open_table(TABLE).map_err(|e| self.err(e, false))?;
            let raw_key = encode_key(key);
            let lease_key = encode_key(&StateKey::new(key.partition.clone(), LEASE_SORT_KEY));
            let version_of = |table: &redb::Table<'_, &str, &[u8]>,
                              k: &str|
             -> Result<Option<u64>, StateError> {
                match table.get(k).map_err(|e| self.err(e, true))? {
                    Some(v) => Ok(Some(Self::decode(k, v.value())?.version)),
                    None => Ok(None),
                }
            };
            check_fence(key, version_of(&table, &lease_key)?, fence)?;
            let current = version_of(&table, &raw_key)?;
            check_condition(key, current, condition)?;
            write(&mut table, &raw_key, current)?
        };
        txn.commit().map_err(|e| self.err(e, true))?;
        Ok(result)
    }
}

fn encode_key(key: &StateKey) -> String {
    format!("{}{SEPARATOR}{}", key.partition, key.sort)
}

fn storage(path: &Path, e: impl std::fmt::Display, retryable: bool) -> StateError {
    StateError::Storage {
        path: path.to_path_buf(),
        message: e.to_string(),
        retryable,
    }
}

impl StateStore for EmbeddedStore {
    fn get(&self, key: &StateKey) -> Result<Option<Item>, StateError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e, true))?;
        let table = txn.open_table(TABLE).map_err(|e| self.err(e, false))?;
        let raw = encode_key(key);
        match table.get(raw.as_str()).map_err(|e| self.err(e, true))? {
            Some(v) => Ok(Some(Self::decode(&raw, v.value())?)),
            None => Ok(None),
        }
    }

    fn put(
        &self,
        key: &StateKey,
        value: &[u8],
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<u64, StateError> {
        self.guarded_write(key, condition, fence, |table, raw_key, current| {
            let version = current.map_or(1, |v| v + 1);
            let mut bytes = Vec::with_capacity(8 + value.len());
            bytes.extend_from_slice(&version.to_le_bytes());
            bytes.extend_from_slice(value);
            table
                .insert(raw_key, bytes.as_slice())
                .map_err(|e| self.err(e, true))?;
            Ok(version)
        })
    }

    fn delete(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<(), StateError> {
        self.guarded_write(key, condition, fence, |table, raw_key, _| {
            table.remove(raw_key).map_err(|e| self.err(e, true))?;
            Ok(0)
        })
        .map(|_| ())
    }

    fn scan_prefix(
        &self,
        partition: &str,
        sort_prefix: &str,
    ) -> Result<Vec<(String, Item)>, StateError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e, true))?;
        let table = txn.open_table(TABLE).map_err(|e| self.err(e, false))?;
        let start = format!("{partition}{SEPARATOR}{sort_prefix}");
        let mut out = Vec::new();
        for entry in table
            .range(start.as_str()..)
            .map_err(|e| self.err(e, true))?
        {
            let (k, v) = entry.map_err(|e| self.err(e, true))?;
            let raw = k.value();
            if !raw.starts_with(&start) {
                break;
            }
            let sort = raw[partition.len() + SEPARATOR.len_utf8()..].to_owned();
            out.push((sort, Self::decode(raw, v.value())?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateStore;

    #[test]
    fn embedded_store_passes_the_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("state.redb")).unwrap();
        crate::state::conformance::run(&store);
    }

    #[test]
    fn writes_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let key = StateKey::new("t#w#p", "offset#events#0");
        {
            let store = EmbeddedStore::open(&path).unwrap();
            store.put(&key, b"42", Condition::Absent, None).unwrap();
            store.put(&key, b"43", Condition::Version(1), None).unwrap();
        }
        let store = EmbeddedStore::open(&path).unwrap();
        assert_eq!(
            store.get(&key).unwrap(),
            Some(Item {
                value: b"43".to_vec(),
                version: 2
            })
        );
    }

    #[test]
    fn an_unopenable_file_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("state.redb");
        let err = EmbeddedStore::open(&path).unwrap_err();
        assert!(err.to_string().contains("missing-dir"), "{err}");
    }

    /// Regression: a crash while redb created the file left a partial database ("Not a redb
    /// database: magic number mismatch") that wedged the pipeline. Creation now happens under
    /// a temporary name; a leftover one from a crashed creation is ignored.
    #[test]
    fn a_crashed_creation_leaves_nothing_that_blocks_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        std::fs::write(
            dir.path()
                .join(format!(".state.redb.{}.tmp", std::process::id())),
            b"half a header",
        )
        .unwrap();
        let store = EmbeddedStore::open(&path).unwrap();
        let key = StateKey::new("p", "k");
        store.put(&key, b"1", Condition::Absent, None).unwrap();
        drop(store);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["state.redb".to_owned()]);
        assert!(
            EmbeddedStore::open(&path)
                .unwrap()
                .get(&key)
                .unwrap()
                .is_some()
        );
    }
}
