#!/usr/bin/env bash
# telemetry_bench.sh - what tracing costs a submission: durable submits/s
# (wrk, 64 connections, bench/wrk_submit.lua) against cnlabd with no
# exporter, with spans exported to a loopback collector (and lines pushed
# to a loopback Loki), and with the collector down, in the same run.
# Prints one row per setting and the spans exported and dropped.
#
# Usage: bench/telemetry_bench.sh [SECONDS] [CNLABD]
set -u
secs=${1:-8}
here=$(cd "$(dirname "$0")" && pwd)
cnlabd=${2:-$here/../build/src/server/cnlabd}
t=$(mktemp -d /tmp/telbench.XXXX)
cpid=
cleanup() {
	[ -n "$cpid" ] && kill "$cpid" 2>/dev/null
	rm -rf "$t"
}
trap cleanup EXIT
export HOME=$t/home
mkdir -p "$HOME"
export CNLAB_ADMIN_PASSWORD=benchpass-1234567
export CNLAB_JWT_SECRET=$(head -c 48 /dev/urandom | base64)
python3 "$here/../tests/integration/otel_collector.py" "$t/port" >/dev/null &
cpid=$!
for _ in $(seq 100); do [ -s "$t/port" ] && break; sleep 0.05; done
coll=http://127.0.0.1:$(cat "$t/port")

one() { # NAME OTLP LOKI
	local d=$t/d.$1 dpid port base tok proj rps m
	env ${2:+CNLAB_OTLP_ENDPOINT=$2} ${3:+CNLAB_LOKI_URL=$3} \
		"$cnlabd" --data-dir "$d" --listen 127.0.0.1:0 --log-level warn \
		--bootstrap-admin root >"$t/out.$1" 2>"$t/err.$1" &
	dpid=$!
	for _ in $(seq 500); do grep -q '^listening on' "$t/out.$1" && break; sleep 0.02; done
	port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$t/out.$1")
	base=http://127.0.0.1:$port
	tok=$(curl -sS -X POST -d "{\"user\":\"root\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" "$base/v1/auth/login" | jq -r .token)
	proj=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"name":"bench"}' "$base/v1/projects" | jq -r .id)
	curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"user":"root","role":"member"}' \
		"$base/v1/projects/$proj/members" >/dev/null
	rps=$(CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj wrk -t2 -c64 -d"${secs}s" --timeout 60s \
		-s "$here/wrk_submit.lua" "$base" | sed -n 's/^Requests\/sec: *//p')
	sleep 2
	m=$(curl -sS "$base/metrics" | sed -n 's/^cnlab_otlp_spans_\(exported\|dropped\)_total \(.*\)/\1=\2/p' | tr '\n' ' ')
	printf '%-28s %10s submits/s   %s\n' "$1" "$rps" "$m"
	kill "$dpid"
	wait "$dpid"
}
echo "telemetry_bench: $secs s of wrk per row, same machine, same run"
# The baseline first and last: the drift of a shared machine shows.
one "no exporter (baseline)" "" ""
one "OTLP collector down" "http://127.0.0.1:9" ""
one "OTLP + Loki to collector" "$coll" "$coll"
one "no exporter (baseline again)" "" ""
