//! `skipprd query --engine athena` against a local AWS (the moto server `tests/run` starts).
//!
//! moto runs no SQL: a query returns the rows queued beforehand through moto's own API
//! (`POST /moto-api/static/athena/query-results`), each queued result going to the next
//! `StartQueryExecution`. So these tests check what skipprd sends (database, workgroup,
//! results location, the statement) and what it makes of Athena's answer (the header row, the
//! types, nulls, output formats, exit codes), not SQL semantics.
//!
//! - a typed result, as `--plain` JSON and as a table, and the request Athena received;
//! - 1500 rows (more than Athena's 1000-row page) all come back. moto ignores `MaxResults`
//!   and never returns a `NextToken`, so paging itself is tested against the in-process double
//!   (`shared/src/query/athena/tests.rs`);
//! - a query cancelled while skipprd polls it (moto's state manager holds it `QUEUED`), and a
//!   query that outlives `--athena-timeout` and is stopped. moto never reports `FAILED`:
//!   that path is tested against the double;
//! - pipelines without an AthenaIceberg sink: exit code 2 and why (no AWS needed).
//!
//! The queue and the state manager are global to the moto server, so the tests that use them
//! run one at a time (`MOTO`).
//!
//! Needs `SKIPPR_TEST_AWS_ENDPOINT` (and the `AWS_*` variables) from `bash tests/run`;
//! without them these tests fail and say so.
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

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skipprd::aws::Aws;

/// Held by every test that queues results or changes moto's state manager.
static MOTO: Mutex<()> = Mutex::new(());

/// POST `body` to moto's own API at `path`; panics unless the status is `expect`.
fn moto_api(path: &str, body: &Value, expect: u16) {
    let endpoint = endpoint();
    let address = endpoint
        .strip_prefix("http://")
        .expect("the test endpoint is http://host:port")
        .trim_end_matches('/');
    let body = body.to_string();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap_or_default();
    assert_eq!(
        status,
        expect.to_string(),
        "moto API {path} answered: {response}"
    );
}

/// Queue results: the next `StartQueryExecution`s get them, in order.
fn queue_results(results: Vec<Value>) {
    moto_api(
        "/moto-api/static/athena/query-results",
        &json!({ "region": "us-east-1", "results": results }),
        201,
    );
}

/// Athena's answer to a `SELECT`: the column names as the first row, then `rows` (`None` is
/// a missing value).
fn result(columns: &[(&str, &str)], rows: &[Vec<Option<String>>]) -> Value {
    let datum = |v: &Option<String>| match v {
        Some(v) => json!({ "VarCharValue": v }),
        None => json!({}),
    };
    let header = json!({ "Data": columns.iter().map(|(n, _)| json!({ "VarCharValue": n })).collect::<Vec<_>>() });
    let mut all = vec![header];
    all.extend(
        rows.iter()
            .map(|row| json!({ "Data": row.iter().map(datum).collect::<Vec<_>>() })),
    );
    json!({
        "rows": all,
        "column_info": columns.iter().map(|(name, kind)| json!({
            "CatalogName": "hive",
            "SchemaName": "",
            "TableName": "",
            "Name": name,
            "Label": name,
            "Type": kind,
            "Precision": 0,
            "Scale": 0,
            "Nullable": "UNKNOWN",
            "CaseSensitive": false,
        })).collect::<Vec<_>>(),
    })
}

fn some(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some((*v).to_owned())).collect()
}

/// A project whose pipeline `events` lands in `database` through an AthenaIceberg sink.
fn athena_project(
    database: &str,
    workgroup: Option<&str>,
    results_bucket: &str,
) -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("events.jsonl"), "").unwrap();
    let workgroup = workgroup
        .map(|w| format!("      athena_workgroup_name: {w}\n"))
        .unwrap_or_default();
    std::fs::write(
        project.path().join("skippr.yml"),
        format!(
            "\
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
data_sources:
  files:
    File:
      path: events.jsonl
data_sinks:
  lake:
    AthenaIceberg:
      warehouse: s3://lake-bucket/warehouse
      glue_database_name: {database}
      athena_results_s3_bucket: {results_bucket}
      region: us-east-1
{workgroup}"
        ),
    )
    .unwrap();
    project
}

fn skipprd(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = skipprd_command(dir);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn run(dir: &Path, args: &[&str]) -> Output {
    skipprd(dir, args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The executions started in `workgroup`, newest last as moto lists them.
fn executions(aws: &Aws, workgroup: &str) -> Vec<String> {
    let athena = aws.athena();
    aws.block_on(async {
        athena
            .list_query_executions()
            .work_group(workgroup)
            .send()
            .await
    })
    .unwrap()
    .query_execution_ids()
    .to_vec()
}

fn create_workgroup(aws: &Aws, name: &str) {
    let athena = aws.athena();
    aws.block_on(async { athena.create_work_group().name(name).send().await })
        .unwrap();
}

#[test]
fn a_select_comes_back_typed_as_json_and_as_a_table_and_runs_in_the_sinks_database() {
    endpoint();
    let _moto = MOTO.lock().unwrap_or_else(|e| e.into_inner());
    let aws = Aws::load(Some("us-east-1")).unwrap();
    let database = unique("shop_");
    let workgroup = unique("wg-");
    create_workgroup(&aws, &workgroup);
    let project = athena_project(&database, Some(&workgroup), "athena-results");
    let columns = [
        ("id", "bigint"),
        ("city", "varchar"),
        ("price", "double"),
        ("paid", "boolean"),
        ("total", "decimal"),
    ];
    let rows = vec![
        some(&["1", "Oslo", "12.5", "true", "12.50"]),
        vec![
            Some("2".to_owned()),
            None,
            Some("3.0".to_owned()),
            Some("false".to_owned()),
            None,
        ],
    ];
    queue_results(vec![result(&columns, &rows), result(&columns, &rows)]);

    let sql = "select id, city, price, paid, total from rides order by id";
    let output = run(
        project.path(),
        &["query", "--engine", "athena", "-s", sql, "--plain"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "{\"header\":[\"id\",\"city\",\"price\",\"paid\",\"total\"],\"rows\":[[1,\"Oslo\",12.5,true,\"12.50\"],[2,null,3.0,false,null]]}\n"
    );

    let output = run(project.path(), &["query", "--engine", "athena", "-s", sql]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "\
+----+------+-------+-------+-------+
| id | city | price | paid  | total |
+----+------+-------+-------+-------+
| 1  | Oslo | 12.5  | true  | 12.50 |
| 2  |      | 3.0   | false |       |
+----+------+-------+-------+-------+
(2 rows)
"
    );

    // What Athena was asked: the statement, in the sink's database and workgroup, results
    // under the sink's bucket.
    let ids = executions(&aws, &workgroup);
    assert_eq!(ids.len(), 2, "{ids:?}");
    let athena = aws.athena();
    for id in ids {
        let execution = aws
            .block_on(async {
                athena
                    .get_query_execution()
                    .query_execution_id(&id)
                    .send()
                    .await
            })
            .unwrap();
        let execution = execution.query_execution().unwrap();
        assert_eq!(execution.query(), Some(sql));
        assert_eq!(
            execution
                .query_execution_context()
                .and_then(|c| c.database()),
            Some(database.as_str())
        );
        assert_eq!(execution.work_group(), Some(workgroup.as_str()));
        assert_eq!(
            execution
                .result_configuration()
                .and_then(|c| c.output_location()),
            Some(format!("s3://athena-results/skipprd-query-results/{id}.csv").as_str())
        );
    }
}

#[test]
fn more_rows_than_one_athena_page_all_come_back() {
    endpoint();
    let _moto = MOTO.lock().unwrap_or_else(|e| e.into_inner());
    let project = athena_project(&unique("big_"), None, "athena-results");
    let rows: Vec<Vec<Option<String>>> = (0..1500)
        .map(|i| some(&[&i.to_string(), &format!("r{i}")]))
        .collect();
    queue_results(vec![result(&[("n", "integer"), ("s", "varchar")], &rows)]);
    let output = run(
        project.path(),
        &[
            "query",
            "--engine",
            "athena",
            "-s",
            "select n, s from t",
            "--plain",
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["header"], json!(["n", "s"]));
    let rows = value["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1500);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(*row, json!([i, format!("r{i}")]));
    }
}

/// Puts moto's Athena executions under manual control (each stays `QUEUED`) until dropped.
struct HeldQueries;

impl HeldQueries {
    fn hold() -> HeldQueries {
        moto_api(
            "/moto-api/state-manager/set-transition",
            &json!({
                "model_name": "athena::execution",
                "transition": { "progression": "manual", "times": 1_000_000 },
            }),
            201,
        );
        HeldQueries
    }
}

impl Drop for HeldQueries {
    fn drop(&mut self) {
        moto_api(
            "/moto-api/state-manager/unset-transition",
            &json!({ "model_name": "athena::execution" }),
            201,
        );
    }
}

#[test]
fn a_query_cancelled_while_polled_fails_with_its_id_and_state() {
    endpoint();
    let _moto = MOTO.lock().unwrap_or_else(|e| e.into_inner());
    let aws = Aws::load(Some("us-east-1")).unwrap();
    let workgroup = unique("wg-");
    create_workgroup(&aws, &workgroup);
    let project = athena_project(&unique("cancel_"), Some(&workgroup), "athena-results");
    let _held = HeldQueries::hold();

    let child = skipprd(
        project.path(),
        &[
            "query",
            "--engine",
            "athena",
            "-s",
            "select 1",
            "--athena-timeout",
            "60",
        ],
    )
    .spawn()
    .unwrap();
    let started = Instant::now();
    let id = loop {
        if let Some(id) = executions(&aws, &workgroup).pop() {
            break id;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "skipprd never started a query"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let athena = aws.athena();
    aws.block_on(async {
        athena
            .stop_query_execution()
            .query_execution_id(&id)
            .send()
            .await
    })
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(output.stdout.is_empty());
    assert_eq!(
        text(&output.stderr),
        format!("error: Athena query {id} CANCELLED: no reason given\n")
    );
}

#[test]
fn a_query_that_outlives_the_timeout_is_stopped() {
    endpoint();
    let _moto = MOTO.lock().unwrap_or_else(|e| e.into_inner());
    let aws = Aws::load(Some("us-east-1")).unwrap();
    let workgroup = unique("wg-");
    create_workgroup(&aws, &workgroup);
    let project = athena_project(&unique("slow_"), Some(&workgroup), "athena-results");
    let _held = HeldQueries::hold();

    let started = Instant::now();
    let output = run(
        project.path(),
        &[
            "query",
            "--engine",
            "athena",
            "-s",
            "select 1",
            "--athena-timeout",
            "1",
        ],
    );
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let ids = executions(&aws, &workgroup);
    assert_eq!(ids.len(), 1);
    assert_eq!(
        text(&output.stderr),
        format!(
            "error: Athena query {} still QUEUED after 1s (the timeout); it was asked to stop\n",
            ids[0]
        )
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // skipprd stopped it, so it costs nothing more.
    let athena = aws.athena();
    let execution = aws
        .block_on(async {
            athena
                .get_query_execution()
                .query_execution_id(&ids[0])
                .send()
                .await
        })
        .unwrap();
    let state = execution
        .query_execution()
        .and_then(|e| e.status())
        .and_then(|s| s.state())
        .map(|s| s.as_str().to_owned());
    assert_eq!(state.as_deref(), Some("CANCELLED"));
}

#[test]
fn pipelines_without_an_athena_iceberg_sink_are_refused_with_exit_code_2() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("events.jsonl"), "").unwrap();
    std::fs::write(
        project.path().join("skippr.yml"),
        "\
pipelines:
  local_lake:
    data_source: data_sources.files
    data_sink: data_sinks.lake
  bare:
    data_source: data_sources.files
data_sources:
  files:
    File:
      path: events.jsonl
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
",
    )
    .unwrap();
    let output = run(
        project.path(),
        &[
            "query",
            "--engine",
            "athena",
            "-p",
            "local_lake",
            "-s",
            "select 1",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(output.stdout.is_empty());
    assert_eq!(
        text(&output.stderr),
        "error: pipeline 'local_lake': `--engine athena` needs an Athena or AthenaIceberg data sink, but its data_sink 'lake' is Duckdb; choose a pipeline with one (-p NAME) or use the local engine\n"
    );

    let output = run(
        project.path(),
        &[
            "query", "--engine", "athena", "-p", "bare", "-s", "select 1",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr)
            .contains("pipeline 'bare': `--engine athena` needs an Athena or AthenaIceberg data sink, but it has no data_sink"),
        "{}",
        text(&output.stderr)
    );

    // The local engine still answers for the same pipeline.
    let output = run(
        project.path(),
        &["query", "-p", "bare", "-s", "select 1 as one", "--plain"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "{\"header\":[\"one\"],\"rows\":[[1]]}\n"
    );
}
