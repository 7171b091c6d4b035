#!/usr/bin/env python3
"""Peak memory of the sync function's pass, as Lambda would bill it: the `skipprd-sync`
binary driven through its real runtime loop (tests/lambda/runtime_api.py) against the local
AWS of tests/aws/moto.sh (AWS_ENDPOINT_URL must point at it; run with the moto venv's
python, which has boto3).

    lambda_rss.py BOOTSTRAP DATA.jsonl [--memory-mb 512] [--label TEXT]

The function gets what the stacks give it (docs/deploy.md): the config in LAMBDA_TASK_ROOT
with the DynamoDB state store, the WAL in S3, an AthenaIceberg sink in Glue, the default
DELIVER_THRESHOLD_BYTES (64 MiB) and batch sizes, AWS_LAMBDA_FUNCTION_MEMORY_SIZE as given.
The File source reads DATA (linked into the task root). Scheduled events are invoked until a
pass reports nothing pending; then the process's peak RSS (VmHWM from /proc) is read before
it is stopped by PID. Prints one line: rows, seconds, invocations, peak RSS MiB.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import boto3

REPO = Path(__file__).resolve().parent.parent

ap = argparse.ArgumentParser()
ap.add_argument("bootstrap")
ap.add_argument("data")
ap.add_argument("--memory-mb", type=int, default=512)
ap.add_argument("--label", default="skipprd-sync")
args = ap.parse_args()
if not os.environ.get("AWS_ENDPOINT_URL"):
    sys.exit("lambda_rss.py: AWS_ENDPOINT_URL is not set (start tests/aws/moto.sh's moto_server)")

tag = uuid.uuid4().hex[:8]
bucket, table, database = f"rss-{tag}", f"rss-state-{tag}", f"rss_{tag}"
boto3.client("s3").create_bucket(Bucket=bucket)
boto3.client("dynamodb").create_table(
    TableName=table,
    AttributeDefinitions=[
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
    KeySchema=[
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    BillingMode="PAY_PER_REQUEST",
)

work = Path(tempfile.mkdtemp(prefix="lambda-rss-"))
root, scratch = work / "task", work / "tmp"
(root / "input").mkdir(parents=True)
scratch.mkdir()
os.symlink(os.path.abspath(args.data), root / "input" / "events.jsonl")
(root / "skippr.yml").write_text(
    f"""\
skippr:
  store:
    type: dynamodb
    name: {table}
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
      warehouse: s3://{bucket}/lake
      glue_database_name: {database}
      region: us-east-1
"""
)

port_file = work / "port"
api = subprocess.Popen(
    [sys.executable, str(REPO / "tests/lambda/runtime_api.py"), str(port_file)],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
function = None
try:
    for _ in range(200):
        if port_file.exists() and port_file.read_text().strip():
            break
        time.sleep(0.05)
    port = int(port_file.read_text())

    def call(method, path, body=None, timeout=1000):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKIPPR_", "DATA_DIR", "WAL_"))}
    env.update(
        AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{port}",
        AWS_LAMBDA_FUNCTION_NAME="skipprd-sync",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(args.memory_mb),
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        LAMBDA_TASK_ROOT=str(root),
        DATA_DIR=str(scratch),
        WAL_STORAGE="s3",
        SKIPPR_WAL_S3_BUCKET=bucket,
        RUST_LOG="warn",
    )
    log = open(work / "function.log", "wb")
    function = subprocess.Popen([args.bootstrap], env=env, stdout=log, stderr=subprocess.STDOUT)
    event = json.loads((REPO / "tests/fixtures/events/scheduled.json").read_text())
    rows = invocations = 0
    started = time.monotonic()
    while True:
        deadline = int(time.time() * 1000) + 900_000
        rid = call("POST", "/_test/invoke", {"event": event, "deadline_ms": deadline})["request_id"]
        result = call("GET", f"/_test/result/{rid}?wait=900")
        invocations += 1
        if result.get("kind") != "response":
            sys.exit(f"{args.label}: invocation failed: {result} (log: {work / 'function.log'})")
        summary = result["body"] if isinstance(result["body"], dict) else json.loads(result["body"])
        rows += summary.get("rows", 0)
        if summary.get("pending", 0) == 0 and not summary.get("stopped_for_deadline"):
            break
        if invocations >= 50:
            sys.exit(f"{args.label}: still pending after 50 invocations: {summary}")
    seconds = time.monotonic() - started
    status = Path(f"/proc/{function.pid}/status").read_text()
    hwm_kib = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("VmHWM:"))
    print(
        f"{args.label:<28} rows {rows:>10}  {seconds:8.2f} s  invocations {invocations}  "
        f"peak RSS {hwm_kib / 1024:7.1f} MiB (of {args.memory_mb} MB)"
    )
finally:
    for proc in (function, api):
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
