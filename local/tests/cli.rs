//! The `skipprd` binary, run as a user would: real files in a fresh directory per test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
#[path = "common/run.rs"]
mod run;
use run::{Run, skipprd};

use std::path::{Path, PathBuf};

fn project(config: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), config).unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

const CONFIG: &str = "\
pipelines:
  events:
    data_source: data_sources.files
    transform:
      namespace_fields: kind
data_sources:
  files:
    File:
      path: input/*.jsonl
";

const RECORDS: &[&str] = &[
    r#"{"kind":"order","id":1,"price":10.5,"at":1700000000,"day":"2024-01-31","tags":["a"],"customer":{"name":"Ann","address":{"city":"Oslo","geo":{"lat":59.9,"lon":10.7}}}}"#,
    r#"{"kind":"order","id":2,"price":"call us","at":1700000100,"day":"2024-02-01","tags":[],"customer":{"name":"Bo"}}"#,
    r#"{"kind":"order","id":3147483648,"price":7,"at":1700000200,"day":"2024-02-02","tags":["b","c"]}"#,
    r#"{"kind":"Refund Issued","order_id":1,"ok":true}"#,
    r#"{"kind":"Refund Issued","order_id":2,"ok":false,"ms":1700000000123}"#,
];

fn schema_file(dir: &Path) -> PathBuf {
    dir.join("data/default_events/schema.json")
}

#[test]
fn discover_prints_namespaces_and_types_and_saves_the_schema() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let run = skipprd(dir.path(), &["discover"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in [
        "namespace order (3 records)",
        "namespace refund_issued (2 records)",
        "  id: long",
        "  price: double",
        "  price_string: string",
        "  at: timestamp",
        "  day: date",
        "  tags: list<string>",
        "  customer.address.geo.lat: double",
        "  ms: timestamp_ms",
        "  ok: boolean",
    ] {
        assert!(
            run.stdout.contains(line),
            "missing {line:?} in:\n{}",
            run.stdout
        );
    }
    assert!(schema_file(dir.path()).is_file());
}

#[test]
fn the_saved_schema_is_byte_identical_whatever_the_order_of_records_and_files() {
    let forward = project(
        CONFIG,
        &[
            ("input/1.jsonl", &(RECORDS[..2].join("\n") + "\n")),
            ("input/2.jsonl", &(RECORDS[2..].join("\n") + "\n")),
        ],
    );
    let mut reversed_records: Vec<&str> = RECORDS.to_vec();
    reversed_records.reverse();
    let backward = project(
        CONFIG,
        &[
            ("input/1.jsonl", &(reversed_records[..3].join("\n") + "\n")),
            ("input/2.jsonl", &(reversed_records[3..].join("\n") + "\n")),
        ],
    );
    for dir in [&forward, &backward] {
        assert_eq!(
            skipprd(dir.path(), &["discover", "--output", "text"], &[]).code,
            0
        );
    }
    let a = std::fs::read(schema_file(forward.path())).unwrap();
    let b = std::fs::read(schema_file(backward.path())).unwrap();
    assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
}

#[test]
fn discover_json_output_is_one_event_per_line() {
    let dir = project(
        CONFIG,
        &[("input/a.jsonl", &(RECORDS.join("\n") + "\nnot json\n"))],
    );
    let run = skipprd(dir.path(), &["discover", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"discover_start"));
    assert_eq!(kinds.last(), Some(&"discover_complete"));
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "namespace_discovered")
            .count(),
        2
    );
    let done = events.last().unwrap();
    assert_eq!(done["records"], 5);
    assert_eq!(done["deadletters"], 1);
    assert_eq!(done["namespaces"], 2);
}

#[test]
fn schema_prints_a_tree_or_json() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let run = skipprd(dir.path(), &["schema"], &[]);
    assert_eq!(run.code, 1, "schema before discover fails");
    assert!(run.stderr.contains("skipprd discover"), "{}", run.stderr);
    assert_eq!(skipprd(dir.path(), &["discover"], &[]).code, 0);
    let tree = skipprd(dir.path(), &["schema", "-p", "events"], &[]);
    assert_eq!(tree.code, 0, "{}", tree.stderr);
    assert!(tree.stdout.contains("order (3 records)"), "{}", tree.stdout);
    assert!(
        tree.stdout.contains("      geo: struct"),
        "nested fields are indented:\n{}",
        tree.stdout
    );
    let json = skipprd(dir.path(), &["schema", "--output", "json"], &[]);
    let parsed: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(parsed["format_version"], 1);
    assert_eq!(
        json.stdout.trim_end(),
        std::fs::read_to_string(schema_file(dir.path()))
            .unwrap()
            .trim_end()
    );
}

#[test]
fn pipeline_is_chosen_by_flag_or_pipeline_name_and_must_exist() {
    let two = format!("{CONFIG}  more:\n    File:\n      path: input/*.jsonl\n").replace(
        "data_sources:\n",
        "  second:\n    data_source: data_sources.more\ndata_sources:\n",
    );
    let dir = project(&two, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let run = skipprd(dir.path(), &["discover"], &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("2 pipelines are defined") && run.stderr.contains("--pipeline"),
        "{}",
        run.stderr
    );
    assert_eq!(
        skipprd(dir.path(), &["discover"], &[("PIPELINE_NAME", "second")]).code,
        0
    );
    assert!(dir.path().join("data/default_second/schema.json").is_file());
    let run = skipprd(dir.path(), &["discover", "-p", "thrid"], &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("pipeline 'thrid' is not defined"),
        "{}",
        run.stderr
    );
}

#[test]
fn config_errors_exit_2_with_one_message_naming_file_and_key() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (
            "typo",
            "pipelines:\n  p:\n    data_source: data_sources.s\n    data_snk: data_sinks.x\ndata_sources:\n  s:\n    File:\n      path: x\n",
            &[],
        ),
        (
            "dangling",
            "pipelines:\n  p:\n    data_source: data_sources.nope\n",
            &[],
        ),
        (
            "unset",
            "data_sources:\n  s:\n    File:\n      path: ${NOT_SET_ANYWHERE}\n",
            &[],
        ),
        (
            "plaintext",
            "data_sources:\n  s:\n    HttpClient:\n      url: http://127.0.0.1/\n      bearer_token: abc123\n",
            &[],
        ),
        (
            "reserved",
            "pipelines:\n  wal:\n    data_source: data_sources.s\n",
            &[],
        ),
    ];
    let expectations = [
        "pipelines.p.data_snk (line 4, column 5); did you mean `data_sink`?",
        "pipelines.p.data_source references 'data_sources.nope', but 'nope' is not defined.",
        "skippr.yml references ${NOT_SET_ANYWHERE} at data_sources.s.File.path (line 4), but that environment variable is not set",
        "data_sources.s.HttpClient.bearer_token (line 5, column 7) is a secret",
        "pipelines name 'wal' is reserved",
    ];
    for ((name, config, env), expected) in cases.iter().zip(expectations) {
        let dir = project(config, &[]);
        let run = skipprd(dir.path(), &["discover"], env);
        assert_eq!(run.code, 2, "{name}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{name}: {}", run.stderr);
        assert!(
            run.stderr.contains("skippr.yml"),
            "{name} names the file: {}",
            run.stderr
        );
        assert_eq!(
            run.stderr.trim_end().lines().count(),
            1,
            "{name}: one message: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{name}");
        assert!(!run.stderr.contains("abc123"), "{name}: a secret leaked");
    }
}

#[test]
fn an_s3_wal_without_a_bucket_exits_2_naming_the_key_before_any_state_is_touched() {
    let dir = project(CONFIG, &[("input/a.jsonl", RECORDS[0])]);
    for (args, env) in [
        (&["sync", "--once"][..], &[("WAL_STORAGE", "s3")][..]),
        (&["sync", "--once", "--wal-storage", "s3"][..], &[][..]),
        (&["discover"][..], &[("WAL_STORAGE", "s3")][..]),
    ] {
        let run = skipprd(dir.path(), args, env);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("skippr.wal_s3_bucket"),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert!(
        !dir.path().join("data").exists(),
        "no state directory (nor lease) was made"
    );
}

#[test]
fn config_is_found_by_flag_env_var_or_name() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    std::fs::rename(
        dir.path().join("skippr.yml"),
        dir.path().join("elsewhere.yml"),
    )
    .unwrap();
    let run = skipprd(dir.path(), &["discover"], &[]);
    assert_eq!(run.code, 2, "no config: the pipeline is not defined");
    assert!(
        run.stderr.contains("no pipelines are defined"),
        "{}",
        run.stderr
    );
    assert_eq!(
        skipprd(dir.path(), &["discover", "--config", "elsewhere.yml"], &[]).code,
        0
    );
    assert_eq!(
        skipprd(
            dir.path(),
            &["schema"],
            &[("SKIPPR_CONFIG_FILE", "elsewhere.yml")]
        )
        .code,
        0
    );
    let run = skipprd(dir.path(), &["schema", "--config", "missing.yml"], &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("missing.yml"), "{}", run.stderr);
}

#[test]
fn an_unreadable_source_exits_1_naming_the_path() {
    let dir = project(CONFIG, &[]);
    let run = skipprd(dir.path(), &["discover"], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("input/*.jsonl"), "{}", run.stderr);
}

/// Input files kept in the data directory (`data/`, where skipprd keeps its WAL and state)
/// are never read: the error says so and how to fix it, not just "no files match".
#[test]
fn inputs_under_the_data_directory_are_refused_naming_it_and_the_fix() {
    let config = CONFIG.replace("path: input/*.jsonl", "path: data/*.jsonl");
    let dir = project(&config, &[("data/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    for args in [&["discover"][..], &["sync", "--once"]] {
        let run = skipprd(dir.path(), args, &[]);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        for part in ["data/*.jsonl", "data directory", "data_dir"] {
            assert!(
                run.stderr.contains(part),
                "{args:?}: {part:?} in {}",
                run.stderr
            );
        }
    }
}

#[test]
fn bad_command_lines_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(skipprd(dir.path(), &["discovr"], &[]).code, 2);
    assert_eq!(
        skipprd(dir.path(), &["discover", "--output", "yaml"], &[]).code,
        2
    );
}

#[test]
fn json_output_reports_errors_as_events_naming_the_pipeline() {
    let dir = project(CONFIG, &[]);
    let run = skipprd(dir.path(), &["discover", "--output", "json"], &[]);
    assert_eq!(run.code, 1);
    let last: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "discover_error");
    assert_eq!(last["pipeline"], "events");
    assert_eq!(last["retryable"], false);
    let run = skipprd(dir.path(), &["schema", "--output", "json"], &[]);
    assert_eq!(run.code, 1);
    let last: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "schema_error");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("skipprd discover")
    );
}

#[test]
fn bare_log_shows_info_messages_on_stderr() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let quiet = skipprd(dir.path(), &["discover"], &[]);
    assert!(
        !quiet.stderr.contains("Discover finished"),
        "{}",
        quiet.stderr
    );
    let run = skipprd(dir.path(), &["discover", "--log"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("INFO") && run.stderr.contains("Discover finished"),
        "{}",
        run.stderr
    );
    let run = skipprd(dir.path(), &["--log=debug", "discover"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn discover_never_reads_its_own_state_as_input() {
    let config = CONFIG.replace("path: input/*.jsonl", "path: .");
    let dir = project(&config, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let first = skipprd(dir.path(), &["discover", "--output", "json"], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let second = skipprd(dir.path(), &["discover", "--output", "json"], &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let done = |run: &Run| -> serde_json::Value {
        serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap()
    };
    assert_eq!(done(&first)["records"], 5);
    assert_eq!(
        done(&second)["records"],
        5,
        "the saved schema.json was not read back as data"
    );
    assert_eq!(done(&second)["deadletters"], 0);
}

#[test]
fn sync_moves_past_a_batch_of_only_rejected_records_once() {
    let dir = project(CONFIG, &[("input/a.jsonl", "not json\nstill not json\n")]);
    let first = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let done = |run: &Run| -> serde_json::Value {
        serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap()
    };
    assert_eq!(done(&first)["deadletters"], 2);
    assert_eq!(
        done(&first)["batches"],
        1,
        "the rejected records are committed to the WAL, as their own part"
    );
    let rejected = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select offset_key, failure_code, record from \"_deadletters\" order by 1",
        ],
        &[],
    );
    assert_eq!(rejected.code, 0, "{}", rejected.stderr);
    assert_eq!(
        rejected.stdout.trim(),
        r#"{"header":["offset_key","failure_code","record"],"rows":[["1","malformed","not json"],["2","malformed","still not json"]]}"#
    );
    std::fs::write(
        dir.path().join("input/a.jsonl"),
        "not json\nstill not json\n{\"kind\":\"order\",\"id\":1}\n",
    )
    .unwrap();
    let second = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        done(&second)["deadletters"],
        0,
        "the rejected lines were not read again"
    );
    assert_eq!(done(&second)["rows"], 1);
}

#[test]
fn sync_then_query_shows_every_record_once_and_new_lines_after_the_next_pass() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let sync = skipprd(dir.path(), &["sync", "--once"], &[]);
    assert_eq!(sync.code, 0, "{}", sync.stderr);
    let count = |table: &str| -> serde_json::Value {
        let run = skipprd(
            dir.path(),
            &[
                "query",
                "--plain",
                "-s",
                &format!("select count(*) as n from {table}"),
            ],
            &[],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        serde_json::from_str(run.stdout.trim()).unwrap()
    };
    assert_eq!(
        count("events.order"),
        serde_json::json!({"header": ["n"], "rows": [[3]]})
    );
    assert_eq!(count("events.refund_issued")["rows"][0][0], 2);
    // Appended lines are read by the next pass, and only they.
    let mut text = std::fs::read_to_string(dir.path().join("input/a.jsonl")).unwrap();
    text.push_str("{\"kind\":\"order\",\"id\":4,\"price\":1.5,\"coupon\":\"X\"}\n");
    std::fs::write(dir.path().join("input/a.jsonl"), text).unwrap();
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    assert_eq!(count("events.order")["rows"][0][0], 4);
    let run = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select id, coupon from events.order order by id",
        ],
        &[],
    );
    let out: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        out["rows"],
        serde_json::json!([[1, null], [2, null], [4, "X"], [3147483648_i64, null]])
    );
}

#[test]
fn a_bad_statement_exits_1_with_datafusions_message() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    let run = skipprd(dir.path(), &["query", "-s", "selec 1"], &[]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("SQL error"), "{}", run.stderr);
    let run = skipprd(
        dir.path(),
        &["query", "-s", "select * from events.nope"],
        &[],
    );
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("events.nope"), "{}", run.stderr);
}

#[test]
fn a_corrupted_wal_stops_sync_and_query_naming_the_file_and_offset() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    std::fs::write(dir.path().join("input/b.jsonl"), RECORDS.join("\n") + "\n").unwrap();
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    let wal = dir.path().join("data/default_events/wal");
    let segment = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    // Flip a byte inside the first batch's payload: committed data, followed by more batches.
    let at = 200.min(bytes.len() / 4);
    bytes[at] ^= 0xff;
    std::fs::write(&segment, bytes).unwrap();
    for args in [
        &["sync", "--once"][..],
        &["query", "-s", "select count(*) from events.order"][..],
    ] {
        let run = skipprd(dir.path(), args, &[]);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("wal-00000000000000000001.seg"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("offset"), "{args:?}: {}", run.stderr);
        println!("{args:?}: {}", run.stderr.trim());
    }
}

/// Garble `len` bytes of `path` from `at` (damage no crash makes: a bad disk, a stray write).
fn garble(path: &Path, at: usize, len: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() >= at + len, "{} is too short", path.display());
    for (i, byte) in bytes[at..at + len].iter_mut().enumerate() {
        *byte = (i * 131 + 17) as u8;
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_damaged_state_store_exits_1_naming_the_file_and_doctor_fails_on_it_and_on_a_damaged_wal() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    let doctor = skipprd(dir.path(), &["doctor"], &[]);
    assert_eq!(doctor.code, 0, "{}{}", doctor.stdout, doctor.stderr);
    assert!(
        doctor.stdout.contains("events: state store"),
        "{}",
        doctor.stdout
    );
    assert!(doctor.stdout.contains("events: WAL"), "{}", doctor.stdout);

    let store = dir.path().join("data/default_events/state.redb");
    // The first region's pages: redb's own debug assertions panicked on these (exit 101).
    garble(&store, 4096, 4096);
    std::fs::write(dir.path().join("input/b.jsonl"), RECORDS.join("\n") + "\n").unwrap();
    let run = skipprd(dir.path(), &["sync", "--once"], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("state store {} is damaged", store.display())),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("Move it aside"), "{}", run.stderr);
    let doctor = skipprd(dir.path(), &["doctor"], &[]);
    assert_eq!(doctor.code, 1, "{}{}", doctor.stdout, doctor.stderr);
    assert!(
        doctor.stdout.contains("[FAIL] events: state store"),
        "{}",
        doctor.stdout
    );
    assert!(!doctor.stderr.contains("panicked"), "{}", doctor.stderr);

    // The way out the message gives: the position comes back from the WAL, nothing twice.
    std::fs::rename(&store, store.with_extension("redb.damaged")).unwrap();
    let run = skipprd(dir.path(), &["sync", "--once"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let count = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select count(*) from events.order",
        ],
        &[],
    );
    assert!(
        count.stdout.contains("[[6]]"),
        "{}{}",
        count.stdout,
        count.stderr
    );

    let segment = dir
        .path()
        .join("data/default_events/wal/wal-00000000000000000001.seg");
    garble(&segment, 200, 1);
    let doctor = skipprd(dir.path(), &["doctor"], &[]);
    assert_eq!(doctor.code, 1, "{}{}", doctor.stdout, doctor.stderr);
    assert!(
        doctor
            .stdout
            .contains("[FAIL] events: WAL: corrupt WAL segment"),
        "{}",
        doctor.stdout
    );
    assert!(
        doctor.stdout.contains("skipprd reset -p events --yes"),
        "{}",
        doctor.stdout
    );
}

#[test]
fn an_unreadable_file_does_not_block_the_others_and_is_tried_again() {
    let dir = project(
        &CONFIG.replace("input/*.jsonl", "input"),
        &[("input/b.jsonl", "{\"kind\":\"order\",\"id\":1}\n")],
    );
    // A gzip file cut short: its stream is corrupt.
    std::fs::write(
        dir.path().join("input/a.jsonl.gz"),
        [
            0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xab,
        ],
    )
    .unwrap();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["rows"], 1, "b.jsonl was read despite a.jsonl.gz");
    assert_eq!(done["files_failed"], 1);
    assert!(run.stderr.contains("a.jsonl.gz"), "{}", run.stderr);
    let again = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    let done: serde_json::Value =
        serde_json::from_str(again.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["files_failed"], 1, "the bad file is tried again");
    assert_eq!(done["rows"], 0);
}

#[test]
fn a_record_that_breaks_an_inference_limit_is_rejected_and_the_rest_commit() {
    let wide: String = (0..1001)
        .map(|i| format!("\"k{i}\":{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let text = format!(
        "{{\"kind\":\"order\",\"id\":1}}\n{{\"kind\":\"order\",{wide}}}\n{{\"kind\":\"order\",\"id\":3}}\n"
    );
    let dir = project(CONFIG, &[("input/a.jsonl", &text)]);
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["rows"], 2);
    assert_eq!(done["deadletters"], 1);
    assert!(
        run.stderr.contains("inference limit") && run.stderr.contains("input/a.jsonl"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_second_writer_waits_for_the_lease_instead_of_failing_on_the_store() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    for _ in 0..5 {
        let children: Vec<_> = (0..3)
            .map(|_| {
                let mut cmd = bin::skipprd_command(dir.path());
                cmd.args(["sync", "--once"])
                    .stdout(std::process::Stdio::null());
                cmd.stderr(std::process::Stdio::piped()).spawn().unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{stderr}");
        }
    }
}

#[test]
fn a_line_caught_mid_write_is_read_whole_by_the_next_pass() {
    let dir = project(
        CONFIG,
        &[(
            "input/a.jsonl",
            "{\"kind\":\"order\",\"id\":1}\n{\"kind\":\"order\",\"id\":2,\"no",
        )],
    );
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (done["rows"].as_u64(), done["deadletters"].as_u64()),
        (Some(1), Some(0))
    );
    // The writer finishes the line.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("input/a.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"te\":\"x\"}\n").unwrap();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    let done: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (done["rows"].as_u64(), done["deadletters"].as_u64()),
        (Some(1), Some(0))
    );
    let q = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select id, note from events.order order by id",
        ],
        &[],
    );
    assert_eq!(
        q.stdout.trim(),
        r#"{"header":["id","note"],"rows":[[1,null],[2,"x"]]}"#
    );
}

#[test]
fn a_file_renamed_by_log_rotation_is_not_read_twice() {
    let dir = project(
        CONFIG,
        &[(
            "input/app.jsonl",
            "{\"kind\":\"order\",\"id\":1}\n{\"kind\":\"order\",\"id\":2}\n",
        )],
    );
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    // Rotation: the file moves to a new name (and gets one more line first), a new file starts.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("input/app.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"kind\":\"order\",\"id\":3}\n").unwrap();
    drop(f);
    std::fs::rename(
        dir.path().join("input/app.jsonl"),
        dir.path().join("input/app.1.jsonl"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("input/app.jsonl"),
        "{\"kind\":\"order\",\"id\":4}\n",
    )
    .unwrap();
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    let q = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select id from events.order order by id",
        ],
        &[],
    );
    assert_eq!(
        q.stdout.trim(),
        r#"{"header":["id"],"rows":[[1],[2],[3],[4]]}"#,
        "{}",
        q.stderr
    );
}

#[test]
fn discover_waits_for_a_running_sync_instead_of_overwriting_its_schema() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let state = dir.path().join("data/default_events");
    std::fs::create_dir_all(&state).unwrap();
    // Hold the pipeline's writer lock, as a running sync does.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(state.join("writer.lock"))
        .unwrap();
    lock.try_lock().unwrap();
    let run = skipprd(dir.path(), &["discover"], &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("pipeline writer lease unavailable: pipeline 'events'"),
        "{}",
        run.stderr
    );
    assert!(!state.join("schema.json").exists());
    drop(lock);
    assert_eq!(skipprd(dir.path(), &["discover"], &[]).code, 0);
}

/// Regression: with `--config sub/skippr.yml` the config's directory is a relative path, and
/// the lake's table locations were written relative to `/` ("cannot read /sub/lake/...").
#[test]
fn a_lake_sink_works_with_a_relative_config_path_and_query_reads_the_landed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir_all(sub.join("in")).unwrap();
    std::fs::write(
        sub.join("skippr.yml"),
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n\
         data_sources:\n  f:\n    File:\n      path: in\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      table_namespace: ns\n",
    )
    .unwrap();
    std::fs::write(
        sub.join("in/a.jsonl"),
        "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n",
    )
    .unwrap();
    let run = skipprd(
        dir.path(),
        &[
            "--config",
            "sub/skippr.yml",
            "sync",
            "--once",
            "--output",
            "text",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("1 batch delivered"), "{}", run.stdout);
    let hint = sub.join("lake/ns/p/metadata/version-hint.text");
    assert_eq!(std::fs::read_to_string(&hint).unwrap(), "2");
    let metadata =
        std::fs::read_to_string(sub.join("lake/ns/p/metadata/v2.metadata.json")).unwrap();
    let location = format!(
        "file://{}",
        std::fs::canonicalize(sub.join("lake/ns/p"))
            .unwrap()
            .display()
    );
    assert!(metadata.contains(&location), "{metadata}");
    // The WAL reclaimed what landed; query reads it from the table.
    let run = skipprd(
        dir.path(),
        &[
            "--config",
            "sub/skippr.yml",
            "query",
            "--plain",
            "-s",
            "select count(*) as n, sum(id) as s from p",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), r#"{"header":["n","s"],"rows":[[3,6]]}"#);
}

/// `maintain` compacts the small files of many passes into one, expires the snapshots
/// behind it and deletes their files; the rows and the exactly-once bookkeeping stay.
#[test]
fn maintain_compacts_expires_and_deletes_and_query_counts_every_row_once() {
    let dir = project(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n\
         data_sources:\n  f:\n    File:\n      path: in\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      table_namespace: ns\n\
         \x20     auto_maintenance: false\n      snapshot_retain_last: 1\n      snapshot_max_age_minutes: 0\n",
        &[],
    );
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    for pass in 0..5 {
        let lines: String = (0..10)
            .map(|i| format!("{{\"id\":{},\"pass\":{pass}}}\n", pass * 10 + i))
            .collect();
        std::fs::write(dir.path().join(format!("in/{pass}.jsonl")), lines).unwrap();
        let run = skipprd(dir.path(), &["sync", "--once", "--output", "text"], &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let data = dir.path().join("lake/ns/p/data");
    let parquet = || {
        std::fs::read_dir(&data)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "parquet")
            })
            .count()
    };
    assert_eq!(parquet(), 5);

    let run = skipprd(
        dir.path(),
        &["maintain", "-p", "p", "--output", "json"],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let event: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(event["event"], "maintain_complete", "{}", run.stdout);
    assert_eq!(event["pipeline"], "p");
    assert_eq!(event["tables"], 1);
    assert_eq!(event["files_compacted_from"], 5);
    assert_eq!(event["files_compacted_to"], 1);
    assert_eq!(event["snapshots_expired"], 5);
    assert!(event["files_deleted"].as_u64().unwrap() >= 5, "{event}");
    assert!(event["bytes_freed"].as_u64().unwrap() > 0, "{event}");
    assert_eq!(parquet(), 1);

    let count = |dir: &Path| {
        let run = skipprd(
            dir,
            &[
                "query",
                "--plain",
                "-s",
                "select count(*) as n, sum(id) as s from p",
            ],
            &[],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout.trim().to_owned()
    };
    assert_eq!(
        count(dir.path()),
        r#"{"header":["n","s"],"rows":[[50,1225]]}"#
    );

    // Another pass with one more file lands only the new rows.
    std::fs::write(dir.path().join("in/9.jsonl"), "{\"id\":50,\"pass\":9}\n").unwrap();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "text"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        count(dir.path()),
        r#"{"header":["n","s"],"rows":[[51,1275]]}"#
    );

    // Text output: one summary line; nothing left to do.
    let run = skipprd(dir.path(), &["maintain", "--output", "text"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("Maintained 'p': 1 table,"),
        "{}",
        run.stdout
    );
    assert_eq!(
        count(dir.path()),
        r#"{"header":["n","s"],"rows":[[51,1275]]}"#
    );
}

#[test]
fn maintain_without_a_destination_or_with_a_bad_setting_exits_2() {
    let dir = project(CONFIG, &[("input/a.jsonl", RECORDS[0])]);
    let run = skipprd(dir.path(), &["maintain", "-p", "events"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("has no destination"), "{}", run.stderr);

    let dir = project(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n\
         data_sources:\n  f:\n    File:\n      path: in\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      snapshot_retain_last: 0\n",
        &[],
    );
    let run = skipprd(dir.path(), &["maintain"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("snapshot_retain_last"),
        "{}",
        run.stderr
    );
}

/// Pipeline `p`: files in `in/`, a `Duckdb` lake in `lake/`, rejected records in `rejects/`.
const LAKE_WITH_REJECTS: &str = "\
pipelines:
  p:
    data_source: data_sources.f
    data_sink: data_sinks.lake
    deadletter_sink: deadletter_sinks.rejects
data_sources:
  f:
    File:
      path: in
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
deadletter_sinks:
  rejects:
    File:
      path: ./rejects
";

#[test]
fn rejected_records_land_in_the_file_deadletter_sink_once_beside_a_lake() {
    let config = LAKE_WITH_REJECTS;
    let dir = project(
        config,
        &[("in/a.jsonl", "{\"id\":1}\nnot json\n{\"id\":2}\n")],
    );
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "text"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let files: Vec<_> = std::fs::read_dir(dir.path().join("rejects/p"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, vec!["b00000000000000000001.jsonl".to_owned()]);
    let text = std::fs::read_to_string(dir.path().join("rejects/p").join(&files[0])).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["record"], "not json");
    assert_eq!(lines[0]["failure_code"], "malformed");
    assert_eq!(lines[0]["offset_key"], "2");
    assert!(
        lines[0]["source_uri"]
            .as_str()
            .unwrap()
            .ends_with("in/a.jsonl")
    );

    // More input, one more rejected line: a second file; the first is not written again.
    std::fs::write(
        dir.path().join("in/a.jsonl"),
        "{\"id\":1}\nnot json\n{\"id\":2}\nbad again\n",
    )
    .unwrap();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "text"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut files: Vec<_> = std::fs::read_dir(dir.path().join("rejects/p"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let query = skipprd(
        dir.path(),
        &["query", "--plain", "-s", "select count(*) as n from p"],
        &[],
    );
    assert_eq!(
        query.stdout.trim(),
        r#"{"header":["n"],"rows":[[2]]}"#,
        "{}",
        query.stderr
    );
}

#[test]
fn sync_evolves_the_schema_mid_pass_and_types_every_batch_after_it_with_the_new_columns() {
    // Batches of two lines, read ahead of typing: the batches after the one that evolves
    // the schema were first typed with the old schema and must be typed again.
    let config = CONFIG.replace(
        "      path: input/*.jsonl\n",
        "      path: input/*.jsonl\n      batch_size: 2\n",
    );
    let mut lines: Vec<String> = (1..=6)
        .map(|id| format!(r#"{{"kind":"order","id":{id},"price":{id}.5}}"#))
        .collect();
    lines.push(r#"{"kind":"order","id":7,"price":"waived","coupon":"X"}"#.to_owned());
    lines.extend((8..=13).map(|id| {
        format!(r#"{{"kind":"order","id":{id},"price":"{id}.25","coupon":"C\u00e9{id}"}}"#)
    }));
    lines.push("not json".to_owned());
    lines.push(r#"{"kind":"new kind","id":15}"#.to_owned());
    let dir = project(&config, &[("input/a.jsonl", &(lines.join("\n") + "\n"))]);
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (done["rows"].as_u64(), done["deadletters"].as_u64()),
        (Some(14), Some(1))
    );
    let schema = std::fs::read_to_string(schema_file(dir.path())).unwrap();
    for field in ["\"coupon\"", "\"price_string\"", "\"new_kind\""] {
        assert!(schema.contains(field), "{field} missing from {schema}");
    }
    let run = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select id, price, price_string, coupon from events.order order by id",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    let rows = out["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 13);
    assert_eq!(rows[0], serde_json::json!([1, 1.5, null, null]));
    assert_eq!(rows[6], serde_json::json!([7, null, "waived", "X"]));
    assert_eq!(rows[7], serde_json::json!([8, 8.25, null, "Cé8"]));
    assert_eq!(rows[12], serde_json::json!([13, 13.25, null, "Cé13"]));
}

#[test]
fn fixed_deadletters_replay_into_the_lake_exactly_once() {
    let config = LAKE_WITH_REJECTS;
    let dir = project(
        config,
        &[("in/a.jsonl", "{\"id\":1}\n{\"id\": 3, oops}\n{\"id\":2}\n")],
    );
    let count = |dir: &Path| -> String {
        let q = skipprd(
            dir,
            &[
                "query",
                "--plain",
                "-s",
                "select count(*) as n, sum(id) as s from p",
            ],
            &[],
        );
        assert_eq!(q.code, 0, "{}", q.stderr);
        q.stdout.trim().to_owned()
    };
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    assert_eq!(count(dir.path()), r#"{"header":["n","s"],"rows":[[2,3]]}"#);

    // The user fixes the rejected record in its deadletter file, then replays.
    let file = dir.path().join("rejects/p/b00000000000000000001.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    line["record"] = serde_json::Value::String("{\"id\": 3}".into());
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let run = skipprd(dir.path(), &["deadletters", "replay", "-p", "p"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(count(dir.path()), r#"{"header":["n","s"],"rows":[[3,6]]}"#);
    assert!(!file.exists(), "a replayed file moves aside");
    assert!(
        dir.path()
            .join("rejects/p/replayed/b00000000000000000001.jsonl")
            .exists()
    );

    // Replaying again, even with the file put back (as if a crash came before the move),
    // and syncing again, add nothing.
    std::fs::rename(
        dir.path()
            .join("rejects/p/replayed/b00000000000000000001.jsonl"),
        &file,
    )
    .unwrap();
    let again = skipprd(dir.path(), &["deadletters", "replay", "-p", "p"], &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(skipprd(dir.path(), &["sync", "--once"], &[]).code, 0);
    assert_eq!(count(dir.path()), r#"{"header":["n","s"],"rows":[[3,6]]}"#);
}

/// `skipprd doctor`: every check `[ok]` on a runnable project (exit 0) and nothing written
/// but its probe; a source matching no file is a `[FAIL]` with the data source named and a
/// fix (exit 1), also as one `doctor_complete` JSON event; a config that does not load is the
/// one `[FAIL]` (exit 2).
#[test]
fn doctor_reports_each_check_with_a_fix_and_exits_by_the_worst() {
    let dir = project(CONFIG, &[("input/a.jsonl", &(RECORDS.join("\n") + "\n"))]);
    let run = skipprd(dir.path(), &["doctor"], &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    for line in [
        "[ok]   config: ",
        "[ok]   events: source: `data_sources.files` opens",
        "[ok]   events: state directory: ",
        "[ok]   events: disk: ",
        "[ok]   events: destination: none",
    ] {
        assert!(
            run.stdout.contains(line),
            "missing {line:?} in:\n{}",
            run.stdout
        );
    }
    assert!(!run.stdout.contains("[FAIL]"), "{}", run.stdout);
    assert!(!dir.path().join("data").exists(), "doctor creates no state");

    let bad = project(&CONFIG.replace("input/*.jsonl", "missing/*.jsonl"), &[]);
    let run = skipprd(bad.path(), &["doctor"], &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("[FAIL] events: source: pipeline 'events': no files match `missing/*.jsonl`"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("       fix: fix `data_sources.files`"),
        "{}",
        run.stdout
    );
    let json = skipprd(bad.path(), &["doctor", "--output", "json"], &[]);
    assert_eq!(json.code, 1);
    let event: serde_json::Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(event["event"], "doctor_complete");
    assert_eq!(event["ok"], false);
    let failed: Vec<&str> = event["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["events: source"]);

    let broken = project("pipelines: [\n", &[]);
    let run = skipprd(broken.path(), &["doctor"], &[]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.starts_with("[FAIL] config: "), "{}", run.stdout);
    assert!(run.stdout.contains("line 1"), "{}", run.stdout);
}

/// Issue 13, defect 9: a record of tiny values just under the byte limit once expanded to
/// about 1 GiB parsed, killing a small Lambda on every invocation. Under a 512 MiB data limit
/// (`ulimit -d`, which counts the heap but not the mapped binary) it is now a counted
/// `too_large` deadletter with its reason, and the records around it land.
#[test]
fn a_record_that_would_not_fit_in_512_mib_parsed_is_deadlettered_and_the_pass_goes_on() {
    let values = (16 * 1024 * 1024 - 100) / 2;
    let big = format!(
        r#"{{"kind":"order","id":2,"a":[{}]}}"#,
        vec!["0"; values].join(",")
    );
    assert!(big.len() < 16 * 1024 * 1024, "just under the byte limit");
    let text = format!(
        "{}\n{big}\n{}\n",
        r#"{"kind":"order","id":1}"#, r#"{"kind":"order","id":3}"#
    );
    let dir = project(CONFIG, &[("input/a.jsonl", &text)]);
    let mut cmd = std::process::Command::new("sh");
    cmd.current_dir(dir.path())
        .args(["-c", r#"ulimit -d 524288 && exec "$0" "$@""#])
        .arg(bin::skipprd_bin())
        .args(["sync", "--once", "--output", "json"]);
    for var in bin::SCRUBBED {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let done: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["deadletters"], 1, "{stdout}");
    assert_eq!(done["rows"], 2, "{stdout}");
    let rejected = skipprd(
        dir.path(),
        &[
            "query",
            "--plain",
            "-s",
            "select offset_key, failure_code, error from \"_deadletters\"",
        ],
        &[],
    );
    assert_eq!(rejected.code, 0, "{}", rejected.stderr);
    assert!(
        rejected.stdout.contains(r#"["2","too_large","record of "#),
        "{}",
        rejected.stdout
    );
    assert!(
        rejected
            .stdout
            .contains("MiB once parsed, more than the 128 MiB a record may take"),
        "{}",
        rejected.stdout
    );
}
