//! Step 8 of the commit protocol on the memory store and the memory sink: a crash at each of
//! its points (data written, table committed, delivered, acknowledged, reclaimed, and the
//! WAL's reclaim steps) is repaired by the next delivery, with every row landed once; a
//! replaced writer commits nothing; a refused commit is retried by the next delivery.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};

use super::Delivery;
use crate::failpoint;
use crate::pipeline::PipelineError;
use crate::pipeline::sync::SyncReport;
use crate::schema::PipelineSchema;
use crate::sinks::memory::MemorySink;
use crate::sinks::{Sink, SinkError};
use crate::state::{Condition, Fence, MemoryStore, StateKey, StateStore, keys};
use crate::wal::{BatchPart, DiskWal, WalError, WalOptions};

const PARTITION: &str = "t#w#p";

fn part(namespace: &str, ids: std::ops::Range<i64>) -> BatchPart {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(ids))]).unwrap();
    BatchPart {
        namespace: namespace.to_owned(),
        schema_version: 1,
        batch,
    }
}

/// A WAL on disk with small segments (so reclaims delete files), a memory store and sink.
struct Fixture {
    dir: tempfile::TempDir,
    store: MemoryStore,
    sink: MemorySink,
    /// Ids expected per table.
    expected: BTreeMap<String, Vec<i64>>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            store: MemoryStore::default(),
            sink: MemorySink::new(),
            expected: BTreeMap::new(),
        }
    }

    fn wal(&self) -> DiskWal {
        let options = WalOptions {
            segment_target_bytes: 1,
            ..WalOptions::default()
        };
        DiskWal::open(&self.dir.path().join("wal"), options)
            .unwrap()
            .0
    }

    /// Commit `n` batches to the WAL: rows for `events` and `_1a2b3c4d` (a data namespace
    /// that starts with `_`), and a bookkeeping part that must never become a table.
    fn commit_batches(&mut self, wal: &mut DiskWal, n: i64) {
        let start = self.expected.get("events").map_or(0, |v| v.len() as i64);
        for i in 0..n {
            let from = start + i * 10;
            let parts = [
                part("events", from..from + 10),
                part("_1a2b3c4d", from..from + 2),
                part(crate::wal::REPLAYED_PART, 0..0),
            ];
            wal.append(format!("pos{}", from + 10).as_bytes(), &parts)
                .unwrap();
            self.expected
                .entry("events".into())
                .or_default()
                .extend(from..from + 10);
            self.expected
                .entry("_1a2b3c4d".into())
                .or_default()
                .extend(from..from + 2);
        }
    }

    fn deliver(&self, wal: &mut DiskWal, fence: Option<Fence>) -> Result<u64, PipelineError> {
        let mut delivery = Delivery::start(
            Some(&self.sink as &dyn Sink),
            None,
            &self.store,
            PARTITION,
            fence,
            "p",
            u64::MAX,
        )?
        .unwrap();
        let mut report = SyncReport::default();
        delivery.deliver(wal, &PipelineSchema::empty("p", "w"), &mut report)?;
        Ok(report.delivered)
    }

    fn ack(&self) -> u64 {
        let item = self
            .store
            .get(&StateKey::new(PARTITION, keys::ACK))
            .unwrap();
        item.map_or(0, |i| u64::from_le_bytes(i.value.try_into().unwrap()))
    }

    /// Every expected row is in its table exactly once, and nothing else is.
    fn assert_landed_once(&self) {
        assert_eq!(
            self.sink.namespaces(),
            self.expected.keys().cloned().collect::<Vec<_>>(),
            "the tables are the data namespaces, no bookkeeping part"
        );
        for (ns, expected) in &self.expected {
            let table = self.sink.table(ns).unwrap();
            let mut ids: Vec<i64> = table
                .batches
                .iter()
                .flat_map(|(_, b)| {
                    let col = b.column(0).as_primitive::<Int64Type>();
                    (0..col.len()).map(|i| col.value(i)).collect::<Vec<_>>()
                })
                .collect();
            ids.sort_unstable();
            assert_eq!(&ids, expected, "table {ns}: every row once");
        }
    }
}

fn fired(result: Result<u64, PipelineError>, name: &str) {
    let err = result.expect_err("the failpoint fires");
    let is_failpoint = match &err {
        PipelineError::Wal {
            source: WalError::Failpoint { name: n },
            ..
        } => *n == name,
        PipelineError::Sink { source, .. } => {
            matches!(source.as_ref(), SinkError::Failpoint { name: n } if *n == name)
        }
        _ => false,
    };
    assert!(is_failpoint, "{name}: unexpected error {err}");
}

/// Every crash point of a delivery, each on a WAL and tables that already hold delivered
/// batches: the delivery stops there (as the process would), the WAL is reopened (as the next
/// pass does), and the next delivery lands every row exactly once, acknowledges the newest
/// batch and reclaims the WAL.
#[test]
fn a_crash_at_every_delivery_step_is_repaired_by_the_next_delivery_exactly_once() {
    let points = [
        failpoint::sink::AFTER_DATA_FILES,
        failpoint::sink::AFTER_TABLE_COMMIT,
        failpoint::sync::AFTER_DELIVER,
        failpoint::sync::AFTER_ACK,
        failpoint::wal::RECLAIM_BEFORE_DELETE,
        failpoint::wal::RECLAIM_BETWEEN_DELETES,
        failpoint::sync::AFTER_RECLAIM,
    ];
    for name in points {
        let mut fx = Fixture::new();
        let mut wal = fx.wal();
        fx.commit_batches(&mut wal, 3);
        assert_eq!(fx.deliver(&mut wal, None).unwrap(), 3);
        fx.commit_batches(&mut wal, 4);
        let commits_before = fx.sink.table("events").unwrap().commits;

        failpoint::arm(name, 0);
        let crashed = fx.deliver(&mut wal, None);
        failpoint::disarm();
        fired(crashed, name);
        drop(wal);

        let mut wal = fx.wal();
        fx.deliver(&mut wal, None).unwrap();
        fx.assert_landed_once();
        assert_eq!(fx.ack(), 7, "{name}: the newest batch is acknowledged");
        assert!(wal.batches().is_empty(), "{name}: the WAL is reclaimed");
        let events = fx.sink.table("events").unwrap();
        assert_eq!(events.landed, 7, "{name}");
        assert!(
            events.commits <= commits_before + 1,
            "{name}: the batches were committed once ({} commits after {commits_before})",
            events.commits
        );

        // Nothing is outstanding: another delivery writes nothing.
        let commits = fx.sink.table("events").unwrap().commits;
        assert_eq!(fx.deliver(&mut wal, None).unwrap(), 0, "{name}");
        assert_eq!(fx.sink.table("events").unwrap().commits, commits, "{name}");
    }
}

/// A crash after the first of two tables committed: the next delivery writes only the other
/// table's rows (the committed one skips the batches it holds).
#[test]
fn a_delivery_that_stopped_between_two_table_commits_finishes_the_second_only() {
    let mut fx = Fixture::new();
    let mut wal = fx.wal();
    fx.commit_batches(&mut wal, 2);
    failpoint::arm(failpoint::sink::AFTER_TABLE_COMMIT, 0);
    let crashed = fx.deliver(&mut wal, None);
    failpoint::disarm();
    fired(crashed, failpoint::sink::AFTER_TABLE_COMMIT);
    // Tables commit in namespace order: `_1a2b3c4d` first.
    assert_eq!(fx.sink.table("_1a2b3c4d").unwrap().landed, 2);
    assert_eq!(fx.sink.table("events").map_or(0, |t| t.landed), 0);
    assert_eq!(
        fx.ack(),
        0,
        "nothing is acknowledged before every table landed"
    );

    let mut wal = fx.wal();
    fx.deliver(&mut wal, None).unwrap();
    fx.assert_landed_once();
    assert_eq!(fx.sink.table("_1a2b3c4d").unwrap().commits, 1);
    assert_eq!(fx.sink.table("events").unwrap().commits, 1);
}

/// A writer whose lease was taken over publishes nothing: the commit check refuses before the
/// first table commit, no acknowledgement is written, and the WAL keeps the batches for the
/// new holder, which lands them once.
#[test]
fn a_replaced_writer_commits_nothing_and_the_new_holder_lands_every_row_once() {
    let mut fx = Fixture::new();
    let lease = StateKey::new(PARTITION, keys::LEASE);
    let old = Fence {
        token: fx.store.put(&lease, b"a", Condition::Any, None).unwrap(),
    };
    let new = Fence {
        token: fx.store.put(&lease, b"b", Condition::Any, None).unwrap(),
    };
    let mut wal = fx.wal();
    fx.commit_batches(&mut wal, 3);
    let err = fx.deliver(&mut wal, Some(old)).unwrap_err();
    assert!(
        matches!(&err, PipelineError::Sink { source, .. } if matches!(source.as_ref(), SinkError::LeaseLost { .. })),
        "{err}"
    );
    assert!(
        fx.sink
            .namespaces()
            .iter()
            .all(|ns| fx.sink.table(ns).unwrap().commits == 0)
    );
    assert_eq!(fx.ack(), 0);
    assert_eq!(wal.batches().len(), 3, "the WAL keeps the batches");

    fx.deliver(&mut wal, Some(new)).unwrap();
    fx.assert_landed_once();
    assert_eq!(fx.ack(), 3);
}

/// A commit the destination refuses (down, throttled) fails the delivery as retryable with
/// nothing acknowledged; the next delivery lands every row once.
#[test]
fn a_refused_commit_is_retryable_and_the_next_delivery_lands_every_row_once() {
    let mut fx = Fixture::new();
    let mut wal = fx.wal();
    fx.commit_batches(&mut wal, 2);
    fx.sink.fail_next_commit("events");
    let err = fx.deliver(&mut wal, None).unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(fx.ack(), 0);
    fx.deliver(&mut wal, None).unwrap();
    fx.assert_landed_once();
    assert_eq!(fx.ack(), 2);
}

/// A sink that loses rows: it hands the memory sink each data part without its last row, and
/// reports what it wrote honestly.
#[derive(Debug)]
struct DroppingSink(MemorySink);

impl Sink for DroppingSink {
    fn location(&self) -> String {
        "dropping".to_owned()
    }

    fn prepare(&self, namespaces: &[&str], schema: &PipelineSchema) -> Result<(), SinkError> {
        self.0.prepare(namespaces, schema)
    }

    fn landed(&self, namespace: &str) -> Result<u64, SinkError> {
        self.0.landed(namespace)
    }

    fn landed_any(&self) -> Result<u64, SinkError> {
        self.0.landed_any()
    }

    fn write(
        &self,
        batches: &[crate::wal::BatchMeta],
        read: crate::sinks::ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: crate::sinks::CommitCheck<'_>,
    ) -> Result<crate::sinks::Delivered, SinkError> {
        let mut lossy = |id| {
            read(id).map(|parts| {
                parts
                    .into_iter()
                    .map(|mut p| {
                        if p.kind().is_data() && p.batch.num_rows() > 0 {
                            p.batch = p.batch.slice(0, p.batch.num_rows() - 1);
                        }
                        p
                    })
                    .collect()
            })
        };
        self.0.write(batches, &mut lossy, schema, before_commit)
    }
}

/// A delivery that does not account for every data row is refused: an error naming the
/// batches and the counts, nothing acknowledged, the WAL keeps the batches.
#[test]
fn a_sink_that_drops_rows_gets_nothing_acknowledged() {
    let mut fx = Fixture::new();
    let mut wal = fx.wal();
    fx.commit_batches(&mut wal, 3);
    let sink = DroppingSink(MemorySink::new());
    let mut delivery = Delivery::start(
        Some(&sink as &dyn Sink),
        None,
        &fx.store,
        PARTITION,
        None,
        "p",
        u64::MAX,
    )
    .unwrap()
    .unwrap();
    let err = delivery
        .deliver(
            &mut wal,
            &PipelineSchema::empty("p", "w"),
            &mut SyncReport::default(),
        )
        .unwrap_err();
    let PipelineError::Sink { source, .. } = &err else {
        panic!("{err}");
    };
    let SinkError::RowsUnaccounted {
        first,
        last,
        expected,
        written,
        skipped,
        ..
    } = source.as_ref()
    else {
        panic!("{err}");
    };
    // 3 batches of 10 + 2 data rows; one row of each of the 6 data parts lost.
    assert_eq!(
        (first.0, last.0, *expected, *written, *skipped),
        (1, 3, 36, 30, 0)
    );
    let message = err.to_string();
    assert!(
        message.contains("b1") && message.contains("b3"),
        "{message}"
    );
    assert!(
        message.contains("36") && message.contains("30"),
        "{message}"
    );
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(fx.ack(), 0, "nothing is acknowledged");
    assert_eq!(wal.batches().len(), 3, "the WAL keeps the batches");
}

/// `WAL_MAX_DELAY_SECONDS`: in the read loop, batches far below the byte threshold are
/// handed to the delivery thread once the delay passed since the last handover; without it
/// they wait for the threshold (or the end of the pass).
#[test]
fn the_max_delay_hands_small_batches_over_before_the_byte_threshold() {
    use crate::wal::Wal as _;
    for (max_delay, delivered) in [(None, 0), (Some(std::time::Duration::ZERO), 2)] {
        let mut fx = Fixture::new();
        let mut wal = fx.wal();
        fx.commit_batches(&mut wal, 2);
        let reader = wal.reader();
        let mut delivery = Delivery::start(
            Some(&fx.sink as &dyn Sink),
            None,
            &fx.store,
            PARTITION,
            None,
            "p",
            u64::MAX,
        )
        .unwrap()
        .unwrap()
        .with_max_delay(max_delay);
        let schema = PipelineSchema::empty("p", "w");
        let mut report = SyncReport::default();
        std::thread::scope(|scope| {
            delivery.start_worker(scope, reader);
            delivery.poll(&mut wal, &schema, &mut report).unwrap();
            delivery.wait_for_worker(&mut wal, &mut report).unwrap();
            delivery.stop_worker();
        });
        assert_eq!(report.delivered, delivered, "max delay {max_delay:?}");
        assert_eq!(fx.ack(), delivered);
        if delivered > 0 {
            fx.assert_landed_once();
        }
    }
}
