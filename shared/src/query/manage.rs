//! The real product's management statements in `query`: `SHOW PIPELINES`, `SHOW STATS [p]`,
//! `SCHEMA DUMP [p]` and `RESET PIPELINE p`. They are recognised before SQL reaches the
//! engine ([`parse`]); any other statement starting with `RESET`, `SCHEMA`, `CREATE|ALTER|DROP
//! PIPELINE` or a `SHOW` DataFusion does not know is refused as not supported (a usage error,
//! exit 2), never sent on as SQL to fail with a parser message.
//!
//! The results are ordinary [`QueryOutput`]s, so `--plain` prints them as JSON like any
//! query. `RESET PIPELINE` needs a confirmation the caller asks for (the CLI's `--yes`, or a
//! `y` at the prompt); it then runs [`crate::pipeline::reset()`], which takes the writer lease.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};

use super::QueryOutput;
use super::error::QueryError;
use crate::config::ConnectorSet;
use crate::config::validate::ValidatedPipeline;

/// A management statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// `SHOW PIPELINES`: each pipeline queried, its source, destination and schedule.
    ShowPipelines,
    /// `SHOW STATS [pipeline]`: rows per table (WAL and landed, each row once).
    ShowStats(Option<String>),
    /// `SCHEMA DUMP [pipeline]`: the saved schema of each pipeline, as its JSON.
    SchemaDump(Option<String>),
    /// `RESET PIPELINE name`: clear the pipeline's source position and acknowledgements
    /// together (see `skipprd reset`).
    ResetPipeline(String),
}

/// `SHOW` statements DataFusion runs itself (with the information schema on).
const DATAFUSION_SHOW: &[&str] = &["TABLES", "COLUMNS", "ALL", "FUNCTIONS", "CREATE"];

/// Recognise a management statement: `Ok(None)` for SQL the engine should run.
///
/// # Errors
///
/// [`QueryError::NotSupported`] for a statement of the management family this build does not
/// have (`RESET TABLE t`, `SCHEMA APPLY`, `SHOW NAMESPACES`, `DROP PIPELINE p`, ...).
pub fn parse(sql: &str) -> Result<Option<Statement>, QueryError> {
    let text = sql.trim().trim_end_matches(';').trim();
    let words: Vec<&str> = text.split_whitespace().collect();
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let word = |i: usize| upper.get(i).map(String::as_str);
    let name = |i: usize| words.get(i).map(|w| unquote(w));
    let statement = match (word(0), word(1)) {
        (Some("SHOW"), Some("PIPELINES")) if words.len() == 2 => Statement::ShowPipelines,
        (Some("SHOW"), Some("STATS")) if words.len() <= 3 => Statement::ShowStats(name(2)),
        (Some("SCHEMA"), Some("DUMP")) if words.len() <= 3 => Statement::SchemaDump(name(2)),
        (Some("RESET"), Some("PIPELINE")) if words.len() == 3 => {
            Statement::ResetPipeline(name(2).unwrap_or_default())
        }
        (Some("SHOW"), Some(what)) if DATAFUSION_SHOW.contains(&what) => return Ok(None),
        (Some("SHOW"), Some(what)) if what.contains('.') => return Ok(None),
        (Some("SHOW" | "RESET" | "SCHEMA"), _)
        | (Some("CREATE" | "ALTER" | "DROP"), Some("PIPELINE" | "PIPELINES")) => {
            return Err(QueryError::NotSupported {
                statement: text.to_owned(),
            });
        }
        _ => return Ok(None),
    };
    Ok(Some(statement))
}

/// A name as typed: `"a b"`, `'a'` or `` `a` `` lose their quotes.
fn unquote(word: &str) -> String {
    for quote in ['"', '\'', '`'] {
        if let Some(inner) = word.strip_prefix(quote).and_then(|w| w.strip_suffix(quote)) {
            return inner.to_owned();
        }
    }
    word.to_owned()
}

/// The pipelines a statement names: `name` among `pipelines`, or all of them.
///
/// # Errors
///
/// [`QueryError::UnknownPipeline`] when `name` is not one of them.
pub fn chosen<'a>(
    pipelines: &[&'a ValidatedPipeline],
    name: Option<&str>,
) -> Result<Vec<&'a ValidatedPipeline>, QueryError> {
    match name {
        None => Ok(pipelines.to_vec()),
        Some(name) => pipelines
            .iter()
            .find(|p| p.name == name)
            .map(|p| vec![*p])
            .ok_or_else(|| QueryError::UnknownPipeline {
                pipeline: name.to_owned(),
                known: pipelines.iter().map(|p| p.name.clone()).collect(),
            }),
    }
}

/// `SHOW PIPELINES`: `pipeline`, `source` (`data_sources.<name>`), `source_type`,
/// `destination` (`data_sinks.<name>`, null without one), `destination_type`,
/// `sync_frequency_seconds`.
pub fn show_pipelines(pipelines: &[&ValidatedPipeline]) -> Result<QueryOutput, QueryError> {
    let text = |f: &dyn Fn(&ValidatedPipeline) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from(
            pipelines.iter().map(|p| f(p)).collect::<Vec<_>>(),
        ))
    };
    let columns = vec![
        text(&|p| Some(p.name.clone())),
        text(&|p| Some(format!("data_sources.{}", p.source.name))),
        text(&|p| Some(p.source.connector.type_name().to_owned())),
        text(&|p| {
            p.destination
                .as_ref()
                .map(|d| format!("data_sinks.{}", d.name))
        }),
        text(&|p| {
            p.destination
                .as_ref()
                .map(|d| d.kind.type_name().to_owned())
        }),
        Arc::new(UInt64Array::from(
            pipelines
                .iter()
                .map(|p| p.sync_frequency.as_secs())
                .collect::<Vec<_>>(),
        )),
    ];
    let fields = [
        ("pipeline", false),
        ("source", false),
        ("source_type", false),
        ("destination", true),
        ("destination_type", true),
    ]
    .into_iter()
    .map(|(name, nullable)| Field::new(name, DataType::Utf8, nullable))
    .chain([Field::new(
        "sync_frequency_seconds",
        DataType::UInt64,
        false,
    )])
    .collect::<Vec<_>>();
    output(fields, columns)
}

/// `SCHEMA DUMP`'s result: one row per pipeline, `pipeline` and `schema` (the saved
/// schema's JSON; null before the first `discover` or `sync`).
pub fn schema_dump(rows: &[(String, Option<String>)]) -> Result<QueryOutput, QueryError> {
    let names: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
    ));
    let schemas: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|(_, s)| s.as_deref()).collect::<Vec<_>>(),
    ));
    output(
        vec![
            Field::new("pipeline", DataType::Utf8, false),
            Field::new("schema", DataType::Utf8, true),
        ],
        vec![names, schemas],
    )
}

/// Rows per table of `engine` (`pipeline.namespace`, each row once: the WAL above what
/// landed), of the pipelines named `only` (all: `None`).
///
/// # Errors
///
/// A table that cannot be scanned ([`QueryError::Scan`], ...).
pub fn row_counts(
    engine: &super::QueryEngine,
    only: &[&ValidatedPipeline],
) -> Result<Vec<(String, u64)>, QueryError> {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let mut rows = Vec::new();
    for table in engine.tables() {
        let Some((pipeline, namespace)) = table.split_once('.') else {
            continue;
        };
        if !only.iter().any(|p| p.name == pipeline) {
            continue;
        }
        let output = engine.sql(&format!(
            "SELECT count(*) FROM {}.{}",
            quote(pipeline),
            quote(namespace)
        ))?;
        let count = output
            .batches
            .first()
            .and_then(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .map(|a| a.value(0))
            })
            .unwrap_or(0);
        rows.push((table, u64::try_from(count).unwrap_or(0)));
    }
    Ok(rows)
}

/// `SHOW STATS`' result: one row per table, `table` (`pipeline.namespace`) and `rows`.
pub fn stats(rows: &[(String, u64)]) -> Result<QueryOutput, QueryError> {
    let tables: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
    ));
    let counts: ArrayRef = Arc::new(UInt64Array::from(
        rows.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
    ));
    output(
        vec![
            Field::new("table", DataType::Utf8, false),
            Field::new("rows", DataType::UInt64, false),
        ],
        vec![tables, counts],
    )
}

/// A two-column `field`/`value` result (what `RESET PIPELINE` cleared).
pub fn fields(rows: &[(&str, String)]) -> Result<QueryOutput, QueryError> {
    let keys: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
    ));
    let values: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>(),
    ));
    output(
        vec![
            Field::new("field", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, false),
        ],
        vec![keys, values],
    )
}

fn output(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<QueryOutput, QueryError> {
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
        QueryError::Sql(datafusion::error::DataFusionError::ArrowError(
            Box::new(e),
            None,
        ))
    })?;
    Ok(QueryOutput {
        schema,
        batches: vec![batch],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_management_statements_parse_in_any_case_with_or_without_a_semicolon() {
        assert_eq!(
            parse("SHOW PIPELINES").unwrap(),
            Some(Statement::ShowPipelines)
        );
        assert_eq!(
            parse("  show pipelines ;").unwrap(),
            Some(Statement::ShowPipelines)
        );
        assert_eq!(
            parse("show stats").unwrap(),
            Some(Statement::ShowStats(None))
        );
        assert_eq!(
            parse("SHOW STATS events").unwrap(),
            Some(Statement::ShowStats(Some("events".to_owned())))
        );
        assert_eq!(
            parse("schema dump").unwrap(),
            Some(Statement::SchemaDump(None))
        );
        assert_eq!(
            parse("SCHEMA DUMP 'events';").unwrap(),
            Some(Statement::SchemaDump(Some("events".to_owned())))
        );
        assert_eq!(
            parse("reset pipeline `events`").unwrap(),
            Some(Statement::ResetPipeline("events".to_owned()))
        );
    }

    #[test]
    fn sql_and_datafusions_own_show_statements_go_to_the_engine() {
        for sql in [
            "select * from events.order",
            "SHOW TABLES",
            "show columns from events.order",
            "SHOW ALL",
            "show datafusion.execution.batch_size",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "",
        ] {
            assert_eq!(parse(sql).unwrap(), None, "{sql}");
        }
    }

    #[test]
    fn other_management_statements_are_not_supported_naming_the_statement() {
        for sql in [
            "RESET TABLE events.order",
            "RESET PIPELINE",
            "RESET PIPELINE a b",
            "SCHEMA APPLY events",
            "SHOW NAMESPACES",
            "SHOW PIPELINES now",
            "DROP PIPELINE events",
            "create pipeline x",
        ] {
            let error = parse(sql).unwrap_err();
            assert!(error.is_config(), "{sql}: a usage error (exit 2)");
            let message = error.to_string();
            assert!(
                message.contains(sql.trim_end_matches(';')),
                "{sql}: {message}"
            );
            assert!(message.contains("not supported"), "{message}");
        }
    }
}
