//! The `Stdin` source: records piped into `skipprd` (`cat events.jsonl | skipprd sync`).
//!
//! A **push** source: what it hands out cannot be read again. A batch is durable once it is
//! committed to the WAL, like any other; but records read from the pipe and not yet committed
//! when the process dies are gone (the writer of the pipe has moved on), and a later pass
//! reads whatever the next process is given, not where this one stopped. The docs and
//! `doctor` say so. For data that must not be lost, write it to a file and use the File source.
//!
//! On a stop request (SIGINT, SIGTERM, the pass's deadline) the batch being filled takes the
//! lines already queued and ends, so they are committed with it; lines the pipe still holds
//! are left to the writer's next reader.
//!
//! A thread reads the pipe line by line into a bounded queue, so a batch also closes by time
//! (`batch_size_seconds`, else the pipeline's `buffer_threshold_seconds`) while the writer is
//! slow, and memory stays at the queue and one batch. Formats: JSON lines (`jsonl`, `json`:
//! one object per line) and `csv` (a header line, then one row per line, typed as the File
//! source types CSV cells; a quoted value cannot span lines here).

use std::io::BufRead;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::file::{FileContext, Item, Leniency};
use super::{Progress, Source, SourceBatch, SourceError};
use crate::deadletter::FailureCode;

/// Version of the Stdin source's checkpoint.
const STDIN_CHECKPOINT_VERSION: u32 = 1;

/// Lines queued between the reading thread and the batches.
const QUEUE_LINES: usize = 4096;

/// How often a wait for standard input looks for a stop request.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// How a Stdin source reads.
#[derive(Debug, Clone)]
pub struct StdinOptions {
    /// `true`: CSV with a header line; `false`: one JSON object per line.
    pub csv: bool,
    /// A batch closes at this many records and deadletters.
    pub batch_rows: usize,
    /// ... or once this many bytes were read.
    pub batch_bytes: u64,
    /// ... or once it has been filling this long.
    pub batch_time: Duration,
    /// A longer line becomes a `too_large` deadletter.
    pub max_record_bytes: usize,
    /// The lenient JSON readings (`enable_single_quote_parsing`, `enable_unicode_parsing`).
    pub leniency: Leniency,
}

/// One line from the pipe: its bytes (without the line break), or a read error.
type Line = Result<Vec<u8>, std::io::Error>;

/// Reads records from standard input; see the module docs.
pub struct StdinSource {
    options: StdinOptions,
    lines: Receiver<Line>,
    ctx: FileContext,
    /// Lines read so far (the next record's number is this + 1).
    line: u64,
    bytes: u64,
    header: Option<Vec<String>>,
    ended: bool,
    /// Checked while waiting for lines: a stop request ends the batch being filled.
    stop: crate::sources::StopRequest,
}

impl StdinSource {
    /// Read the process's standard input.
    pub fn open(options: StdinOptions) -> StdinSource {
        let max = options.max_record_bytes;
        StdinSource::from_reader(options, move |tx| feed(std::io::stdin().lock(), tx, max))
    }

    /// Read what `feed` sends (the tests' pipe).
    fn from_reader(
        options: StdinOptions,
        feed: impl FnOnce(SyncSender<Line>) + Send + 'static,
    ) -> StdinSource {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_LINES);
        std::thread::spawn(move || feed(tx));
        StdinSource {
            ctx: FileContext {
                uri: "stdin".into(),
                max_record_bytes: options.max_record_bytes.max(1),
                max_record_memory: super::file::FileSourceOptions::DEFAULT_MAX_RECORD_MEMORY,
                leniency: options.leniency,
            },
            options,
            lines: rx,
            line: 0,
            bytes: 0,
            header: None,
            ended: false,
            stop: super::StopRequest::default(),
        }
    }

    /// The record or deadletter of line `text` (numbered `self.line`), `None` for a blank line
    /// or the CSV header.
    fn item(&mut self, text: &[u8]) -> Option<Item> {
        if text.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let (start, end) = (self.bytes, self.bytes + text.len() as u64);
        if text.len() > self.options.max_record_bytes {
            return Some(self.ctx.too_large(
                &text[..self.options.max_record_bytes.min(1024)],
                text.len() as u64,
                self.line,
                start,
            ));
        }
        if !self.options.csv {
            return Some(self.ctx.parse_json(text, self.line, start, end));
        }
        let row = match csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text)
            .records()
            .next()
        {
            Some(Ok(row)) => row,
            Some(Err(e)) => {
                return Some(self.ctx.dead(
                    self.line,
                    start,
                    String::from_utf8_lossy(text).into_owned(),
                    format!("malformed CSV row: {e}"),
                    FailureCode::Malformed,
                ));
            }
            None => return None,
        };
        let Some(header) = &self.header else {
            self.header = Some(row.iter().map(str::to_owned).collect());
            return None;
        };
        if row.len() != header.len() {
            return Some(self.ctx.dead(
                self.line,
                start,
                String::from_utf8_lossy(text).into_owned(),
                format!(
                    "the row has {} fields and the header {}",
                    row.len(),
                    header.len()
                ),
                FailureCode::Malformed,
            ));
        }
        let map: Map<String, Value> = header
            .iter()
            .zip(row.iter())
            .map(|(k, v)| (k.clone(), super::file::type_cell(v)))
            .collect();
        Some(self.ctx.record(map, end, self.line))
    }
}

/// Read `input` line by line into `tx` until its end (or until the source is dropped); a line
/// longer than `max` is cut there (it becomes a `too_large` deadletter) and the rest skipped.
fn feed(mut input: impl BufRead, tx: SyncSender<Line>, max: usize) {
    loop {
        let mut line = Vec::new();
        let mut over = false;
        loop {
            let buf = match input.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            if buf.is_empty() {
                if !line.is_empty() || over {
                    let _ = tx.send(Ok(line));
                }
                return;
            }
            let (part, found) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !over {
                let room = (max + 1).saturating_sub(line.len());
                line.extend_from_slice(&part[..part.len().min(room)]);
                over = line.len() > max;
            }
            let used = found.unwrap_or(buf.len());
            input.consume(used);
            if found.is_some() {
                break;
            }
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if tx.send(Ok(line)).is_err() {
            return;
        }
    }
}

impl Source for StdinSource {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        let mut batch = SourceBatch::default();
        let started = Instant::now();
        let mut count = 0usize;
        while !self.ended && count < self.options.batch_rows {
            if count > 0 && batch.bytes_read >= self.options.batch_bytes {
                break;
            }
            let line = if self.stop.is_requested() {
                // Stopping: the lines already taken from the pipe (which cannot be read again)
                // go into this batch, which the pipeline commits; then reading ends.
                match self.lines.try_recv() {
                    Ok(line) => Ok(line),
                    Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                    Err(TryRecvError::Empty) if count == 0 => {
                        tracing::info!("Standard input: reading stops on request.");
                        return Ok(None);
                    }
                    Err(TryRecvError::Empty) => break,
                }
            } else {
                // Wait for the next line until the batch's time is up (with nothing yet, as
                // long as it takes), looking for a stop request every `STOP_CHECK`.
                let wait = self.options.batch_time.saturating_sub(started.elapsed());
                match self.lines.recv_timeout(STOP_CHECK.min(wait)) {
                    Err(RecvTimeoutError::Timeout) if count == 0 || wait > STOP_CHECK => continue,
                    line => line,
                }
            };
            let text = match line {
                Ok(Ok(text)) => text,
                Ok(Err(e)) => {
                    return Err(SourceError::Io {
                        path: "stdin".into(),
                        source: e,
                    });
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    self.ended = true;
                    break;
                }
            };
            self.line += 1;
            let read = text.len() as u64 + 1;
            let item = self.item(&text);
            self.bytes += read;
            batch.bytes_read += read;
            match item {
                Some(Item::Record(record)) => batch.records.push(record),
                Some(Item::Dead(dead)) => batch.deadletters.push(dead),
                None => continue,
            }
            count += 1;
        }
        if count == 0 && self.ended {
            return Ok(None);
        }
        Ok(Some(batch))
    }

    fn progress(&self) -> Progress {
        Progress {
            bytes_done: self.bytes,
            bytes_total: None,
            files_done: u64::from(self.ended),
            files_total: Some(1),
            requests: 0,
            retries: 0,
        }
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        // What was read of this process's pipe: kept for the record, never resumed (a pipe
        // cannot be read again; the next process reads what it is given).
        Ok(serde_json::to_vec(&serde_json::json!({
            "v": STDIN_CHECKPOINT_VERSION,
            "source": "stdin",
            "lines": self.line,
        }))
        .unwrap_or_default())
    }

    fn stop_on(&mut self, stop: super::StopRequest) {
        self.stop = stop;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(csv: bool, batch_rows: usize) -> StdinOptions {
        StdinOptions {
            csv,
            batch_rows,
            batch_bytes: 1 << 20,
            batch_time: Duration::from_secs(600),
            max_record_bytes: 64,
            leniency: Leniency::default(),
        }
    }

    fn piped(options: StdinOptions, text: &'static [u8]) -> StdinSource {
        StdinSource::from_reader(options, move |tx| feed(text, tx, 64))
    }

    fn drain(source: &mut StdinSource) -> (Vec<Vec<String>>, Vec<(u64, FailureCode)>) {
        let mut batches = Vec::new();
        let mut dead = Vec::new();
        while let Some(batch) = source.next_batch().unwrap() {
            batches.push(
                batch
                    .records
                    .iter()
                    .map(|r| Value::Object(r.value.clone()).to_string())
                    .collect(),
            );
            dead.extend(batch.deadletters.iter().map(|d| (d.line, d.code)));
        }
        (batches, dead)
    }

    #[test]
    fn json_lines_come_in_batches_with_bad_lines_deadlettered_by_line_number() {
        let long: &'static [u8] = Box::leak(
            format!(
                "{{\"id\":1}}\n\n{{\"id\":2}}\nnope\n[1]\n{{\"big\":\"{}\"}}\r\n{{\"id\":3}}",
                "x".repeat(100)
            )
            .into_bytes()
            .into_boxed_slice(),
        );
        let mut source = piped(options(false, 2), long);
        let (batches, dead) = drain(&mut source);
        assert_eq!(
            batches,
            vec![
                vec![r#"{"id":1}"#.to_owned(), r#"{"id":2}"#.to_owned()],
                vec![],
                vec![r#"{"id":3}"#.to_owned()],
            ]
        );
        assert_eq!(
            dead,
            vec![
                (4, FailureCode::Malformed),
                (5, FailureCode::NotAnObject),
                (6, FailureCode::TooLarge),
            ]
        );
        let checkpoint: Value = serde_json::from_slice(&source.checkpoint().unwrap()).unwrap();
        assert_eq!(checkpoint["lines"], 7);
    }

    #[test]
    fn csv_rows_are_named_by_the_header_and_typed() {
        let mut source = piped(options(true, 10), b"id,name\n1,ann\n2,\"b,c\"\n3\n");
        let (batches, dead) = drain(&mut source);
        assert_eq!(
            batches,
            vec![vec![
                r#"{"id":1,"name":"ann"}"#.to_owned(),
                r#"{"id":2,"name":"b,c"}"#.to_owned(),
            ]]
        );
        assert_eq!(dead, vec![(4, FailureCode::Malformed)]);
    }

    #[test]
    fn a_slow_writer_gets_its_batch_committed_by_time() {
        let mut opts = options(false, 1000);
        opts.batch_time = Duration::from_millis(50);
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let mut source = StdinSource::from_reader(opts, move |tx| {
            let _ = tx.send(Ok(b"{\"id\":1}".to_vec()));
            // The second line only once the first batch was handed out.
            let _ = wait.recv();
            let _ = tx.send(Ok(b"{\"id\":2}".to_vec()));
        });
        let first = source.next_batch().unwrap().unwrap();
        assert_eq!(first.records.len(), 1);
        release.send(()).unwrap();
        let second = source.next_batch().unwrap().unwrap();
        assert_eq!(second.records.len(), 1);
        assert!(source.next_batch().unwrap().is_none());
    }

    /// Regression: a stop request (SIGTERM) while the writer keeps standard input open but
    /// quiet waited for the writer for ever (with nothing read) or for the batch's time. The
    /// lines already queued go into the batch.
    #[test]
    fn a_stop_request_ends_the_batch_and_the_wait_for_a_quiet_writer() {
        let mut opts = options(false, 1000);
        opts.batch_time = Duration::from_secs(600);
        let (_keep_open, wait) = std::sync::mpsc::channel::<()>();
        let (sent, lines_sent) = std::sync::mpsc::channel::<()>();
        let mut source = StdinSource::from_reader(opts, move |tx| {
            let _ = tx.send(Ok(b"{\"id\":1}".to_vec()));
            let _ = sent.send(());
            // Open and quiet until the test ends.
            let _ = wait.recv();
        });
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        source.stop_on(super::super::StopRequest::new(
            std::sync::Arc::clone(&flag),
            None,
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let first = source.next_batch().unwrap();
            let second = source.next_batch().unwrap();
            let _ = tx.send(());
            (first, second)
        });
        lines_sent.recv().unwrap();
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        // A hang guard, not a timing: without the request seen, the wait lasts for ever.
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the wait did not end on the stop request");
        let (first, second) = reader.join().unwrap();
        assert_eq!(first.map(|b| b.records.len()), Some(1));
        assert!(second.is_none(), "reading ends after the request");
    }
}
