//! Keeping the File source's checkpoint small: once its entries outgrow their budget, files
//! read to their end leave it below a watermark (see [Resuming](super#resuming)).
//!
//! The invariant: a listed file with no entry, at or below the watermark's path and last
//! changed before its time, was read to its end. It holds because
//!
//! - a file leaves only once this pass has handled every listed file sorting before it, read
//!   to its end, with its last change older than the pass's clock less a margin (checked again
//!   when it leaves), and the watermark's time is that clock less the margin;
//! - a file that appears at its path, or changes, after the listing started gets a status-change
//!   time after that clock (creating, writing and renaming a file all set it): it is late;
//! - files this pass let leave are covered by a step of the watermark with the pass's time, up
//!   to the newest of them (all files before it handled); files past it keep the steps, and
//!   times, they had until a pass gets past them, so a late file not read yet stays late;
//! - a file this pass reads, or fails to read, keeps an entry until it leaves.

use std::collections::{BTreeMap, VecDeque};
use std::fs::Metadata;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::checkpoint::{FileProgress, Watermark, WatermarkStep};
use super::{FileFormat, FileSourceOptions};

/// How much older than the pass's clock a file's last change must be for it to leave the
/// checkpoint: file systems stamp times from a coarse clock (a few milliseconds behind the
/// precise one), some (FAT) to 2 seconds.
pub(crate) const CLOCK_MARGIN: Duration = Duration::from_secs(2);

/// The clock of a pass, as the watermark sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clock {
    /// When the listing started.
    pub(crate) now: SystemTime,
    /// How much older than `now` a file's last change must be for it to leave.
    pub(crate) margin: Duration,
    /// Whether a listing that finds many files changed within the margin waits for them
    /// and lists again (see [`wait_for_fresh`]).
    pub(crate) wait: bool,
}

impl Clock {
    /// The system clock, now, with [`CLOCK_MARGIN`].
    pub(crate) fn system() -> Clock {
        Clock {
            now: SystemTime::now(),
            margin: CLOCK_MARGIN,
            wait: true,
        }
    }

    /// The clock less the margin, in Unix milliseconds: files changed before may leave.
    fn cutoff_ms(&self) -> i64 {
        unix_ms(self.now.checked_sub(self.margin).unwrap_or(UNIX_EPOCH))
    }
}

/// Wait, when more of the files `found` changed within the clock's margin than fit
/// `budget` (about 128 bytes an entry), until they are older than it, and set the clock to
/// now: the listing is then taken again, and those files may leave the checkpoint in this
/// pass (a directory copied just before a pass). Whether it waited.
pub(crate) fn wait_for_fresh(
    found: &[PathBuf],
    clock: &std::cell::Cell<Clock>,
    budget: usize,
) -> bool {
    let at = clock.get();
    let fit = budget / 128;
    if !at.wait || found.len() <= fit {
        return false;
    }
    let cutoff = at.cutoff_ms();
    let fresh: Vec<i64> = found
        .iter()
        .filter_map(|path| stat(path).ok())
        .map(|(_, changed)| changed)
        .filter(|&changed| changed >= cutoff)
        .collect();
    if fresh.len() <= fit {
        return false;
    }
    let newest = fresh.iter().copied().max().unwrap_or(cutoff);
    let margin_ms = i64::try_from(at.margin.as_millis()).unwrap_or(i64::MAX);
    let now_ms = unix_ms(SystemTime::now());
    // Up to the margin and a little more: a file stamped in the future is not waited for.
    let wait_ms = newest
        .saturating_add(margin_ms)
        .saturating_sub(now_ms)
        .saturating_add(10)
        .clamp(0, margin_ms.saturating_add(100));
    tracing::info!(
        files = fresh.len(),
        "{} files changed in the last {:?}: waiting {wait_ms} ms for them to settle before reading, so that the checkpoint stays small",
        fresh.len(),
        at.margin
    );
    std::thread::sleep(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)));
    clock.set(Clock {
        now: SystemTime::now(),
        ..at
    });
    true
}

/// `time` in Unix milliseconds, rounded down.
fn unix_ms(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let ms = i64::try_from(before.as_millis()).unwrap_or(i64::MAX);
            let partial = i64::from(before.as_nanos() % 1_000_000 != 0);
            -ms.saturating_add(partial)
        }
    }
}

/// When the file `meta` describes last changed, in Unix milliseconds: its status-change time
/// or its modification time, whichever is later.
#[cfg(unix)]
fn changed_ms(meta: &Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    let ms = |secs: i64, nanos: i64| {
        secs.saturating_mul(1000)
            .saturating_add(nanos.div_euclid(1_000_000))
    };
    ms(meta.ctime(), meta.ctime_nsec()).max(ms(meta.mtime(), meta.mtime_nsec()))
}

/// When the file `meta` describes last changed, in Unix milliseconds: its creation or its
/// modification time, whichever is later; "now or later" when neither is known.
#[cfg(not(unix))]
fn changed_ms(meta: &Metadata) -> i64 {
    let modified = meta.modified().map(unix_ms).unwrap_or(i64::MAX);
    let created = meta.created().map(unix_ms).unwrap_or(i64::MIN);
    modified.max(created)
}

/// The size of the file at `path` and when it last changed (see [`changed_ms`]); for a
/// symbolic link, when the link or the file changed, whichever is later.
pub(crate) fn stat(path: &Path) -> std::io::Result<(u64, i64)> {
    let link = std::fs::symlink_metadata(path)?;
    if link.file_type().is_symlink() {
        let target = std::fs::metadata(path)?;
        Ok((target.len(), changed_ms(&target).max(changed_ms(&link))))
    } else {
        Ok((link.len(), changed_ms(&link)))
    }
}

/// What the watermark says of a listed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Below {
    /// It is above the watermark, or has an entry: judged as usual.
    No,
    /// It is below the watermark and unchanged since: read; not opened.
    Read,
    /// It is below the watermark and unchanged since, but the format setting changed: read
    /// unless the format setting of then (given) skipped it.
    ReadUnlessSkippedBy(Option<FileFormat>),
    /// It is below the watermark and appeared or changed since: read from the start.
    Late,
}

/// What `mark` says of the file `shown` (no entry in `files`), last changed at `changed_ms`,
/// listed with `options`.
pub(crate) fn below(
    files: &BTreeMap<String, FileProgress>,
    mark: Option<&Watermark>,
    options: &FileSourceOptions,
    shown: &str,
    changed_ms: i64,
) -> Below {
    let Some(mark) = mark else {
        return Below::No;
    };
    if files.contains_key(shown) {
        return Below::No;
    }
    let Some(before) = mark.changed_before_ms_at(shown) else {
        return Below::No;
    };
    if changed_ms >= before {
        return Below::Late;
    }
    if mark.listed_path != options.path && !listed_by(&mark.listed_path, shown) {
        return Below::Late;
    }
    if mark.format != options.format && matches!(mark.format, None | Some(FileFormat::Json)) {
        return Below::ReadUnlessSkippedBy(mark.format);
    }
    Below::Read
}

/// Whether the configured path `old` surely lists the file shown as `shown`: a glob that
/// matches it, or a file or directory at or above it. `.` components are ignored; anything
/// else (`..`, a relative and an absolute path) is taken as not listed.
fn listed_by(old: &str, shown: &str) -> bool {
    let fold = |path: &str| -> PathBuf {
        Path::new(path)
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect()
    };
    let (old_path, shown_path) = (fold(old), fold(shown));
    if super::paths::has_glob_chars(old) {
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        glob::Pattern::new(&old_path.to_string_lossy())
            .is_ok_and(|pattern| pattern.matches_path_with(&shown_path, options))
    } else {
        shown_path.starts_with(&old_path)
    }
}

/// The checkpoint's entries, with the bytes they take in it.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    map: BTreeMap<String, FileProgress>,
    bytes: usize,
}

/// The bytes the entry `key: progress` takes in a checkpoint (with its separator).
fn entry_bytes(key: &str, progress: &FileProgress) -> usize {
    let key = serde_json::to_vec(key).map_or(key.len() + 2, |k| k.len());
    let value = serde_json::to_vec(progress).map_or(128, |v| v.len());
    key + value + 2
}

impl Entries {
    /// The entries, by uri.
    pub(crate) fn map(&self) -> &BTreeMap<String, FileProgress> {
        &self.map
    }

    /// The bytes the entries take in a checkpoint.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The entry of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&FileProgress> {
        self.map.get(key)
    }

    /// Set the entry of `key`.
    pub(crate) fn insert(&mut self, key: String, progress: FileProgress) {
        self.bytes += entry_bytes(&key, &progress);
        if let Some(was) = self.map.insert(key.clone(), progress) {
            self.bytes = self.bytes.saturating_sub(entry_bytes(&key, &was));
        }
    }

    /// Remove the entry of `key`.
    pub(crate) fn remove(&mut self, key: &str) -> Option<FileProgress> {
        let was = self.map.remove(key)?;
        self.bytes = self.bytes.saturating_sub(entry_bytes(key, &was));
        Some(was)
    }
}

/// One file as listed by a pass, in listing order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The path as shown, the key of its entry.
    pub(crate) display: String,
    /// Its size when listed.
    pub(crate) size: u64,
    /// When it last changed, as listed (see [`stat`]).
    pub(crate) changed_ms: i64,
    /// Its index among the files read this pass, if it is read.
    pub(crate) read: Option<usize>,
}

/// The settings a [`Tracker`] works with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The pass's clock.
    pub(crate) clock: Clock,
    /// A file unchanged for this long leaves before those changed more recently.
    pub(crate) settle: Duration,
    /// Entries leave while they take more bytes than this.
    pub(crate) budget: usize,
    /// Whether the listing saw every file (no directory a glob could not read).
    pub(crate) complete: bool,
}

/// The checkpoint being kept by a pass: its entries, and the watermark files leave below.
#[derive(Debug)]
pub(crate) struct Tracker {
    entries: Entries,
    slots: Vec<Slot>,
    /// Per file read, the index of its slot.
    slot_of: Vec<usize>,
    base_dir: PathBuf,
    listed_path: String,
    format: Option<FileFormat>,
    settings: Settings,
    /// Files read this pass that are finished (read to their end, given up on): a prefix.
    finished: usize,
    /// Slots handled: every file before them finished.
    passed: usize,
    /// Slots whose entries may leave, unchanged for the settle time, in path order.
    idle: VecDeque<usize>,
    /// Slots whose entries may leave, changed more recently, in path order.
    recent: VecDeque<usize>,
    /// The watermark the pass started from.
    old: Option<Watermark>,
    /// The last slot at or below the old watermark.
    old_last: Option<usize>,
    /// Whether the settings that decide which files are listed are those of the old watermark.
    same_listing: bool,
    /// The newest path that left during this pass.
    left: Option<String>,
    /// The watermark to write.
    mark: Option<Watermark>,
}

impl Tracker {
    /// A tracker of `entries` for the `slots` of a pass listed with `options`, that started
    /// from the watermark `old`.
    pub(crate) fn new(
        entries: Entries,
        slots: Vec<Slot>,
        options: &FileSourceOptions,
        old: Option<Watermark>,
        settings: Settings,
    ) -> Tracker {
        let mut slot_of = Vec::new();
        for (index, slot) in slots.iter().enumerate() {
            if slot.read.is_some() {
                slot_of.push(index);
            }
        }
        let old_last = old.as_ref().and_then(|mark| {
            slots
                .iter()
                .rposition(|slot| Path::new(&slot.display) <= Path::new(mark.top()))
        });
        let same_listing = old
            .as_ref()
            .is_none_or(|mark| mark.listed_path == options.path && mark.format == options.format);
        let mut tracker = Tracker {
            entries,
            slots,
            slot_of,
            base_dir: options.base_dir.clone(),
            listed_path: options.path.clone(),
            format: options.format,
            settings,
            finished: 0,
            passed: 0,
            idle: VecDeque::new(),
            recent: VecDeque::new(),
            mark: old.clone(),
            old,
            old_last,
            same_listing,
            left: None,
        };
        tracker.advance();
        tracker
    }

    /// The entries.
    pub(crate) fn entries(&self) -> &Entries {
        &self.entries
    }

    /// The entries, to change; call [`Tracker::finished`] or [`Tracker::advance`] after.
    pub(crate) fn entries_mut(&mut self) -> &mut Entries {
        &mut self.entries
    }

    /// The watermark to write with the entries.
    pub(crate) fn watermark(&self) -> Option<&Watermark> {
        self.mark.as_ref()
    }

    /// Every file read before file `index` (of those read this pass) is finished; with
    /// `done`, file `index` too.
    pub(crate) fn finished(&mut self, index: usize, done: bool) {
        self.finished = self.finished.max(index + usize::from(done));
        self.advance();
    }

    /// The clock less the margin, in Unix milliseconds: files changed before may leave.
    fn cutoff_ms(&self) -> i64 {
        self.settings.clock.cutoff_ms()
    }

    /// Whether every listed file at or below the old watermark was handled.
    fn passed_old(&self) -> bool {
        self.old_last.is_none_or(|last| self.passed > last)
    }

    /// Handle the slots before the first file not finished, let entries leave while they
    /// are over budget, and set the watermark.
    pub(crate) fn advance(&mut self) {
        let limit = match self.slot_of.get(self.finished) {
            Some(&slot) => slot,
            None => self.slots.len(),
        };
        let cutoff = self.cutoff_ms();
        let settled = unix_ms(
            self.settings
                .clock
                .now
                .checked_sub(self.settings.settle.max(self.settings.clock.margin))
                .unwrap_or(UNIX_EPOCH),
        );
        while self.passed < limit {
            let index = self.passed;
            self.passed += 1;
            if self.may_leave(index, cutoff) {
                if self.slots[index].changed_ms < settled {
                    self.idle.push_back(index);
                } else {
                    self.recent.push_back(index);
                }
            }
        }
        let may_drop = self.settings.complete && (self.passed_old() || self.same_listing);
        while may_drop && self.entries.bytes() > self.settings.budget {
            let Some(index) = self.idle.pop_front().or_else(|| self.recent.pop_front()) else {
                break;
            };
            let display = &self.slots[index].display;
            if self.entries.remove(display).is_some() {
                let newer = self
                    .left
                    .as_deref()
                    .is_none_or(|left| Path::new(display) > Path::new(left));
                if newer {
                    self.left = Some(display.clone());
                }
            }
        }
        self.mark = self.next_watermark(cutoff);
    }

    /// Whether the entry of slot `index` may leave the checkpoint: the file was read to its
    /// end with nothing left pending, changed before `cutoff`, and is still as listed.
    fn may_leave(&self, index: usize, cutoff: i64) -> bool {
        let slot = &self.slots[index];
        let Some(entry) = self.entries.get(&slot.display) else {
            return false;
        };
        if !entry.done || entry.pending || entry.size != slot.size || slot.changed_ms >= cutoff {
            return false;
        }
        // Changed while this pass read it: keep its entry, the next pass reads on.
        stat(&self.base_dir.join(&slot.display))
            .is_ok_and(|now| now == (slot.size, slot.changed_ms))
    }

    /// The watermark to write now.
    fn next_watermark(&self, cutoff: i64) -> Option<Watermark> {
        if !self.settings.complete {
            return self.old.clone();
        }
        let now = self
            .old
            .as_ref()
            .map_or(cutoff, |old| old.changed_before_ms.max(cutoff));
        if self.passed_old() {
            // Every file at or below the old watermark was handled: one step.
            let path = match (self.old.as_ref().map(Watermark::top), self.left.as_deref()) {
                (Some(old), Some(left)) if Path::new(left) > Path::new(old) => left,
                (Some(old), _) => old,
                (None, Some(left)) => left,
                (None, None) => return None,
            };
            return Some(Watermark {
                path: path.to_owned(),
                changed_before_ms: now,
                beyond: Vec::new(),
                listed_path: self.listed_path.clone(),
                format: self.format,
            });
        }
        // Stopped before the end of the old watermark: a step of this pass in front of the
        // old steps past it (files only leave before then with the same settings).
        let (Some(old), Some(left)) = (self.old.as_ref(), self.left.as_deref()) else {
            return self.old.clone();
        };
        let mut steps: Vec<WatermarkStep> = std::iter::once(WatermarkStep {
            path: old.path.clone(),
            changed_before_ms: old.changed_before_ms,
        })
        .chain(old.beyond.iter().cloned())
        .filter(|step| Path::new(&step.path) > Path::new(left))
        .collect();
        if steps
            .first()
            .is_none_or(|step| step.changed_before_ms < now)
        {
            steps.insert(
                0,
                WatermarkStep {
                    path: left.to_owned(),
                    changed_before_ms: now,
                },
            );
        }
        // Bounded: the two first steps become one with the earlier time, so files of the
        // first may count as late (read again), never as read.
        while steps.len() > MAX_STEPS {
            steps.remove(0);
        }
        let mut steps = steps.into_iter();
        let first = steps.next()?;
        Some(Watermark {
            path: first.path,
            changed_before_ms: first.changed_before_ms,
            beyond: steps.collect(),
            listed_path: old.listed_path.clone(),
            format: old.format,
        })
    }
}

/// The most steps a watermark keeps.
const MAX_STEPS: usize = 8;

/// How many late files are named one by one in a pass before the rest are counted.
const LATE_NAMED: usize = 10;

/// The late files of a pass (below the watermark, appeared or changed since), warned about:
/// the first ones by name, the rest counted.
#[derive(Debug, Default)]
pub(crate) struct LateFiles {
    seen: usize,
}

impl LateFiles {
    /// Warn that `shown`, below `mark`, is late and read from the start.
    pub(crate) fn warn(&mut self, shown: &str, mark: Option<&Watermark>) {
        self.seen += 1;
        if self.seen > LATE_NAMED {
            return;
        }
        let below = mark.map_or("", Watermark::top);
        tracing::warn!(
            file = shown,
            watermark = below,
            "`{shown}` sorts at or below the checkpoint's watermark `{below}` but appeared or changed after the files there were read: reading it from the start (if it was read before, its records are read again)"
        );
    }

    /// Count the late files not named.
    pub(crate) fn summarize(&self, mark: Option<&Watermark>) {
        let more = self.seen.saturating_sub(LATE_NAMED);
        if more > 0 {
            let below = mark.map_or("", Watermark::top);
            tracing::warn!(
                files = more,
                watermark = below,
                "{more} more files at or below the checkpoint's watermark `{below}` appeared or changed after the files there were read: reading them from the start"
            );
        }
    }
}

/// Warn when the settings that decide which files are listed changed since files left the
/// checkpoint below `mark`: the files they list now that were not listed then are read.
pub(crate) fn warn_if_listing_changed(mark: &Watermark, options: &FileSourceOptions) {
    let below = mark.top();
    if mark.listed_path != options.path {
        let (was, now) = (mark.listed_path.as_str(), options.path.as_str());
        tracing::warn!(
            watermark = below,
            "the File source's `path` is `{now}` but was `{was}` when files left the checkpoint below `{below}`: the files at or below it that `{was}` did not list are read from the start"
        );
    }
    if mark.format != options.format && matches!(mark.format, None | Some(FileFormat::Json)) {
        tracing::warn!(
            watermark = below,
            "the File source's `format` changed since files left the checkpoint below `{below}`: the files at or below it that were skipped for their format are read from the start"
        );
    }
}
