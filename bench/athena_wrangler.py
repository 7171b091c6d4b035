#!/usr/bin/env python3
"""The awswrangler peer of `bench/run athena`: read the same JSON-lines object from S3 and write
it as the same Athena layout, `wr.s3.to_parquet(dataset=True, partition_cols=[...])` with the
Glue table registered, one table per event type partitioned by day, as an AWS user would.

usage: athena_wrangler.py SOURCE_URI OUTPUT_URI DATABASE

Endpoint and credentials come from the environment (moto). Prints one JSON line:
{"rows": N, "s3_requests": N, "glue_requests": N}, counted from botocore's request events.
"""
import json
import sys

import awswrangler as wr
import boto3
import pandas as pd

source, output, database = sys.argv[1:4]
session = boto3.Session()
counts = {"s3": 0, "glue": 0}


def count(service):
    def hook(**_):
        counts[service] += 1
    return hook


session.events.register("before-send.s3", count("s3"))
session.events.register("before-send.glue", count("glue"))
if database not in wr.catalog.databases(boto3_session=session)["Database"].values:
    wr.catalog.create_database(database, boto3_session=session)
rows = 0
# Chunked, as a user with a large object would (one frame of 1M nested rows would need GBs).
for chunk in wr.s3.read_json(source, lines=True, chunksize=200_000, boto3_session=session):
    for kind, frame in chunk.groupby("event_type"):
        frame = frame.dropna(axis=1, how="all").drop(columns=["event_type"])
        if "price" in frame:
            # 1% of prices are text ("waived"): a number column plus a text one, as skipprd
            # types them (Parquet needs one type per column).
            numeric = pd.to_numeric(frame["price"], errors="coerce")
            text = frame["price"].where(numeric.isna()).astype("string")
            frame = frame.assign(price=numeric, price_string=text)
        if "started_at" in frame:
            day = pd.to_datetime(frame["started_at"], unit="s")
        else:
            day = pd.to_datetime(frame["observed_at_ms"], unit="ms")
        frame = frame.assign(started_at_day=day.dt.strftime("%Y-%m-%d"))
        wr.s3.to_parquet(
            frame,
            path=f"{output}/{kind}/",
            dataset=True,
            partition_cols=["started_at_day"],
            database=database,
            table=kind,
            mode="append",
            compression="zstd",
            boto3_session=session,
        )
        rows += len(frame)
print(json.dumps({"rows": rows, "s3_requests": counts["s3"], "glue_requests": counts["glue"]}))
