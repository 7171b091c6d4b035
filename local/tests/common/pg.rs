//! The PostgreSQL server of the tests (`tests/postgres/pg.sh`, started by `tests/run`), for
//! the test binaries that need one (included with `#[path]`): its connection values and psql.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test support: not every test binary uses every item; a failed set-up should fail the test"
)]

use std::process::Command;

/// The test server's connection values.
pub struct Pg {
    /// The server's host.
    pub host: String,
    /// Its port.
    pub port: String,
    /// The superuser.
    pub user: String,
    /// Its password.
    pub password: String,
}

/// The test server `tests/run` starts, from `SKIPPR_TEST_PG_*`.
pub fn pg() -> Pg {
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
    /// psql in `db` as the superuser: quiet, tuples only, unaligned, stopping at an error.
    fn psql(&self, db: &str) -> Command {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", db])
            .env("PGHOST", &self.host)
            .env("PGPORT", &self.port)
            .env("PGUSER", &self.user)
            .env("PGPASSWORD", &self.password);
        cmd
    }

    /// Run SQL with psql in `db`, failing the test on any error; returns the output (tuples
    /// only, unaligned).
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = self.psql(db).args(["-c", sql]).output().expect("psql runs");
        assert!(
            out.status.success(),
            "psql failed: {}\n{sql}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A fresh database for one test.
    pub fn database(&self, stem: &str) -> String {
        let name = format!("t_{stem}_{}", std::process::id());
        self.sql("postgres", &format!("DROP DATABASE IF EXISTS {name}"));
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        name
    }
}

/// Six tables covering every type the Postgres source maps (and `interval`, which it reads
/// as text), NULLs included, each keyed by `id` (1-3).
pub const TYPES_SQL: &str = "
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE ints (id int4 PRIMARY KEY, a int2, b int4, c int8, o oid, flag bool);
INSERT INTO ints VALUES (1, -32768, 2147483647, 9007199254740993, 4000000000, true),
  (2, NULL, NULL, NULL, NULL, NULL), (3, 7, -7, -9223372036854775808, 0, false);
CREATE TABLE nums (id int4 PRIMARY KEY, n numeric(12,3), big numeric, r float4, d float8);
INSERT INTO nums VALUES (1, -1234.500, 123456789012345678901234567890123456789012.0001, 1.5, 0.1),
  (2, NULL, NULL, NULL, NULL), (3, 0.001, 'NaN', -2.25, 1e300);
CREATE TABLE texts (id int4 PRIMARY KEY, t text, v varchar(10), c char(3), m mood, u uuid);
INSERT INTO texts VALUES (1, 'héllo \"wörld\"', 'v', 'ab', 'happy', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
  (2, NULL, NULL, NULL, NULL, NULL), (3, '', 'line\nbreak', 'xyz', 'sad', '00000000-0000-0000-0000-000000000000');
CREATE TABLE times (id int4 PRIMARY KEY, d date, ts timestamp, tz timestamptz, tm time);
INSERT INTO times VALUES (1, '2026-01-02', '2026-01-02 03:04:05.123456', '2026-01-02 03:04:05.5+02', '12:34:56.7'),
  (2, NULL, NULL, NULL, NULL), (3, '1999-12-31', '1970-01-01 00:00:00', '2038-01-19 03:14:08+00', '00:00:00');
CREATE TABLE docs (id int4 PRIMARY KEY, j json, jb jsonb, bin bytea);
INSERT INTO docs VALUES (1, '{\"a\": [1, 2]}', '{\"b\": {\"c\": null}}', '\\x00ff10'),
  (2, NULL, NULL, NULL), (3, '[1,\"x\"]', '\"just a string\"', '');
CREATE TABLE lists (id int4 PRIMARY KEY, ia int4[], ta text[], grid int8[][], iv interval);
INSERT INTO lists VALUES (1, '{1,NULL,3}', '{a,\"b c\"}', '{{1,2},{3,4}}', '1 day 02:00:00'),
  (2, NULL, NULL, NULL, NULL), (3, '{}', '{\"\"}', '{{5}}', '-00:00:01');
";

impl Pg {
    /// Run a script with psql in `db`, statement by statement (each its own transaction
    /// unless the script says `BEGIN`), failing the test on any error; returns the output
    /// lines (tuples only, unaligned).
    pub fn script(&self, db: &str, script: &str) -> Vec<String> {
        use std::io::Write as _;
        let mut child = self
            .psql(db)
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("psql runs");
        child
            .stdin
            .take()
            .expect("psql's stdin")
            .write_all(script.as_bytes())
            .expect("psql reads the script");
        let out = child.wait_with_output().expect("psql ends");
        assert!(
            out.status.success(),
            "psql failed: {}\n{script}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}
