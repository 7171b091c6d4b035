#!/usr/bin/env python3
"""Read Iceberg tables the way users will: with DuckDB's `iceberg_scan` and PyIceberg's
`StaticTable`, independently of skipprd's own code. The Rust tests in `local/tests/lake.rs`
run it with the interpreter of the venv that `tests/run` builds (`SKIPPR_TEST_PYTHON`).

    read_table.py [--key COLUMN] [--values] [--snapshots] [--snapshot-rows] TABLE_DIR...

Prints one JSON object: {"tables": {TABLE_DIR: {"duckdb": {...}, "pyiceberg": {...}}}}, each
reader giving
  rows             the row count;
  columns          [[name, type], ...] in the reader's own type names;
  with --key:      duplicate_keys (how many key values appear more than once), null_keys,
                   keys (the distinct key values, ascending);
  with --values:   values (every row, ordered by the key column when given, as JSON:
                   timestamps as integer microseconds since the epoch, dates as YYYY-MM-DD,
                   NaN and the infinities as the strings "NaN", "Infinity", "-Infinity");
  with --snapshots: snapshots, oldest first, each with its id (PyIceberg: and its summary);
  with --snapshot-rows: also the row count of a scan as of each snapshot (a scan per snapshot).
DuckDB reads through the table directory (metadata/version-hint.text), PyIceberg likewise
through `StaticTable.from_metadata(TABLE_DIR)`.
"""

import argparse
import datetime
import decimal
import json
import math
import os
import sys

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def plain(value):
    """A JSON-able form of a value from `pyarrow.Table.to_pylist()`."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        delta = value - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no such numbers (json.dump would write NaN, which is not JSON).
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def arrow_rows(table, key):
    if key is not None:
        table = table.sort_by([(key, "ascending")])
    return [plain(row) for row in table.to_pylist()]


def key_stats(table, key):
    import pyarrow.compute as pc

    column = table.column(key)
    counts = pc.value_counts(column.drop_null()) if column.null_count < len(column) else None
    duplicates = 0
    keys = []
    if counts is not None:
        values = counts.field("values").to_pylist()
        numbers = counts.field("counts").to_pylist()
        duplicates = sum(1 for n in numbers if n > 1)
        keys = sorted(values)
    return {"duplicate_keys": duplicates, "null_keys": column.null_count, "keys": keys}


def quote(name):
    return '"' + name.replace('"', '""') + '"'


def duckdb_connection():
    import duckdb
    import duckdb_ext

    extensions = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    con = duckdb.connect(
        config={"extension_directory": extensions, "autoinstall_known_extensions": False}
    )
    con.execute("LOAD iceberg")
    con.execute("SET TimeZone = 'UTC'")
    return con


def read_duckdb(con, table_dir, args):
    scan = "iceberg_scan(?)"
    out = {}
    out["rows"] = con.execute(f"SELECT count(*) FROM {scan}", [table_dir]).fetchone()[0]
    described = con.execute(f"DESCRIBE SELECT * FROM {scan}", [table_dir]).fetchall()
    out["columns"] = [[row[0], row[1]] for row in described]
    if args.key:
        k = quote(args.key)
        out["duplicate_keys"] = con.execute(
            f"SELECT count(*) FROM (SELECT {k} FROM {scan} WHERE {k} IS NOT NULL"
            f" GROUP BY {k} HAVING count(*) > 1)",
            [table_dir],
        ).fetchone()[0]
        out["null_keys"] = con.execute(
            f"SELECT count(*) FROM {scan} WHERE {k} IS NULL", [table_dir]
        ).fetchone()[0]
        out["keys"] = [
            row[0]
            for row in con.execute(
                f"SELECT DISTINCT {k} FROM {scan} WHERE {k} IS NOT NULL ORDER BY 1",
                [table_dir],
            ).fetchall()
        ]
    if args.values:
        order = f" ORDER BY {quote(args.key)}" if args.key else ""
        table = con.execute(f"SELECT * FROM {scan}{order}", [table_dir]).fetch_arrow_table()
        out["values"] = arrow_rows(table, None)
    if args.snapshots or args.snapshot_rows:
        snapshots = con.execute(
            "SELECT snapshot_id, sequence_number FROM iceberg_snapshots(?) ORDER BY sequence_number",
            [table_dir],
        ).fetchall()
        out["snapshots"] = [{"id": snapshot_id} for snapshot_id, _ in snapshots]
        if args.snapshot_rows:
            for snapshot in out["snapshots"]:
                snapshot["rows"] = con.execute(
                    "SELECT count(*) FROM iceberg_scan(?, snapshot_from_id = "
                    f"{int(snapshot['id'])})",
                    [table_dir],
                ).fetchone()[0]
    return out


def read_pyiceberg(table_dir, args):
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(table_dir)
    data = table.scan().to_arrow()
    out = {
        "rows": data.num_rows,
        "columns": [[f.name, str(f.field_type)] for f in table.schema().fields],
    }
    if args.key:
        out.update(key_stats(data, args.key))
    if args.values:
        out["values"] = arrow_rows(data, args.key)
    if args.snapshots or args.snapshot_rows:
        snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
        out["snapshots"] = [
            {
                "id": s.snapshot_id,
                "summary": {k: str(v) for k, v in s.summary.model_dump().items()}
                if s.summary is not None
                else {},
            }
            for s in snapshots
        ]
        if args.snapshot_rows:
            for snapshot in out["snapshots"]:
                scan = table.scan(snapshot_id=snapshot["id"])
                snapshot["rows"] = scan.to_arrow().num_rows
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", metavar="TABLE_DIR")
    parser.add_argument("--key", help="the key column: duplicate and key-set checks")
    parser.add_argument("--values", action="store_true", help="print every row")
    parser.add_argument("--snapshots", action="store_true", help="print the snapshots")
    parser.add_argument(
        "--snapshot-rows", action="store_true", help="count the rows as of each snapshot"
    )
    args = parser.parse_args()
    con = duckdb_connection()
    result = {}
    for table_dir in args.tables:
        table_dir = os.path.abspath(table_dir)
        result[table_dir] = {
            "duckdb": read_duckdb(con, table_dir, args),
            "pyiceberg": read_pyiceberg(table_dir, args),
        }
    json.dump({"tables": result}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
