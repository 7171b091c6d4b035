#!/usr/bin/env python3
"""Peer benchmark: load a JSON-lines file with dlt into PostgreSQL (dlt's `postgres`
destination, its defaults: nested objects flattened into columns, lists into child tables,
rows sent as INSERT statements).

usage: PG_BENCH=postgresql://user:pass@host:port/db dlt_pg.py IN.jsonl WORK_DIR

The connection URL comes from the environment (never the command line, where `ps` shows it).
Prints whether any load job failed and the rows of the root table.
"""
import json
import os
import sys

import dlt

src, work = sys.argv[1], sys.argv[2]


def rows():
    with open(src) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                pass


p = dlt.pipeline(
    pipeline_name="bench_pg",
    destination=dlt.destinations.postgres(credentials=os.environ["PG_BENCH"]),
    dataset_name="dlt",
    pipelines_dir=work + "/.dlt",
)
info = p.run(rows(), table_name="events")
print(info.has_failed_jobs, p.last_trace.last_normalize_info.row_counts.get("events"))
