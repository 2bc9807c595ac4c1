#!/usr/bin/env python3
"""dashboard_sse.py - what open dashboards cost cnlabd, and how fast a
change reaches them (issue 20, "Measure").

    bench/dashboard_sse.py [--cnlabd PATH] [--nodes 100] [--jobs 1000]
                           [--dashboards 200] [--seconds 60] [--rate 10]

Starts a fresh cnlabd (SQLite, no agent), registers --nodes fake nodes of
8 H100s each through the API (join tokens; the bench heartbeats them),
submits --jobs jobs of 10% of an H100 (the scheduler places them: slices
on the block map), then runs the same --seconds of activity twice, in the
same run:

  baseline     no dashboard open: --rate submissions and as many
               cancellations a second, the nodes' heartbeats;
  dashboards   the same with --dashboards streams of GET
               /v1/dashboard/events open (one viewer per stream, reading
               every event).

and prints cnlabd's CPU seconds (utime + stime from /proc) in each, their
difference per dashboard, the snapshots built, and the update latency:
for each submission, from the moment its answer came back to the moment
the first of PROBES (4) streams received a snapshot event listing it
(p50, p99; the other streams are read to the last byte by one thread
over a selector and parsed not at all, so that the client's own parsing
does not fall behind and measure itself).  The
machine is shared: compare the two rows of one run, not runs.
"""
import argparse
import http.client
import json
import os
import re
import selectors
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time

TCK = os.sysconf("SC_CLK_TCK")
PROBES = 4  # streams that parse each event for the latency


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TCK


class Api:
    def __init__(self, port, token=None):
        self.port, self.token = port, token
        self.c = None

    def call(self, method, path, body=None, token=None):
        for _ in range(2):
            try:
                if self.c is None:
                    self.c = http.client.HTTPConnection(
                        "127.0.0.1", self.port, timeout=120)
                h = {"Content-Type": "application/json"}
                t = token or self.token
                if t:
                    h["Authorization"] = "Bearer " + t
                self.c.request(method, path,
                               json.dumps(body) if body is not None
                               else None, h)
                r = self.c.getresponse()
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
            except (OSError, http.client.HTTPException):
                self.c = None
        raise RuntimeError("cnlabd does not answer")


class Viewers(threading.Thread):
    """The plain viewers: @n streams opened on raw sockets and read to
    the last byte, as a browser does, by one thread over a selector,
    parsing nothing (threads each parsing every 0.5 MB snapshot of
    hundreds of streams fall behind under the GIL and measure the
    client).  Counts the events' starts (b"data: ")."""

    def __init__(self, port, token, n, stop):
        super().__init__(daemon=True)
        self.stop, self.events, self.socks = stop, 0, []
        self.sel = selectors.DefaultSelector()
        req = ("GET /v1/dashboard/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Authorization: Bearer %s\r\n\r\n" % token).encode()
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=120)
            s.sendall(req)
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ)
            self.socks.append(s)

    def run(self):
        while not self.stop.is_set() and self.socks:
            for key, _ in self.sel.select(0.2):
                try:
                    b = key.fileobj.recv(1 << 16)
                except BlockingIOError:
                    continue
                if not b:
                    self.sel.unregister(key.fileobj)
                    self.socks.remove(key.fileobj)
                    continue
                self.events += b.count(b"data: ")
        for s in self.socks:
            s.close()


class Dash(threading.Thread):
    def __init__(self, port, token, seen, lock, stop):
        super().__init__(daemon=True)
        self.port, self.token = port, token
        self.seen, self.lock, self.stop = seen, lock, stop
        self.events = 0
        self.opened = threading.Event()

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.request("GET", "/v1/dashboard/events", None,
                  {"Authorization": "Bearer " + self.token})
        r = c.getresponse()
        self.opened.set()
        while not self.stop.is_set():
            line = r.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                self.events += 1
                now = time.monotonic()
                ids = re.findall(rb'"id":"(job_[0-9A-Z]+)"', line)
                with self.lock:
                    for i in ids:
                        if i not in self.seen:
                            self.seen[i] = now
        c.close()


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cnlabd", default=os.path.join(
        os.path.dirname(__file__), "..", "build", "src", "server", "cnlabd"))
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--dashboards", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=float, default=10)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cnlab-dash-bench-")
    # Every stream comes from 127.0.0.1: the connection caps (128 per
    # client, 1,024 in all by default) are raised to let them all in.
    caps = str(a.dashboards + 256)
    env = dict(os.environ, HOME=tmp, CNLAB_ADMIN_PASSWORD="benchpass-1234567",
               CNLAB_JWT_SECRET=os.urandom(36).hex(),
               CNLAB_HTTP_MAX_CONNECTIONS=caps,
               CNLAB_HTTP_MAX_CONNECTIONS_PER_CLIENT=caps)
    out = open(os.path.join(tmp, "out"), "w+")
    proc = subprocess.Popen(
        [a.cnlabd, "--data-dir", os.path.join(tmp, "d"), "--listen",
         "127.0.0.1:0", "--log-level", "warn", "--bootstrap-admin", "root"],
        stdout=out, stderr=open(os.path.join(tmp, "err"), "w"), env=env)
    try:
        for _ in range(500):
            m = re.search(r"^listening on 127\.0\.0\.1:(\d+)$",
                          open(os.path.join(tmp, "out")).read(), re.M)
            if m:
                break
            time.sleep(0.02)
        else:
            sys.exit("cnlabd did not start")
        bench(a, int(m.group(1)), proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def bench(a, port, pid):
    api = Api(port)
    st, doc = api.call("POST", "/v1/auth/login",
                       {"user": "root", "password": "benchpass-1234567"})
    api.token = doc["token"]
    st, doc = api.call("POST", "/v1/projects", {"name": "bench"})
    proj = doc["id"]
    api.call("POST", "/v1/projects/%s/members" % proj,
             {"user": "root", "role": "member"})
    creds = []
    for i in range(a.nodes):
        name = "node-%03d" % i
        st, doc = api.call("POST", "/v1/nodes/join-tokens",
                           {"node": name, "expires_in_seconds": 3600})
        st, doc = api.call("POST", "/v1/nodes", {
            "protocol": 5, "name": name, "gpu_type": "H100-80GB-SXM",
            "gpus": 8, "cpu_milli": 256000, "mem_mib": 1 << 20},
            token=doc["token"])
        if st not in (200, 201):
            sys.exit("register %s: %d %s" % (name, st, doc))
        creds.append((name, doc["credential"]))
    stop_hb = threading.Event()

    def heartbeats():
        hb = Api(port)
        while not stop_hb.is_set():
            for name, cred in creds:
                hb.call("POST", "/v1/nodes/%s/heartbeat" % name, {},
                        token=cred)
            stop_hb.wait(2.0)
    threading.Thread(target=heartbeats, daemon=True).start()
    jobs = []
    for i in range(a.jobs):
        st, doc = api.call("POST", "/v1/projects/%s/jobs" % proj,
                           {"command": "train-%d" % i, "gpu": "h100-10"})
        if st != 201:
            sys.exit("submit: %d %s" % (st, doc))
        jobs.append(doc["id"])
    time.sleep(3)  # the scheduler places them
    st, snap = api.call("GET", "/v1/dashboard")
    print("set-up: %d nodes (%d ready), %d running, %d pending; snapshot "
          "%d bytes" % (len(snap["nodes"]), sum(
              n["state"] == "ready" for n in snap["nodes"]),
              len(snap["queues"]["running"]),
              sum(snap["queues"]["pending_counts"].values()),
              len(json.dumps(snap))), flush=True)

    def activity(seconds, stamps):
        """Submissions and cancellations at --rate each a second."""
        end = time.monotonic() + seconds
        gap = 1.0 / a.rate
        nxt = time.monotonic()
        while time.monotonic() < end:
            st, doc = api.call("POST", "/v1/projects/%s/jobs" % proj,
                               {"command": "probe", "gpu": "h100-10",
                                "priority": "high"})
            stamps.append((doc["id"], time.monotonic()))
            api.call("POST", "/v1/jobs/%s/cancel" % jobs.pop(0))
            jobs.append(doc["id"])
            nxt += gap
            time.sleep(max(0.0, nxt - time.monotonic()))

    def builds():
        st, text = None, None
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/metrics", None,
                  {"Authorization": "Bearer " + api.token})
        text = c.getresponse().read().decode()
        m = re.search(r"^cnlab_dashboard_builds_total (\d+)", text, re.M)
        return int(m.group(1)) if m else 0

    rows = []
    for n in (0, a.dashboards):
        seen, lock, stop = {}, threading.Lock(), threading.Event()
        dash = [Dash(port, api.token, seen, lock, stop)
                for _ in range(min(n, PROBES))]
        for d in dash:
            d.start()
        for d in dash:
            d.opened.wait(120)
        plain = Viewers(port, api.token, max(0, n - PROBES), stop)
        plain.start()
        time.sleep(1)
        b0, c0, t0 = builds(), cpu_s(pid), time.monotonic()
        stamps = []
        activity(a.seconds, stamps)
        time.sleep(1)
        c1, t1, b1 = cpu_s(pid), time.monotonic(), builds()
        stop.set()
        lat = [(seen[i.encode()] - t) * 1000 for i, t in stamps
               if i.encode() in seen]
        rows.append((n, c1 - c0, t1 - t0, b1 - b0, lat, len(stamps),
                     sum(d.events for d in dash) + plain.events))
    stop_hb.set()
    print("dashboard_sse: %d nodes x 8 H100, %d jobs placed or pending, "
          "%.0f s of %.0f submissions + %.0f cancellations a second, "
          "heartbeats every 2 s" % (a.nodes, a.jobs, a.seconds, a.rate,
                                    a.rate))
    print("%-12s %10s %10s %8s %10s %10s %10s" % (
        "dashboards", "cpu_s", "cpu_%", "builds", "events", "p50_ms",
        "p99_ms"))
    for n, cpu, wall, b, lat, k, ev in rows:
        print("%-12d %10.2f %10.1f %8d %10d %10s %10s" % (
            n, cpu, 100 * cpu / wall, b, ev,
            "%.0f" % pct(lat, 50) if lat else "-",
            "%.0f" % pct(lat, 99) if lat else "-"))
    base, full = rows[0], rows[-1]
    print("extra cnlabd CPU with %d dashboards: %.2f s over %.0f s "
          "(%.1f%% of a core; %.2f ms per dashboard per second)" % (
              full[0], full[1] - base[1], full[2],
              100 * (full[1] - base[1]) / full[2],
              1000 * (full[1] - base[1]) / full[2] / max(1, full[0])))
    if full[4]:
        print("update latency (submit answered -> first stream shows it): "
              "p50 %.0f ms, p99 %.0f ms over %d submissions (%d seen)" % (
                  pct(full[4], 50), pct(full[4], 99), full[5],
                  len(full[4])))


if __name__ == "__main__":
    main()
