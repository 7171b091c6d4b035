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
    let event: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
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
