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
    /// Run SQL with psql in `db`, failing the test on any error; returns the output (tuples
    /// only, unaligned).
    pub fn sql(&self, db: &str, sql: &str) -> String {
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
    pub fn database(&self, stem: &str) -> String {
        let name = format!("t_{stem}_{}", std::process::id());
        self.sql("postgres", &format!("DROP DATABASE IF EXISTS {name}"));
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        name
    }
}
