#!/usr/bin/env bash
# federation_peer.sh - a sending site against a peer that misbehaves
# (tests/integration/fake_peer.py, on loopback), the attacks of the
# independent pass on federation:
#   - a submission read by the peer and never answered is not taken back:
#     the job waits for the peer's answer, and does not run here even once
#     a GPU here is free (it may exist there: two runs); sent again with
#     the same Idempotency-Key, it is made once when the peer answers;
#   - output chunks whose ids do not move forward (none at all) are not
#     copied, let alone again each tick; chunks that do are copied once;
#   - the job ends here as it ended there, its output whole.
# Waits poll with generous bounds; no assertion depends on the machine's
# speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d)
run=fp$$
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
. "$here/lib.sh" # ok, bad, wait_for, $fails

export CNLAB_JWT_SECRET=federation-peer-secret-0123456789abcdefgh
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
shared=$tmp/shared
mkdir -p "$shared" "$HOME" "$tmp/peer"
chmod 755 "$tmp"
chmod 1777 "$shared"
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
openssl rand -hex 32 >"$tmp/a.key" && chmod 600 "$tmp/a.key"
token=peer-token-$(openssl rand -hex 16)
printf '%s\n' "$token" >"$tmp/tok"

python3 "$here/fake_peer.py" "$tmp/peer" "$token" "$tmp/peer.port" 2>"$tmp/peer.err" &
pids+=($!)
wait_for 20 test -s "$tmp/peer.port" || {
	cat "$tmp/peer.err"
	exit 1
}
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root --cycle-interval 200ms \
	--secrets-key-file "$tmp/a.key" >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
wait_for 20 grep -q '^listening on' "$tmp/cnlabd.out" || {
	cat "$tmp/cnlabd.err"
	exit 1
}
base=http://127.0.0.1:$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
echo admin-password-1 | "$cnlab" login --server "$base" --user root --password-stdin >/dev/null ||
	bad "login"
"$cnlab" project create lab >/dev/null && "$cnlab" project member add lab root >/dev/null &&
	"$cnlab" project use lab >/dev/null || bad "project"
tok=$("$cnlab" node join-token --node "$run-a" -o json | jq -r .token)
CNLAB_AGENT_TOKEN=$tok "$agent" --server "$base" --name "$run-a" --gpus fake:1xH100-80GB-SXM \
	--work-dir "$tmp/agent" --cpu-milli 4000 --mem-mib 8192 --mounts "$shared:/shared" \
	>"$tmp/agent.out" 2>"$tmp/agent.err" &
pids+=($!)
wait_for 20 grep -q 'msg=registered' "$tmp/agent.err" || bad "agent: $(tail -3 "$tmp/agent.err")"
"$cnlab" cluster set-policy default --wait-target 1 >/dev/null || bad "wait target"
"$cnlab" peer add fake --url "http://127.0.0.1:$(cat "$tmp/peer.port")" --token-from-file "$tmp/tok" \
	>/dev/null || bad "peer add"

cd "$tmp" || exit 1
cat >"$tmp/hold.sh" <<'SH'
while [ ! -e "/shared/$1" ]; do sleep 0.1; done
SH
echo 'echo ran-here' >"$tmp/work.sh"
state() { "$cnlab" jobs show "$1" -o json | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
remote_of() { "$cnlab" jobs show "$1" -o json | jq -r '.peer_job // empty'; }
posts() { # submissions the peer received
	local n
	n=$(grep -c '"method": "POST", "path": "/v1/projects/prj_fake/jobs"' "$tmp/peer/calls.log" 2>/dev/null)
	echo "${n:-0}"
}

# --- a submission the peer never answers ------------------------------------
echo hold >"$tmp/peer/post"
h=$("$cnlab" run hold.sh go --gpu h100-100 --detach 2>/dev/null)
wait_for 60 is_state "$h" running || bad "holder: $(state "$h")"
j=$("$cnlab" run work.sh --gpu h100-100 --detach 2>/dev/null)
tried() { [ "$(posts)" -ge 1 ]; }
wait_for 60 tried ||
	bad "never sent: $("$cnlab" jobs show "$j")"
touch "$shared/go" # a GPU here is free from now on
wait_for 60 is_state "$h" succeeded || bad "holder end"
sleep 6 # several cycles with the GPU free, while the peer holds the answer
is_state "$j" pending && "$cnlab" jobs show "$j" | grep -q '^Site:      peer fake' &&
	! "$cnlab" jobs logs "$j" 2>/dev/null | grep -q ran-here &&
	ok "a submission left unanswered is not taken back: it does not run here, GPU free or not" ||
	bad "unanswered: $("$cnlab" jobs show "$j")"
echo ok >"$tmp/peer/post"
wait_for 120 sh -c "XDG_CONFIG_HOME=$XDG_CONFIG_HOME '$cnlab' jobs show $j -o json | jq -e '.peer_job == \"job_fake1\"' >/dev/null" &&
	ok "sent again once the peer answers: forwarded as its job job_fake1" ||
	bad "after answer: $("$cnlab" jobs show "$j")"
keys=$(grep 'prj_fake/jobs' "$tmp/peer/calls.log" | jq -r .key | sort -u)
[ "$keys" = "forward-$j" ] && [ "$(posts)" -ge 2 ] &&
	ok "every try carried the same Idempotency-Key ($(posts) tries, key forward-$j)" ||
	bad "keys: $keys"

# --- output chunks without ids ---------------------------------------------
echo null-ids >"$tmp/peer/logs"
sleep 5 # five ticks of a peer offering the same chunks again and again
n=$("$cnlab" jobs logs "$j" 2>/dev/null | grep -c again)
[ "$n" = 0 ] && ok "chunks whose ids do not move forward are not copied (not once, not each tick)" ||
	bad "null ids copied $n times"
echo ok >"$tmp/peer/logs"
wait_for 30 sh -c "XDG_CONFIG_HOME=$XDG_CONFIG_HOME '$cnlab' jobs logs $j 2>/dev/null | grep -q 'line 3'" || bad "good chunks"
sleep 3
[ "$("$cnlab" jobs logs "$j" 2>/dev/null | grep -c '^line ')" = 3 ] &&
	ok "chunks that move forward are copied once each" || bad "logs: $("$cnlab" jobs logs "$j" 2>&1)"
echo succeeded >"$tmp/peer/state"
wait_for 30 is_state "$j" succeeded && ! "$cnlab" jobs logs "$j" 2>/dev/null | grep -q ran-here &&
	ok "it ends here as it ended there, having run there only" || bad "end: $("$cnlab" jobs show "$j")"

[ "$fails" = 0 ] || {
	tail -20 "$tmp/cnlabd.err"
	exit 1
}
echo "all ok"
