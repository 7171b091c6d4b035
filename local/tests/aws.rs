//! `skipprd sync` on the AWS backends against a real local AWS API: the moto server that
//! `tests/run` starts (`SKIPPR_TEST_AWS_ENDPOINT`), with a fault-injecting proxy
//! (`tests/aws/fault_proxy.py`) in front of it where a test needs throttling and 5xx.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
#[path = "common/files.rs"]
mod files;
#[path = "common/local_aws.rs"]
mod local_aws;
use bin::skipprd_command;

use local_aws::{aws, endpoint, new_bucket, reader_python, unique};

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
#[path = "common/loopback.rs"]
mod loopback;

use common::Rng;
use loopback::Proxy;

const CONFIG: &str = "\
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
data_sources:
  files:
    File:
      path: input
      batch_size: 40
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
      table_namespace: ns
";

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), CONFIG).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    dir
}

fn write_records(project: &Path, file: &str, ids: std::ops::Range<u64>) {
    let text: String = ids
        .map(|id| format!("{{\"id\":{id},\"name\":\"row {id}\"}}\n"))
        .collect();
    std::fs::write(project.join("input").join(file), text).unwrap();
}

fn skipprd(project: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    skipprd_command(project)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn event(out: &Output, name: &str) -> Value {
    events(out)
        .into_iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| {
            panic!(
                "no {name} event; stdout: {} stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// `(count(*), count(distinct id), sum(id))` of the landed table.
fn landed(project: &Path) -> (u64, u64, u64) {
    landed_with(project, &[])
}

/// [`landed`], with `env` set for `skipprd query`.
fn landed_with(project: &Path, env: &[(&str, &str)]) -> (u64, u64, u64) {
    let out = skipprd(
        project,
        &[
            "query",
            "--plain",
            "-s",
            "select count(*) as n, count(distinct id) as d, sum(id) as s from events",
        ],
        env,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v["rows"][0];
    (
        row[0].as_u64().unwrap(),
        row[1].as_u64().unwrap(),
        row[2].as_u64().unwrap_or(0),
    )
}

fn s3_wal_objects(aws: &skipprd::aws::Aws, bucket: &str) -> i32 {
    let client = aws.s3(None);
    aws.block_on(async {
        client
            .list_objects_v2()
            .bucket(bucket)
            .prefix("wal/")
            .send()
            .await
    })
    .unwrap()
    .key_count()
    .unwrap_or(0)
}

/// Every third request to S3 fails with `503 SlowDown` or `500 InternalError`: the SDK's
/// standard retry mode retries them with backoff, and every row lands exactly once.
#[test]
fn throttling_and_5xx_from_s3_are_retried_and_nothing_is_lost() {
    let aws = aws();
    let bucket = new_bucket(&aws, "faults");
    let proxy = Proxy::start(&endpoint(), &["--every", "3"]);
    let dir = project();
    let env = [
        ("WAL_STORAGE", "s3"),
        ("SKIPPR_WAL_S3_BUCKET", bucket.as_str()),
        ("AWS_ENDPOINT_URL", proxy.url.as_str()),
        ("AWS_MAX_ATTEMPTS", "4"),
    ];
    write_records(dir.path(), "a.jsonl", 0..300);
    let out = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = event(&out, "sync_complete");
    assert_eq!(done["rows"], 300);
    assert_eq!(done["pending"], 0);
    write_records(dir.path(), "b.jsonl", 300..500);
    let out = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (requests, faults) = proxy.counts();
    assert!(faults >= 5, "{faults} faults in {requests} requests");
    assert_eq!(landed(dir.path()), (500, 500, (0..500).sum()));
    assert_eq!(
        s3_wal_objects(&aws, &bucket),
        0,
        "delivered batches are reclaimed"
    );
    println!("S3 faults: {faults} injected in {requests} requests; 500 rows landed once");
}

/// When S3 keeps failing, the pass fails, says so naming the object, and reports the error
/// as retryable; the next pass (S3 back) lands everything once.
#[test]
fn an_s3_that_keeps_failing_is_reported_as_retryable_and_the_next_pass_recovers() {
    let aws = aws();
    let bucket = new_bucket(&aws, "down");
    let dir = project();
    write_records(dir.path(), "a.jsonl", 0..100);
    {
        let proxy = Proxy::start(&endpoint(), &["--always"]);
        let env = [
            ("WAL_STORAGE", "s3"),
            ("SKIPPR_WAL_S3_BUCKET", bucket.as_str()),
            ("AWS_ENDPOINT_URL", proxy.url.as_str()),
            ("AWS_MAX_ATTEMPTS", "2"),
        ];
        let out = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &env);
        assert_eq!(out.status.code(), Some(1));
        let error = event(&out, "sync_error");
        assert_eq!(error["retryable"], true, "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("s3://{bucket}/wal/default/default/events/"))
                && (message.contains("SlowDown") || message.contains("InternalError")),
            "{message}"
        );
    }
    let env = [
        ("WAL_STORAGE", "s3"),
        ("SKIPPR_WAL_S3_BUCKET", bucket.as_str()),
    ];
    let out = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(landed(dir.path()), (100, 100, (0..100).sum()));
}

/// The cost model, measured: an idle pass costs a constant number of requests, and a batch
/// a constant number whatever its row count.
#[test]
fn an_idle_pass_and_a_batch_cost_a_constant_number_of_requests() {
    let aws = aws();
    let bucket = new_bucket(&aws, "cost");
    let env = [
        ("WAL_STORAGE", "s3"),
        ("SKIPPR_WAL_S3_BUCKET", bucket.as_str()),
    ];
    let requests = |out: &Output| -> u64 {
        let done = event(out, "sync_complete");
        done["aws_requests"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
    };
    let mut per_batch = Vec::new();
    for (rows, dir) in [(200u64, project()), (2000u64, project())] {
        // Same batch count (5) whatever the rows: batches close on the byte threshold.
        let config = CONFIG.replace("batch_size: 40", &format!("batch_size: {}", rows / 5));
        std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
        write_records(dir.path(), "a.jsonl", 0..rows);
        let busy = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &env);
        assert!(
            busy.status.success(),
            "{}",
            String::from_utf8_lossy(&busy.stderr)
        );
        let batches = event(&busy, "sync_complete")["batches"].as_u64().unwrap();
        assert_eq!(batches, 5);
        let idle = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &env);
        assert!(
            idle.status.success(),
            "{}",
            String::from_utf8_lossy(&idle.stderr)
        );
        let idle_requests = requests(&idle);
        assert!(
            (1..=3).contains(&idle_requests),
            "an idle pass sent {idle_requests} requests"
        );
        per_batch.push((requests(&busy) - idle_requests) as f64 / batches as f64);
        println!(
            "{rows} rows in {batches} batches: {} requests, idle pass {idle_requests}: {:?}",
            requests(&busy),
            event(&idle, "sync_complete")["aws_requests"]
        );
    }
    assert_eq!(
        per_batch[0], per_batch[1],
        "requests per batch must not depend on rows"
    );
}

/// `skipprd query` reads a pipeline's WAL in S3, with nothing of it on local disk: without a
/// destination the WAL is the dataset (with the embedded store, and with the DynamoDB store
/// whose reclaim watermark it reads); with one, the landed table plus the WAL's tail.
#[test]
fn query_reads_a_wal_kept_in_s3() {
    let aws = aws();
    let sum = |n: u64| n * (n - 1) / 2;
    let table = unique("query");
    for store in ["", &dynamodb_store(&table)] {
        // A bucket per project: the WAL prefix is named by tenant, workspace and pipeline.
        let bucket = new_bucket(&aws, "query");
        let env = [
            ("WAL_STORAGE", "s3"),
            ("SKIPPR_WAL_S3_BUCKET", bucket.as_str()),
        ];
        let dir = project();
        let config = CONFIG
            .replace("    data_sink: data_sinks.lake\n", "")
            .replace("pipelines:", &format!("{store}pipelines:"));
        std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
        if !store.is_empty() {
            let out = skipprd(dir.path(), &["store", "create"], &env);
            succeeded(&out);
        }
        write_records(dir.path(), "a.jsonl", 0..100);
        let out = skipprd(dir.path(), &["sync", "--once"], &env);
        succeeded(&out);
        assert!(
            files::files_with_extension(&dir.path().join("data"), "seg").is_empty(),
            "the WAL must not be on local disk"
        );
        assert_eq!(
            landed_with(dir.path(), &env),
            (100, 100, sum(100)),
            "store: {store:?}"
        );
        write_records(dir.path(), "b.jsonl", 100..250);
        let out = skipprd(dir.path(), &["sync", "--once"], &env);
        succeeded(&out);
        assert_eq!(
            landed_with(dir.path(), &env),
            (250, 250, sum(250)),
            "store: {store:?}"
        );
    }
    // With a destination: delivered batches are reclaimed from S3 and read from the lake.
    let bucket = new_bucket(&aws, "query");
    let env = [
        ("WAL_STORAGE", "s3"),
        ("SKIPPR_WAL_S3_BUCKET", bucket.as_str()),
    ];
    let dir = project();
    write_records(dir.path(), "a.jsonl", 0..300);
    let out = skipprd(dir.path(), &["sync", "--once"], &env);
    succeeded(&out);
    assert_eq!(landed_with(dir.path(), &env), (300, 300, sum(300)));
    // Without the S3 settings the same project has no disk WAL to read: the lake alone.
    assert_eq!(landed(dir.path()), (300, 300, sum(300)));
}

/// Fail with the command's stderr unless it succeeded.
fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every row of the Glue tables, read by PyIceberg's `GlueCatalog`: table -> ids.
fn glue_ids(database: &str, tables: &[&str]) -> std::collections::BTreeMap<String, Vec<u64>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_glue_table.py");
    let out = Command::new(reader_python())
        .arg(script)
        .args(["--database", database, "--values", "--key", "id"])
        .args(tables)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_glue_table.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = std::collections::BTreeMap::new();
    for table in tables {
        let t = &v["tables"][table]["pyiceberg"];
        let ids: Vec<u64> = t["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["id"].as_u64().unwrap())
            .collect();
        assert_eq!(t["rows"].as_u64().unwrap() as usize, ids.len());
        found.insert((*table).to_owned(), ids);
    }
    found
}

/// The backends of a kill loop on AWS: the WAL bucket, the warehouse, the Glue database.
struct AwsProject {
    dir: tempfile::TempDir,
    bucket: String,
    database: String,
}

impl AwsProject {
    fn new(aws: &skipprd::aws::Aws, store: &str) -> AwsProject {
        let bucket = new_bucket(aws, "kill");
        let database = unique("kill_");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("skippr.yml"),
            format!(
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
      path: input
      batch_size: 150
data_sinks:
  lake:
    AthenaIceberg:
      warehouse: s3://{bucket}/lake
      glue_database_name: {database}
      region: us-east-1
"
            ),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("input")).unwrap();
        AwsProject {
            dir,
            bucket,
            database,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("WAL_STORAGE", "s3".to_owned()),
            ("SKIPPR_WAL_S3_BUCKET", self.bucket.clone()),
            // A killed writer's DynamoDB lease expires in 2 s instead of 30 s.
            ("SKIPPR_LEASE_TTL_SECONDS", "2".to_owned()),
        ]
    }

    fn command(&self) -> Command {
        let mut cmd = skipprd_command(self.dir.path());
        cmd.args(["sync", "--once", "--output", "json"])
            .envs(self.env());
        cmd
    }
}

/// Append `count` records with ids from `first` to `path`: kinds `order` and `refund`.
fn append_kinds(
    path: &Path,
    first: u64,
    count: u64,
    expected: &mut std::collections::BTreeMap<String, Vec<u64>>,
) {
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

/// The kill -9 loop of the durable core on the AWS backends: WAL in S3, tables in S3
/// registered in Glue (AthenaIceberg), `store` selecting the state store. Passes are killed at
/// random moments while records keep arriving; after a final pass PyIceberg's `GlueCatalog`
/// must find every id exactly once.
fn aws_kill_loop(store: &str, label: &str) {
    aws_kill_loop_with(store, label, |_| {}, 0);
}

/// `lease_ms`: added to each round's wait before the kill, for a lease a killed writer
/// leaves held until it expires (the next pass waits that long before it starts).
fn aws_kill_loop_with(store: &str, label: &str, setup: impl Fn(&AwsProject), lease_ms: u64) {
    reader_python();
    let aws = aws();
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mut rng = Rng(0x5eed_a115 | 1);
    let project = AwsProject::new(&aws, store);
    setup(&project);
    let dir = project.dir.path().to_path_buf();
    let mut expected = std::collections::BTreeMap::new();
    let mut next_id = 0u64;
    for file in 0..3 {
        append_kinds(
            &dir.join(format!("input/part-{file}.jsonl")),
            next_id,
            600,
            &mut expected,
        );
        next_id += 600;
    }
    let (mut killed, mut finished, mut round) = (0u64, 0u64, 0u64);
    let mut last_killed = false;
    while killed < kills && round < kills * 4 {
        round += 1;
        let target = dir.join(format!("input/part-{}.jsonl", rng.below(3)));
        append_kinds(&target, next_id, 200, &mut expected);
        next_id += 200;
        let log = std::fs::File::create(dir.join(format!("round-{round:03}.log"))).unwrap();
        let threshold = if round % 2 == 0 { "20000" } else { "67108864" };
        let mut child = project
            .command()
            .env("DELIVER_THRESHOLD_BYTES", threshold)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        // After a kill the next pass first waits for the dead writer's lease to expire.
        let waits_for_lease = if last_killed { lease_ms } else { 0 };
        std::thread::sleep(Duration::from_millis(
            waits_for_lease + 20 + rng.below(1200),
        ));
        match child.try_wait().unwrap() {
            Some(status) => {
                last_killed = false;
                let log =
                    std::fs::read_to_string(dir.join(format!("round-{round:03}.log"))).unwrap();
                assert!(
                    status.success(),
                    "round {round}: sync failed on its own: {log}"
                );
                finished += 1;
            }
            None => {
                child.kill().unwrap();
                child.wait().unwrap();
                killed += 1;
                last_killed = true;
            }
        }
    }
    let out = project.command().output().unwrap();
    assert!(
        out.status.success(),
        "final pass: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(event(&out, "sync_complete")["pending"], 0);
    let found = glue_ids(&project.database, &["order", "refund"]);
    let mut rows = 0;
    for (table, mut want) in expected {
        let mut got = found[&table].clone();
        let total = got.len();
        got.sort_unstable();
        got.dedup();
        assert_eq!(
            total,
            got.len(),
            "{table}: {} duplicated ids",
            total - got.len()
        );
        want.sort_unstable();
        assert_eq!(got.len(), want.len(), "{table}: row count");
        assert_eq!(got, want, "{table}: ids");
        rows += total;
    }
    assert_eq!(
        s3_wal_objects(&aws, &project.bucket),
        0,
        "delivered batches are reclaimed"
    );
    println!(
        "{label}: {killed} kills, {finished} passes finished on their own, rows expected {next_id}, found by pyiceberg (GlueCatalog) {rows}, duplicates 0, missing 0"
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert_eq!(rows as u64, next_id);
}

#[test]
fn the_kill_loop_on_s3_wal_and_glue_lands_every_row_exactly_once() {
    aws_kill_loop("", "AWS kill loop (S3 WAL, embedded store, AthenaIceberg)");
}

/// A DynamoDB state table made by `skipprd store create` for the project at `dir`.
fn dynamodb_store(table: &str) -> String {
    format!("skippr:\n  store:\n    type: dynamodb\n    name: {table}\n")
}

fn create_store(project: &AwsProject) {
    let out = skipprd_command(project.dir.path())
        .args(["store", "create"])
        .env_remove("SKIPPR_CONFIG_FILE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "store create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The acceptance run of the AWS backends: WAL in S3, state and lease in DynamoDB, tables in
/// S3 registered in Glue; killed at random moments; every row exactly once.
#[test]
fn the_kill_loop_on_s3_wal_dynamodb_and_glue_lands_every_row_exactly_once() {
    let table = unique("state");
    aws_kill_loop_with(
        &dynamodb_store(&table),
        "AWS kill loop (S3 WAL, DynamoDB store and lease, AthenaIceberg)",
        create_store,
        2000,
    );
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig}");
}

/// Two writers on one pipeline through the DynamoDB lease: while A runs, B is refused with
/// "pipeline writer lease unavailable" (retryable). Then A is frozen with SIGSTOP past its
/// lease (2 s); C takes the lease over and finishes the pass; A, resumed with SIGCONT, cannot
/// commit anything (its fencing token is stale) and exits with the fencing error. Every row
/// lands exactly once.
#[test]
fn a_writer_frozen_past_its_lease_cannot_commit_after_resuming() {
    reader_python();
    let aws = aws();
    let table = unique("fence");
    let project = AwsProject::new(&aws, &dynamodb_store(&table));
    create_store(&project);
    let dir = project.dir.path().to_path_buf();
    let mut expected = std::collections::BTreeMap::new();
    append_kinds(&dir.join("input/a.jsonl"), 0, 150_000, &mut expected);

    let a = project
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut a = a;
    assert!(
        a.try_wait().unwrap().is_none(),
        "writer A finished before it could be frozen: make the input larger"
    );
    // B while A holds the lease: refused.
    let b = project.command().output().unwrap();
    assert!(!b.status.success(), "B ran beside A");
    let refused = event(&b, "sync_error");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("pipeline writer lease unavailable"),
        "{refused}"
    );
    assert_eq!(refused["retryable"], true);

    signal(&a, "-STOP");
    let frozen = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    // C takes the expired lease over and finishes the pass.
    let c = project.command().output().unwrap();
    assert!(
        c.status.success(),
        "C: {}",
        String::from_utf8_lossy(&c.stderr)
    );
    let c_done = event(&c, "sync_complete");
    signal(&a, "-CONT");
    let frozen_for = frozen.elapsed();
    let a_out = a.wait_with_output().unwrap();
    let a_err = String::from_utf8_lossy(&a_out.stderr).into_owned();
    assert!(
        !a_out.status.success(),
        "A committed after resuming: {a_err}"
    );
    assert!(
        a_err.contains("was taken over") || a_err.contains("lease"),
        "A failed, but not on its lease: {a_err}"
    );
    // A final pass delivers anything left; every id exactly once.
    let last = project.command().output().unwrap();
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let found = glue_ids(&project.database, &["order", "refund"]);
    let mut rows = 0;
    for (table, mut want) in expected {
        let mut got = found[&table].clone();
        let total = got.len();
        got.sort_unstable();
        got.dedup();
        assert_eq!(total, got.len(), "{table}: duplicated ids");
        want.sort_unstable();
        assert_eq!(got, want, "{table}: ids");
        rows += total;
    }
    let a_line = a_err
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_else(|| a_err.lines().last().unwrap_or(""));
    println!(
        "fencing: B refused while A ran ({}); A frozen {:.1} s; C took the lease over and synced {} rows in {} batches; A resumed and exited {:?}: {}; rows found once by pyiceberg: {rows} of 150000",
        refused["message"].as_str().unwrap_or(""),
        frozen_for.as_secs_f64(),
        c_done["rows"],
        c_done["batches"],
        a_out.status.code(),
        a_line
    );
    assert_eq!(rows, 150_000);
}

/// `skipprd doctor` on the deployment's config (`infra/skippr.example.yml`) against moto:
/// every missing bucket and the missing state table is a `[FAIL]` naming it with a fix, the
/// missing Glue database a `[warn]` (the first sync creates it); once they exist, exit 0.
#[test]
fn doctor_names_each_missing_aws_resource_then_passes_once_they_exist() {
    let aws = aws();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/skippr.example.yml"),
        dir.path().join("skippr.yml"),
    )
    .unwrap();
    let names: Vec<String> = ["src", "skippr", "wal", "wh", "table"]
        .iter()
        .map(|stem| unique(&format!("doc-{stem}-")))
        .collect();
    let [source, skippr, wal, warehouse, table] = names.as_slice() else {
        unreachable!()
    };
    let warehouse_uri = format!("s3://{warehouse}/iceberg");
    let env = [
        ("WAL_STORAGE", "s3"),
        ("SKIPPR_WAL_S3_BUCKET", wal.as_str()),
        ("SKIPPR_S3_BUCKET", skippr.as_str()),
        ("SKIPPR_STATE_TABLE", table.as_str()),
        ("SKIPPR_WAREHOUSE", warehouse_uri.as_str()),
        ("SKIPPR_GLUE_DATABASE", "doctor_db"),
        ("SKIPPR_ATHENA_WORKGROUP", "primary"),
        ("SKIPPR_ATHENA_RESULTS_BUCKET", "results"),
        ("SKIPPR_SOURCE_BUCKET", source.as_str()),
    ];
    let out = skipprd(dir.path(), &["doctor"], &env);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    for (check, bucket) in [
        ("source", source),
        ("WAL in S3", wal),
        ("schemas in S3", skippr),
        ("warehouse", warehouse),
        ("deadletters in S3", skippr),
    ] {
        assert!(
            text.contains(&format!("[FAIL] bikehire: {check}: s3://{bucket}/")),
            "{check}: {text}"
        );
    }
    assert!(
        text.contains(&format!("fix: create the bucket `{source}`")),
        "{text}"
    );
    assert!(text.contains("[FAIL] bikehire: state table: "), "{text}");
    assert!(text.contains("skipprd store create"), "{text}");
    assert!(
        text.contains("[warn] bikehire: Glue database: `doctor_db` does not exist yet"),
        "{text}"
    );

    let client = aws.s3(None);
    for bucket in [source, skippr, wal, warehouse] {
        aws.block_on(client.create_bucket().bucket(bucket.as_str()).send())
            .unwrap();
    }
    skipprd::state::dynamodb::create_table(&aws, table).unwrap();
    let out = skipprd(dir.path(), &["doctor"], &env);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("[FAIL]"), "{text}");
}
