#!/usr/bin/env bash
# dispatch_bench.sh - trivial jobs dispatched and completed per second on one
# node: N jobs (`true`, default 200) submitted at once over the REST API to a
# real cnlabd (its scheduling cycle every 50 ms, as in production it is
# triggered by each submit) with one real agent, timed from the first
# submit to the last job's end as cnlabd records it.  Beside the rate, the
# agent's CPU per job: its own (utime + stime) and with its reaped children
# (the workloads' supervisors, the runtime, the command), from
# /proc/PID/stat.
#
# Rows: the agent built with this tree, in a container (crun, the default
# isolation; as root) and bare (isolation = bare, as uid 65534); and the
# same with the agent given by --baseline AGENT (e.g. one built from an
# earlier commit), measured in the same run.  The Slurm figure is bench H's
# (bench/slurm_bench.sh, 8 slurmd) when it is installed; its last result
# is quoted from bench/results/slurm_dispatch.txt when that file exists.
#
# Row container-run_dir: this tree's agent with run_dir (its bundles and
# crun's state) on a tmpfs, /dev/shm, where it is one.  --rounds R: all
# rows R times, interleaved (default 1).
#
#   bench/dispatch_bench.sh [--baseline AGENT] [--rounds R] [BUILD_DIR] [N]
set -u
baseline=
rounds=1
while [ $# -gt 0 ]; do
	case $1 in
	--baseline)
		baseline=$(realpath "$2")
		shift 2
		;;
	--rounds)
		rounds=$2
		shift 2
		;;
	*) break ;;
	esac
done
build=${1:-build}
n=${2:-200}
cnlabd=$build/src/server/cnlabd
agent=$build/src/agent/cnlab-agent
for b in "$cnlabd" "$agent" ${baseline:+"$baseline"}; do
	[ -x "$b" ] || {
		echo "dispatch_bench: $b is not built" >&2
		exit 1
	}
done
cnlabd=$(realpath "$cnlabd") agent=$(realpath "$agent")
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
shm=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ -n "$shm" ] && rm -rf "$shm"
	[ -n "${DISPATCH_BENCH_KEEP:-}" ] && echo "dispatch_bench: kept $tmp" >&2 && return
	rm -rf "$tmp"
}
trap cleanup EXIT

export CNLAB_JWT_SECRET=dispatch-bench-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root \
	--cycle-interval 50ms >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening on' "$tmp/cnlabd.out" && break; sleep 0.1; done
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
[ -n "$port" ] || {
	echo "dispatch_bench: cnlabd did not start: $(cat "$tmp/cnlabd.err")" >&2
	exit 1
}
base=http://127.0.0.1:$port
api() { curl -sS -X "$1" -H "Authorization: Bearer $3" ${4:+-d "$4"} "$base$2"; }
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }
root=$(login root admin-password-1)
jointok() { api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$1\"}" | jq -r .token; }
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
ana=$(login ana ana-password-1)

ticks=$(getconf CLK_TCK)
# cpu PID: "own with-children" CPU time in ticks.
cpu() { awk '{print $14 + $15, $14 + $15 + $16 + $17}' "/proc/$1/stat"; }

# run LABEL AGENT FLAGS...: one agent on its own node and project, N jobs.
run() {
	local label=$1 bin=$2 name="db$$-$1-$round" a proj t0 t1 c0 c1 ended
	shift 2
	proj=$(api POST /v1/projects "$root" "{\"name\":\"$name\"}" | jq -r .id)
	api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
	CNLAB_AGENT_TOKEN=$(jointok "$name") "$bin" --server "$base" --name "$name" \
		--gpus fake:2xH100-80GB-SXM --work-dir "$tmp/agent-$label-$round" "$@" \
		>"$tmp/agent-$label-$round.out" 2>"$tmp/agent-$label-$round.err" &
	a=$!
	pids+=($a)
	for _ in $(seq 100); do grep -qs 'msg=registered' "$tmp/agent-$label-$round.err" && break; sleep 0.1; done
	grep -q 'msg=registered' "$tmp/agent-$label-$round.err" || {
		echo "dispatch_bench: agent $label did not register: $(tail -3 "$tmp/agent-$label-$round.err")" >&2
		exit 1
	}
	# One warm-up job (a container's first start prepares the host image).
	api POST "/v1/projects/$proj/jobs" "$ana" '{"command":"true","gpu":"h100-5","cpu_milli":100,"mem_mib":64}' >"$tmp/warm-$label-$round.json"
	for _ in $(seq 100); do grep -q 'msg="workload ended"' "$tmp/agent-$label-$round.err" && break; sleep 0.1; done
	grep -q 'msg="workload ended"' "$tmp/agent-$label-$round.err" || {
		echo "dispatch_bench: $label: warm-up job did not end: $(cat "$tmp/warm-$label-$round.json") $(api GET "/v1/jobs/$(jq -r .id "$tmp/warm-$label-$round.json")" "$ana")" >&2
		exit 1
	}
	sleep 0.5
	# The N submits in one curl (one connection), the clock started.
	: >"$tmp/curl-$label-$round"
	for i in $(seq "$n"); do
		printf -- '--next\n-sS\n-o /dev/null\n-X POST\n-H "Authorization: Bearer %s"\n-d "{\\"command\\":\\"true\\",\\"gpu\\":\\"h100-5\\",\\"cpu_milli\\":100,\\"mem_mib\\":64}"\nurl = "%s"\n' \
			"$ana" "$base/v1/projects/$proj/jobs" >>"$tmp/curl-$label-$round"
	done
	read -r c0 c0c < <(cpu "$a")
	t0=$(date +%s%N)
	curl -K "$tmp/curl-$label-$round" || exit 1
	# Done when cnlabd holds the end of all N (+1 warm-up) jobs.
	st=
	for _ in $(seq 3000); do
		ended=$(grep -c 'msg="workload ended"' "$tmp/agent-$label-$round.err")
		if [ "$ended" -ge $((n + 1)) ]; then
			last=$(grep 'msg="workload ended"' "$tmp/agent-$label-$round.err" | tail -1 |
				sed -n 's/.* id=\([^ ]*\) .*/\1/p')
			st=$(api GET "/v1/jobs/$last" "$ana" | jq -r .state)
			[ "$st" = succeeded ] || [ "$st" = failed ] && break
		fi
		sleep 0.02
	done
	[ "$st" = succeeded ] || [ "$st" = failed ] || {
		echo "dispatch_bench: $label: $ended of $((n + 1)) jobs ended: $(tail -3 "$tmp/agent-$label-$round.err")" >&2
		exit 1
	}
	t1=$(date +%s%N)
	read -r c1 c1c < <(cpu "$a")
	failed=$(grep 'msg="workload ended"' "$tmp/agent-$label-$round.err" | grep -vc 'state=succeeded')
	# Its node takes no more work: the next row's jobs go to the next.
	node=$(sed -n 's/.*msg=registered .* id=\(node_[0-9A-Z]*\) .*/\1/p' "$tmp/agent-$label-$round.err" | head -1)
	api PATCH "/v1/nodes/$node" "$root" '{"state":"draining"}' >/dev/null
	kill "$a"
	wait "$a" 2>/dev/null
	awk -v l="$label" -v n="$n" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" \
		-v d0="$c0c" -v d1="$c1c" -v hz="$ticks" -v f="$failed" 'BEGIN {
		s = (t1 - t0) / 1e9
		printf "| %s | %d | %.2f | %.1f | %.1f | %.1f | %d |\n", l, n, s, n / s,
			(c1 - c0) * 1000 / hz / n, (d1 - d0) * 1000 / hz / n, f
	}' >>"$tmp/rows"
}

: >"$tmp/rows"
# run_dir (the bundles and crun's state) on a tmpfs: /dev/shm here.
shm=
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
	shm=$(mktemp -d -p /dev/shm cnlab-dispatch.XXXXXX)
	chmod 711 "$shm"
fi
for round in $(seq "$rounds"); do
	[ -n "$shm" ] && run "container-run_dir" "$agent" --runtime crun --run-dir "$shm/r$round"
	run container "$agent" --runtime crun
	run bare "$agent" --isolation bare --run-as-uid 65534
	if [ -n "$baseline" ]; then
		run container-baseline "$baseline" --runtime crun
		run bare-baseline "$baseline" --isolation bare --run-as-uid 65534
	fi
done
echo "dispatch_bench: $n trivial jobs (true) at once, one node, cnlabd cycle 50 ms"
echo
echo "| agent | jobs | seconds | jobs/s | agent CPU ms/job | with children ms/job | not succeeded |"
echo "|---|---:|---:|---:|---:|---:|---:|"
cat "$tmp/rows"
echo
if command -v sbatch >/dev/null && [ -r bench/results/slurm_dispatch.txt ]; then
	echo "Slurm (bench H, bench/results/slurm_dispatch.txt): $(tail -1 bench/results/slurm_dispatch.txt)"
else
	echo "Slurm: not measured by this bench (12.3 jobs/s on this machine in issue 19, 8 slurmd)"
fi
