#!/usr/bin/env bash
# resize.sh - in-flight resize of a running notebook server's slice, end to
# end: a real cnlabd on loopback, a real cnlab-agent on a fake H100 pool,
# the cnlab CLI as a user runs it, and a CUDA program (shimtest, with the
# shim preloaded over the fake driver) that holds VRAM in the slice's
# region as the server's notebook would:
#   - cnlab server resize nb --blocks 40 grows the slice at once: the
#     region the agent made shows share 40 and 40% of the GPU's VRAM, and
#     the program may allocate up to it;
#   - resizing to 10 while the program holds 20 GiB: the region's quota
#     drops at once (a new allocation is refused) but the 40 blocks stay
#     held (a job that needs them waits) for heartbeat after heartbeat;
#     once the program frees its memory the blocks are released, the
#     waiting job starts on them, and the release is in the audit log;
#   - growing past the GPU's free blocks is refused naming them;
#   - another member of the project (not the owner) and a user of another
#     project cannot resize it; bad --blocks is a usage error (exit 2).
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$1
agent=$2
cnlab=$3
region_tool=$4
shimtest=$5
shim=$6
tmp=$(mktemp -d)
run=rz$$
pids=()
cleanup() {
	[ -n "${SHIM_PID:-}" ] && kill -9 "$SHIM_PID" 2>/dev/null
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
wait_for() { # wait_for SECONDS CMD...
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG XDG_CONFIG_HOME
chmod 755 "$tmp"
export CNLAB_JWT_SECRET=resize-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
cat >"$tmp/cnlabd.conf" <<CONF
node_lost_timeout = 30s
cycle_interval = 200ms
CONF
"$cnlabd" --config "$tmp/cnlabd.conf" --data-dir "$tmp/db" \
	--listen 127.0.0.1:0 --bootstrap-admin root >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
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
code() { # code METHOD PATH TOKEN BODY: the HTTP status
	curl -sS -o /dev/null -w '%{http_code}' -X "$1" -H "Authorization: Bearer $3" -d "$4" "$base$2"
}
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }

root=$(login root admin-password-1)
for u in ana eve bob; do
	api POST /v1/users "$root" "{\"name\":\"$u\",\"password\":\"$u-password-1\"}" >/dev/null
done
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
other=$(api POST /v1/projects "$root" '{"name":"elsewhere"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
api POST "/v1/projects/$proj/members" "$root" '{"user":"eve","role":"member"}' >/dev/null
api POST "/v1/projects/$other/members" "$root" '{"user":"bob","role":"member"}' >/dev/null
api POST /v1/profiles "$root" '{"name":"h100-10pct","gpu":"h100-10","description":"a tenth of an H100"}' >/dev/null
ana=$(login ana ana-password-1)
bob=$(login bob bob-password-1)

jt=$(api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$run-a\"}" | jq -r .token)
CNLAB_AGENT_TOKEN=$jt "$agent" --server "$base" --name "$run-a" \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent" --cpu-milli 8000 \
	--mem-mib 16384 --listen 127.0.0.1:0 --log-level info \
	--server-command 'exec python3 -m http.server $CNLAB_PORT --bind 127.0.0.1 --directory $CNLAB_WORKSPACE' \
	>"$tmp/agent.out" 2>"$tmp/agent.err" &
pids+=($!)
wait_for 10 grep -q 'msg=registered' "$tmp/agent.err" ||
	bad "agent did not register: $(cat "$tmp/agent.err")"
blocks_used() { api GET /v1/nodes "$root" | jq -r '.items[0].blocks_used'; }

# Each user has a CLI config of their own.
cli() { # cli USER ARGS...: cnlab as USER
	local u=$1
	shift
	CNLAB_CONFIG=$tmp/cli-$u.json "$cnlab" "$@"
}
for u in ana eve; do
	echo "$u-password-1" | cli "$u" login --server "$base" --user "$u" --password-stdin \
		>/dev/null 2>"$tmp/login.err" || bad "login $u: $(cat "$tmp/login.err")"
	cli "$u" project use lab >/dev/null 2>&1
done

# --- a running server at 10 blocks ------------------------------------------
cli ana server create --name nb --image host --profile h100-10pct --storage 1 \
	--wait 60s >"$tmp/create.out" 2>&1 || bad "server create: $(cat "$tmp/create.out")"
sid=$(cli ana server show nb --output json | jq -r .id)
region=$tmp/agent/regions/$sid.region
rstat() { "$region_tool" stat "$region"; }
has() { rstat | grep -qx "$1"; }
mib() { echo $(($1 << 20)); }
# An H100 80 GB has 81559 MiB: N blocks are N% of it.
q10=$(mib $((81559 * 10 / 100)))
q40=$(mib $((81559 * 40 / 100)))
[ -f "$region" ] && has share_pct=10 && has "quota=$q10" &&
	ok "server runs in a region of 10 blocks" || bad "region at start: $(rstat 2>&1)"
cli ana server show nb | grep -q '^Size: *10 blocks$' &&
	ok "server show: Size 10 blocks" || bad "show: $(cli ana server show nb)"

# A CUDA program of the slice: the shim over the fake driver, in its region.
coproc SHIM { env LD_PRELOAD="$shim" CNLAB_REGION="$region" \
	CNL_FAKE_GPU="$tmp/fake-gpu" CNL_FAKE_MEM=$((80 << 30)) "$shimtest" repl 2>"$tmp/shimtest.err"; }
cuda() { # cuda COMMAND: one line to the program, its answer
	local line
	echo "$1" >&"${SHIM[1]}"
	read -r -t 30 line <&"${SHIM[0]}" && echo "$line"
}
read -r -t 30 ready <&"${SHIM[0]}"
[ "$ready" = ready ] || bad "shimtest: $ready"

# --- grow: at once ----------------------------------------------------------
out=$(cli ana server resize nb --blocks 40 2>&1) && [[ "$out" == *"Size:      40 blocks"* ]] &&
	ok "resize to 40: done at once" || bad "grow: $out"
wait_for 30 has share_pct=40 && has "quota=$q40" &&
	ok "region now share 40, quota $q40" || bad "region after grow: $(rstat)"
[ "$(blocks_used)" = 40 ] && ok "node holds 40 blocks" || bad "blocks used: $(blocks_used)"
[ "$(cuda "alloc $((20 << 30))")" = "ok 0" ] && ok "20 GiB allocated within 40 blocks" ||
	bad "alloc 20 GiB under 40 blocks"

# --- shrink below use: quota at once, blocks kept until the use falls -------
out=$(cli ana server resize nb --blocks 10 2>&1) && [[ "$out" == *"shrinking to 10"* ]] &&
	ok "resize to 10: shrink pending" || bad "shrink: $out"
wait_for 30 has share_pct=10 && has "quota=$q10" &&
	ok "region quota and share lowered at once" || bad "region after shrink: $(rstat)"
a=$(cuda "alloc $((1 << 30))")
[[ "$a" == fail* ]] && ok "a new allocation above the new quota is refused" ||
	bad "allocation not refused under a pending shrink: $a"
# Work that needs the blocks waits (65 + 40 > 100; 65 + 10 fits).
j=$(api POST "/v1/projects/$proj/jobs" "$ana" '{"command":"sleep 600","gpu":"h100-65"}' | jq -r .id)
# Heartbeats come and go (the lease file is renewed by each).
lease=$tmp/agent/lease
for _ in 1 2 3; do
	t=$(stat -c %y "$lease")
	wait_for 30 sh -c "[ \"\$(stat -c %y '$lease')\" != '$t' ]"
done
[ "$(blocks_used)" = 40 ] && [ "$(api GET "/v1/jobs/$j" "$ana" | jq -r .state)" = pending ] &&
	ok "blocks kept while the slice uses more than 10 blocks' VRAM" ||
	bad "blocks released early: $(blocks_used) $(api GET "/v1/jobs/$j" "$ana")"
cli ana server show nb | grep -q 'Size: *40 blocks (shrinking to 10' &&
	ok "server show: the pending shrink" || bad "show: $(cli ana server show nb)"
# A pending job's request changes (jobs resize).
out=$(cli ana jobs resize "$j" --blocks 70 2>&1) && [[ "$out" == *"70 blocks (resized while waiting)"* ]] &&
	ok "jobs resize of a pending job" || bad "jobs resize: $out"
# The program frees its memory: the blocks go, the job starts on them.
[ "$(cuda free-all)" = ok ] || bad "free-all: $(cat "$tmp/shimtest.err")"
wait_for 60 sh -c "[ \"\$(curl -sS -H 'Authorization: Bearer $root' $base/v1/nodes | jq -r '.items[0].blocks_used')\" = 80 ]" &&
	ok "released once the use fits: 10 + the job's 70 blocks" ||
	bad "after free: $(blocks_used) $(api GET "/v1/jobs/$j" "$ana")"
cli ana server show nb | grep -q '^Size: *10 blocks$' && ok "server show: 10 blocks" ||
	bad "show after release: $(cli ana server show nb)"
api GET "/v1/servers/$sid/decisions" "$ana" |
	jq -e '[.items[] | select(.stage=="resize" and (.decision | test("shrunk from 40 to 10")))] | length == 1' >/dev/null &&
	ok "the release is audited" || bad "decisions: $(api GET "/v1/servers/$sid/decisions" "$ana")"

# --- growing past the GPU's free blocks: refused, named ---------------------
out=$(cli ana server resize nb --blocks 40 2>&1)
rc=$?
[ $rc != 0 ] && [[ "$out" == *"has 20 free blocks"* ]] && has share_pct=10 &&
	ok "grow past the free blocks refused ($rc): names them" || bad "grow refused: $rc $out"

# --- strangers and bad input ------------------------------------------------
out=$(cli eve server resize nb --blocks 12 2>&1)
rc=$?
[ $rc != 0 ] && [[ "$out" == *owner* ]] && has share_pct=10 &&
	ok "another member may not resize it ($rc)" || bad "eve: $rc $out"
[ "$(code PATCH "/v1/servers/$sid" "$bob" '{"blocks":12}')" = 404 ] && has share_pct=10 &&
	ok "another project's user: 404" || bad "bob could see or resize it"
for a in "" "--blocks 0" "--blocks 101" "--blocks ten"; do
	# shellcheck disable=SC2086
	cli ana server resize nb $a >/dev/null 2>"$tmp/usage.err"
	rc=$?
	[ $rc = 2 ] && grep -q -- --blocks "$tmp/usage.err" || bad "usage '$a': $rc $(cat "$tmp/usage.err")"
done
ok "bad --blocks: exit 2 naming the flag"

echo exit >&"${SHIM[1]}"
api POST "/v1/jobs/$j/cancel" "$ana" '{}' >/dev/null
cli ana server stop nb >/dev/null 2>&1
[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
