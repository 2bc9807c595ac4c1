#!/usr/bin/env python3
"""group_commit.py - cnlabd's group commit, attacked for real: a real
cnlabd on loopback, 64 concurrent submitters over keep-alive connections,
SIGKILL and a failing disk sync.

  kill CNLABD     ROUNDS (20) rounds: 64 threads submit jobs as fast as
                  they can; once the round has acknowledgements, after a
                  random delay, cnlabd is killed with SIGKILL (inside a
                  batch: with 64 submitters there is always one being
                  built or synced).  After each kill the database is read
                  directly (sqlite3, as a restart would recover it):
                  every acknowledged job is there, every job row has its
                  job.create audit record and every job.create record
                  that says 201 has its job (no request is half there).
                  After the last round cnlabd restarts, the audit chain
                  verifies and every acknowledged id answers GET 200.
  fault CNLABD    cnlabd started with CNLAB_TEST_SYNC_FAULT (a test
                  build's fault injection: while the named file exists,
                  the syncer's fdatasync fails): with the fault, 64
                  concurrent submissions all answer 503 with a JSON error
                  (not one 201), a GET that could read what is not
                  durable answers 503, /healthz still 200, and the fault
                  is logged; once the fault clears, submissions answer
                  201 again, and after a SIGKILL every acknowledged job
                  is there.  A submission whose sync failed was
                  committed but never acknowledged: retried with its
                  Idempotency-Key it answers the one job it made, and
                  the store holds one job of that key, not two.
  commit CNLABD   cnlabd started with CNLAB_TEST_COMMIT_FAULT (a test
                  build's fault injection: the next transaction commit
                  after the named file is created fails as on a full
                  disk, and the file goes): a submission whose commit
                  fails answers 507 and leaves nothing behind, in the
                  store or in the controller's memory (the queue depth
                  of /metrics, the scheduler's decisions, which would
                  name the lost job); a cancel whose commit fails leaves
                  the job pending, in memory too (cancelling it again
                  works); the retry of the
                  failed submission with its Idempotency-Key makes one
                  job; a submission with an input (an upload) whose
                  commit fails keeps the upload's file, its retry makes
                  the job with the input, and only then does the
                  upload's own file go; after kill -9 and a restart, the
                  jobs, their states and the queue depth are what they
                  were.
  batch CNLABD    cnlabd started with CNLAB_TEST_BATCH_FAULT (the next
                  batch of transactions, committed together, is lost at
                  its commit as on a full disk): 64 submitters; the lost
                  batch's submissions answer 507 naming the database
                  (never 201, never 500); memory follows the store (the
                  API's job list is the store's jobs, the queue depth
                  their number, no scheduler decision names a job the
                  store lacks); every acknowledged job is there; each
                  refused submission retried with its Idempotency-Key
                  makes exactly one job; after kill -9 and a restart the
                  jobs are the same.

Prints "ok ..." lines, or "FAIL ..." lines and exits 1.  Timeouts only
guard against a hung daemon; nothing asserts how long anything took.
"""
import hashlib
import http.client
import json
import os
import random
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

SECRET = "group-commit-test-secret-0123456789abcdef"
PASSWORD = "group-commit-admin-password"
WRITERS = 64



class Daemon:
    def __init__(self, binary, data, env=None):
        self.binary, self.data = binary, data
        self.env = dict(os.environ, CNLAB_JWT_SECRET=SECRET,
                        CNLAB_ADMIN_PASSWORD=PASSWORD, **(env or {}))
        self.proc = None
        self.port = None
        self.err = os.path.join(data + ".err")

    def start(self, *args):
        self.out = open(self.data + ".out", "w+")
        self.proc = subprocess.Popen(
            [self.binary, "--data-dir", self.data, "--listen",
             "127.0.0.1:0", "--log-level", "warn", *args],
            stdout=self.out, stderr=open(self.err, "a"), env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                die("cnlabd exited: " + open(self.err).read()[-2000:])
            with open(self.data + ".out") as f:
                m = re.search(r"^listening on 127\.0\.0\.1:(\d+)$",
                              f.read(), re.M)
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.02)
        die("cnlabd did not start")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.out.close()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.kill9()

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port,
                                          timeout=120)


def call(conn, method, path, body=None, headers=None):
    h = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body)
        h["Content-Type"] = "application/json"
    conn.request(method, path, data, h)
    r = conn.getresponse()
    raw = r.read()
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = None
    return r.status, doc


def setup(d):
    c = d.conn()
    st, doc = call(c, "POST", "/v1/auth/login",
                   {"user": "root", "password": PASSWORD})
    if st != 200:
        die("login: %d %s" % (st, doc))
    auth = {"Authorization": "Bearer " + doc["token"]}
    st, doc = call(c, "POST", "/v1/projects", {"name": "gc"}, auth)
    if st != 201:
        die("create project: %d %s" % (st, doc))
    return auth, doc["id"]


class Submitter(threading.Thread):
    """POSTs jobs on one keep-alive connection until the first transport
    error (the daemon died) or @stop; records what each answer was."""

    def __init__(self, d, auth, proj, tag, stop=None, limit=None):
        super().__init__(daemon=True)
        self.d, self.auth, self.proj, self.tag = d, auth, proj, tag
        self.stop, self.limit = stop, limit
        self.acked = []        # (id, key)
        self.statuses = {}     # status -> count
        self.other = []        # bodies of answers neither 201 nor 503
        self.failed_keys = []  # the keys of the answers other than 201
        self.bodies_503 = []
        self.end = None

    def run(self):
        try:
            c = self.d.conn()
        except OSError as e:
            self.end = "connect: %s" % e
            return
        i = 0
        while not (self.stop and self.stop.is_set()) and \
                (self.limit is None or i < self.limit):
            key = "gc-%s-%d" % (self.tag, i)
            h = dict(self.auth)
            h["Idempotency-Key"] = key
            try:
                st, doc = call(c, "POST", "/v1/projects/%s/jobs" % self.proj,
                               {"command": "echo %s" % key, "gpu": "h100-25",
                                "priority": i % 4}, h)
            except (OSError, http.client.HTTPException) as e:
                self.end = type(e).__name__
                return
            self.statuses[st] = self.statuses.get(st, 0) + 1
            if st == 201 and doc and "id" in doc:
                self.acked.append((doc["id"], key))
                i += 1
                continue
            self.failed_keys.append(key)
            if st == 503:
                self.bodies_503.append(doc)
            else:
                self.other.append((st, doc))
            i += 1
        self.end = "done"


def db_check(path, acked, label):
    """The database as a restart finds it: acked jobs present, nothing
    half there.  Returns the number of job rows."""
    db = sqlite3.connect(path)
    try:
        jobs = {r[0] for r in db.execute("SELECT id FROM jobs")}
        audited = {}
        for target, result in db.execute(
                "SELECT target, result FROM audit WHERE action = "
                "'job.create'"):
            audited.setdefault(target, []).append(result)
    finally:
        db.close()
    lost = [i for i, _ in acked if i not in jobs]
    if lost:
        bad("%s: %d of %d acknowledged jobs lost (e.g. %s)"
            % (label, len(lost), len(acked), lost[0]))
    no_audit = [j for j in jobs if j not in audited]
    if no_audit:
        bad("%s: %d job rows without their job.create audit record "
            "(e.g. %s)" % (label, len(no_audit), no_audit[0]))
    orphans = [t for t, rs in audited.items()
               if any(r.startswith("201") for r in rs) and t not in jobs]
    if orphans:
        bad("%s: %d job.create audit records of 201 without their job "
            "(e.g. %s)" % (label, len(orphans), orphans[0]))
    return len(jobs), not lost and not no_audit and not orphans


def kill_test(binary):
    rounds = int(os.environ.get("ROUNDS", "20"))
    tmp = tempfile.mkdtemp(prefix="cnlab-gc-")
    data = os.path.join(tmp, "d")
    d = Daemon(binary, data)
    try:
        d.start("--bootstrap-admin", "root")
        auth, proj = setup(d)
        acked_all = []
        inflight_rounds = 0
        good_rounds = 0
        for rnd in range(1, rounds + 1):
            if rnd > 1:
                d.start()
            subs = [Submitter(d, auth, proj, "%d-%d" % (rnd, w))
                    for w in range(WRITERS)]
            for s in subs:
                s.start()
            # Some acknowledgements first (or every submitter ended: a
            # failure, reported below), then a random moment.
            deadline = time.monotonic() + 120
            while sum(len(s.acked) for s in subs) < 64 and \
                    any(s.is_alive() for s in subs) and \
                    time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(random.uniform(0, 0.25))
            d.kill9()
            for s in subs:
                s.join(120)
            acked = [a for s in subs for a in s.acked]
            acked_all += acked
            others = [o for s in subs for o in s.other + [
                (503, b) for b in s.bodies_503]]
            if others:
                bad("round %d: answers other than 201 while cnlabd "
                    "lived: %s" % (rnd, others[:3]))
            inflight = sum(1 for s in subs if s.end in (
                "RemoteDisconnected", "ConnectionResetError",
                "BrokenPipeError", "IncompleteRead"))
            if inflight:
                inflight_rounds += 1
            if not acked:
                bad("round %d: nothing acknowledged before the kill" % rnd)
                continue
            n, good = db_check(data + "/cnlab.db", acked_all,
                               "round %d" % rnd)
            if good:
                good_rounds += 1
            print("     round %d: %d acknowledged, %d requests in flight "
                  "at the kill, %d job rows" % (rnd, len(acked), inflight,
                                                n), flush=True)
        if good_rounds == rounds:
            ok("%d kill -9 rounds of %d submitters: every acknowledged "
               "job present, none half there" % (rounds, WRITERS))
        if inflight_rounds:
            ok("%d of %d kills hit requests in flight"
               % (inflight_rounds, rounds))
        else:
            bad("no kill hit a request in flight")
        d.start()
        c = d.conn()
        st, doc = call(c, "GET", "/v1/audit/verify", None, auth)
        if st == 200:
            ok("audit chain verifies after %d kills: %s" % (rounds, doc))
        else:
            bad("audit verify: %d %s" % (st, doc))
        missing = 0
        for jid, key in acked_all:
            st, doc = call(c, "GET", "/v1/jobs/" + jid, None, auth)
            if st != 200 or doc.get("command") != "echo " + key:
                missing += 1
        if missing:
            bad("%d of %d acknowledged jobs not served after the restart"
                % (missing, len(acked_all)))
        else:
            ok("all %d acknowledged jobs served after the restart"
               % len(acked_all))
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def fault_test(binary):
    tmp = tempfile.mkdtemp(prefix="cnlab-gcf-")
    data = os.path.join(tmp, "d")
    fault = os.path.join(tmp, "fault")
    d = Daemon(binary, data, {"CNLAB_TEST_SYNC_FAULT": fault})
    try:
        d.start("--bootstrap-admin", "root")
        auth, proj = setup(d)
        s = Submitter(d, auth, proj, "before", limit=5)
        s.run()
        acked = list(s.acked)
        if len(acked) == 5:
            ok("healthy disk: 5 submissions answered 201")
        else:
            bad("healthy disk: %s %s" % (s.statuses, s.other[:2]))

        open(fault, "w").close()
        subs = [Submitter(d, auth, proj, "fault-%d" % w, limit=3)
                for w in range(WRITERS)]
        for t in subs:
            t.start()
        for t in subs:
            t.join(120)
        statuses = {}
        for t in subs:
            for k, v in t.statuses.items():
                statuses[k] = statuses.get(k, 0) + v
        bodies = [b for t in subs for b in t.bodies_503]
        if statuses == {503: 3 * WRITERS} and all(
                b and b.get("error", {}).get("code") == "unavailable"
                for b in bodies):
            ok("failing sync: all %d concurrent submissions answered 503 "
               "with a JSON error, none acknowledged" % (3 * WRITERS))
        else:
            bad("failing sync: answers %s (want only 503), e.g. %s"
                % (statuses, [t.other[:1] for t in subs if t.other][:2]))
        c = d.conn()
        st, doc = call(c, "GET", "/v1/projects/%s/jobs?limit=1000" % proj,
                       None, auth)
        if st == 503:
            ok("failing sync: a GET that could show what is not durable "
               "answers 503")
        else:
            bad("failing sync: GET of the job list answered %d (%s jobs)"
                % (st, len((doc or {}).get("items", []))))
        st, _ = call(c, "GET", "/healthz")
        if st == 200:
            ok("failing sync: /healthz still answers 200")
        else:
            bad("failing sync: /healthz answered %d" % st)
        log = open(d.err).read()
        if "durable sync failed" in log:
            ok("the failing sync is logged")
        else:
            bad("no log line names the failing sync: %s" % log[-500:])

        os.unlink(fault)
        s = Submitter(d, auth, proj, "after", limit=5)
        s.run()
        acked += s.acked
        if len(s.acked) == 5:
            ok("fault cleared: submissions answer 201 again")
        else:
            bad("fault cleared: %s %s" % (s.statuses, s.other[:2]))
        h = dict(auth)
        h["Idempotency-Key"] = "gc-fault-0-0"
        st, doc = call(c, "POST", "/v1/projects/%s/jobs" % proj,
                       {"command": "echo gc-fault-0-0", "gpu": "h100-25",
                        "priority": 0}, h)
        if st in (200, 201) and doc and doc.get("id"):
            ok("a refused request retried with its Idempotency-Key "
               "answers %d" % st)
            acked.append((doc["id"], "gc-fault-0-0"))
        else:
            bad("retry of a refused request: %d %s" % (st, doc))
        # Its first try was committed (only its sync failed): the retry
        # must answer that job, not make a second.
        st, doc = call(c, "GET", "/v1/projects/%s/jobs?limit=1000" % proj,
                       None, auth)
        same = [j["id"] for j in (doc or {}).get("items", [])
                if j.get("command") == "echo gc-fault-0-0"]
        if st == 200 and len(same) == 1:
            ok("the retry after a failed sync made no second job (one "
               "job of that key)")
        else:
            bad("after the retry of a failed sync: %d, jobs of that key "
                "%s" % (st, same))
        inputs_after_sync_fault(d, c, auth, proj, data, fault)
        d.kill9()
        n, good = db_check(data + "/cnlab.db", acked, "after kill -9")
        if good:
            ok("after kill -9: all %d acknowledged jobs there, none half "
               "there (%d rows)" % (len(acked), n))
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def queue_depth(c):
    """The pending workloads the controller holds in memory (/metrics)."""
    c.request("GET", "/metrics")
    r = c.getresponse()
    text = r.read().decode()
    return sum(int(float(m)) for m in re.findall(
        r"^cnlab_queue_depth\{[^}]*\} (\S+)$", text, re.M))


def view(c, auth, proj):
    """The jobs as the API shows them, every page: {id: state}."""
    jobs, after = {}, ""
    while True:
        st, doc = call(c, "GET", "/v1/projects/%s/jobs?limit=1000%s"
                       % (proj, "&after=" + after if after else ""),
                       None, auth)
        if st != 200:
            die("job list: %d %s" % (st, doc))
        jobs.update({j["id"]: j["state"] for j in doc["items"]})
        if not doc.get("next"):
            return jobs
        after = doc["next"]


def wait_decided(c, auth, job):
    """Until the scheduler's first decision on @job is recorded (a commit
    of cnlabd's own)."""
    wait_for("the scheduler's decision on %s" % job, lambda: call(
        c, "GET", "/v1/jobs/%s/decisions" % job, None, auth)[1].get(
            "items"))


def strangers(path):
    """Scheduler decisions (audit records sched.*) naming a job the store
    does not have: what a job alive only in memory leaves."""
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute(
            "SELECT DISTINCT target FROM audit WHERE action LIKE "
            "'sched.%' AND target NOT IN (SELECT id FROM jobs)")]
    finally:
        db.close()


def commit_test(binary):
    tmp = tempfile.mkdtemp(prefix="cnlab-gcc-")
    data = os.path.join(tmp, "d")
    fault = os.path.join(tmp, "fault")
    d = Daemon(binary, data, {"CNLAB_TEST_COMMIT_FAULT": fault})
    try:
        d.start("--bootstrap-admin", "root", "--cycle-interval", "50ms")
        auth, proj = setup(d)
        c = d.conn()

        def submit(key):
            h = dict(auth)
            h["Idempotency-Key"] = key
            return call(c, "POST", "/v1/projects/%s/jobs" % proj,
                        {"command": "echo " + key, "gpu": "h100-25"}, h)

        st, doc = submit("cf-a")
        if st != 201:
            die("healthy submission: %d %s" % (st, doc))
        a = doc["id"]
        if queue_depth(c) != 1:
            die("one pending job, queue depth %d" % queue_depth(c))
        # The job's first decision is a commit of the scheduling loop's
        # own: wait for it, so that the faults below, each aimed at one
        # request's commit, cannot land on it instead.
        wait_decided(c, auth, a)

        # The fault takes the next commit of any thread: on a loaded
        # machine a commit of cnlabd's own (a scheduling decision) can
        # come first.  Then the submission is simply acknowledged (201):
        # it is kept, counted, and the fault is armed again.
        acked = [a]
        for attempt in range(5):
            open(fault, "w").close()
            failed_key = "cf-b%d" % attempt
            st, doc = submit(failed_key)
            if os.path.exists(fault):
                die("the commit fault was not used (cnlabd not a test "
                    "build?)")
            if st != 201 or not doc or "id" not in doc:
                break
            acked.append(doc["id"])
            print("note the fault hit another commit of cnlabd's; "
                  "trying again")
            # The scheduler's first decision on the acknowledged job
            # is a commit too: let it land before the next fault.
            j = doc["id"]
            wait_decided(c, auth, j)
        if st == 507 and doc and doc.get("error"):
            ok("a submission whose commit fails answers 507 with a JSON "
               "error (%s)" % doc["error"].get("code"))
        else:
            die("a submission whose commit failed answered %d %s (want "
                "507, 5 times over)" % (st, doc))
        # Let the scheduler run cycles: a job left in its memory would
        # get a decision recorded under its id.
        time.sleep(1.0)
        jobs, depth = view(c, auth, proj), queue_depth(c)
        if sorted(jobs) == sorted(acked):
            ok("after the failed submission the API shows only the jobs "
               "that were acknowledged")
        else:
            bad("after the failed submission the API shows %s (want %s)"
                % (jobs, acked))
        if depth == len(acked):
            ok("after the failed submission the controller holds the "
               "acknowledged pending jobs in memory (queue depth %d)"
               % depth)
        else:
            bad("after the failed submission the controller's queue "
                "depth is %d, the store has %d jobs: memory kept the "
                "failed job" % (depth, len(acked)))
        for extra in acked[1:]:
            st, doc = call(c, "POST", "/v1/jobs/%s/cancel" % extra, {},
                           auth)
            if st != 200:
                die("cancel of %s: %d %s" % (extra, st, doc))
        lost = strangers(data + "/cnlab.db")
        if not lost:
            ok("the scheduler decided nothing for a job the store lacks")
        else:
            bad("the scheduler decided for jobs the store lacks: %s"
                % lost)

        # As above, the fault may take a commit of cnlabd's own first (a
        # scheduling decision, on a loaded machine): then the cancel is
        # simply done (200); that job joins the others set aside, and a
        # new one is tried.
        for attempt in range(5):
            open(fault, "w").close()
            st, doc = call(c, "POST", "/v1/jobs/%s/cancel" % a, {}, auth)
            if st != 200 or os.path.exists(fault):
                break
            acked.append(a)
            st2, doc2 = submit("cf-a%d" % attempt)
            if st2 != 201:
                die("a new job to cancel: %d %s" % (st2, doc2))
            a = doc2["id"]
            wait_decided(c, auth, a)
            print("note the fault hit another commit of cnlabd's; "
                  "trying again with a new job")
        if st == 507 and not os.path.exists(fault):
            ok("a cancel whose commit fails answers 507")
        else:
            bad("a cancel whose commit failed answered %d %s" % (st, doc))
        jobs, depth = view(c, auth, proj), queue_depth(c)
        jobs = {k: v for k, v in jobs.items() if k not in acked[1:]}
        if jobs == {a: "pending"} and depth == 1:
            ok("after the failed cancel the job is pending, in the store "
               "and in memory")
        else:
            bad("after the failed cancel: jobs %s, queue depth %d"
                % (jobs, depth))
        st, doc = call(c, "POST", "/v1/jobs/%s/cancel" % a, {}, auth)
        if st == 200 and doc.get("state") == "cancelled" and \
                queue_depth(c) == 0:
            ok("the cancel, tried again, cancels the job (in memory too)")
        else:
            bad("the cancel tried again: %d %s, queue depth %d"
                % (st, doc, queue_depth(c)))

        st, doc = submit(failed_key)
        if st == 201 and doc.get("id") and doc["id"] not in acked:
            ok("the failed submission retried with its Idempotency-Key "
               "answers 201")
            b = doc["id"]
        else:
            die("retry of the failed submission: %d %s" % (st, doc))
        st, doc = submit(failed_key)
        if st in (200, 201) and doc.get("id") == b:
            ok("and a second retry answers the same job")
        else:
            bad("second retry: %d %s (want %s)" % (st, doc, b))
        before, depth = view(c, auth, proj), queue_depth(c)
        mine = {k: v for k, v in before.items() if k not in acked[1:]}
        if mine == {a: "cancelled", b: "pending"} and depth == 1:
            ok("two jobs in the store, one pending, as in memory")
        else:
            bad("after the retries: jobs %s, queue depth %d"
                % (before, depth))

        inputs_after_fault(d, c, auth, proj, data, fault)
        before = view(c, auth, proj)
        depth_before = queue_depth(c)

        d.kill9()
        d.start()
        c = d.conn()
        after, depth = view(c, auth, proj), queue_depth(c)
        if after == before and depth == depth_before:
            ok("after kill -9 and a restart: the same jobs, states and "
               "queue depth")
        else:
            bad("after the restart: jobs %s (before %s), queue depth %d"
                % (after, before, depth))
        lost = strangers(data + "/cnlab.db")
        if lost:
            bad("decisions for jobs the store lacks: %s" % lost)
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def upload(d, auth, proj, name, data):
    c = d.conn()
    h = dict(auth)
    h["X-Content-SHA256"] = hashlib.sha256(data).hexdigest()
    c.request("PUT", "/v1/projects/%s/uploads?path=%s" % (proj, name),
              body=data, headers=h)
    r = c.getresponse()
    doc = json.loads(r.read() or b"null")
    c.close()
    if r.status != 201:
        die("upload %s: %d %s" % (name, r.status, doc))
    return doc["id"]


def files_holding(root, data):
    """The regular files under @root whose content is @data: (path,
    link count) each."""
    out = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            try:
                st = os.lstat(p)
                if st.st_size == len(data) and open(p, "rb").read() == data:
                    out.append((p, st.st_nlink))
            except OSError:
                pass
    return out


def inputs_after_fault(d, c, auth, proj, data, fault):
    """A submission with an input whose commit fails keeps its upload (a
    retry with the same Idempotency-Key makes the job with the input);
    the upload's own file goes only once the job is durable."""
    blob = ("input %f" % random.random()).encode()
    for attempt in range(5):
        upl = upload(d, auth, proj, "in.txt", blob)
        key = "cf-in%d" % attempt
        body = {"command": "cat in.txt", "gpu": "h100-25", "inputs": [upl]}
        open(fault, "w").close()
        h = dict(auth)
        h["Idempotency-Key"] = key
        st, doc = call(c, "POST", "/v1/projects/%s/jobs" % proj, body, h)
        if os.path.exists(fault):
            die("the commit fault was not used")
        if st != 201:
            break
        j = doc["id"]
        wait_decided(c, auth, j)
        print("note the fault hit another commit of cnlabd's; trying "
              "again with a new upload")
    if st != 507:
        die("a submission with an input whose commit failed answered "
            "%d %s (want 507)" % (st, doc))
    held = files_holding(data, blob)
    if len(held) == 1 and held[0][1] == 1:
        ok("after the failed submission the upload's file is kept")
    else:
        bad("after the failed submission, files with the upload's "
            "bytes: %s (want the upload's alone)" % held)
    st, doc = call(c, "POST", "/v1/projects/%s/jobs" % proj, body, h)
    if st == 201 and doc.get("id"):
        ok("the failed submission with an input, retried with its "
           "Idempotency-Key, answers 201")
    else:
        bad("the retry of the submission with an input: %d %s"
            % (st, doc))
        return
    held = files_holding(data, blob)
    if len(held) == 1 and held[0][1] == 1 and doc["id"] in held[0][0]:
        ok("the job holds its input; the upload's own file is gone")
    else:
        bad("after the retry, files with the upload's bytes: %s (want "
            "one, in %s's folder)" % (held, doc["id"]))


def inputs_after_sync_fault(d, c, auth, proj, data, fault):
    """A submission with an input whose commit stands but whose sync
    fails (503) is a job with its input once the disk syncs again: its
    retry answers that job, whose folder holds the input."""
    blob = ("synced input %f" % random.random()).encode()
    upl = upload(d, auth, proj, "in.txt", blob)
    body = {"command": "cat in.txt", "gpu": "h100-25", "inputs": [upl]}
    h = dict(auth)
    h["Idempotency-Key"] = "gc-fault-in"
    open(fault, "w").close()
    st, doc = call(c, "POST", "/v1/projects/%s/jobs" % proj, body, h)
    os.unlink(fault)
    if st != 503:
        bad("a submission with an input whose sync failed answered %d %s "
            "(want 503)" % (st, doc))
        return
    st, doc = call(c, "POST", "/v1/projects/%s/jobs" % proj, body, h)
    held = files_holding(data, blob)
    if st in (200, 201) and doc and doc.get("id") and len(held) == 1 and \
            held[0][1] == 1 and doc["id"] in held[0][0]:
        ok("a submission with an input whose sync failed, retried, "
           "answers its job, which holds the input (the upload's own "
           "file gone)")
    else:
        bad("the retry of a submission with an input whose sync failed: "
            "%d %s; files with the input's bytes: %s" % (st, doc, held))


def store_jobs(path):
    """{id: (state, command)} as the database has them."""
    db = sqlite3.connect(path)
    try:
        return {r[0]: (r[1], r[2]) for r in db.execute(
            "SELECT id, state, command FROM jobs")}
    finally:
        db.close()


def batch_test(binary):
    tmp = tempfile.mkdtemp(prefix="cnlab-gcb-")
    data = os.path.join(tmp, "d")
    db = data + "/cnlab.db"
    fault = os.path.join(tmp, "fault")
    d = Daemon(binary, data, {"CNLAB_TEST_BATCH_FAULT": fault})
    try:
        d.start("--bootstrap-admin", "root", "--cycle-interval", "50ms")
        auth, proj = setup(d)
        stop = threading.Event()
        subs = [Submitter(d, auth, proj, "b%d" % w, stop=stop)
                for w in range(WRITERS)]
        for s in subs:
            s.start()

        def acked():
            return sum(len(s.acked) for s in subs)

        wait_for("100 acknowledged submissions", lambda: acked() >= 100)
        open(fault, "w").close()
        # Only a batch's commit takes the fault: 64 submitters make
        # batches all the time.
        wait_for("a batch to take the fault",
                 lambda: not os.path.exists(fault), secs=120)
        n = acked()
        wait_for("more acknowledged submissions after it",
                 lambda: acked() >= n + 64)
        stop.set()
        for s in subs:
            s.join(120)
        others = [o for s in subs for o in s.other]
        refused = [o for o in others if o[0] == 507]
        if refused and len(refused) == len(others) and all(
                doc and doc.get("error", {}).get("code") ==
                "insufficient_storage" and doc["error"].get("path") == db
                for _, doc in refused):
            ok("the lost batch's %d submissions answered 507 naming the "
               "database (%d acknowledged)" % (len(refused), acked()))
        else:
            bad("answers other than 201: %s (want only 507 naming %s, "
                "at least one)" % (others[:3], db))
        if any(s.bodies_503 for s in subs):
            bad("503s: %s" % [b for s in subs for b in s.bodies_503][:3])
        keys_acked = [a for s in subs for a in s.acked]
        n_rows, good = db_check(db, keys_acked, "after the lost batch")
        if good:
            ok("every acknowledged job is in the store (%d rows)" % n_rows)
        c = d.conn()
        time.sleep(1.0)  # cycles: a job alive only in memory shows
        stored = store_jobs(db)
        shown = view(c, auth, proj)
        depth = queue_depth(c)
        pending = sum(1 for st, _ in stored.values() if st == "pending")
        if sorted(shown) == sorted(stored) and depth == pending:
            ok("memory follows the store: the API shows its %d jobs, the "
               "queue depth is its %d pending" % (len(stored), pending))
        else:
            bad("memory and store differ: API %d jobs, store %d; queue "
                "depth %d, pending in the store %d"
                % (len(shown), len(stored), depth, pending))
        st, dash = call(c, "GET", "/v1/dashboard", None, auth)
        counts = (dash or {}).get("queues", {}).get("pending_counts", {})
        if st == 200 and sum(counts.values()) == pending:
            ok("the dashboard counts the store's %d pending jobs" % pending)
        else:
            bad("the dashboard after the lost batch: %d, pending counts "
                "%s (the store has %d pending)" % (st, counts, pending))
        lost = strangers(db)
        if lost:
            bad("the scheduler decided for jobs the store lacks: %s"
                % lost[:3])
        else:
            ok("the scheduler decided nothing for a job the store lacks")
        failed = [k for s in subs for k in s.failed_keys]
        cmds = {cmd for _, cmd in stored.values()}
        kept = [k for k in failed if "echo " + k in cmds]
        if kept:
            bad("refused submissions whose jobs the store has: %s"
                % kept[:3])
        else:
            ok("none of the %d refused submissions left a job (only the "
               "lost batch was refused)" % len(failed))
        retry_bad = []
        for key in failed:
            h = dict(auth)
            h["Idempotency-Key"] = key
            st, doc = call(c, "POST", "/v1/projects/%s/jobs" % proj,
                           {"command": "echo %s" % key, "gpu": "h100-25",
                            "priority": 0}, h)
            if st not in (200, 201):
                retry_bad.append((key, st, doc))
        stored = store_jobs(db)
        per_key = {}
        for _, cmd in stored.values():
            per_key[cmd] = per_key.get(cmd, 0) + 1
        twice = [k for k in failed if per_key.get("echo " + k) != 1]
        if not retry_bad and not twice:
            ok("each refused submission, retried with its "
               "Idempotency-Key, made exactly one job")
        else:
            bad("retries: %s; keys without exactly one job: %s"
                % (retry_bad[:3], twice[:3]))
        before = view(c, auth, proj)
        d.kill9()
        d.start()
        c = d.conn()
        after, depth = view(c, auth, proj), queue_depth(c)
        if after == before and depth == len(before):
            ok("after kill -9 and a restart: the same %d jobs"
               % len(after))
        else:
            bad("after the restart: %d jobs (before %d), queue depth %d"
                % (len(after), len(before), depth))
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    tests = {"kill": kill_test, "fault": fault_test, "commit": commit_test,
             "batch": batch_test}
    if len(sys.argv) != 3 or sys.argv[1] not in tests:
        print("usage: group_commit.py kill|fault|commit|batch CNLABD",
              file=sys.stderr)
        sys.exit(2)
    tests[sys.argv[1]](sys.argv[2])
    sys.exit(status())


if __name__ == "__main__":
    main()
