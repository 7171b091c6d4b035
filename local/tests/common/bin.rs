//! The `skipprd` binary the CLI tests run.
#![allow(
    dead_code,
    clippy::unwrap_used,
    reason = "test support: not every test binary uses every item; a failed spawn should fail the test"
)]

/// Cargo's `skipprd`, or `SKIPPR_TEST_BIN` when set: a copy, for when several worktrees share
/// one target directory and another build may replace cargo's binary mid-run.
pub fn skipprd_bin() -> std::path::PathBuf {
    std::env::var_os("SKIPPR_TEST_BIN")
        .filter(|p| !p.is_empty())
        .map_or_else(|| env!("CARGO_BIN_EXE_skipprd").into(), Into::into)
}

/// Variables that change what `skipprd` does if the developer's shell has them set; every
/// test command starts without them and sets what it needs.
pub const SCRUBBED: &[&str] = &[
    "SKIPPR_CONFIG_FILE",
    "PIPELINE_NAME",
    "DATA_DIR",
    "WORKSPACE_NAME",
    "TENANT",
    "SKIPPR_S3_BUCKET",
    "SKIPPR_WAL_S3_BUCKET",
    "SKIPPRD_EL_STORAGE_MODE",
    "WAL_STORAGE",
    "RUST_LOG",
    "TRANSFORM_NAMESPACE_FIELDS",
    "SKIPPR_FAILPOINT",
    "DELIVER_THRESHOLD_BYTES",
    "SKIPPR_LOG_FILE",
    "SKIPPR_LOG_DIR",
];

/// `skipprd` ([`skipprd_bin`]) to run in `dir`, without the [`SCRUBBED`] variables.
pub fn skipprd_command(dir: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(skipprd_bin());
    cmd.current_dir(dir);
    for var in SCRUBBED {
        cmd.env_remove(var);
    }
    cmd
}

/// `out`, once its command is known to have succeeded; else the test fails with `what`, the
/// command's stderr and its stdout.
pub fn succeeded(out: std::process::Output, what: &str) -> std::process::Output {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// `skipprd ARGS` in `dir`, which must succeed ([`succeeded`]).
pub fn run_ok(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = skipprd_command(dir).args(args).output().unwrap();
    succeeded(out, &format!("skipprd {args:?}"))
}
