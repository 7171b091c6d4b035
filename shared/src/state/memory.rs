//! An in-memory [`StateStore`], for tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::dynamo_lease::{LeaseRecord, LeaseTable};
use super::{
    Condition, Fence, Item, LEASE_SORT_KEY, StateError, StateKey, StateStore, check_condition,
    check_fence,
};

/// Items in a map behind a mutex: every operation is atomic.
#[derive(Debug, Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<StateKey, Item>>,
}

impl MemoryStore {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<StateKey, Item>) -> T) -> T {
        let mut items = self
            .items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut items)
    }
}

fn guard(
    items: &BTreeMap<StateKey, Item>,
    key: &StateKey,
    condition: Condition,
    fence: Option<Fence>,
) -> Result<(), StateError> {
    let lease = StateKey::new(key.partition.clone(), LEASE_SORT_KEY);
    check_fence(key, items.get(&lease).map(|i| i.version), fence)?;
    check_condition(key, items.get(key).map(|i| i.version), condition)
}

impl StateStore for MemoryStore {
    fn get(&self, key: &StateKey) -> Result<Option<Item>, StateError> {
        Ok(self.with(|items| items.get(key).cloned()))
    }

    fn put(
        &self,
        key: &StateKey,
        value: &[u8],
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<u64, StateError> {
        self.with(|items| {
            guard(items, key, condition, fence)?;
            let version = items.get(key).map_or(1, |i| i.version + 1);
            items.insert(
                key.clone(),
                Item {
                    value: value.to_vec(),
                    version,
                },
            );
            Ok(version)
        })
    }

    fn delete(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<(), StateError> {
        self.with(|items| {
            guard(items, key, condition, fence)?;
            items.remove(key);
            Ok(())
        })
    }

    fn scan_prefix(
        &self,
        partition: &str,
        sort_prefix: &str,
    ) -> Result<Vec<(String, Item)>, StateError> {
        Ok(self.with(|items| {
            items
                .iter()
                .filter(|(k, _)| k.partition == partition && k.sort.starts_with(sort_prefix))
                .map(|(k, i)| (k.sort.clone(), i.clone()))
                .collect()
        }))
    }
}

/// The lease item's fields, kept as the item's JSON value in memory.
#[derive(serde::Serialize, serde::Deserialize)]
struct MemoryLease {
    holder: Option<String>,
    expires_at_ms: Option<u64>,
    ttl_ms: Option<u64>,
}

fn lease_key(partition: &str) -> StateKey {
    StateKey::new(partition, LEASE_SORT_KEY)
}

fn lease_record(item: &Item) -> LeaseRecord {
    // An item some other writer put (not JSON of ours) is a lease nobody holds.
    let fields = serde_json::from_slice::<MemoryLease>(&item.value).unwrap_or(MemoryLease {
        holder: None,
        expires_at_ms: None,
        ttl_ms: None,
    });
    LeaseRecord {
        version: item.version,
        holder: fields.holder,
        expires_at_ms: fields.expires_at_ms,
        ttl_ms: fields.ttl_ms,
    }
}

fn encode_lease(fields: &MemoryLease) -> Vec<u8> {
    serde_json::to_vec(fields).unwrap_or_default()
}

/// The lease operations, each atomic under the map's mutex: the double that proves the lease's
/// race logic (see [`super::dynamo_lease`]).
impl LeaseTable for MemoryStore {
    fn describe(&self) -> String {
        "the in-memory store".to_owned()
    }

    fn read_lease(&self, partition: &str) -> Result<Option<LeaseRecord>, StateError> {
        Ok(self.with(|items| items.get(&lease_key(partition)).map(lease_record)))
    }

    fn take_lease(
        &self,
        partition: &str,
        observed: Option<&LeaseRecord>,
        holder: &str,
        expires_at_ms: u64,
        ttl_ms: u64,
    ) -> Result<Option<u64>, StateError> {
        self.with(|items| {
            let key = lease_key(partition);
            let current = items.get(&key).map(lease_record);
            let unchanged = match (&current, observed) {
                (None, None) => true,
                (Some(c), Some(o)) => c.version == o.version && c.expires_at_ms == o.expires_at_ms,
                _ => false,
            };
            if !unchanged {
                return Ok(None);
            }
            let version = current.map_or(1, |c| c.version + 1);
            let value = encode_lease(&MemoryLease {
                holder: Some(holder.to_owned()),
                expires_at_ms: Some(expires_at_ms),
                ttl_ms: Some(ttl_ms),
            });
            items.insert(key, Item { value, version });
            Ok(Some(version))
        })
    }

    fn renew_lease(
        &self,
        partition: &str,
        token: u64,
        holder: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StateError> {
        self.with(|items| match items.get_mut(&lease_key(partition)) {
            Some(item) => {
                let mut record = lease_record(item);
                if record.version != token || record.holder.as_deref() != Some(holder) {
                    return Ok(false);
                }
                record.expires_at_ms = Some(expires_at_ms);
                item.value = encode_lease(&MemoryLease {
                    holder: record.holder,
                    expires_at_ms: record.expires_at_ms,
                    ttl_ms: record.ttl_ms,
                });
                Ok(true)
            }
            None => Ok(false),
        })
    }

    fn release_lease(&self, partition: &str, token: u64, holder: &str) -> Result<bool, StateError> {
        self.with(|items| match items.get_mut(&lease_key(partition)) {
            Some(item) => {
                let record = lease_record(item);
                if record.version != token || record.holder.as_deref() != Some(holder) {
                    return Ok(false);
                }
                item.value = encode_lease(&MemoryLease {
                    holder: None,
                    expires_at_ms: Some(0),
                    ttl_ms: record.ttl_ms,
                });
                Ok(true)
            }
            None => Ok(false),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_store_passes_the_conformance_suite() {
        super::super::conformance::run(&super::MemoryStore::default());
    }
}
