//! [`S3WalView`]: the committed batches of an S3 WAL, read without writing anything, for
//! `skipprd query` while a `sync` (a CLI pass or a Lambda invocation) may be appending or
//! reclaiming. The rules are the "Reading an S3 WAL without writing it" section of
//! `docs/wal.md`; in short:
//!
//! - The prefix is listed first, then the watermark is read (when the state store can be read
//!   without the lease: the DynamoDB store). A reclaim writes the watermark before it deletes,
//!   so every object the listing misses above that watermark is really missing.
//! - Ids at or below the watermark are leftovers of a reclaim and are not shown. Without a
//!   watermark (the embedded store, which the writer holds open), the lowest ids that have a
//!   body but no marker are taken for such leftovers (a reclaim deletes markers first).
//! - Above that, complete batches (marker and body, the body's length as the marker says)
//!   must follow on from each other: a hole is [`WalError::SegmentGap`]. The first incomplete
//!   id ends the snapshot: an append in flight, or a torn one the next writer will discard.
//!   A committed batch after an incomplete one is [`WalError::Corrupt`].
//! - Nothing is deleted or repaired: that is the writer's recovery.
//!
//! A snapshot keeps the markers it read: a refresh lists the prefix again and reads only the
//! markers of new batches (a committed batch's objects never change, they only go away).
//! Reading a batch checks its body against the marker's length and CRC32C and the record's
//! own checksum.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use futures::StreamExt as _;

use super::{
    Found, Marker, OPEN_CONCURRENCY, Objects, WATERMARK_SORT_KEY, body_name, decode_body,
    decode_watermark, marker_name, meta_of, parse_name, verify_record,
};
use crate::aws::Aws;
use crate::state::{StateKey, StateStore};
use crate::wal::format::{self, RECORD_HEADER_LEN};
use crate::wal::read_only::schemas_of_payload;
use crate::wal::{BatchId, BatchMeta, BatchPart, WalError, WalView};

/// Where the watermark of an S3 WAL is read from.
#[derive(Clone)]
pub struct WatermarkSource {
    /// The state store (read without the lease).
    pub store: Arc<dyn StateStore>,
    /// The pipeline's state partition.
    pub partition: String,
}

/// A read-only snapshot of an S3 WAL (see the module docs).
#[derive(Clone)]
pub struct S3WalView {
    objects: Objects,
    watermark: Option<WatermarkSource>,
    /// The markers of the batches in the snapshot, by id.
    markers: BTreeMap<u64, Marker>,
    batches: Vec<BatchMeta>,
}

impl std::fmt::Debug for S3WalView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3WalView")
            .field("location", &self.objects.uri(""))
            .field("batches", &self.batches.len())
            .finish_non_exhaustive()
    }
}

impl S3WalView {
    /// List the committed batches under `s3://{bucket}/{prefix}` (`prefix` ends in `/`).
    ///
    /// # Errors
    ///
    /// [`WalError::ObjectStore`] (S3 unreachable, the bucket missing), [`WalError::State`]
    /// (the watermark unreadable), [`WalError::Corrupt`] and [`WalError::SegmentGap`] as the
    /// module docs say.
    pub fn open(
        aws: &Aws,
        bucket: &str,
        prefix: &str,
        watermark: Option<WatermarkSource>,
    ) -> Result<S3WalView, WalError> {
        let view = S3WalView {
            objects: Objects {
                aws: aws.clone(),
                client: aws.s3(None),
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
                io: crate::aws::Bucket::new(aws, bucket, None),
            },
            watermark,
            markers: BTreeMap::new(),
            batches: Vec::new(),
        };
        view.scanned()
    }

    /// A new snapshot, reusing the markers this one read.
    fn scanned(&self) -> Result<S3WalView, WalError> {
        let objects = &self.objects;
        let mut found: BTreeMap<u64, Found> = BTreeMap::new();
        for (name, size) in objects.list()? {
            match parse_name(&name) {
                Some((id, true)) => found.entry(id).or_default().marker = true,
                Some((id, false)) => found.entry(id).or_default().body = Some(size),
                None => {}
            }
        }
        // After the listing: a watermark read now covers every deletion the listing saw.
        let reclaimed = match &self.watermark {
            Some(source) => {
                let key = StateKey::new(source.partition.as_str(), WATERMARK_SORT_KEY);
                match source
                    .store
                    .get(&key)
                    .map_err(|source| WalError::State { source })?
                {
                    Some(item) => Some(decode_watermark(&key, &item.value)?.0),
                    None => Some(0),
                }
            }
            None => None,
        };
        let mut candidates: Vec<(u64, Found)> = match reclaimed {
            Some(reclaimed) => found.split_off(&(reclaimed + 1)).into_iter().collect(),
            None => found
                .into_iter()
                .skip_while(|(_, f)| !f.marker && f.body.is_some())
                .collect(),
        };
        // The markers not read before, concurrently. One that is gone by now went with a
        // reclaim or a torn append's cleanup: the batch counts as incomplete.
        let wanted: Vec<u64> = candidates
            .iter()
            .filter(|(id, f)| f.marker && !self.markers.contains_key(id))
            .map(|(id, _)| *id)
            .collect();
        let fetched: Vec<(u64, super::MaybeObject)> = objects.aws.block_on(async move {
            futures::stream::iter(
                wanted
                    .into_iter()
                    .map(|id| async move { (id, objects.get_async(&marker_name(id)).await) }),
            )
            .buffered(OPEN_CONCURRENCY)
            .collect()
            .await
        });
        let mut markers: BTreeMap<u64, Marker> = BTreeMap::new();
        for (id, bytes) in fetched {
            if let Some(bytes) = bytes? {
                markers.insert(id, parse_marker(objects, id, &bytes)?);
            }
        }

        let mut batches = Vec::new();
        let mut kept = BTreeMap::new();
        let mut expected = reclaimed.map(|r| r + 1);
        let mut incomplete: Option<u64> = None;
        for (id, f) in candidates.drain(..) {
            let marker = markers
                .remove(&id)
                .or_else(|| f.marker.then(|| self.markers.get(&id).cloned()).flatten());
            let complete = match (&marker, f.body) {
                (Some(m), Some(size)) => m.bytes == size,
                _ => false,
            };
            match (complete, incomplete, marker) {
                (true, None, Some(marker)) => {
                    if let Some(expected) = expected
                        && expected != id
                    {
                        return Err(WalError::SegmentGap {
                            path: objects.uri(&marker_name(id)).into(),
                            expected: BatchId(expected),
                            found: BatchId(id),
                        });
                    }
                    expected = Some(id + 1);
                    batches.push(meta_of(&marker));
                    kept.insert(id, marker);
                }
                (true, Some(first), _) => {
                    return Err(WalError::corrupt(
                        objects.uri(&body_name(first)),
                        0,
                        format!(
                            "batch b{first} is incomplete (its marker or body is missing or they disagree) but the later batch b{id} is committed; a `sync` repairs a torn append when it opens the WAL"
                        ),
                    ));
                }
                _ => {
                    incomplete.get_or_insert(id);
                }
            }
        }
        if let Some(first) = incomplete {
            tracing::debug!(
                location = %objects.uri(""),
                batch = first,
                "The S3 WAL ends in an incomplete batch (an append in flight); not shown."
            );
        }
        Ok(S3WalView {
            objects: self.objects.clone(),
            watermark: self.watermark.clone(),
            markers: kept,
            batches,
        })
    }

    /// The body of a batch of the snapshot, checked against its marker and its record checksum.
    fn body(&self, id: BatchId) -> Result<(String, Vec<u8>), WalError> {
        let marker = self
            .markers
            .get(&id.0)
            .ok_or(WalError::NotFound { batch: id })?;
        let uri = self.objects.uri(&body_name(id.0));
        let body = self.objects.read_body(&meta_of(marker))?;
        let crc = format::crc32c(&[&body]);
        if crc != marker.crc32c {
            return Err(WalError::corrupt(
                &uri,
                0,
                format!(
                    "the body's CRC32C is {crc:#010x}, its commit marker says {:#010x}",
                    marker.crc32c
                ),
            ));
        }
        verify_record(&uri, id, &body)?;
        Ok((uri, body))
    }
}

/// A commit marker's JSON, checked to name batch `id` in format 1.
pub(super) fn parse_marker(objects: &Objects, id: u64, bytes: &[u8]) -> Result<Marker, WalError> {
    let name = marker_name(id);
    let marker: Marker = serde_json::from_slice(bytes).map_err(|e| {
        WalError::corrupt(objects.uri(&name), 0, format!("not a commit marker: {e}"))
    })?;
    if marker.batch != id || marker.format != 1 {
        return Err(WalError::corrupt(
            objects.uri(&name),
            0,
            format!(
                "the marker names batch b{} (format {})",
                marker.batch, marker.format
            ),
        ));
    }
    Ok(marker)
}

impl WalView for S3WalView {
    fn batches(&self) -> &[BatchMeta] {
        &self.batches
    }

    fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError> {
        let (uri, body) = self.body(id)?;
        decode_body(&uri, id, &body)
    }

    fn read_schemas(&self, id: BatchId) -> Result<Vec<(String, u32, SchemaRef)>, WalError> {
        let (uri, body) = self.body(id)?;
        schemas_of_payload(
            id,
            &body[RECORD_HEADER_LEN..],
            Path::new(&uri),
            RECORD_HEADER_LEN as u64,
        )
    }

    fn refreshed(&self) -> Result<Box<dyn WalView>, WalError> {
        Ok(Box::new(self.scanned()?))
    }

    fn location(&self) -> String {
        self.objects.uri("")
    }
}
