#!/usr/bin/env python3
"""fake_naver.py - a loopback NAVER Cloud Platform Server (VPC) API for the
Naver burst's end-to-end test (burst_naver.sh).

It serves what cnlabd's Naver plugin calls, and is as strict as Naver's
API gateway and documentation where it matters:

  - every call carries x-ncp-apigw-timestamp (milliseconds, within five
    minutes of now), x-ncp-iam-access-key (the account's) and
    x-ncp-apigw-signature-v2: base64(HMAC-SHA256(secret, "METHOD
    PATH?QUERY\\nTIMESTAMP\\nACCESS-KEY")) over the request line exactly as
    sent; anything else is 401 {"error": {"errorCode": "200", "message":
    "Authentication Failed"}};
  - GET /vserver/v2/ACTION with regionCode=KR and responseFormatType=json;
  - createInitScript (name of 3..30 lowercase letters, digits and '-',
    English text only, a name taken refused), getInitScriptList,
    deleteInitScripts;
  - createServerInstances: the account's VPC and subnet, a GPU server
    product code, an image (serverImageProductCode or
    memberServerImageInstanceNo), networkInterfaceList.1's order 0, a
    server name of 3..30 (a name in use refused), an init script that
    exists, a description of at most 1000 bytes; the server is INIT and
    then RUN (its init script runs: fake_machine.py, so that its
    cnlab-agent joins cnlabd with its join token);
  - getServerInstanceList: by serverInstanceNoList.N, or vpcNo and
    serverName (matching a part of the name, as a search does), two
    servers a page whatever pageSize asks (totalRows the count);
  - stopServerInstances (only a running server: RUN with SHTDN, then
    NSTOP; the machine halts) and terminateServerInstances (only a stopped
    server, as Naver documents it; then gone).

The test steers it through files in its state directory:

  fail-run    lines "CODE" answered to the next createServerInstances, one
              a line: "stock" (refused: out of stock, in Naver's error
              document), 429, 503, or "lost" (the server is made but the
              answer is a 504: a retry must find it by its name)
  fail-all    while present, every call gets 503
  slow-stop   SECS: while present, a server stopping stops only SECS
              seconds after it was told to (else after a second)

and reads what happened in calls.log (one JSON object per request) and
servers.json (every server ever made, "deleted" once returned).

Usage: fake_naver.py STATE_DIR ACCESS_KEY SECRET_FILE VPC SUBNET PORT_FILE
"""
import base64
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_machine

STATE, ACCESS, SECRET_FILE, VPC, SUBNET, PORT_FILE = sys.argv[1:7]
SECRET = open(SECRET_FILE).read().strip()
GPUS = {
    "SVR.VSVR.GPU.T4.G001.C004.M020.NET.SSD.B050.G001": "fake:1xT4",
    "SVR.VSVR.GPU.T4.G002.C016.M080.NET.SSD.B050.G001": "fake:2xT4",
    # Not in CNLab's table: the test's account declares it (--type-specs).
    "SVR.VSVR.GPU.L4.G001.C008.M032.NET.SSD.B050.G001": "fake:1xL4",
}
NAME = re.compile(r"^[a-z][a-z0-9-]{1,28}[a-z0-9]$")
lock = threading.Lock()
servers = {}  # serverInstanceNo -> dict
scripts = {}  # initScriptNo -> dict
seq = [0]


def log(entry):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def gw_error(status, code, msg):
    return status, {"error": {"errorCode": code, "message": msg}}


def refuse(code, msg):
    return 400, {"responseError": {"returnCode": code, "returnMessage": msg}}


def ok(action, **kw):
    body = {"requestId": "%08x" % seq[0], "returnCode": "0",
            "returnMessage": "success"}
    body.update(kw)
    return 200, {action + "Response": body}


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


def code(c, name):
    return {"code": c, "codeName": name}


def advance(s):
    """A server moves on once a second has passed since it last did."""
    if time.time() - s["since"] < 1:
        return
    if s["st"] == "INIT":
        s["st"], s["since"] = "RUN", time.time()
    elif s["st"] == "RUN" and s["op"] == "SHTDN":
        slow = os.path.join(STATE, "slow-stop")
        if os.path.exists(slow) and \
                time.time() - s["since"] < float(open(slow).read()):
            return
        s["st"], s["op"], s["since"] = "NSTOP", "NULL", time.time()


def view(s):
    names = {"INIT": "init", "RUN": "running", "NSTOP": "stopped"}
    return {"serverInstanceNo": s["no"], "serverName": s["name"],
            "serverDescription": s["desc"], "cpuCount": 4,
            "memorySize": 21474836480, "zoneCode": "KR-1",
            "regionCode": "KR", "vpcNo": VPC, "subnetNo": SUBNET,
            "serverProductCode": s["product"],
            "serverInstanceStatus": code(s["st"], names.get(s["st"], "")),
            "serverInstanceOperation": code(s["op"], s["op"]),
            "serverInstanceStatusName": names.get(s["st"], "")
            + (" (shutting down)" if s["op"] == "SHTDN" else ""),
            "initScriptNo": s["script"], "isProtectServerTermination": False,
            "createDate": s["created"]}


def tags_of(s):
    return dict(w.split("=", 1) for w in s["desc"].split()[1:] if "=" in w)


def live():
    return [s for s in servers.values() if not s.get("deleted")]


def numbered(q, key):
    out, n = [], 1
    while "%s.%d" % (key, n) in q:
        out.append(q["%s.%d" % (key, n)])
        n += 1
    return out


def create_script(q):
    name, content = q.get("initScriptName", ""), q.get("initScriptContent")
    if not NAME.match(name):
        return refuse("1001001", "initScriptName: 3~30 lowercase letters, "
                      "numbers and '-'")
    if content is None or len(content) > 1024 * 1024 or \
            not content.isascii():
        return refuse("1001002", "initScriptContent: English text only, "
                      "at most 1024 KB")
    if any(x["name"] == name for x in scripts.values()):
        return refuse("1001003", "The init script name is already in use.")
    seq[0] += 1
    no = str(50000 + seq[0])
    scripts[no] = {"no": no, "name": name, "content": content}
    return ok("createInitScript", totalRows=1, initScriptList=[
        {"initScriptNo": no, "initScriptName": name,
         "osType": code("LNX", "LINUX")}])


def create_server(q):
    if q.get("vpcNo") != VPC or q.get("subnetNo") != SUBNET:
        return refuse("1002001", "vpcNo/subnetNo: not found")
    product = q.get("serverProductCode", "")
    if product not in GPUS:
        return refuse("1002002", "serverProductCode: invalid (%s)" % product)
    if not q.get("serverImageProductCode") and \
            not q.get("memberServerImageInstanceNo"):
        return refuse("1002003", "an image is required")
    if q.get("networkInterfaceList.1.networkInterfaceOrder") != "0":
        return refuse("1002004", "networkInterfaceList.1."
                      "networkInterfaceOrder: required, 0 for the first")
    name = q.get("serverName", "")
    if not NAME.match(name):
        return refuse("1002005", "serverName: 3~30 lowercase letters, "
                      "numbers and '-'")
    if any(s["name"] == name for s in live()):
        return refuse("1002006", "The server name is already in use.")
    script = q.get("initScriptNo", "")
    if script and script not in scripts:
        return refuse("1002007", "initScriptNo: not found")
    desc = q.get("serverDescription", "")
    if len(desc.encode()) > 1000:
        return refuse("1002008", "serverDescription: at most 1000 bytes")
    f = next_failure()
    if f == "stock":
        return refuse("1300001", "Creation failed: the server product "
                      "is out of stock (insufficient resources).")
    if f == "429":
        return gw_error(429, "420", "Rate Limited")
    if f == "503":
        return gw_error(503, "500", "Endpoint Error")
    seq[0] += 1
    no = str(9000000 + seq[0])
    s = {"no": no, "id": no, "name": name, "desc": desc, "product": product,
         "script": script, "st": "INIT", "op": "NULL", "since": time.time(),
         "created": datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S+0900"),
         "fee": q.get("feeSystemTypeCode", "")}
    servers[no] = s
    fake_machine.boot(STATE, no, GPUS[product],
                      scripts[script]["content"] if script else "", s)
    if f == "lost":
        return gw_error(504, "510", "Endpoint Timeout")
    return ok("createServerInstances", totalRows=1,
              serverInstanceList=[view(s)])


def list_servers(q):
    nos = numbered(q, "serverInstanceNoList")
    for s in live():
        advance(s)
    if nos:
        found = [servers[n] for n in nos
                 if n in servers and not servers[n].get("deleted")]
    else:
        if q.get("vpcNo", VPC) != VPC:
            found = []
        else:
            part = q.get("serverName", "")
            found = sorted((s for s in live() if part in s["name"]),
                           key=lambda s: s["no"])
    page = max(int(q.get("pageNo", "1") or 1), 1)
    chunk = found[(page - 1) * 2:page * 2]
    return ok("getServerInstanceList", totalRows=len(found),
              serverInstanceList=[view(s) for s in chunk])


def stop_or_return(action, q):
    nos = numbered(q, "serverInstanceNoList")
    if not nos:
        return refuse("1003001", "serverInstanceNoList.N: required")
    for n in nos:
        s = servers.get(n)
        if not s or s.get("deleted"):
            return refuse("1003002", "serverInstanceNo %s: not found" % n)
        advance(s)
        if action == "stopServerInstances" and \
                (s["st"] != "RUN" or s["op"] != "NULL"):
            return refuse("1003003", "Only a running server can be stopped "
                          "(%s, %s)." % (s["st"], s["op"]))
        if action == "terminateServerInstances" and s["st"] != "NSTOP":
            return refuse("1003004", "Only a stopped server can be "
                          "terminated.")
    for n in nos:
        s = servers[n]
        if action == "stopServerInstances":
            s["op"], s["since"] = "SHTDN", time.time()
            fake_machine.halt(STATE, s, tags_of(s).get("cnlab:node", ""))
        else:
            s["deleted"] = True
            s["st"] = "TERMT"
    return ok(action, totalRows=len(nos),
              serverInstanceList=[view(servers[n]) for n in nos])


def handle(action, q):
    if q.get("regionCode") != "KR":
        return refuse("1000001", "regionCode: invalid")
    if q.get("responseFormatType") != "json":
        return refuse("1000002", "this test serves json only")
    if action == "createInitScript":
        return create_script(q)
    if action == "getInitScriptList":
        name = q.get("initScriptName")
        found = [x for x in scripts.values() if not name or x["name"] == name]
        return ok(action, totalRows=len(found), initScriptList=[
            {"initScriptNo": x["no"], "initScriptName": x["name"]}
            for x in found])
    if action == "deleteInitScripts":
        for n in numbered(q, "initScriptNoList"):
            scripts.pop(n, None)
        return ok(action)
    if action == "createServerInstances":
        return create_server(q)
    if action == "getServerInstanceList":
        return list_servers(q)
    if action in ("stopServerInstances", "terminateServerInstances"):
        return stop_or_return(action, q)
    return gw_error(404, "300", "Not Found Exception")


def signed(method, target, headers):
    ts = headers.get("x-ncp-apigw-timestamp", "")
    key = headers.get("x-ncp-iam-access-key", "")
    sig = headers.get("x-ncp-apigw-signature-v2", "")
    if not ts.isdigit() or abs(int(ts) / 1000 - time.time()) > 300 or \
            key != ACCESS:
        return False
    msg = "%s %s\n%s\n%s" % (method, target, ts, key)
    want = base64.b64encode(hmac.new(SECRET.encode(), msg.encode(),
                                     hashlib.sha256).digest()).decode()
    return hmac.compare_digest(want, sig)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        action = u.path.rsplit("/", 1)[-1]
        with lock:
            entry = {"method": self.command, "action": action,
                     "query": {k: v for k, v in q.items()
                               if k != "initScriptContent"},
                     "at": datetime.datetime.now().timestamp()}
            if os.path.exists(os.path.join(STATE, "fail-all")):
                status, out = gw_error(503, "500", "Endpoint Error")
            elif not signed(self.command, self.path, self.headers):
                status, out = gw_error(401, "200", "Authentication Failed")
            elif self.command != "GET" or \
                    not u.path.startswith("/vserver/v2/"):
                status, out = gw_error(404, "300", "Not Found Exception")
            else:
                status, out = handle(action, q)
            entry["status"] = status
            if status != 200:
                entry["error"] = out
            log(entry)
            with open(os.path.join(STATE, "servers.json.tmp"), "w") as f:
                json.dump({n: view(s) | {"deleted": bool(s.get("deleted")),
                                         "fee": s["fee"],
                                         "tags": tags_of(s)}
                           for n, s in servers.items()}, f)
            os.replace(os.path.join(STATE, "servers.json.tmp"),
                       os.path.join(STATE, "servers.json"))
            with open(os.path.join(STATE, "scripts.json"), "w") as f:
                json.dump(sorted(x["name"] for x in scripts.values()), f)
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer


def stop(*_):
    with lock:
        fake_machine.halt_all(STATE, list(servers.values()),
                              lambda s: tags_of(s).get("cnlab:node", ""))
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
