use std::collections::BTreeMap;

use arrow::array::{Array, Int64Array, RecordBatch, StringArray};

use super::*;
use crate::schema::{Field, FieldType, NamespaceSchema};
use crate::wal::{BatchPart, PartMeta};

fn schema() -> PipelineSchema {
    PipelineSchema {
        format_version: PipelineSchema::FORMAT_VERSION,
        workspace: "w".into(),
        pipeline: "p".into(),
        namespaces: BTreeMap::from([(
            "events".to_owned(),
            NamespaceSchema {
                fields: vec![
                    Field::new("id", FieldType::Long),
                    Field::new("region", FieldType::String),
                    Field::new("userId", FieldType::String),
                ],
                records: 0,
            },
        )]),
    }
}

/// Batch `id` with ids `id*10 .. id*10+n`, regions alternating `eu`/`us/east`.
fn batch(id: u64, n: i64) -> (BatchMeta, BatchPart) {
    let ids: Vec<i64> = (0..n).map(|i| id as i64 * 10 + i).collect();
    let regions: Vec<&str> = (0..n)
        .map(|i| if i % 2 == 0 { "eu" } else { "us/east" })
        .collect();
    let users: Vec<String> = ids.iter().map(|i| format!("u{i}")).collect();
    let arrow = crate::schema::to_arrow_schema(&schema().namespaces["events"].fields);
    let rows = RecordBatch::try_new(
        Arc::new(arrow),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(regions)),
            Arc::new(StringArray::from(users)),
        ],
    )
    .unwrap();
    (
        BatchMeta {
            id: BatchId(id),
            position: Vec::new(),
            parts: vec![PartMeta {
                namespace: "events".into(),
                schema_version: 1,
                rows: n as u64,
            }],
            segment: 1,
            offset: 0,
            bytes: 100,
        },
        BatchPart {
            namespace: "events".into(),
            schema_version: 1,
            batch: rows,
        },
    )
}

fn layout() -> Layout {
    Layout {
        partition_fields: vec!["region".into()],
        ..Layout::default()
    }
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push(
            entry
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    out.sort();
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn parquet_ids(dir: &std::path::Path) -> Vec<i64> {
    let mut ids = Vec::new();
    for path in walk(dir) {
        if path.extension().is_some_and(|e| e == "parquet") {
            let file = std::fs::File::open(&path).unwrap();
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap();
            for b in reader {
                let b = b.unwrap();
                let col = b.column_by_name("id").unwrap();
                let col = col.as_any().downcast_ref::<Int64Array>().unwrap();
                ids.extend(col.values().iter().copied());
            }
        }
    }
    ids.sort();
    ids
}

fn deliver(sink: &FileSink, all: &[(BatchMeta, BatchPart)], ids: &[u64]) -> Delivered {
    let metas: Vec<BatchMeta> = all
        .iter()
        .filter(|(m, _)| ids.contains(&m.id.0))
        .map(|(m, _)| m.clone())
        .collect();
    let mut read = |id: BatchId| {
        Ok(all
            .iter()
            .filter(|(m, _)| m.id == id)
            .map(|(_, p)| p.clone())
            .collect())
    };
    sink.write(&metas, &mut read, &schema(), &|_| Ok(()))
        .unwrap()
}

/// Files are named by pipeline, batch and part under escaped Hive directories; a second
/// delivery skips what landed; a delivery redone after a crash before the marker, grouped
/// differently, writes the same names again: every row once.
#[test]
fn a_retried_delivery_grouped_differently_overwrites_and_never_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let target: Arc<dyn ObjectTarget> = Arc::new(DirTarget::new(dir.path().to_path_buf()));
    let sink = FileSink::with_target(
        "out",
        Arc::clone(&target),
        "default#w#p",
        OutputFormat::Parquet,
        layout(),
    );
    let all: Vec<_> = (1..=3).map(|id| batch(id, 3)).collect();
    let first = deliver(&sink, &all, &[1, 2, 3]);
    assert_eq!((first.rows, first.files, first.commits), (9, 6, 1));
    assert_eq!(sink.landed("events").unwrap(), 3);
    assert_eq!(sink.landed_any().unwrap(), 3);
    let names = files(dir.path());
    assert!(
        names.contains(
            &"events/region=us%2Feast/default_w_p-b00000000000000000002-p000.parquet".to_owned()
        ),
        "{names:?}"
    );
    assert!(names.contains(&"_skippr/landed/default_w_p/events".to_owned()));
    assert_eq!(parquet_ids(dir.path()).len(), 9);
    assert_eq!(sink.landed_tables().unwrap(), ["events"]);
    assert_eq!(
        sink.batch_of("default_w_p-b00000000000000000002-p000.parquet"),
        Some(2)
    );
    assert_eq!(
        sink.batch_of(".default_w_p-b00000000000000000002-p000.parquet.x.tmp"),
        None
    );
    assert_eq!(
        sink.batch_of("other-b00000000000000000002-p000.parquet"),
        None
    );

    let again = deliver(&sink, &all, &[1, 2, 3]);
    assert_eq!((again.rows, again.skipped_rows, again.files), (0, 9, 0));

    // A crash before the marker: the marker is back at 1; the retry delivers 2 and 3 in
    // other groups ([2], then [3]), rewriting the same names.
    target
        .put_whole("_skippr/landed/default_w_p/events", b"1".to_vec())
        .unwrap();
    let retry_a = deliver(&sink, &all, &[1, 2]);
    let retry_b = deliver(&sink, &all, &[3]);
    assert_eq!(retry_a.rows + retry_b.rows, 6);
    assert_eq!(files(dir.path()), names, "the same files, no new names");
    let expected: Vec<i64> = [10, 11, 12, 20, 21, 22, 30, 31, 32].into();
    assert_eq!(parquet_ids(dir.path()), expected);
}

#[test]
fn jsonl_and_csv_files_hold_every_row() {
    for format in [OutputFormat::Jsonl, OutputFormat::Csv] {
        let dir = tempfile::tempdir().unwrap();
        let target: Arc<dyn ObjectTarget> = Arc::new(DirTarget::new(dir.path().to_path_buf()));
        let sink = FileSink::with_target("out", target, "t#w#p", format, Layout::default());
        let all = vec![batch(1, 4)];
        deliver(&sink, &all, &[1]);
        let name = dir.path().join(format!(
            "events/t_w_p-b00000000000000000001-p000.{}",
            encode::extension(format)
        ));
        let text = std::fs::read_to_string(&name).unwrap();
        let lines = text.lines().count();
        assert_eq!(
            lines,
            if format == OutputFormat::Csv { 5 } else { 4 },
            "{text}"
        );
        assert!(text.contains("u12"), "{text}");
    }
}

#[test]
fn glue_names_are_lowercase_and_keep_the_original_in_the_comment() {
    let arrow = crate::schema::to_arrow_schema(&schema().namespaces["events"].fields);
    let columns = hive_columns(&arrow, &["region".to_owned()]);
    let names: Vec<(&str, Option<&str>)> = columns
        .iter()
        .map(|c| (c.name.as_str(), c.comment.as_deref()))
        .collect();
    assert_eq!(names[0], ("id", None));
    assert!(names[1].0.starts_with("userid_"), "{names:?}");
    assert_eq!(names[1].1, Some("userId"));
    let (_, part) = batch(1, 2);
    let renamed = glue_batch(&part.batch).unwrap();
    assert_eq!(renamed.schema().field(2).name(), &columns[1].name);
    assert_eq!(renamed.column(2).len(), 2);
}

/// An `Athena` sink on moto, partitioned by a key with capitals (`Region`): the files carry
/// Glue's names and not the partition column, the Glue table lists the partition once, and a
/// delivery redone after a crash before the marker registers nothing twice.
#[test]
fn an_athena_sink_on_moto_renames_columns_and_drops_the_partition_column() {
    use crate::aws::testing::{bucket, moto};
    use crate::config::validate::{AthenaTarget, FileDestination};
    let aws = moto();
    let name = bucket(&aws, "files-athena");
    let database = format!("files_db_{}", &name[name.len() - 12..]);
    let dest = FileDestination {
        name: "a".into(),
        kind: FileDestinationKind::Athena(AthenaTarget {
            bucket: name.clone(),
            prefix: "lake".into(),
            database: database.clone(),
            region: None,
            catalog_id: None,
            workgroup: None,
            results_bucket: None,
            glue_cache_ttl: None,
            upload_concurrency: 3,
        }),
        format: OutputFormat::Parquet,
        layout: Layout {
            partition_fields: vec!["Region".into()],
            ..Layout::default()
        },
    };
    let sink = FileSink::for_destination(&dest, "t#w#p", Some(&aws)).unwrap();
    let mut schema = schema();
    let ns = schema.namespaces.get_mut("events").unwrap();
    ns.fields[1] = Field::new("Region", FieldType::String);
    let (meta, mut part) = batch(1, 4);
    let arrow = Arc::new(crate::schema::to_arrow_schema(&ns.fields));
    part.batch = RecordBatch::try_new(arrow, part.batch.columns().to_vec()).unwrap();
    let mut read = |_: BatchId| Ok(vec![part.clone()]);
    let delivered = sink
        .write(std::slice::from_ref(&meta), &mut read, &schema, &|_| Ok(()))
        .unwrap();
    assert_eq!((delivered.rows, delivered.files), (4, 2));
    let b = Bucket::new(&aws, &name, None);
    let key = "lake/events/region_".to_owned();
    let keys: Vec<String> = b.list(&key).unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    let bytes = b.get(&keys[0]).unwrap().unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        bytes::Bytes::from(bytes),
    )
    .unwrap();
    let columns: Vec<String> = reader
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(columns[0], "id");
    assert!(columns[1].starts_with("userid_"), "{columns:?}");
    assert_eq!(
        columns.len(),
        2,
        "the partition column is in the path only: {columns:?}"
    );
    // A crash before the marker: the retry writes the same two objects again.
    b.put(
        "lake/_skippr/landed/t_w_p/events",
        b"0".to_vec(),
        "text/plain",
    )
    .unwrap();
    sink.write(std::slice::from_ref(&meta), &mut read, &schema, &|_| Ok(()))
        .unwrap();
    assert_eq!(b.list(&key).unwrap(), keys);
    let glue = aws.glue();
    let partitions = aws
        .block_on(async {
            glue.get_partitions()
                .database_name(&database)
                .table_name("events")
                .send()
                .await
        })
        .unwrap();
    assert_eq!(partitions.partitions().len(), 2);
}

/// `discovery_cache_ttl_secs`: once a table's definition was read or written, a delivery with
/// columns the table is known to have sends no Glue request until the TTL passes; a new column
/// reads and updates the table. Without it, every delivery reads the table.
#[test]
fn a_glue_cache_ttl_spares_requests_for_known_columns_only() {
    use crate::aws::testing::{bucket, moto};
    use glue::HiveColumn;
    let aws = moto();
    let name = bucket(&aws, "glue-ttl");
    let database = format!("ttl_db_{}", &name[name.len() - 12..]);
    let col = |n: &str| HiveColumn {
        name: n.to_owned(),
        type_name: "bigint".to_owned(),
        comment: None,
    };
    let glue_requests = || aws.requests().get("glue").copied().unwrap_or(0);
    let location = format!("s3://{name}/t/");
    for (ttl, again) in [(None, 1), (Some(std::time::Duration::from_secs(600)), 0)] {
        let table = format!("t_{}", u8::from(ttl.is_some()));
        let glue = glue::HiveGlue::new(&aws, None, &database).with_cache_ttl(ttl);
        glue.ensure_database().unwrap();
        glue.ensure_table(&table, &location, &[col("a")], &[])
            .unwrap();
        let before = glue_requests();
        glue.ensure_table(&table, &location, &[col("a")], &[])
            .unwrap();
        assert_eq!(glue_requests() - before, again, "ttl {ttl:?}: same columns");
        // A sink opened anew (the next pass) shares what is known.
        let next = glue::HiveGlue::new(&aws, None, &database).with_cache_ttl(ttl);
        let before = glue_requests();
        next.ensure_table(&table, &location, &[col("a")], &[])
            .unwrap();
        assert_eq!(glue_requests() - before, again, "ttl {ttl:?}: next pass");
        // A new column always goes to Glue: read, then update.
        let before = glue_requests();
        next.ensure_table(&table, &location, &[col("a"), col("b")], &[])
            .unwrap();
        assert_eq!(glue_requests() - before, 2, "ttl {ttl:?}: a new column");
    }
}

/// A column the data widened (`int` -> `bigint`, a decimal's precision) is widened in Glue
/// too, through the cache; data narrower than its Glue column leaves the column as it is.
#[test]
fn a_column_the_data_widens_is_widened_in_glue() {
    use crate::aws::testing::{bucket, moto};
    use glue::HiveColumn;
    let aws = moto();
    let name = bucket(&aws, "glue-widen");
    let database = format!("widen_db_{}", &name[name.len() - 12..]);
    let col = |n: &str, t: &str| HiveColumn {
        name: n.to_owned(),
        type_name: t.to_owned(),
        comment: None,
    };
    let location = format!("s3://{name}/t/");
    let glue = glue::HiveGlue::new(&aws, None, &database)
        .with_cache_ttl(Some(std::time::Duration::from_secs(600)));
    glue.ensure_database().unwrap();
    let types = || -> Vec<(String, String)> {
        let table = glue.get_table("t").unwrap().unwrap();
        table
            .storage_descriptor()
            .unwrap()
            .columns()
            .iter()
            .map(|c| (c.name().to_owned(), c.r#type().unwrap().to_owned()))
            .collect()
    };
    let pair = |n: &str, t: &str| (n.to_owned(), t.to_owned());
    glue.ensure_table(
        "t",
        &location,
        &[col("a", "int"), col("p", "decimal(10,2)")],
        &[],
    )
    .unwrap();
    glue.ensure_table(
        "t",
        &location,
        &[col("a", "bigint"), col("p", "decimal(14,2)")],
        &[],
    )
    .unwrap();
    assert_eq!(types(), [pair("a", "bigint"), pair("p", "decimal(14,2)")]);
    glue.ensure_table(
        "t",
        &location,
        &[col("a", "int"), col("p", "decimal(12,2)")],
        &[],
    )
    .unwrap();
    assert_eq!(types(), [pair("a", "bigint"), pair("p", "decimal(14,2)")]);
}

/// A target whose data-file uploads wait (up to 5 s) for `expect` of them to be in flight at
/// once, and which records the most it saw.
#[derive(Debug)]
struct Overlapping {
    inner: DirTarget,
    expect: usize,
    state: std::sync::Mutex<(usize, usize)>,
    changed: std::sync::Condvar,
}

impl ObjectTarget for Overlapping {
    fn put_whole(&self, name: &str, bytes: Vec<u8>) -> Result<(), crate::objects::ObjectError> {
        if name.ends_with(".parquet") {
            let mut state = self.state.lock().unwrap();
            state.0 += 1;
            state.1 = state.1.max(state.0);
            self.changed.notify_all();
            let (mut state, _) = self
                .changed
                .wait_timeout_while(state, std::time::Duration::from_secs(5), |s| {
                    s.0 < self.expect && s.1 < self.expect
                })
                .unwrap();
            state.0 -= 1;
        }
        self.inner.put_whole(name, bytes)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, crate::objects::ObjectError> {
        self.inner.list(dir)
    }
    fn list_below(&self, dir: &str) -> Result<Vec<String>, crate::objects::ObjectError> {
        self.inner.list_below(dir)
    }
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, crate::objects::ObjectError> {
        self.inner.get(name)
    }
    fn move_to(&self, from: &str, to: &str) -> Result<(), crate::objects::ObjectError> {
        self.inner.move_to(from, to)
    }
    fn location_of(&self, name: &str) -> String {
        self.inner.location_of(name)
    }
}

/// `max_concurrency`: a delivery's files are uploaded that many at a time, and every row still
/// lands once, each table's marker after its files.
#[test]
fn files_are_uploaded_max_concurrency_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let target = Arc::new(Overlapping {
        inner: DirTarget::new(dir.path().to_path_buf()),
        expect: 3,
        state: std::sync::Mutex::new((0, 0)),
        changed: std::sync::Condvar::new(),
    });
    let as_target: Arc<dyn ObjectTarget> = target.clone();
    let sink = FileSink::with_target("out", as_target, "t#w#p", OutputFormat::Parquet, layout())
        .with_uploads(3);
    let all: Vec<_> = (1..=3).map(|id| batch(id, 3)).collect();
    let delivered = deliver(&sink, &all, &[1, 2, 3]);
    assert_eq!((delivered.rows, delivered.files), (9, 6));
    assert_eq!(
        target.state.lock().unwrap().1,
        3,
        "uploads in flight at once"
    );
    assert_eq!(parquet_ids(dir.path()).len(), 9);
    assert_eq!(sink.landed("events").unwrap(), 3);
}
