#!/usr/bin/env python3
"""fake_ec2.py - a loopback EC2 for the burst's end-to-end test.

It serves the EC2 Query API calls cnlabd makes (RunInstances,
DescribeInstances, TerminateInstances, DescribeSpotPriceHistory) and is
as strict as EC2 where it matters:

  - every request must carry a valid Signature Version 4 signature made
    with the account's secret (checked by signing what arrived), else 403
    SignatureDoesNotMatch;
  - a RunInstances with a ClientToken seen before returns the instances
    of that launch, launching nothing;
  - an "instance" is the machine image booting: its user data (base64,
    as EC2 takes it) is run by /bin/sh in a process group of its own,
    with the hardware of its type in the environment (CNLAB_AGENT_GPUS:
    fake GPUs, CNLAB_AGENT_WORK_DIR), so that the cnlab-agent it starts
    really joins cnlabd with the join token it was given; terminating it
    kills that process group.

The test steers it through files in its state directory:

  fail-run    lines "CODE STATUS [market]" answered to the next
              RunInstances calls, one line each (e.g.
              "InsufficientInstanceCapacity 500 spot"; a market limits a
              line to launches in it); "drop 0" launches and closes the
              connection unanswered (the answer lost), "hang N" launches
              and closes it after N seconds
  fail-all    while present, every call gets "Unavailable 503"
  interrupt   instance ids, one per line: described as interrupted
              (spot), their machine gone

and reads what happened in calls.log (one JSON object per request) and
instances.json (every instance, its state, market and type).

Usage: fake_ec2.py STATE_DIR ACCESS_KEY SECRET PORT_FILE
"""
import base64
import datetime
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_machine

STATE, AKID, SECRET, PORT_FILE = sys.argv[1:5]
GPUS = {
    "p5.48xlarge": "fake:8xH100-80GB-SXM",
    "p4d.24xlarge": "fake:8xA100-40GB",
    "g6.xlarge": "fake:1xL4",
    "g6.12xlarge": "fake:4xL4",
}
SPOT = {"p5.48xlarge": "31.4500", "g6.xlarge": "0.3100", "g6.12xlarge": "1.9000"}
lock = threading.Lock()
instances = {}  # id -> dict
tokens = {}  # client token -> [ids]
seq = [0]


def log(entry):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def hmac256(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sig_ok(handler, body):
    auth = handler.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return False
    parts = dict(p.strip().split("=", 1) for p in auth[17:].split(","))
    cred = parts.get("Credential", "").split("/")
    if len(cred) != 5 or cred[0] != AKID or cred[3] != "ec2":
        return False
    signed = parts.get("SignedHeaders", "").split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return False
    canon_headers = "".join(
        "%s:%s\n" % (h, " ".join(handler.headers.get(h, "").split()))
        for h in signed)
    payload = hashlib.sha256(body).hexdigest()
    if handler.headers.get("x-amz-content-sha256", payload) != payload:
        return False
    creq = "\n".join(["POST", "/", "", canon_headers, ";".join(signed), payload])
    date = handler.headers.get("x-amz-date", "")
    scope = "/".join(cred[1:])
    sts = "\n".join(["AWS4-HMAC-SHA256", date, scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = hmac256(("AWS4" + SECRET).encode(), cred[1])
    k = hmac256(k, cred[2])
    k = hmac256(k, cred[3])
    k = hmac256(k, "aws4_request")
    want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts.get("Signature", ""))


def error(code, msg):
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors>"
            "<Error><Code>%s</Code><Message>%s</Message></Error></Errors>"
            "<RequestID>req-%d</RequestID></Response>" % (code, msg, seq[0]))


def item(i):
    reason = ""
    if i["interrupted"]:
        reason = ("<stateReason><code>Server.SpotInstanceTermination</code>"
                  "<message>Server.SpotInstanceTermination: Spot instance "
                  "termination</message></stateReason>")
    tags = "".join("<item><key>%s</key><value>%s</value></item>" % kv
                   for kv in sorted(i["tags"].items()))
    return ("<item><instanceId>%s</instanceId><imageId>%s</imageId>"
            "<instanceState><code>16</code><name>%s</name></instanceState>"
            "<instanceType>%s</instanceType><placement><availabilityZone>"
            "us-east-1a</availabilityZone></placement><privateIpAddress>"
            "127.0.0.1</privateIpAddress>%s%s<tagSet>%s</tagSet></item>" %
            (i["id"], i["image"], i["state"], i["type"],
             "<instanceLifecycle>spot</instanceLifecycle>" if i["spot"] else "",
             reason, tags))


def boot(i, user_data):
    fake_machine.boot(STATE, i["id"], GPUS[i["type"]], user_data, i)


def halt(i):
    fake_machine.halt(STATE, i, i["tags"].get("cnlab:node", ""))


def next_failure(market):
    path = os.path.join(STATE, "fail-run")
    if not os.path.exists(path):
        return None
    lines = open(path).read().splitlines()
    for n, line in enumerate(lines):
        f = line.split()
        if not f or (len(f) > 2 and f[2] != market):
            continue
        del lines[n]
        with open(path, "w") as w:
            w.write("".join(x + "\n" for x in lines))
        return f
    return None


def run_instances(form):
    market = "spot" if form.get("InstanceMarketOptions.MarketType") == "spot" \
        else "on-demand"
    tok = form.get("ClientToken", "")
    if not tok:
        return 400, error("MissingParameter", "ClientToken")
    if tok in tokens:
        ids = tokens[tok]
    else:
        f = next_failure(market)
        if f and f[0] not in ("drop", "hang"):
            return int(f[1]), error(f[0], "as the test asked")
        t = form.get("InstanceType", "")
        if t not in GPUS:
            return 400, error("InvalidParameterValue",
                              "Invalid value '%s' for InstanceType." % t)
        if form.get("MinCount") != "1" or form.get("MaxCount") != "1":
            return 400, error("InvalidParameterValue", "count")
        ud = base64.b64decode(form.get("UserData", "")).decode()
        seq[0] += 1
        iid = "i-%017x" % seq[0]
        tags = {}
        for k, v in form.items():
            if k.startswith("TagSpecification.1.Tag.") and k.endswith(".Key"):
                tags[v] = form.get(k[:-4] + ".Value", "")
        i = {"id": iid, "type": t, "image": form.get("ImageId", ""),
             "state": "running", "spot": market == "spot",
             "interrupted": False, "token": tok, "tags": tags}
        instances[iid] = i
        tokens[tok] = [iid]
        boot(i, ud)
        ids = [iid]
        if f and f[0] == "drop":  # launched; the answer is lost
            return 0, ""
        if f and f[0] == "hang":  # launched; the answer comes late
            return -int(f[1]), ""
    body = "".join(item(instances[x]) for x in ids)
    return 200, ("<RunInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/"
                 "2016-11-15/\"><requestId>r</requestId><reservationId>r-1"
                 "</reservationId><ownerId>123456789012</ownerId>"
                 "<instancesSet>%s</instancesSet></RunInstancesResponse>" % body)


def ids_of(form):
    out, n = [], 1
    while "InstanceId.%d" % n in form:
        out.append(form["InstanceId.%d" % n])
        n += 1
    return out


def missing(ids):
    """EC2's answer when one of @ids is no instance, else None."""
    for x in ids:
        if x not in instances:
            return 400, error("InvalidInstanceID.NotFound",
                              "The instance ID '%s' does not exist" % x)
    return None


def describe(form):
    path = os.path.join(STATE, "interrupt")
    if os.path.exists(path):
        for iid in open(path).read().split():
            i = instances.get(iid)
            if i and not i["interrupted"]:
                i["interrupted"] = True
                i["state"] = "terminated"
                halt(i)
    ids = ids_of(form)
    if not ids:  # all: by the tag filter asked for, as EC2 does
        key = form.get("Filter.1.Value.1") \
            if form.get("Filter.1.Name") == "tag-key" else None
        ids = [x for x, i in instances.items() if not key or key in i["tags"]]
    if missing(ids):
        return missing(ids)
    body = "".join(item(instances[x]) for x in ids)
    return 200, ("<DescribeInstancesResponse><requestId>d</requestId>"
                 "<reservationSet><item><reservationId>r-1</reservationId>"
                 "<instancesSet>%s</instancesSet></item></reservationSet>"
                 "</DescribeInstancesResponse>" % body)


def terminate(form):
    ids = ids_of(form)
    if missing(ids):
        return missing(ids)
    out = ""
    for x in ids:
        i = instances[x]
        halt(i)
        i["state"] = "terminated"
        out += ("<item><instanceId>%s</instanceId><currentState><code>48"
                "</code><name>terminated</name></currentState></item>" % x)
    return 200, ("<TerminateInstancesResponse><requestId>t</requestId>"
                 "<instancesSet>%s</instancesSet></TerminateInstancesResponse>"
                 % out)


def spot_price(form):
    t = form.get("InstanceType.1", "")
    items = ""
    if t in SPOT:
        items = ("<item><instanceType>%s</instanceType><productDescription>"
                 "Linux/UNIX</productDescription><spotPrice>%s</spotPrice>"
                 "<timestamp>2026-12-07T00:00:00.000Z</timestamp>"
                 "<availabilityZone>us-east-1a</availabilityZone></item>"
                 % (t, SPOT[t]))
    return 200, ("<DescribeSpotPriceHistoryResponse><requestId>s</requestId>"
                 "<spotPriceHistorySet>%s</spotPriceHistorySet><nextToken/>"
                 "</DescribeSpotPriceHistoryResponse>" % items)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        form = dict(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
        action = form.get("Action", "")
        with lock:
            entry = {"action": action, "at": datetime.datetime.now().timestamp(),
                     "form": {k: v for k, v in form.items() if k != "UserData"},
                     "user_data": "UserData" in form}
            if not sig_ok(self, body):
                status, text = 403, error("SignatureDoesNotMatch",
                                          "The request signature we "
                                          "calculated does not match")
            elif os.path.exists(os.path.join(STATE, "fail-all")):
                status, text = 503, error("Unavailable", "The server is "
                                          "overloaded and cannot accept "
                                          "requests.")
            elif action == "RunInstances":
                status, text = run_instances(form)
            elif action == "DescribeInstances":
                status, text = describe(form)
            elif action == "TerminateInstances":
                status, text = terminate(form)
            elif action == "DescribeSpotPriceHistory":
                status, text = spot_price(form)
            else:
                status, text = 400, error("InvalidAction", action)
            entry["status"] = status
            log(entry)
            save_view = {k: {x: y for x, y in v.items() if x != "proc"}
                         for k, v in instances.items()}
            with open(os.path.join(STATE, "instances.json.tmp"), "w") as f:
                json.dump(save_view, f)
            os.replace(os.path.join(STATE, "instances.json.tmp"),
                       os.path.join(STATE, "instances.json"))
        if status == 0:
            self.close_connection = True
            return
        if status < 0:  # launched, answered after -status seconds
            time.sleep(-status)
            self.close_connection = True
            return
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/xml;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def stop(*_):
    with lock:
        fake_machine.halt_all(STATE, list(instances.values()),
                              lambda i: i["tags"].get("cnlab:node", ""))
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
