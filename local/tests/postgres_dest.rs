//! The `Postgres` destination end to end against a real PostgreSQL server (the one
//! `tests/run` starts with `tests/postgres/pg.sh`, found through `SKIPPR_TEST_PG_*`):
//! `skipprd sync` from a `File` source into Postgres tables, read back with `psql`.
//!
//! - every row once, exact counts, nested values as `jsonb`; a second pass with nothing new
//!   adds nothing; a new field and a widening evolve the table;
//! - hostile namespace and column names (quotes, unicode, longer than PostgreSQL's 63 bytes);
//! - kill -9 at random moments (`SKIPPR_KILL_LOOPS`, default 30) while files keep arriving,
//!   and crashes injected before and after the delivery's commit: every row exactly once;
//! - a column of the wrong type in an existing table: exit 1 naming the column; a sink
//!   without `host`: exit 2 naming the key.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

mod common;

#[path = "common/bin.rs"]
mod bin;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use bin::skipprd_command;
use common::Rng;
use skipprd::sinks::postgres::PostgresSink;

/// The test server, from the environment `tests/postgres/pg.sh` exports.
struct Pg {
    host: String,
    port: String,
    user: String,
    password: String,
}

fn pg() -> Pg {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: run `bash tests/run`, which starts a PostgreSQL server (tests/postgres/pg.sh) and exports SKIPPR_TEST_PG_HOST, _PORT, _USER and _PASSWORD (or `source tests/postgres/pg.sh; pg_server` yourself)"
            )
        })
    };
    Pg {
        host: var("SKIPPR_TEST_PG_HOST"),
        port: var("SKIPPR_TEST_PG_PORT"),
        user: var("SKIPPR_TEST_PG_USER"),
        password: var("SKIPPR_TEST_PG_PASSWORD"),
    }
}

impl Pg {
    /// Run SQL with psql in `db`, failing the test on any error; the output (tuples only,
    /// unaligned).
    fn sql(&self, db: &str, sql: &str) -> String {
        let out = Command::new("psql")
            .args([
                "-X",
                "-q",
                "-tA",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                db,
                "-c",
                sql,
            ])
            .env("PGHOST", &self.host)
            .env("PGPORT", &self.port)
            .env("PGUSER", &self.user)
            .env("PGPASSWORD", &self.password)
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "psql failed: {}\n{sql}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A fresh database for one test.
    fn database(&self, stem: &str) -> String {
        let name = format!("d_{stem}_{}", std::process::id());
        self.sql("postgres", &format!("DROP DATABASE IF EXISTS {name}"));
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        name
    }

    /// `(rows, distinct ids)` of `table` in `db`.
    fn counts(&self, db: &str, table: &str) -> (u64, u64) {
        let out = self.sql(
            db,
            &format!(
                "SELECT count(*), count(DISTINCT id) FROM public.{}",
                quote(table)
            ),
        );
        let (a, b) = out.split_once('|').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    }
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A project reading `input/` (routed by `kind`) into the Postgres database `db`.
fn write_config(dir: &Path, pg: &Pg, db: &str) {
    let text = format!(
        "\
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.pg
    transform:
      namespace_fields: kind
data_sources:
  files:
    File:
      path: input
      batch_size: 500
data_sinks:
  pg:
    Postgres:
      host: {}
      port: {}
      user: {}
      password: ${{PG_PASSWORD}}
      database: {db}
",
        pg.host, pg.port, pg.user
    );
    std::fs::write(dir.join("skippr.yml"), text).unwrap();
    std::fs::create_dir_all(dir.join("input")).unwrap();
}

fn sync_command(dir: &Path, pg: &Pg) -> Command {
    let mut cmd = skipprd_command(dir);
    cmd.args(["sync", "--once", "--output", "json"])
        .env("PG_PASSWORD", &pg.password)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn sync_ok(dir: &Path, pg: &Pg, what: &str) -> Output {
    bin::succeeded(
        sync_command(dir, pg).output().unwrap(),
        &format!("{what}: sync failed"),
    )
}

/// Append `count` records of kind `kind` with ids from `first` to `path`.
fn append(path: &Path, kind: &str, first: u64, count: u64, extra: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut text = String::new();
    let kind = serde_json::to_string(kind).unwrap();
    for id in first..first + count {
        text.push_str(&format!(
            "{{\"id\":{id},\"kind\":{kind},\"n\":{},\"name\":\"c{id}\",\"tags\":[\"t{}\",\"u\"],\"customer\":{{\"n\":\"c{}\",\"vip\":{}}}{extra}}}\n",
            id % 1000,
            id % 5,
            id % 77,
            id % 2 == 0
        ));
    }
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_file_source_lands_every_row_once_with_nested_jsonb_and_evolves_the_table() {
    let pg = pg();
    let db = pg.database("e2e");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &pg, &db);
    append(&dir.path().join("input/a.jsonl"), "order", 0, 12_000, "");
    append(
        &dir.path().join("input/b.jsonl"),
        "refund",
        100_000,
        3_000,
        "",
    );
    sync_ok(dir.path(), &pg, "first pass");
    let orders = PostgresSink::table_of("order");
    let refunds = PostgresSink::table_of("refund");
    assert_eq!(pg.counts(&db, &orders), (12_000, 12_000));
    assert_eq!(pg.counts(&db, &refunds), (3_000, 3_000));
    // Types: nested values are jsonb, read back as JSON.
    let types = pg.sql(
        &db,
        &format!(
            "SELECT string_agg(column_name || ':' || data_type, ',' ORDER BY column_name) FROM information_schema.columns WHERE table_name = '{orders}'"
        ),
    );
    assert_eq!(
        types, "customer:jsonb,id:integer,kind:text,n:integer,name:text,tags:jsonb",
        "{types}"
    );
    let row = pg.sql(
        &db,
        &format!(
            "SELECT customer->>'n', (customer->>'vip')::boolean, tags->>0, jsonb_array_length(tags) FROM public.{} WHERE id = 4321",
            quote(&orders)
        ),
    );
    assert_eq!(row, "c9|f|t1|2");
    let batches = pg.sql(&db, "SELECT count(*) FROM public._skippr_batches");
    assert_eq!(batches, "2", "one bookkeeping row per table");
    // Nothing new: nothing lands twice.
    sync_ok(dir.path(), &pg, "second pass");
    assert_eq!(pg.counts(&db, &orders), (12_000, 12_000));
    // A new field, and a widening (`n` as a double, ids past i32).
    append(
        &dir.path().join("input/c.jsonl"),
        "order",
        5_000_000_000,
        500,
        ",\"n\":1.5,\"added\":\"x\"",
    );
    sync_ok(dir.path(), &pg, "evolving pass");
    assert_eq!(pg.counts(&db, &orders), (12_500, 12_500));
    let types = pg.sql(
        &db,
        &format!(
            "SELECT string_agg(column_name || ':' || data_type, ',' ORDER BY column_name) FROM information_schema.columns WHERE table_name = '{orders}' AND column_name IN ('id', 'added')"
        ),
    );
    assert_eq!(types, "added:text,id:bigint", "{types}");
    let added = pg.sql(
        &db,
        &format!(
            "SELECT count(*) FROM public.{} WHERE added = 'x' AND id >= 5000000000",
            quote(&orders)
        ),
    );
    assert_eq!(added, "500");
}

#[test]
fn hostile_namespace_and_column_names_land_in_quoted_tables_and_columns() {
    let pg = pg();
    let db = pg.database("hostile");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &pg, &db);
    let long_kind = "ns-".repeat(80);
    let long_key = "k".repeat(100);
    let kinds = [
        "we\"ird'; DROP TABLE x; --",
        "ünïcødé 名前",
        long_kind.as_str(),
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let extra =
            format!(",\"quo\\\"te\":{i},\"Mixed Case\":\"m\",\"ключ\":\"v\",\"{long_key}\":{i}");
        append(
            &dir.path().join(format!("input/h{i}.jsonl")),
            kind,
            (i as u64) * 1000,
            100,
            &extra,
        );
    }
    sync_ok(dir.path(), &pg, "hostile pass");
    for kind in kinds {
        let table = PostgresSink::table_of(kind);
        assert!(table.len() <= 63, "{table}");
        assert_eq!(pg.counts(&db, &table), (100, 100), "{kind} -> {table}");
        let long_col = PostgresSink::column_of(&long_key);
        assert!(long_col.len() <= 63);
        let got = pg.sql(
            &db,
            &format!(
                "SELECT count(*) FROM public.{} WHERE {} IS NOT NULL AND \"Mixed Case\" = 'm' AND \"ключ\" = 'v' AND {} IS NOT NULL",
                quote(&table),
                quote("quo\"te"),
                quote(&long_col)
            ),
        );
        assert_eq!(got, "100", "{kind}");
    }
}

#[test]
fn kill_9_at_random_moments_lands_every_row_exactly_once() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let pg = pg();
    let db = pg.database("kill");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &pg, &db);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next = 0u64;
    for f in 0..4 {
        append(
            &dir.path().join(format!("input/p{f}.jsonl")),
            "order",
            next,
            3000,
            "",
        );
        next += 3000;
    }
    let table = PostgresSink::table_of("order");
    let landed = |pg: &Pg| {
        let exists = pg.sql(
            &db,
            &format!("SELECT to_regclass('public.{}') IS NOT NULL", quote(&table)),
        );
        if exists == "t" {
            pg.counts(&db, &table).0
        } else {
            0
        }
    };
    let (mut killed, mut finished, mut round, mut after_delivery) = (0u64, 0u64, 0u64, 0u64);
    while killed < kills && round < kills * 4 {
        round += 1;
        let before = landed(&pg);
        append(
            &dir.path().join(format!("input/r{round:03}.jsonl")),
            "order",
            next,
            700,
            "",
        );
        next += 700;
        let mut child = sync_command(dir.path(), &pg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Mostly early kills; every third round late enough that a delivery may have landed.
        let wait = if round % 3 == 0 {
            300 + rng.below(1500)
        } else {
            5 + rng.below(300)
        };
        std::thread::sleep(Duration::from_millis(wait));
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
                after_delivery += u64::from(landed(&pg) > before);
            }
        }
    }
    sync_ok(dir.path(), &pg, "final pass");
    let (rows, distinct) = pg.counts(&db, &table);
    println!(
        "postgres destination kill loop: {killed} kills ({after_delivery} after a delivery had committed), {finished} passes finished, {rows} rows ({distinct} distinct) of {next}"
    );
    assert!(
        after_delivery > 0,
        "no kill came after a delivery: the kills proved little"
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert_eq!(distinct, next, "rows lost");
    assert_eq!(rows, next, "rows duplicated");
}

/// A crash injected right before and right after the delivery's commit: the next pass lands
/// every row once.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_around_the_delivery_commit_is_recovered_exactly_once() {
    let pg = pg();
    for (index, name) in [
        "sink.after_data_files",
        "sink.after_table_commit",
        "sync.after_deliver",
    ]
    .into_iter()
    .enumerate()
    {
        let db = pg.database(&format!("crash{index}"));
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), &pg, &db);
        append(&dir.path().join("input/a.jsonl"), "order", 0, 2000, "");
        let crashed = sync_command(dir.path(), &pg)
            .env("SKIPPR_FAILPOINT", name)
            .output()
            .unwrap();
        assert!(
            !crashed.status.success(),
            "{name}: the failpoint did not fire"
        );
        append(&dir.path().join("input/b.jsonl"), "order", 2000, 500, "");
        sync_ok(dir.path(), &pg, name);
        assert_eq!(
            pg.counts(&db, &PostgresSink::table_of("order")),
            (2500, 2500),
            "{name}"
        );
    }
}

#[test]
fn a_column_of_another_type_fails_naming_it_and_a_missing_host_fails_validation() {
    let pg = pg();
    let db = pg.database("conflict");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &pg, &db);
    let table = PostgresSink::table_of("order");
    pg.sql(
        &db,
        &format!(
            "CREATE TABLE public.{} (id integer, name jsonb)",
            quote(&table)
        ),
    );
    append(&dir.path().join("input/a.jsonl"), "order", 0, 10, "");
    let out = sync_command(dir.path(), &pg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("column `name` has type jsonb in the table but the data needs text"),
        "{stderr}"
    );
    assert!(!stderr.contains(&pg.password), "{stderr}");
    assert_eq!(
        pg.sql(
            &db,
            &format!("SELECT count(*) FROM public.{}", quote(&table))
        ),
        "0"
    );

    edit_config(dir.path(), &format!("      host: {}\n", pg.host), "");
    let out = sync_command(dir.path(), &pg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("data_sinks.pg.Postgres.host"), "{stderr}");
    assert!(stderr.contains("connection_string"), "{stderr}");
}

/// Replace `from` by `to` in the project's `skippr.yml`.
fn edit_config(dir: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(dir.join("skippr.yml")).unwrap();
    assert!(text.contains(from), "skippr.yml has no {from:?}");
    std::fs::write(dir.join("skippr.yml"), text.replace(from, to)).unwrap();
}

/// A project like [`write_config`]'s whose pipeline merges by `id`.
fn write_merge_config(dir: &Path, pg: &Pg, db: &str) {
    write_config(dir, pg, db);
    edit_config(
        dir,
        "    data_sink: data_sinks.pg\n",
        "    data_sink: data_sinks.pg\n    write_policy: merge_by_key\n    primary_key: id\n",
    );
}

/// Append `count` changes of random keys below `keys` to a new file `input/u{round}.jsonl`,
/// applying them to `model` (key -> newest version) in source order.
fn changes(
    dir: &Path,
    round: u64,
    count: u64,
    keys: u64,
    rng: &mut Rng,
    model: &mut std::collections::BTreeMap<u64, u64>,
) {
    let mut text = String::new();
    for line in 0..count {
        let id = rng.below(keys);
        let v = round * 100_000 + line;
        text.push_str(&format!(
            "{{\"id\":{id},\"kind\":\"order\",\"v\":{v},\"note\":\"r{round}\"}}\n"
        ));
        model.insert(id, v);
    }
    std::fs::write(dir.join(format!("input/u{round:05}.jsonl")), text).unwrap();
}

/// The table's `id|v` rows, by id, against the model's.
fn assert_model(pg: &Pg, db: &str, model: &std::collections::BTreeMap<u64, u64>, what: &str) {
    let table = PostgresSink::table_of("order");
    let got = pg.sql(
        db,
        &format!(
            "SELECT id || ':' || v FROM public.{} ORDER BY id",
            quote(&table)
        ),
    );
    let want: Vec<String> = model.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got.len(), want.len(), "{what}: row count");
    assert!(got == want, "{what}: the table differs from the model");
}

#[test]
fn merge_by_key_equals_the_model_after_every_pass_and_after_a_kill_loop() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let pg = pg();
    let db = pg.database("merge");
    let dir = tempfile::tempdir().unwrap();
    write_merge_config(dir.path(), &pg, &db);
    let mut rng = Rng(0xfeed_beef_1234_5679);
    let mut model = std::collections::BTreeMap::new();
    let mut round = 0u64;
    for _ in 0..5 {
        round += 1;
        changes(dir.path(), round, 3000, 2000, &mut rng, &mut model);
        sync_ok(dir.path(), &pg, "merge pass");
        assert_model(&pg, &db, &model, &format!("after pass {round}"));
    }
    let (mut killed, mut finished) = (0u64, 0u64);
    let mut tries = 0u64;
    while killed < kills && tries < kills * 8 {
        tries += 1;
        round += 1;
        changes(dir.path(), round, 800, 2000, &mut rng, &mut model);
        let mut child = sync_command(dir.path(), &pg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Mostly early kills (a pass here is short); every fifth late enough to deliver.
        let wait = if tries.is_multiple_of(5) {
            200 + rng.below(800)
        } else {
            2 + rng.below(120)
        };
        std::thread::sleep(Duration::from_millis(wait));
        match child.try_wait().unwrap() {
            Some(status) => {
                assert!(status.success(), "round {round}: sync failed");
                finished += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
            }
        }
    }
    sync_ok(dir.path(), &pg, "final merge pass");
    println!(
        "merge kill loop: {killed} kills, {finished} passes finished, {} keys in the model",
        model.len()
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert_model(&pg, &db, &model, "after the kill loop");
}

#[test]
fn a_write_policy_the_destination_cannot_apply_exits_2_naming_both() {
    let pg = pg();
    let dir = tempfile::tempdir().unwrap();
    write_merge_config(dir.path(), &pg, "unused");
    let base = std::fs::read_to_string(dir.path().join("skippr.yml")).unwrap();
    let files = base.replace(
        &base[base.find("data_sinks:").unwrap()..],
        "data_sinks:\n  pg:\n    File:\n      output_dir: ./out\n",
    );
    for (text, policy, destination) in [
        (
            files.replace("write_policy: merge_by_key", "write_policy: replace_table"),
            "replace_table",
            "File",
        ),
        (
            base.replace(
                "write_policy: merge_by_key",
                "write_policy: replace_partition",
            ),
            "replace_partition",
            "Postgres",
        ),
        (
            base.replace(
                "write_policy: merge_by_key",
                "write_policy: {default: append, namespaces: {order: replace_partition}}",
            ),
            "replace_partition",
            "Postgres",
        ),
    ] {
        std::fs::write(dir.path().join("skippr.yml"), &text).unwrap();
        let out = sync_command(dir.path(), &pg).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{policy}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "`{policy}` cannot be applied by the `{destination}` destination"
            )),
            "{stderr}"
        );
        assert!(stderr.contains("pipelines.events.write_policy"), "{stderr}");
    }
    let no_key = base.replace("    primary_key: id\n", "");
    std::fs::write(dir.path().join("skippr.yml"), no_key).unwrap();
    let out = sync_command(dir.path(), &pg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pipelines.events.primary_key"), "{stderr}");
}

#[test]
fn replace_table_lands_each_read_alone_and_a_crash_leaves_the_previous_read_whole() {
    let pg = pg();
    let db = pg.database("replace");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &pg, &db);
    edit_config(
        dir.path(),
        "    data_sink: data_sinks.pg\n",
        "    data_sink: data_sinks.pg\n    write_policy: replace_table\n",
    );
    let table = PostgresSink::table_of("order");
    let ids = |what: &str| -> (u64, u64, String) {
        let out = pg.sql(
            &db,
            &format!(
                "SELECT count(*), count(DISTINCT id), min(id) || '-' || max(id) FROM public.{}",
                quote(&table)
            ),
        );
        let mut cols = out.trim().split('|');
        let mut next = || cols.next().unwrap_or_else(|| panic!("{what}: {out}"));
        (
            next().parse().unwrap(),
            next().parse().unwrap(),
            next().to_owned(),
        )
    };
    append(&dir.path().join("input/a.jsonl"), "order", 0, 1200, "");
    sync_ok(dir.path(), &pg, "the first read");
    assert_eq!(ids("first"), (1200, 1200, "0-1199".to_owned()));
    // The second read (three batches) replaces the first.
    append(&dir.path().join("input/b.jsonl"), "order", 5000, 1400, "");
    sync_ok(dir.path(), &pg, "the second read");
    assert_eq!(ids("second"), (1400, 1400, "5000-6399".to_owned()));
    // The third crashes mid-read, at its end and before its commit: the second stays whole.
    append(&dir.path().join("input/c.jsonl"), "order", 9000, 1100, "");
    for name in [
        "sync.after_position",
        "sync.before_read_end",
        "sink.after_data_files",
    ] {
        let crashed = sync_command(dir.path(), &pg)
            .env("SKIPPR_FAILPOINT", name)
            .output()
            .unwrap();
        assert!(
            !crashed.status.success(),
            "{name}: the failpoint did not fire"
        );
        assert_eq!(ids(name), (1400, 1400, "5000-6399".to_owned()), "{name}");
    }
    sync_ok(dir.path(), &pg, "after the crashes");
    assert_eq!(ids("third"), (1100, 1100, "9000-10099".to_owned()));
    // A pass with nothing new leaves the table as it is.
    sync_ok(dir.path(), &pg, "an idle pass");
    assert_eq!(ids("idle"), (1100, 1100, "9000-10099".to_owned()));
}

/// A million rows into Postgres while the pass is killed 30 times at random moments: every
/// row lands once.
#[test]
fn a_million_rows_land_exactly_once_through_thirty_kills() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let pg = pg();
    let db = pg.database("million");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &pg, &db);
    edit_config(dir.path(), "batch_size: 500", "batch_size: 20000");
    let total = 1_000_000u64;
    // The rows arrive in 40 files of 25,000, one before each round, so every round has work
    // to be killed in, however fast the machine.
    let files = 40u64;
    let write_file = |f: u64| {
        let mut text = String::with_capacity(1_500_000);
        for id in f * total / files..(f + 1) * total / files {
            text.push_str(&format!(
                "{{\"id\":{id},\"kind\":\"order\",\"n\":{},\"name\":\"c{}\"}}\n",
                id % 1000,
                id % 77
            ));
        }
        std::fs::write(dir.path().join(format!("input/m{f:02}.jsonl")), text).unwrap();
    };
    let table = PostgresSink::table_of("order");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut killed, mut finished, mut round) = (0u64, 0u64, 0u64);
    let mut landed_at_kills = Vec::new();
    // The fastest pass that finished: later kills come within it, so a fast machine (or a
    // round with little left to do) still has its passes killed.
    let mut fastest: Option<Duration> = None;
    while (round < files || killed < kills) && round < files * 2 {
        if round < files {
            write_file(round);
        }
        round += 1;
        // Deliveries of about 2 MB during the pass, so kills land between and inside them.
        let started = std::time::Instant::now();
        let mut child = sync_command(dir.path(), &pg)
            .env("DELIVER_THRESHOLD_BYTES", "2000000")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let landed = || {
            let exists = pg.sql(
                &db,
                &format!("SELECT to_regclass('public.{}') IS NOT NULL", quote(&table)),
            );
            if exists == "t" {
                pg.counts(&db, &table).0
            } else {
                0
            }
        };
        if round % 5 == 0 {
            // Until a delivery of this pass has landed (or the pass ends), so these kills
            // surely come mid-load whatever the machine's speed.
            let before = landed();
            while landed() == before && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(rng.below(150)));
        } else {
            let span = fastest.map_or(330, |d| u64::try_from(d.as_millis()).unwrap_or(330));
            std::thread::sleep(Duration::from_millis(
                5 + rng.below(span.clamp(10, 330) * 4 / 5),
            ));
        }
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                assert!(status.success(), "sync failed: {stderr}");
                finished += 1;
                let took = started.elapsed();
                fastest = Some(fastest.map_or(took, |f| f.min(took)));
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
                landed_at_kills.push(landed());
            }
        }
    }
    sync_ok(dir.path(), &pg, "final pass");
    let (rows, distinct) = pg.counts(&db, &table);
    println!(
        "postgres destination, 1M rows: {killed} kills, {finished} passes finished before the final one, {rows} rows ({distinct} distinct); rows landed at each kill: {landed_at_kills:?}"
    );
    let mid = landed_at_kills
        .iter()
        .filter(|&&n| n > 0 && n < total)
        .count();
    assert!(
        mid >= 3,
        "only {mid} kills came mid-load: the kills proved little"
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert_eq!(distinct, total, "rows lost");
    assert_eq!(rows, total, "rows duplicated");
}
