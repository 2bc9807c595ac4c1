#!/usr/bin/env python3
"""otel_collector.py - a loopback OpenTelemetry collector and Loki for
telemetry.py: it records what is posted to it.

  POST /v1/traces          an OTLP/HTTP ExportTraceServiceRequest (JSON)
  POST /loki/api/v1/push   a Loki push ({"streams": [...]}, JSON)

Each accepted body must be JSON with Content-Type application/json;
anything else is answered 400 and recorded as a protocol error (a test
fails on any).  The mode can change while it runs:

  "ok"    answer 200 and record (the default);
  "hang"  read the request, then answer nothing for 60 s (a collector
          that accepted and stalls);
  "error" answer 503.

A collector that is down is one that was stopped (stop()): connections
are refused.

Used as a module (Collector(...).start()), or alone:
  otel_collector.py PORTFILE   (records to stdout, one JSON line a post)
"""
import http.server
import json
import sys
import threading
import time


class Collector:
    def __init__(self, port=0):
        self.lock = threading.Lock()
        self.spans = []  # (resource service.name, span dict)
        self.streams = []  # Loki stream dicts as posted
        self.errors = []  # protocol errors
        self.posts = {"traces": 0, "loki": 0}
        self.mode = "ok"
        self.port = port
        self.httpd = None
        self.on_post = None

    def start(self):
        coll = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, code, body=b"{}"):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                mode = coll.mode
                if mode == "hang":
                    time.sleep(60)
                    self.close_connection = True
                    return
                if mode == "error":
                    self.answer(503)
                    return
                kind = {"/v1/traces": "traces",
                        "/loki/api/v1/push": "loki"}.get(self.path)
                ctype = self.headers.get("Content-Type", "")
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with coll.lock:
                    if kind is None or body is None or \
                            not ctype.startswith("application/json"):
                        coll.errors.append((self.path, ctype, raw[:200]))
                        self.answer(400)
                        return
                    coll.posts[kind] += 1
                    if kind == "traces":
                        for rs in body.get("resourceSpans", []):
                            svc = None
                            for a in rs.get("resource", {}).get(
                                    "attributes", []):
                                if a.get("key") == "service.name":
                                    svc = a["value"].get("stringValue")
                            for ss in rs.get("scopeSpans", []):
                                for sp in ss.get("spans", []):
                                    coll.spans.append((svc, sp))
                    else:
                        coll.streams.extend(body.get("streams", []))
                if coll.on_post:
                    coll.on_post(kind, body)
                self.answer(200)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port),
                                                     Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self):
        return "http://127.0.0.1:%d" % self.port


if __name__ == "__main__":
    c = Collector()
    c.on_post = lambda kind, body: print(json.dumps({kind: body}),
                                         flush=True)
    c.start()
    with open(sys.argv[1], "w") as f:
        f.write(str(c.port))
    while True:
        time.sleep(3600)
