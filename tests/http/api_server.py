#!/usr/bin/env python3
"""A paginated JSON REST API for the HttpClient source's tests. Standard library only.

    api_server.py PORT_FILE [--style S] [--pages N] [--per-page N] [--token T]
                  [--fail-rate F] [--seed N] [--rate-limit-every N]

Listens on a free 127.0.0.1 port (written to PORT_FILE once listening). `GET /items` serves
records `{"id": i, "seq": i, "name": ...}` for i in 0..total (total = pages * per_page, changed
by `POST /_total?n=N`), `per_page` per page, paginated in style S:

- `next_url`: `{"data": [...], "links": {"next": "/items?page=N" or null}}`
- `link_header`: `{"data": [...]}` and `Link: </items?page=N>; rel="next"`
- `cursor`: `{"data": [...], "meta": {"next_cursor": "N" or null}}`, next page `?after=N`
- `offset`: `{"data": [...]}`, `?offset=K&limit=L`
- `page_number`: `{"data": [...]}`, `?page=N` (from 1)

`?since=V` keeps only records with `seq > V` (incremental). `--token T` answers 401 unless
`Authorization: Bearer T`. `--fail-rate F` answers 500 to that share of requests at random;
`--rate-limit-every N` answers every N-th request 429 with `Retry-After: 1`.
`GET /big?bytes=N` streams one page of about N bytes: `{"data": [...]}` with ids from 0.
`GET /_stats` answers `{"requests": n, "faults": n, "rate_limited": n}`.
"""

import argparse
import http.server
import json
import random
import threading
import urllib.parse

parser = argparse.ArgumentParser()
parser.add_argument("port_file")
parser.add_argument("--style", default="next_url")
parser.add_argument("--pages", type=int, default=50)
parser.add_argument("--per-page", type=int, default=1000)
parser.add_argument("--token")
parser.add_argument("--fail-rate", type=float, default=0.0)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--rate-limit-every", type=int, default=0)
ARGS = parser.parse_args()

LOCK = threading.Lock()
STATE = {"total": ARGS.pages * ARGS.per_page, "requests": 0, "faults": 0, "rate_limited": 0}
RNG = random.Random(ARGS.seed)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _send(self, status, body, headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if url.path == "/_total":
            with LOCK:
                STATE["total"] = int(query["n"])
            return self._send(200, {"total": STATE["total"]})
        return self._send(404, {"error": "no such path"})

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/_stats":
            with LOCK:
                return self._send(200, {k: STATE[k] for k in ("requests", "faults", "rate_limited")})
        if url.path == "/big":
            return self._big(int(query.get("bytes", 1 << 20)))
        if url.path != "/items":
            return self._send(404, {"error": "no such path"})
        with LOCK:
            STATE["requests"] += 1
            n = STATE["requests"]
            total = STATE["total"]
            if ARGS.rate_limit_every and n % ARGS.rate_limit_every == 0:
                STATE["rate_limited"] += 1
                return self._send(429, {"error": "slow down"}, [("Retry-After", "1")])
            if ARGS.fail_rate and RNG.random() < ARGS.fail_rate:
                STATE["faults"] += 1
                return self._send(500, {"error": "injected"})
        if ARGS.token is not None and self.headers.get("Authorization") != "Bearer " + ARGS.token:
            return self._send(401, {"error": "bad credentials"})
        since = int(query["since"]) if "since" in query else -1
        ids = [i for i in range(total) if i > since]
        per = ARGS.per_page
        style = ARGS.style
        if style == "offset":
            start = int(query.get("offset", 0))
            per = int(query.get("limit", per))
            index = start // per
        elif style == "page_number":
            index = int(query.get("page", 1)) - 1
            start = index * per
        elif style == "cursor":
            index = int(query.get("after", 0))
            start = index * per
        else:
            index = int(query.get("page", 0))
            start = index * per
        page = ids[start:start + per]
        more = start + per < len(ids)
        data = [{"id": i, "seq": i, "name": "record %d" % i} for i in page]
        base = {k: v for k, v in query.items() if k not in ("page", "after", "offset", "limit")}
        def link(**extra):
            return "/items?" + urllib.parse.urlencode({**base, **extra})
        headers = []
        body = {"data": data}
        if style == "next_url":
            body["links"] = {"next": link(page=index + 1) if more else None}
        elif style == "link_header" and more:
            headers.append(("Link", '<%s>; rel="next", <%s>; rel="first"' % (link(page=index + 1), link(page=0))))
        elif style == "cursor":
            body["meta"] = {"next_cursor": str(index + 1) if more else None}
        return self._send(200, body, headers)


    def _big(self, size):
        # One page of about `size` bytes: `{"meta": {...}, "data": [...records...], "next": null}`,
        # streamed in chunks so the server never holds it. The records' ids count from 0.
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        pad = "x" * 150
        chunk(b'{"meta": {"note": "a single array"}, "data": [')
        sent, i, parts = 0, 0, []
        while sent < size:
            record = ('%s{"id": %d, "seq": %d, "name": "record %d", "pad": "%s"}' % ("," if i else "", i, i, i, pad)).encode()
            parts.append(record)
            sent += len(record)
            i += 1
            if len(parts) == 2000:
                chunk(b"".join(parts))
                parts = []
        if parts:
            chunk(b"".join(parts))
        chunk(('], "count": %d, "next": null}' % i).encode())
        self.wfile.write(b"0\r\n\r\n")


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client killed mid-request (the kill loop) is expected: stay quiet.
        pass


server = Server(("127.0.0.1", 0), Handler)
with open(ARGS.port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
server.serve_forever()
