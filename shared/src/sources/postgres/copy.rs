//! Pages of a table read with `COPY (SELECT ...) TO STDOUT (FORMAT binary)`.
//!
//! The table reader reads a table (from the checkpoint's key on, in key order) as one binary
//! `COPY` of its `SELECT` per pass: the server sends each row's values in the same binary
//! forms as a query's results, and [`CopyPages`] cuts the stream, chunk by chunk, into pages
//! of whole rows kept in one buffer each, with an index of where each value starts. A query
//! per page (`Client::query`) built a `tokio_postgres::Row` per row instead (a vector of
//! value ranges, a type check and a lookup per value, ~12% of the client's CPU on the 10M-row
//! benchmark), and a `COPY` per page made the server parse and plan a statement per page.
//!
//! The format (PostgreSQL's `COPY` documentation, "Binary Format"), big-endian throughout:
//! the 11-byte signature `PGCOPY\n\xff\r\n\0`, a 32-bit flags field (bit 16: OIDs included;
//! bits 0-15 must be zero), a 32-bit header extension length and that many bytes; then one
//! tuple per row: a 16-bit field count (-1 ends the data), and per field a 32-bit length (-1
//! for NULL) followed by that many bytes.
//!
//! A COPY statement takes no parameters, so the starting key is written into the statement as
//! literals ([`literal`]).

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::Client;

/// The binary COPY signature.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// The flags bit that says each tuple starts with an OID (never asked for here).
const HAS_OIDS: u32 = 1 << 16;
/// A value's length that stands for NULL.
const NULL: u32 = u32::MAX;

/// One page: the bytes of whole rows the server sent, and where each value is in them.
#[derive(Debug)]
pub(crate) struct CopyPage {
    bytes: Vec<u8>,
    /// `(start, length)` of each value, row after row; length [`NULL`] for NULL.
    values: Vec<(usize, u32)>,
    width: usize,
    rows: usize,
}

impl CopyPage {
    /// The rows on the page.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Row `row` (`0..rows()`).
    pub(crate) fn row(&self, row: usize) -> CopyRow<'_> {
        CopyRow { page: self, row }
    }
}

/// Where a [`CopyPages`] is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Before the end of the header.
    Header,
    /// Among the rows.
    Rows,
    /// After the trailer (a field count of -1): nothing may follow.
    Ended,
}

/// Cuts the output of one binary `COPY ... TO STDOUT`, chunk by chunk as the server sends it,
/// into pages of whole rows: at most `rows_per_page` rows, and a page is cut early once it
/// holds `bytes_per_page` bytes (wide rows stay bounded in memory). A chunk may end anywhere,
/// in the header or inside a value.
#[derive(Debug)]
pub(crate) struct CopyPages {
    width: usize,
    rows_per_page: usize,
    bytes_per_page: usize,
    part: Part,
    /// The page being filled: whole rows up to `parsed`, then the start of the next one.
    bytes: Vec<u8>,
    values: Vec<(usize, u32)>,
    rows: usize,
    parsed: usize,
    /// The bytes of the last page cut: the next one's are about as many.
    bytes_hint: usize,
    /// Buffers of pages already read, handed back ([`CopyReader::recycle`]) for the next.
    spare: Spare,
}

/// The buffers of pages read and decoded, kept for the next pages: a page's two buffers are
/// a few MiB, and allocating them afresh for every page (one per `batch_size_rows` rows) cost
/// the 10M-row benchmark +25 MiB of peak RSS for a live heap only 6 MB larger (heaptrack: 50
/// vs 44 MB), the rest the allocator's fragmentation; reusing them took back about a third.
type Spare = Arc<std::sync::Mutex<Vec<(Vec<u8>, Vec<(usize, u32)>)>>>;

/// Pages whose buffers are kept at most: the ones in flight between the reading task and
/// the decoder.
const SPARE_PAGES: usize = 3;

impl CopyPages {
    /// Pages of rows of `width` values.
    pub(crate) fn new(width: usize, rows_per_page: usize, bytes_per_page: usize) -> CopyPages {
        CopyPages {
            width,
            rows_per_page: rows_per_page.max(1),
            bytes_per_page: bytes_per_page.max(1),
            part: Part::Header,
            bytes: Vec::new(),
            values: Vec::new(),
            rows: 0,
            parsed: 0,
            bytes_hint: 0,
            spare: Spare::default(),
        }
    }

    /// Take the next chunk of the stream; each page it completes is added to `pages`. An
    /// error says what is wrong and where (bytes counted from the start of the page).
    pub(crate) fn push(&mut self, chunk: &[u8], pages: &mut Vec<CopyPage>) -> Result<(), String> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.part == Part::Ended {
            return Err(format!("{} bytes after the end of the data", chunk.len()));
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(self.bytes_hint.max(chunk.len()));
        }
        self.bytes.extend_from_slice(chunk);
        if self.part == Part::Header {
            let Some(end) = header_len(&self.bytes)? else {
                return Ok(());
            };
            self.bytes.drain(..end);
            self.part = Part::Rows;
        }
        while self.part == Part::Rows && self.next_row()? {
            let full = self.rows >= self.rows_per_page || self.parsed >= self.bytes_per_page;
            if self.part == Part::Rows && full {
                pages.push(self.cut());
            }
        }
        if self.part == Part::Ended && self.parsed != self.bytes.len() {
            return Err(format!(
                "{} bytes after the end of the data",
                self.bytes.len() - self.parsed
            ));
        }
        Ok(())
    }

    /// The stream ended: its last page (`None` if no row is left), or an error if the data
    /// stopped before its trailer.
    pub(crate) fn finish(mut self) -> Result<Option<CopyPage>, String> {
        match self.part {
            Part::Ended => Ok((self.rows > 0).then(|| self.cut())),
            Part::Header => Err("the data ends inside its header".into()),
            Part::Rows => match self.bytes.len() - self.parsed {
                0 => Err("the data ends before its trailer".into()),
                cut => Err(format!(
                    "the data ends {cut} bytes into a row, before its trailer"
                )),
            },
        }
    }

    /// Index the row at `parsed` if all of it is here (`Ok(false)`: not yet); the trailer
    /// ends the data.
    fn next_row(&mut self) -> Result<bool, String> {
        let bytes = &self.bytes;
        let mut at = self.parsed;
        let Some(count) = peek::<2>(bytes, at).map(i16::from_be_bytes) else {
            return Ok(false);
        };
        at += 2;
        if count == -1 {
            self.parsed = at;
            self.part = Part::Ended;
            return Ok(true);
        }
        if usize::try_from(count).ok() != Some(self.width) {
            return Err(format!(
                "a row has {count} values where {} were asked for (byte {})",
                self.width, self.parsed
            ));
        }
        let first = self.values.len();
        for _ in 0..self.width {
            let Some(len) = peek::<4>(bytes, at).map(u32::from_be_bytes) else {
                self.values.truncate(first);
                return Ok(false);
            };
            at += 4;
            if len == NULL {
                self.values.push((at, NULL));
                continue;
            }
            if len > i32::MAX as u32 {
                return Err(format!("a value's length {len} at byte {at} is not valid"));
            }
            let end = at.saturating_add(len as usize);
            if end > bytes.len() {
                self.values.truncate(first);
                return Ok(false);
            }
            self.values.push((at, len));
            at = end;
        }
        self.parsed = at;
        self.rows += 1;
        Ok(true)
    }

    /// The whole rows so far as a page; the start of the next row stays.
    fn cut(&mut self) -> CopyPage {
        let rest = self.bytes.get(self.parsed..).unwrap_or_default();
        self.bytes_hint = self.parsed;
        let (mut next, mut next_values) = self
            .spare
            .lock()
            .ok()
            .and_then(|mut spare| spare.pop())
            .unwrap_or_default();
        next.clear();
        next.reserve(
            self.bytes_hint
                .saturating_add(self.bytes_hint / 8)
                .max(rest.len()),
        );
        next.extend_from_slice(rest);
        next_values.clear();
        next_values.reserve(self.values.len());
        let mut bytes = std::mem::replace(&mut self.bytes, next);
        bytes.truncate(self.parsed);
        let values = std::mem::replace(&mut self.values, next_values);
        let rows = std::mem::take(&mut self.rows);
        self.parsed = 0;
        CopyPage {
            bytes,
            values,
            width: self.width,
            rows,
        }
    }
}

/// A page is cut at `batch_size_rows` rows or once it holds this many bytes of the server's
/// data, whichever comes first, so wide rows stay bounded in memory.
pub(crate) const PAGE_BYTES: usize = 32 << 20;

/// Why a table's `COPY` stopped.
#[derive(Debug)]
pub(crate) enum Fetch {
    /// The server (or the connection) failed.
    Server(tokio_postgres::Error),
    /// The data is not binary COPY data of the rows asked for.
    Data(String),
    /// The reading task stopped before the end of the data (it panicked or was cancelled).
    Stopped(String),
}

/// The pages of a running `COPY`, cut on their own task so the server's next rows are read
/// while the page before is decoded (one page ahead: the channel holds one).
pub(crate) struct CopyReader {
    pages: mpsc::Receiver<Result<CopyPage, Fetch>>,
    task: tokio::task::JoinHandle<()>,
    ended: bool,
    spare: Spare,
}

impl CopyReader {
    /// Hand a decoded page's buffers back for the pages still to come.
    pub(crate) fn recycle(&self, page: CopyPage) {
        if let Ok(mut spare) = self.spare.lock()
            && spare.len() < SPARE_PAGES
        {
            spare.push((page.bytes, page.values));
        }
    }

    /// The next page; `None` after the last page of the data. The channel also closes when
    /// the task panics: only the task's normal end means the table was read whole.
    pub(crate) async fn next(&mut self) -> Option<Result<CopyPage, Fetch>> {
        if self.ended {
            return None;
        }
        if let Some(page) = self.pages.recv().await {
            return Some(page);
        }
        self.ended = true;
        match (&mut self.task).await {
            Ok(()) => None,
            Err(e) => Some(Err(Fetch::Stopped(e.to_string()))),
        }
    }
}

impl Drop for CopyReader {
    /// A table left before its end (the pass stopped) stops its reading task.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Run `copy` (a `COPY ... TO STDOUT (FORMAT binary)`) on `client`, its output cut into
/// `pages`.
pub(crate) fn read_copy(client: Arc<Client>, copy: String, mut pages: CopyPages) -> CopyReader {
    let (tx, pages_rx) = mpsc::channel(1);
    let spare = Arc::clone(&pages.spare);
    let task = tokio::spawn(async move {
        let stream = match client.copy_out(copy.as_str()).await {
            Ok(stream) => stream,
            Err(e) => {
                let _ = tx.send(Err(Fetch::Server(e))).await;
                return;
            }
        };
        futures::pin_mut!(stream);
        let mut done = Vec::new();
        while let Some(data) = stream.next().await {
            let pushed = match data {
                Ok(data) => pages.push(&data, &mut done).map_err(Fetch::Data),
                Err(e) => Err(Fetch::Server(e)),
            };
            for page in done.drain(..) {
                if tx.send(Ok(page)).await.is_err() {
                    return;
                }
            }
            if let Err(e) = pushed {
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
        match pages.finish() {
            Ok(Some(page)) => {
                let _ = tx.send(Ok(page)).await;
            }
            Ok(None) => {}
            Err(why) => {
                let _ = tx.send(Err(Fetch::Data(why))).await;
            }
        }
    });
    CopyReader {
        pages: pages_rx,
        task,
        ended: false,
        spare,
    }
}

/// One row of a [`CopyPage`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyRow<'a> {
    page: &'a CopyPage,
    row: usize,
}

/// A row's raw values, by column index: a query's `Row` or a row of a [`CopyPage`].
pub(crate) trait RawRow {
    /// The binary value of column `at` (`None` for NULL).
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String>;
}

impl RawRow for tokio_postgres::Row {
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String> {
        self.try_get::<_, Option<super::decode::RawValue<'_>>>(at)
            .map(|raw| raw.map(|super::decode::RawValue(bytes)| bytes))
            .map_err(|e| e.to_string())
    }
}

impl RawRow for CopyRow<'_> {
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String> {
        if at >= self.page.width {
            return Err(format!(
                "no column {at} in a row of {} values",
                self.page.width
            ));
        }
        let (start, len) = self
            .page
            .values
            .get(self.row * self.page.width + at)
            .copied()
            .ok_or_else(|| format!("no row {} on the page", self.row))?;
        if len == NULL {
            return Ok(None);
        }
        // `CopyPages::next_row` checked every range; one past the page is an error, never a
        // NULL.
        start
            .checked_add(len as usize)
            .and_then(|end| self.page.bytes.get(start..end))
            .map(Some)
            .ok_or_else(|| format!("value {at} of row {} runs past the page", self.row))
    }
}

impl<T: RawRow> RawRow for &T {
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String> {
        (**self).raw(at)
    }
}

/// The length of the header at the start of `bytes`, checked; `None` while it is not all
/// here.
fn header_len(bytes: &[u8]) -> Result<Option<usize>, String> {
    let head = bytes.get(..SIGNATURE.len()).unwrap_or(bytes);
    if !SIGNATURE.starts_with(head) {
        return Err("the data does not start with the binary COPY signature".into());
    }
    let (Some(flags), Some(extension)) = (peek::<4>(bytes, 11), peek::<4>(bytes, 15)) else {
        return Ok(None);
    };
    let flags = u32::from_be_bytes(flags);
    if flags & HAS_OIDS != 0 || flags & 0xffff != 0 {
        return Err(format!("unexpected header flags {flags:#x}"));
    }
    let end = usize::try_from(u32::from_be_bytes(extension))
        .ok()
        .and_then(|len| 19usize.checked_add(len))
        .ok_or("the header's extension is too long")?;
    Ok((end <= bytes.len()).then_some(end))
}

/// The `N` bytes at `at`, if they are all here.
fn peek<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    at.checked_add(N)
        .and_then(|end| bytes.get(at..end))
        .and_then(|slice| slice.try_into().ok())
}

/// `text` as an SQL string literal, as PostgreSQL's `quote_literal` writes it: quotes
/// doubled, and when there is a backslash, an `E'...'` literal with backslashes doubled, so
/// the literal means `text` whatever `standard_conforming_strings` says.
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    if text.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for c in text.chars() {
        if c == '\'' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary COPY output of `rows`, each value `None` (NULL) or bytes.
    fn copy_bytes(rows: &[Vec<Option<&[u8]>>]) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&3u32.to_be_bytes());
        out.extend_from_slice(b"ext");
        for row in rows {
            out.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for value in row {
                match value {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(bytes) => {
                        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                        out.extend_from_slice(bytes);
                    }
                }
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    /// The pages of `bytes` fed in chunks of `chunk` bytes.
    fn pages_of(
        bytes: &[u8],
        chunk: usize,
        (width, rows_per_page, bytes_per_page): (usize, usize, usize),
    ) -> Result<Vec<CopyPage>, String> {
        let mut stream = CopyPages::new(width, rows_per_page, bytes_per_page);
        let mut pages = Vec::new();
        for part in bytes.chunks(chunk) {
            stream.push(part, &mut pages)?;
        }
        pages.extend(stream.finish()?);
        Ok(pages)
    }

    /// `rows` with their values copied.
    fn owned(rows: &[Vec<Option<&[u8]>>]) -> Vec<Vec<Option<Vec<u8>>>> {
        rows.iter()
            .map(|row| row.iter().map(|v| v.map(<[u8]>::to_vec)).collect())
            .collect()
    }

    /// Every value of every page, row after row.
    fn values_of(pages: &[CopyPage]) -> Result<Vec<Vec<Option<Vec<u8>>>>, String> {
        let mut rows = Vec::new();
        for page in pages {
            for row in 0..page.rows() {
                rows.push(
                    (0..page.width)
                        .map(|at| Ok(page.row(row).raw(at)?.map(<[u8]>::to_vec)))
                        .collect::<Result<_, String>>()?,
                );
            }
        }
        Ok(rows)
    }

    #[test]
    fn rows_are_found_whole_however_the_stream_is_cut() -> Result<(), String> {
        let rows: Vec<Vec<Option<&[u8]>>> = (0..23u8)
            .map(|i| {
                vec![
                    Some(&b"one"[..]),
                    (i % 3 == 0).then_some(&[0u8, 1, 2][..]),
                    Some(&b""[..]),
                    Some(&b"a longer value, to cut inside"[..(usize::from(i) + 1).min(29)]),
                ]
            })
            .collect();
        let expected = owned(&rows);
        let bytes = copy_bytes(&rows);
        for chunk in 1..=bytes.len() {
            for (rows_per_page, bytes_per_page) in [(5, usize::MAX), (1000, 100), (1, 1)] {
                let pages = pages_of(&bytes, chunk, (4, rows_per_page, bytes_per_page))?;
                assert_eq!(values_of(&pages)?, expected, "chunks of {chunk}");
                assert!(pages.iter().all(|page| page.rows() >= 1
                    && page.rows() <= rows_per_page
                    && page.bytes.len() < bytes_per_page.saturating_add(60)));
                if rows_per_page == 5 {
                    let sizes: Vec<usize> = pages.iter().map(CopyPage::rows).collect();
                    assert_eq!(sizes, [5, 5, 5, 5, 3], "chunks of {chunk}");
                }
            }
        }
        assert!(pages_of(&bytes, 7, (4, 5, 1000))?[0].row(0).raw(4).is_err());
        assert!(pages_of(&copy_bytes(&[]), 3, (4, 5, 1000))?.is_empty());
        Ok(())
    }

    #[test]
    fn recycled_buffers_hold_only_their_new_page() -> Result<(), String> {
        let rows: Vec<Vec<Option<&[u8]>>> = (0..40u8)
            .map(|i| {
                vec![
                    Some(&b"abcdefghij"[..usize::from(i % 10)]),
                    (i % 4 == 0).then_some(&b"x"[..]),
                ]
            })
            .collect();
        let expected = owned(&rows);
        let bytes = copy_bytes(&rows);
        let mut stream = CopyPages::new(2, 3, usize::MAX);
        let reader = CopyReader {
            pages: mpsc::channel(1).1,
            task: tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| e.to_string())?
                .spawn(async {}),
            ended: true,
            spare: Arc::clone(&stream.spare),
        };
        let (mut seen, mut recycled, mut reused) = (Vec::new(), Vec::new(), 0);
        let mut take = |page: CopyPage| -> Result<(), String> {
            seen.extend(values_of(std::slice::from_ref(&page))?);
            reused += usize::from(recycled.contains(&page.bytes.as_ptr()));
            recycled.push(page.bytes.as_ptr());
            reader.recycle(page);
            Ok(())
        };
        for chunk in bytes.chunks(7) {
            let mut pages = Vec::new();
            stream.push(chunk, &mut pages)?;
            pages.into_iter().try_for_each(&mut take)?;
        }
        stream.finish()?.into_iter().try_for_each(&mut take)?;
        assert_eq!(seen, expected);
        // Most pages after the first few are written into a handed-back buffer.
        assert!(reused >= 8, "{reused} of 14 pages reused a buffer");
        Ok(())
    }

    #[test]
    fn cut_or_malformed_data_is_refused_never_read_past() {
        let whole = copy_bytes(&[vec![Some(&b"abc"[..]), None], vec![None, None]]);
        assert!(pages_of(&whole, 4, (2, 1, 100)).is_ok());
        // Every cut short of the whole is an error, not fewer rows.
        for cut in 0..whole.len() {
            for chunk in [1, 5, whole.len()] {
                assert!(
                    pages_of(&whole[..cut], chunk, (2, 1, 100)).is_err(),
                    "cut at {cut}, chunks of {chunk}"
                );
            }
        }
        let refused = |bytes: &[u8], width: usize| {
            (1..=bytes.len()).all(|chunk| pages_of(bytes, chunk, (width, 1, 100)).is_err())
        };
        // Another width than asked for.
        assert!(refused(&whole, 3));
        let error = pages_of(&whole, 100, (3, 1, 100)).err().unwrap_or_default();
        assert!(error.contains("2 values where 3"), "{error}");
        // Bytes after the trailer, a bad signature, OIDs, a value longer than the data, a
        // negative length other than NULL's.
        let mut trailing = whole.clone();
        trailing.push(0);
        assert!(refused(&trailing, 2));
        let mut signature = whole.clone();
        signature[0] = b'X';
        assert!(refused(&signature, 2));
        let mut oids = whole.clone();
        oids[11..15].copy_from_slice(&HAS_OIDS.to_be_bytes());
        assert!(refused(&oids, 2));
        let first_len = 19 + 3 + 2;
        let mut long = whole.clone();
        long[first_len..first_len + 4].copy_from_slice(&1000i32.to_be_bytes());
        assert!(refused(&long, 2));
        let mut negative = whole;
        negative[first_len..first_len + 4].copy_from_slice(&(-2i32).to_be_bytes());
        assert!(refused(&negative, 2));
    }

    #[test]
    fn a_reading_task_that_stops_early_is_an_error_never_the_end_of_the_table() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| e.to_string());
        let Ok(runtime) = runtime else {
            panic!("no runtime: {runtime:?}");
        };
        runtime.block_on(async {
            // A task that sends a page and ends: the page, then the end.
            let (tx, pages) = mpsc::channel(1);
            let page = pages_of(&copy_bytes(&[vec![None]]), 4, (1, 10, 100));
            let task = tokio::spawn(async move {
                for page in page.unwrap_or_default() {
                    let _ = tx.send(Ok(page)).await;
                }
            });
            let mut reader = CopyReader {
                pages,
                task,
                ended: false,
                spare: Spare::default(),
            };
            assert!(matches!(reader.next().await, Some(Ok(page)) if page.rows() == 1));
            assert!(reader.next().await.is_none());
            // A task that panics after a page: the page, then an error.
            let (tx, pages) = mpsc::channel(1);
            let page = pages_of(&copy_bytes(&[vec![None]]), 4, (1, 10, 100));
            let task = tokio::spawn(async move {
                for page in page.unwrap_or_default() {
                    let _ = tx.send(Ok(page)).await;
                }
                panic!("the reading task failed");
            });
            let mut reader = CopyReader {
                pages,
                task,
                ended: false,
                spare: Spare::default(),
            };
            assert!(matches!(reader.next().await, Some(Ok(_))));
            assert!(matches!(reader.next().await, Some(Err(Fetch::Stopped(_)))));
            assert!(reader.next().await.is_none());
        });
    }

    #[test]
    fn literals_quote_as_postgres_does() {
        assert_eq!(literal("plain"), "'plain'");
        assert_eq!(literal(""), "''");
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal(r"a\b"), r"E'a\\b'");
        assert_eq!(literal(r"x'\"), r"E'x''\\'");
        assert_eq!(literal("ü ' 🦀"), "'ü '' 🦀'");
    }
}
