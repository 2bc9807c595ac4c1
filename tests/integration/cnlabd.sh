#!/usr/bin/env bash
# cnlabd.sh - the cnlabd binary end to end: --help, refusal to start without
# a JWT secret (or with a short one), start on port 0 with --bootstrap-admin
# and the "listening on" line, /healthz and a login over real HTTP, a
# restart on the same data directory, and a clean exit on SIGTERM.
set -u
cnlabd=$1
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}

"$cnlabd" --help | grep -q -- '--bootstrap-admin' && ok help || bad help

out=$(env -u CNLAB_JWT_SECRET "$cnlabd" --data-dir "$tmp/d" 2>&1)
[ $? = 2 ] && grep -q 'CNLAB_JWT_SECRET must be set' <<<"$out" &&
	ok no-secret || bad "no-secret: $out"
out=$(CNLAB_JWT_SECRET=short "$cnlabd" --data-dir "$tmp/d" 2>&1)
[ $? = 2 ] && grep -q 'at least 32 bytes' <<<"$out" &&
	ok short-secret || bad "short-secret: $out"

export CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=hunter2-but-longer

# start DIR [ARGS...]: run cnlabd on port 0; sets pid and port.
start() {
	local dir=$1
	shift
	"$cnlabd" --data-dir "$dir" --listen 127.0.0.1:0 "$@" \
		>"$tmp/out" 2>"$tmp/err" &
	pid=$!
	port=
	for _ in $(seq 100); do
		port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	return 1
}

start "$tmp/d" --bootstrap-admin root && ok listening || bad "listening: $(cat "$tmp/err")"
[ -f "$tmp/d/cnlab.db" ] && ok data-dir || bad data-dir
body=$(curl -sS "http://127.0.0.1:$port/healthz")
[ "$body" = '{"status":"ok"}' ] && ok healthz || bad "healthz: $body"
tok=$(curl -sS -X POST -d '{"user":"root","password":"hunter2-but-longer"}' \
	"http://127.0.0.1:$port/v1/auth/login" | jq -r .token)
names=$(curl -sS -H "Authorization: Bearer $tok" \
	"http://127.0.0.1:$port/v1/projects" | jq -r '.items[].name')
[ "$names" = system ] && ok login-and-list || bad "login-and-list: $names"
kill -TERM "$pid"
wait "$pid" && ok sigterm || bad sigterm
pid=

# A restart with the same flag leaves the store as it was.
start "$tmp/d" --bootstrap-admin root && ok restart || bad "restart: $(cat "$tmp/err")"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST \
	-d '{"user":"root","password":"hunter2-but-longer"}' \
	"http://127.0.0.1:$port/v1/auth/login")
[ "$code" = 200 ] && ok login-after-restart || bad "login-after-restart: $code"
kill -TERM "$pid"
wait "$pid"
pid=

[ "$fails" = 0 ] || exit 1
