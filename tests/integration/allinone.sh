#!/usr/bin/env bash
# allinone.sh - cnlabd --all-in-one from a clean data directory: secrets
# made and kept with mode 0600 (under umask 000, as every data file: the
# database and its WAL too, in a 0700 folder), the administrator "admin", an embedded
# agent on a fake pool of two H100s registered as a node, a job on a 25%
# H100 slice that runs and streams its output, the same secrets after a
# restart, and the embedded agent stopped with cnlabd.
set -u
cnlabd=$1
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD
umask 000
start() {
	: >"$tmp/out"
	HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" \
		--listen 127.0.0.1:0 --gpus fake:2xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
	pid=$!
	for _ in $(seq 100); do
		grep -q 'CNLab is running' "$tmp/out" && break
		sleep 0.1
	done
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
	[ -n "$url" ]
}
start && ok "starts and prints its URL" || bad "start: $(cat "$tmp/err")"
for f in jwt.secret admin.password cnlab.db cnlab.db-wal; do
	[ "$(stat -c %a "$tmp/data/$f")" = 600 ] && ok "$f is 0600 under umask 000" || bad "$f mode"
done
[ "$(stat -c %a "$tmp/data")" = 700 ] && ok "data directory is 0700" || bad "data dir mode"
grep -q 'cnlab login --server' "$tmp/out" && ok "says how to log in" || bad "login hint"
pw=$(cat "$tmp/data/admin.password")
tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$pw\"}" "$url/v1/auth/login" | jq -r .token)
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
for _ in $(seq 100); do
	n=$(api GET /v1/nodes | jq '.items | length')
	[ "$n" = 1 ] && break
	sleep 0.1
done
api GET /v1/nodes | jq -e '.items[0].gpus == 2 and .items[0].gpu_type == "H100-80GB-SXM" and
	(.items[0].devices | length == 2 and all(.healthy and (.uuid | startswith("GPU-"))))' >/dev/null &&
	ok "embedded agent registered with 2 H100s" || bad "nodes: $(api GET /v1/nodes)"
proj=$(api POST /v1/projects '{"name":"demo"}' | jq -r .id)
api POST "/v1/projects/$proj/members" '{"user":"admin","role":"member"}' >/dev/null
job=$(api POST "/v1/projects/$proj/jobs" '{"command":"echo hello-slice $CUDA_VISIBLE_DEVICES","gpu":"h100-25"}' | jq -r .id)
for _ in $(seq 150); do
	[ "$(api GET "/v1/jobs/$job" | jq -r .state)" = succeeded ] && break
	sleep 0.2
done
api GET "/v1/jobs/$job/logs" | jq -r '.items[].data' | grep -q 'hello-slice' &&
	ok "sample job on a 25% H100 ran" || bad "job: $(api GET "/v1/jobs/$job")"
for _ in $(seq 50); do [ -e "$tmp/data/agent/jobs/$job" ] || break; sleep 0.1; done
[ ! -e "$tmp/data/agent/jobs/$job" ] && ok "its folder went when it ended" ||
	bad "job folder left: $(ls -la "$tmp/data/agent/jobs/$job")"
agent_pid=$(pgrep -P "$pid" -f cnlab-agent | head -1)
[ -n "$agent_pid" ] && ok "agent runs as cnlabd's child" || bad "no agent child"
# The embedded agent's credential, to see that a restart retires it.
old_token=$(tr '\0' '\n' <"/proc/$agent_pid/environ" | sed -n 's/^CNLAB_AGENT_TOKEN=//p')
# It is bound to the embedded agent's node: it works on that node's routes.
nid=$(api GET /v1/nodes | jq -r '.items[0].id')
whoami() { curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $1" "$url/v1/nodes/$nid/tunnels?wait=0"; }
[[ "$old_token" == cnln_* ]] && [ "$(whoami "$old_token")" = 200 ] &&
	[ "$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $old_token" "$url/v1/auth/whoami")" = 401 ] &&
	ok "the agent's credential is its node's, and no user's" || bad "agent token: $old_token"
kill -TERM "$pid"
wait "$pid"
pid=
sleep 0.2
[ -n "$agent_pid" ] && ! kill -0 "$agent_pid" 2>/dev/null && ok "agent stopped with cnlabd" || bad "agent survived"
secret=$(cat "$tmp/data/jwt.secret")
start && ok "restarts" || bad "restart"
[ "$(cat "$tmp/data/jwt.secret")" = "$secret" ] && ok "secret kept" || bad "secret changed"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -d "{\"user\":\"admin\",\"password\":\"$pw\"}" "$url/v1/auth/login")
[ "$code" = 200 ] && ok "same admin password after restart" || bad "login after restart: $code"
new_pid=$(pgrep -P "$pid" -f cnlab-agent | head -1)
new_token=$(tr '\0' '\n' <"/proc/$new_pid/environ" | sed -n 's/^CNLAB_AGENT_TOKEN=//p')
[ -n "$new_token" ] && [ "$new_token" != "$old_token" ] && [ "$(whoami "$new_token")" = 200 ] &&
	[ "$(whoami "$old_token")" = 401 ] &&
	ok "a restart retires the previous embedded agent's token" ||
	bad "tokens after restart: old $(whoami "$old_token"), new $(whoami "$new_token")"
[ "$fails" = 0 ] || exit 1
