#!/usr/bin/env python3
"""fake_azure.py - a loopback Azure (Entra ID's token endpoint and Azure
Resource Manager's Microsoft.Compute virtual machines) for the Azure
burst's end-to-end test (burst_azure.sh).

As strict as Azure where it matters:

  - POST /TENANT/oauth2/v2.0/token: the client credentials grant, the
    client id and secret checked, the scope
    https://management.azure.com/.default; else 401 invalid_client;
  - ARM calls need a valid bearer token (else 401
    InvalidAuthenticationToken) and the api-version; a VM PUT is checked
    as ARM checks it (location, a known size, an image reference, an OS
    profile with a password or key, customData in base64, a NIC on the
    account's subnet, a spot VM's eviction policy and billing profile,
    tag names), is idempotent on the VM's name, and answers with the VM
    "Creating": the VM is made on the next read, or fails there with
    AllocationFailed (as ARM reports it: provisioningState Failed and a
    ProvisioningState/failed/CODE status in the instance view);
  - GET a VM (with $expand=instanceView: PowerState), the list of the
    resource group's VMs (two a page, with a nextLink), DELETE a VM.
  - a VM is the machine image booting: its customData is run
    (fake_machine.py), so that its cnlab-agent joins cnlabd.

The test steers it through files in its state directory:

  fail-run    lines "CODE [market]" answered to the next VM PUTs, one line
              each (SkuNotAvailable: 409 to the PUT; AllocationFailed:
              the VM fails as it is made; 429 or 503: that status)
  fail-all    while present, every call gets 503
  interrupt   VM names, one per line: evicted if spot (deallocated, the
              machine gone)

and reads calls.log and vms.json (every VM made, "deleted" once gone).

Usage: fake_azure.py STATE_DIR TENANT CLIENT_ID CLIENT_SECRET SUBNET PORT_FILE
"""
import base64
import datetime
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_machine

STATE, TENANT, CLIENT, SECRET, SUBNET, PORT_FILE = sys.argv[1:7]
GPUS = {
    "Standard_NC4as_T4_v3": "fake:1xT4",
    "Standard_NV36ads_A10_v5": "fake:1xA10",
    "Standard_NC24ads_A100_v4": "fake:1xA100-80GB",
}
lock = threading.Lock()
vms = {}  # name -> dict
bearers = {}
port = [0]


def log(entry):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def arm_error(status, code, msg):
    return status, {"error": {"code": code, "message": msg}}


def token(form):
    if form.get("grant_type") != "client_credentials" or \
            form.get("client_id") != CLIENT or \
            form.get("client_secret") != SECRET:
        return 401, {"error": "invalid_client",
                     "error_description": "AADSTS7000215: Invalid client "
                     "secret provided."}
    if form.get("scope") != "https://management.azure.com/.default":
        return 400, {"error": "invalid_scope",
                     "error_description": "AADSTS70011: invalid scope"}
    tok = "eyJ0eXAiOiJKV1Qi." + secrets.token_urlsafe(32)
    bearers[tok] = time.time() + 3599
    return 200, {"token_type": "Bearer", "expires_in": 3599,
                 "ext_expires_in": 3599, "access_token": tok}


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


def view(v, expand):
    out = {k: v[k] for k in ("id", "name", "location", "tags", "type")}
    props = dict(v["properties"])
    props["osProfile"] = {k: x for k, x in props["osProfile"].items()
                          if k not in ("adminPassword", "customData")}
    if expand:
        st = [{"code": "ProvisioningState/" + (
            "failed/" + v["fail"] if v.get("fail") else
            props["provisioningState"].lower()),
            "level": "Error" if v.get("fail") else "Info",
            "message": "Allocation failed. We do not have sufficient "
                       "capacity for the requested VM size in this region."
            if v.get("fail") else ""}]
        if v.get("power"):
            st.append({"code": "PowerState/" + v["power"]})
        props["instanceView"] = {"statuses": st}
    out["properties"] = props
    return out


def settle(v):
    """A VM being made is made (or fails) when read."""
    p = v["properties"]
    if p["provisioningState"] != "Creating":
        return
    if v.get("fail"):
        p["provisioningState"] = "Failed"
        return
    p["provisioningState"] = "Succeeded"
    v["power"] = "running"
    fake_machine.boot(STATE, v["name"], GPUS[p["hardwareProfile"]["vmSize"]],
                      v["user_data"], v)


def evict():
    path = os.path.join(STATE, "interrupt")
    if not os.path.exists(path):
        return
    for name in open(path).read().split():
        v = vms.get(name)
        if v and not v.get("deleted") and v.get("spot") and \
                v.get("power") == "running":
            v["power"] = "deallocated"
            fake_machine.halt(STATE, v, v["tags"].get("cnlab:node", ""))


def put_vm(rg_path, name, body):
    p = body.get("properties") or {}
    if body.get("location") != "eastus":
        return arm_error(400, "InvalidParameter", "location")
    size = (p.get("hardwareProfile") or {}).get("vmSize", "")
    if size not in GPUS:
        return arm_error(400, "InvalidParameter", "The requested VM size "
                         "%s is not available in the current region." % size)
    img = (p.get("storageProfile") or {}).get("imageReference") or {}
    if not img.get("id") and not all(img.get(k) for k in
                                      ("publisher", "offer", "sku",
                                       "version")):
        return arm_error(400, "InvalidParameter", "imageReference")
    osp = p.get("osProfile") or {}
    if osp.get("computerName") != name or not osp.get("adminUsername") or \
            not (osp.get("adminPassword") or (osp.get("linuxConfiguration")
                                              or {}).get("ssh")):
        return arm_error(400, "InvalidParameter", "osProfile")
    pw = osp.get("adminPassword", "")
    if pw and (len(pw) < 12 or not re.search(r"[A-Z]", pw) or
               not re.search(r"[a-z]", pw) or not re.search(r"[0-9]", pw) or
               not re.search(r"[^A-Za-z0-9]", pw)):
        return arm_error(400, "InvalidParameter", "The supplied password "
                         "must be between 12-123 characters long and must "
                         "satisfy at least 3 of password complexity")
    try:
        ud = base64.b64decode(osp.get("customData", ""), validate=True)\
            .decode()
    except ValueError:
        return arm_error(400, "InvalidParameter", "customData")
    net = p.get("networkProfile") or {}
    try:
        subnet = net["networkInterfaceConfigurations"][0]["properties"][
            "ipConfigurations"][0]["properties"]["subnet"]["id"]
    except (KeyError, IndexError, TypeError):
        subnet = ""
    if not net.get("networkApiVersion") or subnet != SUBNET:
        return arm_error(400, "InvalidParameter", "networkProfile: the "
                         "subnet '%s' was not found" % subnet)
    spot = p.get("priority") == "Spot"
    if spot and (p.get("evictionPolicy") not in ("Deallocate", "Delete") or
                 (p.get("billingProfile") or {}).get("maxPrice") is None):
        return arm_error(400, "InvalidParameter", "Spot VMs need an "
                         "evictionPolicy and a billingProfile")
    tags = body.get("tags") or {}
    for k in tags:
        if re.search(r"[<>%&\\?/]", k):
            return arm_error(400, "InvalidTagNameCharacters", k)
    if name in vms and not vms[name].get("deleted"):
        return 200, view(vms[name], False)  # a PUT again: the same VM
    f = next_failure("spot" if spot else "on-demand")
    if f and f[0] == "429":
        return arm_error(429, "TooManyRequests", "The request is being "
                         "throttled.")
    if f and f[0] == "503":
        return arm_error(503, "ServiceUnavailable", "retry later")
    if f and f[0] != "AllocationFailed":
        return arm_error(409, f[0], "The requested size for resource '%s' "
                         "is currently not available in location 'eastus'"
                         % name)
    props = json.loads(json.dumps(p))
    props["provisioningState"] = "Creating"
    v = {"id": rg_path + "/providers/Microsoft.Compute/virtualMachines/" +
         name, "name": name, "type": "Microsoft.Compute/virtualMachines",
         "location": "eastus", "tags": tags, "properties": props,
         "spot": spot, "user_data": ud, "size": size,
         "fail": f[0] if f else None}
    vms[name] = v
    return 201, view(v, False)


def handle(method, path, query, body):
    m = re.match(r"^(/subscriptions/[0-9a-f-]+/resourceGroups/[\w.()-]+)"
                 r"/providers/Microsoft\.Compute/virtualMachines(?:/([^/]+))?$",
                 path)
    if not m:
        return arm_error(404, "InvalidResourceType", path)
    if query.get("api-version") != "2024-03-01":
        return arm_error(400, "InvalidApiVersionParameter", "api-version")
    rg_path, name = m.group(1), m.group(2)
    evict()
    if not name and method == "GET":
        live = sorted(n for n, v in vms.items() if not v.get("deleted"))
        start = int(query.get("$skiptoken", "0"))
        out = {"value": [view(vms[n], False) for n in live[start:start + 2]]}
        if start + 2 < len(live):
            out["nextLink"] = ("http://127.0.0.1:%d%s?api-version=2024-03-01"
                               "&$skiptoken=%d" % (port[0], path, start + 2))
        return 200, out
    if method == "PUT" and name:
        return put_vm(rg_path, name, body or {})
    v = vms.get(name)
    if not v or v.get("deleted"):
        return arm_error(404, "ResourceNotFound", "The Resource "
                         "'Microsoft.Compute/virtualMachines/%s' under "
                         "resource group was not found." % name)
    if method == "GET":
        settle(v)
        return 200, view(v, query.get("$expand") == "instanceView")
    if method == "DELETE":
        fake_machine.halt(STATE, v, v["tags"].get("cnlab:node", ""))
        v["deleted"] = True
        v["power"] = "deleted"
        return 202, None
    return arm_error(405, "MethodNotAllowed", method)


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
                status, out = arm_error(503, "ServiceUnavailable",
                                        "retry later")
            elif u.path == "/%s/oauth2/v2.0/token" % TENANT:
                status, out = token(dict(urllib.parse.parse_qsl(
                    raw.decode())))
                entry["grant"] = status
            else:
                auth = self.headers.get("Authorization", "")
                tok = auth[7:] if auth.startswith("Bearer ") else ""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = "bad"
                if bearers.get(tok, 0) <= time.time():
                    status, out = arm_error(401, "InvalidAuthenticationToken",
                                            "The access token is invalid.")
                elif body == "bad":
                    status, out = arm_error(400, "InvalidRequestContent",
                                            "not JSON")
                else:
                    status, out = handle(self.command, u.path, query, body)
                if isinstance(body, dict):
                    b = json.loads(json.dumps(body))
                    osp = (b.get("properties") or {}).get("osProfile") or {}
                    osp.pop("adminPassword", None)
                    osp["customData"] = "customData" in osp
                    entry["body"] = b
            entry["status"] = status
            log(entry)
            with open(os.path.join(STATE, "vms.json.tmp"), "w") as f:
                json.dump({n: {k: x for k, x in v.items()
                               if k not in ("proc", "user_data")}
                           for n, v in vms.items()}, f)
            os.replace(os.path.join(STATE, "vms.json.tmp"),
                       os.path.join(STATE, "vms.json"))
        data = json.dumps(out).encode() if out is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = answer


def stop(*_):
    with lock:
        fake_machine.halt_all(STATE, list(vms.values()),
                              lambda i: i["tags"].get("cnlab:node", ""))
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
port[0] = srv.server_address[1]
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(port[0]))
os.replace(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
