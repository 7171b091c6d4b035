//! Resuming the File source from its checkpoint: splits at every batch boundary, appends,
//! rotations, and passes with nothing new.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::testing::*;
use super::{FileCheckpoint, FileSource, FileSourceOptions};
use crate::deadletter::Deadletter;
use crate::sources::{Source, SourceError, SourceRecord};

/// What a pass read, and the checkpoint after it.
#[derive(Debug, Default)]
struct Pass {
    records: Vec<SourceRecord>,
    dead: Vec<Deadletter>,
    batches: usize,
    checkpoint: Vec<u8>,
    progress: crate::sources::Progress,
}

/// Open at `checkpoint` and read at most `max_batches` batches.
fn pass(options: &FileSourceOptions, checkpoint: Option<&[u8]>, max_batches: usize) -> Pass {
    let mut source = FileSource::open_at(options.clone(), checkpoint).unwrap();
    let mut out = Pass::default();
    while out.batches < max_batches {
        let Some(batch) = source.next_batch().unwrap() else {
            break;
        };
        out.batches += 1;
        out.records.extend(batch.records);
        out.dead.extend(batch.deadletters);
    }
    out.checkpoint = source.checkpoint().unwrap();
    out.progress = source.progress();
    out
}

/// Read everything from `checkpoint`.
fn rest(options: &FileSourceOptions, checkpoint: Option<&[u8]>) -> Pass {
    pass(options, checkpoint, usize::MAX)
}

/// Write `bytes` as `name` and check, for 1 to 3 rows a batch, that stopping after any
/// number of batches and resuming from the checkpoint reads exactly what one pass reads.
fn every_split_reads_like_one_pass(name: &str, bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), name, bytes);
    split_everywhere(dir.path(), name);
}

fn split_everywhere(dir: &Path, path: &str) {
    for batch_rows in 1..=3 {
        let options = FileSourceOptions {
            batch_rows,
            ..options(dir, path)
        };
        let full = rest(&options, None);
        assert!(
            full.records.len() + full.dead.len() >= 5,
            "{path}: a richer sample is needed"
        );
        for k in 0..=full.batches {
            let first = pass(&options, None, k);
            let second = rest(&options, Some(&first.checkpoint));
            let records = [first.records.clone(), second.records].concat();
            let dead = [first.dead.clone(), second.dead].concat();
            assert_eq!(
                records, full.records,
                "{path}: {batch_rows} rows, stop after {k}"
            );
            assert_eq!(dead, full.dead, "{path}: {batch_rows} rows, stop after {k}");
            // Progress reaches its total, which counted only what was left.
            let progress = second.progress;
            assert_eq!(Some(progress.bytes_done), progress.bytes_total, "{path}");
            // And then there is nothing new.
            let third = rest(&options, Some(&second.checkpoint));
            assert_eq!(
                third.batches, 0,
                "{path}: {batch_rows} rows, stop after {k}"
            );
            assert_eq!(third.checkpoint, second.checkpoint);
        }
        // Reopening after every single batch reads the same too.
        let mut checkpoint: Option<Vec<u8>> = None;
        let mut chained = Pass::default();
        loop {
            let step = pass(&options, checkpoint.as_deref(), 1);
            if step.batches == 0 {
                break;
            }
            chained.records.extend(step.records);
            chained.dead.extend(step.dead);
            checkpoint = Some(step.checkpoint);
        }
        assert_eq!(chained.records, full.records, "{path}: {batch_rows} rows");
        assert_eq!(chained.dead, full.dead, "{path}: {batch_rows} rows");
    }
}

const JSONL: &[u8] =
    b"\xEF\xBB\xBF{\"a\":1}\n\n{\"a\":\n{\"b\":2}\r\n42\n  \n{\"c\":[3,\"x\\ny\"]}\n{\"d\":4}";

const CSV: &[u8] =
    b"a,b\n1,x\n\n\"multi\nline\",2\n3\n4,y\r\n5,z\r\n6,\"q\"\"uote\"\n\n7,\xff\n8,last";

#[test]
fn json_lines_resume_at_every_batch_boundary() {
    every_split_reads_like_one_pass("x.jsonl", JSONL);
}

#[test]
fn gzipped_json_lines_resume_at_every_batch_boundary() {
    let mut bytes = gzip(&JSONL[..20]);
    bytes.extend(gzip(&JSONL[20..]));
    every_split_reads_like_one_pass("x.jsonl.gz", &bytes);
}

#[test]
fn csv_resumes_at_every_batch_boundary() {
    every_split_reads_like_one_pass("x.csv", CSV);
}

#[test]
fn gzipped_csv_resumes_at_every_batch_boundary() {
    every_split_reads_like_one_pass("x.csv.gz", &gzip(CSV));
}

#[test]
fn json_arrays_resume_at_every_batch_boundary() {
    every_split_reads_like_one_pass(
        "x.json",
        b"[{\"a\":1}, {\"a\":\"],\"} , 3, {\"bad\":}, ,{\"a\":[5,{\"b\":6}]},\n{\"a\":7}\n,]\n",
    );
    every_split_reads_like_one_pass(
        "y.json",
        b"[{\"a\":1},{\"a\":2},{\"a\":3},{\"a\":4},{\"a\":5}] trailing",
    );
    every_split_reads_like_one_pass(
        "z.json",
        b"[{\"a\":1},{\"a\":2},{\"a\":3},{\"a\":4},{\"a\":5",
    );
}

#[test]
fn json_documents_resume_at_every_batch_boundary() {
    every_split_reads_like_one_pass(
        "x.json",
        b"{\n  \"a\": 1\n}\n{\"a\":2}{\"a\":3} 42 \"s\" {\"bad\": }\n{\"a\":4}\ntrue\n{\"a\":5",
    );
}

/// A Parquet file of `rows` rows `{"id": i, "name": "n<i>"}`, in row groups of 3.
fn parquet_bytes(rows: i64) -> Vec<u8> {
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let id: ArrayRef = Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>()));
    let name: ArrayRef = Arc::new(StringArray::from(
        (0..rows).map(|i| format!("n{i}")).collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_from_iter(vec![("id", id), ("name", name)]).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(3))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

#[test]
fn parquet_resumes_at_every_batch_boundary() {
    every_split_reads_like_one_pass("x.parquet", &parquet_bytes(8));
}

#[test]
fn a_directory_of_every_format_resumes_at_every_batch_boundary() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", JSONL);
    write(dir.path(), "d/b.csv", CSV);
    write(dir.path(), "d/c.parquet", &parquet_bytes(4));
    write(dir.path(), "d/d.json", b"[{\"a\":1},{\"a\":2}]");
    write(dir.path(), "d/e.jsonl.gz", &gzip(b"{\"e\":1}\n{\"e\":2}\n"));
    split_everywhere(dir.path(), "d");
}

/// Append `bytes` to `dir/name`.
fn append(dir: &Path, name: &str, bytes: &[u8]) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(name))
        .unwrap();
    file.write_all(bytes).unwrap();
}

/// The records and deadletters of one full read, as from a fresh source.
fn full_read(options: &FileSourceOptions) -> (Vec<SourceRecord>, Vec<Deadletter>) {
    let all = rest(options, None);
    (all.records, all.dead)
}

#[test]
fn lines_appended_to_json_lines_and_csv_files_are_read_by_the_next_pass_and_only_they() {
    for (name, before, appended) in [
        (
            "a.jsonl",
            &b"{\"a\":1}\n{\"a\":2}\n"[..],
            &b"{\"a\":3}\nbad\n{\"a\":4}\n"[..],
        ),
        ("b.csv", b"a,b\n1,x\n2,y\n", b"3,z\n4\n\"5\n\",w\n"),
        (
            "c.jsonl.gz",
            &gzip(b"{\"a\":1}\n"),
            &gzip(b"{\"a\":2}\n{\"a\":3}\n"),
        ),
        ("d.csv.gz", &gzip(b"a\n1\n"), &gzip(b"2\n3\n")),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), name, before);
        let options = options(dir.path(), name);
        let first = rest(&options, None);
        append(dir.path(), name, appended);
        let second = rest(&options, Some(&first.checkpoint));
        let (records, dead) = full_read(&options);
        assert_eq!(
            [first.records, second.records.clone()].concat(),
            records,
            "{name}"
        );
        assert_eq!([first.dead, second.dead].concat(), dead, "{name}");
        assert!(!second.records.is_empty(), "{name}");
        // Line numbers and offsets go on from where the first pass stopped.
        let first_new = &second.records[0].position;
        assert!(first_new.record > 1 && first_new.offset > 0, "{name}");
        assert_eq!(
            rest(&options, Some(&second.checkpoint)).batches,
            0,
            "{name}"
        );
    }
}

#[test]
fn rows_appended_after_a_csv_record_too_long_to_hold_are_read_by_the_next_pass_and_only_they() {
    // Found by an outside-in probe: the next pass resumed inside the long record and landed
    // its lines as rows.
    let closed = format!("1,\"{}\"\n2,real\n", "lorem\n9,FAKE\n".repeat(30_000));
    let unclosed = format!("1,\"{}", "lorem\n9,FAKE\n".repeat(30_000));
    for (case, body, first_rows) in [
        ("closed", &closed, vec![r#"{"id":2,"note":"real"}"#]),
        ("unclosed", &unclosed, vec![]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "b.csv", format!("id,note\n{body}").as_bytes());
        let options = FileSourceOptions {
            max_record_bytes: 1_000,
            batch_rows: 1,
            ..options(dir.path(), "b.csv")
        };
        let first = rest(&options, None);
        assert_eq!(first.records.len(), first_rows.len(), "{case}");
        assert_eq!(values(&first.records), first_rows, "{case}");
        assert_eq!(first.dead.len(), 1, "{case}");
        append(dir.path(), "b.csv", b"3,appended\n");
        let second = rest(&options, Some(&first.checkpoint));
        assert_eq!(second.records.len(), 1, "{case}");
        assert_eq!(
            values(&second.records),
            vec![r#"{"id":3,"note":"appended"}"#],
            "{case}"
        );
        assert!(second.dead.is_empty(), "{case}");
        assert_eq!(
            rest(&options, Some(&second.checkpoint)).batches,
            0,
            "{case}"
        );
    }
}

#[test]
fn a_pass_with_nothing_new_returns_no_batch_and_counts_nothing_to_read() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", JSONL);
    write(dir.path(), "d/b.csv", CSV);
    write(dir.path(), "d/c.parquet", &parquet_bytes(4));
    write(dir.path(), "d/d.json", b"[{\"a\":1}]");
    let options = options(dir.path(), "d");
    let first = rest(&options, None);
    let mut source = FileSource::open_at(options.clone(), Some(&first.checkpoint)).unwrap();
    assert!(source.files().is_empty());
    assert_eq!(source.progress().bytes_total, Some(0));
    assert_eq!(source.progress().files_total, Some(0));
    assert!(source.next_batch().unwrap().is_none());
    assert_eq!(source.checkpoint().unwrap(), first.checkpoint);
}

#[test]
fn a_file_added_later_is_read_by_the_next_pass() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    let options = options(dir.path(), "d");
    let first = rest(&options, None);
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n{\"b\":2}\n");
    let second = rest(&options, Some(&first.checkpoint));
    assert_eq!(values(&second.records), vec![r#"{"b":1}"#, r#"{"b":2}"#]);
    let checkpoint = FileCheckpoint::from_bytes(&second.checkpoint, "d").unwrap();
    let files: Vec<&str> = checkpoint.files.keys().map(String::as_str).collect();
    assert_eq!(files, vec!["d/a.jsonl", "d/b.jsonl"]);
}

/// Warnings logged while `f` runs, by message.
pub(crate) fn warnings<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    #[derive(Clone, Default)]
    struct Warnings(Arc<Mutex<Vec<String>>>);
    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            struct Message(String);
            impl tracing::field::Visit for Message {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    if field.name() == "message" {
                        self.0 = format!("{value:?}");
                    }
                }
            }
            if *event.metadata().level() == tracing::Level::WARN {
                let mut message = Message(String::new());
                event.record(&mut message);
                self.0.lock().unwrap().push(message.0);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }
    let collected = Warnings::default();
    let out = tracing::subscriber::with_default(collected.clone(), f);
    let taken = std::mem::take(&mut *collected.0.lock().unwrap());
    (out, taken)
}

#[test]
fn a_file_that_shrank_is_a_different_file_read_from_the_start_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.jsonl", b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n");
    let options = options(dir.path(), "a.jsonl");
    let first = rest(&options, None);
    // Copy-truncate rotation, then a new line.
    write(dir.path(), "a.jsonl", b"{\"a\":1}\n");
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert_eq!(values(&second.records), vec![r#"{"a":1}"#]);
    assert_eq!(second.records[0].position.record, 1);
    assert_eq!(
        warned,
        vec![
            "`a.jsonl` is smaller than when it was read: it is a different file now (rotated or rewritten); reading it from the start"
        ]
    );
    assert_eq!(rest(&options, Some(&second.checkpoint)).batches, 0);
}

#[test]
fn a_file_whose_head_changed_is_a_different_file_read_from_the_start_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.csv", b"a\n1\n2\n");
    let options = options(dir.path(), "a.csv");
    let first = rest(&options, None);
    // The same size, other content; and then a longer rewrite.
    write(dir.path(), "a.csv", b"b\n3\n4\n");
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert_eq!(values(&second.records), vec![r#"{"b":3}"#, r#"{"b":4}"#]);
    assert_eq!(
        warned,
        vec![
            "`a.csv` starts differently than when it was read: it is a different file now (rotated or rewritten); reading it from the start"
        ]
    );
    write(dir.path(), "a.csv", b"c\n5\n6\n7\n");
    let third = rest(&options, Some(&second.checkpoint));
    assert_eq!(
        values(&third.records),
        vec![r#"{"c":5}"#, r#"{"c":6}"#, r#"{"c":7}"#]
    );
}

#[test]
fn a_whole_document_file_that_changed_after_it_was_read_is_not_re_read() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.json", b"[{\"a\":1}]");
    write(dir.path(), "d/b.parquet", &parquet_bytes(2));
    write(dir.path(), "d/c.json", b"{\n \"c\": 1\n}\n");
    let options = options(dir.path(), "d");
    let first = rest(&options, None);
    assert_eq!(first.records.len(), 4);
    // Grown, with the same first bytes (a rewrite that changes them is a different file,
    // read again from the start).
    append(dir.path(), "d/a.json", b"\n[{\"a\":2}]");
    append(dir.path(), "d/b.parquet", b"PAR1");
    append(dir.path(), "d/c.json", b"{\"c\":2}\n");
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert_eq!(second.batches, 0);
    assert_eq!(
        warned,
        vec![
            "`d/a.json` changed after it was read; whole-document formats are not re-read",
            "`d/b.parquet` changed after it was read; whole-document formats are not re-read",
            "`d/c.json` changed after it was read; whole-document formats are not re-read",
        ]
    );
    // Once.
    let (third, warned) = warnings(|| rest(&options, Some(&second.checkpoint)));
    assert_eq!(third.batches, 0);
    assert!(warned.is_empty(), "{warned:?}");
}

#[test]
fn a_whole_document_file_stopped_mid_way_continues_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.parquet", &parquet_bytes(5));
    let options = FileSourceOptions {
        batch_rows: 2,
        ..options(dir.path(), "a.parquet")
    };
    let first = pass(&options, None, 1);
    let second = rest(&options, Some(&first.checkpoint));
    let ids: Vec<i64> = second
        .records
        .iter()
        .map(|r| r.value["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![2, 3, 4]);
    assert_eq!(second.records[0].position.record, 3);
}

#[test]
fn a_file_gone_since_the_checkpoint_is_dropped_from_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    let options = options(dir.path(), "d");
    let first = rest(&options, None);
    std::fs::remove_file(dir.path().join("d/a.jsonl")).unwrap();
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert_eq!(second.batches, 0);
    assert!(warned.is_empty(), "{warned:?}");
    let checkpoint = FileCheckpoint::from_bytes(&second.checkpoint, "d").unwrap();
    let files: Vec<&str> = checkpoint.files.keys().map(String::as_str).collect();
    assert_eq!(files, vec!["d/b.jsonl"]);
}

#[test]
fn a_file_that_vanished_before_its_turn_is_dropped_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n{\"a\":2}\n");
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    let options = FileSourceOptions {
        batch_rows: 1,
        ..options(dir.path(), "d")
    };
    let first = pass(&options, None, 1);
    let mut source = FileSource::open_at(options.clone(), Some(&first.checkpoint)).unwrap();
    std::fs::remove_file(dir.path().join("d/a.jsonl")).unwrap();
    let error = source.next_batch().unwrap_err();
    assert!(matches!(error, SourceError::Vanished { .. }), "{error}");
    let batch = source.next_batch().unwrap().unwrap();
    assert_eq!(values(&batch.records), vec![r#"{"b":1}"#]);
    let checkpoint = FileCheckpoint::from_bytes(&source.checkpoint().unwrap(), "d").unwrap();
    let files: Vec<&str> = checkpoint.files.keys().map(String::as_str).collect();
    assert_eq!(files, vec!["d/b.jsonl"]);
}

#[test]
fn a_file_read_part_way_records_where_it_stopped_in_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let text = b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n";
    write(dir.path(), "a.jsonl", text);
    let options = FileSourceOptions {
        batch_rows: 2,
        ..options(dir.path(), "a.jsonl")
    };
    let first = pass(&options, None, 1);
    let checkpoint = FileCheckpoint::from_bytes(&first.checkpoint, "a.jsonl").unwrap();
    let progress = &checkpoint.files["a.jsonl"];
    assert_eq!((progress.offset, progress.records), (16, 2));
    assert_eq!((progress.size, progress.head_len), (24, 24));
    assert_eq!(progress.head, super::checkpoint::fnv1a_hex(text));
    assert!(!progress.done);
    // The total counts only what is left.
    let source = FileSource::open_at(options.clone(), Some(&first.checkpoint)).unwrap();
    assert_eq!(source.progress().bytes_total, Some(8));
    let second = rest(&options, Some(&first.checkpoint));
    let checkpoint = FileCheckpoint::from_bytes(&second.checkpoint, "a.jsonl").unwrap();
    assert!(checkpoint.files["a.jsonl"].done);
    assert_eq!(checkpoint.files["a.jsonl"].offset, 24);
}

#[test]
fn bad_checkpoint_bytes_are_a_bad_checkpoint_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.jsonl", b"{}\n");
    for bytes in [
        &b""[..],
        b"\x00\x01",
        b"{\"v\":1}",
        b"{\"v\":9,\"files\":{}}",
        b"{\"v\":1,\"files\":{\"a.jsonl\":{\"offset\":-1}}}",
    ] {
        let error = FileSource::open_at(options(dir.path(), "a.jsonl"), Some(bytes)).unwrap_err();
        assert!(
            matches!(error, SourceError::BadCheckpoint { ref path, .. } if path == "a.jsonl"),
            "{error}"
        );
        assert!(!error.is_retryable());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Files written in steps; after each step a pass stops after a random number of
    /// batches. All passes together read every record exactly once, in order.
    #[test]
    fn passes_over_growing_files_read_every_record_exactly_once_in_order(
        steps in proptest::collection::vec(
            (0usize..3, 0usize..5, 0usize..4, any::<bool>()),
            1..8,
        ),
        batch_rows in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let names = ["d/a.jsonl", "d/b.csv", "d/c.jsonl"];
        write(dir.path(), "d/b.csv", b"n,f\n");
        let mut written: Vec<String> = Vec::new();
        let mut next = 0u64;
        let options = FileSourceOptions { batch_rows, ..options(dir.path(), "d") };
        let mut checkpoint: Option<Vec<u8>> = None;
        let mut seen: Vec<String> = Vec::new();
        for (file, lines, stop, blank) in steps {
            let name = names[file];
            let mut text = String::new();
            for _ in 0..lines {
                if name.ends_with(".csv") {
                    text.push_str(&format!("{next},{name}\n"));
                } else {
                    text.push_str(&format!("{{\"n\":{next},\"f\":\"{name}\"}}\n"));
                }
                if blank {
                    text.push('\n');
                }
                written.push(format!("{name}:{next}"));
                next += 1;
            }
            if dir.path().join(name).exists() {
                append(dir.path(), name, text.as_bytes());
            } else {
                write(dir.path(), name, text.as_bytes());
            }
            let step = pass(&options, checkpoint.as_deref(), stop);
            for record in &step.records {
                seen.push(format!("{}:{}", record.position.uri, record.value["n"]));
            }
            prop_assert!(step.dead.is_empty());
            checkpoint = Some(step.checkpoint);
        }
        let last = rest(&options, checkpoint.as_deref());
        for record in &last.records {
            seen.push(format!("{}:{}", record.position.uri, record.value["n"]));
        }
        // Each file's records in the order written, each exactly once.
        for name in names {
            let mine = |list: &[String]| -> Vec<String> {
                list.iter().filter(|s| s.starts_with(&format!("{name}:"))).cloned().collect()
            };
            prop_assert_eq!(mine(&seen), mine(&written));
        }
        prop_assert_eq!(seen.len(), written.len());
    }
}

#[test]
fn a_broken_link_a_fifo_or_a_link_to_a_directory_found_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "in/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "elsewhere/x.jsonl", b"{\"a\":9}\n");
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(dir.path().join(target), dir.path().join("in").join(name))
            .unwrap();
    };
    link("gone.jsonl", "b.jsonl");
    link("elsewhere", "d.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("in/c.jsonl"))
        .status()
        .unwrap();
    assert!(made.success());
    for path in ["in", "in/*.jsonl"] {
        let (read, warned) = warnings(|| rest(&options(dir.path(), path), None));
        assert_eq!(values(&read.records), vec![r#"{"a":1}"#], "{path}");
        let mut expected = vec![
            "skipping `in/b.jsonl`: a symbolic link to nothing",
            "skipping `in/c.jsonl`: not a regular file (a FIFO, socket or device)",
        ];
        // A glob follows a link to a directory (and `*.jsonl` matches no file in it).
        if path == "in" {
            expected.push("skipping `in/d.jsonl`: a symbolic link to a directory (not followed)");
        }
        let mut warned = warned;
        warned.sort();
        assert_eq!(warned, expected, "{path}");
    }
}
