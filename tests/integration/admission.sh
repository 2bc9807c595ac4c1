#!/usr/bin/env bash
# admission.sh - issue 17's admission, storage and audit faults, for real:
# the real cnlabd over loopback HTTP, a real agent (fake GPU pool, real
# processes), the real cnlab CLI, real SQLite files.
#   1. a database file that exists but is empty (0 bytes), random bytes or
#      a text file is refused at start-up naming the file and what is
#      wrong, exit non-zero, the file untouched; a missing file is created;
#   2. admission: work no registered node could ever run (a GPU type no
#      node has, more whole GPUs than the largest node, a MIG profile no
#      GPU offers, a gang wider than the nodes, CPU beyond any node) is
#      refused at submission with 422, the reason and the shapes that
#      exist, and nothing is queued; the CLI prints it and exits non-zero;
#      before any node registers, work is accepted and waits ("no nodes
#      registered"); a cordoned node still counts;
#   3. the scheduler's decisions: a job that runs shows auth, quota,
#      queue, admission, cluster and slice in order (cnlab jobs explain);
#      the quota decision has the numbers; a job pending over many cycles
#      adds no record per cycle; the audit chain verifies; another
#      project's member cannot read them;
#   4. storage full: the data directory on a small tmpfs that the test
#      fills: submissions get 507 naming the database (never 500), an
#      upload 507 naming the file store, reads
#      (GET job, list, whoami, healthz) go on, nothing stored before is
#      lost, and once the filler is removed submissions work again.
# Waits poll with generous bounds so a hang fails instead of blocking; no
# assertion depends on how fast the machine is.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
tmp=$(mktemp -d)
run=adm$$ # agent names, and so cgroup roots, unique to this run
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
	mountpoint -q "$tmp/full" && umount "$tmp/full"
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

export CNLAB_JWT_SECRET=admission-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
mkdir -p "$HOME"
chmod 755 "$tmp"

# --- 1. the database at start ----------------------------------------------
# start_refused NAME: cnlabd on $tmp/NAME/cnlab.db must exit non-zero, say
# which file and what is wrong, and leave the file as it was.
start_refused() {
	local d=$tmp/$1 want=$2 rc
	cp -p "$d/cnlab.db" "$tmp/$1.orig"
	timeout 30 "$cnlabd" --data-dir "$d" --listen 127.0.0.1:0 --bootstrap-admin root \
		>"$tmp/$1.out" 2>"$tmp/$1.err"
	rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] && ok "$1 database: cnlabd exits non-zero ($rc)" ||
		bad "$1 database: cnlabd rc=$rc: $(cat "$tmp/$1.err")"
	grep -q "$d/cnlab.db" "$tmp/$1.err" && grep -q "$want" "$tmp/$1.err" &&
		ok "... saying which file and what is wrong" || bad "$1 database message: $(cat "$tmp/$1.err")"
	! grep -q '^listening on' "$tmp/$1.out" && ok "... and never serves" || bad "$1 database served"
	cmp -s "$d/cnlab.db" "$tmp/$1.orig" &&
		[ "$(stat -c %s.%Y "$d/cnlab.db")" = "$(stat -c %s.%Y "$tmp/$1.orig")" ] &&
		ok "... the file is untouched" || bad "$1 database file changed"
	[ ! -e "$d/cnlab.db-wal" ] && ok "... and no WAL was made beside it" || bad "$1 database got a WAL"
}
mkdir -p "$tmp/empty" "$tmp/random" "$tmp/text"
: >"$tmp/empty/cnlab.db"
head -c 65536 /dev/urandom >"$tmp/random/cnlab.db"
printf 'these are my notes, not a database\n%.0s' $(seq 100) >"$tmp/text/cnlab.db"
chmod 600 "$tmp"/*/cnlab.db
start_refused empty 'is empty (0 bytes), not an SQLite database'
start_refused random 'is not an SQLite database'
start_refused text 'is not an SQLite database'

# --- 2. admission ------------------------------------------------------------
"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 --bootstrap-admin root \
	--cycle-interval 200ms >"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
pids+=($!)
wait_for 10 grep -q '^listening on' "$tmp/cnlabd.out" || {
	cat "$tmp/cnlabd.err"
	exit 1
}
[ -s "$tmp/db/cnlab.db" ] && ok "a missing database file is created" || bad "no database created"
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port

api() { # api METHOD PATH TOKEN [BODY]: the body; the status in $tmp/status
	curl -sS -o "$tmp/body" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $3" \
		${4:+-d "$4"} "$base$2" >"$tmp/status"
	cat "$tmp/body"
}
status() { cat "$tmp/status"; }
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token; }

root=$(login root admin-password-1)
for u in ana eve; do
	api POST /v1/users "$root" "{\"name\":\"$u\",\"password\":\"$u-password-1\"}" >/dev/null
done
proj=$(api POST /v1/projects "$root" '{"name":"lab"}' | jq -r .id)
other=$(api POST /v1/projects "$root" '{"name":"other"}' | jq -r .id)
api POST "/v1/projects/$proj/members" "$root" '{"user":"ana","role":"member"}' >/dev/null
api POST "/v1/projects/$other/members" "$root" '{"user":"eve","role":"member"}' >/dev/null
ana=$(login ana ana-password-1)
eve=$(login eve eve-password-1)
submit() { api POST "/v1/projects/$proj/jobs" "$ana" "$1"; }
njobs() { api GET "/v1/projects/$proj/jobs?limit=1000" "$ana" | jq '.items | length'; }

# No node registered yet: a fresh platform takes work; it waits, saying so.
early=$(submit '{"command":"true","gpu":"h100-10"}' | jq -r .id)
[ "$(status)" = 201 ] && ok "before any node registers, work is accepted" || bad "early submit: $(status) $(cat "$tmp/body")"
reason() { api GET "/v1/jobs/$1" "$ana" | jq -r '.status.reason // empty'; }
[ "$(reason "$early")" = "no nodes registered" ] && ok "... and waits: no nodes registered" ||
	bad "early reason: $(api GET "/v1/jobs/$early" "$ana")"
api POST "/v1/jobs/$early/cancel" "$ana" >/dev/null

# The node joins with a one-time join token made for its name.
agtok=$(api POST /v1/nodes/join-tokens "$root" "{\"node\":\"$run-a\"}" | jq -r .token)
CNLAB_AGENT_TOKEN=$agtok "$agent" --server "$base" --name "$run-a" \
	--gpus fake:2xH100-80GB-SXM --work-dir "$tmp/agent-a" --cpu-milli 8000 \
	--mem-mib 16384 >>"$tmp/agent-a.out" 2>>"$tmp/agent-a.err" &
pids+=($!)
wait_for 20 grep -q 'msg=registered' "$tmp/agent-a.err" || bad "agent: $(cat "$tmp/agent-a.err")"

before=$(njobs)
# refused BODY REASON WHAT: 422 unsatisfiable naming REASON, with the shapes.
refused() {
	local out
	out=$(submit "$1")
	[ "$(status)" = 422 ] && [ "$(jq -r .error.code <<<"$out")" = unsatisfiable ] &&
		grep -qF "$2" <<<"$(jq -r .error.message <<<"$out")" &&
		[ "$(jq -r .error.reason <<<"$out")" = "$2" ] &&
		ok "$3: 422 \"$2\"" || bad "$3: $(status) $out"
	jq -e '.error.shapes | length == 1 and .[0].nodes == 1 and .[0].gpus == 2 and
		.[0].gpu_type == "H100-80GB-SXM" and .[0].cpu_milli == 8000 and .[0].mem_mib == 16384 and
		(.[0].mig_profiles | index("1g.10gb") != null)' \
		<<<"$out" >/dev/null && ok "... with the shapes that exist" || bad "$3 shapes: $out"
}
refused '{"command":"true","gpu":"l40s-10"}' "no node has GPU type L40S" "a GPU type no node has"
refused '{"command":"true","gpu":"h100x8"}' "8 whole GPUs asked, the largest node has 2" "more whole GPUs than any node"
refused '{"command":"true","gpu":"any-1g.5gb"}' \
	"MIG profile 1g.5gb is not offered by the GPU of any node (it is one of A100-40GB's)" "a MIG profile no GPU offers"
refused '{"command":"true","gpu":"h100-10","nodes":2}' \
	"a gang of 2 nodes asked, only 1 node of that kind is registered" "a gang wider than the nodes"
refused '{"command":"true","gpu":"h100-10","cpu_milli":64000}' \
	"cpu_milli 64000 asked, the largest node of that kind has 8000" "CPU beyond any node"
refused '{"command":"true","gpu":"cpu","mem_mib":65536}' \
	"mem_mib 65536 asked, the largest node of that kind has 16384" "memory beyond any node"
refused '{"command":"true","gpu":"any-10","gpu_types":["l40s"]}' "no node has GPU type L40S" "gpu_types no node has"
[ "$(njobs)" = "$before" ] && ok "nothing refused was queued" || bad "refused work queued: $(njobs) vs $before"
# A server whose profile no node could run is refused alike.
api POST /v1/profiles "$root" '{"name":"big-l40s","gpu":"l40s-50"}' >/dev/null
out=$(api POST "/v1/projects/$proj/servers" "$ana" '{"name":"nb","image":"host","profile":"big-l40s"}')
[ "$(status)" = 422 ] && grep -q "no node has GPU type L40S" <<<"$out" &&
	ok "a server no node could run: 422" || bad "server admission: $(status) $out"

echo ana-password-1 | "$cnlab" login --server "$base" --user ana --password-stdin >/dev/null 2>&1 ||
	bad "cnlab login"
cd "$tmp" || exit 1
"$cnlab" run --gpu h100x8 --detach true >cli.out 2>cli.err
rc=$?
[ "$rc" != 0 ] && grep -q "8 whole GPUs asked, the largest node has 2" cli.err &&
	grep -q "1 node: 2 x H100-80GB-SXM, 8000 mCPU, 16384 MiB" cli.err &&
	ok "the CLI prints the reason and the nodes there are, exit $rc" || bad "CLI refusal: rc=$rc $(cat cli.err)"

# A cordoned node still counts: work for it is accepted and waits.
api PATCH "/v1/nodes/$run-a" "$root" '{"state":"cordoned"}' >/dev/null
held=$(submit '{"command":"true","gpu":"h100x2"}' | jq -r .id)
[ "$(status)" = 201 ] && ok "a cordoned node still counts as a shape that exists" || bad "cordoned: $(status) $(cat "$tmp/body")"

# --- 3. the scheduler's decisions --------------------------------------------
decisions() { api GET "/v1/jobs/$1/decisions" "$ana"; }
stages() { decisions "$1" | jq -r '[.items[].stage] | join(" ")'; }
pending_seen() { [ "$(stages "$held")" = "auth quota queue admission slice" ]; }
wait_for 20 pending_seen && ok "a waiting job: its pending decision recorded" || bad "held stages: $(decisions "$held")"
n1=$(decisions "$held" | jq '.items | length')
# Many cycles (200 ms each) later: no new record while the reason stands.
cycles() { curl -sS "$base/metrics" | sed -n 's/^cnlab_scheduling_cycle_seconds_count \([0-9]*\).*/\1/p'; }
c0=$(cycles)
more_cycles() { [ "$(($(cycles) - c0))" -ge 10 ]; }
wait_for 60 more_cycles || bad "the loop did not cycle: $(cycles) vs $c0"
n2=$(decisions "$held" | jq '.items | length')
[ -n "$c0" ] && [ "$n1" = "$n2" ] && ok "a job pending over $(($(cycles) - c0)) cycles added no record ($n2)" ||
	bad "pending records grew: $n1 -> $n2 (cycles $c0 -> $(cycles))"
api PATCH "/v1/nodes/$run-a" "$root" '{"state":"up"}' >/dev/null
started() { [ "$(stages "$held")" = "auth quota queue admission slice cluster slice" ]; }
wait_for 30 started && ok "back in service: the cluster and slice decisions follow" || bad "held after: $(decisions "$held")"

api PUT "/v1/projects/$proj/quota" "$root" '{"gpu_hours":100}' >/dev/null
# The held job takes both GPUs: let it end first, so the next job is placed
# at once and records no pending decision.
held_done() { case "$(api GET "/v1/jobs/$held" "$ana" | jq -r .state)" in succeeded | failed) true ;; *) false ;; esac; }
wait_for 60 held_done || bad "the held job did not end: $(cat "$tmp/body")"
"$cnlab" run --gpu h100-25 true >run.out 2>run.err || bad "run: $(cat run.err)"
job=$(sed -n 's/^✓ Queued \(job_[0-9A-Z]*\) .*/\1/p' run.err)
[ "$(stages "$job")" = "auth quota queue admission cluster slice" ] &&
	ok "a job through all six stages: six decisions in order" || bad "stages: $(decisions "$job")"
d=$(decisions "$job")
jq -e '.items[0].decision | test("accepted: user ana, member in project lab")' <<<"$d" >/dev/null &&
	jq -e '.items[1].decision | test("project lab: GPU-hours [0-9.]+ of 100.00; user ana: GPU-hours [0-9.]+, no limit")' <<<"$d" >/dev/null &&
	jq -e '.items[2].decision | test("queued: priority normal, position [0-9]+ of [0-9]+ pending")' <<<"$d" >/dev/null &&
	jq -e '.items[3].decision | test("admitted: 1 of 1 registered nodes could run it")' <<<"$d" >/dev/null &&
	jq -e ".items[4].decision | test(\"node $run-a\")" <<<"$d" >/dev/null &&
	jq -e ".items[5].decision | test(\"placed on node $run-a: GPU [01], .*shape h100-25\")" <<<"$d" >/dev/null &&
	ok "... each says what was decided, the quota with its numbers" || bad "decisions: $d"
jq -e '[.items[].seq] | . == sort' <<<"$d" >/dev/null && jq -e '[.items[].time | length > 0] | all' <<<"$d" >/dev/null &&
	ok "... in order, with times" || bad "decision order: $d"
"$cnlab" jobs explain "$job" >explain.out 2>explain.err
rc=$?
[ "$rc" = 0 ] && [ "$(awk 'NR>1 {print $2}' explain.out | tr '\n' ' ')" = "auth quota queue admission cluster slice " ] &&
	grep -q "placed on node $run-a" explain.out && ok "cnlab jobs explain prints them in order" ||
	bad "jobs explain: rc=$rc $(cat explain.out explain.err)"
api GET "/v1/jobs/$job/decisions" "$eve" >/dev/null
[ "$(status)" = 404 ] || [ "$(status)" = 403 ] && ok "another project's member cannot read them ($(status))" ||
	bad "eve read decisions: $(status)"
[ "$(api GET /v1/audit/verify "$root" | jq -r .ok)" = true ] && ok "the audit chain verifies" ||
	bad "audit verify: $(cat "$tmp/body")"

# --- 4. storage full -----------------------------------------------------------
mkdir -p "$tmp/full"
if ! mount -t tmpfs -o size=6m,mode=0700 tmpfs "$tmp/full"; then
	bad "cannot mount a tmpfs (the test needs root)"
else
	"$cnlabd" --data-dir "$tmp/full" --listen 127.0.0.1:0 --bootstrap-admin root \
		>"$tmp/full.out" 2>"$tmp/full.err" &
	pids+=($!)
	wait_for 10 grep -q '^listening on' "$tmp/full.out" || bad "cnlabd on tmpfs: $(cat "$tmp/full.err")"
	base=http://127.0.0.1:$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/full.out")
	root=$(login root admin-password-1)
	proj=$(api GET /v1/projects "$root" | jq -r '.items[] | select(.name=="system") | .id')
	first=$(api POST "/v1/projects/$proj/jobs" "$root" '{"command":"true","gpu":"h100-10"}' | jq -r .id)
	[ "$(status)" = 201 ] || bad "first job on tmpfs: $(status) $(cat "$tmp/body")"
	dd if=/dev/zero of="$tmp/full/filler" bs=64k >/dev/null 2>&1
	# The WAL may hold a few more writes in space it has already; the
	# disk is full, so they run out.
	st=201
	for _ in $(seq 200); do
		api POST "/v1/projects/$proj/jobs" "$root" '{"command":"true","gpu":"h100-10"}' >/dev/null
		st=$(status)
		[ "$st" = 201 ] || break
	done
	[ "$st" = 507 ] && [ "$(jq -r .error.code "$tmp/body")" = insufficient_storage ] &&
		[ "$(jq -r .error.path "$tmp/body")" = "$tmp/full/cnlab.db" ] &&
		grep -q "$tmp/full/cnlab.db" <<<"$(jq -r .error.message "$tmp/body")" &&
		ok "disk full: submit is 507 naming the database" || bad "disk full submit: $st $(cat "$tmp/body")"
	# upload FILE: PUT it as an upload; the status in $tmp/status.
	upload() {
		curl -sS -o "$tmp/body" -w '%{http_code}' -X PUT -H "Authorization: Bearer $root" \
			-H "X-Content-SHA256: $(sha256sum "$1" | cut -d' ' -f1)" \
			--data-binary @"$1" "$base/v1/projects/$proj/uploads?path=data.bin" >"$tmp/status"
	}
	head -c $((1 << 20)) /dev/urandom >"$tmp/1m"
	upload "$tmp/1m"
	[ "$(status)" = 507 ] && [ "$(jq -r .error.code "$tmp/body")" = insufficient_storage ] &&
		[ "$(jq -r .error.path "$tmp/body")" = "$tmp/full/files" ] &&
		ok "disk full: an upload is 507 naming the file store" || bad "upload when full: $(status) $(cat "$tmp/body")"
	out=$(api GET "/v1/jobs/$first" "$root")
	[ "$(status)" = 200 ] && [ "$(jq -r .id <<<"$out")" = "$first" ] && ok "... GET job still 200" ||
		bad "GET job when full: $(status) $out"
	api GET "/v1/projects/$proj/jobs" "$root" >/dev/null
	[ "$(status)" = 200 ] && ok "... job list still 200" || bad "list when full: $(status)"
	api GET /v1/auth/whoami "$root" >/dev/null
	[ "$(status)" = 200 ] && ok "... whoami still 200" || bad "whoami when full: $(status)"
	[ "$(curl -sS -o /dev/null -w '%{http_code}' "$base/healthz")" = 200 ] && ok "... healthz still 200" ||
		bad "healthz when full"
	rm -f "$tmp/full/filler"
	again=$(api POST "/v1/projects/$proj/jobs" "$root" '{"command":"true","gpu":"h100-10"}' | jq -r .id)
	[ "$(status)" = 201 ] && ok "space freed: submissions work again, no restart" || bad "after free: $(status) $(cat "$tmp/body")"
	upload "$tmp/1m"
	[ "$(status)" = 201 ] || [ "$(status)" = 200 ] && ok "... and uploads" || bad "upload after free: $(status) $(cat "$tmp/body")"
	[ "$(api GET "/v1/jobs/$first" "$root" | jq -r .id)" = "$first" ] &&
		[ "$(api GET "/v1/jobs/$again" "$root" | jq -r .id)" = "$again" ] &&
		ok "... nothing stored before was lost" || bad "lost jobs"
	[ "$(api GET /v1/audit/verify "$root" | jq -r .ok)" = true ] && ok "... and the audit chain verifies" ||
		bad "audit verify after full: $(cat "$tmp/body")"
	! grep -q 'internal error' "$tmp/full.err" && ok "no 500 internal error while full" || bad "500s while full"
fi

echo "$fails failure(s)"
[ "$fails" = 0 ]
