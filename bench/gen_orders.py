#!/usr/bin/env python3
"""Write a deterministic JSON-lines file of e-commerce order events: bench/run's second dataset.

usage: gen_orders.py OUT --rows N          (exactly N records)

Wider and more nested than gen_events.py (about 440 bytes a record): three-level structs
(customer.address.geo), a list of structs with a struct inside (items[].attrs), one namespace
per event_type (order, refund), and a few sibling-column conflicts a schema must resolve: 2% of
`discount`s are an object instead of a number, 1% of `customer.address.zip`s are a number
instead of text, and 1% of `items[].qty` are text.
"""
import json
import random
import sys

out_path = sys.argv[1]
if sys.argv[2] != "--rows":
    sys.exit("usage: gen_orders.py OUT --rows N")
target_rows = int(sys.argv[3])
rng = random.Random(11)
cities = [("London", "GB"), ("Leeds", "GB"), ("Paris", "FR"), ("Lyon", "FR"), ("Berlin", "DE")]
colors = ["red", "blue", "green", "black", "white"]
sizes = ["S", "M", "L", "XL"]
carriers = ["dhl", "ups", "royal-mail", "colissimo"]
methods = ["card", "card", "card", "paypal", "voucher"]
t = 1_767_225_600
i = 0
with open(out_path, "w", buffering=8 << 20) as f:
    while i < target_rows:
        chunk = []
        for _ in range(min(10_000, target_rows - i)):
            i += 1
            t += rng.randint(1, 9)
            city, country = rng.choice(cities)
            if rng.random() < 0.9:
                items = []
                for _ in range(rng.randint(1, 2)):
                    qty = rng.randint(1, 5)
                    items.append({
                        "sku": "SKU-%06d" % rng.randint(1, 99999),
                        "qty": str(qty) if rng.random() < 0.01 else qty,
                        "unit_price": round(rng.uniform(2.0, 80.0), 2),
                        "attrs": {"color": rng.choice(colors), "size": rng.choice(sizes)},
                    })
                zip_code = "%05d" % rng.randint(10000, 99999)
                rec = {
                    "event_type": "order",
                    "order_id": i,
                    "created_at": "2026-%02d-%02dT%02d:%02d:%02dZ" % (
                        rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                        rng.randint(0, 59), rng.randint(0, 59)),
                    "customer": {
                        "id": rng.randint(1, 500000),
                        "tier": rng.choice(["gold", "silver", "none"]),
                        "address": {
                            "city": city,
                            "country": country,
                            "zip": int(zip_code) if rng.random() < 0.01 else zip_code,
                            "geo": {"lat": round(rng.uniform(43.0, 54.0), 5),
                                    "lon": round(rng.uniform(-2.0, 13.0), 5)},
                        },
                    },
                    "items": items,
                    "payment": {"method": rng.choice(methods),
                                "amount": round(rng.uniform(5.0, 300.0), 2)},
                    "discount": ({"code": "WELCOME", "pct": 10} if rng.random() < 0.02
                                 else round(rng.uniform(0.0, 15.0), 2)),
                    "shipping": {"carrier": rng.choice(carriers), "eta_days": rng.randint(1, 7),
                                 "express": rng.random() < 0.2},
                }
            else:
                rec = {
                    "event_type": "refund",
                    "refund_id": i,
                    "order_id": rng.randint(1, i),
                    "refunded_at_ms": t * 1000 + rng.randint(0, 999),
                    "amount": round(rng.uniform(1.0, 120.0), 2),
                    "reason": rng.choice(["damaged", "late", "wrong size", "other"]),
                    "customer": {"id": rng.randint(1, 500000),
                                 "address": {"city": city, "country": country}},
                }
            chunk.append(json.dumps(rec, separators=(",", ":")))
        f.write("\n".join(chunk) + "\n")
print(f"wrote {i} records to {out_path}")
