#!/usr/bin/env python3
"""A fault-injecting HTTP proxy in front of the local AWS server (moto), for the tests.

    fault_proxy.py UPSTREAM_URL PORT_FILE [--every N] [--always] [--apply-then-fail OPS [--then 500|drop]]

Listens on a free 127.0.0.1 port (written to PORT_FILE once listening) and forwards every
request to UPSTREAM_URL unchanged (headers too, so SigV4 signatures stay valid), except:

- `--every N`: every N-th request gets a transient failure instead: S3 requests a
  `503 SlowDown` (XML), DynamoDB requests (`X-Amz-Target: DynamoDB_...`) a
  `400 ThrottlingException` (JSON), alternating with a `500 InternalError`/`InternalServerError`.
- `--always`: every request fails that way (to see the error reported as retryable).
- `--apply-then-fail OPS`: an ambiguous outcome instead. The first request of each op of OPS
  (comma-separated), and every N-th after it (`--every N`, default 2; counted per op), is
  FORWARDED to the upstream, which applies it, and then answered with a `500` (DynamoDB `InternalServerError`, Glue
  `InternalServiceException`, S3 `InternalError`): the request applied, the client sees a
  failure, and the SDK retries it. No other request is failed. An op is an `X-Amz-Target`
  value (`DynamoDB_20120810.UpdateItem`, `AWSGlue.UpdateTable`, `AWSGlue.CreateTable`, ...)
  or `S3.ConditionalPut` (a `PUT` with `If-None-Match` or `If-Match`). With `--then drop`
  the connection is closed without an answer instead of the `500` (a transport failure after
  the request applied, which the SDK retries for every service; it does not retry a `500`
  that DynamoDB or Glue send as their modeled `InternalServerError`/`InternalServiceException`).

`GET /_faults` answers with the number of requests seen and faults injected so far (with
`--apply-then-fail`, also per op under `"applied_then_failed"`). Standard library only.
"""

import http.client
import http.server
import json
import sys
import threading
import urllib.parse

UPSTREAM = urllib.parse.urlsplit(sys.argv[1])
PORT_FILE = sys.argv[2]
EVERY = 0
ALWAYS = "--always" in sys.argv
if "--every" in sys.argv:
    EVERY = int(sys.argv[sys.argv.index("--every") + 1])
APPLY_THEN_FAIL = set()
if "--apply-then-fail" in sys.argv:
    APPLY_THEN_FAIL = set(sys.argv[sys.argv.index("--apply-then-fail") + 1].split(","))
    EVERY = EVERY or 2
THEN = "500"
if "--then" in sys.argv:
    THEN = sys.argv[sys.argv.index("--then") + 1]

LOCK = threading.Lock()
COUNT = {"requests": 0, "faults": 0, "matching": 0, "applied_then_failed": {}}

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status, headers, body):
        self.send_response(status)
        length = str(len(body))
        for k, v in headers:
            if k.lower() == "content-length" and self.command == "HEAD":
                length = v  # a HEAD answer has no body but the object's length
            elif k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fault(self, n):
        target = self.headers.get("X-Amz-Target", "")
        if target.startswith("DynamoDB"):
            if n % 2:
                body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                                   "message": "Rate exceeded (injected)"}).encode()
                status = 400
            else:
                body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
                                   "message": "injected"}).encode()
                status = 500
            self._send(status, [("Content-Type", "application/x-amz-json-1.0")], body)
        elif target:
            body = json.dumps({"__type": "ThrottlingException", "message": "injected"}).encode()
            self._send(400, [("Content-Type", "application/x-amz-json-1.1")], body)
        else:
            code, status = ("SlowDown", 503) if n % 2 else ("InternalError", 500)
            body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>"
                    f"<Message>injected</Message><RequestId>fault{n}</RequestId></Error>").encode()
            self._send(status, [("Content-Type", "application/xml")], body)

    def _op(self):
        """The op of this request as `--apply-then-fail` names it, or None."""
        target = self.headers.get("X-Amz-Target", "")
        if target:
            return target
        if self.command == "PUT" and (self.headers.get("If-None-Match") is not None
                                      or self.headers.get("If-Match") is not None):
            return "S3.ConditionalPut"
        return None

    def _fail_after_applying(self, op, n):
        if op.startswith("DynamoDB"):
            body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
                               "message": "applied, then failed (injected)"}).encode()
            self._send(500, [("Content-Type", "application/x-amz-json-1.0")], body)
        elif op.startswith("S3."):
            body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError"
                    f"</Code><Message>applied, then failed (injected)</Message>"
                    f"<RequestId>applied{n}</RequestId></Error>").encode()
            self._send(500, [("Content-Type", "application/xml")], body)
        else:
            body = json.dumps({"__type": "InternalServiceException",
                               "message": "applied, then failed (injected)"}).encode()
            self._send(500, [("Content-Type", "application/x-amz-json-1.1")], body)

    def _handle(self):
        if self.path == "/_faults":
            with LOCK:
                body = json.dumps(COUNT).encode()
            self._send(200, [("Content-Type", "application/json")], body)
            return
        body = self._body()
        op = self._op() if APPLY_THEN_FAIL else None
        with LOCK:
            COUNT["requests"] += 1
            n = COUNT["requests"]
            fault = False
            apply_then_fail = False
            if APPLY_THEN_FAIL:
                if op in APPLY_THEN_FAIL:
                    COUNT["matching"] += 1
                    seen = COUNT.setdefault("per_op", {})
                    seen[op] = seen.get(op, 0) + 1
                    apply_then_fail = (seen[op] - 1) % EVERY == 0
            else:
                fault = ALWAYS or (EVERY > 0 and n % EVERY == 0)
            if fault or apply_then_fail:
                COUNT["faults"] += 1
        if fault:
            self._fault(n)
            return
        conn = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if apply_then_fail:
            with LOCK:
                per_op = COUNT["applied_then_failed"]
                per_op[op] = per_op.get(op, 0) + 1
            if THEN == "drop":
                self.close_connection = True
                return
            self._fail_after_applying(op, n)
            return
        self._send(resp.status, resp.getheaders(), data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.replace(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
