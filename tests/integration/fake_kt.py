#!/usr/bin/env python3
"""fake_kt.py - a loopback KT Cloud server API (Apache CloudStack's API, as
KT's ucloud biz serves it) for the KT burst's end-to-end test
(burst_kt.sh).

It serves what cnlabd's KT plugin calls, and is as strict as CloudStack
where it matters:

  - GET /server/v1/client/api?command=...&apiKey=...&response=json&
    signature=...: the signature is CloudStack's (every other parameter
    URL-encoded, sorted by name, the whole lowercased, HMAC-SHA1 with the
    account's secret key, base64); anything else is 401 with
    {"errorresponse": {"errorcode": 401, "errortext": ...}};
  - deployVirtualMachine: the account's zone, a service offering it knows,
    a template, usageplantype, a host name of CloudStack's form not in use
    (431 otherwise), base64 user data of at most 4 KB; an asynchronous job
    that ends at the second queryAsyncJobResult; the VM is Starting, then
    Running (its user data runs: fake_machine.py, so that its cnlab-agent
    joins cnlabd with its join token);
  - listVirtualMachines: by id (431 when no such VM, as CloudStack
    answers), by name (a part of it, as a search does) or keyword, two a
    page whatever pagesize asks, "count" the total, {} when none;
  - destroyVirtualMachine (expunge): a job; the VM is gone.

The test steers it through files in its state directory:

  fail-run    lines "CODE" answered to the next deploys, one a line:
              "capacity" (the job fails with errorcode 533 and leaves the
              VM in state Error, as CloudStack does), 429, 530, or "lost"
              (the VM is made but the answer is a 504)
  fail-all    while present, every call gets 530

and reads what happened in calls.log and vms.json (every VM ever made,
"expunged" once destroyed).

Usage: fake_kt.py STATE_DIR API_KEY SECRET_FILE ZONE PORT_FILE
"""
import base64
import binascii
import datetime
import hashlib
import hmac
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_machine

STATE, API_KEY, SECRET_FILE, ZONE, PORT_FILE = sys.argv[1:6]
SECRET = open(SECRET_FILE).read().strip()
PATH = "/server/v1/client/api"
OFFERINGS = {
    "5b8a7f40-t4x1-4c3e-9d51-000000000001": "fake:1xT4",
    "5b8a7f40-t4x2-4c3e-9d51-000000000002": "fake:2xT4",
}
HOST = re.compile(r"^[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
lock = threading.Lock()
vms = {}
jobs = {}


def log(entry):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def error(command, code, text, status=None):
    return status or code, {command.lower() + "response": {
        "uuidList": [], "errorcode": code, "cserrorcode": 9999,
        "errortext": text}}


def next_failure():
    path = os.path.join(STATE, "fail-run")
    if not os.path.exists(path):
        return None
    lines = [x for x in open(path).read().splitlines() if x.strip()]
    if not lines:
        return None
    with open(path, "w") as w:
        w.write("".join(x + "\n" for x in lines[1:]))
    return lines[0].strip()


def view(v):
    return {"id": v["id"], "name": v["name"], "displayname": v["dn"],
            "state": v["state"], "zoneid": ZONE, "zonename": "KOR-Test",
            "serviceofferingid": v["offering"], "templateid": v["template"],
            "created": v["created"], "nic": [{"ipaddress": "127.0.0.1"}]}


def tags_of(v):
    return dict(w.split("=", 1) for w in v["dn"].split()[1:] if "=" in w)


def advance(v):
    if v["state"] == "Starting" and time.time() - v["since"] >= 1:
        v["state"] = "Running"


def new_job(result, fail=None):
    jid = str(uuid.uuid4())
    jobs[jid] = {"result": result, "fail": fail, "asked": 0}
    return jid


def deploy(q):
    cmd = "deployVirtualMachine"
    if q.get("zoneid") != ZONE:
        return error(cmd, 431, "Unable to execute API command "
                     "deployvirtualmachine due to invalid value. Invalid "
                     "parameter zoneid value=%s" % q.get("zoneid"))
    off = q.get("serviceofferingid", "")
    if off not in OFFERINGS:
        return error(cmd, 431, "Invalid parameter serviceofferingid "
                     "value=%s" % off)
    if not q.get("templateid"):
        return error(cmd, 431, "templateid is required")
    if q.get("usageplantype") not in ("hourly", "monthly"):
        return error(cmd, 431, "usageplantype: hourly or monthly")
    name = q.get("name", "")
    if not HOST.match(name):
        return error(cmd, 431, "Invalid name. Vm name can contain ASCII "
                     "letters 'a' through 'z', the digits '0' through '9', "
                     "and the hyphen ('-'), must be between 1 and 63 "
                     "characters long")
    if any(v["name"] == name and v["state"] not in ("Destroyed", "Error")
           for v in vms.values() if not v.get("expunged")):
        return error(cmd, 431, "The vm with hostName %s already exists "
                     "in the network domain" % name)
    ud = q.get("userdata", "")
    try:
        script = base64.b64decode(ud, validate=True).decode() if ud else ""
    except (binascii.Error, UnicodeDecodeError):
        return error(cmd, 431, "Userdata is not base64 encoded")
    if len(ud) > 4096:
        return error(cmd, 431, "User data is too long for an http GET "
                     "request")
    dn = q.get("displayname", "")
    if len(dn) > 255:
        return error(cmd, 431, "displayname: at most 255 characters")
    f = next_failure()
    if f == "429":
        return error(cmd, 429, "The given command 'deployVirtualMachine' "
                     "has reached its API limit")
    if f == "530":
        return error(cmd, 530, "Internal error executing command")
    vid = str(uuid.uuid4())
    v = {"id": vid, "name": name, "dn": dn, "offering": off,
         "template": q["templateid"], "state": "Starting",
         "since": time.time(),
         "created": datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S+0900")}
    vms[vid] = v
    if f == "capacity":
        v["state"] = "Error"
        jid = new_job(None, {"errorcode": 533, "errortext": "Unable to "
                             "create a deployment for VM[User|%s]" % name})
    else:
        fake_machine.boot(STATE, vid, OFFERINGS[off], script, v)
        jid = new_job(vid)
    if f == "lost":
        return 504, {"errorresponse": {"errorcode": 504,
                                       "errortext": "Gateway Time-out"}}
    return 200, {"deployvirtualmachineresponse": {"id": vid, "jobid": jid}}


def query_job(q):
    j = jobs.get(q.get("jobid", ""))
    if not j:
        return error("queryAsyncJobResult", 431, "Unable to find job")
    j["asked"] += 1
    out = {"jobid": q["jobid"], "jobstatus": 0, "jobprocstatus": 0,
           "jobresultcode": 0}
    if j["asked"] >= 2:
        if j["fail"]:
            out.update(jobstatus=2, jobresultcode=530,
                       jobresulttype="object", jobresult=j["fail"])
        else:
            out.update(jobstatus=1, jobresulttype="object")
            if j["result"] and j["result"] in vms:
                v = vms[j["result"]]
                advance(v)
                out["jobresult"] = {"virtualmachine": view(v)}
            else:
                out["jobresult"] = {"success": True}
    return 200, {"queryasyncjobresultresponse": out}


def list_vms(q):
    live = [v for v in vms.values() if not v.get("expunged")]
    for v in live:
        advance(v)
    if "id" in q:
        if q["id"] not in vms or vms[q["id"]].get("expunged"):
            return error("listVirtualMachines", 431, "Unable to execute API "
                         "command listvirtualmachines due to invalid value. "
                         "Invalid parameter id value=%s due to incorrect "
                         "long value format, or entity does not exist" %
                         q["id"])
        found = [vms[q["id"]]]
    else:
        found = [v for v in live
                 if (not q.get("zoneid") or q["zoneid"] == ZONE)
                 and q.get("name", "") in v["name"]
                 and (q.get("keyword", "") in v["name"]
                      or q.get("keyword", "") in v["dn"])]
        found.sort(key=lambda v: v["created"] + v["id"])
    page = max(int(q.get("page", "1") or 1), 1)
    chunk = found[(page - 1) * 2:page * 2]
    if not found:
        return 200, {"listvirtualmachinesresponse": {}}
    return 200, {"listvirtualmachinesresponse": {
        "count": len(found), "virtualmachine": [view(v) for v in chunk]}}


def destroy(q):
    v = vms.get(q.get("id", ""))
    if not v or v.get("expunged"):
        return error("destroyVirtualMachine", 431, "Unable to execute API "
                     "command destroyvirtualmachine due to invalid value. "
                     "Invalid parameter id value=%s" % q.get("id"))
    if q.get("expunge") != "true":
        return error("destroyVirtualMachine", 431, "this test wants expunge")
    fake_machine.halt(STATE, v, tags_of(v).get("cnlab:node", ""))
    v["state"] = "Expunging"
    v["expunged"] = True
    return 200, {"destroyvirtualmachineresponse": {"jobid": new_job(None)}}


def handle(q):
    cmd = q.get("command", "")
    if q.get("response") != "json":
        return error(cmd, 431, "this test serves json only")
    if cmd == "deployVirtualMachine":
        return deploy(q)
    if cmd == "queryAsyncJobResult":
        return query_job(q)
    if cmd == "listVirtualMachines":
        return list_vms(q)
    if cmd == "destroyVirtualMachine":
        return destroy(q)
    return error(cmd, 432, "The given command does not exist or it is not "
                 "available for the user")


def signed(q):
    sig = q.get("signature", "")
    if q.get("apiKey") != API_KEY or not sig:
        return False
    parts = sorted((k, v) for k, v in q.items() if k != "signature")
    parts.sort(key=lambda kv: kv[0].lower())
    s = "&".join("%s=%s" % (k, urllib.parse.quote(v, safe=""))
                 for k, v in parts).lower()
    want = base64.b64encode(hmac.new(SECRET.encode(), s.encode(),
                                     hashlib.sha1).digest()).decode()
    return hmac.compare_digest(want, sig)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        u = urllib.parse.urlsplit(self.path)
        pairs = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
        q = dict(pairs)
        with lock:
            entry = {"method": self.command, "command": q.get("command"),
                     "query": {k: v for k, v in q.items()
                               if k not in ("userdata", "signature")},
                     "at": datetime.datetime.now().timestamp()}
            if os.path.exists(os.path.join(STATE, "fail-all")):
                status, out = error(q.get("command", ""), 530,
                                    "Internal error executing command")
            elif u.path != PATH or self.command != "GET":
                status, out = 404, {"errorresponse": {"errorcode": 404,
                                                      "errortext": "no"}}
            elif len(pairs) != len(q) or not signed(q):
                status, out = 401, {"errorresponse": {
                    "errorcode": 401, "errortext": "unable to verify user "
                    "credentials and/or request signature"}}
            else:
                status, out = handle(q)
            entry["status"] = status
            if status != 200:
                entry["error"] = out
            log(entry)
            with open(os.path.join(STATE, "vms.json.tmp"), "w") as f:
                json.dump({i: view(v) | {"expunged": bool(v.get("expunged")),
                                         "tags": tags_of(v)}
                           for i, v in vms.items()}, f)
            os.replace(os.path.join(STATE, "vms.json.tmp"),
                       os.path.join(STATE, "vms.json"))
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer


def stop(*_):
    with lock:
        fake_machine.halt_all(STATE, list(vms.values()),
                              lambda v: tags_of(v).get("cnlab:node", ""))
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
