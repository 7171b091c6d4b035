//! The on-disk format: segment header, record header, payloads, and the scan that reads a
//! segment back. Pure functions over byte slices; `disk.rs` does the file I/O.
//!
//! See `docs/wal.md` for the specification. Everything is little-endian.
//!
//! **Do not reorder, resize or re-purpose any field here.** The byte layout is the format;
//! a change needs a new [`FORMAT_VERSION`], and the golden-bytes tests below pin it.

use std::path::Path;

use arrow::ipc::CompressionType;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};

use super::{BatchId, BatchMeta, BatchPart, PartMeta, WalError};

/// The format version written in every segment header. Readers reject any other version.
pub const FORMAT_VERSION: u16 = 1;
/// The first 8 bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"SKPRWAL\0";
/// The first 4 bytes of every record. The non-ASCII first byte makes accidental matches in
/// text (and in zero-filled tails) unlikely.
pub const RECORD_MAGIC: [u8; 4] = [0xC5, b'W', b'R', b'C'];

/// Bytes in a segment header before the previous position.
pub const SEGMENT_HEADER_FIXED: usize = 24;
/// Bytes in a record header.
pub const RECORD_HEADER_LEN: usize = 24;
/// Bytes in a commit record's payload: data record offset (u64) and data record CRC (u32).
pub const COMMIT_PAYLOAD_LEN: usize = 12;
/// Bytes a whole commit record takes.
pub const COMMIT_RECORD_LEN: u64 = (RECORD_HEADER_LEN + COMMIT_PAYLOAD_LEN) as u64;

/// Segment header flag: the header carries the position of the newest batch committed before
/// this segment was created.
const FLAG_HAS_POSITION: u16 = 1;

/// The largest data payload (position + parts + IPC streams) of one batch, in bytes.
#[cfg(not(test))]
pub const MAX_PAYLOAD_BYTES: u64 = (1 << 31) - 1;
/// The largest data payload (small under `cfg(test)` so the limit can be tested).
#[cfg(test)]
pub const MAX_PAYLOAD_BYTES: u64 = 1 << 20;
/// The longest source position, in bytes.
pub const MAX_POSITION_BYTES: usize = 1 << 20;
/// The longest namespace, in bytes of UTF-8.
pub const MAX_NAMESPACE_BYTES: usize = 1024;
/// The most parts one batch may have.
pub const MAX_PARTS: usize = 65_535;

/// The kind byte of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// A batch's position and parts.
    Data = 1,
    /// Marks the data record before it as complete; names its offset and CRC.
    Commit = 2,
    /// Batches up to and including the record's batch id are acknowledged and reclaimed.
    Reclaim = 3,
}

impl RecordKind {
    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(RecordKind::Data),
            2 => Some(RecordKind::Commit),
            3 => Some(RecordKind::Reclaim),
            _ => None,
        }
    }
}

/// CRC32C (Castagnoli, polynomial 0x1EDC6F41 normal / 0x82F63B78 reflected, init and final
/// xor 0xFFFFFFFF) of `parts` concatenated.
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .fold(0, |crc, part| crc32c::crc32c_append(crc, part))
}

/// The header at the start of every segment file.
///
/// Layout (**do not reorder**): magic `[u8; 8]` | version `u16` | flags `u16` |
/// first batch id `u64` | previous position length `u32` | previous position bytes |
/// CRC32C `u32` over everything before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The id of the first batch this segment holds (or would hold: a segment may be empty).
    pub first_batch_id: u64,
    /// The position of the newest batch committed before this segment was created.
    pub previous_position: Option<Vec<u8>>,
}

impl SegmentHeader {
    /// The header's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let position = self.previous_position.as_deref().unwrap_or_default();
        let flags = if self.previous_position.is_some() {
            FLAG_HAS_POSITION
        } else {
            0
        };
        let mut out = Vec::with_capacity(SEGMENT_HEADER_FIXED + position.len() + 4);
        out.extend_from_slice(&SEGMENT_MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.first_batch_id.to_le_bytes());
        out.extend_from_slice(&len_u32(position.len()).to_le_bytes());
        out.extend_from_slice(position);
        let crc = crc32c(&[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parse the header at the start of `bytes`, returning it and its length. Headers are
    /// written to a temporary file and renamed into place, so a short or damaged header is
    /// always corruption, never a torn write.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<(SegmentHeader, usize), WalError> {
        if bytes.len() < SEGMENT_MAGIC.len() || bytes[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
            return Err(WalError::BadMagic {
                path: path.to_owned(),
                found: bytes[..bytes.len().min(SEGMENT_MAGIC.len())].to_vec(),
            });
        }
        if bytes.len() < SEGMENT_HEADER_FIXED + 4 {
            return Err(WalError::corrupt(
                path,
                bytes.len() as u64,
                format!("segment header cut short at {} bytes", bytes.len()),
            ));
        }
        let version = read_u16(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(WalError::UnsupportedVersion {
                path: path.to_owned(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let flags = read_u16(bytes, 10);
        let first_batch_id = read_u64(bytes, 12);
        let position_len = read_u32(bytes, 20) as usize;
        if position_len > MAX_POSITION_BYTES {
            return Err(WalError::corrupt(
                path,
                20,
                format!("segment header position length {position_len} is over the limit"),
            ));
        }
        let crc_at = SEGMENT_HEADER_FIXED + position_len;
        if bytes.len() < crc_at + 4 {
            return Err(WalError::corrupt(
                path,
                bytes.len() as u64,
                format!("segment header cut short at {} bytes", bytes.len()),
            ));
        }
        let stored = read_u32(bytes, crc_at);
        let computed = crc32c(&[&bytes[..crc_at]]);
        if stored != computed {
            return Err(WalError::corrupt(
                path,
                crc_at as u64,
                format!(
                    "segment header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
                ),
            ));
        }
        if flags & !FLAG_HAS_POSITION != 0 {
            return Err(WalError::corrupt(
                path,
                10,
                format!("unknown segment header flags {flags:#06x}"),
            ));
        }
        if first_batch_id == 0 {
            return Err(WalError::corrupt(path, 12, "segment first batch id is 0"));
        }
        let previous_position =
            (flags & FLAG_HAS_POSITION != 0).then(|| bytes[SEGMENT_HEADER_FIXED..crc_at].to_vec());
        Ok((
            SegmentHeader {
                first_batch_id,
                previous_position,
            },
            crc_at + 4,
        ))
    }
}

/// The header in front of every record's payload.
///
/// Layout (**do not reorder**): magic `[u8; 4]` | kind `u8` | reserved `[u8; 3]` (zero) |
/// batch id `u64` | payload length `u32` | CRC32C `u32` over bytes 0..20 of the header and
/// then the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// What the record is.
    pub kind: RecordKind,
    /// The batch it belongs to (for a reclaim record: the batch reclaimed through).
    pub batch_id: u64,
    /// Bytes of payload after the header.
    pub payload_len: u32,
    /// CRC32C over header bytes 0..20 and the payload.
    pub crc: u32,
}

impl RecordHeader {
    /// A header for `payload`, with its checksum computed.
    pub fn for_payload(kind: RecordKind, batch_id: u64, payload: &[u8]) -> RecordHeader {
        let mut header = RecordHeader {
            kind,
            batch_id,
            payload_len: len_u32(payload.len()),
            crc: 0,
        };
        let bytes = header.encode();
        header.crc = crc32c(&[&bytes[..20], payload]);
        header
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut out = [0u8; RECORD_HEADER_LEN];
        out[0..4].copy_from_slice(&RECORD_MAGIC);
        out[4] = self.kind as u8;
        // out[5..8]: reserved, zero.
        out[8..16].copy_from_slice(&self.batch_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.payload_len.to_le_bytes());
        out[20..24].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    /// Parse a header, checking magic, kind and reserved bytes (not the checksum).
    pub fn decode(bytes: &[u8]) -> Result<RecordHeader, String> {
        if bytes.len() < RECORD_HEADER_LEN {
            return Err(format!(
                "record header cut short ({} of {RECORD_HEADER_LEN} bytes)",
                bytes.len()
            ));
        }
        if bytes[0..4] != RECORD_MAGIC {
            return Err(format!("bad record magic {:02x?}", &bytes[0..4]));
        }
        let Some(kind) = RecordKind::from_byte(bytes[4]) else {
            return Err(format!("unknown record kind {}", bytes[4]));
        };
        if bytes[5..8] != [0, 0, 0] {
            return Err("nonzero reserved bytes in record header".to_owned());
        }
        Ok(RecordHeader {
            kind,
            batch_id: read_u64(bytes, 8),
            payload_len: read_u32(bytes, 16),
            crc: read_u32(bytes, 20),
        })
    }

    /// Whether `payload` matches this header's checksum; returns the computed CRC on mismatch.
    pub fn verify(&self, payload: &[u8]) -> Result<(), u32> {
        let header = self.encode();
        let computed = crc32c(&[&header[..20], payload]);
        if computed == self.crc {
            Ok(())
        } else {
            Err(computed)
        }
    }
}

/// A complete record: header bytes followed by the payload.
pub fn encode_record(kind: RecordKind, batch_id: u64, payload: &[u8]) -> (RecordHeader, Vec<u8>) {
    let header = RecordHeader::for_payload(kind, batch_id, payload);
    let mut out = Vec::with_capacity(RECORD_HEADER_LEN + payload.len());
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
    (header, out)
}

/// A commit record's payload: the data record's offset in the segment and its CRC.
pub fn commit_payload(data_offset: u64, data_crc: u32) -> [u8; COMMIT_PAYLOAD_LEN] {
    let mut out = [0u8; COMMIT_PAYLOAD_LEN];
    out[0..8].copy_from_slice(&data_offset.to_le_bytes());
    out[8..12].copy_from_slice(&data_crc.to_le_bytes());
    out
}

/// Encode a batch's data payload: position, then per part namespace, schema version, rows
/// and an Arrow IPC stream, its buffers compressed as `compression` says. Checks every limit.
pub fn encode_data_payload(
    batch: BatchId,
    position: &[u8],
    parts: &[BatchPart],
    compression: super::WalCompression,
) -> Result<(Vec<u8>, Vec<PartMeta>), WalError> {
    let invalid = |reason: String| WalError::InvalidBatch { batch, reason };
    if parts.is_empty() {
        return Err(invalid("a batch needs at least one part".to_owned()));
    }
    if parts.len() > MAX_PARTS {
        return Err(invalid(format!(
            "{} parts, at most {MAX_PARTS} are allowed",
            parts.len()
        )));
    }
    if position.len() > MAX_POSITION_BYTES {
        return Err(invalid(format!(
            "the position is {} bytes, at most {MAX_POSITION_BYTES} are allowed",
            position.len()
        )));
    }
    let options = IpcWriteOptions::default()
        .try_with_compression(match compression {
            super::WalCompression::Lz4 => Some(CompressionType::LZ4_FRAME),
            super::WalCompression::None => None,
        })
        .map_err(|source| WalError::Arrow {
            op: "encode",
            batch,
            namespace: String::new(),
            source,
        })?;
    let mut out = Vec::new();
    out.extend_from_slice(&len_u32(position.len()).to_le_bytes());
    out.extend_from_slice(position);
    out.extend_from_slice(&len_u32(parts.len()).to_le_bytes());
    let mut metas = Vec::with_capacity(parts.len());
    for part in parts {
        let namespace = part.namespace.as_str();
        if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_BYTES {
            return Err(invalid(format!(
                "namespace `{namespace}` must be 1 to {MAX_NAMESPACE_BYTES} bytes long"
            )));
        }
        let arrow_error = |source| WalError::Arrow {
            op: "encode",
            batch,
            namespace: namespace.to_owned(),
            source,
        };
        out.extend_from_slice(&(namespace.len() as u16).to_le_bytes());
        out.extend_from_slice(namespace.as_bytes());
        out.extend_from_slice(&part.schema_version.to_le_bytes());
        let rows = part.batch.num_rows() as u64;
        out.extend_from_slice(&rows.to_le_bytes());
        let len_at = out.len();
        out.extend_from_slice(&[0u8; 4]);
        let stream_start = out.len();
        {
            let mut writer =
                StreamWriter::try_new_with_options(&mut out, &part.batch.schema(), options.clone())
                    .map_err(arrow_error)?;
            writer.write(&part.batch).map_err(arrow_error)?;
            writer.finish().map_err(arrow_error)?;
        }
        let stream_len = (out.len() - stream_start) as u64;
        if out.len() as u64 > MAX_PAYLOAD_BYTES {
            return Err(invalid(format!(
                "the payload is over the limit of {MAX_PAYLOAD_BYTES} bytes"
            )));
        }
        out[len_at..stream_start].copy_from_slice(&(stream_len as u32).to_le_bytes());
        metas.push(PartMeta {
            namespace: namespace.to_owned(),
            schema_version: part.schema_version,
            rows,
        });
    }
    Ok((out, metas))
}

/// A data payload's fields, with the IPC streams left encoded.
pub struct DataPayload<'a> {
    /// The source position the batch reached.
    pub position: &'a [u8],
    /// Each part's namespace, schema version and row count.
    pub parts: Vec<PartMeta>,
    /// Each part's IPC stream bytes.
    pub streams: Vec<&'a [u8]>,
}

/// Parse a data payload whose checksum has been verified. A structural problem here means the
/// bytes were written wrongly (or by another format), so the message is a corruption reason.
pub fn parse_data_payload(payload: &[u8]) -> Result<DataPayload<'_>, String> {
    let mut cursor = Cursor {
        bytes: payload,
        at: 0,
    };
    let position_len = cursor.u32("position length")? as usize;
    let position = cursor.take(position_len, "position")?;
    let count = cursor.u32("part count")? as usize;
    if count == 0 || count > MAX_PARTS {
        return Err(format!("part count {count} is out of range"));
    }
    let mut parts = Vec::with_capacity(count);
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let namespace_len = cursor.u16("namespace length")? as usize;
        let namespace = cursor.take(namespace_len, "namespace")?;
        let namespace = std::str::from_utf8(namespace)
            .map_err(|_| "namespace is not UTF-8".to_owned())?
            .to_owned();
        let schema_version = cursor.u32("schema version")?;
        let rows = cursor.u64("row count")?;
        let stream_len = cursor.u32("IPC stream length")? as usize;
        streams.push(cursor.take(stream_len, "IPC stream")?);
        parts.push(PartMeta {
            namespace,
            schema_version,
            rows,
        });
    }
    if cursor.at != payload.len() {
        return Err(format!(
            "{} unexpected bytes after the last part",
            payload.len() - cursor.at
        ));
    }
    Ok(DataPayload {
        position,
        parts,
        streams,
    })
}

/// Decode a verified data payload's parts back into record batches.
pub fn decode_parts(
    batch: BatchId,
    payload: &[u8],
    path: &Path,
    offset: u64,
) -> Result<Vec<BatchPart>, WalError> {
    let parsed =
        parse_data_payload(payload).map_err(|reason| WalError::corrupt(path, offset, reason))?;
    let mut out = Vec::with_capacity(parsed.parts.len());
    for (meta, stream) in parsed.parts.into_iter().zip(parsed.streams) {
        let arrow_error = |source| WalError::Arrow {
            op: "decode",
            batch,
            namespace: meta.namespace.clone(),
            source,
        };
        let reader =
            StreamReader::try_new(std::io::Cursor::new(stream), None).map_err(arrow_error)?;
        let mut batches = Vec::with_capacity(1);
        for record_batch in reader {
            batches.push(record_batch.map_err(arrow_error)?);
        }
        let Ok([record_batch]) = <[_; 1]>::try_from(batches) else {
            return Err(WalError::corrupt(
                path,
                offset,
                format!(
                    "part `{}` of batch {batch} does not hold exactly one record batch",
                    meta.namespace
                ),
            ));
        };
        if record_batch.num_rows() as u64 != meta.rows {
            return Err(WalError::corrupt(
                path,
                offset,
                format!(
                    "part `{}` of batch {batch} has {} rows, its header says {}",
                    meta.namespace,
                    record_batch.num_rows(),
                    meta.rows
                ),
            ));
        }
        out.push(BatchPart {
            namespace: meta.namespace,
            schema_version: meta.schema_version,
            batch: record_batch,
        });
    }
    Ok(out)
}

/// Where a segment stops making sense: the first record that is incomplete, damaged or missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Offset of the record (or expected record) at fault.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// What a scan found in one segment.
#[derive(Debug)]
pub struct Scan {
    /// The segment header.
    pub header: SegmentHeader,
    /// Committed batches, ascending.
    pub batches: Vec<BatchMeta>,
    /// The highest batch id named by a reclaim record, if any.
    pub reclaimed_through: Option<u64>,
    /// End of the last complete unit (header, committed batch or reclaim record).
    pub valid_end: u64,
    /// The first problem after `valid_end`; `None` when the segment ends cleanly there.
    pub damage: Option<Damage>,
}

/// Scan a whole segment. Errors are returned only for things a torn write cannot explain: a bad
/// header, or a record whose checksum is valid but which breaks the format's rules. Damage
/// that a torn write could explain is returned in [`Scan::damage`] for the caller to judge.
pub fn scan_segment(bytes: &[u8], path: &Path) -> Result<Scan, WalError> {
    let (header, header_len) = SegmentHeader::decode(bytes, path)?;
    let segment = header.first_batch_id;
    let mut scan = Scan {
        header,
        batches: Vec::new(),
        reclaimed_through: None,
        valid_end: header_len as u64,
        damage: None,
    };
    let mut next_id = segment;
    let mut at = header_len;
    while at < bytes.len() {
        let record = match read_record(bytes, at) {
            Ok(record) => record,
            Err(reason) => {
                scan.damage = Some(Damage {
                    offset: at as u64,
                    reason,
                });
                return Ok(scan);
            }
        };
        let corrupt = |reason: String| Err(WalError::corrupt(path, at as u64, reason));
        match record.header.kind {
            RecordKind::Commit => {
                return corrupt(format!(
                    "commit record for batch {} without a data record before it",
                    BatchId(record.header.batch_id)
                ));
            }
            RecordKind::Reclaim => {
                if !record.payload.is_empty() {
                    return corrupt("reclaim record with a payload".to_owned());
                }
                if record.header.batch_id >= next_id {
                    return corrupt(format!(
                        "reclaim record through batch {} before that batch was committed",
                        BatchId(record.header.batch_id)
                    ));
                }
                scan.reclaimed_through = scan.reclaimed_through.max(Some(record.header.batch_id));
                at = record.end;
                scan.valid_end = at as u64;
            }
            RecordKind::Data => {
                if record.header.batch_id != next_id {
                    return corrupt(format!(
                        "data record for batch {}, expected batch {}",
                        BatchId(record.header.batch_id),
                        BatchId(next_id)
                    ));
                }
                let parsed = match parse_data_payload(record.payload) {
                    Ok(parsed) => parsed,
                    Err(reason) => return corrupt(reason),
                };
                let commit_at = record.end;
                if commit_at >= bytes.len() {
                    scan.damage = Some(Damage {
                        offset: at as u64,
                        reason: format!(
                            "batch {} has a data record but no commit record",
                            BatchId(next_id)
                        ),
                    });
                    return Ok(scan);
                }
                let commit = match read_record(bytes, commit_at) {
                    Ok(commit) => commit,
                    Err(reason) => {
                        scan.damage = Some(Damage {
                            offset: commit_at as u64,
                            reason: format!(
                                "commit record of batch {}: {reason}",
                                BatchId(next_id)
                            ),
                        });
                        return Ok(scan);
                    }
                };
                let commit_corrupt =
                    |reason: String| Err(WalError::corrupt(path, commit_at as u64, reason));
                if commit.header.kind != RecordKind::Commit {
                    return commit_corrupt(format!(
                        "batch {} has a data record followed by a {:?} record, not its commit record",
                        BatchId(next_id),
                        commit.header.kind
                    ));
                }
                if commit.header.batch_id != next_id
                    || commit.payload != commit_payload(at as u64, record.header.crc)
                {
                    return commit_corrupt(format!(
                        "commit record does not match the data record of batch {} before it",
                        BatchId(next_id)
                    ));
                }
                scan.batches.push(BatchMeta {
                    id: BatchId(next_id),
                    position: parsed.position.to_vec(),
                    parts: parsed.parts,
                    segment,
                    offset: at as u64,
                    bytes: (commit.end - at) as u64,
                });
                next_id += 1;
                at = commit.end;
                scan.valid_end = at as u64;
            }
        }
    }
    Ok(scan)
}

/// A record found in a segment, its checksum verified.
struct Record<'a> {
    header: RecordHeader,
    payload: &'a [u8],
    end: usize,
}

/// Read and verify the record at `at`; the error says why it is not a complete, valid record.
fn read_record(bytes: &[u8], at: usize) -> Result<Record<'_>, String> {
    let header = RecordHeader::decode(&bytes[at..])?;
    if u64::from(header.payload_len) > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "record payload length {} is over the limit",
            header.payload_len
        ));
    }
    let start = at + RECORD_HEADER_LEN;
    let end = start + header.payload_len as usize;
    if end > bytes.len() {
        return Err(format!(
            "record payload cut short ({} of {} bytes)",
            bytes.len() - start,
            header.payload_len
        ));
    }
    let payload = &bytes[start..end];
    if let Err(computed) = header.verify(payload) {
        return Err(format!(
            "record checksum mismatch (stored {:#010x}, computed {computed:#010x})",
            header.crc
        ));
    }
    Ok(Record {
        header,
        payload,
        end,
    })
}

/// The offset of the first complete, checksum-valid record that starts after `from`, if any.
/// Used to tell a torn tail (nothing valid follows) from damage inside committed data.
pub fn find_valid_record_after(bytes: &[u8], from: usize) -> Option<usize> {
    let mut search = from.checked_add(1)?;
    while search < bytes.len() {
        let found = memchr::memmem::find(&bytes[search..], &RECORD_MAGIC)?;
        let at = search + found;
        if read_record(bytes, at).is_ok() {
            return Some(at);
        }
        search = at + 1;
    }
    None
}

/// `len` as a u32; every caller has checked it against a limit below 4 GiB.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn read_u16(bytes: &[u8], at: usize) -> u16 {
    let mut buf = [0u8; 2];
    buf.copy_from_slice(&bytes[at..at + 2]);
    u16::from_le_bytes(buf)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut buf = [0u8; 4];
    buf.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(buf)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut buf = [0u8; 8];
    buf.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(buf)
}

/// A bounds-checked reader over a payload.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("{what} runs past the end of the payload"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        self.take(2, what).map(|bytes| read_u16(bytes, 0))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.take(4, what).map(|bytes| read_u32(bytes, 0))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.take(8, what).map(|bytes| read_u64(bytes, 0))
    }
}

#[cfg(test)]
mod tests;
