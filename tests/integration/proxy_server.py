# proxy_server.py - the notebook server of tests/integration/proxy.sh: run
# in a server's container, on 127.0.0.1:$CNLAB_PORT, it shows what cnlabd's
# proxy passes on.  Every request must carry "Authorization: token
# $CNLAB_SERVER_TOKEN" (what the proxy adds), else 403.
#   GET  /s/ID/headers     the request's headers and path, as JSON
#   GET  /s/ID/file/NAME   /workspace/NAME
#   GET  /s/ID/big?mib=N   N MiB of a known pattern, without a length
#   POST /s/ID/sha         the SHA-256 and length of the body
#   GET  /s/ID/ws          a WebSocket: says "hello" first, then echoes
#                          each text message as "echo:MESSAGE"
#   GET  /s/ID/cookies     sets cookies a hostile tenant would: cnlabd's
#                          names (tossing, fixation), one with Domain, and
#                          one of its own ("mine", which may pass)
#   GET  /s/ID/attack?api=URL  a page whose script tries to act as the
#                          viewer on the API: reads a CSRF token from
#                          /v1/auth/csrf (its own origin, then URL's) and
#                          POSTs a project and a user with it; what it
#                          got is written into <pre id=result> as JSON
import base64
import hashlib
import http.server
import json
import os
import struct
import urllib.parse

TOKEN = os.environ["CNLAB_SERVER_TOKEN"]
BASE = os.environ.get("CNLAB_BASE_URL", "/").rstrip("/")
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def recv_exact(f, n):
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def ws_send(w, text):
    payload = text.encode()
    head = bytes([0x81])
    if len(payload) < 126:
        head += bytes([len(payload)])
    else:
        head += bytes([126]) + struct.pack("!H", len(payload))
    w.write(head + payload)
    w.flush()


def ws_recv(r):
    b0, b1 = recv_exact(r, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", recv_exact(r, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(r, 8))[0]
    mask = recv_exact(r, 4) if b1 & 0x80 else b"\0\0\0\0"
    data = bytes(c ^ mask[i % 4] for i, c in enumerate(recv_exact(r, n)))
    return b0 & 0x0F, data

# The hostile page: everything it manages goes into #result.
ATTACK = """<!doctype html><title>notebook</title><pre id=result>running</pre>
<script>
(async () => {
  const out = {tokens: [], posts: [], errors: []};
  const api = new URLSearchParams(location.search).get('api') || '';
  for (const base of ['', api]) {
    let tok = null;
    try {
      const r = await fetch(base + '/v1/auth/csrf', {credentials: 'include'});
      const j = await r.json();
      tok = j.token || j.csrf || null;
      if (tok) out.tokens.push(base + ': ' + tok);
    } catch (e) { out.errors.push('csrf ' + base + ': ' + e); }
    const posts = [['/v1/projects', {name: 'pwned' + (base ? '2' : '1')}],
                   ['/v1/users', {name: 'mallory' + (base ? '2' : '1'), password: 'mallory-password-1'}]];
    for (const [p, body] of posts) {
      try {
        const h = {'Content-Type': 'application/json'};
        if (tok) h['X-CSRF-Token'] = tok;
        const r = await fetch(base + p, {method: 'POST', credentials: 'include', headers: h, body: JSON.stringify(body)});
        out.posts.push(base + p + ': ' + r.status);
      } catch (e) { out.errors.push('post ' + base + p + ': ' + e); }
      try {
        /* A "simple" request: no preflight, the response unread. */
        await fetch(base + p, {method: 'POST', mode: 'no-cors', credentials: 'include',
                               headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(body)});
      } catch (e) { out.errors.push('no-cors ' + base + p + ': ' + e); }
    }
  }
  document.getElementById('result').textContent = JSON.stringify(out);
})();
</script>"""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def route(self):
        path = urllib.parse.urlsplit(self.path).path
        if not path.startswith(BASE + "/"):
            return None
        return path[len(BASE) :]

    def authorized(self):
        if self.headers.get("Authorization", "") == "token " + TOKEN:
            return True
        self.send_error(403, "no token")
        return False

    def reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if not self.authorized():
            return
        route = self.route()
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if route == "/headers":
            body = {"path": self.path, "headers": dict(self.headers.items())}
            self.reply(200, json.dumps(body).encode())
        elif route and route.startswith("/file/"):
            name = os.path.basename(route[6:])
            try:
                with open(os.path.join("/workspace", name), "rb") as f:
                    self.reply(200, f.read(), "text/plain")
            except OSError:
                self.send_error(404)
        elif route == "/cookies":
            self.send_response(200)
            for c in (
                "cnlab_ui=tossed; Path=/",
                "__Host-cnlab_ui=tossed; Path=/; Secure",
                "cnlab_session=tossed; Path=/",
                "cnlab_oidc=tossed; Path=/",
                "CNLAB_UI=tossed; Path=/",
                "wide=1; Path=/; Domain=127.0.0.1",
                "mine=1; Path=/",
            ):
                self.send_header("Set-Cookie", c)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        elif route == "/attack":
            self.reply(200, ATTACK.encode(), "text/html; charset=utf-8")
        elif route == "/big":
            mib = int(query.get("mib", ["1"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            block = bytes(range(256)) * 4096
            for _ in range(mib):
                self.wfile.write(block)
        elif route == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"]
            accept = base64.b64encode(
                hashlib.sha1((key + WS_GUID).encode()).digest()
            ).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            ws_send(self.wfile, "hello")
            try:
                while True:
                    op, data = ws_recv(self.rfile)
                    if op == 8:
                        break
                    ws_send(self.wfile, "echo:" + data.decode())
            except EOFError:
                pass
            self.close_connection = True
        else:
            self.send_error(404)

    def do_POST(self):
        if not self.authorized():
            return
        if self.route() != "/sha":
            self.send_error(404)
            return
        left = int(self.headers.get("Content-Length", "0"))
        h, total = hashlib.sha256(), 0
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                break
            h.update(chunk)
            total += len(chunk)
            left -= len(chunk)
        self.reply(200, json.dumps({"sha256": h.hexdigest(), "bytes": total}).encode())


http.server.ThreadingHTTPServer(
    ("127.0.0.1", int(os.environ["CNLAB_PORT"])), Handler
).serve_forever()
