#!/usr/bin/env bash
# quickstart.sh - the seeds' commands typed as written, on a fresh
# all-in-one platform (cnlabd --all-in-one with its embedded agent on a
# fake pool of two H100s; real processes in real cgroups), through the CLI
# installed the seeds' way, with no set-up behind the user's back: no
# curl to the API, no SQL.  Each line of output the seeds show is checked
# for its shape.
#
#   Documentation hub, Quickstart: curl -fsSL .../cli | sh; cnlab login;
#     cnlab profiles list; cnlab server create --name first-experiment
#     ...; cnlab server open first-experiment; cnlab server stop
#     first-experiment.
#   Technology overview: cnlab run train.py --gpu h100-25.
#   Architecture guide: cnlab server create (no --name) ... --idle 4h;
#     cnlab quota show; cnlab run train.py --gpu h100-50 --deadline
#     2026-04-30T17:00 --priority high (that date has passed: refused by
#     name; then with a date to come, on a busy cluster, the reservation).
#   Hybrid cloud: cnlab cloud add aws ...; cnlab policy burst ...;
#     cnlab project mark sensitive-research --on-prem-only.
# Then what the Quickstart promises around them: the workspace survives
# stop and start, another team can neither see nor stop the server, the
# job's output streams and its artifact comes back, a job beyond quota is
# refused naming the limit.  The administrator's set-up (a quota, a second
# team) is done with the CLI too.
set -u
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cnlabd=$(realpath "$1")
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	# Servers' workspace volumes stay mounted for the agent's next start;
	# this test's go with it (deepest first).
	awk -v t="$tmp/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo |
		sort -r | xargs -r -n1 umount -l
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
# shape NAME REGEX FILE: some line of FILE matches REGEX (extended).
shape() {
	grep -Eq "$2" "$3" && ok "$1" || bad "$1: no line like /$2/ in: $(cat "$3")"
}
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG \
	CNLAB_INSTALL_DIR XDG_CONFIG_HOME
export HOME=$tmp/home
mkdir -p "$HOME"
# The installer puts cnlab in ~/.local/bin (this test may run as root:
# it must not take /usr/local/bin), which the user's PATH has.
export CNLAB_SYSTEM_BIN_DIR=$tmp/no-system-bin
export PATH=$HOME/.local/bin:$PATH

allinone_start "$cnlabd" "$tmp"
grep -q "add users: *cnlab user create NAME, then cnlab project member add default NAME" "$tmp/out" &&
	ok "the banner says how to add users" || bad "banner: $(cat "$tmp/out")"
admin_pw=$(cat "$tmp/data/admin.password")

# --- 1. Install the CLI ----------------------------------------------------------
curl -fsSL "$url/cli" | sh >"$tmp/install.out" 2>&1 &&
	ok "curl -fsSL .../cli | sh" || bad "install: $(cat "$tmp/install.out")"
[ "$(command -v cnlab)" = "$HOME/.local/bin/cnlab" ] && ok "cnlab is on the PATH" ||
	bad "cnlab: $(command -v cnlab)"
shape "installer names the next step" '^  cnlab login$' "$tmp/install.out"

# cnlab alone: where the server is, and what to type first.
cnlab >"$tmp/bare.out" 2>&1 && grep -qF "$url" "$tmp/bare.out" &&
	grep -q 'cnlab profiles list' "$tmp/bare.out" && ok "cnlab alone teaches" ||
	bad "cnlab alone: $(cat "$tmp/bare.out")"

# --- cnlab login, typed on a terminal ------------------------------------------
# Answer each prompt when it appears (the password prompt discards what
# was typed ahead, as getpass does).
mkfifo "$tmp/login.in"
script -qefc "cnlab login" /dev/null <"$tmp/login.in" >"$tmp/login.out" 2>&1 &
lpid=$!
exec 7>"$tmp/login.in"
answer() {
	for _ in $(seq 100); do
		grep -q "$1" "$tmp/login.out" && break
		sleep 0.05
	done
	printf '%s\n' "$2" >&7
}
answer 'User: ' admin
answer 'Password: ' "$admin_pw"
exec 7>&-
wait "$lpid"
rc=$?
[ $rc = 0 ] && grep -q "✓ Logged in to $url as admin (project default)" "$tmp/login.out" &&
	! grep -q "$admin_pw" "$tmp/login.out" &&
	ok "cnlab login (asks, does not echo the password, picks the project)" ||
	bad "login: rc=$rc $(cat "$tmp/login.out")"
[ "$(stat -c %a "$HOME/.config/cnlab/config.json")" = 600 ] && ok "token kept 0600" ||
	bad "config mode"

# --- The administrator imports the site's images ------------------------------------
# The seeds name pytorch:2.4-cuda12.4: a site imports its own image under that
# name; here the small Debian image with python3 that scripts/bootstrap builds
# stands in for it (the fallback notebook needs only python3).
site_image=${CNLAB_TEST_IMAGE:-/var/cache/cnlab/images/debian-12-python.tar}
[ -r "$site_image" ] || {
	echo "FAIL no test image $site_image: run scripts/bootstrap (it builds it)"
	exit 1
}
cnlab image import "$site_image" --name pytorch:2.4-cuda12.4 >"$tmp/import.out" 2>&1 &&
	shape "image import" '^✓ Imported pytorch:2.4-cuda12.4 \([0-9.]+ MB, 1 layer, sha256:[0-9a-f]{12}…\)$' \
		"$tmp/import.out" || bad "image import: $(cat "$tmp/import.out")"

# --- 2. Pick a profile -----------------------------------------------------------
cnlab profiles list >"$tmp/profiles.out"
shape "profiles: header" '^NAME +GPU +SLICE +AVAILABLE$' "$tmp/profiles.out"
shape "profiles: h100-25pct" '^h100-25pct +H100 +25% +✓ now$' "$tmp/profiles.out"
shape "profiles: h100-full" '^h100-full +H100 +100% +(✓ now|queue: [0-9]+ min)$' "$tmp/profiles.out"
shape "profiles: a100-50pct" '^a100-50pct +A100 +50% +(✓ now|queue: .*|✗ no capacity)$' "$tmp/profiles.out"
shape "profiles: l40s-block" '^l40s-block +L40S +10% +(✓ now|queue: .*|✗ no capacity)$' "$tmp/profiles.out"

# --- 3. Provision a server (as typed in the Quickstart) ----------------------------
cnlab server create \
  --name first-experiment \
  --image pytorch:2.4-cuda12.4 \
  --profile h100-25pct \
  --storage 50gb >"$tmp/create.out" 2>&1
rc=$?
[ $rc = 0 ] && ok "server create" || bad "server create: rc=$rc $(cat "$tmp/create.out")"
shape "✓ Provisioning... line" '^✓ Provisioning\.\.\.( ETA [0-9]+(s| min|h[0-9]{2}m))?$' "$tmp/create.out"
shape "✓ Ready: URL line" '^✓ Ready: http://[^ ]+$' "$tmp/create.out"
srv_url=$(sed -n 's/^✓ Ready: //p' "$tmp/create.out" | tail -1)
for _ in $(seq 50); do curl -sSf -o /dev/null "$srv_url" 2>/dev/null && break; sleep 0.1; done
curl -sSf -o /dev/null "$srv_url" && ok "the URL answers HTTP" || bad "server URL $srv_url"
case $srv_url in
"$nurl"/s/srv_*/\?token=?*) [ "$nurl" != "$url" ] &&
	ok "the URL is cnlabd's proxy (/s/ID/) on the notebook origin, not the node nor the API's origin" ||
	bad "notebook origin $nurl is the API's" ;;
*) bad "server URL $srv_url is not $nurl/s/ID/?token=..." ;;
esac
[ "$(curl -sS -o /dev/null -w '%{http_code}' "${srv_url%%\?*}")" = 401 ] &&
	ok "without its token the proxy answers 401" || bad "server without token: $(curl -sS "${srv_url%%\?*}")"

# --- 4. Open it; the workspace persists ------------------------------------------
cnlab server open first-experiment >"$tmp/open.out" 2>&1
[ "$(cat "$tmp/open.out")" = "$srv_url" ] && ok "server open prints the URL" ||
	bad "server open: $(cat "$tmp/open.out")"
srv_id=$(cnlab server list -o json | jq -r '.items[] | select(.name=="first-experiment") | .id')
ws=$tmp/data/agent/workspaces/$srv_id
echo "my notebook" >"$ws/notes.txt"

# --- 5. Stop when done ---------------------------------------------------------------
cnlab server stop first-experiment >"$tmp/stop.out" 2>&1 && ok "server stop" ||
	bad "server stop: $(cat "$tmp/stop.out")"
for _ in $(seq 100); do
	[ "$(cnlab server list -o json | jq -r '.items[] | select(.name=="first-experiment") | .state')" = stopped ] && break
	sleep 0.1
done
cnlab server start first-experiment >"$tmp/start.out" 2>&1
srv_url=$(sed -n 's/^✓ Ready: //p' "$tmp/start.out" | tail -1)
base_url=${srv_url%%\?*}
# The notebook answers its token's holder only (the URL carries it).
notes="${base_url}notes.txt?${srv_url#*\?}"
for _ in $(seq 50); do curl -sSf -o /dev/null "$notes" 2>/dev/null && break; sleep 0.1; done
[ "$(curl -sS "$notes")" = "my notebook" ] && ok "workspace survives stop and start" ||
	bad "workspace after restart ($srv_url): $(cat "$tmp/start.out")"

# --- The architecture guide's server create: no --name, --idle 4h ---------------------
cnlab server create \
    --image pytorch:2.4-cuda12.4 \
    --profile h100-25pct \
    --storage 50gb \
    --idle 4h >"$tmp/create2.out" 2>&1
rc=$?
[ $rc = 0 ] && ok "server create without --name" || bad "create2: rc=$rc $(cat "$tmp/create2.out")"
shape "a generated name is printed" '^✓ Server pytorch-[a-z0-9]{4}$' "$tmp/create2.out"
# Starts have been seen by now: the ETA comes from them.
shape "✓ Provisioning... ETA line" '^✓ (Server p|P)rovisioning\.\.\. ETA [0-9]+(s| min)$' "$tmp/create2.out"
shape "✓ Ready line" '^✓ Ready: http://[^ ]+$' "$tmp/create2.out"
gen=$(sed -n 's/^✓ Server //p' "$tmp/create2.out")
[ "$(cnlab server list -o json | jq -r --arg n "$gen" '.items[] | select(.name==$n) | .idle_timeout_s')" = 14400 ] &&
	ok "--idle 4h kept" || bad "idle: $(cnlab server list -o json)"

# --- Technology overview: cnlab run train.py --gpu h100-25 -------------------------
cd "$tmp" || exit 1
cat >train.py <<'PY'
import os
print("epoch 1 loss 0.9", flush=True)
print("slice", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
with open(os.path.join(os.environ["CNLAB_ARTIFACTS_DIR"], "metrics.txt"), "w") as f:
    f.write("accuracy 0.93\n")
print("epoch 2 loss 0.4", flush=True)
PY
cnlab run train.py --gpu h100-25 >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
[ $rc = 0 ] && ok "cnlab run train.py --gpu h100-25" || bad "run: rc=$rc $(cat "$tmp/run.err")"
grep -qx 'epoch 1 loss 0.9' "$tmp/run.out" && grep -qx 'epoch 2 loss 0.4' "$tmp/run.out" &&
	ok "run streams stdout" || bad "run output: $(cat "$tmp/run.out")"
art=$(find "$tmp/artifacts" -name metrics.txt | head -1)
[ -n "$art" ] && [ "$(cat "$art")" = "accuracy 0.93" ] && ok "run captures artifacts" ||
	bad "artifact: $art"
job=$(cnlab jobs list -o json | jq -r '.items[-1].id')
[ "$(cnlab jobs show "$job" -o json | jq -r .state)" = succeeded ] &&
	[ "$(cnlab jobs show "$job" -o json | jq -r '.status.phase // "ended"')" = ended ] &&
	ok "run releases the GPU on exit" || bad "job after run: $(cnlab jobs show "$job" -o json)"

# --- Architecture guide: cnlab quota show --------------------------------------------------
cnlab quota set --project default --gpu-hours 1000 --storage-gb-days 5000 \
	--concurrent-servers 5 >/dev/null && ok "quota set (admin, from the CLI)" || bad "quota set"
cnlab quota show >"$tmp/quota.out"
shape "quota: Project line" '^Project: default$' "$tmp/quota.out"
shape "quota: GPU-hours" '^  GPU-hours used: +[0-9.,]+ / 1,000 \([0-9]+%\)$' "$tmp/quota.out"
shape "quota: Storage" '^  Storage GB-days: +[0-9.,]+ / 5,000 \([0-9]+%\)$' "$tmp/quota.out"
shape "quota: servers" '^  Concurrent srvs: +2 / 5$' "$tmp/quota.out"

# --- Architecture guide: the deadline-bound job -------------------------------------------
# As printed, the deadline has passed: refused, naming the field.
cnlab run train.py \
    --gpu h100-50 \
    --deadline 2026-04-30T17:00 \
    --priority high >"$tmp/late.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'deadline' "$tmp/late.out" && grep -q 'past' "$tmp/late.out" &&
	ok "a deadline in the past is refused by name" || bad "past deadline: rc=$rc $(cat "$tmp/late.out")"
# With a deadline to come, on a cluster whose GPUs are busy for ten
# minutes: the scheduler reserves a slice and says so.
cnlab server stop first-experiment >/dev/null
cnlab server stop "$gen" >/dev/null
for _ in $(seq 100); do
	[ "$(cnlab server list -o json | jq '[.items[] | select(.state != "stopped")] | length')" = 0 ] && break
	sleep 0.1
done
echo 'sleep 600' >busy.sh
b1=$(cnlab run busy.sh --gpu h100-full --runtime 10m --detach 2>/dev/null)
b2=$(cnlab run busy.sh --gpu h100-full --runtime 10m --detach 2>/dev/null)
for _ in $(seq 100); do
	[ "$(cnlab jobs show "$b2" -o json | jq -r .state)" = running ] &&
		[ "$(cnlab jobs show "$b1" -o json | jq -r .state)" = running ] && break
	sleep 0.1
done
deadline=$(date -u -d '+3 hours' +%Y-%m-%dT%H:%M)
cnlab run train.py \
    --gpu h100-50 \
    --deadline "$deadline" \
    --priority high >"$tmp/dl.out" 2>"$tmp/dl.err" &
rpid=$!
for _ in $(seq 100); do
	grep -q '^ETA to start' "$tmp/dl.err" && break
	sleep 0.1
done
shape "Job queued. Scheduler reserved N×H100-50pct on ..." \
	'^Job queued\. Scheduler reserved [0-9]+×H100-50pct on (cluster|node) [^ ]+.*\.$' "$tmp/dl.err"
shape "ETA to start: N min." '^ETA to start: (≈ )?[0-9]+ min\.$' "$tmp/dl.err"
shape "the deadline check says which estimate it used" \
	'^✓ Deadline can be met: checked only that it starts by then: no run time given; 0 running workloads without a run time assumed to run 4h$' \
	"$tmp/dl.err"
kill -INT "$rpid" 2>/dev/null
wait "$rpid" 2>/dev/null
dl_job=$(cnlab jobs list -o json | jq -r '.items[-1].id')
[ -n "$dl_job" ] &&
	cnlab jobs show "$dl_job" -o json | jq -e '.priority == "high" and .deadline != null' >/dev/null &&
	ok "priority and deadline recorded" || bad "deadline job: $(cnlab jobs show "$dl_job" -o json)"
for j in "$dl_job" "$b1" "$b2"; do cnlab jobs cancel "$j" >/dev/null; done

# --- Hybrid cloud set-up, as typed -------------------------------------------------------
cnlab cloud add aws \
  --account 123456789012 \
  --region ap-northeast-2 \
  --instance-types g5.xlarge,g5.2xlarge,p5.48xlarge >"$tmp/cloud.out" 2>&1 &&
	ok "cloud add aws" || bad "cloud add: $(cat "$tmp/cloud.out")"
cnlab policy burst \
  --threshold 0.90 \
  --provider aws \
  --strategy spot-then-on-demand \
  --max-cloud-budget 50000 >"$tmp/burst.out" 2>&1 &&
	ok "policy burst" || bad "policy burst: $(cat "$tmp/burst.out")"
cnlab project create sensitive-research >/dev/null
cnlab project mark sensitive-research --on-prem-only >"$tmp/mark.out" 2>&1 &&
	[ "$(cnlab project show sensitive-research -o json | jq .on_prem_only)" = true ] &&
	ok "project mark sensitive-research --on-prem-only" || bad "mark: $(cat "$tmp/mark.out")"

# --- Another team, set up with the CLI, cannot see or stop the server ----------------------
cnlab project create vision >/dev/null
echo bob-password | cnlab user create bob --password-stdin >/dev/null &&
	cnlab project member add vision bob >/dev/null && ok "admin adds bob to vision" ||
	bad "user create / member add"
bob() { CNLAB_CONFIG=$tmp/bob.json cnlab "$@"; }
echo bob-password | bob login --server "$url" --user bob --password-stdin 2>"$tmp/bob.login"
grep -q '(project vision)' "$tmp/bob.login" && ok "bob logs in to vision" ||
	bad "bob login: $(cat "$tmp/bob.login")"
bob server list >"$tmp/bob.list" 2>&1 && ! grep -q first-experiment "$tmp/bob.list" &&
	ok "another team cannot see it" || bad "bob's server list: $(cat "$tmp/bob.list")"
bob server stop first-experiment >/dev/null 2>&1
[ $? = 4 ] && ok "another team cannot stop it (not found)" || bad "bob stop"

# --- Beyond quota: refused, naming the limit ---------------------------------------------
cnlab quota set --project default --gpu-hours 0.0000001 >/dev/null
cnlab run train.py --gpu h100-25 >"$tmp/q.out" 2>"$tmp/q.err"
rc=$?
[ $rc = 5 ] && grep -q 'GPU-hours' "$tmp/q.err" && ok "beyond quota: refused, limit named" ||
	bad "quota refusal: $rc $(cat "$tmp/q.err")"

cnlab server delete first-experiment >/dev/null && ! cnlab server list | grep -q first-experiment &&
	ok "server delete" || bad "server delete"
[ "$fails" = 0 ] || {
	tail -20 "$tmp/err"
	exit 1
}
