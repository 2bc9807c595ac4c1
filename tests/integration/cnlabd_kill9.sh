#!/usr/bin/env bash
# cnlabd_kill9.sh - a job acknowledged to the client survives kill -9 of
# cnlabd at any moment.  Several submitters POST jobs in a loop, each
# recording every job it got a 201 for (id, Idempotency-Key, command);
# once some are acknowledged, after a random short delay, the daemon is
# killed with SIGKILL in the middle of the burst and restarted on the same
# data directory, KILLS (5) times.  After the last restart every acknowledged
# id must come back from GET /v1/jobs/{id} with its command intact, the
# project's job list must hold no id twice, and retrying an acknowledged
# request's Idempotency-Key must answer 200 with the original id.
#
# Not vacuous: each cycle must acknowledge jobs before its kill, and at
# least one kill must land while a request was in flight (a submitter's
# curl lost its connection after sending, rather than being refused).
# Submitters stop at their first transport error; any HTTP status other
# than 201 while the daemon lives is a failure.
set -u
cnlabd=$1
KILLS=${KILLS:-5}
WRITERS=${WRITERS:-4}
tmp=$(mktemp -d)
data=$tmp/d
pid=
subs=()
cleanup() {
	local s
	for s in "${subs[@]}"; do
		kill "$s" 2>/dev/null
	done
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
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
die() {
	bad "$1"
	exit 1
}

export CNLAB_JWT_SECRET=kill9-test-secret-0123456789abcdef-xyz
export CNLAB_ADMIN_PASSWORD=kill9-admin-password

# start ARGS...: run cnlabd on $data, port 0; sets pid and base.
start() {
	# Empty it here: the child's own truncation may come after our first
	# read, which would then find the previous run's port.
	: >"$tmp/out"
	"$cnlabd" --data-dir "$data" --listen 127.0.0.1:0 --log-level warn \
		"$@" >"$tmp/out" 2>>"$tmp/err" &
	pid=$!
	local port=
	while [ -z "$port" ]; do
		kill -0 "$pid" 2>/dev/null || return 1
		port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
		[ -n "$port" ] || sleep 0.02
	done
	base=http://127.0.0.1:$port
}

start --bootstrap-admin root || die "start: $(cat "$tmp/err")"
tok=$(curl -sS -X POST -d "{\"user\":\"root\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
	"$base/v1/auth/login" | jq -r .token)
[ -n "$tok" ] && [ "$tok" != null ] || die "login"
auth="Authorization: Bearer $tok"
proj=$(curl -sS -X POST -H "$auth" -d '{"name":"kill9"}' \
	"$base/v1/projects" | jq -r .id)
[ -n "$proj" ] && [ "$proj" != null ] || die "create project"

# submit CYCLE W: POST jobs until the first transport error.  Appends
# "id key command" per 201 to ack.CYCLE.W; writes "curl RC" or "http CODE"
# (what ended the loop) to end.CYCLE.W.
submit() {
	local c=$1 w=$2 i=0 key cmd code rc body=$tmp/body.$1.$2
	local url=$base/v1/projects/$proj/jobs
	: >"$tmp/ack.$c.$w"
	while :; do
		key=k9-$c-$w-$i
		cmd="echo cycle $c writer $w job $i"
		code=$(curl -sS -o "$body" -w '%{http_code}' -X POST \
			-H "$auth" -H "Idempotency-Key: $key" \
			-d "{\"command\":\"$cmd\",\"gpu\":\"h100-25\",\"priority\":$((i % 4))}" \
			"$url" 2>/dev/null)
		rc=$?
		if [ "$rc" != 0 ]; then
			echo "curl $rc" >"$tmp/end.$c.$w"
			return
		fi
		if [ "$code" != 201 ]; then
			echo "http $code $(cat "$body")" >"$tmp/end.$c.$w"
			return
		fi
		[[ $(cat "$body") =~ \"id\":\"([^\"]+)\" ]] || {
			echo "http 201 without id" >"$tmp/end.$c.$w"
			return
		}
		echo "${BASH_REMATCH[1]} $key $cmd" >>"$tmp/ack.$c.$w"
		i=$((i + 1))
	done
}

acked() { cat "$tmp"/ack.* 2>/dev/null | wc -l; }

# KILLS cycles; more (up to 3 x KILLS) while no kill has yet caught a
# request in flight, since a kill can land with every submitter between
# two curl runs.
inflight_kills=0
c=0
while [ "$c" -lt "$KILLS" ] ||
	{ [ "$inflight_kills" = 0 ] && [ "$c" -lt $((3 * KILLS)) ]; }; do
	c=$((c + 1))
	if [ "$c" -gt 1 ]; then
		# No --bootstrap-admin: the store already has its administrator.
		start || die "restart $c: $(cat "$tmp/err")"
	fi
	before=$(acked)
	subs=()
	for w in $(seq "$WRITERS"); do
		submit "$c" "$w" &
		subs+=($!)
	done
	# Let the burst acknowledge some jobs (or end: a failure is reported
	# below), then kill at a random moment within the next 0.3 s.
	while [ $(($(acked) - before)) -lt 20 ]; do
		alive=0
		for s in "${subs[@]}"; do
			kill -0 "$s" 2>/dev/null && alive=1
		done
		[ "$alive" = 1 ] || break
		sleep 0.01
	done
	sleep "0.$(printf '%03d' $((RANDOM % 300)))"
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	pid=
	for s in "${subs[@]}"; do
		wait "$s"
	done
	subs=()

	n=$(($(acked) - before))
	[ "$n" -gt 0 ] && ok "cycle $c: $n jobs acknowledged before kill -9" ||
		bad "cycle $c: no job acknowledged before the kill"
	# 52 empty reply, 56 reset, 55/18 send/partial: the connection was
	# open when the daemon died.  7 (refused): it was already dead.
	inflight=0
	for w in $(seq "$WRITERS"); do
		end=$(cat "$tmp/end.$c.$w" 2>/dev/null)
		case $end in
		"curl 52" | "curl 56" | "curl 55" | "curl 18") inflight=$((inflight + 1)) ;;
		"curl 7") ;;
		*) bad "cycle $c writer $w stopped on: $end" ;;
		esac
	done
	[ "$inflight" -gt 0 ] && inflight_kills=$((inflight_kills + 1))
	echo "     cycle $c: $inflight of $WRITERS requests in flight at the kill"
done
[ "$inflight_kills" -gt 0 ] && ok "$inflight_kills of $c kills hit requests in flight" ||
	bad "no kill hit a request in flight"

start || die "final restart: $(cat "$tmp/err")"
cat "$tmp"/ack.* >"$tmp/acked"
total=$(wc -l <"$tmp/acked")

# Every acknowledged id, fetched in one curl run: body line, status line.
# (In a curl config, options apply per URL up to "next", so each block
# names its own headers and write-out.)
wout='write-out = "\\n%{http_code}\\n"'
while read -r id _; do
	printf 'url = "%s/v1/jobs/%s"\nheader = "%s"\n%s\nnext\n' \
		"$base" "$id" "$auth" "$wout"
done <"$tmp/acked" | sed '$d' >"$tmp/get.cfg" # no "next" after the last
curl -sS -K "$tmp/get.cfg" >"$tmp/got"
missing=0
exec 3<"$tmp/got"
while read -r id key cmd; do
	read -r body <&3
	read -r code <&3
	if [ "$code" != 200 ] ||
		[ "$(jq -r '.id + " " + .command' <<<"$body")" != "$id $cmd" ]; then
		[ "$missing" -lt 5 ] && echo "     lost: $id ($cmd): $code $body"
		missing=$((missing + 1))
	fi
done <"$tmp/acked"
exec 3<&-
[ "$missing" = 0 ] && ok "all $total acknowledged jobs survived with their commands" ||
	bad "$missing of $total acknowledged jobs lost or changed"

# The project's job list, page by page, one id a line into FILE.
list_ids() {
	local after='' page
	: >"$1"
	while :; do
		page=$(curl -sS -H "$auth" "$base/v1/projects/$proj/jobs?limit=1000${after:+&after=$after}")
		jq -r '.items[].id' <<<"$page" >>"$1" || die "list: $page"
		after=$(jq -r '.next // empty' <<<"$page")
		[ -n "$after" ] || break
	done
}
list_ids "$tmp/listed"
dups=$(sort "$tmp/listed" | uniq -d | wc -l)
[ "$dups" = 0 ] && ok "job list: $(wc -l <"$tmp/listed") ids, none twice" ||
	bad "job list: $dups ids listed twice"
absent=$(cut -d' ' -f1 "$tmp/acked" | sort | comm -23 - <(sort "$tmp/listed") | wc -l)
[ "$absent" = 0 ] && ok "job list holds every acknowledged id" ||
	bad "$absent acknowledged ids missing from the job list"

# Retrying an acknowledged request with its Idempotency-Key after the
# restarts replays the original job: 200 and the same id.
while read -r id key cmd; do
	printf 'url = "%s/v1/projects/%s/jobs"\nheader = "%s"\n' "$base" "$proj" "$auth"
	printf 'header = "Idempotency-Key: %s"\n' "$key"
	printf 'data = "{\\"command\\":\\"%s\\",\\"gpu\\":\\"h100-25\\",\\"priority\\":%d}"\n%s\nnext\n' \
		"$cmd" "$((${key##*-} % 4))" "$wout"
done <"$tmp/acked" | sed '$d' >"$tmp/retry.cfg"
curl -sS -K "$tmp/retry.cfg" >"$tmp/retried"
wrong=0
exec 3<"$tmp/retried"
while read -r id key cmd; do
	read -r body <&3
	read -r code <&3
	if [ "$code" != 200 ] || [ "$(jq -r .id <<<"$body")" != "$id" ]; then
		[ "$wrong" -lt 5 ] && echo "     retry of $key: $code $body (want 200, $id)"
		wrong=$((wrong + 1))
	fi
done <"$tmp/acked"
exec 3<&-
[ "$wrong" = 0 ] && ok "all $total Idempotency-Key retries replayed the original job" ||
	bad "$wrong of $total Idempotency-Key retries did not replay the original"
list_ids "$tmp/listed2"
cmp -s "$tmp/listed" "$tmp/listed2" && ok "retries added no job" ||
	bad "retries changed the job list: $(wc -l <"$tmp/listed") -> $(wc -l <"$tmp/listed2") ids"

kill -TERM "$pid"
wait "$pid"
pid=
[ "$fails" = 0 ] || exit 1
