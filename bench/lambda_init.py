#!/usr/bin/env python3
"""Cold init of a Lambda function package, measured the way Lambda's "Init Duration" counts it:
from the process start to the function's first GET /runtime/invocation/next, the moment it is
ready for an event. Python stdlib only.

    lambda_init.py ZIP [--runs N] [--qemu SYSROOT] [--label TEXT]

ZIP is a `bootstrap.zip` from functions/build; its `bootstrap` is extracted and started N times
(after one unreported start that brings the file into the page cache), each time fresh against
the Runtime API emulator of tests/lambda/runtime_api.py, then killed once it polls. --qemu runs
an arm64 `bootstrap` under qemu-aarch64 with SYSROOT as its library root (emulated: an upper
bound, not a Graviton figure).

The function sees what Lambda gives it: the AWS_LAMBDA_* variables, a region, session
credentials, LAMBDA_TASK_ROOT holding a `skippr.yml` (DynamoDB state store, S3 WAL, an
AthenaIceberg sink), and no HOME profile. AWS_ENDPOINT_URL points at a closed port, so an init
that tried the network would fail and be reported, not timed. Prints one line of figures;
`init_ms` is the function's own log figure (config and AWS handle, inside the process).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CONFIG = """\
skippr:
  store:
    type: dynamodb
    name: skipprd-bench-state
pipelines:
  events:
    data_source: data_sources.files
    data_sink: data_sinks.lake
    transform:
      namespace_fields: event_type
data_sources:
  files:
    File:
      path: input
data_sinks:
  lake:
    AthenaIceberg:
      warehouse: s3://skipprd-bench-wal/lake
      glue_database_name: skipprd_bench
      region: us-east-1
"""


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_test/stats", timeout=10) as r:
        return json.load(r)


def start_emulator(tmp):
    port_file = tmp / "port"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests/lambda/runtime_api.py"), str(port_file)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the Runtime API emulator did not start")
        time.sleep(0.01)
    return proc, int(port_file.read_text().strip())


def one_start(cmd, env, port, log_path, limit_s=60):
    """Start the function; (ms from start to its first poll, peak RSS KiB, its log)."""
    before = len(stats(port)["poll_times_ns"])
    with open(log_path, "wb") as log:
        started = time.time_ns()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + limit_s
        while True:
            polls = stats(port)["poll_times_ns"]
            if len(polls) > before:
                first = polls[before]
                break
            if proc.poll() is not None:
                raise SystemExit(f"the function exited ({proc.returncode}) before polling:\n"
                                 + Path(log_path).read_text(errors="replace")[-2000:])
            if time.monotonic() > deadline:
                raise SystemExit(f"no poll within {limit_s} s")
            time.sleep(0.005)
        rss = 0
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    rss = int(line.split()[1])
        except OSError:
            pass
    finally:
        proc.kill()
        proc.wait()
    return (first - started) / 1e6, rss, Path(log_path).read_text(errors="replace")


def logged_init(log):
    """The function's `init_ms` from its "Initialised." line; an init failure ends the run."""
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        fields = event.get("fields", {})
        if "init_ms" in fields:
            return float(fields["init_ms"])
        if fields.get("message", "").startswith("Init failed"):
            raise SystemExit(f"the function's init failed: {fields.get('error')}")
    raise SystemExit("no init_ms in the function's log:\n" + log[-2000:])


def spread(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("zip", type=Path)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--qemu", metavar="SYSROOT")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="skipprd-lambda-init-") as tmp:
        tmp = Path(tmp)
        task_root, scratch, home = tmp / "task", tmp / "scratch", tmp / "home"
        for d in (task_root / "input", scratch, home):
            d.mkdir(parents=True)
        with zipfile.ZipFile(args.zip) as z:
            info = z.getinfo("bootstrap")
            z.extract(info, task_root)
        bootstrap = task_root / "bootstrap"
        bootstrap.chmod((info.external_attr >> 16) & 0o777 or 0o755)
        (task_root / "skippr.yml").write_text(CONFIG)

        emulator, port = start_emulator(tmp)
        try:
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": str(home),
                "LANG": "en_US.UTF-8",
                "TZ": ":UTC",
                "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
                "AWS_LAMBDA_FUNCTION_NAME": "skipprd-bench",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/skipprd-bench",
                "AWS_LAMBDA_LOG_STREAM_NAME": "2026/12/01/[$LATEST]0123456789abcdef",
                "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
                "AWS_EXECUTION_ENV": "AWS_Lambda_provided.al2023",
                "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "ASIABENCHBENCHBENCH0",
                "AWS_SECRET_ACCESS_KEY": "bench-secret",
                "AWS_SESSION_TOKEN": "bench-token",
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}",
                "LAMBDA_TASK_ROOT": str(task_root),
                "_HANDLER": "bootstrap",
                "DATA_DIR": str(scratch),
                "WAL_STORAGE": "s3",
                "SKIPPR_WAL_S3_BUCKET": "skipprd-bench-wal",
                "RUST_LOG": "info",
            }
            cmd = [str(bootstrap)]
            if args.qemu:
                cmd = ["qemu-aarch64", "-L", args.qemu, str(bootstrap)]
            one_start(cmd, env, port, tmp / "warm.log")  # page cache
            starts, inits, rss = [], [], []
            for i in range(args.runs):
                ms, kib, log = one_start(cmd, env, port, tmp / f"run{i}.log")
                starts.append(ms)
                inits.append(logged_init(log))
                rss.append(kib / 1024)
        finally:
            emulator.kill()
            emulator.wait()

    print(f"{args.label:<30} start -> first poll ms {spread(starts):>22}   "
          f"init_ms {spread(inits):>20}   peak RSS MiB {statistics.median(rss):.1f}   n={args.runs}")


if __name__ == "__main__":
    main()
