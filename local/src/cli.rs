//! The command line, defined once: each flag's doc comment is its `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// skipprd moves data from a source to a destination exactly once: every batch is committed
/// to a write-ahead log before the source position advances.
///
/// Exit codes: 0 success, 1 failure, 2 bad command line or configuration.
#[derive(Debug, Parser)]
#[command(
    name = "skipprd",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Config file. Default: SKIPPR_CONFIG_FILE, else the first of skippr.yml, skippr.yaml,
    /// skipprd.yml, skipprd.yaml, skipprd.toml, skipprd.json in the current directory.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Log to standard error at this level; `--log` alone means `info` (write `--log=LEVEL`
    /// when the command follows it). Default: `warn`, or RUST_LOG when set.
    #[arg(
        long,
        global = true,
        value_name = "LEVEL",
        num_args = 0..=1,
        default_missing_value = "info",
        value_enum
    )]
    pub log: Option<LogLevel>,

    /// How to report: `progress` (a live display for people; the default on a terminal),
    /// `text` (plain lines; the default otherwise) or `json` (one JSON event per line).
    #[arg(long, global = true, value_enum)]
    pub output: Option<OutputMode>,

    /// Where the WAL lives: `disk` or `s3`. Default: WAL_STORAGE, else `disk`.
    #[arg(long, global = true, value_name = "disk|s3")]
    pub wal_storage: Option<String>,

    /// The WAL bucket when the WAL is in S3 (over `skippr.wal_s3_bucket` and
    /// SKIPPR_WAL_S3_BUCKET).
    #[arg(long, global = true, value_name = "BUCKET")]
    pub wal_s3_bucket: Option<String>,

    /// The skippr (metadata) bucket (over `skippr.skippr_s3_bucket` and SKIPPR_S3_BUCKET).
    #[arg(long, global = true, value_name = "BUCKET")]
    pub skippr_s3_bucket: Option<String>,

    /// The state store: `sled` (embedded) or `dynamodb` (over `skippr.store.type` and
    /// SKIPPR_STORE_TYPE).
    #[arg(long, global = true, value_name = "sled|dynamodb")]
    pub store_type: Option<String>,

    /// The DynamoDB table of the state store (over `skippr.store.name` and
    /// SKIPPR_STORE_NAME).
    #[arg(long, global = true, value_name = "TABLE")]
    pub store_name: Option<String>,

    /// The workspace (over `skippr.workspace` and WORKSPACE_NAME).
    #[arg(long, global = true, value_name = "NAME")]
    pub workspace: Option<String>,

    /// The tenant (over `skippr.tenant` and TENANT).
    #[arg(long, global = true, value_name = "NAME")]
    pub tenant: Option<String>,

    /// Where schemas are saved: `local` or `s3` (over `skippr.skipprd_el_storage_mode` and
    /// SKIPPRD_EL_STORAGE_MODE).
    #[arg(long, global = true, value_name = "local|s3")]
    pub storage_mode: Option<String>,

    /// Write no daily log file. Default: the log at `info` and every event go to
    /// `logs/skipprd.<UTC date>.log` (the directory: SKIPPR_LOG_DIR; SKIPPR_LOG_FILE=off also
    /// turns it off), 14 days kept.
    #[arg(long, global = true)]
    pub no_log_file: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read the source, infer each namespace's fields and types, save the schema. Never writes
    /// to the destination.
    Discover(DiscoverArgs),
    /// Print the saved schema: namespaces (tables), fields, types and nesting.
    Schema(SchemaArgs),
    /// Read new records, commit each batch to the write-ahead log, record the source position
    /// (and, with a destination, write the batches there). Safe to kill at any moment: the
    /// next run continues exactly where the last committed batch ended.
    Sync(SyncArgs),
    /// Run SQL over what the pipelines hold: one table `<pipeline>.<namespace>` per namespace
    /// (with one pipeline, `<namespace>` alone works too). Without `--sql`, an interactive
    /// `sql>` prompt with history. Management statements: `SHOW PIPELINES`, `SHOW STATS
    /// [pipeline]` (rows per table), `SCHEMA DUMP [pipeline]`, `RESET PIPELINE <name>` (as
    /// `skipprd reset`; asks, or `--yes`); another statement of that kind exits 2.
    Query(QueryArgs),
    /// Print a pipeline's rows as tables: every namespace (or with `--namespace` one), each as
    /// `SELECT * FROM <pipeline>.<namespace>` in `query` would show it (the landed table plus
    /// the WAL batches not landed yet, each row once). The same rows as the Python
    /// `Session.df()`.
    Df(DfArgs),
    /// Maintain the pipeline's Iceberg tables now: expire old snapshots, compact small data
    /// files, delete files no snapshot references. (Deliveries also do this on their own once
    /// a threshold is crossed.) Takes the pipeline's writer lease, like `sync`.
    Maintain(MaintainArgs),
    /// Check that the config can run, reading and writing no data: the config itself (files,
    /// references, `${NAME}` variables, secrets), then for each pipeline its source, state
    /// directory and disk, the S3 WAL and DynamoDB state table, the destination and the
    /// skippr and deadletter buckets. Prints `[ok]`, `[warn]` or `[FAIL]` per check, with a
    /// fix for the last two (`--output json`: one `doctor_complete` event). Exits 1 when a
    /// check fails, 2 when the config does not load.
    Doctor,
    /// Start a pipeline over on purpose, after its WAL was lost (a deleted state directory):
    /// delete its source position and acknowledgements, empty its WAL, and record an id floor
    /// above every batch id its state or tables hold, so the next `sync` reads the source
    /// from its start and numbers its batches above the floor (nothing skipped as delivered,
    /// no id used twice). Rows that had landed are written again by that `sync`. Without
    /// `--yes` it only prints what it would clear and exits 2. Takes the writer lease.
    Reset(ResetArgs),
    /// Work with rejected records (the files of the pipeline's `File` deadletter sink).
    #[command(subcommand)]
    Deadletters(DeadlettersCommand),
    /// Work with the state store (`skippr.store`).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Show or apply a pipeline's schema metadata (the saved schema, in its JSON format).
    #[command(subcommand)]
    Metadata(MetadataCommand),
}

/// `metadata` subcommands.
#[derive(Debug, Subcommand)]
pub enum MetadataCommand {
    /// Print the saved schema as JSON (the format `metadata apply` reads), or with
    /// `--namespace` that namespace's part. Exits 1 before the first `discover` or `sync`.
    Show(MetadataShowArgs),
    /// Merge a schema file (the saved JSON format, edited or written by hand) into the saved
    /// schema, under the writer lease: namespaces and fields are added, types widen, nothing
    /// saved is dropped or narrowed. Its `pipeline` and `workspace` must be this pipeline's.
    Apply(MetadataApplyArgs),
}

/// `metadata show` flags.
#[derive(Debug, Args)]
pub struct MetadataShowArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,

    /// Only this namespace (table).
    #[arg(long, value_name = "NAME")]
    pub namespace: Option<String>,
}

/// `df` flags.
#[derive(Debug, Args)]
pub struct DfArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,

    /// Only this namespace (table).
    #[arg(long, value_name = "NAME")]
    pub namespace: Option<String>,

    /// One JSON line per namespace (`{"header":[...],"rows":[[...],...]}`) instead of tables.
    #[arg(long)]
    pub plain: bool,
}

/// `metadata apply` flags.
#[derive(Debug, Args)]
pub struct MetadataApplyArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,

    /// The schema file to apply (JSON, as `metadata show` prints it).
    #[arg(long, value_name = "PATH")]
    pub schema_json: PathBuf,
}

impl Cli {
    /// The global flags that override their key and environment variable.
    pub fn overrides(&self) -> skipprd::config::validate::Overrides {
        skipprd::config::validate::Overrides {
            wal_storage: self.wal_storage.clone(),
            wal_s3_bucket: self.wal_s3_bucket.clone(),
            skippr_s3_bucket: self.skippr_s3_bucket.clone(),
            store_type: self.store_type.clone(),
            store_name: self.store_name.clone(),
            workspace: self.workspace.clone(),
            tenant: self.tenant.clone(),
            storage_mode: self.storage_mode.clone(),
        }
    }
}

impl Command {
    /// The `phase` field of the command's JSON events.
    pub fn phase(&self) -> &'static str {
        match self {
            Command::Discover(_) => "discover",
            Command::Schema(_) => "schema",
            Command::Sync(_) => "sync",
            Command::Query(_) => "query",
            Command::Df(_) => "df",
            Command::Maintain(_) => "maintain",
            Command::Doctor => "doctor",
            Command::Reset(_) => "reset",
            Command::Deadletters(DeadlettersCommand::Replay(_)) => "replay",
            Command::Store(_) => "store",
            Command::Metadata(_) => "metadata",
        }
    }
}

/// `store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Create the DynamoDB table named by `skippr.store.name` (with `store.type: dynamodb`):
    /// on-demand capacity, partition key `pk`, sort key `sk`; waits until it is active. A table
    /// that already exists with those keys is left as it is. `sync` and `discover` never
    /// create it themselves.
    Create,
}

/// `deadletters` subcommands.
#[derive(Debug, Subcommand)]
pub enum DeadlettersCommand {
    /// Send the records of the deadletter files or objects (`File` or `S3` sink; fixed by hand
    /// where needed: edit the `record` text) back through the pipeline: typed, committed to
    /// the WAL and delivered like any other record, each file exactly once; a replayed file
    /// moves to `replayed/`. Records that still cannot be read are rejected again, into new
    /// files. Takes the writer lease.
    Replay(MaintainArgs),
}

/// `maintain` flags.
#[derive(Debug, Args)]
pub struct MaintainArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,
}

/// `reset` flags.
#[derive(Debug, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,

    /// Clear the state. Without it, nothing changes: `reset` prints what it would clear.
    #[arg(long)]
    pub yes: bool,
}

/// `query` flags.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// Query only this pipeline's tables. Default: PIPELINE_NAME, else every pipeline.
    #[arg(short = 'p', long, env = "PIPELINE_NAME", value_name = "NAME")]
    pub pipeline: Option<String>,

    /// The SQL statement to run. Without it, an interactive `sql>` prompt.
    #[arg(short = 's', long, value_name = "SQL")]
    pub sql: Option<String>,

    /// Print JSON for scripts, `{"header":[...],"rows":[[...]]}`, instead of an aligned table.
    #[arg(long)]
    pub plain: bool,

    /// Re-run the statement every N seconds (reading new batches each time) until interrupted.
    #[arg(long, value_name = "N", requires = "sql")]
    pub watch: Option<u64>,

    /// Where statements run: `local` (DataFusion over the WALs and landed tables, on this
    /// machine) or `athena` (Amazon Athena, in the Glue database of the pipelines'
    /// AthenaIceberg sink; billed by data scanned). See docs/query.md.
    #[arg(long, value_enum, default_value_t = EngineKind::Local)]
    pub engine: EngineKind,

    /// With `--engine athena`: stop a statement that has not finished after N seconds.
    #[arg(long, value_name = "N", default_value_t = 300)]
    pub athena_timeout: u64,

    /// Run `RESET PIPELINE <name>` without asking. Without it, the statement asks at the
    /// interactive prompt and is refused (exit 2) with `--sql`.
    #[arg(long)]
    pub yes: bool,
}

/// Query engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// DataFusion on this machine (the default).
    Local,
    /// Amazon Athena.
    Athena,
}

/// Choosing a pipeline.
#[derive(Debug, Args)]
pub struct PipelineArg {
    /// The pipeline to run on. Default: PIPELINE_NAME, else the only pipeline defined.
    #[arg(short = 'p', long, env = "PIPELINE_NAME", value_name = "NAME")]
    pub pipeline: Option<String>,
}

/// `discover` flags.
#[derive(Debug, Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,

    /// Stop after this many records. Default: read everything, so the schema does not depend
    /// on the order of records or files.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// `sync` flags.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The pipeline to sync. Default: PIPELINE_NAME, else every pipeline.
    #[arg(short = 'p', long, env = "PIPELINE_NAME", value_name = "NAME")]
    pub pipeline: Option<String>,

    /// Run one pass and exit. Default: a new pass every `sync_frequency_seconds` until
    /// interrupted (SIGINT/SIGTERM finish the batch being committed, then exit).
    #[arg(long)]
    pub once: bool,
}

/// `schema` flags.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pipeline: PipelineArg,
}

/// Log levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Details for debugging.
    Debug,
    /// Progress worth knowing.
    Info,
    /// Problems that did not stop the run (the default).
    Warn,
    /// Only failures.
    Error,
}

impl LogLevel {
    /// The `tracing` filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// Report styles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputMode {
    /// A live progress display on standard error, then a summary.
    Progress,
    /// Plain lines.
    Text,
    /// One JSON event per line on standard output.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_are_accepted_before_and_after_the_command() {
        let before = Cli::try_parse_from([
            "skipprd", "--config", "a.yml", "--output", "json", "discover", "-p", "x",
        ])
        .unwrap();
        let after = Cli::try_parse_from([
            "skipprd",
            "discover",
            "--pipeline",
            "x",
            "--config",
            "a.yml",
            "--output",
            "json",
        ])
        .unwrap();
        for cli in [before, after] {
            assert_eq!(cli.config, Some(PathBuf::from("a.yml")));
            assert_eq!(cli.output, Some(OutputMode::Json));
            let Command::Discover(args) = cli.command else {
                panic!("not discover")
            };
            assert_eq!(args.pipeline.pipeline.as_deref(), Some("x"));
        }
    }

    #[test]
    fn store_create_parses() {
        let cli = Cli::try_parse_from(["skipprd", "store", "create", "--output", "json"]).unwrap();
        assert!(matches!(cli.command, Command::Store(StoreCommand::Create)));
        assert!(Cli::try_parse_from(["skipprd", "store"]).is_err());
    }

    #[test]
    fn reset_parses_with_and_without_its_confirmation() {
        let cli = Cli::try_parse_from(["skipprd", "reset", "-p", "events"]).unwrap();
        let Command::Reset(args) = cli.command else {
            panic!("not reset")
        };
        assert_eq!(args.pipeline.pipeline.as_deref(), Some("events"));
        assert!(!args.yes);
        let cli = Cli::try_parse_from(["skipprd", "reset", "--yes"]).unwrap();
        let Command::Reset(args) = cli.command else {
            panic!("not reset")
        };
        assert!(args.yes);
    }

    #[test]
    fn the_query_engine_is_local_unless_athena_is_asked_for() {
        let cli = Cli::try_parse_from(["skipprd", "query", "-s", "select 1"]).unwrap();
        let Command::Query(args) = cli.command else {
            panic!("not query")
        };
        assert_eq!(args.engine, EngineKind::Local);
        assert_eq!(args.athena_timeout, 300);
        let cli = Cli::try_parse_from([
            "skipprd",
            "query",
            "--engine",
            "athena",
            "--athena-timeout",
            "9",
        ])
        .unwrap();
        let Command::Query(args) = cli.command else {
            panic!("not query")
        };
        assert_eq!(args.engine, EngineKind::Athena);
        assert_eq!(args.athena_timeout, 9);
        assert!(Cli::try_parse_from(["skipprd", "query", "--engine", "presto"]).is_err());
    }

    #[test]
    fn bare_log_means_info_and_a_level_can_be_given() {
        let cli = Cli::try_parse_from(["skipprd", "discover", "--log"]).unwrap();
        assert_eq!(cli.log, Some(LogLevel::Info));
        let cli = Cli::try_parse_from(["skipprd", "schema", "--log", "debug"]).unwrap();
        assert_eq!(cli.log, Some(LogLevel::Debug));
        assert!(Cli::try_parse_from(["skipprd", "schema", "--log", "loud"]).is_err());
    }
}
