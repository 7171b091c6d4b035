//! Failpoints: named places in the write path (WAL append, roll and reclaim; the pass's
//! commit steps; a destination's delivery) where a crash can be injected. Every name is here.
//!
//! `check` is called at each of those places. It returns `true` when the named failpoint
//! should fire; the caller then stops right there, as a crash would, leaving files and state
//! exactly as they are.
//!
//! Two ways to fire one:
//! - **Process crash** (integration tests, chaos runs): build `skipprd-shared` with the cargo
//!   feature `failpoints` and set `SKIPPR_FAILPOINT=<name>`. `check` then calls
//!   [`std::process::abort`] at that point; it never returns `true`. Without the feature the
//!   environment variable is ignored and every check is a constant `false`.
//! - **In-process hook** (unit tests): `arm` sets a thread-local failpoint name; `check`
//!   returns `true` once when that name is reached and disarms itself.
//!
//! The names are listed in [`ALL`], by step.

/// The WAL's write path: append, segment roll, reclaim.
pub mod wal {
    /// After the data record is written, before the commit record is written.
    pub const AFTER_DATA_WRITE: &str = "wal.after_data_write";
    /// After the commit record is written, before the segment file is fsynced.
    pub const AFTER_COMMIT_WRITE: &str = "wal.after_commit_write";
    /// After the fsync that makes a batch committed, before `append` returns.
    pub const AFTER_FSYNC: &str = "wal.after_fsync";
    /// During a segment roll: the new segment's temporary file is written, not yet renamed.
    pub const ROLL_BEFORE_RENAME: &str = "wal.roll_before_rename";
    /// During `reclaim_through`: after the reclaim record is durable, before the first delete.
    pub const RECLAIM_BEFORE_DELETE: &str = "wal.reclaim_before_delete";
    /// During `reclaim_through`: after a segment is deleted, before the next one is.
    pub const RECLAIM_BETWEEN_DELETES: &str = "wal.reclaim_between_deletes";

    /// Every failpoint name, in the order an append, roll and reclaim reach them.
    pub const ALL: &[&str] = &[
        AFTER_DATA_WRITE,
        AFTER_COMMIT_WRITE,
        AFTER_FSYNC,
        ROLL_BEFORE_RENAME,
        RECLAIM_BEFORE_DELETE,
        RECLAIM_BETWEEN_DELETES,
    ];
}

/// The pass's commit steps (`pipeline::sync`, `docs/commit-protocol.md`).
pub mod sync {
    /// After the batch was typed (and the schema saved), before its WAL commit.
    pub const BEFORE_WAL_COMMIT: &str = "sync.before_wal_commit";
    /// After the WAL commit, before the position is recorded in the state store.
    pub const AFTER_WAL_COMMIT: &str = "sync.after_wal_commit";
    /// After the position was recorded.
    pub const AFTER_POSITION: &str = "sync.after_position";
    /// After an evolved schema was saved, before the schema version is recorded.
    pub const AFTER_SCHEMA_SAVE: &str = "sync.after_schema_save";
    /// After the destination committed a delivery, before the acknowledgement is stored.
    pub const AFTER_DELIVER: &str = "sync.after_deliver";
    /// After the acknowledgement was stored, before the WAL reclaims the batches.
    pub const AFTER_ACK: &str = "sync.after_ack";
    /// After the WAL reclaimed delivered batches.
    pub const AFTER_RECLAIM: &str = "sync.after_reclaim";
    /// After a read ended, before its end marker is committed to the WAL (pipelines whose
    /// tables are replaced by whole reads).
    pub const BEFORE_READ_END: &str = "sync.before_read_end";
    /// After a read's end marker was committed, before the position names it.
    pub const AFTER_READ_END: &str = "sync.after_read_end";
    /// Every failpoint of the pass.
    pub const ALL: &[&str] = &[
        BEFORE_WAL_COMMIT,
        AFTER_WAL_COMMIT,
        AFTER_POSITION,
        AFTER_SCHEMA_SAVE,
        AFTER_DELIVER,
        AFTER_ACK,
        AFTER_RECLAIM,
        BEFORE_READ_END,
        AFTER_READ_END,
    ];
}

/// A destination's delivery (`sinks`).
pub mod sink {
    /// Data files written and fsynced, before the table commit.
    pub const AFTER_DATA_FILES: &str = "sink.after_data_files";
    /// The `Duckdb` lake's commit: `metadata/vN.metadata.json` is linked (the table is
    /// committed), `metadata/version-hint.text` still names the previous version.
    pub const BEFORE_VERSION_HINT: &str = "sink.before_version_hint";
    /// After the commit of one table (for Iceberg: metadata and pointer written).
    pub const AFTER_TABLE_COMMIT: &str = "sink.after_table_commit";
    /// Every failpoint of a delivery.
    pub const ALL: &[&str] = &[AFTER_DATA_FILES, BEFORE_VERSION_HINT, AFTER_TABLE_COMMIT];
}

/// Every failpoint, by the step it belongs to (the prefix of its names).
pub const ALL: &[(&str, &[&str])] = &[("wal", wal::ALL), ("sync", sync::ALL), ("sink", sink::ALL)];

/// The environment variable naming the failpoint that aborts the process (with the
/// `failpoints` feature).
pub const ENV_VAR: &str = "SKIPPR_FAILPOINT";

/// Whether the failpoint `name` fires here. With the `failpoints` feature and
/// `SKIPPR_FAILPOINT=name`, this aborts the process instead of returning.
pub(crate) fn check(name: &'static str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        if env_failpoint().as_deref() == Some(name) {
            tracing::error!(failpoint = name, "Failpoint hit, aborting the process.");
            std::process::abort();
        }
    }
    #[cfg(test)]
    {
        if hook::take(name) {
            return true;
        }
    }
    let _ = name;
    false
}

/// The failpoint named in the environment, read once.
#[cfg(feature = "failpoints")]
fn env_failpoint() -> &'static Option<String> {
    static NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| std::env::var(ENV_VAR).ok().filter(|name| !name.is_empty()))
}

#[cfg(test)]
pub(crate) use hook::arm;

#[cfg(test)]
mod hook {
    use std::cell::RefCell;

    thread_local! {
        static ARMED: RefCell<Option<(&'static str, usize)>> = const { RefCell::new(None) };
    }

    /// Make the failpoint `name` fire on this thread the `(skip + 1)`th time it is reached.
    /// Replaces any failpoint armed before.
    pub(crate) fn arm(name: &'static str, skip: usize) {
        ARMED.with(|armed| *armed.borrow_mut() = Some((name, skip)));
    }

    /// Whether `name` is armed and due; firing disarms it.
    pub(super) fn take(name: &'static str) -> bool {
        ARMED.with(|armed| {
            let mut armed = armed.borrow_mut();
            match armed.as_mut() {
                Some((armed_name, skip)) if *armed_name == name => {
                    if *skip == 0 {
                        *armed = None;
                        true
                    } else {
                        *skip -= 1;
                        false
                    }
                }
                _ => false,
            }
        })
    }

    /// Disarm any failpoint on this thread.
    pub(crate) fn disarm() {
        ARMED.with(|armed| *armed.borrow_mut() = None);
    }
}

#[cfg(test)]
pub(crate) use hook::disarm;

#[cfg(test)]
mod tests {
    use super::wal::{AFTER_DATA_WRITE, AFTER_FSYNC};
    use super::*;

    #[test]
    fn an_armed_failpoint_fires_once_after_its_skips_and_others_never_fire() {
        arm(AFTER_FSYNC, 1);
        assert!(!check(AFTER_DATA_WRITE));
        assert!(!check(AFTER_FSYNC));
        assert!(check(AFTER_FSYNC));
        assert!(!check(AFTER_FSYNC));
        disarm();
    }

    #[test]
    fn failpoint_names_are_unique_and_prefixed_with_their_step() {
        let mut names = ALL
            .iter()
            .flat_map(|(_, names)| names.iter())
            .collect::<Vec<_>>();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
        for (prefix, names) in ALL {
            assert!(
                names
                    .iter()
                    .all(|name| name.starts_with(&format!("{prefix}.")))
            );
        }
        assert!(wal::ALL.iter().all(|name| name.starts_with("wal.")));
    }
}
