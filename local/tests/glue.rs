//! The `AthenaIceberg` destination against a local AWS (the moto server `tests/run` starts):
//! Iceberg tables in an S3 bucket, registered in Glue, read back by PyIceberg's
//! `GlueCatalog` and boto3 (`tests/readers/read_glue_table.py`), never by skipprd's own code.
//!
//! - the sink: batches delivered, the schema evolved (a new column, int -> long), Glue's
//!   `table_type`, `metadata_location` and columns checked, every row read back, and a
//!   redelivery of the same WAL batches landing nothing twice;
//! - the CLI: `skipprd sync` of a JSON-lines file twice with new data, exact counts.
//!
//! moto does not enforce Glue's `VersionId` on `UpdateTable`, so the compare-and-swap race is
//! tested against an in-process double instead (`shared/src/sinks/iceberg/tests.rs`).
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
use std::process::{Command, Stdio};
use std::sync::Arc;

use arrow::array::{Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field as ArrowField, Schema};
use serde_json::{Value, json};
use skipprd::aws::Aws;
use skipprd::schema::{Field, FieldType, NamespaceSchema, PipelineSchema};
use skipprd::sinks::iceberg::IcebergSink;
use skipprd::sinks::{LakeCatalog, LakeLocation};
use skipprd::wal::{BatchPart, DiskWal, WalOptions};

fn create_bucket(aws: &Aws, bucket: &str) {
    let s3 = aws.s3(None);
    aws.block_on(async { s3.create_bucket().bucket(bucket).send().await })
        .unwrap();
}

/// Read the Glue tables `tables` of `database` with PyIceberg's `GlueCatalog` and boto3.
fn read_glue(database: &str, tables: &[&str], flags: &[&str]) -> Value {
    endpoint();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_glue_table.py");
    let out = Command::new(reader_python())
        .arg(&script)
        .args(["--database", database])
        .args(flags)
        .args(tables)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    parsed["tables"].clone()
}

fn schema(fields: Vec<Field>) -> PipelineSchema {
    let mut schema = PipelineSchema::empty("p", "w");
    schema
        .namespaces
        .insert("events".to_owned(), NamespaceSchema { fields, records: 0 });
    schema
}

fn deliver(sink: &IcebergSink, wal: &DiskWal, schema: &PipelineSchema) -> (u64, u64) {
    let batches = wal.batches().to_vec();
    let delivered = sink
        .deliver(&batches, &mut |id| wal.read(id), schema)
        .unwrap();
    (delivered.rows, delivered.commits)
}

#[test]
fn the_glue_sink_lands_evolves_and_never_lands_a_batch_twice_on_s3() {
    endpoint();
    let aws = Aws::load(None).unwrap();
    let bucket = unique("lake");
    let database = unique("db_");
    create_bucket(&aws, &bucket);
    let location = LakeLocation {
        warehouse: format!("s3://{bucket}/warehouse"),
        namespace: database.clone(),
        catalog: LakeCatalog::Glue {
            region: None,
            catalog_id: None,
        },
    };
    let open = || {
        IcebergSink::with_catalog(
            location.catalog("lake", None).unwrap(),
            &database,
            "t#w#p".into(),
        )
        .unwrap()
    };
    let sink = open();
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = DiskWal::open(
        &dir.path().join("wal"),
        WalOptions {
            fsync: false,
            ..WalOptions::default()
        },
    )
    .unwrap();

    // Pass 1: id int, name string (the Glue database does not exist yet).
    let v1 = Arc::new(Schema::new(vec![
        ArrowField::new("id", DataType::Int32, true),
        ArrowField::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        v1,
        vec![
            Arc::new(Int32Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .unwrap();
    wal.append(b"p1", &[part(batch)]).unwrap();
    let s1 = schema(vec![
        Field::new("id", FieldType::Int),
        Field::new("name", FieldType::String),
    ]);
    assert_eq!(deliver(&sink, &wal, &s1), (3, 1));

    // Pass 2: id becomes long, a new column `extra`.
    let v2 = Arc::new(Schema::new(vec![
        ArrowField::new("extra", DataType::Utf8, true),
        ArrowField::new("id", DataType::Int64, true),
        ArrowField::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        v2,
        vec![
            Arc::new(StringArray::from(vec!["x", "y"])),
            Arc::new(Int64Array::from(vec![5_000_000_000, 4])),
            Arc::new(StringArray::from(vec![None, Some("d")])),
        ],
    )
    .unwrap();
    wal.append(b"p2", &[part(batch)]).unwrap();
    let s2 = schema(vec![
        Field::new("extra", FieldType::String),
        Field::new("id", FieldType::Long),
        Field::new("name", FieldType::String),
    ]);
    assert_eq!(
        deliver(&sink, &wal, &s2),
        (2, 1),
        "only the new batch is written"
    );

    let tables = read_glue(&database, &["events"], &["--values", "--key", "id"]);
    let table = &tables["events"];
    let glue = &table["glue"];
    assert_eq!(glue["parameters"]["table_type"], "ICEBERG");
    let metadata_location = glue["parameters"]["metadata_location"].as_str().unwrap();
    assert!(
        metadata_location.starts_with(&format!(
            "s3://{bucket}/warehouse/{database}/events/metadata/0000"
        )) && metadata_location.ends_with(".metadata.json"),
        "{metadata_location}"
    );
    assert!(
        glue["parameters"]["previous_metadata_location"]
            .as_str()
            .is_some_and(|p| p != metadata_location && p.contains("/metadata/")),
        "{glue}"
    );
    assert_eq!(
        glue["location"],
        format!("s3://{bucket}/warehouse/{database}/events")
    );
    let mut glue_columns: Vec<(String, String)> = glue["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c[0].as_str().unwrap().into(), c[1].as_str().unwrap().into()))
        .collect();
    glue_columns.sort();
    assert_eq!(
        glue_columns,
        vec![
            ("extra".to_owned(), "string".to_owned()),
            ("id".to_owned(), "bigint".to_owned()),
            ("name".to_owned(), "string".to_owned()),
        ],
        "Glue's columns follow the evolved schema"
    );
    let reader = &table["pyiceberg"];
    assert_eq!(reader["rows"], 5);
    assert_eq!(
        reader["values"],
        json!([
            {"id": 1, "name": "a", "extra": null},
            {"id": 2, "name": "b", "extra": null},
            {"id": 3, "name": "c", "extra": null},
            {"id": 4, "name": "d", "extra": "y"},
            {"id": 5_000_000_000_i64, "name": null, "extra": "x"},
        ])
    );
    let id_type = reader["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == "id")
        .map(|c| c[1].clone());
    assert_eq!(id_type, Some(json!("long")));
    let last_summary = reader["summaries"].as_array().unwrap().last().unwrap();
    assert_eq!(last_summary["skippr.last-batch-id"], "2");

    // The acknowledgement was lost: a new sink (a restarted process) delivers the same WAL
    // batches again. Nothing lands twice and Glue still points at the same metadata.
    let again = open();
    assert_eq!(deliver(&again, &wal, &s2), (0, 0));
    let tables = read_glue(&database, &["events"], &[]);
    assert_eq!(tables["events"]["pyiceberg"]["rows"], 5);
    assert_eq!(
        tables["events"]["glue"]["parameters"]["metadata_location"],
        metadata_location
    );
    // Maintenance runs on an S3 warehouse too, and every row stays readable once.
    let report = again.maintain_all().unwrap();
    println!("maintenance on S3: {report:?}");
    let after = read_glue(&database, &["events"], &["--values", "--key", "id"]);
    assert_eq!(after["events"]["pyiceberg"]["rows"], 5);
    assert_eq!(after["events"]["pyiceberg"]["values"], reader["values"]);
}

fn part(batch: RecordBatch) -> BatchPart {
    BatchPart {
        namespace: "events".to_owned(),
        schema_version: 1,
        batch,
    }
}

fn skipprd(dir: &Path) -> Command {
    let mut cmd = skipprd_command(dir);
    cmd.args(["sync", "--once", "--output", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
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

#[test]
fn skipprd_sync_into_athena_iceberg_on_moto_twice_counts_exactly() {
    endpoint();
    let aws = Aws::load(None).unwrap();
    let bucket = unique("cli");
    let database = unique("shop_");
    create_bucket(&aws, &bucket);
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("input")).unwrap();
    std::fs::write(
        project.path().join("skippr.yml"),
        format!(
            "\
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
    AthenaIceberg:
      warehouse: s3://{bucket}/lake
      glue_database_name: {database}
      region: us-east-1
"
        ),
    )
    .unwrap();
    let record = |i: u64, kind: &str| json!({"kind": kind, "id": i, "note": format!("n{i}")});
    write_lines(
        &project.path().join("input/a.jsonl"),
        (0..30).map(|i| record(i, if i % 3 == 0 { "refund" } else { "order" })),
    );
    let run = |what: &str| {
        let out = skipprd(project.path()).output().unwrap();
        assert!(
            out.status.success(),
            "{what}: sync failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    };
    run("first sync");
    let tables = read_glue(&database, &["order", "refund"], &[]);
    assert_eq!(tables["order"]["pyiceberg"]["rows"], 20);
    assert_eq!(tables["refund"]["pyiceberg"]["rows"], 10);

    write_lines(
        &project.path().join("input/b.jsonl"),
        (30..45).map(|i| record(i, "order")),
    );
    run("second sync");
    let tables = read_glue(&database, &["order", "refund"], &["--key", "id"]);
    assert_eq!(tables["order"]["pyiceberg"]["rows"], 35);
    assert_eq!(tables["refund"]["pyiceberg"]["rows"], 10);
    assert_eq!(
        tables["order"]["glue"]["parameters"]["table_type"],
        "ICEBERG"
    );

    // A sync with nothing new lands nothing.
    run("third sync");
    let tables = read_glue(&database, &["order"], &[]);
    assert_eq!(tables["order"]["pyiceberg"]["rows"], 35);
}

#[test]
fn s3_file_io_streams_multipart_reads_ranges_and_deletes_prefixes_on_moto() {
    use skipprd::sinks::iceberg::s3::{PART_SIZE, s3_file_io};
    endpoint();
    let aws = Aws::load(None).unwrap();
    let bucket = unique("io");
    create_bucket(&aws, &bucket);
    let io = s3_file_io(&aws, None);
    let big = format!("s3://{bucket}/t/data/big.bin");
    let small = format!("s3://{bucket}/t/metadata/small.json");
    let keep = format!("s3://{bucket}/other/keep.json");
    // Bigger than one part: a multipart upload of two parts.
    let bytes: Vec<u8> = (0..PART_SIZE + 1000).map(|i| (i % 251) as u8).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut w = io.new_output(&big).unwrap().writer().await.unwrap();
        for chunk in bytes.chunks(1 << 20) {
            w.write(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        assert!(
            !io.exists(&big).await.unwrap(),
            "nothing is visible before close"
        );
        w.close().await.unwrap();
        io.new_output(&small)
            .unwrap()
            .write(bytes::Bytes::from_static(b"{}"))
            .await
            .unwrap();
        io.new_output(&keep)
            .unwrap()
            .write(bytes::Bytes::from_static(b"[]"))
            .await
            .unwrap();

        let input = io.new_input(&big).unwrap();
        assert_eq!(input.metadata().await.unwrap().size, bytes.len() as u64);
        assert_eq!(input.read().await.unwrap().as_ref(), bytes.as_slice());
        let reader = input.reader().await.unwrap();
        let start = PART_SIZE as u64 - 10;
        let range = reader.read(start..start + 20).await.unwrap();
        assert_eq!(range.as_ref(), &bytes[start as usize..start as usize + 20]);

        // The upload named CRC32, sent it with each part and listed the parts' CRC32s on
        // completion (issue 21: a mix of part checksums and none may be refused by S3): the
        // object carries the composite checksum of its two parts.
        let head = aws
            .s3(None)
            .head_object()
            .bucket(&bucket)
            .key("t/data/big.bin")
            .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        assert!(
            head.checksum_crc32().is_some(),
            "the object keeps the CRC32 its upload named: {head:?}"
        );

        io.delete_prefix(&format!("s3://{bucket}/t")).await.unwrap();
        assert!(!io.exists(&big).await.unwrap());
        assert!(!io.exists(&small).await.unwrap());
        assert!(io.exists(&keep).await.unwrap(), "outside the prefix");
        io.delete(&keep).await.unwrap();
        assert!(!io.exists(&keep).await.unwrap());
    });
}
