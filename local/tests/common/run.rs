//! Running `skipprd` as a user would, in a test: its exit code and what it printed.

use std::path::Path;

/// How a run of `skipprd` ended.
pub struct Run {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Run `skipprd args` in `dir` with `env` added (see [`crate::bin::skipprd_command`]).
pub fn skipprd(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = crate::bin::skipprd_command(dir);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run skipprd");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
