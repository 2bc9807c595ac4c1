#!/usr/bin/env bash
# placement.sh - the scheduler's choices end to end: the real cnlab CLI
# against a real cnlabd with two real agents (fake GPU pools, real
# processes in cgroups) that differ in GPU type, zone, rack and datasets:
#   - cnlab run --nodes 2 runs a gang on two different nodes; each member
#     sees CNLAB_RANK, CNLAB_WORLD_SIZE, CNLAB_GANG_ID and CNLAB_GANG_NODES;
#     rank 0's output streams, every member's artifacts come back, and the
#     exit code is the first non-zero one (rank 1's here); a gang of three
#     waits, saying why, and cancelling a member cancels it;
#   - --dataset picks the node that holds the dataset over the node packing
#     prefers (a control job without it goes there), and jobs show says
#     why in "Why:" lines;
#   - --nodelist and --exclude hold a job to nodes (over packing's pick);
#     one whose nodes cannot run it, or naming no node, is refused;
#   - --prefer and --avoid place a job on nodes first or last (over
#     packing's pick), and a preference that cannot be met is not a limit;
#   - --gpu-type restricts the GPU type; --no-preempt, --cpu, --memory
#     reach the job; bad values exit 2 naming the flag;
#   - an agent restarted with other datasets relabels its node; a bad
#     datasets setting is refused.
# Waits poll with generous bounds so a hang fails instead of blocking; no
# assertion depends on how fast the machine is.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
tmp=$(mktemp -d)
run=pl$$ # agent names, and so cgroup roots, unique to this run
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.5
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
wait_for() { # wait_for SECONDS CMD...: poll CMD every 0.2 s
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

export CNLAB_JWT_SECRET=placement-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
# The test opens its jobs' gate through a node folder every container
# mounts at /shared.
shared=$tmp/shared
mkdir -p "$shared"
chmod 755 "$tmp"
chmod 1777 "$shared"
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
mkdir -p "$HOME"
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root \
	--cycle-interval 200ms >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
wait_for 10 grep -q '^listening on' "$tmp/cnlabd.out" || {
	cat "$tmp/cnlabd.err"
	exit 1
}
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port

api() { # api METHOD PATH TOKEN [BODY]
	curl -sS -X "$1" -H "Authorization: Bearer $3" ${4:+-d "$4"} "$base$2"
}
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }

root=$(login root admin-password-1)
sys=$(api GET /v1/projects "$root" | jq -r '.items[] | select(.name=="system") | .id')
# Each agent joins with a one-time join token made for its node name.
jointok() { api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$1\"}" | jq -r .token; }
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)

# start_agent NAME POOL FLAGS...: a cnlab-agent on a fake pool.
start_agent() {
	local name=$1 pool=$2 before
	shift 2
	before=$(grep -c 'msg=registered' "$tmp/agent-$name.err" 2>/dev/null)
	CNLAB_AGENT_TOKEN=$(jointok "$run-$name") "$agent" --server "$base" --name "$run-$name" \
		--gpus "$pool" --work-dir "$tmp/agent-$name" --cpu-milli 8000 \
		--mem-mib 16384 --mounts "$shared:/shared" "$@" >>"$tmp/agent-$name.out" 2>>"$tmp/agent-$name.err" &
	pids+=($!)
	eval "pid_$name=$!"
	wait_for 10 sh -c "[ \$(grep -c 'msg=registered' '$tmp/agent-$name.err') -gt ${before:-0} ]"
}
start_agent a fake:1xH100-80GB-SXM --zone za --rack r1 --datasets imagenet,coco ||
	bad "agent a: $(cat "$tmp/agent-a.err")"
start_agent b fake:1xA100-80GB --zone=zb --rack=r2 ||
	bad "agent b: $(cat "$tmp/agent-b.err")"

echo ana-password-1 | "$cnlab" login --server "$base" --user ana --password-stdin >/dev/null 2>&1 ||
	bad "cnlab login"
state() { api GET "/v1/jobs/$1" "$ana" | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
cd "$tmp" || exit 1

# --- a gang of two: one node each, its place in the environment --------
cat >gang.sh <<'SH'
echo "rank=$CNLAB_RANK world=$CNLAB_WORLD_SIZE nodes=$CNLAB_GANG_NODES gang=$CNLAB_GANG_ID"
echo "rank=$CNLAB_RANK" >"$CNLAB_ARTIFACTS_DIR/rank.txt"
exit $((CNLAB_RANK * 3))
SH
"$cnlab" run --nodes 2 --gpu any-10 gang.sh >gang.out 2>gang.err
rc=$?
[ $rc = 3 ] && ok "gang exit code is rank 1's (3)" || bad "gang exit code $rc: $(cat gang.err)"
leader=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' gang.err)
line=$(grep '^rank=' gang.out)
nodes=$(sed -n 's/.* nodes=\([^ ]*\) .*/\1/p' <<<"$line")
n0=${nodes%%,*} n1=${nodes#*,}
[[ "$line" == "rank=0 world=2 nodes="*" gang=$leader" ]] &&
	ok "rank 0 streamed, with its place in the gang" || bad "rank 0 output: $line / $(cat gang.err)"
[ -n "$n0" ] && [ -n "$n1" ] && [ "$n0" != "$n1" ] &&
	[[ " $run-a $run-b " == *" $n0 "* && " $run-a $run-b " == *" $n1 "* ]] &&
	ok "members on two different nodes: $nodes" || bad "gang nodes: $nodes"
m1=$(api GET "/v1/jobs/$leader" "$ana" | jq -r '.gang.members[1]')
l1=$(api GET "/v1/jobs/$m1/logs?limit=100" "$ana" | jq -r '.items[].data')
[[ "$l1" == "rank=1 world=2 nodes=$nodes gang=$leader"* ]] &&
	ok "rank 1 saw the same gang, as rank 1" || bad "rank 1 output: $l1"
[ "$(cat "artifacts/$leader/rank.txt" 2>/dev/null)" = rank=0 ] &&
	[ "$(cat "artifacts/$leader/rank-1/rank.txt" 2>/dev/null)" = rank=1 ] &&
	ok "every member's artifacts came back" || bad "gang artifacts: $(find artifacts)"
show=$("$cnlab" jobs show "$m1")
grep -q "^Gang:      $leader, rank 1 of 2" <<<"$show" &&
	grep -q "^Why:       gang of 2, one node each: rank 0 on $n0 " <<<"$show" &&
	ok "jobs show of a member shows the gang" || bad "jobs show gang: $show"

# A gang of three can never have a node each on two nodes: refused at
# submission (422), saying why, and nothing is queued.
echo 'echo hello' >hello.sh
n_before=$(api GET "/v1/projects/$proj/jobs?limit=1000" "$ana" | jq '.items | length')
out=$("$cnlab" run --nodes 3 --gpu any-10 --detach hello.sh 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "a gang of 3 nodes asked, only 2 nodes of that kind are registered" <<<"$out" &&
	ok "a gang wider than the nodes is refused at submission, saying why" || bad "gang of 3: rc=$rc $out"
[ "$(api GET "/v1/projects/$proj/jobs?limit=1000" "$ana" | jq '.items | length')" = "$n_before" ] &&
	ok "... and nothing was queued" || bad "gang of 3 queued something"
# With one of the two nodes cordoned (it still counts: it may come back)
# a gang of two waits, says why, and cancelling one member cancels it
# whole.
api PATCH "/v1/nodes/$run-b" "$root" '{"state":"cordoned"}' >/dev/null
w3=$("$cnlab" run --nodes 2 --gpu any-10 --detach hello.sh 2>/dev/null)
waiting() { "$cnlab" jobs show "$w3" | grep -q "^Why:       waiting: gang members missing"; }
wait_for 30 waiting && ok "a gang that cannot be placed now says why it waits" ||
	bad "waiting gang: $("$cnlab" jobs show "$w3")"
w3m=$(api GET "/v1/jobs/$w3" "$ana" | jq -r '.gang.members[1]')
"$cnlab" jobs cancel "$w3m" >/dev/null
[ "$(api GET "/v1/projects/$proj/jobs?limit=1000" "$ana" |
	jq -r "[.items[] | select(.gang.id==\"$w3\") | .state] | join(\" \")")" = \
	"cancelled cancelled" ] && ok "cancelling a member cancels the gang" ||
	bad "gang cancel: $(api GET "/v1/jobs/$w3" "$ana")"
api PATCH "/v1/nodes/$run-b" "$root" '{"state":"up"}' >/dev/null

# --- the dataset wins over packing; jobs show says why --------------------
cat >wait.sh <<SH
while [ ! -e /shared/go ]; do sleep 0.1; done
SH
# Busy B, the node packing prefers; a control job follows the packing.
filler=$("$cnlab" run --gpu a100-5 --detach wait.sh 2>/dev/null)
wait_for 30 is_state "$filler" running || bad "filler: $(state "$filler")"
"$cnlab" run --gpu any-5 hello.sh >ctl.out 2>ctl.err
grep -q "✓ Running on $run-b" ctl.err && ok "without a dataset, packing picks the busy node" ||
	bad "control: $(cat ctl.err)"
"$cnlab" run --gpu any-5 --dataset coco hello.sh >ds.out 2>ds.err
grep -q "✓ Running on $run-a" ds.err && ok "--dataset coco runs where coco is" ||
	bad "dataset: $(cat ds.err)"
ds=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' ds.err)
show=$("$cnlab" jobs show "$ds")
grep -q "^Dataset:   coco" <<<"$show" &&
	grep -q "^Why:       on $run-a (H100-80GB-SXM, zone za, rack r1): started" <<<"$show" &&
	grep -q "^Why:       dataset coco is on $run-a" <<<"$show" &&
	ok "jobs show explains the placement" || bad "jobs show: $show"
! grep -q "GPU type" <<<"$show" && ok "no claim about GPU types not asked for" ||
	bad "jobs show claims: $show"

# --- GPU types, pre-emption, CPU and memory -------------------------------
"$cnlab" run --gpu any-5 --gpu-type a100 --no-preempt --cpu 0.5 \
	--memory 512Mi hello.sh >ty.out 2>ty.err
grep -q "✓ Running on $run-b" ty.err && ok "--gpu-type a100 runs on the A100" || bad "gpu-type: $(cat ty.err)"
ty=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' ty.err)
j=$("$cnlab" jobs show "$ty" -o json)
[ "$(jq -c '[.gpu_types, .preemptible, .cpu_milli, .mem_mib]' <<<"$j")" = '[["a100"],false,500,512]' ] &&
	ok "flags reached the job" || bad "job fields: $j"
show=$("$cnlab" jobs show "$ty")
grep -q "^Why:       GPU type A100-80GB is one of those allowed: a100" <<<"$show" &&
	grep -q "^Preempt:   never" <<<"$show" && ok "jobs show: the allowed type" || bad "jobs show types: $show"
# --- node lists: the only nodes, the nodes never ---------------------------
# Packing prefers the busy node b (the control above): a nodelist or an
# exclude sends the job to a.
"$cnlab" run --gpu any-5 --nodelist "$run-a" hello.sh >nl.out 2>nl.err
grep -q "✓ Running on $run-a" nl.err && ok "--nodelist $run-a runs there, not where packing would" ||
	bad "nodelist: $(cat nl.err)"
nl=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' nl.err)
"$cnlab" jobs show "$nl" | grep -q "^Nodes:     only $run-a$" &&
	[ "$("$cnlab" jobs show "$nl" -o json | jq -c .nodelist)" = "[\"$run-a\"]" ] &&
	ok "jobs show: the nodes it may use" || bad "jobs show nodelist: $("$cnlab" jobs show "$nl")"
"$cnlab" run --gpu any-5 --exclude "$run-b" hello.sh >ex.out 2>ex.err
grep -q "✓ Running on $run-a" ex.err && ok "--exclude $run-b runs elsewhere" || bad "exclude: $(cat ex.err)"
# Only node b, whose GPU is an A100, for an H100 slice: refused, saying why.
out=$("$cnlab" run --gpu h100-5 --nodelist "$run-b" hello.sh 2>&1)
rc=$?
[ $rc != 0 ] && grep -q "nodes it may use" <<<"$out" &&
	ok "a nodelist whose nodes cannot run the shape is refused ($out)" || bad "nodelist infeasible: rc $rc: $out"
out=$("$cnlab" run --gpu any-5 --nodelist nosuch-node hello.sh 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'nodelist\[0\].*nosuch-node.*not a registered node' <<<"$out" &&
	ok "a nodelist naming no node is refused, naming it" || bad "unknown node: rc $rc: $out"
# --- preferences: the nodes first, the nodes last --------------------------
# Packing would pick b: a preference for a, or for avoiding b, sends the
# job to a; a preference for b that b cannot meet (an H100 slice, b's GPU
# an A100) is only a preference: the job runs on a, where --nodelist b
# was refused above.
"$cnlab" run --gpu any-5 --prefer "$run-a" hello.sh >pf.out 2>pf.err
grep -q "✓ Running on $run-a" pf.err && ok "--prefer $run-a runs there, not where packing would" ||
	bad "prefer: $(cat pf.err)"
pf=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' pf.err)
"$cnlab" jobs show "$pf" | grep -q "^Preferred: $run-a$" &&
	"$cnlab" jobs show "$pf" | grep -q "^Why:       $run-a is a node it prefers$" &&
	[ "$("$cnlab" jobs show "$pf" -o json | jq -c .prefer)" = "[\"$run-a\"]" ] &&
	ok "jobs show: the nodes it prefers" || bad "jobs show prefer: $("$cnlab" jobs show "$pf")"
"$cnlab" run --gpu any-5 --avoid "$run-b" hello.sh >av.out 2>av.err
grep -q "✓ Running on $run-a" av.err && ok "--avoid $run-b runs elsewhere" || bad "avoid: $(cat av.err)"
"$cnlab" jobs show "$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' av.err)" | grep -q "^Avoided:   $run-b$" ||
	bad "jobs show avoid: $(cat av.err)"
"$cnlab" run --gpu h100-5 --prefer "$run-b" hello.sh >pb.out 2>pb.err
grep -q "✓ Running on $run-a" pb.err &&
	"$cnlab" jobs show "$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' pb.err)" |
	grep -q "^Why:       $run-a is not a node it prefers: those had no room or could not run it$" &&
	ok "--prefer a node that cannot take it: runs on another (a preference, not a limit), jobs show says so" ||
	bad "prefer unmet: $(cat pb.err)"
out=$("$cnlab" run --gpu any-5 --avoid nosuch-node hello.sh 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'avoid\[0\].*nosuch-node.*not a registered node' <<<"$out" &&
	ok "an avoid naming no node is refused, naming it" || bad "unknown avoided node: rc $rc: $out"

touch "$shared/go"
wait_for 30 is_state "$filler" succeeded || bad "filler end: $(state "$filler")"

for args in "--nodes 0:--nodes" "--nodes 65:--nodes" "--cpu 2x:--cpu" \
	"--memory lots:--memory" "--dataset .x:--dataset" "--gpu-type ,:--gpu-type" \
	"--nodelist a,,b:--nodelist" "--exclude ,:--exclude" "--prefer ,:--prefer" \
	"--avoid a,,b:--avoid"; do
	out=$("$cnlab" run --gpu any-5 ${args%%:*} hello.sh 2>&1)
	rc=$?
	[ $rc = 2 ] && grep -q -- "${args#*:}" <<<"$out" && ok "refused: ${args%%:*}" ||
		bad "${args%%:*}: rc $rc: $out"
done
out=$("$cnlab" run --gpu h100-10 --gpu-type a100 hello.sh 2>&1)
rc=$?
[ $rc = 2 ] && grep -q gpu_types <<<"$out" && ok "a type the shape excludes is refused" ||
	bad "conflict: rc $rc: $out"

# --- an agent's datasets: relabelled by a restart, checked ----------------
kill "$pid_a"
wait "$pid_a" 2>/dev/null
start_agent a fake:1xH100-80GB-SXM --zone za --rack r1 --datasets imagenet ||
	bad "agent a restart: $(tail -3 "$tmp/agent-a.err")"
dsets=$(api GET /v1/nodes "$root" | jq -c ".items[] | select(.name==\"$run-a\") | .datasets")
[ "$dsets" = '["imagenet"]' ] && ok "a restarted agent relabels its node" || bad "datasets: $dsets"
out=$(CNLAB_AGENT_TOKEN=x "$agent" --datasets 'a b' 2>&1)
rc=$?
[ $rc = 2 ] && grep -q datasets <<<"$out" && ok "a bad datasets setting is refused" || bad "bad datasets: rc $rc: $out"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
