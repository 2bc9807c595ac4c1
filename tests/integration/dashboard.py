#!/usr/bin/env python3
"""dashboard.py - the web dashboard's server side, on a real all-in-one
cnlabd (embedded agent, two fake H100s, real processes) over loopback:

  - the snapshot (GET /v1/dashboard): the node and its two GPUs, a
    running job's slice with its project, user and name, a pending job
    with its reason, the pending counts;
  - its filtering: a member of another project sees the slice as
    {"kind": "other"} with its size only and neither job in the lists
    (attack: reading another project's job names, ids or users through
    the dashboard, by bearer, cookie or stream: must fail);
  - Server-Sent Events (GET /v1/dashboard/events): a stream open before a
    submission delivers a snapshot showing the new job, on the same
    connection, without a request from the client;
  - the session cookie (POST /v1/auth/cookie): HttpOnly, SameSite=Strict,
    Path=/; it authenticates GETs; a sign-in posted from another Origin
    (login CSRF) is refused (403) without a cookie; attacks: a POST with the cookie and no
    or a wrong X-CSRF-Token, or from another Origin, is refused (403) and
    changes nothing; a logged-out cookie and a disabled user's cookie are
    refused (401), and the disabled user's open stream ends;
  - the embedded pages: / redirects to /ui/, /ui/ has the CSP,
    nosniff and no-referrer headers and an ETag (304 on If-None-Match);
    path traversal under /ui (/ui/../etc/passwd, %2e%2e) is a 404.

Prints "ok ..." / "FAIL ..." lines, exits 1 on a failure.  Timeouts only
guard against a hung daemon; nothing asserts how long anything took.
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

from testlib import bad, die, ok, status, wait_for

CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; "
       "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
       "base-uri 'none'; form-action 'self'")


class Api:
    def __init__(self, port, token=None, cookie=None):
        self.port, self.token, self.cookie = port, token, cookie

    def raw(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = dict(headers or {})
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if self.cookie:
            h["Cookie"] = "cnlab_ui=" + self.cookie
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        c.request(method, path, data, h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r, raw

    def call(self, method, path, body=None, headers=None):
        r, raw = self.raw(method, path, body, headers)
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")


class Stream(threading.Thread):
    """Reads the dashboard's event stream as it comes, into self.snaps."""

    def __init__(self, api):
        super().__init__(daemon=True)
        self.api = api
        self.snaps = []  # the texts of the snapshot events
        self.ended = None
        self.opened = threading.Event()
        self.cv = threading.Condition()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.api.port,
                                           timeout=120)
            h = {}
            if self.api.token:
                h["Authorization"] = "Bearer " + self.api.token
            if self.api.cookie:
                h["Cookie"] = "cnlab_ui=" + self.api.cookie
            c.request("GET", "/v1/dashboard/events", None, h)
            r = c.getresponse()
            self.ctype = r.getheader("Content-Type")
            if r.status != 200:
                self.ended = "status %d" % r.status
                self.opened.set()
                return
            self.opened.set()
            ev = {}
            while True:
                line = r.readline()
                if not line:
                    self.ended = "closed"
                    break
                line = line.decode().rstrip("\n")
                if line == "":
                    if ev.get("event") == "snapshot":
                        with self.cv:
                            self.snaps.append(ev["data"])
                            self.cv.notify_all()
                    ev = {}
                elif not line.startswith(":"):
                    k, _, v = line.partition(": ")
                    ev[k] = v
        except (OSError, http.client.HTTPException) as e:
            self.ended = type(e).__name__
            self.opened.set()
        with self.cv:
            self.cv.notify_all()

    def wait(self, what, pred, secs=60):
        """The first snapshot (parsed) for which pred() holds."""
        def find():
            for t in self.snaps:
                v = json.loads(t)
                if pred(v):
                    return v
            return None
        with self.cv:
            self.cv.wait_for(lambda: self.ended is not None or
                             find() is not None, timeout=secs)
            v = find()
        if v is None:
            die("stream: no snapshot with %s (%s, %d snapshots)" %
                (what, self.ended, len(self.snaps)))
        return v


def sign_in(port, user, password):
    a = Api(port)
    r, raw = a.raw("POST", "/v1/auth/cookie",
                   {"user": user, "password": password})
    if r.status != 200:
        die("cookie sign-in of %s: %d %s" % (user, r.status, raw))
    sc = r.getheader("Set-Cookie") or ""
    m = re.match(r"cnlab_ui=([^;]+);", sc)
    if not m:
        die("no cookie in %r" % sc)
    a.cookie = m.group(1)
    body = json.loads(raw)
    return a, body, sc


CLI = None


def cli(port, token, *args):
    """The cnlab CLI against the platform: (exit status, output)."""
    env = dict(os.environ, CNLAB_SERVER="http://127.0.0.1:%d" % port,
               CNLAB_TOKEN=token)
    env.pop("CNLAB_CONFIG", None)
    r = subprocess.run([CLI] + list(args), env=env, capture_output=True,
                       text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def tenant(snap, kind, name):
    got = [e for e in snap.get(kind, []) if e.get("name") == name]
    return got[0] if got else None


def usage_and_limits(admin, alice, bob_bearer, port):
    """gpu_limit is the GPU-hours quota set with the CLI; usage_7d (7
    days, today last) grows while vision's job runs; bob (audio) sees
    neither vision nor alice."""
    state = {}

    def vision_used(limit):
        # A change (the quota, set again) makes a new snapshot.
        rc, out = cli(port, admin.token, "quota", "set", "--project",
                      "vision", "--gpu-hours", str(limit))
        if rc != 0:
            die("cnlab quota set: %d %s" % (rc, out))
        p = tenant(admin.call("GET", "/v1/dashboard")[1], "projects",
                   "vision")
        if not p or len(p.get("usage_7d") or []) != 7:
            return None
        state["p"] = p
        return p["usage_7d"][6] if p["usage_7d"][6] > 0 else None
    u1 = wait_for("vision's use today", lambda: vision_used(7))
    p = state["p"]
    if p.get("gpu_limit") == 7 and all(v == 0 for v in p["usage_7d"][:6]):
        ok("snapshot: gpu_limit is the quota set with cnlab (7), "
           "usage_7d has today's use last (%.6f)" % u1)
    else:
        bad("vision: %s" % p)
    wait_for("vision's use growing", lambda: (vision_used(8) or 0) > u1)
    ok("snapshot: usage_7d grows while the job runs")
    a = tenant(alice.call("GET", "/v1/dashboard")[1], "users", "alice")
    if a and a.get("project") == "vision" and a["usage_7d"][6] > 0 \
            and a.get("gpu_limit") is None:
        ok("alice sees her own use in vision, no user limit (null)")
    else:
        bad("alice's entry: %s" % a)
    snap = bob_bearer.call("GET", "/v1/dashboard")[1]
    if tenant(snap, "projects", "vision") is None and \
            tenant(snap, "users", "alice") is None:
        ok("bob (audio) sees neither vision's nor alice's use")
    else:
        bad("bob sees vision's use: %s %s" % (snap.get("projects"),
                                              snap.get("users")))
    rc, out = cli(port, admin.token, "quota", "set", "--project", "vision",
                  "--gpu-hours", "none")
    p = tenant(admin.call("GET", "/v1/dashboard")[1], "projects", "vision")
    if rc == 0 and p and p.get("gpu_limit") is None:
        ok("no quota: gpu_limit null")
    else:
        bad("quota none: %d %s %s" % (rc, out, p))


def main():
    global CLI
    if len(sys.argv) != 6:
        print("usage: dashboard.py CNLABD CNLAB FAKE_NVML SHIMTEST SHIM",
              file=sys.stderr)
        sys.exit(2)
    CLI = sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="cnlab-dash-")
    data = os.path.join(tmp, "data")
    env = dict(os.environ, HOME=tmp)
    for k in ("CNLAB_JWT_SECRET", "CNLAB_ADMIN_PASSWORD", "CNLAB_SERVER",
              "CNLAB_TOKEN", "CNLAB_CONFIG"):
        env.pop(k, None)
    out = open(os.path.join(tmp, "out"), "w+")
    # Two H100s of the fake libnvidia-ml.so.1, through the real NVML
    # calls: their utilisation reaches the snapshot (37% and 48%).
    env.update(FAKE_NVML_GPUS="2", FAKE_NVML_MEM_MIB="81559")
    proc = subprocess.Popen(
        [sys.argv[1], "--all-in-one", "--data-dir", data, "--listen",
         "127.0.0.1:0", "--gpus", "nvml:" + sys.argv[3], "--log-level",
         "warn"], stdout=out, stderr=open(os.path.join(tmp, "err"), "w"),
        env=env)
    try:
        run(tmp, data)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status())


def run(tmp, data):
    url = wait_for("cnlabd", lambda: re.search(
        r"CNLab is running at http://127\.0\.0\.1:(\d+)",
        open(os.path.join(tmp, "out")).read()))
    port = int(url.group(1))
    admin = Api(port)
    pw = open(os.path.join(data, "admin.password")).read().strip()
    st, doc = admin.call("POST", "/v1/auth/login",
                         {"user": "admin", "password": pw})
    if st != 200:
        die("login: %d %s" % (st, doc))
    admin.token = doc["token"]
    wait_for("the node", lambda: len(
        admin.call("GET", "/v1/nodes")[1].get("items", [])) >= 1)
    projects = {}
    for p in ("vision", "audio"):
        st, doc = admin.call("POST", "/v1/projects", {"name": p})
        if st != 201:
            die("project %s: %d %s" % (p, st, doc))
        projects[p] = doc["id"]
    for u, p in (("alice", "vision"), ("bob", "audio")):
        st, doc = admin.call("POST", "/v1/users",
                             {"name": u, "password": u + "-pw-123456"})
        if st != 201:
            die("user %s: %d %s" % (u, st, doc))
        st, doc = admin.call("POST", "/v1/projects/%s/members" % projects[p],
                             {"user": u, "role": "member"})
        if st not in (200, 201):
            die("member %s: %d %s" % (u, st, doc))

    # --- the cookie -------------------------------------------------------
    r, raw = Api(port).raw("POST", "/v1/auth/cookie",
                           {"user": "alice", "password": "wrong-password"})
    if r.status == 401 and r.getheader("Set-Cookie") is None:
        ok("a wrong password: 401, no cookie")
    else:
        bad("wrong password: %d %s" % (r.status, raw))
    # Login CSRF: another site's form posts the attacker's credentials
    # (text/plain can carry JSON); the browser must not be signed in.
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/auth/cookie",
              json.dumps({"user": "alice", "password": "alice-pw-123456"}),
              {"Content-Type": "text/plain", "Origin": "http://evil.example"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    if (r.status == 403 and r.getheader("Set-Cookie") is None
            and b"Origin" in raw):
        ok("sign-in from another Origin (login CSRF): 403 naming it, no cookie")
    else:
        bad("cross-origin sign-in: %d %s %s" % (r.status, r.getheader("Set-Cookie"), raw))
    alice, body, sc = sign_in(port, "alice", "alice-pw-123456")
    attrs = [a.strip() for a in sc.split(";")]
    if ("HttpOnly" in attrs and "SameSite=Strict" in attrs
            and "Path=/" in attrs
            and any(a.startswith("Max-Age=") and int(a[8:]) > 0
                    for a in attrs) and "Secure" not in attrs):
        ok("the cookie is HttpOnly, SameSite=Strict, Path=/, Max-Age")
    else:
        bad("cookie attributes: %r" % sc)
    if (body.get("user") == "alice" and body.get("role") == "user"
            and re.fullmatch(r"[0-9a-f]{64}", body.get("csrf", ""))
            and "token" not in body and body.get("expires_at")):
        ok("sign-in answers user, role, csrf, expires_at (no token)")
    else:
        bad("sign-in body: %s" % body)
    csrf = body["csrf"]
    st, doc = alice.call("GET", "/v1/auth/whoami")
    if st == 200 and doc.get("name") == "alice":
        ok("the cookie authenticates a GET")
    else:
        bad("whoami by cookie: %d %s" % (st, doc))
    st, doc = alice.call("GET", "/v1/auth/csrf")
    if st == 200 and doc.get("csrf") == csrf:
        ok("GET /v1/auth/csrf gives the session's token again")
    else:
        bad("csrf: %d %s" % (st, doc))

    # --- the stream, open before the work exists ---------------------------
    s_alice = Stream(alice)
    s_alice.start()
    s_alice.opened.wait(60)
    if s_alice.ended is None and s_alice.ctype == "text/event-stream":
        ok("the dashboard stream opens (text/event-stream)")
    else:
        bad("stream: %s %s" % (s_alice.ended, getattr(s_alice, "ctype", "")))
    s_alice.wait("the first snapshot", lambda s: True)

    # alice submits through the API, by cookie and CSRF token.
    hdr = {"X-CSRF-Token": csrf}
    st, doc = alice.call("POST", "/v1/projects/%s/jobs" % projects["vision"],
                         {"command": "sleep 300 # secret-vision-train",
                          "gpu": "h100-10"}, hdr)
    if st != 201:
        die("submit by cookie: %d %s" % (st, doc))
    run_id = doc["id"]
    st, doc = alice.call("POST", "/v1/projects/%s/jobs" % projects["vision"],
                         {"command": "sleep 300 # secret-vision-wait",
                          "gpu": "h100x2"}, hdr)
    if st != 201:
        die("submit 2: %d %s" % (st, doc))
    wait_id = doc["id"]

    def running(s):
        return any(j["id"] == run_id for j in s["queues"]["running"])
    snap = s_alice.wait("the job running", running)
    ok("the stream delivered a snapshot showing the new job running")

    # --- the snapshot's content (admin) -----------------------------------
    def pending_with_reason(s):
        return any(j["id"] == wait_id and j.get("reason")
                   for j in s["queues"]["pending"])
    wait_for("the pending job's reason", lambda: pending_with_reason(
        admin.call("GET", "/v1/dashboard")[1]))
    st, snap = admin.call("GET", "/v1/dashboard")
    nodes = snap.get("nodes", [])
    if (len(nodes) == 1 and nodes[0]["state"] == "ready"
            and len(nodes[0]["gpus"]) == 2
            and all(g["model"] == "H100-80GB-SXM" and g["uuid"].startswith(
                "GPU-") and g["vram_mib"] > 0 for g in nodes[0]["gpus"])):
        ok("snapshot: the node and its two H100s")
    else:
        bad("nodes: %s" % json.dumps(nodes))
    def live_vram(s):
        sl = [x for n in s["nodes"] for g in n["gpus"] for x in g["slices"]
              if x.get("id") == run_id]
        return sl and isinstance(sl[0].get("vram_used_mib"), int) and all(
            isinstance(g.get("vram_used_mib"), int) for g in s["nodes"][0]
            ["gpus"]) and sl[0]
    sl = wait_for("the slice's live VRAM", lambda: live_vram(
        admin.call("GET", "/v1/dashboard")[1]))
    ok("snapshot: the slice's live vram_used_mib (%d of %d MiB) and each "
       "GPU's" % (sl["vram_used_mib"], sl["vram_mib"]))
    # The slice's compute use: a CUDA program (shimtest under the shim,
    # over the fake driver) joins the job's region and keeps its GPU
    # busy; two heartbeats later the slice's util_pct is its kernels'
    # share of the GPU's time (the rest of the GPU is idle, and shares
    # are work-conserving, so it may take nearly all of it; 0 while the
    # slice is idle).
    region = os.path.join(data, "agent", "regions", run_id + ".region")
    genv = dict(os.environ, LD_PRELOAD=sys.argv[5], CNLAB_REGION=region,
                CNL_FAKE_GPU=os.path.join(tmp, "fake-gpu"),
                CNL_FAKE_MEM=str(80 << 30))
    busy = subprocess.Popen([sys.argv[4], "greedy", "kernel", "2000", "40"],
                            env=genv, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, "greedy.err"), "w"))

    def slice_util(s):
        sl = [x for n in s["nodes"] for g in n["gpus"] for x in g["slices"]
              if x.get("id") == run_id]
        u = sl[0].get("util_pct") if sl else None
        return u if isinstance(u, int) and u >= 1 else None
    try:
        u = wait_for("the slice's compute use", lambda: slice_util(
            admin.call("GET", "/v1/dashboard")[1]))
        if 1 <= u <= 100:
            ok("snapshot: the slice's live compute use, %d%% of its GPU"
               % u)
        else:
            bad("slice util_pct %d" % u)
    finally:
        busy.kill()
        busy.wait()
    utils = sorted(g.get("util_pct") for g in nodes[0]["gpus"])
    if utils == [37, 48]:
        ok("snapshot: each GPU's util_pct as the driver reports it %s"
           % utils)
    else:
        bad("util_pct: %s" % utils)
    slices = [sl for g in nodes[0]["gpus"] for sl in g["slices"]]
    mine = [sl for sl in slices if sl.get("id") == run_id]
    if (len(mine) == 1 and mine[0]["kind"] == "job"
            and mine[0]["project"] == "vision" and mine[0]["user"] == "alice"
            and "secret-vision-train" in mine[0]["name"]
            and (mine[0].get("blocks") or mine[0].get("mig_profile"))):
        ok("snapshot: the running job's slice with project, user, name")
    else:
        bad("slices: %s" % json.dumps(slices))
    pend = [j for j in snap["queues"]["pending"] if j["id"] == wait_id]
    if (pend and pend[0]["reason"] and pend[0]["project"] == "vision"
            and pend[0]["priority"] == "normal" and pend[0]["submitted_at"]
            and snap["queues"]["pending_counts"].get("normal", 0) >= 1):
        ok("snapshot: the pending job with its reason (%s)" %
           pend[0]["reason"])
    else:
        bad("pending: %s" % json.dumps(snap["queues"]))
    if (snap["viewer"]["role"] == "admin" and isinstance(snap["version"], int)
            and snap["generated_at"]):
        ok("snapshot: viewer, version, generated_at")
    else:
        bad("snapshot head: %s" % {k: snap.get(k) for k in
                                   ("viewer", "version", "generated_at")})

    # --- the attack: bob (audio) reads vision's work -----------------------
    bob, bbody, _ = sign_in(port, "bob", "bob-pw-123456")
    st, btok = Api(port).call("POST", "/v1/auth/login",
                              {"user": "bob", "password": "bob-pw-123456"})
    bob_bearer = Api(port, token=btok["token"])
    s_bob = Stream(bob)
    s_bob.start()
    s_bob.opened.wait(60)
    views = [("cookie", bob.call("GET", "/v1/dashboard")[1]),
             ("bearer", bob_bearer.call("GET", "/v1/dashboard")[1]),
             ("stream", s_bob.wait("bob's first", lambda s: True))]
    for how, v in views:
        text = json.dumps(v)
        leaks = [x for x in ("secret-vision", run_id, wait_id, "alice",
                             "vision") if x in text]
        bs = [sl for g in v["nodes"][0]["gpus"] for sl in g["slices"]]
        if leaks:
            bad("bob (audio) reads vision's %s through the dashboard "
                "(%s)" % (leaks, how))
        elif (len(bs) == 1 and bs[0]["kind"] == "other"
              and set(bs[0]) <= {"kind", "start", "blocks", "mig_profile",
                                 "mig_start", "gi", "vram_mib"}
              and not v["queues"]["pending"] and not v["queues"]["running"]
              and v["queues"]["pending_counts"].get("normal", 0) >= 1
              and v["viewer"] == {"user": "bob", "role": "user",
                                  "projects": ["audio"]}):
            ok("bob (audio) sees vision's slice as \"other\", none of its "
               "jobs, only counts (%s)" % how)
        else:
            bad("bob's view (%s): %s" % (how, text[:2000]))

    # --- CSRF and Origin ---------------------------------------------------
    cancel = "/v1/jobs/%s/cancel" % wait_id

    def still_pending():
        return admin.call("GET", "/v1/jobs/" + wait_id)[1]["state"] == \
            "pending"
    for what, h in (("no X-CSRF-Token", {}),
                    ("a wrong X-CSRF-Token", {"X-CSRF-Token": "0" * 64}),
                    ("bob's X-CSRF-Token", {"X-CSRF-Token": bbody["csrf"]}),
                    ("another Origin", {"X-CSRF-Token": csrf,
                                        "Origin": "http://evil.example"})):
        st, doc = alice.call("POST", cancel, None, h)
        named = "Origin" if "Origin" in h else "X-CSRF-Token"
        if (st == 403 and named in doc["error"]["message"]
                and still_pending()):
            ok("a cookie POST with %s: 403 naming %s, nothing cancelled" %
               (what, named))
        else:
            bad("cookie POST with %s: %d %s (cancelled: %s)" %
                (what, st, doc, not still_pending()))
    st, doc = alice.call("POST", cancel, None,
                         {"X-CSRF-Token": csrf,
                          "Origin": "http://127.0.0.1:%d" % port})
    if st == 200 and not still_pending():
        ok("a cookie POST with the token from the same origin works")
    else:
        bad("same-origin cancel: %d %s" % (st, doc))

    # --- a server stays listed once stopped ---------------------------------
    st, doc = alice.call("POST", "/v1/projects/%s/servers" %
                         projects["vision"],
                         {"name": "nb-vision", "profile": "h100-25pct",
                          "image": "host"}, hdr)
    if st not in (200, 201, 202):
        die("server create: %d %s" % (st, doc))
    srv = doc["id"]

    def server_in(s, state):
        return [v for v in s.get("servers", []) if v.get("id") == srv and
                (state is None or v.get("state") == state)]
    wait_for("the server listed", lambda: server_in(
        admin.call("GET", "/v1/dashboard")[1], None))
    st, doc = alice.call("POST", "/v1/servers/%s/stop" % srv, None, hdr)
    if st not in (200, 202):
        die("server stop: %d %s" % (st, doc))
    wait_for("the server stopped on the dashboard", lambda: server_in(
        admin.call("GET", "/v1/dashboard")[1], "stopped"))
    got = server_in(alice.call("GET", "/v1/dashboard")[1], "stopped")
    if (got and got[0].get("name") == "nb-vision"
            and got[0].get("project") == "vision"
            and got[0].get("user") == "alice"):
        ok("a stopped server stays on the owner's dashboard, named")
    else:
        bad("stopped server: %s" % got)
    if "nb-vision" not in json.dumps(bob_bearer.call("GET",
                                                     "/v1/dashboard")[1]):
        ok("bob (audio) does not see vision's stopped server")
    else:
        bad("bob sees vision's stopped server")

    # --- use, history and limits (issue 20) --------------------------------
    usage_and_limits(admin, alice, bob_bearer, port)

    # --- logout and disable ------------------------------------------------
    r, raw = alice.raw("POST", "/v1/auth/logout", None,
                       {"X-CSRF-Token": csrf})
    sc = r.getheader("Set-Cookie") or ""
    if r.status == 200 and sc.startswith("cnlab_ui=;") and \
            "Max-Age=0" in sc:
        ok("logout clears the cookie")
    else:
        bad("logout: %d %s %r" % (r.status, raw, sc))
    st, doc = alice.call("GET", "/v1/dashboard")
    if st == 401:
        ok("a logged-out cookie: 401")
    else:
        bad("logged-out cookie: %d %s" % (st, str(doc)[:300]))
    st, doc = admin.call("POST", "/v1/users/bob/disable")
    if st != 200:
        die("disable bob: %d %s" % (st, doc))
    st, doc = bob.call("GET", "/v1/dashboard")
    if st == 401:
        ok("a disabled user's cookie: 401")
    else:
        bad("disabled user's cookie: %d %s" % (st, str(doc)[:300]))
    s_bob.join(60)
    if s_bob.ended == "closed":
        ok("a disabled user's open stream ends")
    else:
        bad("bob's stream after disable: %s" % s_bob.ended)

    # --- the pages ---------------------------------------------------------
    anon = Api(port)
    r, raw = anon.raw("GET", "/")
    if r.status == 302 and r.getheader("Location") == "/ui/":
        ok("/ redirects to /ui/")
    else:
        bad("/: %d %s" % (r.status, r.getheader("Location")))
    r, raw = anon.raw("GET", "/ui/")
    etag = r.getheader("ETag") or ""
    if (r.status == 200 and r.getheader("Content-Security-Policy") == CSP
            and r.getheader("X-Content-Type-Options") == "nosniff"
            and r.getheader("Referrer-Policy") == "no-referrer"
            and r.getheader("Cache-Control") == "no-cache"
            and r.getheader("Content-Type").startswith("text/html")
            and re.fullmatch(r'"[0-9a-f]{32}"', etag)
            and b"<html" in raw.lower()):
        ok("/ui/: index.html with CSP, nosniff, no-referrer, ETag")
    else:
        bad("/ui/: %d %s" % (r.status, r.getheaders()))
    r, raw = anon.raw("GET", "/ui/", None, {"If-None-Match": etag})
    if r.status == 304 and not raw:
        ok("/ui/ with If-None-Match: 304")
    else:
        bad("If-None-Match: %d" % r.status)
    for path in ("/ui/../etc/passwd", "/ui/%2e%2e/etc/passwd",
                 "/ui/%2e%2e", "/ui/..%2f..%2fetc%2fpasswd",
                 "/ui/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/ui/.."):
        r, raw = anon.raw("GET", path)
        if r.status == 404 and b"root:" not in raw:
            ok("traversal %s: 404" % path)
        else:
            bad("traversal %s: %d %s" % (path, r.status, raw[:100]))


if __name__ == "__main__":
    main()
