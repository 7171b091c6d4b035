//! The writer lease of a pipeline, as `sync` takes it: with the DynamoDB store (against the
//! moto server `tests/run` starts) and a disk WAL the state directory's file lock is taken too,
//! and a waiting writer says once whom it waits for.

use std::collections::BTreeMap;

use super::*;
use crate::aws::testing::moto;
use crate::config::{ValidatedConfig, load_file, validate};
use crate::pipeline::events::{Recorder, Silent};

fn project(table: &str) -> (tempfile::TempDir, ValidatedConfig) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.jsonl"), "{\"id\":1}\n").unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "skippr:\n  store:\n    type: dynamodb\n    name: {table}\n\
             pipelines:\n  p:\n    data_source: data_sources.s\n\
             data_sources:\n  s:\n    File:\n      path: events.jsonl\n"
        ),
    )
    .unwrap();
    let env: BTreeMap<String, String> = [
        (
            "DATA_DIR".to_owned(),
            dir.path().join("data").display().to_string(),
        ),
        ("SKIPPR_LEASE_TTL_SECONDS".to_owned(), "1".to_owned()),
    ]
    .into();
    let loaded = load_file(&dir.path().join("skippr.yml"), env).unwrap();
    (dir, validate(&loaded, None).unwrap())
}

#[test]
fn a_frozen_writer_keeps_its_disk_wal_even_after_its_dynamodb_lease_expires() {
    let aws = moto();
    let table = format!(
        "skipprd-test-held-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    crate::state::dynamodb::create_table(&aws, &table).unwrap();
    let (_dir, config) = project(&table);
    let pipeline = config.pipeline(None).unwrap();
    let settings = &config.settings;
    assert_eq!(settings.lease_ttl, Duration::from_secs(1));

    let first =
        Held::take_with(settings, pipeline, Duration::ZERO, Some(&aws), &mut Silent).unwrap();
    let first_token = first.fence().token;
    // Frozen: no more heartbeats, so its DynamoDB lease expires after 1 s; its file lock stays.
    let lock = first.freeze();

    // Waiting three TTLs is plenty for the DynamoDB lease, but the disk WAL stays locked.
    let mut events = Recorder::default();
    let wait = Duration::from_secs(3);
    let Err(err) = Held::take_with(settings, pipeline, wait, Some(&aws), &mut events) else {
        panic!("a second writer got into a disk WAL whose writer is frozen, not dead");
    };
    let msg = err.to_string();
    assert!(
        msg.starts_with("pipeline 'p': pipeline writer lease unavailable")
            && msg.contains("writer.lock"),
        "{msg}"
    );
    // It said once whom it waited for, and for how long at most.
    let holder = format!("pid {} on ", std::process::id());
    match events.0.as_slice() {
        [
            Event::LeaseWaiting {
                pipeline: p,
                holder: h,
                expires_in_ms: None,
                wait_ms: 3000,
            },
        ] => assert!(p == "p" && h.starts_with(&holder), "{h}"),
        other => panic!("{other:?}"),
    }

    // Once the frozen process is gone (its lock with it), the expired lease is taken over.
    drop(lock);
    let second = Held::take_with(settings, pipeline, wait, Some(&aws), &mut Silent).unwrap();
    assert!(second.fence().token > first_token);
}

#[test]
fn a_writer_waiting_for_a_held_dynamodb_lease_says_whom_it_waits_for() {
    let aws = moto();
    let table = format!(
        "skipprd-test-wait-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    crate::state::dynamodb::create_table(&aws, &table).unwrap();
    let (_dir, config) = project(&table);
    let pipeline = config.pipeline(None).unwrap();
    let store = DynamoStore::open(&aws, &table).unwrap();
    let partition = partition_key(&config.settings.tenant, &config.settings.workspace, "p");
    // Held elsewhere (another machine: no file lock here), with heartbeats, for 30 s.
    let other = DynamoLease::acquire(
        Arc::new(store),
        "p",
        &partition,
        Duration::ZERO,
        Duration::from_secs(30),
    )
    .unwrap();
    let mut events = Recorder::default();
    let wait = Duration::from_millis(1500);
    assert!(Held::take_with(&config.settings, pipeline, wait, Some(&aws), &mut events).is_err());
    match events.0.as_slice() {
        [
            Event::LeaseWaiting {
                holder,
                expires_in_ms: Some(ms),
                wait_ms: 1500,
                ..
            },
        ] => {
            assert_eq!(holder, other.holder());
            assert!((20_000..=30_000).contains(ms), "{ms}");
        }
        other => panic!("{other:?}"),
    }
}
