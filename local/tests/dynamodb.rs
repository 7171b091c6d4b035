//! The `skipprd` binary with `store.type: dynamodb`, against a local DynamoDB (moto).
//!
//! `bash tests/run` starts a moto server and sets `SKIPPR_TEST_AWS_ENDPOINT` (and
//! `AWS_ENDPOINT_URL`, `AWS_REGION`, dummy credentials, which the binary inherits). Without it
//! these tests fail and say so. Each test uses a table of its own.
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

use local_aws::{endpoint, unique};

use std::path::Path;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn skipprd(dir: &Path, args: &[&str]) -> Run {
    let mut cmd = skipprd_command(dir);
    cmd.args(args);
    cmd.env("SKIPPR_LEASE_TTL_SECONDS", "3");
    let out = cmd.output().expect("run skipprd");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn project(table: &str, input: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "\
skippr:
  store:
    type: dynamodb
    name: {table}
pipelines:
  events:
    data_source: data_sources.files
    transform:
      namespace_fields: kind
data_sources:
  files:
    File:
      path: input/*.jsonl
"
    );
    std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    std::fs::write(dir.path().join("input/a.jsonl"), input).unwrap();
    dir
}

const RECORDS: &str = "\
{\"kind\":\"order\",\"id\":1,\"price\":10.5}
{\"kind\":\"order\",\"id\":2,\"price\":3}
{\"kind\":\"order\",\"id\":3,\"price\":7}
{\"kind\":\"refund\",\"order_id\":1}
";

fn ids(dir: &Path) -> serde_json::Value {
    let run = skipprd(
        dir,
        &[
            "query",
            "--plain",
            "-s",
            "select id from events.order order by id",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    out["rows"].clone()
}

#[test]
fn sync_needs_the_table_created_on_request_then_resumes_from_dynamodb() {
    endpoint();
    let table = unique("resume");
    let dir = project(&table, RECORDS);

    // No table: sync fails naming it and the command that creates it, and creates nothing.
    for _ in 0..2 {
        let run = skipprd(dir.path(), &["sync", "--once"]);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(run.stderr.contains(&format!("'{table}'")), "{}", run.stderr);
        assert!(
            run.stderr.contains("does not exist") && run.stderr.contains("skipprd store create"),
            "{}",
            run.stderr
        );
    }

    let run = skipprd(dir.path(), &["store", "create", "--output", "text"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("Created DynamoDB table '{table}'")),
        "{}",
        run.stdout
    );
    let run = skipprd(dir.path(), &["store", "create", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut event: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    // The run's stamp (checked in output.rs), then the event's own fields.
    let stamp = event.as_object_mut().unwrap();
    assert_eq!(stamp.remove("phase"), Some("store".into()));
    assert!(stamp.remove("timestamp").is_some() && stamp.remove("run_id").is_some());
    assert_eq!(
        event,
        serde_json::json!({"event": "store_ready", "table": table, "region": "us-east-1", "created": false})
    );

    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ids(dir.path()), serde_json::json!([[1], [2], [3]]));
    // The state is in DynamoDB, not in an embedded store beside the WAL.
    assert!(!dir.path().join("data/default_events/state.redb").exists());

    // The next pass resumes where the last one ended: only the appended line is new.
    let mut text = std::fs::read_to_string(dir.path().join("input/a.jsonl")).unwrap();
    text.push_str("{\"kind\":\"order\",\"id\":4,\"price\":1.5}\n");
    std::fs::write(dir.path().join("input/a.jsonl"), text).unwrap();
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ids(dir.path()), serde_json::json!([[1], [2], [3], [4]]));
    // And a pass with nothing new adds nothing (the lease of the last pass was released, so
    // it does not wait for it to expire either).
    let started = std::time::Instant::now();
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(ids(dir.path()), serde_json::json!([[1], [2], [3], [4]]));
}

#[test]
fn store_create_with_the_embedded_store_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), "skippr:\n  workspace: w\n").unwrap();
    let run = skipprd(dir.path(), &["store", "create"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("skippr.store.type"), "{}", run.stderr);
}

/// The size of the largest item of `table` as DynamoDB counts it (attribute names and
/// values; numbers by their digits, a little over what DynamoDB charges).
fn largest_item(table: &str) -> usize {
    let aws = local_aws::aws();
    let client = aws.dynamodb();
    let mut largest = 0;
    let mut start = None;
    loop {
        let out = aws
            .block_on(
                client
                    .scan()
                    .table_name(table)
                    .set_exclusive_start_key(start)
                    .send(),
            )
            .unwrap();
        for item in out.items() {
            let bytes: usize = item
                .iter()
                .map(|(name, value)| {
                    let value = value
                        .as_b()
                        .map(|b| b.as_ref().len())
                        .or_else(|_| value.as_s().map(String::len))
                        .or_else(|_| value.as_n().map(String::len))
                        .unwrap_or(8);
                    name.len() + value
                })
                .sum();
            largest = largest.max(bytes);
        }
        match out.last_evaluated_key() {
            Some(key) => start = Some(key.clone()),
            None => return largest,
        }
    }
}

/// The number of files of the many-files test: `SKIPPR_TEST_FILES`, else 20,000 (100,000
/// take one to two minutes on two cores).
fn many_files() -> usize {
    std::env::var("SKIPPR_TEST_FILES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn many_small_files_land_once_with_every_dynamodb_item_under_64_kb() {
    endpoint();
    let table = unique("many");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "skippr:\n  store:\n    type: dynamodb\n    name: {table}\npipelines:\n  events:\n    data_source: data_sources.files\n    transform:\n      namespace_fields: kind\ndata_sources:\n  files:\n    File:\n      path: input\n"
    );
    std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
    let run = skipprd(dir.path(), &["store", "create", "--output", "text"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let files = many_files();
    let name = |i: usize| format!("input/{:03}/{i:07}.jsonl", i / 1000);
    let write = |i: usize| {
        let path = dir.path().join(name(i));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{{\"kind\":\"row\",\"id\":{i}}}\n")).unwrap();
    };
    let started = std::time::Instant::now();
    // The even files first; the odd ones come later, most of them below the watermark.
    (0..files).step_by(2).for_each(write);
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let first = started.elapsed();
    let largest_first = largest_item(&table);
    (1..files).step_by(2).for_each(write);
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let largest = largest_item(&table).max(largest_first);
    let all = started.elapsed();
    let counting = std::time::Instant::now();
    let run = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select count(*), count(distinct id), min(id), max(id) from events.row",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        out["rows"],
        serde_json::json!([[files, files, 0, files - 1]]),
        "every row once"
    );
    let counting = counting.elapsed();
    // A pass with nothing new adds nothing.
    let quiet = std::time::Instant::now();
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let quiet = quiet.elapsed();
    let largest = largest_item(&table).max(largest);
    eprintln!(
        "{files} files: first sync (half the files) {first:?}, both syncs {all:?}, the query {counting:?}, a pass with nothing new {quiet:?}; largest item {largest} bytes (after the first sync {largest_first})"
    );
    assert!(largest < 64 * 1024, "{largest}");
}
