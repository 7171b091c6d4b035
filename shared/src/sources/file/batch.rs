//! Filling batches from a list of inputs read one after the other: what the File source and the
//! S3 source share, whatever their inputs are (files on disk, objects in a bucket).

use std::time::{Duration, Instant};

use super::reader::{Item, RecordReader, Resume};
use crate::sources::{Progress, SourceBatch, SourceError};

/// The inputs a [`Batcher`] reads, in order, and where it notes how far each was read.
pub(crate) trait Inputs {
    /// How many inputs there are.
    fn count(&self) -> usize;

    /// The input's size in bytes as stored (compressed bytes for gzip).
    fn size(&self, index: usize) -> u64;

    /// Whether reading the input starts after its beginning (a resumed input).
    fn resumed(&self, index: usize) -> bool;

    /// The input's bytes taken as read already in the total (see [`Batcher::new`]): an
    /// estimate of where its reader starts, corrected once it is open.
    fn skipped(&self, index: usize) -> u64;

    /// A reader of the input, at its start or where it is resumed.
    fn open(&mut self, index: usize) -> Result<Box<dyn RecordReader>, SourceError>;

    /// Note that the input was read up to `at` (just after the last item returned);
    /// `done` when it was read to its end.
    fn note(&mut self, index: usize, at: Resume, done: bool);

    /// The input, read to its end, ends with a record still being written, left for the
    /// next pass (see [`RecordReader::held_back`]); said before its last note.
    fn held_back(&mut self, _index: usize) {}

    /// The input could not be opened: `error` is about to be returned.
    fn open_failed(&mut self, index: usize, error: &SourceError);
}

/// The input being read.
struct Current {
    /// Index into the inputs.
    index: usize,
    reader: Box<dyn RecordReader>,
    /// Input bytes of this input already counted in batches.
    credited: u64,
}

/// How often (in items) a batch's age is checked against its time limit.
const TIME_CHECK_EVERY: usize = 64;
/// Reads [`Inputs`] one after the other into batches of at most `batch_rows` records and
/// deadletters, closing a batch early once `batch_bytes` input bytes were consumed; a batch
/// may span inputs. An error met after some items of a batch is returned on the next call,
/// after the batch; the failed input is left at its last item returned and reading moves on
/// to the next input when called again.
pub(crate) struct Batcher {
    batch_rows: usize,
    batch_bytes: u64,
    /// ... or once a batch has been filling this long (checked every [`TIME_CHECK_EVERY`]
    /// items).
    batch_time: Option<Duration>,
    next: usize,
    current: Option<Current>,
    bytes_done: u64,
    bytes_total: u64,
    files_done: u64,
    files_total: u64,
    /// An error met after some records of a batch; reported on the next call.
    pending_error: Option<SourceError>,
    /// What the current reader gave after its batch was full (see [`Batcher::close`]): the
    /// first item (or error) of the next batch.
    peeked: Option<Result<Item, SourceError>>,
    /// Records in the last batch: room made for as many up front, so that filling a batch
    /// does not move its records again and again as the vector grows.
    last_records: usize,
}

impl Batcher {
    /// A batcher for `inputs`, counting as the total their sizes less what each skips.
    pub(crate) fn new(inputs: &dyn Inputs, batch_rows: usize, batch_bytes: u64) -> Batcher {
        let bytes_total = (0..inputs.count())
            .map(|i| inputs.size(i).saturating_sub(inputs.skipped(i)))
            .sum();
        Batcher {
            batch_rows: batch_rows.max(1),
            batch_bytes,
            batch_time: None,
            next: 0,
            current: None,
            bytes_done: 0,
            bytes_total,
            files_done: 0,
            files_total: inputs.count() as u64,
            pending_error: None,
            peeked: None,
            last_records: 0,
        }
    }

    /// Close a batch also once it has been filling for `time` (`None`: no time limit).
    pub(crate) fn with_batch_time(mut self, time: Option<Duration>) -> Batcher {
        self.batch_time = time;
        self
    }

    /// How far reading has got.
    pub(crate) fn progress(&self) -> Progress {
        Progress {
            bytes_done: self.bytes_done,
            bytes_total: Some(self.bytes_total),
            files_done: self.files_done,
            files_total: Some(self.files_total),
            requests: 0,
            retries: 0,
        }
    }

    /// The index of the next input to open (inputs before it were opened).
    pub(crate) fn next_input(&self) -> usize {
        self.next
    }

    /// The next batch; `Ok(None)` once every input was read.
    pub(crate) fn next_batch(
        &mut self,
        inputs: &mut dyn Inputs,
    ) -> Result<Option<SourceBatch>, SourceError> {
        if let Some(error) = self.pending_error.take() {
            return Err(error);
        }
        let mut batch = SourceBatch {
            records: Vec::with_capacity(self.last_records.min(self.batch_rows)),
            ..SourceBatch::default()
        };
        let result = self.fill(inputs, &mut batch);
        self.last_records = batch.records.len();
        let no_items = batch.records.is_empty() && batch.deadletters.is_empty();
        match result {
            Ok(()) if no_items && batch.bytes_read == 0 => Ok(None),
            Ok(()) => Ok(Some(batch)),
            Err(error) if no_items => Err(error),
            Err(error) => {
                self.pending_error = Some(error);
                Ok(Some(batch))
            }
        }
    }

    /// Close a full batch: note how far the current reader has got. The reader is asked for
    /// one more item first, so that an input whose last record ends the batch is closed in
    /// this batch's checkpoint (and not opened again by the next pass to find nothing); the
    /// item is kept for the next batch, and the note stays at the last item returned.
    fn close(&mut self, inputs: &mut dyn Inputs, batch: &mut SourceBatch) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let at = current.reader.resume_point();
        match current.reader.next_item() {
            Ok(None) => {
                self.credit(inputs, batch);
                if let Some(done) = self.current.take() {
                    Self::note_done(inputs, &done);
                    self.finish_input(inputs, done.index, done.credited, Some(batch));
                }
            }
            Ok(Some(item)) => {
                inputs.note(current.index, at, false);
                self.peeked = Some(Ok(item));
            }
            Err(error) => {
                inputs.note(current.index, at, false);
                self.peeked = Some(Err(error));
            }
        }
    }

    /// Note that the input `done` was read to its end.
    fn note_done(inputs: &mut dyn Inputs, done: &Current) {
        if done.reader.held_back() {
            inputs.held_back(done.index);
        }
        inputs.note(done.index, done.reader.resume_point(), true);
    }

    /// Count the input bytes the current reader consumed since last counted.
    fn credit(&mut self, inputs: &dyn Inputs, batch: &mut SourceBatch) {
        if let Some(current) = &mut self.current {
            let size = inputs.size(current.index);
            let consumed = current.reader.consumed().min(size);
            if consumed > current.credited {
                let delta = consumed - current.credited;
                current.credited = consumed;
                batch.bytes_read += delta;
                self.bytes_done += delta;
            }
        }
    }

    /// Finish input `index`: count all its bytes as done and move on. The bytes not yet
    /// credited go into `batch` when given (an input read to its end), into progress only
    /// when not (an input given up on).
    fn finish_input(
        &mut self,
        inputs: &dyn Inputs,
        index: usize,
        credited: u64,
        batch: Option<&mut SourceBatch>,
    ) {
        let rest = inputs.size(index).saturating_sub(credited);
        if let Some(batch) = batch {
            batch.bytes_read += rest;
        }
        self.bytes_done += rest;
        self.files_done += 1;
        self.current = None;
    }

    /// Fill `batch`; an error leaves the failed input finished.
    fn fill(
        &mut self,
        inputs: &mut dyn Inputs,
        batch: &mut SourceBatch,
    ) -> Result<(), SourceError> {
        let began = Instant::now();
        loop {
            if self.current.is_none() {
                if self.next >= inputs.count() {
                    return Ok(());
                }
                let index = self.next;
                self.next += 1;
                match inputs.open(index) {
                    Ok(reader) => {
                        // What a resumed reader skipped is not to read: take it off the
                        // total, in place of the estimate.
                        let credited = if inputs.resumed(index) {
                            reader.consumed().min(inputs.size(index))
                        } else {
                            0
                        };
                        self.bytes_total =
                            (self.bytes_total + inputs.skipped(index)).saturating_sub(credited);
                        self.current = Some(Current {
                            index,
                            reader,
                            credited,
                        });
                    }
                    Err(error) => {
                        inputs.open_failed(index, &error);
                        let skipped = inputs.skipped(index);
                        self.finish_input(inputs, index, skipped, None);
                        return Err(error);
                    }
                }
            }
            let Some(current) = self.current.as_mut() else {
                continue;
            };
            let step = match self.peeked.take() {
                Some(peeked) => peeked.map(Some),
                None => current.reader.next_item(),
            };
            match step {
                Ok(Some(Item::Record(mut record))) => {
                    if let Some(unparsed) = &mut record.unparsed {
                        unparsed.deadletters_before = batch.deadletters.len();
                    }
                    batch.records.push(record);
                    self.credit(inputs, batch);
                }
                Ok(Some(Item::Dead(dead))) => {
                    batch.deadletters.push(dead);
                    self.credit(inputs, batch);
                }
                Ok(None) => {
                    self.credit(inputs, batch);
                    if let Some(done) = self.current.take() {
                        Self::note_done(inputs, &done);
                        self.finish_input(inputs, done.index, done.credited, Some(batch));
                    }
                }
                Err(error) => {
                    // Not done: the next pass tries again after the last item returned.
                    if let Some(failed) = self.current.take() {
                        inputs.note(failed.index, failed.reader.resume_point(), false);
                        self.finish_input(inputs, failed.index, failed.credited, None);
                    }
                    return Err(error);
                }
            }
            let items = batch.records.len() + batch.deadletters.len();
            let started = items > 0 || batch.bytes_read > 0;
            let timed_out = items.is_multiple_of(TIME_CHECK_EVERY)
                && self
                    .batch_time
                    .is_some_and(|limit| began.elapsed() >= limit);
            if started
                && (items >= self.batch_rows || batch.bytes_read >= self.batch_bytes || timed_out)
            {
                self.close(inputs, batch);
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{FileCheckpoint, FileSource, FileSourceOptions};
    use crate::sources::Source;

    #[test]
    fn a_batch_that_ends_with_a_files_last_record_closes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n{\"a\":2}\n");
        write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n{\"b\":2}\n");
        let mut source = FileSource::open(FileSourceOptions {
            batch_rows: 2,
            ..options(dir.path(), "d")
        })
        .unwrap();
        let first = source.next_batch().unwrap().unwrap();
        assert_eq!(values(&first.records), vec![r#"{"a":1}"#, r#"{"a":2}"#]);
        let checkpoint = FileCheckpoint::from_bytes(&source.checkpoint().unwrap(), "d").unwrap();
        assert!(checkpoint.files["d/a.jsonl"].done);
        assert!(!checkpoint.files.contains_key("d/b.jsonl"));
        // Not at the end of a file: open at the last record returned; the record read ahead
        // comes first in the next batch.
        let mut source = FileSource::open(FileSourceOptions {
            batch_rows: 3,
            ..options(dir.path(), "d")
        })
        .unwrap();
        source.next_batch().unwrap().unwrap();
        let checkpoint = FileCheckpoint::from_bytes(&source.checkpoint().unwrap(), "d").unwrap();
        let b = &checkpoint.files["d/b.jsonl"];
        assert_eq!((b.done, b.offset, b.records), (false, 8, 1));
        let rest = source.next_batch().unwrap().unwrap();
        assert_eq!(values(&rest.records), vec![r#"{"b":2}"#]);
        assert!(source.next_batch().unwrap().is_none());
    }

    /// `batch_size_seconds`: a batch that has been filling longer than its time limit closes
    /// (checked every 64 items), and every record still comes once, in order.
    #[test]
    fn a_batch_closes_at_its_time_limit_and_nothing_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = (0..200).map(|i| format!("{{\"i\":{i}}}\n")).collect();
        write(dir.path(), "d/a.jsonl", lines.as_bytes());
        let mut source = FileSource::open(FileSourceOptions {
            batch_time: Some(std::time::Duration::ZERO),
            ..options(dir.path(), "d")
        })
        .unwrap();
        let mut sizes = Vec::new();
        let mut seen = Vec::new();
        while let Some(batch) = source.next_batch().unwrap() {
            sizes.push(batch.records.len());
            seen.extend(values(&batch.records));
        }
        assert_eq!(sizes, [64, 64, 64, 8]);
        let expected: Vec<String> = (0..200).map(|i| format!("{{\"i\":{i}}}")).collect();
        assert_eq!(seen, expected);

        // No limit: one batch.
        let mut source = FileSource::open(options(dir.path(), "d")).unwrap();
        assert_eq!(source.next_batch().unwrap().unwrap().records.len(), 200);
    }
}
