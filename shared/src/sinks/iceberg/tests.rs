//! The Iceberg sink against real files: a WAL on disk, tables in a temporary warehouse, read
//! back with iceberg-rust's own scan.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow::datatypes::{DataType, Field as ArrowField, Fields, Int64Type, Schema};
use futures::TryStreamExt;

use iceberg::Catalog;
use iceberg::spec::{PrimitiveType, Type};

use super::catalog::{Current, HadoopPointer, Pointer, TableRef, VERSION_HINT};
use super::*;
use crate::schema::{Field, FieldType, NamespaceSchema};
use crate::wal::{BatchPart, DiskWal, WalOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn pipeline_schema(namespaces: &[(&str, Vec<Field>)]) -> PipelineSchema {
    let mut schema = PipelineSchema::empty("p", "w");
    for (name, fields) in namespaces {
        schema.namespaces.insert(
            (*name).to_owned(),
            NamespaceSchema {
                fields: fields.clone(),
                records: 0,
            },
        );
    }
    schema
}

fn ids_batch(ids: std::ops::Range<i32>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![ArrowField::new(
        "id",
        DataType::Int32,
        true,
    )]));
    RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from_iter_values(ids))]).unwrap()
}

fn part(namespace: &str, batch: RecordBatch) -> BatchPart {
    BatchPart {
        namespace: namespace.to_owned(),
        schema_version: 1,
        batch,
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    wal: DiskWal,
    sink: IcebergSink,
}

fn fixture() -> Result<Fixture, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (wal, _) = DiskWal::open(
        &dir.path().join("wal"),
        WalOptions {
            fsync: false,
            ..WalOptions::default()
        },
    )?;
    let sink = IcebergSink::hadoop(dir.path().join("lake"), "ns", "t#w#p".to_owned())?;
    Ok(Fixture {
        _dir: dir,
        wal,
        sink,
    })
}

impl Fixture {
    fn deliver_all(&self, schema: &PipelineSchema) -> Result<Delivered, SinkError> {
        let batches = self.wal.batches().to_vec();
        self.sink
            .deliver(&batches, &mut |id| self.wal.read(id), schema)
    }

    fn table(&self, name: &str) -> Result<Table, iceberg::Error> {
        let ident = self.sink.table_ident(name);
        self.sink
            .block_on(async { self.sink.catalog().load_table(&ident).await })
    }

    /// Every row of the table's current snapshot, read file by file with the Parquet reader
    /// and matched to the table schema by name. (iceberg-rust 0.10's own reader fails on files
    /// written before a struct gained a field.)
    fn rows(&self, name: &str) -> Result<Vec<RecordBatch>, Box<dyn std::error::Error>> {
        let table = self.table(name)?;
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(
            table.metadata().current_schema(),
        )?);
        let files: Vec<String> = self.sink.block_on(async {
            table
                .scan()
                .build()?
                .plan_files()
                .await?
                .map_ok(|task| task.data_file_path().to_owned())
                .try_collect()
                .await
        })?;
        let mut out = Vec::new();
        for file in files {
            let file = std::fs::File::open(storage::local_path(&file))?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?
                    .build()?;
            for batch in reader {
                out.push(crate::schema::adapt::adapt_batch(&batch?, &target)?);
            }
        }
        Ok(out)
    }

    fn count(&self, name: &str) -> Result<usize, Box<dyn std::error::Error>> {
        Ok(self.rows(name)?.iter().map(RecordBatch::num_rows).sum())
    }
}

#[test]
fn batches_land_once_even_when_delivered_again() -> TestResult {
    let mut f = fixture()?;
    let schema = pipeline_schema(&[
        ("a", vec![Field::new("id", FieldType::Int)]),
        ("b", vec![Field::new("id", FieldType::Int)]),
    ]);
    f.wal.append(
        b"p1",
        &[part("a", ids_batch(0..10)), part("b", ids_batch(0..3))],
    )?;
    f.wal.append(b"p2", &[part("a", ids_batch(10..15))])?;
    let first = f.deliver_all(&schema)?;
    assert_eq!(first.rows, 18);
    assert_eq!(first.commits, 2);
    assert_eq!(first.through, Some(BatchId(2)));
    assert_eq!((f.count("a")?, f.count("b")?), (15, 3));

    // The acknowledgement was lost: the same batches come again, and nothing is written.
    let again = f.deliver_all(&schema)?;
    assert_eq!((again.rows, again.commits, again.skipped_parts), (0, 0, 3));
    assert_eq!((f.count("a")?, f.count("b")?), (15, 3));

    // A new batch after the landed ones is written, alone.
    f.wal.append(b"p3", &[part("b", ids_batch(3..5))])?;
    let third = f.deliver_all(&schema)?;
    assert_eq!((third.rows, third.commits), (2, 1));
    assert_eq!((f.count("a")?, f.count("b")?), (15, 5));

    let table = f.table("b")?;
    assert_eq!(f.sink.landed_through(&table), 3);
    let mut summaries: Vec<_> = table
        .metadata()
        .snapshots()
        .map(|s| {
            let p = &s.summary().additional_properties;
            (
                s.sequence_number(),
                p.get(SUMMARY_PIPELINE).cloned(),
                p.get(SUMMARY_FIRST_BATCH).cloned(),
                p.get(SUMMARY_LAST_BATCH).cloned(),
            )
        })
        .collect();
    summaries.sort();
    let id = Some("t#w#p".to_owned());
    assert_eq!(
        summaries,
        vec![
            (1, id.clone(), Some("1".into()), Some("2".into())),
            (2, id, Some("3".into()), Some("3".into())),
        ]
    );
    Ok(())
}

#[test]
fn a_crash_before_the_table_commit_writes_the_batches_again_once() -> TestResult {
    let mut f = fixture()?;
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    f.wal.append(b"p1", &[part("a", ids_batch(0..7))])?;
    crate::wal::failpoint::arm(failpoint::AFTER_DATA_FILES, 0);
    let crashed = f.deliver_all(&schema);
    assert!(
        matches!(crashed, Err(SinkError::Failpoint { .. })),
        "{crashed:?}"
    );
    // The table exists (created before writing) but holds nothing.
    assert_eq!(f.count("a")?, 0);
    let retried = f.deliver_all(&schema)?;
    assert_eq!(retried.rows, 7);
    assert_eq!(f.count("a")?, 7);
    Ok(())
}

/// A delivery whose write fails before its commit (in the field a full disk; here a table's
/// data directory that is a file) deletes the data files it started, in every table: nothing
/// references them, and left behind until cleanup's orphan window they would keep the disk
/// full, so every retry would fail too.
#[test]
fn a_delivery_that_fails_before_its_commit_deletes_the_data_files_it_started() -> TestResult {
    let mut f = fixture()?;
    let schema = pipeline_schema(&[
        ("a", vec![Field::new("id", FieldType::Int)]),
        ("b", vec![Field::new("id", FieldType::Int)]),
    ]);
    f.wal.append(
        b"p1",
        &[part("a", ids_batch(0..1000)), part("b", ids_batch(0..3))],
    )?;
    f.sink.prepare(&["a", "b"], &schema)?;
    let data = |name: &str| -> Result<std::path::PathBuf, iceberg::Error> {
        let location = format!("{}/data", f.table(name)?.metadata().location());
        Ok(storage::local_path(&location))
    };
    // The tables are unpartitioned: their files are in the data directory itself.
    let parquet_files = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .collect()
    };
    std::fs::write(data("b")?, "not a directory")?;
    let failed = f.deliver_all(&schema);
    assert!(
        matches!(failed, Err(SinkError::Iceberg { .. })),
        "{failed:?}"
    );
    assert_eq!(parquet_files(&data("a")?), Vec::<std::path::PathBuf>::new());
    assert_eq!((f.count("a")?, f.count("b")?), (0, 0));

    std::fs::remove_file(data("b")?)?;
    let retried = f.deliver_all(&schema)?;
    assert_eq!(retried.rows, 1003);
    assert_eq!((f.count("a")?, f.count("b")?), (1000, 3));
    // Only the files the commit references are on disk.
    assert_eq!(parquet_files(&data("a")?).len(), 1);
    assert_eq!(parquet_files(&data("b")?).len(), 1);
    Ok(())
}

/// A writer whose lease was taken over stops before a table commit: the check the pipeline
/// runs there (a fenced state write) fails, nothing is published, and the new holder's
/// delivery lands the rows once.
#[test]
fn a_failed_lease_check_before_the_commit_publishes_nothing() -> TestResult {
    use crate::state::{Condition, Fence, MemoryStore, StateError, StateKey, StateStore};
    let mut f = fixture()?;
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    f.wal.append(b"p1", &[part("a", ids_batch(0..7))])?;
    let store = MemoryStore::default();
    let lease = StateKey::new("t#w#p", crate::state::LEASE_SORT_KEY);
    let old = store.put(&lease, b"old", Condition::Absent, None)?;
    let new = store.put(&lease, b"new", Condition::Version(old), None)?;
    let store = &store;
    let check = |fence: Fence| {
        move |table: &str| {
            store
                .put(
                    &StateKey::new("t#w#p", "lease#commit-check"),
                    b"",
                    Condition::Any,
                    Some(fence),
                )
                .map(|_| ())
                .map_err(|source| SinkError::LeaseLost {
                    table: table.to_owned(),
                    source: Box::new(source),
                })
        }
    };
    let batches = f.wal.batches().to_vec();
    let stale = f.sink.deliver_guarded(
        &batches,
        &mut |id| f.wal.read(id),
        &schema,
        &check(Fence { token: old }),
    );
    match &stale {
        Err(e @ SinkError::LeaseLost { source, .. }) => {
            assert!(matches!(**source, StateError::Fenced { .. }), "{e}");
            assert!(!e.is_retryable());
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(f.count("a")?, 0, "nothing published by the stale writer");
    let current = f.sink.deliver_guarded(
        &batches,
        &mut |id| f.wal.read(id),
        &schema,
        &check(Fence { token: new }),
    )?;
    assert_eq!(current.rows, 7);
    assert_eq!(f.count("a")?, 7);
    Ok(())
}

#[test]
fn evolution_adds_columns_at_any_depth_and_widens_int_to_long_keeping_field_ids() -> TestResult {
    let mut f = fixture()?;
    let s1 = vec![
        Field::new("id", FieldType::Int),
        Field::new(
            "s",
            FieldType::Struct(vec![Field::new("x", FieldType::Int)]),
        ),
    ];
    let struct1 = DataType::Struct(Fields::from(vec![ArrowField::new(
        "x",
        DataType::Int32,
        true,
    )]));
    let b1 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("id", DataType::Int32, true),
            ArrowField::new("s", struct1.clone(), true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StructArray::try_new(
                Fields::from(vec![ArrowField::new("x", DataType::Int32, true)]),
                vec![Arc::new(Int32Array::from(vec![10, 20]))],
                None,
            )?),
        ],
    )?;
    f.wal.append(b"p1", &[part("a", b1)])?;
    f.deliver_all(&pipeline_schema(&[("a", s1)]))?;
    let before = f.table("a")?;
    let id_field = before
        .metadata()
        .current_schema()
        .field_by_name("id")
        .map(|f| f.id);

    let s2 = vec![
        Field::new("id", FieldType::Long),
        Field::new("name", FieldType::String),
        Field::new(
            "s",
            FieldType::Struct(vec![
                Field::new("x", FieldType::Int),
                Field::new("y", FieldType::String),
            ]),
        ),
    ];
    let struct2 = Fields::from(vec![
        ArrowField::new("x", DataType::Int32, true),
        ArrowField::new("y", DataType::Utf8, true),
    ]);
    let b2 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("id", DataType::Int64, true),
            ArrowField::new("name", DataType::Utf8, true),
            ArrowField::new("s", DataType::Struct(struct2.clone()), true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![5_000_000_000])),
            Arc::new(StringArray::from(vec!["n"])),
            Arc::new(StructArray::try_new(
                struct2,
                vec![
                    Arc::new(Int32Array::from(vec![30])),
                    Arc::new(StringArray::from(vec!["why"])),
                ],
                None,
            )?),
        ],
    )?;
    f.wal.append(
        b"p2",
        &[BatchPart {
            namespace: "a".into(),
            schema_version: 2,
            batch: b2,
        }],
    )?;
    f.deliver_all(&pipeline_schema(&[("a", s2)]))
        .map_err(|e| format!("deliver 2: {e:?}"))?;

    let after = f.table("a")?;
    let schema = after.metadata().current_schema();
    let id = schema.field_by_name("id").ok_or("no id")?;
    assert_eq!(
        Some(id.id),
        id_field,
        "the widened column keeps its field id"
    );
    assert_eq!(*id.field_type, Type::Primitive(PrimitiveType::Long));
    assert!(schema.field_by_name("name").is_some());
    assert!(schema.field_by_name("s.y").is_some(), "nested field added");
    assert_eq!(after.metadata().schemas_iter().count(), 2);

    let rows = f.rows("a").map_err(|e| format!("scan: {e:?}"))?;
    let mut ids: Vec<i64> = Vec::new();
    let mut names_null = 0;
    for batch in &rows {
        let col = batch.column_by_name("id").ok_or("id")?;
        ids.extend(col.as_primitive::<Int64Type>().iter().flatten());
        names_null += batch.column_by_name("name").ok_or("name")?.null_count();
    }
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 5_000_000_000], "old int files read as long");
    assert_eq!(names_null, 2, "older rows have no name");
    Ok(())
}

#[test]
fn the_hadoop_pointer_rolls_forward_past_a_stale_hint_and_refuses_a_taken_version() -> TestResult {
    let mut f = fixture()?;
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    f.wal.append(b"p1", &[part("a", ids_batch(0..2))])?;
    f.deliver_all(&schema)?;
    let ident = f.sink.table_ident("a");
    let dir = f.sink.catalog().table_dir(&ident);
    let location = f.sink.catalog().table_location(&ident);
    let at = TableRef {
        ident: &ident,
        location: &location,
    };
    let current = || f.sink.block_on(HadoopPointer.current(at));
    let hint = dir.join("metadata").join(VERSION_HINT);
    assert_eq!(
        std::fs::read_to_string(&hint)?,
        "2",
        "bare number, no newline"
    );

    // A crash between the metadata link and the hint: the hint says 1.
    std::fs::write(&hint, "1")?;
    let read = current()?.ok_or("no table")?;
    assert_eq!(read.version, 2);
    assert!(
        read.location.ends_with("/metadata/v2.metadata.json"),
        "{}",
        read.location
    );
    // A damaged hint falls back to listing.
    std::fs::write(&hint, "garbage")?;
    assert_eq!(current()?.map(|c| c.version), Some(2));
    std::fs::remove_file(&hint)?;
    assert_eq!(current()?.map(|c| c.version), Some(2));

    // Commits go on after all that.
    f.wal.append(b"p2", &[part("a", ids_batch(2..4))])?;
    f.deliver_all(&schema)?;
    assert_eq!(f.count("a")?, 4);
    assert_eq!(std::fs::read_to_string(&hint)?, "3");

    // Publishing a version that exists is a retryable conflict, and leaves it untouched.
    let table = f.table("a")?;
    let before = std::fs::read(dir.join("metadata/v3.metadata.json"))?;
    let v2 = Current::new(2, format!("{location}/metadata/v2.metadata.json"));
    let err = f
        .sink
        .block_on(HadoopPointer.publish(
            f.sink.catalog().file_io(),
            at,
            Some(&v2),
            table.metadata(),
        ))
        .err()
        .ok_or("published over an existing version")?;
    assert_eq!(err.kind(), iceberg::ErrorKind::CatalogCommitConflicts);
    assert!(err.retryable());
    assert_eq!(
        std::fs::read(dir.join("metadata/v3.metadata.json"))?,
        before
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("metadata"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    Ok(())
}

#[test]
fn a_table_changed_outside_skipprd_is_an_error_naming_the_column() -> TestResult {
    let mut f = fixture()?;
    f.wal.append(b"p1", &[part("a", ids_batch(0..2))])?;
    f.deliver_all(&pipeline_schema(&[(
        "a",
        vec![Field::new("id", FieldType::Int)],
    )]))?;
    f.wal.append(b"p2", &[part("a", ids_batch(2..4))])?;
    let err = f
        .deliver_all(&pipeline_schema(&[(
            "a",
            vec![Field::new("id", FieldType::Boolean)],
        )]))
        .err()
        .ok_or("delivered a boolean into an int column")?;
    assert!(
        matches!(&err, SinkError::IncompatibleColumn { column, .. } if column == "id"),
        "{err}"
    );
    assert!(!err.is_retryable());
    Ok(())
}

#[test]
fn timestamps_in_milliseconds_land_as_microseconds() -> TestResult {
    let mut f = fixture()?;
    let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, Some("UTC".into()));
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![ArrowField::new("at", ts, true)])),
        vec![Arc::new(
            arrow::array::TimestampMillisecondArray::from(vec![1_700_000_000_123])
                .with_timezone("UTC"),
        )],
    )?;
    f.wal.append(b"p1", &[part("a", batch)])?;
    f.deliver_all(&pipeline_schema(&[(
        "a",
        vec![Field::new("at", FieldType::TimestampMs)],
    )]))?;
    let rows = f.rows("a")?;
    let col = rows[0].column(0);
    let micros = col
        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
        .value(0);
    assert_eq!(micros, 1_700_000_000_123_000);
    Ok(())
}

#[test]
fn the_layout_partitions_by_value_and_time_and_sorts_rows() -> TestResult {
    let mut f = fixture()?;
    f.sink = IcebergSink::hadoop(f._dir.path().join("lake2"), "ns", "t#w#p".to_owned())?
        .with_layout(layout::Layout {
            partition_fields: vec!["city".into()],
            time_fields: vec!["at".into()],
            time_unit: Some(crate::config::TimeUnit::Day),
            order_fields: vec!["n".into()],
            allowed_values: Vec::new(),
            time_key: None,
        });
    let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    let day = 86_400_000_000_i64;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("city", DataType::Utf8, true),
            ArrowField::new("at", ts, true),
            ArrowField::new("n", DataType::Int32, true),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["b", "a", "b", "a", "a"])),
            Arc::new(
                arrow::array::TimestampMicrosecondArray::from(vec![
                    20_000 * day,
                    20_000 * day,
                    20_001 * day,
                    20_000 * day + 5,
                    20_000 * day + 9,
                ])
                .with_timezone("UTC"),
            ),
            Arc::new(Int32Array::from(vec![1, 9, 2, 3, 7])),
        ],
    )?;
    f.wal.append(b"p1", &[part("a", batch)])?;
    f.deliver_all(&pipeline_schema(&[(
        "a",
        vec![
            Field::new("at", FieldType::Timestamp),
            Field::new("city", FieldType::String),
            Field::new("n", FieldType::Int),
        ],
    )]))?;
    let table = f.table("a")?;
    let spec = table.metadata().default_partition_spec();
    let names: Vec<_> = spec.fields().iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, vec!["city".to_owned(), "at_day".to_owned()]);
    // Three partitions: (a, day 20000), (b, day 20000), (b, day 20001).
    let files: Vec<String> = f.sink.block_on(async {
        table
            .scan()
            .build()?
            .plan_files()
            .await?
            .map_ok(|t| t.data_file_path().to_owned())
            .try_collect()
            .await
    })?;
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(
        files.iter().any(|p| p.contains("/city=a/at_day=")),
        "{files:?}"
    );
    // Within the (a, 20000) file rows are sorted by n.
    let a_file = files
        .iter()
        .find(|p| p.contains("/city=a/"))
        .ok_or("no a file")?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(storage::local_path(a_file))?,
    )?
    .build()?;
    let mut ns = Vec::new();
    for batch in reader {
        let batch = batch?;
        let col = batch.column_by_name("n").ok_or("n")?;
        ns.extend(
            col.as_primitive::<arrow::datatypes::Int32Type>()
                .iter()
                .flatten(),
        );
    }
    assert_eq!(ns, vec![3, 7, 9]);
    assert_eq!(f.count("a")?, 5);
    Ok(())
}

#[test]
fn a_skipprlake_table_keeps_its_pointer_in_the_catalog_store_and_swaps_it_by_cas() -> TestResult {
    use super::catalog::{LakePointer, StorePointer};
    let mut f = fixture()?;
    let warehouse = f._dir.path().join("skipprlake");
    let pointer = StorePointer::embedded(warehouse.clone(), "catalog");
    f.sink = IcebergSink::new(
        warehouse.clone(),
        "ns",
        "t#w#p".to_owned(),
        LakePointer::new(pointer.clone()),
    )?;
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    f.wal.append(b"p1", &[part("a", ids_batch(0..4))])?;
    f.deliver_all(&schema)?;
    f.wal.append(b"p2", &[part("a", ids_batch(4..6))])?;
    f.deliver_all(&schema)?;
    let again = f.deliver_all(&schema)?;
    assert_eq!(again.rows, 0);
    assert_eq!(f.count("a")?, 6);

    let dir = warehouse.join("ns/a");
    let ident = f.sink.table_ident("a");
    let table_location = format!("file://{}", dir.display());
    let at = TableRef {
        ident: &ident,
        location: &table_location,
    };
    let read = f.sink.block_on(pointer.current(at))?.ok_or("no pointer")?;
    let (version, location) = (read.version, read.location.clone());
    assert_eq!(version, 3, "create, then two appends");
    assert!(location.contains("/metadata/00003-"), "{location}");
    assert!(pointer.store_file().ok_or("no store file")?.is_file());
    assert!(
        !dir.join("metadata").join(VERSION_HINT).exists(),
        "no hint: the store is the pointer"
    );
    // Another writer that read version 3 loses the swap to version 4 once it is taken.
    let table = f.table("a")?;
    let io = f.sink.catalog().file_io().clone();
    f.sink
        .block_on(pointer.publish(&io, at, Some(&read), table.metadata()))?;
    let err = f
        .sink
        .block_on(pointer.publish(&io, at, Some(&read), table.metadata()))
        .err()
        .ok_or("two writers both published version 4")?;
    assert_eq!(err.kind(), iceberg::ErrorKind::CatalogCommitConflicts);
    let metadata_files = std::fs::read_dir(dir.join("metadata"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("00004-"))
        .count();
    assert_eq!(metadata_files, 1, "the loser's metadata file is removed");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The Glue pointer's compare-and-swap, against the in-process Glue double
// ---------------------------------------------------------------------------------------------

/// A sink of pipeline `identity` on the `file://` warehouse `warehouse`, its tables registered
/// in `glue` (the pointer writes metadata through whatever file I/O the catalog has, so the
/// Glue logic runs here without S3).
fn glue_sink(
    warehouse: &std::path::Path,
    glue: &Arc<super::glue::MemoryGlue>,
    identity: &str,
) -> Result<IcebergSink, SinkError> {
    use super::catalog::{FileCatalog, LakePointer};
    let api: Arc<dyn super::glue::GlueApi> = glue.clone();
    let catalog = FileCatalog::new(
        warehouse.to_path_buf(),
        storage::durable_file_io(),
        LakePointer::new(super::glue::GluePointer::new(api)),
    );
    IcebergSink::with_catalog(catalog, "ns", identity.to_owned())
}

fn disk_wal(dir: &std::path::Path) -> Result<DiskWal, Box<dyn std::error::Error>> {
    let (wal, _) = DiskWal::open(
        dir,
        WalOptions {
            fsync: false,
            ..WalOptions::default()
        },
    )?;
    Ok(wal)
}

fn deliver(
    sink: &IcebergSink,
    wal: &DiskWal,
    schema: &PipelineSchema,
) -> Result<Delivered, SinkError> {
    let batches = wal.batches().to_vec();
    sink.deliver(&batches, &mut |id| wal.read(id), schema)
}

/// The metadata files in the table's `metadata/` directory that its current metadata neither
/// is nor lists in its metadata log: what a lost commit left behind.
fn unreferenced_metadata(
    f: &Fixture,
    ident: &TableIdent,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let table = f
        .sink
        .block_on(async { f.sink.catalog().load_table(ident).await })?;
    let mut referenced: BTreeSet<String> = table
        .metadata()
        .metadata_log()
        .iter()
        .map(|m| m.metadata_file.clone())
        .collect();
    referenced.insert(table.metadata_location().unwrap_or_default().to_owned());
    let dir = f.sink.catalog().table_dir(ident).join("metadata");
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".metadata.json")
            && !referenced.contains(&format!("file://{}/{name}", dir.display()))
        {
            orphans.push(name);
        }
    }
    Ok(orphans)
}

/// Two pipelines append to one Glue-registered table at the same moment: both read the same
/// Glue `VersionId`, the double lets one `UpdateTable` win and refuses the other (the
/// compare-and-swap); iceberg's transaction reloads and appends again on the winner's
/// version. Both batches land exactly once and the loser's metadata file is deleted.
///
/// This runs against [`super::glue::MemoryGlue`], an in-process double that enforces
/// `VersionId`, because the local AWS server (moto 5.2.5) accepts a stale `VersionId`:
/// against moto this race would silently lose a commit, which is moto's gap, not Glue's.
#[test]
fn two_pipelines_racing_on_a_glue_table_both_land_exactly_once() -> TestResult {
    let mut f = fixture()?;
    let glue = Arc::new(super::glue::MemoryGlue::new());
    let warehouse = f._dir.path().join("glue-wh");
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    let mut wal_a = disk_wal(&f._dir.path().join("wal-a"))?;
    let mut wal_b = disk_wal(&f._dir.path().join("wal-b"))?;
    wal_a.append(b"a1", &[part("a", ids_batch(0..10))])?;
    let sink_a = glue_sink(&warehouse, &glue, "t#w#a")?;
    let sink_b = glue_sink(&warehouse, &glue, "t#w#b")?;
    // The table exists (created by A's first batch) before the race.
    assert_eq!(deliver(&sink_a, &wal_a, &schema)?.rows, 10);
    wal_a.append(b"a2", &[part("a", ids_batch(10..15))])?;
    wal_b.append(b"b1", &[part("a", ids_batch(100..107))])?;

    glue.arm_update_barrier(2);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| deliver(&sink_a, &wal_a, &schema));
        let b = s.spawn(|| deliver(&sink_b, &wal_b, &schema));
        (a.join(), b.join())
    });
    let (a, b) = (
        a.map_err(|_| "pipeline A panicked")??,
        b.map_err(|_| "pipeline B panicked")??,
    );
    assert_eq!((a.rows, b.rows), (5, 7));
    assert_eq!(glue.conflicts(), 1, "exactly one UpdateTable lost the swap");

    f.sink = glue_sink(&warehouse, &glue, "t#w#a")?;
    let mut ids: Vec<i64> = f
        .rows("a")?
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .values()
                .iter()
                .map(|v| i64::from(*v))
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort_unstable();
    let expected: Vec<i64> = (0..15).chain(100..107).collect();
    assert_eq!(ids, expected, "every row once");
    let table = f.table("a")?;
    assert_eq!(landed_through(table.metadata(), "t#w#a"), 2);
    assert_eq!(landed_through(table.metadata(), "t#w#b"), 1);
    assert_eq!(
        unreferenced_metadata(&f, &f.sink.table_ident("a"))?,
        Vec::<String>::new(),
        "the losing attempt's metadata file is deleted"
    );
    let registered = glue.table("ns", "a").ok_or("no Glue table")?;
    assert_eq!(
        registered
            .parameters
            .get("metadata_location")
            .map(String::as_str),
        table.metadata_location()
    );
    Ok(())
}

/// Two writers of the SAME pipeline (a writer that lost its lease and did not notice yet)
/// deliver the same batch to a Glue-registered table at once. The swap lets one commit in;
/// the other's transaction reloads, and the catalog's landed check refuses to append batches
/// the winner already landed, so the rows land once. Against the in-process Glue double (moto
/// does not enforce `VersionId`, see the test above).
#[test]
fn two_writers_of_one_pipeline_racing_on_a_glue_table_land_the_batch_once() -> TestResult {
    let mut f = fixture()?;
    let glue = Arc::new(super::glue::MemoryGlue::new());
    let warehouse = f._dir.path().join("glue-wh");
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    let mut wal_1 = disk_wal(&f._dir.path().join("wal-1"))?;
    let mut wal_2 = disk_wal(&f._dir.path().join("wal-2"))?;
    for wal in [&mut wal_1, &mut wal_2] {
        wal.append(b"p1", &[part("a", ids_batch(0..4))])?;
    }
    let sink_1 = glue_sink(&warehouse, &glue, "t#w#p")?;
    let sink_2 = glue_sink(&warehouse, &glue, "t#w#p")?;
    deliver(&sink_1, &wal_1, &schema)?;
    deliver(&sink_2, &wal_2, &schema)?;
    for wal in [&mut wal_1, &mut wal_2] {
        wal.append(b"p2", &[part("a", ids_batch(4..9))])?;
    }

    glue.arm_update_barrier(2);
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(|| deliver(&sink_1, &wal_1, &schema));
        let two = s.spawn(|| deliver(&sink_2, &wal_2, &schema));
        (one.join(), two.join())
    });
    let results = [
        one.map_err(|_| "writer 1 panicked")?,
        two.map_err(|_| "writer 2 panicked")?,
    ];
    let landed: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(landed.len(), 1, "one writer lands batch 2: {results:?}");
    assert_eq!(landed[0].rows, 5);
    let refused = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .ok_or("both writers succeeded")?;
    assert!(refused.to_string().contains("already landed"), "{refused}");
    assert!(refused.is_retryable(), "the pipeline tries again later");
    assert_eq!(glue.conflicts(), 1);

    // The refused writer delivers again: everything is skipped.
    let again = deliver(&sink_2, &wal_2, &schema)?;
    assert_eq!((again.rows, again.commits), (0, 0));
    f.sink = glue_sink(&warehouse, &glue, "t#w#p")?;
    assert_eq!(f.count("a")?, 9, "rows 0..9 once");
    assert_eq!(f.sink.landed_through(&f.table("a")?), 2);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The SkipprLake pointer in a shared store (DynamoDB in production), against the memory store
// ---------------------------------------------------------------------------------------------

/// A [`crate::state::MemoryStore`] whose first `armed` puts wait for each other: every racer
/// has read the pointer before any of them writes it.
struct RacingStore {
    inner: crate::state::MemoryStore,
    armed: std::sync::atomic::AtomicUsize,
    barrier: std::sync::Barrier,
    conflicts: std::sync::atomic::AtomicUsize,
}

impl RacingStore {
    fn new(racers: usize) -> Self {
        RacingStore {
            inner: crate::state::MemoryStore::default(),
            armed: std::sync::atomic::AtomicUsize::new(0),
            barrier: std::sync::Barrier::new(racers),
            conflicts: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn arm(&self, racers: usize) {
        self.armed
            .store(racers, std::sync::atomic::Ordering::SeqCst);
    }
}

impl crate::state::StateStore for RacingStore {
    fn get(
        &self,
        key: &crate::state::StateKey,
    ) -> Result<Option<crate::state::Item>, crate::state::StateError> {
        self.inner.get(key)
    }

    fn put(
        &self,
        key: &crate::state::StateKey,
        value: &[u8],
        condition: crate::state::Condition,
        fence: Option<crate::state::Fence>,
    ) -> Result<u64, crate::state::StateError> {
        use std::sync::atomic::Ordering;
        let racing = self
            .armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if racing {
            self.barrier.wait();
        }
        let put = self.inner.put(key, value, condition, fence);
        if matches!(put, Err(crate::state::StateError::Conflict { .. })) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        put
    }

    fn delete(
        &self,
        key: &crate::state::StateKey,
        condition: crate::state::Condition,
        fence: Option<crate::state::Fence>,
    ) -> Result<(), crate::state::StateError> {
        self.inner.delete(key, condition, fence)
    }

    fn scan_prefix(
        &self,
        partition: &str,
        sort_prefix: &str,
    ) -> Result<Vec<(String, crate::state::Item)>, crate::state::StateError> {
        self.inner.scan_prefix(partition, sort_prefix)
    }
}

/// A `SkipprLake` sink of pipeline `identity` on `warehouse`, its pointers in `store`.
fn shared_store_sink(
    warehouse: &std::path::Path,
    store: &Arc<RacingStore>,
    identity: &str,
) -> Result<IcebergSink, SinkError> {
    use super::catalog::{FileCatalog, LakePointer, StorePointer};
    let warehouse_uri = format!("file://{}", warehouse.display());
    let shared: Arc<dyn crate::state::StateStore> = store.clone();
    let catalog = FileCatalog::at(
        warehouse_uri.clone(),
        storage::durable_file_io(),
        LakePointer::new(StorePointer::shared(
            shared,
            "racing memory store".to_owned(),
            &warehouse_uri,
        )),
    );
    IcebergSink::with_catalog(catalog, "ns", identity.to_owned())
}

/// Two pipelines append to one `SkipprLake` table at the same moment, its pointer in a shared
/// store: both read version N, both put version N+1 on condition "still at N"; the store lets
/// one in and refuses the other, whose transaction reloads and appends on the winner's
/// version. Both batches land exactly once, the loser's metadata file is deleted, and the
/// namespace and table are listed from the store (not from directories).
#[test]
fn two_pipelines_racing_on_a_shared_store_table_both_land_exactly_once() -> TestResult {
    let mut f = fixture()?;
    let store = Arc::new(RacingStore::new(2));
    let warehouse = f._dir.path().join("shared-wh");
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    let mut wal_a = disk_wal(&f._dir.path().join("wal-a"))?;
    let mut wal_b = disk_wal(&f._dir.path().join("wal-b"))?;
    wal_a.append(b"a1", &[part("a", ids_batch(0..10))])?;
    let sink_a = shared_store_sink(&warehouse, &store, "t#w#a")?;
    let sink_b = shared_store_sink(&warehouse, &store, "t#w#b")?;
    assert_eq!(deliver(&sink_a, &wal_a, &schema)?.rows, 10);
    wal_a.append(b"a2", &[part("a", ids_batch(10..15))])?;
    wal_b.append(b"b1", &[part("a", ids_batch(100..107))])?;

    store.arm(2);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| deliver(&sink_a, &wal_a, &schema));
        let b = s.spawn(|| deliver(&sink_b, &wal_b, &schema));
        (a.join(), b.join())
    });
    let (a, b) = (
        a.map_err(|_| "pipeline A panicked")??,
        b.map_err(|_| "pipeline B panicked")??,
    );
    assert_eq!((a.rows, b.rows), (5, 7));
    assert_eq!(
        store.conflicts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "exactly one put lost the swap"
    );

    f.sink = shared_store_sink(&warehouse, &store, "t#w#a")?;
    let mut ids: Vec<i32> = f
        .rows("a")?
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .values()
                .to_vec()
        })
        .collect();
    ids.sort_unstable();
    let expected: Vec<i32> = (0..15).chain(100..107).collect();
    assert_eq!(ids, expected, "every row once");
    let table = f.table("a")?;
    assert_eq!(landed_through(table.metadata(), "t#w#a"), 2);
    assert_eq!(landed_through(table.metadata(), "t#w#b"), 1);
    assert_eq!(
        unreferenced_metadata(&f, &f.sink.table_ident("a"))?,
        Vec::<String>::new(),
        "the losing attempt's metadata file is deleted"
    );

    // The pointer item: partition `catalog#{warehouse}`, value {version, location}.
    let partition = format!("catalog#file://{}", warehouse.display());
    let items = crate::state::StateStore::scan_prefix(store.as_ref(), &partition, "")?;
    let sorts: Vec<&str> = items.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(sorts, ["namespace#ns", "table#ns/a"]);
    let value: serde_json::Value = serde_json::from_slice(&items[1].1.value)?;
    assert_eq!(value["version"], 4, "create, append, then one append each");
    assert_eq!(
        value["location"].as_str(),
        table.metadata_location(),
        "the item points at the current metadata"
    );
    // Namespaces and tables come from the store.
    let catalog = f.sink.catalog();
    let (namespaces, tables) = f.sink.block_on(async {
        let ns = catalog.list_namespaces(None).await?;
        let tables = catalog
            .list_tables(&iceberg::NamespaceIdent::new("ns".to_owned()))
            .await?;
        Ok::<_, iceberg::Error>((ns, tables))
    })?;
    assert_eq!(namespaces, [iceberg::NamespaceIdent::new("ns".to_owned())]);
    assert_eq!(tables, [f.sink.table_ident("a")]);
    Ok(())
}

/// Two writers of the SAME pipeline deliver the same batch to a `SkipprLake` table whose
/// pointer is in a shared store: the conditional put lets one in, the other's transaction
/// reloads, and the catalog's landed check refuses batches the winner already holds, so the
/// rows land once (as with the other pointers).
#[test]
fn two_writers_of_one_pipeline_racing_on_a_shared_store_table_land_the_batch_once() -> TestResult {
    let mut f = fixture()?;
    let store = Arc::new(RacingStore::new(2));
    let warehouse = f._dir.path().join("shared-wh");
    let schema = pipeline_schema(&[("a", vec![Field::new("id", FieldType::Int)])]);
    let mut wal_1 = disk_wal(&f._dir.path().join("wal-1"))?;
    let mut wal_2 = disk_wal(&f._dir.path().join("wal-2"))?;
    for wal in [&mut wal_1, &mut wal_2] {
        wal.append(b"p1", &[part("a", ids_batch(0..4))])?;
    }
    let sink_1 = shared_store_sink(&warehouse, &store, "t#w#p")?;
    let sink_2 = shared_store_sink(&warehouse, &store, "t#w#p")?;
    assert_eq!(deliver(&sink_1, &wal_1, &schema)?.rows, 4);
    assert_eq!(deliver(&sink_2, &wal_2, &schema)?.rows, 0, "batch 1 landed");
    for wal in [&mut wal_1, &mut wal_2] {
        wal.append(b"p2", &[part("a", ids_batch(4..9))])?;
    }

    store.arm(2);
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(|| deliver(&sink_1, &wal_1, &schema));
        let two = s.spawn(|| deliver(&sink_2, &wal_2, &schema));
        (one.join(), two.join())
    });
    let results = [
        one.map_err(|_| "writer 1 panicked")?,
        two.map_err(|_| "writer 2 panicked")?,
    ];
    let landed: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(landed.len(), 1, "one writer lands batch 2: {results:?}");
    assert_eq!(landed[0].rows, 5);
    let refused = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .ok_or("both writers succeeded")?;
    assert!(refused.to_string().contains("already landed"), "{refused}");
    assert!(refused.is_retryable(), "the pipeline tries again later");
    assert_eq!(store.conflicts.load(std::sync::atomic::Ordering::SeqCst), 1);

    let again = deliver(&sink_2, &wal_2, &schema)?;
    assert_eq!((again.rows, again.commits), (0, 0));
    f.sink = shared_store_sink(&warehouse, &store, "t#w#p")?;
    assert_eq!(f.count("a")?, 9, "rows 0..9 once");
    assert_eq!(f.sink.landed_through(&f.table("a")?), 2);
    assert_eq!(
        unreferenced_metadata(&f, &f.sink.table_ident("a"))?,
        Vec::<String>::new()
    );
    Ok(())
}

/// Regression: a key `a.b` beside a struct `a` with a field `b` gave two fields the dotted
/// name `a.b`, which Iceberg refuses ("multiple fields for name a.b"), and every later pass
/// failed. The key is now the column `a%2Eb` (renamed in place, keeping its id and data, when
/// it came first), and each value lands in its own column.
#[test]
fn a_dotted_key_beside_a_struct_of_that_path_lands_under_an_undotted_name() -> TestResult {
    let mut f = fixture()?;
    let int = |name: &str| ArrowField::new(name, DataType::Int32, true);
    let b_fields = Fields::from(vec![int("b")]);
    let struct_a = |values: Vec<Option<i32>>| -> Result<StructArray, arrow::error::ArrowError> {
        StructArray::try_new(
            b_fields.clone(),
            vec![Arc::new(Int32Array::from(values))],
            None,
        )
    };
    let dotted = Field::new("a.b", FieldType::Int);
    let nested = Field::new(
        "a",
        FieldType::Struct(vec![Field::new("b", FieldType::Int)]),
    );

    // Pass 1: only the dotted key; the table takes it as it is.
    let b1 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![int("id"), int("a.b")])),
        vec![
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(Int32Array::from(vec![10])),
        ],
    )?;
    f.wal.append(b"p1", &[part("t", b1)])?;
    let s1 = vec![Field::new("id", FieldType::Int), dotted.clone()];
    f.deliver_all(&pipeline_schema(&[("t", s1)]))?;
    let before = f.table("t")?;
    let dotted_id = before
        .metadata()
        .current_schema()
        .field_by_name("a.b")
        .map(|f| f.id)
        .ok_or("no a.b column after pass 1")?;

    // Pass 2: the struct arrives; pass 3: one record with both.
    let b2 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            int("id"),
            ArrowField::new("a", DataType::Struct(b_fields.clone()), true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![2])),
            Arc::new(struct_a(vec![Some(20)])?),
        ],
    )?;
    let b3 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            int("id"),
            int("a.b"),
            ArrowField::new("a", DataType::Struct(b_fields.clone()), true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![3])),
            Arc::new(Int32Array::from(vec![30])),
            Arc::new(struct_a(vec![Some(31)])?),
        ],
    )?;
    f.wal.append(b"p2", &[part("t", b2)])?;
    f.wal.append(b"p3", &[part("t", b3)])?;
    let s2 = vec![Field::new("id", FieldType::Int), dotted, nested];
    f.deliver_all(&pipeline_schema(&[("t", s2.clone())]))
        .map_err(|e| format!("deliver 2: {e}"))?;
    // A later pass with the same schema changes nothing and fails nothing.
    f.deliver_all(&pipeline_schema(&[("t", s2)]))
        .map_err(|e| format!("deliver 3: {e}"))?;

    let after = f.table("t")?;
    let schema = after.metadata().current_schema();
    let undotted = schema.field_by_name("a%2Eb").ok_or("no a%2Eb column")?;
    assert_eq!(
        undotted.id, dotted_id,
        "the dotted column was renamed, not replaced"
    );
    let nested_b = schema.field_by_name("a.b").ok_or("no a.b path")?;
    assert_ne!(nested_b.id, dotted_id, "a.b now names the struct's field");

    let mut seen: Vec<(i32, Option<i32>, Option<i32>)> = Vec::new();
    for batch in f.rows("t")? {
        let ids = batch
            .column_by_name("id")
            .ok_or("id")?
            .as_primitive::<arrow::datatypes::Int32Type>()
            .clone();
        let flat = batch
            .column_by_name("a%2Eb")
            .ok_or("a%2Eb")?
            .as_primitive::<arrow::datatypes::Int32Type>()
            .clone();
        let a = batch.column_by_name("a").ok_or("a")?.as_struct().clone();
        let b = a
            .column_by_name("b")
            .ok_or("a.b")?
            .as_primitive::<arrow::datatypes::Int32Type>()
            .clone();
        for i in 0..batch.num_rows() {
            let nested = (a.is_valid(i) && b.is_valid(i)).then(|| b.value(i));
            seen.push((
                ids.value(i),
                flat.is_valid(i).then(|| flat.value(i)),
                nested,
            ));
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        vec![
            (1, Some(10), None),
            (2, None, Some(20)),
            (3, Some(30), Some(31))
        ]
    );
    Ok(())
}
