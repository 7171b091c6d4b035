//! Maintenance on real temporary warehouses: deliveries through the sink, then expiry,
//! compaction and cleanup, read back file by file. The same on S3 warehouses against the local
//! AWS (moto) in [`s3`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, AsArray, Int32Array, RecordBatch, StringArray, StructArray};
use arrow::datatypes::{DataType, Field as ArrowField, Fields, Int32Type, Schema};
use futures::TryStreamExt;
use iceberg::Catalog;

use super::*;
use crate::schema::{Field, FieldType, NamespaceSchema, PipelineSchema};
use crate::sinks::iceberg::storage::local_path;
use crate::sinks::iceberg::{Delivered, landed_through};
use crate::wal::{BatchPart, DiskWal, WalOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `(id, name)` rows.
type Rows = Vec<(i32, Option<String>)>;

const IDENTITY: &str = "t#w#p";

fn schema_of(fields: Vec<Field>) -> PipelineSchema {
    let mut schema = PipelineSchema::empty("p", "w");
    schema
        .namespaces
        .insert("a".to_owned(), NamespaceSchema { fields, records: 0 });
    schema
}

fn simple_schema() -> PipelineSchema {
    schema_of(vec![
        Field::new("id", FieldType::Int),
        Field::new("name", FieldType::String),
    ])
}

fn batch(ids: std::ops::Range<i32>) -> RecordBatch {
    let names: Vec<String> = ids.clone().map(|i| format!("n{i}")).collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("id", DataType::Int32, true),
            ArrowField::new("name", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int32Array::from_iter_values(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap()
}

fn part(batch: RecordBatch, schema_version: u32) -> BatchPart {
    BatchPart {
        namespace: "a".to_owned(),
        schema_version,
        batch,
    }
}

/// Keeps nothing but the current snapshot, deletes orphans only after a day.
fn eager() -> Policy {
    Policy {
        auto: false,
        retain_last: 1,
        max_snapshot_age: Duration::ZERO,
        ..Policy::default()
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    wal: DiskWal,
    sink: IcebergSink,
    /// The warehouse's bucket, on S3.
    bucket: Option<crate::aws::Bucket>,
}

fn disk_wal(dir: &Path) -> Result<DiskWal, Box<dyn std::error::Error>> {
    let (wal, _) = DiskWal::open(
        dir,
        WalOptions {
            fsync: false,
            ..WalOptions::default()
        },
    )?;
    Ok(wal)
}

fn fixture(policy: Policy) -> Result<Fixture, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let wal = disk_wal(&dir.path().join("wal"))?;
    let sink = IcebergSink::hadoop(dir.path().join("lake"), "ns", IDENTITY.to_owned())?
        .with_maintenance(policy);
    Ok(Fixture {
        dir,
        wal,
        sink,
        bucket: None,
    })
}

impl Fixture {
    /// `n` deliveries of `per` rows each, one commit each.
    fn deliver_many(&mut self, n: i32, per: i32) -> TestResult {
        let schema = simple_schema();
        let start = self.rows()?.len() as i32;
        for i in 0..n {
            let from = start + i * per;
            self.wal
                .append(b"pos", &[part(batch(from..from + per), 1)])?;
            let last = self.wal.batches().last().cloned().ok_or("no batch")?;
            self.sink
                .deliver(&[last], &mut |id| self.wal.read(id), &schema)?;
        }
        Ok(())
    }

    fn deliver_all_again(&self) -> Result<Delivered, SinkError> {
        let batches = self.wal.batches().to_vec();
        self.sink
            .deliver(&batches, &mut |id| self.wal.read(id), &simple_schema())
    }

    fn ident(&self) -> TableIdent {
        self.sink.table_ident("a")
    }

    fn table(&self) -> Result<Table, iceberg::Error> {
        let ident = self.ident();
        self.sink
            .block_on(async { self.sink.catalog().load_table(&ident).await })
    }

    fn table_dir(&self) -> PathBuf {
        self.sink.catalog().table_dir(&self.ident())
    }

    fn maintain(&self, policy: &Policy) -> Result<MaintenanceReport, SinkError> {
        let catalog = self.sink.catalog();
        let ident = self.ident();
        self.sink
            .block_on(maintain_table(&catalog, &ident, policy, Trigger::Manual))
    }

    /// The live data files of the current snapshot.
    fn live_files(&self) -> Result<Vec<String>, Box<dyn std::error::Error>> {
        let table = match self.table() {
            Ok(t) => t,
            Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        if table.metadata().current_snapshot().is_none() {
            return Ok(Vec::new());
        }
        Ok(self.sink.block_on(async {
            table
                .scan()
                .build()?
                .plan_files()
                .await?
                .map_ok(|task| task.data_file_path().to_owned())
                .try_collect()
                .await
        })?)
    }

    /// Every `(id, name)` of the current snapshot, sorted, read with the Parquet reader
    /// (each file through the table's file I/O).
    fn rows(&self) -> Result<Rows, Box<dyn std::error::Error>> {
        let table = self.table();
        let mut out = Vec::new();
        for file in self.live_files()? {
            let io = table.as_ref().map_err(|e| e.to_string())?.file_io();
            let bytes = self
                .sink
                .block_on(async { io.new_input(&file)?.read().await })?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)?
                    .build()?;
            for batch in reader {
                let batch = batch?;
                let ids = batch.column_by_name("id").ok_or("id")?;
                let names = batch.column_by_name("name").ok_or("name")?;
                let names = names.as_string::<i32>();
                for (i, id) in ids.as_primitive::<Int32Type>().iter().enumerate() {
                    let name = (!names.is_null(i)).then(|| names.value(i).to_owned());
                    out.push((id.ok_or("null id")?, name));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// The files under the table's `dir` (`data`, `metadata`) whose names end in `ext`,
    /// listed without skipprd's code: a directory walk, or the bucket's keys.
    fn files(&self, dir: &str, ext: &str) -> Result<usize, Box<dyn std::error::Error>> {
        let Some(bucket) = &self.bucket else {
            return Ok(files_in(&self.table_dir().join(dir), ext));
        };
        let location = self.sink.catalog().table_location(&self.ident());
        let (_, key) = crate::sinks::iceberg::s3::split_uri(&location)?;
        let keys = bucket
            .list(&format!("{key}/{dir}/"))
            .map_err(|e| e.to_string())?;
        Ok(keys.iter().filter(|k| k.ends_with(ext)).count())
    }
}

fn files_in(dir: &Path, ext: &str) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(ext) {
                n += 1;
            }
        }
    }
    n
}

fn expected_rows(n: i32) -> Rows {
    (0..n).map(|i| (i, Some(format!("n{i}")))).collect()
}

#[test]
fn many_small_deliveries_compact_into_one_file_with_the_same_rows_and_land_nothing_twice()
-> TestResult {
    compact_many_small_deliveries(&mut fixture(eager())?)
}

/// 20 deliveries of 50 rows, then maintenance under [`eager`]: one file, one snapshot, the
/// same rows; redelivery lands nothing and new batches land once.
fn compact_many_small_deliveries(f: &mut Fixture) -> TestResult {
    f.deliver_many(20, 50)?;
    assert_eq!(f.live_files()?.len(), 20);
    assert_eq!(f.files("data", ".parquet")?, 20);
    let before = f.rows()?;
    assert_eq!(before, expected_rows(1000));
    let figures = |f: &Fixture| -> Result<String, Box<dyn std::error::Error>> {
        Ok(format!(
            "{} snapshots; files: {} data, {} manifests and manifest lists, {} metadata versions",
            f.table()?.metadata().snapshots().count(),
            f.files("data", ".parquet")?,
            f.files("metadata", ".avro")?,
            f.files("metadata", ".metadata.json")?
        ))
    };
    eprintln!("before maintenance: {}", figures(f)?);

    let policy = f.sink.maintenance().clone();
    let report = f.maintain(&policy)?;
    eprintln!("after maintenance: {}; {report:?}", figures(f)?);
    assert_eq!(report.files_compacted_from, 20);
    assert_eq!(report.files_compacted_to, 1);
    assert_eq!(
        report.snapshots_expired, 20,
        "every snapshot but the compaction"
    );
    assert!(
        report.files_deleted >= 20 && report.bytes_freed > 0,
        "{report:?}"
    );
    assert_eq!(f.live_files()?.len(), 1);
    assert_eq!(f.files("data", ".parquet")?, 1, "the small files are gone");
    assert_eq!(f.rows()?, before, "rows and values unchanged");

    // The snapshot is a replace with the maintenance mark and no batch ids; the landed id
    // survives in the property although every delivery snapshot expired.
    let table = f.table()?;
    let current = table.metadata().current_snapshot().ok_or("no snapshot")?;
    assert_eq!(
        current.summary().operation,
        iceberg::spec::Operation::Replace
    );
    let props = &current.summary().additional_properties;
    assert_eq!(
        props.get(SUMMARY_MAINTENANCE).map(String::as_str),
        Some("compact")
    );
    assert!(!props.contains_key(crate::sinks::iceberg::SUMMARY_LAST_BATCH));
    assert_eq!(props.get("total-data-files").map(String::as_str), Some("1"));
    assert_eq!(props.get("total-records").map(String::as_str), Some("1000"));
    assert_eq!(table.metadata().snapshots().count(), 1);
    assert_eq!(landed_through(table.metadata(), IDENTITY), 20);

    // Delivering the same WAL batches again lands nothing.
    let again = f.deliver_all_again()?;
    assert_eq!((again.rows, again.commits), (0, 0));
    assert_eq!(again.skipped_parts, 20);
    assert_eq!(f.rows()?, before);

    // And new batches still land once, after the compacted file.
    f.deliver_many(2, 50)?;
    assert_eq!(f.rows()?, expected_rows(1100));
    assert_eq!(landed_through(f.table()?.metadata(), IDENTITY), 22);
    Ok(())
}

/// A file of at least half the target size is not small: two of them would make a file over
/// the target, so they are left alone; under half, they are compacted.
#[test]
fn only_files_under_half_the_target_size_are_compacted() -> TestResult {
    let mut f = fixture(eager())?;
    f.deliver_many(6, 50)?;
    let sizes = f
        .live_files()?
        .iter()
        .map(|p| Ok(std::fs::metadata(local_path(p))?.len()))
        .collect::<Result<Vec<u64>, std::io::Error>>()?;
    let (smallest, largest) = (
        *sizes.iter().min().ok_or("no file")?,
        *sizes.iter().max().ok_or("no file")?,
    );
    let at = |target_file_size: u64| Policy {
        target_file_size,
        compact_min_files: 1,
        ..eager()
    };
    // Every file at least half the target, and under the target.
    let whole = at(2 * smallest);
    assert!(whole.target_file_size > largest, "{sizes:?}");
    let report = f.maintain(&whole)?;
    assert_eq!(report.files_compacted_from, 0, "{sizes:?}");
    assert_eq!(f.live_files()?.len(), 6);
    // Every file under half the target.
    let report = f.maintain(&at(2 * largest + 2))?;
    assert_eq!(report.files_compacted_from, 6, "{sizes:?}");
    assert!(f.live_files()?.len() < 6);
    assert_eq!(f.rows()?, expected_rows(300));
    Ok(())
}

#[test]
fn expiry_keeps_the_current_snapshot_and_the_landed_id() -> TestResult {
    let mut f = fixture(eager())?;
    f.deliver_many(5, 10)?;
    let policy = Policy {
        compact_min_files: usize::MAX,
        target_file_size: 0,
        ..eager()
    };
    let report = f.maintain(&policy)?;
    assert_eq!(report.snapshots_expired, 4);
    assert_eq!(report.files_compacted_from, 0);
    // Appends remove no file: every data file is still live, none was deleted.
    assert_eq!(files_in(&f.table_dir().join("data"), ".parquet"), 5);
    let table = f.table()?;
    assert_eq!(table.metadata().snapshots().count(), 1);
    let summary_max = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            s.summary()
                .additional_properties
                .get(crate::sinks::iceberg::SUMMARY_LAST_BATCH)
                .cloned()
        })
        .collect::<Vec<_>>();
    assert_eq!(summary_max, vec!["5".to_owned()]);
    assert_eq!(landed_through(table.metadata(), IDENTITY), 5);
    assert_eq!(f.rows()?, expected_rows(50));

    // Expire the last delivery snapshot too (behind a compaction): the property alone says 5.
    f.maintain(&eager())?;
    let table = f.table()?;
    assert!(table.metadata().snapshots().all(|s| {
        !s.summary()
            .additional_properties
            .contains_key(crate::sinks::iceberg::SUMMARY_LAST_BATCH)
    }));
    assert_eq!(landed_through(table.metadata(), IDENTITY), 5);
    assert_eq!(f.deliver_all_again()?.rows, 0);
    assert_eq!(f.rows()?, expected_rows(50));
    Ok(())
}

#[test]
fn the_policy_keeps_the_newest_snapshots_and_those_current_within_the_age() -> TestResult {
    let mut f = fixture(eager())?;
    f.deliver_many(8, 1)?;
    let table = f.table()?;
    let md = table.metadata();
    let policy = Policy {
        retain_last: 3,
        max_snapshot_age: Duration::from_secs(3600),
        ..Policy::default()
    };
    let now = now_ms();
    assert_eq!(expire::expirable(md, &policy, now), Some(vec![]));
    let later = now + 2 * 3600 * 1000;
    let ids = expire::expirable(md, &policy, later).ok_or("refs")?;
    assert_eq!(ids.len(), 5);
    let current = md.current_snapshot_id().ok_or("current")?;
    assert!(!ids.contains(&current));
    let history: Vec<i64> = expire::history(md)
        .iter()
        .map(|s| s.snapshot_id())
        .collect();
    assert_eq!(ids, history[3..].to_vec(), "the oldest go");
    let one = Policy {
        retain_last: 0,
        ..policy
    };
    assert_eq!(
        expire::expirable(md, &one, later).map(|i| i.len()),
        Some(7),
        "the current snapshot always stays"
    );
    Ok(())
}

#[test]
fn orphans_go_only_once_old_and_live_files_never() -> TestResult {
    let mut f = fixture(eager())?;
    f.deliver_many(3, 10)?;
    let data = f.table_dir().join("data");
    let orphan = data.join("b99-b99-00000-crashed.parquet");
    std::fs::write(&orphan, b"PAR1 half a file")?;
    let keep_orphans = Policy {
        compact_min_files: usize::MAX,
        target_file_size: 0,
        ..eager()
    };
    f.maintain(&keep_orphans)?;
    assert!(orphan.exists(), "a young orphan may be a commit in flight");
    let report = f.maintain(&Policy {
        orphan_min_age: Duration::ZERO,
        ..keep_orphans.clone()
    })?;
    assert!(!orphan.exists());
    assert_eq!(report.files_deleted, 1);
    assert_eq!(files_in(&data, ".parquet"), 3);
    assert_eq!(f.rows()?, expected_rows(30));
    Ok(())
}

#[test]
fn old_metadata_versions_go_but_never_the_current_or_the_hinted() -> TestResult {
    let mut f = fixture(eager())?;
    f.deliver_many(6, 1)?;
    let metadata = f.table_dir().join("metadata");
    let versions = || files_in(&metadata, ".metadata.json");
    // v1 creation, then one commit per delivery.
    assert_eq!(versions(), 7);
    let policy = Policy {
        compact_min_files: usize::MAX,
        target_file_size: 0,
        retain_metadata_versions: 2,
        ..eager()
    };
    f.maintain(&policy)?;
    // The expiry made v8; v6 and v7 are kept besides it.
    let mut left: Vec<String> = std::fs::read_dir(&metadata)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec!["v6.metadata.json", "v7.metadata.json", "v8.metadata.json"]
    );
    assert_eq!(
        std::fs::read_to_string(metadata.join("version-hint.text"))?,
        "8"
    );
    assert_eq!(f.rows()?, expected_rows(6));
    Ok(())
}

#[test]
fn deliveries_compact_and_expire_on_their_own_once_thresholds_are_crossed() -> TestResult {
    maintaining_on_their_own(&mut fixture(auto())?)
}

/// Maintains after deliveries: compacts over 4 small files, keeps 2 snapshots.
fn auto() -> Policy {
    Policy {
        auto: true,
        retain_last: 2,
        max_snapshot_age: Duration::ZERO,
        compact_min_files: 4,
        ..Policy::default()
    }
}

/// Deliveries under [`auto`]: they compact and expire on their own.
fn maintaining_on_their_own(f: &mut Fixture) -> TestResult {
    f.deliver_many(4, 5)?;
    assert_eq!(f.live_files()?.len(), 4, "not over the threshold yet");
    f.deliver_many(1, 5)?;
    assert_eq!(
        f.live_files()?.len(),
        1,
        "five small files compacted after the fifth"
    );
    f.deliver_many(30, 5)?;
    let table = f.table()?;
    assert!(f.live_files()?.len() <= 5);
    assert!(
        table.metadata().snapshots().count() < 2 + AUTO_EXPIRE_BATCH + 1,
        "expired in batches: {}",
        table.metadata().snapshots().count()
    );
    assert!(f.files("data", ".parquet")? < 20);
    assert_eq!(f.rows()?, expected_rows(175));
    assert_eq!(landed_through(table.metadata(), IDENTITY), 35);
    Ok(())
}

#[test]
fn a_compaction_that_loses_to_a_concurrent_commit_changes_nothing() -> TestResult {
    maintenance_losing_to_a_delivery(&mut fixture(eager())?)
}

/// A delivery commits between maintenance's read of the table and its commit: compaction
/// and expiry give up, the compaction's files are deleted, nothing is lost.
fn maintenance_losing_to_a_delivery(f: &mut Fixture) -> TestResult {
    f.deliver_many(5, 10)?;
    let stale = f.table()?;
    f.deliver_many(1, 10)?;
    let avro = f.files("metadata", ".avro")?;
    let catalog = f.sink.catalog();
    let done = f
        .sink
        .block_on(compact::compact(&catalog, &stale, &eager(), 1))?;
    assert!(done.is_none(), "the commit must fail on the moved snapshot");
    assert_eq!(f.live_files()?.len(), 6);
    assert_eq!(
        f.files("data", ".parquet")?,
        6,
        "the abandoned rewrite left no file"
    );
    assert_eq!(
        f.files("metadata", ".avro")?,
        avro,
        "nor a manifest or manifest list"
    );
    let ids = expire::expirable(stale.metadata(), &eager(), now_ms()).ok_or("refs")?;
    assert_eq!(ids.len(), 4);
    let expired = f.sink.block_on(expire::expire(&catalog, &stale, &ids))?;
    assert!(expired.is_none(), "expiry gives up too");
    assert_eq!(f.table()?.metadata().snapshots().count(), 6);
    assert_eq!(f.rows()?, expected_rows(60));
    assert_eq!(landed_through(f.table()?.metadata(), IDENTITY), 6);
    Ok(())
}

#[test]
fn files_written_before_a_struct_gained_a_field_compact_with_nulls() -> TestResult {
    let mut f = fixture(eager())?;
    let s1 = schema_of(vec![
        Field::new("id", FieldType::Int),
        Field::new(
            "s",
            FieldType::Struct(vec![Field::new("x", FieldType::Int)]),
        ),
    ]);
    let fields1 = Fields::from(vec![ArrowField::new("x", DataType::Int32, true)]);
    let b1 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("id", DataType::Int32, true),
            ArrowField::new("s", DataType::Struct(fields1.clone()), true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StructArray::try_new(
                fields1,
                vec![Arc::new(Int32Array::from(vec![10, 20]))],
                None,
            )?),
        ],
    )?;
    f.wal.append(b"p1", &[part(b1, 1)])?;
    let all = f.wal.batches().to_vec();
    f.sink.deliver(&all, &mut |id| f.wal.read(id), &s1)?;
    let s2 = schema_of(vec![
        Field::new("id", FieldType::Int),
        Field::new(
            "s",
            FieldType::Struct(vec![
                Field::new("x", FieldType::Int),
                Field::new("y", FieldType::String),
            ]),
        ),
    ]);
    let fields2 = Fields::from(vec![
        ArrowField::new("x", DataType::Int32, true),
        ArrowField::new("y", DataType::Utf8, true),
    ]);
    let b2 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("id", DataType::Int32, true),
            ArrowField::new("s", DataType::Struct(fields2.clone()), true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![3])),
            Arc::new(StructArray::try_new(
                fields2,
                vec![
                    Arc::new(Int32Array::from(vec![30])),
                    Arc::new(StringArray::from(vec!["why"])),
                ],
                None,
            )?),
        ],
    )?;
    f.wal.append(b"p2", &[part(b2, 2)])?;
    let all = f.wal.batches().to_vec();
    f.sink.deliver(&all, &mut |id| f.wal.read(id), &s2)?;
    assert_eq!(f.live_files()?.len(), 2);

    let report = f.maintain(&eager())?;
    assert_eq!(
        (report.files_compacted_from, report.files_compacted_to),
        (2, 1)
    );
    let files = f.live_files()?;
    assert_eq!(files.len(), 1);
    let file = std::fs::File::open(local_path(&files[0]))?;
    let mut seen = Vec::new();
    for batch in
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?.build()?
    {
        let batch = batch?;
        let ids = batch
            .column_by_name("id")
            .ok_or("id")?
            .as_primitive::<Int32Type>();
        let s = batch.column_by_name("s").ok_or("s")?.as_struct();
        let x = s
            .column_by_name("x")
            .ok_or("x")?
            .as_primitive::<Int32Type>();
        let y = s.column_by_name("y").ok_or("y")?.as_string::<i32>();
        for i in 0..batch.num_rows() {
            let y = (!y.is_null(i)).then(|| y.value(i).to_owned());
            seen.push((ids.value(i), x.value(i), y));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (1, 10, None),
            (2, 20, None),
            (3, 30, Some("why".to_owned()))
        ]
    );
    assert_eq!(landed_through(f.table()?.metadata(), IDENTITY), 2);
    drop(f.dir);
    Ok(())
}

mod s3;
