#!/usr/bin/env bash
# ssh_bench.sh - what `cnlab server ssh` costs against plain OpenSSH in the
# same run (issue 24):
#   connect: `ssh cnlab-NAME true` through the platform (ssh -> cnlab
#            ssh-proxy -> cnlabd -> the agent's tunnel -> sshd -i in the
#            server's container) against `ssh -p PORT 127.0.0.1 true` to
#            a local sshd started for the run; the median (and min, max)
#            of N each, interleaved
#   scp:     SIZE MiB (default 1024) of random bytes copied up, both ways,
#            through the platform into the server's /workspace against the
#            same to the local sshd; MB/s
# Real all-in-one on a fake H100, the real CLI, OpenSSH from Debian (the
# same ssh, scp and sshd binaries on both paths, the same key type).
#
#   bench/ssh_bench.sh [BUILD_DIR] [N] [SIZE_MIB]
set -u
build=${1:-build}
n=${2:-20}
size=${3:-1024}
cnlabd=$(realpath "$build/src/server/cnlabd")
cnlab=$(realpath "$build/src/cli/cnlab")
for b in "$cnlabd" "$cnlab" /usr/sbin/sshd; do
	[ -x "$b" ] || {
		echo "ssh_bench: $b is missing (build, or scripts/bootstrap)" >&2
		exit 1
	}
done
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
users_made=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ -z "$users_made" ] || userdel "$users_made" 2>/dev/null
	for m in $(grep " $tmp" /proc/mounts | cut -d' ' -f2 | sort -r); do umount -l "$m" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD XDG_CONFIG_HOME

HOME=$tmp/home "$cnlabd" --all-in-one --data-dir "$tmp/data" --listen 127.0.0.1:0 \
	--gpus fake:1xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
pids+=($!)
for _ in $(seq 200); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	echo "ssh_bench: the all-in-one did not start: $(cat "$tmp/err")" >&2
	exit 1
}
export CNLAB_CONFIG=$tmp/cli.json
"$cnlab" login --server "$url" --user admin --password-stdin <"$tmp/data/admin.password" >/dev/null
mkdir -m 700 "$tmp/keys"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/keys/id"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/keys/host"
"$cnlab" ssh-key add "$tmp/keys/id.pub" >/dev/null
"$cnlab" server create --name bench --image host --profile h100-25pct --storage 20gb >/dev/null ||
	{
		echo "ssh_bench: server create failed" >&2
		exit 1
	}
"$cnlab" server ssh-config bench >"$tmp/ssh.cfg"

# The direct path: a local sshd on a loopback port, the same key, logging
# in an ordinary user made for the run whose shell is /bin/sh, as the
# container's user has (root's own shell start-up files would weigh on
# the baseline).
buser=cnlbench$$
useradd -M -p '*' -d "$tmp/direct" -s /bin/sh "$buser" || {
	echo "ssh_bench: cannot add the user $buser" >&2
	exit 1
}
users_made=$buser
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -m 755 "$tmp/direct"
cp "$tmp/keys/id.pub" "$tmp/direct/authorized_keys"
chown "$buser" "$tmp/direct"
cat >"$tmp/direct/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $tmp/keys/host
AuthorizedKeysFile $tmp/direct/authorized_keys
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
Subsystem sftp internal-sftp
EOF
mkdir -p /run/sshd
/usr/sbin/sshd -D -e -f "$tmp/direct/sshd_config" 2>"$tmp/sshd.log" &
pids+=($!)
for _ in $(seq 100); do
	(echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
	sleep 0.05
done
# The same client settings on both paths (the direct one reads no
# /etc/ssh/ssh_config either: -F).
opts=(-i "$tmp/keys/id" -o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR)
direct=(-F /dev/null -p "$port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "${opts[@]}")

now_ms() { date +%s%3N; }
# median LIST...: the middle value, and min and max
stats() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {printf "median %d ms (min %d, max %d, n %d)", v[int((NR + 1) / 2)], v[1], v[NR], NR}'; }
platform=() local_=()
for _ in $(seq "$n"); do
	t0=$(now_ms)
	ssh -F "$tmp/ssh.cfg" "${opts[@]}" cnlab-bench true || echo "platform ssh failed" >&2
	platform+=($(($(now_ms) - t0)))
	t0=$(now_ms)
	ssh "${direct[@]}" "$buser@127.0.0.1" true || echo "direct ssh failed" >&2
	local_+=($(($(now_ms) - t0)))
done
echo "connect, ssh HOST true:"
echo "  through the platform: $(stats "${platform[@]}")"
echo "  local sshd (baseline): $(stats "${local_[@]}")"

head -c $((size << 20)) /dev/urandom >"$tmp/blob"
mbs() { awk -v b=$((size << 20)) -v ms="$1" 'BEGIN {printf "%.1f MB/s (%.2f s)", b / 1e6 / (ms / 1000), ms / 1000}'; }
t0=$(now_ms)
scp -q -F "$tmp/ssh.cfg" "${opts[@]}" "$tmp/blob" cnlab-bench:/workspace/blob || echo "platform scp failed" >&2
up=$(($(now_ms) - t0))
t0=$(now_ms)
scp -q -F "$tmp/ssh.cfg" "${opts[@]}" cnlab-bench:/workspace/blob "$tmp/blob.back" || echo "platform scp down failed" >&2
down=$(($(now_ms) - t0))
cmp -s "$tmp/blob" "$tmp/blob.back" || echo "platform scp: the bytes differ" >&2
rm -f "$tmp/blob.back"
mkdir "$tmp/direct/files"
chown "$buser" "$tmp/direct/files"
t0=$(now_ms)
scp -q -F /dev/null -P "$port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "${opts[@]}" \
	"$tmp/blob" "$buser@127.0.0.1:$tmp/direct/files/blob" || { echo "direct scp failed: $(tail -3 "$tmp/sshd.log")" >&2; }
dup=$(($(now_ms) - t0))
t0=$(now_ms)
scp -q -F /dev/null -P "$port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "${opts[@]}" \
	"$buser@127.0.0.1:$tmp/direct/files/blob" "$tmp/blob.back" || echo "direct scp down failed" >&2
ddown=$(($(now_ms) - t0))
echo "scp of $size MiB:"
echo "  through the platform: up $(mbs $up), down $(mbs $down)"
echo "  local sshd (baseline): up $(mbs $dup), down $(mbs $ddown)"
echo "cnlabd CPU over the run: $(ps -o times= -p "${pids[0]}") s; load $(cut -d' ' -f1-3 /proc/loadavg)"
