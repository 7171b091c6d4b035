#!/usr/bin/env bash
# The S3 -> Athena quickstart against a local moto server, no AWS account needed:
# uploads the sample events to a source bucket, runs discover (which creates the Glue
# tables), schema and sync, then reads the Parquet with DuckDB over S3 and the Glue tables
# with boto3.
#
#   AWS_ENDPOINT_URL=http://127.0.0.1:5000 bash examples/athena-quickstart/run.sh
#
# Needs a running moto server (`pip install 'moto[server]'; moto_server -p 5000`), and a
# Python with boto3, duckdb and duckdb-ext-httpfs (PYTHON, default: SKIPPR_TEST_PYTHON, else
# python3). State stays under examples/athena-quickstart/data (delete it to start over).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
: "${AWS_ENDPOINT_URL:?set AWS_ENDPOINT_URL to the moto server, e.g. http://127.0.0.1:5000}"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
python="${PYTHON:-${SKIPPR_TEST_PYTHON:-python3}}"
export QUICKSTART_SOURCE_BUCKET="${QUICKSTART_SOURCE_BUCKET:-quickstart-source}"
export QUICKSTART_OUTPUT_BUCKET="${QUICKSTART_OUTPUT_BUCKET:-quickstart-output}"
export QUICKSTART_RESULTS_BUCKET="${QUICKSTART_RESULTS_BUCKET:-quickstart-results}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/skipprd-target}"
# SKIPPR_BIN: an already built CLI (tests/run passes the one its `cargo test` built, whose
# dependency features differ from a plain `-p skipprd-local` build: no second compile).
if [[ -n "${SKIPPR_BIN:-}" ]]; then
  skipprd="$SKIPPR_BIN"
else
  cargo build --quiet --locked -p skipprd-local
  skipprd="$CARGO_TARGET_DIR/debug/skipprd"
fi
config="$here/skippr.yml"

"$python" - "$here/input" <<'PY'
import os, sys, boto3
s3 = boto3.client("s3")
for bucket in ("QUICKSTART_SOURCE_BUCKET", "QUICKSTART_OUTPUT_BUCKET", "QUICKSTART_RESULTS_BUCKET"):
    try:
        s3.create_bucket(Bucket=os.environ[bucket])
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
root = sys.argv[1]
for dirpath, _, files in os.walk(root):
    for name in files:
        path = os.path.join(dirpath, name)
        s3.upload_file(path, os.environ["QUICKSTART_SOURCE_BUCKET"], os.path.relpath(path, root))
PY

"$skipprd" --config "$config" discover --output text
"$skipprd" --config "$config" schema
"$skipprd" --config "$config" sync --once --output text

"$python" - <<'PY'
import os, boto3, duckdb
from urllib.parse import urlparse
glue = boto3.client("glue")
for t in glue.get_tables(DatabaseName="skippr_quickstart")["TableList"]:
    parts = glue.get_partitions(DatabaseName="skippr_quickstart", TableName=t["Name"])["Partitions"]
    print(f"Glue table skippr_quickstart.{t['Name']}: {len(t['StorageDescriptor']['Columns'])} columns, "
          f"partition keys {[k['Name'] for k in t['PartitionKeys']]}, {len(parts)} partitions, at {t['StorageDescriptor']['Location']}")
try:
    import duckdb_ext
    config = {"extension_directory": os.path.join(list(duckdb_ext.__path__)[0], "extensions")}
except ImportError:
    config = {}
con = duckdb.connect(config=config)
con.execute("LOAD httpfs")
endpoint = urlparse(os.environ["AWS_ENDPOINT_URL"])
con.execute("CREATE SECRET (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
            [os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_REGION"],
             endpoint.netloc, endpoint.scheme == "https"])
table = f"s3://{os.environ['QUICKSTART_OUTPUT_BUCKET']}/data/bikehire/ride/**/*.parquet"
print(con.execute(
    "SELECT started_at_day, count(*) AS rides, round(avg(price), 2) AS avg_price "
    "FROM read_parquet(?, hive_partitioning = true) GROUP BY 1 ORDER BY 1", [table]).fetchall())
PY
