//! The daily log file: `logs/skipprd.<YYYY-MM-DD>.log` (the UTC date), appended to by every
//! run, a new file when the date changes, files older than [`KEEP_DAYS`] deleted when a new
//! one opens. It holds the log at `info` (or the `--log` level) and every event as its JSON
//! line, whatever `--output` shows.
//!
//! The directory is `SKIPPR_LOG_DIR`, else `logs` in the current directory. `--no-log-file`
//! or `SKIPPR_LOG_FILE=off` turns it off. A log file that cannot be opened or written is
//! said once on standard error and never fails the command.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, NaiveDate, Utc};
use tracing_subscriber::fmt::MakeWriter;

/// Days of log files kept: older ones are deleted when a new day's file opens.
pub const KEEP_DAYS: i64 = 14;

/// The file names' prefix and suffix: `skipprd.<date>.log`.
const PREFIX: &str = "skipprd.";
const SUFFIX: &str = ".log";

/// Where the log file goes, from the flag and the environment; `None`: no log file.
pub fn directory(disabled_by_flag: bool, env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if disabled_by_flag {
        return None;
    }
    if let Some(value) = env("SKIPPR_LOG_FILE") {
        let off = matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "off" | "false" | "0" | "no" | "none"
        );
        if off {
            return None;
        }
    }
    Some(
        env("SKIPPR_LOG_DIR")
            .filter(|d| !d.trim().is_empty())
            .map_or_else(|| PathBuf::from("logs"), PathBuf::from),
    )
}

/// The name of the log file of `date`.
pub fn file_name(date: NaiveDate) -> String {
    format!("{PREFIX}{}{SUFFIX}", date.format("%Y-%m-%d"))
}

/// A writer to the day's log file, shared by every log line of the process.
pub struct DailyLog {
    dir: PathBuf,
    clock: fn() -> DateTime<Utc>,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    /// The day and its file, once opened.
    file: Option<(NaiveDate, File)>,
    /// Set once a failure was said, so it is said once.
    failed: bool,
}

impl DailyLog {
    /// A log in `dir`, dated by the system clock. Nothing is opened until the first line.
    pub fn new(dir: PathBuf) -> DailyLog {
        DailyLog::with_clock(dir, Utc::now)
    }

    /// A log in `dir`, dated by `clock` (tests cross midnight with it).
    pub fn with_clock(dir: PathBuf, clock: fn() -> DateTime<Utc>) -> DailyLog {
        DailyLog {
            dir,
            clock,
            open: Mutex::new(Open::default()),
        }
    }

    /// Append `bytes` to the file of today's date, opening (and pruning) on a new day.
    fn append(&self, bytes: &[u8]) {
        let mut open = match self.open.lock() {
            Ok(open) => open,
            Err(poisoned) => poisoned.into_inner(),
        };
        let today = (self.clock)().date_naive();
        let result = (|| -> io::Result<()> {
            if open.file.as_ref().is_none_or(|(day, _)| *day != today) {
                open.file = None;
                std::fs::create_dir_all(&self.dir)?;
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join(file_name(today)))?;
                prune(&self.dir, today);
                open.file = Some((today, file));
            }
            match open.file.as_mut() {
                Some((_, file)) => file.write_all(bytes),
                None => Ok(()),
            }
        })();
        if let Err(e) = result
            && !open.failed
        {
            open.failed = true;
            eprintln!(
                "warning: could not write the log file in {}: {e} (set SKIPPR_LOG_FILE=off to stop trying)",
                self.dir.display()
            );
        }
    }
}

/// Delete log files dated more than [`KEEP_DAYS`] before `today` (best effort: a file that
/// cannot be deleted stays).
fn prune(dir: &Path, today: NaiveDate) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(date) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
        else {
            continue;
        };
        if (today - date).num_days() > KEEP_DAYS {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// One log line's writer: buffers the line, appends it whole when dropped.
pub struct LineWriter<'a> {
    log: &'a DailyLog,
    buffer: Vec<u8>,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter<'_> {
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            self.log.append(&self.buffer);
        }
    }
}

impl<'a> MakeWriter<'a> for DailyLog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            log: self,
            buffer: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    static NOW_SECS: AtomicI64 = AtomicI64::new(0);

    fn fake_now() -> DateTime<Utc> {
        DateTime::from_timestamp(NOW_SECS.load(Ordering::SeqCst), 0).unwrap_or_default()
    }

    fn line(log: &DailyLog, text: &str) {
        let mut w = log.make_writer();
        w.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn lines_go_to_the_file_of_their_date_and_a_new_day_opens_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        // 2026-12-01 23:59:58 UTC.
        NOW_SECS.store(1_796_169_598, Ordering::SeqCst);
        // An old file past the keep window, one inside it, and a file that is not ours.
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(logs.join("skipprd.2026-11-01.log"), "old\n").unwrap();
        std::fs::write(logs.join("skipprd.2026-11-25.log"), "recent\n").unwrap();
        std::fs::write(logs.join("other.log"), "mine\n").unwrap();
        let log = DailyLog::with_clock(logs.clone(), fake_now);
        line(&log, "first\n");
        line(&log, "second\n");
        NOW_SECS.store(1_796_169_598 + 4, Ordering::SeqCst);
        line(&log, "after midnight\n");
        let read = |name: &str| std::fs::read_to_string(logs.join(name)).unwrap();
        assert_eq!(read("skipprd.2026-12-01.log"), "first\nsecond\n");
        assert_eq!(read("skipprd.2026-12-02.log"), "after midnight\n");
        assert!(!logs.join("skipprd.2026-11-01.log").exists());
        assert_eq!(read("skipprd.2026-11-25.log"), "recent\n");
        assert_eq!(read("other.log"), "mine\n");
    }

    #[test]
    fn the_flag_and_the_environment_choose_the_directory_or_turn_it_off() {
        let none = |_: &str| None;
        assert_eq!(directory(false, none), Some(PathBuf::from("logs")));
        assert_eq!(directory(true, none), None);
        let off = |k: &str| (k == "SKIPPR_LOG_FILE").then(|| "OFF".to_owned());
        assert_eq!(directory(false, off), None);
        let on = |k: &str| (k == "SKIPPR_LOG_FILE").then(|| "on".to_owned());
        assert_eq!(directory(false, on), Some(PathBuf::from("logs")));
        let dir = |k: &str| (k == "SKIPPR_LOG_DIR").then(|| "/var/log/skipprd".to_owned());
        assert_eq!(
            directory(false, dir),
            Some(PathBuf::from("/var/log/skipprd"))
        );
        assert_eq!(
            file_name(NaiveDate::from_ymd_opt(2026, 1, 2).unwrap()),
            "skipprd.2026-01-02.log"
        );
    }
}
