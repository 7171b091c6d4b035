//! `skipprd`: the command-line interface, thin wiring over the core library.
//!
//! Exit codes: 0 success, 1 failure, 2 bad command line or configuration.

mod cli;
mod logfile;
mod output;
mod query_cmd;
mod sync;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use skipprd::config::{self, ProcessEnv, ValidatedConfig};
use skipprd::pipeline::events::RunStamp;
use skipprd::pipeline::{self, DiscoverOptions, Event, PipelineError};
use skipprd::schema::SchemaStore;

use cli::{Cli, Command, DeadlettersCommand, MetadataCommand, OutputMode, StoreCommand};

/// Parsing allocates and frees many small values; mimalloc does that markedly faster than
/// the system allocator (see bench/run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mode = cli.output.unwrap_or(if std::io::stderr().is_terminal() {
        OutputMode::Progress
    } else {
        OutputMode::Text
    });
    init_logging(&cli, mode);
    let stamp = RunStamp::new(cli.command.phase());
    if matches!(cli.command, Command::Doctor) {
        return doctor(&cli, mode, &stamp);
    }
    match run(&cli, mode, &stamp) {
        Ok(()) => ExitCode::SUCCESS,
        Err(PipelineError::Reported(e)) => ExitCode::from(if e.is_config() { 2 } else { 1 }),
        Err(e) => {
            if mode == OutputMode::Json {
                let (message, retryable) = (e.to_string(), e.is_retryable());
                // The pipeline the error names, else the one the command line named.
                let named =
                    |flag: &Option<String>| e.pipeline().map(str::to_owned).or(flag.clone());
                let event = match &cli.command {
                    Command::Discover(args) => Event::DiscoverError {
                        pipeline: named(&args.pipeline.pipeline),
                        message,
                        retryable,
                    },
                    Command::Schema(args) => Event::SchemaError {
                        pipeline: named(&args.pipeline.pipeline),
                        message,
                        retryable,
                    },
                    Command::Query(_) | Command::Df(_) => Event::QueryError { message, retryable },
                    Command::Store(_) => Event::StoreError { message, retryable },
                    Command::Deadletters(DeadlettersCommand::Replay(args)) => Event::SyncError {
                        pipeline: named(&args.pipeline.pipeline),
                        message,
                        retryable,
                    },
                    Command::Doctor => Event::QueryError { message, retryable },
                    Command::Maintain(args) => Event::MaintainError {
                        pipeline: named(&args.pipeline.pipeline),
                        message,
                        retryable,
                    },
                    Command::Sync(args) => Event::SyncError {
                        pipeline: named(&args.pipeline),
                        message,
                        retryable,
                    },
                    Command::Reset(args) => Event::ResetError {
                        pipeline: named(&args.pipeline.pipeline),
                        message,
                        retryable,
                    },
                    Command::Metadata(
                        MetadataCommand::Show(cli::MetadataShowArgs { pipeline, .. })
                        | MetadataCommand::Apply(cli::MetadataApplyArgs { pipeline, .. }),
                    ) => Event::SchemaError {
                        pipeline: named(&pipeline.pipeline),
                        message,
                        retryable,
                    },
                };
                output::observer(mode, &stamp).event(&event);
            }
            eprintln!("error: {e}");
            ExitCode::from(if e.is_config() { 2 } else { 1 })
        }
    }
}

/// `skipprd doctor`: the config first (exit 2 when it does not load), then every pipeline's
/// checks (exit 1 when one fails).
fn doctor(cli: &Cli, mode: OutputMode, stamp: &RunStamp) -> ExitCode {
    use skipprd::doctor::Status;
    let loaded = load_config(cli);
    let (checks, code) = skipprd::doctor::run(loaded.as_ref());
    let event = stamp.stamp_at(
        skipprd::doctor::report_json(&checks, code == 0),
        chrono::Utc::now(),
    );
    tracing::info!(target: output::EVENT_TARGET, event = %event, "event");
    if mode == OutputMode::Json {
        output::emit(&event.to_string());
    } else {
        for check in &checks {
            let label = match check.status {
                Status::Ok => "[ok]  ",
                Status::Warn => "[warn]",
                Status::Fail => "[FAIL]",
            };
            println!("{label} {}: {}", check.name, check.detail);
            if let Some(fix) = &check.fix {
                println!("       fix: {fix}");
            }
        }
    }
    ExitCode::from(code)
}

/// The log: standard error at `--log` (else RUST_LOG, else `warn`), and the daily log file
/// ([`logfile`]) at `info` (or the `--log` level) with every event's JSON line.
fn init_logging(cli: &Cli, mode: OutputMode) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter, fmt};
    let stderr_filter = match cli.log {
        Some(level) => EnvFilter::new(level.as_str()),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
    };
    // Events are shown by the observer; on standard error they would be said twice.
    let not_events = filter::filter_fn(|meta| meta.target() != output::EVENT_TARGET);
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let stderr = if mode == OutputMode::Json {
        stderr.json().boxed()
    } else {
        stderr.with_target(false).boxed()
    };
    let stderr = stderr.with_filter(stderr_filter).with_filter(not_events);
    let file = logfile::directory(cli.no_log_file, |name| std::env::var(name).ok()).map(|dir| {
        let directive = match cli.log {
            Some(level) => format!("{},{}=info", level.as_str(), output::EVENT_TARGET),
            None => "warn,skipprd=info".to_owned(),
        };
        fmt::layer()
            .with_writer(logfile::DailyLog::new(dir))
            .with_ansi(false)
            .with_filter(EnvFilter::new(directive))
    });
    tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .init();
}

/// Load and validate the config (all errors exit 2).
fn load_config(cli: &Cli) -> Result<ValidatedConfig, PipelineError> {
    let cwd = std::env::current_dir().map_err(|source| {
        PipelineError::Config(config::ConfigError::Read {
            path: ".".into(),
            source,
        })
    })?;
    let loaded = config::load(cli.config.as_deref(), &cwd, ProcessEnv)?;
    Ok(config::validate::validate_with(&loaded, &cli.overrides())?)
}

fn run(cli: &Cli, mode: OutputMode, stamp: &RunStamp) -> Result<(), PipelineError> {
    let config = load_config(cli)?;
    match &cli.command {
        Command::Discover(args) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let options = DiscoverOptions {
                limit: args.limit,
                progress_interval: Duration::from_millis(250),
                lease_wait: skipprd::state::DEFAULT_LEASE_WAIT,
                aws: None,
            };
            let mut observer = output::observer(mode, stamp);
            pipeline::discover(&config, pipeline, &options, observer.as_mut())?;
            Ok(())
        }
        Command::Query(args) => query(&config, args),
        Command::Df(args) => df(&config, args),
        Command::Sync(args) => sync::run(&config, args, mode, stamp),
        Command::Deadletters(DeadlettersCommand::Replay(args)) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let mut observer = output::observer(mode, stamp);
            let options = pipeline::sync::SyncOptions {
                replay: true,
                ..pipeline::sync::SyncOptions::default()
            };
            pipeline::sync::sync_pass(&config, pipeline, &options, observer.as_mut())?;
            Ok(())
        }
        // Handled in `main` before the config is loaded (it reports a config that does not
        // load as a check).
        Command::Doctor => Ok(()),
        Command::Maintain(args) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let mut observer = output::observer(mode, stamp);
            pipeline::maintain(
                &config,
                pipeline,
                &pipeline::MaintainOptions::default(),
                observer.as_mut(),
            )?;
            Ok(())
        }
        Command::Reset(args) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let mut observer = output::observer(mode, stamp);
            let options = pipeline::ResetOptions {
                confirm: args.yes,
                ..pipeline::ResetOptions::default()
            };
            pipeline::reset(&config, pipeline, &options, observer.as_mut())?;
            Ok(())
        }
        Command::Metadata(MetadataCommand::Show(args)) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let store = pipeline::discover::schema_store(&config.settings, pipeline, None)?;
            let schema = store.load().map_err(|source| PipelineError::Schema {
                pipeline: pipeline.name.clone(),
                source,
            })?;
            let text = match &args.namespace {
                None => schema.to_json_pretty(),
                Some(namespace) => schema.namespace_json(namespace).ok_or_else(|| {
                    PipelineError::NoSuchNamespace {
                        pipeline: pipeline.name.clone(),
                        namespace: namespace.clone(),
                        known: schema.namespaces.keys().cloned().collect(),
                    }
                })?,
            };
            output::emit(text.trim_end());
            Ok(())
        }
        Command::Metadata(MetadataCommand::Apply(args)) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let mut observer = output::observer(mode, stamp);
            let file = if args.schema_json.is_absolute() {
                args.schema_json.clone()
            } else {
                std::env::current_dir()
                    .map(|cwd| cwd.join(&args.schema_json))
                    .unwrap_or_else(|_| args.schema_json.clone())
            };
            pipeline::metadata::apply(
                &config,
                pipeline,
                &file,
                skipprd::state::DEFAULT_LEASE_WAIT,
                observer.as_mut(),
            )?;
            Ok(())
        }
        Command::Store(StoreCommand::Create) => {
            let mut observer = output::observer(mode, stamp);
            pipeline::create_store(&config.settings, observer.as_mut())
        }
        Command::Schema(args) => {
            let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
            let store = pipeline::discover::schema_store(&config.settings, pipeline, None)?;
            let schema = store.load().map_err(|source| PipelineError::Schema {
                pipeline: pipeline.name.clone(),
                source,
            })?;
            let text = match mode {
                OutputMode::Json => schema.to_json_pretty(),
                OutputMode::Text | OutputMode::Progress => schema.render_tree(),
            };
            output::emit(text.trim_end());
            Ok(())
        }
    }
}

/// `df`: every namespace of the pipeline (or the one named), printed as `query` prints a
/// result, each under a `-- pipeline.namespace --` line (not with `--plain`).
fn df(config: &ValidatedConfig, args: &cli::DfArgs) -> Result<(), PipelineError> {
    use skipprd::query::QueryEngine;
    let pipeline = config.pipeline(args.pipeline.pipeline.as_deref())?;
    let engine = QueryEngine::open(&config.settings, &[pipeline])?;
    let known = engine.namespaces(&pipeline.name);
    let chosen = match &args.namespace {
        None => known,
        Some(namespace) if known.contains(namespace) => vec![namespace.clone()],
        Some(namespace) => {
            return Err(PipelineError::NoSuchNamespace {
                pipeline: pipeline.name.clone(),
                namespace: namespace.clone(),
                known,
            });
        }
    };
    let mut out = std::io::stdout();
    for namespace in &chosen {
        let output = engine
            .sql(&skipprd::query::table_sql(&pipeline.name, namespace))
            .map_err(PipelineError::from)?;
        if !args.plain {
            use std::io::Write as _;
            let _ = writeln!(out, "-- {}.{namespace} --", pipeline.name);
        }
        query_cmd::print_output(&output, args.plain, &mut out);
    }
    if chosen.is_empty() {
        eprintln!(
            "pipeline '{}' has no rows yet (no committed batches)",
            pipeline.name
        );
    }
    Ok(())
}

/// `query`: open the engine on the chosen pipelines and run the statement, the watch loop or
/// the prompt. Statement errors are printed where they happen; exit 1 if any failed.
fn query(config: &ValidatedConfig, args: &cli::QueryArgs) -> Result<(), PipelineError> {
    use skipprd::query::QueryError;
    use skipprd::query::athena::{AthenaEngine, AthenaOptions, AthenaTarget};
    let pipelines = config.pipelines_or_all(args.pipeline.as_deref())?;
    let engine = match args.engine {
        cli::EngineKind::Local => query_cmd::Engine::Local(skipprd::query::QueryEngine::open(
            &config.settings,
            &pipelines,
        )?),
        cli::EngineKind::Athena => {
            let target = AthenaTarget::for_pipelines(&pipelines).map_err(QueryError::from)?;
            let options = AthenaOptions {
                timeout: Duration::from_secs(args.athena_timeout.max(1)),
                ..AthenaOptions::default()
            };
            query_cmd::Engine::Athena(
                AthenaEngine::open(target, options).map_err(QueryError::from)?,
            )
        }
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if args.watch.is_some() {
        let stop = std::sync::Arc::clone(&stop);
        if let Err(e) =
            ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::SeqCst))
        {
            tracing::warn!(error = %e, "Could not install the SIGINT handler.");
        }
    }
    let mut session = query_cmd::Session {
        engine,
        config,
        pipelines,
        yes: args.yes,
        interactive: false,
    };
    match query_cmd::run(
        &mut session,
        args.sql.as_deref(),
        args.plain,
        args.watch,
        &stop,
    ) {
        Ok(outcome) if !outcome.failed => Ok(()),
        // Already printed; a usage error (not supported, not confirmed) exits 2.
        Ok(outcome) if outcome.usage => Err(PipelineError::Reported(Box::new(
            PipelineError::Query(QueryError::Management {
                message: "a statement could not run as written".to_owned(),
                config: true,
                retryable: false,
            }),
        ))),
        Ok(_) => Err(PipelineError::Reported(Box::new(PipelineError::Session {
            message: "a statement failed".to_owned(),
        }))),
        Err(e) => Err(PipelineError::Session {
            message: format!("{e:#}"),
        }),
    }
}
