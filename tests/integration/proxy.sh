#!/usr/bin/env bash
# proxy.sh - cnlabd's notebook proxy (/s/{server}/...) end to end, against
# a real all-in-one and a second agent whose servers run
# tests/integration/proxy_server.py in their containers (crun):
#   - the owner reads a file of the server's /workspace with the API's
#     bearer token; the server's own ?token= is exchanged for an HttpOnly,
#     SameSite=Strict cookie scoped to /s/{server}/, which then suffices
#   - no credential is 401, a wrong ?token= 401, another project's user
#     403; the owner removed from the project is 403 on the next request,
#     cookie or token
#   - one server's cookie and token open no other server
#   - the default command's cnlab-notebook.py works behind the proxy
#   - the server sees its own token, never the user's credential (bearer
#     token, session cookie, ?token=), and the path whole
#   - a WebSocket passes messages both ways; 20 MiB stream up and down
#   - an open WebSocket is cut once its opener is removed from the project
#     or logs out; a member's stays open
#   - notebooks have an origin of their own (notebook_listen): the server's
#     URL is on it; it serves nothing but /s/ (no /v1, no /ui, no /healthz)
#     and takes no dashboard cookie; the API's listener serves no /s/
#     content (a 308 to the notebook origin); a tenant's Set-Cookie for
#     cnlabd's cookie names (or with a Domain) never reaches the browser
#   - the server's port on the node listens on loopback only and answers on
#     no other address
#   - a tunnel the agent never opens is a 504 naming the node; a stopped
#     server is 409
#   - a user's 65th open connection is 429
#   - an open tunnel counts as activity for the idle timeout
#   - cnlab server exec runs a command in the server's container as its
#     tenant (uid 1000, no_new_privs, seccomp, the server's cgroup, in
#     /workspace): stdout and stderr apart, its exit code the CLI's, an
#     audit record; refused to another project's user and to a removed
#     member
set -u
cnlabd=$1
agent=$2
cli=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
probe=
srv= csrv= isrv=
cleanup() {
	# A test that failed half-way still stops its servers: a workload
	# outlives its agent, and its lease file goes with $tmp.
	if [ -n "$pid" ]; then
		[ -n "$probe" ] && kill -CONT "$probe" 2>/dev/null
		for s in $srv $csrv $isrv; do api POST "/v1/servers/$s/stop" >/dev/null 2>&1; done
		for _ in $(seq 50); do
			n=0
			for s in $srv $csrv $isrv; do
				case $(api GET "/v1/servers/$s" 2>/dev/null | jq -r .state 2>/dev/null) in
				stopped | failed | "" | null) ;;
				*) n=$((n + 1)) ;;
				esac
			done
			[ $n = 0 ] && break
			sleep 0.2
		done
	fi
	[ -n "$probe" ] && kill -CONT "$probe" 2>/dev/null
	[ -n "$probe" ] && kill "$probe" 2>/dev/null && wait "$probe" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD

# A lease of 60 s: the agent frozen below (for the proxy's 10 s) keeps its
# work, however slow the machine.
HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" --node-lost-timeout 120s \
	--listen 127.0.0.1:0 --gpus fake:1xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	echo "FAIL start: $(cat "$tmp/err")"
	exit 1
}
nurl=$(sed -n 's/^  notebooks: *\([^ ]*\).*/\1/p' "$tmp/out")
case $nurl in
http://127.0.0.1:[0-9]*) [ "$nurl" != "$url" ] && ok "notebooks on an origin of their own: $nurl" ||
	bad "notebook origin $nurl is the API's $url" ;;
*) bad "no notebook origin in the banner: $(cat "$tmp/out")" ;;
esac
pw=$(cat "$tmp/data/admin.password")
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$url/v1/auth/login" | jq -r .token; }
tok=$(login admin "$pw")
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
proj=$(api GET /v1/projects | jq -r '.items[] | select(.name=="default") | .id')
sys=$(api GET /v1/projects | jq -r '.items[] | select(.name=="system") | .id')
other=$(api POST /v1/projects '{"name":"other"}' | jq -r .id)
alice_id=$(api POST /v1/users '{"name":"alice","password":"alice-password-1"}' | jq -r .id)
api POST /v1/users '{"name":"carol","password":"carol-password-1"}' >/dev/null
api POST "/v1/projects/$proj/members" '{"user":"alice","role":"member"}' >/dev/null
api POST "/v1/projects/$other/members" '{"user":"carol","role":"member"}' >/dev/null
alice=$(login alice alice-password-1)
carol=$(login carol carol-password-1)

# A second node whose servers run proxy_server.py (mounted read-only).
# The agent joins with a one-time join token made for its node name.
jointok() { api POST /v1/nodes/join-tokens "{\"node\":\"$1\"}" | jq -r .token; }
CNLAB_AGENT_TOKEN=$(jointok "probe-$$") "$agent" --server "$url" --name "probe-$$" --gpus fake:2xA100-80GB \
	--work-dir "$tmp/probe" --mounts "$here:$here:ro" \
	--server-command "exec python3 $here/proxy_server.py" \
	>"$tmp/probe.out" 2>"$tmp/probe.err" &
probe=$!
for _ in $(seq 100); do grep -q msg=registered "$tmp/probe.err" && break; sleep 0.1; done

srv=$(curl -sS -X POST -H "Authorization: Bearer $alice" \
	-d '{"name":"nb","image":"host","profile":"a100-50pct"}' "$url/v1/projects/$proj/servers" | jq -r .id)
surl=
for _ in $(seq 150); do
	surl=$(api GET "/v1/servers/$srv" | jq -r 'select(.state=="running") | .url // empty')
	[ -n "$surl" ] && break
	sleep 0.2
done
base=$nurl/s/$srv
stoken=${surl##*token=}
case $surl in
"$base/?token="?*) ok "a running server's URL is the notebook origin's /s/ID/ with its token" ;;
*) bad "server URL '$surl' (want $base/?token=...): $(api GET "/v1/servers/$srv")" ;;
esac

# code ARGS...: the HTTP status of a curl of ARGS.
code() { curl -sS -o /dev/null -w '%{http_code}' "$@" 2>/dev/null; }
echo hello-proxy >"$tmp/probe/workspaces/$srv/hello.txt"
got=
for _ in $(seq 100); do
	got=$(curl -sS -H "Authorization: Bearer $alice" "$base/file/hello.txt" 2>/dev/null) &&
		[ "$got" = hello-proxy ] && break
	sleep 0.2
done
[ "$got" = hello-proxy ] && ok "the owner's bearer token reads /workspace/hello.txt through the proxy" ||
	bad "owner GET: '$got' $(tail -5 "$tmp/probe.err")"

# --- who may come in ------------------------------------------------------------
body=$(curl -sS "$base/file/hello.txt")
[ "$(code "$base/file/hello.txt")" = 401 ] &&
	[ "$(echo "$body" | jq -r .error.code)" = unauthenticated ] &&
	ok "no credential: 401 with a JSON error" || bad "no credential: $(code "$base/file/hello.txt") $body"
[ "$(code "$base/file/hello.txt?token=0123456789abcdef0123456789abcdef")" = 401 ] &&
	ok "a wrong ?token=: 401" || bad "wrong token: $(code "$base/file/hello.txt?token=0123456789abcdef0123456789abcdef")"
[ "$(code -H "Authorization: Bearer $carol" "$base/file/hello.txt")" = 403 ] &&
	ok "another project's user: 403" || bad "carol: $(code -H "Authorization: Bearer $carol" "$base/file/hello.txt")"
[ "$(code -H "Authorization: Bearer forged" "$base/file/hello.txt")" = 401 ] &&
	ok "a forged bearer token: 401" || bad "forged bearer"
[ "$(code -H "Cookie: cnlab_session=forged" "$base/file/hello.txt")" = 401 ] &&
	ok "a forged session cookie: 401" || bad "forged cookie"

# The server's token is exchanged for a session cookie of this server only.
curl -sS -D "$tmp/h1" -c "$tmp/jar" -o "$tmp/b1" "$base/file/hello.txt?token=$stoken"
setc=$(grep -i '^set-cookie:' "$tmp/h1" | tr -d '\r')
if [ "$(cat "$tmp/b1")" = hello-proxy ] && echo "$setc" | grep -q 'cnlab_session=' &&
	echo "$setc" | grep -q 'HttpOnly' && echo "$setc" | grep -q 'SameSite=Strict' &&
	echo "$setc" | grep -q "Path=/s/$srv/"; then
	ok "?token= is exchanged for an HttpOnly, SameSite=Strict cookie on /s/$srv/"
else
	bad "token exchange: $(cat "$tmp/b1") $setc"
fi
[ "$(curl -sS -b "$tmp/jar" "$base/file/hello.txt")" = hello-proxy ] &&
	ok "the session cookie alone then suffices" || bad "cookie: $(curl -sS -b "$tmp/jar" "$base/file/hello.txt")"
cookie=$(echo "$setc" | sed 's/^[^:]*: *//; s/;.*//')

# --- the notebook origin is not the API's -----------------------------------------
# The dashboard's session cookie, as the browser holds it after a sign-in.
curl -sS -D "$tmp/hui" -o /dev/null -X POST -d '{"user":"alice","password":"alice-password-1"}' "$url/v1/auth/cookie"
uicookie=$(grep -i '^set-cookie: *cnlab_ui=' "$tmp/hui" | tr -d '\r' | sed 's/^[^:]*: *//; s/;.*//')
[ -n "$uicookie" ] && [ "$(code -H "Cookie: $uicookie" "$url/v1/auth/whoami")" = 200 ] ||
	bad "no dashboard cookie to try: $(cat "$tmp/hui")"
[ "$(code -H "Cookie: $uicookie" "$base/file/hello.txt")" = 401 ] &&
	ok "the notebook origin takes no dashboard cookie (401)" ||
	bad "dashboard cookie on the notebook origin: $(code -H "Cookie: $uicookie" "$base/file/hello.txt")"
nb_refused=
for p in /v1/auth/csrf /v1/auth/whoami /v1/projects /ui/ / /healthz /metrics /cli; do
	c=$(code -H "Cookie: $uicookie" -H "Authorization: Bearer $alice" "$nurl$p")
	[ "$c" = 404 ] || nb_refused="$nb_refused $p:$c"
done
msg=$(curl -sS -X POST -H "Cookie: $uicookie" -d '{"name":"x"}' "$nurl/v1/projects")
[ -z "$nb_refused" ] && echo "$msg" | grep -q 'notebook origin' &&
	ok "the notebook origin serves no /v1, /ui, /healthz, /metrics, /cli (404 naming it)" ||
	bad "the notebook origin serves:$nb_refused $msg"
# Cookies ignore ports: a notebook page may plant its own session as a
# cnlab_ui with a longer Path, which the browser sends before the viewer's.
curl -sS -D "$tmp/hui2" -o /dev/null -X POST -d "{\"user\":\"admin\",\"password\":\"$pw\"}" "$url/v1/auth/cookie"
admcookie=$(grep -i '^set-cookie: *cnlab_ui=' "$tmp/hui2" | tr -d '\r' | sed 's/^[^:]*: *//; s/;.*//')
[ "$(code -H "Cookie: $admcookie" "$url/v1/auth/whoami")" = 200 ] &&
	[ "$(code -H "Cookie: $uicookie; $admcookie" "$url/v1/auth/whoami")" = 401 ] &&
	[ "$(code -H "Cookie: $admcookie; $uicookie" "$url/v1/auth/whoami")" = 401 ] &&
	ok "two dashboard cookies (one planted) sign the viewer out, never in as the planter" ||
	bad "planted cookie: $(curl -sS -H "Cookie: $uicookie; $admcookie" "$url/v1/auth/whoami")"
hdr=$(curl -sS -D - -o "$tmp/bapi" -H "Authorization: Bearer $alice" "$url/s/$srv/file/hello.txt?x=1" | tr -d '\r')
if echo "$hdr" | grep -q '^HTTP/[0-9.]* 308' &&
	echo "$hdr" | grep -qi "^location: $base/file/hello.txt?x=1\$" &&
	! grep -q hello-proxy "$tmp/bapi"; then
	ok "the API's origin serves no notebook content: 308 to the notebook origin"
else
	bad "/s/ on the API's origin: $hdr $(cat "$tmp/bapi")"
fi
[ "$(curl -sS --location-trusted -H "Authorization: Bearer $alice" "$url/s/$srv/file/hello.txt")" = hello-proxy ] &&
	ok "an old /s/ link on the API's origin still leads to the server" || bad "following the 308"
sc=$(curl -sS -D - -o /dev/null -H "Authorization: Bearer $alice" "$base/cookies" | tr -d '\r' | grep -i '^set-cookie:')
if echo "$sc" | grep -q '^[Ss]et-[Cc]ookie: mine=1' &&
	! echo "$sc" | grep -Eqi 'cnlab_ui|cnlab_session|cnlab_oidc|tossed|domain='; then
	ok "a tenant's Set-Cookie for cnlabd's names or with a Domain never reaches the browser"
else
	bad "tenant's Set-Cookie passed: $sc"
fi

# Another project's server, on the all-in-one's node, runs the default
# command (cnlab-notebook.py: the prefix is taken off, the proxy's token
# header accepted).
csrv=$(curl -sS -X POST -H "Authorization: Bearer $carol" \
	-d '{"name":"nbc","image":"host","profile":"h100-25pct"}' "$url/v1/projects/$other/servers" | jq -r .id)
curl_=
for _ in $(seq 150); do
	curl_=$(api GET "/v1/servers/$csrv" | jq -r 'select(.state=="running") | .url // empty')
	[ -n "$curl_" ] && break
	sleep 0.2
done
echo carol-file >"$tmp/data/agent/workspaces/$csrv/carol.txt"
got=
for _ in $(seq 100); do
	got=$(curl -sS -H "Authorization: Bearer $carol" "$nurl/s/$csrv/carol.txt" 2>/dev/null) &&
		[ "$got" = carol-file ] && break
	sleep 0.2
done
[ "$got" = carol-file ] && [ "$(code "$curl_")" = 200 ] &&
	ok "the default notebook (cnlab-notebook.py) answers through the proxy, by bearer and by its URL" ||
	bad "default notebook: '$got' $(code "$curl_") $curl_"
[ "$(code -H "Cookie: $cookie" "$nurl/s/$csrv/carol.txt")" = 401 ] &&
	ok "one server's session cookie is worth nothing on another's path: 401" ||
	bad "cookie crosses servers: $(code -H "Cookie: $cookie" "$nurl/s/$csrv/carol.txt")"
[ "$(code -H "Authorization: Bearer $alice" "$nurl/s/$csrv/carol.txt")" = 403 ] &&
	[ "$(code "$nurl/s/$csrv/carol.txt?token=$stoken")" = 401 ] &&
	ok "nor do her bearer token (403) or her server's token (401)" ||
	bad "alice on carol's server: $(code -H "Authorization: Bearer $alice" "$nurl/s/$csrv/carol.txt")"

# --- what the server sees ---------------------------------------------------------
# The dashboard's session cookie (cnlab_ui, __Host-cnlab_ui over TLS) and
# the single sign-on's (cnlab_oidc) are cnlabd's too: a tenant's server
# must never see them either.
seen=$(curl -sS -H "Authorization: Bearer $alice" \
	-H "Cookie: cnlab_ui=dash-secret-1; $cookie; other=kept; __Host-cnlab_ui=dash-secret-2; cnlab_oidc=sso-secret" \
	"$base/headers?token=$stoken&x=1")
if echo "$seen" | jq -e --arg t "$stoken" --arg p "/s/$srv/headers?x=1" '
	.path == $p and .headers.Authorization == "token \($t)" and
	.headers.Cookie == "other=kept" and
	([.headers | to_entries[] | .value | test("Bearer|cnlab_session|cnlab_ui|cnlab_oidc|dash-secret|sso-secret")] | any | not)' >/dev/null; then
	ok "the server gets its own token, the path whole, and none of the user's credentials (no proxy, dashboard or sign-on cookie)"
else
	bad "upstream saw: $seen"
fi

# --- WebSocket and big bodies ----------------------------------------------------------
ws=$(python3 - "$nurl" "/s/$srv/ws" "$alice" <<'EOF'
import base64, os, socket, struct, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
s = socket.create_connection((u.hostname, u.port), timeout=30)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET {sys.argv[2]} HTTP/1.1\r\nHost: {u.netloc}\r\n"
           f"Authorization: Bearer {sys.argv[3]}\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
f = s.makefile("rb")
status = f.readline().decode().strip()
heads = set()
while True:
    line = f.readline()
    if line in (b"\r\n", b""):
        break
    heads.add(line.decode().strip().lower())
# What a browser checks in the 101.
if not {"connection: upgrade", "upgrade: websocket"} <= heads or not any(
        h.startswith("sec-websocket-accept: ") for h in heads):
    status += " headers: " + repr(sorted(heads))
def recv():
    b0, b1 = f.read(2)
    return f.read(b1 & 0x7F).decode()
def send(text):
    mask = os.urandom(4)
    data = bytes(c ^ mask[i % 4] for i, c in enumerate(text.encode()))
    s.sendall(bytes([0x81, 0x80 | len(data)]) + mask + data)
print(status)
print(recv())
send("ping-1")
print(recv())
send("ping-2")
print(recv())
EOF
)
if [ "$(echo "$ws" | sed -n 1p | cut -d' ' -f2)" = 101 ] && ! echo "$ws" | sed -n 1p | grep -q headers: &&
	[ "$(echo "$ws" | sed -n 2p)" = hello ] &&
	[ "$(echo "$ws" | sed -n 3p)" = echo:ping-1 ] && [ "$(echo "$ws" | sed -n 4p)" = echo:ping-2 ]; then
	ok "a WebSocket through the proxy: 101 with the headers a browser checks, the server speaks first, messages echo both ways"
else
	bad "WebSocket: $ws"
fi

# --- an open WebSocket is cut when its opener's access ends --------------------
# dave and erin (members) each hold a WebSocket open; dave is removed from
# the project and erin logs out: the next message of each gets no echo, the
# connection ends.  frank, still a member, keeps his.
api POST /v1/users '{"name":"dave","password":"dave-password-1"}' >/dev/null
api POST /v1/users '{"name":"erin","password":"erin-password-1"}' >/dev/null
api POST /v1/users '{"name":"frank","password":"frank-password-1"}' >/dev/null
for u in dave erin frank; do
	api POST "/v1/projects/$proj/members" "{\"user\":\"$u\",\"role\":\"member\"}" >/dev/null
done
dave=$(login dave dave-password-1)
erin=$(login erin erin-password-1)
frank=$(login frank frank-password-1)
ws_hold() { # ws_hold NAME TOKEN: open, echo once, touch ws.NAME.ready, wait for ws.go, echo again
	python3 - "$nurl" "/s/$srv/ws" "$2" "$tmp/ws.$1" "$tmp/ws.go" <<'EOF' >"$tmp/ws.$1.out" 2>&1 &
import base64, os, socket, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
s = socket.create_connection((u.hostname, u.port), timeout=30)
s.sendall((f"GET {sys.argv[2]} HTTP/1.1\r\nHost: {u.netloc}\r\n"
           f"Authorization: Bearer {sys.argv[3]}\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: "
           + base64.b64encode(os.urandom(16)).decode()
           + "\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
f = s.makefile("rb")
status = f.readline().split()[1].decode()
while f.readline() not in (b"\r\n", b""):
    pass
def recv():
    h = f.read(2)
    if len(h) < 2:
        return "closed"
    return f.read(h[1] & 0x7F).decode()
def send(text):
    mask = os.urandom(4)
    data = bytes(c ^ mask[i % 4] for i, c in enumerate(text.encode()))
    s.sendall(bytes([0x81, 0x80 | len(data)]) + mask + data)
recv()  # the server speaks first
send("before")
print(status, recv(), flush=True)
open(sys.argv[4] + ".ready", "w").close()
while not os.path.exists(sys.argv[5]):
    time.sleep(0.1)
time.sleep(3)
try:
    send("after")
    print(recv(), flush=True)
except OSError:
    print("closed", flush=True)
EOF
}
rm -f "$tmp/ws.go"
for u in dave erin frank; do ws_hold "$u" "${!u}"; done
for _ in $(seq 150); do
	[ -e "$tmp/ws.dave.ready" ] && [ -e "$tmp/ws.erin.ready" ] && [ -e "$tmp/ws.frank.ready" ] && break
	sleep 0.2
done
api DELETE "/v1/projects/$proj/members/dave" >/dev/null
curl -sS -o /dev/null -X POST -H "Authorization: Bearer $erin" "$url/v1/auth/logout"
touch "$tmp/ws.go"
wait_ws() { for _ in $(seq 150); do [ "$(wc -l <"$tmp/ws.$1.out")" -ge 2 ] && return; sleep 0.2; done; }
for u in dave erin frank; do wait_ws "$u"; done
[ "$(tr '\n' ' ' <"$tmp/ws.frank.out")" = "101 echo:before echo:after " ] &&
	ok "a member's WebSocket stays open" || bad "frank's WebSocket: $(cat "$tmp/ws.frank.out")"
for x in "dave membership removed" "erin logged out"; do
	u=${x%% *}
	[ "$(sed -n 1p "$tmp/ws.$u.out")" = "101 echo:before" ] && [ "$(sed -n 2p "$tmp/ws.$u.out")" = closed ] &&
		ok "an open WebSocket is cut when its opener's ${x#* }" ||
		bad "$u's WebSocket after ${x#* }: $(cat "$tmp/ws.$u.out")"
done

head -c $((20 << 20)) /dev/urandom >"$tmp/big"
want=$(sha256sum "$tmp/big" | cut -d' ' -f1)
up=$(curl -sS -H "Authorization: Bearer $alice" --data-binary @"$tmp/big" \
	-H 'Content-Type: application/octet-stream' "$base/sha")
[ "$(echo "$up" | jq -r .sha256)" = "$want" ] && [ "$(echo "$up" | jq -r .bytes)" = $((20 << 20)) ] &&
	ok "a 20 MiB request body streams up whole" || bad "upload: $up"
down=$(curl -sS -H "Authorization: Bearer $alice" "$base/big?mib=20" | sha256sum | cut -d' ' -f1)
pattern=$(python3 -c '
import hashlib, sys
h = hashlib.sha256()
block = bytes(range(256)) * 4096
for _ in range(20): h.update(block)
print(h.hexdigest())')
[ "$down" = "$pattern" ] && ok "a 20 MiB reply without a length streams down whole" || bad "download: $down"
[ "$(code -X POST -H "Authorization: Bearer $alice" -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/b1" "$base/sha")" = 411 ] &&
	ok "a body without a length: 411" || bad "chunked body"

# --- the node's port ----------------------------------------------------------------------
fport=$(jq -r .port "$tmp/probe/state/$srv.json" 2>/dev/null)
listen=$(ss -Hltn "sport = :$fport" 2>/dev/null | awk '{print $4}')
node_ip=$(hostname -I 2>/dev/null | awk '{print $1}')
reached=
for h in $node_ip 127.0.0.2; do
	[ -n "$h" ] && curl -sS --max-time 3 -o /dev/null "http://$h:$fport/" 2>/dev/null && reached="$reached $h"
done
if [ -n "$fport" ] && [ "$listen" = "127.0.0.1:$fport" ] && [ -z "$reached" ]; then
	ok "the server's port on the node ($fport) listens on 127.0.0.1 only, unreachable elsewhere"
else
	bad "node port $fport: listening on '$listen', answered on:$reached"
fi

# --- a tunnel never opened: the agent is frozen -------------------------------------------
kill -STOP "$probe"
msg=$(curl -sS -w ' %{http_code}' -H "Authorization: Bearer $tok" "$base/file/hello.txt")
kill -CONT "$probe"
case $msg in
*" 504") echo "$msg" | grep -q "did not open a tunnel" && echo "$msg" | grep -q "node" &&
	ok "a tunnel the agent does not open: 504 naming the node" || bad "504 message: $msg" ;;
*) bad "frozen agent: $msg" ;;
esac
for _ in $(seq 100); do
	[ "$(code -H "Authorization: Bearer $alice" "$base/file/hello.txt")" = 200 ] && break
	sleep 0.2
done

# --- at most 64 open tunnels per user ------------------------------------------------
cap=$(python3 - "$nurl" "/s/$srv/ws" "$alice" <<'EOF'
import base64, os, socket, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
def ws():
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    s.sendall((f"GET {sys.argv[2]} HTTP/1.1\r\nHost: {u.netloc}\r\n"
               f"Authorization: Bearer {sys.argv[3]}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: "
               + base64.b64encode(os.urandom(16)).decode()
               + "\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    return s, s.makefile("rb").readline().split()[1].decode()
held = []
for _ in range(64):
    s, code = ws()
    held.append(s)
    if code != "101":
        print("open", len(held), code)
        sys.exit()
s, code = ws()
print("65th", code)
for h in held:
    h.close()
EOF
)
[ "$cap" = "65th 429" ] && ok "a user's 65th open connection to a server: 429" || bad "tunnel cap: $cap"
for _ in $(seq 100); do
	[ "$(code -H "Authorization: Bearer $alice" "$base/file/hello.txt")" = 200 ] && break
	sleep 0.2
done
[ "$(code -H "Authorization: Bearer $alice" "$base/file/hello.txt")" = 200 ] &&
	ok "once they close, the user comes in again" || bad "after the cap: $(code -H "Authorization: Bearer $alice" "$base/file/hello.txt")"

# --- an open tunnel is activity ---------------------------------------------------
# A server with a 4 s idle timeout stays up while a WebSocket to it is open
# (12 s, three idle timeouts), and stops once it is closed.
isrv=$(curl -sS -X POST -H "Authorization: Bearer $alice" \
	-d '{"name":"idle","image":"host","profile":"a100-50pct","idle_timeout_s":4}' \
	"$url/v1/projects/$proj/servers" | jq -r .id)
for _ in $(seq 150); do
	[ "$(api GET "/v1/servers/$isrv" | jq -r .state)" = running ] && break
	sleep 0.2
done
held=$(python3 - "$nurl" "/s/$isrv/ws" "$alice" <<'EOF'
import base64, os, socket, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
for _ in range(100):
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall((f"GET {sys.argv[2]} HTTP/1.1\r\nHost: {u.netloc}\r\n"
               f"Authorization: Bearer {sys.argv[3]}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: "
               + base64.b64encode(os.urandom(16)).decode()
               + "\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    if s.makefile("rb").readline().split()[1:2] == [b"101"]:
        break
    s.close()
    time.sleep(0.2)
else:
    sys.exit("no WebSocket")
time.sleep(12)
print("held")
EOF
)
state_held=$(api GET "/v1/servers/$isrv" | jq -r .state)
stopped=
for _ in $(seq 300); do
	[ "$(api GET "/v1/servers/$isrv" | jq -r .state)" = stopped ] && stopped=1 && break
	sleep 0.2
done
[ "$held" = held ] && [ "$state_held" = running ] && [ -n "$stopped" ] &&
	ok "an open WebSocket keeps a server from its idle stop; closed, it stops" ||
	bad "idle: held=$held state while held=$state_held stopped=${stopped:-no}"

# --- cnlab server exec ----------------------------------------------------------------------
# as TOKEN ARGS...: the CLI as the holder of TOKEN, in the default project.
as() {
	local t=$1
	shift
	HOME=$tmp/home CNLAB_SERVER=$url CNLAB_TOKEN=$t "$cli" --project default "$@"
}
as "$alice" server exec nb -- sh -c 'id -u; grep -E "^(NoNewPrivs|Seccomp|CapEff):" /proc/self/status;
	echo cgroup-escapes=$(grep -c "/\.\." /proc/self/cgroup); pwd; cat hello.txt; echo to-stderr >&2; exit 7' \
	>"$tmp/exec.out" 2>"$tmp/exec.err"
rc=$?
if [ $rc = 7 ] && grep -qx 1000 "$tmp/exec.out" && grep -qx 'NoNewPrivs:	1' "$tmp/exec.out" &&
	grep -qx 'Seccomp:	2' "$tmp/exec.out" && grep -qx 'CapEff:	0000000000000000' "$tmp/exec.out" &&
	grep -qx 'cgroup-escapes=0' "$tmp/exec.out" && grep -qx /workspace "$tmp/exec.out" &&
	grep -qx hello-proxy "$tmp/exec.out" && [ "$(cat "$tmp/exec.err")" = to-stderr ]; then
	ok "server exec: uid 1000, no_new_privs, seccomp, no capability, the server's cgroup, /workspace; stderr apart; exit 7 is the CLI's"
else
	bad "server exec: rc=$rc out=$(cat "$tmp/exec.out") err=$(cat "$tmp/exec.err")"
fi
api GET '/v1/audit?limit=1000' | jq -e --arg a "$alice_id" --arg t "$srv: sh" \
	'[.items[] | select(.action == "server.exec" and .actor == $a and .target == $t)] | length == 1' >/dev/null &&
	ok "server exec is audited (who, which server, what command)" ||
	bad "exec audit: $(api GET '/v1/audit?limit=1000' | jq -c '[.items[] | select(.action == "server.exec")]')"
[ "$(code -X POST -H "Authorization: Bearer $carol" -H 'Connection: Upgrade' -H 'Upgrade: cnlab-exec' \
	"$url/v1/servers/$srv/exec?command=%5B%22id%22%5D")" = 404 ] &&
	ok "server exec by another project's user: 404, as if there were no such server" ||
	bad "carol exec: $(code -X POST -H "Authorization: Bearer $carol" -H 'Connection: Upgrade' -H 'Upgrade: cnlab-exec' "$url/v1/servers/$srv/exec?command=%5B%22id%22%5D")"

# --- logout and disable end the proxy's cookie ---------------------------------------------
# The cookie names a stored document: logout (of any of the user's
# sessions) deletes it, a disabled owner is refused, and enable does not
# bring the cookies of before back.
curl -sS -c "$tmp/jar2" -o /dev/null "$base/file/hello.txt?token=$stoken"
[ "$(curl -sS -b "$tmp/jar2" "$base/file/hello.txt")" = hello-proxy ] || bad "a second cookie before logout"
alice2=$(login alice alice-password-1)
if [ "$(code -X POST -H "Authorization: Bearer $alice2" "$url/v1/auth/logout")" = 200 ] &&
	[ "$(code -b "$tmp/jar" "$base/file/hello.txt")" = 401 ] &&
	[ "$(code -b "$tmp/jar2" "$base/file/hello.txt")" = 401 ] &&
	[ "$(code -H "Cookie: $cookie" "$base/file/hello.txt")" = 401 ] &&
	[ "$(code -H "Authorization: Bearer $alice2" "$base/file/hello.txt")" = 401 ]; then
	ok "logout ends the user's proxy cookies (a saved cookie replayed is 401)"
else
	bad "cookie after logout: $(code -b "$tmp/jar" "$base/file/hello.txt") $(code -H "Cookie: $cookie" "$base/file/hello.txt")"
fi
[ "$(code -H "Authorization: Bearer $alice" "$base/file/hello.txt")" = 200 ] &&
	ok "another session of the user goes on" || bad "other session after logout"
[ "$(code -b "$tmp/jar2" "$base/file/hello.txt?token=$stoken")" = 200 ] &&
	ok "an ended cookie left in the browser does not block the server's URL" ||
	bad "stale cookie + ?token=: $(code -b "$tmp/jar2" "$base/file/hello.txt?token=$stoken")"
curl -sS -c "$tmp/jar3" -o /dev/null "$base/file/hello.txt?token=$stoken"
[ "$(code -b "$tmp/jar3" "$base/file/hello.txt")" = 200 ] || bad "a new cookie after logout"
api POST "/v1/users/$alice_id/disable" >/dev/null
[ "$(code -b "$tmp/jar3" "$base/file/hello.txt")" = 401 ] &&
	[ "$(code "$base/file/hello.txt?token=$stoken")" = 401 ] &&
	ok "a disabled owner: cookie and ?token= are 401" ||
	bad "disabled owner: $(code -b "$tmp/jar3" "$base/file/hello.txt") $(code "$base/file/hello.txt?token=$stoken")"
api POST "/v1/users/$alice_id/enable" >/dev/null
[ "$(code -b "$tmp/jar3" "$base/file/hello.txt")" = 401 ] &&
	ok "enable does not bring the cookies of before back" ||
	bad "cookie after enable: $(code -b "$tmp/jar3" "$base/file/hello.txt")"
alice=$(login alice alice-password-1)
curl -sS -c "$tmp/jar" -o /dev/null "$base/file/hello.txt?token=$stoken"

# --- a viewer never sees the server's token ------------------------------------------------
# The ?token= URL acts as the owner: a viewer (whom the proxy refuses)
# reading it from the API would use the server as its owner.
api POST /v1/users '{"name":"vic","password":"vic-password-1"}' >/dev/null
api POST "/v1/projects/$proj/members" '{"user":"vic","role":"viewer"}' >/dev/null
vic=$(login vic vic-password-1)
vurl=$(curl -sS -H "Authorization: Bearer $vic" "$url/v1/servers/$srv" | jq -r '.url // ""')
vlist=$(curl -sS -H "Authorization: Bearer $vic" "$url/v1/projects/$proj/servers" |
	jq -r '[.items[] | .url // ""] | join(" ")')
if [ "$vurl" = "$base/" ] && ! grep -q "token=" <<<"$vlist" &&
	[ "$(code -H "Authorization: Bearer $vic" "$base/file/hello.txt")" = 403 ] &&
	[ "$(api GET "/v1/servers/$srv" | jq -r .url)" = "$surl" ]; then
	ok "a viewer gets the server's URL without its token (and 403 at the proxy); an admin gets the token"
else
	bad "viewer sees: $vurl / $vlist"
fi

# --- membership is checked on every request -----------------------------------------------
api DELETE "/v1/projects/$proj/members/$alice_id" >/dev/null
[ "$(code -H "Authorization: Bearer $alice" "$base/file/hello.txt")" = 403 ] &&
	[ "$(code -b "$tmp/jar" "$base/file/hello.txt")" = 403 ] &&
	[ "$(code "$base/file/hello.txt?token=$stoken")" = 403 ] &&
	ok "the owner removed from the project: 403 by bearer, cookie and token alike" ||
	bad "removed member: $(code -H "Authorization: Bearer $alice" "$base/file/hello.txt") $(code -b "$tmp/jar" "$base/file/hello.txt")"
ex=$(code -X POST -H "Authorization: Bearer $alice" -H 'Connection: Upgrade' -H 'Upgrade: cnlab-exec' \
	"$url/v1/servers/$srv/exec?command=%5B%22id%22%5D")
if as "$alice" server exec nb -- true >"$tmp/exec2.out" 2>&1 || [ "$ex" != 404 ]; then
	bad "a removed member still execs: $ex $(cat "$tmp/exec2.out")"
else
	ok "a removed member cannot exec either (404; the CLI says: $(head -c 60 "$tmp/exec2.out"))"
fi
[ "$(code -H "Authorization: Bearer $tok" "$base/file/hello.txt")" = 200 ] &&
	ok "an administrator still comes in" || bad "admin after removal: $(curl -sS -w " %{http_code}" -H "Authorization: Bearer $tok" "$base/file/hello.txt")"

# --- a stopped server -----------------------------------------------------------------------
api POST "/v1/servers/$srv/stop" >/dev/null
for _ in $(seq 150); do
	[ "$(api GET "/v1/servers/$srv" | jq -r .state)" = stopped ] && break
	sleep 0.2
done
msg=$(curl -sS -w ' %{http_code}' -H "Authorization: Bearer $tok" "$base/file/hello.txt")
case $msg in
*" 409") echo "$msg" | grep -q "cnlab server start" && ok "a stopped server: 409 saying how to start it" ||
	bad "409 message: $msg" ;;
*) bad "stopped server: $msg" ;;
esac

# Every server stopped: a workload whose agent's folder is gone would
# otherwise outlive the test (its lease file is gone with it).
api POST "/v1/servers/$csrv/stop" >/dev/null
for _ in $(seq 150); do
	[ "$(api GET "/v1/servers/$csrv" | jq -r .state)" = stopped ] &&
		[ "$(api GET "/v1/servers/$isrv" | jq -r .state)" = stopped ] && break
	sleep 0.2
done
[ "$(api GET "/v1/servers/$csrv" | jq -r .state)" = stopped ] || bad "carol's server did not stop"

# Under the sanitizers, what they say at exit (leaks included) fails.
kill "$probe" && wait "$probe" 2>/dev/null
probe=
kill "$pid" && wait "$pid" 2>/dev/null
pid=
if grep -q 'Sanitizer' "$tmp/err" "$tmp/probe.err" 2>/dev/null; then
	bad "sanitizer report: $(grep -h -A12 'Sanitizer' "$tmp/err" "$tmp/probe.err" | head -40)"
else
	ok "cnlabd and the agent stop cleanly (no sanitizer report)"
fi

[ $fails = 0 ] && echo "all proxy checks passed" || echo "$fails FAILED"
exit $((fails > 0))
