//! What scripts read: the JSON events' run fields and summary fields, `doctor --output json`,
//! and the daily log file. (Each event's full field list is the golden reference
//! docs/events.md, checked by the core's unit tests.)
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

use serde_json::Value;

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

const RECORDS: &str = r#"{"kind":"order","id":1,"price":10.5,"customer":{"name":"Ann"}}
{"kind":"order","id":2,"price":7}
{"kind":"refund","order_id":1}
not json
"#;

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("skippr.yml"), CONFIG).unwrap();
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    std::fs::write(dir.path().join("input/a.jsonl"), RECORDS).unwrap();
    dir
}

fn events(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn kind(event: &Value) -> &str {
    event["event"].as_str().unwrap_or_default()
}

/// Every line carries `timestamp` (RFC 3339), `run_id` (one per run) and `phase` (the
/// command); `discover_complete` and `sync_complete` carry the real product's summary fields
/// beside ours.
#[test]
fn every_json_event_carries_its_run_and_the_summaries_the_real_products_names() {
    let dir = project();
    let discover = skipprd(dir.path(), &["discover", "--output", "json"], &[]);
    assert_eq!(discover.code, 0, "{}", discover.stderr);
    let sync = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(sync.code, 0, "{}", sync.stderr);
    let mut run_ids = Vec::new();
    for (run, phase) in [(&discover, "discover"), (&sync, "sync")] {
        let events = events(run);
        assert!(events.len() >= 2, "{}", run.stdout);
        let first_id = events[0]["run_id"].as_str().unwrap().to_owned();
        assert!(first_id.len() >= 16, "{first_id}");
        for event in &events {
            let keys: Vec<&String> = event.as_object().unwrap().keys().take(4).collect();
            assert_eq!(keys, ["event", "timestamp", "run_id", "phase"], "{event}");
            assert_eq!(event["phase"], phase, "{event}");
            assert_eq!(event["run_id"], first_id.as_str(), "one id per run");
            let at = event["timestamp"].as_str().unwrap();
            let parsed = chrono::DateTime::parse_from_rfc3339(at).unwrap();
            let age = chrono::Utc::now().signed_duration_since(parsed);
            assert!(age.num_seconds() < 600 && age.num_seconds() >= 0, "{at}");
        }
        run_ids.push(first_id);
    }
    assert_ne!(run_ids[0], run_ids[1], "each run has its own id");

    let discovered = events(&discover);
    let done = discovered.last().unwrap();
    assert_eq!(kind(done), "discover_complete");
    assert_eq!(done["namespaces_discovered"], 2);
    assert_eq!(done["namespaces"], 2);
    // order: kind, id, price, customer, customer.name; refund: kind, order_id.
    assert_eq!(done["total_fields"], 7, "{done}");
    assert!(done["elapsed_ms"].is_u64(), "{done}");

    let synced = events(&sync);
    let done = synced.last().unwrap();
    assert_eq!(kind(done), "sync_complete");
    assert_eq!(done["total_rows"], 3, "{done}");
    assert_eq!(done["rows"], 3);
    assert_eq!(done["namespaces_synced"], 2);
    assert!(done["elapsed_ms"].is_u64(), "{done}");

    // A second pass reads nothing new: no namespace synced.
    let again = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    let again = events(&again);
    let done = again.last().unwrap();
    assert_eq!(done["total_rows"], 0, "{done}");
    assert_eq!(done["namespaces_synced"], 0, "{done}");
}

/// `doctor --output json`: `{ok, checks: [{ok, severity, message, suggested_fix_command}]}`
/// (the real product's shape) plus our `name`.
#[test]
fn doctor_json_has_the_real_products_shape() {
    let dir = project();
    std::fs::write(
        dir.path().join("skippr.yml"),
        CONFIG.replace("input/*.jsonl", "missing/*.jsonl"),
    )
    .unwrap();
    let run = skipprd(dir.path(), &["doctor", "--output", "json"], &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let event: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(event["event"], "doctor_complete");
    assert_eq!(event["phase"], "doctor");
    assert_eq!(event["ok"], false);
    let checks = event["checks"].as_array().unwrap();
    assert!(checks.len() >= 3, "{event}");
    for check in checks {
        for key in ["ok", "severity", "message", "suggested_fix_command", "name"] {
            assert!(check.get(key).is_some(), "{key} missing in {check}");
        }
    }
    let source = checks
        .iter()
        .find(|c| c["name"] == "events: source")
        .unwrap();
    assert_eq!(source["ok"], false);
    assert_eq!(source["severity"], "error");
    assert!(
        source["message"]
            .as_str()
            .unwrap()
            .contains("missing/*.jsonl"),
        "{source}"
    );
    assert!(source["suggested_fix_command"].is_string(), "{source}");
    let config = checks.iter().find(|c| c["name"] == "config").unwrap();
    assert_eq!(config["ok"], true);
    assert_eq!(config["severity"], "info");
    assert!(config["suggested_fix_command"].is_null());
}

/// The daily log file holds every event's JSON line whatever `--output` shows, and the log at
/// `info`; `--no-log-file`, `SKIPPR_LOG_FILE=off` turn it off, `SKIPPR_LOG_DIR` moves it.
#[test]
fn the_daily_log_file_keeps_every_event_and_can_be_moved_or_turned_off() {
    let dir = project();
    let run = skipprd(dir.path(), &["sync", "--once", "--output", "text"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let today = chrono::Utc::now().date_naive().format("%Y-%m-%d");
    let name = format!("skipprd.{today}.log");
    let log = std::fs::read_to_string(dir.path().join("logs").join(&name))
        .unwrap_or_else(|e| panic!("logs/{name}: {e}"));
    for kind in ["\"event\":\"sync_start\"", "\"event\":\"sync_complete\""] {
        assert!(
            log.contains(&kind.replace('"', "\\\"")) || log.contains(kind),
            "{kind} missing in:\n{log}"
        );
    }
    assert!(log.contains("INFO"), "the log at info:\n{log}");
    assert!(!run.stderr.contains("sync_complete"), "{}", run.stderr);
    // A second run appends to the same file.
    let before = log.len();
    skipprd(dir.path(), &["sync", "--once"], &[]);
    let after = std::fs::read_to_string(dir.path().join("logs").join(&name)).unwrap();
    assert!(after.len() > before && after.starts_with(&log));

    let off = project();
    skipprd(off.path(), &["sync", "--once", "--no-log-file"], &[]);
    skipprd(
        off.path(),
        &["sync", "--once"],
        &[("SKIPPR_LOG_FILE", "off")],
    );
    assert!(!off.path().join("logs").exists());

    let moved = project();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("deep/logs");
    let run = skipprd(
        moved.path(),
        &["discover"],
        &[("SKIPPR_LOG_DIR", target.to_str().unwrap())],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(target.join(&name).exists());
    assert!(!moved.path().join("logs").exists());

    // A log directory that cannot be made is said once and fails nothing.
    let blocked = elsewhere.path().join("a-file");
    std::fs::write(&blocked, "").unwrap();
    let run = skipprd(
        moved.path(),
        &["sync", "--once"],
        &[("SKIPPR_LOG_DIR", blocked.to_str().unwrap())],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr.matches("could not write the log file").count(),
        1,
        "{}",
        run.stderr
    );
}

fn plain(run: &Run) -> Value {
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// `query`'s management statements, as the real product has them: `SHOW PIPELINES`, `SHOW
/// STATS`, `SCHEMA DUMP`, `RESET PIPELINE p` (confirmed by `--yes`, refused with exit 2
/// without), and any other statement of that family a clear "not supported" with exit 2.
#[test]
fn query_runs_the_management_statements_and_refuses_the_rest_with_exit_2() {
    let dir = project();
    let run = skipprd(dir.path(), &["sync", "--once"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let query = |sql: &str, extra: &[&str]| {
        let mut args = vec!["query", "--plain", "--sql", sql];
        args.extend_from_slice(extra);
        skipprd(dir.path(), &args, &[])
    };

    let pipelines = plain(&query("SHOW PIPELINES", &[]));
    assert_eq!(
        pipelines["header"],
        serde_json::json!([
            "pipeline",
            "source",
            "source_type",
            "destination",
            "destination_type",
            "sync_frequency_seconds"
        ])
    );
    assert_eq!(
        pipelines["rows"],
        serde_json::json!([["events", "data_sources.files", "File", null, null, 900]])
    );

    let stats = plain(&query("show stats;", &[]));
    assert_eq!(
        stats["rows"],
        serde_json::json!([
            ["events._deadletters", 1],
            ["events.order", 2],
            ["events.refund", 1]
        ]),
        "{stats}"
    );

    let dump = plain(&query("SCHEMA DUMP events", &[]));
    let text = dump["rows"][0][1].as_str().unwrap();
    let schema: Value = serde_json::from_str(text).unwrap();
    assert!(schema["namespaces"]["order"].is_object(), "{schema}");

    for sql in [
        "SHOW NAMESPACES",
        "RESET TABLE events.order",
        "DROP PIPELINE events",
    ] {
        let run = query(sql, &[]);
        assert_eq!(run.code, 2, "{sql}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains(&format!("`{sql}` is not supported")),
            "{sql}: {}",
            run.stderr
        );
    }
    let run = query("SHOW STATS nope", &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("pipeline 'nope'"), "{}", run.stderr);

    // Not confirmed: refused, nothing cleared.
    let run = query("RESET PIPELINE events", &[]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    let again = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(events(&again).last().unwrap()["total_rows"], 0);

    // Confirmed: the position and acknowledgements go together; the next pass reads the
    // source again, and the WAL holds each row once.
    let reset = plain(&query("RESET PIPELINE events", &["--yes"]));
    let fields: Vec<&str> = reset["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"position_batch"), "{reset}");
    let again = skipprd(dir.path(), &["sync", "--once", "--output", "json"], &[]);
    assert_eq!(events(&again).last().unwrap()["total_rows"], 3);
    let stats = plain(&query("SHOW STATS", &[]));
    assert_eq!(
        stats["rows"],
        serde_json::json!([
            ["events._deadletters", 1],
            ["events.order", 2],
            ["events.refund", 1]
        ])
    );
}

/// `metadata show` prints the saved schema (or one namespace of it) in the format `metadata
/// apply` reads; `apply` merges a hand-edited file under the lease: a new namespace and field
/// are added, a narrowed type is not narrowed, a file of another pipeline is refused naming
/// the file.
#[test]
fn metadata_show_and_apply_round_trip_the_saved_schema_and_never_narrow_it() {
    let dir = project();
    let before = skipprd(dir.path(), &["metadata", "show", "-p", "events"], &[]);
    assert_eq!(before.code, 1, "no schema yet: {}", before.stdout);
    assert_eq!(skipprd(dir.path(), &["discover"], &[]).code, 0);
    let shown = skipprd(dir.path(), &["metadata", "show"], &[]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let schema = skipprd(dir.path(), &["schema", "--output", "json"], &[]);
    assert_eq!(
        shown.stdout, schema.stdout,
        "the saved format, as `schema` prints it"
    );

    let order = skipprd(
        dir.path(),
        &["metadata", "show", "--namespace", "order"],
        &[],
    );
    let order: Value = serde_json::from_str(&order.stdout).unwrap();
    assert_eq!(order["namespace"], "order");
    assert!(order["fields"].is_array(), "{order}");
    let missing = skipprd(
        dir.path(),
        &["metadata", "show", "--namespace", "nope"],
        &[],
    );
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing
            .stderr
            .contains("no namespace 'nope' (it has: order, refund)"),
        "{}",
        missing.stderr
    );

    // Edit: a new namespace, a new field, and `price` narrowed from double to int.
    let mut edited: Value = serde_json::from_str(&shown.stdout).unwrap();
    let fields = edited["namespaces"]["order"]["fields"]
        .as_array_mut()
        .unwrap();
    for field in fields.iter_mut() {
        if field["name"] == "price" {
            assert_eq!(field["type"], "double");
            field["type"] = "int".into();
        }
    }
    fields.push(serde_json::json!({"name": "coupon", "type": "string"}));
    edited["namespaces"]["shipment"] = serde_json::json!({
        "records": 0,
        "fields": [{"name": "tracking", "type": "string"}]
    });
    std::fs::write(dir.path().join("edited.json"), edited.to_string()).unwrap();
    let applied = skipprd(
        dir.path(),
        &[
            "metadata",
            "apply",
            "--schema-json",
            "edited.json",
            "--output",
            "json",
        ],
        &[],
    );
    assert_eq!(applied.code, 0, "{}{}", applied.stdout, applied.stderr);
    let event = events(&applied).pop().unwrap();
    assert_eq!(event["event"], "metadata_applied");
    assert_eq!(event["changed"], true);
    assert_eq!(event["namespaces"], 3);
    let now = skipprd(dir.path(), &["schema", "--output", "json"], &[]);
    let now: Value = serde_json::from_str(&now.stdout).unwrap();
    assert!(now["namespaces"]["shipment"].is_object(), "{now}");
    let names: Vec<&str> = now["namespaces"]["order"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"coupon") && names.contains(&"price"),
        "{names:?}"
    );
    let price = now["namespaces"]["order"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "price")
        .unwrap();
    assert_eq!(price["type"], "double", "never narrowed: {price}");

    // Applying the same file again changes nothing.
    let again = skipprd(
        dir.path(),
        &[
            "metadata",
            "apply",
            "--schema-json",
            "edited.json",
            "--output",
            "json",
        ],
        &[],
    );
    assert_eq!(events(&again).pop().unwrap()["changed"], false);

    // Another pipeline's schema is refused, naming the file.
    edited["pipeline"] = "other".into();
    std::fs::write(dir.path().join("other.json"), edited.to_string()).unwrap();
    let refused = skipprd(
        dir.path(),
        &["metadata", "apply", "--schema-json", "other.json"],
        &[],
    );
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("other.json") && refused.stderr.contains("pipeline 'other'"),
        "{}",
        refused.stderr
    );
    std::fs::write(dir.path().join("bad.json"), "{\"format_version\": 1").unwrap();
    let bad = skipprd(
        dir.path(),
        &["metadata", "apply", "--schema-json", "bad.json"],
        &[],
    );
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("bad.json"), "{}", bad.stderr);
}
