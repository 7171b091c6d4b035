//! The `Postgres` source end to end against a real PostgreSQL server (the one `tests/run`
//! starts with `tests/postgres/pg.sh`, found through `SKIPPR_TEST_PG_*`): `skipprd sync` into
//! the `Duckdb` destination, the lake read back by DuckDB and PyIceberg
//! (`tests/readers/read_table.py`).
//!
//! - six tables covering every mapped type (and one unmapped, read as text), NULLs included,
//!   read without a `tables` list: every value exact in both readers;
//! - incremental: 10,000 rows sharing one `updated_at`, `batch_size_rows: 1000`, each lands
//!   once; rows inserted between passes land in the next pass, a column added upstream evolves
//!   the table; a `query` source; `discover` samples each table; `doctor` reports each check;
//! - kill -9 at random moments (30 kills) while rows keep arriving, and crashes injected at
//!   the commit steps: every row exactly once;
//! - connection refused, wrong password (also through `connection_string`), missing table:
//!   exit 1, a message naming host, database and table, and no secret, `--log trace` included.
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
#[path = "common/pg.rs"]
mod pg;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use bin::skipprd_command;
use local_aws::reader_python;
use pg::{Pg, TYPES_SQL, pg};

/// The test server, from the environment `tests/postgres/pg.sh` exports.
/// A project whose pipeline `pg` reads `source` (the lines under `Postgres:`) into a lake.
fn write_config(dir: &Path, source: &str) {
    let source: String = source.lines().map(|l| format!("      {l}\n")).collect();
    let text = format!(
        "\
pipelines:
  pg:
    data_source: data_sources.pg
    data_sink: data_sinks.lake
data_sources:
  pg:
    Postgres:
{source}data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
      table_namespace: shop
"
    );
    std::fs::write(dir.join("skippr.yml"), text).unwrap();
}

/// The connection keys for `db` on the test server (password from `${PG_PASSWORD}`).
fn keys(pg: &Pg, db: &str) -> String {
    format!(
        "host: {}\nport: {}\nuser: {}\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\n",
        pg.host, pg.port, pg.user
    )
}

fn sync_command(dir: &Path, password: &str, extra: &[&str]) -> Command {
    let mut cmd = skipprd_command(dir);
    cmd.args(extra)
        .args(["sync", "--once", "--output", "json"])
        .env("PG_PASSWORD", password)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn sync(dir: &Path, password: &str, extra: &[&str]) -> Output {
    sync_command(dir, password, extra).output().unwrap()
}

fn sync_ok(dir: &Path, password: &str, what: &str) -> Output {
    bin::succeeded(sync(dir, password, &[]), &format!("{what}: sync failed"))
}

/// Both readers' view of `table` (a table directory under the lake's `shop` namespace).
fn read(dir: &Path, table: &str, values: bool) -> Value {
    let table_dir = dir.join("lake/shop").join(table);
    let mut cmd = Command::new(reader_python());
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/readers/read_table.py"))
        .args(["--key", "id"]);
    if values {
        cmd.arg("--values");
    }
    let out = cmd.arg(&table_dir).output().unwrap();
    assert!(
        out.status.success(),
        "read_table.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["tables"][table_dir.to_str().unwrap()].clone()
}

/// Assert both readers see each id once, and return how many rows.
fn rows_once(dir: &Path, table: &str, expected: u64) {
    let report = read(dir, table, false);
    for reader in ["duckdb", "pyiceberg"] {
        let r = &report[reader];
        assert_eq!(r["duplicate_keys"], json!(0), "{reader} {table}: {r}");
        assert_eq!(r["rows"], json!(expected), "{reader} {table}");
        let keys = r["keys"].as_array().unwrap();
        assert_eq!(keys.len() as u64, expected, "{reader} {table}");
        assert_eq!(keys.first(), Some(&json!(1)), "{reader} {table}");
        assert_eq!(keys.last(), Some(&json!(expected)), "{reader} {table}");
    }
}

#[test]
fn a_snapshot_of_every_type_reads_back_exactly_in_duckdb_and_pyiceberg() {
    let pg = pg();
    let db = pg.database("types");
    pg.sql(&db, TYPES_SQL);
    // Integers that a JSON record's inference would read as Unix seconds.
    pg.sql(
        &db,
        "CREATE TABLE orders (id int4 PRIMARY KEY, order_number int8, small int8, deleted_at timestamptz);
         INSERT INTO orders VALUES (1, 1300000000, 1, NULL), (2, 1300000001, 2, NULL), (3, 4000000000, 3, NULL);",
    );
    let dir = tempfile::tempdir().unwrap();
    // No `tables`: every table of `public`.
    write_config(dir.path(), &keys(&pg, &db));
    let out = sync_ok(dir.path(), &pg.password, "snapshot");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("column `iv` of `public.lists` has type `interval`"),
        "the unmapped type is warned about: {stderr}"
    );
    let expected = json!({
        "postgres_ints": [
            {"id": 1, "a": -32768, "b": 2147483647, "c": 9007199254740993i64, "o": 4000000000u64, "flag": true},
            {"id": 2, "a": null, "b": null, "c": null, "o": null, "flag": null},
            {"id": 3, "a": 7, "b": -7, "c": i64::MIN, "o": 0, "flag": false},
        ],
        "postgres_nums": [
            // `n` numeric(12,3), a decimal (the readers' floats of it); `big` unconstrained,
            // exact text.
            {"id": 1, "n": -1234.5, "big": "123456789012345678901234567890123456789012.0001", "r": 1.5, "d": 0.1},
            {"id": 2, "n": null, "big": null, "r": null, "d": null},
            {"id": 3, "n": 0.001, "big": "NaN", "r": -2.25, "d": 1e300},
        ],
        "postgres_texts": [
            {"id": 1, "t": "héllo \"wörld\"", "v": "v", "c": "ab ", "m": "happy", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
            {"id": 2, "t": null, "v": null, "c": null, "m": null, "u": null},
            {"id": 3, "t": "", "v": "line\nbreak", "c": "xyz", "m": "sad", "u": "00000000-0000-0000-0000-000000000000"},
        ],
        "postgres_times": [
            // Timestamps as the readers' microseconds since 1970-01-01 UTC (`timestamp`
            // without a zone read as UTC): 2026-01-02T03:04:05.123456, 2026-01-02T01:04:05.5Z.
            {"id": 1, "d": "2026-01-02", "ts": 1_767_323_045_123_456i64, "tz": 1_767_315_845_500_000i64, "tm": "12:34:56.700000"},
            {"id": 2, "d": null, "ts": null, "tz": null, "tm": null},
            // 1970-01-01T00:00:00 and 2038-01-19T03:14:08Z (one second past 32-bit time).
            {"id": 3, "d": "1999-12-31", "ts": 0, "tz": 2_147_483_648_000_000i64, "tm": "00:00:00.000000"},
        ],
        "postgres_docs": [
            {"id": 1, "j": "{\"a\": [1, 2]}", "jb": "{\"b\": {\"c\": null}}", "bin": "\\x00ff10"},
            {"id": 2, "j": null, "jb": null, "bin": null},
            {"id": 3, "j": "[1,\"x\"]", "jb": "\"just a string\"", "bin": "\\x"},
        ],
        "postgres_lists": [
            {"id": 1, "ia": [1, null, 3], "ta": ["a", "b c"], "grid": [[1, 2], [3, 4]], "iv": "P1DT2H"},
            {"id": 2, "ia": null, "ta": null, "grid": null, "iv": null},
            {"id": 3, "ia": [], "ta": [""], "grid": [[5]], "iv": "PT-1S"},
        ],
    });
    for (table, rows) in expected.as_object().unwrap() {
        let report = read(dir.path(), table, true);
        for reader in ["duckdb", "pyiceberg"] {
            let got = &report[reader]["values"];
            assert_eq!(got, rows, "{reader} {table}: {}", report[reader]);
        }
    }
    // Typed columns: dates as dates, both timestamp types as UTC timestamps, integers as
    // integers (`c` holds values that would read as Unix times in a JSON record).
    let types = |table: &str| -> std::collections::BTreeMap<String, String> {
        serde_json::from_value::<Vec<(String, String)>>(
            read(dir.path(), table, false)["duckdb"]["columns"].clone(),
        )
        .unwrap()
        .into_iter()
        .collect()
    };
    let times = types("postgres_times");
    assert_eq!(times["d"], "DATE", "{times:?}");
    assert_eq!(times["ts"], "TIMESTAMP WITH TIME ZONE", "{times:?}");
    assert_eq!(times["tz"], "TIMESTAMP WITH TIME ZONE", "{times:?}");
    let nums = types("postgres_nums");
    assert_eq!(nums["n"], "DECIMAL(12,3)", "{nums:?}");
    assert_eq!(nums["big"], "VARCHAR", "{nums:?}");
    let ints = types("postgres_ints");
    assert_eq!(ints["b"], "INTEGER", "{ints:?}");
    assert_eq!(ints["o"], "BIGINT", "{ints:?}");
    // The declared type where the values leave it open: small `int8` values, only NULLs.
    let orders = types("postgres_orders");
    assert_eq!(orders["id"], "INTEGER", "{orders:?}");
    assert_eq!(orders["order_number"], "BIGINT", "{orders:?}");
    assert_eq!(orders["small"], "BIGINT", "{orders:?}");
    assert_eq!(
        orders["deleted_at"], "TIMESTAMP WITH TIME ZONE",
        "{orders:?}"
    );
}

#[test]
fn incremental_rows_sharing_one_cursor_value_land_once_and_new_rows_land_next_pass() {
    let pg = pg();
    let db = pg.database("incr");
    pg.sql(
        &db,
        "CREATE TABLE events (id int8 PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
         INSERT INTO events SELECT g, '2026-03-01 00:00:00+00', 'v' || g FROM generate_series(1, 10000) g;
         CREATE TABLE other (id int4 PRIMARY KEY, v text);
         INSERT INTO other SELECT g, 'o' || g FROM generate_series(1, 5) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}batch_size_rows: 1000\ntables:\n  - {{name: events, cursor_field: updated_at, primary_key: id}}\n  - other\n",
            keys(&pg, &db)
        ),
    );
    let first = sync_ok(dir.path(), &pg.password, "first pass");
    let summary = String::from_utf8_lossy(&first.stdout);
    assert!(summary.contains("\"rows\":10005"), "{summary}");
    rows_once(dir.path(), "postgres_events", 10_000);
    rows_once(dir.path(), "postgres_other", 5);
    // New rows: some with the same cursor value (ids above the last), some later.
    pg.sql(
        &db,
        "ALTER TABLE events ADD COLUMN extra int4;
         INSERT INTO events SELECT g, '2026-03-01 00:00:00+00', 'late', g FROM generate_series(10001, 10500) g;
         INSERT INTO events SELECT g, '2026-03-02 00:00:00+00', 'new', g FROM generate_series(10501, 11000) g;",
    );
    let second = sync_ok(dir.path(), &pg.password, "second pass");
    let summary = String::from_utf8_lossy(&second.stdout);
    // 1,000 new events, and the 5 rows of the table without a cursor, read whole again.
    assert!(summary.contains("\"rows\":1005"), "{summary}");
    rows_once(dir.path(), "postgres_events", 11_000);
    // The column added upstream evolved the table, in both readers.
    let report = read(dir.path(), "postgres_events", false);
    for reader in ["duckdb", "pyiceberg"] {
        let columns = report[reader]["columns"].to_string();
        assert!(columns.contains("\"extra\""), "{reader}: {columns}");
    }
    // A pass with nothing new reads no event.
    let third = sync_ok(dir.path(), &pg.password, "third pass");
    assert!(
        String::from_utf8_lossy(&third.stdout).contains("\"rows\":5"),
        "{}",
        String::from_utf8_lossy(&third.stdout)
    );
    rows_once(dir.path(), "postgres_events", 11_000);
}

/// Keyset pages over keys whose text the client writes itself (text with quotes, spaces and
/// non-ASCII letters, uuid, negative int2, a composite of both) and over one it asks the
/// server for (numeric): every row once across pages of 100 (each page starts after the
/// text of the last key of the page before: a wrong text skips or repeats rows).
#[test]
fn keyset_pages_over_text_uuid_negative_and_composite_keys_read_every_row_once() {
    let pg = pg();
    let db = pg.database("keys");
    let tables = [
        (
            "by_text",
            "k text PRIMARY KEY",
            // A quote and a backslash: the start key is an SQL literal.
            r"'k '' \ é ' || lpad(g::text, 5, '0')",
        ),
        ("by_uuid", "k uuid PRIMARY KEY", "md5(g::text)::uuid"),
        ("by_small", "k int2 PRIMARY KEY", "(g - 700)::int2"),
        ("by_numeric", "k numeric PRIMARY KEY", "g / 7.0"),
    ];
    let mut sql = String::new();
    for (name, column, value) in tables {
        sql.push_str(&format!(
            "CREATE TABLE {name} ({column}, id int4 NOT NULL);
             INSERT INTO {name} SELECT {value}, g FROM generate_series(1, 1050) g;\n"
        ));
    }
    sql.push_str(
        "CREATE TABLE by_pair (a int2, b text, id int4 NOT NULL, PRIMARY KEY (a, b));
         INSERT INTO by_pair SELECT (g % 3 - 1)::int2, 'b' || lpad(g::text, 5, '0'), g FROM generate_series(1, 1050) g;",
    );
    pg.sql(&db, &sql);
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}batch_size_rows: 100\ntables: [by_text, by_uuid, by_small, by_numeric, by_pair]\n",
            keys(&pg, &db)
        ),
    );
    sync_ok(dir.path(), &pg.password, "first pass");
    for table in ["by_text", "by_small", "by_numeric", "by_uuid", "by_pair"] {
        rows_once(dir.path(), &format!("postgres_{table}"), 1050);
    }
}

#[test]
fn a_custom_query_is_read_whole_into_postgres_query() {
    let pg = pg();
    let db = pg.database("query");
    pg.sql(
        &db,
        "CREATE TABLE t (id int4 PRIMARY KEY, v int4);
         INSERT INTO t SELECT g, g * 2 FROM generate_series(1, 2500) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}batch_size_rows: 1000\nquery: \"SELECT id, v, v::numeric / 4 AS q FROM t WHERE id <= 2400 ORDER BY id;\"\n",
            keys(&pg, &db)
        ),
    );
    sync_ok(dir.path(), &pg.password, "query");
    rows_once(dir.path(), "postgres_query", 2400);
}

/// Kill `skipprd sync` with SIGKILL at random moments while rows keep arriving: afterwards
/// every row is in the lake exactly once.
#[test]
fn kill_9_at_random_moments_keeps_every_row_exactly_once() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let pg = pg();
    let db = pg.database("kill");
    pg.sql(
        &db,
        "CREATE TABLE events (id int8 PRIMARY KEY, updated_at int8 NOT NULL, v text);
         INSERT INTO events SELECT g, g / 700, repeat('x', 50) FROM generate_series(1, 20000) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "{}batch_size_rows: 250\ntables:\n  - {{name: events, cursor_field: updated_at}}\n",
            keys(&pg, &db)
        ),
    );
    let mut next = 20_000u64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let (mut killed, mut finished, mut round, mut after_commit) = (0u64, 0u64, 0u64, 0u64);
    while killed < kills && round < kills * 4 {
        round += 1;
        // Every third round, more rows and a kill only once the pass has written a batch to
        // its WAL, so some kills surely land mid-pass after it wrote; the others at a random
        // moment.
        let after_status = round % 3 == 1;
        let new_rows = if after_status { 3000 } else { 300 };
        // New rows, with cursor values at and after the newest.
        pg.sql(
            &db,
            &format!(
                "INSERT INTO events SELECT g, g / 700, 'r{round}' FROM generate_series({}, {}) g",
                next + 1,
                next + new_rows
            ),
        );
        next += new_rows;
        let before = state_bytes(dir.path());
        let mut child = sync_command(dir.path(), &pg.password, &[])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let committed = if after_status {
            // Until the pass has written a batch to its WAL, or it ends.
            loop {
                if state_bytes(dir.path()) != before {
                    break true;
                }
                if child.try_wait().unwrap().is_some() {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        } else {
            false
        };
        std::thread::sleep(Duration::from_millis(if after_status {
            random(100)
        } else {
            20 + random(400)
        }));
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                assert!(status.success(), "round {round}: sync failed: {stderr}");
                finished += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
                after_commit += u64::from(committed);
            }
        }
    }
    let last = sync_ok(dir.path(), &pg.password, "final pass");
    let stdout = String::from_utf8_lossy(&last.stdout);
    let final_rows: u64 = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "sync_complete")
        .and_then(|e| e["rows"].as_u64())
        .unwrap_or_else(|| panic!("no sync_complete event: {stdout}"));
    println!(
        "postgres kill loop: {killed} kills ({after_commit} after the pass wrote to its WAL), {finished} passes finished, {final_rows} of {next} rows left for the final pass"
    );
    assert!(
        after_commit > 0,
        "no kill came after its pass wrote to its WAL: the kills proved little"
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    rows_once(dir.path(), "postgres_events", next);
}

/// A crash injected right before and right after the WAL commit of a batch (the position
/// commits with it): the next pass lands every row once.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_around_the_wal_commit_is_recovered_exactly_once() {
    let pg = pg();
    for (index, name) in [
        "sync.before_wal_commit",
        "sync.after_wal_commit",
        "sync.after_position",
    ]
    .into_iter()
    .enumerate()
    {
        let db = pg.database(&format!("crash{index}"));
        pg.sql(
            &db,
            "CREATE TABLE events (id int8 PRIMARY KEY, updated_at int8 NOT NULL);
             INSERT INTO events SELECT g, g / 100 FROM generate_series(1, 3000) g;",
        );
        let dir = tempfile::tempdir().unwrap();
        write_config(
            dir.path(),
            &format!(
                "{}batch_size_rows: 500\ntables:\n  - {{name: events, cursor_field: updated_at}}\n",
                keys(&pg, &db)
            ),
        );
        let crashed = sync_command(dir.path(), &pg.password, &[])
            .env("SKIPPR_FAILPOINT", name)
            .output()
            .unwrap();
        assert!(
            !crashed.status.success(),
            "{name}: the failpoint did not fire"
        );
        pg.sql(
            &db,
            "INSERT INTO events SELECT g, g / 100 FROM generate_series(3001, 3500) g",
        );
        sync_ok(dir.path(), &pg.password, name);
        rows_once(dir.path(), "postgres_events", 3500);
    }
}

/// The bytes of the pipeline's WAL files (`data/*/wal/`): they grow only when a pass writes
/// a batch to its WAL.
fn state_bytes(dir: &Path) -> u64 {
    fn walk(path: &Path, in_wal: bool) -> u64 {
        match std::fs::read_dir(path) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&e.path(), in_wal || e.file_name() == "wal"),
                    _ if in_wal => e.metadata().map_or(0, |m| m.len()),
                    _ => 0,
                })
                .sum(),
            Err(_) => 0,
        }
    }
    walk(&dir.join("data"), false)
}

/// Exit 1 with `what` in the message, and none of `secrets` in any output, `--log trace`
/// included.
fn fails_naming(dir: &Path, password: &str, what: &[&str], secrets: &[&str]) {
    for extra in [&[][..], &["--log", "trace"][..]] {
        let out = sync(dir, password, extra);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}\n{stdout}");
        for needle in what {
            assert!(
                stderr.contains(needle),
                "{extra:?}: `{needle}` not in: {stderr}"
            );
        }
        for secret in secrets {
            assert!(
                !stdout.contains(secret) && !stderr.contains(secret),
                "{extra:?}: a secret was printed: {stderr}\n{stdout}"
            );
        }
    }
}

#[test]
fn refused_connection_wrong_password_and_missing_table_exit_1_naming_them_without_secrets() {
    let pg = pg();
    let db = pg.database("errors");
    pg.sql(&db, "CREATE TABLE present (id int4 PRIMARY KEY)");
    let dir = tempfile::tempdir().unwrap();

    // Nothing listens on a port just freed.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    write_config(
        dir.path(),
        &format!(
            "host: 127.0.0.1\nport: {free}\nuser: postgres\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\n"
        ),
    );
    let secret = "s3cr3t-Pa55word-value";
    fails_naming(
        dir.path(),
        secret,
        &[
            &format!("PostgreSQL `127.0.0.1:{free}/{db}`"),
            "cannot connect",
            "refused",
        ],
        &[secret],
    );

    // The right server, a wrong password.
    write_config(dir.path(), &keys(&pg, &db));
    fails_naming(
        dir.path(),
        secret,
        &[
            &format!("PostgreSQL `{}:{}/{db}`", pg.host, pg.port),
            "password authentication failed",
        ],
        &[secret],
    );

    // The same through `connection_string`: neither it nor its password is shown.
    let url = format!(
        "postgresql://{}:{secret}@{}:{}/{db}",
        pg.user, pg.host, pg.port
    );
    write_config(dir.path(), "connection_string: ${PG_PASSWORD}\n");
    fails_naming(
        dir.path(),
        &url,
        &[
            &format!("PostgreSQL `{}:{}/{db}`", pg.host, pg.port),
            "password authentication failed",
        ],
        &[secret, &url],
    );

    // A missing table, named with its schema, and the database.
    write_config(
        dir.path(),
        &format!("{}tables: [present, absent]\n", keys(&pg, &db)),
    );
    fails_naming(
        dir.path(),
        &pg.password,
        &[
            &format!(
                "PostgreSQL `{}:{}/{db}`, table `public.absent`",
                pg.host, pg.port
            ),
            "no such table",
        ],
        &[&pg.password],
    );
}

#[test]
fn bad_keys_fail_validation_with_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (source, key) in [
        ("host: h\nuser: u\n", "data_sources.pg.Postgres.database"),
        (
            "database: d\nbatch_size_rows: 0\n",
            "data_sources.pg.Postgres.batch_size_rows",
        ),
        (
            "database: d\ntables: [a]\nquery: SELECT 1\n",
            "data_sources.pg.Postgres.query",
        ),
        (
            "database: d\ncdc_mode: cdc_only\nreplication_slot_name: Bad-Slot\n",
            "data_sources.pg.Postgres.replication_slot_name",
        ),
        (
            "database: d\ncdc_mode: snapshot_then_cdc\nquery: SELECT 1\n",
            "data_sources.pg.Postgres.query",
        ),
        (
            "database: d\ntables: [{name: a, cursor: x}]\n",
            "data_sources.pg.Postgres.tables[0].cursor",
        ),
        (
            "database: d\nsslmode: sometimes\n",
            "data_sources.pg.Postgres.sslmode",
        ),
        (
            "database: d\ntables: [a, a]\n",
            "data_sources.pg.Postgres.tables[1]",
        ),
        (
            "database: d\nsslmode: require\nsslrootcert: ca.pem\n",
            "data_sources.pg.Postgres.sslrootcert",
        ),
    ] {
        write_config(dir.path(), source);
        let out = skipprd_command(dir.path())
            .args(["doctor"])
            .output()
            .unwrap();
        let stderr = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(out.status.code(), Some(2), "{source}: {stderr}");
        assert!(stderr.contains(key), "{source}: `{key}` not in {stderr}");
    }
}

#[test]
fn discover_samples_each_table_and_doctor_reports_each_check_with_a_fix() {
    let pg = pg();
    let db = pg.database("doctor");
    let role = format!("reader_{}", std::process::id());
    let slot = format!("slot_{}", std::process::id());
    pg.sql(
        &db,
        &format!(
            "CREATE TABLE big (id int4 PRIMARY KEY, v text);
             INSERT INTO big SELECT g, 'v' FROM generate_series(1, 12500) g;
             CREATE TABLE small (id int4 PRIMARY KEY);
             INSERT INTO small VALUES (1), (2);
             CREATE TABLE hidden (id int4 PRIMARY KEY);
             CREATE TABLE nokey (id int4, updated_at int8);
             DROP ROLE IF EXISTS {role};
             CREATE ROLE {role} LOGIN PASSWORD 'reader-pw';
             GRANT SELECT ON big, small, nokey TO {role};
             CREATE PUBLICATION pub_doctor FOR TABLE big, small;"
        ),
    );
    // In a transaction of its own: a slot cannot be made after writes.
    pg.sql(
        &db,
        &format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"),
    );
    let dir = tempfile::tempdir().unwrap();

    // discover: at most 10,000 rows of each table.
    write_config(
        dir.path(),
        &format!("{}tables: [big, small]\n", keys(&pg, &db)),
    );
    let out = skipprd_command(dir.path())
        .args(["discover", "--output", "json"])
        .env("PG_PASSWORD", &pg.password)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("\"namespace\":\"postgres_big\",\"records\":10000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"namespace\":\"postgres_small\",\"records\":2"),
        "{stdout}"
    );

    // doctor as a user who may read two tables, in snapshot mode: no stream checks.
    write_config(
        dir.path(),
        &format!(
            "host: {}\nport: {}\nuser: {role}\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\n\
             tables: [big, hidden, absent, {{name: nokey, cursor_field: updated_at}}]\n",
            pg.host, pg.port
        ),
    );
    let out = skipprd_command(dir.path())
        .args(["doctor"])
        .env("PG_PASSWORD", "reader-pw")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    for line in [
        format!(
            "[ok]   pg: source connection: connected to `{}:{}/{db}` as `{role}`",
            pg.host, pg.port
        ),
        "[ok]   pg: source table public.big: readable, read whole each pass".to_owned(),
        "[FAIL] pg: source table public.hidden: the user may not SELECT from it".to_owned(),
        "fix: GRANT SELECT ON public.hidden TO <user>".to_owned(),
        "[FAIL] pg: source table public.absent: no such table".to_owned(),
        "[FAIL] pg: source table public.nokey: has no primary key".to_owned(),
        "[ok]   pg: source wal_level: logical".to_owned(),
    ] {
        assert!(report.contains(&line), "`{line}` not in:\n{report}");
    }
    assert!(!report.contains("replication slot"), "{report}");

    // The same user and tables streamed by CDC, with no replication attribute.
    write_config(
        dir.path(),
        &format!(
            "host: {}\nport: {}\nuser: {role}\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\n\
             cdc_mode: snapshot_then_cdc\nreplication_slot_name: {slot}\npublication_name: pub_doctor\n\
             tables: [big, small, nokey]\n",
            pg.host, pg.port
        ),
    );
    let out = skipprd_command(dir.path())
        .args(["doctor"])
        .env("PG_PASSWORD", "reader-pw")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    pg.sql(&db, &format!("SELECT pg_drop_replication_slot('{slot}')"));
    assert_eq!(out.status.code(), Some(1), "{report}");
    for line in [
        "[ok]   pg: source table public.big: readable, snapshot, then its changes".to_owned(),
        "[FAIL] pg: source table public.nokey: has no replica identity (no primary key, or REPLICA IDENTITY NOTHING): published for CDC".to_owned(),
        "fix: ALTER TABLE \"public\".\"nokey\" REPLICA IDENTITY FULL;".to_owned(),
        format!("[ok]   pg: source replication slot: `{slot}` exists (pgoutput)"),
        format!("[FAIL] pg: source replication permission: `{role}` has no REPLICATION attribute"),
        format!("fix: ALTER ROLE \"{role}\" WITH REPLICATION;"),
        "[FAIL] pg: source publication: `pub_doctor` does not publish `public.nokey`".to_owned(),
        "fix: ALTER PUBLICATION \"pub_doctor\" ADD TABLE \"public\".\"nokey\";".to_owned(),
    ] {
        assert!(report.contains(&line), "`{line}` not in:\n{report}");
    }
    assert!(!report.contains("reader-pw"), "{report}");
    pg.sql(&db, "DROP PUBLICATION pub_doctor");
    pg.sql(&db, &format!("DROP OWNED BY {role}; "));
    pg.sql("postgres", &format!("DROP DATABASE {db} WITH (FORCE)"));
    pg.sql("postgres", &format!("DROP ROLE {role}"));
}

/// TLS by `sslmode`, on the source and the destination. The test server refuses the role
/// `skippr_tls` without TLS (`hostnossl ... reject` in pg_hba.conf, tests/postgres/pg.sh), so
/// a pass that lands proves its sessions were encrypted. The server's certificate names
/// `localhost` only and is signed by the throwaway CA in `SKIPPR_TEST_PG_CA`.
#[test]
fn sslmode_require_and_verify_full_connect_over_tls_and_a_refused_certificate_says_why() {
    let pg = pg();
    let ca = std::env::var("SKIPPR_TEST_PG_CA")
        .expect("SKIPPR_TEST_PG_CA: the test server's CA (tests/postgres/pg.sh)");
    let secret = "tls-Role-pw-81";
    pg.sql(
        "postgres",
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'skippr_tls') \
         THEN CREATE ROLE skippr_tls LOGIN; END IF; END $$",
    );
    pg.sql(
        "postgres",
        &format!("ALTER ROLE skippr_tls PASSWORD '{secret}'"),
    );
    let db = pg.database("tls");
    pg.sql(
        &db,
        "CREATE TABLE items (id int4 PRIMARY KEY, v text);
         INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 700) g;
         GRANT SELECT ON items TO skippr_tls;",
    );
    let tls_keys = |host: &str, extra: &str| {
        format!(
            "host: {host}\nport: {}\nuser: skippr_tls\npassword: ${{PG_PASSWORD}}\ndatabase: {db}\ntables: [items]\n{extra}",
            pg.port
        )
    };

    // Without TLS the server refuses the role, and says so.
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &tls_keys(&pg.host, "sslmode: disable\n"));
    fails_naming(dir.path(), secret, &["no encryption"], &[secret]);

    // `prefer` (the default) and `require` encrypt without checking the certificate;
    // `verify-full` checks it against `sslrootcert` and the host name `localhost`.
    for (host, extra) in [
        (pg.host.as_str(), String::new()),
        (pg.host.as_str(), "sslmode: require\n".to_owned()),
        (
            "localhost",
            format!("sslmode: verify-full\nsslrootcert: '{ca}'\n"),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), &tls_keys(host, &extra));
        sync_ok(dir.path(), secret, &format!("TLS with {extra:?}"));
        rows_once(dir.path(), "postgres_items", 700);
    }

    // verify-full refuses a certificate that does not name the host connected to, and one
    // no trusted root signed; the message says why and what to set.
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &tls_keys(
            &pg.host,
            &format!("sslmode: verify-full\nsslrootcert: '{ca}'\n"),
        ),
    );
    fails_naming(
        dir.path(),
        secret,
        &[
            "certificate was refused",
            "not valid for name",
            "sslrootcert",
        ],
        &[secret],
    );
    write_config(dir.path(), &tls_keys("localhost", "sslmode: verify-full\n"));
    fails_naming(
        dir.path(),
        secret,
        &["certificate was refused", "sslrootcert"],
        &[secret],
    );
    // A root file that is not there is named.
    write_config(
        dir.path(),
        &tls_keys(
            "localhost",
            "sslmode: verify-full\nsslrootcert: /nonexistent/ca.pem\n",
        ),
    );
    fails_naming(dir.path(), secret, &["/nonexistent/ca.pem"], &[secret]);

    // The destination over TLS too: the superuser reads over `prefer`, `skippr_tls` writes
    // with `verify-full` (through a connection string) into a database it owns.
    let out_db = pg.database("tls_out");
    pg.sql(
        "postgres",
        &format!("ALTER DATABASE {out_db} OWNER TO skippr_tls"),
    );
    pg.sql(&out_db, "ALTER SCHEMA public OWNER TO skippr_tls");
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "\
pipelines:
  pg:
    data_source: data_sources.pg
    data_sink: data_sinks.out
data_sources:
  pg:
    Postgres:
      host: {host}
      port: {port}
      user: {user}
      password: ${{SOURCE_PASSWORD}}
      database: {db}
      tables: [items]
data_sinks:
  out:
    Postgres:
      connection_string: ${{PG_PASSWORD}}
      sslrootcert: '{ca}'
",
        host = pg.host,
        port = pg.port,
        user = pg.user,
    );
    std::fs::write(dir.path().join("skippr.yml"), text).unwrap();
    let url = format!(
        "postgresql://skippr_tls:{secret}@localhost:{}/{out_db}?sslmode=verify-full",
        pg.port
    );
    let out = sync_command(dir.path(), &url, &[])
        .env("SOURCE_PASSWORD", &pg.password)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sync into Postgres over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = pg.sql(
        &out_db,
        "SELECT quote_ident(table_name) FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_name LIKE '%items%'",
    );
    assert_eq!(
        pg.sql(
            &out_db,
            &format!("SELECT count(*), count(DISTINCT id) FROM {table}")
        ),
        "700|700"
    );
}
