//! The File source's watermark: a checkpoint that stays small however many files are read,
//! and what happens to files that appear or change below it.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::resume_tests::warnings;
use super::testing::*;
use super::watermark::Clock;
use super::{FileCheckpoint, FileFormat, FileSource, FileSourceOptions, WatermarkStep};
use crate::sources::{Source, SourceRecord};

/// The clock of a test pass: now, with a margin well above the file system's clock tick, so
/// a file written after a pass is later than its watermark without the test sleeping.
fn clock() -> Clock {
    Clock {
        now: SystemTime::now(),
        margin: MARGIN,
        wait: false,
    }
}

const MARGIN: Duration = Duration::from_millis(50);

/// Let the files just written become older than the margin, so they may leave.
fn age() {
    std::thread::sleep(MARGIN + Duration::from_millis(20));
}

/// What a pass read, the checkpoint after it and the largest checkpoint of any batch.
#[derive(Debug, Default)]
struct Pass {
    records: Vec<SourceRecord>,
    batches: usize,
    checkpoint: Vec<u8>,
    largest: usize,
}

/// Open at `checkpoint` and read at most `max_batches` batches.
fn pass(options: &FileSourceOptions, checkpoint: Option<&[u8]>, max_batches: usize) -> Pass {
    let mut source = FileSource::open_with_clock(options.clone(), checkpoint, clock()).unwrap();
    let mut out = Pass::default();
    while out.batches < max_batches {
        let Some(batch) = source.next_batch().unwrap() else {
            break;
        };
        out.batches += 1;
        out.records.extend(batch.records);
        out.largest = out.largest.max(source.checkpoint().unwrap().len());
    }
    out.checkpoint = source.checkpoint().unwrap();
    out.largest = out.largest.max(out.checkpoint.len());
    out
}

fn rest(options: &FileSourceOptions, checkpoint: Option<&[u8]>) -> Pass {
    pass(options, checkpoint, usize::MAX)
}

fn parsed(checkpoint: &[u8]) -> FileCheckpoint {
    FileCheckpoint::from_bytes(checkpoint, "d").unwrap()
}

fn keys(checkpoint: &[u8]) -> Vec<String> {
    parsed(checkpoint).files.into_keys().collect()
}

/// Options reading `d` whose entries leave as soon as they may (a budget of none).
fn tight(dir: &Path) -> FileSourceOptions {
    FileSourceOptions {
        checkpoint_bytes: 0,
        ..options(dir, "d")
    }
}

/// The uri and value of each record, for comparing what passes read.
fn seen(records: &[SourceRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r.position.uri,
                serde_json::Value::Object(r.value.clone())
            )
        })
        .collect()
}

/// The number of files of the many-files test: `SKIPPR_TEST_FILES`, else 100,000.
fn many() -> usize {
    std::env::var("SKIPPR_TEST_FILES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn many_small_files_are_read_once_across_passes_with_a_checkpoint_under_64_kb() {
    let dir = tempfile::tempdir().unwrap();
    let files = many();
    let started = Instant::now();
    // Files named by sequence in folders of 1,000, the even ones first: the odd ones come
    // late, below the watermark (and a few new ones above it).
    let name = |i: usize| format!("d/{:03}/{i:07}.jsonl", i / 1000);
    let body = |i: usize| format!("{{\"i\":{i}}}\n{{\"i\":{i},\"second\":true}}\n");
    for i in (0..files).step_by(2) {
        write(dir.path(), &name(i), body(i).as_bytes());
    }
    let written = started.elapsed();
    age();
    let options = FileSourceOptions {
        batch_rows: 4_000,
        ..options(dir.path(), "d")
    };
    let mut all = Vec::new();
    let mut largest = 0;
    let mut checkpoint: Option<Vec<u8>> = None;
    let mut passes = 0;
    let mut late_written = false;
    loop {
        let step = pass(&options, checkpoint.as_deref(), 7);
        passes += 1;
        largest = largest.max(step.largest);
        all.extend(seen(&step.records));
        let done = step.batches == 0;
        checkpoint = Some(step.checkpoint);
        if done && late_written {
            break;
        }
        if passes == 3 || (done && !late_written) {
            // Late files everywhere, below the watermark and above it.
            for i in (1..files).step_by(2) {
                write(dir.path(), &name(i), body(i).as_bytes());
            }
            age();
            late_written = true;
        }
    }
    let elapsed = started.elapsed();
    let mut expected: Vec<String> = (0..files)
        .flat_map(|i| {
            [
                format!("{} {{\"i\":{i}}}", name(i)),
                format!("{} {{\"i\":{i},\"second\":true}}", name(i)),
            ]
        })
        .collect();
    expected.sort();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(sorted.len(), expected.len(), "every row once");
    assert!(sorted == expected, "every row once");
    let last = checkpoint.unwrap();
    eprintln!(
        "{files} files: {passes} passes in {elapsed:?} (writing the first half {written:?}); largest checkpoint {largest} bytes, last {} bytes",
        last.len()
    );
    assert!(largest < 64 * 1024, "{largest}");
    // The newest files keep their entries, up to the budget; all others are below the
    // watermark.
    let last = parsed(&last);
    let kept = last.files.len();
    assert!(kept > 100 && kept < 400, "{kept}");
    let mark = last.watermark.clone().unwrap();
    assert!(mark.beyond.is_empty());
    let oldest_kept = last.files.keys().next().unwrap();
    assert!(
        Path::new(oldest_kept) > Path::new(&mark.path),
        "{oldest_kept}"
    );
    let last = last.to_bytes();
    // A pass with nothing new reads nothing and opens no file.
    let again = rest(&options, Some(&last));
    assert_eq!(again.batches, 0);
}

#[test]
fn a_checkpoint_within_its_budget_keeps_every_file_and_no_watermark() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        write(dir.path(), &format!("d/{i:02}.jsonl"), b"{\"a\":1}\n");
    }
    age();
    let options = options(dir.path(), "d");
    let first = rest(&options, None);
    assert_eq!(first.records.len(), 50);
    assert!(first.checkpoint.starts_with(br#"{"v":1,"files":{"#));
    assert_eq!(keys(&first.checkpoint).len(), 50);
    // So a file that grows, whatever its place, is read on from where it was left.
    let mut text = std::fs::read(dir.path().join("d/00.jsonl")).unwrap();
    text.extend(b"{\"a\":2}\n");
    write(dir.path(), "d/00.jsonl", &text);
    let second = rest(&options, Some(&first.checkpoint));
    assert_eq!(values(&second.records), vec![r#"{"a":2}"#]);
    assert_eq!(second.records[0].position.record, 2);
}

#[test]
fn files_read_to_their_end_leave_the_checkpoint_below_a_watermark_once_over_budget() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["d/a.jsonl", "d/b.jsonl", "d/c.jsonl", "d/d.jsonl"] {
        write(dir.path(), name, b"{\"a\":1}\n");
    }
    age();
    // A budget of two entries: the oldest paths leave.
    let one = br#""d/a.jsonl":{"offset":8,"records":1,"size":8,"head_len":8,"head":"0123456789abcdef","done":true},"#.len();
    let options = FileSourceOptions {
        checkpoint_bytes: 2 * one,
        ..options(dir.path(), "d")
    };
    let first = rest(&options, None);
    assert_eq!(first.records.len(), 4);
    let checkpoint = parsed(&first.checkpoint);
    assert_eq!(checkpoint.v, 2);
    assert!(first.checkpoint.starts_with(br#"{"v":2,"files":{"#));
    assert_eq!(keys(&first.checkpoint), vec!["d/c.jsonl", "d/d.jsonl"]);
    let mark = checkpoint.watermark.unwrap();
    assert_eq!(mark.path, "d/b.jsonl");
    assert_eq!(mark.listed_path, "d");
    assert_eq!(mark.format, None);
    // The next pass opens none of them.
    let source =
        FileSource::open_with_clock(options.clone(), Some(&first.checkpoint), clock()).unwrap();
    assert!(source.files().is_empty());
    assert_eq!(rest(&options, Some(&first.checkpoint)).batches, 0);
    // Files still growing (changed within the margin) do not leave.
    let fresh = FileSource::open_with_clock(
        options.clone(),
        None,
        Clock {
            now: SystemTime::now(),
            margin: Duration::from_secs(3600),
            wait: false,
        },
    );
    let mut fresh = fresh.unwrap();
    while fresh.next_batch().unwrap().is_some() {}
    let checkpoint = parsed(&fresh.checkpoint().unwrap());
    assert_eq!(checkpoint.files.len(), 4);
    assert_eq!(checkpoint.watermark, None);
}

#[test]
fn files_unchanged_for_the_settle_time_leave_before_recent_ones() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    write(dir.path(), "d/d.jsonl", b"{\"d\":1}\n");
    std::thread::sleep(Duration::from_millis(1200));
    // Written after the settle time: the recent ones, though they sort first.
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "d/c.jsonl", b"{\"c\":1}\n");
    age();
    let one = br#""d/a.jsonl":{"offset":8,"records":1,"size":8,"head_len":8,"head":"0123456789abcdef","done":true},"#.len();
    let options = FileSourceOptions {
        checkpoint_bytes: 2 * one,
        settle: Duration::from_secs(1),
        ..options(dir.path(), "d")
    };
    let first = rest(&options, None);
    assert_eq!(first.records.len(), 4);
    assert_eq!(keys(&first.checkpoint), vec!["d/a.jsonl", "d/c.jsonl"]);
    assert_eq!(
        parsed(&first.checkpoint).watermark.unwrap().path,
        "d/d.jsonl"
    );
    // Kept, a recent file that grows is read on from where it was left, below the watermark.
    let mut text = std::fs::read(dir.path().join("d/a.jsonl")).unwrap();
    text.extend(b"{\"a\":2}\n");
    write(dir.path(), "d/a.jsonl", &text);
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert!(warned.is_empty(), "{warned:?}");
    assert_eq!(values(&second.records), vec![r#"{"a":2}"#]);
}

#[test]
fn a_late_file_below_the_watermark_is_read_from_the_start_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/2026-01-01.jsonl", b"{\"day\":1}\n");
    write(dir.path(), "d/2026-01-03.jsonl", b"{\"day\":3}\n");
    age();
    let options = tight(dir.path());
    let first = rest(&options, None);
    assert_eq!(first.records.len(), 2);
    assert!(keys(&first.checkpoint).is_empty());
    assert_eq!(
        parsed(&first.checkpoint).watermark.unwrap().path,
        "d/2026-01-03.jsonl"
    );
    // A day that arrives late, and one after the watermark.
    write(
        dir.path(),
        "d/2026-01-02.jsonl",
        b"{\"day\":2}\n{\"day\":2.5}\n",
    );
    write(dir.path(), "d/2026-01-04.jsonl", b"{\"day\":4}\n");
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert_eq!(
        values(&second.records),
        vec![r#"{"day":2}"#, r#"{"day":2.5}"#, r#"{"day":4}"#]
    );
    assert_eq!(second.records[0].position.record, 1);
    assert_eq!(
        warned,
        vec![
            "`d/2026-01-02.jsonl` sorts at or below the checkpoint's watermark `d/2026-01-03.jsonl` but appeared or changed after the files there were read: reading it from the start (if it was read before, its records are read again)"
        ]
    );
    // Once.
    age();
    let (third, warned) = warnings(|| rest(&options, Some(&second.checkpoint)));
    assert_eq!(third.batches, 0);
    assert!(warned.is_empty(), "{warned:?}");
    assert_eq!(
        parsed(&third.checkpoint).watermark.unwrap().path,
        "d/2026-01-04.jsonl"
    );
}

#[test]
fn a_file_that_grew_after_it_left_the_checkpoint_is_read_again_from_the_start_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    age();
    let options = tight(dir.path());
    let first = rest(&options, None);
    assert!(keys(&first.checkpoint).is_empty());
    // Its entry is gone: where it was left is not known. Nothing is lost; what it held
    // before is read again, and the warning says so.
    let mut text = std::fs::read(dir.path().join("d/a.jsonl")).unwrap();
    text.extend(b"{\"a\":2}\n");
    write(dir.path(), "d/a.jsonl", &text);
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert_eq!(values(&second.records), vec![r#"{"a":1}"#, r#"{"a":2}"#]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0]
            .starts_with("`d/a.jsonl` sorts at or below the checkpoint's watermark `d/b.jsonl`")
            && warned[0].ends_with("(if it was read before, its records are read again)"),
        "{warned:?}"
    );
    // A file whose status changed without new content (`chmod`, `touch`) is read again too.
    age();
    let third = rest(&options, Some(&second.checkpoint));
    assert_eq!(third.batches, 0);
    let file = std::fs::File::open(dir.path().join("d/b.jsonl")).unwrap();
    file.set_modified(SystemTime::now()).unwrap();
    let fourth = rest(&options, Some(&third.checkpoint));
    assert_eq!(values(&fourth.records), vec![r#"{"b":1}"#]);
}

#[test]
fn a_file_not_read_to_its_end_keeps_its_entry_below_the_watermark() {
    let dir = tempfile::tempdir().unwrap();
    // A last line still being written: the file stays unfinished before it.
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n{\"a\":");
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    write(dir.path(), "d/c.jsonl", b"{\"c\":1}\n");
    age();
    let options = tight(dir.path());
    let first = rest(&options, None);
    assert_eq!(first.records.len(), 3);
    assert_eq!(keys(&first.checkpoint), vec!["d/a.jsonl"]);
    assert_eq!(
        parsed(&first.checkpoint).watermark.unwrap().path,
        "d/c.jsonl"
    );
    // The writer finishes the line: read on from where it was left, once.
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n{\"a\":2}\n");
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert!(warned.is_empty(), "{warned:?}");
    assert_eq!(values(&second.records), vec![r#"{"a":2}"#]);
    age();
    let third = rest(&options, Some(&second.checkpoint));
    assert_eq!(third.batches, 0);
    assert!(keys(&third.checkpoint).is_empty());
}

#[test]
fn a_pass_stopped_among_late_files_leaves_a_step_in_front_of_the_old_watermark() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["d/a.jsonl", "d/c.jsonl", "d/e.jsonl"] {
        write(dir.path(), name, b"{\"x\":1}\n");
    }
    age();
    let options = FileSourceOptions {
        batch_rows: 1,
        ..tight(dir.path())
    };
    let first = rest(&options, None);
    let mark = parsed(&first.checkpoint).watermark.unwrap();
    assert_eq!(mark.path, "d/e.jsonl");
    assert!(mark.beyond.is_empty());
    // Late files at d/b and d/d; the next pass stops after d/b (a deadline).
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    write(dir.path(), "d/d.jsonl", b"{\"d\":1}\n");
    age();
    let second = pass(&options, Some(&first.checkpoint), 1);
    assert_eq!(values(&second.records), vec![r#"{"b":1}"#]);
    // d/b left under a step of its own; the old step, and its time, still judge d/d.
    assert!(keys(&second.checkpoint).is_empty());
    let stepped = parsed(&second.checkpoint).watermark.unwrap();
    assert_eq!(stepped.path, "d/b.jsonl");
    assert!(stepped.changed_before_ms > mark.changed_before_ms);
    assert_eq!(
        stepped.beyond,
        vec![WatermarkStep {
            path: "d/e.jsonl".into(),
            changed_before_ms: mark.changed_before_ms,
        }]
    );
    assert_eq!(stepped.top(), "d/e.jsonl");
    let third = rest(&options, Some(&second.checkpoint));
    assert_eq!(values(&third.records), vec![r#"{"d":1}"#]);
    // Past the old watermark: one step again.
    let merged = parsed(&third.checkpoint).watermark.unwrap();
    assert_eq!(merged.path, "d/e.jsonl");
    assert!(merged.beyond.is_empty());
    assert!(merged.changed_before_ms >= stepped.changed_before_ms);
    assert_eq!(rest(&options, Some(&third.checkpoint)).batches, 0);
}

#[test]
fn a_file_renamed_below_the_watermark_keeps_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "d/m.jsonl", b"{\"m\":1}\n");
    // The log being written sorts last, and keeps its entry while it is not finished.
    write(dir.path(), "d/z.jsonl", b"{\"z\":1}\n{\"z\":");
    age();
    let options = tight(dir.path());
    let first = rest(&options, None);
    assert_eq!(keys(&first.checkpoint), vec!["d/z.jsonl"]);
    assert_eq!(
        parsed(&first.checkpoint).watermark.unwrap().path,
        "d/m.jsonl"
    );
    // Rotated by rename to a name below the watermark, then finished.
    std::fs::rename(dir.path().join("d/z.jsonl"), dir.path().join("d/b.jsonl")).unwrap();
    write(dir.path(), "d/b.jsonl", b"{\"z\":1}\n{\"z\":2}\n");
    let (second, warned) = warnings(|| rest(&options, Some(&first.checkpoint)));
    assert!(warned.is_empty(), "{warned:?}");
    assert_eq!(values(&second.records), vec![r#"{"z":2}"#]);
}

#[test]
fn files_a_widened_path_lists_below_the_watermark_are_read_and_the_others_not() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "d/b.csv", b"b\n1\n");
    write(dir.path(), "d/c.jsonl", b"{\"c\":1}\n");
    age();
    let jsonl = FileSourceOptions {
        checkpoint_bytes: 0,
        ..options(dir.path(), "d/*.jsonl")
    };
    let first = rest(&jsonl, None);
    assert_eq!(first.records.len(), 2);
    assert_eq!(
        parsed(&first.checkpoint).watermark.unwrap().path,
        "d/c.jsonl"
    );
    let everything = tight(dir.path());
    let (second, warned) = warnings(|| rest(&everything, Some(&first.checkpoint)));
    assert_eq!(values(&second.records), vec![r#"{"b":1}"#]);
    assert_eq!(
        warned,
        vec![
            "the File source's `path` is `d` but was `d/*.jsonl` when files left the checkpoint below `d/c.jsonl`: the files at or below it that `d/*.jsonl` did not list are read from the start",
            "`d/b.csv` sorts at or below the checkpoint's watermark `d/c.jsonl` but appeared or changed after the files there were read: reading it from the start (if it was read before, its records are read again)",
        ]
    );
    let mark = parsed(&second.checkpoint).watermark.unwrap();
    assert_eq!(mark.listed_path, "d");
    let (third, warned) = warnings(|| rest(&everything, Some(&second.checkpoint)));
    assert_eq!(third.batches, 0);
    assert!(warned.is_empty(), "{warned:?}");
}

#[test]
fn files_skipped_for_their_format_below_the_watermark_are_read_once_a_format_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    write(dir.path(), "d/b.dat", b"b\n1\n");
    write(dir.path(), "d/c.jsonl", b"{\"c\":1}\n");
    age();
    let first = rest(&tight(dir.path()), None);
    assert_eq!(first.records.len(), 2);
    let as_csv = FileSourceOptions {
        format: Some(FileFormat::Csv),
        ..tight(dir.path())
    };
    let second = rest(&as_csv, Some(&first.checkpoint));
    assert_eq!(values(&second.records), vec![r#"{"b":1}"#]);
}

#[test]
fn a_version_1_checkpoint_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n{\"a\":2}\n");
    write(dir.path(), "d/b.jsonl", b"{\"b\":1}\n");
    // As the File source wrote it before watermarks: d/a read up to its first line.
    let old = br#"{"v":1,"files":{"d/a.jsonl":{"offset":8,"records":1,"size":8,"head_len":8,"head":"49211944f5c975c1","done":true}}}"#;
    let resumed = FileSource::open_at(options(dir.path(), "d"), Some(old)).unwrap();
    assert_eq!(resumed.files().len(), 2);
    let second = rest(&options(dir.path(), "d"), Some(old));
    assert_eq!(values(&second.records), vec![r#"{"a":2}"#, r#"{"b":1}"#]);
    assert!(
        second
            .checkpoint
            .starts_with(br#"{"v":1,"files":{"d/a.jsonl":{"offset":16,"#)
    );
    // And with a watermark it is written as version 2, read as such.
    age();
    let third = rest(&tight(dir.path()), Some(&second.checkpoint));
    assert!(
        third.checkpoint.starts_with(br#"{"v":2,"files":{}"#),
        "{}",
        String::from_utf8_lossy(&third.checkpoint)
    );
    let mut expected = FileCheckpoint::new();
    expected.v = 2;
    expected.watermark = parsed(&third.checkpoint).watermark;
    assert_eq!(parsed(&third.checkpoint), expected);
    assert_eq!(
        FileCheckpoint::from_bytes(&expected.to_bytes(), "d").unwrap(),
        expected
    );
}

#[test]
fn a_listing_of_many_files_just_written_waits_for_them_to_leave_the_checkpoint() {
    let budget = 4 * 1024;
    let written = |dir: &Path| {
        for i in 0..300 {
            write(dir, &format!("d/{i:03}.jsonl"), b"{\"a\":1}\n");
        }
    };
    let read = |dir: &Path, clock: Clock| {
        let options = FileSourceOptions {
            checkpoint_bytes: budget,
            ..options(dir, "d")
        };
        let mut source = FileSource::open_with_clock(options, None, clock).unwrap();
        while source.next_batch().unwrap().is_some() {}
        parsed(&source.checkpoint().unwrap())
    };
    let margin = Duration::from_secs(1);
    // Not waiting, files changed within the margin keep their entries.
    let dir = tempfile::tempdir().unwrap();
    written(dir.path());
    let kept = read(
        dir.path(),
        Clock {
            now: SystemTime::now(),
            margin,
            wait: false,
        },
    );
    assert_eq!(kept.files.len(), 300);
    assert_eq!(kept.watermark, None);
    // Waiting, they are older than it when listed again, and leave.
    let dir = tempfile::tempdir().unwrap();
    written(dir.path());
    let started = Instant::now();
    let small = read(
        dir.path(),
        Clock {
            now: SystemTime::now(),
            margin,
            wait: true,
        },
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        small.to_bytes().len() < budget + 200,
        "{}",
        small.files.len()
    );
    assert_eq!(small.watermark.unwrap().path.len(), "d/000.jsonl".len());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Files created in any order, some below the watermark, by passes that stop after any
    /// number of batches: every record is read exactly once.
    #[test]
    fn files_arriving_in_any_order_are_read_exactly_once(
        steps in proptest::collection::vec(
            (proptest::collection::vec(0u8..24, 0..6), 0usize..4, proptest::prelude::any::<bool>()),
            1..7,
        ),
        batch_rows in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "d/00.jsonl", b"{\"n\":0}\n");
        let mut written = vec!["d/00.jsonl".to_owned()];
        let options = FileSourceOptions { batch_rows, ..tight(dir.path()) };
        let mut checkpoint: Option<Vec<u8>> = None;
        let mut read: Vec<String> = Vec::new();
        for (names, stop, wait) in steps {
            for n in names {
                let name = format!("d/{n:02}.jsonl");
                if !written.contains(&name) {
                    write(dir.path(), &name, format!("{{\"n\":{n}}}\n").as_bytes());
                    written.push(name);
                }
            }
            if wait {
                age();
            }
            let step = pass(&options, checkpoint.as_deref(), stop);
            read.extend(step.records.iter().map(|r| r.position.uri.to_string()));
            checkpoint = Some(step.checkpoint);
        }
        let last = rest(&options, checkpoint.as_deref());
        read.extend(last.records.iter().map(|r| r.position.uri.to_string()));
        read.sort();
        written.sort();
        proptest::prop_assert_eq!(read, written);
    }
}
