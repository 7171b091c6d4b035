//! `skipprd discover`, `sync` and `query` with the S3 source, against the moto server that
//! `bash tests/run` starts (`SKIPPR_TEST_AWS_ENDPOINT`).
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

use local_aws::{aws, endpoint, new_bucket};

use std::io::Write;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn put(aws: &skipprd::aws::Aws, bucket: &str, key: &str, bytes: Vec<u8>) {
    let client = aws.s3(None);
    aws.block_on(async {
        client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(bytes.into())
            .send()
            .await
    })
    .unwrap();
}

fn jsonl(ids: std::ops::Range<u64>) -> Vec<u8> {
    ids.map(|id| format!("{{\"id\":{id},\"name\":\"row {id}\"}}\n"))
        .collect::<String>()
        .into_bytes()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// Run the CLI in `project`; the S3 endpoint and region come from the connector only.
fn skipprd(project: &Path, args: &[&str]) -> Output {
    skipprd_command(project)
        .args(args)
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .output()
        .unwrap()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sync_complete(out: &Output) -> Value {
    ok(out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "sync_complete")
        .unwrap_or_else(|| panic!("no sync_complete: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `(count(*), count(distinct id), sum(id))` of the pipeline's table, from the WAL.
fn counts(project: &Path) -> (u64, u64, u64) {
    let out = skipprd(
        project,
        &[
            "query",
            "--plain",
            "-s",
            "select count(*) as n, count(distinct id) as d, sum(id) as s from events",
        ],
    );
    ok(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v["rows"][0];
    (
        row[0].as_u64().unwrap(),
        row[1].as_u64().unwrap(),
        row[2].as_u64().unwrap(),
    )
}

#[test]
fn sync_reads_an_s3_prefix_then_only_new_objects_and_query_counts_every_row_once() {
    let aws = aws();
    let bucket = new_bucket(&aws, "s3src-cli-");
    put(&aws, &bucket, "in/2026-12-01/a.jsonl", jsonl(0..5));
    let csv: String = std::iter::once("id,name\n".to_owned())
        .chain((5..8).map(|id| format!("{id},row {id}\n")))
        .collect();
    put(&aws, &bucket, "in/2026-12-01/b.csv", csv.into_bytes());
    put(
        &aws,
        &bucket,
        "in/2026-12-01/c.jsonl.gz",
        gzip(&jsonl(8..12)),
    );
    put(&aws, &bucket, "elsewhere/x.jsonl", jsonl(100..101));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "pipelines:\n  events:\n    data_source: data_sources.bucket\n\
             data_sources:\n  bucket:\n    S3:\n      s3_bucket: {bucket}\n      s3_prefix: in/\n      region: us-east-1\n      endpoint: {}\n      batch_size: 3\n",
            endpoint()
        ),
    )
    .unwrap();

    let out = skipprd(dir.path(), &["discover"]);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("id"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // First pass: every object; one LIST and one GET per object.
    let first = sync_complete(&skipprd(
        dir.path(),
        &["sync", "--once", "--output", "json"],
    ));
    assert_eq!(first["rows"], 12, "{first}");
    assert_eq!(first["files_failed"], 0);
    assert_eq!(first["aws_requests"]["s3"], 4, "{first}");
    assert_eq!(counts(dir.path()), (12, 12, (0..12).sum()));

    // Nothing new: one LIST after the watermark, nothing read.
    let idle = sync_complete(&skipprd(
        dir.path(),
        &["sync", "--once", "--output", "json"],
    ));
    assert_eq!(idle["rows"], 0, "{idle}");
    assert_eq!(idle["aws_requests"]["s3"], 1, "{idle}");

    // New objects: only they are read.
    put(&aws, &bucket, "in/2026-12-02/d.jsonl", jsonl(12..15));
    put(
        &aws,
        &bucket,
        "in/2026-12-02/e.jsonl.gz",
        gzip(&jsonl(15..17)),
    );
    let second = sync_complete(&skipprd(
        dir.path(),
        &["sync", "--once", "--output", "json"],
    ));
    assert_eq!(second["rows"], 5, "{second}");
    assert_eq!(second["aws_requests"]["s3"], 3, "{second}");
    assert_eq!(counts(dir.path()), (17, 17, (0..17).sum()));
    assert!(dir.path().join("data").is_dir(), "the WAL is on disk");
}

#[test]
fn a_bucket_that_is_not_there_fails_sync_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "pipelines:\n  events:\n    data_source: data_sources.bucket\n\
             data_sources:\n  bucket:\n    S3:\n      s3_bucket: s3src-no-such-bucket\n      region: us-east-1\n      endpoint: {}\n",
            endpoint()
        ),
    )
    .unwrap();
    let out = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot list `s3://s3src-no-such-bucket/`: NoSuchBucket"),
        "{stderr}"
    );
}
