#!/usr/bin/env python3
"""Keyed rows for the merge benchmark: `kind` (the namespace, `keyed`), `id` (the key), a
version `v`, a name, a region and a timestamp, as JSON lines (~110 bytes a row).

usage: gen_keyed.py OUT.jsonl --rows N [--changes-of TOTAL --seed S] [--version V]

Without --changes-of: ids 0..N-1 in order. With it: N distinct ids drawn at random from
0..TOTAL-1 (seeded), each with version V: the changed keys of a merge.
"""
import argparse
import json
import random

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--rows", type=int, required=True)
parser.add_argument("--changes-of", type=int)
parser.add_argument("--seed", type=int, default=7)
parser.add_argument("--version", type=int, default=1)
args = parser.parse_args()

if args.changes_of:
    ids = random.Random(args.seed).sample(range(args.changes_of), args.rows)
else:
    ids = range(args.rows)
regions = ["eu-west", "us-east", "ap-south", "sa-east"]
with open(args.out, "w") as f:
    for i in ids:
        f.write(json.dumps({
            "kind": "keyed",
            "id": i,
            "v": args.version,
            "name": f"customer-{i:08d}",
            "region": regions[i % 4],
            "updated_at": 1767225600 + i,
        }, separators=(",", ":")) + "\n")
