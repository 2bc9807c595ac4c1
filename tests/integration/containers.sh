#!/usr/bin/env bash
# containers.sh - every workload runs in its OCI container (crun), as its
# user's own host ids, never as root; each promise is tried the way a
# tenant who wants more would try it, against a real all-in-one (cnlabd, its
# embedded agent, crun, user namespaces, cgroups):
#   - the job runs as container uid 1000, which is a host uid of the
#     submitting user's range (>= uid_base), not 0; no capability,
#     no_new_privs, seccomp on; other namespaces than the agent's
#   - cnlabd's data directory (jwt.secret, admin.password) is not there
#   - nothing of the agent's or cnlabd's environment is visible (the agent
#     token in /proc/*/environ)
#   - writing outside /workspace and /tmp fails; nothing lands on the node
#   - mount, unshare and a new user namespace are refused
#   - a job alone has no network but loopback: cnlabd's port is out of reach
#   - two users get two different id ranges
#   - the agent describes its GPUs in a CDI spec
#   - a notebook server has its own network: a port it opens on every
#     address is out of the node's reach; its URL works, through cnlabd's
#     proxy and the agent's tunnel; the forwarder's port is on loopback
#   - a CUDA program that unsets LD_PRELOAD and CNLAB_REGION still gets
#     the shim (from /etc/ld.so.preload) and its region (pinned in
#     /etc/cnlab/region) and cannot allocate past its slice's quota on the
#     fake driver, which alone would grant it
#   - with run_dir (a tmpfs) the bundle and crun's state are there, the
#     container the same (ids, seccomp, no_new_privs, read-only root,
#     unshare and mount refused), and nothing is left after it
# and the agent refuses to start without its runtime, or bare as root, or
# with a run_dir others may write or the runtime cannot reach.
set -u
cnlabd=$1
agent=$2
shimtest=$3 # a CUDA program over the fake driver (tests/shim)
shim=$4
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	# Servers' workspace volumes stay mounted for the agent's next start;
	# this test's go with it (deepest first).
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
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD

if ! command -v crun >/dev/null; then
	echo "FAIL crun is not installed (scripts/bootstrap installs it)"
	exit 1
fi

HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" \
	--listen 127.0.0.1:0 --gpus fake:2xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	echo "FAIL start: $(cat "$tmp/err")"
	exit 1
}
port=${url##*:}
pw=$(cat "$tmp/data/admin.password")
secret=$(cat "$tmp/data/jwt.secret")
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$url/v1/auth/login" | jq -r .token; }
tok=$(login admin "$pw")
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
for _ in $(seq 100); do
	[ "$(api GET /v1/nodes | jq '.items | length')" = 1 ] && break
	sleep 0.1
done
proj=$(api GET /v1/projects | jq -r '.items[0].id')
[ -n "$proj" ] && [ "$proj" != null ] || {
	echo "FAIL no project: $(api GET /v1/projects)"
	exit 1
}

# run CMD [TOKEN [GPU]]: submit CMD as a job (h100-25 by default), wait for its
# end, print its output; its end state goes to $tmp/state (run is called in
# a subshell).
run() {
	local t=${2:-$tok} g=${3:-h100-25}
	job=$(jq -n --arg c "$1" --arg g "$g" '{command:$c,gpu:$g}' |
		curl -sS -X POST -H "Authorization: Bearer $t" -d @- "$url/v1/projects/$proj/jobs" | jq -r .id)
	for _ in $(seq 300); do
		state=$(curl -sS -H "Authorization: Bearer $t" "$url/v1/jobs/$job" | jq -r .state)
		case $state in succeeded | failed | cancelled) break ;; esac
		sleep 0.2
	done
	echo "$state" >"$tmp/state"
	curl -sS -H "Authorization: Bearer $t" "$url/v1/jobs/$job/logs" | jq -r '.items[].data'
}

# --- who the job is -------------------------------------------------------
out=$(run 'echo ids=$(id -u):$(id -g); grep -E "^(CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status; readlink /proc/self/ns/user /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/net')
echo "$out" | grep -qx 'ids=1000:1000' &&
	ok "the command runs as container uid/gid 1000, not the container's root" || bad "ids: $out"
echo "$out" | grep -qx 'CapEff:	0000000000000000' && echo "$out" | grep -qx 'CapBnd:	0000000000000000' &&
	ok "no capability, not even in the bounding set" || bad "caps: $out"
echo "$out" | grep -qx 'NoNewPrivs:	1' && echo "$out" | grep -qx 'Seccomp:	2' &&
	ok "no_new_privs and a seccomp filter" || bad "nnp/seccomp: $out"
agent_pid=$(pgrep -P "$pid" -f cnlab-agent | head -1)
same=0
for ns in user pid mnt net; do
	[ "$(echo "$out" | grep "^$ns:")" = "$(readlink /proc/"$agent_pid"/ns/$ns)" ] && same=1
done
[ "$same" = 0 ] && [ "$(echo "$out" | grep -c ':\[')" = 4 ] &&
	ok "its own user, PID, mount and network namespaces" || bad "namespaces: $out vs agent $(ls -l /proc/"$agent_pid"/ns)"

# sleeper TOKEN: start a job that sleeps; print its id, then the host uid
# its sleep runs as on the node (empty if none was seen).
sleeper() {
	local id uid=
	id=$(jq -n '{command:"sleep 30",gpu:"h100-25"}' |
		curl -sS -X POST -H "Authorization: Bearer $1" -d @- "$url/v1/projects/$proj/jobs" | jq -r .id)
	for _ in $(seq 100); do
		for p in $(pgrep -x sleep); do
			grep -q "$id" "/proc/$p/cgroup" 2>/dev/null || continue
			uid=$(awk '/^Uid:/ {print $2}' "/proc/$p/status")
		done
		[ -n "$uid" ] && break
		sleep 0.1
	done
	echo "$id $uid"
}

# Seen from the node: the command's host uid is in the user's range.
read -r job host_uid <<<"$(sleeper "$tok")"
[ -n "$host_uid" ] && [ "$host_uid" -ge 1000000 ] &&
	ok "on the node it is host uid $host_uid (the user's range), not root" || bad "host uid '$host_uid'"
api POST "/v1/jobs/$job/cancel" >/dev/null

# --- cnlabd's secrets and the agent's environment --------------------------
out=$(run "cat '$tmp/data/jwt.secret' '$tmp/data/admin.password'; ls '$tmp/data' '$tmp'; cat /proc/1/environ /proc/*/environ 2>&1 | tr '\\0' '\\n'; echo done")
if ! echo "$out" | grep -q '^done$'; then
	bad "the secrets probe did not run: $out"
elif echo "$out" | grep -qF "$secret" || echo "$out" | grep -qF "$pw"; then
	bad "a job read cnlabd's secrets: $out"
else
	ok "cnlabd's data directory (jwt.secret, admin.password) is out of reach"
fi
if ! echo "$out" | grep -q '^CNLAB_JOB_ID='; then
	bad "the environ probe read nothing (not even its own): $out"
elif echo "$out" | grep -q 'CNLAB_AGENT_TOKEN\|CNLAB_JWT\|CNLAB_ADMIN'; then
	bad "a job saw the agent's or cnlabd's environment: $out"
else
	ok "no /proc/*/environ shows the agent's or cnlabd's environment"
fi

# --- writing outside /workspace ---------------------------------------------
probe=cnlab-probe-$$
out=$(run "for f in /usr/$probe /etc/$probe /$probe /opt/$probe; do echo x >\$f && echo WROTE \$f; done; echo x >/workspace/$probe && echo WS-OK; echo x >/tmp/$probe && echo TMP-OK")
if ! echo "$out" | grep -q WS-OK; then
	bad "the write probe did not run: $out"
elif echo "$out" | grep -q WROTE || [ -e "/usr/$probe" ] || [ -e "/etc/$probe" ] || [ -e "/$probe" ]; then
	bad "a job wrote outside /workspace: $out"
else
	ok "the root file system is read-only: /usr, /etc, / refuse writes"
fi
echo "$out" | grep -q WS-OK && echo "$out" | grep -q TMP-OK &&
	ok "/workspace and /tmp are writable" || bad "workspace: $out"

# --- new namespaces, mounts, the network ------------------------------------
out=$(run "unshare -U true && echo UNSHARED; unshare -m true && echo UNSHARED-M; mount -t tmpfs x /tmp 2>&1 && echo MOUNTED; python3 -c 'import os; os.unshare(os.CLONE_NEWUSER); print(\"PY-UNSHARED\")' 2>&1; python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); p = ctypes.create_string_buffer(120); fd = c.syscall(425, 8, p); print(\"IO_URING-UNSHARED\" if fd >= 0 else \"io_uring errno %d\" % ctypes.get_errno())'; echo end")
if ! echo "$out" | grep -q '^end$'; then
	bad "the namespace probe did not run: $out"
elif echo "$out" | grep -q 'UNSHARED\|MOUNTED' || ! echo "$out" | grep -qx 'io_uring errno 1'; then
	bad "a job made a namespace or a mount: $out"
else
	ok "unshare (also from python), mount, io_uring: refused"
fi
out=$(run "python3 -c 'import socket; s=socket.socket(); s.settimeout(3); s.connect((\"127.0.0.1\", $port)); print(\"CONNECTED\")' 2>&1; ip -o link 2>/dev/null | wc -l; echo end")
if ! echo "$out" | grep -q '^end$'; then
	bad "the network probe did not run: $out"
elif echo "$out" | grep -q CONNECTED; then
	bad "a job reached cnlabd on the node's loopback: $out"
else
	ok "a job has its own network: cnlabd's port on the node is out of reach"
fi

# --- two users, two ranges ---------------------------------------------------
api POST /v1/users '{"name":"bob","password":"bob-password-1"}' >/dev/null
api POST "/v1/projects/$proj/members" '{"user":"bob","role":"member"}' >/dev/null
btok=$(login bob bob-password-1)
read -r bjob bob_uid <<<"$(sleeper "$btok")"
[ -n "$bob_uid" ] && [ "$bob_uid" -ge 1000000 ] && [ "$bob_uid" != "$host_uid" ] &&
	[ $(((bob_uid - host_uid) % 65536)) = 0 ] &&
	ok "another user's work runs in another id range ($bob_uid vs $host_uid)" ||
	bad "bob's uid '$bob_uid' vs admin's '$host_uid'"
curl -sS -X POST -H "Authorization: Bearer $btok" "$url/v1/jobs/$bjob/cancel" >/dev/null

# --- the job's folder ----------------------------------------------------------
work=$tmp/data/agent/jobs
out=$(run "echo hi > /workspace/f; sleep 2")
# Between the jobs nothing of other tenants is listable.
[ "$(stat -c %a "$work")" = 711 ] && ok "jobs/ is 0711: no tenant lists another's job" ||
	bad "jobs/ mode $(stat -c %a "$work")"

# --- the shim cannot be unloaded ------------------------------------------------
# A second agent (an A100 node) mounts the test programs where the job can
# run them; the all-in-one's agent has no such mount.
sys=$(api GET /v1/projects | jq -r '.items[] | select(.name=="system") | .id')
# The agent joins with a one-time join token made for its node name.
jointok() { api POST /v1/nodes/join-tokens "{\"node\":\"$1\"}" | jq -r .token; }
tests_dir=$(dirname "$(dirname "$shimtest")")
mkdir -m 1777 "$tmp/scratch"
sneak=$((20000 + RANDOM % 20000)) # a port the server opens on 0.0.0.0
CNLAB_AGENT_TOKEN=$(jointok "probe-$$") "$agent" --server "$url" --name "probe-$$" --gpus fake:1xA100-80GB \
	--work-dir "$tmp/probe" --shim "$shim" --pids-max 64 \
	--server-command "python3 -m http.server 0 --bind 0.0.0.0 >/dev/null 2>&1 & python3 -m http.server $sneak --bind 0.0.0.0 >/dev/null 2>&1 & exec python3 -m http.server \$CNLAB_PORT --bind 127.0.0.1 --directory /workspace" \
	--mounts "$tests_dir:$tests_dir:ro,$tmp/scratch:/scratch" \
	>"$tmp/probe.out" 2>"$tmp/probe.err" &
probe=$!
for _ in $(seq 100); do grep -q msg=registered "$tmp/probe.err" && break; sleep 0.1; done
# 30 GiB on a driver of 80: the fake alone grants it...
big=32212254720
host=$(printf 'alloc %s\nexit\n' $big | env -u LD_PRELOAD CNL_FAKE_MEM=85899345920 "$shimtest" repl 2>&1)
echo "$host" | grep -qx 'ok 0' && ok "control: without the shim the fake driver grants 30 GiB" || bad "control: $host"
# ... and a 25% A100 slice (20 GB) must not, LD_PRELOAD and CNLAB_REGION
# unset or not (the shim took the region from the environment alone, so
# unsetting it ran the program with no quota).
jq -n --arg c "unset LD_PRELOAD; grep -c libcnlab-cuda /proc/self/maps; printf 'alloc $big\nexit\n' | env -u LD_PRELOAD -u CNLAB_REGION CNL_FAKE_MEM=85899345920 $shimtest repl; echo end" \
	'{command:$c,gpu:"a100-25"}' |
	curl -sS -X POST -H "Authorization: Bearer $tok" -d @- "$url/v1/projects/$proj/jobs" >"$tmp/job.json"
job=$(jq -r .id "$tmp/job.json")
for _ in $(seq 300); do
	state=$(api GET "/v1/jobs/$job" | jq -r .state)
	case $state in succeeded | failed | cancelled) break ;; esac
	sleep 0.2
done
out=$(api GET "/v1/jobs/$job/logs" | jq -r '.items[].data')
if ! echo "$out" | grep -q '^end$'; then
	bad "the shim probe did not run: $state $out $(api GET "/v1/jobs/$job")"
elif echo "$out" | grep -qx 'fail 2' && ! echo "$out" | grep -qx 'ok 0' &&
	[ "$(echo "$out" | sed -n 1p)" -ge 1 ]; then
	ok "LD_PRELOAD and CNLAB_REGION unset: the shim still loads (ld.so.preload), finds its region (/etc/cnlab/region) and refuses 30 GiB on a 20 GB slice"
else
	bad "a job escaped its VRAM quota: $out"
fi

# running_url SERVER: wait for the server to run; print its URL ("" if it
# did not come up).
running_url() {
	local u=
	for _ in $(seq 150); do
		u=$(api GET "/v1/servers/$1" | jq -r 'select(.state=="running") | .url // empty')
		[ -n "$u" ] && break
		sleep 0.2
	done
	echo "$u"
}

# A server: reached through its URL only.
srv=$(api POST "/v1/projects/$proj/servers" '{"name":"nb","image":"host","profile":"a100-50pct"}' | jq -r .id)
surl=$(running_url "$srv")
# The proxy passes the path whole (/s/ID/...) and http.server knows no
# prefix: the file lies where that path leads.
mkdir -p "$tmp/probe/workspaces/$srv/s/$srv"
echo hello-notebook >"$tmp/probe/workspaces/$srv/s/$srv/hello.txt" 2>/dev/null
got=
for _ in $(seq 50); do
	got=$(curl -sS --max-time 5 -H "Authorization: Bearer $tok" "${surl%%\?*}hello.txt" 2>/dev/null) &&
		[ "$got" = hello-notebook ] && break
	sleep 0.2
done
[ "$got" = hello-notebook ] && ok "the server answers at its URL, through cnlabd's proxy" ||
	bad "server URL '$surl': '$got' $(api GET "/v1/servers/$srv")"
node_ip=$(hostname -I 2>/dev/null | awk '{print $1}')
reached=
for h in 127.0.0.1 $node_ip; do
	curl -sS --max-time 3 -o /dev/null "http://$h:$sneak/" 2>/dev/null && reached="$reached $h"
done
if ! pgrep -f "http.server $sneak --bind 0.0.0.0" >/dev/null; then
	bad "the server's own listener on $sneak is not running"
elif [ -n "$surl" ] && [ -z "$reached" ]; then
	ok "a port the server opens on 0.0.0.0 is not reachable from the node ($sneak)"
else
	bad "the server's own port $sneak answered on:$reached"
fi
api POST "/v1/servers/$srv/stop" >/dev/null

# The all-in-one's server runs the default command: without JupyterLab,
# cnlab-notebook.py, which answers its token's holder only; and idle
# connections held from another address do not lock its user out.
asrv=$(api POST "/v1/projects/$proj/servers" '{"name":"nb2","image":"host","profile":"h100-25pct"}' | jq -r .id)
aurl=$(running_url "$asrv")
code() { curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "$1" 2>/dev/null; }
for _ in $(seq 50); do [ "$(code "$aurl")" = 200 ] && break; sleep 0.2; done
[ "$(code "$aurl")" = 200 ] && [ "$(code "${aurl%%\?*}")" = 401 ] &&
	[ "$(code "${aurl%%\?*}?token=0123456789abcdef0123456789abcdef")" = 401 ] &&
	ok "the notebook answers its token only (200 with, 401 without or wrong)" ||
	bad "notebook token: $aurl $(code "$aurl") $(code "${aurl%%\?*}")"
# The forwarder (node loopback) checks nothing itself: the notebook does.
fport=$(jq -r .port "$tmp/data/agent/state/$asrv.json")
[ "$(code "http://127.0.0.1:$fport/")" = 403 ] &&
	ok "on the forwarder's loopback port, the notebook still wants its token (403)" ||
	bad "forwarder port $fport without token: $(code "http://127.0.0.1:$fport/")"
python3 -c '
import socket, sys, time
held = []
for i in range(300):
    try:
        c = socket.socket()
        c.bind(("127.0.0.2", 0))
        c.settimeout(2)
        c.connect(("127.0.0.1", int(sys.argv[1])))
        held.append(c)
    except OSError:
        pass
open(sys.argv[2], "w").write(str(len(held)))
time.sleep(20)
' "$fport" "$tmp/held" &
holder=$!
for _ in $(seq 100); do [ -s "$tmp/held" ] && break; sleep 0.1; done
[ "$(code "$aurl")" = 200 ] && ok "300 idle connections held on the forwarder do not lock the user out of the proxy" ||
	bad "server locked out by $(cat "$tmp/held") idle connections"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
api POST "/v1/servers/$asrv/stop" >/dev/null

# A fork bomb stays in its workload: the probe agent allows 64 processes.
out=$(run "python3 -c '
import os, time
n = 0
for i in range(200):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    except OSError:
        break
print(\"forked\", n)
'" "$tok" a100-25)
n=$(echo "$out" | sed -n 's/^forked \([0-9]*\)$/\1/p')
[ -n "$n" ] && [ "$n" -lt 64 ] && [ "$n" -gt 10 ] &&
	ok "a fork bomb stops at the workload's pids limit ($n processes)" || bad "pids: $out"

# A container that cannot be made (a mount source gone) fails its job with
# the runtime's reason; the node stays healthy and runs the next one.
rm -rf "$tmp/scratch"
out=$(run 'echo should-not-run' "$tok" a100-25)
state=$(cat "$tmp/state")
if [ "$state" = failed ] && echo "$out" | grep -q "$tmp/scratch" && ! echo "$out" | grep -q should-not-run; then
	ok "a container that cannot be made fails its job, naming the cause"
else
	bad "broken mount: $state $out"
fi
mkdir -m 1777 "$tmp/scratch"
out=$(run 'echo next-one' "$tok" a100-25)
state=$(cat "$tmp/state")
[ "$state" = succeeded ] && echo "$out" | grep -q next-one &&
	ok "the node runs the next job" || bad "after the broken mount: $state $out"
kill "$probe" 2>/dev/null
wait "$probe" 2>/dev/null

# --- run_dir: bundles and crun's state on a tmpfs -------------------------------
# A second node whose agent keeps each container's bundle and crun's state
# in run_dir (a tmpfs here; the cleanup unmounts it): the jobs placed there
# (the all-in-one's node cordoned) are the same containers, and what it
# made for them goes with them.
aio_node=$(api GET /v1/nodes | jq -r '.items[0].name')
mkdir -p "$tmp/run" && mount -t tmpfs -o mode=0711,size=16m cnlab-test "$tmp/run"
rd_tok=$(api POST /v1/nodes/join-tokens '{"node":"rd"}' | jq -r .token)
CNLAB_AGENT_TOKEN=$rd_tok "$agent" --server "$url" --name rd --gpus fake:2xH100-80GB-SXM \
	--work-dir "$tmp/rd" --run-dir "$tmp/run/agent" >"$tmp/rd.out" 2>&1 &
rd_pid=$!
for _ in $(seq 100); do grep -q 'msg=registered' "$tmp/rd.out" && break; sleep 0.1; done
api PATCH "/v1/nodes/$aio_node" '{"state":"cordoned"}' >/dev/null
read -r job host_uid <<<"$(sleeper "$tok")"
node=$(api GET "/v1/jobs/$job" | jq -r '.node // .node_name // empty')
if [ -n "$host_uid" ] && [ -f "$tmp/run/agent/bundles/$job/config.json" ] &&
	[ -d "$tmp/run/agent/crun/$job" ] && [ ! -e "$tmp/rd/bundles/$job" ] && [ ! -e "$tmp/rd/crun/$job" ]; then
	ok "run_dir holds the container's bundle and crun's state (not work_dir)"
else
	bad "run_dir: uid '$host_uid' node '$node' run: $(ls -R "$tmp/run" | head -20) work: $(ls "$tmp/rd/bundles" "$tmp/rd/crun" 2>&1)"
fi
api POST "/v1/jobs/$job/cancel" >/dev/null
out=$(run 'grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status; id -u; unshare -U true && echo unshared; touch /x 2>/dev/null && echo wrote-root; mount -t tmpfs x /tmp 2>/dev/null && echo mounted; echo done')
state=$(cat "$tmp/state")
if [ "$state" = succeeded ] && echo "$out" | grep -qx 'Seccomp:	2' && echo "$out" | grep -qx 'NoNewPrivs:	1' &&
	echo "$out" | grep -qx 'CapEff:	0000000000000000' && echo "$out" | grep -qx 1000 &&
	! echo "$out" | grep -qE '^(unshared|wrote-root|mounted)$' && echo "$out" | grep -qx done; then
	ok "with run_dir the job is the same container: uid 1000, seccomp, no_new_privs, read-only root, unshare refused"
else
	bad "run_dir container: $state $out"
fi
for _ in $(seq 100); do
	[ -z "$(find "$tmp/run/agent" -mindepth 2)" ] && break
	sleep 0.1
done
[ -z "$(find "$tmp/run/agent" -mindepth 2)" ] && [ -d "$tmp/run/agent/bundles" ] &&
	ok "each bundle and crun state in run_dir goes with its workload" ||
	bad "left in run_dir: $(ls -R "$tmp/run/agent")"
kill "$rd_pid" 2>/dev/null
wait "$rd_pid" 2>/dev/null
api PATCH "/v1/nodes/$aio_node" '{"state":"up"}' >/dev/null

# --- the CDI spec ----------------------------------------------------------------
cdi=$tmp/data/agent/cdi/cnlab.json
jq -e '.kind == "cnlab.io/gpu" and .cdiVersion == "0.6.0" and
	([.devices[].name] == ["0", "1", "all"]) and
	(.devices[0].containerEdits.env == ["CUDA_VISIBLE_DEVICES=0"]) and
	(.devices[2].containerEdits.env == ["CUDA_VISIBLE_DEVICES=0,1"])' "$cdi" >/dev/null &&
	ok "the agent writes its GPUs as a CDI spec" || bad "CDI spec: $(cat "$cdi" 2>&1)"

# --- the agent's refusals -------------------------------------------------------
export CNLAB_AGENT_TOKEN=x
"$agent" --server "$url" --work-dir "$tmp/a1" --runtime /nonexistent/crun >"$tmp/a1.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "needs the OCI runtime '/nonexistent/crun'" "$tmp/a1.out" &&
	ok "without its runtime the agent refuses to start, naming it" || bad "no runtime: rc=$rc $(cat "$tmp/a1.out")"
"$agent" --server "$url" --work-dir "$tmp/a2" --isolation bare >"$tmp/a2.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q 'never runs as root' "$tmp/a2.out" &&
	ok "bare isolation as root without run_as_uid or map_users is refused" || bad "bare root: rc=$rc $(cat "$tmp/a2.out")"
"$agent" --server "$url" --work-dir "$tmp/a3" --isolation chroot >"$tmp/a3.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q 'isolation' "$tmp/a3.out" &&
	ok "an unknown isolation is a usage error naming the setting" || bad "isolation chroot: rc=$rc $(cat "$tmp/a3.out")"

for m in "$tmp:/./etc" "$tmp://usr/x" "$tmp:/opt" "$tmp:/opt/cnlab/x" "$tmp:/data/"; do
	"$agent" --server "$url" --work-dir "$tmp/a4" --mounts "$m" >"$tmp/a4.out" 2>&1
	rc=$?
	[ "$rc" != 0 ] && grep -q 'mounts:' "$tmp/a4.out" && ok "mounts $m is refused" ||
		bad "mounts $m: rc=$rc $(cat "$tmp/a4.out")"
done

# run_dir must be the agent's alone, and crossable by the runtime.
mkdir -m 0777 "$tmp/rd-open"
"$agent" --server "$url" --work-dir "$tmp/a5" --run-dir "$tmp/rd-open" >"$tmp/a5.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "run_dir $tmp/rd-open: must be a folder" "$tmp/a5.out" &&
	ok "a run_dir others may write is refused" || bad "run_dir 0777: rc=$rc $(cat "$tmp/a5.out")"
mkdir -m 0700 "$tmp/rd-closed"
"$agent" --server "$url" --work-dir "$tmp/a6" --run-dir "$tmp/rd-closed/r" >"$tmp/a6.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "$tmp/rd-closed must be searchable by all" "$tmp/a6.out" &&
	ok "a run_dir the container's root cannot reach is refused, naming the folder" || bad "run_dir 0700 parent: rc=$rc $(cat "$tmp/a6.out")"
"$agent" --server "$url" --work-dir "$tmp/a8" --run-dir /run/cnlab-agent/x >"$tmp/a8.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "run_dir /run/cnlab-agent/x: not /run/cnlab-agent or below it" "$tmp/a8.out" &&
	ok "a run_dir below the workloads' view of work_dir is refused" || bad "run_dir in the view: rc=$rc $(cat "$tmp/a8.out")"
"$agent" --server "$url" --work-dir "$tmp/a7" --run-dir rel/dir >"$tmp/a7.out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "run_dir rel/dir: want an absolute path" "$tmp/a7.out" &&
	ok "a relative run_dir is refused" || bad "run_dir relative: rc=$rc $(cat "$tmp/a7.out")"

"$cnlabd" --agent-run-dir "$tmp/run" >"$tmp/c1.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q -- '--agent-run-dir is for the embedded agent of --all-in-one' "$tmp/c1.out" &&
	ok "cnlabd's --agent-run-dir without --all-in-one is a usage error" || bad "--agent-run-dir alone: rc=$rc $(cat "$tmp/c1.out")"

# crun 1.8 chowns its stdio to the container's user: the launcher gives it
# a pipe, so the node's /dev/null stays root's after all these containers.
[ "$(stat -c %u:%g /dev/null)" = 0:0 ] && ok "the node's /dev/null still belongs to root" ||
	bad "/dev/null is now $(stat -c %u:%g /dev/null)"

[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" -eq 0 ]
