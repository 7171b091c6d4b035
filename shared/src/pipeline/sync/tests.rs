use super::*;
use crate::pipeline::events::Recorder;
use crate::pipeline::testing::six_records_project;

#[test]
fn a_pass_stops_reading_at_its_deadline_and_the_next_one_continues() {
    let (_dir, config) = six_records_project();
    let pipeline = config.pipeline(None).unwrap();
    let mut events = Recorder::default();
    let options = SyncOptions {
        deadline: Some(Instant::now()),
        ..SyncOptions::default()
    };
    let first = sync_pass(&config, pipeline, &options, &mut events).unwrap();
    assert_eq!((first.rows, first.batches), (2, 1), "{first:?}");
    assert!(first.stopped && first.stopped_for_deadline, "{first:?}");
    let Some(Event::SyncComplete {
        pipeline: p,
        report,
    }) = events.0.last()
    else {
        panic!("no sync_complete: {:?}", events.0);
    };
    assert_eq!((p.as_str(), report), ("p", &first));
    let json = serde_json::to_value(events.0.last().unwrap()).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "event",
            "pipeline",
            "rows",
            "total_rows",
            "namespaces_synced",
            "elapsed_ms",
            "batches",
            "bytes",
            "deadletters",
            "delivered",
            "pending",
            "files_failed",
            "seconds",
            "stopped",
            "stopped_for_deadline"
        ],
        "{json}"
    );
    assert_eq!(json["event"], "sync_complete");
    assert_eq!(json["stopped_for_deadline"], true);

    let rest = sync_pass(&config, pipeline, &SyncOptions::default(), &mut events).unwrap();
    assert_eq!((rest.rows, rest.batches), (4, 2), "{rest:?}");
    assert!(!rest.stopped && !rest.stopped_for_deadline, "{rest:?}");
}

/// Regression: the guard took `1 - available / total` for the used share, which counts
/// the blocks reserved for root (and any gap between size and used + available) as used.
/// On a 252 GB disk with 70 GB used and 22 GB available (`df`: 77%) it read 91% and
/// paused every pass.
#[test]
fn the_disk_guard_reads_usage_as_df_does() {
    const G: u64 = 1 << 30;
    let share = disk_used_fraction(252 * G, 182 * G, 22 * G);
    assert!((share - 70.0 / 92.0).abs() < 1e-9, "{share}");
    assert!(share < 0.8);
    assert!(disk_used_fraction(100 * G, 5 * G, 0) > 0.99);
    assert_eq!(disk_used_fraction(0, 0, 0), 0.0);
}
