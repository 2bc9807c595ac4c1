#!/usr/bin/env python3
"""fake_idp.py - a small OpenID Connect provider for sessions.sh.

Usage: fake_idp.py PORTFILE KEY.pem CLIENT_ID WHOFILE

Listens on 127.0.0.1 (a free port, written to PORTFILE once listening);
its issuer is http://127.0.0.1:PORT.  The user who "signs in" is read
from WHOFILE at each /authorize ("SUB NAME" on one line), so that a test
can change who the browser is.

  GET  /authorize  response_type=code, client_id, redirect_uri (loopback
                   only), state, code_challenge, code_challenge_method=S256
                   -> 302 to redirect_uri?code=...&state=... (the state as
                   given).  Anything else -> 400.
  POST /token      grant_type=authorization_code, code (single use),
                   redirect_uri and client_id as at /authorize, and a
                   code_verifier whose S256 is the challenge -> 200
                   {"id_token": RS256 JWT, ...}; else 400
                   {"error": "invalid_grant"}.

ID tokens are signed with `openssl dgst -sha256 -sign KEY.pem` (kid "k1");
the JWKS is the test's to write (it knows the key).
"""
import base64
import hashlib
import http.server
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.parse

PORTFILE, KEY, CLIENT_ID, WHOFILE = sys.argv[1:5]
codes = {}


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def id_token(issuer, sub, name):
    now = int(time.time())
    h = b64url(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
    p = b64url(json.dumps({
        "iss": issuer, "aud": CLIENT_ID, "sub": sub,
        "preferred_username": name, "email": name + "@example.org",
        "iat": now, "exp": now + 600,
    }).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY],
                         input=(h + "." + p).encode(), capture_output=True,
                         check=True).stdout
    return h + "." + p + "." + b64url(sig)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, obj, location=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        if u.path != "/authorize":
            return self.reply(404, {"error": "not_found"})
        redirect = q.get("redirect_uri", "")
        if (q.get("response_type") != "code"
                or q.get("client_id") != CLIENT_ID
                or q.get("code_challenge_method") != "S256"
                or not q.get("code_challenge") or not q.get("state")
                or not redirect.startswith("http://127.0.0.1:")):
            return self.reply(400, {"error": "invalid_request"})
        with open(WHOFILE) as f:
            sub, name = f.read().split()
        code = secrets.token_urlsafe(16)
        codes[code] = (q["code_challenge"], redirect, sub, name)
        loc = redirect + "?" + urllib.parse.urlencode(
            {"code": code, "state": q["state"]})
        self.reply(302, {}, location=loc)

    def do_POST(self):
        if self.path != "/token":
            return self.reply(404, {"error": "not_found"})
        n = int(self.headers.get("Content-Length", "0"))
        q = dict(urllib.parse.parse_qsl(self.rfile.read(n).decode()))
        got = codes.pop(q.get("code", ""), None)  # single use
        if got is None or q.get("grant_type") != "authorization_code":
            return self.reply(400, {"error": "invalid_grant"})
        challenge, redirect, sub, name = got
        verifier = q.get("code_verifier", "")
        if (q.get("redirect_uri") != redirect
                or q.get("client_id") != CLIENT_ID
                or b64url(hashlib.sha256(verifier.encode()).digest())
                != challenge):
            return self.reply(400, {"error": "invalid_grant"})
        issuer = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.reply(200, {"id_token": id_token(issuer, sub, name),
                         "token_type": "Bearer"})


srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
srv.serve_forever()
