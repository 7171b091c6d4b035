//! An in-memory [`StateStore`], for tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

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

#[cfg(test)]
mod tests {
    #[test]
    fn memory_store_passes_the_conformance_suite() {
        super::super::conformance::run(&super::MemoryStore::default());
    }
}
