//! The `skipprd` binary the CLI tests run.

/// Cargo's `skipprd`, or `SKIPPR_TEST_BIN` when set: a copy, for when several worktrees share
/// one target directory and another build may replace cargo's binary mid-run.
pub fn skipprd_bin() -> std::path::PathBuf {
    std::env::var_os("SKIPPR_TEST_BIN")
        .filter(|p| !p.is_empty())
        .map_or_else(|| env!("CARGO_BIN_EXE_skipprd").into(), Into::into)
}
