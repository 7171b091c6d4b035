//! Ambiguous commits on the local AWS (the moto server `tests/run` starts): every
//! compare-and-swap and conditional put of a pass goes through the fault proxy
//! (`tests/aws/fault_proxy.py --apply-then-fail`), which forwards every third matching
//! request to moto, where it applies, and then answers `500`. The SDK retries, and the retry
//! finds its own first attempt already applied: a failed condition that is in truth a success.
//!
//! The requests made ambiguous: DynamoDB `UpdateItem` (the lease, the SkipprLake pointers) and
//! `TransactWriteItems` (fenced state writes: position, ack, watermark), Glue `CreateTable` and
//! `UpdateTable` (the AthenaIceberg pointer), and the S3 WAL's conditional PUTs
//! (`If-None-Match: *`). Three passes with new data each must succeed, and the tables,
//! read by PyIceberg (Glue's `GlueCatalog`, or `StaticTable` at the DynamoDB pointer's
//! location), must hold every row exactly once.
//!
//! Needs `SKIPPR_TEST_AWS_ENDPOINT` (and the `AWS_*` variables) from `bash tests/run`, and the
//! reader venv (`SKIPPR_TEST_PYTHON`).
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
#[path = "common/loopback.rs"]
mod loopback;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use bin::skipprd_command;
use local_aws::{aws, endpoint, new_bucket, reader_python, unique};
use loopback::Proxy;
use serde_json::Value;
use skipprd::state::{DynamoStore, StateKey, StateStore};

/// The requests the proxy applies and then fails.
const AMBIGUOUS: &str = "DynamoDB_20120810.UpdateItem,DynamoDB_20120810.TransactWriteItems,\
AWSGlue.CreateTable,AWSGlue.UpdateTable,S3.ConditionalPut";

/// Rows per pass; passes.
const ROWS: u64 = 240;
const PASSES: u64 = 3;

fn succeeded(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Append records `first..first + count` (kinds `order`, `refund`) to `path`.
fn append(path: &Path, first: u64, count: u64, expected: &mut BTreeMap<String, Vec<u64>>) {
    use std::io::Write;
    let mut text = String::new();
    for id in first..first + count {
        let kind = if id % 3 == 0 { "refund" } else { "order" };
        text.push_str(&format!(
            "{{\"kind\":\"{kind}\",\"id\":{id},\"note\":\"n{id}\"}}\n"
        ));
        expected.entry(kind.to_owned()).or_default().push(id);
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A project with the DynamoDB store `table`, the WAL in S3 and `sink` (a `data_sinks` entry).
fn project(table: &str, sink: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
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
      batch_size: 60
data_sinks:
  lake:
{sink}"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    let out = skipprd_command(dir.path())
        .args(["store", "create"])
        .output()
        .unwrap();
    succeeded("store create", &out);
    dir
}

/// Run `PASSES` passes through the proxy, each after appending `ROWS` new records; every pass
/// must succeed and deliver everything. `then`: how the proxy fails an applied request (`500`,
/// or `drop`: the connection closed without an answer). Returns the ids expected per table, and the proxy's
/// report.
fn passes_through_the_proxy(
    dir: &Path,
    wal_bucket: &str,
    then: &str,
) -> (BTreeMap<String, Vec<u64>>, Value) {
    let proxy = Proxy::start(
        &endpoint(),
        &[
            "--apply-then-fail",
            AMBIGUOUS,
            "--every",
            "3",
            "--then",
            then,
        ],
    );
    let mut expected = BTreeMap::new();
    for pass in 0..PASSES {
        append(
            &dir.join("input/events.jsonl"),
            pass * ROWS,
            ROWS,
            &mut expected,
        );
        let started = std::time::Instant::now();
        let out = skipprd_command(dir)
            .args(["sync", "--once", "--output", "json"])
            .env("WAL_STORAGE", "s3")
            .env("SKIPPR_WAL_S3_BUCKET", wal_bucket)
            // Timeouts follow the lease TTL (half per operation): room for the SDK's backoff.
            .env("SKIPPR_LEASE_TTL_SECONDS", "20")
            .env("AWS_ENDPOINT_URL", &proxy.url)
            .env("AWS_MAX_ATTEMPTS", "5")
            .env(
                "RUST_LOG",
                std::env::var("AMBIG_LOG").unwrap_or("warn".into()),
            )
            .output()
            .unwrap();
        succeeded(&format!("pass {pass}"), &out);
        println!("pass {pass} (then {then}): {:?}", started.elapsed());
        if std::env::var_os("AMBIG_LOG").is_some() {
            println!("{}", String::from_utf8_lossy(&out.stderr));
        }
        let done = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["event"] == "sync_complete")
            .unwrap_or_else(|| panic!("pass {pass}: no sync_complete event"));
        assert_eq!(done["rows"].as_u64(), Some(ROWS), "pass {pass}: {done}");
        assert_eq!(done["pending"].as_u64(), Some(0), "pass {pass}: {done}");
    }
    (expected, proxy.report())
}

/// Every op of `ops` was made ambiguous at least once.
fn each_was_ambiguous(report: &Value, ops: &[&str]) {
    for op in ops {
        let n = report["applied_then_failed"][op].as_u64().unwrap_or(0);
        assert!(n > 0, "no {op} was applied then failed: {report}");
    }
}

/// Every expected id once in `found` (table -> ids read).
fn exactly_once(expected: BTreeMap<String, Vec<u64>>, found: &BTreeMap<String, Vec<u64>>) {
    for (table, want) in expected {
        let mut got = found[&table].clone();
        got.sort_unstable();
        let total = got.len();
        got.dedup();
        assert_eq!(
            total,
            got.len(),
            "{table}: {} duplicated ids",
            total - got.len()
        );
        assert_eq!(got, want, "{table}: ids");
    }
}

/// AthenaIceberg (the Glue pointer), the S3 WAL and the DynamoDB store and lease.
fn glue_case(then: &str) {
    reader_python();
    let aws = aws();
    let bucket = new_bucket(&aws, "ambig");
    let database = unique("ambig_");
    let sink = format!(
        "    AthenaIceberg:
      warehouse: s3://{bucket}/lake
      glue_database_name: {database}
      region: us-east-1
"
    );
    let dir = project(&unique("ambig"), &sink);
    let (expected, report) = passes_through_the_proxy(dir.path(), &bucket, then);
    each_was_ambiguous(
        &report,
        &[
            "DynamoDB_20120810.UpdateItem",
            "DynamoDB_20120810.TransactWriteItems",
            "AWSGlue.CreateTable",
            "AWSGlue.UpdateTable",
            "S3.ConditionalPut",
        ],
    );
    // Read by PyIceberg's GlueCatalog straight from moto (no proxy).
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_glue_table.py");
    let out = Command::new(reader_python())
        .arg(script)
        .args(["--database", &database, "--values", "--key", "id"])
        .args(["order", "refund"])
        .output()
        .unwrap();
    succeeded("read_glue_table.py", &out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = BTreeMap::new();
    for table in ["order", "refund"] {
        let t = &v["tables"][table]["pyiceberg"];
        let ids: Vec<u64> = t["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["id"].as_u64().unwrap())
            .collect();
        assert_eq!(t["rows"].as_u64().unwrap() as usize, ids.len());
        found.insert(table.to_owned(), ids);
    }
    exactly_once(expected, &found);
    println!(
        "AthenaIceberg, S3 WAL, DynamoDB store (then {then}): {} rows landed once through {} ambiguous commits: {}",
        PASSES * ROWS,
        report["faults"],
        report["applied_then_failed"]
    );
}

/// SkipprLake on S3 (pointers in DynamoDB), the S3 WAL and the DynamoDB store and lease.
fn lake_case(then: &str) {
    reader_python();
    let aws = aws();
    let bucket = new_bucket(&aws, "ambig");
    let table = unique("ambig");
    let warehouse = format!("s3://{bucket}/lake");
    let sink = format!(
        "    SkipprLake:
      warehouse: {warehouse}
      region: us-east-1
"
    );
    let dir = project(&table, &sink);
    let (expected, report) = passes_through_the_proxy(dir.path(), &bucket, then);
    each_was_ambiguous(
        &report,
        &[
            "DynamoDB_20120810.UpdateItem",
            "DynamoDB_20120810.TransactWriteItems",
            "S3.ConditionalPut",
        ],
    );
    // The pointer items, read straight from moto; the tables by PyIceberg's StaticTable.
    let store = DynamoStore::open(&aws, &table).unwrap();
    let mut locations = Vec::new();
    for name in ["order", "refund"] {
        let key = StateKey::new(
            format!("catalog#{warehouse}"),
            format!("table#default/{name}"),
        );
        let item = store.get(&key).unwrap().expect("a pointer item");
        let value: Value = serde_json::from_slice(&item.value).unwrap();
        locations.push((name, value["location"].as_str().unwrap().to_owned()));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_s3_table.py");
    let out = Command::new(reader_python())
        .arg(&script)
        .args(["--key", "id"])
        .args(locations.iter().map(|(_, l)| l.as_str()))
        .output()
        .unwrap();
    succeeded("read_s3_table.py", &out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = BTreeMap::new();
    for (name, location) in &locations {
        let t = &v["tables"][location];
        let ids: Vec<u64> = t["keys"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no keys in {t}"))
            .iter()
            .map(|id| id.as_u64().unwrap())
            .collect();
        assert_eq!(t["duplicate_keys"], 0, "{name}: {t}");
        assert_eq!(
            t["rows"].as_u64().unwrap() as usize,
            ids.len(),
            "{name}: {t}"
        );
        found.insert((*name).to_owned(), ids);
    }
    exactly_once(expected, &found);
    println!(
        "SkipprLake (DynamoDB pointers), S3 WAL, DynamoDB store (then {then}): {} rows landed once through {} ambiguous commits: {}",
        PASSES * ROWS,
        report["faults"],
        report["applied_then_failed"]
    );
}

#[test]
fn glue_commits_answered_500_after_applying_land_every_row_once() {
    glue_case("500");
}

#[test]
fn glue_commits_whose_connection_drops_after_applying_land_every_row_once() {
    glue_case("drop");
}

#[test]
fn skipprlake_commits_answered_500_after_applying_land_every_row_once() {
    lake_case("500");
}

#[test]
fn skipprlake_commits_whose_connection_drops_after_applying_land_every_row_once() {
    lake_case("drop");
}
