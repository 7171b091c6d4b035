"""Run one SQL statement in DuckDB with the offline iceberg extension loaded; print a few rows.

    duckdb_iceberg.py "select count(*) from iceberg_scan('/path/to/table')"
"""
import os
import sys

import duckdb
import duckdb_ext

ext = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
con = duckdb.connect(config={"extension_directory": ext, "autoinstall_known_extensions": False})
con.execute("LOAD iceberg")
print(con.execute(sys.argv[1]).fetchall()[:3])
