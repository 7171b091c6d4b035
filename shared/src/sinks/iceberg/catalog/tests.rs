//! The pointer conformance suite on the pointers of this module: the Hadoop pointer, and the
//! store pointer over the embedded store, the memory store and DynamoDB (on moto). The Glue
//! pointer runs it in `glue/tests.rs`.

use std::sync::Arc;

use super::conformance::{Place, ambiguous_swaps_succeed, run};
use super::{HadoopPointer, LakePointer, StorePointer};
use crate::aws::testing::{bucket, moto};
use crate::sinks::iceberg::s3::s3_file_io;
use crate::sinks::iceberg::storage::durable_file_io;
use crate::state::{
    Condition, DynamoStore, Fence, Item, MemoryStore, StateError, StateKey, StateStore,
};

/// A place on a fresh local warehouse.
fn local(pointer: impl FnOnce(&std::path::Path) -> LakePointer) -> (tempfile::TempDir, Place) {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    let place = Place {
        pointer: pointer(&warehouse),
        warehouse: format!("file://{}", warehouse.display()),
        file_io: durable_file_io(),
        prefix: "conf_".to_owned(),
        refuses_stale_swaps: true,
    };
    (dir, place)
}

#[test]
fn the_hadoop_pointer_passes_the_conformance_suite() {
    let (_dir, place) = local(|_| LakePointer::new(HadoopPointer));
    run(place);
}

#[test]
fn the_embedded_store_pointer_passes_the_conformance_suite() {
    let (_dir, place) = local(|warehouse| {
        LakePointer::new(StorePointer::embedded(warehouse.to_owned(), "catalog"))
    });
    run(place);
}

#[test]
fn the_memory_store_pointer_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("file://{}", dir.path().join("warehouse").display());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
    run(Place {
        pointer: LakePointer::new(StorePointer::shared(
            store,
            "memory store".to_owned(),
            &warehouse,
        )),
        warehouse,
        file_io: durable_file_io(),
        prefix: "conf_".to_owned(),
        refuses_stale_swaps: true,
    });
}

/// On moto: the pointers in a fresh DynamoDB table, the tables in a fresh bucket.
#[test]
fn the_dynamodb_store_pointer_passes_the_conformance_suite() {
    let aws = moto();
    let warehouse = format!("s3://{}/lake", bucket(&aws, "catalog"));
    let table = format!(
        "skipprd-test-catalog-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    crate::state::dynamodb::create_table(&aws, &table).unwrap();
    let store: Arc<dyn StateStore> = Arc::new(DynamoStore::open(&aws, &table).unwrap());
    run(Place {
        pointer: LakePointer::new(StorePointer::shared(
            store,
            format!("DynamoDB table '{table}'"),
            &warehouse,
        )),
        warehouse,
        file_io: s3_file_io(&aws, None),
        prefix: "conf_".to_owned(),
        refuses_stale_swaps: true,
    });
}

/// A store that applies every conditional put and then answers as the SDK's retry of it
/// would: refused, its condition no longer holding.
struct AppliesThenRefuses(MemoryStore);

impl StateStore for AppliesThenRefuses {
    fn get(&self, key: &StateKey) -> Result<Option<Item>, StateError> {
        self.0.get(key)
    }

    fn put(
        &self,
        key: &StateKey,
        value: &[u8],
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<u64, StateError> {
        self.0.put(key, value, condition, fence)?;
        if condition == Condition::Any {
            return self.0.put(key, value, condition, fence);
        }
        match self.0.put(key, value, condition, fence) {
            Ok(_) => panic!("the retry of an applied conditional put cannot succeed"),
            Err(e) => Err(e),
        }
    }

    fn delete(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<(), StateError> {
        self.0.delete(key, condition, fence)
    }

    fn scan_prefix(
        &self,
        partition: &str,
        sort_prefix: &str,
    ) -> Result<Vec<(String, Item)>, StateError> {
        self.0.scan_prefix(partition, sort_prefix)
    }
}

#[test]
fn the_store_pointer_takes_a_refused_retry_of_an_applied_swap_as_success() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("file://{}", dir.path().join("warehouse").display());
    let store: Arc<dyn StateStore> = Arc::new(AppliesThenRefuses(MemoryStore::default()));
    ambiguous_swaps_succeed(Place {
        pointer: LakePointer::new(StorePointer::shared(store, "ambiguous".into(), &warehouse)),
        warehouse,
        file_io: durable_file_io(),
        prefix: "amb_".to_owned(),
        refuses_stale_swaps: true,
    });
}
