//! The overwrite-on-retry destinations: `File` (a local directory), `S3` (a key prefix),
//! `Athena` (S3 plus one Glue table per namespace, see [`glue`]) and `Stdout`.
//!
//! # Layout
//!
//! Each namespace is a table directory, each partition a Hive directory below it
//! ([`partition`]), each file one WAL batch part:
//!
//! ```text
//! {root}/{table}/{key=value}/.../{tenant}_{workspace}_{pipeline}-b{batch id, 20 digits}-p{part}.{parquet|jsonl|csv}
//! ```
//!
//! # Overwrite on retry, and what `landed` means
//!
//! A file's name derives only from the pipeline, the WAL batch id and the part's index in the
//! batch, and its rows only from that part (grouped and sorted the same way every time). A
//! WAL batch never changes once committed, so delivering it again writes the same names with
//! the same rows: each object is replaced whole (S3: one PUT; a local file: written under a
//! temporary name, synced, renamed into place), and a retried delivery never duplicates,
//! however the pipeline groups batches into deliveries the second time.
//!
//! After a delivery has written every file of its batches for a table (and, for `Athena`,
//! registered the partitions), it records the last batch id in a marker object,
//! `{root}/_skippr/landed/{tenant}_{workspace}_{pipeline}/{table}` (outside every table
//! directory, so no reader counts it). [`Sink::landed`] reads that marker: a batch at or below
//! it has all its files, so it is skipped; a crash before the marker leaves some files of the
//! later batches, which the next delivery writes again under the same names. Readers see a
//! batch's rows once after any crash and retry; during the retry window they may see a crashed
//! batch's files partly (no atomic commit across files, unlike the Iceberg sinks).
//!
//! `Stdout` prints each part's rows as JSON lines and records nothing: a batch the pipeline
//! delivers again (after a crash) is printed again.

pub mod encode;
pub mod glue;
pub mod partition;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::aws::{Aws, Bucket};
use crate::config::connectors::OutputFormat;
use crate::config::validate::{FileDestination, FileDestinationKind, Layout, ValidatedPipeline};
use crate::objects::{DirTarget, ObjectTarget, S3Target};
use crate::schema::PipelineSchema;
use crate::schema::naming::table_name;
use crate::wal::{BatchId, BatchMeta};

use self::glue::{HiveColumn, HiveGlue, glue_batch, hive_columns};
use self::partition::{PartitionKey, partition_columns, partition_keys, split};
use super::{CommitCheck, Delivered, ReadBatch, Sink, SinkError};

/// Where the marker objects live, below the root.
const MARKERS: &str = "_skippr/landed";

/// Where a [`FileSink`] writes.
#[derive(Debug)]
enum Output {
    /// Whole objects by name (a directory or an S3 prefix).
    Objects(Arc<dyn ObjectTarget>),
    /// Standard output.
    Stdout,
}

/// A `File`, `S3`, `Athena` or `Stdout` destination (see the module docs).
#[derive(Debug)]
pub struct FileSink {
    /// The sink's name in `data_sinks`, for messages.
    name: String,
    /// `{tenant}_{workspace}_{pipeline}`, table-safe: the stem of every file name.
    stem: String,
    output: Output,
    format: OutputFormat,
    layout: Layout,
    keys: Vec<PartitionKey>,
    /// The Glue tables of an `Athena` sink.
    glue: Option<HiveGlue>,
    /// Files uploaded at once (`max_concurrency` of an Athena sink; 1 otherwise).
    uploads: usize,
}

impl FileSink {
    /// The destination of `pipeline`, when it is an overwrite-on-retry one. `aws` is the
    /// process's AWS handle (loaded from the environment when `None` and needed).
    pub fn open(
        pipeline: &ValidatedPipeline,
        aws: Option<&Aws>,
    ) -> Result<Option<FileSink>, SinkError> {
        let Some(dest) = &pipeline.files else {
            return Ok(None);
        };
        FileSink::for_destination(dest, &pipeline.store.partition, aws).map(Some)
    }

    /// The sink of `dest` for the pipeline whose state partition is `identity`.
    pub fn for_destination(
        dest: &FileDestination,
        identity: &str,
        aws: Option<&Aws>,
    ) -> Result<FileSink, SinkError> {
        let aws_of = |region: &Option<String>| -> Result<Aws, SinkError> {
            match (aws, region) {
                (Some(aws), Some(region)) => Ok(aws.with_region(region)),
                (Some(aws), None) => Ok(aws.clone()),
                (None, region) => Aws::load(region.as_deref()).map_err(|source| SinkError::Aws {
                    sink: dest.name.clone(),
                    source,
                }),
            }
        };
        let (output, glue) = match &dest.kind {
            FileDestinationKind::File { dir } => {
                (Output::Objects(Arc::new(DirTarget::new(dir.clone()))), None)
            }
            FileDestinationKind::S3 {
                bucket,
                prefix,
                region,
                endpoint,
            } => {
                let aws = aws_of(region)?;
                let bucket = Bucket::new(&aws, bucket, endpoint.as_deref());
                (
                    Output::Objects(Arc::new(S3Target::new(bucket, prefix))),
                    None,
                )
            }
            FileDestinationKind::Athena(t) => {
                let aws = aws_of(&t.region)?;
                let bucket = Bucket::new(&aws, &t.bucket, None);
                (
                    Output::Objects(Arc::new(S3Target::new(bucket, &t.prefix))),
                    Some(
                        HiveGlue::new(&aws, t.catalog_id.clone(), &t.database)
                            .with_cache_ttl(t.glue_cache_ttl),
                    ),
                )
            }
            FileDestinationKind::Stdout => (Output::Stdout, None),
        };
        Ok(FileSink {
            name: dest.name.clone(),
            stem: table_name(&identity.replace('#', "_")),
            output,
            format: dest.format,
            keys: partition_keys(&dest.layout),
            layout: dest.layout.clone(),
            glue,
            uploads: match &dest.kind {
                FileDestinationKind::Athena(t) => t.upload_concurrency.max(1),
                _ => 1,
            },
        })
    }

    /// A sink writing `format` files for the pipeline `identity` into `target` (tests).
    pub fn with_target(
        name: &str,
        target: Arc<dyn ObjectTarget>,
        identity: &str,
        format: OutputFormat,
        layout: Layout,
    ) -> FileSink {
        FileSink {
            name: name.to_owned(),
            stem: table_name(&identity.replace('#', "_")),
            output: Output::Objects(target),
            format,
            keys: partition_keys(&layout),
            layout,
            glue: None,
            uploads: 1,
        }
    }

    /// Upload up to `n` files at once (an Athena sink's `max_concurrency`).
    pub fn with_uploads(mut self, n: usize) -> FileSink {
        self.uploads = n.max(1);
        self
    }

    /// The table (directory and Glue table) of a namespace.
    pub fn table_of(namespace: &str) -> String {
        table_name(namespace)
    }

    /// The file format.
    pub fn format(&self) -> OutputFormat {
        self.format
    }

    /// Whether the files carry Glue's column names ([`glue_batch`], an `Athena` sink) rather
    /// than the schema's own keys.
    pub fn glue_names(&self) -> bool {
        self.glue.is_some()
    }

    /// The partition keys' names before the destination's column naming, in key order (the
    /// order of a partition's values).
    pub fn partition_key_names(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.name.clone()).collect()
    }

    /// The top-level columns whose values are in the partition directories instead of the
    /// files (an `Athena` sink's identity keys); empty for the other sinks, whose files keep
    /// every column.
    pub fn columns_in_paths(&self) -> Vec<String> {
        match self.glue {
            Some(_) => partition_columns(&self.keys),
            None => Vec::new(),
        }
    }

    /// The partitions of `table` as Glue has them registered (each one's values in key order
    /// and its directory URI) for an `Athena` sink; `None` for the others.
    pub fn registered_partitions(
        &self,
        table: &str,
    ) -> Result<Option<Vec<glue::RegisteredPartition>>, SinkError> {
        self.glue.as_ref().map(|g| g.partitions(table)).transpose()
    }

    /// The partition keys' names as directories and Glue show them.
    fn key_names(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| match self.glue {
                Some(_) => crate::schema::naming::glue_column_name(&k.name),
                None => k.name.clone(),
            })
            .collect()
    }

    fn marker(&self, table: &str) -> String {
        format!("{MARKERS}/{}/{table}", self.stem)
    }

    /// The name of one file of a batch part, relative to the root.
    pub fn file_name(&self, table: &str, dir: &str, batch: BatchId, part: usize) -> String {
        let file = format!(
            "{}-b{:020}-p{part:03}.{}",
            self.stem,
            batch.0,
            encode::extension(self.format)
        );
        if dir.is_empty() {
            format!("{table}/{file}")
        } else {
            format!("{table}/{dir}/{file}")
        }
    }

    /// The tables this pipeline has a landed marker in, by name.
    pub fn landed_tables(&self) -> Result<Vec<String>, SinkError> {
        let Output::Objects(target) = &self.output else {
            return Ok(Vec::new());
        };
        Ok(target
            .list(&format!("{MARKERS}/{}", self.stem))?
            .iter()
            .map(|n| crate::objects::file_name(n).to_owned())
            .collect())
    }

    /// The data files of `table` from this pipeline's batches at or below `landed`, each as
    /// its location (a path for a `File` destination, an `s3://` URI for an `S3` one), sorted;
    /// files of later batches (a crashed delivery's) and of other pipelines are left out.
    pub fn data_files(&self, table: &str, landed: u64) -> Result<Vec<String>, SinkError> {
        let Output::Objects(target) = &self.output else {
            return Ok(Vec::new());
        };
        Ok(target
            .list_below(table)?
            .into_iter()
            .filter(|name| {
                self.batch_of(crate::objects::file_name(name))
                    .is_some_and(|batch| batch <= landed)
            })
            .map(|name| target.location_of(&name))
            .collect())
    }

    /// The WAL batch id of a file name of this pipeline (`{stem}-b{id}-p{part}.{ext}`), or
    /// `None` for a name of another pipeline or no data file (a temporary file).
    pub fn batch_of(&self, file: &str) -> Option<u64> {
        let rest = file.strip_prefix(&self.stem)?.strip_prefix("-b")?;
        let (id, rest) = rest.split_at_checked(20)?;
        let rest = rest.strip_prefix("-p")?;
        let (part, ext) = rest.split_once('.')?;
        (part.len() == 3
            && part.bytes().all(|b| b.is_ascii_digit())
            && ext == encode::extension(self.format))
        .then(|| id.parse().ok())
        .flatten()
    }

    /// The namespace's Arrow schema (its original keys), or `None` when the schema has none.
    fn arrow_of(schema: &PipelineSchema, namespace: &str) -> Option<SchemaRef> {
        schema
            .namespaces
            .get(namespace)
            .map(|ns| Arc::new(crate::schema::to_arrow_schema(&ns.fields)))
    }

    /// Create or evolve the Glue table of `namespace` (an `Athena` sink; otherwise nothing).
    fn prepare_table(
        &self,
        namespace: &str,
        arrow: &SchemaRef,
    ) -> Result<Vec<HiveColumn>, SinkError> {
        let columns = hive_columns(arrow, &partition_columns(&self.keys));
        if let (Some(glue), Output::Objects(target)) = (&self.glue, &self.output) {
            let table = Self::table_of(namespace);
            let location = format!("{}/", target.location_of(&table));
            glue.ensure_table(&table, &location, &columns, &self.key_names())?;
        }
        Ok(columns)
    }

    fn print(&self, batch: &arrow::array::RecordBatch) -> Result<(), SinkError> {
        let bytes = encode::encode(batch, OutputFormat::Jsonl).map_err(|e| SinkError::Config {
            sink: self.name.clone(),
            message: e.to_string(),
        })?;
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)
            .and_then(|()| out.flush())
            .map_err(|source| SinkError::Io {
                path: "<stdout>".into(),
                source,
            })
    }
}

/// Upload `pending` (emptied), each file on its own thread when there are several; the first
/// failure is returned once all have finished (file names are stable, so a retried delivery
/// overwrites what did land).
fn upload_all(
    target: &dyn ObjectTarget,
    pending: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), SinkError> {
    match pending.len() {
        0 => Ok(()),
        1 => {
            let (name, bytes) = pending.remove(0);
            Ok(target.put_whole(&name, bytes)?)
        }
        _ => std::thread::scope(|scope| {
            let uploads: Vec<_> = pending
                .drain(..)
                .map(|(name, bytes)| scope.spawn(move || target.put_whole(&name, bytes)))
                .collect();
            let mut first = Ok(());
            for upload in uploads {
                let result = upload
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                if first.is_ok() {
                    first = result;
                }
            }
            Ok(first?)
        }),
    }
}

impl Sink for FileSink {
    fn location(&self) -> String {
        match &self.output {
            Output::Objects(target) => target.location_of(""),
            Output::Stdout => "standard output".to_owned(),
        }
    }

    fn prepare(&self, namespaces: &[&str], schema: &PipelineSchema) -> Result<(), SinkError> {
        if let Some(glue) = &self.glue {
            glue.ensure_database()?;
        }
        for ns in namespaces {
            if let Some(arrow) = Self::arrow_of(schema, ns) {
                self.prepare_table(ns, &arrow)?;
            }
        }
        Ok(())
    }

    fn landed(&self, namespace: &str) -> Result<u64, SinkError> {
        let Output::Objects(target) = &self.output else {
            return Ok(0);
        };
        let name = self.marker(&Self::table_of(namespace));
        Ok(target
            .get(&name)?
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
            .unwrap_or(0))
    }

    fn landed_any(&self) -> Result<u64, SinkError> {
        let Output::Objects(target) = &self.output else {
            return Ok(0);
        };
        let mut max = 0;
        for name in target.list(&format!("{MARKERS}/{}", self.stem))? {
            if let Some(bytes) = target.get(&name)? {
                max = max.max(
                    String::from_utf8_lossy(&bytes)
                        .trim()
                        .parse::<u64>()
                        .unwrap_or(0),
                );
            }
        }
        Ok(max)
    }

    fn write(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: CommitCheck<'_>,
    ) -> Result<Delivered, SinkError> {
        let Some(last) = batches.last().map(|b| b.id) else {
            return Ok(Delivered::default());
        };
        let mut delivered = Delivered::default();
        let namespaces: BTreeSet<&str> = batches
            .iter()
            .flat_map(|b| b.parts.iter())
            .filter(|p| p.rows > 0 && p.kind().is_data())
            .map(|p| p.namespace.as_str())
            .collect();
        if let Some(glue) = &self.glue
            && !namespaces.is_empty()
        {
            glue.ensure_database()?;
        }
        struct Open {
            landed: u64,
            arrow: SchemaRef,
            columns: Vec<HiveColumn>,
            partitions: BTreeMap<String, Vec<String>>,
            wrote: bool,
        }
        let mut open: BTreeMap<String, Open> = BTreeMap::new();
        for ns in namespaces {
            let Some(arrow) = Self::arrow_of(schema, ns) else {
                return Err(SinkError::Config {
                    sink: self.name.clone(),
                    message: format!(
                        "the schema has no namespace `{ns}` that WAL batches hold rows of"
                    ),
                });
            };
            let columns = self.prepare_table(ns, &arrow)?;
            open.insert(
                ns.to_owned(),
                Open {
                    landed: self.landed(ns)?,
                    arrow,
                    columns,
                    partitions: BTreeMap::new(),
                    wrote: false,
                },
            );
        }
        let names = self.key_names();
        // Encoded files waiting to be uploaded together (at most `uploads` of them).
        let mut pending: Vec<(String, Vec<u8>)> = Vec::new();
        for meta in batches {
            if !delivered.wants(meta, |ns| open.get(ns).map(|o| o.landed)) {
                continue;
            }
            let parts = read(meta.id).map_err(|source| SinkError::Wal {
                batch: meta.id,
                source,
            })?;
            for (index, part) in parts.iter().enumerate() {
                if part.batch.num_rows() == 0 {
                    continue;
                }
                let Some(o) = open.get_mut(&part.namespace) else {
                    continue;
                };
                if meta.id.0 <= o.landed {
                    delivered.skipped_parts += 1;
                    delivered.skipped_rows += part.batch.num_rows() as u64;
                    continue;
                }
                let table = Self::table_of(&part.namespace);
                let align = |source| SinkError::Align {
                    table: table.clone(),
                    batch: meta.id,
                    source,
                };
                let aligned = crate::schema::adapt::adapt_batch(&part.batch, &o.arrow)
                    .and_then(|b| self.layout.sort(&b))
                    .map_err(align)?;
                let target = match &self.output {
                    Output::Stdout => {
                        self.print(&aligned)?;
                        delivered.rows += aligned.num_rows() as u64;
                        continue;
                    }
                    Output::Objects(target) => target,
                };
                // Split by the original keys, then (Athena) rename to Glue's names.
                for group in
                    split(&aligned, &self.keys, &names, self.glue.is_some()).map_err(align)?
                {
                    let name = self.file_name(&table, &group.dir, meta.id, index);
                    let rows = if self.glue.is_some() {
                        glue_batch(&group.rows).map_err(align)?
                    } else {
                        group.rows.clone()
                    };
                    let bytes = encode::encode(&rows, self.format).map_err(align)?;
                    pending.push((name, bytes));
                    if pending.len() >= self.uploads {
                        upload_all(target.as_ref(), &mut pending)?;
                    }
                    delivered.files += 1;
                    delivered.rows += group.rows.num_rows() as u64;
                    o.wrote = true;
                    if !group.dir.is_empty() {
                        o.partitions.entry(group.dir.clone()).or_insert_with(|| {
                            group
                                .values
                                .iter()
                                .map(|v| v.clone().unwrap_or_else(|| "null".to_owned()))
                                .collect()
                        });
                    }
                }
            }
        }
        if let Output::Objects(target) = &self.output {
            // Every data file is in place before any table's partitions or marker.
            upload_all(target.as_ref(), &mut pending)?;
            for (ns, o) in &open {
                if !o.wrote {
                    continue;
                }
                let table = Self::table_of(ns);
                if let Some(glue) = &self.glue {
                    let partitions: Vec<(Vec<String>, String)> = o
                        .partitions
                        .iter()
                        .map(|(dir, values)| {
                            (
                                values.clone(),
                                format!("{}/", target.location_of(&format!("{table}/{dir}"))),
                            )
                        })
                        .collect();
                    glue.add_partitions(&table, &o.columns, &partitions)?;
                }
                if crate::failpoint::check(crate::failpoint::sink::AFTER_DATA_FILES) {
                    return Err(SinkError::Failpoint {
                        name: crate::failpoint::sink::AFTER_DATA_FILES,
                    });
                }
                before_commit(ns)?;
                target.put_whole(&self.marker(&table), last.0.to_string().into_bytes())?;
                if crate::failpoint::check(crate::failpoint::sink::AFTER_TABLE_COMMIT) {
                    return Err(SinkError::Failpoint {
                        name: crate::failpoint::sink::AFTER_TABLE_COMMIT,
                    });
                }
                delivered.commits += 1;
            }
        }
        delivered.through = Some(last);
        Ok(delivered)
    }
}

#[cfg(test)]
mod tests;
