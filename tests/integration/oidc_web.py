#!/usr/bin/env python3
"""oidc_web.py - the dashboard's single sign-on (GET /v1/auth/oidc/start,
GET /v1/auth/oidc/callback), run against a real cnlabd and the fake
identity provider (fake_idp.py) over loopback, as an attacker would:

  - the flow: start answers 302 to the provider with state and an S256
    challenge (never the verifier), and sets a short-lived HttpOnly
    SameSite=Lax pre-login cookie; the provider's redirect to the callback
    answers 302 to the return_to path with the dashboard's session cookie
    (HttpOnly, SameSite=Strict, no token in the body), and that cookie
    works as a session (whoami, csrf) of the user the ID token names;
  - refused (no session cookie set), each: the same callback again (a
    reused state), a forged state (and the sign-in is then spent), no
    pre-login cookie, a made-up cookie, an error from the provider, a code
    obtained by another sign-in (bound to another verifier), a code used
    once already, a disabled user;
  - a browser's refused callback (Accept: text/html) keeps its status and
    sends the browser back to the form with a fixed reason code only;
  - open redirects: return_to that is not a local path (//host, scheme:,
    backslashes, control bytes) is a 400 at the start;
  - over TLS: the dashboard's cookie is __Host-cnlab_ui with Secure and
    the plain name is refused there; the sign-on's cookie is Secure;
  - the audit log records the sign-in ("auth.oidc").

Prints "ok ..." / "FAIL ..." lines, exits 1 on a failure.  Timeouts only
guard against a hung daemon; nothing asserts how long anything took.

Usage: oidc_web.py CNLABD
"""
import base64
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.parse

from testlib import bad, die, ok, status, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def req(url, method="GET", headers=None, body=None):
    """One request, no redirect followed: (status, headers list, body)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        c = http.client.HTTPSConnection(
            u.hostname, u.port, timeout=60,
            context=ssl._create_unverified_context())
    else:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    path = u.path + ("?" + u.query if u.query else "")
    c.request(method, path, body, headers or {})
    r = c.getresponse()
    data = r.read().decode(errors="replace")
    hs = r.getheaders()
    c.close()
    return r.status, hs, data


def header(hs, name):
    return [v for k, v in hs if k.lower() == name.lower()]


def cookie_of(hs, name):
    """The Set-Cookie line for @name, or None."""
    for v in header(hs, "Set-Cookie"):
        if v.startswith(name + "="):
            return v
    return None


class Flow:
    """One browser's sign-in: start, the provider, the callback."""

    def __init__(self, base, return_to=None):
        self.base = base
        q = "" if return_to is None else "?return_to=" + \
            urllib.parse.quote(return_to, safe="")
        self.st, self.hs, self.body = req(base + "/v1/auth/oidc/start" + q)
        self.location = (header(self.hs, "Location") or [""])[0]
        sc = cookie_of(self.hs, "cnlab_oidc") or ""
        m = re.match(r"cnlab_oidc=([^;]+)", sc)
        self.cookie_line = sc
        self.cookie = m.group(1) if m else None
        self.query = dict(urllib.parse.parse_qsl(
            urllib.parse.urlsplit(self.location).query))

    def authorize(self):
        """The provider's answer: the callback URL with code and state."""
        st, hs, _ = req(self.location)
        if st != 302:
            die("the fake IdP answered %d" % st)
        cb = header(hs, "Location")[0]
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(cb).query))
        return cb, q["code"], q["state"]

    def callback(self, query, cookie=True):
        h = {}
        if cookie is True and self.cookie:
            h["Cookie"] = "cnlab_oidc=" + self.cookie
        elif isinstance(cookie, str):
            h["Cookie"] = cookie
        return req(self.base + "/v1/auth/oidc/callback?" +
                    urllib.parse.urlencode(query), headers=h)


def refused(name, res, status_want, words):
    st, hs, body = res
    ui = cookie_of(hs, "cnlab_ui")
    try:
        msg = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        msg = body
    if st == status_want and not ui and words in msg:
        ok("%s: %d (%s)" % (name, st, msg[:80]))
    else:
        bad("%s: %d %r cookie=%r" % (name, st, body[:300], ui))


def main():
    if len(sys.argv) != 2:
        print("usage: oidc_web.py CNLABD", file=sys.stderr)
        sys.exit(2)
    tmp = tempfile.mkdtemp(prefix="cnlab-oidcweb-")
    procs = []
    try:
        run(tmp, procs)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status())


def run(tmp, procs):
    key = os.path.join(tmp, "idp.pem")
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True,
                   capture_output=True)
    mod = subprocess.run(["openssl", "rsa", "-in", key, "-noout",
                          "-modulus"], check=True, capture_output=True,
                         text=True).stdout.strip().split("=", 1)[1]
    with open(os.path.join(tmp, "jwks.json"), "w") as f:
        json.dump({"keys": [{"kty": "RSA", "kid": "k1", "use": "sig",
                             "alg": "RS256",
                             "n": b64url(bytes.fromhex(mod)),
                             "e": "AQAB"}]}, f)
    who = os.path.join(tmp, "who")
    with open(who, "w") as f:
        f.write("sub-ada ada\n")
    portfile = os.path.join(tmp, "idp.port")
    procs.append(subprocess.Popen([sys.executable,
                                   os.path.join(HERE, "fake_idp.py"),
                                   portfile, key, "cnlab-web", who]))
    wait_for("the fake IdP", lambda: os.path.exists(portfile))
    idp = "http://127.0.0.1:" + open(portfile).read().strip()
    conf = os.path.join(tmp, "cnlabd.conf")
    with open(conf, "w") as f:
        f.write("oidc_issuer = %s\noidc_audience = cnlab-web\n"
                "oidc_jwks_file = %s\noidc_authorization_endpoint = "
                "%s/authorize\noidc_token_endpoint = %s/token\n"
                % (idp, os.path.join(tmp, "jwks.json"), idp, idp))
    env = dict(os.environ, HOME=tmp,
               CNLAB_JWT_SECRET="integration-test-secret-0123456789abcdef",
               CNLAB_ADMIN_PASSWORD="hunter2-but-longer")
    for k in ("CNLAB_SERVER", "CNLAB_TOKEN", "CNLAB_CONFIG"):
        env.pop(k, None)
    out = os.path.join(tmp, "out")
    procs.append(subprocess.Popen(
        [sys.argv[1], "--data-dir", os.path.join(tmp, "d"), "--listen",
         "127.0.0.1:0", "--bootstrap-admin", "root", "--config", conf],
        stdout=open(out, "w"), stderr=open(os.path.join(tmp, "err"), "w"),
        env=env))
    m = wait_for("cnlabd", lambda: re.search(
        r"^listening on 127\.0\.0\.1:(\d+)$", open(out).read(), re.M))
    base = "http://127.0.0.1:" + m.group(1)

    # --- the flow ------------------------------------------------------------
    f = Flow(base, "/ui/#/queues")
    q = f.query
    if (f.st == 302 and f.location.startswith(idp + "/authorize?") and
            q.get("response_type") == "code" and
            q.get("client_id") == "cnlab-web" and
            q.get("code_challenge_method") == "S256" and
            len(q.get("code_challenge", "")) == 43 and
            len(q.get("state", "")) >= 32 and
            q.get("redirect_uri") == base + "/v1/auth/oidc/callback" and
            "code_verifier" not in f.location):
        ok("start: 302 to the provider with state and an S256 challenge")
    else:
        bad("start: %d %s %s" % (f.st, f.location, f.body))
    if header(f.hs, "Cache-Control") == ["no-store"]:
        ok("start: Cache-Control: no-store (once)")
    else:
        bad("start: Cache-Control %s" % header(f.hs, "Cache-Control"))
    cl = f.cookie_line
    if (f.cookie and "HttpOnly" in cl and "SameSite=Lax" in cl and
            "Path=/v1/auth/oidc/" in cl and "Max-Age=600" in cl):
        ok("start: the pre-login cookie is HttpOnly, SameSite=Lax, "
           "Path=/v1/auth/oidc/, 10 minutes")
    else:
        bad("start: pre-login cookie %r" % cl)
    cb, code, state = f.authorize()
    res = f.callback({"code": code, "state": state})
    st, hs, body = res
    ui = cookie_of(hs, "cnlab_ui") or ""
    m = re.match(r"cnlab_ui=([^;]+);", ui)
    if (st == 302 and header(hs, "Location") == ["/ui/#/queues"] and m and
            "HttpOnly" in ui and "SameSite=Strict" in ui and "Path=/;" in ui
            and (cookie_of(hs, "cnlab_oidc") or "").startswith(
                "cnlab_oidc=;") and m.group(1) not in body):
        ok("callback: 302 to return_to with the session cookie (HttpOnly, "
           "SameSite=Strict), pre-login cookie cleared, no token in the "
           "body")
    else:
        bad("callback: %d %s %s %r" % (st, hs, body, ui))
    sess = m.group(1) if m else "none"
    st, _, body = req(base + "/v1/auth/whoami",
                       headers={"Cookie": "cnlab_ui=" + sess})
    if st == 200 and json.loads(body).get("name") == "ada":
        ok("the cookie is a session of the ID token's user (ada)")
    else:
        bad("whoami with the cookie: %d %s" % (st, body))
    st, _, body = req(base + "/v1/auth/csrf",
                       headers={"Cookie": "cnlab_ui=" + sess})
    if st == 200 and len(json.loads(body).get("csrf", "")) == 64:
        ok("GET /v1/auth/csrf gives the page its CSRF token")
    else:
        bad("csrf: %d %s" % (st, body))

    # --- replays and forgeries ------------------------------------------------
    refused("the same callback again (reused state)",
            f.callback({"code": code, "state": state}), 400,
            "already used")
    f2 = Flow(base)
    _, code2, state2 = f2.authorize()
    refused("a forged state", f2.callback({"code": code2, "state": "f" * 64}),
            400, "\"state\"")
    refused("the right state after a forged one (the sign-in is spent)",
            f2.callback({"code": code2, "state": state2}), 400,
            "already used")
    # A browser (Accept: text/html) is sent back to the sign-in form with
    # the reason's code only; the status is the refusal's.
    f2b = Flow(base)
    _, code2b, _ = f2b.authorize()
    st, hs, body = req(base + "/v1/auth/oidc/callback?" + urllib.parse.urlencode(
        {"code": code2b, "state": "<script>x</script>"}),
        headers={"Cookie": "cnlab_oidc=" + f2b.cookie,
                 "Accept": "text/html,application/xhtml+xml"})
    ctype = (header(hs, "Content-Type") or [""])[0]
    if (st == 400 and ctype.startswith("text/html") and
            'url=/ui/?sso_error=state"' in body and "script" not in body
            and not cookie_of(hs, "cnlab_ui") and
            "default-src 'none'" in " ".join(
                header(hs, "Content-Security-Policy"))):
        ok("a browser's refused callback: 400, a page back to the form "
           "(sso_error=state), nothing of the request echoed")
    else:
        bad("browser refusal: %d %s %s" % (st, hs, body))
    f3 = Flow(base)
    _, code3, state3 = f3.authorize()
    refused("no pre-login cookie",
            f3.callback({"code": code3, "state": state3}, cookie=None), 400,
            "cnlab_oidc")
    refused("a made-up pre-login cookie",
            f3.callback({"code": code3, "state": state3},
                        cookie="cnlab_oidc=" + "0" * 64), 400,
            "no sign-in")
    f4 = Flow(base)
    refused("an error from the provider",
            f4.callback({"error": "access_denied",
                         "state": f4.query.get("state", "")}), 401,
            "access_denied")
    # A code got by another sign-in (another browser's, or an attacker's
    # own) is bound to that sign-in's verifier: the provider refuses it.
    fa, fb = Flow(base), Flow(base)
    _, code_a, _ = fa.authorize()
    refused("a code of another sign-in (PKCE)",
            fb.callback({"code": code_a, "state": fb.query.get("state")}),
            401, "refused the code")
    fc = Flow(base)
    refused("a code used once already",
            fc.callback({"code": code, "state": fc.query.get("state")}),
            401, "refused the code")

    # --- open redirects ------------------------------------------------------
    for rt in ("//evil.example/", "https://evil.example/", "/\\evil.example",
               "\\\\evil.example", "javascript:alert(1)",
               "/ui/\r\nSet-Cookie: x=1", "/ui/ x", "ui/", "/" + "a" * 600):
        st, hs, body = req(base + "/v1/auth/oidc/start?return_to=" +
                            urllib.parse.quote(rt, safe=""))
        if st == 400 and "return_to" in body and \
                not header(hs, "Location") and \
                not cookie_of(hs, "cnlab_oidc"):
            ok("return_to %r: 400" % rt[:30])
        else:
            bad("return_to %r: %d %s %s" % (rt[:30], st, hs, body))
    d = Flow(base)
    if d.st == 302:
        _, c5, s5 = d.authorize()
        st, hs, _ = d.callback({"code": c5, "state": s5})
        if st == 302 and header(hs, "Location") == ["/ui/"]:
            ok("no return_to: back to /ui/")
        else:
            bad("no return_to: %d %s" % (st, hs))
    else:
        bad("start without return_to: %d" % d.st)

    # --- a disabled user -------------------------------------------------------
    st, _, body = req(base + "/v1/auth/login", "POST",
                       {"Content-Type": "application/json"},
                       json.dumps({"user": "root",
                                   "password": "hunter2-but-longer"}))
    root = json.loads(body).get("token", "") if st == 200 else ""
    if not root:
        die("root login: %d %s" % (st, body))
    auth = {"Authorization": "Bearer " + root,
            "Content-Type": "application/json"}
    st, _, body = req(base + "/v1/users/ada/disable", "POST", auth, "{}")
    if st != 200:
        bad("disable ada: %d %s" % (st, body))
    st, _, body = req(base + "/v1/auth/whoami",
                       headers={"Cookie": "cnlab_ui=" + sess})
    if st == 401:
        ok("disabling ada ends her single sign-on session")
    else:
        bad("ada's cookie after disable: %d %s" % (st, body))
    g = Flow(base)
    _, c6, s6 = g.authorize()
    refused("a disabled user signs in", g.callback({"code": c6, "state": s6}),
            401, "disabled")

    tls(tmp, procs, conf, env)

    # --- audit ------------------------------------------------------------------
    st, _, body = req(base + "/v1/audit?limit=200", headers=auth)
    items = json.loads(body).get("items", []) if st == 200 else []
    good = [a for a in items if a.get("action") == "auth.oidc" and
            str(a.get("result", "")).startswith("302")]
    badones = [a for a in items if a.get("action") == "auth.oidc" and
               not str(a.get("result", "")).startswith("302")]
    if len(good) >= 2 and len(badones) >= 9:
        ok("the audit log records sign-ins and refusals (auth.oidc)")
    else:
        bad("audit: %d %s" % (st, [(a.get("action"), a.get("result"))
                                  for a in items][:40]))


def tls(tmp, procs, conf, env):
    """Over TLS the dashboard's cookie is __Host-cnlab_ui, Secure; the
    plain name is not accepted there, and the sign-on's cookie is Secure."""
    key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-keyout", key, "-out", cert, "-subj",
                    "/CN=127.0.0.1", "-days", "1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True)
    out = os.path.join(tmp, "out-tls")
    procs.append(subprocess.Popen(
        [sys.argv[1], "--data-dir", os.path.join(tmp, "d-tls"), "--listen",
         "127.0.0.1:0", "--bootstrap-admin", "root", "--config", conf,
         "--tls-cert", cert, "--tls-key", key],
        stdout=open(out, "w"), stderr=open(os.path.join(tmp, "err-tls"),
                                           "w"), env=env))
    m = wait_for("cnlabd over TLS", lambda: re.search(
        r"^listening on 127\.0\.0\.1:(\d+)$", open(out).read(), re.M))
    base = "https://127.0.0.1:" + m.group(1)
    st, hs, body = req(base + "/v1/auth/cookie", "POST",
                       {"Content-Type": "application/json"},
                       json.dumps({"user": "root",
                                   "password": "hunter2-but-longer"}))
    sc = cookie_of(hs, "__Host-cnlab_ui") or ""
    m = re.match(r"__Host-cnlab_ui=([^;]+);", sc)
    if st == 200 and m and "Secure" in sc and "Path=/;" in sc and \
            "Domain" not in sc and not cookie_of(hs, "cnlab_ui"):
        ok("over TLS the dashboard's cookie is __Host-cnlab_ui; Secure; "
           "Path=/")
    else:
        bad("TLS sign-in: %d %s %s" % (st, hs, body))
        return
    tok = m.group(1)
    st, _, _ = req(base + "/v1/auth/whoami",
                   headers={"Cookie": "__Host-cnlab_ui=" + tok})
    st2, _, _ = req(base + "/v1/auth/whoami",
                    headers={"Cookie": "cnlab_ui=" + tok})
    if st == 200 and st2 == 401:
        ok("over TLS only the __Host- cookie is a session (a plain "
           "cnlab_ui, which a sibling host could plant, is not): 200, 401")
    else:
        bad("TLS cookies: __Host- %d, plain %d" % (st, st2))
    st, hs, _ = req(base + "/v1/auth/oidc/start")
    sc = cookie_of(hs, "cnlab_oidc") or ""
    if st == 302 and "Secure" in sc and (header(hs, "Location") or [""])[
            0].find(urllib.parse.quote(base + "/v1/auth/oidc/callback",
                                       safe="")) > 0:
        ok("over TLS the sign-on's cookie is Secure and the redirect_uri "
           "https")
    else:
        bad("TLS start: %d %s" % (st, hs))


if __name__ == "__main__":
    main()
