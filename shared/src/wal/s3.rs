//! The WAL on S3 (`WAL_STORAGE=s3`): the same batches and guarantees as [`super::DiskWal`],
//! with nothing on local disk. The full specification is the "S3 WAL" section of
//! `docs/wal.md`; in short:
//!
//! - Each batch is two objects under the pipeline's prefix
//!   (`s3://{bucket}/wal/{tenant}/{workspace}/{pipeline}/`):
//!   - the **body** `b{id:020}.batch`: exactly the disk format's data record (24-byte record
//!     header with its CRC32C, then the data payload: position, parts as Arrow IPC);
//!   - the **commit marker** `b{id:020}.commit`: a small JSON document with the body's length
//!     and CRC32C and the batch's parts (namespace, schema version, rows).
//!
//!   Both are written with `If-None-Match: *`, body first: a batch id can be written once, and
//!   a batch is committed when its marker exists and matches its body. Each put carries a
//!   fresh writer token ([`WRITER_METADATA`]): a `412` (or a failure) after which the object
//!   has this put's token and length is this put's own first attempt, applied before the
//!   SDK retried it, and so a success.
//! - The **watermark**, the id reclaimed through (with the newest position), is the state
//!   store item `wal#reclaimed`, written fenced by the writer's lease before anything is
//!   deleted; it keeps ids from being reused once every object is gone.
//! - **Recovery** lists the prefix. A batch at or below the watermark is a leftover of an
//!   interrupted reclaim and is deleted. Above it, a complete pair whose marker matches its
//!   body is committed. A defective batch (a body without marker, a marker without body, a
//!   marker that does not match its body) is a torn append (a crash, or a writer that lost
//!   its lease racing the new holder): when it lies above the newest batch whose position the
//!   state store recorded, the source never moved past it, so it is discarded (marker, then
//!   body) and its id is used again; at or below that batch it is [`WalError::Corrupt`].
//!   Recovery deletes nothing before a fenced write proves the writer still holds the lease
//!   (`wal#claim`); an orphaned body an append replaces is deleted `If-Match` the ETag it
//!   examined, after the same proof.
//! - **Reclaim** writes the watermark, then deletes the markers, then the bodies.
//!
//! Requests: an append is 2 PUTs; a reclaim is 1 state write and 2 `DeleteObjects` per 1000
//! batches; opening is 1 LIST per 1000 objects, 1 GET per unreclaimed marker and 1 GET of the
//! newest body.

use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::format::{self, RECORD_HEADER_LEN, RecordHeader, RecordKind};
use super::{BatchId, BatchMeta, BatchPart, PartMeta, Recovery, WalError, WalReader};
use crate::aws::{Aws, SdkFailure};
use crate::state::{Condition, Fence, StateKey, StateStore};

mod view;
pub use view::{S3WalView, WatermarkSource};

/// The state store sort key of the watermark: 8 bytes (the id reclaimed through, little-endian),
/// then the newest committed position.
pub const WATERMARK_SORT_KEY: &str = crate::state::keys::WAL_WATERMARK;

/// The state store sort key written (fenced) before an orphaned body is replaced: proves the
/// writer still holds the lease.
const CLAIM_SORT_KEY: &str = crate::state::keys::WAL_CLAIM;

/// The user metadata key (`x-amz-meta-skippr-writer`) of the writer token a WAL object is
/// created with: a fresh random value per create, so a retried create can recognise its own
/// object.
pub const WRITER_METADATA: &str = "skippr-writer";

/// How many times an append replaces an orphaned body before giving up.
const MAX_ORPHAN_RETRIES: usize = 3;

/// Concurrent GETs while opening.
const OPEN_CONCURRENCY: usize = 16;

/// What `HEAD` says about a WAL object.
#[derive(Debug)]
struct Head {
    /// The writer token ([`WRITER_METADATA`]; empty when absent).
    token: String,
    /// The length in bytes.
    size: u64,
    /// The ETag.
    etag: Option<String>,
}

/// The commit marker's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Marker {
    /// Marker format version: 1.
    format: u32,
    /// The batch id.
    batch: u64,
    /// The body's length in bytes.
    bytes: u64,
    /// CRC32C of the whole body.
    crc32c: u32,
    /// The parts: namespace, schema version, rows.
    parts: Vec<(String, u32, u64)>,
}

/// Where an S3 WAL lives and who writes it.
#[derive(Clone)]
pub struct S3WalConfig<'a> {
    /// The AWS handle (runtime, configuration).
    pub aws: Aws,
    /// The WAL bucket.
    pub bucket: String,
    /// The pipeline's prefix, ending in `/`.
    pub prefix: String,
    /// The state store holding the watermark.
    pub store: &'a dyn StateStore,
    /// The pipeline's state partition.
    pub partition: String,
    /// The writer's fencing token.
    pub fence: Option<Fence>,
    /// The newest batch id whose source position the state store recorded (0 if none):
    /// batches at or below it were certainly committed.
    pub recorded_through: u64,
    /// The state store's id floor (`wal#floor`, written by `skipprd reset`; 0 if none): ids at
    /// or below it belong to an earlier life of the pipeline, so numbering goes on above it.
    pub floor: u64,
}

/// The WAL on S3 (see the module docs).
pub struct S3Wal<'a> {
    config: S3WalConfig<'a>,
    client: aws_sdk_s3::Client,
    batches: Vec<BatchMeta>,
    last_position: Option<Vec<u8>>,
    next: u64,
    reclaimed: u64,
}

impl std::fmt::Debug for S3Wal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Wal")
            .field("bucket", &self.config.bucket)
            .field("prefix", &self.config.prefix)
            .field("next", &self.next)
            .field("reclaimed", &self.reclaimed)
            .finish_non_exhaustive()
    }
}

fn body_name(id: u64) -> String {
    format!("b{id:020}.batch")
}

fn marker_name(id: u64) -> String {
    format!("b{id:020}.commit")
}

/// The batch id and kind of an object name under the prefix.
fn parse_name(name: &str) -> Option<(u64, bool)> {
    let rest = name.strip_prefix('b')?;
    let (digits, is_marker) = if let Some(d) = rest.strip_suffix(".commit") {
        (d, true)
    } else {
        (rest.strip_suffix(".batch")?, false)
    };
    if digits.len() != 20 {
        return None;
    }
    Some((digits.parse().ok()?, is_marker))
}

/// Whether an S3 failure is a failed `If-None-Match` / `If-Match` precondition.
fn precondition_failed(failure: &SdkFailure) -> bool {
    failure.status == Some(412) || failure.code == "PreconditionFailed"
}

/// Whether an S3 failure is `409 ConditionalRequestConflict`: a conditional write raced
/// another operation on the key and was not applied. S3's documentation says to retry the
/// request; it says nothing about whether the object exists.
fn conditional_conflict(failure: &SdkFailure) -> bool {
    failure.status == Some(409) || failure.code == "ConditionalRequestConflict"
}

/// How many times a conditional PUT answered `409` is sent again, and the first pause (it
/// doubles each time: 50, 100, 200, 400, 800 ms).
const CONFLICT_RETRIES: u32 = 5;
const CONFLICT_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The S3 operations of the WAL, shared by the writer and its readers.
#[derive(Clone)]
struct Objects {
    aws: Aws,
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    /// Whole-object reads and listings (shared with the schema store and deadletter sink).
    io: crate::aws::Bucket,
}

impl Objects {
    fn uri(&self, name: &str) -> String {
        format!("s3://{}/{}{}", self.bucket, self.prefix, name)
    }

    fn err(&self, op: &'static str, name: &str, failure: SdkFailure) -> WalError {
        WalError::ObjectStore {
            op,
            uri: self.uri(name),
            failure: Box::new(failure),
        }
    }

    /// The object's bytes, or `None` when it does not exist.
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, WalError> {
        self.aws.block_on(self.get_async(name))
    }

    /// Create the object; `Ok(false)` when it already exists and is not this call's.
    ///
    /// The PUT carries `If-None-Match: *` and a fresh writer token in its metadata
    /// ([`WRITER_METADATA`]). A request whose first attempt applied and then failed (a timeout,
    /// a 5xx, a dropped connection) is retried by the SDK, and the retry is refused with `412`;
    /// or the failure reaches us. Either way the object is examined (`HEAD`): the same token
    /// and length means this call created it, which is success, not a conflict.
    ///
    /// A `409 ConditionalRequestConflict` (the PUT raced another operation on the key and was
    /// not applied) is neither: the same PUT is sent again, up to [`CONFLICT_RETRIES`] times
    /// with a growing pause, then the failure is returned as retryable.
    fn put_new(&self, name: &str, bytes: Vec<u8>) -> Result<bool, WalError> {
        let key = format!("{}{}", self.prefix, name);
        let token = uuid::Uuid::new_v4().simple().to_string();
        let length = bytes.len() as u64;
        let bytes = bytes::Bytes::from(bytes);
        let mut conflicts = 0;
        let failure = loop {
            let body = ByteStream::from(bytes.clone());
            let result = self.aws.block_on(async {
                self.client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(&key)
                    .if_none_match("*")
                    .metadata(WRITER_METADATA, &token)
                    .body(body)
                    .send()
                    .await
            });
            let failure = match result {
                Ok(_) => return Ok(true),
                Err(e) => SdkFailure::from_sdk(&e),
            };
            if !conditional_conflict(&failure) {
                break failure;
            }
            if conflicts == CONFLICT_RETRIES {
                return Err(self.err(
                    "write",
                    name,
                    SdkFailure {
                        retryable: true,
                        ..failure
                    },
                ));
            }
            tracing::debug!(uri = %self.uri(name), attempt = conflicts + 1, "A conditional PUT met a conflicting operation (409); sending it again.");
            std::thread::sleep(CONFLICT_PAUSE * 2u32.pow(conflicts));
            conflicts += 1;
        };
        let refused = precondition_failed(&failure);
        if !refused && !failure.retryable {
            return Err(self.err("write", name, failure));
        }
        match self.head(name) {
            Ok(Some(head)) if head.token == token && head.size == length => {
                tracing::debug!(uri = %self.uri(name), "A conditional PUT whose outcome was unknown had applied.");
                Ok(true)
            }
            _ if refused => Ok(false),
            _ => Err(self.err("write", name, failure)),
        }
    }

    /// An object's writer token, length and ETag (`None` when it does not exist).
    fn head(&self, name: &str) -> Result<Option<Head>, WalError> {
        let key = format!("{}{}", self.prefix, name);
        let result = self.aws.block_on(async {
            self.client
                .head_object()
                .bucket(&self.bucket)
                .key(&key)
                .send()
                .await
        });
        match result {
            Ok(out) => Ok(Some(Head {
                token: out
                    .metadata()
                    .and_then(|m| m.get(WRITER_METADATA))
                    .cloned()
                    .unwrap_or_default(),
                size: out
                    .content_length()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
                etag: out.e_tag().map(str::to_owned),
            })),
            Err(e) => {
                let failure = SdkFailure::from_sdk(&e);
                if failure.status == Some(404) {
                    Ok(None)
                } else {
                    Err(self.err("read", name, failure))
                }
            }
        }
    }

    /// Delete the object if it is still the one whose ETag is `etag` (`If-Match`), so that a
    /// writer deletes only what it examined, never an object another writer put since.
    /// `Ok(false)` when the object changed; a missing object is deleted already. An endpoint
    /// that does not implement conditional deletes (`501`) gets a plain delete.
    fn delete_if_match(&self, name: &str, etag: &str) -> Result<bool, WalError> {
        let key = format!("{}{}", self.prefix, name);
        let result = self.aws.block_on(async {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(&key)
                .if_match(etag)
                .send()
                .await
        });
        let failure = match result {
            Ok(_) => return Ok(true),
            Err(e) => SdkFailure::from_sdk(&e),
        };
        match failure.status {
            Some(404) => Ok(true),
            Some(412) => Ok(false),
            Some(501) => {
                self.delete(&[name.to_owned()])?;
                Ok(true)
            }
            _ => Err(self.err("delete", name, failure)),
        }
    }

    /// Delete objects (at most 1000 per request; a missing object is not an error).
    fn delete(&self, names: &[String]) -> Result<(), WalError> {
        for chunk in names.chunks(1000) {
            let mut objects = Vec::with_capacity(chunk.len());
            for name in chunk {
                let id = ObjectIdentifier::builder()
                    .key(format!("{}{}", self.prefix, name))
                    .build()
                    .map_err(|e| {
                        self.err(
                            "delete",
                            name,
                            SdkFailure {
                                code: "construction".into(),
                                status: None,
                                message: e.to_string(),
                                retryable: false,
                            },
                        )
                    })?;
                objects.push(id);
            }
            let first = chunk.first().cloned().unwrap_or_default();
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| {
                    self.err(
                        "delete",
                        &first,
                        SdkFailure {
                            code: "construction".into(),
                            status: None,
                            message: e.to_string(),
                            retryable: false,
                        },
                    )
                })?;
            let out = self
                .aws
                .block_on(async {
                    self.client
                        .delete_objects()
                        .bucket(&self.bucket)
                        .delete(delete)
                        .send()
                        .await
                })
                .map_err(|e| self.err("delete", &first, SdkFailure::from_sdk(&e)))?;
            if let Some(error) = out.errors().first() {
                let name = error
                    .key()
                    .and_then(|k| k.strip_prefix(self.prefix.as_str()))
                    .unwrap_or(&first)
                    .to_owned();
                return Err(self.err(
                    "delete",
                    &name,
                    SdkFailure {
                        code: error.code().unwrap_or("unknown").to_owned(),
                        status: None,
                        message: error.message().unwrap_or_default().to_owned(),
                        retryable: true,
                    },
                ));
            }
        }
        Ok(())
    }

    /// Every object name under the prefix with its size.
    fn list(&self) -> Result<Vec<(String, u64)>, WalError> {
        let listed = self
            .io
            .list_sized(&self.prefix)
            .map_err(|f| self.err("list", "", f))?;
        Ok(listed
            .into_iter()
            .filter_map(|(key, size)| {
                key.strip_prefix(self.prefix.as_str())
                    .map(|name| (name.to_owned(), size))
            })
            .collect())
    }

    /// Read and verify a committed batch's body.
    fn read_body(&self, meta: &BatchMeta) -> Result<Vec<u8>, WalError> {
        let name = body_name(meta.id.0);
        let body = self.get(&name)?.ok_or_else(|| {
            WalError::corrupt(
                self.uri(&name),
                0,
                format!("the body of committed batch {} is missing", meta.id),
            )
        })?;
        if body.len() as u64 != meta.bytes {
            return Err(WalError::corrupt(
                self.uri(&name),
                0,
                format!(
                    "the body of batch {} is {} bytes, its commit marker says {}",
                    meta.id,
                    body.len(),
                    meta.bytes
                ),
            ));
        }
        verify_record(&self.uri(&name), meta.id, &body)?;
        Ok(body)
    }
}

/// Check a body's record header and checksum.
fn verify_record(uri: &str, id: BatchId, body: &[u8]) -> Result<(), WalError> {
    let header = body
        .get(..RECORD_HEADER_LEN)
        .ok_or_else(|| WalError::corrupt(uri, 0, "shorter than a record header"))?;
    let header =
        RecordHeader::decode(header).map_err(|reason| WalError::corrupt(uri, 0, reason))?;
    if header.kind != RecordKind::Data || header.batch_id != id.0 {
        return Err(WalError::corrupt(
            uri,
            0,
            format!("expected the data record of batch {id}"),
        ));
    }
    let payload = &body[RECORD_HEADER_LEN..];
    if payload.len() != header.payload_len as usize {
        return Err(WalError::corrupt(
            uri,
            0,
            format!(
                "the payload is {} bytes, its header says {}",
                payload.len(),
                header.payload_len
            ),
        ));
    }
    header.verify(payload).map_err(|computed| {
        WalError::corrupt(
            uri,
            0,
            format!(
                "record checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                header.crc
            ),
        )
    })
}

fn decode_body(uri: &str, id: BatchId, body: &[u8]) -> Result<Vec<BatchPart>, WalError> {
    format::decode_parts(
        id,
        &body[RECORD_HEADER_LEN..],
        &PathBuf::from(uri),
        RECORD_HEADER_LEN as u64,
    )
}

fn position_of(uri: &str, body: &[u8]) -> Result<Vec<u8>, WalError> {
    let parsed = format::parse_data_payload(&body[RECORD_HEADER_LEN..])
        .map_err(|reason| WalError::corrupt(uri, RECORD_HEADER_LEN as u64, reason))?;
    Ok(parsed.position.to_vec())
}

/// An object's bytes if it exists, or why it could not be read.
type MaybeObject = Result<Option<Vec<u8>>, WalError>;

/// What one batch id has under the prefix.
#[derive(Debug, Default)]
struct Found {
    body: Option<u64>,
    marker: bool,
}

impl<'a> S3Wal<'a> {
    /// Open the WAL, recovering as the module docs say.
    ///
    /// # Errors
    ///
    /// [`WalError::ObjectStore`] (S3 unreachable or refusing, retryable when throttled or
    /// failing), [`WalError::State`] (the watermark), [`WalError::Corrupt`] (a committed batch
    /// damaged or missing), [`WalError::SegmentGap`] (a batch missing in the middle).
    pub fn open(config: S3WalConfig<'a>) -> Result<(S3Wal<'a>, Recovery), WalError> {
        let client = config.aws.s3(None);
        let objects = Objects {
            aws: config.aws.clone(),
            client: client.clone(),
            bucket: config.bucket.clone(),
            prefix: config.prefix.clone(),
            io: crate::aws::Bucket::new(&config.aws, &config.bucket, None),
        };
        let mut recovery = Recovery::default();
        let watermark_key = StateKey::new(config.partition.as_str(), WATERMARK_SORT_KEY);
        let (reclaimed, watermark_position) = match config
            .store
            .get(&watermark_key)
            .map_err(|source| WalError::State { source })?
        {
            Some(item) => decode_watermark(&watermark_key, &item.value)?,
            None => (0, None),
        };
        // Ids at or below the floor were used before a reset: never again, and the position
        // a watermark at or below it carries belongs to that earlier life too.
        let (reclaimed, watermark_position) = if config.floor > 0 && reclaimed <= config.floor {
            (config.floor, None)
        } else {
            (reclaimed, watermark_position)
        };

        let mut found: std::collections::BTreeMap<u64, Found> = Default::default();
        for (name, size) in objects.list()? {
            match parse_name(&name) {
                Some((id, true)) => found.entry(id).or_default().marker = true,
                Some((id, false)) => found.entry(id).or_default().body = Some(size),
                None => {
                    let warning =
                        format!("ignored `{}`: not a WAL object name", objects.uri(&name));
                    tracing::warn!(uri = %objects.uri(&name), "Ignored an object in the WAL prefix.");
                    recovery.warnings.push(warning);
                }
            }
        }

        // Leftovers of an interrupted reclaim.
        let leftovers: Vec<u64> = found.range(..=reclaimed).map(|(id, _)| *id).collect();
        if !leftovers.is_empty() {
            prove_lease(&config, reclaimed)?;
            delete_batches(&objects, &leftovers, &found)?;
            let warning = format!(
                "deleted {} batch(es) at or below the reclaimed batch b{reclaimed}, left by an interrupted reclaim",
                leftovers.len()
            );
            tracing::warn!(
                reclaimed,
                count = leftovers.len(),
                "Finished an interrupted WAL reclaim."
            );
            recovery.warnings.push(warning);
            for id in &leftovers {
                found.remove(id);
            }
        }

        // Read the markers above the watermark.
        let marker_ids: Vec<u64> = found
            .iter()
            .filter(|(_, f)| f.marker)
            .map(|(id, _)| *id)
            .collect();
        let markers: Vec<(u64, MaybeObject)> = {
            let objects = &objects;
            config.aws.block_on(async move {
                futures::stream::iter(marker_ids.into_iter().map(|id| async move {
                    let o = objects.clone();
                    let name = marker_name(id);
                    (id, o.get_async(&name).await)
                }))
                .buffered(OPEN_CONCURRENCY)
                .collect()
                .await
            })
        };
        let mut parsed: std::collections::BTreeMap<u64, Marker> = Default::default();
        for (id, bytes) in markers {
            if let Some(bytes) = bytes? {
                parsed.insert(id, view::parse_marker(&objects, id, &bytes)?);
            }
        }

        // Walk up from the watermark: committed batches, then at most a torn tail.
        let mut batches: Vec<BatchMeta> = Vec::new();
        let mut expected = reclaimed + 1;
        let mut torn: Vec<u64> = Vec::new();
        for (&id, f) in &found {
            let marker = parsed.get(&id);
            let complete = match (marker, f.body) {
                (Some(m), Some(size)) => m.bytes == size,
                _ => false,
            };
            if complete && torn.is_empty() {
                if id != expected {
                    return Err(WalError::SegmentGap {
                        path: PathBuf::from(objects.uri(&marker_name(id))),
                        expected: BatchId(expected),
                        found: BatchId(id),
                    });
                }
                if let Some(m) = marker {
                    batches.push(meta_of(m));
                }
                expected = id + 1;
                continue;
            }
            torn.push(id);
        }
        // The newest committed batch is checked in full against its marker: a writer that
        // lost its lease can only ever race the newest id.
        let mut last_position = watermark_position;
        while let Some(newest) = batches.last() {
            let id = newest.id.0;
            let name = body_name(id);
            let marker = &parsed[&id];
            match objects.get(&name)? {
                Some(body)
                    if body.len() as u64 == marker.bytes
                        && format::crc32c(&[&body]) == marker.crc32c =>
                {
                    verify_record(&objects.uri(&name), newest.id, &body)?;
                    last_position = Some(position_of(&objects.uri(&name), &body)?);
                    break;
                }
                _ => {
                    // Damaged or replaced: torn when the source never moved past it.
                    torn.insert(0, id);
                    batches.pop();
                }
            }
        }
        for &id in &torn {
            if id <= config.recorded_through {
                let name = if parsed.contains_key(&id) {
                    body_name(id)
                } else {
                    marker_name(id)
                };
                return Err(WalError::corrupt(
                    objects.uri(&name),
                    0,
                    format!(
                        "batch b{id} is damaged (its marker and body are missing or do not match), but the source position was already recorded past it"
                    ),
                ));
            }
        }
        if !torn.is_empty() {
            // Deleting is fenced: a writer whose lease was taken over while it recovered
            // stops here instead of deleting the new holder's batch in progress.
            prove_lease(&config, torn[0])?;
            // Each torn id's marker goes first, then its body: a marker never outlives its
            // body in a way recovery could mistake for a commit.
            let markers: Vec<String> = torn.iter().map(|id| marker_name(*id)).collect();
            objects.delete(&markers)?;
            let bodies: Vec<String> = torn.iter().map(|id| body_name(*id)).collect();
            objects.delete(&bodies)?;
            let warning = format!(
                "discarded {} uncommitted batch(es) from b{} (a torn append: a crash, or a writer whose lease was taken over)",
                torn.len(),
                torn[0]
            );
            tracing::warn!(
                first = torn[0],
                count = torn.len(),
                "Discarded a torn S3 WAL append."
            );
            recovery.warnings.push(warning);
        }
        recovery.batches = batches.len();
        let next = batches.last().map_or(reclaimed, |b| b.id.0) + 1;
        Ok((
            S3Wal {
                config,
                client,
                batches,
                last_position,
                next,
                reclaimed,
            },
            recovery,
        ))
    }

    fn objects(&self) -> Objects {
        Objects {
            aws: self.config.aws.clone(),
            client: self.client.clone(),
            bucket: self.config.bucket.clone(),
            prefix: self.config.prefix.clone(),
            io: crate::aws::Bucket::new(&self.config.aws, &self.config.bucket, None),
        }
    }

    /// The id reclaimed through.
    pub fn reclaimed(&self) -> BatchId {
        BatchId(self.reclaimed)
    }

    /// Prove the lease is still ours with a fenced write.
    fn claim(&self, id: u64) -> Result<(), WalError> {
        prove_lease(&self.config, id)
    }
}

/// Prove the writer still holds the lease before deleting WAL objects: a fenced write of
/// [`CLAIM_SORT_KEY`] (the batch id concerned). A writer replaced since fails with
/// [`WalError::State`] ([`crate::state::StateError::Fenced`]) and deletes nothing. Without a
/// fence (no lease) there is nothing to prove.
fn prove_lease(config: &S3WalConfig<'_>, id: u64) -> Result<(), WalError> {
    if config.fence.is_none() {
        return Ok(());
    }
    let key = StateKey::new(config.partition.as_str(), CLAIM_SORT_KEY);
    config
        .store
        .put(&key, &id.to_le_bytes(), Condition::Any, config.fence)
        .map(|_| ())
        .map_err(|source| WalError::State { source })
}

fn meta_of(marker: &Marker) -> BatchMeta {
    BatchMeta {
        id: BatchId(marker.batch),
        position: Vec::new(),
        parts: marker
            .parts
            .iter()
            .map(|(namespace, schema_version, rows)| PartMeta {
                namespace: namespace.clone(),
                schema_version: *schema_version,
                rows: *rows,
            })
            .collect(),
        segment: marker.batch,
        offset: 0,
        bytes: marker.bytes,
    }
}

fn delete_batches(
    objects: &Objects,
    ids: &[u64],
    found: &std::collections::BTreeMap<u64, Found>,
) -> Result<(), WalError> {
    let markers: Vec<String> = ids
        .iter()
        .filter(|id| found.get(id).is_some_and(|f| f.marker))
        .map(|id| marker_name(*id))
        .collect();
    objects.delete(&markers)?;
    let bodies: Vec<String> = ids
        .iter()
        .filter(|id| found.get(id).is_some_and(|f| f.body.is_some()))
        .map(|id| body_name(*id))
        .collect();
    objects.delete(&bodies)
}

fn decode_watermark(key: &StateKey, value: &[u8]) -> Result<(u64, Option<Vec<u8>>), WalError> {
    let (id, position) = value
        .split_first_chunk::<8>()
        .ok_or_else(|| WalError::State {
            source: crate::state::StateError::Corrupt {
                key: key.to_string(),
                message: format!("{} bytes is shorter than the 8-byte batch id", value.len()),
            },
        })?;
    let id = u64::from_le_bytes(*id);
    Ok((id, (id > 0).then(|| position.to_vec())))
}

impl Objects {
    async fn get_async(&self, name: &str) -> Result<Option<Vec<u8>>, WalError> {
        let key = format!("{}{}", self.prefix, name);
        self.io
            .get_async(&key)
            .await
            .map_err(|f| self.err("read", name, f))
    }
}

/// [`S3Wal::reader`]: reads bodies by listing entry.
struct S3Reader {
    objects: Objects,
}

impl WalReader for S3Reader {
    fn read_committed(&self, meta: &BatchMeta) -> Result<Vec<BatchPart>, WalError> {
        let body = self.objects.read_body(meta)?;
        decode_body(&self.objects.uri(&body_name(meta.id.0)), meta.id, &body)
    }
}

impl super::Wal for S3Wal<'_> {
    fn append(&mut self, position: &[u8], parts: &[BatchPart]) -> Result<BatchMeta, WalError> {
        let id = BatchId(self.next);
        let (payload, part_metas) =
            format::encode_data_payload(id, position, parts, super::WalCompression::Lz4)?;
        let header = RecordHeader::for_payload(RecordKind::Data, id.0, &payload);
        let mut body = Vec::with_capacity(RECORD_HEADER_LEN + payload.len());
        body.extend_from_slice(&header.encode());
        body.extend_from_slice(&payload);
        drop(payload);
        let marker = Marker {
            format: 1,
            batch: id.0,
            bytes: body.len() as u64,
            crc32c: format::crc32c(&[&body]),
            parts: part_metas
                .iter()
                .map(|p| (p.namespace.clone(), p.schema_version, p.rows))
                .collect(),
        };
        let objects = self.objects();
        let body_key = body_name(id.0);
        let mut attempts = 0;
        while !objects.put_new(&body_key, body.clone())? {
            // A body without marker at the next id: a torn append by a crashed writer or one
            // that lost its lease. Replace it while (provably) holding the lease.
            attempts += 1;
            if attempts > MAX_ORPHAN_RETRIES {
                return Err(WalError::CommitRace {
                    uri: objects.uri(&body_key),
                });
            }
            // Examine it first, prove the lease, then delete exactly what was examined
            // (`If-Match` its ETag): a writer that lost its lease in between cannot delete a
            // body the new holder put since.
            let Some(head) = objects.head(&body_key)? else {
                continue;
            };
            self.claim(id.0)?;
            tracing::warn!(uri = %objects.uri(&body_key), "Replacing an uncommitted WAL body left by an earlier writer.");
            match &head.etag {
                Some(etag) => {
                    objects.delete_if_match(&body_key, etag)?;
                }
                None => objects.delete(std::slice::from_ref(&body_key))?,
            }
        }
        if super::failpoint::check(super::failpoint::AFTER_DATA_WRITE) {
            return Err(WalError::Failpoint {
                name: super::failpoint::AFTER_DATA_WRITE,
            });
        }
        let marker_bytes = serde_json::to_vec(&marker).map_err(|e| WalError::InvalidBatch {
            batch: id,
            reason: e.to_string(),
        })?;
        if !objects.put_new(&marker_name(id.0), marker_bytes)? {
            return Err(WalError::CommitRace {
                uri: objects.uri(&marker_name(id.0)),
            });
        }
        if super::failpoint::check(super::failpoint::AFTER_FSYNC) {
            return Err(WalError::Failpoint {
                name: super::failpoint::AFTER_FSYNC,
            });
        }
        let meta = BatchMeta {
            position: position.to_vec(),
            ..meta_of(&marker)
        };
        self.batches.push(meta.clone());
        self.last_position = Some(position.to_vec());
        self.next += 1;
        Ok(meta)
    }

    fn batches(&self) -> &[BatchMeta] {
        &self.batches
    }

    fn last_position(&self) -> Option<&[u8]> {
        self.last_position.as_deref()
    }

    fn next_id(&self) -> BatchId {
        BatchId(self.next)
    }

    fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError> {
        let meta = self
            .batches
            .iter()
            .find(|b| b.id == id)
            .ok_or(WalError::NotFound { batch: id })?;
        S3Reader {
            objects: self.objects(),
        }
        .read_committed(meta)
    }

    fn reclaim_through(&mut self, id: BatchId) -> Result<u64, WalError> {
        let newest = BatchId(self.next - 1);
        if id > newest {
            return Err(WalError::ReclaimAhead {
                requested: id,
                newest,
            });
        }
        if id.0 <= self.reclaimed {
            return Ok(0);
        }
        // 1. The watermark, fenced: from here on these ids are never used again.
        let key = StateKey::new(self.config.partition.as_str(), WATERMARK_SORT_KEY);
        let mut value = id.0.to_le_bytes().to_vec();
        value.extend_from_slice(self.last_position.as_deref().unwrap_or_default());
        self.config
            .store
            .put(&key, &value, Condition::Any, self.config.fence)
            .map_err(|source| WalError::State { source })?;
        self.reclaimed = id.0;
        // 2. Markers, then 3. bodies.
        let ids: Vec<u64> = self
            .batches
            .iter()
            .filter(|b| b.id <= id)
            .map(|b| b.id.0)
            .collect();
        let objects = self.objects();
        let markers: Vec<String> = ids.iter().map(|i| marker_name(*i)).collect();
        objects.delete(&markers)?;
        let bodies: Vec<String> = ids.iter().map(|i| body_name(*i)).collect();
        objects.delete(&bodies)?;
        self.batches.retain(|b| b.id > id);
        Ok(2 * ids.len() as u64)
    }

    fn reader(&self) -> Arc<dyn WalReader> {
        Arc::new(S3Reader {
            objects: self.objects(),
        })
    }

    fn location(&self) -> String {
        format!("s3://{}/{}", self.config.bucket, self.config.prefix)
    }
}
