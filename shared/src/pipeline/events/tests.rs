//! The JSON events' golden reference: one sample of every event, stamped, rendered into
//! docs/events.md (`SKIPPR_BLESS=1 cargo test -p skipprd-shared pipeline::events` rewrites
//! it). A renamed, dropped or added field changes the file, so it cannot pass unnoticed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::*;
use crate::pipeline::reset::ResetReport;
use crate::pipeline::sync::SyncReport;

fn stamp() -> RunStamp {
    RunStamp {
        run_id: "4f1c0b8e9d2a4c6b8e0f1a2b3c4d5e6f".to_owned(),
        phase: "sync",
    }
}

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_796_169_598_123).unwrap_or_default()
}

fn failed() -> (String, bool) {
    ("the error, one line".to_owned(), true)
}

/// The event's name: an exhaustive match, so a new event fails to compile here until it
/// has a sample below.
fn name(event: &Event) -> &'static str {
    match event {
        Event::DiscoverStart { .. } => "discover_start",
        Event::DiscoverProgress { .. } => "discover_progress",
        Event::NamespaceDiscovered { .. } => "namespace_discovered",
        Event::DiscoverComplete { .. } => "discover_complete",
        Event::DiscoverError { .. } => "discover_error",
        Event::SyncStart { .. } => "sync_start",
        Event::SyncStatus { .. } => "sync_status",
        Event::SchemaEvolved { .. } => "schema_evolved",
        Event::SyncComplete { .. } => "sync_complete",
        Event::SyncError { .. } => "sync_error",
        Event::MaintainComplete { .. } => "maintain_complete",
        Event::MaintainError { .. } => "maintain_error",
        Event::QueryError { .. } => "query_error",
        Event::StoreReady { .. } => "store_ready",
        Event::StoreError { .. } => "store_error",
        Event::LeaseWaiting { .. } => "lease_waiting",
        Event::Reset { .. } => "reset",
        Event::ResetError { .. } => "reset_error",
        Event::SchemaError { .. } => "schema_error",
        Event::MetadataApplied { .. } => "metadata_applied",
    }
}

/// The command a sample event comes from, for the reference's examples.
fn phase_of(kind: &str) -> &'static str {
    match kind.split('_').next().unwrap_or_default() {
        "discover" | "namespace" => "discover",
        "maintain" => "maintain",
        "query" => "query",
        "store" => "store",
        "reset" => "reset",
        "schema" if kind == "schema_error" => "schema",
        "metadata" => "metadata",
        _ => "sync",
    }
}

fn samples() -> Vec<Event> {
    let p = || "bikehire".to_owned();
    let (message, retryable) = failed();
    let report = SyncReport {
        rows: 1200,
        total_rows: 1200,
        namespaces_synced: 2,
        elapsed_ms: 3512,
        batches: 3,
        bytes: 481_113,
        deadletters: 1,
        delivered: 3,
        pending: 0,
        files_failed: 0,
        seconds: 3.512,
        stopped: false,
        stopped_for_deadline: false,
        aws_requests: BTreeMap::from([("s3".to_owned(), 14)]),
        source_requests: 0,
        source_retries: 0,
        namespaces: Default::default(),
    };
    vec![
        Event::DiscoverStart {
            pipeline: p(),
            source: "sample".to_owned(),
            files: Some(4),
            bytes_total: Some(481_113),
        },
        Event::DiscoverProgress {
            pipeline: p(),
            records: 600,
            deadletters: 0,
            bytes: 240_000,
            bytes_total: Some(481_113),
            files_done: 2,
        },
        Event::NamespaceDiscovered {
            pipeline: p(),
            namespace: "ride".to_owned(),
            records: 900,
            fields: vec!["id: long".to_owned(), "price: double".to_owned()],
        },
        Event::DiscoverComplete {
            pipeline: p(),
            namespaces: 2,
            records: 1201,
            deadletters: 1,
            bytes: 481_113,
            seconds: 0.842,
            schema_path: "data/bikehire/schema.json".into(),
            namespaces_discovered: 2,
            total_fields: 9,
            elapsed_ms: 842,
        },
        Event::DiscoverError {
            pipeline: Some(p()),
            message: message.clone(),
            retryable,
        },
        Event::SyncStart {
            pipeline: p(),
            source: "sample".to_owned(),
            committed_batches: 0,
            recovered_truncated_bytes: 0,
        },
        Event::SyncStatus {
            pipeline: p(),
            rows: 800,
            batches: 2,
            bytes: 320_000,
            bytes_total: Some(481_113),
            deadletters: 1,
        },
        Event::SchemaEvolved {
            pipeline: p(),
            version: 2,
            changes: vec!["ride: added field tip (double)".to_owned()],
        },
        Event::SyncComplete {
            pipeline: p(),
            report,
        },
        Event::SyncError {
            pipeline: Some(p()),
            message: message.clone(),
            retryable,
        },
        Event::MaintainComplete {
            pipeline: p(),
            tables: 2,
            snapshots_expired: 5,
            files_compacted_from: 12,
            files_compacted_to: 1,
            files_deleted: 30,
            bytes_freed: 1_048_576,
            seconds: 1.25,
        },
        Event::MaintainError {
            pipeline: Some(p()),
            message: message.clone(),
            retryable,
        },
        Event::QueryError {
            message: message.clone(),
            retryable,
        },
        Event::StoreReady {
            table: "skippr-state".to_owned(),
            region: "eu-west-1".to_owned(),
            created: true,
        },
        Event::StoreError {
            message: message.clone(),
            retryable,
        },
        Event::LeaseWaiting {
            pipeline: p(),
            holder: "host/4242/9f3a".to_owned(),
            expires_in_ms: Some(12_000),
            wait_ms: 60_000,
        },
        Event::Reset {
            pipeline: p(),
            report: ResetReport {
                applied: true,
                position_batch: Some(7),
                acked: Some(7),
                deadletters_acked: None,
                wal_batches: 0,
                wal_next: 8,
                landed: 7,
                floor: 7,
            },
        },
        Event::ResetError {
            pipeline: Some(p()),
            message: message.clone(),
            retryable,
        },
        Event::SchemaError {
            pipeline: Some(p()),
            message,
            retryable,
        },
        Event::MetadataApplied {
            pipeline: p(),
            changed: true,
            version: Some(3),
            namespaces: 2,
            schema_path: "data/default_bikehire/schema.json".into(),
        },
    ]
}

fn markdown() -> String {
    let mut out = String::from(
        "# JSON events (`--output json`)\n\n\
         <!-- Generated from one sample of each event by shared/src/pipeline/events/tests.rs: \
         `SKIPPR_BLESS=1 cargo test -p skipprd-shared pipeline::events` to regenerate. -->\n\n\
         With `--output json` every command prints one JSON object per line on standard output; \
         the daily log file (`logs/skipprd.<date>.log`) keeps the same lines whatever `--output` \
         is. Each line starts with `event` (its kind), then the fields of its run: `timestamp` \
         (RFC 3339, UTC, milliseconds), `run_id` (one per run of a command: a CLI process, a \
         Lambda invocation) and `phase` (the command: `discover`, `sync`, `schema`, `query`, \
         `maintain`, `reset`, `replay`, `store`, `doctor`, `metadata`), then the event's own fields. Field \
         names are stable; new fields may be added, so read them by name and ignore the rest. \
         `sync_status` comes at most every 10 s during a pass (twice a second for the progress \
         display). `doctor --output json` prints one `doctor_complete` line, described at the \
         end. `sync_complete` leaves out `aws_requests` without AWS backends, and has \
         `source_requests` and `source_retries` (the HttpClient source's requests for the pages \
         that gave records, and how many of them were retries) only when they are not 0.\n\nThe \
         values below are samples.\n",
    );
    for event in samples() {
        let sample = RunStamp {
            phase: phase_of(name(&event)),
            ..stamp()
        };
        let value = sample.stamp_at(serde_json::to_value(&event).unwrap_or_default(), at());
        let keys: Vec<String> = value
            .as_object()
            .map(|o| o.keys().map(|k| format!("`{k}`")).collect())
            .unwrap_or_default();
        out.push_str(&format!(
            "\n## `{}`\n\nFields: {}.\n\n```json\n{}\n```\n",
            name(&event),
            keys.join(", "),
            value
        ));
    }
    let doctor = crate::doctor::report_json(
        &[
            crate::doctor::Check::ok("config", "skippr.yml (1 pipeline(s))"),
            crate::doctor::Check::fail(
                "bikehire: source",
                "no file matches data/*.json",
                "check the path, or put files there",
            ),
        ],
        false,
    );
    let doctor = RunStamp {
        phase: "doctor",
        ..stamp()
    }
    .stamp_at(doctor, at());
    out.push_str(&format!(
        "\n## `doctor_complete`\n\n`ok` is false when any check failed. Each check has the real \
         product's fields (`ok`: false only for a failed check; `severity`: `info`, `warning` or \
         `error`; `message`; `suggested_fix_command`, null when there is nothing to do) and ours \
         (`name`, `status`: `ok`, `warn` or `fail`; `detail`; `fix`).\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(&doctor).unwrap_or_default()
    ));
    out
}

#[test]
fn docs_events_md_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/events.md");
    let generated = markdown();
    if std::env::var_os("SKIPPR_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/events.md is stale: run `SKIPPR_BLESS=1 cargo test -p skipprd-shared pipeline::events`"
    );
}

#[test]
fn every_event_line_starts_with_its_kind_and_the_run_fields() {
    for event in samples() {
        let line = stamp().json_line(&event).unwrap();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .take(4)
            .collect();
        assert_eq!(keys, ["event", "timestamp", "run_id", "phase"], "{line}");
        assert_eq!(value["event"], name(&event), "{line}");
        assert_eq!(value["phase"], "sync");
        let timestamp = value["timestamp"].as_str().unwrap();
        assert!(
            DateTime::parse_from_rfc3339(timestamp).is_ok(),
            "{timestamp}"
        );
    }
}

#[test]
fn the_real_products_summary_fields_are_there() {
    let events = samples();
    let complete = |kind: &str| {
        let event = events.iter().find(|e| name(e) == kind).unwrap();
        stamp().stamp_at(serde_json::to_value(event).unwrap(), at())
    };
    let sync = complete("sync_complete");
    assert_eq!(sync["namespaces_synced"], 2);
    assert_eq!(sync["total_rows"], 1200);
    assert_eq!(sync["elapsed_ms"], 3512);
    assert_eq!(sync["rows"], 1200, "today's fields stay");
    let discover = complete("discover_complete");
    assert_eq!(discover["namespaces_discovered"], 2);
    assert_eq!(discover["total_fields"], 9);
    assert_eq!(discover["elapsed_ms"], 842);
    assert_eq!(sync["timestamp"], "2026-12-01T23:59:58.123Z");
}

#[test]
fn a_field_of_the_events_own_is_never_overwritten_by_the_stamp() {
    let value = serde_json::json!({"event": "x", "phase": "own", "a": 1});
    let stamped = stamp().stamp_at(value, at());
    assert_eq!(stamped["phase"], "own");
    assert_eq!(stamped["run_id"], stamp().run_id.as_str());
    let keys: Vec<&String> = stamped.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["event", "timestamp", "run_id", "phase", "a"]);
}
