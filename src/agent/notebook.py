# cnlab-notebook: the notebook server of a node without JupyterLab: the
# server's workspace over HTTP, to the holder of its token only.
#
# The agent runs it as `python3 $CNLAB_NOTEBOOK` inside the server's
# container, where it listens on 127.0.0.1:$CNLAB_PORT in the server's own
# network namespace; users come through cnlabd's proxy (/s/ID/..., passed
# whole: the prefix $CNLAB_BASE_URL is taken off here), which sends the
# token as "Authorization: token T"; the agent's forwarder on the node's
# loopback brings the node's operator.  Loopback is no protection, so
# every request must carry the token: that header, ?token=T, or the cookie
# a first request with ?token= set.  Anything else is 403 and sets nothing.
# In a Kubernetes pod (cnlabd's, for a server on a Kubernetes node) it
# listens on $CNLAB_ADDRESS, the pod's address, where cnlabd's proxy
# comes: the token is then all that guards it, as it is JupyterLab's.
import hmac
import http.server
import os
import urllib.parse

TOKEN = os.environ["CNLAB_SERVER_TOKEN"]
COOKIE = "cnlab_token"
BASE = os.environ.get("CNLAB_BASE_URL", "/").rstrip("/")


class Handler(http.server.SimpleHTTPRequestHandler):
    authorized = False

    def header_ok(self):
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "token" and hmac.compare_digest(
            given.strip(), TOKEN
        )

    def token_ok(self):
        if self.header_ok():
            return True
        query = urllib.parse.urlsplit(self.path).query
        given = urllib.parse.parse_qs(query).get("token", [""])[0]
        if given and hmac.compare_digest(given, TOKEN):
            return True
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value, TOKEN):
                return True
        return False

    def send_head(self):
        if not self.token_ok():
            self.send_error(403, "this notebook needs its token")
            return None
        # A cookie only for a browser that came with ?token= (the proxy
        # keeps its own session).
        self.authorized = not self.header_ok()
        if BASE and (self.path == BASE or self.path.startswith(BASE + "/")):
            self.path = self.path[len(BASE) :] or "/"
        return super().send_head()

    def end_headers(self):
        if self.authorized:
            self.send_header(
                "Set-Cookie", f"{COOKIE}={TOKEN}; HttpOnly; SameSite=Strict; Path=/"
            )
        super().end_headers()


os.chdir(os.environ.get("CNLAB_WORKSPACE", "/workspace"))
http.server.ThreadingHTTPServer(
    (os.environ.get("CNLAB_ADDRESS", "127.0.0.1"),
     int(os.environ["CNLAB_PORT"])), Handler
).serve_forever()
