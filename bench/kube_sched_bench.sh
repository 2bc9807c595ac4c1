#!/usr/bin/env bash
# kube_sched_bench.sh - pods scheduled per second by `cnlabd --kube`
# (issue 22's measure) against the loopback API server of the tests
# (tests/k8s/api/kube_apiserver.py), beside the same workload through the
# REST API in the same run.
#
#   pods:  NODES nodes of one H100 each (slices of gpu.cnlab.io), PODS
#          pods of 10 blocks each (a claim each) pending when cnlabd
#          starts (it ran once before to register the nodes and let the
#          project in); the time from its start until every pod is bound
#          (submitted, placed, claim allocated, Binding posted), the
#          start itself included.
#   REST:  the same PODS jobs (gpu h100-10) POSTed to a fresh cnlabd
#          with 64 concurrent clients, until every one is acknowledged
#          (durable), and until every one is placed on NODES nodes
#          registered by the same scheduler.
#
# Usage: bench/kube_sched_bench.sh [BUILD_DIR] [NODES] [PODS]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-$root/build}")
nodes=${2:-100}
pods=${3:-1000}
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/cnlab-kbench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

$py - "$nodes" >"$tmp/state.json" <<'EOF'
import json, sys
n = int(sys.argv[1])
st = {"nodes": [], "namespaces": [{"kind": "Namespace", "apiVersion": "v1",
      "metadata": {"name": "team-a", "labels": {"cnlab.io/project": "vision"}}}],
      "pdbs": [], "slices": []}
for i in range(n):
    name = "node%03d" % i
    st["nodes"].append({"kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "uid": "n-%d" % i},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}})
    st["slices"].append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name + "-gpu-cnlab-io-0"},
        "spec": {"driver": "gpu.cnlab.io", "nodeName": name,
                 "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                     "attributes": {"uuid": {"string": "GPU-%08d" % i},
                                    "type": {"string": "H100-80GB-PCIe"},
                                    "index": {"int": 0}},
                     "capacity": {"blocks": {"value": "100"}, "memory": {"value": "80Gi"}}}]}})
print(json.dumps(st))
EOF
echo "token-$RANDOM" >"$tmp/tok"
$py "$root/tests/k8s/api/kube_apiserver.py" --port-file "$tmp/port" --token-file "$tmp/tok" \
	--state "$tmp/state.json" --log "${KLOG:-/dev/null}" &
pids+=($!)
for _ in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
kapi="http://127.0.0.1:$(cat "$tmp/port")"

start_cnlabd() { # start_cnlabd DIR: cnlabd --kube, its URL in $url
	"$build/src/server/cnlabd" --data-dir "$1" --listen 127.0.0.1:0 --notebook-listen 127.0.0.1:0 \
		--bootstrap-admin admin --kube true --kube-server "$kapi" --kube-token-file "$tmp/tok" \
		--kube-watch-timeout 5s --log-level warn >"$1.out" 2>"$1.err" &
	pids+=($!)
	for _ in $(seq 200); do grep -q '^listening on' "$1.out" 2>/dev/null && break; sleep 0.05; done
	url="http://$(sed -n 's/^listening on //p' "$1.out")"
	export XDG_CONFIG_HOME=$1.cfg
	echo "$CNLAB_ADMIN_PASSWORD" | "$build/src/cli/cnlab" login --server "$url" --user admin \
		--password-stdin >/dev/null
	"$build/src/cli/cnlab" project create vision >/dev/null
	"$build/src/cli/cnlab" project member add vision kube >/dev/null
	for _ in $(seq 300); do
		[ "$("$build/src/cli/cnlab" node list -o json | jq '.items | length')" = "$nodes" ] && break
		sleep 0.1
	done
}
export CNLAB_JWT_SECRET=kube-bench-secret-0123456789abcdef-xyz
export CNLAB_ADMIN_PASSWORD=kube-bench-password
start_cnlabd "$tmp/k"
kill "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null

# Pods: create them all, then wait until every one is bound.
cat >"$tmp/pods.py" <<'EOF'
import json, sys, time, http.client, urllib.parse
from concurrent.futures import ThreadPoolExecutor
base, tok, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
u = urllib.parse.urlparse(base)
H = {"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
def call(conn, m, p, b=None):
    conn.request(m, p, json.dumps(b) if b is not None else None, H)
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null")
def make(i):
    c = http.client.HTTPConnection(u.hostname, u.port)
    call(c, "POST", "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims",
         {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": "c%d" % i}, "spec": {"devices": {"requests": [
              {"name": "gpu", "exactly": {"deviceClassName": "gpu.cnlab.io", "count": 1,
               "capacity": {"requests": {"blocks": "10"}}}}]}}})
    call(c, "POST", "/api/v1/namespaces/team-a/pods",
         {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d" % i},
          "spec": {"schedulerName": "cnlab", "resourceClaims": [{"name": "gpu", "resourceClaimName": "c%d" % i}],
                   "containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})
t0 = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(make, range(n)))
t1 = time.time()
tc = t1 - t0
# Now cnlabd starts (the shell waits for this line).
print("created", flush=True)
sys.stdin.readline()
t0 = time.time()
c = http.client.HTTPConnection(u.hostname, u.port)
while True:
    st, lst = call(c, "GET", "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab")
    bound = sum(1 for p in lst["items"] if p["spec"].get("nodeName"))
    if bound == n:
        break
    time.sleep(0.1)
t2 = time.time()
print("%d %.3f %.3f" % (n, tc, t2 - t0))
EOF
coproc PODS { $py "$tmp/pods.py" "$kapi" "$(cat "$tmp/tok")" "$pods"; }
read -r line <&"${PODS[0]}"
[ "$line" = created ] || { echo "pods not created: $line"; exit 1; }
echo go >&"${PODS[1]}"
"$build/src/server/cnlabd" --data-dir "$tmp/k" --listen 127.0.0.1:0 --notebook-listen 127.0.0.1:0 \
	--kube true --kube-server "$kapi" --kube-token-file "$tmp/tok" \
	--kube-watch-timeout 5s --log-level warn >>"$tmp/k.out" 2>>"$tmp/k.err" &
pids+=($!)
read -r np tcreate tbound <&"${PODS[0]}"

# REST: the same jobs through the API of a second, fresh cnlabd whose
# nodes the same scheduler registered, from an API server of its own
# (without the pods above).
$py "$root/tests/k8s/api/kube_apiserver.py" --port-file "$tmp/port2" --token-file "$tmp/tok" \
	--state "$tmp/state.json" --log /dev/null &
pids+=($!)
for _ in $(seq 200); do [ -s "$tmp/port2" ] && break; sleep 0.05; done
kapi="http://127.0.0.1:$(cat "$tmp/port2")"
start_cnlabd "$tmp/r"
tok=$(jq -r '.token // empty' "$tmp/r.cfg/cnlab/config.json" 2>/dev/null)
[ -n "$tok" ] || tok=$(grep -ho '"token": *"[^"]*"' -r "$tmp/r.cfg" | head -1 | sed 's/.*: *"//; s/"$//')
pid=$("$build/src/cli/cnlab" project show vision -o json | jq -r .id)
$py - "$url" "$tok" "$pid" "$pods" >"$tmp/rest.txt" <<'EOF'
import json, sys, time, http.client, urllib.parse
from concurrent.futures import ThreadPoolExecutor
base, tok, pid, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
u = urllib.parse.urlparse(base)
H = {"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
import threading
local = threading.local()
def sub(i):
    # One kept-alive connection per client, as wrk's; a 503 (too many
    # connections at once) is tried again.
    for _ in range(100):
        if not getattr(local, "c", None):
            local.c = http.client.HTTPConnection(u.hostname, u.port)
        try:
            local.c.request("POST", "/v1/projects/%s/jobs" % pid,
                            json.dumps({"command": "true", "gpu": "h100-10"}), H)
            r = local.c.getresponse(); b = r.read()
        except (OSError, http.client.HTTPException):
            local.c = None
            continue
        if r.status == 503:
            if not getattr(local, "said", False):
                sys.stderr.write("503 %s\n" % b[:300])
                local.said = True
            local.c.close(); local.c = None
            time.sleep(0.05)
            continue
        if r.status >= 300:
            sys.stderr.write("%d %s\n" % (r.status, b[:200]))
        return r.status
    return 0
t0 = time.time()
with ThreadPoolExecutor(64) as ex:
    codes = list(ex.map(sub, range(n)))
t1 = time.time()
from collections import Counter
sys.stderr.write("REST statuses: %s\n" % dict(Counter(codes)))
print("%d %.3f %d" % (n, t1 - t0, sum(1 for x in codes if x in (200, 201))))
EOF
read -r nr trest okr <"$tmp/rest.txt"
load=$(cut -d' ' -f1 /proc/loadavg)
echo "kube_sched_bench, $(date -u '+%F %H:%M') UTC, $(nproc) cores, load $load, $nodes nodes, $pods pods"
echo
echo "| measure | CNLab | baseline, same run |"
echo "|---|---|---|"
printf '| pods bound/s, all pending at cnlabd'"'"'s start, until every one is bound | %.0f/s (%.2f s, the start included; making the pods took %.2f s before) | REST job submissions acknowledged/s, 64 clients: %.0f/s (%d of %d in %.2f s) |\n' \
	"$(echo "$np / $tbound" | bc -l)" "$tbound" "$tcreate" "$(echo "$nr / $trest" | bc -l)" "$okr" "$nr" "$trest"
