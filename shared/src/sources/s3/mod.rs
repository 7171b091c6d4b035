//! The S3 source: the File source's formats (JSON lines, JSON arrays, JSON documents, CSV,
//! Parquet; gzip) read from the objects under `s3://{bucket}/{prefix}`.
//!
//! # Which objects, in which order
//!
//! Every object whose key starts with the prefix, in key order (S3 lists keys in UTF-8 byte
//! order), except "folder" markers (keys ending in `/`). Each object's format and compression
//! are told as the File source tells a file's (see [`crate::sources::file`]): content first
//! (gzip and Parquet magic bytes), then the key's extension, then JSON sniffing; the
//! configured `format` overrides. The sniffing sees the object's first 8 KiB (read from the
//! same GET that reads the object, so it costs no request): a JSON object whose first line is
//! longer than that is read as JSON lines. An object whose format cannot be told, or that
//! cannot be read in its format (a gzipped Parquet object, content that is not JSON under
//! `format: json`), is skipped with a warning, once: the checkpoint closes it.
//!
//! # Reading
//!
//! Text formats stream the GET body through the File source's readers: one chunk of the body
//! is held at a time, so memory stays bounded by the batch plus one record, whatever the
//! object's size. Objects are immutable, so an object is read whole in one pass unless a
//! batch ends in it; a last JSON line without its `\n` is read as it is (never held back as
//! "still being written", as the File source does for files). Parquet objects are read by
//! ranged GETs (the footer, then the column chunks), never downloaded whole.
//!
//! Every GET after the first one of an object carries `If-Match` with the ETag that was read,
//! so versions are never mixed. A batch that ends with an object's last record still closes
//! the object (batches read one record ahead), so the watermark does not wait for a pass.
//!
//! Batches are as for the File source: `batch_rows` records and deadletters, or `batch_bytes`
//! of input (object bytes as stored: compressed bytes for gzip, estimated for Parquet).
//!
//! # Checkpoint and listing
//!
//! [`Source::checkpoint`] returns an [`S3Checkpoint`] as JSON: per object, its key, ETag,
//! size, format, the decompressed byte offset (rows for Parquet) and records consumed just
//! after the last record returned, and whether it is closed (`done`: read to its end, skipped,
//! or reported as changed); plus a **listing watermark** (`after`).
//!
//! The watermark is the newest key such that every object listed at or below it is closed.
//! Objects at or below it leave the checkpoint, and the next pass lists with
//! `StartAfter = watermark`: a pass costs one `ListObjectsV2` request per 1,000 objects *above*
//! the watermark (so a pass with nothing new costs one LIST), and the checkpoint holds only the
//! objects above it. An object left open (a batch ended in it, or reading it failed) holds the
//! watermark below it until it is closed, and objects after it that were read stay in the
//! checkpoint as closed until then.
//!
//! This fits keys that grow over time (timestamps, dates, zero-padded sequence numbers:
//! `events/2026/12/01/10-00.jsonl.gz`). **An object added later with a key at or below the
//! watermark is never read** (it is never listed). For other key patterns (random names,
//! keys that are not zero-padded) set `s3_listing: full`: every pass lists everything under
//! the prefix (one LIST per 1,000 objects in all), the watermark never moves, and the
//! checkpoint keeps an entry per object read that is still there. Switching an existing
//! pipeline from the watermark to `full` keeps the old watermark as a floor: objects at or
//! below it count as read.
//!
//! # Resuming, and objects that changed
//!
//! [`S3Source::open_at`] reads only what comes after such a checkpoint:
//!
//! - an object not in the checkpoint (above the watermark) is read from the start;
//! - a closed object with the same ETag is skipped, with no request;
//! - an open object with the same ETag is read on: a plain text object by a ranged GET from
//!   the byte before its offset, a gzipped one decompressed from the start with the first
//!   `offset` bytes dropped, a Parquet object with its first `records` rows skipped; a CSV
//!   object's header is read again from its start;
//! - an object whose ETag differs from the checkpoint's was rewritten after (part of) it was
//!   read. It is **reported**: the batch reading stops at returns
//!   [`SourceError::ObjectChanged`] naming the bucket, key and both ETags (a pass counts it as
//!   a file that could not be read, logs it, and goes on with the other objects). Its new
//!   content is not read: records from the old version may already be delivered, and reading
//!   the new one would repeat or mix them. The checkpoint then closes it under its new ETag, so
//!   it is reported once (again in the next pass only if no batch was committed after it).
//!   Write new data under a new key. An object that changes *while* being read fails its
//!   `If-Match` GET the same way and is tried again (and reported) next pass;
//! - an object in the checkpoint that is no longer listed (deleted) is dropped from it.
//!
//! A rewritten object at or below the watermark is not seen at all (it is not listed).
//!
//! # Errors
//!
//! A failed request (after the SDK's retries: see [`crate::aws`]) is [`SourceError::S3`]
//! with the bucket, the key (the prefix for a listing) and whether a later try may succeed.
//! A listing failure fails opening the source; a failed GET fails that object only: it stays
//! open at its last record returned and the next pass tries it again. An object deleted
//! between listing and reading has [`SourceError::Vanished`].
//!
//! [`Source::checkpoint`]: crate::sources::Source::checkpoint

mod checkpoint;
mod object;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::Path;

pub use self::checkpoint::{ObjectProgress, S3_CHECKPOINT_VERSION, S3Checkpoint};
use self::object::{ObjectAt, Ranges};
use super::error::S3Operation;
use super::file::{
    Batcher, Compression, FileContext, FileFormat, FileSourceOptions, InputStream, Inputs,
    RecordReader, Resume, TextReaderSetup, text_reader,
};
use super::{Progress, Source, SourceBatch, SourceError};
use crate::aws::{Aws, SdkFailure};

/// What the S3 source reads and how.
#[derive(Debug, Clone)]
pub struct S3SourceOptions {
    /// The AWS handle requests go through (region, credentials, request counter).
    pub aws: Aws,
    /// The connector's endpoint override (an S3-compatible service), else the environment's.
    pub endpoint: Option<String>,
    /// The bucket.
    pub bucket: String,
    /// The key prefix; empty for the whole bucket.
    pub prefix: String,
    /// The format of every object; `None` detects it per object.
    pub format: Option<FileFormat>,
    /// List every object under the prefix each pass instead of only those after the
    /// watermark (see [Checkpoint and listing](self#checkpoint-and-listing)).
    pub full_listing: bool,
    /// `s3_prefix_ordered_depth`: list this many levels of sub-prefixes below the prefix with
    /// [`Self::delimiter`] first, then every sub-prefix at that depth, up to
    /// [`Self::LISTING_CONCURRENCY`] at a time (0: one flat listing). The keys and their order
    /// are those of a flat listing; a sub-prefix wholly at or below the watermark is skipped
    /// without a request.
    pub ordered_depth: u32,
    /// `s3_delimiter`: what separates the levels of [`Self::ordered_depth`] (default `/`).
    pub delimiter: String,
    /// A batch closes at this many records and deadletters (at least 1).
    pub batch_rows: usize,
    /// ... or once this many input bytes were consumed, whichever comes first.
    pub batch_bytes: u64,
    /// ... or once the batch has been filling this long (`None`: no time limit).
    pub batch_time: Option<std::time::Duration>,
    /// A longer record becomes a `too_large` deadletter.
    pub max_record_bytes: usize,
    /// A JSON record that would take more memory parsed becomes a `too_large` deadletter
    /// (see [`FileSourceOptions::max_record_memory`]).
    pub max_record_memory: u64,
    /// Hand JSON-lines records out unparsed (see
    /// [`FileSourceOptions::unparsed_json_lines`]).
    pub unparsed_json_lines: bool,
    /// The lenient JSON readings (see [`FileSourceOptions::leniency`]).
    pub leniency: super::file::Leniency,
}

impl S3SourceOptions {
    /// Options reading `bucket` under `prefix` with the File source's defaults.
    pub fn new(aws: Aws, bucket: &str, prefix: &str) -> S3SourceOptions {
        S3SourceOptions {
            aws,
            endpoint: None,
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            format: None,
            full_listing: false,
            ordered_depth: 0,
            delimiter: "/".to_owned(),
            batch_rows: FileSourceOptions::DEFAULT_BATCH_ROWS,
            batch_bytes: FileSourceOptions::DEFAULT_BATCH_BYTES,
            batch_time: None,
            max_record_bytes: FileSourceOptions::DEFAULT_MAX_RECORD_BYTES,
            max_record_memory: FileSourceOptions::DEFAULT_MAX_RECORD_MEMORY,
            unparsed_json_lines: false,
            leniency: super::file::Leniency::default(),
        }
    }

    /// Sub-prefixes listed at the same time when `ordered_depth` is set.
    pub const LISTING_CONCURRENCY: usize = 8;

    /// `s3://bucket/prefix`, for messages.
    fn uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

/// One object as listed.
#[derive(Debug, Clone)]
struct Listed {
    key: String,
    etag: String,
    size: u64,
}

/// An object to read this pass.
#[derive(Debug, Clone)]
struct ToRead {
    key: String,
    /// The ETag listed; for a new object, the ETag of what its first GET returned.
    etag: String,
    size: u64,
    /// Where reading starts.
    start: Resume,
    /// Format and compression, once known (from the checkpoint, or told at opening).
    known: Option<(FileFormat, Compression)>,
    /// The checkpoint's ETag when the object changed since.
    changed_from: Option<String>,
}

/// The objects an [`S3Source`] reads, and what it has read of them.
struct Objects {
    options: S3SourceOptions,
    client: aws_sdk_s3::Client,
    objects: Vec<ToRead>,
    /// Every key listed this pass (above the watermark), in order.
    listed: Vec<String>,
    /// How many of `listed` the watermark has passed.
    passed: usize,
    checkpoint: S3Checkpoint,
}

/// Reads records from the objects under an S3 prefix; see the [module documentation](self).
pub struct S3Source {
    inputs: Objects,
    batcher: Batcher,
}

impl std::fmt::Debug for S3Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Source")
            .field("uri", &self.inputs.options.uri())
            .field("objects", &self.inputs.objects.len())
            .field("progress", &self.progress())
            .finish_non_exhaustive()
    }
}

impl S3Source {
    /// List the objects to read; nothing is read yet. The same as [`S3Source::open_at`]
    /// with no checkpoint.
    pub fn open(options: S3SourceOptions) -> Result<S3Source, SourceError> {
        Self::open_at(options, None)
    }

    /// Like [`S3Source::open`], reading only what comes after `checkpoint` (bytes from
    /// [`Source::checkpoint`]): see [Resuming](self#resuming-and-objects-that-changed). A
    /// checkpoint that cannot be read is [`SourceError::BadCheckpoint`].
    pub fn open_at(
        options: S3SourceOptions,
        checkpoint: Option<&[u8]>,
    ) -> Result<S3Source, SourceError> {
        let client = options.aws.s3(options.endpoint.as_deref());
        let mut old = match checkpoint {
            Some(bytes) => S3Checkpoint::from_bytes(bytes, &options.uri())?,
            None => S3Checkpoint::new(&options.bucket, &options.prefix),
        };
        if old.bucket != options.bucket || old.prefix != options.prefix {
            let was = format!("s3://{}/{}", old.bucket, old.prefix);
            let now = options.uri();
            tracing::warn!(
                was = %was,
                now = %now,
                "the S3 source now reads `{now}` instead of `{was}`: reading it from the start"
            );
            old = S3Checkpoint::new(&options.bucket, &options.prefix);
        }
        // In full listing, an old watermark stays a floor: what is at or below it was read.
        let floor = old.after.clone();
        let start_after = if options.full_listing {
            None
        } else {
            old.after.as_deref()
        };
        let listing = list(&options, &client, start_after)?;
        let mut objects = Vec::new();
        let mut listed = Vec::with_capacity(listing.len());
        let mut kept = BTreeMap::new();
        for object in listing {
            if floor.as_ref().is_some_and(|floor| object.key <= *floor) {
                continue;
            }
            listed.push(object.key.clone());
            let to_read = |start: Resume, progress: Option<&ObjectProgress>| ToRead {
                key: object.key.clone(),
                etag: object.etag.clone(),
                size: object.size,
                start,
                known: progress.and_then(|p| p.format.map(|format| (format, p.compression))),
                changed_from: None,
            };
            match old.objects.remove(&object.key) {
                None => objects.push(to_read(Resume::default(), None)),
                Some(progress) if progress.etag != object.etag => {
                    objects.push(ToRead {
                        changed_from: Some(progress.etag.clone()),
                        ..to_read(Resume::default(), None)
                    });
                    kept.insert(object.key.clone(), progress);
                }
                Some(progress) if progress.done => {
                    kept.insert(object.key.clone(), progress);
                }
                Some(progress) => {
                    let start = Resume {
                        offset: progress.offset,
                        records: progress.records,
                    };
                    objects.push(to_read(start, Some(&progress)));
                    kept.insert(object.key.clone(), progress);
                }
            }
        }
        for gone in old.objects.keys() {
            tracing::debug!(
                key = gone.as_str(),
                "an object in the checkpoint is no longer listed; dropped from the checkpoint"
            );
        }
        let mut inputs = Objects {
            client,
            objects,
            listed,
            passed: 0,
            checkpoint: S3Checkpoint {
                objects: kept,
                ..old
            },
            options,
        };
        inputs.advance();
        let batcher = Batcher::new(
            &inputs,
            inputs.options.batch_rows,
            inputs.options.batch_bytes,
        )
        .with_batch_time(inputs.options.batch_time);
        Ok(S3Source { inputs, batcher })
    }

    /// The keys to read this pass, in reading order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.inputs.objects.iter().map(|o| o.key.as_str())
    }
}

/// Every object under the prefix after `start_after`, in key order: one `ListObjectsV2`
/// request per page of up to 1,000 keys, or, with an ordered depth, the levels above that
/// depth with the delimiter first and then each sub-prefix at that depth (the same keys in
/// the same order).
fn list(
    options: &S3SourceOptions,
    client: &aws_sdk_s3::Client,
    start_after: Option<&str>,
) -> Result<Vec<Listed>, SourceError> {
    options.aws.block_on(async {
        if options.ordered_depth == 0 || options.delimiter.is_empty() {
            return list_page_by_page(options, client, &options.prefix, None, start_after)
                .await
                .map(|level| level.objects);
        }
        list_ordered(options, client, start_after).await
    })
}

/// One level (or, without a delimiter, everything) under `prefix`: its objects and, with a
/// delimiter, its sub-prefixes, each in key order.
#[derive(Default)]
struct Level {
    objects: Vec<Listed>,
    prefixes: Vec<String>,
}

async fn list_page_by_page(
    options: &S3SourceOptions,
    client: &aws_sdk_s3::Client,
    prefix: &str,
    delimiter: Option<&str>,
    start_after: Option<&str>,
) -> Result<Level, SourceError> {
    let mut level = Level::default();
    let mut token: Option<String> = None;
    // `StartAfter` only narrows a listing when it sorts after the prefix itself.
    let start_after = start_after.filter(|s| *s >= prefix).map(str::to_owned);
    loop {
        let request = client
            .list_objects_v2()
            .bucket(&options.bucket)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_owned))
            .set_start_after(start_after.clone())
            .set_continuation_token(token.take());
        let page = request.send().await.map_err(|error| SourceError::S3 {
            bucket: options.bucket.clone(),
            key: prefix.to_owned(),
            operation: S3Operation::List,
            failure: Box::new(SdkFailure::from_sdk(&error)),
        })?;
        for object in page.contents() {
            let Some(key) = object.key() else { continue };
            if key.ends_with('/') {
                continue;
            }
            level.objects.push(Listed {
                key: key.to_owned(),
                etag: object.e_tag().unwrap_or_default().to_owned(),
                size: object
                    .size()
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            });
        }
        level.prefixes.extend(
            page.common_prefixes()
                .iter()
                .filter_map(|p| p.prefix())
                .map(str::to_owned),
        );
        match page.next_continuation_token() {
            Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
            _ => break,
        }
    }
    Ok(level)
}

/// Whether every key under `prefix` sorts at or below `start_after` (so the prefix needs no
/// request): `start_after` is past `prefix` and does not itself start with it.
fn wholly_read(prefix: &str, start_after: Option<&str>) -> bool {
    start_after.is_some_and(|after| after > prefix && !after.starts_with(prefix))
}

/// The ordered-depth walk: `ordered_depth` levels with the delimiter, then each sub-prefix at
/// that depth flat, [`S3SourceOptions::LISTING_CONCURRENCY`] at a time, merged back in key
/// order (a key directly at a level sorts among the sub-prefixes beside it).
async fn list_ordered(
    options: &S3SourceOptions,
    client: &aws_sdk_s3::Client,
    start_after: Option<&str>,
) -> Result<Vec<Listed>, SourceError> {
    use futures::StreamExt as _;

    /// An entry of a level in key order: an object, or a sub-prefix still to expand.
    enum Entry {
        Object(Listed),
        Prefix(String),
    }
    fn key(entry: &Entry) -> &str {
        match entry {
            Entry::Object(o) => &o.key,
            Entry::Prefix(p) => p,
        }
    }
    let delimiter = options.delimiter.as_str();
    let mut entries = vec![Entry::Prefix(options.prefix.clone())];
    for _ in 0..options.ordered_depth {
        let mut next = Vec::with_capacity(entries.len());
        for entry in entries {
            match entry {
                Entry::Object(o) => next.push(Entry::Object(o)),
                Entry::Prefix(p) if wholly_read(&p, start_after) => {}
                Entry::Prefix(p) => {
                    // Without `StartAfter`: servers differ on whether a sub-prefix that sorts
                    // before it (but holds later keys) is listed. Levels are small; what is
                    // wholly read is skipped here.
                    let level =
                        list_page_by_page(options, client, &p, Some(delimiter), None).await?;
                    let mut here: Vec<Entry> = level
                        .objects
                        .into_iter()
                        .filter(|o| start_after.is_none_or(|after| o.key.as_str() > after))
                        .map(Entry::Object)
                        .chain(level.prefixes.into_iter().map(Entry::Prefix))
                        .collect();
                    here.sort_by(|a, b| key(a).cmp(key(b)));
                    next.extend(here);
                }
            }
        }
        entries = next;
    }
    let listings = futures::stream::iter(entries.into_iter().map(|entry| async move {
        match entry {
            Entry::Object(o) => Ok(vec![o]),
            Entry::Prefix(p) if wholly_read(&p, start_after) => Ok(Vec::new()),
            Entry::Prefix(p) => list_page_by_page(options, client, &p, None, start_after)
                .await
                .map(|level| level.objects),
        }
    }))
    .buffered(S3SourceOptions::LISTING_CONCURRENCY)
    .collect::<Vec<_>>()
    .await;
    let mut found = Vec::new();
    for listing in listings {
        found.extend(listing?);
    }
    Ok(found)
}

impl Objects {
    /// Where object `index` lives; `etag` is the version every GET must find.
    fn object(&self, index: usize, etag: Option<String>) -> ObjectAt {
        ObjectAt {
            aws: self.options.aws.clone(),
            client: self.client.clone(),
            bucket: self.options.bucket.clone(),
            key: self.objects[index].key.clone(),
            etag,
        }
    }

    /// Move the watermark past the closed objects at the start of the listing (not in full
    /// listing), dropping them from the checkpoint.
    fn advance(&mut self) {
        if self.options.full_listing {
            return;
        }
        while let Some(key) = self.listed.get(self.passed) {
            if !self.checkpoint.objects.get(key).is_some_and(|p| p.done) {
                break;
            }
            self.checkpoint.objects.remove(key);
            self.checkpoint.after = Some(key.clone());
            self.passed += 1;
        }
    }

    /// Close object `index` without reading it (its format cannot be read): a warning.
    fn skip(&mut self, index: usize, why: &str) -> Box<dyn RecordReader> {
        let object = &self.objects[index];
        let uri = format!("s3://{}/{}", self.options.bucket, object.key);
        tracing::warn!(object = %uri, "skipping `{uri}`: {why}");
        Box::new(Nothing)
    }

    /// Open a new object: GET it whole, tell its format from its first bytes and the key,
    /// and hand back its stream (those first bytes put back in front).
    fn open_new(&mut self, index: usize) -> Result<Option<Sniffed>, SourceError> {
        let body = self.object(index, None).get(0, None)?;
        let object = &mut self.objects[index];
        if let Some(etag) = body.etag {
            object.etag = etag;
        }
        let mut reader = body.reader;
        let mut head = Vec::with_capacity(super::file::HEAD_BYTES);
        (&mut reader)
            .take(super::file::HEAD_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(|source| SourceError::Io {
                path: format!("s3://{}/{}", self.options.bucket, object.key),
                source,
            })?;
        let detected =
            super::file::detect_in_head(Path::new(&object.key), &head, self.options.format);
        Ok(detected.map(|(format, compression)| {
            let stream: Box<dyn Read + Send> = Box::new(Cursor::new(head).chain(reader));
            (format, compression, stream)
        }))
    }
}

/// A new object's format and compression, and its whole stream from its first byte.
type Sniffed = (FileFormat, Compression, Box<dyn Read + Send>);

/// The reader of an object skipped: nothing to read.
struct Nothing;

impl RecordReader for Nothing {
    fn next_item(&mut self) -> Result<Option<super::file::Item>, SourceError> {
        Ok(None)
    }

    fn consumed(&self) -> u64 {
        0
    }

    fn resume_point(&self) -> Resume {
        Resume::default()
    }
}

impl Inputs for Objects {
    fn count(&self) -> usize {
        self.objects.len()
    }

    fn size(&self, index: usize) -> u64 {
        self.objects[index].size
    }

    fn resumed(&self, index: usize) -> bool {
        self.objects[index].start != Resume::default()
    }

    fn skipped(&self, index: usize) -> u64 {
        let object = &self.objects[index];
        match object.known {
            Some((format, Compression::None)) if format != FileFormat::Parquet => {
                object.start.offset.min(object.size)
            }
            _ => 0,
        }
    }

    fn open(&mut self, index: usize) -> Result<Box<dyn RecordReader>, SourceError> {
        if let Some(was) = &self.objects[index].changed_from {
            let object = &self.objects[index];
            return Err(SourceError::ObjectChanged {
                bucket: self.options.bucket.clone(),
                key: object.key.clone(),
                etags: Box::new(super::EtagChange {
                    was: was.clone(),
                    now: object.etag.clone(),
                }),
            });
        }
        let mut start = self.objects[index].start;
        let (format, compression, mut fresh) = match self.objects[index].known {
            Some((format, compression)) => (format, compression, None),
            None => match self.open_new(index)? {
                Some((format, compression, stream)) => (format, compression, Some(stream)),
                None => return Ok(self.skip(index, "its format cannot be told")),
            },
        };
        if format == FileFormat::Parquet && compression == Compression::Gzip {
            return Ok(self.skip(index, "Parquet objects cannot be gzip-compressed"));
        }
        self.objects[index].known = Some((format, compression));
        let object = &self.objects[index];
        let at = self.object(index, Some(object.etag.clone()));
        let uri = at.uri();
        let ctx = FileContext {
            uri: uri.as_str().into(),
            max_record_bytes: self.options.max_record_bytes.max(1),
            max_record_memory: self.options.max_record_memory,
            leniency: self.options.leniency,
        };
        if format == FileFormat::Parquet {
            // Ranged reads from here: the first bytes were only for telling the format.
            drop(fresh);
            let ranges = Ranges {
                object: at,
                size: object.size,
            };
            return Ok(Box::new(super::file::ParquetReader::from_input(
                ctx,
                ranges,
                object.size,
                self.options.batch_rows,
                start.records,
            )?));
        }
        let whole = |at: &ObjectAt| -> Result<InputStream, SourceError> {
            Ok(InputStream::new(
                Box::new(at.get(0, None)?.reader),
                compression,
            ))
        };
        let (stream, last) = match (fresh.take(), start.offset.checked_sub(1)) {
            (Some(stream), _) => (InputStream::new(stream, compression), None),
            (None, None) => (whole(&at)?, None),
            (None, Some(before)) => {
                let resumed = match compression {
                    Compression::None if before < object.size => {
                        InputStream::new(Box::new(at.get(before, None)?.reader), compression)
                            .skip_to(0, &uri)?
                    }
                    Compression::None => None,
                    Compression::Gzip => whole(&at)?.skip_to(before, &uri)?,
                };
                match resumed {
                    Some((stream, last)) => (stream, Some(last)),
                    None => {
                        tracing::warn!(
                            object = %uri,
                            "`{uri}` is shorter than where it was read to, under the same ETag; reading it from the start"
                        );
                        start = Resume::default();
                        (whole(&at)?, None)
                    }
                }
            }
        };
        let setup = TextReaderSetup {
            ctx,
            format,
            start,
            last,
            unparsed_json_lines: self.options.unparsed_json_lines,
            complete: true,
        };
        let from_start = at.clone();
        text_reader(
            setup,
            stream,
            Box::new(move || {
                Ok(InputStream::new(
                    Box::new(from_start.get(0, None)?.reader),
                    compression,
                ))
            }),
        )
    }

    fn note(&mut self, index: usize, at: Resume, done: bool) {
        let object = &self.objects[index];
        let (format, compression) = match object.known {
            Some((format, compression)) => (Some(format), compression),
            None => (None, Compression::None),
        };
        self.checkpoint.objects.insert(
            object.key.clone(),
            ObjectProgress {
                etag: object.etag.clone(),
                size: object.size,
                format,
                compression,
                offset: at.offset,
                records: at.records,
                done,
            },
        );
        if done {
            self.advance();
        }
    }

    fn open_failed(&mut self, index: usize, error: &SourceError) {
        let object = &self.objects[index];
        match error {
            SourceError::Vanished { .. } => {
                self.checkpoint.objects.remove(&object.key);
            }
            // Reported once: closed under its new ETag (see the module docs). An object that
            // changed while being read has no new ETag yet: the next listing finds it.
            SourceError::ObjectChanged { .. } if object.changed_from.is_some() => {
                if let Some(progress) = self.checkpoint.objects.get_mut(&object.key) {
                    progress.etag = object.etag.clone();
                    progress.done = true;
                }
                self.advance();
            }
            _ => {}
        }
    }
}

impl Source for S3Source {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        self.batcher.next_batch(&mut self.inputs)
    }

    fn progress(&self) -> Progress {
        self.batcher.progress()
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        serde_json::to_vec(&self.inputs.checkpoint).map_err(|error| SourceError::BadCheckpoint {
            path: self.inputs.options.uri(),
            message: error.to_string(),
        })
    }
}
