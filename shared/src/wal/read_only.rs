//! [`ReadOnlyWal`]: a view of the committed batches of a WAL directory that never changes it.
//!
//! A `skipprd sync` may be appending to the WAL while it is read. Its in-flight batch shows up
//! as a torn tail on the last segment, which this reader simply does not see: it stops at the
//! last complete unit, and never cuts, deletes or creates anything. Damage inside committed data
//! is still an error, as in [`DiskWal::open`].

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;

use super::disk::{parse_segment_name, read_batch, read_verified_payload, segment_path};
use super::format;
use super::{BatchId, BatchMeta, BatchPart, DiskWal, WalError};

/// How often [`ReadOnlyWal`] re-reads the WAL when it changed under it while it was read (a
/// segment deleted by a concurrent reclaim, or a tail being rewritten) before it reports the
/// error.
const ATTEMPTS: usize = 3;

/// The committed, unreclaimed batches of a WAL directory, read without writing anything.
///
/// Made by [`DiskWal::open_read_only`]. It is a snapshot: batches committed later show up after
/// [`ReadOnlyWal::refresh`]. A batch reclaimed after the snapshot was taken can disappear from
/// disk; reading it then fails with [`WalError::Io`] of kind not found.
#[derive(Debug, Clone)]
pub struct ReadOnlyWal {
    dir: PathBuf,
    /// Scanned segments by first batch id, ascending.
    segments: BTreeMap<u64, ScannedSegment>,
    /// Committed batches above the reclaim mark, ascending.
    batches: Vec<BatchMeta>,
}

/// What a scan of one segment found, kept so that a refresh does not read sealed segments again.
#[derive(Debug, Clone)]
struct ScannedSegment {
    /// The file length when it was scanned.
    file_len: u64,
    /// Whether a later segment existed when it was scanned: then no writer appends to it again.
    sealed: bool,
    /// One past the id of its last batch.
    end_id: u64,
    reclaimed_through: Option<u64>,
    batches: Vec<BatchMeta>,
}

impl DiskWal {
    /// Open the WAL in `dir` for reading only: list the committed, unreclaimed batches without
    /// creating, cutting or deleting anything, so it is safe while a writer appends.
    ///
    /// A torn tail on the last segment (a batch being appended right now, or left by a crash the
    /// next writer will repair) is not visible: the listing stops at the last complete commit.
    /// A missing directory is an empty WAL. Leftover `.seg.tmp` files are ignored.
    ///
    /// # Errors
    ///
    /// As [`DiskWal::open`]: [`WalError::Corrupt`] for damage inside committed data,
    /// [`WalError::SegmentGap`], [`WalError::BadMagic`], [`WalError::UnsupportedVersion`] and
    /// [`WalError::Io`].
    pub fn open_read_only(dir: &Path) -> Result<ReadOnlyWal, WalError> {
        let mut wal = ReadOnlyWal {
            dir: dir.to_owned(),
            segments: BTreeMap::new(),
            batches: Vec::new(),
        };
        wal.refresh()?;
        Ok(wal)
    }
}

impl ReadOnlyWal {
    /// Committed batches that have not been reclaimed, ascending by id.
    pub fn batches(&self) -> &[BatchMeta] {
        &self.batches
    }

    /// The WAL directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Read the WAL again, so batches committed (or reclaimed) since the last read show up.
    /// Segments that were already complete are not read again, only the last one and newer ones.
    ///
    /// # Errors
    ///
    /// As [`DiskWal::open_read_only`]. On error the snapshot is left as it was.
    pub fn refresh(&mut self) -> Result<(), WalError> {
        let mut attempt = 1;
        loop {
            match self.scan() {
                Ok(segments) => {
                    self.install(segments);
                    return Ok(());
                }
                // The WAL changed while it was read: a concurrent reclaim deleted a segment, or
                // the writer's recovery rewrote the tail. Read it again.
                Err(error) if attempt < ATTEMPTS && changed_under_us(&error) => {
                    tracing::debug!(%error, attempt, "The WAL changed while it was read; reading it again.");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Read a committed, unreclaimed batch back, verifying its checksum again.
    ///
    /// # Errors
    ///
    /// [`WalError::NotFound`] when the batch is not in this snapshot; [`WalError::Io`] (kind not
    /// found) when its segment was deleted by a reclaim since; [`WalError::Corrupt`],
    /// [`WalError::Arrow`].
    pub fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError> {
        read_batch(&self.dir, self.meta(id)?)
    }

    /// The namespace, schema version and Arrow schema of each part of a batch, without decoding
    /// its rows (the payload is still read and its checksum verified).
    ///
    /// # Errors
    ///
    /// As [`ReadOnlyWal::read`].
    pub fn read_schemas(&self, id: BatchId) -> Result<Vec<(String, u32, SchemaRef)>, WalError> {
        let meta = self.meta(id)?;
        let (path, payload) = read_verified_payload(&self.dir, meta)?;
        schemas_of_payload(id, &payload, &path, meta.offset)
    }

    fn meta(&self, id: BatchId) -> Result<&BatchMeta, WalError> {
        self.batches
            .binary_search_by_key(&id, |batch| batch.id)
            .map(|index| &self.batches[index])
            .map_err(|_| WalError::NotFound { batch: id })
    }

    /// Scan the directory, reusing sealed segments scanned before when their length is unchanged.
    fn scan(&self) -> Result<BTreeMap<u64, ScannedSegment>, WalError> {
        let ids = match list_segment_ids(&self.dir) {
            Ok(ids) => ids,
            Err(WalError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
                return Ok(BTreeMap::new());
            }
            Err(error) => return Err(error),
        };
        let mut segments: BTreeMap<u64, ScannedSegment> = BTreeMap::new();
        let mut previous_end: Option<u64> = None;
        for (index, &id) in ids.iter().enumerate() {
            let path = segment_path(&self.dir, id);
            let is_last = index + 1 == ids.len();
            let cached = self.segments.get(&id).filter(|cached| {
                cached.sealed
                    && fs::metadata(&path).is_ok_and(|metadata| metadata.len() == cached.file_len)
            });
            let mut segment = match cached {
                Some(cached) => cached.clone(),
                None => scan_one(&path, id, is_last)?,
            };
            segment.sealed = !is_last;
            if let Some(expected) = previous_end
                && expected != id
            {
                return Err(WalError::SegmentGap {
                    path,
                    expected: BatchId(expected),
                    found: BatchId(id),
                });
            }
            previous_end = Some(segment.end_id);
            segments.insert(id, segment);
        }
        Ok(segments)
    }

    fn install(&mut self, segments: BTreeMap<u64, ScannedSegment>) {
        // Everything before the oldest remaining segment was reclaimed.
        let mut reclaimed_through = segments.keys().next().map_or(0, |first| first - 1);
        for segment in segments.values() {
            if let Some(through) = segment.reclaimed_through {
                reclaimed_through = reclaimed_through.max(through);
            }
        }
        self.batches = segments
            .values()
            .flat_map(|segment| segment.batches.iter())
            .filter(|batch| batch.id.0 > reclaimed_through)
            .cloned()
            .collect();
        self.segments = segments;
    }
}

/// Whether `error` may come from a writer or a reclaim changing the WAL while it was read.
fn changed_under_us(error: &WalError) -> bool {
    match error {
        WalError::Io { source, .. } => source.kind() == ErrorKind::NotFound,
        WalError::Corrupt { .. } | WalError::SegmentGap { .. } => true,
        _ => false,
    }
}

/// The first batch ids of the segment files in `dir`, ascending. Ignores everything else.
fn list_segment_ids(dir: &Path) -> Result<Vec<u64>, WalError> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| WalError::io("list", dir, e))? {
        let entry = entry.map_err(|e| WalError::io("list", dir, e))?;
        if let Some(id) = entry.file_name().to_str().and_then(parse_segment_name) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Read and check one segment. A torn tail is tolerated on the last segment only, and only when
/// no valid record follows the damage.
fn scan_one(path: &Path, id: u64, is_last: bool) -> Result<ScannedSegment, WalError> {
    let bytes = fs::read(path).map_err(|e| WalError::io("read", path, e))?;
    let scan = format::scan_segment(&bytes, path)?;
    if scan.header.first_batch_id != id {
        return Err(WalError::corrupt(
            path,
            12,
            format!(
                "segment header says its first batch is {}, its file name says {}",
                BatchId(scan.header.first_batch_id),
                BatchId(id)
            ),
        ));
    }
    if let Some(damage) = &scan.damage {
        if !is_last {
            return Err(WalError::corrupt(
                path,
                damage.offset,
                format!("{} (in a segment that is not the last)", damage.reason),
            ));
        }
        if let Some(later) = format::find_valid_record_after(&bytes, damage.offset as usize) {
            return Err(WalError::corrupt(
                path,
                damage.offset,
                format!(
                    "{} (a valid record follows at offset {later})",
                    damage.reason
                ),
            ));
        }
        tracing::debug!(
            path = %path.display(),
            offset = scan.valid_end,
            reason = %damage.reason,
            "Stopped reading the WAL at a torn tail (left as it is)."
        );
    }
    Ok(ScannedSegment {
        file_len: bytes.len() as u64,
        sealed: !is_last,
        end_id: id + scan.batches.len() as u64,
        reclaimed_through: scan.reclaimed_through,
        batches: scan.batches,
    })
}

/// The namespace, schema version and Arrow schema of each part of a verified data payload
/// (`path` and `offset` name it in errors), without decoding rows.
pub(super) fn schemas_of_payload(
    id: BatchId,
    payload: &[u8],
    path: &Path,
    offset: u64,
) -> Result<Vec<(String, u32, SchemaRef)>, WalError> {
    let parsed = format::parse_data_payload(payload)
        .map_err(|reason| WalError::corrupt(path, offset, reason))?;
    let mut out = Vec::with_capacity(parsed.parts.len());
    for (part, stream) in parsed.parts.into_iter().zip(parsed.streams) {
        let reader =
            StreamReader::try_new(std::io::Cursor::new(stream), None).map_err(|source| {
                WalError::Arrow {
                    op: "decode",
                    batch: id,
                    namespace: part.namespace.clone(),
                    source,
                }
            })?;
        out.push((part.namespace, part.schema_version, reader.schema()));
    }
    Ok(out)
}

impl super::WalView for ReadOnlyWal {
    fn batches(&self) -> &[BatchMeta] {
        ReadOnlyWal::batches(self)
    }

    fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError> {
        ReadOnlyWal::read(self, id)
    }

    fn read_schemas(&self, id: BatchId) -> Result<Vec<(String, u32, SchemaRef)>, WalError> {
        ReadOnlyWal::read_schemas(self, id)
    }

    fn refreshed(&self) -> Result<Box<dyn super::WalView>, WalError> {
        let mut wal = self.clone();
        wal.refresh()?;
        Ok(Box::new(wal))
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::wal::{WalOptions, failpoint};

    fn options() -> WalOptions {
        WalOptions {
            segment_target_bytes: 1 << 20,
            fsync: false,
            ..WalOptions::default()
        }
    }

    fn part(namespace: &str, values: &[i64]) -> BatchPart {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))])
            .unwrap();
        BatchPart {
            namespace: namespace.to_owned(),
            schema_version: 1,
            batch,
        }
    }

    /// Every file in `dir` with its bytes.
    fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                (
                    entry.file_name().to_string_lossy().into_owned(),
                    fs::read(entry.path()).unwrap(),
                )
            })
            .collect()
    }

    fn ids(wal: &ReadOnlyWal) -> Vec<u64> {
        wal.batches().iter().map(|batch| batch.id.0).collect()
    }

    #[test]
    fn a_read_only_open_during_an_incomplete_append_leaves_the_files_unchanged_and_lists_only_committed_batches()
     {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, _) = DiskWal::open(dir.path(), options()).unwrap();
        writer.append(b"p1", &[part("a", &[1, 2])]).unwrap();
        writer.append(b"p2", &[part("a", &[3])]).unwrap();
        // The third append stops after its data record: a torn tail, as a writer mid-append.
        failpoint::arm(failpoint::AFTER_DATA_WRITE, 0);
        let error = writer.append(b"p3", &[part("a", &[4])]).unwrap_err();
        failpoint::disarm();
        assert!(matches!(error, WalError::Failpoint { .. }), "{error}");
        // A leftover temporary segment file must not be deleted either.
        fs::write(dir.path().join("wal-00000000000000000009.seg.tmp"), b"x").unwrap();
        let before = snapshot(dir.path());

        let reader = DiskWal::open_read_only(dir.path()).unwrap();

        assert_eq!(ids(&reader), vec![1, 2]);
        assert_eq!(snapshot(dir.path()), before);
        let parts = reader.read(BatchId(2)).unwrap();
        assert_eq!(parts, vec![part("a", &[3])]);
        let schemas = reader.read_schemas(BatchId(1)).unwrap();
        assert_eq!(schemas.len(), 1);
        assert_eq!(schemas[0].0, "a");
        assert_eq!(schemas[0].2.field(0).name(), "n");
        drop(writer);
    }

    #[test]
    fn a_refresh_sees_new_batches_and_reclaims_without_writing() {
        let dir = tempfile::tempdir().unwrap();
        let one_per_segment = WalOptions {
            segment_target_bytes: 1,
            fsync: false,
            ..WalOptions::default()
        };
        let (mut writer, _) = DiskWal::open(dir.path(), one_per_segment).unwrap();
        writer.append(b"p1", &[part("a", &[1])]).unwrap();
        writer.append(b"p2", &[part("a", &[2])]).unwrap();
        let mut reader = DiskWal::open_read_only(dir.path()).unwrap();
        assert_eq!(ids(&reader), vec![1, 2]);

        writer.append(b"p3", &[part("b", &[3])]).unwrap();
        writer.reclaim_through(BatchId(1)).unwrap();
        let before = snapshot(dir.path());
        reader.refresh().unwrap();
        assert_eq!(ids(&reader), vec![2, 3]);
        assert_eq!(snapshot(dir.path()), before);
        assert_eq!(reader.read(BatchId(3)).unwrap(), vec![part("b", &[3])]);
        assert!(matches!(
            reader.read(BatchId(1)),
            Err(WalError::NotFound { .. })
        ));
    }

    #[test]
    fn a_missing_directory_reads_as_an_empty_wal_and_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let reader = DiskWal::open_read_only(&missing).unwrap();
        assert!(reader.batches().is_empty());
        assert!(!missing.exists());
    }

    #[test]
    fn damage_inside_committed_data_is_still_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, _) = DiskWal::open(dir.path(), options()).unwrap();
        let first = writer.append(b"p1", &[part("a", &[1])]).unwrap();
        writer.append(b"p2", &[part("a", &[2])]).unwrap();
        drop(writer);
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        bytes[first.offset as usize + 30] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let error = DiskWal::open_read_only(dir.path()).unwrap_err();
        assert!(matches!(error, WalError::Corrupt { .. }), "{error}");
        assert_eq!(fs::read(&path).unwrap(), bytes);
    }
}
