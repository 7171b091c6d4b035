#!/usr/bin/env python3
"""A local AWS Lambda Runtime API, enough to drive a function binary through its real
`lambda_runtime` loop (Python stdlib only). `functions/tests/runtime.rs` starts it.

    runtime_api.py PORT_FILE

Listens on a free 127.0.0.1 port and writes the port to PORT_FILE. The function side:
  GET  /2018-06-01/runtime/invocation/next          blocks until an invocation is queued; the
       event is the body, with the Lambda-Runtime-Aws-Request-Id, -Deadline-Ms,
       -Invoked-Function-Arn and -Trace-Id headers
  POST /2018-06-01/runtime/invocation/{id}/response the result
  POST /2018-06-01/runtime/invocation/{id}/error    an error ({"errorType", "errorMessage"})
  POST /2018-06-01/runtime/init/error               an init error
The test side:
  POST /_test/invoke  {"event": ..., "deadline_ms": N | "timeout_ms": N} -> {"request_id"}
  GET  /_test/result/{id}?wait=SECONDS  -> {"kind": "response"|"error"|"pending", "body", "error_type"}
  GET  /_test/stats   -> {"polls", "invocations", "init_errors", "poll_times_ns"}
       (poll_times_ns: the wall-clock time, time.time_ns(), at which each GET .../next
       arrived; bench/lambda_init.py takes a cold init as process start -> first poll)
"""

import json
import os
import select
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PREFIX = "/2018-06-01/runtime"
ARN = "arn:aws:lambda:us-east-1:123456789012:function:skipprd-test"

lock = threading.Condition()
queue = []  # (request_id, event bytes, deadline_ms)
results = {}  # request_id -> dict
stats = {"polls": 0, "invocations": 0, "init_errors": [], "poll_times_ns": []}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def client_gone(self):
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, status, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == PREFIX + "/invocation/next":
            arrived = time.time_ns()
            with lock:
                stats["polls"] += 1
                stats["poll_times_ns"].append(arrived)
                while True:
                    if self.client_gone():
                        # A function killed while it waited: never hand it an event.
                        self.close_connection = True
                        return
                    if queue:
                        break
                    lock.wait(timeout=0.2)
                request_id, event, deadline_ms = queue.pop(0)
            self.send(200, event, {
                "Lambda-Runtime-Aws-Request-Id": request_id,
                "Lambda-Runtime-Deadline-Ms": str(deadline_ms),
                "Lambda-Runtime-Invoked-Function-Arn": ARN,
                "Lambda-Runtime-Trace-Id": "Root=1-00000000-000000000000000000000000",
            })
        elif url.path.startswith("/_test/result/"):
            request_id = url.path.rsplit("/", 1)[1]
            wait = float(parse_qs(url.query).get("wait", ["0"])[0])
            end = time.monotonic() + wait
            with lock:
                while request_id not in results and time.monotonic() < end:
                    lock.wait(timeout=max(0.0, end - time.monotonic()))
                result = results.get(request_id, {"kind": "pending"})
            self.send(200, result)
        elif url.path == "/_test/stats":
            with lock:
                self.send(200, stats)
        else:
            self.send(404, {"error": "no such path " + url.path})

    def do_POST(self):
        url = urlparse(self.path)
        body = self.body()
        if url.path == "/_test/invoke":
            spec = json.loads(body)
            deadline_ms = spec.get("deadline_ms")
            if deadline_ms is None:
                deadline_ms = int(time.time() * 1000) + int(spec.get("timeout_ms", 60000))
            request_id = str(uuid.uuid4())
            with lock:
                stats["invocations"] += 1
                queue.append((request_id, json.dumps(spec["event"]).encode(), deadline_ms))
                lock.notify_all()
            self.send(200, {"request_id": request_id})
        elif url.path == PREFIX + "/init/error":
            with lock:
                stats["init_errors"].append(body.decode(errors="replace"))
                lock.notify_all()
            self.send(202, {"status": "OK"})
        elif url.path.startswith(PREFIX + "/invocation/"):
            parts = url.path[len(PREFIX + "/invocation/"):].split("/")
            if len(parts) != 2 or parts[1] not in ("response", "error"):
                self.send(404, {"error": "no such path " + url.path})
                return
            request_id, kind = parts
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode(errors="replace")
            record = {"kind": kind, "body": parsed}
            if kind == "error":
                record["error_type"] = self.headers.get("Lambda-Runtime-Function-Error-Type")
            with lock:
                results[request_id] = record
                lock.notify_all()
            self.send(202, {"status": "OK"})
        else:
            self.send(404, {"error": "no such path " + url.path})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A function killed while it waits on /next drops its connection: not an error here.
        pass


def main():
    server = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
