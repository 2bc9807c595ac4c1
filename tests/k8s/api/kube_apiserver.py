#!/usr/bin/python3
"""kube_apiserver.py - a loopback stand-in for a Kubernetes 1.34 API server,
for cnlabd's Kubernetes scheduler (tests/integration/kube_sched.sh).

Objects are kept in the API server's own shapes (metadata.uid,
resourceVersion from one counter, lists with metadata.resourceVersion,
errors as a v1 Status with reason and code):

  GET   /api/v1/nodes                                  list
  PATCH /api/v1/nodes/NAME                             a merge patch
                                                       (labels, taints,
                                                       unschedulable)
  GET   /api/v1/namespaces/NS                          a namespace
  GET   /api/v1/namespaces?labelSelector=K%3DV         list (one equality)
  GET   /apis/resource.k8s.io/v1/resourceslices        list (fieldSelector
                                                       spec.driver)
  GET   /api/v1/pods?fieldSelector=F                  list (F: terms
                                                       PATH=V, PATH!=V
                                                       joined by commas);
                                                       with watch=1 a
                                                       watch: a BOOKMARK,
                                                       then events after the
                                                       version, JSON lines
                                                       (chunked) until
                                                       timeoutSeconds;
                                                       --expire-first-watch
                                                       answers the first one
                                                       410 Gone
  POST  /api/v1/namespaces/NS/pods                     create
  GET, DELETE, PATCH /api/v1/namespaces/NS/pods/NAME  (PATCH: a JSON
                                                       merge patch) a
                                                       deletion takes
                                                       what the pod owns
                                                       (ownerReferences),
                                                       as the garbage
                                                       collector does
  GET   .../pods/NAME/log?container=C&limitBytes=N&timestamps=true
        &sinceTime=T                                   what /test/log
                                                       appended (with the
                                                       kubelet's RFC 3339
                                                       nanosecond times);
                                                       400 while the pod
                                                       is Pending
  POST, GET .../configmaps, secrets, services, persistentvolumeclaims
  DELETE .../services/NAME, configmaps/NAME, persistentvolumeclaims/NAME
  GET   /api/v1/persistentvolumeclaims?labelSelector=K[=V]  every
                                                       namespace's
  GET   .../pods/NAME/exec?container=C&command=A...&stdout=true
        &stderr=true, Upgrade: websocket               kubectl's exec
                                                       since 1.30: a
                                                       WebSocket of
                                                       v5.channel.k8s.io
                                                       (or v4), each
                                                       binary message a
                                                       channel's (1
                                                       stdout, 2 stderr,
                                                       3 the v1 Status:
                                                       Success, or
                                                       NonZeroExitCode
                                                       with the ExitCode
                                                       cause); each
                                                       channel first
                                                       announced by an
                                                       empty message; the
                                                       command runs here
                                                       (the test plays
                                                       the kubelet and
                                                       the runtime), with
                                                       the container's
                                                       literal env, as
                                                       its securityContext's
                                                       user and group, with
                                                       the secrets' files it
                                                       mounts by subPath at
                                                       /etc/passwd and
                                                       /etc/group (as root:
                                                       unshare, setpriv);
                                                       with &stdin=true,
                                                       channel 0 (masked)
                                                       is its stdin, ended
                                                       by v5's close of
                                                       channel 0; one
                                                       not found is
                                                       runc's exit 126;
                                                       400 while the pod
                                                       is not Running or
                                                       for a container
                                                       not in it
  PATCH .../pods/NAME/status                           strategic merge
                                                       (conditions by type)
                                                       or merge patch
  POST  .../pods/NAME/binding                          sets spec.nodeName;
                                                       409 when bound
  POST  .../pods/NAME/eviction                         429 when a
                                                       PodDisruptionBudget
                                                       of the namespace with
                                                       maxUnavailable 0
                                                       selects it, else the
                                                       pod is deleted
  GET   /apis/policy/v1/namespaces/NS/poddisruptionbudgets
  POST  /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims  create
  GET, DELETE .../resourceclaims/NAME
  PUT   .../resourceclaims/NAME/status                 409 Conflict on a
                                                       stale resourceVersion
  POST  /api/v1/namespaces/NS/serviceaccounts/SA/token a TokenRequest
                                                       bound to a pod (its
                                                       boundObjectRef: name
                                                       and uid), as the
                                                       kubelet asks for a
                                                       projected token
  POST  /apis/authentication.k8s.io/v1/tokenreviews    a TokenReview: such
                                                       a token, for one of
                                                       its audiences, while
                                                       its pod (that uid)
                                                       is there, is the
                                                       ServiceAccount's
                                                       with extra pod-name
                                                       and pod-uid; else
                                                       authenticated false
                                                       with the error

--state FILE gives the nodes, namespaces, slices and budgets at start.  A
namespace with "x-forbidden": true stands for one that does not bind
cnlab:cnlabd-workloads to cnlabd: creating pods, claims or ConfigMaps there
is 403 Forbidden.  POST /test/log {namespace, name, text} appends to a
pod's log (the test plays the kubelet).
Every request must carry "Authorization: Bearer T" with T the content of
--token-file.  Each request is appended to --log as a JSON line {method,
path, status, body, user}.  The port goes to --port-file.

RBAC, as the API server's authorizer does it (rbac.py), with --rbac FILE
(YAML, any number of documents; repeatable: deploy/k8s's manifests as they
are):
the --token-file token is then the ServiceAccount --subject (cnlab/cnlabd)
and may do only what the ClusterRoles of its ClusterRoleBindings, and the
Roles and ClusterRoles of the RoleBindings of the request's namespace,
grant (apiGroups, resources with their subresources, verbs from the method:
get, list, watch, create, update, patch, delete, deletecollection;
resourceNames), else 403 Forbidden in the API server's words; namespaced
objects of a file without a namespace are --rbac-namespace's (cnlab, the
kustomization's).  The token of --admin-token-file may do anything (the
test, playing kubectl and the kubelet), and it alone may make RoleBindings:

  POST, GET, DELETE /apis/rbac.authorization.k8s.io/v1/namespaces/NS/rolebindings[/NAME]

The namespaces' "x-forbidden" is then not read: a namespace without a
RoleBinding for cnlabd is forbidden to it by RBAC itself.
"""
import argparse
import base64
import copy
import datetime
import hashlib
import json
import os
import selectors
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rbac import Rbac

ap = argparse.ArgumentParser()
ap.add_argument("--port-file", required=True)
ap.add_argument("--token-file", required=True)
ap.add_argument("--state", required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--expire-first-watch", action="store_true")
ap.add_argument("--rbac", action="append", default=[])
ap.add_argument("--rbac-namespace", default="cnlab")
ap.add_argument("--subject", default="cnlab/cnlabd")
ap.add_argument("--admin-token-file")
args = ap.parse_args()

lock = threading.Lock()
changed = threading.Condition(lock)
rv = [5000]
events = []  # (rv, type, pod)
expire = [args.expire_first_watch]
state = json.load(open(args.state))
pods = {}    # (ns, name) -> pod
claims = {}  # (ns, name) -> claim
crs = {"trainingjobs": {}, "notebookservers": {}}  # plural -> {(ns, name)}
others = {}  # (plural, ns, name) -> services, persistentvolumeclaims,
             # configmaps, secrets
logs = {}    # (ns, pod name) -> [(seconds, nanoseconds, line)]
sa_tokens = {}  # token -> (ns, sa, pod name, pod uid, audiences)
clock = [1796428800, 0]  # the kubelet's log clock: 2026-12-04T00:00:00Z
TJ = "/apis/cnlab.io/v1alpha1/trainingjobs"
NB = "/apis/cnlab.io/v1alpha1/notebookservers"
KINDS = {TJ: "TrainingJob", NB: "NotebookServer"}

REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
           410: "Expired", 429: "TooManyRequests", 400: "BadRequest",
           422: "Invalid"}


def next_rv():
    rv[0] += 1
    return str(rv[0])


def container_argv(ns, pod, ctr, argv, tmpdir):
    """@argv as the container would run it, as far as this host can: as
    the user and group of its securityContext (the pod's, the
    container's over it), with the files that secret volumes mount by
    subPath over /etc/passwd and /etc/group (a mount namespace of its
    own).  Only as root; otherwise @argv as it is."""
    if os.geteuid() != 0:
        return argv
    psc = pod["spec"].get("securityContext", {})
    csc = ctr.get("securityContext", {})
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
    vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    binds = []
    for m in ctr.get("volumeMounts", []):
        v = vols.get(m["name"], {})
        if m.get("mountPath") not in ("/etc/passwd", "/etc/group") or \
                "secret" not in v or "subPath" not in m:
            continue
        with lock:
            sec = others.get(("secrets", ns, v["secret"]["secretName"]))
        items = {i["path"]: i["key"] for i in v["secret"].get("items", [])}
        key = items.get(m["subPath"], m["subPath"])
        data = (sec or {}).get("data", {}).get(key)
        if data is None:
            continue
        f = os.path.join(tmpdir, m["subPath"])
        with open(f, "wb") as o:
            o.write(base64.b64decode(data))
        os.chmod(f, 0o444)
        binds.append((f, m["mountPath"]))
    if uid is None and not binds:
        return argv
    os.chmod(tmpdir, 0o755)
    script = "".join('mount --bind "$%d" "$%d" && ' % (2 * i + 1, 2 * i + 2)
                     for i in range(len(binds)))
    script += 'shift %d && exec "$@"' % (2 * len(binds))
    user = [] if uid is None else [
        "setpriv", "--reuid=%d" % uid, "--regid=%d" % gid,
        "--clear-groups", "--inh-caps=-all", "--"]
    return ["unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", script, "container"] + \
        [x for b in binds for x in b] + user + argv


class WsReader:
    """The client's frames after the upgrade (masked, as RFC 6455 has
    clients send them), from the handler's buffered reader."""

    def __init__(self, h):
        self.h = h
        self.eof = False
        self.msg = b""
        self.msg_op = 0
        # What the handler's reader took past the request already.
        h.connection.setblocking(False)
        try:
            self.pre = h.rfile.read1(65536) or b""
        finally:
            h.connection.setblocking(True)
        self.buf = b""

    def buffered(self):
        return bool(self.pre)

    def messages(self):
        if self.pre:
            data, self.pre = self.pre, b""
        else:
            data = self.h.connection.recv(65536)
            if not data:
                self.eof = True
        self.buf += data
        out = []
        while len(self.buf) >= 2:
            b0, b1 = self.buf[0], self.buf[1]
            n, hl = b1 & 0x7f, 2
            if n == 126:
                hl = 4
            elif n == 127:
                hl = 10
            if not b1 & 0x80:
                raise OSError("an unmasked frame from the client")
            if len(self.buf) < hl + 4:
                break
            if hl == 4:
                n = struct.unpack(">H", self.buf[2:4])[0]
            elif hl == 10:
                n = struct.unpack(">Q", self.buf[2:10])[0]
            if len(self.buf) < hl + 4 + n:
                break
            mask = self.buf[hl:hl + 4]
            pl = bytes(c ^ mask[i % 4] for i, c in
                       enumerate(self.buf[hl + 4:hl + 4 + n]))
            self.buf = self.buf[hl + 4 + n:]
            op = b0 & 0x0f
            if op >= 8:
                if op == 8:
                    out.append((8, pl))
                elif op == 9:
                    self.h.ws_send(10, pl)
                continue
            if op != 0:
                self.msg_op, self.msg = op, b""
            self.msg += pl
            if b0 & 0x80:
                out.append((self.msg_op, self.msg))
        return out


def status(code, message):
    return code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                  "status": "Failure", "message": message,
                  "reason": REASONS.get(code, "Unknown"), "code": code}


def new_meta(obj, ns):
    md = obj.setdefault("metadata", {})
    md["namespace"] = ns
    md.setdefault("uid", str(uuid.uuid4()))
    md["resourceVersion"] = next_rv()
    md.setdefault("creationTimestamp", "2026-12-04T10:00:00Z")


def pod_event(kind, obj):
    events.append((int(obj["metadata"]["resourceVersion"]), kind,
                   copy.deepcopy(obj)))
    changed.notify_all()


def touch(pod, kind="MODIFIED"):
    pod["metadata"]["resourceVersion"] = next_rv()
    pod_event(kind, pod)


def merge(target, patch):
    """RFC 7386 JSON merge patch, in place."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def forbidden(ns):
    return not rbac_on and any(n["metadata"]["name"] == ns and
                               n.get("x-forbidden")
                               for n in state["namespaces"])


rbac = Rbac(args.rbac, args.rbac_namespace, args.subject)
rbac_on = rbac.on
USER = rbac.user


def collect(uid):
    """The garbage collector: what the object of @uid owned goes."""
    owned = lambda o: any(r.get("uid") == uid for r in
                          o["metadata"].get("ownerReferences", []))
    for k, pod in list(pods.items()):
        if owned(pod):
            del pods[k]
            pod["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
            touch(pod, "DELETED")
    for k, c in list(claims.items()):
        if owned(c):
            del claims[k]
    for k, c in list(others.items()):
        if owned(c):
            del others[k]


def fields_match(obj, sel):
    """A field selector as the API server reads it: terms joined by
    commas, each PATH=V, PATH==V or PATH!=V on a dotted path (a missing
    field is the empty string)."""
    for term in filter(None, sel.split(",")):
        neg = "!=" in term
        path, want = term.split("!=" if neg else "=", 1)
        want = want[1:] if not neg and want.startswith("=") else want
        v = obj
        for k in path.split("."):
            v = v.get(k, {}) if isinstance(v, dict) else {}
        v = v if isinstance(v, str) else ""
        if (v == want) == neg:
            return False
    return True


def selects(pdb, pod):
    want = pdb.get("spec", {}).get("selector", {}).get("matchLabels", {})
    labels = pod["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in want.items())


def strategic(pod, patch):
    st = patch.get("status", {})
    conds = pod.setdefault("status", {}).setdefault("conditions", [])
    for c in st.get("conditions", []):
        conds[:] = [x for x in conds if x.get("type") != c.get("type")]
        conds.append(c)
    for k, v in st.items():
        if k != "conditions":
            pod["status"][k] = v


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Go's net/http, as the real server, sends without Nagle's delay
        # (else each reply's head and body wait 40 ms for an ACK).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a):
        pass

    def reply(self, code, obj):
        text = isinstance(obj, str)  # a log
        body = obj.encode() if text else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type",
                         "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def record(self, code, body):
        with open(args.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "status": code, "body": body,
                                "user": getattr(self, "user", "")}) + "\n")

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null") if n else None

    def handle_one(self):
        tok = open(args.token_file).read().strip()
        admin = args.admin_token_file and \
            open(args.admin_token_file).read().strip()
        auth = self.headers.get("Authorization")
        is_admin = bool(admin) and auth == "Bearer " + admin
        if auth != "Bearer " + tok and not is_admin:
            self.user = ""
            return status(401, "Unauthorized"), None
        self.user = "admin" if is_admin else USER
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        parts = u.path.strip("/").split("/")
        body = self.body() if self.command in ("POST", "PUT", "PATCH") else None
        if rbac_on and not is_admin:
            refused = rbac.refuse(self.command, u.path, q)
            if refused:
                return status(*refused), body
        if parts[:4] == ["apis", "rbac.authorization.k8s.io", "v1",
                         "namespaces"] and parts[5:6] == ["rolebindings"]:
            with lock:
                return self.rolebindings(parts[4], parts[6:], body), body
        if u.path in ("/api/v1/pods", TJ, NB) and q.get("watch") == ["1"]:
            return None, body
        if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] \
                and parts[4] == "pods" and parts[6] == "exec":
            return ("EXEC", parts[3], parts[5], q), body
        with lock:
            return self.route(u.path, parts, q, body), body

    def route(self, path, parts, q, body):
        m = self.command
        if path == "/test/add" and m == "POST":
            # Not the API's: the test adds nodes and slices as a cluster
            # would grow.
            state["nodes"].extend(body.get("nodes", []))
            state["slices"].extend(body.get("slices", []))
            return 200, {}
        if path == "/test/remove" and m == "POST":
            # A node deleted, with its slices.
            gone = set(body.get("nodes", []))
            state["nodes"] = [n for n in state["nodes"]
                              if n["metadata"]["name"] not in gone]
            state["slices"] = [x for x in state["slices"]
                               if x["spec"]["nodeName"] not in gone]
            return 200, {}
        if path == "/test/log" and m == "POST":
            # The lines of one call share one time (the kubelet's are
            # nanoseconds, and may tie); each call's is later.
            key = (body["namespace"], body["name"])
            clock[1] += 123456789
            clock[0] += clock[1] // 10**9 + body.get("seconds", 0)
            clock[1] %= 10**9
            for line in body["text"].splitlines(keepends=True):
                logs.setdefault(key, []).append((clock[0], clock[1], line))
            return 200, {}
        if path == "/api/v1/namespaces" and m == "GET":
            sel = q.get("labelSelector", [""])[0]
            k, _, v = sel.partition("=")
            items = [n for n in state["namespaces"]
                     if not sel or
                     n["metadata"].get("labels", {}).get(k) == v]
            return 200, {"kind": "NamespaceList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": items}
        if path == "/api/v1/nodes" and m == "GET":
            return 200, {"kind": "NodeList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": state["nodes"]}
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4 and \
                m == "PATCH":
            # kubectl label, kubectl taint, kubectl cordon: a merge patch.
            for n in state["nodes"]:
                if n["metadata"]["name"] == parts[3]:
                    merge(n, body)
                    rv[0] += 1
                    n["metadata"]["resourceVersion"] = str(rv[0])
                    return 200, n
            return status(404, "nodes \"%s\" not found" % parts[3])
        if path == "/apis/resource.k8s.io/v1/resourceslices" and m == "GET":
            sel = q.get("fieldSelector", [""])[0]
            items = [s for s in state["slices"]
                     if not sel.startswith("spec.driver=")
                     or s["spec"]["driver"] == sel.split("=", 1)[1]]
            return 200, {"kind": "ResourceSliceList",
                         "apiVersion": "resource.k8s.io/v1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": items}
        if path == "/api/v1/pods" and m == "GET":
            sel = q.get("fieldSelector", [""])[0]
            items = [copy.deepcopy(p) for p in pods.values()
                     if fields_match(p, sel)]
            return 200, {"kind": "PodList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": items}
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4:
            for ns in state["namespaces"]:
                if ns["metadata"]["name"] == parts[3]:
                    return 200, ns
            return status(404, "namespaces \"%s\" not found" % parts[3])
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4:5] == ["pods"]:
            return self.pods(parts[3], parts[5:], body, q)
        if parts[:4] == ["apis", "policy", "v1", "namespaces"] and \
                parts[5:] == ["poddisruptionbudgets"] and m == "GET":
            items = [b for b in state.get("pdbs", [])
                     if b["metadata"]["namespace"] == parts[4]]
            return 200, {"kind": "PodDisruptionBudgetList",
                         "apiVersion": "policy/v1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": items}
        if path in KINDS and m == "GET":
            return 200, {"kind": KINDS[path] + "List",
                         "apiVersion": "cnlab.io/v1alpha1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": [copy.deepcopy(t) for t in
                                   crs[parts[-1]].values()]}
        if parts[:4] == ["apis", "cnlab.io", "v1alpha1", "namespaces"] and \
                len(parts) >= 6 and parts[5] in crs:
            return self.tjs(parts[5], parts[4], parts[6:], body)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and \
                parts[4] in ("services", "persistentvolumeclaims",
                             "configmaps", "secrets") and \
                m == "POST":
            if forbidden(parts[3]):
                return status(403, "%s is forbidden: cannot create "
                              "resource in namespace \"%s\""
                              % (parts[4], parts[3]))
            new_meta(body, parts[3])
            key = (parts[4], parts[3], body["metadata"]["name"])
            if key in others:
                return status(409, "already exists")
            others[key] = body
            return 201, body
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and \
                parts[4] in ("services", "persistentvolumeclaims",
                             "configmaps", "secrets") and \
                m == "GET":
            o = others.get((parts[4], parts[3], parts[5]))
            return (200, o) if o else status(404, "not found")
        if path == "/api/v1/persistentvolumeclaims" and m == "GET":
            # Every namespace's, with a labelSelector of one term: KEY
            # (has the label) or KEY=VALUE.
            k, eq, v = q.get("labelSelector", [""])[0].partition("=")
            items = [copy.deepcopy(o) for (pl, _, _), o in others.items()
                     if pl == "persistentvolumeclaims" and
                     (not k or (k in (o["metadata"].get("labels") or {})
                                and (not eq or
                                     o["metadata"]["labels"][k] == v)))]
            return 200, {"kind": "PersistentVolumeClaimList",
                         "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(rv[0])},
                         "items": items}
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and \
                parts[4] in ("services", "configmaps",
                             "persistentvolumeclaims") and m == "DELETE":
            o = others.pop((parts[4], parts[3], parts[5]), None)
            if not o:
                return status(404, "not found")
            collect(o["metadata"]["uid"])
            return 200, o
        if parts[:4] == ["apis", "resource.k8s.io", "v1", "namespaces"] and \
                parts[5:6] == ["resourceclaims"]:
            return self.claims(parts[4], parts[6:], body)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and \
                parts[4] == "serviceaccounts" and parts[6] == "token" and \
                m == "POST":
            return self.token_request(parts[3], parts[5], body)
        if path == "/apis/authentication.k8s.io/v1/tokenreviews" and \
                m == "POST":
            return self.token_review(body)
        return status(404, "the server could not find the requested resource")

    def token_request(self, ns, sa, body):
        spec = (body or {}).get("spec") or {}
        ref = spec.get("boundObjectRef") or {}
        if (body or {}).get("kind") != "TokenRequest" or \
                ref.get("kind") != "Pod" or not spec.get("audiences"):
            return status(400, "a TokenRequest bound to a Pod, with "
                          "audiences")
        pod = pods.get((ns, ref.get("name")))
        if not pod or pod["metadata"]["uid"] != ref.get("uid"):
            return status(404, "pods \"%s\" not found" % ref.get("name"))
        tok = "fake-sa-token." + uuid.uuid4().hex
        sa_tokens[tok] = (ns, sa, ref["name"], ref["uid"],
                          list(spec["audiences"]))
        out = copy.deepcopy(body)
        out["status"] = {"token": tok,
                         "expirationTimestamp": "2026-12-31T00:00:00Z"}
        return 201, out

    def token_review(self, body):
        spec = (body or {}).get("spec") or {}
        out = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "metadata": {"creationTimestamp": None}, "spec": spec}
        t = sa_tokens.get(spec.get("token"))
        want = spec.get("audiences") or ["https://kubernetes.default.svc"]
        if not t:
            out["status"] = {"user": {}, "error": "invalid bearer token"}
            return 201, out
        ns, sa, name, uid, auds = t
        both = [a for a in want if a in auds]
        pod = pods.get((ns, name))
        if not both:
            out["status"] = {"user": {}, "error":
                             "[invalid bearer token, token audiences %s "
                             "is invalid for the target audiences %s]"
                             % (json.dumps(auds), json.dumps(want))}
        elif not pod or pod["metadata"]["uid"] != uid:
            out["status"] = {"user": {}, "error":
                             "[invalid bearer token, pod \"%s\" not found]"
                             % name}
        else:
            out["status"] = {
                "authenticated": True, "audiences": both,
                "user": {"username": "system:serviceaccount:%s:%s" % (ns, sa),
                         "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, ns + sa)),
                         "groups": ["system:serviceaccounts",
                                    "system:serviceaccounts:" + ns,
                                    "system:authenticated"],
                         "extra": {
                             "authentication.kubernetes.io/pod-name": [name],
                             "authentication.kubernetes.io/pod-uid": [uid]}}}
        return 201, out

    def pods(self, ns, rest, body, q):
        m = self.command
        if not rest:
            if m != "POST":
                return status(405, "method")
            if forbidden(ns):
                return status(403, "pods is forbidden: User \"system:"
                              "serviceaccount:cnlab:cnlabd\" cannot "
                              "create resource \"pods\" in API group "
                              "\"\" in the namespace \"%s\"" % ns)
            new_meta(body, ns)
            body.setdefault("status", {"phase": "Pending"})
            key = (ns, body["metadata"]["name"])
            if key in pods:
                return status(409, "pods \"%s\" already exists" % key[1])
            pods[key] = body
            pod_event("ADDED", body)
            return 201, body
        key = (ns, rest[0])
        pod = pods.get(key)
        if pod is None:
            return status(404, "pods \"%s\" not found" % rest[0])
        sub = rest[1] if len(rest) > 1 else None
        if sub is None and m == "GET":
            return 200, pod
        if sub is None and m == "PATCH":
            if not self.headers.get("Content-Type", "").startswith(
                    "application/merge-patch+json"):
                return status(415, "unsupported patch type")
            merge(pod, body)
            touch(pod)
            return 200, pod
        if sub is None and m == "DELETE":
            del pods[key]
            pod["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
            touch(pod, "DELETED")
            collect(pod["metadata"]["uid"])
            return 200, pod
        if sub == "log" and m == "GET":
            names = [c["name"] for c in pod["spec"]["containers"]]
            c = q.get("container", [names[0]])[0]
            if c not in names:
                return status(400, "container %s is not valid for pod %s"
                              % (c, rest[0]))
            if pod.get("status", {}).get("phase", "Pending") == "Pending":
                return status(400, "container \"%s\" in pod \"%s\" is "
                              "waiting to start: ContainerCreating"
                              % (c, rest[0]))
            lines = logs.get(key, [])
            if "sinceTime" in q:  # RFC 3339, seconds
                since = int(datetime.datetime.strptime(
                    q["sinceTime"][0], "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=datetime.timezone.utc).timestamp())
                lines = [x for x in lines if x[0] >= since]
            stamp = q.get("timestamps") == ["true"]
            text = "".join(
                (datetime.datetime.fromtimestamp(
                    sec, datetime.timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%S") + (".%09d" % ns).rstrip("0")
                 .rstrip(".") + "Z " if stamp else "") + line
                for sec, ns, line in lines)
            if "limitBytes" in q:
                text = text.encode()[:int(q["limitBytes"][0])].decode(
                    errors="ignore")
            return 200, text
        if sub == "status" and m == "PATCH":
            ct = self.headers.get("Content-Type", "")
            if ct.startswith("application/strategic-merge-patch+json"):
                strategic(pod, body)
            elif ct.startswith("application/merge-patch+json"):
                pod["status"].update(body.get("status", {}))
            else:
                return status(415, "unsupported patch type " + ct)
            touch(pod)
            return 200, pod
        if sub == "ephemeralcontainers" and m == "PATCH":
            # The one way to add a container to a pod after its making.
            add = body.get("spec", {}).get("ephemeralContainers", [])
            pod["spec"].setdefault("ephemeralContainers", []).extend(add)
            touch(pod)
            return 200, pod
        if sub == "binding" and m == "POST":
            if body.get("kind") != "Binding" or \
                    body.get("target", {}).get("kind") != "Node":
                return status(400, "not a Binding to a Node")
            uid = body.get("metadata", {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                return status(409, "Precondition failed: UID in precondition")
            if pod["spec"].get("nodeName"):
                return status(409, "pod %s is already assigned to node \"%s\""
                              % (rest[0], pod["spec"]["nodeName"]))
            if not any(n["metadata"]["name"] == body["target"]["name"]
                       for n in state["nodes"]):
                return status(404, "node not found")
            pod["spec"]["nodeName"] = body["target"]["name"]
            touch(pod)
            return 201, {"kind": "Status", "apiVersion": "v1",
                         "metadata": {}, "status": "Success", "code": 201}
        if sub == "eviction" and m == "POST":
            if body.get("kind") != "Eviction" or \
                    body.get("apiVersion") != "policy/v1":
                return status(400, "not a policy/v1 Eviction")
            for b in state.get("pdbs", []):
                if b["metadata"]["namespace"] == ns and selects(b, pod) and \
                        b["spec"].get("maxUnavailable") == 0:
                    return 429, {
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "code": 429,
                        "reason": "TooManyRequests",
                        "message": "Cannot evict pod as it would violate "
                                   "the pod's disruption budget.",
                        "details": {"causes": [{
                            "reason": "DisruptionBudget",
                            "message": "The disruption budget %s needs 1 "
                                       "healthy pods and has 1 currently"
                                       % b["metadata"]["name"]}]}}
            del pods[key]
            pod["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
            touch(pod, "DELETED")
            return 201, {"kind": "Status", "apiVersion": "v1",
                         "metadata": {}, "status": "Success", "code": 201}
        return status(405, "method not allowed")

    def tjs(self, plural, ns, rest, body):
        m = self.command
        tjs = crs[plural]
        if not rest and m == "POST":
            new_meta(body, ns)
            body["metadata"]["generation"] = 1
            key = (ns, body["metadata"]["name"])
            if key in tjs:
                return status(409, "already exists")
            tjs[key] = body
            pod_event("ADDED", body)
            return 201, body
        t = tjs.get((ns, rest[0])) if rest else None
        if t is None:
            return status(404, "trainingjobs \"%s\" not found"
                          % (rest[0] if rest else ""))
        if len(rest) == 1 and m == "GET":
            return 200, t
        if len(rest) == 1 and m == "DELETE":
            del tjs[(ns, rest[0])]
            touch(t, "DELETED")
            # The garbage collector: what it owns goes too.
            collect(t["metadata"]["uid"])
            return 200, t
        if rest[1:] == ["status"] and m == "PATCH":
            if not self.headers.get("Content-Type", "").startswith(
                    "application/merge-patch+json"):
                return status(415, "unsupported patch type")
            st = t.setdefault("status", {})
            for k, v in (body.get("status") or {}).items():
                if v is None:
                    st.pop(k, None)
                else:
                    st[k] = v
            touch(t)
            return 200, t
        return status(405, "method not allowed")

    def rolebindings(self, ns, rest, body):
        """kubectl create rolebinding: what a namespace lets cnlabd do."""
        m = self.command
        if not rest and m == "POST":
            new_meta(body, ns)
            if any(b["metadata"]["namespace"] == ns and
                   b["metadata"]["name"] == body["metadata"]["name"]
                   for b in rbac.objs["RoleBinding"]):
                return status(409, "rolebindings.rbac.authorization.k8s.io "
                              "\"%s\" already exists"
                              % body["metadata"]["name"])
            rbac.objs["RoleBinding"].append(body)
            return 201, body
        for b in rbac.objs["RoleBinding"]:
            if rest and b["metadata"]["namespace"] == ns and \
                    b["metadata"]["name"] == rest[0]:
                if m == "DELETE":
                    rbac.objs["RoleBinding"].remove(b)
                return 200, b
        return status(404, "rolebindings.rbac.authorization.k8s.io \"%s\" "
                      "not found" % (rest[0] if rest else ""))

    def claims(self, ns, rest, body):
        m = self.command
        if not rest and m == "POST":
            if forbidden(ns):
                return status(403, "resourceclaims is forbidden")
            new_meta(body, ns)
            claims[(ns, body["metadata"]["name"])] = body
            return 201, body
        c = claims.get((ns, rest[0])) if rest else None
        if c is None:
            return status(404, "resourceclaims \"%s\" not found"
                          % (rest[0] if rest else ""))
        if len(rest) == 1 and m == "GET":
            return 200, c
        if len(rest) == 1 and m == "DELETE":
            del claims[(ns, rest[0])]
            return 200, c
        if rest[1:] == ["status"] and m == "PUT":
            if body["metadata"].get("resourceVersion") != \
                    c["metadata"]["resourceVersion"]:
                return status(409, "Operation cannot be fulfilled on "
                              "resourceclaims.resource.k8s.io \"%s\": the "
                              "object has been modified; please apply your "
                              "changes to the latest version and try again"
                              % rest[0])
            if body.get("spec") != c.get("spec"):
                return status(422, "spec: field is immutable")
            c["status"] = body.get("status", {})
            c["metadata"]["resourceVersion"] = next_rv()
            return 200, c
        return status(405, "method not allowed")

    def watch(self, q):
        kind = KINDS.get(urllib.parse.urlparse(self.path).path, "Pod")
        if expire[0] and kind == "Pod":
            expire[0] = False
            code, obj = status(410, "too old resource version")
            self.record(410, None)
            return self.reply(410, obj)
        since = int(q.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(q.get("timeoutSeconds", ["5"])[0])
        self.record(200, None)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj):
            line = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        send({"type": "BOOKMARK", "object": {
            "kind": kind, "apiVersion": "v1",
            "metadata": {"resourceVersion": str(since)}}})
        sel = q.get("fieldSelector", [""])[0]
        import time
        end = time.time() + timeout
        with lock:
            while True:
                out = [(r, t, o) for (r, t, o) in events if r > since]
                for r, t, o in out:
                    since = r
                    if o.get("kind") != kind:
                        continue
                    if not fields_match(o, sel):
                        continue
                    lock.release()
                    try:
                        send({"type": t, "object": o})
                    finally:
                        lock.acquire()
                left = end - time.time()
                if left <= 0:
                    break
                changed.wait(min(left, 0.5))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def ws_send(self, op, payload):
        n = len(payload)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        self.wfile.write(head + payload)
        self.wfile.flush()

    def exec(self, ns, name, q):
        """A pod's exec as the API server and the kubelet serve it over a
        WebSocket: the refusals before the upgrade are plain replies."""
        with lock:
            pod = copy.deepcopy(pods.get((ns, name)))
        if self.command != "GET" or \
                self.headers.get("Upgrade", "").lower() != "websocket":
            return status(400, "Upgrade request required")
        if pod is None:
            return status(404, "pods \"%s\" not found" % name)
        names = [c["name"] for c in pod["spec"]["containers"]]
        cname = q.get("container", [names[0] if len(names) == 1 else ""])[0]
        if cname not in names:
            return status(400, "container %s is not valid for pod %s"
                          % (cname, name))
        if pod.get("status", {}).get("phase") != "Running":
            return status(400, "unable to upgrade connection: container "
                          "not found (\"%s\")" % cname)
        if not any(q.get(k) == ["true"] for k in ("stdin", "stdout",
                                                   "stderr")):
            return status(400, "you must specify at least 1 of stdin, "
                          "stdout, stderr")
        argv = q.get("command", [])
        if not argv:
            return status(400, "you must specify at least one command "
                          "for the container")
        offered = [p.strip() for p in self.headers.get(
            "Sec-WebSocket-Protocol", "").split(",")]
        proto = next((p for p in ("v5.channel.k8s.io", "v4.channel.k8s.io")
                      if p in offered), None)
        key = self.headers.get("Sec-WebSocket-Key", "")
        if not proto or len(base64.b64decode(key + "==")[:16]) != 16:
            return status(400, "unable to upgrade: unable to negotiate "
                          "protocol")
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode())
            .digest()).decode()
        self.record(101, None)
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", proto)
        self.end_headers()
        self.close_connection = True
        for ch in (1, 2, 3):  # each channel announced, empty
            self.ws_send(2, bytes([ch]))
        ctr = next(c for c in pod["spec"]["containers"] if c["name"] == cname)
        env = {e["name"]: e["value"] for e in ctr.get("env", [])
               if "value" in e}
        env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        # The image's own ENV, which the runtime adds to the pod's.
        env.setdefault("IMAGE_ONLY", "from-the-image")
        stdin = q.get("stdin") == ["true"]
        tmpdir = tempfile.mkdtemp(prefix="fake-exec-")
        run = container_argv(ns, pod, ctr, argv, tmpdir)
        try:
            if not shutil.which(argv[0], path=env["PATH"]) and \
                    not os.access(argv[0], os.X_OK):
                raise FileNotFoundError(argv[0])
            p = subprocess.Popen(run, stdin=subprocess.PIPE if stdin
                                 else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, cwd="/")
        except OSError as e:
            # runc's words, on the command's stdout; then 126.
            self.ws_send(2, b"\x01" + (
                "OCI runtime exec failed: exec failed: unable to start "
                "container process: exec: \"%s\": %s: unknown\r\n"
                % (argv[0], "executable file not found in $PATH"
                   if isinstance(e, FileNotFoundError) else e.strerror))
                .encode())
            code = 126
        else:
            sel = selectors.DefaultSelector()
            sel.register(p.stdout, selectors.EVENT_READ, 1)
            sel.register(p.stderr, selectors.EVENT_READ, 2)
            ws = WsReader(self) if stdin else None
            if ws:
                sel.register(self.connection, selectors.EVENT_READ, 0)
            open_ = 2
            try:
                while open_:
                    # Bytes the reader holds already come first.
                    ready = [(k, None) for k in sel.get_map().values()
                             if k.data == 0 and ws.buffered()] or \
                        sel.select()
                    for k, _ in ready:
                        if k.data == 0:
                            # The client's messages: channel 0 to the
                            # command's stdin; v5's close of channel 0
                            # (or a close frame, the end) ends it.
                            for op, msg in ws.messages():
                                if op == 8 or (op == 2 and msg[:1] ==
                                               b"\xff" and msg[1:2] ==
                                               b"\x00"):
                                    p.stdin.close()
                                    sel.unregister(self.connection)
                                    break
                                if op == 2 and msg[:1] == b"\x00":
                                    p.stdin.write(msg[1:])
                                    p.stdin.flush()
                            if ws.eof and not p.stdin.closed:
                                p.stdin.close()
                                sel.unregister(self.connection)
                            continue
                        data = os.read(k.fileobj.fileno(), 65536)
                        if not data:
                            sel.unregister(k.fileobj)
                            open_ -= 1
                        else:
                            self.ws_send(2, bytes([k.data]) + data)
            except OSError:  # the client went away: the command is killed
                p.kill()
            if p.stdin and not p.stdin.closed:
                try:
                    p.stdin.close()
                except OSError:
                    pass
            code = p.wait()
            code = 128 - code if code < 0 else code
        shutil.rmtree(tmpdir, ignore_errors=True)
        if code == 0:
            st = {"metadata": {}, "status": "Success"}
        else:
            st = {"metadata": {}, "status": "Failure",
                  "message": "command terminated with non-zero exit code: "
                             "error executing command %s, exit code %d"
                             % (json.dumps(argv), code),
                  "reason": "NonZeroExitCode",
                  "details": {"causes": [{"reason": "ExitCode",
                                          "message": str(code)}]}}
        try:
            self.ws_send(2, b"\x03" + json.dumps(st).encode())
            self.ws_send(8, struct.pack(">H", 1000))
        except OSError:
            pass

    def do(self):
        (res, body) = self.handle_one()
        if isinstance(res, tuple) and res and res[0] == "EXEC":
            res = self.exec(*res[1:])
            if res is None:
                return
            self.record(res[0], body)
            return self.reply(*res)
        if res is None:
            u = urllib.parse.urlparse(self.path)
            return self.watch(urllib.parse.parse_qs(u.query))
        code, obj = res
        self.record(code, body)
        self.reply(code, obj)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do


class Server(ThreadingHTTPServer):
    # A listen backlog of 5 (socketserver's) resets connections that a
    # benchmark's 16 clients open at once.
    request_queue_size = 128


srv = Server(("127.0.0.1", 0), H)
srv.daemon_threads = True
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
