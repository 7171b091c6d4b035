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
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Condition, Fence, StateError, StateKey, StateStore};

/// The sort key of a partition's lease item.
pub const LEASE_SORT_KEY: &str = super::keys::LEASE;

/// How long a second writer waits for the lease before giving up.
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(5);

/// How often a waiting writer retries the lock.
const POLL: Duration = Duration::from_millis(50);

/// A held lease. Dropping it releases the lock.
#[derive(Debug)]
pub struct LocalLease {
    _lock: File,
    path: PathBuf,
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
        let path = state_dir.join("writer.lock");
        let io = |e: std::io::Error| StateError::Storage {
            path: path.clone(),
            message: e.to_string(),
            retryable: false,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
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
                _lock: file,
                path,
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
        &self.path
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
