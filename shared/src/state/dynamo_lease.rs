//! The shared writer lease: one writer per pipeline across machines, kept alive by heartbeats.
//!
//! Where the local lease ([`super::LocalLease`]) relies on an operating-system lock, a store
//! shared between machines (DynamoDB) has only items, so this lease is an item with an
//! expiry. The partition's lease item ([`super::LEASE_SORT_KEY`]) holds:
//!
//! - `version`: the **fencing token**. It grows by one each time a writer *takes* the lease,
//!   and only then; every state write of the pass is fenced with it ([`Fence`]);
//! - `holder`: the holder's unique id (host, process id, random suffix), absent once released;
//! - `expires_at_ms`: the holder's wall clock plus the lease's time to live (TTL), in
//!   milliseconds since the Unix epoch; `ttl_ms`: that TTL.
//!
//! **Taking.** No item, or an item without a holder (released, or written by something other
//! than a lease): take it. Held by someone else: take it over once `expires_at_ms` is past by
//! our clock, or once we have seen the item unchanged for a whole TTL by our own monotonic
//! clock (so a holder whose clock runs ahead cannot keep the lease forever). Otherwise poll
//! until `wait` elapses, then fail with [`StateError::LeaseHeld`] ("pipeline writer lease
//! unavailable: ..."), which is retryable. Every take is one conditional write on exactly the
//! state we read (the version *and* the expiry), so of two writers racing for a free lease one
//! wins, and a heartbeat landing between our read and our write makes our take fail.
//!
//! **Heartbeat.** A background thread pushes `expires_at_ms` forward every TTL/3, conditioned
//! on `version = token` and `holder = me`, *without* bumping the version, so the token stays
//! valid. If the condition fails the lease was taken over: [`DynamoLease::is_lost`] turns
//! true and the heartbeat stops. A failed call (network, throttling) is retried on the next
//! beat.
//!
//! **Fencing.** A writer frozen past its TTL (SIGSTOP, a long GC-like pause, a frozen Lambda)
//! and replaced resumes with a stale token: each of its fenced writes checks the lease item's
//! version in the same transaction, so none lands. Clock skew between machines can only make
//! a takeover early, never let two writers write.
//!
//! **Release.** Dropping the lease stops the heartbeat and releases the item (removes the
//! holder, sets the expiry to 0) if we still hold it, best effort. The item is never deleted:
//! its version must keep growing, or a later holder could get a token a stale writer still has.
//!
//! The lease works on any [`LeaseTable`]: the DynamoDB store, and the in-memory store whose
//! operations are atomic (to test the race logic, which a local DynamoDB double cannot prove).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Fence, StateError};

/// The lease's time to live when none is configured (`SKIPPR_LEASE_TTL_SECONDS`).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The lease item as read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The item's version: the current holder's fencing token.
    pub version: u64,
    /// Who holds it; `None` once released (or for an item no lease wrote).
    pub holder: Option<String>,
    /// When it expires, by the holder's clock (ms since the Unix epoch); `None` if never set.
    pub expires_at_ms: Option<u64>,
    /// The holder's time to live, in ms.
    pub ttl_ms: Option<u64>,
}

/// The operations the lease needs from a store; each must be atomic.
pub trait LeaseTable: Send + Sync {
    /// Where the lease lives, for messages (`DynamoDB table 'x'`).
    fn describe(&self) -> String;

    /// The lease item of `partition`, if any.
    fn read_lease(&self, partition: &str) -> Result<Option<LeaseRecord>, StateError>;

    /// Take the lease if the item is still exactly as `observed` (absent when `None`; else
    /// the same version and expiry): set the holder, expiry and TTL and bump the version.
    /// Returns the new version (the fencing token), or `None` if the item had changed.
    fn take_lease(
        &self,
        partition: &str,
        observed: Option<&LeaseRecord>,
        holder: &str,
        expires_at_ms: u64,
        ttl_ms: u64,
    ) -> Result<Option<u64>, StateError>;

    /// Set the expiry if the item is still at `token` and held by `holder`, leaving the
    /// version as it is. `Ok(false)`: the lease was taken over.
    fn renew_lease(
        &self,
        partition: &str,
        token: u64,
        holder: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StateError>;

    /// Remove the holder and set the expiry to 0 if the item is still at `token` and held by
    /// `holder` (the version stays). `Ok(false)`: it was not ours any more.
    fn release_lease(&self, partition: &str, token: u64, holder: &str) -> Result<bool, StateError>;
}

/// Milliseconds since the Unix epoch by this machine's clock (0 if the clock is before it).
pub(crate) fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A unique id for one holding: `host/pid/random`.
pub fn new_holder_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_owned());
    let random: String = uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .take(12)
        .collect();
    format!("{host}/{}/{random}", std::process::id())
}

/// A held shared lease. Dropping it stops the heartbeat and releases the lease.
pub struct DynamoLease {
    table: Arc<dyn LeaseTable>,
    partition: String,
    holder: String,
    fence: Fence,
    ttl: Duration,
    lost: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    heartbeat: Option<JoinHandle<()>>,
    release_on_drop: bool,
}

impl std::fmt::Debug for DynamoLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoLease")
            .field("store", &self.table.describe())
            .field("partition", &self.partition)
            .field("holder", &self.holder)
            .field("fence", &self.fence)
            .field("ttl", &self.ttl)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl DynamoLease {
    /// Take the lease of `pipeline` (whose items are in `partition`) in `table`, waiting up to
    /// `wait` for another holder to release it or expire; then keep it alive every `ttl / 3`
    /// until dropped.
    pub fn acquire(
        table: Arc<dyn LeaseTable>,
        pipeline: &str,
        partition: &str,
        wait: Duration,
        ttl: Duration,
    ) -> Result<DynamoLease, StateError> {
        DynamoLease::acquire_observed(table, pipeline, partition, wait, ttl, &mut |_| {})
    }

    /// [`DynamoLease::acquire`], telling `on_wait` once, when the lease is held by another
    /// writer and the wait starts, who holds it and until when.
    pub fn acquire_observed(
        table: Arc<dyn LeaseTable>,
        pipeline: &str,
        partition: &str,
        wait: Duration,
        ttl: Duration,
        on_wait: &mut dyn FnMut(&crate::state::LeaseWait),
    ) -> Result<DynamoLease, StateError> {
        let mut told = false;
        let ttl = ttl.max(Duration::from_millis(30));
        let ttl_ms = ms(ttl);
        let holder = new_holder_id();
        let poll = (ttl / 10).clamp(Duration::from_millis(20), Duration::from_millis(500));
        let started = Instant::now();
        // The record as last read, and since when (our monotonic clock) it has been so.
        let mut seen: Option<(Option<LeaseRecord>, Instant)> = None;
        loop {
            let current = table.read_lease(partition)?;
            let now = Instant::now();
            let unchanged_since = match &seen {
                Some((record, since)) if *record == current => *since,
                _ => {
                    seen = Some((current.clone(), now));
                    now
                }
            };
            let now_ms = wall_ms();
            let free = match &current {
                None => true,
                Some(record) => match &record.holder {
                    None => true,
                    Some(_) => {
                        let expired = record.expires_at_ms.is_none_or(|e| e <= now_ms);
                        let their_ttl = record.ttl_ms.map_or(ttl, Duration::from_millis);
                        expired || now.duration_since(unchanged_since) >= their_ttl
                    }
                },
            };
            if free {
                let taken = table.take_lease(
                    partition,
                    current.as_ref(),
                    &holder,
                    now_ms.saturating_add(ttl_ms),
                    ttl_ms,
                )?;
                if let Some(token) = taken {
                    if let Some(record) = &current
                        && record.holder.is_some()
                    {
                        tracing::warn!(
                            partition,
                            previous = record.holder.as_deref().unwrap_or_default(),
                            token,
                            "Took over an expired writer lease."
                        );
                    }
                    return Ok(DynamoLease::start(
                        table,
                        partition.to_owned(),
                        holder,
                        Fence { token },
                        ttl,
                    ));
                }
                // Someone else changed the item between our read and our write: read again.
                continue;
            }
            let waited = started.elapsed();
            if !told && waited < wait {
                told = true;
                let (holder, expires_at_ms) = current
                    .as_ref()
                    .map(|r| {
                        (
                            r.holder.clone().unwrap_or_default(),
                            r.expires_at_ms.unwrap_or(0),
                        )
                    })
                    .unwrap_or_default();
                on_wait(&crate::state::LeaseWait {
                    holder,
                    expires_in_ms: Some(
                        i64::try_from(expires_at_ms)
                            .unwrap_or(i64::MAX)
                            .saturating_sub(i64::try_from(now_ms).unwrap_or(i64::MAX)),
                    ),
                    wait,
                });
            }
            if waited >= wait {
                let (holder, expires_at_ms) = current
                    .map(|r| (r.holder.unwrap_or_default(), r.expires_at_ms.unwrap_or(0)))
                    .unwrap_or_default();
                let expires_in_ms = i64::try_from(expires_at_ms)
                    .unwrap_or(i64::MAX)
                    .saturating_sub(i64::try_from(now_ms).unwrap_or(i64::MAX));
                return Err(StateError::LeaseHeld {
                    pipeline: pipeline.to_owned(),
                    store: table.describe(),
                    holder,
                    expires_in_ms,
                    waited_ms: ms(waited),
                });
            }
            std::thread::sleep(poll.min(wait - waited));
        }
    }

    fn start(
        table: Arc<dyn LeaseTable>,
        partition: String,
        holder: String,
        fence: Fence,
        ttl: Duration,
    ) -> DynamoLease {
        let lost = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let beat = {
            let (table, partition, holder, lost) = (
                table.clone(),
                partition.clone(),
                holder.clone(),
                lost.clone(),
            );
            move || {
                heartbeat(
                    &*table,
                    &partition,
                    &holder,
                    fence.token,
                    ttl,
                    &lost,
                    &stopped,
                )
            }
        };
        let heartbeat = match std::thread::Builder::new()
            .name("skipprd-lease".into())
            .spawn(beat)
        {
            Ok(handle) => Some(handle),
            Err(e) => {
                // Without a heartbeat the lease expires after one TTL and may be taken over;
                // the fence still keeps a successor's state safe from us.
                tracing::warn!(error = %e, "Cannot start the lease heartbeat thread.");
                None
            }
        };
        DynamoLease {
            table,
            partition,
            holder,
            fence,
            ttl,
            lost,
            stop: Some(stop),
            heartbeat,
            release_on_drop: true,
        }
    }

    /// The fencing token to pass with every state write.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// This holding's id (`host/pid/random`).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The lease's time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Stop the heartbeat and forget the lease without releasing it: what a writer frozen by
    /// SIGSTOP looks like to the others. Returns the (now stale once taken over) fence.
    #[cfg(test)]
    pub(crate) fn freeze(mut self) -> Fence {
        self.stop_heartbeat();
        self.release_on_drop = false;
        self.fence
    }

    fn stop_heartbeat(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.heartbeat.take()
            && handle.join().is_err()
        {
            tracing::warn!("The lease heartbeat thread panicked.");
        }
    }

    /// Whether a heartbeat found the lease taken over by another writer. From then on every
    /// fenced write fails with [`StateError::Fenced`]; the pass should stop.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

/// The heartbeat thread's loop: renew every `ttl / 3` until told to stop or the lease is lost.
fn heartbeat(
    table: &dyn LeaseTable,
    partition: &str,
    holder: &str,
    token: u64,
    ttl: Duration,
    lost: &AtomicBool,
    stopped: &mpsc::Receiver<()>,
) {
    let every = ttl / 3;
    loop {
        match stopped.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        match table.renew_lease(partition, token, holder, wall_ms().saturating_add(ms(ttl))) {
            Ok(true) => {}
            Ok(false) => {
                lost.store(true, Ordering::SeqCst);
                tracing::error!(
                    partition,
                    token,
                    "The writer lease was taken over by another writer; this writer's state writes will be refused."
                );
                return;
            }
            Err(e) => {
                tracing::warn!(partition, error = %e, "Cannot renew the writer lease; trying again at the next beat.");
            }
        }
    }
}

impl Drop for DynamoLease {
    fn drop(&mut self) {
        self.stop_heartbeat();
        if self.is_lost() || !self.release_on_drop {
            return;
        }
        match self
            .table
            .release_lease(&self.partition, self.fence.token, &self.holder)
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                partition = %self.partition,
                "The writer lease had been taken over before it was released."
            ),
            Err(e) => tracing::warn!(
                partition = %self.partition,
                error = %e,
                "Cannot release the writer lease; it expires by itself."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The lease logic against the in-memory store, whose operations are atomic. The same
    //! scenarios run against DynamoDB (moto) in `super::super::dynamodb`'s tests.

    use super::*;
    use crate::state::{Condition, MemoryStore, StateKey, StateStore};

    const PARTITION: &str = "t#w#p";

    fn acquire(store: &Arc<MemoryStore>, wait: Duration, ttl: Duration) -> DynamoLease {
        DynamoLease::acquire(store.clone(), "p", PARTITION, wait, ttl).unwrap()
    }

    #[test]
    fn a_second_writer_waits_then_fails_naming_the_pipeline() {
        let store = Arc::new(MemoryStore::default());
        let first = acquire(&store, Duration::ZERO, Duration::from_secs(30));
        let started = Instant::now();
        let err = DynamoLease::acquire(
            store.clone(),
            "p",
            PARTITION,
            Duration::from_millis(300),
            Duration::from_secs(30),
        )
        .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(err.is_retryable());
        let msg = err.to_string();
        assert!(
            msg.starts_with("pipeline writer lease unavailable: pipeline 'p'"),
            "{msg}"
        );
        assert!(msg.contains(first.holder()), "{msg}");
        let token = first.fence().token;
        drop(first);
        // Released: the next writer takes it at once, with a newer token.
        let started = Instant::now();
        let second = acquire(&store, Duration::from_secs(5), Duration::from_secs(30));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(second.fence().token, token + 1);
    }

    #[test]
    fn an_expired_lease_is_taken_over_and_the_old_token_is_fenced_out() {
        let store = Arc::new(MemoryStore::default());
        let old = acquire(&store, Duration::ZERO, Duration::from_millis(300));
        // Freeze the old holder: no more heartbeats, no release (as after SIGSTOP).
        let old_fence = old.freeze();
        let started = Instant::now();
        let new = acquire(&store, Duration::from_secs(5), Duration::from_secs(30));
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(new.fence().token > old_fence.token);
        let key = StateKey::new(PARTITION, "offset#x");
        assert!(matches!(
            store.put(&key, b"late", Condition::Any, Some(old_fence)),
            Err(StateError::Fenced { .. })
        ));
        store
            .put(&key, b"current", Condition::Any, Some(new.fence()))
            .unwrap();
    }

    #[test]
    fn heartbeats_keep_the_lease_past_its_ttl_and_a_takeover_is_detected() {
        let store = Arc::new(MemoryStore::default());
        let ttl = Duration::from_millis(300);
        let held = acquire(&store, Duration::ZERO, ttl);
        std::thread::sleep(ttl * 3);
        assert!(!held.is_lost());
        assert!(matches!(
            DynamoLease::acquire(store.clone(), "p", PARTITION, ttl, ttl),
            Err(StateError::LeaseHeld { .. })
        ));
        // Someone takes the lease behind the holder's back (as a writer whose clock is far
        // ahead would): the next heartbeat notices.
        let record = store.read_lease(PARTITION).unwrap();
        store
            .take_lease(
                PARTITION,
                record.as_ref(),
                "thief",
                wall_ms() + 60_000,
                60_000,
            )
            .unwrap()
            .unwrap();
        let deadline = Instant::now() + ttl * 3;
        while !held.is_lost() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(held.is_lost());
        drop(held);
        // The holder's drop did not release the thief's lease.
        assert_eq!(
            store
                .read_lease(PARTITION)
                .unwrap()
                .unwrap()
                .holder
                .as_deref(),
            Some("thief")
        );
    }

    #[test]
    fn a_holder_whose_clock_runs_ahead_is_taken_over_once_unchanged_for_a_ttl() {
        let store = Arc::new(MemoryStore::default());
        // A dead holder whose expiry is an hour ahead of our clock, with a short TTL.
        store
            .take_lease(PARTITION, None, "dead", wall_ms() + 3_600_000, 300)
            .unwrap()
            .unwrap();
        let started = Instant::now();
        let lease = acquire(&store, Duration::from_secs(5), Duration::from_secs(30));
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(lease.fence().token, 2);
    }

    #[test]
    fn of_many_writers_racing_for_a_free_lease_exactly_one_wins_each_round() {
        let store = Arc::new(MemoryStore::default());
        for _round in 0..20 {
            let winners: Vec<_> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        let store = store.clone();
                        scope.spawn(move || {
                            DynamoLease::acquire(
                                store,
                                "p",
                                PARTITION,
                                Duration::ZERO,
                                Duration::from_secs(30),
                            )
                            .ok()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect();
            assert_eq!(winners.len(), 1);
        }
    }

    #[test]
    fn a_renewal_between_a_takers_read_and_write_makes_the_take_fail() {
        let store = MemoryStore::default();
        let token = store
            .take_lease(PARTITION, None, "a", wall_ms() - 1, 300)
            .unwrap()
            .unwrap();
        let observed = store.read_lease(PARTITION).unwrap();
        // The holder renews (same version, new expiry) before the taker writes.
        assert!(
            store
                .renew_lease(PARTITION, token, "a", wall_ms() + 60_000)
                .unwrap()
        );
        assert_eq!(
            store
                .take_lease(PARTITION, observed.as_ref(), "b", wall_ms() + 300, 300)
                .unwrap(),
            None
        );
        assert_eq!(store.read_lease(PARTITION).unwrap().unwrap().version, token);
    }
}
