#!/usr/bin/env bash
# agent.sh - cnlab-agent end to end with a real cnlabd on loopback, fake GPU
# pools, and real processes in real cgroups:
#   - a job runs, its output streams while it runs, its artifact comes back;
#   - two jobs on one GPU get their own regions, each with its own quota
#     and share;
#   - a job over its memory limit is killed by the cgroup and reported so;
#   - a job pre-empted with a checkpoint resumes on another agent from it;
#   - restarts of cnlabd and of the agent: a running job is re-adopted and
#     runs on, once; a job that ended while cnlabd was down and the agent
#     restarting is reported by the next agent, and does not run again;
#     cnlabd unreachable past the lease: the agent stops the job, reports
#     it failed when cnlabd is back, and does not start it again;
#   - kill -9 of an agent: its job is requeued after the heartbeat timeout,
#     runs on another agent, and never runs twice (the job holds a lock
#     that a second live copy could not take); the agent comes back;
#   - a notebook server answers at its URL, is stopped when idle, and its
#     workspace survives a restart;
#   - a bad assignment (unknown MIG profile) is reported failed, and the
#     agent keeps running;
#   - the agent's /metrics passes promtool.
# Waits poll with generous bounds so a hang fails instead of blocking; no
# assertion depends on how fast the machine is.  The one product time that
# must cover a step of the test is the agents' lease (half the node-lost
# timeout, 15 s here): work outlives a restart of cnlabd or of an agent only
# if the restart ends within it (else it is stopped, by design).  So each
# such restart begins just after a heartbeat renewed the lease, and the
# lease is far longer than a restart takes on a loaded machine (cnlabd under
# ASan on two busy cores was seen to take 4.6 s).
set -u
cnlabd=$1
agent=$2
region_tool=${3:-}
tmp=$(mktemp -d)
run=it$$ # agent names, and so cgroup roots, unique to this run
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	# Workloads of killed agents stop on their own (lease); make sure.
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
	done
	sleep 0.3
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	# Servers' workspace volumes stay mounted for the agent's next start;
	# this test's go with it (deepest first).
	awk -v t="$tmp/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo |
		sort -r | xargs -r -n1 umount -l
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# What the test and its jobs share: a node folder every container mounts
# at /shared (the agents' mounts setting); the containers' users must reach
# and write it.
shared=$tmp/shared
mkdir -p "$shared"
chmod 755 "$tmp"
chmod 1777 "$shared"
export CNLAB_JWT_SECRET=agent-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
cat >"$tmp/cnlabd.conf" <<CONF
node_lost_timeout = 30s
cycle_interval = 200ms
preempt_min_run = 1ms
preempt_grace = 3s
CONF
"$cnlabd" --config "$tmp/cnlabd.conf" --data-dir "$tmp/db" \
	--listen 127.0.0.1:0 --bootstrap-admin root >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
cpid=$!
pids+=($cpid)
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
sys=$(api GET /v1/projects "$root" | jq -r '.items[] | select(.name=="system") | .id')
# Each agent joins with a one-time join token made for its node name.
jointok() { api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$1\"}" | jq -r .token; }
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)

# start_agent NAME POOL: a cnlab-agent on a fake pool; sets apid.  No
# outage grace (--outage-grace 0s): cnlabd's lease alone, which the test
# of an outage past it below needs (outage.sh tests the grace).
start_agent() {
	local before
	before=$(grep -c 'msg=registered' "$tmp/agent-$1.err" 2>/dev/null)
	CNLAB_AGENT_TOKEN=$(jointok "$run-$1") "$agent" --server "$base" --name "$run-$1" \
		--gpus "$2" --work-dir "$tmp/agent-$1" --cpu-milli 8000 \
		--mem-mib 16384 --listen 127.0.0.1:0 --log-level info \
		--outage-grace 0s \
		--server-command 'mkdir -p $CNLAB_WORKSPACE/s && ln -sfn $CNLAB_WORKSPACE $CNLAB_WORKSPACE${CNLAB_BASE_URL%/} && exec python3 -m http.server $CNLAB_PORT --bind 127.0.0.1 --directory $CNLAB_WORKSPACE' \
		--mounts "$shared:/shared" \
		>>"$tmp/agent-$1.out" 2>>"$tmp/agent-$1.err" &
	apid=$!
	pids+=($apid)
	wait_for 10 sh -c "[ \$(grep -c 'msg=registered' '$tmp/agent-$1.err') -gt ${before:-0} ]"
}
# renewed NAME: wait until a heartbeat of agent NAME renews its lease (the
# file its workloads' watchdogs check), so that what follows has all of it.
renewed() {
	local f=$tmp/agent-$1/lease t
	t=$(stat -c %y "$f")
	wait_for 30 sh -c "[ \"\$(stat -c %y '$f')\" != '$t' ]"
}
submit() { # submit BODY -> job id
	api POST "/v1/projects/$proj/jobs" "$ana" "$1" | jq -r .id
}
state() { api GET "/v1/jobs/$1" "$ana" | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
logs() { api GET "/v1/jobs/$1/logs?limit=1000" "$ana" | jq -r '.items[].data' | tr -d '\n'; }

start_agent a fake:1xH100-80GB-SXM || bad "agent a did not register: $(cat "$tmp/agent-a.err")"
a_pid=$apid

# --- a job runs; output streams while it runs; artifact comes back -------
j=$(submit "{\"command\":\"echo started; echo oops >&2; while [ ! -e /shared/go ]; do sleep 0.1; done; echo done; echo weights > \$CNLAB_ARTIFACTS_DIR/model.txt\",\"gpu\":\"h100-10\"}")
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$j/logs | grep -q started" &&
	is_state "$j" running && ok "output streams while the job runs" ||
	bad "streaming: $(state "$j") $(logs "$j")"
touch "$shared/go"
wait_for 20 is_state "$j" succeeded && ok "job succeeded" || bad "job: $(api GET "/v1/jobs/$j" "$ana")"
l=$(logs "$j")
[[ "$l" == *started*done* && "$l" == *oops* ]] && ok "stdout and stderr kept" || bad "logs: $l"
art=$(curl -sS -H "Authorization: Bearer $ana" "$base/v1/jobs/$j/artifact?path=model.txt")
[ "$art" = weights ] && ok "artifact came back" || bad "artifact: $art"

# --- nothing to do: the supervise thread sleeps ---------------------------
# It waits on events (pidfds, inotify, an eventfd) and its deadlines, with a
# one-second backstop; the loop it replaced woke every 100 ms (30 times in
# these 3 s).  Its voluntary context switches count its wake-ups.
sup_switches() {
	for t in /proc/"$a_pid"/task/*; do
		[ "$(cat "$t/comm" 2>/dev/null)" = cnl-supervise ] &&
			sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' "$t/status"
	done
}
s0=$(sup_switches)
sleep 3
s1=$(sup_switches)
[ -n "$s0" ] && [ -n "$s1" ] && [ $((s1 - s0)) -le 8 ] &&
	ok "idle, the supervise thread woke $((s1 - s0)) times in 3 s" ||
	bad "supervise thread wake-ups in 3 s idle: '$s0' -> '$s1'"

# --- two jobs on one GPU: own regions, own limits ---------------------------
# Held until their regions are read: a region goes when its job ends.
hold="while [ ! -e /shared/go1 ]; do sleep 0.1; done"
j1=$(submit "$(jq -cn --arg c "echo R=\$CNLAB_REGION G=\$CUDA_VISIBLE_DEVICES; $hold" '{command:$c,gpu:"h100-10"}')")
j2=$(submit "$(jq -cn --arg c "echo R=\$CNLAB_REGION G=\$CUDA_VISIBLE_DEVICES; $hold" '{command:$c,gpu:"h100-5"}')")
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$j1/logs | grep -q R=" &&
	wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$j2/logs | grep -q R="
r1=$(logs "$j1" | sed -n 's/.*R=\([^ ]*\) .*/\1/p')
r2=$(logs "$j2" | sed -n 's/.*R=\([^ ]*\) .*/\1/p')
[ -n "$r1" ] && [ -n "$r2" ] && [ "$r1" != "$r2" ] && ok "own regions" || bad "regions: $r1 / $r2"
if [ -n "$region_tool" ] && [ -f "$r1" ] && [ -f "$r2" ]; then
	s1=$("$region_tool" stat "$r1")
	s2=$("$region_tool" stat "$r2")
	# H100 80 GB: 10% and 5% of 81559 MiB.
	grep -q '^share_pct=10$' <<<"$s1" && grep -q '^share_pct=5$' <<<"$s2" &&
		ok "compute shares 10 and 5" || bad "shares: $s1 / $s2"
	q1=$(sed -n 's/^quota=//p' <<<"$s1")
	q2=$(sed -n 's/^quota=//p' <<<"$s2")
	[ "$q1" -gt 0 ] && [ "$q2" -gt 0 ] && [ "$q1" -gt "$q2" ] &&
		ok "VRAM quotas ($q1 > $q2 bytes)" || bad "quotas: $q1 / $q2"
else
	bad "region files not readable ($r1, $r2) or no region tool"
fi
touch "$shared/go1"
wait_for 20 is_state "$j1" succeeded && wait_for 20 is_state "$j2" succeeded ||
	bad "region jobs did not finish"

# --- over its memory limit: killed by the cgroup, reported -----------------
j=$(submit '{"command":"head -c 400000000 /dev/zero | tail > /dev/null","gpu":"h100-1","mem_mib":64}')
wait_for 40 is_state "$j" failed && ok "memory hog failed" || bad "memory hog: $(api GET "/v1/jobs/$j" "$ana")"
msg=$(api GET "/v1/jobs/$j" "$ana" | jq -r .message)
[[ "$msg" == *out-of-memory* ]] && ok "reported as out of memory" || bad "oom message: $msg"

# --- a command that does not exist: failed, with the shell's reason -------
j=$(submit '{"command":"no-such-command-xyz","gpu":"h100-1"}')
wait_for 20 is_state "$j" failed && [[ "$(logs "$j")" == *not\ found* ]] &&
	[ "$(api GET "/v1/jobs/$j" "$ana" | jq .exit_code)" = 127 ] &&
	ok "command not found: failed (127) with the reason" || bad "not found: $(api GET "/v1/jobs/$j" "$ana") $(logs "$j")"

# --- restarts of cnlabd and of the agent: the work goes on ----------------
j=$(submit "{\"command\":\"echo before; while [ ! -e /shared/go2 ]; do sleep 0.1; done; echo after\",\"gpu\":\"h100-10\"}")
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$j/logs | grep -q before" ||
	bad "restart job did not start"
renewed a || bad "lease not renewed before the cnlabd restart"
kill -TERM "$cpid"
wait "$cpid"
"$cnlabd" --config "$tmp/cnlabd.conf" --data-dir "$tmp/db" \
	--listen "127.0.0.1:$port" >"$tmp/cnlabd2.out" 2>>"$tmp/cnlabd.err" &
cpid=$!
pids+=($cpid)
wait_for 10 grep -q '^listening on' "$tmp/cnlabd2.out" && ok "cnlabd restarted on its port" ||
	bad "cnlabd restart: $(tail -3 "$tmp/cnlabd.err")"
renewed a || bad "lease not renewed by the restarted cnlabd"
kill -TERM "$a_pid"
wait "$a_pid"
start_agent a fake:1xH100-80GB-SXM || bad "agent a restart"
a_pid=$apid
# Logged just after "registered": wait for it.
wait_for 10 grep -q "re-adopted workload\" id=$j" "$tmp/agent-a.err" && ok "restarted agent re-adopted the job" ||
	bad "no re-adoption: $(tail -5 "$tmp/agent-a.err")"
touch "$shared/go2"
wait_for 30 is_state "$j" succeeded && ok "job survived both restarts" || bad "after restarts: $(api GET "/v1/jobs/$j" "$ana")"
l=$(logs "$j")
[ "$l" = beforeafter ] && ok "output after the restart arrived; the job ran once" || bad "logs after restart: $l"

# restart_cnlabd: start it again on its port (after it was stopped).
restart_cnlabd() {
	: >"$tmp/cnlabd2.out"
	"$cnlabd" --config "$tmp/cnlabd.conf" --data-dir "$tmp/db" \
		--listen "127.0.0.1:$port" >>"$tmp/cnlabd2.out" 2>>"$tmp/cnlabd.err" &
	cpid=$!
	pids+=($cpid)
	wait_for 10 grep -q '^listening on' "$tmp/cnlabd2.out"
}

# --- a job ends while cnlabd is down and the agent restarts ----------------
# The stopping agent could not report the end; the next one must find the
# job (its cgroup and exit record) and report it, not start it again.
j=$(submit "{\"command\":\"echo x >> /shared/ran3; while [ ! -e /shared/go3 ]; do sleep 0.1; done\",\"gpu\":\"h100-10\"}")
wait_for 20 is_state "$j" running && wait_for 20 sh -c "[ -s $shared/ran3 ]" || bad "job 3 did not start"
kill -TERM "$cpid"
wait "$cpid"
touch "$shared/go3"
wait_for 20 grep -q "workload ended\" id=$j" "$tmp/agent-a.err" || bad "job 3 did not end"
kill -TERM "$a_pid"
wait "$a_pid"
restart_cnlabd || bad "cnlabd restart 2: $(tail -3 "$tmp/cnlabd.err")"
start_agent a fake:1xH100-80GB-SXM || bad "agent a restart 2"
a_pid=$apid
wait_for 30 is_state "$j" succeeded && ok "an end seen by the stopped agent is reported by the next" ||
	bad "ended while down: $(api GET "/v1/jobs/$j" "$ana") $(tail -5 "$tmp/agent-a.err")"
[ "$(wc -l <"$shared/ran3")" = 1 ] && [ "$(grep -c "workload started\" id=$j " "$tmp/agent-a.err")" = 1 ] &&
	ok "a job ended while the agent restarted does not run again" ||
	bad "ended while down ran $(wc -l <"$shared/ran3") times: $(grep "id=$j " "$tmp/agent-a.err")"

# --- cnlabd unreachable past the lease: stopped, reported, not restarted ---
j=$(submit "{\"command\":\"echo x >> /shared/ran4; while :; do sleep 0.1; done\",\"gpu\":\"h100-10\"}")
wait_for 20 is_state "$j" running && wait_for 20 sh -c "[ -s $shared/ran4 ]" || bad "job 4 did not start"
# Waits for the GPU job 4 holds: it starts as soon as cnlabd is back and
# job 4's end is reported, maybe before a heartbeat renewed the lease.
j5=$(submit '{"command":"echo five","gpu":"h100-full"}')
kill -TERM "$cpid"
wait "$cpid"
# Its lease (15 s) runs out: the agent, or the job's watchdog, stops it.
wait_for 60 grep -q "workload ended\" id=$j" "$tmp/agent-a.err" || bad "job 4 not stopped by the lease"
restart_cnlabd || bad "cnlabd restart 3: $(tail -3 "$tmp/cnlabd.err")"
wait_for 30 is_state "$j" failed && ok "work stopped by the lease is reported failed" ||
	bad "lease stop: $(api GET "/v1/jobs/$j" "$ana")"
# A second start would die at once (the lease is still old), maybe before
# its first line: count the agent's starts too.
[ "$(wc -l <"$shared/ran4")" = 1 ] && [ "$(grep -c "workload started\" id=$j " "$tmp/agent-a.err")" = 1 ] &&
	ok "work stopped by the lease is not started again" ||
	bad "lease stop: ran $(wc -l <"$shared/ran4") times: $(grep "id=$j " "$tmp/agent-a.err")"
wait_for 30 is_state "$j5" succeeded && [ "$(logs "$j5")" = five ] &&
	ok "work assigned after the outage is not killed by the old lease" ||
	bad "after the outage: $(api GET "/v1/jobs/$j5" "$ana") $(logs "$j5")"
for x in "$j" "$j5"; do # the GPU for what follows, after a failure too
	api POST "/v1/jobs/$x/cancel" "$ana" '{}' >/dev/null
done

# --- a bad assignment fails with a reason; the agent goes on --------------
# CPU beyond any node could never run: refused at submission (422, the
# reason; admission.sh has the other cases), nothing queued.
out=$(api POST "/v1/projects/$proj/jobs" "$ana" '{"command":"true","gpu":"cpu","cpu_milli":999999}')
[ "$(jq -r .error.code <<<"$out")" = unsatisfiable ] && grep -q "cpu_milli 999999 asked" <<<"$out" &&
	ok "a job no node could ever run is refused at submission" || bad "unplaceable: $out"

# --- pre-emption with checkpoint, resume on another agent -------------------
ck='n=0; [ -f $CNLAB_CHECKPOINT_DIR/step ] && n=$(cat $CNLAB_CHECKPOINT_DIR/step); echo resumed-from-$n; trap "echo $((n+7)) > $CNLAB_CHECKPOINT_DIR/step; exit 143" TERM; while :; do sleep 0.1; done'
low=$(submit "$(jq -cn --arg c "$ck" '{command:$c,gpu:"h100-full",priority:"low"}')")
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$low/logs | grep -q resumed-from-0" ||
	bad "low job did not start: $(api GET "/v1/jobs/$low" "$ana")"
hi=$(submit '{"command":"echo urgent","gpu":"h100-full","priority":"critical"}')
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$low | jq -e '.state==\"pending\"' >/dev/null" &&
	ok "low job pre-empted and requeued" || bad "pre-emption: $(api GET "/v1/jobs/$low" "$ana")"
wait_for 30 is_state "$hi" succeeded && ok "critical job ran" || bad "critical: $(api GET "/v1/jobs/$hi" "$ana")"
start_agent b fake:1xH100-80GB-SXM || bad "agent b"
b_pid=$apid
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' '$base/v1/jobs/$low/logs?limit=1000' | grep -q resumed-from-7" &&
	ok "resumed from its checkpoint" || bad "resume: $(logs "$low")"
api POST "/v1/jobs/$low/cancel" "$ana" '{}' >/dev/null
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$low | jq -e '.state==\"cancelled\"' >/dev/null" ||
	bad "cancel: $(state "$low")"

# --- kill -9 of an agent: requeued, never twice -----------------------------
touch "$shared/lock"
chmod 666 "$shared/lock" # the jobs run as their users, not root
once="exec 9>/shared/lock; if ! flock -n 9; then echo DOUBLE >> /shared/double; exit 1; fi; echo start >> /shared/starts; while :; do sleep 0.2; done"
jk=$(submit "$(jq -cn --arg c "$once" '{command:$c,gpu:"h100-full"}')")
wait_for 20 sh -c "[ -s $shared/starts ]" || bad "lock job did not start"
node=$(api GET "/v1/jobs/$jk" "$ana" | jq -r .status.node)
victim=$a_pid
[ "$node" = "$run-b" ] && victim=$b_pid
kill -9 "$victim"
wait_for 90 sh -c "[ \$(wc -l < $shared/starts) -ge 2 ]" &&
	ok "requeued and started elsewhere after the timeout" ||
	bad "requeue: $(api GET "/v1/jobs/$jk" "$ana") $(cat "$shared/starts")"
[ ! -e "$shared/double" ] && ok "never ran twice" || bad "ran twice"
# The lost agent comes back: its old copy is gone, nothing restarts there.
if [ "$node" = "$run-b" ]; then start_agent b fake:1xH100-80GB-SXM; else start_agent a fake:1xH100-80GB-SXM; fi
sleep 2
[ "$(wc -l <"$shared/starts")" = 2 ] && [ ! -e "$shared/double" ] &&
	ok "returning agent does not run it again" || bad "after return: $(cat "$shared/starts")"
api POST "/v1/jobs/$jk/cancel" "$ana" '{}' >/dev/null
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/jobs/$jk | jq -e '.state==\"cancelled\"' >/dev/null" ||
	bad "cancel lock job: $(state "$jk")"

# --- a notebook server: URL, idle stop, workspace kept ---------------------
if command -v python3 >/dev/null; then
	srv=$(api POST "/v1/projects/$proj/servers" "$ana" '{"name":"nb","image":"host","profile":"h100-25pct","idle_timeout_s":4}' | jq -r .id)
	sstate() { api GET "/v1/servers/$srv" "$ana" | jq -r .state; }
	wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/servers/$srv | jq -e '.state==\"running\"' >/dev/null" ||
		bad "server not running: $(api GET "/v1/servers/$srv" "$ana")"
	url=$(api GET "/v1/servers/$srv" "$ana" | jq -r .url)
	wait_for 20 curl -sSf -o /dev/null "$url" && ok "server answers at $url" || bad "server url $url"
	ws=$(ls -d "$tmp"/agent-*/workspaces/"$srv" 2>/dev/null | head -1)
	echo notebook-data >"$ws/notes.txt"
	wait_for 40 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/servers/$srv | jq -e '.state==\"stopped\"' >/dev/null" &&
		ok "idle server stopped" || bad "idle stop: $(sstate)"
	api POST "/v1/servers/$srv/start" "$ana" '{}' >/dev/null
	wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $ana' $base/v1/servers/$srv | jq -e '.state==\"running\"' >/dev/null"
	url=$(api GET "/v1/servers/$srv" "$ana" | jq -r .url)
	body=""
	[[ "$url" == *"?token="???????????????????????????????? ]] && ok "server URL carries an access token" || bad "url: $url"
	base_url=${url%%\?*}
	# Through cnlabd's proxy, which passes the path whole (/s/ID/...):
	# the server command links that prefix to the workspace.
	wait_for 20 sh -c "curl -sSf -H 'Authorization: Bearer $ana' '${base_url}notes.txt' >/dev/null" &&
		body=$(curl -sS -H "Authorization: Bearer $ana" "${base_url}notes.txt")
	[ "$body" = notebook-data ] && ok "workspace survives stop and start" || bad "workspace: $body"
	api POST "/v1/servers/$srv/stop" "$ana" '{}' >/dev/null
else
	bad "python3 missing (scripts/bootstrap installs it)"
fi

# --- metrics ---------------------------------------------------------------
mport=$(grep -ho 'msg=metrics listen=127.0.0.1:[0-9]*' "$tmp"/agent-a.err | tail -1 | sed 's/.*://')
if [ -n "$mport" ] && command -v promtool >/dev/null; then
	curl -sS "http://127.0.0.1:$mport/metrics" >"$tmp/m.txt"
	# promtool's one complaint may be the camelCase label modelName of
	# the DCGM families, which is DCGM exporter's own label name.
	out=$(promtool check metrics <"$tmp/m.txt" 2>&1 |
		grep -v "^DCGM_FI_[A-Z_]* label names should be written in 'snake_case' not 'camelCase'$")
	[ -z "$out" ] && grep -q cnlab_agent_workloads "$tmp/m.txt" &&
		grep -q '^DCGM_FI_DEV_FB_TOTAL{gpu="0",' "$tmp/m.txt" &&
		ok "agent /metrics passes promtool" || bad "agent metrics: $out"
else
	bad "agent metrics port not found or promtool missing"
fi

# --- map_users: work runs as the local account of its submitter ----------
for n in $run-a $run-b; do
	id=$(api GET /v1/nodes "$root" | jq -r ".items[] | select(.name==\"$n\") | .id")
	api PATCH "/v1/nodes/$id" "$root" '{"state":"cordoned"}' >/dev/null
done
api POST /v1/users "$root" '{"name":"nobody","password":"nobody-password"}' >/dev/null
api POST "/v1/projects/$proj/members" "$root" '{"user":"nobody","role":"member"}' >/dev/null
nob=$(login nobody nobody-password)
chmod 755 "$tmp" # the account must reach its job directory
CNLAB_AGENT_TOKEN=$(jointok $run-c) "$agent" --server "$base" --name $run-c --gpus fake:1xH100-80GB-SXM \
	--work-dir "$tmp/agent-c" --isolation bare --map-users true >>"$tmp/agent-c.out" 2>>"$tmp/agent-c.err" &
pids+=($!)
wait_for 10 grep -q 'msg=registered' "$tmp/agent-c.err" || bad "agent c"
jn=$(api POST "/v1/projects/$proj/jobs" "$nob" '{"command":"id -u","gpu":"h100-1"}' | jq -r .id)
ja=$(submit '{"command":"id -u","gpu":"h100-1"}')
wait_for 30 is_state "$jn" succeeded && [ "$(logs "$jn")" = 65534 ] &&
	ok "map_users: ran as the local account nobody (65534)" || bad "map_users: $(api GET "/v1/jobs/$jn" "$ana") $(logs "$jn")"
wait_for 30 is_state "$ja" failed && [[ "$(api GET "/v1/jobs/$ja" "$ana" | jq -r .message)" == *"no local account"* ]] &&
	ok "map_users: a user without a local account is refused, not run as root" ||
	bad "map_users refusal: $(api GET "/v1/jobs/$ja" "$ana")"

# --- run_as_uid: every workload as one unprivileged uid, in its own folder -------
id=$(api GET /v1/nodes "$root" | jq -r ".items[] | select(.name==\"$run-c\") | .id")
api PATCH "/v1/nodes/$id" "$root" '{"state":"cordoned"}' >/dev/null
CNLAB_AGENT_TOKEN=$(jointok $run-d) "$agent" --server "$base" --name $run-d --gpus fake:1xH100-80GB-SXM \
	--work-dir "$tmp/agent-d" --isolation bare --run-as-uid 65534 >>"$tmp/agent-d.out" 2>>"$tmp/agent-d.err" &
pids+=($!)
wait_for 10 grep -q 'msg=registered' "$tmp/agent-d.err" || bad "agent d"
jd=$(submit '{"command":"id -u; pwd; echo x > mine && cat mine","gpu":"h100-1"}')
wait_for 30 is_state "$jd" succeeded && [[ "$(logs "$jd")" == 65534*/jobs/"$jd"x ]] &&
	ok "run_as_uid: runs as 65534, in a working folder that is its own" ||
	bad "run_as_uid: $(api GET "/v1/jobs/$jd" "$ana") $(logs "$jd")"

[ "$fails" = 0 ] || {
	echo "--- agent a"; tail -30 "$tmp/agent-a.err"
	echo "--- agent b"; tail -30 "$tmp/agent-b.err" 2>/dev/null
	echo "--- cnlabd"; tail -30 "$tmp/cnlabd.err"
	exit 1
}
