//! The peak memory of a `skipprd` run, as the kernel counts it.

use std::path::Path;

use serde_json::Value;

/// Run `skipprd args` in `dir` (with the environment [`crate::bin::skipprd_command`] gives it)
/// as the child of a Python process that reads the child's peak RSS (`ru_maxrss`). Returns
/// `{"code", "stdout", "stderr" (its last 2,000 characters)}` and the peak in MiB.
pub fn skipprd_peak_rss(dir: &Path, args: &[&str]) -> (Value, u64) {
    let measure = "import json, resource, subprocess, sys\n\
r = subprocess.run(sys.argv[1:], capture_output=True)\n\
print(json.dumps({'code': r.returncode, 'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, 'stdout': r.stdout.decode(errors='replace'), 'stderr': r.stderr.decode(errors='replace')[-2000:]}))";
    let bin = crate::bin::skipprd_command(dir);
    let program = bin.get_program().to_owned();
    let mut cmd = std::process::Command::new(crate::local_aws::reader_python());
    cmd.current_dir(dir)
        .arg("-c")
        .arg(measure)
        .arg(program)
        .args(bin.get_args())
        .args(args);
    // The same environment the helper gives skipprd (its scrubbed variables removed).
    for (key, value) in bin.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd.output().expect("run the measuring Python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the measurement's JSON");
    let peak_mib = report["maxrss_kib"].as_u64().expect("maxrss_kib") / 1024;
    (report, peak_mib)
}
