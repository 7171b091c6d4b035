//! The `Stdin` source end to end: `cat events | skipprd sync --once` lands every record of the
//! pipe once, bad lines counted as deadletters, and `doctor` warns that it is a push source.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

fn project(format: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "pipelines:\n  piped:\n    data_source: data_sources.input\ndata_sources:\n  input:\n    Stdin:\n      format: {format}\n      mode: stream\n      batch_size: 1000\n"
        ),
    )
    .unwrap();
    dir
}

/// `skipprd args` in `dir` with `input` on its standard input: exit code, stdout, stderr.
fn piped(dir: &Path, args: &[&str], input: &[u8]) -> (i32, String, String) {
    let mut child = bin::skipprd_command(dir)
        .args(args)
        .arg("--no-log-file")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        stdin.write_all(&input).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Rows and distinct ids in the pipeline's dataset (the WAL: it has no destination).
fn count(dir: &Path) -> (u64, u64) {
    let (code, stdout, stderr) = piped(
        dir,
        &[
            "query",
            "--plain",
            "--sql",
            "select count(*) as n, count(distinct id) as ids from piped.piped",
        ],
        b"",
    );
    assert_eq!(code, 0, "{stderr}");
    let out: Value = serde_json::from_str(stdout.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let row = &out["rows"][0];
    match (row[0].as_u64(), row[1].as_u64()) {
        (Some(n), Some(ids)) => (n, ids),
        _ => panic!("{out}"),
    }
}

#[test]
fn piped_json_lines_land_once_in_batches_and_bad_lines_are_counted() {
    let dir = project("jsonl");
    let mut input = String::new();
    for id in 0..25_000 {
        input.push_str(&format!("{{\"id\":{id},\"name\":\"n{id}\"}}\n"));
        if id % 10_000 == 0 {
            input.push_str("not json\n");
        }
    }
    let (code, stdout, stderr) = piped(
        dir.path(),
        &["sync", "--once", "--output", "json"],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{stderr}");
    let done: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["total_rows"], 25_000, "{done}");
    assert_eq!(done["deadletters"], 3, "{done}");
    assert!(done["batches"].as_u64().unwrap() >= 25, "{done}");
    assert_eq!(count(dir.path()), (25_000, 25_000));

    // A second pass reads what it is piped, added to what landed.
    let (code, _, stderr) = piped(
        dir.path(),
        &["sync", "--once"],
        b"{\"id\":25000,\"name\":\"more\"}\n",
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(count(dir.path()), (25_001, 25_001));
}

#[test]
fn piped_csv_is_typed_by_its_header() {
    let dir = project("csv");
    let (code, _, stderr) = piped(dir.path(), &["sync", "--once"], b"id,name\n1,ann\n2,bob\n");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(count(dir.path()), (2, 2));
}

#[test]
fn doctor_warns_that_stdin_is_a_push_source_and_a_file_format_is_refused() {
    let dir = project("jsonl");
    let (_, stdout, _) = piped(dir.path(), &["doctor", "--output", "json"], b"");
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().is_some_and(|n| n.ends_with("source")))
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(check["severity"], "warning", "{check}");
    assert!(
        check["message"].as_str().unwrap().contains("push source"),
        "{check}"
    );
    let dir = project("parquet");
    let (code, _, stderr) = piped(dir.path(), &["sync", "--once"], b"");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("data_sources.input.Stdin.format"),
        "{stderr}"
    );
}
