#!/usr/bin/env bash
# quickstart.sh - the seeds' Quickstart end to end, through the real cnlab
# CLI, against the all-in-one platform (cnlabd --all-in-one with its
# embedded agent on a fake pool of two H100s; real processes in real
# cgroups):
#   login; profiles list shows availability; server create returns a URL
#   that answers HTTP; a file in the workspace survives stop and start;
#   cnlab run of a script streams its output, brings its artifact back,
#   honours --priority and --deadline and exits with the job's code; a
#   second project's user can neither see nor stop the first user's
#   server; quota show reflects the GPU-hours used; a job beyond quota is
#   refused with the limit named.
set -u
cnlabd=$(realpath "$1")
cnlab=$(realpath "$2")
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
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/home/.config
mkdir -p "$HOME"

"$cnlabd" --all-in-one --data-dir "$tmp/data" --listen 127.0.0.1:0 \
	--gpus fake:2xH100-80GB-SXM --log-level warn >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	cat "$tmp/err"
	exit 1
}
admin_pw=$(cat "$tmp/data/admin.password")

# The administrator sets up two teams (the Quickstart assumes an account).
as_admin() { CNLAB_CONFIG=$tmp/admin.json "$cnlab" --server "$url" "$@"; }
echo "$admin_pw" | as_admin login --user admin --password-stdin >/dev/null || bad "admin login"
tok=$(jq -r .token "$tmp/admin.json")
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
for p in vision nlp; do api POST /v1/projects "{\"name\":\"$p\"}" >/dev/null; done
pid_of() { api GET /v1/projects | jq -r ".items[] | select(.name==\"$1\") | .id"; }
api POST /v1/users '{"name":"alice","password":"alice-password"}' >/dev/null
api POST /v1/users '{"name":"bob","password":"bob-password"}' >/dev/null
api POST "/v1/projects/$(pid_of vision)/members" '{"user":"alice","role":"member"}' >/dev/null
api POST "/v1/projects/$(pid_of nlp)/members" '{"user":"bob","role":"member"}' >/dev/null

# 1. cnlab login
echo alice-password | "$cnlab" login --server "$url" --user alice --password-stdin >/dev/null &&
	ok "login" || bad "login"
[ "$(stat -c %a "$XDG_CONFIG_HOME/cnlab/config.json")" = 600 ] && ok "token kept 0600" || bad "config mode"

# 2. cnlab profiles list
out=$("$cnlab" profiles list)
grep -E '^h100-25pct +H100' <<<"$out" | grep -q 'now' && ok "profiles list shows availability" ||
	bad "profiles: $out"

# 3. cnlab server create
out=$("$cnlab" server create --name first-experiment --image pytorch:2.4-cuda12.4 \
	--profile h100-25pct --storage 50gb 2>&1)
srv_url=$(grep -o 'http://[^ ]*' <<<"$out" | tail -1)
[ -n "$srv_url" ] && ok "server create returns a URL" || bad "server create: $out"
for _ in $(seq 50); do curl -sSf -o /dev/null "$srv_url" 2>/dev/null && break; sleep 0.2; done
curl -sSf -o /dev/null "$srv_url" && ok "the URL answers HTTP" || bad "server URL $srv_url"
# 4. the workspace persists across stop and start
"$cnlab" server open first-experiment 2>/dev/null | grep -q "$srv_url" && ok "server open" || bad "server open"
srv_id=$("$cnlab" server list -o json | jq -r '.items[] | select(.name=="first-experiment") | .id')
ws=$tmp/data/agent/workspaces/$srv_id
echo "my notebook" >"$ws/notes.txt"
"$cnlab" server stop first-experiment >/dev/null && ok "server stop" || bad "server stop"
for _ in $(seq 100); do
	[ "$("$cnlab" server list -o json | jq -r '.items[] | select(.name=="first-experiment") | .state')" = stopped ] && break
	sleep 0.2
done
out=$("$cnlab" server start first-experiment 2>&1)
srv_url=$(grep -o 'http://[^ ]*' <<<"$out" | tail -1)
base_url=${srv_url%%\?*}
for _ in $(seq 50); do curl -sSf -o /dev/null "${base_url}notes.txt" 2>/dev/null && break; sleep 0.2; done
[ "$(curl -sS "${base_url}notes.txt")" = "my notebook" ] && ok "workspace survives stop and start" ||
	bad "workspace after restart ($srv_url)"

# Another team cannot see or stop it.
bobcfg() { CNLAB_CONFIG=$tmp/bob.json "$cnlab" --server "$url" "$@"; }
echo bob-password | bobcfg login --user bob --password-stdin >/dev/null
bobcfg server list | grep -q first-experiment && bad "bob sees alice's server" || ok "other team cannot see it"
bobcfg server stop first-experiment >/dev/null 2>&1
[ $? = 4 ] && ok "other team cannot stop it (not found)" || bad "bob stop"
[ "$("$cnlab" server list -o json | jq -r '.items[] | select(.name=="first-experiment") | .state')" = running ] &&
	ok "still running" || bad "alice's server was touched"

# cnlab run: streams, artifact, priority, deadline, exit code.
cat >"$tmp/train.sh" <<'SCRIPT'
echo "epoch 1 loss 0.9"
echo "slice GPU=$CUDA_VISIBLE_DEVICES"
echo "accuracy 0.93" > "$CNLAB_ARTIFACTS_DIR/metrics.txt"
echo "epoch 2 loss 0.4"
exit 3
SCRIPT
deadline=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M)
(cd "$tmp" && "$cnlab" run train.sh --gpu h100-25 --priority high --deadline "$deadline" \
	>"$tmp/run.out" 2>"$tmp/run.err")
code=$?
[ "$code" = 3 ] && ok "run exits with the job's code" || bad "run exit $code: $(cat "$tmp/run.err")"
grep -q 'epoch 1 loss 0.9' "$tmp/run.out" && grep -q 'epoch 2 loss 0.4' "$tmp/run.out" &&
	ok "run streams the output" || bad "run output: $(cat "$tmp/run.out")"
art=$(find "$tmp/artifacts" -name metrics.txt | head -1)
[ -n "$art" ] && [ "$(cat "$art")" = "accuracy 0.93" ] && ok "artifact came back" || bad "artifact: $art"
job=$("$cnlab" jobs list -o json | jq -r '.items[-1].id // empty')
j=$("$cnlab" jobs show "${job:-none}" -o json 2>&1)
[ -n "$job" ] &&
	jq -e '.priority == "high" and (.deadline | startswith("'"${deadline%:*}"'"))' <<<"$j" >/dev/null &&
	ok "priority and deadline honoured" || bad "job: $j"

# quota show reflects GPU-hours; beyond quota is refused by name.
vision=$(pid_of vision)
api PUT "/v1/projects/$vision/quota" '{"gpu_hours":1000,"concurrent_servers":5}' >/dev/null
out=$("$cnlab" quota show)
used=$(grep 'GPU-hours used' <<<"$out" | sed 's/.*used: *\([0-9.,]*\) .*/\1/')
grep -q 'Project: vision' <<<"$out" && grep -q '/ 1,000' <<<"$out" &&
	ok "quota show: $(grep 'GPU-hours' <<<"$out" | tr -s ' ')" || bad "quota show: $out"
[ "$("$cnlab" quota show -o json | jq '.projects[] | select(.project=="vision") | .gpu_hours.used > 0')" = true ] &&
	ok "quota show reflects the GPU-hours used" || bad "usage: $("$cnlab" quota show -o json)"
api PUT "/v1/projects/$vision/quota" '{"gpu_hours":0.0000001}' >/dev/null
(cd "$tmp" && "$cnlab" run train.sh --gpu h100-25 >"$tmp/q.out" 2>"$tmp/q.err")
code=$?
[ "$code" = 5 ] && grep -q 'GPU-hours' "$tmp/q.err" && ok "beyond quota: refused, limit named" ||
	bad "quota refusal: $code $(cat "$tmp/q.err")"

"$cnlab" server delete first-experiment >/dev/null 2>&1 && bad "deleted a running server" ||
	ok "a running server is not deleted"
"$cnlab" server stop first-experiment >/dev/null
for _ in $(seq 100); do
	[ "$("$cnlab" server list -o json | jq -r '.items[] | select(.name=="first-experiment") | .state')" = stopped ] && break
	sleep 0.2
done
"$cnlab" server delete first-experiment >/dev/null && ! "$cnlab" server list | grep -q first-experiment &&
	ok "server delete" || bad "server delete"
[ "$fails" = 0 ] || {
	tail -20 "$tmp/err"
	exit 1
}
