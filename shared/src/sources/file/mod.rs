//! The File source: JSON lines, JSON arrays, JSON documents, CSV and Parquet files, plain or
//! gzipped, from one file, a directory tree or a glob.
//!
//! # Which files
//!
//! [`FileSourceOptions::path`] is resolved against [`FileSourceOptions::base_dir`] when
//! relative, then read as:
//!
//! - a **file**: read as is; if its format cannot be told, opening fails with
//!   [`SourceError::UnknownFormat`];
//! - a **directory**: every regular file below it, recursively, except hidden ones (names
//!   starting with `.`, and everything in hidden directories); links to files are followed,
//!   links to directories are not;
//! - a **glob** (`data/*.jsonl`, `logs/**/*.csv.gz`) when no file of that name exists: `*`,
//!   `?` and `[...]` match within one path component, `**` any number of them; none of them
//!   matches a hidden name.
//!
//! Nothing at or below an entry of [`FileSourceOptions::exclude`] is ever listed, so `path: .`
//! does not read the pipeline's own data directory: a directory walk does not descend into an
//! excluded directory, a glob's matches under one are dropped, and a named file that is
//! excluded (or lies in an excluded directory) is not read. Relative entries are resolved
//! against the base directory; paths are compared with symbolic links resolved where they
//! exist, with `.` and `..` folded lexically where they do not yet.
//!
//! Files found in a directory or by a glob whose format cannot be told are skipped with a
//! warning, as are paths found that are no file to read (a symbolic link to nothing, a FIFO,
//! a socket or a device; in a directory, a link to a directory, which is not followed). A gzip file whose stream cannot be decoded far enough to sniff it is reported as
//! such: [`SourceError::CorruptGzip`] when named directly, a warning and skipped when found.
//! The list is sorted by path (component by component), so reading order is deterministic.
//! Nothing found is [`SourceError::NoFiles`], or [`SourceError::Excluded`] when what the path
//! names is all under an excluded directory (the pipeline's data directory); a missing literal
//! path is
//! [`SourceError::NotFound`]; an empty one [`SourceError::EmptyPath`]; a malformed glob is
//! [`SourceError::BadPattern`].
//!
//! # Formats and their detection
//!
//! [`detect_format`] decides, unless [`FileSourceOptions::format`] names the format (the
//! compression is still detected). Content beats the name: the gzip magic bytes `1f 8b` mean
//! gzip and `PAR1` means Parquet whatever the extension. Then the extension, after any `.gz` or
//! `.gzip`:
//!
//! | extension | format |
//! |---|---|
//! | `.jsonl`, `.ndjson` | JSON lines |
//! | `.json` | JSON, by its first non-whitespace byte (below); JSON lines when neither |
//! | `.csv` | CSV with a header row |
//! | `.parquet`, `.pq` | Parquet (not gzipped: [`SourceError::UnsupportedCompression`]) |
//! | anything else | JSON, by its first non-whitespace byte; else unknown |
//!
//! JSON content starting with `[` is a JSON array. Content starting with `{` is JSON lines
//! when its first line is a complete JSON value with nothing but whitespace after it, and JSON
//! documents otherwise (a pretty-printed object, or objects run together on a line); the first
//! line is read to its end for this, up to [`FileSourceOptions::max_record_bytes`] (a longer
//! one means JSON lines).
//!
//! [`FileFormat::Json`] as the configured format detects only among these JSON shapes, whatever
//! the name (a `.csv` file holding JSON is read as JSON). Content that starts with neither `{`
//! nor `[` is [`SourceError::NotJson`] for a named file; a file found in a directory or by a
//! glob is skipped with a warning. A file holding only whitespace reads as empty.
//! [`FileSource::formats`] reports the shape each file is read as, never `Json`.
//!
//! Reading streams through a 1 MiB buffer over the file (or over a gzip decoder, which accepts
//! concatenated members): memory stays bounded by the batch size plus one record, whatever the
//! file size. A leading UTF-8 byte-order mark is skipped in the text formats.
//!
//! - **JSON lines**: split on `\n`; a trailing `\r` is dropped and blank lines are skipped.
//! - **JSON arrays**: a scanner finds each top-level element (tracking nesting, strings and
//!   escapes) and parses it alone, so a 10 GB array costs no more memory than its largest
//!   element. A file that ends inside an element gives a deadletter for that element; a
//!   trailing comma is ignored with a warning; data after the closing `]` is a deadletter.
//! - **JSON documents**: values separated by optional whitespace, each an object to be a
//!   record. A scanner like the arrays' finds where each top-level document ends by its
//!   brackets and parses it alone, bounded by [`FileSourceOptions::max_record_bytes`]. So a
//!   malformed document whose brackets balance costs one deadletter and reading resumes after
//!   it; one whose brackets do not balance runs to the end of the file and is one deadletter
//!   (the file ends inside it). Top-level scalars (`42`, `"s"`) are deadletters each.
//! - **CSV**: the first row names the columns (empty names become `column_<n>`, repeated ones
//!   `name_2`, `name_3`, with a warning); quoted fields may hold commas, quotes and newlines;
//!   blank lines are skipped. Cells are typed (see [`type_cell`]):
//!   - empty → `null`;
//!   - `true`/`false`, in any case → boolean;
//!   - a canonical integer (optional `-`, no leading zeros unless exactly `0`, fits `i64`) →
//!     integer;
//!   - a canonical decimal (`-?\d+\.\d+`, optionally with an exponent, or digits with an
//!     exponent; no leading zeros) → float;
//!   - anything else stays a string, so `007`, `12,5`, `+1`, `.5` and ` 42` are strings.
//! - **Parquet**: read in Arrow batches and converted row by row, at any depth: structs and
//!   maps become objects, lists arrays, nulls explicit `null`s;
//!   - timestamps, of any unit and time zone, become integer Unix epoch **milliseconds**
//!     (rounded down), so the type survives: skipprd's inference types integers in the
//!     2010-2040 range as `timestamp_ms`;
//!   - dates (`Date32`, `Date64`) become `"YYYY-MM-DD"` strings;
//!   - decimals become JSON numbers (the nearest `f64`; `null` beyond its range);
//!   - binary values become lower-case hex strings (`"dead"` for the bytes `de ad`).
//!
//! # Positions
//!
//! Every record carries a [`Position`]: `uri` is the file as listed (relative to the base
//! directory when the configured path was relative), `record` its 1-based line number (JSON
//! lines; for CSV the line the row starts on, the header being line 1), element number (JSON
//! arrays), document number (JSON documents) or row number (Parquet), and `offset` the byte
//! just after the record in the decompressed stream: after its `\n` for JSON lines; for CSV
//! the CSV parser's position after the row (after its terminator; with `\r\n` endings after
//! the `\r`, the `\n` then reading as a blank line); after the element's last byte for JSON
//! arrays (a resumed reader expects `,` or `]` next); after the document's last byte for JSON
//! documents; and for Parquet the 0-based index of the next row. Skipping `offset`
//! bytes (rows) of a file, after the header for CSV, resumes right after the record.
//!
//! # Deadletters
//!
//! A record that does not parse never stops reading: it becomes a [`Deadletter`] in the batch
//! with the file, the line/element/document number, the offset of the record's *first* byte, the raw
//! text (clipped) and the parser's message:
//!
//! - [`FailureCode::Malformed`]: bad JSON, a CSV row with the wrong number of fields or invalid
//!   UTF-8, an element or document cut off by the end of the file;
//! - [`FailureCode::NotAnObject`]: valid JSON that is not an object (`42`, `[1]`);
//! - [`FailureCode::TooLarge`]: a record longer than [`FileSourceOptions::max_record_bytes`]
//!   (only a prefix is ever held), or a JSON record whose values would take more than
//!   [`FileSourceOptions::max_record_memory`] once parsed, estimated from its text before
//!   parsing (its number of values, each taken at 128 bytes, plus its length). An over-long
//!   CSV record is stepped over in a second stream of the file by the CSV state machine alone
//!   (a few kilobytes whatever its length) and reading goes on after it; one that runs to the
//!   end of the file (an unclosed quote) ends it, and rows appended later are read from there.
//!   An over-long header row ends reading of that file.
//!
//! # Errors
//!
//! A [`SourceError`] names the file: a file that disappeared after opening
//! ([`SourceError::Vanished`]), an I/O failure such as a permission error
//! ([`SourceError::Io`], retryable when transient), a corrupt or truncated gzip stream
//! ([`SourceError::CorruptGzip`]) or an unreadable Parquet file ([`SourceError::Parquet`]).
//! Records read before the error are returned first; the error comes on the next call. After
//! an error, the source moves on to the next file if called again.
//!
//! # Batches
//!
//! A batch closes at [`FileSourceOptions::batch_rows`] records and deadletters together, or
//! once [`FileSourceOptions::batch_bytes`] input bytes were consumed, whichever comes first; a
//! batch may span files. Input bytes are bytes on disk: exact for plain text files, counted at
//! the read granularity for gzip, estimated from the row count for Parquet; over a full read
//! they add up to the files' sizes at opening.
//!
//! # Resuming
//!
//! [`Source::checkpoint`] returns, after each batch, a [`FileCheckpoint`] as JSON
//! (`{"v":1,"files":{...}}`, version 2 with a [watermark](self#the-watermark)): per file, keyed
//! by its uri as in positions, the `offset` just
//! after the last record or deadletter returned (decompressed bytes; rows for Parquet), the
//! `records` consumed (lines for JSON lines and CSV, blank lines and the CSV header included,
//! so numbering goes on), the file's `size` when listed, its identity (`head`, the FNV-1a
//! 64-bit hash of its first `head_len = min(size, 1024)` bytes on disk) and whether it was
//! read to its end (`done`; `pending` when a last JSON line still being written was left for
//! the next pass). [`FileSource::open_at`] reads only what comes after such a checkpoint,
//! file by file:
//!
//! - a file not in the checkpoint is read from the start (below the watermark, see
//!   [there](self#the-watermark));
//! - the same file (the same first `head_len` bytes), the same size, read to its end: skipped
//!   without being opened beyond those bytes;
//! - the same file, grown, in JSON lines or CSV (gzipped or not): read on from `offset`, lines
//!   numbered on from `records`. A CSV file's header is read again from its start. A gzipped
//!   file is decompressed from its start and the first `offset` bytes dropped, so an appended
//!   gzip member is read;
//! - the same file, not read to its end (a batch ended in it, or reading it failed): read on
//!   from `offset` (Parquet: `records` rows skipped), whatever its format and size;
//! - the same file, grown, in a whole-document format (JSON array, JSON documents, Parquet),
//!   after it was read to its end: a warning (`` `p` changed after it was read; whole-document
//!   formats are not re-read ``), and skipped; the checkpoint takes its new size, so the
//!   warning comes once per change;
//! - a file smaller than when it was read, or whose first bytes changed, is a different file
//!   now (rotated by copy-truncate, or rewritten): a warning naming it, and read from the
//!   start. So is a file whose decompressed stream turns out shorter than `offset`;
//! - a path not in the checkpoint whose content starts with the first bytes of a checkpoint
//!   file that is no longer at its own path (gone, or replaced by another file) is that file
//!   renamed (log rotation by rename: `app.jsonl` -> `app.1.jsonl`, new `app.jsonl`): it keeps
//!   its progress under the new name and is read on from there, not again;
//! - a file in the checkpoint that is no longer listed is dropped from it (a debug message).
//!
//! Bytes are not compared beyond the first 1024: a file rewritten in place with the same
//! size and the same first 1024 bytes counts as unchanged. A last JSON-lines line without its
//! `\n` whose JSON stops mid-value is a record still being written: it is left for the next
//! pass (the file stays unfinished before it), which reads it whole once the writer is done.
//! A last line without `\n` that is complete, or malformed in any other way, is read (or
//! rejected) as it is. A file whose reading failed (an I/O error, a corrupt gzip stream) is left
//! not done at the last item returned (one that could not be opened at all, at its start), so
//! the next pass tries it again; a file that vanished before it could be read is dropped.
//!
//! A pass with nothing new is cheap: files are listed and stat-ed, and only their first 8 KiB
//! (the format sniffing buffer, of which 1 KiB is hashed) are read, with no format detection
//! for unchanged ones (5,000 unchanged files: about 40 ms, warm cache); files below the
//! watermark are only stat-ed. Progress counts only what is left: `bytes_total` leaves out
//! unchanged files and the part of resumed plain files already read (resumed gzip and Parquet
//! files are corrected once their reader is open).
//!
//! # The watermark
//!
//! An entry takes about 110 bytes plus its path, so a checkpoint with one per file grows with
//! the input: 100,000 files of 20-character paths make 11 MB, past DynamoDB's 400 KB item and
//! the WAL's 1 MiB position (and each batch writes it whole). So the entries are kept under
//! [`FileSourceOptions::checkpoint_bytes`] (32 KiB, some 250 files); past that, files read to
//! their end leave the checkpoint below a **watermark** (a [`Watermark`]; the same 100,000
//! files: 32 KB, and a pass with nothing new stats them, 0.5 s against 3.3 s). In a
//! directory whose entries fit, nothing leaves and every rule above holds for every file.
//!
//! - **Which entries leave**: only those of files read to their end with nothing pending,
//!   whose last change (status-change or modification time, whichever is later; for a
//!   symbolic link the link's too) is at least 2 seconds before the pass started, still as
//!   listed when they leave, and only once the pass has handled every file sorting before
//!   them. Files not read to their end, that failed, or whose last line is still being written
//!   keep their entries. Files unchanged for [`FileSourceOptions::settle`] (`settle_secs`,
//!   default one hour) leave first, oldest path first; files changed more recently only when
//!   that is not enough, oldest path first again. So the newest files, and files still being
//!   appended to, keep their entries.
//! - **The watermark** is the newest path that left, with a time: the start of the pass that
//!   let it leave, less 2 seconds. A listed file with no entry, at or below that path
//!   (compared component by component, as files are listed) and last changed before that
//!   time, was read to its end and has not changed since: it is not opened.
//! - **A late file**, new at a path at or below the watermark (a day's log delivered late, a
//!   file moved in), was created or renamed into place after that time: it is read from the
//!   start, with a warning naming it (`` `p` sorts at or below the checkpoint's watermark `w`
//!   but appeared or changed after the files there were read ``; the first 10 of a pass by
//!   name, the rest counted). Files may arrive in any order: nothing is lost.
//! - **A file that changed after its entry left** (appended to, rewritten, `touch`ed,
//!   `chmod`ed) is the same to the watermark: where it was left is gone with its entry, so it
//!   is read again from the start with the same warning. Nothing is lost; its old records
//!   come twice. That is why files leave only once read to their end, unchanged ones first:
//!   set `settle_secs` above the longest pause of files still appended to. More files still
//!   growing than fit the budget (one file per device, each appended to now and then) is
//!   more than a bounded checkpoint can follow: those that leave are read again when they
//!   grow, with the warning.
//! - **A file renamed** while it has an entry (the log being written, rotated) keeps its
//!   progress as above, whatever its new path. One whose entry had left is read again: with
//!   the warning when its new path is at or below the watermark, as a new file above it.
//! - **Settings**: a pass whose `path` is not the one the watermark was set with reads the
//!   files at or below it that the old one did not surely list (a glob matching them, the
//!   file or a directory above it), with a warning; when `format` changed, the files the old
//!   setting skipped for their format are read. In a pass whose glob could not read a
//!   directory (a warning) no entry leaves and the watermark stays as it was: files it did
//!   not see might sort below it.
//! - **A pass stopped** before it got through the files at or below the old watermark (a
//!   deadline) puts a step in front of it: files up to the newest that left in this pass are
//!   judged by its time, the others by the old time, so late files it did not reach are
//!   still late. At most 8 steps are kept; past that the first two merge under the earlier
//!   time (files of the first may then count as late and be read again, never as read).
//! - **Files just written** (within 2 seconds of the pass) cannot leave in that pass: a
//!   listing that finds more of them than fit the budget (a directory copied just before)
//!   waits until they are older, at most a little over 2 seconds, and lists again.
//! - **Clocks**: a status-change time is stamped by the file system's clock, the watermark's
//!   time by the host's. They must agree within 2 seconds (mind network file systems), and
//!   the host's clock must not step back by more: a late file stamped before the watermark's
//!   time would be taken as read. Creating, writing and renaming a file set its status-change
//!   time on the file systems of Linux and macOS.
//!
//! A checkpoint with neither a watermark nor a pending file is written as version 1, which an
//! older skipprd reads; version 2 only by this one. Both are read.
//!
//! [`Deadletter`]: crate::deadletter::Deadletter
//! [`FailureCode::Malformed`]: crate::deadletter::FailureCode::Malformed
//! [`FailureCode::NotAnObject`]: crate::deadletter::FailureCode::NotAnObject
//! [`FailureCode::TooLarge`]: crate::deadletter::FailureCode::TooLarge
//! [`Position`]: crate::sources::Position

mod batch;
mod checkpoint;
mod compression;
mod csv;
mod detect;
mod json_array;
mod json_documents;
mod jsonl;
mod lenient;
mod parquet;
mod paths;
mod reader;
#[cfg(test)]
pub(crate) mod resume_tests;
mod watermark;
#[cfg(test)]
mod watermark_tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use self::batch::{Batcher, Inputs};
pub use self::checkpoint::{
    CHECKPOINT_VERSION, FileCheckpoint, FileProgress, IDENTITY_BYTES, Watermark, WatermarkStep,
};
use self::checkpoint::{HeadIndex, Identity};
pub use self::compression::Compression;
pub(crate) use self::compression::InputStream;
pub use self::csv::type_cell;
pub use self::detect::detect_format;
pub(crate) use self::detect::{HEAD_BYTES, detect_in_head};
pub use self::lenient::Leniency;
pub(crate) use self::parquet::ParquetReader;
use self::paths::ListedFile;
pub(crate) use self::reader::{FileContext, Item, RecordReader, Resume};
pub(crate) use self::reader::{parse_json_object, raw_text};
use self::watermark::{Clock, Entries, Tracker};
use super::{Progress, Source, SourceBatch, SourceError};

/// A file format the File source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// JSON: an array, JSON lines or concatenated documents, detected from the content of
    /// each file whatever its name. Only ever configured: files are listed with the shape
    /// detected.
    Json,
    /// One JSON object per line (`.jsonl`, `.ndjson`, `.json` whose first line is a complete
    /// object).
    Jsonl,
    /// One JSON array of objects (`.json` starting with `[`).
    JsonArray,
    /// JSON documents separated by optional whitespace: one pretty-printed object, several,
    /// or objects run together (`.json` starting with `{` whose first line is not a complete
    /// object).
    JsonDocuments,
    /// CSV with a header row (`.csv`).
    Csv,
    /// Apache Parquet (`.parquet`, `.pq`).
    Parquet,
}

impl FileFormat {
    /// Whether a file of this format that grew can be read on from where reading stopped:
    /// true for JSON lines and CSV, false for the whole-document formats.
    pub fn appends(self) -> bool {
        matches!(self, FileFormat::Jsonl | FileFormat::Csv)
    }

    /// The format's name as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            FileFormat::Json => "json",
            FileFormat::Jsonl => "jsonl",
            FileFormat::JsonArray => "json_array",
            FileFormat::JsonDocuments => "json_documents",
            FileFormat::Csv => "csv",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// What the File source reads and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSourceOptions {
    /// A file, a directory (all regular, non-hidden files below it, recursively) or a glob
    /// (`data/*.jsonl`, `logs/**/*.csv`).
    pub path: String,
    /// The format of every file; `None` detects it per file, [`FileFormat::Json`] detects
    /// only which JSON shape.
    pub format: Option<FileFormat>,
    /// The directory a relative `path` is resolved against (the config file's directory).
    pub base_dir: PathBuf,
    /// Directories and files never read, such as the pipeline's own data directory: nothing
    /// at or below them is listed, whatever `path` says. Relative entries are resolved
    /// against `base_dir`; paths are compared after resolving symbolic links where they
    /// exist, lexically (`.` and `..` folded) where they do not yet. Empty entries are
    /// ignored. Empty by default.
    pub exclude: Vec<PathBuf>,
    /// A batch closes at this many records and deadletters (at least 1).
    pub batch_rows: usize,
    /// ... or once this many input bytes were consumed, whichever comes first.
    pub batch_bytes: u64,
    /// ... or once the batch has been filling this long (`None`: no time limit).
    pub batch_time: Option<Duration>,
    /// A longer record becomes a [`FailureCode::TooLarge`](crate::deadletter::FailureCode)
    /// deadletter.
    pub max_record_bytes: usize,
    /// A JSON record whose parsed values would take more memory than this, as estimated
    /// from its text (see [`FileSourceOptions::DEFAULT_MAX_RECORD_MEMORY`]), becomes a
    /// [`FailureCode::TooLarge`](crate::deadletter::FailureCode) deadletter before it is
    /// parsed.
    pub max_record_memory: u64,
    /// Hand JSON-lines records out unparsed, in
    /// [`SourceRecord::unparsed`](crate::sources::SourceRecord::unparsed), for a caller that
    /// types them from their text itself (and calls [`SourceBatch::parse_unparsed`] for the
    /// ones it does not). Other formats are parsed as always. Off by default.
    pub unparsed_json_lines: bool,
    /// The lenient JSON readings a record that is not strict JSON gets
    /// (`enable_single_quote_parsing`, `enable_unicode_parsing`; see [`Leniency`]).
    pub leniency: Leniency,
    /// Once the checkpoint's entries take more than [`FileSourceOptions::checkpoint_bytes`],
    /// files read to their end and unchanged for this long leave it first (below the
    /// watermark), before files changed more recently: see [the watermark](self#the-watermark).
    pub settle: Duration,
    /// The bytes the checkpoint's per-file entries are kept under, as far as files read to
    /// their end can leave it (see [the watermark](self#the-watermark)).
    pub checkpoint_bytes: usize,
}

impl FileSourceOptions {
    /// The default number of records in a batch.
    pub const DEFAULT_BATCH_ROWS: usize = 10_000;
    /// The default number of input bytes in a batch: 10 MB (decimal, like the product's
    /// buffer threshold default).
    pub const DEFAULT_BATCH_BYTES: u64 = 10_000_000;
    /// The default maximum record size: 16 MiB.
    pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;
    /// The default memory a record may take parsed: 128 MiB. JSON text expands when parsed,
    /// by up to some 60 times for small values (`[0,0,0,...]`: 2 bytes of text, about 115
    /// bytes as a value, measured), so the byte limit alone does not bound memory; a 16 MiB
    /// record of long strings stays well under this, one of a million tiny values does not.
    pub const DEFAULT_MAX_RECORD_MEMORY: u64 = 128 * 1024 * 1024;
    /// The default settle time: one hour.
    pub const DEFAULT_SETTLE: Duration = Duration::from_secs(3600);
    /// The default budget of the checkpoint's entries: 32 KiB (about 250 files with paths of
    /// 20 characters).
    pub const DEFAULT_CHECKPOINT_BYTES: usize = 32 * 1024;
}

impl Default for FileSourceOptions {
    fn default() -> Self {
        FileSourceOptions {
            path: String::new(),
            format: None,
            base_dir: PathBuf::from("."),
            exclude: Vec::new(),
            batch_rows: Self::DEFAULT_BATCH_ROWS,
            batch_bytes: Self::DEFAULT_BATCH_BYTES,
            batch_time: None,
            max_record_bytes: Self::DEFAULT_MAX_RECORD_BYTES,
            max_record_memory: Self::DEFAULT_MAX_RECORD_MEMORY,
            unparsed_json_lines: false,
            leniency: Leniency::default(),
            settle: Self::DEFAULT_SETTLE,
            checkpoint_bytes: Self::DEFAULT_CHECKPOINT_BYTES,
        }
    }
}

/// Whether the file `progress` describes is still at `path` (same first bytes, not smaller).
fn still_there(path: &Path, progress: &FileProgress) -> bool {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(size) = file.metadata().map(|m| m.len()) else {
        return false;
    };
    let mut head = Vec::new();
    if file.take(progress.head_len).read_to_end(&mut head).is_err() {
        return false;
    }
    matches!(
        progress.compare(size, &head),
        Identity::Unchanged | Identity::Grown | Identity::Unfinished
    )
}

/// Reads records from files; see the [module documentation](self).
pub struct FileSource {
    inputs: FileInputs,
    batcher: Batcher,
}

/// The files a [`FileSource`] reads, and what it has read of them.
struct FileInputs {
    options: FileSourceOptions,
    files: Vec<ListedFile>,
    /// Where to start each file.
    starts: Vec<Resume>,
    /// Input bytes of each file taken as read already when counting the total: an estimate
    /// of where its reader starts, corrected once it is open.
    skipped: Vec<u64>,
    /// What has been read of each file, and the watermark, for [`Source::checkpoint`].
    read: Tracker,
    /// Per file, whether it ended with a record still being written, left for the next pass.
    held_back: Vec<bool>,
    paths: Vec<PathBuf>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("path", &self.inputs.options.path)
            .field("files", &self.inputs.paths)
            .field("next_file", &self.batcher.next_input())
            .field("progress", &self.progress())
            .finish_non_exhaustive()
    }
}

impl FileSource {
    /// List the files `options.path` names and check their formats; nothing is read yet
    /// beyond each file's first few KiB. The same as [`FileSource::open_at`] with no
    /// checkpoint.
    pub fn open(options: FileSourceOptions) -> Result<FileSource, SourceError> {
        Self::open_at(options, None)
    }

    /// Like [`FileSource::open`], reading only what comes after `checkpoint` (bytes from
    /// [`Source::checkpoint`]): see [Resuming](self#resuming) for the rules. A checkpoint
    /// that cannot be read is [`SourceError::BadCheckpoint`].
    pub fn open_at(
        options: FileSourceOptions,
        checkpoint: Option<&[u8]>,
    ) -> Result<FileSource, SourceError> {
        Self::open_with_clock(options, checkpoint, Clock::system())
    }

    /// [`FileSource::open_at`] with the pass's clock given.
    pub(crate) fn open_with_clock(
        options: FileSourceOptions,
        checkpoint: Option<&[u8]>,
        clock: Clock,
    ) -> Result<FileSource, SourceError> {
        let mut old = match checkpoint {
            Some(bytes) => FileCheckpoint::from_bytes(bytes, &options.path)?,
            None => FileCheckpoint::new(),
        };
        let mark = old.watermark.take();
        if let Some(mark) = &mark {
            watermark::warn_if_listing_changed(mark, &options);
        }
        // A file is known by its path, or, when its path is new, by its content: a file of
        // the checkpoint that is no longer at its path (gone, or replaced by another file)
        // and whose first bytes match was renamed (log rotation by rename); it carries its
        // progress to the new name instead of being read again.
        let renamed: std::cell::RefCell<BTreeMap<String, String>> = Default::default();
        let heads = HeadIndex::new(&old.files);
        let below = |shown: &str, changed_ms: i64| {
            watermark::below(&old.files, mark.as_ref(), &options, shown, changed_ms)
        };
        // Files just written cannot leave the checkpoint in this pass; when many are, the
        // listing waits for them to settle first.
        let clock = std::cell::Cell::new(clock);
        let settle =
            |found: &[PathBuf]| watermark::wait_for_fresh(found, &clock, options.checkpoint_bytes);
        let compare = |shown: &str, size: u64, head: &[u8]| {
            if let Some(progress) = old.files.get(shown) {
                return progress.compare(size, head);
            }
            let mut renamed = renamed.borrow_mut();
            let moved = heads.matching(head).into_iter().find_map(|was| {
                let progress = old.files.get(was)?;
                let found = matches!(
                    progress.compare(size, head),
                    Identity::Unchanged | Identity::Grown | Identity::Unfinished
                ) && !renamed.values().any(|taken| taken == was)
                    && !still_there(&options.base_dir.join(was), progress);
                found.then_some((was, progress))
            });
            match moved {
                Some((was, progress)) => {
                    tracing::info!(
                        file = shown,
                        was,
                        "`{shown}` is `{was}` renamed: reading on where it was left"
                    );
                    let identity = progress.compare(size, head);
                    renamed.insert(shown.to_owned(), was.to_owned());
                    identity
                }
                None => Identity::New,
            }
        };
        let hooks = paths::Hooks {
            settle: &settle,
            below: &below,
            compare: &compare,
        };
        let listing = paths::list_files_since(&options, &hooks)?;
        let clock = clock.get();
        drop(heads);
        for (now, was) in renamed.into_inner() {
            if let Some(progress) = old.files.remove(&was) {
                old.files.insert(now, progress);
            }
        }
        let mut read = Entries::default();
        for shown in listing.unchanged {
            if let Some(progress) = old.files.remove(&shown) {
                read.insert(shown, progress);
            }
        }
        let mut late = watermark::LateFiles::default();
        let mut files = Vec::with_capacity(listing.files.len());
        let mut starts = Vec::with_capacity(listing.files.len());
        // Per file listed to be read, its index among the files read.
        let mut kept = Vec::with_capacity(listing.files.len());
        for file in listing.files {
            let shown = file.display.as_str();
            let Some(progress) = old.files.remove(shown) else {
                if file.identity == Identity::Late {
                    late.warn(shown, mark.as_ref());
                }
                kept.push(Some(files.len()));
                starts.push(Resume::default());
                files.push(file);
                continue;
            };
            let resume = Resume {
                offset: progress.offset,
                records: progress.records,
            };
            let start = match file.identity {
                Identity::New | Identity::Late => Some(Resume::default()),
                Identity::Shrunk => {
                    tracing::warn!(
                        file = shown,
                        "`{shown}` is smaller than when it was read: it is a different file now (rotated or rewritten); reading it from the start"
                    );
                    Some(Resume::default())
                }
                Identity::Replaced => {
                    tracing::warn!(
                        file = shown,
                        "`{shown}` starts differently than when it was read: it is a different file now (rotated or rewritten); reading it from the start"
                    );
                    Some(Resume::default())
                }
                Identity::Grown if !file.format.appends() => {
                    tracing::warn!(
                        file = shown,
                        "`{shown}` changed after it was read; whole-document formats are not re-read"
                    );
                    // Remember it as it is now, so the warning comes once per change.
                    let now = FileProgress {
                        size: file.size,
                        head_len: file.head.len,
                        head: file.head.hash.clone(),
                        ..progress
                    };
                    read.insert(file.display.clone(), now);
                    None
                }
                Identity::Grown | Identity::Unfinished => Some(resume),
                Identity::Unchanged => {
                    read.insert(file.display.clone(), progress.clone());
                    None
                }
            };
            if let Some(start) = start {
                // Kept until the file is read: were it dropped, a file below the watermark
                // would count as read.
                read.insert(file.display.clone(), progress.clone());
                kept.push(Some(files.len()));
                starts.push(start);
                files.push(file);
            } else {
                kept.push(None);
            }
        }
        late.summarize(mark.as_ref());
        for gone in old.files.keys() {
            tracing::debug!(
                file = gone.as_str(),
                "a file in the checkpoint is no longer listed; dropped from the checkpoint"
            );
        }
        let skipped: Vec<u64> = files
            .iter()
            .zip(&starts)
            .map(|(file, start)| estimate_skipped(file, *start))
            .collect();
        let paths = files.iter().map(|file| file.path.clone()).collect();
        let mut slots = listing.slots;
        for slot in &mut slots {
            slot.read = slot
                .read
                .and_then(|listed| kept.get(listed).copied().flatten());
        }
        let settings = watermark::Settings {
            clock,
            settle: options.settle,
            budget: options.checkpoint_bytes,
            complete: listing.complete,
        };
        let read = Tracker::new(read, slots, &options, mark, settings);
        let inputs = FileInputs {
            options,
            held_back: vec![false; files.len()],
            files,
            starts,
            skipped,
            read,
            paths,
        };
        let batcher = Batcher::new(
            &inputs,
            inputs.options.batch_rows,
            inputs.options.batch_bytes,
        )
        .with_batch_time(inputs.options.batch_time);
        Ok(FileSource { inputs, batcher })
    }

    /// The files to read, in reading order, as paths to open (the base directory joined to a
    /// relative configured path).
    pub fn files(&self) -> &[PathBuf] {
        &self.inputs.paths
    }

    /// The format and compression each file is read with, in reading order.
    pub fn formats(&self) -> impl Iterator<Item = (FileFormat, Compression)> + '_ {
        self.inputs
            .files
            .iter()
            .map(|file| (file.format, file.compression))
    }
}

/// How a text-format reader is set up: everything but the stream.
pub(crate) struct TextReaderSetup {
    /// The input as shown to users and stored in positions.
    pub(crate) ctx: FileContext,
    /// The input's format (not Parquet).
    pub(crate) format: FileFormat,
    /// Where the stream is positioned, and how to number what follows.
    pub(crate) start: Resume,
    /// The byte just before `start.offset`, when resumed (a JSON array reader wants it).
    pub(crate) last: Option<u8>,
    /// Hand JSON-lines records out unparsed.
    pub(crate) unparsed_json_lines: bool,
    /// The input is complete as it is (an immutable object): never hold a cut-off last
    /// JSON line back for a writer to finish.
    pub(crate) complete: bool,
}

/// The reader of a text format (JSON lines, array, documents, CSV) over `stream`, positioned
/// at `setup.start`. A CSV input resumed after its start reads its header from
/// `from_start`, a second stream of the input from its beginning.
pub(crate) fn text_reader(
    setup: TextReaderSetup,
    stream: InputStream,
    from_start: compression::Reopen,
) -> Result<Box<dyn RecordReader>, SourceError> {
    let TextReaderSetup {
        ctx,
        format,
        start,
        last,
        unparsed_json_lines,
        complete,
    } = setup;
    let reader: Box<dyn RecordReader> = match format {
        FileFormat::Jsonl => Box::new(
            jsonl::JsonLinesReader::new(ctx, stream, start)
                .unparsed(unparsed_json_lines)
                .complete(complete),
        ),
        FileFormat::JsonArray => {
            Box::new(json_array::JsonArrayReader::new(ctx, stream, start, last))
        }
        // Listing resolves `Json` to the shape found; were it left, documents read any
        // stream of JSON objects. Parquet is no text format: never handed here.
        FileFormat::JsonDocuments | FileFormat::Json | FileFormat::Parquet => {
            Box::new(json_documents::JsonDocumentsReader::new(ctx, stream, start))
        }
        FileFormat::Csv if start.offset == 0 => {
            Box::new(csv::CsvReader::new(ctx, stream, Some(from_start)))
        }
        FileFormat::Csv => {
            let headers = csv::CsvReader::new(ctx.clone(), from_start()?, None).header_names()?;
            Box::new(csv::CsvReader::resume(
                ctx, stream, start, headers, from_start,
            ))
        }
    };
    Ok(reader)
}

impl Inputs for FileInputs {
    fn count(&self) -> usize {
        self.files.len()
    }

    fn size(&self, index: usize) -> u64 {
        self.files[index].size
    }

    fn resumed(&self, index: usize) -> bool {
        self.starts[index] != Resume::default()
    }

    fn skipped(&self, index: usize) -> u64 {
        self.skipped[index]
    }

    /// Open the reader for file `index`, where it starts.
    fn open(&mut self, index: usize) -> Result<Box<dyn RecordReader>, SourceError> {
        // The files before it are finished.
        self.read.finished(index, false);
        let file = &self.files[index];
        let ctx = FileContext {
            uri: file.display.as_str().into(),
            max_record_bytes: self.options.max_record_bytes.max(1),
            max_record_memory: self.options.max_record_memory,
            leniency: self.options.leniency,
        };
        let mut start = self.starts[index];
        if file.format == FileFormat::Parquet {
            return Ok(Box::new(parquet::ParquetReader::open(
                ctx,
                &file.path,
                file.size,
                self.options.batch_rows,
                start.records,
            )?));
        }
        let stream = || compression::open_stream(&file.path, &file.display, file.compression);
        let (stream, last) = if start.offset == 0 {
            (stream()?, None)
        } else {
            let at = compression::open_stream_at(
                &file.path,
                &file.display,
                file.compression,
                start.offset,
            )?;
            match at {
                Some((stream, last)) => (stream, Some(last)),
                None => {
                    let shown = file.display.as_str();
                    tracing::warn!(
                        file = shown,
                        "`{shown}` is shorter than when it was read: it is a different file now (rotated or rewritten); reading it from the start"
                    );
                    start = Resume::default();
                    (stream()?, None)
                }
            }
        };
        let setup = TextReaderSetup {
            ctx,
            format: file.format,
            start,
            last,
            unparsed_json_lines: self.options.unparsed_json_lines,
            complete: false,
        };
        text_reader(setup, stream, stream_from_start(file))
    }

    /// Note in the checkpoint how far file `index` was read.
    fn note(&mut self, index: usize, at: Resume, done: bool) {
        let file = &self.files[index];
        self.read.entries_mut().insert(
            file.display.clone(),
            FileProgress {
                offset: at.offset,
                records: at.records,
                size: file.size,
                head_len: file.head.len,
                head: file.head.hash.clone(),
                done,
                pending: done && self.held_back[index],
            },
        );
        if done {
            self.read.finished(index, true);
        } else {
            self.read.advance();
        }
    }

    fn held_back(&mut self, index: usize) {
        self.held_back[index] = true;
    }

    fn open_failed(&mut self, index: usize, error: &SourceError) {
        let file = &self.files[index];
        if matches!(error, SourceError::Vanished { .. }) {
            self.read.entries_mut().remove(&file.display);
        } else if self.read.entries().get(&file.display).is_none() {
            // Not read: tried again from the start by the next pass, even below the
            // watermark.
            let progress = FileProgress {
                offset: 0,
                records: 0,
                size: file.size,
                head_len: file.head.len,
                head: file.head.hash.clone(),
                done: false,
                pending: false,
            };
            self.read
                .entries_mut()
                .insert(file.display.clone(), progress);
        }
        self.read.finished(index, true);
    }
}

/// Opening `file` again from its start.
fn stream_from_start(file: &ListedFile) -> compression::Reopen {
    let (path, display, format) = (file.path.clone(), file.display.clone(), file.compression);
    Box::new(move || compression::open_stream(&path, &display, format))
}

impl Source for FileSource {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        self.batcher.next_batch(&mut self.inputs)
    }

    fn progress(&self) -> Progress {
        self.batcher.progress()
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        /// The checkpoint's shape, borrowing the source's progress.
        #[derive(Serialize)]
        struct Borrowed<'a> {
            v: u32,
            files: &'a BTreeMap<String, FileProgress>,
            #[serde(skip_serializing_if = "Option::is_none")]
            watermark: Option<&'a Watermark>,
        }
        let watermark = self.inputs.read.watermark();
        serde_json::to_vec(&Borrowed {
            v: FileCheckpoint::version_for(self.inputs.read.entries().map(), watermark),
            files: self.inputs.read.entries().map(),
            watermark,
        })
        .map_err(|error| SourceError::BadCheckpoint {
            path: self.inputs.options.path.clone(),
            message: error.to_string(),
        })
    }
}

/// The input bytes of `file` a reader starting at `start` will not read, as far as can be
/// told before opening it: exact for plain text files, none for the others.
fn estimate_skipped(file: &ListedFile, start: Resume) -> u64 {
    if file.format != FileFormat::Parquet && file.compression == Compression::None {
        start.offset.min(file.size)
    } else {
        0
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
