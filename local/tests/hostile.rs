//! Hostile data through the real `skipprd` binary into the `Duckdb` destination, read back by
//! DuckDB and PyIceberg (`tests/readers/read_table.py`), never by skipprd's own code.
//!
//! Namespace, partition and key values that are empty, non-ASCII, punctuation, 300+ bytes,
//! path-like (`../../x`) or hold NUL, tab and newline: every record lands exactly once (both
//! readers count it, by id) or is a counted deadletter with a reason; no file is written
//! outside the project (the walk covers the whole temporary directory, two levels above
//! it); a second pass adds no row.
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
#[path = "common/rss.rs"]
mod rss;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use bin::skipprd_command;
use local_aws::reader_python;

const CONFIG: &str = "\
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
    deadletter_sink: deadletter_sinks.rejects
    transform:
      namespace_fields: kind
      batch_partition_fields: [region]
data_sources:
  files:
    File:
      path: input
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
      table_namespace: shop
deadletter_sinks:
  rejects:
    File:
      path: ./rejects
";

/// The hostile strings, used as namespace values, partition values and keys.
fn hostile() -> Vec<String> {
    vec![
        String::new(),
        "!!!".into(),
        "заказ".into(),
        "注文".into(),
        "Order".into(),
        "x".repeat(300),
        "y".repeat(1100),
        "../../x".into(),
        "../../../../../../escaped".into(),
        "/".into(),
        "..".into(),
        "nul\0byte".into(),
        "tab\there".into(),
        "new\nline".into(),
        "a=b%2F".into(),
        "_deadletters".into(),
        "_leading".into(),
    ]
}

/// One record per (kind, region) pair and per hostile key, with a unique `id`.
fn records() -> Vec<Value> {
    let values = hostile();
    let mut out = Vec::new();
    let mut id = 0i64;
    for kind in &values {
        for region in &values {
            id += 1;
            out.push(json!({"id": id, "kind": kind, "region": region}));
        }
        id += 1;
        // No region at all: the null partition.
        out.push(json!({"id": id, "kind": kind}));
    }
    for key in &values {
        id += 1;
        let mut record = json!({"id": id, "kind": "keys", "region": "r"});
        record[key.as_str()] = json!(format!("v{id}"));
        out.push(record);
    }
    // No kind: the pipeline's default namespace (its name).
    id += 1;
    out.push(json!({"id": id, "region": "../../x"}));
    out
}

/// A project whose pipeline `events` reads the directory `input` into a local lake
/// (`Duckdb`, namespace `shop`).
fn lake_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    std::fs::create_dir_all(project.join("input")).unwrap();
    std::fs::write(
        project.join("skippr.yml"),
        "pipelines:\n  events:\n    data_source: data_sources.files\n    data_sink: data_sinks.lake\n\
         data_sources:\n  files:\n    File:\n      path: input\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      table_namespace: shop\n",
    )
    .unwrap();
    dir
}

fn sync(project: &Path) -> Output {
    let out = skipprd_command(project)
        .args(["sync", "--once", "--output", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sync failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn sync_complete(out: &Output) -> Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| event["event"] == "sync_complete")
        .unwrap_or_else(|| {
            panic!(
                "no sync_complete in {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
}

/// Every table directory of the namespace `shop`, by name.
fn lake_tables(project: &Path) -> BTreeMap<String, PathBuf> {
    let mut tables = BTreeMap::new();
    for entry in std::fs::read_dir(project.join("lake/shop")).unwrap() {
        let path = entry.unwrap().path();
        if path.join("metadata/version-hint.text").is_file() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            tables.insert(name, path.canonicalize().unwrap());
        }
    }
    tables
}

/// What DuckDB and PyIceberg read of each table (`read_table.py --key id`, with every row
/// when `values`), by table directory.
fn read_tables(tables: &[PathBuf], values: bool) -> BTreeMap<PathBuf, Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_table.py");
    let out = Command::new(reader_python())
        .arg(&script)
        .args(["--key", "id"])
        .args(values.then_some("--values"))
        .args(tables)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    parsed["tables"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(dir, v)| (PathBuf::from(dir), v.clone()))
        .collect()
}

fn walk(root: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.push(path.clone());
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The table each kind lands in, as the naming policy says (`None`: the default namespace).
fn table_of(kind: Option<&str>) -> String {
    kind.map_or_else(|| "events".to_owned(), skipprd::schema::naming::table_name)
}

#[test]
fn hostile_names_and_values_land_exactly_once_inside_the_warehouse() {
    let root = tempfile::tempdir().unwrap();
    // Two levels below the walk's root, so `../..` from the project is still seen.
    let project = root.path().join("a/b/project");
    std::fs::create_dir_all(project.join("input")).unwrap();
    std::fs::write(project.join("skippr.yml"), CONFIG).unwrap();
    let records = records();
    let mut text: String = records.iter().map(|r| format!("{r}\n")).collect();
    text.push_str("not json\n");
    std::fs::write(project.join("input/events.jsonl"), text).unwrap();

    let first = sync_complete(&sync(&project));

    // Expected ids per table.
    let mut expected: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for r in &records {
        let table = table_of(r.get("kind").and_then(Value::as_str));
        expected
            .entry(table)
            .or_default()
            .insert(r["id"].as_i64().unwrap());
    }
    let tables = lake_tables(&project);
    assert_eq!(
        tables.keys().cloned().collect::<BTreeSet<_>>(),
        expected.keys().cloned().collect::<BTreeSet<_>>(),
        "one table per namespace value"
    );
    let read = read_tables(&tables.values().cloned().collect::<Vec<_>>(), false);
    let mut landed = 0u64;
    for (name, dir) in &tables {
        let want = &expected[name];
        for reader in ["duckdb", "pyiceberg"] {
            let got = &read[dir][reader];
            assert_eq!(got["rows"], json!(want.len()), "{reader} {name}: {got}");
            assert_eq!(got["duplicate_keys"], json!(0), "{reader} {name}");
            let keys: BTreeSet<i64> = got["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_i64().unwrap())
                .collect();
            assert_eq!(&keys, want, "{reader} {name}: every record once");
        }
        landed += want.len() as u64;
    }
    assert_eq!(landed, records.len() as u64);

    // The one line that is not JSON is a counted deadletter with a reason.
    let dead: Vec<PathBuf> = {
        let mut files = Vec::new();
        walk(&project.join("rejects"), &mut files);
        files.into_iter().filter(|p| p.is_file()).collect()
    };
    let lines: Vec<Value> = dead
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["record"], "not json");
    assert_eq!(lines[0]["failure_code"], "malformed");
    assert_eq!(first["deadletters"], json!(1), "{first}");
    assert_eq!(first["rows"], json!(records.len()), "{first}");

    // No file or directory outside the project; every data file in its table's data dir.
    let mut all = Vec::new();
    walk(root.path(), &mut all);
    let lake = project.join("lake/shop");
    for path in &all {
        assert!(
            path.starts_with(&project) || project.starts_with(path),
            "outside the project: {}",
            path.display()
        );
        if path.extension().is_some_and(|e| e == "parquet") {
            let rel = path.strip_prefix(&lake).unwrap();
            let parts: Vec<_> = rel.components().collect();
            assert_eq!(
                parts.len(),
                4,
                "table/data/region=../file: {}",
                path.display()
            );
            assert_eq!(parts[1].as_os_str(), "data", "{}", path.display());
        }
        let name = path.file_name().unwrap().len();
        assert!(name <= 255, "{}", path.display());
    }

    // `skipprd query` reads the landed files too (their escaped paths).
    for (name, want) in &expected {
        let out = skipprd_command(&project)
            .args([
                "query",
                "--plain",
                "-s",
                &format!("select count(*) as n from \"{name}\""),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!(r#"{{"header":["n"],"rows":[[{}]]}}"#, want.len()),
            "query {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A second pass adds nothing.
    let second = sync_complete(&sync(&project));
    assert_eq!(second["rows"], json!(0), "{second}");
    let again = read_tables(&tables.values().cloned().collect::<Vec<_>>(), false);
    for (name, dir) in &tables {
        for reader in ["duckdb", "pyiceberg"] {
            assert_eq!(
                again[dir][reader]["rows"],
                json!(expected[name].len()),
                "{reader} {name}: the second pass added rows ({second})"
            );
        }
    }
}

/// Regression (found by an outside-in probe): a key `a.b` in one pass and a struct `a` with a
/// field `b` in the next gave the Iceberg table two fields named `a.b`; the delivery failed
/// ("multiple fields for name a.b") and so did every later pass. The key's column is now
/// `a%2Eb`, each value in its own column, as DuckDB, PyIceberg and `skipprd query` read it.
#[test]
fn a_dotted_key_and_a_struct_of_its_path_land_in_two_columns_across_passes() {
    let dir = lake_project();
    let project = dir.path();
    std::fs::write(project.join("input/1.jsonl"), "{\"id\":1,\"a.b\":10}\n").unwrap();
    sync(project);
    std::fs::write(
        project.join("input/2.jsonl"),
        "{\"id\":2,\"a\":{\"b\":20}}\n{\"id\":3,\"a.b\":30,\"a\":{\"b\":31}}\n",
    )
    .unwrap();
    let second = sync_complete(&sync(project));
    assert_eq!(second["rows"], json!(2), "{second}");
    // A pass with nothing new still succeeds.
    sync(project);

    let table = project.join("lake/shop/events").canonicalize().unwrap();
    let read = read_tables(std::slice::from_ref(&table), true);
    let want = json!([
        {"id": 1, "a%2Eb": 10, "a": null},
        {"id": 2, "a%2Eb": null, "a": {"b": 20}},
        {"id": 3, "a%2Eb": 30, "a": {"b": 31}},
    ]);
    for reader in ["duckdb", "pyiceberg"] {
        let got = &read[&table][reader]["values"];
        assert_eq!(got, &want, "{reader}: {read:?}");
    }

    let out = skipprd_command(project)
        .args([
            "query",
            "--plain",
            "-s",
            "select id, \"a%2Eb\" as flat, a['b'] as nested from events order by id",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"header":["id","flat","nested"],"rows":[[1,10,null],[2,null,20],[3,30,31]]}"#,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn nan_and_the_infinities_from_parquet_land_in_double_columns_not_as_null() {
    let dir = lake_project();
    let project = dir.path();
    // Written by pyarrow, not by skipprd's own code: a float64 and a float32 column.
    let script = "\
import sys, pyarrow as pa, pyarrow.parquet as pq
nan, inf = float('nan'), float('inf')
values = [nan, inf, -inf, 1.5, None, -0.0]
pq.write_table(pa.table({
    'id': pa.array(range(1, 7), pa.int64()),
    'd': pa.array(values, pa.float64()),
    'f': pa.array(values, pa.float32()),
}), sys.argv[1])
";
    let out = Command::new(reader_python())
        .args(["-c", script])
        .arg(project.join("input/x.parquet"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let complete = sync_complete(&sync(project));
    assert_eq!(complete["rows"], json!(6), "{complete}");

    let table = project.join("lake/shop/events").canonicalize().unwrap();
    let read = read_tables(std::slice::from_ref(&table), true);
    // read_table.py spells NaN and the infinities as these strings (JSON has no such numbers).
    let want = json!([
        {"id": 1, "d": "NaN", "f": "NaN"},
        {"id": 2, "d": "Infinity", "f": "Infinity"},
        {"id": 3, "d": "-Infinity", "f": "-Infinity"},
        {"id": 4, "d": 1.5, "f": 1.5},
        {"id": 5, "d": null, "f": null},
        {"id": 6, "d": -0.0, "f": -0.0},
    ]);
    for reader in ["duckdb", "pyiceberg"] {
        let got = &read[&table][reader];
        assert_eq!(got["values"], want, "{reader}: {got}");
        let columns: Vec<(String, String)> = got["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c[0].as_str().unwrap().to_owned(),
                    c[1].as_str().unwrap().to_lowercase(),
                )
            })
            .collect();
        // Both floats are doubles, with no `_string` sibling holding the words instead.
        let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["d", "f", "id"], "{reader}: {columns:?}");
        assert_eq!(columns[0].1, "double", "{reader}: {columns:?}");
        assert_eq!(columns[1].1, "double", "{reader}: {columns:?}");
    }
}

/// Thousands of one-line files in one batch: each line is kept as a slice of the buffer its
/// file was read into, so a small file's buffer must not keep a whole read chunk (64 KiB)
/// alive for its one line (10,000 files: a peak of 203 MiB that way, 83 MiB without, in a
/// debug build).
#[test]
fn thousands_of_one_line_files_in_one_batch_stay_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let files = 10_000;
    for i in 0..files {
        let line = json!({"id": i, "name": "x".repeat(50)}).to_string() + "\n";
        std::fs::write(input.join(format!("f{i:05}.jsonl")), line).unwrap();
    }
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n  tiny:\n    data_source: data_sources.files\ndata_sources:\n  files:\n    File:\n      path: in/*.jsonl\n",
    )
    .unwrap();
    let (report, peak_mib) = rss::skipprd_peak_rss(
        dir.path(),
        &["sync", "--once", "--output", "json", "--no-log-file"],
    );
    assert_eq!(report["code"], 0, "{report}");
    let stdout = report["stdout"].as_str().unwrap();
    let done: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["total_rows"], files, "{done}");
    println!("{files} one-line files: peak RSS {peak_mib} MiB");
    assert!(peak_mib < 128, "peak RSS {peak_mib} MiB: {done}");
}
