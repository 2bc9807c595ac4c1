#!/usr/bin/env bash
# clusters.sh - several clusters under one cnlabd, each with its own
# scheduling policy, end to end: the real cnlab CLI against a real cnlabd
# with four real agents (fake GPU pools, real processes in cgroups), two in
# cluster "east" and two in cluster "west":
#   - an administrator sets each cluster's policy with the CLI: east runs
#     fifo (strict submit order within a class), west runs cnlab with fair
#     share weighted up; cnlab cluster list and show say so;
#   - the same queue (team A's a1, a2, then team B's b1, team A holding the
#     other GPU) is served differently: east starts a1 (submit order), west
#     starts b1 (fair share);
#   - a job without --cluster goes to the cluster that holds its dataset
#     and can start it, and jobs explain shows the cluster's pick before
#     the node's decision;
#   - a job picked for a full cluster moves, after that cluster's wait
#     target, to a cluster that can start it, and explain says so;
#   - bad input is refused naming the field; a member cannot set a policy;
#   - the policies outlive a restart of cnlabd.
# Waits poll with generous bounds so a hang fails instead of blocking; no
# assertion depends on how fast the machine is.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
tmp=$(mktemp -d)
run=cl$$ # agent names, and so cgroup roots, unique to this run
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
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh" # ok, bad, wait_for, $fails

export CNLAB_JWT_SECRET=clusters-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home
shared=$tmp/shared
mkdir -p "$shared" "$HOME"
chmod 755 "$tmp"
chmod 1777 "$shared"
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
start_cnlabd() {
	: >"$tmp/cnlabd.out"
	"$cnlabd" --data-dir "$tmp/db" --listen "127.0.0.1:${port:-0}" \
		--bootstrap-admin root --cycle-interval 200ms \
		>"$tmp/cnlabd.out" 2>>"$tmp/cnlabd.err" &
	cnlabd_pid=$!
	pids+=($!)
	wait_for 20 grep -q '^listening on' "$tmp/cnlabd.out"
}
start_cnlabd || {
	cat "$tmp/cnlabd.err"
	exit 1
}
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port

# The administrator and the user, each with a CLI configuration of their own.
adm() { XDG_CONFIG_HOME=$tmp/xdg-root "$cnlab" "$@"; }
ana() { XDG_CONFIG_HOME=$tmp/xdg-ana "$cnlab" "$@"; }
echo admin-password-1 | adm login --server "$base" --user root --password-stdin >/dev/null ||
	bad "admin login"
echo ana-password-1 | adm user create ana --password-stdin >/dev/null || bad "user create"
for p in teama teamb; do
	adm project create "$p" >/dev/null && adm project member add "$p" ana >/dev/null ||
		bad "project $p"
done
echo ana-password-1 | ana login --server "$base" --user ana --password-stdin >/dev/null ||
	bad "ana login"

# start_agent NAME CLUSTER FLAGS...: a cnlab-agent with one fake H100.
start_agent() {
	local name=$1 cluster=$2 tok
	shift 2
	tok=$(adm node join-token --node "$run-$name" -o json | jq -r .token)
	CNLAB_AGENT_TOKEN=$tok "$agent" --server "$base" --name "$run-$name" \
		--cluster "$cluster" --gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent-$name" \
		--cpu-milli 4000 --mem-mib 8192 --mounts "$shared:/shared" "$@" \
		>>"$tmp/agent-$name.out" 2>>"$tmp/agent-$name.err" &
	pids+=($!)
	wait_for 20 grep -q 'msg=registered' "$tmp/agent-$name.err"
}
start_agent e1 east || bad "agent e1: $(cat "$tmp/agent-e1.err")"
start_agent e2 east || bad "agent e2: $(cat "$tmp/agent-e2.err")"

# --- each cluster its own policy ------------------------------------------
# While east is the only cluster with nodes, its own policy runs the one
# cycle: fifo starts team A's job first, where the control plane's default
# policy (fair share) would start team B's.
out=$(adm cluster set-policy east --policy fifo 2>&1) &&
	grep -q "Cluster east schedules with policy fifo" <<<"$out" &&
	ok "set-policy east fifo" || bad "set-policy east: $out"
cat >"$tmp/wait.sh" <<'SH'
while [ ! -e "/shared/$1" ]; do sleep 0.1; done
echo "done $1"
SH
echo 'echo hello' >"$tmp/hello.sh"
cd "$tmp" || exit 1
state() { ana jobs show "$1" -o json | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
node_of() { ana jobs show "$1" -o json | jq -r '.placement.node // empty'; }
submit() { # submit PROJECT ARGS...: the job's id
	local p=$1
	shift
	ana run --project "$p" --detach --no-preempt "$@" 2>/dev/null
}
for i in 1 2; do eval "s$i=\$(submit teama --gpu h100-100 wait.sh go-s$i)"; done
wait_for 60 is_state "$s1" running && wait_for 60 is_state "$s2" running || bad "single fillers"
sa=$(submit teama --gpu h100-100 wait.sh go-sa)
sb=$(submit teamb --gpu h100-100 wait.sh go-sb)
sleep 1
touch "$shared/go-s1"
wait_for 60 is_state "$sa" running && sleep 1 && is_state "$sb" pending &&
	ok "one cluster with nodes runs its own policy (fifo: A's job before B's)" ||
	bad "single cluster: sa $(state "$sa") sb $(state "$sb")"
touch "$shared/go-s2" "$shared/go-sa" "$shared/go-sb"
wait_for 60 is_state "$sa" succeeded && wait_for 60 is_state "$sb" succeeded || bad "sa: $(state "$sa") sb $(state "$sb")"
# West gets its policy before its first node joins.
out=$(adm cluster set-policy west --policy cnlab --weights w_fairshare=50,w_age=0 2>&1) &&
	ok "set-policy west cnlab, fair share first (no node yet)" || bad "set-policy west: $out"
start_agent w1 west || bad "agent w1: $(cat "$tmp/agent-w1.err")"
start_agent w2 west --datasets coco || bad "agent w2: $(cat "$tmp/agent-w2.err")"
list=$(adm cluster list)
grep -Eq '^east +2/2 up +2 +0% +0 +0 +fifo$' <<<"$list" &&
	grep -Eq '^west +2/2 up +2 +0% +0 +0 +cnlab$' <<<"$list" &&
	ok "cluster list: nodes, GPUs and each policy" || bad "cluster list: $list"
show=$(adm cluster show west)
grep -q '^Policy:      cnlab$' <<<"$show" && grep -q '^Weights:     w_age=0,w_fairshare=50$' <<<"$show" &&
	grep -q "^Node names:  $run-w1 $run-w2$" <<<"$show" &&
	ok "cluster show: policy, weights and nodes" || bad "cluster show: $show"
grep -Eq '^Forecast:    0% in 90 s' <<<"$show" && ok "cluster show: the 90 s forecast" || bad "forecast: $show"
# Users see the clusters (to pick one), not their nodes.
ushow=$(ana cluster show west -o json)
[ "$(jq -r .policy <<<"$ushow")" = cnlab ] && [ "$(jq 'has("node_names")' <<<"$ushow")" = false ] &&
	ok "a member sees a cluster's policy, not its node names" || bad "member show: $ushow"


# Team A fills every GPU, one filler each.
for c in east west; do
	for i in 1 2; do
		eval "f_${c}_$i=\$(submit teama --gpu h100-100 --cluster $c wait.sh go-$c-$i)"
	done
done
for f in "$f_east_1" "$f_east_2" "$f_west_1" "$f_west_2"; do
	wait_for 60 is_state "$f" running || bad "filler $f: $(state "$f")"
done
# The same queue in each: team A's a1, a2, then team B's b1.
for c in east west; do
	eval "a1_$c=\$(submit teama --gpu h100-100 --cluster $c wait.sh go-a1-$c)"
	eval "a2_$c=\$(submit teama --gpu h100-100 --cluster $c wait.sh go-a2-$c)"
	eval "b1_$c=\$(submit teamb --gpu h100-100 --cluster $c wait.sh go-b1-$c)"
done
sleep 1 # a few cycles: all of them queued
pending_all() { for j in "$@"; do is_state "$j" pending || return 1; done; }
pending_all "$a1_east" "$a2_east" "$b1_east" "$a1_west" "$a2_west" "$b1_west" &&
	ok "the queues wait while team A holds every GPU" || bad "queues: $(ana jobs list)"
list=$(adm cluster list)
grep -Eq '^east +2/2 up +2 +100% +3 +2 +fifo$' <<<"$list" &&
	ok "cluster list: each cluster's pending and running work" || bad "cluster list: $list"
# The forecast sees the queue: east holds 2 GPUs and has 3 more asked
# for, 250% of its capacity 90 s ahead (the arrivals' model adds more).
fc_of() { adm cluster show "$1" -o json | jq -r '.forecast.utilisation_90s'; }
saturated() { awk -v u="$(fc_of east)" 'BEGIN { exit !(u >= 2.5) }'; }
wait_for 20 saturated && ok "east's forecast: saturated ($(fc_of east))" || bad "east forecast $(fc_of east)"
# The gauges follow within a forecast tick (every 2 s).
west_full() {
	m=$(curl -sS "$base/metrics")
	grep -Eq '^cnlab_cluster_utilisation\{cluster="west"\} 1$' <<<"$m"
}
wait_for 20 west_full &&
	grep -Eq '^cnlab_cluster_forecast_utilisation\{cluster="east",horizon="90s"\} [0-9.e+]+$' <<<"$m" &&
	ok "metrics: each cluster's utilisation and forecast" || bad "metrics: $(grep cnlab_cluster <<<"$m")"
if command -v promtool >/dev/null; then
	out=$(promtool check metrics <<<"$m" 2>&1)
	[ -z "$out" ] && ok "cnlabd /metrics with the cluster gauges passes promtool" || bad "promtool: $out"
else
	bad "promtool missing"
fi
# One GPU frees in each cluster.
touch "$shared/go-east-1" "$shared/go-west-1"
wait_for 60 is_state "$a1_east" running && ok "east (fifo) starts team A's a1: submit order" ||
	bad "east: a1 $(state "$a1_east") b1 $(state "$b1_east")"
wait_for 60 is_state "$b1_west" running && ok "west (fair share) starts team B's b1 first" ||
	bad "west: a1 $(state "$a1_west") b1 $(state "$b1_west")"
is_state "$b1_east" pending && is_state "$a1_west" pending &&
	ok "... and the other waits in each" || bad "east b1 $(state "$b1_east"), west a1 $(state "$a1_west")"
case "$(node_of "$a1_east")" in "$run-e1" | "$run-e2") ok "a1 ran on an east node" ;; *) bad "a1 node $(node_of "$a1_east")" ;; esac
case "$(node_of "$b1_west")" in "$run-w1" | "$run-w2") ok "b1 ran on a west node" ;; *) bad "b1 node $(node_of "$b1_west")" ;; esac
ana jobs show "$b1_west" | grep -q '^Cluster:   west (asked for)$' &&
	[ "$(ana jobs show "$b1_west" -o json | jq -r .cluster)" = west ] &&
	ok "jobs show: the cluster it asked for" || bad "jobs show cluster: $(ana jobs show "$b1_west")"
ex=$(ana jobs explain "$b1_west")
grep -q "cluster west picked: asked for by the submission (--cluster); its policy cnlab places it" <<<"$ex" &&
	ok "explain: the cluster's decision, then the node's" || bad "explain b1: $ex"
# Everything ends.
for c in east west; do touch "$shared/go-$c-2" "$shared/go-a1-$c" "$shared/go-a2-$c" "$shared/go-b1-$c"; done
for j in "$a2_east" "$b1_east" "$a2_west" "$a1_west"; do
	wait_for 60 is_state "$j" succeeded || bad "drain $j: $(state "$j")"
done

# --- the pick: the dataset's cluster -----------------------------------------
ana run --project teama --gpu any-10 --dataset coco hello.sh >ds.out 2>ds.err
grep -q "✓ Running on $run-w2" ds.err && ok "--dataset coco runs in west, on the node with coco" ||
	bad "dataset: $(cat ds.err)"
ds=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' ds.err)
ex=$(ana jobs explain "$ds")
pick=$(grep -n "cluster west picked: it holds the job's dataset and can start it now" <<<"$ex" | cut -d: -f1)
chosen=$(grep -n "cluster west chosen: node $run-w2" <<<"$ex" | cut -d: -f1)
[ -n "$pick" ] && [ -n "$chosen" ] && [ "$pick" -lt "$chosen" ] &&
	ok "explain: the cluster picked (why), then the node" || bad "explain dataset: $ex"

# --- moving after the wait target --------------------------------------------
out=$(adm cluster set-policy east --wait-target 2 2>&1) || bad "wait target: $out"
show=$(adm cluster show east)
grep -q '^Policy:      fifo$' <<<"$show" && grep -q '^Wait target: 2 s' <<<"$show" &&
	ok "set-policy --wait-target keeps the policy" || bad "east after wait target: $show"
for c in east west; do
	for i in 1 2; do
		eval "g_${c}_$i=\$(submit teama --gpu h100-100 --cluster $c wait.sh gg-$c-$i)"
	done
done
for f in "$g_east_1" "$g_east_2" "$g_west_1" "$g_west_2"; do
	wait_for 60 is_state "$f" running || bad "filler $f: $(state "$f")"
done
# Every cluster full and as loaded: the name decides (east).
m=$(submit teamb --gpu h100-100 hello.sh)
wait_for 20 sh -c "XDG_CONFIG_HOME=$tmp/xdg-ana '$cnlab' jobs explain $m | grep -q 'cluster east picked'" ||
	bad "m picked: $(ana jobs explain "$m")"
# Many jobs held to different node sets (each its own set within each
# cluster) wait through a few split cycles, then are cancelled.
sets=()
for ex in "$run-e1" "$run-e2" "$run-w1" "$run-w2" "$run-e1,$run-e2" "$run-e1,$run-w1" \
	"$run-e1,$run-w2" "$run-e2,$run-w1" "$run-e2,$run-w2" "$run-w1,$run-w2" \
	"$run-e1,$run-e2,$run-w1" "$run-e1,$run-e2,$run-w2"; do
	sets+=("$(submit teamb --gpu h100-100 --exclude "$ex" hello.sh)")
done
sleep 1
for j in "${sets[@]}"; do ana jobs cancel "$j" >/dev/null || bad "cancel $j"; done
ok "jobs held to twelve node sets waited through split cycles"
touch "$shared/gg-west-1"
wait_for 60 is_state "$m" succeeded || wait_for 5 is_state "$m" running ||
	bad "m: $(state "$m") $(ana jobs explain "$m")"
case "$(node_of "$m")" in "$run-w1" | "$run-w2") ok "the job moved to west, which could start it" ;; *) bad "m node $(node_of "$m")" ;; esac
ana jobs explain "$m" | grep -q "moved to cluster west: waited [0-9]* s in cluster east (its wait target 2 s), which cannot start it now; west can (policy cnlab)" &&
	ok "explain says why it moved" || bad "explain m: $(ana jobs explain "$m")"
# A job asked for a cluster never moves.
p=$(submit teamb --gpu h100-100 --cluster east hello.sh)
sleep 4
is_state "$p" pending && ok "a job that asked for its cluster stays there" || bad "p: $(state "$p")"
touch "$shared/gg-east-1" "$shared/gg-east-2" "$shared/gg-west-2"
wait_for 60 is_state "$p" succeeded || bad "p end: $(state "$p")"

# --- a project pinned to clusters ----------------------------------------------
# Everything idle again: unpinned work would go to east (the name decides).
adm project create teamc >/dev/null && adm project member add teamc ana >/dev/null ||
	bad "project teamc"
adm project pin teamc --clusters west >/dev/null &&
	adm project show teamc | grep -q '^Clusters:      west$' &&
	ok "project pin teamc --clusters west (project show lists it)" ||
	bad "pin: $(adm project show teamc)"
pa=$(submit teama --gpu any-10 hello.sh)
pb=$(submit teamc --gpu any-10 hello.sh)
for f in "$pa" "$pb"; do wait_for 60 is_state "$f" succeeded || bad "pin job $f: $(state "$f")"; done
case "$(node_of "$pb")" in "$run-w1" | "$run-w2") true ;; *) false ;; esac &&
	case "$(node_of "$pa")" in "$run-e1" | "$run-e2") true ;; *) false ;; esac &&
	ok "the pinned project's work goes to west; the other's to east" ||
	bad "pins: $pa on $(node_of "$pa"), $pb on $(node_of "$pb")"
out=$(ana run --project teamc --gpu any-5 --cluster east hello.sh 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'field "cluster": project teamc is pinned to other clusters' <<<"$out" &&
	ok "asking for a cluster outside the pins is refused, naming it" || bad "pinned ask: rc $rc: $out"
out=$(ana project pin teamc --clusters east 2>&1)
rc=$?
[ $rc != 0 ] && adm project show teamc | grep -q '^Clusters:      west$' &&
	ok "a member cannot move the pins ($rc)" || bad "member pin: rc $rc: $out"
out=$(adm project pin teamc --clusters nosuch 2>&1)
[ $? = 2 ] && grep -q 'no cluster named "nosuch"' <<<"$out" &&
	ok "a pin to no cluster is refused" || bad "pin nosuch: $out"

# --- a project's quota in one cluster -------------------------------------------
# Team A's work so far ran in east; a quota there smaller than that use is
# spent: its work goes to west, and asking for east is refused.
out=$(adm quota set --project teama --cluster east --gpu-hours 0.0001 2>&1) &&
	grep -q 'GPU-hours in east:' <<<"$out" &&
	adm quota show --project teama | grep -q 'GPU-hours in east:' &&
	ok "quota set --cluster east: a project's GPU-hours in one cluster (quota show lists it)" ||
	bad "cluster quota: $out $(adm quota show --project teama)"
qa=$(submit teama --gpu any-10 hello.sh)
wait_for 60 is_state "$qa" succeeded && case "$(node_of "$qa")" in "$run-w1" | "$run-w2") true ;; *) false ;; esac &&
	ok "its quota in east spent: the project's work goes to west" || bad "qa on $(node_of "$qa")"
out=$(ana run --project teama --gpu any-5 --cluster east hello.sh 2>&1)
rc=$?
[ $rc = 5 ] && grep -q 'GPU-hours quota in cluster east' <<<"$out" &&
	ok "asking for east then: refused (exit 5), the cluster's quota named" || bad "east ask: rc $rc: $out"
out=$(submit teamb --gpu any-10 --cluster east hello.sh) && wait_for 60 is_state "$out" succeeded &&
	ok "another project's work in east is untouched" || bad "teamb east: $out"
out=$(adm quota set --project teama --cluster nosuch --gpu-hours 1 2>&1)
[ $? = 2 ] && grep -q 'no cluster named "nosuch"' <<<"$out" && ok "a quota in no cluster: refused" ||
	bad "quota nosuch: $out"
out=$(adm quota set --user ana --cluster east --gpu-hours 1 2>&1)
[ $? = 2 ] && ok "a user's quota is not per cluster (usage)" || bad "user cluster quota: $out"
out=$(ana quota set --project teama --cluster east --gpu-hours 100 2>&1)
[ $? = 5 ] && ok "a member cannot set one (exit 5)" || bad "member quota: $out"
adm quota set --project teama --cluster east --gpu-hours none >/dev/null &&
	! adm quota show --project teama | grep -q 'GPU-hours in east' || bad "quota none"
qa=$(submit teama --gpu any-10 hello.sh)
wait_for 60 is_state "$qa" succeeded && case "$(node_of "$qa")" in "$run-e1" | "$run-e2") true ;; *) false ;; esac &&
	ok "none removes it: east again" || bad "qa after none on $(node_of "$qa")"
# Kept across the restart below: team B may use nothing in west.
adm quota set --project teamb --cluster west --gpu-hours 0 >/dev/null || bad "teamb west quota"

# --- refused -----------------------------------------------------------------
tok=$(adm node join-token --node "$run-bad" -o json | jq -r .token)
out=$(CNLAB_AGENT_TOKEN=$tok timeout 20 "$agent" --server "$base" --name "$run-bad" \
	--cluster 'a"b' --gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent-bad" 2>&1)
rc=$?
[ $rc != 0 ] && grep -q 'field \\\?"cluster\\\?": must be a name' <<<"$out" &&
	ok "an agent with a cluster label that is not a name is refused ($rc)" || bad "bad label: rc $rc: $(tail -3 <<<"$out")"
out=$(ana run --project teama --gpu any-5 --cluster nosuch hello.sh 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'cluster.*no cluster named "nosuch"' <<<"$out" &&
	ok "--cluster naming no cluster is refused, naming it" || bad "unknown cluster: rc $rc: $out"
out=$(adm cluster set-policy east --policy nosuch 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'field "policy": must be one of cnlab' <<<"$out" &&
	ok "an unknown policy is refused" || bad "bad policy: rc $rc: $out"
out=$(adm cluster set-policy east --weights w_bogus=1 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'weights.w_bogus": unknown' <<<"$out" &&
	ok "an unknown knob is refused, naming it" || bad "bad knob: rc $rc: $out"
out=$(adm cluster set-policy east --weights w_age=-1 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'weights.w_age": -1 is out of range' <<<"$out" &&
	ok "a negative weight is refused" || bad "negative weight: rc $rc: $out"
out=$(adm cluster set-policy east 2>&1)
[ $? = 2 ] && ok "set-policy without a setting is a usage error" || bad "no settings: $out"
out=$(ana cluster set-policy east --policy cnlab 2>&1)
rc=$?
[ $rc != 0 ] && adm cluster show east | grep -q '^Policy:      fifo$' &&
	ok "a member cannot change a cluster's policy ($rc)" || bad "member set-policy: rc $rc: $out"
out=$(adm cluster show nosuch 2>&1)
[ $? != 0 ] && grep -q 'nosuch' <<<"$out" && ok "show of no cluster: not found" || bad "show nosuch: $out"
adm cluster show east | grep -q '^Policy:      fifo$' && ok "refusals changed nothing" ||
	bad "after refusals: $(adm cluster show east)"

# --- policies, asked clusters and picks outlive a restart ----------------------
r1=$(submit teama --gpu h100-100 --cluster east wait.sh rr-1)
r2=$(submit teama --gpu h100-100 --cluster east wait.sh rr-2)
for f in "$r1" "$r2"; do wait_for 60 is_state "$f" running || bad "filler $f: $(state "$f")"; done
q=$(submit teamb --gpu h100-100 --cluster east hello.sh)
wait_for 20 sh -c "XDG_CONFIG_HOME=$tmp/xdg-ana '$cnlab' jobs explain $q | grep -q 'cluster east picked'" ||
	bad "q picked: $(ana jobs explain "$q")"
kill "$cnlabd_pid"
wait "$cnlabd_pid" 2>/dev/null
start_cnlabd || bad "restart: $(tail -3 "$tmp/cnlabd.err")"
show=$(adm cluster show west)
grep -q '^Policy:      cnlab$' <<<"$show" && grep -q '^Weights:     w_age=0,w_fairshare=50$' <<<"$show" &&
	adm cluster show east | grep -q '^Wait target: 2 s' &&
	ok "the policies are kept across a restart" || bad "after restart: $show"
ana jobs show "$q" | grep -q '^Cluster:   east (asked for)$' &&
	ok "a pending job keeps the cluster it asked for" || bad "q after restart: $(ana jobs show "$q")"
sleep 4 # past east's wait target, with west empty
is_state "$q" pending && ok "... and still does not move" || bad "q moved: $(state "$q")"
touch "$shared/rr-1" "$shared/rr-2"
wait_for 60 is_state "$q" succeeded || bad "q end: $(state "$q")"
case "$(node_of "$q")" in "$run-e1" | "$run-e2") ok "q ran in east" ;; *) bad "q node $(node_of "$q")" ;; esac
[ "$(ana jobs explain "$q" | grep -c 'picked')" = 1 ] &&
	ok "the restart did not pick (and audit) its cluster again" || bad "explain q: $(ana jobs explain "$q")"
pc=$(submit teamc --gpu any-10 hello.sh)
wait_for 60 is_state "$pc" succeeded || bad "pc: $(state "$pc")"
adm project show teamc | grep -q '^Clusters:      west$' &&
	case "$(node_of "$pc")" in "$run-w1" | "$run-w2") true ;; *) false ;; esac &&
	ok "pins outlive a restart" || bad "pins after restart: $(adm project show teamc) $pc on $(node_of "$pc")"
adm quota show --project teamb | grep -q 'GPU-hours in west:' &&
	[ "$(ana run --project teamb --gpu any-5 --cluster west hello.sh >/dev/null 2>&1; echo $?)" = 5 ] &&
	ok "a cluster's quota outlives a restart" || bad "quota after restart: $(adm quota show --project teamb)"
adm project pin teamc --clusters "" >/dev/null && adm project show teamc | grep -q '^Clusters:      any$' &&
	ok "--clusters \"\" unpins" || bad "unpin: $(adm project show teamc)"

# --- at most 63 clusters with policies of their own --------------------------
for i in $(seq 1 61); do adm cluster set-policy "x$i" --wait-target 0 >/dev/null 2>&1 || break; done
n_conf=$(adm cluster list -o json | jq '[.items[] | select(.configured)] | length')
out=$(adm cluster set-policy x62 --wait-target 0 2>&1)
rc=$?
[ "$n_conf" = 63 ] && [ $rc != 0 ] && grep -q "at most 63 clusters" <<<"$out" &&
	ok "a 64th cluster policy is refused, naming the limit" || bad "cap: $n_conf configured; rc $rc: $out"
adm cluster set-policy east --wait-target 3 >/dev/null && adm cluster show east | grep -q '^Wait target: 3 s' &&
	ok "... an existing cluster's policy still changes" || bad "change at the cap"
q2=$(submit teamb --gpu any-10 hello.sh)
wait_for 60 is_state "$q2" succeeded && ok "... and work still runs" || bad "q2: $(state "$q2")"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
