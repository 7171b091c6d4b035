#!/usr/bin/env python3
"""Read a Hive-layout Parquet table on S3 and its Glue definition, independently of skipprd's
own code: DuckDB's `read_parquet(..., hive_partitioning=true)` over S3 (httpfs) and boto3's
Glue `GetTable` / `GetPartitions`. The Rust tests in `local/tests/athena_hive.rs` run it
against the moto server of `tests/run`.

    read_hive_s3.py --location s3://BUCKET/PREFIX/TABLE|DIR [--database DB --table NAME] [--key COLUMN]

Endpoint, region and credentials come from the environment (AWS_ENDPOINT_URL, AWS_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Prints one JSON object:
{"rows": N, "columns": [[name, type], ...], "files": [key, ...],
 with --key: "duplicate_keys", "null_keys", "keys";
 with --database: "glue": {"columns": [[name, type, comment]], "partition_keys": [name...],
 "table_type", "serde", "location", "partitions": [[values, location]...]}}
"""

import argparse
import json
import os
import sys
from urllib.parse import urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_table import quote  # noqa: E402


def connection():
    import duckdb
    import duckdb_ext

    extensions = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    con = duckdb.connect(
        config={"extension_directory": extensions, "autoinstall_known_extensions": False}
    )
    con.execute("LOAD httpfs")
    con.execute("SET TimeZone = 'UTC'")
    endpoint = urlparse(os.environ["AWS_ENDPOINT_URL"])
    con.execute(
        "CREATE SECRET moto (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
        [
            os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
            os.environ.get("AWS_REGION", "us-east-1"),
            endpoint.netloc,
            endpoint.scheme == "https",
        ],
    )
    return con


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--location", required=True)
    parser.add_argument("--database")
    parser.add_argument("--table")
    parser.add_argument("--key")
    args = parser.parse_args()

    import boto3

    files = []
    if args.location.startswith("s3://"):
        s3 = boto3.client("s3")
        url = urlparse(args.location)
        bucket, prefix = url.netloc, url.path.lstrip("/").rstrip("/") + "/"
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            files.extend(o["Key"] for o in page.get("Contents", []))
    else:
        for root, _, names in os.walk(args.location):
            files.extend(os.path.relpath(os.path.join(root, n), args.location) for n in names)
    out = {"files": sorted(files)}
    if any(f.endswith(".parquet") for f in files):
        con = connection()
        scan = "read_parquet(?, hive_partitioning = true, union_by_name = true)"
        glob = [args.location.rstrip("/") + "/**/*.parquet"]
        out["rows"] = con.execute(f"SELECT count(*) FROM {scan}", glob).fetchone()[0]
        described = con.execute(f"DESCRIBE SELECT * FROM {scan}", glob).fetchall()
        out["columns"] = [[row[0], row[1]] for row in described]
        if args.key:
            key = quote(args.key)
            keys = [
                r[0]
                for r in con.execute(
                    f"SELECT CAST({key} AS VARCHAR) FROM {scan} ORDER BY 1", glob
                ).fetchall()
            ]
            out["null_keys"] = sum(1 for k in keys if k is None)
            present = [k for k in keys if k is not None]
            out["duplicate_keys"] = len(present) - len(set(present))
            out["keys"] = present
    else:
        out["rows"] = 0
        out["columns"] = []
    if args.database:
        glue = boto3.client("glue")
        table = glue.get_table(DatabaseName=args.database, Name=args.table)["Table"]
        sd = table["StorageDescriptor"]
        partitions = []
        for page in glue.get_paginator("get_partitions").paginate(
            DatabaseName=args.database, TableName=args.table
        ):
            for p in page["Partitions"]:
                partitions.append([p["Values"], p["StorageDescriptor"]["Location"]])
        out["glue"] = {
            "columns": [[c["Name"], c["Type"], c.get("Comment")] for c in sd["Columns"]],
            "partition_keys": [k["Name"] for k in table.get("PartitionKeys", [])],
            "table_type": table.get("TableType"),
            "serde": sd.get("SerdeInfo", {}).get("SerializationLibrary"),
            "input_format": sd.get("InputFormat"),
            "location": sd.get("Location"),
            "partitions": sorted(partitions),
        }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
