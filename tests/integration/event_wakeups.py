#!/usr/bin/env python3
"""event_wakeups.py - GET /v1/jobs/{job}/events wakes only the streams of
the job that changed, and sends only what is durable.  A real all-in-one
cnlabd (embedded agent, fake GPUs, real processes) on loopback:

  - 32 streams follow 4 running jobs (8 each) that stay silent; a fifth
    job prints lines, followed by one stream.  The wake-ups of all
    streams (cnlab_event_stream_wakeups_total in /metrics) while the
    fifth job runs and ends are fewer than the silent streams: a change
    of one job does not wake the streams of the others (a broadcast
    would wake all 32 at each of its changes).  The streams of the
    silent jobs received nothing but their first document.
  - The fifth job's stream holds exactly its stored log (ids and data,
    in order, as GET .../logs lists them).
  - Durable only: with the store's syncs failing (CNLAB_TEST_SYNC_FAULT,
    a test build's), output the job writes is committed but not
    durable: a stream open meanwhile never sends it.  Once syncs work
    again a new stream, resumed from the last id, sends it.

Prints "ok ..." / "FAIL ..." lines, exits 1 on a failure.  Timeouts only
guard against a hung daemon; nothing asserts how long anything took.
"""
import http.client
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from testlib import bad, die, ok, status, wait_for



class Api:
    def __init__(self, port):
        self.port, self.token = port, None

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = {}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        c.request(method, path, data, h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")

    def metric(self, name):
        st, text = self.call("GET", "/metrics")
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        return int(float(m.group(1))) if m else None


class Stream(threading.Thread):
    """Reads one job's event stream as it comes, into self.events."""

    def __init__(self, api, job, after=None):
        super().__init__(daemon=True)
        self.api, self.job, self.after = api, job, after
        self.events = []   # (id, event, data)
        self.ended = None  # "end", "closed" or an error
        self.opened = threading.Event()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.api.port,
                                           timeout=120)
            path = "/v1/jobs/%s/events" % self.job
            if self.after:
                path += "?after=" + self.after
            c.request("GET", path, None,
                      {"Authorization": "Bearer " + self.api.token})
            r = c.getresponse()
            if r.status != 200:
                self.ended = "status %d" % r.status
                self.opened.set()
                return
            self.opened.set()
            ev = {}
            while True:
                line = r.fp.readline()
                if not line:
                    self.ended = "closed"
                    return
                line = line.decode().rstrip("\n")
                if line == "":
                    if "event" in ev:
                        self.events.append((ev.get("id"), ev["event"],
                                            ev.get("data")))
                        if ev["event"] == "end":
                            self.ended = "end"
                            return
                    ev = {}
                elif line.startswith(":"):
                    continue
                else:
                    k, _, v = line.partition(": ")
                    ev[k] = v
        except (OSError, http.client.HTTPException) as e:
            self.ended = type(e).__name__
            self.opened.set()

    def logs(self):
        return [(i, json.loads(d)["data"]) for i, e, d in self.events
                if e == "log"]


def main():
    if len(sys.argv) != 2:
        print("usage: event_wakeups.py CNLABD", file=sys.stderr)
        sys.exit(2)
    tmp = tempfile.mkdtemp(prefix="cnlab-evw-")
    data = os.path.join(tmp, "data")
    fault = os.path.join(tmp, "fault")
    env = dict(os.environ, HOME=tmp, CNLAB_TEST_SYNC_FAULT=fault)
    for k in ("CNLAB_JWT_SECRET", "CNLAB_ADMIN_PASSWORD", "CNLAB_SERVER",
              "CNLAB_TOKEN", "CNLAB_CONFIG"):
        env.pop(k, None)
    out = open(os.path.join(tmp, "out"), "w+")
    proc = subprocess.Popen(
        [sys.argv[1], "--all-in-one", "--data-dir", data, "--listen",
         "127.0.0.1:0", "--gpus", "fake:2xH100-80GB-SXM", "--log-level",
         "warn"], stdout=out, stderr=open(os.path.join(tmp, "err"), "w"),
        env=env)
    try:
        url = wait_for("cnlabd", lambda: re.search(
            r"CNLab is running at http://127\.0\.0\.1:(\d+)",
            open(os.path.join(tmp, "out")).read()))
        api = Api(int(url.group(1)))
        pw = open(os.path.join(data, "admin.password")).read().strip()
        st, doc = api.call("POST", "/v1/auth/login",
                           {"user": "admin", "password": pw})
        if st != 200:
            die("login: %d %s" % (st, doc))
        api.token = doc["token"]
        st, doc = api.call("GET", "/v1/projects")
        proj = [p["id"] for p in doc["items"] if p["name"] == "default"][0]
        wait_for("the node", lambda: len(
            api.call("GET", "/v1/nodes")[1].get("items", [])) >= 1)

        def submit(cmd):
            st, doc = api.call("POST", "/v1/projects/%s/jobs" % proj,
                               {"command": cmd, "gpu": "h100-10"})
            if st != 201:
                die("submit: %d %s" % (st, doc))
            return doc["id"]

        def state(j):
            return api.call("GET", "/v1/jobs/" + j)[1]["state"]

        silent = [submit("sleep 300") for _ in range(4)]
        wait_for("the silent jobs to run",
                 lambda: all(state(j) == "running" for j in silent))
        streams = [Stream(api, j) for j in silent for _ in range(8)]
        for s in streams:
            s.start()
            s.opened.wait(60)
        wait_for("32 streams open",
                 lambda: api.metric("cnlab_event_streams") == 32)
        # Quiet: the silent jobs' streams sleep once their jobs' records
        # settle (a running job's record is written again after its
        # start: its own streams wake for that, 8 each).  A second
        # without a wake-up, then the printing job.
        w0 = api.metric("cnlab_event_stream_wakeups_total")
        for _ in range(30):
            time.sleep(1.0)
            w1 = api.metric("cnlab_event_stream_wakeups_total")
            if w1 == w0:
                break
            w0 = w1
        else:
            die("the silent jobs' streams never went quiet")

        loud = submit("for i in 1 2 3 4 5 6; do echo line-$i; "
                      "sleep 0.2; done")
        s = Stream(api, loud)
        s.start()
        s.join(120)
        wakeups = api.metric("cnlab_event_stream_wakeups_total") - w0
        if s.ended == "end":
            ok("the printing job's stream ended with its end")
        else:
            bad("the printing job's stream: %s %s" % (s.ended, s.events))
        print("     wake-ups: %d while one job of 5 printed and ended "
              "(32 silent streams on the 4 others)" % wakeups, flush=True)
        if wakeups < len(streams):
            ok("one job's changes woke fewer streams than the 32 that "
               "follow other jobs (%d wake-ups)" % wakeups)
        else:
            bad("one job's changes woke %d times, with 32 streams on "
                "other jobs: they are woken too" % wakeups)
        others = [e for t in streams for e in t.events if e[1] != "job"]
        if not others and all(t.ended is None for t in streams):
            ok("the silent jobs' streams got nothing but their document")
        else:
            bad("the silent jobs' streams got %s" % others[:3])
        st, doc = api.call("GET", "/v1/jobs/%s/logs" % loud)
        stored = [(d["id"], d["data"]) for d in doc["items"]]
        got = s.logs()
        if got and got == stored and "".join(d for _, d in got) == \
                "".join("line-%d\n" % i for i in range(1, 7)):
            ok("the stream holds exactly the stored log (%d chunks)"
               % len(got))
        else:
            bad("stream %s vs stored %s" % (got, stored))

        # Durable only.
        gate = submit("echo before; while [ ! -e go ]; do sleep 0.05; "
                      "done; echo after-go; sleep 300")
        g = Stream(api, gate)
        g.start()
        wait_for("the first chunk", lambda: any(
            d == "before\n" for _, d in g.logs()))
        first = g.logs()[-1][0]
        open(fault, "w").close()
        open(os.path.join(data, "agent", "jobs", gate, "go"), "w").close()
        # The chunk is committed (visible in the store) but no sync
        # covers it: wait until the store has it, then a while longer.
        db = sqlite3.connect(os.path.join(data, "cnlab.db"))

        def stored_after():
            try:
                return any("after-go" in r[0] for r in db.execute(
                    "SELECT body FROM docs WHERE kind = 'log' AND "
                    "parent = ?", (gate,)))
            except sqlite3.Error:
                return False
        wait_for("the chunk in the store", stored_after)
        time.sleep(1.0)
        if not any("after-go" in d for _, d in g.logs()):
            ok("output committed but not durable is not sent (stream: "
               "%s)" % (g.ended or "open"))
        else:
            bad("the stream sent output no sync covered")
        os.unlink(fault)
        r = Stream(api, gate, after=first)
        r.start()
        wait_for("the resumed stream", lambda: any(
            "after-go" in d for _, d in r.logs()))
        ok("once syncs work, a stream resumed from the last id sends it")
        db.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if os.environ.get("KEEP"):
            print("     kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status())


if __name__ == "__main__":
    main()
