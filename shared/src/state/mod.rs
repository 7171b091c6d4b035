//! The state store: resume positions, acknowledgements, schema versions and the writer lease.
//!
//! One small trait, [`StateStore`], shaped after what DynamoDB offers so that the embedded
//! store here and the DynamoDB store of the AWS backends are interchangeable:
//!
//! - an item is addressed by a [`StateKey`]: a partition (one pipeline's identity,
//!   `{tenant}#{workspace}#{pipeline}`) and a sort key (`offset#{namespace}#{partition}`,
//!   `lease`, `checkpoint#{key}`, `schema#{namespace}`, ...);
//! - every item carries a `version` that grows by one with each write, and every write can be
//!   conditional ([`Condition`]): "absent", "at this version", or unconditional. That is the
//!   compare-and-swap;
//! - a write can also be *fenced* ([`Fence`]): it succeeds only while the partition's lease
//!   item is still at the version (the fencing token) the writer got when it took the lease.
//!   A writer that stalled past its lease, and was replaced, can therefore not write.
//!
//! Implementations: [`embedded::EmbeddedStore`] (redb, one file per pipeline, ACID; what
//! `store.type: sled` means, the name being kept for compatibility),
//! [`dynamodb::DynamoStore`] (one DynamoDB table, `store.type: dynamodb`) and
//! [`memory::MemoryStore`] (tests).
//!
//! Leases: [`lease::LocalLease`] (an OS file lock, with the embedded store) and
//! [`dynamo_lease::DynamoLease`] (an expiring item kept alive by heartbeats, with DynamoDB).

pub mod dynamo_lease;
pub mod dynamodb;
pub mod embedded;
pub mod error;
pub mod keys;
pub mod lease;
pub mod memory;

pub use dynamo_lease::{DEFAULT_LEASE_TTL, DynamoLease, LeaseRecord, LeaseTable};
pub use dynamodb::DynamoStore;
pub use embedded::{EmbeddedCheck, EmbeddedStore};
pub use error::StateError;
pub use lease::{DEFAULT_LEASE_WAIT, LEASE_SORT_KEY, LeaseWait, LocalLease, LocalLock};
pub use memory::MemoryStore;

/// The address of an item.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    /// The pipeline's identity: `{tenant}#{workspace}#{pipeline}` (see [`partition_key`]).
    pub partition: String,
    /// The item within the partition.
    pub sort: String,
}

impl StateKey {
    /// A key.
    pub fn new(partition: impl Into<String>, sort: impl Into<String>) -> Self {
        StateKey {
            partition: partition.into(),
            sort: sort.into(),
        }
    }
}

impl std::fmt::Display for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.partition, self.sort)
    }
}

/// The partition of one pipeline: renaming the tenant, workspace or pipeline starts afresh.
pub fn partition_key(tenant: &str, workspace: &str, pipeline: &str) -> String {
    format!("{tenant}#{workspace}#{pipeline}")
}

/// A stored value and its version (1 for the first write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The value's bytes (the caller's encoding, usually JSON).
    pub value: Vec<u8>,
    /// Grows by one with every write of this key.
    pub version: u64,
}

/// When a write may happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Always.
    Any,
    /// Only if the key has no item.
    Absent,
    /// Only if the item is at exactly this version.
    Version(u64),
}

/// A write is fenced by the lease: it happens only while the partition's lease item (sort key
/// [`LEASE_SORT_KEY`]) is at version `token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// The lease item's version when the writer took the lease.
    pub token: u64,
}

/// Durable key-value state with compare-and-swap and fencing.
pub trait StateStore: Send + Sync {
    /// The item at `key`, if any.
    fn get(&self, key: &StateKey) -> Result<Option<Item>, StateError>;

    /// Write `value` at `key` if `condition` holds (and the fence, if given); returns the new
    /// version. A failed condition is [`StateError::Conflict`], a failed fence
    /// [`StateError::Fenced`]; neither writes anything.
    fn put(
        &self,
        key: &StateKey,
        value: &[u8],
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<u64, StateError>;

    /// Delete the item at `key` if `condition` holds (and the fence). Deleting an absent item
    /// with [`Condition::Any`] is not an error.
    fn delete(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<(), StateError>;

    /// Every item of `partition` whose sort key starts with `sort_prefix`, in sort-key order.
    fn scan_prefix(
        &self,
        partition: &str,
        sort_prefix: &str,
    ) -> Result<Vec<(String, Item)>, StateError>;
}

/// `StateStore` for a pointer to a store: every call goes to the store it points at.
macro_rules! forward_store {
    ($($(#[$doc:meta])* $ptr:ty;)+) => {$(
        $(#[$doc])*
        impl<T: StateStore + ?Sized> StateStore for $ptr {
            fn get(&self, key: &StateKey) -> Result<Option<Item>, StateError> {
                (**self).get(key)
            }

            fn put(
                &self,
                key: &StateKey,
                value: &[u8],
                condition: Condition,
                fence: Option<Fence>,
            ) -> Result<u64, StateError> {
                (**self).put(key, value, condition, fence)
            }

            fn delete(
                &self,
                key: &StateKey,
                condition: Condition,
                fence: Option<Fence>,
            ) -> Result<(), StateError> {
                (**self).delete(key, condition, fence)
            }

            fn scan_prefix(
                &self,
                partition: &str,
                sort_prefix: &str,
            ) -> Result<Vec<(String, Item)>, StateError> {
                (**self).scan_prefix(partition, sort_prefix)
            }
        }
    )+};
}

forward_store! {
    &T;
    /// A boxed store (what a pass holds when the store kind is chosen at run time).
    Box<T>;
}

/// Check `condition` against the current item; shared by the implementations.
pub(crate) fn check_condition(
    key: &StateKey,
    current: Option<u64>,
    condition: Condition,
) -> Result<(), StateError> {
    let ok = match condition {
        Condition::Any => true,
        Condition::Absent => current.is_none(),
        Condition::Version(v) => current == Some(v),
    };
    if ok {
        Ok(())
    } else {
        Err(StateError::Conflict {
            key: key.to_string(),
            expected: condition,
            found: current,
        })
    }
}

/// Check `fence` against the lease item's current version; shared by the implementations.
pub(crate) fn check_fence(
    key: &StateKey,
    lease_version: Option<u64>,
    fence: Option<Fence>,
) -> Result<(), StateError> {
    match fence {
        Some(f) if lease_version != Some(f.token) => Err(StateError::Fenced {
            key: key.to_string(),
            token: f.token,
            current: lease_version,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
pub(crate) mod conformance {
    //! One suite, run against every store.

    use super::*;

    fn key(sort: &str) -> StateKey {
        StateKey::new("t#w#p", sort)
    }

    /// Runs every scenario on `store` (which must be empty).
    pub fn run(store: &dyn StateStore) {
        versions_grow_and_conditions_guard_writes(store);
        delete_honours_conditions(store);
        scan_returns_a_partition_prefix_in_order(store);
        fenced_writes_need_the_current_lease_version(store);
    }

    fn versions_grow_and_conditions_guard_writes(store: &dyn StateStore) {
        let k = key("offset#a#0");
        assert_eq!(store.get(&k).unwrap(), None);
        assert_eq!(store.put(&k, b"one", Condition::Absent, None).unwrap(), 1);
        assert!(matches!(
            store.put(&k, b"x", Condition::Absent, None),
            Err(StateError::Conflict { found: Some(1), .. })
        ));
        assert!(matches!(
            store.put(&k, b"x", Condition::Version(7), None),
            Err(StateError::Conflict { .. })
        ));
        assert_eq!(
            store.put(&k, b"two", Condition::Version(1), None).unwrap(),
            2
        );
        assert_eq!(store.put(&k, b"three", Condition::Any, None).unwrap(), 3);
        assert_eq!(
            store.get(&k).unwrap(),
            Some(Item {
                value: b"three".to_vec(),
                version: 3
            })
        );
    }

    fn delete_honours_conditions(store: &dyn StateStore) {
        let k = key("checkpoint#x");
        store.put(&k, b"v", Condition::Any, None).unwrap();
        assert!(matches!(
            store.delete(&k, Condition::Version(9), None),
            Err(StateError::Conflict { .. })
        ));
        store.delete(&k, Condition::Version(1), None).unwrap();
        assert_eq!(store.get(&k).unwrap(), None);
        store.delete(&k, Condition::Any, None).unwrap();
        assert!(matches!(
            store.delete(&k, Condition::Version(1), None),
            Err(StateError::Conflict { .. })
        ));
    }

    fn scan_returns_a_partition_prefix_in_order(store: &dyn StateStore) {
        for sort in ["scan#b", "scan#a", "scan#c", "scanx", "other"] {
            store
                .put(&key(sort), sort.as_bytes(), Condition::Any, None)
                .unwrap();
        }
        store
            .put(
                &StateKey::new("t#w#q", "scan#z"),
                b"other partition",
                Condition::Any,
                None,
            )
            .unwrap();
        let found: Vec<String> = store
            .scan_prefix("t#w#p", "scan#")
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(found, ["scan#a", "scan#b", "scan#c"]);
    }

    fn fenced_writes_need_the_current_lease_version(store: &dyn StateStore) {
        let lease = key(LEASE_SORT_KEY);
        let token = store
            .put(&lease, b"holder 1", Condition::Any, None)
            .unwrap();
        let k = key("offset#fenced");
        store
            .put(&k, b"by holder 1", Condition::Any, Some(Fence { token }))
            .unwrap();
        // A second holder takes the lease: the first one's token is stale from now on.
        let newer = store
            .put(&lease, b"holder 2", Condition::Version(token), None)
            .unwrap();
        let err = store
            .put(&k, b"late write", Condition::Any, Some(Fence { token }))
            .unwrap_err();
        assert!(
            matches!(err, StateError::Fenced { token: t, current: Some(c), .. } if t == token && c == newer)
        );
        assert_eq!(store.get(&k).unwrap().unwrap().value, b"by holder 1");
        assert!(
            store
                .delete(&k, Condition::Any, Some(Fence { token }))
                .is_err()
        );
        store
            .put(
                &k,
                b"by holder 2",
                Condition::Any,
                Some(Fence { token: newer }),
            )
            .unwrap();
    }
}
