//! `skipprd query` over the overwrite-on-retry destinations that keep files it cannot hand to
//! DataFusion's Parquet scan as they are: an `Athena` sink's Hive Parquet (Glue's lower-case
//! names, the partition columns only in the directories and in Glue) and `File` JSON lines and
//! CSV.
//!
//! The oracle is the WAL: the same records go through a pipeline with no destination (whose
//! WAL is the dataset) and through one into each destination, and `SELECT *` over both must
//! give the same rows, column by column, after the files landed, after a schema change, and
//! after a crash between a delivery's files and its marker. The records have keys Glue renames
//! (`durationMins`, a struct child `Kind`), partition values that need escaping, a value too
//! long for its directory name, nulls, and text with CSV's separators.
//!
//! The `Athena` test needs the moto server of `tests/run` (`SKIPPR_TEST_AWS_ENDPOINT` and the
//! `AWS_*` variables).
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
use bin::{run_ok as run, skipprd_command};

use std::path::Path;

use serde_json::Value;

/// Records `first..first+n`; with `extra`, a field the earlier ones lack.
fn records(first: u64, n: u64, extra: bool) -> String {
    let long = "x".repeat(300);
    (first..first + n)
        .map(|id| {
            let station = match id % 5 {
                0 => "\"st 0\"".to_owned(),
                1 => "\"a/b%c=d\"".to_owned(),
                2 => format!("\"{long}{}\"", id % 2),
                3 => "null".to_owned(),
                _ => "\"null?\"".to_owned(),
            };
            let note = if id % 3 == 0 {
                "null".to_owned()
            } else {
                format!("\"say \\\"hi\\\", {id}\\nbye\"")
            };
            let helmet = if extra {
                format!(",\"helmet\":{}", id % 2 == 0)
            } else {
                String::new()
            };
            format!(
                "{{\"id\":{id},\"station\":{station},\"dock\":{},\"durationMins\":{},\"price\":{}.25,\"ok\":{},\"at\":\"2024-01-0{}T13:{:02}:00Z\",\"note\":{note},\"bike\":{{\"id\":\"b{}\",\"Kind\":\"e\",\"tags\":[\"a\",\"t{}\"]}}{helmet}}}\n",
                id % 3,
                id % 90,
                id % 7,
                id % 2 == 1,
                1 + id % 3,
                id % 60,
                id % 17,
                id % 4,
            )
        })
        .collect()
}

/// A project reading `in/*.jsonl` into two pipelines: `plain` (no destination) and `out`
/// (into `sink`), partitioned by `station` and `dock`.
fn project(sink: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "\
pipelines:
  plain:
    data_source: data_sources.files
  out:
    data_source: data_sources.files
    data_sink: data_sinks.out
    transform: {{batch_partition_fields: [station, dock], batch_time_fields: at, batch_time_unit: day}}
data_sources:
  files: {{File: {{path: 'in/*.jsonl', batch_size: 40}}}}
data_sinks:
  out: {sink}
"
        ),
    )
    .unwrap();
    dir
}

/// `skipprd query --plain -s SQL`: header and rows.
fn query(project: &Path, sql: &str) -> Value {
    let out = run(project, &["query", "--plain", "-s", sql]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every column of `out.out` equals the WAL pipeline's, row by row (`columns` selects them).
fn assert_like_the_wal(project: &Path, columns: &str, when: &str) -> Value {
    let wal = query(
        project,
        &format!("SELECT {columns} FROM plain.plain ORDER BY id"),
    );
    let out = query(
        project,
        &format!("SELECT {columns} FROM out.out ORDER BY id"),
    );
    assert_eq!(out["header"], wal["header"], "{when}");
    let (wal_rows, out_rows) = (
        wal["rows"].as_array().unwrap(),
        out["rows"].as_array().unwrap(),
    );
    assert_eq!(out_rows.len(), wal_rows.len(), "{when}: row counts");
    for (got, want) in out_rows.iter().zip(wal_rows) {
        assert_eq!(got, want, "{when}: a row differs from the WAL's");
    }
    out
}

/// Landed, evolved, and crashed between files and marker: `out` reads like `plain` each time
/// (`columns` selected, then `evolved` once records have a new field).
fn reads_back_like_the_wal(project: &Path, columns: &str, evolved: &str) {
    std::fs::write(project.join("in/a.jsonl"), records(0, 200, false)).unwrap();
    run(project, &["sync", "--once"]);
    let landed = assert_like_the_wal(project, columns, "after the first pass");
    assert_eq!(landed["rows"].as_array().unwrap().len(), 200);
    // Only the partition columns, and a count (no file column decoded).
    assert_eq!(
        query(
            project,
            "SELECT count(*), count(station), sum(dock), count(DISTINCT station) FROM out.out"
        )["rows"],
        query(
            project,
            "SELECT count(*), count(station), sum(dock), count(DISTINCT station) FROM plain.plain"
        )["rows"],
    );

    // A new field: the files written before it read it as null.
    std::fs::write(project.join("in/b.jsonl"), records(200, 100, true)).unwrap();
    run(project, &["sync", "--once"]);
    assert_like_the_wal(project, evolved, "after a new field");

    // A crash after a delivery's files, before its marker: those rows are read once (from the
    // WAL, their files not counted), and once more after the delivery is redone.
    std::fs::write(project.join("in/c.jsonl"), records(300, 100, true)).unwrap();
    run(project, &["sync", "--once", "-p", "plain"]);
    let crashed = skipprd_command(project)
        .args(["sync", "--once", "-p", "out"])
        .env("SKIPPR_FAILPOINT", "sink.after_data_files")
        .output()
        .unwrap();
    assert!(!crashed.status.success(), "the failpoint did not fire");
    assert_like_the_wal(project, evolved, "after a crash before the marker");
    run(project, &["sync", "--once"]);
    let all = assert_like_the_wal(project, evolved, "after recovery");
    assert_eq!(all["rows"].as_array().unwrap().len(), 400);
}

#[test]
fn a_jsonl_file_destination_reads_back_like_the_wal() {
    let out = tempfile::tempdir().unwrap();
    let dir = project(&format!(
        "{{File: {{output_dir: '{}', format: jsonl}}}}",
        out.path().display()
    ));
    reads_back_like_the_wal(dir.path(), "*", "*");
}

#[test]
fn a_csv_file_destination_reads_back_like_the_wal_with_nested_values_as_text() {
    let out = tempfile::tempdir().unwrap();
    let dir = project(&format!(
        "{{File: {{output_dir: '{}', format: csv}}}}",
        out.path().display()
    ));
    // CSV has no nesting: every scalar column reads back as it was.
    let scalars = "id, station, dock, \"durationMins\", price, ok, at, note";
    reads_back_like_the_wal(dir.path(), scalars, &format!("{scalars}, helmet"));
    // The nested column is the text the file holds, for landed rows and WAL rows alike.
    let bike = query(
        dir.path(),
        "SELECT bike, arrow_typeof(bike) FROM out.out WHERE id IN (5, 399) ORDER BY id",
    );
    assert_eq!(
        bike["rows"],
        serde_json::json!([
            ["{Kind: e, id: b5, tags: [a, t1]}", "Utf8"],
            ["{Kind: e, id: b8, tags: [a, t3]}", "Utf8"]
        ]),
        "{bike}"
    );
}

#[test]
fn an_athena_destination_reads_back_like_the_wal_under_the_original_keys() {
    let aws = local_aws::aws();
    let bucket = local_aws::new_bucket(&aws, "qf-out");
    let database = local_aws::unique("qf_db");
    let dir = project(&format!(
        "{{Athena: {{s3_bucket: {bucket}, s3_prefix: lake, glue_database_name: {database}}}}}"
    ));
    reads_back_like_the_wal(dir.path(), "*", "*");
}
