//! A restarted WAL, and waiting writers, through the `skipprd` binary:
//!
//! - the state directory (with the disk WAL) is deleted while the DynamoDB store (moto) keeps
//!   the position and acknowledgement: `sync` refuses, naming both ids and `skipprd reset`;
//!   `reset` without `--yes` changes nothing; `reset --yes` then `sync` lands the new rows
//!   with nothing skipped. The same with the embedded store, lost with the WAL, where the
//!   tables' landed ids are what give the restart away;
//! - a second `sync` waiting for a held lease says once whom it waits for and how long.
//!
//! The DynamoDB tests need the moto server `tests/run` starts (`SKIPPR_TEST_AWS_ENDPOINT`).
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

use local_aws::{aws, unique};

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

/// A pipeline `events` from `input/a.jsonl` into a `Duckdb` lake at `./lake`, its state in
/// `./data`; the DynamoDB store `table` when given, else the embedded one.
fn project(table: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = table.map_or(String::new(), |t| {
        format!("skippr:\n  store:\n    type: dynamodb\n    name: {t}\n")
    });
    let config = format!(
        "\
{store}pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
    transform:
      namespace_fields: kind
data_sources:
  files:
    File:
      path: input/a.jsonl
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
      table_namespace: shop
"
    );
    std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    std::fs::write(dir.path().join("input/a.jsonl"), lines(1..4)).unwrap();
    dir
}

fn lines(ids: std::ops::Range<i64>) -> String {
    ids.map(|id| format!("{{\"kind\":\"order\",\"id\":{id}}}\n"))
        .collect()
}

/// The ids in the `order` table (landed rows, plus WAL batches above its landed id).
fn ids(dir: &Path) -> Vec<i64> {
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
    out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row[0].as_i64().unwrap())
        .collect()
}

fn sync(dir: &Path) -> Run {
    skipprd(dir, &["sync", "--once", "--output", "text"])
}

/// Lose the state directory, append ids 4 and 5, and check that `sync` refuses (with
/// `holder` in the message), `reset` without `--yes` changes nothing, and `reset --yes` then
/// `sync` lands the new rows: the source is read again from its start, so the tables hold the
/// earlier rows twice and every new one.
fn lose_the_wal_then_reset(dir: &Path, holder: &str) {
    let run = sync(dir);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ids(dir), [1, 2, 3]);

    std::fs::remove_dir_all(dir.join("data")).unwrap();
    let mut text = std::fs::read_to_string(dir.join("input/a.jsonl")).unwrap();
    text.push_str(&lines(4..6));
    std::fs::write(dir.join("input/a.jsonl"), text).unwrap();

    // Refused, naming both ids and the way out; twice, since nothing changed.
    for _ in 0..2 {
        let run = sync(dir);
        assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("the WAL's next batch id is 1, but ")
                && run.stderr.contains(holder)
                && run.stderr.contains("skipprd reset -p events"),
            "{}",
            run.stderr
        );
    }
    // The tables kept what they had; nothing new landed or was skipped.
    assert_eq!(ids(dir), [1, 2, 3]);

    let run = skipprd(dir, &["reset", "-p", "events", "--output", "text"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("Would reset pipeline 'events'")
            && run
                .stdout
                .contains("new id floor: 1 (the next batch gets id 2)"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    assert_eq!(sync(dir).code, 1, "an unconfirmed reset changes nothing");

    let run = skipprd(dir, &["reset", "-p", "events", "--yes", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let event: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(event["event"], "reset");
    assert_eq!(event["applied"], true);
    assert_eq!(event["floor"], 1);

    let run = sync(dir);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Every new row landed (nothing skipped as delivered); the earlier ones were read again.
    assert_eq!(ids(dir), [1, 1, 2, 2, 3, 3, 4, 5]);
    // And the pipeline goes on from there: a new row lands once, nothing twice.
    let mut text = std::fs::read_to_string(dir.join("input/a.jsonl")).unwrap();
    text.push_str(&lines(6..7));
    std::fs::write(dir.join("input/a.jsonl"), text).unwrap();
    assert_eq!(sync(dir).code, 0);
    assert_eq!(ids(dir), [1, 1, 2, 2, 3, 3, 4, 5, 6]);
}

#[test]
fn a_lost_disk_wal_with_the_dynamodb_store_is_refused_until_reset() {
    let aws = aws();
    let table = unique("restart");
    skipprd::state::dynamodb::create_table(&aws, &table).unwrap();
    let dir = project(Some(&table));
    lose_the_wal_then_reset(
        dir.path(),
        "the state store's source position (`position`) follows batch 1",
    );
}

#[test]
fn a_lost_state_directory_with_the_embedded_store_is_refused_until_reset() {
    let dir = project(None);
    lose_the_wal_then_reset(dir.path(), "shows as landed (`skippr.landed.*`) batch 1");
}

#[test]
fn a_sync_waiting_for_a_held_local_lock_says_so_once() {
    let dir = project(None);
    let state = dir.path().join("data/default_events");
    std::fs::create_dir_all(&state).unwrap();
    // Another process holds the lock (this test, standing in for it), named in the file.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(state.join("writer.lock"))
        .unwrap();
    lock.lock().unwrap();
    std::fs::write(state.join("writer.lock"), "pid 4242 on elsewhere").unwrap();
    let run = sync(dir.path());
    assert_eq!(run.code, 1, "{}", run.stderr);
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("Waiting for the writer lease"))
        .collect();
    assert_eq!(
        said,
        [
            "Waiting for the writer lease of pipeline 'events', held by pid 4242 on elsewhere (held until that process ends); giving up after 5.0 s."
        ],
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("pipeline writer lease unavailable"),
        "{}",
        run.stderr
    );
    drop(lock);
}

#[test]
fn a_sync_waiting_for_a_held_dynamodb_lease_names_the_holder_and_its_expiry() {
    let aws = aws();
    let table = unique("waiting");
    skipprd::state::dynamodb::create_table(&aws, &table).unwrap();
    let dir = project(Some(&table));
    // Held by a writer on another machine (no file lock here), heartbeating, TTL 30 s.
    let store = skipprd::state::DynamoStore::open(&aws, &table).unwrap();
    let lease = skipprd::state::DynamoLease::acquire(
        std::sync::Arc::new(store),
        "events",
        &skipprd::state::partition_key("default", "default", "events"),
        std::time::Duration::ZERO,
        std::time::Duration::from_secs(30),
    )
    .unwrap();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let waiting: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "lease_waiting")
        .collect();
    assert_eq!(waiting.len(), 1, "{}", run.stdout);
    assert_eq!(waiting[0]["pipeline"], "events");
    assert_eq!(waiting[0]["holder"], lease.holder());
    assert_eq!(waiting[0]["wait_ms"], 5000);
    let expires = waiting[0]["expires_in_ms"].as_i64().unwrap();
    assert!((1..=30_000).contains(&expires), "{expires}");
    drop(lease);
}
