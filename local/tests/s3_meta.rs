//! The pipeline's metadata in S3, through the `skipprd` binary against the moto server that
//! `tests/run` starts (`SKIPPR_TEST_AWS_ENDPOINT`): the schema in the skippr bucket
//! (`skipprd_el_storage_mode: s3`) and the `S3` deadletter sink.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
use bin::skipprd_command;

use std::path::Path;

use serde_json::Value;
use skipprd::aws::{Aws, Bucket};
use skipprd::schema::PipelineSchema;

/// The moto server of `tests/run`, or a failure naming the fix.
fn aws() -> Aws {
    let endpoint = std::env::var("SKIPPR_TEST_AWS_ENDPOINT").unwrap_or_default();
    assert!(
        !endpoint.is_empty(),
        "SKIPPR_TEST_AWS_ENDPOINT is not set: these tests need the moto server; run them with `bash tests/run` (or start `moto_server -H 127.0.0.1 -p PORT` and export SKIPPR_TEST_AWS_ENDPOINT and AWS_ENDPOINT_URL=http://127.0.0.1:PORT, AWS_REGION=us-east-1, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
    );
    Aws::load(Some("us-east-1")).unwrap()
}

/// A fresh bucket with a unique name.
fn new_bucket(aws: &Aws, stem: &str) -> Bucket {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("{stem}-{}-{}", std::process::id(), nanos % 1_000_000_000);
    let client = aws.s3(None);
    aws.block_on(async { client.create_bucket().bucket(&name).send().await })
        .unwrap();
    Bucket::new(aws, &name, None)
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON events on stdout (`--output json`).
    fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn event(&self, name: &str) -> Value {
        self.events()
            .into_iter()
            .find(|e| e["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event: {} {}", self.stdout, self.stderr))
    }
}

fn skipprd(dir: &Path, args: &[&str]) -> Run {
    skipprd_with(dir, args, &[])
}

/// [`skipprd`] with `env` set on top of the scrubbed environment.
fn skipprd_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = skipprd_command(dir);
    cmd.args(args);
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run skipprd");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn project(config: &str, input: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    std::fs::write(dir.path().join("input/a.jsonl"), input).unwrap();
    dir
}

/// Pipeline `events` of workspace `acme`, tenant `t1`, schemas in `bucket` (or local).
fn schema_config(mode: &str, bucket: &str) -> String {
    format!(
        "\
skippr:
  tenant: t1
  workspace: acme
  skipprd_el_storage_mode: {mode}
  skippr_s3_bucket: {bucket}
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
    )
}

const RECORDS: &str = "\
{\"kind\":\"order\",\"id\":1,\"price\":10.5,\"customer\":{\"name\":\"Ann\"}}
{\"kind\":\"order\",\"id\":2,\"price\":\"call us\"}
{\"kind\":\"Refund Issued\",\"order_id\":1,\"ok\":true}
";

#[test]
fn discover_saves_the_schema_in_the_skippr_bucket_and_schema_and_sync_read_it_from_there() {
    let aws = aws();
    let bucket = new_bucket(&aws, "meta");
    let dir = project(&schema_config("s3", bucket.name()), RECORDS);
    let key = "schemas/t1/acme/events/schema.json";
    let uri = format!("s3://{}/{key}", bucket.name());

    // Before discover: `schema` says to run it, naming the object.
    let run = skipprd(dir.path(), &["schema"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "no saved schema at `{uri}`: run `skipprd discover` first"
        )),
        "{}",
        run.stderr
    );

    let run = skipprd(dir.path(), &["discover", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.event("discover_complete")["schema_path"], uri.as_str());
    assert_eq!(bucket.list("").unwrap(), [key]);
    assert!(
        !dir.path().join("data/acme_events/schema.json").exists(),
        "nothing is saved locally in s3 mode"
    );
    let object = String::from_utf8(bucket.get(key).unwrap().unwrap()).unwrap();
    let saved = PipelineSchema::from_json(&object, Path::new(&uri)).unwrap();
    assert_eq!(saved.workspace, "acme");
    assert_eq!(saved.pipeline, "events");
    assert_eq!(
        saved.namespaces.keys().collect::<Vec<_>>(),
        ["order", "refund_issued"]
    );
    assert_eq!(saved.namespaces["order"].records, 2);

    // The object is byte for byte what local mode writes to its file.
    let local = project(&schema_config("local", bucket.name()), RECORDS);
    let run = skipprd(local.path(), &["discover"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let file = std::fs::read_to_string(local.path().join("data/acme_events/schema.json")).unwrap();
    assert_eq!(object, file);
    assert_eq!(
        bucket.list("").unwrap(),
        [key],
        "local mode wrote no object"
    );

    // `schema` reads it back.
    let run = skipprd(dir.path(), &["schema", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim_end(), object.trim_end());
    let run = skipprd(dir.path(), &["schema", "--output", "text"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("pipeline events (workspace acme), 2 namespaces"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("  price_string: string"),
        "{}",
        run.stdout
    );

    // `sync` starts from the schema in the bucket: the same records change nothing in it.
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        !run.events().iter().any(|e| e["event"] == "schema_evolved"),
        "the discovered schema was not used: {}",
        run.stdout
    );
    let done = run.event("sync_complete");
    assert_eq!(done["rows"], 3);
    assert!(done["aws_requests"]["s3"].as_u64().unwrap() >= 1, "{done}");
    assert_eq!(
        String::from_utf8(bucket.get(key).unwrap().unwrap()).unwrap(),
        object
    );
    assert!(!dir.path().join("data/acme_events/schema.json").exists());

    // A new field evolves the schema, and sync saves it to the bucket.
    std::fs::write(
        dir.path().join("input/b.jsonl"),
        "{\"kind\":\"order\",\"id\":3,\"price\":4.0,\"coupon\":\"X1\"}\n",
    )
    .unwrap();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let evolved = run.event("schema_evolved");
    assert!(
        evolved["changes"].to_string().contains("coupon"),
        "{evolved}"
    );
    let text = String::from_utf8(bucket.get(key).unwrap().unwrap()).unwrap();
    let saved = PipelineSchema::from_json(&text, Path::new(&uri)).unwrap();
    let order: Vec<&str> = saved.namespaces["order"]
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert!(order.contains(&"coupon"), "{order:?}");
    assert_eq!(text, saved.to_json_pretty());
    assert_eq!(bucket.list("").unwrap(), [key]);
}

/// Pipeline `p`: lines from `input/`, two per batch; rejected records to an `S3` sink.
fn deadletter_config(bucket: &str) -> String {
    format!(
        "\
pipelines:
  p:
    data_source: data_sources.f
    deadletter_sink: deadletter_sinks.rejects
data_sources:
  f:
    File:
      path: input/*.jsonl
      batch_size: 2
deadletter_sinks:
  rejects:
    S3:
      s3_bucket: {bucket}
      s3_prefix: dead/letters/
"
    )
}

/// One rejected record as the sink writes it, without its `processed_time`.
fn rejected(source: &str, line: u64, offset: u64, record: &str, error: &str) -> Value {
    let id = skipprd::deadletter::Deadletter {
        source_uri: source.to_owned(),
        line,
        offset,
        raw: String::new(),
        error: String::new(),
        code: skipprd::deadletter::FailureCode::Malformed,
        namespace: None,
    }
    .id();
    serde_json::json!({
        "id": id,
        "record": record,
        "error": error,
        "failure_code": "malformed",
        "source_uri": source,
        "offset_key": line.to_string(),
        "offset_position": offset,
    })
}

/// The object's lines, `processed_time` checked and taken out.
fn lines_of(bucket: &Bucket, key: &str) -> Vec<Value> {
    let text = String::from_utf8(bucket.get(key).unwrap().unwrap()).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let at = v.as_object_mut().unwrap().remove("processed_time").unwrap();
            assert!(
                chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap()).is_ok(),
                "{at}"
            );
            v
        })
        .collect()
}

#[test]
fn rejected_records_land_in_the_s3_deadletter_sink_one_object_per_batch_once() {
    let aws = aws();
    let bucket = new_bucket(&aws, "dead");
    // Batches of two lines: [ok, bad], [ok, ok], [bad, bad].
    let input = "{\"id\":1}\nnot json\n{\"id\":2}\n{\"id\":3}\n{\"id\": \n[1,\n";
    let dir = project(&deadletter_config(bucket.name()), input);
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done = run.event("sync_complete");
    assert_eq!(done["deadletters"], 3, "{done}");
    assert_eq!(done["rows"], 3, "{done}");

    let first = "dead/letters/p/b00000000000000000001.jsonl";
    let third = "dead/letters/p/b00000000000000000003.jsonl";
    assert_eq!(bucket.list("").unwrap(), [first, third]);
    // The source names the file as its glob found it.
    let source = "input/a.jsonl";
    let first_lines = lines_of(&bucket, first);
    assert_eq!(
        first_lines,
        [rejected(
            source,
            2,
            9,
            "not json",
            "expected ident at line 1 column 2"
        )]
    );
    assert_eq!(
        lines_of(&bucket, third),
        [
            rejected(
                source,
                5,
                36,
                "{\"id\": ",
                "EOF while parsing a value at line 1 column 7"
            ),
            rejected(
                source,
                6,
                44,
                "[1,",
                "EOF while parsing a value at line 1 column 3"
            ),
        ]
    );
    let before = bucket.get(third).unwrap().unwrap();

    // A second pass with nothing new writes nothing again.
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.event("sync_complete")["deadletters"], 0);
    assert_eq!(bucket.list("").unwrap(), [first, third]);
    assert_eq!(bucket.get(third).unwrap().unwrap(), before);
}

/// Pipeline `p`: files of `input/` into a local lake; rejected records to an `S3` sink.
fn lake_with_s3_rejects(bucket: &str) -> String {
    format!(
        "\
pipelines:
  p:
    data_source: data_sources.f
    data_sink: data_sinks.lake
    deadletter_sink: deadletter_sinks.rejects
data_sources:
  f:
    File:
      path: input/*.jsonl
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
deadletter_sinks:
  rejects:
    S3:
      s3_bucket: {bucket}
      s3_prefix: dead/letters
"
    )
}

const DEADLETTER_KEY: &str = "dead/letters/p/b00000000000000000001.jsonl";
const REPLAYED_KEY: &str = "dead/letters/p/replayed/b00000000000000000001.jsonl";

/// The lake's row count and sum of `id`, as `skipprd query --plain` prints them.
fn lake_count(dir: &Path) -> String {
    let q = skipprd(
        dir,
        &[
            "query",
            "--plain",
            "-s",
            "select count(*) as n, sum(id) as s from p",
        ],
    );
    assert_eq!(q.code, 0, "{}", q.stderr);
    q.stdout.trim().to_owned()
}

/// `deadletters replay -p p`, succeeding; its `sync_complete` event.
fn replay(dir: &Path) -> Value {
    let run = skipprd(
        dir,
        &["deadletters", "replay", "-p", "p", "--output", "json"],
    );
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    run.event("sync_complete")
}

/// A project whose first sync rejected `{"id": 3, oops}` into the S3 sink, the user having
/// fixed it since in its object (GET, edit, PUT); the object's fixed bytes.
fn synced_with_a_fixed_s3_deadletter(bucket: &Bucket) -> (tempfile::TempDir, Vec<u8>) {
    let dir = project(
        &lake_with_s3_rejects(bucket.name()),
        "{\"id\":1}\n{\"id\": 3, oops}\n{\"id\":2}\n",
    );
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        lake_count(dir.path()),
        r#"{"header":["n","s"],"rows":[[2,3]]}"#
    );
    assert_eq!(bucket.list("").unwrap(), [DEADLETTER_KEY]);
    let text = String::from_utf8(bucket.get(DEADLETTER_KEY).unwrap().unwrap()).unwrap();
    let mut line: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(line["record"], "{\"id\": 3, oops}");
    line["record"] = Value::String("{\"id\": 3}".into());
    let fixed = format!("{line}\n").into_bytes();
    bucket
        .put(DEADLETTER_KEY, fixed.clone(), "application/x-ndjson")
        .unwrap();
    (dir, fixed)
}

#[test]
fn fixed_s3_deadletters_replay_into_the_lake_exactly_once() {
    let bucket = new_bucket(&aws(), "replay");
    let (dir, fixed) = synced_with_a_fixed_s3_deadletter(&bucket);
    let done = replay(dir.path());
    assert_eq!(
        (done["rows"].clone(), done["deadletters"].clone()),
        (1.into(), 0.into()),
        "{done}"
    );
    assert_eq!(
        lake_count(dir.path()),
        r#"{"header":["n","s"],"rows":[[3,6]]}"#
    );
    assert_eq!(
        bucket.list("").unwrap(),
        [REPLAYED_KEY],
        "a replayed object moves aside"
    );
    assert_eq!(bucket.get(REPLAYED_KEY).unwrap().unwrap(), fixed);

    // Nothing left to replay.
    let done = replay(dir.path());
    assert_eq!(done["rows"], 0, "{done}");
    assert_eq!(bucket.list("").unwrap(), [REPLAYED_KEY]);

    // The object back at its key, as a crash between the PUT under `replayed/` and the
    // DELETE leaves it: replay and sync add nothing.
    bucket
        .put(DEADLETTER_KEY, fixed, "application/x-ndjson")
        .unwrap();
    let done = replay(dir.path());
    assert_eq!(done["rows"], 0, "{done}");
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        lake_count(dir.path()),
        r#"{"header":["n","s"],"rows":[[3,6]]}"#
    );
    assert_eq!(bucket.list("").unwrap(), [DEADLETTER_KEY, REPLAYED_KEY]);
}

/// A replay killed right after its batch's WAL commit (before the position, the delivery and
/// the move aside): the object stays, the next replay does not read it again (the WAL batch
/// names it), and the next pass delivers the row once.
#[cfg(feature = "failpoints")]
#[test]
fn an_s3_replay_killed_after_its_wal_commit_lands_the_row_once() {
    let bucket = new_bucket(&aws(), "replay-crash");
    let (dir, _) = synced_with_a_fixed_s3_deadletter(&bucket);
    let crashed = skipprd_with(
        dir.path(),
        &["deadletters", "replay", "-p", "p"],
        &[("SKIPPR_FAILPOINT", "sync.after_wal_commit")],
    );
    assert_ne!(
        crashed.code, 0,
        "the failpoint did not fire: {}",
        crashed.stderr
    );
    assert_eq!(bucket.list("").unwrap(), [DEADLETTER_KEY]);
    let done = replay(dir.path());
    assert_eq!(done["rows"], 0, "replayed twice: {done}");
    let run = skipprd(dir.path(), &["sync", "--once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        lake_count(dir.path()),
        r#"{"header":["n","s"],"rows":[[3,6]]}"#
    );
    let done = replay(dir.path());
    assert_eq!(done["rows"], 0, "{done}");
    assert_eq!(
        lake_count(dir.path()),
        r#"{"header":["n","s"],"rows":[[3,6]]}"#
    );
}
