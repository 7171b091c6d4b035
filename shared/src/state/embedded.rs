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
    ///
    /// A damaged file is [`StateError::Damaged`], naming it and the way out, also where redb
    /// panics on it (its debug builds assert on pages no redb wrote) instead of returning an
    /// error: the panic is caught, and not printed.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        if !path.exists() {
            Self::create_atomically(path)?;
        }
        let opened = quietly(|| open_with_table(path, path));
        let db = opened.unwrap_or_else(|panic| Err(damaged(path, panic_message(&*panic))))?;
        Ok(EmbeddedStore {
            db,
            path: path.to_path_buf(),
        })
    }

    /// Check the store at `path` without writing it: a copy of the file (in a temporary
    /// directory) is opened the way [`EmbeddedStore::open`] opens it, which reads what a
    /// read-only open does not (redb's allocator state, and the repair after a crash), and
    /// every item of it is decoded. `Ok` with what was found ([`EmbeddedCheck`]);
    /// [`StateError::Damaged`] naming `path` when redb cannot read it (a panic on it included,
    /// caught and not printed). A file a process has open for writing (a running sync) is not
    /// copied: [`EmbeddedCheck::InUse`].
    pub fn verify(path: &Path) -> Result<EmbeddedCheck, StateError> {
        if !path.exists() {
            return Ok(EmbeddedCheck::Missing);
        }
        let read_only = quietly(|| match redb::ReadOnlyDatabase::open(path) {
            Ok(_) => Ok(None),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => Ok(Some(EmbeddedCheck::InUse)),
            // Not closed cleanly (a crash): opening it for writing repairs it.
            Err(redb::DatabaseError::RepairAborted) => Ok(None),
            Err(e) => Err(opening(path, e, false)),
        });
        if let Some(found) =
            read_only.unwrap_or_else(|panic| Err(damaged(path, panic_message(&*panic))))?
        {
            return Ok(found);
        }
        let stamp = |path: &Path| {
            std::fs::metadata(path)
                .map(|m| (m.len(), m.modified().ok()))
                .map_err(|e| storage(path, e, true))
        };
        let before = stamp(path)?;
        let dir = tempfile::tempdir().map_err(|e| {
            storage(
                path,
                format!("cannot make a temporary directory to check a copy in: {e}"),
                true,
            )
        })?;
        let copy = dir.path().join("state.redb");
        std::fs::copy(path, &copy)
            .map_err(|e| storage(path, format!("cannot copy it to check it: {e}"), true))?;
        if stamp(path)? != before {
            // Written while it was copied: a sync opened it meanwhile.
            return Ok(EmbeddedCheck::InUse);
        }
        let checked = quietly(|| -> Result<u64, StateError> {
            let db = open_with_table(&copy, path)?;
            let txn = db.begin_read().map_err(|e| opening(path, e, false))?;
            let table = txn.open_table(TABLE).map_err(|e| opening(path, e, false))?;
            let mut items = 0u64;
            for entry in table.iter().map_err(|e| opening(path, e, false))? {
                let (key, value) = entry.map_err(|e| opening(path, e, false))?;
                Self::decode(key.value(), value.value())?;
                items += 1;
            }
            Ok(items)
        });
        let items = checked.unwrap_or_else(|panic| Err(damaged(path, panic_message(&*panic))))?;
        Ok(EmbeddedCheck::Items(items))
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

/// Open (or create) the redb file `file` with the store's table, created up front so that
/// reads never meet a missing table; errors name `shown` (the store's own path when `file` is
/// a copy of it).
fn open_with_table(file: &Path, shown: &Path) -> Result<Database, StateError> {
    let db = Database::create(file).map_err(|e| opening(shown, e, false))?;
    let txn = db.begin_write().map_err(|e| opening(shown, e, true))?;
    txn.open_table(TABLE)
        .map_err(|e| opening(shown, e, false))?;
    txn.commit().map_err(|e| opening(shown, e, true))?;
    Ok(db)
}

/// What [`EmbeddedStore::verify`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddedCheck {
    /// No file yet: the first sync creates it.
    Missing,
    /// A process has it open for writing (a running sync), so it was not read.
    InUse,
    /// Every item decodes; this many.
    Items(u64),
}

/// An error of redb while opening or checking the file at `path`: [`StateError::Damaged`] when
/// redb says the file is corrupt or not a redb database, else [`StateError::Storage`].
fn opening(path: &Path, e: impl Into<redb::Error>, retryable: bool) -> StateError {
    match e.into() {
        redb::Error::Corrupted(message) => damaged(path, message),
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            damaged(path, io.to_string())
        }
        other => storage(path, other, retryable),
    }
}

fn damaged(path: &Path, message: impl Into<String>) -> StateError {
    StateError::Damaged {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "redb panicked reading it".to_owned()
    }
}

std::thread_local! {
    /// Whether a panic on this thread is expected and caught ([`quietly`]): not printed.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, catching a panic, which is not printed (the hook installed on first use prints
/// every other panic as the hook before it did).
fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|quiet| quiet.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|quiet| quiet.set(was));
    result
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

    /// Regression: redb's debug builds panic on a page no redb wrote (`Invalid page type
    /// byte`), which took the process down (exit 101). Damage is now an error naming the file,
    /// on opening and on checking it, and a sound file checks out.
    #[test]
    fn a_damaged_file_is_an_error_naming_it_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let store = EmbeddedStore::open(&path).unwrap();
            for i in 0..3 {
                let key = StateKey::new("p", format!("k{i}"));
                store.put(&key, b"v", Condition::Absent, None).unwrap();
            }
        }
        assert_eq!(
            EmbeddedStore::verify(&path).unwrap(),
            EmbeddedCheck::Items(3)
        );
        {
            let _open = EmbeddedStore::open(&path).unwrap();
            assert_eq!(EmbeddedStore::verify(&path).unwrap(), EmbeddedCheck::InUse);
        }
        assert_eq!(
            EmbeddedStore::verify(&dir.path().join("none.redb")).unwrap(),
            EmbeddedCheck::Missing
        );
        let sound = std::fs::read(&path).unwrap();
        // Pages of the first region (a panic in debug builds), the header past its magic, and
        // no redb file at all.
        for (at, len) in [(4096, 4096), (64, 64), (0, 4096)] {
            let mut bytes = sound.clone();
            for (i, byte) in bytes[at..at + len].iter_mut().enumerate() {
                *byte = (i * 131 + 17) as u8;
            }
            std::fs::write(&path, &bytes).unwrap();
            for error in [
                EmbeddedStore::verify(&path).unwrap_err(),
                EmbeddedStore::open(&path).unwrap_err(),
            ] {
                assert!(
                    matches!(&error, StateError::Damaged { path: p, .. } if *p == path),
                    "{at}: {error:?}"
                );
                assert!(!error.is_retryable());
                let text = error.to_string();
                assert!(
                    text.starts_with(&format!(
                        "state store {} is damaged and cannot be read (",
                        path.display()
                    )),
                    "{text}"
                );
                assert!(text.contains("Move it aside"), "{text}");
            }
        }
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
