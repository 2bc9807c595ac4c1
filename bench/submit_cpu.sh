#!/usr/bin/env bash
# submit_cpu.sh - cnlabd's CPU per durable submission, beside its CPU per
# GET /healthz, measured on one daemon in the same run (issue 19, part S).
#
#   bench/submit_cpu.sh [--build DIR] [--cnlabd PATH] [--seconds S]
#                       [--connections N] [--perf] [--strace]
#
# Starts a fresh cnlabd (no agent: submitted jobs stay pending), logs in as
# the bootstrap admin, makes a project, then runs wrk twice with N
# connections (64): GET /healthz, then bench/wrk_submit.lua POSTing jobs.
# Around each run it reads the process's user+sys CPU (/proc/PID/stat) and
# each thread's (/proc/PID/task/*/stat) and prints, per request answered:
#   total    the whole process
#   http     libmicrohttpd's threads (MHD-*) and the acceptor (cnl-accept):
#            parsing, authentication, JSON, the handler, the audit record
#   commit   the group-commit syncer (cnl-commit): fdatasync
#   other    the rest: the controller's loop (the scheduling cycle, kicked
#            by each submission) and threads that ended during the run
# and the context switches (voluntary and not) of all threads per request:
# on a virtual machine each costs several µs of the CPU above; and the
# scheduling cycles run per request (/metrics: how well the loop batches
# the kicks of a burst of submissions).
# With --perf the submit run is also recorded (perf record -g) and the top
# symbols of the HTTP threads and of the others are printed, and the
# split by thread and library.  With --strace
# each route gets one more run, under `strace -c -f`, for its system calls
# per request: unlike CPU time on a shared machine, a count that does not
# depend on the load.
#
# A bench, not a test: it prints figures and exits 1 only when a
# measurement fails.  The machine may be shared: compare the two lines of
# one run, not figures of different runs.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
cnlabd=
secs=5
conns=64
use_perf=0
use_strace=0
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$(realpath "${2:?--build: give a directory}") && shift ;;
	--cnlabd) cnlabd=$(realpath "${2:?--cnlabd: give a file}") && shift ;;
	--seconds) secs=${2:?--seconds: give a number} && shift ;;
	--connections) conns=${2:?--connections: give a number} && shift ;;
	--perf) use_perf=1 ;;
	--strace) use_strace=1 ;;
	-h | --help)
		sed -n '5,6p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "submit_cpu.sh: unknown argument \"$1\" (see --help)" >&2
		exit 2
		;;
	esac
	shift
done
for v in secs conns; do
	case ${!v} in '' | *[!0-9]* | 0)
		echo "submit_cpu.sh: --${v/secs/seconds}: want a positive integer, got \"${!v}\"" >&2
		exit 2
		;;
	esac
done
[ -n "$cnlabd" ] || cnlabd=$build/src/server/cnlabd
[ -x "$cnlabd" ] || {
	echo "submit_cpu.sh: no cnlabd at $cnlabd (build it, or give --cnlabd)" >&2
	exit 1
}
for t in wrk curl jq; do
	command -v "$t" >/dev/null || {
		echo "submit_cpu.sh: $t is needed (scripts/bootstrap --bench installs it)" >&2
		exit 1
	}
done
if [ "$use_strace" = 1 ] && ! command -v strace >/dev/null; then
	echo "submit_cpu.sh: --strace: strace is not installed" >&2
	exit 1
fi
if [ "$use_perf" = 1 ] && ! command -v perf >/dev/null; then
	echo "submit_cpu.sh: --perf: perf is not installed" >&2
	exit 1
fi

tmp=$(mktemp -d /tmp/cnlab-submit-cpu-XXXXXX)
dpid=
cleanup() {
	[ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() {
	echo "submit_cpu.sh: $*" >&2
	exit 1
}

export HOME=$tmp/home
mkdir -p "$HOME"
export CNLAB_ADMIN_PASSWORD=benchpass-1234567
CNLAB_JWT_SECRET=$(head -c 48 /dev/urandom | base64)
export CNLAB_JWT_SECRET
"$cnlabd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --log-level warn \
	--bootstrap-admin root >"$tmp/out" 2>"$tmp/err" &
dpid=$!
for _ in $(seq 500); do
	grep -q '^listening on' "$tmp/out" && break
	sleep 0.02
done
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/out")
[ -n "$port" ] || die "cnlabd did not start: $(tail -3 "$tmp/err")"
base=http://127.0.0.1:$port
tok=$(curl -sS -X POST -d "{\"user\":\"root\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
	"$base/v1/auth/login" | jq -r .token)
{ [ -n "$tok" ] && [ "$tok" != null ]; } || die "login failed"
proj=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"name":"bench"}' \
	"$base/v1/projects" | jq -r .id)
{ [ -n "$proj" ] && [ "$proj" != null ]; } || die "project create failed"
curl -sS -X POST -H "Authorization: Bearer $tok" \
	-d '{"user":"root","role":"member"}' "$base/v1/projects/$proj/members" >/dev/null ||
	die "membership failed"

tck=$(getconf CLK_TCK)
perf_pid=
# One line per live thread: "tid comm ticks"; then "total - ticks".  The
# comm is in parentheses and may hold spaces: the fields are split after
# the last ")".
snap() {
	awk '{
		o = index($0, "("); c = o
		while ((i = index(substr($0, c + 1), ")")) > 0) c += i
		comm = substr($0, o + 1, c - o - 1); gsub(/ /, "_", comm)
		split(substr($0, c + 2), f, " ")
		tid = FILENAME; sub(/\/stat$/, "", tid); sub(/.*\//, "", tid)
		print (FILENAME ~ /task/ ? tid : "total"), \
		      (FILENAME ~ /task/ ? comm : "-"), f[12] + f[13]
	}' /proc/"$dpid"/task/*/stat /proc/"$dpid"/stat 2>/dev/null
	# Context switches of the live threads (those of ended threads are
	# lost: a window with the same threads at both ends counts them all).
	awk '/^(non)?voluntary_ctxt_switches/ { n += $2 } END { print "cs - " n }' \
		/proc/"$dpid"/task/*/status 2>/dev/null
}
# classify BEFORE AFTER: "total http commit other" in ticks.
classify() {
	awk 'NR == FNR { t0[$1] = $3; next }
	     { d = $3 - ($1 in t0 ? t0[$1] : 0) }
	     $1 == "total" { total = d; next }
	     $1 == "cs" { cs = d; next }
	     $2 ~ /^MHD/ || $2 == "cnl-accept" { http += d; next }
	     $2 == "cnl-commit" { commit += d; next }
	     END { printf "%d %d %d %d %d\n", total, http, commit, total - http - commit, cs }' "$1" "$2"
}
# count METHOD ROUTE: requests of that route answered so far (/metrics).
count() {
	curl -sS "$base/metrics" | awk -v m="$1" -v r="$2" '
	    index($0, "cnlab_http_requests_total{method=\"" m "\",route=\"" r "\"") == 1 { n += $NF }
	    END { print n + 0 }'
}
# cycles: scheduling cycles run so far (/metrics).
cycles() {
	curl -sS "$base/metrics" | awk '
	    $1 == "cnlab_scheduling_cycle_seconds_count" { n = $2 }
	    END { print n + 0 }'
}
# measure NAME METHOD ROUTE WRK-ARGS...: prints "requests total http commit
# other" (ticks), the context switches and the scheduling cycles.  The window opens a second into the run and closes before
# its end, so that every connection's thread lives through it (a thread's
# CPU leaves /proc/PID/task with it); the requests in the window are the
# daemon's own count of that route's answers.
measure() {
	local name=$1 m=$2 route=$3 n0 n1 c0 c1 wpid
	shift 3
	wrk -t2 -c"$conns" -d"$((secs + 4))s" --timeout 60s "$@" >"$tmp/wrk-$name" 2>&1 &
	wpid=$!
	sleep 1
	n0=$(count "$m" "$route")
	c0=$(cycles)
	snap >"$tmp/$name.0"
	# perf record -p follows the threads there when it starts: start it
	# once every connection has its thread.
	if [ "$use_perf" = 1 ] && [ "$name" = submit ]; then
		perf record -g -p "$dpid" -o "$tmp/perf.data" >/dev/null 2>&1 &
		perf_pid=$!
	fi
	sleep "$secs"
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid"
	fi
	snap >"$tmp/$name.1"
	n1=$(count "$m" "$route")
	c1=$(cycles)
	wait "$wpid" || die "wrk $name failed: $(tail -3 "$tmp/wrk-$name")"
	grep -q 'Non-2xx' "$tmp/wrk-$name" &&
		echo "submit_cpu.sh: wrk $name: $(grep Non-2xx "$tmp/wrk-$name")" >&2
	[ "$((n1 - n0))" -gt 0 ] || die "wrk $name: nothing answered in the window"
	echo "$((n1 - n0)) $(classify "$tmp/$name.0" "$tmp/$name.1") $((c1 - c0))"
}
# syscalls NAME WRK-ARGS...: system calls per request of the daemon (all
# threads) over 3 s of a wrk run, strace -c attached to it.  The requests
# are its sendmsg calls (libmicrohttpd sends a small answer, head and body,
# in one): strace attaches to one thread after another, so the daemon's own
# count over the same seconds would include requests it did not see.
syscalls() {
	local name=$1 wpid
	shift
	wrk -t2 -c"$conns" -d6s --timeout 60s "$@" >"$tmp/wrk-st-$name" 2>&1 &
	wpid=$!
	sleep 1
	timeout -s INT 3 strace -c -f -p "$dpid" -o "$tmp/strace-$name" 2>/dev/null
	wait "$wpid"
	# Rows: % time, seconds, usecs/call, calls, [errors], name.
	awk -v l="$name" '
	    NF >= 5 && $1 ~ /^[0-9.]+$/ && $NF != "total" {
	        name[++k] = $NF; calls[k] = $4; tot += $4
	        if ($NF == "sendmsg") n = $4 }
	    END {
	        if (!n) { print l ": strace saw no answer"; exit 1 }
	        printf "%s: %.1f system calls per request:", l, tot / n
	        for (i = 1; i <= k; i++)
	            if (calls[i] / n >= 0.05)
	                printf " %s %.1f", name[i], calls[i] / n
	        print "" }' "$tmp/strace-$name" || die "strace $name failed"
}
# line LABEL REQUESTS TOTAL HTTP COMMIT OTHER SWITCHES CYCLES
line() {
	awk -v l="$1" -v n="$2" -v t="$3" -v h="$4" -v c="$5" -v o="$6" -v cs="$7" \
		-v cy="$8" -v tck="$tck" -v s="$secs" 'BEGIN {
		us = 1e6 / tck / n
		printf "| %s | %.0f/s | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f |\n",
		       l, n / s, t * us, h * us, c * us, o * us, cs / n, cy / n }'
}

measure healthz GET /healthz "$base/healthz" >"$tmp/healthz"
read -r hn ht hh hc ho hx hy <"$tmp/healthz"
CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj measure submit POST \
	"/v1/projects/{project}/jobs" -s "$here/bench/wrk_submit.lua" "$base" >"$tmp/submit"
read -r sn st sh sc so sx sy <"$tmp/submit"

echo "cnlabd CPU per request (µs), wrk -t2 -c$conns ${secs}s each, same daemon;" \
	"load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%F)"
echo
echo "| request | rate | total | http threads | commit syncer | other (cycle) | context switches | cycles |"
echo "|---|---|---|---|---|---|---|---|"
line "GET /healthz" "$hn" "$ht" "$hh" "$hc" "$ho" "$hx" "$hy"
line "POST job (durable)" "$sn" "$st" "$sh" "$sc" "$so" "$sx" "$sy"
if [ "$use_strace" = 1 ]; then
	echo
	syscalls healthz "$base/healthz"
	CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj syscalls submit \
		-s "$here/bench/wrk_submit.lua" "$base"
fi
if [ "$use_perf" = 1 ]; then
	echo
	echo "perf, submit run: top symbols of the HTTP threads (MHD-*)"
	perf report -i "$tmp/perf.data" --no-children --comms MHD-connection \
		--sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -25
	echo
	echo "perf, submit run: share of each thread name"
	perf report -i "$tmp/perf.data" --no-children --sort comm --stdio 2>/dev/null |
		grep -E "^ +[0-9]"
	echo
	echo "perf, submit run: share of each thread name and library (the"
	echo "user-space call graphs are not usable without frame pointers: this"
	echo "split says which code the time is in: kernel, libc, SQLite, ...)"
	perf report -i "$tmp/perf.data" --no-children --sort comm,dso \
		--stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -15
	echo
	echo "perf, submit run: top symbols of the other threads"
	perf report -i "$tmp/perf.data" --no-children --comms cnlabd,cnl-commit \
		--sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -15
fi
