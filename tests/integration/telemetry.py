#!/usr/bin/env python3
"""telemetry.py - traces and pushed logs, end to end, over loopback.

Usage: telemetry.py CNLAB CNLABD

A loopback collector (otel_collector.py) stands for an OpenTelemetry
collector and Loki; cnlabd --all-in-one has otlp_endpoint and loki_url
pointing at it (its embedded agent inherits both).  Then:

  - `cnlab run` of a job (OTEL_EXPORTER_OTLP_ENDPOINT set: a sampled
    trace): the CLI's span, cnlabd's request span, the four submission
    stages, the cycle's cluster and slice stages, the agent's launch and
    its steps, and the workload's span share one traceId and chain by
    parentSpanId (CLI -> request -> stages; the cycle's stages and the
    agent's spans -> the job's context, the request span); every child
    starts no earlier than its parent; the workload span has the exit
    code.
  - Loki: the job's output lines in a stream labelled source=workload,
    job, project and node; cnlabd's and the agent's own log lines in
    streams of their own; output that tries to forge labels or break the
    JSON (quotes, braces, newlines, invalid UTF-8) stays a value.
  - a malformed traceparent (bad version, upper case, zero ids, wrong
    length) gets the normal answer and a fresh trace; a valid one is
    followed.
  - a job submitted with a traceparent while the only node is drained,
    cnlabd restarted before it is placed, the node put back in service:
    the job's cluster and slice stages, the agent's launch and the
    workload span are in the submit's trace, children of its request span.
  - the collector hanging, then down: submissions still succeed, the
    CLI still exits 0, and the dropped spans show in /metrics.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from otel_collector import Collector  # noqa: E402
from testlib import bad, die, ok, status, wait_for  # noqa: E402

cnlab, cnlabd = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="cnl-telemetry-")
coll = Collector().start()
proc = None


def cleanup():
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    shutil.rmtree(tmp, ignore_errors=True)


def http(method, url, body=None, headers=None):
    rq = urllib.request.Request(url, method=method,
                                data=json.dumps(body).encode()
                                if body is not None else None,
                                headers=headers or {})
    if body is not None:
        rq.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(rq, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


try:
    env = dict(os.environ, HOME=tmp + "/home",
               CNLAB_OTLP_ENDPOINT=coll.url(), CNLAB_LOKI_URL=coll.url())
    for k in ("CNLAB_JWT_SECRET", "CNLAB_ADMIN_PASSWORD",
              "OTEL_EXPORTER_OTLP_ENDPOINT"):
        env.pop(k, None)
    out = open(tmp + "/out", "w")
    proc = subprocess.Popen([cnlabd, "--all-in-one", "--data-dir",
                             tmp + "/data", "--listen", "127.0.0.1:0",
                             "--gpus", "fake:2xH100-80GB-SXM"],
                            stdout=out, stderr=open(tmp + "/err", "w"),
                            env=env)

    def started():
        m = re.search(r"CNLab is running at (\S+)",
                      open(tmp + "/out").read())
        return m and m.group(1)
    url = wait_for("cnlabd to start", started, 60)
    pw = open(tmp + "/data/admin.password").read().strip()
    st, b = http("POST", url + "/v1/auth/login",
                 {"user": "admin", "password": pw})
    tok = json.loads(b)["token"]
    auth = {"Authorization": "Bearer " + tok}
    wait_for("the embedded agent",
             lambda: json.loads(http("GET", url + "/v1/nodes",
                                     headers=auth)[1])["items"], 60)
    node = json.loads(http("GET", url + "/v1/nodes",
                           headers=auth)[1])["items"][0]

    cenv = dict(env, CNLAB_SERVER=url, CNLAB_TOKEN=tok,
                OTEL_EXPORTER_OTLP_ENDPOINT=coll.url())

    def run(cmd, extra=None):
        """cnlab run of a script whose body is @cmd."""
        script = "%s/job%d.sh" % (tmp, len(os.listdir(tmp)))
        with open(script, "w") as f:
            f.write("#!/bin/sh\n" + cmd + "\n")
        os.chmod(script, 0o755)
        return subprocess.run([cnlab, "run", script, "--gpu", "h100-25",
                               "--project", "default"],
                              env=dict(cenv, **(extra or {})),
                              capture_output=True, text=True,
                              errors="replace", timeout=300)

    # ---- one job, traced from the CLI ------------------------------------
    evil = ('hello-otel "}],"stream":{"job":"evil"},"values":[["1","x"]]} '
            '\\n {job="evil"}')
    r = run("printf '%s\\n' 'hello-otel line one'\n"
            "printf '%s\\n' '" + evil + "'\n"
            "printf 'bad-utf8 \\377\\376 end\\n'")
    if r.returncode != 0:
        die("cnlab run failed: %d %s %s" % (r.returncode, r.stdout,
                                             r.stderr))
    ok("cnlab run of a job succeeded with tracing on")

    def spans_named(name, svc=None):
        with coll.lock:
            return [s for (v, s) in coll.spans
                    if s["name"] == name and (svc is None or v == svc)]

    def attr(s, key):
        for a in s.get("attributes", []):
            if a["key"] == key:
                v = a["value"]
                return v.get("stringValue", v.get("intValue"))
        return None

    def cli_span():
        ss = spans_named("cnlab run", "cnlab")
        return ss[-1] if ss else None
    cli = wait_for("the CLI's span", cli_span, 30)
    tid = cli["traceId"]
    ok("the CLI exported its span (service cnlab)") \
        if re.fullmatch("[0-9a-f]{32}", tid) and "parentSpanId" not in cli \
        and attr(cli, "process.exit.code") == "0" \
        else bad("CLI span: %s" % cli)

    def in_trace():
        with coll.lock:
            return [(v, s) for (v, s) in coll.spans if s["traceId"] == tid]

    def has_workload():
        return [s for (v, s) in in_trace() if s["name"] == "workload"]
    wl = wait_for("the workload span", has_workload, 60)[0]
    spans = in_trace()
    byid = {s["spanId"]: (v, s) for (v, s) in spans}
    names = sorted(s["name"] for (v, s) in spans)
    submit = [s for (v, s) in spans if v == "cnlabd" and
              s["name"] == "POST /v1/projects/{project}/jobs"]
    if len(submit) != 1:
        die("one submit request span in the trace: %s" % names)
    submit = submit[0]
    ok("cnlabd's request span is a child of the CLI's") \
        if submit.get("parentSpanId") == cli["spanId"] and \
        submit["kind"] == 2 and \
        attr(submit, "http.response.status_code") == "201" \
        else bad("submit span: %s" % submit)
    job = attr(wl, "cnlab.workload")
    for stage in ("auth", "quota", "queue", "admission", "cluster",
                  "slice"):
        ss = [s for (v, s) in spans if s["name"] == "sched." + stage and
              attr(s, "cnlab.workload") == job]
        if len(ss) == 1 and ss[0].get("parentSpanId") == submit["spanId"] \
                and attr(ss[0], "cnlab.decision"):
            ok("stage %s: a child of the job's context, with its "
               "decision" % stage)
        else:
            bad("stage %s: %s (names %s)" % (stage, ss, names))
    launch = [s for (v, s) in spans if s["name"] == "agent.launch"]
    if len(launch) == 1 and launch[0].get("parentSpanId") == \
            submit["spanId"] and byid[launch[0]["spanId"]][0] == \
            "cnlab-agent":
        ok("the agent's launch span is a child of the job's context")
    else:
        bad("launch: %s" % launch)
    steps = [s for (v, s) in spans if s["name"].startswith("agent.") and
             s["name"] != "agent.launch"]
    if steps and launch and all(s.get("parentSpanId") ==
                                launch[0]["spanId"] for s in steps) and \
            {"agent.container.start", "agent.process.start"} & \
            {s["name"] for s in steps}:
        ok("launch steps %s are children of the launch" %
           sorted(s["name"] for s in steps))
    else:
        bad("steps: %s" % steps)
    ok("the workload span: child of the job's context, exit code 0") \
        if wl.get("parentSpanId") == submit["spanId"] and \
        attr(wl, "process.exit.code") == "0" \
        else bad("workload: %s" % wl)
    order_ok = True
    for (v, s) in spans:
        p = byid.get(s.get("parentSpanId"))
        if int(s["startTimeUnixNano"]) > int(s["endTimeUnixNano"]) or \
                (p and int(s["startTimeUnixNano"]) <
                 int(p[1]["startTimeUnixNano"])):
            order_ok = False
            bad("span %s starts before its parent %s" %
                (s["name"], p[1]["name"] if p else "-"))
        if s.get("parentSpanId") and not p:
            order_ok = False
            bad("span %s has a parent outside the trace" % s["name"])
    slice_ = [s for (v, s) in spans if s["name"] == "sched.slice"]
    if slice_ and launch and int(slice_[0]["endTimeUnixNano"]) <= \
            int(launch[0]["startTimeUnixNano"]) <= \
            int(wl["startTimeUnixNano"]) <= int(wl["endTimeUnixNano"]):
        ok("placement, launch and the workload's life are in order")
    else:
        bad("order: slice %s launch %s workload %s" % (slice_, launch, wl))
    if order_ok:
        ok("every span of the trace (%d) hangs under one root, in time "
           "order" % len(spans))

    # ---- Loki --------------------------------------------------------------
    def out_streams():
        with coll.lock:
            return [s for s in coll.streams
                    if s["stream"].get("source") == "workload" and
                    s["stream"].get("job") == job]

    def output_lines():
        return [v[1] for s in out_streams() for v in s["values"]]
    wait_for("the job's output in Loki",
             lambda: any("bad-utf8" in x for x in output_lines()), 30)
    lines = output_lines()
    st0 = out_streams()[0]["stream"]
    ok("the job's output went to Loki, labelled job, project, node") \
        if "hello-otel line one" in lines and \
        st0.get("project") and st0.get("node") in (node["name"],
                                                    node["id"]) \
        else bad("output streams: %s" % out_streams())
    with coll.lock:
        keys = {k for s in coll.streams for k in s["stream"]}
        jobs = {s["stream"].get("job") for s in coll.streams}
        sources = {s["stream"].get("source") for s in coll.streams}
    ok("labels are only source, job, project, node") \
        if keys <= {"source", "job", "project", "node"} \
        else bad("labels: %s" % keys)
    ok("tenant output cannot forge a label or a stream") \
        if "evil" not in jobs and any(
            'stream":{"job":"evil"}' in x for x in lines) \
        else bad("jobs %s lines %s" % (jobs, lines))
    ok("invalid UTF-8 in output arrives as U+FFFD") \
        if any("bad-utf8 \ufffd\ufffd end" == x for x in lines) \
        else bad("lines: %s" % lines)
    wait_for("the agent's log lines in Loki", lambda: any(
        s["stream"].get("source") == "agent" and
        s["stream"].get("node") for s in list(coll.streams)), 30)
    with coll.lock:
        plat = [v[1] for s in coll.streams
                if s["stream"].get("source") == "cnlabd"
                for v in s["values"]]
    ok("cnlabd's and the agent's own log lines are pushed") \
        if any("cnlabd started" in x for x in plat) \
        else bad("platform lines: %s" % plat[:5])
    ts_ok = all(re.fullmatch("[0-9]{19}", v[0])
                for s in list(coll.streams) for v in s["values"])
    ok("timestamps are Unix nanoseconds as strings") if ts_ok \
        else bad("timestamps")

    # ---- traceparent from outside ------------------------------------------
    malformed = [
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
        "garbage",
    ]
    for tp in malformed:
        code = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
             "-H", "Authorization: Bearer " + tok, "-H", "traceparent: " +
             tp, url + "/v1/auth/whoami"], capture_output=True,
            text=True, timeout=60).stdout
        if code != "200":
            bad("malformed traceparent %r: HTTP %s" % (tp, code))

    def fresh():
        return [s for s in spans_named("GET /v1/auth/whoami", "cnlabd")
                if attr(s, "cnlab.traceparent_invalid") == "true"]
    fr = wait_for("spans of the malformed requests",
                  lambda: len(fresh()) >= len(malformed) and fresh(), 30)
    ok("a malformed traceparent gets 200 and a fresh root trace") \
        if all("parentSpanId" not in s and
               s["traceId"] != "0af7651916cd43dd8448eb211c80319c"
               for s in fr) and len({s["traceId"] for s in fr}) == len(fr) \
        else bad("fresh traces: %s" % fr)
    valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    http("GET", url + "/v1/auth/whoami",
         headers=dict(auth, traceparent=valid))
    f = wait_for("the span of a valid traceparent", lambda: [
        s for s in spans_named("GET /v1/auth/whoami", "cnlabd")
        if s["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736"], 30)
    ok("a valid traceparent is followed") \
        if f[0].get("parentSpanId") == "00f067aa0ba902b7" \
        else bad("followed: %s" % f)
    unsampled = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    http("GET", url + "/v1/auth/whoami",
         headers=dict(auth, traceparent=unsampled))

    # ---- a pending job's context survives a restart of cnlabd -------------
    # The only node is drained, so the job stays pending; cnlabd restarts
    # (its embedded agent with it) before the job is placed, then the node
    # is put back in service and the job runs.
    def node_state(state):
        st, b = http("PATCH", url + "/v1/nodes/" + node["id"],
                     {"state": state}, auth)
        if st != 200 or json.loads(b)["state"] != state:
            die("node %s: %d %s" % (state, st, b))
    node_state("draining")
    rtid = "6cf92f3577b34da6a3ce929d0e0e4736"
    rparent = "10f067aa0ba902b7"
    proj = [p for p in json.loads(http("GET", url + "/v1/projects",
                                       headers=auth)[1])["items"]
            if p["name"] == "default"][0]["id"]
    st, b = http("POST", url + "/v1/projects/" + proj + "/jobs",
                 {"command": "echo after-restart", "gpu": "h100-25"},
                 dict(auth, traceparent="00-%s-%s-01" % (rtid, rparent)))
    if st != 201:
        die("submit to a drained node: %d %s" % (st, b))
    rjob = json.loads(b)["id"]

    def rspans(name):
        with coll.lock:
            return [s for (v, s) in coll.spans if s["name"] == name and
                    attr(s, "cnlab.workload") == rjob]
    rsub = wait_for("the submit span of the job before the restart",
                    lambda: [s for s in spans_named(
                        "POST /v1/projects/{project}/jobs", "cnlabd")
                        if s["traceId"] == rtid], 30)[0]
    wait_for("the job's admission stage",
             lambda: rspans("sched.admission"), 30)
    st, b = http("GET", url + "/v1/jobs/" + rjob, headers=auth)
    ok("the job is pending on the drained node before the restart") \
        if st == 200 and json.loads(b)["state"] == "pending" and \
        not [s for s in rspans("sched.slice")
             if attr(s, "cnlab.decision").startswith("placed")] \
        else bad("before restart: %d %s" % (st, b))
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    t_restart = time.time_ns()
    out = open(tmp + "/out2", "w")
    proc = subprocess.Popen([cnlabd, "--all-in-one", "--data-dir",
                             tmp + "/data", "--listen", "127.0.0.1:0",
                             "--gpus", "fake:2xH100-80GB-SXM"],
                            stdout=out, stderr=open(tmp + "/err2", "w"),
                            env=env)

    def restarted():
        m = re.search(r"CNLab is running at (\S+)",
                      open(tmp + "/out2").read())
        return m and m.group(1)
    url = wait_for("cnlabd to start again", restarted, 60)
    st, b = http("POST", url + "/v1/auth/login",
                 {"user": "admin", "password": pw})
    tok = json.loads(b)["token"]
    auth = {"Authorization": "Bearer " + tok}
    cenv = dict(cenv, CNLAB_SERVER=url, CNLAB_TOKEN=tok)
    wait_for("the embedded agent after the restart",
             lambda: json.loads(http("GET", url + "/v1/nodes",
                                     headers=auth)[1])["items"], 60)
    st, b = http("GET", url + "/v1/jobs/" + rjob, headers=auth)
    if st != 200 or json.loads(b)["state"] != "pending":
        bad("after the restart the job should still be pending: %d %s" %
            (st, b))
    node_state("up")
    rwl = wait_for("the workload span of the job placed after the "
                   "restart", lambda: rspans("workload"), 120)[0]
    for name in ("sched.cluster", "sched.slice", "agent.launch"):
        ss = [s for s in rspans(name)
              if int(s["startTimeUnixNano"]) > t_restart]
        if len(ss) == 1 and ss[0]["traceId"] == rtid and \
                ss[0].get("parentSpanId") == rsub["spanId"]:
            ok("after a restart, %s is still a child of the submit's "
               "span, in its trace" % name)
        else:
            bad("after a restart, %s: %s (submit span %s)" %
                (name, ss, rsub["spanId"]))
    ok("after a restart, the workload span keeps the submit's trace") \
        if rwl["traceId"] == rtid and \
        rwl.get("parentSpanId") == rsub["spanId"] and \
        rsub.get("parentSpanId") == rparent and \
        attr(rwl, "process.exit.code") == "0" \
        else bad("workload after restart: %s (submit %s)" % (rwl, rsub))

    # ---- a collector that hangs, then one that is down ----------------------
    def dropped():
        b = http("GET", url + "/metrics")[1].decode()
        m = re.search(r"^cnlab_otlp_spans_dropped_total (\d+)$", b, re.M)
        return int(m.group(1)) if m else -1
    d0 = dropped()
    ok("/metrics has cnlab_otlp_spans_dropped_total") if d0 >= 0 \
        else bad("no dropped counter in /metrics")
    coll.mode = "hang"
    r = run("echo during-hang")
    ok("a job submitted while the collector hangs runs; the CLI exits 0") \
        if r.returncode == 0 and "during-hang" in r.stdout \
        else bad("during hang: %d %s %s" % (r.returncode, r.stdout,
                                             r.stderr))
    coll.stop()
    r = run("echo during-down")
    ok("a job submitted while the collector is down runs; the CLI exits 0")\
        if r.returncode == 0 and "during-down" in r.stdout \
        else bad("during down: %d %s %s" % (r.returncode, r.stdout,
                                             r.stderr))
    wait_for("dropped spans in /metrics", lambda: dropped() > d0, 120,
             0.5)
    ok("spans the collector never took are counted as dropped")
    with coll.lock:
        ok("the collector saw only well-formed posts") if not coll.errors \
            else bad("protocol errors: %s" % coll.errors)
        ok("nothing of the unsampled request was recorded") \
            if not [s for (v, s) in coll.spans if s["traceId"] ==
                    "5bf92f3577b34da6a3ce929d0e0e4736"] \
            else bad("an unsampled trace was exported")
finally:
    cleanup()
sys.exit(status())
