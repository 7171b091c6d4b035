//! Failpoints: named places in the WAL's write path where a crash can be injected.
//!
//! `check` is called at each step of an append, a segment roll and a reclaim. It returns
//! `true` when the named failpoint should fire; the caller then stops right there, as a crash
//! would, leaving the files exactly as they are.
//!
//! Two ways to fire one:
//! - **Process crash** (integration tests, chaos runs): build `skipprd-shared` with the cargo
//!   feature `failpoints` and set `SKIPPR_FAILPOINT=<name>`. `check` then calls
//!   [`std::process::abort`] at that point; it never returns `true`. Without the feature the
//!   environment variable is ignored and every check is a constant `false`.
//! - **In-process hook** (unit tests): `arm` sets a thread-local failpoint name; `check`
//!   returns `true` once when that name is reached and disarms itself.
//!
//! The names are listed in [`ALL`].

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
    fn failpoint_names_are_unique_and_prefixed_with_wal() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert!(ALL.iter().all(|name| name.starts_with("wal.")));
    }
}
