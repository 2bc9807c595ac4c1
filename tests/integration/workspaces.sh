#!/usr/bin/env bash
# workspaces.sh - a server's /workspace is a volume of the size it asked
# for, against a real all-in-one cnlabd and real agents (crun, real loop
# devices, real ext4 images, the real CLI); each promise tried the way a
# tenant who wants more would try it:
#   - cnlab server create --storage 1gb: /workspace is a 1 GB ext4 volume,
#     a sparse image loop-mounted nosuid,nodev on the node
#   - the tenant writes 1.5 GiB from inside the container: ENOSPC after a
#     little under 1 GB; the node's agent, the node and a job running
#     beside it are fine, the job's files untouched
#   - outside /workspace nothing is writable (/, /usr, /etc, /opt, /var,
#     /home, /root, /srv, /run/cnlab-agent), nothing lands on the node
#   - the agent restarted while the server runs: the mount stays, once,
#     one loop device, the server still answers
#   - a job started while the volume is mounted holds none of it
#   - stop: unmounted, the image kept; start: mounted once, from one loop
#     device, and a file written before the stop is there
#   - started the moment it is stopped, six times over: each start runs
#   - killed while its agent is away: the agent back reports it and
#     unmounts the volume
#   - cnlab server delete: the image, the folder and the mount are gone
#   - a server without a size (storage 0) keeps a plain folder
#   - a node whose disk is full: the server fails saying so, nothing is
#     left half-made, and the node runs the next job
set -u
cnlabd=$1
agent=$2
cnlab=$3
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
probe=
tiny=
# unmount_tmp: what this test left mounted under $tmp (a volume of a
# server still running when the test ends stays mounted for the agent's
# next start; the test's go with it), deepest first.
unmount_tmp() {
	awk -v t="$tmp/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo |
		sort -r | xargs -r -n1 umount -l
}
cleanup() {
	[ -n "$probe" ] && kill "$probe" 2>/dev/null && wait "$probe" 2>/dev/null
	[ -n "$tiny" ] && kill "$tiny" 2>/dev/null && wait "$tiny" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	unmount_tmp
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

for p in crun mkfs.ext4 losetup; do
	command -v $p >/dev/null || {
		echo "FAIL $p is not installed (scripts/bootstrap installs it)"
		exit 1
	}
done

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
pw=$(cat "$tmp/data/admin.password")
login() { curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$url/v1/auth/login" | jq -r .token; }
tok=$(login admin "$pw")
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
proj=$(api GET /v1/projects | jq -r '.items[] | select(.name=="default") | .id')
cli() { CNLAB_CONFIG=$tmp/cli.json CNLAB_SERVER=$url CNLAB_TOKEN=$tok "$cnlab" "$@" --project default; }

# The tenant's side: the servers of the probe agent run this script.
mkdir -m 755 "$tmp/scripts"
mkdir -m 1777 "$tmp/scratch"
cat >"$tmp/scripts/server.sh" <<'EOF'
cd /workspace || exit 1
echo start >>starts.log
if [ -f marker ]; then
	echo "second start: $(cat marker)" >second.txt
else
	echo kept-across-stop >marker
	grep ' /workspace ' /proc/self/mountinfo >mountinfo.txt
	for d in / /usr /etc /opt /var /home /root /srv /run/cnlab-agent /dev; do
		(echo x >"$d/cnlab-attack") 2>/dev/null && echo "WROTE $d"
	done >outside.txt
	echo done >>outside.txt
	# More than the volume holds; the report goes after the file, so
	# that there is room for it.  Not before the test has seen the
	# image still sparse (it says so in /scratch).
	while [ ! -f /scratch/fill-go ]; do sleep 0.1; done
	python3 - >fill.txt 2>&1 <<'PY'
import errno, os
n, why = 0, "no error"
buf = b"x" * (1 << 20)
f = open("/workspace/fill", "wb", buffering=0)
try:
    while n < 1536 << 20:
        n += f.write(buf)
    os.fsync(f.fileno())
except OSError as e:
    why = errno.errorcode.get(e.errno, str(e.errno))
f.close()
os.unlink("/workspace/fill")
print("wrote", n, why)
PY
	echo ready >ready.txt
fi
# Requests come through cnlabd's proxy with their /s/ID/ prefix.
root=$(mktemp -d)
mkdir -p "$root$(dirname "${CNLAB_BASE_URL%/}")"
ln -s /workspace "$root${CNLAB_BASE_URL%/}"
exec python3 -m http.server "$CNLAB_PORT" --bind 127.0.0.1 --directory "$root" >/dev/null 2>&1
EOF

# A second node, an A100, whose servers run the script above.
sys=$(api GET /v1/projects | jq -r '.items[] | select(.name=="system") | .id')
# The agent joins with a one-time join token made for its node name.
jointok() { api POST /v1/nodes/join-tokens "{\"node\":\"$1\"}" | jq -r .token; }
start_probe() {
	CNLAB_AGENT_TOKEN=$(jointok "probe-$$") "$agent" --server "$url" --name "probe-$$" --gpus fake:1xA100-80GB \
		--work-dir "$tmp/probe" --server-command "sh /scripts/server.sh" \
		--mounts "$tmp/scripts:/scripts:ro,$tmp/scratch:/scratch" \
		>>"$tmp/probe.out" 2>>"$tmp/probe.err" &
	probe=$!
	for _ in $(seq 100); do
		[ "$(grep -c msg=registered "$tmp/probe.err")" -ge "$1" ] && break
		sleep 0.1
	done
}
start_probe 1
grep -q 'workspace volumes: ext4 images on loop devices' "$tmp/probe.err" &&
	ok "the agent says how it makes volumes" || bad "no word on volumes: $(head -5 "$tmp/probe.err")"

# wait_state SERVER STATE: wait for the server to be STATE; its document.
wait_state() {
	local doc=
	for _ in $(seq 300); do
		doc=$(api GET "/v1/servers/$1")
		[ "$(echo "$doc" | jq -r .state)" = "$2" ] && break
		sleep 0.2
	done
	echo "$doc"
}
# wait_file PATH: wait for a file the tenant writes last.
wait_file() {
	for _ in $(seq 600); do
		[ -s "$1" ] && return 0
		sleep 0.2
	done
	return 1
}
# mounts_on DIR: how many times DIR is mounted on the node.
mounts_on() { awk -v d="$1" '$5 == d' /proc/self/mountinfo | wc -l; }
# loops_of IMAGE: how many loop devices hold IMAGE.
loops_of() { losetup -j "$1" | wc -l; }
# job_end JOB: wait for the job's end; its state, then its output.
job_end() {
	local state=
	for _ in $(seq 600); do
		state=$(api GET "/v1/jobs/$1" | jq -r .state)
		case $state in succeeded | failed | cancelled) break ;; esac
		sleep 0.2
	done
	echo "$state"
	api GET "/v1/jobs/$1/logs" | jq -r '.items[].data'
}

# --- a neighbour: a job on the same node, writing in its own folder --------
nb=$(jq -n '{command:"while [ ! -f /scratch/stop ]; do date >>/workspace/n; sleep 0.2; done; echo job-ok $(wc -l </workspace/n)",gpu:"a100-25"}' |
	curl -sS -X POST -H "Authorization: Bearer $tok" -d @- "$url/v1/projects/$proj/jobs" | jq -r .id)

# --- a 1 GB server -------------------------------------------------------------
cli server create --name ws1 --image host --profile a100-50pct --storage 1gb >"$tmp/create.out" 2>&1
rc=$?
srv=$(api GET "/v1/projects/$proj/servers" | jq -r '.items[] | select(.name=="ws1") | .id')
surl=$(api GET "/v1/servers/$srv" | jq -r '.url // empty')
[ $rc = 0 ] && [ -n "$surl" ] && ok "cnlab server create --storage 1gb: running" ||
	bad "create: rc=$rc $(cat "$tmp/create.out") $(api GET "/v1/servers/$srv")"
ws=$tmp/probe/workspaces/$srv
img=$tmp/probe/volumes/$srv.img
fs=$(awk -v d="$ws" '$5 == d {print $6, $(NF-2)}' /proc/self/mountinfo)
[ "$(stat -c %s "$img" 2>/dev/null)" = 1000000000 ] && [ "$(du -k "$img" | cut -f1)" -lt 65536 ] &&
	ok "its image is 1 GB, sparse ($(du -k "$img" | cut -f1) KiB on the node's disk)" ||
	bad "image: $(ls -ls "$img" 2>&1)"
[ "$(mounts_on "$ws")" = 1 ] && [ "$(loops_of "$img")" = 1 ] &&
	echo "$fs" | grep -q 'nosuid' && echo "$fs" | grep -q 'nodev' && echo "$fs" | grep -q 'ext4' &&
	ok "mounted once on the node from one loop device: ext4, nosuid, nodev" ||
	bad "mount: '$fs' $(mounts_on "$ws") $(losetup -j "$img")"
[ "$(stat -c %a "$ws")" = 700 ] && [ "$(stat -c %u "$ws")" -ge 1000000 ] &&
	ok "its root is 0700 and the tenant's (host uid $(stat -c %u "$ws"))" ||
	bad "root of the volume: $(stat -c '%a %u' "$ws")"

# --- the tenant fills it ---------------------------------------------------------
touch "$tmp/scratch/fill-go"
wait_file "$ws/ready.txt" || bad "the tenant's script did not finish: $(ls -la "$ws" 2>&1)"
read -r _ wrote why <"$ws/fill.txt"
if [ "$why" = ENOSPC ] && [ "$wrote" -gt 850000000 ] && [ "$wrote" -le 1000000000 ]; then
	ok "1.5 GiB written from inside: ENOSPC after $wrote bytes"
else
	bad "fill: $(cat "$ws/fill.txt")"
fi
grep -q nosuid "$ws/mountinfo.txt" && grep -q nodev "$ws/mountinfo.txt" &&
	ok "inside the container /workspace is nosuid,nodev" || bad "inside: $(cat "$ws/mountinfo.txt")"
if ! grep -qx done "$ws/outside.txt"; then
	bad "the write probe did not run: $(cat "$ws/outside.txt")"
elif grep -q WROTE "$ws/outside.txt" || ls /cnlab-attack /usr/cnlab-attack /etc/cnlab-attack \
	/opt/cnlab-attack /srv/cnlab-attack "$tmp/probe/cnlab-attack" 2>/dev/null | grep -q .; then
	bad "the tenant wrote outside /workspace: $(cat "$ws/outside.txt")"
else
	ok "outside /workspace nothing is writable (/, /usr, /etc, /opt, /var, /home, /root, /srv, /dev)"
fi
kill -0 "$probe" 2>/dev/null &&
	[ "$(api GET /v1/nodes | jq -r --arg n "probe-$$" '.items[] | select(.name==$n) | .state')" = up ] &&
	ok "the node is up and its agent runs" || bad "node: $(api GET /v1/nodes) $(tail -3 "$tmp/probe.err")"
touch "$tmp/scratch/stop"
{
	read -r state
	out=$(cat)
} < <(job_end "$nb")
n=$(echo "$out" | sed -n 's/^job-ok \([0-9]*\)$/\1/p')
[ "$state" = succeeded ] && [ -n "$n" ] && [ "$n" -gt 0 ] &&
	ok "the job beside it ran on and succeeded, its $n lines intact" || bad "neighbour: $state $out"

# --- another workload's mount namespace does not hold the volume ------------
# Each workload's supervisor makes a mount namespace with a copy of the
# node's mounts; one made while the volume is mounted must not keep it
# alive past its unmount (nor keep its loop device taken).
late=$(jq -n '{command:"while [ ! -f /scratch/stop2 ]; do sleep 0.2; done",gpu:"a100-25"}' |
	curl -sS -X POST -H "Authorization: Bearer $tok" -d @- "$url/v1/projects/$proj/jobs" | jq -r .id)
seen= holding=
for _ in $(seq 150); do
	for p in /proc/[0-9]*; do
		grep -q "$late" "$p/cgroup" 2>/dev/null || continue
		seen="$seen ${p#/proc/}"
		grep -q "$srv" "$p/mountinfo" 2>/dev/null && holding="$holding ${p#/proc/}"
	done
	[ -n "$seen" ] && break
	sleep 0.2
done
[ -n "$seen" ] && [ -z "$holding" ] &&
	ok "a job started beside the server holds none of its volume (processes$seen)" ||
	bad "the job's processes '$seen' hold the volume:$holding"
touch "$tmp/scratch/stop2"
job_end "$late" >/dev/null

# --- the agent restarts while the server runs --------------------------------
kill "$probe"
wait "$probe" 2>/dev/null
start_probe 2
for _ in $(seq 100); do grep -q 're-adopted workload.*'"$srv" "$tmp/probe.err" && break; sleep 0.1; done
got=
for _ in $(seq 50); do
	got=$(curl -sS --max-time 5 "${surl%%\?*}marker?${surl#*\?}" 2>/dev/null) && [ "$got" = kept-across-stop ] && break
	sleep 0.2
done
[ "$(mounts_on "$ws")" = 1 ] && [ "$(loops_of "$img")" = 1 ] && [ "$got" = kept-across-stop ] &&
	ok "agent restarted: the server is adopted, its volume mounted once, it answers" ||
	bad "adoption: mounts $(mounts_on "$ws"), loops $(losetup -j "$img"), answer '$got'"

# --- stop and start ------------------------------------------------------------
api POST "/v1/servers/$srv/stop" >/dev/null
doc=$(wait_state "$srv" stopped)
for _ in $(seq 100); do [ "$(mounts_on "$ws")" = 0 ] && break; sleep 0.1; done
# (Its loop device goes once no mount namespace holds the file system;
# the agent's own workloads hold none of another server's (launch.h), but
# any process of this shared machine that made one meanwhile does.)
[ "$(echo "$doc" | jq -r .state)" = stopped ] && [ "$(mounts_on "$ws")" = 0 ] &&
	[ -f "$img" ] && [ ! -e "$ws/marker" ] &&
	ok "stopped: unmounted from the node, the image kept" ||
	bad "stop: $doc; mounts $(mounts_on "$ws"); $(losetup -j "$img"); $(ls -la "$img" "$ws" 2>&1)"
api POST "/v1/servers/$srv/start" >/dev/null
wait_state "$srv" running >/dev/null
wait_file "$ws/second.txt"
[ "$(cat "$ws/second.txt" 2>/dev/null)" = "second start: kept-across-stop" ] && [ "$(mounts_on "$ws")" = 1 ] &&
	[ "$(loops_of "$img")" = 1 ] &&
	ok "started again: mounted once, one loop device, the file written before the stop is there" ||
	bad "start: $(cat "$ws/second.txt" 2>&1) $(api GET "/v1/servers/$srv")"

# --- stopped and started again at once ---------------------------------------------
# The start is sent the moment cnlabd says stopped, while the node may
# still be clearing the last run away (the Quickstart's user does this):
# every start runs, none fails over what its predecessor left.
starts_ok=0
for i in 1 2 3 4 5 6; do
	n=$(wc -l <"$ws/starts.log")
	api POST "/v1/servers/$srv/stop" >/dev/null
	for _ in $(seq 1500); do
		[ "$(api GET "/v1/servers/$srv" | jq -r .state)" = stopped ] && break
		sleep 0.02
	done
	api POST "/v1/servers/$srv/start" >/dev/null
	st=
	for _ in $(seq 300); do
		[ "$(wc -l <"$ws/starts.log" 2>/dev/null || echo 0)" -gt "$n" ] && break
		st=$(api GET "/v1/servers/$srv" | jq -r .state)
		[ "$st" = failed ] && break
		sleep 0.1
	done
	[ "$(wc -l <"$ws/starts.log" 2>/dev/null || echo 0)" -gt "$n" ] || break
	starts_ok=$i
done
[ "$starts_ok" = 6 ] && [ "$(wait_state "$srv" running | jq -r .state)" = running ] &&
	ok "stopped and started again at once, six times: each start runs" ||
	bad "start right after stop #$((starts_ok + 1)): $st $(api GET "/v1/servers/$srv" | jq -c '{state,message}')"

# --- the server ends while its agent is away ----------------------------------
kill "$probe"
wait "$probe" 2>/dev/null
for p in /proc/[0-9]*; do
	grep -q "$srv" "$p/cgroup" 2>/dev/null && kill -9 "${p#/proc/}" 2>/dev/null
done
start_probe 3
doc=$(wait_state "$srv" failed)
for _ in $(seq 100); do [ "$(mounts_on "$ws")" = 0 ] && break; sleep 0.1; done
[ "$(echo "$doc" | jq -r .state)" = failed ] && [ "$(mounts_on "$ws")" = 0 ] && [ -f "$img" ] &&
	ok "killed while its agent was away: reported when it is back, its volume unmounted, the image kept" ||
	bad "ended while away: $doc; mounts $(mounts_on "$ws"); $(ls -la "$img" 2>&1)"

# --- delete ----------------------------------------------------------------------
cli server delete ws1 >"$tmp/delete.out" 2>&1
rc=$?
for _ in $(seq 100); do [ ! -e "$img" ] && [ ! -e "$ws" ] && break; sleep 0.1; done
[ $rc = 0 ] && [ ! -e "$img" ] && [ ! -e "$img.new" ] && [ ! -e "$ws" ] &&
	[ "$(mounts_on "$ws")" = 0 ] &&
	ok "cnlab server delete: image, folder and mount gone from the node" ||
	bad "delete: rc=$rc $(cat "$tmp/delete.out") $(ls -la "$img" "$ws" 2>&1) $(mounts_on "$ws")"

# --- no size: a plain folder -----------------------------------------------------
srv0=$(api POST "/v1/projects/$proj/servers" '{"name":"ws0","image":"host","profile":"a100-50pct","storage_gb":0}' | jq -r .id)
wait_state "$srv0" running >/dev/null
ws0=$tmp/probe/workspaces/$srv0
wait_file "$ws0/ready.txt"
[ -d "$ws0" ] && [ "$(mounts_on "$ws0")" = 0 ] && [ ! -e "$tmp/probe/volumes/$srv0.img" ] &&
	grep -q '^done$' "$ws0/outside.txt" &&
	ok "storage 0: a plain folder, no volume" || bad "storage 0: $(ls -la "$ws0" "$tmp/probe/volumes" 2>&1)"
api POST "/v1/servers/$srv0/stop" >/dev/null
wait_state "$srv0" stopped >/dev/null
api DELETE "/v1/servers/$srv0" >/dev/null
for _ in $(seq 100); do [ ! -e "$ws0" ] && break; sleep 0.1; done
[ ! -e "$ws0" ] && ok "deleted, its folder goes too" || bad "storage 0 delete: $(ls -la "$ws0" 2>&1)"

# --- a node whose disk is full -----------------------------------------------------
# An L40S node whose work folder is a 40 MiB file system: room for its
# jobs, not for a new volume.
mkdir "$tmp/tiny"
mount -t tmpfs -o size=40m,mode=755 cnl-test-tiny "$tmp/tiny"
CNLAB_AGENT_TOKEN=$(jointok "tiny-$$") "$agent" --server "$url" --name "tiny-$$" --gpus fake:1xL40S \
	--work-dir "$tmp/tiny/agent" >"$tmp/tiny.out" 2>"$tmp/tiny.err" &
tiny=$!
for _ in $(seq 100); do grep -q msg=registered "$tmp/tiny.err" && break; sleep 0.1; done
srvf=$(api POST "/v1/projects/$proj/servers" '{"name":"full","image":"host","profile":"l40s-block","storage_gb":1}' | jq -r .id)
doc=$(wait_state "$srvf" failed)
msg=$(echo "$doc" | jq -r '.message // empty')
[ "$(echo "$doc" | jq -r .state)" = failed ] && echo "$msg" | grep -q "disk is full" &&
	ok "full disk: the server fails saying so ($msg)" || bad "full disk: $doc $(grep -i volume "$tmp/tiny.err")"
[ -z "$(ls -A "$tmp/tiny/agent/volumes" 2>&1)" ] &&
	ok "nothing half-made is left" || bad "left: $(ls -la "$tmp/tiny/agent/volumes")"
job=$(jq -n '{command:"echo tiny-ok",gpu:"l40s-10"}' |
	curl -sS -X POST -H "Authorization: Bearer $tok" -d @- "$url/v1/projects/$proj/jobs" | jq -r .id)
{
	read -r state
	out=$(cat)
} < <(job_end "$job")
[ "$state" = succeeded ] && echo "$out" | grep -q tiny-ok &&
	ok "the node stays healthy: the next job runs" || bad "after the full disk: $state $out"

[ "$(stat -c %u:%g /dev/null)" = 0:0 ] || bad "/dev/null is now $(stat -c %u:%g /dev/null)"
[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" -eq 0 ]
