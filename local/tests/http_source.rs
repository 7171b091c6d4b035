//! The `HttpClient` source end to end: `skipprd sync` from a local paginated REST API
//! (`tests/http/api_server.py`, stdlib Python on 127.0.0.1) into the `Duckdb` destination,
//! the lake read back by DuckDB and PyIceberg (`tests/readers/read_table.py`).
//!
//! - every paginator style over 50 pages of 1,000 records lands every record once;
//! - `incremental` across two passes, with new records between them;
//! - 429 with `Retry-After: 1` and random 500s on 20% of requests: every record once;
//! - a 401 exits 1 with a message that names the status but not the token, and the token
//!   appears in no log, `--log trace` included.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
mod common;
#[path = "common/local_aws.rs"]
mod local_aws;
#[path = "common/loopback.rs"]
mod loopback;
#[path = "common/rss.rs"]
mod rss;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;

use bin::skipprd_command;
use local_aws::reader_python;
use loopback::ScriptServer;
use rss::skipprd_peak_rss;

const API: &str = "tests/http/api_server.py";

fn api(args: &[&str]) -> ScriptServer {
    ScriptServer::start(API, &[], args)
}

fn write_config(dir: &Path, source: &str) {
    let source: String = source.lines().map(|l| format!("      {l}\n")).collect();
    let text = format!(
        "\
pipelines:
  api:
    data_source: data_sources.api
    data_sink: data_sinks.lake
data_sources:
  api:
    HttpClient:
{source}data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
      table_namespace: shop
"
    );
    std::fs::write(dir.join("skippr.yml"), text).unwrap();
}

fn sync(dir: &Path, env: &[(&str, &str)], extra: &[&str]) -> Output {
    let mut cmd = skipprd_command(dir);
    cmd.args(extra)
        .args(["sync", "--once", "--output", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn sync_ok(dir: &Path, env: &[(&str, &str)], what: &str) -> Output {
    bin::succeeded(sync(dir, env, &[]), &format!("{what}: sync failed"))
}

/// The lake table the source's records land in: `http.{url_host}` made table-safe.
fn table(dir: &Path) -> PathBuf {
    dir.join("lake/shop/http_127_0_0_1")
}

/// Rows, distinct ids, smallest and largest id, as each reader sees them.
fn check(dir: &Path, expected: u64, ctx: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_table.py");
    let t = table(dir);
    assert!(
        t.join("metadata/version-hint.text").is_file(),
        "{ctx}: no table at {}",
        t.display()
    );
    let out = std::process::Command::new(reader_python())
        .arg(&script)
        .args(["--key", "id"])
        .arg(&t)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{ctx}: reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tables = parsed["tables"].as_object().unwrap();
    let read = tables.values().next().unwrap();
    for reader in ["duckdb", "pyiceberg"] {
        let got = &read[reader];
        assert_eq!(
            got["rows"].as_u64(),
            Some(expected),
            "{ctx}: {reader}: rows"
        );
        assert_eq!(
            got["duplicate_keys"].as_u64(),
            Some(0),
            "{ctx}: {reader}: duplicates"
        );
        let keys: Vec<u64> = got["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_u64().unwrap())
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted,
            (0..expected).collect::<Vec<_>>(),
            "{ctx}: {reader}: ids"
        );
    }
}

fn paginator(style: &str) -> &'static str {
    match style {
        "next_url" => "paginator:\n  next_url:\n    path: links.next",
        "link_header" => "paginator:\n  link_header: {}",
        "cursor" => "paginator:\n  cursor:\n    path: meta.next_cursor\n    param: after",
        "offset" => {
            "paginator:\n  offset:\n    param: offset\n    limit_param: limit\n    page_size: 1000"
        }
        _ => "paginator:\n  page_number:\n    param: page\n    page_size: 1000",
    }
}

#[test]
fn every_paginator_lands_50_pages_of_1000_records_once() {
    for style in ["next_url", "link_header", "cursor", "offset", "page_number"] {
        let server = api(&["--style", style]);
        let dir = tempfile::tempdir().unwrap();
        write_config(
            dir.path(),
            &format!(
                "url: http://127.0.0.1:{}/items\nrecords_path: data\nbatch_size: 3000\n{}",
                server.port,
                paginator(style)
            ),
        );
        sync_ok(dir.path(), &[], style);
        check(dir.path(), 50_000, style);
    }
}

/// `batch_size_bytes` closes a batch once that many bytes of pages were read: with 1 MB five
/// pages of about 5 KB make one batch, with 1 KB every page closes one, every record landing
/// once either way.
#[test]
fn batch_size_bytes_closes_batches_by_the_bytes_of_the_pages_read() {
    let server = api(&["--style", "next_url", "--pages", "5", "--per-page", "100"]);
    let dir = tempfile::tempdir().unwrap();
    for (bytes, at_least, at_most) in [("1000000", 1, 1), ("1000", 5, 6)] {
        let _ = std::fs::remove_dir_all(dir.path().join("lake"));
        let _ = std::fs::remove_dir_all(dir.path().join("data"));
        write_config(
            dir.path(),
            &format!(
                "url: http://127.0.0.1:{}/items\nrecords_path: data\nbatch_size_bytes: {bytes}\nbatch_size_seconds: 600\n{}",
                server.port,
                paginator("next_url")
            ),
        );
        let out = sync_ok(dir.path(), &[], bytes);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let done: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        let batches = done["batches"].as_u64().unwrap();
        assert!(
            (at_least..=at_most).contains(&batches),
            "batch_size_bytes {bytes}: {done}"
        );
        check(dir.path(), 500, bytes);
    }
}

/// A 500 MB page holding one array: spooled to a temporary file and its records read one at a
/// time, so the pass's peak RSS stays under 256 MiB; every record lands once.
#[test]
fn a_500_mb_single_array_page_lands_in_bounded_memory() {
    let server = api(&[]);
    let dir = tempfile::tempdir().unwrap();
    let size: u64 = 500 << 20;
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "pipelines:\n  api:\n    data_source: data_sources.api\ndata_sources:\n  api:\n    HttpClient:\n      url: http://127.0.0.1:{}/big?bytes={size}\n      records_path: data\n",
            server.port
        ),
    )
    .unwrap();
    let (report, peak_mib) = skipprd_peak_rss(
        dir.path(),
        &["sync", "--once", "--output", "json", "--no-log-file"],
    );
    assert_eq!(report["code"], 0, "{report}");
    let stdout = report["stdout"].as_str().unwrap();
    let done: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // Each record is about 215 bytes: ~2.4M records.
    let rows = done["total_rows"].as_u64().unwrap();
    assert!(rows > size / 250 && rows < size / 180, "{done}");
    assert_eq!(done["deadletters"], 0, "{done}");
    println!("500 MB page: {rows} records, peak RSS {peak_mib} MiB");
    assert!(peak_mib < 256, "peak RSS {peak_mib} MiB: {done}");
}

#[test]
fn incremental_passes_land_only_the_new_records() {
    let server = api(&["--style", "next_url", "--pages", "5", "--per-page", "100"]);
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "url: http://127.0.0.1:{}/items\nrecords_path: data\n{}\nincremental:\n  cursor_path: seq\n  param: since",
            server.port,
            paginator("next_url")
        ),
    );
    sync_ok(dir.path(), &[], "first pass");
    check(dir.path(), 500, "first pass");
    let grow = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import urllib.request; urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:{}/_total?n=750', method='POST'))",
                server.port
            ),
        ])
        .status()
        .unwrap();
    assert!(grow.success());
    sync_ok(dir.path(), &[], "second pass");
    check(dir.path(), 750, "second pass");
    sync_ok(dir.path(), &[], "third pass, nothing new");
    check(dir.path(), 750, "third pass");
}

/// The test server's own counts (`/_stats`: requests, faults, rate_limited).
fn stats(port: u16) -> Value {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/_stats').read().decode())"
            ),
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn discover_samples_the_first_pages_of_an_api() {
    let server = api(&["--style", "next_url", "--pages", "50", "--per-page", "1000"]);
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "url: http://127.0.0.1:{}/items\nrecords_path: data\n{}",
            server.port,
            paginator("next_url")
        ),
    );
    let discover = |extra: &[&str]| {
        let out = skipprd_command(dir.path())
            .arg("discover")
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "discover {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stats(server.port)["requests"].as_u64().unwrap()
    };
    // 10,000 records are the first 10 pages of 1,000: not the 50 the API has.
    let first = discover(&[]);
    assert!(
        (10..=12).contains(&first),
        "default sample: {first} requests"
    );
    // `--limit` sets the sample: 30,000 records, 30 more pages.
    let second = discover(&["--limit", "30000"]) - first;
    assert!(
        (30..=32).contains(&second),
        "--limit 30000: {second} requests"
    );
    // The schema was saved (discover's one write), and no table was.
    let schema = std::fs::read_to_string(dir.path().join("data/default_api/schema.json")).unwrap();
    assert!(schema.contains("\"seq\""), "{schema}");
    assert!(!table(dir.path()).exists(), "discover wrote a table");
}

#[test]
fn rate_limits_and_random_500s_are_retried_and_every_record_lands_once() {
    // `next_url` ends at a page without a next link; `offset` (pages of 200, the last one full)
    // only at the empty page after it, a request made after the last batch: counted too.
    for style in ["next_url", "offset"] {
        faults_land_once(style);
    }
}

fn faults_land_once(style: &str) {
    let server = api(&[
        "--style",
        style,
        "--pages",
        "20",
        "--per-page",
        "200",
        "--fail-rate",
        "0.2",
        "--rate-limit-every",
        "7",
    ]);
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "url: http://127.0.0.1:{}/items\nrecords_path: data\n{}",
            server.port,
            if style == "offset" {
                "paginator:\n  offset:\n    param: offset\n    limit_param: limit\n    page_size: 200"
            } else {
                paginator(style)
            }
        ),
    );
    let out = sync_ok(dir.path(), &[], style);
    check(dir.path(), 4_000, style);
    let stats = stats(server.port);
    let faults = stats["faults"].as_u64().unwrap() + stats["rate_limited"].as_u64().unwrap();
    assert!(stats["rate_limited"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["faults"].as_u64().unwrap() > 0, "{stats}");
    // Each fault was one retry, and the run logs each (a warning naming the attempt).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let retries = stderr
        .lines()
        .filter(|l| l.contains("An HTTP request failed; retrying."))
        .count() as u64;
    assert_eq!(retries, faults, "{stderr}");
    assert!(!stderr.contains("\"level\":\"ERROR\""), "{stderr}");
    // And the pass reports them: every request the server saw, and the faults among them.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let done: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["source_retries"].as_u64(), Some(faults), "{done}");
    assert_eq!(
        done["source_requests"].as_u64(),
        stats["requests"].as_u64(),
        "{done} {stats}"
    );
}

#[test]
fn a_401_exits_1_and_the_token_is_in_no_log() {
    let token = "t0k3n-s3cr3t-value";
    let server = api(&[
        "--token",
        "the-right-one",
        "--pages",
        "2",
        "--per-page",
        "10",
    ]);
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "url: ${API_URL}\nrecords_path: data\nauth:\n  strategy: bearer\n  token: ${API_TOKEN}",
    );
    let url = format!(
        "http://127.0.0.1:{}/items?api_key=k3y-s3cr3t-value",
        server.port
    );
    let env = [("API_TOKEN", token), ("API_URL", url.as_str())];
    for extra in [&[][..], &["--log", "trace"][..]] {
        let out = sync(dir.path(), &env, extra);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}\n{stdout}");
        assert!(
            stderr.contains("401") || stdout.contains("401"),
            "{extra:?}: {stderr}"
        );
        assert!(
            stderr.contains("bad credentials") || stdout.contains("bad credentials"),
            "{extra:?}: the body's head: {stderr}"
        );
        for secret in [token, "k3y-s3cr3t-value"] {
            assert!(
                !stdout.contains(secret) && !stderr.contains(secret),
                "{extra:?}: a secret was printed: {stderr}\n{stdout}"
            );
        }
        // Nor written anywhere under the project (logs, WAL, checkpoints).
        for entry in walk(dir.path()) {
            let bytes = std::fs::read(&entry).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(token) || entry.ends_with("skippr.yml"),
                "{}",
                entry.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn grow(port: u16, total: u64) {
    let status = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import urllib.request; urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:{port}/_total?n={total}', method='POST'))"
            ),
        ])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `kill -9` at random moments during a 200-page incremental pagination (50 pages of new
/// records arrive between rounds), then a final pass: every record exactly once.
#[test]
fn sync_killed_at_random_moments_mid_pagination_lands_every_record_once() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let server = api(&["--style", "next_url", "--pages", "200", "--per-page", "100"]);
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "url: http://127.0.0.1:{}/items\nrecords_path: data\nbatch_size: 500\nmax_requests_per_second: 40\n{}\nincremental:\n  cursor_path: seq\n  param: since",
            server.port,
            paginator("next_url")
        ),
    );
    let mut total = 20_000u64;
    let mut rng = common::Rng(0x9e37_79b9_7f4a_7c15);
    let (mut killed, mut finished, mut round) = (0u64, 0u64, 0u64);
    while killed < kills && round < kills * 4 {
        round += 1;
        let mut child = skipprd_command(dir.path())
            .args(["sync", "--once"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50 + rng.below(1200)));
        match child.try_wait().unwrap() {
            Some(status) => {
                let out = child.wait_with_output().unwrap();
                assert!(
                    status.success(),
                    "round {round}: sync failed on its own: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                finished += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
            }
        }
        // New records for every round: some 50 pages, over a second at 40 requests/s.
        total += 5_000;
        grow(server.port, total);
    }
    assert!(killed >= kills, "only {killed} kills in {round} rounds");
    sync_ok(dir.path(), &[], "final pass");
    check(dir.path(), total, "kill loop");
    println!(
        "kill loop: {killed} kills, {finished} passes finished on their own, {total} records landed once"
    );
}
