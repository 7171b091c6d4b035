//! The real product's environment variables and global flags, run as a user switching from
//! it would (issue 19). Each documented example config's loading is in the fixture suite.
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
#[path = "common/loopback.rs"]
mod loopback;
#[path = "common/pg.rs"]
mod pg;
#[path = "common/run.rs"]
mod run;
use run::Run;

use std::path::Path;

use serde_json::Value;

/// `skipprd args --no-log-file` in `dir`.
fn skipprd(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut args = args.to_vec();
    args.push("--no-log-file");
    run::skipprd(dir, &args, env)
}

const CONFIG: &str = "\
pipelines:
  events:
    data_source: data_sources.files
data_sources:
  files:
    File:
      path: input/*.jsonl
";

fn project(lines: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), CONFIG).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    std::fs::write(dir.path().join("input/a.jsonl"), lines).unwrap();
    dir
}

fn last_event(run: &Run) -> Value {
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn rows(dir: &Path) -> Value {
    let run = skipprd(
        dir,
        &[
            "query",
            "--plain",
            "--sql",
            "select count(*) as n from events.events",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    out["rows"][0][0].clone()
}

/// `SCHEMA_AUTO_APPROVE=false`: a pass that meets a schema change stops before committing
/// the batch (exit 1, the change named, nothing lost); `discover` approves it and the next
/// pass lands everything once.
#[test]
fn without_schema_auto_approve_a_change_waits_for_discover_and_nothing_is_lost() {
    let dir = project("{\"id\":1}\n{\"id\":2}\n");
    let off = [("SCHEMA_AUTO_APPROVE", "false")];
    let run = skipprd(dir.path(), &["sync", "--once"], &off);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("SCHEMA_AUTO_APPROVE is false")
            && run.stderr.contains("new namespace events"),
        "{}",
        run.stderr
    );
    assert_eq!(skipprd(dir.path(), &["discover"], &[]).code, 0);
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &off);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(last_event(&run)["total_rows"], 2);

    // A new field: refused again, the rows already landed stay, the new line waits.
    std::fs::write(
        dir.path().join("input/b.jsonl"),
        "{\"id\":3,\"note\":\"x\"}\n",
    )
    .unwrap();
    let run = skipprd(dir.path(), &["sync", "--once"], &off);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("note"), "{}", run.stderr);
    assert_eq!(rows(dir.path()), 2);
    assert_eq!(skipprd(dir.path(), &["discover"], &[]).code, 0);
    let run = skipprd(dir.path(), &["sync", "--once"], &off);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(rows(dir.path()), 3);
}

/// `RESET_OFFSETS=true` starts the pipeline over once, before the pass: the WAL holds each
/// row once (not twice), read again from the start.
#[test]
fn reset_offsets_starts_the_pipeline_over_before_the_pass() {
    let dir = project("{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n");
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    assert_eq!(rows(dir.path()), 3);
    let run = skipprd(
        dir.path(),
        &["sync", "--once", "--output", "json"],
        &[("RESET_OFFSETS", "true")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "reset", "{}", run.stdout);
    assert_eq!(events[0]["applied"], true);
    assert_eq!(
        last_event(&run)["total_rows"],
        3,
        "read again from the start"
    );
    assert_eq!(rows(dir.path()), 3, "each row once");
}

/// `RESET_METADATA=true` reads each pipeline's schema from its source again before the
/// pass: a new field that, without auto-approval, would stop the pass is saved first.
#[test]
fn reset_metadata_discovers_again_before_the_pass() {
    let dir = project("{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n");
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    std::fs::write(
        dir.path().join("input/b.jsonl"),
        "{\"id\":4,\"fresh\":\"x\"}\n",
    )
    .unwrap();
    let held = skipprd(
        dir.path(),
        &["sync", "--once"],
        &[("SCHEMA_AUTO_APPROVE", "false")],
    );
    assert_eq!(held.code, 1, "{}", held.stderr);
    let run = skipprd(
        dir.path(),
        &["sync", "--once", "--output", "json"],
        &[("SCHEMA_AUTO_APPROVE", "false"), ("RESET_METADATA", "true")],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let events: Vec<String> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].to_string())
        .collect();
    let discovered = events.iter().position(|e| e == "\"discover_complete\"");
    let synced = events.iter().position(|e| e == "\"sync_complete\"");
    assert!(
        matches!((discovered, synced), (Some(d), Some(s)) if d < s),
        "{events:?}"
    );
    assert_eq!(rows(dir.path()), 4);
}

/// The global flags override their key and variable, and are in `--help`.
#[test]
fn global_flags_override_keys_and_variables_and_are_documented() {
    let help = skipprd(Path::new("."), &["--help"], &[]);
    for flag in [
        "--wal-s3-bucket",
        "--store-type",
        "--store-name",
        "--workspace",
        "--tenant",
        "--storage-mode",
        "--skippr-s3-bucket",
        "--wal-storage",
    ] {
        assert!(help.stdout.contains(flag), "{flag} missing in --help");
    }
    let dir = project("{\"id\":1}\n");
    std::fs::write(
        dir.path().join("skippr.yml"),
        format!("skippr:\n  workspace: from_key\n{CONFIG}"),
    )
    .unwrap();
    let run = skipprd(
        dir.path(),
        &["sync", "--once", "--workspace", "from_flag"],
        &[("WORKSPACE_NAME", "from_var")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(dir.path().join("data/from_flag_events").is_dir());
    assert!(!dir.path().join("data/from_key_events").exists());
    let run = skipprd(
        dir.path(),
        &["sync", "--once"],
        &[("WORKSPACE_NAME", "from_var")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        dir.path().join("data/from_key_events").is_dir(),
        "the key wins over the variable"
    );

    let bad = skipprd(
        dir.path(),
        &["sync", "--once", "--store-type", "redis"],
        &[],
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--store-type"), "{}", bad.stderr);
    let bad = skipprd(dir.path(), &["sync", "--once", "--storage-mode", "s3"], &[]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("no skippr bucket"), "{}", bad.stderr);
}

/// `record_field_path` takes the records out of each record read, and `inject_fields` sets
/// fields in every one, in `discover` and `sync` alike; a record without the path is a counted
/// deadletter, nothing is dropped silently.
#[test]
fn record_field_path_and_inject_fields_shape_every_record_once() {
    let dir = project(
        "{\"data\":{\"items\":[{\"id\":1},{\"id\":2,\"env\":\"dev\"}]}}\n{\"data\":{\"items\":{\"id\":3}}}\n{\"nope\":1}\n",
    );
    std::fs::write(
        dir.path().join("skippr.yml"),
        CONFIG.replace(
            "    data_source: data_sources.files\n",
            "    data_source: data_sources.files\n    transform:\n      record_field_path: data.items\n      inject_fields: {env: prod, batch: 7}\n",
        ),
    )
    .unwrap();
    let discover = skipprd(dir.path(), &["discover", "--output", "json"], &[]);
    assert_eq!(discover.code, 0, "{}", discover.stderr);
    let done = last_event(&discover);
    assert_eq!(
        (done["records"].clone(), done["deadletters"].clone()),
        (3.into(), 1.into())
    );
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done = last_event(&run);
    assert_eq!(done["total_rows"], 3, "{done}");
    assert_eq!(done["deadletters"], 1, "{done}");
    let run = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "--sql",
            "select id, env, batch from events.events order by id",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        out["rows"],
        serde_json::json!([[1, "prod", 7], [2, "prod", 7], [3, "prod", 7]])
    );

    std::fs::write(
        dir.path().join("skippr.yml"),
        CONFIG.replace(
            "    data_source: data_sources.files\n",
            "    data_source: data_sources.files\n    transform:\n      record_field_path: data..items\n",
        ),
    )
    .unwrap();
    let bad = skipprd(dir.path(), &["discover"], &[]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr
            .contains("pipelines.events.transform.record_field_path"),
        "{}",
        bad.stderr
    );
}

/// `tests/fixtures/compat/local-file-transforms.yml` run as a user would: records a strict
/// parser refuses (single quotes, broken UTF-8, a lone surrogate) land instead of being
/// deadlettered; partition values outside `partition_allowed_values` share `_other` and keep
/// their values; the time partition is named by `time_partition_prefix`. DuckDB reads it back.
#[test]
fn the_documented_transforms_fixture_runs_and_lands_every_record() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/compat/local-file-transforms.yml");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&fixture, dir.path().join("skippr.yml")).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    let mut lines: Vec<u8> = Vec::new();
    lines.extend_from_slice(
        b"{\"id\":1,\"event_type\":\"click\",\"country\":\"nz\",\"created_at\":1700000000}\n",
    );
    lines.extend_from_slice(
        b"{'id': 2, 'event_type': 'click', 'country': 'au', 'created_at': 1700000000, 'note': 'it\\'s'}\n",
    );
    lines.extend_from_slice(
        b"{\"id\":3,\"event_type\":\"click\",\"country\":\"../../etc\",\"created_at\":1700000000,\"note\":\"caf\xe9\"}\n",
    );
    lines.extend_from_slice(
        b"{\"id\":4,\"event_type\":\"click\",\"country\":\"mars\",\"created_at\":1700086400,\"note\":\"\\ud800\"}\n",
    );
    std::fs::write(dir.path().join("input/a.json"), &lines).unwrap();

    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let done = last_event(&run);
    assert_eq!(done["total_rows"], 4, "{done}");
    assert_eq!(done["deadletters"], 0, "{done}");

    let mut dirs: Vec<String> = Vec::new();
    let table = dir.path().join("out/click");
    for country in std::fs::read_dir(&table).unwrap() {
        let country = country.unwrap().path();
        for day in std::fs::read_dir(&country).unwrap() {
            let day = day.unwrap().path();
            dirs.push(day.strip_prefix(&table).unwrap().display().to_string());
        }
    }
    dirs.sort();
    assert_eq!(
        dirs,
        [
            "country=_other/dt=2023-11-14",
            "country=_other/dt=2023-11-15",
            "country=au/dt=2023-11-14",
            "country=nz/dt=2023-11-14",
        ]
    );
    let sql = format!(
        "select id, country, note from read_parquet('{}/**/*.parquet', hive_partitioning = false) order by id",
        table.display()
    );
    let out = std::process::Command::new(local_aws::reader_python())
        .args([
            "-c",
            "import duckdb, json, sys; print(json.dumps(duckdb.sql(sys.argv[1]).fetchall()))",
            &sql,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rows,
        serde_json::json!([
            [1, "nz", null],
            [2, "au", "it's"],
            [3, "../../etc", "caf\u{fffd}"],
            [4, "mars", "\u{fffd}"],
        ])
    );
}

/// A documented example config (`tests/fixtures/compat/{name}`) with its placeholders (hosts,
/// buckets, endpoints) replaced by this machine's test servers, as `skippr.yml` in a fresh
/// directory.
fn fixture_project(name: &str, replace: &[(&str, &str)]) -> tempfile::TempDir {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/compat")
        .join(name);
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{name} has no `{from}`");
        text = text.replace(from, to);
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), text).unwrap();
    dir
}

/// `sync --once --output json` of `dir`: the `sync_complete` event.
fn sync_once(dir: &Path, env: &[(&str, &str)]) -> Value {
    let run = skipprd(dir, &["sync", "--once", "--output", "json"], env);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let done = last_event(&run);
    assert_eq!(done["event"], "sync_complete", "{}", run.stdout);
    done
}

/// `input-s3-listing.yml` against moto: the two-level ordered listing reads every object
/// under the prefix once, in key order, and nothing beside it.
#[test]
fn the_documented_s3_listing_fixture_runs_against_the_local_s3() {
    let aws = local_aws::aws();
    let bucket = local_aws::new_bucket(&aws, "compat-s3");
    let objects = skipprd::aws::Bucket::new(&aws, &bucket, None);
    let mut expected = 0;
    for (key, n) in [
        ("events/2024/01/a.json", 3),
        ("events/2024/01/b.json", 2),
        ("events/2024/02/c.json", 4),
        ("events/top.json", 1),
    ] {
        let body: String = (0..n)
            .map(|i| format!("{{\"key\":\"{key}\",\"i\":{i}}}\n"))
            .collect();
        objects
            .put(key, body.into_bytes(), "application/json")
            .unwrap();
        expected += n;
    }
    objects
        .put("other/x.json", b"{\"no\":1}\n".to_vec(), "application/json")
        .unwrap();
    let endpoint = local_aws::endpoint();
    let dir = fixture_project(
        "input-s3-listing.yml",
        &[
            ("my-source-bucket", &bucket),
            ("http://127.0.0.1:9000", &endpoint),
        ],
    );
    let done = sync_once(dir.path(), &[]);
    assert_eq!(done["total_rows"], expected, "{done}");
    assert_eq!(done["deadletters"], 0, "{done}");
    // A second pass finds nothing new.
    assert_eq!(sync_once(dir.path(), &[])["total_rows"], 0);
}

/// `input-postgres.yml` against the test PostgreSQL server: both tables read, `cdc:
/// snapshot` being the source's own incremental read, the password from the environment.
#[test]
fn the_documented_postgres_fixture_runs_against_the_local_server() {
    let pg = pg::pg();
    let db = pg.database("compat");
    pg.sql(
        &db,
        "CREATE TABLE users (id int PRIMARY KEY, name text); \
         CREATE TABLE orders (id int PRIMARY KEY, user_id int, total numeric); \
         INSERT INTO users SELECT g, 'u' || g FROM generate_series(1, 7) g; \
         INSERT INTO orders SELECT g, g % 7 + 1, g * 1.5 FROM generate_series(1, 11) g;",
    );
    let dir = fixture_project(
        "input-postgres.yml",
        &[
            ("host: localhost", &format!("host: {}", pg.host)),
            ("port: 5432", &format!("port: {}", pg.port)),
            ("user: postgres", &format!("user: {}", pg.user)),
            ("database: mydb", &format!("database: {db}")),
        ],
    );
    let done = sync_once(dir.path(), &[("POSTGRES_SOURCE_PASSWORD", &pg.password)]);
    assert_eq!(done["total_rows"], 18, "{done}");
    assert_eq!(done["namespaces_synced"], 2, "{done}");
}

/// `input-http-client.yml` against the local API server, which answers 401 unless the
/// bearer token from `${HTTP_CLIENT_AUTH_TOKEN}` comes with the request.
#[test]
fn the_documented_http_client_fixture_runs_against_a_local_api() {
    let server = loopback::ScriptServer::start(
        "tests/http/api_server.py",
        &[],
        &["--pages", "1", "--per-page", "5", "--token", "t0ken"],
    );
    let url = format!("http://127.0.0.1:{}/items", server.port);
    let dir = fixture_project(
        "input-http-client.yml",
        &[("https://api.example.com/data", &url)],
    );
    let done = sync_once(dir.path(), &[("HTTP_CLIENT_AUTH_TOKEN", "t0ken")]);
    // No records_path: the response body is the record, as the real product reads it.
    assert_eq!(done["total_rows"], 1, "{done}");
    let refused = skipprd(
        dir.path(),
        &["sync", "--once"],
        &[("HTTP_CLIENT_AUTH_TOKEN", "wrong")],
    );
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("401"), "{}", refused.stderr);
}

/// Every WAL segment file under `dir`, read whole.
fn wal_bytes(dir: &Path) -> Vec<u8> {
    files::files_with_extension(dir, "seg")
        .iter()
        .flat_map(|path| std::fs::read(path).unwrap())
        .collect()
}

/// `WAL_COMPRESSION` (ours): a pipeline without a destination keeps its WAL lz4-compressed
/// unless told `none`; either way every row is queryable.
#[test]
fn wal_compression_is_lz4_where_the_wal_keeps_the_data_unless_set_to_none() {
    let text = "a value repeated on every line of the file";
    let lines: String = (0..2000)
        .map(|i| format!("{{\"id\":{i},\"note\":\"{text}\"}}\n"))
        .collect();
    let needle = format!("{text}{text}");
    for (env, raw) in [(&[][..], false), (&[("WAL_COMPRESSION", "none")][..], true)] {
        let dir = project(&lines);
        let run = skipprd(dir.path(), &["sync", "--once"], env);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let wal = wal_bytes(dir.path());
        assert!(
            !wal.is_empty(),
            "no WAL segment under {}",
            dir.path().display()
        );
        let found = wal.windows(needle.len()).any(|w| w == needle.as_bytes());
        assert_eq!(
            found, raw,
            "{env:?}: the values are stored as they are: {found}"
        );
        assert_eq!(rows(dir.path()), 2000, "{env:?}");
    }
    let dir = project("{\"id\":1}\n");
    let run = skipprd(
        dir.path(),
        &["sync", "--once"],
        &[("WAL_COMPRESSION", "gzip")],
    );
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("WAL_COMPRESSION"), "{}", run.stderr);
}
