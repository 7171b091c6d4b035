"""Run one SQL statement in DuckDB with the offline iceberg extension loaded.

    duckdb_iceberg.py "select count(*) from iceberg_scan('/path/to/table')"

Prints the seconds the statement took inside DuckDB (after import and LOAD iceberg), then a
few result rows.
"""
import os
import sys
import time

import duckdb
import duckdb_ext

ext = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
con.execute("LOAD iceberg")
start = time.perf_counter()
rows = con.execute(sys.argv[1]).fetchall()
print(f"{time.perf_counter() - start:.3f}")
print(rows[:3])
