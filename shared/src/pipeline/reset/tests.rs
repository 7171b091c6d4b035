//! A WAL that restarts its ids is refused, and `reset` starts the pipeline over above every
//! id used before; on the embedded store, without a destination (the WAL is the dataset).

use super::*;
use crate::pipeline::events::Recorder;
use crate::pipeline::sync::{SyncOptions, sync_pass};
use crate::pipeline::testing::six_records_project;
use crate::wal::{DiskWal, WalOptions};

fn wal_dir(config: &ValidatedConfig) -> std::path::PathBuf {
    match &config.pipeline(None).unwrap().wal {
        WalLocation::Disk { dir } => dir.clone(),
        WalLocation::S3 { .. } => panic!("a disk WAL"),
    }
}

/// The ids of the WAL's batches.
fn wal_ids(config: &ValidatedConfig) -> Vec<u64> {
    let (wal, _) = DiskWal::open(&wal_dir(config), WalOptions::default()).unwrap();
    wal.batches().iter().map(|b| b.id.0).collect()
}

#[test]
fn a_lost_wal_is_refused_and_reset_numbers_above_every_used_id() {
    let (_dir, config) = six_records_project();
    let pipeline = config.pipeline(None).unwrap();
    let mut events = Recorder::default();
    let first = sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).unwrap();
    assert_eq!(first.batches, 3);
    assert_eq!(wal_ids(&config), [1, 2, 3]);

    // The WAL is lost; the state store (position through batch 3) is not.
    std::fs::remove_dir_all(wal_dir(&config)).unwrap();
    for _ in 0..2 {
        let err = sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                PipelineError::WalRestarted {
                    wal_next: 1,
                    id: 3,
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("the WAL's next batch id is 1")
                && msg.contains("(`position`) follows batch 3")
                && msg.contains("skipprd reset -p p"),
            "{msg}"
        );
        assert!(!err.is_retryable());
    }
    // Nothing was committed by the refused passes.
    assert!(wal_ids(&config).is_empty());

    // Unconfirmed: reported, nothing changed.
    let mut seen = Recorder::default();
    let err = reset(&config, pipeline, &ResetOptions::default(), &mut seen).unwrap_err();
    assert!(
        matches!(err, PipelineError::ResetNotConfirmed { .. }),
        "{err}"
    );
    assert!(err.is_config());
    let Some(Event::Reset { report, .. }) = seen.0.last() else {
        panic!("no reset event: {:?}", seen.0)
    };
    assert_eq!(
        report,
        &ResetReport {
            applied: false,
            position_batch: Some(3),
            acked: None,
            deadletters_acked: None,
            wal_batches: 0,
            wal_next: 1,
            landed: 0,
            floor: 3,
        }
    );
    assert!(sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).is_err());

    let confirmed = ResetOptions {
        confirm: true,
        ..ResetOptions::default()
    };
    let done = reset(&config, pipeline, &confirmed, &mut seen).unwrap();
    assert!(done.applied && done.floor == 3, "{done:?}");
    // The source is read again from its start, into batches numbered above the floor.
    let again = sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).unwrap();
    assert_eq!((again.rows, again.batches), (6, 3), "{again:?}");
    assert_eq!(wal_ids(&config), [4, 5, 6]);
    // And the next pass goes on from there, with nothing new.
    let next = sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).unwrap();
    assert_eq!((next.rows, next.batches), (0, 0), "{next:?}");

    // A reset of a healthy WAL empties it and numbers above its newest batch.
    let done = reset(&config, pipeline, &confirmed, &mut seen).unwrap();
    assert_eq!((done.wal_batches, done.floor), (3, 6), "{done:?}");
    assert!(!wal_dir(&config).exists());
    let again = sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).unwrap();
    assert_eq!(again.rows, 6);
    assert_eq!(wal_ids(&config), [7, 8, 9]);
}

#[test]
fn a_fresh_disk_wal_numbers_above_its_floor_and_an_existing_one_keeps_its_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = DiskWal::open_above(&dir.path().join("a"), WalOptions::default(), 41).unwrap();
    assert_eq!(wal.next_id().0, 42);
    assert!(wal.batches().is_empty() && wal.last_position().is_none());
    drop(wal);
    let (wal, _) = DiskWal::open_above(&dir.path().join("a"), WalOptions::default(), 7).unwrap();
    assert_eq!(wal.next_id().0, 42, "the segments' own numbering wins");
    drop(wal);
    let (wal, _) = DiskWal::open(&dir.path().join("a"), WalOptions::default()).unwrap();
    assert_eq!(wal.next_id().0, 42);
}
