//! The `Postgres` source's configuration: the real product's keys (`host`, `port`, `user`,
//! `password`, `database`, `connection_string`, `tables`, `query`, `batch_size_rows`,
//! `cdc_mode`, `replication_slot_name`, `publication_name`, `cdc_idle_timeout_seconds`) and
//! ours (`schema`, `sslmode`, and a table entry written as `{name, cursor_field,
//! primary_key}`).

use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::secret::Secret;

/// `Postgres` source: tables of a PostgreSQL database (or one custom `query`), read through one
/// consistent snapshot (a `REPEATABLE READ` transaction whose snapshot every table's read
/// shares) in primary-key order, one streaming binary `COPY` per table per pass cut into pages
/// of `batch_size_rows` rows, so memory stays bounded by a few pages whatever the table's
/// size. A table entry with a `cursor_field` is read incrementally: each pass reads only the
/// rows whose `(cursor_field, primary_key)` is after the last committed one, so rows sharing a
/// cursor value are never lost or repeated. The position (table and key of the last row handed
/// out) is committed with every WAL batch, so a crash resumes right after the last committed
/// row. Records go to the
/// namespace `postgres.{table}` made table-safe (`postgres_orders`) unless
/// `transform.namespace_fields` routes them. Column values are typed as the module docs of
/// `skipprd::sources::postgres` (and docs/architecture.md) describe. Errors name the host,
/// database and table, never the password or connection string.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresSourceConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Server host name or address. Default `localhost`.
    #[serde(default)]
    pub host: Option<String>,
    /// Server port. Default 5432.
    #[serde(default)]
    pub port: Option<u16>,
    /// User name. Default `postgres`.
    #[serde(default)]
    pub user: Option<String>,
    /// Password: a `${NAME}` reference. Default: none (trust authentication).
    #[serde(default)]
    pub password: Option<Secret>,
    /// Database name. Required unless `connection_string` names it.
    #[serde(default)]
    pub database: Option<String>,
    /// A libpq connection string (`postgresql://user:pass@host:port/db?sslmode=...` or
    /// `host=... dbname=...`): a `${NAME}` reference. When given it overrides `host`, `port`,
    /// `user`, `password`, `database` and `sslmode`.
    #[serde(default)]
    pub connection_string: Option<Secret>,
    /// Schema the tables live in. Default `public`.
    #[serde(default)]
    pub schema: Option<String>,
    /// Tables to read: each a table name, or `{name, cursor_field, primary_key}` for
    /// incremental loading. Default: every table of `schema`. Not with `query`.
    #[serde(default)]
    pub tables: Vec<PostgresTable>,
    /// A custom SQL query read instead of tables (one `SELECT`, run as it is inside the
    /// snapshot and read with a cursor, `batch_size_rows` rows at a time). Its records go to
    /// the namespace `postgres.query`; every pass reads it whole again. Not with `tables`.
    #[serde(default)]
    pub query: Option<String>,
    /// Rows per page of a table (or fetch of a `query`) and per batch. Default 10000.
    #[serde(default)]
    pub batch_size_rows: Option<usize>,
    /// `snapshot` (default): each pass reads the tables (incrementally where a table has a
    /// `cursor_field`). `snapshot_then_cdc`: the tables once, at the replication slot's
    /// consistent point, then every insert, update and delete after it (logical replication,
    /// `pgoutput`); `cdc_only`: the changes only. Change records carry `_op` (`r` snapshot,
    /// `c`, `u`, `d`, `t` truncate), `_lsn`, `_commit_lsn` and `_commit_ts`. The pipeline's
    /// `cdc` wins over this key.
    #[serde(default)]
    pub cdc_mode: Option<CdcMode>,
    /// The logical replication slot CDC reads (for `snapshot_then_cdc` and `cdc_only`),
    /// created when missing: 1-63 lower-case letters, digits and `_`. Default
    /// `skipprd_{pipeline}` (lower-cased, other characters as `_`).
    #[serde(default)]
    pub replication_slot_name: Option<String>,
    /// The publication CDC reads (for `snapshot_then_cdc` and `cdc_only`), created for the
    /// tables when missing (which needs their owner). Default `skipprd_{pipeline}`.
    #[serde(default)]
    pub publication_name: Option<String>,
    /// CDC: a pass ends after this many seconds with no new change. Default 10.
    #[serde(default)]
    pub cdc_idle_timeout_seconds: Option<u64>,
    /// libpq `sslmode`: `disable` (never TLS), `prefer` (default: TLS when the server offers
    /// it, else plain), `require` (always TLS, the certificate not checked) or `verify-full`
    /// (always TLS, the certificate's chain checked against `sslrootcert` or the system's roots,
    /// and its names against the host).
    #[serde(default)]
    pub sslmode: Option<PgSslMode>,
    /// A PEM file of the CA certificates `sslmode: verify-full` trusts (libpq's
    /// `sslrootcert`), e.g. Amazon RDS's `global-bundle.pem`. Default: the system's trusted
    /// roots. Only with `verify-full` (in `sslmode` or the connection string).
    #[serde(default)]
    pub sslrootcert: Option<std::path::PathBuf>,
}

impl PostgresSourceConfig {
    /// Default `host`.
    pub const DEFAULT_HOST: &'static str = "localhost";
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 5432;
    /// Default `user`.
    pub const DEFAULT_USER: &'static str = "postgres";
    /// Default `schema`.
    pub const DEFAULT_SCHEMA: &'static str = "public";
    /// Default `batch_size_rows`.
    pub const DEFAULT_BATCH_SIZE_ROWS: usize = 10_000;
}

/// How a `Postgres` source reads changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CdcMode {
    /// Read the tables (incrementally by cursor where configured) every pass.
    Snapshot,
    /// A snapshot at a replication slot's consistent point, then its changes.
    SnapshotThenCdc,
    /// Only the changes after the replication slot was created.
    CdcOnly,
}

/// libpq's `sslmode` values this source knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, without checking the certificate; else plain.
    Prefer,
    /// TLS, without checking the certificate.
    Require,
    /// TLS, checking the certificate and the host name.
    VerifyFull,
}

/// One entry of `tables`: a table name, or an object with the incremental keys.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(untagged)]
pub enum PostgresTable {
    /// A table name: read whole every pass.
    Name(String),
    /// A table with its incremental keys.
    Entry(PostgresTableConfig),
}

impl PostgresTable {
    /// The table's keys as an object (a bare name has no cursor and the table's primary key).
    pub fn config(&self) -> PostgresTableConfig {
        match self {
            PostgresTable::Name(name) => PostgresTableConfig {
                name: name.clone(),
                cursor_field: None,
                primary_key: None,
            },
            PostgresTable::Entry(entry) => entry.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for PostgresTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TableVisitor;
        impl<'de> Visitor<'de> for TableVisitor {
            type Value = PostgresTable;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table name or {name, cursor_field, primary_key}")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<PostgresTable, E> {
                Ok(PostgresTable::Name(name.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PostgresTable, A::Error> {
                PostgresTableConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PostgresTable::Entry)
            }
        }
        deserializer.deserialize_any(TableVisitor)
    }
}

/// One table of a `Postgres` source, as an object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresTableConfig {
    /// Table name (in `schema`).
    pub name: String,
    /// Column that grows with every change (an `updated_at` or serial id): each pass reads only
    /// the rows after the last committed `(cursor_field, primary_key)`. Default: read the whole
    /// table every pass.
    #[serde(default)]
    pub cursor_field: Option<String>,
    /// Primary key columns (a name, or a list); with a cursor they break ties, so rows sharing
    /// a cursor value are never lost. Default: the table's primary key.
    #[serde(default, deserialize_with = "one_or_many")]
    pub primary_key: Option<Vec<String>>,
}

/// A column name or a list of them.
pub(crate) fn one_or_many<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => None,
        Some(OneOrMany::One(one)) => Some(vec![one]),
        Some(OneOrMany::Many(many)) => Some(many),
    })
}
