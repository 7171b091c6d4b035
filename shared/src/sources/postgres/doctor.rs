//! `skipprd doctor`'s checks of a Postgres source: the connection, the tables (present and
//! readable; a primary key where incremental reading needs one) or the query, `wal_level`, and
//! for a change stream the replication slot, the REPLICATION permission and the publication. Each failing check
//! carries a fix. Nothing is read from the tables.

use tokio_postgres::Client;

use super::PostgresSourceOptions;
use super::reader::{connect, ident, list_tables};
use crate::config::connectors::PostgresSourceConfig;
use crate::config::validate::ResolvedCdc;

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

/// Run the checks of the source `c`, and of its change stream when `cdc`.
pub fn diagnose(c: &PostgresSourceConfig, cdc: Option<&ResolvedCdc>) -> Vec<PgCheck> {
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
    runtime.block_on(checks(&options, cdc))
}

async fn checks(options: &PostgresSourceOptions, cdc: Option<&ResolvedCdc>) -> Vec<PgCheck> {
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
        None => tables(&client, options, cdc.is_some(), &mut out).await,
    }
    match scalar(&client, "SHOW wal_level").await {
        Ok(level) if level == "logical" => out.push(PgCheck::ok(
            "wal_level",
            "logical: logical replication (CDC) is possible",
        )),
        Ok(level) if cdc.is_some() => out.push(PgCheck::fail(
            "wal_level",
            format!("{level}: CDC needs `logical`"),
            "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
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
    if let Some(cdc) = cdc {
        stream_checks(&client, options, cdc, &user, &mut out).await;
    }
    out
}

/// The change stream's slot, permission and publication.
async fn stream_checks(
    client: &Client,
    options: &PostgresSourceOptions,
    cdc: &ResolvedCdc,
    user: &str,
    out: &mut Vec<PgCheck>,
) {
    let slot = &cdc.slot_name;
    let found = client
        .query_opt(
            "SELECT plugin::text, database::text = current_database() FROM pg_replication_slots WHERE slot_name = $1",
            &[slot],
        )
        .await;
    out.push(match found {
        Ok(Some(row)) => {
            let plugin: Option<String> = row.try_get(0).unwrap_or_default();
            let here: Option<bool> = row.try_get(1).unwrap_or_default();
            match (plugin.as_deref(), here) {
                (Some("pgoutput"), Some(true)) => {
                    PgCheck::ok("replication slot", format!("`{slot}` exists (pgoutput)"))
                }
                (Some("pgoutput"), _) => PgCheck::fail(
                    "replication slot",
                    format!("`{slot}` belongs to another database"),
                    "give this pipeline its own `replication_slot_name`",
                ),
                (other, _) => PgCheck::fail(
                    "replication slot",
                    format!("`{slot}` uses plugin {other:?}, not pgoutput"),
                    format!(
                        "SELECT pg_drop_replication_slot('{slot}'); then let skipprd create it, or give another `replication_slot_name`"
                    ),
                ),
            }
        }
        Ok(None) => PgCheck::ok(
            "replication slot",
            format!("no slot `{slot}` yet: the first sync creates it"),
        ),
        Err(e) => PgCheck::fail(
            "replication slot",
            pg_message(options, &e),
            "let the user read pg_replication_slots",
        ),
    });
    match scalar(
        client,
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
            format!("ALTER ROLE {} WITH REPLICATION;", ident(user)),
        )),
        Err(e) => out.push(PgCheck::fail(
            "replication permission",
            pg_message(options, &e),
            "let the user read pg_roles",
        )),
    }
    let publication = &cdc.publication;
    let tables: Vec<String> = if options.tables.is_empty() {
        list_tables(client, options).await.unwrap_or_default()
    } else {
        options.tables.iter().map(|t| t.name.clone()).collect()
    };
    let listed = tables
        .iter()
        .map(|t| format!("{}.{}", ident(&options.schema), ident(t)))
        .collect::<Vec<_>>()
        .join(", ");
    let found = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await;
    out.push(match found {
        Ok(Some(_)) => {
            let published = client
                .query(
                    "SELECT tablename::text FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2",
                    &[publication, &options.schema],
                )
                .await
                .map(|rows| {
                    rows.iter()
                        .filter_map(|r| r.try_get::<_, String>(0).ok())
                        .collect::<Vec<_>>()
                });
            match published {
                Ok(published) => match tables.iter().find(|t| !published.contains(t)) {
                    None => PgCheck::ok(
                        "publication",
                        format!("`{publication}` publishes every table"),
                    ),
                    Some(missing) => PgCheck::fail(
                        "publication",
                        format!("`{publication}` does not publish `{}.{missing}`", options.schema),
                        format!(
                            "ALTER PUBLICATION {} ADD TABLE {}.{};",
                            ident(publication),
                            ident(&options.schema),
                            ident(missing)
                        ),
                    ),
                },
                Err(e) => PgCheck::fail(
                    "publication",
                    pg_message(options, &e),
                    "let the user read pg_publication_tables",
                ),
            }
        }
        Ok(None) => PgCheck::ok(
            "publication",
            format!(
                "no publication `{publication}` yet: the first sync creates it for {listed} (as the tables' owner), or run CREATE PUBLICATION {} FOR TABLE {listed};",
                ident(publication)
            ),
        ),
        Err(e) => PgCheck::fail(
            "publication",
            pg_message(options, &e),
            "let the user read pg_publication",
        ),
    });
}

/// Each table: present, readable, and keyed where incremental reading or (`streamed`) the
/// change stream needs it.
async fn tables(
    client: &Client,
    options: &PostgresSourceOptions,
    streamed: bool,
    out: &mut Vec<PgCheck>,
) {
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
                 c.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
                 c.oid IS NOT NULL AND (SELECT relreplident FROM pg_class WHERE oid = c.oid) = 'f', \
                 c.oid IS NOT NULL AND (SELECT relreplident FROM pg_class WHERE oid = c.oid) = 'n' \
                 FROM (SELECT to_regclass(quote_ident($1) || '.' || quote_ident($2)) AS oid) c",
                &[&options.schema, &table.name],
            )
            .await;
        let (exists, readable, keyed, full_identity, no_identity) = match row {
            Ok(row) => (
                row.try_get::<_, bool>(0).unwrap_or(false),
                row.try_get::<_, bool>(1).unwrap_or(false),
                row.try_get::<_, bool>(2).unwrap_or(false),
                row.try_get::<_, bool>(3).unwrap_or(false),
                row.try_get::<_, bool>(4).unwrap_or(false),
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
        } else if streamed && (no_identity || (!keyed && !full_identity)) {
            PgCheck::fail(
                part,
                "has no replica identity (no primary key, or REPLICA IDENTITY NOTHING): published for CDC, its UPDATEs and DELETEs would fail",
                format!(
                    "ALTER TABLE {}.{} REPLICA IDENTITY FULL; (or add a primary key)",
                    ident(&options.schema),
                    ident(&table.name)
                ),
            )
        } else {
            let mode = match &table.cursor_field {
                Some(cursor) => format!("incremental by `{cursor}`"),
                None if streamed => "snapshot, then its changes".to_owned(),
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
