#!/usr/bin/env python3
"""Peer benchmark: DuckDB's postgres extension (the offline one from PyPI) copying one
PostgreSQL table into a Parquet file.

usage: PG_BENCH=postgresql://user:pass@host:port/db duckdb_pg.py TABLE OUT.parquet [CODEC]

CODEC: the Parquet compression (DuckDB's default, snappy, when not given; `zstd` writes what
our lake writes).

The connection URL comes from the environment (never the command line, where `ps` shows it).
Prints the rows COPY wrote.
"""
import os
import sys

import duckdb
import duckdb_ext

table, out = sys.argv[1], sys.argv[2]
codec = sys.argv[3] if len(sys.argv) > 3 else None
if codec is not None and not codec.isalnum():
    sys.exit(f"bad codec {codec!r}")
ext = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
con.execute("LOAD postgres_scanner")
dsn = os.environ["PG_BENCH"].replace("'", "''")
con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres, READ_ONLY)")
options = "FORMAT parquet" + (f", COMPRESSION {codec}" if codec else "")
rows = con.execute(f"COPY (SELECT * FROM pg.public.{table}) TO '{out}' ({options})").fetchone()[0]
print(rows)
