//! The S3 WAL against a real S3 API (the moto server `tests/run` starts): the conformance
//! suite every [`Wal`] passes, the objects appends and reclaims leave, and each defect
//! `docs/wal.md` lists, made by writing or deleting objects directly.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use super::conformance;
use super::s3::{S3Wal, S3WalConfig, S3WalView, WATERMARK_SORT_KEY, WatermarkSource};
use super::*;
use crate::aws::Aws;
use crate::aws::testing::{bucket, moto};
use crate::state::{
    Condition, Fence, LEASE_SORT_KEY, MemoryStore, StateError, StateKey, StateStore,
};

const PARTITION: &str = "t#w#p";
const PREFIX: &str = "wal/t/w/p/";

fn rows(n: usize, seed: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    let a: Int64Array = (0..n as i64).map(|i| seed * 1000 + i).collect();
    let s: StringArray = (0..n).map(|i| Some(format!("row {seed}-{i}"))).collect();
    RecordBatch::try_new(schema, vec![Arc::new(a), Arc::new(s)]).unwrap()
}

fn parts(seed: i64) -> Vec<BatchPart> {
    vec![
        BatchPart {
            namespace: "orders".into(),
            schema_version: 1,
            batch: rows(5, seed),
        },
        BatchPart {
            namespace: "refunds".into(),
            schema_version: 2,
            batch: rows(2, seed + 100),
        },
    ]
}

struct Fixture {
    aws: Aws,
    bucket: String,
    store: Arc<MemoryStore>,
    fence: Fence,
}

impl Fixture {
    fn new() -> Fixture {
        let aws = moto();
        let bucket = bucket(&aws, "wal");
        let store = Arc::new(MemoryStore::default());
        let token = store
            .put(
                &StateKey::new(PARTITION, LEASE_SORT_KEY),
                b"me",
                Condition::Absent,
                None,
            )
            .unwrap();
        Fixture {
            aws,
            bucket,
            store,
            fence: Fence { token },
        }
    }

    fn open_with(&self, recorded_through: u64) -> Result<(S3Wal<'_>, Recovery), WalError> {
        S3Wal::open(S3WalConfig {
            aws: self.aws.clone(),
            bucket: self.bucket.clone(),
            prefix: PREFIX.into(),
            store: &*self.store,
            partition: PARTITION.into(),
            fence: Some(self.fence),
            recorded_through,
            floor: 0,
        })
    }

    fn open(&self) -> (S3Wal<'_>, Recovery) {
        self.open_with(0).unwrap()
    }

    fn objects(&self) -> Vec<String> {
        let client = self.aws.s3(None);
        let out = self
            .aws
            .block_on(async {
                client
                    .list_objects_v2()
                    .bucket(&self.bucket)
                    .prefix(PREFIX)
                    .send()
                    .await
            })
            .unwrap();
        out.contents()
            .iter()
            .filter_map(|o| o.key())
            .map(|k| k.trim_start_matches(PREFIX).to_owned())
            .collect()
    }

    fn put(&self, name: &str, bytes: Vec<u8>) {
        let client = self.aws.s3(None);
        self.aws
            .block_on(async {
                client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(format!("{PREFIX}{name}"))
                    .body(bytes.into())
                    .send()
                    .await
            })
            .unwrap();
    }

    fn get(&self, name: &str) -> Vec<u8> {
        let client = self.aws.s3(None);
        self.aws.block_on(async {
            let out = client
                .get_object()
                .bucket(&self.bucket)
                .key(format!("{PREFIX}{name}"))
                .send()
                .await
                .unwrap();
            out.body.collect().await.unwrap().into_bytes().to_vec()
        })
    }

    fn delete(&self, name: &str) {
        let client = self.aws.s3(None);
        self.aws
            .block_on(async {
                client
                    .delete_object()
                    .bucket(&self.bucket)
                    .key(format!("{PREFIX}{name}"))
                    .send()
                    .await
            })
            .unwrap();
    }
}

impl Fixture {
    /// The WAL opened with batches 1..=n appended (positions `pos {n}`, rows `parts(n)`).
    fn with_batches(&self, n: i64) -> S3Wal<'_> {
        let (mut wal, _) = self.open();
        for seed in 1..=n {
            wal.append(format!("pos {seed}").as_bytes(), &parts(seed))
                .unwrap();
        }
        wal
    }

    /// A read-only view, reading the watermark when `watermark`.
    fn view(&self, watermark: bool) -> Result<S3WalView, WalError> {
        let source = watermark.then(|| WatermarkSource {
            store: Arc::clone(&self.store) as Arc<dyn StateStore>,
            partition: PARTITION.into(),
        });
        S3WalView::open(&self.aws, &self.bucket, PREFIX, source)
    }

    /// Write the watermark as a reclaim through `through` does (newest position `position`).
    fn set_watermark(&self, through: u64, position: &[u8]) {
        let mut value = through.to_le_bytes().to_vec();
        value.extend_from_slice(position);
        self.store
            .put(
                &StateKey::new(PARTITION, WATERMARK_SORT_KEY),
                &value,
                Condition::Any,
                None,
            )
            .unwrap();
    }
}

fn view_ids(view: &dyn WalView) -> Vec<u64> {
    view.batches().iter().map(|b| b.id.0).collect()
}

fn ids(wal: &dyn Wal) -> Vec<u64> {
    wal.batches().iter().map(|b| b.id.0).collect()
}

impl conformance::Place for Fixture {
    fn open(&self) -> (Box<dyn Wal + '_>, Recovery) {
        let (wal, recovery) = Fixture::open(self);
        (Box::new(wal), recovery)
    }
}

/// Each scenario on a fresh bucket.
#[test]
fn the_s3_wal_passes_the_conformance_suite() {
    conformance::run(&|| Box::new(Fixture::new()));
}

/// What the suite's scenarios do not check, because only S3 has it: a batch is a body and a
/// marker object.
#[test]
fn each_batch_is_a_body_and_a_marker_object() {
    let f = Fixture::new();
    let wal = f.with_batches(3);
    assert_eq!(ids(&wal), [1, 2, 3]);
    assert_eq!(
        f.objects(),
        [
            "b00000000000000000001.batch",
            "b00000000000000000001.commit",
            "b00000000000000000002.batch",
            "b00000000000000000002.commit",
            "b00000000000000000003.batch",
            "b00000000000000000003.commit",
        ]
    );
}

/// The suite checks which batches a reclaim hides and that ids go on after it; this, which
/// objects it deletes (the marker and body of each batch) and how many it reports.
#[test]
fn reclaim_deletes_the_marker_and_body_of_each_batch() {
    let f = Fixture::new();
    let mut wal = f.with_batches(3);
    assert_eq!(wal.reclaim_through(BatchId(2)).unwrap(), 4);
    assert_eq!(ids(&wal), [3]);
    assert_eq!(
        f.objects(),
        [
            "b00000000000000000003.batch",
            "b00000000000000000003.commit"
        ]
    );
    assert_eq!(wal.reclaim_through(BatchId(3)).unwrap(), 2);
    assert!(f.objects().is_empty());
}

#[test]
fn an_interrupted_reclaim_is_finished_on_open() {
    let f = Fixture::new();
    drop(f.with_batches(3));
    // The watermark was written, then the process died before deleting anything.
    f.set_watermark(2, b"pos 3");
    let (wal, recovery) = f.open();
    assert_eq!(ids(&wal), [3]);
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert!(recovery.warnings[0].contains("interrupted reclaim"));
    assert_eq!(
        f.objects(),
        [
            "b00000000000000000003.batch",
            "b00000000000000000003.commit"
        ]
    );
}

/// docs/wal.md: a body without its marker is a torn append. Not committed; discarded; the id
/// is used again.
#[test]
fn a_body_without_marker_is_discarded_and_its_id_reused() {
    let f = Fixture::new();
    let (mut wal, _) = f.open();
    wal.append(b"pos 1", &parts(1)).unwrap();
    wal.append(b"pos 2", &parts(2)).unwrap();
    drop(wal);
    f.delete("b00000000000000000002.commit");
    let (mut wal, recovery) = f.open_with(1).unwrap();
    assert_eq!(ids(&wal), [1]);
    assert_eq!(wal.last_position(), Some(&b"pos 1"[..]));
    assert!(
        recovery.warnings.iter().any(|w| w.contains("torn append")),
        "{:?}",
        recovery.warnings
    );
    assert_eq!(
        f.objects(),
        [
            "b00000000000000000001.batch",
            "b00000000000000000001.commit"
        ]
    );
    let meta = wal.append(b"pos 2 again", &parts(22)).unwrap();
    assert_eq!(meta.id, BatchId(2));
    assert_eq!(wal.read(BatchId(2)).unwrap(), parts(22));
}

/// docs/wal.md: a marker that does not match its body (a writer whose lease was taken over
/// wrote one of the two) is not a commit: discarded while the source never moved past it,
/// corruption once it did.
#[test]
fn a_marker_that_does_not_match_its_body_is_torn_or_corrupt_by_the_recorded_position() {
    let f = Fixture::new();
    let (mut wal, _) = f.open();
    wal.append(b"pos 1", &parts(1)).unwrap();
    wal.append(b"pos 2", &parts(2)).unwrap();
    drop(wal);
    // Another writer's body of the same size, different content: swap the body.
    let body = f.get("b00000000000000000002.batch");
    let mut other = body.clone();
    let last = other.len() - 1;
    other[last] ^= 0x01;
    f.put("b00000000000000000002.batch", other);

    let err = f.open_with(2).unwrap_err();
    assert!(matches!(err, WalError::Corrupt { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("b00000000000000000002.batch") && msg.contains("already recorded past it"),
        "{msg}"
    );
    assert!(!err.is_retryable());

    let (wal, recovery) = f.open_with(1).unwrap();
    assert_eq!(ids(&wal), [1]);
    assert!(
        recovery.warnings.iter().any(|w| w.contains("b2")),
        "{:?}",
        recovery.warnings
    );
    assert_eq!(f.objects().len(), 2);
}

/// docs/wal.md: a marker without its body cannot come from our own reclaim (markers go
/// first); it is a torn append above the recorded position, corruption at or below it.
#[test]
fn a_marker_without_body_is_torn_or_corrupt_by_the_recorded_position() {
    let f = Fixture::new();
    let (mut wal, _) = f.open();
    wal.append(b"pos 1", &parts(1)).unwrap();
    wal.append(b"pos 2", &parts(2)).unwrap();
    drop(wal);
    f.delete("b00000000000000000002.batch");
    let err = f.open_with(2).unwrap_err();
    assert!(matches!(err, WalError::Corrupt { .. }), "{err}");
    let (mut wal, recovery) = f.open_with(1).unwrap();
    assert_eq!(ids(&wal), [1]);
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert_eq!(wal.append(b"pos 2", &parts(2)).unwrap().id, BatchId(2));
}

#[test]
fn a_missing_batch_in_the_middle_is_a_gap() {
    let f = Fixture::new();
    let wal = f.with_batches(3);
    drop(wal);
    f.delete("b00000000000000000002.batch");
    f.delete("b00000000000000000002.commit");
    let err = f.open_with(3).unwrap_err();
    assert!(
        matches!(
            err,
            WalError::SegmentGap {
                expected: BatchId(2),
                found: BatchId(3),
                ..
            }
        ),
        "{err}"
    );
}

/// A writer whose lease was taken over left a body at the next id after this writer opened:
/// the append proves it still holds the lease (a fenced write), replaces the body, commits.
/// With a stale fence it refuses instead.
#[test]
fn an_orphaned_body_at_the_next_id_is_replaced_only_under_the_lease() {
    let f = Fixture::new();
    let (mut wal, _) = f.open();
    wal.append(b"pos 1", &parts(1)).unwrap();
    f.put(
        "b00000000000000000002.batch",
        b"left by an older writer".to_vec(),
    );
    let meta = wal.append(b"pos 2", &parts(2)).unwrap();
    assert_eq!(meta.id, BatchId(2));
    assert_eq!(wal.read(BatchId(2)).unwrap(), parts(2));

    // The lease moves on; this handle's fence is stale.
    f.store
        .put(
            &StateKey::new(PARTITION, LEASE_SORT_KEY),
            b"new holder",
            Condition::Any,
            None,
        )
        .unwrap();
    f.put(
        "b00000000000000000003.batch",
        b"left by an older writer".to_vec(),
    );
    let err = wal.append(b"pos 3", &parts(3)).unwrap_err();
    assert!(
        matches!(
            err,
            WalError::State {
                source: StateError::Fenced { .. }
            }
        ),
        "{err}"
    );
    assert_eq!(
        f.get("b00000000000000000003.batch"),
        b"left by an older writer"
    );
}

/// Two writers at one id: the marker is written with `If-None-Match: *`, so the second
/// writer's commit fails and its batch is not committed.
#[test]
fn a_marker_written_first_by_another_writer_fails_the_commit() {
    let f = Fixture::new();
    let (mut wal, _) = f.open();
    wal.append(b"pos 1", &parts(1)).unwrap();
    f.put("b00000000000000000002.commit", b"{}".to_vec());
    let err = wal.append(b"pos 2", &parts(2)).unwrap_err();
    assert!(matches!(err, WalError::CommitRace { .. }), "{err}");
    assert!(err.is_retryable());
    assert_eq!(ids(&wal), [1]);
}

/// S3 enforces `If-None-Match: *`: a batch id can be written once.
#[test]
fn s3_refuses_a_second_put_of_the_same_body() {
    let f = Fixture::new();
    let client = f.aws.s3(None);
    let put = |body: &'static [u8]| {
        f.aws
            .block_on(async {
                client
                    .put_object()
                    .bucket(&f.bucket)
                    .key("x")
                    .if_none_match("*")
                    .body(body.to_vec().into())
                    .send()
                    .await
            })
            .map_err(|e| crate::aws::SdkFailure::from_sdk(&e))
    };
    put(b"first").unwrap();
    let failure = put(b"second").unwrap_err();
    assert_eq!(failure.status, Some(412), "{failure}");
    assert!(!failure.retryable);
}

#[test]
fn a_view_lists_and_reads_what_the_writer_committed_and_refreshes_cheaply() {
    let f = Fixture::new();
    let mut wal = f.with_batches(3);
    for watermark in [false, true] {
        let view = f.view(watermark).unwrap();
        assert_eq!(view_ids(&view), [1, 2, 3], "watermark read: {watermark}");
        assert_eq!(view.read(BatchId(2)).unwrap(), parts(2));
        let schemas = view.read_schemas(BatchId(3)).unwrap();
        assert_eq!(
            schemas
                .iter()
                .map(|(ns, v, schema)| (ns.as_str(), *v, schema.fields().len()))
                .collect::<Vec<_>>(),
            [("orders", 1, 2), ("refunds", 2, 2)]
        );
        assert!(matches!(
            view.read(BatchId(4)),
            Err(WalError::NotFound { batch: BatchId(4) })
        ));
    }
    let view = f.view(true).unwrap();
    wal.append(b"pos 4", &parts(4)).unwrap();
    wal.reclaim_through(BatchId(1)).unwrap();
    let before = f.aws.requests();
    let refreshed = view.refreshed().unwrap();
    assert_eq!(view_ids(&*refreshed), [2, 3, 4]);
    let s3 =
        f.aws.requests().get("s3").copied().unwrap_or(0) - before.get("s3").copied().unwrap_or(0);
    assert_eq!(s3, 2, "a refresh is one LIST and one GET of the new marker");
    // The old snapshot still lists the reclaimed batch; reading it says what is missing.
    let error = view.read(BatchId(1)).unwrap_err().to_string();
    assert!(error.contains("b00000000000000000001.batch"), "{error}");
    assert_eq!(refreshed.read(BatchId(4)).unwrap(), parts(4));
}

#[test]
fn a_view_hides_an_append_in_flight_and_changes_nothing() {
    let f = Fixture::new();
    let mut wal = f.with_batches(2);
    let body = f.get("b00000000000000000002.batch");
    // Batch 3's body is written, its marker not yet.
    f.put("b00000000000000000003.batch", body);
    let objects = f.objects();
    for watermark in [false, true] {
        assert_eq!(view_ids(&f.view(watermark).unwrap()), [1, 2]);
    }
    assert_eq!(f.objects(), objects, "a view deletes nothing");
    // A marker without its body at the top is hidden too (the writer's recovery decides).
    f.delete("b00000000000000000003.batch");
    wal.append(b"pos 3", &parts(3)).unwrap();
    f.delete("b00000000000000000003.batch");
    assert_eq!(view_ids(&f.view(true).unwrap()), [1, 2]);
    assert!(
        f.objects()
            .contains(&"b00000000000000000003.commit".to_owned())
    );
}

#[test]
fn a_view_skips_reclaim_leftovers_with_or_without_the_watermark() {
    let f = Fixture::new();
    let wal = f.with_batches(4);
    drop(wal);
    // A reclaim through 2 wrote its watermark and deleted the markers, then died.
    f.set_watermark(2, b"pos 4");
    f.delete("b00000000000000000001.commit");
    f.delete("b00000000000000000002.commit");
    assert_eq!(view_ids(&f.view(true).unwrap()), [3, 4]);
    assert_eq!(view_ids(&f.view(false).unwrap()), [3, 4]);
    // Died before deleting anything: only the watermark knows.
    let g = Fixture::new();
    let (mut wal, _) = g.open();
    for seed in 1..=3 {
        wal.append(format!("pos {seed}").as_bytes(), &parts(seed))
            .unwrap();
    }
    g.set_watermark(2, b"pos 3");
    assert_eq!(view_ids(&g.view(true).unwrap()), [3]);
    assert_eq!(view_ids(&g.view(false).unwrap()), [1, 2, 3]);
}

#[test]
fn a_view_reports_a_hole_or_a_committed_batch_after_an_incomplete_one() {
    let f = Fixture::new();
    f.with_batches(4);
    f.delete("b00000000000000000002.commit");
    let error = f.view(true).unwrap_err();
    assert!(matches!(error, WalError::Corrupt { .. }), "{error}");
    assert!(error.to_string().contains("b2 is incomplete"), "{error}");
    f.delete("b00000000000000000002.batch");
    let error = f.view(true).unwrap_err();
    assert!(
        matches!(
            error,
            WalError::SegmentGap {
                expected: BatchId(2),
                found: BatchId(3),
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_view_checks_a_body_against_its_marker() {
    let f = Fixture::new();
    f.with_batches(2);
    let view = f.view(true).unwrap();
    // A valid body of batch 1 with the same length but another position (as a writer that
    // lost its lease could have left): the record checks out, the marker's CRC32C does not.
    let g = Fixture::new();
    let (mut other, _) = g.open();
    other.append(b"pos 9", &parts(1)).unwrap();
    let body = g.get("b00000000000000000001.batch");
    assert_eq!(body.len(), f.get("b00000000000000000001.batch").len());
    f.delete("b00000000000000000001.batch");
    f.put("b00000000000000000001.batch", body);
    let error = view.read(BatchId(1)).unwrap_err().to_string();
    assert!(error.contains("CRC32C"), "{error}");
    assert!(error.contains("b00000000000000000001.batch"), "{error}");
}

/// docs/wal.md, Recovery: deleting is fenced. A writer whose lease was taken over opens the
/// WAL while the new holder's append of batch 2 is in flight (its body without a marker yet):
/// recovery refuses with `Fenced` and the body stays, where it once deleted it as torn.
#[test]
fn recovery_by_a_writer_whose_lease_was_taken_over_deletes_nothing() {
    let f = Fixture::new();
    let (mut wal, _) = f.open();
    wal.append(b"pos 1", &parts(1)).unwrap();
    wal.append(b"pos 2", &parts(2)).unwrap();
    drop(wal);
    f.delete("b00000000000000000002.commit");
    f.store
        .put(
            &StateKey::new(PARTITION, LEASE_SORT_KEY),
            b"new holder",
            Condition::Any,
            None,
        )
        .unwrap();
    let err = f.open_with(1).unwrap_err();
    assert!(
        matches!(
            err,
            WalError::State {
                source: StateError::Fenced { .. }
            }
        ),
        "{err}"
    );
    assert_eq!(
        f.objects(),
        [
            "b00000000000000000001.batch",
            "b00000000000000000001.commit",
            "b00000000000000000002.batch"
        ]
    );
}
