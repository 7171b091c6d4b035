//! The deadletter sinks (`File` and `S3`): each WAL batch's rejected records as one object.
//!
//! Rejected records are committed to the WAL with their batch (the `_deadletters` part, see
//! [`crate::deadletter::WAL_NAMESPACE`]) and delivered from there like data. A batch's records
//! become one object named `{pipeline}/b{batch id, 20 digits}.jsonl` (or `.parquet`) in the
//! sink's [`ObjectTarget`]:
//!
//! - `File`: the file `{path}/{pipeline}/b{id:020}.jsonl`, written whole under a temporary
//!   name and renamed into place ([`DirTarget`]);
//! - `S3`: the object `s3://{s3_bucket}/{s3_prefix}/{pipeline}/b{id:020}.jsonl`, written by
//!   one PUT of the whole object ([`S3Target`]).
//!
//! - `Athena`: the object `s3://{s3_bucket}/{s3_prefix}/_dl_{pipeline}/b{id:020}.parquet`, in
//!   the location of the Glue table `_dl_{pipeline}` (Hive, Parquet SerDe, unpartitioned; see
//!   [`super::files::glue`]), created or evolved before the first object of a delivery.
//!
//! Either way an object appears whole or not at all, and a retry after a crash writes the same
//! name again with the same records, replacing the first: no record is ever written twice.
//! The encoding ([`DeadletterSink::encode`]) is the same for both. The targets live in
//! [`crate::objects`], below both the sinks and the replay source that reads them back.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::aws::{Aws, Bucket};
use crate::config::connectors::{DeadletterConnector, OutputFormat};
use crate::config::validate::Named;
use crate::deadletter::WAL_NAMESPACE;
use crate::objects::{DirTarget, ObjectTarget, S3Target, file_name};
use crate::sinks::SinkError;
use crate::wal::{BatchId, BatchMeta, BatchPart, WalError};

/// A pipeline's deadletter sink: rejected records as one object per WAL batch.
#[derive(Debug)]
pub struct DeadletterSink {
    target: Arc<dyn ObjectTarget>,
    pipeline: String,
    format: OutputFormat,
    /// The Glue database of an `Athena` deadletter sink (the table is `pipeline`).
    glue: Option<super::files::glue::HiveGlue>,
}

impl DeadletterSink {
    /// The sink of a pipeline's `deadletter_sink`, or `None` for a connector this build does
    /// not deliver to. A `File` sink's relative path
    /// resolves against `base_dir`, then the working directory. An `S3` sink uses `aws` (the
    /// process's handle; loaded from the environment when `None`), in the connector's `region`
    /// when set, through its `endpoint` when set.
    pub fn open(
        sink: &Named<DeadletterConnector>,
        pipeline: &str,
        base_dir: &Path,
        aws: Option<&Aws>,
    ) -> Result<Option<Self>, SinkError> {
        let (target, format): (Arc<dyn ObjectTarget>, _) = match &sink.connector {
            DeadletterConnector::File(c) => {
                let path = Path::new(&c.output_dir);
                let dir = if path.is_absolute() {
                    path.to_path_buf()
                } else {
                    base_dir.join(path)
                };
                let dir = std::path::absolute(&dir).unwrap_or(dir);
                (Arc::new(DirTarget::new(dir)), c.format)
            }
            DeadletterConnector::S3(c) => {
                let aws = match (aws, c.region.as_deref()) {
                    (Some(aws), Some(region)) => aws.with_region(region),
                    (Some(aws), None) => aws.clone(),
                    (None, region) => {
                        Aws::load(region).map_err(|e| SinkError::DeadletterConfig {
                            sink: sink.name.clone(),
                            message: e.to_string(),
                        })?
                    }
                };
                let bucket = Bucket::new(&aws, &c.s3_bucket, c.endpoint.as_deref());
                let target = S3Target::new(bucket, c.s3_prefix.as_deref().unwrap_or(""));
                (Arc::new(target), c.format)
            }
            DeadletterConnector::Athena(c) => {
                let aws = match (aws, c.region.as_deref()) {
                    (Some(aws), Some(region)) => aws.with_region(region),
                    (Some(aws), None) => aws.clone(),
                    (None, region) => {
                        Aws::load(region).map_err(|e| SinkError::DeadletterConfig {
                            sink: sink.name.clone(),
                            message: e.to_string(),
                        })?
                    }
                };
                let Some(database) = c.glue_database_name.as_deref() else {
                    return Err(SinkError::DeadletterConfig {
                        sink: sink.name.clone(),
                        message: "`glue_database_name` is required".to_owned(),
                    });
                };
                let bucket = Bucket::new(&aws, &c.s3_bucket, None);
                let target = S3Target::new(bucket, c.s3_prefix.trim_matches('/'));
                return Ok(Some(DeadletterSink {
                    target: Arc::new(target),
                    pipeline: format!("_dl_{}", crate::schema::naming::table_name(pipeline)),
                    format: OutputFormat::Parquet,
                    glue: Some(super::files::glue::HiveGlue::new(
                        &aws,
                        c.catalog.clone(),
                        database,
                    )),
                }));
            }
        };
        Ok(Some(DeadletterSink {
            target,
            pipeline: pipeline.to_owned(),
            format: format.unwrap_or(OutputFormat::Jsonl),
            glue: None,
        }))
    }

    /// A sink writing `format` objects for `pipeline` into `target`.
    pub fn new(target: Arc<dyn ObjectTarget>, pipeline: &str, format: OutputFormat) -> Self {
        DeadletterSink {
            target,
            pipeline: pipeline.to_owned(),
            format,
            glue: None,
        }
    }

    /// The directory the files go to (`{path}/{pipeline}`), for a `File` sink; `None` for
    /// a sink that does not write to local disk.
    pub fn dir(&self) -> Option<PathBuf> {
        self.target.local_dir().map(|dir| dir.join(&self.pipeline))
    }

    /// Where the objects go, for messages: `{path}/{pipeline}` or
    /// `s3://{bucket}/{prefix}/{pipeline}`.
    pub fn location(&self) -> String {
        self.target.location_of(&self.pipeline)
    }

    /// The name of one batch's object, relative to the target: `{pipeline}/b{id:020}.jsonl`.
    pub fn name_of(&self, batch: BatchId) -> String {
        let ext = match self.format {
            OutputFormat::Jsonl => "jsonl",
            OutputFormat::Parquet => "parquet",
            OutputFormat::Csv => "csv",
        };
        format!("{}/b{:020}.{ext}", self.pipeline, batch.0)
    }

    /// Where one batch's object is: a path or an `s3://` URI.
    pub fn location_of(&self, batch: BatchId) -> String {
        self.target.location_of(&self.name_of(batch))
    }

    /// The objects `skipprd deadletters replay` has still to replay: the pipeline's
    /// `{pipeline}/b*.jsonl` whose file name is not in `replayed`, in order (names relative
    /// to the target; objects already moved to `{pipeline}/replayed/` are not listed).
    pub fn pending(&self, replayed: &BTreeSet<String>) -> Result<Vec<String>, SinkError> {
        let mut names = self.target.list(&self.pipeline)?;
        names.retain(|name| {
            let file = file_name(name);
            file.starts_with('b') && file.ends_with(".jsonl") && !replayed.contains(file)
        });
        Ok(names)
    }

    /// The target the objects are in, for reading them back (replay).
    pub fn target(&self) -> Arc<dyn ObjectTarget> {
        Arc::clone(&self.target)
    }

    /// Move the replayed object `name` (as [`DeadletterSink::pending`] lists it) to
    /// `{pipeline}/replayed/{file}`.
    pub fn set_aside(&self, name: &str) -> Result<(), SinkError> {
        let to = format!("{}/replayed/{}", self.pipeline, file_name(name));
        Ok(self.target.move_to(name, &to)?)
    }

    /// Write the rejected records of `batches`, one object per batch that has any; returns
    /// how many objects were written.
    pub fn deliver(
        &self,
        batches: &[BatchMeta],
        read: &mut dyn FnMut(BatchId) -> Result<Vec<BatchPart>, WalError>,
    ) -> Result<u64, SinkError> {
        let mut written = 0;
        let mut table_ready = false;
        for meta in batches {
            if !meta
                .parts
                .iter()
                .any(|p| p.namespace == WAL_NAMESPACE && p.rows > 0)
            {
                continue;
            }
            let parts = read(meta.id).map_err(|source| SinkError::Wal {
                batch: meta.id,
                source,
            })?;
            let Some(part) = parts.into_iter().find(|p| p.namespace == WAL_NAMESPACE) else {
                continue;
            };
            let bytes = self
                .encode(&part.batch)
                .map_err(|source| SinkError::Align {
                    table: "deadletters".to_owned(),
                    batch: meta.id,
                    source,
                })?;
            if let Some(glue) = &self.glue
                && !table_ready
            {
                use super::files::glue::hive_columns;
                glue.ensure_database()?;
                let location = format!("{}/", self.target.location_of(&self.pipeline));
                glue.ensure_table(
                    &self.pipeline,
                    &location,
                    &hive_columns(&part.batch.schema(), &[]),
                    &[],
                )?;
                table_ready = true;
            }
            self.target.put_whole(&self.name_of(meta.id), bytes)?;
            written += 1;
        }
        Ok(written)
    }

    /// One batch's rejected records in the sink's format: JSON lines, or one Parquet file.
    pub fn encode(
        &self,
        batch: &arrow::array::RecordBatch,
    ) -> Result<Vec<u8>, arrow::error::ArrowError> {
        super::files::encode::encode(batch, self.format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::{bucket, moto};
    use crate::deadletter::{Deadletter, FailureCode, to_record_batch};
    use crate::objects::ObjectError;
    use crate::wal::PartMeta;

    /// Two WAL batches: 1 with two rejected records, 2 with none.
    fn wal() -> (Vec<BatchMeta>, Vec<BatchPart>) {
        let rejected = |line: u64, raw: &str| Deadletter {
            source_uri: "/in/a.jsonl".into(),
            line,
            offset: line * 10,
            raw: raw.into(),
            error: "expected value at line 1 column 1".into(),
            code: FailureCode::Malformed,
            namespace: None,
        };
        let batch = to_record_batch(
            &[rejected(2, "not json"), rejected(5, "{\"id\": ")],
            1_700_000_000_000_000,
        )
        .unwrap();
        let meta = |id: u64, rows: u64| BatchMeta {
            id: BatchId(id),
            position: Vec::new(),
            parts: vec![PartMeta {
                namespace: WAL_NAMESPACE.into(),
                schema_version: 1,
                rows,
            }],
            segment: 1,
            offset: 0,
            bytes: 100,
        };
        let part = BatchPart {
            namespace: WAL_NAMESPACE.into(),
            schema_version: 1,
            batch,
        };
        (vec![meta(1, 2), meta(2, 0)], vec![part])
    }

    /// The JSON lines every target must hold for batch 1.
    fn expected_lines(ids: [&str; 2]) -> String {
        let line = |id: &str, record: &str, key: u64| {
            format!(
                "{{\"id\":\"{id}\",\"record\":{},\"error\":\"expected value at line 1 column 1\",\"failure_code\":\"malformed\",\"processed_time\":\"2023-11-14T22:13:20Z\",\"source_uri\":\"/in/a.jsonl\",\"offset_key\":\"{key}\",\"offset_position\":{}}}\n",
                serde_json::to_string(record).unwrap(),
                key * 10
            )
        };
        line(ids[0], "not json", 2) + &line(ids[1], "{\"id\": ", 5)
    }

    fn ids() -> [String; 2] {
        let rejected = |line: u64| Deadletter {
            source_uri: "/in/a.jsonl".into(),
            line,
            offset: line * 10,
            raw: String::new(),
            error: String::new(),
            code: FailureCode::Malformed,
            namespace: None,
        };
        [rejected(2).id(), rejected(5).id()]
    }

    fn deliver_twice(sink: &DeadletterSink) {
        let (metas, parts) = wal();
        let mut reads = 0;
        let mut read = |id: BatchId| {
            reads += 1;
            assert_eq!(
                id,
                BatchId(1),
                "a batch without rejected records is not read"
            );
            Ok(parts.clone())
        };
        assert_eq!(sink.deliver(&metas, &mut read).unwrap(), 1);
        // A re-delivery after a crash (the acknowledgement never stored): same name again.
        assert_eq!(sink.deliver(&metas, &mut read).unwrap(), 1);
        assert_eq!(reads, 2);
    }

    #[test]
    fn the_file_sink_writes_one_file_per_batch_and_a_retry_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let sink = DeadletterSink::new(
            Arc::new(DirTarget::new(dir.path().to_path_buf())),
            "p",
            OutputFormat::Jsonl,
        );
        assert_eq!(sink.dir(), Some(dir.path().join("p")));
        deliver_twice(&sink);
        let names: Vec<String> = std::fs::read_dir(dir.path().join("p"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["b00000000000000000001.jsonl"]);
        let [a, b] = ids();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("p/b00000000000000000001.jsonl")).unwrap(),
            expected_lines([&a, &b])
        );
    }

    #[test]
    fn the_s3_sink_puts_one_object_per_batch_under_the_prefix_and_a_retry_overwrites_it() {
        let aws = moto();
        let name = bucket(&aws, "dead");
        let s3 = Bucket::new(&aws, &name, None);
        let sink = DeadletterSink::new(
            Arc::new(S3Target::new(s3.clone(), "/rejects/x/")),
            "p",
            OutputFormat::Jsonl,
        );
        assert_eq!(sink.dir(), None);
        assert_eq!(sink.location(), format!("s3://{name}/rejects/x/p"));
        assert_eq!(
            sink.location_of(BatchId(1)),
            format!("s3://{name}/rejects/x/p/b00000000000000000001.jsonl")
        );
        deliver_twice(&sink);
        let key = "rejects/x/p/b00000000000000000001.jsonl";
        assert_eq!(s3.list("").unwrap(), [key]);
        let [a, b] = ids();
        let body = String::from_utf8(s3.get(key).unwrap().unwrap()).unwrap();
        assert_eq!(body, expected_lines([&a, &b]));
    }

    #[test]
    fn an_s3_sink_without_a_prefix_writes_at_the_bucket_root_and_parquet_reads_back() {
        let aws = moto();
        let name = bucket(&aws, "dead");
        let s3 = Bucket::new(&aws, &name, None);
        let sink = DeadletterSink::new(
            Arc::new(S3Target::new(s3.clone(), "")),
            "p",
            OutputFormat::Parquet,
        );
        deliver_twice(&sink);
        let key = "p/b00000000000000000001.parquet";
        assert_eq!(s3.list("").unwrap(), [key]);
        let body = bytes::Bytes::from(s3.get(key).unwrap().unwrap());
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(body, 16).unwrap();
        let batches: Vec<_> = reader.map(Result::unwrap).collect();
        let (_, parts) = wal();
        assert_eq!(batches, vec![parts[0].batch.clone()]);
    }

    /// Replay's view of a target: the pending objects of `p` (not `p/replayed/`, not other
    /// pipelines, not Parquet, not the replayed ones), their bytes, and the move aside, redone
    /// safely.
    fn list_get_and_move_aside(target: Arc<dyn ObjectTarget>) {
        let sink = DeadletterSink::new(Arc::clone(&target), "p", OutputFormat::Jsonl);
        assert_eq!(
            sink.pending(&BTreeSet::new()).unwrap(),
            Vec::<String>::new()
        );
        for (name, body) in [
            ("p/b00000000000000000002.jsonl", "two\n"),
            ("p/b00000000000000000001.jsonl", "one\n"),
            ("p/b00000000000000000003.parquet", "pq"),
            ("p/replayed/b00000000000000000000.jsonl", "old\n"),
            ("q/b00000000000000000004.jsonl", "other pipeline\n"),
        ] {
            target.put_whole(name, body.as_bytes().to_vec()).unwrap();
        }
        let one = "p/b00000000000000000001.jsonl";
        let two = "p/b00000000000000000002.jsonl";
        assert_eq!(sink.pending(&BTreeSet::new()).unwrap(), [one, two]);
        let replayed = BTreeSet::from(["b00000000000000000002.jsonl".to_owned()]);
        assert_eq!(sink.pending(&replayed).unwrap(), [one]);
        assert_eq!(target.get(one).unwrap().as_deref(), Some(&b"one\n"[..]));
        assert_eq!(target.get("p/b09.jsonl").unwrap(), None);

        sink.set_aside(one).unwrap();
        assert_eq!(target.get(one).unwrap(), None);
        assert_eq!(
            target
                .get("p/replayed/b00000000000000000001.jsonl")
                .unwrap()
                .as_deref(),
            Some(&b"one\n"[..])
        );
        assert_eq!(sink.pending(&BTreeSet::new()).unwrap(), [two]);
        assert_eq!(
            target.list("p/replayed").unwrap(),
            [
                "p/replayed/b00000000000000000000.jsonl",
                "p/replayed/b00000000000000000001.jsonl"
            ]
        );
        // Redone after a crash that finished the move: nothing to do, nothing lost.
        sink.set_aside(one).unwrap();
        assert!(
            target
                .get("p/replayed/b00000000000000000001.jsonl")
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_dir_target_lists_reads_and_moves_replayed_files_aside() {
        let dir = tempfile::tempdir().unwrap();
        list_get_and_move_aside(Arc::new(DirTarget::new(dir.path().to_path_buf())));
    }

    #[test]
    fn an_s3_target_lists_reads_and_moves_replayed_objects_aside() {
        let aws = moto();
        let name = bucket(&aws, "dead");
        let s3 = Bucket::new(&aws, &name, None);
        list_get_and_move_aside(Arc::new(S3Target::new(s3.clone(), "rejects")));
        // Everything stays under the prefix; the moved object is gone from its old key.
        let keys = s3.list("").unwrap();
        assert!(keys.iter().all(|k| k.starts_with("rejects/")), "{keys:?}");
        assert!(!keys.contains(&"rejects/p/b00000000000000000001.jsonl".to_owned()));
        assert!(keys.contains(&"rejects/p/replayed/b00000000000000000001.jsonl".to_owned()));
    }

    #[test]
    fn a_failed_put_names_the_object_and_is_not_retryable_when_the_bucket_is_missing() {
        let aws = moto();
        let sink = DeadletterSink::new(
            Arc::new(S3Target::new(
                Bucket::new(&aws, "no-such-bucket-skipprd", None),
                "r",
            )),
            "p",
            OutputFormat::Jsonl,
        );
        let (metas, parts) = wal();
        let error = sink
            .deliver(&metas, &mut |_| Ok(parts.clone()))
            .unwrap_err();
        assert!(
            matches!(error, SinkError::Object(ObjectError::S3 { .. })),
            "{error:?}"
        );
        assert!(!error.is_retryable(), "{error}");
        assert!(
            error
                .to_string()
                .contains("s3://no-such-bucket-skipprd/r/p/b00000000000000000001.jsonl"),
            "{error}"
        );
    }
}
