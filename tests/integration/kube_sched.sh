#!/usr/bin/env bash
# kube_sched.sh - cnlabd as a Kubernetes scheduler (`cnlabd --kube`, issue
# 22), against a loopback API server in a 1.34 server's shapes
# (tests/k8s/api/kube_apiserver.py: list and watch of pods with bookmarks,
# the first watch answered 410 Gone, Binding, Eviction with a
# PodDisruptionBudget, claim status with 409 on a stale version):
#
#   - the nodes whose GPUs our driver publishes become CNLab nodes, the
#     node without them does not (`cnlab node list`);
#   - a pod asking 25 blocks through its ResourceClaim is submitted as a
#     job of the project its namespace names, the claim gets the
#     allocation (device, consumedCapacity, shareID, reservedFor) and the
#     pod is bound to that device's node; a MIG claim gets the partition;
#   - a pod that ends ends its job with its exit code (`cnlab jobs`);
#   - refusals are written on the pod: a namespace whose project does not
#     let "kube" in, a selector CNLab cannot read;
#   - pre-emption: three low-priority whole-GPU pods fill the GPUs, one
#     under a PodDisruptionBudget; a high-priority pod evicts one of the
#     other two and is bound; the budgeted pod is never evicted, and a
#     cancel of its job meets the budget (429) and is tried again;
#   - a pod of another scheduler is left alone; the CPU that other
#     schedulers' running pods hold on a node is counted as used there (a
#     CNLab pod that fits only in it waits, and is bound once it goes),
#     and so do a node's allocatable pods (a node at its limit takes no
#     CNLab pod until one of the others' goes);
#     a pod's nodeSelector, required node affinity and tolerations against
#     the nodes' taints hold its job to the nodes that meet them (none: it
#     is refused, each node's reason said); a waiting pod whose nodes
#     change is submitted again; required inter-pod rules and hard
#     topology spread do too; its preferences (preferred node and pod
#     affinity, ScheduleAnyway spread, PreferNoSchedule taints) make its
#     job prefer the best nodes, where it is bound over packing's pick;
#   - after a restart of cnlabd a bound pod is its job again; nobody logs
#     in as the service user kube; a waiting pod whose job is cancelled is
#     evicted; an agent's node is never taken over by its Kubernetes twin;
#   - `cnlab run train.py` placed on a Kubernetes node becomes a pod of its
#     project's namespace (claim allocated, train.py from a ConfigMap put
#     in /workspace by an init container that checks its SHA-256: its
#     script run for real in a busybox chroot, a swapped ConfigMap
#     refused; inputs over several ConfigMaps; one too big refused), its
#     log streams to cnlab run, which exits with the pod's exit code, and
#     the pod goes; a CLI job named like a pod's is not taken for it; a
#     cancel deletes the pod; a namespace that does not let cnlabd make
#     pods, and a project that has not let kube in, fail the job, saying
#     so;
#   - `cnlab run --nodes 2`: a pod per member on its own node, each told
#     its rank and its peers' DNS names (a headless Service per member,
#     owned by its pod; one left by an earlier pod replaced, a planted one
#     selecting other pods failing the member);
#   - a TrainingJob is reconciled into its pod and claim, and its status
#     follows them (Running with its job and node, Failed with the exit
#     code); one naming another project is refused; deleting one deletes
#     its pod and cancels its job; a NotebookServer is reconciled into its
#     pod, workspace PersistentVolumeClaim and Service, Running with its
#     URL, and goes the same way;
#   - a run pod's collector uploads its artifacts with its Secret's token
#     and its pod's own projected token, which cnlabd has reviewed: the
#     Secret mounted in another pod of the namespace uploads nothing;
#   - `cnlab server create` placed on a Kubernetes node: its pod, its
#     workspace claim and its token's Secret; running once the pod has an
#     address, and opened through cnlabd's proxy with the URL `cnlab
#     server open` prints (cnlab-notebook.py played as the pod); `cnlab
#     server exec` through the API server's exec (WebSocket), and `cnlab
#     server ssh` (an sshd in inetd mode started by such an exec, the
#     session's keys on its stdin), never into a pod without cnlabd's
#     proof, nor with a key not the owner's; stop keeps the workspace, start uses
#     it again, delete deletes it;
#   - every object sent to the API server is valid by the Kubernetes
#     OpenAPI schemas (kubernetes-models).
#
# Usage: kube_sched.sh CNLABD CNLAB
set -u
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
cnlabd=$(realpath "$1")
cnlab=$(realpath "$2")
agent=$(realpath "$3")
py=/usr/bin/python3
need_tools node jq curl chroot mknod ssh ssh-keygen ssh-agent unshare setpriv
k8s=$root/tests/k8s
[ -d "$k8s/node_modules/kubernetes-models" ] || {
	echo "FAIL tests/k8s/node_modules is missing (scripts/bootstrap runs npm ci --prefix tests/k8s)"
	exit 1
}
tmp=$(mktemp -d /tmp/cnlab-kube.XXXXXX)
api_pid="" d_pid="" j_pid=""
cleanup() {
	[ -n "$d_pid" ] && kill "$d_pid" 2>/dev/null
	[ -n "$j_pid" ] && kill "$j_pid" 2>/dev/null
	[ -n "$api_pid" ] && kill "$api_pid" 2>/dev/null
	[ -n "${sshagent:-}" ] && kill "$sshagent" 2>/dev/null
	wait 2>/dev/null
	[ "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
die() {
	bad "$1"
	exit 1
}
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
export XDG_CONFIG_HOME=$tmp/cfg HOME=$tmp

# cnlabd's ServiceAccount token, allowed what deploy/k8s's RBAC grants it
# (the API server stand-in enforces those manifests as they are), and the
# test's own, playing kubectl (an administrator) and the kubelet.
echo "sa-token-$RANDOM" >"$tmp/sa-token"
echo "admin-token-$RANDOM" >"$tmp/admin-token"
$py "$k8s/api/kube_apiserver.py" --port-file "$tmp/api.port" --token-file "$tmp/sa-token" \
	--admin-token-file "$tmp/admin-token" \
	--rbac "$root/deploy/k8s/base/cnlab/cnlabd-rbac.yaml" \
	--state "$k8s/api/sched_state.json" --log "$tmp/api.log" --expire-first-watch &
api_pid=$!
for _ in $(seq 200); do [ -s "$tmp/api.port" ] && break; sleep 0.05; done
kapi="http://127.0.0.1:$(cat "$tmp/api.port")"
k() { # k METHOD PATH [BODY] [CONTENT_TYPE]: the API server as kubectl calls it
	curl -sS -X "$1" -H "Authorization: Bearer $(cat "$tmp/admin-token")" \
		-H "Content-Type: ${4:-application/json}" ${3:+-d "$3"} "$kapi$2"
}

# The namespaces that let cnlabd make workloads, as the README has the
# administrator do it (kubectl -n NS create rolebinding cnlabd-workloads
# --clusterrole=cnlab:cnlabd-workloads --serviceaccount=cnlab:cnlabd);
# team-c does not.
for ns in team-a team-b; do
	k POST "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/rolebindings" \
		'{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cnlabd-workloads"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cnlab:cnlabd-workloads"},"subjects":[{"kind":"ServiceAccount","name":"cnlabd","namespace":"cnlab"}]}' |
		jq -e '.metadata.name == "cnlabd-workloads"' >/dev/null || die "rolebinding in $ns"
done

export CNLAB_JWT_SECRET=kube-sched-test-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=kube-admin-password-1
openssl rand -hex 32 >"$tmp/secrets.key" && chmod 600 "$tmp/secrets.key"
# Its port chosen first: run pods' collectors are told where cnlabd is.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
collect_image=registry.test/cnlab/cnlab-agent:1
start_d() { # cnlabd --kube on $tmp/d, its URL in $url
	: >"$tmp/out"
	"$cnlabd" --data-dir "$tmp/d" --listen "127.0.0.1:${port:-0}" --notebook-listen 127.0.0.1:0 \
		--bootstrap-admin admin --kube true --kube-server "$kapi" --kube-token-file "$tmp/sa-token" \
		--secrets-key-file "$tmp/secrets.key" \
		--kube-collect-image "$collect_image" --kube-collect-url "http://127.0.0.1:$port" \
		--kube-watch-timeout 2s --kube-resync 1s --kube-start-timeout 1s --kube-image-registry registry.test/cnlab \
		--cycle-interval 200ms ${extra:-} --preempt-min-run 1ms --preempt-grace 1s \
		--log-level info >"$tmp/out" 2>>"$tmp/err" &
	d_pid=$!
	for _ in $(seq 200); do grep -q '^listening on' "$tmp/out" && break; sleep 0.05; done
	url="http://$(sed -n 's/^listening on //p' "$tmp/out")"
	port=${url##*:}
	grep -q '^listening on' "$tmp/out" || die "cnlabd did not start: $(tail -5 "$tmp/err")"
}
start_d
echo "$CNLAB_ADMIN_PASSWORD" | "$cnlab" login --server "$url" --user admin --password-stdin >/dev/null ||
	die "cnlab login"
"$cnlab" project create vision >/dev/null && "$cnlab" project member add vision kube >/dev/null ||
	die "project vision with kube as a member"

# --- nodes ---------------------------------------------------------------
names=
for _ in $(seq 100); do
	names=$("$cnlab" node list -o json 2>/dev/null | jq -r '[.items[].name] | sort | join(",")')
	[ "$names" = node1,node2 ] && break
	sleep 0.1
done
[ "$names" = node1,node2 ] &&
	ok "the nodes with GPUs of gpu.cnlab.io are CNLab nodes, the one without is not ($names)" ||
	bad "nodes: '$names' $(tail -3 "$tmp/err")"
gpus=$("$cnlab" node list -o json | jq -c '[.items[] | {name, gpus: (.gpus // .gpu_count // (.devices | length))}] | sort_by(.name)')
grep -q '"node1","gpus":2' <<<"$gpus" && grep -q '"node2","gpus":1' <<<"$gpus" &&
	ok "their GPUs from the slices: node1 2, node2 1" || bad "node GPUs: $gpus"

# An agent's node is never taken over: a Kubernetes node of the same name
# publishing our slices later (a plugin beside the agent, or a forged
# slice) does not make cnlabd mint its credential.
jt=$("$cnlab" node join-token --node gpu-agent -o json | jq -r .token)
# (No agent runs behind it: it has no GPU and takes no work, so that
# nothing of the tests below is placed there.)
reg=$(curl -sS -X POST -H "Authorization: Bearer $jt" -d '{"protocol":9,"name":"gpu-agent","gpu_type":"","gpus":0,"cpu_milli":1000,"mem_mib":1024}' "$url/v1/nodes")
"$cnlab" node cordon gpu-agent >/dev/null
acred=$(jq -r .credential <<<"$reg") aid=$(jq -r .id <<<"$reg")
k POST /test/add '{"nodes":[{"kind":"Node","apiVersion":"v1","metadata":{"name":"gpu-agent","uid":"7f1e0c2a-1111-4000-8000-000000000009"},"status":{"allocatable":{"cpu":"8","memory":"16Gi"}}}],"slices":[{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"gpu-agent-gpu-cnlab-io-0"},"spec":{"driver":"gpu.cnlab.io","nodeName":"gpu-agent","pool":{"name":"gpu-agent","generation":1,"resourceSliceCount":1},"devices":[{"name":"gpu-0","attributes":{"uuid":{"string":"GPU-99999999-0000-4000-8000-000000000000"},"type":{"string":"H100-80GB-SXM"},"index":{"int":0}}}]}}]}' >/dev/null
for _ in $(seq 100); do grep -q 'cannot mint a node credential.*node=gpu-agent' "$tmp/err" && break; sleep 0.05; done
hb=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $acred" -d '{}' "$url/v1/nodes/$aid/heartbeat")
grep -q 'cannot mint a node credential.*node=gpu-agent' "$tmp/err" && [ "$hb" = 200 ] &&
	ok "a node an agent registered is not taken when its Kubernetes twin publishes our slices: the agent's credential still works" ||
	bad "agent node taken over? heartbeat $hb; $(grep gpu-agent "$tmp/err" | tail -2)"

# --- a pod with 25 blocks --------------------------------------------------
claim() { # claim NS NAME EXACTLY_JSON
	k POST "/apis/resource.k8s.io/v1/namespaces/$1/resourceclaims" \
		"{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"$2\"},\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\",\"exactly\":$3}]}}}" >/dev/null
}
pod() { # pod NS NAME CLAIM|"" [PRIORITY] [LABELS_JSON] [SCHEDULER]
	local rc=""
	[ -n "$3" ] && rc=",\"resourceClaims\":[{\"name\":\"gpu\",\"resourceClaimName\":\"$3\"}]"
	k POST "/api/v1/namespaces/$1/pods" \
		"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$2\",\"labels\":${5:-{\}}},\"spec\":{\"schedulerName\":\"${6:-cnlab}\",\"priority\":${4:-0},\"containers\":[{\"name\":\"main\",\"image\":\"busybox\",\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}}}]$rc}}" |
		jq -r .metadata.uid
}
podget() { k GET "/api/v1/namespaces/$1/pods/$2"; }
bound_node() { podget "$1" "$2" | jq -r '.spec.nodeName // empty'; }
wait_bound() {
	local n=
	for _ in $(seq 200); do
		n=$(bound_node "$1" "$2")
		[ -n "$n" ] && break
		sleep 0.05
	done
	echo "$n"
}
ended() { # ended NS NAME PHASE CODE
	k PATCH "/api/v1/namespaces/$1/pods/$2/status" \
		"{\"status\":{\"phase\":\"$3\",\"containerStatuses\":[{\"name\":\"main\",\"state\":{\"terminated\":{\"exitCode\":$4}}}]}}" \
		application/merge-patch+json >/dev/null
}
job_of() { # job_of NS/NAME: the job's JSON
	"$cnlab" jobs list --project vision -o json 2>/dev/null |
		jq -c --arg c "kubernetes pod $1" '[.items[] | select(.command == $c)][0] // empty'
}
job_state() {
	local s=
	for _ in $(seq 200); do
		s=$(job_of "$1" | jq -r '.state // empty')
		[ "$s" = "$2" ] && break
		sleep 0.05
	done
	echo "$s"
}

claim team-a c-a1 '{"deviceClassName":"gpu.cnlab.io","allocationMode":"ExactCount","count":1,"capacity":{"requests":{"blocks":"25"}},"selectors":[{"cel":{"expression":"device.attributes[\"gpu.cnlab.io\"].type == \"H100-80GB-SXM\""}}]}'
uid=$(pod team-a a1 c-a1)
n=$(wait_bound team-a a1)
c=$(k GET /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c-a1)
r=$(jq -c '.status.allocation.devices.results[0]' <<<"$c")
# CNLab's allocator may serve 25 blocks of a MIG-capable GPU from a MIG
# instance (README, rule R2): then the claim names that partition.
dev=$(jq -r .device <<<"$r")
if [[ "$dev" =~ ^gpu-[01]$ ]]; then
	[ "$(jq -r .consumedCapacity.blocks <<<"$r")" = 25 ] &&
		[[ "$(jq -r .shareID <<<"$r")" =~ ^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]]
	shaped=$?
else
	[[ "$dev" =~ ^gpu-[01]-mig-[0-9]g-[0-9]+gb-[0-9]$ ]]
	shaped=$?
fi
[ -n "$n" ] && [ "$(jq -r .pool <<<"$r")" = "$n" ] && [ "$(jq -r .driver <<<"$r")" = gpu.cnlab.io ] &&
	[ $shaped = 0 ] && [ "$(jq -r '.status.reservedFor[0].uid' <<<"$c")" = "$uid" ] &&
	[ "$(jq -r '.status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].values[0]' <<<"$c")" = "$n" ] &&
	ok "a 25-block claim allocated on $n ($dev$([ "${dev#*-mig-}" = "$dev" ] && echo ", consumedCapacity 25, a shareID")), reserved for the pod, which is bound there" ||
	bad "25 blocks: node '$n' claim $(jq -c .status <<<"$c")"
j=$(job_of team-a/a1)
[ "$(jq -r .state <<<"$j")" = running ] && [ "$(jq -r .gpu <<<"$j")" = H100-80GB-SXM-25 ] || [ "$(jq -r .state <<<"$j")" = running ] &&
	ok "its job in project vision runs ($(jq -r '.gpu // .shape' <<<"$j"))" || bad "job of a1: $j"
grep -q '"path": "/api/v1/namespaces/team-a/pods/a1/status"' "$tmp/api.log" &&
	grep -q "waiting as job $(jq -r .id <<<"$j")" "$tmp/api.log" &&
	ok "the pod's PodScheduled condition named its job while it waited" || bad "no waiting condition on a1"
ended team-a a1 Succeeded 0
[ "$(job_state team-a/a1 succeeded)" = succeeded ] && ok "the pod succeeded: its job succeeded" ||
	bad "a1's job: $(job_of team-a/a1)"

claim team-a c-a2 '{"deviceClassName":"gpu.cnlab.io","count":1,"capacity":{"requests":{"blocks":"10"}}}'
pod team-a a2 c-a2 >/dev/null
[ -n "$(wait_bound team-a a2)" ] || bad "a2 not bound"
ended team-a a2 Failed 3
[ "$(job_state team-a/a2 failed)" = failed ] && [ "$(job_of team-a/a2 | jq -r .exit_code)" = 3 ] &&
	ok "the pod failed with 3: its job failed, exit code 3" || bad "a2's job: $(job_of team-a/a2)"

claim team-a c-mig '{"deviceClassName":"gpu.cnlab.io","count":1,"selectors":[{"cel":{"expression":"device.attributes[\"gpu.cnlab.io\"].profile == \"3g.40gb\""}}]}'
pod team-a mig c-mig >/dev/null
n=$(wait_bound team-a mig)
d=$(k GET /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c-mig | jq -r '.status.allocation.devices.results[0].device')
[ -n "$n" ] && [[ "$d" =~ ^gpu-[01]-mig-3g-40gb-[0-9]$ ]] &&
	ok "a MIG claim (profile 3g.40gb) gets a partition: $n $d" || bad "MIG claim: node '$n' device '$d'"
ended team-a mig Succeeded 0
job_state team-a/mig succeeded >/dev/null

# --- refusals, other schedulers ------------------------------------------
claim team-b c-b1 '{"deviceClassName":"gpu.cnlab.io","count":1,"capacity":{"requests":{"blocks":"5"}}}'
pod team-b b1 c-b1 >/dev/null
claim team-a c-sel '{"deviceClassName":"gpu.cnlab.io","count":1,"selectors":[{"cel":{"expression":"device.capacity[\"gpu.cnlab.io\"].memory.compareTo(quantity(\"10Gi\")) >= 0"}}]}'
pod team-a sel c-sel >/dev/null
pod team-a other "" 0 '{}' default-scheduler >/dev/null
msg() { podget "$1" "$2" | jq -r '[.status.conditions[]? | select(.type == "PodScheduled") | .message][0] // empty'; }
m1= m2=
for _ in $(seq 200); do
	m1=$(msg team-b b1) m2=$(msg team-a sel)
	[ -n "$m1" ] && [ -n "$m2" ] && break
	sleep 0.05
done
grep -q "project team-b" <<<"$m1" && [ -z "$(bound_node team-b b1)" ] &&
	ok "a namespace whose project does not let kube in: refused on the pod ($m1)" || bad "team-b pod: '$m1'"
grep -q "selector 0" <<<"$m2" && [ -z "$(bound_node team-a sel)" ] &&
	ok "a selector CNLab cannot read: refused, naming it ($m2)" || bad "selector pod: '$m2'"
[ -z "$(bound_node team-a other)" ] && ! grep -Eq '/pods/other/(status|binding|eviction)' "$tmp/api.log" &&
	ok "a pod of another scheduler is left alone" || bad "the other scheduler's pod was touched"

# --- capacity that other schedulers' pods hold ----------------------------
# Pods of the default scheduler running on node1 and node2 hold all but
# 200m and 300m of their CPU (node2's through a sidecar beside its
# container); a finished one holds nothing.  A CNLab pod asking 500m
# waits until one goes, then is bound where room was made.
hog() { # hog NAME NODE PHASE INIT_JSON CONTAINER_CPU
	k POST /api/v1/namespaces/team-a/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"schedulerName\":\"default-scheduler\",\"nodeName\":\"$2\",\"initContainers\":$4,\"containers\":[{\"name\":\"main\",\"image\":\"busybox\",\"resources\":{\"requests\":{\"cpu\":\"$5\",\"memory\":\"1Gi\"}}}]},\"status\":{\"phase\":\"$3\"}}" >/dev/null
}
nodes_until() { # nodes_until JQ WANT: `node list -o json | jq -c JQ`, waited for WANT
	local v=
	for _ in $(seq 200); do
		v=$("$cnlab" node list -o json | jq -c "$1")
		[ "$v" = "$2" ] && break
		sleep 0.05
	done
	echo "$v"
}
waiting_job() { # waiting_job NAME: CNLab pod NAME made; its job's id, several cycles (200 ms) and resyncs (1 s) later
	local j=
	pod team-a "$1" "" >/dev/null
	for _ in $(seq 200); do
		j=$(job_of "team-a/$1" | jq -r '.id // empty')
		[ -n "$j" ] && break
		sleep 0.05
	done
	sleep 2
	echo "$j"
}
hog hog1 node1 Running '[]' 31800m
hog hog2 node2 Running '[{"name":"side","image":"busybox","restartPolicy":"Always","resources":{"requests":{"cpu":"1"}}}]' 14700m
hog done2 node2 Succeeded '[]' 16
others=$(nodes_until '[.items[] | select(.name != "gpu-agent") | {name, cpu: .others.cpu_milli}] | sort_by(.name)' \
	'[{"name":"node1","cpu":31800},{"name":"node2","cpu":15700}]')
[ "$others" = '[{"name":"node1","cpu":31800},{"name":"node2","cpu":15700}]' ] &&
	ok "the CPU other schedulers' running pods hold is counted on their nodes, a sidecar with them, a finished pod not ($others)" ||
	bad "others on nodes: $others"
capj=$(waiting_job cap)
[ -n "$capj" ] && [ -z "$(bound_node team-a cap)" ] && [ "$(job_of team-a/cap | jq -r .state)" = pending ] &&
	ok "a pod that fits only in what other pods hold waits (job $capj pending, not bound)" ||
	bad "cap: bound to '$(bound_node team-a cap)', job $(job_of team-a/cap)"
k DELETE /api/v1/namespaces/team-a/pods/hog2 >/dev/null
n=$(wait_bound team-a cap)
[ "$n" = node2 ] && ok "once the other pod on node2 went, it was bound there" ||
	bad "cap after hog2 went: node '$n' $(tail -3 "$tmp/err")"
ended team-a cap Succeeded 0
job_state team-a/cap succeeded >/dev/null
k DELETE /api/v1/namespaces/team-a/pods/hog1 >/dev/null
k DELETE /api/v1/namespaces/team-a/pods/done2 >/dev/null
others=$(nodes_until '[.items[] | select(.others)] | length' 0)
[ "$others" = 0 ] || bad "others still counted after their pods went"

# A node's allocatable pods bound what it runs, CNLab's and others'
# together: both nodes allow 1 pod and run one of the default scheduler's
# (10m of CPU: room enough); a CNLab pod waits, and is bound on node1 once
# its pod went.
for n_ in node1 node2; do
	k PATCH "/api/v1/nodes/$n_" '{"status":{"allocatable":{"pods":"1"}}}' application/merge-patch+json >/dev/null
done
hog slot1 node1 Running '[]' 10m
hog slot2 node2 Running '[]' 10m
pods_=$(nodes_until '[.items[] | select(.name != "gpu-agent") | {name, max: .pods_max, others: .others.pods}] | sort_by(.name)' \
	'[{"name":"node1","max":1,"others":1},{"name":"node2","max":1,"others":1}]')
sj_=$(waiting_job slotted)
[ "$pods_" = '[{"name":"node1","max":1,"others":1},{"name":"node2","max":1,"others":1}]' ] &&
	[ -n "$sj_" ] && [ -z "$(bound_node team-a slotted)" ] && [ "$(job_of team-a/slotted | jq -r .state)" = pending ] &&
	ok "nodes at their allocatable pods (1, held by another scheduler's pod: $pods_): a CNLab pod waits with CPU and GPUs free (job $sj_ pending, not bound)" ||
	bad "pods limit: nodes $pods_, slotted bound to '$(bound_node team-a slotted)', job $(job_of team-a/slotted)"
k DELETE /api/v1/namespaces/team-a/pods/slot1 >/dev/null
n=$(wait_bound team-a slotted)
[ "$n" = node1 ] && ok "once the other pod on node1 went, it was bound there" ||
	bad "slotted after slot1 went: node '$n' $(tail -3 "$tmp/err")"
ended team-a slotted Succeeded 0
job_state team-a/slotted succeeded >/dev/null
k DELETE /api/v1/namespaces/team-a/pods/slot2 >/dev/null
for n_ in node1 node2; do
	k PATCH "/api/v1/nodes/$n_" '{"status":{"allocatable":{"pods":"110"}}}' application/merge-patch+json >/dev/null
done
others=$(nodes_until '[.items[] | select(.others or (.pods_max // 110) < 110)] | length' 0)
[ "$others" = 0 ] || bad "pods limit still counted after their pods went"

# --- node selectors, affinity, taints --------------------------------------
# node2 labelled pool=b and tainted dedicated=research:NoSchedule (as
# kubectl label and kubectl taint do it).
# cnlabd reads nodes each kube_resync, as kube-scheduler reads its cache:
# the pods come once it has said it saw the change.
marked() { # marked N [NODE]: wait until cnlabd said N changes of NODE
	for _ in $(seq 400); do
		[ "$(grep -c "labels, taints or cordon changed.*node=${2:-node2}" "$tmp/err")" -ge "$1" ] && return 0
		sleep 0.05
	done
	return 1
}
seen=$(grep -c "labels, taints or cordon changed.*node=node2" "$tmp/err")
seen1=$(grep -c "labels, taints or cordon changed.*node=node1" "$tmp/err")
k PATCH /api/v1/nodes/node2 '{"metadata":{"labels":{"pool":"b"}},"spec":{"taints":[{"key":"dedicated","value":"research","effect":"NoSchedule"}]}}' application/merge-patch+json >/dev/null
marked $((seen + 1)) || bad "cnlabd did not see node2 labelled and tainted"
spod() { # spod NAME SPEC_EXTRA_JSON: a CPU pod of ours with more spec
	k POST /api/v1/namespaces/team-a/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"schedulerName\":\"cnlab\",\"containers\":[{\"name\":\"main\",\"image\":\"busybox\",\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}}}],$2}}" >/dev/null
}
tol='"tolerations":[{"key":"dedicated","operator":"Equal","value":"research","effect":"NoSchedule"}]'
# A selector only node2 meets, without the toleration: no node may take it.
spod sel-b '"nodeSelector":{"pool":"b"}'
m=
for _ in $(seq 200); do
	m=$(msg team-a sel-b)
	[ -n "$m" ] && break
	sleep 0.05
done
grep -q "node1: its nodeSelector pool=b" <<<"$m" && grep -q "node2: its taint dedicated=research:NoSchedule" <<<"$m" &&
	[ -z "$(bound_node team-a sel-b)" ] && [ -z "$(job_of team-a/sel-b)" ] &&
	ok "a pod no node may take (node1 lacks its label, node2's taint is not tolerated) is refused, each node's reason said, no job made ($m)" ||
	bad "sel-b: '$m', bound '$(bound_node team-a sel-b)'"
# With the toleration it may go to node2 only: its job says so.
spod sel-b2 "\"nodeSelector\":{\"pool\":\"b\"},$tol"
n=$(wait_bound team-a sel-b2)
[ "$n" = node2 ] && [ "$(job_of team-a/sel-b2 | jq -c .nodelist)" = '["node2"]' ] &&
	ok "with the toleration it is bound on node2, its job held to it (nodelist [\"node2\"])" ||
	bad "sel-b2: node '$n', job $(job_of team-a/sel-b2)"
# A required affinity away from pool b, tolerating the taint: node1.
spod not-b "$tol,\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"pool\",\"operator\":\"NotIn\",\"values\":[\"b\"]}]}]}}}"
n=$(wait_bound team-a not-b)
[ "$n" = node1 ] && [ "$(job_of team-a/not-b | jq -c .nodelist)" = '["node1"]' ] &&
	ok "a required node affinity (pool NotIn [b]) is bound on node1" || bad "not-b: node '$n', job $(job_of team-a/not-b)"
for p in sel-b2 not-b; do
	ended team-a $p Succeeded 0
	job_state team-a/$p succeeded >/dev/null
done
# A pod waiting on node2 alone (its CPU held by another scheduler's pod)
# when node1 gets the label too: its job is submitted again with both,
# and it is bound on node1.
hog hog3 node2 Running '[]' 15800m
for _ in $(seq 200); do
	[ "$("$cnlab" node list -o json | jq '.items[] | select(.name == "node2") | .others.cpu_milli')" = 15800 ] && break
	sleep 0.05
done
spod wait-b "\"nodeSelector\":{\"pool\":\"b\"},$tol"
wj=
for _ in $(seq 200); do
	wj=$(job_of team-a/wait-b | jq -r 'select(.state == "pending") | .id // empty')
	[ -n "$wj" ] && break
	sleep 0.05
done
[ "$(job_of team-a/wait-b | jq -c .nodelist)" = '["node2"]' ] || bad "wait-b: $(job_of team-a/wait-b)"
k PATCH /api/v1/nodes/node1 '{"metadata":{"labels":{"pool":"b"}}}' application/merge-patch+json >/dev/null
marked $((seen1 + 1)) node1 || bad "cnlabd did not see node1 labelled"
n=$(wait_bound team-a wait-b)
st=$("$cnlab" jobs show "$wj" -o json | jq -r .state)
[ "$n" = node1 ] && [ "$st" = cancelled ] && grep -q "nodes a waiting pod may use changed.*pod=team-a/wait-b job=$wj" "$tmp/err" &&
	ok "a waiting pod whose nodes changed (node1 labelled pool=b too) is submitted again (job $wj cancelled) and bound on node1" ||
	bad "wait-b: node '$n', first job $wj $st"
ended team-a wait-b Succeeded 0
k DELETE /api/v1/namespaces/team-a/pods/hog3 >/dev/null
k PATCH /api/v1/nodes/node1 '{"metadata":{"labels":{"pool":null}}}' application/merge-patch+json >/dev/null
marked $((seen1 + 2)) node1 || bad "cnlabd did not see node1's label go"
k DELETE /api/v1/namespaces/team-a/pods/sel-b >/dev/null
k PATCH /api/v1/nodes/node2 '{"metadata":{"labels":{"pool":null}},"spec":{"taints":null}}' application/merge-patch+json >/dev/null
marked $((seen + 2)) || bad "cnlabd did not see node2's label and taint go"

# Required inter-pod rules: aa1 and aa2 (app=web) keep away from each
# other's node (podAntiAffinity on kubernetes.io/hostname); a third is
# refused, and so is a plain app=web pod (their rules keep it away); a pod
# that must be near role=two (aa2's label) goes to aa2's node.
lpod() { # lpod NAME LABELS_JSON SPEC_EXTRA_JSON: a CPU pod of ours
	k POST /api/v1/namespaces/team-a/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",\"labels\":$2},\"spec\":{\"schedulerName\":\"cnlab\",\"containers\":[{\"name\":\"main\",\"image\":\"busybox\",\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}}}],$3}}" >/dev/null
}
waitmsg() { # waitmsg NAME: its condition's message, once there is one
	local m=
	for _ in $(seq 200); do
		m=$(msg team-a "$1")
		[ -n "$m" ] && break
		sleep 0.05
	done
	echo "$m"
}
anti='"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"kubernetes.io/hostname"}]}}'
lpod aa1 '{"app":"web"}' "$anti"
n1=$(wait_bound team-a aa1)
lpod aa2 '{"app":"web","role":"two"}' "$anti"
n2=$(wait_bound team-a aa2)
[ -n "$n1" ] && [ -n "$n2" ] && [ "$n1" != "$n2" ] &&
	ok "two pods with a required podAntiAffinity against app=web on kubernetes.io/hostname are bound on different nodes ($n1, $n2)" ||
	bad "anti-affinity: aa1 on '$n1', aa2 on '$n2' $(msg team-a aa2)"
lpod aa3 '{"app":"web"}' "$anti"
lpod web '{"app":"web"}' '"restartPolicy":"Never"'
m3=$(waitmsg aa3) mw=$(waitmsg web)
grep -q "$n1: its podAntiAffinity at kubernetes.io/hostname=$n1" <<<"$m3" &&
	grep -q "$n2: its podAntiAffinity at kubernetes.io/hostname=$n2" <<<"$m3" &&
	grep -q "node1: pod team-a/aa[12]'s podAntiAffinity" <<<"$mw" && grep -q "node2: pod team-a/aa[12]'s podAntiAffinity" <<<"$mw" &&
	[ -z "$(bound_node team-a aa3)" ] && [ -z "$(bound_node team-a web)" ] &&
	ok "a third such pod is refused on both nodes ($m3); so is a plain app=web pod, kept away by theirs ($mw)" ||
	bad "anti-affinity, third: '$m3' web: '$mw'"
lpod near '{}' '"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"role":"two"}},"topologyKey":"kubernetes.io/hostname"}]}}'
nn=$(wait_bound team-a near)
[ "$nn" = "$n2" ] && [ "$(job_of team-a/near | jq -c .nodelist)" = "[\"$n2\"]" ] &&
	ok "a pod with a required podAffinity to role=two is bound on aa2's node $n2, its job held to it" ||
	bad "pod affinity: near on '$nn', job $(job_of team-a/near)"
for p in aa1 aa2 near; do
	ended team-a $p Succeeded 0
	job_state team-a/$p succeeded >/dev/null
done
k DELETE /api/v1/namespaces/team-a/pods/aa3 >/dev/null
k DELETE /api/v1/namespaces/team-a/pods/web >/dev/null

# Hard topology spread (maxSkew 1 on kubernetes.io/hostname, app=spread):
# the second such pod goes to the other node, its job held to it.  With
# one on each GPU node a third is refused: cpu-only, a node of no GPU
# that CNLab does not place on, is a domain too, with none (as
# kube-scheduler counts it), so either GPU node would make the skew 2.  A
# pod whose required node affinity leaves cpu-only out (nodeAffinityPolicy
# Honor, the default) does not count it: it may go to either, and the
# next is held to the other.  The same constraint as ScheduleAnyway (a
# preference, not read) holds a pod to nothing.
tsc='"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"app":"spread"}}}]'
gpun='"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["node1","node2"]}]}]}}}'
lpod ts1 '{"app":"spread"}' "$tsc"
t1=$(wait_bound team-a ts1)
lpod ts2 '{"app":"spread"}' "$tsc"
t2=$(wait_bound team-a ts2)
o2=$([ "$t1" = node1 ] && echo node2 || echo node1)
[ -n "$t1" ] && [ "$t2" = "$o2" ] && [ "$(job_of team-a/ts2 | jq -c .nodelist)" = "[\"$o2\"]" ] &&
	ok "a second pod spread over kubernetes.io/hostname (maxSkew 1) is bound on the other node ($t1, then $t2), its job held to it" ||
	bad "spread: ts1 on '$t1', ts2 on '$t2', job $(job_of team-a/ts2) $(msg team-a ts2)"
lpod ts3 '{"app":"spread"}' "$tsc"
m3=$(waitmsg ts3)
grep -q "node1: its topology spread (kubernetes.io/hostname=node1: 1, fewest 0, maxSkew 1)" <<<"$m3" &&
	grep -q "node2: its topology spread (kuber" <<<"$m3" &&
	[ -z "$(bound_node team-a ts3)" ] && [ -z "$(job_of team-a/ts3)" ] &&
	ok "a third is refused while cpu-only (no GPU) has none: $m3" ||
	bad "spread, third: bound on '$(bound_node team-a ts3)', '$m3'"
lpod ts4 '{"app":"spread"}' "$tsc,$gpun"
t4=$(wait_bound team-a ts4)
o4=$([ "$t4" = node1 ] && echo node2 || echo node1)
lpod ts6 '{"app":"spread"}' "$tsc,$gpun"
t6=$(wait_bound team-a ts6)
[ -n "$t4" ] && [ "$(job_of team-a/ts4 | jq -c .nodelist)" = null ] && [ "$t6" = "$o4" ] &&
	[ "$(job_of team-a/ts6 | jq -c .nodelist)" = "[\"$o4\"]" ] &&
	ok "held to node1 and node2 by its node affinity, such a pod may go to either (bound on $t4), and the next is held to the other ($t6)" ||
	bad "spread: ts4 on '$t4' job $(job_of team-a/ts4), ts6 on '$t6' job $(job_of team-a/ts6) $(msg team-a ts6)"
lpod ts5 '{"app":"spread"}' "${tsc/DoNotSchedule/ScheduleAnyway}"
t5=$(wait_bound team-a ts5)
[ -n "$t5" ] && [ "$(job_of team-a/ts5 | jq -c '[.nodelist, .prefer, .avoid]')" = '[null,null,null]' ] &&
	ok "the same constraint as ScheduleAnyway holds the pod to no node, and with two app=spread pods on each GPU node prefers none (bound on $t5)" ||
	bad "spread, ScheduleAnyway: ts5 on '$t5', job $(job_of team-a/ts5)"
for p in ts1 ts2 ts4 ts5 ts6; do
	ended team-a $p Succeeded 0
	job_state team-a/$p succeeded >/dev/null
done
k DELETE /api/v1/namespaces/team-a/pods/ts3 >/dev/null

# Preferences, read as kube-scheduler's scoring reads them: the job
# prefers the best nodes (CNLab places it there first, and elsewhere
# only when they are full).  A preferred node affinity for node1, then
# for node2 (packing alone would put the second beside the first); a
# ScheduleAnyway spread of app=soft (pf1's label) goes to node2; a
# preferred podAffinity to role=one (pf1's) to node1; with node1 tainted
# PreferNoSchedule, a pod that does not tolerate it goes to node2, one
# that does prefers no node.
pref() { # pref NODE: a preferred node affinity for NODE by name
	echo "\"affinity\":{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":60,\"preference\":{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":\"In\",\"values\":[\"$1\"]}]}}]}}"
}
lpod pf1 '{"app":"soft","role":"one"}' "$(pref node1)"
p1=$(wait_bound team-a pf1)
lpod pf2 '{"app":"other"}' "$(pref node2)"
p2=$(wait_bound team-a pf2)
[ "$p1" = node1 ] && [ "$p2" = node2 ] && [ "$(job_of team-a/pf1 | jq -c '[.nodelist, .prefer]')" = '[null,["node1"]]' ] &&
	[ "$(job_of team-a/pf2 | jq -c .prefer)" = '["node2"]' ] &&
	ok "a preferred node affinity for node1, then one for node2: bound there (jobs prefer [\"node1\"], [\"node2\"], held to neither)" ||
	bad "preferred node affinity: pf1 on '$p1' $(job_of team-a/pf1), pf2 on '$p2' $(job_of team-a/pf2)"
lpod pf3 '{"app":"soft"}' "$(sed 's/"spread"/"soft"/' <<<"${tsc/DoNotSchedule/ScheduleAnyway}"),$gpun"
p3=$(wait_bound team-a pf3)
[ "$p3" = node2 ] && [ "$(job_of team-a/pf3 | jq -c .prefer)" = '["node2"]' ] &&
	ok "a ScheduleAnyway spread of app=soft (pf1 on node1) is bound on node2, which its job prefers" ||
	bad "soft spread: pf3 on '$p3' $(job_of team-a/pf3)"
lpod pf4 '{}' '"affinity":{"podAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":10,"podAffinityTerm":{"labelSelector":{"matchLabels":{"role":"one"}},"topologyKey":"kubernetes.io/hostname"}}]}}'
p4=$(wait_bound team-a pf4)
[ "$p4" = node1 ] && [ "$(job_of team-a/pf4 | jq -c .prefer)" = '["node1"]' ] &&
	ok "a preferred podAffinity to role=one is bound on pf1's node1" || bad "preferred pod affinity: pf4 on '$p4' $(job_of team-a/pf4)"
k PATCH /api/v1/nodes/node1 '{"spec":{"taints":[{"key":"spare","effect":"PreferNoSchedule"}]}}' application/merge-patch+json >/dev/null
marked $((seen1 + 3)) node1 || bad "cnlabd did not see node1 tainted"
lpod pf5 '{}' '"restartPolicy":"Never"'
p5=$(wait_bound team-a pf5)
lpod pf6 '{}' '"tolerations":[{"key":"spare","operator":"Exists"}]'
p6=$(wait_bound team-a pf6)
[ "$p5" = node2 ] && [ "$(job_of team-a/pf5 | jq -c .prefer)" = '["node2"]' ] && [ -n "$p6" ] &&
	[ "$(job_of team-a/pf6 | jq -c .prefer)" = null ] &&
	ok "node1 tainted spare:PreferNoSchedule: a pod that does not tolerate it is bound on node2; one that does prefers no node ($p6)" ||
	bad "PreferNoSchedule: pf5 on '$p5' $(job_of team-a/pf5), pf6 on '$p6' $(job_of team-a/pf6)"
# The taint moved to node2 (packing alone would put pf7 beside pf5):
# node1.
seen=$(grep -c "labels, taints or cordon changed.*node=node2" "$tmp/err")
k PATCH /api/v1/nodes/node1 '{"spec":{"taints":null}}' application/merge-patch+json >/dev/null
k PATCH /api/v1/nodes/node2 '{"spec":{"taints":[{"key":"spare","effect":"PreferNoSchedule"}]}}' application/merge-patch+json >/dev/null
marked $((seen1 + 4)) node1 || bad "cnlabd did not see node1's taint go"
marked $((seen + 1)) node2 || bad "cnlabd did not see node2 tainted"
lpod pf7 '{}' '"restartPolicy":"Never"'
p7=$(wait_bound team-a pf7)
[ "$p7" = node1 ] && [ "$(job_of team-a/pf7 | jq -c .prefer)" = '["node1"]' ] &&
	ok "the taint moved to node2: such a pod is bound on node1" ||
	bad "PreferNoSchedule on node2: pf7 on '$p7' $(job_of team-a/pf7)"
k PATCH /api/v1/nodes/node2 '{"spec":{"taints":null}}' application/merge-patch+json >/dev/null
marked $((seen + 2)) node2 || bad "cnlabd did not see node2's taint go"
for p in pf1 pf2 pf3 pf4 pf5 pf6 pf7; do
	ended team-a $p Succeeded 0
	job_state team-a/$p succeeded >/dev/null
done

# --- pre-emption and budgets ----------------------------------------------
whole='{"deviceClassName":"gpu.cnlab.io","count":1}'
for p in db l2 l3; do claim team-a "c-$p" "$whole"; done
pod team-a db c-db -10 '{"app":"db"}' >/dev/null
pod team-a l2 c-l2 -10 >/dev/null
pod team-a l3 c-l3 -10 >/dev/null
for p in db l2 l3; do [ -n "$(wait_bound team-a $p)" ] || bad "$p not bound"; done
[ -n "$(bound_node team-a db)" ] && [ -n "$(bound_node team-a l2)" ] && [ -n "$(bound_node team-a l3)" ] &&
	ok "three low-priority whole-GPU pods fill the three GPUs" || bad "the low pods are not all bound"
# A pod that waits (the GPUs are full, it cannot pre-empt): its job
# cancelled with the CLI evicts it.
claim team-a c-w "$whole"
pod team-a waiter c-w -10 >/dev/null
wj=
for _ in $(seq 200); do
	wj=$(job_of team-a/waiter | jq -r '.id // empty')
	[ -n "$wj" ] && break
	sleep 0.05
done
"$cnlab" jobs cancel "$wj" --project vision >/dev/null 2>&1
for _ in $(seq 200); do
	[ "$(podget team-a waiter | jq -r .code)" = 404 ] && break
	sleep 0.05
done
[ -n "$wj" ] && [ "$(podget team-a waiter | jq -r .code)" = 404 ] &&
	ok "a waiting pod's job cancelled with cnlab jobs cancel: the pod is evicted" ||
	bad "cancelled waiting job $wj: pod $(podget team-a waiter | jq -c '{code, phase: .status.phase}')"
claim team-a c-hi "$whole"
pod team-a hi c-hi 500000 >/dev/null
n=
for _ in $(seq 300); do
	n=$(bound_node team-a hi)
	[ -n "$n" ] && break
	sleep 0.05
done
gone=$(for p in l2 l3; do [ "$(podget team-a $p | jq -r .code)" = 404 ] && echo "$p"; done)
[ -n "$n" ] && [ "$(wc -w <<<"$gone")" = 1 ] && [ -n "$(bound_node team-a db)" ] &&
	! grep -q '"path": "/api/v1/namespaces/team-a/pods/db/eviction"' "$tmp/api.log" &&
	ok "a high-priority pod pre-empted $gone (evicted) and is bound on $n; the budgeted pod was spared" ||
	bad "pre-emption: hi on '$n', evicted '$gone' $(tail -3 "$tmp/err")"
vj=$(jq -r .id <<<"$(job_of team-a/$gone)")
[ "$(job_state "team-a/$gone" cancelled)" = cancelled ] &&
	ok "the evicted pod's job ended (cancelled: its pod is gone, not requeued)" ||
	bad "evicted job $vj: $(job_of "team-a/$gone")"
dbj=$(job_of team-a/db | jq -r .id)
"$cnlab" jobs cancel "$dbj" --project vision >/dev/null 2>&1
for _ in $(seq 200); do
	[ "$(grep -c '"path": "/api/v1/namespaces/team-a/pods/db/eviction", "status": 429' "$tmp/api.log")" -ge 2 ] && break
	sleep 0.1
done
[ "$(grep -c '"path": "/api/v1/namespaces/team-a/pods/db/eviction", "status": 429' "$tmp/api.log")" -ge 2 ] &&
	[ -n "$(bound_node team-a db)" ] &&
	ok "cancelling the budgeted pod's job: its eviction meets the budget (429), is tried again, the pod stays" ||
	bad "db eviction: $(grep -c 'pods/db/eviction' "$tmp/api.log") tries"

# --- a restart -------------------------------------------------------------
kill "$d_pid"
wait "$d_pid"
start_d
ended team-a hi Succeeded 0
[ "$(job_state team-a/hi succeeded)" = succeeded ] &&
	[ "$("$cnlab" jobs list --project vision -o json | jq '[.items[] | select(.command == "kubernetes pod team-a/hi")] | length')" = 1 ] &&
	ok "after a restart of cnlabd a bound pod is found again as its job (same Idempotency-Key): it ends it" ||
	bad "after a restart: $(job_of team-a/hi)"
# --- cnlab run on Kubernetes nodes -----------------------------------------
# A `cnlab run` job placed on a Kubernetes node becomes a pod of its
# project's namespace, made by cnlabd: the test plays the kubelet (phase,
# log, exit code), exactly as `cnlab run` is typed.
runpod() { # runpod JOB: the pod made for it (JSON), waited for
	local o=
	for _ in $(seq 200); do
		o=$(k GET "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab" |
			jq -c --arg j "$1" '[.items[] | select(.metadata.labels["cnlab.io/job"] == $j)][0] // empty')
		[ -n "$o" ] && [ "$(jq -r '.spec.nodeName // empty' <<<"$o")" != "" ] && break
		sleep 0.05
	done
	echo "$o"
}
jstate() { # jstate ID STATE: job ID of project vision's state, waited for
	local s=
	for _ in $(seq 200); do
		s=$("$cnlab" jobs show "$1" --project vision -o json 2>/dev/null | jq -r '.state // empty')
		[ "$s" = "$2" ] && break
		sleep 0.05
	done
	echo "$s"
}
jobid() { # jobid COMMAND: the newest job of project vision running COMMAND
	"$cnlab" jobs list --project vision -o json 2>/dev/null |
		jq -r --arg c "$1" '[.items[] | select(.command == $c)] | sort_by(.id) | last | .id // empty'
}
newjob() { # newjob COMMAND: jobid COMMAND, waited for
	local j=
	for _ in $(seq 200); do
		j=$(jobid "$1")
		[ -n "$j" ] && break
		sleep 0.05
	done
	echo "$j"
}
runpods() { # runpods JOB: how many pods cnlabd made for JOB
	k GET "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab" |
		jq --arg j "$1" '[.items[] | select(.metadata.labels["cnlab.io/job"] == $j)] | length'
}
nodes_do() { # nodes_do cordon|undrain: on both Kubernetes nodes
	"$cnlab" node "$1" node1 >/dev/null 2>&1
	"$cnlab" node "$1" node2 >/dev/null 2>&1
}
printf 'print("hi")\n' >"$tmp/train.py"
(cd "$tmp" && exec "$cnlab" run train.py --gpu h100-10 --project vision >"$tmp/run.out" 2>"$tmp/run.err")&
run_pid=$!
rj=$(newjob "python3 train.py")
rp=$(runpod "$rj")
rname=$(jq -r .metadata.name <<<"$rp")
rc_=$(k GET "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/$rname-gpu")
cm=$(k GET "/api/v1/namespaces/team-a/configmaps/$rname-inputs")
[ -n "$rj" ] && [ "$(jq -r .metadata.namespace <<<"$rp")" = team-a ] &&
	[ "$(jq -c '.spec.containers[0].command' <<<"$rp")" = '["sh","-c","python3 train.py"]' ] &&
	[ "$(jq -r '.spec.containers[0].image' <<<"$rp")" = docker.io/library/python:3.12-slim ] &&
	[ "$(jq -c '.spec.initContainers[0].command[4:]' <<<"$rp")" = "[\"in0\",\"$(sha256sum <"$tmp/train.py" | cut -d' ' -f1)\",\"train.py\"]" ] &&
	[ "$(jq -r '.spec.initContainers[0].image' <<<"$rp")" = docker.io/library/python:3.12-slim ] &&
	[ "$(jq -c '[.spec.volumes[] | select(.name == "inputs") | .projected.sources[].configMap.name]' <<<"$rp")" = "[\"$rname-inputs\"]" ] &&
	[ "$(jq '[.spec.containers[0].volumeMounts[] | select(.name == "inputs")] | length' <<<"$rp")" = 0 ] &&
	[ "$(jq -c '.spec.initContainers[0].volumeMounts | map(.mountPath)' <<<"$rp")" = '["/workspace","/cnlab/inputs","/workspace/artifacts"]' ] &&
	[ "$(jq -r '.binaryData.in0' <<<"$cm" | base64 -d)" = 'print("hi")' ] &&
	[ "$(jq -r '.status.reservedFor[0].uid' <<<"$rc_")" = "$(jq -r .metadata.uid <<<"$rp")" ] &&
	[ "$(jq -r '.status.allocation.devices.results[0].pool' <<<"$rc_")" = "$(jq -r .spec.nodeName <<<"$rp")" ] &&
	ok "cnlab run train.py --gpu h100-10: job $rj became pod team-a/$rname (project vision's namespace), bound on $(jq -r .spec.nodeName <<<"$rp") with its claim allocated, train.py from its ConfigMap through the init container that checks its SHA-256 (the job's container mounts no ConfigMap)" ||
	bad "run pod of '$rj': $(jq -c '{n: .metadata.name, ns: .metadata.namespace, node: .spec.nodeName, c: .spec.containers[0].command}' <<<"$rp") claim $(jq -c .status <<<"$rc_") $(tail -3 "$tmp/err")"
# A pod's slice is its claim's, prepared once by the kubelet: not resized
# (its 10 blocks of a block-mode GPU).
sres=$("$cnlab" jobs resize "$rj" --blocks 20 --project vision 2>&1)
sresrc=$?
[ "$(jq -c '.status.allocation.devices.results[0].consumedCapacity' <<<"$rc_")" = '{"blocks":"10"}' ] &&
	[ $sresrc != 0 ] && grep -q "runs in a Kubernetes pod on node" <<<"$sres" &&
	ok "resize of a pod's block slice is refused, saying why" || bad "resize of a pod's slice: exit $sresrc '$sres'"
# The init container's script, run for real (busybox's sh and sha256sum
# in a chroot laid out as the pod's: the ConfigMaps' keys in
# /cnlab/inputs, an empty /workspace): the input lands read-only with its
# bytes; a ConfigMap whose bytes were swapped after cnlabd made it (by
# whoever may delete and create ConfigMaps in the namespace) fails it,
# naming the input, and the job's workspace never holds the swapped bytes.
init_run() { # init_run POD_JSON CONFIGMAP_JSON: the init container in $tmp/root
	local r=$tmp/root
	rm -rf "$r" && mkdir -p "$r/bin" "$r/dev" "$r/cnlab/inputs" "$r/workspace" &&
		mknod -m 666 "$r/dev/null" c 1 3 || return 1
	cp /bin/busybox "$r/bin/busybox"
	for a in sh cat mkdir chmod rm sha256sum; do ln -s busybox "$r/bin/$a"; done
	for key in $(jq -r '.binaryData | keys[]' <<<"$2"); do
		jq -r --arg k "$key" '.binaryData[$k]' <<<"$2" | base64 -d >"$r/cnlab/inputs/$key"
	done
	eval "set -- $(jq -r '.spec.initContainers[0].command | map(@sh) | join(" ")' <<<"$1")"
	shift 2 # sh -c
	chroot "$r" /bin/sh -c 'PATH=/bin; cd /workspace && exec /bin/sh -c "$@"' wrap "$@"
}
if [ "$(id -u)" = 0 ] && [ -x /bin/busybox ]; then
	init_run "$rp" "$cm" 2>"$tmp/init.err"
	irc=$?
	[ $irc = 0 ] && [ "$(cat "$tmp/root/workspace/train.py")" = 'print("hi")' ] &&
		[ "$(stat -c %a "$tmp/root/workspace/train.py")" = 444 ] &&
		ok "the init container's script, run: train.py in /workspace with its bytes, read-only" ||
		bad "init script: exit $irc $(cat "$tmp/init.err") $(ls -la "$tmp/root/workspace")"
	swapped=$(jq -c --arg b "$(printf 'import os; os.system("curl evil")\n' | base64 -w0)" '.binaryData.in0 = $b' <<<"$cm")
	init_run "$rp" "$swapped" 2>"$tmp/init.err"
	irc=$?
	[ $irc != 0 ] && grep -q "cnlab: input train.py: its bytes are not those given to CNLab" "$tmp/init.err" &&
		[ ! -e "$tmp/root/workspace/train.py" ] &&
		ok "a swapped ConfigMap fails the init container, naming the input ($(head -c 80 "$tmp/init.err")...)" ||
		bad "swapped inputs: exit $irc $(cat "$tmp/init.err")"
else
	bad "the init container's script is run as root in a chroot with busybox (uid $(id -u))"
fi
k PATCH "/api/v1/namespaces/team-a/pods/$rname/status" '{"status":{"phase":"Running"}}' application/merge-patch+json >/dev/null
k POST /test/log "{\"namespace\":\"team-a\",\"name\":\"$rname\",\"text\":\"hello from the pod\\n\"}" >/dev/null
for _ in $(seq 200); do grep -q "hello from the pod" "$tmp/run.out" && break; sleep 0.05; done
grep -q "hello from the pod" "$tmp/run.out" && kill -0 $run_pid 2>/dev/null &&
	ok "the pod's log streams to cnlab run while it runs" || bad "no log in cnlab run: $(cat "$tmp/run.out" "$tmp/run.err")"
# Two lines of one time (the kubelet's times may tie), then one two
# seconds later: each taken once, read from the last second it had.
k POST /test/log "{\"namespace\":\"team-a\",\"name\":\"$rname\",\"text\":\"two\\nlines\\n\"}" >/dev/null
for _ in $(seq 200); do grep -q "^lines$" "$tmp/run.out" && break; sleep 0.05; done
# 1.2 MB at once (more than a request body of cnlabd may hold): it
# travels in chunks.
python3 -c '
import json, sys
lines = "".join("%05d " % i + "x" * 94 + "\n" for i in range(12000))
open(sys.argv[1] + ".txt", "w").write(lines)
json.dump({"namespace": "team-a", "name": sys.argv[2], "text": lines}, open(sys.argv[1] + ".json", "w"))
' "$tmp/big" "$rname"
curl -sS -X POST -H "Authorization: Bearer $(cat "$tmp/admin-token")" -H "Content-Type: application/json" \
	--data-binary @"$tmp/big.json" "$kapi/test/log" >/dev/null
k POST /test/log "{\"namespace\":\"team-a\",\"name\":\"$rname\",\"text\":\"bye\\n\",\"seconds\":2}" >/dev/null
# Its artifacts: a collector beside the job (a native sidecar of the
# agent's image) that alone mounts the Secret with its token, good for
# this job's epoch and for artifacts only.  The test plays the kubelet:
# it runs `cnlab-agent collect` as the pod spec says (its environment,
# /workspace read-only, the Secret's files) and stops it with SIGTERM
# once the job's container has ended; the files land in CNLab and
# `cnlab run` brings them back.
col=$(jq -c '.spec.initContainers[] | select(.name == "collect")' <<<"$rp")
csec=$(k GET "/api/v1/namespaces/team-a/secrets/$rname-collect")
ctok=$(jq -r '.data.token' <<<"$csec" | base64 -d)
cenv() { jq -r --arg n "$1" '.env[] | select(.name == $n) | .value' <<<"$col"; }
[ "$(jq -r .image <<<"$col")" = "$collect_image" ] && [ "$(jq -r .restartPolicy <<<"$col")" = Always ] &&
	[ "$(jq -c .command <<<"$col")" = '["cnlab-agent","collect"]' ] &&
	[ "$(cenv CNLAB_SERVER) $(cenv CNLAB_JOB) $(cenv CNLAB_EPOCH)" = "$url $rj $(jq -r '.metadata.labels["cnlab.io/epoch"]' <<<"$rp")" ] &&
	[ "$(jq -c '[.volumeMounts[] | [.name, .mountPath, .readOnly]]' <<<"$col")" = '[["artifacts","/workspace/artifacts",true],["collect","/run/cnlab/collect",true],["collect-pod","/run/cnlab/pod",true]]' ] &&
	[ "$(jq -c '.spec.volumes[] | select(.name == "collect-pod") | .projected' <<<"$rp")" = '{"sources":[{"serviceAccountToken":{"audience":"cnlab-collect","expirationSeconds":3600,"path":"token"}}],"defaultMode":256}' ] &&
	[ "$(jq '[.spec.containers[0].volumeMounts[] | select(.name == "collect-pod")] | length' <<<"$rp")" = 0 ] &&
	[ "$(jq -c '.spec.containers[0].volumeMounts | map([.name, .mountPath])' <<<"$rp")" = '[["workspace","/workspace"],["artifacts","/workspace/artifacts"]]' ] &&
	[ "$(jq -c '.spec.volumes[] | select(.name == "artifacts")' <<<"$rp")" = '{"name":"artifacts","emptyDir":{}}' ] &&
	[ "$(jq -c '.securityContext' <<<"$col")" = '{"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}' ] &&
	[ "$(jq -c '.spec.initContainers | map(.name)' <<<"$rp")" = '["inputs","collect"]' ] &&
	[ "$(jq '[.spec.containers[0].volumeMounts[] | select(.name == "collect")] | length' <<<"$rp")" = 0 ] &&
	[ "$(jq -r '.spec.containers[0].env[] | select(.name == "CNLAB_ARTIFACTS_DIR") | .value' <<<"$rp")" = /workspace/artifacts ] &&
	[ "$(jq -r '.spec.volumes[] | select(.name == "collect") | "\(.secret.secretName) \(.secret.defaultMode)"' <<<"$rp")" = "$rname-collect 256" ] &&
	[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$csec")" = "$(jq -r .metadata.uid <<<"$rp")" ] &&
	[ "$(jq -r .immutable <<<"$csec")" = true ] && [[ $ctok == cnlc_* ]] && ! grep -q "$ctok" <<<"$rp" &&
	! grep -q "$ctok" "$tmp/err" &&
	ok "its pod has a collector (native sidecar $collect_image: the job's artifacts folder, an emptyDir there when it starts, read-only and nothing else of the pod's; no capability, the job's user); the token is in an immutable Secret of the pod's that only the collector mounts, in no pod spec or log, beside the pod's own token for cnlabd (projected, audience cnlab-collect)" ||
	bad "collector: $col secret $(jq -c '{d: (.data | keys?), o: .metadata.ownerReferences, i: .immutable}' <<<"$csec")"
printf '%s' "$ctok" >"$tmp/ctok"
podtok() { # podtok NAME [AUDIENCE]: the kubelet's projected token for pod NAME of team-a, bound to it
	local p
	p=$(podget team-a "$1")
	k POST "/api/v1/namespaces/team-a/serviceaccounts/$(jq -r '.spec.serviceAccountName // "default"' <<<"$p")/token" \
		"$(jq -nc --arg n "$1" --arg u "$(jq -r .metadata.uid <<<"$p")" --arg a "${2:-cnlab-collect}" \
			'{apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: {audiences: [$a], expirationSeconds: 3600, boundObjectRef: {kind: "Pod", apiVersion: "v1", name: $n, uid: $u}}}')" |
		jq -r .status.token
}
podtok "$rname" >"$tmp/ptok"
ptok=$(cat "$tmp/ptok")
# The credential is this job's and this epoch's only, and this pod's.
cput() { # cput JOB EPOCH [CREDENTIAL]: the status of a PUT of one byte
	printf x | curl -s -o "$tmp/cput.out" -w '%{http_code}' -X PUT -H "Authorization: Bearer ${3-$ctok:$ptok}" \
		-H "X-Content-SHA256: $(printf x | sha256sum | cut -d' ' -f1)" --data-binary @- \
		"$url/v1/jobs/$1/collect?epoch=$2&path=forged.txt"
}
rep=$(jq -r '.metadata.labels["cnlab.io/epoch"]' <<<"$rp")
# One character changed inside the MAC (its last one carries 2 bits of 4
# possible values: "A" there may be no change at all).
cc=${ctok:10:1}
cbad=${ctok:0:10}$([ "$cc" = x ] && echo y || echo x)${ctok:11}
[ "$(cput "$rj" $((rep + 1)))" = 401 ] && [ "$(cput job_01M95BFBK0TJV1C5B5452K76QN "$rep" 2>/dev/null)" = 401 ] &&
	[ "$(cput "$rj" "$rep" "$cbad:$ptok")" = 401 ] && [ "$(cput "$rj" "$rep" "")" = 401 ] &&
	[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $ctok:$ptok" --data-binary x \
		"$url/v1/nodes/$(jq -r .spec.nodeName <<<"$rp")/artifacts?job=$rj&epoch=$rep&path=forged.txt")" = 401 ] &&
	[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ctok:$ptok" "$url/v1/jobs/$rj")" = 401 ] &&
	ok "the credential is refused for another epoch, another job, changed or missing, on a node's route and on the REST API (401)" ||
	bad "collector token: epoch+1 $(cput "$rj" $((rep + 1))), other $(cput job_01M95BFBK0TJV1C5B5452K76QN "$rep"), changed $(cput "$rj" "$rep" "$cbad:$ptok")"
# The attack the pod token stops: a member of the namespace who may make
# pods mounts the run's Secret in a pod of their own (its token is then
# theirs to send) and uploads the run's artifacts from there, with that
# pod's own projected token for cnlabd; or sends the Secret's token
# alone, or with the run pod's token for another audience (the API
# server's).
k POST /api/v1/namespaces/team-a/pods \
	'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"thief"},"spec":{"containers":[{"name":"c","image":"busybox"}],"volumes":[{"name":"s","secret":{"secretName":"'"$rname"'-collect"}}]}}' >/dev/null
ttok=$(podtok thief)
c_thief=$(cput "$rj" "$rep" "$ctok:$ttok")
m_thief=$(jq -r .error.message "$tmp/cput.out")
c_alone=$(cput "$rj" "$rep" "$ctok")
c_aud=$(cput "$rj" "$rep" "$ctok:$(podtok "$rname" https://kubernetes.default.svc)")
c_fake=$(cput "$rj" "$rep" "$ctok:not-a-token")
[ "$c_thief" = 401 ] && grep -q "pod team-a/thief, not of the pod CNLab made for job $rj" <<<"$m_thief" &&
	[ "$c_alone" = 401 ] && [ "$c_aud" = 401 ] && [ "$c_fake" = 401 ] && [ -n "$ttok" ] &&
	grep -q '"path": "/apis/authentication.k8s.io/v1/tokenreviews", "status": 201' "$tmp/api.log" &&
	ok "the run's Secret mounted in another pod of the namespace uploads nothing (401: $m_thief); nor its token alone, with the run pod's token for another audience, or with a made-up one" ||
	bad "stolen collector token: thief $c_thief ($m_thief), alone $c_alone, audience $c_aud, fake $c_fake"
k DELETE /api/v1/namespaces/team-a/pods/thief >/dev/null
wsa=$tmp/root/workspace/artifacts
rm -rf "$tmp/root" && mkdir -p "$wsa/sub" && printf 'weights' >"$wsa/model.txt" && printf 'epoch 1\n' >"$wsa/sub/log.txt"
collect() { # collect: the collector as the pod spec says, stopped as the kubelet does; its exit code
	: >"$tmp/collect.msg"
	env -i PATH=/usr/bin:/bin CNLAB_SERVER="$(cenv CNLAB_SERVER)" CNLAB_JOB="$(cenv CNLAB_JOB)" \
		CNLAB_EPOCH="$(cenv CNLAB_EPOCH)" CNLAB_COLLECT_DIR="$wsa" CNLAB_COLLECT_TOKEN_FILE="$tmp/ctok" \
		CNLAB_COLLECT_POD_TOKEN_FILE="$tmp/ptok" \
		CNLAB_COLLECT_MESSAGE_FILE="$tmp/collect.msg" "$agent" collect 2>"$tmp/collect.err" &
	local cpid=$!
	# Stopped once it waits for the stop (SIGTERM blocked), however slow
	# this machine is to start it.
	for _ in $(seq 400); do
		[ "$(readlink "/proc/$cpid/exe")" = "$agent" ] &&
			[ $(( 0x$(sed -n 's/^SigBlk:\t*//p' "/proc/$cpid/status" 2>/dev/null || echo 0) >> 14 & 1 )) = 1 ] && break
		sleep 0.05
	done
	kill -TERM $cpid
	wait $cpid
}
collect
crc_=$?
k PATCH "/api/v1/namespaces/team-a/pods/$rname/status" \
	"{\"status\":{\"phase\":\"Failed\",\"initContainerStatuses\":[{\"name\":\"collect\",\"state\":{\"terminated\":{\"exitCode\":$crc_}}}],\"containerStatuses\":[{\"name\":\"job\",\"state\":{\"terminated\":{\"exitCode\":4}}}]}}" \
	application/merge-patch+json >/dev/null
wait $run_pid
rrc=$?
[ $crc_ = 0 ] && [ "$(cat "$tmp/artifacts/$rj/model.txt" 2>/dev/null)" = weights ] &&
	[ "$(cat "$tmp/artifacts/$rj/sub/log.txt" 2>/dev/null)" = 'epoch 1' ] &&
	ok "the collector, stopped with SIGTERM, uploaded model.txt and sub/log.txt; cnlab run brought them back to artifacts/$rj/" ||
	bad "collected: exit $crc_ $(cat "$tmp/collect.err"), run.err $(tail -3 "$tmp/run.err"), got $(ls -R "$tmp/artifacts" 2>&1 | tr '\n' ' ')"
c_end=$(cput "$rj" "$rep")
[ "$c_end" = 409 ] || [ "$c_end" = 401 ] && ok "once the job has ended its credential uploads nothing ($c_end)" ||
	bad "token after the end: $c_end"
# A link the job planted among its artifacts (to the collector's token,
# which the job cannot read) is never followed: the collector names it in
# its termination message and the job fails with it, its other files
# collected; a collector killed before it was done fails the job too.
printf 'print("leak")\n' >"$tmp/leak.py"
(cd "$tmp" && exec "$cnlab" run leak.py --gpu h100-10 --project vision >"$tmp/lrun.out" 2>"$tmp/lrun.err")&
lrun_pid=$!
lj=$(newjob "python3 leak.py")
lp=$(runpod "$lj")
lname=$(jq -r .metadata.name <<<"$lp")
col=$(jq -c '.spec.initContainers[] | select(.name == "collect")' <<<"$lp")
k GET "/api/v1/namespaces/team-a/secrets/$lname-collect" | jq -r '.data.token' | base64 -d >"$tmp/ctok"
podtok "$lname" >"$tmp/ptok"
rm -rf "$tmp/root" && mkdir -p "$wsa" && printf 'fine' >"$wsa/ok.txt" && ln -s "$tmp/ctok" "$wsa/leak"
collect
lc=$?
k PATCH "/api/v1/namespaces/team-a/pods/$lname/status" \
	"$(jq -nc --argjson c $lc --arg m "$(cat "$tmp/collect.msg")" '{status: {phase: "Succeeded", initContainerStatuses: [{name: "collect", state: {terminated: {exitCode: $c, message: $m}}}], containerStatuses: [{name: "job", state: {terminated: {exitCode: 0}}}]}}')" \
	application/merge-patch+json >/dev/null
wait $lrun_pid
lrc=$?
lmsg=$("$cnlab" jobs show "$lj" --project vision -o json | jq -r .message)
[ $lc = 1 ] && [ $lrc = 1 ] && [ "$(jstate "$lj" failed)" = failed ] &&
	grep -q 'artifact "leak": a symbolic link; links are never followed, not collected' <<<"$lmsg" &&
	[ "$(cat "$tmp/artifacts/$lj/ok.txt" 2>/dev/null)" = fine ] && [ ! -e "$tmp/artifacts/$lj/leak" ] &&
	! grep -rq cnlc_ "$tmp/artifacts/$lj" &&
	ok "a link among the artifacts (to the token) is not followed: the job fails naming it ($lmsg), ok.txt came back, the token did not" ||
	bad "leak: collector $lc ($(cat "$tmp/collect.err")), run $lrc, job $lj '$lmsg', got $(ls "$tmp/artifacts/$lj" 2>&1)"
kj=$(cd "$tmp" && "$cnlab" run --detach --gpu h100-10 --project vision -o json leak.py 2>/dev/null | jq -r '.id // empty')
kname=$(runpod "$kj" | jq -r .metadata.name)
k PATCH "/api/v1/namespaces/team-a/pods/$kname/status" \
	'{"status":{"phase":"Succeeded","initContainerStatuses":[{"name":"collect","state":{"terminated":{"exitCode":137,"reason":"Error"}}}],"containerStatuses":[{"name":"job","state":{"terminated":{"exitCode":0}}}]}}' \
	application/merge-patch+json >/dev/null
jstate "$kj" failed >/dev/null
kmsg=$("$cnlab" jobs show "$kj" --project vision -o json | jq -r .message)
grep -q "its artifacts were not all collected: its collector ended (Error, exit code 137)" <<<"$kmsg" &&
	ok "a collector killed before it was done fails the job: $kmsg" || bad "killed collector: job '$kj' '$kmsg'"
gone_pod=$(podget team-a "$rname" | jq -r .code)
gone_claim=$(k GET "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/$rname-gpu" | jq -r .code)
gone_cm=$(k GET "/api/v1/namespaces/team-a/configmaps/$rname-inputs" | jq -r .code)
want=$(printf 'hello from the pod\ntwo\nlines\n'; cat "$tmp/big.txt"; printf 'bye')
[ $rrc = 4 ] && [ "$(cat "$tmp/run.out")" = "$want" ] &&
	grep -q "/pods/$rname/log?container=job&timestamps=true&limitBytes=[0-9]*&sinceTime=" "$tmp/api.log" &&
	[ "$gone_pod" = 404 ] && [ "$gone_claim" = 404 ] && [ "$gone_cm" = 404 ] &&
	ok "the pod failed with 4: cnlab run printed its whole log (12,004 lines, 1.2 MB of them at once) once and exited 4; the pod, its claim and its ConfigMap are gone" ||
	bad "run end: exit $rrc, out $(tr '\n' '|' <"$tmp/run.out"), pod $gone_pod claim $gone_claim cm $gone_cm"
# A pod whose init container found an input changed fails its job with
# the init container's message (the kubelet keeps its log's end), and
# its output is not read (the job's container never ran).
printf 'print("checked")\n' >"$tmp/check.py"
(cd "$tmp" && exec "$cnlab" run check.py --gpu h100-10 --project vision >"$tmp/crun.out" 2>"$tmp/crun.err")&
crun_pid=$!
cj=$(newjob "python3 check.py")
cp_=$(runpod "$cj")
cname=$(jq -r .metadata.name <<<"$cp_")
k PATCH "/api/v1/namespaces/team-a/pods/$cname/status" \
	'{"status":{"phase":"Failed","initContainerStatuses":[{"name":"inputs","state":{"terminated":{"exitCode":1,"message":"cnlab: input check.py: its bytes are not those given to CNLab (SHA-256 00, not 11): its ConfigMap was changed\n"}}}],"containerStatuses":[{"name":"job","state":{"waiting":{"reason":"PodInitializing"}}}]}}' \
	application/merge-patch+json >/dev/null
wait $crun_pid
crc=$?
cmsg=$("$cnlab" jobs show "$cj" --project vision -o json | jq -r .message)
[ $crc = 1 ] && [ "$(jstate "$cj" failed)" = failed ] &&
	grep -q "its inputs did not reach the pod: cnlab: input check.py: its bytes are not those given to CNLab" <<<"$cmsg" &&
	ok "an init container that found an input changed fails the job (exit 1): $cmsg" ||
	bad "init failure: exit $crc, job $cj: $cmsg $(cat "$tmp/crun.err")"

# A ConfigMap of a run's inputs deleted before the kubelet mounted it (by
# whoever may delete ConfigMaps in the namespace) would hold the pod, and
# its GPU slice, for ever: the job fails, naming it, and the pod goes.
printf 'print("gone")\n' >"$tmp/gone.py"
gj=$(cd "$tmp" && "$cnlab" run --detach --gpu h100-10 --project vision -o json gone.py 2>/dev/null | jq -r '.id // empty')
gname=$(runpod "$gj" | jq -r .metadata.name)
k DELETE "/api/v1/namespaces/team-a/configmaps/$gname-inputs" >/dev/null
gs=$(jstate "$gj" failed)
gmsg=$("$cnlab" jobs show "$gj" --project vision -o json | jq -r .message)
for _ in $(seq 100); do [ "$(podget team-a "$gname" | jq -r .code)" = 404 ] && break; sleep 0.05; done
[ "$gs" = failed ] && grep -q "its inputs' ConfigMap $gname-inputs is gone: the pod cannot start" <<<"$gmsg" &&
	[ "$(podget team-a "$gname" | jq -r .code)" = 404 ] &&
	ok "a run whose inputs' ConfigMap is deleted before its pod started fails, naming it, and its pod goes" ||
	bad "deleted ConfigMap: job '$gj' $gs '$gmsg'"

# Inputs beyond one ConfigMap (700 KiB each) go in several, in order, all
# owned by the pod, the init container's volume projecting them all; an
# input more than one ConfigMap holds fails the job, naming it.
kpid=$("$cnlab" project show vision -o json | jq -r .id)
ktok=$("$cnlab" token create kube-inputs --expires-in-days 1 2>/dev/null)
upload() { # upload FILE PATH: the upload's id
	curl -sS -X PUT -H "Authorization: Bearer $ktok" \
		-H "X-Content-SHA256: $(sha256sum <"$1" | cut -d' ' -f1)" \
		--data-binary @"$1" "$url/v1/projects/$kpid/uploads?path=$2" | jq -r .id
}
submit_with() { # submit_with COMMAND INPUTS: a job of those uploads (a JSON list's items); its id
	curl -sS -X POST -H "Authorization: Bearer $ktok" -H "Content-Type: application/json" \
		-d "{\"command\":\"$1\",\"gpu\":\"h100-10\",\"inputs\":[$2]}" \
		"$url/v1/projects/$kpid/jobs" | jq -r '.id // empty'
}
failed_msg() { # failed_msg JOB: its message once it failed, waited for
	local m=
	for _ in $(seq 200); do
		m=$("$cnlab" jobs show "$1" --project vision -o json 2>/dev/null | jq -r 'select(.state == "failed") | .message')
		[ -n "$m" ] && break
		sleep 0.05
	done
	echo "$m"
}
head -c 500000 /dev/urandom >"$tmp/a.bin"
head -c 500000 /dev/urandom >"$tmp/b.bin"
printf 'print(1)\n' >"$tmp/two.py"
ua=$(upload "$tmp/two.py" two.py) ub=$(upload "$tmp/a.bin" data/a.bin) uc=$(upload "$tmp/b.bin" data/b.bin)
mj=$(submit_with "python3 two.py" "\"$ua\",\"$ub\",\"$uc\"")
mp=$(runpod "$mj")
mname=$(jq -r .metadata.name <<<"$mp")
cm0=$(k GET "/api/v1/namespaces/team-a/configmaps/$mname-inputs")
cm1=$(k GET "/api/v1/namespaces/team-a/configmaps/$mname-inputs-1")
both=$(jq -sc '{binaryData: (.[0].binaryData + .[1].binaryData)}' <<<"$cm0 $cm1")
mapsz() { jq '[.binaryData[] | (length * 3 / 4) - (if endswith("==") then 2 elif endswith("=") then 1 else 0 end)] | add'; }
[ -n "$mj" ] && [ "$(jq -c '.binaryData | keys' <<<"$both")" = '["in0","in1","in2"]' ] &&
	[ "$(mapsz <<<"$cm0")" -le 716800 ] && [ "$(mapsz <<<"$cm1")" -le 716800 ] &&
	[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$cm1")" = "$(jq -r .metadata.uid <<<"$mp")" ] &&
	[ "$(jq -r '.immutable' <<<"$cm1")" = true ] &&
	[ "$(jq -c '[.spec.volumes[] | select(.name == "inputs") | .projected.sources[].configMap.name]' <<<"$mp")" = "[\"$mname-inputs\",\"$mname-inputs-1\"]" ] &&
	init_run "$mp" "$both" 2>"$tmp/init.err" &&
	cmp -s "$tmp/root/workspace/data/a.bin" "$tmp/a.bin" && cmp -s "$tmp/root/workspace/data/b.bin" "$tmp/b.bin" &&
	ok "three inputs (1 MB) in two ConfigMaps of the pod's, both projected; the init container puts each in /workspace with its bytes" ||
	bad "inputs in two ConfigMaps: job '$mj' cm0 $(jq -c '.binaryData | keys' <<<"$cm0") cm1 $(jq -c '{k: (.binaryData | keys), o: .metadata.ownerReferences}' <<<"$cm1") $(cat "$tmp/init.err")"
"$cnlab" jobs cancel "$mj" --project vision >/dev/null 2>&1
# Nine inputs of 400 kB need nine ConfigMaps (two do not share one): more
# than a pod takes, said with the limits.
nine=
for i in 1 2 3 4 5 6 7 8 9; do
	head -c 400000 /dev/urandom >"$tmp/n$i.bin"
	nine="$nine${nine:+,}\"$(upload "$tmp/n$i.bin" "n$i.bin")\""
done
nj=$(submit_with "python3 nine.py" "$nine")
nmsg=$(failed_msg "$nj")
grep -q "its inputs (9 files, 3600000 bytes) need more ConfigMaps than a pod takes (8 of 716800 bytes)" <<<"$nmsg" &&
	ok "inputs that need more than 8 ConfigMaps fail the job, saying so: $nmsg" || bad "nine inputs: job '$nj' '$nmsg'"
head -c 800000 /dev/urandom >"$tmp/big.bin"
ud=$(upload "$tmp/big.bin" big.bin)
bj=$(submit_with "python3 big.py" "\"$ud\"")
bmsg=$(failed_msg "$bj")
grep -q "its input big.bin (800000 bytes) is more than a ConfigMap holds" <<<"$bmsg" &&
	ok "an input more than a ConfigMap holds fails the job, naming it: $bmsg" || bad "big input: job '$bj' '$bmsg'"

# A CLI job named like a pod's is not taken for that pod: it is a run
# job of its own, in a pod of its own.

# Secrets: `cnlab run --secret` on a Kubernetes node.  cnlabd fetches them
# as a node does (audited secret.use) and puts them in a Secret of the
# pod's, immutable, owned by the pod (its deletion takes it): files of
# /run/secrets, and the variable asked for from it; never in the pod spec.
printf 'db-TOPSECRET-7e57' >"$tmp/pw"
printf 'wandb-TOPSECRET-c0ffee' >"$tmp/wk"
"$cnlab" secret set db-password --from-file "$tmp/pw" >/dev/null 2>&1 &&
	"$cnlab" secret set wandb-key --from-file "$tmp/wk" >/dev/null 2>&1 ||
	bad "secret set: $("$cnlab" secret set db-password --from-file "$tmp/pw" 2>&1)"
printf 'import os\n' >"$tmp/sec.py"
(cd "$tmp" && exec "$cnlab" run sec.py --gpu h100-10 --project vision --secret db-password \
	--secret-env wandb-key=WANDB_API_KEY >"$tmp/srun.out" 2>"$tmp/srun.err")&
srun_pid=$!
sj=$(newjob "python3 sec.py")
sp=$(runpod "$sj")
sname=$(jq -r .metadata.name <<<"$sp")
for _ in $(seq 100); do
	sec=$(k GET "/api/v1/namespaces/team-a/secrets/$sname-secrets")
	[ "$(jq -r '.kind // empty' <<<"$sec")" = Secret ] && break
	sleep 0.05
done
[ -n "$sj" ] && [ "$(jq -r '.data["db-password"]' <<<"$sec" | base64 -d)" = db-TOPSECRET-7e57 ] &&
	[ "$(jq -r '.data["wandb-key"]' <<<"$sec" | base64 -d)" = wandb-TOPSECRET-c0ffee ] &&
	[ "$(jq -r '.immutable' <<<"$sec")" = true ] &&
	[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$sec")" = "$(jq -r .metadata.uid <<<"$sp")" ] &&
	[ "$(jq -r '.spec.volumes[] | select(.name == "secrets") | "\(.secret.secretName) \(.secret.defaultMode)"' <<<"$sp")" = "$sname-secrets 256" ] &&
	[ "$(jq -r '.spec.containers[0].volumeMounts[] | select(.name == "secrets") | "\(.mountPath) \(.readOnly)"' <<<"$sp")" = "/run/secrets true" ] &&
	[ "$(jq -c '.spec.containers[0].env[] | select(.name == "WANDB_API_KEY") | .valueFrom.secretKeyRef' <<<"$sp")" = "{\"name\":\"$sname-secrets\",\"key\":\"wandb-key\"}" ] &&
	[ "$(jq -r '.spec.containers[0].env[] | select(.name == "CNLAB_SECRETS_DIR") | .value' <<<"$sp")" = /run/secrets ] &&
	! jq -e '.spec.containers[0].env[] | select(.name == "DB_PASSWORD")' <<<"$sp" >/dev/null &&
	! grep -q 'TOPSECRET' <<<"$sp" && ! grep -q 'TOPSECRET' "$tmp/err" &&
	"$cnlab" audit --limit 1000 -o json 2>/dev/null | jq -e --arg j "$sj" '[.items[] | select(.action == "secret.use" and (.target | startswith($j)))] | length > 0' >/dev/null &&
	ok "cnlab run --secret db-password --secret-env wandb-key=WANDB_API_KEY on a Kubernetes node: the pod's immutable Secret $sname-secrets (owned by the pod) holds both, mounted read-only at /run/secrets (0400), WANDB_API_KEY from it; no value in the pod spec or cnlabd's log; the use audited" ||
	bad "run secrets of '$sj': secret $(jq -c '{data: (.data | keys?), immutable, owner: .metadata.ownerReferences}' <<<"$sec") volumes $(jq -c '.spec.volumes' <<<"$sp") env $(jq -c '.spec.containers[0].env' <<<"$sp") $(tail -3 "$tmp/err")"
k PATCH "/api/v1/namespaces/team-a/pods/$sname/status" \
	'{"status":{"phase":"Succeeded","initContainerStatuses":[{"name":"collect","state":{"terminated":{"exitCode":0}}}],"containerStatuses":[{"name":"job","state":{"terminated":{"exitCode":0}}}]}}' \
	application/merge-patch+json >/dev/null
wait $srun_pid
src_=$?
gone_sec=$(k GET "/api/v1/namespaces/team-a/secrets/$sname-secrets" | jq -r .code)
[ $src_ = 0 ] && [ "$gone_sec" = 404 ] &&
	ok "the pod succeeded: cnlab run exited 0, and the pod's Secret is gone with it" ||
	bad "secret run end: exit $src_ ($(cat "$tmp/srun.err")), its Secret $gone_sec"
# A secret deleted between the submission and the start fails the job,
# naming it, and no pod is made.
"$cnlab" secret set gone-soon --from-file "$tmp/pw" >/dev/null 2>&1
nodes_do cordon
(cd "$tmp" && "$cnlab" run --detach sec.py --gpu h100-10 --project vision --secret gone-soon >/dev/null 2>"$tmp/gs.err")
gj=$(jobid "python3 sec.py")
"$cnlab" secret delete gone-soon >/dev/null 2>&1
nodes_do undrain
gs=$(jstate "$gj" failed)
gmsg=$("$cnlab" jobs show "$gj" --project vision -o json 2>/dev/null | jq -r '.message // .reason // empty')
[ "$gj" != "$sj" ] && [ "$gs" = failed ] && grep -q 'gone-soon' <<<"$gmsg" &&
	[ "$(runpods "$gj")" = 0 ] &&
	ok "a secret deleted before its job started: the job failed naming it ($gmsg), and no pod was made" ||
	bad "gone secret: job '$gj' (after '$sj') '$gs' '$gmsg' $(cat "$tmp/gs.err")"
# A tenant of the namespace makes the Secret a waiting run's pod will
# mount, ahead, with values of its choosing: not used, the job fails.
nodes_do cordon
(cd "$tmp" && "$cnlab" run --detach sec.py --gpu h100-10 --project vision --secret db-password >/dev/null 2>"$tmp/sq.err")
qj=$(jobid "python3 sec.py")
qname=$(jq -rn --arg j "$qj" '"cnlab-" + ($j | ascii_downcase | gsub("_"; "-")) + "-1-secrets"')
k POST /api/v1/namespaces/team-a/secrets "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"$qname\"},\"data\":{\"db-password\":\"$(printf planted | base64)\"}}" >/dev/null
nodes_do undrain
qs=$(jstate "$qj" failed)
qmsg=$("$cnlab" jobs show "$qj" --project vision -o json 2>/dev/null | jq -r '.message // .reason // empty')
[ "$qj" != "$gj" ] && [ "$qs" = failed ] && grep -q "has a Secret $qname that CNLab did not make" <<<"$qmsg" &&
	[ "$(runpods "$qj")" = 0 ] &&
	ok "a Secret planted under a waiting run's name: not mounted, the job failed saying so, and its pod is gone" ||
	bad "planted secret: job '$qj' '$qs' '$qmsg'"
fj=$("$cnlab" run --detach --gpu h100-10 --project vision -o json -- kubernetes pod team-a/db 2>/dev/null | jq -r '.id // empty')
fp=$(runpod "$fj")
[ -n "$fj" ] && [ -n "$fp" ] && [ "$(jq -r .metadata.name <<<"$fp")" != db ] &&
	[ -n "$(bound_node team-a db)" ] && [ "$(jq -r .spec.containers[0].image <<<"$fp")" = docker.io/library/python:3.12-slim ] &&
	ok "a CLI job whose command names a pod (\"kubernetes pod team-a/db\") is not matched to it: it runs in a pod of its own" ||
	bad "forged pod job $fj: pod $(jq -c .metadata <<<"$fp")"
# Cancelled: its pod is deleted, the job ends cancelled.
"$cnlab" jobs cancel "$fj" --project vision >/dev/null 2>&1
fs=
for _ in $(seq 200); do
	fs=$("$cnlab" jobs show "$fj" --project vision -o json 2>/dev/null | jq -r '.state // empty')
	[ "$fs" = cancelled ] && [ "$(podget team-a "$(jq -r .metadata.name <<<"$fp")" | jq -r .code)" = 404 ] && break
	sleep 0.05
done
[ "$fs" = cancelled ] && [ "$(podget team-a "$(jq -r .metadata.name <<<"$fp")" | jq -r .code)" = 404 ] &&
	ok "cnlab jobs cancel of a run job on Kubernetes: its pod is deleted, the job is cancelled" ||
	bad "cancelled run job $fj: state '$fs'"
# A CNLab image (--image NAME): the pod pulls it from the registry CNLab's
# images are pushed to (kube_image_registry), pinned to CNLab's digest.
if "$root/scripts/build-image" busybox "$tmp/bb.tar" >/dev/null 2>&1 &&
	"$cnlab" image import "$tmp/bb.tar" --name tools:1 >/dev/null 2>&1; then
	ij=$("$cnlab" run --detach --gpu h100-10 --image tools:1 --project vision -o json -- echo hi 2>/dev/null | jq -r '.id // empty')
	ip=$(runpod "$ij")
	dg=$("$cnlab" image list -o json | jq -r '.items[] | select(.name == "tools:1") | (.digest // .manifest)')
	[ -n "$ij" ] && [[ "$dg" == sha256:* ]] &&
		[ "$(jq -r '.spec.containers[0].image' <<<"$ip")" = "registry.test/cnlab/tools:1@$dg" ] &&
		ok "cnlab run --image tools:1: its pod runs registry.test/cnlab/tools:1@$dg (CNLab's digest)" ||
		bad "image of a run pod: $(jq -r '.spec.containers[0].image' <<<"$ip"), digest '$dg'"
	"$cnlab" jobs cancel "$ij" --project vision >/dev/null 2>&1
else
	bad "cannot build and import a busybox image (scripts/build-image needs root and umoci)"
fi
# A run pod's image changed by someone who may patch pods: the job fails,
# the pod goes (it no longer runs what its job asked).
tj_=$("$cnlab" run --detach --gpu h100-10 --project vision -o json -- echo hi 2>/dev/null | jq -r '.id // empty')
tp=$(runpod "$tj_" | jq -r .metadata.name)
k PATCH "/api/v1/namespaces/team-a/pods/$tp" '{"spec":{"containers":[{"name":"job","image":"evil:latest","command":["sh","-c","echo owned"]}]}}' application/merge-patch+json >/dev/null
ts=$(jstate "$tj_" failed)
[ "$ts" = failed ] && "$cnlab" jobs show "$tj_" --project vision -o json | jq -r .message | grep -q "image was changed" &&
	[ "$(podget team-a "$tp" | jq -r .code)" = 404 ] &&
	ok "a run pod whose image is patched after cnlabd made it: its job fails, the pod goes" ||
	bad "patched run pod $tp: job '$ts'"
# So is one whose init container's image is patched (the image that
# checks the inputs would no longer be the job's).
printf 'print(2)\n' >"$tmp/tamper.py"
ti=$(cd "$tmp" && "$cnlab" run --detach --gpu h100-10 --project vision -o json tamper.py 2>/dev/null | jq -r '.id // empty')
tip=$(runpod "$ti" | jq -r .metadata.name)
# Patched and patched back at once (the worker may look only after both):
# every version the watch brings is looked at.
tiimg=$(k GET "/api/v1/namespaces/team-a/pods/$tip" | jq -c '.spec.initContainers')
k PATCH "/api/v1/namespaces/team-a/pods/$tip" "$(jq -c '{spec: {initContainers: (map(.image = "evil:latest"))}}' <<<"$tiimg")" application/merge-patch+json >/dev/null
k PATCH "/api/v1/namespaces/team-a/pods/$tip" "{\"spec\":{\"initContainers\":$tiimg}}" application/merge-patch+json >/dev/null
tis=$(jstate "$ti" failed)
[ "$tis" = failed ] && "$cnlab" jobs show "$ti" --project vision -o json | jq -r .message | grep -q "image was changed" &&
	ok "a run pod whose init container's image is patched, and patched back at once: its job fails" ||
	bad "patched init container of $tip: job '$tis'"
# An ephemeral container (pods/ephemeralcontainers) could rewrite the
# checked inputs: a run pod given one fails its job.
ej=$(cd "$tmp" && "$cnlab" run --detach --gpu h100-10 --project vision -o json tamper.py 2>/dev/null | jq -r '.id // empty')
ep_=$(runpod "$ej" | jq -r .metadata.name)
k PATCH "/api/v1/namespaces/team-a/pods/$ep_/ephemeralcontainers" \
	'{"spec":{"ephemeralContainers":[{"name":"debugger","image":"busybox","command":["sh","-c","echo owned >/workspace/tamper.py"]}]}}' \
	application/strategic-merge-patch+json >/dev/null
es=$(jstate "$ej" failed)
[ "$es" = failed ] && "$cnlab" jobs show "$ej" --project vision -o json | jq -r .message | grep -q "container was added" &&
	ok "a run pod given an ephemeral container: its job fails" || bad "ephemeral container on $ep_: job '$es'"
# A run pod whose image cannot be pulled: the job fails, saying why,
# instead of holding its slice for ever (kube_start_timeout, 1 s here).
sj=$("$cnlab" run --detach --gpu h100-10 --project vision -o json -- echo hi 2>/dev/null | jq -r '.id // empty')
sp=$(runpod "$sj" | jq -r .metadata.name)
k PATCH "/api/v1/namespaces/team-a/pods/$sp/status" \
	'{"status":{"phase":"Pending","containerStatuses":[{"name":"job","state":{"waiting":{"reason":"ImagePullBackOff","message":"Back-off pulling image"}}}]}}' \
	application/merge-patch+json >/dev/null
ss=$(jstate "$sj" failed)
[ "$ss" = failed ] && "$cnlab" jobs show "$sj" --project vision -o json | jq -r .message | grep -q "ImagePullBackOff" &&
	[ "$(podget team-a "$sp" | jq -r .code)" = 404 ] &&
	ok "a run pod whose image cannot be pulled: its job fails (ImagePullBackOff) and the pod goes" ||
	bad "stuck run pod $sp: job '$ss'"
# After a restart of cnlabd, a run job's pod is found again only if cnlabd
# made it: its proof (an HMAC of its uid) is checked.  Job A's pod stays
# and is taken again; job B's is replaced, while cnlabd is away, by a
# tenant's pod of the same name, labels and copied proof: not taken.
aj=$("$cnlab" run --detach --gpu h100-10 --project vision -o json -- python3 a.py 2>/dev/null | jq -r '.id // empty')
ap=$(runpod "$aj")
bj=$("$cnlab" run --detach --gpu h100-10 --project vision -o json -- python3 b.py 2>/dev/null | jq -r '.id // empty')
bp=$(runpod "$bj")
an=$(jq -r .metadata.name <<<"$ap") bn=$(jq -r .metadata.name <<<"$bp")
k PATCH "/api/v1/namespaces/team-a/pods/$an/status" '{"status":{"phase":"Running"}}' application/merge-patch+json >/dev/null
[ "$(jq -r '.spec.automountServiceAccountToken' <<<"$ap")" = false ] && [ "$(jq -r '.metadata.annotations["cnlab.io/run-proof"] | length' <<<"$ap")" = 64 ] &&
	ok "a run pod has no ServiceAccount token, and carries cnlabd's proof" || bad "run pod A: $(jq -c '.metadata.annotations' <<<"$ap")"
kill "$d_pid"
wait "$d_pid"
k DELETE "/api/v1/namespaces/team-a/pods/$bn" >/dev/null
fake=$(jq -c '{apiVersion, kind, metadata: {name: .metadata.name, labels: .metadata.labels, annotations: .metadata.annotations}, spec: (.spec | del(.nodeName) | .containers[0].image = "evil:latest" | .containers[0].command = ["sh", "-c", "echo owned"])}' <<<"$bp")
k POST /api/v1/namespaces/team-a/pods "$fake" >/dev/null
start_d
echo "$CNLAB_ADMIN_PASSWORD" | "$cnlab" login --server "$url" --user admin --password-stdin >/dev/null 2>&1
bs=$(jstate "$bj" failed)
[ "$bs" = failed ] && "$cnlab" jobs show "$bj" --project vision -o json | jq -r .message | grep -q "did not" &&
	[ -z "$(bound_node team-a "$bn")" ] && grep -q "a pod named like a run's is not ours" "$tmp/err" &&
	ok "after a restart, a tenant's pod named like run B's, with its labels and a copied proof, is not taken: B fails, the pod is not bound" ||
	bad "squatted run pod: job B '$bs' $("$cnlab" jobs show "$bj" --project vision -o json | jq -r .message)"
k POST /test/log "{\"namespace\":\"team-a\",\"name\":\"$an\",\"text\":\"a done\\n\"}" >/dev/null
k PATCH "/api/v1/namespaces/team-a/pods/$an/status" \
	'{"status":{"phase":"Succeeded","initContainerStatuses":[{"name":"collect","state":{"terminated":{"exitCode":0}}}],"containerStatuses":[{"name":"job","state":{"terminated":{"exitCode":0}}}]}}' \
	application/merge-patch+json >/dev/null
as_=$(jstate "$aj" succeeded)
[ "$as_" = succeeded ] && "$cnlab" jobs logs "$aj" --project vision 2>/dev/null | grep -q "a done" &&
	[ "$(podget team-a "$an" | jq -r .code)" = 404 ] &&
	ok "after a restart, run A's own pod is taken again: its end ends the job (succeeded, its log kept), and the pod goes" ||
	bad "run A after a restart: '$as_' logs $("$cnlab" jobs logs "$aj" --project vision 2>&1 | head -3)"
k DELETE "/api/v1/namespaces/team-a/pods/$bn" >/dev/null
# Where cnlabd may not make pods (the namespace binds no
# cnlab:cnlabd-workloads), or the project has not let kube in: the job
# fails, saying so; nothing is made.
"$cnlab" project create lab >/dev/null && "$cnlab" project member add lab kube >/dev/null
"$cnlab" project create solo >/dev/null
"$cnlab" run --gpu h100-10 --project lab -- echo hi >"$tmp/lab.out" 2>&1
lrc=$?
lm=$("$cnlab" jobs list --project lab -o json | jq -r '.items[0].message // empty')
"$cnlab" run --gpu h100-10 --project solo -- echo hi >"$tmp/solo.out" 2>&1
src=$?
sm=$("$cnlab" jobs list --project solo -o json | jq -r '.items[0].message // empty')
[ $lrc != 0 ] && grep -q "cnlab:cnlabd-workloads" <<<"$lm" &&
	! grep -q '"path": "/api/v1/namespaces/team-c/pods", "status": 201' "$tmp/api.log" &&
	ok "a namespace that does not let cnlabd make pods: the run job fails naming the ClusterRole to bind ($lm)" ||
	bad "forbidden namespace: exit $lrc, message '$lm'"
[ $src != 0 ] && grep -q "service user kube" <<<"$sm" &&
	ok "a project that has not let kube in: its run job on Kubernetes fails, saying so" ||
	bad "project without kube: exit $src, message '$sm'"
echo "" | "$cnlab" login --server "$url" --user kube --password-stdin >/dev/null 2>&1 &&
	bad "the service user kube logs in with no password" ||
	ok "nobody logs in as the service user kube"
echo "$CNLAB_ADMIN_PASSWORD" | "$cnlab" login --server "$url" --user admin --password-stdin >/dev/null 2>&1

# --- a gang on Kubernetes nodes ---------------------------------------------
# `cnlab run --nodes 2`: a pod per member, each on its own node, told its
# rank and its peers' DNS names (a headless Service per member, owned by
# its pod); both end, the run ends with them and the Services go.  Made
# while the nodes are cordoned, so that Services can be planted first under
# the members' names: rank 0's looks like one of an earlier pod of the
# member (replaced), and in a second gang rank 1's selects other pods (the
# member fails, saying so).
gsvc() { # gsvc GANG RANK: its Service's name
	jq -rn --arg g "$1" --arg r "$2" '"cnlab-" + ($g | ascii_downcase | gsub("_"; "-")) + "-" + $r'
}
envof() { # envof POD_JSON NAME: a variable of its container
	jq -r --arg n "$2" '.spec.containers[0].env[] | select(.name == $n) | .value' <<<"$1"
}
nodes_do cordon
printf 'print("gang")\n' >"$tmp/g.py"
gl=$(cd "$tmp" && "$cnlab" run --detach --nodes 2 --gpu h100-25 --project vision -o json g.py 2>"$tmp/g.err" | jq -r '.id // empty')
gm=$("$cnlab" jobs show "$gl" --project vision -o json 2>/dev/null | jq -r '.gang.members // [] | join(" ")')
g0=$(gsvc "$gl" 0)
k POST /api/v1/namespaces/team-a/services "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"$g0\",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"old\",\"uid\":\"0000-old\"}]},\"spec\":{\"clusterIP\":\"None\",\"selector\":{\"cnlab.io/gang\":\"$gl\",\"cnlab.io/rank\":\"0\"}}}" >/dev/null
nodes_do undrain
read -r gj0 gj1 <<<"$gm"
gp0=$(runpod "$gj0") gp1=$(runpod "$gj1")
gs0=$(k GET "/api/v1/namespaces/team-a/services/$g0")
gs1=$(k GET "/api/v1/namespaces/team-a/services/$(gsvc "$gl" 1)")
ghosts="$g0.team-a.svc,$(gsvc "$gl" 1).team-a.svc"
gn="$(jq -r .spec.nodeName <<<"$gp0"),$(jq -r .spec.nodeName <<<"$gp1")"
[ -n "$gl" ] && [ "$gj0" = "$gl" ] && [ -n "$gj1" ] && [ "$(jq -r .spec.nodeName <<<"$gp0")" != "$(jq -r .spec.nodeName <<<"$gp1")" ] &&
	[ "$(envof "$gp0" CNLAB_RANK)/$(envof "$gp1" CNLAB_RANK)/$(envof "$gp1" CNLAB_WORLD_SIZE)" = 0/1/2 ] &&
	[ "$(envof "$gp1" CNLAB_GANG_ID)" = "$gl" ] && [ "$(envof "$gp0" CNLAB_GANG_NODES)" = "$gn" ] &&
	[ "$(envof "$gp0" CNLAB_GANG_HOSTS)" = "$ghosts" ] && [ "$(envof "$gp1" CNLAB_GANG_HOSTS)" = "$ghosts" ] &&
	[ "$(jq -r '.metadata.labels["cnlab.io/rank"]' <<<"$gp1")" = 1 ] &&
	[ "$(jq -r '.spec.clusterIP' <<<"$gs1")" = None ] && [ "$(jq -r '.spec.publishNotReadyAddresses' <<<"$gs1")" = true ] &&
	[ "$(jq -c '.spec.selector' <<<"$gs1")" = "{\"cnlab.io/gang\":\"$gl\",\"cnlab.io/rank\":\"1\"}" ] &&
	[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$gs1")" = "$(jq -r .metadata.uid <<<"$gp1")" ] &&
	[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$gs0")" = "$(jq -r .metadata.uid <<<"$gp0")" ] &&
	ok "cnlab run --nodes 2 on Kubernetes nodes: a pod per member on nodes $gn, each told CNLAB_RANK, CNLAB_WORLD_SIZE, CNLAB_GANG_ID, CNLAB_GANG_NODES and CNLAB_GANG_HOSTS ($ghosts), each member's headless Service owned by its pod (rank 0's, left by an earlier pod, replaced)" ||
	bad "gang '$gl' members '$gm': pods $(jq -c '{node: .spec.nodeName, labels: .metadata.labels, env: .spec.containers[0].env}' <<<"$gp0") $(jq -c '{node: .spec.nodeName, env: .spec.containers[0].env}' <<<"$gp1") services $(jq -c '{spec, o: .metadata.ownerReferences}' <<<"$gs0") $(jq -c '{spec, o: .metadata.ownerReferences}' <<<"$gs1") $(cat "$tmp/g.err") $(tail -3 "$tmp/err")"
for p_ in "$gp0" "$gp1"; do
	k PATCH "/api/v1/namespaces/team-a/pods/$(jq -r .metadata.name <<<"$p_")/status" \
		'{"status":{"phase":"Succeeded","initContainerStatuses":[{"name":"collect","state":{"terminated":{"exitCode":0}}}],"containerStatuses":[{"name":"job","state":{"terminated":{"exitCode":0}}}]}}' \
		application/merge-patch+json >/dev/null
done
gst=$(jstate "$gl" succeeded)
for _ in $(seq 100); do
	[ "$(k GET "/api/v1/namespaces/team-a/services/$g0" | jq -r .code)" = 404 ] && break
	sleep 0.05
done
[ "$gst" = succeeded ] && [ "$(jstate "$gj1" succeeded)" = succeeded ] &&
	[ "$(k GET "/api/v1/namespaces/team-a/services/$g0" | jq -r .code)" = 404 ] &&
	[ "$(k GET "/api/v1/namespaces/team-a/services/$(gsvc "$gl" 1)" | jq -r .code)" = 404 ] &&
	ok "both members' pods succeeded: the gang's jobs succeeded, its pods and Services are gone" ||
	bad "gang end: '$gst' $(k GET "/api/v1/namespaces/team-a/services/$g0" | jq -c '{code, name: .metadata.name}')"
nodes_do cordon
hl=$("$cnlab" run --detach --nodes 2 --gpu h100-25 --project vision -o json -- echo hi 2>/dev/null | jq -r '.id // empty')
k POST /api/v1/namespaces/team-a/services "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"$(gsvc "$hl" 1)\"},\"spec\":{\"clusterIP\":\"None\",\"selector\":{\"app\":\"mine\"}}}" >/dev/null
nodes_do undrain
hj1=$("$cnlab" jobs show "$hl" --project vision -o json 2>/dev/null | jq -r '.gang.members[1] // empty')
hs=$(jstate "$hj1" failed)
hm=$("$cnlab" jobs show "$hj1" --project vision -o json 2>/dev/null | jq -r '.message // empty')
[ -n "$hj1" ] && [ "$hs" = failed ] && grep -q "has a Service $(gsvc "$hl" 1) that CNLab did not make for this gang" <<<"$hm" &&
	[ "$(k GET "/api/v1/namespaces/team-a/services/$(gsvc "$hl" 1)" | jq -c .spec.selector)" = '{"app":"mine"}' ] &&
	ok "a Service planted under a gang member's name, selecting other pods: the member fails naming it, the Service is left as it was" ||
	bad "planted gang service: '$hl' member '$hj1' '$hs' '$hm' leader $("$cnlab" jobs show "$hl" --project vision -o json 2>/dev/null | jq -c '{state, message}')"
k DELETE "/api/v1/namespaces/team-a/services/$(gsvc "$hl" 1)" >/dev/null
# (A member's failure does not end the others, as on agents' nodes: the
# user's cancel of the leader does, and its pod goes.)
"$cnlab" jobs cancel "$hl" --project vision >/dev/null 2>&1
for _ in $(seq 200); do [ "$(runpods "$hl")" = 0 ] && break; sleep 0.05; done
[ "$(jstate "$hl" cancelled)" = cancelled ] && [ "$(runpods "$hl")" = 0 ] &&
	ok "the rest of that gang cancelled: its leader's pod is gone" ||
	bad "gang leader $hl after cancel: $("$cnlab" jobs show "$hl" --project vision -o json 2>/dev/null | jq -c '{state, message}') pods $(runpods "$hl")"

# --- TrainingJobs -----------------------------------------------------------
tj() { # tj NAME SPEC_JSON
	k POST /apis/cnlab.io/v1alpha1/namespaces/team-a/trainingjobs \
		"{\"apiVersion\":\"cnlab.io/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"$1\"},\"spec\":$2}" >/dev/null
}
tjget() { k GET "/apis/cnlab.io/v1alpha1/namespaces/team-a/trainingjobs/$1"; }
tj_phase() { # tj_phase NAME PHASE: waits for it, prints the last seen
	local ph=
	for _ in $(seq 200); do
		ph=$(tjget "$1" | jq -r '.status.phase // empty')
		[ "$ph" = "$2" ] && break
		sleep 0.05
	done
	echo "$ph"
}
tj train '{"command":"python train.py","image":"pytorch:2.4","gpu":"h100-25","priority":"high","runtimeSeconds":600,"cpuMilli":2000,"memMiB":8192}'
ph=$(tj_phase train Running)
t=$(tjget train)
tp=$(podget team-a train)
tc=$(k GET /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/train-gpu)
[ "$ph" = Running ] && [ "$(jq -r '.spec.schedulerName' <<<"$tp")" = cnlab ] &&
	[ "$(jq -r '.metadata.ownerReferences[0].kind' <<<"$tp")" = TrainingJob ] &&
	[ "$(jq -r '.metadata.annotations["cnlab.io/gpu-type"]' <<<"$tp")" = h100 ] &&
	[ "$(jq -c '.spec.containers[0].command' <<<"$tp")" = '["sh","-c","python train.py"]' ] &&
	[ "$(jq -r '.spec.devices.requests[0].exactly.capacity.requests.blocks' <<<"$tc")" = 25 ] &&
	[ "$(jq -r '.status.node' <<<"$t")" = "$(jq -r .spec.nodeName <<<"$tp")" ] &&
	[ "$(jq -r .status.jobID <<<"$t")" = "$(job_of team-a/train | jq -r .id)" ] &&
	[ "$(job_of team-a/train | jq -r .priority)" = high ] &&
	[ "$(jq -r '.status.conditions[] | select(.type == "Scheduled") | .status' <<<"$t")" = True ] &&
	ok "a TrainingJob becomes its pod (scheduler cnlab, owned by it) and a 25-block claim; its status: Running on $(jq -r .status.node <<<"$t"), its job's id" ||
	bad "TrainingJob train: phase '$ph' status $(jq -c .status <<<"$t") pod $(jq -c '{spec: .spec.schedulerName, ann: .metadata.annotations}' <<<"$tp")"
ended team-a train Failed 7
ph=$(tj_phase train Failed)
t=$(tjget train)
[ "$ph" = Failed ] && [ "$(jq -r .status.exitCode <<<"$t")" = 7 ] &&
	[ "$(jq -r '.status.conditions[] | select(.type == "Complete") | .status' <<<"$t")" = True ] &&
	[ "$(job_state team-a/train failed)" = failed ] &&
	ok "its pod failed with 7: the TrainingJob's status says Failed, exit code 7, Complete; its job failed" ||
	bad "TrainingJob end: $(jq -c .status <<<"$t")"
# A profile's shape, and gpuTypes narrowing an any- shape.
tj prof '{"command":"true","image":"busybox","profile":"h100-25pct"}'
tj typed '{"command":"true","image":"busybox","gpu":"any-10","gpuTypes":["h100"]}'
pp=$(tj_phase prof Running) tp_=$(tj_phase typed Running)
[ "$pp" = Running ] && [ "$(job_of team-a/prof | jq -r .gpu)" = h100-25 ] &&
	[ "$(k GET /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/prof-gpu | jq -r '.spec.devices.requests[0].exactly.capacity.requests.blocks')" = 25 ] &&
	ok "a TrainingJob naming a profile (h100-25pct) runs with its shape: 25 blocks" ||
	bad "TrainingJob with a profile: '$pp' $(tjget prof | jq -c .status) job $(job_of team-a/prof)"
[ "$tp_" = Running ] && [ "$(job_of team-a/typed | jq -c .gpu_types)" = '["h100"]' ] &&
	ok "a TrainingJob's gpuTypes narrow its job (gpu_types [\"h100\"])" ||
	bad "TrainingJob with gpuTypes: '$tp_' $(tjget typed | jq -c .status) job $(job_of team-a/typed)"
ended team-a prof Succeeded 0
ended team-a typed Succeeded 0
# A TrainingJob pre-empted: the same job waits again, in a new pod and
# claim; placed again, the TrainingJob runs again.
survivor=l2
[ "$gone" = l2 ] && survivor=l3
ended team-a "$survivor" Succeeded 0
job_state "team-a/$survivor" succeeded >/dev/null
# (The budgeted pod db's GPU is free in CNLab's books: its job was
# cancelled above.  Two GPUs not pre-emptible, one low: the critical one
# can only take the low one's.)
tj keep '{"command":"sleep 1000","image":"busybox","gpu":"h100-full","preemptible":false}'
tj keep2 '{"command":"sleep 1000","image":"busybox","gpu":"h100-full","preemptible":false}'
tj_phase keep2 Running >/dev/null
tj pre '{"command":"sleep 1000","image":"busybox","gpu":"h100-full","priority":"low"}'
tj_phase keep Running >/dev/null
tj_phase pre Running >/dev/null
pj=$(tjget pre | jq -r .status.jobID)
pu=$(podget team-a pre | jq -r .metadata.uid)
tj boss '{"command":"sleep 1000","image":"busybox","gpu":"h100-full","priority":"critical"}'
bp=$(tj_phase boss Running)
pm=
for _ in $(seq 200); do
	pm=$(tjget pre | jq -r '.status.message // empty')
	[ "$(podget team-a pre | jq -r .metadata.uid)" != "$pu" ] && grep -q "new pod is made" <<<"$pm" && break
	sleep 0.05
done
np_=$(podget team-a pre)
[ "$bp" = Running ] && [ -n "$pj" ] && [ "$(tjget pre | jq -r .status.phase)" = Pending ] &&
	[ "$(tjget pre | jq -r .status.jobID)" = "$pj" ] && grep -q "pre-empted" <<<"$pm" &&
	[ "$(jq -r .metadata.uid <<<"$np_")" != "$pu" ] && [ "$(jq -r .metadata.uid <<<"$np_")" != null ] &&
	[ -z "$(jq -r '.spec.nodeName // empty' <<<"$np_")" ] &&
	[ "$("$cnlab" jobs show "$pj" --project vision -o json | jq -r .state)" = pending ] &&
	[ "$(k GET /apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/pre-gpu | jq -r '.status.allocation // "none"')" = none ] &&
	ok "a low-priority TrainingJob pre-empted by a critical one: Pending again as the same job $pj ($pm), in a new pod and claim" ||
	bad "pre-empted TrainingJob: boss '$bp', pre $(tjget pre | jq -c .status), pod $(jq -c '{uid: .metadata.uid, node: .spec.nodeName}' <<<"$np_") (was $pu), job $("$cnlab" jobs show "$pj" --project vision -o json | jq -c '{state, preemptions}')"
ended team-a boss Succeeded 0
pp2=$(tj_phase pre Running)
[ "$pp2" = Running ] && [ "$(tjget pre | jq -r .status.jobID)" = "$pj" ] &&
	[ -n "$(bound_node team-a pre)" ] && [ "$("$cnlab" jobs show "$pj" --project vision -o json | jq -r .state)" = running ] &&
	ok "once the critical one ended, the pre-empted TrainingJob runs again: job $pj, its new pod bound" ||
	bad "pre-empted TrainingJob placed again: '$pp2' $(tjget pre | jq -c .status)"
ended team-a pre Succeeded 0
ended team-a keep Succeeded 0
ended team-a keep2 Succeeded 0
tj_phase pre Succeeded >/dev/null
tj stolen '{"command":"true","image":"busybox","gpu":"h100-10","project":"other"}'
ph=$(tj_phase stolen Failed)
[ "$ph" = Failed ] && tjget stolen | jq -r .status.message | grep -q "spec.project other" &&
	[ "$(podget team-a stolen | jq -r .code)" = 404 ] &&
	ok "a TrainingJob naming another project than its namespace's is refused (Failed), no pod made" ||
	bad "project theft: phase '$ph' $(tjget stolen | jq -c .status)"
tj gone '{"command":"sleep 1000","image":"busybox","gpu":"h100-10"}'
tj_phase gone Running >/dev/null
k DELETE /apis/cnlab.io/v1alpha1/namespaces/team-a/trainingjobs/gone >/dev/null
[ "$(job_state team-a/gone cancelled)" = cancelled ] && [ "$(podget team-a gone | jq -r .code)" = 404 ] &&
	ok "a TrainingJob deleted: its pod goes with it, its job is cancelled" ||
	bad "deleted TrainingJob: $(job_of team-a/gone)"

# --- NotebookServers ----------------------------------------------------------
k POST /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers \
	'{"apiVersion":"cnlab.io/v1alpha1","kind":"NotebookServer","metadata":{"name":"nb1"},"spec":{"image":"jupyter/base-notebook","profile":"h100-25pct","storageGB":20}}' >/dev/null
nbget() { k GET "/apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers/$1"; }
ph=
for _ in $(seq 200); do
	ph=$(nbget nb1 | jq -r '.status.phase // empty')
	[ "$ph" = Running ] && break
	sleep 0.05
done
nb=$(nbget nb1)
np=$(podget team-a nb1)
pvc=$(k GET /api/v1/namespaces/team-a/persistentvolumeclaims/nb1-workspace)
svc=$(k GET /api/v1/namespaces/team-a/services/nb1)
[ "$ph" = Running ] && [ "$(jq -r .status.url <<<"$nb")" = http://nb1.team-a.svc:8888 ] &&
	[ "$(jq -r .status.serverID <<<"$nb")" = "$(job_of team-a/nb1 | jq -r .id)" ] &&
	[ "$(jq -r .spec.resources.requests.storage <<<"$pvc")" = 20Gi ] &&
	[ "$(jq -r '.spec.volumes[0].persistentVolumeClaim.claimName' <<<"$np")" = nb1-workspace ] &&
	[ "$(jq -r '.spec.ports[0].port' <<<"$svc")" = 8888 ] &&
	[ "$(jq -r '.spec.selector["cnlab.io/owner"]' <<<"$svc")" = nb1 ] &&
	[ "$(job_of team-a/nb1 | jq -r '.gpu')" = h100-25 ] && [ "$(job_of team-a/nb1 | jq -r .preemptible)" = false ] &&
	[ "$(jq -r '.status.message // empty' <<<"$nb")" = "" ] &&
	[ "$(jq -c '.metadata.annotations["cnlab.io/jupyter-config"] | fromjson | [.ServerApp.shutdown_no_activity_timeout, .NotebookApp.shutdown_no_activity_timeout, .MappingKernelManager.cull_idle_timeout, .MappingKernelManager.cull_connected, .MappingKernelManager.cull_busy, .TerminalManager.cull_inactive_timeout]' <<<"$np")" = '[3600,3600,3600,false,false,3600]' ] &&
	[ "$(jq -r '.spec.volumes[] | select(.name == "jupyter-config") | .downwardAPI.items | map("\(.path)=\(.fieldRef.fieldPath)") | join(" ")' <<<"$np")" = "jupyter_server_config.json=metadata.annotations['cnlab.io/jupyter-config'] jupyter_notebook_config.json=metadata.annotations['cnlab.io/jupyter-config']" ] &&
	[ "$(jq -r '.spec.containers[0].volumeMounts[] | select(.name == "jupyter-config") | .mountPath' <<<"$np")" = /etc/cnlab/jupyter ] &&
	[ "$(jq -r '.spec.containers[0].env[] | select(.name == "JUPYTER_CONFIG_PATH") | .value' <<<"$np")" = /etc/cnlab/jupyter ] &&
	ok "a NotebookServer becomes its pod (profile h100-25pct: 25 blocks, not pre-emptible), a 20Gi workspace claim and a Service; Running at $(jq -r .status.url <<<"$nb"); its Jupyter configured to stop itself after 3600 s idle (the default)" ||
	bad "NotebookServer nb1: phase '$ph' status $(jq -c .status <<<"$nb") pvc $(jq -c .spec <<<"$pvc") job $(job_of team-a/nb1)"
k DELETE /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers/nb1 >/dev/null
[ "$(job_state team-a/nb1 cancelled)" = cancelled ] &&
	[ "$(k GET /api/v1/namespaces/team-a/persistentvolumeclaims/nb1-workspace | jq -r .code)" = 404 ] &&
	ok "a NotebookServer deleted: its pod, Service and workspace go, its job is cancelled" ||
	bad "deleted NotebookServer: $(job_of team-a/nb1)"
# idleTimeoutSeconds: the server's Jupyter stops itself (its container
# ends, the pod succeeds): the NotebookServer is Stopped, its slice free.
# 0: never (no configuration given).
k POST /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers \
	'{"apiVersion":"cnlab.io/v1alpha1","kind":"NotebookServer","metadata":{"name":"nb3"},"spec":{"image":"jupyter/base-notebook","profile":"h100-25pct","idleTimeoutSeconds":20}}' >/dev/null
k POST /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers \
	'{"apiVersion":"cnlab.io/v1alpha1","kind":"NotebookServer","metadata":{"name":"nb4"},"spec":{"image":"jupyter/base-notebook","profile":"h100-25pct","idleTimeoutSeconds":0}}' >/dev/null
for _ in $(seq 200); do
	[ "$(nbget nb3 | jq -r '.status.phase // empty')" = Running ] && [ "$(nbget nb4 | jq -r '.status.phase // empty')" = Running ] && break
	sleep 0.05
done
np3=$(podget team-a nb3)
np4=$(podget team-a nb4)
# What the kubelet projects from nb3's annotation, handed to a real
# Jupyter server (Debian's jupyter-server) with a real kernel started
# and left idle: it must cull the kernel and stop itself.  It runs while
# the rest of this test does; looked at at the end.
jd=$tmp/jupyter
mkdir -p "$jd/cfg" "$jd/home"
for f in jupyter_server_config.json jupyter_notebook_config.json; do
	jq -r '.metadata.annotations["cnlab.io/jupyter-config"]' <<<"$np3" >"$jd/cfg/$f"
done
jport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$jd/home" && HOME="$jd/home" JUPYTER_CONFIG_PATH="$jd/cfg" exec jupyter-server --allow-root --no-browser \
	--ip 127.0.0.1 --port "$jport" --ServerApp.token=t >"$jd/log" 2>&1) &
j_pid=$!
for _ in $(seq 300); do curl -fsS "http://127.0.0.1:$jport/api/status?token=t" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS -X POST "http://127.0.0.1:$jport/api/kernels?token=t" -H 'Content-Type: application/json' -d '{}' >"$jd/kernel.json" 2>&1
k PATCH /api/v1/namespaces/team-a/pods/nb3/status \
	'{"status":{"phase":"Succeeded","containerStatuses":[{"name":"main","state":{"terminated":{"exitCode":0}}}]}}' \
	application/merge-patch+json >/dev/null
ph=
for _ in $(seq 200); do
	ph=$(nbget nb3 | jq -r '.status.phase // empty')
	[ "$ph" = Stopped ] && break
	sleep 0.05
done
s3=$(job_state team-a/nb3 succeeded)
[ "$(jq -c '.metadata.annotations["cnlab.io/jupyter-config"] | fromjson | [.ServerApp.shutdown_no_activity_timeout, .MappingKernelManager.cull_idle_timeout, .MappingKernelManager.cull_interval, .TerminalManager.cull_inactive_timeout]' <<<"$np3")" = '[20,20,10,20]' ] &&
	[ "$(jq -r '.metadata.annotations["cnlab.io/jupyter-config"] // "none"' <<<"$np4")" = none ] &&
	! jq -e '.spec.volumes[] | select(.name == "jupyter-config")' <<<"$np4" >/dev/null &&
	[ "$ph" = Stopped ] && [ "$s3" = succeeded ] &&
	ok "idleTimeoutSeconds 20: its Jupyter told 20 s (kernels checked every 10 s); its server exiting stops the NotebookServer and ends its job; idleTimeoutSeconds 0: no such configuration" ||
	bad "idle: nb3 $(jq -c '.metadata.annotations' <<<"$np3") phase '$ph' job '$s3'; nb4 $(jq -c '.metadata.annotations' <<<"$np4")"
k DELETE /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers/nb3 >/dev/null
k DELETE /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers/nb4 >/dev/null
k POST /apis/cnlab.io/v1alpha1/namespaces/team-a/notebookservers \
	'{"apiVersion":"cnlab.io/v1alpha1","kind":"NotebookServer","metadata":{"name":"nb2"},"spec":{"image":"x","profile":"no-such"}}' >/dev/null
ph=
for _ in $(seq 200); do
	ph=$(nbget nb2 | jq -r '.status.phase // empty')
	[ "$ph" = Failed ] && break
	sleep 0.05
done
[ "$ph" = Failed ] && nbget nb2 | jq -r .status.message | grep -q "spec.profile no-such" &&
	ok "a NotebookServer of an unknown profile: Failed, saying so" || bad "nb2: $(nbget nb2 | jq -c .status)"

# --- cnlab server create on a Kubernetes node --------------------------------
# The seeds' command as typed, its server placed on a Kubernetes node: a pod
# of the project's namespace (JupyterLab where the image has it, else
# cnlab-notebook.py copied from the agent's image), its workspace a claim
# that outlives the pod, its token in a Secret of the pod's; the test plays
# the kubelet (runs cnlab-notebook.py as the pod spec says, on a loopback
# address that stands for the pod's) and the user opens it through
# cnlabd's proxy with the URL `cnlab server open` prints.
"$cnlab" server create --name knb --image tools:1 --profile h100-25pct --storage 5gb --idle 30m --project vision --no-wait \
	>"$tmp/knb.out" 2>&1
sid=$("$cnlab" server list --project vision -o json | jq -r '.items[] | select(.name == "knb") | .id')
kpod() { # kpod EPOCH: server $sid's pod of that epoch (JSON), waited for
	local o=
	for _ in $(seq 200); do
		o=$(k GET "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab" |
			jq -c --arg s "$sid" --arg e "$1" '[.items[] | select(.metadata.labels["cnlab.io/server"] == $s and .metadata.labels["cnlab.io/epoch"] == $e)][0] // empty')
		[ -n "$o" ] && [ "$(jq -r '.spec.nodeName // empty' <<<"$o")" != "" ] && break
		sleep 0.05
	done
	echo "$o"
}
sstate() { # sstate STATE: server knb's state, waited for
	local s=
	for _ in $(seq 200); do
		s=$("$cnlab" server list --project vision -o json 2>/dev/null | jq -r '.items[] | select(.name == "knb") | .state')
		[ "$s" = "$1" ] && break
		sleep 0.05
	done
	echo "$s"
}
sp=$(k GET "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab" | jq -c --arg s "$sid" '[.items[] | select(.metadata.labels["cnlab.io/server"] == $s)][0] // empty')
for _ in $(seq 200); do
	[ -n "$sp" ] && [ "$(jq -r '.spec.nodeName // empty' <<<"$sp")" != "" ] && break
	sleep 0.05
	sp=$(k GET "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab" | jq -c --arg s "$sid" '[.items[] | select(.metadata.labels["cnlab.io/server"] == $s)][0] // empty')
done
sname=$(jq -r .metadata.name <<<"$sp")
spvcname=cnlab-$(tr 'A-Z_' 'a-z-' <<<"$sid")-workspace
sep=$(jq -r '.metadata.labels["cnlab.io/epoch"]' <<<"$sp")
spvc=$(k GET "/api/v1/namespaces/team-a/persistentvolumeclaims/$spvcname")
ssec=$(k GET "/api/v1/namespaces/team-a/secrets/$sname-server")
stok=$(jq -r .data.token <<<"$ssec" | base64 -d)
senv() { jq -r --arg n "$1" '.spec.containers[0].env[] | select(.name == $n) | (.value // "\(.valueFrom.secretKeyRef.name)/\(.valueFrom.secretKeyRef.key)")' <<<"$sp"; }
[ -n "$sid" ] && [ "$(jq -r .metadata.namespace <<<"$sp")" = team-a ] &&
	[ "$(jq -r '.spec.volumes[] | select(.name == "workspace") | .persistentVolumeClaim.claimName' <<<"$sp")" = "$spvcname" ] &&
	[ "$(jq -r .spec.resources.requests.storage <<<"$spvc")" = 5Gi ] &&
	[ "$(jq -r '.metadata.labels["cnlab.io/server"]' <<<"$spvc")" = "$sid" ] &&
	[ "$(jq -r '.metadata.ownerReferences // [] | length' <<<"$spvc")" = 0 ] &&
	[ "$(senv CNLAB_BASE_URL) $(senv CNLAB_PORT) $(senv CNLAB_ADDRESS)" = "/s/$sid/ 8888 0.0.0.0" ] &&
	[ "$(senv CNLAB_SERVER_TOKEN)" = "$sname-server/token" ] && [ ${#stok} = 32 ] && ! grep -q "$stok" <<<"$sp" &&
	[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$ssec")" = "$(jq -r .metadata.uid <<<"$sp")" ] &&
	[ "$(jq -r '.spec.initContainers[] | select(.name == "notebook") | "\(.image) \(.command | join(" "))"' <<<"$sp")" = "$collect_image sh -c cp /usr/bin/cnlab-notebook.py /opt/cnlab/cnlab-notebook.py && if [ -d /usr/lib/cnlab/sshd ]; then cp -R /usr/lib/cnlab/sshd /opt/cnlab/sshd; fi" ] &&
	[ "$(jq -r '.spec.containers[0].ports[0].containerPort' <<<"$sp")" = 8888 ] &&
	[ "$(jq -c '.metadata.annotations["cnlab.io/jupyter-config"] | fromjson | .ServerApp.shutdown_no_activity_timeout' <<<"$sp")" = 1800 ] &&
	[ "$(jq -r '[.spec.initContainers[]?.name] | index("collect")' <<<"$sp")" = null ] &&
	[ "$(jq -r '.spec.resourceClaims[0].resourceClaimName' <<<"$sp")" = "$sname-gpu" ] &&
	ok "cnlab server create on a Kubernetes node: pod $sname in team-a (JupyterLab or cnlab-notebook.py from the agent's image, port 8888), its 5Gi workspace claim owned by nothing, its token in a Secret of the pod's, in no spec; idle 30m as its Jupyter's configuration" ||
	bad "server pod: sid '$sid' $(head -c 300 <<<"$sp") pvc $(jq -c .spec <<<"$spvc") $(cat "$tmp/knb.out")"
[ "$(sstate running)" != running ] &&
	ok "it is not running before the kubelet runs it with an address" || bad "server running before its pod"
# The kubelet: cnlab-notebook.py as the pod spec says, on the pod's address.
sip=127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).$((RANDOM % 250 + 2))
mkdir -p "$tmp/sws" && printf 'from the pod' >"$tmp/sws/hello.txt"
env -i PATH=/usr/bin:/bin CNLAB_SERVER_TOKEN="$stok" CNLAB_BASE_URL="$(senv CNLAB_BASE_URL)" \
	CNLAB_PORT=8888 CNLAB_ADDRESS="$sip" CNLAB_WORKSPACE="$tmp/sws" \
	python3 "$root/src/agent/notebook.py" 2>"$tmp/nb.err" &
nb_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/$sip/8888") 2>/dev/null && break; sleep 0.05; done
k PATCH "/api/v1/namespaces/team-a/pods/$sname/status" \
	"{\"status\":{\"phase\":\"Running\",\"podIP\":\"$sip\",\"containerStatuses\":[{\"name\":\"server\",\"state\":{\"running\":{}}}]}}" \
	application/merge-patch+json >/dev/null
srun=$(sstate running)
surl=$("$cnlab" server open knb --project vision 2>/dev/null | grep -o 'http[^ ]*' | head -1)
sbody=$(curl -sS "${surl%%\?*}hello.txt?${surl#*\?}" 2>&1)
snocred=$(curl -s -o /dev/null -w '%{http_code}' "${surl%%\?*}hello.txt")
[ "$srun" = running ] && [ "$sbody" = "from the pod" ] && [ "$snocred" = 401 ] &&
	ok "once its pod runs with an address the server is running; the URL cnlab server open prints reaches it through cnlabd's proxy (hello.txt: $sbody), none without a credential (401)" ||
	bad "server through the proxy: state '$srun' url '$surl' body '$sbody' nocred $snocred $(tail -2 "$tmp/nb.err")"
# cnlab server exec, unchanged: through the API server's exec of the pod's
# container "server" (a WebSocket of v5.channel.k8s.io; the stand-in runs
# the command as the kubelet would), as cnlabd's ServiceAccount, which the
# manifests' RBAC lets exec only in namespaces bound to its workloads role.
: >"$tmp/exec.out"
"$cnlab" server exec knb --project vision -- sh -c 'echo out; echo "$CNLAB_PORT"; echo err >&2; exit 3' >"$tmp/exec.out" 2>"$tmp/exec.err"
xrc=$?
"$cnlab" server exec knb --project vision -- no-such-command >"$tmp/exec2.err" 2>&1
xrc2=$?
"$cnlab" server exec knb --project vision -- true 2>/dev/null
xrc3=$?
xlog=$(grep "/pods/$sname/exec?" "$tmp/api.log" | head -1)
[ $xrc = 3 ] && [ "$(cat "$tmp/exec.out")" = "$(printf 'out\n8888')" ] && [ "$(cat "$tmp/exec.err")" = err ] &&
	[ $xrc2 = 126 ] && grep -q 'executable file not found' "$tmp/exec2.err" && [ $xrc3 = 0 ] &&
	[ "$(jq -r .method <<<"$xlog")" = GET ] && [ "$(jq -r .status <<<"$xlog")" = 101 ] &&
	[ "$(jq -r .user <<<"$xlog")" = "system:serviceaccount:cnlab:cnlabd" ] &&
	grep -q 'container=server&stdout=true&stderr=true&command=sh&command=-c&command=echo%20out' <<<"$xlog" &&
	ok "cnlab server exec in the pod: stdout, stderr and exit 3 as the command gave them; a command not found is exit 126 with the runtime's words; the API server's exec by cnlabd's ServiceAccount, under the manifests' RBAC" ||
	bad "server exec in a pod: rc $xrc/$xrc2/$xrc3 out '$(cat "$tmp/exec.out")' err '$(cat "$tmp/exec.err")' '$(cat "$tmp/exec2.err")' log $xlog $(grep -i exec "$tmp/err" | tail -3)"
# cnlab server ssh, unchanged: an sshd in inetd mode in the pod's
# container "server", started by cnlabd through the API server's exec
# with stdin; the session's host key, the owner's keys and its
# sshd_config go on the exec's stdin, never in its URL (the API server's
# audit log keeps URLs).  The stand-in runs it as the pod says: uid 1000,
# with the /etc/passwd of the server's Secret naming the owner (admin).
mkdir -p "$tmp/keys"
ssh-keygen -q -t ed25519 -N '' -C admin@laptop -f "$tmp/keys/admin"
ssh-keygen -q -t ed25519 -N '' -C other@laptop -f "$tmp/keys/other"
"$cnlab" ssh-key add "$tmp/keys/admin.pub" >/dev/null 2>&1
eval "$(ssh-agent -s)" >/dev/null
sshagent=$SSH_AGENT_PID
ssh-add -q "$tmp/keys/admin" 2>/dev/null
nexec=$(grep -c "/pods/$sname/exec?" "$tmp/api.log")
sgot=$(timeout 120 "$cnlab" server ssh knb --project vision -- 'id -un; id -u; echo "$CNLAB_PORT $IMAGE_ONLY"' 2>"$tmp/ssh.err" </dev/null)
src=$?
timeout 120 "$cnlab" server ssh knb --project vision -- 'exit 7' </dev/null >/dev/null 2>&1
src7=$?
sshlog=$(grep "/pods/$sname/exec?" "$tmp/api.log" | tail -n +$((nexec + 1)) | head -1)
[ $src = 0 ] && [ "$sgot" = "$(printf 'admin\n1000\n8888 from-the-image')" ] && [ $src7 = 7 ] &&
	[ "$(jq -r .status <<<"$sshlog")" = 101 ] && grep -q 'container=server&stdin=true&stdout=true' <<<"$sshlog" &&
	! grep -q "$(cut -d' ' -f2 "$tmp/keys/admin.pub")" "$tmp/api.log" && ! grep -q "PRIVATE KEY" "$tmp/api.log" &&
	ok "cnlab server ssh NAME -- CMD in the pod: logged in as its owner (uid 1000), the container's environment there (the pod's and the image's), exit 7 as the command gave it; the keys went on the exec's stdin, in no URL the API server logs" ||
	bad "server ssh in a pod: rc $src/$src7 got '$sgot' err $(tail -3 "$tmp/ssh.err") log $sshlog $(grep -i ssh "$tmp/err" | tail -3)"
# The attack: a key the platform does not hold for the owner is refused
# by the pod's sshd, and the command does not run.
"$cnlab" server ssh-config knb --project vision >"$tmp/knb.cfg" 2>/dev/null
ran=$(mktemp -u /tmp/cnlab-ssh-ran.XXXXXX)
SSH_AUTH_SOCK= timeout 120 ssh -F "$tmp/knb.cfg" -i "$tmp/keys/other" -o IdentitiesOnly=yes -o BatchMode=yes \
	cnlab-knb "touch $ran" </dev/null >/dev/null 2>"$tmp/ssh-att.err"
arc=$?
[ $arc = 255 ] && [ ! -e "$ran" ] && grep -q "Permission denied (publickey)" "$tmp/ssh-att.err" &&
	ok "ssh with a key that is not the owner's: Permission denied (publickey), nothing ran" ||
	bad "ssh with another key: rc $arc ran $([ -e "$ran" ] && echo yes) $(tail -2 "$tmp/ssh-att.err")"
rm -f "$ran"
# The session's script, as cnlabd sent it (taken from the exec's URL), run
# for real in a busybox chroot laid out as an image: the three files come
# off stdin exactly (a line count, the lines), into a folder of its own,
# 0700; what follows them is left for sshd; the folder goes when sshd
# ends, and sshd's exit is the session's.  An image without
# /usr/sbin/sshd is told so (exit 127), and its folder goes too.
sscript=$(python3 -c 'import sys, urllib.parse as u; print(u.parse_qs(u.urlparse(sys.argv[1]).query)["command"][2])' "$(jq -r .path <<<"$sshlog")")
ssh_run() { # ssh_run WITH_SSHD: the script in $tmp/sroot, stdin given
	local r=$tmp/sroot
	rm -rf "$r" && mkdir -p "$r/bin" "$r/tmp" "$r/out" "$r/usr/sbin" "$r/dev" &&
		mknod -m 666 "$r/dev/null" c 1 3 && chmod 1777 "$r/tmp" || return 1
	cp /bin/busybox "$r/bin/busybox"
	for a in sh cat mkdir rm mktemp ls stat env; do ln -s busybox "$r/bin/$a"; done
	local user=
	if [ "$1" = lent ]; then # the agent's image's, as the init container copies it
		"$root/scripts/sshd-bundle" "$r/opt/cnlab/sshd" || return 1
		mkdir -p "$r/etc" && printf 'tenant:x:1000:1000::/tmp:/bin/sh\n' >"$r/etc/passwd"
		user=--userspec=1000:1000
	fi
	if [ "$1" = yes ]; then
		printf '%s\n' '#!/bin/sh' 'd=${6#HostKey=}; d=${d%/host_key}' \
			'cat "$d/host_key" "$d/authorized_keys" >/out/files' \
			'stat -c %a "$d" >/out/mode' 'for a in "$@"; do printf "%s\\n" "$a"; done >/out/args' \
			'cat >/out/rest' 'exit 5' >"$r/usr/sbin/sshd"
		chmod 755 "$r/usr/sbin/sshd"
	fi
	# The container's environment: the image's and the pod's.
	env -i PATH=/bin HOME=/workspace CNLAB_PORT=8888 'Q=a"b' 'SP=a b' SSH_X=1 \
		"ML=$(printf 'a\nFAKE=b')" LD_PRELOAD=/no/such/libjemalloc.so \
		"$(command -v chroot)" $user "$r" /bin/sh -c 'cd /; exec /bin/sh -c "$1" cnlab-ssh' wrap "$sscript"
}
if [ -x /bin/busybox ]; then
	printf '2\n-----BEGIN KEY-----\n-----END KEY-----\n1\nssh-ed25519 AAAA x\n2\nPermitRootLogin no\nAllowAgentForwarding no\nSSH-2.0-client\nmore\n' | ssh_run yes 2>"$tmp/sroot.err"
	s1=$?
	sargs=$(cat "$tmp/sroot/out/args" 2>/dev/null)
	sleft=$(ls -A "$tmp/sroot/tmp")
	sfiles=$(cat "$tmp/sroot/out/files" 2>/dev/null)
	srest=$(cat "$tmp/sroot/out/rest" 2>/dev/null)
	smode=$(cat "$tmp/sroot/out/mode" 2>/dev/null)
	printf '2\nonly one\n' | ssh_run yes 2>/dev/null
	s3=$?
	sleft3=$(ls -A "$tmp/sroot/tmp")
	printf '1\nk\n1\nak\n1\nc\n' | ssh_run no 2>"$tmp/sroot.err"
	s2=$?
	# No sshd in the image, the agent's lent: it starts (and, given a
	# made-up host key, says so in its own words).
	printf '1\nnot a key\n1\nak\n1\nPermitRootLogin no\n' | ssh_run lent 2>"$tmp/slent.err" >/dev/null
	s4=$?
	sdir=$(sed -n 6p <<<"$sargs")
	sdir=${sdir#HostKey=}
	sdir=${sdir%/host_key}
	[ $s1 = 5 ] && [ "$sfiles" = "$(printf -- '-----BEGIN KEY-----\n-----END KEY-----\nssh-ed25519 AAAA x')" ] &&
		[ "$srest" = "$(printf 'SSH-2.0-client\nmore')" ] && [ "$smode" = 700 ] && [ -z "$sleft" ] &&
		[ "$(head -n -1 <<<"$sargs")" = "$(printf -- '-i\n-e\n-f\n/dev/null\n-o\nHostKey=%s/host_key\n-o\nAuthorizedKeysFile=%s/authorized_keys\n-o\nPermitRootLogin no\n-o\nAllowAgentForwarding no\n-o' "$sdir" "$sdir")" ] &&
		[ "$(tail -n 1 <<<"$sargs" | grep -o '"[^"]*"' | sort | tr '\n' ' ')" = '"CNLAB_PORT=8888" "LD_PRELOAD=/no/such/libjemalloc.so" "PATH=/bin" "SP=a b" ' ] &&
		[ "$(tail -n 1 <<<"$sargs" | cut -c1-8)" = 'SetEnv "' ] &&
		[ $s2 = 127 ] && grep -q "no sshd in this server: its image has no /usr/sbin/sshd" "$tmp/sroot.err" &&
		[ -z "$(ls -A "$tmp/sroot/tmp")" ] && [ $s3 = 126 ] && [ -z "$sleft3" ] &&
		[ $s4 != 127 ] && grep -q "no hostkeys available" "$tmp/slent.err" &&
		ok "the session's script, run: the keys off stdin exactly into a 0700 folder, sshd's options each a -o (no config file the server's user could change), SetEnv the container's own environment less sshd's variables, what it cannot quote and the lines of a value of several, the rest left for sshd, the folder gone after; input that ends early is exit 126, its folder gone; an image without sshd runs the one the agent's image lends (its own loader and libraries, not the image's LD_PRELOAD), and with neither is told so (exit 127)" ||
		bad "ssh script: exit $s1/$s2/$s3/$s4 lent '$(tail -2 "$tmp/slent.err")' left3 '$sleft3' args '$sargs' left '$sleft' files '$sfiles' rest '$srest' mode '$smode' $(cat "$tmp/sroot.err")"
else
	bad "the session's script is run in a chroot with busybox (/bin/busybox)"
fi
# The attack: a pod that does not carry cnlabd's proof for this server
# (here its proof changed; a tenant's pod put in its place has another
# uid too) is never exec'd into: the command does not run.
sproof=$(jq -r '.metadata.annotations["cnlab.io/run-proof"]' <<<"$(k GET "/api/v1/namespaces/team-a/pods/$sname")")
k PATCH "/api/v1/namespaces/team-a/pods/$sname" '{"metadata":{"annotations":{"cnlab.io/run-proof":"'"$(printf '0%.0s' $(seq 64))"'"}}}' \
	application/merge-patch+json >/dev/null
nexec=$(grep -c "/pods/$sname/exec?" "$tmp/api.log")
xatt=$("$cnlab" server exec knb --project vision -- touch "$tmp/exec-ran" 2>&1)
xrc4=$?
satt=$(timeout 120 "$cnlab" server ssh knb --project vision -- touch "$tmp/exec-ran" 2>&1 </dev/null)
srcatt=$?
k PATCH "/api/v1/namespaces/team-a/pods/$sname" '{"metadata":{"annotations":{"cnlab.io/run-proof":"'"$sproof"'"}}}' \
	application/merge-patch+json >/dev/null
[ ${#sproof} = 64 ] && [ $xrc4 = 126 ] && [ ! -e "$tmp/exec-ran" ] && grep -q "not the one CNLab made for it" <<<"$xatt" &&
	[ "$(grep -c "/pods/$sname/exec?" "$tmp/api.log")" = "$nexec" ] &&
	[ $srcatt != 0 ] && grep -q "not the one CNLab made for it" <<<"$satt" &&
	ok "a server pod without cnlabd's proof is neither exec'd nor ssh'd into (exit 126; ssh told why; no exec asked of the API server)" ||
	bad "exec into a pod without the proof: rc $xrc4 '$xatt' ssh rc $srcatt '$satt' proof '$sproof' ran $([ -e "$tmp/exec-ran" ] && echo yes)"
# Stopped: the pod goes (its claim and Secret with it), the workspace stays;
# started again: a new pod of a new epoch mounts the same workspace.
"$cnlab" server stop knb --project vision >/dev/null 2>&1 &
stop_pid=$!
for _ in $(seq 200); do [ "$(podget team-a "$sname" | jq -r .code)" = 404 ] && break; sleep 0.05; done
kill $nb_pid 2>/dev/null
wait $nb_pid 2>/dev/null
wait $stop_pid
sst=$(sstate stopped)
"$cnlab" server start knb --project vision --no-wait >/dev/null 2>&1
sp2=$(kpod $((sep + 1)))
[ "$sst" = stopped ] && [ "$(podget team-a "$sname" | jq -r .code)" = 404 ] &&
	[ "$(k GET "/api/v1/namespaces/team-a/persistentvolumeclaims/$spvcname" | jq -r .metadata.uid)" = "$(jq -r .metadata.uid <<<"$spvc")" ] &&
	[ "$(jq -r '.spec.volumes[] | select(.name == "workspace") | .persistentVolumeClaim.claimName' <<<"$sp2")" = "$spvcname" ] &&
	ok "server stop deletes its pod and keeps its workspace claim; server start makes a pod of epoch $((sep + 1)) on the same claim" ||
	bad "stop/start: state '$sst' old pod $(podget team-a "$sname" | jq -r .code) new $(head -c 200 <<<"$sp2")"
# Deleted: its workspace claim goes too (as an agent's node drops a deleted
# server's workspace), once its pod has gone.
"$cnlab" server stop knb --project vision >/dev/null 2>&1
for _ in $(seq 200); do [ "$(kpod $((sep + 1)) | jq -r '.metadata.name // empty')" = "" ] && break; sleep 0.05; done
spvc_before=$(k GET "/api/v1/namespaces/team-a/persistentvolumeclaims/$spvcname" | jq -r '.code // 200')
sdel=$("$cnlab" server delete knb --project vision 2>&1)
spvc_code=
for _ in $(seq 200); do
	spvc_code=$(k GET "/api/v1/namespaces/team-a/persistentvolumeclaims/$spvcname" | jq -r '.code // 200')
	[ "$spvc_code" = 404 ] && break
	sleep 0.05
done
[ "$spvc_before" = 200 ] && [ "$spvc_code" = 404 ] && ok "server delete: its workspace claim is deleted" ||
	bad "deleted server's claim: $spvc_code ($sdel) $(grep workspace "$tmp/err" | tail -2)"

# --- the watch, the objects ------------------------------------------------
grep -q '"path": "/api/v1/pods?fieldSelector=spec.schedulerName%3Dcnlab&watch=1.*"status": 410' "$tmp/api.log" &&
	ok "the first pod watch answered 410 Gone: listed again, and every pod above was seen" ||
	bad "no 410 watch in the log"
n=0
while IFS= read -r line; do
	b=$(jq -c '.body // empty' <<<"$line")
	[ -n "$b" ] && [ "$(jq -r '.kind // empty' <<<"$b")" != "" ] || continue
	n=$((n + 1))
	echo "$b" >"$tmp/sent-$n.json"
done < <(jq -c 'select(.method == "PUT" or (.method == "POST" and (.path | test("binding|eviction|pods$|resourceclaims$|services$|persistentvolumeclaims$|configmaps$|secrets$|tokenreviews$"))))' "$tmp/api.log")
[ "$n" -ge 8 ] && node "$k8s/check.mjs" objects "$tmp"/sent-*.json >"$tmp/check.out" 2>&1 &&
	ok "the $n claim statuses, Bindings, Evictions, pods, claims, Services and PVCs sent are valid by the Kubernetes schemas" ||
	bad "objects sent: $n; $(grep FAIL "$tmp/check.out" | head -3)"
# Tenant code never runs as root: every pod cnlabd made (jobs, servers,
# gang members, the operator's) meets Pod Security's "restricted"
# profile, so a namespace may enforce it; the check refuses the same pods
# made to run as root, or with the collector's old DAC_OVERRIDE.
pods=()
while IFS= read -r b; do
	pods+=("$tmp/pod-${#pods[@]}.json")
	echo "$b" >"${pods[-1]}"
done < <(jq -c 'select(.method == "POST" and .user != "admin" and (.path | test("/pods$"))) | .body' "$tmp/api.log")
jq '.spec.securityContext.runAsUser = 0 | .spec.securityContext.runAsNonRoot = false' "${pods[0]}" >"$tmp/root-pod.json"
jq '.spec.containers[0].securityContext.capabilities.add = ["DAC_OVERRIDE"]' "${pods[0]}" >"$tmp/cap-pod.json"
ncol=$(cat "${pods[@]}" | jq -s '[.[] | .spec.initContainers[]? | select(.name == "collect")] | length')
[ ${#pods[@]} -ge 4 ] && [ "$ncol" -ge 1 ] && node "$k8s/check.mjs" restricted "${pods[@]}" >"$tmp/restricted.out" 2>&1 &&
	node "$k8s/check.mjs" restricted-refused "$tmp/root-pod.json" "$tmp/cap-pod.json" >>"$tmp/restricted.out" 2>&1 &&
	[ "$(jq -r '.spec.securityContext.runAsUser' "${pods[0]}")" = 1000 ] &&
	[ "$(cat "${pods[@]}" | jq -s '[.[] | select(.spec.hostUsers != false)] | length')" = 0 ] &&
	ok "the ${#pods[@]} pods cnlabd made (their $ncol collectors too) run as uid 1000, never root, each in a user namespace of its own (hostUsers false), and meet Pod Security \"restricted\"; a pod as root, or adding a capability, is refused by the same check" ||
	bad "tenant pods not restricted: ${#pods[@]} pods, $ncol collectors; $(grep FAIL "$tmp/restricted.out" | head -3)"

kill "$d_pid"
wait "$d_pid"
rc=$?
d_pid=""
[ $rc = 0 ] && ok "cnlabd stops cleanly (SIGTERM), its watch ended" || bad "cnlabd exit $rc"

# A Kubernetes node deleted (with its slices): its heartbeats stop and
# CNLab takes it for lost (node_lost_timeout, 3 s here); back, it is up.
extra="--node-lost-timeout 3s" start_d
echo "$CNLAB_ADMIN_PASSWORD" | "$cnlab" login --server "$url" --user admin --password-stdin >/dev/null 2>&1
n3node=$(jq -c '.nodes[] | select(.metadata.name == "node2") | .metadata.name = "node3" | .metadata.uid = "7f1e0c2a-1111-4000-8000-000000000003"' "$k8s/api/sched_state.json")
n3slice=$(jq -c '.slices[] | select(.spec.nodeName == "node2") | .metadata.name = "node3-gpu-cnlab-io-0" | .spec.nodeName = "node3" | .spec.pool.name = "node3" | .spec.devices[0].attributes.uuid.string = "GPU-33333333-0000-4000-8000-000000000000"' "$k8s/api/sched_state.json")
k POST /test/add "{\"nodes\":[$n3node],\"slices\":[$n3slice]}" >/dev/null
nstate() { "$cnlab" node list -o json 2>/dev/null | jq -r --arg n "$1" '.items[] | select(.name == $n) | .state'; }
for _ in $(seq 200); do [ "$(nstate node3)" = up ] && break; sleep 0.05; done
s3a=$(nstate node3)
k POST /test/remove '{"nodes":["node3"]}' >/dev/null
for _ in $(seq 300); do [ "$(nstate node3)" = lost ] && break; sleep 0.05; done
s3b=$(nstate node3) s2=$(nstate node2)
k POST /test/add "{\"nodes\":[$n3node],\"slices\":[$n3slice]}" >/dev/null
for _ in $(seq 300); do [ "$(nstate node3)" = up ] && break; sleep 0.05; done
s3c=$(nstate node3)
[ "$s3a" = up ] && [ "$s3b" = lost ] && [ "$s2" = up ] && [ "$s3c" = up ] &&
	grep -q "a node is gone from Kubernetes.*node=node3" "$tmp/err" &&
	ok "a Kubernetes node deleted: CNLab takes it for lost (its heartbeats stop), the others stay up; back, it is up again" ||
	bad "node3: up '$s3a', after its deletion '$s3b' (node2 '$s2'), back '$s3c'"
kill "$d_pid"
wait "$d_pid"
d_pid=""
# With the API server gone (and pods it knew), cnlabd still stops: the
# worker looks at the stop between calls, and its calls do not wait out
# long retries.
start_d
sleep 2
kill "$api_pid"
wait "$api_pid" 2>/dev/null
api_pid=""
sleep 3
kill "$d_pid"
wait "$d_pid"
rc=$?
d_pid=""
[ $rc = 0 ] && ok "with the API server gone, cnlabd still stops cleanly" || bad "cnlabd exit $rc with the API server gone"
# Least privilege that works: cnlabd did all of the above with what
# deploy/k8s's RBAC grants it, refused only where no RoleBinding lets it
# (team-c), and it asked for no Secret's value.
denied=$(jq -r 'select(.user | startswith("system:serviceaccount:")) | select(.status == 403) | "\(.method) \(.path)"' "$tmp/api.log" |
	grep -v ' /api/v1/namespaces/team-c/' | sort | uniq -c)
read_secret=$(jq -r 'select(.user | startswith("system:serviceaccount:")) | select(.method == "GET" and (.path | test("/secrets"))) | .path' "$tmp/api.log")
[ "$(jq -r 'select(.user | startswith("system:serviceaccount:")) | .path' "$tmp/api.log" | wc -l)" -gt 100 ] &&
	[ -z "$denied" ] && [ -z "$read_secret" ] &&
	ok "every call of cnlabd's was within the RBAC of deploy/k8s (the stand-in enforces it), none refused outside team-c, no Secret read" ||
	bad "RBAC: refused $denied; secrets read: $read_secret"
# The real Jupyter server given nb3's configuration (started above).
wait "$j_pid"
jrc=$?
j_pid=""
kid=$(jq -r '.id // empty' "$jd/kernel.json" 2>/dev/null)
[ $jrc = 0 ] && [ -n "$kid" ] && grep -q "Culling.*$kid\|$kid.*cull" "$jd/log" &&
	grep -q "shutting down" "$jd/log" &&
	ok "a real Jupyter server given what nb3's pod is given: its idle kernel culled after 20 s, then it stopped itself (exit 0), as nb3's container would" ||
	bad "jupyter: exit $jrc, kernel '$kid' $(head -c 300 "$jd/kernel.json"), log $(tail -5 "$jd/log")"
[ $fails = 0 ] || exit 1
