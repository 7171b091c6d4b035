#!/usr/bin/env python3
"""Peer benchmark: load a JSON-lines file with dlt into Parquet files on the local filesystem.

usage: dlt_load.py IN.jsonl OUT_DIR
"""
import json, sys, time, dlt
src, out = sys.argv[1], sys.argv[2]
def rows():
    with open(src) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                pass
p = dlt.pipeline(pipeline_name="bench", destination=dlt.destinations.filesystem(bucket_url="file://" + out), dataset_name="events", pipelines_dir=out + "/.dlt")
info = p.run(rows(), table_name="events", loader_file_format="parquet")
print(info.has_failed_jobs)
