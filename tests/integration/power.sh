#!/usr/bin/env bash
# power.sh - idle nodes powered down and up again through the operator's
# power command, end to end: a real cnlabd with --power-command, three
# real agents (fake GPU pools) and a power command that records its calls
# and does what a BMC would (off: the node's agent dies with its machine;
# on: the agent starts again and heartbeats):
#   - nodes idle past --power-idle are powered off, but never below
#     --power-spare-gpus idle GPUs left on; nodes list says "off", the
#     audit log says why, and an off node's silence is not a loss;
#   - work that cannot start on the nodes left on powers one up, which
#     takes the work once its agent is back;
#   - a power command that fails leaves the node on, audited;
#   - which nodes are off survives a restart of cnlabd.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
tmp=$(mktemp -d)
run=pw$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for f in "$tmp"/pid-*; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	for f in "$tmp"/pid-*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
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
	[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh" # ok, bad, wait_for, $fails

export CNLAB_JWT_SECRET=power-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
shared=$tmp/shared
mkdir -p "$shared" "$HOME"
chmod 755 "$tmp"
chmod 1777 "$shared"
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG

# The power command: records each call; "off" stops the node's agent (its
# machine goes dark), "on" starts it again from the command line saved
# when it first started (its node credential is in its work directory).
cat >"$tmp/power.sh" <<SH
#!/bin/sh
echo "\$1 \$2 node=\$CNLAB_NODE" >>"$tmp/calls.log"
[ -e "$tmp/fail-\$1" ] && exit 3
case "\$1" in
off) kill -9 "\$(cat "$tmp/pid-\$2")" ;;
on) setsid sh -c "exec \$(cat "$tmp/cmd-\$2") >>$tmp/agent-\$2.out 2>>$tmp/agent-\$2.err & echo \\\$! >$tmp/pid-\$2" </dev/null >/dev/null 2>&1 ;;
esac
exit 0
SH
chmod +x "$tmp/power.sh"
touch "$tmp/calls.log"

start_cnlabd() {
	: >"$tmp/cnlabd.out"
	"$cnlabd" --data-dir "$tmp/db" --listen "127.0.0.1:${port:-0}" \
		--bootstrap-admin root --cycle-interval 200ms \
		--power-command "$tmp/power.sh" --power-idle 2s --power-spare-gpus 1 \
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
echo admin-password-1 | "$cnlab" login --server "$base" --user root --password-stdin >/dev/null ||
	bad "login"
"$cnlab" project create lab >/dev/null && "$cnlab" project member add lab root >/dev/null &&
	"$cnlab" project use lab >/dev/null || bad "project"

start_agent() { # start_agent NAME: an agent with one fake H100
	local name=$1 tok
	tok=$("$cnlab" node join-token --node "$run-$name" -o json | jq -r .token)
	echo "$agent --server $base --name $run-$name --gpus fake:1xH100-80GB-SXM" \
		"--work-dir $tmp/agent-$run-$name --cpu-milli 4000 --mem-mib 8192" \
		"--mounts $shared:/shared" >"$tmp/cmd-$run-$name"
	CNLAB_AGENT_TOKEN=$tok $(cat "$tmp/cmd-$run-$name") \
		>>"$tmp/agent-$run-$name.out" 2>>"$tmp/agent-$run-$name.err" &
	echo $! >"$tmp/pid-$run-$name"
	wait_for 20 grep -q 'msg=registered' "$tmp/agent-$run-$name.err"
}
for n in a b c; do start_agent $n || bad "agent $n: $(cat "$tmp/agent-$run-$n.err")"; done

power_of() { "$cnlab" node show "$run-$1" -o json | jq -r .power; }
n_off() { "$cnlab" node list -o json | jq '[.items[] | select(.power=="off")] | length'; }
# --- idle nodes go off, the spare stays on -----------------------------------
wait_for 30 sh -c "[ \$(grep -c '^off ' '$tmp/calls.log') -ge 2 ]" ||
	bad "no power-off: $(cat "$tmp/calls.log")"
sleep 1
[ "$(grep -c '^off ' "$tmp/calls.log")" = 2 ] && [ "$(n_off)" = 2 ] &&
	ok "two idle nodes powered off, one idle GPU kept on (the spare)" ||
	bad "off: $(cat "$tmp/calls.log") / $("$cnlab" node list)"
on_node=
for n in a b c; do [ "$(power_of $n)" = on ] && on_node=$n; done
[ -n "$on_node" ] && ! grep -q "^off $run-$on_node " "$tmp/calls.log" &&
	ok "the node left on ($on_node) was never switched off" || bad "on node: $on_node"
grep -q "^off $run-[abc] node=$run-[abc]$" "$tmp/calls.log" &&
	ok "the command is run as COMMAND off NODE, with CNLAB_NODE" || bad "calls: $(cat "$tmp/calls.log")"
"$cnlab" node list | grep -Eq "^$run-[abc] +H100-80GB-SXM +1 +off " &&
	ok "nodes list shows them off" || bad "node list: $("$cnlab" node list)"
"$cnlab" audit --limit 1000 | grep -q "node.power.*off: idle since" &&
	ok "the audit says why each went off" || bad "audit: $("$cnlab" audit --limit 1000 | grep power)"

# --- work that cannot start powers one up -------------------------------------
cat >"$shared/wait.sh" <<'SH'
while [ ! -e "/shared/$1" ]; do sleep 0.1; done
SH
cp "$shared/wait.sh" "$tmp/wait.sh"
cd "$tmp" || exit 1
state() { "$cnlab" jobs show "$1" -o json | jq -r .state; }
node_of() { "$cnlab" jobs show "$1" -o json | jq -r '.placement.node // empty'; }
is_state() { [ "$(state "$1")" = "$2" ]; }
j1=$("$cnlab" run --detach --gpu h100-100 wait.sh go1 2>/dev/null)
wait_for 30 is_state "$j1" running || bad "j1: $(state "$j1")"
[ "$(node_of "$j1")" = "$run-$on_node" ] && ok "the first job runs on the node left on" || bad "j1 on $(node_of "$j1")"
j2=$("$cnlab" run --detach --gpu h100-100 wait.sh go2 2>/dev/null)
wait_for 30 grep -q '^on ' "$tmp/calls.log" && ok "waiting work powers a node on" ||
	bad "no power-on: $(cat "$tmp/calls.log")"
woken=$(sed -n "s/^on $run-\([abc]\) .*/\1/p" "$tmp/calls.log" | head -1)
wait_for 60 is_state "$j2" running && [ "$(node_of "$j2")" != "$run-$on_node" ] &&
	grep -q "^on $(node_of "$j2") " "$tmp/calls.log" &&
	ok "the job runs on a node powered on, once its agent is back" ||
	bad "j2: $(state "$j2") on $(node_of "$j2") (calls $(cat "$tmp/calls.log"))"
for n in $(sed -n 's/^on \([^ ]*\) .*/\1/p' "$tmp/calls.log" | sort -u); do
	[ "$(grep -c "^off $n " "$tmp/calls.log")" -ge 1 ] || bad "$n switched on, never off"
done
ok "only nodes that were off were switched on"
[ "$(power_of "$woken")" = on ] && ok "the node is on again" || bad "woken power $(power_of "$woken")"
"$cnlab" audit --limit 1000 | grep -q "node.power.*powering on: cluster default's forecast demand" &&
	"$cnlab" audit --limit 1000 | grep -q "node.power.*on: its agent is back" &&
	ok "the audit says why it went on, and when it was back" || bad "audit on: $("$cnlab" audit --limit 1000 | grep power)"
"$cnlab" node list -o json | jq -e '[.items[] | select(.state=="lost")] | length == 0' >/dev/null &&
	ok "no node off was taken for lost" || bad "lost: $("$cnlab" node list)"

# --- off survives a restart ---------------------------------------------------
touch "$shared/go1" "$shared/go2"
wait_for 30 is_state "$j2" succeeded || bad "j2 end: $(state "$j2")"
# Idle again: nodes go off again, as many as the forecast (which still
# expects some of the work just seen to come back) allows.
wait_for 30 sh -c "[ \$('$cnlab' node list -o json | jq '[.items[] | select(.power==\"off\")] | length') -ge 1 ]" ||
	bad "idle again: $("$cnlab" node list)"
sleep 1
off_before=$("$cnlab" node list -o json | jq -c '[.items[] | select(.power=="off") | .name]')
kill "$cnlabd_pid"
wait "$cnlabd_pid" 2>/dev/null
start_cnlabd || bad "restart: $(tail -3 "$tmp/cnlabd.err")"
off_after=$("$cnlab" node list -o json | jq -c '[.items[] | select(.power=="off") | .name]')
[ -n "$off_before" ] && [ "$off_before" != "[]" ] &&
	jq -e --argjson a "$off_after" 'all(.[]; . as $n | $a | index($n))' <<<"$off_before" >/dev/null &&
	ok "the nodes off stay off across a restart ($off_before)" || bad "after restart: $("$cnlab" node list)"
sleep 3
"$cnlab" node list -o json | jq -e '[.items[] | select(.state=="lost")] | length == 0' >/dev/null &&
	ok "... and are not taken for lost" || bad "lost after restart: $("$cnlab" node list)"

# --- a command that fails leaves the node as it was ---------------------------
touch "$tmp/fail-on"
: >"$tmp/calls.log"
# One job more than the nodes that are on: one must be switched on.
n_on=$("$cnlab" node list -o json | jq '[.items[] | select(.power=="on")] | length')
ks=()
for i in $(seq $((n_on + 1))); do
	ks+=("$("$cnlab" run --detach --gpu h100-100 wait.sh go-k$i 2>/dev/null)")
done
wait_for 30 sh -c "'$cnlab' audit --limit 1000 | grep -q 'on failed: the power command exited 3; the node stays off'" &&
	ok "a failing power command is audited, and the node stays off" ||
	bad "fail: $("$cnlab" audit --limit 1000 | grep power) / $(cat "$tmp/calls.log")"
failed=$(sed -n 's/^on \([^ ]*\) .*/\1/p' "$tmp/calls.log" | head -1)
[ -n "$failed" ] && [ "$("$cnlab" node show "$failed" -o json | jq -r .power)" = off ] &&
	ok "... $failed is still off" || bad "after failure: $("$cnlab" node list)"
for k in "${ks[@]}"; do "$cnlab" jobs cancel "$k" >/dev/null; done

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
