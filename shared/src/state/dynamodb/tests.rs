//! Against a moto server (`bash tests/run` starts one and sets `SKIPPR_TEST_AWS_ENDPOINT`).
//! Every test works in a table of its own.

use std::sync::Arc;

use super::*;
use crate::state::dynamo_lease::{DynamoLease, LeaseTable, wall_ms};

/// The AWS handle for the local server, or a failure saying how to get one.
fn aws() -> Aws {
    let endpoint = std::env::var("SKIPPR_TEST_AWS_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "SKIPPR_TEST_AWS_ENDPOINT is not set: run `bash tests/run` (it starts a moto server and sets it with AWS_ENDPOINT_URL, AWS_REGION and dummy credentials), or start `moto_server` yourself and export those variables"
                )
            });
    assert_eq!(
        std::env::var("AWS_ENDPOINT_URL").ok().as_deref(),
        Some(endpoint.as_str()),
        "AWS_ENDPOINT_URL must point at the test server too (see tests/run)"
    );
    Aws::load(Some("us-east-1")).unwrap()
}

fn unique(prefix: &str) -> String {
    let random: String = uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .take(10)
        .collect();
    format!("skipprd-test-{prefix}-{random}")
}

fn fresh_store(prefix: &str) -> (Aws, DynamoStore) {
    let aws = aws();
    let table = unique(prefix);
    assert_eq!(create_table(&aws, &table).unwrap(), TableCreation::Created);
    let store = DynamoStore::open(&aws, &table).unwrap();
    (aws, store)
}

fn dynamodb_requests(aws: &Aws) -> u64 {
    aws.requests().get("dynamodb").copied().unwrap_or(0)
}

#[test]
fn dynamo_store_passes_the_conformance_suite() {
    let (_, store) = fresh_store("conformance");
    crate::state::conformance::run(&store);
}

#[test]
fn a_missing_table_is_named_and_never_created_and_create_is_idempotent() {
    let aws = aws();
    let table = unique("missing");
    let err = DynamoStore::open(&aws, &table).unwrap_err();
    assert!(matches!(err, StateError::TableMissing { .. }));
    assert!(!err.is_retryable());
    let msg = err.to_string();
    assert!(msg.contains(&format!("'{table}'")), "{msg}");
    assert!(msg.contains("skipprd store create"), "{msg}");
    // Opening did not create it.
    assert!(matches!(
        DynamoStore::open(&aws, &table),
        Err(StateError::TableMissing { .. })
    ));
    assert_eq!(create_table(&aws, &table).unwrap(), TableCreation::Created);
    assert_eq!(
        create_table(&aws, &table).unwrap(),
        TableCreation::AlreadyExisted
    );
    DynamoStore::open(&aws, &table).unwrap();
}

#[test]
fn a_table_with_other_keys_is_refused() {
    let aws = aws();
    let table = unique("badkeys");
    let client = aws.dynamodb();
    aws.block_on(
        client
            .create_table()
            .table_name(&table)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send(),
    )
    .unwrap();
    let err = DynamoStore::open(&aws, &table).unwrap_err();
    assert!(
        matches!(
            &err,
            StateError::TableUnusable {
                retryable: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("`pk`"), "{err}");
}

#[test]
fn scan_reads_every_page() {
    let (aws, mut store) = fresh_store("pages");
    store.page_limit = Some(3);
    let partition = "t#w#pages";
    for i in 0..10 {
        store
            .put(
                &StateKey::new(partition, format!("replayed#{i:02}")),
                format!("{i}").as_bytes(),
                Condition::Absent,
                None,
            )
            .unwrap();
    }
    store
        .put(
            &StateKey::new(partition, "other"),
            b"x",
            Condition::Any,
            None,
        )
        .unwrap();
    let before = dynamodb_requests(&aws);
    let found = store.scan_prefix(partition, "replayed#").unwrap();
    assert!(dynamodb_requests(&aws) - before >= 4, "pages of 3 items");
    let sorts: Vec<String> = found.iter().map(|(s, _)| s.clone()).collect();
    let expected: Vec<String> = (0..10).map(|i| format!("replayed#{i:02}")).collect();
    assert_eq!(sorts, expected);
    assert_eq!(found[7].1.value, b"7");
    assert_eq!(store.scan_prefix(partition, "").unwrap().len(), 11);
}

#[test]
fn fenced_writes_report_the_failed_condition_and_cost_what_the_docs_say() {
    let (aws, store) = fresh_store("fenced");
    let lease = StateKey::new("t#w#p", LEASE_SORT_KEY);
    let token = store
        .put(&lease, b"holder", Condition::Absent, None)
        .unwrap();
    let fence = Some(Fence { token });
    let k = StateKey::new("t#w#p", "ack");
    let before = dynamodb_requests(&aws);
    // A fenced `Any` write: a consistent read, then one two-item transaction.
    assert_eq!(store.put(&k, b"1", Condition::Any, fence).unwrap(), 1);
    assert_eq!(dynamodb_requests(&aws) - before, 2);
    assert_eq!(store.put(&k, b"2", Condition::Any, fence).unwrap(), 2);
    // A fenced conditional write: the transaction alone.
    let before = dynamodb_requests(&aws);
    assert_eq!(
        store.put(&k, b"3", Condition::Version(2), fence).unwrap(),
        3
    );
    assert_eq!(dynamodb_requests(&aws) - before, 1);
    // The item's condition fails while the fence holds: a conflict with the found version.
    let err = store
        .put(&k, b"x", Condition::Version(1), fence)
        .unwrap_err();
    assert!(
        matches!(err, StateError::Conflict { found: Some(3), .. }),
        "{err}"
    );
    let err = store.delete(&k, Condition::Absent, fence).unwrap_err();
    assert!(
        matches!(err, StateError::Conflict { found: Some(3), .. }),
        "{err}"
    );
    // An unfenced `Any` write is one request.
    let before = dynamodb_requests(&aws);
    assert_eq!(store.put(&k, b"4", Condition::Any, None).unwrap(), 4);
    assert_eq!(dynamodb_requests(&aws) - before, 1);
    // Fenced writes of the lease item itself fold the fence into the item's condition.
    let newer = store
        .put(&lease, b"holder 2", Condition::Any, fence)
        .unwrap();
    assert_eq!(newer, token + 1);
    let err = store
        .put(&lease, b"holder 3", Condition::Any, fence)
        .unwrap_err();
    assert!(
        matches!(err, StateError::Fenced { current: Some(c), .. } if c == newer),
        "{err}"
    );
    // The fence and the item's condition both fail: the fence is reported.
    let err = store
        .put(&k, b"x", Condition::Version(1), fence)
        .unwrap_err();
    assert!(matches!(err, StateError::Fenced { .. }), "{err}");
    store
        .delete(&k, Condition::Version(4), Some(Fence { token: newer }))
        .unwrap();
    assert_eq!(store.get(&k).unwrap(), None);
}

fn lease(store: &DynamoStore, wait: Duration, ttl: Duration) -> Result<DynamoLease, StateError> {
    DynamoLease::acquire(
        Arc::new(store.clone()),
        "bikehire",
        "t#w#bikehire",
        wait,
        ttl,
    )
}

#[test]
fn a_second_writer_waits_then_fails_and_takes_the_lease_once_released() {
    let (_, store) = fresh_store("lease-wait");
    let first = lease(&store, Duration::ZERO, Duration::from_secs(30)).unwrap();
    let started = Instant::now();
    let err = lease(&store, Duration::from_millis(700), Duration::from_secs(30)).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert!(err.is_retryable());
    let msg = err.to_string();
    assert!(
        msg.starts_with("pipeline writer lease unavailable: pipeline 'bikehire'"),
        "{msg}"
    );
    assert!(
        msg.contains(first.holder()) && msg.contains(store.table()),
        "{msg}"
    );
    let token = first.fence().token;
    drop(first);
    let second = lease(&store, Duration::ZERO, Duration::from_secs(30)).unwrap();
    assert_eq!(second.fence().token, token + 1);
    // The lease item is a state item like any other: its version is the token.
    let item = store
        .get(&StateKey::new("t#w#bikehire", LEASE_SORT_KEY))
        .unwrap()
        .unwrap();
    assert_eq!(item.version, second.fence().token);
    assert_eq!(item.value, second.holder().as_bytes());
}

#[test]
fn a_frozen_writer_is_taken_over_after_its_ttl_and_cannot_write_after() {
    let (_, store) = fresh_store("lease-takeover");
    let ttl = Duration::from_secs(2);
    let old = lease(&store, Duration::ZERO, ttl).unwrap();
    let k = StateKey::new("t#w#bikehire", "offset#x");
    store
        .put(&k, b"old", Condition::Any, Some(old.fence()))
        .unwrap();
    // SIGSTOP: no heartbeat, no release.
    let old_fence = old.freeze();
    let started = Instant::now();
    let new = lease(&store, Duration::from_secs(10), ttl).unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    assert!(new.fence().token > old_fence.token);
    // The old writer resumes: nothing it writes lands.
    for result in [
        store.put(&k, b"late", Condition::Any, Some(old_fence)),
        store.put(&k, b"late", Condition::Version(1), Some(old_fence)),
    ] {
        assert!(
            matches!(result, Err(StateError::Fenced { current: Some(c), .. }) if c == new.fence().token),
            "{result:?}"
        );
    }
    assert!(matches!(
        store.delete(&k, Condition::Any, Some(old_fence)),
        Err(StateError::Fenced { .. })
    ));
    assert_eq!(store.get(&k).unwrap().unwrap().value, b"old");
    store
        .put(&k, b"new", Condition::Any, Some(new.fence()))
        .unwrap();
}

#[test]
fn heartbeats_keep_the_lease_past_its_ttl() {
    let (_, store) = fresh_store("lease-heartbeat");
    let ttl = Duration::from_secs(2);
    let held = lease(&store, Duration::ZERO, ttl).unwrap();
    let partition = "t#w#bikehire";
    let first_expiry = store.read_lease(partition).unwrap().unwrap().expires_at_ms;
    std::thread::sleep(ttl * 2);
    assert!(!held.is_lost());
    let record = store.read_lease(partition).unwrap().unwrap();
    assert!(record.expires_at_ms > first_expiry, "{record:?}");
    assert!(record.expires_at_ms.unwrap() > wall_ms());
    assert_eq!(
        record.version,
        held.fence().token,
        "renewals keep the token"
    );
    assert!(matches!(
        lease(&store, Duration::from_secs(1), ttl),
        Err(StateError::LeaseHeld { .. })
    ));
    store
        .put(
            &StateKey::new(partition, "ack"),
            b"1",
            Condition::Any,
            Some(held.fence()),
        )
        .unwrap();
}

#[test]
fn a_lost_lease_is_detected_and_not_released() {
    let (_, store) = fresh_store("lease-lost");
    let ttl = Duration::from_secs(2);
    let held = lease(&store, Duration::ZERO, ttl).unwrap();
    let partition = "t#w#bikehire";
    let record = store.read_lease(partition).unwrap();
    let thief_token = store
        .take_lease(
            partition,
            record.as_ref(),
            "thief",
            wall_ms() + 60_000,
            60_000,
        )
        .unwrap()
        .unwrap();
    let deadline = Instant::now() + ttl;
    while !held.is_lost() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(held.is_lost());
    drop(held);
    let record = store.read_lease(partition).unwrap().unwrap();
    assert_eq!(record.holder.as_deref(), Some("thief"));
    assert_eq!(record.version, thief_token);
}
