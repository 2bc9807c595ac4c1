#!/usr/bin/env bash
# amd.sh - a cluster that mixes vendors node by node, end to end with a real
# cnlabd on loopback: one agent on a fake NVIDIA H100 node, one on a fake
# AMD MI300X node (each node one type; the allocator models a node as GPUs
# of one type).  A job asking for 10 blocks of an MI300X lands on the AMD
# node and gets what a HIP program needs: its GPUs in ROCR_VISIBLE_DEVICES
# (by unique ID) and HIP_VISIBLE_DEVICES, no CUDA_VISIBLE_DEVICES (HIP
# would read it as its own), libcnlab-hip.so preloaded, and its region; the
# HIP program it runs (tests/shim/hiptest over the fake HIP runtime) sees
# the slice's quota, not the GPU's 192 GiB, and is refused memory beyond
# it.  A job asking for an H100 lands on the NVIDIA node with the CUDA shim
# and CUDA_VISIBLE_DEVICES, as before.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$1
agent=$2
shim_cuda=$3
shim_hip=$4
hiptest=$5
tmp=$(mktemp -d)
run=amd$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
	done
	sleep 0.3
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
wait_for() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

chmod 755 "$tmp"
export CNLAB_JWT_SECRET=amd-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
cat >"$tmp/cnlabd.conf" <<CONF
cycle_interval = 200ms
CONF
"$cnlabd" --config "$tmp/cnlabd.conf" --data-dir "$tmp/db" \
	--listen 127.0.0.1:0 --bootstrap-admin root >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
wait_for 10 grep -q '^listening on' "$tmp/cnlabd.out" || {
	cat "$tmp/cnlabd.err"
	exit 1
}
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port
api() { # api METHOD PATH TOKEN [BODY]
	if [ $# -ge 4 ]; then
		curl -sS -X "$1" -H "Authorization: Bearer $3" -d "$4" "$base$2"
	else
		curl -sS -X "$1" -H "Authorization: Bearer $3" "$base$2"
	fi
}
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }
root=$(login root admin-password-1)
jointok() { api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$1\"}" | jq -r .token; }
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)

# start_agent NAME POOL: bare processes (no container runtime needed), with
# both shims configured; the node's vendor picks one.
start_agent() {
	CNLAB_AGENT_TOKEN=$(jointok "$run-$1") "$agent" --server "$base" --name "$run-$1" \
		--gpus "$2" --work-dir "$tmp/agent-$1" --cpu-milli 4000 \
		--mem-mib 8192 --listen 127.0.0.1:0 --log-level info \
		--isolation bare --run-as-uid 65534 \
		--shim "$shim_cuda" --shim-hip "$shim_hip" \
		>>"$tmp/agent-$1.out" 2>>"$tmp/agent-$1.err" &
	pids+=($!)
	wait_for 20 grep -q 'msg=registered' "$tmp/agent-$1.err"
}
start_agent nv fake:1xH100-80GB-SXM || { bad "NVIDIA agent did not register: $(cat "$tmp/agent-nv.err")"; exit 1; }
start_agent amd fake:1xMI300X || { bad "AMD agent did not register: $(cat "$tmp/agent-amd.err")"; exit 1; }

submit() { api POST "/v1/projects/$proj/jobs" "$ana" "$1" | jq -r .id; }
state() { api GET "/v1/jobs/$1" "$ana" | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
logs() { api GET "/v1/jobs/$1/logs?limit=1000" "$ana" | jq -r '.items[].data' | tr '\n' ' '; }
done_ok() { wait_for 40 sh -c "s=\$(curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$1 | jq -r .state); [ \"\$s\" = succeeded ] || [ \"\$s\" = failed ]"; }

# --- the AMD job: HIP environment, HIP shim, the quota inside ------------
cmd="echo ROCR=\$ROCR_VISIBLE_DEVICES HIP=\$HIP_VISIBLE_DEVICES CUDA=\${CUDA_VISIBLE_DEVICES-unset} PRE=\$LD_PRELOAD;"
cmd+=" printf 'info\\nalloc malloc 40000000000\\nalloc malloc 1048576\\n' | CNL_FAKE_GPU=\$CNLAB_ARTIFACTS_DIR/gpu $hiptest repl | tr '\\n' ' ' | sed 's/^/HIPTEST /'"
j=$(submit "$(jq -cn --arg c "$cmd" '{command:$c,gpu:"mi300x-10"}')")
done_ok "$j" || bad "AMD job did not end: $(api GET "/v1/jobs/$j" "$ana") $(tail -5 "$tmp/agent-amd.err")"
node=$(api GET "/v1/jobs/$j" "$ana" | jq -r '.node // .node_name // empty')
l=$(logs "$j")
echo "AMD job ($node): $l"
[ "$(state "$j")" = succeeded ] && ok "AMD job succeeded" || bad "AMD job: $(api GET "/v1/jobs/$j" "$ana")"
[[ "$l" == *"ROCR=GPU-"* && "$l" == *"HIP=0 "* ]] &&
	ok "GPUs named for ROCr (unique ID) and HIP (0)" || bad "AMD env: $l"
[[ "$l" == *"CUDA=unset"* ]] && ok "no CUDA_VISIBLE_DEVICES on the AMD node" || bad "CUDA var on AMD: $l"
[[ "$l" == *"PRE=$shim_hip"* ]] && ok "libcnlab-hip.so preloaded" || bad "preload on AMD: $l"
# hiptest: "ready", then hipMemGetInfo "FREE TOTAL", then the two allocations.
read -r ready free total a1 r1 a2 r2 _ <<<"$(sed 's/.*HIPTEST //' <<<"$l")"
gib192=$((192 * 1024 * 1024 * 1024))
if [ "${ready:-}" = ready ] && [ "${total:-0}" -gt 0 ] && [ "$total" -lt "$gib192" ] &&
	[ "$total" -ge $((gib192 / 10 - (1 << 30))) ]; then
	ok "the HIP program sees its 10% quota ($total bytes), not 192 GiB"
else
	bad "hipMemGetInfo in the job: ${ready:-} ${free:-} ${total:-}"
fi
[ "${a1:-} ${r1:-}" = "fail 2" ] && ok "40 GB over the quota refused (hipErrorOutOfMemory)" ||
	bad "over-quota allocation: ${a1:-} ${r1:-}"
[ "${a2:-}" = ok ] && ok "1 MiB under the quota granted" || bad "small allocation: ${a2:-} ${r2:-}"

# --- the NVIDIA job on the same cluster: CUDA as before ------------------
cmd="echo CUDA=\$CUDA_VISIBLE_DEVICES ROCR=\${ROCR_VISIBLE_DEVICES-unset} PRE=\$LD_PRELOAD"
j=$(submit "$(jq -cn --arg c "$cmd" '{command:$c,gpu:"h100-10"}')")
done_ok "$j" || bad "NVIDIA job did not end: $(api GET "/v1/jobs/$j" "$ana") $(tail -5 "$tmp/agent-nv.err")"
l=$(logs "$j")
echo "NVIDIA job: $l"
[[ "$l" == *"CUDA=0 ROCR=unset PRE=$shim_cuda"* ]] &&
	ok "the H100 node: CUDA_VISIBLE_DEVICES and the CUDA shim" || bad "NVIDIA env: $l"

[ "$fails" -eq 0 ] && echo "amd: all passed" || echo "amd: $fails failed"
[ "$fails" -eq 0 ]
