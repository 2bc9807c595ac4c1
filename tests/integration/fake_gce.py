#!/usr/bin/env python3
"""fake_gce.py - a loopback Google Compute Engine for the GCP burst's
end-to-end test (burst_gcp.sh).

It serves what cnlabd's GCP plugin calls, and is as strict as Google
where it matters:

  - POST /token: the OAuth 2.0 JWT-bearer grant (RFC 7523).  The
    assertion's RS256 signature is checked with the service account's
    public key (by openssl), and its claims (iss: the account, aud: this
    token URI, the compute scope, iat near now, exp at most an hour on):
    anything else is 400 invalid_grant.  A good one earns an access token
    valid for "expires_in" seconds (3599, or the number in the file
    token-ttl);
  - /compute/v1/projects/P/zones/Z/...: a valid, unexpired bearer token
    or 401; instances.insert (the body checked as Compute Engine checks
    it: name, machine type of the zone, boot image, GPU VMs with
    onHostMaintenance TERMINATE, a spot VM's termination action, label
    and metadata key syntax), a requestId seen before answers its first
    operation, a name taken 409 alreadyExists; operations end only when
    waited for (operations.wait), and a launch without capacity ends with
    ZONE_RESOURCE_POOL_EXHAUSTED in its operation, as Google reports it;
    instances.get (404 when gone), instances.list (the label filter, two
    a page with nextPageToken), instances.delete.
  - an "instance" is the machine image booting: its startup-script
    metadata is run (fake_machine.py), so that its cnlab-agent joins
    cnlabd with its join token; deleting it halts the machine.

The test steers it through files in its state directory:

  fail-run    lines "CODE [market]" answered to the next inserts, one line
              each (ZONE_RESOURCE_POOL_EXHAUSTED: in the operation; 429 or
              503: that status; a market, spot or on-demand, limits a line
              to launches in it)
  fail-all    while present, every call gets 503
  interrupt   instance names, one per line: preempted if spot VMs (stopped
              by Compute Engine: TERMINATED, the machine gone)
  token-ttl   the expires_in of the access tokens given from now on

and reads what happened in calls.log (one JSON object per request) and
instances.json (every instance ever made, "deleted" once gone).

Usage: fake_gce.py STATE_DIR CLIENT_EMAIL PUBLIC_KEY_PEM PORT_FILE
"""
import base64
import datetime
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_machine

STATE, EMAIL, PUBKEY, PORT_FILE = sys.argv[1:5]
GPUS = {
    "a3-highgpu-8g": "fake:8xH100-80GB-SXM",
    "a2-highgpu-1g": "fake:1xA100-40GB",
    "g2-standard-4": "fake:1xL4",
}
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
META_KEY = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                  r"[0-9a-f]{12}$")
lock = threading.Lock()
instances = {}  # name -> dict (deleted ones kept, "deleted": True)
ops = {}  # name -> operation
requests = {}  # requestId -> operation name
bearers = {}  # access token -> expiry (epoch s)
seq = [0]
port = [0]


def log(entry):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def gerror(code, reason, msg, status=""):
    return code, {"error": {"code": code, "message": msg,
                            "errors": [{"domain": "global",
                                        "reason": reason,
                                        "message": msg}],
                            "status": status}}


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def grant(form):
    """The JWT-bearer grant: (status, body)."""
    bad = (400, {"error": "invalid_grant",
                 "error_description": "Invalid JWT Signature."})
    if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
        return 400, {"error": "unsupported_grant_type",
                     "error_description": "Invalid grant_type"}
    parts = form.get("assertion", "").split(".")
    if len(parts) != 3:
        return bad
    try:
        head = json.loads(b64d(parts[0]))
        claims = json.loads(b64d(parts[1]))
        sig = b64d(parts[2])
    except ValueError:
        return bad
    if head.get("alg") != "RS256":
        return bad
    with tempfile.NamedTemporaryFile() as sf:
        sf.write(sig)
        sf.flush()
        p = subprocess.run(["openssl", "dgst", "-sha256", "-verify", PUBKEY,
                            "-signature", sf.name],
                           input=(parts[0] + "." + parts[1]).encode(),
                           capture_output=True)
    if p.returncode != 0:
        return bad
    now = time.time()
    aud = "http://127.0.0.1:%d/token" % port[0]
    if claims.get("iss") != EMAIL or claims.get("aud") != aud or \
            "https://www.googleapis.com/auth/compute" not in \
            str(claims.get("scope", "")).split() or \
            abs(claims.get("iat", 0) - now) > 300 or \
            not 0 < claims.get("exp", 0) - claims.get("iat", 0) <= 3600:
        return 400, {"error": "invalid_grant",
                     "error_description": "Invalid JWT: claims"}
    ttl = 3599
    path = os.path.join(STATE, "token-ttl")
    if os.path.exists(path):
        ttl = int(open(path).read().strip())
    tok = "ya29.fake-" + secrets.token_urlsafe(24)
    bearers[tok] = now + ttl
    return 200, {"access_token": tok, "expires_in": ttl,
                 "token_type": "Bearer"}


def next_failure(market):
    path = os.path.join(STATE, "fail-run")
    if not os.path.exists(path):
        return None
    lines = open(path).read().splitlines()
    for n, line in enumerate(lines):
        f = line.split()
        if not f or (len(f) > 1 and f[1] != market):
            continue
        del lines[n]
        with open(path, "w") as w:
            w.write("".join(x + "\n" for x in lines))
        return f
    return None


def self_link(zone_path, kind, name):
    return "https://www.googleapis.com/compute/v1/%s/%s/%s" % (
        zone_path, kind, name)


def new_op(zone_path, target, optype, error=None):
    seq[0] += 1
    name = "operation-%d-%s" % (seq[0], secrets.token_hex(4))
    op = {"kind": "compute#operation", "id": str(1000 + seq[0]),
          "name": name, "operationType": optype, "status": "RUNNING",
          "targetLink": self_link(zone_path, "instances", target),
          "progress": 0, "zone": "https://www.googleapis.com/compute/v1/"
          + zone_path}
    if error:
        op["pending_error"] = error
    ops[name] = op
    return op


def op_view(op):
    return {k: v for k, v in op.items() if k != "pending_error"}


def view(i):
    return {k: v for k, v in i.items() if k not in ("proc", "pid", "tags")}


def preempt():
    path = os.path.join(STATE, "interrupt")
    if not os.path.exists(path):
        return
    for name in open(path).read().split():
        i = instances.get(name)
        if i and not i.get("deleted") and i["spot"] and \
                i["status"] == "RUNNING":
            i["status"] = "TERMINATED"
            fake_machine.halt(STATE, i, i["tags"].get("cnlab-node", ""))


def insert(zone_path, zone, query, body):
    rid = query.get("requestId", "")
    if rid and not UUID.match(rid):
        return gerror(400, "invalid", "Invalid value for field "
                      "'requestId': '%s'. Must be a UUID." % rid,
                      "INVALID_ARGUMENT")
    if rid in requests:
        return 200, op_view(ops[requests[rid]])
    name = body.get("name", "")
    if not isinstance(name, str) or not NAME.match(name):
        return gerror(400, "invalid", "Invalid value for field "
                      "'resource.name': '%s'." % name, "INVALID_ARGUMENT")
    if name in instances and not instances[name].get("deleted"):
        return gerror(409, "alreadyExists", "The resource '%s/instances/%s' "
                      "already exists" % (zone_path, name), "ALREADY_EXISTS")
    mt = body.get("machineType", "")
    m = re.match(r"^zones/([a-z0-9-]+)/machineTypes/([a-z0-9-]+)$", mt)
    if not m or m.group(1) != zone or m.group(2) not in GPUS:
        return gerror(400, "invalid", "Invalid value for field "
                      "'resource.machineType': '%s'. Machine type with "
                      "name '%s' does not exist in zone '%s'." %
                      (mt, mt.split("/")[-1], zone), "INVALID_ARGUMENT")
    disks = body.get("disks") or [{}]
    image = (disks[0].get("initializeParams") or {}).get("sourceImage", "")
    if not disks[0].get("boot") or not image:
        return gerror(400, "invalid", "Invalid value for field "
                      "'resource.disks': a boot disk with a source image "
                      "is required", "INVALID_ARGUMENT")
    sch = body.get("scheduling") or {}
    spot = sch.get("provisioningModel") == "SPOT"
    if sch.get("onHostMaintenance") != "TERMINATE":
        return gerror(400, "invalid", "Instances with guest accelerators "
                      "do not support live migration.", "INVALID_ARGUMENT")
    if spot and (sch.get("automaticRestart") or
                 sch.get("instanceTerminationAction") not in ("STOP",
                                                              "DELETE")):
        return gerror(400, "invalid", "Invalid value for field "
                      "'resource.scheduling': a Spot VM cannot restart "
                      "automatically and needs an instanceTerminationAction",
                      "INVALID_ARGUMENT")
    labels = body.get("labels") or {}
    for k, v in labels.items():
        if not LABEL.match(k) or not isinstance(v, str) or \
                not LABEL_VALUE.match(v):
            return gerror(400, "invalid", "Invalid value for field "
                          "'resource.labels': '%s'" % k, "INVALID_ARGUMENT")
    items = (body.get("metadata") or {}).get("items") or []
    meta = {}
    for it in items:
        if not META_KEY.match(it.get("key", "")):
            return gerror(400, "invalid", "Invalid value for field "
                          "'resource.metadata': key '%s'" % it.get("key"),
                          "INVALID_ARGUMENT")
        meta[it["key"]] = it.get("value", "")
    market = "spot" if spot else "on-demand"
    f = next_failure(market)
    if f and f[0] in ("429", "503"):
        if f[0] == "429":
            return gerror(429, "rateLimitExceeded", "Rate Limit Exceeded",
                          "RESOURCE_EXHAUSTED")
        return gerror(503, "backendError", "The service is currently "
                      "unavailable.", "UNAVAILABLE")
    if f:  # a failure Compute Engine reports when the operation ends
        op = new_op(zone_path, name, "insert", {"errors": [{
            "code": f[0],
            "message": "The zone '%s' does not have enough resources "
                       "available to fulfill the request.  Try a different "
                       "zone, or try again later." % zone_path}]})
    else:
        seq[0] += 1
        i = {"kind": "compute#instance", "id": str(7000000 + seq[0]),
             "name": name, "zone": "https://www.googleapis.com/compute/v1/"
             + zone_path, "machineType": self_link(zone_path,
                                                  "machineTypes",
                                                  m.group(2)),
             "status": "RUNNING", "image": image, "labels": labels,
             "metadata": {"kind": "compute#metadata", "items": items},
             "scheduling": sch, "spot": spot, "type": m.group(2),
             "networkInterfaces": [{"name": "nic0",
                                    "networkIP": "127.0.0.1"}],
             "tags": meta}
        instances[name] = i
        fake_machine.boot(STATE, name, GPUS[m.group(2)],
                          meta.get("startup-script", ""), i)
        op = new_op(zone_path, name, "insert")
    if rid:
        requests[rid] = op["name"]
    return 200, op_view(op)


def wait(name):
    op = ops.get(name)
    if not op:
        return gerror(404, "notFound", "The resource 'operation %s' was not "
                      "found" % name, "NOT_FOUND")
    op["status"] = "DONE"
    op["progress"] = 100
    if "pending_error" in op:
        op["error"] = op["pending_error"]
    return 200, op_view(op)


def handle(method, path, query, body):
    m = re.match(r"^/compute/v1/(projects/([a-z0-9-]+)/zones/([a-z0-9-]+))"
                 r"/(instances|operations)(?:/([^/]+))?(/wait)?$", path)
    if not m:
        return gerror(404, "notFound", "no such path %s" % path, "NOT_FOUND")
    zone_path, zone, coll, name, w = m.group(1), m.group(3), m.group(4), \
        m.group(5), m.group(6)
    preempt()
    if coll == "operations" and w and method == "POST":
        return wait(name)
    if coll != "instances" or w:
        return gerror(400, "invalid", "bad request", "INVALID_ARGUMENT")
    if method == "POST" and not name:
        return insert(zone_path, zone, query, body or {})
    if method == "GET" and not name:
        want = query.get("filter", "")
        if want != "labels.cnlab-managed=true":
            return gerror(400, "invalid", "Invalid list filter expression "
                          "'%s'." % want, "INVALID_ARGUMENT")
        live = sorted(n for n, i in instances.items()
                      if not i.get("deleted")
                      and i["labels"].get("cnlab-managed") == "true")
        start = int(query.get("pageToken", "0") or 0)
        out = {"kind": "compute#instanceList",
               "items": [view(instances[n]) for n in live[start:start + 2]]}
        if start + 2 < len(live):
            out["nextPageToken"] = str(start + 2)
        return 200, out
    i = instances.get(name)
    if not i or i.get("deleted"):
        return gerror(404, "notFound", "The resource '%s/instances/%s' was "
                      "not found" % (zone_path, name), "NOT_FOUND")
    if method == "GET":
        return 200, view(i)
    if method == "DELETE":
        fake_machine.halt(STATE, i, i["tags"].get("cnlab-node", ""))
        i["deleted"] = True
        i["status"] = "DELETED"
        op = new_op(zone_path, name, "delete")
        return 200, op_view(op)
    return gerror(405, "invalid", "method", "INVALID_ARGUMENT")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        u = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        with lock:
            entry = {"method": self.command, "path": u.path, "query": query,
                     "at": datetime.datetime.now().timestamp()}
            body = None
            if os.path.exists(os.path.join(STATE, "fail-all")):
                status, out = gerror(503, "backendError", "The service is "
                                     "currently unavailable.", "UNAVAILABLE")
            elif u.path == "/token" and self.command == "POST":
                form = dict(urllib.parse.parse_qsl(raw.decode()))
                status, out = grant(form)
                entry["grant"] = status
            else:
                auth = self.headers.get("Authorization", "")
                tok = auth[7:] if auth.startswith("Bearer ") else ""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = "bad"
                if bearers.get(tok, 0) <= time.time():
                    status, out = gerror(401, "authError", "Request had "
                                         "invalid authentication "
                                         "credentials.", "UNAUTHENTICATED")
                elif body == "bad":
                    status, out = gerror(400, "parseError", "Parse Error",
                                         "INVALID_ARGUMENT")
                else:
                    status, out = handle(self.command, u.path, query, body)
                if isinstance(body, dict):
                    entry["body"] = {k: v for k, v in body.items()
                                     if k != "metadata"}
                    entry["metadata_keys"] = [
                        x.get("key") for x in
                        (body.get("metadata") or {}).get("items") or []]
            entry["status"] = status
            log(entry)
            with open(os.path.join(STATE, "instances.json.tmp"), "w") as f:
                json.dump({n: view(i) | {"tags": i["tags"]}
                           for n, i in instances.items()}, f)
            os.replace(os.path.join(STATE, "instances.json.tmp"),
                       os.path.join(STATE, "instances.json"))
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = answer


def stop(*_):
    with lock:
        fake_machine.halt_all(STATE, list(instances.values()),
                              lambda i: i["tags"].get("cnlab-node", ""))
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
port[0] = srv.server_address[1]
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(port[0]))
os.replace(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
