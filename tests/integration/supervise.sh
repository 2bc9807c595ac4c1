#!/usr/bin/env bash
# supervise.sh - the all-in-one's embedded agent under faults, for real
# (issue 17): a job that prints numbered lines while it sleeps, and
#   1. kill -9 of cnlabd --all-in-one mid-job, then a start again on the
#      same port and data directory: exactly one agent process for the
#      node, the job ends succeeded (never failed/127), and its log holds
#      each line exactly once;
#   2. a stray cnlab-agent holding the node's work directory (an orphan of
#      an earlier run) when cnlabd starts: it is stopped first, never two
#      agents; a second agent on a held work directory refuses to start;
#   3. the embedded agent killed alone mid-job: /healthz says degraded
#      (503), the agent comes back by itself, /healthz says ok again, the
#      job ends succeeded with each line once;
#   4. the embedded agent stopped (kill -STOP): alive but silent, /healthz
#      says degraded (503) once its lease has run out, ok after SIGCONT;
#   5. a second cnlabd --all-in-one on the same data directory while the
#      first runs: it refuses to start (naming the first one's pid), and
#      the first one's agent is left alone.
# Waits poll with generous bounds so that a hang fails; no assertion
# depends on how fast the machine is.
set -u
cnlabd=$1
agent=$2
tmp=$(mktemp -d)
pid=
stray=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[ -n "$stray" ] && kill -9 "$stray" 2>/dev/null
	# What the agents left running (their jobs' supervisors).
	for p in $(pgrep -x cnlab-agent); do
		{ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -q -- "$tmp/" &&
			kill -9 "$p" 2>/dev/null
	done
	sleep 0.3
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
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD
listen=127.0.0.1:0
start() {
	: >"$tmp/out"
	HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" \
		--listen "$listen" --gpus fake:2xH100-80GB-SXM >"$tmp/out" 2>>"$tmp/err" &
	pid=$!
	wait_for 20 grep -q 'CNLab is running' "$tmp/out" || return 1
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
	listen=${url#http://}
}
# The agent processes of this node: cnlab-agent on our data directory,
# not one of its workloads' supervisors (forks of it, in a workload's
# cgroup under cnlab/).
agents() {
	for p in $(pgrep -x cnlab-agent); do
		{ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -q -- "--work-dir $tmp/data/agent" || continue
		grep -q '/cnlab/' "/proc/$p/cgroup" 2>/dev/null && continue
		echo "$p"
	done
}
n_agents() { agents | wc -l; }
one_agent() { [ "$(n_agents)" = 1 ]; }
healthz() { curl -sS -o "$tmp/hz" -w '%{http_code}' "$url/healthz"; }

start || { bad "start: $(cat "$tmp/err")"; exit 1; }
pw=$(cat "$tmp/data/admin.password")
login() { tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$pw\"}" "$url/v1/auth/login" | jq -r .token); }
login
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $tok' $url/v1/nodes | jq -e '.items | length == 1' >/dev/null" ||
	bad "the embedded agent did not register"
[ "$(healthz)" = 200 ] && jq -e '.status == "ok" and .agent == "up"' "$tmp/hz" >/dev/null &&
	ok "/healthz: ok, agent up" || bad "healthz: $(cat "$tmp/hz")"
proj=$(api GET /v1/projects | jq -r '.items[] | select(.name != "system") | .id' | head -1)
# A job of N numbered lines, one each 0.3 s.
submit() { # submit N
	local c="for i in \$(seq 1 $1); do echo line-\$i; sleep 0.3; done"
	api POST "/v1/projects/$proj/jobs" "$(jq -cn --arg c "$c" '{command:$c,gpu:"h100-10"}')" | jq -r .id
}
state() { api GET "/v1/jobs/$1" | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
logs() { api GET "/v1/jobs/$1/logs?limit=1000" | jq -r '.items[] | select(.stream == "stdout") | .data' | tr -d '\n'; }
# each_once JOB N: its stdout is line-1 .. line-N, each exactly once.
each_once() {
	local want
	want=$(for i in $(seq 1 "$2"); do printf 'line-%s' "$i"; done)
	[ "$(logs "$1")" = "$want" ]
}

# --- 1. kill -9 of cnlabd --all-in-one mid-job ----------------------------
j=$(submit 40)
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $tok' '$url/v1/jobs/$j/logs' | grep -q line-3" ||
	bad "job 1 did not start: $(api GET "/v1/jobs/$j")"
is_state "$j" running && ok "the job runs when cnlabd is killed" || bad "job 1 not running: $(state "$j")"
old_agent=$(agents)
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=
# Its agent goes with it (the death signal); the job runs on meanwhile.
wait_for 20 sh -c "! kill -0 $old_agent 2>/dev/null" && ok "the agent went with its killed cnlabd" ||
	bad "agent $old_agent outlived cnlabd"
start || bad "restart after kill -9: $(tail -5 "$tmp/err")"
login
wait_for 20 one_agent && ok "one agent process for the node after the restart" ||
	bad "agents after restart: $(agents | tr '\n' ' ')"
wait_for 60 sh -c "curl -sS -H 'Authorization: Bearer $tok' '$url/v1/jobs/$j' | jq -e '.state != \"running\" and .state != \"pending\" and .state != \"assigned\"' >/dev/null"
st=$(api GET "/v1/jobs/$j")
jq -e '.state == "succeeded" and .exit_code == 0' <<<"$st" >/dev/null &&
	ok "the job ended succeeded across the kill -9" || bad "job 1: $st"
jq -e '.exit_code != 127' <<<"$st" >/dev/null && ok "never 127" || bad "job 1 ended 127: $st"
each_once "$j" 40 && ok "its log holds each line exactly once" || bad "job 1 log: $(logs "$j")"
[ "$(n_agents)" = 1 ] && ok "still one agent" || bad "agents: $(agents | tr '\n' ' ')"

# --- 2. a stray agent on the node's work directory ------------------------
kill -TERM "$pid"
wait "$pid"
pid=
CNLAB_AGENT_TOKEN=not-a-token "$agent" --server http://127.0.0.1:9 --name stray \
	--gpus fake:2xH100-80GB-SXM --work-dir "$tmp/data/agent" >"$tmp/stray.out" 2>&1 &
stray=$!
wait_for 20 grep -q unreachable "$tmp/stray.out" || bad "stray agent: $(cat "$tmp/stray.out")"
CNLAB_AGENT_TOKEN=not-a-token "$agent" --server http://127.0.0.1:9 --name second \
	--gpus fake:2xH100-80GB-SXM --work-dir "$tmp/data/agent" >"$tmp/second.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "another cnlab-agent (pid $stray)" "$tmp/second.out" &&
	ok "a second agent on a held work directory refuses to start" ||
	bad "second agent: rc $rc $(cat "$tmp/second.out")"
start || bad "start with a stray agent: $(tail -5 "$tmp/err")"
login
wait_for 20 sh -c "! kill -0 $stray 2>/dev/null" && grep -q 'stopped the embedded agent of an earlier run" pid='"$stray" "$tmp/err" &&
	ok "cnlabd stopped the stray agent before starting its own" ||
	bad "stray: $(grep -i stray "$tmp/err" | tail -3)"
wait "$stray" 2>/dev/null
stray=
wait_for 20 one_agent && ok "then one agent" || bad "agents: $(agents | tr '\n' ' ')"

# --- 3. the embedded agent killed alone -----------------------------------
wait_for 20 sh -c "curl -sS -H 'Authorization: Bearer $tok' $url/v1/nodes | jq -e '.items[0].state == \"up\"' >/dev/null"
j=$(submit 30)
wait_for 30 sh -c "curl -sS -H 'Authorization: Bearer $tok' '$url/v1/jobs/$j/logs' | grep -q line-3" ||
	bad "job 2 did not start: $(api GET "/v1/jobs/$j")"
a1=$(agents)
kill -9 "$a1"
# Restarts come after a backoff of at least a second: polled every 0.2 s,
# the down time shows.
wait_for 10 sh -c "[ \"\$(curl -sS -o '$tmp/hz' -w '%{http_code}' '$url/healthz')\" = 503 ]" &&
	jq -e '.status == "degraded" and .agent == "down"' "$tmp/hz" >/dev/null &&
	ok "/healthz: 503 degraded while the agent is down" || bad "healthz while down: $(cat "$tmp/hz")"
wait_for 30 sh -c "[ \"\$(curl -sS -o '$tmp/hz' -w '%{http_code}' '$url/healthz')\" = 200 ]" &&
	jq -e '.status == "ok" and .agent == "up"' "$tmp/hz" >/dev/null &&
	ok "/healthz: ok again" || bad "healthz after: $(cat "$tmp/hz")"
wait_for 20 one_agent && a2=$(agents) && [ "$a2" != "$a1" ] &&
	ok "the agent came back by itself (pid $a1 -> $a2)" || bad "agent back: $(agents | tr '\n' ' ')"
grep -q 'embedded agent died; restarting" pid='"$a1" "$tmp/err" && ok "its death is logged" ||
	bad "no log of the death: $(tail -3 "$tmp/err")"
wait_for 60 is_state "$j" succeeded && ok "the job it ran ended succeeded" || bad "job 2: $(api GET "/v1/jobs/$j")"
each_once "$j" 30 && ok "its log holds each line exactly once" || bad "job 2 log: $(logs "$j")"

# --- 4. the embedded agent stopped (SIGSTOP): alive, but no node ------------
a2=$(agents)
kill -STOP "$a2"
# Its node is silent past the lease (15 s by default): degraded.
wait_for 60 sh -c "[ \"\$(curl -sS -o '$tmp/hz' -w '%{http_code}' '$url/healthz')\" = 503 ]" &&
	jq -e '.status == "degraded"' "$tmp/hz" >/dev/null &&
	grep -q 'embedded agent unresponsive" pid='"$a2" "$tmp/err" &&
	ok "/healthz: 503 degraded while the agent is stopped" || bad "healthz while stopped: $(cat "$tmp/hz")"
kill -CONT "$a2"
wait_for 60 sh -c "[ \"\$(curl -sS -o '$tmp/hz' -w '%{http_code}' '$url/healthz')\" = 200 ]" &&
	ok "/healthz: ok again once it heartbeats" || bad "healthz after SIGCONT: $(cat "$tmp/hz")"

# --- 5. a second cnlabd --all-in-one on the same data directory -------------
a3=$(agents)
out=$(HOME=$tmp/home timeout 60 "$cnlabd" --all-in-one --data-dir "$tmp/data" \
	--listen 127.0.0.1:0 --gpus fake:2xH100-80GB-SXM 2>&1)
rc=$?
[ $rc = 1 ] && grep -q "another cnlabd (pid $pid) runs on $tmp/data" <<<"$out" &&
	ok "a second all-in-one on the same data directory refuses to start, naming the first" ||
	bad "second all-in-one: rc=$rc $out"
[ "$(agents)" = "$a3" ] && [ "$(healthz)" = 200 ] &&
	ok "the first one's agent runs on untouched" || bad "after the second start: agents $(agents | tr '\n' ' '), healthz $(cat "$tmp/hz")"
[ "$(n_agents)" = 1 ] && ok "one agent at the end" || bad "agents: $(agents | tr '\n' ' ')"
[ "$fails" = 0 ] || exit 1
