//! Maintenance on `s3://` warehouses against the local AWS (the moto server `tests/run`
//! starts, see [`crate::aws::testing::moto`]): tables in a bucket with their pointer in Glue
//! (`AthenaIceberg`) or in DynamoDB (`SkipprLake`), files counted by listing the bucket, the
//! Glue table read back by PyIceberg (`tests/readers/read_glue_table.py`, with
//! `SKIPPR_TEST_PYTHON`).

use super::*;
use crate::aws::Bucket;
use crate::aws::testing::{bucket, moto};
use crate::sinks::{LakeCatalog, LakeLocation};

/// Where the table's pointer lives.
#[derive(Debug, Clone, Copy)]
enum On {
    /// Glue (`AthenaIceberg`).
    Glue,
    /// DynamoDB (`SkipprLake` on S3).
    Dynamo,
}

fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// A sink on a fresh bucket's `s3://{bucket}/lake`, in a namespace (Glue database) of its own.
fn s3_fixture(policy: Policy, on: On) -> Result<Fixture, Box<dyn std::error::Error>> {
    let aws = moto();
    let bucket_name = bucket(&aws, "maint");
    let namespace = format!("maint_{}", unique());
    let catalog = match on {
        On::Glue => LakeCatalog::Glue {
            region: None,
            catalog_id: None,
        },
        On::Dynamo => {
            let table = format!("skipprd-test-maint-{}", unique());
            crate::state::dynamodb::create_table(&aws, &table)?;
            LakeCatalog::Dynamo {
                table,
                region: None,
                files: None,
            }
        }
    };
    let location = LakeLocation {
        warehouse: format!("s3://{bucket_name}/lake"),
        namespace: namespace.clone(),
        catalog,
    };
    let sink = IcebergSink::with_catalog(
        location.catalog("lake", Some(&aws))?,
        &namespace,
        IDENTITY.to_owned(),
    )?
    .with_maintenance(policy);
    let dir = tempfile::tempdir()?;
    let wal = disk_wal(&dir.path().join("wal"))?;
    Ok(Fixture {
        dir,
        wal,
        sink,
        bucket: Some(Bucket::new(&aws, &bucket_name, None)),
    })
}

impl Fixture {
    fn bucket(&self) -> Result<&Bucket, &'static str> {
        self.bucket.as_ref().ok_or("not an S3 fixture")
    }

    /// The key of the table's `rest` (`data/x.parquet`).
    fn key(&self, rest: &str) -> Result<String, Box<dyn std::error::Error>> {
        let location = self.sink.catalog().table_location(&self.ident());
        let (_, key) = crate::sinks::iceberg::s3::split_uri(&location)?;
        Ok(format!("{key}/{rest}"))
    }

    fn exists(&self, rest: &str) -> Result<bool, Box<dyn std::error::Error>> {
        let object = self.bucket()?.get(&self.key(rest)?);
        Ok(object.map_err(|e| e.to_string())?.is_some())
    }
}

/// The Python of the reader venv.
fn python() -> String {
    let python = std::env::var("SKIPPR_TEST_PYTHON").unwrap_or_default();
    assert!(
        !python.is_empty(),
        "SKIPPR_TEST_PYTHON is not set: run `bash tests/run` (it builds the reader venv with pyiceberg[pyarrow,glue]==0.12.0 and sets it)"
    );
    python
}

/// The table `a` of the Glue database `database` as PyIceberg's `GlueCatalog` reads it.
fn read_glue(database: &str) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_glue_table.py");
    let out = std::process::Command::new(python())
        .arg(&script)
        .args(["--database", database, "--values", "--key", "id", "a"])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(parsed["tables"]["a"]["pyiceberg"].clone())
}

/// Many small deliveries then maintenance (compact, expire, delete), as on a local warehouse,
/// with the table's pointer in Glue; old metadata versions go too; PyIceberg reads every row
/// once afterwards.
#[test]
fn on_s3_with_glue_small_files_compact_snapshots_expire_and_unreferenced_objects_go() -> TestResult
{
    let policy = Policy {
        retain_metadata_versions: 2,
        ..eager()
    };
    let mut f = s3_fixture(policy, On::Glue)?;
    compact_many_small_deliveries(&mut f)?;
    // Left in the bucket: the live data files (the compacted one and the two delivered
    // after it), the manifests and lists of the 3 snapshots, and 2 metadata versions
    // besides the current one (the deliveries after maintenance added 2 since).
    assert_eq!(f.files("data", ".parquet")?, 3);
    assert_eq!(f.table()?.metadata().snapshots().count(), 3);
    assert_eq!(f.files("metadata", ".avro")?, 6);
    assert_eq!(f.files("metadata", ".metadata.json")?, 5);

    let read = read_glue(f.sink.namespace().to_url_string().as_str())?;
    assert_eq!(read["rows"], 1100);
    let ids: Vec<i64> = read["values"]
        .as_array()
        .ok_or("no values")?
        .iter()
        .filter_map(|row| row["id"].as_i64())
        .collect();
    assert_eq!(ids, (0..1100).collect::<Vec<i64>>(), "every row once");
    let summaries = read["summaries"].as_array().ok_or("no summaries")?;
    assert_eq!(summaries.len(), 3);
    assert!(
        summaries[0].to_string().contains("skippr.maintenance"),
        "the oldest snapshot left is the compaction: {}",
        summaries[0]
    );
    Ok(())
}

/// The same with the table's pointer in DynamoDB (`SkipprLake` on S3); then `skipprd
/// maintain`'s path (every table the catalog lists) maintains it again.
#[test]
fn on_s3_with_dynamodb_small_files_compact_snapshots_expire_and_unreferenced_objects_go()
-> TestResult {
    let mut f = s3_fixture(eager(), On::Dynamo)?;
    compact_many_small_deliveries(&mut f)?;
    let report = f.sink.maintain_all()?;
    assert_eq!(report.tables, 1);
    assert_eq!(
        (report.files_compacted_from, report.files_compacted_to),
        (3, 1)
    );
    assert_eq!(report.snapshots_expired, 3);
    assert_eq!(f.files("data", ".parquet")?, 1);
    assert_eq!(f.rows()?, expected_rows(1100));
    Ok(())
}

/// An orphan data file in the bucket (a delivery that crashed before its commit) goes once
/// older than `orphan_min_age`; a younger one (maybe a commit in flight) stays. S3's
/// `LastModified` has whole seconds, hence the 3 s between the two and the 2 s age.
#[test]
fn on_s3_an_old_orphan_goes_and_a_young_one_stays() -> TestResult {
    let mut f = s3_fixture(eager(), On::Dynamo)?;
    f.deliver_many(3, 10)?;
    let old = "data/b98-b98-00000-crashed.parquet";
    let young = "data/b99-b99-00000-in-flight.parquet";
    let put = |rest: &str, bytes: &[u8]| -> TestResult {
        f.bucket()?
            .put(&f.key(rest)?, bytes.to_vec(), "application/octet-stream")
            .map_err(|e| e.to_string())?;
        Ok(())
    };
    put(old, b"PAR1 half a file")?;
    std::thread::sleep(Duration::from_secs(3));
    put(young, b"PAR1 a file")?;
    let report = f.maintain(&Policy {
        compact_min_files: usize::MAX,
        target_file_size: 0,
        orphan_min_age: Duration::from_secs(2),
        ..eager()
    })?;
    assert!(!f.exists(old)?, "the old orphan is deleted");
    assert!(f.exists(young)?, "the young orphan is kept");
    assert_eq!(
        f.files("data", ".parquet")?,
        4,
        "3 live files and the young one"
    );
    assert_eq!(report.snapshots_expired, 2);
    assert!(
        report.files_deleted >= 1 && report.bytes_freed >= 16,
        "{report:?}"
    );
    assert_eq!(f.rows()?, expected_rows(30));
    Ok(())
}

/// A delivery commits between maintenance's read and its commit: the Glue pointer's swap
/// (on the metadata location read) and DynamoDB's conditional put both make it give up.
#[test]
fn on_s3_maintenance_losing_to_a_delivery_changes_nothing() -> TestResult {
    maintenance_losing_to_a_delivery(&mut s3_fixture(eager(), On::Glue)?)?;
    maintenance_losing_to_a_delivery(&mut s3_fixture(eager(), On::Dynamo)?)
}

/// Deliveries maintain their S3 table on their own once a threshold is crossed.
#[test]
fn on_s3_deliveries_compact_and_expire_on_their_own() -> TestResult {
    maintaining_on_their_own(&mut s3_fixture(auto(), On::Glue)?)
}
