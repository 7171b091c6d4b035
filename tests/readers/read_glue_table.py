#!/usr/bin/env python3
"""Read Iceberg tables registered in AWS Glue the way Athena's neighbours do, independently of
skipprd's own code: PyIceberg's `GlueCatalog` loads each table (Glue `metadata_location`, then
the metadata and data files on S3), and boto3 reads the Glue table definition itself. The Rust
tests in `local/tests/glue.rs` run it against the moto server of `tests/run`.

    read_glue_table.py --database DB [--key COLUMN] [--values] TABLE...

Endpoint, region and credentials come from the environment (AWS_ENDPOINT_URL, AWS_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Prints one JSON object:
{"tables": {TABLE: {"pyiceberg": {...}, "glue": {...}}}} with
  pyiceberg.rows      the row count;
  pyiceberg.columns   [[name, type], ...] in PyIceberg's type names;
  pyiceberg.values    with --values: every row (ordered by --key), as JSON;
  pyiceberg.summaries the snapshot summaries, oldest first;
  glue.parameters     the Glue table parameters (table_type, metadata_location, ...);
  glue.columns        [[name, type], ...] of the Glue storage descriptor;
  glue.location       the storage descriptor's location.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_table import arrow_rows  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", metavar="TABLE")
    parser.add_argument("--database", required=True)
    parser.add_argument("--key")
    parser.add_argument("--values", action="store_true")
    args = parser.parse_args()

    import boto3
    from pyiceberg.catalog.glue import GlueCatalog

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    region = os.environ.get("AWS_REGION", "us-east-1")
    key_id = os.environ.get("AWS_ACCESS_KEY_ID", "testing")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "testing")
    catalog = GlueCatalog(
        "glue",
        **{
            "glue.endpoint": endpoint,
            "glue.region": region,
            "glue.access-key-id": key_id,
            "glue.secret-access-key": secret,
            "s3.endpoint": endpoint,
            "s3.region": region,
            "s3.access-key-id": key_id,
            "s3.secret-access-key": secret,
        },
    )
    glue = boto3.client(
        "glue",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
    )
    result = {}
    for name in args.tables:
        table = catalog.load_table((args.database, name))
        data = table.scan().to_arrow()
        snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
        reader = {
            "rows": data.num_rows,
            "columns": [[f.name, str(f.field_type)] for f in table.schema().fields],
            "summaries": [
                {k: str(v) for k, v in s.summary.model_dump().items()} if s.summary else {}
                for s in snapshots
            ],
        }
        if args.values:
            reader["values"] = arrow_rows(data, args.key)
        described = glue.get_table(DatabaseName=args.database, Name=name)["Table"]
        sd = described.get("StorageDescriptor", {})
        result[name] = {
            "pyiceberg": reader,
            "glue": {
                "parameters": described.get("Parameters", {}),
                "columns": [[c["Name"], c.get("Type", "")] for c in sd.get("Columns", [])],
                "location": sd.get("Location"),
            },
        }
    json.dump({"tables": result}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
