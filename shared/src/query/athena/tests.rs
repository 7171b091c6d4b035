//! [`AthenaEngine`] against an in-process double of the Athena calls and a fake clock: the
//! backoff, the timeout, paging, the header row, typing, and the `FAILED` / `CANCELLED` /
//! throttled paths that moto cannot produce (it never fails a query).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A clock that only moves when slept on; every sleep is recorded.
#[derive(Clone)]
struct FakeClock {
    start: Instant,
    slept: Arc<Mutex<Vec<Duration>>>,
}

impl FakeClock {
    fn new() -> FakeClock {
        FakeClock {
            start: Instant::now(),
            slept: Arc::default(),
        }
    }

    fn sleeps(&self) -> Vec<Duration> {
        self.slept.lock().unwrap().clone()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.start + self.slept.lock().unwrap().iter().sum::<Duration>()
    }

    fn sleep(&self, duration: Duration) {
        self.slept.lock().unwrap().push(duration);
    }
}

/// What the double was asked.
#[derive(Debug, Default)]
struct Calls {
    starts: Vec<(String, AthenaTarget)>,
    polls: usize,
    pages: Vec<(Option<String>, i32)>,
    stops: Vec<String>,
}

/// A scripted Athena. `GetQueryExecution` answers from `executions` in order (the last answer
/// repeats); `GetQueryResults` pages `result` (header row included, as Athena does) by the
/// `MaxResults` asked for, with tokens `t<offset>`, after failing with `page_failures` first.
#[derive(Clone, Default)]
struct Double {
    start_failure: Option<SdkFailure>,
    executions: Arc<Mutex<VecDeque<Result<Execution, SdkFailure>>>>,
    columns: Vec<Column>,
    result: Vec<Vec<Option<String>>>,
    page_failures: Arc<Mutex<VecDeque<SdkFailure>>>,
    calls: Arc<Mutex<Calls>>,
}

impl AthenaApi for Double {
    fn start(&self, start: &Start<'_>) -> Result<String, SdkFailure> {
        if let Some(failure) = &self.start_failure {
            return Err(failure.clone());
        }
        self.calls
            .lock()
            .unwrap()
            .starts
            .push((start.sql.to_owned(), start.target.clone()));
        Ok("qid-1".to_owned())
    }

    fn execution(&self, id: &str) -> Result<Execution, SdkFailure> {
        assert_eq!(id, "qid-1");
        self.calls.lock().unwrap().polls += 1;
        let mut executions = self.executions.lock().unwrap();
        if executions.len() > 1 {
            executions.pop_front().unwrap()
        } else {
            executions.front().cloned().unwrap()
        }
    }

    fn results(&self, id: &str, token: Option<&str>, max: i32) -> Result<Page, SdkFailure> {
        assert_eq!(id, "qid-1");
        self.calls
            .lock()
            .unwrap()
            .pages
            .push((token.map(str::to_owned), max));
        if let Some(failure) = self.page_failures.lock().unwrap().pop_front() {
            return Err(failure);
        }
        let offset: usize = token.map_or(0, |t| t.trim_start_matches('t').parse().unwrap());
        let end = (offset + usize::try_from(max).unwrap()).min(self.result.len());
        Ok(Page {
            columns: self.columns.clone(),
            rows: self.result[offset..end].to_vec(),
            next_token: (end < self.result.len()).then(|| format!("t{end}")),
        })
    }

    fn stop(&self, id: &str) -> Result<(), SdkFailure> {
        self.calls.lock().unwrap().stops.push(id.to_owned());
        Ok(())
    }
}

fn execution(state: State) -> Execution {
    Execution {
        state,
        reason: None,
        error_message: None,
        retryable: false,
        statement_type: Some("DML".to_owned()),
        data_scanned: Some(0),
    }
}

fn states(
    states: Vec<Result<Execution, SdkFailure>>,
) -> Arc<Mutex<VecDeque<Result<Execution, SdkFailure>>>> {
    Arc::new(Mutex::new(states.into()))
}

fn throttled() -> SdkFailure {
    SdkFailure {
        code: "ThrottlingException".to_owned(),
        status: Some(400),
        message: "Rate exceeded".to_owned(),
        retryable: true,
    }
}

fn denied() -> SdkFailure {
    SdkFailure {
        code: "AccessDeniedException".to_owned(),
        status: Some(400),
        message: "not allowed".to_owned(),
        retryable: false,
    }
}

fn target() -> AthenaTarget {
    AthenaTarget {
        database: "lake_db".to_owned(),
        workgroup: Some("analysts".to_owned()),
        output_location: Some("s3://results-bucket/skipprd-query-results/".to_owned()),
        region: None,
    }
}

fn column(name: &str, athena_type: &str) -> Column {
    Column {
        name: name.to_owned(),
        athena_type: athena_type.to_owned(),
    }
}

fn row(values: &[Option<&str>]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_owned)).collect()
}

fn engine(double: &Double, clock: &FakeClock, options: AthenaOptions) -> AthenaEngine {
    AthenaEngine::with_api(
        Box::new(double.clone()),
        Box::new(clock.clone()),
        target(),
        options,
    )
}

/// Columns of every kind, Athena's header row first, then three rows (one with nulls).
fn typed_double() -> Double {
    Double {
        columns: vec![
            column("id", "bigint"),
            column("name", "varchar"),
            column("score", "double"),
            column("ok", "boolean"),
            column("price", "decimal"),
            column("n", "integer"),
        ],
        result: vec![
            row(&[
                Some("id"),
                Some("name"),
                Some("score"),
                Some("ok"),
                Some("price"),
                Some("n"),
            ]),
            row(&[
                Some("1"),
                Some("ada"),
                Some("1.5"),
                Some("true"),
                Some("10.10"),
                Some("-3"),
            ]),
            row(&[
                Some("2"),
                Some("bob"),
                Some("2.0E10"),
                Some("false"),
                Some("0.01"),
                Some("7"),
            ]),
            row(&[Some("3"), None, None, None, None, None]),
        ],
        ..Double::default()
    }
}

#[test]
fn a_query_is_polled_with_doubling_waits_then_its_rows_come_back_typed_without_the_header() {
    let mut double = typed_double();
    double.executions = states(
        [State::Queued, State::Running]
            .into_iter()
            .chain(std::iter::repeat_n(State::Running, 6))
            .chain([State::Succeeded])
            .map(|s| Ok(execution(s)))
            .collect(),
    );
    let clock = FakeClock::new();
    let output = engine(&double, &clock, AthenaOptions::default())
        .sql("select * from t")
        .unwrap();

    assert_eq!(
        clock.sleeps(),
        vec![
            ms(100),
            ms(200),
            ms(400),
            ms(800),
            ms(1600),
            ms(2000),
            ms(2000),
            ms(2000),
            ms(2000)
        ]
    );
    let calls = double.calls.lock().unwrap();
    assert_eq!(calls.polls, 9);
    assert_eq!(calls.starts, vec![("select * from t".to_owned(), target())]);
    assert_eq!(calls.pages, vec![(None, 1000)]);
    assert!(calls.stops.is_empty());
    assert_eq!(
        output.to_plain_json(),
        r#"{"header":["id","name","score","ok","price","n"],"rows":[[1,"ada",1.5,true,"10.10",-3],[2,"bob",20000000000.0,false,"0.01",7],[3,null,null,null,null,null]]}"#
    );
    let types: Vec<DataType> = output
        .schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        vec![
            DataType::Int64,
            DataType::Utf8,
            DataType::Float64,
            DataType::Boolean,
            DataType::Utf8,
            DataType::Int64
        ]
    );
}

#[test]
fn results_are_read_page_by_page_with_next_token_and_the_header_only_dropped_once() {
    // `select 'id' as id`-like data: a data row equal to the header must stay.
    let mut double = Double {
        columns: vec![column("id", "varchar")],
        result: std::iter::once(row(&[Some("id")]))
            .chain(std::iter::once(row(&[Some("id")])))
            .chain((0..6).map(|i| vec![Some(format!("v{i}"))]))
            .collect(),
        ..Double::default()
    };
    double.executions = states(vec![Ok(execution(State::Succeeded))]);
    let clock = FakeClock::new();
    let options = AthenaOptions {
        page_size: 3,
        ..AthenaOptions::default()
    };
    let output = engine(&double, &clock, options)
        .sql("select * from t")
        .unwrap();
    assert_eq!(
        output.to_plain_json(),
        r#"{"header":["id"],"rows":[["id"],["v0"],["v1"],["v2"],["v3"],["v4"],["v5"]]}"#
    );
    assert_eq!(
        double.calls.lock().unwrap().pages,
        vec![
            (None, 3),
            (Some("t3".to_owned()), 3),
            (Some("t6".to_owned()), 3)
        ]
    );
}

#[test]
fn ddl_results_have_no_header_row_and_missing_metadata_falls_back_to_the_header_row() {
    let mut double = Double {
        columns: vec![column("tab_name", "string")],
        result: vec![row(&[Some("tab_name")]), row(&[Some("events")])],
        ..Double::default()
    };
    let mut ddl = execution(State::Succeeded);
    ddl.statement_type = Some("DDL".to_owned());
    double.executions = states(vec![Ok(ddl)]);
    let output = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("show tables")
        .unwrap();
    assert_eq!(
        output.to_plain_json(),
        r#"{"header":["tab_name"],"rows":[["tab_name"],["events"]]}"#
    );

    let mut double = Double {
        result: vec![row(&[Some("a"), Some("b")]), row(&[Some("1"), None])],
        ..Double::default()
    };
    double.executions = states(vec![Ok(execution(State::Succeeded))]);
    let output = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap();
    assert_eq!(
        output.to_plain_json(),
        r#"{"header":["a","b"],"rows":[["1",null]]}"#
    );
}

#[test]
fn a_failed_query_reports_its_id_state_reason_and_athenas_retryable_flag() {
    let mut double = typed_double();
    let mut failed = execution(State::Failed);
    failed.reason = Some("SYNTAX_ERROR: line 1:8: Column 'nope' cannot be resolved".to_owned());
    failed.error_message = Some("Column 'nope' cannot be resolved".to_owned());
    double.executions = states(vec![Ok(execution(State::Running)), Ok(failed)]);
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select nope")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena query qid-1 FAILED: SYNTAX_ERROR: line 1:8: Column 'nope' cannot be resolved; Column 'nope' cannot be resolved"
    );
    assert!(!error.is_retryable());
    assert!(!error.is_config());
    assert!(double.calls.lock().unwrap().pages.is_empty());

    let mut transient = execution(State::Failed);
    transient.error_message = Some("Query exhausted resources at this scale factor".to_owned());
    transient.retryable = true;
    double.executions = states(vec![Ok(transient)]);
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena query qid-1 FAILED: Query exhausted resources at this scale factor"
    );
    assert!(error.is_retryable());
}

#[test]
fn a_cancelled_query_is_an_error_even_without_a_reason() {
    let mut double = typed_double();
    double.executions = states(vec![Ok(execution(State::Cancelled))]);
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena query qid-1 CANCELLED: no reason given"
    );
    assert!(matches!(error, AthenaError::Failed { ref state, .. } if state == "CANCELLED"));
}

#[test]
fn a_query_still_running_at_the_timeout_is_stopped_and_the_wait_never_overshoots() {
    let mut double = typed_double();
    double.executions = states(vec![Ok(execution(State::Running))]);
    let clock = FakeClock::new();
    let options = AthenaOptions {
        timeout: Duration::from_secs(5),
        ..AthenaOptions::default()
    };
    let error = engine(&double, &clock, options)
        .sql("select * from t")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena query qid-1 still RUNNING after 5s (the timeout); it was asked to stop"
    );
    assert!(error.is_retryable());
    assert_eq!(
        clock.sleeps(),
        vec![ms(100), ms(200), ms(400), ms(800), ms(1600), ms(1900)]
    );
    assert_eq!(clock.sleeps().iter().sum::<Duration>(), ms(5000));
    assert_eq!(double.calls.lock().unwrap().stops, vec!["qid-1".to_owned()]);
}

#[test]
fn throttled_polls_are_polled_through_but_a_denied_poll_fails_at_once() {
    let mut double = typed_double();
    double.executions = states(vec![
        Err(throttled()),
        Err(throttled()),
        Ok(execution(State::Succeeded)),
    ]);
    let output = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap();
    assert_eq!(output.rows(), 3);
    assert_eq!(double.calls.lock().unwrap().polls, 3);

    let mut double = typed_double();
    double.executions = states(vec![Err(denied()), Ok(execution(State::Succeeded))]);
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena query qid-1: could not read its state: AccessDeniedException (HTTP 400): not allowed"
    );
    assert!(!error.is_retryable());
    assert_eq!(double.calls.lock().unwrap().polls, 1);
}

#[test]
fn a_throttled_start_is_a_retryable_error() {
    let double = Double {
        start_failure: Some(throttled()),
        ..typed_double()
    };
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena did not start the query: ThrottlingException (HTTP 400): Rate exceeded"
    );
    assert!(error.is_retryable());
}

#[test]
fn a_throttled_results_page_is_tried_again_up_to_four_times() {
    let mut double = typed_double();
    double.executions = states(vec![Ok(execution(State::Succeeded))]);
    double.page_failures = Arc::new(Mutex::new(vec![throttled(); 3].into()));
    let output = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap();
    assert_eq!(output.rows(), 3);
    assert_eq!(double.calls.lock().unwrap().pages.len(), 4);

    let mut double = typed_double();
    double.executions = states(vec![Ok(execution(State::Succeeded))]);
    double.page_failures = Arc::new(Mutex::new(vec![throttled(); 4].into()));
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap_err();
    assert!(matches!(error, AthenaError::Results { .. }), "{error}");
    assert!(error.is_retryable());
    assert_eq!(double.calls.lock().unwrap().pages.len(), 4);
}

#[test]
fn a_value_that_does_not_read_as_its_type_names_the_column() {
    let mut double = Double {
        columns: vec![column("n", "bigint")],
        result: vec![row(&[Some("n")]), row(&[Some("12x")])],
        ..Double::default()
    };
    double.executions = states(vec![Ok(execution(State::Succeeded))]);
    let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
        .sql("select * from t")
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Athena query qid-1: column 'n' is bigint but has the value '12x'"
    );
}

#[test]
fn only_reading_statements_are_sent() {
    for sql in [
        "insert into t values (1)",
        "  DELETE FROM t",
        "-- looks harmless\nupdate t set a = 1",
        "/* select */ drop table t",
        "(merge into t using s on true when matched then delete)",
        "",
    ] {
        let mut double = typed_double();
        double.executions = states(vec![Ok(execution(State::Succeeded))]);
        let error = engine(&double, &FakeClock::new(), AthenaOptions::default())
            .sql(sql)
            .unwrap_err();
        assert!(
            matches!(error, AthenaError::Refused { .. }),
            "{sql}: {error}"
        );
        assert!(double.calls.lock().unwrap().starts.is_empty(), "{sql}");
    }
    let error = engine(&typed_double(), &FakeClock::new(), AthenaOptions::default())
        .sql("optimize t rewrite data using bin_pack")
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("`OPTIMIZE` statements are not run through Athena"),
        "{error}"
    );
    for sql in [
        "select 1",
        "-- note\n  WITH x AS (select 1) select * from x",
        "/* a */ (select 1) union all (select 2)",
        "show tables",
        "describe t",
        "explain select 1",
    ] {
        let mut double = typed_double();
        double.executions = states(vec![Ok(execution(State::Succeeded))]);
        engine(&double, &FakeClock::new(), AthenaOptions::default())
            .sql(sql)
            .unwrap();
        assert_eq!(double.calls.lock().unwrap().starts.len(), 1, "{sql}");
    }
}

/// A config with pipelines `a` (AthenaIceberg into `db_one`), `b` (the same sink), `c`
/// (AthenaIceberg into `db_two`), `f` (a Duckdb sink) and `n` (no sink).
fn config() -> (tempfile::TempDir, crate::config::ValidatedConfig) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.jsonl"), "").unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n\
         \x20 a: {data_source: data_sources.s, data_sink: data_sinks.one}\n\
         \x20 b: {data_source: data_sources.s, data_sink: data_sinks.one}\n\
         \x20 c: {data_source: data_sources.s, data_sink: data_sinks.two}\n\
         \x20 f: {data_source: data_sources.s, data_sink: data_sinks.files}\n\
         \x20 n: {data_source: data_sources.s}\n\
         data_sources:\n  s:\n    File:\n      path: events.jsonl\n\
         data_sinks:\n\
         \x20 one:\n    AthenaIceberg:\n      warehouse: s3://lake-bucket/one\n      glue_database_name: db_one\n      athena_workgroup_name: wg\n      athena_results_s3_bucket: results-one\n      region: eu-west-1\n\
         \x20 two:\n    AthenaIceberg:\n      warehouse: s3://lake-bucket/two\n      glue_database_name: db_two\n\
         \x20 files:\n    Duckdb:\n      warehouse: file://./lake\n",
    )
    .unwrap();
    let loaded = crate::config::load_file(&dir.path().join("skippr.yml"), BTreeMap::new()).unwrap();
    let config = crate::config::validate(&loaded, None).unwrap();
    (dir, config)
}

#[test]
fn the_target_comes_from_the_athena_iceberg_sink_and_other_sinks_are_refused() {
    let (_dir, config) = config();
    let pick = |names: &[&str]| {
        let pipelines: Vec<&ValidatedPipeline> =
            names.iter().map(|n| &config.pipelines[*n]).collect();
        AthenaTarget::for_pipelines(&pipelines)
    };
    assert_eq!(
        pick(&["a", "b"]).unwrap(),
        AthenaTarget {
            database: "db_one".to_owned(),
            workgroup: Some("wg".to_owned()),
            output_location: Some("s3://results-one/skipprd-query-results/".to_owned()),
            region: Some("eu-west-1".to_owned()),
        }
    );
    assert_eq!(
        pick(&["c"]).unwrap(),
        AthenaTarget {
            database: "db_two".to_owned(),
            workgroup: None,
            output_location: None,
            region: None,
        }
    );
    let error = pick(&["a", "f"]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "pipeline 'f': `--engine athena` needs an Athena or AthenaIceberg data sink, but its data_sink 'files' is Duckdb; choose a pipeline with one (-p NAME) or use the local engine"
    );
    assert!(error.is_config());
    let error = pick(&["n"]).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "pipeline 'n': `--engine athena` needs an Athena or AthenaIceberg data sink, but it has no data_sink;"
        ),
        "{error}"
    );
    let error = pick(&["a", "c"]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "pipelines 'a' and 'c' query Athena differently (Glue database db_one vs db_two); choose one with -p NAME"
    );
    assert!(error.is_config());
}
