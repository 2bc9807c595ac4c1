#!/usr/bin/env bash
# postgres.sh - the whole platform on PostgreSQL: the all-in-one cnlabd
# with store = postgresql://..., run by tests/lib/pg-tmp (a real
# PostgreSQL 15 in a temporary folder; CNLAB_TEST_STORE_PG, _PG_DIR and
# _PG_BIN come from it), driven with the CLI the way an administrator and
# a user would:
#   - cnlabd migrate: creates the schema, then says it is up to date; a
#     database newer than the build is refused (exit 1, naming both
#     versions) and left as it was; an unknown scheme is a usage error;
#   - the seeds' first job (cnlab run on a GPU slice) runs in a real
#     container and its state lands in PostgreSQL, not in an SQLite file;
#   - a restart finds everything (jobs, the audit chain, which verifies);
#   - kill -9 of cnlabd loses no acknowledged submission;
#   - PostgreSQL stopped under a running cnlabd: submissions and logins get
#     503 naming the database (the CLI exits non-zero, nothing stored; a
#     login is not told its password is wrong), and
#     once PostgreSQL is back the same cnlabd serves and runs work again
#     without a restart;
#   - the password in the store's URL appears in no log line, no reply.
set -u
cnlabd=$1
cnlab=$2
source "$(dirname "$0")/lib.sh"
need_tools jq psql
[ -n "${CNLAB_TEST_STORE_PG:-}" ] || {
	echo "FAIL run me under tests/lib/pg-tmp run -- $0 ..."
	exit 1
}
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD
export HOME=$tmp/home CNLAB_CONFIG=$tmp/home/cli.json
mkdir -p "$HOME"

base=$CNLAB_TEST_STORE_PG
pw=${base#postgresql://cnlab:}
pw=${pw%%@*}
db="$base/cnlab"
q() { psql -X -q -t -A "$db" -c "$1"; }
psql -X -q "$base/postgres" -c "CREATE DATABASE cnlab" || exit 1
pgctl() { runuser -u postgres -- "$CNLAB_TEST_PG_BIN/pg_ctl" -D "$CNLAB_TEST_PG_DIR/data" -w "$@" >/dev/null; }

# --- cnlabd migrate ---------------------------------------------------------
out=$("$cnlabd" migrate --store "$db" 2>&1)
rc=$?
[ $rc = 0 ] && grep -q 'postgresql.*schema version 5, up to date' <<<"$out" &&
	[ "$(q 'SELECT count(*) FROM schema_version')" = 5 ] &&
	ok "migrate creates the schema (version 5)" || bad "migrate: rc=$rc $out"
grep -q "$pw" <<<"$out" && bad "migrate printed the password" || ok "migrate's output has no password"
out=$("$cnlabd" migrate --store "$db" 2>&1) && [ "$(q 'SELECT count(*) FROM schema_version')" = 5 ] &&
	ok "migrate again changes nothing" || bad "second migrate: $out"
# Several database hosts in one URL (a Patroni cluster): libpq takes the
# one that accepts writes; the first here does not answer at all.
hp=${base#postgresql://cnlab:*@}
multi="postgresql://cnlab:$pw@127.0.0.1:1,$hp/cnlab?target_session_attrs=read-write"
out=$("$cnlabd" migrate --store "$multi" 2>&1)
rc=$?
[ $rc = 0 ] && grep -q 'schema version 5, up to date' <<<"$out" && ! grep -q "$pw" <<<"$out" &&
	ok "a URL of several hosts (target_session_attrs=read-write) reaches the one that answers" ||
	bad "several hosts: rc=$rc $out"
q "INSERT INTO schema_version VALUES (99, 1)"
out=$("$cnlabd" migrate --store "$db" 2>&1)
rc=$?
[ $rc = 1 ] && grep -q 'newer than this build' <<<"$out" && grep -q 99 <<<"$out" &&
	[ "$(q 'SELECT max(version) FROM schema_version')" = 99 ] &&
	ok "a newer database is refused and left as it was" || bad "newer: rc=$rc $out"
q "DELETE FROM schema_version WHERE version = 99"
out=$("$cnlabd" migrate --store "mysql://x/y" 2>&1)
rc=$?
[ $rc != 0 ] && grep -q 'unknown store "mysql:"' <<<"$out" &&
	ok "an unknown store scheme is refused by name" || bad "mysql: rc=$rc $out"
out=$("$cnlabd" migrate --store "postgresql://cnlab:wrong@127.0.0.1:1/cnlab" 2>&1)
rc=$?
[ $rc = 1 ] && grep -q 'cannot connect to postgresql://cnlab@127.0.0.1:1/cnlab' <<<"$out" &&
	! grep -q wrong <<<"$out" &&
	ok "an unreachable server is named, without its password" || bad "unreachable: rc=$rc $out"

# --- the all-in-one on PostgreSQL ------------------------------------------
start() {
	: >"$tmp/out"
	"$cnlabd" --all-in-one --store "$db" --data-dir "$tmp/data" \
		--listen 127.0.0.1:0 --gpus fake:2xH100-80GB-SXM --store-pool 3 \
		--log-level info >"$tmp/out" 2>>"$tmp/err" &
	pid=$!
	for _ in $(seq 300); do
		grep -q 'CNLab is running' "$tmp/out" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
	export CNLAB_SERVER=$url # a new port at each start: log in there
	[ -n "$url" ] && "$cnlab" login --user admin --password-stdin \
		<"$tmp/data/admin.password" >/dev/null
}
stop() {
	kill -TERM "$pid"
	wait "$pid"
	pid=
}
start || {
	cat "$tmp/out" "$tmp/err"
	exit 1
}
ok "the all-in-one starts on PostgreSQL"
[ ! -e "$tmp/data/cnlab.db" ] && ok "no SQLite file beside it" || bad "cnlab.db was made"
grep -q 'backend=postgresql' "$tmp/err" && ok "the log names the backend" || bad "no backend line"
out=$("$cnlab" run --gpu h100-25 -- sh -c 'echo hello-from-postgres' 2>&1)
rc=$?
[ $rc = 0 ] && grep -q hello-from-postgres <<<"$out" &&
	ok "cnlab run --gpu h100-25 runs a job" || bad "run: rc=$rc $out"
[ "$(q "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND command LIKE '%hello-from-postgres%'")" = 1 ] &&
	ok "the job's state is in PostgreSQL" || bad "jobs: $(q 'SELECT id, state, command FROM jobs')"
[ "$(q "SELECT count(*) FROM audit WHERE action = 'job.create'")" -ge 1 ] &&
	ok "its audit record too" || bad "audit: $(q 'SELECT action FROM audit')"

# Reads served off the API's lock use a pool of database connections
# no bigger than store_pool (3 here), however many come at once.
lps=()
for i in $(seq 24); do
	"$cnlab" jobs list -o json >"$tmp/list.$i" 2>&1 &
	lps+=($!)
done
wait "${lps[@]}"
n=0
for i in $(seq 24); do jq -e '.items | length >= 1' "$tmp/list.$i" >/dev/null 2>&1 && n=$((n + 1)); done
readers=$(q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cnlabd-reader'")
[ $n = 24 ] && [ "$readers" -ge 1 ] && [ "$readers" -le 3 ] &&
	ok "24 concurrent reads answered over $readers pooled connections (store_pool 3)" ||
	bad "pool: $n of 24 answered, $readers reader connections"

# Jobs to find again after restarts.
ids=()
for i in 1 2 3; do
	id=$("$cnlab" run --detach --gpu h100-25 -o json -- sh -c "echo $i" 2>&1 | jq -r '.id // empty')
	[ -n "$id" ] && ids+=("$id")
done
[ ${#ids[@]} = 3 ] && ok "three jobs submitted" || bad "submitted ${#ids[@]}"
stop
start && ok "restarts" || bad "restart: $(tail -5 "$tmp/err")"
listed=$("$cnlab" jobs list -o json 2>/dev/null | jq -r '.items[].id')
n=0
for id in "${ids[@]}"; do grep -q "$id" <<<"$listed" && n=$((n + 1)); done
[ $n = 3 ] && ok "the jobs are there after a restart" || bad "after restart: $n of 3 ($listed)"
[ "$("$cnlab" audit -o json 2>/dev/null | jq -r '.items | length')" -ge 1 ] &&
	ok "the audit log reads back" || bad "audit read"
tok=$(jq -r '.. | .token? // empty' "$CNLAB_CONFIG" | head -1)
v=$(curl -sS -H "Authorization: Bearer $tok" "$url/v1/audit/verify")
[ "$(jq -r .ok <<<"$v")" = true ] && ok "the audit chain verifies" || bad "verify: $v"

# kill -9 while submitting: what was acknowledged stays.
acked=()
for i in $(seq 12); do
	id=$("$cnlab" run --detach --gpu h100-25 -o json -- sh -c "echo k$i" 2>/dev/null | jq -r '.id // empty')
	[ -n "$id" ] && acked+=("$id")
	[ "$i" = 8 ] && kill -9 "$pid"
done
wait "$pid" 2>/dev/null
pid=
start && ok "restarts after kill -9" || bad "restart after kill -9"
n=0
for id in "${acked[@]}"; do
	[ "$(q "SELECT count(*) FROM jobs WHERE id = '$id'")" = 1 ] && n=$((n + 1))
done
[ ${#acked[@]} -ge 8 ] && [ $n = ${#acked[@]} ] &&
	ok "every acknowledged submission survived kill -9 (${#acked[@]})" ||
	bad "kill -9: $n of ${#acked[@]} acknowledged jobs found"

# --- PostgreSQL down and back ----------------------------------------------
before=$(q "SELECT count(*) FROM jobs")
pgctl -m fast stop
out=$("$cnlab" run --detach --gpu h100-25 -- true 2>&1)
rc=$?
[ $rc != 0 ] && grep -qi 'database is unreachable' <<<"$out" &&
	ok "with PostgreSQL down a submission is refused, saying why (exit $rc)" ||
	bad "down: rc=$rc $out"
kill -0 "$pid" && ok "cnlabd keeps running without its database" || bad "cnlabd died"
out=$("$cnlab" login --user admin --password-stdin <"$tmp/data/admin.password" 2>&1)
rc=$?
[ $rc != 0 ] && grep -qi 'database is unreachable' <<<"$out" && ! grep -qi 'password' <<<"$out" &&
	ok "logging in says the database is unreachable, not that the password is wrong" ||
	bad "login while down: rc=$rc $out"
pgctl -o "-p $(cat "$CNLAB_TEST_PG_DIR/port") -k $CNLAB_TEST_PG_DIR -c listen_addresses=127.0.0.1" \
	-l "$CNLAB_TEST_PG_DIR/log" start
[ "$(q "SELECT count(*) FROM jobs")" = "$before" ] && ok "nothing was stored meanwhile" ||
	bad "jobs changed: $before -> $(q 'SELECT count(*) FROM jobs')"
out=
for _ in 1 2 3; do
	out=$("$cnlab" run --gpu h100-5 -- sh -c 'echo back-again' 2>&1) && break
	sleep 1
done
grep -q back-again <<<"$out" && ok "once PostgreSQL is back, the same cnlabd runs work" ||
	bad "after outage: $out"
grep -q 'store unreachable' "$tmp/err" && ok "the outage is logged" || bad "no outage log line"

grep -q "$pw" "$tmp/out" "$tmp/err" && bad "a log holds the store's password" ||
	ok "no log line holds the store's password"
[ "$fails" = 0 ] || exit 1
