//! `discover`: read the source, infer each namespace's schema, save it.
//!
//! Discover never writes to a destination, so it is safe on production sources. By default it
//! reads every record, which makes the result independent of record and file order (the
//! inference is order-independent; see [`crate::schema`]); `limit` stops after that many
//! records, for a quick look at a large source (the result then depends on what came first).
//! A Postgres source is sampled: at most [`crate::sources::postgres::DISCOVER_SAMPLE_ROWS`]
//! rows of each table (the first in key order). An HttpClient source is sampled too: its
//! first [`crate::sources::http::DISCOVER_SAMPLE_RECORDS`] records (its first pages; `limit`
//! sets the number), so discover neither walks a whole API nor spends its rate limit.
//!
//! The inference is merged into the saved schema, never replacing it: a column and its widest
//! type, once saved, stay (committed batches and the tables use them), and the save is fenced
//! by the writer lease (see `schema_save.rs`).
//!
//! Memory stays bounded whatever the input size: records are read in batches and folded into
//! per-field accumulators, never kept.

use std::time::{Duration, Instant};

use crate::aws::{Aws, Bucket};
use crate::config::validate::{Settings, ValidatedConfig, ValidatedPipeline};
use crate::config::{ConfigError, StorageMode};
use crate::schema::{
    LocalSchemaStore, PipelineSchema, PipelineSchemaStore, S3SchemaStore, SchemaInferrer,
    SchemaStore, TransformOptions,
};

use super::events::{Event, Observer};
use super::held::Held;
use super::schema_save::{Fenced, save_schema};
use super::source::{open_source_for_discover, read_ahead};
use super::{DeadletterLog, PipelineError};

/// Options of one `discover` run.
#[derive(Debug, Clone, Default)]
pub struct DiscoverOptions {
    /// Stop after this many records (`None`: read everything).
    pub limit: Option<u64>,
    /// Minimum time between two `DiscoverProgress` events.
    pub progress_interval: Duration,
    /// How long to wait for the pipeline's writer lease (held by a running `sync`).
    pub lease_wait: Duration,
    /// The AWS handle for a schema store in S3 (built once per process; loaded from the
    /// environment on first need when `None`).
    pub aws: Option<Aws>,
}

/// What `discover` did.
#[derive(Debug, Clone)]
pub struct DiscoverReport {
    /// The inferred schema (also saved).
    pub schema: PipelineSchema,
    /// Records read.
    pub records: u64,
    /// Records rejected.
    pub deadletters: u64,
    /// Input bytes read.
    pub bytes: u64,
    /// Where the schema was saved.
    pub schema_location: String,
    /// Wall time.
    pub elapsed: Duration,
}

/// The schema store of a pipeline, per the storage mode: the file under its data directory
/// (`local`), or the object `schemas/{tenant}/{workspace}/{pipeline}/schema.json` in the
/// skippr bucket (`s3`). `aws` is the process's AWS handle; with `s3` and none given, one is
/// loaded from the environment.
pub fn schema_store(
    settings: &Settings,
    pipeline: &ValidatedPipeline,
    aws: Option<&Aws>,
) -> Result<PipelineSchemaStore, PipelineError> {
    match settings.storage_mode {
        StorageMode::Local => Ok(PipelineSchemaStore::Local(LocalSchemaStore::new(
            pipeline.schema_path(settings),
        ))),
        StorageMode::S3 => {
            let bucket = settings.skippr_s3_bucket.as_deref().ok_or_else(|| {
                ConfigError::UnsupportedSetting {
                    setting: "skippr.skipprd_el_storage_mode".to_owned(),
                    value: "s3".to_owned(),
                    note: Some(
                        "schemas in S3 need the skippr bucket: set skippr.skippr_s3_bucket (SKIPPR_S3_BUCKET)"
                            .to_owned(),
                    ),
                }
            })?;
            let loaded;
            let aws = match aws {
                Some(aws) => aws,
                None => {
                    loaded = Aws::load(None).map_err(|source| PipelineError::Aws {
                        pipeline: pipeline.name.clone(),
                        source,
                    })?;
                    &loaded
                }
            };
            let key = S3SchemaStore::key_for(&settings.tenant, &settings.workspace, &pipeline.name);
            Ok(PipelineSchemaStore::S3(Box::new(S3SchemaStore::new(
                Bucket::new(aws, bucket, None),
                key,
            ))))
        }
    }
}

/// The namespace of records no namespace field routes: the pipeline's name, or for an
/// `HttpClient` source `http.{url_host}` as the real product names it (made table-safe by
/// [`crate::schema::sanitize_namespace`]: `http_api_example_com`).
fn default_namespace(pipeline: &ValidatedPipeline) -> String {
    if let crate::config::SourceConnector::HttpClient(c) = &pipeline.source.connector
        && let Ok(url) = reqwest::Url::parse(c.url.expose())
        && let Some(host) = url.host_str()
    {
        return crate::schema::sanitize_namespace(&format!("http.{host}"));
    }
    // Table-safe like every other namespace (Athena: lowercase letters, digits, `_`).
    crate::schema::sanitize_namespace(&pipeline.name)
}

/// The inference options of a pipeline.
pub fn transform_options(pipeline: &ValidatedPipeline) -> TransformOptions {
    TransformOptions {
        default_namespace: default_namespace(pipeline),
        namespace_fields: pipeline.transform.namespace_fields.clone(),
        flatten_events: pipeline.transform.flatten_events,
        merge_keys: pipeline.write.declared_merge_keys(),
        ..TransformOptions::default()
    }
}

/// Run `discover` on one pipeline and save its schema.
pub fn discover(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    options: &DiscoverOptions,
    observer: &mut dyn Observer,
) -> Result<DiscoverReport, PipelineError> {
    let store = schema_store(&config.settings, pipeline, options.aws.as_ref())?;
    // The schema file is the pipeline's state too: take the writer lease, so that discover
    // never overwrites it under a running `sync`.
    let held = Held::take(&config.settings, pipeline, options.lease_wait, observer)?;
    let lease = Fenced {
        store: &*held.store,
        partition: &held.partition,
        fence: Some(held.fence()),
    };
    let report = discover_with(config, pipeline, options, &store, Some(lease), observer);
    drop(held);
    report
}

/// [`discover`] with the schema store given, without a writer lease (the caller serialises
/// writers): the inference is merged into the saved schema all the same.
pub fn discover_into(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    options: &DiscoverOptions,
    store: &dyn SchemaStore,
    observer: &mut dyn Observer,
) -> Result<DiscoverReport, PipelineError> {
    discover_with(config, pipeline, options, store, None, observer)
}

/// [`discover_into`], the save fenced by `lease` when given.
fn discover_with(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    options: &DiscoverOptions,
    store: &dyn SchemaStore,
    lease: Option<Fenced<'_>>,
    observer: &mut dyn Observer,
) -> Result<DiscoverReport, PipelineError> {
    let started = Instant::now();
    let name = pipeline.name.clone();
    // An API and a database are sampled (their first pages, the first rows of each table),
    // never read whole; files are read to `limit`.
    let source =
        open_source_for_discover(pipeline, &config.settings, &config.base_dir, options.limit)?;
    let progress = source.progress();
    observer.event(&Event::DiscoverStart {
        pipeline: name.clone(),
        source: pipeline.source.name.clone(),
        files: progress.files_total,
        bytes_total: progress.bytes_total,
    });

    tracing::info!(
        pipeline = %name,
        source = %pipeline.source.name,
        files = progress.files_total,
        bytes = progress.bytes_total,
        "Discover started."
    );
    let mut inferrer = SchemaInferrer::new(transform_options(pipeline));
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut dl_log = DeadletterLog::new(&name);
    let mut last_progress = Instant::now();
    let schema_err = |source| PipelineError::Schema {
        pipeline: name.clone(),
        source,
    };
    read_ahead(source, 2, |batches| -> Result<(), PipelineError> {
        for step in batches {
            let (batch, progress, _checkpoint) = match step {
                Ok(step) => step,
                Err(e) if e.affects_one_file() => {
                    tracing::error!(pipeline = %name, error = %e, "Skipped a file that could not be read.");
                    continue;
                }
                Err(source) => {
                    return Err(PipelineError::Source {
                        pipeline: name.clone(),
                        source,
                    });
                }
            };
            bytes += batch.bytes_read;
            for dl in &batch.deadletters {
                dl_log.log(dl);
            }
            for record in &batch.records {
                if options.limit.is_some_and(|limit| records >= limit) {
                    return Ok(());
                }
                inferrer.add_record(record).map_err(schema_err)?;
                records += 1;
            }
            if last_progress.elapsed() >= options.progress_interval {
                last_progress = Instant::now();
                observer.event(&Event::DiscoverProgress {
                    pipeline: name.clone(),
                    records,
                    deadletters: dl_log.count(),
                    bytes,
                    bytes_total: progress.bytes_total,
                    files_done: progress.files_done,
                });
            }
        }
        Ok(())
    })?;
    let deadletters = dl_log.count();

    if records == 0 {
        return Err(PipelineError::NothingRead {
            pipeline: name,
            source_name: pipeline.source.name.clone(),
            deadletters,
        });
    }
    // Merged into the saved schema (a column and its widest type, once saved, stay), and
    // fenced by the lease.
    let inferred = inferrer.finish(&name, &config.settings.workspace);
    let saved = save_schema(store, &inferred, lease, &name)?;
    if !saved.changed {
        tracing::info!(pipeline = %name, "The saved schema already holds everything discover found.");
    }
    let schema = saved.schema;
    let mut total_fields = 0u64;
    for (namespace, ns) in &schema.namespaces {
        let fields = field_paths(&ns.fields);
        total_fields += fields.len() as u64;
        observer.event(&Event::NamespaceDiscovered {
            pipeline: name.clone(),
            namespace: namespace.clone(),
            records: ns.records,
            fields,
        });
    }
    write_schema_sink(pipeline, &schema, options.aws.as_ref())?;
    let elapsed = started.elapsed();
    tracing::info!(
        pipeline = %name,
        namespaces = schema.namespaces.len(),
        records,
        deadletters,
        bytes,
        seconds = elapsed.as_secs_f64(),
        schema = %store.location(),
        "Discover finished and saved the schema."
    );
    observer.event(&Event::DiscoverComplete {
        pipeline: name.clone(),
        namespaces: schema.namespaces.len() as u64,
        records,
        deadletters,
        bytes,
        seconds: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        schema_path: store.location().into(),
        namespaces_discovered: schema.namespaces.len() as u64,
        total_fields,
        elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    Ok(DiscoverReport {
        schema,
        records,
        deadletters,
        bytes,
        schema_location: store.location(),
        elapsed,
    })
}

/// With a schema sink that describes the data sink's tables (`Glue` for an `Athena` sink,
/// or the paired `AthenaIceberg`, `Duckdb` or `SkipprLake`), create or evolve those tables
/// for `schema`, writing no row.
fn write_schema_sink(
    pipeline: &ValidatedPipeline,
    schema: &PipelineSchema,
    aws: Option<&Aws>,
) -> Result<(), PipelineError> {
    use crate::config::SchemaSinkConnector as S;
    let Some(sink) = &pipeline.schema_sink else {
        return Ok(());
    };
    if !matches!(
        sink.connector,
        S::Glue(_) | S::AthenaIceberg(_) | S::Duckdb(_) | S::SkipprLake(_)
    ) {
        return Ok(());
    }
    let err = |source| PipelineError::Sink {
        pipeline: pipeline.name.clone(),
        source: Box::new(source),
    };
    let Some(data) = crate::sinks::open_any(pipeline, aws).map_err(err)? else {
        return Ok(());
    };
    let namespaces: Vec<&str> = schema.namespaces.keys().map(String::as_str).collect();
    data.prepare(&namespaces, schema).map_err(err)?;
    tracing::info!(pipeline = %pipeline.name, schema_sink = %sink.name, tables = namespaces.len(), location = %data.location(), "Wrote the schema to the schema sink's tables.");
    Ok(())
}

/// Every field as `path: type`, nested struct fields as dotted paths below their struct.
pub fn field_paths(fields: &[crate::schema::Field]) -> Vec<String> {
    fn walk(fields: &[crate::schema::Field], prefix: &str, out: &mut Vec<String>) {
        for field in fields {
            let path = format!("{prefix}{}", field.name);
            out.push(format!("{path}: {}", field.field_type));
            let mut inner = &field.field_type;
            while let crate::schema::FieldType::List(element) = inner {
                inner = element;
            }
            if let crate::schema::FieldType::Struct(children) = inner {
                walk(children, &format!("{path}."), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(fields, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::{load_file, validate};
    use crate::pipeline::events::Recorder;
    use crate::schema::MemorySchemaStore;

    fn project(records: &str) -> (tempfile::TempDir, ValidatedConfig) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("events.jsonl"), records).unwrap();
        std::fs::write(
            dir.path().join("skippr.yml"),
            "pipelines:\n  p:\n    data_source: data_sources.s\n    transform:\n      namespace_fields: kind\n\
             data_sources:\n  s:\n    File:\n      path: events.jsonl\n      batch_size: 2\n",
        )
        .unwrap();
        let loaded = load_file(&dir.path().join("skippr.yml"), BTreeMap::new()).unwrap();
        let config = validate(&loaded, None).unwrap();
        (dir, config)
    }

    #[test]
    fn discover_infers_namespaces_counts_deadletters_and_saves_the_schema() {
        let (_dir, config) = project(
            "{\"kind\":\"ride\",\"id\":1,\"price\":2.5}\nnot json\n{\"kind\":\"ride\",\"id\":2,\"price\":\"n/a\"}\n{\"kind\":\"Dock Event\",\"dock\":7}\n",
        );
        let pipeline = config.pipeline(None).unwrap();
        let store = MemorySchemaStore::default();
        let mut events = Recorder::default();
        let report = discover_into(
            &config,
            pipeline,
            &DiscoverOptions::default(),
            &store,
            &mut events,
        )
        .unwrap();
        assert_eq!(report.records, 3);
        assert_eq!(report.deadletters, 1);
        let saved = store.load().unwrap();
        assert_eq!(
            saved.namespaces.keys().collect::<Vec<_>>(),
            ["dock_event", "ride"]
        );
        let ride: Vec<String> = saved.namespaces["ride"]
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, f.field_type))
            .collect();
        assert!(ride.contains(&"price: double".to_owned()), "{ride:?}");
        assert!(
            ride.contains(&"price_string: string".to_owned()),
            "{ride:?}"
        );
        assert!(matches!(
            events.0.first(),
            Some(Event::DiscoverStart { .. })
        ));
        assert!(matches!(
            events.0.last(),
            Some(Event::DiscoverComplete {
                records: 3,
                deadletters: 1,
                namespaces: 2,
                ..
            })
        ));
        let discovered = events
            .0
            .iter()
            .filter(|e| matches!(e, Event::NamespaceDiscovered { .. }))
            .count();
        assert_eq!(discovered, 2);
    }

    /// Regression: discover saved a fresh inference, so a second run over files that no longer
    /// held a column (or only small values of a widened one) narrowed the saved schema.
    #[test]
    fn a_second_discover_merges_into_the_saved_schema_and_never_narrows_it() {
        let (dir, config) =
            project("{\"kind\":\"a\",\"n\":5000000000,\"gone\":\"x\"}\n{\"kind\":\"b\",\"m\":1}\n");
        let pipeline = config.pipeline(None).unwrap();
        let store = MemorySchemaStore::default();
        let options = DiscoverOptions::default();
        discover_into(
            &config,
            pipeline,
            &options,
            &store,
            &mut Recorder::default(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("events.jsonl"),
            "{\"kind\":\"a\",\"n\":1,\"new\":true}\n",
        )
        .unwrap();
        let report = discover_into(
            &config,
            pipeline,
            &options,
            &store,
            &mut Recorder::default(),
        )
        .unwrap();
        let saved = store.load().unwrap();
        assert_eq!(saved, report.schema);
        let a: Vec<String> = field_paths(&saved.namespaces["a"].fields);
        assert_eq!(
            a,
            ["gone: string", "kind: string", "n: long", "new: boolean"]
        );
        assert!(saved.namespaces.contains_key("b"), "a namespace stays too");
        assert_eq!(saved.namespaces["a"].records, 1, "counts are this run's");
    }

    #[test]
    fn discover_with_a_limit_stops_early() {
        let (_dir, config) = project(&"{\"kind\":\"a\",\"n\":1}\n".repeat(10));
        let pipeline = config.pipeline(None).unwrap();
        let store = MemorySchemaStore::default();
        let options = DiscoverOptions {
            limit: Some(3),
            ..DiscoverOptions::default()
        };
        let report = discover_into(
            &config,
            pipeline,
            &options,
            &store,
            &mut Recorder::default(),
        )
        .unwrap();
        assert_eq!(report.records, 3);
        assert_eq!(report.schema.namespaces["a"].records, 3);
    }

    #[test]
    fn a_missing_input_file_is_a_source_error_naming_the_path() {
        let (dir, config) = project("");
        std::fs::remove_file(dir.path().join("events.jsonl")).unwrap();
        let pipeline = config.pipeline(None).unwrap();
        let err = discover_into(
            &config,
            pipeline,
            &DiscoverOptions::default(),
            &MemorySchemaStore::default(),
            &mut Recorder::default(),
        )
        .unwrap_err();
        assert!(!err.is_config());
        assert!(err.to_string().contains("events.jsonl"), "{err}");
    }

    #[test]
    fn reading_no_record_fails_and_keeps_the_saved_schema() {
        let (dir, config) = project("{\"kind\":\"a\",\"n\":1}\n");
        let pipeline = config.pipeline(None).unwrap();
        let store = MemorySchemaStore::default();
        discover_into(
            &config,
            pipeline,
            &DiscoverOptions::default(),
            &store,
            &mut Recorder::default(),
        )
        .unwrap();
        std::fs::write(dir.path().join("events.jsonl"), "not json\n").unwrap();
        let err = discover_into(
            &config,
            pipeline,
            &DiscoverOptions::default(),
            &store,
            &mut Recorder::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("read 0 records from source 's' (1 rejected)"),
            "{err}"
        );
        assert!(
            store.load().unwrap().namespaces.contains_key("a"),
            "the earlier schema is kept"
        );
    }
}
