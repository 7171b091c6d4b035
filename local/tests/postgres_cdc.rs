//! The `Postgres` source's change stream (`cdc_mode: snapshot_then_cdc | cdc_only`) end to end
//! against the real PostgreSQL server `tests/run` starts (`wal_level=logical`):
//!
//! - a snapshot, then inserts, updates, deletes, a key change, a truncate, a column added
//!   upstream and a transaction of 50,000 rows: each change lands once, in commit order, with
//!   `_op`, `_lsn`, `_commit_lsn` and `_commit_ts`; a pass with nothing new adds nothing; the
//!   lake read by DuckDB and PyIceberg;
//! - every mapped type decodes from the stream's text exactly as the snapshot decodes it;
//! - kill -9 at random moments (30 kills) while transactions of 1-6 changes keep coming:
//!   after each kill the slot has confirmed no change that is not in the WAL, and at the end
//!   the change log holds every change exactly once, in commit order;
//! - what CDC needs and lacks (a table without a key, a slot that is gone) fails naming the
//!   table or slot and the fix.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

#[path = "common/bin.rs"]
mod bin;
mod common;
#[path = "common/local_aws.rs"]
mod local_aws;
#[path = "common/pg.rs"]
mod pg;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use bin::skipprd_command;
use local_aws::reader_python;
use pg::{Pg, TYPES_SQL, pg};

/// A project whose pipeline `pg` reads `source` (the lines under `Postgres:`), into a lake
/// when `lake`, else into its WAL only.
fn write_config(dir: &Path, source: &str, lake: bool) {
    let source: String = source.lines().map(|l| format!("      {l}\n")).collect();
    // The lake keeps the change log (`append`); with no policy a change stream merges.
    let sink = if lake {
        "    data_sink: data_sinks.lake\n    write_policy: append\n"
    } else {
        ""
    };
    let sinks = if lake {
        "data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      table_namespace: shop\n"
    } else {
        ""
    };
    let text = format!(
        "pipelines:\n  pg:\n    data_source: data_sources.pg\n{sink}data_sources:\n  pg:\n    Postgres:\n{source}{sinks}"
    );
    std::fs::write(dir.join("skippr.yml"), text).unwrap();
}

fn keys(pg: &Pg, db: &str) -> String {
    format!(
        "host: {}\nport: {}\nuser: {}\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\ncdc_idle_timeout_seconds: 1\n",
        pg.host, pg.port, pg.user
    )
}

fn sync_command(dir: &Path, password: &str) -> Command {
    let mut cmd = skipprd_command(dir);
    cmd.args(["sync", "--once", "--output", "json"])
        .env("PG_PASSWORD", password)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn sync(dir: &Path, password: &str) -> Output {
    sync_command(dir, password).output().unwrap()
}

/// A pass that must succeed; returns its `sync_complete` rows.
fn sync_ok(dir: &Path, password: &str, what: &str) -> u64 {
    let out = sync(dir, password);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: sync failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr),
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "sync_complete")
        .and_then(|e| e["rows"].as_u64())
        .unwrap_or_else(|| panic!("{what}: no sync_complete event: {stdout}"))
}

/// Both readers' rows of a lake table, ordered by `key`.
fn lake_rows(dir: &Path, table: &str, key: &str) -> Value {
    let table_dir = dir.join("lake/shop").join(table);
    let out = Command::new(reader_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_table.py"))
        .args(["--key", key, "--values"])
        .arg(&table_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_table.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["tables"][table_dir.to_str().unwrap()].clone()
}

/// `skipprd query --plain -s SQL`: the rows, as objects by column name.
fn query(dir: &Path, password: &str, sql: &str) -> Vec<Value> {
    let out = skipprd_command(dir)
        .args(["query", "--plain", "-s", sql])
        .env("PG_PASSWORD", password)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "query failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    let header: Vec<String> = serde_json::from_value(value["header"].clone()).unwrap();
    let rows: Vec<Vec<Value>> = serde_json::from_value(value["rows"].clone()).unwrap();
    rows.into_iter()
        .map(|row| Value::Object(header.iter().cloned().zip(row).collect()))
        .collect()
}

/// The count `sql` gives over the WAL: 0 while no batch is committed (the table is not
/// there yet).
fn wal_changes(dir: &Path, password: &str, sql: &str) -> usize {
    let out = skipprd_command(dir)
        .args(["query", "--plain", "-s", sql])
        .env("PG_PASSWORD", password)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("no committed batches") {
        return 0;
    }
    assert!(out.status.success(), "query failed: {stderr}");
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    value["rows"][0][0].as_u64().unwrap_or(0) as usize
}

/// A record without the change columns.
fn data(row: &Value) -> Value {
    let mut row = row.as_object().unwrap().clone();
    for meta in ["_op", "_lsn", "_commit_lsn", "_commit_ts"] {
        row.remove(meta);
    }
    Value::Object(row)
}

/// The slot's confirmed position, as a number.
fn confirmed(pg: &Pg, db: &str, slot: &str) -> u64 {
    let text = pg.sql(
        db,
        &format!(
            "SELECT (confirmed_flush_lsn - '0/0')::int8 FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ),
    );
    text.parse()
        .unwrap_or_else(|_| panic!("slot {slot}: {text:?}"))
}

/// A slot name of this test process (slots are the server's, shared by every database).
fn slot(stem: &str) -> String {
    format!("{stem}_{}", std::process::id())
}

/// Drop the test's slot so the server keeps no WAL for it.
fn drop_slot(pg: &Pg, db: &str, slot: &str) {
    pg.sql(
        db,
        &format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ),
    );
}

#[test]
fn a_snapshot_then_every_change_lands_once_in_commit_order() {
    let pg = pg();
    let db = pg.database("cdc");
    let main_slot = slot("main");
    pg.sql(
        &db,
        "CREATE TABLE ev (id int8 PRIMARY KEY, v text, n int4);
         INSERT INTO ev VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3);
         CREATE TABLE other (id int PRIMARY KEY);",
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}cdc_mode: snapshot_then_cdc\nreplication_slot_name: {}\nbatch_size_rows: 4000\ntables: [ev]\n",
            keys(&pg, &db),
            main_slot
        ),
        true,
    );
    assert_eq!(sync_ok(dir.path(), &pg.password, "snapshot"), 3);
    // Made by the first pass: the publication (for `ev` only) and the slot.
    assert_eq!(
        pg.sql(
            &db,
            "SELECT string_agg(tablename, ',') FROM pg_publication_tables WHERE pubname = 'skipprd_pg'"
        ),
        "ev"
    );
    let report = lake_rows(dir.path(), "postgres_ev", "id");
    assert_eq!(
        report["duckdb"]["values"],
        json!([
            {"id": 1, "v": "a", "n": 1, "_op": "r", "_lsn": 0, "_commit_lsn": 0, "_commit_ts": null},
            {"id": 2, "v": "b", "n": 2, "_op": "r", "_lsn": 0, "_commit_lsn": 0, "_commit_ts": null},
            {"id": 3, "v": "c", "n": 3, "_op": "r", "_lsn": 0, "_commit_lsn": 0, "_commit_ts": null},
        ])
    );

    // Changes of every kind, one transaction of 50,000 rows, a table outside the source.
    pg.sql(&db, "INSERT INTO ev VALUES (4, 'd', 4)");
    pg.sql(&db, "UPDATE ev SET v = 'a2' WHERE id = 1");
    pg.sql(&db, "DELETE FROM ev WHERE id = 2");
    pg.sql(&db, "UPDATE ev SET id = 30 WHERE id = 3");
    pg.sql(&db, "INSERT INTO other VALUES (1)");
    pg.sql(
        &db,
        "BEGIN; INSERT INTO ev SELECT g, 'bulk', g FROM generate_series(1000, 50999) g; COMMIT;",
    );
    pg.sql(
        &db,
        "ALTER TABLE ev ADD COLUMN extra text; INSERT INTO ev VALUES (5, 'e', 5, 'new column')",
    );
    let rows = sync_ok(dir.path(), &pg.password, "changes");
    assert_eq!(rows, 1 + 1 + 1 + 2 + 50_000 + 1);
    let report = lake_rows(dir.path(), "postgres_ev", "_lsn");
    for reader in ["duckdb", "pyiceberg"] {
        let values = report[reader]["values"].as_array().unwrap();
        assert_eq!(values.len(), 3 + 50_006, "{reader}");
        let changes: Vec<&Value> = values.iter().filter(|r| r["_op"] != "r").collect();
        // Commit order: by (_commit_lsn, _lsn); each change once.
        let order: Vec<(u64, u64)> = changes
            .iter()
            .map(|r| {
                (
                    r["_commit_lsn"].as_u64().unwrap(),
                    r["_lsn"].as_u64().unwrap(),
                )
            })
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            order.len() - 1,
            "{reader}: only the key change's pair shares an LSN"
        );
        let summary: Vec<Value> = changes
            .iter()
            .take(5)
            .map(|r| json!([r["_op"], r["id"], r["v"]]))
            .collect();
        assert_eq!(
            summary,
            vec![
                json!(["c", 4, "d"]),
                json!(["u", 1, "a2"]),
                json!(["d", 2, null]),
                json!(["d", 3, null]),
                json!(["u", 30, "c"]),
            ],
            "{reader}"
        );
        let bulk: Vec<i64> = changes[5..50_005]
            .iter()
            .map(|r| {
                assert_eq!(r["_op"], "c");
                r["id"].as_i64().unwrap()
            })
            .collect();
        assert_eq!(bulk, (1000..51_000).collect::<Vec<i64>>(), "{reader}");
        // One commit time and one commit LSN for the whole transaction.
        assert_eq!(changes[5]["_commit_lsn"], changes[50_004]["_commit_lsn"]);
        // A timestamp (the readers' microseconds since 1970), of a commit moments ago.
        let commit_ts = changes[5]["_commit_ts"].as_i64().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        assert!(
            (now - 3_600_000_000..=now).contains(&commit_ts),
            "{commit_ts} vs now {now}"
        );
        let last = changes.last().unwrap();
        assert_eq!(
            data(last),
            json!({"id": 5, "v": "e", "n": 5, "extra": "new column"}),
            "{reader}: the added column evolved the table"
        );
    }
    // Nothing new: nothing lands, and the slot has moved to what the lake holds.
    assert_eq!(sync_ok(dir.path(), &pg.password, "idle"), 0);
    let newest = pg.sql(&db, "SELECT (pg_current_wal_flush_lsn() - '0/0')::int8");
    let slot = confirmed(&pg, &db, &main_slot);
    let report = lake_rows(dir.path(), "postgres_ev", "_lsn");
    let top = report["duckdb"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["_commit_lsn"].as_u64())
        .max()
        .unwrap();
    assert!(
        slot > top,
        "the slot ({slot}) confirmed past the last change ({top})"
    );
    assert!(slot <= newest.parse::<u64>().unwrap());

    // A truncate is a change too.
    pg.sql(&db, "TRUNCATE ev");
    assert_eq!(sync_ok(dir.path(), &pg.password, "truncate"), 1);
    let report = lake_rows(dir.path(), "postgres_ev", "_lsn");
    let values = report["pyiceberg"]["values"].as_array().unwrap();
    assert_eq!(values.last().unwrap()["_op"], "t");
    assert_eq!(values.last().unwrap()["id"], Value::Null);
    drop_slot(&pg, &db, &main_slot);
}

#[test]
fn every_mapped_type_decodes_from_the_stream_as_the_snapshot_decodes_it() {
    let pg = pg();
    let db = pg.database("cdctypes");
    let types_slot = slot("types");
    pg.sql(&db, TYPES_SQL);
    // Values the text form spells in ways of its own.
    pg.script(
        &db,
        r#"INSERT INTO times VALUES (4, '0044-03-15 BC', 'infinity', '-infinity', '24:00:00'),
             (5, '2400-01-01', '1900-02-03 04:05:06.000001', '2001-02-03 04:05:06.789+05:30', '00:00:00.000001');
           INSERT INTO nums VALUES (4, -0.0, '-0.000', 'NaN', '-Infinity');
           INSERT INTO lists VALUES (4, '[0:1]={7,8}', '{"with \\ backslash","quote \" and comma ,",NULL,"NULL"}', '{}', NULL);
           INSERT INTO texts VALUES (4, E'tab\there', 'x', 'y', 'ok', gen_random_uuid());
"#,
    );
    let tables = ["ints", "nums", "texts", "times", "docs", "lists"];
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}cdc_mode: snapshot_then_cdc\nreplication_slot_name: {}\n",
            keys(&pg, &db),
            types_slot
        ),
        true,
    );
    // `discover` samples the tables with their declared types, and no change columns (it
    // never streams, so `sync` adds them: as a `cdc_only` pass, `_commit_ts` a timestamp).
    let out = skipprd_command(dir.path())
        .arg("discover")
        .env("PG_PASSWORD", &pg.password)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shown.contains("namespace postgres_times"), "{shown}");
    assert!(shown.contains("  c: long\n"), "{shown}");
    assert!(!shown.contains("_op"), "{shown}");
    sync_ok(dir.path(), &pg.password, "snapshot");
    // The same rows again, keyed 100 higher, through the stream.
    for table in tables {
        pg.sql(
            &db,
            &format!(
                "CREATE TEMP TABLE copy AS SELECT * FROM {table}; UPDATE copy SET id = id + 100; \
                 INSERT INTO {table} SELECT * FROM copy"
            ),
        );
    }
    sync_ok(dir.path(), &pg.password, "changes");
    for table in tables {
        let report = lake_rows(dir.path(), &format!("postgres_{table}"), "id");
        for reader in ["duckdb", "pyiceberg"] {
            let values = report[reader]["values"].as_array().unwrap();
            let (snapshot, stream): (Vec<&Value>, Vec<&Value>) =
                values.iter().partition(|r| r["id"].as_i64().unwrap() < 100);
            assert!(snapshot.len() >= 3, "{reader} {table}: {values:?}");
            assert_eq!(snapshot.len(), stream.len(), "{reader} {table}: {values:?}");
            for (before, after) in snapshot.iter().zip(&stream) {
                assert_eq!(before["_op"], "r");
                assert_eq!(after["_op"], "c");
                let mut shifted = data(after);
                let id = shifted["id"].as_i64().unwrap() - 100;
                shifted["id"] = json!(id);
                assert_eq!(data(before), shifted, "{reader} {table}");
            }
        }
    }
    drop_slot(&pg, &db, &types_slot);
}

/// One change the writer made: `(op, id, v)`.
type Change = (String, i64, Option<i64>);

/// What the writer of the kill loop did, in commit order.
#[derive(Default)]
struct Model {
    next_id: i64,
    seq: i64,
    live: Vec<i64>,
    /// `(op, id, v)` of each change, in commit order.
    changes: Vec<Change>,
    /// Per transaction: the WAL insert position after its commit, and the changes up to it.
    commits: Vec<(u64, usize)>,
}

impl Model {
    /// A script of `txns` transactions of 1-6 changes each, and the changes it makes.
    fn script(
        &mut self,
        txns: usize,
        random: &mut impl FnMut(u64) -> u64,
    ) -> (String, Vec<Vec<Change>>) {
        let mut script = String::new();
        let mut planned = Vec::new();
        for _ in 0..txns {
            script.push_str("BEGIN;\n");
            let mut txn = Vec::new();
            for _ in 0..1 + random(6) {
                self.seq += 1;
                let pick = random(10);
                if self.live.is_empty() || pick < 5 {
                    self.next_id += 1;
                    let id = self.next_id;
                    self.live.push(id);
                    script.push_str(&format!("INSERT INTO ev VALUES ({id}, {});\n", self.seq));
                    txn.push(("c".to_owned(), id, Some(self.seq)));
                } else if pick < 8 {
                    let id = self.live[random(self.live.len() as u64) as usize];
                    script.push_str(&format!(
                        "UPDATE ev SET v = {} WHERE id = {id};\n",
                        self.seq
                    ));
                    txn.push(("u".to_owned(), id, Some(self.seq)));
                } else {
                    let id = self
                        .live
                        .swap_remove(random(self.live.len() as u64) as usize);
                    script.push_str(&format!("DELETE FROM ev WHERE id = {id};\n"));
                    txn.push(("d".to_owned(), id, None));
                }
            }
            script.push_str("COMMIT;\nSELECT (pg_current_wal_insert_lsn() - '0/0')::int8;\n");
            planned.push(txn);
        }
        (script, planned)
    }
}

#[test]
fn kill_9_while_changes_stream_keeps_every_change_once_and_the_slot_behind_the_wal() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let pg = pg();
    let db = pg.database("cdckill");
    let kill_slot = slot("kill");
    pg.sql(&db, "CREATE TABLE ev (id int8 PRIMARY KEY, v int8)");
    let dir = tempfile::tempdir().unwrap();
    // The WAL alone (no destination): `query` reads what each pass committed.
    write_config(
        dir.path(),
        &format!(
            "{}cdc_mode: cdc_only\nreplication_slot_name: {}\nbatch_size_rows: 5\ntables: [ev]\n",
            keys(&pg, &db),
            kill_slot
        ),
        false,
    );
    // The first pass makes the slot; changes after it are the stream.
    assert_eq!(sync_ok(dir.path(), &pg.password, "first pass"), 0);
    let model = std::sync::Arc::new(std::sync::Mutex::new(Model::default()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (model, stop, db) = (model.clone(), stop.clone(), db.clone());
        let pg = pg::pg();
        std::thread::spawn(move || {
            let mut rng = common::Rng(0x2545_f491_4f6c_dd1d);
            let mut random = move |below: u64| rng.below(below.max(1));
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (script, planned) = model.lock().unwrap().script(8, &mut random);
                let positions = pg.script(&db, &script);
                assert_eq!(positions.len(), planned.len(), "{positions:?}");
                let mut m = model.lock().unwrap();
                for (txn, position) in planned.into_iter().zip(positions) {
                    m.changes.extend(txn);
                    let at = position.trim().parse().unwrap();
                    let len = m.changes.len();
                    m.commits.push((at, len));
                }
                drop(m);
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let count = "SELECT count(*) AS n FROM pg.postgres_ev";
    let (mut killed, mut finished, mut checked) = (0u64, 0u64, 0usize);
    while killed < kills && finished < kills * 3 {
        let mut child = sync_command(dir.path(), &pg.password)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100 + random(1400)));
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                assert!(status.success(), "sync failed: {stderr}");
                finished += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
            }
        }
        // The slot never confirms a change the WAL does not hold: every transaction whose
        // commit the slot has confirmed is in the WAL.
        let slot = confirmed(&pg, &db, &kill_slot);
        let needed = model
            .lock()
            .unwrap()
            .commits
            .iter()
            .filter(|(at, _)| *at <= slot)
            .map(|(_, len)| *len)
            .max()
            .unwrap_or(0);
        let in_wal = wal_changes(dir.path(), &pg.password, count);
        assert!(
            in_wal >= needed,
            "the slot confirmed {needed} changes but the WAL holds {in_wal}"
        );
        checked = checked.max(needed);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    sync_ok(dir.path(), &pg.password, "final pass");
    assert_eq!(sync_ok(dir.path(), &pg.password, "idle pass"), 0);
    let model = model.lock().unwrap();
    let rows = query(
        dir.path(),
        &pg.password,
        "SELECT _op, id, v FROM pg.postgres_ev ORDER BY _commit_lsn, _lsn",
    );
    let got: Vec<Change> = rows
        .iter()
        .map(|r| {
            (
                r["_op"].as_str().unwrap().to_owned(),
                r["id"].as_i64().unwrap(),
                r["v"].as_i64(),
            )
        })
        .collect();
    println!(
        "postgres cdc kill loop: {killed} kills, {finished} passes finished, {} changes, the slot checked up to {checked}",
        model.changes.len()
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert!(
        checked > 0,
        "the slot never confirmed a change: the check proved nothing"
    );
    assert_eq!(got.len(), model.changes.len(), "changes lost or repeated");
    assert_eq!(got, model.changes);
    drop_slot(&pg, &db, &kill_slot);
}

/// Regression: SIGTERM while the change stream is quiet waited for it to stay quiet for
/// `cdc_idle_timeout_seconds` (here 600) before the pass ended. The stream now ends its pass
/// after the round in hand; what was read lands once, and the next pass reads on from there.
#[test]
fn sigterm_while_the_change_stream_is_quiet_ends_the_pass_and_loses_nothing() {
    let pg = pg();
    let db = pg.database("cdcterm");
    let term_slot = slot("term");
    pg.sql(&db, "CREATE TABLE ev (id int8 PRIMARY KEY)");
    let dir = tempfile::tempdir().unwrap();
    let config = |idle: u64| {
        format!(
            "host: {}\nport: {}\nuser: {}\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\ncdc_idle_timeout_seconds: {idle}\ncdc_mode: cdc_only\nreplication_slot_name: {term_slot}\ntables: [ev]\n",
            pg.host, pg.port, pg.user
        )
    };
    write_config(dir.path(), &config(1), false);
    assert_eq!(sync_ok(dir.path(), &pg.password, "first pass"), 0);
    write_config(dir.path(), &config(600), false);
    let mut child = sync_command(dir.path(), &pg.password).spawn().unwrap();
    // Changes while the pass runs, then quiet.
    for batch in 0..5 {
        pg.sql(
            &db,
            &format!(
                "INSERT INTO ev SELECT g FROM generate_series({}, {}) g",
                batch * 100 + 1,
                batch * 100 + 100
            ),
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let inserted = 500u64;
    std::thread::sleep(Duration::from_millis(1500));
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    // A hang guard, not a timing: without the fix the pass waits out its 600 s.
    let mut status = None;
    for _ in 0..600 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(status) = status else {
        child.kill().unwrap();
        child.wait().unwrap();
        panic!("the pass did not end within 60 s of SIGTERM");
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{status}: {stdout}");
    let stopped_with = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "sync_complete")
        .and_then(|e| e["rows"].as_u64())
        .unwrap_or_else(|| panic!("no sync_complete event: {stdout}"));
    write_config(dir.path(), &config(1), false);
    let rest = sync_ok(dir.path(), &pg.password, "the pass after");
    assert!(
        stopped_with > 0,
        "the stopped pass committed what it had read"
    );
    assert_eq!(stopped_with + rest, inserted, "every change once");
    let rows = query(
        dir.path(),
        &pg.password,
        "SELECT count(*) AS n, count(DISTINCT id) AS d FROM pg.postgres_ev",
    );
    assert_eq!(rows, vec![json!({"n": inserted, "d": inserted})]);
    drop_slot(&pg, &db, &term_slot);
}

#[test]
fn what_cdc_lacks_fails_naming_the_table_or_slot_and_the_fix() {
    let pg = pg();
    let db = pg.database("cdcbad");
    let gone_slot = slot("gone");
    pg.sql(
        &db,
        "CREATE TABLE nokey (v text); CREATE TABLE ev (id int PRIMARY KEY)",
    );
    let dir = tempfile::tempdir().unwrap();
    // A table without a key would have its UPDATEs refused once published: not made.
    write_config(
        dir.path(),
        &format!("{}cdc_mode: cdc_only\ntables: [nokey]\n", keys(&pg, &db)),
        false,
    );
    let out = sync(dir.path(), &pg.password);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("public.nokey"), "{stderr}");
    assert!(stderr.contains("REPLICA IDENTITY FULL"), "{stderr}");
    assert!(!stderr.contains(&pg.password), "{stderr}");
    assert_eq!(
        pg.sql(&db, "SELECT count(*) FROM pg_publication"),
        "0",
        "no publication was made"
    );
    pg.sql(&db, "UPDATE nokey SET v = 'still writable'");
    // A slot dropped behind the pipeline's back: the changes since are gone; said so.
    write_config(
        dir.path(),
        &format!(
            "{}cdc_mode: cdc_only\nreplication_slot_name: {}\ntables: [ev]\n",
            keys(&pg, &db),
            gone_slot
        ),
        false,
    );
    sync_ok(dir.path(), &pg.password, "first pass");
    drop_slot(&pg, &db, &gone_slot);
    let out = sync(dir.path(), &pg.password);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("replication slot `{gone_slot}` is gone")),
        "{stderr}"
    );
    assert!(stderr.contains("RESET PIPELINE"), "{stderr}");
    let _ = std::io::stdout().flush();
}

/// A project streaming `source_db`'s tables by CDC into the Postgres database `dest_db`,
/// with no write policy declared.
fn write_merge_config(dir: &Path, pg: &Pg, source_db: &str, dest_db: &str, slot: &str) {
    let text = format!(
        "pipelines:\n  pg:\n    data_source: data_sources.pg\n    data_sink: data_sinks.dest\n\
         data_sources:\n  pg:\n    Postgres:\n      host: {h}\n      port: {p}\n      user: {u}\n      password: ${{PG_PASSWORD}}\n      database: {source_db}\n      cdc_idle_timeout_seconds: 1\n      cdc_mode: snapshot_then_cdc\n      replication_slot_name: {slot}\n      batch_size_rows: 7\n      tables: [ev, acct, log]\n\
         data_sinks:\n  dest:\n    Postgres:\n      host: {h}\n      port: {p}\n      user: {u}\n      password: ${{PG_PASSWORD}}\n      database: {dest_db}\n",
        h = pg.host,
        p = pg.port,
        u = pg.user,
    );
    std::fs::write(dir.join("skippr.yml"), text).unwrap();
}

/// 25 random inserts, updates (some changing `acct`'s key), deletes and log lines.
fn random_changes(random: &mut impl FnMut(u64) -> u64, next: &mut u64) -> String {
    let mut script = String::new();
    for _ in 0..25 {
        let id = 1 + random(*next + 5);
        script.push_str(&match random(7) {
            0 | 1 => {
                *next += 1;
                format!("INSERT INTO ev VALUES ({}, 'new');\n", *next)
            }
            2 => format!(
                "UPDATE ev SET v = 'u{id}-{}' WHERE id = {id};\n",
                random(1000)
            ),
            3 => format!("DELETE FROM ev WHERE id = {id};\n"),
            4 => format!(
                "UPDATE acct SET bal = bal + 1, region = region || '{}' WHERE code = '{}';\n",
                ["", "x"][random(2) as usize],
                ["a", "b"][random(2) as usize]
            ),
            5 => format!("INSERT INTO acct VALUES ('c{id}', 'eu', {id}) ON CONFLICT DO NOTHING;\n"),
            _ => format!("INSERT INTO log VALUES ('l{id}');\n"),
        });
    }
    script
}

/// The destination equals the source: the keyed tables row for row, the unkeyed one as a
/// change log of `changes` records.
fn assert_same(pg: &Pg, source: &str, dest: &str, log_changes: usize, what: &str) {
    for (table, columns) in [("ev", "id, v"), ("acct", "code, region, bal")] {
        let want = pg.sql(
            source,
            &format!("SELECT {columns} FROM {table} ORDER BY {columns}"),
        );
        let got = pg.sql(
            dest,
            &format!("SELECT {columns} FROM postgres_{table} ORDER BY {columns}"),
        );
        assert_eq!(got, want, "{what}: postgres_{table}");
    }
    let exists = pg.sql(dest, "SELECT to_regclass('postgres_log') IS NOT NULL");
    let got: usize = if exists == "t" {
        pg.sql(dest, "SELECT count(*) FROM postgres_log WHERE _op <> 'r'")
            .parse()
            .unwrap()
    } else {
        0
    };
    assert_eq!(got, log_changes, "{what}: postgres_log keeps every change");
}

#[test]
fn a_change_stream_into_postgres_merges_by_the_source_tables_keys_deletes_included() {
    let pg = pg();
    let source = pg.database("cdcmerge");
    let dest = pg.database("cdcmergedest");
    let merge_slot = slot("merge");
    pg.sql(
        &source,
        "CREATE TABLE ev (id int8 PRIMARY KEY, v text);
         CREATE TABLE acct (code text, region text, bal numeric(10,2), PRIMARY KEY (code, region));
         CREATE TABLE log (v text); ALTER TABLE log REPLICA IDENTITY FULL;
         INSERT INTO ev SELECT g, 'v' || g FROM generate_series(1, 40) g;
         INSERT INTO acct VALUES ('a', 'eu', 1), ('a', 'us', 2.05), ('b', 'eu', -3.5);",
    );
    let dir = tempfile::tempdir().unwrap();
    write_merge_config(dir.path(), &pg, &source, &dest, &merge_slot);
    sync_ok(dir.path(), &pg.password, "snapshot");
    assert_same(&pg, &source, &dest, 0, "after the snapshot");
    // `numeric(10,2)` lands as itself (a decimal all the way, sent as binary numeric).
    assert_eq!(
        pg.sql(
            &dest,
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'postgres_acct'::regclass AND attname = 'bal'"
        ),
        "numeric(10,2)"
    );
    let mut seed = 0x51_7cc1_b727_220au64;
    let mut random = |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below.max(1)
    };
    let mut next = 40;
    for pass in 0..4 {
        // One transaction of changes, then changes each in its own.
        let batch = random_changes(&mut random, &mut next);
        let single = random_changes(&mut random, &mut next);
        pg.script(&source, &format!("BEGIN;\n{batch}COMMIT;\n{single}"));
        sync_ok(dir.path(), &pg.password, "changes");
        let logged: usize = pg.sql(&source, "SELECT count(*) FROM log").parse().unwrap();
        assert_same(&pg, &source, &dest, logged, &format!("pass {pass}"));
    }
    // A truncate empties the merged table; what follows it in the same delivery stays.
    pg.script(
        &source,
        "INSERT INTO ev VALUES (9001, 'before');\nTRUNCATE ev;\nINSERT INTO ev VALUES (9002, 'after');\n",
    );
    sync_ok(dir.path(), &pg.password, "truncate");
    let logged: usize = pg.sql(&source, "SELECT count(*) FROM log").parse().unwrap();
    assert_same(&pg, &source, &dest, logged, "after the truncate");
    assert_eq!(pg.sql(&dest, "SELECT id FROM postgres_ev"), "9002");
    // kill -9 at random moments while changes keep coming: still equal afterwards.
    let mut killed = 0;
    for _ in 0..12 {
        let changes = random_changes(&mut random, &mut next);
        pg.script(&source, &changes);
        let mut child = sync_command(dir.path(), &pg.password)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100 + random(1200)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            killed += 1;
        }
        child.wait().unwrap();
    }
    assert!(killed >= 6, "only {killed} of 12 passes were killed");
    sync_ok(dir.path(), &pg.password, "after the kills");
    let logged: usize = pg.sql(&source, "SELECT count(*) FROM log").parse().unwrap();
    assert_same(&pg, &source, &dest, logged, "after the kill loop");
    drop_slot(&pg, &source, &merge_slot);
}

#[test]
fn a_change_stream_into_a_lake_merges_by_the_source_keys_when_no_policy_is_declared() {
    let pg = pg();
    let source = pg.database("cdclake");
    let lake_slot = slot("lake");
    pg.sql(
        &source,
        "CREATE TABLE ev (id int8 PRIMARY KEY, v text);
         CREATE TABLE acct (code text, region text, bal int4, PRIMARY KEY (code, region));
         CREATE TABLE log (v text); ALTER TABLE log REPLICA IDENTITY FULL;
         INSERT INTO ev SELECT g, 'v' || g FROM generate_series(1, 40) g;
         INSERT INTO acct VALUES ('a', 'eu', 1), ('b', 'eu', 3);",
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}cdc_mode: snapshot_then_cdc\nreplication_slot_name: {}\nbatch_size_rows: 9\ntables: [ev, acct, log]\n",
            keys(&pg, &source),
            lake_slot
        ),
        true,
    );
    let config = std::fs::read_to_string(dir.path().join("skippr.yml")).unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        config.replace("    write_policy: append\n", ""),
    )
    .unwrap();
    let mut seed = 0x77_1234_abcdu64;
    let mut random = |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below.max(1)
    };
    let mut next = 40;
    for pass in 0..3 {
        if pass > 0 {
            let changes = random_changes(&mut random, &mut next);
            pg.script(&source, &format!("BEGIN;\n{changes}COMMIT;\n"));
        }
        sync_ok(dir.path(), &pg.password, "pass");
        let want = pg.sql(&source, "SELECT id, v FROM ev ORDER BY id");
        let report = lake_rows(dir.path(), "postgres_ev", "id");
        for reader in ["duckdb", "pyiceberg"] {
            let got: Vec<String> = report[reader]["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| format!("{}|{}", r["id"], r["v"].as_str().unwrap_or("")))
                .collect();
            assert_eq!(got.join("\n"), want, "pass {pass}: {reader}");
        }
        // The unkeyed table keeps its change log.
        let logged: usize = pg.sql(&source, "SELECT count(*) FROM log").parse().unwrap();
        if logged > 0 {
            let report = lake_rows(dir.path(), "postgres_log", "_lsn");
            let rows = report["duckdb"]["values"].as_array().unwrap().len();
            assert_eq!(rows, logged, "pass {pass}: postgres_log");
        }
    }
    drop_slot(&pg, &source, &lake_slot);
}

#[test]
fn a_value_an_update_left_out_is_never_merged_as_null_and_partitioned_tables_stream_as_their_parent()
 {
    let pg = pg();
    let source = pg.database("cdctoast");
    let dest = pg.database("cdctoastdest");
    let toast_slot = slot("toast");
    pg.sql(
        &source,
        "CREATE TABLE ev (id int8 PRIMARY KEY, v text);
         CREATE TABLE acct (code text, region text, bal int4, PRIMARY KEY (code, region));
         CREATE TABLE log (id int8 PRIMARY KEY, v text, body text);
         ALTER TABLE log ALTER COLUMN body SET STORAGE EXTERNAL;
         INSERT INTO log VALUES (1, 'a', repeat('x', 20000)), (2, 'b', 'small');",
    );
    let dir = tempfile::tempdir().unwrap();
    write_merge_config(dir.path(), &pg, &source, &dest, &toast_slot);
    sync_ok(dir.path(), &pg.password, "snapshot");
    // An update that leaves the out-of-line value alone: PostgreSQL does not send it.
    pg.sql(&source, "UPDATE log SET v = 'a2' WHERE id = 1");
    let out = sync(dir.path(), &pg.password);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("_unchanged"), "{stderr}");
    assert!(stderr.contains("REPLICA IDENTITY FULL"), "{stderr}");
    assert_eq!(
        pg.sql(&dest, "SELECT length(body) FROM postgres_log WHERE id = 1"),
        "20000",
        "the value was not overwritten"
    );
    drop_slot(&pg, &source, &toast_slot);

    // Under REPLICA IDENTITY FULL the old row carries it: merged, kept.
    let source = pg.database("cdcfull");
    let dest = pg.database("cdcfulldest");
    pg.sql(
        &source,
        "CREATE TABLE ev (id int8 PRIMARY KEY, v text);
         CREATE TABLE acct (code text, region text, bal int4, PRIMARY KEY (code, region))
           PARTITION BY LIST (region);
         CREATE TABLE acct_eu PARTITION OF acct FOR VALUES IN ('eu');
         CREATE TABLE acct_us PARTITION OF acct FOR VALUES IN ('us');
         CREATE TABLE log (id int8 PRIMARY KEY, v text, body text);
         ALTER TABLE log ALTER COLUMN body SET STORAGE EXTERNAL;
         ALTER TABLE log REPLICA IDENTITY FULL;
         INSERT INTO log VALUES (1, 'a', repeat('x', 20000));",
    );
    let dir = tempfile::tempdir().unwrap();
    write_merge_config(dir.path(), &pg, &source, &dest, &toast_slot);
    sync_ok(dir.path(), &pg.password, "snapshot, full identity");
    pg.script(
        &source,
        "UPDATE log SET v = 'a2' WHERE id = 1;\n\
         INSERT INTO acct VALUES ('a', 'eu', 1), ('b', 'us', 2);\n\
         UPDATE acct SET bal = 5 WHERE code = 'b';\n",
    );
    sync_ok(dir.path(), &pg.password, "changes, full identity");
    assert_eq!(
        pg.sql(&dest, "SELECT v, length(body) FROM postgres_log"),
        "a2|20000"
    );
    // The partitions' changes come under the partitioned table's name.
    assert_eq!(
        pg.sql(
            &dest,
            "SELECT code, region, bal FROM postgres_acct ORDER BY code"
        ),
        "a|eu|1\nb|us|5"
    );
    drop_slot(&pg, &source, &toast_slot);
}
