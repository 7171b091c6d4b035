//! [`DiskWal`]: the WAL on a local filesystem.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::failpoint;
use super::format::{
    self, COMMIT_RECORD_LEN, RECORD_HEADER_LEN, RecordHeader, RecordKind, SegmentHeader,
};
use super::{BatchId, BatchMeta, BatchPart, Recovery, WalError, WalOptions, WalStats};

/// A WAL in one directory on local disk. One writer at a time: the pipeline's lease (a lock on
/// its data directory) guarantees that; the WAL does not lock by itself.
#[derive(Debug)]
pub struct DiskWal {
    dir: PathBuf,
    options: WalOptions,
    /// Segment files, ascending; the last one is the active one.
    segments: Vec<Segment>,
    /// The active segment, open for writing.
    active: File,
    /// Committed batches above `reclaimed_through`, ascending.
    batches: Vec<BatchMeta>,
    /// Every batch up to this id has been acknowledged and reclaimed (0: none).
    reclaimed_through: u64,
    /// The position of the newest committed batch, even if reclaimed.
    last_position: Option<Vec<u8>>,
    /// Set when a failure leaves the files in a state this handle cannot vouch for.
    poisoned: Option<String>,
}

/// One segment file.
#[derive(Debug, Clone)]
struct Segment {
    /// The id of its first batch (the id in its name).
    first_id: u64,
    /// One past the id of its last batch (`first_id` when it holds none).
    end_id: u64,
    path: PathBuf,
    /// Its length in bytes: the end of its last complete record.
    len: u64,
}

impl DiskWal {
    /// Open the WAL in `dir`, creating the directory and a first segment if there is none, and
    /// recover: verify every record's checksum, cut a torn tail off the last segment, and list
    /// the committed, unreclaimed batches.
    ///
    /// Reads every segment in full (one at a time), so opening costs a read of the whole WAL.
    ///
    /// # Errors
    ///
    /// [`WalError::Corrupt`] for damage inside committed data, [`WalError::SegmentGap`] when the
    /// segments do not follow on from each other, [`WalError::BadMagic`] and
    /// [`WalError::UnsupportedVersion`] for foreign files, [`WalError::Io`] and
    /// [`WalError::InvalidOptions`].
    pub fn open(dir: &Path, options: WalOptions) -> Result<(DiskWal, Recovery), WalError> {
        DiskWal::open_above(dir, options, 0)
    }

    /// [`DiskWal::open`], numbering a fresh WAL (an empty or missing directory) from
    /// `floor + 1` instead of 1: the ids up to `floor` were used by an earlier life of the
    /// pipeline (the state store's `wal#floor`, written by `skipprd reset`). A WAL that holds
    /// segments keeps its own numbering.
    ///
    /// # Errors
    ///
    /// As [`DiskWal::open`].
    pub fn open_above(
        dir: &Path,
        options: WalOptions,
        floor: u64,
    ) -> Result<(DiskWal, Recovery), WalError> {
        if options.segment_target_bytes < WalOptions::MIN_SEGMENT_TARGET_BYTES {
            return Err(WalError::InvalidOptions {
                reason: format!(
                    "segment_target_bytes is {}, at least {} is needed",
                    options.segment_target_bytes,
                    WalOptions::MIN_SEGMENT_TARGET_BYTES
                ),
            });
        }
        if options.fsync {
            // Every directory created on the way is recorded durably in its parent.
            crate::durable::create_dir_durable(dir)
                .map_err(|e| WalError::io("create", e.path, e.source))?;
        } else {
            fs::create_dir_all(dir).map_err(|e| WalError::io("create", dir, e))?;
        }
        let mut recovery = Recovery::default();
        let ids = list_segments(dir, &options, &mut recovery.warnings)?;

        let mut segments = Vec::with_capacity(ids.len().max(1));
        let mut batches = Vec::new();
        let mut reclaimed_through = 0;
        let mut last_position = None;
        for (index, &id) in ids.iter().enumerate() {
            let path = segment_path(dir, id);
            let is_last = index + 1 == ids.len();
            let bytes = fs::read(&path).map_err(|e| WalError::io("read", &path, e))?;
            let scan = format::scan_segment(&bytes, &path)?;
            if scan.header.first_batch_id != id {
                return Err(WalError::corrupt(
                    &path,
                    12,
                    format!(
                        "segment header says its first batch is {}, its file name says {}",
                        BatchId(scan.header.first_batch_id),
                        BatchId(id)
                    ),
                ));
            }
            match segments.last() {
                Some(previous) => {
                    let previous: &Segment = previous;
                    if previous.end_id != id {
                        return Err(WalError::SegmentGap {
                            path,
                            expected: BatchId(previous.end_id),
                            found: BatchId(id),
                        });
                    }
                }
                // Everything before the oldest remaining segment was reclaimed.
                None => reclaimed_through = id - 1,
            }
            let mut len = bytes.len() as u64;
            if let Some(damage) = &scan.damage {
                if !is_last {
                    return Err(WalError::corrupt(
                        &path,
                        damage.offset,
                        format!("{} (in a segment that is not the last)", damage.reason),
                    ));
                }
                if let Some(later) = format::find_valid_record_after(&bytes, damage.offset as usize)
                {
                    return Err(WalError::corrupt(
                        &path,
                        damage.offset,
                        format!(
                            "{} (a valid record follows at offset {later})",
                            damage.reason
                        ),
                    ));
                }
                let cut = len - scan.valid_end;
                truncate(&path, scan.valid_end, options.fsync)?;
                let warning = format!(
                    "cut a torn tail of {cut} bytes at offset {} from `{}`: {}",
                    scan.valid_end,
                    path.display(),
                    damage.reason
                );
                tracing::warn!(
                    path = %path.display(),
                    offset = scan.valid_end,
                    bytes = cut,
                    reason = %damage.reason,
                    "Cut a torn tail off the last WAL segment."
                );
                recovery.warnings.push(warning);
                recovery.truncated_bytes = cut;
                recovery.truncated_segment = Some(path.clone());
                len = scan.valid_end;
            }
            if let Some(position) = scan.header.previous_position {
                last_position = Some(position);
            }
            if let Some(through) = scan.reclaimed_through {
                reclaimed_through = reclaimed_through.max(through);
            }
            let end_id = id + scan.batches.len() as u64;
            if let Some(newest) = scan.batches.last() {
                last_position = Some(newest.position.clone());
            }
            batches.extend(scan.batches);
            segments.push(Segment {
                first_id: id,
                end_id,
                path,
                len,
            });
        }
        batches.retain(|batch: &BatchMeta| batch.id.0 > reclaimed_through);

        let active = match segments.last() {
            Some(segment) => open_for_append(&segment.path)?,
            None => {
                reclaimed_through = floor;
                let (segment, file) = create_segment(dir, floor + 1, None, &options)?;
                segments.push(segment);
                file
            }
        };
        recovery.batches = batches.len();
        tracing::debug!(
            dir = %dir.display(),
            segments = segments.len(),
            batches = batches.len(),
            "Opened the WAL."
        );
        Ok((
            DiskWal {
                dir: dir.to_owned(),
                options,
                segments,
                active,
                batches,
                reclaimed_through,
                last_position,
                poisoned: None,
            },
            recovery,
        ))
    }

    /// Append a batch and make it durable. When this returns `Ok` the batch is committed.
    ///
    /// An `Err` means the batch is not committed as far as this handle knows; after a failed
    /// fsync or a crash it may still turn up on reopen (recovery is the truth), and the handle is
    /// poisoned ([`WalError::Poisoned`]) until reopened. An append that fails writing (a full
    /// disk) is rolled back and can be retried.
    ///
    /// # Errors
    ///
    /// [`WalError::InvalidBatch`] (no parts, a bad namespace, over a limit),
    /// [`WalError::Arrow`], [`WalError::Io`], [`WalError::Poisoned`].
    pub fn append(&mut self, position: &[u8], parts: &[BatchPart]) -> Result<BatchMeta, WalError> {
        self.check_poisoned()?;
        let id = self.next_id();
        let (payload, part_metas) =
            format::encode_data_payload(id, position, parts, self.options.compression)?;
        if self.active_segment().end_id > self.active_segment().first_id
            && self.active_segment().len >= self.options.segment_target_bytes
        {
            self.roll()?;
        }
        let offset = self.active_segment().len;
        let data_header = RecordHeader::for_payload(RecordKind::Data, id.0, &payload);
        let commit_payload = format::commit_payload(offset, data_header.crc);
        let (_, commit) = format::encode_record(RecordKind::Commit, id.0, &commit_payload);

        self.write_at(offset, &[&data_header.encode(), &payload])?;
        if failpoint::check(failpoint::AFTER_DATA_WRITE) {
            return Err(self.crash(failpoint::AFTER_DATA_WRITE));
        }
        let commit_at = offset + (RECORD_HEADER_LEN + payload.len()) as u64;
        self.write_at(commit_at, &[&commit])?;
        if failpoint::check(failpoint::AFTER_COMMIT_WRITE) {
            return Err(self.crash(failpoint::AFTER_COMMIT_WRITE));
        }
        self.sync_active()?;
        if failpoint::check(failpoint::AFTER_FSYNC) {
            return Err(self.crash(failpoint::AFTER_FSYNC));
        }

        let end = commit_at + COMMIT_RECORD_LEN;
        let segment = self.active_segment_mut();
        segment.len = end;
        segment.end_id = id.0 + 1;
        let meta = BatchMeta {
            id,
            position: position.to_vec(),
            parts: part_metas,
            segment: segment.first_id,
            offset,
            bytes: end - offset,
        };
        self.batches.push(meta.clone());
        self.last_position = Some(position.to_vec());
        Ok(meta)
    }

    /// Committed batches that have not been reclaimed, ascending by id.
    pub fn batches(&self) -> &[BatchMeta] {
        &self.batches
    }

    /// The position of the newest committed batch, even after it was reclaimed (it is kept in
    /// the header of every new segment); `None` when no batch was ever committed.
    pub fn last_position(&self) -> Option<&[u8]> {
        self.last_position.as_deref()
    }

    /// The id the next appended batch gets.
    pub fn next_id(&self) -> BatchId {
        BatchId(self.active_segment().end_id)
    }

    /// Read a committed, unreclaimed batch back, verifying its checksum again.
    ///
    /// # Errors
    ///
    /// [`WalError::NotFound`], [`WalError::Corrupt`] (the bytes changed since recovery),
    /// [`WalError::Arrow`], [`WalError::Io`].
    pub fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError> {
        let index = self
            .batches
            .binary_search_by_key(&id, |batch| batch.id)
            .map_err(|_| WalError::NotFound { batch: id })?;
        read_batch(&self.dir, &self.batches[index])
    }

    /// Reclaim every batch up to and including `id`: they are acknowledged by the destination.
    /// Records that durably (a reclaim record in the active segment), then deletes the segments
    /// whose batches are all reclaimed, oldest first. If that includes the active segment, a new
    /// empty segment is started first, so the next id and the last position stay on disk.
    /// Returns how many segment files were deleted. Reclaiming an id already reclaimed writes
    /// nothing, but still deletes segments that a crashed reclaim left behind.
    ///
    /// # Errors
    ///
    /// [`WalError::ReclaimAhead`] when `id` is newer than the newest committed batch,
    /// [`WalError::Io`], [`WalError::Poisoned`].
    pub fn reclaim_through(&mut self, id: BatchId) -> Result<u64, WalError> {
        self.check_poisoned()?;
        let newest = self.active_segment().end_id - 1;
        if id.0 > newest {
            return Err(WalError::ReclaimAhead {
                requested: id,
                newest: BatchId(newest),
            });
        }
        if id.0 > self.reclaimed_through {
            let offset = self.active_segment().len;
            let (_, record) = format::encode_record(RecordKind::Reclaim, id.0, &[]);
            self.write_at(offset, &[&record])?;
            self.sync_active()?;
            self.active_segment_mut().len = offset + record.len() as u64;
            self.reclaimed_through = id.0;
            let keep_from = self.batches.partition_point(|batch| batch.id <= id);
            self.batches.drain(..keep_from);
            if failpoint::check(failpoint::RECLAIM_BEFORE_DELETE) {
                return Err(self.crash(failpoint::RECLAIM_BEFORE_DELETE));
            }
        }

        // Delete through everything reclaimed so far, which finishes any reclaim a crash
        // interrupted.
        let through = self.reclaimed_through;
        let active = self.active_segment();
        if active.end_id > active.first_id && active.end_id - 1 <= through {
            self.roll()?;
        }
        let mut deleted = 0;
        while self.segments.len() > 1 && self.segments[0].end_id <= through + 1 {
            if deleted > 0 && failpoint::check(failpoint::RECLAIM_BETWEEN_DELETES) {
                return Err(self.crash(failpoint::RECLAIM_BETWEEN_DELETES));
            }
            let path = self.segments[0].path.clone();
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(WalError::io("delete", path, e)),
            }
            self.segments.remove(0);
            deleted += 1;
            // Sync after each delete, so a crash can only leave a contiguous suffix.
            if self.options.fsync {
                sync_dir(&self.dir)?;
            }
            tracing::debug!(path = %path.display(), "Deleted a reclaimed WAL segment.");
        }
        Ok(deleted)
    }

    /// How many segments, bytes and batches the WAL holds.
    pub fn stats(&self) -> WalStats {
        WalStats {
            segments: self.segments.len(),
            bytes: self.segments.iter().map(|segment| segment.len).sum(),
            batches: self.batches.len(),
        }
    }

    /// The WAL directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Start a new active segment whose first batch is the next id.
    fn roll(&mut self) -> Result<(), WalError> {
        let next = self.active_segment().end_id;
        let (segment, file) =
            match create_segment(&self.dir, next, self.last_position.clone(), &self.options) {
                Ok(created) => created,
                Err(RollError::Failpoint(name)) => return Err(self.crash(name)),
                Err(RollError::BeforeRename(error)) => return Err(error),
                Err(RollError::AfterRename(error)) => {
                    self.poisoned = Some(error.to_string());
                    return Err(error);
                }
            };
        tracing::debug!(path = %segment.path.display(), "Started a new WAL segment.");
        self.segments.push(segment);
        self.active = file;
        Ok(())
    }

    /// Write `chunks` at `offset` of the active segment. On failure, cut the file back to
    /// `offset` so the append can be retried; if even that fails, poison the handle.
    fn write_at(&mut self, offset: u64, chunks: &[&[u8]]) -> Result<(), WalError> {
        let result = self.active.seek(SeekFrom::Start(offset)).and_then(|_| {
            chunks
                .iter()
                .try_for_each(|chunk| self.active.write_all(chunk))
        });
        let Err(e) = result else {
            return Ok(());
        };
        let path = self.active_segment().path.clone();
        let error = WalError::io("write", &path, e);
        if let Err(cut) = self.active.set_len(offset) {
            self.poisoned = Some(format!(
                "{error}; cutting the partial record back off failed too: {cut}"
            ));
        }
        Err(error)
    }

    /// fsync the active segment (when fsync is on). A failed fsync poisons the handle: the
    /// kernel may have dropped the dirty pages, so only a reopen can tell what is on disk.
    fn sync_active(&mut self) -> Result<(), WalError> {
        if !self.options.fsync {
            return Ok(());
        }
        self.active.sync_data().map_err(|e| {
            let error = WalError::io("sync", self.active_segment().path.clone(), e);
            self.poisoned = Some(error.to_string());
            error
        })
    }

    /// A failpoint fired: stop as a crash would, leaving the files as they are.
    fn crash(&mut self, name: &'static str) -> WalError {
        self.poisoned = Some(format!("failpoint `{name}` fired"));
        WalError::Failpoint { name }
    }

    fn check_poisoned(&self) -> Result<(), WalError> {
        match &self.poisoned {
            Some(reason) => Err(WalError::Poisoned {
                dir: self.dir.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn active_segment(&self) -> &Segment {
        // `segments` is never empty: `open` creates one and reclaim keeps the last.
        &self.segments[self.segments.len() - 1]
    }

    fn active_segment_mut(&mut self) -> &mut Segment {
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }
}

/// The path of the segment whose first batch is `first_id`.
pub(super) fn segment_path(dir: &Path, first_id: u64) -> PathBuf {
    dir.join(format!("wal-{first_id:020}.seg"))
}

/// Read the committed batch `meta` back from its segment in `dir`, verifying its checksum again.
/// Read a committed batch of the WAL in `dir` by its listing entry (from
/// [`DiskWal::batches`]), verifying its checksum, without opening or scanning the WAL. Valid
/// while the batch is not reclaimed: the delivery thread reads the batches of its job this
/// way while the WAL's owner appends.
///
/// # Errors
///
/// [`WalError::Corrupt`], [`WalError::Arrow`], [`WalError::Io`].
pub fn read_committed(dir: &Path, meta: &BatchMeta) -> Result<Vec<BatchPart>, WalError> {
    read_batch(dir, meta)
}

pub(super) fn read_batch(dir: &Path, meta: &BatchMeta) -> Result<Vec<BatchPart>, WalError> {
    let (path, payload) = read_verified_payload(dir, meta)?;
    format::decode_parts(meta.id, &payload, &path, meta.offset)
}

/// Read the data record of the committed batch `meta` and verify its checksum again. Returns
/// the segment's path and the record's payload.
pub(super) fn read_verified_payload(
    dir: &Path,
    meta: &BatchMeta,
) -> Result<(PathBuf, Vec<u8>), WalError> {
    let id = meta.id;
    let path = segment_path(dir, meta.segment);
    let mut file = File::open(&path).map_err(|e| WalError::io("read", &path, e))?;
    file.seek(SeekFrom::Start(meta.offset))
        .map_err(|e| WalError::io("read", &path, e))?;
    let mut header = [0u8; RECORD_HEADER_LEN];
    file.read_exact(&mut header)
        .map_err(|e| WalError::io("read", &path, e))?;
    let header = RecordHeader::decode(&header)
        .map_err(|reason| WalError::corrupt(&path, meta.offset, reason))?;
    if header.kind != RecordKind::Data || header.batch_id != id.0 {
        return Err(WalError::corrupt(
            &path,
            meta.offset,
            format!("expected the data record of batch {id}"),
        ));
    }
    if u64::from(header.payload_len) + RECORD_HEADER_LEN as u64 + COMMIT_RECORD_LEN != meta.bytes {
        return Err(WalError::corrupt(
            &path,
            meta.offset,
            format!("the data record of batch {id} changed length since recovery"),
        ));
    }
    let mut payload = vec![0u8; header.payload_len as usize];
    file.read_exact(&mut payload)
        .map_err(|e| WalError::io("read", &path, e))?;
    if let Err(computed) = header.verify(&payload) {
        return Err(WalError::corrupt(
            &path,
            meta.offset,
            format!(
                "record checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                header.crc
            ),
        ));
    }
    Ok((path, payload))
}

/// The first batch ids of the segments in `dir`, ascending. Deletes leftover `.seg.tmp` files
/// of interrupted segment creation and notes files it ignores.
fn list_segments(
    dir: &Path,
    options: &WalOptions,
    warnings: &mut Vec<String>,
) -> Result<Vec<u64>, WalError> {
    let mut ids = Vec::new();
    let mut removed_tmp = false;
    let entries = fs::read_dir(dir).map_err(|e| WalError::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io("list", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !name.starts_with("wal-") {
            continue;
        }
        if name.ends_with(".seg.tmp") {
            let path = entry.path();
            fs::remove_file(&path).map_err(|e| WalError::io("delete", &path, e))?;
            removed_tmp = true;
            let warning = format!(
                "deleted `{}`, left by a segment creation that did not finish",
                path.display()
            );
            tracing::warn!(path = %path.display(), "Deleted an unfinished WAL segment file.");
            warnings.push(warning);
            continue;
        }
        match parse_segment_name(name) {
            Some(id) => ids.push(id),
            None => {
                let warning = format!(
                    "ignored `{}`: not a WAL segment name (wal-<20 digits>.seg)",
                    entry.path().display()
                );
                tracing::warn!(path = %entry.path().display(), "Ignored a file in the WAL directory.");
                warnings.push(warning);
            }
        }
    }
    if removed_tmp && options.fsync {
        sync_dir(dir)?;
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The first batch id in a segment file name `wal-{id:020}.seg`.
pub(super) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|id| *id > 0)
}

/// Why creating a segment failed, and whether the directory may already show it.
enum RollError {
    Failpoint(&'static str),
    BeforeRename(WalError),
    AfterRename(WalError),
}

impl From<RollError> for WalError {
    fn from(error: RollError) -> Self {
        match error {
            RollError::Failpoint(name) => WalError::Failpoint { name },
            RollError::BeforeRename(error) | RollError::AfterRename(error) => error,
        }
    }
}

/// Create segment `first_id` atomically (temporary file, fsync, rename, directory fsync) and
/// open it for appending.
fn create_segment(
    dir: &Path,
    first_id: u64,
    previous_position: Option<Vec<u8>>,
    options: &WalOptions,
) -> Result<(Segment, File), RollError> {
    let path = segment_path(dir, first_id);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let header = SegmentHeader {
        first_batch_id: first_id,
        previous_position,
    }
    .encode();
    let written = File::create(&tmp)
        .and_then(|mut file| {
            file.write_all(&header)?;
            if options.fsync {
                file.sync_all()?;
            }
            Ok(())
        })
        .map_err(|e| WalError::io("create", &tmp, e));
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(RollError::BeforeRename(error));
    }
    if failpoint::check(failpoint::ROLL_BEFORE_RENAME) {
        return Err(RollError::Failpoint(failpoint::ROLL_BEFORE_RENAME));
    }
    if let Err(e) = fs::rename(&tmp, &path) {
        let _ = fs::remove_file(&tmp);
        return Err(RollError::BeforeRename(WalError::io("rename", &tmp, e)));
    }
    if options.fsync {
        sync_dir(dir).map_err(RollError::AfterRename)?;
    }
    let file = open_for_append(&path).map_err(RollError::AfterRename)?;
    Ok((
        Segment {
            first_id,
            end_id: first_id,
            path,
            len: header.len() as u64,
        },
        file,
    ))
}

fn open_for_append(path: &Path) -> Result<File, WalError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open", path, e))
}

/// Cut `path` to `len` bytes and make that durable.
fn truncate(path: &Path, len: u64, fsync: bool) -> Result<(), WalError> {
    let file = open_for_append(path)?;
    file.set_len(len)
        .map_err(|e| WalError::io("truncate", path, e))?;
    if fsync {
        file.sync_all().map_err(|e| WalError::io("sync", path, e))?;
    }
    Ok(())
}

/// fsync a directory, making creations, renames and deletions in it durable
/// ([`crate::durable::sync_dir`]).
fn sync_dir(dir: &Path) -> Result<(), WalError> {
    crate::durable::sync_dir(dir).map_err(|e| WalError::io("sync", e.path, e.source))
}

#[cfg(test)]
impl DiskWal {
    /// The active segment's path and the end of its last complete record, as this handle
    /// knows them (a crashed append leaves the latter at the last committed end).
    pub(super) fn active_end(&self) -> (PathBuf, u64) {
        let active = self.active_segment();
        (active.path.clone(), active.len)
    }

    /// Each segment's first id and one-past-last id.
    pub(super) fn segment_ranges(&self) -> Vec<(u64, u64)> {
        self.segments
            .iter()
            .map(|segment| (segment.first_id, segment.end_id))
            .collect()
    }
}

/// [`DiskWal::reader`]: reads by listing entry from the WAL directory.
#[derive(Debug, Clone)]
struct DiskReader {
    dir: PathBuf,
}

impl super::WalReader for DiskReader {
    fn read_committed(&self, meta: &BatchMeta) -> Result<Vec<BatchPart>, WalError> {
        read_committed(&self.dir, meta)
    }
}

impl super::Wal for DiskWal {
    fn append(&mut self, position: &[u8], parts: &[BatchPart]) -> Result<BatchMeta, WalError> {
        DiskWal::append(self, position, parts)
    }

    fn batches(&self) -> &[BatchMeta] {
        DiskWal::batches(self)
    }

    fn last_position(&self) -> Option<&[u8]> {
        DiskWal::last_position(self)
    }

    fn next_id(&self) -> BatchId {
        DiskWal::next_id(self)
    }

    fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError> {
        DiskWal::read(self, id)
    }

    fn reclaim_through(&mut self, id: BatchId) -> Result<u64, WalError> {
        DiskWal::reclaim_through(self, id)
    }

    fn reader(&self) -> std::sync::Arc<dyn super::WalReader> {
        std::sync::Arc::new(DiskReader {
            dir: self.dir.clone(),
        })
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }
}
