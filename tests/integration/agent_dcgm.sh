#!/usr/bin/env bash
# agent_dcgm.sh - the node agent's /metrics under DCGM exporter names
# (issue 20), on a real all-in-one cnlabd whose embedded agent reads the
# fake libnvidia-ml.so.1 through the real NVML calls:
#   - promtool check metrics accepts it, but for DCGM's own camelCase
#     label modelName;
#   - per GPU, DCGM_FI_DEV_GPU_UTIL, _MEM_COPY_UTIL, _FB_USED, _FB_FREE,
#     _FB_TOTAL, _GPU_TEMP, _POWER_USAGE (W) and _SM_CLOCK, gauges with
#     DCGM's HELP-and-TYPE and labels gpu, UUID, device, modelName and
#     Hostname, each value equal to what the fake NVML reports when asked
#     through the same calls (read here with ctypes), GPU by GPU;
#   - no GPU_UTIL for a GPU in MIG mode (NVML has none there);
#   - a running job's slice: cnlab_slice_vram_limit_bytes,
#     _vram_used_bytes, _compute_share_ratio, _sm_util_ratio labelled with
#     its project, user, job, gpu, UUID and Hostname (and its MIG
#     instance's GPU_I_PROFILE and GPU_I_ID);
#   - the slice's MIG instance (2g.20gb): DCGM_FI_DEV_FB_TOTAL, _USED and
#     _FREE of the instance (NVML memory info on its MIG handle) with the
#     GPU's labels plus GPU_I_PROFILE and GPU_I_ID, the driver's GPU
#     instance ID (not the start slot); no GPU_UTIL for it (NVML has none);
#   - cnlab_agent_gpu_audit_kills_total is there (integration.gpu_audit
#     makes kills).
set -u
cnlabd=$1
fake_nvml=$2
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
need_tools promtool python3 jq curl
# Two H100s; GPU 1 with telemetry set here, GPU 0 with the fake's own
# defaults (it turns to MIG mode for the job's slice).
export FAKE_NVML_GPUS=2 FAKE_NVML_MEM_MIB=81559
export FAKE_NVML_UTIL=11,73 FAKE_NVML_MEM_UTIL=5,29 FAKE_NVML_TEMP=40,67
export FAKE_NVML_POWER_MW=100000,312250 FAKE_NVML_SM_CLOCK=1400,1755
allinone_nvml_start "$cnlabd" "$tmp" "$fake_nvml"
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
proj=$(api GET /v1/projects | jq -r '.items[] | select(.name=="default") | .id')
job=$(api POST "/v1/projects/$proj/jobs" '{"command":"sleep 300","gpu":"h100-25"}' | jq -r .id)
for _ in $(seq 150); do
	[ "$(api GET "/v1/jobs/$job" | jq -r .state)" = running ] && break
	sleep 0.2
done
[ "$(api GET "/v1/jobs/$job" | jq -r .state)" = running ] && ok "a job on a 25% slice runs" ||
	bad "job: $(api GET "/v1/jobs/$job")"
m=$tmp/m.txt
for _ in $(seq 50); do
	curl -sS "http://127.0.0.1:$mport/metrics" >"$m"
	grep -q "^cnlab_slice_vram_limit_bytes{.*job=\"$job\"" "$m" && break
	sleep 0.2
done

out=$(promtool check metrics <"$m" 2>&1 |
	grep -v "^DCGM_FI_[A-Z_]* label names should be written in 'snake_case' not 'camelCase'$")
[ -z "$out" ] && ok "promtool check metrics: clean but for DCGM's modelName" ||
	bad "promtool: $out"

# What the fake NVML reports, through the calls the agent makes.
python3 - "$fake_nvml" >"$tmp/nvml.txt" <<'PY' || bad "ctypes read of the fake NVML"
import ctypes as C, sys
l = C.CDLL(sys.argv[1])
assert l.nvmlInit_v2() == 0
n = C.c_uint(); assert l.nvmlDeviceGetCount_v2(C.byref(n)) == 0
class Mem(C.Structure):
    _fields_ = [("total", C.c_ulonglong), ("free", C.c_ulonglong), ("used", C.c_ulonglong)]
for i in range(n.value):
    h = C.c_void_p(); assert l.nvmlDeviceGetHandleByIndex_v2(i, C.byref(h)) == 0
    u = (C.c_uint * 2)(); v = C.c_uint(); m = Mem()
    name = C.create_string_buffer(96); uuid = C.create_string_buffer(96)
    l.nvmlDeviceGetName(h, name, 96); l.nvmlDeviceGetUUID(h, uuid, 96)
    assert l.nvmlDeviceGetMemoryInfo(h, C.byref(m)) == 0
    print(i, "UUID", uuid.value.decode()); print(i, "modelName", name.value.decode())
    print(i, "DCGM_FI_DEV_FB_TOTAL", m.total >> 20)
    print(i, "DCGM_FI_DEV_FB_USED", m.used >> 20)
    print(i, "DCGM_FI_DEV_FB_FREE", m.free >> 20)
    if l.nvmlDeviceGetUtilizationRates(h, u) == 0:
        print(i, "DCGM_FI_DEV_GPU_UTIL", u[0]); print(i, "DCGM_FI_DEV_MEM_COPY_UTIL", u[1])
    assert l.nvmlDeviceGetTemperature(h, 0, C.byref(v)) == 0; print(i, "DCGM_FI_DEV_GPU_TEMP", v.value)
    assert l.nvmlDeviceGetPowerUsage(h, C.byref(v)) == 0; print(i, "DCGM_FI_DEV_POWER_USAGE", v.value / 1000)
    assert l.nvmlDeviceGetClockInfo(h, 1, C.byref(v)) == 0; print(i, "DCGM_FI_DEV_SM_CLOCK", v.value)
PY
# The ctypes process is its own: its GPU 0 is not in MIG mode, the
# agent's is (a MIG slice), so GPU 0's utilization must be absent.
host=$(grep -o 'Hostname="[^"]*"' "$m" | head -1 | cut -d'"' -f2)
node=$(api GET /v1/nodes | jq -r '.items[0].name')
[ -n "$host" ] && [ "$host" = "$node" ] && ok "Hostname is the node's name ($node)" || bad "Hostname $host, node $node"
for g in 0 1; do
	uuid=$(awk -v g=$g '$1==g && $2=="UUID"{print $3}' "$tmp/nvml.txt")
	model=$(awk -v g=$g '$1==g && $2=="modelName"{$1=$2="";sub(/^  /,"");print}' "$tmp/nvml.txt")
	labels="gpu=\"$g\",UUID=\"$uuid\",device=\"nvidia$g\",modelName=\"$model\",Hostname=\"$host\""
	for f in GPU_UTIL MEM_COPY_UTIL FB_USED FB_FREE FB_TOTAL GPU_TEMP POWER_USAGE SM_CLOCK; do
		want=$(awk -v g=$g -v f=DCGM_FI_DEV_$f '$1==g && $2==f{print $3}' "$tmp/nvml.txt")
		got=$(grep -F "DCGM_FI_DEV_$f{$labels} " "$m" | awk '{print $NF}')
		if [ $g = 0 ] && [ $f = GPU_UTIL -o $f = MEM_COPY_UTIL ]; then
			[ -z "$got" ] && ok "GPU 0 (MIG mode): no DCGM_FI_DEV_$f" || bad "GPU 0 $f: $got"
			continue
		fi
		[ -n "$want" ] && [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN{exit !(a ~ /^[0-9.]+$/ && a+0==b+0)}' &&
			ok "GPU $g DCGM_FI_DEV_$f = $got, as NVML reports" ||
			bad "GPU $g DCGM_FI_DEV_$f: got '$got', NVML '$want'"
		grep -q "^# TYPE DCGM_FI_DEV_$f gauge$" "$m" || bad "DCGM_FI_DEV_$f is not a gauge"
	done
done
# GPU 1's telemetry is what this test set, so the values come from NVML.
grep -qF "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"," "$m" && grep -F "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"," "$m" | grep -q ' 73$' &&
	grep -F "DCGM_FI_DEV_POWER_USAGE{gpu=\"1\"," "$m" | grep -q ' 312.25$' &&
	ok "GPU 1's values are the ones set for the fake" || bad "GPU 1 values: $(grep 'gpu="1"' "$m")"

# The slice.
user=admin
jl=$(grep "^cnlab_slice_vram_limit_bytes{" "$m" | grep "job=\"$job\"")
gpu=$(echo "$jl" | grep -o 'gpu="[0-9]*"' | cut -d'"' -f2)
uuid=$(awk -v g="$gpu" '$1==g && $2=="UUID"{print $3}' "$tmp/nvml.txt")
want="project=\"$proj\",user=\"$user\",job=\"$job\",gpu=\"$gpu\",UUID=\"$uuid\",Hostname=\"$host\""
for f in vram_limit_bytes vram_used_bytes compute_share_ratio sm_util_ratio; do
	grep -q "^# TYPE cnlab_slice_$f gauge$" "$m" &&
		grep -qF "cnlab_slice_$f{$want" "$m" && ok "cnlab_slice_$f labelled project, user, job, gpu, UUID, Hostname" ||
		bad "cnlab_slice_$f: $(grep "cnlab_slice_$f" "$m")"
done
limit=$(echo "$jl" | awk '{print $NF}')
[ -n "$limit" ] && [ "$limit" -gt 0 ] && ok "slice VRAM limit $limit bytes" || bad "limit: $jl"
# The job's 25% slice is a MIG instance (2g.20gb on an H100 80GB): its GPU
# has per-instance DCGM series, labelled with the driver's GPU instance ID.
# The fake numbers GPU instances from 1 (lowest free), so the first one is
# 1 while its start slot is not: a slot passed off as the ID is caught.
slot=$(api GET "/v1/jobs/$job/decisions" | jq -r '[.items[] | .result // .decision // empty | tostring | capture("at slot (?<s>[0-9]+)").s] | first // empty')
mlabels="gpu=\"$gpu\",UUID=\"$uuid\",device=\"nvidia$gpu\",modelName=\"$(awk -v g="$gpu" '$1==g && $2=="modelName"{$1=$2="";sub(/^  /,"");print}' "$tmp/nvml.txt")\",Hostname=\"$host\",GPU_I_PROFILE=\"2g.20gb\",GPU_I_ID=\"1\""
for f in FB_TOTAL:20096 FB_USED:0 FB_FREE:20096; do
	got=$(grep -F "DCGM_FI_DEV_${f%%:*}{$mlabels} " "$m" | awk '{print $NF}')
	[ "$got" = "${f#*:}" ] && ok "MIG instance DCGM_FI_DEV_${f%%:*} = $got MiB (the instance's, from NVML on its MIG handle)" ||
		bad "MIG instance DCGM_FI_DEV_${f%%:*}: got '$got', want ${f#*:}: $(grep "GPU_I_ID" "$m")"
done
grep -q 'DCGM_FI_DEV_GPU_UTIL{.*GPU_I_ID=' "$m" && bad "GPU_UTIL for a MIG instance (NVML has none)" ||
	ok "no GPU_UTIL series for a MIG instance (NVML has none)"
[ "$(grep -c 'GPU_I_ID=' "$m" | tr -d ' ')" -gt 0 ] && ! grep 'GPU_I_ID=' "$m" | grep -vq "gpu=\"$gpu\"" &&
	ok "per-instance series only for the GPU in MIG mode" || bad "instance series: $(grep GPU_I_ID "$m")"
echo "$jl" | grep -qF ',GPU_I_PROFILE="2g.20gb",GPU_I_ID="1"}' &&
	ok "the slice's series carry its MIG instance's GPU_I_PROFILE and driver GPU_I_ID" ||
	bad "slice MIG labels: $jl"
[ -n "$slot" ] && [ "$slot" != 1 ] && ok "GPU_I_ID (1) is not the start slot ($slot)" ||
	bad "slot '$slot' of the placement not read from the decisions"
grep -q '^cnlab_agent_gpu_audit_kills_total 0$' "$m" && ok "audit kills counter" || bad "no audit kills counter"
api POST "/v1/jobs/$job/cancel" '{}' >/dev/null
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
