//! Hostile partition values on a real warehouse: every value stays one escaped directory
//! inside the table, and many partitions never open more writers than the bound.

use std::sync::Arc;

use arrow::array::{Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field as ArrowField, Schema};
use futures::TryStreamExt;
use iceberg::Catalog;

use super::fanout::WriterLimits;
use super::*;
use crate::schema::{Field, FieldType, NamespaceSchema};
use crate::wal::{BatchPart, DiskWal, WalOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn schema() -> PipelineSchema {
    let mut schema = PipelineSchema::empty("p", "w");
    schema.namespaces.insert(
        "t".to_owned(),
        NamespaceSchema {
            fields: vec![
                Field::new("n", FieldType::Int),
                Field::new("region", FieldType::String),
            ],
            records: 0,
        },
    );
    schema
}

fn batch(regions: &[Option<&str>]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            ArrowField::new("n", DataType::Int32, true),
            ArrowField::new("region", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int32Array::from_iter_values(0..regions.len() as i32)),
            Arc::new(StringArray::from(regions.to_vec())),
        ],
    )
    .unwrap()
}

/// Every file under `root`, recursively.
fn walk(root: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn deliver(
    limits: WriterLimits,
    regions: &[Option<&str>],
) -> Result<(tempfile::TempDir, usize, Vec<String>), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (mut wal, _) = DiskWal::open(
        &dir.path().join("wal"),
        WalOptions {
            fsync: false,
            ..WalOptions::default()
        },
    )?;
    // The warehouse is nested so that `../..` from a table would land beside it.
    let warehouse = dir.path().join("a/b/lake");
    let sink = IcebergSink::hadoop(warehouse.clone(), "ns", "t#w#p".to_owned())?
        .with_layout(layout::Layout {
            partition_fields: vec!["region".into()],
            ..layout::Layout::default()
        })
        .with_writer_limits(limits);
    wal.append(
        b"p1",
        &[BatchPart {
            namespace: "t".to_owned(),
            schema_version: 1,
            batch: batch(regions),
        }],
    )?;
    let batches = wal.batches().to_vec();
    let delivered = sink.deliver(&batches, &mut |id| wal.read(id), &schema())?;
    assert_eq!(delivered.rows, regions.len() as u64);
    let ident = sink.table_ident("t");
    let files: Vec<String> = sink.block_on(async {
        let table = sink.catalog().load_table(&ident).await?;
        table
            .scan()
            .build()?
            .plan_files()
            .await?
            .map_ok(|t| t.data_file_path().to_owned())
            .try_collect()
            .await
    })?;
    let mut on_disk = Vec::new();
    walk(dir.path(), &mut on_disk);
    for path in &on_disk {
        assert!(
            path.starts_with(&warehouse) || path.starts_with(dir.path().join("wal")),
            "a file outside the warehouse: {}",
            path.display()
        );
    }
    let data_dir = warehouse.join("ns/t/data");
    for file in &files {
        let path = storage::local_path(file);
        let rel = path.strip_prefix(&data_dir)?;
        assert_eq!(
            rel.components().count(),
            2,
            "one partition directory: {file}"
        );
        assert!(path.exists(), "{file}");
    }
    Ok((dir, delivered.rows as usize, files))
}

/// Path-like, NUL, control, `=`/`%` and 300-byte values each become one escaped directory
/// under the table's data directory; every row lands; nothing is written outside the
/// warehouse. On today's main `../../../../x` wrote Parquet beside the warehouse, and NUL
/// and 300-byte values failed every delivery.
#[test]
fn hostile_partition_values_stay_inside_the_table() -> TestResult {
    let long = "x".repeat(300);
    let regions = [
        Some("../../../../x"),
        Some("/"),
        Some(".."),
        Some("a/b"),
        Some("nul\0"),
        Some("tab\tnew\nline"),
        Some("k=v%2F"),
        Some(""),
        Some("заказ"),
        Some(long.as_str()),
        Some("null"),
        None,
    ];
    let (_dir, rows, files) = deliver(WriterLimits::default(), &regions)?;
    assert_eq!(rows, regions.len());
    assert_eq!(
        files.len(),
        regions.len(),
        "one file per partition: {files:?}"
    );
    assert!(
        files
            .iter()
            .any(|f| f.contains("/region=..%2F..%2F..%2F..%2Fx/")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|f| f.contains("/region=nul%00/")),
        "{files:?}"
    );
    Ok(())
}

/// 200 partitions with at most 4 writers open: every row lands, in more files than
/// partitions are needed only when writers were closed early.
#[test]
fn many_partitions_never_open_more_writers_than_the_bound() -> TestResult {
    let values: Vec<String> = (0..200).map(|i| format!("r{}", i % 50)).collect();
    let regions: Vec<Option<&str>> = values.iter().map(|v| Some(v.as_str())).collect();
    let limits = WriterLimits {
        max_open: 4,
        max_buffered_bytes: usize::MAX,
    };
    let (_dir, rows, files) = deliver(limits, &regions)?;
    assert_eq!(rows, 200);
    assert!(files.len() >= 50, "{}", files.len());
    Ok(())
}
