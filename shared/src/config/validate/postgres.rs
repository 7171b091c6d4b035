//! Checks of a `Postgres` source's and sink's keys: each error names the key at fault. Pure: nothing
//! here connects to the server (`skipprd doctor` does).

use super::Validator;
use crate::config::ConfigError;
use crate::config::connectors::{PgSslMode, PostgresSinkConfig, PostgresSourceConfig};
use crate::sources::postgres::tls::parse_connection_string;

impl Validator<'_> {
    /// Check the `Postgres` source `name`'s keys.
    pub(super) fn check_postgres(
        &self,
        name: &str,
        c: &PostgresSourceConfig,
    ) -> Result<(), ConfigError> {
        let at = |key: &str| format!("data_sources.{name}.Postgres.{key}");
        let bad = |key: &str, message: &str| Err(self.bad_value(&at(key), message));
        if c.connection_string.is_none() {
            match c.database.as_deref() {
                None => {
                    return bad(
                        "database",
                        "is required (or give `connection_string`, which names it)",
                    );
                }
                Some(db) if db.trim().is_empty() => return bad("database", "must not be empty"),
                Some(_) => {}
            }
        } else if let Some(text) = c.connection_string.as_ref().map(|s| s.expose())
            && parse_connection_string(text).is_none()
        {
            // The parser's message may quote the text: never show it.
            return bad(
                "connection_string",
                "is not a valid PostgreSQL connection string (`postgresql://user@host:port/db` or `host=... dbname=...`)",
            );
        }
        if let Some(host) = &c.host
            && host.trim().is_empty()
        {
            return bad("host", "must not be empty");
        }
        if c.port == Some(0) {
            return bad("port", "must be between 1 and 65535");
        }
        if let Some(user) = &c.user
            && user.trim().is_empty()
        {
            return bad("user", "must not be empty");
        }
        if let Some(schema) = &c.schema
            && schema.trim().is_empty()
        {
            return bad("schema", "must not be empty");
        }
        if c.batch_size_rows == Some(0) {
            return bad("batch_size_rows", "must be at least 1");
        }
        if c.query.is_some() && !c.tables.is_empty() {
            return bad("query", "reads instead of `tables`: give one of them");
        }
        if let Some(query) = &c.query
            && query.trim().is_empty()
        {
            return bad("query", "must not be empty");
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, table) in c.tables.iter().enumerate() {
            let t = table.config();
            let key = |k: &str| format!("tables[{index}]{k}");
            if t.name.trim().is_empty() {
                return bad(&key(".name"), "must not be empty");
            }
            if !seen.insert(t.name.clone()) {
                return bad(&key(""), &format!("names table `{}` a second time", t.name));
            }
            if let Some(cursor) = &t.cursor_field
                && cursor.trim().is_empty()
            {
                return bad(&key(".cursor_field"), "must not be empty");
            }
            if let Some(pk) = &t.primary_key {
                if pk.is_empty() {
                    return bad(&key(".primary_key"), "must name at least one column");
                }
                if pk.iter().any(|c| c.trim().is_empty()) {
                    return bad(&key(".primary_key"), "must not hold an empty column name");
                }
            }
        }
        if c.cdc_idle_timeout_seconds == Some(0) {
            return bad("cdc_idle_timeout_seconds", "must be at least 1");
        }
        if let Err(message) = check_tls(
            c.sslmode,
            c.sslrootcert.as_deref(),
            c.connection_string.as_ref().map(|s| s.expose()),
        ) {
            return bad("sslrootcert", message);
        }
        Ok(())
    }

    /// Check the `Postgres` sink `name`'s keys: either `connection_string` (valid), or
    /// `host`, `user` and `database` (not empty).
    pub(super) fn check_postgres_sink(
        &self,
        name: &str,
        c: &PostgresSinkConfig,
    ) -> Result<(), ConfigError> {
        let at = |key: &str| format!("data_sinks.{name}.Postgres.{key}");
        let bad = |key: &str, message: &str| Err(self.bad_value(&at(key), message));
        match c.connection_string.as_ref().map(|s| s.expose()) {
            Some(text) => {
                if parse_connection_string(text).is_none() {
                    // The parser's message may quote the text: never show it.
                    return bad(
                        "connection_string",
                        "is not a valid PostgreSQL connection string (`postgresql://user@host:port/db` or `host=... dbname=...`)",
                    );
                }
            }
            None => {
                for (key, value) in [
                    ("host", &c.host),
                    ("user", &c.user),
                    ("database", &c.database),
                ] {
                    match value.as_deref() {
                        None => {
                            return bad(key, "is required (or give `connection_string`)");
                        }
                        Some(v) if v.trim().is_empty() => return bad(key, "must not be empty"),
                        Some(_) => {}
                    }
                }
            }
        }
        if c.port == Some(0) {
            return bad("port", "must be between 1 and 65535");
        }
        if let Some(schema) = &c.schema
            && schema.trim().is_empty()
        {
            return bad("schema", "must not be empty");
        }
        if let Err(message) = check_tls(
            c.sslmode,
            c.sslrootcert.as_deref(),
            c.connection_string.as_ref().map(|s| s.expose()),
        ) {
            return bad("sslrootcert", message);
        }
        Ok(())
    }
}

/// `sslrootcert` is only read by `verify-full` (from `sslmode` or the connection string);
/// anywhere else it would be a silent no-op, so it is refused.
fn check_tls(
    mode: Option<PgSslMode>,
    root_cert: Option<&std::path::Path>,
    connection_string: Option<&str>,
) -> Result<(), &'static str> {
    let Some(root_cert) = root_cert else {
        return Ok(());
    };
    if root_cert.as_os_str().is_empty() {
        return Err("must not be empty");
    }
    let mode = match connection_string {
        Some(text) => parse_connection_string(text).map(|(_, mode)| mode),
        None => mode,
    };
    if mode != Some(PgSslMode::VerifyFull) {
        return Err(
            "is only used with `sslmode: verify-full` (libpq's `require` and `prefer` do not check the certificate)",
        );
    }
    Ok(())
}
