#!/usr/bin/env bash
# replicas.sh - three cnlabd over one PostgreSQL (tests/lib/pg-tmp): one
# leads, the others follow (answering the reads of the store themselves,
# forwarding every other request to it); the leader
# is killed (kill -9) at random moments while several clients submit,
# each through its own replica, and paused (SIGSTOP) past its lease and
# woken.  Checked:
#   - exactly one replica says "role":"leader" with an epoch; the
#     followers answer /healthz 200 "follower" naming the leader's URL,
#     its epoch and their view's age, and /metrics cnlab_leader 0; a
#     request that was forwarded once is not forwarded again;
#   - login and a project through a follower;
#   - a follower answers reads of the store itself (none forwarded:
#     projects, whoami, the audit chain's check, /cli, cnlab jobs logs), also
#     while the leader is paused, and forwards a read of the leader's
#     memory (the dashboard); its local reads refuse at once a session
#     signed out through another replica, and show a user with no role
#     nothing of the project (404) nor the audit log (403); a job's GET
#     and the job list are answered there too, with the leader's live
#     status as mirrored in the database, equal to the leader's answer;
#   - after each kill another replica leads with a higher epoch, and the
#     clients' submissions go on (each client starts on its own replica
#     and, when a request fails, tries the next address, retrying a
#     request whose answer it lost with the same Idempotency-Key, as a
#     client behind a load balancer would);
#   - a leader paused past its lease is replaced, and once woken it steps
#     down: it exits with status 75 saying it lost the lease;
#   - afterwards every acknowledged submission is in the database exactly
#     once (one job per Idempotency-Key, none twice), and the audit chain
#     verifies;
#   - the CLI given every replica's address (CNLAB_SERVER="URL1,URL2,URL3")
#     logs in, submits, and after the leader is killed reaches the new one
#     with the same session;
#   - a leader cut off from the database (its connection held by a proxy:
#     no answer, no error) stops claiming to lead within a lease: its
#     /healthz answers 503 "unsure", requests 503 not_leader at once, the
#     CLI moves on to the replica that took over; when the network heals
#     it finds its lease taken and exits 75;
#   - two node agents given every replica's address run jobs (real
#     containers, one whole fake H100 each) while the leader is killed
#     under them: every job ends succeeded, its output once, and no job
#     was ever started twice (on either node: the agents' own logs);
#   - the CLI given one follower's address only: cnlab run streams the
#     output and ends with the job's exit code, a 600 KB script goes up as
#     an upload; cnlab server exec (an upgraded connection, relayed both
#     ways) runs in the server;
#   - a job whose script was uploaded to a leader killed before any node
#     took it runs under the next leader (files_dir shared);
#   - over TLS a follower forwards to the https leader it verifies with
#     replica_ca_file, and one that cannot verify it forwards nothing.
# Failover times (kill to the new leader's first acknowledged submission)
# are printed; bench/replicas_bench.sh measures them properly.
set -u
cnlabd=$1
cnlab=$2
agent=$3
source "$(dirname "$0")/lib.sh"
need_tools jq psql curl python3
[ -n "${CNLAB_TEST_STORE_PG:-}" ] || {
	echo "FAIL run me under tests/lib/pg-tmp run -- $0 ..."
	exit 1
}
KILLS=${KILLS:-3}
CLIENTS=${CLIENTS:-3}
LEASE=${LEASE:-2s}
tmp=$(mktemp -d)
declare -A pids=()
subs=()
cleanup() {
	local p
	touch "$tmp/stop"
	for p in "${subs[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -TERM "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
die() {
	bad "$1"
	exit 1
}

db="$CNLAB_TEST_STORE_PG/cnlab"
q() { psql -X -q -t -A "$db" -c "$1"; }
psql -X -q "$CNLAB_TEST_STORE_PG/postgres" -c "CREATE DATABASE cnlab" || exit 1
export CNLAB_JWT_SECRET=replicas-test-secret-0123456789abcdef-xyz
export CNLAB_ADMIN_PASSWORD=replicas-admin-password
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
ports=()
for r in 1 2 3; do ports+=("$(free_port)"); done
nbports=()
for r in 1 2 3; do nbports+=("$(free_port)"); done

# start R: replica R (1..3) on its own port and data folder.
start() {
	local r=$1
	"$cnlabd" --store "$db" --data-dir "$tmp/d$r" --files-dir "$tmp/files" --lease "$LEASE" \
		--listen "127.0.0.1:${ports[$((r - 1))]}" \
		--notebook-listen "127.0.0.1:${nbports[$((r - 1))]}" \
		--bootstrap-admin admin --log-level info \
		>>"$tmp/out$r" 2>>"$tmp/err$r" &
	pids[$r]=$!
}
role() { # role PORT: "leader EPOCH", or "" when it does not answer
	curl -sS --max-time 2 "http://127.0.0.1:$1/healthz" 2>/dev/null |
		jq -r 'select(.role == "leader") | "leader \(.epoch)"' 2>/dev/null
}
# leader [MIN_EPOCH]: waits until one replica leads with an epoch above
# MIN_EPOCH; sets lr (its number) and lepoch.
leader() {
	local min=${1:-0} r e
	for _ in $(seq 600); do
		for r in 1 2 3; do
			e=$(role "${ports[$((r - 1))]}")
			if [ -n "$e" ] && [ "${e#leader }" -gt "$min" ]; then
				lr=$r
				lepoch=${e#leader }
				return 0
			fi
		done
		sleep 0.05
	done
	return 1
}

start 1
leader || die "no leader: $(cat "$tmp/err1")"
start 2
start 3
sleep 1
[ "$lr" = 1 ] && [ "$lepoch" = 1 ] && ok "the first replica leads (epoch 1)" || bad "leader $lr epoch $lepoch"
n=0
for r in 2 3; do
	h=$(curl -sS --max-time 2 -w ' %{http_code}' "http://127.0.0.1:${ports[$((r - 1))]}/healthz" 2>/dev/null)
	[ "${h##* }" = 200 ] &&
		[ "$(jq -r '"\(.status) \(.role) \(.leader) \(.epoch) \(.store_lag_ms | type)"' <<<"${h% *}")" = \
			"ok follower http://127.0.0.1:${ports[0]} 1 number" ] &&
		n=$((n + 1))
done
[ $n = 2 ] && ok "the followers answer /healthz 200 follower, naming the leader, its epoch and the store lag" ||
	bad "follower health: $h"
grep -q 'following: another cnlabd leads' "$tmp/err2" && ok "a follower says who leads" ||
	bad "follower log: $(cat "$tmp/err2")"
h=$(curl -sS -H 'CNLab-Forwarded-By: http://elsewhere' -w ' %{http_code}' "http://127.0.0.1:${ports[1]}/v1/dashboard")
[ "${h##* }" = 503 ] && [ "$(jq -r .error.code <<<"${h% *}")" = not_leader ] &&
	ok "a request forwarded once is not forwarded again (no loops)" || bad "forwarded twice: $h"
m=$(curl -sS "http://127.0.0.1:${ports[2]}/metrics")
grep -qx 'cnlab_leader 0' <<<"$m" && grep -qx 'cnlab_leader_epoch 1' <<<"$m" &&
	ok "a follower's /metrics: cnlab_leader 0, the epoch it sees" || bad "follower metrics: $m"
if command -v promtool >/dev/null; then
	promtool check metrics <<<"$m" >/dev/null 2>&1 && ok "promtool accepts a follower's /metrics" ||
		bad "promtool: $(promtool check metrics <<<"$m" 2>&1)"
fi
h=$(curl -sS "http://127.0.0.1:${ports[0]}/healthz")
[ "$(jq -r '"\(.role) \(.store_lag_ms | type)"' <<<"$h")" = "leader number" ] &&
	[ "$(jq -r .store_lag_ms <<<"$h")" -lt 5000 ] &&
	grep -qx 'cnlab_leader 1' <(curl -sS "http://127.0.0.1:${ports[0]}/metrics") &&
	ok "the leader's /healthz says its store lag, /metrics cnlab_leader 1" || bad "leader health: $h"

# Everything below goes through the followers as well as the leader:
# login and the project through replica 2.
base=http://127.0.0.1:${ports[1]}
tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
	"$base/v1/auth/login" | jq -r .token)
[ -n "$tok" ] && [ "$tok" != null ] || die "login through a follower"
auth="Authorization: Bearer $tok"
proj=$(curl -sS -X POST -H "$auth" -d '{"name":"replicas"}' "$base/v1/projects" | jq -r .id)
[ -n "$proj" ] && [ "$proj" != null ] || die "create project"
ok "a follower serves: login and a project created through replica 2"
# A follower answers the reads of the store itself (no trip to the
# leader; cnlab_follower_local_requests_total), forwards the rest, and
# authenticates as the leader does: against the database, at once.
fm() { curl -sS "$base/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
fwd0=$(fm 'cnlab_forwarded_requests_total{outcome="ok"}')
loc0=$(fm cnlab_follower_local_requests_total)
a=$(curl -sS -H "$auth" "$base/v1/projects" | jq -r "[.items[] | select(.id == \"$proj\")] | length")
b=$(curl -sS -H "$auth" "$base/v1/auth/whoami" | jq -r .name)
c=$(curl -sS -H "$auth" "$base/v1/audit/verify" | jq -r .ok)
d=$(curl -sS -o /dev/null -w '%{http_code}' "$base/cli")
fwd1=$(fm 'cnlab_forwarded_requests_total{outcome="ok"}')
loc1=$(fm cnlab_follower_local_requests_total)
[ "$a $b $c $d" = "1 admin true 200" ] && [ "$fwd1" = "$fwd0" ] && [ $((loc1 - loc0)) = 4 ] &&
	ok "a follower answers reads of the store itself: projects, whoami, audit verify, /cli (4 local, none forwarded)" ||
	bad "follower-local reads: '$a $b $c $d', forwarded $fwd0 -> $fwd1, local $loc0 -> $loc1"
curl -sS -o /dev/null -H "$auth" "$base/v1/dashboard"
[ "$(fm 'cnlab_forwarded_requests_total{outcome="ok"}')" = $((fwd1 + 1)) ] &&
	ok "a read of the leader's memory (the dashboard) is forwarded" || bad "dashboard not forwarded"
# While the leader is paused (within its lease) the follower's reads still
# answer: they need no leader.
kill -STOP "${pids[$lr]}"
a=$(curl -sS --max-time 5 -w ' %{http_code}' -H "$auth" "$base/v1/projects/$proj")
kill -CONT "${pids[$lr]}"
[ "${a##* }" = 200 ] && [ "$(jq -r .id <<<"${a% *}")" = "$proj" ] &&
	ok "a follower reads the store while the leader is paused (GET of the project: 200)" ||
	bad "follower read with the leader paused: $a"
# Sessions: a token signed out through one follower (forwarded to the
# leader) is refused at once by the other follower's local read; a user
# without a role in a project cannot read it there either.
t2=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
	"$base/v1/auth/login" | jq -r .token)
a=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t2" "http://127.0.0.1:${ports[2]}/v1/projects")
b=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $t2" "$base/v1/auth/logout")
c=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t2" "http://127.0.0.1:${ports[2]}/v1/projects")
d=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t2" "http://127.0.0.1:${ports[2]}/v1/audit")
[ "$a $b $c $d" = "200 200 401 401" ] &&
	ok "a session signed out through one follower is refused by another's local reads (401)" ||
	bad "revoked session at a follower: $a $b $c $d"
curl -sS -o /dev/null -X POST -H "$auth" -d '{"name":"outsider","password":"outsider-password-123"}' "$base/v1/users"
t3=$(curl -sS -X POST -d '{"user":"outsider","password":"outsider-password-123"}' "$base/v1/auth/login" | jq -r .token)
a=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t3" "http://127.0.0.1:${ports[2]}/v1/projects/$proj")
b=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t3" "http://127.0.0.1:${ports[2]}/v1/projects/$proj/members")
c=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t3" "http://127.0.0.1:${ports[2]}/v1/audit")
e=$(curl -sS -H "Authorization: Bearer $t3" "http://127.0.0.1:${ports[2]}/v1/projects" | jq -r '.items | length')
[ "$t3" != null ] && [ "$a $b $c $e" = "404 404 403 0" ] &&
	ok "a user with no role reads nothing of the project at a follower (404), nor the audit log (403)" ||
	bad "outsider at a follower: token $t3, $a $b $c $e"
# A job's GET and the project's job list, with the scheduler's live
# status (the leader's memory, mirrored in the database): answered by a
# follower itself, the same status as the leader's; once cancelled, no
# status there either.
lb=http://127.0.0.1:${ports[0]}
jid=$(curl -sS -X POST -H "$auth" -d '{"command":"true","gpu":"h100-25"}' "$lb/v1/projects/$proj/jobs" | jq -r .id)
st() { curl -sS -H "$auth" "$1/v1/jobs/$jid" | jq -c '[.state, .status.phase, .status.reason]'; }
for _ in $(seq 100); do
	[ "$(st "$base")" = "$(st "$lb")" ] && [ "$(st "$base" | jq -r '.[2]')" != null ] && break
	sleep 0.05
done
fwd0=$(fm 'cnlab_forwarded_requests_total{outcome="ok"}')
loc0=$(fm cnlab_follower_local_requests_total)
a=$(st "$base")
b=$(st "$lb")
c=$(curl -sS -H "$auth" "$base/v1/projects/$proj/jobs" | jq -c "[.items[] | select(.id == \"$jid\") | [.state, .status.phase, .status.reason]] | .[0]")
loc1=$(fm cnlab_follower_local_requests_total)
[ "$a" = "$b" ] && [ "$c" = "$b" ] && [ "$(jq -r '.[0]' <<<"$a")" = pending ] && [ "$(jq -r '.[2]' <<<"$a")" != null ] &&
	[ "$(fm 'cnlab_forwarded_requests_total{outcome="ok"}')" = "$fwd0" ] && [ $((loc1 - loc0)) = 2 ] &&
	ok "a follower answers a job's GET and the job list itself, with the leader's live status ($a)" ||
	bad "job reads at a follower: follower $a list $c leader $b, local $loc0 -> $loc1"
a=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t3" "$base/v1/jobs/$jid")
[ "$a" = 404 ] && ok "a user with no role cannot read the job at a follower (404)" || bad "outsider job GET at a follower: $a"
curl -sS -o /dev/null -X POST -H "$auth" "$base/v1/jobs/$jid/cancel"
a=$(st "$base")
[ "$a" = '["cancelled",null,null]' ] && ok "cancelled through a follower: its GET there says so at once, no status" ||
	bad "cancelled job at a follower: $a"
# A body without a length is refused by the follower, Upgrade or not (a
# chunked body under an Upgrade header must not reach the leader as
# requests of its own: only the outer one may be answered).
r=$(python3 - "${ports[1]}" "$tok" <<'EOF'
import socket, sys
port, tok = int(sys.argv[1]), sys.argv[2]
inner = ("POST /v1/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
         "Content-Length: 20\r\n\r\n{\"name\":\"smuggled1\"}" % tok)
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(("GET /v1/auth/whoami HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nTransfer-Encoding: chunked\r\n\r\n"
           "%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)).encode())
print(s.recv(200).split(b"\r\n")[0].decode())
EOF
)
sleep 0.5
n=$(q "SELECT count(*) FROM projects WHERE name = 'smuggled1'")
[ "$r" = "HTTP/1.1 411 Length Required" ] && [ "$n" = 0 ] &&
	ok "an Upgrade request with a chunked body: 411 at the follower, nothing smuggled to the leader" ||
	bad "upgrade + chunked: '$r', smuggled projects: $n"
# Upgrade: h2c (curl --http2) is the connection's own: the request goes up
# as a plain one.
h=$(curl -sS -w ' %{http_code}' -H "Authorization: Bearer $tok" -H 'Connection: Upgrade, HTTP2-Settings' \
	-H 'Upgrade: h2c' -H 'HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA' "$base/v1/auth/whoami")
[ "${h##* }" = 200 ] && ok "Upgrade: h2c through a follower: served as a plain request" || bad "h2c: $h"
# The leader's early answer to a body it will not take (413 before the
# end of 8 MB) comes back as it is, not as 502.
big() { head -c 8000000 /dev/zero | tr '\0' 'x'; }
h=$(big | curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $tok" \
	-H 'Content-Type: application/json' --data-binary @- "$base/v1/projects" 2>&1)
d=$(big | curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $tok" \
	-H 'Content-Type: application/json' --data-binary @- "http://127.0.0.1:${ports[0]}/v1/projects" 2>&1)
[ "$h" = "$d" ] && [ "$d" = 413 ] &&
	ok "a body too large: the leader's 413 through a follower, as direct" || bad "8 MB body: follower $h, leader $d"

# client W: submit jobs until $tmp/stop exists, each under its own key,
# trying the replicas in turn until one acknowledges (201, or 200 for a
# key a lost answer had already stored); "id key ms" per acknowledgement.
client() {
	local w=$1 i=0 k=$1 key code body=$tmp/body.$w port sent
	: >"$tmp/ack.$w"
	while [ ! -e "$tmp/stop" ]; do
		key=rep-$w-$i
		while [ ! -e "$tmp/stop" ]; do
			port=${ports[$((k % 3))]}
			sent=$(date +%s%3N)
			code=$(curl -sS --max-time 10 -o "$body" -w '%{http_code}' -X POST \
				-H "$auth" -H "Idempotency-Key: $key" \
				-d "{\"command\":\"echo $key\",\"gpu\":\"h100-25\"}" \
				"http://127.0.0.1:$port/v1/projects/$proj/jobs" 2>/dev/null)
			if [ "$code" = 201 ] || [ "$code" = 200 ]; then
				[[ $(cat "$body") =~ \"id\":\"([^\"]+)\" ]] &&
					echo "${BASH_REMATCH[1]} $key $(date +%s%3N) $port $sent" >>"$tmp/ack.$w"
				break
			fi
			k=$((k + 1))
			sleep 0.02
		done
		i=$((i + 1))
	done
}
acked() { cat "$tmp"/ack.* 2>/dev/null | wc -l; }
for w in $(seq "$CLIENTS"); do
	client "$w" &
	subs+=($!)
done

# A status no leader has (as an old leader's last mirror may leave): the
# next leader's first mirror replaces them all.
q "INSERT INTO live_status VALUES ('job_stale', '{\"phase\":\"pending\",\"epoch\":0}', 0)"
failovers=()
for c in $(seq "$KILLS"); do
	before=$(acked)
	while [ $(($(acked) - before)) -lt 20 ]; do sleep 0.02; done
	sleep "0.$(printf '%03d' $((RANDOM % 400)))"
	old=$lr
	oldepoch=$lepoch
	kill -9 "${pids[$old]}"
	t0=$(date +%s%3N)
	wait "${pids[$old]}" 2>/dev/null
	if leader "$oldepoch"; then
		ok "kill $c: replica $lr leads with epoch $lepoch (was $old, $oldepoch)"
	else
		die "kill $c: no new leader"
	fi
	# The first acknowledgement of a request sent after the kill (by the
	# new leader, directly or through a follower).
	first=
	for _ in $(seq 600); do
		first=$(cat "$tmp"/ack.* | awk -v t="$t0" '$5 > t {print $3}' | sort -n | head -1)
		[ -n "$first" ] && break
		sleep 0.05
	done
	[ -n "$first" ] && failovers+=($((first - t0))) || bad "kill $c: no submission acknowledged after it"
	if [ "$c" = 1 ]; then
		for _ in $(seq 200); do
			[ "$(q "SELECT count(*) FROM live_status WHERE id = 'job_stale'")" = 0 ] && break
			sleep 0.05
		done
		n=$(q "SELECT count(*) FROM live_status l LEFT JOIN jobs j ON j.id = l.id WHERE j.id IS NULL OR j.state <> 'pending'")
		m=$(q "SELECT count(*) FROM live_status")
		[ "$n" = 0 ] && [ "$m" -gt 0 ] &&
			ok "the new leader's first mirror replaced the old one's: $m statuses, each a pending job's" ||
			bad "live statuses after a failover: $n not a pending job's, $m in all"
	fi
	start "$old" # back, as a standby
done
echo "failover (kill -9 to the next acknowledged submission), ms: ${failovers[*]}"

# Paused past its lease, then woken: it must step down.
before=$(acked)
while [ $(($(acked) - before)) -lt 20 ]; do sleep 0.02; done
old=$lr
oldepoch=$lepoch
kill -STOP "${pids[$old]}"
leader "$oldepoch" && [ "$lr" != "$old" ] &&
	ok "a leader paused past its lease is replaced (replica $lr, epoch $lepoch)" ||
	die "no takeover from a paused leader"
before=$(acked)
while [ $(($(acked) - before)) -lt 10 ]; do sleep 0.02; done
kill -CONT "${pids[$old]}"
wait "${pids[$old]}"
rc=$?
[ $rc = 75 ] && grep -q 'lost the leader.s lease; stepping down' "$tmp/err$old" &&
	ok "woken, the old leader steps down (exit 75)" ||
	bad "woken old leader: rc=$rc $(tail -3 "$tmp/err$old")"
unset "pids[$old]"
role=$(role "${ports[$((lr - 1))]}")
[ "$role" = "leader $lepoch" ] && ok "the new leader keeps leading" || bad "leader now: $role"

before=$(acked)
while [ $(($(acked) - before)) -lt 10 ]; do sleep 0.02; done
touch "$tmp/stop"
for p in "${subs[@]}"; do wait "$p"; done
subs=()

total=$(acked)
missing=0
while read -r id key _; do
	n=$(q "SELECT count(*) FROM jobs WHERE id = '$id'")
	[ "$n" = 1 ] || missing=$((missing + 1))
done < <(cat "$tmp"/ack.*)
[ "$total" -gt 60 ] && [ $missing = 0 ] &&
	ok "every acknowledged submission is stored ($total)" || bad "$missing of $total acknowledged jobs missing"
keys=$(cat "$tmp"/ack.* | awk '{print $2}' | sort -u | wc -l)
[ "$keys" = "$total" ] && ok "each key acknowledged once" || bad "$total acks for $keys keys"
# Each command names its key: a request retried on another replica must
# not have made a second job.  Beyond the acknowledged ones, at most one
# per client may be stored unacknowledged (in flight when it stopped).
jobs=$(q "SELECT count(*) FROM jobs WHERE project_id = '$proj'")
dups=$(q "SELECT count(*) FROM (SELECT command FROM jobs WHERE project_id = '$proj' GROUP BY command HAVING count(*) > 1) AS d")
[ "$dups" = 0 ] && [ "$jobs" -ge "$total" ] && [ "$jobs" -le $((total + CLIENTS)) ] &&
	ok "no submission stored twice ($jobs jobs for $total acknowledged)" ||
	bad "jobs $jobs for $total acknowledged, commands stored twice: $dups"
v=$(curl -sS -H "$auth" "http://127.0.0.1:${ports[$((lr - 1))]}/v1/audit/verify")
[ "$(jq -r .ok <<<"$v")" = true ] && ok "the audit chain verifies" || bad "verify: $v"

# The CLI with every replica's address.
export HOME=$tmp/home CNLAB_CONFIG=$tmp/home/cli.json
mkdir -p "$HOME"
export CNLAB_SERVER="http://127.0.0.1:${ports[0]},http://127.0.0.1:${ports[1]},http://127.0.0.1:${ports[2]}"
echo "$CNLAB_ADMIN_PASSWORD" | "$cnlab" login --user admin --password-stdin >/dev/null 2>&1 &&
	ok "cnlab logs in through the list of replicas" || bad "cnlab login"
# A script over 512 KiB: its file is uploaded to the leader (files_dir),
# which is killed before any node could take the job; the new leader
# hands the file out from the folder the replicas share.
{
	echo 'echo uploaded-before-the-failover'
	head -c 600000 /dev/zero | tr '\0' '#'
	echo
} >"$tmp/up.sh"
id=$("$cnlab" run --detach --gpu h100-25 --priority high --project replicas -o json "$tmp/up.sh" 2>&1 | jq -r '.id // empty')
upid=$id
[ -n "$id" ] && ok "cnlab run --detach reaches the leader" || bad "cnlab run: $id"
old=$lr
oldepoch=$lepoch
kill -9 "${pids[$old]}"
wait "${pids[$old]}" 2>/dev/null
unset "pids[$old]"
leader "$oldepoch" || die "no leader after the last kill"
out=
for _ in $(seq 50); do
	out=$("$cnlab" jobs show "$id" --project replicas -o json 2>&1) && break
	sleep 0.2
done
[ "$(jq -r '.id // empty' <<<"$out" 2>/dev/null)" = "$id" ] &&
	ok "after a failover the CLI finds the new leader, same session" ||
	bad "cnlab after failover: $out"
# --- node agents across a failover --------------------------------------
start "$old" # the replica killed last, back as a standby
list=$CNLAB_SERVER
apids=()
for x in a b; do
	jt=$(curl -sS -X POST -H "$auth" \
		-d "{\"node\":\"rep-$x\",\"expires_in_seconds\":600}" \
		"http://127.0.0.1:${ports[$((lr - 1))]}/v1/nodes/join-tokens" | jq -r .token)
	CNLAB_AGENT_TOKEN=$jt "$agent" --server "$list" --name "rep-$x" \
		--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent-$x" \
		--cpu-milli 8000 --mem-mib 16384 --log-level info \
		--server-command 'exec python3 -m http.server $CNLAB_PORT --bind 127.0.0.1' \
		>"$tmp/agent-$x.out" 2>"$tmp/agent-$x.err" &
	apids+=($!)
	pids[agent$x]=$!
done
for x in a b; do
	for _ in $(seq 100); do grep -q 'msg=registered' "$tmp/agent-$x.err" && break; sleep 0.1; done
done
grep -q 'msg=registered' "$tmp/agent-a.err" && grep -q 'msg=registered' "$tmp/agent-b.err" &&
	ok "two agents registered through the list of replicas" ||
	die "agents: $(tail -3 "$tmp/agent-a.err" "$tmp/agent-b.err")"
jobs=()
for i in 1 2 3 4 5 6; do
	id=$("$cnlab" run --detach --gpu h100-100 --project replicas -o json -- \
		sh -c "sleep 2; echo output-of-$i" 2>&1 | jq -r '.id // empty')
	[ -n "$id" ] && jobs+=("$id")
done
[ ${#jobs[@]} = 6 ] && ok "six whole-GPU jobs submitted" || bad "submitted ${#jobs[@]} of 6"
# Kill the leader once two of them run.
for _ in $(seq 200); do
	[ "$(cat "$tmp"/agent-*.err | grep -c 'msg="workload started"')" -ge 2 ] && break
	sleep 0.1
done
old=$lr
oldepoch=$lepoch
kill -9 "${pids[$old]}"
wait "${pids[$old]}" 2>/dev/null
unset "pids[$old]"
leader "$oldepoch" && ok "killed the leader with two jobs running; replica $lr leads (epoch $lepoch)" ||
	die "no leader"
start "$old"
done_n=0
for _ in $(seq 600); do
	done_n=0
	for id in "${jobs[@]}"; do
		st=$("$cnlab" jobs show "$id" --project replicas -o json 2>/dev/null | jq -r '.state // empty')
		[ "$st" = succeeded ] && done_n=$((done_n + 1))
	done
	[ $done_n = 6 ] && break
	sleep 0.5
done
[ $done_n = 6 ] && ok "every job ended succeeded across the failover" ||
	bad "$done_n of 6 succeeded: $(for id in "${jobs[@]}"; do "$cnlab" jobs show "$id" --project replicas -o json 2>/dev/null | jq -c '{id,state}'; done)"
twice=0
for id in "${jobs[@]}"; do
	n=$(cat "$tmp"/agent-*.err | grep -c "msg=\"workload started\" id=$id ")
	[ "$n" = 1 ] || { twice=$((twice + 1)); echo "job $id started $n times" >&2; }
done
# The clients' earlier jobs (pending until the agents came) ran too: none
# of any may have started twice.
dup=$(cat "$tmp"/agent-*.err | grep -o 'msg="workload started" id=[^ ]*' | sort | uniq -d)
all=$(cat "$tmp"/agent-*.err | grep -c 'msg="workload started"')
[ $twice = 0 ] && [ -z "$dup" ] &&
	ok "no job started twice (the agents' logs: $all starts)" ||
	bad "$twice of ours not started exactly once; started twice: $dup"
outs=0
i=0
for id in "${jobs[@]}"; do
	i=$((i + 1))
	n=$("$cnlab" jobs logs "$id" --project replicas 2>/dev/null | grep -c "output-of-$i")
	[ "$n" = 1 ] && outs=$((outs + 1))
done
[ $outs = 6 ] && ok "each job's output once" || bad "$outs of 6 jobs have their output once"
st=
for _ in $(seq 150); do
	st=$("$cnlab" jobs show "$upid" --project replicas -o json 2>/dev/null | jq -r '.state // empty')
	case $st in succeeded | failed | cancelled) break ;; esac
	sleep 0.2
done
out=$("$cnlab" jobs logs "$upid" --project replicas 2>&1)
[ "$st" = succeeded ] && grep -qx uploaded-before-the-failover <<<"$out" &&
	ok "a job whose script was uploaded before a failover runs after it (files_dir shared)" ||
	bad "uploaded job across the failover: state=$st logs=$out"
# --- the CLI through one follower only ------------------------------------
fr=
for r in 1 2 3; do
	[ "$r" != "$lr" ] && [ -n "${pids[$r]:-}" ] && kill -0 "${pids[$r]}" 2>/dev/null && fr=$r && break
done
furl=http://127.0.0.1:${ports[$((fr - 1))]}
# The session of the CLI's config is bound to the addresses it logged in
# at: this one is given the token itself.
out=$(CNLAB_SERVER=$furl CNLAB_TOKEN=$tok timeout 120 "$cnlab" run --gpu h100-100 --project replicas -- \
	sh -c 'echo through-a-follower; exit 3' 2>"$tmp/frun.err")
rc=$?
[ $rc = 3 ] && [ "$out" = through-a-follower ] &&
	ok "cnlab run through a follower only (replica $fr): output streamed, exit code 3" ||
	bad "cnlab run through a follower: rc=$rc out=$out err=$(cat "$tmp/frun.err")"
# Its output again, by `cnlab jobs logs` through the same follower: read from
# the store there, not forwarded.
fjob=$(grep -o 'job_[0-9A-Za-z]*' "$tmp/frun.err" | head -1)
l0=$(curl -sS "$furl/metrics" | awk '$1 == "cnlab_follower_local_requests_total" {print $2}')
out=$(CNLAB_SERVER=$furl CNLAB_TOKEN=$tok timeout 60 "$cnlab" jobs logs "$fjob" 2>&1)
l1=$(curl -sS "$furl/metrics" | awk '$1 == "cnlab_follower_local_requests_total" {print $2}')
[ -n "$fjob" ] && [ "$out" = through-a-follower ] && [ "$l1" -gt "$l0" ] &&
	ok "cnlab jobs logs through a follower: the output, read there from the store" ||
	bad "cnlab jobs logs through a follower: job '$fjob' out '$out' local $l0 -> $l1"
# A script over 512 KiB goes up as an upload (a streamed body, with its
# length).
{
	echo 'echo big-through-a-follower'
	head -c 600000 /dev/zero | tr '\0' '#'
	echo
} >"$tmp/big.sh"
out=$(CNLAB_SERVER=$furl CNLAB_TOKEN=$tok timeout 120 "$cnlab" run "$tmp/big.sh" --gpu h100-100 \
	--project replicas 2>"$tmp/fbig.err")
rc=$?
[ $rc = 0 ] && [ "$out" = big-through-a-follower ] &&
	ok "a 600 KB script uploaded through a follower runs" ||
	bad "upload through a follower: rc=$rc out=$out err=$(cat "$tmp/fbig.err")"
srv=$(curl -sS -X POST -H "$auth" -d '{"name":"nb","image":"host","profile":"h100-25pct"}' \
	"$furl/v1/projects/$proj/servers" | jq -r .id)
st=
for _ in $(seq 300); do
	st=$(curl -sS -H "$auth" "$furl/v1/servers/$srv" | jq -r .state)
	[ "$st" = running ] && break
	sleep 0.2
done
out=$(CNLAB_SERVER=$furl CNLAB_TOKEN=$tok timeout 60 "$cnlab" server exec nb --project replicas -- \
	sh -c 'echo exec-through-a-follower; exit 5' 2>"$tmp/fexec.err")
rc=$?
[ "$st" = running ] && [ $rc = 5 ] && [ "$out" = exec-through-a-follower ] &&
	ok "cnlab server exec through a follower (an upgraded connection relayed): output, exit code 5" ||
	bad "server exec through a follower: state=$st rc=$rc out=$out err=$(cat "$tmp/fexec.err")"
curl -sS -o /dev/null -X POST -H "$auth" "$furl/v1/servers/$srv/stop"
for _ in $(seq 150); do
	[ "$(curl -sS -H "$auth" "$furl/v1/servers/$srv" | jq -r .state)" = stopped ] && break
	sleep 0.2
done
for p in "${apids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
unset "pids[agenta]" "pids[agentb]"
# --- a leader cut off from the database -----------------------------------
for k in "${!pids[@]}"; do
	kill -TERM "${pids[$k]}" 2>/dev/null
	wait "${pids[$k]}" 2>/dev/null
	unset "pids[$k]"
done
python3 "$(dirname "$0")/hold_proxy.py" "$tmp/proxy.port" "$(cat "$CNLAB_TEST_PG_DIR/port")" "$tmp/hold" &
pids[proxy]=$!
for _ in $(seq 600); do [ -s "$tmp/proxy.port" ] && break; sleep 0.05; done
[ -s "$tmp/proxy.port" ] || die "the holding proxy did not start"
pw=${CNLAB_TEST_STORE_PG#postgresql://cnlab:}
pw=${pw%%@*}
db_direct=$db
db="postgresql://cnlab:$pw@127.0.0.1:$(cat "$tmp/proxy.port")/cnlab"
start 1 # through the proxy: it leads (the others gave the lease up)
db=$db_direct
leader || die "no leader through the proxy: replica 1 $(kill -0 "${pids[1]}" 2>/dev/null && echo running ||
	echo exited), its last words: $(tail -n 8 "$tmp/err1")"
[ "$lr" = 1 ] || die "replica $lr leads, not 1"
cutepoch=$lepoch
start 2
sleep 1
touch "$tmp/hold"
leader "$cutepoch" && [ "$lr" = 2 ] && ok "replica 1 cut off: replica 2 leads (epoch $lepoch)" ||
	die "no takeover from a cut-off leader"
h=$(curl -sS --max-time 5 -w ' %{http_code}' "http://127.0.0.1:${ports[0]}/healthz")
[ "${h##* }" = 503 ] && [ "$(jq -r .status <<<"${h% *}")" = unsure ] &&
	ok "the cut-off leader's /healthz says 503 unsure" || bad "cut-off healthz: $h"
h=$(curl -sS --max-time 5 -X POST -H "$auth" -d '{"command":"true","gpu":"h100-25"}' -w ' %{http_code}' \
	"http://127.0.0.1:${ports[0]}/v1/projects/$proj/jobs")
[ "${h##* }" = 503 ] && [ "$(jq -r .error.code <<<"${h% *}")" = not_leader ] &&
	ok "it refuses requests at once: 503 not_leader" || bad "cut-off request: $h"
out=$(timeout 60 "$cnlab" jobs list --project replicas -o json 2>&1) &&
	[ "$(jq -r '.items | length' <<<"$out")" -ge 1 ] &&
	ok "the CLI moves on to the new leader" || bad "CLI with a cut-off leader: $out"
rm -f "$tmp/hold"
rc=0
for _ in $(seq 150); do
	kill -0 "${pids[1]}" 2>/dev/null || break
	sleep 0.1
done
wait "${pids[1]}"
rc=$?
[ $rc = 75 ] && ok "healed, it finds its lease taken and exits 75" || bad "healed old leader: rc=$rc"
unset "pids[1]"
# --- replicas over TLS: the follower verifies the leader ----------------
for k in "${!pids[@]}"; do
	kill -TERM "${pids[$k]}" 2>/dev/null
	wait "${pids[$k]}" 2>/dev/null
	unset "pids[$k]"
done
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 \
	-subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
tls=(--tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem")
tstart() { # tstart R [FLAGS...]: replica R over TLS
	local r=$1
	shift
	"$cnlabd" --store "$db" --data-dir "$tmp/t$r" --files-dir "$tmp/files" --lease "$LEASE" "${tls[@]}" "$@" \
		--http-max-connections-per-client 8 \
		--listen "127.0.0.1:${ports[$((r - 1))]}" --notebook-listen "127.0.0.1:${nbports[$((r - 1))]}" \
		>>"$tmp/tout$r" 2>>"$tmp/terr$r" &
	pids[$r]=$!
}
tstart 1
for _ in $(seq 200); do
	[ "$(curl -sS --cacert "$tmp/cert.pem" "https://127.0.0.1:${ports[0]}/healthz" 2>/dev/null | jq -r .role 2>/dev/null)" = leader ] && break
	sleep 0.05
done
tstart 2 --replica-ca-file "$tmp/cert.pem"
tstart 3 # no CA for the leader's certificate
sleep 2
h=$(curl -sS --cacert "$tmp/cert.pem" "https://127.0.0.1:${ports[1]}/healthz")
# (the dashboard is the leader's: forwarded)
w=$(curl -sS --cacert "$tmp/cert.pem" -o /dev/null -w '%{http_code}' -H "$auth" "https://127.0.0.1:${ports[1]}/v1/dashboard")
[ "$(jq -r .leader <<<"$h")" = "https://127.0.0.1:${ports[0]}" ] && [ "$w" = 200 ] &&
	ok "over TLS a follower forwards to the https leader it verifies (replica_ca_file)" ||
	bad "TLS forwarding: health $h dashboard '$w' $(tail -3 "$tmp/terr2")"
h=$(curl -sS --cacert "$tmp/cert.pem" -w ' %{http_code}' -H "$auth" "https://127.0.0.1:${ports[2]}/v1/dashboard")
[ "${h##* }" = 503 ] && [ "$(jq -r .error.code <<<"${h% *}")" = not_leader ] &&
	grep -q 'cannot forward to the leader.*certificate' "$tmp/terr3" &&
	ok "a follower that cannot verify the leader's certificate forwards nothing (503 not_leader)" ||
	bad "unverified TLS leader: $h $(tail -3 "$tmp/terr3")"
# Each client is counted by the follower it talks to; the leader does not
# count the follower's forwarded connections toward one address (their
# proof: CNLab-Replica), so clients behind one follower do not lock each
# other out.  The cap is 8 per address here: two clients (127.0.0.2 and
# .3) hold 6 event streams each through replica 2, then a third asks.
fb=https://127.0.0.1:${ports[1]}
jid=$(curl -sS --cacert "$tmp/cert.pem" -X POST -H "$auth" -d '{"command":"true","gpu":"h100-25"}' \
	"$fb/v1/projects/$proj/jobs" | jq -r .id)
streams=()
for src in 127.0.0.2 127.0.0.3; do
	for _ in 1 2 3 4 5 6; do
		curl -sN --cacert "$tmp/cert.pem" --interface "$src" -H "$auth" \
			"$fb/v1/jobs/$jid/events" >/dev/null 2>&1 &
		streams+=($!)
	done
done
sleep 2
h=$(curl -sS --cacert "$tmp/cert.pem" --interface 127.0.0.4 -o /dev/null -w ' %{http_code}' -H "$auth" "$fb/v1/dashboard")
alive=0
for p in "${streams[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
[ "${h##* }" = 200 ] && [ $alive = 12 ] &&
	ok "12 streams of two clients through one follower do not lock a third client out (cap 8 per address)" ||
	bad "clients behind one follower: $alive of 12 streams open, third client: $h"
for p in "${streams[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
[ "$fails" = 0 ] || exit 1
