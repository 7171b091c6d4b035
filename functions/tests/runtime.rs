//! The Lambda functions through their real `lambda_runtime` loop: each test starts the built
//! function binary against the local Runtime API of `tests/lambda/runtime_api.py`, with the
//! AWS SDK pointed at the moto server of `tests/run` (`SKIPPR_TEST_AWS_ENDPOINT`), and reads
//! the landed Iceberg tables back with PyIceberg's `GlueCatalog` (`SKIPPR_TEST_PYTHON`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "../../local/tests/common/local_aws.rs"]
mod local_aws;
use local_aws::{endpoint, reader_python, unique};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

#[path = "../../local/tests/common/loopback.rs"]
mod loopback;

use loopback::{Proxy, ScriptServer};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One HTTP/1.1 exchange with `Connection: close`: (status, body).
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The Runtime API emulator, stopped on drop.
struct RuntimeApi {
    _server: ScriptServer,
    port: u16,
}

impl RuntimeApi {
    fn start() -> RuntimeApi {
        let server = ScriptServer::start("tests/lambda/runtime_api.py", &[], &[]);
        let port = server.port;
        RuntimeApi {
            _server: server,
            port,
        }
    }

    /// Queue `event` with `deadline_ms`; the request id.
    fn queue(&self, event: &Value, deadline_ms: u64) -> String {
        let (status, queued) = http(
            self.port,
            "POST",
            "/_test/invoke",
            Some(&json!({"event": event, "deadline_ms": deadline_ms})),
        );
        assert_eq!(status, 200);
        queued["request_id"].as_str().unwrap().to_owned()
    }

    /// Wait for the function's answer to `id`: `Ok(response)` or `Err((error_type, body))`.
    fn wait(&self, id: &str) -> Result<Value, (String, Value)> {
        self.wait_for(id, Duration::from_secs(240))
            .unwrap_or_else(|| panic!("no answer to invocation {id}"))
    }

    /// The function's answer to `id`, or `None` after `limit`.
    fn wait_for(&self, id: &str, limit: Duration) -> Option<Result<Value, (String, Value)>> {
        let started = Instant::now();
        while started.elapsed() < limit {
            let (_, result) = http(
                self.port,
                "GET",
                &format!("/_test/result/{id}?wait=1"),
                None,
            );
            match result["kind"].as_str() {
                Some("response") => return Some(Ok(result["body"].clone())),
                Some("error") => {
                    let body = result["body"].clone();
                    let error_type = body["errorType"].as_str().unwrap_or_default().to_owned();
                    return Some(Err((error_type, body)));
                }
                _ => {}
            }
        }
        None
    }

    /// Queue `event` and wait for the answer.
    fn invoke(&self, event: &Value, deadline_ms: u64) -> Result<Value, (String, Value)> {
        let id = self.queue(event, deadline_ms);
        self.wait(&id)
    }

    /// How many times functions have asked for the next invocation.
    fn polls(&self) -> u64 {
        http(self.port, "GET", "/_test/stats", None).1["polls"]
            .as_u64()
            .unwrap()
    }

    fn invoke_ok(&self, event: &Value, deadline_ms: u64) -> Value {
        match self.invoke(event, deadline_ms) {
            Ok(v) => v,
            Err((t, body)) => panic!("the invocation failed: {t}: {body}"),
        }
    }
}

/// A function process under the emulator, stopped on drop; its log lines go to `log`.
struct Function {
    child: Child,
    log: PathBuf,
}

impl Function {
    fn start(bin: &str, api: &RuntimeApi, env: &[(&str, String)], log: PathBuf) -> Function {
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .env_remove("SKIPPR_CONFIG_FILE")
            .env_remove("SKIPPR_CONFIG_S3_URI")
            .env_remove("DATA_DIR")
            .env_remove("WAL_STORAGE")
            .env_remove("SKIPPR_DEADLINE_MARGIN_SECONDS")
            .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{}", api.port))
            .env("AWS_LAMBDA_FUNCTION_NAME", "skipprd-test")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap();
        Function { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A function's package (`LAMBDA_TASK_ROOT` with `skippr.yml` and `input/`), its scratch
/// `DATA_DIR`, and the AWS resources: WAL bucket and warehouse, DynamoDB table, Glue database.
struct Project {
    task_root: tempfile::TempDir,
    scratch: tempfile::TempDir,
    bucket: String,
    database: String,
}

const BATCH: u64 = 50;

impl Project {
    fn new() -> Project {
        endpoint();
        let aws = skipprd::aws::Aws::load(Some("us-east-1")).unwrap();
        let bucket = unique("fn");
        let client = aws.s3(None);
        aws.block_on(async { client.create_bucket().bucket(&bucket).send().await })
            .unwrap();
        let table = unique("fn-state");
        skipprd::state::dynamodb::create_table(&aws, &table).unwrap();
        let database = unique("fn_");
        let task_root = tempfile::tempdir().unwrap();
        std::fs::write(
            task_root.path().join("skippr.yml"),
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
data_sources:
  files:
    File:
      path: input
      batch_size: {BATCH}
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
        std::fs::create_dir_all(task_root.path().join("input")).unwrap();
        Project {
            task_root,
            scratch: tempfile::tempdir().unwrap(),
            bucket,
            database,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "LAMBDA_TASK_ROOT",
                self.task_root.path().display().to_string(),
            ),
            ("DATA_DIR", self.scratch.path().display().to_string()),
            ("WAL_STORAGE", "s3".to_owned()),
            ("SKIPPR_WAL_S3_BUCKET", self.bucket.clone()),
        ]
    }

    /// This project's environment with another scratch `DATA_DIR` (another execution
    /// environment, or a cold start).
    fn env_with_scratch(&self, scratch: &Path) -> Vec<(&'static str, String)> {
        let mut env = self.env();
        env.retain(|(k, _)| *k != "DATA_DIR");
        env.push(("DATA_DIR", scratch.display().to_string()));
        env
    }

    fn write(&self, file: &str, ids: std::ops::Range<u64>) {
        let text: String = ids
            .map(|id| {
                format!(
                    "{{\"id\":{id},\"name\":\"row {id}\",\"score\":{}}}\n",
                    id % 7
                )
            })
            .collect();
        std::fs::write(self.task_root.path().join("input").join(file), text).unwrap();
    }

    /// Every id of the landed table, read by PyIceberg's `GlueCatalog`, sorted.
    fn landed_ids(&self) -> Vec<u64> {
        let v = read_glue(&self.database, &["--values", "--key", "id", "events"]);
        let t = &v["tables"]["events"]["pyiceberg"];
        let ids: Vec<u64> = t["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["id"].as_u64().unwrap())
            .collect();
        assert_eq!(t["rows"].as_u64().unwrap() as usize, ids.len());
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted
    }
}

/// What PyIceberg's `GlueCatalog` reads of `database` (`tests/readers/read_glue_table.py` with
/// `args`: flags, then table names).
fn read_glue(database: &str, args: &[&str]) -> Value {
    let out = Command::new(reader_python())
        .arg(repo().join("tests/readers/read_glue_table.py"))
        .args(["--database", database])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_glue_table.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(repo().join("tests/fixtures/events").join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn total_requests(summary: &Value) -> u64 {
    summary["aws_requests"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// Scheduled invoke lands the rows; an idle invoke lands nothing for a few requests; an invoke
/// whose deadline is near stops reading early, and the next one continues: every id once.
#[test]
fn scheduled_idle_and_deadline_bounded_invokes_land_every_row_once() {
    reader_python();
    let project = Project::new();
    project.write("a.jsonl", 0..600);
    let api = RuntimeApi::start();
    let logs = tempfile::tempdir().unwrap();
    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env(),
        logs.path().join("sync.log"),
    );
    let minute = || now_ms() + 60_000;

    // 1. The scheduled event (pipeline in `detail`) lands every row.
    let scheduled = api.invoke_ok(&fixture("scheduled.json"), minute());
    println!("scheduled: {scheduled}");
    assert_eq!(scheduled["pipeline"], "events");
    assert_eq!(scheduled["rows"], 600);
    assert_eq!(scheduled["batches"], 600 / BATCH);
    assert_eq!(scheduled["stopped_for_deadline"], false);
    assert_eq!(scheduled["pending"], 0);
    assert!(scheduled["delivered"].as_u64().unwrap() >= 1);
    assert_eq!(project.landed_ids(), (0..600).collect::<Vec<_>>());

    // 2. Nothing new: nothing lands, for a handful of requests.
    let idle = api.invoke_ok(&fixture("direct.json"), minute());
    println!("idle: {idle}");
    assert_eq!(idle["rows"], 0);
    assert_eq!(idle["batches"], 0);
    assert_eq!(idle["delivered"], 0);
    let idle_requests = total_requests(&idle);
    assert!(
        (1..=12).contains(&idle_requests),
        "an idle invoke sent {idle_requests} requests: {idle}"
    );
    assert_eq!(project.landed_ids().len(), 600);

    // 3. 1000 new rows (20 batches) and a deadline 200 ms away: reading stops early, what was
    // committed is delivered; the next invoke reads the rest.
    project.write("b.jsonl", 600..1600);
    let short = api.invoke_ok(&fixture("direct.json"), now_ms() + 200);
    println!("short deadline: {short}");
    assert_eq!(short["stopped_for_deadline"], true, "{short}");
    let first = short["rows"].as_u64().unwrap();
    assert!(first > 0 && first < 1000, "{short}");
    assert_eq!(short["pending"], 0);
    let landed = project.landed_ids();
    assert_eq!(landed.len() as u64, 600 + first);
    let rest = api.invoke_ok(&fixture("scheduled.json"), minute());
    println!("continued: {rest}");
    assert_eq!(rest["stopped_for_deadline"], false);
    assert_eq!(first + rest["rows"].as_u64().unwrap(), 1000);
    assert_eq!(project.landed_ids(), (0..1600).collect::<Vec<_>>());

    let log = function.log();
    assert!(
        log.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "log lines must be JSON: {log}"
    );
    assert!(log.contains("Invocation done."), "{log}");
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_default();
    assert!(
        secret.is_empty() || !log.contains(&secret),
        "the secret key must not be logged"
    );
}

/// Config errors are returned as `NonRetryable.*` errors through `/invocation/{id}/error`.
#[test]
fn config_errors_are_non_retryable_invocation_errors() {
    endpoint();
    let project = Project::new();
    project.write("a.jsonl", 0..10);
    let api = RuntimeApi::start();
    let logs = tempfile::tempdir().unwrap();

    // A WAL on the function's disk is refused at init; every invocation says so.
    let mut disk = project.env();
    disk.retain(|(k, _)| *k != "WAL_STORAGE");
    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &disk,
        logs.path().join("disk.log"),
    );
    for _ in 0..2 {
        let (error_type, body) = api
            .invoke(&fixture("direct.json"), now_ms() + 60_000)
            .unwrap_err();
        println!("disk WAL: {error_type}: {body}");
        assert_eq!(error_type, "NonRetryable.LocalState");
        assert!(
            body["errorMessage"]
                .as_str()
                .unwrap()
                .contains("WAL_STORAGE")
        );
    }
    drop(function);

    // With a good config: an unknown pipeline and a malformed event.
    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env(),
        logs.path().join("good.log"),
    );
    let (error_type, body) = api
        .invoke(&json!({"pipeline": "nope"}), now_ms() + 60_000)
        .unwrap_err();
    println!("unknown pipeline: {error_type}: {body}");
    assert_eq!(error_type, "NonRetryable.Config");
    assert!(body["errorMessage"].as_str().unwrap().contains("nope"));
    let (error_type, _) = api.invoke(&json!([1, 2]), now_ms() + 60_000).unwrap_err();
    assert_eq!(error_type, "NonRetryable.Event");
    drop(function);

    // A broken config file fails the init; the invocation gets the error.
    std::fs::write(project.task_root.path().join("skippr.yml"), "pipelines: [").unwrap();
    let _broken = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env(),
        logs.path().join("broken.log"),
    );
    let (error_type, body) = api
        .invoke(&fixture("direct.json"), now_ms() + 60_000)
        .unwrap_err();
    println!("broken config: {error_type}: {body}");
    assert_eq!(error_type, "NonRetryable.Config");
    assert!(
        body["errorMessage"]
            .as_str()
            .unwrap()
            .contains("skippr.yml"),
        "{body}"
    );
}

/// The discover function, with its config read from S3 (`SKIPPR_CONFIG_S3_URI`), returns the
/// schema summary.
#[test]
fn discover_with_the_config_from_s3_returns_the_schema_summary() {
    endpoint();
    let project = Project::new();
    project.write("a.jsonl", 0..30);
    let aws = skipprd::aws::Aws::load(Some("us-east-1")).unwrap();
    let client = aws.s3(None);
    let text = std::fs::read(project.task_root.path().join("skippr.yml")).unwrap();
    std::fs::remove_file(project.task_root.path().join("skippr.yml")).unwrap();
    let bucket = project.bucket.clone();
    aws.block_on(async {
        client
            .put_object()
            .bucket(&bucket)
            .key("config/skippr.yml")
            .body(text.clone().into())
            .send()
            .await
    })
    .unwrap();
    let mut env = project.env();
    env.push((
        "SKIPPR_CONFIG_S3_URI",
        format!("s3://{}/config/skippr.yml", project.bucket),
    ));
    // A skippr bucket: schemas are kept there (`skipprd_el_storage_mode` defaults to `s3`).
    env.push(("SKIPPR_S3_BUCKET", project.bucket.clone()));
    let api = RuntimeApi::start();
    let logs = tempfile::tempdir().unwrap();
    let _function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-discover"),
        &api,
        &env,
        logs.path().join("discover.log"),
    );
    let summary = api.invoke_ok(&fixture("direct.json"), now_ms() + 60_000);
    println!("discover: {summary}");
    assert_eq!(summary["pipeline"], "events");
    assert_eq!(summary["records"], 30);
    assert_eq!(summary["version"], 1);
    assert_eq!(summary["namespaces"]["events"]["fields"], 3, "{summary}");
    assert_eq!(summary["namespaces"]["events"]["records"], 30);
    let key = "schemas/default/default/events/schema.json";
    let object = aws
        .block_on(async {
            let out = client.get_object().bucket(&bucket).key(key).send().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                out.body.collect().await?.into_bytes(),
            )
        })
        .unwrap_or_else(|e| panic!("discover wrote no s3://{bucket}/{key}: {e}"));
    assert!(!object.is_empty());

    // The CLI, in another directory with the same config and no local state, reads the schema
    // discover wrote.
    let cli = Path::new(env!("CARGO_BIN_EXE_skipprd-discover")).with_file_name("skipprd");
    assert!(
        cli.exists(),
        "{} is missing: build the CLI too (`cargo test --workspace` does)",
        cli.display()
    );
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("skippr.yml"), &text).unwrap();
    let out = Command::new(&cli)
        .current_dir(elsewhere.path())
        .args(["schema", "-p", "events"])
        .env_remove("SKIPPR_CONFIG_FILE")
        .env_remove("DATA_DIR")
        .env("WAL_STORAGE", "s3")
        .env("SKIPPR_WAL_S3_BUCKET", &project.bucket)
        .env("SKIPPR_S3_BUCKET", &project.bucket)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "skipprd schema: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("skipprd schema:\n{printed}");
    for field in ["id", "name", "score"] {
        assert!(printed.contains(field), "{field} missing from:\n{printed}");
    }
    assert!(
        !elsewhere.path().join("data").exists()
            || std::fs::read_dir(elsewhere.path().join("data"))
                .unwrap()
                .flatten()
                .all(|d| !d.path().join("schema.json").exists()),
        "the schema came from S3, not a local file"
    );
}

/// Two overlapping invokes of one pipeline (two execution environments, each with its own
/// `/tmp`): one runs the pass, the other finds the lease held and returns `skipped`; then a
/// cold start (a new process, an empty `DATA_DIR`) continues. Every id lands exactly once.
#[test]
fn overlapping_invokes_never_double_write_and_a_cold_start_continues() {
    reader_python();
    let project = Project::new();
    let rows = 6000;
    project.write("a.jsonl", 0..rows);
    let api = RuntimeApi::start();
    let logs = tempfile::tempdir().unwrap();
    let (scratch_a, scratch_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env_with_scratch(scratch_a.path()),
        logs.path().join("a.log"),
    );
    let b = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env_with_scratch(scratch_b.path()),
        logs.path().join("b.log"),
    );
    let started = Instant::now();
    while api.polls() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the functions did not poll"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let deadline = now_ms() + 120_000;
    let first = api.queue(&fixture("scheduled.json"), deadline);
    let second = api.queue(&fixture("scheduled.json"), deadline);
    let results = [api.wait(&first).unwrap(), api.wait(&second).unwrap()];
    for r in &results {
        println!("overlapping: {r}");
    }
    let skipped: Vec<&Value> = results
        .iter()
        .filter(|r| r.get("skipped").is_some())
        .collect();
    let synced: u64 = results.iter().filter_map(|r| r["rows"].as_u64()).sum();
    assert_eq!(synced, rows, "the passes together read every row once");
    assert_eq!(
        skipped.len(),
        1,
        "one invoke must find the lease held: {results:?}"
    );
    assert!(
        skipped[0]["skipped"]
            .as_str()
            .unwrap()
            .starts_with("lease held by "),
        "{results:?}"
    );
    assert_eq!(project.landed_ids(), (0..rows).collect::<Vec<_>>());
    drop((a, b));

    // A cold start: a new process with an empty /tmp (no saved schema) continues.
    project.write("b.jsonl", rows..rows + 100);
    let scratch_c = tempfile::tempdir().unwrap();
    let c = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env_with_scratch(scratch_c.path()),
        logs.path().join("c.log"),
    );
    let id = api.queue(&fixture("direct.json"), now_ms() + 60_000);
    let cold = api
        .wait_for(&id, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no answer; the function's log:\n{}", c.log()))
        .unwrap();
    println!("cold start: {cold}");
    assert_eq!(cold["rows"], 100);
    assert_eq!(project.landed_ids(), (0..rows + 100).collect::<Vec<_>>());
}

/// Throttling and 5xx through the function: with every third request to S3 and DynamoDB
/// answered `503 SlowDown` / `ThrottlingException` / `500`, the SDK's retries carry the pass
/// and every row lands once. With every request failing, the invocation fails with a
/// `Retryable.*` error type, and the next invocation (AWS healthy again) lands everything once.
#[test]
fn throttling_and_5xx_are_retried_or_reported_as_retryable() {
    reader_python();
    let project = Project::new();
    project.write("a.jsonl", 0..400);
    let logs = tempfile::tempdir().unwrap();
    let api = RuntimeApi::start();

    let flaky = Proxy::start(&endpoint(), &["--every", "3"]);
    let mut env = project.env();
    env.push(("AWS_ENDPOINT_URL", flaky.url.clone()));
    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &env,
        logs.path().join("flaky.log"),
    );
    let summary = api.invoke_ok(&fixture("scheduled.json"), now_ms() + 120_000);
    let (requests, faults) = flaky.counts();
    println!("through faults ({faults} injected in {requests} requests): {summary}");
    assert!(faults >= 5, "only {faults} faults were injected");
    assert_eq!(summary["rows"], 400, "{summary}");
    assert_eq!(summary["pending"], 0, "{summary}");
    drop(function);
    assert_eq!(project.landed_ids(), (0..400).collect::<Vec<_>>());

    project.write("b.jsonl", 400..700);
    let down = Proxy::start(&endpoint(), &["--always"]);
    let mut env = project.env();
    env.push(("AWS_ENDPOINT_URL", down.url.clone()));
    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &env,
        logs.path().join("down.log"),
    );
    let (error_type, body) = api
        .invoke(&fixture("scheduled.json"), now_ms() + 120_000)
        .expect_err("every AWS request failed, yet the invocation succeeded");
    println!("AWS down: {error_type}: {body}");
    assert!(error_type.starts_with("Retryable."), "{error_type}: {body}");
    let message = body["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("ThrottlingException")
            || message.contains("SlowDown")
            || message.contains("Internal"),
        "the message names the service's error: {message}"
    );
    assert!(
        !message.contains("headers") && message.len() < 600,
        "the message is the service's, not the raw response: {message}"
    );
    drop(function);
    drop(down);

    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env(),
        logs.path().join("healthy.log"),
    );
    let summary = api.invoke_ok(&fixture("scheduled.json"), now_ms() + 120_000);
    println!("AWS healthy again: {summary}");
    drop(function);
    assert_eq!(project.landed_ids(), (0..700).collect::<Vec<_>>());
}

/// The deployment's own config (`infra/skippr.example.yml`, uploaded to the config object) with
/// the environment both stacks set (`infra/sam/template.yaml` Globals; `tests/infra/compare.py`
/// checks every `${NAME}` of the file is set on both functions), against moto resources made as
/// the stacks make them: discover writes the schema, a scheduled invoke lands both event types
/// in Glue tables that PyIceberg reads, rejects go to the deadletter prefix.
#[test]
fn the_deployment_example_config_runs_as_the_stacks_configure_it() {
    reader_python();
    let aws = skipprd::aws::Aws::load(Some("us-east-1")).unwrap();
    let s3 = aws.s3(None);
    let bucket = |stem: &str| {
        let name = unique(stem);
        aws.block_on(s3.create_bucket().bucket(&name).send())
            .unwrap();
        name
    };
    let (source, skippr, wal, warehouse, results) = (
        bucket("src"),
        bucket("skippr"),
        bucket("wal"),
        bucket("wh"),
        bucket("athena"),
    );
    let table = unique("state");
    skipprd::state::dynamodb::create_table(&aws, &table).unwrap();
    let database = unique("db_");
    let glue = aws.glue();
    aws.block_on(
        glue.create_database()
            .database_input(
                aws_sdk_glue::types::DatabaseInput::builder()
                    .name(&database)
                    .build()
                    .unwrap(),
            )
            .send(),
    )
    .unwrap();
    let put = |bucket: &str, key: &str, body: Vec<u8>| {
        aws.block_on(
            s3.put_object()
                .bucket(bucket)
                .key(key)
                .body(body.into())
                .send(),
        )
        .unwrap();
    };
    let config = std::fs::read(repo().join("infra/skippr.example.yml")).unwrap();
    put(&skippr, "config/skippr.yml", config.clone());
    let mut records = String::new();
    for id in 0..120u64 {
        let kind = if id % 3 == 0 {
            "ride_ended"
        } else {
            "ride_started"
        };
        records.push_str(&format!(
            "{{\"event_type\":\"{kind}\",\"id\":{id},\"station\":\"s{}\"}}\n",
            id % 5
        ));
    }
    records.push_str("{\"event_type\":\"ride_started\",\"id\":\n");
    put(&source, "bikehire/2026/12/01/a.jsonl", records.into_bytes());

    let env: Vec<(&str, String)> = vec![
        (
            "SKIPPR_CONFIG_S3_URI",
            format!("s3://{skippr}/config/skippr.yml"),
        ),
        ("WAL_STORAGE", "s3".into()),
        ("SKIPPR_S3_BUCKET", skippr.clone()),
        ("SKIPPR_WAL_S3_BUCKET", wal.clone()),
        ("SKIPPRD_EL_STORAGE_MODE", "s3".into()),
        ("SKIPPR_STATE_TABLE", table.clone()),
        ("SKIPPR_WAREHOUSE", format!("s3://{warehouse}/iceberg")),
        ("SKIPPR_GLUE_DATABASE", database.clone()),
        ("SKIPPR_ATHENA_WORKGROUP", "primary".into()),
        ("SKIPPR_ATHENA_RESULTS_BUCKET", results.clone()),
        ("SKIPPR_SOURCE_BUCKET", source.clone()),
        ("AWS_REGION", "us-east-1".into()),
    ];
    // Every variable the config names is one this test (and so the stacks) sets.
    let text = String::from_utf8(config).unwrap();
    let uncommented: String = text
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    for name in uncommented
        .split("${")
        .skip(1)
        .filter_map(|rest| rest.split('}').next())
    {
        assert!(
            env.iter().any(|(k, _)| *k == name),
            "infra/skippr.example.yml uses ${{{name}}}, which this test does not set: add it here and to both stacks"
        );
    }
    let scratch = tempfile::tempdir().unwrap();
    let mut env = env;
    env.push(("DATA_DIR", scratch.path().display().to_string()));
    env.push(("LAMBDA_TASK_ROOT", scratch.path().display().to_string()));
    let logs = tempfile::tempdir().unwrap();
    let api = RuntimeApi::start();
    let event = json!({"pipeline": "bikehire"});

    let discover = Function::start(
        env!("CARGO_BIN_EXE_skipprd-discover"),
        &api,
        &env,
        logs.path().join("discover.log"),
    );
    let schema = api.invoke_ok(&event, now_ms() + 60_000);
    println!("discover: {schema}");
    drop(discover);
    assert_eq!(
        schema["namespaces"]["ride_started"]["records"], 80,
        "{schema}"
    );
    assert_eq!(
        schema["namespaces"]["ride_ended"]["records"], 40,
        "{schema}"
    );

    let sync = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &env,
        logs.path().join("sync.log"),
    );
    let mut scheduled = fixture("scheduled.json");
    scheduled["detail"] = event.clone();
    let summary = api.invoke_ok(&scheduled, now_ms() + 120_000);
    println!("sync: {summary}");
    drop(sync);
    assert_eq!(summary["rows"], 120, "{summary}");
    assert_eq!(summary["deadletters"], 1, "{summary}");
    assert_eq!(summary["pending"], 0, "{summary}");

    let read = read_glue(&database, &["ride_started", "ride_ended"]);
    assert_eq!(read["tables"]["ride_started"]["pyiceberg"]["rows"], 80);
    assert_eq!(read["tables"]["ride_ended"]["pyiceberg"]["rows"], 40);
    let rejected = aws
        .block_on(
            s3.list_objects_v2()
                .bucket(&skippr)
                .prefix("deadletters/")
                .send(),
        )
        .unwrap();
    assert_eq!(rejected.key_count(), Some(1), "one deadletter object");
}

/// Every path under `dir`, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path.clone());
            }
            paths.push(path);
        }
    }
    paths.sort();
    paths
}

/// With `data_dir: ./data` on the pipeline (the usual local setting, resolved against the
/// task root), both functions keep their local state in the scratch `DATA_DIR`: the task root
/// (read-only on AWS; here mode 0555 and compared file by file) gains nothing.
#[test]
fn the_functions_create_nothing_in_the_task_root_whatever_data_dir_says() {
    use std::os::unix::fs::PermissionsExt;
    endpoint();
    let project = Project::new();
    project.write("a.jsonl", 0..40);
    let config = project.task_root.path().join("skippr.yml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "  events:\n    data_source:",
        "  events:\n    data_dir: ./data\n    data_source:",
    );
    assert!(text.contains("data_dir: ./data"), "{text}");
    std::fs::write(&config, text).unwrap();
    let before = tree(project.task_root.path());
    let read_only = std::fs::Permissions::from_mode(0o555);
    for path in before.iter().filter(|p| p.is_dir()) {
        std::fs::set_permissions(path, read_only.clone()).unwrap();
    }
    std::fs::set_permissions(project.task_root.path(), read_only).unwrap();

    let logs = tempfile::tempdir().unwrap();
    let api = RuntimeApi::start();
    let sync = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &project.env(),
        logs.path().join("sync.log"),
    );
    let summary = api.invoke_ok(&fixture("scheduled.json"), now_ms() + 60_000);
    println!("sync: {summary}");
    assert_eq!(summary["rows"], 40, "{summary}\n{}", sync.log());
    assert_eq!(summary["pending"], 0);
    drop(sync);

    let api = RuntimeApi::start();
    let discover = Function::start(
        env!("CARGO_BIN_EXE_skipprd-discover"),
        &api,
        &project.env(),
        logs.path().join("discover.log"),
    );
    let summary = api.invoke_ok(&fixture("direct.json"), now_ms() + 60_000);
    println!("discover: {summary}");
    assert_eq!(summary["records"], 40, "{summary}\n{}", discover.log());
    drop(discover);

    let writable = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(project.task_root.path(), writable.clone()).unwrap();
    for path in before.iter().filter(|p| p.is_dir()) {
        std::fs::set_permissions(path, writable.clone()).unwrap();
    }
    assert_eq!(
        tree(project.task_root.path()),
        before,
        "the task root changed"
    );
    assert!(
        project.scratch.path().join("default_events").is_dir(),
        "the state directory is in the scratch DATA_DIR"
    );
}

/// Issue 21 item 1: the schedule fired before the config object was uploaded. The init fails
/// (the object is missing) and the invocation returns that error; once the object is there, the
/// next invocation of the same warm process runs the pass instead of returning the old error.
#[test]
fn a_failed_init_is_tried_again_by_the_next_invocation_of_the_warm_function() {
    reader_python();
    let project = Project::new();
    project.write("a.jsonl", 0..20);
    let aws = skipprd::aws::Aws::load(Some("us-east-1")).unwrap();
    let client = aws.s3(None);
    let config = project.task_root.path().join("skippr.yml");
    let text = std::fs::read(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    let mut env = project.env();
    env.push((
        "SKIPPR_CONFIG_S3_URI",
        format!("s3://{}/config/late.yml", project.bucket),
    ));
    let api = RuntimeApi::start();
    let logs = tempfile::tempdir().unwrap();
    let function = Function::start(
        env!("CARGO_BIN_EXE_skipprd-sync"),
        &api,
        &env,
        logs.path().join("late.log"),
    );
    let (error_type, body) = api
        .invoke(&fixture("direct.json"), now_ms() + 60_000)
        .unwrap_err();
    println!("before the upload: {error_type}: {body}");
    assert!(
        body["errorMessage"].as_str().unwrap().contains("late.yml"),
        "{body}"
    );

    let bucket = project.bucket.clone();
    aws.block_on(async {
        client
            .put_object()
            .bucket(&bucket)
            .key("config/late.yml")
            .body(text.into())
            .send()
            .await
    })
    .unwrap();
    let summary = api.invoke_ok(&fixture("direct.json"), now_ms() + 60_000);
    println!("after the upload: {summary}");
    assert_eq!(summary["pipeline"], "events");
    assert_eq!(summary["rows"], 20);
    assert_eq!(project.landed_ids(), (0..20).collect::<Vec<_>>());
    let log = function.log();
    assert!(
        log.contains("Init failed; the next invocation tries again."),
        "{log}"
    );
    assert!(log.contains("Initialised on invocation"), "{log}");
}
