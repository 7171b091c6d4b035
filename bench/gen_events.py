#!/usr/bin/env python3
"""Write a deterministic JSON-lines file of bike-hire-like events of about SIZE bytes.

usage: gen_events.py OUT SIZE_BYTES        (about that many bytes)
       gen_events.py OUT --rows N          (exactly N records)

Records are nested (station struct, tags list), with two namespaces (event_type), unix
timestamps, dates, and 1% of prices sent as text, so inference does real work.
"""
import json
import random
import sys

out_path = sys.argv[1]
if sys.argv[2] == "--rows":
    target, target_rows = float("inf"), int(sys.argv[3])
else:
    target, target_rows = int(sys.argv[2]), float("inf")
rng = random.Random(7)
names = ["Hyde Park Corner", "Waterloo Station", "King's Cross", "Canary Wharf", "Soho Square"]
tags = ["commute", "leisure", "tourist", "member", "casual"]
written = 0
i = 0
t = 1_767_225_600
with open(out_path, "w", buffering=8 << 20) as f:
    while written < target and i < target_rows:
        chunk = []
        for _ in range(int(min(10_000, target_rows - i))):
            i += 1
            t += rng.randint(1, 20)
            if rng.random() < 0.7:
                rec = {
                    "event_type": "ride",
                    "ride_id": i,
                    "started_at": t,
                    "duration_s": rng.randint(60, 7200),
                    "price": "waived" if rng.random() < 0.01 else round(rng.uniform(1.65, 12.0), 2),
                    "bike": {"id": rng.randint(1, 20000), "electric": rng.random() < 0.3},
                    "station": {"id": rng.randint(1, 800), "name": rng.choice(names),
                                "location": {"lat": round(rng.uniform(51.4, 51.6), 5),
                                             "lon": round(rng.uniform(-0.3, 0.1), 5)}},
                    "tags": rng.sample(tags, rng.randint(0, 2)),
                    "service_date": "2026-%02d-%02d" % (rng.randint(1, 12), rng.randint(1, 28)),
                }
            else:
                rec = {
                    "event_type": "dock_status",
                    "station_id": rng.randint(1, 800),
                    "observed_at_ms": t * 1000 + rng.randint(0, 999),
                    "bikes_available": rng.randint(0, 40),
                    "status": rng.choice(["open", "open", "maintenance"]),
                }
            chunk.append(json.dumps(rec, separators=(",", ":")))
        data = "\n".join(chunk) + "\n"
        f.write(data)
        written += len(data)
print(f"wrote {i} records, {written} bytes to {out_path}")
