#!/usr/bin/env python3
"""Peer benchmark: dlt's `sql_database` source (pyarrow backend, SQLAlchemy + psycopg2) reading
one PostgreSQL table into Parquet files on the local filesystem.

usage: PG_BENCH=postgresql://user:pass@host:port/db dlt_sql.py TABLE OUT_DIR

The connection URL comes from the environment (never the command line, where `ps` shows it).
Prints whether any load job failed and the rows dlt extracted.
"""
import os
import sys

import dlt
from dlt.sources.sql_database import sql_database

table, out = sys.argv[1], sys.argv[2]
url = os.environ["PG_BENCH"].replace("postgresql://", "postgresql+psycopg2://", 1)
source = sql_database(url, schema="public", table_names=[table], backend="pyarrow")
p = dlt.pipeline(
    pipeline_name="bench_sql",
    destination=dlt.destinations.filesystem(bucket_url="file://" + out),
    dataset_name="pg",
    pipelines_dir=out + "/.dlt",
)
info = p.run(source, loader_file_format="parquet")
rows = p.last_trace.last_normalize_info.row_counts.get(table)
print(info.has_failed_jobs, rows)
