//! The `Athena` (Hive Parquet + Glue) and `File` destinations end to end: the real binary
//! against the moto server of `tests/run`, checked by independent readers
//! (`tests/readers/read_hive_s3.py`: DuckDB's `read_parquet(..., hive_partitioning = true)`
//! over S3 or a directory, boto3 for Glue).
//!
//! - the quickstart's config (S3 source, `Athena` sink, `Glue` schema sink) pointed at moto:
//!   `discover` creates the Glue table without writing a row; `sync` lands every row once;
//!   the Glue columns and partitions match the files; a second pass adds nothing;
//! - evolution: a new field adds a Glue column, and the old files stay readable;
//! - a kill -9 loop into `Athena` and into `File`: after recovery every row is there exactly
//!   once, and no file is left that a reader would count twice.
//!
//! Needs `SKIPPR_TEST_AWS_ENDPOINT` (and the `AWS_*` variables) from `bash tests/run`, and the
//! reader venv (`SKIPPR_TEST_PYTHON`); without them these tests fail and say so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

mod common;

#[path = "common/bin.rs"]
mod bin;
#[path = "common/local_aws.rs"]
mod local_aws;
use bin::{run_ok as run, skipprd_command};

use common::Rng;
use local_aws::{aws, new_bucket, reader_python, unique};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

fn reader(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_hive_s3.py");
    let out = Command::new(reader_python())
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn put(bucket: &str, key: &str, body: String) {
    let aws = aws();
    let client = aws.s3(None);
    aws.block_on(async {
        client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(body.into_bytes().into())
            .send()
            .await
    })
    .unwrap();
}

/// Bike hires `first..first+n`: `station` (the partition), `started_at` (unix seconds), and
/// a nested `bike` object; with `extra`, a new field `helmet`.
fn hires(first: u64, n: u64, extra: bool) -> String {
    (first..first + n)
        .map(|id| {
            let helmet = if extra { ",\"helmet\":true" } else { "" };
            format!(
                "{{\"hire_id\":{id},\"station\":\"st {}\",\"started_at\":{},\"durationMins\":{},\"bike\":{{\"id\":\"b{}\",\"kind\":\"e\"}}{helmet}}}\n",
                id % 4,
                1_700_000_000 + (id % 3) * 86_400,
                id % 90,
                id % 17
            )
        })
        .collect()
}

fn quickstart(source: &str, output: &str, database: &str) -> String {
    format!(
        "\
skippr: {{workspace: quickstart}}
pipelines:
  bikehire:
    data_source: data_sources.sample
    data_sink: data_sinks.athena
    schema_sink: schema_sinks.glue
    transform:
      batch_partition_fields: station
      batch_time_fields: started_at
      batch_time_unit: day
data_sources:
  sample: {{S3: {{s3_bucket: {source}, s3_prefix: bike-hire, batch_size: 50}}}}
data_sinks:
  athena:
    Athena:
      s3_bucket: {output}
      s3_prefix: data/bikehire
      athena_workgroup_name: primary
schema_sinks:
  glue: {{Glue: {{glue_database_name: {database}}}}}
"
    )
}

#[test]
fn the_quickstart_lands_every_row_once_and_glue_matches_the_files() {
    let aws = aws();
    let source = new_bucket(&aws, "qs-src");
    let output = new_bucket(&aws, "qs-out");
    let database = unique("qs_db");
    put(&source, "bike-hire/2024-01-01.jsonl", hires(0, 300, false));
    put(
        &source,
        "bike-hire/2024-01-02.jsonl",
        hires(300, 200, false),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        quickstart(&source, &output, &database),
    )
    .unwrap();
    let location = format!("s3://{output}/data/bikehire/bikehire");

    // discover (with the Glue schema sink) creates the table, and writes no row.
    run(dir.path(), &["discover"]);
    let after_discover = reader(&[
        "--location",
        &location,
        "--database",
        &database,
        "--table",
        "bikehire",
    ]);
    assert_eq!(after_discover["rows"], 0, "{after_discover}");
    let glue = &after_discover["glue"];
    assert_eq!(glue["table_type"], "EXTERNAL_TABLE");
    assert_eq!(
        glue["serde"],
        "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    );
    assert_eq!(glue["location"], format!("{location}/"));
    assert_eq!(
        glue["partition_keys"],
        serde_json::json!(["station", "started_at_day"])
    );
    let columns: Vec<(String, String, Value)> = glue["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c[0].as_str().unwrap().to_owned(),
                c[1].as_str().unwrap().to_owned(),
                c[2].clone(),
            )
        })
        .collect();
    let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
    assert!(
        names.contains(&"hire_id") && names.contains(&"bike"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"station"),
        "a partition key is not a column too: {names:?}"
    );
    let duration = columns.iter().find(|c| c.2 == "durationMins").unwrap();
    assert!(duration.0.starts_with("durationmins_"), "{duration:?}");
    let bike = columns.iter().find(|c| c.0 == "bike").unwrap();
    assert_eq!(bike.1, "struct<id:string,kind:string>");

    run(dir.path(), &["sync", "--once"]);
    let first = reader(&[
        "--location",
        &location,
        "--database",
        &database,
        "--table",
        "bikehire",
        "--key",
        "hire_id",
    ]);
    assert_eq!(first["rows"], 500, "{first}");
    assert_eq!(first["duplicate_keys"], 0);
    assert_eq!(first["null_keys"], 0);
    let described: Vec<&str> = first["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap())
        .collect();
    for (name, _, _) in &columns {
        assert!(
            described.contains(&name.as_str()),
            "{name} not in the files: {described:?}"
        );
    }
    // Every partition directory with files is a Glue partition at that location, and back.
    let files: Vec<String> = first["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    let mut dirs: Vec<String> = files
        .iter()
        .filter(|f| f.ends_with(".parquet"))
        .map(|f| format!("s3://{output}/{}/", &f[..f.rfind('/').unwrap()]))
        .collect();
    dirs.sort();
    dirs.dedup();
    let mut registered: Vec<String> = first["glue"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_str().unwrap().to_owned())
        .collect();
    registered.sort();
    assert_eq!(registered, dirs);
    assert_eq!(dirs.len(), 12, "4 stations x 3 days: {dirs:?}");
    let values = &first["glue"]["partitions"][0][0];
    assert!(values[0].as_str().unwrap().starts_with("st "), "{values}");
    assert!(
        dirs[0].contains("/station=st 0/started_at_day=2023-11-14/"),
        "{}",
        dirs[0]
    );

    // A second pass adds nothing.
    run(dir.path(), &["sync", "--once"]);
    let second = reader(&[
        "--location",
        &location,
        "--database",
        &database,
        "--table",
        "bikehire",
    ]);
    assert_eq!(second["rows"], 500);
    assert_eq!(second["files"], first["files"]);
    assert_eq!(second["glue"], first["glue"]);

    // Evolution: a new field becomes a Glue column; the old files stay readable.
    put(&source, "bike-hire/2024-01-03.jsonl", hires(500, 100, true));
    run(dir.path(), &["sync", "--once"]);
    let third = reader(&[
        "--location",
        &location,
        "--database",
        &database,
        "--table",
        "bikehire",
        "--key",
        "hire_id",
    ]);
    assert_eq!(third["rows"], 600, "{third}");
    assert_eq!(third["duplicate_keys"], 0);
    let glue_names: Vec<&str> = third["glue"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap())
        .collect();
    assert_eq!(glue_names.last(), Some(&"helmet"), "{glue_names:?}");
    assert_eq!(
        &glue_names[..names.len()],
        &names[..],
        "old columns keep their place"
    );
}

const KILL_CONFIG: &str = "\
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.out
    transform:
      namespace_fields: kind
      batch_partition_fields: region
data_sources:
  files:
    File:
      path: input
      batch_size: 120
data_sinks:
";

fn append(path: &Path, first: u64, count: u64, rng: &mut Rng) {
    use std::io::Write;
    let mut text = String::new();
    for id in first..first + count {
        let kind = if rng.below(3) == 0 { "refund" } else { "order" };
        text.push_str(&format!(
            "{{\"id\":{id},\"kind\":\"{kind}\",\"region\":\"r{}\",\"v\":{}}}\n",
            rng.below(5),
            rng.below(1000)
        ));
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Kill `sync` at random moments while data arrives, then finish; `read(table)` gives the
/// reader's answer for each table. Every id must be there exactly once. Returns the project
/// directory and the number of ids.
fn kill_loop(sink: &str, read: &dyn Fn(&str) -> Value) -> (tempfile::TempDir, u64) {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut rng = Rng(0x5eed_a7e4 | 1);
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    std::fs::write(
        project.join("skippr.yml"),
        format!("{KILL_CONFIG}  out: {sink}\n"),
    )
    .unwrap();
    std::fs::create_dir_all(project.join("input")).unwrap();
    let mut next = 0;
    for file in 0..4 {
        append(
            &project.join(format!("input/p{file}.jsonl")),
            next,
            1000,
            &mut rng,
        );
        next += 1000;
    }
    let (mut killed, mut round) = (0, 0);
    while killed < kills && round < kills * 4 {
        round += 1;
        append(
            &project.join(format!("input/p{}.jsonl", rng.below(4))),
            next,
            300,
            &mut rng,
        );
        next += 300;
        let mut child = skipprd_command(project)
            .args(["sync", "--once", "--output", "json"])
            .env("DELIVER_THRESHOLD_BYTES", "20000")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + rng.below(400)));
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                assert!(status.success(), "round {round}: {stderr}");
            }
            None => {
                child.kill().unwrap();
                child.wait().unwrap();
                killed += 1;
            }
        }
    }
    run(project, &["sync", "--once"]);
    let mut ids: Vec<i64> = Vec::new();
    for table in ["order", "refund"] {
        let out = read(table);
        assert_eq!(out["null_keys"], 0, "{table}");
        ids.extend(
            out["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().parse::<i64>().unwrap()),
        );
    }
    ids.sort();
    let total = ids.len();
    ids.dedup();
    println!(
        "{sink}: {killed} kills in {round} rounds, {next} rows expected, {total} read, {} distinct",
        ids.len()
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert_eq!(total, ids.len(), "duplicated rows");
    assert_eq!(ids, (0..next as i64).collect::<Vec<_>>(), "rows lost");
    (dir, next)
}

/// `skipprd query --plain -s SQL` in `project`: the rows.
fn query(project: &Path, sql: &str) -> Value {
    let out = run(project, &["query", "--plain", "-s", sql]);
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    value["rows"].clone()
}

#[test]
fn a_kill_loop_into_file_leaves_every_row_exactly_once() {
    let out = tempfile::tempdir().unwrap();
    let root = out.path().to_path_buf();
    let (project, rows) = kill_loop(
        &format!("{{File: {{output_dir: '{}'}}}}", root.display()),
        &|table| {
            let location = root.join(table);
            reader(&["--location", location.to_str().unwrap(), "--key", "id"])
        },
    );
    // `query` reads the landed files plus the WAL above them, each row once: with a crash
    // after a delivery's files (before its marker), after its marker (before the
    // acknowledgement: the WAL still holds the landed batches), and after the delivery.
    let count = "SELECT (SELECT count(*) FROM \"order\") + (SELECT count(*) FROM refund) AS n, (SELECT count(DISTINCT id) FROM \"order\") + (SELECT count(DISTINCT id) FROM refund) AS d";
    let mut total = rows;
    for failpoint in [
        "sink.after_data_files",
        "sync.after_deliver",
        "sink.after_table_commit",
    ] {
        append(
            &project.path().join("input/late.jsonl"),
            total,
            50,
            &mut Rng(total | 1),
        );
        total += 50;
        let crashed = skipprd_command(project.path())
            .args(["sync", "--once"])
            .env("SKIPPR_FAILPOINT", failpoint)
            .output()
            .unwrap();
        assert!(!crashed.status.success(), "{failpoint} did not fire");
        // No row twice; every row read into the WAL is there (a failpoint in the first
        // delivery of a pass fires before the new lines are read).
        let got = query(project.path(), count);
        assert_eq!(got[0][0], got[0][1], "after {failpoint}: {got}");
        let n = got[0][0].as_u64().unwrap();
        assert!(
            n + 50 >= total && n <= total,
            "after {failpoint}: {n} of {total}"
        );
    }
    run(project.path(), &["sync", "--once"]);
    assert_eq!(
        query(project.path(), count),
        serde_json::json!([[total, total]])
    );
    let refunds = reader(&["--location", root.join("refund").to_str().unwrap()])["rows"].clone();
    assert_eq!(
        query(project.path(), "SELECT count(*) FROM refund")[0][0],
        refunds
    );
}

/// Config mistakes of these destinations exit 2 and name the key.
#[test]
fn config_mistakes_exit_2_naming_the_key() {
    let cases = [
        (
            "pipelines:\n  p: {data_source: data_sources.s, data_sink: data_sinks.a, schema_sink: schema_sinks.nope}\ndata_sources:\n  s: {File: {path: x}}\ndata_sinks:\n  a: {Athena: {s3_bucket: b, s3_prefix: p, glue_database_name: db}}\n",
            "pipelines.p.schema_sink",
        ),
        (
            "pipelines:\n  p: {data_source: data_sources.s, data_sink: data_sinks.a, schema_sink: schema_sinks.g}\ndata_sources:\n  s: {File: {path: x}}\ndata_sinks:\n  a: {Athena: {s3_bucket: b, s3_prefix: p, glue_database_name: db}}\nschema_sinks:\n  g: {Glue: {glue_database_name: other}}\n",
            "data_sinks.a.Athena.glue_database_name",
        ),
        (
            "pipelines:\n  p: {data_source: data_sources.s, data_sink: data_sinks.a}\ndata_sources:\n  s: {File: {path: x}}\ndata_sinks:\n  a: {Athena: {s3_bucket: b, glue_database_name: db}}\n",
            "s3_prefix",
        ),
        (
            "pipelines:\n  p: {data_source: data_sources.s, data_sink: data_sinks.a}\ndata_sources:\n  s: {File: {path: x}}\ndata_sinks:\n  a: {Athena: {s3_bucket: b, s3_prefix: p}}\n",
            "data_sinks.a.Athena.glue_database_name",
        ),
    ];
    for (config, key) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
        let out = skipprd_command(dir.path())
            .args(["sync", "--once"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}: {stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
}

/// `Stdout` prints every row as a JSON line.
#[test]
fn stdout_prints_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n  p: {data_source: data_sources.s, data_sink: data_sinks.out}\ndata_sources:\n  s: {File: {path: in.jsonl}}\ndata_sinks:\n  out: {Stdout: {}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("in.jsonl"),
        "{\"a\":1}\n{\"a\":2,\"b\":\"x\"}\n",
    )
    .unwrap();
    let out = run(dir.path(), &["sync", "--once", "--output", "json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("a").is_some())
        .collect();
    assert_eq!(
        rows,
        [
            serde_json::json!({"a": 1}),
            serde_json::json!({"a": 2, "b": "x"})
        ],
        "{stdout}"
    );
}

#[test]
fn a_kill_loop_into_athena_leaves_every_row_exactly_once() {
    let aws = aws();
    let output = new_bucket(&aws, "kill-out");
    let database = unique("kill_db");
    kill_loop(
        &format!(
            "{{Athena: {{s3_bucket: {output}, s3_prefix: lake, glue_database_name: {database}}}}}"
        ),
        &|table| {
            let location = format!("s3://{output}/lake/{table}");
            let out = reader(&[
                "--location",
                &location,
                "--database",
                &database,
                "--table",
                table,
                "--key",
                "id",
            ]);
            let partitions = out["glue"]["partitions"].as_array().unwrap().len();
            assert_eq!(partitions, 5, "{table}: one Glue partition per region");
            out
        },
    );
}

/// Rejected records go to the Glue table `_dl_<pipeline>` when the deadletter sink is `Athena`.
#[test]
fn deadletters_land_in_the_dl_glue_table() {
    let aws = aws();
    let output = new_bucket(&aws, "dl-out");
    let database = unique("dl_db");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "\
pipelines:
  Rides-2:
    data_source: data_sources.s
    data_sink: data_sinks.a
    deadletter_sink: deadletter_sinks.dl
data_sources:
  s: {{File: {{path: in.jsonl}}}}
data_sinks:
  a: {{Athena: {{s3_bucket: {output}, s3_prefix: lake, glue_database_name: {database}}}}}
deadletter_sinks:
  dl: {{Athena: {{s3_bucket: {output}, s3_prefix: lake, glue_database_name: {database}}}}}
"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("in.jsonl"),
        "{\"id\":1}\nnot json\n{\"id\":2}\n{\"id\": \n{\"id\":3}\n",
    )
    .unwrap();
    run(dir.path(), &["sync", "--once"]);
    // The pipeline-named default table is table-safe too.
    let data = reader(&[
        "--location",
        &format!("s3://{output}/lake/rides_2"),
        "--database",
        &database,
        "--table",
        "rides_2",
        "--key",
        "id",
    ]);
    assert_eq!(data["rows"], 3, "{data}");
    let dl = reader(&[
        "--location",
        &format!("s3://{output}/lake/_dl_rides_2"),
        "--database",
        &database,
        "--table",
        "_dl_rides_2",
    ]);
    assert_eq!(dl["rows"], 2, "{dl}");
    assert_eq!(
        dl["glue"]["location"],
        format!("s3://{output}/lake/_dl_rides_2/")
    );
    let names: Vec<&str> = dl["glue"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"record") && names.contains(&"error"),
        "{names:?}"
    );
}

/// The `S3` destination writes the Hive layout into a bucket (`endpoint_url` names moto), in
/// JSON lines here, with the partition column kept in the rows; a second pass adds nothing.
#[test]
fn the_s3_destination_writes_hive_jsonl_objects() {
    let aws = aws();
    let output = new_bucket(&aws, "s3-out");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "\
pipelines:
  p:
    data_source: data_sources.s
    data_sink: data_sinks.out
    transform: {{batch_partition_fields: region}}
data_sources:
  s: {{File: {{path: in.jsonl}}}}
data_sinks:
  out: {{S3: {{s3_bucket: {output}, s3_prefix: /exports/, format: jsonl, endpoint_url: '{}'}}}}
",
            local_aws::endpoint()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("in.jsonl"),
        "{\"id\":1,\"region\":\"eu\"}\n{\"id\":2,\"region\":\"us\"}\n{\"id\":3,\"region\":\"eu\"}\n",
    )
    .unwrap();
    run(dir.path(), &["sync", "--once"]);
    let list = |prefix: &str| -> Vec<String> {
        let client = aws.s3(None);
        let out = aws
            .block_on(async {
                client
                    .list_objects_v2()
                    .bucket(&output)
                    .prefix(prefix)
                    .send()
                    .await
            })
            .unwrap();
        let mut keys: Vec<String> = out
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        keys.sort();
        keys
    };
    let keys = list("exports/");
    let stem = "default_default_p-b00000000000000000001-p000.jsonl";
    assert_eq!(
        keys,
        [
            "exports/_skippr/landed/default_default_p/p".to_owned(),
            format!("exports/p/region=eu/{stem}"),
            format!("exports/p/region=us/{stem}"),
        ]
    );
    let client = aws.s3(None);
    let body = aws
        .block_on(async {
            client
                .get_object()
                .bucket(&output)
                .key(format!("exports/p/region=eu/{stem}"))
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
        })
        .unwrap()
        .into_bytes();
    assert_eq!(
        String::from_utf8_lossy(&body),
        "{\"id\":1,\"region\":\"eu\"}\n{\"id\":3,\"region\":\"eu\"}\n"
    );
    run(dir.path(), &["sync", "--once"]);
    assert_eq!(list("exports/"), keys);
}

/// `query` reads an `S3` Parquet destination back: the landed objects (listed below each
/// table, footers read through the destination's endpoint) plus the WAL above them, each row
/// once, after a crash at each step of a delivery; partition values that need escaping
/// (`/`, `%`, a space) are found under their real keys.
#[test]
fn query_reads_an_s3_parquet_destination_each_row_once() {
    let aws = aws();
    let output = new_bucket(&aws, "s3-query");
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    std::fs::write(
        project.join("skippr.yml"),
        format!(
            "\
pipelines:
  p:
    data_source: data_sources.s
    data_sink: data_sinks.out
    transform: {{batch_partition_fields: region, namespace_fields: kind}}
data_sources:
  s: {{File: {{path: input, batch_size: 100}}}}
data_sinks:
  out: {{S3: {{s3_bucket: {output}, s3_prefix: lake/x, endpoint_url: '{}'}}}}
",
            local_aws::endpoint()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(project.join("input")).unwrap();
    let write = |file: &str, first: u64, n: u64| {
        let text: String = (first..first + n)
            .map(|id| {
                let kind = if id % 3 == 0 { "refund" } else { "order" };
                let region = ["eu/west", "50% off", "us"][(id % 3) as usize];
                format!(
                    "{{\"id\":{id},\"kind\":\"{kind}\",\"region\":\"{region}\",\"v\":{}}}\n",
                    id % 7
                )
            })
            .collect();
        std::fs::write(project.join("input").join(file), text).unwrap();
    };
    let count = "SELECT (SELECT count(*) FROM \"order\") + (SELECT count(*) FROM refund) AS n, (SELECT count(DISTINCT id) FROM \"order\") + (SELECT count(DISTINCT id) FROM refund) AS d";
    write("a.jsonl", 0, 1000);
    let sync = |failpoint: Option<&str>| {
        let mut command = skipprd_command(project);
        command
            .args(["sync", "--once"])
            .env("DELIVER_THRESHOLD_BYTES", "4000");
        if let Some(failpoint) = failpoint {
            command.env("SKIPPR_FAILPOINT", failpoint);
        }
        command.output().unwrap()
    };
    assert!(sync(None).status.success());
    assert_eq!(query(project, count), serde_json::json!([[1000, 1000]]));
    // The WAL alone would say the same, so check the landed side is what is read: the rows of
    // a partition that needs escaping, against DuckDB over the same objects.
    let refund = reader(&["--location", &format!("s3://{output}/lake/x/refund")]);
    assert_eq!(
        query(project, "SELECT count(*) FROM refund")[0][0],
        refund["rows"]
    );
    assert!(
        refund["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("%")),
        "{refund}"
    );
    assert_eq!(
        query(
            project,
            "SELECT count(*) FROM \"order\" WHERE region = '50% off'"
        )[0][0],
        333
    );
    let mut total = 1000;
    for (i, failpoint) in [
        "sink.after_data_files",
        "sync.after_deliver",
        "sink.after_table_commit",
    ]
    .into_iter()
    .enumerate()
    {
        write(&format!("late{i}.jsonl"), total, 300);
        total += 300;
        assert!(
            !sync(Some(failpoint)).status.success(),
            "{failpoint} did not fire"
        );
        let got = query(project, count);
        assert_eq!(got[0][0], got[0][1], "after {failpoint}: {got}");
        let n = got[0][0].as_u64().unwrap();
        assert!(
            n + 300 >= total && n <= total,
            "after {failpoint}: {n} of {total}"
        );
    }
    assert!(sync(None).status.success());
    assert_eq!(query(project, count), serde_json::json!([[total, total]]));
    // Every row is in the objects now; the WAL's copy of the landed batches is not read twice.
    let order = reader(&[
        "--location",
        &format!("s3://{output}/lake/x/order"),
        "--key",
        "id",
    ]);
    let refund = reader(&[
        "--location",
        &format!("s3://{output}/lake/x/refund"),
        "--key",
        "id",
    ]);
    assert_eq!(order["duplicate_keys"], 0);
    assert_eq!(
        order["rows"].as_u64().unwrap() + refund["rows"].as_u64().unwrap(),
        total
    );
}

/// A WAL that restarts its numbering (the data directory lost) is noticed through the landed
/// markers, as for the Iceberg sinks: `sync` refuses, and `reset` sets the id floor above them.
#[test]
fn a_lost_wal_is_noticed_through_the_landed_markers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!(
            "pipelines:\n  p: {{data_source: data_sources.s, data_sink: data_sinks.out}}\ndata_sources:\n  s: {{File: {{path: in.jsonl}}}}\ndata_sinks:\n  out: {{File: {{output_dir: '{}'}}}}\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("in.jsonl"), "{\"a\":1}\n{\"a\":2}\n").unwrap();
    run(dir.path(), &["sync", "--once"]);
    std::fs::remove_dir_all(dir.path().join("data")).unwrap();
    let refused = skipprd_command(dir.path())
        .args(["sync", "--once"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("reset"), "{stderr}");
    run(dir.path(), &["reset", "-p", "p", "--yes"]);
    run(dir.path(), &["sync", "--once"]);
    let files = reader(&["--location", out.join("p").to_str().unwrap()]);
    let names: Vec<&str> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    // The restarted pipeline's batch ids are above the old ones: no file was overwritten.
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(files["rows"], 4);
}

/// A paired `Duckdb` schema sink makes `discover` create the data sink's Iceberg tables, with
/// no row (DuckDB's `iceberg_scan` reads them empty, with the discovered columns).
#[test]
fn discover_with_a_paired_duckdb_schema_sink_creates_the_empty_tables() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n  p: {data_source: data_sources.s, data_sink: data_sinks.lake}\ndata_sources:\n  s: {File: {path: in.jsonl}}\ndata_sinks:\n  lake:\n    Duckdb: {warehouse: 'file://./lake'}\n    schema_sink: schema_sinks.tables\nschema_sinks:\n  tables: {Duckdb: {warehouse: 'file://./lake'}}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("in.jsonl"), "{\"a\":1,\"b\":\"x\"}\n").unwrap();
    run(dir.path(), &["discover"]);
    let table = dir.path().join("lake/default/p");
    assert!(
        table.join("metadata/version-hint.text").exists(),
        "no table at {}",
        table.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_table.py");
    let out = Command::new(reader_python())
        .arg(script)
        .arg(&table)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"rows\": 0") && text.contains("\"b\""),
        "{text}"
    );
}
