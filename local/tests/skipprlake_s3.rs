//! The `SkipprLake` destination on S3 against a local AWS (the moto server `tests/run`
//! starts): Iceberg tables in an `s3://` warehouse whose catalog pointers are items in the
//! DynamoDB state-store table (partition `catalog#{warehouse}`, sort key
//! `table#{namespace}/{table}`), swapped by compare-and-swap.
//!
//! `skipprd store create`, then `skipprd sync` twice with new data (WAL in S3, state and lease
//! in DynamoDB); the tables are read back by PyIceberg's `StaticTable.from_metadata` at the
//! metadata location of the DynamoDB pointer item (`tests/readers/read_s3_table.py`), never
//! by skipprd's own code; and by `skipprd query`, whose local engine reads the landed files
//! from S3 (it reads a disk WAL only, so it runs with the disk setting, where this project has
//! no WAL, after every batch was delivered).
//!
//! The pointer's compare-and-swap itself runs against DynamoDB here too (a stale writer loses
//! and its metadata object is deleted from S3); the race of two committers is tested against
//! the memory store in `shared/src/sinks/iceberg/tests.rs`.
//!
//! Needs `SKIPPR_TEST_AWS_ENDPOINT` (and the `AWS_*` variables) from `bash tests/run`, and the
//! reader venv (`SKIPPR_TEST_PYTHON`); without them these tests fail and say so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
#[path = "common/local_aws.rs"]
mod local_aws;
use bin::skipprd_command;

use local_aws::{endpoint, reader_python, unique};

use std::path::Path;
use std::process::{Command, Output};

use std::sync::Arc;

use arrow::array::{Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field as ArrowField, Schema};
use serde_json::{Value, json};
use skipprd::aws::Aws;
use skipprd::schema::{Field, FieldType, NamespaceSchema, PipelineSchema};
use skipprd::sinks::iceberg::IcebergSink;
use skipprd::sinks::iceberg::catalog::{Pointer, StorePointer, TableRef};
use skipprd::sinks::{LakeCatalog, LakeLocation};
use skipprd::state::{DynamoStore, StateKey, StateStore};
use skipprd::wal::{BatchPart, DiskWal, WalOptions};

/// Run `skipprd args` in `dir`, its WAL in the S3 bucket `wal_bucket` when given.
fn skipprd(dir: &Path, args: &[&str], wal_bucket: Option<&str>) -> Output {
    let mut cmd = skipprd_command(dir);
    cmd.args(args);
    if let Some(bucket) = wal_bucket {
        cmd.env("WAL_STORAGE", "s3")
            .env("SKIPPR_WAL_S3_BUCKET", bucket);
    }
    cmd.env("SKIPPR_LEASE_TTL_SECONDS", "3");
    cmd.output().expect("run skipprd")
}

/// `skipprd sync --once` with the WAL in S3; returns its `sync_complete` event.
fn sync(dir: &Path, wal_bucket: &str, what: &str) -> Value {
    let out = skipprd(
        dir,
        &["sync", "--once", "--output", "json"],
        Some(wal_bucket),
    );
    succeeded(what, &out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| event["event"] == "sync_complete")
        .unwrap_or_else(|| panic!("{what}: no sync_complete event"))
}

fn succeeded(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

fn write_lines(path: &Path, records: impl Iterator<Item = Value>) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for r in records {
        writeln!(f, "{r}").unwrap();
    }
}

/// The pointer item of `table` in namespace `default` of `warehouse`: (item version, pointer
/// value), read straight from DynamoDB.
fn pointer(store: &DynamoStore, warehouse: &str, table: &str) -> (u64, Value) {
    let key = StateKey::new(
        format!("catalog#{warehouse}"),
        format!("table#default/{table}"),
    );
    let item = store
        .get(&key)
        .unwrap()
        .unwrap_or_else(|| panic!("no pointer item {key}"));
    (item.version, serde_json::from_slice(&item.value).unwrap())
}

/// PyIceberg's view of the table whose current metadata is `location`.
fn read_back(location: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_s3_table.py");
    let out = Command::new(reader_python())
        .arg(&script)
        .args(["--key", "id", location])
        .output()
        .unwrap();
    succeeded("read_s3_table.py", &out);
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    parsed["tables"][location].clone()
}

/// `skipprd query`'s count and distinct count of `id` in `events.{table}`.
///
/// `skipprd query` reads a disk WAL only (it refuses `WAL_STORAGE=s3`), so it runs with the
/// disk setting, where this project has no WAL: it reads the lake alone. The caller checks
/// that every batch was delivered first (`pending: 0`), so the lake holds every row.
fn query_counts(dir: &Path, table: &str) -> Value {
    let sql = format!("select count(*) as n, count(distinct id) as d from events.{table}");
    let out = skipprd(dir, &["query", "--plain", "-s", &sql], None);
    succeeded("skipprd query", &out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["rows"].clone()
}

#[test]
fn skipprd_sync_into_skipprlake_on_s3_with_pointers_in_dynamodb_twice_counts_exactly() {
    endpoint();
    let aws = Aws::load(None).unwrap();
    let bucket = unique("lake");
    let table = unique("skipprd-lake-");
    let s3 = aws.s3(None);
    aws.block_on(async { s3.create_bucket().bucket(&bucket).send().await })
        .unwrap();
    let warehouse = format!("s3://{bucket}/lake");
    let project = tempfile::tempdir().unwrap();
    let dir = project.path();
    std::fs::create_dir(dir.join("input")).unwrap();
    std::fs::write(
        dir.join("skippr.yml"),
        format!(
            "\
skippr:
  store:
    type: dynamodb
    name: {table}
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
    transform:
      namespace_fields: kind
data_sources:
  files:
    File:
      path: input
data_sinks:
  lake:
    SkipprLake:
      warehouse: {warehouse}
      region: us-east-1
"
        ),
    )
    .unwrap();

    let out = skipprd(dir, &["store", "create", "--output", "json"], Some(&bucket));
    succeeded("store create", &out);
    let store = DynamoStore::open(&aws, &table).unwrap();

    let record = |i: u64, kind: &str| json!({"kind": kind, "id": i, "note": format!("n{i}")});
    write_lines(
        &dir.join("input/a.jsonl"),
        (0..30).map(|i| record(i, if i % 3 == 0 { "refund" } else { "order" })),
    );
    let done = sync(dir, &bucket, "first sync");
    assert_eq!(
        (done["rows"].as_u64(), done["pending"].as_u64()),
        (Some(30), Some(0)),
        "{done}"
    );
    let (item_version, first) = pointer(&store, &warehouse, "order");
    assert_eq!(first["version"], 2, "created, then one append: {first}");
    assert_eq!(item_version, 2, "one swap per version");
    let first_location = first["location"].as_str().unwrap().to_owned();
    assert!(
        first_location.starts_with(&format!("{warehouse}/default/order/metadata/00002-")),
        "{first_location}"
    );
    let order = read_back(&first_location);
    assert_eq!(order["rows"], 20, "{order}");
    assert_eq!(order["duplicate_keys"], 0);
    let (_, refund) = pointer(&store, &warehouse, "refund");
    assert_eq!(read_back(refund["location"].as_str().unwrap())["rows"], 10);

    // New data: the second pass appends it once and swaps the pointer to the next version.
    write_lines(
        &dir.join("input/b.jsonl"),
        (30..45).map(|i| record(i, "order")),
    );
    let done = sync(dir, &bucket, "second sync");
    assert_eq!(
        (done["rows"].as_u64(), done["pending"].as_u64()),
        (Some(15), Some(0)),
        "{done}"
    );
    let (item_version, second) = pointer(&store, &warehouse, "order");
    assert_eq!((second["version"].as_u64(), item_version), (Some(3), 3));
    let order = read_back(second["location"].as_str().unwrap());
    assert_eq!(order["rows"], 35, "{order}");
    assert_eq!(order["duplicate_keys"], 0, "{order}");
    let expected: Vec<u64> = (0..45).filter(|i| i >= &30 || i % 3 != 0).collect();
    assert_eq!(order["keys"], json!(expected));
    assert_eq!(
        query_counts(dir, "order"),
        json!([[35, 35]]),
        "skipprd query counts what PyIceberg read"
    );
    assert_eq!(query_counts(dir, "refund"), json!([[10, 10]]));

    // A pass with nothing new swaps nothing.
    let done = sync(dir, &bucket, "third sync");
    assert_eq!(done["rows"].as_u64(), Some(0), "{done}");
    assert_eq!(pointer(&store, &warehouse, "order").0, 3);
    // The catalog partition holds the namespace and the two tables, nothing else.
    let items: Vec<String> = store
        .scan_prefix(&format!("catalog#{warehouse}"), "")
        .unwrap()
        .into_iter()
        .map(|(sort, _)| sort)
        .collect();
    assert_eq!(
        items,
        [
            "namespace#default",
            "table#default/order",
            "table#default/refund"
        ]
    );
}

#[test]
fn skipprlake_on_s3_with_the_embedded_store_and_no_catalog_table_is_a_config_error() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("skippr.yml"),
        "\
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
data_sources:
  files:
    File:
      path: input
data_sinks:
  lake:
    SkipprLake:
      warehouse: s3://bucket/lake
",
    )
    .unwrap();
    let mut cmd = skipprd_command(project.path());
    cmd.args(["sync", "--once"]);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for key in ["catalog_table", "skippr.store", "s3://bucket/lake"] {
        assert!(stderr.contains(key), "{key} not in: {stderr}");
    }
}

/// The S3 objects under `prefix` in `bucket`.
fn objects(aws: &Aws, bucket: &str, prefix: &str) -> Vec<String> {
    let s3 = aws.s3(None);
    let listed = aws
        .block_on(async {
            s3.list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .send()
                .await
        })
        .unwrap();
    listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect()
}

#[test]
fn the_dynamodb_pointer_refuses_a_stale_swap_and_deletes_the_losers_metadata_object() {
    endpoint();
    let aws = Aws::load(None).unwrap();
    let bucket = unique("cas");
    let table = unique("skipprd-cas-");
    let s3 = aws.s3(None);
    aws.block_on(async { s3.create_bucket().bucket(&bucket).send().await })
        .unwrap();
    skipprd::state::dynamodb::create_table(&aws, &table).unwrap();
    let location = LakeLocation {
        warehouse: format!("s3://{bucket}/wh"),
        namespace: "ns".to_owned(),
        catalog: LakeCatalog::Dynamo {
            table: table.clone(),
            region: None,
            files: None,
        },
    };
    let sink = IcebergSink::with_catalog(
        location.catalog("lake", Some(&aws)).unwrap(),
        "ns",
        "t#w#p".into(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = DiskWal::open(
        &dir.path().join("wal"),
        WalOptions {
            fsync: false,
            ..WalOptions::default()
        },
    )
    .unwrap();
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![ArrowField::new(
            "id",
            DataType::Int32,
            true,
        )])),
        vec![Arc::new(Int32Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    wal.append(
        b"p1",
        &[BatchPart {
            namespace: "events".to_owned(),
            schema_version: 1,
            batch,
        }],
    )
    .unwrap();
    let mut schema = PipelineSchema::empty("p", "w");
    schema.namespaces.insert(
        "events".to_owned(),
        NamespaceSchema {
            fields: vec![Field::new("id", FieldType::Int)],
            records: 0,
        },
    );
    let batches = wal.batches().to_vec();
    let delivered = sink
        .deliver(&batches, &mut |id| wal.read(id), &schema)
        .unwrap();
    assert_eq!(delivered.rows, 3);

    let catalog = sink.catalog();
    let Some(pointer) = catalog.pointer().downcast_ref::<StorePointer>() else {
        panic!("a SkipprLake on S3 has a store pointer");
    };
    assert_eq!(pointer.partition(), format!("catalog#s3://{bucket}/wh"));
    let ident = sink.table_ident("events");
    let table_location = catalog.table_location(&ident);
    let at = TableRef {
        ident: &ident,
        location: &table_location,
    };
    let read = sink.block_on(pointer.current(at)).unwrap().unwrap();
    assert_eq!(read.version, 2, "created, then one append");
    let loaded = sink
        .block_on(async {
            use iceberg::Catalog as _;
            catalog.load_table(&ident).await
        })
        .unwrap();
    // Two writers both read version 2: the first swap to 3 wins, the second is refused (here
    // by the pointer's re-read before its put; when both re-read before either puts, the
    // put's DynamoDB condition refuses it, which the store's conformance suite proves on this
    // server and the memory-store race tests prove for the pointer).
    let won = sink
        .block_on(pointer.publish(catalog.file_io(), at, Some(&read), loaded.metadata()))
        .unwrap();
    let lost = sink
        .block_on(pointer.publish(catalog.file_io(), at, Some(&read), loaded.metadata()))
        .unwrap_err();
    assert_eq!(lost.kind(), iceberg::ErrorKind::CatalogCommitConflicts);
    assert!(lost.retryable(), "{lost}");
    let version_3 = objects(&aws, &bucket, "wh/ns/events/metadata/00003-");
    assert_eq!(
        version_3.len(),
        1,
        "the loser's metadata object is deleted: {version_3:?}"
    );
    assert!(won.ends_with(&version_3[0]), "{won} vs {version_3:?}");
    let store = DynamoStore::open(&aws, &table).unwrap();
    let key = pointer.key(&ident);
    let item: Value = serde_json::from_slice(&store.get(&key).unwrap().unwrap().value).unwrap();
    assert_eq!(item, json!({"version": 3, "location": won}));
}
