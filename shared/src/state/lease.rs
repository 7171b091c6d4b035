//! The local writer lease: one writer per pipeline.
//!
//! The lease is an exclusive lock on `<state_dir>/writer.lock`, taken with the operating
//! system's advisory file lock (`flock`), so it is released when the process exits for any
//! reason, `kill -9` included. A second writer polls for up to the wait time, then fails with
//! "pipeline writer lease unavailable".
//!
//! Once the lock is held, the writer bumps the partition's lease item ([`LEASE_SORT_KEY`]) in
//! the state store; the item's new version is the writer's **fencing token**. Every state
//! write of the pass is fenced with it ([`super::Fence`]), the same protocol the DynamoDB lease
//! (which has no OS lock, only an expiry) relies on.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Condition, Fence, StateError, StateKey, StateStore};

/// The sort key of a partition's lease item.
pub const LEASE_SORT_KEY: &str = super::keys::LEASE;

/// How long a second writer waits for the lease before giving up.
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(5);

/// How often a waiting writer retries the lock.
const POLL: Duration = Duration::from_millis(50);

/// A writer about to wait for a lease another writer holds: said once, before the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseWait {
    /// Who holds it: `host/pid/random` for the DynamoDB lease, `pid N on HOST` for the local
    /// lock (`unknown` when the lock file names nobody).
    pub holder: String,
    /// Milliseconds until the holder's lease expires, by its clock as read (negative: already
    /// past); `None` for the local lock, held until its process ends.
    pub expires_in_ms: Option<i64>,
    /// The longest the writer waits before giving up.
    pub wait: Duration,
}

/// An exclusive OS lock on `<state_dir>/writer.lock`: one process per state directory (and
/// so per disk WAL). Dropping it releases the lock.
#[derive(Debug)]
pub struct LocalLock {
    _file: File,
    path: PathBuf,
}

impl LocalLock {
    /// Take the lock of `pipeline`'s state directory, waiting up to `wait`; when it is held,
    /// `on_wait` hears once who holds it before the wait starts. The holder's pid and host are
    /// written into the file, for the next waiter to name.
    pub fn acquire(
        state_dir: &Path,
        pipeline: &str,
        wait: Duration,
        on_wait: &mut dyn FnMut(&LeaseWait),
    ) -> Result<LocalLock, StateError> {
        let path = state_dir.join("writer.lock");
        let io = |e: std::io::Error| StateError::Storage {
            path: path.clone(),
            message: e.to_string(),
            retryable: false,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let started = Instant::now();
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                    if !told {
                        told = true;
                        let holder = std::fs::read_to_string(&path)
                            .ok()
                            .map(|h| h.trim().to_owned())
                            .filter(|h| !h.is_empty())
                            .unwrap_or_else(|| "unknown".to_owned());
                        on_wait(&LeaseWait {
                            holder,
                            expires_in_ms: None,
                            wait,
                        });
                    }
                    std::thread::sleep(POLL)
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(StateError::LeaseUnavailable {
                        pipeline: pipeline.to_owned(),
                        path,
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        // Best effort: the name is only for a waiter's message.
        let holder = format!("pid {} on {}", std::process::id(), host_name());
        let named = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(holder.as_bytes()));
        if let Err(e) = named {
            tracing::debug!(path = %path.display(), error = %e, "Could not name the lock holder.");
        }
        Ok(LocalLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// This machine's name, for messages.
fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// A held lease. Dropping it releases the lock.
#[derive(Debug)]
pub struct LocalLease {
    lock: LocalLock,
    fence: Fence,
}

impl LocalLease {
    /// Take the lease of `pipeline`, whose state lives in `state_dir`, waiting up to `wait`,
    /// then take a fencing token from `open_store` (called only once the lock is held: the
    /// embedded store itself admits one process at a time).
    pub fn acquire<S: StateStore>(
        state_dir: &Path,
        pipeline: &str,
        partition: &str,
        wait: Duration,
        open_store: impl FnOnce() -> Result<S, StateError>,
    ) -> Result<(LocalLease, S), StateError> {
        LocalLease::acquire_observed(
            state_dir,
            pipeline,
            partition,
            wait,
            &mut |_| {},
            open_store,
        )
    }

    /// [`LocalLease::acquire`], telling `on_wait` once when the lock is held by another
    /// process and the wait starts.
    pub fn acquire_observed<S: StateStore>(
        state_dir: &Path,
        pipeline: &str,
        partition: &str,
        wait: Duration,
        on_wait: &mut dyn FnMut(&LeaseWait),
        open_store: impl FnOnce() -> Result<S, StateError>,
    ) -> Result<(LocalLease, S), StateError> {
        let lock = LocalLock::acquire(state_dir, pipeline, wait, on_wait)?;
        let store = open_store()?;
        let key = StateKey::new(partition, LEASE_SORT_KEY);
        let holder = format!("{{\"pid\":{},\"kind\":\"local\"}}", std::process::id());
        // We hold the OS lock, so nobody else writes the lease item now; the condition only
        // guards against a bug elsewhere.
        let current = store.get(&key)?.map(|i| i.version);
        let condition = match current {
            Some(v) => Condition::Version(v),
            None => Condition::Absent,
        };
        let token = store.put(&key, holder.as_bytes(), condition, None)?;
        Ok((
            LocalLease {
                lock,
                fence: Fence { token },
            },
            store,
        ))
    }

    /// The fencing token to pass with every state write.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        self.lock.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStore;

    #[test]
    fn a_second_writer_waits_then_fails_naming_the_pipeline() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::default();
        let first = LocalLease::acquire(
            dir.path(),
            "bikehire",
            "t#w#bikehire",
            Duration::ZERO,
            || Ok(&store),
        )
        .unwrap()
        .0;
        let started = Instant::now();
        let err = LocalLease::acquire(
            dir.path(),
            "bikehire",
            "t#w#bikehire",
            Duration::from_millis(200),
            || Ok(&store),
        )
        .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(200));
        let msg = err.to_string();
        assert!(
            msg.starts_with("pipeline writer lease unavailable: pipeline 'bikehire'"),
            "{msg}"
        );
        drop(first);
        let second = LocalLease::acquire(
            dir.path(),
            "bikehire",
            "t#w#bikehire",
            Duration::ZERO,
            || Ok(&store),
        )
        .unwrap()
        .0;
        assert_eq!(
            second.fence().token,
            2,
            "each holder gets a newer fencing token"
        );
    }

    #[test]
    fn a_newer_holder_fences_out_the_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::default();
        let old = LocalLease::acquire(dir.path(), "p", "t#w#p", Duration::ZERO, || Ok(&store))
            .unwrap()
            .0;
        let old_fence = old.fence();
        drop(old); // the lock is gone, as after a stall past the lease; the old writer lives on
        let new = LocalLease::acquire(dir.path(), "p", "t#w#p", Duration::ZERO, || Ok(&store))
            .unwrap()
            .0;
        let key = StateKey::new("t#w#p", "offset#x");
        assert!(matches!(
            store.put(&key, b"late", Condition::Any, Some(old_fence)),
            Err(StateError::Fenced { .. })
        ));
        store
            .put(&key, b"current", Condition::Any, Some(new.fence()))
            .unwrap();
    }
}
