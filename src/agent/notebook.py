# cnlab-notebook: the notebook server of a node without JupyterLab: the
# server's workspace over HTTP, to the holder of its token only.
#
# The agent runs it as `python3 $CNLAB_NOTEBOOK` inside the server's
# container, where it listens on 127.0.0.1:$CNLAB_PORT in the server's own
# network namespace; the agent's forwarder brings users there from the
# node's address.  Loopback is no protection then, so every request must
# carry the token: ?token=T (the URL cnlabd shows), or the cookie a first
# request with it set.  Anything else is 403 and sets nothing.
import hmac
import http.server
import os
import urllib.parse

TOKEN = os.environ["CNLAB_SERVER_TOKEN"]
COOKIE = "cnlab_token"


class Handler(http.server.SimpleHTTPRequestHandler):
    authorized = False

    def token_ok(self):
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
        self.authorized = self.token_ok()
        if not self.authorized:
            self.send_error(403, "this notebook needs its token")
            return None
        return super().send_head()

    def end_headers(self):
        if self.authorized:
            self.send_header(
                "Set-Cookie", f"{COOKIE}={TOKEN}; HttpOnly; SameSite=Strict; Path=/"
            )
        super().end_headers()


os.chdir(os.environ.get("CNLAB_WORKSPACE", "/workspace"))
http.server.ThreadingHTTPServer(
    ("127.0.0.1", int(os.environ["CNLAB_PORT"])), Handler
).serve_forever()
