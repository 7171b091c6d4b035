//! `skippr._skippr`: the Python extension module behind the `skippr` package.
//!
//! Argument conversion only: every method calls the same core-library function the `skipprd`
//! CLI calls (`skipprd::doctor::run`, `pipeline::discover`, `pipeline::sync::run_passes`,
//! `QueryEngine::sql_stream`). The GIL is released while the engine runs. Query results cross
//! into pyarrow through the Arrow C stream interface (`__arrow_c_stream__`), batch by batch.
//! See `docs/python.md`.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow::ffi_stream::FFI_ArrowArrayStream;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use skipprd::config::{self, ProcessEnv, ValidatedConfig};
use skipprd::pipeline::{self, PipelineError};
use skipprd::query::{QueryEngine, QueryStream};

create_exception!(
    skippr,
    SkipprError,
    PyException,
    "Every error skippr raises. `retryable` says whether the same call may succeed later."
);
create_exception!(
    skippr,
    ConfigError,
    SkipprError,
    "The configuration is wrong (the CLI's exit code 2): a key, a reference, a variable."
);
create_exception!(
    skippr,
    DiscoverError,
    SkipprError,
    "`discover` failed (the source could not be read, the schema not saved)."
);
create_exception!(
    skippr,
    SyncError,
    SkipprError,
    "A sync pass failed: the source, the WAL, the state store or the destination."
);
create_exception!(
    skippr,
    QueryError,
    SkipprError,
    "A query could not be planned or run (bad SQL, unknown table, unreadable WAL)."
);

/// Which command an error came from, for its exception type.
#[derive(Clone, Copy)]
enum Kind {
    Config,
    Discover,
    Sync,
    Query,
}

/// The engine's error as the exception of its kind (a config error is always `ConfigError`),
/// with the engine's message and a `retryable` attribute.
fn raise(py: Python<'_>, kind: Kind, error: &PipelineError) -> PyErr {
    let message = error.to_string();
    let kind = if error.is_config() {
        Kind::Config
    } else {
        kind
    };
    let err = match kind {
        Kind::Config => ConfigError::new_err(message),
        Kind::Discover => DiscoverError::new_err(message),
        Kind::Sync => SyncError::new_err(message),
        Kind::Query => QueryError::new_err(message),
    };
    // An attribute on a fresh exception object cannot fail in practice; if it does, the
    // exception is still raised, without it.
    let _ = err.value(py).setattr("retryable", error.is_retryable());
    err
}

/// `json.loads(text)`.
fn from_json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

/// A pipeline's session: what `skipprd` does for one pipeline, from Python.
#[pyclass(module = "skippr", name = "Session")]
struct Session {
    config: Arc<ValidatedConfig>,
    pipeline: String,
}

/// Where the config comes from.
enum ConfigArg {
    /// Found as the CLI finds it (`SKIPPR_CONFIG_FILE`, else `skippr.yml` etc. in the current
    /// directory).
    Discovered,
    /// A file.
    File(PathBuf),
    /// YAML text from `skippr.Config().to_yaml()`.
    Text(String),
}

fn load(arg: &ConfigArg) -> Result<ValidatedConfig, PipelineError> {
    let cwd = std::env::current_dir().map_err(|source| config::ConfigError::Read {
        path: ".".into(),
        source,
    })?;
    let loaded = match arg {
        ConfigArg::Discovered => config::load(None, &cwd, ProcessEnv)?,
        ConfigArg::File(path) => config::load(Some(path), &cwd, ProcessEnv)?,
        ConfigArg::Text(text) => config::load_text(text, "skippr.Config()", &cwd, ProcessEnv)?,
    };
    Ok(config::validate::validate_with(
        &loaded,
        &config::validate::Overrides::default(),
    )?)
}

#[pymethods]
impl Session {
    /// `Session(pipeline=None, config=None)`: load and validate the config (raises
    /// `ConfigError`) and choose the pipeline (default: `PIPELINE_NAME`, else the only one).
    #[new]
    #[pyo3(signature = (pipeline = None, config = None))]
    fn new(
        py: Python<'_>,
        pipeline: Option<String>,
        config: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Session> {
        let arg = match config {
            None => ConfigArg::Discovered,
            Some(value) if value.hasattr("to_yaml")? => {
                ConfigArg::Text(value.call_method0("to_yaml")?.extract()?)
            }
            Some(value) => ConfigArg::File(value.extract::<PathBuf>()?),
        };
        let config = py
            .allow_threads(|| load(&arg))
            .map_err(|e| raise(py, Kind::Config, &e))?;
        let wanted = pipeline.or_else(|| {
            std::env::var("PIPELINE_NAME")
                .ok()
                .filter(|name| !name.is_empty())
        });
        let name = config
            .pipeline(wanted.as_deref())
            .map_err(|e| raise(py, Kind::Config, &PipelineError::from(e)))?
            .name
            .clone();
        Ok(Session {
            config: Arc::new(config),
            pipeline: name,
        })
    }

    /// The pipeline this session runs on.
    #[getter]
    fn pipeline(&self) -> String {
        self.pipeline.clone()
    }

    /// `skipprd doctor --output json` as a dict: `ok` and `checks` (every pipeline's).
    fn doctor<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let config = Arc::clone(&self.config);
        let text = py.allow_threads(move || {
            let (checks, code) = skipprd::doctor::run::<PipelineError>(Ok(config.as_ref()));
            skipprd::doctor::report_json(&checks, code == 0).to_string()
        });
        from_json(py, &text)
    }

    /// `skipprd discover`: read the source, infer the schema, save it; returns the saved
    /// schema (its JSON format, as `skipprd metadata show` prints it) as a dict.
    #[pyo3(signature = (limit = None))]
    fn discover<'py>(&self, py: Python<'py>, limit: Option<u64>) -> PyResult<Bound<'py, PyAny>> {
        let config = Arc::clone(&self.config);
        let name = self.pipeline.clone();
        let result = py.allow_threads(move || {
            let pipeline = config.pipeline(Some(&name))?;
            let options = pipeline::DiscoverOptions {
                limit,
                progress_interval: Duration::from_millis(250),
                lease_wait: skipprd::state::DEFAULT_LEASE_WAIT,
                aws: None,
            };
            let report =
                pipeline::discover(&config, pipeline, &options, &mut pipeline::events::Silent)?;
            Ok::<_, PipelineError>(report.schema.to_json_pretty())
        });
        let text = result.map_err(|e| raise(py, Kind::Discover, &e))?;
        from_json(py, &text)
    }

    /// `skipprd sync --once`: one pass; returns its summary (the `sync_complete` fields) as a
    /// dict, raises `SyncError` when it fails. Ctrl-C (SIGINT) stops it after the batch being
    /// committed (nothing is lost) and then raises `KeyboardInterrupt`. `once=False` runs
    /// passes every `sync_frequency` until interrupted, and returns the last summary.
    #[pyo3(signature = (once = true))]
    fn sync<'py>(&self, py: Python<'py>, once: bool) -> PyResult<Bound<'py, PyAny>> {
        let stop = Arc::new(AtomicBool::new(false));
        let options = pipeline::sync::SyncOptions {
            stop: Arc::clone(&stop),
            ..pipeline::sync::SyncOptions::default()
        };
        let config = Arc::clone(&self.config);
        let name = self.pipeline.clone();
        let (result, interrupted) = py.allow_threads(move || {
            std::thread::scope(|scope| {
                let pass = scope.spawn(|| {
                    let pipeline = config.pipeline(Some(&name))?;
                    pipeline::sync::run_passes(
                        &config,
                        &[pipeline],
                        &options,
                        once,
                        &mut pipeline::events::Silent,
                        &mut |_, _| {},
                    )
                });
                // Python runs its signal handlers only on the main thread, between bytecodes:
                // poll them while the pass runs, and turn KeyboardInterrupt into the stop
                // request the pass honours between batches.
                let mut interrupted: Option<PyErr> = None;
                while !pass.is_finished() {
                    std::thread::sleep(Duration::from_millis(50));
                    if interrupted.is_none()
                        && let Err(signal) = Python::with_gil(|py| py.check_signals())
                    {
                        stop.store(true, Ordering::SeqCst);
                        interrupted = Some(signal);
                    }
                }
                let result = pass.join().unwrap_or_else(|_| {
                    Err(PipelineError::Session {
                        message: "the sync thread panicked".to_owned(),
                    })
                });
                (result, interrupted)
            })
        });
        let reports = match result {
            // The pass failed: its error, even if interrupted meanwhile.
            Err(e) => {
                let e = match e {
                    PipelineError::Reported(inner) => *inner,
                    e => e,
                };
                return Err(raise(py, Kind::Sync, &e));
            }
            Ok(reports) => reports,
        };
        if let Some(signal) = interrupted {
            return Err(signal);
        }
        let summary = reports
            .last()
            .map(|(_, report)| serde_json::to_string(report))
            .transpose()
            .map_err(|e| SyncError::new_err(format!("the summary could not be encoded: {e}")))?
            .unwrap_or_else(|| "{}".to_owned());
        from_json(py, &summary)
    }

    /// The pipeline's rows: with `namespace`, that table (`SELECT * FROM
    /// <pipeline>.<namespace>`) as a `pyarrow.Table`; without, every namespace: the table
    /// when there is one namespace, else a dict of tables by namespace.
    #[pyo3(signature = (namespace = None))]
    fn df<'py>(&self, py: Python<'py>, namespace: Option<String>) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.engine(py)?;
        let known = engine.namespaces(&self.pipeline);
        let chosen = match namespace {
            Some(namespace) if known.contains(&namespace) => {
                let stream = self.stream(py, &engine, &namespace)?;
                return to_table(py, stream);
            }
            Some(namespace) => {
                let error = PipelineError::NoSuchNamespace {
                    pipeline: self.pipeline.clone(),
                    namespace,
                    known,
                };
                return Err(raise(py, Kind::Query, &error));
            }
            None => known,
        };
        if let [only] = chosen.as_slice() {
            let stream = self.stream(py, &engine, only)?;
            return to_table(py, stream);
        }
        let tables = PyDict::new(py);
        for namespace in &chosen {
            let stream = self.stream(py, &engine, namespace)?;
            tables.set_item(namespace, to_table(py, stream)?)?;
        }
        Ok(tables.into_any())
    }

    /// Run SQL over the pipeline's tables (as `skipprd query -p <pipeline> --sql`); returns a
    /// `pyarrow.Table`.
    fn query<'py>(&self, py: Python<'py>, sql: &str) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.engine(py)?;
        let stream = py
            .allow_threads(|| engine.sql_stream(sql))
            .map_err(|e| raise(py, Kind::Query, &PipelineError::Query(e)))?;
        to_table(py, stream)
    }

    /// As `query`, but returns a `pyarrow.RecordBatchReader`: batches are computed as they are
    /// read, for results larger than memory.
    fn query_reader<'py>(&self, py: Python<'py>, sql: &str) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.engine(py)?;
        let stream = py
            .allow_threads(|| engine.sql_stream(sql))
            .map_err(|e| raise(py, Kind::Query, &PipelineError::Query(e)))?;
        py.import("pyarrow")?
            .getattr("RecordBatchReader")?
            .call_method1("from_stream", (ArrowStream::new(stream),))
    }

    fn __repr__(&self) -> String {
        format!(
            "skippr.Session(pipeline={:?}, config={:?})",
            self.pipeline, self.config.file
        )
    }
}

impl Session {
    /// The query engine over this pipeline's WAL and landed tables, read now, producing
    /// batches of [`BATCH_ROWS`] rows.
    fn engine(&self, py: Python<'_>) -> PyResult<QueryEngine> {
        let config = Arc::clone(&self.config);
        let name = self.pipeline.clone();
        py.allow_threads(move || {
            let pipeline = config.pipeline(Some(&name))?;
            let engine = QueryEngine::open(&config.settings, &[pipeline])?;
            engine.sql(&format!(
                "SET datafusion.execution.batch_size = {BATCH_ROWS}"
            ))?;
            Ok::<_, PipelineError>(engine)
        })
        .map_err(|e| raise(py, Kind::Query, &e))
    }

    fn stream(
        &self,
        py: Python<'_>,
        engine: &QueryEngine,
        namespace: &str,
    ) -> PyResult<QueryStream> {
        let sql = skipprd::query::table_sql(&self.pipeline, namespace);
        py.allow_threads(|| engine.sql_stream(&sql))
            .map_err(|e| raise(py, Kind::Query, &PipelineError::Query(e)))
    }
}

/// Rows per result batch (DataFusion's default is 8,192). pyarrow keeps every batch it
/// imports, each column of each batch as its own buffers (plus both sides' C-interface
/// bookkeeping), so fewer, larger batches make a smaller table in memory: for the 7M-row
/// `select *` of `bench/run python` the peak RSS went from 861 to 838 MiB, and the read got
/// faster (0.76 to 0.66 s); 32,768, 131,072 and 262,144 rows peaked higher (850, 855, 874 MiB).
/// Shrinking each exported batch's buffers to their length (the Parquet reader's string
/// buffers hold about a quarter more than their values) raised the peak instead, by 10 MiB
/// (`shrink_to_fit`) and 30 MiB (a copy by `take`): that slack is mostly never-touched memory,
/// and reallocating it only fragments the allocator's heaps.
const BATCH_ROWS: usize = 65_536;

/// `pyarrow.table(stream)`: pyarrow reads the batches through the C stream interface.
fn to_table(py: Python<'_>, stream: QueryStream) -> PyResult<Bound<'_, PyAny>> {
    py.import("pyarrow")?
        .call_method1("table", (ArrowStream::new(stream),))
}

/// A result that pyarrow (or any Arrow library) imports with `__arrow_c_stream__`; it can be
/// exported once.
#[pyclass(module = "skippr", name = "ArrowStream")]
struct ArrowStream {
    stream: std::sync::Mutex<Option<QueryStream>>,
}

impl ArrowStream {
    fn new(stream: QueryStream) -> ArrowStream {
        ArrowStream {
            stream: std::sync::Mutex::new(Some(stream)),
        }
    }
}

#[pymethods]
impl ArrowStream {
    /// The Arrow PyCapsule interface: a capsule named `arrow_array_stream` holding an
    /// `ArrowArrayStream`. `requested_schema` is not supported (the result's own schema is
    /// exported; pyarrow casts afterwards when asked).
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let stream = self
            .stream
            .lock()
            .map_err(|_| QueryError::new_err("the result stream's lock is poisoned"))?
            .take()
            .ok_or_else(|| QueryError::new_err("this result was already read"))?;
        let exported = FFI_ArrowArrayStream::new(Box::new(stream));
        let name =
            CString::new("arrow_array_stream").map_err(|e| QueryError::new_err(e.to_string()))?;
        PyCapsule::new(py, exported, Some(name))
    }
}

/// `skippr.Config().to_yaml()`: the config (as JSON text) as YAML the loader reads.
#[pyfunction]
fn _config_to_yaml(json: &str) -> PyResult<String> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| ConfigError::new_err(format!("the config is not JSON-like: {e}")))?;
    serde_norway::to_string(&value)
        .map_err(|e| ConfigError::new_err(format!("the config cannot be written as YAML: {e}")))
}

/// `skippr._skippr.check_config(yaml)`: parse and validate config text without running
/// anything (what `Session(config=...)` does first); raises `ConfigError` naming the key.
#[pyfunction]
fn _check_config(py: Python<'_>, yaml: String) -> PyResult<()> {
    py.allow_threads(|| load(&ConfigArg::Text(yaml)))
        .map(|_| ())
        .map_err(|e| raise(py, Kind::Config, &e))
}

/// The module.
#[pymodule]
fn _skippr(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Session>()?;
    m.add_class::<ArrowStream>()?;
    m.add_function(wrap_pyfunction!(_config_to_yaml, m)?)?;
    m.add_function(wrap_pyfunction!(_check_config, m)?)?;
    m.add("SkipprError", py.get_type::<SkipprError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("DiscoverError", py.get_type::<DiscoverError>())?;
    m.add("SyncError", py.get_type::<SyncError>())?;
    m.add("QueryError", py.get_type::<QueryError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
