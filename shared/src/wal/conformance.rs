//! One suite, run against every [`Wal`] (as `state::conformance` is against every store): the
//! disk WAL (`tests.rs`, under several segment sizes) and the S3 WAL on moto (`s3_tests.rs`).
//! What only one backend has (segment files and torn tails on disk, objects and marker
//! defects on S3) stays in that backend's tests.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Fields, Int64Type, Schema};

use super::*;

/// Where one WAL lives, empty at first; opened any number of times, each handle after the
/// previous one is dropped.
pub(crate) trait Place {
    /// Open the WAL (again), with what the open recovered.
    fn open(&self) -> (Box<dyn Wal + '_>, Recovery);
}

/// Runs every scenario, each on a fresh place from `fresh`.
pub(crate) fn run(fresh: &dyn Fn() -> Box<dyn Place>) {
    a_fresh_wal_is_empty_and_starts_at_batch_one(&*fresh());
    appended_batches_read_back_equal_across_namespaces_nested_columns_and_nulls(&*fresh());
    reopening_lists_the_same_batches_positions_and_next_id(&*fresh());
    invalid_batches_are_rejected_without_using_up_an_id(&*fresh());
    batch_ids_keep_increasing_across_reopen_and_reclaim(&*fresh());
    reclaim_hides_acknowledged_batches_and_never_runs_ahead(&*fresh());
    last_position_survives_reclaiming_everything_and_reopening(&*fresh());
}

/// `rows` rows of an int column (every third null) and a string column.
pub(crate) fn flat(rows: usize, seed: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, true),
        Field::new("s", DataType::Utf8, false),
    ]));
    let n: Int64Array = (0..rows)
        .map(|i| (i % 3 != 2).then_some(seed + i as i64))
        .collect();
    let s: StringArray = (0..rows).map(|i| Some(format!("v{seed}-{i}"))).collect();
    RecordBatch::try_new(schema, vec![Arc::new(n), Arc::new(s)]).unwrap()
}

/// A struct column (with a null struct and a null field) and a list column (with a null list,
/// an empty list and a null element), with schema metadata.
pub(crate) fn nested() -> RecordBatch {
    let fields = Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ]);
    let structs = StructArray::try_new(
        fields.clone(),
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None, Some(3), Some(4)])) as ArrayRef,
            Arc::new(StringArray::from(vec![
                Some("x"),
                Some("y"),
                None,
                Some("w"),
            ])),
        ],
        Some(NullBuffer::from(vec![true, true, true, false])),
    )
    .unwrap();
    let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
        Some(vec![Some(1), None, Some(3)]),
        None,
        Some(vec![]),
        Some(vec![Some(7)]),
    ]);
    let schema = Schema::new(vec![
        Field::new("st", DataType::Struct(fields), true),
        Field::new("li", lists.data_type().clone(), true),
    ])
    .with_metadata([("skipprd.origin".to_owned(), "test".to_owned())].into());
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(structs), Arc::new(lists)]).unwrap()
}

/// A part of `namespace` at `schema_version`.
pub(crate) fn part(namespace: &str, schema_version: u32, batch: RecordBatch) -> BatchPart {
    BatchPart {
        namespace: namespace.to_owned(),
        schema_version,
        batch,
    }
}

/// Two namespaces, the second at schema version 2.
fn two_parts(seed: i64) -> Vec<BatchPart> {
    vec![
        part("orders", 1, flat(5, seed)),
        part("refunds", 2, flat(2, seed + 100)),
    ]
}

fn ids(wal: &dyn Wal) -> Vec<u64> {
    wal.batches().iter().map(|b| b.id.0).collect()
}

/// What a listing says of each batch whatever holds it: its id and its parts.
fn listed(wal: &dyn Wal) -> Vec<(BatchId, Vec<PartMeta>)> {
    wal.batches()
        .iter()
        .map(|b| (b.id, b.parts.clone()))
        .collect()
}

fn a_fresh_wal_is_empty_and_starts_at_batch_one(place: &dyn Place) {
    let (wal, recovery) = place.open();
    assert_eq!(recovery, Recovery::default());
    assert!(wal.batches().is_empty());
    assert_eq!(wal.next_id(), BatchId(1));
    assert_eq!(wal.last_position(), None);
    assert!(matches!(
        wal.read(BatchId(1)),
        Err(WalError::NotFound { batch: BatchId(1) })
    ));
    drop(wal);
    // Opening created nothing a second open would see as a batch.
    let (wal, recovery) = place.open();
    assert_eq!(recovery, Recovery::default());
    assert_eq!(wal.next_id(), BatchId(1));
}

fn appended_batches_read_back_equal_across_namespaces_nested_columns_and_nulls(place: &dyn Place) {
    let (mut wal, recovery) = place.open();
    assert_eq!(recovery, Recovery::default());
    let parts = vec![
        part("orders", 3, flat(100, 7)),
        part("events", 1, nested()),
        part("empty", 2, flat(0, 0)),
    ];
    let meta = wal.append(b"file.jsonl:1234", &parts).unwrap();
    assert_eq!(meta.id, BatchId(1));
    assert_eq!(meta.position, b"file.jsonl:1234");
    assert_eq!(
        meta.parts,
        vec![
            PartMeta {
                namespace: "orders".into(),
                schema_version: 3,
                rows: 100
            },
            PartMeta {
                namespace: "events".into(),
                schema_version: 1,
                rows: 4
            },
            PartMeta {
                namespace: "empty".into(),
                schema_version: 2,
                rows: 0
            },
        ]
    );
    assert_eq!(wal.read(BatchId(1)).unwrap(), parts);
    assert_eq!(wal.batches(), std::slice::from_ref(&meta));
    assert_eq!(wal.last_position(), Some(&b"file.jsonl:1234"[..]));
    assert_eq!(wal.next_id(), BatchId(2));
    // The delivery thread's reader reads by listing entry.
    assert_eq!(wal.reader().read_committed(&meta).unwrap(), parts);
}

fn reopening_lists_the_same_batches_positions_and_next_id(place: &dyn Place) {
    let (mut wal, _) = place.open();
    for i in 0..5 {
        let meta = wal
            .append(format!("pos{i}").as_bytes(), &two_parts(i))
            .unwrap();
        assert_eq!(meta.id, BatchId(i as u64 + 1));
        assert_eq!(meta.parts[0].rows, 5);
    }
    let before = listed(&*wal);
    drop(wal);
    let (wal, recovery) = place.open();
    assert_eq!(recovery.batches, 5);
    assert_eq!(recovery.truncated_bytes, 0);
    assert!(recovery.warnings.is_empty(), "{:?}", recovery.warnings);
    assert_eq!(listed(&*wal), before);
    assert_eq!(ids(&*wal), [1, 2, 3, 4, 5]);
    assert_eq!(wal.last_position(), Some(&b"pos4"[..]));
    assert_eq!(wal.next_id(), BatchId(6));
    assert_eq!(wal.read(BatchId(3)).unwrap(), two_parts(2));
    let reader = wal.reader();
    assert_eq!(
        reader.read_committed(&wal.batches()[4]).unwrap(),
        two_parts(4)
    );
    assert_eq!(wal.batches()[1].parts[1].namespace, "refunds");
    assert_eq!(wal.batches()[1].parts[1].schema_version, 2);
}

fn invalid_batches_are_rejected_without_using_up_an_id(place: &dyn Place) {
    let (mut wal, _) = place.open();
    let no_parts = wal.append(b"p", &[]).unwrap_err();
    assert_eq!(
        no_parts.to_string(),
        "cannot append batch b1: a batch needs at least one part"
    );
    let empty_namespace = wal.append(b"p", &[part("", 1, flat(1, 0))]).unwrap_err();
    assert!(matches!(empty_namespace, WalError::InvalidBatch { .. }));
    let long = "n".repeat(MAX_NAMESPACE_BYTES + 1);
    assert!(wal.append(b"p", &[part(&long, 1, flat(1, 0))]).is_err());
    // Random-ish strings do not compress: 60k rows of 64 bytes is over the 1 MiB test limit.
    let big: StringArray = (0..60_000u64)
        .map(|i| Some(format!("{:x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).repeat(4)))
        .collect();
    let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
    let big = RecordBatch::try_new(schema, vec![Arc::new(big)]).unwrap();
    let too_large = wal.append(b"p", &[part("a", 1, big)]).unwrap_err();
    assert!(
        too_large.to_string().contains("over the limit"),
        "{too_large}"
    );
    assert!(wal.batches().is_empty());
    assert_eq!(
        wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap().id,
        BatchId(1)
    );
}

fn batch_ids_keep_increasing_across_reopen_and_reclaim(place: &dyn Place) {
    let (mut wal, _) = place.open();
    for _ in 0..3 {
        wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap();
    }
    drop(wal);
    let (mut wal, _) = place.open();
    assert_eq!(
        wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap().id,
        BatchId(4)
    );
    wal.reclaim_through(BatchId(4)).unwrap();
    assert_eq!(
        wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap().id,
        BatchId(5)
    );
    wal.reclaim_through(BatchId(5)).unwrap();
    drop(wal);
    let (mut wal, recovery) = place.open();
    assert_eq!(recovery.batches, 0);
    assert!(wal.batches().is_empty());
    assert_eq!(wal.next_id(), BatchId(6), "ids go on after a full reclaim");
    assert_eq!(
        wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap().id,
        BatchId(6)
    );
}

fn reclaim_hides_acknowledged_batches_and_never_runs_ahead(place: &dyn Place) {
    let (mut wal, _) = place.open();
    for seed in 1..=3 {
        wal.append(format!("pos {seed}").as_bytes(), &two_parts(seed))
            .unwrap();
    }
    let ahead = wal.reclaim_through(BatchId(4)).unwrap_err();
    assert!(
        matches!(
            ahead,
            WalError::ReclaimAhead {
                requested: BatchId(4),
                newest: BatchId(3)
            }
        ),
        "{ahead}"
    );
    assert_eq!(
        ahead.to_string(),
        "cannot reclaim through batch b4: the newest committed batch is b3"
    );
    assert_eq!(ids(&*wal), [1, 2, 3], "a refused reclaim changes nothing");

    wal.reclaim_through(BatchId(1)).unwrap();
    assert_eq!(ids(&*wal), [2, 3]);
    assert!(matches!(
        wal.read(BatchId(1)).unwrap_err(),
        WalError::NotFound { batch: BatchId(1) }
    ));
    assert_eq!(wal.read(BatchId(2)).unwrap(), two_parts(2));
    // Again through 1, or through 0: nothing to do.
    assert_eq!(wal.reclaim_through(BatchId(1)).unwrap(), 0);
    assert_eq!(wal.reclaim_through(BatchId(0)).unwrap(), 0);
    assert_eq!(ids(&*wal), [2, 3]);
    // Reclaimed batches stay hidden after a reopen.
    drop(wal);
    let (wal, recovery) = place.open();
    assert_eq!(recovery.batches, 2);
    assert_eq!(ids(&*wal), [2, 3]);
    assert_eq!(wal.last_position(), Some(&b"pos 3"[..]));
    assert_eq!(wal.read(BatchId(3)).unwrap(), two_parts(3));
}

fn last_position_survives_reclaiming_everything_and_reopening(place: &dyn Place) {
    let (mut wal, _) = place.open();
    wal.append(b"p1", &[part("a", 1, flat(1, 0))]).unwrap();
    wal.append(b"p2", &[part("a", 1, flat(1, 0))]).unwrap();
    wal.reclaim_through(BatchId(2)).unwrap();
    assert!(wal.batches().is_empty());
    assert_eq!(wal.last_position(), Some(&b"p2"[..]));
    assert_eq!(wal.next_id(), BatchId(3));
    drop(wal);
    let (mut wal, recovery) = place.open();
    assert_eq!(recovery.batches, 0);
    assert!(wal.batches().is_empty());
    assert_eq!(wal.last_position(), Some(&b"p2"[..]));
    assert_eq!(wal.next_id(), BatchId(3));
    // Reclaiming everything when nothing is left does nothing.
    assert_eq!(wal.reclaim_through(BatchId(2)).unwrap(), 0);
    let meta = wal.append(b"p3", &[part("a", 1, flat(1, 0))]).unwrap();
    assert_eq!(meta.id, BatchId(3));
    assert_eq!(wal.last_position(), Some(&b"p3"[..]));
}
