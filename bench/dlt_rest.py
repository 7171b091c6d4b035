#!/usr/bin/env python3
"""Peer benchmark: dlt's `rest_api` source over the benchmark API (bench/api_pages.py), every
page followed by its `links.next` URL, into Parquet files on the local filesystem.

usage: dlt_rest.py BASE_URL OUT_DIR
"""
import sys

import dlt
from dlt.sources.rest_api import rest_api_source

base, out = sys.argv[1], sys.argv[2]
source = rest_api_source(
    {
        "client": {
            "base_url": base,
            "paginator": {"type": "json_link", "next_url_path": "links.next"},
        },
        "resources": [
            {
                "name": "events",
                "endpoint": {"path": "items", "params": {"page": 0}, "data_selector": "data"},
            }
        ],
    }
)
p = dlt.pipeline(
    pipeline_name="bench_rest",
    destination=dlt.destinations.filesystem(bucket_url="file://" + out),
    dataset_name="events",
    pipelines_dir=out + "/.dlt",
)
info = p.run(source, loader_file_format="parquet")
print(info.has_failed_jobs)
