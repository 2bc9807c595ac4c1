#!/usr/bin/env bash
# http_limits.sh - cnlabd's connection limits, tried as an attacker would,
# with raw sockets (http_attacks.py) against a real cnlabd on loopback:
#
#   - 600 half-open connections from 127.0.0.2 (more than the per-client
#     cap, and more than the 512 connections that once locked everyone
#     out): those over the cap get 503 overloaded at once, the rest are
#     cut by the header timeout, and a client on 127.0.0.1 is served
#     while they are held;
#   - 2,000 connections at once from 40 addresses: every one gets a
#     complete reply, 200 or 503 with Retry-After and the JSON error body,
#     none an empty one;
#   - a head sent by half, or a byte at a time, is closed after the header
#     timeout; a body that stops is cut after the body timeout, while a
#     slow body that keeps coming is answered;
#   - framing: two Content-Length headers (even equal), Content-Length
#     with Transfer-Encoding, a negative Content-Length: 400; a JSON body
#     over http_body_max: 413 naming the limit, announced or chunked;
#   - over TLS, a connection over the cap gets its 503 after the handshake;
#   - bad limits in the configuration are refused naming the key;
#   - the CLI against a server that accepts and never answers, and one
#     whose connect never completes: exit 6 naming the server and the
#     timeout, with timeouts from flags and from the environment.
#
# Timeouts in the configuration are short so the test is quick; nothing
# asserts how long anything took.
set -u
cnlabd=$1
cli=$2
here=$(cd "$(dirname "$0")" && pwd)
attack="python3 $here/http_attacks.py"
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
export CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=hunter2-but-longer

# start NAME ARGS...: cnlabd on port 0 with its own data dir; sets port.
start() {
	local name=$1
	shift
	"$cnlabd" --data-dir "$tmp/$name" --listen 127.0.0.1:0 \
		--bootstrap-admin root "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	pids+=($!)
	port=
	for _ in $(seq 200); do
		port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/$name.out")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	echo "cnlabd $name did not start: $(cat "$tmp/$name.err")"
	exit 1
}

# Nonsense limits are refused, naming the key.
for kv in "http-max-connections 0" "http-max-connections-per-client -3" \
	"http-header-timeout 0s" "http-body-max 12" "http-body-timeout never"; do
	set -- $kv
	out=$("$cnlabd" --data-dir "$tmp/refused" --listen 127.0.0.1:0 \
		"--$1" "$2" 2>&1)
	rc=$?
	key=${1//-/_}
	[ $rc = 2 ] && grep -q "$key" <<<"$out" && ok "refused $1 $2" ||
		bad "$1 $2: rc=$rc $out"
done

# A: default per-client cap (128) and global limit (1024); a header timeout
# long enough for the victim to be served while the attack is held.
start a --http-header-timeout 8s --http-body-timeout 2s
pa=$port
out=$($attack slowloris "$pa" 600)
rc=$?
echo "$out"
[ $rc = 0 ] && grep -q '^refused=472 cut=128 other=0$' <<<"$out" &&
	ok "600 half-open from one address: 472 refused at once (503), 128 cut by the header timeout" ||
	bad "slowloris: $out"

out=$($attack flood "$pa" 2000)
rc=$?
echo "$out"
[ $rc = 0 ] && ok "2,000 connections at once: no empty reply" || bad "flood"
# After both attacks the server still serves.
[ "$(curl -sS --max-time 60 "http://127.0.0.1:$pa/healthz")" = '{"status":"ok"}' ] &&
	ok "healthz after the attacks" || bad "healthz after the attacks"

# Framing.
body=$($attack raw "$pa" 400 'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}')
[ $? = 0 ] && jq -e '.error.message | test("more than one Content-Length")' <<<"$body" >/dev/null &&
	ok "two equal Content-Length headers: 400" || bad "duplicate Content-Length: $body"
body=$($attack raw "$pa" 400 'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 7\r\n\r\n{}')
[ $? = 0 ] && ok "two different Content-Length headers: 400" || bad "different Content-Length: $body"
body=$($attack raw "$pa" 400 'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n')
[ $? = 0 ] && jq -e '.error.message | test("Transfer-Encoding")' <<<"$body" >/dev/null &&
	ok "Content-Length with Transfer-Encoding: 400" || bad "CL+TE: $body"
# Smuggling: heads a proxy in front could frame otherwise are 400 naming
# the header.
smuggle() { # smuggle WHAT WANT HEAD-LINES BODY
	local b
	b=$($attack raw "$pa" 400 "POST /v1/auth/login HTTP/1.1\\r\\nHost: x\\r\\n$3\\r\\n$4GET /v1/smuggled HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
	[ $? = 0 ] && jq -e --arg w "$2" '.error.message | contains($w)' <<<"$b" >/dev/null &&
		ok "$1: 400 naming it" || bad "$1: $b"
}
smuggle "space before the colon of Transfer-Encoding" 'header "Transfer-Encoding?"' \
	'Transfer-Encoding : chunked\r\nContent-Length: 3\r\n' '2\r\n{}\r\n0\r\n\r\n'
smuggle "space before the colon of Content-Length" 'header "Content-Length?"' \
	'Content-Length : 40\r\n' '{}'
smuggle "a folded Content-Length" 'header "Content-Length0"' \
	'Content-Length: 2\r\n 0\r\n' '{}'
smuggle "a folded Transfer-Encoding" 'header "Transfer-Encodingchunked"' \
	'Transfer-Encoding:\r\n chunked\r\nContent-Length: 2\r\n' '{}'
smuggle "a header folded into Transfer-Encoding" 'header "X-ATransfer-Encoding:?chunked"' \
	'X-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: 2\r\n' '{}'
smuggle "a bare CR in a value" 'header "X-A"' \
	'X-A: a\rContent-Length: 40\r\nContent-Length: 2\r\n' '{}'
smuggle "Transfer-Encoding: chunked, identity" 'other than chunked' \
	'Transfer-Encoding: chunked, identity\r\n' '2\r\n{}\r\n0\r\n\r\n'
smuggle "two Host headers" 'more than one Host' 'Host: y\r\nContent-Length: 2\r\n' '{}'
# A NUL byte, percent-encoded, in the target: libmicrohttpd's in-place
# decoding would end the path there (/v1/users%00.css served as
# /v1/users, a cache in front seeing a stylesheet).
for target in '/healthz%00/x' '/healthz%00' '/v1/users%00.css' '/healthz?x=%00'; do
	body=$($attack raw "$pa" 400 "GET $target HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
	[ $? = 0 ] && jq -e '.error.message | contains("%00")' <<<"$body" >/dev/null &&
		ok "%00 in the target ($target): 400 naming it" || bad "%00 in $target: $body"
done
# HTTP/1.1 without Host: which origin it meant is for a proxy in front and
# us to guess, each our own way; HTTP/1.0 has no chunked coding.
body=$($attack raw "$pa" 400 'GET /healthz HTTP/1.1\r\n\r\n')
[ $? = 0 ] && jq -e '.error.message | startswith("Host")' <<<"$body" >/dev/null &&
	ok "HTTP/1.1 without Host: 400 naming it" || bad "no Host: $body"
body=$($attack raw "$pa" 400 'POST /v1/auth/login HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n')
[ $? = 0 ] && jq -e '.error.message | startswith("Transfer-Encoding")' <<<"$body" >/dev/null &&
	ok "Transfer-Encoding in HTTP/1.0: 400 naming it" || bad "TE in 1.0: $body"
[ "$(curl -sS -o /dev/null -w '%{http_code}' --http1.0 "http://127.0.0.1:$pa/healthz")" = 200 ] &&
	ok "HTTP/1.0 without Host still served" || bad "HTTP/1.0 /healthz refused"
body=$($attack raw "$pa" 400 'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}')
[ $? = 0 ] && ok "negative Content-Length: 400" || bad "negative Content-Length: $body"
body=$($attack raw "$pa" 400 'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n{}')
[ $? = 0 ] && ok "non-digit Content-Length: 400" || bad "non-digit Content-Length: $body"

# Size: 2 MiB of JSON to a JSON route (limit 1 MiB by default).
head -c $((2 << 20)) /dev/zero | tr '\0' ' ' >"$tmp/big.json"
code=$(curl -sS -o "$tmp/413" -w '%{http_code}' -H 'Content-Type: application/json' \
	--data-binary @"$tmp/big.json" "http://127.0.0.1:$pa/v1/auth/login")
[ "$code" = 413 ] && jq -e '.error.message | test("1048576")' "$tmp/413" >/dev/null &&
	ok "2 MiB JSON body: 413 naming the limit" || bad "413: $code $(cat "$tmp/413")"
code=$(curl -sS -o "$tmp/413c" -w '%{http_code}' -H 'Content-Type: application/json' \
	-H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big.json" \
	"http://127.0.0.1:$pa/v1/auth/login")
[ "$code" = 413 ] && ok "2 MiB chunked JSON body: 413" || bad "413 chunked: $code $(cat "$tmp/413c")"

# B: short timeouts, a small body limit.
start b --http-header-timeout 1s --http-body-timeout 1s --http-body-max 4kib
pb=$port
$attack stall-head "$pb" || bad stall-head
$attack trickle-head "$pb" 30 || bad trickle-head
$attack stall-body "$pb" || bad stall-body
$attack slow-body "$pb" 3 || bad slow-body
head -c 5000 /dev/zero | tr '\0' ' ' >"$tmp/5k.json"
code=$(curl -sS -o "$tmp/413b" -w '%{http_code}' -H 'Content-Type: application/json' \
	--data-binary @"$tmp/5k.json" "http://127.0.0.1:$pb/v1/auth/login")
[ "$code" = 413 ] && jq -e '.error.message | test("4096")' "$tmp/413b" >/dev/null &&
	ok "http_body_max 4kib: a 5000-byte body is a 413 naming 4096" ||
	bad "413 at 4kib: $code $(cat "$tmp/413b")"
# A kept-alive connection serves a second request within the timeout.
out=$(curl -sS "http://127.0.0.1:$pb/healthz" "http://127.0.0.1:$pb/healthz")
[ "$out" = '{"status":"ok"}{"status":"ok"}' ] && ok "keep-alive" || bad "keep-alive: $out"

# C: TLS, a per-client cap of 3: over it, a 503 needs the handshake first.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" \
	-out "$tmp/cert.pem" -subj /CN=127.0.0.1 -days 1 \
	-addext subjectAltName=IP:127.0.0.1 2>/dev/null
start c --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" \
	--http-max-connections-per-client 3
$attack tls-cap "$port" 3 || bad tls-cap

# The CLI's timeouts, against fake servers (a short timeout each).
# waitport FILE: the port a fake server wrote.
waitport() {
	for _ in $(seq 200); do
		[ -s "$1" ] && cat "$1" && return 0
		sleep 0.05
	done
	return 1
}
export CNLAB_CONFIG=$tmp/cli.json CNLAB_TOKEN=cnl_not_a_real_token
python3 "$here/http_attacks.py" silent "$tmp/silent.port" &
pids+=($!)
ps=$(waitport "$tmp/silent.port") || bad "silent server"
out=$("$cli" --server "http://127.0.0.1:$ps" --read-timeout 1s jobs list 2>&1)
rc=$?
[ $rc = 6 ] && grep -q "127.0.0.1:$ps accepted the connection but sent nothing for 1s (read timeout" <<<"$out" &&
	ok "CLI, silent server, --read-timeout 1s: exit 6: $out" || bad "read timeout: rc=$rc $out"
out=$(CNLAB_READ_TIMEOUT=2s "$cli" --server "http://127.0.0.1:$ps" project list 2>&1)
rc=$?
[ $rc = 6 ] && grep -q "sent nothing for 2s (read timeout" <<<"$out" &&
	ok "CLI, silent server, CNLAB_READ_TIMEOUT=2s: exit 6" || bad "env read timeout: rc=$rc $out"
python3 "$here/http_attacks.py" full "$tmp/full.port" &
pids+=($!)
pf=$(waitport "$tmp/full.port") || bad "full server"
out=$("$cli" --server "http://127.0.0.1:$pf" --connect-timeout 1s jobs list 2>&1)
rc=$?
[ $rc = 6 ] && grep -q "timed out connecting to http://127.0.0.1:$pf after 1s (connect timeout" <<<"$out" &&
	ok "CLI, connect never completes, --connect-timeout 1s: exit 6: $out" || bad "connect timeout: rc=$rc $out"
out=$("$cli" --server "http://127.0.0.1:$ps" --read-timeout banana jobs list 2>&1)
rc=$?
[ $rc = 2 ] && grep -q -- "--read-timeout" <<<"$out" && ok "--read-timeout banana: exit 2" ||
	bad "bad read timeout: rc=$rc $out"
out=$(CNLAB_CONNECT_TIMEOUT=0s "$cli" --server "http://127.0.0.1:$ps" jobs list 2>&1)
rc=$?
[ $rc = 2 ] && grep -q "CNLAB_CONNECT_TIMEOUT" <<<"$out" && ok "CNLAB_CONNECT_TIMEOUT=0s: exit 2" ||
	bad "bad connect timeout: rc=$rc $out"
# A real server answers within the default timeouts.
out=$("$cli" --server "http://127.0.0.1:$pa" jobs list 2>&1)
rc=$?
[ $rc = 3 ] && ok "CLI against cnlabd: answered (not logged in there: 3)" || bad "cli vs cnlabd: rc=$rc $out"

echo "fails=$fails"
[ $fails = 0 ]
