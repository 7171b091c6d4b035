#!/usr/bin/env python3
"""Benchmark API server: serves a JSON-lines file as pages of a REST API on 127.0.0.1.

usage: api_pages.py IN.jsonl PORT_FILE [--per-page N]

`GET /items?page=K` answers `{"data": [records K*N .. K*N+N-1], "links": {"next": URL or null}}`.
Every page is rendered once, before the port is written (the server's own cost stays out of the
figures); the server is threaded and HTTP/1.1 keep-alive, so a client that reuses connections
can. `GET /_stats` answers `{"requests": n}`. Runs until killed (by PID).
"""
import argparse
import http.server
import json
import os
import sys
import threading
import urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("port_file")
ap.add_argument("--per-page", type=int, default=1000)
args = ap.parse_args()

lines = []
with open(args.data, "rb") as f:
    for line in f:
        line = line.strip()
        if line:
            lines.append(line)
pages = []
count = (len(lines) + args.per_page - 1) // args.per_page
for k in range(count):
    chunk = lines[k * args.per_page : (k + 1) * args.per_page]
    nxt = json.dumps(f"/items?page={k + 1}" if k + 1 < count else None).encode()
    pages.append(b'{"data":[' + b",".join(chunk) + b'],"links":{"next":' + nxt + b"}}")
del lines
STATS = {"requests": 0}
LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/_stats":
            return self._send(200, json.dumps(STATS).encode())
        with LOCK:
            STATS["requests"] += 1
        page = int(urllib.parse.parse_qs(url.query).get("page", ["0"])[0])
        if url.path != "/items" or not 0 <= page < len(pages):
            return self._send(404, b'{"error":"no such page"}')
        self._send(200, pages[page])


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
tmp = args.port_file + ".tmp"
with open(tmp, "w") as f:
    f.write(str(server.server_address[1]))
os.replace(tmp, args.port_file)
print(f"{len(pages)} pages", file=sys.stderr, flush=True)
server.serve_forever()
