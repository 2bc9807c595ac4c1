#!/usr/bin/env bash
# outage.sh - a control-plane outage longer than the old lease, for real
# (issue 17): a standalone cnlab-agent runs a job that prints numbered
# lines; cnlabd is killed (-9) and kept down for 25 s (its node timeout is
# 10 s, so the lease it gives agents is 5 s), then started again on the
# same port and data directory.  The job keeps running through the outage
# (the agent's outage_grace) and completes; every line it printed, those
# of the outage too, reaches cnlabd exactly once (buffered on the node's
# disk, delivered by offset); its end is reported after them.  A second
# job prints 2 MB during the outage, past the agent's log_buffer_max
# (1 MiB here): the node's disk holds no more than that meanwhile, and the
# log keeps the beginning, a note of what was dropped, and the end, each
# byte once.
# Waits poll with generous bounds so that a hang fails; no assertion
# depends on how fast the machine is.  The job is long enough (80 lines,
# one each 0.5 s) to outlast the outage on any machine that starts cnlabd
# in less than the 15 s it leaves.
set -u
cnlabd=$1
agent=$2
tmp=$(mktemp -d)
run=og$$
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
wait_for() { # wait_for SECONDS CMD...: poll CMD every 0.2 s
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}
shared=$tmp/shared # a node folder the jobs' containers see at /shared
mkdir -p "$shared"
chmod 755 "$tmp"
chmod 1777 "$shared"
export CNLAB_JWT_SECRET=outage-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
cat >"$tmp/cnlabd.conf" <<CONF
node_lost_timeout = 10s
cycle_interval = 200ms
CONF
start_cnlabd() { # start_cnlabd LISTEN [FLAGS...]
	local l=$1
	shift
	: >"$tmp/cnlabd.out"
	"$cnlabd" --config "$tmp/cnlabd.conf" --data-dir "$tmp/db" --listen "$l" "$@" \
		>"$tmp/cnlabd.out" 2>>"$tmp/cnlabd.err" &
	cpid=$!
	pids+=($cpid)
	wait_for 20 grep -q '^listening on' "$tmp/cnlabd.out"
}
start_cnlabd 127.0.0.1:0 --bootstrap-admin root || {
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
# The node joins with a one-time join token made for its name.
agtok=$(api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$run-a\"}" | jq -r .token)
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)

CNLAB_AGENT_TOKEN=$agtok "$agent" --server "$base" --name "$run-a" \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent" --cpu-milli 8000 \
	--mem-mib 16384 --outage-grace 2m --log-buffer-max 1mib --mounts "$shared:/shared" \
	>"$tmp/agent.out" 2>"$tmp/agent.err" &
apid=$!
pids+=($apid)
wait_for 20 grep -q 'msg=registered' "$tmp/agent.err" || bad "agent did not register: $(cat "$tmp/agent.err")"
grep -q 'lease_ms=5000 grace_ms=120000' "$tmp/agent.err" && ok "the agent keeps a 5 s lease and a 2 min outage grace" ||
	bad "lease and grace: $(grep registered "$tmp/agent.err")"

state() { api GET "/v1/jobs/$1" "$ana" | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
logs() { api GET "/v1/jobs/$1/logs?limit=1000" "$ana" | jq -r '.items[] | select(.stream == "stdout") | .data' | tr -d '\n'; }
c='for i in $(seq 1 80); do echo line-$i; sleep 0.5; done'
j=$(api POST "/v1/projects/$proj/jobs" "$ana" "$(jq -cn --arg c "$c" '{command:$c,gpu:"h100-10"}')" | jq -r .id)
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' '$base/v1/jobs/$j/logs' | grep -q line-3" ||
	bad "job did not start: $(api GET "/v1/jobs/$j" "$ana")"
before=$(logs "$j")
# Job 3 waits for the outage, then prints 300000 numbered lines (2 MB).
c3='echo begin; while [ ! -e /shared/go ]; do sleep 0.1; done; seq 1 300000; echo end'
j3=$(api POST "/v1/projects/$proj/jobs" "$ana" "$(jq -cn --arg c "$c3" '{command:$c,gpu:"h100-10"}')" | jq -r .id)
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' '$base/v1/jobs/$j3/logs' | grep -q begin" ||
	bad "job 3 did not start: $(api GET "/v1/jobs/$j3" "$ana")"

# --- the outage: 25 s, five times cnlabd's lease, twice its node timeout ---
kill -9 "$cpid"
wait "$cpid" 2>/dev/null
touch "$shared/go"
sleep 25
f=$tmp/agent/state/$j3.stdout
size=$(stat -c %s "$f")
used=$(($(stat -c %b "$f") * $(stat -c %B "$f")))
[ "$size" -gt $((3 * 512 * 1024)) ] && [ "$used" -le $((1024 * 1024 + 128 * 1024)) ] &&
	ok "the node's disk holds at most log_buffer_max of its output ($used of $size bytes)" ||
	bad "buffer on disk: $used bytes used of $size"
kill -0 "$apid" 2>/dev/null && ok "the agent lives through the outage" || bad "agent died: $(tail -5 "$tmp/agent.err")"
! grep -q 'stopped all work' "$tmp/agent.err" && ! grep -q "workload ended\" id=$j" "$tmp/agent.err" &&
	ok "the job runs on through the outage" || bad "job stopped: $(grep "id=$j\|stopped" "$tmp/agent.err" | tail -3)"
start_cnlabd "127.0.0.1:$port" || bad "cnlabd restart: $(tail -3 "$tmp/cnlabd.err")"
wait_for 120 is_state "$j" succeeded && ok "the job completed after the outage" ||
	bad "job: $(api GET "/v1/jobs/$j" "$ana")"
want=$(for i in $(seq 1 80); do printf 'line-%s' "$i"; done)
got=$(logs "$j")
[ "$got" = "$want" ] && ok "its whole log arrived, each line once" || bad "log: $got"
[ "${#before}" -lt "${#want}" ] && ok "(the outage came mid-job: ${#before} of ${#want} bytes before it)" ||
	bad "the job had ended before the outage"
[ "$(grep -c "workload started\" id=$j " "$tmp/agent.err")" = 1 ] && ok "it ran once" ||
	bad "started: $(grep "id=$j " "$tmp/agent.err")"
api GET "/v1/nodes" "$root" | jq -e '.items[0].state == "up"' >/dev/null && ok "the node is up" ||
	bad "node: $(api GET /v1/nodes "$root")"

wait_for 120 is_state "$j3" succeeded && ok "job 3 completed after the outage" ||
	bad "job 3: $(api GET "/v1/jobs/$j3" "$ana")"
api GET "/v1/jobs/$j3/logs?limit=1000" "$ana" | jq -j '.items[] | select(.stream == "stdout") | .data' >"$tmp/log3"
head -1 "$tmp/log3" | grep -qx begin && tail -3 "$tmp/log3" | tr '\n' ' ' | grep -qx '299999 300000 end ' &&
	ok "job 3's log keeps its beginning and its end" || bad "job 3 log: $(head -c 200 "$tmp/log3") ... $(tail -c 100 "$tmp/log3")"
grep -q '^\[cnlab: [0-9]* bytes of this output were dropped on the node' "$tmp/log3" &&
	ok "and says how many bytes the node dropped" || bad "no note of the dropped bytes"
# After the note (whose first line may be cut), consecutive numbers, once.
sed -n '/^\[cnlab: /,$p' "$tmp/log3" | sed '1,3d' | grep -x '[0-9]*' >"$tmp/nums3"
n3=$(wc -l <"$tmp/nums3")
[ "$n3" -gt 1000 ] && [ "$(sort -n "$tmp/nums3" | uniq -d | wc -l)" = 0 ] &&
	[ "$(($(tail -1 "$tmp/nums3") - $(head -1 "$tmp/nums3") + 1))" = "$n3" ] &&
	ok "what it kept is whole: $n3 consecutive lines, each once" || bad "job 3 numbers: $n3 lines"

# --- a chunk sent again is kept once; a gap is refused ----------------------
# What an agent does after a lost reply: the node's own credential sends
# the same bytes again, and bytes past a gap.
j2=$(api POST "/v1/projects/$proj/jobs" "$ana" '{"command":"sleep 30","gpu":"h100-10"}' | jq -r .id)
wait_for 30 is_state "$j2" running || bad "job 2 did not start"
node=$(api GET /v1/nodes "$root" | jq -r '.items[0].id')
agtok=$(cat "$tmp/agent/node.credential") # what the join token became
ep=$(api GET "/v1/nodes/$node/assignments" "$agtok" | jq -r --arg j "$j2" '.assignments[] | select(.id == $j) | .epoch')
post_log() { # post_log OFFSET DATA -> status, body in $tmp/lr
	curl -sS -o "$tmp/lr" -w '%{http_code}' -X POST -H "Authorization: Bearer $agtok" \
		-d "{\"id\":\"$j2\",\"epoch\":$ep,\"stream\":\"stderr\",\"offset\":$1,\"data\":\"$2\"}" \
		"$base/v1/nodes/$node/logs"
}
s1=$(post_log 0 abc)
s2=$(post_log 0 abc)
s3=$(post_log 1 bcde)
s4=$(post_log 9 zz)
[ "$s1" = 201 ] && [ "$s2" = 200 ] && [ "$s3" = 201 ] && [ "$s4" = 416 ] && jq -e '.next == 5' "$tmp/lr" >/dev/null &&
	ok "log appends by offset: stored 201, repeated 200, overlap trimmed 201, gap 416 with next" ||
	bad "appends: $s1 $s2 $s3 $s4 $(cat "$tmp/lr")"
e=$(api GET "/v1/jobs/$j2/logs?limit=1000" "$ana" | jq -r '.items[] | select(.stream == "stderr") | .data' | tr -d '\n')
[ "$e" = abcde ] && ok "the stream holds each byte once" || bad "stderr: $e"
api POST "/v1/jobs/$j2/cancel" "$ana" '{}' >/dev/null
[ "$fails" = 0 ] || exit 1
