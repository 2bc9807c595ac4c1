#!/usr/bin/env bash
# dra.sh - cnlab-dra-plugin against the real driver (issue 22): NVML's
# GPUs published as a ResourceSlice, a 25-block claim's region enforced on
# a real CUDA process (PyTorch under the shim), a MIG partition's claim
# made into a real instance with its /dev/nvidia-caps nodes, unprepare
# destroying it.  The API server is tests/k8s/api/fake_apiserver.py; the
# kubelet's calls tests/k8s/dra_client.py.  Exits 77 (CTest: skipped)
# with the reason where there is no GPU or no PyTorch.  It switches the
# GPU's MIG mode on for the partition and off again at the end: run it on
# a GPU nothing else uses.
#   tests/gpu/dra.sh PLUGIN LIBCNLAB_CUDA_SO CNLAB_REGION_TOOL
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
plugin=$1 shim=$2 tool=$3
skip() {
	echo "SKIP: $*"
	exit 77
}
command -v nvidia-smi >/dev/null 2>&1 || skip "no NVIDIA driver (nvidia-smi not found)"
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || skip "nvidia-smi lists no GPU"
python3 -c 'import torch, grpc, google.protobuf' 2>/dev/null || skip "python3 lacks torch, grpcio or protobuf"
command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null ||
	[ -d "${DRA_STUBS:-}" ] || skip "no protoc/grpc_python_plugin and no DRA_STUBS"
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
t=$(mktemp -d)
api_pid="" plug_pid=""
cleanup() {
	[ -n "$plug_pid" ] && kill "$plug_pid" 2>/dev/null
	[ -n "$api_pid" ] && kill "$api_pid" 2>/dev/null
	wait 2>/dev/null
	nvidia-smi -mig 0 >/dev/null 2>&1
	rm -rf "$t"
}
trap cleanup EXIT
nvidia-smi -mig 0 >/dev/null 2>&1
if [ -z "${DRA_STUBS:-}" ]; then
	export DRA_STUBS=$t/stubs
	mkdir -p "$DRA_STUBS"
	protoc -I"$root/src/agent/dra" --python_out="$DRA_STUBS" --grpc_python_out="$DRA_STUBS" \
		--plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" dra.proto registration.proto
fi
client() { python3 "$root/tests/k8s/dra_client.py" "$@"; }
mkdir -p "$t/claims" "$t/reg"
claim() { # name uid device [blocks]
	local cap=""
	[ -n "${4:-}" ] && cap=", \"consumedCapacity\": {\"blocks\": \"$4\"}"
	cat >"$t/claims/lab_$1.json" <<JSON
{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
 "metadata": {"name": "$1", "namespace": "lab", "uid": "$2", "resourceVersion": "1"},
 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.cnlab.io"}}]}},
 "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.cnlab.io",
   "pool": "gpu-node", "device": "$3"$cap}]}}}}
JSON
}
b_uid=2a000000-0001-4000-8000-000000000001
m_uid=2a000000-0002-4000-8000-000000000002
claim blocks $b_uid gpu-0 25
echo tok >"$t/tok"
python3 "$root/tests/k8s/api/fake_apiserver.py" --port-file "$t/port" --token-file "$t/tok" \
	--claims "$t/claims" --log "$t/api.log" >/dev/null 2>&1 &
api_pid=$!
for _ in $(seq 50); do [ -s "$t/port" ] && break; sleep 0.1; done
"$plugin" --node gpu-node --gpus nvml --plugin-dir "$t/p" --registry-dir "$t/reg" --cdi-dir "$t/cdi" \
	--shim "$shim" --kube-api "http://127.0.0.1:$(cat "$t/port")" --kube-token-file "$t/tok" \
	>"$t/out" 2>"$t/err" </dev/null &
plug_pid=$!
for _ in $(seq 100); do grep -q "ResourceSlices published" "$t/err" && break; sleep 0.1; done
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
python3 - "$t/api.log" "$uuid" <<'PY' && ok "the GPU published: its UUID, memory, MIG partitions" || bad "slice: $(cat "$t/err")"
import json, sys
sent = [json.loads(l)["body"] for l in open(sys.argv[1]) if json.loads(l)["method"] == "POST"]
d = sent[0]["spec"]["devices"]
assert d[0]["attributes"]["uuid"]["string"] == sys.argv[2], d[0]
assert d[0]["capacity"]["blocks"]["value"] == "100"
print("   ", d[0]["attributes"]["model"]["string"], d[0]["capacity"]["memory"]["value"], len(d) - 1, "partitions")
PY
out=$(client prepare "$t/p/dra.sock" "lab/blocks/$b_uid")
echo "$out" | grep -q "cnlab.io/gpu=$b_uid" && ok "the 25-block claim is prepared" || bad "prepare: $out $(cat "$t/err")"
region=$(python3 -c "
import json,sys
for e in json.load(open('$t/cdi/cnlab.io-gpu_$b_uid.json'))['devices'][0]['containerEdits']['env']:
    if e.startswith('CNLAB_REGION='): print(e.split('=', 1)[1])")
quota=$("$tool" stat "$region" | sed -n 's/^quota=//p')
cat >"$t/alloc.py" <<'PY'
import torch
x = []
try:
    while len(x) < 60:
        x.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
except Exception:
    pass
print(len(x))
PY
plain=$(python3 "$t/alloc.py" 2>/dev/null | tail -1)
sliced=$(CNLAB_REGION=$region LD_PRELOAD=$shim python3 "$t/alloc.py" 2>/dev/null | tail -1)
echo "    GiB allocated: $plain without the shim, $sliced in the slice (quota $quota bytes)"
[ -n "$sliced" ] && [ "$sliced" -le $((quota >> 30)) ] && [ "$plain" -gt "$sliced" ] &&
	ok "a real CUDA process in the slice stops at its quota" || bad "quota not enforced: $plain vs $sliced"
client unprepare "$t/p/dra.sock" "lab/blocks/$b_uid" >/dev/null
[ ! -e "$region" ] && ok "unprepare removes the region" || bad "region left"
# A MIG partition: the first profile the slice offers at slot 0.
dev=$(python3 -c "
import json
for l in open('$t/api.log'):
    r = json.loads(l)
    if r['method'] == 'POST':
        print([d['name'] for d in r['body']['spec']['devices'] if '-mig-' in d['name'] and d['name'].endswith('-0')][0]); break")
claim mig $m_uid "$dev"
out=$(client prepare "$t/p/dra.sock" "lab/mig/$m_uid")
mig=$(python3 -c "
import json
for e in json.load(open('$t/cdi/cnlab.io-gpu_$m_uid.json'))['devices'][0]['containerEdits']['env']:
    if e.startswith('CUDA_VISIBLE_DEVICES='): print(e.split('=', 1)[1])" 2>/dev/null)
case "$mig" in
MIG-*) ok "partition $dev: instance $mig" ;;
*) bad "MIG prepare: $out $(tail -3 "$t/err")" ;;
esac
grep -q nvidia-caps "$t/cdi/cnlab.io-gpu_$m_uid.json" && ok "its spec names its /dev/nvidia-caps nodes" || bad "no caps nodes"
total=$(CUDA_VISIBLE_DEVICES=$mig python3 -c "import torch; print(int(torch.cuda.mem_get_info()[1] / 2**30))" 2>/dev/null)
echo "    a process given $mig sees $total GiB"
[ -n "$total" ] && [ "$total" -lt 60 ] && ok "a process given the instance sees the partition only" || bad "MIG device: $total GiB"
client unprepare "$t/p/dra.sock" "lab/mig/$m_uid" >/dev/null
nvidia-smi -L | grep -q "$mig" && bad "the instance is still there" || ok "unprepare destroys the instance"
[ "$fails" = 0 ] && echo "gpu dra: all passed" || echo "gpu dra: $fails failed"
[ "$fails" = 0 ]
