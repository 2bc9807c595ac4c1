#!/usr/bin/env bash
# node_identity.sh - node credentials bound to one node, attacked for
# real: a real cnlabd on loopback (real SQLite) and two real cnlab-agent
# processes, A (an H100 node, which runs the job) and B (an L40S node):
#   - B's credential (read from B's credential file, as a thief of node B
#     would) tries to read A's assignments, inputs and checkpoints, append
#     logs to and report the end of A's job, upload its artifacts and
#     checkpoints, record a GPU memory kill of it, heartbeat as A (or claim
#     A's job in its own heartbeat), open A's tunnels, fetch blobs through A and register as A: all
#     refused (403), and on B's own routes naming A's job, fenced (409);
#     an administrator's token is refused on node routes too; afterwards
#     the job runs on A untouched and ends succeeded with its own output;
#   - join tokens: a used one, an expired one, and one for another name
#     are refused (401, 401, 403);
#   - rotation (SIGHUP on A while its job runs; B every 2 s): the old
#     credential works during the overlap and dies after; the job goes on;
#   - revocation: the revoked node's next request is 401, the node is
#     lost and its running job requeued; a new join token brings it back.
set -u
cnlabd=$1
agent=$2
tmp=$(mktemp -d)
run=nid$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
		sleep 0.3
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
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
wait_for() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG XDG_CONFIG_HOME
export CNLAB_JWT_SECRET=node-identity-integration-secret-0123456789
export CNLAB_ADMIN_PASSWORD=admin-password-1
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root \
	--cycle-interval 200ms --node-lost-timeout 6s \
	--node-credential-overlap 3s >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
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
code() { # code METHOD PATH TOKEN [BODY]: the status only
	curl -sS -o "$tmp/code.out" -w '%{http_code}' -X "$1" \
		-H "Authorization: Bearer $3" ${4:+-d "$4"} "$base$2"
}
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }
root=$(login root admin-password-1)
jointok() { # jointok NAME [SECONDS]
	api POST /v1/nodes/join-tokens "$root" \
		"{\"node\":\"$1\",\"expires_in_seconds\":${2:-3600}}" | jq -r .token
}
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)

# start_agent X POOL TOKEN FLAGS...: agent X (node $run-X); sets apid.
start_agent() {
	local x=$1 pool=$2 tok=$3 before
	shift 3
	before=$(grep -c 'msg=registered' "$tmp/agent-$x.err" 2>/dev/null)
	CNLAB_AGENT_TOKEN=$tok "$agent" --server "$base" --name "$run-$x" \
		--gpus "$pool" --work-dir "$tmp/$x" --cpu-milli 8000 \
		--mem-mib 16384 --log-level info "$@" \
		>>"$tmp/agent-$x.out" 2>>"$tmp/agent-$x.err" &
	apid=$!
	pids+=($apid)
	wait_for 10 sh -c "[ \$(grep -c 'msg=registered' '$tmp/agent-$x.err') -gt ${before:-0} ]"
}
cred() { cat "$tmp/$1/node.credential" 2>/dev/null; }
node_id() { api GET /v1/nodes "$root" | jq -r ".items[] | select(.name==\"$run-$1\") | .id"; }
node_state() { api GET /v1/nodes "$root" | jq -r ".items[] | select(.name==\"$run-$1\") | .state"; }
inv_a='{"protocol":5,"name":"'$run-a'","gpu_type":"H100-80GB-SXM","gpus":1,"cpu_milli":8000,"mem_mib":16384}'

jta=$(jointok "$run-a")
start_agent a fake:1xH100-80GB-SXM "$jta" --credential-rotate 0s ||
	bad "agent A did not register: $(cat "$tmp/agent-a.err")"
pida=$apid
start_agent b fake:1xL40S "$(jointok "$run-b")" --credential-rotate 2s ||
	bad "agent B did not register: $(cat "$tmp/agent-b.err")"
pidb=$apid
ida=$(node_id a)
idb=$(node_id b)
[[ "$(cred a)" == cnln_* ]] && [ "$(stat -c %a "$tmp/a/node.credential")" = 600 ] &&
	[[ "$(cred b)" == cnln_* ]] && [ "$(cred a)" != "$(cred b)" ] &&
	ok "each agent exchanged its join token for its own credential (0600)" ||
	bad "credential files: $(ls -l "$tmp/a" "$tmp/b")"

# --- join tokens -----------------------------------------------------------------
[ "$(code POST /v1/nodes "$jta" "$inv_a")" = 401 ] &&
	ok "a used join token is refused (401)" || bad "join token reuse: $(cat "$tmp/code.out")"
jtx=$(jointok "$run-x" 1)
sleep 2
[ "$(code POST /v1/nodes "$jtx" '{"protocol":5,"name":"'$run-x'","gpus":0,"cpu_milli":1,"mem_mib":1}')" = 401 ] &&
	ok "an expired join token is refused (401)" || bad "expired join token: $(cat "$tmp/code.out")"
jtc=$(jointok "$run-c")
[ "$(code POST /v1/nodes "$jtc" "$inv_a")" = 403 ] &&
	ok "a join token for node C does not register node A (403)" || bad "join as A: $(cat "$tmp/code.out")"
for name in "$run-C" " $run-c" "$run-c " "$run-c\u0301" "$run-ｃ"; do
	got=$(code POST /v1/nodes "$jtc" '{"protocol":5,"name":"'"$name"'","gpus":0,"cpu_milli":1,"mem_mib":1}')
	case $got in 400 | 403) ;; *) bad "join token for $run-c registers \"$name\": $got $(cat "$tmp/code.out")" ;; esac
done
got=$(code POST /v1/nodes "$jtc" '{"protocol":5,"name":"'$run-c'","gpus":0,"cpu_milli":1,"mem_mib":1}')
[ "$got" = 200 ] || [ "$got" = 201 ] &&
	ok "... nor a name that differs by case, space or unicode; its own name once" ||
	bad "join as C: $(cat "$tmp/code.out")"

# --- B's credential against A's job ------------------------------------------------
job=$(api POST "/v1/projects/$proj/jobs" "$ana" \
	'{"command":"echo begin; for i in $(seq 40); do echo tick $i; sleep 0.5; done; echo finished","gpu":"h100-10"}' | jq -r .id)
running() { [ "$(api GET "/v1/jobs/$job" "$ana" | jq -r .state)" = running ]; }
wait_for 20 running || bad "job did not start: $(api GET "/v1/jobs/$job" "$ana")"
[ "$(api GET "/v1/jobs/$job" "$ana" | jq -r .placement.node)" = "$run-a" ] &&
	ok "the job runs on A" || bad "placement: $(api GET "/v1/jobs/$job" "$ana")"
ep=$(api GET "/v1/nodes/$ida/assignments" "$(cred a)" | jq -r ".assignments[] | select(.id==\"$job\") | .epoch")
[ -n "$ep" ] && [ "$ep" != null ] && ok "A reads its own assignments" || bad "A's assignments: epoch $ep"

attack() { # attack WANT WHAT METHOD PATH [BODY]: as B, now
	local want=$1 what=$2 got
	shift 2
	got=$(code "$1" "$2" "$(cred b)" "${3:-}")
	[ "$got" = "$want" ] && ok "B: $what refused ($got)" || bad "B: $what: $got $(cat "$tmp/code.out")"
}
q="job=$job&epoch=$ep"
attack 403 "A's assignments" GET "/v1/nodes/$ida/assignments"
attack 403 "A's inputs" GET "/v1/nodes/$ida/inputs?$q"
attack 403 "an input file of A's job" GET "/v1/nodes/$ida/inputs/file?$q&path=x"
attack 403 "A's checkpoints" GET "/v1/nodes/$ida/checkpoints?$q"
attack 403 "a blob through A" GET "/v1/nodes/$ida/blobs/sha256:$(printf '0%.0s' $(seq 64))"
attack 403 "A's artifact upload" PUT "/v1/nodes/$ida/artifacts?$q&path=evil" x
attack 403 "logs appended to A's job" POST "/v1/nodes/$ida/logs" \
	"{\"id\":\"$job\",\"epoch\":$ep,\"stream\":\"stdout\",\"data\":\"forged-by-b\"}"
attack 403 "A's job's result" POST "/v1/nodes/$ida/reports" \
	"{\"id\":\"$job\",\"epoch\":$ep,\"state\":\"failed\",\"exit_code\":9}"
attack 403 "a heartbeat as A" POST "/v1/nodes/$ida/heartbeat" "{\"epoch\":1,\"running\":[]}"
attack 403 "a GPU memory kill recorded for A's job" POST "/v1/nodes/$ida/gpu-kills" "{\"id\":\"$job\",\"epoch\":$ep,\"pid\":4242,\"gpu\":0,\"used\":1,\"pid_used\":1,\"quota\":1}"
attack 403 "A's checkpoint upload" PUT "/v1/nodes/$ida/checkpoints?$q&path=evil" x
attack 403 "a checkpoint file of A's job" GET "/v1/nodes/$ida/checkpoints/file?$q&path=x"
attack 403 "A's tunnels" GET "/v1/nodes/$ida/tunnels?wait=0"
attack 403 "opening A's tunnel" POST "/v1/nodes/$ida/tunnels/tun_x"
attack 403 "rotating A's credential" POST "/v1/nodes/$ida/credential"
attack 403 "registering as A" POST /v1/nodes "$inv_a"
# On its own routes, naming A's work: fenced.
attack 409 "its own inputs route naming A's job" GET "/v1/nodes/$idb/inputs?$q"
attack 409 "its own logs route naming A's job" POST "/v1/nodes/$idb/logs" \
	"{\"id\":\"$job\",\"epoch\":$ep,\"stream\":\"stdout\",\"data\":\"forged-by-b\"}"
attack 409 "its own reports route naming A's job" POST "/v1/nodes/$idb/reports" \
	"{\"id\":\"$job\",\"epoch\":$ep,\"state\":\"failed\",\"exit_code\":9}"
attack 409 "its own gpu-kills route naming A's job" POST "/v1/nodes/$idb/gpu-kills" "{\"id\":\"$job\",\"epoch\":$ep,\"pid\":4242,\"gpu\":0,\"used\":1,\"pid_used\":1,\"quota\":1}"
attack 409 "its own checkpoints route naming A's job" PUT "/v1/nodes/$idb/checkpoints?$q&path=evil" x
attack 409 "its own artifacts route naming A's job" PUT "/v1/nodes/$idb/artifacts?$q&path=evil" x
# A heartbeat from B listing A's job under A's epoch: B is told to stop
# it, and A's job stays A's (checked at the end: it succeeds on A).
hb=$(api POST "/v1/nodes/$idb/heartbeat" "$(cred b)" "{\"running\":[{\"id\":\"$job\",\"epoch\":$ep}]}")
jq -e --arg j "$job" '.stop | index($j)' <<<"$hb" >/dev/null &&
	[ "$(api GET "/v1/jobs/$job" "$ana" | jq -r .placement.node)" = "$run-a" ] &&
	ok "B: a heartbeat claiming A's job is told to stop it; the job stays on A" ||
	bad "B's heartbeat claiming A's job: $hb"
[ "$(code GET "/v1/nodes/$ida/assignments" "$root")" = 403 ] &&
	ok "an administrator's token is refused on node routes (403)" || bad "admin on node route: $(cat "$tmp/code.out")"

# A node's credential and a join token are no user's token: refused on
# user routes (the notebook proxy asks the same check of a bearer token).
for r in "/v1/jobs/$job" "/v1/jobs/$job/logs" /v1/users /v1/projects /v1/nodes \
	/v1/audit "/v1/projects/$proj/jobs"; do
	for t in "$(cred b)" "$(jointok "$run-b")"; do
		got=$(code GET "$r" "$t")
		[ "$got" = 401 ] || bad "GET $r with ${t%%_*}_…: $got $(cat "$tmp/code.out")"
	done
done
got=$(code POST "/v1/projects/$proj/jobs" "$(cred b)" '{"command":"true"}')
[ "$got" = 401 ] || bad "a job submitted with B's credential: $got"
ok "node credentials and join tokens are refused on user routes (401)"

# --- rotation on A while its job runs -------------------------------------------------
old=$(cred a)
kill -HUP "$pida"
rotated() { [ "$(cred a)" != "$old" ] && [ -n "$(cred a)" ]; }
wait_for 15 rotated && ok "SIGHUP: A rotated its credential" || bad "no rotation: $(tail -3 "$tmp/agent-a.err")"
[ "$(code GET "/v1/nodes/$ida/tunnels?wait=0" "$old")" = 200 ] &&
	ok "the old credential works during the overlap" || bad "overlap: $(cat "$tmp/code.out")"
sleep 4
[ "$(code GET "/v1/nodes/$ida/tunnels?wait=0" "$old")" = 401 ] &&
	ok "... and dies after it (401)" || bad "old credential after the overlap: $(cat "$tmp/code.out")"
[ "$(code GET "/v1/nodes/$ida/tunnels?wait=0" "$(cred a)")" = 200 ] &&
	ok "the new one works" || bad "new credential: $(cat "$tmp/code.out")"
[ "$(grep -c 'node credential rotated' "$tmp/agent-b.err")" -ge 2 ] &&
	[ "$(node_state b)" = up ] && ok "B rotates every 2 s and stays up" ||
	bad "B's rotations: $(grep -c 'node credential rotated' "$tmp/agent-b.err"), state $(node_state b)"

# The job ran through all this, untouched, and ends with its own output.
ended() { case $(api GET "/v1/jobs/$job" "$ana" | jq -r .state) in succeeded | failed | cancelled) return 0 ;; esac; return 1; }
wait_for 60 ended
logs=$(api GET "/v1/jobs/$job/logs" "$ana" | jq -r '.items[].data')
[ "$(api GET "/v1/jobs/$job" "$ana" | jq -r .state)" = succeeded ] &&
	grep -q finished <<<"$logs" && [ "$(grep -c '^tick ' <<<"$logs")" = 40 ] &&
	! grep -q forged <<<"$logs" &&
	ok "A's job succeeded with its own output, each line once, nothing forged" ||
	bad "job after the attacks: $(api GET "/v1/jobs/$job" "$ana") $(tail -3 <<<"$logs")"

# --- revocation ----------------------------------------------------------------------------
job2=$(api POST "/v1/projects/$proj/jobs" "$ana" \
	'{"command":"sleep 600; echo revoked-'$run'","gpu":"h100-10"}' | jq -r .id)
running2() { [ "$(api GET "/v1/jobs/$job2" "$ana" | jq -r .state)" = running ]; }
wait_for 20 running2 || bad "job 2 did not start"
# Its process on A, found by the marker in its command line.
job2_runs() { pgrep -f "revoked-$run" >/dev/null; }
wait_for 10 job2_runs || bad "job 2's process not found on A"
ca=$(cred a)
[ "$(code POST "/v1/nodes/$run-a/revoke" "$ana")" = 403 ] &&
	ok "a user cannot revoke a node (403)" || bad "user revoke: $(cat "$tmp/code.out")"
jtr=$(jointok "$run-a") # made before the revocation: dies with it
[ "$(code POST "/v1/nodes/$run-a/revoke" "$root")" = 200 ] &&
	ok "the administrator revokes A" || bad "revoke: $(cat "$tmp/code.out")"
[ "$(code GET "/v1/nodes/$ida/tunnels?wait=0" "$ca")" = 401 ] &&
	ok "A's credential fails on the very next request (401)" || bad "after revoke: $(cat "$tmp/code.out")"
[ "$(code POST /v1/nodes "$jtr" "$inv_a")" = 401 ] &&
	ok "a join token made before the revocation died with it" || bad "old join token: $(cat "$tmp/code.out")"
lost() { [ "$(node_state a)" = lost ]; }
wait_for 10 lost && ok "A is lost" || bad "A's state: $(node_state a)"
st2=$(api GET "/v1/jobs/$job2" "$ana" | jq -r .state)
[ "$st2" = pending ] && ok "its running job went back to the queue" || bad "job 2: $st2"
# cnlabd is up and refuses A: no outage grace (5 min) for A's copy of
# the work, which cnlabd already gave back to the queue; it stops when
# the lease (3 s here) runs out.
job2_gone() { ! job2_runs; }
refused() { grep -q 'heartbeat refused' "$tmp/agent-a.err"; }
wait_for 30 job2_gone && wait_for 10 refused &&
	ok "the revoked agent stopped the work it ran (no second copy)" ||
	bad "A still runs job 2 after its revocation: $(tail -3 "$tmp/agent-a.err")"
api GET /v1/audit "$root" | jq -e --arg n "$run-a" 'any(.items[]; .action == "node.revoke" and .target == $n)' >/dev/null &&
	ok "the revocation is audited" || bad "audit: no node.revoke"
# A new join token brings A back (the agent, restarted, joins with it).
kill "$pida"
wait "$pida" 2>/dev/null
start_agent a fake:1xH100-80GB-SXM "$(jointok "$run-a")" --credential-rotate 0s ||
	bad "A did not re-join: $(tail -3 "$tmp/agent-a.err")"
up() { [ "$(node_state a)" = up ]; }
wait_for 10 up && [ "$(cred a)" != "$ca" ] && ok "a new join token brings A back" ||
	bad "re-join: $(node_state a) $(tail -3 "$tmp/agent-a.err")"
api POST "/v1/jobs/$job2/cancel" "$ana" '{}' >/dev/null

[ "$fails" = 0 ] || exit 1
