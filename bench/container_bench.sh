#!/usr/bin/env bash
# container_bench.sh - what a workload's container costs: the median of N
# (default 30) trivial jobs, in a container (crun) beside the bare setting
# measured in the same run, interleaved:
#   start: from the launch (the agent's "workload started", logged when the
#          launcher has started the runtime or the command) to the first
#          output line of the command (it prints the time it runs at)
#   e2e:   `cnlab run --gpu ... hello.sh` from submit to the end of its
#          output and the job's end
# Real cnlabd, two real agents on fake pools (the container one on an H100,
# the bare one, running as uid 65534, on an A100), the real CLI.  Where
# scripts/bootstrap built its Debian image, a third column runs the same
# job in it (an image's overlay instead of the built-in "host").
#
#   bench/container_bench.sh [BUILD_DIR] [N]
set -u
build=${1:-build}
n=${2:-30}
cnlabd=$build/src/server/cnlabd
agent=$build/src/agent/cnlab-agent
cnlab=$build/src/cli/cnlab
for b in "$cnlabd" "$agent" "$cnlab"; do
	[ -x "$b" ] || {
		echo "container_bench: $b is not built" >&2
		exit 1
	}
done
cnlabd=$(realpath "$cnlabd") agent=$(realpath "$agent") cnlab=$(realpath "$cnlab")
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

export CNLAB_JWT_SECRET=container-bench-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
mkdir -p "$HOME"
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root \
	--cycle-interval 50ms >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening on' "$tmp/cnlabd.out" && break; sleep 0.1; done
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port
api() { curl -sS -X "$1" -H "Authorization: Bearer $3" ${4:+-d "$4"} "$base$2"; }
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }
root=$(login root admin-password-1)
sys=$(api GET /v1/projects "$root" | jq -r '.items[] | select(.name=="system") | .id')
jointok() { api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$1\"}" | jq -r .token; }
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"bench"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null

start_agent() { # NAME POOL FLAGS...
	local name=$1 pool=$2
	shift 2
	CNLAB_AGENT_TOKEN=$(jointok "cb$$-$name") "$agent" --server "$base" --name "cb$$-$name" \
		--gpus "$pool" --work-dir "$tmp/agent-$name" "$@" \
		>"$tmp/agent-$name.out" 2>"$tmp/agent-$name.err" &
	pids+=($!)
	for _ in $(seq 100); do grep -q 'msg=registered' "$tmp/agent-$name.err" && return 0; sleep 0.1; done
	echo "container_bench: agent $name did not register: $(cat "$tmp/agent-$name.err")" >&2
	exit 1
}
start_agent ctr fake:1xH100-80GB-SXM
start_agent bare fake:1xA100-80GB --isolation bare --run-as-uid 65534

echo ana-password-1 | "$cnlab" login --server "$base" --user ana --password-stdin >/dev/null 2>&1 || exit 1
cd "$tmp" || exit 1
echo 'date +%s%N' >hello.sh

ms() { date +%s%3N; }
image=/var/cache/cnlab/images/debian-12-python.tar
with_image=0
if [ -r "$image" ]; then
	curl -sS -X PUT -H "Authorization: Bearer $root" --data-binary @"$image" \
		"$base/v1/images?name=debian:12-python" | jq -e .digest >/dev/null && with_image=1
fi
# one MODE GPU [FLAGS]: run a job, append its e2e ms and start ms to the
# lists (the agent's log: MODE's, or ctr's for "image").
one() {
	local mode=$1 gpu=$2 t0 t1 job first started log=$1
	shift 2
	[ "$mode" = image ] && log=ctr
	t0=$(ms)
	"$cnlab" run --gpu "$gpu" "$@" hello.sh >"$tmp/run.out" 2>"$tmp/run.err" || {
		echo "container_bench: $mode job failed: $(cat "$tmp/run.err")" >&2
		exit 1
	}
	t1=$(ms)
	job=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' "$tmp/run.err")
	first=$(grep -m1 '^[0-9]\{19\}$' "$tmp/run.out")
	started=$(grep "msg=\"workload started\" id=$job " "$tmp/agent-$log.err" |
		sed -n 's/^ts=\([^ ]*\) .*/\1/p' | head -1)
	started=$(date -d "$started" +%s%3N)
	echo $((t1 - t0)) >>"$tmp/e2e-$mode"
	echo $((first / 1000000 - started)) >>"$tmp/start-$mode"
}
# The image is fetched and unpacked by its first job, not measured.
[ "$with_image" = 1 ] && one image h100-5 --image debian:12-python && rm -f "$tmp"/*-image
for i in $(seq "$n"); do
	one ctr h100-5
	one bare a100-5
	[ "$with_image" = 1 ] && one image h100-5 --image debian:12-python
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "container_bench: $n trivial jobs each, interleaved, medians (ms)"
echo
if [ "$with_image" = 1 ]; then
	echo "| figure | container (crun), host | container, Debian image (overlay) | bare (baseline) | container - bare |"
	echo "|---|---:|---:|---:|---:|"
else
	echo "| figure | container (crun) | bare (baseline) | difference |"
	echo "|---|---:|---:|---:|"
fi
for f in start e2e; do
	c=$(median "$tmp/$f-ctr")
	b=$(median "$tmp/$f-bare")
	label="launch to first output line"
	[ "$f" = e2e ] && label="cnlab run, submit to end"
	d=$(awk -v c="$c" -v b="$b" 'BEGIN {printf "%+.0f", c - b}')
	if [ "$with_image" = 1 ]; then
		echo "| $label | $c | $(median "$tmp/$f-image") | $b | $d |"
	else
		echo "| $label | $c | $b | $d |"
	fi
done
