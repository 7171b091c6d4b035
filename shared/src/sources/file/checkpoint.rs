//! The File source's checkpoint: what was read of each file, and how to tell whether a file is
//! still the one that was read; the watermark below which files left it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::FileFormat;
use crate::sources::SourceError;

/// The newest checkpoint format's version, in its `"v"` field. A checkpoint with a
/// [`Watermark`] or a [`FileProgress::pending`] file is version 2; one with neither is
/// written as version 1, the format skipprd wrote before watermarks (so an older skipprd can
/// still read it). Both are read.
pub const CHECKPOINT_VERSION: u32 = 2;

/// The version of a checkpoint with no watermark and no pending file.
const VERSION_1: u32 = 1;

/// The most leading on-disk bytes of a file hashed as its identity.
pub const IDENTITY_BYTES: u64 = 1024;

/// What the File source has read, per file: the bytes [`Source::checkpoint`] returns, as JSON.
///
/// [`Source::checkpoint`]: crate::sources::Source::checkpoint
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCheckpoint {
    /// The format's version: 2 ([`CHECKPOINT_VERSION`]) with a watermark or a pending file,
    /// else 1.
    pub v: u32,
    /// Per file, keyed by its uri as in [`Position::uri`](crate::sources::Position::uri):
    /// every file read that is still listed, but those that left below the watermark.
    pub files: BTreeMap<String, FileProgress>,
    /// Where files left the checkpoint; `None` until the first one did (version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<Watermark>,
}

/// The File source's watermark: which files left the checkpoint, read to their end (see
/// [Resuming](super#resuming)).
///
/// A listed file with no entry in [`FileCheckpoint::files`] whose path sorts at or below
/// `path` (component by component, as files are listed) and whose status last changed
/// before `changed_before_ms` was read to its end and has not changed since: it is not
/// opened again. One at or below `path` that changed at or after that time appeared or
/// changed after the files there left the checkpoint. Past `path`, the steps of `beyond`
/// say the same of the files up to theirs, each with its own (earlier) time: a pass that
/// stopped before it got through the files below the old watermark leaves its own step in
/// front of the old one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watermark {
    /// The newest path (as in positions) of a file that left the checkpoint in the pass that
    /// set this step.
    pub path: String,
    /// Unix time in milliseconds: the files at or below `path` with no entry were read to
    /// their end, and last changed (status change or modification time, whichever is
    /// later) before it.
    pub changed_before_ms: i64,
    /// Further steps, their paths ascending (all after `path`), their times descending (all
    /// before `changed_before_ms`); usually none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beyond: Vec<WatermarkStep>,
    /// The File source's configured `path` when the files below the watermark were listed.
    pub listed_path: String,
    /// The configured format then; `None` when it was detected per file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<FileFormat>,
}

/// How far one file was read, and what it looked like then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileProgress {
    /// Bytes of the decompressed stream consumed up to the end of the last record (or
    /// deadletter) returned; for Parquet, rows.
    pub offset: u64,
    /// Records consumed, numbering what follows: lines for JSON lines and CSV (blank lines and
    /// the CSV header included), elements, documents or rows for the other formats.
    pub records: u64,
    /// The file's size on disk when it was listed for that read.
    pub size: u64,
    /// How many leading on-disk bytes `head` hashes: `min(size, 1024)`.
    pub head_len: u64,
    /// The FNV-1a 64-bit hash of the first `head_len` bytes, in hex: the file's identity.
    pub head: String,
    /// Whether the file was read to its end.
    pub done: bool,
    /// Whether it was read to its end but a last record still being written (a JSON-lines
    /// line cut off mid-value) was left for the next pass: it keeps its entry. Only written
    /// when true (version 2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

/// Only the version, read before the rest so an unknown version is named as such.
#[derive(Deserialize)]
struct Version {
    v: serde_json::Value,
}

/// A step of a [`Watermark`] after its first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkStep {
    /// The newest path of the files this step covers (those after the previous step's).
    pub path: String,
    /// Unix time in milliseconds, as [`Watermark::changed_before_ms`] for these files.
    pub changed_before_ms: i64,
}

impl Watermark {
    /// The newest path below the watermark: the last step's.
    pub fn top(&self) -> &str {
        self.beyond.last().map_or(&self.path, |step| &step.path)
    }

    /// The time before which a file at `path` last changed if it was read to its end, when
    /// `path` is at or below the watermark.
    pub fn changed_before_ms_at(&self, path: &str) -> Option<i64> {
        let at = std::path::Path::new(path);
        if at <= std::path::Path::new(&self.path) {
            return Some(self.changed_before_ms);
        }
        self.beyond
            .iter()
            .find(|step| at <= std::path::Path::new(&step.path))
            .map(|step| step.changed_before_ms)
    }

    /// Whether the steps are in order: paths ascending, times descending.
    fn in_order(&self) -> bool {
        let mut last = (self.path.as_str(), self.changed_before_ms);
        for step in &self.beyond {
            let path = std::path::Path::new(&step.path);
            if path <= std::path::Path::new(last.0) || step.changed_before_ms >= last.1 {
                return false;
            }
            last = (&step.path, step.changed_before_ms);
        }
        true
    }
}

impl FileCheckpoint {
    /// An empty checkpoint: nothing read yet.
    pub fn new() -> FileCheckpoint {
        FileCheckpoint {
            v: VERSION_1,
            files: BTreeMap::new(),
            watermark: None,
        }
    }

    /// The version a checkpoint of `files` and `watermark` is written as.
    pub(crate) fn version_for(
        files: &BTreeMap<String, FileProgress>,
        watermark: Option<&Watermark>,
    ) -> u32 {
        if watermark.is_some() || files.values().any(|progress| progress.pending) {
            CHECKPOINT_VERSION
        } else {
            VERSION_1
        }
    }

    /// The checkpoint as JSON bytes, its version set by what it holds.
    pub fn to_bytes(&self) -> Vec<u8> {
        let checkpoint = FileCheckpoint {
            v: Self::version_for(&self.files, self.watermark.as_ref()),
            ..self.clone()
        };
        serde_json::to_vec(&checkpoint).unwrap_or_default()
    }

    /// Read checkpoint bytes of the File source reading `path`: version 1 or 2; anything
    /// else is [`SourceError::BadCheckpoint`].
    pub fn from_bytes(bytes: &[u8], path: &str) -> Result<FileCheckpoint, SourceError> {
        let bad = |message: String| SourceError::BadCheckpoint {
            path: path.to_owned(),
            message,
        };
        let version: Version = serde_json::from_slice(bytes).map_err(|error| {
            bad(format!(
                "it is not a File source checkpoint ({})",
                crate::sources::error::lower_first(&error.to_string())
            ))
        })?;
        let known = version
            .v
            .as_u64()
            .filter(|v| (u64::from(VERSION_1)..=u64::from(CHECKPOINT_VERSION)).contains(v));
        if known.is_none() {
            return Err(bad(format!(
                "unknown checkpoint version {} (this skipprd reads versions {VERSION_1} and {CHECKPOINT_VERSION})",
                version.v
            )));
        }
        let checkpoint: FileCheckpoint = serde_json::from_slice(bytes).map_err(|error| {
            bad(format!(
                "it is corrupt ({})",
                crate::sources::error::lower_first(&error.to_string())
            ))
        })?;
        let expected = Self::version_for(&checkpoint.files, checkpoint.watermark.as_ref());
        if checkpoint.v != expected {
            return Err(bad(format!(
                "it is corrupt (a version {} checkpoint {})",
                checkpoint.v,
                if expected == VERSION_1 {
                    "without a watermark or a pending file"
                } else {
                    "with a watermark or a pending file"
                }
            )));
        }
        if checkpoint
            .watermark
            .as_ref()
            .is_some_and(|mark| !mark.in_order())
        {
            return Err(bad(
                "it is corrupt (the watermark's steps are out of order)".to_owned(),
            ));
        }
        Ok(checkpoint)
    }
}

/// A file's identity as found now: its leading bytes' length and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) len: u64,
    pub(crate) hash: String,
}

impl Head {
    /// The identity of a file of `size` bytes starting with `head` (at least its first
    /// [`IDENTITY_BYTES`] bytes, or all of it).
    pub(crate) fn of(size: u64, head: &[u8]) -> Head {
        let len = size.min(IDENTITY_BYTES).min(head.len() as u64);
        Head {
            len,
            hash: fnv1a_hex(&head[..len as usize]),
        }
    }
}

/// The FNV-1a 64-bit offset basis: the hash of nothing.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// One more byte into an FNV-1a 64-bit hash.
fn fnv1a_step(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// The FNV-1a 64-bit hash of `bytes`, as 16 hex digits.
pub(crate) fn fnv1a_hex(bytes: &[u8]) -> String {
    let hash = bytes
        .iter()
        .fold(FNV_OFFSET, |hash, &byte| fnv1a_step(hash, byte));
    format!("{hash:016x}")
}

/// A checkpoint's entries by identity, to find the entries a file's first bytes match
/// without hashing them once per entry.
pub(crate) struct HeadIndex<'a> {
    /// The identities' lengths, ascending, each once.
    lens: Vec<u64>,
    /// The keys of the entries, by identity length and hash.
    keys: std::collections::HashMap<(u64, u64), Vec<&'a str>>,
}

impl<'a> HeadIndex<'a> {
    /// The index of `files`.
    pub(crate) fn new(files: &'a BTreeMap<String, FileProgress>) -> HeadIndex<'a> {
        let mut keys: std::collections::HashMap<(u64, u64), Vec<&'a str>> = Default::default();
        for (key, progress) in files {
            // A head that is no hash matches nothing, as it would compare.
            if let Ok(hash) = u64::from_str_radix(&progress.head, 16)
                && progress.head.len() == 16
            {
                keys.entry((progress.head_len, hash)).or_default().push(key);
            }
        }
        let mut lens: Vec<u64> = keys.keys().map(|(len, _)| *len).collect();
        lens.sort_unstable();
        lens.dedup();
        HeadIndex { lens, keys }
    }

    /// The keys of the entries whose identity a file starting with `head` has (its first
    /// [`IDENTITY_BYTES`] bytes or more, or all of it), in key order.
    pub(crate) fn matching(&self, head: &[u8]) -> Vec<&'a str> {
        let mut found = Vec::new();
        let mut hash = FNV_OFFSET;
        let mut hashed = 0usize;
        for &len in &self.lens {
            let Some(prefix) = usize::try_from(len)
                .ok()
                .and_then(|len| head.get(hashed..len))
            else {
                break;
            };
            hash = prefix
                .iter()
                .fold(hash, |hash, &byte| fnv1a_step(hash, byte));
            hashed += prefix.len();
            if let Some(keys) = self.keys.get(&(len, hash)) {
                found.extend(keys.iter().copied());
            }
        }
        found.sort_unstable();
        found
    }
}

/// How a listed file compares with what a checkpoint says was read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Not in the checkpoint.
    New,
    /// Not in the checkpoint, at or below its watermark, and changed (or appeared) after the
    /// files there left it: read from the start, with a warning.
    Late,
    /// The same file, the same size, read to its end: nothing to read.
    Unchanged,
    /// The same file, read to its end, grown since.
    Grown,
    /// The same file, not read to its end, no smaller.
    Unfinished,
    /// Smaller than when it was read: a different file now.
    Shrunk,
    /// Its leading bytes differ: a different file now.
    Replaced,
}

impl FileProgress {
    /// How a file of `size` bytes starting with `head` (its first [`IDENTITY_BYTES`] bytes or
    /// more, or all of it) compares with this progress.
    pub(crate) fn compare(&self, size: u64, head: &[u8]) -> Identity {
        if size < self.size || (head.len() as u64) < self.head_len {
            return Identity::Shrunk;
        }
        if fnv1a_hex(&head[..self.head_len as usize]) != self.head {
            return Identity::Replaced;
        }
        match (self.done, size == self.size) {
            (true, true) => Identity::Unchanged,
            (true, false) => Identity::Grown,
            (false, _) => Identity::Unfinished,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(size: u64, head: &[u8], done: bool) -> FileProgress {
        let id = Head::of(size, head);
        FileProgress {
            offset: size,
            records: 1,
            size,
            head_len: id.len,
            head: id.hash,
            done,
            pending: false,
        }
    }

    #[test]
    fn the_head_index_finds_the_entries_a_files_first_bytes_match() {
        let mut files = BTreeMap::new();
        files.insert("b".to_owned(), progress(6, b"abcdef", true));
        files.insert("a".to_owned(), progress(6, b"abcdef", false));
        files.insert("c".to_owned(), progress(3, b"abc", true));
        files.insert("d".to_owned(), progress(4, b"xbcd", true));
        let mut corrupt = progress(3, b"abc", true);
        corrupt.head = "not a hash".into();
        files.insert("e".to_owned(), corrupt);
        let index = HeadIndex::new(&files);
        assert_eq!(index.matching(b"abcdefgh"), vec!["a", "b", "c"]);
        assert_eq!(index.matching(b"abcd"), vec!["c"]);
        assert_eq!(index.matching(b"ab"), Vec::<&str>::new());
        assert_eq!(index.matching(b"xbcd"), vec!["d"]);
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a_hex(b""), "cbf29ce484222325");
        assert_eq!(fnv1a_hex(b"a"), "af63dc4c8601ec8c");
        assert_eq!(fnv1a_hex(b"foobar"), "85944171f73967e8");
    }

    #[test]
    fn a_file_compares_by_its_head_size_and_whether_it_was_finished() {
        let old = progress(6, b"abcdef", true);
        assert_eq!(old.compare(6, b"abcdef"), Identity::Unchanged);
        assert_eq!(old.compare(8, b"abcdefgh"), Identity::Grown);
        assert_eq!(old.compare(4, b"abcd"), Identity::Shrunk);
        assert_eq!(old.compare(6, b"abcdeX"), Identity::Replaced);
        assert_eq!(old.compare(9, b"Xbcdefghi"), Identity::Replaced);
        let unfinished = progress(6, b"abcdef", false);
        assert_eq!(unfinished.compare(6, b"abcdef"), Identity::Unfinished);
        assert_eq!(unfinished.compare(7, b"abcdefg"), Identity::Unfinished);
        // Only the first 1024 bytes are the identity.
        let long = vec![b'x'; 3000];
        let old = progress(3000, &long, true);
        assert_eq!(old.head_len, 1024);
        let mut changed = long.clone();
        changed[2000] = b'y';
        assert_eq!(old.compare(3000, &changed), Identity::Unchanged);
        changed[1000] = b'y';
        assert_eq!(old.compare(3000, &changed), Identity::Replaced);
    }

    #[test]
    fn a_checkpoint_round_trips_through_its_json_bytes() {
        let mut checkpoint = FileCheckpoint::new();
        checkpoint
            .files
            .insert("d/a.jsonl".into(), progress(6, b"abcdef", true));
        let bytes = checkpoint.to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"v":1,"files":{"d/a.jsonl":{"offset":6,"#),
            "{text}"
        );
        assert_eq!(FileCheckpoint::from_bytes(&bytes, "d").unwrap(), checkpoint);
    }

    #[test]
    fn corrupt_or_unknown_checkpoints_are_bad_checkpoints_naming_the_source() {
        for (bytes, message) in [
            (
                &b"not json"[..],
                "cannot resume `d/*.jsonl` from its checkpoint: it is not a File source checkpoint (expected ident at line 1 column 2)",
            ),
            (
                br#"{"v":3,"files":{}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: unknown checkpoint version 3 (this skipprd reads versions 1 and 2)",
            ),
            (
                br#"{"v":2,"files":{}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: it is corrupt (a version 2 checkpoint without a watermark or a pending file)",
            ),
            (
                br#"{"v":1,"files":{},"watermark":{"path":"d/a","changed_before_ms":1,"listed_path":"d"}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: it is corrupt (a version 1 checkpoint with a watermark or a pending file)",
            ),
            (
                br#"{"v":2,"files":{},"watermark":{"path":"d/b","changed_before_ms":5,"beyond":[{"path":"d/a","changed_before_ms":4}],"listed_path":"d"}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: it is corrupt (the watermark's steps are out of order)",
            ),
            (
                br#"{"v":1,"files":{"a":{"offset":"x"}}}"#,
                "cannot resume `d/*.jsonl` from its checkpoint: it is corrupt (invalid type: string \"x\", expected u64 at line 1 column 33)",
            ),
        ] {
            let error = FileCheckpoint::from_bytes(bytes, "d/*.jsonl").unwrap_err();
            assert!(
                matches!(error, SourceError::BadCheckpoint { .. }),
                "{error}"
            );
            assert_eq!(error.to_string(), message);
            assert!(!error.is_retryable());
            assert_eq!(error.path(), "d/*.jsonl");
        }
    }
}
