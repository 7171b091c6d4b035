//! `skipprd doctor`'s checks of a Postgres source: the connection, the tables (present and
//! readable; a primary key where incremental reading needs one) or the query, `wal_level`, and
//! the replication slot and publication when the config names them. Each failing check
//! carries a fix. Nothing is read from the tables.

use tokio_postgres::Client;

use super::PostgresSourceOptions;
use super::reader::{connect, list_tables};
use crate::config::connectors::PostgresSourceConfig;

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgCheck {
    /// What was checked (`connection`, `table public.orders`, `wal_level`, ...).
    pub part: String,
    /// What was found.
    pub detail: String,
    /// What to do, for a check that failed (`None`: it passed).
    pub fix: Option<String>,
}

impl PgCheck {
    fn ok(part: impl Into<String>, detail: impl Into<String>) -> PgCheck {
        PgCheck {
            part: part.into(),
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(part: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> PgCheck {
        PgCheck {
            part: part.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Run the checks of the source `c`.
pub fn diagnose(c: &PostgresSourceConfig) -> Vec<PgCheck> {
    let options = match PostgresSourceOptions::from_config(c) {
        Ok(options) => options,
        Err(e) => {
            return vec![PgCheck::fail(
                "connection",
                e.to_string(),
                "fix `connection_string` (or give host, port, user, password, database)",
            )];
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return vec![PgCheck::fail(
                "connection",
                format!("cannot start a runtime: {e}"),
                "free some memory or threads and run doctor again",
            )];
        }
    };
    runtime.block_on(checks(c, &options))
}

async fn checks(c: &PostgresSourceConfig, options: &PostgresSourceOptions) -> Vec<PgCheck> {
    let mut out = Vec::new();
    let client = match connect(options).await {
        Ok(client) => client,
        Err(e) => {
            out.push(PgCheck::fail(
                "connection",
                e.to_string(),
                format!(
                    "check that the server at `{}` runs and accepts TCP connections (listen_addresses, pg_hba.conf), and the user, password and database",
                    options.server
                ),
            ));
            return out;
        }
    };
    let version = scalar(&client, "SHOW server_version")
        .await
        .unwrap_or_default();
    let user = scalar(&client, "SELECT current_user::text")
        .await
        .unwrap_or_default();
    out.push(PgCheck::ok(
        "connection",
        format!(
            "connected to `{}` as `{user}` (PostgreSQL {version})",
            options.server
        ),
    ));
    match &options.query {
        Some(query) => match client.prepare(query).await {
            Ok(statement) => out.push(PgCheck::ok(
                "query",
                format!("the query parses, {} columns", statement.columns().len()),
            )),
            Err(e) => out.push(PgCheck::fail(
                "query",
                pg_message(options, &e),
                "fix `query`: it must be one SELECT the user may run",
            )),
        },
        None => tables(&client, options, &mut out).await,
    }
    match scalar(&client, "SHOW wal_level").await {
        Ok(level) if level == "logical" => out.push(PgCheck::ok(
            "wal_level",
            "logical: logical replication (CDC) is possible",
        )),
        Ok(level) => out.push(PgCheck::ok(
            "wal_level",
            format!(
                "{level}: enough for `cdc_mode: snapshot`; CDC will need `ALTER SYSTEM SET wal_level = logical` and a restart"
            ),
        )),
        Err(e) => out.push(PgCheck::fail(
            "wal_level",
            pg_message(options, &e),
            "let the user read settings (`SHOW wal_level`)",
        )),
    }
    if let Some(slot) = &c.replication_slot_name {
        let found = client
            .query_opt(
                "SELECT plugin::text, slot_type::text FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()",
                &[slot],
            )
            .await;
        out.push(match found {
            Ok(Some(row)) => {
                let plugin: Option<String> = row.try_get(0).unwrap_or_default();
                match plugin.as_deref() {
                    Some("pgoutput") => {
                        PgCheck::ok("replication slot", format!("`{slot}` exists (pgoutput)"))
                    }
                    other => PgCheck::fail(
                        "replication slot",
                        format!("`{slot}` uses plugin {other:?}, not pgoutput"),
                        format!("SELECT pg_drop_replication_slot('{slot}'); then let skipprd create it, or create it with pgoutput"),
                    ),
                }
            }
            Ok(None) => PgCheck::fail(
                "replication slot",
                format!("no slot `{slot}` in this database"),
                format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');"),
            ),
            Err(e) => PgCheck::fail(
                "replication slot",
                pg_message(options, &e),
                "let the user read pg_replication_slots",
            ),
        });
        match scalar(
            &client,
            "SELECT (rolreplication OR rolsuper)::text FROM pg_roles WHERE rolname = current_user",
        )
        .await
        {
            Ok(yes) if yes == "true" => out.push(PgCheck::ok(
                "replication permission",
                format!("`{user}` may use replication slots"),
            )),
            Ok(_) => out.push(PgCheck::fail(
                "replication permission",
                format!("`{user}` has no REPLICATION attribute"),
                format!("ALTER ROLE {user} WITH REPLICATION;"),
            )),
            Err(e) => out.push(PgCheck::fail(
                "replication permission",
                pg_message(options, &e),
                "let the user read pg_roles",
            )),
        }
    }
    if let Some(publication) = &c.publication_name {
        let found = client
            .query_opt(
                "SELECT puballtables FROM pg_publication WHERE pubname = $1",
                &[publication],
            )
            .await;
        out.push(match found {
            Ok(Some(_)) => PgCheck::ok("publication", format!("`{publication}` exists")),
            Ok(None) => PgCheck::fail(
                "publication",
                format!("no publication `{publication}`"),
                format!(
                    "CREATE PUBLICATION {publication} FOR TABLE {};",
                    if options.tables.is_empty() {
                        "<tables>".to_owned()
                    } else {
                        options
                            .tables
                            .iter()
                            .map(|t| format!("{}.{}", options.schema, t.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            ),
            Err(e) => PgCheck::fail(
                "publication",
                pg_message(options, &e),
                "let the user read pg_publication",
            ),
        });
    }
    out
}

/// Each table: present, readable, and keyed where incremental reading needs it.
async fn tables(client: &Client, options: &PostgresSourceOptions, out: &mut Vec<PgCheck>) {
    let configured = if options.tables.is_empty() {
        match list_tables(client, options).await {
            Ok(names) if names.is_empty() => {
                out.push(PgCheck::fail(
                    "tables",
                    format!("schema `{}` has no tables the user can see", options.schema),
                    "fix `schema`, or list `tables`",
                ));
                return;
            }
            Ok(names) => names
                .into_iter()
                .map(|name| crate::config::connectors::PostgresTableConfig {
                    name,
                    cursor_field: None,
                    primary_key: None,
                })
                .collect(),
            Err(e) => {
                out.push(PgCheck::fail(
                    "tables",
                    e.to_string(),
                    "let the user read the catalog",
                ));
                return;
            }
        }
    } else {
        options.tables.clone()
    };
    for table in &configured {
        let name = format!("{}.{}", options.schema, table.name);
        let part = format!("table {name}");
        let row = client
            .query_one(
                "SELECT c.oid IS NOT NULL, \
                 c.oid IS NOT NULL AND has_table_privilege(c.oid, 'SELECT'), \
                 c.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) \
                 FROM (SELECT to_regclass(quote_ident($1) || '.' || quote_ident($2)) AS oid) c",
                &[&options.schema, &table.name],
            )
            .await;
        let (exists, readable, keyed) = match row {
            Ok(row) => (
                row.try_get::<_, bool>(0).unwrap_or(false),
                row.try_get::<_, bool>(1).unwrap_or(false),
                row.try_get::<_, bool>(2).unwrap_or(false),
            ),
            Err(e) => {
                out.push(PgCheck::fail(
                    part,
                    pg_message(options, &e),
                    "let the user read the catalog",
                ));
                continue;
            }
        };
        let check = if !exists {
            PgCheck::fail(
                part,
                "no such table (or the user may not see it)",
                format!("create `{name}`, or fix its `tables` entry or `schema`"),
            )
        } else if !readable {
            PgCheck::fail(
                part,
                "the user may not SELECT from it",
                format!(
                    "GRANT SELECT ON {name} TO <user>; (and USAGE on schema {})",
                    options.schema
                ),
            )
        } else if table.cursor_field.is_some() && table.primary_key.is_none() && !keyed {
            PgCheck::fail(
                part,
                "has no primary key, which incremental reading needs",
                "give `primary_key` in its `tables` entry (columns that identify a row)",
            )
        } else {
            let mode = match &table.cursor_field {
                Some(cursor) => format!("incremental by `{cursor}`"),
                None => "read whole each pass".to_owned(),
            };
            PgCheck::ok(part, format!("readable, {mode}"))
        };
        out.push(check);
    }
}

async fn scalar(client: &Client, sql: &str) -> Result<String, tokio_postgres::Error> {
    let rows = client.simple_query(sql).await?;
    Ok(rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_default())
}

fn pg_message(options: &PostgresSourceOptions, e: &tokio_postgres::Error) -> String {
    super::reader::pg_error(options, None, "query failed", e).to_string()
}
