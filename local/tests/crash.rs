//! Crash tests of `skipprd sync`: the real binary, killed with SIGKILL at random moments,
//! then run to completion; the WAL must hold every record exactly once.
//!
//! `SKIPPR_KILL_LOOPS` sets the number of kills (default 50).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a failed set-up step should fail the test loudly"
)]

mod common;

#[path = "common/bin.rs"]
mod bin;
use bin::skipprd_command;

use common::Rng;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use arrow::array::{Array, Int32Array, Int64Array};
use skipprd::wal::{DiskWal, WalOptions};

fn skipprd(dir: &Path) -> Command {
    let mut cmd = skipprd_command(dir);
    cmd.args(["sync", "--once", "--output", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

const CONFIG: &str = "\
pipelines:
  events:
    data_source: data_sources.files
    transform:
      namespace_fields: kind
data_sources:
  files:
    File:
      path: input
      batch_size: 150
";

/// Write `count` records with ids starting at `first` into `path` (appending).
fn append_records(path: &Path, first: u64, count: u64, rng: &mut Rng) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut text = String::new();
    for id in first..first + count {
        // Now and then a malformed line (a deadletter, no id) or a record without `kind`
        // (routed to the pipeline's own namespace), so those paths are crashed too.
        if rng.below(97) == 0 {
            text.push_str("{\"id\": broken\n");
        }
        let kind = match rng.below(40) {
            0 => "\"kind\":null,".to_owned(),
            n if n % 3 == 0 => "\"kind\":\"refund\",".to_owned(),
            _ => "\"kind\":\"order\",".to_owned(),
        };
        let price = if rng.below(50) == 0 {
            "\"n/a\"".to_owned()
        } else {
            format!("{}.{}", rng.below(500), rng.below(100))
        };
        text.push_str(&format!(
            "{{\"id\":{id},{kind}\"price\":{price},\"at\":{},\"tags\":[\"t{}\"],\"customer\":{{\"n\":\"c{}\"}}}}\n",
            1_700_000_000 + id,
            rng.below(5),
            rng.below(1000)
        ));
    }
    f.write_all(text.as_bytes()).unwrap();
}

/// Every `id` in the committed WAL of pipeline `events`, with how often it appears.
fn ids_in_wal(project: &Path) -> BTreeMap<i64, u32> {
    let (wal, _) = DiskWal::open(
        &project.join("data/default_events/wal"),
        WalOptions::default(),
    )
    .unwrap();
    let mut seen = BTreeMap::new();
    for meta in wal.batches() {
        for part in wal.read(meta.id).unwrap() {
            // Rejected records travel in their own part; they carry no `id` of ours.
            if part.namespace == skipprd::deadletter::WAL_NAMESPACE {
                continue;
            }
            let column = part.batch.column_by_name("id").unwrap();
            let ids: Vec<i64> = if let Some(a) = column.as_any().downcast_ref::<Int64Array>() {
                (0..a.len()).map(|i| a.value(i)).collect()
            } else {
                let a = column.as_any().downcast_ref::<Int32Array>().unwrap();
                (0..a.len()).map(|i| i64::from(a.value(i))).collect()
            };
            for id in ids {
                *seen.entry(id).or_insert(0) += 1;
            }
        }
    }
    seen
}

#[test]
fn sync_killed_at_random_moments_keeps_every_record_exactly_once() {
    let kills: u64 = std::env::var("SKIPPR_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("SKIPPR_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let project: PathBuf = dir.path().to_path_buf();
    std::fs::write(project.join("skippr.yml"), CONFIG).unwrap();
    std::fs::create_dir_all(project.join("input")).unwrap();
    let mut next_id = 0u64;
    for file in 0..8 {
        append_records(
            &project.join(format!("input/part-{file:02}.jsonl")),
            next_id,
            1500,
            &mut rng,
        );
        next_id += 1500;
    }
    let (mut killed, mut finished, mut round) = (0u64, 0u64, 0u64);
    // Count kills, not rounds: a pass that finishes before its kill proves less.
    while killed < kills && round < kills * 4 {
        round += 1;
        // More data keeps arriving: lines appended to an existing file, and now and then a new file.
        let target = format!("input/part-{:02}.jsonl", rng.below(8));
        append_records(&project.join(target), next_id, 400, &mut rng);
        next_id += 400;
        if round % 7 == 0 {
            append_records(
                &project.join(format!("input/new-{round:03}.jsonl")),
                next_id,
                600,
                &mut rng,
            );
            next_id += 600;
        }
        let mut child = skipprd(&project).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(2 + rng.below(60)));
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                assert!(
                    status.success(),
                    "round {round}: sync failed on its own: {stderr}"
                );
                finished += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
            }
        }
    }
    let out = skipprd(&project).output().unwrap();
    assert!(
        out.status.success(),
        "final pass: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = ids_in_wal(&project);
    let duplicates: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    let missing = (0..next_id as i64)
        .filter(|id| !seen.contains_key(id))
        .count();
    println!(
        "kill loop: {killed} kills, {finished} passes finished on their own, rows expected {next_id}, found {}, duplicates {}, missing {missing}",
        seen.len(),
        duplicates.len()
    );
    assert!(
        killed >= kills,
        "only {killed} of {kills} passes were killed"
    );
    assert!(
        duplicates.is_empty(),
        "duplicated ids: {:?}",
        &duplicates[..duplicates.len().min(10)]
    );
    assert_eq!(missing, 0, "ids lost");
    assert_eq!(seen.len() as u64, next_id);
}

#[test]
fn two_concurrent_syncs_on_one_pipeline_never_double_write() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().to_path_buf();
    std::fs::write(project.join("skippr.yml"), CONFIG).unwrap();
    std::fs::create_dir_all(project.join("input")).unwrap();
    let mut rng = Rng(7);
    append_records(&project.join("input/a.jsonl"), 0, 6000, &mut rng);
    let a = skipprd(&project).spawn().unwrap();
    let b = skipprd(&project).spawn().unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for out in [&a, &b] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("pipeline writer lease unavailable"),
            "{stderr}"
        );
    }
    let seen = ids_in_wal(&project);
    assert_eq!(seen.len(), 6000);
    assert!(seen.values().all(|n| *n == 1), "a record was written twice");
}

/// Crash injection at every protocol step a pass reaches (built with `--features failpoints`):
/// the process aborts there, and the next pass recovers to exactly every record once.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_at_every_protocol_step_is_recovered_exactly_once() {
    let reachable = [
        "sync.after_schema_save",
        "sync.before_wal_commit",
        "wal.after_data_write",
        "wal.after_commit_write",
        "wal.after_fsync",
        "sync.after_wal_commit",
        "sync.after_position",
    ];
    for name in reachable {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().to_path_buf();
        std::fs::write(project.join("skippr.yml"), CONFIG).unwrap();
        std::fs::create_dir_all(project.join("input")).unwrap();
        let mut rng = Rng(11);
        append_records(&project.join("input/a.jsonl"), 0, 1000, &mut rng);
        // A first clean pass, so the crash hits a WAL and state that already hold data.
        assert!(skipprd(&project).status().unwrap().success());
        append_records(&project.join("input/a.jsonl"), 1000, 1000, &mut rng);
        // A new field, so the schema evolves in this pass too.
        std::fs::write(
            project.join("input/b.jsonl"),
            "{\"id\":2000,\"kind\":\"order\",\"coupon\":\"X1\"}\n",
        )
        .unwrap();
        let crashed = skipprd(&project)
            .env("SKIPPR_FAILPOINT", name)
            .output()
            .unwrap();
        assert!(
            !crashed.status.success(),
            "{name}: the failpoint did not fire"
        );
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            let stderr = String::from_utf8_lossy(&crashed.stderr);
            assert_eq!(
                crashed.status.signal(),
                Some(6),
                "{name}: not an abort: {stderr}"
            );
        }
        let out = skipprd(&project).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: recovery pass failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = ids_in_wal(&project);
        assert_eq!(seen.len(), 2001, "{name}: rows lost");
        assert!(seen.values().all(|n| *n == 1), "{name}: rows duplicated");
    }
}
