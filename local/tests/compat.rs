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
#[path = "common/local_aws.rs"]
mod local_aws;
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
