//! Building a pipeline's source from its validated config.

use std::path::Path;

use crate::aws::Aws;
use crate::config::SourceConnector;
use crate::config::connectors::{InputFormat, S3Listing};
use crate::config::validate::{Settings, ValidatedPipeline};
use crate::sources::file::{FileFormat, FileSource, FileSourceOptions};
use crate::sources::http::{DISCOVER_SAMPLE_RECORDS, HttpSource, HttpSourceOptions};
use crate::sources::postgres::{PostgresSource, PostgresSourceOptions};
use crate::sources::s3::{S3Source, S3SourceOptions};
use crate::sources::{Progress, Source, SourceBatch, SourceError};

use super::PipelineError;

/// Open the pipeline's source. Relative paths resolve against `base_dir` (the config file's
/// directory).
pub fn open_source(
    pipeline: &ValidatedPipeline,
    settings: &Settings,
    base_dir: &Path,
) -> Result<Box<dyn Source>, PipelineError> {
    open_source_at(pipeline, settings, base_dir, None)
}

/// Open the pipeline's source at a checkpoint (the bytes a source's
/// [`Source::checkpoint`] gave), or at its start.
pub fn open_source_at(
    pipeline: &ValidatedPipeline,
    settings: &Settings,
    base_dir: &Path,
    checkpoint: Option<&[u8]>,
) -> Result<Box<dyn Source>, PipelineError> {
    open(pipeline, settings, base_dir, checkpoint, false, None, None)
}

/// Open the pipeline's source to sample it for `discover`, at its start: an HttpClient source
/// ends after `limit` records (default [`DISCOVER_SAMPLE_RECORDS`]: the first pages, not the
/// whole API), a Postgres source reads the first
/// [`DISCOVER_SAMPLE_ROWS`](crate::sources::postgres::DISCOVER_SAMPLE_ROWS) rows of each table
/// in key order. Files and objects are read as for a sync (the caller stops at `limit`).
pub fn open_source_for_discover(
    pipeline: &ValidatedPipeline,
    settings: &Settings,
    base_dir: &Path,
    limit: Option<u64>,
) -> Result<Box<dyn Source>, PipelineError> {
    let sample = limit.unwrap_or(DISCOVER_SAMPLE_RECORDS);
    open(
        pipeline,
        settings,
        base_dir,
        None,
        false,
        None,
        Some(sample),
    )
}

/// [`open_source_at`] for a caller that types JSON lines from their text: JSON-lines records
/// come unparsed (see [`crate::sources::SourceRecord::unparsed`]). An S3 source sends its
/// requests through `aws` when given (so the pass counts them), else through a handle loaded
/// from the environment.
pub(crate) fn open_source_unparsed_at(
    pipeline: &ValidatedPipeline,
    settings: &Settings,
    base_dir: &Path,
    checkpoint: Option<&[u8]>,
    aws: Option<&Aws>,
) -> Result<Box<dyn Source>, PipelineError> {
    open(pipeline, settings, base_dir, checkpoint, true, aws, None)
}

/// The connector's source, shaped by the pipeline's `record_field_path` and `inject_fields`
/// when it has them (then its records come parsed: see [`crate::sources::shaped`]).
fn open(
    pipeline: &ValidatedPipeline,
    // The project's settings are resolved into the pipeline (its batch thresholds); kept so
    // a source that needs a project-wide setting has it.
    _settings: &Settings,
    base_dir: &Path,
    checkpoint: Option<&[u8]>,
    unparsed_json_lines: bool,
    aws: Option<&Aws>,
    sample: Option<u64>,
) -> Result<Box<dyn Source>, PipelineError> {
    let shape = &pipeline.transform.shape;
    if !shape.is_active() {
        // Rows as typed cells where the source has them: `sync` types them itself and
        // `discover` infers their columns' types from them.
        let typed_cells = unparsed_json_lines || sample.is_some();
        return open_connector(
            pipeline,
            base_dir,
            checkpoint,
            (unparsed_json_lines, typed_cells),
            aws,
            sample,
        );
    }
    // Shaping needs parsed records.
    let inner = open_connector(pipeline, base_dir, checkpoint, (false, false), aws, sample)?;
    Ok(Box::new(crate::sources::shaped::Shaped::new(
        inner,
        shape.clone(),
    )))
}

/// `sample`: opened for `discover` (see [`open_source_for_discover`]). `unparsed_json_lines`:
/// JSON lines handed out as their text; `typed_cells`: a typed source's rows as cells.
fn open_connector(
    pipeline: &ValidatedPipeline,
    base_dir: &Path,
    checkpoint: Option<&[u8]>,
    (unparsed_json_lines, typed_cells): (bool, bool),
    aws: Option<&Aws>,
    sample: Option<u64>,
) -> Result<Box<dyn Source>, PipelineError> {
    let source_error = |source| PipelineError::Source {
        pipeline: pipeline.name.clone(),
        source,
    };
    match &pipeline.source.connector {
        SourceConnector::S3(c) => {
            // The connector's region overrides the environment's.
            let aws = match (aws, c.region.as_deref()) {
                (Some(aws), Some(region)) => aws.with_region(region),
                (Some(aws), None) => aws.clone(),
                (None, region) => Aws::load(region).map_err(|source| PipelineError::Aws {
                    pipeline: pipeline.name.clone(),
                    source,
                })?,
            };
            let options = S3SourceOptions {
                endpoint: c.endpoint.clone(),
                format: c.format.and_then(file_format),
                full_listing: c.s3_listing == Some(S3Listing::Full),
                ordered_depth: c.s3_prefix_ordered_depth.unwrap_or(0),
                delimiter: c.s3_delimiter.clone().unwrap_or_else(|| "/".to_owned()),
                batch_rows: c
                    .batch_size
                    .unwrap_or(FileSourceOptions::DEFAULT_BATCH_ROWS),
                batch_bytes: c
                    .batch_size_bytes
                    .unwrap_or(pipeline.buffer_threshold_bytes),
                batch_time: Some(batch_time(c.batch_size_seconds, pipeline)),
                // Lenient readings apply to records that fail strict parsing, as read.
                unparsed_json_lines: unparsed_json_lines
                    && !pipeline.transform.leniency.is_active(),
                leniency: pipeline.transform.leniency,
                ..S3SourceOptions::new(aws, &c.s3_bucket, c.s3_prefix.as_deref().unwrap_or(""))
            };
            let source = S3Source::open_at(options, checkpoint).map_err(source_error)?;
            Ok(Box::new(source))
        }
        SourceConnector::File(c) => {
            let options = FileSourceOptions {
                path: c.path.clone(),
                format: c.format.and_then(file_format),
                base_dir: base_dir.to_path_buf(),
                batch_rows: c
                    .batch_size
                    .unwrap_or(FileSourceOptions::DEFAULT_BATCH_ROWS),
                batch_bytes: c
                    .batch_size_bytes
                    .unwrap_or(pipeline.buffer_threshold_bytes),
                batch_time: Some(batch_time(c.batch_size_seconds, pipeline)),
                // Never read the pipeline's own state (schema, WAL) as input.
                exclude: vec![pipeline.data_dir.clone()],
                // Lenient readings apply to records that fail strict parsing, as read.
                unparsed_json_lines: unparsed_json_lines
                    && !pipeline.transform.leniency.is_active(),
                leniency: pipeline.transform.leniency,
                settle: c.settle_secs.map_or(
                    FileSourceOptions::DEFAULT_SETTLE,
                    std::time::Duration::from_secs,
                ),
                ..FileSourceOptions::default()
            };
            let source = FileSource::open_at(options, checkpoint).map_err(source_error)?;
            Ok(Box::new(source))
        }
        SourceConnector::HttpClient(c) => {
            let mut options = HttpSourceOptions::from_config(
                c,
                FileSourceOptions::DEFAULT_BATCH_ROWS,
                pipeline.buffer_threshold_bytes,
                pipeline.buffer_threshold_seconds,
            )
            .map_err(source_error)?;
            options.sample_records = sample;
            // Lenient readings apply to records that fail strict parsing, as read.
            options.unparsed = unparsed_json_lines && !pipeline.transform.leniency.is_active();
            let source = HttpSource::open_at(options, checkpoint).map_err(source_error)?;
            Ok(Box::new(source))
        }
        SourceConnector::Postgres(c) => {
            let mut options = PostgresSourceOptions::from_config(c).map_err(source_error)?;
            options.cdc = pipeline.cdc.clone();
            // There is no leniency for typed values.
            options.typed_cells = typed_cells;
            if sample.is_some() {
                // A database is sampled: the first rows of each table in key order.
                options.sample_rows = Some(crate::sources::postgres::DISCOVER_SAMPLE_ROWS);
            }
            let source = PostgresSource::open_at(options, checkpoint).map_err(source_error)?;
            Ok(Box::new(source))
        }
        SourceConnector::Stdin(c) => {
            let options = crate::sources::stdin::StdinOptions {
                csv: c.format == Some(InputFormat::Csv),
                batch_rows: c
                    .batch_size
                    .unwrap_or(FileSourceOptions::DEFAULT_BATCH_ROWS)
                    .max(1),
                batch_bytes: c
                    .batch_size_bytes
                    .unwrap_or(pipeline.buffer_threshold_bytes),
                batch_time: batch_time(c.batch_size_seconds, pipeline),
                max_record_bytes: FileSourceOptions::DEFAULT_MAX_RECORD_BYTES,
                leniency: pipeline.transform.leniency,
            };
            Ok(Box::new(crate::sources::stdin::StdinSource::open(options)))
        }
    }
}

/// How long a batch may fill: the source's `batch_size_seconds`, else
/// `BUFFER_THRESHOLD_SECONDS`.
fn batch_time(seconds: Option<u64>, pipeline: &ValidatedPipeline) -> std::time::Duration {
    seconds.map_or(
        pipeline.buffer_threshold_seconds,
        std::time::Duration::from_secs,
    )
}

/// The File source's format for a configured one; `json` means "JSON, its shape detected".
fn file_format(format: InputFormat) -> Option<FileFormat> {
    match format {
        InputFormat::Jsonl => Some(FileFormat::Jsonl),
        InputFormat::Json => Some(FileFormat::Json),
        InputFormat::JsonArray => Some(FileFormat::JsonArray),
        InputFormat::Csv => Some(FileFormat::Csv),
        InputFormat::Parquet => Some(FileFormat::Parquet),
    }
}

/// One step of a read-ahead source: a batch, the progress after it and the source's
/// checkpoint just after it, or the error that ended reading.
pub type ReadAhead = Result<(SourceBatch, Progress, Vec<u8>), SourceError>;

/// Run `consume` with a channel fed by `source` on its own thread, `depth` batches ahead.
///
/// Reading and parsing then overlap with whatever `consume` does (inference, typing), which
/// uses the second core. The reader stops after an error, at the end of the source, or as
/// soon as `consume` returns and drops the receiver, so memory stays bounded by `depth + 2`
/// batches.
pub fn read_ahead<R>(
    source: Box<dyn Source>,
    depth: usize,
    consume: impl FnOnce(std::sync::mpsc::Receiver<ReadAhead>) -> R,
) -> R {
    read_ahead_with(source, depth, |batch| batch, consume).0
}

/// [`read_ahead`], with each batch passed through `prepare` on the reading thread too; also
/// returns the source's progress as it stopped (its request counts then include any request
/// made after the last batch, such as the empty page that ended a pagination).
pub fn read_ahead_with<T: Send, R>(
    mut source: Box<dyn Source>,
    depth: usize,
    mut prepare: impl FnMut(SourceBatch) -> T + Send,
    consume: impl FnOnce(std::sync::mpsc::Receiver<Result<(T, Progress, Vec<u8>), SourceError>>) -> R,
) -> (R, Progress) {
    let (tx, rx) = std::sync::mpsc::sync_channel(depth);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            loop {
                let step = match source.next_batch() {
                    Ok(Some(batch)) => source
                        .checkpoint()
                        .map(|c| (prepare(batch), source.progress(), c)),
                    Ok(None) => return source.progress(),
                    Err(e) => Err(e),
                };
                // An error about one file lets reading go on with the next file (the source
                // moves on when called again); any other error ends reading.
                let stop = step.as_ref().is_err_and(|e| !e.affects_one_file());
                if tx.send(step).is_err() || stop {
                    return source.progress();
                }
            }
        });
        // `consume` owns the receiver: when it returns, the reader's next send fails and it
        // stops, so the join below does not wait for the rest of the source.
        let result = consume(rx);
        let progress = match reader.join() {
            Ok(progress) => progress,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (result, progress)
    })
}
