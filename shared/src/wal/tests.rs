//! Scenario tests of [`DiskWal`] on a real directory (the conformance suite every [`Wal`]
//! passes, then what only segment files have: rolling, torn tails, corruption, the segment
//! set), crash tests through the failpoints, and a model test that checks random operation
//! sequences step by step against a `VecDeque`.

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::conformance::{self, flat, part};
use super::disk::segment_path;
use super::failpoint;
use super::format::{self, COMMIT_RECORD_LEN, RECORD_HEADER_LEN, SegmentHeader};
use super::*;

fn options() -> WalOptions {
    WalOptions {
        segment_target_bytes: 1 << 20,
        fsync: false,
        ..WalOptions::default()
    }
}

/// Every batch in its own segment: a segment rolls as soon as it holds one batch.
fn one_batch_per_segment() -> WalOptions {
    WalOptions {
        segment_target_bytes: 1,
        fsync: false,
        ..WalOptions::default()
    }
}

fn open(dir: &Path, options: WalOptions) -> (DiskWal, Recovery) {
    DiskWal::open(dir, options).unwrap()
}

fn ids(wal: &DiskWal) -> Vec<u64> {
    wal.batches().iter().map(|batch| batch.id.0).collect()
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn set_len(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x20;
    fs::write(path, bytes).unwrap();
}

fn read_u32_at(path: &Path, offset: u64) -> u32 {
    let bytes = fs::read(path).unwrap();
    let at = offset as usize;
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------- round trips and reopening

/// A place for the conformance suite: a fresh directory, opened with `options`.
struct DiskPlace {
    dir: tempfile::TempDir,
    options: WalOptions,
}

impl conformance::Place for DiskPlace {
    fn open(&self) -> (Box<dyn Wal + '_>, Recovery) {
        let (wal, recovery) = open(self.dir.path(), self.options.clone());
        (Box::new(wal), recovery)
    }
}

fn disk_suite(options: WalOptions) {
    conformance::run(&|| {
        Box::new(DiskPlace {
            dir: tempfile::tempdir().unwrap(),
            options: options.clone(),
        })
    });
}

#[test]
fn the_disk_wal_passes_the_conformance_suite() {
    disk_suite(WalOptions::default());
}

#[test]
fn the_disk_wal_passes_the_conformance_suite_with_small_segments() {
    disk_suite(options());
}

#[test]
fn the_disk_wal_passes_the_conformance_suite_with_one_batch_per_segment() {
    disk_suite(one_batch_per_segment());
}

/// What the suite's reopen scenario does not check, because only a disk listing has it: each
/// batch's segment, offset, size and position after a reopen, and the WAL's size.
#[test]
fn reopening_after_a_clean_close_lists_the_same_segments_offsets_positions_and_stats() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    for i in 0..5 {
        wal.append(
            format!("pos{i}").as_bytes(),
            &[part("a", 1, flat(i, i as i64))],
        )
        .unwrap();
    }
    let before = wal.batches().to_vec();
    let stats = wal.stats();
    drop(wal);
    let (wal, recovery) = open(dir.path(), options());
    assert_eq!(recovery.batches, 5);
    assert_eq!(wal.batches(), &before[..]);
    assert_eq!(wal.stats(), stats);
    assert_eq!(
        wal.read(BatchId(3)).unwrap(),
        vec![part("a", 1, flat(2, 2))]
    );
}

#[test]
fn a_missing_directory_opens_as_a_fresh_wal_starting_at_batch_one() {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("data").join("ws_pipe");
    let (wal, recovery) = open(&wal_dir, options());
    assert_eq!(recovery, Recovery::default());
    assert!(wal.batches().is_empty());
    assert_eq!(wal.next_id(), BatchId(1));
    assert_eq!(wal.last_position(), None);
    assert_eq!(
        segment_files(&wal_dir),
        vec!["wal-00000000000000000001.seg"]
    );
    assert_eq!(
        wal.stats(),
        WalStats {
            segments: 1,
            bytes: 28,
            batches: 0
        }
    );
}

#[test]
fn segments_roll_once_the_active_segment_reaches_the_size_target() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    let first = wal.append(b"p1", &[part("a", 1, flat(10, 0))]).unwrap();
    // A target just above one batch: the second batch still fits, the third rolls.
    let target = 28 + first.bytes + 1;
    drop(wal);
    let small = WalOptions {
        segment_target_bytes: target,
        fsync: false,
        ..WalOptions::default()
    };
    let (mut wal, _) = open(dir.path(), small.clone());
    let second = wal.append(b"p2", &[part("a", 1, flat(10, 0))]).unwrap();
    let third = wal.append(b"p3", &[part("a", 1, flat(10, 0))]).unwrap();
    assert_eq!((first.segment, second.segment, third.segment), (1, 1, 3));
    assert_eq!(
        third.offset,
        28 + 2,
        "header with a 2-byte previous position"
    );
    assert_eq!(
        segment_files(dir.path()),
        vec![
            "wal-00000000000000000001.seg",
            "wal-00000000000000000003.seg"
        ]
    );
    assert_eq!(wal.stats().segments, 2);
    drop(wal);
    let (wal, _) = open(dir.path(), small);
    assert_eq!(ids(&wal), vec![1, 2, 3]);
    assert_eq!(
        wal.read(BatchId(3)).unwrap(),
        vec![part("a", 1, flat(10, 0))]
    );
}

#[test]
fn a_zero_segment_target_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let error = DiskWal::open(
        dir.path(),
        WalOptions {
            segment_target_bytes: 0,
            fsync: false,
            ..WalOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(error, WalError::InvalidOptions { .. }), "{error}");
}

// ---------------------------------------------------------------- ids and reclaim

#[test]
fn reclaim_deletes_only_segments_whose_batches_are_all_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    let first = wal.append(b"p1", &[part("a", 1, flat(10, 0))]).unwrap();
    drop(wal);
    // Two batches per segment: 1-2, 3-4, 5.
    // (Headers are 28 bytes plus the previous position, 2 bytes here.)
    let two = WalOptions {
        segment_target_bytes: 40 + first.bytes,
        fsync: false,
        ..WalOptions::default()
    };
    let (mut wal, _) = open(dir.path(), two.clone());
    for i in 2..=5 {
        wal.append(format!("p{i}").as_bytes(), &[part("a", 1, flat(10, 0))])
            .unwrap();
    }
    assert_eq!(wal.segment_ranges(), vec![(1, 3), (3, 5), (5, 6)]);

    // Batch 1 acknowledged: its segment still holds batch 2.
    assert_eq!(wal.reclaim_through(BatchId(1)).unwrap(), 0);
    assert_eq!(ids(&wal), vec![2, 3, 4, 5]);
    assert!(matches!(
        wal.read(BatchId(1)).unwrap_err(),
        WalError::NotFound { batch: BatchId(1) }
    ));
    // Through 3: segment 1-2 goes, 3-4 stays for batch 4.
    assert_eq!(wal.reclaim_through(BatchId(3)).unwrap(), 1);
    assert_eq!(wal.segment_ranges(), vec![(3, 5), (5, 6)]);
    assert_eq!(ids(&wal), vec![4, 5]);
    assert_eq!(
        wal.read(BatchId(4)).unwrap(),
        vec![part("a", 1, flat(10, 0))]
    );
    // Again through 3, or through 0: nothing to do.
    assert_eq!(wal.reclaim_through(BatchId(3)).unwrap(), 0);
    assert_eq!(wal.reclaim_through(BatchId(0)).unwrap(), 0);
    // Reclaimed batches stay hidden after a reopen, though their segment is still there.
    drop(wal);
    let (mut wal, recovery) = open(dir.path(), two);
    assert_eq!(recovery.batches, 2);
    assert_eq!(ids(&wal), vec![4, 5]);
    // Through 4: segment 3-4 goes; the active segment (batch 5) stays.
    assert_eq!(wal.reclaim_through(BatchId(4)).unwrap(), 1);
    assert_eq!(wal.segment_ranges(), vec![(5, 6)]);
    let ahead = wal.reclaim_through(BatchId(6)).unwrap_err();
    assert_eq!(
        ahead.to_string(),
        "cannot reclaim through batch b6: the newest committed batch is b5"
    );
}

/// The suite checks the ids and positions; this, the segment files a full reclaim leaves.
#[test]
fn reclaiming_everything_leaves_one_fresh_segment_carrying_the_next_id_and_last_position() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    wal.append(b"p1", &[part("a", 1, flat(1, 0))]).unwrap();
    wal.append(b"p2", &[part("a", 1, flat(1, 0))]).unwrap();
    assert_eq!(wal.reclaim_through(BatchId(2)).unwrap(), 1);
    // A fresh, empty segment carries the next id and the last position.
    assert_eq!(
        segment_files(dir.path()),
        vec!["wal-00000000000000000003.seg"]
    );
    assert!(wal.batches().is_empty());
    assert_eq!(wal.last_position(), Some(&b"p2"[..]));
    drop(wal);
    let (mut wal, recovery) = open(dir.path(), options());
    assert_eq!(recovery.batches, 0);
    assert_eq!(wal.last_position(), Some(&b"p2"[..]));
    assert_eq!(wal.next_id(), BatchId(3));
    // Reclaiming everything when nothing is left does nothing.
    assert_eq!(wal.reclaim_through(BatchId(2)).unwrap(), 0);
    assert_eq!(
        wal.append(b"p3", &[part("a", 1, flat(1, 0))])
            .unwrap()
            .offset,
        28 + 2
    );
}

// ---------------------------------------------------------------- torn tails

/// Two batches in one segment; returns the segment, the end of batch 1 and batch 2's data
/// record length.
fn two_batches(dir: &Path) -> (PathBuf, u64, u64) {
    let (mut wal, _) = open(dir, options());
    wal.append(b"p1", &[part("a", 1, flat(5, 0))]).unwrap();
    let second = wal.append(b"p2", &[part("a", 1, flat(5, 1))]).unwrap();
    (
        segment_path(dir, 1),
        second.offset,
        second.bytes - COMMIT_RECORD_LEN,
    )
}

/// Reopen after the tail was damaged by `damage`; check that exactly `expected_cut` bytes were
/// cut, batch 1 survives, and the next append lands where the cut was.
fn assert_torn_tail_cut(damage: impl FnOnce(&Path, u64, u64), expected_cut: impl Fn(u64) -> u64) {
    let dir = tempfile::tempdir().unwrap();
    let (path, end1, data_len) = two_batches(dir.path());
    damage(&path, end1, data_len);
    let expected_cut = expected_cut(data_len);
    assert_eq!(file_len(&path), end1 + expected_cut, "test setup");
    let (mut wal, recovery) = open(dir.path(), options());
    assert_eq!(recovery.truncated_bytes, expected_cut);
    assert_eq!(recovery.truncated_segment.as_deref(), Some(path.as_path()));
    assert_eq!(recovery.batches, 1);
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert!(
        recovery.warnings[0].starts_with(&format!(
            "cut a torn tail of {expected_cut} bytes at offset {end1} from `{}`",
            path.display()
        )),
        "{}",
        recovery.warnings[0]
    );
    assert_eq!(file_len(&path), end1);
    assert_eq!(ids(&wal), vec![1]);
    assert_eq!(wal.last_position(), Some(&b"p1"[..]));
    let again = wal.append(b"p2'", &[part("a", 1, flat(2, 2))]).unwrap();
    assert_eq!((again.id, again.offset), (BatchId(2), end1));
    drop(wal);
    let (wal, recovery) = open(dir.path(), options());
    assert_eq!(recovery.truncated_bytes, 0);
    assert_eq!(ids(&wal), vec![1, 2]);
    assert_eq!(
        wal.read(BatchId(2)).unwrap(),
        vec![part("a", 1, flat(2, 2))]
    );
}

#[test]
fn a_partial_record_header_at_the_tail_is_cut() {
    assert_torn_tail_cut(|path, end1, _| set_len(path, end1 + 10), |_| 10);
}

#[test]
fn a_partial_payload_at_the_tail_is_cut() {
    assert_torn_tail_cut(
        |path, end1, _| set_len(path, end1 + RECORD_HEADER_LEN as u64 + 7),
        |_| 31,
    );
}

#[test]
fn a_data_record_without_its_commit_record_is_cut() {
    assert_torn_tail_cut(|path, end1, data| set_len(path, end1 + data), |data| data);
}

#[test]
fn a_partial_commit_record_is_cut_with_its_data_record() {
    assert_torn_tail_cut(
        |path, end1, data| set_len(path, end1 + data + 20),
        |data| data + 20,
    );
}

#[test]
fn a_zero_filled_tail_is_cut() {
    assert_torn_tail_cut(
        |path, end1, _| {
            set_len(path, end1);
            set_len(path, end1 + 4096);
        },
        |_| 4096,
    );
}

#[test]
fn a_complete_data_record_followed_by_zeros_instead_of_its_commit_is_cut() {
    assert_torn_tail_cut(
        |path, end1, data| {
            set_len(path, end1 + data);
            set_len(path, end1 + data + COMMIT_RECORD_LEN);
        },
        |data| data + COMMIT_RECORD_LEN,
    );
}

#[test]
fn a_damaged_final_commit_record_cannot_be_told_from_a_torn_write_and_is_cut() {
    // Documented limit: nothing follows the last commit record, so a flipped byte in it looks
    // exactly like a torn write of it.
    assert_torn_tail_cut(
        |path, end1, data| flip_byte(path, end1 + data + 30),
        |data| data + COMMIT_RECORD_LEN,
    );
}

// ---------------------------------------------------------------- corruption

#[test]
fn a_flipped_byte_in_a_committed_record_is_corrupt_with_its_path_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    wal.append(b"p1", &[part("a", 1, flat(5, 0))]).unwrap();
    let second = wal.append(b"p2", &[part("a", 1, flat(5, 1))]).unwrap();
    let third = wal.append(b"p3", &[part("a", 1, flat(5, 2))]).unwrap();
    drop(wal);
    let path = segment_path(dir.path(), 1);
    let stored = read_u32_at(&path, second.offset + 20);
    flip_byte(&path, second.offset + RECORD_HEADER_LEN as u64 + 40);
    let bytes = fs::read(&path).unwrap();
    let start = second.offset as usize;
    let data_end = (second.offset + second.bytes - COMMIT_RECORD_LEN) as usize;
    let computed = format::crc32c(&[&bytes[start..start + 20], &bytes[start + 24..data_end]]);

    let error = DiskWal::open(dir.path(), options()).unwrap_err();
    let WalError::Corrupt {
        path: error_path,
        offset,
        ..
    } = &error
    else {
        panic!("expected Corrupt, got {error}");
    };
    assert_eq!(error_path, &path);
    assert_eq!(*offset, second.offset);
    assert_eq!(
        error.to_string(),
        format!(
            "corrupt WAL segment `{}` at offset {}: record checksum mismatch (stored {stored:#010x}, \
             computed {computed:#010x}) (a valid record follows at offset {})",
            path.display(),
            second.offset,
            data_end
        )
    );
    assert!(!error.is_retryable());
    let _ = third;
}

#[test]
fn a_flipped_byte_in_a_commit_record_followed_by_more_batches_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (path, end1, data_len) = two_batches(dir.path());
    let (mut wal, _) = open(dir.path(), options());
    wal.append(b"p3", &[part("a", 1, flat(1, 0))]).unwrap();
    drop(wal);
    let commit_at = end1 + data_len;
    flip_byte(&path, commit_at + 9);
    let error = DiskWal::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(&error, WalError::Corrupt { offset, .. } if *offset == commit_at),
        "{error}"
    );
    assert!(
        error.to_string().contains("commit record of batch b2"),
        "{error}"
    );
}

#[test]
fn damage_in_a_segment_that_is_not_the_last_is_corrupt_even_at_its_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), one_batch_per_segment());
    let first = wal.append(b"p1", &[part("a", 1, flat(3, 0))]).unwrap();
    wal.append(b"p2", &[part("a", 1, flat(3, 0))]).unwrap();
    drop(wal);
    let path = segment_path(dir.path(), 1);
    // Cut batch 1's commit record in half: a torn tail in the last segment, corruption here.
    set_len(&path, first.offset + first.bytes - 10);
    let error = DiskWal::open(dir.path(), one_batch_per_segment()).unwrap_err();
    assert!(
        matches!(&error, WalError::Corrupt { path: p, offset, .. }
            if *p == path && *offset == first.offset + first.bytes - COMMIT_RECORD_LEN),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .ends_with("(in a segment that is not the last)"),
        "{error}"
    );
}

#[test]
fn a_byte_changed_after_open_is_caught_when_the_batch_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    let meta = wal.append(b"p1", &[part("a", 1, flat(5, 0))]).unwrap();
    flip_byte(&segment_path(dir.path(), 1), meta.offset + 30);
    let error = wal.read(BatchId(1)).unwrap_err();
    assert!(
        matches!(&error, WalError::Corrupt { offset, .. } if *offset == meta.offset),
        "{error}"
    );
}

// ---------------------------------------------------------------- segment set

#[test]
fn a_missing_middle_segment_is_a_gap_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), one_batch_per_segment());
    for _ in 0..3 {
        wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap();
    }
    drop(wal);
    fs::remove_file(segment_path(dir.path(), 2)).unwrap();
    let error = DiskWal::open(dir.path(), one_batch_per_segment()).unwrap_err();
    assert!(
        matches!(
            &error,
            WalError::SegmentGap { expected: BatchId(2), found: BatchId(3), path }
                if *path == segment_path(dir.path(), 3)
        ),
        "{error}"
    );
}

#[test]
fn an_extra_segment_after_the_last_is_a_gap_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options());
    wal.append(b"p", &[part("a", 1, flat(1, 0))]).unwrap();
    drop(wal);
    let stray = SegmentHeader {
        first_batch_id: 7,
        previous_position: None,
    };
    fs::write(segment_path(dir.path(), 7), stray.encode()).unwrap();
    let error = DiskWal::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(
            error,
            WalError::SegmentGap {
                expected: BatchId(2),
                found: BatchId(7),
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_segment_whose_name_disagrees_with_its_header_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), options());
    drop(wal);
    fs::rename(segment_path(dir.path(), 1), segment_path(dir.path(), 5)).unwrap();
    let error = DiskWal::open(dir.path(), options()).unwrap_err();
    assert!(
        matches!(error, WalError::Corrupt { offset: 12, .. }),
        "{error}"
    );
}

#[test]
fn a_foreign_file_named_like_a_segment_is_bad_magic_and_other_names_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("README"), "not mine").unwrap();
    fs::write(dir.path().join("wal-1.seg"), "short name").unwrap();
    let (wal, recovery) = open(dir.path(), options());
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert!(recovery.warnings[0].contains("wal-1.seg"));
    drop(wal);
    fs::write(
        segment_path(dir.path(), 1),
        b"PAR1 and more bytes than a header",
    )
    .unwrap();
    let error = DiskWal::open(dir.path(), options()).unwrap_err();
    assert!(matches!(error, WalError::BadMagic { .. }), "{error}");
}

// ---------------------------------------------------------------- crashes at failpoints

/// Append batches 1 and 2, then a third with `point` armed; returns the WAL directory, the
/// crashed handle's active segment and committed end, and the error.
fn crash_third_append(
    point: &'static str,
    options: WalOptions,
) -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), options);
    wal.append(b"p1", &[part("a", 1, flat(3, 1))]).unwrap();
    wal.append(b"p2", &[part("a", 1, flat(3, 2))]).unwrap();
    failpoint::arm(point, 0);
    let error = wal.append(b"p3", &[part("a", 1, flat(3, 3))]).unwrap_err();
    failpoint::disarm();
    assert!(
        matches!(error, WalError::Failpoint { name } if name == point),
        "{error}"
    );
    let poisoned = wal.append(b"p3", &[part("a", 1, flat(3, 3))]).unwrap_err();
    assert!(matches!(poisoned, WalError::Poisoned { .. }), "{poisoned}");
    let (path, end) = wal.active_end();
    drop(wal);
    (dir, path, end)
}

#[test]
fn a_crash_after_the_data_write_recovers_to_the_batches_committed_before() {
    let (dir, path, end) = crash_third_append(failpoint::AFTER_DATA_WRITE, options());
    let torn = file_len(&path) - end;
    let (wal, recovery) = open(dir.path(), options());
    assert_eq!(ids(&wal), vec![1, 2]);
    assert_eq!(recovery.truncated_bytes, torn);
    assert!(torn > 0);
    assert_eq!(wal.last_position(), Some(&b"p2"[..]));
}

#[test]
fn a_crash_after_the_commit_write_keeps_the_batch_only_if_all_its_bytes_reached_the_disk() {
    // A process crash: the page cache kept both records, so the batch is complete.
    let (dir, _, _) = crash_third_append(failpoint::AFTER_COMMIT_WRITE, options());
    let (wal, recovery) = open(dir.path(), options());
    assert_eq!(ids(&wal), vec![1, 2, 3]);
    assert_eq!(recovery.truncated_bytes, 0);
    assert_eq!(wal.last_position(), Some(&b"p3"[..]));

    // Power loss before the fsync: any prefix of the unsynced bytes may survive.
    for keep in [0, 1, 23, 24, 100, COMMIT_RECORD_LEN - 1] {
        let (dir, path, end) = crash_third_append(failpoint::AFTER_COMMIT_WRITE, options());
        let full = file_len(&path);
        let cut_at = if keep == COMMIT_RECORD_LEN - 1 {
            full - 1
        } else {
            end + keep
        };
        set_len(&path, cut_at);
        let (wal, recovery) = open(dir.path(), options());
        assert_eq!(ids(&wal), vec![1, 2], "kept {keep}");
        assert_eq!(recovery.truncated_bytes, cut_at - end, "kept {keep}");
    }
}

#[test]
fn a_crash_after_the_fsync_keeps_the_batch() {
    let (dir, _, _) = crash_third_append(failpoint::AFTER_FSYNC, options());
    let (wal, recovery) = open(dir.path(), options());
    assert_eq!(ids(&wal), vec![1, 2, 3]);
    assert_eq!(recovery.truncated_bytes, 0);
}

#[test]
fn a_crash_while_rolling_a_segment_leaves_a_temporary_file_that_recovery_deletes() {
    let (dir, _, _) = crash_third_append(failpoint::ROLL_BEFORE_RENAME, one_batch_per_segment());
    assert!(
        segment_files(dir.path()).contains(&"wal-00000000000000000003.seg.tmp".to_owned()),
        "{:?}",
        segment_files(dir.path())
    );
    let (mut wal, recovery) = open(dir.path(), one_batch_per_segment());
    assert_eq!(ids(&wal), vec![1, 2]);
    assert_eq!(recovery.warnings.len(), 1, "{:?}", recovery.warnings);
    assert!(recovery.warnings[0].contains(".seg.tmp"));
    assert_eq!(
        segment_files(dir.path()),
        vec![
            "wal-00000000000000000001.seg",
            "wal-00000000000000000002.seg"
        ]
    );
    assert_eq!(
        wal.append(b"p3", &[part("a", 1, flat(1, 0))]).unwrap().id,
        BatchId(3)
    );
}

#[test]
fn a_crash_during_reclaim_keeps_the_reclaim_and_the_next_reclaim_finishes_the_deletes() {
    for point in [
        failpoint::RECLAIM_BEFORE_DELETE,
        failpoint::RECLAIM_BETWEEN_DELETES,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), one_batch_per_segment());
        for i in 1..=4 {
            wal.append(format!("p{i}").as_bytes(), &[part("a", 1, flat(1, 0))])
                .unwrap();
        }
        failpoint::arm(point, 0);
        let error = wal.reclaim_through(BatchId(3)).unwrap_err();
        failpoint::disarm();
        assert!(
            matches!(error, WalError::Failpoint { .. }),
            "{point}: {error}"
        );
        drop(wal);
        let remaining = segment_files(dir.path()).len();
        assert!(remaining >= 2, "{point}: {remaining}");
        let (mut wal, _) = open(dir.path(), one_batch_per_segment());
        assert_eq!(ids(&wal), vec![4], "{point}");
        // Reclaiming through 3 again finishes the deletes; through 4 rolls and deletes the rest.
        assert_eq!(
            wal.reclaim_through(BatchId(3)).unwrap() as usize,
            remaining - 1,
            "{point}"
        );
        assert_eq!(wal.segment_ranges(), vec![(4, 5)], "{point}");
        assert_eq!(wal.reclaim_through(BatchId(4)).unwrap(), 1, "{point}");
        assert_eq!(
            segment_files(dir.path()),
            vec!["wal-00000000000000000005.seg"]
        );
        assert_eq!(wal.last_position(), Some(&b"p4"[..]));
    }
}

// ---------------------------------------------------------------- model test

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    /// Append a batch with one part per entry of `rows`.
    Append { rows: Vec<usize>, position: Vec<u8> },
    /// Append with a failpoint armed (it may not be reached, e.g. no roll happens); on a crash
    /// reopen, first cutting the last segment at `cut` (a fraction of the unsynced bytes).
    CrashingAppend { point: usize, cut: Option<u16> },
    /// Reclaim through a batch chosen by `pick`, with an optional crash.
    Reclaim { pick: u16, crash: Option<usize> },
    /// Close and reopen, optionally after adding a torn tail of `len` bytes (zeros or junk).
    Reopen { tail: Option<(bool, u16)> },
}

const APPEND_POINTS: [&str; 4] = [
    failpoint::AFTER_DATA_WRITE,
    failpoint::AFTER_COMMIT_WRITE,
    failpoint::AFTER_FSYNC,
    failpoint::ROLL_BEFORE_RENAME,
];
const RECLAIM_POINTS: [&str; 3] = [
    failpoint::RECLAIM_BEFORE_DELETE,
    failpoint::RECLAIM_BETWEEN_DELETES,
    failpoint::ROLL_BEFORE_RENAME,
];

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop::collection::vec(0..6usize, 1..3), prop::collection::vec(any::<u8>(), 0..6))
            .prop_map(|(rows, position)| Op::Append { rows, position }),
        2 => (0..APPEND_POINTS.len(), prop::option::of(any::<u16>()))
            .prop_map(|(point, cut)| Op::CrashingAppend { point, cut }),
        2 => (any::<u16>(), prop::option::of(0..RECLAIM_POINTS.len()))
            .prop_map(|(pick, crash)| Op::Reclaim { pick, crash }),
        1 => prop::option::of((any::<bool>(), 1..200u16)).prop_map(|tail| Op::Reopen { tail }),
    ]
}

/// What the WAL should hold.
#[derive(Debug, Default)]
struct Model {
    /// Committed, unreclaimed batches: id, position, rows per part.
    batches: VecDeque<(u64, Vec<u8>, Vec<u64>)>,
    next_id: u64,
    last_position: Option<Vec<u8>>,
}

fn model_parts(rows: &[usize], id: u64) -> Vec<BatchPart> {
    rows.iter()
        .enumerate()
        .map(|(i, rows)| part(&format!("ns{i}"), i as u32, flat(*rows, id as i64)))
        .collect()
}

fn check(wal: &DiskWal, model: &Model, step: usize) -> Result<(), TestCaseError> {
    let actual: Vec<(u64, Vec<u8>, Vec<u64>)> = wal
        .batches()
        .iter()
        .map(|b| {
            (
                b.id.0,
                b.position.clone(),
                b.parts.iter().map(|p| p.rows).collect(),
            )
        })
        .collect();
    let expected: Vec<_> = model.batches.iter().cloned().collect();
    prop_assert_eq!(actual, expected, "batches after step {}", step);
    prop_assert_eq!(
        wal.next_id(),
        BatchId(model.next_id),
        "next id after step {}",
        step
    );
    prop_assert_eq!(
        wal.last_position(),
        model.last_position.as_deref(),
        "last position after step {}",
        step
    );
    prop_assert_eq!(wal.stats().batches, model.batches.len());
    // The oldest and newest batches still read back, rows intact.
    for (id, _, rows) in [model.batches.front(), model.batches.back()]
        .into_iter()
        .flatten()
    {
        let parts = wal
            .read(BatchId(*id))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let read_rows: Vec<u64> = parts.iter().map(|p| p.batch.num_rows() as u64).collect();
        prop_assert_eq!(&read_rows, rows);
        let expected_rows: Vec<usize> = rows.iter().map(|r| *r as usize).collect();
        prop_assert_eq!(parts, model_parts(&expected_rows, *id));
    }
    // Segments follow on from each other and the ids add up.
    let ranges = wal.segment_ranges();
    for pair in ranges.windows(2) {
        prop_assert_eq!(pair[0].1, pair[1].0);
    }
    prop_assert_eq!(ranges.last().map(|r| r.1), Some(model.next_id));
    Ok(())
}

fn reopen(
    dir: &Path,
    wal: DiskWal,
    options: &WalOptions,
) -> Result<(DiskWal, Recovery), TestCaseError> {
    drop(wal);
    DiskWal::open(dir, options.clone()).map_err(|e| TestCaseError::fail(format!("reopen: {e}")))
}

fn run_model(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    // About two small batches per segment, so rolls and whole-segment reclaims happen often.
    let options = WalOptions {
        segment_target_bytes: 1200,
        fsync: false,
        ..WalOptions::default()
    };
    let (mut wal, _) = DiskWal::open(dir.path(), options.clone()).unwrap();
    let mut model = Model {
        next_id: 1,
        ..Model::default()
    };
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { rows, position } => {
                let meta = wal
                    .append(&position, &model_parts(&rows, model.next_id))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(meta.id, BatchId(model.next_id));
                model.batches.push_back((
                    model.next_id,
                    position.clone(),
                    rows.iter().map(|r| *r as u64).collect(),
                ));
                model.next_id += 1;
                model.last_position = Some(position);
            }
            Op::CrashingAppend { point, cut } => {
                let point = APPEND_POINTS[point];
                let rows = vec![3, 1];
                let position = format!("crash{step}").into_bytes();
                failpoint::arm(point, 0);
                let result = wal.append(&position, &model_parts(&rows, model.next_id));
                failpoint::disarm();
                let in_flight = (model.next_id, position.clone(), vec![3, 1]);
                match result {
                    Ok(_) => {
                        // The failpoint was not on this append's path (no roll happened).
                        model.batches.push_back(in_flight);
                        model.next_id += 1;
                        model.last_position = Some(position);
                    }
                    Err(WalError::Failpoint { .. }) => {
                        let (path, committed_end) = wal.active_end();
                        let full = file_len(&path);
                        let mut complete = point == failpoint::AFTER_COMMIT_WRITE
                            || point == failpoint::AFTER_FSYNC;
                        let mut expected_cut = if complete { 0 } else { full - committed_end };
                        // Before the fsync, a power loss may keep any prefix of the new bytes.
                        if let (Some(cut), false) = (cut, point == failpoint::AFTER_FSYNC) {
                            let cut_at =
                                committed_end + u64::from(cut) % (full - committed_end + 1);
                            set_len(&path, cut_at);
                            if cut_at < full {
                                complete = false;
                            }
                            expected_cut = if complete { 0 } else { cut_at - committed_end };
                        }
                        if complete {
                            model.batches.push_back(in_flight);
                            model.next_id += 1;
                            model.last_position = Some(position);
                        }
                        let (reopened, recovery) = reopen(dir.path(), wal, &options)?;
                        wal = reopened;
                        prop_assert_eq!(recovery.truncated_bytes, expected_cut, "step {}", step);
                    }
                    Err(error) => return Err(TestCaseError::fail(error.to_string())),
                }
            }
            Op::Reclaim { pick, crash } => {
                let through = u64::from(pick) % model.next_id;
                if let Some(point) = crash {
                    failpoint::arm(RECLAIM_POINTS[point], 0);
                }
                let result = wal.reclaim_through(BatchId(through));
                failpoint::disarm();
                while model
                    .batches
                    .front()
                    .is_some_and(|(id, _, _)| *id <= through)
                {
                    model.batches.pop_front();
                }
                match result {
                    Ok(_) => {
                        // Every segment but the active one still holds an unreclaimed batch.
                        let ranges = wal.segment_ranges();
                        for (first, end) in &ranges[..ranges.len() - 1] {
                            prop_assert!(
                                model
                                    .batches
                                    .iter()
                                    .any(|(id, _, _)| id >= first && id < end),
                                "segment {}..{} should have been deleted",
                                first,
                                end
                            );
                        }
                        // The active segment is never left holding only reclaimed batches.
                        if let Some((first, end)) = ranges.last() {
                            prop_assert!(
                                end == first
                                    || model
                                        .batches
                                        .back()
                                        .is_some_and(|(id, _, _)| id + 1 == *end),
                                "active segment {}..{} holds only reclaimed batches",
                                first,
                                end
                            );
                        }
                    }
                    Err(WalError::Failpoint { .. }) => {
                        let (reopened, _) = reopen(dir.path(), wal, &options)?;
                        wal = reopened;
                    }
                    Err(error) => return Err(TestCaseError::fail(error.to_string())),
                }
            }
            Op::Reopen { tail } => {
                let (path, end) = wal.active_end();
                drop(wal);
                let mut expected_cut = 0;
                if let Some((zeros, len)) = tail {
                    let mut bytes = fs::read(&path).unwrap();
                    prop_assert_eq!(bytes.len() as u64, end);
                    if zeros {
                        bytes.resize(bytes.len() + usize::from(len), 0);
                    } else {
                        // The start of a record header, then junk.
                        let junk = format::RECORD_MAGIC
                            .iter()
                            .copied()
                            .chain((0..).map(|i: u32| (i.wrapping_mul(37) % 251) as u8))
                            .take(usize::from(len));
                        bytes.extend(junk);
                    }
                    fs::write(&path, bytes).unwrap();
                    expected_cut = u64::from(len);
                }
                let (reopened, recovery) = DiskWal::open(dir.path(), options.clone())
                    .map_err(|e| TestCaseError::fail(format!("reopen: {e}")))?;
                wal = reopened;
                prop_assert_eq!(recovery.truncated_bytes, expected_cut, "step {}", step);
            }
        }
        check(&wal, &model, step)?;
    }
    // And once more from scratch.
    let (wal, _) = reopen(dir.path(), wal, &options)?;
    check(&wal, &model, usize::MAX)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_appends_crashes_reopens_and_reclaims_match_a_queue_model(
        ops in prop::collection::vec(arb_op(), 1..40)
    ) {
        run_model(ops)?;
    }
}

// ---------------------------------------------------------------- real aborts (feature `failpoints`)

/// The environment variable naming the WAL directory for [`crash_child_appends_one_batch`].
#[cfg(feature = "failpoints")]
const CHILD_DIR_VAR: &str = "SKIPPR_WAL_TEST_CHILD_DIR";

/// Run by [`an_aborted_process_at_each_failpoint_recovers_to_the_committed_batches`] in a child
/// process with `SKIPPR_FAILPOINT` set: append one batch, then reclaim everything (one of the
/// two aborts).
/// The child's entry point: a no-op unless the parent set [`CHILD_DIR_VAR`].
#[cfg(feature = "failpoints")]
#[test]
fn crash_child_appends_one_batch() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let (mut wal, _) = open(Path::new(&dir), one_batch_per_segment());
    wal.append(b"p3", &[part("a", 1, flat(3, 3))]).unwrap();
    wal.reclaim_through(BatchId(2)).unwrap();
    wal.reclaim_through(BatchId(3)).unwrap();
}

#[cfg(feature = "failpoints")]
#[test]
fn an_aborted_process_at_each_failpoint_recovers_to_the_committed_batches() {
    // (failpoint, batches expected after the abort). A process crash keeps the page cache, so
    // a batch whose commit record was written survives.
    let cases: [(&str, &[u64]); 6] = [
        (failpoint::AFTER_DATA_WRITE, &[1, 2]),
        (failpoint::AFTER_COMMIT_WRITE, &[1, 2, 3]),
        (failpoint::AFTER_FSYNC, &[1, 2, 3]),
        (failpoint::ROLL_BEFORE_RENAME, &[1, 2]),
        (failpoint::RECLAIM_BEFORE_DELETE, &[3]),
        (failpoint::RECLAIM_BETWEEN_DELETES, &[3]),
    ];
    let exe = std::env::current_exe().unwrap();
    for (point, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = open(dir.path(), one_batch_per_segment());
        wal.append(b"p1", &[part("a", 1, flat(3, 1))]).unwrap();
        wal.append(b"p2", &[part("a", 1, flat(3, 2))]).unwrap();
        drop(wal);
        let status = std::process::Command::new(&exe)
            .args([
                "--exact",
                "wal::tests::crash_child_appends_one_batch",
                "--test-threads=1",
            ])
            .env(failpoint::ENV_VAR, point)
            .env(CHILD_DIR_VAR, dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(!status.success(), "{point}: the child did not abort");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(6), "{point}: not SIGABRT: {status}");
        }
        let (wal, _) = open(dir.path(), one_batch_per_segment());
        assert_eq!(ids(&wal), expected, "{point}");
    }
}
