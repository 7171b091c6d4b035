//! SQL through Amazon Athena, over the Glue tables an `Athena` or `AthenaIceberg` sink lands.
//!
//! [`AthenaEngine::sql`] runs one statement: `StartQueryExecution` in the sink's Glue database
//! (and its workgroup and results bucket when the sink names them), then `GetQueryExecution`
//! with exponential backoff ([`AthenaOptions::first_poll`] doubling up to
//! [`AthenaOptions::max_poll`]) until the query ends or [`AthenaOptions::timeout`] passes (then
//! the query is stopped, so it costs no more), then `GetQueryResults` page by page
//! (`NextToken`). The result is a [`QueryOutput`], printed like the local engine's.
//!
//! Athena sends every value as text. The result's column types say what it is:
//! `tinyint`/`smallint`/`integer`/`bigint` become 64-bit integers, `double`/`float`/`real`
//! 64-bit floats, `boolean` booleans; every other type (`decimal` included, so no digit is lost,
//! `date`, `timestamp`, `varchar`, `array`, `map`, `row`, ...) stays the text Athena sent. A
//! missing value is null.
//!
//! Athena repeats the column names as the first row of a `SELECT`'s first page: for statements
//! of type `DML` that row is dropped when it equals the column names. Other statements
//! (`SHOW`, `DESCRIBE`, ...) have no such row.
//!
//! Only statements that read are sent (by their first keyword: `SELECT`, `WITH`, `VALUES`,
//! `TABLE`, `SHOW`, `DESCRIBE`, `EXPLAIN`): an `INSERT` or `DELETE` through Athena would
//! change the sink's Iceberg tables behind its exactly-once commit protocol.
//!
//! The three calls go through a small trait so the polling, paging and error paths are tested
//! in process, with a fake clock (`tests.rs`); the real SDK is tested against moto
//! (`local/tests/athena.rs`), which runs no SQL and never reports `FAILED`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use super::QueryOutput;
use crate::aws::{Aws, SdkFailure};
use crate::config::validate::ValidatedPipeline;
use crate::config::validate::{DestinationKind, LakeCatalog};

#[cfg(test)]
mod tests;

/// Where results go under `athena_results_s3_bucket`.
const RESULTS_PREFIX: &str = "skipprd-query-results/";

/// Why a statement could not run through Athena.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AthenaError {
    /// A selected pipeline does not land in Athena-readable tables (exit code 2).
    #[error(
        "pipeline '{pipeline}': `--engine athena` needs an Athena or AthenaIceberg data sink, but {found}; choose a pipeline with one (-p NAME) or use the local engine"
    )]
    NotAthena {
        /// The pipeline.
        pipeline: String,
        /// What it has instead.
        found: String,
    },
    /// The selected pipelines land in different Glue databases, workgroups or regions (exit
    /// code 2).
    #[error(
        "pipelines '{first}' and '{second}' query Athena differently ({difference}); choose one with -p NAME"
    )]
    Ambiguous {
        /// One pipeline.
        first: String,
        /// Another.
        second: String,
        /// What differs.
        difference: String,
    },
    /// The AWS configuration could not be loaded.
    #[error("AWS: {0}")]
    Aws(#[from] crate::aws::AwsError),
    /// `StartQueryExecution` failed.
    #[error("Athena did not start the query: {failure}")]
    Start {
        /// The SDK failure.
        failure: SdkFailure,
    },
    /// `GetQueryExecution` failed with an error that is not worth polling through.
    #[error("Athena query {query_execution_id}: could not read its state: {failure}")]
    Poll {
        /// The query.
        query_execution_id: String,
        /// The SDK failure.
        failure: SdkFailure,
    },
    /// `GetQueryResults` failed.
    #[error("Athena query {query_execution_id}: could not read its results: {failure}")]
    Results {
        /// The query.
        query_execution_id: String,
        /// The SDK failure.
        failure: SdkFailure,
    },
    /// The query ended `FAILED` or `CANCELLED`.
    #[error("Athena query {query_execution_id} {state}: {reason}")]
    Failed {
        /// The query.
        query_execution_id: String,
        /// `FAILED` or `CANCELLED`.
        state: String,
        /// Athena's `StateChangeReason` and error message (or `no reason given`).
        reason: String,
        /// Whether Athena marked the failure retryable.
        retryable: bool,
    },
    /// The query did not end within the timeout; it was asked to stop.
    #[error(
        "Athena query {query_execution_id} still {state} after {}s (the timeout); it was asked to stop",
        waited.as_secs()
    )]
    Timeout {
        /// The query.
        query_execution_id: String,
        /// Its last state seen.
        state: String,
        /// How long it was waited for.
        waited: Duration,
    },
    /// A value does not read as its column's type.
    #[error(
        "Athena query {query_execution_id}: column '{column}' is {column_type} but has the value '{value}'"
    )]
    Value {
        /// The query.
        query_execution_id: String,
        /// The column.
        column: String,
        /// Its Athena type.
        column_type: String,
        /// The value.
        value: String,
    },
    /// The statement could change data or tables; only reading statements are sent.
    #[error(
        "`{keyword}` statements are not run through Athena by skipprd query (it only reads: SELECT, WITH, VALUES, TABLE, SHOW, DESCRIBE, EXPLAIN); writing to the sink's tables would bypass its exactly-once commit protocol"
    )]
    Refused {
        /// The statement's first keyword, upper-cased.
        keyword: String,
    },
    /// The result could not be assembled.
    #[error("Athena query {query_execution_id}: {message}")]
    Result {
        /// The query.
        query_execution_id: String,
        /// What went wrong.
        message: String,
    },
}

impl AthenaError {
    /// Whether running the same statement again may succeed: throttling, a 5xx or a transport
    /// error, a failure Athena marks retryable, or a timeout.
    pub fn is_retryable(&self) -> bool {
        match self {
            AthenaError::Start { failure }
            | AthenaError::Poll { failure, .. }
            | AthenaError::Results { failure, .. } => failure.retryable,
            AthenaError::Failed { retryable, .. } => *retryable,
            AthenaError::Timeout { .. } => true,
            AthenaError::NotAthena { .. }
            | AthenaError::Ambiguous { .. }
            | AthenaError::Aws(_)
            | AthenaError::Value { .. }
            | AthenaError::Refused { .. }
            | AthenaError::Result { .. } => false,
        }
    }

    /// Whether the command line or configuration must change (exit code 2).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            AthenaError::NotAthena { .. } | AthenaError::Ambiguous { .. }
        )
    }
}

/// Where statements run: taken from the pipelines' `AthenaIceberg` sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AthenaTarget {
    /// The Glue database (the default database of every statement).
    pub database: String,
    /// The workgroup; Athena's default (`primary`) when `None`.
    pub workgroup: Option<String>,
    /// `s3://bucket/prefix/` for results; the workgroup's setting when `None`.
    pub output_location: Option<String>,
    /// The region; the environment's when `None`.
    pub region: Option<String>,
}

impl AthenaTarget {
    /// The target of `pipelines`: each must have an `AthenaIceberg` sink, and all must agree
    /// on database, workgroup, results bucket and region.
    ///
    /// # Errors
    ///
    /// [`AthenaError::NotAthena`] naming a pipeline without one, [`AthenaError::Ambiguous`].
    pub fn for_pipelines(pipelines: &[&ValidatedPipeline]) -> Result<AthenaTarget, AthenaError> {
        let mut chosen: Option<(&str, AthenaTarget)> = None;
        for pipeline in pipelines {
            let target = Self::for_pipeline(pipeline)?;
            match &chosen {
                None => chosen = Some((&pipeline.name, target)),
                Some((first, existing)) => {
                    if let Some(difference) = existing.difference(&target) {
                        return Err(AthenaError::Ambiguous {
                            first: (*first).to_owned(),
                            second: pipeline.name.clone(),
                            difference,
                        });
                    }
                }
            }
        }
        chosen
            .map(|(_, target)| target)
            .ok_or_else(|| AthenaError::NotAthena {
                pipeline: "(none)".to_owned(),
                found: "no pipeline was selected".to_owned(),
            })
    }

    fn for_pipeline(pipeline: &ValidatedPipeline) -> Result<AthenaTarget, AthenaError> {
        let not_athena = |found: String| AthenaError::NotAthena {
            pipeline: pipeline.name.clone(),
            found,
        };
        if let Some(crate::config::validate::FileDestination {
            kind: crate::config::validate::FileDestinationKind::Athena(t),
            ..
        }) = &pipeline.files
        {
            return Ok(AthenaTarget {
                database: t.database.clone(),
                workgroup: t.workgroup.clone(),
                output_location: t
                    .results_bucket
                    .as_ref()
                    .map(|bucket| format!("s3://{bucket}/{RESULTS_PREFIX}")),
                region: t.region.clone(),
            });
        }
        let Some(destination) = &pipeline.destination else {
            return Err(not_athena("it has no data_sink".to_owned()));
        };
        let (
            DestinationKind::AthenaIceberg {
                workgroup,
                results_bucket,
            },
            LakeCatalog::Glue { region, .. },
        ) = (&destination.kind, &destination.location.catalog)
        else {
            return Err(not_athena(format!(
                "its data_sink '{}' is {}",
                destination.name,
                destination.kind.type_name()
            )));
        };
        Ok(AthenaTarget {
            database: destination.location.namespace.clone(),
            workgroup: workgroup.clone(),
            output_location: results_bucket
                .as_ref()
                .map(|bucket| format!("s3://{bucket}/{RESULTS_PREFIX}")),
            region: region.clone(),
        })
    }

    /// What differs between two targets, if anything.
    fn difference(&self, other: &AthenaTarget) -> Option<String> {
        let show = |value: &Option<String>| value.clone().unwrap_or_else(|| "default".to_owned());
        if self.database != other.database {
            Some(format!(
                "Glue database {} vs {}",
                self.database, other.database
            ))
        } else if self.workgroup != other.workgroup {
            Some(format!(
                "workgroup {} vs {}",
                show(&self.workgroup),
                show(&other.workgroup)
            ))
        } else if self.output_location != other.output_location {
            Some(format!(
                "results location {} vs {}",
                show(&self.output_location),
                show(&other.output_location)
            ))
        } else if self.region != other.region {
            Some(format!(
                "region {} vs {}",
                show(&self.region),
                show(&other.region)
            ))
        } else {
            None
        }
    }
}

/// How long to wait, how often to ask, how many rows per page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AthenaOptions {
    /// Give up (and stop the query) when it has not ended after this long. Default 5 minutes.
    pub timeout: Duration,
    /// Wait before the first state check; doubled after each check. Default 100 ms.
    pub first_poll: Duration,
    /// The longest wait between two state checks. Default 2 s.
    pub max_poll: Duration,
    /// Rows asked for per `GetQueryResults` call, 1 to 1000 (Athena's maximum). Default 1000.
    pub page_size: i32,
}

impl Default for AthenaOptions {
    fn default() -> Self {
        AthenaOptions {
            timeout: Duration::from_secs(300),
            first_poll: Duration::from_millis(100),
            max_poll: Duration::from_secs(2),
            page_size: 1000,
        }
    }
}

/// A query's state, as `GetQueryExecution` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Other(String),
}

impl State {
    fn as_str(&self) -> &str {
        match self {
            State::Queued => "QUEUED",
            State::Running => "RUNNING",
            State::Succeeded => "SUCCEEDED",
            State::Failed => "FAILED",
            State::Cancelled => "CANCELLED",
            State::Other(other) => other,
        }
    }
}

/// What `GetQueryExecution` says about a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Execution {
    pub(crate) state: State,
    /// `Status.StateChangeReason`.
    pub(crate) reason: Option<String>,
    /// `Status.AthenaError.ErrorMessage`.
    pub(crate) error_message: Option<String>,
    /// `Status.AthenaError.Retryable`.
    pub(crate) retryable: bool,
    /// `DML`, `DDL` or `UTILITY`.
    pub(crate) statement_type: Option<String>,
    /// `Statistics.DataScannedInBytes`.
    pub(crate) data_scanned: Option<i64>,
}

/// One column of a result: `ColumnInfo.Name` and `ColumnInfo.Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) athena_type: String,
}

/// One row of a result: each value as Athena sent it (`None`: no value).
pub(crate) type Row = Vec<Option<String>>;

/// One `GetQueryResults` page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Page {
    pub(crate) columns: Vec<Column>,
    pub(crate) rows: Vec<Row>,
    pub(crate) next_token: Option<String>,
}

/// A statement to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start<'a> {
    pub(crate) sql: &'a str,
    pub(crate) target: &'a AthenaTarget,
}

/// The Athena calls the engine makes (the SDK, or a test double).
pub(crate) trait AthenaApi: Send + Sync {
    /// `StartQueryExecution`: the query execution id.
    fn start(&self, start: &Start<'_>) -> Result<String, SdkFailure>;
    /// `GetQueryExecution`.
    fn execution(&self, id: &str) -> Result<Execution, SdkFailure>;
    /// `GetQueryResults`.
    fn results(&self, id: &str, token: Option<&str>, max: i32) -> Result<Page, SdkFailure>;
    /// `StopQueryExecution`.
    fn stop(&self, id: &str) -> Result<(), SdkFailure>;
}

/// Time, for the polling loop (a fake one in tests).
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn sleep(&self, duration: Duration);
}

/// The real clock.
struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// Runs SQL through Athena in one Glue database. See the module docs.
pub struct AthenaEngine {
    api: Box<dyn AthenaApi>,
    clock: Box<dyn Clock>,
    target: AthenaTarget,
    options: AthenaOptions,
}

impl std::fmt::Debug for AthenaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AthenaEngine")
            .field("target", &self.target)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl AthenaEngine {
    /// An engine that sends statements to Athena for `target`, with the AWS configuration of
    /// the environment (see [`crate::aws`]) in the target's region.
    ///
    /// # Errors
    ///
    /// [`AthenaError::Aws`] when no region is set or the runtime cannot start.
    pub fn open(target: AthenaTarget, options: AthenaOptions) -> Result<AthenaEngine, AthenaError> {
        let aws = Aws::load(target.region.as_deref())?;
        let client = aws.athena();
        Ok(Self::with_api(
            Box::new(SdkApi { aws, client }),
            Box::new(SystemClock),
            target,
            options,
        ))
    }

    /// An engine over any implementation of the calls, with any clock.
    pub(crate) fn with_api(
        api: Box<dyn AthenaApi>,
        clock: Box<dyn Clock>,
        target: AthenaTarget,
        options: AthenaOptions,
    ) -> AthenaEngine {
        let page_size = options.page_size.clamp(1, 1000);
        AthenaEngine {
            api,
            clock,
            target,
            options: AthenaOptions {
                page_size,
                ..options
            },
        }
    }

    /// Where statements run.
    pub fn target(&self) -> &AthenaTarget {
        &self.target
    }

    /// Run one statement and collect its whole result.
    ///
    /// # Errors
    ///
    /// [`AthenaError::Start`], [`AthenaError::Poll`], [`AthenaError::Results`] when a call
    /// fails; [`AthenaError::Failed`] when the query ends `FAILED` or `CANCELLED`;
    /// [`AthenaError::Timeout`]; [`AthenaError::Value`] for a value that does not read as its
    /// column's type; [`AthenaError::Refused`] for a statement that is not a reading one
    /// (checked by its first keyword, before anything is sent).
    pub fn sql(&self, sql: &str) -> Result<QueryOutput, AthenaError> {
        let keyword = first_keyword(sql).to_ascii_uppercase();
        if !READING_STATEMENTS.contains(&keyword.as_str()) {
            return Err(AthenaError::Refused { keyword });
        }
        let id = self
            .api
            .start(&Start {
                sql,
                target: &self.target,
            })
            .map_err(|failure| AthenaError::Start { failure })?;
        tracing::info!(query_execution_id = %id, database = %self.target.database, "Athena query started.");
        let execution = self.wait(&id)?;
        if let Some(bytes) = execution.data_scanned {
            tracing::info!(query_execution_id = %id, data_scanned_bytes = bytes, "Athena query succeeded.");
        }
        let (columns, rows) = self.fetch(&id, execution.statement_type.as_deref())?;
        to_output(&id, &columns, rows)
    }

    /// Poll until the query ends; the final execution when it succeeded.
    fn wait(&self, id: &str) -> Result<Execution, AthenaError> {
        let started = self.clock.now();
        let mut delay = self.options.first_poll;
        let mut last_state = State::Queued;
        loop {
            self.clock.sleep(delay);
            delay = (delay * 2).min(self.options.max_poll);
            match self.api.execution(id) {
                Ok(execution) => {
                    if execution.state != last_state {
                        tracing::info!(
                            query_execution_id = %id,
                            state = execution.state.as_str(),
                            waited_ms = self.elapsed_ms(started),
                            "Athena query state."
                        );
                        last_state = execution.state.clone();
                    } else {
                        tracing::debug!(
                            query_execution_id = %id,
                            state = execution.state.as_str(),
                            waited_ms = self.elapsed_ms(started),
                            "Athena query still running."
                        );
                    }
                    match execution.state {
                        State::Succeeded => return Ok(execution),
                        State::Failed | State::Cancelled => {
                            return Err(failed(id, &execution));
                        }
                        State::Queued | State::Running | State::Other(_) => {}
                    }
                }
                Err(failure) if failure.retryable => {
                    tracing::warn!(query_execution_id = %id, error = %failure, "Could not read the Athena query's state; asking again.");
                }
                Err(failure) => {
                    return Err(AthenaError::Poll {
                        query_execution_id: id.to_owned(),
                        failure,
                    });
                }
            }
            let waited = self.clock.now().saturating_duration_since(started);
            if waited >= self.options.timeout {
                if let Err(failure) = self.api.stop(id) {
                    tracing::warn!(query_execution_id = %id, error = %failure, "Could not stop the Athena query after the timeout.");
                }
                return Err(AthenaError::Timeout {
                    query_execution_id: id.to_owned(),
                    state: last_state.as_str().to_owned(),
                    waited,
                });
            }
            delay = delay.min(self.options.timeout - waited);
        }
    }

    fn elapsed_ms(&self, since: Instant) -> u128 {
        self.clock
            .now()
            .saturating_duration_since(since)
            .as_millis()
    }

    /// Every page of the result: the columns and the rows, without Athena's header row.
    fn fetch(
        &self,
        id: &str,
        statement_type: Option<&str>,
    ) -> Result<(Vec<Column>, Vec<Row>), AthenaError> {
        let header_row = statement_type.is_none_or(|kind| kind.eq_ignore_ascii_case("DML"));
        let mut columns: Option<Vec<Column>> = None;
        let mut rows = Vec::new();
        let mut token: Option<String> = None;
        let mut pages = 0u64;
        loop {
            let page = self.page(id, token.as_deref())?;
            pages += 1;
            let mut page_rows = page.rows;
            if pages == 1 {
                let mut page_columns = page.columns;
                if header_row && let Some(first) = page_rows.first() {
                    if page_columns.is_empty() {
                        // No column metadata: the header row is all there is.
                        page_columns = first
                            .iter()
                            .map(|name| Column {
                                name: name.clone().unwrap_or_default(),
                                athena_type: "varchar".to_owned(),
                            })
                            .collect();
                        page_rows.remove(0);
                    } else if is_header(first, &page_columns) {
                        page_rows.remove(0);
                    } else {
                        tracing::warn!(query_execution_id = %id, "The first row of the result is not the column names; kept as data.");
                    }
                }
                columns = Some(page_columns);
            }
            rows.extend(page_rows);
            match page.next_token {
                Some(next) if !next.is_empty() => {
                    if token.as_deref() == Some(next.as_str()) {
                        return Err(AthenaError::Result {
                            query_execution_id: id.to_owned(),
                            message: "GetQueryResults returned the same NextToken twice".to_owned(),
                        });
                    }
                    token = Some(next);
                }
                _ => break,
            }
        }
        tracing::debug!(query_execution_id = %id, pages, rows = rows.len(), "Athena results read.");
        Ok((columns.unwrap_or_default(), rows))
    }

    /// One page; a retryable failure is tried again up to 3 times, with backoff.
    fn page(&self, id: &str, token: Option<&str>) -> Result<Page, AthenaError> {
        let mut delay = self.options.first_poll;
        let mut attempt = 1;
        loop {
            match self.api.results(id, token, self.options.page_size) {
                Ok(page) => return Ok(page),
                Err(failure) if failure.retryable && attempt < 4 => {
                    tracing::warn!(query_execution_id = %id, attempt, error = %failure, "Could not read a page of Athena results; trying again.");
                    self.clock.sleep(delay);
                    delay = (delay * 2).min(self.options.max_poll);
                    attempt += 1;
                }
                Err(failure) => {
                    return Err(AthenaError::Results {
                        query_execution_id: id.to_owned(),
                        failure,
                    });
                }
            }
        }
    }
}

/// The first keywords of statements that only read.
const READING_STATEMENTS: &[&str] = &[
    "SELECT", "WITH", "VALUES", "TABLE", "SHOW", "DESCRIBE", "DESC", "EXPLAIN",
];

/// The statement's first word, after whitespace, `(`, and `--` / `/* */` comments.
fn first_keyword(sql: &str) -> &str {
    let mut rest = sql;
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(comment) = trimmed.strip_prefix("--") {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(comment) = trimmed.strip_prefix("/*") {
            rest = comment.split_once("*/").map_or("", |(_, after)| after);
        } else {
            let end = trimmed
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(trimmed.len());
            return &trimmed[..end];
        }
    }
}

/// The error for a query that ended `FAILED` or `CANCELLED`.
fn failed(id: &str, execution: &Execution) -> AthenaError {
    let mut parts: Vec<&str> = Vec::new();
    if let Some(reason) = execution.reason.as_deref().filter(|r| !r.is_empty()) {
        parts.push(reason);
    }
    if let Some(message) = execution.error_message.as_deref().filter(|m| !m.is_empty())
        && !parts.contains(&message)
    {
        parts.push(message);
    }
    AthenaError::Failed {
        query_execution_id: id.to_owned(),
        state: execution.state.as_str().to_owned(),
        reason: if parts.is_empty() {
            "no reason given".to_owned()
        } else {
            parts.join("; ")
        },
        retryable: execution.retryable,
    }
}

/// Whether `row` is the column names.
fn is_header(row: &[Option<String>], columns: &[Column]) -> bool {
    row.len() == columns.len()
        && row
            .iter()
            .zip(columns)
            .all(|(value, column)| value.as_deref() == Some(column.name.as_str()))
}

/// How a column's values are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Float,
    Boolean,
    Text,
}

fn kind(athena_type: &str) -> Kind {
    match athena_type.trim().to_ascii_lowercase().as_str() {
        "tinyint" | "smallint" | "integer" | "int" | "bigint" => Kind::Integer,
        "double" | "float" | "real" => Kind::Float,
        "boolean" => Kind::Boolean,
        _ => Kind::Text,
    }
}

/// The rows as one Arrow batch typed by the columns' Athena types.
fn to_output(id: &str, columns: &[Column], rows: Vec<Row>) -> Result<QueryOutput, AthenaError> {
    let bad_value = |column: &Column, value: &str| AthenaError::Value {
        query_execution_id: id.to_owned(),
        column: column.name.clone(),
        column_type: column.athena_type.clone(),
        value: value.to_owned(),
    };
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (index, column) in columns.iter().enumerate() {
        let values = rows.iter().map(|row| row.get(index).cloned().flatten());
        let (data_type, array): (DataType, ArrayRef) = match kind(&column.athena_type) {
            Kind::Integer => {
                let parsed = values
                    .map(|value| {
                        value
                            .map(|v| v.trim().parse::<i64>().map_err(|_| bad_value(column, &v)))
                            .transpose()
                    })
                    .collect::<Result<Int64Array, _>>()?;
                (DataType::Int64, Arc::new(parsed))
            }
            Kind::Float => {
                let parsed = values
                    .map(|value| {
                        value
                            .map(|v| v.trim().parse::<f64>().map_err(|_| bad_value(column, &v)))
                            .transpose()
                    })
                    .collect::<Result<Float64Array, _>>()?;
                (DataType::Float64, Arc::new(parsed))
            }
            Kind::Boolean => {
                let parsed = values
                    .map(|value| {
                        value
                            .map(|v| match v.trim().to_ascii_lowercase().as_str() {
                                "true" => Ok(true),
                                "false" => Ok(false),
                                _ => Err(bad_value(column, &v)),
                            })
                            .transpose()
                    })
                    .collect::<Result<BooleanArray, _>>()?;
                (DataType::Boolean, Arc::new(parsed))
            }
            Kind::Text => (DataType::Utf8, Arc::new(values.collect::<StringArray>())),
        };
        fields.push(Field::new(column.name.clone(), data_type, true));
        arrays.push(array);
    }
    let schema = Arc::new(Schema::new(fields));
    let batches = if columns.is_empty() || rows.is_empty() {
        Vec::new()
    } else {
        vec![
            RecordBatch::try_new(schema.clone(), arrays).map_err(|e| AthenaError::Result {
                query_execution_id: id.to_owned(),
                message: e.to_string(),
            })?,
        ]
    };
    Ok(QueryOutput { schema, batches })
}

/// The calls, through the AWS SDK.
struct SdkApi {
    aws: Aws,
    client: aws_sdk_athena::Client,
}

impl AthenaApi for SdkApi {
    fn start(&self, start: &Start<'_>) -> Result<String, SdkFailure> {
        use aws_sdk_athena::types::{QueryExecutionContext, ResultConfiguration};
        let mut request = self
            .client
            .start_query_execution()
            .query_string(start.sql)
            .query_execution_context(
                QueryExecutionContext::builder()
                    .database(&start.target.database)
                    .build(),
            );
        if let Some(workgroup) = &start.target.workgroup {
            request = request.work_group(workgroup);
        }
        if let Some(location) = &start.target.output_location {
            request = request.result_configuration(
                ResultConfiguration::builder()
                    .output_location(location)
                    .build(),
            );
        }
        let output = self
            .aws
            .block_on(request.send())
            .map_err(|e| SdkFailure::from_sdk(&e))?;
        output
            .query_execution_id()
            .map(str::to_owned)
            .ok_or_else(|| SdkFailure {
                code: "response".to_owned(),
                status: None,
                message: "StartQueryExecution returned no QueryExecutionId".to_owned(),
                retryable: false,
            })
    }

    fn execution(&self, id: &str) -> Result<Execution, SdkFailure> {
        use aws_sdk_athena::types::QueryExecutionState;
        let output = self
            .aws
            .block_on(
                self.client
                    .get_query_execution()
                    .query_execution_id(id)
                    .send(),
            )
            .map_err(|e| SdkFailure::from_sdk(&e))?;
        let execution = output.query_execution();
        let status = execution.and_then(|e| e.status());
        let state = match status.and_then(|s| s.state()) {
            Some(QueryExecutionState::Queued) => State::Queued,
            Some(QueryExecutionState::Running) => State::Running,
            Some(QueryExecutionState::Succeeded) => State::Succeeded,
            Some(QueryExecutionState::Failed) => State::Failed,
            Some(QueryExecutionState::Cancelled) => State::Cancelled,
            Some(other) => State::Other(other.as_str().to_owned()),
            None => State::Other("UNKNOWN".to_owned()),
        };
        let error = status.and_then(|s| s.athena_error());
        Ok(Execution {
            state,
            reason: status
                .and_then(|s| s.state_change_reason())
                .map(str::to_owned),
            error_message: error.and_then(|e| e.error_message()).map(str::to_owned),
            retryable: error.is_some_and(|e| e.retryable()),
            statement_type: execution
                .and_then(|e| e.statement_type())
                .map(|t| t.as_str().to_owned()),
            data_scanned: execution
                .and_then(|e| e.statistics())
                .and_then(|s| s.data_scanned_in_bytes()),
        })
    }

    fn results(&self, id: &str, token: Option<&str>, max: i32) -> Result<Page, SdkFailure> {
        let output = self
            .aws
            .block_on(
                self.client
                    .get_query_results()
                    .query_execution_id(id)
                    .set_next_token(token.map(str::to_owned))
                    .max_results(max)
                    .send(),
            )
            .map_err(|e| SdkFailure::from_sdk(&e))?;
        let result_set = output.result_set();
        let columns = result_set
            .and_then(|r| r.result_set_metadata())
            .map(|m| {
                m.column_info()
                    .iter()
                    .map(|c| Column {
                        name: c.name().to_owned(),
                        athena_type: c.r#type().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let rows = result_set
            .map(|r| {
                r.rows()
                    .iter()
                    .map(|row| {
                        row.data()
                            .iter()
                            .map(|datum| datum.var_char_value().map(str::to_owned))
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Page {
            columns,
            rows,
            next_token: output.next_token().map(str::to_owned),
        })
    }

    fn stop(&self, id: &str) -> Result<(), SdkFailure> {
        self.aws
            .block_on(
                self.client
                    .stop_query_execution()
                    .query_execution_id(id)
                    .send(),
            )
            .map(|_| ())
            .map_err(|e| SdkFailure::from_sdk(&e))
    }
}
