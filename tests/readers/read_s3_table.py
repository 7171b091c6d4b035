#!/usr/bin/env python3
"""Read Iceberg tables on S3 by their metadata file, independently of skipprd's own code:
PyIceberg's `StaticTable.from_metadata(METADATA_LOCATION)`, the data files read from S3. The
Rust tests in `local/tests/skipprlake_s3.rs` run it against the moto server of `tests/run`,
with the metadata location read from the table's pointer item in DynamoDB.

    read_s3_table.py [--key COLUMN] [--values] METADATA_LOCATION...

Endpoint, region and credentials come from the environment (AWS_ENDPOINT_URL, AWS_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Prints one JSON object:
{"tables": {METADATA_LOCATION: {"rows": N, "columns": [[name, type], ...],
 with --key: "duplicate_keys", "null_keys", "keys"; with --values: "values", every row
 ordered by the key column when given}}} (see read_table.py).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_table import arrow_rows, key_stats  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locations", nargs="+", metavar="METADATA_LOCATION")
    parser.add_argument("--key")
    parser.add_argument("--values", action="store_true")
    args = parser.parse_args()

    from pyiceberg.table import StaticTable

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    properties = {
        "s3.endpoint": endpoint,
        "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
    }
    result = {}
    for location in args.locations:
        table = StaticTable.from_metadata(location, properties=properties)
        data = table.scan().to_arrow()
        out = {
            "rows": data.num_rows,
            "columns": [[f.name, str(f.field_type)] for f in table.schema().fields],
        }
        if args.key:
            out.update(key_stats(data, args.key))
        if args.values:
            out["values"] = arrow_rows(data, args.key)
        result[location] = out
    json.dump({"tables": result}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
