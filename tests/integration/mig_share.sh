#!/usr/bin/env bash
# mig_share.sh - blocks inside a MIG instance get their compute share, end
# to end: a real cnlabd on loopback and a cnlab-agent on a fake H100 pool.
# A dedicated MIG instance (h100-2g.20gb) puts the GPU in MIG mode; small
# jobs of the same project (h100-5, h100-9) then go into a block-hosting 1g
# instance (the allocator's rule R3).  Their regions, as the agent wrote
# them and cnlab-region reads them, must give:
#   - 5 blocks: share 35% of the instance (5% of the GPU; agent/share.h),
#     9 blocks: 63%; both on the board of that instance
#     (regions/gpu0.migS.board);
#   - the dedicated instance: not throttled (share 0), on a board of its
#     own instance, not the host's.
# Before blocks inside MIG were throttled, both small slices had share 0.
# Waits poll with generous bounds so a hang fails; no assertion depends on
# how fast the machine is.
set -u
cnlabd=$1
agent=$2
region_tool=$3
tmp=$(mktemp -d)
pids=()
cleanup() {
	# Jobs still waiting end on their own once they see the file.
	[ -d "$tmp/shared" ] && touch "$tmp/shared/go" && sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
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

chmod 755 "$tmp"
mkdir -m 1777 "$tmp/shared"
export CNLAB_JWT_SECRET=mig-share-integration-secret-0123456789
export CNLAB_ADMIN_PASSWORD=admin-password-1
printf 'cycle_interval = 200ms\n' >"$tmp/cnlabd.conf"
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
root=$(curl -sS -X POST -d '{"user":"root","password":"admin-password-1"}' "$base/v1/auth/login" | jq -r .token)
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
api POST /v1/users "$root" '{"name":"ana","password":"ana-password-1"}' >/dev/null
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
ana=$(curl -sS -X POST -d '{"user":"ana","password":"ana-password-1"}' "$base/v1/auth/login" | jq -r .token)
tok=$(api POST /v1/nodes/join-tokens "$root" '{"node":"mig-a"}' | jq -r .token)
# Bare isolation as an unprivileged user: no image or container is needed
# to read what the agent gave a slice.
CNLAB_AGENT_TOKEN=$tok "$agent" --server "$base" --name mig-a \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent" --cpu-milli 8000 \
	--mem-mib 16384 --listen 127.0.0.1:0 --log-level info \
	--isolation bare --run-as-uid 65534 \
	>"$tmp/agent.out" 2>"$tmp/agent.err" &
pids+=($!)
wait_for 10 grep -q 'msg=registered' "$tmp/agent.err" || {
	bad "agent did not register: $(tail -5 "$tmp/agent.err")"
	exit 1
}

submit() { # submit SHAPE -> job id; the job prints its region and waits
	api POST "/v1/projects/$proj/jobs" "$ana" \
		"$(jq -cn --arg g "$1" --arg c "echo R=\$CNLAB_REGION G=\$CUDA_VISIBLE_DEVICES; while [ ! -e $tmp/shared/go ]; do sleep 0.1; done" \
			'{command:$c,gpu:$g}')" | jq -r .id
}
logs() { api GET "/v1/jobs/$1/logs?limit=1000" "$ana" | jq -r '.items[].data' | tr -d '\n'; }
started() { logs "$1" | grep -q 'R='; }
region_of() { logs "$1" | sed -n 's/.*R=\([^ ]*\) .*/\1/p'; }
field() { "$region_tool" stat "$1" | sed -n "s/^$2=//p"; }

# The dedicated instance first: it puts the GPU in MIG mode.
jd=$(submit h100-2g.20gb)
wait_for 30 started "$jd" || bad "dedicated MIG job did not start: $(api GET "/v1/jobs/$jd" "$root")"
j5=$(submit h100-5)
wait_for 30 started "$j5" || bad "5-block job did not start: $(api GET "/v1/jobs/$j5" "$root")"
j9=$(submit h100-9)
wait_for 30 started "$j9" || bad "9-block job did not start: $(api GET "/v1/jobs/$j9" "$root")"
rd=$(region_of "$jd")
r5=$(region_of "$j5")
r9=$(region_of "$j9")
g5=$(logs "$j5" | sed -n 's/.* G=\([^ ]*\).*/\1/p')
g9=$(logs "$j9" | sed -n 's/.* G=\([^ ]*\).*/\1/p')
gd=$(logs "$jd" | sed -n 's/.* G=\([^ ]*\).*/\1/p')
# Both small slices live in one MIG instance (a host), not the dedicated one.
[[ "$g5" == MIG-* ]] && [ "$g5" = "$g9" ] && [ "$g5" != "$gd" ] &&
	ok "5 and 9 blocks share a 1g host instance ($g5)" ||
	bad "instances: 5 blocks $g5, 9 blocks $g9, dedicated $gd"
if [ -f "$r5" ] && [ -f "$r9" ] && [ -f "$rd" ]; then
	s5=$(field "$r5" share_pct)
	s9=$(field "$r9" share_pct)
	sd=$(field "$rd" share_pct)
	[ "$s5" = 35 ] && [ "$s9" = 63 ] &&
		ok "shares of the instance: 5 blocks 35%, 9 blocks 63%" ||
		bad "shares: 5 blocks $s5, 9 blocks $s9 (want 35, 63)"
	[ "$sd" = 0 ] && ok "dedicated instance not throttled" || bad "dedicated share $sd"
	# The board a region names is in its header (a path, NUL-padded).
	b5=$(grep -ao "$tmp/agent/regions/gpu0\.mig[0-9]\.board" "$r5" | head -n 1)
	b9=$(grep -ao "$tmp/agent/regions/gpu0\.mig[0-9]\.board" "$r9" | head -n 1)
	[ -n "$b5" ] && [ "$b5" = "$b9" ] && [ -f "$b5" ] &&
		ok "one board for the host instance ($(basename "$b5"))" ||
		bad "boards: '$b5' / '$b9'"
	bd=$(grep -ao "$tmp/agent/regions/gpu0\.mig[0-9]\.board" "$rd" | head -n 1)
	[ -n "$bd" ] && [ "$bd" != "$b5" ] &&
		ok "dedicated instance: a board of its own ($(basename "$bd"))" ||
		bad "dedicated instance's board: '$bd' (host's: '$b5')"
else
	bad "regions not readable: $rd $r5 $r9"
fi
touch "$tmp/shared/go"
# The jobs end before the test removes what they wait on.
state() { api GET "/v1/jobs/$1" "$ana" | jq -r .state; }
ended() { for j in "$@"; do [ "$(state "$j")" = succeeded ] || return 1; done; }
wait_for 30 ended "$jd" "$j5" "$j9" && ok "the three jobs ended" ||
	bad "jobs: $(state "$jd") $(state "$j5") $(state "$j9")"
[ "$fails" = 0 ] || {
	echo "--- agent"
	tail -30 "$tmp/agent.err"
	echo "--- cnlabd"
	tail -30 "$tmp/cnlabd.err"
	exit 1
}
echo "mig_share: all passed"
