//! `skipprd query`: run SQL over the pipelines' committed WAL batches (or, with `--engine
//! athena`, through Amazon Athena), once (`--sql`), again and again (`--watch N`), or at an
//! interactive `sql>` prompt.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use skipprd::config::{ValidatedConfig, ValidatedPipeline};
use skipprd::query::athena::AthenaEngine;
use skipprd::query::manage::{self, Statement};
use skipprd::query::{QueryEngine, QueryError, QueryOutput};
use skipprd::schema::{SchemaError, SchemaStore};

/// The engine statements run on.
#[derive(Debug)]
pub enum Engine {
    /// DataFusion over the WALs and landed tables.
    Local(QueryEngine),
    /// Amazon Athena over the sink's Glue database.
    Athena(AthenaEngine),
}

impl Engine {
    /// Run one statement.
    fn sql(&self, sql: &str) -> Result<QueryOutput, QueryError> {
        match self {
            Engine::Local(engine) => engine.sql(sql),
            Engine::Athena(engine) => engine.sql(sql).map_err(QueryError::from),
        }
    }

    /// Read the WALs again (Athena reads the tables as they are at each statement anyway).
    fn refresh(&mut self) -> Result<(), QueryError> {
        match self {
            Engine::Local(engine) => engine.refresh(),
            Engine::Athena(_) => Ok(()),
        }
    }

    /// The first lines the prompt shows.
    fn banner(&self) -> String {
        match self {
            Engine::Local(engine) => {
                let tables = engine.tables();
                format!(
                    "{} table{}: {}",
                    tables.len(),
                    if tables.len() == 1 { "" } else { "s" },
                    if tables.is_empty() {
                        "(none yet: no committed batches)".to_owned()
                    } else {
                        tables.join(", ")
                    }
                )
            }
            Engine::Athena(engine) => format!(
                "Athena, Glue database {} (workgroup {}): every statement runs in Athena and is billed by the data it scans",
                engine.target().database,
                engine.target().workgroup.as_deref().unwrap_or("primary")
            ),
        }
    }
}

/// An engine with what the management statements ([`manage`]) need: the config and the
/// pipelines queried.
pub struct Session<'a> {
    /// Where SQL runs.
    pub engine: Engine,
    /// The config (for `SCHEMA DUMP`, `RESET PIPELINE`).
    pub config: &'a ValidatedConfig,
    /// The pipelines queried.
    pub pipelines: Vec<&'a ValidatedPipeline>,
    /// `--yes`: `RESET PIPELINE` runs without asking.
    pub yes: bool,
    /// At the interactive prompt: `RESET PIPELINE` asks on the terminal.
    pub interactive: bool,
}

impl Session<'_> {
    /// Run one statement: a management statement here, anything else on the engine.
    fn sql(&mut self, sql: &str) -> Result<QueryOutput, QueryError> {
        match manage::parse(sql)? {
            None => self.engine.sql(sql),
            Some(statement) => self.manage(statement),
        }
    }

    fn refresh(&mut self) -> Result<(), QueryError> {
        self.engine.refresh()
    }

    fn manage(&mut self, statement: Statement) -> Result<QueryOutput, QueryError> {
        match statement {
            Statement::ShowPipelines => manage::show_pipelines(&self.pipelines),
            Statement::ShowStats(name) => {
                let chosen = manage::chosen(&self.pipelines, name.as_deref())?;
                match &self.engine {
                    Engine::Local(engine) => manage::stats(&manage::row_counts(engine, &chosen)?),
                    Engine::Athena(_) => Err(QueryError::NotSupported {
                        statement: "SHOW STATS with --engine athena (run it with the local engine)"
                            .to_owned(),
                    }),
                }
            }
            Statement::SchemaDump(name) => {
                let chosen = manage::chosen(&self.pipelines, name.as_deref())?;
                let mut rows = Vec::with_capacity(chosen.len());
                for pipeline in chosen {
                    let store = skipprd::pipeline::discover::schema_store(
                        &self.config.settings,
                        pipeline,
                        None,
                    )
                    .map_err(failed)?;
                    let schema = match store.load() {
                        Ok(schema) => Some(schema.to_json_pretty()),
                        Err(SchemaError::NotFound { .. }) => None,
                        Err(e) => {
                            return Err(QueryError::Management {
                                message: format!("pipeline '{}': {e}", pipeline.name),
                                config: false,
                                retryable: false,
                            });
                        }
                    };
                    rows.push((pipeline.name.clone(), schema));
                }
                manage::schema_dump(&rows)
            }
            Statement::ResetPipeline(name) => {
                let chosen = manage::chosen(&self.pipelines, Some(&name))?;
                let Some(pipeline) = chosen.first() else {
                    return manage::fields(&[]);
                };
                if !self.yes && !self.confirmed(&pipeline.name) {
                    return Err(QueryError::Management {
                        message: format!(
                            "RESET PIPELINE {name} was not confirmed: it deletes the source position and the acknowledgements together and empties the WAL, so the next sync reads the source from its start (rows that landed are written again); run it with `query --yes`, or type y at the prompt"
                        ),
                        config: true,
                        retryable: false,
                    });
                }
                let options = skipprd::pipeline::ResetOptions {
                    confirm: true,
                    ..skipprd::pipeline::ResetOptions::default()
                };
                let report = skipprd::pipeline::reset(
                    self.config,
                    pipeline,
                    &options,
                    &mut skipprd::pipeline::events::Silent,
                )
                .map_err(failed)?;
                // The WAL was emptied under the engine: read it again.
                let _ = self.engine.refresh();
                let id = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
                manage::fields(&[
                    ("pipeline", pipeline.name.clone()),
                    ("position_batch", id(report.position_batch)),
                    ("acked", id(report.acked)),
                    ("deadletters_acked", id(report.deadletters_acked)),
                    ("wal_batches", report.wal_batches.to_string()),
                    ("floor", report.floor.to_string()),
                ])
            }
        }
    }

    /// Ask on the terminal whether to reset `pipeline` (never without one).
    fn confirmed(&self, pipeline: &str) -> bool {
        use std::io::{BufRead, IsTerminal};
        if !self.interactive || !std::io::stdin().is_terminal() {
            return false;
        }
        eprint!(
            "Reset pipeline '{pipeline}'? Its source position and acknowledgements are deleted and its WAL emptied; the next sync reads the source from its start. [y/N] "
        );
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).is_err() {
            return false;
        }
        matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    }
}

/// A pipeline command's error as a statement's.
fn failed(error: skipprd::pipeline::PipelineError) -> QueryError {
    QueryError::Management {
        message: error.to_string(),
        config: error.is_config(),
        retryable: error.is_retryable(),
    }
}

/// How a run of statements ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// A statement failed.
    pub failed: bool,
    /// A statement failed for a usage reason (exit 2: not supported, not confirmed).
    pub usage: bool,
}

impl Outcome {
    fn add(&mut self, error: Option<&QueryError>) {
        if let Some(error) = error {
            self.failed = true;
            self.usage |= error.is_config();
        }
    }
}

/// Run `skipprd query`. With `sql`, run that one statement (every `watch` seconds, reading the
/// WALs again first, until `stop` is set); without it, read statements at an interactive
/// prompt. Results go to standard output (an aligned table, or with `plain` one JSON line per
/// result), errors to standard error. Returns whether any statement failed.
///
/// # Errors
///
/// `--watch` without `--sql`, or a prompt that cannot be started.
pub fn run(
    session: &mut Session<'_>,
    sql: Option<&str>,
    plain: bool,
    watch: Option<u64>,
    stop: &AtomicBool,
) -> anyhow::Result<Outcome> {
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    match (sql, watch) {
        (Some(sql), None) => Ok(run_once(session, sql, plain, &mut out, &mut err)),
        (Some(sql), Some(every)) => Ok(run_watch(
            session,
            sql,
            plain,
            Duration::from_secs(every.max(1)),
            stop,
            &mut out,
            &mut err,
        )),
        (None, Some(_)) => anyhow::bail!("--watch needs a statement to run: give it with --sql"),
        (None, None) => {
            session.interactive = true;
            prompt(session, plain, stop)
        }
    }
}

/// Run `sql` and print its result; on failure print the error. Returns how it ended.
fn run_once(
    session: &mut Session<'_>,
    sql: &str,
    plain: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Outcome {
    let mut outcome = Outcome::default();
    match session.sql(sql) {
        Ok(output) => print_output(&output, plain, out),
        Err(error) => {
            print_error(&error, err);
            outcome.add(Some(&error));
        }
    }
    outcome
}

/// Re-run `sql` every `every` until `stop` is set. A statement that can never succeed (bad SQL,
/// an unknown table) stops the loop; a retryable failure (a segment reclaimed mid-read) does not.
fn run_watch(
    session: &mut Session<'_>,
    sql: &str,
    plain: bool,
    every: Duration,
    stop: &AtomicBool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let result = if first { Ok(()) } else { session.refresh() };
        first = false;
        let result = result.and_then(|()| session.sql(sql));
        match result {
            Ok(output) => {
                if !plain {
                    let _ = writeln!(
                        out,
                        "-- {} (every {}s) --",
                        chrono::Local::now().format("%Y-%m-%d %H:%M:%S"),
                        every.as_secs()
                    );
                }
                print_output(&output, plain, out);
            }
            Err(error) => {
                print_error(&error, err);
                outcome.add(Some(&error));
                if !error.is_retryable() {
                    return outcome;
                }
            }
        }
        while !stop.load(Ordering::Relaxed) && started.elapsed() < every {
            std::thread::sleep(Duration::from_millis(50).min(every - started.elapsed().min(every)));
        }
    }
    outcome
}

/// Print one result as `query` does: an aligned table and a row count, or with `plain` one
/// JSON line.
pub fn print_output(output: &QueryOutput, plain: bool, out: &mut dyn Write) {
    // A closed pipe (`| head`) is not an error.
    let _ = if plain {
        writeln!(out, "{}", output.to_plain_json())
    } else {
        let rows = output.rows();
        writeln!(
            out,
            "{}\n({rows} row{})",
            output.to_table(),
            if rows == 1 { "" } else { "s" }
        )
    };
    let _ = out.flush();
}

fn print_error(error: &QueryError, err: &mut dyn Write) {
    let _ = writeln!(err, "error: {error}");
}

/// What the prompt does with one line of input.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Keep reading: the statement is not finished.
    More,
    /// Run this statement.
    Run(String),
    /// List the tables.
    Tables,
    /// Leave.
    Exit,
    /// Nothing to do (an empty line with nothing buffered).
    Nothing,
}

/// Statements typed at the prompt, possibly over several lines. A statement ends with `;` at the
/// end of a line, or with an empty line.
#[derive(Debug, Default)]
struct Buffer {
    text: String,
}

impl Buffer {
    fn push(&mut self, line: &str) -> Step {
        let trimmed = line.trim();
        if self.text.is_empty() {
            let command = trimmed.trim_end_matches(';').trim();
            match command.to_ascii_lowercase().as_str() {
                "" => return Step::Nothing,
                "exit" | "quit" | "\\q" => return Step::Exit,
                "\\d" | "tables" => return Step::Tables,
                _ => {}
            }
        }
        if trimmed.is_empty() {
            return Step::Run(std::mem::take(&mut self.text));
        }
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text.push_str(line);
        if trimmed.ends_with(';') {
            let statement = std::mem::take(&mut self.text);
            let statement = statement
                .trim_end()
                .trim_end_matches(';')
                .trim_end()
                .to_owned();
            if statement.trim().is_empty() {
                return Step::Nothing;
            }
            return Step::Run(statement);
        }
        Step::More
    }

    fn clear(&mut self) {
        self.text.clear();
    }

    fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// The interactive prompt. Before each statement the WALs are read again, so it sees batches a
/// running `sync` commits.
fn prompt(session: &mut Session<'_>, plain: bool, stop: &AtomicBool) -> anyhow::Result<Outcome> {
    let mut editor = DefaultEditor::new()?;
    let history = history_file();
    if let Some(path) = &history {
        // No history yet is fine.
        let _ = editor.load_history(path);
    }
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "{}\nEnd a statement with ; or an empty line. \\d lists the tables; SHOW PIPELINES, SHOW STATS, SCHEMA DUMP and RESET PIPELINE <name> manage; exit, quit or Ctrl-D leaves.",
        session.engine.banner()
    );
    let mut buffer = Buffer::default();
    let mut outcome = Outcome::default();
    while !stop.load(Ordering::Relaxed) {
        let prompt = if buffer.is_empty() { "sql> " } else { "  -> " };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            // Ctrl-C drops the statement being typed.
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(error) => return Err(error.into()),
        };
        match buffer.push(&line) {
            Step::More | Step::Nothing => {}
            Step::Exit => break,
            Step::Tables => {
                if let Engine::Athena(_) = session.engine {
                    let once = run_once(session, "SHOW TABLES", plain, &mut out, &mut err);
                    outcome.failed |= once.failed;
                } else {
                    refresh(session, &mut err);
                    if let Engine::Local(local) = &session.engine {
                        for table in local.tables() {
                            let _ = writeln!(out, "{table}");
                        }
                    }
                }
            }
            Step::Run(statement) => {
                let _ = editor.add_history_entry(statement.as_str());
                refresh(session, &mut err);
                let once = run_once(session, &statement, plain, &mut out, &mut err);
                outcome.failed |= once.failed;
                outcome.usage |= once.usage;
            }
        }
    }
    if let Some(path) = &history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(error) = editor.save_history(path) {
            tracing::debug!(path = %path.display(), %error, "Could not save the query history.");
        }
    }
    Ok(outcome)
}

/// Read the WALs again; on failure say so and keep the tables as they were.
fn refresh(session: &mut Session<'_>, err: &mut dyn Write) {
    if let Err(error) = session.refresh() {
        let _ = writeln!(
            err,
            "warning: could not re-read the WAL, showing the data read before: {error}"
        );
    }
}

/// `~/.skippr/history`, when there is a home directory.
fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(".skippr").join("history"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_runs_at_a_semicolon_or_an_empty_line_and_exit_leaves() {
        let mut buffer = Buffer::default();
        assert_eq!(buffer.push("select 1;"), Step::Run("select 1".to_owned()));
        assert_eq!(buffer.push("select"), Step::More);
        assert_eq!(buffer.push("  2 ;  "), Step::Run("select\n  2".to_owned()));
        assert_eq!(buffer.push("select 3"), Step::More);
        assert_eq!(buffer.push(""), Step::Run("select 3".to_owned()));
        assert_eq!(buffer.push(""), Step::Nothing);
        assert_eq!(buffer.push(";"), Step::Nothing);
        assert_eq!(buffer.push("\\d"), Step::Tables);
        assert_eq!(buffer.push("QUIT;"), Step::Exit);
        assert_eq!(buffer.push("exit"), Step::Exit);
        // Inside a statement, `exit` is just text.
        assert_eq!(buffer.push("select"), Step::More);
        assert_eq!(buffer.push("exit"), Step::More);
    }

    fn engine_over_empty_project() -> (tempfile::TempDir, ValidatedConfig) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("events.jsonl"), "").unwrap();
        std::fs::write(
            dir.path().join("skippr.yml"),
            "pipelines:\n  p:\n    data_source: data_sources.s\n\
             data_sources:\n  s:\n    File:\n      path: events.jsonl\n",
        )
        .unwrap();
        let loaded = skipprd::config::load_file(
            &dir.path().join("skippr.yml"),
            std::collections::BTreeMap::new(),
        )
        .unwrap();
        let mut config = skipprd::config::validate(&loaded, None).unwrap();
        for pipeline in config.pipelines.values_mut() {
            pipeline.data_dir = dir.path().join("data");
        }
        (dir, config)
    }

    fn session(config: &ValidatedConfig) -> Session<'_> {
        let pipeline = config.pipeline(None).unwrap();
        Session {
            engine: Engine::Local(QueryEngine::open(&config.settings, &[pipeline]).unwrap()),
            config,
            pipelines: vec![pipeline],
            yes: false,
            interactive: false,
        }
    }

    #[test]
    fn one_statement_prints_a_table_or_json_and_bad_sql_prints_datafusions_error() {
        let (_dir, config) = engine_over_empty_project();
        let mut engine = session(&config);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert!(!run_once(&mut engine, "select 1 as one", false, &mut out, &mut err).failed);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "+-----+\n| one |\n+-----+\n| 1   |\n+-----+\n(1 row)\n"
        );
        let mut out = Vec::new();
        assert!(!run_once(&mut engine, "select 1 as one", true, &mut out, &mut err).failed);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"header\":[\"one\"],\"rows\":[[1]]}\n"
        );
        assert!(err.is_empty());
        let mut out = Vec::new();
        assert!(run_once(&mut engine, "selec 1", false, &mut out, &mut err).failed);
        assert!(out.is_empty());
        let err = String::from_utf8(err).unwrap();
        assert!(err.starts_with("error: SQL error: "), "{err}");
    }

    #[test]
    fn watch_reruns_until_stopped_and_stops_at_once_on_bad_sql() {
        let (_dir, config) = engine_over_empty_project();
        let mut engine = session(&config);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let stop = AtomicBool::new(false);
        assert!(
            run_watch(
                &mut engine,
                "select * from p.nope",
                true,
                Duration::from_secs(1),
                &stop,
                &mut out,
                &mut err
            )
            .failed
        );
        assert!(
            String::from_utf8(err)
                .unwrap()
                .contains("table 'p.nope' not found")
        );

        let stop = AtomicBool::new(true);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert!(
            !run_watch(
                &mut engine,
                "select 1",
                true,
                Duration::from_secs(1),
                &stop,
                &mut out,
                &mut err
            )
            .failed
        );
        assert!(out.is_empty());
    }
}
