#!/usr/bin/env python3
"""Regenerate the bike-hire sample data in input/ (deterministic: fixed seed).

Rides and dock events as JSON lines, one file plain and one gzipped; a few records carry
the quirks real feeds have: a price sent as text, a malformed line.
"""
import gzip
import json
import os
import random

rng = random.Random(42)
here = os.path.dirname(os.path.abspath(__file__))
stations = [
    {"id": 101, "name": "Hyde Park Corner", "lat": 51.5027, "lon": -0.1527},
    {"id": 102, "name": "Waterloo Station", "lat": 51.5031, "lon": -0.1132},
    {"id": 103, "name": "King's Cross", "lat": 51.5308, "lon": -0.1238},
    {"id": 104, "name": "Canary Wharf", "lat": 51.5054, "lon": -0.0235},
]


def ride(i, t):
    start, end = rng.sample(stations, 2)
    minutes = rng.randint(3, 90)
    price = round(1.65 + 0.05 * minutes, 2)
    return {
        "event_type": "ride",
        "ride_id": 500000 + i,
        "bike": {"id": rng.randint(1000, 9999), "electric": rng.random() < 0.3},
        "started_at": t,
        "ended_at": t + minutes * 60,
        "start_station": {"id": start["id"], "name": start["name"], "location": {"lat": start["lat"], "lon": start["lon"]}},
        "end_station": {"id": end["id"], "name": end["name"], "location": {"lat": end["lat"], "lon": end["lon"]}},
        "price": "waived" if i % 37 == 5 else price,
        "tags": rng.sample(["commute", "leisure", "tourist", "member", "casual"], rng.randint(0, 2)),
        "service_date": "2026-11-%02d" % (1 + (t // 86400) % 28),
    }


def dock(i, t):
    s = rng.choice(stations)
    return {
        "event_type": "dock_status",
        "station_id": s["id"],
        "observed_at_ms": t * 1000 + rng.randint(0, 999),
        "bikes_available": rng.randint(0, 30),
        "docks_available": rng.randint(0, 30),
        "status": rng.choice(["open", "open", "open", "maintenance"]),
    }


def events(n, t0, first):
    out = []
    t = t0
    for i in range(first, first + n):
        t += rng.randint(5, 400)
        out.append(json.dumps(ride(i, t) if rng.random() < 0.6 else dock(i, t), separators=(",", ":")))
    return out


day1 = events(40, 1793836800, 0)  # 2026-11-04
day2 = events(40, 1793923200, 40)
day1.insert(17, '{"event_type":"ride","ride_id":"truncated')
with open(os.path.join(here, "input", "events-2026-11-04.jsonl"), "w") as f:
    f.write("\n".join(day1) + "\n")
with gzip.GzipFile(os.path.join(here, "input", "events-2026-11-05.jsonl.gz"), "wb", mtime=0) as f:
    f.write(("\n".join(day2) + "\n").encode())
