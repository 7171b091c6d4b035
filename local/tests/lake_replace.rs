//! `write_policy: replace_table` and `replace_partition` into a local Iceberg lake (the
//! `Duckdb` destination): each read's rows replace the table (or the partitions they fall
//! in); a crash at any step of a read or its delivery leaves the previous read whole; the
//! next pass lands the interrupted read once. DuckDB's `iceberg_scan` and PyIceberg read
//! the table (`tests/readers/read_table.py`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
#[path = "common/lake_model.rs"]
mod lake_model;
#[path = "common/local_aws.rs"]
mod local_aws;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use bin::{run_ok, skipprd_command};
use lake_model::assert_model;

/// id -> (v, region)
type Rows = BTreeMap<u64, (u64, String)>;

fn write_config(dir: &Path, policy: &str, partitioned: bool) {
    let layout = if partitioned {
        "    transform:\n      batch_partition_fields: region\n"
    } else {
        ""
    };
    let text = format!(
        "pipelines:\n  shop:\n    data_source: data_sources.files\n    data_sink: data_sinks.lake\n    write_policy: {policy}\n{layout}\
         data_sources:\n  files:\n    File:\n      path: input\n      format: jsonl\n      batch_size: 40\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      table_namespace: shop\n"
    );
    std::fs::write(dir.join("skippr.yml"), text).unwrap();
    std::fs::create_dir_all(dir.join("input")).unwrap();
}

/// A new input file `name` of rows `ids` with value `v`, spread over `regions`; returns them.
fn file(dir: &Path, name: &str, ids: std::ops::Range<u64>, v: u64, regions: &[&str]) -> Rows {
    let mut text = String::new();
    let mut rows = Rows::new();
    for id in ids {
        let region = regions[(id as usize) % regions.len()];
        text.push_str(&format!(
            "{{\"id\":{id},\"v\":{v},\"region\":\"{region}\"}}\n"
        ));
        rows.insert(id, (v, region.to_owned()));
    }
    std::fs::write(dir.join("input").join(name), text).unwrap();
    rows
}

/// `sync --once` with the failpoint `name` armed: the process aborts there.
fn crash_at(dir: &Path, name: &str) {
    let out = skipprd_command(dir)
        .args(["sync", "--once"])
        .env("SKIPPR_FAILPOINT", name)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the failpoint {name} did not stop the pass: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn each_read_replaces_the_table_and_a_crash_leaves_the_previous_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "replace_table", false);
    let first = file(d, "a.jsonl", 0..100, 1, &["eu", "us"]);
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &first, "the first read");

    // The second read, with other rows: the table holds it alone.
    let second = file(d, "b.jsonl", 1000..1050, 2, &["eu"]);
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &second, "the second read");

    // A pass with nothing new leaves the table as it is.
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &second, "an idle pass");

    // The third read (three batches of 40 rows) crashes at each step in turn: after its
    // first batch, at the end of its read, with its data files written, each time leaving
    // the second whole.
    let third = file(d, "c.jsonl", 2000..2100, 3, &["us", "apac"]);
    for failpoint in [
        "sync.after_position",
        "sync.before_read_end",
        "sync.after_read_end",
        "sink.after_data_files",
    ] {
        crash_at(d, failpoint);
        assert_model(d, &second, &format!("after a crash at {failpoint}"));
        // `query` shows the table as it landed, not the waiting read beside it.
        let out = run_ok(
            d,
            &[
                "query",
                "--plain",
                "-s",
                "SELECT count(*) AS n, min(id) AS lo FROM shop.shop",
            ],
        );
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            got["rows"],
            json!([[50, 1000]]),
            "query after {failpoint}: {got}"
        );
    }
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &third, "the third read, once, after the crashes");

    // Committed, then a crash before the acknowledgement: the retry writes nothing twice.
    let fourth = file(d, "d.jsonl", 3000..3070, 4, &["eu", "apac"]);
    crash_at(d, "sink.after_table_commit");
    assert_model(d, &fourth, "committed before the crash");
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &fourth, "after the retry");
}

#[test]
fn replace_partition_replaces_the_partitions_a_read_touches_and_keeps_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "replace_partition", true);
    let mut want = file(d, "a.jsonl", 0..90, 1, &["eu", "us", "apac"]);
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &want, "the first read");

    // The second read has rows of `eu` only: `eu` holds them alone, `us` and `apac` stay.
    let eu = file(d, "b.jsonl", 500..520, 2, &["eu"]);
    want.retain(|_, (_, region)| region != "eu");
    want.extend(eu);
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &want, "the second read");

    // A crash before the commit leaves the second whole; the retry lands the third once.
    let third = file(d, "c.jsonl", 700..760, 3, &["us", "apac"]);
    crash_at(d, "sink.after_data_files");
    assert_model(d, &want, "after a crash before the commit");
    want.retain(|_, (_, region)| region == "eu");
    want.extend(third);
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &want, "the third read");
}

#[test]
fn a_read_that_skipped_a_file_waits_for_the_pass_that_reads_it() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "replace_table", false);
    let mut want = file(d, "a.jsonl", 0..60, 1, &["eu"]);
    run_ok(d, &["sync", "--once"]);
    assert_model(d, &want, "the first read");
    // The second read has a file that cannot be read yet: skipped, so the read is not whole
    // and the first stays.
    let second = file(d, "b.jsonl", 100..140, 2, &["us"]);
    std::fs::write(d.join("input/c.jsonl.gz"), b"\x1f\x8b\x08 not gzip").unwrap();
    let out = skipprd_command(d)
        .args(["sync", "--once"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("c.jsonl.gz"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_model(d, &want, "a read that skipped a file");
    // The file readable: the next pass reads it and the read lands whole.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"{\"id\":200,\"v\":2,\"region\":\"us\"}\n")
        .unwrap();
    std::fs::write(d.join("input/c.jsonl.gz"), gz.finish().unwrap()).unwrap();
    run_ok(d, &["sync", "--once"]);
    want = second;
    want.insert(200, (2, "us".to_owned()));
    assert_model(d, &want, "the second read, with the file");
}

#[test]
fn a_change_stream_or_a_replay_cannot_replace_tables() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A change stream is no whole read: refused before anything connects.
    std::fs::write(
        d.join("skippr.yml"),
        "pipelines:\n  shop:\n    data_source: data_sources.pg\n    data_sink: data_sinks.lake\n    write_policy: replace_table\n\
         data_sources:\n  pg:\n    Postgres:\n      host: 127.0.0.1\n      port: 1\n      database: shop\n      tables: [orders]\n      cdc_mode: snapshot_then_cdc\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n",
    )
    .unwrap();
    let out = skipprd_command(d)
        .args(["sync", "--once"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("write_policy") && err.contains("change stream"),
        "{err}"
    );
    // Replayed deadletters are no read of the source either.
    write_config(d, "replace_table", false);
    let text = std::fs::read_to_string(d.join("skippr.yml")).unwrap();
    std::fs::write(
        d.join("skippr.yml"),
        text.replace(
            "    write_policy: replace_table\n",
            "    write_policy: replace_table\n    deadletter_sink: deadletter_sinks.dl\n",
        ) + "deadletter_sinks:\n  dl:\n    File:\n      path: ./dl\n",
    )
    .unwrap();
    let out = skipprd_command(d)
        .args(["deadletters", "replay", "-p", "shop"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("write_policy") && err.contains("replay"),
        "{err}"
    );
}

#[test]
fn replace_partition_without_partitions_fails_validation_naming_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, "replace_partition", false);
    let out = skipprd_command(d)
        .args(["sync", "--once"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("write_policy") && err.contains("replace_partition"),
        "{err}"
    );
}
