#!/usr/bin/python3
"""fake_apiserver.py - a loopback stand-in for a Kubernetes 1.34 API server,
for the DRA plugin's test (tests/integration/dra_plugin.sh).

It serves what the plugin asks, in the API server's own shapes (objects
with metadata.uid / resourceVersion, lists with metadata.resourceVersion,
errors as a v1 Status with reason and code):

  GET    /api/v1/nodes/NAME                       the Node (a fixed uid)
  GET    /apis/resource.k8s.io/v1/resourceslices  list, fieldSelector on
                                                  spec.nodeName, spec.driver
  POST   .../resourceslices                       create (409 AlreadyExists)
  PUT    .../resourceslices/NAME                  update (409 Conflict on a
                                                  stale resourceVersion)
  DELETE .../resourceslices/NAME
  GET    .../resourceslices?watch=1&resourceVersion=RV
                                                  a watch: a BOOKMARK, then
                                                  the slices' events after RV
                                                  as JSON lines (chunked),
                                                  until timeoutSeconds;
                                                  --expire-first-watch makes
                                                  the first one an ERROR
                                                  event 410 Expired
  GET    /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME
                                                  from DIR/NS_NAME.json

Every request must carry "Authorization: Bearer T" where T is the content
of --token-file read at that moment (401 otherwise), so a rotated token is
seen.  With --rbac FILE (repeatable: deploy/k8s's manifests as they are)
that token is the ServiceAccount --subject (cnlab/cnlab-agent) and may do
only what their RBAC grants it (rbac.py), else 403 Forbidden.  --fail METHOD:PATH_PREFIX:STATUS:N answers the first N matching
requests with STATUS (repeatable).  Each request is appended to --log as a
JSON line {method, path, body, status}.  The port goes to --port-file.
"""
import argparse
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rbac import Rbac

ap = argparse.ArgumentParser()
ap.add_argument("--port-file", required=True)
ap.add_argument("--token-file", required=True)
ap.add_argument("--claims", required=True)
ap.add_argument("--slices", help="JSON list of ResourceSlices there at start")
ap.add_argument("--log", required=True)
ap.add_argument("--fail", action="append", default=[])
ap.add_argument("--expire-first-watch", action="store_true")
ap.add_argument("--gates-off-node", action="append", default=[],
                help="slices of this node lose the fields of DRA's alpha/beta "
                     "feature gates when stored, as on a 1.34 server without them")
ap.add_argument("--rbac", action="append", default=[],
                help="YAML manifests whose RBAC authorizes the token as "
                     "--subject (rbac.py): a request they do not allow is "
                     "403 Forbidden")
ap.add_argument("--rbac-namespace", default="cnlab")
ap.add_argument("--subject", default="cnlab/cnlab-agent")
args = ap.parse_args()
rbac = Rbac(args.rbac, args.rbac_namespace, args.subject)

lock = threading.Lock()
changed = threading.Condition(lock)
events = []  # (resourceVersion as int, type, object)
expire = [args.expire_first_watch]
slices = {}
rv = [1000]
if args.slices:
    for s in json.load(open(args.slices)):
        slices[s["metadata"]["name"]] = s
faults = []
for f in args.fail:
    m, p, st, n = f.split(":")
    faults.append([m, p, int(st), int(n)])

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
REASONS = {401: "Unauthorized", 404: "NotFound", 409: "AlreadyExists",
           500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}


def status(code, message, reason=None):
    return code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                  "status": "Failure", "message": message,
                  "reason": reason or REASONS.get(code, "Unknown"), "code": code}


def next_rv():
    rv[0] += 1
    return str(rv[0])


def stored(obj):
    """What the API server keeps of a slice: its own metadata, and each
    device with a field the plugin did not send (as defaulting adds)."""
    obj["metadata"].setdefault("creationTimestamp", "2026-12-04T10:00:00Z")
    obj["metadata"]["generation"] = obj["metadata"].get("generation", 0) + 1
    gated = obj.get("spec", {}).get("nodeName") in args.gates_off_node
    if gated:
        obj["spec"].pop("sharedCounters", None)
    for d in obj.get("spec", {}).get("devices", []):
        d.setdefault("bindsToNode", False)
        if gated:
            d.pop("allowMultipleAllocations", None)
            d.pop("consumesCounters", None)
            for c in (d.get("capacity") or {}).values():
                c.pop("requestPolicy", None)
        for c in (d.get("capacity") or {}).values():
            c["value"] = canonical(c["value"])
    return obj


def canonical(q):
    """A binary-suffixed quantity as the API server writes it back: the
    largest suffix that keeps the number whole (16384Mi is 16Gi)."""
    units = ["Ki", "Mi", "Gi", "Ti", "Pi"]
    for i, u in enumerate(units):
        if q.endswith(u) and q[:-2].isdigit():
            n = int(q[:-2])
            while n and n % 1024 == 0 and i < len(units) - 1:
                n //= 1024
                i += 1
            return "%d%s" % (n, units[i])
    return q


def record(kind, obj):
    events.append((int(obj["metadata"]["resourceVersion"]), kind, json.loads(json.dumps(obj))))
    changed.notify_all()


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, q):
        import time
        if self.headers.get("Authorization") != "Bearer " + self.token:
            return False
        since = int(q.get("resourceVersion", ["0"])[0] or 0)
        sel = dict(kv.split("=", 1) for kv in q.get("fieldSelector", [""])[0].split(",") if kv)
        end = time.time() + int(q.get("timeoutSeconds", ["30"])[0])
        with open(args.log, "a") as f:
            f.write(json.dumps({"method": "WATCH", "path": self.path, "status": 200}) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with lock:
            if expire[0]:
                expire[0] = False
                self.chunk({"type": "ERROR", "object": status(410, "too old resource version: %d" % since, "Expired")[1]})
                self.wfile.write(b"0\r\n\r\n")
                return True
            self.chunk({"type": "BOOKMARK", "object": {"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1",
                                                       "metadata": {"resourceVersion": str(rv[0])}}})
            seen = since
            while time.time() < end:
                for r, kind, obj in events:
                    if r <= seen:
                        continue
                    seen = r
                    if all((k == "spec.nodeName" and obj["spec"].get("nodeName") == v) or
                           (k == "spec.driver" and obj["spec"].get("driver") == v) for k, v in sel.items()):
                        self.chunk({"type": kind, "object": obj})
                changed.wait(max(0.0, min(0.5, end - time.time())))
        self.wfile.write(b"0\r\n\r\n")
        return True

    def handle_any(self, method):
        u = urllib.parse.urlsplit(self.path)
        # Authentication first (401 in route() and watch()), then RBAC,
        # on one reading of the token file: a rotation between two
        # readings must not let a request past one of them.
        self.token = open(args.token_file).read().strip()
        refused = rbac.on and \
            self.headers.get("Authorization") == "Bearer " + self.token and \
            rbac.refuse(method, u.path, urllib.parse.parse_qs(u.query))
        if method == "GET" and u.path == SLICES and \
                "watch" in urllib.parse.parse_qs(u.query) and not refused:
            try:
                if self.watch(urllib.parse.parse_qs(u.query)):
                    return
            except (BrokenPipeError, ConnectionResetError):
                return
        # The body is read even for a refusal: left unread, it would be
        # taken for the next request on the connection.
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        with lock:
            code, out = status(*refused, "Forbidden") if refused \
                else self.route(method, body)
            with open(args.log, "a") as f:
                f.write(json.dumps({"method": method, "path": self.path,
                                    "body": body, "status": code,
                                    "content_type": self.headers.get("Content-Type")}) + "\n")
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def route(self, method, body):
        if self.headers.get("Authorization") != "Bearer " + self.token:
            return status(401, "Unauthorized")
        u = urllib.parse.urlsplit(self.path)
        path, q = u.path, urllib.parse.parse_qs(u.query)
        for f in faults:
            if f[0] == method and path.startswith(f[1]) and f[3] > 0:
                f[3] -= 1
                return status(f[2], "injected fault")
        if method == "GET" and path.startswith("/api/v1/nodes/"):
            name = path.rsplit("/", 1)[1]
            return 200, {"kind": "Node", "apiVersion": "v1",
                         "metadata": {"name": name, "uid": "6f1c2a44-8d0e-4c55-9a0b-1d2e3f405162",
                                      "resourceVersion": "77"}}
        if path == SLICES and method == "GET":
            sel = dict(kv.split("=", 1) for kv in q.get("fieldSelector", [""])[0].split(",") if kv)
            items = [s for s in slices.values()
                     if all((k == "spec.nodeName" and s["spec"].get("nodeName") == v) or
                            (k == "spec.driver" and s["spec"].get("driver") == v) for k, v in sel.items())]
            return 200, {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                         "metadata": {"resourceVersion": str(rv[0])}, "items": items}
        if path == SLICES and method == "POST":
            name = body["metadata"]["name"]
            if name in slices:
                return status(409, 'resourceslices.resource.k8s.io "%s" already exists' % name)
            body["metadata"]["uid"] = "slice-%d" % len(slices)
            body["metadata"]["resourceVersion"] = next_rv()
            slices[name] = stored(body)
            record("ADDED", body)
            return 201, body
        if path.startswith(SLICES + "/"):
            name = path.rsplit("/", 1)[1]
            if name not in slices:
                return status(404, 'resourceslices.resource.k8s.io "%s" not found' % name)
            if method == "PUT":
                if body["metadata"].get("resourceVersion") != slices[name]["metadata"]["resourceVersion"]:
                    return status(409, "Operation cannot be fulfilled on resourceslices.resource.k8s.io "
                                  '"%s": the object has been modified' % name, "Conflict")
                body["metadata"]["resourceVersion"] = next_rv()
                slices[name] = stored(body)
                record("MODIFIED", body)
                return 200, body
            if method == "DELETE":
                gone = slices.pop(name)
                gone["metadata"]["resourceVersion"] = next_rv()
                record("DELETED", gone)
                return 200, gone
        parts = path.split("/")
        # /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME
        if method == "GET" and len(parts) == 8 and parts[4] == "namespaces" and parts[6] == "resourceclaims":
            try:
                return 200, json.load(open("%s/%s_%s.json" % (args.claims, parts[5], parts[7])))
            except FileNotFoundError:
                return status(404, 'resourceclaims.resource.k8s.io "%s" not found' % parts[7])
            except ValueError as e:
                return status(500, "broken recorded claim: %s" % e)
        return status(404, "the server could not find the requested resource")

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
