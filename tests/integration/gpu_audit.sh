#!/usr/bin/env bash
# gpu_audit.sh - the agent's GPU memory audit (issue 18, tamper-evident),
# end to end: a real cnlabd on loopback, a real cnlab-agent (bare isolation,
# as uid 65534, each workload in its own PID and mount namespaces) on a fake
# pool, its audit reading the fake libnvidia-ml.so.1 (gpu_audit =
# nvml:PATH), and workloads that allocate on the fake libcuda.so.1:
#   - a tenant that defeats its shim (unsets LD_PRELOAD, so no region
#     counts anything) and takes 6 GiB under a quota of about 4 GiB: the
#     audit SIGKILLs it; the job ends failed with the reason in words; the
#     audit log has one node.gpu_kill record with the pid, the bytes, the
#     quota, and the job's project and user; the audit chain still
#     verifies;
#   - a tenant within its quota (under the shim) is left alone for many
#     audit rounds and succeeds;
#   - a job with no GPU that opens one anyway (bare isolation) holds a
#     quota of 0 and is killed;
#   - a process on the GPU that belongs to no workload (the operator's) is
#     logged, not killed;
#   - on an agent whose GPUs are NVML's (gpu_audit auto), a slice that is a
#     MIG instance, past its quota, is killed: the audit reads the MIG
#     device's own process list.
# The fake driver reports host pids, as the real one does, though each
# workload registers from inside its own PID namespace.  Waits poll with
# generous bounds; nothing asserts a duration.
set -u
cnlabd=$1
agent=$2
shim=$3
shimtest=$4
fake_nvml=$5
tmp=$(mktemp -d)
run=ga$$
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
	[ -n "${GPU_AUDIT_KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
wait_for() { # wait_for SECONDS CMD...: poll CMD every 0.2 s
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

if [ "$(id -u)" != 0 ]; then
	echo "SKIP: needs root (cgroups, namespaces, running work as 65534)"
	exit 77
fi
chmod 755 "$tmp"
# The fake GPU every process of the test shares, writable by the
# workloads' uid.
gpu=$tmp/gpu
: >"$gpu"
chmod 666 "$gpu"
export CNL_FAKE_GPU=$gpu CNL_FAKE_MEM=$((80 << 30))
export CNLAB_JWT_SECRET=gpu-audit-integration-secret-0123456789abcdef
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
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)
ana_id=$(api GET /v1/users "$root" | jq -r '.items[] | select(.name=="ana") | .id')
jointok=$(api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$run-a\"}" | jq -r .token)

# The fake NVML: one H100 80GB (the fake pool's type), whose process list
# comes from the shared fake GPU.
FAKE_NVML_GPUS=1 FAKE_NVML_MEM_MIB=81559 CNLAB_AGENT_TOKEN=$jointok \
	"$agent" --server "$base" --name "$run-a" --gpus fake:1xH100-80GB-SXM \
	--gpu-audit "nvml:$fake_nvml" --gpu-audit-interval 1s \
	--work-dir "$tmp/agent" --isolation bare --run-as-uid 65534 \
	--shim "$shim" --cpu-milli 4000 --mem-mib 8192 --log-level info \
	>"$tmp/agent.out" 2>"$tmp/agent.err" &
apid=$!
pids+=($apid)
wait_for 10 grep -q 'msg=registered' "$tmp/agent.err" || {
	echo "FAIL agent did not register: $(cat "$tmp/agent.err")"
	exit 1
}
grep -q 'msg="GPU memory audit on"' "$tmp/agent.err" && ok "the audit runs" || bad "no audit: $(cat "$tmp/agent.err")"

submit() { api POST "/v1/projects/$proj/jobs" "$ana" "$1" | jq -r .id; }
job() { api GET "/v1/jobs/$1" "$ana"; }
state() { job "$1" | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
logs() { api GET "/v1/jobs/$1/logs?limit=1000" "$ana" | jq -r '.items[].data' | tr -d '\n'; }
kills() { api GET "/v1/audit?limit=1000" "$root" | jq -c '[.items[] | select(.action=="node.gpu_kill")]'; }

# A job whose program reads commands from a FIFO in its folder: the
# allocations of @alloc bytes, then holds them for @hold seconds.  @pre:
# what the tenant puts before the program (env -u LD_PRELOAD: no shim).
job_body() { # job_body PRE ALLOC HOLD
	jq -cn --arg c "cd \"\$HOME\"; mkfifo in; { echo alloc $2; echo used; sleep $3; } > in & exec $1 env CNL_FAKE_GPU=$gpu CNL_FAKE_MEM=$CNL_FAKE_MEM $shimtest repl < in" \
		'{command:$c,gpu:"h100-5"}'
}

# --- within its quota, under the shim: left alone --------------------------
good=$(submit "$(job_body "" $((2 << 30)) 8)")
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' '$base/v1/jobs/$good/logs' | grep -q 'ok 0'" ||
	bad "the good job did not allocate: $(job "$good") $(logs "$good")"

# --- past its quota, without the shim: killed -------------------------------
evil=$(submit "$(job_body "env -u LD_PRELOAD" $((6 << 30)) 300)")
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' '$base/v1/jobs/$evil/logs' | grep -q 'ok 0'" &&
	ok "without its shim the tenant got 6 GiB from the driver" ||
	bad "the attack did not allocate: $(job "$evil") $(logs "$evil")"
wait_for 60 is_state "$evil" failed && ok "the job over its quota was killed, and failed" ||
	bad "over quota: $(job "$evil")"
msg=$(job "$evil" | jq -r .message)
[[ "$msg" == "killed: used 6 GiB of GPU memory, quota "*" (GPU memory audit, pid "*")" ]] &&
	ok "its reason: $msg" || bad "reason: $msg"
k=$(kills)
evil_pid=$(sed -n 's/.*(GPU memory audit, pid \([0-9]*\)).*/\1/p' <<<"$msg")
[ "$(jq length <<<"$k")" = 1 ] &&
	jq -e --arg j "$evil" --arg p "$proj" --arg u "$ana_id" --arg pid "$evil_pid" '.[0] |
		.target == $j and (.actor | startswith("node:")) and
		(.result | startswith("201 pid=" + $pid + " used=6442450944 quota=")) and
		(.result | endswith(" project=" + $p + " user=" + $u))' <<<"$k" >/dev/null &&
	ok "one audit record: $(jq -r '.[0].result' <<<"$k")" || bad "audit records: $k"
[ "$(api GET /v1/audit/verify "$root" | jq -r .ok)" = true ] &&
	ok "the audit chain verifies" || bad "verify: $(api GET /v1/audit/verify "$root")"
grep -q 'msg="GPU memory audit: killed a process of a slice over its quota".*pid='"$evil_pid" "$tmp/agent.err" &&
	ok "the agent logged the kill" || bad "agent log: $(grep -i audit "$tmp/agent.err")"

# --- no GPU at all, yet on the GPU (bare isolation leaves it reachable) ------
cpu=$(submit "$(job_body "env -u LD_PRELOAD" $((1 << 30)) 300 | jq -c '.gpu = "cpu"')")
wait_for 60 is_state "$cpu" failed &&
	[[ "$(job "$cpu" | jq -r .message)" == "killed: used 1 GiB of GPU memory without a GPU slice (GPU memory audit, pid "*")" ]] &&
	ok "a job without a GPU that uses one is killed ($(job "$cpu" | jq -r .message))" ||
	bad "CPU job: $(job "$cpu") $(logs "$cpu")"
[ "$(kills | jq --arg j "$cpu" '[.[] | select(.target == $j and (.result | contains(" quota=0 ")))] | length')" = 1 ] &&
	ok "its kill is in the audit log, quota 0" || bad "CPU job kills: $(kills)"

# The good job held 2 GiB through the rounds above, and ends as it would.
wait_for 60 is_state "$good" succeeded && ok "the job within its quota was left alone and succeeded" ||
	bad "good job: $(job "$good") $(logs "$good")"
[ "$(kills | jq --arg j "$good" '[.[] | select(.target == $j)] | length')" = 0 ] &&
	ok "no kill recorded for it" || bad "kills: $(kills)"

# --- a process of no workload: the operator's, logged, not killed -----------
mkfifo "$tmp/op"
(
	echo alloc $((10 << 30))
	exec sleep 300
) >"$tmp/op" &
pids+=($!)
"$shimtest" repl <"$tmp/op" >"$tmp/op.out" &
op=$!
pids+=($op)
wait_for 30 grep -q 'ok 0' "$tmp/op.out" || bad "the operator's process did not allocate"
wait_for 30 grep -q "msg=\"GPU memory audit: a process of no workload uses a GPU.*pid=$op" "$tmp/agent.err" &&
	kill -0 "$op" 2>/dev/null && ok "a process of no workload is logged, not killed" ||
	bad "foreign process: $(grep -i audit "$tmp/agent.err")"

kill "$op" 2>/dev/null
wait "$op" 2>/dev/null

# --- inside a MIG instance: the MIG device's own process list ----------------
# A second agent whose GPUs are NVML's (the fake's), so that its slices
# are real MIG instances of the fake driver and its audit reads their
# lists; the first is cordoned.
a_id=$(api GET /v1/nodes "$root" | jq -r ".items[] | select(.name==\"$run-a\") | .id")
api PATCH "/v1/nodes/$a_id" "$root" '{"state":"cordoned"}' >/dev/null
jointok=$(api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$run-b\"}" | jq -r .token)
FAKE_NVML_GPUS=1 FAKE_NVML_MEM_MIB=81559 CNLAB_AGENT_TOKEN=$jointok \
	"$agent" --server "$base" --name "$run-b" --gpus "nvml:$fake_nvml" \
	--work-dir "$tmp/agent-b" --isolation bare --run-as-uid 65534 \
	--shim "$shim" --cpu-milli 4000 --mem-mib 8192 --log-level info \
	>"$tmp/agent-b.out" 2>"$tmp/agent-b.err" &
pids+=($!)
wait_for 10 grep -q 'msg=registered' "$tmp/agent-b.err" || bad "agent b did not register: $(cat "$tmp/agent-b.err")"
grep -q 'msg="GPU memory audit on"' "$tmp/agent-b.err" &&
	ok "gpu_audit auto: the nvml provider's NVML is audited" || bad "agent b: no audit"
migj=$(submit "$(job_body "env -u LD_PRELOAD" $((12 << 30)) 300 | jq -c '.gpu = "h100-1g.10gb" | .command = "echo cvd=$CUDA_VISIBLE_DEVICES; " + .command')")
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' '$base/v1/jobs/$migj/logs' | grep -q 'ok 0'" ||
	bad "the MIG job did not allocate: $(job "$migj") $(logs "$migj")"
wait_for 60 is_state "$migj" failed &&
	[[ "$(job "$migj" | jq -r .message)" == "killed: used 12 GiB of GPU memory, quota 9.8 GiB (GPU memory audit, pid "*")" ]] &&
	ok "a MIG slice past its quota: killed ($(job "$migj" | jq -r .message))" ||
	bad "MIG job: $(job "$migj") $(logs "$migj")"
[[ "$(logs "$migj")" == *cvd=MIG-* ]] && ok "it ran in a MIG instance" || bad "MIG job's device: $(logs "$migj")"
[ "$(kills | jq --arg j "$migj" '[.[] | select(.target == $j and (.result | contains("used=12884901888")))] | length')" = 1 ] &&
	ok "its kill is in the audit log" || bad "MIG kills: $(kills)"

[ "$fails" = 0 ] || {
	echo "--- agent"; tail -40 "$tmp/agent.err"
	echo "--- cnlabd"; tail -20 "$tmp/cnlabd.err"
	exit 1
}
echo "all gpu_audit checks passed"
