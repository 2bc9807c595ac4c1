#!/usr/bin/env python3
"""fake_peer.py - a peer site that misbehaves, for federation_peer.sh.

It speaks the few routes a sending cnlabd uses (GET /v1/auth/whoami, PUT
.../uploads, POST /v1/projects/{p}/jobs, GET /v1/jobs/{id}, GET
/v1/jobs/{id}/logs, POST /v1/jobs/{id}/cancel), each only with the bearer
token it was given, and is steered by files in its state directory:

  post    "hold": a job submission is read and then held unanswered until
          the client gives up (its answer lost); "ok": answered 201 with
          job job_fake1 (the same for every retry of the same
          Idempotency-Key, as cnlabd does)
  logs    "null-ids": chunks without ids (a peer that would make the
          sender copy them again and again); "ok": three chunks with ids
          that move forward, then no more
  state   the remote job's state ("running" unless written)

Every request is appended to calls.log as one JSON object (method, path,
key: the Idempotency-Key).

Usage: fake_peer.py STATE_DIR TOKEN PORT_FILE
"""
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE, TOKEN, PORT_FILE = sys.argv[1], sys.argv[2], sys.argv[3]


def steer(name, default):
    try:
        with open(os.path.join(STATE, name)) as f:
            return f.read().strip() or default
    except OSError:
        return default


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self):
        with open(os.path.join(STATE, "calls.log"), "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "key": self.headers.get("Idempotency-Key")})
                    + "\n")

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authed(self):
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            self.reply(401, {"error": {"code": "unauthenticated",
                                       "message": "invalid token"}})
            return False
        return True

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        self.note()
        if not self.authed():
            return
        if self.path == "/v1/auth/whoami":
            return self.reply(200, {"id": "usr_fake", "name": "peer-a",
                                    "memberships": [{
                                        "project_id": "prj_fake",
                                        "project": "partners",
                                        "role": "member"}]})
        if self.path == "/v1/jobs/job_fake1":
            return self.reply(200, {"id": "job_fake1",
                                    "state": steer("state", "running"),
                                    "exit_code": 0})
        if self.path.startswith("/v1/jobs/job_fake1/logs"):
            if steer("logs", "ok") == "null-ids":
                return self.reply(200, {"items": [
                    {"id": None, "stream": "stdout", "data": "again\n"}
                    for _ in range(3)], "next": "more"})
            if "after=" in self.path:
                return self.reply(200, {"items": [], "next": None})
            return self.reply(200, {"items": [
                {"id": "log_%04d" % i, "stream": "stdout",
                 "data": "line %d\n" % i} for i in range(1, 4)],
                "next": None})
        self.reply(404, {"error": {"code": "not_found",
                                   "message": "no such thing"}})

    def do_PUT(self):
        self.note()
        self.body()
        if not self.authed():
            return
        self.reply(201, {"id": "upl_fake%d" % int(time.time() * 1000)})

    def do_POST(self):
        self.note()
        self.body()
        if not self.authed():
            return
        if self.path == "/v1/projects/prj_fake/jobs":
            if steer("post", "ok") == "hold":
                # Read, never answered: the client's idle time-out ends
                # it, the job made here or not, it cannot know.
                time.sleep(20)
                self.close_connection = True
                return
            return self.reply(201, {"id": "job_fake1", "state": "running"})
        if self.path == "/v1/jobs/job_fake1/cancel":
            return self.reply(200, {"id": "job_fake1",
                                    "state": "cancelled"})
        self.reply(404, {"error": {"code": "not_found",
                                   "message": "no such thing"}})


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
