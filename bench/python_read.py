#!/usr/bin/env python3
"""Peer benchmark: read one Iceberg table of the local lake into a `pyarrow.Table`, in a
process of its own (bench/run measures its peak RSS with /usr/bin/time).

usage: python_read.py skippr PROJECT_DIR PIPELINE NAMESPACE
       python_read.py duckdb TABLE_DIR
       python_read.py pyiceberg TABLE_DIR

skippr: `Session(config=PROJECT_DIR/skippr.yml).query("select * from PIPELINE.NAMESPACE")`;
duckdb: `iceberg_scan(TABLE_DIR).arrow()`; pyiceberg: `StaticTable.from_metadata(TABLE_DIR)
.scan().to_arrow()`. Prints one line: the read's own seconds (after imports), rows, and the
result's Arrow size in MiB.
"""
import sys
import time

which = sys.argv[1]
if which == "skippr":
    import skippr

    project, pipeline, namespace = sys.argv[2:5]
    session = skippr.Session(pipeline=pipeline, config=f"{project}/skippr.yml")
    started = time.perf_counter()
    table = session.query(f'select * from "{pipeline}"."{namespace}"')
elif which == "duckdb":
    import os

    import duckdb
    import duckdb_ext  # the iceberg extension from PyPI (no download at run time)

    ext = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
    con.execute("LOAD iceberg")
    started = time.perf_counter()
    table = con.execute("select * from iceberg_scan(?)", [sys.argv[2]]).arrow()
elif which == "pyiceberg":
    from pyiceberg.table import StaticTable

    started = time.perf_counter()
    table = StaticTable.from_metadata(sys.argv[2]).scan().to_arrow()
else:
    sys.exit(f"unknown reader {which}")
if hasattr(table, "read_all"):  # DuckDB's .arrow() may hand back a reader: read it all
    table = table.read_all()
seconds = time.perf_counter() - started
print(f"{seconds:.3f} {table.num_rows} {table.nbytes / 2**20:.1f}")
